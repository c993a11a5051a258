"""Every dispatch mode on the shared backend surface, on the reference backend everywhere and on the
CUDA backend where a GPU is usable; each checked against plain NumPy or the reference backend."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.errors import DispatchError, UnknownNameError

BACKENDS = ["reference", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return vn.get_backend(request.param)


def fix_in(e) -> str:
    text = str(e.value)
    assert "Fix:" in text, text
    return text


def affine(name: str = "affine", mul: int = 3, add: int = 1) -> ir.Program:
    """y[i] = x[i] * mul + add over u32 (y pure output)."""
    i = ir.var("i")
    return ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.output("y", 1, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) * mul + add)])],
                      name=name)


def bump() -> ir.Program:
    """x[i] += 1 in place (read_write)."""
    i = ir.var("i")
    return ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])],
                      name="bump")


def test_async_matches_dispatch(backend):
    x = np.arange(1000, dtype=np.uint32)
    pending = backend.dispatch_async(affine(), [x])
    assert pending.wait(30.0)
    assert pending.done()
    (y,) = pending.result()
    assert np.array_equal(y, x * 3 + 1)
    assert np.array_equal(pending.result()[0], y), "result() is repeatable"


def test_result_with_a_timeout_raises_while_it_runs(backend):
    """result(timeout=) raises ResultTimeoutError (a TimeoutError) while the dispatch runs, which
    goes on to the right answer: 2**27 steps of a 32-bit LCG (about 0.3 s on a GPU; the reference
    backend's is cancelled)."""
    trips, a, c = 2**27, 1664525, 1013904223
    program = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 1, [
        ir.let("s", ir.load("x", 0)),
        ir.loop("j", ir.u32(0), ir.u32(trips), ir.assign("s", ir.var("s") * ir.u32(a) + ir.u32(c))),
        ir.store("x", 0, ir.var("s"))], name="lcg")
    pending = backend.dispatch_async(program, [np.array([7], np.uint32)])
    with pytest.raises(vn.ResultTimeoutError, match="still running") as e:
        pending.result(timeout=0)
    assert isinstance(e.value, TimeoutError)
    fix_in(e)
    if backend.name == "reference":
        assert pending.cancel()
        with pytest.raises(DispatchError, match="cancelled"):
            pending.result()
        return
    mul, add, x = a, c, 7  # x -> x * a + c composed `trips` times, by squaring
    for bit in range(trips.bit_length()):
        if trips >> bit & 1:
            x = (x * mul + add) % 2**32
        mul, add = mul * mul % 2**32, (add * mul + add) % 2**32
    assert pending.result(timeout=120)[0].tolist() == [x]


def test_async_error_surfaces_at_issue_or_result(backend):
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_async(affine(), [np.arange(10, dtype=np.float32) + 0.5]).result()
    fix_in(e)


def test_many_async_in_flight(backend):
    xs = [np.full(257 * (k + 1), k, np.uint32) for k in range(8)]
    pendings = [backend.dispatch_async(affine(), [x]) for x in xs]
    for x, p in zip(xs, pendings):
        assert np.array_equal(p.result()[0], x * 3 + 1)


@pytest.mark.gpu
def test_async_dispatches_dropped_uncollected_give_their_streams_back():
    """Regression (a red-team): a CudaPending dropped before result() kept its stream, events and
    buffer set for good (every fire-and-forget dispatch made a new stream)."""
    import gc

    be = vn.get_backend("cuda")
    x = np.arange(5000, dtype=np.uint32)
    be.dispatch_async(affine(), [x]).result()
    before = be.host_stats()["streams"]
    for _ in range(50):
        be.dispatch_async(affine(), [x])  # dropped at once
        gc.collect()
    assert np.array_equal(be.dispatch_async(affine(), [x]).result()[0], x * 3 + 1)
    assert be.host_stats()["streams"] - before <= 4, be.host_stats()


def test_timed_dispatch_reports_nanoseconds(backend):
    x = np.arange(5000, dtype=np.uint32)
    (y,), ns = backend.dispatch_timed(affine(), [x])
    assert np.array_equal(y, x * 3 + 1)
    assert isinstance(ns, int) and ns > 0
    t = backend.telemetry()
    assert t["timed_dispatches"] >= 1 and t["timed_ns"] >= ns


def test_resident_roundtrip_and_ranged_download(backend):
    x = np.arange(300, dtype=np.uint32)
    dx = backend.upload(x)
    dy = backend.allocate(affine(), "y", 300)
    backend.dispatch_resident(affine(), [dx, dy])
    assert np.array_equal(backend.download(dy), x * 3 + 1)
    assert np.array_equal(backend.download(dy, 10, 5), (x * 3 + 1)[10:15])
    assert backend.download(dy, 300, 0).size == 0
    backend.dispatch_resident(affine(), {"x": dx, "y": dy})
    assert np.array_equal(backend.download(dy), x * 3 + 1)


def test_resident_pure_outputs_are_zeroed_and_inout_updated_in_place(backend):
    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.output("y", 0, "u32")], 64,
                   [ir.let("i", ir.gid(0)), ir.if_(i < 5, [ir.store("y", i, i + 100)])])
    dy = backend.upload(np.full(20, 7, np.uint32))
    backend.dispatch_resident(p, [dy])
    assert backend.download(dy).tolist() == [100, 101, 102, 103, 104] + [0] * 15
    dx = backend.upload(np.zeros(10, np.uint32))
    for _ in range(3):
        backend.dispatch_resident(bump(), [dx])
    assert np.array_equal(backend.download(dx), np.full(10, 3, np.uint32))


def test_sequence_runs_steps_without_host_sync_and_reads_ranges(backend):
    n = 1000
    dx = backend.upload(np.zeros(n, np.uint32))
    steps = [(bump(), [dx])] * 10 + [(bump(), [dx], DispatchConfig(grid=1))]  # last step: only 64 elements
    a, b = backend.dispatch_sequence(steps, read=[(dx, 0, 4), (dx, n - 3, 3)])
    assert a.tolist() == [11] * 4 and b.tolist() == [10] * 3
    whole, = backend.dispatch_sequence([], read=[dx])  # a bare buffer is (buffer,): all of it
    assert whole.tolist() == [11] * 64 + [10] * (n - 64)
    for bad in (5, "dx", [dx, 0, 1, 2]):
        with pytest.raises(DispatchError, match="is not a buffer or a .buffer.*Fix: pass read=.buffer, "):
            backend.dispatch_sequence([], read=[bad])
    for one in ((dx, 0, 2), (dx, 5), [dx, 0, 2]):  # a range given without its list
        with pytest.raises(DispatchError, match=r"is one range, not a list of them\. Fix: pass read=\[\(buffer"):
            backend.dispatch_sequence([], read=one)


def test_a_read_entry_of_a_dlpack_only_array_is_left_to_the_download_to_check():
    from vyre_numba.backend import _read

    class DLPackOnly:
        def __dlpack__(self, stream=None):
            raise NotImplementedError

    buf = DLPackOnly()
    assert _read((buf, 1, 2)) == (buf, 1, 2)


@pytest.mark.parametrize("entry", [([1, 2], 0, 1), ("dx",), (None, 0)])
def test_a_read_entry_that_is_not_a_buffer_is_refused_before_any_step_runs(backend, entry):
    dx = backend.upload(np.zeros(4, np.uint32))
    with pytest.raises(DispatchError, match="not a resident buffer; nothing ran.*Fix:"):
        backend.dispatch_sequence([(bump(), [dx])], read=[entry])
    assert backend.download(dx).tolist() == [0] * 4


def test_repeated_prefix_and_body(backend):
    dx = backend.upload(np.arange(100, dtype=np.uint32))
    dy = backend.allocate(affine(), "y", 100)
    (y,) = backend.dispatch_repeated([(bump(), [dx])], [(bump(), [dx]), (affine(), [dx, dy])], 4, read=[(dy, 0, 100)])
    assert np.array_equal(y, (np.arange(100, dtype=np.uint32) + 5) * 3 + 1)


