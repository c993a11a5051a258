"""IR -> IR optimization that keeps every result bit for bit: constant folding, dead-code
elimination, loop-invariant hoisting and common-subexpression elimination.

`optimize(program, passes=None)` runs `passes` (names from `PASSES`, in order; `DEFAULT` when None)
and returns a new Program with the same bound buffers, workgroup and name. Why each is exact:

- `fold` evaluates operations of literals with `ops`, the very functions the reference interpreter
  runs, so it computes what the reference would; it simplifies only identities true of every value
  of the type (`x * 1`, `x | 0`, `x - +0.0`, a select of a literal condition, ...), and drops an
  operand (`x * 0` on integers) only when evaluating it has no effect.
- An expression is shared (hoisted out of a loop, or computed once for several uses) only when it
  is *pure*: no atomics, no subgroup operations (their value depends on which lanes are active),
  loads only of buffers nothing in the program writes. Every operation is total (division by zero,
  out-of-bounds loads, large shifts are all defined), so computing a pure value earlier, once, or
  where a branch would have skipped it changes no result.
- `dce` removes only what nothing observes: variables nobody reads (with effect-free values),
  stores to and declarations of workgroup buffers nobody reads, branches a literal condition never
  takes, empty branches and loops, statements after a return. Bound buffers stay even when unused:
  they are the kernel's parameters.

Every walker uses an explicit stack (`drive`), so programs nested `MAX_DEPTH` deep optimize too.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from typing import Callable, Sequence

import numpy as np

from ..errors import CompileError, IRValidationError, shown
from . import nodes as n
from . import ops
from .program import Program, walk
from .recursion import drive
from .types import DataType, _f32_to_bf16, float_to_bits

D = DataType
PASSES = ("fold", "dce", "hoist", "cse")
DEFAULT = ("fold", "dce", "hoist", "cse", "dce")
LEAVES = (n.Lit, n.Var, n.BufLen, n.Builtin)
EFFECTS = (n.Atomic, n.SubgroupBallot, n.SubgroupShuffle, n.SubgroupAdd)  # never removed, moved or shared


def optimize(program: Program, passes: Sequence[str] | None = None) -> Program:
    """`program` rewritten by `passes` (default `DEFAULT`), with the same results bit for bit on
    every backend; an invalid program raises IRValidationError with every diagnostic."""
    from .validate import check, validate

    check(program)
    passes = DEFAULT if passes is None else passes
    if not isinstance(passes, (list, tuple)):  # a set or dict has no order, and passes run in order
        raise IRValidationError(f"passes={shown(passes, 60)} is not a list of pass names. Fix: pass e.g. "
                                f"passes=['fold', 'dce'] (names: {', '.join(PASSES)}), or None for the default.")
    passes = tuple(passes)
    for p in passes:
        if not isinstance(p, str) or p not in PASSES:
            raise IRValidationError(f"unknown optimization pass {shown(p, 60)}. Fix: use names from {', '.join(PASSES)}.")
    ctx = _Context(program)
    entry = program.entry
    for p in passes:
        if p in ("hoist", "cse"):  # they look expressions up by structure
            entry = _hash_consed(entry)
        ctx.refresh(entry)
        entry = _RUN[p](ctx, entry)
    used = {x.buffer for x in walk(entry, distinct=True) if isinstance(x, (n.Load, n.Store, n.Atomic, n.BufLen))}
    buffers = [b for b in program.buffers if not b.is_shared or b.name in used or "dce" not in passes]
    out = Program(buffers, program.workgroup_size, entry, program.name)
    if validate(out):  # a bug of this module's, never the caller's program
        raise CompileError(f"optimizing {program.name!r} gave an invalid program: {validate(out)[0]}. Fix: "
                           "dispatch with DispatchConfig(optimize=False) and report the program.")
    return out


class _Context:
    """What the passes know of the program: buffer declarations, fresh variable names, and (refreshed
    before each pass) the buffers the body writes, its statement index and facts of expressions,
    memoised."""

    def __init__(self, program: Program):
        self.decls = {b.name: b for b in program.buffers}
        self.taken = {x.name for x in walk(program.entry, distinct=True) if isinstance(x, (n.Let, n.Assign, n.Var))}
        self.taken |= {x.var for x in walk(program.entry, distinct=True) if isinstance(x, n.Loop)}
        self.counter = 0

    def refresh(self, entry) -> None:
        self.written = {x.buffer for x in walk(entry, distinct=True) if isinstance(x, (n.Store, n.Atomic))}
        self.memo: dict[int, tuple] = {}
        self.entry, self._index = entry, None

    @property
    def index(self) -> "_Index":
        """The `_Index` of the body the passes now rewrite (built where a pass asks: hoist and cse)."""
        if self._index is None:
            self._index = _Index(self.entry)
        return self._index

    def fresh(self) -> str:
        while True:
            name = f"_v{self.counter}"
            self.counter += 1
            if name not in self.taken:
                self.taken.add(name)
                return name

    def facts(self, e: n.Expr) -> tuple[bool, bool]:
        """(removable: evaluating it has no effect, pure: removable and reads no written buffer), for
        `e` and every node under it (memoised by node, kept alive by the memo)."""
        def fact(x, kids):
            removable = not isinstance(x, EFFECTS) and all(k[1][0] for k in kids)
            pure = removable and all(k[1][1] for k in kids) and not (isinstance(x, n.Load) and x.buffer in self.written)
            return x, (removable, pure)
        return _bottom_up(e, self.memo, fact)[1]

    def shareable(self, e: n.Expr) -> bool:
        return not isinstance(e, LEAVES) and self.facts(e)[1]


class _Index:
    """The statements of a body in preorder (each statement, then those of its bodies) by position:
    where each one's nested statements end, its bodies' position ranges, and for each variable the
    sorted positions of the statements declaring or assigning it. Walkers carry positions, so what a
    loop changes is a binary search rather than a set a statement (deep nests stay linear)."""

    def __init__(self, entry: tuple[n.Node, ...]):
        self.end: list[int] = []  # one past the last statement nested in the one at each position
        self.spans: list[tuple[tuple[int, int], ...]] = []  # its bodies' (first, one past last) positions
        self.sites: dict[str, list[int]] = defaultdict(list)  # variable -> where it is declared or assigned
        self.assign_at: list[int] = []  # positions of the assignments, in order, and their variables
        self.assign_var: list[str] = []
        self.assigns_of: dict[str, list[int]] = defaultdict(list)  # variable -> positions assigning it

        def index(stmts):
            for s in stmts:
                p = len(self.end)
                self.end.append(0)
                self.spans.append(())
                name = s.name if isinstance(s, (n.Let, n.Assign)) else s.var if isinstance(s, n.Loop) else None
                if name is not None:
                    self.sites[name].append(p)
                if isinstance(s, n.Assign):
                    self.assign_at.append(p)
                    self.assign_var.append(s.name)
                    self.assigns_of[s.name].append(p)
                spans = []
                for b in _bodies(s):
                    first = len(self.end)
                    yield index(b)
                    spans.append((first, len(self.end)))
                self.end[p], self.spans[p] = len(self.end), tuple(spans)
        drive(index(entry))

    def changes(self, var: str, lo: int, hi: int) -> bool:
        """Whether a statement at a position in [lo, hi) declares or assigns `var`."""
        at = self.sites.get(var)
        if not at:
            return False
        i = bisect_left(at, lo)
        return i < len(at) and at[i] < hi

    def assigned(self, lo: int, hi: int) -> list[str]:
        """The variables assigned by statements at positions in [lo, hi) (repeats included)."""
        return self.assign_var[bisect_left(self.assign_at, lo):bisect_left(self.assign_at, hi)]

    def assignments(self, lo: int, hi: int) -> int:
        """How many statements at positions in [lo, hi) are assignments."""
        return bisect_left(self.assign_at, hi) - bisect_left(self.assign_at, lo)

    def generation(self, var: str, at: int) -> int:
        """How many assignments to `var` come before position `at`: a value read at two positions
        with the same generation is the same value, within one block."""
        sites = self.assigns_of.get(var)
        return bisect_left(sites, at) if sites else 0


def _bottom_up(e: n.Expr, memo: dict, f):
    """`f(x, [its children's results])` for `e`, and for every node under it not yet in `memo`
    (results memoised there by node id: each node of a shared expression is computed once)."""
    got = memo.get(id(e))
    if got is not None:
        return got
    stack = [(e, False)]
    while stack:
        x, done = stack.pop()
        if id(x) in memo:
            continue
        if done:
            memo[id(x)] = f(x, [memo[id(c)] for c in x.children()])
        else:
            stack.append((x, True))
            stack.extend((c, False) for c in x.children() if id(c) not in memo)
    return memo[id(e)]


def _reads(e: n.Expr) -> set[str]:
    """The variables `e` reads."""
    names, seen, stack = set(), set(), [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, n.Var):
            names.add(x.name)
        stack.extend(x.children())
    return names


# ---- expression walks -------------------------------------------------------------------------

def _rebuild(e: n.Expr, kids: list[n.Expr]) -> n.Expr:
    """`e` with its operand expressions replaced by `kids` (in field order); `e` itself if unchanged."""
    old = e.children()
    if all(a is b for a, b in zip(kids, old)):
        return e
    it = iter(kids)
    return type(e)(**{f: next(it) if isinstance(getattr(e, f), n.Expr) else getattr(e, f) for f in e._kinds})


def _transform(e: n.Expr, node, replace=None, made: dict | None = None) -> n.Expr:
    """Rebuild `e` bottom-up, `node(x, kids)` giving each node from its rewritten operands; where
    `replace(x)` (asked top-down) returns an expression, that stands for x's whole subtree. A node
    met again within `e` (a value used twice) takes its first result: `node` and `replace` answer
    alike for one node within one call, and `e * e + e` twenty times is 60 nodes to rebuild, not 3**20.
    `made` (id of a node -> its result) carries those results over calls whose `node` and `replace`
    answer alike for one node, for a value shared by several statements; the caller keeps the nodes
    alive while it holds `made`."""
    out: list = []
    made = {} if made is None else made
    stack = [(e, False)]
    while stack:
        x, done = stack.pop()
        if done:
            k = len(x.children())
            kids = out[len(out) - k:]
            del out[len(out) - k:]
            y = made[id(x)] = node(x, kids)
            out.append(y)
            continue
        y = made.get(id(x))
        if y is None and replace is not None:
            y = replace(x)
            if y is not None:
                made[id(x)] = y
        if y is not None:
            out.append(y)
            continue
        stack.append((x, True))
        stack.extend((c, False) for c in reversed(x.children()))
    return out[0]


def _exprs(s: n.Node) -> tuple[n.Expr, ...]:
    """The statement's own expressions (not those of the statements nested in it)."""
    match s:
        case n.Let(value=v) | n.Assign(value=v):
            return (v,)
        case n.Store(index=i, value=v):
            return (i, v)
        case n.If(cond=c):
            return (c,)
        case n.Loop(start=a, end=b):
            return (a, b)
    return ()


