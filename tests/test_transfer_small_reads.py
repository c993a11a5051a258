"""gpu.transfer's reads below SMALL_BYTES (through the context's small pinned buffer), against a
driver stand-in whose asynchronous copies land only when their stream is synchronized."""
from __future__ import annotations

import ctypes
import threading
import time
from collections import defaultdict

import numpy as np
import pytest
from cuda.bindings import driver  # numba-cuda[cu13], a dependency: importable without a GPU

from vyre_numba.errors import DeviceError, VyreError
from vyre_numba.gpu import transfer

OK, FAULT = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
CONTEXT = 0x5EED


class Driver:
    """cuMemcpyDtoHAsync and cuStreamSynchronize over host memory: a copy is queued on its stream
    and made at that stream's next synchronization (after `delay` seconds), or dropped with `fail`."""

    def __init__(self, fail: bool = False, delay: float = 0.0):
        self.queues, self.fail, self.delay, self.copies = defaultdict(list), fail, delay, 0

    def cuMemcpyDtoHAsync(self, dst: int, src: int, nbytes: int, stream: int):
        self.queues[stream].append((dst, src, nbytes))
        return (OK,)

    def cuStreamSynchronize(self, stream: int):
        time.sleep(self.delay)
        pending = self.queues.pop(stream, [])
        if self.fail:
            return (FAULT,)
        for dst, src, nbytes in pending:
            ctypes.memmove(dst, src, nbytes)
            self.copies += 1
        return (OK,)


@pytest.fixture
def small(monkeypatch):
    """The context's small buffer, made here (numba's pinned_array needs a GPU)."""
    entry = [threading.Lock(), np.zeros(transfer.SMALL_BYTES, np.uint8)]
    monkeypatch.setitem(transfer._SMALL, CONTEXT, entry)
    return entry


@pytest.mark.parametrize("nbytes", [1, 4, transfer.SMALL_BYTES - 1])
def test_a_small_read_goes_through_the_pinned_buffer_and_waits_for_its_stream(small, nbytes):
    src = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    drv = Driver()
    transfer.download(drv, CONTEXT, dst, src.ctypes.data, stream=7)
    assert np.array_equal(dst, src) and drv.copies == 1 and not drv.queues
    assert np.array_equal(small[1][:nbytes], src)  # it went through the buffer, not straight into dst


def test_a_failing_stream_raises_a_vyre_error_leaves_the_destination_and_frees_the_buffer(small):
    src = np.arange(16, dtype=np.uint8)
    dst = np.full(16, 0xAB, np.uint8)
    with pytest.raises(DeviceError, match=r"waiting for a read-back failed: CUDA_ERROR_ILLEGAL_ADDRESS\. Fix:") as e:
        transfer.download(Driver(fail=True), CONTEXT, dst, src.ctypes.data, stream=7)
    assert isinstance(e.value, VyreError) and (dst == 0xAB).all()
    assert small[0].acquire(blocking=False)  # the lock was let go
    small[0].release()
    transfer.download(Driver(), CONTEXT, dst, src.ctypes.data, stream=7)
    assert np.array_equal(dst, src)


def test_small_reads_from_several_threads_on_their_own_streams_each_get_their_own_bytes(small):
    """The buffer is shared by the context: a read holds it from its copy until it has taken the
    bytes out, so another thread's copy (landing when its own stream is synchronized) cannot
    overwrite them in between."""
    drv = Driver(delay=0.002)
    sources = [np.full(4096, k, np.uint8) for k in range(8)]
    got, errors = [None] * 8, []

    def read(k: int) -> None:
        try:
            for _ in range(5):
                dst = np.empty(4096, np.uint8)
                transfer.download(drv, CONTEXT, dst, sources[k].ctypes.data, stream=100 + k)
                assert (dst == k).all(), (k, np.unique(dst))
            got[k] = True
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(got) and drv.copies == 40


def test_where_pinned_memory_is_refused_small_reads_take_the_pageable_path(monkeypatch):
    monkeypatch.setitem(transfer._SMALL, CONTEXT, None)  # what _small_buffer keeps when pinning failed
    src = np.arange(64, dtype=np.uint8)
    dst = np.zeros(64, np.uint8)
    drv = Driver()
    drv.cuMemcpyDtoH = lambda d, s, n: (ctypes.memmove(d, s, n), (OK,))[1]
    transfer.download(drv, CONTEXT, dst, src.ctypes.data, stream=7)
    assert np.array_equal(dst, src) and not drv.queues


def test_a_small_buffer_that_cannot_be_pinned_is_remembered_as_none(monkeypatch):
    from numba import cuda

    def refuse(*a, **k):
        raise MemoryError("no pinned memory")

    monkeypatch.setattr(cuda, "pinned_array", refuse)
    monkeypatch.delitem(transfer._SMALL, CONTEXT + 1, raising=False)
    assert transfer._small_buffer(CONTEXT + 1) is None and transfer._SMALL[CONTEXT + 1] is None
    monkeypatch.delitem(transfer._SMALL, CONTEXT + 1)


def test_an_interrupted_small_read_waits_for_its_copy_before_letting_the_buffer_go(small):
    """A KeyboardInterrupt after the copy was enqueued: the stream is synchronized before the lock
    is released, so the copy cannot land in the buffer while another read holds it."""
    drv = Driver()
    enqueue = drv.cuMemcpyDtoHAsync

    def interrupted(*args):
        enqueue(*args)
        raise KeyboardInterrupt

    drv.cuMemcpyDtoHAsync = interrupted
    src = np.arange(32, dtype=np.uint8)
    with pytest.raises(KeyboardInterrupt):
        transfer.download(drv, CONTEXT, np.zeros(32, np.uint8), src.ctypes.data, stream=7)
    assert not drv.queues and drv.copies == 1  # the copy landed before the call gave up
    assert small[0].acquire(blocking=False)
    small[0].release()
