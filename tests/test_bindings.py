"""Binding host inputs to a program (vyre_numba.bindings): exact conversions only, every bad argument
a DispatchError with a Fix, and the same launch limits on every backend. docs/inputs.md is the spec."""
from __future__ import annotations

import math
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba import bindings
from vyre_numba.bindings import bind, check_launch_limits, output_view
from vyre_numba.errors import DispatchError, LaunchError, VyreError

B = ir.BufferDecl
D = ir.DataType


def one_input(dtype, access: str = "read") -> ir.Program:
    return ir.Program([getattr(B, access)("x", 0, dtype), B.output("y", 1, "u32")], 64, [])


def bound(dtype, value) -> np.ndarray:
    """What input 'x' of type `dtype` binds to; warnings are errors (a user may run with -W error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return bind(one_input(dtype), [value]).arrays["x"]


def refused(dtype, value) -> str:
    with pytest.raises(DispatchError) as e:
        bound(dtype, value)
    text = str(e.value)
    assert "'x'" in text and text.rsplit("Fix:", 1)[1].strip(), text
    return text


def same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    return (got.dtype == expected.dtype and got.shape == expected.shape and got.flags.c_contiguous
            and got.tobytes() == expected.tobytes())


# ---------------------------------------------------------------------------------------------------
# exact conversions


@pytest.mark.parametrize("dtype,value,expected", [
    ("u8", [0, 255], np.array([0, 255], np.uint8)),
    ("u8", (3, 4), np.array([3, 4], np.uint8)),                                # tuples too
    ("i8", np.array([-128, 127], np.int64), np.array([-128, 127], np.int8)),
    ("i16", np.array([-1, 5], np.int8), np.array([-1, 5], np.int16)),
    ("u32", [1.0, 2.0], np.array([1, 2], np.uint32)),                          # integral floats
    ("u32", np.array([1.0, 4294967295.0]), np.array([1, 2**32 - 1], np.uint32)),
    ("u32", np.array([7, 8], ">u4"), np.array([7, 8], np.uint32)),             # byte order
    ("u32", range(3), np.array([0, 1, 2], np.uint32)),
    ("u32", np.array([3.0], np.float16), np.array([3], np.uint32)),
    ("u32", [-0.0], np.array([0], np.uint32)),
    ("u64", [2**64 - 1, 0], np.array([2**64 - 1, 0], np.uint64)),
    ("u64", np.array([2.0**63]), np.array([2**63], np.uint64)),
    ("i64", [-2**63, 2**63 - 1], np.array([-2**63, 2**63 - 1], np.int64)),
    ("i64", np.array([2.0**62]), np.array([2**62], np.int64)),
    ("u32", [np.int8(1), 2, np.uint64(5)], np.array([1, 2, 5], np.uint32)),     # NumPy scalars in a list
    ("f32", [0.5, np.inf, -np.inf, -0.0], np.array([0.5, np.inf, -np.inf, -0.0], np.float32)),
    ("f32", [2**24, -2**24], np.array([2**24, -2**24], np.float32)),
    ("f32", [np.float32(1.1), 2], np.array([1.1, 2], np.float32)),
    ("f32", np.array([1.5], np.longdouble), np.array([1.5], np.float32)),
    ("f16", np.array([65504.0, -0.0, 2.0**-24]), np.array([65504.0, -0.0, 2.0**-24], np.float16)),
    ("f16", [1, 2048], np.array([1, 2048], np.float16)),
    ("f64", np.arange(3, dtype=np.int32), np.arange(3, dtype=np.float64)),
    ("f64", [2**53, 0.5], np.array([2**53, 0.5])),                               # exact in the common float64
    ("f64", np.array([2**63], np.uint64), np.array([2.0**63])),
    ("f64", [np.float32(0.1)], np.array([np.float32(0.1)], np.float64)),
    ("bool", [True, False], np.array([1, 0], np.uint32)),
    ("bool", [True, 0, np.bool_(False), 1], np.array([1, 0, 0, 1], np.uint32)),
    ("bool", np.array([0, 1], np.int8), np.array([0, 1], np.uint32)),
    ("bool", np.array([5, 0], np.uint32), np.array([5, 0], np.uint32)),       # storage dtype: as it is
    ("bool", True, np.array([1], np.uint32)),
    ("bf16", np.array([1.0, -2.5], np.float32), np.array([0x3F80, 0xC020], np.uint16)),
    ("bf16", [1.5, 2], np.array([0x3FC0, 0x4000], np.uint16)),                # a float list: values
    ("bf16", [-0.0, np.inf], np.array([0x8000, 0x7F80], np.uint16)),
    ("bf16", np.array([0x3F80], np.uint16), np.array([0x3F80], np.uint16)),    # raw bits as they are
    ("bf16", np.uint16(0x3F80), np.array([0x3F80], np.uint16)),
    ("u32", 7, np.array([7], np.uint32)),                                      # a scalar is one element
    ("u32", np.array(7, np.int64), np.array([7], np.uint32)),                  # and so is a 0-d array
    ("f32", np.float32(2.5), np.array([2.5], np.float32)),
    ("f32", 2.5, np.array([2.5], np.float32)),
    ("u32", np.arange(8, dtype=np.uint32)[::2], np.array([0, 2, 4, 6], np.uint32)),  # strided: made contiguous
    ("f32", np.arange(8, dtype=np.float64)[::-2], np.array([7, 5, 3, 1], np.float32)),
    ("u32", np.ma.array([1, 2], mask=[False, False]), np.array([1, 2], np.uint32)),
])
def test_exact_conversions(dtype, value, expected):
    assert same_bits(bound(dtype, value), expected)


@pytest.mark.parametrize("dtype", list(D))
@pytest.mark.parametrize("value", [[], (), np.zeros(0), np.zeros(0, bool), np.zeros(0, np.int64)])
def test_empty_inputs_bind_as_empty_buffers(dtype, value):
    assert same_bits(bound(dtype, value), np.zeros(0, dtype.storage))


def test_nan_stays_nan_in_every_float_type():
    for dtype in (D.F16, D.F32, D.F64):
        assert np.isnan(bound(dtype, [np.nan])).all()
        assert np.isnan(bound(dtype, np.array([np.nan], np.float16))).all()
    assert np.isnan(ir.bf16_bits_to_f32(bound(D.BF16, [np.nan]))).all()


# ---------------------------------------------------------------------------------------------------
# refused conversions


@pytest.mark.parametrize("dtype,value,fragments", [
    # the regressions of the hardening issue
    ("u32", [1.5, 2.7], ["declared u32", "a list, read as float64", "element 0: np.float64(1.5)",
                         "integers from 0 to 4294967295"]),
    ("f32", [None], ["holds None", "element 0: None"]),
    ("f32", [1e300], ["declared f32", "element 0: np.float64(1e+300)", "approximately or not at all"]),
    ("f32", np.zeros((2, 3), np.float32), ["has shape (2, 3)", "x.reshape(-1)"]),
    ("f32", np.zeros((3, 1), np.float32), ["has shape (3, 1)"]),
    ("f32", np.asarray([[1.0, 2.0]], np.float32).view(np.matrix), ["has shape (1, 2)", "np.asarray(x).reshape(-1)"]),
    ("u32", [[1], [2]], ["has shape (2, 1)"]),
    # integers
    ("u8", [256], ["element 0: np.int64(256)", "integers from 0 to 255"]),
    ("i8", [-129], ["integers from -128 to 127"]),
    ("u64", [-1], ["element 0: np.int64(-1)"]),
    ("i64", [2**63], ["element 0: np.uint64(9223372036854775808)"]),
    ("u32", np.array([-1], np.int8), ["an int8 array", "element 0: np.int8(-1)"]),
    ("u32", [0.0, np.nan], ["element 1: np.float64(nan)"]),
    ("u32", [np.inf], ["element 0: np.float64(inf)"]),
    ("u32", [4294967296.0], ["element 0"]),
    ("i32", np.array([0.5], np.float16), ["a float16 array", "element 0"]),
    # bools and numbers do not mix
    ("u32", [True], ["not bools", "element 0"]),
    ("u32", [1, True], ["not bools", "element 1: True"]),                        # regression: was [1, 1]
    ("f32", [True, 1.5], ["not bools", "element 0: True"]),                      # regression: was [1.0, 1.5]
    ("f64", np.array([True, False]), ["a bool array", "not bools"]),
    ("i8", np.bool_(True), ["not bools"]),
    ("bool", [2], ["the integers 0 and 1", "element 0: np.int64(2)"]),
    ("bool", [True, 2], ["element 1"]),
    ("bool", [0.0], ["the integers 0 and 1", "np.asarray(x) != 0"]),
    ("bool", np.array([-1], np.int32), ["element 0: np.int32(-1)"]),
    # floats
    ("f32", [2**24 + 1], ["element 0: np.int64(16777217)"]),
    ("f32", [0.1], ["element 0: np.float64(0.1)"]),
    ("f64", np.array([2**53 + 1], np.int64), ["element 0: np.int64(9007199254740993)"]),
    ("f64", np.array([2**64 - 1], np.uint64), ["element 0"]),
    ("f16", [70000.0], ["element 0: np.float64(70000.0)"]),
    ("f16", [1e-8], ["element 0"]),
    ("f16", np.array([70000], np.int32), ["an int32 array"]),
    # lists NumPy can only read by rounding
    ("f64", [2**53 + 1, 0.5], ["element 0: 9007199254740993", "mixes types", "9007199254740992.0"]),
    ("u64", [2**53 + 1, 1.0], ["element 0: 9007199254740993", "mixes types"]),
    # integers no one NumPy type holds: the one the buffer's type does not hold is named, and the Fix
    # runs (np.asarray(x, np.uint64), the Fix before, raised OverflowError or wrapped -1: a red-team)
    ("u64", [2**64 - 1, -1], ["element 1: -1", "u64 holds integers from 0 to", "drop or change element 1"]),
    ("u64", [np.uint64(2**64 - 1), np.int64(-1)], ["element 1: np.int64(-1)", "drop or change element 1"]),
    ("i64", [2**64 - 1, -1], ["element 0: 18446744073709551615", "i64 holds integers from -9223372036854775808"]),
    ("f64", [np.array(2**53 + 1), 0.5], ["element 0: array(9007199254740993)"]),
    # bf16
    ("bf16", np.array([1.1], np.float32), ["element 0", "8 significant bits", "f32_to_bf16_bits"]),
    ("bf16", [1e300], ["element 0: np.float64(1e+300)"]),
    ("bf16", [16256], ["raw bfloat16 bit patterns", "np.uint16"]),             # values or bits? refused
    ("bf16", np.array([1], np.int32), ["an int32 array", "np.uint16"]),
    ("bf16", 1, ["an int"]),
    ("bf16", [True], ["not bools"]),
    # not numbers at all
    ("u32", ["1"], ["holds strings", "element 0: '1'"]),
    ("u32", [1, "a"], ["holds strings", "element 1: 'a'"]),
    ("u32", "abc", ["holds strings"]),
    ("u32", b"x", ["holds bytes"]),
    # raw bytes by another name (a red-team: one f32 became four, a number a byte)
    ("f32", bytearray(np.float32([1.0]).tobytes()), ["is raw bytes (a bytearray)", "Fix: pass np.frombuffer(x, dtype)"]),
    ("u32", memoryview(b"\x01\0\0\0"), ["is raw bytes (a memoryview)", "np.asarray(x, np.uint8)"]),
    ("f32", [1 + 2j], ["holds complex numbers"]),
    ("f32", np.array([1], np.complex64), ["holds complex numbers", "a complex64 array"]),
    ("u32", [1, None], ["holds None", "element 1: None"]),
    ("u32", None, ["holds None"]),
    ("u32", {"a": 1}, ["values of type dict"]),
    ("u32", object(), ["values of type object"]),
    ("u32", (i for i in range(3)), ["values of type generator"]),
    ("u32", [[1], [2, 3]], ["cannot be read as an array of numbers", "inhomogeneous"]),
    ("u32", [2**70], ["integers beyond 64 bits", "element 0: 1180591620717411303424"]),
    ("f64", [1, 10**400], ["integers beyond 64 bits", "401 characters"]),
    ("u32", np.array(["2020-01-01"], "datetime64[D]"), ["holds dates"]),
    ("u32", np.array([1], object), ["holds Python objects", "an object array"]),
    ("u32", np.ma.array([1, 2], mask=[False, True]), ["masked", "flat index 1", "x.filled"]),
])
def test_inexact_conversions_are_refused(dtype, value, fragments):
    text = refused(dtype, value)
    for fragment in fragments:
        assert fragment in text, text


def test_raw_bytes_are_refused_wherever_host_arrays_are_taken_and_typed_views_are_not():
    from vyre_numba import graph

    be = vn.get_backend("reference")
    raw = bytearray(np.float32([1.0, 2.0]).tobytes())
    for call in (lambda: be.upload(raw), lambda: be.write(be.upload(np.zeros(8, np.float32)), raw),
                 lambda: be.upload(memoryview(bytes(raw))), lambda: graph.check_csr(bytearray(b"\0\1"), [0])):
        with pytest.raises(DispatchError, match=r"raw bytes.*Fix: pass np\.frombuffer\(x, dtype\)"):
            call()
    assert bound("f32", memoryview(np.float32([1.5, 2.0]))).tolist() == [1.5, 2.0]  # a typed view: its values
    assert bound("u8", memoryview(np.uint8([7]))).tolist() == [7]


def test_pandas_missing_values_are_refused_not_read_as_nan():
    pd = pytest.importorskip("pandas")
    be = vn.get_backend("reference")
    gappy = [pd.Series([1, None, 3], dtype="Int64"), pd.Series([1.5, None, 3], dtype="Float32"),
             pd.array([1, None, 3], dtype="Int64"), pd.Index(pd.array([1.0, None, 3.0], dtype="Float64")),
             pd.Series(pd.Categorical([1.0, None, 3.0]))]
    for value in gappy:
        assert "1 missing value(s) (the first at position 1)" in refused("f32", value)
        buf = be.upload(np.zeros(3, np.float32))
        fix = r"Fix: pass x\.cat\.codes.*x\.astype\(x\.cat\.categories\.dtype\)\.fillna" if \
            str(getattr(value, "dtype", "")) == "category" else r"Fix: pass x\.fillna"
        with pytest.raises(DispatchError, match=r"missing value.*" + fix):
            be.write(buf, value)
        assert not be.download(buf).any()
        with pytest.raises(DispatchError, match=r"upload: .*missing value.*" + fix):
            be.upload(value)
    cat = pd.Series(pd.Categorical([1.0, None, 3.0]))  # each conversion the Fix names works
    assert cat.cat.codes.to_numpy().tolist() == [0, -1, 1]
    assert be.upload(cat.astype(cat.cat.categories.dtype).fillna(0.5).to_numpy()).tolist() == [1.0, 0.5, 3.0]
    # a NaN of a NumPy-dtype Series is a value, and a nullable one without gaps binds as its numbers
    assert np.isnan(bound("f32", pd.Series([1.0, np.nan]))[1])
    assert bound("u32", pd.Series([1, 2], dtype="Int64")).tolist() == [1, 2]


def test_gpu_arrays_are_refused():
    class FakeDeviceArray:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<u4", "data": (0, False), "version": 3}
    assert "is a GPU array" in refused("u32", FakeDeviceArray())


def test_an_array_whose_conversion_fails_is_a_dispatch_error():
    class Broken:
        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("no host copy")
    assert "RuntimeError: no host copy" in refused("u32", Broken())


# ---------------------------------------------------------------------------------------------------
# properties: exactly the given values, or a DispatchError; nothing else


def _float_holds(dtype: D, x: int | float) -> bool:
    """Whether the float type `dtype` holds exactly the Python number x (NaN and infinities included)."""
    if isinstance(x, float) and not math.isfinite(x):
        return True
    try:
        f = float(x)
    except OverflowError:
        return False
    if f != x:
        return False
    with np.errstate(over="ignore"):
        if dtype is D.F64:
            return True
        if dtype is D.F32:
            return float(np.float32(f)) == f
        if dtype is D.F16:
            return float(np.float16(f)) == f
        f32 = np.float32(f)
        return float(f32) == f and int(np.array(f32).view(np.uint32)) & 0xFFFF == 0


def _holds(dtype: D, x) -> bool:
    """The rule of docs/inputs.md for one Python element."""
    if isinstance(x, bool):
        return dtype is D.BOOL
    if isinstance(x, int):
        if dtype is D.BOOL:
            return x in (0, 1)
        return dtype.min <= x <= dtype.max if dtype.is_int else _float_holds(dtype, x)
    if isinstance(x, float):
        if dtype is D.BOOL:
            return False
        if dtype.is_int:
            return math.isfinite(x) and x == int(x) and dtype.min <= x <= dtype.max
        return _float_holds(dtype, x)
    return False  # None, strings, lists, complex numbers


def _expected(dtype: D, values: list) -> tuple[bool, bool]:
    """(must bind, may bind) for a list of Python elements."""
    ok = all(_holds(dtype, v) for v in values)
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    floats = [v for v in values if isinstance(v, float)]
    if dtype is D.BF16 and ints and not floats:
        ok = False  # integers could be values or raw bits
    # documented limits of reading a list: integers beyond 64 bits, and integers that the list's common
    # float64 type rounds, are refused even where the buffer's type would hold them
    read_as_float = floats or (any(v >= 2**63 for v in ints) and any(v < 0 for v in ints))
    odd = (any(not -2**63 <= v < 2**64 for v in ints)
           or (read_as_float and any(float(v) != v for v in ints)))
    return ok and not odd, ok


def _assert_exact(dtype: D, got: np.ndarray, values: list) -> None:
    assert got.dtype == dtype.storage and got.shape == (len(values),) and got.flags.c_contiguous
    for g, v in zip(got.tolist(), values):
        if dtype is D.BF16:
            g = float(ir.bf16_bits_to_f32(np.uint16(g)))
        if isinstance(v, float) and math.isnan(v):
            assert g != g
            continue
        assert g == v and type(v) in (bool, int, float), (g, v)
        if isinstance(v, float) and v == 0 and not (dtype.is_int or dtype.is_bool):
            assert math.copysign(1, g) == math.copysign(1, v), (g, v)  # the sign of zero too


BOUNDARIES = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32769, 65535, 65536, 2**31 - 1,
              2**31, -2**31 - 1, 2**32 - 1, 2**32, 2**53, 2**53 + 1, 2**63 - 1, 2**63, -2**63, -2**63 - 1,
              2**64 - 1, 2**64, 2**70]
KINDS = [
    st.integers(-2**65, 2**65), st.sampled_from(BOUNDARIES), st.integers(-3, 3),
    st.floats(width=16), st.floats(width=32), st.floats(), st.sampled_from([float(v) for v in BOUNDARIES]),
    st.floats(-70000, 70000).map(round).map(float), st.sampled_from([0.0, -0.0, 0.5, 1.1, math.nan, math.inf]),
    st.booleans(), st.none(), st.text(max_size=2), st.lists(st.integers(0, 3), max_size=2),
    st.complex_numbers(max_magnitude=4),
]
MIXES = [st.one_of(st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, 1.0, 0.5])),  # bools among numbers
         st.one_of(st.sampled_from(BOUNDARIES), st.sampled_from([0.5, 1.0, -1.0, 2.0**64]))]  # rounded by float64
VALUES = st.one_of(*[st.lists(k, max_size=6) for k in KINDS + MIXES], st.lists(st.one_of(*KINDS), max_size=6))


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(dtype=st.sampled_from(list(D)), values=VALUES)
def test_a_list_binds_to_exactly_its_values_or_is_refused(dtype, values):
    """Property, for Python lists of ints/floats/bools/None/strings/lists/complex numbers into each of the
    13 types: the result holds exactly the given values (NaN as NaN, -0.0 as -0.0), or a DispatchError
    with a Fix comes out; never another exception or warning, never a changed value. Where every element
    is one the buffer's type holds (docs/inputs.md), the list must bind."""
    must, may = _expected(dtype, values)
    try:
        got = bound(dtype, values)
    except DispatchError as e:
        assert not must, f"{values} into {dtype} refused: {e}"
        assert "'x'" in str(e) and "Fix:" in str(e)
        return
    assert may, f"{values} into {dtype} bound to {got}"
    _assert_exact(dtype, got, values)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(dtype=st.sampled_from(list(D)), value=st.one_of(*KINDS).filter(lambda v: not isinstance(v, list)))