def _with_exprs(s: n.Node, es: list[n.Expr]) -> n.Node:
    """`s` with its own expressions replaced (nested statements unchanged); `s` itself where they are
    the same objects."""
    if all(a is b for a, b in zip(es, _exprs(s))):
        return s
    match s:
        case n.Let(name=x):
            return n.Let(x, es[0])
        case n.Assign(name=x):
            return n.Assign(x, es[0])
        case n.Store(buffer=b):
            return n.Store(b, es[0], es[1])
        case n.If(then=t, otherwise=o):
            return n.If(es[0], t, o)
        case n.Loop(var=v, body=body):
            return n.Loop(v, es[0], es[1], body)
    return s


def _bodies(s: n.Node) -> tuple[tuple[n.Node, ...], ...]:
    match s:
        case n.If(then=t, otherwise=o):
            return (t, o)
        case n.Loop(body=b) | n.Block(body=b):
            return (b,)
    return ()


def _with_bodies(s: n.Node, bodies: list[tuple[n.Node, ...]]) -> n.Node:
    if all(len(a) == len(b) and all(x is y for x, y in zip(a, b)) for a, b in zip(bodies, _bodies(s))):
        return s
    match s:
        case n.If(cond=c):
            return n.If(c, bodies[0], bodies[1])
        case n.Loop(var=v, start=a, end=b):
            return n.Loop(v, a, b, bodies[0])
        case n.Block():
            return n.Block(bodies[0])
    return s


