"""Edge values the program table (tests/program_table.py) does not reach, run on the CUDA backend
and on the reference interpreter and compared bit for bit (from a review of the PTX emitter).

What is new here compared with the table (which loads every operand straight from a buffer and
uses only the quiet NaN np.nan):
- signalling NaNs, negative NaNs and NaN payloads through min/max/compare/cast/round ops;
- float -> int casts at the neighbours of every integer type's bounds, in every float type;
- int -> float casts at rounding ties / sticky bits for every (int, float) pair;
- fma at f64 extremes (subnormal results, overflow boundary, cancellation) and double-rounding
  detectors for f32/f16/bf16 found by search;
- transcendental special values checked bit for bit (the table's ULP tolerance maps -0 and +0
  both to 0, so the sign of sin(-0) is not checked there);
- subgroup shuffles of every type (table: u32, f32, i64 only);
- sub-word integers kept in registers across chains of operations, variables, loops and selects
  (normalisation between operations);
- rounding ops at half-integers near 2^(p-1);
- 64-bit and signed atomics on workgroup (shared) memory;
- fixpoint steps that copy a NaN (change detection, rounds);
- a workgroup barrier after some invocations returned (defined by docs/semantics.md).

NaN results are compared as "any NaN" (docs/semantics.md: sign and payload unspecified), except
where a test says otherwise.
"""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.ir import DataType as D

pytestmark = pytest.mark.gpu

GPU_NAME = "cuda"
B = ir.BufferDecl
i_ = ir.var("i")
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
INTS = (D.U8, D.U16, D.U32, D.U64, D.I8, D.I16, D.I32, D.I64)
FLOATS = (D.F16, D.BF16, D.F32, D.F64)


@pytest.fixture(scope="module")
def gpu():
    try:
        return vn.get_backend(GPU_NAME)
    except Exception as e:  # noqa: BLE001 - say why and skip, like the suite's gpu tests
        pytest.skip(f"backend {GPU_NAME!r} not usable: {e}")


@pytest.fixture(scope="module")
def ref():
    return vn.get_backend("reference")


# ---- host values -------------------------------------------------------------------------------

def f32_bits_to_bf16_exact(bits32: int) -> int:
    assert bits32 & 0xFFFF == 0
    return bits32 >> 16


def to_bf16_bits(x: float) -> int:
    """Nearest-even bf16 bits of a Python float (through f32, as the IR does)."""
    from vyre_numba.ir.types import _f32_to_bf16
    with np.errstate(all="ignore"):
        return int(_f32_to_bf16(np.array([x], np.float32))[0])


def host(dt: D, vals) -> np.ndarray:
    """Host array of dt from Python values (floats rounded to dt; ints wrapped; bf16 as bits)."""
    with np.errstate(all="ignore"):
        if dt is D.BF16:
            return np.array([to_bf16_bits(float(v)) for v in vals], np.uint16)
        if dt is D.BOOL:
            return np.array([int(v) for v in vals], np.uint32)
        if dt.is_int:
            return np.array([ir.wrap_int(int(v), dt) for v in vals], dt.storage)
        return np.array([float(v) for v in vals], np.float64).astype(dt.storage)


def host_bits(dt: D, bits) -> np.ndarray:
    """Host array of float type dt from raw bit patterns."""
    u = np.array(list(bits), UINT[dt.bits])
    return u if dt is D.BF16 else u.view(dt.storage)


def neighbours(dt: D, x: float) -> list[int]:
    """Bit patterns of x rounded to float type dt and of its two neighbours (finite ones)."""
    if dt is D.BF16:
        b = to_bf16_bits(x)
    else:
        with np.errstate(all="ignore"):
            b = int(np.array([x], np.float64).astype(dt.storage).view(UINT[dt.bits])[0])
    out = [b]
    sign = 1 << (dt.bits - 1)
    exp_mask = {16: 0x7C00 if dt is D.F16 else 0x7F80, 32: 0x7F800000, 64: 0x7FF0000000000000}[dt.bits]
    if (b & exp_mask) != exp_mask and (b & ~sign):  # finite nonzero
        out += [b - 1, b + 1]
    return out


# ---- programs and comparison --------------------------------------------------------------------

def elementwise(name: str, in_types, outs, wg: int = 64) -> ir.Program:
    """out_k[i] = fn_k(*loads) under `if i < buf_len(out_k)`."""
    bufs = [B.read(f"a{k}", k, t) for k, t in enumerate(in_types)]
    loads = [ir.load(f"a{k}", i_) for k in range(len(in_types))]
    body = [ir.let("i", ir.gid(0))]
    for k, (oname, t, fn) in enumerate(outs):
        bufs.append(B.output(oname, len(in_types) + k, t))
        body.append(ir.if_(i_ < ir.buf_len(oname), [ir.store(oname, i_, fn(*loads))]))
    return ir.Program(bufs, wg, body, name=name)


