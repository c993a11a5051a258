"""Recorded graphs: record once, replay many times, on every backend (on the GPU a CUDA graph that
owns its stream and buffers; on the reference backend a re-dispatch). Replay must equal a plain
dispatch of the same inputs, bit for bit, and ownership must hold on every path."""
from __future__ import annotations

import gc
import re
import weakref

import numpy as np
import pytest

import vyre_numba as vn
from program_table import CASES
from races import assert_close_waits_for_users
from test_program_table import compare
from vyre_numba import DispatchConfig, ir
from vyre_numba.backend import Step
from vyre_numba.errors import DispatchError, UnsupportedError
from vyre_numba.testing import mismatches

B = ir.BufferDecl
BACKENDS = ["reference", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return vn.get_backend(request.param)


def affine() -> ir.Program:
    i = ir.var("i")
    return ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) * 3 + 1)])],
                      name="affine")


def bump() -> ir.Program:
    i = ir.var("i")
    return ir.Program([B.read_write("x", 0, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])],
                      name="bump")


def assert_same_bits(got, want, case=None) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        bad = mismatches(g, w, ulp=getattr(case, "ulp", 0) if case else 0)
        assert bad.size == 0, (case.id if case else "", bad[:8], g[bad[:8]], w[bad[:8]])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_replay_equals_dispatch_for_the_program_table(backend, case):
    """Replays give the table's expected outputs (which plain dispatch gives too), twice."""
    try:
        compare(case, backend.dispatch(case.program, case.inputs, case.config, sizes=case.sizes))
    except UnsupportedError:
        with pytest.raises(UnsupportedError):
            backend.record_graph(case.program, case.inputs, case.config, sizes=case.sizes)
        return
    with backend.record_graph(case.program, case.inputs, case.config, sizes=case.sizes) as g:
        compare(case, g.replay(case.inputs))
        compare(case, g.replay(case.inputs))  # replays leave nothing behind


def test_replay_takes_new_inputs_of_the_recorded_sizes(backend):
    rng = np.random.default_rng(1)
    with backend.record_graph(affine(), [np.zeros(1000, np.uint32)]) as g:
        for _ in range(3):
            x = rng.integers(0, 2**32, 1000, dtype=np.uint32)
            assert_same_bits(g.replay([x]), backend.dispatch(affine(), [x]))
            assert_same_bits(g.replay({"x": x}), [x * np.uint32(3) + np.uint32(1)])


@pytest.mark.parametrize("bad", [np.zeros(999, np.uint32), np.zeros(1001, np.uint32)])
def test_replay_of_another_size_says_to_record_again(backend, bad):
    with backend.record_graph(affine(), [np.zeros(1000, np.uint32)]) as g:
        with pytest.raises(DispatchError, match="record a new graph"):
            g.replay([bad])
        with pytest.raises(DispatchError, match="Fix:"):
            g.replay([np.zeros(1000, np.complex64)])
        assert g.replay([np.ones(1000, np.uint32)])[0].tolist() == [4] * 1000  # still usable


def test_a_bad_replay_or_recording_is_named_in_its_message(backend):
    """Regression (a red-team): a replay's refusal said "dispatch of 'affine': ..."."""
    with pytest.raises(DispatchError, match="^record_graph of 'affine': expected 1 input"):
        backend.record_graph(affine(), [])
    with backend.record_graph(affine(), [np.zeros(8, np.uint32)]) as g:
        for bad in ([], {"y": np.zeros(8, np.uint32)}):
            with pytest.raises(DispatchError, match="^replay of 'affine': .*Fix:"):
                g.replay(bad)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint16, np.int32])
def test_replay_of_another_dtype_says_to_record_again(backend, dtype):
    """A replay never converts: the recording took u32, so other dtypes (even ones whose values
    would convert exactly) are refused, and the graph stays usable."""
    with backend.record_graph(affine(), [np.zeros(1000, np.uint32)]) as g:
        with pytest.raises(DispatchError, match=r"dtypes differ.*Fix: .*record"):
            g.replay([np.ones(1000, dtype)])
        with pytest.raises(DispatchError, match="dtypes differ"):
            g.replay({"x": np.ones(1000, dtype)})
        assert g.replay([np.ones(1000, np.uint32)])[0].tolist() == [4] * 1000


def test_replay_takes_the_sample_dtype_it_was_recorded_with(backend):
    """Recorded from float32 values that convert exactly: float32 and the buffer's own u32 replay."""
    with backend.record_graph(affine(), [np.zeros(10, np.float32)]) as g:
        assert g.replay([np.full(10, 2, np.float32)])[0].tolist() == [7] * 10
        assert g.replay([np.full(10, 2, np.uint32)])[0].tolist() == [7] * 10
        with pytest.raises(DispatchError, match="dtypes differ"):
            g.replay([np.full(10, 2, np.float64)])


def test_a_replay_refusing_a_dtype_says_when_the_sample_had_none(backend):
    with backend.record_graph(affine(), [[0] * 10]) as g:
        with pytest.raises(DispatchError, match="recorded from values without a dtype.*Fix:"):
            g.replay([np.arange(10)])
        assert g.replay([list(range(10))])[0].tolist() == [k * 3 + 1 for k in range(10)]

    class Odd:  # a dtype property that raises: the value is bound (and refused) as dispatch would
        @property
        def dtype(self):
            raise RuntimeError("no dtype here")

    with pytest.raises(DispatchError, match="Fix:"):
        backend.record_graph(affine(), [Odd()])


