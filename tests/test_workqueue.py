"""Device work queues: the NumPy twin, bad arguments, the scenarios of queue_exercise.py under
the CUDA simulator (CI) and on the GPU, and a fixpoint step that pushes."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba.errors import DispatchError
from vyre_numba.workqueue import QueueModel, WorkQueue
from vyre_numba.workqueue.device import push

HERE = Path(__file__).resolve().parent


def test_the_model_refuses_at_capacity_and_keeps_what_it_took():
    q = QueueModel(3, np.int32)
    assert [q.push(v) for v in (5, 6, 7, 8, 9)] == [True, True, True, False, False]
    assert (q.size(), q.overflowed()) == (3, 2) and repr(q) == "<QueueModel: room for 3 int32 items, 3 filled, 2 refused>"
    assert q.drain().tolist() == [5, 6, 7] and q.size() == 0 and q.push(1)
    assert repr(q) == "<QueueModel: room for 3 int32 items, 1 filled>"


@pytest.mark.parametrize("kw,fragment", [
    ({"capacity": 0}, "capacity=0"), ({"capacity": True}, "capacity=True"), ({"capacity": 2.5}, "capacity=2.5"),
    ({"dtype": "not a type"}, "unknown data type 'not a type'"), ({"dtype": np.bool_}, "cannot be queued"),
    ({"dtype": object}, "cannot be queued"), ({"capacity": 2**40}, "2**40 items or more"),
    ({"dtype": ">i4"}, "vyre buffers hold little-endian values: use 'i32'"), ({"dtype": np.dtype(">i4")}, "byte order"),
    ({"dtype": [("a", "<u2"), ("b", ">f8")]}, "not in this machine's byte order"),
])
def test_bad_queues_are_refused_before_any_device_work(kw, fragment):
    args = {"capacity": 8, "dtype": np.int32} | kw
    with pytest.raises(DispatchError, match="Fix:") as e:
        WorkQueue(args["capacity"], args["dtype"])
    assert fragment in str(e.value)


NOT_A_TYPE = r"is not a NumPy type \(.+\)\. Fix: pass e\.g\. np\.int32\.$"
NOT_QUEUED = (r"cannot be queued\. Fix: pass a number type of at most 64 bits \(e\.g\. np\.int32\) or a record dtype "
              r"whose fields are such numbers\.$")
BF16 = r"a queue holds NumPy numbers and NumPy has no bfloat16.*Fix: make a 'u16' queue .*f32_to_bf16_bits"


@pytest.mark.parametrize("dtype,why", [((np.int32, -1), NOT_A_TYPE), (None, NOT_QUEUED), ([("a", object)], NOT_QUEUED),
                                       ("foo", r"unknown data type 'foo'\. Fix: use one of uint8, int8, u16, "), (np.dtype([]), NOT_QUEUED),
                                       ([("a", "S2")], NOT_QUEUED), (np.longdouble, NOT_QUEUED),
                                       (np.complex64, NOT_QUEUED), ("bool", NOT_QUEUED), (vn.DataType.BOOL, NOT_QUEUED),
                                       # the model refuses what the queue refuses (it took a big-endian dtype object)
                                       (np.dtype(">i4"), "is not in this machine's byte order"),
                                       # a record's isnative misses a big-endian subarray field (a red-team)
                                       (np.dtype([("a", ">i4", (2,))]), r"is not in this machine's byte order: .*Fix: "
                                        r"pass \[\('a', '<i4', \(2,\)\)\] \(and push records converted to it"),
                                       (np.dtype([("a", [("b", ">f8")], (2,))]), "is not in this machine's byte order"),
                                       # names as wherever a type is taken: 'u8' is 8 bits to vyre, 8 bytes to NumPy
                                       ("u8", r"'u8' is vyre's 8-bit integer but NumPy's 8-byte one\. Fix: say which"),
                                       ("int", r"unknown data type 'int'\. Fix: .*say which: 'i32' or 'i64'"),
                                       # NumPy's own codes of what is not a number: not read as vyre names
                                       ("U1", NOT_QUEUED), ("S8", NOT_QUEUED), ("M8[ns]", NOT_QUEUED), ("c8", NOT_QUEUED),
                                       # a bf16 queue held raw bits that push refused as floats (a red-team)
                                       ("bf16", BF16), (vn.DataType.BF16, BF16), ("bfloat16", BF16),
                                       ])
def test_queues_of_types_that_cannot_be_queued_are_refused(dtype, why):
    for make in (lambda: WorkQueue(8, dtype), lambda: QueueModel(8, dtype)):
        with pytest.raises(DispatchError, match="^" + re.escape(f"dtype={dtype!r}") + ":? " + why):
            make()


def test_queue_types_are_named_as_wherever_a_type_is_taken():
    """Regression (an API review): QueueModel(4, "u8") made a uint64 queue (NumPy's 'u8'), while
    empty(n, "u8") refuses the clash; "u32" and DataType.U32 were refused."""
    for given, want in (("u32", np.uint32), (vn.DataType.U32, np.uint32), ("i4", np.int32), ("uint64", np.uint64),
                        ("f16", np.float16), (np.int8, np.int8), ("i4,f8", np.dtype("i4,f8"))):
        assert QueueModel(3, given).items.dtype == want


@pytest.mark.parametrize("dtype", [[("flag", "?"), ("v", "i4")], [("a", [("x", "i4")]), ("b", "f8")],
                                   [("a", "i4", (3,))], np.float16])
def test_records_of_bools_nested_records_and_subarrays_can_be_queued(dtype):
    q = QueueModel(2, dtype)
    assert q.items.dtype == np.dtype(dtype)


@pytest.mark.parametrize("values", [[(1, 2.0)], (1, 2.0), [[1, 2.0]], np.array([[1, 2.0]])])
def test_records_are_pushed_as_record_arrays_and_the_fix_says_how(values):
    """Regression (a red-team): a list of tuples was told to reshape(-1), which then failed on its dtype."""
    q = QueueModel(4, [("a", "i4"), ("b", "f8")])
    with pytest.raises(DispatchError, match=r"records.*Fix: make them records: np\.array\(\[\(1, 2\.0\), \.\.\.\], "
                                            r"dtype=q\.dtype\)"):
        q.push(values)
    assert q.push(np.array([(1, 2.0)], q.items.dtype)) and q.drain().tolist() == [(1, 2.0)]


def test_a_queue_without_a_gpu_says_to_use_the_model(monkeypatch):
    from numba import cuda

    from vyre_numba.errors import BackendUnavailableError

    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(BackendUnavailableError, match="QueueModel"):
        WorkQueue(4, np.int32)


@pytest.mark.parametrize("dtype,value", [
    (np.uint32, -1), (np.int32, 2**40), (np.int32, 1.7), (np.int32, True), (np.int32, "x"), (np.int32, None),
    (np.float32, 1e300), (np.float32, 2**25 + 1), (np.int32, [1, 2]), (np.int32, np.nan), (np.float64, 2**64 - 1),
    (np.uint64, 2**64), (np.int8, np.int64(128)), (np.uint8, np.int16(-1)), (np.int32, np.zeros((2, 2))),
])
def test_the_model_refuses_values_it_would_change_and_stays_as_it_was(dtype, value):
    q = QueueModel(4, dtype)
    assert q.push(3)
    with pytest.raises(DispatchError, match="Fix:"):
        q.push(value)
    assert (q.size(), q.overflowed()) == (1, 0) and q.drain().tolist() == [3]


@pytest.mark.parametrize("dtype,values", [(np.float64, [2**53 + 1, 0.5]), (np.float32, [16777217, 0.5]),
                                          (np.float32, (0.25, 2**25 + 1))])
def test_an_int_beside_floats_in_a_list_is_refused_where_it_would_round(dtype, values):
    """Regression (a red-team): alone such an int was refused, beside a float NumPy read the list as
    float64 first and it rounded without a word (upload and write refuse it)."""
    from vyre_numba.workqueue import _values  # what WorkQueue.push and QueueModel.push convert with

    with pytest.raises(DispatchError, match=r"is not exactly representable as float.*Fix:"):
        _values(values, np.dtype(dtype))
    assert _values([3, 0.5], np.dtype(dtype)).tolist() == [3.0, 0.5]


@pytest.mark.parametrize("dtype,value,fix", [
    (np.float64, 2**53 + 1, "Fix: make the queue of int64 (it holds 9007199254740993), or push values in range."),
    (np.float32, 2**25 + 1, "Fix: make the queue of float64 (it holds 33554433)"),
    (np.float16, np.float64(1e10), "Fix: make the queue of float32 (it holds 10000000000.0), or convert the values"),
    (np.int16, 40000, "Fix: make the queue of uint16 (it holds 40000)"),
    (np.uint64, -1, "Fix: make the queue of int64 (it holds -1)"),
    (np.int32, np.array([2**40]), "Fix: make the queue of int64 (it holds 1099511627776)"),
    (np.uint64, 2**64 + 1, "Fix: push values in range: no queue type holds 18446744073709551617."),
    (np.uint8, [-1, 300], "Fix: make the queue of int16 (it holds -1 and the rest)"),  # int8 would not hold 300
    (np.uint64, [2**64, 2**53 + 1], "no queue type holds 18446744073709551616 and the rest."),  # float64, int64: one each
    (np.float32, np.array([2**53 + 1, 3], np.int64), "Fix: make the queue of int64 (it holds 9007199254740993 and"),
    (np.int64, -2**63 - 1, "Fix: push values in range: no queue type holds -9223372036854775809."),
])
def test_a_value_the_queue_cannot_take_is_told_the_type_that_takes_it_or_that_none_does(dtype, value, fix):
    """Regression (a red-team): "make the queue of a wider type" was the Fix for a 64-bit queue,
    which has none wider; and (a review) the type named must take every value pushed, not only the
    one shown."""
    from vyre_numba.workqueue import _values  # what WorkQueue.push and QueueModel.push convert with

    with pytest.raises(DispatchError) as e:
        _values(value, np.dtype(dtype))
    assert fix in str(e.value)


def test_a_value_past_the_queue_type_is_shown_shortened_in_the_refusal():
    for dtype in (np.float32, np.int64):
        with pytest.raises(DispatchError, match=r"the value 1071508607186267.*\.\.\..*Fix:") as e:
            QueueModel(2, dtype).push(2**1000)
        assert len(str(e.value)) < 300


def test_the_model_takes_values_that_convert_exactly():
    q = QueueModel(4, np.float32)
    assert q.push(0.1) and q.push(np.int64(2**24)) and q.push(np.uint8(7))
    assert q.drain().tolist() == [np.float32(0.1), 2.0**24, 7.0]
    q = QueueModel(2, np.uint8)
    assert q.push(np.int64(255)) and q.push(0)
    assert q.drain().tolist() == [255, 0]


def test_the_model_takes_ints_at_the_edges_of_its_type_exactly():
    """The one-int path (no array checks) stores every int in range, as the general one does."""
    for dtype in (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64):
        info = np.iinfo(dtype)
        q = QueueModel(6, dtype)
        for v in (int(info.min), int(info.max), np.int64(0) if info.min < 0 else np.uint64(1), dtype(7),
                  np.uint8(100), 5):
            assert q.push(v)
        got = q.drain()
        assert got.dtype == dtype and got.tolist() == [info.min, info.max, 0 if info.min < 0 else 1, 7, 100, 5]


def test_many_values_given_to_the_model_say_to_push_them_one_at_a_time():
    """Regression (a red-team): a 2-D array's Fix said values.reshape(-1), which push refused next."""
    q = QueueModel(8, np.float32)
    with pytest.raises(DispatchError, match=r"push takes one value; got 4 \(shape \(2, 2\)\)\. Fix: push them one at a time"):
        q.push(np.zeros((2, 2)))
    with pytest.raises(DispatchError, match="push takes one value; got 3"):
        q.push([1, 2, 3])
    for v in np.asarray(np.ones((2, 2))).reshape(-1):  # what the Fix says
        assert q.push(v)
    assert q.size() == 4


class Labelled(QueueModel):  # a subclass: it and its own attributes survive every kind of copy
    pass


def test_copies_and_pickles_of_the_model_are_independent_queues():
    """A copy shares nothing with the original (a shared items array would let the copy's pushes
    overwrite the original's items); a pickle round trip keeps the items and the overflow count."""
    import copy
    import pickle

    q = QueueModel(2, np.int32)
    q.push(1)
    for c in (copy.copy(q), copy.deepcopy(q), pickle.loads(pickle.dumps(q))):
        assert c.drain().tolist() == [1]
        c.push(99)
        assert c.push(7) and not c.push(8) and c.overflowed() == 1
    q.push(2)
    assert not q.push(3)
    back = pickle.loads(pickle.dumps(q))
    assert back.overflowed() == 1 and back.drain().tolist() == [1, 2] and q.drain().tolist() == [1, 2]

    s = Labelled(2, np.int32)
    s.label, s.log = "frontier", [1]
    s.push(5)
    for c in (copy.copy(s), copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert type(c) is Labelled and c.label == "frontier" and c.log == [1] and c.drain().tolist() == [5]
    assert copy.deepcopy(s).log is not s.log and s.size() == 1


def test_the_model_loses_no_push_from_several_threads():
    q = QueueModel(8 * 500, np.int32)

    def worker(t):
        for j in range(500):
            assert q.push(t * 1000 + j)

    _threads(worker, 8)
    want = [t * 1000 + j for t in range(8) for j in range(500)]
    assert (q.overflowed(), sorted(q.drain().tolist())) == (0, want)


def _threads(worker, k: int) -> None:
    """Run worker(t) for t < k on k threads at once, switching often (as on a busy host)."""
    import threading

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)


def test_a_model_too_large_for_host_memory_is_a_vyre_error_with_a_fix(monkeypatch):
    from vyre_numba.errors import HostMemoryError

    def no_room(*args, **kwargs):
        raise MemoryError("Unable to allocate 512. GiB")

    monkeypatch.setattr(np, "zeros", no_room)
    with pytest.raises(HostMemoryError, match="QueueModel ran out of host memory.*Fix: make a smaller queue"):
        QueueModel(2**36, np.int64)


THREADED = """
import sys, threading
import numpy as np
from vyre_numba.errors import DispatchError
from vyre_numba.workqueue import WorkQueue
from test_workqueue import _threads

q = WorkQueue(8 * 60, np.int32)
def worker(t):
    for j in range(60):
        q.push([t * 1000 + j])
_threads(worker, 8)
got = q.drain().copy_to_host()
assert q.overflowed() == 0 and sorted(got.tolist()) == [t * 1000 + j for t in range(8) for j in range(60)], got
print("pushes ok")

def worker(t):  # pushes and drains at once: every item comes out of one drain, exactly once
    for j in range(60):
        q.push([t * 1000 + j])
        if j % 7 == 0:
            out.append(q.drain().copy_to_host())
out = []
_threads(worker, 8)
out.append(q.drain().copy_to_host())
assert sorted(np.concatenate(out).tolist()) == [t * 1000 + j for t in range(8) for j in range(60)]
print("drains ok")

q.push([1, 2, 3, 4, 5])
pieces = []
for c in q.chunks(2):
    pieces.append(c.copy_to_host().tolist())
    if len(pieces) == 1:
        q.push([6, 7])  # pushed while the chunks are handed out: stays queued
assert pieces == [[1, 2], [3, 4], [5]] and q.drain().copy_to_host().tolist() == [6, 7], pieces
q.push([1, 2])
assert [c.copy_to_host().tolist() for c in q.chunks(2**40)] == [[1, 2]] and q.size() == 0
q.push([1, 2, 3, 4, 5])
it = q.chunks(2)
assert next(it).copy_to_host().tolist() == [1, 2]
assert q.drain().copy_to_host().tolist() == [1, 2, 3, 4, 5]  # drained mid-iteration: the rest went with it
q.push([9])


def refused(it, fragment, what):
    try:
        next(it)
    except DispatchError as e:
        assert fragment in str(e) and "Fix:" in str(e), e
    else:
        raise AssertionError(what)


refused(it, "drained or reset while chunks handed out its items", "chunks went on after a drain")
assert q.drain().copy_to_host().tolist() == [9]  # pushed after the drain: kept, not dropped by the old iteration
q.push([1, 2])
it = q.chunks(10)  # one piece: a drain after it hands out the same items, said at the iteration's end
assert next(it).copy_to_host().tolist() == [1, 2] and q.drain().copy_to_host().tolist() == [1, 2]
q.push([3])
refused(it, "drained or reset while chunks handed out its items", "a drain after the last piece went unsaid")
assert q.drain().copy_to_host().tolist() == [3]
q.push([1, 2, 3, 4])
a, b = q.chunks(2), q.chunks(2)  # a second iteration while the first hands out items: refused, not a duplicate
assert next(a).copy_to_host().tolist() == [1, 2]
refused(b, "another chunks iteration is handing out this queue's items", "two chunks iterations at once")
assert [c.copy_to_host().tolist() for c in a] == [[3, 4]] and q.size() == 0
q.push([5])
assert [c.copy_to_host().tolist() for c in q.chunks(2)] == [[5]]  # the first ended: the next may start

import time
from numba import cuda
from queue_exercise import add_to
total = cuda.to_device(np.zeros(1, np.int64))
q.push([5, 6])
ran = []
q._lock.acquire()  # as a host push holds it between reading the state and writing it back
th = threading.Thread(target=lambda: (q.consume(add_to, (total,)), ran.append(1)))
th.start()
time.sleep(0.5)
assert not ran, "consume launched while another call held the queue"
q._lock.release()
th.join()
assert ran and total.copy_to_host().tolist() == [11]
print("consume ok")
try:
    q.chunks(0)
except DispatchError as e:
    assert str(e).startswith("chunk=0 is not a positive number of items") and "capacity" not in str(e), e
    print("chunks ok")
"""


def test_host_calls_from_several_threads_lose_nothing_under_the_cuda_simulator():
    """push reads the tail and writes after it; without the queue's lock two threads wrote the
    same slots. chunks hands out the items there when it starts and keeps those pushed after."""
    from simulated import run_script

    out = run_script(THREADED, 600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["pushes", "ok", "drains", "ok", "consume", "ok", "chunks", "ok"], out.stdout



INTERRUPTED_DRAINS = """
import signal, sys
import numpy as np
from vyre_numba import signals
from vyre_numba.workqueue import QueueModel, WorkQueue

EXIT = signals.uninterrupted.__exit__.__code__
for Queue in (QueueModel, WorkQueue):
    codes = {Queue.drain.__code__, signals.uninterrupted.__enter__.__code__, EXIT}
    k, lost, lines = 0, [], None
    while lines is None or k < lines:
        k += 1
        q = Queue(8, np.int32)
        if Queue is WorkQueue:
            q.push(np.array([10, 11, 12], np.int32))
        else:  # the device's push: one value
            for v in (10, 11, 12):
                q.push(v)
        seen, got, where = [0], None, [None]

        def tracer(frame, event, arg):
            if frame.f_code not in codes and frame.f_code.co_name != "undo":
                return None

            def line(frame, event, arg):
                if event == "line":
                    seen[0] += 1
                    if seen[0] == k:
                        where[0] = (frame.f_code, frame.f_lineno)
                        signal.raise_signal(signal.SIGINT)
                return line
            return line
        sys.settrace(tracer)
        try:
            got = q.drain()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        lines = seen[0] if where[0] is None else lines
        items = got.tolist() if isinstance(got, np.ndarray) else None if got is None else got.copy_to_host().tolist()
        if items is None and q.size() != 3 or items is not None and (items != [10, 11, 12] or q.size()):
            lost.append(where[0])
    # the one window left: the interrupt that comes as the block's end returns, once it has looked
    # (Python's own: any function's return value is lost to a KeyboardInterrupt at its return)
    assert k > 15 and all(code is EXIT for code, _ in lost) and len(lost) <= 1, (Queue.__name__, k, lost)
    print(Queue.__name__, "ok", k)
"""


def test_a_ctrl_c_at_any_line_of_a_drain_keeps_the_items_or_returns_them_under_the_cuda_simulator():
    """Regression (a red-team): a Ctrl-C held while drain emptied the queue was delivered as the block
    ended, before drain returned: the items were neither returned nor queued. A SIGINT is raised at
    every line of QueueModel.drain and WorkQueue.drain (and of the block that holds it)."""
    from simulated import run_script

    out = run_script(INTERRUPTED_DRAINS, 600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [w for w in out.stdout.split() if not w.isdigit()] == ["QueueModel", "ok", "WorkQueue", "ok"], out.stdout


def test_queue_scenarios_under_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, str(HERE / "queue_exercise.py")], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "queue ok" in out.stdout, out.stdout + out.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("n,capacity", [(0, 4), (1, 1), (4096, 1000), (100_000, 100_000), (1_000_003, 65_536)])
def test_gpu_backpressure_loses_nothing(n, capacity):
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_backpressure_loses_nothing(n, capacity)


@pytest.mark.gpu
def test_gpu_misuse_is_refused_and_changes_nothing():
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_misuse_is_refused_and_changes_nothing()


@pytest.mark.gpu
def test_gpu_queue_arrays_name_their_stream_to_other_libraries_without_a_warning():
    """Through __cuda_array_interface__: no stream for a queue on the default stream (numba-cuda's
    int() of the default stream object warns and gives 0, which the interface disallows), the
    queue's own stream otherwise."""
    import warnings

    from numba import cuda

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with WorkQueue(8, np.int32) as q:
            q.push(np.arange(3, dtype=np.int32))
            assert q.items.__cuda_array_interface__["stream"] is None
            out = q.drain()
            assert out.__cuda_array_interface__["stream"] is None and out.copy_to_host().tolist() == [0, 1, 2]
        s = cuda.stream()
        with WorkQueue(8, np.int32, stream=s) as q:
            q.push(np.arange(2, dtype=np.int32))
            out = q.drain()
            assert out.__cuda_array_interface__["stream"] == int(s)
            s.synchronize()
            assert out.copy_to_host().tolist() == [0, 1]


@pytest.mark.gpu
def test_gpu_consumers_records_and_streams():
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_consumers_are_kept_by_code_and_bounded()
    queue_exercise.assert_records_and_streams_queue()


@pytest.mark.gpu
def test_gpu_host_pushes_keep_the_device_counters():
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_host_pushes_keep_the_device_counters()


@pytest.mark.gpu
def test_gpu_a_claim_moves_the_head_by_what_it_got():
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_a_claim_moves_the_head_by_what_it_got()


@pytest.mark.gpu
def test_gpu_an_overflowed_queue_counts_only_its_capacity():
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_an_overflowed_queue_counts_only_its_capacity()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 100_000])
def test_gpu_consume_and_host_strategies(n):
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_consume_reads_the_count_on_the_device(n)
    queue_exercise.assert_host_push_drain_and_chunks(n)