@pytest.mark.parametrize("repeat", [2**32 + 1, 2**63, np.uint64(2**64 - 1), 10**30])
def test_repeat_past_its_maximum_is_refused_before_anything_runs(backend, repeat):
    """Regression: repeat=2**63 passed the check, then itertools.repeat raised OverflowError."""
    from vyre_numba.backend import MAX_REPEAT

    dx = backend.upload(np.arange(4, dtype=np.uint32))
    with pytest.raises(vn.DispatchError, match="MAX_REPEAT = 2\\*\\*32.*Fix: "):
        backend.dispatch_repeated([(bump(), [dx])], [(bump(), [dx])], repeat)
    assert MAX_REPEAT == 2**32 and backend.download(dx).tolist() == [0, 1, 2, 3]  # the prefix did not run
    (x,) = backend.dispatch_repeated([(bump(), [dx])], [], MAX_REPEAT, read=[(dx,)])  # an empty body: no spinning
    assert x.tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("n, message", [
    (-1, r"allocate\('y', n=-1\): n is negative\. Fix: "),
    (np.int64(-5), r"allocate\('y', n=-5\): n is negative"),
    (2**40, r"allocate\('y', n=1099511627776\): 1099511627776 elements is 2\*\*32 or more.*Fix: split"),
    (2.0, r"allocate\('y', n=2.0\): n is not an int"),
])
def test_allocate_says_what_is_wrong_with_n_in_the_call_made(backend, n, message):
    """Regression: n=-1 said 'needs an element count ... pass n=' though n was passed, and n=2**40
    blamed `empty(n=...)`, a call the user never made."""
    with pytest.raises(vn.DispatchError, match=message):
        backend.allocate(affine(), "y", n)
    static = ir.Program([ir.BufferDecl.read("x", 0, "u32", 4), ir.BufferDecl.output("y", 1, "u32", 4)], 4, [])
    with pytest.raises(vn.DispatchError, match=r"allocate\('x', n=2\) is smaller than the declared 4"):
        backend.allocate(static, "x", 2)
    assert backend.download(backend.allocate(static, "x")).tolist() == [0] * 4
    with pytest.raises(vn.DispatchError, match=r"allocate\('y'\) needs an element count.*Fix: pass n="):
        backend.allocate(affine(), "y")


def test_resident_errors(backend):
    dx = backend.upload(np.arange(10, dtype=np.uint32))
    dy = backend.allocate(affine(), "y", 10)
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(affine(), [backend.upload(np.arange(10, dtype=np.float32)), dy])
    assert "u32" in fix_in(e)
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(affine(), [dx])
    fix_in(e)
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(bump(), {"nope": dx})
    fix_in(e)
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(affine(), [dx, dx])
    assert "race" in fix_in(e)
    static = ir.Program([ir.BufferDecl.read("x", 0, "u32", 16), ir.BufferDecl.output("y", 1, "u32")], 64,
                        [ir.store("y", ir.gid(0), ir.load("x", ir.gid(0)))])
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(static, [dx, dy])
    assert "16" in fix_in(e)
    with pytest.raises(vn.DispatchError) as e:
        backend.download(dy, 5, 6)
    fix_in(e)
    with pytest.raises(vn.DispatchError) as e:
        backend.allocate(affine(), "y")
    fix_in(e)
    with pytest.raises(vn.DispatchError) as e:
        backend.allocate(affine(), "nope", 4)
    fix_in(e)


def test_non_contiguous_resident_view_is_refused(backend):
    dy = backend.allocate(affine(), "y", 10)
    if backend.name == "reference":
        view = np.arange(20, dtype=np.uint32)[::2]
    else:
        view = backend.upload(np.arange(20, dtype=np.uint32))[::2]
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(affine(), [view, dy])
    assert "contiguous" in fix_in(e)


def test_reading_from_a_shared_input_twice_is_allowed(backend):
    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.read("a", 0, "u32"), ir.BufferDecl.read("b", 1, "u32"),
                    ir.BufferDecl.output("y", 2, "u32")], 64,
                   [ir.let("i", ir.gid(0)), ir.store("y", i, ir.load("a", i) + ir.load("b", i))])
    dx = backend.upload(np.arange(64, dtype=np.uint32))
    dy = backend.allocate(p, "y", 64)
    backend.dispatch_resident(p, [dx, dx, dy])
    assert np.array_equal(backend.download(dy), 2 * np.arange(64, dtype=np.uint32))


def test_telemetry_counts_and_resets(backend):
    backend.reset_telemetry()
    x = np.arange(100, dtype=np.uint32)
    backend.dispatch(affine(), [x])
    dx = backend.upload(x)
    backend.dispatch_resident(bump(), [dx])
    backend.download(dx)
    t = backend.telemetry()
    if backend.name == "cuda":
        assert t["kernel_launches"] == 2
        assert t["bytes_uploaded"] >= 2 * x.nbytes and t["bytes_read_back"] >= 2 * x.nbytes
        assert t["sync_points"] >= 2
    assert t["dispatches"] == 1 and t["resident_dispatches"] == 1
    backend.dispatch(affine(), [x], DispatchConfig(label="warmup"))
    assert backend.telemetry()["dispatches[warmup]"] == 1
    backend.reset_telemetry()
    assert backend.telemetry().get("dispatches", 0) == 0


def test_concurrent_dispatches_from_threads(backend):
    errors: list = []
    results: dict = {}

    def work(k: int) -> None:
        try:
            x = np.arange(500 + k, dtype=np.uint32) * (k + 1)
            for r in range(10):
                (y,) = backend.dispatch(affine(f"t{k % 3}", mul=k + 2, add=r), [x])
                if not np.array_equal(y, x * np.uint32(k + 2) + np.uint32(r)):
                    errors.append((k, r))
            results[k] = True
        except Exception as e:  # reported below with the thread's id
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 8, errors


def test_threads_dispatching_on_one_resident_buffer_lose_no_update(backend):
    """Regression (a red-team): on the reference backend two threads bumping one buffer lost
    increments and left it torn ([149 153] for 200 bumps); each dispatch is now whole, as
    launches on one stream are."""
    p, dx = bump(), backend.upload(np.zeros(20_000, np.uint32))
    errors: list = []

    def work() -> None:
        try:
            for _ in range(40):
                backend.dispatch_resident(p, [dx])
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert np.unique(backend.download(dx)).tolist() == [120]


def test_a_failed_reference_dispatch_undoes_only_its_own_writes():
    """Regression (a red-team): a dispatch that ran out of work restored the copy it took at its
    start over the dispatches another thread finished meanwhile (11,490 of them, lost)."""
    from vyre_numba.reference import ReferenceBackend

    be, slow = vn.get_backend("reference"), ReferenceBackend(work_budget=2 * 10**7)
    i = ir.var("i")
    spin = ir.Program([ir.BufferDecl.read_write("y", 0, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.loop("j", ir.u32(0), ir.u32(10**9), [
                          ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("y", i) + 1)])])], name="spin")
    buf, started, done, bumps = be.upload(np.zeros(1000, np.uint32)), threading.Event(), threading.Event(), [0]
    failed: list = []

    def a() -> None:
        started.wait(60)
        try:
            slow.dispatch_resident(spin, [buf])
        except vn.VyreError as e:
            failed.append(e)
        done.set()

    def b() -> None:
        p, after = bump(), 0
        while after < 5:  # bumps before, while and after the failing dispatch
            be.dispatch_resident(p, [buf])
            bumps[0] += 1
            if bumps[0] == 5:
                started.set()
            after += done.is_set()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(failed) == 1 and "Fix:" in str(failed[0]), failed
    assert bumps[0] >= 10 and np.unique(buf).tolist() == [bumps[0]]


def test_resident_dispatches_of_ended_threads_stay_counted(backend):
    """Each thread counts its own resident dispatches; threads that have ended are folded into
    one count as new ones come (a pool's turnover kept one list a thread), and none is lost."""
    backend.reset_telemetry()
    p = bump()
    errors: list = []

    def work() -> None:
        try:
            dx = backend.upload(np.zeros(70, np.uint32))
            for _ in range(5):
                backend.dispatch_resident(p, [dx])
            assert backend.download(dx).tolist() == [5] * 70
        except Exception as e:  # reported below
            errors.append(repr(e))

    waves = []
    for wave in range(3):
        threads = [threading.Thread(target=work) for _ in range(6)]
        waves.append(threads)
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors
    assert backend.telemetry()["resident_dispatches"] == 90
    if backend.name == "cuda":
        kept = {id(t) for t, _ in backend._hot}
        assert not kept & {id(t) for t in waves[0] + waves[1]}  # ended before the last wave came
        backend.reset_telemetry()
        work()
        assert backend.telemetry()["resident_dispatches"] == 5 and not errors


