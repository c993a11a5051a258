"""The program table: vyre programs covering every operation and every type, with inputs that
include edge cases and expected outputs computed independently of any backend.

Expectations follow docs/semantics.md and are computed here in plain Python/NumPy: integer
operations on Python ints (arbitrary precision) then wrapped, float operations exactly with
`fractions.Fraction` and an explicit round-to-nearest-even to each format (`round_frac`), bf16
handled as raw uint16 bits. Nothing here calls an interpreter.

    from tests.program_table import CASES, compare, run_case
    for case in CASES:
        run_case(backend, case)          # backend.dispatch + compare

Every backend must reproduce the table: bit-exact where `Case.ulp == 0` (NaN equals NaN whatever
its sign or payload), within `ulp` ULPs otherwise (non-finite values still exact).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable, Sequence

import numpy as np

from vyre_numba import ir
from vyre_numba.config import DispatchConfig
from vyre_numba.ir import DataType as D

INTS = (D.U8, D.U16, D.U32, D.U64, D.I8, D.I16, D.I32, D.I64)
FLOATS = (D.F16, D.BF16, D.F32, D.F64)
NUMS = INTS + FLOATS
ALL_TYPES = NUMS + (D.BOOL,)
ATOMIC_TYPES = (D.U32, D.I32, D.U64, D.I64)
WG = 64  # workgroup size of the elementwise programs


# ==== the case record and the comparison ======================================================

@dataclass
class Case:
    """One program with its inputs and the outputs it must produce (binding order)."""

    id: str
    program: ir.Program
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    ulp: int = 0
    config: DispatchConfig | None = None
    sizes: dict | None = None
    unordered: frozenset = field(default_factory=frozenset)  # outputs compared as multisets
    note: str = ""


_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _bits(dt: D, arr: np.ndarray) -> np.ndarray:
    """Bit patterns of a host array of `dt` as unsigned ints (bf16 and bool already are)."""
    arr = np.ascontiguousarray(arr)
    if dt is D.BF16 or dt is D.BOOL:
        return arr.astype(np.uint64)
    return arr.view(_UINT[dt.bits]).astype(np.uint64)


def _float_parts(dt: D):
    """(exponent mask, mantissa mask, sign bit) of a float format's bit pattern."""
    return {D.F16: (0x7C00, 0x3FF, 15), D.BF16: (0x7F80, 0x7F, 15),
            D.F32: (0x7F800000, 0x7FFFFF, 31), D.F64: (0x7FF0000000000000, (1 << 52) - 1, 63)}[dt]


def _isnan_bits(dt: D, b: np.ndarray) -> np.ndarray:
    e, m, _ = _float_parts(dt)
    return ((b & np.uint64(e)) == np.uint64(e)) & ((b & np.uint64(m)) != 0)


def _isfinite_bits(dt: D, b: np.ndarray) -> np.ndarray:
    e, _, _ = _float_parts(dt)
    return (b & np.uint64(e)) != np.uint64(e)


def _ordered(dt: D, b: np.ndarray) -> np.ndarray:
    """Bit patterns mapped to integers ordered like the float values (+0 and -0 both 0)."""
    s = dt.bits - 1
    bi = b.astype(object)
    out = np.empty(len(b), dtype=object)
    for k, v in enumerate(bi):
        v = int(v)
        out[k] = -(v & ((1 << s) - 1)) if v >> s else v
    return out


def _show(dt: D, bits: int) -> str:
    width = max(dt.bits // 4, 1) if dt is not D.BOOL else 8
    if dt.is_float:
        return f"{bits_value(dt, bits)!r} (0x{bits:0{width}x})"
    if dt is D.BOOL:
        return f"{bits} (0x{bits:08x})"
    return f"{ir.wrap_int(bits, dt)} (0x{bits:0{width}x})"


def compare(case: Case, outputs: Sequence[np.ndarray]) -> None:
    """Raise AssertionError describing the first mismatches if `outputs` differ from the case's."""
    decls = case.program.outputs
    if len(outputs) != len(case.expected):
        raise AssertionError(f"{case.id}: got {len(outputs)} outputs, expected {len(case.expected)} "
                             f"({[b.name for b in decls]})")
    problems = []
    for decl, got, want in zip(decls, outputs, case.expected):
        dt = decl.dtype
        got = np.asarray(got)
        where = f"{case.id}: output {decl.name!r} ({dt})"
        if got.dtype != want.dtype:
            problems.append(f"{where}: dtype {got.dtype}, expected {want.dtype}")
            continue
        if got.shape != want.shape:
            problems.append(f"{where}: shape {got.shape}, expected {want.shape}")
            continue
        g, w = _bits(dt, got.reshape(-1)), _bits(dt, want.reshape(-1))
        if decl.name in case.unordered:
            g, w = np.sort(g), np.sort(w)
        if dt.is_float:
            gn, wn = _isnan_bits(dt, g), _isnan_bits(dt, w)
            same = (g == w) | (gn & wn)
            if case.ulp:
                fin = _isfinite_bits(dt, g) & _isfinite_bits(dt, w)
                close = np.zeros(len(g), dtype=bool)
                if fin.any():
                    d = np.abs(_ordered(dt, g[fin]) - _ordered(dt, w[fin]))
                    close[fin] = np.array([int(x) <= case.ulp for x in d], dtype=bool)
                same |= close
        else:
            same = g == w
        bad = np.flatnonzero(~same)
        if len(bad):
            lines = [f"{where}: {len(bad)} of {len(g)} elements differ"
                     f"{' (multiset compare, sorted)' if decl.name in case.unordered else ''}"
                     f"{f' (tolerance {case.ulp} ulp)' if case.ulp else ''}:"]
            for k in bad[:8]:
                k = int(k)
                ins = ""
                if decl.name not in case.unordered:
                    parts = []
                    for b, arr in zip(case.program.inputs, case.inputs):
                        if k < arr.size:
                            parts.append(f"{b.name}={_show(b.dtype, int(_bits(b.dtype, arr.reshape(-1)[k:k + 1])[0]))}")
                    ins = f"   [inputs at {k}: {', '.join(parts)}]" if parts else ""
                lines.append(f"    [{k}] got {_show(dt, int(g[k]))}, expected {_show(dt, int(w[k]))}{ins}")
            problems.append("\n".join(lines))
    if problems:
        raise AssertionError("\n".join(problems))


def run_case(backend, case: Case) -> list[np.ndarray]:
    """Dispatch `case` on `backend` and compare; returns the outputs."""
    inputs = [a.copy() for a in case.inputs]
    outs = backend.dispatch(case.program, inputs, case.config, sizes=case.sizes)
    for a, b in zip(inputs, case.inputs):
        assert np.array_equal(_bits_any(a), _bits_any(b)), f"{case.id}: dispatch modified an input"
    compare(case, outs)
    return outs


def _bits_any(a: np.ndarray) -> np.ndarray:
    return a.view(_UINT[a.dtype.itemsize * 8]) if a.dtype.kind == "f" else a


# ==== exact float arithmetic ====================================================================

_FMT = {D.F16: (11, -14, 15), D.BF16: (8, -126, 127), D.F32: (24, -126, 127), D.F64: (53, -1022, 1023)}
INF, NAN = math.inf, math.nan


def round_frac(q: Fraction, dt: D) -> float:
    """The exact rational `q` (nonzero) rounded to nearest even in format `dt`, as a Python float
    (subnormals kept, overflow to +-inf)."""
    p, emin, emax = _FMT[dt]
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    n, d = q.numerator, q.denominator
    e = n.bit_length() - d.bit_length()
    if (n << max(0, -e)) < (d << max(0, e)):
        e -= 1
    if e > emax:
        return sign * INF
    e = max(e, emin)
    shift = e - p + 1
    num, den = (n, d << shift) if shift >= 0 else (n << -shift, d)
    m, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and m & 1):
        m += 1
    if m >= 1 << (emax + 1 - shift):
        return sign * INF
    return sign * math.ldexp(m, shift)


def rt(dt: D, x: float) -> float:
    """Python float `x` rounded to float type `dt` (NaN, inf and signed zeros kept)."""
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    return round_frac(Fraction(x), dt)


def bits_value(dt: D, bits: int) -> float:
    if dt is D.BF16:
        return float(np.array([bits << 16], dtype=np.uint32).view(np.float32)[0])
    return float(np.array([bits], dtype=_UINT[dt.bits]).view(dt.storage)[0])


