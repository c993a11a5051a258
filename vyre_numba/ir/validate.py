"""Type inference and validation. One walker both fixes the type of weak literals (at Program
construction) and collects diagnostics (in `validate`)."""
from __future__ import annotations

import math
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import display
from ..errors import IRValidationError, VyreError, did_you_mean, shown
from . import nodes as n
from .program import Access, BufferDecl, Program
from .recursion import drive
from .types import DataType, float_to_bits, overflows, wrap_int

D = DataType
ATOMIC_TYPES = (D.U32, D.I32, D.U64, D.I64)
MAX_THREADS = 1024
MAX_AXIS = (1024, 1024, 64)
MAX_STATIC_SHARED_BYTES = 48 * 1024
MAX_PARAM_BYTES = 4352  # a kernel's parameter space in the PTX versions emitted (7.x); 8.1 raised it
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
IDENT_FIX = "use ASCII letters, digits and _, starting with a letter or _ (e.g. x1, not 1x)."
_PTX_NAMES_TAKEN = frozenset({"_", "WARP_SZ"})  # identifiers PTX refuses as an entry's name


@dataclass(frozen=True)
class Diagnostic:
    """One problem: `where` locates it (e.g. `entry[2].then[0]`), `message` ends with `Fix: ...`;
    `facts` names what a tool building programs may restate in its own words (e.g. a literal's
    `value` and the `dtype` it cannot be)."""

    where: str
    message: str
    facts: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class Diagnostics(list):
    """The problems `validate` found (a list of `Diagnostic`), shown in Jupyter as a table."""

    def _repr_html_(self) -> str:
        if not self:
            return "<div>valid: no problems found</div>"
        rows = ((d.where, *(p.strip() for p in d.message.rsplit("Fix:", 1))) if "Fix:" in d.message
                else (d.where, d.message, "") for d in self)
        return display.table(rows, ("where", "problem", "fix"), title=f"{len(self)} problem{'s' if len(self) > 1 else ''}",
                             total=len(self))


MESSAGE_PROBLEMS = 20  # a check error names this many problems; .diagnostics holds every one

def default_weak_type(lit: n.Lit) -> DataType | None:
    """Type a weak literal takes without context: u32, else i32, i64, u64 for ints; f32 for floats."""
    if lit.dtype.is_float:
        return D.F32
    v = lit.raw
    for dt in (D.U32, D.I32, D.I64, D.U64):
        if dt.min <= v <= dt.max:
            return dt
    return None


def _strong(lit: n.Lit, dt: DataType) -> n.Lit | None:
    """The weak literal as a literal of `dt`, or None if it cannot be one exactly enough."""
    if dt.is_bool:
        return None
    if dt.is_float:
        value = lit.value if lit.dtype.is_float else lit.raw  # an int rounded once from its exact value
        bits = float_to_bits(value, dt)
        return None if overflows(value, bits, dt) else n.Lit(dt, bits)
    if lit.dtype.is_float:
        return None
    if not dt.min <= lit.raw <= dt.max:
        return None
    return n.Lit(dt, lit.raw)


_OWN_TYPE = (n.Var, n.Cast, n.Load, n.BufLen, n.Builtin, n.Atomic, n.SubgroupBallot)  # of a type their own
_OWN_TYPE_OPS = (set(n.CMP_BINOPS) | set(n.LOGIC_BINOPS) | set(n.FLOAT_PRED_UNOPS) | set(n.BOOL_UNOPS)
                 | {"popcount", "clz", "ctz"})  # bool, or u32 whatever the operand
_INTEGER_OPS = set(n.INT_BINOPS) | {"mod", "bitnot", "reverse_bits"}  # no float operand


def _value_kids(x: n.Expr) -> list | None:
    """The operands `x`'s value (and so its type) comes from; None for a node of no known kind."""
    match x:
        case n.BinOp(_, a, b) | n.Select(_, a, b):
            return [a, b]
        case n.UnOp(_, a) | n.SubgroupAdd(a) | n.SubgroupShuffle(a, _):
            return [a]
        case n.Fma(a, b, c):
            return [a, b, c]
    return None


def weak_only(e: n.Expr, memo: dict | None = None, weak_vars: frozenset = frozenset()) -> bool:
    """Whether `e` takes its type from its context, as a bare literal does: its value is made of
    weak literals only (`1 + 2`, `min(1, 2)`, `select(c, 1, 2)`: a condition's type is no matter;
    variables named in `weak_vars` count as such literals). Nodes of no known kind count as weak.
    `memo` (by node id, over one walk of a tree that outlives it) makes repeated questions linear."""
    memo = {} if memo is None else memo
    stack = [(e, False)]
    while stack:
        x, done = stack.pop()
        if id(x) in memo:
            continue
        if isinstance(x, n.Lit):
            memo[id(x)] = x.weak
        elif isinstance(x, n.Var) and x.name in weak_vars:
            memo[id(x)] = True
        elif isinstance(x, _OWN_TYPE) or (isinstance(x, (n.BinOp, n.UnOp)) and x.op in _OWN_TYPE_OPS):
            memo[id(x)] = False
        else:
            kids = _value_kids(x)
            if kids is None:
                memo[id(x)] = True
            elif done:
                memo[id(x)] = all(memo[id(k)] for k in kids)
            else:
                stack.append((x, True))
                stack.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(e)]


