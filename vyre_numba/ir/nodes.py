"""Expressions and statements of the vyre IR: immutable, hashable by structure.

Build them with the functions at the bottom (`load("a", gid(0)) + 1`, `store(...)`, `if_(...)`).
A Python int or float in an expression becomes a *weak* literal whose type is fixed from its
context when the enclosing `Program` is built (`load(f32_buffer, i) * 2` multiplies by 2.0f).
Python operators on expressions build IR, `==` and `!=` included (`ir.if_(i == 0, ...)` tests
`i == 0` on the device), as in NumPy or PyTorch; `a.equals(b)` compares two pieces of IR
structurally. Statements compare structurally with `==`. Every node knows its nesting depth,
which is bounded by `MAX_DEPTH`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Union

import numpy as np

from ..errors import INTEGERS, IRValidationError, shown
from .recursion import drive
from .types import DataType, bits_to_float, float_to_bits, overflows

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
# Only these are ULP-bounded (docs/semantics.md); rsqrt is two correct roundings, so exact.
TRANSCENDENTAL_UNOPS = ("exp", "exp2", "log", "log2", "sin", "cos", "tan")

ATOMIC_OPS = ("add", "or", "and", "xor", "min", "max", "exchange", "compare_exchange")
BUILTINS = ("invocation_id", "local_id", "workgroup_id", "num_workgroups",
            "subgroup_local_id", "subgroup_size")
BARRIER_SCOPES = ("workgroup", "grid")

_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "bitand": "&",
            "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>", "eq": "==", "ne": "!=",
            "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "logical_and": "&&", "logical_or": "||"}


MAX_DEPTH = 100_000  # nesting levels; every walker uses an explicit stack, so this bounds memory only
MAX_NODES = 2**20  # nodes of a tree written out, a shared node once per use: walkers visit each use (time)


def _fail(msg: str) -> IRValidationError:
    return IRValidationError(msg)


class _Structural:
    """Shared by expressions and statements: field checks at construction, a structural hash
    and depth computed once from the children's (so no walk ever recurses), `equals`, and
    pickling through the canonical JSON form."""

    __slots__ = ("_hash", "_depth", "_size")
    _kinds: dict = {}  # per class: field name -> kind ("expr", "expr?", "body", "str", ...)

    def __post_init__(self) -> None:
        depth, size, parts = 0, 1, [type(self).__name__]
        for name, kind in self._kinds.items():
            v = _field(self, name, kind, getattr(self, name))
            if kind == "body":
                for st in v:
                    depth = max(depth, st._depth)
                    size += st._size
                parts.append(tuple(st._hash for st in v))
            elif isinstance(v, _Structural):
                depth = max(depth, v._depth)
                size += v._size
                parts.append(v._hash)
            else:
                parts.append(v)
        if depth >= MAX_DEPTH:
            raise _fail(f"this IR is nested more than {MAX_DEPTH} levels deep, the limit of vyre-numba's "
                        "walkers. Fix: build long sums as balanced trees (pairwise), or split the work "
                        "into several statements or programs.")
        if size > MAX_NODES:
            raise _fail(f"this IR is {size:,} nodes written out, more than MAX_NODES = {MAX_NODES:,}: an expression "
                        "used more than once counts once per use (`e = e * e + e` twenty times is 3**20 nodes), "
                        "and checking, digesting and running it would walk every one. Fix: bind a value used more "
                        "than once to a variable (ir.let('t', e), then ir.var('t')) and use the variable.")
        object.__setattr__(self, "_depth", depth + 1)
        object.__setattr__(self, "_size", size)
        object.__setattr__(self, "_hash", hash(tuple(parts)))

    @property
    def depth(self) -> int:
        """Nesting levels of this node (1 for a leaf)."""
        return self._depth

    @property
    def size(self) -> int:
        """Nodes of this tree written out (a node used twice counts twice), at most MAX_NODES."""
        return self._size

    def equals(self, other: Any) -> bool:
        """True when `other` is the same IR, structurally (what `==` means for plain data)."""
        return structurally_equal(self, other)

    def key(self) -> "StructuralKey":
        """A hashable stand-in that compares structurally, for dict keys and sets of IR
        (`==` on expressions builds IR, so expressions themselves make poor keys)."""
        return StructuralKey(self)

    def __reduce__(self):
        from .program import node_from_json, node_to_json

        return node_from_json, (node_to_json(self),)


MAX_INT_BITS = 4096  # ints past this are refused where IR takes them: no message could show one of 4,300 digits


def _field(node, name: str, kind: str, v):
    """Field `name` of a node under construction, checked (and normalised) for its kind."""
    if kind == "expr":
        if not isinstance(v, Expr):
            v = _e(v)
    elif kind == "expr?":
        if v is not None and not isinstance(v, Expr):
            v = _e(v)
    elif kind == "body":
        if not isinstance(v, tuple) or not all(isinstance(x, Node) for x in v):
            v = _body(v)
    elif kind == "str":
        if not isinstance(v, str):
            raise _fail(f"{type(node).__name__}.{name} is {shown(v)}, not a str. Fix: build IR with the ir.* "
                        "functions, which name buffers, variables and operations with strings.")
    elif kind == "dtype":
        if not isinstance(v, DataType):
            v = DataType.parse(v)
    elif kind in ("int", "bool"):
        ok = isinstance(v, bool) if kind == "bool" else isinstance(v, int) and not isinstance(v, bool)
        if not ok or kind == "int" and v.bit_length() > MAX_INT_BITS:  # a weak literal's int may pass f64's range,
            what = f"an int of at most {MAX_INT_BITS} bits" if ok else "a bool" if kind == "bool" else "an int"  # validate to name
            raise _fail(f"{type(node).__name__}.{name} is {shown(v)}, not {what}. Fix: build IR with the ir.* functions.")
    object.__setattr__(node, name, v)
    return v


class StructuralKey:
    """Wraps a node so that `==` and `hash` mean structural equality (see `_Structural.key`)."""

    __slots__ = ("node",)

    def __init__(self, node: "_Structural"):
        self.node = node

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, StructuralKey) and structurally_equal(self.node, other.node)

    def __hash__(self) -> int:
        return self.node._hash

    def __repr__(self) -> str:
        return f"key({self.node!r})"


_LEAVES = (str, int, float, np.integer, DataType, type(None))  # what a node's non-IR fields hold


def structurally_equal(a: Any, b: Any) -> bool:
    """Whether two pieces of IR (nodes, or tuples of them) are the same structure."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        if isinstance(x, _Structural):
            if x._hash != y._hash:
                return False
            stack.extend((getattr(x, f), getattr(y, f)) for f in x._kinds)
        elif isinstance(x, tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif not isinstance(x, _LEAVES):
            raise IRValidationError(f"structurally_equal takes IR nodes (or tuples of them), not {shown(x, 60)} "
                                    f"({type(x).__name__}). Fix: compare IR; compare other values with ==.")
        elif x != y:
            return False
    return True


def _node(**kinds: str):
    """Decorator: a frozen, slotted dataclass node whose fields have the given kinds."""
    def wrap(cls):
        cls = dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)
        cls._kinds = kinds
        return cls
    return wrap


