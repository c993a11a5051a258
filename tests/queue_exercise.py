"""Work-queue scenarios run both under the CUDA simulator (CI) and on the GPU: one function per
scenario, each asserting against QueueModel or NumPy."""
from __future__ import annotations

import numpy as np
from numba import cuda

from vyre_numba.errors import CapacityError, DispatchError
from vyre_numba.workqueue import QueueModel, WorkQueue
from vyre_numba.workqueue import device as qd


@cuda.jit
def produce(values, done, items, state):
    """Push every value not pushed yet; mark the ones the queue took."""
    i = cuda.grid(1)
    if i < values.size and not done[i]:
        if qd.push(items, state, values[i]):
            done[i] = 1


def add_to(value, args):
    cuda.atomic.add(args[0], 0, value)


def add_and_count(value, args):
    """args[0][0] += value, args[0][1] += 1: the sum and the number of the items consumed."""
    cuda.atomic.add(args[0], 0, value)
    cuda.atomic.add(args[0], 1, 1)


def assert_backpressure_loses_nothing(n: int, capacity: int) -> None:
    values = (np.arange(n, dtype=np.int64) * 7 + 3)
    done = cuda.to_device(np.zeros(n, np.uint8))
    dv = cuda.to_device(values)
    drained, rounds = [], 0
    with WorkQueue(capacity, np.int64) as q:
        while True:
            produce[max(1, (n + 63) // 64), 64](dv, done, q.items, q.state)
            refused = q.overflowed()
            batch = q.drain().copy_to_host()
            assert batch.size == min(capacity, n - sum(b.size for b in drained))
            drained.append(batch)
            rounds += 1
            if refused == 0:
                break
    got = np.concatenate(drained)
    assert np.array_equal(np.sort(got), values), "an item was lost or duplicated"
    # each round but the last fills the queue; the last may find it exactly filled and need one more
    assert -(-n // capacity) <= rounds <= -(-n // capacity) + 1


def assert_consume_reads_the_count_on_the_device(n: int) -> None:
    values = np.arange(1, n + 1, dtype=np.int64)
    total = cuda.to_device(np.zeros(1, np.int64))
    with WorkQueue(max(n, 1) + 5, np.int64) as q:
        q.push(values)
        q.consume(add_to, (total,))
        assert int(total.copy_to_host()[0]) == int(values.sum())
        assert q.size() == n  # consuming does not take the items
        q.consume(add_to, [total])  # a list, as fixpoint.run takes its args, reaches the step as a tuple
        assert int(total.copy_to_host()[0]) == 2 * int(values.sum())


def assert_host_push_drain_and_chunks(n: int) -> None:
    model = QueueModel(n + 3, np.float32)
    values = np.linspace(0, 1, n, dtype=np.float32)
    for v in values:
        assert model.push(v)
    with WorkQueue(n + 3, np.float32) as q:
        q.push(values)
        pieces = [c.copy_to_host() for c in q.chunks(4)]
        assert np.array_equal(np.concatenate(pieces) if pieces else np.zeros(0, np.float32), model.drain())
        assert q.size() == 0
        q.push(values[: n // 2])
        if n // 2 + n > n + 3:
            try:
                q.push(values)
            except CapacityError as e:
                assert e.needed == n // 2 + n and "Fix:" in str(e)
            else:
                raise AssertionError("an oversized push was accepted")
        assert np.array_equal(q.drain().copy_to_host(), values[: n // 2])


@cuda.jit
def take_some(state, capacity, want, out):
    """One claim of `want` items by one thread: out = (first index, how many)."""
    if cuda.grid(1) == 0:
        first, count = qd.take(state, capacity, want)
        out[0], out[1] = first, count


def assert_host_pushes_keep_the_device_counters() -> None:
    """A host push moves only the tail: refused device pushes stay counted (an empty push changes
    nothing) and items the device already claimed are not handed out again."""
    values = cuda.to_device(np.arange(8, dtype=np.int64))
    with WorkQueue(4, np.int64) as q:
        produce[1, 64](values, cuda.to_device(np.zeros(8, np.uint8)), q.items, q.state)
        assert q.overflowed() == 4
        q.push([])
        assert (q.size(), q.overflowed()) == (4, 4)
    claim = cuda.to_device(np.zeros(2, np.int64))
    with WorkQueue(8, np.int64) as q:
        q.push([10, 11, 12])
        take_some[1, 32](q.state, 8, 2, claim)
        assert claim.copy_to_host().tolist() == [0, 2]
        q.push([13])
        take_some[1, 32](q.state, 8, 5, claim)
        assert claim.copy_to_host().tolist() == [2, 2]  # 12 and 13, not 10 and 11 again
        assert q.drain().copy_to_host().tolist() == [10, 11, 12, 13]
        q.push([20, 21])
        take_some[1, 32](q.state, 8, 4, claim)  # claims past the two left: only those two
        assert claim.copy_to_host().tolist() == [0, 2]
        q.push([22, 23, 24])
        take_some[1, 32](q.state, 8, 4, claim)
        assert claim.copy_to_host().tolist() == [2, 3]  # every new item, none skipped


@cuda.jit
def size_of(state, capacity, out):
    """The device's count of filled items (`device.size`), by one thread."""
    if cuda.grid(1) == 0:
        out[0] = qd.size(state, capacity)


@cuda.jit
def take_push_take(items, state, capacity, want, out):
    """One thread: a claim of `want`, a device push of 99, a second claim: out = both claims."""
    if cuda.grid(1) == 0:
        out[0], out[1] = qd.take(state, capacity, want)
        qd.push(items, state, 99)
        out[2], out[3] = qd.take(state, capacity, want)


def assert_a_claim_moves_the_head_by_what_it_got() -> None:
    """A claim of more items than are left moves the head only past those it got, so an item
    pushed on the device afterwards goes to the next claim (the head ran to 4 past 3 items, and
    every later claim found none); a claim of fewer than one item takes none."""
    out = cuda.to_device(np.zeros(4, np.int64))
    with WorkQueue(8, np.int64) as q:
        q.push([10, 11, 12])
        take_push_take[1, 32](q.items, q.state, 8, 4, out)
        assert out.copy_to_host().tolist() == [0, 3, 3, 1]
        assert q._words() == (4, 4) and q.drain().copy_to_host().tolist() == [10, 11, 12, 99]
        q.push([1, 2])
        for want in (0, -1):
            take_some[1, 32](q.state, 8, want, out)
            assert out.copy_to_host()[:2].tolist() == [0, 0] and q._words() == (2, 0)


def assert_an_overflowed_queue_counts_only_its_capacity() -> None:
    """Device pushes refused at capacity still count in the tail (the overflow count); everything
    that reads the count reads no more than the capacity: `size` on the device and the host,
    `take`, `consume` and a host push, until a drain empties the queue and it fills (and
    overflows) again. Which pushes win is the device's order, so the items taken are checked
    against the producer's marks and the counts against QueueModel."""
    cap = 4
    values = np.arange(1, 11, dtype=np.int64) * 10
    model = QueueModel(cap, np.int64)
    assert [model.push(v) for v in values] == [True] * cap + [False] * (values.size - cap)
    done, dv = cuda.to_device(np.zeros(values.size, np.uint8)), cuda.to_device(values)
    count, claim = cuda.to_device(np.full(1, -1, np.int64)), cuda.to_device(np.zeros(2, np.int64))
    total = cuda.to_device(np.zeros(2, np.int64))
    with WorkQueue(cap, np.int64) as q:
        size_of[1, 32](q.state, cap, count)
        assert count.copy_to_host().tolist() == [0]
        produce[1, 64](dv, done, q.items, q.state)  # ten pushes into room for four
        first = values[done.copy_to_host() == 1]
        assert first.size == cap and (q.size(), q.overflowed()) == (model.size(), model.overflowed()) == (4, 6)
        size_of[1, 32](q.state, cap, count)
        assert count.copy_to_host().tolist() == [4]  # not the 10 pushes tried
        q.consume(add_and_count, (total,))
        assert total.copy_to_host().tolist() == [int(first.sum()), 4]  # the four filled items, nothing past them
        try:
            q.push([99])
        except CapacityError as e:
            assert e.needed == 5 and str(e).startswith("1 items do not fit after 4 of 4. Fix:"), e
        else:
            raise AssertionError("a push into a full (overflowed) queue was accepted")
        q.push([])
        assert (q.size(), q.overflowed()) == (4, 6)  # the refused and the empty push changed nothing
        for want, expected in ((3, [0, 3]), (3, [3, 1]), (3, [4, 0])):  # the third finds none left
            take_some[1, 32](q.state, cap, want, claim)
            assert claim.copy_to_host().tolist() == expected, (want, expected)
        got = q.drain().copy_to_host()
        assert sorted(got.tolist()) == sorted(first.tolist()) and (q.size(), q.overflowed()) == (0, 0)

        q.push([5, 6])  # room again: two from the host, then the six refused pushed again, four refused anew
        produce[1, 64](dv, done, q.items, q.state)
        model.drain()
        assert model.push(5) and model.push(6)
        assert [model.push(v) for v in np.setdiff1d(values, first)] == [True, True, False, False, False, False]
        marks = done.copy_to_host()
        second = np.setdiff1d(values[marks == 1], first)
        assert marks.sum() == 6 and second.size == 2
        assert (q.size(), q.overflowed()) == (model.size(), model.overflowed()) == (4, 4)
        size_of[1, 32](q.state, cap, count)
        assert count.copy_to_host().tolist() == [4]
        total.copy_to_device(np.zeros(2, np.int64))
        q.consume(add_and_count, (total,))
        assert total.copy_to_host().tolist() == [5 + 6 + int(second.sum()), 4]
        try:
            q.push([1, 2])
        except CapacityError as e:
            assert e.needed == 6 and str(e).startswith("2 items do not fit after 4 of 4. Fix:"), e
        else:
            raise AssertionError("a push into a full (overflowed) queue was accepted")
        take_some[1, 32](q.state, cap, 8, claim)
        assert claim.copy_to_host().tolist() == [0, 4]  # every filled item, not the 8 pushes tried
        got = q.drain().copy_to_host()
        assert got[:2].tolist() == [5, 6] and sorted(got[2:].tolist()) == sorted(second.tolist())
        q.push([7])  # after the drain: stored at the front, the counts those of one item
        size_of[1, 32](q.state, cap, count)
        assert count.copy_to_host().tolist() == [1] and (q.size(), q.overflowed()) == (1, 0)
        assert q.drain().copy_to_host().tolist() == [7]


def assert_a_closed_queue_refuses_everything() -> None:
    """Close between two chunks, and copies of any kind: VyreErrors, never raw ones."""
    import copy
    import pickle

    q = WorkQueue(8, np.int32)
    q.push([1, 2, 3])
    pieces = q.chunks(2)
    next(pieces)
    for make_copy in (copy.copy, copy.deepcopy, pickle.dumps):
        try:
            make_copy(q)
        except DispatchError as e:
            assert "cannot be copied" in str(e) and "Fix:" in str(e)
        else:
            raise AssertionError("a WorkQueue was copied: two owners of its device arrays")
    assert repr(q) == "<WorkQueue: room for 8 int32 items, open>"
    q.close()
    assert repr(q) == "<WorkQueue: room for 8 int32 items, closed>"
    for call in (lambda: next(pieces), q.size, q.drain, lambda: q.push([1]), q.reset, lambda: q.items,
                 lambda: q.state):  # the arrays a kernel is given: they were None, which fails inside Numba
        try:
            call()
        except DispatchError as e:
            assert "closed" in str(e) and "Fix:" in str(e)
        else:
            raise AssertionError("a closed queue was used")


def assert_misuse_is_refused_and_changes_nothing() -> None:
    with WorkQueue(8, np.uint32) as q:
        q.push([7])
        for bad in ([-1], [1.7], [[1, 2], [3, 4]], [True], [1, True], np.array([2**40]), [2**40, 1], "abc", None,
                    q.items):
            try:
                q.push(bad)
            except DispatchError as e:
                assert "Fix:" in str(e), e
            else:
                raise AssertionError(f"push({bad!r}) was accepted")
        for call in (lambda: q.consume(lambda v, a: None, (), block=0), lambda: q.chunks(0),
                     lambda: q.consume(lambda v, a: None, (), block=True),
                     lambda: q.consume(lambda v, a: None, np.zeros(2))):
            try:
                call()
            except DispatchError as e:
                assert "Fix:" in str(e), e
            else:
                raise AssertionError("a bad block or chunk was accepted")
        assert q.drain().copy_to_host().tolist() == [7]  # the refused pushes stored nothing
    with WorkQueue(4, np.float32) as q:
        for bad, why in (([1e300], "the value 1e+300 is not a float32 (it would become inf). Fix: make the queue "
                                   "of float64 (it holds 1e+300)"),  # a float overflowing; ints that would round
                         ([1, 2**64 - 1], "the value 18446744073709551615 is not exactly representable as float32. "
                                          "Fix: make the queue of uint64 (it holds"),
                         ([2**25 + 1], "the value 33554433 is not exactly representable as float32. Fix: make the "
                                       "queue of float64 (it holds 33554433)")):
            try:
                q.push(bad)
            except DispatchError as e:
                assert str(e).startswith(why), e
            else:
                raise AssertionError(f"push({bad!r}) to a float32 queue was accepted")
        q.push([0.1, 2**24])  # floats round as NumPy's do; integers that fit exactly are taken
        assert q.drain().copy_to_host().tolist() == [np.float32(0.1), 2.0**24]
    try:
        WorkQueue(4, np.int32, stream="not a stream")
    except DispatchError as e:
        assert "Numba stream" in str(e)
    else:
        raise AssertionError("a bad stream was accepted")


def assert_consumers_are_kept_by_code_and_bounded() -> None:
    """A step function written anew each call (same code, same values read) compiles once; the
    kept consumers are bounded, an evicted one compiled again when used."""
    from vyre_numba.lru import LRUCache

    total = cuda.to_device(np.zeros(1, np.int64))
    kept, qd._CONSUMERS = qd._CONSUMERS, LRUCache(8)
    try:
        with WorkQueue(4, np.int64) as q:
            q.push(np.array([1, 2], np.int64))
            for _ in range(3):
                def step(value, args):
                    cuda.atomic.add(args[0], 0, value)
                q.consume(step, (total,))
            assert len(qd._CONSUMERS.values()) == 1 and int(total.copy_to_host()[0]) == 9
            qd._CONSUMERS = LRUCache(2)
            for k in range(4):
                scope: dict = {"cuda": cuda}
                exec(f"def step(value, args):\n    cuda.atomic.add(args[0], 0, value * {k + 1})", scope)
                q.consume(scope["step"], (total,))
                assert len(qd._CONSUMERS.values()) <= 2
            assert int(total.copy_to_host()[0]) == 9 + 3 * (1 + 2 + 3 + 4)
    finally:
        qd._CONSUMERS = kept


def assert_records_and_streams_queue() -> None:
    """A record queue drains and hands out chunks field for field (keeping those pushed meanwhile:
    the simulator raised a raw TypeError moving them); a queue on a stream of its own
    works as one on the default stream."""
    rec = np.dtype([("a", np.int32), ("b", np.float64)])
    values = np.array([(1, 2.5), (-3, np.inf), (7, -0.0)], rec)
    with WorkQueue(4, rec) as q:
        q.push(values)
        assert [c.copy_to_host().tobytes() for c in q.chunks(2)] == [values[:2].tobytes(), values[2:].tobytes()]
        q.push(values[1:])
        got = q.drain().copy_to_host()
        assert got.dtype == rec and got.tobytes() == values[1:].tobytes()
        q.push(values[:2])
        pieces = q.chunks(2)
        assert next(pieces).copy_to_host().tobytes() == values[:2].tobytes()
        q.push(values[2:])  # pushed while the iteration runs: moved to the front when it ends, kept
        assert list(pieces) == [] and q.drain().copy_to_host().tobytes() == values[2:].tobytes()
    s = cuda.stream()
    with WorkQueue(4, np.int32, stream=s) as q:
        q.push(np.array([5, 6], np.int32))
        out = q.drain()
        s.synchronize()
        assert out.copy_to_host().tolist() == [5, 6]


def main() -> None:
    for n, cap in ((0, 4), (1, 1), (37, 8), (40, 8), (100, 1000)):
        assert_backpressure_loses_nothing(n, cap)
    for n in (0, 1, 33):
        assert_consume_reads_the_count_on_the_device(n)
        assert_host_push_drain_and_chunks(n)
    assert_misuse_is_refused_and_changes_nothing()
    assert_host_pushes_keep_the_device_counters()
    assert_a_claim_moves_the_head_by_what_it_got()
    assert_an_overflowed_queue_counts_only_its_capacity()
    assert_a_closed_queue_refuses_everything()
    assert_consumers_are_kept_by_code_and_bounded()
    assert_records_and_streams_queue()
    print("queue ok")


if __name__ == "__main__":
    main()
