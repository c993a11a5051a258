"""Elementwise operations of the vyre IR over NumPy arrays, exactly as docs/semantics.md defines them.

Values are held in their *value dtype* (`VALUE_DTYPE`): the storage dtype, except `bool` (numpy
bool_) and `bf16` (float32 holding values already rounded to bfloat16). Every operation takes and
returns arrays of shape (n,) or (1,) (a value shared by every invocation) and never writes its
operands. Callers run them under `np.errstate(all="ignore")`: overflow and invalid are defined here.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable

import numpy as np

from .types import DataType, _bf16_to_f32, _f32_to_bf16

D = DataType
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
VALUE_DTYPE: dict[DataType, np.dtype] = {
    t: np.dtype(np.bool_ if t is D.BOOL else np.float32 if t is D.BF16 else t.storage) for t in D}
_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)

Bin = Callable[[np.ndarray, np.ndarray], np.ndarray]
Un = Callable[[np.ndarray], np.ndarray]


# ---- representation ----------------------------------------------------------------------------

def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    u = x.view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(x), x, r)


def narrow(x32: np.ndarray, t: DataType) -> np.ndarray:
    """Round float32 values (f16/bf16 arithmetic is done in f32) to `t`'s value dtype."""
    if t is D.F16:
        return x32.astype(np.float16)
    if t is D.BF16:
        return bf16_round(x32)
    return x32


def literal(raw: int, t: DataType) -> np.ndarray:
    """A read-only (1,) value array from an IR literal's raw field."""
    if t is D.BF16:
        a = _bf16_to_f32(np.array([raw], np.uint16))
    elif t.is_float:
        a = np.array([raw], UINT[t.bits]).view(t.storage)
    elif t is D.BOOL:
        a = np.array([bool(raw)])
    else:
        a = np.array([raw], t.storage)
    a.flags.writeable = False
    return a


def from_storage(x: np.ndarray, t: DataType) -> np.ndarray:
    """Buffer elements -> values (bool words are `!= 0`, bf16 bits widen to f32)."""
    if t is D.BOOL:
        return x != 0
    if t is D.BF16:
        return _bf16_to_f32(x)
    return x


_F16_NAN = np.array(0x7FFF, np.uint16).view(np.float16)


def to_storage(x: np.ndarray, t: DataType) -> np.ndarray:
    """Values -> buffer elements (bool as 1/0 words, bf16 as raw bits, an f16 NaN as 0x7FFF: a GPU
    holds f16 values in f32 registers, and its conversion back makes every NaN that one)."""
    if t is D.BOOL:
        return x.astype(np.uint32)
    if t is D.BF16:
        return _f32_to_bf16(x)
    if t is D.F16:
        nan = np.isnan(x)
        return np.where(nan, _F16_NAN, x) if nan.any() else x
    return x


# ---- integers ----------------------------------------------------------------------------------

def _u(x: np.ndarray) -> np.ndarray:
    return x.view(UINT[x.dtype.itemsize * 8])


def _amount(b: np.ndarray, bits: int) -> np.ndarray:
    return _u(b) & (bits - 1)