# NumPy's operator ufuncs, met where a NumPy scalar is the left operand (`np.float32(2) * x`): the IR
# operator Python would have built. Any other ufunc (np.sqrt(x)) is refused, naming the ir function.
_UFUNC_OPS = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "true_divide": "div",
              "remainder": "mod", "bitwise_and": "bitand", "bitwise_or": "bitor", "bitwise_xor": "bitxor",
              "left_shift": "shl", "right_shift": "shr", "less": "lt", "less_equal": "le", "greater": "gt",
              "greater_equal": "ge", "equal": "eq", "not_equal": "ne"}
_UFUNC_UNARY = {"negative": "neg", "invert": "bitnot"}  # the ufuncs behind unary operators
_UFUNC_NAMES = {"maximum": "max_", "minimum": "min_", "fmax": "max_", "fmin": "min_", "absolute": "abs_",
                "rint": "round_", "fabs": "abs_", "logical_not": "not_", "reciprocal": "recip", "sign": "sign",
                "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite"}


_FLOOR_FIX = ("write a / b: it truncates toward zero on integers (C's division, not Python's floor: -7 / 2 is -3) "
              "and is IEEE division on floats; ir.floor(a / b) is a float floor division.")


class Expr(_Structural):
    """Base class of every expression. Python operators build IR: `+ - * / % & | ^ << >> ~`,
    unary `-`, and the comparisons `< <= > >= == !=`. `/` builds `div`, which truncates toward
    zero on integers (C semantics, not Python's floor) and is IEEE division on floats; `//` is
    refused for that difference (`ir.floor(a / b)` is a float floor division). `a.equals(b)`
    compares IR. NumPy functions do not apply to IR: `np.sqrt(x)` is refused, naming `ir.sqrt`."""

    __slots__ = ()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        op = _UFUNC_OPS.get(ufunc.__name__)
        if (op is not None and method == "__call__" and len(inputs) == 2 and not kwargs and inputs[1] is self
                and not isinstance(inputs[0], Expr)):
            # `np.uint32(3) + x`: NumPy hands the operator to the IR (as a 0-d array), and it builds what `+`
            # builds. With the IR first, np.mod(x, 3) can only be a call of NumPy's own function, whose
            # meaning differs (floor modulo, true division): refused below, as np.sqrt(x) is.
            a = inputs[0][()] if isinstance(inputs[0], np.ndarray) and not inputs[0].ndim else inputs[0]
            return BinOp(op, _e(a), self)
        refused = {"floor_divide": self.__floordiv__, "power": self.__pow__, "matmul": self.__matmul__}.get(ufunc.__name__)
        if refused is not None:  # each raises the operator's own message
            refused(None)
        name = _UFUNC_OPS.get(ufunc.__name__) or _UFUNC_UNARY.get(ufunc.__name__) or \
            _UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__)
        from . import __all__ as names

        operator = ufunc.__name__ in _UFUNC_OPS or ufunc.__name__ in _UFUNC_UNARY
        how = (f"write the operator or ir.{name}(...), which build the IR's {name} on the device (docs/semantics.md "
               "gives its rules, which are not always NumPy's: integer div and mod truncate toward zero, as C's do; "
               "shift amounts are masked)" if operator else
               f"use ir.{name}(...), which builds it on the device (docs/semantics.md gives its rules, NaN's "
               "included)" if name in names else "build it from the ir.* functions")
        call = f"np.{ufunc.__name__}{'' if method == '__call__' else '.' + method}"
        raise IRValidationError(f"{call} was given an IR expression ({render_expr(self, 80)}), a value on the "
                                f"device; NumPy functions run on host arrays. Fix: {how}.")

    def __hash__(self) -> int:
        return self._hash

    def __add__(self, o): return BinOp("add", self, _e(o))
    def __radd__(self, o): return BinOp("add", _e(o), self)
    def __sub__(self, o): return BinOp("sub", self, _e(o))
    def __rsub__(self, o): return BinOp("sub", _e(o), self)
    def __mul__(self, o): return BinOp("mul", self, _e(o))
    def __rmul__(self, o): return BinOp("mul", _e(o), self)
    def __truediv__(self, o): return BinOp("div", self, _e(o))
    def __rtruediv__(self, o): return BinOp("div", _e(o), self)
    def __floordiv__(self, o): self._no_python("floor division (//)", _FLOOR_FIX)
    def __rfloordiv__(self, o): self._no_python("floor division (//)", _FLOOR_FIX)
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
    def __eq__(self, o): return BinOp("eq", self, _e(o))  # type: ignore[override]
    def __ne__(self, o): return BinOp("ne", self, _e(o))  # type: ignore[override]

    def eq(self, o: "ExprLike") -> "Expr":
        """`self == o` on the device, as IR (what the `==` operator builds)."""
        return BinOp("eq", self, _e(o))

    def ne(self, o: "ExprLike") -> "Expr":
        """`self != o` on the device, as IR (what the `!=` operator builds)."""
        return BinOp("ne", self, _e(o))

    def cast(self, dtype: "DataType | str") -> "Expr":
        """This expression converted to `dtype` (see `ir.cast`)."""
        return Cast(DataType.parse(dtype), self)

    def __bool__(self):
        raise IRValidationError(
            f"an IR expression ({render_expr(self, 80)}) has no Python truth value. "
            "Fix: build control flow with ir.if_(cond, then, else_) and ir.select, combine conditions "
            "with & | ~ or ir.logical_and / logical_or instead of Python `if`, `and`, `or`, `not`, and use "
            "ir.max_ / ir.min_ for Python's max / min; compare two pieces of IR with a.equals(b), and key dicts or "
            "sets of IR by a.key().")

    def _no_python(self, what: str, fix: str):
        raise IRValidationError(f"an IR expression ({render_expr(self, 80)}) has no Python {what}: it is a value "
                                f"on the device. Fix: {fix}")

    def __pow__(self, o, mod=None): self._no_python("power (**)", "multiply (x * x), or use ir.exp / ir.log for "
                                                     "real powers.")
    def __pos__(self): return self  # unary plus is the value itself, as on numbers
    def __rpow__(self, o): self._no_python("power (**)", "multiply (x * x), or use ir.exp / ir.log for real powers.")
    def __abs__(self): self._no_python("abs()", "use ir.abs_(x).")
    def __round__(self, ndigits=None): self._no_python("round()", "use ir.round_(x) (or ir.floor / ir.ceil / ir.trunc).")
    def __int__(self): self._no_python("int()", "cast on the device with x.cast('i32') (or another integer type).")
    def __float__(self): self._no_python("float() (which math.sqrt, math.exp and the rest of Python's math module "
                                         "call)", "use the IR's functions on the device (ir.sqrt(x), ir.exp(x), ...), "
                                         "and x.cast('f32') to convert.")
    def __complex__(self): self._no_python("complex()", "keep real and imaginary parts as two expressions.")
    def __index__(self): self._no_python("index (range() and list indices need one)", "loop on the device with "
                                         "ir.loop(var, start, end, body), and index a buffer with ir.load(name, index) "
                                         "or ir.store(...).")
    def __getitem__(self, i): self._no_python("indexing", "an expression is one value, not a buffer: read element i "
                                              "of buffer a with ir.load('a', i).")
    def __divmod__(self, o): self._no_python("divmod()", "write x / y and x % y (the IR's division truncates).")
    def __rdivmod__(self, o): self._no_python("divmod()", "write x / y and x % y (the IR's division truncates).")

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        self._no_python(f"format ({spec!r})", f"format its text: f'{{str(x):{spec}}}' (its value exists only on the "
                                              "device).")
    def __len__(self): self._no_python("length", "an expression is one value per invocation; pass lengths as ints.")
    def __matmul__(self, o): self._no_python("matrix product (@)", "write the sum of products with ir.loop.")
    def __rmatmul__(self, o): self._no_python("matrix product (@)", "write the sum of products with ir.loop.")
    def __floor__(self): self._no_python("math.floor()", "use ir.floor(x).")
    def __ceil__(self): self._no_python("math.ceil()", "use ir.ceil(x).")
    def __trunc__(self): self._no_python("math.trunc()", "use ir.trunc(x).")
    def __iter__(self): self._no_python("iteration", "an expression is one value per invocation; loop with ir.loop.")

    def __str__(self) -> str:
        return render_expr(self)

    def __repr__(self) -> str:
        return render_expr(self, 120)

    def children(self) -> tuple["Expr", ...]:
        """The operand expressions, in field order."""
        return tuple(v for v in (getattr(self, f) for f in self._kinds) if isinstance(v, Expr))