def test_replay_resident_runs_the_kernels_over_its_own_buffers(backend):
    x = np.arange(300, dtype=np.uint32)
    with backend.record_graph(bump(), [x], DispatchConfig(fixpoint_iterations=3)) as g:
        assert g.replay_resident()[0].tolist() == (x + 3).tolist()
        assert g.replay_resident()[0].tolist() == (x + 6).tolist()  # state stays on the device
        assert g.replay_resident(read=False) == []
        g.synchronize()
        assert g.replay_resident()[0].tolist() == (x + 12).tolist()
        assert g.replay([x])[0].tolist() == (x + 3).tolist()       # replay copies the inputs in again
        assert g.replay_resident()[0].tolist() == (x + 6).tolist()  # ... into the buffers replay_resident runs over
        for bad in ("no", None, 0):
            with pytest.raises(DispatchError, match="is not a bool.*Fix:"):
                g.replay_resident(read=bad)
        assert g.replay_resident()[0].tolist() == (x + 9).tolist()  # the refused calls ran nothing


def test_fixpoint_iterations_replay(backend):
    x = np.arange(5000, dtype=np.uint32)
    config = DispatchConfig(fixpoint_iterations=100)
    with backend.record_graph(bump(), [x], config) as g:
        assert_same_bits(g.replay([x]), backend.dispatch(bump(), [x], config))
        assert g.replay([x + 7])[0][:3].tolist() == [107, 108, 109]


@pytest.mark.gpu
def test_gpu_graph_kernels_launched_programmatically_still_see_each_others_writes():
    """A graph of many launches runs them with programmatic dependent launch where the GPU has it:
    each kernel waits on entry for the one before, so no increment of 16,384 blocks is lost."""
    backend = vn.get_backend("cuda")
    x = np.arange(1 << 20, dtype=np.uint32)
    config = DispatchConfig(fixpoint_iterations=100)
    with backend.record_graph(bump(), [x], config) as g:
        assert g.plan.programmatic == (backend.caps.sm >= 90)
        assert g.replay_resident()[0].tolist() == (x + 100).tolist()
        assert g.replay_resident()[0].tolist() == (x + 200).tolist()
        assert_same_bits(g.replay([x]), backend.dispatch(bump(), [x], config))


def test_a_programmatic_launch_reshaped_launches_its_own_geometry():
    pytest.importorskip("cuda.bindings")
    from vyre_numba.gpu.launch import KernelLaunch, LaunchShape

    first = KernelLaunch(0, "k", LaunchShape((4, 1, 1), (256, 1, 1)), 1, programmatic=True)
    again = first.reshaped(LaunchShape((9, 1, 1), (128, 1, 1), 64))
    cfg, cfg0 = again._ex[1], first._ex[1]
    assert (cfg.gridDimX, cfg.blockDimX, cfg.sharedMemBytes) == (9, 128, 64)
    assert (cfg0.gridDimX, cfg0.blockDimX, cfg0.sharedMemBytes) == (4, 256, 0)
    assert KernelLaunch(0, "k", LaunchShape((4, 1, 1), (256, 1, 1)), 1).reshaped(
        LaunchShape((9, 1, 1), (128, 1, 1)))._ex is None


def test_programmatic_ptx_waits_before_the_first_instruction_of_every_table_program():
    from vyre_numba.gpu.launch import programmatic_ptx
    from vyre_numba.ptx import assemble

    for case in CASES[::7]:
        ptx = programmatic_ptx(case.program.ptx())
        body = ptx[ptx.index("{", ptx.index(".entry")):].split("\n")
        first = next(line.strip() for line in body[1:] if line.strip() and not line.strip().startswith((".", "//")))
        assert first == "griddepcontrol.launch_dependents;", (case.id, first)
        assert ptx.count("griddepcontrol.wait;") == 1
        assert assemble(ptx, sm=90)


def test_recorded_sequence_replays_the_steps(backend):
    x = backend.upload(np.arange(256, dtype=np.uint32))
    y = backend.allocate(affine(), "y", 256)
    steps = [(bump(), [x])] * 9 + [(affine(), [x, y])]
    with backend.record_sequence(steps, read=[(y, 0, 4), (x,)]) as g:
        first = g.replay()
        assert first[0].tolist() == [(k + 9) * 3 + 1 for k in range(4)]
        second = g.replay()
        assert second[0].tolist() == [(k + 18) * 3 + 1 for k in range(4)]
        assert second[1].tolist() == (np.arange(256) + 18).tolist()
        with pytest.raises(DispatchError, match="takes no inputs"):
            g.replay([np.zeros(3)])
        with pytest.raises(DispatchError, match="is not a bool.*Fix:"):
            g.replay_resident(read="no")
    plain = backend.upload(np.arange(256, dtype=np.uint32))
    out = backend.dispatch_sequence([(bump(), [plain])] * 18, read=[(plain,)])
    assert out[0].tolist() == second[1].tolist()


def test_a_reference_replay_that_fails_leaves_the_buffers_as_they_were(monkeypatch):
    backend = vn.get_backend("reference")
    x = np.arange(50, dtype=np.uint32)
    with backend.record_graph(bump(), [x], DispatchConfig(fixpoint_iterations=2)) as g:
        g.replay_resident()
        before = {k: v.copy() for k, v in g.buffers.items()}

        def fails(*args, **kwargs):
            raise DispatchError("the run failed. Fix: none needed, the test made it fail.")

        monkeypatch.setattr(backend, "dispatch_resident", fails)
        with pytest.raises(DispatchError, match="the run failed"):
            g.replay([x + 100])
        assert all(np.array_equal(g.buffers[k], v) for k, v in before.items())
        monkeypatch.undo()
        assert g.replay_resident()[0].tolist() == (x + 4).tolist()