def test_a_scalar_binds_as_one_element_or_is_refused(dtype, value):
    """Property: a scalar binds as one element, under the rule for lists."""
    must, may = _expected(dtype, [value])
    try:
        got = bound(dtype, value)
    except DispatchError as e:
        assert not must, f"{value!r} into {dtype} refused: {e}"
        return
    assert may, f"{value!r} into {dtype} bound to {got}"
    _assert_exact(dtype, got, [value])


SOURCE_DTYPES = ["bool", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", ">i4", ">u8", ">f8"]


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(dtype=st.sampled_from(list(D)), source=st.sampled_from(SOURCE_DTYPES), data=st.data())
def test_an_array_binds_to_exactly_its_values_or_is_refused(dtype, source, data):
    """Property, for NumPy arrays of every numeric dtype (either byte order, strided or not) into each of
    the 13 types: an array of the storage dtype binds bit for bit; any other binds to exactly its
    values, or, exactly when some element is not one the buffer's type holds, a DispatchError comes out."""
    arr = data.draw(hnp.arrays(np.dtype(source), st.integers(0, 8)))
    if data.draw(st.booleans()):
        arr = arr[::2]
    try:
        got = bound(dtype, arr)
    except DispatchError as e:
        values = arr.tolist()
        assert arr.dtype != dtype.storage and arr.size, f"{arr!r} into {dtype} refused: {e}"
        assert not (all(_holds(dtype, v) for v in values) and not (dtype is D.BF16 and arr.dtype.kind in "iu")), \
            f"{arr!r} into {dtype} refused: {e}"
        return
    if arr.dtype == dtype.storage:
        assert same_bits(got, np.ascontiguousarray(arr))
    else:
        _assert_exact(dtype, got, arr.tolist())


# ---------------------------------------------------------------------------------------------------
# the fast path


def test_an_array_of_the_storage_dtype_binds_without_a_copy():
    x = np.arange(10, dtype=np.uint32)
    assert bind(one_input("u32"), [x]).arrays["x"] is x
    assert bind(one_input("u32"), {"x": x}).arrays["x"] is x
    h = np.zeros(4, np.uint16)
    assert bind(one_input("bf16"), [h]).arrays["x"] is h
    rw = bind(one_input("u32", "read_write"), [x]).arrays["x"]  # read_write buffers are copied
    assert rw is not x and not np.shares_memory(rw, x) and rw.tolist() == x.tolist()
    assert bind(one_input("u32", "read_write"), [x], copy_inputs=False).arrays["x"] is x


# ---------------------------------------------------------------------------------------------------
# arguments of bind


@pytest.mark.parametrize("inputs", [5, 1.5, True, "abc", b"x", {1, 2}, (i for i in range(1)), np.zeros(3, np.uint32)])
def test_inputs_that_are_not_a_list_or_dict(inputs):
    with pytest.raises(DispatchError, match=r"inputs is an? .*, not a list or dict.*Fix: pass \[x, ...\]") as e:
        bind(one_input("u32"), inputs)
    if isinstance(inputs, np.ndarray):
        assert "a single array goes in a list: [x]" in str(e.value)


@pytest.mark.parametrize("inputs,fragment", [
    ({1: [1]}, "[1] are not input buffers"),
    ({1: [1], None: [2]}, "[1, None] are not input buffers"),  # mixed keys: no TypeError from sorting
    ({("x",): [1], "x": [1]}, "[('x',)] are not input buffers"),
    ({"x": [1], "y": [1]}, "['y'] are not input buffers"),
    ({}, "missing inputs ['x']"),
])
def test_input_dicts_with_bad_keys(inputs, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        bind(one_input("u32"), inputs)
    assert fragment in str(e.value)


@pytest.mark.parametrize("sizes,fragment", [
    ("abc", "sizes is a str"), (5, "sizes is an int"), ([4], "sizes is a list"),
    ({"y": 1.5}, "sizes['y']=1.5"), ({"y": 4.0}, "sizes['y']=4.0"), ({"y": "4"}, "sizes['y']='4'"),
    ({"y": None}, "sizes['y']=None"), ({"y": True}, "sizes['y']=True"), ({"y": np.bool_(True)}, "sizes['y']="),
    ({"y": -1}, "sizes['y']=-1"), ({"y": np.int64(-1)}, "sizes['y']="), ({"y": 2**32}, "sizes['y']=4294967296"),
    ({"y": np.uint64(2**32)}, "sizes['y']="), ({"y": 2**70}, "sizes['y']="),
    ({3: 4}, "sizes names 3"), ({None: 4, "z": 1}, "sizes names 'z', None"), ({"x": 4}, "sizes names 'x'"),
])
def test_bad_sizes(sizes, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        bind(one_input("u32"), [[1, 2]], sizes=sizes)
    assert fragment in str(e.value)


def test_sizes_must_match_a_declared_count():
    p = ir.Program([B.output("y", 0, "u32", 4)], 64, [])
    with pytest.raises(DispatchError, match=r"sizes\['y'\]=5 is not a valid element count \(declared 4\)\. "
                                            r"Fix: pass 4, the count it is declared with, or leave 'y' out of sizes"):
        bind(p, [], sizes={"y": 5})
    assert bind(p, [], sizes={"y": np.int64(4)}).arrays["y"].shape == (4,)


def test_resident_dicts_with_bad_keys():
    backend = vn.get_backend("reference")
    p = ir.Program([B.output("y", 0, "u32", 4)], 64, [])
    with pytest.raises(DispatchError, match=r"missing buffers \['y'\]; no buffer is named 1, None\. Fix: .*and drop "
                                            r"1, None \(its names: \['y'\]\)"):
        backend.dispatch_resident(p, {1: np.zeros(4, np.uint32), None: np.zeros(4, np.uint32)})
    with pytest.raises(DispatchError, match=r"dispatch_resident of 'main': no buffer is named 'z'\. Fix: .*drop 'z'"):
        backend.dispatch_resident(p, {"y": np.zeros(4, np.uint32), "z": np.zeros(4, np.uint32)})
    q = ir.Program([B.output("y", 0, "u32", 4), B.workgroup("t", 4, "u32")], 64, [])
    with pytest.raises(DispatchError, match=r"no buffer is named 'z'; 't' is a workgroup buffer \(made for each "
                                            r"workgroup, never bound\)\. Fix: .*drop 't', 'z'"):
        backend.dispatch_resident(q, {"y": np.zeros(4, np.uint32), "t": np.zeros(4, np.uint32), "z": 1})


# ---------------------------------------------------------------------------------------------------
# output sizes


def _peak_bytes(f) -> int:
    tracemalloc.start()
    try:
        f()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("count", [2**32, 2**32 + 5, 2**40])
def test_static_output_counts_of_2_to_the_32_are_refused_before_allocating(count):
    p = ir.Program([B.output("y", 0, "u64", count)], 64, [])

    def run():
        with pytest.raises(vn.IRValidationError, match=r"2\*\*32.*Fix:"):
            bind(p, [])
        with pytest.raises(vn.IRValidationError, match=r"2\*\*32"):
            vn.get_backend("reference").dispatch(p, [])
    assert _peak_bytes(run) < 2**20  # NumPy's allocations are traced: nothing of the 32 GiB was taken


def test_output_sizes_of_2_to_the_32_are_refused_before_allocating():
    p = ir.Program([B.output("y", 0, "u64")], 64, [])

    def run():
        with pytest.raises(DispatchError, match=r"sizes\['y'\]=4294967296 .*2\*\*32 - 1 \(lengths are u32\)"):
            bind(p, [], sizes={"y": 2**32})
        with pytest.raises(DispatchError, match=r"sizes\['y'\]=4294967296"):
            vn.get_backend("reference").dispatch(p, [], sizes={"y": 2**32})
        largest = bind(p, [], sizes={"y": 2**32 - 1}, allocate_outputs=False)  # the largest count, not allocated
        assert largest.sizes["y"] == 2**32 - 1 and "y" not in largest.arrays and largest.grid == (2**26, 1, 1)
    assert _peak_bytes(run) < 2**20


def test_an_output_allocation_that_fails_is_a_dispatch_error(monkeypatch):
    zeros = np.zeros

    def no_memory(n, dtype=float):
        if n == 3 * 2**30:
            raise MemoryError()
        return zeros(n, dtype)
    monkeypatch.setattr(bindings.np, "zeros", no_memory)
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "f64")], 64, [])
    with pytest.raises(DispatchError, match=r"no host memory for output 'y' \(25769803776 bytes\)\. Fix:"):
        bind(p, [[1]], sizes={"y": 3 * 2**30})


