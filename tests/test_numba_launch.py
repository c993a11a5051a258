"""NumbaLaunch (a Numba kernel launched with parameters packed once) against Numba's own launch:
the same results for every argument kind it packs, after arguments and geometry change."""
from __future__ import annotations

import numpy as np
import pytest

from vyre_numba.gpu.numba_launch import _params, overload_kind


class _Fake:
    def __init__(self, typestr, shape, ptr, strides=None):
        self.__cuda_array_interface__ = dict(typestr=typestr, shape=shape, data=(ptr, False), strides=strides,
                                             version=3)
        self.shape = shape


def test_parameters_are_numbas_layout():
    assert _params(_Fake("<i4", (5,), 4096)) == [0, 0, 5, 4, 4096, 5, 4]
    assert _params(_Fake("<f8", (2, 3), 64)) == [0, 0, 6, 8, 64, 2, 3, 24, 8]
    assert _params(_Fake("<u1", (4, 2), 8, strides=(4, 1))) == [0, 0, 8, 1, 8, 4, 2, 4, 1]
    assert _params(np.int32(-1)) == [2**64 - 1]  # an i32 parameter reads the low half: -1
    assert _params(7) == [7]
    assert _params(np.float32(1.5)) == [0x3FC00000]
    assert _params(2.0) == [0x4000000000000000]
    assert _params(True) is None and _params("x") is None  # left to Numba


def test_relaunch_rewrites_exactly_an_arrays_length_address_and_shape_and_a_scalar():
    """A Relaunch's parameter block after `array` and `scalar` is what packing those arguments
    afresh gives (Numba's layout), and nothing else moves."""
    from vyre_numba.gpu.launch import KernelLaunch, LaunchShape
    from vyre_numba.gpu.numba_launch import RawArray, Relaunch

    args = [RawArray(4096, (5,), np.int32), 7, RawArray(8192, (9,), np.uint64)]
    packed = [_params(a) for a in args]
    slots = np.cumsum([0] + [len(p) for p in packed]).tolist()
    launch = KernelLaunch(0, "k", LaunchShape((1, 1, 1), (1, 1, 1)), 0, nparams=slots[-1])
    launch.args.values[:] = [v for p in packed for v in p]
    again = Relaunch(launch, slots, 0)
    again.array(0, 1 << 40, 123)
    again.scalar(1, -2)
    again.array(2, 64, 0)
    want = [_params(RawArray(1 << 40, (123,), np.int32)), _params(np.int64(-2)), _params(RawArray(64, (0,), np.uint64))]
    assert launch.args.values.tolist() == [v for p in want for v in p]
    assert overload_kind(args[0]) == (np.dtype(np.int32).str, 1, True)  # what Selector.fused_at keys residency by


@pytest.mark.gpu
def test_gpu_numba_launch_matches_numbas_own_launch():
    from numba import cuda

    from vyre_numba.gpu.numba_launch import NumbaLaunch

    @cuda.jit
    def k(out, a, m, s, f, g):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] * s + f + g + m[i % m.shape[0], i % m.shape[1]]

    rng = np.random.default_rng(0)
    fast = NumbaLaunch(k)
    m = cuda.to_device(rng.random((3, 4)))
    for n, blocks, threads in ((1000, 4, 256), (1000, 8, 128), (37, 1, 64), (5000, 20, 256)):
        a = cuda.to_device(rng.integers(-9, 9, n).astype(np.int32))
        want, got = cuda.device_array(n), cuda.device_array(n)
        k[blocks, threads](want, a, m, np.int32(-3), np.float32(0.25), 1.5)
        fast(blocks, threads, got, a, m, np.int32(-3), np.float32(0.25), 1.5)
        assert np.array_equal(got.copy_to_host(), want.copy_to_host())
    mt = cuda.to_device(rng.random((4, 6)))[:, ::2]  # a strided view: another overload of the kernel
    a = cuda.to_device(np.arange(64, dtype=np.int32))
    want, got = cuda.device_array(64), cuda.device_array(64)
    k[1, 64](want, a, mt, np.int32(2), np.float32(0), 0.0)
    fast(1, 64, got, a, mt, np.int32(2), np.float32(0), 0.0)
    assert np.array_equal(got.copy_to_host(), want.copy_to_host())
    fast(0, 64, got, a, mt, np.int32(5), np.float32(0), 0.0)  # an empty grid launches nothing
    assert np.array_equal(got.copy_to_host(), want.copy_to_host())