def map_statements(stmts, each) -> list[n.Node]:
    """`each(s)` of every statement (None drops it), the bodies of what it returns mapped the same
    way, at any depth (an explicit stack: deep IR never meets the recursion limit)."""
    def block(stmts):
        out = []
        for s in stmts:
            t = each(s)
            if t is None:
                continue
            if _bodies(t):
                bodies = []
                for b in _bodies(t):
                    bodies.append(tuple((yield block(b))))
                t = _with_bodies(t, bodies)
            out.append(t)
        return out
    return drive(block(stmts))


def _hash_consed(entry: tuple[n.Node, ...]) -> tuple[n.Node, ...]:
    """`entry` with equal expressions made one object, so that looking one up by its structure
    compares no deeper than its operands (which are then the same objects): equal copies of a
    long expression, as a program read from JSON has, cost a whole comparison a node otherwise."""
    canon: dict[n.StructuralKey, n.Expr] = {}

    def node(x, kids):
        y = _rebuild(x, kids)
        return canon.setdefault(y.key(), y)

    return _rewritten(entry, node)


def _rewritten(stmts: tuple[n.Node, ...], node) -> tuple[n.Node, ...]:
    """`stmts` with every expression rebuilt by `_transform(e, node)`, those of the statements
    nested in them too; `node` answers alike for one node wherever it is (each node rebuilt once)."""
    made: dict = {}

    def body(stmts):
        out = []
        for s in stmts:
            s = _with_exprs(s, [_transform(e, node, made=made) for e in _exprs(s)])
            if _bodies(s):
                bodies = []
                for b in _bodies(s):
                    bodies.append((yield body(b)))
                s = _with_bodies(s, bodies)
            out.append(s)
        return tuple(out)

    return drive(body(stmts))