def _bits(dt: D, a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(a)).reshape(-1)
    if dt is D.BF16 or dt is D.BOOL:
        return a.astype(np.uint64)
    return a.view(UINT[dt.bits]).astype(np.uint64)


def _isnan(dt: D, b: np.ndarray) -> np.ndarray:
    e, m = {D.F16: (0x7C00, 0x3FF), D.BF16: (0x7F80, 0x7F), D.F32: (0x7F800000, 0x7FFFFF),
            D.F64: (0x7FF0000000000000, (1 << 52) - 1)}[dt]
    return ((b & np.uint64(e)) == np.uint64(e)) & ((b & np.uint64(m)) != 0)


def _show(dt: D, bits: int) -> str:
    if dt is D.BOOL:
        return str(bits)
    if dt.is_int:
        return f"{ir.wrap_int(bits, dt)} (0x{bits:0{dt.bits // 4}x})"
    if dt is D.BF16:
        v = float(np.array([bits << 16], np.uint32).view(np.float32)[0])
    else:
        v = float(np.array([bits], UINT[dt.bits]).view(dt.storage)[0])
    return f"{v!r} (0x{bits:0{dt.bits // 4}x})"


def run_both(gpu, ref, program, inputs, *, sizes=None, config=None):
    g = gpu.dispatch(program, [a.copy() for a in inputs], config, sizes=sizes)
    r = ref.dispatch(program, [a.copy() for a in inputs], config, sizes=sizes)
    return g, r


def assert_same(program: ir.Program, inputs, got, want, *, nan_exact: bool = False, what: str = "") -> None:
    problems = []
    for decl, g, w in zip(program.outputs, got, want):
        dt = decl.dtype
        gb, wb = _bits(dt, g), _bits(dt, w)
        if gb.shape != wb.shape:
            problems.append(f"{decl.name}: shape {gb.shape} on {GPU_NAME}, {wb.shape} on reference")
            continue
        same = gb == wb
        if dt.is_float and not nan_exact:
            same |= _isnan(dt, gb) & _isnan(dt, wb)
        bad = np.flatnonzero(~same)
        if bad.size:
            lines = [f"{program.name}{what}: output {decl.name!r} ({dt}): {bad.size} of {gb.size} differ"]
            for k in bad[:6]:
                k = int(k)
                ins = ", ".join(f"{b.name}={_show(b.dtype, int(_bits(b.dtype, a)[k]))}"
                                for b, a in zip(program.inputs, inputs) if k < np.asarray(a).size)
                lines.append(f"    [{k}] {GPU_NAME}: {_show(dt, int(gb[k]))}   reference: {_show(dt, int(wb[k]))}"
                             f"   inputs: {ins}")
            problems.append("\n".join(lines))
    if problems:
        raise AssertionError("\n".join(problems))


def check(gpu, ref, program, inputs, **kw):
    nan_exact = kw.pop("nan_exact", False)
    what = kw.pop("what", "")
    g, r = run_both(gpu, ref, program, inputs, **kw)
    assert_same(program, inputs, g, r, nan_exact=nan_exact, what=what)
    return g, r


# ==== 1. signalling / negative / payload NaNs ======================================================

NAN_BITS = {
    D.F32: [0x7F800001, 0xFF800001, 0x7FA00000, 0x7FC00001, 0xFFC00000, 0x7FFFFFFF, 0x7FC00000],
    D.F64: [0x7FF0000000000001, 0xFFF0000000000001, 0x7FF4000000000000, 0x7FF8000000000001,
            0xFFF8000000000000, 0x7FF8000000000000],
    D.F16: [0x7C01, 0xFC01, 0x7D00, 0x7E01, 0xFE00, 0x7E00],
    D.BF16: [0x7F81, 0xFF81, 0x7FA0, 0x7FC1, 0xFFC0, 0x7FC0],
}
OTHER = [0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, 2.5, -0.5]


@pytest.mark.gpu
@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_signalling_and_payload_nans(gpu, ref, dt):
    nans = NAN_BITS[dt]
    others = [int(_bits(dt, host(dt, [v]))[0]) for v in OTHER]
    a_bits = [x for x in nans for _ in others] + [y for y in others for _ in nans] + nans * len(nans)
    b_bits = [y for _ in nans for y in others] + [x for _ in others for x in nans] + [x for x in nans for _ in nans]
    a, b = host_bits(dt, a_bits), host_bits(dt, b_bits)
    outs = [(op, dt, lambda x, y, op=op: ir.binary(op, x, y)) for op in ("min", "max", "add", "mul", "absdiff")]
    outs += [(op, D.BOOL, lambda x, y, op=op: ir.binary(op, x, y)) for op in ("eq", "ne", "lt", "ge")]
    outs += [(op, D.BOOL, lambda x, y, op=op: ir.unary(op, x)) for op in ("isnan", "isinf", "isfinite")]
    outs += [(f"u_{op}", dt, lambda x, y, op=op: ir.unary(op, x)) for op in ("sign", "floor", "round", "sqrt", "neg", "abs")]
    outs += [(f"to_{t}", t, lambda x, y, t=t: ir.cast(x, t)) for t in (D.I32, D.U8, D.I64, D.U64, D.BOOL) + FLOATS if t is not dt]
    outs += [("fma", dt, lambda x, y: ir.fma(x, y, y))]
    check(gpu, ref, elementwise(f"nans_{dt}", [dt, dt], outs), [a, b])


