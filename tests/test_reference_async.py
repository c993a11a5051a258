"""dispatch_async on the reference backend runs on a worker thread (wait(timeout) returns on
time, done() tells the truth, cancel() stops it), and telemetry counters stay exact under
concurrent dispatch. Timing bounds are loose enough for a loaded two-core machine: they only
separate "returned after the timeout" from "ran to the end" (minutes)."""
from __future__ import annotations

import sys
import threading
import time
import traceback

import numpy as np
import pytest

from conftest import assert_fix
from vyre_numba import DispatchConfig, DispatchError, ir
from vyre_numba.backend import Backend
from vyre_numba.reference import ReferenceBackend, ReferencePending

B = ir.BufferDecl
v = ir.var


def spin(trips: int) -> ir.Program:
    """out = a + trips, after a loop of `trips` iterations (about minutes for 2**32 - 1)."""
    return ir.Program([B.read("a", 0, "u32"), B.output("out", 1, "u32")], 4, [
        ir.let("c", ir.u32(0)),
        ir.loop("j", ir.u32(0), ir.u32(trips), ir.assign("c", v("c") + ir.u32(1))),
        ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)) + v("c"))])


def test_wait_times_out_while_it_runs_and_cancel_stops_it():
    backend = ReferenceBackend()
    t0 = time.monotonic()
    pending = backend.dispatch_async(spin(2**32 - 1), [np.zeros(4, np.uint32)])
    assert isinstance(pending, ReferencePending)
    assert time.monotonic() - t0 < 5, "dispatch_async waited for the dispatch"
    assert not pending.done()
    t0 = time.monotonic()
    assert pending.wait(0.3) is False
    assert 0.29 <= time.monotonic() - t0 < 10
    assert not pending.done()
    assert pending.cancel() is True
    assert pending.wait(30) is True and pending.done()
    with pytest.raises(DispatchError, match="cancelled") as e:
        pending.result()
    assert "the loop over 'j' at entry[1]" in str(e.value)
    assert_fix(str(e.value))
    assert pending.cancel() is False
    assert backend.telemetry().get("dispatches", 0) == 0


def test_result_with_a_timeout_raises_a_timeout_error_and_can_be_asked_again():
    """result(timeout=) as concurrent.futures has it: a TimeoutError while the dispatch runs, which
    goes on running; the outputs once it ends."""
    from vyre_numba import ResultTimeoutError

    pending = ReferenceBackend().dispatch_async(spin(2**32 - 1), [np.zeros(4, np.uint32)])
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        pending.result(timeout=0.2)
    assert 0.19 <= time.monotonic() - t0 < 10
    assert isinstance(e.value, ResultTimeoutError) and isinstance(e.value, DispatchError)
    assert "still running" in str(e.value)
    assert_fix(str(e.value))
    assert not pending.done()
    for bad in (-1, float("nan"), True, "1"):
        with pytest.raises(DispatchError, match=r"result\(timeout=.*Fix: "):
            pending.result(timeout=bad)
    pending.cancel()
    with pytest.raises(DispatchError, match="cancelled"):
        pending.result(timeout=60)
    done = ReferenceBackend().dispatch_async(spin(5), [np.arange(4, dtype=np.uint32)])
    assert done.result(timeout=60)[0].tolist() == [5, 6, 7, 8]
    assert done.result(0)[0].tolist() == [5, 6, 7, 8]
    assert Backend.dispatch_async(ReferenceBackend(), spin(5), [np.zeros(4, np.uint32)]).result(timeout=0)[0][0] == 5


def test_a_dispatch_cancelled_while_queued_never_runs_and_says_so():
    """Regression (a red-team): cancel() of a queued dispatch returned True, yet it ran when a worker
    came free (the budget was first checked inside a loop) and result() gave its outputs."""
    from vyre_numba.reference import _POOL

    backend = ReferenceBackend()
    busy = [backend.dispatch_async(spin(2**32 - 1), [np.zeros(4, np.uint32)]) for _ in range(_POOL.size)]
    short = ir.Program([B.output("y", 0, "u32", 32)], 32, [ir.store("y", ir.gid(0), ir.u32(7))], name="short")
    queued = backend.dispatch_async(short, [])
    assert queued.cancel() is True
    for p in busy:
        p.cancel()
    assert queued.wait(60)
    with pytest.raises(DispatchError, match="'short' on the reference backend was cancelled, at its start") as e:
        queued.result()
    assert_fix(str(e.value))
    assert backend.telemetry().get("dispatches", 0) == 0