def test_the_reference_running_out_of_host_memory_says_so_with_a_fix(monkeypatch):
    from vyre_numba.errors import HostMemoryError
    from vyre_numba.reference import resident

    backend = vn.get_backend("reference")
    x = np.arange(50, dtype=np.uint32)
    with backend.record_graph(bump(), [x]) as g:
        before = {k: v.copy() for k, v in g.buffers.items()}

        def no_room(*args, **kwargs):
            raise MemoryError()

        monkeypatch.setattr(resident, "dispatch_resident", no_room)
        for call in (lambda: g.replay([x + 5]), g.replay_resident, lambda: backend.dispatch_resident(bump(), [x])):
            with pytest.raises(HostMemoryError, match="host memory.*Fix:"):
                call()
        assert all(np.array_equal(g.buffers[k], v) for k, v in before.items())
        monkeypatch.setattr(np, "array", no_room)
        with pytest.raises(HostMemoryError, match="upload ran out of host memory.*Fix:"):
            backend.upload(x)


def test_closed_graph_refuses_and_closes_once(backend):
    g = backend.record_graph(affine(), [np.zeros(10, np.uint32)])
    g.close()
    g.close()
    assert g.closed
    with pytest.raises(DispatchError, match="closed.*Fix:"):
        g.replay([np.zeros(10, np.uint32)])
    with pytest.raises(DispatchError, match="closed"):
        g.replay_resident()


@pytest.mark.parametrize("sequence", [False, True])
def test_a_close_from_another_thread_waits_for_the_replay_in_flight(backend, sequence):
    """Replays racing a close either finish with the right result or are refused as closed; none
    runs over released buffers, and synchronize after the close has nothing to wait for."""
    x = np.arange(4096, dtype=np.uint32)
    if sequence:
        buf = backend.upload(x)
        g = backend.record_sequence([(bump(), [buf])], read=[(buf,)])
    else:
        g = backend.record_graph(affine(), [x])

    def use() -> bool:
        out = g.replay_resident() if sequence else g.replay([x])
        return sequence or np.array_equal(out[0], x * 3 + 1)  # a sequence's bumps depend on the interleaving

    assert_close_waits_for_users(use, g.close, "closed", uses=200)
    g.synchronize()
    with pytest.raises(DispatchError, match="closed"):
        g.replay_resident()


def test_a_sequence_is_checked_when_recorded_and_keeps_the_buffers_it_was_given(backend):
    x = backend.upload(np.arange(8, dtype=np.uint32))
    bad = backend.upload(np.zeros(8, np.float32))
    for steps, why in (([(bump(), [x]), (bump(), [bad])], "declared u32"), ([(bump(), [x]), (bump(), [])], "Fix:"),
                       ([(bump(), [x, x])], "Fix:")):
        with pytest.raises(DispatchError, match=why):
            backend.record_sequence(steps, read=[(x,)])
    assert backend.download(x).tolist() == list(range(8))  # nothing ran
    y = backend.upload(np.zeros(8, dtype=np.uint32))
    bufs = [x]
    with backend.record_sequence([(bump(), bufs)], read=[(x,)]) as g:
        bufs[0] = y  # the caller's list changes after the recording: the recording does not
        assert g.replay()[0].tolist() == list(range(1, 9))
    assert backend.download(y).tolist() == [0] * 8


def test_a_recordings_buffers_cannot_be_replaced_only_written(backend):
    x = np.arange(10, dtype=np.uint32)
    with backend.record_graph(affine(), [x]) as g:
        for change in (lambda: g.buffers.__setitem__("x", backend.upload(x)), lambda: g.buffers.__delitem__("x"),
                       lambda: setattr(g, "buffers", None)):
            with pytest.raises(DispatchError, match="Fix: write"):
                change()
        assert sorted(g.buffers) == ["x", "y"] and len(g.buffers) == 2
        backend.write(g.buffers["x"], np.full(10, 2, np.uint32))
        assert g.replay_resident()[0].tolist() == [7] * 10
    buf = backend.upload(x)
    with backend.record_sequence([(bump(), [buf])], read=[(buf,)]) as s:
        assert len(s.buffers) == 1 and s.buffers[0]["x"] is buf


def test_a_sequences_buffers_are_each_steps_by_name_and_read_only(backend):
    """Regression: a recorded sequence's buffers were the caller's lists and dicts as given, so
    s.buffers['x'] was a raw TypeError and s.buffers[0]['x'] = y was accepted, and the reference
    replay then ran over y while a CUDA graph keeps the captured buffers (the backends diverged)."""
    from vyre_numba.errors import UnknownBufferError

    x = backend.upload(np.arange(8, dtype=np.uint32))
    y = backend.upload(np.zeros(8, dtype=np.uint32))
    given = {"x": x}
    with backend.record_sequence([(bump(), given), (affine(), [x, y])], read=[(x,), (y,)]) as s:
        given["x"] = y  # the caller's dict changes after the recording: the recording does not
        assert len(s.buffers) == 2 and s.buffers[0]["x"] is x
        assert dict(s.buffers[1]) == {"x": x, "y": y} and list(s.buffers[1]) == ["x", "y"]
        assert s.buffers[-1]["y"] is y and s.buffers[:1][0]["x"] is x
        for change in (lambda: s.buffers[0].__setitem__("x", y), lambda: s.buffers[1].__delitem__("y"),
                       lambda: setattr(s, "buffers", ())):
            with pytest.raises(DispatchError, match="Fix: write"):
                change()
        with pytest.raises(UnknownBufferError,
                           match=r"one mapping per step.*steps 0, 1 bind 'x'\. Fix: s\.buffers\[0\]\['x'\]"):
            s.buffers["x"]
        with pytest.raises(UnknownBufferError,
                           match=r"not by 'z'; no step binds it; they bind \[\['x'\], \['x', 'y'\]\]"):
            s.buffers["z"]
        for flag in (True, np.True_):  # True read as step 1 (a bool is no step number anywhere else)
            with pytest.raises(UnknownBufferError, match=r"indexed by the step's number, not by (np\.)?True"):
                s.buffers[flag]
        with pytest.raises(UnknownBufferError,
                           match=r"s\.buffers\[1\] .*no buffer 'z'; its buffers are \['x', 'y'\]\. Fix:"):
            s.buffers[1]["z"]
        assert repr(s.buffers) == "({'x': uint32[8]}, {'x': uint32[8], 'y': uint32[8]})"  # not their values
        odd = memoryview(bytearray(b"x"))  # its hash raises ValueError, not TypeError
        for lookup in (lambda: s.buffers[1][odd], lambda: s.buffers[1].get(odd, 0), lambda: s.buffers[odd]):
            try:
                assert lookup() == 0
            except UnknownBufferError as e:
                assert "Fix:" in str(e)
        assert odd not in s.buffers[1]
        out = s.replay()
        assert out[0].tolist() == list(range(1, 9)) and out[1].tolist() == [3 * v + 1 for v in range(1, 9)]
        assert backend.download(y).tolist() == out[1].tolist()  # affine wrote y, bump never ran over it
    with pytest.raises(UnknownBufferError, match="it holds none: it is closed.*Fix: record again"):
        s.buffers["x"]
    assert len(s.buffers) == 0