def _div(a, b, t):
    zero = b == 0
    if not t.is_signed:
        return np.where(zero, 0, a // np.where(zero, 1, b))
    m1 = b == -1
    bs = np.where(zero | m1, 1, b)
    q = (a - np.fmod(a, bs)) // bs  # exact, so floor == trunc; bs is never 0 or -1
    return np.where(zero, 0, np.where(m1, -a, q))  # -MIN wraps to MIN


def _mod(a, b, t):
    if not t.is_signed:
        zero = b == 0
        return np.where(zero, 0, a % np.where(zero, 1, b))
    bad = (b == 0) | (b == -1)
    return np.where(bad, 0, np.fmod(a, np.where(bad, 1, b)))  # C `%`: sign of the dividend


def _sat(a, b, t, sub: bool):
    if t.bits < 64:
        w = a.astype(np.int64) - b.astype(np.int64) if sub else a.astype(np.int64) + b.astype(np.int64)
        return np.clip(w, t.min, t.max).astype(a.dtype)
    r = a - b if sub else a + b
    if not t.is_signed:
        return np.where(a < b, 0, r) if sub else np.where(r < a, r.dtype.type(t.max), r)
    over = ((a ^ b) & (a ^ r)) < 0 if sub else ((a ^ r) & (b ^ r)) < 0
    return np.where(over, np.where(a < 0, np.int64(t.min), np.int64(t.max)), r)


def _mul_high(a, b, t):
    if t.bits <= 32:
        wide = np.int64 if t.is_signed else np.uint64
        return ((a.astype(wide) * b.astype(wide)) >> t.bits).astype(a.dtype)
    ua, ub = _u(a), _u(b)
    a0, a1, b0, b1 = ua & 0xFFFFFFFF, ua >> 32, ub & 0xFFFFFFFF, ub >> 32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> 32) + (p01 & 0xFFFFFFFF) + (p10 & 0xFFFFFFFF)
    hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32)
    if t.is_signed:  # signed high half = unsigned high half - (a<0 ? b : 0) - (b<0 ? a : 0)  (mod 2^64)
        hi = hi - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
    return hi.view(a.dtype)


def _rot(a, b, t, left: bool):
    u, s = _u(a), _amount(b, t.bits)
    back = (t.bits - s) & (t.bits - 1)
    r = (u << s) | (u >> back) if left else (u >> s) | (u << back)
    return r.view(a.dtype)


def _clz(a, t):
    x = _u(a).copy()
    sh = 1
    while sh < t.bits:
        x |= x >> sh
        sh <<= 1
    return (t.bits - np.bitwise_count(x).astype(np.uint32)).astype(np.uint32)


def _reverse_bits(a, t):
    u = np.ascontiguousarray(_u(a))
    r = _REV8[u.view(np.uint8)].view(u.dtype)
    return (r.byteswap() if t.bits > 8 else r).view(a.dtype)


INT_BINARY: dict[str, Callable] = {
    "add": lambda a, b, t: a + b,
    "sub": lambda a, b, t: a - b,
    "mul": lambda a, b, t: a * b,
    "div": _div,
    "mod": _mod,
    "min": lambda a, b, t: np.minimum(a, b),
    "max": lambda a, b, t: np.maximum(a, b),
    "absdiff": lambda a, b, t: np.maximum(a, b) - np.minimum(a, b),
    "wrapping_add": lambda a, b, t: a + b,
    "wrapping_sub": lambda a, b, t: a - b,
    "saturating_add": lambda a, b, t: _sat(a, b, t, False),
    "saturating_sub": lambda a, b, t: _sat(a, b, t, True),
    "mul_high": _mul_high,
    "bitand": lambda a, b, t: a & b,
    "bitor": lambda a, b, t: a | b,
    "bitxor": lambda a, b, t: a ^ b,
    "shl": lambda a, b, t: (_u(a) << _amount(b, t.bits)).view(a.dtype),
    "shr": lambda a, b, t: a >> _amount(b, t.bits).view(a.dtype),  # arithmetic for signed dtypes
    "rotl": lambda a, b, t: _rot(a, b, t, True),
    "rotr": lambda a, b, t: _rot(a, b, t, False),
}

INT_UNARY: dict[str, Callable] = {
    "neg": lambda a, t: np.negative(a),
    "bitnot": lambda a, t: np.invert(a),
    "popcount": lambda a, t: np.bitwise_count(_u(a)).astype(np.uint32),
    "clz": _clz,
    "ctz": lambda a, t: np.bitwise_count(~_u(a) & (_u(a) - 1)).astype(np.uint32),
    "reverse_bits": _reverse_bits,
    "abs": lambda a, t: np.abs(a) if t.is_signed else a,
    "sign": lambda a, t: np.sign(a) if t.is_signed else (a != 0).astype(a.dtype),
}


# ---- floats ------------------------------------------------------------------------------------