def _literal_facts(e: n.Expr) -> tuple[list, str | None]:
    """(the literals, the first integer-only operation among the operations, or None) of the value
    of a weak-only expression."""
    todo, lits, integer_op = [e], [], None
    while todo:
        x = todo.pop()
        if isinstance(x, n.Lit):
            lits.append(x)
            continue
        if integer_op is None and isinstance(x, n.SubgroupAdd):
            integer_op = "subgroup_add"
        elif integer_op is None and isinstance(x, (n.BinOp, n.UnOp)) and x.op in _INTEGER_OPS:
            integer_op = x.op
        todo.extend(_value_kids(x) or ())
    return lits, integer_op


def _cast_operand(a: n.Expr, dtype: DataType) -> DataType | None:
    """The type a weak literal cast to `dtype` takes, so that the cast starts from its exact value:
    a float becomes `dtype` itself (rounded once) or, cast to an integer or bool, f64 (which
    holds every Python float); an int becomes `dtype` where it fits or is a float type (rounded
    once), else takes the default."""
    if not (isinstance(a, n.Lit) and a.weak) or not isinstance(dtype, DataType):
        return None
    if a.dtype.is_float:
        return dtype if dtype.is_float else D.F64
    if dtype.is_float or (not dtype.is_bool and dtype.min <= a.raw <= dtype.max):
        return dtype
    return None


def _cast_literal(a: n.Expr, dtype) -> tuple[str, int, str, str] | None:
    """Where `a` is a weak literal that the integer `dtype` cannot hold (NumPy 2 refuses np.uint8(300)
    and np.uint8(300.0) too): (the literal, what a cast makes of it, how, the typed literal that
    casts so on purpose); else None."""
    if not (isinstance(a, n.Lit) and a.weak and isinstance(dtype, DataType) and dtype.is_int):
        return None
    if a.dtype.is_float:
        v = a.value
        if math.isnan(v):
            return "NaN", 0, "become", "ir.f64(math.nan)"
        if not math.isinf(v) and dtype.min <= math.trunc(v) <= dtype.max:
            return None
        text = repr(v) if not math.isinf(v) else "-math.inf" if v < 0 else "math.inf"
        return repr(v), dtype.max if v > 0 else dtype.min, "saturate to", f"ir.f64({text})"
    if dtype.min <= a.raw <= dtype.max:
        return None
    return str(a.raw), wrap_int(a.raw, dtype), "wrap to", _typed_int(a.raw)


def _typed_int(raw: int) -> str | None:
    """The typed literal that holds the integer `raw` (u64 past i64), None where no type does."""
    if not D.I64.min <= raw <= D.U64.max:
        return None
    return f"ir.{'u64' if raw > D.I64.max else 'i64'}({raw})"


def _bad_literal(lit: n.Lit) -> str | None:
    """Why `lit` (e.g. built directly or read from JSON) holds no value of its type, or None."""
    dt, raw = lit.dtype, lit.raw
    if not isinstance(dt, DataType):
        return f"has type {shown(dt)}, which is not a DataType"
    if not isinstance(raw, int) or isinstance(raw, bool):
        return f"holds {shown(raw)}, which is not an int"
    if dt.is_float:
        ok = 0 <= raw < 1 << dt.bits
    elif dt.is_bool:
        ok = raw in (0, 1)
    else:
        ok = lit.weak or dt.min <= raw <= dt.max
    return None if ok else f"holds {raw}, which is not a {dt} {'bit pattern' if dt.is_float else 'value'}"


class Where:
    """A location in a program (`entry[2].then[0]`), as a chain of steps rendered only when a
    diagnostic is reported, so deep programs cost no long strings. Past 24 steps the text is the
    first 12 and the last 10, read from `anchor` (the 12th step) and from here: a diagnostic
    costs no walk of its whole depth."""

    __slots__ = ("parent", "step", "depth", "anchor")

    def __init__(self, parent: "Where | None", step: str):
        self.parent, self.step = parent, step
        self.depth = 1 if parent is None else parent.depth + 1
        self.anchor = self if self.depth == 12 else None if parent is None else parent.anchor

    def _steps(self, count: int) -> list[str]:
        steps, w = [], self
        while w is not None and len(steps) < count:
            steps.append(w.step)
            w = w.parent
        return steps[::-1]

    def __str__(self) -> str:
        if self.depth <= 24:
            return "".join(self._steps(24))
        return "".join(self.anchor._steps(12) + [f"...({self.depth - 22} levels)..."] + self._steps(10))


_BOOL_BITWISE = {"bitand": "logical_and", "bitor": "logical_or", "bitxor": "ne"}


