"""Elementwise kernels in one line, in the spirit of CuPy's `ElementwiseKernel`.

    >>> import numpy as np
    >>> from vyre_numba import elementwise
    >>> saxpy = elementwise("f32 a, f32 x, f32 y", "f32 out", "a * x + y", name="saxpy")
    >>> saxpy(np.float32(2), np.arange(4, dtype=np.float32), np.ones(4, np.float32), backend="reference")
    array([1., 3., 5., 7.], dtype=float32)

`elementwise(inputs, outputs, operation)` names the inputs and outputs with their vyre types and
gives the operation: a string in Python syntax (parsed with `ast`, never evaluated) or a Python
function of IR expressions. It returns an `Elementwise` kernel; calling it builds the vyre Program
(bindings, a 1-D workgroup and the bounds guard `if i < n`), caches it per signature and
dispatches it on the chosen backend.

The operation string
--------------------
- One expression for one output (``"a * x + y"``), a tuple of expressions for several
  (``"a + b, a - b"``), or assignments separated by ``;`` or new lines
  (``"t = a * b; s = t + c; d = t - c"``): every output is assigned, other names are temporaries.
- Names: the inputs, temporaries and outputs assigned before; numbers (weak literals, typed by
  their context as in the IR: ``x * 2`` on f32 multiplies by 2.0f), ``True`` and ``False``, ``inf``
  and ``nan`` (float literals, unless an input or temporary takes the name; a literal past f64's
  range, such as ``1e400``, is refused rather than read as an infinity). A
  temporary may be any Python identifier (``λ``, ``_``), read in NFKC form as Python reads it (``ﬁ`` is
  ``fi``); inputs, outputs and the kernel's ``name`` name PTX symbols, so they are ASCII identifiers.
- Operators with the IR's semantics (C-like, as CuPy's C operations): ``+ - * /`` (``/`` truncates
  toward zero on integers), ``%`` (integers only: the C remainder, sign of the dividend),
  ``& | ^ ~ << >>`` (on conditions ``& | ~`` are logical), unary ``-`` and ``+``, comparisons (chains
  such as ``0 <= x < n`` too), ``and or not`` (both sides are always evaluated), ``a if c else b``
  (a select: both sides evaluated), and ``x ** k`` for an integer literal ``0 <= k <= 64``
  (multiplications by squaring; each one rounds on floats). Integer literals joined by
  ``+ - * ** & | ^ << >>`` and unary ``- +`` are computed first, exactly and with Python's integer
  semantics, as one literal, which must then fit the operation's type: ``2**32`` and ``1 << 32`` are
  refused on u32 (not wrapped, not masked), ``16 << 4`` on u8; ``-(2**31)`` is i32's smallest value,
  and ``x * (2**24 + 2)`` multiplies by 16777218 also on f32 (no rounding between the literals).
  ``/``, ``%`` and ``~`` of literals are not folded: they are computed in the operation's type
  (``7 / 2`` is 3 on integers, 3.5 on floats; ``x & ~7`` on u32 clears x's three low bits). A literal in a float type is
  rounded once to it (bf16 through f32, as ``cast`` and PyTorch round).
  ``//`` is refused: Python's floor division differs from the IR's ``div`` for negative and float
  operands.
- Assignments ``y = ...`` and augmented ones ``y += x`` with any of the operators above (``y **= 2``
  included) on a name assigned before.
- Functions: ``min max`` (two or more arguments; with one NaN they return the other operand),
  ``abs sign sqrt rsqrt recip exp exp2 log log2 sin cos tan floor ceil round trunc isnan isinf
  isfinite popcount clz ctz reverse_bits absdiff mul_high saturating_add saturating_sub rotl rotr
  fma select where`` (``where(c, a, b)`` is ``select``), and conversions by a type's name:
  ``f32(x)``, ``i32(n)``, ``u8(v)``, ``float64(x)``, ``bool(n)`` ... or ``cast(x, "f32")``; a literal
  converted must fit (``u8(300)`` and ``u8(300.0)`` are refused, as NumPy refuses ``np.uint8(300)``),
  and a typed value converts on purpose (``u8(i64(300))`` wraps to 44, ``u8(f64(300.0))`` saturates to 255).
  There is no implicit conversion: operands of one operation have one type. Literals alone
  (``0.1 + 0.2``, ``7 / 2``) take the type of the operand beside them or of their conversion
  (``f64(7 / 2)`` is 3.5). A temporary first assigned a bare number (``t = 0.1``) holds it in the
  default type (f32, u32 ...; docs/semantics.md), so converting it (``f64(t)``) is refused: give it
  its type where it is assigned, ``t = f64(0.1)``.

The operation as a function
---------------------------
``elementwise("f32 a, f32 x, f32 y", "f32 out", lambda a, x, y: a * x + y)``: the function is called
once per signature with one IR expression per input (positional, in order) and returns an
expression (or number), a tuple/list with one per output, or a dict by output name. Use
`vyre_numba.ir`'s functions inside (``ir.sqrt(x)``, ``ir.select(c, a, b)``).

Calling the kernel
------------------
``k(*inputs, out=None, backend=None)`` (inputs positional or by name):

- Arrays: every array input has the same shape (any number of dimensions; outputs get that shape),
  and exactly the declared storage dtype (``f32`` -> float32, ``bool`` -> uint32 words of 0/1,
  ``bf16`` -> uint16 raw bits). A dtype that differs is a `DispatchError`: nothing is converted.
- Scalars (Python or NumPy numbers, 0-d arrays) are broadcast: they bind as a uniform buffer of one
  element. A Python/NumPy scalar must convert exactly to the declared type (``0.1`` is not an f32
  value; pass ``np.float32(0.1)``; Python ints of any size are numbers too); a 0-d device array must have
  the declared dtype. Complex numbers, dates and time spans, strings, records and 0-d object arrays are
  refused, each with what to pass instead (``x.real``, ``x.astype(np.int64)``, ``x.item()`` ...).
- Array kind in = array kind out: NumPy in, NumPy out (PyTorch CPU tensors in, tensors out);
  numba device arrays in, numba device arrays out, with no copy to the host; CuPy arrays in, CuPy
  arrays out; PyTorch CUDA tensors in, CUDA tensors out; other ``__cuda_array_interface__`` or
  DLPack CUDA arrays in, numba device arrays out. All arrays of one call (``out=`` included) must be
  of one kind, else `DispatchError`: convert explicitly (``numba.cuda.as_cuda_array(x)`` views any
  CUDA array as a numba array without a copy; ``cupy.asarray``/``torch.as_tensor`` view back).
- ``out=``: an array (one output) or a tuple of arrays, of the common shape and declared dtypes, of
  the same kind as the inputs, sharing no memory with them; they are filled and returned.
- ``backend=``: a backend name ("cuda", "reference") or object; default `get_backend()`. The
  reference backend runs host arrays only; device arrays there raise `DispatchError`.
- Empty arrays give empty outputs without a launch. On device arrays the launch is enqueued on the
  backend's stream (ordered before work on the default stream); when CuPy or PyTorch has a current
  stream other than the default one, the call waits for the kernel before returning.

``k.program(*inputs)`` (or ``k.program()`` for all-array inputs) is the vyre Program a call runs;
``k.ptx(*inputs, sm=90)`` its PTX text. Every mistake raises a `VyreError` subclass whose message
ends with ``Fix: ...``: `IRValidationError` for the declarations and the operation (when the kernel
is created), `DispatchError` for the arguments of a call.
"""
from __future__ import annotations

import ast
import difflib
import functools
import itertools
import keyword
import math
import numbers
import re
import textwrap
import threading
import unicodedata
import weakref
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import ir
from .backend import Backend, interface_dtype
from .bindings import as_host_array
from .config import DispatchConfig
from .errors import (INTEGERS, DispatchError, IRValidationError, VyreError, a_type, check_calls, clip, did_you_mean,
                     shown)
from .ir import DataType
from .ir.validate import _cast_literal, weak_only
from .registry import get_backend