@_node(dtype="dtype", raw="int", weak="bool")
class Lit(Expr):
    """A literal. `raw` is the integer value, 0/1 for bool, or the IEEE bit pattern for floats.
    `weak` literals come from bare Python numbers; their type is fixed by context."""

    dtype: DataType
    raw: int
    weak: bool = False

    @property
    def value(self) -> Union[int, float, bool]:
        """The literal's value as a Python int, float or bool."""
        if self.dtype.is_float:
            return bits_to_float(self.raw, self.dtype)
        if self.dtype.is_bool:
            return bool(self.raw)
        return self.raw


@_node(name="str")
class Var(Expr):
    """The value of the variable `name` (a let, a loop variable)."""

    name: str


@_node(buffer="str", index="expr")
class Load(Expr):
    """Element `index` of `buffer` (0 out of bounds)."""

    buffer: str
    index: Expr


@_node(buffer="str")
class BufLen(Expr):
    """Element count of a buffer at dispatch time, as u32."""
    buffer: str


@_node(name="str", axis="int")
class Builtin(Expr):
    """An invocation-invariant id (u32): invocation_id / local_id / workgroup_id / num_workgroups
    per axis 0..2, or subgroup_local_id / subgroup_size (axis 0)."""
    name: str
    axis: int = 0