class _Checker:
    """Types every expression (fixing weak literals from context) and collects diagnostics.
    Its walkers are generators run by `drive`, so nesting depth costs no Python recursion."""

    def __init__(self, buffers: tuple[BufferDecl, ...]):
        self.bufs: dict[str, BufferDecl] = {}
        for b in buffers:
            if isinstance(b.name, str):  # other names are reported by validate, not hashed here
                self.bufs.setdefault(b.name, b)
        self.diags: list[Diagnostic] = []
        self.vars: dict[str, list[tuple[DataType | None, bool]]] = {}  # name -> shadow stack
        self.scopes: list[list[str]] = [[]]
        self.said: dict[str, str] = {}  # an undeclared buffer's message, by its name
        self.weak: dict[int, bool] = {}  # weak_only's answers, by node id (the program holds every node)
        self.typed: dict[tuple, tuple] = {}  # (node id, wanted type) -> (typed node, type), while no variable's type changes

    # ---- helpers ----------------------------------------------------------------------------
    def err(self, where, msg: str, **facts) -> None:
        self.diags.append(Diagnostic(str(where), msg, facts or None))

    def lookup(self, name: str):
        found = self.vars.get(name)
        return found[-1] if found else None

    def open_scope(self) -> None:
        self.scopes.append([])

    def close_scope(self) -> None:
        names = self.scopes.pop()
        for name in names:
            self.vars[name].pop()
        if names:  # a name may be declared again, of another type, in the next scope
            self.typed.clear()

    def buffer(self, name: str, where) -> BufferDecl | None:
        b = self.bufs.get(name)
        if b is None:
            self.err(where, self.undeclared(name))
        return b

    def undeclared(self, name) -> str:
        """What an undeclared buffer is told: the nearest declared name and the first few of them
        (said once for each name: a program may name it thousands of times among thousands)."""
        key = name if isinstance(name, str) else repr(name)
        said = self.said.get(key)
        if said is None:
            names = list(itertools.islice(self.bufs, 9))
            known = ", ".join(names[:8]) + (f", and {len(self.bufs) - 8} more" if len(names) > 8 else "") or "none"
            said = self.said[key] = (f"buffer {shown(name)} is not declared{did_you_mean(name, self.bufs)} (declared: "
                                     f"{known}). Fix: add a BufferDecl named {shown(name)} to the program or correct "
                                     "the name.")
        return said

    def want(self, got: DataType | None, want: DataType, where, what: str, value: n.Expr | None = None) -> None:
        """`what` (the expression `value`, where given) must be of type `want`."""
        if got is not None and got is not want:
            hint = f"ir.cast(..., '{want}')" if not want.is_bool else "a comparison such as x != 0"
            said = self.from_let(value, want)
            if said:
                self.err(where, f"{what} must be {want}, got {got}: {said}; else convert it with {hint}.")
            else:
                self.err(where, f"{what} must be {want}, got {got}. Fix: convert explicitly with {hint}.")

    def same(self, ta, tb, where, what: str, operands: tuple = ()) -> DataType | None:
        if ta is None or tb is None:
            return None
        if ta is not tb:
            for x, other in zip(operands, (tb, ta)):
                said = self.from_let(x, other)
                if said:
                    self.err(where, f"{what} has operands of different types {ta} and {tb}: {said}; else ir.cast "
                                    "one operand to the other's type.")
                    return None
            self.err(where, f"{what} has operands of different types {ta} and {tb}; there is no implicit "
                            f"conversion. Fix: ir.cast one operand to the other's type.")
            return None
        return ta

    def from_let(self, x, meant: DataType) -> str | None:
        """Where `x` is a variable its let gave a literal (`ir.let("acc", 0)`: a bare 0 is u32),
        where it came from and the let that gives it the type `meant`, up to the Fix's "else":
        the cast the plain message suggests would truncate an f32 accumulator to u32 each step."""
        found = self.lookup(x.name) if isinstance(x, n.Var) and isinstance(x.name, str) else None
        if (not found or found[2] is None or _bad_literal(found[2]) is not None or meant.is_bool
                or found[0] in (None, D.BOOL, meant)):
            return None
        v = found[2].value
        try:
            n.lit(v, meant)  # the let offered must build: a value the type holds
        except VyreError:
            return None
        if meant.is_float:
            text = repr(float(v)) if math.isfinite(v) else f"float('{v}')"
        elif isinstance(v, int) and not isinstance(v, bool):
            text = str(v)
        else:
            return None
        name = shown(x.name)
        return (f"{name} is {found[0]} from its let (let {x.name} = {n.render_lit(found[2])}). Fix: where {name} "
                f"should hold {meant} values, declare it so: ir.let({name}, ir.{meant.value}({text}))")

    def kind(self, t: DataType | None, ok: str, where, what: str) -> bool:
        """Check `t` is of kind ok in {"int", "float", "num", "bool", "int32"}."""
        if t is None:
            return False
        good = {"int": t.is_int, "float": t.is_float, "num": t.is_int or t.is_float,
                "bool": t.is_bool, "int32": t in (D.U32, D.I32)}[ok]
        if not good:
            words = {"int": "an integer type", "float": "a float type", "num": "a numeric (non-bool) type",
                     "bool": "bool", "int32": "u32 or i32"}[ok]
            fix = {"int": "ir.cast it to an integer type (its value: this operation has no float form)",
                   "float": "ir.cast it to f32 or f64 first",
                   "num": "ir.select(cond, 1, 0) turns a bool into a number",
                   "bool": "compare it, e.g. x != 0",
                   "int32": "ir.cast it to u32 or i32, or reduce through a workgroup buffer"}[ok]
            self.err(where, f"{what} needs {words}, got {t}. Fix: {fix}.")
        return good

    # ---- expressions: each walker returns (typed expression, type or None) -------------------
    def expr(self, e: n.Expr, where, want: DataType | None = None):
        """The walk typing `e` (wanted as `want`), or its result where this node was typed for the
        same want without a diagnostic since the last change of a variable's type (a scope closing,
        a name declared again): a value used again is typed once (each partial sum of `s = s + x`
        stored is one new node to type, not the whole sum)."""
        if isinstance(e, (n.Lit, n.Var)):
            return self._expr(e, where, want)
        hit = self.typed.get((id(e), want))
        return hit if hit is not None else self._typed(e, where, want)

    def _typed(self, e: n.Expr, where, want: DataType | None):
        before = len(self.diags)
        got = yield self._expr(e, where, want)
        if len(self.diags) == before:
            self.typed[(id(e), want)] = got
        return got

    def _expr(self, e: n.Expr, where, want: DataType | None = None):
        match e:
            case n.Lit():
                return self.literal(e, where, want)
            case n.Var(name):
                found = self.lookup(name)
                if found is None:
                    self.err(where, f"variable {shown(name)} is not defined here. Fix: declare it with "
                                    f"ir.let({shown(name)}, ...) before this use, in this block or an enclosing one.")
                    return e, None
                return e, found[0]
            case n.Load(buf, index):
                b = self.buffer(buf, where)
                idx, ti = yield self.expr(index, where, D.U32)
                self.want(ti, D.U32, where, f"index of load {buf}[...]")
                return n.Load(buf, idx), (b.dtype if b else None)
            case n.BufLen(buf):
                self.buffer(buf, where)
                return e, D.U32
            case n.Builtin(name, axis):
                if name not in n.BUILTINS or axis not in (0, 1, 2):
                    self.err(where, f"unknown builtin {name}.{axis}. Fix: use one of {', '.join(n.BUILTINS)} "
                                    "with axis 0..2.")
                return e, D.U32
            case n.BinOp():
                return (yield self.binop(e, where, want))
            case n.UnOp():
                return (yield self.unop(e, where, want))
            case n.Select(cond, a, b):
                c, tc = yield self.expr(cond, where, D.BOOL)
                self.want(tc, D.BOOL, where, "condition of select")
                (a, ta), (b, tb) = yield self.pair(a, b, where, want)
                return n.Select(c, a, b), self.same(ta, tb, where, "select")
            case n.Cast(dtype, a):
                bad = _cast_literal(a, dtype)
                if bad is not None:
                    text, becomes, how, typed = bad
                    meant = {"wrap to": "the wrapped value", "saturate to": "the nearest value it holds"}.get(how, "0")
                    fix = (f"write a literal in that range ({becomes} itself where {meant} is meant), or cast a "
                           f"typed value (e.g. ir.cast({typed}, '{dtype}'))" if typed else
                           f"write a literal in that range ({becomes} itself where {meant} is meant); no integer "
                           f"type holds {text}")
                    self.err(where, f"cast of the literal {text} to {dtype}, which holds {dtype.min} to {dtype.max}: "
                                    f"it would {how} {becomes}. Fix: {fix}.", problem="literal cast", text=text,
                             dtype=dtype, how=how)
                    return e, dtype
                if isinstance(a, n.Lit) or not weak_only(a, self.weak):
                    a, _ = yield self.expr(a, where, _cast_operand(a, dtype))
                    return n.Cast(dtype, a), dtype
                # literals alone: computed in f64 for a float or bool (rounded once, by the cast), in the
                # integer type itself where it holds them all; an integer-only operation keeps the default types
                lits, integer_op = _literal_facts(a)
                floats = any(x.dtype.is_float for x in lits)
                if dtype.is_int:
                    big = next((x.raw for x in lits if not x.dtype.is_float and not dtype.min <= x.raw <= dtype.max),
                               None)
                    if floats or big is not None:
                        typed = "ir.f64(1.0)" if floats else _typed_int(big)
                        what = "a float literal" if floats else f"the literal {big}, which {dtype} does not hold"
                        fix = (f"give the expression its type by making one literal typed (e.g. {typed}), and cast "
                               f"that on purpose, or write literals {dtype} holds" if typed else
                               f"write literals {dtype} holds; no integer type holds {big}")
                        self.err(where, f"cast to {dtype} of an expression of literals with {what}: computed in "
                                        f"{dtype} it is no value the literals say, and in another type a guess. "
                                        f"Fix: {fix}.",
                                 problem="literal expression cast", dtype=dtype)
                        return e, dtype
                    want_a = dtype
                elif integer_op and dtype.is_float:
                    self.err(where, f"cast to {dtype} of an expression of literals with the integer-only operation "
                                    f"{integer_op}: {dtype} has no {integer_op}, and computed in the default integer "
                                    "type (u32, else i32) it would wrap or mask where the literals say otherwise. "
                                    "Fix: give the expression its integer type by making one literal typed (e.g. "
                                    "ir.u64(1)), and cast that on purpose.",
                             problem="literal expression cast", dtype=dtype)
                    return e, dtype
                else:
                    want_a = None if integer_op or (dtype.is_bool and not floats) else D.F64
                a, _ = yield self.expr(a, where, want_a)
                return n.Cast(dtype, a), dtype
            case n.Fma():
                return (yield self.fma(e, where, want))
            case n.Atomic():
                return (yield self.atomic(e, where))
            case n.SubgroupBallot(cond):
                c, tc = yield self.expr(cond, where, D.BOOL)
                self.want(tc, D.BOOL, where, "subgroup_ballot condition")
                return n.SubgroupBallot(c), D.U32
            case n.SubgroupShuffle(value, lane):
                v, tv = yield self.expr(value, where, want)
                lane, tl = yield self.expr(lane, where, D.U32)
                self.want(tl, D.U32, where, "subgroup_shuffle lane")
                return n.SubgroupShuffle(v, lane), tv
            case n.SubgroupAdd(value):
                v, tv = yield self.expr(value, where, want)
                ok = self.kind(tv, "int32", where, "subgroup_add")
                return n.SubgroupAdd(v), tv if ok else None
        self.err(where, f"{shown(e)} is not an IR expression. Fix: build expressions with the ir.* functions.")
        return e, None

    def literal(self, e: n.Lit, where, want: DataType | None):
        bad = _bad_literal(e)
        if bad is not None:
            self.err(where, f"literal {shown(e)} {bad}. Fix: build literals with ir.lit(value, 'type').")
            return e, (e.dtype if not e.weak else None)
        if not e.weak:
            return e, e.dtype
        target = want if want is not None else default_weak_type(e)
        strong = None if target is None else _strong(e, target)
        if strong is None:
            if target is None:
                self.err(where, f"literal {shown(e.value)} is beyond every integer type (u64 holds up to "
                                f"{D.U64.max}). Fix: write a literal that fits a type, e.g. ir.lit(value, 'u64'), "
                                "or a float literal where a float is meant.", problem="literal", value=e.value,
                         dtype=None)
                return e, None
            why = f" (past its largest finite, {target.max!r}, so it would round to an infinity)" \
                if target.is_float else ""
            inf = ", or math.inf for an infinity" if target.is_float else ""
            fix = f"a {target} literal that fits{inf}{n.on_purpose(e.value, target)}"
            if isinstance(e.value, float) and not target.is_float:  # a float takes no int or bool type, whole or not
                why = f" (a float literal takes a float type only; {target} values are not floats)"
                whole = math.isfinite(e.value) and e.value == int(e.value) and not target.is_bool
                fix = (f"{int(e.value)} (an int literal){n.on_purpose(e.value, target)}" if whole else fix)
            if target.is_bool and not isinstance(e.value, bool):
                why = " (a bool literal is True or False)"
                fix = ("True or False; for 'not zero', compare: ir.ne(x, 0); for a number from a condition c (c * 1.0 "
                       "takes 1.0 as a bool), ir.cast(c, 'f32') or ir.select(c, 1.0, 0.0)")
            self.err(where, f"literal {shown(e.value)} cannot be a {target}{why}. Fix: write {fix}.",
                     problem="literal", value=e.value, dtype=target)
            return e, None
        return strong, strong.dtype

    def pair(self, a: n.Expr, b: n.Expr, where, want: DataType | None):
        """Type two operands that must agree, letting a strong one fix a weak one's type."""
        if weak_only(a, self.weak) and not weak_only(b, self.weak):  # `(0.1 + 0.2) < x` types 0.1 + 0.2 as x
            rb = yield self.expr(b, where, want)
            ra = yield self.expr(a, where, rb[1] or want)
            return ra, rb
        ra = yield self.expr(a, where, want)
        rb = yield self.expr(b, where, ra[1] or want)
        return ra, rb

    def binop(self, e: n.BinOp, where, want):
        op = e.op
        if op not in n.BINOPS:
            self.err(where, f"unknown binary op {shown(op)}. Fix: use one of {', '.join(n.BINOPS)}.")
            return e, None
        if op in n.LOGIC_BINOPS:
            (a, ta), (b, tb) = yield self.pair(e.a, e.b, where, D.BOOL)
            self.want(ta, D.BOOL, where, f"left operand of {op}")
            self.want(tb, D.BOOL, where, f"right operand of {op}")
            return n.BinOp(op, a, b), D.BOOL
        cmp = op in n.CMP_BINOPS
        (a, ta), (b, tb) = yield self.pair(e.a, e.b, where, None if cmp else want)
        t = self.same(ta, tb, where, op, (e.a, e.b))
        if t is D.BOOL and op in _BOOL_BITWISE:  # `c1 & c2` on conditions, as in NumPy
            return n.BinOp(_BOOL_BITWISE[op], a, b), D.BOOL
        out = n.BinOp(op, a, b)
        if t is None:
            return out, (D.BOOL if cmp else None)
        if cmp:
            if op not in ("eq", "ne"):
                self.kind(t, "num", where, op)
            return out, D.BOOL
        if op in n.INT_BINOPS or op == "mod":
            if op == "mod" and t.is_float:
                self.err(where, "mod is defined for integers only (the IR has no float remainder). Fix: compute "
                                "a - b * ir.trunc(a / b), in f64 for f32 operands (with A = ir.cast(a, 'f64') and "
                                "B = ir.cast(b, 'f64'): ir.cast(A - B * ir.trunc(A / B), 'f32')): in f32 itself it can "
                                "be off by a whole b; it nears np.fmod while a / b stays well within the type's digits.")
                return out, None
            return out, (t if self.kind(t, "int", where, op) else None)
        return out, (t if self.kind(t, "num", where, op) else None)

    def unop(self, e: n.UnOp, where, want):
        op = e.op
        if op not in n.UNOPS:
            self.err(where, f"unknown unary op {shown(op)}. Fix: use one of {', '.join(n.UNOPS)}.")
            return e, None
        if op == "not":
            a, ta = yield self.expr(e.a, where, D.BOOL)
            self.want(ta, D.BOOL, where, "operand of not")
            return n.UnOp(op, a), D.BOOL
        pass_want = want if op in ("bitnot", "reverse_bits", "neg", "abs", "sign") or op in n.FLOAT_UNOPS else None
        a, ta = yield self.expr(e.a, where, pass_want)
        if op == "bitnot" and ta is D.BOOL:  # `~cond`, as in NumPy
            return n.UnOp("not", a), D.BOOL
        out = n.UnOp(op, a)
        if op in n.INT_UNOPS:
            if not self.kind(ta, "int", where, op):
                return out, None
            return out, n.result_type(out, (ta,))
        if op in n.NUM_UNOPS:
            return out, (ta if self.kind(ta, "num", where, op) else None)
        if op in n.FLOAT_PRED_UNOPS:
            self.kind(ta, "float", where, op)
            return out, D.BOOL
        return out, (ta if self.kind(ta, "float", where, op) else None)

    def fma(self, e: n.Fma, where, want):
        operands = [e.a, e.b, e.c]
        first = next((i for i, x in enumerate(operands) if not weak_only(x, self.weak)), 0)
        typed: list = [None, None, None]
        typed[first] = yield self.expr(operands[first], where, want)
        t = typed[first][1] or want
        for i in range(3):
            if typed[i] is None:
                typed[i] = yield self.expr(operands[i], where, t)
        t = self.same(self.same(typed[0][1], typed[1][1], where, "fma"), typed[2][1], where, "fma")
        if t is not None:
            self.kind(t, "num", where, "fma")
        return n.Fma(typed[0][0], typed[1][0], typed[2][0]), t

    def atomic(self, e: n.Atomic, where):
        b = self.buffer(e.buffer, where)
        t = b.dtype if b else None
        if e.op not in n.ATOMIC_OPS:
            self.err(where, f"unknown atomic op {shown(e.op)}. Fix: use one of {', '.join(n.ATOMIC_OPS)}.")
        if b is not None:
            if not b.access.writable:
                self.err(where, f"atomic on {b.access.value} buffer {shown(b.name)}. "
                                f"Fix: declare {shown(b.name)} read_write (BufferDecl.read_write) to update it.")
            if t not in ATOMIC_TYPES:
                self.err(where, f"atomics need a u32, i32, u64 or i64 buffer; {shown(b.name)} is {t}. "
                                "Fix: use a 32/64-bit integer buffer (floats: encode as ordered integers).")
        idx, ti = yield self.expr(e.index, where, D.U32)
        self.want(ti, D.U32, where, f"index of atomic on {e.buffer}")
        val, tv = yield self.expr(e.value, where, t)
        if t is not None:
            self.want(tv, t, where, f"value of atomic on {e.buffer}")
        expected = None
        if (e.op == "compare_exchange") != (e.expected is not None):
            self.err(where, "`expected` is given exactly for compare_exchange. "
                            "Fix: pass expected=... with compare_exchange and only there.")
        if e.expected is not None:
            expected, tx = yield self.expr(e.expected, where, t)
            if t is not None:
                self.want(tx, t, where, f"expected value of compare_exchange on {e.buffer}")
        return n.Atomic(e.op, e.buffer, idx, val, expected), t

    # ---- statements ---------------------------------------------------------------------------
    def body(self, stmts, path: Where, new_scope: bool = True):
        if new_scope:
            self.open_scope()
        out = []
        for i, s in enumerate(stmts):
            out.append((yield self.stmt(s, Where(path, f"[{i}]"))))
        if new_scope:
            self.close_scope()
        return tuple(out)

    def declare(self, name: str, t, mutable: bool, where, literal: n.Lit | None = None) -> None:
        """Declare `name` of type `t`; `literal`: the literal its let gave it, for messages."""
        if not isinstance(name, str) or not _IDENT.match(name):
            self.err(where, f"variable name {shown(name)} is not an identifier. Fix: {IDENT_FIX}")
        elif self.lookup(name) is not None:
            fix = (f"use ir.assign({shown(name)}, ...) to update it, or pick a new name" if mutable and
                   self.lookup(name)[1] else "pick a new name (a loop variable cannot be assigned)")
            self.err(where, f"variable {shown(name)} is already defined in an enclosing scope. Fix: {fix}.")
            self.typed.clear()  # the name now has another type
        self.vars.setdefault(name, []).append((t, mutable, literal))
        self.scopes[-1].append(name)

    def stmt(self, s: n.Node, where):
        match s:
            case n.Let(name, value):
                v, t = yield self.expr(value, where, None)
                self.declare(name, t, True, where, v if isinstance(v, n.Lit) else None)
                return n.Let(name, v)
            case n.Assign(name, value):
                found = self.lookup(name)
                if found is None:
                    self.err(where, f"assignment to undeclared variable {shown(name)}. "
                                    f"Fix: declare it first with ir.let({shown(name)}, initial_value).")
                    v, _ = yield self.expr(value, where)
                    return n.Assign(name, v)
                t, mutable, _ = found
                if not mutable:
                    self.err(where, f"loop variable {shown(name)} is read-only. "
                                    "Fix: copy it into a new variable with ir.let and change that.")
                v, tv = yield self.expr(value, where, t)
                said = self.from_let(n.Var(name), tv) if t is not None and tv is not None and tv is not t else None
                if said:
                    self.err(where, f"value assigned to {shown(name)} must be {t}, got {tv}: {said}; else convert "
                                    f"the value with ir.cast(..., '{t}').")
                elif t is not None:
                    self.want(tv, t, where, f"value assigned to {shown(name)}")
                return n.Assign(name, v)
            case n.Store(buf, index, value):
                b = self.buffer(buf, where)
                if b is not None and not b.access.writable:
                    self.err(where, f"store into {b.access.value} buffer {shown(b.name)}. "
                                    f"Fix: declare {shown(b.name)} with BufferDecl.output or read_write.")
                idx, ti = yield self.expr(index, where, D.U32)
                self.want(ti, D.U32, where, f"index of store {buf}[...]")
                v, tv = yield self.expr(value, where, b.dtype if b else None)
                if b is not None:
                    self.want(tv, b.dtype, where, f"value stored into {buf}", value)
                return n.Store(buf, idx, v)
            case n.If(cond, then, otherwise):
                c, tc = yield self.expr(cond, where, D.BOOL)
                self.want(tc, D.BOOL, where, "if condition")
                then = yield self.body(then, Where(where, ".then"))
                otherwise = yield self.body(otherwise, Where(where, ".else"))
                return n.If(c, then, otherwise)
            case n.Loop(var, start, end, body):
                start, t0 = yield self.expr(start, where, D.U32)
                end, t1 = yield self.expr(end, where, D.U32)
                self.want(t0, D.U32, where, f"loop start of {shown(var)}")
                self.want(t1, D.U32, where, f"loop end of {shown(var)}")
                self.open_scope()
                self.declare(var, D.U32, False, where)
                body = yield self.body(body, Where(where, ".body"), new_scope=False)
                self.close_scope()
                return n.Loop(var, start, end, body)
            case n.Barrier(scope):
                if scope not in n.BARRIER_SCOPES:
                    self.err(where, f"barrier scope {shown(scope)} is unknown. Fix: use 'workgroup' or 'grid'.")
                return s
            case n.Return():
                return s
            case n.Block(body):
                return n.Block((yield self.body(body, Where(where, ".block"))))
        self.err(where, f"{shown(s)} is not an IR statement. Fix: build statements with the ir.* functions.")
        return s


