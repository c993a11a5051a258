"""vyre_numba.elementwise: one-line elementwise kernels (CuPy's ElementwiseKernel in spirit).

CPU tests run on the reference backend and compare bit for bit with NumPy computed the way the IR
defines (f32 rounding after every operation, wrapping integers) and with hand-built Programs; a
stand-in device backend (host memory behind a `__cuda_array_interface__`) exercises the device-array
path. GPU tests (`gpu` marker) run the same cases on the cuda backend with NumPy, numba, CuPy and
PyTorch arrays and compare bits with the reference backend."""
from __future__ import annotations

import re

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import DispatchError, IRValidationError, VyreError, elementwise, ir
from vyre_numba.reference import ReferenceBackend
from vyre_numba.testing import mismatches

from conftest import assert_fix

R = "reference"


def assert_same_bits(got, want, ulp: int = 0) -> None:
    """Assert `got` has `want`'s dtype, shape and bits (within `ulp` units in the last place)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    bad = mismatches(got.reshape(-1), want.reshape(-1), ulp=ulp)
    assert bad.size == 0, f"{bad.size} mismatches, first at {bad[:5]}: {got.reshape(-1)[bad[:5]]} != " \
                          f"{want.reshape(-1)[bad[:5]]}"


def f32(rng, n, nan=False):
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    if nan and n >= 4:
        x[::7] = np.nan
        x[1] = np.inf
        x[2] = -np.inf
    return x


# ---- results on the reference backend -------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 255, 256, 257, 1000, 4099])
def test_saxpy_matches_numpy_bit_for_bit(rng, n):
    saxpy = elementwise("f32 a, f32 x, f32 y", "f32 out", "a * x + y", name="saxpy")
    a, x, y = np.float32(1.7), f32(rng, n, nan=True), f32(rng, n)
    got = saxpy(a, x, y, backend=R)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (n,)
    assert_same_bits(got, a * x + y)  # two f32 roundings, no fused multiply-add


def test_the_program_is_the_one_written_by_hand(rng):
    saxpy = elementwise("f32 a, f32 x, f32 y", "f32 out", "a * x + y", name="saxpy")
    i = ir.var("i")
    hand = ir.Program(
        [ir.BufferDecl.uniform("a", 0, "f32", 1), ir.BufferDecl.read("x", 1, "f32"), ir.BufferDecl.read("y", 2, "f32"),
         ir.BufferDecl.output("out", 3, "f32")], 256,
        [ir.let("i", ir.gid(0)),
         ir.if_(i < ir.buf_len("out"), [ir.store("out", i, ir.load("a", 0) * ir.load("x", i) + ir.load("y", i))])],
        name="saxpy")
    x, y = f32(rng, 1000, nan=True), f32(rng, 1000)
    (want,) = vn.get_backend(R).dispatch(hand, [np.float32([-3.25]), x, y])
    assert_same_bits(saxpy(np.float32(-3.25), x, y, backend=R), want)
    p = saxpy.program(np.float32(1), x, y)
    assert [(b.name, b.access.value, str(b.dtype), b.count) for b in p.bound_buffers] == [
        ("a", "uniform", "f32", 1), ("x", "read_only", "f32", 0), ("y", "read_only", "f32", 0),
        ("out", "write_only", "f32", 0)]
    assert p.workgroup_size == (256, 1, 1) and p.name == "saxpy"


def test_string_and_function_forms_build_the_same_program():
    s = elementwise("f32 a, f32 x, f32 y", "f32 out", "a * x + y", name="saxpy")
    f = elementwise("f32 a, f32 x, f32 y", "f32 out", lambda a, x, y: a * x + y, name="saxpy")
    assert s.program().digest() == f.program().digest()
    two = elementwise("i32 a, i32 b", "i32 s, i32 d", lambda a, b: {"d": a - b, "s": a + b})
    assert two.program().digest() == elementwise("i32 a, i32 b", "i32 s, i32 d", "a + b, a - b").program().digest()


def test_programs_are_cached_per_signature_and_show_their_ptx():
    k = elementwise("f32 a, f32 x", "f32 y", "a * x", name="scale")
    x = np.ones(3, np.float32)
    assert k.program() is k.program() is k.program(x, x)
    p = k.program(2.0, x)
    assert p is k.program(np.float32(5), x) and p is not k.program()
    assert p.buffer("a").access.value == "uniform"
    ptx = k.ptx(2.0, x, sm=90)
    assert ".entry scale" in ptx and "mul.rn.f32" in ptx
    assert "scale(f32 a, f32 x) -> (f32 y)" in repr(k)


def test_a_long_operation_shows_where_the_repr_cuts_it():
    """Regression: the operation was cut at 80 characters with no mark, so a constant 12345 read
    as 1234."""
    op = "a * x" + " + x" * 17 + " + 12345"
    r = repr(elementwise("f32 a, f32 x", "f32 out", op, name="k"))
    shown_op = r.split("): ", 1)[1][:-1]
    assert len(shown_op) == 80 and shown_op.endswith("...") and op.startswith(shown_op[:-3])
    assert repr(elementwise("f32 a, f32 x", "f32 out", "a * x", name="k")).endswith(": a * x>")


def test_scalars_broadcast_in_every_form(rng):
    k = elementwise("f32 a, f32 x", "f32 y", "a * x")
    x = f32(rng, 300)
    want = np.float32(2.5) * x
    for a in (2.5, np.float32(2.5), np.float64(2.5), np.array(2.5, np.float32), np.array(2.5), 5 / 2):
        assert_same_bits(k(a, x, backend=R), want)
    ints = elementwise("i64 n, i64 x", "i64 y", "n + x")
    assert_same_bits(ints(2**40, np.arange(5, dtype=np.int64), backend=R), 2**40 + np.arange(5, dtype=np.int64))
    flag = elementwise("bool b, i32 x", "i32 y", "x if b else -x")
    assert_same_bits(flag(True, np.int32([1, 2]), backend=R), np.int32([1, 2]))
    assert_same_bits(flag(False, np.int32([1, 2]), backend=R), np.int32([-1, -2]))


def test_inputs_by_name():
    k = elementwise("f32 a, f32 x", "f32 y", "a - x")
    x = np.float32([1, 2])
    assert_same_bits(k(x=x, a=np.float32(10), backend=R), np.float32([9, 8]))
    assert_same_bits(k(np.float32(10), x=x, backend=R), np.float32([9, 8]))


def test_inputs_named_like_the_calls_keywords_are_refused_and_self_is_taken():
    """Regression (an API review): an input named `out` or `backend` was made, then k(out=x) said
    the input was missing; k(self=x) raised "multiple values for argument 'self'"."""
    for name in ("out", "backend", "sm"):  # sm: k.ptx(..., sm=90)
        one_fix(raises(IRValidationError, elementwise, f"f32 {name}, f32 y", "f32 z", f"{name} + y",
                       match=f"the input '{name}' is named like a keyword of the kernel's calls.*Fix: rename it"))
    k = elementwise("f32 self, f32 b", "f32 out", "self - b")  # an output may be `out`; `self` is no keyword
    x = np.float32([1, 2])
    assert_same_bits(k(self=x, b=np.float32(1), backend=R), np.float32([0, 1]))
    assert k.program(self=x, b=np.float32(1)).name == k.program(x, np.float32(1)).name
    assert ".entry" in k.ptx(self=x, b=np.float32(1), sm=80)


def test_several_outputs_as_a_tuple_and_as_assignments(rng):
    a = rng.integers(-2**31, 2**31, 999, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, 999, dtype=np.int64).astype(np.int32)
    s, d = elementwise("i32 a, i32 b", "i32 s, i32 d", "a + b, a - b")(a, b, backend=R)
    assert_same_bits(s, a + b)
    assert_same_bits(d, a - b)
    k = elementwise("f32 x, f32 y", "f32 h, bool big, f32 t2",
                    "t = x * x + y * y\nh = sqrt(t); big = t > 100 and not isnan(t)\nt2 = t; t2 += 1")
    x, y = f32(rng, 500, nan=True), f32(rng, 500)
    h, big, t2 = k(x, y, backend=R)
    t = x * x + y * y
    assert_same_bits(h, np.sqrt(t))
    assert_same_bits(big, ((t > 100) & ~np.isnan(t)).astype(np.uint32))  # bool outputs are 32-bit words
    assert_same_bits(t2, t + np.float32(1))


def test_empty_arrays_give_empty_outputs():
    k = elementwise("f32 a, f32 x", "f32 y, i32 n", "a * x, i32(x)")
    y, n = k(2.0, np.zeros(0, np.float32), backend=R)
    assert y.shape == (0,) and y.dtype == np.float32 and n.shape == (0,) and n.dtype == np.int32
    y, n = k(2.0, np.zeros((0, 3), np.float32), backend=R)
    assert y.shape == n.shape == (0, 3)
    o = (np.zeros(0, np.float32), np.zeros(0, np.int32))
    assert k(2.0, np.zeros(0, np.float32), out=o, backend=R) is o


def test_shapes_are_kept_and_non_contiguous_host_inputs_are_read(rng):
    k = elementwise("f32 x, f32 y", "f32 z", "x - y")
    x = f32(rng, 24).reshape(2, 3, 4)
    y = f32(rng, 24).reshape(2, 3, 4)
    assert_same_bits(k(x, y, backend=R), x - y)
    xt, yt = x.transpose(2, 0, 1), y.transpose(2, 0, 1)
    assert_same_bits(k(xt, yt, backend=R), xt - yt)


def test_workgroup_size_and_lengths_not_a_multiple_of_it(rng):
    k = elementwise("u32 x", "u32 y", "x * 3 + 1", workgroup=64)
    assert k.program().workgroup_size == (64, 1, 1)
    for n in (1, 63, 64, 65, 1000):
        x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        assert_same_bits(k(x, backend=R), x * np.uint32(3) + np.uint32(1))


def test_nan_and_infinities_pass_through(rng):
    k = elementwise("f32 x", "f32 y, f32 lo, f32 hi, bool nan", "x * 2 + 1, min(x, 0.5), max(x, -0.5, 0.25), isnan(x)")
    x = np.float32([np.nan, np.inf, -np.inf, 1.0, -1.0, 0.0, 3.0])
    y, lo, hi, nan = k(x, backend=R)
    assert_same_bits(y, x * 2 + 1)
    assert_same_bits(lo, np.fmin(x, np.float32(0.5)))  # with one NaN, the other operand
    assert_same_bits(hi, np.fmax(np.fmax(x, np.float32(-0.5)), np.float32(0.25)))
    assert_same_bits(nan, np.isnan(x).astype(np.uint32))


def test_integers_wrap_and_divide_as_c(rng):
    k = elementwise("i32 a, i32 b", "i32 p, i32 q, i32 r, i32 s", "a * b, a / b, a % b, a << b")
    a = np.int32([2**31 - 1, -2**31, 7, -7, 7, -7, 5, 1])
    b = np.int32([2, -1, 2, 2, -2, 0, 0, 33])
    p, q, r, s = k(a, b, backend=R)
    assert_same_bits(p, a * b)  # NumPy int32 arrays wrap too
    assert_same_bits(q, np.int32([2**30 - 1, -2**31, 3, -3, -3, 0, 0, 0]))  # truncates; / 0 gives 0; MIN / -1 = MIN
    assert_same_bits(r, np.int32([1, 0, 1, -1, 1, 0, 0, 1]))  # sign of the dividend; % 0 gives 0
    wide = (a.astype(np.int64) << (b & 31).astype(np.int64)) & 0xFFFFFFFF  # amounts masked to 31, then wrapped
    assert_same_bits(s, wide.astype(np.uint32).view(np.int32))
    u8 = elementwise("u8 x, u8 y", "u8 z", "x + y")
    assert_same_bits(u8(np.uint8([250, 3]), np.uint8([10, 4]), backend=R), np.uint8([4, 7]))


def test_casts_powers_selects_and_comparisons(rng):
    k = elementwise("f32 x, i32 n", "i32 t, f32 c, f32 p, f32 s, bool inside",
                    "i32(x), f32(n) + x, x ** 3 + x ** 0, x if 0 <= x < 10 else -x, (x > 0) & ~(n > 5) | (n == 7)")
    x = np.float32([np.nan, 3e9, -3e9, 2.7, -2.7, 0.0, 11.0, 5.5])
    n = np.int32([1, 2, 3, 4, 5, 6, 7, 8])
    t, c, p, s, inside = k(x, n, backend=R)
    assert_same_bits(t, np.int32([0, 2**31 - 1, -2**31, 2, -2, 0, 11, 5]))  # truncating, saturating; NaN gives 0
    assert_same_bits(c, n.astype(np.float32) + x)
    assert_same_bits(p, x * (x * x) + np.float32(1))  # by squaring: x * (x * x)
    assert_same_bits(s, np.where((x >= 0) & (x < 10), x, -x))
    assert_same_bits(inside, (((x > 0) & ~(n > 5)) | (n == 7)).astype(np.uint32))


def test_functions_match_the_reference_semantics(rng):
    x = f32(rng, 400, nan=True)
    y = f32(rng, 400)
    k = elementwise("f32 x, f32 y", "f32 a, f32 b, f32 c, f32 d, f32 e",
                    "abs(x), fma(x, y, 1.5), where(x < y, x, y), floor(x) + ceil(y) - trunc(x), round(x)")
    a, b, c, d, e = k(x, y, backend=R)
    assert_same_bits(a, np.abs(x))
    want_fma = (x.astype(np.float64) * y.astype(np.float64) + 1.5).astype(np.float32)  # exact in f64, rounded once
    assert_same_bits(b, want_fma)
    assert_same_bits(c, np.where(x < y, x, y))
    with np.errstate(invalid="ignore"):  # inf - inf
        assert_same_bits(d, np.floor(x) + np.ceil(y) - np.trunc(x))
    assert_same_bits(e, np.round(x))  # half to even
    bits = elementwise("u32 v", "u32 p, u32 z, u32 r", "popcount(v), clz(v), rotl(v, u32(4))")
    v = np.uint32([0, 1, 0xF0000001])
    p, z, r = bits(v, backend=R)
    assert_same_bits(p, np.uint32([0, 1, 5]))
    assert_same_bits(z, np.uint32([32, 31, 0]))
    assert_same_bits(r, np.uint32([0, 16, 0x1F]))


def test_out_arrays_are_filled_and_returned(rng):
    k = elementwise("f32 x", "f32 y, f32 z", "x + 1, x - 1")
    x = f32(rng, 10)
    y, z = np.full(10, 7, np.float32), np.full(10, 7, np.float32)
    got = k(x, out=(y, z), backend=R)
    assert got[0] is y and got[1] is z
    assert_same_bits(y, x + 1)
    assert_same_bits(z, x - 1)
    one = elementwise("f32 x", "f32 y", "x * 2")
    o = np.empty(10, np.float32)
    assert one(x, out=o, backend=R) is o
    assert_same_bits(o, x * 2)
    fill = elementwise("f32 v", "f32 y", "v")
    o = np.zeros((2, 2), np.float32)
    fill(np.float32(4), out=o, backend=R)
    assert_same_bits(o, np.full((2, 2), 4, np.float32))


def test_the_default_backend_is_used_when_none_is_named():
    if vn.get_backend().name != "reference":
        pytest.skip("checks the CPU default")
    k = elementwise("f32 x", "f32 y", "x * 2")
    assert_same_bits(k(np.float32([1, 2])), np.float32([2, 4]))
    assert_same_bits(k(np.float32([1, 2]), backend=ReferenceBackend()), np.float32([2, 4]))


def test_torch_cpu_tensors_in_give_tensors_out():
    torch = pytest.importorskip("torch")
    k = elementwise("f32 a, f32 x", "f32 y", "a * x")
    got = k(2.0, torch.arange(4, dtype=torch.float32), backend=R)
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
    assert np.array_equal(got.numpy(), np.float32([0, 2, 4, 6]))


# ---- the device-array path, with a stand-in device backend -------------------------------------------

class FakeDeviceArray:
    """Looks like a numba device array (CAI and copy_to_host); host memory underneath."""

    def __init__(self, host: np.ndarray):
        self.host = host

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.host.shape, "typestr": self.host.dtype.str, "strides": None, "version": 3,
                "data": (self.host.ctypes.data, False)}

    shape = property(lambda self: self.host.shape)
    dtype = property(lambda self: self.host.dtype)

    def reshape(self, shape):
        return FakeDeviceArray(self.host.reshape(shape))

    def copy_to_host(self):
        return self.host.copy()


class ForeignDeviceArray:
    """A CUDA array of some other library: only the CUDA array interface."""

    def __init__(self, host: np.ndarray):
        self.host = host
        self.__cuda_array_interface__ = FakeDeviceArray(host).__cuda_array_interface__


class FakeDeviceBackend(ReferenceBackend):
    """Resident dispatch over FakeDeviceArrays, run by the reference interpreter."""

    name = "fake-device"

    def __init__(self):
        super().__init__()
        self.uploads = self.launches = 0

    def upload(self, array):
        self.uploads += 1
        return FakeDeviceArray(super().upload(array))

    def empty(self, n, dtype):
        return FakeDeviceArray(super().empty(n, dtype))

    def dispatch_resident(self, program, buffers, config=None):
        self.launches += 1
        super().dispatch_resident(program, [b.host for b in buffers], config)


def test_device_arrays_in_give_device_arrays_out(rng):
    be = FakeDeviceBackend()
    k = elementwise("f32 a, f32 x, f32 y", "f32 out, bool pos", "a * x + y, x > 0")
    x, y = f32(rng, 300, nan=True), f32(rng, 300)
    out, pos = k(np.float32(3), FakeDeviceArray(x), FakeDeviceArray(y), backend=be)
    assert isinstance(out, FakeDeviceArray) and isinstance(pos, FakeDeviceArray)
    assert_same_bits(out.copy_to_host(), np.float32(3) * x + y)
    assert_same_bits(pos.copy_to_host(), (x > 0).astype(np.uint32))
    k(np.float32(3), FakeDeviceArray(x), FakeDeviceArray(y), backend=be)
    assert be.uploads == 1 and be.launches == 2  # the scalar's one-element buffer is uploaded once
    k(np.float32(4), FakeDeviceArray(x), FakeDeviceArray(y), backend=be)
    assert be.uploads == 2
    two_d = k(np.float32(3), FakeDeviceArray(x.reshape(3, 100)), FakeDeviceArray(y.reshape(3, 100)), backend=be)
    assert two_d[0].shape == (3, 100)
    foreign = k(np.float32(3), ForeignDeviceArray(x), ForeignDeviceArray(y), backend=be)
    assert isinstance(foreign[0], FakeDeviceArray)  # other CUDA arrays in: the backend's (numba) arrays out
    assert_same_bits(foreign[0].copy_to_host(), out.copy_to_host())


def test_device_out_arrays_device_scalars_and_empty_device_arrays(rng):
    be = FakeDeviceBackend()
    k = elementwise("f32 a, f32 x", "f32 y", "a * x")
    x = f32(rng, 50)
    o = FakeDeviceArray(np.zeros(50, np.float32))
    assert k(FakeDeviceArray(np.array(2, np.float32)), FakeDeviceArray(x), out=o, backend=be) is o
    assert_same_bits(o.host, np.float32(2) * x)
    assert be.uploads == 0
    launches = be.launches
    e = k(2.0, FakeDeviceArray(np.zeros(0, np.float32)), backend=be)
    assert isinstance(e, FakeDeviceArray) and e.shape == (0,) and be.launches == launches


# ---- mistakes -------------------------------------------------------------------------------------

def raises(exc, fn, *args, match: str | None = None, **kw):
    with pytest.raises(exc, match=match) as info:
        fn(*args, **kw)
    assert isinstance(info.value, VyreError)
    assert_fix(str(info.value))
    return str(info.value)


@pytest.mark.parametrize("operation, match", [
    ("x + z", "name 'z' is not an input"),
    ("x + xx", "did you mean 'x'"),
    ("x.real", "attribute access"),
    ("np.sin(x)", "only named functions"),
    ("eval('x')", "'eval' is not a function"),
    ("__import__('os').system('true')", "only named functions"),
    ("exec('y = 1')", "not a function"),
    ("open('f')", "not a function"),
    ("lambda: x", "Lambda is not supported"),
    ("[v for v in x]", "ListComp is not supported"),
    ("x[0]", "indexing is not supported"),
    ("(y := x)", "NamedExpr is not supported"),
    ("x // 2", "`//` is not supported"),
    ("x ** 0.5", "integer literal exponent"),
    ("x ** x", "integer literal exponent"),
    ("x ** 65", "integer literal exponent"),
    ("x +", "not valid Python syntax"),
    ("x + \ud800", r"not valid text at position 4 \('\\ud800'\).*Fix: remove it"),
    ("", "empty"),
    ("'text'", "not a number"),
    ("sqrt", "used without a call"),
    ("sqrt(x, x)", "takes 1 argument"),
    ("min(x)", "two or more"),
    ("x(1)", "is a value, not a function"),
    ("sqrt(x=x)", "positional arguments only"),
    ("cast(x, f32)", "type name in quotes"),
    ("y", "read before it is assigned"),
    ("x = 1; y = x", "inputs are read-only"),
    ("t = x", "never assigned"),
    ("t = x; t", "bare expression"),
    ("y: float = x", "AnnAssign statements"),
    ("import os", "Import statements"),
    ("x, x", "2 value"),
    ("x is x", "comparison Is"),
    ("x @ x", "operator MatMult"),
    ("y = x; y @= x", "operator MatMult"),
    ("y = x; y //= 2", "`//` is not supported"),  # the operator is named, not 'AugAssign statements'
    ("y = x; y **= 0.5", "integer literal exponent"),
    ("x * 2; y = 1", "bare expression"),
    ("z += x; y = z", "updated before it is assigned"),
    ("(" * 250 + "x" + ")" * 250, "nest|syntax|parsed"),
    ("-" * 5000 + "x", "nest|parsed"),
])
def test_operation_mistakes_raise_with_a_fix(operation, match):
    raises(IRValidationError, elementwise, "f32 x", "f32 y", operation, match=match)


@pytest.mark.parametrize("inputs, outputs, operation, match", [
    ("f32 x, i32 n", "f32 y", "x * n", r"in `y = x \* n`: mul has operands of different types f32 and i32"),
    ("f32 x", "i32 y", "x * 2", "value stored into y must be i32, got f32"),
    ("f32 x", "f32 y", "t = 2; y = x * t", "different types f32 and u32"),
    ("i32 x", "i32 y", "x * 2.5", "literal 2.5 cannot be a i32"),
    ("i32 x", "i32 y", "x + 2**32", "literal 4294967296 cannot be a i32"),  # folded exactly, not wrapped to 0
    ("i32 x", "i32 y", "x + 2**31", "literal 2147483648 cannot be a i32"),
    ("i64 x", "i64 y", "x - 2**63 * 2", "literal 18446744073709551616 cannot be a i64"),
    ("u8 x", "u8 y", "x + 16 * 16", "literal 256 cannot be a u8"),
    # shifts and bitwise operations of constants fold as + - * do: exactly, then refused past the type
    ("u32 x", "u32 y", "x | (1 << 32)", "literal 4294967296 cannot be a u32"),  # was x | 1 (count masked)
    ("u8 x", "u8 y", "x + (16 << 4)", "literal 256 cannot be a u8"),  # was x + 0 (wrapped)
    ("u32 x", "u32 y", "x & -1", "literal -1 cannot be a u32"),
    ("i32 x", "i32 y", "x ^ (1 << 31)", "literal 2147483648 cannot be a i32"),
    ("u64 x", "u64 y", "x + (3 << 63 | 1)", "literal 27670116110564327425 cannot be a u64"),
    ("f32 a", "f32 o", "a * 1e400", "the literal 1e400 is past every float type(.|\n)*Fix: write inf for an infinity"),
    ("f32 a", "f32 o", "a * -1e400", "the literal 1e400 is past every float type"),  # the sign skipped the check
    ("f32 a", "f32 o", "a * +(1e400)", "the literal 1e400 is past every float type"),
    ("f32 a", "f32 inf", "inf = inf + a", "the output 'inf' is read before it is assigned"),  # not the literal
    ("i32 a", "i32 o", "a + inf", "literal inf cannot be a i32"),
    ("bool a", "bool o", "a == 2", "literal 2 cannot be a bool(.|\n)*Fix: write True or False"),  # was ValueError
    ("bool a", "bool o", "select(a, True, 2)", "literal 2 cannot be a bool"),
    ("u32 x", "u32 y", "x + (1 << -1)", "negative count"),
    ("u32 x", "u32 y", "x + (1 << 10**9)", "wider than 1088 bits"),
    ("f32 x", "f32 y", "x % 2", "mod is defined for integers only"),
    ("f32 x", "f32 y", "x << 1", "shl needs an integer type"),
    ("f32 x, f32 x", "f32 y", "x", "declared twice"),
    ("f32 x", "f32 x", "x", "both inputs and outputs"),
    ("f32 x", "f32 y, f32 y", "x, x", "declared twice"),
    ("T x", "f32 y", "x", "generic types"),
    ("f99 x", "f32 y", "x", "not a vyre type"),
    ("raw f32 x", "f32 y", "x", "'raw'"),
    ("f32", "f32 y", "1", "not 'type name'"),
    ("f32 min", "f32 y", "min", "would hide the function"),
    ("f32 for", "f32 y", "1", "is a Python keyword"),
    ("f32 x", "", "x", "no outputs"),
    (42, "f32 y", "1", "not a declaration"),
    ("f32 x", "f32 y", 42, "neither a string nor a function"),
    ("f32 x", "f32 y", lambda x, z: x, "raised TypeError"),
    ("f32 x", "f32 y, f32 z", lambda x: x, "returned 1 value"),
    ("f32 x", "f32 y", lambda x: {"z": x}, r"returned values for \['z'\]"),
    ("f32 x", "f32 y", lambda x: "x", "not an IR expression"),
    ("f32 x", "f32 y", lambda x: x if x > 0 else 0, "no Python truth value"),
])
def test_declaration_and_type_mistakes_raise_with_a_fix(inputs, outputs, operation, match):
    raises(IRValidationError, elementwise, inputs, outputs, operation, match=match)


def test_kernel_name_and_workgroup_are_checked():
    raises(IRValidationError, elementwise, "f32 x", "f32 y", "x", name="not a name", match="not an identifier")
    raises(IRValidationError, elementwise, "f32 x", "f32 y", "x", workgroup=2048, match="workgroup")
    raises(IRValidationError, elementwise, "f32 x", "f32 y", "x", workgroup=True, match="workgroup")


def test_call_mistakes_raise_with_a_fix():
    k = elementwise("f32 a, f32 x, f32 y", "f32 out", "a * x + y", name="saxpy")
    x = np.ones(4, np.float32)
    cases = [
        (dict(args=(2.0, x, np.ones(5, np.float32))), "shape"),
        (dict(args=(2.0, x, np.ones((2, 2), np.float32))), "shape"),
        (dict(args=(2.0, x, np.ones(4, np.float64))), "declared f32 .* holds float64"),
        (dict(args=(2.0, x, np.ones(4, bool))), "holds bool"),
        (dict(args=(0.1, x, x)), "not exactly a f32 value.*np.float32"),
        (dict(args=(True, x, x)), "'a' = True is a bool, not a f32 value.*Fix: pass the number 1"),
        (dict(args=(np.array(False), x, x)), "'a' = False is a bool, not a f32 value.*Fix: pass the number 0"),
        (dict(args=(1 + 2j, x, x)), "complex .*no complex types"),
        (dict(args=(None, x, x)), r"NoneType\), which elementwise does not take"),
        (dict(args=(2.0, x, x), out=np.empty(3, np.float32)), "out= array 'out' has shape"),
        (dict(args=(2.0, x, x), out=np.empty(4, np.float64)), "out= array 'out' is declared f32"),
        (dict(args=(2.0, x, x), out=x), "shares memory"),
        (dict(args=(2.0, x, x), out=(np.empty(4, np.float32),) * 2), "2 array"),
        (dict(args=(2.0, x, x), out=np.float32(1)), "scalar or 0-d"),
        (dict(args=(2.0, x)), "missing input"),
        (dict(args=(2.0, x, x, x)), "takes 3 input"),
        (dict(args=(2.0, x, x), kw=dict(z=x)), "'z' is not an input"),
        (dict(args=(2.0, x, x), kw=dict(out_=x)), "not an input \\(did you mean out=\\?\\)"),
        (dict(args=(2.0, x, x), kw=dict(backnd="reference")), "not an input \\(did you mean backend=\\?\\)"),
        (dict(args=(2.0, x), kw=dict(x=x)), "given twice"),
        (dict(args=(2.0, 3.0, 4.0)), "every input is a scalar"),
        (dict(args=(2.0, [1.0], x)), "is a list"),
        (dict(args=(2.0, np.ma.masked_array(x, [1, 0, 0, 0]), x)), "masked"),
        (dict(args=(2.0, x, x), backend=object()), "not a backend"),
        (dict(args=(2.0, x, x), backend="nope"), "no backend named"),
        (dict(args=(2.0, x, FakeDeviceArray(x))), "different kinds"),
        (dict(args=(2.0, FakeDeviceArray(x), FakeDeviceArray(x))), "reference backend runs on the CPU"),
        (dict(args=(2.0, x, x), out=FakeDeviceArray(x.copy())), "different kinds"),
    ]
    for spec, match in cases:
        backend = spec.get("backend", R)
        raises(VyreError, k, *spec["args"], out=spec.get("out"), backend=backend, match=match, **spec.get("kw", {}))
    ro = np.empty(4, np.float32)
    ro.flags.writeable = False
    raises(DispatchError, k, 2.0, x, x, out=ro, backend=R, match="read-only")
    raises(DispatchError, k.program, 2.0, x, match="missing input")


def test_device_call_mistakes_raise_with_a_fix():
    be = FakeDeviceBackend()
    k = elementwise("f32 a, f32 x", "f32 y", "a * x")
    x = np.ones(4, np.float32)
    raises(DispatchError, k, 2.0, FakeDeviceArray(x.astype(np.float64)), backend=be, match="holds float64")
    raises(DispatchError, k, 0.1, FakeDeviceArray(x), backend=be, match="not exactly")
    raises(DispatchError, k, 2.0, FakeDeviceArray(x), out=FakeDeviceArray(np.zeros(5, np.float32)), backend=be,
           match="shape")
    dev = FakeDeviceArray(x)
    raises(DispatchError, k, 2.0, dev, out=dev, backend=be, match="share memory")  # the backend's own check


# ---- the same on a GPU ----------------------------------------------------------------------------

CASES = [  # (inputs, outputs, operation, make the arguments from rng and n)
    ("f32 a, f32 x, f32 y", "f32 out", "a * x + y",
     lambda rng, n: (np.float32(1.7), f32(rng, n, nan=True), f32(rng, n))),
    ("i32 a, i32 b", "i32 p, i32 q, i32 r, i32 s", "a * b, a / b, a % b, a << b",
     lambda rng, n: (rng.integers(-2**31, 2**31, n).astype(np.int32), rng.integers(-40, 40, n).astype(np.int32))),
    ("u8 x, u8 y", "u8 z, bool lt", "x + y, x < y",
     lambda rng, n: (rng.integers(0, 256, n).astype(np.uint8), rng.integers(0, 256, n).astype(np.uint8))),
    ("f32 x, f32 y", "f32 lo, f32 hi, f32 f, f32 s, i32 t", "min(x, y), max(x, y), fma(x, y, 1.5), "
     "x if 0 <= x < 10 else -x, i32(x * 1e7)", lambda rng, n: (f32(rng, n, nan=True), f32(rng, n, nan=True))),
    ("f64 x, i64 k", "f64 y, i64 m", "t = x * x; y = sqrt(abs(t)) + f64(k); m = k * k - (k >> 3)",
     lambda rng, n: (rng.standard_normal(n) * 1e3, rng.integers(-2**62, 2**62, n))),
    ("f16 h", "f16 g", "h * h - h", lambda rng, n: ((rng.standard_normal(n) * 10).astype(np.float16),)),
]
TRANSCENDENTAL = ("f32 x", "f32 e, f32 s", "exp(x * 0.01), sin(x)", lambda rng, n: (f32(rng, n, nan=True),))


def run_case(case, rng, n, backend, convert=lambda a: a):
    inputs, outputs, operation, make = case
    k = elementwise(inputs, outputs, operation, name="case")
    args = make(rng, n)
    want = k(*args, backend=R)
    got = k(*[a if np.ndim(a) == 0 else convert(a) for a in args], backend=backend)
    return (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 255, 257, 100_003])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_gpu_numpy_arrays_match_the_reference(rng, case, n):
    want, got = run_case(CASES[case], rng, n, "cuda")
    for w, g in zip(want, got):
        assert isinstance(g, np.ndarray)
        assert_same_bits(g, w)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 257, 100_003])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_gpu_numba_device_arrays_stay_on_the_device(rng, case, n):
    from numba import cuda

    want, got = run_case(CASES[case], rng, n, "cuda", cuda.to_device)
    for w, g in zip(want, got):
        assert cuda.is_cuda_array(g) and hasattr(g, "copy_to_host")
        assert_same_bits(g.copy_to_host(), w)


@pytest.mark.gpu
def test_gpu_transcendentals_within_the_ulp_budget(rng):
    from numba import cuda

    for convert in (lambda a: a, cuda.to_device):
        want, got = run_case(TRANSCENDENTAL, rng, 10_000, "cuda", convert)
        for w, g in zip(want, got):
            assert_same_bits(g if isinstance(g, np.ndarray) else g.copy_to_host(), w, ulp=4)


@pytest.mark.gpu
def test_gpu_scalars_out_arrays_and_shapes(rng):
    from numba import cuda

    k = elementwise("f32 a, f32 x", "f32 y, f32 z", "a * x, x - a", name="scalars")
    x = f32(rng, 6000, nan=True).reshape(60, 100)
    want = k(np.float32(2.5), x, backend=R)
    dx = cuda.to_device(x)
    for a in (2.5, np.float32(2.5), cuda.to_device(np.array(2.5, np.float32))):
        got = k(a, dx, backend="cuda")
        assert got[0].shape == (60, 100)
        for w, g in zip(want, got):
            assert_same_bits(g.copy_to_host(), w)
    outs = (cuda.device_array((60, 100), np.float32), cuda.device_array((60, 100), np.float32))
    assert k(2.5, dx, out=outs, backend="cuda") is outs
    for w, g in zip(want, outs):
        assert_same_bits(g.copy_to_host(), w)
    host = (np.empty((60, 100), np.float32), np.empty((60, 100), np.float32))
    k(2.5, x, out=host, backend="cuda")
    for w, g in zip(want, host):
        assert_same_bits(g, w)
    with pytest.raises(DispatchError, match="share device memory"):
        k(2.5, dx, out=(dx, outs[1]), backend="cuda")
    with pytest.raises(DispatchError, match="different kinds"):
        k(2.5, x, out=outs, backend="cuda")
    with pytest.raises(DispatchError, match="reference backend runs on the CPU"):
        k(2.5, dx, backend=R)


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(len(CASES)))
def test_gpu_cupy_arrays_in_cupy_arrays_out(rng, case):
    cupy = pytest.importorskip("cupy")
    want, got = run_case(CASES[case], rng, 5000, "cuda", cupy.asarray)
    for w, g in zip(want, got):
        assert isinstance(g, cupy.ndarray)
        assert_same_bits(cupy.asnumpy(g), w)
    with cupy.cuda.Stream(non_blocking=True):  # results are visible on CuPy's current stream
        want, got = run_case(CASES[0], rng, 100_003, "cuda", cupy.asarray)
        assert_same_bits(cupy.asnumpy(got[0] * 1), want[0])


@pytest.mark.gpu
@pytest.mark.parametrize("case", [0, 1, 3, 4])  # dtypes PyTorch exports through the CUDA array interface
def test_gpu_torch_tensors_in_torch_tensors_out(rng, case):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    want, got = run_case(CASES[case], rng, 5000, "cuda", lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda())
    for w, g in zip(want, got):
        assert isinstance(g, torch.Tensor) and g.is_cuda
        assert_same_bits(g.cpu().numpy(), w)


@pytest.mark.parametrize("operation, want", [
    ("n + -(2**31)", lambda x: x + np.int32(-2**31)), ("n + -2147483648", lambda x: x + np.int32(-2**31)),
    ("-8 + n", lambda x: x - np.int32(8)),
])
def test_the_smallest_value_of_a_type_is_a_constant_that_fits(operation, want):
    x = np.arange(-3, 3, dtype=np.int32)
    assert_same_bits(elementwise("i32 n", "i32 out", operation, name="smallest")(x, backend="reference"), want(x))


def test_a_constant_wider_than_every_type_is_refused_without_printing_it():
    raises(IRValidationError, elementwise, "i32 n", "i32 out", "n + (2**63)**64 * (2**63)**64",
           match="wider than 1088 bits")


def test_constant_arithmetic_is_exact_where_it_fits():
    x = np.arange(-3, 3, dtype=np.int32)
    op = elementwise("i32 n", "i32 out", "n + 2**30 - (-2)**3 * 3 + 2**15 * 2**15 - 2**30", name="consts")
    assert_same_bits(op(x, backend="reference"), x + np.int32(2**30 + 24))


def test_a_long_chain_folds_each_node_once(monkeypatch):
    """Regression (a red-team): each operator node folded its whole subtree again, so a chain of k
    terms folded k**2 / 2 nodes (2 s at 800 terms); each node's value is now kept."""
    import sys

    ew = sys.modules["vyre_numba.elementwise"]  # the package's `elementwise` is the function
    calls = []
    fold = ew._int_constant
    monkeypatch.setattr(ew, "_int_constant", lambda node, memo=None: (calls.append(1), fold(node, memo))[1])
    terms = 200
    op = elementwise("f32 x", "f32 out", " + ".join(["x * 1.5"] * terms) + " + (2**20 + 3)", name="chain")
    assert len(calls) < 8 * terms, len(calls)
    assert_same_bits(op(np.ones(3, np.float32), backend=R), np.full(3, np.float32(1.5 * terms + 2**20 + 3)))