@_node(op="str", a="expr", b="expr")
class BinOp(Expr):
    """`a op b` (op: add, sub, mul, div, lt, bitand, shl, ...; BINOPS lists them)."""

    op: str
    a: Expr
    b: Expr


@_node(op="str", a="expr")
class UnOp(Expr):
    """`op a` (op: neg, not, sqrt, exp, popcount, ...; UNOPS lists them)."""

    op: str
    a: Expr


@_node(cond="expr", a="expr", b="expr")
class Select(Expr):
    """`a` where `cond` is true, else `b` (both evaluated)."""

    cond: Expr
    a: Expr
    b: Expr


@_node(dtype="dtype", a="expr")
class Cast(Expr):
    """`a` converted to `dtype` (the rules of docs/semantics.md)."""

    dtype: DataType
    a: Expr


@_node(a="expr", b="expr", c="expr")
class Fma(Expr):
    """a * b + c with a single rounding (floats); wrapping a*b+c (integers)."""
    a: Expr
    b: Expr
    c: Expr


@_node(op="str", buffer="str", index="expr", value="expr", expected="expr?")
class Atomic(Expr):
    """Atomic read-modify-write of buffer[index]; evaluates to the old value."""
    op: str
    buffer: str
    index: Expr
    value: Expr
    expected: Expr | None = None


@_node(cond="expr")
class SubgroupBallot(Expr):
    """u32 mask of the lanes of this subgroup whose `cond` is true (defined in subgroup-uniform control
    flow only, where every existing lane takes part)."""
    cond: Expr


@_node(value="expr", lane="expr")
class SubgroupShuffle(Expr):
    """`value` as held by lane `lane` of this subgroup; 0 where `lane` >= 32 or that lane does not
    exist (defined in subgroup-uniform control flow only)."""
    value: Expr
    lane: Expr


@_node(value="expr")
class SubgroupAdd(Expr):
    """Wrapping sum of a 32-bit integer `value` over the existing lanes of this subgroup (defined in
    subgroup-uniform control flow only)."""
    value: Expr


def result_type(e: Expr, operands: "tuple[DataType, ...]" = (), buffer: DataType | None = None) -> DataType:
    """The type of expression `e` of a valid program, given its operands' types (in field order)
    and, for loads and atomics, its buffer's element type: the one rule the validator, the
    reference interpreter and the emitter share."""
    try:
        return _result_type(e, operands, buffer)
    except (IndexError, TypeError):  # too few operand types (or none): said below, off the path of valid calls
        pass
    raise IRValidationError(f"result_type({shown(str(e), 60)}) needs the types of its {len(e.children())} operands, "
                            f"in field order; it was given {shown(operands, 60)}. Fix: pass operands=(...) with one "
                            "DataType an operand.")


def _result_type(e: Expr, operands: "tuple[DataType, ...]", buffer: DataType | None) -> DataType:
    match e:
        case Lit() | Cast():
            return e.dtype
        case Load() | Atomic():
            if buffer is None:
                raise IRValidationError(f"result_type({shown(str(e), 60)}) of a load or atomic is its buffer's "
                                        "element type. Fix: pass buffer=<the buffer's DataType>.")
            return buffer
        case BufLen() | Builtin() | SubgroupBallot():
            return DataType.U32
        case BinOp(op=op) if op in CMP_BINOPS or op in LOGIC_BINOPS:
            return DataType.BOOL
        case UnOp(op=op) if op in ("popcount", "clz", "ctz"):
            return DataType.U32
        case UnOp(op=op) if op in FLOAT_PRED_UNOPS or op in BOOL_UNOPS:
            return DataType.BOOL
        case Select():
            return operands[1]
        case BinOp() | UnOp() | Fma() | SubgroupShuffle() | SubgroupAdd():
            return operands[0]
    if isinstance(e, Var):
        raise IRValidationError(f"result_type has no rule for the variable {e.name!r}: its type is its declaration's. "
                                "Fix: take the type of the value its let gave it (U32 for a loop's variable).")
    raise IRValidationError(f"result_type takes an expression, not {shown(e, 60)}. Fix: pass an ir expression (a "
                            "statement has no type).")


# ---- statements -------------------------------------------------------------------------------

class Node(_Structural):
    """Base class of every statement. Statements compare structurally with `==`."""

    __slots__ = ()

    def __eq__(self, other: Any) -> bool:
        return structurally_equal(self, other) if isinstance(other, Node) else NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return "\n".join(render_stmt(self, 0))

    def __repr__(self) -> str:
        return "\n".join(render_short((self,)))


@_node(name="str", value="expr")
class Let(Node):
    """Declare the variable `name` in the current block, holding `value`."""

    name: str
    value: Expr


@_node(name="str", value="expr")
class Assign(Node):
    """Set the declared variable `name` to `value`."""

    name: str
    value: Expr


@_node(buffer="str", index="expr", value="expr")
class Store(Node):
    """Write `value` to element `index` of `buffer` (nothing out of bounds)."""

    buffer: str
    index: Expr
    value: Expr


@_node(cond="expr", then="body", otherwise="body")
class If(Node):
    """Run `then` where `cond` is true, else `otherwise`."""

    cond: Expr
    then: tuple[Node, ...]
    otherwise: tuple[Node, ...] = ()


