"""gpu.memory's spares: a freed pooled array of at most SPARE_BYTES is kept for the next
allocation of its size and context made for the legacy stream (`spare=True`; at most SPARES of
them, the oldest going back to the pool), against a driver stand-in that records allocations and
frees."""
from __future__ import annotations

import gc
import weakref

import pytest
from cuda.bindings import driver  # numba-cuda[cu13], a dependency: importable without a GPU

from vyre_numba.gpu import memory

OK, OOM = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY
CONTEXT, OTHER = 0x5EED, 0xBEEF


class Driver:
    """cuMemAllocFromPoolAsync / cuMemFreeAsync over made-up addresses; `short` allocations fail
    for want of memory before one succeeds."""
    CUresult = driver.CUresult

    def __init__(self, short: int = 0):
        self.next, self.allocs, self.frees, self.short, self.current = 0x10000, [], [], short, CONTEXT
        self.copies = []

    def CUstream(self, handle):
        return handle

    def CUdeviceptr(self, address):
        return address

    def cuCtxGetCurrent(self):
        return OK, self.current

    def cuMemAllocFromPoolAsync(self, nbytes, pool, stream):
        if self.short:
            self.short -= 1
            return OOM, 0
        address, self.next = self.next, self.next + ((nbytes + 0xFFF) & ~0xFFF)
        self.allocs.append((address, nbytes))
        return OK, address

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        self.copies.append((dst, src, nbytes))
        return (OK,)

    def cuMemFreeAsync(self, address, stream):
        self.frees.append(address)
        return (OK,)


class Pointer:
    """Numba's MemoryPointer, as far as owning_pointer uses it: the finalizer runs once, on free()
    or when the pointer is collected."""

    def __init__(self, ctx, address, size, finalizer):
        self.address, self.size = address, size
        self._finalizer = weakref.finalize(self, finalizer)

    def free(self):
        self._finalizer()


@pytest.fixture
def drv(monkeypatch):
    d = Driver()
    monkeypatch.setattr(memory, "_driver", lambda: (d, None, Pointer))
    monkeypatch.setattr(memory, "_context", lambda: (d.current, None, "pool"))
    monkeypatch.setattr(memory, "_SPARE", [])
    return d


def test_a_freed_array_is_taken_back_by_the_next_allocation_of_its_size(drv):
    a = memory.pool_alloc(4096, spare=True)
    memory.owning_pointer(a, 4096).free()
    assert drv.frees == [] and memory.pool_alloc(4096, spare=True) == a  # no driver call either way
    assert len(drv.allocs) == 1
    b = memory.pool_alloc(8192, spare=True)  # another size: from the pool
    assert b != a and len(drv.allocs) == 2


def test_a_spare_is_taken_once(drv):
    a = memory.pool_alloc(64, spare=True)
    memory.owning_pointer(a, 64).free()
    assert memory.pool_alloc(64, spare=True) == a
    assert memory.pool_alloc(64, spare=True) != a  # taken: the next comes from the pool


def test_at_most_spares_are_kept_and_the_oldest_go_back_to_the_pool(drv):
    addresses = [memory.pool_alloc(256, spare=True) for _ in range(memory.SPARES + 2)]
    for a in addresses:
        memory.owning_pointer(a, 256).free()
    assert drv.frees == addresses[:2]
    assert sorted(memory.pool_alloc(256, spare=True) for _ in range(memory.SPARES)) == sorted(addresses[2:])


def test_large_arrays_go_straight_back_to_the_pool(drv):
    a = memory.pool_alloc(memory.SPARE_BYTES + 1, spare=True)
    memory.owning_pointer(a, memory.SPARE_BYTES + 1).free()
    assert drv.frees == [a] and memory._SPARE == []


def test_a_spare_of_another_context_is_not_taken(drv):
    a = memory.pool_alloc(512, spare=True)
    memory.owning_pointer(a, 512).free()
    drv.current = OTHER
    assert memory.pool_alloc(512, spare=True) != a
    drv.current = CONTEXT
    assert memory.pool_alloc(512, spare=True) == a


def test_a_spare_is_given_back_to_its_own_context(drv):
    a = memory.pool_alloc(512, spare=True)
    memory.owning_pointer(a, 512).free()
    drv.current = OTHER
    pushed = []
    drv.cuCtxPushCurrent = lambda c: (pushed.append(c), (OK,))[1]
    drv.cuCtxPopCurrent = lambda: pushed.append("pop")
    drv.CUcontext = lambda c: c
    memory._free_spares()
    assert drv.frees == [a] and pushed == [CONTEXT, "pop"]


def test_out_of_memory_gives_the_spares_back_before_trying_again(drv):
    a = memory.pool_alloc(1024, spare=True)
    memory.owning_pointer(a, 1024).free()
    drv.short = 1
    b = memory.pool_alloc(2048, spare=True)
    assert drv.frees == [a] and memory._SPARE == [] and b not in (0, a)


def test_trim_gives_the_spares_back(drv, monkeypatch):
    monkeypatch.setattr(memory, "_POOLS", {})  # no pool to trim here: only the spares go
    a = memory.pool_alloc(128, spare=True)
    memory.owning_pointer(a, 128).free()
    memory.trim()
    assert drv.frees == [a] and memory._SPARE == []


def test_an_array_freed_by_a_collection_while_spares_are_searched_is_kept(drv):
    """A finalizer may run in the thread that holds the spares' lock (a collection started by an
    allocation there): it must neither deadlock nor lose an entry."""
    a = memory.pool_alloc(32, spare=True)
    memory.owning_pointer(a, 32).free()
    b = memory.pool_alloc(48, spare=True)

    class Cycle:
        pass
    c = Cycle()
    c.self, c.pointer = c, memory.owning_pointer(b, 48)
    del c
    with memory._SPARE_LOCK:  # as if the collection ran inside the lock
        gc.collect()
        assert memory.pool_alloc(32, spare=True) == a
    assert memory.pool_alloc(48, spare=True) == b


def test_an_allocation_for_another_stream_never_takes_a_spare(drv):
    """Nothing is enqueued when a spare is freed or taken: only work on the legacy stream waits for
    the previous owner's, so scratch used on a blocking stream of its own comes from the pool."""
    a = memory.pool_alloc(4096)
    memory.owning_pointer(a, 4096).free()
    b = memory.pool_alloc(4096)
    assert b != a and len(drv.allocs) == 2 and memory._SPARE == [(CONTEXT, 4096, a)]
    assert memory.pool_alloc(4096, spare=True) == a


def test_a_copy_on_the_legacy_stream_takes_a_spare_of_its_size(drv):
    small = memory.pool_alloc(100, spare=True)
    memory.owning_pointer(small, 100).free()
    room = memory.pool_alloc(4000, spare=True)
    new = memory.pool_copy(room, 100)
    assert new == small and drv.copies == [(small, room, 100)] and drv.frees == [room]