def test_the_cuda_sequence_pins_each_steps_buffers_by_name_before_capturing(monkeypatch):
    """The CUDA recording shares the reference one's pinning (runs on the CPU: a fake driver that
    fails at the first stream, after the buffers are pinned)."""
    import types

    from vyre_numba.gpu import cudagraph

    calls = []
    fake = types.SimpleNamespace(_drv=types.SimpleNamespace(), _cuda=None, release_memory=lambda: None,
                                 _ensure_context=lambda: None, _reads=list,
                                 _prepare=lambda program, config, buffers: calls.append(buffers))
    x, y = object(), object()
    given = {"x": x}
    seq = object.__new__(cudagraph.CudaRecordedSequence)
    with pytest.raises(vn.DeviceError, match="recording the sequence failed"):
        seq.__init__(fake, [(bump(), given), (affine(), (x, y))])
    given["x"] = y
    assert calls[0] == (x,)  # compiled for the buffers pinned, in binding order (pinned before compiling)
    assert isinstance(seq.buffers, cudagraph.StepBuffers) and seq.buffers[0]["x"] is x
    assert dict(seq.buffers[1]) == {"x": x, "y": y}
    with pytest.raises(DispatchError, match="Fix: write"):
        seq.buffers[0]["x"] = y
    with pytest.raises(vn.VyreError, match=r"Fix: s\.buffers\[0\]\['x'\]"):
        seq.buffers["x"]
    with pytest.raises(DispatchError, match=r"expected 2 buffers.*Fix:"):
        object.__new__(cudagraph.CudaRecordedSequence).__init__(fake, [(affine(), [x])])


def test_an_unknown_or_closed_recordings_buffer_is_a_vyre_error_naming_the_buffers(backend):
    """Regression: g.buffers['X'] and any name after close() raised a bare KeyError."""
    from vyre_numba.errors import UnknownBufferError

    g = backend.record_graph(affine(), [np.arange(10, dtype=np.uint32)])
    with pytest.raises(UnknownBufferError, match=r"no buffer 'X'; its buffers are \['x', 'y'\]\. Fix: "):
        g.buffers["X"]
    assert "X" not in g.buffers and g.buffers.get("X") is None and "x" in g.buffers  # still a mapping
    g.close()
    with pytest.raises(KeyError, match="no buffer 'x'; it holds none: it is closed.*Fix: record again"):
        g.buffers["x"]


def test_telemetry_counts_recordings_and_replays(backend):
    backend.reset_telemetry()
    with backend.record_graph(affine(), [np.zeros(10, np.uint32)]) as g:
        g.replay([np.zeros(10, np.uint32)])
        g.replay_resident()
    t = backend.telemetry()
    assert t["graph_recordings"] == 1 and t["graph_replays"] == 2


def test_a_replay_counts_as_a_replay_on_every_backend(backend):
    """Regression (a review): the reference backend's replays ran dispatch_resident and download,
    so they counted resident_dispatches and bytes_read_back, which the GPU's graph replays do not."""
    seen = lambda: {k: v for k, v in backend.telemetry().items()  # noqa: E731  (the caches' counts are the GPU's own)
                    if v and k != "kernel_launches" and "cache" not in k}
    launches = 1 if backend.name == "cuda" else 0
    backend.reset_telemetry()
    with backend.record_graph(affine(), [np.zeros(10, np.uint32)], DispatchConfig(label="aff")) as g:
        assert seen() == {"graph_recordings": 1}  # the recording, not its buffers' uploads
        backend.reset_telemetry()
        g.replay([np.arange(10, dtype=np.uint32)])
        assert seen() == {"graph_replays": 1, "dispatches[aff]": 1, "sync_points": 1, "bytes_moved_by_graphs": 80}
        assert backend.telemetry()["kernel_launches"] == launches
        backend.reset_telemetry()
        assert g.replay_resident(read=False) == []
        g.synchronize()
        assert seen() == {"graph_replays": 1, "dispatches[aff]": 1}
    x, y = backend.upload(np.arange(10, dtype=np.uint32)), backend.empty(10, "u32")
    with backend.record_sequence([Step(affine(), [x, y], DispatchConfig(label="s"))], read=[y]) as s:
        backend.reset_telemetry()
        assert s.replay()[0].tolist() == [3 * k + 1 for k in range(10)]
        assert seen() == {"graph_replays": 1, "dispatches[s]": 1, "sync_points": 1}


# ---- the GPU's own: ownership of driver resources --------------------------------------------