def resolve_literals(buffers: tuple[BufferDecl, ...], entry: tuple[n.Node, ...]) -> tuple[n.Node, ...]:
    """`entry` with every weak literal typed from its context (problems are left for `validate`)."""
    return drive(_Checker(buffers).body(entry, Where(None, "entry"), new_scope=False))


def _check_buffers(p: Program, err) -> None:
    names: dict[str, int] = {}
    slots: dict[int, str] = {}
    shared_bytes = 0
    for i, b in enumerate(p.buffers):
        where = f"buffers[{i}] ({b.name})"
        if not isinstance(b.name, str) or not _IDENT.match(b.name):
            err(where, f"buffer name {shown(b.name)} is not an identifier. Fix: {IDENT_FIX}")
        if isinstance(b.name, str):
            if b.name in names:
                err(where, f"buffer name {shown(b.name)} is declared twice (also buffers[{names[b.name]}]). "
                           "Fix: give every buffer a unique name.")
            names.setdefault(b.name, i)
        if b.count < 0:
            err(where, f"count {shown(b.count)} is negative. Fix: use 0 (sized at dispatch) or a positive count.")
        elif b.count >= 2**32:
            err(where, f"count {b.count} is 2**32 or more, but buffer lengths are u32. "
                       "Fix: split the data into buffers of fewer than 2**32 elements.")
        if b.is_shared:
            if b.binding is not None:
                err(where, "workgroup buffers take no binding slot. Fix: declare it with BufferDecl.workgroup(name, count, dtype).")
            if not isinstance(b.count, int) or b.count <= 0:
                err(where, f"workgroup buffer {shown(b.name)} needs a static count > 0. Fix: BufferDecl.workgroup({shown(b.name)}, 256, dtype).")
            else:  # each array 8-byte aligned, as the PTX declares it
                shared_bytes += (b.count * b.dtype.nbytes + 7) // 8 * 8
            if b.output:
                err(where, "a workgroup buffer cannot be an output. Fix: copy results into an output buffer.")
            continue
        if not isinstance(b.binding, int) or isinstance(b.binding, bool) or b.binding < 0:
            err(where, f"binding {shown(b.binding)} is not a non-negative int. Fix: number bindings 0, 1, 2, ...")
        elif b.binding >= 2**32:
            err(where, f"binding {shown(b.binding)} is 2**32 or more; binding slots are u32. Fix: number bindings 0, 1, "
                       "2, ...")
        elif b.binding in slots:
            err(where, f"binding {b.binding} is used by {shown(slots[b.binding])} too. Fix: give every buffer its own slot.")
        else:
            slots[b.binding] = b.name
        if b.output and b.access in (Access.READ_ONLY, Access.UNIFORM):
            err(where, f"{b.access.value} buffer {shown(b.name)} is flagged output but cannot be written. "
                       "Fix: use BufferDecl.output or BufferDecl.read_write.")
        if b.output_byte_range is not None:
            lo_hi = b.output_byte_range
            if not b.is_output:
                err(where, "output_byte_range is set on a buffer that is not an output. Fix: remove it.")
            elif len(lo_hi) != 2 or not 0 <= lo_hi[0] <= lo_hi[1]:
                err(where, f"output_byte_range {lo_hi} is not (start, end) with 0 <= start <= end. Fix: pass byte offsets in order.")
            elif lo_hi[0] % b.dtype.nbytes or lo_hi[1] % b.dtype.nbytes:
                err(where, f"output_byte_range {lo_hi} is not a multiple of the {b.dtype.nbytes}-byte element. "
                           "Fix: use whole-element byte offsets.")
            elif lo_hi[1] > (2**32 - 1) * b.dtype.nbytes:
                err(where, f"output_byte_range end {lo_hi[1]} is past any buffer's bytes (lengths are u32: at most "
                           f"{(2**32 - 1) * b.dtype.nbytes} bytes of {b.dtype.value}). Fix: pass byte offsets within "
                           "the buffer.")
            elif b.count and lo_hi[1] > b.count * b.dtype.nbytes:
                err(where, f"output_byte_range end {lo_hi[1]} is past the buffer's {b.count * b.dtype.nbytes} bytes. "
                           "Fix: shrink the range or grow the buffer.")
    if shared_bytes > MAX_STATIC_SHARED_BYTES:
        err("buffers", f"workgroup buffers take {shared_bytes} bytes (each rounded up to a multiple of 8), over the "
                       f"{MAX_STATIC_SHARED_BYTES}-byte static shared-memory limit. Fix: shrink the workgroup buffers.")
    bound = sum(1 for b in p.buffers if not b.is_shared)
    params = param_bytes(bound, "grid_sync" in p.capabilities)
    if params > MAX_PARAM_BYTES:
        err("buffers", f"{bound} bound buffers take {params} bytes of kernel parameters (a pointer and a length "
                       f"each), over the {MAX_PARAM_BYTES}-byte limit. Fix: bind fewer buffers: concatenate arrays "
                       "of one type into one buffer and pass each one's offset.")