def test_an_input_conversion_that_runs_out_of_memory_is_a_dispatch_error(monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError()
    monkeypatch.setattr(bindings.np, "ascontiguousarray", no_memory)
    with pytest.raises(DispatchError, match=r"no host memory to convert or copy input 'x'\. Fix:"):
        bind(one_input("u32"), [np.arange(8, dtype=np.uint32)[::2]])


# ---------------------------------------------------------------------------------------------------
# output_byte_range


def ranged() -> ir.Program:
    i = ir.gid(0)
    return ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", output_byte_range=(8, 64))], 64,
                      [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) + 1)])])


def test_output_byte_range_past_the_buffer_at_dispatch_is_refused():
    """Regression: the range was clamped to the buffer without a word (on both backends)."""
    with pytest.raises(DispatchError, match=r"output_byte_range \(8, 64\) of 'y' ends past its 40 bytes "
                                            r"\(10 elements\).*Fix: bind a buffer of at least 16 elements"):
        bind(ranged(), [np.zeros(10, np.uint32)])
    with pytest.raises(DispatchError, match="ends past its 60 bytes"):
        vn.get_backend("reference").dispatch(ranged(), [np.zeros(15, np.uint32)])
    with pytest.raises(DispatchError, match="ends past its 40 bytes"):
        bind(ranged(), [np.zeros(20, np.uint32)], sizes={"y": 10})
    (y,) = vn.get_backend("reference").dispatch(ranged(), [np.arange(16, dtype=np.uint32)])
    assert y.tolist() == list(range(3, 17))  # elements 2..15
    assert bind(ranged(), [np.zeros(2, np.uint32)], sizes={"y": 16}).results()[0].size == 14