def _free_bytes() -> int:
    from cuda.bindings import driver as drv

    backend = vn.get_backend("cuda")
    backend.synchronize()
    gc.collect()
    backend.release_memory()
    err, free, _ = drv.cuMemGetInfo()
    return free


def _released(g) -> bool:
    """Whether everything recording `g` owns is gone: graphs closed, stream destroyed, buffers dropped."""
    owned = g._owned
    return owned.released and owned.stream is None and not owned.device and not owned.pinned and not owned.held


@pytest.mark.gpu
def test_cuda_graphs_release_what_they_own_on_close_exit_and_collection():
    import weakref

    backend = vn.get_backend("cuda")
    x = np.zeros(1 << 20, np.uint32)
    g = backend.record_graph(affine(), [x])
    graphs, buffers = list(g._owned.graphs), weakref.ref(g._set.device)
    assert graphs and not any(gr.is_closed for gr in graphs)
    g.close()
    assert _released(g) and all(gr.is_closed for gr in graphs) and buffers() is None
    with backend.record_graph(affine(), [x]) as g2:
        owned = g2._owned
    assert _released(g2)
    g3 = backend.record_graph(affine(), [x])
    owned3 = g3._owned
    del g3  # the finaliser releases it
    gc.collect()
    assert owned3.released and owned3.stream is None
    s = backend.record_sequence([(bump(), [backend.upload(x)])], read=[])
    held = s._owned
    s.close()
    assert held.released and not held.held


@pytest.mark.gpu
def test_cuda_recording_and_closing_many_graphs_does_not_grow_memory():
    backend = vn.get_backend("cuda")
    x = np.zeros(1 << 22, np.uint32)  # 32 MiB of buffers a graph
    for _ in range(3):
        backend.record_graph(affine(), [x]).close()
    base = _free_bytes()
    for _ in range(20):
        with backend.record_graph(affine(), [x]) as g:
            g.replay([x])
    assert _free_bytes() >= base - (100 << 20)  # a pool may keep a few graphs' worth; 20 leaked would be 640 MiB


@pytest.mark.gpu
def test_cuda_failed_recording_leaks_nothing(monkeypatch):
    backend = vn.get_backend("cuda")
    x = backend.upload(np.arange(1 << 20, dtype=np.uint32))
    bad = backend.upload(np.arange(1 << 20, dtype=np.float32))  # the wrong dtype for bump
    from vyre_numba.gpu import cudagraph, host

    made = []
    real = cudagraph._Owned.__init__

    def spy(self, *a, **k):
        real(self, *a, **k)
        made.append(self)
    monkeypatch.setattr(cudagraph._Owned, "__init__", spy)
    before = backend.telemetry().get("graph_recordings", 0)
    with pytest.raises(DispatchError, match="declared u32"):
        backend.record_sequence([(bump(), [x]), (bump(), [x]), (bump(), [bad])], read=[(x, 0, 4)])

    def boom(*a, **k):
        raise RuntimeError("injected failure while capturing")
    monkeypatch.setattr(host.HostPlan, "enqueue", boom)
    with pytest.raises(vn.DeviceError, match="injected failure"):
        backend.record_graph(affine(), [np.zeros(1 << 20, np.uint32)])
    before_free = _free_bytes()
    for _ in range(8):  # 8 failed recordings of 8 MiB of buffers each: memory must come back
        with pytest.raises(vn.DeviceError, match="injected failure"):
            backend.record_graph(affine(), [np.zeros(1 << 20, np.uint32)])
    assert _free_bytes() >= before_free - (32 << 20)
    monkeypatch.undo()
    assert len(made) == 10 and all(o.released and o.stream is None and not o.device and not o.held for o in made)
    assert backend.telemetry().get("graph_recordings", 0) == before
    assert backend.download(x, 0, 2).tolist() == [0, 1]  # the context is healthy; the sequence never ran


@pytest.mark.gpu
def test_cuda_cooperative_recording_works_or_says_why():
    backend = vn.get_backend("cuda")
    x = np.arange(4096, dtype=np.uint32)
    config = DispatchConfig(cooperative=True)
    try:
        g = backend.record_graph(bump(), [x], config)
    except UnsupportedError as e:
        assert "cooperative" in str(e) and "Fix:" in str(e)
        return
    with g:
        assert g.replay([x])[0].tolist() == (x + 1).tolist()


@pytest.mark.gpu
def test_cuda_graph_buffers_are_device_arrays_for_replay_resident():
    backend = vn.get_backend("cuda")
    from numba import cuda

    with backend.record_graph(affine(), [np.zeros(64, np.uint32)]) as g:
        assert set(g.buffers) == {"x", "y"} and g.buffers["x"].dtype == np.uint32
        g.buffers["x"].copy_to_device(np.arange(64, dtype=np.uint32))
        cuda.synchronize()
        assert g.replay_resident()[0].tolist() == (np.arange(64) * 3 + 1).tolist()


def test_owners_refuse_copies_that_would_release_what_they_hold_twice(backend):
    import copy
    import pickle

    from vyre_numba.egraph import EGraph

    x = backend.upload(np.arange(8, dtype=np.uint32))
    owners = [backend.record_graph(bump(), [np.arange(8, dtype=np.uint32)]),
              backend.record_sequence([(bump(), [x])], read=[(x,)]),
              backend.megakernel([(bump(), [x])], read=[(x,)]),
              EGraph.from_terms(["a", ("f", "a")], backend="reference")]
    for owner in owners:
        for make_copy in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(DispatchError, match="cannot be copied or pickled.*Fix:"):
                make_copy(owner)
        owner.close()
        assert "closed" in repr(owner), repr(owner)