def test_results_and_done_after_it_finishes():
    backend = ReferenceBackend()
    a = np.arange(4, dtype=np.uint32)
    pending = backend.dispatch_async(spin(500), [a], DispatchConfig(label="spin"))
    assert pending.wait(60) is True and pending.done()
    assert pending.result()[0].tolist() == [500, 501, 502, 503]
    assert pending.cancel() is False
    assert backend.telemetry()["dispatches"] == 1 and backend.telemetry()["dispatches[spin]"] == 1


def test_a_finished_dispatch_is_not_kept_alive_by_the_worker_that_ran_it():
    """Regression (a red-team): an idle worker kept its last job, and with it the Pending, the
    copied inputs and the outputs (472 MB after `del` and gc.collect())."""
    import gc
    import weakref

    backend = ReferenceBackend()
    pending = backend.dispatch_async(spin(10), [np.arange(1000, dtype=np.uint32)])
    out = pending.result()[0]
    gone, left = weakref.ref(out), weakref.ref(pending)
    del pending, out
    deadline = time.monotonic() + 10
    while (gone() is not None or left() is not None) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert gone() is None and left() is None


def test_inputs_are_captured_at_the_call():
    backend = ReferenceBackend()
    a = np.arange(4, dtype=np.uint32)
    pending = backend.dispatch_async(spin(20_000), [a])  # loads `a` only after its loop
    a[:] = 1000
    assert pending.result()[0].tolist() == [20_000, 20_001, 20_002, 20_003]


def test_mistakes_in_the_arguments_raise_at_the_call():
    backend = ReferenceBackend(memory_budget=10)
    with pytest.raises(DispatchError, match="expected 1 input") as e:
        backend.dispatch_async(spin(5), [])
    assert_fix(str(e.value))
    with pytest.raises(DispatchError, match="memory budget"):  # refused before it is submitted
        backend.dispatch_async(spin(5), [np.zeros(4096, np.uint32)])
    pending = ReferenceBackend().dispatch_async(spin(5), [np.zeros(4, np.uint32)])
    with pytest.raises(DispatchError, match="timeout") as e:
        pending.wait("soon")
    assert_fix(str(e.value))


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, 2**64, 10**19, np.float64("inf"), 10**400])
def test_an_endless_or_huge_timeout_waits_without_a_limit(timeout):
    """Regression: wait(inf), wait(1e300) and wait(2**64) raised OverflowError from threading."""
    pending = ReferenceBackend().dispatch_async(spin(5), [np.zeros(4, np.uint32)])
    assert pending.wait(timeout) is True and pending.done()
    for bad in (-1, float("nan"), True, "1"):
        with pytest.raises(DispatchError, match="timeout.*Fix: "):
            pending.wait(bad)


def test_failures_while_running_come_out_of_result():
    p = ir.Program([B.output("out", 0, "u32", 64)], 32, [
        ir.if_(ir.lid(0) < 3, [ir.barrier()]), ir.store("out", ir.gid(0), 1)])
    pending = ReferenceBackend().dispatch_async(p, [])
    assert pending.wait(60) is True and pending.done()
    depths = []
    for _ in range(3):  # the same error each time, its traceback not growing by each caller's frames
        with pytest.raises(DispatchError, match="barrier") as e:
            pending.result()
        depths.append(len(traceback.extract_tb(e.value.__traceback__)))
    assert depths[0] == depths[1] == depths[2], depths


def test_a_completed_pending_raises_its_error_with_the_same_traceback_each_time():
    from vyre_numba.backend import Completed

    try:
        raise DispatchError("it failed. Fix: nothing.")
    except DispatchError as e:
        done = Completed(error=e)
    depths = []
    for _ in range(3):
        with pytest.raises(DispatchError) as e:
            done.result()
        depths.append(len(traceback.extract_tb(e.value.__traceback__)))
    assert depths[0] == depths[1] == depths[2], depths


