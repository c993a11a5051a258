"""Stream compaction: the NumPy twins, every bad input, the kernels under the CUDA simulator, and
the GPU against the twins on every size and type that could break a tiled scan."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vyre_numba.simulator
from vyre_numba import compaction
from vyre_numba.compaction.select import TILE, Selector
from vyre_numba.errors import CapacityError, DeviceError, DispatchError, HostMemoryError

RECORD = np.dtype([("id", "i4"), ("w", "f8"), ("tag", "u1")])


def records(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.zeros(n, RECORD)
    r["id"] = rng.integers(-1000, 1000, n)
    r["w"] = rng.random(n)
    r["tag"] = rng.integers(0, 255, n)
    return r


# ---- host arrays: the NumPy twins --------------------------------------------------------------

class Unhashable:
    """A callable that cannot be hashed (it defines __eq__ without __hash__)."""

    def __call__(self, v):
        return v > 1

    def __eq__(self, other):
        return self is other


def test_a_selector_without_a_gpu_says_what_runs_on_the_cpu(monkeypatch):
    """Regression (a red-team): Selector() on a machine without a GPU raised Numba's CudaSupportError."""
    from numba import cuda

    from vyre_numba.errors import BackendUnavailableError

    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(BackendUnavailableError, match="host arrays on the CPU") as e:
        compaction.Selector()
    assert str(e.value).rstrip().split("Fix: ")[1]


class _Interface:
    """All the CUDA Array Interface asks of a device array: the dict (no shape, no dtype)."""

    def __init__(self, typestr: str = "<i4", n: int = 4):
        self.__cuda_array_interface__ = dict(shape=(n,), typestr=typestr, data=(0, False), version=3, strides=None)


@pytest.mark.parametrize("call", [
    lambda: compaction.select(_Interface(), _Interface("|u1")),
    lambda: compaction.nonzero(_Interface("|u1")),
    lambda: compaction.select_if(_Interface(), lambda v: v > 0),
    lambda: compaction.read_compacted(_Interface(), _Interface("|u1")),
], ids=["select", "nonzero", "select_if", "read_compacted"])
def test_an_interface_only_device_array_without_a_gpu_says_what_runs_on_the_cpu(monkeypatch, call):
    """Regression (a red-team): an object with only __cuda_array_interface__ raised AttributeError
    (no .shape), and without a driver the selector's context lookup raised the driver's own
    error: both now say what is wrong and what runs on the CPU."""
    from numba import cuda

    from vyre_numba.errors import BackendUnavailableError

    if vyre_numba.simulator.SIMULATED:
        pytest.skip("under the CUDA simulator a device array is the simulator's")
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    monkeypatch.setattr(compaction.memory, "_context", lambda: (_ for _ in ()).throw(RuntimeError("no driver")))
    with pytest.raises(BackendUnavailableError, match="host arrays on the CPU.*") as e:
        call()
    assert "Fix: " in str(e.value)


def test_an_interface_naming_no_dtype_numpy_knows_is_refused():
    """Regression (a red-team): a typestr NumPy cannot read raised a raw TypeError."""
    for call in (lambda: compaction.select(_Interface("<x9"), _Interface("|u1")),
                 lambda: compaction.nonzero(_Interface("|q3"))):
        with pytest.raises(DispatchError, match=r"names no element type NumPy knows.*Fix: "):
            call()


def test_a_ufunc_or_builtin_predicate_is_refused_with_the_lambda_to_write():
    """Regression (a red-team): np.isfinite and abs were refused with Numba's "The decorated
    object is not a function" and a Fix that did not say what to write."""
    x = np.array([1.0, np.inf, np.nan])
    with pytest.raises(DispatchError, match=r"NumPy ufunc isfinite.*Fix: wrap it in a lambda: lambda v: np\.isfinite\(v\)"):
        compaction.select_if(x, np.isfinite)
    import math
    import operator

    for f, call in ((abs, "abs(v)"), (math.isnan, "math.isnan(v)"), (operator.truth, "operator.truth(v)"),
                    (bool, "bool(v)")):  # the module named, so that the lambda runs as written (a review)
        with pytest.raises(DispatchError, match=r"Fix: wrap it in a lambda: lambda v: ") as e:
            compaction.select_if(x, f)
        assert str(e.value).endswith(f"lambda v: {call}.")
        if f in (math.isnan, bool):  # abs returns no bool, and Numba has no operator.truth
            written = eval(f"lambda v: {call}", {"math": math, "operator": operator})
            assert np.array_equal(compaction.select_if(x, written), x[[bool(written(v)) for v in x]], equal_nan=True)
    assert compaction.select_if(x, lambda v: np.isfinite(v)).tolist() == [1.0]


def test_a_numba_vectorize_predicate_is_told_the_lambda_that_calls_it():
    """Regression (a carried note): a @numba.vectorize function was refused with Numba's "The
    decorated object is not a function (got type DUFunc)"."""
    import numba

    @numba.vectorize(["boolean(int64)"])
    def big(v):
        return v > 2

    x = np.arange(6)
    with pytest.raises(DispatchError, match=r"predicate is the Numba @vectorize ufunc big, .*"
                                            r"Fix: wrap it in a lambda: lambda v: big\(v\)\.$"):
        compaction.select_if(x, big)
    assert compaction.select_if(x, lambda v: big(v)).tolist() == [3, 4, 5]


def test_a_float32_predicate_computes_in_float64_beside_a_python_float_as_documented():
    """The module docstring's promise, held to: Numba's promotion, not NumPy 2's."""
    x = np.array([0.1, 0.2], np.float32)
    assert compaction.select_if(x, lambda v: v == 0.1).size == 0 and x[x == 0.1].size == 1
    assert compaction.select_if(x, lambda v: v == np.float32(0.1)).tolist() == [np.float32(0.1)]
    b = np.array([True, False])
    assert compaction.select_if(b, lambda v: v + v > 1).tolist() == [True] and b[b + b > 1].size == 0


def test_host_inputs_give_numpy_results_in_order():
    x = np.arange(10, dtype=np.int16)
    assert compaction.select(x, x % 3 == 0).tolist() == [0, 3, 6, 9]
    assert compaction.select(x, (x % 2).astype(np.uint8)).tolist() == [1, 3, 5, 7, 9]
    assert compaction.nonzero(np.array([0, 2, 0, -1], np.int64)).tolist() == [1, 3]
    assert compaction.nonzero(np.array([0, 2], np.int64)).dtype == np.int64
    assert compaction.select_if(np.arange(5.0), lambda v: v >= 3).tolist() == [3.0, 4.0]
    assert np.array_equal(compaction.select(records(9), np.arange(9) > 4), records(9)[5:])
    assert compaction.select(np.zeros(0, np.float32), np.zeros(0, bool)).size == 0
    flags = np.array([1, 0, 1, 1, 0], np.uint8)
    values = np.arange(5, dtype=np.int32)
    assert compaction.select_numpy(values, flags).tolist() == [0, 2, 3]
    assert compaction.nonzero_numpy(flags).tolist() == [0, 2, 3]
    assert compaction.select_if_numpy(values, lambda v: v > 2).tolist() == [3, 4]


def test_read_compacted_of_host_arrays_is_the_numpy_twins_with_the_same_capacity_rule():
    """Code written for device arrays runs unchanged on host ones (a notebook on a laptop)."""
    values, flags = records(50), (np.arange(50) % 3 == 0)
    values_before, flags_before = values.copy(), flags.copy()
    assert np.array_equal(compaction.read_compacted(values, flags), values[flags])
    assert np.array_equal(compaction.read_compacted(values, flags, capacity=17), values[flags])
    with pytest.raises(CapacityError, match="17 records are selected, more than capacity=16. Fix:") as e:
        compaction.read_compacted(values, flags, capacity=16)
    assert e.value.needed == 17
    assert np.array_equal(values, values_before) and np.array_equal(flags, flags_before)
    assert compaction.read_compacted(np.zeros(0, np.int32), np.zeros(0, bool)).dtype == np.int32


def test_every_backend_reads_compacted_records_of_its_buffers():
    """backend.read_compacted: the reference backend's buffers are host arrays (the twin, the
    capacity rule, the bytes read back counted); a device array given to it is refused."""
    from vyre_numba import get_backend

    b = get_backend("reference")
    b.reset_telemetry()
    values, flags = np.arange(40, dtype=np.float64) - 20.5, np.arange(40) % 4 == 1
    buf = b.upload(values)
    assert b.read_compacted(buf, b.upload(flags.astype(np.uint8))).tolist() == values[flags].tolist()
    with pytest.raises(CapacityError, match="10 records are selected, more than capacity=9. Fix:") as e:
        b.read_compacted(buf, flags, capacity=9)
    assert e.value.needed == 10 and buf.tobytes() == values.tobytes()
    r = records(40)
    assert b.read_compacted(r, flags, capacity=10).tobytes() == r[flags].tobytes()  # host records as they are
    assert b.telemetry()["bytes_read_back"] == values[flags].nbytes + r[flags].nbytes

    class OnDevice:  # what a CuPy or PyTorch array shows
        __cuda_array_interface__ = {"shape": (40,), "typestr": "<i4", "data": (0, False), "version": 3}
        shape, dtype = (40,), np.dtype(np.int32)
    with pytest.raises(DispatchError, match="reference backend takes its buffers, host .* Fix:"):
        b.read_compacted(OnDevice(), flags)


def test_select_if_takes_numba_compiled_predicates_and_either_byte_order():
    from numba import cuda, njit

    x = np.arange(20, dtype=np.int32)
    assert compaction.select_if(x, njit(lambda v: v > 16)).tolist() == [17, 18, 19]
    assert compaction.select_if(x, cuda.jit(device=True)(lambda v: v % 7 == 0)).tolist() == [0, 7, 14]
    big = x.astype(">i4")
    got = compaction.select_if(big, lambda v: v > 17)
    assert got.dtype == big.dtype and got.tolist() == [18, 19]
    assert compaction.select_if_numpy(big, njit(lambda v: v < 2)).tolist() == [0, 1]


NUMBA_TYPED = [  # (values, predicate, kept): Numba's 64-bit integer typing, as the module docstring says
    (np.arange(3, dtype=np.uint8), lambda v: v - 1 > 0, [2]),  # NumPy 2's u - 1 wraps: u[u - 1 > 0] is [0, 2]
    (np.array([2**53 + 1], np.uint64), lambda v: v > 2**53, []),  # a float64 comparison
    (np.array([2**53 + 1], np.uint64), lambda v: v > np.uint64(2**53), [2**53 + 1]),  # exact
    (np.array([127, -128], np.int8), lambda v: v + 1 > 0, [127]),  # no int8 wrap
]


@pytest.mark.parametrize("values,predicate,kept", NUMBA_TYPED)
def test_predicates_are_typed_as_numba_types_them(values, predicate, kept):
    """Regression (a red-team): the docstring said a predicate's arithmetic was NumPy's; its types are
    Numba's, which differ from NumPy 2's for Python ints beside narrow or unsigned values."""
    assert compaction.select_if(values, predicate).tolist() == kept


def test_predicates_with_defaults_are_typed_as_called_with_one_value():
    """A default argument (the usual way to fix a loop variable in a lambda) is filled in as a
    call of one value fills it; the result's type is still checked; keyword-only arguments are
    outside Numba's subset and say so."""
    x = np.arange(6.0)
    for t in (1, 3):
        assert compaction.select_if(x, lambda v, t=t: v > t).tolist() == x[x > t].tolist()
        assert compaction.select_if_numpy(x.astype(np.int16), lambda v, t=t: v > t).tolist() == list(range(t + 1, 6))
    with pytest.raises(DispatchError, match="returns float64 for float64 values, not a bool. Fix:"):
        compaction.select_if(x, lambda v, t=0.5: v + t)
    with pytest.raises(DispatchError, match="does not compile with Numba.*Fix:"):
        compaction.select_if(x, lambda v, *, t=0.5: v > t)
    with pytest.raises(DispatchError, match=r"does not compile with Numba \(Unknown attribute 'nope' of type float64\)"
                       ) as e:  # Numba's reason, not its pipeline stage, and no chain of its frames under it
        compaction.select_if(x, lambda v: v.nope > 3)
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert compaction.select_if(x, lambda *v: v[0] > 2).tolist() == [3.0, 4.0, 5.0]  # one value, as a tuple
    with pytest.raises(DispatchError, match="Fix:"):
        compaction.select_if(x, lambda *v: v[0] + 0.5)


def test_a_predicate_reading_a_deeply_nested_tuple_is_a_vyre_error():
    """Its key (the values it reads) cannot be built within the interpreter's depth: it is kept by
    the function itself, and what Numba makes of the tuple ends in a DispatchError, never a raw
    RecursionError."""
    deep: tuple = ()
    for _ in range(1000):
        deep = (deep, 1)
    select = sys.modules["vyre_numba.compaction.select"]

    def reads_deep(v):
        return v > 0 and len(deep) >= 0
    assert select.predicate_key(reads_deep) is reads_deep
    with pytest.raises(DispatchError, match=r"the predicate does not compile with Numba \(maximum recursion depth "
                                            r"exceeded.*\)\. Fix: write it in Numba's subset"):
        compaction.select_if(np.arange(3.0), reads_deep)