def test_constant_shifts_and_bitwise_operations_fold_exactly_where_they_fit():
    x = np.arange(4, dtype=np.uint32)
    op = elementwise("u32 n", "u32 out", "n + (1 << 31) + (0xF0 & 0x3C | 1 ^ 3) + (-1 >> 5) * 0 + (2**40 >> 20)",
                     name="bits")
    assert_same_bits(op(x, backend=R), x + np.uint32(2**31 + (0xF0 & 0x3C | 1 ^ 3) + 2**20))
    # a folded literal is exact: also in a float type, rounded once there
    assert_same_bits(elementwise("f32 x", "f32 y", "x * (1 << 4) + (3 & 1)")(np.ones(2, np.float32), backend=R),
                     np.full(2, 17, np.float32))
    # division and remainder stay in the type: 7 / 2 is 3 on integers, 3.5 on floats
    assert_same_bits(elementwise("i32 n", "i32 out", "n + 7 / 2 + -7 % 2")(np.zeros(1, np.int32), backend=R),
                     np.array([3 - 1], np.int32))
    assert_same_bits(elementwise("f32 x", "f32 y", "x + 7 / 2")(np.zeros(1, np.float32), backend=R),
                     np.array([3.5], np.float32))
    # ~ stays in the type too: the masks of unsigned code read as they do in C
    x8 = np.array([0xFFFFFFFF, 13, 8], np.uint32)
    masks = elementwise("u32 x", "u32 y", "(x & ~7) + (x ^ ~0) * 0 + (x & ~(1 << 3)) * 0 + (~0 - x) * 0")
    assert_same_bits(masks(x8, backend=R), x8 & np.uint32(~7 & 0xFFFFFFFF))
    assert_same_bits(elementwise("u32 x", "u32 y", "x ^ ~0")(x8, backend=R), ~x8)
    assert_same_bits(elementwise("u8 x", "u8 y", "x & ~1")(np.array([255, 3], np.uint8), backend=R),
                     np.array([254, 2], np.uint8))