def test_a_reference_replay_refuses_a_read_only_buffer_and_keeps_a_completed_run_whole(monkeypatch):
    """Regressions (a red-team): a recording's buffer made read-only gave a raw ValueError; a replay
    interrupted while reading back put its inputs back but kept the run's outputs (x before, y after)."""
    be = vn.get_backend("reference")
    g = be.record_graph(affine(), [np.zeros(8, np.uint32)])
    g.buffers["x"].flags.writeable = False
    with pytest.raises(DispatchError, match="'x' was made read-only.*Fix:"):
        g.replay([np.ones(8, np.uint32)])
    g.buffers["x"].flags.writeable = True
    real = be.download

    def interrupted(buf):
        raise KeyboardInterrupt

    monkeypatch.setattr(be, "download", interrupted)
    with pytest.raises(KeyboardInterrupt) as e:
        g.replay([np.full(8, 5, np.uint32)])
    monkeypatch.setattr(be, "download", real)
    assert "the run completed, and its inputs and results stay" in "".join(getattr(e.value, "__notes__", []))
    assert g.buffers["x"].tolist() == [5] * 8 and g.buffers["y"].tolist() == [16] * 8  # one state, not half of two
    real_count = type(be)._count

    def count(self, **kw):  # an interrupt after the run, before the replay is counted
        if "graph_replays" in kw:
            raise KeyboardInterrupt
        return real_count(self, **kw)

    monkeypatch.setattr(type(be), "_count", count)
    with pytest.raises(KeyboardInterrupt) as e:
        g.replay([np.full(8, 7, np.uint32)])
    monkeypatch.setattr(type(be), "_count", real_count)
    assert "the run completed" in "".join(getattr(e.value, "__notes__", []))
    assert g.buffers["x"].tolist() == [7] * 8 and g.buffers["y"].tolist() == [22] * 8
    g.close()