def values(dt: D, arr: np.ndarray) -> list:
    """Python values of a host array: ints, floats, or bools (bool words: != 0)."""
    arr = np.asarray(arr).reshape(-1)
    if dt is D.BOOL:
        return [int(x) != 0 for x in arr]
    if dt.is_int:
        return [int(x) for x in arr]
    if dt is D.BF16:
        return [float(x) for x in (arr.astype(np.uint32) << 16).view(np.float32)]
    return [float(x) for x in arr]


def array(dt: D, vals: Iterable) -> np.ndarray:
    """A host array of `dt` from Python values (floats must already be representable in dt)."""
    vals = list(vals)
    if dt is D.BOOL:
        return np.array([1 if v else 0 for v in vals], dtype=np.uint32)
    if dt.is_int:
        return np.array([ir.wrap_int(v, dt) for v in vals], dtype=dt.storage)
    if dt is D.BF16:
        f = np.array(vals, dtype=np.float64).astype(np.float32)
        out = (f.view(np.uint32) >> 16).astype(np.uint16)
        out[np.isnan(f)] = 0x7FC0
        return out
    with np.errstate(over="ignore"):
        return np.array(vals, dtype=np.float64).astype(dt.storage)


def f_add(dt, x, y):
    if not (math.isfinite(x) and math.isfinite(y)):
        return x + y
    q = Fraction(x) + Fraction(y)
    return x + y if q == 0 else round_frac(q, dt)


def f_sub(dt, x, y):
    return f_add(dt, x, -y)


def f_mul(dt, x, y):
    if not (math.isfinite(x) and math.isfinite(y)):
        return x * y
    q = Fraction(x) * Fraction(y)
    return x * y if q == 0 else round_frac(q, dt)


def f_div(dt, x, y):
    if math.isnan(x) or math.isnan(y):
        return NAN
    if y == 0:
        if x == 0:
            return NAN
        return math.copysign(INF, math.copysign(1, x) * math.copysign(1, y))
    if not (math.isfinite(x) and math.isfinite(y)):
        return x / y
    if x == 0:
        return x / y
    return round_frac(Fraction(x) / Fraction(y), dt)


def f_sqrt(dt, x):
    if math.isnan(x) or x < 0:
        return NAN
    if x == 0 or math.isinf(x):
        return x
    return rt(dt, math.sqrt(x))  # f64 sqrt is correctly rounded; re-rounding to p<=24 is innocuous


def f_fma(dt, a, b, c):
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return NAN
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return NAN
        pinf = math.copysign(INF, math.copysign(1, a) * math.copysign(1, b))
        if math.isinf(c) and c != pinf:
            return NAN
        return pinf
    if math.isinf(c):
        return c
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:
        prod_zero_neg = (a == 0 or b == 0) and (math.copysign(1, a) * math.copysign(1, b) < 0)
        if a * b == 0 and (a == 0 or b == 0) and c == 0:
            return -0.0 if (prod_zero_neg and math.copysign(1, c) < 0) else 0.0
        return 0.0
    return round_frac(q, dt)


def f_min(dt, x, y):
    if math.isnan(x):
        return y
    if math.isnan(y):
        return x
    if x == 0 and y == 0:
        return -0.0 if (math.copysign(1, x) < 0 or math.copysign(1, y) < 0) else 0.0
    return x if x < y else y


def f_max(dt, x, y):
    if math.isnan(x):
        return y
    if math.isnan(y):
        return x
    if x == 0 and y == 0:
        return 0.0 if (math.copysign(1, x) > 0 or math.copysign(1, y) > 0) else -0.0
    return x if x > y else y


def _int_valued(fn):
    def op(dt, x):
        if not math.isfinite(x):
            return x
        r = float(fn(x))
        return math.copysign(0.0, x) if r == 0 else r
    return op


def _np1(fn):
    def op(dt, x):
        with np.errstate(all="ignore"):
            r = float(fn(np.float64(x)))
        return rt(dt, r)
    return op


def f_sign(dt, x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else x)


FLOAT_BIN = {
    "add": f_add, "sub": f_sub, "mul": f_mul, "div": f_div, "min": f_min, "max": f_max,
    "absdiff": lambda dt, x, y: abs(f_sub(dt, x, y)),
}
FLOAT_UN = {
    "neg": lambda dt, x: -x, "abs": lambda dt, x: abs(x), "sign": f_sign,
    "sqrt": f_sqrt,
    "floor": _int_valued(math.floor), "ceil": _int_valued(math.ceil),
    "trunc": _int_valued(math.trunc), "round": _int_valued(round),  # Python round: half to even
    "recip": lambda dt, x: f_div(dt, 1.0, x),
    "rsqrt": lambda dt, x: f_div(dt, 1.0, f_sqrt(dt, x)),
    "exp": _np1(np.exp), "exp2": _np1(np.exp2), "log": _np1(np.log), "log2": _np1(np.log2),
    "sin": _np1(np.sin), "cos": _np1(np.cos), "tan": _np1(np.tan),
}
TRANSCENDENTAL = ("exp", "exp2", "log", "log2", "sin", "cos", "tan")
FLOAT_PRED = {"isnan": lambda x: math.isnan(x), "isinf": lambda x: math.isinf(x),
              "isfinite": lambda x: math.isfinite(x)}
CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
       "gt": lambda a, b: a > b, "le": lambda a, b: a <= b, "ge": lambda a, b: a >= b}


# ==== exact integer arithmetic ==================================================================

def _w(dt, v):
    return ir.wrap_int(v, dt)


def _u(dt, v):
    """The bit pattern of `v` as an unsigned int of dt's width."""
    return v & ((1 << dt.bits) - 1)


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _rot(dt, a, s, left):
    n = dt.bits
    s &= n - 1
    u = _u(dt, a)
    if s == 0:
        return a
    r = ((u << s) | (u >> (n - s))) if left else ((u >> s) | (u << (n - s)))
    return _w(dt, r)


INT_BIN: dict[str, Callable] = {
    "add": lambda dt, a, b: _w(dt, a + b), "sub": lambda dt, a, b: _w(dt, a - b),
    "mul": lambda dt, a, b: _w(dt, a * b),
    "div": lambda dt, a, b: 0 if b == 0 else _w(dt, _tdiv(a, b)),
    "mod": lambda dt, a, b: 0 if b == 0 else _w(dt, a - b * _tdiv(a, b)),
    "min": lambda dt, a, b: min(a, b), "max": lambda dt, a, b: max(a, b),
    "absdiff": lambda dt, a, b: _w(dt, max(a, b) - min(a, b)),
    "wrapping_add": lambda dt, a, b: _w(dt, a + b), "wrapping_sub": lambda dt, a, b: _w(dt, a - b),
    "saturating_add": lambda dt, a, b: min(max(a + b, dt.min), dt.max),
    "saturating_sub": lambda dt, a, b: min(max(a - b, dt.min), dt.max),
    "mul_high": lambda dt, a, b: _w(dt, (a * b) >> dt.bits),
    "bitand": lambda dt, a, b: _w(dt, a & b), "bitor": lambda dt, a, b: _w(dt, a | b),
    "bitxor": lambda dt, a, b: _w(dt, a ^ b),
    "shl": lambda dt, a, b: _w(dt, a << (b & (dt.bits - 1))),
    "shr": lambda dt, a, b: _w(dt, a >> (b & (dt.bits - 1))),  # Python >> is arithmetic on signed
    "rotl": lambda dt, a, b: _rot(dt, a, b, True), "rotr": lambda dt, a, b: _rot(dt, a, b, False),
}


def _clz(dt, a):
    return dt.bits - _u(dt, a).bit_length()


def _ctz(dt, a):
    u = _u(dt, a)
    return dt.bits if u == 0 else (u & -u).bit_length() - 1


def _rev(dt, a):
    u = _u(dt, a)
    return _w(dt, int(format(u, f"0{dt.bits}b")[::-1], 2))


INT_UN: dict[str, Callable] = {
    "bitnot": lambda dt, a: _w(dt, ~a), "popcount": lambda dt, a: bin(_u(dt, a)).count("1"),
    "clz": _clz, "ctz": _ctz, "reverse_bits": _rev,
    "neg": lambda dt, a: _w(dt, -a), "abs": lambda dt, a: _w(dt, abs(a)),
    "sign": lambda dt, a: (a > 0) - (a < 0),
}