# ==== 2. float -> int at every integer type's bounds ==========================================================

@pytest.mark.gpu
@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_float_to_int_bounds(gpu, ref, src):
    cand = [0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.0, -1.0, 1.5, -1.5, math.inf, -math.inf]
    for t in INTS:
        for v in (t.max, t.max + 1, t.max + 0.5, t.min, t.min - 1, t.min - 0.5, t.max // 2 + 0.5):
            cand.append(float(v))
    bits = []
    for v in cand:
        for b in neighbours(src, v):
            if b not in bits:
                bits.append(b)
    bits += [NAN_BITS[src][0], NAN_BITS[src][3]]
    a = host_bits(src, bits)
    outs = [(f"to_{t}", t, lambda x, t=t: ir.cast(x, t)) for t in INTS]
    check(gpu, ref, elementwise(f"f2i_{src}", [src], outs), [a])


# ==== 3. int -> float at rounding ties ==============================================================================

def _ties(t: D) -> list[int]:
    vals = {0, 1, t.max, t.min, t.max - 1, t.min + 1}
    for p in (8, 11, 24, 53):
        for k in range(p, t.bits):
            half = 1 << (k - p)  # half an ulp of 2^k at precision p
            for base in (1 << k, (1 << k) + 2 * half, (1 << (k + 1)) - 2 * half):
                for off in (half, half - 1, half + 1, 3 * half if 3 * half < (1 << k) else half):
                    for s in ((1, -1) if t.is_signed else (1,)):
                        v = s * (base + off)
                        if t.min <= v <= t.max:
                            vals.add(v)
    return sorted(vals)


@pytest.mark.gpu
@pytest.mark.parametrize("src", (D.U64, D.I64, D.U32, D.I32, D.U16, D.I16), ids=str)
def test_int_to_float_ties(gpu, ref, src):
    a = host(src, _ties(src))
    outs = [(f"to_{t}", t, lambda x, t=t: ir.cast(x, t)) for t in FLOATS]
    check(gpu, ref, elementwise(f"i2f_{src}", [src], outs), [a], nan_exact=True)


# ==== 4. fma: f64 extremes, double-rounding detectors for f32 / f16 / bf16 ==============================================

def _f64_fma_cases(n: int = 600) -> tuple[list, list, list]:
    rng = np.random.default_rng(39)

    def dbl(lo, hi, size):
        m = rng.integers(1 << 52, 1 << 53, size=size, dtype=np.int64).astype(np.float64)
        few = rng.random(size) < 0.3
        m[few] = (1 << 52) + (rng.integers(0, 8, size=few.sum()) << rng.integers(0, 49, size=few.sum())).astype(np.float64)
        return np.ldexp(m, rng.integers(lo, hi + 1, size=size) - 52) * rng.choice([-1.0, 1.0], size=size)

    k = n // 4
    with np.errstate(all="ignore"):
        # (1) product near overflow, c cancels it (or is its neighbour)
        a1, b1 = dbl(500, 1022, k), dbl(0, 0, k)
        b1 = np.ldexp(b1, (1021 - np.frexp(a1)[1]).clip(-1000, 1000))
        c1 = -(a1 * b1)
        c1[::2] = np.nextafter(c1[::2], np.inf)
        # (2) subnormal results: product ~2^-1000..-1060, c cancels or is subnormal
        a2, b2 = dbl(-600, -450, k), dbl(-560, -420, k)
        c2 = -(a2 * b2)
        c2[1::3] = np.nextafter(c2[1::3], -np.inf)
        c2[2::3] = np.ldexp(rng.integers(1, 1 << 20, size=c2[2::3].size).astype(np.float64), -1074)
        # (3) c far below or far above the product
        a3, b3 = dbl(-300, 300, k), dbl(-300, 300, k)
        c3 = dbl(-1074 + 60, 1000, k)
        # (4) subnormal operands
        a4 = np.ldexp(rng.integers(1, 1 << 52, size=k).astype(np.float64), -1074)
        b4, c4 = dbl(0, 1023, k), dbl(-1022, -900, k)
    A = np.concatenate([a1, a2, a3, a4])
    Bv = np.concatenate([b1, b2, b3, b4])
    C = np.concatenate([c1, c2, c3, c4])
    keep = np.isfinite(A) & np.isfinite(Bv) & np.isfinite(C)
    extra = [(2.0 ** 1023, 2.0, -(2.0 ** 1023) * 1.0), (1.7976931348623157e308, 1.0000000000000002, -1e292),
             (2.0 ** -537, 2.0 ** -537, -(2.0 ** -1074)), (2.0 ** -537, 2.0 ** -538, 0.0), (-(2.0 ** -600), 2.0 ** -600, -0.0),
             (1 + 2.0 ** -52, 1 - 2.0 ** -53, -1.0), (2.0 ** -1074, 0.5, 0.0), (2.0 ** -1074, -0.5, -0.0),
             (3 * 2.0 ** -1075 * 2, 0.5, 0.0)]
    return (list(A[keep]) + [x for x, _, _ in extra], list(Bv[keep]) + [y for _, y, _ in extra],
            list(C[keep]) + [z for _, _, z in extra])


def _detectors(dt: D, n: int = 200_000, want: int = 150) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Operands of dt where a double rounding gives another result than the single rounding of
    a*b + c: for f16/bf16 an f32 fma then a rounding to dt, or separate f32 mul and add; for
    f32 the f64 value a*b + c rounded to f32, or separate mul and add. Uses the reference's fma
    (checked against exact rationals in a review's fuzzing, 220,000 f64 cases and more)."""
    from vyre_numba.ir import ops
    rng = np.random.default_rng({D.F16: 1, D.BF16: 2, D.F32: 3}[dt])
    lo, hi = {D.F16: (-14, 7), D.BF16: (-120, 120), D.F32: (-120, 120)}[dt]
    with np.errstate(all="ignore"):
        def draw(elo, ehi):
            v = np.ldexp(rng.uniform(1, 2, n), rng.integers(elo, ehi, n)) * rng.choice([-1.0, 1.0], n)
            return ops.cast(D.F64, dt)(v)
        a, b = draw(lo, hi), draw(lo, hi)
        # c near -a*b (cancellation) or a small tail that decides a tie
        p = a.astype(np.float64) * b.astype(np.float64)
        c = ops.cast(D.F64, dt)(np.where(rng.random(n) < 0.5, -p * (1 + rng.choice([2.0 ** -9, -(2.0 ** -9), 2.0 ** -4], n)),
                                         p * np.ldexp(1.0, -rng.integers(9, 30, n).astype(np.int64))))
        single = ops.fma(dt)(a, b, c)
        if dt is D.F32:
            twice = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)
            split = (a * b) + c
        else:
            a32, b32, c32 = (x.astype(np.float32) for x in (a, b, c))
            twice = ops.cast(D.F32, dt)(ops.fma(D.F32)(a32, b32, c32))
            split = ops.cast(D.F32, dt)(ops.cast(D.F32, dt)(a32 * b32).astype(np.float32) + c32)
        bad = np.flatnonzero(np.isfinite(single) & ((twice != single) | (split != single)))[:want]
    return a[bad], b[bad], c[bad]


def _store_float(dt: D, x: np.ndarray) -> np.ndarray:
    from vyre_numba.ir.types import _f32_to_bf16
    return _f32_to_bf16(x) if dt is D.BF16 else x.astype(dt.storage)


@pytest.mark.gpu
def test_fma_f64_extremes(gpu, ref):
    A, Bv, C = (np.array(v, np.float64) for v in _f64_fma_cases())
    p = elementwise("fma_f64_extremes", [D.F64] * 3, [("out", D.F64, ir.fma)])
    check(gpu, ref, p, [A, Bv, C], nan_exact=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", (D.F32, D.F16, D.BF16), ids=str)
def test_fma_double_rounding_detectors(gpu, ref, dt):
    a, b, c = _detectors(dt)
    assert a.size >= 20, f"the search found only {a.size} detectors for {dt}"
    special = {
        D.F32: [(2.0 ** 64, 2.0 ** 64, -3.4028234663852886e38), (2.0 ** -75, 2.0 ** -75, 2.0 ** -149),
                (2.0 ** -75, -(2.0 ** -75), 2.0 ** -149), (1.5 * 2.0 ** -75, 2.0 ** -74, 0.0)],
        D.F16: [(256.0, 256.0, -65504.0), (2.0 ** -12, 2.0 ** -13, 2.0 ** -24), (2.0 ** -12, -(2.0 ** -13), 2.0 ** -24),
                (-(2.0 ** -12), 2.0 ** -13, -0.0), (1.5 * 2.0 ** -13, 2.0 ** -12, 0.0), (255.875, 256.0, -65504.0)],
        D.BF16: [(2.0 ** 64, 2.0 ** 64, -3.3895313892515355e38), (2.0 ** -67, 2.0 ** -67, 2.0 ** -133),
                 (2.0 ** -67, -(2.0 ** -67), 2.0 ** -133), (1.5 * 2.0 ** -67, 2.0 ** -67, 0.0)],
    }[dt]
    from vyre_numba.ir import ops
    with np.errstate(all="ignore"):
        sa, sb, sc = (ops.cast(D.F64, dt)(np.array([s[j] for s in special])) for j in range(3))
    A, Bv, C = (_store_float(dt, np.concatenate([x, y])) for x, y in ((a, sa), (b, sb), (c, sc)))
    p = elementwise(f"fma_detect_{dt}", [dt] * 3, [("out", dt, ir.fma),
                                                  ("mul_add", dt, lambda x, y, z: (x * y) + z)])
    check(gpu, ref, p, [A, Bv, C], nan_exact=True)


# ==== 5. transcendental special values, bit for bit ===================================================================

@pytest.mark.gpu
@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_transcendental_special_values_exact(gpu, ref, dt):
    # op: inputs whose result docs/semantics.md makes exact (zeros, infinities, NaN, overflow and
    # underflow); other results are within its ULP bound (libdevice's f64 log2(8.0) is
    # 2.9999999999999996, one ULP from 3), which the program table checks
    cases = {
        "sin": [0.0, -0.0, math.inf, -math.inf, math.nan],
        "tan": [0.0, -0.0, math.inf, -math.inf, math.nan],
        "cos": [0.0, -0.0, math.inf, math.nan],
        "exp": [0.0, -0.0, math.inf, -math.inf, math.nan, -1e4, 1e4],
        "exp2": [0.0, -0.0, math.inf, -math.inf, math.nan, -1e4, 1e4],
        "log": [0.0, -0.0, 1.0, math.inf, -1.0, -math.inf, math.nan],
        "log2": [0.0, -0.0, 1.0, math.inf, -1.0, -math.inf, math.nan],
    }
    width = max(len(v) for v in cases.values())
    a = host(dt, [0.0] * width)
    bufs = [B.read("a", 0, dt)]
    body = [ir.let("i", ir.gid(0))]
    inputs = []
    for k, (op, vals) in enumerate(cases.items()):
        vals = vals + [vals[0]] * (width - len(vals))
        inputs.append(host(dt, vals))
        bufs.insert(k + 1, B.read(f"x_{op}", k + 1, dt))
    for k, op in enumerate(cases):
        bufs.append(B.output(op, len(cases) + 1 + k, dt))
        body.append(ir.if_(i_ < ir.buf_len(op), [ir.store(op, i_, ir.unary(op, ir.load(f"x_{op}", i_)))]))
    p = ir.Program(bufs, 32, body, name=f"transc_{dt}")
    check(gpu, ref, p, [a] + inputs)


# ==== 6. subgroup shuffles of every type =================================================================================

@pytest.mark.gpu
def test_subgroup_shuffle_every_type(gpu, ref):
    n, wg = 96, 48  # two workgroups of a full and a 16-lane subgroup
    types = (D.U8, D.I8, D.U16, D.I16, D.U64, D.I32, D.F16, D.BF16, D.F64, D.BOOL)
    rng = np.random.default_rng(6)
    inputs, bufs = [], []
    for k, t in enumerate(types):
        if t is D.BOOL:
            inputs.append(rng.choice(np.array([0, 1, 2, 0x80000000], np.uint32), n))
        elif t.is_int:
            inputs.append(host(t, [t.min, t.max, -1, 0] + rng.integers(-(2 ** 62), 2 ** 62, n - 4).tolist()))
        else:
            inputs.append(host(t, [-0.0, math.inf, math.nan, 65504.0] + rng.normal(0, 100, n - 4).tolist()))
        bufs.append(B.read(f"v{k}", k, t))
    sl = ir.var("sl")
    lanes = {"x1": lambda: sl ^ ir.u32(1), "p7": lambda: sl + ir.u32(7), "rev": lambda: ir.u32(31) - sl,
             "big": lambda: ir.u32(0xFFFFFFFF), "l20": lambda: ir.u32(20)}
    body = [ir.let("i", ir.gid(0)), ir.let("sl", ir.subgroup_local_id()), ir.let("j", ir.select(i_ < ir.u32(n), i_, ir.u32(0)))]
    slot = len(types)
    stores = []
    for k, t in enumerate(types):
        for lname, lane in lanes.items():
            name = f"s_{t}_{lname}"
            bufs.append(B.output(name, slot, t))
            slot += 1
            tmp = f"t_{k}_{lname}"
            body.append(ir.let(tmp, ir.subgroup_shuffle(ir.load(f"v{k}", ir.var("j")), lane())))
            stores.append(ir.store(name, i_, ir.var(tmp)))
    bufs.append(B.output("ballot", slot, D.U32))
    body.append(ir.let("bal", ir.subgroup_ballot(ir.load(f"v{len(types) - 1}", ir.var("j")))))
    stores.append(ir.store("ballot", i_, ir.var("bal")))
    body.append(ir.if_(i_ < ir.u32(n), stores))
    p = ir.Program(bufs, wg, body, name="shuffle_types")
    sizes = {b.name: n for b in p.outputs}
    check(gpu, ref, p, inputs, sizes=sizes)


# ==== 7. sub-word integers across chains, variables, loops and selects ===================================================

def _int_vals(t: D, n: int, seed: int) -> list[int]:
    edges = [0, 1, 2, 3, t.bits - 1, t.bits, t.bits + 1, t.max, t.max - 1, t.min, t.min + 1, -1, -2, 7, -7, 100, 0x55]
    rng = np.random.default_rng(seed)
    return [ir.wrap_int(v, t) for v in edges] + [ir.wrap_int(int(v), t) for v in rng.integers(-(2 ** 63), 2 ** 63 - 1, n)]


@pytest.mark.gpu
@pytest.mark.parametrize("t", (D.U8, D.I8, D.U16, D.I16, D.I32, D.U32), ids=str)
def test_chained_ops_keep_sub_word_values_normalised(gpu, ref, t):
    xs = _int_vals(t, 60, 1)
    a = [x for x in xs[:17] for _ in range(17)] + xs[17:]
    b = [y for _ in range(17) for y in xs[:17]] + _int_vals(t, 60, 2)[17:]
    A, Bv = host(t, a), host(t, b)
    c = lambda v: ir.lit(v, t)  # noqa: E731
    m1 = ir.cast(ir.u32(0xFFFFFFFF), t) if not t.is_signed else ir.cast(ir.i64(-1), t)
    chains = {
        "sum_shr": lambda x, y: (x + y) >> c(1),
        "prod_shr": lambda x, y: ir.binary("mul", x, y) >> c(3),
        "neg_shr": lambda x, y: ir.unary("neg", x) >> c(2),
        "not_shr": lambda x, y: ir.unary("bitnot", x) >> c(1),
        "sum_lt": lambda x, y: ir.cast((x + y) < x, t),
        "diff_gt": lambda x, y: ir.cast((x - y) > y, t),
        "clz_sum": lambda x, y: ir.cast(ir.unary("clz", x + y), t),
        "ctz_prod": lambda x, y: ir.cast(ir.unary("ctz", ir.binary("mul", x, y)), t),
        "pop_not": lambda x, y: ir.cast(ir.unary("popcount", ir.unary("bitnot", x)), t),
        "pop_neg": lambda x, y: ir.cast(ir.unary("popcount", ir.unary("neg", x)), t),
        "rev_neg": lambda x, y: ir.unary("reverse_bits", ir.unary("neg", x)),
        "rev_shl": lambda x, y: ir.unary("reverse_bits", ir.binary("shl", x, y)),
        "rotl_sum": lambda x, y: ir.binary("rotl", x + y, y),
        "rotr_not": lambda x, y: ir.binary("rotr", ir.unary("bitnot", x), y - c(1)),
        "div_m1": lambda x, y: ir.binary("div", x + y, m1),
        "mod_m1": lambda x, y: ir.binary("mod", x - y, m1),
        "div_sum": lambda x, y: ir.binary("div", x * y, x + y),
        "mulhi_sum": lambda x, y: ir.binary("mul_high", x + y, x - y),
        "sat_sum": lambda x, y: ir.binary("saturating_add", x + y, y),
        "satsub_not": lambda x, y: ir.binary("saturating_sub", ir.unary("bitnot", x), y),
        "abs_sum": lambda x, y: ir.unary("abs", x + y),
        "sign_diff": lambda x, y: ir.unary("sign", x - y),
        "absdiff_prod": lambda x, y: ir.binary("absdiff", x * y, x + y),
        "min_sum": lambda x, y: ir.binary("min", x + y, ir.unary("neg", y)),
        "wide_sum": lambda x, y: ir.cast(ir.cast(x + y, D.I64) + ir.cast(x * y, D.I64), t),
        "u64_sum": lambda x, y: ir.cast(ir.cast(x * y, D.U64) >> ir.u64(1), t),
        "f32_sum": lambda x, y: ir.cast(ir.cast(x + y, D.F32), t),
        "sel_sum": lambda x, y: ir.select((x + y).eq(x - y), x * y, ir.unary("bitnot", y)) >> c(1),
        "bool_u8": lambda x, y: ir.cast(ir.cast((x + y) < c(0) if t.is_signed else (x + y) < y, D.U8), t),
    }
    outs = [(name, t, fn) for name, fn in chains.items()]
    # the same through variables and a loop (register reuse across statements)
    bufs = [B.read("a0", 0, t), B.read("a1", 1, t)] + [B.output(name, 2 + k, t) for k, (name, _, _) in enumerate(outs)]
    bufs.append(B.output("loop_acc", 2 + len(outs), t))
    bufs.append(B.output("loop_wide", 3 + len(outs), D.I64))
    x, y = ir.var("x"), ir.var("y")
    body = [ir.let("i", ir.gid(0)),
            ir.if_(i_ >= ir.buf_len("a0"), [ir.return_()]),
            ir.let("x", ir.load("a0", i_)), ir.let("y", ir.load("a1", i_))]
    body += [ir.store(name, i_, fn(x, y)) for name, _, fn in outs]
    body += [ir.let("acc", x),
             ir.loop("k", ir.u32(0), ir.u32(5), [
                 ir.assign("acc", ir.binary("mul", ir.var("acc"), c(3)) + y),
                 ir.assign("acc", ir.unary("bitnot", ir.var("acc")) ^ (ir.var("acc") >> c(1))),
                 ir.assign("y", ir.select(ir.var("acc") < y, ir.var("acc") + y, y - ir.var("acc")))]),
             ir.store("loop_acc", i_, ir.var("acc")),
             ir.store("loop_wide", i_, ir.cast(ir.var("acc"), D.I64) + ir.cast(y, D.I64))]
    p = ir.Program(bufs, 64, body, name=f"chains_{t}")
    sizes = {b.name: A.size for b in p.outputs}
    check(gpu, ref, p, [A, Bv], sizes=sizes)


# ==== 8. rounding ops at half-integers near 2^(p-1), signed zeros ======================================================

@pytest.mark.gpu
@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_round_floor_ceil_trunc_near_precision(gpu, ref, dt):
    p = {D.F16: 11, D.BF16: 8, D.F32: 24, D.F64: 53}[dt]
    vals = [-0.5, -0.4, 0.5, 0.4, -1.5, -2.5, 2.5, 1.5, -0.0, 0.0]
    for k in (p - 3, p - 2, p - 1):
        for j in range(-3, 4):
            v = 2.0 ** k + j + 0.5
            vals += [v, -v]
    vals += [2.0 ** (p - 1) - 0.5, -(2.0 ** (p - 1) - 0.5), 2.0 ** p - 1, 2.0 ** p]
    bits = []
    for v in vals:
        bits += neighbours(dt, v)
    a = host_bits(dt, bits)
    outs = [(op, dt, lambda x, op=op: ir.unary(op, x)) for op in ("round", "floor", "ceil", "trunc")]
    outs += [("round_mul", dt, lambda x: ir.unary("round", x * ir.lit(3.0, dt)))]
    check(gpu, ref, elementwise(f"rounding_{dt}", [dt], outs), [a], nan_exact=True)


# ==== 9. atomics on workgroup (shared) memory, 64-bit and signed =========================================================

@pytest.mark.gpu
@pytest.mark.parametrize("t", (D.I64, D.U64, D.I32), ids=str)
def test_shared_atomics(gpu, ref, t):
    wg = 64
    n = 2 * wg
    vals = host(t, _int_vals(t, n, 9)[:n])
    l = ir.var("l")
    bufs = [B.read("v", 0, t), B.output("old", 1, t), B.output("cas_old", 2, t), B.output("final", 3, t, count=2 * 8),
            B.workgroup("sh", 8, t), B.workgroup("own", wg, t)]
    v = ir.var("v")
    body = [ir.let("i", ir.gid(0)), ir.let("l", ir.lid(0)), ir.let("v", ir.load("v", i_)),
            ir.if_(l.eq(ir.u32(0)), [ir.store("sh", ir.u32(1), ir.lit(t.max, t)), ir.store("sh", ir.u32(3), ir.lit(-1 if t.is_signed else t.max, t)),
                                      ir.store("sh", ir.u32(2), ir.lit(t.min, t))]),
            ir.store("own", l, v),
            ir.barrier("workgroup"),
            ir.let("o0", ir.atomic("add", "sh", ir.u32(0), v)),
            ir.let("o1", ir.atomic("min", "sh", ir.u32(1), v)),
            ir.let("o2", ir.atomic("max", "sh", ir.u32(2), v)),
            ir.let("o3", ir.atomic("and", "sh", ir.u32(3), v)),
            ir.let("o4", ir.atomic("or", "sh", ir.u32(4), v)),
            ir.let("o5", ir.atomic("xor", "sh", ir.u32(5), v)),
            ir.let("mine", ir.atomic("exchange", "own", l, ir.unary("bitnot", v))),
            ir.let("cas", ir.atomic("compare_exchange", "own", l, v, ir.unary("bitnot", v))),
            ir.let("oob", ir.atomic("add", "own", ir.u32(wg) + l, v)),
            ir.store("old", i_, ir.var("mine") + ir.var("oob")),
            ir.store("cas_old", i_, ir.var("cas")),
            ir.barrier("workgroup"),
            ir.if_(l < ir.u32(8), [ir.store("final", ir.workgroup_id(0) * ir.u32(8) + l, ir.load("sh", l))])]
    p = ir.Program(bufs, wg, body, name=f"shared_atomics_{t}")
    check(gpu, ref, p, [vals], sizes={"old": n, "cas_old": n})


# ==== 10. fixpoint steps that store back a NaN they loaded ===============================================================

@pytest.mark.gpu
@pytest.mark.parametrize("dt", (D.BF16, D.F16, D.F32, D.F64), ids=str)
def test_fixpoint_copy_of_a_nan_is_no_change(gpu, ref, dt):
    """docs/semantics.md: storing the value already there is no change, NaN over the same NaN is
    none. x[i] = x[i] must converge after one round on both backends, leaving the bits alone; but
    an f16 NaN is stored as 0x7FFF (f16 values sit in f32 registers on the GPU, whose conversion
    back makes every NaN that one), so there a NaN of other bits changes once, on both."""
    from vyre_numba import fixpoint
    start = host_bits(dt, NAN_BITS[dt] + [int(_bits(dt, host(dt, [1.0]))[0])])
    p = ir.Program([B.read_write("x", 0, dt)], 64,
                   [ir.let("i", ir.gid(0)), ir.if_(i_ < ir.buf_len("x"), [ir.store("x", i_, ir.load("x", i_))])],
                   name=f"copy_{dt}")
    cpu = start.copy()
    rc = fixpoint.run(p, cpu.size, [cpu], backend=ref, max_rounds=10, progress=False)
    dev = gpu.upload(start.copy())
    rg = fixpoint.run(p, start.size, [dev], backend=gpu, max_rounds=10, mode="relaunch", progress=False)
    got = np.asarray(gpu.download(dev))
    msg = (f"copy step on {dt}: rounds {GPU_NAME}={rg.rounds} reference={rc.rounds}; start bits "
           f"{[hex(int(v)) for v in _bits(dt, start)]}, {GPU_NAME} bits {[hex(int(v)) for v in _bits(dt, got)]}, "
           f"reference bits {[hex(int(v)) for v in _bits(dt, cpu)]}")
    assert (rg.rounds, rg.converged) == (rc.rounds, rc.converged), "backends disagree: " + msg
    # and both as docs/semantics.md says (the reference had quietened a bf16 signalling NaN it
    # stored back, 0x7F81 -> 0x7FC1, and so counted a change)
    want = _bits(dt, start).copy()
    if dt is D.F16:
        want[np.isnan(start)] = 0x7FFF
    assert (rc.rounds, rc.converged) == (1 + (not np.array_equal(want, _bits(dt, start))), True), \
        "not as documented: " + msg
    assert np.array_equal(_bits(dt, got), want) and np.array_equal(_bits(dt, cpu), want), msg


# ==== 11. workgroup barrier after an early return (in a subprocess: a hang must not hang pytest) =====================

_BARRIER_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, vyre_numba as vn
    from vyre_numba import ir
    B, i = ir.BufferDecl, ir.var("i")
    out = []
    for cut in (40, 32, 1):   # a partial warp, a whole warp, all but one invocation return first
        p = ir.Program([B.read("a", 0, "u32"), B.output("o", 1, "u32"), B.workgroup("sh", 64, "u32")], 64, [
            ir.let("i", ir.gid(0)), ir.let("l", ir.lid(0)),
            ir.if_(ir.var("l") >= ir.u32(cut), [ir.return_()]),
            ir.store("sh", ir.var("l"), ir.load("a", i) + ir.u32(1)),
            ir.barrier("workgroup"),
            ir.store("o", i, ir.load("sh", (ir.var("l") + ir.u32(1)) % ir.u32(cut)) * ir.u32(3))], name=f"ret_bar_{cut}")
        a = np.arange(256, dtype=np.uint32) * 7
        (o,) = vn.get_backend(sys.argv[1]).dispatch(p, [a])
        out.append(o.tolist())
    print(repr(out))
""")


@pytest.mark.gpu
def test_workgroup_barrier_after_early_return(ref):
    def run(name):
        r = subprocess.run([sys.executable, "-c", _BARRIER_SCRIPT, name], capture_output=True, text=True, timeout=45)
        assert r.returncode == 0, f"{name}: exit {r.returncode}\n{r.stderr[-3000:]}"
        return r.stdout.strip().splitlines()[-1]
    want = run("reference")
    try:
        got = run(GPU_NAME)
    except subprocess.TimeoutExpired:
        pytest.fail("a workgroup barrier reached by every invocation that had not returned hung on the GPU "
                    "(docs/semantics.md defines it; the emitter writes `ret` then `bar.sync 0`)")
    assert got == want, f"barrier after return: {GPU_NAME} {got[:300]} ... reference {want[:300]} ..."