def _in_f32(f: Callable) -> Callable:
    """Lift an f32/f64 NumPy operation to every float type: f16 and bf16 are computed in f32 and
    rounded once (correctly rounded for + - * / sqrt, as f32 carries >= 2p+2 bits)."""
    def run(*args):
        *xs, t = args
        if t is D.F16:
            return f(*(x.astype(np.float32) for x in xs)).astype(np.float16)
        if t is D.BF16:
            return bf16_round(f(*xs))
        return f(*xs)
    return run


def _min_max(a, b, smaller: bool):
    """min (smaller) or max: where one operand is NaN the other; of two zeros min -0, max +0. Not
    np.fmin/fmax: their scalar loop gives NaN for a signalling NaN where their SIMD loop gives the
    other operand, so an element's result would hang on the launch's size."""
    r = np.minimum(a, b) if smaller else np.maximum(a, b)
    z = (a == 0) & (b == 0)
    neg = np.signbit(a)
    r = np.where(z, np.where(neg if smaller else ~neg, a, b), r)
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, r))


def _transcendental(f: Callable) -> Callable:
    """Computed in f64 and rounded to the type; f16/bf16 through the f32 result."""
    def run(a, t):
        r = f(a.astype(np.float64))
        return r if t is D.F64 else narrow(r.astype(np.float32), t)
    return run


_add, _sub, _div_f = _in_f32(np.add), _in_f32(np.subtract), _in_f32(np.divide)
_sqrt = _in_f32(np.sqrt)


def _recip(a, t):
    return _div_f(np.ones(1, a.dtype), a, t)


FLOAT_BINARY: dict[str, Callable] = {
    "add": _add,
    "sub": _sub,
    "mul": _in_f32(np.multiply),
    "div": _div_f,
    "min": lambda a, b, t: _min_max(a, b, True),
    "max": lambda a, b, t: _min_max(a, b, False),
    "absdiff": lambda a, b, t: np.abs(_sub(a, b, t)),
}

FLOAT_UNARY: dict[str, Callable] = {
    "neg": lambda a, t: np.negative(a),
    "abs": lambda a, t: np.abs(a),
    "sign": lambda a, t: np.where(a > 0, 1, np.where(a < 0, -1, a)).astype(a.dtype),
    "sqrt": _sqrt,
    "floor": lambda a, t: np.floor(a),
    "ceil": lambda a, t: np.ceil(a),
    "trunc": lambda a, t: np.trunc(a),
    "round": lambda a, t: np.rint(a),  # half to even
    "exp": _transcendental(np.exp),
    "exp2": _transcendental(np.exp2),
    "log": _transcendental(np.log),
    "log2": _transcendental(np.log2),
    "sin": _transcendental(np.sin),
    "cos": _transcendental(np.cos),
    "tan": _transcendental(np.tan),
    "rsqrt": lambda a, t: _recip(_sqrt(a, t), t),  # two correct roundings, as specified
    "recip": _recip,
    "isnan": lambda a, t: np.isnan(a),
    "isinf": lambda a, t: np.isinf(a),
    "isfinite": lambda a, t: np.isfinite(a),
}

COMPARE: dict[str, Callable] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "gt": np.greater, "le": np.less_equal,
    "ge": np.greater_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
}


def binary(op: str, t: DataType) -> Bin:
    """The implementation of binary `op` on operands of type `t`."""
    if op in COMPARE:
        return COMPARE[op]
    f = (FLOAT_BINARY if t.is_float else INT_BINARY)[op]
    return lambda a, b: f(a, b, t)


def unary(op: str, t: DataType) -> Un:
    """The implementation of unary `op` on an operand of type `t`."""
    if op == "not":
        return np.logical_not
    f = (FLOAT_UNARY if t.is_float else INT_UNARY)[op]
    return lambda a: f(a, t)


# ---- casts -------------------------------------------------------------------------------------