@pytest.mark.gpu
def test_cuda_host_dispatch_allocates_nothing_after_warmup():
    backend = vn.get_backend("cuda")
    x = np.arange(4096, dtype=np.uint32)
    backend.dispatch(affine(), [x])
    before = backend.host_stats()
    for _ in range(20):
        backend.dispatch(affine(), [x])
    after = backend.host_stats()
    assert (after["buffer_sets"], after["streams"], after["plans"]) == (
        before["buffer_sets"], before["streams"], before["plans"])


@pytest.mark.gpu
def test_cuda_failed_dispatch_returns_what_it_took():
    backend = vn.get_backend("cuda")
    x = np.arange(64, dtype=np.uint32)
    backend.dispatch(affine(), [x])
    before = backend.host_stats()
    with pytest.raises(vn.LaunchError):
        backend.dispatch(affine(), [x], DispatchConfig(grid=(1, 70000, 1)))
    assert backend.host_stats() == before
    assert np.array_equal(backend.dispatch(affine(), [x])[0], x * 3 + 1)


@pytest.mark.gpu
def test_cuda_freed_buffer_is_refused():
    backend = vn.get_backend("cuda")
    dx = backend.upload(np.arange(8, dtype=np.uint32))
    dx.gpu_data.free()
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(bump(), [dx])
    assert "freed" in fix_in(e)


@pytest.mark.gpu
def test_cuda_accepts_cupy_arrays_without_copying():
    cp = pytest.importorskip("cupy")
    backend = vn.get_backend("cuda")
    cx = cp.arange(100, dtype=cp.uint32)
    backend.dispatch_resident(bump(), [cx])
    backend.synchronize()
    assert np.array_equal(cp.asnumpy(cx), np.arange(100, dtype=np.uint32) + 1)
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(bump(), [cp.arange(10, dtype=cp.int64)])
    fix_in(e)


@pytest.mark.gpu
def test_cuda_rebinding_different_arrays_after_the_fast_path():
    """The fast path for repeated bindings must notice a new array, a freed one and a new size."""
    backend = vn.get_backend("cuda")
    a = backend.upload(np.zeros(100, np.uint32))
    for _ in range(3):
        backend.dispatch_resident(bump(), [a])
    b = backend.upload(np.zeros(300, np.uint32))
    backend.dispatch_resident(bump(), [b])
    assert backend.download(a).tolist() == [3] * 100 and backend.download(b).tolist() == [1] * 300
    y = backend.upload(np.full(64, 9, np.uint32))
    for _ in range(2):  # pure outputs are zeroed on every call, the fast path included
        backend.dispatch_resident(affine(), [backend.upload(np.arange(10, dtype=np.uint32)), y])
    assert backend.download(y).tolist() == [k * 3 + 1 for k in range(10)] + [1] * 54  # x reads 0 past its end
    i = ir.var("i")
    five = ir.Program([ir.BufferDecl.output("y", 0, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < 5, [ir.store("y", i, i + 100)])], name="five")
    sevens = ir.Program([ir.BufferDecl.read_write("y", 0, "u32")], 64, [ir.store("y", ir.gid(0), 7)], name="sevens")
    z = backend.upload(np.zeros(20, np.uint32))
    for _ in range(3):  # the second and third call of `five` take the fast path and must still zero y
        backend.dispatch_resident(sevens, [z])
        backend.dispatch_resident(five, [z])
        assert backend.download(z).tolist() == [100, 101, 102, 103, 104] + [0] * 15
    b.gpu_data.free()
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(bump(), [b])
    assert "freed" in fix_in(e)


@pytest.mark.gpu
def test_cuda_accepts_dlpack_only_objects():
    cp = pytest.importorskip("cupy")
    backend = vn.get_backend("cuda")

    class DLPackOnly:  # what a JAX array looks like to us: no __cuda_array_interface__
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, *args, **kwargs):
            return self._a.__dlpack__(*args, **kwargs)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    cx = cp.arange(50, dtype=cp.uint32)
    backend.dispatch_resident(bump(), [DLPackOnly(cx)])
    backend.synchronize()
    assert np.array_equal(cp.asnumpy(cx), np.arange(50, dtype=np.uint32) + 1)
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(bump(), [DLPackOnly(cp.arange(10, dtype=cp.float32))])
    fix_in(e)


def test_a_profiling_range_is_named_by_a_str():
    """Regression (a red-team): profiling.range(123) was taken without nvtx and left to nvtx
    to refuse (or not) where installed."""
    from vyre_numba import profiling

    with profiling.range("mine"):
        pass
    for bad in (123, None, b"mine"):
        with pytest.raises(vn.ArgumentError, match="not a str. Fix:"):
            profiling.range(bad)
    # Regression (a red-team): a call that did not fit was Python's TypeError
    for call, fix in ((lambda: profiling.range(), r"Fix: call it as range\(name\)"),
                      (lambda: profiling.range("x", color="red"), "`color` is no parameter"),
                      (lambda: profiling.available(1), r"Fix: call it as available\(\)")):
        with pytest.raises(vn.ArgumentError, match=fix):
            call()


@pytest.mark.gpu
def test_cuda_nvtx_ranges_name_the_phases(monkeypatch):
    from vyre_numba import profiling

    seen = []

    class Recorder:
        @staticmethod
        def annotate(name, domain=None):
            seen.append((name, domain))
            import contextlib
            return contextlib.nullcontext()

    monkeypatch.setattr(profiling, "_nvtx", Recorder)
    backend = vn.get_backend("cuda")
    fresh = affine(name="nvtx_probe", mul=11, add=5)
    backend.disk_cache = None  # force emit + assemble in this process
    try:
        (y,) = backend.dispatch(fresh, [np.arange(10, dtype=np.uint32)])
    finally:
        from vyre_numba.gpu.diskcache import DiskCache, enabled
        backend.disk_cache = DiskCache() if enabled() else None
    assert np.array_equal(y, np.arange(10, dtype=np.uint32) * 11 + 5)
    names = {n for n, d in seen if d == profiling.DOMAIN}
    assert {"emit", "assemble", "upload", "launch", "readback"} <= names, seen


def test_resident_config_must_be_a_dispatch_config(backend):
    dx = backend.upload(np.zeros(8, np.uint32))
    with pytest.raises(vn.DispatchError) as e:
        backend.dispatch_resident(bump(), [dx], {"grid": 4})
    assert "DispatchConfig" in fix_in(e)


def test_upload_keeps_the_shape(backend):
    d = backend.upload(np.arange(12, dtype=np.uint32).reshape(3, 4))
    assert tuple(d.shape) == (3, 4)
    backend.dispatch_resident(bump(), [d])
    assert np.array_equal(backend.download(d), np.arange(12, dtype=np.uint32) + 1)