# ---- fold -------------------------------------------------------------------------------------

_FOLDABLE = (n.BinOp, n.UnOp, n.Cast, n.Select, n.Fma)


def _fold(ctx: _Context, entry: tuple[n.Node, ...]) -> tuple[n.Node, ...]:
    types: dict[str, DataType] = {}  # the variables in scope
    # What folding a node gave, kept over statements (a value several statements share is folded
    # once) while the variables in scope keep their types: forgotten when a name is declared or
    # goes out of scope. typed: id -> type of each rewritten node, which `made` keeps alive.
    made: dict[int, n.Expr] = {}
    typed: dict[int, DataType] = {}

    def forget() -> None:
        made.clear()
        typed.clear()

    def expr(e: n.Expr) -> tuple[n.Expr, DataType]:
        def node(x, kids):
            x = _rebuild(x, kids)
            tys = tuple(typed[id(k)] for k in kids)
            if isinstance(x, n.BufLen) and ctx.decls[x.buffer].is_shared:
                x = n.Lit(D.U32, ctx.decls[x.buffer].count)
            t = (types[x.name] if isinstance(x, n.Var) else
                 n.result_type(x, tys, ctx.decls[x.buffer].dtype if isinstance(x, (n.Load, n.Atomic)) else None))
            if isinstance(x, _FOLDABLE):
                folded = _evaluate(x, kids, tys, t) if all(isinstance(k, n.Lit) for k in kids) else None
                x = folded if folded is not None else _simplify(ctx, x, kids, tys)
            typed[id(x)] = t
            return x
        out = _transform(e, node, made=made)
        return out, typed[id(out)]

    def body(stmts, loop_var: str | None = None):
        out, declared = [], [loop_var] if loop_var else []
        if loop_var:
            types[loop_var] = D.U32
            forget()
        for s in stmts:
            folded = [expr(e) for e in _exprs(s)]
            s = _with_exprs(s, [e for e, _ in folded])
            if isinstance(s, n.Let):
                types[s.name] = folded[0][1]
                declared.append(s.name)
                forget()
            if _bodies(s):
                var = s.var if isinstance(s, n.Loop) else None
                bodies = []
                for b in _bodies(s):
                    bodies.append((yield body(b, var)))
                s = _with_bodies(s, bodies)
            out.append(s)
        for name in declared:
            types.pop(name, None)
        if declared:
            forget()
        return tuple(out)

    return drive(body(entry))


def _evaluate(x: n.Expr, kids: list[n.Lit], tys: tuple[DataType, ...], t: DataType) -> n.Lit | None:
    """The literal the reference computes for `x` of literal operands (None where it gives no
    value of type `t`, which a valid program never produces)."""
    vals = [ops.literal(k.raw, k.dtype) for k in kids]
    with np.errstate(all="ignore"):
        match x:
            case n.BinOp(op=op):
                r = ops.binary(op, tys[0])(*vals)
            case n.UnOp(op=op):
                r = ops.unary(op, tys[0])(vals[0])
            case n.Cast(dtype=dt):
                r = ops.cast(tys[0], dt)(vals[0])
            case n.Select():
                r = vals[1] if kids[0].raw else vals[2]
            case n.Fma():
                r = ops.fma(tys[0])(*vals)
    r = np.asarray(r)
    if r.shape != (1,) or r.dtype != ops.VALUE_DTYPE[t]:
        return None
    if t is D.BOOL:
        return n.Lit(t, int(bool(r[0])))
    if t is D.BF16:
        return n.Lit(t, int(_f32_to_bf16(r)[0]))
    if t.is_float:
        return n.Lit(t, int(r.view(ops.UINT[t.bits])[0]))
    return n.Lit(t, int(r[0]))