def test_many_in_flight_dispatches_all_complete():
    backend = ReferenceBackend()
    before = threading.active_count()
    pendings = [backend.dispatch_async(spin(50 + k), [np.full(4, k, np.uint32)]) for k in range(24)]
    for k, p in enumerate(pendings):
        assert p.result()[0].tolist() == [k + 50 + k] * 4
    assert threading.active_count() - before <= 64
    assert backend.telemetry()["dispatches"] == 24


def test_other_backends_pending_cannot_cancel_by_default():
    from vyre_numba.backend import Completed

    assert Completed([]).cancel() is False


# ---- telemetry under threads -------------------------------------------------------------------

def counted(backend) -> dict:
    """The counters that counted something (telemetry also lists every standard key at zero)."""
    return {k: v for k, v in backend.telemetry().items() if v}


@pytest.fixture
def busy_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: lost updates show up
    yield
    sys.setswitchinterval(old)


def test_counters_are_exact_under_threads(busy_switching):
    class Quiet(Backend):
        name = "quiet"

        def dispatch(self, program, inputs=None, config=None, *, sizes=None):
            raise NotImplementedError

    backend = Quiet()

    def work():
        for _ in range(20_000):
            backend._count(a=1, b=2)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counted(backend) == {"a": 160_000, "b": 320_000}
    backend.reset_telemetry()
    assert counted(backend) == {}


def test_concurrent_reference_dispatches_are_all_counted(busy_switching):
    backend = ReferenceBackend()
    p = ir.Program([B.read("a", 0, "u32"), B.output("out", 1, "u32")], 8, [
        ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)) * ir.u32(2))])
    a = np.arange(16, dtype=np.uint32)
    errors: list = []

    def work(k):
        try:
            for j in range(150):
                label = "even" if j % 2 == 0 else None
                out = backend.dispatch(p, [a], DispatchConfig(label=label))[0]
                assert out.tolist() == (a * 2).tolist()
                backend.dispatch_resident(p, [a, np.zeros(16, np.uint32)])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert counted(backend) == {"dispatches": 1200, "dispatches[even]": 600, "resident_dispatches": 1200}


def test_a_pending_refuses_copies_and_pickles_with_a_fix():
    """Regression: copy.deepcopy and pickle raised the raw "TypeError: cannot pickle
    '_thread.lock'", and copy.copy gave a second handle that never learnt the outcome (only the
    original is finished by the worker): result() on it returned None."""
    import copy
    import pickle

    backend = ReferenceBackend()
    running = backend.dispatch_async(spin(2**32 - 1), [np.zeros(4, np.uint32)])
    finished = backend.dispatch_async(spin(3), [np.zeros(4, np.uint32)])
    try:
        finished.wait()
        for pending in (running, finished):
            for make_copy in (copy.copy, copy.deepcopy, pickle.dumps):
                with pytest.raises(DispatchError, match="in flight.*cannot be copied or pickled. Fix: copy or pickle "
                                                        r"its outputs, pending\.result\(\)") as e:
                    make_copy(pending)
                assert_fix(str(e.value))
        assert finished.result()[0].tolist() == [3] * 4
        assert pickle.loads(pickle.dumps(finished.result()))[0].tolist() == [3] * 4  # what the fix says works
    finally:
        running.cancel()


def test_threads_asking_for_a_backend_first_at_once_get_one():
    """Regression (a red-team): get_backend made a backend per thread that asked before any was
    stored (8 of 8 in a fresh process), so telemetry counted one thread's dispatches only."""
    import subprocess

    script = ("import threading, vyre_numba as vn\nseen, go = [], threading.Barrier(8)\n"
              "def ask():\n    go.wait()\n    seen.append(vn.get_backend('reference'))\n"
              "ts = [threading.Thread(target=ask) for _ in range(8)]\n[t.start() for t in ts]\n[t.join() for t in ts]\n"
              "print(len(seen), len({id(b) for b in seen}))\n")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and out.stdout.split() == ["8", "1"], out.stdout + out.stderr