@pytest.mark.gpu
@pytest.mark.parametrize("nbytes", ["one", "below_small", "at_small", "below", "at", "pieces"])
def test_cuda_large_uploads_and_downloads_are_exact_and_in_stream_order(nbytes):
    from vyre_numba.gpu import transfer

    be = vn.get_backend("cuda")
    size = {"one": 4, "below_small": transfer.SMALL_BYTES - 4, "at_small": transfer.SMALL_BYTES,
            "below": transfer.STAGED_BYTES - 4, "at": transfer.STAGED_BYTES,
            "pieces": 3 * transfer.PIECE + 4 * 1001}[nbytes]
    x = np.random.default_rng(size).integers(0, 2**32, size // 4, dtype=np.uint64).astype(np.uint32)
    x[-1] = 2**32 - 1
    d = be.upload(x.reshape(-1, 1))
    assert tuple(d.shape) == (x.size, 1)
    x[:] = 7  # the upload has left the caller's memory
    be.dispatch_resident(bump(), [d.reshape(-1)])
    want = np.random.default_rng(size).integers(0, 2**32, size // 4, dtype=np.uint64).astype(np.uint32)
    want[-1] = 2**32 - 1
    assert np.array_equal(be.download(d).reshape(-1), want + np.uint32(1))  # u32 wraps at the maximum
    k = min(3, x.size)
    assert np.array_equal(be.download(d, x.size - k, k).reshape(-1), (want + np.uint32(1))[-k:])
    f = np.linspace(-1, 1, max(size // 8, 1))
    f[::97] = np.nan
    assert np.array_equal(be.download(be.upload(f)), f, equal_nan=True)


def _double(i, a):
    a[i] = a[i] * 2
    return 0


@pytest.mark.gpu
def test_cuda_a_small_read_from_inside_upload_in_pieces_sees_the_piece_and_does_not_wait_for_the_upload():
    """Small reads have a pinned buffer of their own (transfer.SMALL_BYTES), not the staging pair
    the upload holds, so `each` may read from the piece just uploaded."""
    from vyre_numba.gpu import transfer

    be = vn.get_backend("cuda")
    x = np.arange((2 * transfer.PIECE + 4 * 77) // 4, dtype=np.uint32)
    firsts = []
    d = be.upload_in_pieces(x, lambda buf, first, count: firsts.append((first, be.download(buf, first, 2))))
    assert len(firsts) == 3
    for first, got in firsts:
        assert np.array_equal(got, x[first:first + 2])
    assert np.array_equal(be.download(d), x)


@pytest.mark.parametrize("size", ["empty", "one", "small", "pieces"])
def test_upload_in_pieces_covers_the_array_in_order_and_work_on_a_piece_sees_it(backend, size):
    """`each` runs once a piece is in place (on the GPU: enqueued behind its copy, while the host
    stages the next), so a step over the piece doubles exactly what was uploaded."""
    from vyre_numba import fixpoint
    from vyre_numba.gpu import transfer

    items = {"empty": 0, "one": 1, "small": 1001, "pieces": (2 * transfer.PIECE + 4 * 12345) // 4}[size]
    if size == "pieces" and backend.name != "cuda":
        items = 3 * 1024 * 1024
    x = np.random.default_rng(items).integers(0, 2**30, items).astype(np.uint32)
    seen = []

    def each(buf, first, count):
        seen.append((first, count))
        fixpoint.for_each(_double, count, [buf[first:first + count]], backend=backend)

    d = backend.upload_in_pieces(x, each)
    got = backend.download(d)
    assert np.array_equal(got, x * np.uint32(2))
    assert sum(c for _, c in seen) == items and all(c > 0 for _, c in seen)
    assert [f for f, _ in seen] == list(np.cumsum([0] + [c for _, c in seen])[:-1])
    if backend.name == "cuda" and size == "pieces":
        assert len(seen) == 3 and seen[0] == (0, transfer.PIECE // 4)  # staged: pieces of PIECE bytes
    elif items:
        assert len(seen) == 1  # below the staged size (or off the GPU): the whole array at once


def test_a_sequence_that_fails_at_a_step_says_which_steps_ran(backend):
    from vyre_numba import DispatchError

    x = backend.upload(np.arange(5, dtype=np.uint32))
    y = backend.allocate(affine(), "y", 5)
    with pytest.raises(DispatchError, match=r"step 1 of the sequence \(step 0 ran.*Fix:") as e:
        backend.dispatch_sequence([(affine(), [x, y]), (affine(), [x])])
    assert "nothing of step 1 ran" in str(e.value)
    assert backend.download(y).tolist() == (np.arange(5) * 3 + 1).tolist()  # what step 0 wrote, as said
    with pytest.raises(DispatchError, match=r"step 1 of the sequence"):
        backend.dispatch_repeated([(affine(), [x, y])], [(affine(), [y])], 3)


def test_a_sequence_refused_at_its_first_step_says_so_as_at_any_other(backend):
    """Regression (a red-team): step 0's error carried no "step 0 of the sequence" (only later
    steps said where the sequence stopped), though the docstring promises it."""
    from vyre_numba import DispatchError

    x = backend.upload(np.arange(5, dtype=np.uint32))
    y = backend.allocate(affine(), "y", 5)
    for call in (lambda: backend.dispatch_sequence([(affine(), [x]), (affine(), [x, y])]),
                 lambda: backend.dispatch_repeated([], [(affine(), [x])], 2)):
        with pytest.raises(DispatchError, match=r"^step 0 of the sequence \(nothing of step 0 ran\): .*Fix:") as e:
            call()
        assert e.value.steps_ran == 0
    assert backend.download(y).tolist() == [0] * 5


def test_one_buffer_passed_as_keep_or_read_is_refused_with_the_list_it_should_be(backend):
    """Regression (a red-team): keep=x iterated the buffer's items ("uint32 is not a resident buffer")."""
    from vyre_numba import DispatchError

    x = backend.upload(np.arange(5, dtype=np.uint32))
    y = backend.allocate(affine(), "y", 5)
    with pytest.raises(DispatchError, match=r"^keep is one buffer, not a list\. Fix: pass keep=\[buffer\]\.$"):
        backend.megakernel([(affine(), [x, y])], [(y,)], keep=y)
    with pytest.raises(DispatchError, match=r"^read is one buffer, not a list\. Fix: pass read=\[buffer\]"):
        backend.dispatch_sequence([(affine(), [x, y])], read=y)
    assert backend.download(y).tolist() == [0] * 5  # nothing ran
    assert backend.megakernel([(affine(), [x, y])], [(y,)], keep=[y]).run().outputs[0].tolist() == \
        (np.arange(5) * 3 + 1).tolist()


def test_one_step_passed_as_the_steps_is_refused_with_the_list_it_should_be(backend):
    """Regression: the Fix said to pass a (program, buffers) tuple, which the caller had done."""
    from vyre_numba import DispatchError
    from vyre_numba.backend import Step

    x = backend.upload(np.arange(5, dtype=np.uint32))
    y = backend.allocate(affine(), "y", 5)
    for one in ((affine(), [x, y]), [affine(), [x, y]], Step(affine(), [x, y])):
        for call in (lambda: backend.dispatch_sequence(one), lambda: backend.record_sequence(one),
                     lambda: backend.dispatch_repeated([], one, 2), lambda: backend.dispatch_repeated(one, [], 2)):
            with pytest.raises(DispatchError, match=r"is one step \(Program 'affine' and its buffers\), not a list of "
                                                    r"steps\. Fix: pass a list of steps, e\.g\. (steps|body|prefix)="):
                call()
    assert backend.download(y).tolist() == [0] * 5  # nothing ran
    backend.dispatch_sequence([(affine(), [x, y])])  # as the fix says
    assert backend.download(y).tolist() == (np.arange(5) * 3 + 1).tolist()


def test_a_fused_sequence_refuses_a_step_its_own_dispatch_refuses_before_any_runs(backend):
    x = backend.upload(np.arange(8, dtype=np.uint32))
    w = backend.upload(np.zeros(1000, np.uint32))
    z = backend.upload(np.zeros(8, np.float32))
    for steps in ([(bump(), [x]), (bump(), [x]), (bump(), [w]), (bump(), [z])],
                  [(bump(), [w]), (bump(), [x]), (bump(), [x]), (bump(), [z])]):
        with pytest.raises(DispatchError) as e:
            backend.dispatch_sequence(steps, fuse=True)
        assert str(e.value).startswith("step 3 of the sequence to fuse, checked before anything runs (nothing ran): "
                                       "dispatch_resident of 'bump': 'x' is declared u32") and "Fix:" in str(e.value)
        assert backend.download(x)[:2].tolist() == [0, 1] and backend.download(w)[0] == 0
    assert backend.dispatch_sequence([], [(x, 0, 2)], fuse=True)[0].tolist() == [0, 1]  # nothing to fuse: the reads


def test_a_fused_sequence_that_fails_names_the_callers_steps():
    from vyre_numba.reference import ReferenceBackend

    backend = ReferenceBackend(work_budget=100_000)  # a step that runs out of it passes every check first
    i = ir.var("i")
    busy = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [
                          ir.loop("k", 0, 10_000, [ir.store("x", i, ir.load("x", i) + 1)])])], name="busy")
    x = backend.upload(np.arange(8, dtype=np.uint32))
    w = backend.upload(np.zeros(1000, np.uint32))
    z = backend.upload(np.zeros(8, np.uint32))
    with pytest.raises(DispatchError) as e:  # steps 0 and 1 fuse; 2 runs alone (another size); 3 fails
        backend.dispatch_sequence([(bump(), [x]), (bump(), [x]), (bump(), [w]), (busy, [z])], fuse=True)
    assert str(e.value).startswith("step 3 of the sequence (steps 0 to 2 ran and their writes stay; buffers fusion "
                                   "kept as scratch in them (written only inside a fused kernel, not read back or "
                                   "kept) hold unspecified contents; step 3 did not run)") and "Fix:" in str(e.value), \
        str(e.value)
    assert backend.download(x)[:2].tolist() == [2, 3] and backend.download(w)[0] == 1
    assert backend.download(z).tolist() == [0] * 8
    fused_busy = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64, busy.entry, name="busy2")
    with pytest.raises(DispatchError) as e:
        backend.dispatch_sequence([(bump(), [w]), (bump(), [x]), (bump(), [x]), (fused_busy, [x])], fuse=True)
    assert str(e.value).startswith("steps 1 to 3, fused into one kernel, of the sequence (step 0 ran and "
                                   "its writes stay; steps 1 to 3 did not run)"), str(e.value)
    assert backend.download(w)[0] == 2 and backend.download(x)[:2].tolist() == [2, 3]
    assert backend.dispatch_sequence([], [(x, 0, 2)], fuse=True)[0].tolist() == [2, 3]  # nothing to fuse: the reads


def test_ranged_downloads_take_any_integer_types_and_refuse_the_rest(backend):
    from vyre_numba import DispatchError

    d = backend.upload(np.arange(6, dtype=np.int32))
    assert backend.download(d, np.uint64(1), np.int64(2)).tolist() == [1, 2]
    assert backend.download(d, np.int8(4)).tolist() == [4, 5]
    for offset, count in ((None, 1), (1.0, 1), (True, 1), (0, 2.0), (np.uint64(5), np.int64(2)), (-1, 1)):
        with pytest.raises(DispatchError, match="Fix:"):
            backend.download(d, offset, count)


def test_reference_downloads_refuse_arrays_no_buffer_can_be():
    """Regression (a red-team): download and read= took object or complex arrays, none of which
    upload makes (bools it does: compaction's flags)."""
    be = vn.get_backend("reference")
    for dt in (object, np.complex64, "U2", np.float128 if hasattr(np, "float128") else "M8[ns]"):
        a = np.zeros(3, dt)
        for call in (lambda: be.download(a), lambda: be.dispatch_sequence([], [(a,)])):
            with pytest.raises(DispatchError, match=f"download: the buffer holds {np.dtype(dt)}, which no vyre buffer "
                               "holds.*Fix: read from"):
                call()
    assert be.download(be.upload(np.array([True, False]))).tolist() == [True, False]


def test_a_table_whose_columns_numpy_reads_inexactly_is_refused(backend):
    """Regression (a red-team): upload(DataFrame) of an int64 id column beside a float one gave
    float64, rounding 2**53 + 1 silently; a table that converts exactly is taken as NumPy reads it."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"id": [2**53 + 1, 3], "w": [0.5, 1.5]})
    with pytest.raises(DispatchError, match=r"column 'id' \(int64\).*row 0 \(9007199254740993 becomes.*Fix: pass each "
                                            r"column on its own \(x\['id'\].to_numpy\(\)\)"):
        backend.upload(df)
    ok = pd.DataFrame({"id": [7, 3], "w": [0.5, 1.5]})
    assert np.ravel(backend.download(backend.upload(ok))).tolist() == [7.0, 0.5, 3.0, 1.5]
    # integer columns only, read as floats (uint64 beside int64), as a list of such ints is (a red-team)
    ids = pd.DataFrame({"a": np.array([1, 2], np.uint64), "b": np.array([3, 4], np.int64)})
    with pytest.raises(DispatchError, match=r"columns are all integers \(int64, uint64\).*float64.*Fix: convert the "
                                            r"table on purpose, x.astype\(np.int64\)"):
        backend.upload(ids)
    assert np.ravel(backend.download(backend.upload(ids.astype(np.int64)))).tolist() == [1, 3, 2, 4]


def test_a_masked_array_is_not_uploaded_without_its_mask(backend):
    from vyre_numba import DispatchError

    with pytest.raises(DispatchError, match="masked array.*Fix:"):
        backend.upload(np.ma.array(np.arange(3), mask=[0, 1, 0]))


@pytest.mark.parametrize("values, why", [
    ([2**64 - 1, -1], "NumPy reads it as 1.8446744073709552e\\+19"), ([2**53 + 1, 0.5], "NumPy reads it as 9007199254740992"),
    ([7, True], "not bools"), ([[1, 2], [3, True]], "not bools"), ([[2**53 + 1], [0.5]], "mixes types"),
    ([np.uint64(2**64 - 1), np.int64(-1)], "mixes types")])
def test_upload_and_write_refuse_lists_numpy_reads_only_by_rounding_as_dispatch_does(backend, values, why):
    """Regression: upload([2**53 + 1, 0.5]) rounded element 0 and upload([7, True]) counted True as 1
    without a word, where dispatch refuses those lists."""
    with pytest.raises(DispatchError, match=f"upload: .*{why}.*Fix: "):
        backend.upload(values)
    buf = backend.upload(np.zeros(4, np.uint64 if not isinstance(values[0], list) else np.float64))
    with pytest.raises(DispatchError, match="Fix: "):
        backend.write(buf, values)
    assert backend.download(buf).tolist() == [0, 0, 0, 0]


def test_upload_takes_the_lists_numpy_reads_exactly(backend):
    import array

    big = np.arange(1 << 20, dtype=np.float32)
    for values, dtype in (([2**64 - 1, 0], np.uint64), ([True, False], np.bool_), ([1.5, 2], np.float64),
                          ([[1, 2], [3, 4]], np.int64), ((5,), np.int64), ([-1, 2**62], np.int64),
                          ([range(3), range(3)], np.int64), ([array.array("i", [1, 2]), array.array("i", [3, 4])], np.int32),
                          ([np.array([1, 2], np.int32), [3, 4]], np.int64), ([big, big + 1], np.float32),
                          ([np.array([2**31 - 1], np.int32), np.array([0.5], np.float32)], np.float64),
                          ([[2**64 - 1, 0], [1, 2]], np.uint64)):
        got = backend.download(backend.upload(values))
        want = np.concatenate([np.asarray(v, dtype).reshape(-1) for v in values]) if dtype != np.uint64 or \
            not isinstance(values[0], list) else np.asarray(values, dtype).reshape(-1)
        assert got.dtype == dtype and got.reshape(-1).tolist() == want.tolist(), values


@pytest.mark.parametrize("values, why", [
    ([[2**53 + 1, 0], np.array([0.5, 1.5])], "9007199254740993"),  # NumPy rounds the list row to float64
    ([np.array([2**53 + 1]), np.array([0.5])], "9007199254740993"),  # int64 to float64: NumPy's 'safe', not exact
    ([np.array([True, False]), np.array([1, 2])], "take numbers, not bools"),
    ([[True, 2], [3, 4]], "take numbers, not bools")])
def test_upload_checks_the_arrays_inside_a_list_as_exactly_as_its_numbers(backend, values, why):
    with pytest.raises(DispatchError, match=f"upload: .*{why}.*Fix: "):
        backend.upload(values)


def test_the_reference_backend_out_of_host_memory_says_so(monkeypatch):
    from vyre_numba import get_backend, reference
    from vyre_numba.errors import HostMemoryError

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 32.0 GiB")

    be = get_backend("reference")
    monkeypatch.setattr(reference.np, "zeros", no_memory)
    with pytest.raises(HostMemoryError, match="Fix:"):
        be.empty(2**32 - 1, np.float64)


def test_upload_in_pieces_refuses_what_it_cannot_call_or_copy_before_copying(backend):
    from vyre_numba import DispatchError

    for each in (None, 3, "f", int, lambda buf: None, lambda buf, first, count, extra: None):
        with pytest.raises(DispatchError, match="each.* (is (an?|the class) |cannot be called).*Fix:"):
            backend.upload_in_pieces(np.arange(4, dtype=np.uint32), each)
    backend.upload_in_pieces(np.arange(4, dtype=np.uint32), lambda *args: None)  # takes any three
    with pytest.raises(DispatchError, match="Fix:"):
        backend.upload_in_pieces(np.array(["a", "b"]), lambda buf, first, count: None)


def test_a_mapped_word_is_read_when_it_lands_or_after_the_stream_is_waited_for():
    """(No GPU: a NumPy array stands in for mapped memory, a stream object for the stream.) Set
    already: no wait. Never set in the bound: the stream is synchronised and looked at again."""
    import time

    from vyre_numba.gpu.mapped import watch

    class Stream:
        def __init__(self, words, lands):
            self.words, self.lands, self.waits = words, lands, 0

        def synchronize(self):
            self.waits += 1
            if self.lands is not None:
                self.words[1] = self.lands

    words = np.array([5, 7], np.int64)
    s = Stream(words, None)
    assert watch(words, 1, -1, s, 1.0) and s.waits == 0
    words[1] = -1
    t0 = time.perf_counter()
    assert watch(words, 1, -1, s, 0.01) is False and s.waits == 1
    assert time.perf_counter() - t0 >= 0.01
    s = Stream(words, 3)
    assert watch(words, 1, -1, s, 0.0) and s.waits == 1 and words[1] == 3


def test_staging_buffers_taken_again_by_the_same_thread_are_refused_not_waited_for():
    """(No GPU needed: the guard around a context's staging buffers.) The same thread taking them
    twice would deadlock on the lock; another context's buffers, or the same ones after release, are fine."""
    from vyre_numba import DispatchError
    from vyre_numba.gpu import transfer

    lock, other = threading.Lock(), threading.Lock()
    with transfer._held(7, lock):
        with pytest.raises(DispatchError, match="Fix:"):
            with transfer._held(7, lock):
                pass
        with transfer._held(8, other):
            assert other.locked()
        assert lock.locked() and not other.locked()
    assert not lock.locked()
    with transfer._held(7, lock):
        pass


@pytest.mark.gpu
def test_cuda_upload_in_pieces_refuses_a_large_copy_from_each_and_survives_an_error_in_each():
    """A staged copy from inside `each` would wait for the upload's own staging buffers forever:
    refused with a Fix. An error in `each` reaches the caller, and the buffers are free again."""
    from vyre_numba import DispatchError
    from vyre_numba.gpu import transfer

    be = vn.get_backend("cuda")
    x = np.arange(2 * transfer.PIECE // 4, dtype=np.uint32)
    for inner in (lambda: be.upload(x), lambda buf=be.upload(x): be.download(buf)):
        with pytest.raises(DispatchError, match="inside upload_in_pieces") as e:
            be.upload_in_pieces(x, lambda buf, first, count: inner())
        assert "Fix:" in str(e.value)
    small = []
    be.upload_in_pieces(x, lambda buf, first, count: small.append(be.download(be.upload(x[:4]))))
    assert len(small) == 2 and all(np.array_equal(a, x[:4]) for a in small)  # small copies take no buffer

    def fail(buf, first, count):
        raise ValueError("from each")
    with pytest.raises(ValueError, match="from each"):
        be.upload_in_pieces(x, fail)
    assert np.array_equal(be.download(be.upload(x)), x)  # nothing left holding the buffers


@pytest.mark.gpu
def test_cuda_large_uploads_from_several_threads_at_once_stay_apart():
    from concurrent.futures import ThreadPoolExecutor

    from vyre_numba.gpu import transfer

    be = vn.get_backend("cuda")

    def round_trip(t: int) -> bool:
        x = np.full(transfer.PIECE // 4 * 2 + 333 * t, t, np.uint32)
        return all(np.array_equal(be.download(be.upload(x)), x) for _ in range(3))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(round_trip, range(4)))


@pytest.mark.gpu
def test_cuda_a_backend_on_a_second_gpu_of_the_process_is_refused_and_the_first_still_works():
    """numba-cuda places arrays and launches in the context it attached to the thread, so a second
    GPU in one process would silently get the first one's arrays: refused, with the way out."""
    from numba import cuda

    from vyre_numba.gpu import CudaBackend

    if len(cuda.gpus) < 2:
        pytest.skip("needs two GPUs (run on the device's nvidia-h100-x2)")
    a = vn.get_backend("cuda")
    first = cuda.get_current_device().id
    other = 1 - first if first in (0, 1) else 0
    with cuda.gpus[other]:
        with pytest.raises(vn.VyreError) as e:
            CudaBackend()
    fix_in(e)
    assert "one process per GPU" in str(e.value)
    assert isinstance(CudaBackend(), CudaBackend)  # the same GPU again is fine
    x = np.arange(1000, dtype=np.uint32)
    out = a.empty(x.size, np.uint32)
    a.dispatch_resident(affine(mul=3, add=2), [a.upload(x), out])
    assert np.array_equal(a.download(out), x * np.uint32(3) + np.uint32(2))


def test_reference_resident_failure_writes_nothing():
    backend = vn.get_backend("reference")
    y = np.full(8, 5, np.uint32)
    x = np.arange(8, dtype=np.uint32)
    with pytest.raises(vn.DispatchError) as e:  # over the interpreter's invocation limit
        backend.dispatch_resident(affine(), [x, y], DispatchConfig(grid=(65535, 65535, 1)))
    fix_in(e)
    assert y.tolist() == [5] * 8, "the pure output was zeroed although the dispatch failed"


@pytest.mark.gpu
def test_cuda_evicted_kernels_are_not_launched_from_stale_preparations():
    from vyre_numba.gpu import CudaBackend

    small = CudaBackend(module_cache_size=2)
    progs = [affine(f"evict{k}", mul=k + 2) for k in range(4)]
    x = small.upload(np.arange(64, dtype=np.uint32))
    y = small.allocate(progs[0], "y", 64)
    for p in progs + progs:  # the second round finds every first-round kernel evicted
        small.dispatch_resident(p, [x, y])
        k = int(p.name[-1])
        assert np.array_equal(small.download(y), np.arange(64, dtype=np.uint32) * (k + 2) + 1)
    assert small.module_cache.stats()["entries"] == 2


@pytest.mark.gpu
def test_cuda_pending_result_from_two_threads_returns_memory_once():
    backend = vn.get_backend("cuda")
    x = np.arange(1 << 12, dtype=np.uint32)
    backend.dispatch_async(affine(), [x]).result()  # warm the pools
    idle = backend.host_stats()
    pending = backend.dispatch_async(affine(), [x])
    out = []
    threads = [threading.Thread(target=lambda: out.append(pending.result()[0])) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(out) == 2 and all(np.array_equal(o, x * 3 + 1) for o in out)
    assert backend.host_stats() == idle


@pytest.mark.gpu
def test_cuda_repeated_resident_dispatch_reuses_its_preparation():
    backend = vn.get_backend("cuda")
    p = bump()
    x = backend.upload(np.zeros(16, np.uint32))
    for config in (None, DispatchConfig(fixpoint_iterations=2)):
        backend.dispatch_resident(p, [x], config)
        prep = backend._prepared[(id(p), config, None)]  # untuned: no size bucket
        backend.dispatch_resident(p, [x], config)
        assert backend._prepared[(id(p), config, None)] is prep
    assert backend.download(x).tolist() == [6] * 16


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_repeated_host_dispatch_follows_changed_sizes_and_dtypes(name):
    """The CUDA backend skips binding for a repeat of the previous call; any change must not."""
    backend = vn.get_backend(name)
    p = affine()
    for n in (100, 100, 7, 100, 0, 1, 1):
        x = np.arange(n, dtype=np.uint32)
        assert backend.dispatch(p, [x])[0].tolist() == (x * 3 + 1).tolist()
    x = np.arange(100, dtype=np.uint32)
    backend.dispatch(p, [x])
    with pytest.raises(vn.DispatchError, match="Fix:"):
        backend.dispatch(p, [x.astype(np.complex64)])
    assert backend.dispatch(p, [x[::2]])[0].tolist() == (x[::2] * 3 + 1).tolist()  # a strided view
    assert backend.dispatch(p, (x,))[0].tolist() == (x * 3 + 1).tolist()
    assert backend.dispatch(p, {"x": x})[0].tolist() == (x * 3 + 1).tolist()
    assert backend.dispatch(p, [x], sizes={"y": 3})[0].tolist() == (x[:3] * 3 + 1).tolist()


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_refused_resident_dispatch_writes_nothing(name):
    """A resident dispatch that fails its checks leaves every buffer as it was: pure outputs are
    zeroed only once the launch is certain to be enqueued."""
    backend = vn.get_backend(name)
    p = affine()
    x = backend.upload(np.arange(64, dtype=np.uint32))
    y = backend.upload(np.full(64, 7, np.uint32))
    for bad in (DispatchConfig(grid=(1, 70000, 1)), DispatchConfig(workgroup=(2048, 1, 1))):
        with pytest.raises(vn.LaunchError, match="Fix:"):
            backend.dispatch_resident(p, [x, y], bad)
    with pytest.raises(vn.DispatchError, match="share"):
        backend.dispatch_resident(p, [x, x])
    assert backend.download(y).tolist() == [7] * 64
    assert backend.download(x).tolist() == list(range(64))


def test_a_backend_copies_as_itself_and_pickles_by_name(backend):
    import copy
    import pickle

    assert copy.copy(backend) is backend and copy.deepcopy({"b": backend})["b"] is backend
    assert pickle.loads(pickle.dumps(backend)) is backend  # in another process: that process's backend of the name
    made = type(backend)()
    assert copy.copy(made) is made
    with pytest.raises(DispatchError, match=f"made directly.*Fix: pass the backend's name \\('{backend.name}'\\)"):
        pickle.dumps(made)


def test_write_puts_host_values_into_a_resident_buffer_in_order_with_the_work(backend):
    x = backend.upload(np.arange(10, dtype=np.uint32))
    backend.write(x, [100, 101], 3)
    backend.dispatch_resident(bump(), [x])  # runs after the write
    backend.write(x, np.array([7], np.int64))  # after the dispatch: converted exactly
    assert backend.download(x).tolist() == [7, 2, 3, 101, 102, 6, 7, 8, 9, 10]
    values = np.full(4, 5, np.uint32)
    backend.write(x, values, 6)
    values[:] = 9  # the caller may change its array once write returns
    assert backend.download(x, 6, 4).tolist() == [5] * 4
    backend.write(x, [])  # nothing
    f = backend.upload(np.zeros(3, np.float32))
    backend.write(f, np.array([np.nan, -0.0, 2.5], np.float32))
    got = backend.download(f)
    assert np.isnan(got[0]) and np.signbit(got[1]) and got[2] == 2.5
    for values, offset, why in (([1.5], 0, "do not all convert exactly"), ([-1], 0, "do not all convert exactly"),
                                ([1, 2], 9, "need 11 elements, but the buffer has 10"), ([1], -1, "offset"),
                                ([1], True, "offset"), ([[1, 2]], 0, "shape"), (["a"], 0, "Fix:")):
        with pytest.raises(DispatchError, match=why) as e:
            backend.write(x, values, offset)
        assert "Fix:" in str(e.value)
    assert backend.download(x).tolist() == [7, 2, 3, 101, 102, 6, 5, 5, 5, 5]  # the refused writes wrote nothing
    with pytest.raises(DispatchError, match="Fix:"):
        backend.write(np.zeros(3, np.uint32) if backend.name == "cuda" else [1, 2, 3], [1])
    big = backend.upload(np.arange(3, dtype=">i4"))  # uploaded in this machine's byte order, so write takes it
    backend.write(big, [9], 2)
    assert backend.download(big).tolist() == [0, 1, 9] and backend.download(big).dtype == np.int32
    if np.dtype(np.longdouble).itemsize > 8:  # where long double is wider than float64
        with pytest.raises(DispatchError, match="which no kernel reads. Fix: convert it to float64 or float32"):
            backend.upload(np.zeros(2, np.longdouble))
    if backend.name == "reference":
        with pytest.raises(DispatchError, match="MaskedArray is not a reference-backend buffer.*Fix:"):
            backend.write(np.ma.array(np.arange(3, dtype=np.int32), mask=[0, 1, 0]), [1])


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own
@pytest.mark.parametrize("make", [lambda a: np.ma.array(a, mask=[True, False, False]), lambda a: np.ma.array(a),
                                  lambda a: np.asmatrix(a)])
def test_a_resident_dispatch_refuses_what_write_refuses_as_a_buffer(make):
    """Regression: dispatch_resident on a masked array computed on the hidden values and dropped the mask."""
    from vyre_numba.reference import ReferenceBackend

    backend = ReferenceBackend()
    x = make(np.array([1000, 2, 3], np.uint32))
    y = np.zeros(3, np.uint32)
    for call in (lambda: backend.dispatch_resident(affine(), [x, y]), lambda: backend.write(x, [1]),
                 lambda: backend.dispatch_sequence([(affine(), [x, y])]), lambda: backend.download(x)):
        with pytest.raises(DispatchError, match=f"{type(x).__name__} is not a reference-backend buffer.*Fix: "):
            call()
    assert y.tolist() == [0, 0, 0] and np.asarray(x).tolist() in ([1000, 2, 3], [[1000, 2, 3]])


def test_transfers_and_fused_steps_labels_are_counted(backend):
    B = ir.BufferDecl
    i = ir.var("i")
    backend.reset_telemetry()
    buf = backend.upload(np.zeros(1000, np.uint32))
    backend.write(buf, np.ones(10, np.uint32))
    backend.download(buf, 0, 500)
    t = backend.telemetry()
    assert (t["bytes_uploaded"], t["bytes_read_back"]) == (4040, 2000)
    p0 = ir.Program([B.read("a", 0, "u32"), B.read_write("y", 1, "u32")], 32,
                    [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("a", i) + 1)])], name="p0")
    p1 = ir.Program([B.read("y", 0, "u32"), B.read_write("z", 1, "u32")], 32,
                    [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("z"), [ir.store("z", i, ir.load("y", i) * 2)])], name="p1")
    for fuse in (False, True):
        backend.reset_telemetry()
        a, y, z = backend.upload(np.arange(8, dtype=np.uint32)), backend.empty(8, np.uint32), backend.empty(8, np.uint32)
        steps = [(p0, [a, y], DispatchConfig(label="first")), (p1, [y, z], DispatchConfig(label="second"))]
        assert backend.dispatch_sequence(steps, [(z,)], fuse=fuse)[0].tolist() == list(range(2, 17, 2))
        t = backend.telemetry()
        assert (t["dispatches[first]"], t["dispatches[second]"]) == (1, 1)


def test_a_recorded_sequence_counts_only_replays_that_ran():
    from vyre_numba.reference import ReferenceBackend

    be = ReferenceBackend(work_budget=10**5)
    busy = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 32,
                      [ir.loop("k", 0, ir.load("x", 0), [ir.store("x", 1, ir.var("k"))])], name="busy")
    x = be.upload(np.array([3, 0], np.uint32))
    g = be.record_sequence([(busy, [x])])
    g.replay()
    be.write(x, [10**6])
    with pytest.raises(DispatchError, match="work budget"):
        g.replay()
    assert be.telemetry()["graph_replays"] == 1


@pytest.mark.parametrize("key", [["dispatches"], {}, set(), bytearray(b"x")])
def test_telemetry_refuses_a_key_that_cannot_name_a_counter_as_it_refuses_a_missing_one(key):
    t = vn.get_backend("reference").telemetry()
    for read in (lambda: t[key], lambda: t.get(key), lambda: t.get(key, 0)):
        with pytest.raises(UnknownNameError, match=r"has no counter.*counters are named by str\. Fix: use a name that "
                                                   r"list\(backend\.telemetry\(\)\) shows"):
            read()
    with pytest.raises(UnknownNameError, match=r"did you mean 'dispatches'.*Fix: use a name that "
                                               r"list\(backend\.telemetry\(\)\) shows \(vyre_numba\.backend\.TELEMETRY_KEYS"):
        t["dispatchs"]
    from vyre_numba.backend import TELEMETRY_KEYS  # where the Fix says
    assert set(TELEMETRY_KEYS) <= set(t)
    assert t.get("no such counter", 0) == 0 and t["dispatches"] == t.get("dispatches") >= 0


class _Len(list):
    """A list whose __len__ answers `length`, which len() refuses (negative, or past sys.maxsize)."""

    def __init__(self, items, length):
        super().__init__(items)
        self.length = length

    def __len__(self):
        return self.length


@pytest.mark.parametrize("length", [-1, 2**70])
@pytest.mark.parametrize("where", ["steps", "fused steps", "prefix", "body step", "read entry", "step",
                                   "megakernel step"])
def test_a_collection_whose_len_fails_is_refused_with_a_fix(backend, where, length):
    x = backend.upload(np.arange(4, dtype=np.uint32))
    step = (bump(), [x])
    bad = _Len(step, length)
    calls = {
        "steps": lambda: backend.dispatch_sequence(_Len([step], length)),
        "fused steps": lambda: backend.dispatch_sequence(_Len([step, step], length), fuse=True),
        "prefix": lambda: backend.dispatch_repeated(_Len([step], length), [step], 2),
        "body step": lambda: backend.dispatch_repeated([], [bad], 2),
        "read entry": lambda: backend.dispatch_sequence([step], [_Len([x], length)]),
        "step": lambda: backend.dispatch_sequence([bad]),
        "megakernel step": lambda: backend.megakernel([bad]),
    }
    with pytest.raises(DispatchError, match=r"len\(\) of the _Len given fails.*Fix:"):
        calls[where]()
    assert backend.download(x).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("length", [-1, 2**70])
def test_dispatch_inputs_whose_len_fails_are_refused_with_a_fix(backend, length):
    p = ir.Program([ir.BufferDecl.read("a", 0, "u32"), ir.BufferDecl.output("o", 1, "u32")], 32,
                   [ir.if_(ir.gid(0) < ir.buf_len("a"), [ir.store("o", ir.gid(0), ir.load("a", ir.gid(0)))])])
    with pytest.raises(DispatchError, match=r"len\(\) of the _Len of inputs fails.*Fix: pass a plain list"):
        backend.dispatch(p, _Len([np.arange(4, dtype=np.uint32)], length))


def test_empty_takes_vyre_types_as_their_storage(backend):
    """Regression (a red-team): empty(n, DataType.F32) and empty(n, 'f32') were refused as 'not a
    vyre type'."""
    for t, want in ((vn.DataType.F32, np.float32), ("f32", np.float32), ("bf16", np.uint16), ("bool", np.uint32),
                    (np.int8, np.int8)):
        assert backend.download(backend.empty(3, t)).dtype == want
    with pytest.raises(vn.VyreError, match=r"or a vyre type \('f32', 'bool'"):
        backend.empty(3, np.bool_)  # NumPy's one-byte bools are no vyre storage: said, not made uint32
    for clash, small, big in (("u8", "uint8", "uint64"), ("i8", "int8", "int64")):  # vyre's 8 bits, NumPy's 8 bytes
        with pytest.raises(vn.VyreError, match=f"Fix: say which: '{small}' or '{big}'"):
            backend.empty(3, clash)


def test_a_numpy_bool_array_for_a_bool_buffer_says_how_bools_are_stored(backend):
    """Regression (a red-team): it said "'m' is declared bool but the array holds bool"."""
    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.read("m", 0, "bool"), ir.BufferDecl.output("o", 1, "u32")], 64,
                   [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("o"), [
                       ir.store("o", i, ir.select(ir.load("m", i), ir.u32(1), ir.u32(0)))])])
    m, o = backend.upload(np.array([True, False, True])), backend.empty(3, np.uint32)
    with pytest.raises(vn.VyreError, match=r"'m' is declared bool \(stored as uint32: 0 or 1 in one word each\) but "
                                           r"the array holds bool\. Fix: upload x\.astype\(np\.uint32\) \(True is 1\)"):
        backend.dispatch_resident(p, [m, o])
    backend.dispatch_resident(p, [backend.upload(np.array([1, 0, 1], np.uint32)), o])
    assert backend.download(o).tolist() == [1, 0, 1]