# ==== casts =====================================================================================

def cast_value(src: D, dst: D, v):
    """docs/semantics.md `Casts`, on Python values."""
    if dst is D.BOOL:
        return bool(v) if src is D.BOOL else (v != 0 or (src.is_float and math.isnan(v)))
    if src is D.BOOL:
        v = 1 if v else 0
        return v if dst.is_int else float(v)
    if src.is_int and dst.is_int:
        return _w(dst, v)
    if src.is_int:  # -> float
        if v == 0:
            return 0.0
        if dst is D.BF16:
            return rt(D.BF16, round_frac(Fraction(v), D.F32))
        return round_frac(Fraction(v), dst)
    if dst.is_int:  # float -> int
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return dst.max if v > 0 else dst.min
        return min(max(math.trunc(v), dst.min), dst.max)
    if src is D.F64 and dst is D.BF16:
        return rt(D.BF16, rt(D.F32, v))
    return rt(dst, v)


# ==== input values ==============================================================================

def _rng(tag: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(tag.encode()))


def _dedupe(xs):
    seen, out = set(), []
    for x in xs:
        key = ("nan",) if isinstance(x, float) and math.isnan(x) else (x, math.copysign(1, x) if isinstance(x, float) else 0)
        if key not in seen:
            seen.add(key)
            out.append(x)
    return out