def _is(e: n.Expr, value: float, t: DataType) -> bool:
    """Whether `e` is the literal `value` of type `t` (floats by bit pattern, so -0.0 is not 0.0)."""
    if not isinstance(e, n.Lit):
        return False
    if t.is_float:
        return e.raw == float_to_bits(value, t)
    if t.is_bool:
        return e.raw == int(bool(value))
    return e.raw == (value if value != "ones" else (-1 if t.is_signed else t.max))


_INT_RIGHT_ID = {"add": 0, "wrapping_add": 0, "saturating_add": 0, "sub": 0, "wrapping_sub": 0, "saturating_sub": 0,
                 "mul": 1, "div": 1, "bitor": 0, "bitxor": 0, "bitand": "ones", "shl": 0, "shr": 0, "rotl": 0, "rotr": 0}
_INT_LEFT_ID = {"add": 0, "wrapping_add": 0, "saturating_add": 0, "mul": 1, "bitor": 0, "bitxor": 0, "bitand": "ones"}
_INT_ZERO = {"mul": 0, "bitand": 0}  # x op 0 = 0 (either side)
_FLOAT_RIGHT_ID = {"mul": 1.0, "div": 1.0, "sub": 0.0, "add": -0.0}
_FLOAT_LEFT_ID = {"mul": 1.0, "add": -0.0}
_INVOLUTIONS = ("neg", "bitnot", "not")


def _simplify(ctx: _Context, x: n.Expr, kids: list[n.Expr], tys: tuple[DataType, ...]) -> n.Expr:
    """`x` by an identity that holds for every value of its type, or `x` itself."""
    gone = lambda e: ctx.facts(e)[0]  # noqa: E731 - an operand may be dropped only if it has no effect
    match x:
        case n.BinOp(op=op, a=a, b=b):
            t = tys[0]
            if t.is_int:
                if op in _INT_RIGHT_ID and _is(b, _INT_RIGHT_ID[op], t):
                    return a
                if op in _INT_LEFT_ID and _is(a, _INT_LEFT_ID[op], t):
                    return b
                if op in _INT_ZERO and _is(b, 0, t) and gone(a):
                    return b
                if op in _INT_ZERO and _is(a, 0, t) and gone(b):
                    return a
            elif t.is_float:
                if op in _FLOAT_RIGHT_ID and _is(b, _FLOAT_RIGHT_ID[op], t):
                    return a
                if op in _FLOAT_LEFT_ID and _is(a, _FLOAT_LEFT_ID[op], t):
                    return b
            elif op in ("logical_and", "logical_or"):
                keep = op == "logical_and"  # x && true = x, x || false = x; x && false = false, x || true = true
                for this, other in ((a, b), (b, a)):
                    if isinstance(this, n.Lit) and bool(this.raw) == keep:
                        return other
                    if isinstance(this, n.Lit) and gone(other):
                        return this
        case n.UnOp(op=op, a=a) if op in _INVOLUTIONS and isinstance(a, n.UnOp) and a.op == op:
            return a.a
        case n.Select(cond=c, a=a, b=b):
            if isinstance(c, n.Lit) and gone(b if c.raw else a):
                return a if c.raw else b
            if a.equals(b) and gone(c) and gone(b):  # both sides run: dropping one with an effect drops it
                return a
        case n.Cast(dtype=dt, a=a) if dt is tys[0]:
            return a
    return x


# ---- dead code --------------------------------------------------------------------------------

def _dce(ctx: _Context, entry: tuple[n.Node, ...]) -> tuple[n.Node, ...]:
    while True:
        read = _observed(ctx, entry)
        loaded = {x.buffer for x in walk(entry, distinct=True) if isinstance(x, (n.Load, n.Atomic))}
        unread = {b for b, d in ctx.decls.items() if d.is_shared and b not in loaded}
        new = drive(_dce_body(ctx, entry, read, unread))
        if n.structurally_equal(new, entry):
            return new
        entry = new
        ctx.refresh(entry)