def _float_to_int(x: np.ndarray, dst: DataType) -> np.ndarray:
    x = x.astype(np.float64)
    lo, hi = float(dst.min), float(1 << (dst.bits - dst.is_signed))  # both exact powers of two (or 0)
    big, small, nan = x >= hi, x < lo, np.isnan(x)
    r = np.trunc(np.where(big | small | nan, 0.0, x)).astype(dst.storage)
    vt = dst.storage.type
    return np.where(big, vt(dst.max), np.where(small, vt(dst.min), r))


def cast(src: DataType, dst: DataType) -> Un:
    """The conversion from `src` values to `dst` values."""
    vt = VALUE_DTYPE[dst]
    if src is dst:
        return lambda x: x
    if dst is D.BOOL:
        return lambda x: x != 0
    if src is D.BOOL or (src.is_int and dst.is_int):
        return (lambda x: x.astype(np.float32)) if dst is D.BF16 else (lambda x: x.astype(vt))
    if dst.is_int:
        return lambda x: _float_to_int(x, dst)
    if dst is D.BF16:  # ints, f64, f16 and f32 all reach bf16 through f32
        return lambda x: bf16_round(x.astype(np.float32))
    if dst is D.F16 and src.is_int:
        return lambda x: x.astype(np.float64).astype(np.float16)  # exact for <= 32-bit, inf beyond 2^53
    return lambda x: x.astype(vt)  # numpy's float conversions round to nearest even, f64->f16 directly


# ---- fma ---------------------------------------------------------------------------------------

