"""Binding host inputs to a program: exact conversions only, every bad argument a DispatchError
with a Fix, and the same launch limits on every backend."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.bindings import bind
from vyre_numba.errors import DispatchError, LaunchError

B = ir.BufferDecl
D = ir.DataType


def one_input(dtype) -> ir.Program:
    return ir.Program([B.read("x", 0, dtype), B.output("y", 1, "u32")], 64, [])


@pytest.mark.parametrize("dtype,value,expected", [
    ("u8", [0, 255], np.array([0, 255], np.uint8)),
    ("i8", np.array([-128, 127], np.int64), np.array([-128, 127], np.int8)),
    ("u32", [1.0, 2.0], np.array([1, 2], np.uint32)),
    ("u64", [2**64 - 1], np.array([2**64 - 1], np.uint64)),
    ("i64", np.array([2.0**62]), np.array([2**62], np.int64)),
    ("f32", [0.5, np.inf, -np.inf], np.array([0.5, np.inf, -np.inf], np.float32)),
    ("f16", np.array([65504.0, -0.0]), np.array([65504.0, -0.0], np.float16)),
    ("f64", np.arange(3, dtype=np.int32), np.arange(3, dtype=np.float64)),
    ("bool", [True, False], np.array([1, 0], np.uint32)),
    ("bool", np.array([0, 1], np.int8), np.array([0, 1], np.uint32)),
    ("bf16", np.array([1.0, -2.5], np.float32), np.array([0x3F80, 0xC020], np.uint16)),
    ("bf16", np.array([0x3F80], np.uint16), np.array([0x3F80], np.uint16)),  # raw bits as they are
    ("u32", 7, np.array([7], np.uint32)),  # a scalar is one element
    ("f32", np.float32(2.5), np.array([2.5], np.float32)),
    ("u32", [], np.zeros(0, np.uint32)),
])
def test_exact_conversions(dtype, value, expected):
    got = bind(one_input(dtype), [value]).arrays["x"]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("dtype,value,fragment", [
    ("u32", [1.5, 2.7], "element 0: np.float64(1.5)"),           # regression: truncated to [1, 2]
    ("f32", [None], "holds objects"),                            # regression: became [nan]
    ("f32", [1e300], "element 0: np.float64(1e+300)"),           # regression: became inf
    ("f32", np.zeros((2, 3), np.float32), "has shape (2, 3)"),   # regression: flattened silently
    ("u8", [256], "element 0: np.int64(256)"),
    ("i8", [-129], "integers from -128 to 127"),
    ("u64", [-1], "element 0"),
    ("u32", [True], "not bools"),
    ("bool", [2], "the integers 0 and 1"),
    ("bool", [0.0], "the integers 0 and 1"),
    ("f32", [2**24 + 1], "element 0: np.int64(16777217)"),
    ("f64", np.array([2**53 + 1], np.int64), "element 0"),
    ("f16", [70000.0], "element 0"),
    ("bf16", np.array([1.1], np.float32), "f32_to_bf16_bits"),
    ("u32", ["1"], "holds strings"),
    ("u32", [1 + 2j], "complex"),
    ("u32", [[1], [2, 3]], "not an array of numbers"),
    ("u32", [2**70], "holds objects"),
])
def test_inexact_conversions_are_refused(dtype, value, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        bind(one_input(dtype), [value])
    assert fragment in str(e.value) and "'x'" in str(e.value)


ELEMENTS = st.one_of(st.integers(-2**65, 2**65), st.floats(allow_nan=True, allow_infinity=True, width=64),
                     st.booleans(), st.none(), st.text(max_size=2), st.lists(st.integers(0, 3), max_size=2))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(dtype=st.sampled_from(list(D)), values=st.lists(ELEMENTS, max_size=5))
def test_conversion_is_exact_or_a_dispatch_error(dtype, values):
    """Property: a list binds to exactly its values, or a DispatchError comes out; nothing else."""
    try:
        got = bind(one_input(dtype), [values]).arrays["x"]
    except DispatchError as e:
        assert "Fix:" in str(e)
        return
    assert got.dtype == dtype.storage and got.size == len(values)
    for g, v in zip(got.tolist(), values):
        if dtype is D.BF16:
            g = float(ir.bf16_bits_to_f32(np.uint16(g)))
        if isinstance(v, float) and v != v:
            assert g != g
        else:
            assert g == v and not isinstance(v, (str, list, type(None)))


@pytest.mark.parametrize("inputs", [5, "abc", np.zeros(3, np.uint32), b"x", {1, 2}])
def test_inputs_that_are_not_a_list_or_dict(inputs):
    with pytest.raises(DispatchError, match="not a list or dict.*Fix:"):
        bind(one_input("u32"), inputs)


@pytest.mark.parametrize("sizes,fragment", [
    ("abc", "sizes is a str"), (5, "sizes is a int"), ({"y": 1.5}, "sizes['y']=1.5"), ({"y": True}, "sizes['y']=True"),
    ({"y": -1}, "sizes['y']=-1"), ({"y": 2**32}, "sizes['y']=4294967296"), ({3: 4}, "sizes names 3"),
    ({"x": 4}, "sizes names 'x'"),
])
def test_bad_sizes(sizes, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        bind(one_input("u32"), [[1, 2]], sizes=sizes)
    assert fragment in str(e.value)


def test_output_counts_of_2_to_the_32_are_refused_before_allocating():
    p = ir.Program([B.output("y", 0, "u32", 2**32)], 64, [])
    with pytest.raises(vn.IRValidationError, match="2\\*\\*32"):
        bind(p, [])
    p = ir.Program([B.output("y", 0, "u32")], 64, [])
    with pytest.raises(DispatchError, match="u32"):
        bind(p, [], sizes={"y": 2**32})


def test_output_byte_range_past_the_buffer_at_dispatch_is_refused():
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", output_byte_range=(0, 64))], 64, [])
    with pytest.raises(DispatchError, match="ends past its 40 bytes.*Fix:"):
        bind(p, [np.zeros(10, np.uint32)])
    assert bind(p, [np.zeros(16, np.uint32)]).results()[0].size == 16


@pytest.mark.parametrize("config,fragment", [
    (DispatchConfig(workgroup=(2048, 1, 1)), "at most 1024 invocations"),
    (DispatchConfig(workgroup=(1, 1, 128)), "at most 1024 invocations"),
    (DispatchConfig(grid=(1, 70000, 1)), "at most (2147483647, 65535, 65535) workgroups"),
    (DispatchConfig(grid=(1, 1, 65536)), "workgroups per axis"),
])
def test_reference_backend_enforces_the_cuda_launch_limits(config, fragment):
    """Regression: the reference backend ran launches every CUDA device refuses."""
    i = ir.gid(0)
    p = ir.Program([B.output("y", 0, "u32", 4)], 64, [ir.if_(i < 4, [ir.store("y", i, 1)])])
    backend = vn.get_backend("reference")
    with pytest.raises(LaunchError, match="Fix:") as e:
        backend.dispatch(p, [], config)
    assert fragment in str(e.value)
    y = backend.upload(np.zeros(4, np.uint32))
    with pytest.raises(LaunchError, match="Fix:"):
        backend.dispatch_resident(p, [y], config)


def test_fast_path_keeps_a_contiguous_array_uncopied():
    x = np.arange(10, dtype=np.uint32)
    assert bind(one_input("u32"), [x]).arrays["x"] is x
    strided = np.arange(20, dtype=np.uint32)[::2]
    got = bind(one_input("u32"), [strided]).arrays["x"]
    assert got.flags.c_contiguous and got.tolist() == strided.tolist()