def spread(i, items, state, seen):
    """A fixpoint step that pushes each item once onto a work queue."""
    if seen[i] == 0:
        if push(items, state, np.int64(i)):
            seen[i] = 1
            return 1
    return 0


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["cooperative", "graph", "relaunch"])
def test_gpu_fixpoint_steps_push_with_backpressure(mode):
    """A queue too small for one round: the step's failed pushes leave `seen` unset, the round
    reports a change, and the host drains between runs until every item is through."""
    from numba import cuda

    from vyre_numba import fixpoint

    n = 50_000
    seen = cuda.to_device(np.zeros(n, np.uint8))
    got = []
    with WorkQueue(20_000, np.int64) as q:
        for _ in range(10):
            r = fixpoint.run(spread, n, [q.items, q.state, seen], mode=mode, max_rounds=1)
            got.append(q.drain().copy_to_host())
            if not r.converged and sum(g.size for g in got) == n:
                break
    assert np.array_equal(np.sort(np.concatenate(got)), np.arange(n))


RAISING_STEP = """
import numpy as np
from numba import cuda
from vyre_numba.errors import DispatchError
from vyre_numba.workqueue import WorkQueue

def past_the_end(v, args):
    args[0][v + 100] = 1

out = cuda.to_device(np.zeros(4, np.int64))
with WorkQueue(8, np.int64) as q:
    q.push([1, 2])
    try:
        q.consume(past_the_end, (out,))
    except DispatchError as e:
        assert str(e).startswith("the step raised IndexError while it ran") and "Fix:" in str(e), e
        assert "does not compile" not in str(e), e
    else:
        raise AssertionError("no error")
    assert q.size() == 2

    def yielding(v, args):
        args[0][v] = 7
        yield v
    try:
        q.consume(yielding, (out,))
    except DispatchError as e:
        assert "async or generator function" in str(e) and "Fix:" in str(e), e
    else:
        raise AssertionError("a generator step ran nothing and said nothing")
    assert q.size() == 2 and not out.copy_to_host().any()
print("raising ok")
"""