def _observed(ctx: _Context, entry: tuple[n.Node, ...]) -> set[str]:
    """The variables something observes: read by a statement that stays whatever its variables
    (a store, a branch's condition, a loop's bounds, a value with an effect, whose variable then
    stays declared too), or by the value of a let or assignment of a variable observed. Found in
    one walk, so that a chain of unread lets goes in one round of `_dce`, not one link a round."""
    feeds: dict[str, set[str]] = defaultdict(set)  # x -> the variables the values x is given read
    seen: set[str] = set()
    stack = list(entry)
    while stack:
        s = stack.pop()
        for e in _exprs(s):
            if isinstance(s, (n.Let, n.Assign)) and ctx.facts(e)[0]:
                feeds[s.name] |= _reads(e)
            else:
                seen |= _reads(e)
                if isinstance(s, n.Assign):
                    seen.add(s.name)
        for body in _bodies(s):
            stack.extend(body)
    todo = list(seen)
    while todo:
        for y in feeds.pop(todo.pop(), ()):
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return seen


def _dce_body(ctx: _Context, stmts, read: set[str], unread: set[str]):
    gone = lambda e: ctx.facts(e)[0]  # noqa: E731
    out: list[n.Node] = []
    for s in stmts:
        match s:
            case n.Let(name=x, value=v) | n.Assign(name=x, value=v) if x not in read and gone(v):
                continue
            case n.Store(buffer=b, index=i, value=v) if b in unread and gone(i) and gone(v):
                continue
            case n.If(cond=c):
                then, other = (yield _dce_body(ctx, s.then, read, unread)), (yield _dce_body(ctx, s.otherwise, read, unread))
                if isinstance(c, n.Lit):
                    out.extend(_inline(then if c.raw else other))
                elif then or other or not gone(c):
                    out.append(n.If(c, then, other))
            case n.Loop(start=a, end=b):
                body = yield _dce_body(ctx, s.body, read, unread)
                never = isinstance(a, n.Lit) and isinstance(b, n.Lit) and a.raw >= b.raw
                if not (never or (not body and gone(a) and gone(b))):
                    out.append(n.Loop(s.var, a, b, body))
            case n.Block(body=body):
                out.extend(_inline((yield _dce_body(ctx, body, read, unread))))
            case _:
                out.append(s)
        if out and isinstance(out[-1], n.Return):
            break  # nothing after a return runs
    return tuple(out)


def _inline(body: tuple[n.Node, ...]) -> list[n.Node]:
    """A block's statements to splice into the enclosing block: as they are when they declare
    nothing there, else kept in a block (their scope)."""
    if not body:
        return []
    return list(body) if not any(isinstance(s, n.Let) for s in body) else [n.Block(body)]


# ---- loop-invariant hoisting ------------------------------------------------------------------

def _hoist(ctx: _Context, entry: tuple[n.Node, ...]) -> tuple[n.Node, ...]:
    """Each largest pure expression in a loop goes into a `let` placed just before the outermost
    loop it does not vary in (one that changes or declares nothing it reads), its own parts further
    out where they vary in fewer loops: one walk, one temporary per value and loop."""
    index = ctx.index
    frames: list[tuple[int, int, dict, list, dict]] = []  # per enclosing loop, outermost first: (its positions
    # [lo, hi), structure -> temporary, (temporary, expression, memo) to place before it, memo: node id -> how
    # many of the loops up to this one its value varies in). A memo of a deeper loop holds for these loops too,
    # capped at their number: a value varies in the outermost loops, so cutting the inner ones off caps it.

    def varies_in(v: str, depth: int) -> int:
        """How many of the `depth` outermost loops v's value varies in (a loop changing v is inside
        every loop outside it, so they are the outermost ones)."""
        lo, hi = 0, depth
        while lo < hi:
            mid = (lo + hi) // 2
            if index.changes(v, frames[mid][0], frames[mid][1]):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def at(depth: int, deeper: dict | None = None):
        memo = frames[depth - 1][4] if depth else {}

        def vary(x, kids):
            return varies_in(x.name, depth) if isinstance(x, n.Var) else max(kids, default=0)

        def replace(e: n.Expr):
            if not depth or not ctx.shareable(e):
                return None
            if deeper is not None and id(e) in deeper:
                t, known = min(deeper[id(e)], depth), deeper
            else:
                t, known = _bottom_up(e, memo, vary), memo
            if t >= depth:
                return None
            lets, placed = frames[t][2], frames[t][3]
            k = e.key()
            if k not in lets:
                lets[k] = ctx.fresh()
                placed.append((lets[k], e, known))
            return n.Var(lets[k])
        return replace

    def body(stmts, depth: int, p: int):
        out = []
        for s in stmts:
            spans = index.spans[p]
            if isinstance(s, n.Loop):
                frames.append((p, index.end[p], {}, [], {}))
                inside = yield body(s.body, depth + 1, spans[0][0])
                for name, e, known in frames.pop()[3]:  # its parts may go further out: placed before outer loops
                    out.append(n.Let(name, _rebuild(e, [_transform(c, _rebuild, at(depth, known)) for c in e.children()])))
                s = n.Loop(s.var, s.start, s.end, inside)
            elif _bodies(s):
                bodies = []
                for b, (first, _) in zip(_bodies(s), spans):
                    bodies.append((yield body(b, depth, first)))
                s = _with_bodies(s, bodies)
            if depth:  # outside every loop nothing is hoisted: the expressions stay as they are
                s = _with_exprs(s, [_transform(e, _rebuild, at(depth)) for e in _exprs(s)])
            out.append(s)
            p = index.end[p]
        return tuple(out)

    return drive(body(entry, 0, 0))