def test_a_factory_asking_for_another_backend_on_another_thread_does_not_deadlock(monkeypatch):
    """Regression (a review): one lock for every name, held while a factory ran, hung a factory
    that waited for another thread's get_backend."""
    from vyre_numba import registry

    got = []

    def factory():
        t = threading.Thread(target=lambda: got.append(registry.get_backend("reference")))
        t.start()
        t.join(10)
        return ReferenceBackend()
    monkeypatch.setitem(registry._FACTORIES, "other", factory)
    monkeypatch.setitem(registry._PROBES, "other", lambda: None)
    monkeypatch.delitem(registry._INSTANCES, "other", raising=False)
    try:
        assert isinstance(registry.get_backend("other"), ReferenceBackend) and len(got) == 1
    finally:
        registry._INSTANCES.pop("other", None)


def test_a_time_span_timeout_is_refused_and_a_float16_one_waits_without_a_warning():
    """Regression (a red-team): np.timedelta64 (a Real to NumPy) raised NumPy's raw UFuncTypeError,
    and np.float16 warned of an overflow comparing against TIMEOUT_MAX."""
    import warnings

    from vyre_numba.backend import Completed

    done = Completed([np.zeros(1)])
    for call in (lambda t: done.wait(t), lambda t: done.result(timeout=t)):
        with pytest.raises(DispatchError, match=r"a time span is not a number of seconds\. Fix: pass span"):
            call(np.timedelta64(1, "s"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            call(np.float16(1))
            call(10**400)


def test_cancel_past_the_runs_last_check_is_refused_so_it_never_contradicts_result():
    """Regression (a red-team): cancel() returned True after the run's last check, and result()
    then gave the outputs. The window is widened here by a slow count after that check."""
    be = ReferenceBackend()
    p = ir.Program([ir.BufferDecl.read("a", 0, "u32"), ir.BufferDecl.output("out", 1, "u32")], 4,
                   [ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)) + ir.u32(1))], name="inc")
    in_window, real = threading.Event(), be._counted

    def slow(config):
        in_window.set()
        time.sleep(0.3)
        real(config)
    be._counted = slow
    pending = be.dispatch_async(p, [np.arange(4, dtype=np.uint32)])
    assert in_window.wait(30)
    assert pending.cancel() is False and pending.result()[0].tolist() == [1, 2, 3, 4]


def test_in_place_calls_wait_for_a_run_in_flight_as_dispatch_resident_does():
    """A red-team: read_compacted and upload of a resident array read it, and a CPU fixpoint run
    wrote it, without the reference backend's lock on resident arrays: a read saw a failed run's
    writes before their undo, and a failed fixpoint run's undo took back another thread's write
    made meanwhile. Each now waits while the lock is held (a run in flight) and runs once it goes."""
    import threading

    from vyre_numba import fixpoint, get_backend
    from vyre_numba.reference import RESIDENT_LOCK

    be = get_backend("reference")
    a = be.upload(np.arange(8, dtype=np.uint32))

    def still(i, x):
        return 0

    calls = {"read_compacted": lambda: be.read_compacted(a, a),
             "upload": lambda: be.upload(a),
             "download": lambda: be.download(a),
             "fixpoint.run": lambda: fixpoint.run(still, 8, [a], backend="reference")}
    for name, call in calls.items():
        call()  # compiled first (the step): below, only the lock can hold it back
        done = []
        with RESIDENT_LOCK:
            t = threading.Thread(target=lambda: done.append(call()))
            t.start()
            t.join(0.3)
            assert not done, f"{name} ran while another run held the resident arrays"
        t.join(60)
        assert len(done) == 1, name


def test_an_upload_reads_its_argument_outside_the_lock_on_resident_arrays():
    """A review: upload converted its argument under the lock, so a Dask array whose tasks (on
    Dask's threads) download from the same backend waited on the upload, which waited on them."""
    import threading

    da = pytest.importorskip("dask.array")
    from vyre_numba import get_backend

    be = get_backend("reference")
    base = be.upload(np.arange(8, dtype=np.uint32))
    d = da.ones(16, chunks=4, dtype=np.uint32).map_blocks(lambda x: be.download(base)[:len(x)] + x, dtype=np.uint32)
    done = []
    t = threading.Thread(target=lambda: done.append(be.upload(d)), daemon=True)
    t.start()
    t.join(60)
    assert done and done[0].tolist() == [1, 2, 3, 4] * 4