def test_a_step_that_raises_as_it_runs_is_not_said_not_to_compile_under_the_cuda_simulator():
    """Regression (red-teams): an IndexError raised by a step the simulator ran was reported as
    'the step does not compile with Numba', and a generator step was accepted and ran nothing."""
    from simulated import run_script

    out = run_script(RAISING_STEP, 300)
    assert out.returncode == 0 and out.stdout.split() == ["raising", "ok"], out.stdout + out.stderr


def test_an_empty_push_into_a_record_queue_stores_nothing():
    """Regression (a red-team): push([]) into a record queue was refused as float64 values."""
    from vyre_numba.workqueue import _values

    assert _values([], np.dtype("i4,f8")).dtype == np.dtype("i4,f8") and _values((), np.dtype("i4,f8")).size == 0


def test_the_model_has_the_queues_capacity_dtype_and_reset():
    """Regression (an API review): the twin had no capacity, dtype or reset, so code written for a
    WorkQueue could not run on the model in a notebook without a GPU."""
    q = QueueModel(3, "u32")
    assert (q.capacity, q.dtype, q.size()) == (3, np.uint32, 0)
    assert [q.push(v) for v in (1, 2, 3, 4)] == [True, True, True, False] and (q.size(), q.overflowed()) == (3, 1)
    q.reset()
    assert (q.size(), q.overflowed(), q.drain().tolist()) == (0, 0, []) and q.push(9) and q.drain().tolist() == [9]