# ---- common subexpressions --------------------------------------------------------------------

def _cse(ctx: _Context, entry: tuple[n.Node, ...]) -> tuple[n.Node, ...]:
    return drive(_cse_body(ctx, _Values(ctx), entry, 0, {}))


class _Values:
    """Value numbers for `_cse`: equal numbers, equal values. A node's number stands for its
    structure and the generation of each variable it reads where it is read (`_Index.generation`),
    built from its operands' numbers: its node (hash-consed, so one object a structure) and theirs."""

    def __init__(self, ctx: _Context):
        self.index = ctx.index
        self.table: dict[tuple, int] = {}
        self.parts: list[tuple[n.Expr, tuple[int, ...]]] = []  # number -> (a node of it, its operands' numbers)

    def number(self, x: n.Expr, at: int, memo: dict) -> int:
        """`x`'s number read at position `at` (memo: numbers of nodes read there)."""
        def num(y, kids):
            key = (id(y), self.index.generation(y.name, at)) if isinstance(y, n.Var) else (id(y), *kids)
            got = self.table.get(key)
            if got is None:
                got = self.table[key] = len(self.parts)
                self.parts.append((y, tuple(kids)))
            return got
        return _bottom_up(x, memo, num)

    def changeable(self, x: n.Expr) -> list[str]:
        """The variables `x` reads that some statement assigns (a let's alone never change)."""
        return [v for v in _reads(x) if v in self.index.assigns_of]


_GONE = object()


def _occurrences(roots, stop: Callable[[n.Expr], bool]) -> list[tuple[n.Expr, int]]:
    """Each distinct node reachable from `roots` without entering a node where `stop` (which is
    reached but not entered), parents before children, with how often it occurs written out (each
    root counting once a listing): what a walk of every use counts, in time linear in distinct nodes."""
    post: list = []
    seen: set[int] = set()
    for r in roots:
        if id(r) in seen:
            continue
        seen.add(id(r))
        stack = [(r, iter(() if stop(r) else r.children()))]
        while stack:  # depth first; a node goes to `post` after all its children
            x, kids = stack[-1]
            for c in kids:
                if id(c) not in seen:
                    seen.add(id(c))
                    stack.append((c, iter(() if stop(c) else c.children())))
                    break
            else:
                stack.pop()
                post.append(x)
    occ: dict[int, int] = defaultdict(int)
    for r in roots:
        occ[id(r)] += 1
    order = post[::-1]  # reversed postorder: every node after all its parents
    for x in order:
        if not stop(x):
            for c in x.children():
                occ[id(c)] += occ[id(x)]
    return [(x, occ[id(x)]) for x in order]


def _parts_by_depth(values: "_Values", tops) -> list[int]:
    """The value numbers `tops` and all their parts, each once, deepest first (so every value
    comes after the values containing it)."""
    seen, stack = set(tops), list(tops)
    while stack:
        for sub in values.parts[stack.pop()][1]:
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    return sorted(seen, key=lambda v: -values.parts[v][0].depth)