@_node(var="str", start="expr", end="expr", body="body")
class Loop(Node):
    """for var in [start, end) with u32 bounds evaluated once on entry; `var` is read-only."""
    var: str
    start: Expr
    end: Expr
    body: tuple[Node, ...]


@_node(scope="str")
class Barrier(Node):
    """Wait for the invocations of the workgroup, or of the grid (`scope`)."""

    scope: str = "workgroup"


@_node()
class Return(Node):
    """End the invocation."""

    pass


@_node(body="body")
class Block(Node):
    """`body` in a scope of its own."""

    body: tuple[Node, ...]


# ---- builders ---------------------------------------------------------------------------------

ExprLike = Union[Expr, int, float, bool]


def _e(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, np.bool_)):
        return Lit(DataType.BOOL, int(bool(x)))
    if isinstance(x, int):
        if x.bit_length() > MAX_INT_BITS:  # the validator says more of a smaller one, which has a type to name
            raise _fail(f"the number {shown(x)} is past any IR type's range (f64's too). Fix: use a smaller number, "
                        "or math.inf for an infinity.")
        return Lit(DataType.I64, int(x), weak=True)
    if isinstance(x, float) and not isinstance(x, np.generic):  # np.float64 is a float too, and keeps its type
        return Lit(DataType.F64, float_to_bits(x, DataType.F64), weak=True)
    if isinstance(x, np.ndarray) and not x.ndim and x.dtype.kind in "biuf":  # as on the left of an operator
        x = x[()]
    if isinstance(x, np.generic):  # a NumPy scalar keeps its type
        try:
            dt = DataType.parse(x.dtype)
        except IRValidationError:
            dt = None
        if dt is not None:
            return lit(x, dt)
        if x.dtype.kind == "f":
            raise _fail(f"{shown(x)} is a NumPy {x.dtype}, which no IR type holds, so it has no type of its own. "
                        "Fix: say which type it is to be: ir.lit(x, 'f64') rounds it once to f64; an integral value "
                        "can be an integer type exactly (ir.lit(x, 'u64')).")
    raise _fail(f"{shown(x)} ({type(x).__name__}) is not an IR expression. "
                "Fix: pass an ir expression, a Python int/float/bool, or a NumPy scalar.")


_NOT_A_STATEMENT = ("Fix: statement lists hold ir.let / assign / store / if_ / loop / barrier / return_ / "
                    "block; keep an atomic's old value in a let of its own name, ir.let('_0', ...), ir.let('_1', ...).")


def _body(stmts) -> tuple[Node, ...]:
    """A statement, or a (nested) list or tuple of them, as one flat tuple."""
    if isinstance(stmts, Node):
        return (stmts,)
    if stmts is None:
        return ()
    if not isinstance(stmts, (list, tuple)):
        raise _fail(f"{shown(stmts)} ({type(stmts).__name__}) is not an IR statement or a list of them. "
                    + _NOT_A_STATEMENT)
    out: list[Node] = []
    stack = [iter(stmts)]
    while stack:  # nested lists flatten without recursion
        s = next(stack[-1], _END)
        if s is _END:
            stack.pop()
        elif isinstance(s, Node):
            out.append(s)
        elif isinstance(s, (list, tuple)):
            stack.append(iter(s))
        else:
            raise _fail(f"{shown(s)} is not an IR statement. " + _NOT_A_STATEMENT)
    return tuple(out)


_END = object()


def _choice(value, options: tuple[str, ...], what: str) -> str:
    """`value` if it is one of the names in `options`, else an IRValidationError listing them."""
    if not isinstance(value, str) or value not in options:
        raise _fail(f"unknown {what} {shown(value)}. Fix: use one of {', '.join(options)}.")
    return value


def _name(n, what: str) -> str:
    if not isinstance(n, str) or not n:
        raise _fail(f"{what} name {shown(n)} is not a non-empty string. Fix: "
                    f"{'give it a name' if isinstance(n, str) else 'name it with a str'}, e.g. 'x' or 'out_1'.")
    return n


def _number(value) -> int | float | bool | np.longdouble | None:
    """A Python int, float or bool (NumPy scalars converted exactly; a long double wider than a
    float stays one), or None if not a number."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, INTEGERS):  # not np.timedelta64, whose int() drops the unit
        return int(value)
    if isinstance(value, np.floating) and value.dtype.itemsize > 8:
        return value
    if isinstance(value, (float, np.floating)):
        return float(value)  # exact: every NumPy float up to f64 is a Python float
    return None


def on_purpose(value, dt: DataType) -> str:
    """The end of a Fix for a literal `value` that `dt` cannot hold: the cast of a wider typed
    literal that makes it a `dt` on purpose (overflowing, truncating or wrapping as `cast` does),
    or "" where no wider type holds the value."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, np.floating) and value.dtype.itemsize > 8:
        return ""
    if isinstance(value, INTEGERS):
        value = int(value)
        wide = "i64" if -2**63 <= value < 2**63 else "u64" if 0 <= value < 2**64 else None
    else:
        value, wide = float(value), "f64" if dt != DataType.F64 else None
    if wide is None:
        return ""
    how = "overflow" if dt.is_float else "truncate" if isinstance(value, float) else "wrap"
    text = repr(value) if not (isinstance(value, float) and not math.isfinite(value)) else \
        "math.nan" if value != value else "math.inf" if value > 0 else "-math.inf"  # runnable, not repr's nan
    return f"; to {how} on purpose, ir.cast(ir.{wide}({text}), '{dt}')"