CHUNKS_INTERRUPTED = """
import numpy as np
from interrupts import interrupted
from vyre_numba.workqueue import WorkQueue

def ending():
    q = WorkQueue(64, np.int64)
    q.push(np.arange(10))
    it = q.chunks(4)
    assert [next(it).copy_to_host().tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    q.push(np.arange(100, 105))  # pushed while the iteration hands out the first ten: kept
    return q, it

seen = {"dropped": 0, "not dropped": 0}
k = 0
while True:
    k += 1
    q, it = ending()
    stop = interrupted(k, lambda: next(it, None), by_signal=True)
    left = q.drain().copy_to_host().tolist()
    if stop is None:  # k is past the iteration's end: it finished, and dropped what it handed out
        assert left == list(range(100, 105)), left
        break
    if left == list(range(100, 105)):
        seen["dropped"] += 1
    else:
        assert left == list(range(10)) + list(range(100, 105)), (k, left)  # nothing half moved
        seen["not dropped"] += 1
    q.push([7])  # the lock was let go
    assert q.drain().copy_to_host().tolist() == [7]
assert seen["dropped"] and seen["not dropped"], seen
print("points", k - 1, "ok")
"""


def test_a_ctrl_c_as_chunks_ends_drops_the_items_handed_out_or_none_under_the_cuda_simulator():
    """Regression (a red-team): a SIGINT between moving the items left after those handed out to
    the front and writing the new tail left the moved items queued twice. A real SIGINT is sent at
    every point of the iteration's end; the queue holds what it held before the end or after it."""
    from simulated import run_script

    out = run_script(CHUNKS_INTERRUPTED, 600)
    assert out.returncode == 0 and out.stdout.startswith("points "), out.stdout + out.stderr
    assert int(out.stdout.split()[1]) > 20, out.stdout  # the end's events were reached, not skipped