def int_edges(dt: D, small: bool = False) -> list[int]:
    n = dt.bits
    base = [0, 1, 2, 3, n - 1, n, n + 1, 1 << (n // 2), dt.max, dt.max - 1, dt.min, dt.min + 1,
            -1, -2, int("01" * (n // 2), 2), 100, -7, 1 << (n - 1)]
    if not small:
        base += [1 << (n - 2), 0xAA, 16842753, 65504, 65519, 65520, 2 ** 53 + 1, 2 ** 63 - 1024,
                 2 ** 24 + 1, 127, 128, 255, 256, -128, -129, 32767, 32768, -32769, 2 ** 31, 2 ** 32 + 3,
                 0x0123456789ABCDEF]
    return _dedupe(_w(dt, v) for v in base)


def int_random(dt: D, count: int, tag: str) -> list[int]:
    r = _rng(tag)
    raw = r.integers(0, 1 << 63, size=count, dtype=np.int64).tolist()
    hi = r.integers(0, 2, size=count).tolist()
    return [_w(dt, v | (h << 63)) for v, h in zip(raw, hi)]


def float_edges(dt: D, small: bool = False) -> list[float]:
    p, emin, emax = _FMT[dt]
    mx = dt.max
    min_norm = math.ldexp(1.0, emin)
    min_sub = math.ldexp(1.0, emin - p + 1)
    base = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, -2.5, 3.0, mx, -mx, min_norm, min_sub, -min_sub,
            INF, -INF, NAN, 1 / 3, math.pi, 2.0 ** (p - 1) + 1]
    if not small:
        base += [-0.5, 2.5, -1.5, 3.5, -3.5, 0.49999999999, 1.0000001, 2.0 ** p, 2.0 ** p + 2,
                 -(2.0 ** (p + 1)), min_norm - min_sub, -min_norm, 1e-3, 1e4, -7.25, 100.5, 1024.0,
                 65504.0, 65520.0, 1e30, -1e30, 2.0 ** 31, 2.0 ** 63, 2.0 ** 64, -2.0 ** 63,
                 2.0 ** 31 - 64, 127.5, 128.0, -128.5, -129.0, 255.5, 256.0, 32767.5, 4294967295.0]
    return _dedupe(rt(dt, x) for x in base)


def float_random(dt: D, count: int, tag: str, lo_exp: int = -8, hi_exp: int = 8) -> list[float]:
    r = _rng(tag)
    m = r.uniform(1.0, 2.0, size=count) * np.where(r.integers(0, 2, size=count) == 1, -1.0, 1.0)
    e = r.integers(lo_exp, hi_exp + 1, size=count)
    return [rt(dt, float(np.ldexp(a, b))) for a, b in zip(m, e)]


def edges(dt: D, small: bool = False) -> list:
    if dt is D.BOOL:
        return [0, 1, 2, 0xFFFFFFFF, 0x80000000] if not small else [0, 1, 0xFFFFFFFF]
    return int_edges(dt, small) if dt.is_int else float_edges(dt, small)


def randoms(dt: D, count: int, tag: str) -> list:
    if dt is D.BOOL:
        return _rng(tag).integers(0, 4, size=count).tolist()
    return int_random(dt, count, tag) if dt.is_int else float_random(dt, count, tag)


def raw_array(dt: D, vals: list) -> np.ndarray:
    """Host array of input values; for bool the values are raw words."""
    if dt is D.BOOL:
        return np.array(vals, dtype=np.uint32)
    return array(dt, vals)


def pairs(dt: D, tag: str, extra: int = 40, small: bool = True) -> tuple[np.ndarray, np.ndarray]:
    e = edges(dt, small=small)
    a = [x for x in e for _ in e] + randoms(dt, extra, tag + "a")
    b = [y for _ in e for y in e] + randoms(dt, extra, tag + "b")
    return raw_array(dt, a), raw_array(dt, b)


# ==== program builders ==========================================================================

B = ir.BufferDecl
i_ = ir.var("i")


def _name(case_id: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in case_id)


def elementwise(case_id: str, in_types: Sequence[D], outs: Sequence[tuple[str, D, Callable]],
                wg: int = WG) -> ir.Program:
    """out_k[i] = f_k(a0[i], a1[i], ...) for i < buf_len(out_k)."""
    bufs = [B.read(f"a{k}", k, t) for k, t in enumerate(in_types)]
    body = [ir.let("i", ir.gid(0))]
    loads = [ir.load(f"a{k}", i_) for k in range(len(in_types))]
    for k, (name, t, fn) in enumerate(outs):
        bufs.append(B.output(name, len(in_types) + k, t))
        body.append(ir.if_(i_ < ir.buf_len(name), [ir.store(name, i_, fn(*loads))]))
    return ir.Program(bufs, wg, body, name=_name(case_id))


def _apply(fn, dts, arrays):
    """Elementwise application of fn(*python_values) over input arrays."""
    cols = [values(dt, a) for dt, a in zip(dts, arrays)]
    return [fn(*xs) for xs in zip(*cols)]


CASES: list[Case] = []


def add(case: Case) -> None:
    CASES.append(case)


# ---- binary operations ------------------------------------------------------------------------

def _bin_types(op: str) -> tuple[D, ...]:
    if op in ir.LOGIC_BINOPS:
        return (D.BOOL,)
    if op in ir.INT_BINOPS or op == "mod":
        return INTS
    return NUMS


def build_binops():
    for op in ir.ARITH_BINOPS + ir.INT_BINOPS:
        for dt in _bin_types(op):
            cid = f"bin_{op}_{dt}"
            a, b = pairs(dt, cid)
            if dt.is_int:
                fn = lambda x, y, op=op, dt=dt: INT_BIN[op](dt, x, y)
            else:
                fn = lambda x, y, op=op, dt=dt: FLOAT_BIN[op](dt, x, y)
            prog = elementwise(cid, [dt, dt], [("out", dt, lambda x, y, op=op: ir.binary(op, x, y))])
            add(Case(cid, prog, [a, b], [array(dt, _apply(fn, [dt, dt], [a, b]))]))
    # comparisons: one program per type, one output per comparison
    for dt in NUMS + (D.BOOL,):
        cid = f"cmp_{dt}"
        a, b = pairs(dt, cid)
        ops = ("eq", "ne") if dt is D.BOOL else ir.CMP_BINOPS
        outs = [(op, D.BOOL, lambda x, y, op=op: ir.binary(op, x, y)) for op in ops]
        exp = [array(D.BOOL, _apply(CMP[op], [dt, dt], [a, b])) for op in ops]
        add(Case(cid, elementwise(cid, [dt, dt], outs), [a, b], exp))
    cid = "logic_bool"
    a, b = pairs(D.BOOL, cid, small=False)
    outs = [("and_", D.BOOL, ir.logical_and), ("or_", D.BOOL, ir.logical_or),
            ("not_a", D.BOOL, lambda x, y: ir.not_(x))]
    exp = [array(D.BOOL, _apply(lambda x, y: x and y, [D.BOOL] * 2, [a, b])),
           array(D.BOOL, _apply(lambda x, y: x or y, [D.BOOL] * 2, [a, b])),
           array(D.BOOL, _apply(lambda x, y: not x, [D.BOOL] * 2, [a, b]))]
    add(Case(cid, elementwise(cid, [D.BOOL, D.BOOL], outs), [a, b], exp))


# ---- unary operations ---------------------------------------------------------------------------

def _unary_inputs(dt: D, op: str, tag: str) -> np.ndarray:
    if dt.is_int:
        vals = edges(dt) + int_random(dt, 100, tag)
    elif op in TRANSCENDENTAL:
        p, emin, _ = _FMT[dt]
        vals = [0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.5, -0.5, 2.0, math.ldexp(1.0, emin - p + 1),
                -math.ldexp(1.0, emin - p + 1), math.ldexp(1.0, emin)]
        if op in ("log", "log2"):
            vals += [dt.max, -dt.max, 10.0, 0.1, 1024.0, 3.0]
            vals += [abs(v) for v in float_random(dt, 100, tag, -12 if dt is D.F16 else -40, 14 if dt is D.F16 else 40)]
            vals += float_random(dt, 20, tag + "n", -4, 4)
        elif op in ("exp", "exp2"):
            vals += [dt.max, -dt.max, 3.5, -7.25]
            vals += float_random(dt, 120, tag, -12, 2)
        else:  # sin cos tan
            vals += [dt.max, -dt.max, math.pi, -math.pi / 2, 100.5, 1e4, 3.5]
            vals += float_random(dt, 100, tag, -12, 6) + float_random(dt, 20, tag + "b", 7, 14 if dt is D.F16 else 30)
    else:
        vals = edges(dt) + [k / 2 for k in range(-9, 10)] + [-(k / 2) for k in range(0, 10)]
        wide = 14 if dt is D.F16 else 30
        vals += float_random(dt, 80, tag, -wide, wide) + float_random(dt, 40, tag + "s", -3, 3)
    if dt.is_float:
        vals = [rt(dt, v) for v in vals]
    return raw_array(dt, _dedupe(vals))


def build_unops():
    for op in ir.INT_UNOPS + ir.NUM_UNOPS:
        for dt in (INTS if op in ir.INT_UNOPS else NUMS):
            cid = f"un_{op}_{dt}"
            a = _unary_inputs(dt, op, cid)
            odt = D.U32 if op in ("popcount", "clz", "ctz") else dt
            fn = (lambda x, op=op, dt=dt: INT_UN[op](dt, x)) if dt.is_int else \
                (lambda x, op=op, dt=dt: FLOAT_UN[op](dt, x))
            prog = elementwise(cid, [dt], [("out", odt, lambda x, op=op: ir.unary(op, x))])
            add(Case(cid, prog, [a], [array(odt, _apply(fn, [dt], [a]))]))
    for op in ir.FLOAT_UNOPS:
        for dt in FLOATS:
            cid = f"un_{op}_{dt}"
            a = _unary_inputs(dt, op, cid)
            fn = lambda x, op=op, dt=dt: FLOAT_UN[op](dt, x)
            ulp = (1 if dt in (D.F16, D.BF16) else 4) if op in TRANSCENDENTAL else 0
            prog = elementwise(cid, [dt], [("out", dt, lambda x, op=op: ir.unary(op, x))])
            add(Case(cid, prog, [a], [array(dt, _apply(fn, [dt], [a]))], ulp=ulp))
    for dt in FLOATS:
        cid = f"pred_{dt}"
        a = _unary_inputs(dt, "pred", cid)
        outs = [(op, D.BOOL, lambda x, op=op: ir.unary(op, x)) for op in ir.FLOAT_PRED_UNOPS]
        exp = [array(D.BOOL, _apply(FLOAT_PRED[op], [dt], [a])) for op in ir.FLOAT_PRED_UNOPS]
        add(Case(cid, elementwise(cid, [dt], outs), [a], exp))


# ---- select, fma, casts -------------------------------------------------------------------------

def build_select_fma():
    for dt in ALL_TYPES:
        cid = f"select_{dt}"
        e = edges(dt) + randoms(dt, 30, cid)
        r = _rng(cid)
        a = raw_array(dt, e)
        b = raw_array(dt, list(reversed(e)))
        c = np.array(r.choice([0, 1, 2, 0xFFFFFFFF], size=len(e)), dtype=np.uint32)
        prog = elementwise(cid, [D.BOOL, dt, dt], [("out", dt, ir.select)])
        exp = _apply(lambda cc, x, y: x if cc else y, [D.BOOL, dt, dt], [c, a, b])
        add(Case(cid, prog, [c, a, b], [array(dt, exp)]))
    for dt in NUMS:
        cid = f"fma_{dt}"
        e = edges(dt, small=True)
        a = [x for x in e for _ in e] + randoms(dt, 60, cid + "a")
        b = [y for _ in e for y in e] + randoms(dt, 60, cid + "b")
        c = list(reversed(a[: len(e) ** 2])) + randoms(dt, 60, cid + "c")
        if dt.is_float:  # cases where a double rounding (or a separate multiply) differs
            special = {
                D.F16: [(0.75, 683 / 512, 2.0 ** -24), (-0.75, 683 / 512, -(2.0 ** -24))],
                D.BF16: [(3.0, 105.0, -(2.0 ** -20)), (3.0, -105.0, 2.0 ** -20)],
                D.F32: [(24929 / 2 ** 15, 673 / 2 ** 9, 2.0 ** -60), (-24929 / 2 ** 15, 673 / 2 ** 9, -(2.0 ** -60))],
                D.F64: [(1 + 2.0 ** -27, 1 + 2.0 ** -27, -1.0), (1 + 2.0 ** -30, 1 - 2.0 ** -30, -1.0)],
            }[dt]
            special += [(dt.max, 2.0, -dt.max), (0.0, -1.0, -0.0), (-0.0, 0.0, 0.0), (1.0, -1.0, 1.0),
                        (INF, 0.0, 1.0), (INF, 1.0, -INF), (2.0, 3.0, INF), (dt.max, dt.max, -INF)]
            for x, y, z in special:
                a.append(rt(dt, x)), b.append(rt(dt, y)), c.append(rt(dt, z))
            fn = lambda x, y, z, dt=dt: f_fma(dt, x, y, z)
        else:
            fn = lambda x, y, z, dt=dt: _w(dt, x * y + z)
        A, Bv, C = raw_array(dt, a), raw_array(dt, b), raw_array(dt, c)
        prog = elementwise(cid, [dt, dt, dt], [("out", dt, ir.fma)])
        add(Case(cid, prog, [A, Bv, C], [array(dt, _apply(fn, [dt] * 3, [A, Bv, C]))]))


def build_casts():
    for src in ALL_TYPES:
        cid = f"cast_from_{src}"
        if src is D.BOOL:
            vals = [0, 1, 2, 0xFFFFFFFF, 0x80000000, 0, 7]
        elif src.is_int:
            vals = edges(src) + int_random(src, 40, cid) + [_w(src, v) for v in (
                16842753, 16777217, 16777219, 2 ** 24 + 2 ** 16 + 2 ** 15 + 1, 2 ** 53 + 1, 2 ** 54 + 3,
                2 ** 63 + 2 ** 39 + 1, 2 ** 64 - 2 ** 39, 2 ** 64 - 1, 65504, 65519, 65520, 65535,
                2049, 2051, 4097, -2049, 257, 259, -259, 0x7FFFFF80, 0x7FFFFFC0)]
        else:
            vals = edges(src) + float_random(src, 40, cid, -20, 40) + [
                rt(src, v) for v in (1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -8 + 2.0 ** -30,
                                     1 + 2.0 ** -24 + 2.0 ** -60, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -9,
                                     1 + 2.0 ** -11, 65519.0, 65519.99, -65520.0, 3.4e38, 3.4028235e38,
                                     3.4028236e38, 3.3961775e38, 1e-40, 1e-45, 5.9e-8, 2.9e-8, 1e-310,
                                     -0.9, -0.1, 0.9, 2.0 ** 32 - 1, 2.0 ** 32, -(2.0 ** 31) - 1,
                                     9.2233720368547748e18, 1.8446744073709552e19, -9.3e18, 40000.0, -40000.0)]
        vals = _dedupe(vals)
        a = raw_array(src, vals)
        outs = [(f"to_{dst}", dst, lambda x, dst=dst: ir.cast(x, dst)) for dst in ALL_TYPES]
        exp = [array(dst, _apply(lambda v, dst=dst: cast_value(src, dst, v), [src], [a])) for dst in ALL_TYPES]
        add(Case(cid, elementwise(cid, [src], outs), [a], exp))


# ---- sizes, bounds, bool buffers ------------------------------------------------------------------

def build_bounds():
    # empty, one element, not a multiple of the workgroup
    for n, dt in ((0, D.U32), (1, D.U32), (0, D.F32), (1, D.BF16), (65, D.I64), (127, D.F16)):
        cid = f"size_{n}_add_{dt}"
        a = raw_array(dt, (edges(dt) * 10)[:n])
        b = raw_array(dt, (list(reversed(edges(dt))) * 10)[:n])
        fn = (lambda x, y, dt=dt: INT_BIN["add"](dt, x, y)) if dt.is_int else (lambda x, y, dt=dt: f_add(dt, x, y))
        add(Case(cid, elementwise(cid, [dt, dt], [("out", dt, ir.add)]), [a, b],
                 [array(dt, _apply(fn, [dt, dt], [a, b]))]))
    # loads out of bounds: out (sized 2n+3) = a[i], a[i - 1] (wraps to 0xFFFFFFFF at i = 0), a[0xFFFFFFFF]
    for dt in (D.U8, D.I16, D.U64, D.F16, D.BF16, D.F32, D.F64, D.BOOL):
        for n in (0, 37):
            cid = f"load_oob_{dt}_{n}"
            vals = (edges(dt) * 40)[:n]
            a = raw_array(dt, vals)
            m = 2 * n + 3
            prog = ir.Program(
                [B.read("a", 0, dt), B.output("same", 1, dt), B.output("prev", 2, dt), B.output("far", 3, dt)], 32,
                [ir.let("i", ir.gid(0)),
                 ir.if_(i_ < ir.buf_len("same"), [
                     ir.store("same", i_, ir.load("a", i_)),
                     ir.store("prev", i_, ir.load("a", i_ - ir.u32(1))),
                     ir.store("far", i_, ir.load("a", ir.u32(0xFFFFFFFF)))])], name=_name(cid))
            av = values(dt, a)
            zero = False if dt is D.BOOL else (0.0 if dt.is_float else 0)
            same = [av[k] if k < n else zero for k in range(m)]
            prev = [av[k - 1] if 1 <= k <= n else zero for k in range(m)]
            add(Case(cid, prog, [a], [array(dt, same), array(dt, prev), array(dt, [zero] * m)],
                     sizes={"same": m, "prev": m, "far": m}))
    # stores out of bounds into a read_write buffer (untouched elements keep the input)
    for dt in (D.U32, D.I8, D.F64, D.BF16, D.BOOL):
        cid = f"store_oob_{dt}"
        init = raw_array(dt, (edges(dt) * 3)[:10])
        prog = ir.Program(
            [B.read_write("x", 0, dt)], 64,
            [ir.let("i", ir.gid(0)),
             ir.let("v", ir.cast(i_ + ir.u32(1), dt)),
             ir.store("x", i_ + ir.u32(5), ir.var("v")),
             ir.store("x", ir.u32(0xFFFFFFFF), ir.var("v")),
             ir.store("x", i_ + ir.u32(0x7FFFFFF0), ir.var("v"))], name=_name(cid))
        exp_arr = init.copy()
        exp_arr[5:10] = array(dt, [cast_value(D.U32, dt, k - 4) for k in range(5, 10)])
        add(Case(cid, prog, [init], [exp_arr]))
    # bool buffers: words != 0 are true; stores write 1 / 0; buf_len on several sizes
    cid = "bool_words"
    words = np.array([0, 1, 2, 0xFFFFFFFF, 0x80000000, 0x100, 0, 5], dtype=np.uint32)
    prog = ir.Program([B.read("a", 0, D.BOOL), B.output("copy", 1, D.BOOL), B.output("as_u32", 2, D.U32),
                       B.output("neg", 3, D.BOOL), B.output("rw_len", 4, D.U32, count=1)], 64,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i_ < ir.buf_len("a"), [
                           ir.store("copy", i_, ir.load("a", i_)),
                           ir.store("as_u32", i_, ir.select(ir.load("a", i_), ir.u32(7), ir.u32(9))),
                           ir.store("neg", i_, ir.not_(ir.load("a", i_)))]),
                       ir.if_(i_.eq(ir.u32(0)), [ir.store("rw_len", 0, ir.buf_len("a"))])], name=_name(cid))
    t = [int(w) != 0 for w in words]
    add(Case(cid, prog, [words], [array(D.BOOL, t), np.array([7 if x else 9 for x in t], np.uint32),
                                  array(D.BOOL, [not x for x in t]), np.array([8], np.uint32)],
             sizes={"copy": 8, "as_u32": 8, "neg": 8}))
    for n in (0, 1, 300):
        cid = f"buf_len_{n}"
        prog = ir.Program([B.read("a", 0, D.F64), B.read("b", 1, D.U8), B.output("out", 2, D.U32, count=3)], 32,
                          [ir.if_(ir.gid(0).eq(ir.u32(0)), [
                              ir.store("out", 0, ir.buf_len("a")), ir.store("out", 1, ir.buf_len("b")),
                              ir.store("out", 2, ir.buf_len("out"))])], name=_name(cid))
        add(Case(cid, prog, [np.zeros(n, np.float64), np.zeros(2 * n + 1, np.uint8)],
                 [np.array([n, 2 * n + 1, 3], np.uint32)]))


# ---- builtins -----------------------------------------------------------------------------------------

def _builtin_case(cid: str, wg, grid, config_wg=None):
    prog_wg = wg if config_wg is None else (1, 1, 1)
    wx, wy, wz = wg
    gx, gy, gz = grid
    total = wx * wy * wz * gx * gy * gz
    names = [(f"{b}_{'xyz'[ax]}", ir.Builtin(b, ax)) for b in ("invocation_id", "local_id", "workgroup_id", "num_workgroups")
             for ax in range(3)] + [("sg_lane", ir.subgroup_local_id()), ("sg_size", ir.subgroup_size())]
    bufs = [B.output(nm, k, D.U32) for k, (nm, _) in enumerate(names)]
    idx = ir.gid(0) + ir.gid(1) * ir.u32(gx * wx) + ir.gid(2) * ir.u32(gx * wx * gy * wy)
    body = [ir.let("idx", idx)] + [ir.store(nm, ir.var("idx"), e) for nm, e in names]
    prog = ir.Program(bufs, prog_wg, body, name=_name(cid))
    exp = {nm: [0] * total for nm, _ in names}
    for wgz in range(gz):
        for wgy in range(gy):
            for wgx in range(gx):
                for lz in range(wz):
                    for ly in range(wy):
                        for lx in range(wx):
                            g = (wgx * wx + lx, wgy * wy + ly, wgz * wz + lz)
                            k = g[0] + g[1] * gx * wx + g[2] * gx * wx * gy * wy
                            l_lin = lx + ly * wx + lz * wx * wy
                            row = {"invocation_id": g, "local_id": (lx, ly, lz), "workgroup_id": (wgx, wgy, wgz),
                                   "num_workgroups": (gx, gy, gz)}
                            for b, v in row.items():
                                for ax in range(3):
                                    exp[f"{b}_{'xyz'[ax]}"][k] = v[ax]
                            exp["sg_lane"][k] = l_lin % 32
                            exp["sg_size"][k] = 32
    cfg = DispatchConfig(grid=grid, workgroup=config_wg)
    add(Case(cid, prog, [], [np.array(exp[nm], np.uint32) for nm, _ in names], config=cfg,
             sizes={nm: total for nm, _ in names}))


def build_builtins():
    _builtin_case("builtins_wg5x4x2_grid2x3x2", (5, 4, 2), (2, 3, 2))
    _builtin_case("builtins_wg8x8_grid3x1x2", (8, 8, 1), (3, 1, 2))
    _builtin_case("builtins_wg48_grid3", (48, 1, 1), (3, 1, 1))
    _builtin_case("builtins_config_workgroup_override_4x2x3", (4, 2, 3), (2, 2, 1), config_wg=(4, 2, 3))


# ---- atomics ----------------------------------------------------------------------------------------

def _atomic_vals(dt: D, n: int, tag: str) -> list[int]:
    e = int_edges(dt, small=True)
    return (e + int_random(dt, n, tag))[:n]


def build_atomics():
    for dt in ATOMIC_TYPES:
        # histogram-style: every atomic op accumulates into 16 bins (final contents order-independent)
        cid = f"atomic_bins_{dt}"
        n = 300
        a = array(dt, _atomic_vals(dt, n, cid))
        ops = ("add", "or", "and", "xor", "min", "max")
        r = _rng(cid)
        inits = {op: [_w(dt, v) for v in int_random(dt, 16, cid + op)] for op in ops}
        inits["and"] = [_w(dt, -1) ^ (1 << k) for k in range(16)]
        bufs = [B.read("a", 0, dt)] + [B.read_write(f"h_{op}", k + 1, dt) for k, op in enumerate(ops)]
        body = [ir.let("i", ir.gid(0)),
                ir.if_(i_ < ir.buf_len("a"), [
                    ir.let("v", ir.load("a", i_)),
                    ir.let("bin", ir.cast(ir.var("v"), D.U32) & ir.u32(15)),
                    *[ir.let(f"old_{op}", ir.atomic(op, f"h_{op}", ir.var("bin"), ir.var("v"))) for op in ops]])]
        prog = ir.Program(bufs, 64, body, name=_name(cid))
        exp = []
        av = values(dt, a)
        for op in ops:
            h = list(inits[op])
            for v in av:
                k = _u(dt, v) & 15
                h[k] = {"add": lambda o, v: _w(dt, o + v), "or": lambda o, v: _w(dt, o | v),
                        "and": lambda o, v: _w(dt, o & v), "xor": lambda o, v: _w(dt, o ^ v),
                        "min": min, "max": max}[op](h[k], v)
            exp.append(array(dt, h))
        # the launch covers the largest *output* (16 bins) by default: give the grid explicitly
        add(Case(cid, prog, [a] + [array(dt, inits[op]) for op in ops], exp,
                 config=DispatchConfig(grid=(-(-n // 64), 1, 1))))
        del r

        # ticket counter: old values are a permutation of c0 .. c0+n-1 (wrapping)
        cid = f"atomic_ticket_{dt}"
        n = 200
        c0 = _w(dt, dt.max - 4)
        prog = ir.Program([B.read_write("counter", 0, dt), B.output("tickets", 1, dt)], 64,
                          [ir.let("i", ir.gid(0)),
                           ir.if_(i_ < ir.buf_len("tickets"), [
                               ir.store("tickets", i_, ir.atomic("add", "counter", 0, ir.lit(1, dt)))])],
                          name=_name(cid))
        add(Case(cid, prog, [array(dt, [c0, 77])],
                 [array(dt, [_w(dt, c0 + n), 77]), array(dt, [_w(dt, c0 + k) for k in range(n)])],
                 sizes={"tickets": n}, unordered=frozenset({"tickets"})))

        # exchange on one workgroup-shared slot: {old values} + {final} == {0} + {values}
        cid = f"atomic_exchange_{dt}"
        n = 50
        vals = _atomic_vals(dt, n, cid)
        prog = ir.Program([B.read("a", 0, dt), B.output("olds", 1, dt), B.workgroup("slot", 1, dt)], 64,
                          [ir.let("i", ir.gid(0)),
                           ir.if_(i_ < ir.buf_len("a"), [
                               ir.store("olds", i_, ir.atomic("exchange", "slot", 0, ir.load("a", i_)))]),
                           ir.barrier("workgroup"),
                           ir.if_(ir.lid(0).eq(ir.u32(0)), [ir.store("olds", ir.buf_len("a"), ir.load("slot", 0))])],
                          name=_name(cid))
        add(Case(cid, prog, [array(dt, vals)], [array(dt, vals + [0])], sizes={"olds": n + 1},
                 unordered=frozenset({"olds"})))

        # compare_exchange per slot (deterministic), plus an out-of-bounds atomic (evaluates to 0)
        cid = f"atomic_cmpxchg_slots_{dt}"
        n = 40
        init = _atomic_vals(dt, n, cid + "i")
        rr = _rng(cid)
        expect_v = [x if rr.integers(0, 2) else _w(dt, x ^ 1) for x in init]
        new = _atomic_vals(dt, n, cid + "n")[::-1]
        prog = ir.Program([B.read_write("x", 0, dt), B.read("e", 1, dt), B.read("v", 2, dt),
                           B.output("olds", 3, dt), B.output("oob", 4, dt)], 32,
                          [ir.let("i", ir.gid(0)),
                           ir.if_(i_ < ir.buf_len("e"), [
                               ir.store("olds", i_, ir.atomic("compare_exchange", "x", i_, ir.load("v", i_),
                                                              expected=ir.load("e", i_))),
                               ir.store("oob", i_, ir.atomic("add", "x", i_ + ir.u32(1000), ir.load("v", i_)))])],
                          name=_name(cid))
        final = [nv if x == ev else x for x, ev, nv in zip(init, expect_v, new)]
        add(Case(cid, prog, [array(dt, init), array(dt, expect_v), array(dt, new)],
                 [array(dt, final), array(dt, init), array(dt, [0] * n)]))

        # contended compare_exchange loop: a CAS counter across 2 workgroups
        cid = f"atomic_cas_loop_{dt}"
        n = 40
        c0 = _w(dt, -3) if dt.is_signed else 5
        prog = ir.Program([B.read_write("counter", 0, dt), B.output("mine", 1, dt)], 32,
                          [ir.let("i", ir.gid(0)),
                           ir.if_(i_ < ir.buf_len("mine"), [
                               ir.let("cur", ir.atomic("or", "counter", 0, ir.lit(0, dt))),
                               ir.let("done", ir.boolean(False)),
                               ir.loop("k", ir.u32(0), ir.buf_len("mine"), [
                                   ir.if_(ir.not_(ir.var("done")), [
                                       ir.let("old", ir.atomic("compare_exchange", "counter", 0,
                                                               ir.var("cur") + ir.lit(1, dt), expected=ir.var("cur"))),
                                       ir.if_(ir.var("old").eq(ir.var("cur")),
                                              [ir.assign("done", ir.boolean(True)), ir.store("mine", i_, ir.var("old"))],
                                              [ir.assign("cur", ir.var("old"))])])])])],
                          name=_name(cid))
        add(Case(cid, prog, [array(dt, [c0])],
                 [array(dt, [_w(dt, c0 + n)]), array(dt, [_w(dt, c0 + k) for k in range(n)])],
                 sizes={"mine": n}, unordered=frozenset({"mine"})))

    # atomics on a workgroup buffer + barrier: per-workgroup histogram flushed to global
    cid = "workgroup_histogram_u32"
    n = 333
    a = np.array(_rng(cid).integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32))
    prog = ir.Program([B.read("a", 0, D.U32), B.read_write("hist", 1, D.U32), B.workgroup("local", 16, D.U32)], 64,
                      [ir.let("i", ir.gid(0)), ir.let("l", ir.lid(0)),
                       ir.if_(i_ < ir.buf_len("a"), [
                           ir.let("_", ir.atomic("add", "local", ir.load("a", i_) & ir.u32(15), ir.u32(1)))]),
                       ir.barrier("workgroup"),
                       ir.if_(ir.var("l") < ir.u32(16), [
                           ir.let("_2", ir.atomic("add", "hist", ir.var("l"), ir.load("local", ir.var("l"))))])],
                      name=_name(cid))
    hist = [1000 + k for k in range(16)]
    for v in a.tolist():
        hist[v & 15] += 1
    add(Case(cid, prog, [a, np.arange(1000, 1016, dtype=np.uint32)], [np.array(hist, np.uint32)],
             config=DispatchConfig(grid=(6, 1, 1))))


# ---- workgroup memory, subgroups ---------------------------------------------------------------------

def build_workgroup_subgroup():
    for dt, n in ((D.U32, 150), (D.F32, 64), (D.BF16, 10)):
        cid = f"workgroup_reverse_{dt}_{n}"
        a = raw_array(dt, (edges(dt) + randoms(dt, n, cid))[:n])
        prog = ir.Program([B.read("a", 0, dt), B.output("out", 1, dt), B.workgroup("sh", 64, dt)], 64,
                          [ir.let("i", ir.gid(0)), ir.let("l", ir.lid(0)),
                           ir.store("sh", ir.var("l"), ir.load("a", i_)),
                           ir.barrier("workgroup"),
                           ir.store("out", i_, ir.load("sh", ir.u32(63) - ir.var("l")))], name=_name(cid))
        av = values(dt, a)
        zero = 0.0 if dt.is_float else 0
        out = []
        for k in range(n):
            src = (k // 64) * 64 + 63 - k % 64
            out.append(av[src] if src < n else zero)
        add(Case(cid, prog, [a], [array(dt, out)]))

    # subgroups in uniform flow, workgroup of 48 (second subgroup has 16 lanes)
    cid = "subgroup_ops_wg48"
    n = 150
    r = _rng(cid)
    a = r.integers(0, 200, size=n).astype(np.uint32)
    a[:5] = [0, 0xFFFFFFFF, 0x80000000, 199, 101]
    b = r.integers(-(1 << 31), 1 << 31, size=n, dtype=np.int64).astype(np.int32)
    b[:3] = [-(1 << 31), (1 << 31) - 1, -1]
    f = np.array([rt(D.F32, x) for x in float_random(D.F32, n, cid)], np.float32)
    q = np.array(int_random(D.I64, n, cid + "q"), np.int64)
    sl = ir.var("sl")
    prog = ir.Program(
        [B.read("a", 0, D.U32), B.read("b", 1, D.I32), B.read("f", 2, D.F32), B.read("q", 3, D.I64),
         B.output("ballot", 4, D.U32), B.output("shuf_next", 5, D.U32), B.output("shuf_rev", 6, D.F32),
         B.output("shuf_q", 7, D.I64), B.output("sum_u", 8, D.U32), B.output("sum_i", 9, D.I32),
         B.output("lane", 10, D.U32), B.output("size", 11, D.U32)], 48,
        [ir.let("i", ir.gid(0)), ir.let("sl", ir.subgroup_local_id()),
         ir.let("v", ir.load("a", i_)),
         ir.store("ballot", i_, ir.subgroup_ballot(ir.var("v") > ir.u32(100))),
         ir.store("shuf_next", i_, ir.subgroup_shuffle(ir.var("v"), sl + ir.u32(5))),
         ir.store("shuf_rev", i_, ir.subgroup_shuffle(ir.load("f", i_), ir.u32(31) - sl)),
         ir.store("shuf_q", i_, ir.subgroup_shuffle(ir.load("q", i_), sl ^ ir.u32(1))),
         ir.store("sum_u", i_, ir.subgroup_add(ir.var("v"))),
         ir.store("sum_i", i_, ir.subgroup_add(ir.load("b", i_))),
         ir.store("lane", i_, sl), ir.store("size", i_, ir.subgroup_size())], name=_name(cid))
    groups = math.ceil(n / 48)
    E = {k: [None] * n for k in ("ballot", "shuf_next", "shuf_rev", "shuf_q", "sum_u", "sum_i", "lane", "size")}
    fv, av, bv, qv = values(D.F32, f), a.tolist(), b.tolist(), q.tolist()
    for w in range(groups):
        for s0 in (0, 32):
            lanes = [w * 48 + s0 + k for k in range(min(32, 48 - s0))]
            get = lambda arr, g, z=0: arr[g] if g < n else z
            bal = sum(1 << k for k, g in enumerate(lanes) if get(av, g) > 100)
            su = sum(get(av, g) for g in lanes) & 0xFFFFFFFF
            si = _w(D.I32, sum(get(bv, g) for g in lanes))
            for k, g in enumerate(lanes):
                if g >= n:
                    continue
                src = lambda lane, arr, z=0: get(arr, lanes[lane], z) if lane < len(lanes) else z
                E["ballot"][g] = bal
                E["shuf_next"][g] = src(k + 5, av)
                E["shuf_rev"][g] = src(31 - k, fv, 0.0)
                E["shuf_q"][g] = src(k ^ 1, qv)
                E["sum_u"][g], E["sum_i"][g] = su, si
                E["lane"][g], E["size"][g] = k, 32
    types = {"shuf_rev": D.F32, "shuf_q": D.I64, "sum_i": D.I32}
    add(Case(cid, prog, [a, b, f, q], [array(types.get(k, D.U32), E[k]) for k in E]))

    # 2-D workgroup (8, 5): 40 invocations = subgroups of 32 and 8 lanes
    cid = "subgroup_ballot_wg8x5_grid3x2"
    wx, wy, gx, gy = 8, 5, 3, 2
    total = wx * wy * gx * gy
    data = _rng(cid).integers(0, 4, size=total).astype(np.uint32)
    prog = ir.Program([B.read("a", 0, D.U32), B.output("ballot", 1, D.U32), B.output("rev", 2, D.U32),
                       B.output("sum", 3, D.U32)], (wx, wy),
                      [ir.let("wl", ir.workgroup_id(0) + ir.workgroup_id(1) * ir.num_workgroups(0)),
                       ir.let("l", ir.lid(0) + ir.lid(1) * ir.u32(wx)),
                       ir.let("idx", ir.var("wl") * ir.u32(wx * wy) + ir.var("l")),
                       ir.let("v", ir.load("a", ir.var("idx"))),
                       ir.store("ballot", ir.var("idx"), ir.subgroup_ballot(ir.var("v").eq(ir.u32(0)))),
                       ir.store("rev", ir.var("idx"), ir.subgroup_shuffle(ir.var("v"), ir.u32(31) - ir.subgroup_local_id())),
                       ir.store("sum", ir.var("idx"), ir.subgroup_add(ir.var("v")))], name=_name(cid))
    eb, er, es = [0] * total, [0] * total, [0] * total
    dv = data.tolist()
    for wl in range(gx * gy):
        for s0, cnt in ((0, 32), (32, 8)):
            idxs = [wl * 40 + s0 + k for k in range(cnt)]
            bal = sum(1 << k for k, g in enumerate(idxs) if dv[g] == 0)
            sm = sum(dv[g] for g in idxs)
            for k, g in enumerate(idxs):
                eb[g], es[g] = bal, sm
                er[g] = dv[idxs[31 - k]] if 31 - k < cnt else 0
    add(Case(cid, prog, [data], [np.array(x, np.uint32) for x in (eb, er, es)], config=DispatchConfig(grid=(gx, gy))))


# ---- control flow ---------------------------------------------------------------------------------------

def build_control():
    r = _rng("control")
    n = 203
    a = r.integers(-50, 50, size=n).astype(np.int32)
    b = r.integers(-50, 50, size=n).astype(np.int32)
    a[:4] = [-(1 << 31), (1 << 31) - 1, 0, 7]
    av, bv = a.tolist(), b.tolist()
    x = ir.var("x")

    cid = "if_else_nested_i32"
    prog = ir.Program([B.read("a", 0, D.I32), B.read("b", 1, D.I32), B.output("out", 2, D.I32),
                       B.output("path", 3, D.U32)], 64,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i_ < ir.buf_len("out"), [
                           ir.let("x", ir.load("a", i_)), ir.let("y", ir.load("b", i_)), ir.let("p", ir.u32(0)),
                           ir.if_(x < ir.var("y"),
                                  [ir.assign("x", x * ir.i32(2)), ir.assign("p", ir.u32(1))],
                                  [ir.if_((x % ir.i32(3)).eq(ir.i32(0)),
                                          [ir.assign("x", x - ir.i32(1)), ir.assign("p", ir.u32(2))],
                                          [ir.assign("p", ir.u32(3))])]),
                           ir.if_(ir.var("p").ne(ir.u32(3)), [ir.store("out", i_, x)]),
                           ir.store("path", i_, ir.var("p"))])], name=_name(cid))
    eo, ep = [], []
    for xa, yb in zip(av, bv):
        if xa < yb:
            eo.append(_w(D.I32, xa * 2)); ep.append(1)
        elif _w(D.I32, xa - 3 * _tdiv(xa, 3)) == 0:
            eo.append(xa - 1); ep.append(2)
        else:
            eo.append(0); ep.append(3)
    add(Case(cid, prog, [a, b], [array(D.I32, eo), array(D.U32, ep)]))

    cid = "loops_u32"
    c = r.integers(0, 20, size=n).astype(np.uint32)
    d = r.integers(0, 20, size=n).astype(np.uint32)
    c[:3] = [0, 19, 5]
    d[:3] = [0, 0, 5]
    prog = ir.Program([B.read("c", 0, D.U32), B.read("d", 1, D.U32), B.output("tri", 2, D.U32),
                       B.output("span", 3, D.U32), B.output("nested", 4, D.U32), B.output("once", 5, D.U32)], 64,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i_ < ir.buf_len("tri"), [
                           ir.let("s", ir.u32(0)),
                           ir.loop("k", ir.u32(0), ir.load("c", i_), [ir.assign("s", ir.var("s") + ir.var("k"))]),
                           ir.store("tri", i_, ir.var("s")),
                           ir.let("cnt", ir.u32(0)),
                           ir.loop("k2", ir.load("c", i_), ir.load("d", i_), [ir.assign("cnt", ir.var("cnt") + ir.u32(1))]),
                           ir.store("span", i_, ir.var("cnt")),
                           ir.let("nn", ir.u32(0)),
                           ir.loop("j", ir.u32(0), ir.load("d", i_), [
                               ir.loop("k3", ir.u32(0), ir.var("j"), [ir.assign("nn", ir.var("nn") + ir.var("k3") + ir.u32(1))])]),
                           ir.store("nested", i_, ir.var("nn")),
                           ir.let("end", ir.load("c", i_)), ir.let("it", ir.u32(0)),
                           ir.loop("k4", ir.u32(0), ir.var("end"), [
                               ir.assign("end", ir.var("end") + ir.u32(1)), ir.assign("it", ir.var("it") + ir.u32(1))]),
                           ir.store("once", i_, ir.var("it"))])], name=_name(cid))
    cv, dv = c.tolist(), d.tolist()
    add(Case(cid, prog, [c, d], [np.array([sum(range(x)) for x in cv], np.uint32),
                                  np.array([max(0, y - x) for x, y in zip(cv, dv)], np.uint32),
                                  np.array([sum(k + 1 for j in range(y) for k in range(j)) for y in dv], np.uint32),
                                  np.array(cv, np.uint32)]))

    cid = "early_return_i32"
    prog = ir.Program([B.read("a", 0, D.I32), B.output("out", 1, D.I32), B.output("last", 2, D.U32)], 64,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i_ >= ir.buf_len("out"), [ir.return_()]),
                       ir.let("x", ir.load("a", i_)),
                       ir.loop("k", ir.u32(0), ir.u32(6), [
                           ir.store("last", i_, ir.var("k")),
                           ir.if_(ir.var("k").eq(ir.cast(x, D.U32) & ir.u32(7)), [ir.return_()])]),
                       ir.if_((x % ir.i32(4)).eq(ir.i32(0)), [ir.return_()]),
                       ir.store("out", i_, x + ir.i32(1))], name=_name(cid))
    eo = [_w(D.I32, v + 1) if (_u(D.I32, v) & 7) >= 6 and _w(D.I32, v - 4 * _tdiv(v, 4)) != 0 else 0 for v in av]
    add(Case(cid, prog, [a], [array(D.I32, eo), np.array([min(_u(D.I32, v) & 7, 5) for v in av], np.uint32)]))

    cid = "early_return_mixed_i32"
    prog = ir.Program([B.read("a", 0, D.I32), B.output("out", 1, D.I32)], 64,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i_ >= ir.buf_len("out"), ir.return_()),
                       ir.let("x", ir.load("a", i_)),
                       ir.if_(x < ir.i32(0), [ir.store("out", i_, ir.i32(-1)), ir.return_()]),
                       ir.store("out", i_, x + ir.i32(1)),
                       ir.block(ir.if_((x % ir.i32(2)).eq(ir.i32(0)), [ir.return_()]), ir.store("out", i_, x * ir.i32(10)))],
                      name=_name(cid))
    add(Case(cid, prog, [a], [array(D.I32, [-1 if v < 0 else (v + 1 if v % 2 == 0 else _w(D.I32, v * 10)) for v in av])]))

    # fixpoint: read_write accumulates, a pure output is zeroed once, workgroup memory re-zeroed per run
    cid = "fixpoint_5"
    k = 5
    m = 100
    init = np.arange(m, dtype=np.uint32) * 3
    prog = ir.Program([B.read("a", 0, D.U32), B.read_write("x", 1, D.U32), B.output("acc", 2, D.U32),
                       B.workgroup("sh", 64, D.U32)], 64,
                      [ir.let("i", ir.gid(0)), ir.let("l", ir.lid(0)),
                       ir.let("_", ir.atomic("add", "sh", ir.var("l"), ir.u32(1))),
                       ir.barrier("workgroup"),
                       ir.if_(i_ < ir.buf_len("x"), [
                           ir.store("x", i_, ir.load("x", i_) + ir.load("sh", ir.var("l"))),
                           ir.store("acc", i_, ir.load("acc", i_) + ir.load("a", i_))])], name=_name(cid))
    av2 = (np.arange(m, dtype=np.uint32) + 1) * 1000
    add(Case(cid, prog, [av2, init], [init + np.uint32(k), av2 * np.uint32(k)],
             config=DispatchConfig(fixpoint_iterations=k)))

    # every operand is evaluated: both sides of select, both sides of logical_and / logical_or
    cid = "evaluate_every_operand_u32"
    m = 77
    cnt = ir.u32(1)
    prog = ir.Program([B.read_write("c", 0, D.U32), B.output("out", 1, D.U32)], 32,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i_ < ir.buf_len("out"), [
                           ir.let("s", ir.select(i_ < ir.u32(10), ir.atomic("add", "c", 0, cnt), ir.atomic("add", "c", 1, cnt))),
                           ir.let("b", ir.logical_and(ir.boolean(False), ir.atomic("add", "c", 2, cnt).eq(ir.u32(0xFFFFFFFF)))),
                           ir.let("o", ir.logical_or(ir.boolean(True), ir.atomic("add", "c", 3, cnt).eq(ir.u32(0)))),
                           ir.store("out", i_, ir.select(ir.var("b"), ir.u32(5), ir.select(ir.var("o"), ir.u32(9), ir.u32(7))))])],
                      name=_name(cid))
    add(Case(cid, prog, [np.array([100, 200, 300, 400], np.uint32)],
             [np.array([100 + m, 200 + m, 300 + m, 400 + m], np.uint32), np.full(m, 9, np.uint32)], sizes={"out": m}))

    # grid barrier (cooperative launch): write, barrier over the whole launch, read the mirror element
    cid = "grid_barrier_mirror_u32"
    m = 100
    src = (np.arange(m, dtype=np.uint32) * 7 + 3).astype(np.uint32)
    prog = ir.Program([B.read("a", 0, D.U32), B.read_write("x", 1, D.U32), B.output("out", 2, D.U32)], 32,
                      [ir.let("i", ir.gid(0)),
                       ir.store("x", i_, ir.load("a", i_) * ir.u32(2)),
                       ir.barrier("grid"),
                       ir.let("j", ir.buf_len("x") - ir.u32(1) - i_),
                       ir.store("out", i_, ir.load("x", ir.var("j")) + ir.u32(1))], name=_name(cid))
    xs = src * np.uint32(2)
    add(Case(cid, prog, [src, np.zeros(m, np.uint32)], [xs, (xs[::-1] + np.uint32(1)).astype(np.uint32)],
             config=DispatchConfig(cooperative=True)))

    cid = "fixpoint_atomic_min_propagation"
    m = 70
    lab = _rng(cid).integers(0, 1 << 30, size=m).astype(np.int64)
    prog = ir.Program([B.read_write("label", 0, D.I64)], 32,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i_ + ir.u32(1) < ir.buf_len("label"), [
                           ir.let("_", ir.atomic("min", "label", i_ + ir.u32(1), ir.load("label", i_)))])],
                      name=_name(cid))
    add(Case(cid, prog, [lab], [np.minimum.accumulate(lab)], config=DispatchConfig(fixpoint_iterations=m)))


def _build() -> None:
    build_binops()
    build_unops()
    build_select_fma()
    build_casts()
    build_bounds()
    build_builtins()
    build_atomics()
    build_workgroup_subgroup()
    build_control()
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"


_build()
