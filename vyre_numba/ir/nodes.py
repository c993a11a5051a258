"""Expressions and statements of the vyre IR: immutable, hashable, structurally compared.

Build them with the functions at the bottom (`load("a", gid(0)) + 1`, `store(...)`, `if_(...)`).
A Python int or float in an expression becomes a *weak* literal whose type is fixed from its
context when the enclosing `Program` is built (`load(f32_buffer, i) * 2` multiplies by 2.0f).
`==` and `!=` compare IR structurally; use `.eq()` / `.ne()` to build comparisons.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Iterable, Union

from ..errors import IRValidationError
from .types import DataType, bits_to_float, float_to_bits

# Operation tables: the single source of the IR's operation names.
ARITH_BINOPS = ("add", "sub", "mul", "div", "mod", "min", "max", "absdiff")
INT_BINOPS = ("wrapping_add", "wrapping_sub", "saturating_add", "saturating_sub", "mul_high",
              "bitand", "bitor", "bitxor", "shl", "shr", "rotl", "rotr")
CMP_BINOPS = ("eq", "ne", "lt", "gt", "le", "ge")
LOGIC_BINOPS = ("logical_and", "logical_or")
BINOPS = ARITH_BINOPS + INT_BINOPS + CMP_BINOPS + LOGIC_BINOPS

INT_UNOPS = ("bitnot", "popcount", "clz", "ctz", "reverse_bits")
NUM_UNOPS = ("neg", "abs", "sign")
FLOAT_UNOPS = ("sqrt", "floor", "ceil", "round", "trunc", "exp", "exp2", "log", "log2",
               "rsqrt", "recip", "sin", "cos", "tan")
FLOAT_PRED_UNOPS = ("isnan", "isinf", "isfinite")
BOOL_UNOPS = ("not",)
UNOPS = INT_UNOPS + NUM_UNOPS + FLOAT_UNOPS + FLOAT_PRED_UNOPS + BOOL_UNOPS
TRANSCENDENTAL_UNOPS = ("exp", "exp2", "log", "log2", "sin", "cos", "tan", "rsqrt")

ATOMIC_OPS = ("add", "or", "and", "xor", "min", "max", "exchange", "compare_exchange")
BUILTINS = ("invocation_id", "local_id", "workgroup_id", "num_workgroups",
            "subgroup_local_id", "subgroup_size")
BARRIER_SCOPES = ("workgroup", "grid")

_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "bitand": "&",
            "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>", "eq": "==", "ne": "!=",
            "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "logical_and": "&&", "logical_or": "||"}


def _fail(msg: str) -> IRValidationError:
    return IRValidationError(msg)


class Expr:
    """Base class of every expression. Supports Python arithmetic operators: `/` and `//` both
    build `div`, which truncates toward zero on integers (C semantics, not Python's floor) and is
    IEEE division on floats; use `ir.floor(a / b)` for a float floor division."""

    __slots__ = ()

    def __add__(self, o): return BinOp("add", self, _e(o))
    def __radd__(self, o): return BinOp("add", _e(o), self)
    def __sub__(self, o): return BinOp("sub", self, _e(o))
    def __rsub__(self, o): return BinOp("sub", _e(o), self)
    def __mul__(self, o): return BinOp("mul", self, _e(o))
    def __rmul__(self, o): return BinOp("mul", _e(o), self)
    def __truediv__(self, o): return BinOp("div", self, _e(o))
    def __rtruediv__(self, o): return BinOp("div", _e(o), self)
    __floordiv__ = __truediv__
    __rfloordiv__ = __rtruediv__
    def __mod__(self, o): return BinOp("mod", self, _e(o))
    def __rmod__(self, o): return BinOp("mod", _e(o), self)
    def __and__(self, o): return BinOp("bitand", self, _e(o))
    def __rand__(self, o): return BinOp("bitand", _e(o), self)
    def __or__(self, o): return BinOp("bitor", self, _e(o))
    def __ror__(self, o): return BinOp("bitor", _e(o), self)
    def __xor__(self, o): return BinOp("bitxor", self, _e(o))
    def __rxor__(self, o): return BinOp("bitxor", _e(o), self)
    def __lshift__(self, o): return BinOp("shl", self, _e(o))
    def __rlshift__(self, o): return BinOp("shl", _e(o), self)
    def __rshift__(self, o): return BinOp("shr", self, _e(o))
    def __rrshift__(self, o): return BinOp("shr", _e(o), self)
    def __neg__(self): return UnOp("neg", self)
    def __invert__(self): return UnOp("bitnot", self)
    def __lt__(self, o): return BinOp("lt", self, _e(o))
    def __le__(self, o): return BinOp("le", self, _e(o))
    def __gt__(self, o): return BinOp("gt", self, _e(o))
    def __ge__(self, o): return BinOp("ge", self, _e(o))
    def eq(self, o) -> "Expr": return BinOp("eq", self, _e(o))
    def ne(self, o) -> "Expr": return BinOp("ne", self, _e(o))
    def cast(self, dtype) -> "Expr": return Cast(DataType.parse(dtype), self)

    def __bool__(self):
        raise IRValidationError(
            f"an IR expression ({self}) has no Python truth value. "
            "Fix: build control flow with ir.if_(cond, then, else_) and comparisons with "
            "ir.select / .eq() instead of Python `if`, `and`, `or` or `==`."
        )

    def __str__(self) -> str:
        return render_expr(self)

    def children(self) -> tuple["Expr", ...]:
        return tuple(getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Expr))


@dataclass(frozen=True, slots=True, eq=True)
class Lit(Expr):
    """A literal. `raw` is the integer value, 0/1 for bool, or the IEEE bit pattern for floats.
    `weak` literals come from bare Python numbers; their type is fixed by context."""

    dtype: DataType
    raw: int
    weak: bool = False

    @property
    def value(self) -> Union[int, float, bool]:
        if self.dtype.is_float:
            return bits_to_float(self.raw, self.dtype)
        if self.dtype.is_bool:
            return bool(self.raw)
        return self.raw


@dataclass(frozen=True, slots=True, eq=True)
class Var(Expr):
    name: str


@dataclass(frozen=True, slots=True, eq=True)
class Load(Expr):
    buffer: str
    index: Expr


@dataclass(frozen=True, slots=True, eq=True)
class BufLen(Expr):
    """Element count of a buffer at dispatch time, as u32."""
    buffer: str


@dataclass(frozen=True, slots=True, eq=True)
class Builtin(Expr):
    """An invocation-invariant id (u32): invocation_id / local_id / workgroup_id / num_workgroups
    per axis 0..2, or subgroup_local_id / subgroup_size (axis 0)."""
    name: str
    axis: int = 0


@dataclass(frozen=True, slots=True, eq=True)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True, eq=True)
class UnOp(Expr):
    op: str
    a: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Cast(Expr):
    dtype: DataType
    a: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Fma(Expr):
    """a * b + c with a single rounding (floats); wrapping a*b+c (integers)."""
    a: Expr
    b: Expr
    c: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Atomic(Expr):
    """Atomic read-modify-write of buffer[index]; evaluates to the old value."""
    op: str
    buffer: str
    index: Expr
    value: Expr
    expected: Expr | None = None


@dataclass(frozen=True, slots=True, eq=True)
class SubgroupBallot(Expr):
    """u32 mask of the active lanes of this subgroup whose `cond` is true."""
    cond: Expr


@dataclass(frozen=True, slots=True, eq=True)
class SubgroupShuffle(Expr):
    """`value` as held by lane `lane` of this subgroup; 0 when that lane is absent or inactive."""
    value: Expr
    lane: Expr


@dataclass(frozen=True, slots=True, eq=True)
class SubgroupAdd(Expr):
    """Wrapping sum of a 32-bit integer `value` over the active lanes of this subgroup."""
    value: Expr


# ---- statements -------------------------------------------------------------------------------

class Node:
    """Base class of every statement."""

    __slots__ = ()

    def __str__(self) -> str:
        return "\n".join(render_stmt(self, 0))


@dataclass(frozen=True, slots=True, eq=True)
class Let(Node):
    name: str
    value: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Assign(Node):
    name: str
    value: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Store(Node):
    buffer: str
    index: Expr
    value: Expr


@dataclass(frozen=True, slots=True, eq=True)
class If(Node):
    cond: Expr
    then: tuple[Node, ...]
    otherwise: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True, eq=True)
class Loop(Node):
    """for var in [start, end) with u32 bounds evaluated once on entry; `var` is read-only."""
    var: str
    start: Expr
    end: Expr
    body: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=True)
class Barrier(Node):
    scope: str = "workgroup"


@dataclass(frozen=True, slots=True, eq=True)
class Return(Node):
    pass


@dataclass(frozen=True, slots=True, eq=True)
class Block(Node):
    body: tuple[Node, ...]


# ---- builders ---------------------------------------------------------------------------------

ExprLike = Union[Expr, int, float, bool]


def _e(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Lit(DataType.BOOL, int(x))
    if isinstance(x, int):
        return Lit(DataType.I64, int(x), weak=True)
    if isinstance(x, float):
        return Lit(DataType.F64, float_to_bits(x, DataType.F64), weak=True)
    if hasattr(x, "dtype") and hasattr(x, "item"):  # NumPy scalar: keep its type
        from numpy import dtype as _npdt
        name = {"uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "int8": "i8",
                "int16": "i16", "int32": "i32", "int64": "i64", "float16": "f16",
                "float32": "f32", "float64": "f64", "bool": "bool"}.get(_npdt(x.dtype).name)
        if name:
            return lit(x.item(), name)
    raise _fail(f"{x!r} ({type(x).__name__}) is not an IR expression. "
                "Fix: pass an ir expression, a Python int/float/bool, or a NumPy scalar.")


def _body(stmts) -> tuple[Node, ...]:
    if isinstance(stmts, Node):
        return (stmts,)
    out = []
    for s in stmts or ():
        if isinstance(s, Node):
            out.append(s)
        elif isinstance(s, (list, tuple)):
            out.extend(_body(s))
        else:
            raise _fail(f"{s!r} is not an IR statement. "
                        "Fix: statement lists hold ir.let / assign / store / if_ / loop / barrier / "
                        "return_ / block; wrap an atomic in ir.let('_', ...).")
    return tuple(out)


def _name(n, what: str) -> str:
    if not isinstance(n, str) or not n:
        raise _fail(f"{what} name {n!r} is not a non-empty string. Fix: name it with a str.")
    return n


def lit(value: int | float | bool, dtype: DataType | str | None = None) -> Lit:
    """A literal of `dtype`; without one, a weak literal typed by its context."""
    if dtype is None:
        return _e(value)  # type: ignore[return-value]
    dt = DataType.parse(dtype)
    if dt.is_float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(f"literal {value!r} is not a number. Fix: pass a float for {dt}.")
        try:
            fv = float(value)
        except OverflowError:  # an int beyond every float: rounds to +-inf, as IEEE does
            fv = math.inf if value > 0 else -math.inf
        return Lit(dt, float_to_bits(fv, dt))
    if dt.is_bool:
        if value not in (0, 1, True, False):
            raise _fail(f"bool literal {value!r} is not True/False. Fix: pass True or False.")
        return Lit(dt, int(bool(value)))
    if isinstance(value, float):
        if not value.is_integer():
            raise _fail(f"literal {value!r} is not an integer but the type is {dt}. "
                        f"Fix: pass an int, or use a float type.")
        value = int(value)
    if not isinstance(value, int) or not (dt.min <= value <= dt.max):
        raise _fail(f"literal {value!r} does not fit {dt} (range {dt.min}..{dt.max}). "
                    f"Fix: use a wider type or a value in range.")
    return Lit(dt, int(value))


def _typed(dt: str):
    def make(value):
        return lit(value, dt)
    make.__name__ = dt
    make.__doc__ = f"A {dt} literal."
    return make


u8, u16, u32, u64 = _typed("u8"), _typed("u16"), _typed("u32"), _typed("u64")
i8, i16, i32, i64 = _typed("i8"), _typed("i16"), _typed("i32"), _typed("i64")
f16, bf16, f32, f64 = _typed("f16"), _typed("bf16"), _typed("f32"), _typed("f64")


def boolean(value: bool) -> Lit:
    return lit(value, DataType.BOOL)


def var(name: str) -> Var:
    return Var(_name(name, "variable"))


def load(buffer: str, index: ExprLike) -> Load:
    """buffer[index]; 0 when index is out of bounds."""
    return Load(_name(buffer, "buffer"), _e(index))


def buf_len(buffer: str) -> BufLen:
    return BufLen(_name(buffer, "buffer"))


def _axis(axis: int) -> int:
    if axis not in (0, 1, 2):
        raise _fail(f"axis {axis!r} is not 0, 1 or 2. Fix: use axis 0 (x), 1 (y) or 2 (z).")
    return axis


def invocation_id(axis: int = 0) -> Builtin:
    """Global invocation id along `axis` (u32)."""
    return Builtin("invocation_id", _axis(axis))


def local_id(axis: int = 0) -> Builtin:
    return Builtin("local_id", _axis(axis))


def workgroup_id(axis: int = 0) -> Builtin:
    return Builtin("workgroup_id", _axis(axis))


def num_workgroups(axis: int = 0) -> Builtin:
    return Builtin("num_workgroups", _axis(axis))


gid, lid, wgid = invocation_id, local_id, workgroup_id


def subgroup_local_id() -> Builtin:
    return Builtin("subgroup_local_id", 0)


def subgroup_size() -> Builtin:
    return Builtin("subgroup_size", 0)


def binary(op: str, a: ExprLike, b: ExprLike) -> BinOp:
    if op not in BINOPS:
        raise _fail(f"unknown binary op {op!r}. Fix: use one of {', '.join(BINOPS)}.")
    return BinOp(op, _e(a), _e(b))


def unary(op: str, a: ExprLike) -> UnOp:
    if op not in UNOPS:
        raise _fail(f"unknown unary op {op!r}. Fix: use one of {', '.join(UNOPS)}.")
    return UnOp(op, _e(a))


def _bin(op):
    def make(a: ExprLike, b: ExprLike) -> BinOp:
        return BinOp(op, _e(a), _e(b))
    make.__name__ = op
    make.__doc__ = f"The `{op}` binary operation."
    return make


def _un(op):
    def make(a: ExprLike) -> UnOp:
        return UnOp(op, _e(a))
    make.__name__ = op
    make.__doc__ = f"The `{op}` unary operation."
    return make


add, sub, mul, div, mod = _bin("add"), _bin("sub"), _bin("mul"), _bin("div"), _bin("mod")
min_, max_, absdiff = _bin("min"), _bin("max"), _bin("absdiff")
wrapping_add, wrapping_sub = _bin("wrapping_add"), _bin("wrapping_sub")
saturating_add, saturating_sub = _bin("saturating_add"), _bin("saturating_sub")
mul_high = _bin("mul_high")
bitand, bitor, bitxor = _bin("bitand"), _bin("bitor"), _bin("bitxor")
shl, shr, rotl, rotr = _bin("shl"), _bin("shr"), _bin("rotl"), _bin("rotr")
eq, ne, lt, gt, le, ge = _bin("eq"), _bin("ne"), _bin("lt"), _bin("gt"), _bin("le"), _bin("ge")
logical_and, logical_or = _bin("logical_and"), _bin("logical_or")

neg, bitnot, not_ = _un("neg"), _un("bitnot"), _un("not")
popcount, clz, ctz, reverse_bits = _un("popcount"), _un("clz"), _un("ctz"), _un("reverse_bits")
abs_, sign = _un("abs"), _un("sign")
sqrt, floor, ceil, round_, trunc = _un("sqrt"), _un("floor"), _un("ceil"), _un("round"), _un("trunc")
isnan, isinf, isfinite = _un("isnan"), _un("isinf"), _un("isfinite")
exp, exp2, log, log2 = _un("exp"), _un("exp2"), _un("log"), _un("log2")
rsqrt, recip, sin, cos, tan = _un("rsqrt"), _un("recip"), _un("sin"), _un("cos"), _un("tan")


def select(cond: ExprLike, a: ExprLike, b: ExprLike) -> Select:
    """`a` where cond is true, else `b` (both evaluated)."""
    return Select(_e(cond), _e(a), _e(b))


def cast(a: ExprLike, dtype: DataType | str) -> Cast:
    """Explicit conversion; see the reference interpreter for the exact rules."""
    return Cast(DataType.parse(dtype), _e(a))


def fma(a: ExprLike, b: ExprLike, c: ExprLike) -> Fma:
    return Fma(_e(a), _e(b), _e(c))


def atomic(op: str, buffer: str, index: ExprLike, value: ExprLike,
           expected: ExprLike | None = None) -> Atomic:
    """Atomic `op` on buffer[index]; evaluates to the previous value. compare_exchange stores
    `value` only where the current value equals `expected`."""
    if op not in ATOMIC_OPS:
        raise _fail(f"unknown atomic op {op!r}. Fix: use one of {', '.join(ATOMIC_OPS)}.")
    if (op == "compare_exchange") != (expected is not None):
        raise _fail("`expected` is given exactly for compare_exchange. "
                    "Fix: pass expected=... with compare_exchange and only there.")
    return Atomic(op, _name(buffer, "buffer"), _e(index), _e(value),
                  None if expected is None else _e(expected))


def atomic_add(buffer: str, index: ExprLike, value: ExprLike) -> Atomic:
    return atomic("add", buffer, index, value)


def subgroup_ballot(cond: ExprLike) -> SubgroupBallot:
    return SubgroupBallot(_e(cond))


def subgroup_shuffle(value: ExprLike, lane: ExprLike) -> SubgroupShuffle:
    return SubgroupShuffle(_e(value), _e(lane))


def subgroup_add(value: ExprLike) -> SubgroupAdd:
    return SubgroupAdd(_e(value))


def let(name: str, value: ExprLike) -> Let:
    return Let(_name(name, "variable"), _e(value))


def assign(name: str, value: ExprLike) -> Assign:
    return Assign(_name(name, "variable"), _e(value))


def store(buffer: str, index: ExprLike, value: ExprLike) -> Store:
    """buffer[index] = value; dropped when index is out of bounds."""
    return Store(_name(buffer, "buffer"), _e(index), _e(value))


def if_(cond: ExprLike, then: Iterable[Node] | Node, else_: Iterable[Node] | Node = ()) -> If:
    return If(_e(cond), _body(then), _body(else_))


def loop(var: str, start: ExprLike, end: ExprLike, body: Iterable[Node] | Node) -> Loop:
    return Loop(_name(var, "loop variable"), _e(start), _e(end), _body(body))


def barrier(scope: str = "workgroup") -> Barrier:
    if scope not in BARRIER_SCOPES:
        raise _fail(f"barrier scope {scope!r} is not 'workgroup' or 'grid'. Fix: use one of those.")
    return Barrier(scope)


def return_() -> Return:
    return Return()


def block(*stmts: Node | Iterable[Node]) -> Block:
    return Block(_body(stmts))


# ---- text form --------------------------------------------------------------------------------

def render_lit(x: Lit) -> str:
    if x.weak:
        return repr(x.value)
    if x.dtype.is_float:
        v = x.value
        text = repr(v) if math.isfinite(v) else {True: "nan"}.get(math.isnan(v), "inf" if v > 0 else "-inf")
        return f"{text}{x.dtype}"
    if x.dtype.is_bool:
        return "true" if x.raw else "false"
    return f"{x.raw}{x.dtype}"


def render_expr(x: Expr) -> str:
    match x:
        case Lit():
            return render_lit(x)
        case Var(name):
            return name
        case Load(buf, idx):
            return f"{buf}[{render_expr(idx)}]"
        case BufLen(buf):
            return f"len({buf})"
        case Builtin(name, axis):
            if "subgroup" in name:
                return f"{name}()"
            return f"{name}.{'xyz'[axis]}" if axis in (0, 1, 2) else f"{name}.{axis}"
        case BinOp(op, a, b) if op in _SYMBOLS:
            return f"({render_expr(a)} {_SYMBOLS[op]} {render_expr(b)})"
        case BinOp(op, a, b):
            return f"{op}({render_expr(a)}, {render_expr(b)})"
        case UnOp(op, a):
            return f"{op}({render_expr(a)})"
        case Select(c, a, b):
            return f"select({render_expr(c)}, {render_expr(a)}, {render_expr(b)})"
        case Cast(dt, a):
            return f"{dt}({render_expr(a)})"
        case Fma(a, b, c):
            return f"fma({render_expr(a)}, {render_expr(b)}, {render_expr(c)})"
        case Atomic(op, buf, idx, val, exp_):
            extra = "" if exp_ is None else f", expected={render_expr(exp_)}"
            return f"atomic_{op}({buf}[{render_expr(idx)}], {render_expr(val)}{extra})"
        case SubgroupBallot(c):
            return f"subgroup_ballot({render_expr(c)})"
        case SubgroupShuffle(v, lane):
            return f"subgroup_shuffle({render_expr(v)}, {render_expr(lane)})"
        case SubgroupAdd(v):
            return f"subgroup_add({render_expr(v)})"
    return repr(x)


def render_stmt(s: Node, depth: int) -> list[str]:
    pad = "    " * depth
    match s:
        case Let(name, value):
            return [f"{pad}let {name} = {render_expr(value)}"]
        case Assign(name, value):
            return [f"{pad}{name} = {render_expr(value)}"]
        case Store(buf, idx, value):
            return [f"{pad}{buf}[{render_expr(idx)}] = {render_expr(value)}"]
        case If(cond, then, otherwise):
            lines = [f"{pad}if {render_expr(cond)} {{"] + render_body(then, depth + 1)
            if otherwise:
                lines += [f"{pad}}} else {{"] + render_body(otherwise, depth + 1)
            return lines + [f"{pad}}}"]
        case Loop(v, start, end, body):
            return ([f"{pad}for {v} in {render_expr(start)}..{render_expr(end)} {{"]
                    + render_body(body, depth + 1) + [f"{pad}}}"])
        case Barrier(scope):
            return [f"{pad}barrier({scope})"]
        case Return():
            return [f"{pad}return"]
        case Block(body):
            return [f"{pad}{{"] + render_body(body, depth + 1) + [f"{pad}}}"]
    return [pad + repr(s)]


def render_body(body: Iterable[Node], depth: int) -> list[str]:
    return [line for s in body for line in render_stmt(s, depth)]