__all__ = ["elementwise", "Elementwise", "FUNCTIONS"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LINES = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")  # where Python's parser ends a line (not at \f, \v, ...)
_MAX_COPIED = 4096  # nodes a power may copy of a base only bare literals make (it cannot be a variable)


_NAMES = re.compile(r"(?<![\w.])[^\W\d]\w*")  # the names an operation's text reads (not attributes)
_INDEX = "idx"  # the invocation's element; parameters live in variables prefixed v_ / t_ / o_

# ---- the functions an operation string may call ------------------------------------------------
_UNARY = {"abs": ir.abs_, "sign": ir.sign, "sqrt": ir.sqrt, "rsqrt": ir.rsqrt, "recip": ir.recip,
          "exp": ir.exp, "exp2": ir.exp2, "log": ir.log, "log2": ir.log2, "sin": ir.sin, "cos": ir.cos,
          "tan": ir.tan, "floor": ir.floor, "ceil": ir.ceil, "round": ir.round_, "trunc": ir.trunc,
          "isnan": ir.isnan, "isinf": ir.isinf, "isfinite": ir.isfinite, "popcount": ir.popcount,
          "clz": ir.clz, "ctz": ir.ctz, "reverse_bits": ir.reverse_bits}
_BINARY = {"absdiff": ir.absdiff, "mul_high": ir.mul_high, "saturating_add": ir.saturating_add,
           "saturating_sub": ir.saturating_sub, "rotl": ir.rotl, "rotr": ir.rotr}
_VARIADIC = {"min": ir.min_, "max": ir.max_}
_TERNARY = {"fma": ir.fma, "select": ir.select, "where": ir.select}
_CASTS: dict[str, DataType] = {d.value: d for d in DataType}
_CASTS.update({np.dtype(d.storage).name: d for d in DataType if d not in (DataType.BOOL, DataType.BF16)})
_CASTS["bfloat16"] = DataType.BF16
FUNCTIONS: tuple[str, ...] = tuple(sorted({*_UNARY, *_BINARY, *_VARIADIC, *_TERNARY, *_CASTS, "cast"}))
"""Every function name an operation string may call (and no parameter may take)."""

_BINOPS = {ast.Add: ir.add, ast.Sub: ir.sub, ast.Mult: ir.mul, ast.Div: ir.div, ast.Mod: ir.mod,
           ast.BitAnd: ir.bitand, ast.BitOr: ir.bitor, ast.BitXor: ir.bitxor, ast.LShift: ir.shl,
           ast.RShift: ir.shr}
_CMPOPS = {ast.Lt: ir.lt, ast.LtE: ir.le, ast.Gt: ir.gt, ast.GtE: ir.ge, ast.Eq: ir.eq, ast.NotEq: ir.ne}
_MAX_POWER = 64
_ALLOWED = ("names, numbers, True/False, + - * / % ** (integer literal powers) & | ^ ~ << >>, comparisons, "
            "and/or/not, `a if c else b` and calls of the functions in elementwise.FUNCTIONS (sqrt, min, max, where, "
            "fma, f32, ...)")

Operation = str | Callable[..., Any]


# ---- declarations -------------------------------------------------------------------------------

_CALL_KEYWORDS = ("out", "backend", "sm")  # what k(...) and k.ptx(...) take besides the inputs


def _params(spec, what: str, kernel: str) -> list[tuple[str, DataType]]:
    """[(name, type)] from "f32 a, i32 n", a list of "type name" strings, or a dict name -> type."""
    where = f"elementwise {kernel!r}: {what}"
    if isinstance(spec, Mapping):
        items = [(name, t) for name, t in spec.items()]
    else:
        if isinstance(spec, str):
            parts = [p.strip() for p in spec.split(",")] if spec.strip() else []
        elif isinstance(spec, (list, tuple)) and all(isinstance(p, str) for p in spec):
            parts = [p.strip() for p in spec]
        else:
            raise IRValidationError(f"{where} {shown(spec, 80)} is not a declaration. Fix: pass a string such as "
                                    "'f32 a, f32 x' (type then name, comma-separated), or a dict {'a': 'f32'}.")
        items = []
        for p in parts:
            words = p.split()
            if len(words) != 2:
                extra = (" ('raw' and other CuPy modifiers are not supported: every parameter is elementwise or a "
                         "scalar)" if words and words[0] == "raw" else "")
                raise IRValidationError(f"{where}: {shown(p)} is not 'type name'{extra}. Fix: declare each parameter "
                                        "as its vyre type then its name, e.g. 'f32 a, i32 n'.")
            items.append((words[1], words[0]))
    out: list[tuple[str, DataType]] = []
    for name, t in items:
        why = _not_a_name(name)
        if why:
            raise IRValidationError(f"{where}: {shown(name)} {why}, so it cannot name a parameter (a buffer of the "
                                    "kernel). Fix: use ASCII letters, digits and _, not starting with a digit.")
        if keyword.iskeyword(name):
            raise IRValidationError(f"{where}: {shown(name)} is a Python keyword, which the operation could not name. "
                                    f"Fix: rename the parameter, e.g. {name + '_'!r}.")
        if name in FUNCTIONS or name in ("True", "False", "None"):
            raise IRValidationError(f"{where}: the parameter {shown(name)} would hide the function or constant of that "
                                    "name in the operation. Fix: rename the parameter.")
        try:
            if isinstance(t, str) and len(t) == 1 and t.isupper():  # CuPy's generic placeholders (T, I, B, ...),
                raise IRValidationError(t)  # not NumPy's one-letter codes, in a declaration of CuPy's form
            dt = DataType.parse(t)
        except IRValidationError:
            generic = isinstance(t, str) and len(t) <= 2 and t[:1].isupper()
            raise IRValidationError(
                f"{where}: {shown(name)} has the type {shown(t)}, which is not a vyre type"
                f"{' (generic types such as T are not supported)' if generic else ''}. Fix: declare one of "
                f"{', '.join(d.value for d in DataType)} (or a NumPy name such as float32).") from None
        out.append((name, dt))
    seen: set[str] = set()
    for name, _ in out:
        if name in seen:
            raise IRValidationError(f"{where}: the parameter {shown(name)} is declared twice. Fix: give every "
                                    "parameter its own name.")
        seen.add(name)
    return out


def _not_a_name(name) -> str | None:
    """Why `name` cannot name a kernel or a buffer (PTX and the IR take ASCII identifiers only), or None."""
    if not isinstance(name, str):
        return f"is {a_type(name)}, not a str"
    if _IDENT.match(name):
        return None
    if not name.isidentifier():
        return "is not an identifier"
    plain = unicodedata.normalize("NFKC", name)
    return f"is not ASCII{f' (Python reads it as {plain!r})' if _IDENT.match(plain) else ''}"


# ---- the operation string -----------------------------------------------------------------------

class _Translator:
    """An operation string's `ast` as IR: expressions and the statements that compute the outputs."""

    def __init__(self, kernel: str, source: str, inputs: Sequence[str], outputs: Mapping[str, ir.DataType]):
        self.kernel, self.source = kernel, source
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.out_types = dict(outputs)  # an output first assigned a bare number takes its declared type
        self.env: dict[str, ir.Expr] = {n: ir.var(f"v_{n}") for n in inputs}  # what each name reads
        self.stmts: list[ir.Node] = []  # user statements (lets/assigns), then the stores
        self.texts: list[str] = []  # the source of each statement, for messages
        self.defaulted: set[str] = set()  # temporaries first assigned a bare number (typed on its own)
        self.defaulted_vars: dict[str, tuple] = {}  # ... by the variables holding them: (name, first value)
        self.var_names: dict[str, str] = {f"v_{n}": n for n in inputs}  # IR variable -> the name in the text
        self._lines: tuple[str, list[bytes]] | None = None  # (the source, its lines) for segment()
        self.constants: dict[int, tuple] = {}  # a node's id -> (the node, its folded value), for folded()

    # messages
    def fail(self, node: ast.AST | None, why: str, fix: str) -> IRValidationError:
        seg = self.segment(node) if node is not None else None
        at = f" in `{clip(seg, 120)}`" if seg and seg.strip() != self.source.strip() else ""
        return IRValidationError(f"elementwise {self.kernel!r}: {why}{at} (operation: {shown(self.source, 200)}). "
                                 f"Fix: {fix}.")

    def segment(self, node: ast.AST) -> str | None:
        """The source text of `node`, as `ast.get_source_segment` gives it, from lines split once
        (that function splits the whole source on each call: quadratic in a long operation)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if None in (start, end, col, end_col):
            return None
        if self._lines is None or self._lines[0] is not self.source:  # offsets count UTF-8 bytes
            self._lines = (self.source, [line.encode() for line in _LINES.split(self.source)])
        lines = self._lines[1]
        if start == end:
            return lines[start - 1][col:end_col].decode()
        return b"".join([lines[start - 1][col:], *lines[start:end - 1], lines[end - 1][:end_col]]).decode()

    def translate(self) -> None:
        text = textwrap.dedent(self.source).strip()
        self.source = text
        if not text:
            raise self.fail(None, "the operation is empty", "give an expression such as 'a * x + y'")
        try:
            tree = ast.parse(text, mode="exec")
        except SyntaxError as e:
            raise IRValidationError(f"elementwise {self.kernel!r}: the operation {shown(text, 200)} is not valid "
                                    f"Python syntax ({e.msg}{'' if e.offset is None else f' at column {e.offset}'}). "
                                    "Fix: write an expression such as "
                                    "'a * x + y', or assignments 'out = ...; out2 = ...'.") from None
        except UnicodeError as e:  # a lone surrogate, say: Python cannot read the text as source
            at = getattr(e, "start", None)
            where = f" at position {at} ({shown(text[at:at + 1])})" if isinstance(at, int) else ""
            raise IRValidationError(f"elementwise {self.kernel!r}: the operation holds a character that is not "
                                    f"valid text{where}. Fix: remove it (a lone surrogate such as '\\ud800' is half of "
                                    "a character).") from None
        except (RecursionError, MemoryError, ValueError) as e:
            raise IRValidationError(f"elementwise {self.kernel!r}: the operation could not be parsed "
                                    f"({type(e).__name__}). Fix: write a shorter, less deeply nested expression, "
                                    "or use temporaries 't = ...; out = ...'.") from None
        try:
            self._statements(tree.body)
        except RecursionError:
            raise IRValidationError(f"elementwise {self.kernel!r}: the operation nests too deeply (a chain of several "
                                    "hundred terms does too: a + b + c reads as (a + b) + c). Fix: split it "
                                    "into temporaries 't = ...; out = ...', or build the IR with a function.") from None

    def _statements(self, body: list[ast.stmt]) -> None:
        if len(body) == 1 and isinstance(body[0], ast.Expr):
            value = body[0].value
            exprs = value.elts if isinstance(value, ast.Tuple) else [value]
            if len(exprs) != len(self.outputs):
                raise self.fail(value, f"the operation gives {len(exprs)} value(s) for {len(self.outputs)} output(s) "
                                       f"{self.outputs}", "give one expression per output, comma-separated, or "
                                       "assign each: 'out1 = ...; out2 = ...'")
            for name, e in zip(self.outputs, exprs):
                self.stmts.append(ir.store(name, ir.var(_INDEX), self.expr(e)))
                self.texts.append(f"{name} = {self.segment(e)}")
            return
        assigned: dict[str, str] = {}  # name -> variable
        last: dict[str, str] = {}  # name -> the source of its last assignment
        for st in body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                node = st.targets[0]
                target, value = node.id, self.expr(st.value)
            elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
                node = st.target
                target = node.id
                if target not in assigned:
                    raise self.fail(st, f"{self.said(node)} is updated before it is assigned",
                                    f"assign it first: '{target} = ...'" if target not in self.env else
                                    "inputs are read-only: assign a new name (an output or a temporary)")
                # `y op= v` is `y = y op v`, so every operator reads (or is refused) as it does there
                read = ast.copy_location(ast.Name(target, ast.Load()), st.target)
                value = self.expr(ast.copy_location(ast.BinOp(read, st.op, st.value), st))
            elif isinstance(st, ast.Expr):
                raise self.fail(st, "a bare expression among assignments computes nothing",
                                "assign it to an output ('out = ...'), or give a single expression for the output")
            else:
                raise self.fail(st, f"{type(st).__name__} statements are not supported",
                                "write 'name = expression' statements separated by ';' or new lines")
            if target in self.inputs:
                raise self.fail(st, f"the input {self.said(node)} is assigned; inputs are read-only",
                                "assign a new name: an output, or a temporary")
            if target in FUNCTIONS:
                raise self.fail(st, f"{self.said(node)} is the name of a function", "use another temporary name")
            if weak_only(value) and target not in self.outputs and target not in assigned:  # the type of its
                self.defaulted.add(target)  # first value, a bare number's own: said where it differs from another
            var = assigned.get(target)
            text = self.segment(st) or target
            if var is None:  # IR variable names are ASCII: other temporaries are spelt by their UTF-8 bytes
                var = assigned[target] = ("o_" + target if target in self.outputs else "t_" + target
                                          if target.isascii() else "u_" + target.encode().hex())
                self.var_names[var] = target
                if target in self.defaulted:
                    self.defaulted_vars[var] = (target, value)
                t = self.out_types.get(target)
                if t is None or not weak_only(value):
                    self.stmts.append(ir.let(var, value))
                else:  # typed by the output, as the expression form's store types it: declared, then set
                    self.stmts.append(ir.let(var, ir.lit(False if t is ir.DataType.BOOL else 0, t)))
                    self.texts.append(text)
                    self.stmts.append(ir.assign(var, value))
            else:
                self.stmts.append(ir.assign(var, value))
            self.texts.append(text)
            last[target] = text
            self.env[target] = ir.var(var)
        missing = [o for o in self.outputs if o not in assigned]
        if missing:
            raise self.fail(None, f"the output(s) {missing} are never assigned",
                            f"assign every output: '{missing[0]} = ...'")
        for o in self.outputs:
            self.stmts.append(ir.store(o, ir.var(_INDEX), ir.var(assigned[o])))
            self.texts.append(last[o])

    # expressions
    def expr(self, node: ast.AST) -> ir.Expr:
        match node:
            case ast.Name(id=name):
                return self.name(node, name)
            case ast.Constant(value=v):
                if isinstance(v, float) and math.isinf(v):  # Python read a literal past f64 as an infinity
                    text = self.segment(node)
                    raise self.fail(node, f"the literal {text} is past every float type (f64's largest finite is "
                                          f"{DataType.F64.max!r})",
                                    "write inf for an infinity, or a finite literal")
                if isinstance(v, float) and v == 0 and re.match(r"[\d_.]*[1-9]", self.segment(node) or ""):
                    text = self.segment(node)  # Python read a literal below f64's smallest as zero
                    raise self.fail(node, f"the literal {text} is below every float type's smallest (f64's is "
                                          "about 4.9e-324), so it would read as 0.0",
                                    "write 0.0 where zero is meant, or a literal f64 holds")
                if isinstance(v, bool) or (isinstance(v, (int, float)) and not isinstance(v, complex)):
                    return ir.lit(v)
                raise self.fail(node, f"the constant {shown(v)} is not a number", "use int, float, True or False "
                                                                                  "literals")
            case ast.BinOp(op=op, left=a, right=b):
                folded = self.folded(node)
                if folded is not None:  # exact, so a constant past the type is refused as its literal is
                    return ir.lit(folded)
                if isinstance(op, ast.FloorDiv):
                    raise self.fail(node, "`//` is not supported: Python's floor division differs from the IR's "
                                          "division for negative and float operands",
                                    "write a / b (truncates toward zero on integers, as in C) or floor(a / b) for "
                                    "floats")
                if isinstance(op, ast.Pow):
                    return self.power(node, a, b)
                fn = _BINOPS.get(type(op))
                if fn is None:
                    name = "MatMult (`@`)" if isinstance(op, ast.MatMult) else type(op).__name__
                    raise self.fail(node, f"the operator {name} is not supported", f"use {_ALLOWED}")
                return fn(self.expr(a), self.expr(b))
            case ast.UnaryOp(op=op, operand=a):
                folded = self.folded(node)
                if folded is not None:  # -(2**31) is i32's smallest value, not a negated 2**31
                    return ir.lit(folded)
                if isinstance(op, (ast.USub, ast.UAdd)) and isinstance(a, ast.Constant) and type(a.value) is float:
                    self.expr(a)  # its checks (1e400 is no float literal)
                    return ir.lit(-a.value if isinstance(op, ast.USub) else a.value)  # -1.0 is a literal, as -1 is
                x = self.expr(a)
                if isinstance(op, (ast.USub, ast.UAdd)) and isinstance(x, ir.Lit) and x.weak and x.dtype.is_float:
                    return ir.lit(-x.value if isinstance(op, ast.USub) else x.value)  # -inf, -nan, - -3.0: literals
                if isinstance(op, ast.USub):
                    return ir.neg(x)
                if isinstance(op, ast.UAdd):
                    return x
                if isinstance(op, ast.Invert):
                    return ir.bitnot(x)
                return ir.not_(x)  # ast.Not
            case ast.BoolOp(op=op, values=values):
                fn = ir.logical_and if isinstance(op, ast.And) else ir.logical_or
                out = self.expr(values[0])
                for v in values[1:]:
                    out = fn(out, self.expr(v))
                return out
            case ast.Compare(left=left, ops=ops, comparators=rights):
                out, a = None, self.expr(left)
                for op, r in zip(ops, rights):
                    fn = _CMPOPS.get(type(op))
                    if fn is None:
                        raise self.fail(node, f"the comparison {type(op).__name__} is not supported",
                                        "compare with < <= > >= == !=")
                    b = self.expr(r)
                    if r is not rights[-1]:  # read again by the next comparison: a variable, not a copied tree
                        self.copy_limit(b, 2, node)
                        b = self.named(b, node)
                    c = fn(a, b)
                    out = c if out is None else ir.logical_and(out, c)
                    a = b
                return out
            case ast.IfExp(test=c, body=a, orelse=b):
                return ir.select(self.expr(c), self.expr(a), self.expr(b))
            case ast.Call():
                return self.call(node)
            case ast.Attribute():
                raise self.fail(node, "attribute access is not supported",
                                "call functions by their bare name, e.g. sqrt(x) rather than np.sqrt(x)")
            case ast.Subscript():
                raise self.fail(node, "indexing is not supported: each invocation sees one element of every input",
                                "write an ir.Program for indexed access")
            case ast.Tuple():
                raise self.fail(node, "a tuple is not a value", "give one expression per output at the top level only")
        raise self.fail(node, f"{type(node).__name__} is not supported in an elementwise operation", f"use {_ALLOWED}")

    def said(self, node: ast.Name) -> str:
        """The name `node` reads, and how the operation spells it where that differs (Python reads
        identifiers in NFKC form: `ﬁ` is `fi`)."""
        seg = self.segment(node)
        return shown(node.id) + (f" (written {seg}; Python reads identifiers in NFKC form)" if seg and seg != node.id
                                 else "")

    def name(self, node: ast.Name, name: str) -> ir.Expr:
        hit = self.env.get(name)
        if hit is not None:
            return hit
        if name in FUNCTIONS:
            raise self.fail(node, f"the function {self.said(node)} is used without a call", f"call it: {name}(...)")
        if name in self.outputs:
            raise self.fail(node, f"the output {self.said(node)} is read before it is assigned",
                            f"assign it first ('{name} = ...'); outputs start with no value")
        if name in _FLOAT_NAMES:  # after the inputs, outputs and assigned names, which may take these names
            return ir.lit(_FLOAT_NAMES[name])
        known = sorted(self.env)
        raise self.fail(node, f"the name {self.said(node)} is not an input or an assigned name"
                              f"{did_you_mean(name, known + list(FUNCTIONS))}",
                        f"use the inputs {self.inputs} or names assigned before, or declare {shown(name)} as an input")

    def folded(self, node: ast.AST) -> int | None:
        """`_int_constant(node)`, refused where it is wider than any type (not a number to print) or
        shifts by a negative count."""
        try:
            return _int_constant(node, self.constants)
        except OverflowError:
            raise self.fail(node, f"the constant is wider than {_FOLD_BITS} bits, past every type (f64's largest "
                                  "finite is under 2**1024)",
                            "write a constant that fits the operation's type") from None
        except ValueError:
            raise self.fail(node, "a constant is shifted by a negative count (Python refuses it; the IR would mask "
                                  "the count to the type's width)", "shift by a count from 0 up") from None

    def power(self, node: ast.AST, base: ast.AST, exponent: ast.AST) -> ir.Expr:
        k = exponent.value if isinstance(exponent, ast.Constant) else self.folded(exponent)  # x ** (1 + 1), x ** 2 ** 3
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= _MAX_POWER:
            raise self.fail(node, "`**` takes an integer literal exponent from 0 to 64 (the IR has no pow)",
                            "write sqrt(x) for x ** 0.5, recip(x ** k) for negative powers, or exp(y * log(x))")
        x = self.expr(base)
        if k == 0:
            return _one_like(x)
        if k > 1:
            self.copy_limit(x, k, node)
        named = functools.partial(self.named, node=node)
        result = None
        square = named(x) if k > 1 else x
        while k:  # square and multiply: the same operations on every backend
            if k & 1:
                result = square if result is None else result * square
            k >>= 1
            if k:
                square = named(square * square)
        return result

    def copy_limit(self, e: ir.Expr, copies: int, node: ast.AST) -> None:
        """Refuse `e` read `copies` times where it must be copied (its type is the context's: see
        `named`) and the copies would pass _MAX_COPIED nodes (nested, they multiply)."""
        if weak_only(e) and sum(1 for _ in itertools.islice(ir.walk([e]), _MAX_COPIED)) * copies > _MAX_COPIED:
            raise self.fail(node, "an expression of bare literals read more than once is copied each time (a variable "
                                  "would fix its type before the operation gives it one), past a limit here",
                            "give the literals a type, e.g. f32(...) or i32(...), or fold it yourself")

    def named(self, e: ir.Expr, node: ast.AST) -> ir.Expr:
        """`e`, to be read more than once, as a variable (so that a tree read twice a level is not
        copied: (x ** 64) ** 64 would be 4,096 copies of x, each walked and run); as itself where
        it is a leaf, or where only bare literals make it (a variable would fix their type before
        the operation around it gives them one)."""
        if isinstance(e, (ir.Var, ir.Lit)) or weak_only(e):
            return e
        self.stmts.append(ir.let(f"p_{len(self.stmts)}", e))
        self.texts.append(self.segment(node) or "")
        return ir.var(self.stmts[-1].name)

    def call(self, node: ast.Call) -> ir.Expr:
        if not isinstance(node.func, ast.Name):
            raise self.fail(node, "only named functions can be called",
                            f"call one of {', '.join(FUNCTIONS)} by its bare name")
        fname = node.func.id
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, f"{fname}() takes positional arguments only", f"write {fname}(a, b, ...)")
        args = node.args
        if fname == "cast":
            if len(args) != 2 or not (isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)):
                raise self.fail(node, "cast takes a value and a type name in quotes",
                                f"write cast(x, \"f32\") with one of {', '.join(d.value for d in DataType)}")
            try:  # any name a declaration takes ('f', 'double', 'float32' ...)
                t = DataType.parse(args[1].value)
            except VyreError as e:
                why, _, fix = str(e).partition(" Fix: ")
                raise self.fail(args[1], why.rstrip("."), fix.rstrip(".")) from None
            return self.converted(node, self.expr(args[0]), t)
        if fname in _CASTS:
            self.arity(node, fname, args, 1)
            return self.converted(node, self.expr(args[0]), _CASTS[fname])
        if fname in _UNARY:
            self.arity(node, fname, args, 1)
            return _UNARY[fname](self.expr(args[0]))
        if fname in _BINARY:
            self.arity(node, fname, args, 2)
            return _BINARY[fname](*(self.expr(a) for a in args))
        if fname in _TERNARY:
            self.arity(node, fname, args, 3)
            return _TERNARY[fname](*(self.expr(a) for a in args))
        if fname in _VARIADIC:
            if len(args) < 2:
                raise self.fail(node, f"{fname} takes two or more arguments", f"write {fname}(a, b)")
            out = self.expr(args[0])
            for a in args[1:]:
                out = _VARIADIC[fname](out, self.expr(a))
            return out
        if fname in self.env:
            raise self.fail(node, f"{shown(fname)} is a value, not a function", "remove the call parentheses")
        raise self.fail(node, f"{shown(fname)} is not a function an elementwise operation may call"
                              f"{did_you_mean(fname, FUNCTIONS)}",
                        f"use one of {', '.join(FUNCTIONS)}")

    def converted(self, node: ast.AST, x: ir.Expr, t: DataType) -> ir.Expr:
        """`x` converted to `t`, refused where x's type is only a temporary's default and that lost
        the number it was assigned (a temporary first assigned a bare number holds it in f32, or u32,
        i32 ...: `t = 0.1` is f32's 0.1), or converting it would be refused for the number itself
        (`t = 300; u8(t)`, as `u8(300)` is)."""
        weak = frozenset(self.defaulted_vars)
        if weak and not isinstance(x, ir.Lit) and weak_only(x, weak_vars=weak):
            read = {v.name for v in ir.walk([x]) if isinstance(v, ir.Var)}
            for var, (name, first) in self.defaulted_vars.items():
                if var not in read:
                    continue
                lost = any(isinstance(v, ir.Lit) and v.weak and v.dtype.is_float and not math.isnan(v.value)
                           and float(np.float32(v.value)) != v.value for v in ir.walk([first]))
                if isinstance(x, ir.Var) and isinstance(first, ir.Lit):
                    lost = lost or _cast_literal(first, t) is not None
                if lost:
                    raise self.fail(node, f"the temporary {name} was assigned a bare number, so it holds it in a "
                                          f"default type (f32 for a float, u32 or the first integer type holding an "
                                          f"int), which does not keep it for the {t} it is converted to here",
                                    f"give {name} its type where it is assigned, e.g. {name} = {t}(...)")
        return ir.cast(x, t)

    def arity(self, node: ast.AST, fname: str, args: list, n: int) -> None:
        if len(args) != n:
            raise self.fail(node, f"{fname} takes {n} argument{'s' if n > 1 else ''}, got {len(args)}",
                            f"call {fname} with {n} argument{'s' if n > 1 else ''}")


_FOLDED = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}


_FLOAT_NAMES = {"inf": math.inf, "nan": math.nan}  # float literals by name, in the operation's float type

_FOLD_BITS = 1088  # past f64's largest finite (under 2**1024), so past every type: refused, not built


def _int_constant(node: ast.AST, memo: dict | None = None) -> int | None:
    """The exact value, as a Python int, of an expression of integer literals under + - * ** & | ^
    << >> and unary - +, else None (a division, remainder or ~, whose result depends on the type:
    7 / 2 is 3 or 3.5, ~7 is 0xFFFFFFF8 in u32); OverflowError past _FOLD_BITS bits, ValueError for
    a negative shift count. `memo` (by node id) keeps each subtree's value: an operation folds every
    operator node, and a long chain would be walked again from each."""
    if memo is not None and id(node) in memo:
        return memo[id(node)][1]
    match node:
        case ast.Constant(value=v) if isinstance(v, int) and not isinstance(v, bool):
            pass
        case ast.UnaryOp(op=ast.USub() | ast.UAdd() as op, operand=a):
            v = _int_constant(a, memo)
            if v is not None and isinstance(op, ast.USub):
                v = -v
        case ast.BinOp(op=ast.Pow(), left=a, right=ast.Constant(value=k)) if (
                isinstance(k, int) and not isinstance(k, bool) and k >= 0):  # 2**100 is a constant of f64
            v = _int_constant(a, memo)
            if v is not None and abs(v) > 1 and (v.bit_length() - 1) * k >= _FOLD_BITS:  # at least that wide
                raise OverflowError
            v = None if v is None else v ** k
            if v is not None and v.bit_length() > _FOLD_BITS:
                raise OverflowError
        case ast.BinOp(op=ast.LShift() | ast.RShift() as op, left=a, right=b):
            x, y = _int_constant(a, memo), _int_constant(b, memo)
            if x is None or y is None:
                v = None
            elif y < 0:
                raise ValueError
            elif isinstance(op, ast.RShift):
                v = x >> min(y, _FOLD_BITS + 1)
            elif x and x.bit_length() + y > _FOLD_BITS:  # refused before Python builds a huge int
                raise OverflowError
            else:
                v = x << y
        case ast.BinOp(op=op, left=a, right=b) if type(op) in _FOLDED:
            x, y = _int_constant(a, memo), _int_constant(b, memo)
            v = None if x is None or y is None else _FOLDED[type(op)](x, y)
        case _:
            v = None
    if v is not None and v.bit_length() > _FOLD_BITS:
        raise OverflowError
    if memo is not None:
        memo[id(node)] = (node, v)  # the node held: its id names no other while the memo lives
    return v


def _one_like(x: ir.Expr) -> ir.Expr:
    """`x ** 0`: 1 in x's type (the weak literal takes its type from x through the select)."""
    return ir.select(ir.lit(True), ir.lit(1), x)


# ---- array kinds --------------------------------------------------------------------------------

_HOST_KINDS = ("numpy", "torch_cpu")
_KIND_NAMES = {"numpy": "NumPy", "torch_cpu": "PyTorch CPU", "numba": "numba device", "cupy": "CuPy",
               "torch": "PyTorch CUDA", "cuda": "CUDA (__cuda_array_interface__ / DLPack)"}


class _Arg:
    """One argument of a call: its kind, whether it is a scalar (broadcast), its shape and value."""

    __slots__ = ("name", "kind", "scalar", "shape", "value")

    def __init__(self, name: str, kind: str | None, scalar: bool, shape: tuple | None, value):
        self.name, self.kind, self.scalar, self.shape, self.value = name, kind, scalar, shape, value

    @property
    def device(self) -> bool:
        return self.kind is not None and self.kind not in _HOST_KINDS


def _classify(name: str, x, where: str, dt: DataType | None = None, *, out: bool = False) -> _Arg:
    """What `x` is: a host scalar (kind None), a host array, or a device array. A host scalar for
    an input of type `dt` that is no number (an object, complex, a date, text, a record) is refused;
    `out`: x is an out= array, to be written in place (said so where it is none)."""
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return _scalar_arg(name, x, where, dt)
    if isinstance(x, np.ma.MaskedArray):
        raise DispatchError(f"{where}: {shown(name)} is a masked array; its mask would be lost. Fix: " + (
            "pass a plain array to fill (np.empty(shape, dtype)) and mask the result yourself." if out else
            f"pass {name}.filled(value), with the value the masked elements mean."))
    if isinstance(x, np.ndarray):
        if x.ndim == 0:
            return _scalar_arg(name, x, where, dt)
        return _Arg(name, "numpy", False, x.shape, x)
    module = type(x).__module__.split(".")[0]
    if module == "torch" and hasattr(x, "is_cuda"):
        t = x.detach()
        if t.is_cuda:
            return _Arg(name, "torch", t.dim() == 0, tuple(t.shape), t)
        if t.device.type != "cpu":
            raise DispatchError(f"{where}: {shown(name)} is a PyTorch tensor on {t.device}. Fix: move it to the CPU "
                                "or a CUDA device (x.cpu() / x.cuda()).")
        host = t.numpy()
        return _scalar_arg(name, host, where, dt) if host.ndim == 0 else _Arg(name, "torch_cpu", False, host.shape,
                                                                              host)
    if hasattr(x, "__cuda_array_interface__") or _dlpack_on_cuda(x):
        kind = "cupy" if module == "cupy" else "numba" if hasattr(x, "copy_to_host") else "cuda"
        shape = tuple(int(d) for d in (x.shape if hasattr(x, "shape") else x.__cuda_array_interface__["shape"]))
        return _Arg(name, kind, len(shape) == 0, shape, x)
    if isinstance(x, (list, tuple)):
        raise DispatchError(f"{where}: {shown(name)} is {a_type(x)}, not an array. Fix: pass "
                            "np.asarray(x, dtype=...) with the declared type's dtype.")
    if isinstance(x, numbers.Number):  # Decimal, Fraction: NumPy would hold them as objects
        raise DispatchError(f"{where}: {shown(name)} is {a_type(x)}, a number type elementwise does not take "
                            "(it takes Python bool, int and float, NumPy numbers and arrays). Fix: pass "
                            f"float({name}) or int({name}) where that is its exact value.")
    if out:
        raise DispatchError(f"{where}: {shown(name)} is {a_type(x)}, not an array to write. Fix: pass an array of the "
                            "inputs' shape and the output's dtype (np.empty(shape, dtype), or a CUDA array), or leave "
                            "out= out.")
    raise DispatchError(f"{where}: {shown(name)} is {a_type(x)} ({type(x).__module__}.{type(x).__qualname__}), which "
                        "elementwise does not take. Fix: pass a Python/NumPy scalar, a NumPy array "
                        "(np.asarray(x)) or a CUDA array (numba, CuPy, PyTorch).")


def _scalar_arg(name: str, x, where: str, dt: DataType | None) -> _Arg:
    """`x`, a Python or NumPy scalar or a 0-d array, as a host scalar argument where it is a number."""
    kind = "c" if isinstance(x, complex) else "i" if isinstance(x, (bool, int, float)) else x.dtype.kind
    if dt is None or kind in "biuf":
        return _Arg(name, None, True, None, x)
    if kind == "O":
        inner = x.item()
        number = isinstance(inner, (bool, *INTEGERS, float, np.bool_, np.floating))
        what = (f"a 0-d object array (holding the {type(inner).__name__} {shown(inner, 60)}), not a number of a NumPy "
                "type")
        fix = (f"pass the number itself, {name}.item(), or np.asarray({name}, dtype=np.{_numpy_name(dt)})" if number
               else f"pass a Python int or float for it, or np.asarray({name}, dtype=np.{_numpy_name(dt)}) where "
                    "NumPy can convert it")
    elif kind in "US":
        text = str(x) if kind == "U" else bytes(x)
        what = f"{'a string' if kind == 'U' else 'bytes'} ({shown(text, 60)}); vyre takes numbers"
        fix = f"pass the number it spells, {'float' if dt.is_float else 'int'}({name})"
    else:
        what, fix = _kind_fix(name, np.asarray(x).dtype, dt, x)
    raise DispatchError(f"{where}: the scalar {name!r} is {what}. Fix: {fix}.")


_UNITS = {"Y": "years", "M": "months", "W": "weeks", "D": "days", "h": "hours", "m": "minutes", "s": "seconds",
          "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds", "ps": "picoseconds",
          "fs": "femtoseconds", "as": "attoseconds"}


def _kind_fix(x: str, have: np.dtype, dt: DataType, value=None) -> tuple[str, str]:
    """What values of `have`, a complex, date, time-span or record dtype, are and how to pass them for
    `x`, declared `dt`: (what, fix)."""
    store = _numpy_name(dt)

    def as_declared(expr: str, of: np.dtype) -> str:  # the Fix's expression, converted where its dtype is not dt's
        return expr if of == np.dtype(store) else f"{expr}.astype(np.{store})"
    if have.kind == "c":
        real = as_declared(f"{x}.real", np.dtype(f"f{have.itemsize // 2}"))
        return (f"complex{'' if value is None else f' {complex(value)}'}; vyre has no complex types",
                f"pass its real part, {real} (and its imaginary part alike, as another input where it matters)")
    if have.kind in "Mm":
        unit = _UNITS.get(np.datetime_data(have)[0], "units")
        what = f"{'a date' if have.kind == 'M' else 'a time span'} ({have}); vyre has no date or time types"
        count = f"its count of {unit}{' since 1970-01-01' if have.kind == 'M' else ''}"
        declare = "" if dt is DataType.I64 else f", and declare {x!r} i64"
        return what, f"pass {x}.astype(np.int64), {count}{declare}"
    if have.names:
        field = next((f for f in have.names if have.fields[f][0] == np.dtype(store)), have.names[0])
        of = have.fields[field][0]
        return (f"a record (fields {', '.join(map(repr, have.names))}); vyre takes numbers",
                f"pass one field, {as_declared(f'{x}[{field!r}]', of)} ({field!r} holds {of})")
    return (f"raw bytes (void, {have.itemsize} bytes); vyre takes numbers",
            f"pass the number its bytes hold as a NumPy number, e.g. {x}.view(np.{store}) where they are one {store}")


def _numpy_name(dt: DataType) -> str:
    """The NumPy type to pass a scalar of `dt` as (bf16 takes the float32s it holds exactly)."""
    return "bool" if dt.is_bool else "float32" if dt is DataType.BF16 else np.dtype(dt.storage).name


def _dlpack_on_cuda(x) -> bool:
    if not hasattr(x, "__dlpack__") or not hasattr(x, "__dlpack_device__"):
        return False
    try:
        return int(x.__dlpack_device__()[0]) in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
    except Exception:  # noqa: BLE001 - an exporter that cannot say is not a CUDA array
        return False


def _device_dtype(arg: _Arg, where: str) -> np.dtype | None:
    """The NumPy dtype of a device array (None where only DLPack can say: the backend checks it)."""
    x = arg.value
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        return None
    except (TypeError, RuntimeError) as e:  # PyTorch refuses to export some dtypes
        raise DispatchError(f"{where}: {arg.name!r} ({type(x).__name__} of {getattr(x, 'dtype', '?')}) exports no CUDA "
                            f"array interface ({e}). Fix: use a dtype its library exports, or a numba/CuPy "
                            "array.") from None
    return interface_dtype(cai)


def _changed_by_astype(v: np.ndarray, dt: DataType) -> int | None:
    """The first flat index whose value `v.astype(dt.storage)` would change (wrap, truncate,
    round or saturate; a NaN kept as NaN is no change), or None."""
    if dt.is_bool or dt is DataType.BF16 or v.dtype.kind not in "iuf":
        return None
    flat = v.reshape(-1)
    with np.errstate(all="ignore"):
        back = flat.astype(dt.storage).astype(flat.dtype)
    same = back == flat
    if flat.dtype.kind == "f" and np.dtype(dt.storage).kind == "f":
        same |= np.isnan(back) & np.isnan(flat)
    bad = np.flatnonzero(~same)
    return int(bad[0]) if bad.size else None


def _dtype_fix(x: str, dt: DataType, have: np.dtype) -> str:
    if dt.is_bool:
        return f"bool elements are 32-bit words in vyre buffers: pass {x}.astype(np.uint32) (0 or 1)"
    if dt is DataType.BF16:
        return f"bf16 elements are raw bits: pass ir.f32_to_bf16_bits({x}) (uint16)"
    if have.kind == "b":
        return (f"NumPy bools are bytes and vyre's bool is a 32-bit word: convert explicitly "
                f"({x}.astype(np.{dt.storage})), or declare {x!r} bool and pass {x}.astype(np.uint32)")
    if have.name in _CASTS and have.byteorder in "=|":
        return f"convert it explicitly ({x}.astype(np.{dt.storage})), or declare {x!r} as {_CASTS[have.name]}"
    if have.kind in "cMmV":
        what, fix = _kind_fix(x, have, dt)
        return f"{what.rpartition('; ')[2]}: {fix}"
    return f"convert it explicitly ({x}.astype(np.{dt.storage}))"


# ---- the kernel ---------------------------------------------------------------------------------

class Elementwise:
    """An elementwise kernel made by `elementwise`; call it on arrays (see the module docstring).

    Attributes: `name`, `inputs` and `outputs` ([(name, DataType)]), `operation` (the string or
    function), `workgroup`. `program(*inputs)` is the Program a call with those inputs runs (all
    arrays when none are given), `ptx(*inputs, sm=90)` its PTX.
    """

    def __init__(self, inputs, outputs, operation: Operation, name: str = "elementwise", *, workgroup: int = 256):
        why = _not_a_name(name)
        if why:
            raise IRValidationError(f"elementwise: name={shown(name, 60)} {why}, so it cannot name the kernel. Fix: "
                                    "use ASCII letters, digits and _, not starting with a digit, e.g. name='saxpy'.")
        self.name = name
        if isinstance(workgroup, (bool, np.bool_)) or not isinstance(workgroup, INTEGERS) \
                or not 1 <= workgroup <= 1024:
            raise IRValidationError(f"elementwise {shown(name)}: workgroup={shown(workgroup)} is not an int from 1 to "
                                    "1024. Fix: pass e.g. workgroup=256.")
        self.workgroup = int(workgroup)
        self.inputs = _params(inputs, "inputs", name)
        self.outputs = _params(outputs, "outputs", name)
        if not self.outputs:
            raise IRValidationError(f"elementwise {shown(name)}: no outputs are declared. Fix: declare at least one, "
                                    "e.g. 'f32 out'.")
        taken = [n for n, _ in self.inputs if n in _CALL_KEYWORDS]
        if taken:
            raise IRValidationError(f"elementwise {shown(name)}: the input {taken[0]!r} is named like a keyword of the "
                                    f"kernel's calls ({', '.join(_CALL_KEYWORDS)}), so it could not be passed by name. "
                                    f"Fix: rename it, e.g. {taken[0] + '_'!r}.")
        both = sorted({n for n, _ in self.inputs} & {n for n, _ in self.outputs})
        if both:
            raise IRValidationError(f"elementwise {shown(name)}: {both} are declared as both inputs and outputs. Fix: "
                                    "give the outputs their own names (outputs are written, never read; for an update "
                                    "in place assign the result: y[...] = k(a, x, y)).")
        self.operation = operation
        self._in_names = [n for n, _ in self.inputs]
        self._out_names = [n for n, _ in self.outputs]
        self._body, self._texts = self._translate(operation)
        used = {x.name for x in ir.walk(self._body) if isinstance(x, ir.Var)}
        self._used = [n for n in self._in_names if f"v_{n}" in used]
        self._programs: dict[tuple[bool, ...], ir.Program] = {}
        self._lock = threading.Lock()
        self._scalars: dict[tuple, tuple] = {}  # uploaded scalar buffers: (backend id, dtype, bits) -> (ref, buf)
        self.config = DispatchConfig(label=name)
        self.program()  # every mistake in the operation is reported here, at creation

    # ---- building ---------------------------------------------------------------------------
    def _translate(self, operation: Operation) -> tuple[list[ir.Node], list[str]]:
        self._defaulted: set[str] = set()
        self._var_names = {f"v_{n}": n for n in self._in_names}  # IR variable -> the user's name, for messages
        if isinstance(operation, str):
            t = _Translator(self.name, operation, self._in_names, dict(self.outputs))
            t.translate()
            self._defaulted, self._var_names = t.defaulted, t.var_names
            return t.stmts, t.texts
        if not callable(operation):
            raise IRValidationError(f"elementwise {self.name!r}: the operation is neither a string nor a function "
                                    f"(got {type(operation).__name__}). Fix: pass a string such as 'a * x + y' or a "
                                    "function of the inputs' IR expressions.")
        args = [ir.var(f"v_{n}") for n in self._in_names]
        try:
            result = operation(*args)
        except VyreError:
            raise
        except Exception as e:
            raise IRValidationError(f"elementwise {self.name!r}: the operation function raised {type(e).__name__}: "
                                    f"{e}. Fix: make it take one IR expression per input ({self._in_names}) and "
                                    "return expressions built with operators and vyre_numba.ir functions.") from e
        if isinstance(result, Mapping):
            keys = sorted(map(str, result))
            if keys != sorted(self._out_names):
                raise IRValidationError(f"elementwise {self.name!r}: the operation function returned values for "
                                        f"{keys}, but the outputs are {self._out_names}. Fix: return one value per "
                                        "output, keyed by its name.")
            values = [result[n] for n in self._out_names]
        elif isinstance(result, (tuple, list)):
            values = list(result)
        else:
            values = [result]
        if len(values) != len(self._out_names):
            raise IRValidationError(f"elementwise {self.name!r}: the operation function returned {len(values)} "
                                    f"value(s) for {len(self._out_names)} output(s) {self._out_names}. Fix: return a "
                                    "tuple with one expression per output.")
        stmts, texts = [], []
        for name, v in zip(self._out_names, values):
            try:
                stmts.append(ir.store(name, ir.var(_INDEX), v))
            except IRValidationError as e:
                raise IRValidationError(f"elementwise {self.name!r}: the value for output {shown(name)} is not an IR "
                                        f"expression: {e}") from None
            texts.append(f"{name} = {stmts[-1].value}")
            free = sorted({x.name for x in ir.walk([stmts[-1].value]) if isinstance(x, ir.Var)}
                          - {a.name for a in args})
            if free:  # the kernel's own variables (idx, ...) are no business of the function's
                raise IRValidationError(f"elementwise {self.name!r}: the value for output {shown(name)} reads the "
                                        f"variable {shown(free[0])}, which is not one of its arguments (the "
                                        f"operation function's only variables are the inputs it is given, "
                                        f"{self._in_names}). Fix: build the value from the arguments and literals.")
            own = set(self._in_names) | set(self._out_names)
            touch = next((x for x in ir.walk([stmts[-1].value]) if isinstance(x, (ir.Load, ir.Atomic))
                          and x.buffer in own), None)
            if touch is not None:  # another element's value, an output's, or an order-dependent atomic
                did = "an atomic on" if isinstance(touch, ir.Atomic) else "a load of"
                raise IRValidationError(f"elementwise {self.name!r}: the value for output {shown(name)} makes {did} "
                                        f"the kernel's buffer {shown(touch.buffer)}; an elementwise operation sees "
                                        f"each input at the output's element only, as its arguments "
                                        f"{self._in_names}. Fix: build the value from the arguments and literals, or "
                                        "write an ir.Program to read other elements.")
        return stmts, texts

    def _build(self, scalars: tuple[bool, ...]) -> ir.Program:
        nin = len(self.inputs)
        bufs = [ir.BufferDecl.uniform(n, b, dt, 1) if s else ir.BufferDecl.read(n, b, dt)
                for b, ((n, dt), s) in enumerate(zip(self.inputs, scalars))]
        bufs += [ir.BufferDecl.output(n, nin + k, dt) for k, (n, dt) in enumerate(self.outputs)]
        i = ir.var(_INDEX)
        loads = [ir.let(f"v_{n}", ir.load(n, 0 if scalars[self._in_names.index(n)] else i)) for n in self._used]
        entry = [ir.let(_INDEX, ir.gid(0)), ir.if_(i < ir.buf_len(self._out_names[0]), loads + self._body)]
        program = ir.Program(bufs, self.workgroup, entry, name=self.name)
        diags = ir.validate(program)
        if diags:
            raise self._invalid(diags, len(loads))
        return program

    def _invalid(self, diags: list, nloads: int) -> IRValidationError:
        """One error for the problems `ir.validate` found in a built program: the kernel's name where
        PTX cannot take it, else the statements of the operation with their problems, and one Fix:
        the typing rule where an operation's types differ, else the problems' own fixes."""
        lines, fixes, typing = [], [], False
        buffers = set(self._in_names + self._out_names)  # a buffer named as an IR variable keeps its name
        said = {v: name for v, name in self._var_names.items() if v not in buffers}
        for d in diags:
            cause, _, hint = _user_names(d.message, said).partition(" Fix: ")
            cause, hint = cause.rstrip("."), hint.rstrip(".")
            if d.where == "program":
                why = cause.removeprefix(f"program name {shown(self.name)} ")
                return IRValidationError(f"elementwise: name={shown(self.name, 60)} "
                                         f"{why if why != cause else 'cannot name a kernel: ' + cause}. Fix: choose "
                                         "another name, e.g. name='saxpy'.", diags)
            m = re.match(r"entry\[1\]\.then\[(\d+)\]", d.where)
            k = int(m.group(1)) - nloads if m else -1
            where = d.where
            if 0 <= k < len(self._texts):
                text = self._texts[k]
                if not isinstance(self.operation, str):  # `output = value`: the value reads only the arguments
                    target, eq, value = text.partition(" = ")
                    text = target + eq + _user_names(value, self._var_names)
                where = f"in `{clip(text, 120)}`"
            typing |= "different types" in cause or hint.startswith("convert explicitly")
            if 0 <= k < len(self._texts) and ("different types" in cause or " must be " in cause):
                for t in dict.fromkeys(_NAMES.findall(self._texts[k])):  # a set lookup each: thousands are fine
                    if t in self._defaulted:
                        cause += (f" ({t} was assigned a bare number, whose type is not taken from where {t} is used: "
                                  f"name the type it needs, e.g. {t} = f32(...))")
            own = _text_fix(d.facts, hint) if isinstance(self.operation, str) else hint
            if not isinstance(self.operation, str) and "is not declared" in cause:  # a buffer the function read
                own = ("use only the function's arguments (one IR expression per input: the kernel binds no other "
                       "buffer), or write an ir.Program to read other buffers")
            lines.append((f"{where}: {cause}", own))
            if own and own not in fixes:
                fixes.append(own)
        if typing or not fixes:
            shown_lines = [f"{w}{'; ' + h if h else ''}" for w, h in lines]
            fix = ("give both operands of each operation and each output one type, converting with the type's "
                   "name, e.g. f32(n), i32(x)" if isinstance(self.operation, str) else "return values of the "
                   "outputs' types, built from the arguments with operators and vyre_numba.ir functions, converting "
                   "with ir.cast") + " (there is no implicit conversion)"
        else:
            shown_lines, fix = [w for w, _ in lines], "; ".join(fixes)
        return IRValidationError(
            f"elementwise {self.name!r}: the operation does not type-check (inputs: {_signature(self.inputs)}; "
            f"outputs: {_signature(self.outputs)}):\n  " + "\n  ".join(dict.fromkeys(shown_lines))
            + f"\nFix: {fix}.", diags)

    def program(self, /, *args, **named) -> ir.Program:
        """The vyre Program a call with these inputs runs (which inputs are scalars decides it);
        with no inputs, the one for all arrays."""
        if args or named:
            values = self._arguments(args, named, "program")
            key = tuple(_classify(n, v, f"{self.name}.program(...)", dt).scalar
                        for (n, dt), v in zip(self.inputs, values))
        else:
            key = (False,) * len(self.inputs)
        return self._program_for(key)

    def _program_for(self, key: tuple[bool, ...]) -> ir.Program:
        hit = self._programs.get(key)
        if hit is None:
            with self._lock:
                hit = self._programs.get(key)
                if hit is None:
                    hit = self._programs[key] = self._build(key)
        return hit

    def ptx(self, /, *args, sm: int = 90, **named) -> str:
        """The PTX text of `program(*args)` for sm_`sm` (no GPU needed)."""
        from .ptx import emit

        return emit(self.program(*args, **named), sm=sm)

    # ---- calling ----------------------------------------------------------------------------
    def _arguments(self, args: tuple, named: dict, what: str) -> list:
        names = self._in_names
        where = f"{self.name}.program(...)" if what == "program" else f"{self.name}(...)"
        if len(args) > len(names):
            raise DispatchError(f"{where}: takes {len(names)} input(s) {names}, got {len(args)}. Fix: pass one value "
                                "per input (outputs are made for you, or given with out=).")
        values = dict(zip(names, args))
        for k, v in named.items():
            if k not in names:
                keywords = ["out", "backend"] if what == "call" else []
                near = difflib.get_close_matches(k, keywords + list(names), n=1, cutoff=0.6)
                hint = " (outputs go in out=)" if k in self._out_names else \
                    f" (did you mean {near[0]}=?)" if near else ""
                raise DispatchError(f"{where}: {shown(k)} is not an input{hint}. Fix: name one of {names}"
                                    f"{' or the keywords out= and backend=' if keywords else ''}.")
            if k in values:
                raise DispatchError(f"{where}: {shown(k)} is given twice (by position and by name). Fix: give it once.")
            values[k] = v
        missing = [n for n in names if n not in values]
        if missing:
            raise DispatchError(f"{where}: missing input(s) {missing}. Fix: pass a value for each of {names}.")
        return [values[n] for n in names]

    def __call__(self, /, *args, out=None, backend: Backend | str | None = None, **named):
        """Run the kernel on `args` (one per input, by position or name) and return the output
        (a tuple of outputs when there are several). See the module docstring."""
        where = f"{self.name}(...)"
        values = self._arguments(args, named, "call")
        be = _backend(backend, where)
        ins = [_classify(n, v, where, dt) for (n, dt), v in zip(self.inputs, values)]
        outs = self._outs(out, where)
        arrays = [a for a in ins + outs if not (a.scalar and a.kind is None)]
        kinds = sorted({a.kind for a in arrays}, key=str)
        if len(kinds) > 1:
            listing = ", ".join(f"{a.name!r}: {_KIND_NAMES[a.kind]}" for a in arrays)
            raise DispatchError(f"{where}: the arrays are of different kinds ({listing}); results would have no one "
                                "kind. Fix: convert explicitly to one kind: numba.cuda.as_cuda_array(x) views a CUDA "
                                "array as numba's without a copy, x.copy_to_host() / cupy.asnumpy(x) / x.cpu().numpy() "
                                "bring device data to the host, numba.cuda.to_device(x) sends it.")
        shaped = [a for a in ins if not a.scalar] or [a for a in outs]
        if not shaped and not self.inputs:
            raise DispatchError(f"{where}: the kernel takes no inputs, so nothing says how many elements to compute. "
                                "Fix: pass out= arrays to fill (their shape is the result's).")
        if not shaped:
            name, dt = self.inputs[0]
            full = (f"ir.f32_to_bf16_bits(np.full(n, {name}, dtype=np.float32))" if dt is DataType.BF16 else
                    f"np.full(n, {name}, dtype=np.{np.dtype(dt.storage).name})")  # bool: 32-bit words
            raise DispatchError(f"{where}: every input is a scalar, so nothing says how many elements to compute. "
                                f"Fix: pass at least one input as an array (for {name!r}, {full}), or pass out= "
                                "arrays to fill.")
        shape = shaped[0].shape
        for a in ins + outs:
            if not a.scalar:
                if a.shape != shape:
                    role = "out= array" if a in outs else "input"
                    raise DispatchError(f"{where}: {role} {a.name!r} has shape {a.shape} but {shaped[0].name!r} has "
                                        f"shape {shape}. Fix: pass arrays of one shape (scalars broadcast; no other "
                                        "broadcasting is done).")
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if n >= 2**32:
            raise DispatchError(f"{where}: {n} elements is 2**32 or more; lengths are u32. Fix: split the data.")
        program = self._program_for(tuple(a.scalar for a in ins))
        kind = kinds[0] if kinds else "numpy"
        if kind in _HOST_KINDS:
            results = self._run_host(be, program, ins, outs, shape, n, where)
            if kind == "torch_cpu" and out is None:
                import torch

                results = [torch.from_numpy(r) for r in results]
        else:
            results = self._run_device(be, program, ins, outs, kind, shape, n, where)
        if out is not None:
            return out
        return results[0] if len(results) == 1 else tuple(results)

    def _outs(self, out, where: str) -> list[_Arg]:
        if out is None:
            return []
        many = isinstance(out, (tuple, list))
        given = list(out) if many else [out]
        if len(given) != len(self.outputs):
            raise DispatchError(f"{where}: out= gives {len(given)} array(s) for {len(self.outputs)} output(s) "
                                f"{self._out_names}. Fix: pass out=(array, ...) with one array per output.")
        args = []
        for (name, dt), o in zip(self.outputs, given):
            a = _classify(name, o, where + " out=", out=True)
            if a.kind is None:
                raise DispatchError(f"{where}: out= for {shown(name)} is a scalar or 0-d array, not an array to write. "
                                    "Fix: pass an array of the inputs' shape (np.empty(shape, dtype)), or leave out= "
                                    "out.")
            if a.kind == "numpy" and not o.flags.writeable:
                raise DispatchError(f"{where}: out= for {shown(name)} is read-only. Fix: pass a writeable array.")
            a.scalar = False
            args.append(a)
        return args

    def _check_dtype(self, a: _Arg, dt: DataType, have: np.dtype | None, role: str, where: str) -> None:
        if have is not None and have != dt.storage:
            fix = _dtype_fix(a.name, dt, have)
            k = _changed_by_astype(a.value, dt) if a.kind == "numpy" and role == "input" and have.name in _CASTS else None
            if role != "input":  # an out= copy would be filled, not the caller's array
                fix = (f"pass an out= array of {dt.storage}, {a.name}2 = np.empty_like({a.name}, dtype=np."
                       f"{dt.storage}), and copy it into yours after ({a.name}[...] = {a.name}2), or leave out= out "
                       "and take the array returned")
            elif k is not None:  # the conversion the fix names would change a value: the declaration keeps them
                flat, wide = a.value.reshape(-1), _CASTS[have.name]
                rounds = (f", or pass {a.name}.astype(np.{dt.storage}) where rounding to {dt} is meant" if
                          have.kind == "f" and dt.is_float else "")  # an integer's conversion wraps: never offered
                fix = (f"declare {a.name!r} as {wide} to keep its values exactly, and convert it where the operation "
                       f"needs {dt} ({dt.value}({a.name})){rounds} (element {k}, {shown(flat[k].item())}, would "
                       "change)")
            raise DispatchError(f"{where}: {role} {a.name!r} is declared {dt} ({dt.storage}) but the array holds "
                                f"{have}; nothing is converted implicitly. Fix: {fix}.")

    def _scalar_host(self, a: _Arg, dt: DataType, where: str) -> np.ndarray:
        """A host scalar as one element of `dt`, converted only where exact."""
        decl = ir.BufferDecl.uniform(a.name, 0, dt, 1)
        v = a.value
        one = v.item() if isinstance(v, (np.ndarray, np.generic)) and np.ndim(v) == 0 else v
        if dt is DataType.BF16 and isinstance(one, int) and not isinstance(one, bool) and \
                getattr(v, "dtype", None) != np.uint16:  # np.uint16 is raw bits
            with np.errstate(over="ignore"):
                exact = abs(one) < 2**128 and float(ir.bf16_bits_to_f32(ir.f32_to_bf16_bits(np.float32(one)))) == one
            if 0 <= one < 2**16:  # raw bits could be meant too
                fix = (f"pass {float(one)!r} (a float) for the value, or np.uint16(bits) for raw bits" if exact else
                       f"pass np.uint16({one}) for raw bits, or a value bf16 holds as a float (bf16 keeps 8 "
                       f"significant bits; {one} is not one of its values)")
                raise DispatchError(f"{where}: the scalar {a.name!r} = {one} is an int, which a bf16 input could read "
                                    f"as a value or as raw bfloat16 bits. Fix: {fix}.")
            if exact:  # no uint16 holds it: a value, as any other float input takes an int
                v = float(one)
        if type(v) is int and dt.is_float and not -2**63 <= v < 2**64:  # NumPy would read it as an object
            try:
                if float(v) == v:
                    v = float(v)
            except OverflowError:  # past every float: refused below
                pass
        try:
            return as_host_array(decl, v, where)
        except DispatchError:
            v = a.value.item() if isinstance(a.value, (np.ndarray, np.generic)) else a.value
            if dt is DataType.BF16 and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**16:
                raise DispatchError(f"{where}: the scalar {a.name!r} = {v} is an int, which a bf16 input could read "
                                    f"as a value or as raw bfloat16 bits. Fix: pass {float(v)!r} (a float) for the "
                                    "value, or np.uint16(bits) for raw bits.") from None
            why = f"is a bool, not a {dt} value" if isinstance(v, bool) else f"is not exactly a {dt} value"
            raise DispatchError(f"{where}: the scalar {a.name!r} = {shown(v)} {why}. Fix: {_scalar_fix(v, dt)}, or "
                                f"declare {a.name!r} with a type that holds it.") from None

    def _run_host(self, be: Backend, program: ir.Program, ins: list[_Arg], outs: list[_Arg], shape: tuple, n: int,
                  where: str) -> list[np.ndarray]:
        flat = []
        for a, (_, dt) in zip(ins, self.inputs):
            if a.scalar:
                flat.append(self._scalar_host(a, dt, where))
            else:
                self._check_dtype(a, dt, a.value.dtype, "input", where)
                flat.append(np.ascontiguousarray(a.value).reshape(-1))
        for o, (_, dt) in zip(outs, self.outputs):
            self._check_dtype(o, dt, o.value.dtype, "out= array", where)
            for a in ins:
                if not a.scalar and np.shares_memory(o.value, a.value):
                    raise DispatchError(f"{where}: out= array {o.name!r} shares memory with input {a.name!r}; outputs "
                                        "are written, never read, so an update in place is not defined. Fix: pass a "
                                        f"distinct array, or assign the result: {a.name}[...] = {self.name}(...).")
        for i, o in enumerate(outs):
            for p in outs[i + 1:]:
                if np.shares_memory(o.value, p.value):
                    raise DispatchError(f"{where}: out= arrays {o.name!r} and {p.name!r} share memory. Fix: pass "
                                        "distinct arrays.")
        if n == 0:
            results = [np.empty(shape, dt.storage) for _, dt in self.outputs]
        else:
            # outputs take the inputs' length; with scalar inputs only (out= given), say it
            sizes = None if any(not a.scalar for a in ins) else {name: n for name, _ in self.outputs}
            results = [r.reshape(shape) for r in be.dispatch(program, flat, self.config, sizes=sizes)]
        for o, r in zip(outs, results):
            np.copyto(o.value, r)
        return results

    def _run_device(self, be: Backend, program: ir.Program, ins: list[_Arg], outs: list[_Arg], kind: str,
                    shape: tuple, n: int, where: str) -> list:
        if be.name == "reference":
            raise DispatchError(f"{where}: the reference backend runs on the CPU and takes host arrays, but the "
                                f"arrays are {_KIND_NAMES[kind]} arrays. Fix: use backend='cuda' (the default on a "
                                "GPU machine), or bring the data to the host (x.copy_to_host(), cupy.asnumpy(x), "
                                "x.cpu().numpy()).")
        bufs = []
        for a, (_, dt) in zip(ins, self.inputs):
            if a.kind is None:  # a host scalar: one element uploaded once and kept
                host = self._scalar_host(a, dt, where)
                bufs.append(self._scalar_device(be, host) if n else None)
            else:
                self._check_dtype(a, dt, _device_dtype(a, where), "input", where)
                bufs.append(a.value)
        results = []
        for k, (name, dt) in enumerate(self.outputs):
            if outs:
                o = outs[k]
                self._check_dtype(o, dt, _device_dtype(o, where), "out= array", where)
                results.append(o.value)
            else:
                results.append(_allocate(be, kind, shape, n, dt, ins, where))
        if n:
            try:
                be.dispatch_resident(program, bufs + results, self.config)
            except NotImplementedError:
                raise DispatchError(f"{where}: the {be.name} backend has no resident dispatch for device arrays. "
                                    "Fix: use backend='cuda', or pass host arrays.") from None
            _order_after(be, kind, ins)
        return results

    def _scalar_device(self, be: Backend, host: np.ndarray):
        key = (id(be), host.dtype.str, host.tobytes())
        hit = self._scalars.get(key)
        if hit is not None and hit[0]() is be:
            return hit[1]
        buf = be.upload(host)
        if len(self._scalars) >= 64:
            self._scalars.clear()
        self._scalars[key] = (weakref.ref(be), buf)
        return buf

    def __repr__(self) -> str:
        op = self.operation if isinstance(self.operation, str) else getattr(self.operation, "__name__", "function")
        return (f"<elementwise {self.name}({_signature(self.inputs)}) -> ({_signature(self.outputs)}): "
                f"{clip(str(op), 80)}>")

    # ---- copies and pickles: a kernel is its description (declarations, operation, name,
    # workgroup), made again from it, so a copy never shares the lock and caches (uploaded scalars)
    def _description(self) -> tuple:
        return ({n: dt.value for n, dt in self.inputs}, {n: dt.value for n, dt in self.outputs}, self.operation,
                self.name)

    def __copy__(self) -> "Elementwise":
        return type(self)(*self._description(), workgroup=self.workgroup)

    def __deepcopy__(self, memo: dict) -> "Elementwise":
        return self.__copy__()  # the description holds nothing mutable; a function stays itself, as deepcopy keeps it

    def __reduce_ex__(self, protocol):
        import pickle

        if not isinstance(self.operation, str):
            try:
                pickle.dumps(self.operation, protocol)
            except Exception as e:  # pickle says PicklingError, AttributeError or TypeError, by Python version
                raise DispatchError(
                    f"elementwise {self.name!r} cannot be pickled: its operation, the function "
                    f"{getattr(self.operation, '__qualname__', type(self.operation).__name__)!r}, cannot "
                    f"({type(e).__name__}: {clip(str(e), 120)}). Fix: pass the operation as a string, or define "
                    "the function at the top level of a module (pickle stores a function by its importable "
                    "name: a lambda or a function made inside another has none).") from None
        return functools.partial(type(self), workgroup=self.workgroup), self._description()


def _scalar_fix(v, dt: DataType) -> str:
    """What to pass for a scalar `v` that is not exactly a `dt` value: code that runs and gives a
    `dt` value, never one NumPy refuses (np.uint8(256)) or rounds to inf (np.float32(1e300))."""
    if dt.is_bool:
        return "pass True or False (or the integers 0 and 1)"
    if isinstance(v, (bool, np.bool_)):
        return f"pass the number {int(v)} rather than the bool {v}"
    number = isinstance(v, (*INTEGERS, float, np.floating))
    if dt.is_int:
        whole = isinstance(v, INTEGERS)  # np.isfinite cannot take ints past 64 bits
        rounding = (" (round or truncate it first, as you mean to)" if number and (whole or np.isfinite(v))
                    and dt.min <= v <= dt.max else "")
        return f"pass a whole number from {dt.min} to {dt.max}, {dt}'s range{rounding}"
    try:
        nearest = ir.lit(v, dt).value if number else None
    except IRValidationError:  # past the type's largest finite
        nearest = None
    if nearest is None or not np.isfinite(nearest):
        return f"pass a number of magnitude at most {float(dt.max):.6g}, {dt}'s largest"
    return f"pass its nearest {dt} value, np.{_numpy_name(dt)}({nearest!r})"


def _user_names(text: str, names: Mapping[str, str]) -> str:
    """`text` with the IR variables the kernel made (v_x, t_acc, u_cebb) named as the user named them."""
    return re.sub(r"\b[vtou]_\w+", lambda m: names.get(m.group(0), m.group(0)), text)


def _text_fix(facts, hint: str) -> str:
    """A validator's fix said in the operation's own text, where it names the IR's functions."""
    kind = facts.get("problem") if facts else None
    t = facts.get("dtype") if facts else None
    if kind == "literal" and t is not None:
        if t.is_bool:
            return "write True or False for a bool, or compare to make one (x != 0)"
        if t.is_float:
            return (f"write a literal that {t} holds (at most {t.max!r} in size), or declare a wider float type (a "
                    "temporary takes its type where it is assigned: t = f64(...))")
        if isinstance(facts.get("value"), float):
            return (f"write an integer literal ({t} holds {t.min} to {t.max}), or compute in a float type: declare "
                    "one, or convert with f64(...) and back with the output's type")
        return (f"write a literal that {t} holds ({t.min} to {t.max}), or declare a wider type (a temporary takes "
                "its type where it is assigned: t = i64(...))")
    if kind == "literal cast":
        text, how = facts["text"], facts["how"]
        text = "nan" if text == "NaN" else text  # the operation's name for it
        whole = re.fullmatch(r"-?\d+", text)
        if whole and not DataType.I64.min <= int(text) <= DataType.U64.max:
            return f"write a literal that {t} holds ({t.min} to {t.max}); no integer type holds {text}"
        typed = "f64" if not whole else "u64" if int(text) > DataType.I64.max else "i64"
        return (f"write a literal that {t} holds, or {'wrap' if how == 'wrap to' else 'saturate'} on purpose by "
                f"converting a typed value: {t}({typed}({text}))")
    hint = hint.replace("ir.cast it to", "convert it by a type's name (i32(x), f32(x)) to")
    hint = re.sub(r"\bmath\.(inf|nan)\b", r"\1", hint)  # the operation's names for them
    hint = hint.replace("ir.cast one operand", "convert one operand by a type's name (f32(x))")
    hint = re.sub(r"\bir\.(\w+)\(", lambda m: m.group(1).rstrip("_") + "(" if m.group(1).rstrip("_") in FUNCTIONS
                  else m.group(0), hint)  # the IR's functions as the operation's text calls them
    return re.sub(r"ir\.let\('([^']+)', (\w+\([^()]*\))\)", r"\1 = \2", hint)  # as the text declares one


def _signature(params: list[tuple[str, DataType]]) -> str:
    return ", ".join(f"{dt} {n}" for n, dt in params)


def _backend(backend, where: str) -> Backend:
    if backend is None or isinstance(backend, str):
        return get_backend(backend)
    if isinstance(backend, Backend):
        return backend
    raise DispatchError(f"{where}: backend={shown(backend, 60)} is not a backend. Fix: pass a name ('cuda', "
                        "'reference'), a Backend from vyre_numba.get_backend(...), or None for the best one here.")


def _allocate(be: Backend, kind: str, shape: tuple, n: int, dt: DataType, ins: list[_Arg], where: str):
    """An output array of `kind` (numba arrays for numba and other CUDA arrays)."""
    storage = dt.storage
    if kind == "cupy":
        import cupy

        return cupy.empty(shape, dtype=storage)
    if kind == "torch":
        import torch

        device = next(a.value.device for a in ins if a.kind == "torch")
        try:
            tdt = torch.from_numpy(np.empty(0, storage)).dtype
            t = torch.empty(shape, dtype=tdt, device=device)
            t.__cuda_array_interface__  # noqa: B018 - PyTorch refuses some dtypes here
        except (TypeError, RuntimeError) as e:
            raise DispatchError(f"{where}: PyTorch cannot hold a {dt} output as a CUDA array ({e}). Fix: pass numba or "
                                "CuPy arrays, or out= arrays of a library that can.") from None
        return t
    buf = be.empty(n, storage)
    return buf if len(shape) == 1 else buf.reshape(shape)


def _order_after(be: Backend, kind: str, ins: list[_Arg]) -> None:
    """Make CuPy's or PyTorch's current stream see the results: the backend's stream is ordered before
    the legacy default stream, so only another current stream needs the kernel to finish first."""
    stream = 0
    if kind == "cupy":
        import cupy

        stream = cupy.cuda.get_current_stream().ptr
    elif kind == "torch":
        import torch

        device = next(a.value.device for a in ins if a.kind == "torch")
        stream = torch.cuda.current_stream(device).cuda_stream
    if stream not in (0, 1):
        be.synchronize()


def elementwise(inputs: str | Sequence[str] | Mapping[str, Any], outputs: str | Sequence[str] | Mapping[str, Any],
                operation: Operation, name: str = "elementwise", *, workgroup: int = 256) -> Elementwise:
    """An elementwise kernel: `inputs` and `outputs` declared as "type name, ..." (vyre types or NumPy
    names, e.g. "f32 a, f32 x, f32 y"), `operation` a Python-syntax string over them (never
    evaluated: parsed into the IR) or a function of one IR expression per input.

        saxpy = elementwise("f32 a, f32 x, f32 y", "f32 out", "a * x + y", name="saxpy")
        out = saxpy(np.float32(2), x, y)                      # NumPy in, NumPy out
        d = saxpy(np.float32(2), cuda.to_device(x), cuda.to_device(y))   # stays on the GPU
        s, d = elementwise("i32 a, i32 b", "i32 s, i32 d", "a + b, a - b")(a, b)
        k = elementwise("f32 x", "f32 y", lambda x: ir.select(x > 0, x, 0.0))

    See the module docstring (`help(vyre_numba.elementwise)`) for the operation language, scalars,
    array kinds, out= and backend=. Mistakes in the declarations or the operation raise
    IRValidationError here; mistakes in a call raise DispatchError there."""
    return Elementwise(inputs, outputs, operation, name, workgroup=workgroup)


elementwise.FUNCTIONS = FUNCTIONS  # type: ignore[attr-defined]
elementwise.Elementwise = Elementwise  # type: ignore[attr-defined]
elementwise.__doc__ = f"{elementwise.__doc__}\n\n{__doc__}"

check_calls(globals(), ["Elementwise"])