def test_augmented_assignments_take_every_operator_of_the_operation_string():
    x = np.arange(-3, 4, dtype=np.int32)
    op = elementwise("i32 a", "i32 y", "y = a; y **= 3; y += 1; y <<= 1; y ^= a; y %= 5", name="aug")
    assert_same_bits(op(x, backend=R), np.fmod(((x ** 3 + 1) << 1) ^ x, 5).astype(np.int32))


def test_an_int_literal_in_a_float_operation_is_rounded_once():
    v = 2**60 + 2**36 + 1  # through f64 first, a tie at f32 rounded to 2**60; the nearest f32 is 2**60 + 2**37
    y = elementwise("f32 x", "f32 y", f"x + {v}")(np.zeros(1, np.float32), backend=R)
    assert y[0] == np.float32(np.uint64(v)) == 2**60 + 2**37


@pytest.mark.parametrize("decl, value, fix", [
    ("u8", 256, "from 0 to 255"), ("u8", -1, "from 0 to 255"), ("u8", float("nan"), "from 0 to 255"),
    ("u8", 2**64, "from 0 to 255"), ("i32", -10**400, "from -2147483648"),  # past what np.isfinite takes
    ("u8", 2.5, "round or truncate"), ("i32", float("inf"), "from -2147483648"), ("bool", 2, "True or False"),
    ("f32", True, "the number 1"), ("f32", 1e300, "magnitude at most 3.40282e\\+38"),
    ("f16", 1e6, "magnitude at most 65504"), ("f32", 0.1, "np.float32\\(0.10000000149011612\\)"),
    ("f32", 2**60 + 2**36 + 1, "np.float32\\(1.1529216420458004e\\+18\\)"),
    ("f16", 0.1, "np.float16\\(0.0999755859375\\)"), ("bf16", 0.1, "np.float32\\(0.10009765625\\)"),
])
def test_a_scalar_that_is_not_of_its_type_gets_a_fix_that_runs(decl, value, fix):
    """Regression: the Fix said np.uint8(256) (NumPy refuses it), np.uint8(nan) (not code) and
    np.float32(1e300) (inf); now it gives code that runs and gives a value of the type, or a range."""
    k = elementwise(f"{decl} a, f32 x", "f32 y", "f32(a) + x")
    x = np.zeros(1, np.float32)
    text = raises(DispatchError, k, value, x, backend=R, match="Fix: .*" + fix)
    code = text.rsplit("Fix: pass its nearest ", 1)
    if len(code) == 2:  # the suggested value binds as it is
        arg = eval(code[1].split(", ", 1)[1].rsplit(", or declare", 1)[0], {"np": np})
        k(arg, x, backend=R)