def _cse_body(ctx: _Context, values: _Values, stmts, p0: int, visible: dict[n.StructuralKey, str]):
    """One block, its first statement at position `p0`: a pure expression met twice while the
    variables it reads keep their values is computed once, into a `let` placed before its first use
    (or taken from a `let` that already holds it); `visible` holds what enclosing blocks hold that
    stays valid through this one (by structure: the variable holding it), and nested blocks see it
    with what this block holds added (for their walk only). Values are told apart by `_Values`
    numbers."""
    index = ctx.index

    # pass 1: how often each value occurs, less the occurrences inside a larger shared value
    count: dict[int, int] = defaultdict(int)
    p = p0

    def held_outside(x) -> bool:  # a value an enclosing block holds: neither counted nor entered
        return ctx.shareable(x) and x.key() in visible

    for s in stmts:
        memo: dict[int, int] = {}
        for x, k in _occurrences(_exprs(s), held_outside):
            if ctx.shareable(x) and x.key() not in visible:
                count[values.number(x, p, memo)] += k
        p = index.end[p]
    shared = {k for k in count if count[k] > 1}
    within: dict[int, int] = defaultdict(int)  # occurrences inside larger shared values, times their extra uses
    for v in _parts_by_depth(values, shared):  # the larger values first: each sees all that contain it
        if v in count and ctx.shareable(values.parts[v][0]):
            count[v] -= within[v]
        extra = count[v] - 1 if v in shared and count[v] > 1 else 0
        for sub in values.parts[v][1]:  # every part, as often as it occurs in the value
            within[sub] += within[v] + extra

    # pass 2: rewrite; the first use of a value met again makes a temporary
    held: dict[int, tuple[str, int]] = {}  # value -> (the variable holding it, its generation then)
    live: dict[n.StructuralKey, str] = {}  # the held values still valid (at most one per structure)
    readers: dict[str, set] = defaultdict(set)  # variable -> (structure, holder) of held values that read it or
    # are held by it; one whose structure `live` now gives another holder is stale and counts for nothing
    out: list[n.Node] = []
    memo: dict[int, int] = {}
    p = p0

    def valid(h) -> bool:
        return h is not None and index.generation(h[0], p) == h[1]

    def hold(k: int, x: n.Expr, name: str, g: int) -> None:
        held[k] = (name, g)
        live[x.key()] = name
        for v in (name, *values.changeable(x)):
            if v in index.assigns_of:
                readers[v].add((x.key(), name))

    def changed_in(lo: int, hi: int) -> list[str]:
        """The variables of `readers` assigned at positions in [lo, hi), from the smaller side."""
        if index.assignments(lo, hi) <= len(readers):
            return [v for v in index.assigned(lo, hi) if v in readers]
        return [v for v in readers if index.generation(v, lo) != index.generation(v, hi)]

    def replace(x):  # top-down: a value already held is read from its variable
        if not ctx.shareable(x):
            return None
        if x.key() in visible:
            return n.Var(visible[x.key()])
        h = held.get(values.number(x, p, memo))
        return n.Var(h[0]) if valid(h) else None

    def node(x, kids):  # bottom-up, so a temporary's own parts are made first
        y = _rebuild(x, kids)
        if ctx.shareable(x) and count.get(values.number(x, p, memo), 0) > 1:
            name = ctx.fresh()
            out.append(n.Let(name, y))
            hold(values.number(x, p, memo), x, name, 0)
            return n.Var(name)
        return y

    def rewrite(e):
        return _transform(e, node, replace)

    for original in stmts:
        s = original
        memo.clear()
        if isinstance(s, n.Let) and ctx.shareable(s.value):
            k = values.number(s.value, p, memo)
            h = held.get(k)
            if valid(h):
                s = n.Let(s.name, n.Var(h[0]))
            else:  # this let holds the value from here on
                s = n.Let(s.name, _rebuild(s.value, [rewrite(c) for c in s.value.children()]))
                hold(k, original.value, s.name, index.generation(s.name, p))
        else:
            s = _with_exprs(s, [rewrite(e) for e in _exprs(s)])
        if _bodies(s):
            bodies = []
            for b, (first, last) in zip(_bodies(s), index.spans[p]):
                # What this block holds stays valid through b unless b assigns what it reads.
                spoilt = {k for v in changed_in(first, last) for k, h in readers[v] if live.get(k) == h}
                saved = [(k, visible.get(k, _GONE)) for k in live if k not in spoilt]
                for k, _ in saved:
                    visible[k] = live[k]
                bodies.append((yield _cse_body(ctx, values, b, first, visible)))
                for k, old in reversed(saved):
                    if old is _GONE:
                        del visible[k]
                    else:
                        visible[k] = old
            s = _with_bodies(s, bodies)
        out.append(s)
        for v in changed_in(p, index.end[p]):
            for k, h in readers.pop(v, ()):
                if live.get(k) == h:
                    del live[k]
        p = index.end[p]
    return tuple(out)


_RUN = {"fold": _fold, "dce": _dce, "hoist": _hoist, "cse": _cse}