def lit(value: int | float | bool, dtype: DataType | str | None = None) -> Lit:
    """A literal of `dtype` (a DataType, its name, or a NumPy dtype); without one, a weak literal
    typed by its context. The value must fit the type exactly: an int in range, an integral float
    for an integer type, True/False for bool. NumPy scalars (long doubles too) are taken at their
    exact value; a float type's literal is that value rounded once to the type (bf16: to f32
    first, then to bf16, as `cast` does and as PyTorch makes one)."""
    if dtype is None:
        return _e(value)  # type: ignore[return-value]
    dt = DataType.parse(dtype)
    v = _number(value)
    if v is None:
        raise _fail(f"literal {shown(value)} ({type(value).__name__}) is not a number. "
                    f"Fix: pass a Python or NumPy int, float or bool for {dt}.")
    if dt.is_bool or isinstance(v, bool):
        if not (dt.is_bool and isinstance(v, bool)):
            fix = "pass True or False" if dt.is_bool else f"pass a number, or ir.select(cond, 1, 0) for a {dt} from a bool"
            raise _fail(f"literal {shown(value)} is not a {dt} value. Fix: {fix}.")
        return Lit(dt, int(v))
    if dt.is_float:
        bits = float_to_bits(v, dt)
        if overflows(v, bits, dt):
            raise _fail(f"literal {shown(value)} is past the largest finite {dt} ({dt.max!r}): it would round to "
                        f"{'-' if v < 0 else ''}inf. Fix: write {'-' if v < 0 else ''}math.inf for an infinity, or use "
                        f"{'a wider type' if dt != DataType.F64 and _f64_holds(v) else 'a smaller value'}{on_purpose(value, dt)}.")
        return Lit(dt, bits)
    if not isinstance(v, int):
        if not v.is_integer():
            raise _fail(f"literal {shown(value)} is not an integer but the type is {dt}. "
                        f"Fix: pass an int, or use a float type{on_purpose(value, dt)}.")
        v = int(v)  # exact, a long double's too
    if not (dt.min <= v <= dt.max):
        raise _fail(f"literal {shown(value)} does not fit {dt} (range {dt.min}..{dt.max}). "
                    f"Fix: use {'a wider type or ' if -2**63 <= v < 2**64 else ''}a value in range{on_purpose(value, dt)}.")
    return Lit(dt, v)


def _f64_holds(v) -> bool:
    """Whether `v` rounds to a finite f64."""
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _typed(dt: str):
    def make(value: int | float | bool | np.generic) -> Lit:
        return lit(value, dt)
    make.__name__ = dt
    make.__doc__ = f"A {dt} literal."
    return make


u8, u16, u32, u64 = _typed("u8"), _typed("u16"), _typed("u32"), _typed("u64")
i8, i16, i32, i64 = _typed("i8"), _typed("i16"), _typed("i32"), _typed("i64")
f16, bf16, f32, f64 = _typed("f16"), _typed("bf16"), _typed("f32"), _typed("f64")


def boolean(value: bool) -> Lit:
    """A bool literal."""
    return lit(value, DataType.BOOL)


def var(name: str) -> Var:
    """The variable called `name` (declared by `let`, or a loop's variable)."""
    return Var(_name(name, "variable"))


def load(buffer: str, index: ExprLike) -> Load:
    """buffer[index]; 0 when index is out of bounds."""
    return Load(_name(buffer, "buffer"), _e(index))


def buf_len(buffer: str) -> BufLen:
    """The element count of `buffer` at dispatch time, as u32."""
    return BufLen(_name(buffer, "buffer"))


def _axis(axis: int) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, INTEGERS) or axis not in (0, 1, 2):
        raise _fail(f"axis {shown(axis)} is not 0, 1 or 2. Fix: use axis 0 (x), 1 (y) or 2 (z).")
    return int(axis)


def invocation_id(axis: int = 0) -> Builtin:
    """Global invocation id along `axis` (u32)."""
    return Builtin("invocation_id", _axis(axis))


def local_id(axis: int = 0) -> Builtin:
    """The invocation's id within its workgroup along `axis` (u32)."""
    return Builtin("local_id", _axis(axis))


def workgroup_id(axis: int = 0) -> Builtin:
    """The workgroup's id along `axis` (u32)."""
    return Builtin("workgroup_id", _axis(axis))


def num_workgroups(axis: int = 0) -> Builtin:
    """How many workgroups the launch has along `axis` (u32)."""
    return Builtin("num_workgroups", _axis(axis))


gid, lid, wgid = invocation_id, local_id, workgroup_id


def subgroup_local_id() -> Builtin:
    """The invocation's lane in its subgroup of 32, 0..31 (u32)."""
    return Builtin("subgroup_local_id", 0)


def subgroup_size() -> Builtin:
    """The subgroup size, 32 (u32)."""
    return Builtin("subgroup_size", 0)


def binary(op: str, a: ExprLike, b: ExprLike) -> BinOp:
    """The binary operation named `op` (one of `BINOPS`) of `a` and `b`."""
    return BinOp(_choice(op, BINOPS, "binary op"), _e(a), _e(b))


def unary(op: str, a: ExprLike) -> UnOp:
    """The unary operation named `op` (one of `UNOPS`) of `a`."""
    return UnOp(_choice(op, UNOPS, "unary op"), _e(a))


def _bin(op):
    def make(a: ExprLike, b: ExprLike) -> BinOp:
        return BinOp(op, _e(a), _e(b))
    make.__doc__ = f"The `{op}` binary operation."
    return make