def _saxpy_expressions(a, x, y):
    """A top-level operation function: pickle finds it by its name."""
    return a * x + y


def test_a_kernel_copies_and_pickles_as_its_description(rng):
    """Regression: copy.deepcopy and pickle raised the raw "TypeError: cannot pickle
    '_thread.lock'", and copy.copy shared the original's lock and caches. A kernel is a
    description: its copies are made again from it, caches of their own; a function that pickle
    cannot store is refused with a fix."""
    import copy
    import pickle

    x, y = f32(rng, 100), f32(rng, 100)
    want = (np.float32(2) * x + y).astype(np.float32)
    for op in ("a * x + y", _saxpy_expressions, lambda a, x, y: a * x + y):
        k = elementwise({"a": "f32", "x": np.float32, "y": "float32"}, "f32 out", op, name="saxpy", workgroup=64)
        copies = [copy.copy(k), copy.deepcopy(k)]
        if not getattr(op, "__name__", "") == "<lambda>":
            copies.append(pickle.loads(pickle.dumps(k)))
        for c in copies:
            assert type(c) is type(k) and c is not k and c._lock is not k._lock and c._scalars is not k._scalars
            assert (c.name, c.inputs, c.outputs, c.workgroup, c.operation) == (k.name, k.inputs, k.outputs, 64, op)
            assert c.program().digest() == k.program().digest() and c.config == k.config
            assert_same_bits(c(np.float32(2), x, y, backend=R), want)
    text = raises(DispatchError, pickle.dumps, k, match=r"elementwise 'saxpy' cannot be pickled: its operation, "
                  r"the function '.*<lambda>', cannot .*Fix: pass the operation as a string")
    assert_fix(text)


# ---- names: every identifier class either works in every role or is refused with its reason ----------

def one_fix(text: str) -> str:
    """`text`, asserted to end in exactly one Fix sentence."""
    assert text.count("Fix:") == 1, text
    return text


def assert_builds_and_runs(inputs: str, outputs: str, operation, want) -> None:
    """The kernel computes `want` (from x = [0, 1, 2, 3] f32) on the reference backend and its PTX assembles."""
    from vyre_numba.ptx import assemble

    k = elementwise(inputs, outputs, operation, name="names")
    assert_same_bits(k(np.arange(4, dtype=np.float32), backend=R), want)
    assert assemble(k.ptx(sm=90), sm=90)[:4] == b"\x7fELF"


