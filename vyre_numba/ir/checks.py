"""Checked dispatch's instrumentation: `instrument(program)` returns a program with the same
results that also counts, per site, out-of-bounds loads, stores and atomics, integer division
and modulo by zero, and NaNs that float operations produce from operands that were not NaN.

Each checked operand is bound to a fresh variable just before its statement (expressions have no
side effects apart from atomics, so evaluating them there changes nothing; an expression holding
an atomic keeps its order and only the atomics' indices are checked). A site counts only where
its value is used: an operand of `select` under its condition, the right side of a logical and/or
where the left side lets it matter. Two buffers come last in binding order: `COUNTS` (u64 per
site) and `FIRST` (u64 per site, the smallest (linear invocation << 32 | index) that hit it,
starting at all ones)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import IRValidationError, UnsupportedError, clip, immutable, shown
from . import nodes as n
from .program import Access, BufferDecl, Program, walk
from .recursion import drive
from .validate import check, validate
from .types import DataType

COUNTS, FIRST = "_vyre_check_counts", "_vyre_check_first"
PREFIX = "_vyre_ck"
U32, U64, BOOL = DataType.U32, DataType.U64, DataType.BOOL
KINDS = {"load": "out-of-bounds loads", "store": "out-of-bounds stores", "atomic": "out-of-bounds atomics",
         "div": "integer divisions by zero", "mod": "integer modulos by zero", "nan": "NaNs produced"}
NAN_FREE = ("neg", "abs", "sign", "min", "max", "floor", "ceil", "round", "trunc")  # never make a NaN from none


@dataclass(frozen=True)
class Site:
    """One checked operation: its kind (a key of `KINDS`), the buffer (loads, stores, atomics) or
    operation (div, mod, nan), the statement it is in and the operation itself, as text."""

    kind: str
    what: str
    statement: n.Node
    node: n.Node

    @property
    def where(self) -> str:
        """The statement, as (shortened) text."""
        return _text(self.statement)

    @property
    def expr(self) -> str:
        """The checked operation, as (shortened) text."""
        return _text(self.node, 60)


def instrument(program: Program, workgroup: tuple[int, int, int] | None = None) -> tuple[Program, list[Site]]:
    """`program` with every site counted (see the module docstring), and the sites in counter order.
    `workgroup`: the launch's workgroup size where a config overrides the program's (for the
    linear invocation id of a 2-D or 3-D launch). UnsupportedError where the checks would take a
    valid program past a limit (MAX_NODES, the kernel parameters' bytes)."""
    wg = tuple(workgroup or program.workgroup_size)
    taken = {x.var if isinstance(x, n.Loop) else x.name  # a loop's variable is declared too
             for x in walk(program.entry) if isinstance(x, (n.Let, n.Var, n.Loop))}
    if any(t.startswith(PREFIX) for t in taken) or {COUNTS, FIRST} & {b.name for b in program.buffers}:
        raise IRValidationError(f"names starting with {shown(PREFIX)} or the buffers {shown(COUNTS)}/{shown(FIRST)} "
                                "are checked dispatch's own. Fix: rename them.")
    w = _Instrumenter(program, wg)
    entry = (n.Let(w.linear.name, w.invocation),) + drive(w.body(program.entry))
    nb = max((b.binding for b in program.bound_buffers), default=-1)
    buffers = list(program.buffers) + [BufferDecl(COUNTS, nb + 1, Access.READ_WRITE, U64, max(len(w.sites), 1)),
                                       BufferDecl(FIRST, nb + 2, Access.READ_WRITE, U64, max(len(w.sites), 1))]
    size = sum(st.size for st in entry)  # the program was valid: what the checks add can take it past a limit
    why = [f"{size:,} nodes written out, more than MAX_NODES = {n.MAX_NODES:,}"] if size > n.MAX_NODES else []
    if not why:
        probe = Program(buffers, program.workgroup_size, entry, name=program.name)
        try:
            check(probe)  # (valid, it is not validated again as it is dispatched)
        except IRValidationError:
            why = [d.message.split(" Fix:")[0].rstrip(".") for d in validate(probe)]
    if why:
        check(program)  # its own problems first, where it has some
        raise UnsupportedError(f"checked dispatch cannot check program {shown(program.name)}: with a check at each "
                               f"of its {len(w.sites):,} sites and two buffers for their counts, it is past a limit "
                               f"the program itself is within ({clip('; '.join(why), 300)}). Fix: dispatch it "
                               "unchecked (checked=False), or check a smaller part of it (fewer statements or "
                               "buffers) on its own.")
    return probe, w.sites


class _Instrumenter:
    def __init__(self, program: Program, wg: tuple[int, int, int]):
        self.decls = {b.name: b for b in program.buffers}
        self.sites: list[Site] = []
        self.types: dict[str, DataType] = {}
        self.fresh = 0
        nx = n.BinOp("mul", n.Builtin("num_workgroups", 0), n.lit(wg[0], U32))
        ny = n.BinOp("mul", n.Builtin("num_workgroups", 1), n.lit(wg[1], U32))
        self.invocation = n.BinOp("add", n.Builtin("invocation_id", 0), n.BinOp("mul", n.BinOp(
            "add", n.Builtin("invocation_id", 1), n.BinOp("mul", n.Builtin("invocation_id", 2), ny)), nx))
        self.linear = n.Var(f"{PREFIX}_invocation")  # bound once, first thing in the program
        self.types[self.linear.name] = U32

    # ---- statements ---------------------------------------------------------------------------
    def body(self, stmts):
        out, declared = [], []
        for s in stmts:
            pre: list[n.Node] = []
            where = s
            # a statement holding an atomic keeps its order of evaluation: only its atomics' indices
            # (and a store's), where they read no memory, are bound and checked
            ordered = any(isinstance(x, n.Atomic) for e in _own_exprs(s) for x in _walk(e))
            expr = self.atomic_only if ordered else self.expr
            match s:
                case n.Let(name=v, value=e) | n.Assign(name=v, value=e):
                    e, t = yield expr(e, pre, where)
                    s = n.Let(v, e) if isinstance(s, n.Let) else n.Assign(v, e)
                    if isinstance(s, n.Let):
                        self.types[v] = t
                        declared.append(v)
                case n.Store(buffer=b, index=i, value=e):
                    original = s
                    i, _ = yield expr(i, pre, where)
                    e, _ = yield expr(e, pre, where)
                    if not ordered or _pure(i):
                        i = self.bind(i, U32, pre)
                        self.check(pre, "store", b, where, None, n.BinOp("ge", i, n.BufLen(b)), i, original)
                    s = n.Store(b, i, e)
                case n.If(cond=c, then=t, otherwise=o):
                    c, _ = yield expr(c, pre, where)
                    s = n.If(c, (yield self.body(t)), (yield self.body(o)))
                case n.Loop(var=v, start=a, end=b, body=body):
                    a, _ = yield expr(a, pre, where)
                    b, _ = yield expr(b, pre, where)
                    self.types[v] = U32
                    s = n.Loop(v, a, b, (yield self.body(body)))
                case n.Block(body=body):
                    s = n.Block((yield self.body(body)))
            out += pre + [s]
        for v in declared:
            self.types.pop(v, None)
        return tuple(out)

    # ---- expressions --------------------------------------------------------------------------
    def expr(self, e: n.Expr, pre: list, where: n.Node, path: n.Expr | None = None):
        """(the expression, which holds no atomic, with its checked operands bound before it in
        `pre`, its type)."""
        match e:
            case n.Lit():
                return e, e.dtype
            case n.Var(name=v):
                return e, self.types[v]
            case n.BufLen() | n.Builtin():
                return e, U32
            case n.Load(buffer=b, index=i):
                i, _ = yield self.expr(i, pre, where, path)
                i = self.bind(i, U32, pre)
                self.check(pre, "load", b, where, path, n.BinOp("ge", i, n.BufLen(b)), i, e)
                return n.Load(b, i), self.decls[b].dtype
            case n.Select(cond=c, a=a, b=b):
                c, _ = yield self.expr(c, pre, where, path)
                c = self.bind(c, BOOL, pre)
                a, t = yield self.expr(a, pre, where, self.within(path, c, pre))
                b, _ = yield self.expr(b, pre, where, self.within(path, n.UnOp("not", c), pre))
                return n.Select(c, a, b), t
            case n.BinOp(op=op, a=a, b=b) if op in ("logical_and", "logical_or"):
                a, _ = yield self.expr(a, pre, where, path)
                a = self.bind(a, BOOL, pre)
                on = self.within(path, a if op == "logical_and" else n.UnOp("not", a), pre)
                b, _ = yield self.expr(b, pre, where, on)
                return n.BinOp(op, a, b), BOOL
        kids, types = [], []
        for k in e.children():
            k, t = yield self.expr(k, pre, where, path)
            kids.append(k)
            types.append(t)
        out = _rebuild(e, kids)
        t = n.result_type(out, tuple(types), None)
        if isinstance(out, n.BinOp) and out.op in ("div", "mod") and not types[0].is_float:
            b = self.bind(out.b, types[1], pre)
            out = n.BinOp(out.op, out.a, b)
            self.check(pre, out.op, out.op, where, path, n.BinOp("eq", b, n.lit(0, types[1])), None, e)
        elif t.is_float and isinstance(out, (n.BinOp, n.UnOp, n.Fma)) and getattr(out, "op", "fma") not in NAN_FREE:
            operands = [self.bind(k, kt, pre) for k, kt in zip(out.children(), types)]
            out = self.bind(_rebuild(out, operands), t, pre)
            fresh = n.UnOp("isnan", out)
            for k, kt in zip(operands, types):
                if kt.is_float:
                    fresh = n.BinOp("logical_and", fresh, n.UnOp("not", n.UnOp("isnan", k)))
            self.check(pre, "nan", getattr(e, "op", "fma"), where, path, fresh, None, e)
        return out, t

    def atomic_only(self, e: n.Expr, pre: list, where: n.Node, path=None):
        """An expression of a statement holding an atomic, unchanged but for each atomic's index,
        bound and checked where it reads no memory (binding a load before the statement could
        read what an atomic of the statement changes)."""
        if isinstance(e, n.Atomic) and _pure(e.index):
            i = self.bind(e.index, U32, pre)
            self.check(pre, "atomic", e.buffer, where, path, n.BinOp("ge", i, n.BufLen(e.buffer)), i, e)
            return n.Atomic(e.op, e.buffer, i, e.value, e.expected), self.decls[e.buffer].dtype
        kids, types = [], []
        for k in e.children():
            k, t = yield self.atomic_only(k, pre, where, path)
            kids.append(k)
            types.append(t)
        out = _rebuild(e, kids)
        if isinstance(out, n.Var):
            return out, self.types[out.name]
        return out, n.result_type(out, tuple(types), self.decls[out.buffer].dtype if isinstance(out, (n.Load, n.Atomic))
                                  else None)

    # ---- helpers ------------------------------------------------------------------------------
    def bind(self, e: n.Expr, t: DataType, pre: list) -> n.Expr:
        """`e` as a fresh variable bound in `pre` (literals, variables and ids stay as they are)."""
        if isinstance(e, (n.Lit, n.Var, n.Builtin, n.BufLen)):
            return e
        name = f"{PREFIX}{self.fresh}"
        self.fresh += 1
        pre.append(n.Let(name, e))
        self.types[name] = t
        return n.Var(name)

    def within(self, path, c: n.Expr, pre: list) -> n.Expr:
        """The condition `c` on `path`: one variable where `path` is a condition already, so that
        nested selects cost each check site a variable, not their whole chain of conditions."""
        return c if path is None else self.bind(n.BinOp("logical_and", path, c), BOOL, pre)

    def check(self, pre: list, kind: str, what: str, where: n.Node, path, bad: n.Expr, index, original) -> None:
        """Count site `kind` where `bad` holds on `path`: one more, and the smallest
        (linear invocation << 32 | index) that hit it."""
        k = len(self.sites)
        self.sites.append(Site(kind, what, where, original))
        first = n.BinOp("add", n.BinOp("mul", n.Cast(U64, self.linear), n.lit(1 << 32, U64)),
                        n.Cast(U64, index) if index is not None else n.lit(0, U64))
        hit = (n.Let(f"{PREFIX}{self.fresh}", n.Atomic("add", COUNTS, n.lit(k, U32), n.lit(1, U64), None)),
               n.Let(f"{PREFIX}{self.fresh + 1}", n.Atomic("min", FIRST, n.lit(k, U32), first, None)))
        self.fresh += 2
        pre.append(n.If(_and(path, bad), hit, ()))


def _and(path, c):
    return c if path is None else n.BinOp("logical_and", path, c)


def _own_exprs(s: n.Node) -> tuple:
    from .optimizer import _exprs
    return _exprs(s)


def _pure(e: n.Expr) -> bool:
    """Whether `e` reads no memory (no load, atomic or subgroup operation)."""
    return not any(isinstance(x, (n.Load, n.Atomic, n.SubgroupBallot, n.SubgroupShuffle, n.SubgroupAdd))
                   for x in _walk(e))


def _walk(e: n.Expr):
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(x.children())


def _rebuild(e: n.Expr, kids: list) -> n.Expr:
    from .optimizer import _rebuild as rebuild
    return rebuild(e, kids)


def _text(s, limit: int = 90) -> str:
    """`s`'s text form on one line, cut to `limit` characters: only as much of it is rendered as
    the cut keeps (a statement of thousands of checked operations is shown once for each)."""
    wide = limit + 1 + 4 * n.MAX_INDENT + 16  # a line's indentation and depth mark come off in the join
    lines = [n.render_expr(s, limit + 1)] if isinstance(s, n.Expr) else n.render_stmt(s, 0, wide, limit)
    text = " ".join(" ".join(lines).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


immutable(Site)