def _un(op):
    def make(a: ExprLike) -> UnOp:
        return UnOp(op, _e(a))
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
for _called, _make in list(globals().items()):  # errors name them as users call them: ir.min_, not make
    if getattr(_make, "__qualname__", "").startswith(("_bin.", "_un.")):
        _make.__name__ = _make.__qualname__ = _called
del _called, _make


def select(cond: ExprLike, a: ExprLike, b: ExprLike) -> Select:
    """`a` where cond is true, else `b` (both evaluated)."""
    return Select(_e(cond), _e(a), _e(b))


def cast(a: ExprLike, dtype: DataType | str) -> Cast:
    """Explicit conversion; see the reference interpreter for the exact rules."""
    return Cast(DataType.parse(dtype), _e(a))


def fma(a: ExprLike, b: ExprLike, c: ExprLike) -> Fma:
    """`a * b + c` rounded once (floats), or wrapping (integers)."""
    return Fma(_e(a), _e(b), _e(c))


def atomic(op: str, buffer: str, index: ExprLike, value: ExprLike,
           expected: ExprLike | None = None) -> Atomic:
    """Atomic `op` on buffer[index]; evaluates to the previous value. compare_exchange stores
    `value` only where the current value equals `expected`."""
    _choice(op, ATOMIC_OPS, "atomic op")
    if (op == "compare_exchange") != (expected is not None):
        raise _fail("`expected` is given exactly for compare_exchange. "
                    "Fix: pass expected=... with compare_exchange and only there.")
    return Atomic(op, _name(buffer, "buffer"), _e(index), _e(value),
                  None if expected is None else _e(expected))