def test_output_byte_range_past_a_resident_buffer_is_refused():
    backend = vn.get_backend("reference")
    x, short = np.arange(16, dtype=np.uint32), np.full(10, 7, np.uint32)
    with pytest.raises(DispatchError, match="ends past its 40 bytes"):
        backend.dispatch_resident(ranged(), [x, short])
    assert short.tolist() == [7] * 10  # refused before anything was written
    y = np.zeros(16, np.uint32)
    backend.dispatch_resident(ranged(), [x, y])
    assert y.tolist() == list(range(1, 17))


def test_output_view_refuses_a_short_array():
    decl = ranged().buffers[1]
    assert output_view(decl, np.arange(16, dtype=np.uint32)).tolist() == list(range(2, 16))
    with pytest.raises(DispatchError, match="ends past its 60 bytes.*Fix:"):
        output_view(decl, np.zeros(15, np.uint32))


# ---------------------------------------------------------------------------------------------------
# launch limits: what the reference runs, every CUDA device runs


def guarded() -> ir.Program:
    i = ir.gid(0)
    return ir.Program([B.output("y", 0, "u32", 4)], 64, [ir.if_(i < 4, [ir.store("y", i, 1)])])


@pytest.mark.parametrize("config,fragment", [
    (DispatchConfig(workgroup=(2048, 1, 1)), "at most 1024 invocations"),
    (DispatchConfig(workgroup=(1025, 1, 1)), "(it has 1025)"),
    (DispatchConfig(workgroup=(64, 64, 1)), "(it has 4096)"),
    (DispatchConfig(workgroup=(1, 1, 65)), "(1024, 1024, 64) per axis"),
    (DispatchConfig(workgroup=(1, 1, 128)), "(1024, 1024, 64) per axis"),
    (DispatchConfig(grid=(1, 70000, 1)), "at most (2147483647, 65535, 65535) workgroups"),
    (DispatchConfig(grid=(1, 1, 65536)), "workgroups per axis"),
    (DispatchConfig(grid=(2**31, 1, 1)), "workgroups per axis"),
    (DispatchConfig(grid=(2**31 - 1, 1, 1), workgroup=(4, 1, 1)), "8589934588 invocations along axis x overflow"),
    (DispatchConfig(grid=(2**22 + 1, 1, 1), workgroup=(1024, 1, 1)), "along axis x overflow the u32"),
])
def test_reference_backend_enforces_the_cuda_launch_limits(config, fragment):
    """Regression: the reference backend ran launches every CUDA device refuses."""
    backend = vn.get_backend("reference")
    with pytest.raises(LaunchError, match="Fix:") as e:
        backend.dispatch(guarded(), [], config)
    assert fragment in str(e.value) and "'main'" in str(e.value)
    with pytest.raises(LaunchError, match="Fix:"):
        backend.dispatch_async(guarded(), [], config)  # refused at the call
    y = np.full(4, 9, np.uint32)
    with pytest.raises(LaunchError, match="Fix:"):
        backend.dispatch_resident(guarded(), [y], config)
    assert y.tolist() == [9] * 4