NAMES = ["_", "__x", "_t", "__class__", "WARP_SZ", "warp_sz", "idx", "v_x", "t_t", "o_y", "u_cebb", "x_ptr", "y_len",
         "vyre_grid_state", "mov", "reg", "param", "entry", "PM_EVENT_MASK", "n" * 1000]


@pytest.mark.parametrize("name", NAMES, ids=lambda s: s[:12])
def test_special_names_work_as_inputs_outputs_and_temporaries(name):
    """Regression: names PTX reserves, that start with _ or look like the kernel's own variables
    (idx, v_x, t_t, o_y) and very long names compute as any other name in every role."""
    x = np.arange(4, dtype=np.float32)
    assert_builds_and_runs(f"f32 {name}", "f32 y", f"{name} * 2", x * 2)
    assert_builds_and_runs("f32 x", f"f32 {name}", "x * 2", x * 2)
    assert_builds_and_runs("f32 x", "f32 y", f"{name} = x * 2; {name} += x; y = {name} + 1", x * 3 + 1)


@pytest.mark.parametrize("name", ["λ", "π_2", "café", "Δt", "变量"])
def test_non_ascii_temporaries_are_renamed_inside(name):
    """Regression: a non-ASCII temporary (a Python identifier the IR, with ASCII variable names,
    refuses) was reported as 'the operation does not type-check' with two Fix clauses."""
    x = np.arange(4, dtype=np.float32)
    assert_builds_and_runs("f32 x", "f32 y", f"{name} = x * 2; y = {name} + x", x * 3)
    assert_builds_and_runs("f32 x", "f32 y, f32 z", f"{name} = x * 2; y = {name}; z = {name} + 1; {name} = x",
                    np.stack([x * 2, x * 2 + 1]))


def test_names_that_are_one_name_in_nfkc_form_are_one_name():
    """Python reads identifiers in NFKC form (ﬁ is fi); messages say so where the spelling differs."""
    x = np.arange(4, dtype=np.float32)
    assert_builds_and_runs("f32 x", "f32 y", "ﬁ = x * 2; y = fi + x", x * 3)
    assert_builds_and_runs("f32 x", "f32 y", "ｔ = x; y = t", x)  # a full-width t
    text = one_fix(raises(IRValidationError, elementwise, "f32 fi", "f32 y", "ﬁ = fi * 2; y = fi",
                          match=r"the input 'fi' \(written ﬁ; Python reads identifiers in NFKC form\) is assigned"))
    assert "in `ﬁ = fi * 2`" in text
    one_fix(raises(IRValidationError, elementwise, "f32 x", "f32 y", "y = x; ｙ += ｚ",
                   match=r"'z' \(written ｚ; Python reads"))


@pytest.mark.parametrize("name, match, fix", [
    ("λ", r"'λ' is not ASCII", "ASCII letters"),
    ("ﬁ", r"'ﬁ' is not ASCII \(Python reads it as 'fi'\)", "ASCII letters"),
    ("for", "'for' is a Python keyword", "rename"),
    ("2x", "'2x' is not an identifier", "letters, digits and _"),
    ("%tid", "'%tid' is not an identifier", "letters, digits and _"),
    ("a b", "'a b' is not an identifier", "letters, digits and _"),
    ("", "'' is not an identifier", "letters, digits and _"),
])
def test_parameter_names_the_kernel_cannot_take_are_refused_with_their_reason(name, match, fix):
    for inputs, outputs, op in [({name: "f32"}, "f32 y", "1.0"), ("f32 x", {name: "f32"}, "x")]:
        one_fix(raises(IRValidationError, elementwise, inputs, outputs, op, match=f"{match}.*Fix: .*{fix}"))


@pytest.mark.parametrize("name, match", [
    ("_", r"name='_' is not one PTX can give a kernel"), ("WARP_SZ", r"name='WARP_SZ' is not one PTX can give"),
    ("vyre_math_exp_f32", r"name='vyre_math_exp_f32' begins with vyre_"),
    ("λ", "name='λ' is not ASCII"), ("ﬁx", r"name='ﬁx' is not ASCII \(Python reads it as 'fix'\)"),
    ("a-b", "name='a-b' is not an identifier"), (None, "name=None is a NoneType, not a str"),
])
def test_kernel_names_ptx_cannot_take_are_refused_with_their_reason(name, match):
    """Regression: name='_' and name='WARP_SZ' were reported as 'the operation does not type-check',
    with the validator's Fix and the type-check's Fix both in the message."""
    text = one_fix(raises(IRValidationError, elementwise, "f32 x", "f32 y", "x", name=name, match=match))
    assert "type-check" not in text


def test_kernel_names_that_are_keywords_or_long_are_taken():
    """A kernel's name is no Python name: a keyword, a PTX opcode or 1000 characters name it as well."""
    from vyre_numba.ptx import assemble

    x = np.arange(4, dtype=np.float32)
    for name in ("for", "None", "mov", "k" * 1000, "__init__"):
        k = elementwise("f32 x", "f32 y", "x + 1", name=name)
        assert_same_bits(k(x, backend=R), x + 1)
        assert assemble(k.ptx(sm=90), sm=90)[:4] == b"\x7fELF"


@pytest.mark.parametrize("inputs, outputs, operation, match", [
    ("f32 x, i32 n", "f32 y", "x * n", "different types f32 and i32"),
    ("f32 x", "i32 y", "x * 2", "value stored into y must be i32"),
    ("i32 x", "i32 y", "x * 2.5", "literal 2.5 cannot be a i32"),
    ("f32 x", "f32 y", "x % 2", "mod is defined for integers only"),
    ("f32 x, i32 n", "f32 y", "t = x * n; y = t + n", "different types f32 and i32"),
    ("f32 x, i32 n", "f32 y", lambda x, n: x * n, "different types f32 and i32"),
])
def test_type_check_messages_end_in_one_fix(inputs, outputs, operation, match):
    """Regression: each line carried the validator's Fix and the message one more."""
    text = one_fix(raises(IRValidationError, elementwise, inputs, outputs, operation, match=match))
    assert "does not type-check" in text


@pytest.mark.parametrize("inputs, outputs, operation, fix", [
    ("u8 a", "u8 out", "a + 300", "write a literal that u8 holds (0 to 255), or declare a wider type"),
    ("f16 x", "f16 out", "x * 100000.0", "write a literal that f16 holds (at most 65504.0 in size)"),
    ("u8 a", "u8 out", "a + u8(300)", "wrap on purpose by converting a typed value: u8(i64(300))"),
    ("i32 a", "i32 out", "a + i32(2**31)", "i32(i64(2147483648))"),
    ("u8 a", "u8 out", "a + u8(300.0)", "saturate on purpose by converting a typed value: u8(f64(300.0))"),
    ("u8 a", "u8 out", "a + u8(-1.0)", "saturate on purpose by converting a typed value: u8(f64(-1.0))"),
])
def test_a_literal_that_does_not_fit_gets_its_own_fix_and_the_fix_runs(inputs, outputs, operation, fix):
    """Regression: the Fix was the typing rule ("convert with the type's name, e.g. u8(x)"), and
    following it for `a + 300` gave `a + u8(300)`, which wrapped silently to 44."""
    text = one_fix(raises(IRValidationError, elementwise, inputs, outputs, operation))
    assert text.rsplit("Fix:", 1)[1].strip().startswith(fix) or fix in text.rsplit("Fix:", 1)[1]
    assert "one type" not in text
    if "(f64(" in fix:  # the saturation the fix names is what runs
        got = elementwise(inputs, outputs, operation.replace("u8(", "u8(f64(").replace(")", "))"))(
            np.zeros(1, np.uint8), backend=R)
        assert got[0] == (255 if "300" in operation else 0)
    if "(i64(" in fix:  # the wrap the fix names is what runs
        wrapped = operation.replace("(300)", "(i64(300))").replace("(2**31)", "(i64(2**31))")
        dt = np.uint8 if "u8" in inputs else np.int32
        got = elementwise(inputs, outputs, wrapped)(np.zeros(1, dt), backend=R)
        assert got[0] == (np.array([300, 2**31]).astype(dt)[0 if dt is np.uint8 else 1])


def test_a_negative_float_literal_is_a_literal_as_a_negative_int_is():
    """-1.0 was neg(1.0): the same value, but not a literal, so u8(-1.0) escaped the cast check."""
    x = np.array([1.5, -2.0], np.float32)
    assert_same_bits(elementwise("f32 x", "f32 y", "x * -1.5 + +2.0")(x, backend=R), x * np.float32(-1.5) + 2)
    assert elementwise("f32 x", "f32 y", "x * -1.5").program().entry[1].then[1].value.b.raw == \
        ir.f32(-1.5).raw


def test_a_power_of_literals_past_the_exponent_limit_is_folded_where_it_fits():
    """Regression (a red-team): `a * 2**100` on f64 was refused ("`**` takes an exponent from 0 to
    64"), the limit of a variable's power, though the folded constant is an f64."""
    x = np.array([1.0, -3.0])
    assert_same_bits(elementwise("f64 a", "f64 o", "a * 2**100")(x, backend=R), x * 2.0**100)
    assert_same_bits(elementwise("f64 a", "f64 o", "a * 3**81 + 2**1023")(x, backend=R), x * float(3**81) + 2.0**1023)
    raises(IRValidationError, elementwise, "f64 a", "f64 o", "a * 2**1024", match="cannot be a f64 .past its largest")
    raises(IRValidationError, elementwise, "f32 a", "f32 o", "a * 2**128", match="cannot be a f32 .past its largest")
    raises(IRValidationError, elementwise, "f64 a", "f64 o", "a * 2**1100", match="wider than 1088 bits")
    raises(IRValidationError, elementwise, "f64 a", "f64 o", "a ** 65", match="exponent from 0 to 64")


def test_a_power_reads_its_base_and_squares_as_variables_not_copied_trees():
    """Regression (a red-team): `square * square` copied its operand as a tree, so
    `((a ** 64) ** 64) ** 64` was 2 MB of IR that ran for 30 s on four elements, and `(a + 1) ** 4`
    added 1 four times."""
    x = np.float32([0.5, 0.99, 1.0, 1.001, -1.0])
    k = elementwise("f32 a", "f32 y", "((a ** 64) ** 64) ** 64")
    assert len(str(k.program(x))) < 2000
    want = x.copy()
    for _ in range(18):  # 64 ** 3 = 2 ** 18: eighteen squarings, each rounded in f32
        want = want * want
    assert_same_bits(k(x, backend=R), want)
    p = elementwise("f32 a", "f32 y", "(a + 1) ** 5").program(x)
    adds = [e for e in ir.walk(p.entry) if isinstance(e, ir.BinOp) and e.op == "add"]
    assert len(adds) == 1, str(p)
    b = x + np.float32(1)
    assert_same_bits(elementwise("f32 a", "f32 y", "(a + 1) ** 5")(x, backend=R), b * ((b * b) * (b * b)))
    raises(IRValidationError, elementwise, "f32 a, i32 n", "f32 y", "y = (a + n) ** 3", match=r"in `\(a \+ n\) \*\* 3`")
    # a base of bare literals stays an expression, typed by the operation around it (a variable
    # would fix its type first: f32 * u32); one copied past a limit is refused with a Fix
    assert_same_bits(elementwise("f32 a", "f32 y", "a * min(1, 2) ** 2")(x, backend=R), x)
    assert_same_bits(elementwise("f32 a", "f32 y", "a * abs(-2) ** 2")(x, backend=R), x * np.float32(4))
    assert_same_bits(elementwise("i32 a", "i32 y", "a * (3 % 2 + 1) ** 3")(np.int32([1, -2]), backend=R),
                     np.int32([8, -16]))
    raises(IRValidationError, elementwise, "f32 a", "f32 y", "a * ((min(1, 2) ** 64) ** 64)",
           match=r"bare literals read more than once.*Fix: give the literals a type")