def test_the_result_type_is_checked_for_each_value_type():
    """A predicate whose result is a bool (or an integer) for one value type may return a float for
    another: its result type is checked for each value type it is called with, not once for the
    predicate. (v * 1 is an integer for integers, allowed; a float for floats, true for NaN.)"""
    def times_one(v):
        return v * 1
    assert compaction.select_if(np.arange(4), times_one).tolist() == [1, 2, 3]
    with pytest.raises(DispatchError, match=r"the predicate returns float64 for float64 values, not a bool\. Fix:"):
        compaction.select_if(np.array([0.0, 0.5, np.nan]), times_one)
    with pytest.raises(DispatchError, match=r"returns float64 for float32 values, not a bool\. Fix:"):  # Numba's typing
        compaction.select_if_numpy(np.array([0.0, 0.5, np.nan], np.float32), times_one)
    assert compaction.select_if(np.arange(4, dtype=np.int16), times_one).tolist() == [1, 2, 3]  # ints still served
    assert compaction.select_if(np.arange(4), times_one).tolist() == [1, 2, 3]


def _raises_for_some(v):
    if v > 1:
        raise ValueError("too big")
    return v > 0


def _always_raises(v):
    raise ValueError("boom")


@pytest.mark.parametrize("call,fragment", [
    (lambda: compaction.select(np.arange(3), np.ones(4, bool)), "one flag per value"),
    (lambda: compaction.select(np.arange(3), np.ones(3, np.float32)), "not integers or bools"),
    (lambda: compaction.select(np.ones((2, 2)), np.ones(4, bool)), "not 1-D"),
    (lambda: compaction.select(np.arange(6)[::2], np.ones(3, bool)), "not contiguous"),
    (lambda: compaction.select(np.array(["a", "b"], object), np.ones(2, bool)), "items of 1, 2, 4 or 8 bytes"),
    (lambda: compaction.select(np.zeros(2, "V80"), np.ones(2, bool)), "items of 1, 2, 4 or 8 bytes"),
    (lambda: compaction.select([1, 2], [True, False]), "not a NumPy or device array"),
    (lambda: compaction.select(np.arange(2), [True, False]), "flags is a list"),
    (lambda: compaction.select(np.arange(2), None), "flags is a NoneType"),
    (lambda: compaction.nonzero((1, 0)), "np.asarray(flags)"),
    (lambda: compaction.nonzero(3), "flags is an int"),
    (lambda: compaction.select(np.arange(2), np.ma.MaskedArray([1, 0], mask=[1, 0])), "ignore its mask"),
    (lambda: compaction.select_if(np.arange(3), lambda v: (v, v)), "returns UniTuple"),
    (lambda: compaction.select_if(np.arange(3), lambda v: "yes"), "not a bool"),
    (lambda: compaction.select_if(np.arange(3), lambda v: v * 0.5), "returns float64"),
    (lambda: compaction.select_if(np.arange(3), np.isfinite), "wrap it in a lambda: lambda v: np.isfinite(v)"),
    (lambda: compaction.select_if(np.arange(3), 5), "not a function"),
    (lambda: compaction.select_if(np.arange(3), lambda v: v.no_such_attribute), "does not compile"),
    (lambda: compaction.select_if(np.arange(3), _raises_for_some), "raised ValueError"),
    (lambda: compaction.select_if(np.arange(3), _always_raises), "raises an exception for every int64 value"),
    (lambda: compaction.select(np.zeros(2, [("a", object)]), np.ones(2, bool)), "items of 1, 2, 4 or 8 bytes"),
    (lambda: compaction.select(np.zeros(2, [("a", "i4"), ("b", [("c", object)])]), np.ones(2, bool)), "items of 1, 2, 4 or 8 bytes"),
    (lambda: compaction.select_if(records(3), lambda v: True), "record array"),
    (lambda: compaction.select_if(np.arange(3, dtype=np.float16), lambda v: v > 1), "does not take float16"),
    (lambda: compaction.select_if(np.arange(3, dtype=">f2"), lambda v: v > 1), "does not take float16"),
    (lambda: compaction.nonzero(np.ones(3, np.float64)), "not integers or bools"),
    (lambda: compaction.read_compacted(np.arange(3), np.ones(3, bool), capacity=-1), "not a count of records"),
    (lambda: compaction.read_compacted(np.arange(3), np.ones(3, bool), capacity=True), "not a count of records"),
    (lambda: compaction.read_compacted(np.arange(3), np.ones(3, bool), capacity=np.timedelta64(3)),
     "not a count of records"),
    (lambda: compaction.select_if(np.arange(3), Unhashable()), "cannot be hashed"),
    *[(lambda stream=stream: call(np.arange(3), np.ones(3, bool), stream=stream), "not a Numba stream")
      for stream in ("junk", 5, object()) for call in (compaction.select, compaction.read_compacted)],
    (lambda: compaction.nonzero(np.ones(3, bool), stream="junk"), "not a Numba stream"),
    (lambda: compaction.select_numpy(np.arange(5), np.ones(3, bool)), "one flag per value"),
    (lambda: compaction.nonzero_numpy(np.ones((2, 5), bool)), "not 1-D"),
    (lambda: compaction.select_if_numpy(np.arange(3), lambda v: "yes"), "not a bool"),
    (lambda: compaction.select_numpy(FakeDeviceArray(3), FakeDeviceArray(3)), "take host arrays"),
])
def test_bad_inputs_raise_with_a_fix(call, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        call()
    assert fragment in str(e.value)


def _failure(name: str, module: str) -> Exception:
    return type(name, (Exception,), {"__module__": module})("ERROR_COMPILATION (9)")


@pytest.mark.parametrize("failure, error, fragment", [
    (lambda: __import__("numba.cuda.cudadrv.driver", fromlist=["CudaAPIError"]).CudaAPIError(700, "illegal address"),
     DeviceError, "GPU failed"),
    (lambda: _failure("CudaAPIError", "numba.cuda.simulator.cudadrv.driver"), DeviceError, "GPU failed"),
    (lambda: _failure("CUDAError", "cuda.core._utils.cuda_utils"), DeviceError, "GPU failed"),
    (lambda: _failure("nvvmError", "cuda.bindings.nvvm"), DispatchError, "does not compile"),
    (lambda: _failure("nvJitLinkError", "cuda.bindings.nvjitlink"), DispatchError, "does not compile"),
    (lambda: _failure("NvrtcCompilationError", "numba.cuda.cudadrv.error"), DispatchError, "does not compile"),
    (lambda: ZeroDivisionError("division by zero"), DispatchError, "raised ZeroDivisionError"),
    (lambda: MemoryError(), HostMemoryError, "out of host memory"),
])
def test_select_if_names_what_failed(monkeypatch, failure, error, fragment):
    """Whatever fails while select_if runs is named for what it is: a fault of the driver is not
    the predicate failing to compile (NVVM, NVRTC or the linker), nor is an exception the
    predicate raises, nor the host running out of memory."""
    def fail(values, predicate, key):
        raise failure()
    monkeypatch.setattr(compaction, "_select_if_numpy", fail)
    with pytest.raises(error, match="Fix:") as e:
        compaction.select_if(np.arange(5), lambda v: v > 2)
    assert fragment in str(e.value) and (error is not DeviceError or "compile" not in str(e.value))


DIVIDING = [lambda v: 1 // (v - v) > 0, lambda v: 10 % (v - v) == 0, lambda v: 7 // v == 0,
            lambda v: -(7 % v) == 0]


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("k", range(len(DIVIDING)))
def test_select_if_divides_by_zero_as_numpy_does(dtype, k):
    """Integer division by zero in a predicate is 0, as in NumPy and on the device (numba-cuda
    compiles with NumPy's error model; the CPU twin now does too), not a refusal on one side."""
    predicate = DIVIDING[k]
    values = np.arange(0, 9).astype(dtype)
    with np.errstate(all="ignore"):
        want = values[np.array([bool(predicate(v)) for v in values])]  # NumPy's scalars
    assert np.array_equal(compaction.select_if(values, predicate), want)
    assert np.array_equal(compaction.select_if_numpy(values, predicate), want)


def test_select_if_float_division_by_zero_is_inf_or_nan():
    x = np.array([0.0, 1.0, -2.0])
    assert compaction.select_if(x, lambda v: 1.0 / (v - v) > 0).tolist() == [0.0, 1.0, -2.0]  # inf
    assert compaction.select_if(x, lambda v: (v - v) / (v - v) == 0).tolist() == []  # nan


def test_a_lambda_written_anew_each_call_compiles_once_and_a_changed_value_compiles_afresh(monkeypatch):
    select = sys.modules["vyre_numba.compaction.select"]
    built = []
    mask_of = select._mask_of
    monkeypatch.setattr(select, "_mask_of", lambda p: built.append(p) or mask_of(p))
    x = np.arange(10, dtype=np.int32)
    for _ in range(3):  # a loop, or a notebook cell run again
        assert compaction.select_if(x, lambda v: v > 6).tolist() == [7, 8, 9]
    assert len(built) == 1

    def above(limit):
        return lambda v: v > limit
    assert [compaction.select_if(x, above(k)).size for k in (7, 2, 7, 2)] == [2, 7, 2, 7]
    assert len(built) == 3  # one each for 7 and 2: a value read is part of what is compiled
    for _ in range(3):  # a NaN read is found again, though it is unequal to itself
        assert compaction.select_if(x, above(float("nan"))).size == 0
    assert len(built) == 4
    assert select.predicate_key(above(1)) != select.predicate_key(above(1.0))  # so is its type
    assert select.predicate_key(lambda v, t=3: v > t) != select.predicate_key(lambda v, t=4: v > t)
    assert select.predicate_key(lambda v, *, t=1: v > t) != select.predicate_key(lambda v, *, t=1.0: v > t)
    nan = float("nan")  # unequal to itself, so a key holding it as a value would never be found again
    assert select.predicate_key(above(nan)) == select.predicate_key(above(float("nan")))
    assert select.predicate_key(above(np.float32(nan))) != select.predicate_key(above(nan))
    other_nan = np.frombuffer(np.uint64(0x7FF8000000000001).tobytes(), np.float64)[0]  # another payload
    assert select.predicate_key(above(float(other_nan))) != select.predicate_key(above(nan))

    global _LIMIT
    _LIMIT = 3
    below = eval("lambda v: v < _LIMIT", globals())
    assert compaction.select_if(x, below).tolist() == [0, 1, 2]
    _LIMIT = 5
    assert compaction.select_if(x, below).tolist() == [0, 1, 2, 3, 4]  # the global it names changed

    table = np.array([4])
    reads_array = lambda v: v < table[0]  # noqa: E731 (an array: kept by its contents, which Numba compiles in)
    assert select.predicate_key(reads_array) is not reads_array
    assert compaction.select_if(x, reads_array).tolist() == [0, 1, 2, 3]
    table[0] = 2  # changed in place: compiled afresh (a red-team: the first contents' code was kept)
    assert compaction.select_if(x, reads_array).tolist() == [0, 1]
    table = np.array([3])  # the closure's cell rebound
    assert compaction.select_if(x, reads_array).tolist() == [0, 1, 2]
    table = np.zeros(select.FROZEN_BYTES // 8 + 1)  # past the bytes Numba should compile in: refused
    with pytest.raises(DispatchError, match=rf"<lambda> reads the array 'table' \(float64, {table.nbytes} bytes\) "
                                            r"from outside itself.*Fix: .*for select_if, compute the flags and call "
                                            r"select\(values, flags\)"):
        compaction.select_if(x, reads_array)
    # a review: records of one size keyed alike; arrays in a tuple or of a subclass kept by the function
    table = np.zeros(1, [("a", "<i4")])
    table["a"] = 5
    as_record = lambda v: v < table[0][0]  # noqa: E731
    assert compaction.select_if(x, as_record).tolist() == [0, 1, 2, 3, 4]
    table = table.view([("a", "<f4")])  # the same bytes, now a tiny float
    assert compaction.select_if(x, as_record).tolist() == [0]
    table = (np.array([2]), np.zeros(select.FROZEN_BYTES))
    in_tuple = lambda v: v < table[0][0]  # noqa: E731
    with pytest.raises(DispatchError, match=r"reads the array 'table\[1\]' \(float64"):
        compaction.select_if(x, in_tuple)

    class Tagged(np.ndarray):
        pass
    table = np.array([3]).view(Tagged)
    assert compaction.select_if(x, reads_array).tolist() == [0, 1, 2]
    table[0] = 1  # changed in place: compiled afresh
    assert compaction.select_if(x, reads_array).tolist() == [0]



real = np.zeros(1 << 14)  # a notebook's global that shares its name with an attribute a predicate reads


def test_an_attribute_is_no_global_of_a_predicate():
    """Regression (a review): the globals a predicate reads were taken from co_names, which holds
    the attributes it reads too, so `v.real` read the large global array `real` and was refused."""
    select = sys.modules["vyre_numba.compaction.select"]
    x = np.arange(6, dtype=np.int32)
    assert compaction.select_if(x, lambda v: v.real > 3).tolist() == [4, 5]
    assert select._global_names((lambda v: v.real + len(real)).__code__) == ("len", "real")


def test_a_global_changed_while_a_predicate_compiles_never_poisons_its_cache(monkeypatch):
    """Regression (a red-team): the key was read before Numba compiled, and Numba reads the global
    when it compiles: another thread's change in between stored code for the new value under the
    old key, and every later call with the old value used it. The snapshot compiled is the key's."""
    global _RACED
    select = sys.modules["vyre_numba.compaction.select"]
    _RACED = 3
    x = np.arange(10, dtype=np.int32)
    below = eval("lambda v: v < _RACED", globals())
    real = select._mask_of

    def racing(fn):
        global _RACED
        _RACED = 9  # another thread, while this one compiles
        return real(fn)
    monkeypatch.setattr(select, "_mask_of", racing)
    assert compaction.select_if(x, below).tolist() in ([0, 1, 2], list(range(9)))  # one value or the other
    monkeypatch.setattr(select, "_mask_of", real)
    _RACED = 3
    assert compaction.select_if(x, below).tolist() == [0, 1, 2]
    _RACED = 9
    assert compaction.select_if(x, below).size == 9



_RACED_TABLE = np.array([3])
_RACED_TUPLE = (1, _RACED_TABLE)


@pytest.mark.parametrize("reads", ["v < _RACED_TABLE[0]", "v < _RACED_TUPLE[1][0]", "v < t[0]"])
def test_an_array_written_while_a_predicate_compiles_never_poisons_its_cache(monkeypatch, reads):
    """As above for an array the predicate reads (a review): the snapshot compiled held the
    caller's array, so a write to it while Numba compiled stored code for the new contents under
    the old contents' key. The snapshot holds a copy, within a tuple or a default too (a
    red-team: those were still the caller's)."""
    select = sys.modules["vyre_numba.compaction.select"]
    x = np.arange(10, dtype=np.int32)
    _RACED_TABLE[0] = 3
    below = eval(f"lambda v, t=_RACED_TABLE: {reads}", globals())
    real = select._mask_of

    def racing(fn):
        _RACED_TABLE[0] = 9  # another thread, while this one compiles
        return real(fn)
    monkeypatch.setattr(select, "_mask_of", racing)
    assert compaction.select_if(x, below).tolist() in ([0, 1, 2], list(range(9)))  # one contents or the other
    monkeypatch.setattr(select, "_mask_of", real)
    assert compaction.select_if(x, below).size == 9
    _RACED_TABLE[0] = 3
    assert compaction.select_if(x, below).tolist() == [0, 1, 2]


def test_one_code_in_two_namespaces_reading_the_same_value_by_different_names_compiles_for_each():
    """Regression (a red-team): the key held the values a predicate reads without their names, so
    one source run in two namespaces that give the same object different names (one shadows abs,
    the other round) ran the first namespace's compiled predicate for the second."""
    from numba import njit

    x = np.arange(10, dtype=np.int64)
    zero = njit(lambda a: 0)
    first, second = {"abs": zero}, {"round": zero}
    for scope in (first, second):
        exec("pred = lambda v: abs(v) > round(3)", scope)
    assert compaction.select_if(x, first["pred"]).tolist() == []  # abs(v) is 0 there
    assert compaction.select_if(x, second["pred"]).tolist() == list(range(1, 10))  # round(3) is 0 here


def test_a_snapshot_holds_only_what_the_predicate_reads():
    """Regression (a review): the snapshot copied the whole module namespace (a notebook's), so a
    compiled predicate kept every deleted global alive, large arrays included."""
    select = sys.modules["vyre_numba.compaction.select"]
    below = eval("lambda v: v < _RACED", globals())
    snap = select.snapshot(below)
    assert set(snap.__globals__) <= {"_RACED", "__builtins__", "__name__"} and "np" not in snap.__globals__
    assert select.predicate_key(snap) == select.predicate_key(below)
    reads_np = lambda v: v < np.zeros(1)[0]  # noqa: E731 (reads np: kept, with its name only)
    assert set(select.snapshot(reads_np).__globals__) == {"np", "__builtins__", "__name__"}


def test_a_predicate_reading_a_module_attribute_or_a_signed_zero_compiles_afresh_when_it_changes():
    import types

    cfg = types.ModuleType("cfg")  # a settings module: Numba fixes cfg.limit at compilation

    def above():
        return lambda v: v > cfg.limit
    x = np.arange(10, dtype=np.int32)
    for limit in (5, 7, 5):
        cfg.limit = limit
        assert compaction.select_if(x, above()).tolist() == list(range(limit + 1, 10))
    lazy = types.ModuleType("lazy")  # attributes its own __getattr__ gives (PEP 562), which Numba reads too
    settings = {"limit": 5}

    def attribute(name):
        if name in settings:
            return settings[name]
        raise AttributeError(name)
    lazy.__getattr__ = attribute

    def below():
        return lambda v: v < lazy.limit
    for limit in (5, 8, 5):
        settings["limit"] = limit
        assert compaction.select_if(x, below()).tolist() == list(range(limit))

    def over(t):
        return lambda v: v / t[0] > 0
    y = np.array([1.0, 2.0])
    assert compaction.select_if(y, over((0.0,))).tolist() == [1.0, 2.0]  # +inf
    assert compaction.select_if(y, over((-0.0,))).tolist() == []  # -0.0 == 0.0 and hashes alike: -inf

    def exact(k):
        return lambda v: v + k[0] == v
    z = np.array([1e8], np.float32)  # 1e8 + 1 is 1e8 in float32 arithmetic, not in float64
    assert compaction.select_if(z, exact((np.float32(1),))).tolist() == [1e8]
    assert compaction.select_if(z, exact((np.float64(1),))).tolist() == []  # equal, but read as another type


_LIMIT = 0


def test_compiled_predicates_are_bounded_and_an_evicted_one_compiles_again(monkeypatch):
    import gc
    import weakref

    select = sys.modules["vyre_numba.compaction.select"]  # the module: compaction.select is the function
    monkeypatch.setattr(select._CPU_MASKS, "capacity", 3)
    monkeypatch.setattr(compaction._RESULT_TYPES, "capacity", 3)
    x = np.arange(10, dtype=np.int32)
    first = eval("lambda v: v > 7")
    refs = [weakref.ref(first)]
    assert compaction.select_if(x, first).tolist() == [8, 9]
    for k in range(12):
        p = eval(f"lambda v: v > {k}")
        refs.append(weakref.ref(p))
        assert compaction.select_if(x, p).tolist() == list(range(k + 1, 10))
        del p
    gc.collect()
    assert len(select._CPU_MASKS) <= 3 and len(compaction._RESULT_TYPES) <= 3
    assert sum(r() is not None for r in refs[1:]) <= 3
    assert compaction.select_if(x, first).tolist() == [8, 9]  # evicted, compiled again


class FakeDeviceArray:
    def __init__(self, n):
        self.dtype, self.shape = np.dtype(np.int32), (n,)
        self.__cuda_array_interface__ = {"typestr": "<i4", "shape": (n,), "data": (0, False), "version": 3}


def test_pandas_of_their_own_dtypes_and_dask_containers_are_refused_with_their_conversion():
    """(A Series or Index of a NumPy dtype is taken as its array: see the test after this one.)"""
    pd = pytest.importorskip("pandas")
    s = pd.Series(np.arange(4))
    for call, fix in [(lambda: compaction.select(s.astype(str).astype("category"), np.ones(4, bool)),
                       "values.cat.codes.to_numpy()"),
                      (lambda: compaction.select(pd.Categorical(["a", "b"]), np.ones(2, bool)),
                       "np.asarray(values.codes)"),
                      (lambda: compaction.select(pd.CategoricalIndex(["a", "b"]), np.ones(2, bool)),
                       "np.asarray(values.codes)"),
                      (lambda: compaction.nonzero(pd.Series(["1", "0"]).astype("category")),
                       "compute the bools you mean from it"),
                      (lambda: compaction.select(np.arange(2), b"\x01\x00"), "np.frombuffer(flags, np.uint8)"),
                      (lambda: compaction.nonzero(bytearray(b"\x01")), "np.frombuffer(flags, np.uint8)"),
                      (lambda: compaction.nonzero(pd.Series(["1", "0"])), "compute the bools you mean from it")]:
        with pytest.raises(DispatchError, match="Fix:") as e:
            call()
        assert fix in str(e.value)
    cat = pd.Series(["a", "b", "a"], dtype="category")  # each conversion the Fix names works
    assert compaction.select(cat.cat.codes.to_numpy(), np.array([1, 0, 1], bool)).tolist() == [0, 0]
    assert compaction.nonzero(np.frombuffer(b"\x00\x01\x01", np.uint8)).tolist() == [1, 2]
    # numeric categories are read as their values, as every other module reads them (the codes Fix
    # selected the wrong items: a red-team)
    fl, vals = pd.Series([0, 1, -1, 0]).astype("category"), pd.Series([30, 10, 20, 30]).astype("category")
    assert compaction.nonzero(fl).tolist() == [1, 2] and compaction.nonzero(pd.Categorical([0, 5])).tolist() == [1]
    assert compaction.select(vals, np.array([1, 0, 1, 1], bool)).tolist() == [30, 20, 30]
    assert compaction.select(pd.CategoricalIndex([1.5, 2.5]), np.array([0, 1], bool)).tolist() == [2.5]
    with pytest.raises(DispatchError, match=r"1 missing value.*Fix:"):
        compaction.nonzero(pd.Series([1, None, 0]).astype("category"))
    nullable = pd.Series([1, 2], dtype="Int64").astype("category")  # categories of a nullable type: their values
    assert compaction.select(nullable, np.array([0, 1], bool)).tolist() == [2]
    days = pd.Series(pd.to_datetime(["2020-01-01", "2021-01-01"])).astype("category")
    assert compaction.select(days, np.array([0, 1], bool)) == np.array(["2021-01-01"], "datetime64[ns]")
    for flags in (pd.Categorical(["1", "0"]), pd.CategoricalIndex(["1", "0"])):  # strings: no codes as flags
        with pytest.raises(DispatchError, match="compute the bools you mean from it"):
            compaction.nonzero(flags)
    da = pytest.importorskip("dask.array")
    with pytest.raises(DispatchError, match=r"flags\.compute\(\)"):
        compaction.select(np.arange(4), da.ones(4, dtype=bool, chunks=2))


def test_mixing_host_and_device_arrays_is_refused():
    with pytest.raises(DispatchError, match="some arrays are on the device.*Fix:"):
        compaction.select(np.arange(3, dtype=np.int32), FakeDeviceArray(3))


# ---- the kernels under the CUDA simulator ------------------------------------------------------

SIMULATED = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba import compaction
    from vyre_numba.errors import CapacityError, DispatchError
    from vyre_numba.compaction.kernels import flag_nonzero
    from vyre_numba.compaction.select import TILE, word_view
    rng = np.random.default_rng(0)
    rec_t = np.dtype([("a", "i4"), ("b", "f8"), ("c", "u1")])
    for n in (0, 1, 7, TILE + 1, 2 * TILE + 3):
        vals = rng.integers(0, 1000, n).astype(np.int32)
        flags = rng.random(n) < 0.3
        got = compaction.select(cuda.to_device(vals), cuda.to_device(flags)).copy_to_host()
        assert np.array_equal(got, vals[flags]), n
        got = compaction.nonzero(cuda.to_device(flags.astype(np.uint8))).copy_to_host()
        assert np.array_equal(got, np.flatnonzero(flags)), n
        got = compaction.select_if(cuda.to_device(vals), lambda v: v > 500).copy_to_host()
        assert np.array_equal(got, vals[vals > 500]), n
        got = compaction.select_if(cuda.to_device(vals), cuda.jit(device=True)(lambda v: v < 100)).copy_to_host()
        assert np.array_equal(got, vals[vals < 100]), n
        rec = np.zeros(n, rec_t)
        rec["a"], rec["b"], rec["c"] = vals, vals / 3, vals % 7
        got = compaction.select(cuda.to_device(rec), cuda.to_device(flags)).copy_to_host()
        assert got.dtype == rec.dtype and np.array_equal(got, rec[flags]), n
        assert np.array_equal(compaction.read_compacted(cuda.to_device(rec), cuda.to_device(flags)), rec[flags])
        if flags.sum() > 1:
            try:
                compaction.read_compacted(cuda.to_device(vals), cuda.to_device(flags), capacity=int(flags.sum()) - 1)
                raise AssertionError("no CapacityError")
            except CapacityError as e:
                assert e.needed == flags.sum()
        print("ok", n)

    # one-byte flags are counted eight at a time, except the last tiles and flags off an 8-byte boundary
    n = 2 * TILE + 6
    vals, flags = np.arange(n, dtype=np.int16), (np.arange(n + 1) % 5 == 1).astype(np.int8)
    dflags = cuda.to_device(flags)
    got = compaction.select(cuda.to_device(vals), dflags[1:]).copy_to_host()
    assert np.array_equal(got, vals[flags[1:] != 0])
    got = compaction.nonzero(dflags[:n]).copy_to_host()
    assert np.array_equal(got, np.flatnonzero(flags[:n]))
    print("ok quads")

    # one selector, many calls of other sizes and kinds: its tile buffers grow and are reused
    sel = compaction.Selector()
    for n in (5, 3 * TILE + 1, 2, 2 * TILE):
        vals, flags = np.arange(n, dtype=np.uint32), np.arange(n) % 3 == 0
        out = cuda.device_array(n, np.uint32)
        assert sel.run(flag_nonzero, cuda.to_device(flags), n, word_view(cuda.to_device(vals), n),
                       word_view(out, n), n) == flags.sum()
        assert np.array_equal(out.copy_to_host()[:flags.sum()], vals[flags])
        assert sel.count(flag_nonzero, cuda.to_device(flags), n) == flags.sum()

    @cuda.jit(device=True)
    def reads_a_field_it_lacks(src, i):
        return src[i].nope != 0

    try:  # the simulator runs it as Python: its AttributeError is the DispatchError a GPU's compile failure is
        sel.run(reads_a_field_it_lacks, cuda.to_device(vals), n, word_view(cuda.to_device(vals), n),
                word_view(out, n), n)
        raise AssertionError("flag_of ran")
    except DispatchError as e:
        assert "cannot run as flag_of(src, i)" in str(e) and "AttributeError" in str(e) and "Fix:" in str(e), e
    sel.close()
    for call in (lambda: sel.total(), lambda: sel.enqueue(flag_nonzero, None, 0, None, None, 0),
                 lambda: sel.scatter(flag_nonzero, None, 5, None, None, 5),
                 lambda: sel.fused(flag_nonzero, None, 5, None, None), lambda: sel.watch(),
                 lambda: sel.count(flag_nonzero, None, 0), lambda: compaction.Selector(stream="not a stream"),
                 lambda: __import__("copy").copy(compaction.Selector())):
        try:
            call()
            raise AssertionError("a closed selector ran (or a bad stream or a copy was taken)")
        except DispatchError as e:
            assert any(w in str(e) for w in ("closed", "not a Numba stream", "cannot be copied")) and "Fix:" in str(e)
    print("ok reused")

    # a Selector's own calls refuse what its kernels would fail on or run past, and say how to fix it
    sel = compaction.Selector()
    src, idx = cuda.to_device(np.ones(10, np.uint8)), cuda.device_array(10, np.uint64)
    for call, fragment in ((lambda: sel.total(), "no count"),
                           (lambda: sel.run(len, src, 10, None, idx, 10), "not a Numba device function"),
                           (lambda: sel.run(flag_nonzero, src, -1, None, idx, 10), "not a count of items"),
                           (lambda: sel.run(flag_nonzero, src, 11, None, idx, 10), "src has 10 rows"),
                           (lambda: sel.run(flag_nonzero, src, 10, None, idx[:4], 10), "out has 4 rows"),
                           (lambda: sel.run(flag_nonzero, np.ones(10), 10, None, idx, 10), "not a device array"),
                           (lambda: sel.run(flag_nonzero, src, 10, None, cuda.device_array(10, np.float64), 10),
                            "8-byte integer indices"),
                           (lambda: sel.run(flag_nonzero, src, 10, None, idx, 2.5), "not a count of rows")):
        try:
            call()
            raise AssertionError(f"{fragment}: ran")
        except DispatchError as e:
            assert fragment in str(e) and "Fix:" in str(e), e
    assert sel.run(flag_nonzero, src, 10, None, cuda.device_array(10, np.int64), 10) == 10  # int64 indices serve
    assert sel.total() == 10
    sel.close()
    print("ok checked")

    # outputs up to FUSED_BYTES take one launch, up to ROOM_BYTES three into room for every item,
    # larger ones count first; a result that leaves most of its room unused is copied to its size
    from vyre_numba.workqueue import barrier
    n = 2 * TILE + 3
    vals, flags = rng.integers(0, 1000, n).astype(np.int32), rng.random(n) < 0.4
    dv, df = cuda.to_device(vals), cuda.to_device(flags)
    for fused_bytes, room, slack in ((0, 0, 4 << 20), (0, 1 << 26, 4 << 20), (0, 1 << 26, 0), (1 << 26, 0, 4 << 20),
                                     (1 << 26, 0, 0)):
        compaction.FUSED_BYTES, compaction.ROOM_BYTES, compaction.SLACK = fused_bytes, room, slack
        got = compaction.select(dv, df)
        assert np.array_equal(got.copy_to_host(), vals[flags])
        # a simulated device array's _ary is a NumPy array: a view into the room has the room (n items)
        # as its base; an exact output (counted first) or a copy has none
        in_room = bool(fused_bytes or room)
        base = got._ary.base  # 40% kept: in the room, never copied, whatever the slack
        assert (base.shape == (n,)) if in_room else (base is None), (fused_bytes, room, slack)
        sparse = cuda.to_device(np.arange(n) % 97 == 3)
        got = compaction.nonzero(sparse)
        assert np.array_equal(got.copy_to_host(), np.flatnonzero(np.arange(n) % 97 == 3))
        base = got._ary.base  # 1% kept: copied out of the room where that leaves more than SLACK bytes unused
        assert (base.shape == (n,)) if in_room and slack else (base is None), (fused_bytes, room, slack)
    # a block that waits too long at the grid barrier gives up, and the call selects again in three
    # launches; so do the selector's calls for FUSED_BACKOFF seconds, then one launch again
    barrier.SPINS = 3
    sel = compaction._selector(None)
    assert sel._tally.arrived > 0 and sel.timeouts == 0  # the loop above took one launch
    sel._tally.arrived += 1  # this launch's barrier can never fill
    assert np.array_equal(compaction.select(dv, df).copy_to_host(), vals[flags])
    assert sel.timeouts == 1 and sel._tally.arrived == 0
    assert np.array_equal(compaction.select(dv, df).copy_to_host(), vals[flags])
    assert sel.timeouts == 1 and sel._tally.arrived == 0  # backing off
    sel._fused_off_until = 0.0
    assert np.array_equal(compaction.select(dv, df).copy_to_host(), vals[flags])
    assert sel.timeouts == 1 and sel._tally.arrived == 1
    # read_compacted: one launch straight into the records' room (the stand-in of pinned memory)
    # where every record has room, no copy behind it; three into device memory, then copied, where
    # the capacity is smaller, or where the one launch gave up (a barrier that cannot fill)
    copies, copy_kept = [], sel.copy_kept
    sel.copy_kept = lambda *a: copies.append(a[-1]) or copy_kept(*a)
    for capacity, gives_up in ((None, False), (n, False), (n - 1, False), (None, True)):
        arrived, timeouts = sel._tally.arrived, sel.timeouts
        del copies[:]
        if gives_up:
            sel._tally.arrived += 1
        sel._ctl.copy_to_device(np.array([0, 0, -7, 0], np.int64))  # a count no selection leaves
        got = compaction.read_compacted(dv, df, capacity=capacity)
        assert np.array_equal(got, vals[flags]), capacity
        assert sel._ctl.copy_to_host()[2] == flags.sum()  # left for a copy_kept by either path
        assert sel.timeouts == timeouts + gives_up
        one = capacity != n - 1 and not gives_up
        assert (sel._tally.arrived > arrived) == one and copies == ([] if one else [min(capacity or n, n)]), \
            (capacity, arrived, sel._tally.arrived, copies)
    del sel.copy_kept
    assert sel.timeouts == 2 and sel._tally.arrived == 0
    sel._fused_off_until = 0.0
    room = cuda.device_array(n, np.uint32)
    words = word_view(dv, n)
    bar = sel._bar.copy_to_host()
    bar[barrier.FAILED] += 1  # as if a block had given up: the last one to finish leaves -2, and 0 in ctl[2]
    sel._bar.copy_to_device(bar)
    assert sel.fused(flag_nonzero, df, n, words, room) is None and sel._ctl.copy_to_host()[2] == 0
    sel._fused_off_until = 0.0
    assert sel.fused(flag_nonzero, df, n, words, room) == flags.sum() == sel._ctl.copy_to_host()[2]
    # control words made afresh, as after a count that failed: the one-launch kernel then writes
    # the new ones, which a copy_kept behind it reads (not the old ones, and not a stale count);
    # both readback paths read back the new call's records
    sel._afresh(sel._tiles)
    sparse = rng.random(n) < 0.1
    assert np.array_equal(compaction.read_compacted(dv, cuda.to_device(sparse)), vals[sparse])
    assert sel._ctl.copy_to_host()[2] == sparse.sum()
    assert np.array_equal(compaction.read_compacted(dv, cuda.to_device(~sparse), capacity=n - 1), vals[~sparse])
    kept = cuda.to_device(np.full(n, 7777, np.uint32))  # a value no record holds
    assert sel.fused(flag_nonzero, cuda.to_device(sparse), n, words, room) == sparse.sum()
    sel.copy_kept(room[:n - 1].view(np.uint64), kept[:n - 1].view(np.uint64), room.view(np.uint8),
                  kept.view(np.uint8), 4, n)  # the public Selector: a copy behind a one-launch selection
    want = np.full(n, 7777, np.uint32)
    want[:sparse.sum()] = vals[sparse]
    assert np.array_equal(kept.copy_to_host(), want)  # the kept records, and nothing past them
    print("ok one launch")
''')


PREDICATES_SIMULATED = textwrap.dedent('''
    import warnings
    import numpy as np
    from numba import cuda
    from vyre_numba import compaction
    import sys
    from vyre_numba.compaction import kernels
    select = sys.modules["vyre_numba.compaction.select"]
    warnings.simplefilter("ignore")  # NumPy's scalars warn on division by zero
    vals = np.arange(-3, 6, dtype=np.int32)
    for predicate in (lambda v: 1 // (v - v) > 0, lambda v: 10 % (v - v) == 0, lambda v: 7 // v == 0,
                      lambda v: 1.0 / (v - v) > 0):
        host = compaction.select_if(vals, predicate)
        device = compaction.select_if(cuda.to_device(vals), predicate).copy_to_host()
        assert np.array_equal(host, device), (host, device)
    print("ok divided")
    kernels._PREDICATES.capacity = select._CPU_MASKS.capacity = compaction._RESULT_TYPES.capacity = 2
    kernels._KERNELS.capacity = 6
    select.LAUNCHES_KEPT = 3
    first = eval("lambda v: v > 3")
    dv = cuda.to_device(vals)
    for k in range(8):
        p = eval(f"lambda v: v > {k - 3}")
        assert np.array_equal(compaction.select_if(dv, p).copy_to_host(), vals[vals > k - 3])
    assert len(kernels._PREDICATES) <= 2 and len(kernels._KERNELS) <= 6
    assert len(compaction._selector(None)._launches) <= 3
    assert np.array_equal(compaction.select_if(dv, first).copy_to_host(), [4, 5])  # compiled again
    print("ok bounded")
    s = cuda.stream()  # the simulator's streams have no handle: still streams
    df = cuda.to_device(vals % 2 == 0)
    assert np.array_equal(compaction.select(dv, df, stream=s).copy_to_host(), vals[vals % 2 == 0])
    assert np.array_equal(compaction.nonzero(df, stream=s).copy_to_host(), np.flatnonzero(vals % 2 == 0))
    assert np.array_equal(compaction.read_compacted(dv, df, stream=s), vals[vals % 2 == 0])
    assert np.array_equal(compaction.select_if(dv, lambda v, t=2: v > t, stream=s).copy_to_host(), vals[vals > 2])
    try:
        compaction.select(dv, df, stream=dv)
        raise AssertionError("a device array was taken for a stream")
    except compaction.DispatchError as e:
        assert "not a Numba stream" in str(e), e
    swapped = (vals % 3 == 0).astype(">i4")  # flags of the other byte order: non-zero all the same
    for f in (cuda.to_device(swapped), cuda.to_device(swapped.astype(">u2"))):
        assert np.array_equal(compaction.select(dv, f).copy_to_host(), vals[swapped != 0])
        assert np.array_equal(compaction.nonzero(f).copy_to_host(), np.flatnonzero(swapped))
        assert np.array_equal(compaction.read_compacted(dv, f), vals[swapped != 0])
    print("ok streams")
''')


def test_select_if_agrees_with_its_twin_and_stays_bounded_under_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", PREDICATES_SIMULATED], env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok ") == 3


def test_kernels_match_the_twins_under_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", SIMULATED], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok ") == 9


CLOSED_MEANWHILE = r"""
import sys, threading
import numpy as np
from numba import cuda
from vyre_numba.compaction import Selector, word_view
from vyre_numba.compaction.kernels import flag_nonzero
from vyre_numba.errors import DispatchError

n = 300
rng = np.random.default_rng(0)
vals, flags = rng.integers(0, 1 << 30, n).astype(np.uint32), rng.random(n) < 0.3
dflags, dvals = cuda.to_device(flags.astype(np.uint8)), cuda.to_device(vals)

def call(sel):
    out = cuda.device_array(n, np.uint32)
    return sel.run(flag_nonzero, dflags, n, word_view(dvals, n), word_view(out, n), n), out

class Closer:
    # at the k-th line of the call, another thread closes the selector (given 20 ms to do it)
    def __init__(self, sel, k):
        self.sel, self.k, self.lines, self.thread = sel, k, 0, None
    def __call__(self, frame, event, arg):
        if "vyre_numba" not in frame.f_code.co_filename:
            return None
        if event == "line":
            self.lines += 1
            if self.lines == self.k:
                self.thread = threading.Thread(target=self.sel.close)
                self.thread.start()
                self.thread.join(0.02)
        return self

call(Selector())  # the kernels compiled: each call below makes the same lines
c = Closer(Selector(), 0)
sys.settrace(c); call(c.sel); sys.settrace(None)
lines, seen = c.lines, {"ran": 0, "refused": 0}
for k in range(1, lines + 1, 8):  # every eighth line: a traced call takes the simulator 2 s
    sel = Selector()
    c = Closer(sel, k)
    sys.settrace(c)
    try:
        kept, out = call(sel)
        assert kept == flags.sum() and np.array_equal(out.copy_to_host()[:kept], vals[flags]), k
        seen["ran"] += 1
    except DispatchError as e:
        assert str(e) == "this Selector was closed. Fix: make a new one.", (k, str(e))
        seen["refused"] += 1
    finally:
        sys.settrace(None)
    assert c.thread is not None, (k, c.lines)  # the close came during the call
    c.thread.join()
    assert sel._closed and sel._args is None, k
assert lines > 50 and seen["ran"] and seen["refused"], (lines, seen)
print("closed meanwhile ok", lines, seen)
"""


def test_a_selector_closed_by_another_thread_mid_call_finishes_the_call_or_refuses_it_under_the_cuda_simulator():
    """Regression (a red-team): close() from another thread during a call set the buffers the
    call was using to None: raw TypeErrors, and a message blaming the user's flag_of. Another
    thread's close() is started at every line of a call; the call ends with the right selection,
    or with "closed" where the close came first."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", CLOSED_MEANWHILE], env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0 and "closed meanwhile ok" in out.stdout, out.stdout + out.stderr


SELECTOR_ARGUMENTS = r"""
import numpy as np
from numba import cuda
from vyre_numba.compaction import Selector
from vyre_numba.compaction.kernels import flag_nonzero
from vyre_numba.errors import DispatchError

from simulated import refused as raises


def refused(call, *fragments):
    raises(call, DispatchError, *fragments)

n = 4096 + 64
f = (np.arange(n) % 3 == 0).astype(np.uint8)
df = cuda.to_device(f)
s = Selector()
refused(s.watch, "no count to watch")  # a fresh Selector: no selection to wait for
assert s.count(flag_nonzero, df, n, df.view(np.uint64)[: n // 8]) == f.sum()
refused(lambda: s.count(flag_nonzero, df, n, cuda.to_device(np.zeros(n // 8, np.uint64))), "not a view of src")
refused(lambda: s.count(flag_nonzero, df, n, df.view(np.uint64)[:1]), "octs has 1 words, fewer than the 520")
refused(lambda: s.count(flag_nonzero, df, n, df.view(np.uint32)), "not a 1-D device array of uint64")
wide = cuda.to_device(f.astype(np.uint64))
refused(lambda: s.count(flag_nonzero, wide, n, wide), "octs was given for uint64 flags")
v = cuda.to_device(np.arange(20, dtype=np.uint64))
fl = cuda.to_device((np.arange(20) % 3 == 0).astype(np.int32))
refused(lambda: s.run(flag_nonzero, fl, 20, v, None, 5), "out=None is not a device array")
refused(lambda: s.run(flag_nonzero, fl, 20, v, cuda.device_array(20, np.uint64), None), "capacity=None is not a count")
assert s.run(flag_nonzero, fl, 20, v, cuda.device_array(20, np.uint64), 20) == 7
made = s._tally.selections
refused(lambda: s.run(flag_nonzero, fl, 20, v, cuda.device_array(20, np.uint64), -1), "capacity=-1 is not a count")
refused(lambda: s.enqueue(flag_nonzero, fl, 20, v[:5], cuda.device_array(20, np.uint64), 20), "words has 5 rows")
refused(lambda: s.enqueue(flag_nonzero, fl, 20, v, None, 20), "out=None is not a device array")
assert s._tally.selections == made and s.total() == 7  # refused before any launch: the last selection stands
assert s.count(flag_nonzero, fl, 0) == 0 and s.total() == 0  # not the last selection's 7
s.offsets(flag_nonzero, fl, 0)
assert s.watch() == 0 and s.total() == 0
print("selector arguments ok")
"""


def test_a_selectors_octs_out_and_empty_selections_are_checked_under_the_cuda_simulator():
    """Regression (red-teams): octs of other memory counted other flags (a short one read past its
    end), run(out=None) blamed flag_of, count(n=0) left the last selection's count for total(),
    watch() with no selection answered -1, which means a one-launch selection gave up, and run or
    enqueue launched the count before refusing their output arguments (a new selection, refused)."""
    from simulated import run_script

    out = run_script(SELECTOR_ARGUMENTS, 900)
    assert out.returncode == 0 and "selector arguments ok" in out.stdout, out.stdout + out.stderr


OWN_SELECTORS = r"""
import threading
import numpy as np
from numba import cuda
from vyre_numba import compaction
from vyre_numba.compaction import Selector, _selector

assert Selector()._lock is not None  # the user's: another thread may close it mid-call
own = _selector(None)
assert own._lock is None and own is _selector(None)  # compaction's own, this thread's only: no lock
rng = np.random.default_rng(3)
results, others = {}, {}

one_at_a_time, done = threading.Lock(), threading.Event()

def work(k):
    with one_at_a_time:  # the simulator runs one kernel at a time (its threads are Python's)
        select(k)
    done.wait()  # alive till all have run: a thread that ended may give its ident to the next

def select(k):
    others[k] = _selector(None)
    x = rng.integers(0, 1 << 40, 700 + k) if k else np.arange(700)
    f = (np.arange(x.size) % (k + 2)) == 0
    for _ in range(3):
        got = compaction.select(cuda.to_device(x), cuda.to_device(f.astype(np.uint8))).copy_to_host()
        results[k] = results.get(k, True) and np.array_equal(got, x[f])

threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
while len(results) < 4 and any(t.is_alive() for t in threads):
    threading.Event().wait(0.05)
done.set()
for t in threads:
    t.join()
assert all(results[k] for k in range(4)), results
assert len({id(s) for s in others.values()} | {id(own)}) == 5 and all(s._lock is None for s in others.values())
own.close()
print("own selectors ok")
"""


def test_compactions_own_selectors_are_one_a_thread_and_take_no_lock_under_the_cuda_simulator():
    """A selector compaction keeps for itself is the calling thread's only, so its calls skip the
    lock a user's Selector takes; each thread gets its own, and the right answer."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", OWN_SELECTORS], env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0 and "own selectors ok" in out.stdout, out.stdout + out.stderr


# ---- the GPU ------------------------------------------------------------------------------------

SIZES = [0, 1, 255, TILE - 1, TILE, TILE + 1, 3 * TILE + 5, 100_003, 1 << 22]
DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64, np.float16,
          np.float32, np.float64]


def sample(dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(n).astype(dtype)
        if n > 3:
            x[:3] = [np.nan, -0.0, np.inf]
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


@pytest.fixture(params=["one launch", "three into room", "count first"])
def launches(request, monkeypatch):
    """Selections up to compaction.FUSED_BYTES take one launch, up to ROOM_BYTES three into room
    for every item, larger ones count first: each path forced."""
    fused, room = {"one launch": (1 << 40, 0), "three into room": (0, 1 << 40), "count first": (0, 0)}[request.param]
    monkeypatch.setattr(compaction, "FUSED_BYTES", fused)
    monkeypatch.setattr(compaction, "ROOM_BYTES", room)
    return request.param


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_gpu_select_and_nonzero_match_the_twins(n, density, launches):
    from numba import cuda

    rng = np.random.default_rng(n)
    x = sample(np.int32, n, n)
    flags = rng.random(n) < density
    sel = compaction._selector(None)
    arrived, timeouts = sel._tally.arrived, sel.timeouts
    got = compaction.select(cuda.to_device(x), cuda.to_device(flags))
    assert sel.timeouts == timeouts and (sel._tally.arrived > arrived) == (launches == "one launch" and n > 0)
    assert hasattr(got, "__cuda_array_interface__") and got.shape == (int(flags.sum()),)
    assert np.array_equal(got.copy_to_host(), x[flags])
    idx = compaction.nonzero(cuda.to_device(flags.astype(np.int8)))
    assert np.array_equal(idx.copy_to_host(), np.flatnonzero(flags))


@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [1, 3, 7])
@pytest.mark.parametrize("density", [0.003, 0.5])
def test_gpu_one_launch_with_few_blocks_keeps_order(blocks, density, monkeypatch):
    """A grid smaller than the tiles: each block counts and writes a long run of tiles; a sparse
    result is copied out of the room for every item (SLACK)."""
    from numba import cuda

    selection = importlib.import_module("vyre_numba.compaction.select")

    monkeypatch.setattr(selection, "FUSED_BLOCKS", blocks)
    monkeypatch.setattr(compaction, "FUSED_BYTES", 1 << 40)
    n = (1 << 22) + 5
    rng = np.random.default_rng(blocks)
    x = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
    flags = rng.random(n) < density
    for _ in range(2):
        got = compaction.select(cuda.to_device(x), cuda.to_device(flags.astype(np.uint8)))
        assert got.shape == (int(flags.sum()),) and np.array_equal(got.copy_to_host(), x[flags])
    assert np.array_equal(compaction.nonzero(cuda.to_device(flags)).copy_to_host(), np.flatnonzero(flags))


@pytest.mark.gpu
def test_gpu_one_launch_barrier_timeout_falls_back_to_three_launches():
    """A barrier that cannot fill (the arrival count made wrong on purpose): every block gives up
    after its bounded wait, the call selects again in three launches, and the next call takes
    one launch again."""
    from numba import cuda

    x = np.arange(100_000, dtype=np.int64)
    flags = x % 3 == 0
    dx, df = cuda.to_device(x), cuda.to_device(flags)
    assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags])
    sel = compaction._selector(None)
    before = sel.timeouts
    sel._tally.arrived += 1
    assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags])
    assert sel.timeouts == before + 1 and sel._tally.arrived == 0
    assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(flags))
    assert sel.timeouts == before + 1 and sel._tally.arrived == 0  # three launches for FUSED_BACKOFF seconds
    sel._fused_off_until = 0.0
    assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(flags))
    assert sel.timeouts == before + 1 and sel._tally.arrived > 0
    assert np.array_equal(dx.copy_to_host(), x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES + [np.complex64, "datetime64[ns]"])
@pytest.mark.parametrize("flag_type", [np.bool_, np.uint8, np.int32, np.uint64])
def test_gpu_small_selections_take_one_packed_launch_and_match_the_twins(dtype, flag_type):
    """Numba arrays on the default stream within FUSED_BYTES take `Selector.fused_at` (the launch
    rewritten in place); every size from 8 up, odd offsets of the flags (no eight-flag loads), and
    select, nonzero and select_if agree with the twins bit for bit."""
    from numba import cuda

    sel = compaction._selector(None)
    timeouts = sel.timeouts
    taken, fused_at = [], sel.fused_at
    sel.fused_at = lambda *args: taken.append(args[3]) or fused_at(*args)
    try:
        for n in (8, 9, 4095, 4097, 100_003):
            x = sample(np.int64, n, n).view(np.uint8)[:n * np.dtype(dtype).itemsize].view(dtype)
            flags = (np.random.default_rng(n).random(n + 1) < 0.4).astype(flag_type)
            dx, dflags = cuda.to_device(x), cuda.to_device(flags)
            for f, fl in ((dflags[:n], flags[:n]), (dflags[1:], flags[1:])):  # the second: not 8-byte aligned
                del taken[:]
                arrived = sel._tally.arrived
                got = compaction.select(dx, f)
                assert taken == [n] and sel._tally.arrived > arrived
                assert got.dtype == x.dtype and got.copy_to_host().tobytes() == x[fl != 0].tobytes()
                assert np.array_equal(compaction.nonzero(f).copy_to_host(), np.flatnonzero(fl)) and taken == [n, n]
    finally:
        del sel.fused_at
    assert sel.timeouts == timeouts and sum(again is not None for again in sel._relaunches.values()) >= 2


@pytest.mark.gpu
def test_gpu_three_launches_into_room_rewrite_their_last_launches(monkeypatch):
    """Past FUSED_BYTES (here 0), count, scan and scatter are relaunched with their parameters
    rewritten: the first call of a kind packs them (`enqueue`), later ones do not, across sizes of
    one and of two scan levels (more than 1024 tiles) in any order, each equal to the twins."""
    from numba import cuda

    monkeypatch.setattr(compaction, "FUSED_BYTES", 0)
    sel = compaction._selector(None)
    packed, enqueue = [], sel.enqueue
    sel.enqueue = lambda *args: packed.append(args[2]) or enqueue(*args)
    try:
        rng = np.random.default_rng(5)
        for n in (TILE * 2048 + 1, 100, TILE * 1024 + 4097, 3 * TILE, TILE * 2048 + 1, 77):
            x = rng.integers(-128, 127, n, dtype=np.int8)
            flags = (rng.random(n) < 0.3).astype(np.uint8)
            dx, df = cuda.to_device(x), cuda.to_device(flags)
            del packed[:]
            assert compaction.select(dx, df).copy_to_host().tobytes() == x[flags != 0].tobytes()
            assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(flags))
            assert np.array_equal(compaction.nonzero(df[1:]).copy_to_host(), np.flatnonzero(flags[1:]))
            assert len(packed) <= 3  # at most the first call of each kind packs
        assert not packed  # the last sizes: every kind had been packed before
    finally:
        del sel.enqueue


@pytest.mark.gpu
def test_gpu_count_first_selections_rewrite_their_last_launches(monkeypatch):
    """Past ROOM_BYTES (here 0), Numba arrays count first through `Selector.offsets_at`: count and
    scan relaunched, the count read, the scatter relaunched into an output of exactly that size.
    The first call of a kind packs, later ones do not, across sizes of one and of two scan levels
    in any order, empty results included; select, nonzero and select_if equal the twins."""
    from numba import cuda

    monkeypatch.setattr(compaction, "FUSED_BYTES", 0)
    monkeypatch.setattr(compaction, "ROOM_BYTES", 0)
    sel = compaction._selector(None)
    packed, counted, offsets, offsets_at = [], [], sel.offsets, sel.offsets_at
    sel.offsets = lambda *args: packed.append(args[2]) or offsets(*args)
    sel.offsets_at = lambda *args: counted.append(args[3]) or offsets_at(*args)
    try:
        rng = np.random.default_rng(9)
        for n in (TILE * 2048 + 1, 100, TILE * 1024 + 4097, 3 * TILE, TILE * 2048 + 1, 77):
            x = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
            flags = (rng.random(n) < 0.3).astype(np.uint8)
            dx, df = cuda.to_device(x), cuda.to_device(flags)
            del packed[:], counted[:]
            got = compaction.select(dx, df)
            assert got.shape == (int(flags.sum()),) and got.copy_to_host().tobytes() == x[flags != 0].tobytes()
            assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(flags))
            assert np.array_equal(compaction.nonzero(df[1:]).copy_to_host(), np.flatnonzero(flags[1:]))
            assert np.array_equal(compaction.select_if(dx, lambda v: v % 3 == 1).copy_to_host(), x[x % 3 == 1])
            assert compaction.select(dx, cuda.to_device(np.zeros(n, np.uint8))).shape == (0,)
            assert counted == [n, n, n - 1, n, n] and len(packed) <= 4  # at most the first call of each kind packs
        assert not packed  # the last sizes: every kind had been packed before
    finally:
        del sel.offsets, sel.offsets_at


@pytest.mark.gpu
def test_gpu_where_room_for_every_item_is_refused_the_small_path_counts_first(monkeypatch):
    """Within ROOM_BYTES, an allocation of room for every item that fails (the device full)
    makes the call count first into an output of the kept items' size; the result is the twins'."""
    from numba import cuda

    from vyre_numba.gpu import memory

    monkeypatch.setattr(compaction, "FUSED_BYTES", 1 << 40)
    n = 300_001
    x = np.arange(n, dtype=np.int64)
    flags = x % 5 == 2
    dx, df = cuda.to_device(x), cuda.to_device(flags)
    sel = compaction._selector(None)
    counted, offsets_at, pool_alloc = [], sel.offsets_at, memory.pool_alloc

    def refuse_room(nbytes, **kw):
        if nbytes == n * 8:
            raise DeviceError("out of memory (a stand-in). Fix: none needed.")
        return pool_alloc(nbytes, **kw)
    monkeypatch.setattr(memory, "pool_alloc", refuse_room)
    sel.offsets_at = lambda *args: counted.append(args[3]) or offsets_at(*args)
    try:
        assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags])
        assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(flags))
        assert counted == [n, n]
    finally:
        del sel.offsets_at


def _pool_in_use() -> int:
    """The pool's bytes in use by live allocations: spares (freed arrays kept for reuse) given back
    first, since a failure path may give a spare it took to the pool rather than to the spares."""
    from cuda.bindings import driver as drv
    from numba import cuda

    from vyre_numba.gpu import memory

    memory._free_spares()
    cuda.synchronize()
    pool = memory._context()[2]
    err, used = drv.cuMemPoolGetAttribute(pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    assert not err
    return int(used)


@pytest.mark.gpu
@pytest.mark.parametrize("fused_bytes,room_bytes", [(1 << 40, 1 << 28), (0, 1 << 28), (0, 0)])
def test_gpu_small_path_gives_its_room_back_once_on_failure(fused_bytes, room_bytes, monkeypatch):
    """A failure while waiting for the count (after the output's owner was made) gives the room
    back exactly once; so do empty results; the next call selects normally (counting first, no
    output exists while the count is awaited)."""
    import gc

    from numba import cuda

    monkeypatch.setattr(compaction, "FUSED_BYTES", fused_bytes)
    monkeypatch.setattr(compaction, "ROOM_BYTES", room_bytes)
    x = np.arange(50_000, dtype=np.int32)
    flags = x % 3 == 0
    dx, df, none = cuda.to_device(x), cuda.to_device(flags), cuda.to_device(np.zeros(50_000, np.uint8))
    compaction.select(dx, df)
    cuda.synchronize()
    gc.collect()
    before = _pool_in_use()
    sel = compaction._selector(None)
    monkeypatch.setattr(sel, "watch", lambda: (_ for _ in ()).throw(RuntimeError("interrupted")))
    with pytest.raises(RuntimeError, match="interrupted"):
        compaction.select(dx, df)
    monkeypatch.undo()
    monkeypatch.setattr(compaction, "FUSED_BYTES", fused_bytes)
    monkeypatch.setattr(compaction, "ROOM_BYTES", room_bytes)
    if room_bytes == 0:  # counting first: a scatter that fails after the output was allocated gives it back
        offsets_at = sel.offsets_at

        def failing(*args):
            offsets_at(*args)
            return lambda out, capacity: (_ for _ in ()).throw(RuntimeError("scatter refused"))
        monkeypatch.setattr(sel, "offsets_at", failing)
        with pytest.raises(RuntimeError, match="scatter refused"):
            compaction.select(dx, df)
        monkeypatch.setattr(sel, "offsets_at", offsets_at)
        cuda.synchronize()
    assert compaction.select(dx, none).shape == (0,)
    cuda.synchronize()
    gc.collect()
    assert _pool_in_use() == before
    assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags])


@pytest.mark.gpu
def test_gpu_selections_on_two_gpus_in_one_process_use_each_gpus_own_selector():
    """A selector's buffers and relaunched kernels belong to one GPU: switching the current device
    selects there with its own (every path: one launch, three, readback)."""
    from numba import cuda

    if len(cuda.gpus) < 2:
        pytest.skip("needs two GPUs (run on the device's nvidia-h100-x2)")
    x = np.arange(300_000, dtype=np.int32)
    flags = x % 7 == 1
    for _ in range(2):
        for g in (0, 1):
            with cuda.gpus[g]:
                dx, df = cuda.to_device(x), cuda.to_device(flags)
                for fused in (1 << 40, 0):
                    compaction.FUSED_BYTES, before = fused, compaction.FUSED_BYTES
                    try:
                        assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags])
                        assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(flags))
                    finally:
                        compaction.FUSED_BYTES = before
                assert np.array_equal(compaction.read_compacted(dx, df), x[flags])
    assert len({key[2] for key in compaction._SELECTORS}) >= 2


@pytest.mark.gpu
@pytest.mark.parametrize("fused_bytes", [1 << 40, 0])
def test_gpu_an_interrupted_watch_waits_for_its_launches_before_raising(fused_bytes, monkeypatch):
    """Ctrl-C while waiting for the count: the launches are waited for (so a later call cannot read
    their count as its own), the interruption reaches the caller, and the next call is right."""
    from numba import cuda

    from vyre_numba.gpu import mapped

    monkeypatch.setattr(compaction, "FUSED_BYTES", fused_bytes)
    x = np.arange(70_000, dtype=np.int32)
    flags = x % 3 == 0
    dx, df = cuda.to_device(x), cuda.to_device(flags)
    compaction.select(dx, df)
    sel = compaction._selector(None)
    waited, synchronize = [], sel.stream.synchronize
    monkeypatch.setattr(sel.stream, "synchronize", lambda: waited.append(1) or synchronize())
    monkeypatch.setattr(mapped, "watch", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        compaction.select(dx, df)
    assert waited
    monkeypatch.undo()
    assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags])


@pytest.mark.gpu
def test_gpu_a_one_launch_readback_interrupted_before_its_watch_waits_for_the_launch(monkeypatch):
    """Ctrl-C after the one launch of a readback but before its count is watched: the launch, which
    writes the thread's pinned buffer, is waited for before the interruption reaches the caller,
    so a readback on another stream next cannot share that buffer with it; later calls are right."""
    from numba import cuda

    x = np.arange(70_000, dtype=np.int32)
    flags = x % 3 == 0
    dx, df = cuda.to_device(x), cuda.to_device(flags)
    assert np.array_equal(compaction.read_compacted(dx, df), x[flags])
    sel = compaction._selector(None)
    waited, synchronize = [], sel.stream.synchronize
    monkeypatch.setattr(sel.stream, "synchronize", lambda: waited.append(1) or synchronize())
    monkeypatch.setattr(sel, "watch", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        compaction.read_compacted(dx, df)
    assert waited
    monkeypatch.undo()
    assert np.array_equal(compaction.read_compacted(dx, df, stream=cuda.stream()), x[flags])
    assert np.array_equal(compaction.read_compacted(dx, df), x[flags])


@pytest.mark.gpu
def test_gpu_small_path_declines_what_the_general_path_must_check_or_do():
    """Strided views, other streams, tiny inputs, records and mismatched lengths go the general way:
    results still equal the twins, and the mistakes still raise its errors."""
    from numba import cuda

    x = np.arange(1000, dtype=np.int32)
    flags = (x % 7 == 0)
    dx, df = cuda.to_device(x), cuda.to_device(flags)
    with pytest.raises(DispatchError, match="not contiguous"):
        compaction.select(dx[::2], df[::2])
    with pytest.raises(DispatchError, match="has 999 elements"):
        compaction.select(dx, df[1:])
    with pytest.raises(DispatchError, match="not integers or bools"):
        compaction.select(dx, cuda.to_device(flags.astype(np.float32)))
    s = cuda.stream()
    assert np.array_equal(compaction.select(dx, df, stream=s).copy_to_host(), x[flags])
    assert np.array_equal(compaction.select(dx[:5], df[:5]).copy_to_host(), x[:5][flags[:5]])
    swapped = cuda.to_device(flags.astype(">u4"))  # not in this machine's byte order: viewed as native
    assert np.array_equal(compaction.select(dx, swapped).copy_to_host(), x[flags])
    assert np.array_equal(compaction.nonzero(swapped).copy_to_host(), np.flatnonzero(flags))
    assert np.array_equal(compaction.read_compacted(dx, swapped), x[flags])
    rec = np.zeros(1000, [("a", np.int32), ("b", np.float64)])
    rec["a"] = x
    got = compaction.select(cuda.to_device(rec), df).copy_to_host()
    assert got.tobytes() == rec[flags].tobytes()
    assert np.array_equal(compaction.select_if(dx, lambda v: v % 5 == 1).copy_to_host(), x[x % 5 == 1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_select_keeps_every_type_bit_for_bit(dtype, launches):
    from numba import cuda

    n = 50_001
    x = sample(dtype, n, 1)
    flags = (np.arange(n) % 3).astype(np.uint16)
    got = compaction.select(cuda.to_device(x), cuda.to_device(flags)).copy_to_host()
    want = x[flags != 0]
    assert got.dtype == x.dtype and got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()


@pytest.mark.gpu
def test_gpu_the_cuda_backend_reads_compacted_records_of_its_buffers():
    """backend.read_compacted on the CUDA backend's stream: its resident buffers (just uploaded on
    that stream), records and plain numbers, the capacity rule, host arrays as the twin."""
    from vyre_numba import get_backend

    from numba import cuda

    b = get_backend("cuda")
    b.reset_telemetry()
    for values in (records(70_001), sample(np.int64, 70_001, 4)):
        flags = (np.arange(values.size) % 7 == 3).astype(np.uint8)
        dv = b.upload(values) if values.dtype.fields is None else cuda.to_device(values, stream=b.stream)
        df = b.upload(flags)
        assert b.read_compacted(dv, df).tobytes() == values[flags != 0].tobytes()
        with pytest.raises(CapacityError) as e:
            b.read_compacted(dv, df, capacity=100)
        assert e.value.needed == int(flags.sum()) and dv.copy_to_host(stream=b.stream).tobytes() == values.tobytes()
        assert b.read_compacted(values, flags).tobytes() == values[flags != 0].tobytes()
    assert b.telemetry()["bytes_read_back"] >= 2 * 10_000 * 8


@pytest.mark.gpu
def test_gpu_records_and_predicates(launches):
    """Records (several words an item: the count-first path scatters them unpacked) and predicates, by every path."""
    from numba import cuda

    r = records(30_000)
    flags = r["tag"] > 100
    assert np.array_equal(compaction.select(cuda.to_device(r), cuda.to_device(flags)).copy_to_host(), r[flags])
    x = sample(np.float32, 30_000, 2)
    got = compaction.select_if(cuda.to_device(x), lambda v: v > 0.5).copy_to_host()
    assert np.array_equal(got, x[x > 0.5])  # NaN > 0.5 is false on both sides
    got = compaction.select_if(cuda.to_device(x), lambda v: v != v).copy_to_host()
    assert got.size == 1 and np.isnan(got[0])
    for t in (0.25, 0.75):  # a default argument, filled in on the device as on the host
        got = compaction.select_if(cuda.to_device(x), lambda v, t=t: v > t).copy_to_host()
        assert np.array_equal(got, x[x > t])


@pytest.mark.gpu
@pytest.mark.parametrize("values,predicate,kept", NUMBA_TYPED)
def test_gpu_predicates_are_typed_as_on_the_host(values, predicate, kept):
    from numba import cuda

    assert compaction.select_if(cuda.to_device(values), predicate).copy_to_host().tolist() == kept


@pytest.mark.gpu
def test_gpu_select_if_tells_a_driver_fault_from_a_predicate_that_does_not_compile(monkeypatch):
    from numba import cuda
    from numba.cuda.cudadrv.driver import CudaAPIError

    def fault(*args, **kwargs):
        raise CudaAPIError(700, "an illegal memory access was encountered")
    for name in ("fused_at", "fused", "enqueue_at", "enqueue"):
        monkeypatch.setattr(Selector, name, fault)
    for n in (100, 100_000):
        with pytest.raises(DeviceError, match="Fix:") as e:
            compaction.select_if(cuda.to_device(np.arange(n)), lambda v: v > 3)
        assert "CudaAPIError" in str(e.value) and "compile" not in str(e.value)


@pytest.mark.gpu
def test_gpu_accepts_cupy_and_torch_arrays():
    """select and read_compacted (both of its paths) take CuPy and PyTorch device arrays."""
    n = 10_000
    x = np.arange(n, dtype=np.int64)
    flags = x % 7 == 0
    peers = 0
    try:
        import cupy
        got = compaction.select(cupy.asarray(x), cupy.asarray(flags))
        assert np.array_equal(cupy.asnumpy(cupy.asarray(got)), x[flags])
        for capacity in (None, n - 1):  # one launch straight into pinned memory; three, then the copy
            assert np.array_equal(compaction.read_compacted(cupy.asarray(x), cupy.asarray(flags), capacity=capacity),
                                  x[flags])
        peers += 1
    except ImportError:
        pass
    try:
        import torch
        tx, tf = torch.from_numpy(x).cuda(), torch.from_numpy(flags).cuda()
        got = compaction.select(tx, tf)
        assert np.array_equal(got.copy_to_host(), x[flags])
        for capacity in (None, n - 1):
            assert np.array_equal(compaction.read_compacted(tx, tf, capacity=capacity), x[flags])
        peers += 1
    except ImportError:
        pass
    assert peers >= 1, "neither CuPy nor PyTorch is installed on the GPU machine"


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 2049, 1 << 20])
def test_gpu_read_compacted_brings_only_the_kept_records(n):
    from numba import cuda

    r = records(n, 3)
    flags = (np.arange(n) % 5 == 0)
    want = r[flags]
    got = compaction.read_compacted(cuda.to_device(r), cuda.to_device(flags))
    assert isinstance(got, np.ndarray) and np.array_equal(got, want)
    x = sample(np.float64, n, 4)
    assert np.array_equal(compaction.read_compacted(cuda.to_device(x), cuda.to_device(flags), capacity=want.size),
                          x[flags], equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.uint64])
def test_gpu_read_compacted_relaunches_across_capacities(dtype):
    """Numba arrays of one word an item relaunch the selector's last launches (packed once): each
    call's capacity, flags offset and size is its own, and every result equals the twin's."""
    from numba import cuda

    sel = compaction._selector(None)
    packed, enqueue = [], sel.enqueue
    sel.enqueue = lambda *args: packed.append(args[2]) or enqueue(*args)
    try:
        for n in (9, 5000, 3 * TILE + 7, 100, 200_000):
            x = sample(dtype, n, n)
            flags = (np.random.default_rng(n).random(n + 1) < 0.2).astype(np.uint8)
            dx, df = cuda.to_device(x), cuda.to_device(flags)
            for f, fl in ((df[:n], flags[:n]), (df[1:], flags[1:])):
                want = x[fl != 0]
                for capacity in (None, want.size, want.size + 3):
                    got = compaction.read_compacted(dx, f, capacity=capacity)
                    assert got.dtype == x.dtype and got.tobytes() == want.tobytes()
                if want.size:
                    with pytest.raises(CapacityError) as e:
                        compaction.read_compacted(dx, f, capacity=want.size - 1)
                    assert e.value.needed == want.size
        assert len(packed) <= 2  # one kind of flags a launch each: aligned (eight a load) and not
    finally:
        del sel.enqueue


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_gpu_read_compacted_selects_in_one_launch_where_every_record_has_room(dtype):
    """Within FUSED_BYTES and with room for every record (capacity None or >= n), one launch
    selects straight into the pinned records, with no copy behind it: every result equals the
    twin's, none kept included; a smaller capacity takes the three launches and the copy; a
    one-launch selection that gives up at its grid barrier reads back in three launches (which
    write over whatever the blocks past the barrier wrote)."""
    from numba import cuda

    sel = compaction._selector(None)
    taken, fused_at, copies, copy_kept_at = [], sel.fused_at, [], sel.copy_kept_at
    sel.fused_at = lambda *args: taken.append(args[3]) or fused_at(*args)
    sel.copy_kept_at = lambda *args: copies.append(args[3]) or copy_kept_at(*args)
    try:
        for n in (8, 4097, 100_003):
            x = sample(dtype, n, n)
            for density in (0.0, 0.3, 1.0):
                flags = (np.random.default_rng(n).random(n) < density).astype(np.uint8)
                dx, df = cuda.to_device(x), cuda.to_device(flags)
                want = x[flags != 0]
                for capacity in (None, n, n + 5):
                    del taken[:], copies[:]
                    arrived = sel._tally.arrived
                    got = compaction.read_compacted(dx, df, capacity=capacity)
                    assert taken == [n] and sel._tally.arrived > arrived and copies == []
                    assert got.dtype == x.dtype and got.tobytes() == want.tobytes()
                if 0 < want.size < n:
                    del taken[:]
                    got = compaction.read_compacted(dx, df, capacity=n - 1)
                    assert taken == [] and copies == [n - 1] and got.tobytes() == want.tobytes()
        from vyre_numba.workqueue import barrier

        for wrong in ("target", "failed"):
            timeouts = sel.timeouts
            if wrong == "target":
                sel._tally.arrived += 1  # a barrier that cannot fill: every block gives up, none finishes last
            else:  # as if a block had given up: the last block to finish leaves -2
                bar = sel._bar.copy_to_host()
                bar[barrier.FAILED] += 1
                sel._bar.copy_to_device(bar)
            got = compaction.read_compacted(dx, df)
            assert sel.timeouts == timeouts + 1 and got.tobytes() == want.tobytes()
            sel._fused_off_until = 0.0
        assert dx.copy_to_host().tobytes() == x.tobytes() and np.array_equal(df.copy_to_host(), flags)
    finally:
        del sel.fused_at, sel.copy_kept_at
        sel._fused_off_until = 0.0


@pytest.mark.gpu
def test_gpu_read_compacted_reports_the_needed_capacity_and_loses_nothing():
    from numba import cuda

    x = np.arange(100_000, dtype=np.int32)
    flags = x % 10 == 0
    dx, df = cuda.to_device(x), cuda.to_device(flags)
    with pytest.raises(CapacityError, match="capacity >= 10000.*unchanged") as e:
        compaction.read_compacted(dx, df, capacity=9_999)
    assert e.value.needed == 10_000
    assert np.array_equal(dx.copy_to_host(), x) and np.array_equal(df.copy_to_host(), flags)
    assert np.array_equal(compaction.read_compacted(dx, df, capacity=e.value.needed), x[flags])


@pytest.mark.gpu
@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_gpu_read_compacted_past_the_pinned_room_counts_first_and_reads_in_pieces(monkeypatch, density):
    """Room for every record above STAGING_KEEP bytes: the count comes first, then the kept
    records are read back through the staged copy (small results directly), with capacity
    errors before anything moves. (At 2^28 int32 the room is 1 GiB; pinning it took 350 ms.)"""
    from numba import cuda

    monkeypatch.setattr(compaction, "STAGING_KEEP", 1 << 20)
    n = (1 << 22) + 3  # 16 MiB of int32: all kept is past transfer.STAGED_BYTES, 1 % is below it
    x = sample(np.int32, n, 9)
    flags = (np.random.default_rng(2).random(n) < density).astype(np.uint8) * 7
    dx, df = cuda.to_device(x), cuda.to_device(flags)
    want = x[flags != 0]
    got = compaction.read_compacted(dx, df)
    assert got.dtype == x.dtype and np.array_equal(got, want)
    r = records(n // 4, 5)
    f4 = flags[:n // 4] != 0
    assert np.array_equal(compaction.read_compacted(cuda.to_device(r), cuda.to_device(f4)), r[f4])
    if want.size:
        with pytest.raises(CapacityError) as e:
            compaction.read_compacted(dx, df, capacity=want.size - 1)
        assert e.value.needed == want.size
        assert np.array_equal(compaction.read_compacted(dx, df, capacity=want.size), want)


@pytest.mark.gpu
def test_gpu_read_compacted_from_several_threads_at_once_keeps_each_threads_records():
    from concurrent.futures import ThreadPoolExecutor

    from numba import cuda

    def reads(t: int) -> int:
        x = np.arange(t * 1_000_000, t * 1_000_000 + 300_000 + 7 * t, dtype=np.int64)
        flags = (x % (t + 2)) == 0
        dx, df = cuda.to_device(x), cuda.to_device(flags)
        for _ in range(25):
            got = compaction.read_compacted(dx, df)
            assert np.array_equal(got, x[flags]), t
        return t

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(reads, range(4))) == [0, 1, 2, 3]


@pytest.mark.gpu
def test_gpu_selector_owns_its_buffers_and_runs_on_a_given_stream():
    from numba import cuda

    from vyre_numba.compaction.kernels import flag_nonzero
    from vyre_numba.compaction.select import word_view

    stream = cuda.stream()
    x = np.arange(5000, dtype=np.uint32)
    flags = x % 2 == 1
    out = cuda.device_array(5000, np.uint32)
    with compaction.Selector(stream) as s:
        count = s.run(flag_nonzero, cuda.to_device(flags), 5000, word_view(cuda.to_device(x), 5000),
                      word_view(out, 5000), 5000)
        assert count == 2500 and np.array_equal(out[:count].copy_to_host(), x[flags])
    with pytest.raises(DispatchError, match="closed.*Fix:"):
        s.run(flag_nonzero, cuda.to_device(flags), 5000, None, out, 5000)
    assert compaction.select(cuda.to_device(x), cuda.to_device(flags), stream=stream).shape == (2500,)


@pytest.mark.gpu
@pytest.mark.parametrize("shift", [0, 1, 4, 7, 8])
def test_gpu_one_byte_flags_at_any_address_and_length(shift):
    """Flags off an 8-byte boundary take the one-flag-a-load count; aligned ones eight at a time,
    a group of tiles reaching past the end one by one."""
    from numba import cuda

    rng = np.random.default_rng(shift)
    n = 5 * TILE + 3 - shift
    x = rng.integers(0, 1000, n).astype(np.int32)
    base = rng.integers(0, 3, n + shift).astype(np.uint8)
    dflags = cuda.to_device(base)[shift:]
    want = base[shift:] != 0
    assert np.array_equal(compaction.select(cuda.to_device(x), dflags).copy_to_host(), x[want])
    assert np.array_equal(compaction.nonzero(dflags).copy_to_host(), np.flatnonzero(want))
    assert np.array_equal(compaction.read_compacted(cuda.to_device(x), dflags), x[want])


@pytest.mark.gpu
@pytest.mark.parametrize("log_n", [24, 26, 28])
def test_gpu_large_selects_in_many_tiles_stay_in_order(log_n):
    from numba import cuda

    n = 1 << log_n
    rng = np.random.default_rng(log_n)
    x = rng.integers(0, 2**31 - 1, n, dtype=np.int32)
    dx = cuda.to_device(x)
    for density in ((0.5,) if log_n == 28 else (0.001, 0.5, 0.999)):
        flags = rng.random(n) < density
        df = cuda.to_device(flags)
        for _ in range(3):  # repeated calls reuse the status words by epoch
            assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags])
        assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(flags))


# a user's Selector (locked) and compaction's own (one a thread, no lock): the closures run on both
MAKERS = [pytest.param(lambda: Selector(), id="Selector"), pytest.param(lambda: Selector.for_this_thread(), id="own")]


@pytest.mark.gpu
@pytest.mark.parametrize("make", MAKERS)
def test_gpu_a_scatter_made_ready_refuses_to_run_once_its_selector_closed(make):
    """Regression (a red-team): `scatter_later`'s put and `offsets_at`'s later kept launches over
    the selector's tile buffers and ran them after close, over freed memory."""
    from numba import cuda

    from vyre_numba.compaction.kernels import flag_nonzero

    n = 3 * TILE + 5
    flags = cuda.to_device((np.arange(n) % 3 == 0).astype(np.uint8))
    word = compaction.word_type(np.dtype(np.int64))[0]
    sel = make()
    sel.offsets(flag_nonzero, flags, n)
    put = sel.scatter_later(flag_nonzero, flags, n, None, word)
    assert put is not None and sel.watch() == (n + 2) // 3
    out = cuda.device_array(n, np.int64)
    put(out.device_ctypes_pointer.value, n)  # open: it runs
    assert np.array_equal(out.copy_to_host()[:(n + 2) // 3], np.arange(0, n, 3))
    sel.close()
    with pytest.raises(DispatchError, match="this Selector was closed.*Fix:"):
        put(out.device_ctypes_pointer.value, n)
    sel = make()
    address = flags.device_ctypes_pointer.value
    for _ in range(2):  # the first call packs its launches; the second returns `later`, which relaunches them
        later = sel.offsets_at(flag_nonzero, address, np.uint8, n, False, word, None)
        assert sel.watch() == (n + 2) // 3
        later(out.device_ctypes_pointer.value, n)
    assert np.array_equal(out.copy_to_host()[:(n + 2) // 3], np.arange(0, n, 3))
    later = sel.offsets_at(flag_nonzero, address, np.uint8, n, False, word, None)
    sel.watch()
    sel.close()
    with pytest.raises(DispatchError, match="this Selector was closed.*Fix:"):
        later(out.device_ctypes_pointer.value, n)


@pytest.mark.gpu
@pytest.mark.parametrize("make", MAKERS)
def test_gpu_a_scatter_made_ready_refuses_to_run_after_a_later_selection(make):
    """Regression: a scatter made ready (`scatter_later`'s put, `offsets_at`'s later or first) and
    run after another selection on the same Selector read that selection's offsets, or, where it
    grew the Selector, offsets in buffers freed by the growth."""
    from numba import cuda

    from vyre_numba.compaction.kernels import flag_nonzero

    n = 3 * TILE + 5
    flags = cuda.to_device((np.arange(n) % 3 == 0).astype(np.uint8))
    big = cuda.to_device(np.ones(2048 * TILE + 1, np.uint8))  # more tiles than a new Selector has
    word = compaction.word_type(np.dtype(np.int64))[0]
    out = cuda.device_array(n, np.int64)
    before = np.full(n, -7, np.int64)
    with make() as sel:
        sel.offsets(flag_nonzero, flags, n)
        put = sel.scatter_later(flag_nonzero, flags, n, None, word)
        assert sel.watch() == (n + 2) // 3
        for later_selection in (lambda: sel.count(flag_nonzero, flags, n),
                                lambda: sel.count(flag_nonzero, big, big.shape[0])):  # the second grows it
            later_selection()
            out.copy_to_device(before)
            with pytest.raises(DispatchError, match="made ready for a selection that a later one.*Fix:"):
                put(out.device_ctypes_pointer.value, n)
            assert np.array_equal(out.copy_to_host(), before)  # nothing was written
        address = flags.device_ctypes_pointer.value
        for _ in range(2):  # the first call gives `first` (packs), the second `later` (relaunches)
            ready = sel.offsets_at(flag_nonzero, address, np.uint8, n, False, word, None)
            sel.watch()
            sel.count(flag_nonzero, big, big.shape[0])
            with pytest.raises(DispatchError, match="made ready for a selection that a later one.*Fix:"):
                ready(out.device_ctypes_pointer.value, n)
            assert np.array_equal(out.copy_to_host(), before)
        ready = sel.offsets_at(flag_nonzero, address, np.uint8, n, False, word, None)  # made ready again, it runs
        assert sel.watch() == (n + 2) // 3
        ready(out.device_ctypes_pointer.value, n)
        assert np.array_equal(out.copy_to_host()[:(n + 2) // 3], np.arange(0, n, 3))


def test_a_pandas_series_of_a_numpy_dtype_is_taken_as_its_array():
    """A user red-team: the graph calls, dispatch and upload took a Series; compaction refused one."""
    pd = pytest.importorskip("pandas")
    s = pd.Series([1, 5, 3, 8], dtype="int32")
    want = np.array([5, 3, 8], np.int32)
    for got in (compaction.select(s, s > 2), compaction.select_if(s, lambda v: v > 2),
                compaction.read_compacted(s, s > 2)):
        assert isinstance(got, np.ndarray) and got.dtype == np.int32 and got.tolist() == want.tolist()
    assert compaction.nonzero(s > 2).tolist() == [1, 2, 3]
    assert compaction.select(pd.Index([4, 6]), np.array([0, 1], np.uint8)).tolist() == [6]
    # a red-team: a RangeIndex, and nullable types without a missing value, were refused (the graph calls took them)
    assert compaction.select(pd.RangeIndex(5), np.array([0, 1, 0, 1, 1], np.uint8)).tolist() == [1, 3, 4]
    assert compaction.nonzero(pd.Series([True, False, True], dtype="boolean")).tolist() == [0, 2]
    assert compaction.select_if(pd.Index([1, 2], dtype="Int64"), lambda v: v > 1).tolist() == [2]
    assert compaction.read_compacted(pd.Series([1.5, 2.5], dtype="Float64"), np.array([0, 1], bool)).tolist() == [2.5]
    with pytest.raises(DispatchError, match=r"values is a pandas Series with 1 missing value.*Fix: pass x.fillna"):
        compaction.select(pd.Series([1, None], dtype="Int64"), np.ones(2, np.uint8))
    words = pd.Series(["a", None, "b"], dtype="category")
    with pytest.raises(DispatchError, match=r"missing value.*Fix: pass x\.cat\.codes\.to_numpy\(\) for the "
                                             r"category codes"):
        compaction.select(words, np.ones(3, bool))
    assert compaction.select(words.cat.codes.to_numpy(), np.ones(3, bool)).tolist() == [0, -1, 1]
    with pytest.raises(DispatchError, match=r"missing value.*Fix: pass x\.cat\.codes\.to_numpy\(\)"):
        compaction.select_numpy(words, np.ones(3, bool))  # the twins take pandas as the calls do
    text = pd.Series(["a", "b", "c"], dtype="string")  # Python objects to NumPy: positions are what moves
    for call in (compaction.select, compaction.select_numpy):
        with pytest.raises(DispatchError, match=r"Python objects.*Fix: select positions instead, keep = "
                                                r"compaction\.nonzero\(flags\), and take values\.iloc\[keep\]"):
            call(text, np.array([1, 0, 1], bool))
    assert text.iloc[compaction.nonzero(np.array([1, 0, 1], bool))].tolist() == ["a", "c"]


def test_predicates_that_are_coroutines_or_raise_memory_errors_and_broken_interfaces_are_told_apart():
    async def coroutine(v):
        return v > 100

    def raises(v):
        if v > 3:
            raise MemoryError("mine")
        return v > 0

    with pytest.raises(DispatchError, match="async or generator function.*Fix: pass a plain def"):
        compaction.select_if(np.arange(6), coroutine)
    with pytest.raises(DispatchError, match=r"the predicate raised MemoryError \(mine\)"):
        compaction.select_if(np.arange(6), raises)
    broken = type("Broken", (), {"__cuda_array_interface__": 5})()
    for call in (lambda: compaction.select(broken, np.ones(1)), lambda: compaction.nonzero(broken)):
        with pytest.raises(DispatchError, match="__cuda_array_interface__ is no dict.*Fix:"):
            call()


def test_word_view_refuses_what_is_not_n_contiguous_items_of_plain_bits():
    """Regression (a red-team): word_view took a list (AttributeError), a strided or 2-D array, an
    object array and any n (ignored for one-word items, so n past the end viewed every item)."""
    from vyre_numba.compaction import word_view

    for a, n, message in (([1, 2], 2, "takes a device array, not \\[1, 2\\]"),
                          (np.zeros((2, 2), np.uint32), 4, "1-D contiguous array, not one of shape \\(2, 2\\)"),
                          (np.zeros(8, np.uint8)[::2], 4, "strides \\(2,\\)"),
                          (np.zeros(4, object), 4, "plain bits"),
                          *((np.zeros(4, np.uint32), bad, "n is how many of them, from 0 to 4")
                            for bad in (5, -1, 2.0, True, "4", None))):
        with pytest.raises(DispatchError, match=message + ".*Fix: pass a 1-D contiguous device array"):
            word_view(a, n)
    rec = np.zeros(4, "u2,u1")
    assert word_view(rec, 2).shape == (2, 3) and word_view(np.arange(4, dtype=np.uint32), 3).tolist() == [0, 1, 2]
    assert word_view(np.zeros(0, np.float64), 0).dtype == np.uint64


def test_signed_overflow_in_a_predicate_is_as_documented_and_unsigned_wraps_as_numpy():
    """A red-team's finding, documented rather than changed: Numba (host and device) treats signed
    overflow as undefined and folds `v * 2**62 > 0` to `v > 0`; unsigned arithmetic wraps as NumPy's."""
    v = np.array([1, 2, 3], np.int64)
    assert compaction.select_if(v, lambda x: x * 4611686018427387904 > 0).tolist() == [1, 2, 3]
    assert v[v * np.int64(2**62) > 0].tolist() == [1]  # NumPy wraps: the difference the docstring names
    u = v.astype(np.uint64)
    wrapped = compaction.select_if(u, lambda x: x * np.uint64(2**62) != np.uint64(0))
    assert wrapped.tolist() == u[u * np.uint64(2**62) != 0].tolist() == [1, 2, 3]
    assert compaction.select_if(u, lambda x: x * np.uint64(2**63) != np.uint64(0)).tolist() == [1, 3]


def test_a_constant_written_as_arithmetic_past_64_bits_wraps_as_documented():
    """A red-team's finding, documented: `2**70` in a predicate is Numba's int64 power (0), so
    `v > 2**70` keeps the positive values; written as a float it compares as NumPy does."""
    v = np.array([-2, -1, 0, 1, 2, 3], np.int64)
    assert compaction.select_if(v, lambda x: x > 2**70).tolist() == [1, 2, 3]
    assert compaction.select_if(v, lambda x: x > 2.0**70).tolist() == v[v > 2**70].tolist() == []


def _plain_helper(x):
    return x % 3 == 0


def test_a_predicate_calling_a_plain_function_is_told_to_njit_it():
    """Regression (a red-team): a predicate calling a plain def was told to read values out of it
    (`t = helper.t`); the fix is @numba.njit on the helper, which the host and the GPU both call."""
    import numba

    from vyre_numba.errors import DispatchError

    with pytest.raises(DispatchError, match=r"_plain_helper is a plain Python function.*@numba.njit.*Fix: "):
        compaction.select_if(np.arange(10), lambda x: _plain_helper(x))
    helper = numba.njit(_plain_helper)
    assert compaction.select_if(np.arange(10), lambda x: helper(x)).tolist() == [0, 3, 6, 9]


def test_the_numpy_twins_take_pandas_as_the_calls_do():
    """A red-team: select_numpy refused a datetime64 Series as 'Python objects', which select takes."""
    pd = pytest.importorskip("pandas")
    when = pd.Series(pd.date_range("2020", periods=4))
    keep = np.array([1, 0, 0, 1], bool)
    want = when.to_numpy()[keep]
    for call in (compaction.select, compaction.select_numpy):
        got = call(when, keep)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert compaction.nonzero_numpy(pd.Series(keep)).tolist() == [0, 3]
    assert compaction.select_if_numpy(pd.Series([1, 5, 3], dtype="int32"), lambda v: v > 2).tolist() == [5, 3]


@pytest.mark.parametrize("shape", [(3.5,), (-3,), ("3",), (None,)])
def test_an_interface_shape_of_no_sizes_is_refused_not_rounded(shape):
    """A red-team: an interface's shape (3.5,) was read as 3 items, (-3,) as a length."""
    a = _Interface()
    a.__cuda_array_interface__["shape"] = shape
    with pytest.raises(DispatchError, match=r"shape is .*, not a tuple of sizes\. Fix:"):
        compaction.nonzero(a)


_UNHASHABLE_GLOBAL = None


def test_a_predicate_reading_a_value_whose_hash_raises_is_kept_by_the_function(monkeypatch):
    """A red-team: a global whose own __hash__ raised RuntimeError leaked it from select_if (the key
    of the compiled predicate hashes what it reads); now the function itself is the key."""
    class HashBoom:
        def __hash__(self):
            raise RuntimeError("hash boom")
    monkeypatch.setitem(globals(), "_UNHASHABLE_GLOBAL", HashBoom())
    pred = lambda v: v > 2 if _UNHASHABLE_GLOBAL is not None else False  # noqa: E731
    from vyre_numba.compaction.select import predicate_key

    assert predicate_key(pred) is pred
    with pytest.raises(DispatchError, match="does not compile with Numba.*Fix:"):  # Numba cannot type the object
        compaction.select_if(np.arange(5), pred)


RAISING_THEN_BUILDING = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba import compaction
    from vyre_numba.compaction import kernels

    def boom(x):
        if x > 30:
            raise ValueError("boom")
        return x > 0

    v = np.arange(40, dtype=np.int32)
    for k in range(3):
        try:
            compaction.select_if(cuda.to_device(v), boom)
            raise AssertionError("the raise was not told")
        except compaction.DispatchError as e:
            assert "raised ValueError" in str(e), e
        kernels._KERNELS.clear()  # the next call builds its kernels afresh, with the block's threads maybe still running
        got = compaction.select(cuda.to_device(v), cuda.to_device(v % (k + 2) == 0)).copy_to_host()
        assert np.array_equal(got, v[v % (k + 2) == 0]), got
    print("ok built after a raise")
''')


def test_a_kernel_built_right_after_a_raising_predicate_under_the_simulator_works():
    """Regression (a red-team): the simulator raises a thread's exception while the block's other
    threads still run device functions with kernels.py's `cuda` swapped for its fake, so the next
    call building a kernel failed with a raw AttributeError ('FakeCUDAModule' has no 'jit')."""
    from simulated import run_script

    out = run_script(RAISING_THEN_BUILDING, 600)
    assert out.returncode == 0 and "ok built after a raise" in out.stdout, out.stdout + out.stderr


def test_a_masked_device_array_and_an_interface_that_raises_are_refused_with_a_fix():
    """Regression (a red-team): a device array whose __cuda_array_interface__ carries a mask passed
    every check (the kernels read only its data: the mask would be ignored), and an interface
    property that raised escaped as itself; a 3-byte item was told "8- to 64-bit numbers"."""
    class Masked:
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<i4", "data": (0, False), "version": 3,
                                    "mask": object()}

    class Raises:
        dtype, shape = np.dtype(np.int32), (3,)

        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("no CUDA context")

    for call, said in ((lambda: compaction.select(Masked(), Masked()), r"values is a device array with a mask .* "
                                                                        r"compaction would ignore it\. Fix: "),
                       (lambda: compaction.nonzero(Raises()), r"reading the __cuda_array_interface__ of a Raises raised "
                                                              r"RuntimeError \(no CUDA context\)\. Fix: "),
                       (lambda: compaction.select(np.zeros(2, "S3"), np.ones(2, bool)),
                        r"dtype \|S3; compaction moves items of 1, 2, 4 or 8 bytes .* Fix: .*compaction\.nonzero")):
        with pytest.raises(DispatchError, match=said):
            call()


def test_a_global_only_an_njit_helper_reads_is_fixed_at_its_first_compilation_and_passing_it_is_the_fix():
    """docs/robustness.md, "predicates without end": what a predicate reads is keyed; what an
    @njit helper it calls reads is Numba's, fixed at the helper's first compilation."""
    scope: dict = {}
    exec("import numba\nLIMIT = 2\n@numba.njit\ndef big(v):\n    return v > LIMIT\n"
         "@numba.njit\ndef above(v, lim):\n    return v > lim\n", scope)
    x = np.arange(6)
    fixed = eval("lambda v: big(v)", scope)
    passed = eval("lambda v: above(v, LIMIT)", scope)
    assert compaction.select_if(x, fixed).tolist() == [3, 4, 5] == compaction.select_if(x, passed).tolist()
    scope["LIMIT"] = 4
    assert compaction.select_if(x, fixed).tolist() == [3, 4, 5]  # the helper's LIMIT is still 2
    assert compaction.select_if(x, passed).tolist() == [5]