def test_release_memory_and_device_timer_are_on_every_backend(backend):
    """Regression (an API review): both were CUDA's alone, so a notebook calling them on a GPU
    failed with AttributeError on a laptop."""
    backend.release_memory()
    dx = backend.upload(np.zeros(1000, np.uint32))
    with backend.device_timer() as t:
        backend.dispatch_resident(bump(), [dx])
    assert t.ns > 0 and backend.download(dx).tolist() == [1] * 1000 and f"{t.ns:,} ns" in repr(t)
    timer = backend.device_timer()
    with timer:
        pass
    with pytest.raises(DispatchError, match=r"entered already.*Fix: call backend.device_timer\(\) again") as e:
        with timer:  # a timer times one block (on the GPU its events are the spares' again once it is left)
            pass
    assert e.traceback[-1].name == "test_release_memory_and_device_timer_are_on_every_backend"
    assert repr(backend.device_timer()) == "<device_timer: not entered yet; `with` it for its Timer>"
    import copy
    import pickle

    fresh = backend.device_timer()  # a copy timed into the same Timer (on the GPU, the same events): a red-team
    for make in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(DispatchError, match=r"cannot be copied or pickled. Fix: call backend.device_timer\(\) "):
            make(fresh)
    with fresh as t:
        pass
    assert t.ns >= 0
    backend.release_memory()
    if backend.name == "reference":
        with pytest.raises(DispatchError, match="no streams.*Fix: leave stream out") as e:
            backend.device_timer(stream=1)  # refused at the call, not when the block is entered
        assert e.traceback[-1].name == "test_release_memory_and_device_timer_are_on_every_backend"
    else:
        from numba import cuda

        from vyre_numba.gpu.numba_launch import stream_handle

        for bad in ("s", 1.5, True, -1, object()):
            with pytest.raises(DispatchError, match="device_timer.*Fix: pass a Numba stream") as e:
                backend.device_timer(stream=bad)  # at the call, not when the block is entered
            assert e.traceback[-1].name == "test_release_memory_and_device_timer_are_on_every_backend"
        s = cuda.stream()
        for stream in (s, stream_handle(s)):  # a Numba stream, its driver handle
            with backend.device_timer(stream=stream) as t:
                dy = cuda.to_device(np.arange(1 << 20, dtype=np.uint32), stream=s)
            assert t.ns > 0 and dy.copy_to_host(stream=s)[-1] == (1 << 20) - 1