def test_a_chained_comparison_reads_its_middle_operands_as_variables():
    """Regression (a review): `a < b < c` read `b` twice as a tree, so chains nested in chains
    doubled a level: 218 characters made 2.5 MB of IR that ran for 34 s on two elements."""
    e = "(a > 0)"
    for _ in range(16):
        e = f"(b == {e} == b)"
    a, b = np.float32([0.5, 2.0, -3.0]), np.uint32([1, 0, 1])
    k = elementwise("f32 a, bool b", "f32 y", f"y = where({e}, a, -a)")
    assert len(str(k.program(a, b))) < 5000
    inner = a > 0  # each level: b == inner == b, i.e. (b == inner) & (inner == b)
    for _ in range(16):
        inner = (b.astype(bool) == inner)
    assert_same_bits(k(a, b, backend=R), np.where(inner, a, -a))
    c = elementwise("f32 a, f32 b", "bool y", "0 < a + b < 1")
    assert sum(isinstance(s, ir.Let) for s in ir.walk(c.program(a, a).entry)) == 4  # idx, two inputs, a + b
    assert_same_bits(c(np.float32([0.2, 0.5, -1]), np.float32([0.1, 0.6, 0.5]), backend=R), np.uint32([1, 0, 0]))
    # a middle whose value is bare literals stays an expression, typed by the comparison (a variable
    # would fix a default type: f32 against u32); copied past a limit, it is refused with a Fix
    w = elementwise("f32 a, bool c", "bool y", "a < where(c, 1, 2) < 3")
    assert_same_bits(w(np.float32([0.5, 2, -3]), np.uint32([1, 0, 1]), backend=R), np.uint32([1, 0, 1]))
    e = "1"
    for _ in range(12):
        e = f"where(0 < {e} < 2, 1, 0)"
    raises(IRValidationError, elementwise, "f32 a", "f32 y", f"a * {e}", match=r"bare literals read more than once.*Fix:")


def test_a_long_operation_splits_its_source_into_lines_once(monkeypatch):
    """Regression (a red-team): each statement's text was cut from the source by
    ast.get_source_segment, which splits the whole source each call: 4,000 statements took 30 s."""
    import sys

    ew = sys.modules["vyre_numba.elementwise"]  # the package's `elementwise` is the function

    splits = []
    real = ew._LINES

    class Counted:
        def split(self, text):
            splits.append(1)
            return real.split(text)
    monkeypatch.setattr(ew, "_LINES", Counted())
    op = "\n".join(["t = a"] + ["t = t + a"] * 300 + ["y = t"])
    assert_same_bits(elementwise("f32 a", "f32 y", op)(np.float32([1, 2]), backend=R), np.float32([301, 602]))
    assert len(splits) == 1


def test_one_problem_met_twice_in_a_statement_is_said_once():
    """Regression: `x[i] = i` with `i` undeclared listed two identical problems."""
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.var("i"), ir.var("i"))])
    assert len(ir.validate(p)) == 1


@pytest.mark.parametrize("var", ["idx", "v_y", "t_x", "o_y", "zz"])
def test_an_operation_function_reading_a_variable_it_was_not_given_is_refused(var):
    """Regression: ir.var('idx') read the kernel's own element index and ir.var('zz') was reported
    as a type-check failure whose Fix said to declare it with ir.let."""
    text = one_fix(raises(IRValidationError, elementwise, "f32 x", "f32 y", lambda x: x + ir.cast(ir.var(var), "f32"),
                          match=f"reads the variable '{var}', which is not one of its arguments"))
    assert "type-check" not in text


@pytest.mark.parametrize("outputs, value, did, buffer", [
    ("f32 y", lambda x: ir.load("x", ir.gid(0) + 1), "a load of", "x"),  # a neighbour, 0 past the end
    ("f32 y", lambda x: x + ir.load("y", 0), "a load of", "y"),  # an output, never read
    ("u32 y", lambda x: ir.atomic("add", "y", 0, ir.lit(1, "u32")), "an atomic on", "y"),  # order-dependent
])
def test_an_operation_function_touching_the_kernels_buffers_is_refused(outputs, value, did, buffer):
    """Regression (a red-team): the function form took loads of the kernel's own buffers at other
    elements, and atomics on its outputs, which no elementwise operation means and whose results a
    GPU need not give as the reference does."""
    text = one_fix(raises(IRValidationError, elementwise, "f32 x", outputs, value,
                          match=f"makes {did} the kernel's buffer '{buffer}'"))
    assert "write an ir.Program to read other elements" in text


# ---- scalar arguments of every NumPy kind --------------------------------------------------------

SCALAR_KINDS = [  # (value, what the message says, what its Fix says)
    (np.array(5, dtype=object), r"a 0-d object array \(holding the int 5\)", r"a.item\(\).*np.asarray\(a, dtype=np"),
    (np.array(2.5, dtype=object), r"a 0-d object array \(holding the float 2.5\)", r"np.asarray\(a, dtype=np"),
    (np.array(None, dtype=object), r"a 0-d object array \(holding the NoneType None\)", r"a Python int or float"),
    (np.array(1 + 2j), r"complex \(1\+2j\); vyre has no complex types", r"a.real"),
    (np.complex64(1), r"complex \(1\+0j\); vyre has no complex types", r"a.real"),
    (1 + 2j, r"complex \(1\+2j\); vyre has no complex types", r"a.real"),
    (np.clongdouble(1), r"complex .*vyre has no complex types", r"a.real"),
    (np.array(np.datetime64("2020-01-02")), r"a date \(datetime64\[D\]\); vyre has no date or time types",
     r"a.astype\(np.int64\).*days since 1970-01-01"),
    (np.datetime64(5, "s"), r"a date \(datetime64\[s\]\)", r"seconds since 1970-01-01"),
    (np.timedelta64(3, "ms"), r"a time span \(timedelta64\[ms\]\)", r"a.astype\(np.int64\).*milliseconds"),
    (np.array("5"), r"a string \('5'\); vyre takes numbers", r"the number it spells"),
    (np.str_("5"), r"a string \('5'\)", r"the number it spells"),
    (np.array(b"5"), r"bytes \(b'5'\); vyre takes numbers", r"the number it spells"),
    (np.zeros((), dtype=[("v", "f4")]), r"a record \(fields 'v'\)", r"one field, a\['v'\]"),
    (np.zeros(1, dtype=[("v", "f4"), ("w", "i4")])[0], r"a record \(fields 'v', 'w'\)", r"one field, a\['v'\]"),
    (np.array(b"\x00\x00\x80\x3f", dtype="V4"), r"raw bytes \(void, 4 bytes\)", r"the number its bytes hold"),
    (np.void(b"\x01\x02"), r"raw bytes \(void, 2 bytes\)", r"the number its bytes hold"),
]


@pytest.mark.parametrize("decl", ["f32", "i64", "bool"])
@pytest.mark.parametrize("value, what, fix", SCALAR_KINDS, ids=lambda v: type(v).__name__ if not isinstance(v, str)
                         else None)
def test_scalars_that_are_no_number_are_refused_with_their_kind(decl, value, what, fix):
    """Regression: np.array(5, dtype=object) was 'not exactly a f32 value' with a Fix to pass
    np.float32(5.0), dates 'not exactly a f32 value' with a Fix about magnitudes, NumPy complex
    scalars 'neither a number nor an array'."""
    k = elementwise(f"{decl} a, {decl} x", f"{decl} y", "a if True else x")
    x = np.zeros(2, {"f32": np.float32, "i64": np.int64, "bool": np.uint32}[decl])
    text = one_fix(raises(DispatchError, k, value, x, backend=R, match=f"the scalar 'a' is {what}.*Fix: .*{fix}"))
    assert "not exactly" not in text
    raises(DispatchError, k.program, value, x, match=f"the scalar 'a' is {what}")
    raises(DispatchError, k, value, FakeDeviceArray(x), backend=FakeDeviceBackend(), match=f"the scalar 'a' is {what}")


def test_the_fixes_for_scalars_of_other_kinds_run():
    x = np.zeros(2, np.int64)
    k = elementwise("i64 a, i64 x", "i64 y", "a + x")
    assert_same_bits(k(np.asarray(np.array(5, dtype=object), dtype=np.int64), x, backend=R), x + 5)
    assert_same_bits(k(np.array(5, dtype=object).item(), x, backend=R), x + 5)
    day = np.array(np.datetime64("2020-01-02"))
    assert_same_bits(k(day.astype(np.int64), x, backend=R), x + 18263)
    assert_same_bits(k(np.timedelta64(3, "ms").astype(np.int64), x, backend=R), x + 3)
    rec = np.zeros((), dtype=[("v", "i8")])
    assert_same_bits(k(rec["v"], x, backend=R), x)
    f = elementwise("f32 a, f32 x", "f32 y", "a + x")
    xf = np.zeros(2, np.float32)
    assert_same_bits(f(np.array(b"\x00\x00\x80\x3f", dtype="V4").view(np.float32), xf, backend=R), xf + 1)
    assert_same_bits(f(np.array(1 + 2j).real, xf, backend=R), xf + 1)


@pytest.mark.parametrize("value, match", [
    (__import__("decimal").Decimal("2.5"), r"'a' is a Decimal, a number type elementwise does not take"),
    (__import__("fractions").Fraction(1, 2), r"'a' is a Fraction, a number type elementwise does not take"),
])
def test_number_types_numpy_reads_as_objects_are_named(value, match):
    k = elementwise("f32 a, f32 x", "f32 y", "a + x")
    one_fix(raises(DispatchError, k, value, np.zeros(2, np.float32), backend=R, match=match + ".*Fix: .*float\\(a\\)"))


def test_python_ints_past_64_bits_bind_where_the_type_holds_them_exactly():
    """Regression: 2**70 (an object to NumPy) was 'not exactly a f32 value' with a Fix to pass
    np.float32(1.1805916207174113e+21), the same value."""
    for decl, dtype in [("f32", np.float32), ("f64", np.float64), ("bf16", np.uint16)]:
        k = elementwise(f"{decl} a, {decl} x", f"{decl} y", "a if True else x")
        x = np.zeros(2, dtype)
        got = k(2**70, x, backend=R)
        want = np.float32(2**70).view(np.uint32) >> 16 if decl == "bf16" else dtype(2**70)
        assert (got == want).all(), (decl, got)
        raises(DispatchError, k, -(2**70) - 1, x, backend=R, match="not exactly a .* value")
    k = elementwise("f64 a, f64 x", "f64 y", "a + x")
    raises(DispatchError, k, 2**1100, np.zeros(1), backend=R, match="not exactly a f64 value.*magnitude at most")
    raises(DispatchError, elementwise("i64 a, i64 x", "i64 y", "a + x"), 2**70, np.zeros(1, np.int64), backend=R,
           match="not exactly a i64 value.*from -9223372036854775808")