def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _to_odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Round-to-odd of s + err, where s = RN(s + err): step s to its odd neighbour toward err."""
    even = (_u(s) & 1) == 0
    fix = (err != 0) & even & np.isfinite(s)
    return np.where(fix, np.nextafter(s, np.copysign(np.inf, err).astype(s.dtype)), s)


def _fma_small(a, b, c, t):
    """f16/bf16/f32: the product is exact in f64; the f64 sum rounded to odd, then rounded to t,
    gives the single correct rounding (53 >= 24 + 2)."""
    p = a.astype(np.float64) * b.astype(np.float64)
    s = _to_odd(*_two_sum(p, c.astype(np.float64)))
    if t is D.F32:
        return s.astype(np.float32)
    if t is D.F16:
        return s.astype(np.float16)  # numpy rounds f64 -> f16 directly
    s32 = s.astype(np.float32)  # bf16: round to odd again at f32 (24 >= 8 + 2), then to bf16
    back = s32.astype(np.float64)
    fix = (back != s) & np.isfinite(s) & ((_u(s32) & 1) == 0)  # also steps an overflowed inf back
    toward = np.where(s > back, np.float32(np.inf), np.float32(-np.inf))
    return bf16_round(np.where(fix, np.nextafter(s32, toward), s32))


def _split(x):
    c = 134217729.0 * x  # 2^27 + 1 (Veltkamp)
    hi = c - (c - x)
    return hi, x - hi


def _fma_exact(a: float, b: float, c: float) -> float:
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:
        return a * b + c if a == 0 or b == 0 else 0.0
    try:
        return float(x)
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


_FAR = 200  # binades apart beyond which the smaller of a*b and c can only act as a sticky bit


def _two_product(a, b):
    ah, al = _split(a)
    bh, bl = _split(b)
    uh = a * b
    return uh, ((ah * bh - uh) + ah * bl + al * bh) + al * bl


def _sum_sign(terms: list) -> tuple[np.ndarray, np.ndarray]:
    """(sign, known): the sign (-1, 0, 1) of the exact sum of each column of finite float arrays
    (small enough that sums cannot overflow), by error-free distillation; `known` is False where
    a few passes did not settle it."""
    sign = np.zeros(terms[0].shape, np.int8)
    todo = np.ones(terms[0].shape, bool)
    for _ in range(6):
        s, errs = terms[0], []
        for x in terms[1:]:
            s, e = _two_sum(s, x)
            errs.append(e)
        terms = errs + [s]
        rest = sum(np.abs(e) for e in errs)
        settled = todo & ((np.abs(s) > rest * (1 + 2.0 ** -40)) | ((s == 0) & (rest == 0)))
        sign[settled] = np.sign(s[settled])
        todo &= ~settled
        if not todo.any():
            break
    return sign, ~todo


def _fma_scaled(a, b, c):
    """fma of finite nonzero f64 operands of any magnitude: a*b and c are scaled by one power of
    two so that the larger lies in [2^-2, 1) and the emulation neither overflows nor underflows;
    ldexp scales the result back, rounding it once more where it is subnormal (see below)."""
    ma, ea = np.frexp(a)
    mb, eb = np.frexp(b)
    mc, ec = np.frexp(c)
    ep = ea.astype(np.int64) + eb  # a*b = ma*mb * 2^ep, c = mc * 2^ec
    k = np.maximum(ep, ec)
    uh, ul = _two_product(ma, np.ldexp(mb, np.maximum(ep - k, -_FAR)))
    # a c more than _FAR binades below a*b only decides ties and sides: any value of its sign does
    th, tl = _two_sum(np.ldexp(mc, np.maximum(ec - k, -_FAR)), uh)
    r = th + _to_odd(*_two_sum(tl, ul))  # the exact sum rounded once to 53 bits (scaled)
    # A subnormal result is rounded twice (to 53 bits, then to the subnormal grid by ldexp),
    # which is the single rounding except where the 53-bit value is exactly a midpoint of that
    # grid: there the exact sum's side of it decides, so r is nudged one 53-bit step that way.
    z = np.abs(np.ldexp(r, k + 1075))  # in units of half the smallest subnormal
    tie = np.flatnonzero((z < 2.0 ** 53) & (z == np.floor(z)) & (np.fmod(z, 2.0) == 1.0) & (ep - k >= -_FAR))
    if tie.size:
        side, known = _sum_sign([th[tie], tl[tie], ul[tie], -r[tie]])
        r[tie] = np.where(side == 0, r[tie], np.nextafter(r[tie], np.where(side > 0, np.inf, -np.inf)))
        for i in tie[~known]:  # distillation did not settle it (not seen in practice): exact rationals
            r[i] = np.ldexp(_fma_exact(float(a[i]), float(b[i]), float(c[i])), -int(k[i]))
    out = np.ldexp(r, k)
    return np.where(ep - k < -_FAR, c, out)  # a*b is below half an ulp of c: the result is c


def _fma_emulated(a, b, c):
    uh, ul = _two_product(a, b)
    th, tl = _two_sum(c, uh)
    return th + _to_odd(*_two_sum(tl, ul))


def _fma_f64(a, b, c):
    """Exact f64 fma: Boldo-Melquiond emulation (TwoProduct, TwoSum, round-to-odd) where no
    intermediate can overflow or underflow, the same on operands scaled by powers of two for
    the rest."""
    a, b, c = np.broadcast_arrays(a, b, c)
    aa, ab, ac, p = np.abs(a), np.abs(b), np.abs(c), np.abs(a * b)
    safe = (aa < 2.0**990) & (ab < 2.0**990) & (ac < 2.0**990) & (p > 2.0**-900) & (p < 2.0**990)
    if safe.all():
        return _fma_emulated(a, b, c)
    finite = np.isfinite(a) & np.isfinite(b)
    nonzero = finite & (a != 0) & (b != 0)
    simple = ~safe & (~nonzero | ~np.isfinite(c) | (c == 0))
    # a*b exact (zero) or a special value: one rounding of a*b + c is the fma; finite*finite + inf
    # is c; a zero c leaves the product rounded once, its sign kept where it underflows to zero
    prod = a * b
    out = np.where(finite & np.isinf(c), c, np.where(nonzero & (c == 0), prod, prod + c))
    for where, f in ((np.flatnonzero(safe), _fma_emulated), (np.flatnonzero(~safe & ~simple), _fma_scaled)):
        if where.size:
            out[where] = f(a[where], b[where], c[where])
    return out


def fma(t: DataType) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """a * b + c: wrapping for integers, one rounding for floats."""
    if t.is_int:
        return lambda a, b, c: a * b + c
    if t is D.F64:
        return _fma_f64
    return lambda a, b, c: _fma_small(a, b, c, t)