@pytest.mark.parametrize("config", [
    DispatchConfig(workgroup=(1024, 1, 1)), DispatchConfig(workgroup=(1, 1024, 1)),
    DispatchConfig(workgroup=(1, 1, 64)),
    DispatchConfig(workgroup=(32, 32, 1)), DispatchConfig(grid=(4, 65535, 1), workgroup=(1, 1, 1)),
    DispatchConfig(grid=(4, 1, 65535), workgroup=(1, 1, 1)), DispatchConfig(grid=(0, 1, 1)),
])
def test_launches_at_the_limits_run(config):
    (y,) = vn.get_backend("reference").dispatch(guarded(), [], config)
    assert y.tolist() == ([1] * 4 if config.grid != (0, 1, 1) else [0] * 4)


@pytest.mark.parametrize("grid,wg,ok", [
    ((2**31 - 1, 65535, 65535), (1, 1, 1), True),
    ((2**22, 1, 1), (1024, 1, 1), True),           # 2**32 invocations along x: ids up to 2**32 - 1
    ((2**22 + 1, 1, 1), (1024, 1, 1), False),
    ((2**31 - 1, 1, 1), (2, 1, 1), True),
    ((2**31 - 1, 1, 1), (3, 1, 1), False),
    ((1, 65535, 1), (1, 1024, 1), True),
    ((1, 65536, 1), (1, 1, 1), False),
    ((1, 1, 1), (1024, 1, 1), True),
    ((1, 1, 1), (512, 2, 1), True),
    ((1, 1, 1), (512, 2, 2), False),
    ((1, 1, 1), (1, 1025, 1), False),
])
def test_check_launch_limits_at_the_boundaries(grid, wg, ok):
    if ok:
        check_launch_limits("p", grid, wg)
    else:
        with pytest.raises(LaunchError, match=r"launch of 'p' with grid .* x workgroup .*Fix:"):
            check_launch_limits("p", grid, wg)