def test_upload_refuses_a_list_of_integers_numpy_reads_as_floats_and_empty_refuses_no_dtype(backend):
    """Regression (a red-team): [1, -1, 2**63] became a float64 buffer (exact, but no integers), and
    empty(3, None) a float64 one (NumPy reads None so)."""
    for values, fix in (([1, -1, 2**63], "keep them within one integer type's range"),
                        ([np.uint64(5), np.int64(-1)], r"np.array\(values, dtype=np.int64\)")):
        with pytest.raises(vn.DispatchError, match=f"list holds integers from -1.*Fix: .*{fix}"):
            backend.upload(values)
    assert backend.download(backend.upload(np.array([np.uint64(5), np.int64(-1)], dtype=np.int64))).tolist() == [5, -1]
    with pytest.raises(vn.DispatchError, match="dtype is None. Fix: name the element type"):
        backend.empty(3, None)


def test_telemetry_updates_whole_or_not_at_all_and_takes_pairs_with_or():
    t = vn.get_backend("reference").telemetry()
    with pytest.raises(vn.DispatchError, match="'bad' = 1.5.*Fix:"):
        t.update({"mine": 5, "bad": 1.5})
    assert "mine" not in t  # nothing of a refused update is stored
    assert (t | [("mine", 1)])["mine"] == 1
    assert t.pop("absent", 7) == 7
    with pytest.raises(vn.ArgumentError, match=r"Fix: call it as t.pop\(key\) or t.pop\(key, default\)"):
        t.pop("absent", 1, 2)


