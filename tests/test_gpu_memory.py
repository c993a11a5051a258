"""The stream-ordered pool behind compaction outputs: arrays hold what is written to them, and
memory comes back to the pool when they are collected (used memory does not grow)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def used_bytes(pool) -> int:
    from cuda.bindings import driver as drv

    err, v = drv.cuMemPoolGetAttribute(pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    assert int(getattr(err, "value", err)) == 0
    return int(v)


def test_gpu_pooled_arrays_hold_data_and_are_given_back():
    from numba import cuda

    from vyre_numba.gpu.memory import _pool, pooled_array, trim

    a = pooled_array(1000, np.float64)
    a.copy_to_device(np.arange(1000, dtype=np.float64))
    assert a.shape == (1000,) and np.array_equal(a.copy_to_host(), np.arange(1000))
    pool = _pool(cuda.current_context().device.id)
    del a
    gc.collect()
    trim()  # the spares too
    cuda.synchronize()
    before = used_bytes(pool)
    for k in range(2000):
        b = pooled_array(1 + k % 5000, np.int32)
        del b
    gc.collect()
    cuda.synchronize()
    assert used_bytes(pool) > before  # the last few freed are kept as spares
    trim()
    cuda.synchronize()
    assert used_bytes(pool) == before


def test_gpu_a_spare_is_reused_only_once_its_array_is_dropped():
    from numba import cuda

    from vyre_numba.gpu.memory import pool_alloc, pooled_array

    def legacy():  # an array whose first use is on the legacy stream: it may be a spare
        return pooled_array(4096, np.int32, pool_alloc(4096 * 4, spare=True))

    a = legacy()
    a.copy_to_device(np.full(4096, 7, np.int32))
    address = a.device_ctypes_pointer.value
    b = legacy()  # a still held: not its memory
    assert b.device_ctypes_pointer.value != address
    b.copy_to_device(np.full(4096, 9, np.int32))
    del a
    gc.collect()
    assert pooled_array(4096, np.int32).device_ctypes_pointer.value != address  # scratch for any stream: the pool's
    c = legacy()  # a's memory, now a spare
    assert c.device_ctypes_pointer.value == address
    c.copy_to_device(np.arange(4096, dtype=np.int32))
    cuda.synchronize()
    assert np.array_equal(b.copy_to_host(), np.full(4096, 9)) and np.array_equal(c.copy_to_host(), np.arange(4096))


def test_gpu_pooled_arrays_dropped_by_a_thread_without_a_context_are_given_back():
    """A thread that never used the GPU (Dask's event loop dropping a task's result) frees a
    pooled array in the context it came from."""
    import threading

    from numba import cuda

    from vyre_numba.gpu.memory import SPARES, _pool, pooled_array, trim

    pool = _pool(cuda.current_context().device.id)
    gc.collect()
    trim()
    cuda.synchronize()
    before = used_bytes(pool)
    held = [pooled_array(1 << 20, np.int32) for _ in range(SPARES + 4)]  # more than are kept: some go to the pool
    cuda.synchronize()
    assert used_bytes(pool) >= before + (SPARES + 4) * (4 << 20)
    seen = []

    def drop():
        from cuda.bindings import driver as drv

        seen.append(int(drv.cuCtxGetCurrent()[1]))  # no context current in this thread
        held.clear()
        gc.collect()
        seen.append(int(drv.cuCtxGetCurrent()[1]))  # and none left current by the frees

    t = threading.Thread(target=drop)
    t.start()
    t.join()
    cuda.synchronize()
    assert seen == [0, 0] and used_bytes(pool) == before + SPARES * (4 << 20)
    trim()
    cuda.synchronize()
    assert used_bytes(pool) == before


def test_gpu_select_outputs_come_from_the_pool_and_stay_correct_after_many_calls():
    from numba import cuda

    from vyre_numba import compaction

    rng = np.random.default_rng(0)
    for n in (1, 7, 4097, 100_003):
        v = rng.integers(0, 1 << 30, n).astype(np.int32)
        f = rng.random(n) < 0.3
        dv, df = cuda.to_device(v), cuda.to_device(f.astype(np.uint8))
        for _ in range(20):
            out = compaction.select(dv, df)
        assert np.array_equal(out.copy_to_host(), v[f])
        assert np.array_equal(compaction.nonzero(df).copy_to_host(), np.flatnonzero(f))


def reserved_bytes(pool) -> int:
    from cuda.bindings import driver as drv

    err, v = drv.cuMemPoolGetAttribute(pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    assert int(getattr(err, "value", err)) == 0
    return int(v)


def test_gpu_release_memory_gives_the_pools_idle_memory_back():
    from numba import cuda

    import vyre_numba as vn
    from vyre_numba.gpu.memory import _pool, pooled_array

    be = vn.get_backend("cuda")
    pool = _pool(cuda.current_context().device.id)
    a = pooled_array(32 << 20, np.int64)  # 256 MiB, idle in the pool once collected
    del a
    gc.collect()
    cuda.synchronize()
    be.release_memory()
    assert reserved_bytes(pool) <= used_bytes(pool) + (32 << 20)  # idle memory went back (up to a granule)


def test_gpu_a_pool_allocation_first_flushes_numbas_pending_frees_when_memory_is_short():
    """Memory Numba has dropped but not yet freed (its deferred deallocations) does not make a
    pool allocation fail: on out-of-memory the pool flushes them and tries again, as Numba does."""
    from numba import cuda

    from vyre_numba.gpu.memory import pooled_array

    ctx = cuda.current_context()
    gc.collect()
    cuda.synchronize()
    free = ctx.get_memory_info()[0]
    piece = (free - (3 << 30)) // 4
    with ctx.memory_manager.deallocations.disable():  # dropped, not freed: held pending
        held = [cuda.device_array(piece, np.uint8) for _ in range(4)]
        del held
        gc.collect()
    assert ctx.get_memory_info()[0] < (4 << 30)  # the dropped arrays still hold the memory
    big = pooled_array(2 * piece, np.uint8)  # more than is free until the pending frees are made
    cuda.synchronize()
    assert big.size == 2 * piece
    del big
    gc.collect()
    cuda.synchronize()
