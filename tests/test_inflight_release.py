"""A GPU dispatch in flight that is dropped before its result is collected gives its stream,
events and buffer set back through the next dispatch, once its work has finished (driven here with
a stand-in driver: the logic is the host's)."""
from __future__ import annotations

import gc

import pytest

from vyre_numba.errors import DispatchError
from vyre_numba.gpu.backend import CudaPending, _Dropped
from vyre_numba.gpu.streams import StreamPool


class _Drv:
    class CUresult:
        CUDA_SUCCESS, CUDA_ERROR_NOT_READY, CUDA_ERROR_LAUNCH_FAILED = 0, 600, 719

    def __init__(self):
        self.destroyed, self.streams_destroyed, self.state = [], [], {}

    def cuEventDestroy(self, ev):
        self.destroyed.append(ev)

    def cuEventQuery(self, ev):
        return (self.state.get(ev, self.CUresult.CUDA_ERROR_NOT_READY),)

    def cuStreamDestroy(self, s):
        self.streams_destroyed.append(s)

    def cuEventElapsedTime(self, a, b):
        return self.CUresult.CUDA_SUCCESS, 1.5


class _Plan:
    def __init__(self):
        self.given = []

    def give(self, bufs):
        self.given.append(bufs)


class _Backend:
    def __init__(self):
        self._drv = _Drv()
        self.streams = StreamPool(lambda: object(), keep=16)
        self._dropped = _Dropped(self)


def _dropped(be, plan, event):
    p = CudaPending(be, plan)
    p.stream, p.buffers, p.done_event = be.streams.take(), object(), event
    return p


def test_a_dropped_dispatch_is_given_back_once_its_work_finished():
    be, plan = _Backend(), _Plan()
    for k in range(20):
        _dropped(be, plan, f"ev{k}")  # dropped at once
    gc.collect()
    assert be.streams.created == 20 and not plan.given
    be._dropped.drain()  # still running: nothing given back, nothing destroyed
    assert not plan.given and not be._drv.destroyed and len(be._dropped._queue) == 20
    for k in range(15):
        be._drv.state[f"ev{k}"] = _Drv.CUresult.CUDA_SUCCESS
    be._drv.state["ev15"] = _Drv.CUresult.CUDA_ERROR_LAUNCH_FAILED
    be._dropped.drain()
    assert len(plan.given) == 15 and len(be.streams._free) == 15  # finished: reused
    assert be._drv.streams_destroyed and len(be._drv.streams_destroyed) == 1  # faulted: destroyed, buffers dropped
    assert sorted(be._drv.destroyed) == sorted(f"ev{k}" for k in range(16)) and len(be._dropped._queue) == 4
    be._dropped.drain()
    assert len(plan.given) == 15  # each given back once


def test_a_collected_dispatch_leaves_nothing_for_the_finaliser():
    be, plan = _Backend(), _Plan()
    p = _dropped(be, plan, "ev")
    be._drv.state["ev"] = _Drv.CUresult.CUDA_SUCCESS
    p.events = None
    p.release(failed=False)
    del p
    gc.collect()
    assert len(plan.given) == 1 and not be._dropped._queue


def test_a_timed_dispatch_keeps_its_time_after_its_events_went_back():
    """Regression (caught before it ran): with the events given back at collection, device_ns()
    took the dispatch for an untimed one (dispatch_timed read it after result())."""
    be, plan = _Backend(), _Plan()
    p = _dropped(be, plan, "ev")
    p.timed, p.events = True, ("e0", "e1")
    p.release(failed=False)
    p._result = []
    assert p.events is None and p.device_ns() == 1_500_000
    untimed = _dropped(be, plan, "ev2")
    untimed._result = []
    with pytest.raises(DispatchError, match="was not timed"):
        untimed.device_ns()