@pytest.mark.parametrize("array, fix", [
    (np.array([1 + 2j]), r"a.real"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), r"a.astype\(np.int64\).*days since 1970-01-01"),
    (np.array([3], dtype="timedelta64[s]"), r"a.astype\(np.int64\).*seconds"),
    (np.zeros(1, dtype=[("v", "f4")]), r"one field, a\['v'\]"),
    (np.array([5], dtype=object), r"a.astype\(np.float32\)"),
    (np.array(["5"]), r"a.astype\(np.float32\)"),
])
def test_arrays_of_other_kinds_get_a_fix_for_their_kind(array, fix):
    k = elementwise("f32 a, f32 x", "f32 y", "a + x")
    one_fix(raises(DispatchError, k, array, np.zeros(1, np.float32), backend=R, match=f"holds .*Fix: .*{fix}"))


@pytest.mark.parametrize("decl, array", [
    ("i32", np.array([1 + 2j, 3 - 1j])),
    ("f32", np.array([1 + 2j, 3 - 1j], np.complex128)),
    ("f64", np.array([1 + 2j], np.complex64)),
    ("f32", np.array([(1.5, 2), (2.5, 3)], dtype=[("v", "f8"), ("w", "i4")])),
    ("i32", np.array([(1.5, 2), (2.5, 3)], dtype=[("v", "f8"), ("w", "i4")])),
    ("i64", np.array([(1.5, 2)], dtype=[("v", "f8"), ("w", "i4")])),
])
def test_the_fix_for_a_complex_or_record_array_is_one_that_runs(decl, array):
    """Regression (a red-team): complex into an i32 input was told `a.real`, a record into an f32 one
    `a['v']` (float64): each Fix followed met the next refusal, float64 into a declared type."""
    k = elementwise(f"{decl} a", f"{decl} y", "a")
    text = one_fix(raises(DispatchError, k, array, backend=R, match="holds .*Fix: "))
    fix = re.search(r"pass (?:its real part|one field), (\S+)", text).group(1)
    a = eval(fix, {"a": array, "np": np})
    assert k(a, backend=R).tolist() == a.tolist()  # runs, as the Fix says


def test_inf_and_nan_are_float_literals_unless_the_operation_names_them():
    """Regression (a red-team): `a * 1e400` silently multiplied by an infinity (Python reads the
    literal as one), and an infinity had no spelling but that."""
    x = np.array([1.5, -2.0, np.nan], np.float32)
    got = elementwise("f32 a", "f32 o", "o = select(isnan(a), -inf, min(a, inf) * 0 + nan)")(x, backend=R)
    assert np.isnan(got[:2]).all() and got[2] == -np.inf
    assert elementwise("f32 a, f32 inf", "f32 o", "a + inf")(x, np.float32(1), backend=R)[0] == 2.5  # an input
    assert elementwise("f32 a", "f32 o", "nan = a * 2; o = nan")(x, backend=R)[1] == -4.0  # a temporary


@pytest.mark.parametrize("scalar", [1, np.int64(3)])
def test_an_int_scalar_for_a_bf16_input_is_refused_as_ambiguous_not_as_inexact(scalar):
    """Regression (a red-team): 1 was refused as 'not exactly a bf16 value', which it is."""
    k = elementwise("bf16 s, bf16 x", "bf16 o", "s * x", name="kb")
    with pytest.raises(DispatchError, match=r"is an int, which a bf16 input could read as a value or as raw bfloat16 "
                                            r"bits\. Fix: pass \d\.0 \(a float\)"):
        k(scalar, np.array([16256], np.uint16), backend=R)
    assert k(float(scalar), np.array([16256], np.uint16), backend=R).tolist() == [ir.f32_to_bf16_bits(float(scalar))]


def test_fixes_of_the_operation_text_are_written_in_the_text_and_work_when_followed():
    """Regressions (a red-team): `%` on floats said to use ir.trunc, which the text cannot call;
    only scalars said np.full(n, value), whose float64 the kernel then refused."""
    with pytest.raises(IRValidationError, match=r"Fix: compute a - b \* trunc\(a / b\), in f64 for f32 operands \(with "
                                                r"A = cast\(a, 'f64'\) and B = cast\(b, 'f64'\): cast\(A - B \* trunc\(A "
                                                r"/ B\), 'f32'\)\)"):
        vn.elementwise("f32 x", "f32 y", "x % 2")
    rem = vn.elementwise("f32 x", "f32 y", "A = cast(x, 'f64'); y = cast(A - 2 * trunc(A / 2), 'f32')")
    x = np.array([-3, 5, 4.5, 0.1, 1e8], np.float32)
    assert np.array_equal(rem(x, backend="reference"), np.fmod(x, np.float32(2)))
    with pytest.raises(IRValidationError, match=r"Fix: convert it by a type's name \(i32\(x\), f32\(x\)\) to an integer"):
        vn.elementwise("f32 x", "f32 y", "x & 1")
    assert vn.elementwise("f32 x", "f32 y", "f32(i32(x) & 1)")(np.array([3, 4], np.float32),
                                                                backend="reference").tolist() == [1, 0]
    add = vn.elementwise("f32 a, f32 b", "f32 y", "a + b")
    with pytest.raises(vn.DispatchError, match=r"np\.full\(n, a, dtype=np\.float32\)") as e:
        add(2.0, 3.0, backend="reference")
    assert "Fix:" in str(e.value)
    assert add(np.full(3, 2.0, dtype=np.float32), 3.0, backend="reference").tolist() == [5, 5, 5]
    # every type's Fix, followed literally (bf16 by its bits: np.full(n, 1.5, dtype=np.uint16) truncated to 1)
    import re

    for t, a, b, want in (("bf16", 1.5, 2.0, 3.5), ("bool", True, False, 1), ("i8", -3, 2, -1), ("f64", 0.5, 2.0, 2.5)):
        k = vn.elementwise(f"{t} a, {t} b", f"{t} y", "a | b" if t == "bool" else "a + b")
        with pytest.raises(vn.DispatchError, match="every input is a scalar") as e:
            k(a, b, backend="reference")
        fix = re.search(r"for 'a', (.*)\), or pass out=", str(e.value)).group(1)
        got = k(eval(fix, {"np": np, "ir": ir, "n": 3, "a": a}), b, backend="reference")
        got = ir.bf16_bits_to_f32(got) if t == "bf16" else got
        assert got.tolist() == [want] * 3, (t, fix, got)


def test_a_kernel_of_no_inputs_is_told_to_take_out_arrays():
    """Regression (a red-team): with no inputs, the call's "every input is a scalar" message read
    the first input and raised a raw IndexError."""
    k = elementwise("", "f32 y", "1.5", name="fill")
    with pytest.raises(DispatchError, match=r"^fill\(\.\.\.\): the kernel takes no inputs, so nothing says how many "
                                            r"elements to compute\. Fix: pass out= arrays to fill"):
        k(backend="reference")
    y = np.zeros(3, np.float32)
    k(out=y, backend="reference")
    assert y.tolist() == [1.5, 1.5, 1.5]


def test_a_temporary_of_a_bare_number_is_named_where_its_type_differs():
    """Regression (a red-team): `t = 1; y = x + t` was refused as "f32 and u32", a type the user
    never wrote, while `y = x + 1` works; the message now says where the type came from."""
    with pytest.raises(IRValidationError, match=r"in `y = x \+ t`: add has operands of different types f32 and u32.* "
                                                 r"\(t was assigned a bare number, whose type is not taken from where t "
                                                 r"is used: name the type it needs, e.g\. t = f32\(\.\.\.\)\)"):
        elementwise("f32 x", "f32 y", "t = 1; y = x + t")
    k = elementwise("f32 x", "f32 y", "t = f32(1); y = x + t")  # as the message says
    assert k(np.array([1.5], np.float32), backend="reference").tolist() == [2.5]
    with pytest.raises(IRValidationError) as e:  # a temporary of a typed value is not said to be one
        elementwise("f32 x", "f32 y", "t = u32(1); y = x + t")
    assert "bare number" not in str(e.value)


# ---- a red-team's findings (session 42) --------------------------------------------------------

@pytest.mark.parametrize("op,dt,want", [("y = 1", "f32", [1.0] * 3), ("y = 0.5", "f64", [0.5] * 3),
                                        ("y = 7", "i64", [7] * 3), ("y = True", "bool", [True] * 3),
                                        ("y = 1; y = y + x", "f32", [1.0, 2.0, 3.0])])
def test_an_output_first_assigned_a_bare_number_takes_the_outputs_type(op, dt, want):
    """Regression: `y = 1` typed 1 as a temporary's default (u32) and was refused at the store,
    where the expression form `1` takes the output's type."""
    k = elementwise(f"{dt} x", f"{dt} y", op)
    x = np.arange(3).astype({"f32": np.float32, "f64": np.float64, "i64": np.int64, "bool": np.uint32}[dt])
    assert k(x, backend=R).tolist() == want


@pytest.mark.parametrize("op,dt,fragment", [("y = 1", "bool", "literal 1 cannot be a bool"),
                                            ("y = 1.5", "i32", "literal 1.5 cannot be a i32"),
                                            ("y = 300", "u8", "literal 300 cannot be a u8")])
def test_an_output_first_assigned_a_bare_number_keeps_the_literal_rules(op, dt, fragment):
    for form in (op, op.split("= ")[1]):  # as a statement and as the expression: the same refusal
        with pytest.raises(IRValidationError, match=f"(?s){re.escape(fragment)}.*Fix:"):
            elementwise("u8 x", f"{dt} y", form)


@pytest.mark.parametrize("op", ["y = '" + "x" * 100_000 + "'", "y = min(" + ", ".join(["a"] * 20_000) + ") // 2",
                                "y = [" + ", ".join(["a"] * 20_000) + "]",
                                "y = " + " + ".join(["a"] * 20_000) + " + True"])
def test_a_long_operations_error_quotes_it_clipped(op):
    """Regression: the failing part of the operation was quoted whole (150 KB to 1 MB messages)."""
    with pytest.raises(IRValidationError, match="Fix:") as e:
        elementwise("f32 a", "f32 y", op)
    assert len(str(e.value)) < 2000, len(str(e.value))


def test_a_type_whose_repr_raises_is_an_unknown_type_not_a_raw_error():
    class Odd:
        def __repr__(self):
            raise RuntimeError("repr failed")

    for call in (lambda: elementwise({"a": Odd()}, "f32 y", "a"), lambda: ir.DataType.parse(Odd()),
                 lambda: ir.cast(ir.f32(1.0), Odd())):
        with pytest.raises(IRValidationError, match="Fix:"):
            call()


@pytest.mark.parametrize("values,dt,declared,element", [(np.array([-1, 5]), "u32", "i64", "element 0, -1"),
                                                        (np.array([2**40 + 7]), "i32", "i64", "element 0, 1099511627783"),
                                                        (np.array([0.5, 1.25]), "i32", "f64", "element 0, 0.5"),
                                                        (np.array([1.0, 0.1]), "f32", "f64", "element 1, 0.1")])
