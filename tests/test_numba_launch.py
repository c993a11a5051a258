"""NumbaLaunch (a Numba kernel launched with parameters packed once) against Numba's own launch:
the same results for every argument kind it packs, after arguments and geometry change."""
from __future__ import annotations

import numpy as np
import pytest

from vyre_numba.gpu.numba_launch import _params


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