def test_a_reference_replay_interrupted_as_its_run_returns_puts_back_every_buffer(monkeypatch):
    """Regression (a red-team): an interrupt after the run's own all-or-nothing (in its counting)
    put the inputs back but left the new outputs: x of one replay beside y of the next."""
    be = vn.get_backend("reference")
    g = be.record_graph(affine(), [np.zeros(8, np.uint32)])
    g.replay([np.arange(8, dtype=np.uint32)])
    real = be.dispatch_resident

    def interrupted(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(be, "dispatch_resident", interrupted)
    with pytest.raises(KeyboardInterrupt):
        g.replay([np.full(8, 100, np.uint32)])
    monkeypatch.setattr(be, "dispatch_resident", real)
    assert g.buffers["x"].tolist() == list(range(8)) and g.buffers["y"].tolist() == [3 * i + 1 for i in range(8)]
    g.close()


def test_a_recordings_buffer_mappings_compare_hash_and_copy_without_raw_errors():
    """Regression (a red-team): == of two mappings and `in`/count of a step's mapping raised NumPy's
    ambiguous-truth ValueError, hash() and | a bare TypeError, .copy() an AttributeError. Two
    mappings are equal where they bind the same names to the same buffers."""
    be = vn.get_backend("reference")
    g1, g2 = (be.record_graph(affine(), [np.zeros(4, np.uint32)]) for _ in range(2))
    assert g1.buffers != g2.buffers and g1.buffers == g1.buffers and hash(g1.buffers) == hash(g1.buffers)
    assert g1.buffers == dict(g1.buffers) and g1.buffers.copy() == dict(g1.buffers)
    assert set(g1.buffers | {"z": 1}) == {"x", "y", "z"} and set({"z": 1} | g1.buffers) == {"x", "y", "z"}
    assert set(g1.buffers | g2.buffers) == {"x", "y"}  # a mapping that is no dict too
    x, y = be.upload(np.zeros(4, np.uint32)), be.upload(np.zeros(4, np.uint32))
    s1 = be.record_sequence([(bump(), [x]), (bump(), [y])], [(x,)])
    s2 = be.record_sequence([(bump(), [y])], [(y,)])
    assert s2.buffers[0] in s1.buffers and s1.buffers.count(s2.buffers[0]) == 1 and s1.buffers.index(s2.buffers[0]) == 1
    assert len({s1.buffers, s1.buffers}) == 1
    for r in (g1, g2, s1, s2):
        r.close()


def test_a_recordings_and_megakernels_methods_and_settings_are_guarded_as_the_backends_are():
    """Regression (a red-team): their own __setattr__ made the guard see vyre-numba as the caller,
    so g.close = 5, a misspelt g.bufers and mk.max_round = 3 were taken silently; del of an
    attribute never set passed (megakernel) or was a raw AttributeError."""
    from vyre_numba.errors import ImmutableError

    be = vn.get_backend("reference")
    g = be.record_graph(affine(), [np.zeros(4, np.uint32)])
    x = be.upload(np.zeros(4, np.uint32))
    mk = be.megakernel([(bump(), [x])], [(x,)])
    for obj, name, value, said in ((g, "close", 5, "is a method"), (g, "bufers", {}, "did you mean 'buffers'"),
                                   (mk, "run", None, "is a method"), (mk, "max_round", 3, "did you mean 'max_rounds'")):
        with pytest.raises(ImmutableError, match=rf"{said}.*Fix:"):
            setattr(obj, name, value)
    for obj in (g, mk):
        with pytest.raises(ImmutableError, match=r"has no attribute 'nothing_here' of its own to delete\. Fix:"):
            del obj.nothing_here
        obj.note = "mine"  # a value of one's own is kept, and deleted
        del obj.note
    assert mk.run().outputs[0].tolist() == [1] * 4
    g.close()
    mk.close()


@pytest.mark.gpu
def test_gpu_a_recording_keeps_no_reference_to_the_callers_sample():
    """Regression (a review): the CUDA recording kept its sample binding, whose arrays are the
    caller's inputs (bound without a copy), for its whole life and after close."""
    be = vn.get_backend("cuda")
    x = np.zeros(8, np.uint32)
    probe = weakref.ref(x)
    g = be.record_graph(affine(), [x])
    assert g.binding.arrays == {} and g.binding.sizes["x"] == 8
    del x
    gc.collect()
    assert probe() is None
    assert g.replay([np.ones(8, np.uint32)])[0].tolist() == [4] * 8
    g.close()


def test_a_closed_reference_recording_lets_go_of_its_data():
    """Regression (a red-team): a recording kept its sample binding's arrays (a copy of every
    written buffer and the caller's inputs) after close, and twice the data while open."""
    be = vn.get_backend("reference")
    x = np.zeros(8, np.uint32)
    g = be.record_graph(affine(), [x])
    assert g.binding.arrays == {} and g.binding.sizes["x"] == 8
    probe = weakref.ref(g.buffers["x"])
    assert g.replay([np.ones(8, np.uint32)])[0].tolist() == [4] * 8
    g.close()
    gc.collect()
    assert probe() is None


def test_a_closed_reference_sequence_lets_go_of_the_buffers_it_reads():
    """Regression (a red-team): close() kept `read`, and with it every buffer a read names."""
    be = vn.get_backend("reference")
    y = be.upload(np.arange(64, dtype=np.uint32))
    s = be.record_sequence([(bump(), [y])], [(y, 0, 4)])
    assert s.replay()[0].tolist() == [1, 2, 3, 4]
    probe = weakref.ref(y)
    del y
    s.close()
    gc.collect()
    assert probe() is None


@pytest.mark.parametrize("change,what", [
    (lambda b: setattr(b["y"].flags, "writeable", False), "'y' was made read-only"),
    (lambda b: setattr(b["x"], "shape", (2, 4)), r"'x' was reshaped to \(2, 4\)"),
    (lambda b: setattr(b["y"], "dtype", np.int32), "'y' was given dtype int32"),
])
def test_a_reference_replay_names_a_change_to_the_recordings_own_buffers(change, what):
    """Regression (a red-team): a read-only output was blamed on dispatch_resident ("pass a
    writeable array"), a reshaped buffer raised a raw ValueError, and replay_resident checked none."""
    be = vn.get_backend("reference")
    g = be.record_graph(affine(), [np.zeros(8, np.uint32)])
    change(g.buffers)
    before = {k: v.copy() for k, v in g.buffers.items()}
    for call in (lambda: g.replay([np.ones(8, np.uint32)]), g.replay_resident):
        with pytest.raises(DispatchError, match=f"replay.*: the recording's buffer {what}.*Fix: record again"):
            call()
    assert all(np.array_equal(before[k], v) for k, v in g.buffers.items())


def test_recordings_of_more_launches_than_a_graph_should_hold_are_refused_before_any_capture(backend):
    """Regression (a red-team): fixpoint_iterations up to 2**31 - 1 were captured on the GPU one
    launch and one graph node each, twice: billions of driver calls before anything was refused."""
    from vyre_numba.errors import LaunchError
    from vyre_numba.recording import MAX_RECORDED_LAUNCHES

    x = np.arange(10, dtype=np.uint32)
    many = DispatchConfig(fixpoint_iterations=MAX_RECORDED_LAUNCHES + 1)
    with pytest.raises(LaunchError, match=rf"record_graph of 'bump'.*make {MAX_RECORDED_LAUNCHES + 1}.*Fix: record "
                                          rf"at most {MAX_RECORDED_LAUNCHES} launches"):
        backend.record_graph(bump(), [x], many)
    with pytest.raises(LaunchError, match=r"record_sequence: .*make 65538.*Fix:"):
        backend.record_sequence([(bump(), [backend.upload(x)], DispatchConfig(fixpoint_iterations=2**15 + 1))] * 2)
    with backend.record_graph(bump(), [x], DispatchConfig(fixpoint_iterations=3)) as g:  # within it: recorded
        assert g.replay([x])[0].tolist() == (x + 3).tolist()


def test_an_interrupt_anywhere_in_a_replay_leaves_the_recording_usable():
    """Regression (a red-team): a Ctrl-C landing as the generator context manager around a
    replay's lock returned left the lock held, so later replays and close() hung. An interrupt is
    modelled at each line and return of the recording's code and contextlib's, except the line
    event of a `with` statement's own exit, which no Python code can guard (CPython bpo-29988)."""
    import contextlib
    import linecache
    import sys

    from vyre_numba import recording

    be = vn.get_backend("reference")
    x = be.upload(np.arange(8, dtype=np.uint32))
    watched = {recording.__file__, contextlib.__file__}
    for make in (lambda: be.record_sequence([(bump(), [x])], [(x, 0, 1)]), lambda: be.record_graph(affine(), [x])):
        rec = make()
        for k in range(200):
            seen = [0]

            def tracer(frame, event, arg):
                if frame.f_code.co_filename not in watched:
                    return None

                def local(frame, event, arg):
                    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
                    if event == "return" or event == "line" and not text.startswith("with "):
                        seen[0] += 1
                        if seen[0] == k:
                            raise KeyboardInterrupt
                    return local
                return local
            sys.settrace(tracer)
            try:
                rec.replay() if isinstance(rec, recording.RecordedSequence) else rec.replay([np.ones(8, np.uint32)])
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
            assert rec._lock.acquire(timeout=5), f"the lock was left held by an interrupt at event {k}"
            rec._lock.release()
            if seen[0] < k:  # the interrupt came after the call ended: every point was tried
                break
        rec.close()
        assert rec.closed


def test_replay_resident_runs_with_a_read_only_input_it_never_writes():
    """Regression (the session's review): the own-buffer check refused every read-only buffer, though
    replay_resident writes only what the program writes (replay copies the inputs in: refused)."""
    be = vn.get_backend("reference")
    g = be.record_graph(affine(), [np.arange(8, dtype=np.uint32)])
    g.buffers["x"].flags.writeable = False
    assert g.replay_resident()[0].tolist() == (np.arange(8) * 3 + 1).tolist()
    with pytest.raises(DispatchError, match="replay: the recording's buffer 'x' was made read-only"):
        g.replay([np.ones(8, np.uint32)])


@pytest.mark.parametrize("change, said", [(lambda b: setattr(b, "dtype", np.float32), "given dtype float32"),
                                          (lambda b: setattr(b, "shape", (2, 2)), "reshaped to (2, 2)")])
def test_a_recorded_sequence_refuses_a_buffer_retyped_in_place_before_any_step_runs(change, said):
    """Regression (a red-team): step 0 ran, and its writes stayed, before step 1's retyped buffer
    was refused, with a Fix (allocate it) that a recording, whose buffers are pinned, cannot take."""
    be = vn.get_backend("reference")
    i = ir.gid(0)
    inc = ir.Program([B.read_write("y", 0, "u32")], 32,
                     [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("y", i) + 1)])], name="inc")
    a, b = be.upload(np.zeros(4, np.uint32)), be.upload(np.zeros(4, np.uint32))
    s = be.record_sequence([(inc, [a]), (inc, [b])], [a, b])
    change(b)
    with pytest.raises(DispatchError, match=rf"^replay: step 1's buffer 'y' was {re.escape(said)} since it was "
                                            r"recorded \(nothing ran\)\. Fix: record again"):
        s.replay()
    assert be.download(a).tolist() == [0] * 4