def test_a_dtype_fix_never_suggests_a_conversion_that_changes_the_values(values, dt, declared, element):
    """Regression (a red-team): the Fix said a.astype(np.uint32) for an int64 array holding -1,
    which wraps; where a value would change, only declaring the array's own type is suggested."""
    k = elementwise(f"{dt} a", f"{dt} y", "a")
    with pytest.raises(DispatchError, match=rf"Fix: declare 'a' as {declared} to keep its values exactly, and convert "
                                            rf"it where the operation needs {dt} \({dt}\(a\)\).*\({element}, would change\)") as e:
        k(values, backend=R)
    assert ("astype" in str(e.value)) == (values.dtype.kind == "f" and dt == "f32")  # a wrap or truncation never
    widened = elementwise(f"{declared} a", f"{dt} y", f"{dt}(a)")  # following the Fix: it runs
    widened(values, backend=R)
    fits = np.array([1, 2])  # every value converts exactly: the conversion is the fix
    with pytest.raises(DispatchError, match=rf"Fix: convert it explicitly \(a.astype\(np.{np.dtype(k.inputs[0][1].storage)}\)\)"):
        k(fits if dt != "f32" else fits.astype(np.float64), backend=R)


def test_an_out_array_of_another_type_is_told_a_fix_that_fills_the_callers_array():
    """Regression (a red-team): out='s Fix was out.astype(np.float32), a copy: the call ran and the
    caller's array stayed as it was."""
    k = elementwise("f32 x", "f32 out", "x * 2")
    x, mine = np.ones(3, np.float32), np.full(3, -99.0)
    with pytest.raises(DispatchError, match=r"Fix: pass an out= array of float32, out2 = np.empty_like\(out, "
                                            r"dtype=np.float32\), and copy it into yours after \(out\[\.\.\.\] = out2\)"):
        k(x, out=mine, backend=R)
    out2 = np.empty_like(mine, dtype=np.float32)  # the fix, as written
    k(x, out=out2, backend=R)
    mine[...] = out2
    assert mine.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("inputs, outputs, operation, want", [
    ("f64 x", "bool y", "(0.1 + 0.2) < x", [False, False, False, True]),  # typed as x, as `x > 0.1 + 0.2` is
    ("f64 x", "bool y", "0.1 + 0.2 == x", [False, False, True, False]),
    ("f64 x", "bool y", "f64(0.1 + 0.2) == x", [False, False, True, False]),  # computed in f64, not f32
    ("f64 x", "f64 y", "x * 0 + f64(7 / 2)", [3.5] * 4),
    ("f64 x", "f64 y", "x * 0 + f64(1.0 / 3.0)", [1 / 3] * 4),
    ("f64 x", "f64 y", "x * 0 + f64(3000000000 / 1 * 2)", [6e9] * 4),  # not wrapped in u32
])
def test_an_expression_of_literals_takes_the_type_of_what_it_meets_or_is_converted_to(inputs, outputs, operation,
                                                                                     want):
    """Regression (a red-team): an expression of literals alone was computed in the default type
    (f32, u32) under a conversion and on the left of a comparison."""
    x = np.array([0.25, 0.3, 0.1 + 0.2, 0.31])
    got = elementwise(inputs, outputs, operation)(x, backend=R)
    assert got.tolist() == want


@pytest.mark.parametrize("operation, fragment", [
    ("t = 16777217.0; y = i64(t)", "the temporary t was assigned a bare number"),  # f32 rounded it to 16777216
    ("t = 300; y = i64(u8(t))", "the temporary t was assigned a bare number"),  # u32 300 wrapped to 44
    ("t = nan; y = i64(t) + 0", "the temporary t was assigned a bare number"),  # NaN became 0
    ("y = i64(u8(-inf))", "cast of the literal -inf to u8"),
    ("y = i64(u8(-nan))", "cast of the literal NaN to u8"),
    ("y = i64(u8(- -300.0))", "cast of the literal 300.0 to u8"),
    ("y = i64(u8(max(300, 2)))", "the literal 300, which u8 does not hold"),
    ("y = i64(u8(where(x > 0, 300, 1)))", "the literal 300, which u8 does not hold"),
    ("y = i64(u8(1.0 * 300.0))", "cast to u8 of an expression of literals with a float literal"),
])
def test_a_value_converted_is_never_a_default_typed_guess(operation, fragment):
    text = one_fix(raises(IRValidationError, elementwise, "f64 x", "i64 y", operation, match=fragment))
    assert "Fix:" in text


def test_a_temporary_whose_default_type_keeps_its_number_converts_as_before():
    x = np.float64([2.0])
    for op, want in (("n = 3; y = x / f64(n)", 2 / 3), ("k = 2; y = f64(k) * x", 4.0), ("n = 3; y = x / f64(n + 1)", 0.5),
                     ("t = 0.5; y = x * f64(t)", 1.0)):
        assert elementwise("f64 x", "f64 y", op)(x, backend=R).tolist() == [want]
    assert elementwise("f64 x", "i32 y", "t = 2.5; y = i32(t)")(x, backend=R).tolist() == [2]  # as i32(2.5)


@pytest.mark.parametrize("name", ["acc", "λ", "o_k"])
def test_a_type_error_names_the_users_own_variables_and_a_fix_in_the_texts_syntax(name):
    """Regression (a red-team): the IR's names for temporaries (t_acc, u_cebb) and an ir.let fix
    reached the message of an operation string."""
    with pytest.raises(IRValidationError) as e:
        elementwise("f32 x", "f32 o", f"{name} = 0; o = {name} + x")
    said = str(e.value)
    assert f"'{name}' is u32" in said and f"declare it so: {name} = f32(0.0)" in said
    assert "t_" not in said and "u_" not in said and "ir.let" not in said
    with pytest.raises(IRValidationError, match=r"value stored into t_acc must be f32"):  # a buffer keeps its name
        elementwise("f32 x", "f32 t_acc", "acc = x; t_acc = u32(acc)")
    with pytest.raises(IRValidationError, match=r"in `v_y = u32\(y\)`: value stored into v_y"):
        elementwise("f32 y", "f32 v_y", "v_y = u32(y)")
    with pytest.raises(IRValidationError, match=r"in `o = \(x \+ 1u32\)`") as e:  # a function's arguments too
        elementwise("f32 x", "f32 o", lambda x: x + ir.u32(1))
    assert "v_x" not in str(e.value)
    with pytest.raises(IRValidationError, match=r"in `out = \(x \+ v_x\)`"):  # an input named as another's variable
        elementwise("f32 x, i32 v_x", "f32 out", lambda x, v_x: x + v_x)


def test_a_temporarys_conversion_fix_runs_and_converts_exactly():
    with pytest.raises(IRValidationError, match=r"Fix: give t its type where it is assigned, e\.g\. t = f64"):
        elementwise("f64 x", "f64 y", "t = 0.1; y = x * f64(t)")
    got = elementwise("f64 x", "i64 y", "t = f64(16777217.0); y = i64(t)")(np.ones(1), backend=R)
    assert got.tolist() == [16777217]
    assert elementwise("f64 x", "f64 y", "t = f64(0.1); y = x * t")(np.ones(1), backend=R).tolist() == [0.1]


@pytest.mark.parametrize("operation, fix", [
    ("u8(nan)", "u8(f64(nan))"),
    ("u64(2**64)", "no integer type holds 18446744073709551616"),
])
def test_literal_cast_fixes_name_what_the_operation_can_write(operation, fix):
    outputs = "u64 y" if "u64" in operation else "u8 y"
    text = one_fix(raises(IRValidationError, elementwise, "f64 x", outputs, operation))
    assert fix in text.rsplit("Fix:", 1)[1]
    if "(f64(" in fix:  # followed
        assert elementwise("f64 x", outputs, fix)(np.ones(1), backend=R).tolist() == [0]


def test_many_temporaries_of_bare_numbers_build_in_linear_time():
    """Regression (a red-team): each type error searched every temporary with a fresh pattern
    (Python's pattern cache holds 512): 700 temporaries took 47 s."""
    import time

    n = 1400
    op = "; ".join(f"t{i} = 0.5" for i in range(n)) + "; " + "; ".join(f"y = x * t{i}" for i in range(n))
    start = time.perf_counter()
    with pytest.raises(IRValidationError, match="t0 was assigned a bare number"):
        elementwise("f64 x", "f64 y", op)
    assert time.perf_counter() - start < 20  # 0.25 s on the development machine


def test_folded_exponents_and_any_declared_type_name_in_cast():
    x = np.float64([2.0])
    assert elementwise("f64 x", "f64 y", "x ** (1 + 1)")(x, backend=R).tolist() == [4.0]
    assert elementwise("f64 x", "f64 y", "x ** 2 ** 3")(x, backend=R).tolist() == [256.0]
    assert elementwise("f64 x", "f32 y", 'cast(x, "f")')(np.float64([2.5]), backend=R).tolist() == [2.5]
    raises(IRValidationError, elementwise, "f64 x", "f32 y", 'cast(x, "F32")', match="Fix: write 'f32'")


def test_a_literal_below_every_float_type_is_refused_as_one_above_is():
    raises(IRValidationError, elementwise, "f64 x", "f64 y", "x + 1e-400", match="below every float type.*Fix:")
    assert elementwise("f64 x", "f64 y", "x + 0.0e5 + 5e-324")(np.ones(1), backend=R).tolist() == [1.0]
    text = raises(IRValidationError, elementwise, "f64 x", "f64 y", "x +\x00 1")
    assert "column None" not in text


def test_an_int_for_a_bf16_scalar_is_a_value_where_no_uint16_holds_it_else_told_to_say_which():
    k = elementwise("bf16 a, f32 x", "f32 y", "f32(a) + x")
    zero = np.zeros(1, np.float32)
    for value in (65536, 2**20, -3, np.int64(2**20), 2**64):  # exact bf16 values, and no raw bits
        assert k(value, zero, backend=R).tolist() == [float(value)]
    for value, fix in ((3, "pass 3.0 (a float)"), (257, "pass np.uint16(257) for raw bits")):
        text = raises(DispatchError, k, value, zero, backend=R, match="could read as a value or as raw bfloat16 bits")
        assert fix in text
    raises(DispatchError, k, 65537, zero, backend=R, match="not exactly a bf16 value")
    assert k(np.uint16(16256), zero, backend=R).tolist() == [1.0]  # raw bits: 1.0


def test_out_that_is_no_array_and_a_read_of_an_undeclared_buffer_get_fixes_that_apply():
    k = elementwise("f32 x", "f32 y", "x + 1")
    for out in ("abc", (i for i in range(2)), {1}):
        with pytest.raises(DispatchError, match="not an array to write. Fix: pass an array of the inputs' shape"):
            k(np.zeros(2, np.float32), out=out, backend=R)
    with pytest.raises(DispatchError, match="Fix: pass a plain array to fill"):
        k(np.zeros(2, np.float32), out=np.ma.array(np.zeros(2, np.float32)), backend=R)
    with pytest.raises(DispatchError, match=r"Fix: pass x.filled\(value\)"):
        k(np.ma.array(np.zeros(2, np.float32)), backend=R)
    raises(IRValidationError, elementwise, "f32 x", "f32 y", lambda x: x + ir.load("zz", 0),
           match="Fix: use only the function's arguments")
    text = raises(IRValidationError, elementwise, "f32 x", "f32 y", "f16(7.0) + x")
    assert "ir.cast" not in text and "convert one operand by a type's name" in text