def test_an_automatic_grid_over_the_limits_is_a_launch_error():
    """Without config.grid the launch covers the largest output along x; past 2**31 - 1 workgroups it
    is refused, before any allocation."""
    p = ir.Program([B.output("y", 0, "u32")], 64, [])
    with pytest.raises(LaunchError, match=r"grid \(4294967295, 1, 1\) x workgroup \(1, 1, 1\).*Fix:"):
        bind(p, [], DispatchConfig(workgroup=(1, 1, 1)), sizes={"y": 2**32 - 1}, allocate_outputs=False)


def test_every_error_here_is_a_vyre_error():
    assert issubclass(DispatchError, VyreError) and issubclass(LaunchError, VyreError)


@pytest.mark.parametrize("declared, n, fragment", [(0, 2**32, "has 4294967296 elements; lengths and indices are u32"),
                                                   (1, 2**31, "is declared with 1 elements, got 2147483648")])
def test_an_arrays_size_is_refused_before_it_is_converted(monkeypatch, declared, n, fragment):
    """Regression (a red-team): a strided view of 2**32 elements was copied whole (4 GiB and more)
    before the size limit refused it; under a memory limit the error said to pass a contiguous array."""
    from vyre_numba import bindings

    def converted(*args, **kwargs):
        raise AssertionError("converted before its size was checked")

    monkeypatch.setattr(bindings, "as_host_array", converted)
    p = ir.Program([ir.BufferDecl.read("x", 0, "f32", declared), ir.BufferDecl.output("y", 1, "f32", 4)], 4,
                   [ir.store("y", 0, ir.load("x", 0))])
    with pytest.raises(DispatchError, match=fragment):
        bindings.bind(p, [np.broadcast_to(np.float64(1), (n,))])


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_a_matrix_refused_anywhere_is_passed_by_doing_what_the_fix_says():
    """Regression (a red-team): the Fix said x.reshape(-1), which keeps an np.matrix 2-D, so doing
    what it said gave the same error again (dispatch, compaction, graphs)."""
    import re

    from vyre_numba import compaction, get_backend
    from vyre_numba.graph import connected_components

    m = np.matrix([1.0, 2.0, 3.0], np.float32)
    p = ir.Program([B.read("a", 0, "f32"), B.output("o", 1, "f32")], 64,
                   [ir.if_(ir.gid(0) < ir.buf_len("a"), ir.store("o", ir.gid(0), ir.load("a", ir.gid(0))))])
    graph = (np.matrix([0, 1, 2]), np.array([1, 0]))
    for call, redo in (
            (lambda x: get_backend("reference").dispatch(p, [x], sizes={"o": 3}), None),
            (lambda x: compaction.select(x, np.array([1, 0, 1], np.uint8)), None),
            (lambda x: connected_components(x, graph[1], backend="reference"), graph[0])):
        given = m if redo is None else redo
        with pytest.raises(DispatchError) as e:
            call(given)
        fix = re.search(r"np\.asarray\((\w+)\)\.reshape\(-1\)", str(e.value))
        assert fix, str(e.value)
        call(np.asarray(given).reshape(-1))  # passes