@pytest.mark.gpu
def test_gpu_numba_launch_on_a_stream_keeps_nothing_without_retain():
    import weakref

    from numba import cuda

    from vyre_numba.gpu.numba_launch import NumbaLaunch

    @cuda.jit
    def twice(out, a):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = 2 * a[i]

    stream = cuda.stream()
    fast = NumbaLaunch(twice, stream, retain=False)
    for n in (1, 300, 5000):
        a = cuda.to_device(np.arange(n, dtype=np.int64), stream=stream)
        out = cuda.device_array(n, np.int64, stream=stream)
        fast(-(-n // 128), 128, out, a)
        assert np.array_equal(out.copy_to_host(stream=stream), 2 * np.arange(n))
    gone = weakref.ref(a)
    del a
    assert gone() is None  # the launch kept no reference to its last argument


def _scaled_kernel():
    """A kernel writing out[i] = a[i] * s."""
    from numba import cuda

    @cuda.jit
    def k(out, a, s):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] * s
    return k


@pytest.mark.gpu
def test_gpu_relaunch_with_rewritten_arrays_matches_numbas_own_launch():
    from numba import cuda

    from vyre_numba.gpu.numba_launch import NumbaLaunch, RawArray

    k = _scaled_kernel()
    fast = NumbaLaunch(k, retain=False)
    n0 = 10
    out0, a0 = cuda.device_array(n0, np.int64), cuda.to_device(np.arange(n0, dtype=np.int64))
    fast(1, 32, RawArray(out0.device_ctypes_pointer.value, (n0,), np.int64),
         RawArray(a0.device_ctypes_pointer.value, (n0,), np.int64), 2)
    again = fast.detached()
    for n, s in ((1000, 3), (5, -1), (70_000, 7)):
        a = cuda.to_device(np.arange(n, dtype=np.int64))
        want, got = cuda.device_array(n, np.int64), cuda.device_array(n, np.int64)
        k[(n + 255) // 256, 256](want, a, s)
        again.array(0, got.device_ctypes_pointer.value, n)
        again.array(1, a.device_ctypes_pointer.value, n)
        again.scalar(2, s)
        again((n + 255) // 256, 256)
        assert np.array_equal(got.copy_to_host(), want.copy_to_host())
    assert np.array_equal(out0.copy_to_host(), np.arange(n0) * 2)  # the packed launch's own arrays untouched


@pytest.mark.gpu
def test_gpu_packed_launch_runs_only_when_called_and_with_its_rewritten_output():
    from numba import cuda

    from vyre_numba.gpu.numba_launch import NumbaLaunch, RawArray

    k = _scaled_kernel()
    launch = NumbaLaunch(k, retain=False)
    n = 5000
    a = cuda.to_device(np.arange(n, dtype=np.int64))
    stand_in = cuda.to_device(np.full(n, -1, np.int64))
    put = launch.packed(RawArray(stand_in.device_ctypes_pointer.value, (n,), np.int64), a, 3)
    assert put is not None
    cuda.synchronize()
    assert (stand_in.copy_to_host() == -1).all()  # packed, not launched
    out = cuda.device_array(n, np.int64)
    put.array(0, out.device_ctypes_pointer.value, n)
    put((n + 255) // 256, 256)
    assert np.array_equal(out.copy_to_host(), 3 * np.arange(n))
    assert (stand_in.copy_to_host() == -1).all()
    launch(-(-n // 256), 256, stand_in, a, 2)  # the launcher itself still launches what it is given
    assert np.array_equal(stand_in.copy_to_host(), 2 * np.arange(n))