def test_named_tuple_make_fusion_hash_and_a_timer_left_by_an_error_say_what_they_do():
    from vyre_numba.backend import Step

    p = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64, [ir.store("x", ir.gid(0), 1)], name="p")
    with pytest.raises(vn.ArgumentError, match=r"Step._make\(\) takes one item for each of its fields.*Fix:"):
        Step._make([p, [1]])
    be = vn.get_backend("reference")
    fusion = be.fuse([(p, [be.upload(np.zeros(4, np.uint32))])])
    other = be.fuse([(p, [be.upload(np.zeros(4, np.uint32))])])
    # by identity: it holds arrays (== raised NumPy's ambiguous-truth ValueError, a red-team)
    assert fusion == fusion and fusion != other and len({fusion, other}) == 2
    a, b = Step(p, [np.zeros(4, np.uint32)]), Step(p, [np.zeros(4, np.uint32)])  # so are steps (a red-team)
    assert a == a and a != b and len({a, b}) == 2 and tuple(a) == tuple(a)
    assert a != tuple(a) and tuple(a) != a and not (a == tuple(a))  # a plain tuple too (tuple's == compared arrays)
    from vyre_numba.graph import CSR

    c = CSR(np.array([0, 1]), np.array([0]))  # the public CSR alike
    assert c == c and c != CSR(np.array([0, 1]), np.array([0])) and c != tuple(c) and len({c, c}) == 1
    with pytest.raises(ZeroDivisionError):
        with be.device_timer() as t:
            1 / 0
    with pytest.raises(vn.DispatchError, match=r"no time: its block was left by ZeroDivisionError, so the work in it "
                                               r"was not timed\. Fix: time a block that ends without an error\."):
        t.ns  # as on the GPU, whose events time no failed block (it read a time here, a review)
    timer = be.device_timer()
    with pytest.raises(vn.DispatchError, match=r"no time: its block has not ended yet\. Fix: read t\.ns after"):
        timer.ns  # not entered: not a silent 0 (a red-team: this was a raw AttributeError)
    with timer as t:
        with pytest.raises(vn.DispatchError, match=r"no time: its block has not ended yet"):
            t.ns  # inside the block
        assert "no time" in repr(t)
    assert timer.ns == t.ns >= 0 and f"{t.ns:,} ns" in repr(t)