def param_bytes(bound: int, grid_sync: bool = False) -> int:
    """Bytes of kernel parameters a program of `bound` buffers takes (a pointer and a u32 length
    each, padded to 8; a grid barrier's state pointer besides)."""
    return -(-bound * 12 // 8) * 8 + (8 if grid_sync else 0)


def _program(program) -> Program:
    if not isinstance(program, Program):
        raise IRValidationError(f"expected an ir.Program, got {type(program).__name__}. "
                                "Fix: build one with ir.Program(buffers, workgroup_size, entry).")
    return program


def validate(program: Program) -> Diagnostics:
    """Every problem in `program`; an empty list means it is valid."""
    _program(program)
    diags: list[Diagnostic] = []
    err = lambda where, msg: diags.append(Diagnostic(where, msg))  # noqa: E731
    if not isinstance(program.name, str) or not _IDENT.match(program.name):
        err("program", f"program name {shown(program.name)} is not an identifier (it names the kernel). "
                       f"Fix: {IDENT_FIX}")
    elif program.name in _PTX_NAMES_TAKEN:
        err("program", f"program name {shown(program.name)} is not one PTX can give a kernel (a lone _ or a name "
                       "PTX predefines). Fix: choose another name, e.g. 'main'.")
    elif program.name.startswith("vyre_"):
        err("program", f"program name {shown(program.name)} begins with vyre_, which names the functions the "
                       "kernels link (vyre_math_sin_f32, vyre_grid_barrier, ...). Fix: choose another name, e.g. "
                       f"{program.name.removeprefix('vyre_') or 'main'!r}.")
    _check_buffers(program, err)
    ws = program.workgroup_size
    total = ws[0] * ws[1] * ws[2]
    if any(v < 1 for v in ws) or any(v > m for v, m in zip(ws, MAX_AXIS)) or total > MAX_THREADS:
        err("workgroup_size", f"workgroup size {ws} is outside 1..{MAX_AXIS} per axis and {MAX_THREADS} threads "
                              "in all. Fix: use e.g. 256 or (16, 16); cover more data with more workgroups.")
    checker = _Checker(program.buffers)
    drive(checker.body(program.entry, Where(None, "entry"), new_scope=False))
    return Diagnostics(dict.fromkeys(diags + checker.diags))  # one problem met twice (x[i] = i, i unknown) once


def check(program: Program) -> Program:
    """Return `program` if valid; otherwise raise IRValidationError carrying every diagnostic."""
    if _program(program).__dict__.get("_valid"):  # programs are immutable: validate each object once
        return program
    diags = validate(program)
    if diags:
        shown_diags = [str(d) for d in diags[:MESSAGE_PROBLEMS]]
        if len(diags) > MESSAGE_PROBLEMS:  # all of them stay in .diagnostics
            shown_diags.append(f"... and {len(diags) - MESSAGE_PROBLEMS} more, listed in the error's .diagnostics. Fix: "
                               "correct the problems above and those, then check again.")
        text = "\n  ".join(shown_diags)
        raise IRValidationError(f"program {shown(program.name)} is invalid ({len(diags)} problem"
                                f"{'s' if len(diags) > 1 else ''}):\n  {text}", diags)
    object.__setattr__(program, "_valid", True)
    return program