def test_a_launch_that_misses_part_of_a_guarded_buffer_warns_with_the_grid_that_covers_it():
    """Regression (a red-team): a histogram reading 10,000 values into 12 bins launched over the
    bins (the documented default) and counted 256 of them, silently."""
    import warnings

    be = vn.get_backend("reference")
    i = ir.var("i")
    body = [ir.let("i", ir.gid(0)),
            ir.if_(i < ir.buf_len("z"), [ir.let("o", ir.atomic("add", "h", ir.load("z", i) % 12, ir.u32(1)))])]
    hist = ir.Program([ir.BufferDecl.read("z", 0, "u32"), ir.BufferDecl.read_write("h", 1, "u32")], 256, body,
                      name="hist")
    z = np.arange(10_000, dtype=np.uint32)
    with pytest.warns(vn.CoverageWarning, match=r"buf_len\('z'\), 10000 elements.*Fix: pass "
                                                r"DispatchConfig\(grid=\(40, 1, 1\)\)"):
        (h,) = be.dispatch(hist, [z, np.zeros(12, np.uint32)])
    assert h.sum() == 256
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (h,) = be.dispatch(hist, [z, np.zeros(12, np.uint32)], DispatchConfig(grid=(40, 1, 1)))
        assert h.sum() == 10_000
        # a grid-stride loop moves its index on: the launch need not cover the buffer
        stride = [ir.let("i", ir.gid(0)),
                  ir.loop("k", 0, 64, [ir.if_(i < ir.buf_len("z"), [ir.let("o", ir.atomic(
                      "add", "h", ir.load("z", i) % 12, ir.u32(1)))]), ir.assign("i", i + 256)])]
        p = ir.Program(hist.buffers, 256, stride, name="strided")
        assert be.dispatch(p, [z, np.zeros(12, np.uint32)])[0].sum() == 10_000
        same = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.output("y", 1, "u32")], 64,
                          [ir.if_(ir.gid(0) < ir.buf_len("x"), [ir.store("y", ir.gid(0), ir.load("x", ir.gid(0)))])],
                          name="copy")
        assert be.dispatch(same, [z])[0].tolist() == z.tolist()  # the output is as long: covered


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_call_of_many_steps_warns_once_of_each_uncovered_buffer(name):
    """Regression (a review): a sequence warned once a step (a thousand for one step repeated a
    thousand times), and fuse and megakernel twice a step (checked, then planned)."""
    import warnings

    from vyre_numba.backend import Step

    be = vn.get_backend(name)
    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.read_write("y", 1, "u32")], 64,
                   [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [ir.let("_0", ir.atomic_add("y", 0, 1))])],
                   name="count")
    x, y = be.upload(np.ones(1000, np.uint32)), be.upload(np.zeros(4, np.uint32))
    other = be.upload(np.ones(2000, np.uint32))
    for call, distinct in ((lambda: be.dispatch_sequence([Step(p, [x, y])] * 50), 1),
                           (lambda: be.dispatch_sequence([Step(p, [x, y]), Step(p, [other, y])] * 3), 2),
                           (lambda: be.fuse([Step(p, [x, y])] * 3), 1),
                           (lambda: be.megakernel([Step(p, [x, y])] * 3).run(), 1),
                           (lambda: be.record_sequence([Step(p, [x, y])] * 3).close(), 1)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call()
        assert len(seen) == distinct and all(w.category is vn.CoverageWarning for w in seen), \
            [str(w.message) for w in seen]
    with warnings.catch_warnings(record=True) as seen:  # separate calls: each warns (where the GPU prepares
        warnings.simplefilter("always")                   # the launch again: it keeps a prepared one, said once)
        be.dispatch_resident(p, [x, y])
        be.dispatch_resident(p, [x, y])
    assert len(seen) == 2 if name == "reference" else len(seen) <= 2
    narrow = ir.Program(p.buffers, 64, p.entry, name="narrow")  # programs new to the GPU's prepared launches
    wide = ir.Program(p.buffers, 128, p.entry, name="wide")  # another workgroup: another grid to cover it
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        be.dispatch_sequence([Step(narrow, [x, y]), Step(wide, [x, y])])
    assert sorted(str(w.message).split("grid=(")[1][:2] for w in seen) == ["16", "8,"], [str(w.message) for w in seen]
    with warnings.catch_warnings(record=True) as seen:  # a replay runs what its recording warned of, quietly
        warnings.simplefilter("always")
        s = be.record_sequence([Step(p, [x, y])])
        g = be.record_graph(p, [np.ones(1000, np.uint32), np.zeros(4, np.uint32)])
        said = len(seen)
        for _ in range(3):
            s.replay()
            g.replay([np.ones(1000, np.uint32), np.zeros(4, np.uint32)])
            g.replay_resident()
        s.close(), g.close()
    assert len(seen) == said <= 2 and all(w.category is vn.CoverageWarning for w in seen)


def test_bools_uploaded_for_a_bool_buffer_are_told_the_exact_conversion():
    """A red-team's leftover: upload of a bool array makes a one-byte buffer, which a bool-declared
    buffer (one uint32 a flag) refuses; its Fix spoke of truncating 0.5, which bools never hold."""
    import vyre_numba as vn
    from vyre_numba import ir

    be = vn.get_backend("reference")
    p = ir.Program([ir.BufferDecl.read_write("x", 0, "bool")], 64,
                   [ir.let("i", ir.gid(0)),
                    ir.if_(ir.var("i") < ir.buf_len("x"), [ir.store("x", ir.var("i"), ir.lit(True))])],
                   name="p")
    flags = np.array([True, False, True])
    with pytest.raises(vn.DispatchError, match=r"'x' is declared bool \(stored as uint32.*holds bool\. Fix: upload "
                                               r"x\.astype\(np\.uint32\) \(True is 1\), or make the buffer for the "
                                               r"program, backend\.allocate\(program, 'x', n\)\.$"):
        be.dispatch_resident(p, [be.upload(flags)])
    x = be.upload(flags.astype(np.uint32))  # the Fix, followed
    be.dispatch_resident(p, [x])
    assert be.download(x).tolist() == [1, 1, 1]