def test_a_reference_replay_reads_inputs_that_are_views_of_its_own_buffers_as_given():
    """Regression (a red-team): inputs were copied into the buffers one by one, so an input that
    was a view of a buffer written before it read the new value."""
    i = ir.var("i")
    p = ir.Program([B.read_write("y", 0, "f32"), B.read("x", 1, "f32")], 64,
                   [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [
                       ir.store("y", i, ir.load("x", i) * 10 + ir.load("y", i))])], name="mix")
    be = vn.get_backend("reference")
    g = be.record_graph(p, [np.float32([1, 2, 3]), np.float32([4, 5, 6])])
    g.replay([np.float32([1, 2, 3]), np.float32([4, 5, 6])])
    new_y = np.zeros(3, np.float32)
    (want,) = be.dispatch(p, [new_y, g.buffers["y"].copy()])
    (got,) = g.replay([new_y, g.buffers["y"]])
    assert want.tolist() == [410, 520, 630] and got.tolist() == want.tolist()


def test_a_bare_array_given_to_replay_is_told_to_go_in_a_list_first():
    be = vn.get_backend("reference")
    g = be.record_graph(affine(), [np.zeros(4, np.uint32)])
    with pytest.raises(DispatchError, match=r"inputs is an ndarray, not a list.*Fix: .*\[x\]"):
        g.replay(np.zeros(4, np.float64))


def test_a_recorded_sequence_replays_without_a_progress_setting_and_names_a_buffer_made_read_only(monkeypatch):
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    s = be.record_sequence([(bump(), [x])], [x])
    monkeypatch.setenv("VYRE_NUMBA_PROGRESS", "bogus")  # no bar is shown by a replay, on any backend
    assert s.replay()[0].tolist() == [1] * 4
    x.setflags(write=False)
    with pytest.raises(DispatchError, match=r"step 0 writes 'x'.*made read-only since.*Fix: make it writable again"):
        s.replay()
    x.setflags(write=True)  # the Fix, followed
    assert s.replay()[0].tolist() == [2] * 4
    with pytest.raises(DispatchError, match=r"Fix: write into them \(backend.write\(s.buffers\[k\]\['x'\]"):
        s.buffers = {}
    s.close()
    with pytest.raises(vn.ImmutableError, match=r"RecordedSequence.closed is read-only.*Fix: record again"):
        s.closed = False


def test_recording_helpers_made_by_hand_are_refused_with_a_fix():
    from vyre_numba.recording import Frozen, RecordedGraph, RecordedSequence, StepBuffers

    for make, fragment in ((lambda: Frozen(5), "takes a mapping"), (lambda: StepBuffers(5), "list of Frozen"),
                           (lambda: RecordedGraph(), "not made directly"),
                           (lambda: RecordedSequence(), "not made directly"),
                           (lambda: Frozen({"x": 1}).pop("x"), "cannot change"),
                           (lambda: StepBuffers([Frozen({})]).index(5), "no step's buffers are 5")):
        with pytest.raises(vn.VyreError, match=f"{fragment}.*Fix: "):
            make()
    with pytest.raises(vn.ArgumentError, match="Fix: "):
        Frozen()
    with pytest.raises(ValueError, match="no step's buffers"):  # as tuple.index says it: a ValueError too
        StepBuffers([Frozen({})]).index(Frozen({"x": 1}))

    class Mine(RecordedGraph):  # a user's own subclass is told what it lacks
        pass

    with pytest.raises(vn.DispatchError, match="Mine does not implement close, replay, replay_resident of RecordedGraph"):
        Mine()


def test_what_a_graph_was_recorded_with_cannot_be_replaced(backend):
    g = backend.record_graph(affine(), [np.arange(4, dtype=np.uint32)])
    for name in ("program", "config", "backend"):
        with pytest.raises(vn.ImmutableError, match=f"{name} is what it was recorded with.*Fix: record again"):
            setattr(g, name, None)
        with pytest.raises(vn.ImmutableError, match=f"{name} is what it was recorded with.*Fix: record again"):
            delattr(g, name)
    assert g.replay([np.arange(4, dtype=np.uint32)])[0].tolist() == [1, 4, 7, 10]
    g.close()