def test_a_ctrl_c_in_the_models_push_or_chunks_end_leaves_it_as_before_or_after():
    """Regression (a red-team): the NumPy twin moved its tail before storing a pushed item (a
    SIGINT between them queued the slot's stale item) and, as `chunks` ended, moved the items left
    to the front before writing the new tail (a SIGINT between them queued them twice). A real
    SIGINT is sent at every point of each."""
    from interrupts import interrupted

    def points(make, call, before, after):
        k = 0
        while True:
            k += 1
            q, it = make()
            stop = interrupted(k, lambda: call(q, it), by_signal=True)
            left = q.drain().tolist()
            if stop is None:
                assert left == after, left
                return k - 1
            assert left in (before, after), (k, left)

    def stale():
        q = QueueModel(4, np.int64)
        q.push(5)
        q.drain()  # slot 0 keeps the 5
        return q, None

    assert points(stale, lambda q, _: q.push(np.int64(7)), [], [7]) > 5

    def ending():
        q = QueueModel(64, np.int64)
        assert all(q.push(v) for v in range(10))
        it = q.chunks(4)
        assert [next(it).tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert all(q.push(v) for v in range(100, 105))
        return q, it

    assert points(ending, lambda q, it: next(it, None), list(range(10)) + list(range(100, 105)),
                  list(range(100, 105))) > 5

    # a drain or reset interrupted between emptying the queue and telling an iteration in flight
    # so: the iteration's end dropped the items pushed after it, without a word (a review)
    for empty in (QueueModel.drain, QueueModel.reset):
        k, outcomes = 0, set()
        while True:
            k += 1
            q = QueueModel(64, np.int64)
            assert all(q.push(v) for v in range(10))
            it = q.chunks(4)
            next(it)
            stop = interrupted(k, lambda: empty(q), by_signal=True)
            assert all(q.push(v) for v in range(100, 105))
            try:
                list(it)
                outcomes.add("not emptied")  # the iteration went on, and dropped what it handed out
            except DispatchError:
                outcomes.add("emptied")  # told, as an iteration whose queue was emptied is
            assert q.drain().tolist() == list(range(100, 105)), (empty, k)
            if stop is None:
                break
        assert outcomes == {"emptied", "not emptied"}, outcomes


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_the_device_helpers_compile_to_ptx_without_a_gpu(cc):
    """CI has no GPU: push, size and take compile for the device; take claims by compare-and-swap."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator compiles no PTX (this test runs in the non-simulated CI pass)")
    from numba import cuda, types

    from vyre_numba.workqueue import device as qd

    state = types.uint64[:]
    found = set()
    for fn, sig in ((qd.push, (types.int32[:], state, types.int32)), (qd.size, (state, types.int64)),
                    (qd.take, (state, types.int64, types.int64))):
        ptx, _ = cuda.compile_ptx(fn.py_func, sig, device=True, cc=cc)
        found |= set(re.findall(r"atom\.[a-z]+", ptx))
    assert found == {"atom.add", "atom.cas"}


def test_an_unknown_type_name_is_told_only_names_the_call_takes():
    """Regression (a red-team): the list named 'u8' and 'i8', which empty() and queues refuse as
    ambiguous, and bf16 and bool, which a queue refuses."""
    import re as re_

    from vyre_numba.reference import ReferenceBackend

    for call, unwanted in ((lambda: QueueModel(4, "float128"), {"u8", "i8", "bf16", "bool"}),
                           (lambda: ReferenceBackend().empty(4, "float128"), {"u8", "i8"})):
        with pytest.raises(DispatchError) as e:
            call()
        listed = set(re_.search(r"Fix: use one of (.*), or a NumPy dtype", str(e.value)).group(1).split(", "))
        assert not listed & unwanted and {"uint8", "int8", "f32"} <= listed
        for name in listed:  # each works where it is offered
            QueueModel(2, name) if unwanted == {"u8", "i8", "bf16", "bool"} else ReferenceBackend().empty(2, name)


def test_a_record_nested_past_numpys_depth_is_refused_and_a_models_slots_and_tail_are_read_only():
    from vyre_numba.errors import ImmutableError

    dt = np.dtype("i4")
    for _ in range(500):
        dt = np.dtype([("a", dt)])
    with pytest.raises(DispatchError, match="nests more than 64 levels deep.*Fix: flatten the record"):
        QueueModel(2, dt)
    q = QueueModel(4, np.int32)
    q.push(7)
    for name in ("items", "tail"):
        with pytest.raises(ImmutableError, match=f"QueueModel.{name} is read-only.*Fix:"):
            setattr(q, name, 0)
    assert q.drain().tolist() == [7] and q.tail == 0


def test_the_model_closes_and_drains_in_chunks_as_the_queue_does():
    """Regression (a red-team): QueueModel had no close(), no `with` and no chunks, so code written
    for a WorkQueue failed on the model with raw AttributeErrors. Its public calls are now the
    queue's, less the device's own (consume, state, stream)."""
    from vyre_numba.errors import DispatchError
    from vyre_numba.workqueue import WorkQueue

    def public(cls):
        return {k for k in dir(cls) if not k.startswith("_") or k in ("__enter__", "__exit__")}
    assert public(WorkQueue) - public(QueueModel) == {"consume", "state", "stream"}
    with QueueModel(5, np.int32) as q:
        for i in range(7):
            q.push(i)
        assert [c.tolist() for c in q.chunks(2)] == [[0, 1], [2, 3], [4]] and (q.size(), q.overflowed()) == (0, 0)
        for i in range(3):
            q.push(10 + i)
        pieces = q.chunks(2)
        assert next(pieces).tolist() == [10, 11]
        q.push(99)  # pushed meanwhile: stays queued
        assert [c.tolist() for c in pieces] == [[12]] and q.drain().tolist() == [99]
        q.push(1)
        pieces = q.chunks(1)
        next(pieces)
        with pytest.raises(DispatchError, match="another chunks iteration"):
            next(q.chunks(1))
        q.drain()
        with pytest.raises(DispatchError, match="drained or reset while chunks"):
            next(pieces)
    assert "closed" in repr(q)
    for use in (lambda: q.push(1), q.drain, q.size, q.reset, lambda: q.items, lambda: q.chunks(2)):
        with pytest.raises(DispatchError, match="this QueueModel was closed. Fix: make a new one"):
            use()
    q.close()  # a second close does nothing


PUSH_BLOCK = """
import numpy as np
from numba import cuda
from vyre_numba.workqueue.device import TAIL, push_block

@cuda.jit
def pushes(items, state, n, every, ok):
    v = cuda.grid(1)
    stride = cuda.gridsize(1)
    while v - cuda.threadIdx.x < n:  # whole blocks call it together
        want = v < n and v % every == 0
        done = push_block(items, state, v, want)
        if v < n:
            ok[v] = 1 if done else 0
        v += stride

for n, every, capacity, blocks, threads in CASES:
    items = cuda.to_device(np.full(max(capacity, 1), -1, np.int64))[:capacity]
    state = cuda.to_device(np.zeros(2, np.uint64))
    ok = cuda.to_device(np.full(max(n, 1), 7, np.uint8))
    pushes[blocks, threads](items, state, n, every, ok)
    wanted = np.arange(0, n, every)
    tail = int(state.copy_to_host()[TAIL])
    got = items.copy_to_host()[:min(tail, capacity)]
    flags = ok.copy_to_host()[:n]
    assert tail == wanted.size, (n, every, capacity, tail)
    assert np.unique(got).size == got.size and set(got.tolist()) <= set(wanted.tolist())
    assert set(got.tolist()) == set(np.flatnonzero(flags == 1).tolist()) & set(wanted.tolist())
    assert int((flags == 0).sum()) == max(0, wanted.size - capacity) and set(np.flatnonzero(flags == 0)) <= set(wanted)
    assert (flags[np.setdiff1d(np.arange(n), wanted)] == 1).all()  # no push wanted: True
    calls = got // threads  # the block call that pushed each item: one atomic a call, slots in thread order
    ends = np.flatnonzero(np.diff(calls)) + 1
    assert np.unique(calls).size == ends.size + (got.size > 0), (n, every, "a block call's items not in one run")
    assert all((np.diff(run) > 0).all() for run in np.split(got, ends)), (n, every, "not in thread order")
print("push_block ok", len(CASES))
"""


def test_push_block_under_the_cuda_simulator():
    from simulated import run_script

    cases = [(0, 1, 4, 1, 32), (1, 1, 1, 1, 32), (100, 3, 100, 2, 64), (1000, 1, 300, 3, 64), (999, 7, 5, 1, 96)]
    out = run_script(f"CASES = {cases!r}\n" + PUSH_BLOCK, 600)
    assert out.returncode == 0 and f"push_block ok {len(cases)}" in out.stdout, out.stdout + out.stderr


@pytest.mark.gpu
def test_gpu_push_block_loses_nothing_and_overflows_as_push_does(capsys):
    cases = [(0, 1, 4, 1, 32), (1, 1, 1, 1, 32), (1000, 3, 1000, 2, 256), (100_000, 1, 30_000, 40, 256),
             (1_000_003, 2, 500_002, 264, 1024), (1_000_003, 5, 10**6, 264, 96), (65_537, 1, 65_537, 1, 32)]
    exec(f"CASES = {cases!r}\n" + PUSH_BLOCK, {})
    assert f"push_block ok {len(cases)}" in capsys.readouterr().out