def atomic_add(buffer: str, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomic `buffer[index] += value`; evaluates to the previous value."""
    return atomic("add", buffer, index, value)


def subgroup_ballot(cond: ExprLike) -> SubgroupBallot:
    """A u32 mask of the existing lanes of this subgroup where `cond` is true."""
    return SubgroupBallot(_e(cond))


def subgroup_shuffle(value: ExprLike, lane: ExprLike) -> SubgroupShuffle:
    """`value` as lane `lane` of this subgroup holds it (0 where that lane does not exist)."""
    return SubgroupShuffle(_e(value), _e(lane))


def subgroup_add(value: ExprLike) -> SubgroupAdd:
    """The wrapping sum of a u32 or i32 `value` over the existing lanes of this subgroup."""
    return SubgroupAdd(_e(value))


def let(name: str, value: ExprLike) -> Let:
    """Declare variable `name` in the current block, set to `value` (no shadowing of a visible name)."""
    return Let(_name(name, "variable"), _e(value))


def assign(name: str, value: ExprLike) -> Assign:
    """Set the declared variable `name` to `value`."""
    return Assign(_name(name, "variable"), _e(value))


def store(buffer: str, index: ExprLike, value: ExprLike) -> Store:
    """buffer[index] = value; dropped when index is out of bounds."""
    return Store(_name(buffer, "buffer"), _e(index), _e(value))


def if_(cond: ExprLike, then: Iterable[Node] | Node, else_: Iterable[Node] | Node = ()) -> If:
    """Run `then` for the invocations where `cond` is true, `else_` for the others."""
    return If(_e(cond), _body(then), _body(else_))


def loop(var: str, start: ExprLike, end: ExprLike, body: Iterable[Node] | Node) -> Loop:
    """Run `body` with `var` = start, start+1, ..., end-1 (u32 bounds, evaluated once; `var` is a
    read-only u32)."""
    return Loop(_name(var, "loop variable"), _e(start), _e(end), _body(body))


def barrier(scope: str = "workgroup") -> Barrier:
    """Wait for every live invocation of the workgroup ("workgroup") or of the launch ("grid", cooperative only)."""
    _choice(scope, BARRIER_SCOPES, "barrier scope")
    return Barrier(scope)


def return_() -> Return:
    """End this invocation."""
    return Return()


def block(*stmts: Node | Iterable[Node]) -> Block:
    """A nested block of statements: a scope for the variables declared in it."""
    return Block(_body(stmts))


# ---- text form --------------------------------------------------------------------------------

def render_lit(x: Lit) -> str:
    if x.dtype.is_float and not 0 <= x.raw < 1 << x.dtype.bits:  # not a bit pattern: say what it holds
        return f"Lit({x.dtype}, raw={x.raw})"
    if x.weak:
        return repr(x.value)
    if x.dtype.is_float:
        v = x.value
        text = repr(v) if math.isfinite(v) else {True: "nan"}.get(math.isnan(v), "inf" if v > 0 else "-inf")
        return f"{text}{x.dtype}"
    if x.dtype.is_bool:
        return "true" if x.raw else "false"
    return f"{x.raw}{x.dtype}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Writer:
    """Text form being written, line by line, within optional bounds: `width` characters a line
    (a longer line ends in "...") and `max_lines` lines. Walkers stop writing once a bound is met,
    so a bounded rendering of deep IR costs its depth, not its size."""

    __slots__ = ("lines", "parts", "size", "width", "max_lines")

    def __init__(self, width: int | None = None, max_lines: int | None = None):
        self.lines: list[str] = []
        self.parts: list[str] = []
        self.size, self.width, self.max_lines = 0, width, max_lines

    def put(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    @property
    def full(self) -> bool:
        """The current line is past its width, or every allowed line is written."""
        return (self.width is not None and self.size > self.width) or (
            self.max_lines is not None and len(self.lines) >= self.max_lines)

    def text(self) -> str:
        line = "".join(self.parts)
        return line if self.width is None else _short(line, self.width)

    def end(self) -> None:
        if self.max_lines is None or len(self.lines) < self.max_lines:
            self.lines.append(self.text())
        self.parts, self.size = [], 0


_CALLS = {"Select": "select", "Fma": "fma", "SubgroupBallot": "subgroup_ballot",
          "SubgroupShuffle": "subgroup_shuffle", "SubgroupAdd": "subgroup_add"}


def _wx(x: Expr, w: _Writer):
    """Walker (see `recursion`) writing the text of an expression to `w`."""
    if w.full:
        return
    match x:
        case Lit():
            w.put(render_lit(x))
        case Var(name):
            w.put(name)
        case BufLen(buf):
            w.put(f"len({buf})")
        case Builtin(name, axis):
            if "subgroup" in name:
                w.put(f"{name}()")
            else:
                w.put(f"{name}.{'xyz'[axis]}" if axis in (0, 1, 2) else f"{name}.{axis}")
        case Load(buf, index):
            w.put(f"{buf}[")
            yield _wx(index, w)
            w.put("]")
        case BinOp(op, a, b) if op in _SYMBOLS:
            w.put("(")
            yield _wx(a, w)
            w.put(f" {_SYMBOLS[op]} ")
            yield _wx(b, w)
            w.put(")")
        case Atomic(op, buf, index, value, expected):
            w.put(f"atomic_{op}({buf}[")
            yield _wx(index, w)
            w.put("], ")
            yield _wx(value, w)
            if expected is not None:
                w.put(", expected=")
                yield _wx(expected, w)
            w.put(")")
        case BinOp() | UnOp() | Cast() | Select() | Fma() | SubgroupBallot() | SubgroupShuffle() | SubgroupAdd():
            name = x.op if isinstance(x, (BinOp, UnOp)) else x.dtype if isinstance(x, Cast) else _CALLS[type(x).__name__]
            w.put(f"{name}(")
            for k, child in enumerate(x.children()):
                if k:
                    w.put(", ")
                yield _wx(child, w)
            w.put(")")
        case _:
            w.put(object.__repr__(x))


def render_expr(x: Expr, limit: int | None = None) -> str:
    """The text form of an expression; past `limit` characters, its start and "..."."""
    w = _Writer(limit)
    drive(_wx(x, w))
    return w.text()


MAX_INDENT = 32  # deeper statements keep this indentation and show their depth, so text stays linear


def _ws(s: Node, depth: int, w: _Writer):
    """Walker writing the text lines of statement `s` at indentation `depth` to `w`."""
    if w.max_lines is not None and len(w.lines) >= w.max_lines:
        return
    pad = "    " * depth if depth <= MAX_INDENT else "    " * MAX_INDENT + f"[{depth}] "
    w.put(pad)
    match s:
        case Let(name, value) | Assign(name, value):
            w.put(f"let {name} = " if isinstance(s, Let) else f"{name} = ")
            yield _wx(value, w)
        case Store(buf, idx, value):
            w.put(f"{buf}[")
            yield _wx(idx, w)
            w.put("] = ")
            yield _wx(value, w)
        case If(cond, then, otherwise):
            w.put("if ")
            yield _wx(cond, w)
            w.put(" {")
            yield _wbody(then, depth, w)
            if otherwise:
                w.put(pad + "} else {")
                yield _wbody(otherwise, depth, w)
        case Loop(v, start, end, body):
            w.put(f"for {v} in ")
            yield _wx(start, w)
            w.put("..")
            yield _wx(end, w)
            w.put(" {")
            yield _wbody(body, depth, w)
        case Barrier(scope):
            w.put(f"barrier({scope})")
        case Return():
            w.put("return")
        case Block(body):
            w.put("{")
            yield _wbody(body, depth, w)
        case _:
            w.put(object.__repr__(s))
    if isinstance(s, (If, Loop, Block)):
        w.put(pad + "}")
    w.end()


def _wbody(body: tuple[Node, ...], depth: int, w: _Writer):
    """Ends the line that opened a block, then writes its statements one level deeper."""
    w.end()
    for st in body:
        yield _ws(st, depth + 1, w)


def render_stmt(s: Node, depth: int, width: int | None = None, max_lines: int | None = None) -> list[str]:
    """The text lines of a statement, indented `depth` levels; at most `max_lines` lines of at
    most `width` characters where given."""
    w = _Writer(width, max_lines)
    drive(_ws(s, depth, w))
    return w.lines


def render_body(body: Iterable[Node], depth: int, width: int | None = None,
                max_lines: int | None = None) -> list[str]:
    """The text lines of a statement list (bounded as in `render_stmt`)."""
    w = _Writer(width, max_lines)
    for s in body:
        drive(_ws(s, depth, w))
    return w.lines


def line_count(body: Iterable[Node]) -> int:
    """How many lines the text form of a statement list has (without rendering it)."""
    count, stack = 0, list(body)
    while stack:
        s = stack.pop()
        count += 1
        if isinstance(s, If):
            count += 1 + (1 if s.otherwise else 0)
            stack.extend(s.then)
            stack.extend(s.otherwise)
        elif isinstance(s, (Loop, Block)):
            count += 1
            stack.extend(s.body)
    return count


def render_short(body: Iterable[Node], depth: int = 0, width: int = 120, max_lines: int = 12) -> list[str]:
    """At most `max_lines` lines of a statement list's text form, the last saying how many more
    there are, each at most `width` characters."""
    body = tuple(body)
    lines = render_body(body, depth, width, max_lines + 1)
    if len(lines) > max_lines:
        lines = lines[:max_lines - 1]
        lines.append("    " * depth + f"... ({line_count(body) - len(lines):,} more lines)")
    return lines
