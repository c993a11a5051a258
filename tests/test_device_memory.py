"""Running out of GPU memory, and the driver's other errors: every public call turns the driver's
out-of-memory error (as Numba, cuda.bindings or cuda.core raise it) into a DeviceMemoryError that
names the call, says what the GPU has free and ends in a Fix; after it the same call runs once
there is room. The translation is tested on the host with the driver's own error classes; the gpu
tests fill the GPU's memory for real."""
from __future__ import annotations

import gc
import json
import pickle
import subprocess
import sys
import textwrap
import traceback
from types import SimpleNamespace

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import errors, ir
from vyre_numba.errors import DeviceError, DeviceMemoryError, VyreError

from conftest import assert_fix


def _driver_oom() -> Exception:
    """The error numba-cuda raises where cuMemAlloc has no room (its class, code and text)."""
    from cuda.bindings import driver as drv
    from numba.cuda.cudadrv.driver import CudaAPIError

    code = drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    return CudaAPIError(code, "Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY")


def _in_library(error: Exception, name: str = "loads"):
    """A function `name` whose code is the standard library's that raises `error`: what a library
    the package called (Numba allocating, say) raising looks like."""
    library = {"__name__": "json.decoder", "error": error}
    exec(compile(f"def {name}(*a, **k):\n    raise error\n", json.decoder.__file__, "exec"), library)
    return library[name]


def _raising_in_library(monkeypatch, error: Exception) -> None:
    """json.loads replaced by `_in_library(error)`."""
    monkeypatch.setattr(json, "loads", _in_library(error))


def test_the_drivers_out_of_memory_leaving_a_public_call_is_a_device_memory_error(monkeypatch):
    oom = _driver_oom()
    assert errors.device_out_of_memory(oom) and not errors.device_out_of_memory(MemoryError("host"))
    _raising_in_library(monkeypatch, oom)
    with pytest.raises(DeviceMemoryError) as e:
        ir.Program.from_json('{"nodes": []}')
    text = str(e.value)
    assert text.startswith("Program.from_json() ran out of GPU memory ([")
    assert "CUDA_ERROR_OUT_OF_MEMORY" in text and "close() Graphs, EGraphs and WorkQueues" in text
    assert_fix(text)
    assert isinstance(e.value, DeviceError) and isinstance(e.value, MemoryError) and isinstance(e.value, VyreError)
    assert e.value.__cause__ is None  # the driver's words are in the message; its traceback is Numba's own
    names = [f.f_globals.get("__name__") for f, _ in traceback.walk_tb(e.value.__traceback__)]
    assert names and not [n for n in names if n.startswith("vyre_numba")], names  # the caller's line, as for host


def test_a_callers_own_callback_keeps_its_out_of_memory_error():
    """An out-of-memory error raised in the caller's own code (a step it passed) is theirs: it leaves
    as it was raised, not translated into one of ours."""
    oom = _driver_oom()

    def each(buffer, first, count):
        raise oom
    with pytest.raises(type(oom)) as e:
        vn.get_backend("reference").upload_in_pieces(np.arange(5, dtype=np.uint32), each)
    assert e.value is oom


def test_the_pools_and_the_drivers_checks_raise_device_memory_errors():
    from cuda.bindings import driver as drv

    from vyre_numba.gpu import memory
    from vyre_numba.gpu.launch import driver_check

    with pytest.raises(DeviceMemoryError, match=r"^allocating 64 bytes on the device ran out of GPU memory") as e:
        memory._check(drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, "allocating 64 bytes on the device")
    assert_fix(str(e.value))
    with pytest.raises(DeviceMemoryError, match=r"^instantiating the graph ran out of GPU memory") as e:
        driver_check((drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY,), "instantiating the graph")
    assert_fix(str(e.value))
    with pytest.raises(DeviceError) as e:  # other driver errors stay DeviceErrors of their own
        memory._check(drv.CUresult.CUDA_ERROR_INVALID_VALUE, "allocating")
    assert not isinstance(e.value, DeviceMemoryError)


def test_the_message_says_what_is_free_and_survives_a_room_finder_that_fails(monkeypatch):
    monkeypatch.setattr(errors, "_ROOM", [lambda: "The GPU has 0.25 GiB of 80.00 GiB free now."])
    text = str(errors.device_memory_error("bfs()", _driver_oom()))
    assert "). The GPU has 0.25 GiB of 80.00 GiB free now. Fix: free GPU memory" in text

    def out_of_memory_itself():  # a finder that runs out too must not recurse or hide the first error
        raise errors.device_memory_error("trimming the pool", "CUDA_ERROR_OUT_OF_MEMORY")
    monkeypatch.setattr(errors, "_ROOM", [out_of_memory_itself])
    text = str(errors.device_memory_error("bfs()", _driver_oom()))
    assert text.startswith("bfs() ran out of GPU memory") and "free now" not in text
    assert_fix(text)


def test_an_allocations_device_memory_error_names_the_public_call_it_leaves(monkeypatch):
    from cuda.bindings import driver as drv

    from vyre_numba.gpu import memory

    def allocating(*a, **k):
        memory._check(drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, "allocating 4096 bytes on the device")
    monkeypatch.setattr(json, "loads", allocating)
    with pytest.raises(DeviceMemoryError) as e:
        ir.Program.from_json('{"nodes": []}')
    assert str(e.value).startswith("Program.from_json() ran out of GPU memory (allocating 4096 bytes on the device: "
                                   "CUDA_ERROR_OUT_OF_MEMORY).")
    assert e.value.unnamed is None
    assert_fix(str(e.value))
    names = [f.f_globals.get("__name__") for f, _ in traceback.walk_tb(e.value.__traceback__)]
    assert names and not [n for n in names if n.startswith("vyre_numba")], names


@pytest.mark.parametrize("raised, restart", [
    ("numba", True),  # a kernel's fault, as the next call meets it
    ("numba-other", False),
    ("cuda.core", False),
    ("fork", False),
])
def test_any_other_driver_error_leaving_a_public_call_is_a_device_error(monkeypatch, raised, restart):
    """The kind beside running out: the driver's other errors leave a public call as DeviceErrors
    naming the call, and a fault that leaves the context unusable says to restart the process."""
    from cuda.bindings import driver as drv
    from cuda.core._utils.cuda_utils import CUDAError
    from numba.cuda.cudadrv.driver import CudaAPIError, CudaDriverError

    error = {"numba": CudaAPIError(drv.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,
                                   "Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS"),
             "numba-other": CudaAPIError(drv.CUresult.CUDA_ERROR_INVALID_VALUE,
                                         "Call to cuMemcpyDtoH results in CUDA_ERROR_INVALID_VALUE"),
             "cuda.core": CUDAError("CUDA_ERROR_NOT_PERMITTED: operation not permitted"),
             "fork": CudaDriverError("CUDA initialized before forking")}[raised]
    _raising_in_library(monkeypatch, error)
    with pytest.raises(DeviceError) as e:
        ir.Program.from_json('{"nodes": []}')
    text = str(e.value)
    assert type(e.value) is DeviceError and text.startswith("Program.from_json() failed in the CUDA driver (")
    assert str(error) in text
    assert ("restart the process (in Jupyter, restart the kernel)" in text) == restart
    assert ("multiprocessing.get_context('spawn')" in text) == (raised == "fork")
    assert e.value.__cause__ is error  # where the driver failed stays in view, for a bug report
    assert_fix(text)
    assert not errors.driver_failure(e.value) and not errors.driver_failure(RuntimeError("CUDA_ERROR_ASSERT"))


def test_an_error_whose_own_str_fails_passes_as_it_was(monkeypatch):
    """The translation reads an error's text: one whose __str__ raises is no driver's and leaves as
    it was raised, not as the __str__'s error."""
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text")
    error = Unprintable()
    _raising_in_library(monkeypatch, error)
    with pytest.raises(Unprintable) as e:
        ir.Program.from_json('{"nodes": []}')
    assert e.value is error and not errors.device_out_of_memory(error) and not errors.driver_failure(error)


def test_a_device_memory_error_pickles_whole():
    """Dask brings a worker's error back pickled (tblib makes it with cls.__new__(cls))."""
    e = errors.device_memory_error("allocating 40 bytes", "no room", "make a smaller queue")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is DeviceMemoryError and str(back) == str(e) and back.unnamed == e.unnamed
    assert isinstance(DeviceMemoryError.__new__(DeviceMemoryError), DeviceMemoryError)


# ---- on the GPU: its memory filled for real ------------------------------------------------------

MARGIN = 64 << 20  # bytes left free while the GPU is filled: less than every call below needs


def _fill_gpu():
    """A device array of all but MARGIN bytes of what the GPU has free (after the package's pool
    and Numba's pending frees have given theirs back: the pool's frees are stream-ordered, so the
    device is synchronised first, else the pool keeps what they free for its own next allocation)."""
    from numba import cuda

    from vyre_numba.gpu import memory

    gc.collect()
    cuda.synchronize()
    ctx = cuda.current_context()
    for owner in (getattr(ctx, "memory_manager", None), ctx):
        pending = getattr(owner, "deallocations", None)
        if pending is not None:
            pending.clear()
    memory.trim()
    free, _ = ctx.get_memory_info()
    return cuda.device_array(free - MARGIN, np.uint8)


def _refused_while_full(call) -> DeviceMemoryError:
    """The DeviceMemoryError `call()` raises with the GPU filled to MARGIN (the filling then freed)."""
    ballast = _fill_gpu()
    try:
        with pytest.raises(DeviceMemoryError) as e:
            call()
    finally:
        del ballast
        gc.collect()
    text = str(e.value)
    assert "ran out of GPU memory" in text and "GiB free now" in text, text
    assert_fix(text)
    return e.value


@pytest.fixture
def star():
    """A star of 2^25 vertices on the GPU (vertex 0 joined both ways to every other): its distances
    and labels need 128 MiB, twice MARGIN."""
    from numba import cuda

    n = 1 << 25
    indptr = np.empty(n + 1, np.int64)
    indptr[0], indptr[1] = 0, n - 1
    indptr[2:] = n - 1 + np.arange(1, n, dtype=np.int64)
    indices = np.concatenate([np.arange(1, n, dtype=np.int32), np.zeros(n - 1, np.int32)])
    yield cuda.to_device(indptr), cuda.to_device(indices), n
    gc.collect()


@pytest.mark.gpu
def test_graph_calls_out_of_gpu_memory_say_so_and_run_once_there_is_room(star):
    indptr, indices, n = star
    small = (np.array([0, 1, 2]), np.array([1, 0]))
    vn.graph.bfs(*small, 0, backend="cuda")  # the kernels loaded before the GPU is filled
    vn.graph.connected_components(*small, backend="cuda")
    before = indices[:8].copy_to_host(), indptr[-4:].copy_to_host()

    e = _refused_while_full(lambda: vn.graph.bfs(indptr, indices, 0))
    assert str(e).startswith("bfs() ran out of GPU memory")
    e = _refused_while_full(lambda: vn.graph.connected_components(indptr, indices))
    assert str(e).startswith("connected_components() ran out of GPU memory")
    e = _refused_while_full(lambda: vn.graph.Graph(indptr, indices))
    assert str(e).startswith("Graph() ran out of GPU memory") and "bfs(indptr, indices, source)" in str(e)

    assert np.array_equal(indices[:8].copy_to_host(), before[0]) and np.array_equal(indptr[-4:].copy_to_host(),
                                                                                     before[1])
    dist = vn.graph.bfs(indptr, indices, 0).copy_to_host()
    assert dist[0] == 0 and (dist[1:] == 1).all()
    assert (vn.graph.connected_components(indptr, indices).copy_to_host() == 0).all()
    with vn.graph.Graph(indptr, indices) as g:
        assert np.array_equal(g.bfs(0).copy_to_host(), dist)


@pytest.mark.gpu
def test_select_backend_and_queue_out_of_gpu_memory_say_so_and_run_once_there_is_room():
    from numba import cuda

    n = 1 << 25  # 128 MiB of int32 kept: twice MARGIN
    values = cuda.to_device(np.arange(n, dtype=np.int32))
    flags = cuda.to_device(np.ones(n, np.uint8))
    vn.compaction.select(values[:1000], flags[:1000])  # kernels loaded first
    be = vn.get_backend("cuda")
    be.empty(8, "u32")
    _refused_while_full(lambda: vn.compaction.select(values, flags))
    e = _refused_while_full(lambda: be.upload(np.zeros(n, np.int32)))
    assert "upload() ran out of GPU memory" in str(e)
    e = _refused_while_full(lambda: be.empty(n, "u32"))
    assert "empty() ran out of GPU memory" in str(e)
    e = _refused_while_full(lambda: vn.workqueue.WorkQueue(n, np.int32))
    assert str(e).startswith(f"WorkQueue({n}, int32) ran out of GPU memory (no room for its {4 * n} bytes)")
    assert "make a smaller queue and drain it more often." in str(e)

    kept = vn.compaction.select(values, flags)
    assert kept.shape == (n,) and np.array_equal(kept[-5:].copy_to_host(), np.arange(n - 5, n, dtype=np.int32))
    assert be.download(be.upload(np.arange(10, dtype=np.int32))).tolist() == list(range(10))
    with vn.workqueue.WorkQueue(n, np.int32) as q:
        assert q.capacity == n


@pytest.mark.gpu
def test_an_egraph_out_of_gpu_memory_says_so_and_builds_once_there_is_room():
    from vyre_numba.egraph import EGraph

    def leaves(n: int) -> tuple:  # n e-nodes, each its own class, no children
        return np.arange(n, dtype=np.int64), np.zeros(n, np.int64), np.zeros(n + 1, np.int64), np.zeros(0, np.int64)

    EGraph.from_arrays(*leaves(4), backend="cuda").close()  # kernels loaded first
    n = 1 << 24  # its rows and table need more than MARGIN
    e = _refused_while_full(lambda: EGraph.from_arrays(*leaves(n), backend="cuda"))
    assert str(e).startswith("EGraph.from_arrays() ran out of GPU memory"), str(e)
    with EGraph.from_arrays(*leaves(n), backend="cuda") as eg:
        assert (eg.n_nodes, eg.n_classes) == (n, n)


@pytest.mark.gpu
def test_a_call_after_a_kernel_fault_is_a_device_error_that_says_to_restart():
    """A kernel of the user's own writes far out of bounds; the next vyre-numba call meets the
    poisoned context: a DeviceError naming the driver's error, whose Fix is a restart (in a process
    of its own, as the fault leaves the context unusable)."""
    code = textwrap.dedent("""
        import numpy as np
        from numba import cuda
        import vyre_numba as vn

        @cuda.jit
        def wild(a):
            a[1 << 40] = 1

        indptr, indices = cuda.to_device(np.array([0, 1, 2])), cuda.to_device(np.array([1, 0], np.int32))
        print(vn.graph.bfs(indptr, indices, 0).copy_to_host().tolist())
        wild[1, 1](cuda.device_array(4, np.int32))
        try:
            vn.graph.bfs(indptr, indices, 0)
        except vn.DeviceError as e:
            print(type(e).__name__, "|", e)
        """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = run.stdout.splitlines()
    assert lines[:1] == ["[0, 1]"], (run.stdout, run.stderr)
    assert len(lines) == 2 and lines[1].startswith("DeviceError | "), (run.stdout, run.stderr)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in lines[1] or "CUDA_ERROR_LAUNCH_FAILED" in lines[1], lines[1]
    assert "restart the process" in lines[1], lines[1]
    assert_fix(lines[1])


# ---- the red-team's findings (fifty-first session), each mended --------------------------------

def test_running_out_while_a_pool_is_made_raises_rather_than_deadlocking(monkeypatch):
    """A pool made while another exists (a second GPU's) that has no room: the error's room() trims
    the pools, which takes the lock the pool's maker holds (a plain Lock waited on itself)."""
    import threading

    from cuda.bindings import driver as drv

    from vyre_numba.gpu import memory

    monkeypatch.setitem(memory._POOLS, 0, "the pool of GPU 0")
    monkeypatch.setattr(drv, "cuMemPoolCreate", lambda props: (drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None))
    monkeypatch.setattr(drv, "cuMemPoolTrimTo", lambda pool, n: (drv.CUresult.CUDA_SUCCESS,))
    raised = []

    def make():
        try:
            memory._pool(1)
        except BaseException as e:  # noqa: BLE001 - what it raised is the test's to read
            raised.append(e)
    t = threading.Thread(target=make, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "deadlocked"
    assert len(raised) == 1 and isinstance(raised[0], DeviceMemoryError), raised
    assert str(raised[0]).startswith("cuMemPoolCreate ran out of GPU memory")


def test_page_locked_host_memory_run_out_is_a_host_memory_error(monkeypatch):
    from numba.cuda.cudadrv.driver import CudaAPIError
    from cuda.bindings import driver as drv

    _raising_in_library(monkeypatch, CudaAPIError(drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY,
                                                  "Call to cuMemHostAlloc results in CUDA_ERROR_OUT_OF_MEMORY"))
    with pytest.raises(vn.HostMemoryError) as e:
        ir.Program.from_json('{"nodes": []}')
    text = str(e.value)
    assert text.startswith("Program.from_json() ran out of page-locked host memory (") and "GPU" not in text, text
    assert_fix(text)


def test_the_command_line_says_what_the_driver_said(monkeypatch, tmp_path, capsys):
    """The command line's calls are the package's own, so no public call translates for it: its last
    handler does, where it said "internal error, a bug in vyre-numba"."""
    from cuda.bindings import driver as drv
    from numba.cuda.cudadrv.driver import CudaAPIError

    from vyre_numba import cli

    program = tmp_path / "p.json"
    program.write_text(ir.Program([], (1, 1, 1), []).to_json())
    for error, said in ((_driver_oom(), "error: DeviceMemoryError: the command ran out of GPU memory ("),
                        (CudaAPIError(drv.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, "Call to cuMemcpyDtoH results in "
                                      "CUDA_ERROR_ILLEGAL_ADDRESS"),
                         "error: DeviceError: the command failed in the CUDA driver (")):
        _raising_in_library(monkeypatch, error)
        assert cli.main(["run", str(program), "--out", str(tmp_path / "out")]) == 1
        err = capsys.readouterr().err
        assert err.startswith(said) and "bug in vyre-numba" not in err, err
        assert_fix(err)


def test_the_command_line_exits_1_for_the_gpus_failures_and_2_for_mistakes(monkeypatch, tmp_path, capsys):
    """A DeviceError or CompileError raised inside a command (a fault, the toolchain failing) is no
    mistake in its command line: it exits 1, as the driver's own error does; a DispatchError, the
    caller's mistake, exits 2."""
    from vyre_numba import cli

    program = tmp_path / "p.json"
    program.write_text(ir.Program([], (1, 1, 1), []).to_json())
    for error, status in ((DeviceError("the GPU fell off the bus. Fix: restart."), 1),
                          (errors.BarrierTimeoutError("a grid barrier timed out. Fix: fewer blocks."), 1),
                          (errors.CompileError("ptxas crashed. Fix: report it."), 1),
                          (errors.TemplateError("a template is missing. Fix: reinstall."), 1),
                          (errors.DispatchError("the input is wrong. Fix: pass another."), 2)):
        monkeypatch.setattr(json, "loads", _in_library(error))
        assert cli.main(["run", str(program), "--out", str(tmp_path / "out")]) == status, error
        err = capsys.readouterr().err
        assert err.startswith(f"error: {type(error).__name__}: {error}"), err


class _FakeEvents:
    """The driver calls device_timer makes, counted: cuEventCreate fails once `room` events exist."""

    def __init__(self, room: int):
        from cuda.bindings import driver as real

        self.CUevent_flags, self.CUresult, self.room = real.CUevent_flags, real.CUresult, room
        self.made, self.destroyed = [], []

    def cuEventCreate(self, flags):
        if len(self.made) - len(self.destroyed) >= self.room:
            return self.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None
        self.made.append(f"event{len(self.made)}")
        return self.CUresult.CUDA_SUCCESS, self.made[-1]

    def cuEventDestroy(self, ev):
        self.destroyed.append(ev)
        return (self.CUresult.CUDA_SUCCESS,)

    recording = True  # False: cuEventRecord has no room

    def cuEventRecord(self, ev, stream):
        return (self.CUresult.CUDA_SUCCESS if self.recording else self.CUresult.CUDA_ERROR_OUT_OF_MEMORY,)

    faulted = False  # True: the timed work failed (a kernel fault)

    def cuEventSynchronize(self, ev):
        return (self.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS if self.faulted else self.CUresult.CUDA_SUCCESS,)

    def cuEventElapsedTime(self, start, end):
        return self.CUresult.CUDA_SUCCESS, 1.5


def _timing_backend(drv):
    from vyre_numba.gpu.backend import CudaBackend

    be = object.__new__(CudaBackend)  # as get_backend("cuda") gives it, with the driver faked (no GPU here)
    be.__dict__["_drv"] = drv
    return be


def test_device_timer_with_no_room_for_its_events_is_the_calls_error():
    """The events are made at the call, not when the block is entered: running out of room for them is
    device_timer's DeviceMemoryError at the caller's line, and the one event made is destroyed."""
    drv = _FakeEvents(room=1)
    be = _timing_backend(drv)
    with pytest.raises(DeviceMemoryError) as e:
        be.device_timer(0)
    assert str(e.value).startswith("CudaBackend.device_timer() ran out of GPU memory (creating a CUDA event"), e.value
    assert_fix(str(e.value))
    assert [f.name for f in traceback.extract_tb(e.value.__traceback__)] == [
        "test_device_timer_with_no_room_for_its_events_is_the_calls_error"]
    assert drv.made == drv.destroyed == ["event0"]


def test_device_timer_keeps_its_events_for_the_next_unless_the_block_failed():
    drv = _FakeEvents(room=2)
    be = _timing_backend(drv)
    with be.device_timer(0) as t:
        pass
    assert t.ns == 1_500_000 and drv.made == ["event0", "event1"] and not drv.destroyed
    timer = be.device_timer(0)  # the spare pair again: no room needed for more
    del timer  # never entered: its events go back too
    gc.collect()
    with pytest.raises(ZeroDivisionError):
        with be.device_timer(0) as failed:
            1 / 0
    assert drv.made == ["event0", "event1"] and drv.destroyed == ["event0", "event1"]  # a failed block's are destroyed
    with pytest.raises(vn.DispatchError, match=r"no time: its block was left by ZeroDivisionError.*Fix: time a "):
        failed.ns  # not a silent 0
    assert "no time" in repr(failed)
    timer = be.device_timer(0)
    with timer as t:
        pass
    assert t.ns == timer.ns == 1_500_000 and len(drv.made) == 4  # read from the Timer or from the timer itself
    with pytest.raises(vn.DispatchError, match=r"entered already.*Fix: call backend.device_timer\(\) again"):
        with timer:  # its events are the spares' again, maybe another timer's
            pass
    assert len(drv.made) == 4 and len(drv.destroyed) == 2
    drv.recording = False
    with pytest.raises(DeviceMemoryError) as e:
        with be.device_timer(0):  # named as the caller wrote it, not by the timer class's __enter__
            pass
    assert str(e.value).startswith("entering device_timer()'s block ran out of GPU memory (recording an event"), e.value
    assert [f.name for f in traceback.extract_tb(e.value.__traceback__)] == [
        "test_device_timer_keeps_its_events_for_the_next_unless_the_block_failed"]


def test_a_timer_whose_work_failed_says_so_not_that_its_block_is_running():
    """Regression (a review): where the events' own wait failed as the block was left, t.ns said "its
    block has not ended yet", with a Fix to read it after the block, which it was."""
    drv = _FakeEvents(room=2)
    drv.faulted = True
    with pytest.raises(vn.DeviceError, match="the timed work failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        with _timing_backend(drv).device_timer(0) as t:
            pass
    with pytest.raises(vn.DispatchError, match=r"no time: the timed work or its events failed \(the error said so as "
                                               r"the block was left\)\. Fix: time a block that ends without an error"):
        t.ns


def test_a_device_timer_keeps_its_backend_alive_for_its_events():
    """Regression (a review): a timer outliving its backend gave its events back to spares the
    backend's finalizer had destroyed already, where nothing destroyed them."""
    drv = _FakeEvents(room=2)
    timer = _timing_backend(drv).device_timer(0)  # the backend is the timer's alone
    gc.collect()
    with timer:
        pass
    del timer
    gc.collect()  # the timer's events back to the spares, then the backend's finalizer destroys them
    assert drv.made == ["event0", "event1"] and sorted(drv.destroyed) == ["event0", "event1"]


def test_under_the_simulator_running_out_is_of_host_memory():
    """numba-cuda's simulator keeps device arrays in host memory: running out says so, and its Fix
    names no GPU processes (there is no GPU, nor nvidia-smi)."""
    from simulated import run_script

    out = run_script(textwrap.dedent("""
        import numpy as np
        import vyre_numba as vn
        try:
            vn.workqueue.WorkQueue(1 << 39, np.int64)
        except vn.DeviceMemoryError as e:
            print(e)
    """), 300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout.strip()
    assert text.startswith("WorkQueue(549755813888, int64) ran out of the CUDA simulator's device memory, which is "
                           "host memory ("), text
    assert "GPU" not in text and "nvidia-smi" not in text, text
    assert_fix(text)


def test_a_call_is_named_by_the_public_class_it_was_called_on():
    from vyre_numba.gpu.cudagraph import CudaRecordedGraph
    from vyre_numba.workqueue import QueueModel, _Shared

    assert errors._call_name(CudaRecordedGraph.replay, (object.__new__(CudaRecordedGraph),)) == \
        "RecordedGraph.replay"
    assert errors._call_name(_Shared.chunks, (object.__new__(QueueModel),)) == "QueueModel.chunks"
    assert errors._call_name(vn.graph.Graph.__init__, (object.__new__(vn.graph.Graph),)) == "Graph"
    assert errors._call_name(vn.graph.bfs, (np.zeros(2), np.zeros(1), 0)) == "bfs"


def test_a_message_added_to_on_the_way_out_is_kept(monkeypatch):
    """Megakernel.run says which steps its generated launch ran before an allocation's error
    leaves: the public call keeps those words rather than rebuilding the message."""
    from cuda.bindings import driver as drv

    from vyre_numba.gpu.launch import driver_check

    def launch(*a, **k):
        try:
            driver_check((drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY,), "launching kernel 'mk_main'")
        except VyreError as e:
            e.args = (f"the megakernel of steps 'relax', 'settle': {e.args[0]}",)
            raise
    monkeypatch.setattr(json, "loads", launch)
    with pytest.raises(DeviceMemoryError) as e:
        ir.Program.from_json("{}")
    assert str(e.value).startswith("the megakernel of steps 'relax', 'settle': launching kernel 'mk_main' ran out")


def test_a_kernel_module_without_room_to_load_keeps_its_disk_cache_entry(monkeypatch):
    """A module load that runs out of GPU memory is no sign of bad bytes: the verified cubin on
    disk stays (it was deleted, as if the driver had refused it), and the error is out of memory."""
    import types

    import cuda.core
    from cuda.core._utils.cuda_utils import CUDAError

    import vyre_numba.ptx as ptx_module
    from vyre_numba.gpu.backend import CudaBackend
    from vyre_numba.lru import LRUCache

    no_room = _in_library(CUDAError("CUDA_ERROR_OUT_OF_MEMORY: out of memory"), "from_cubin")
    monkeypatch.setattr(cuda.core, "ObjectCode", types.SimpleNamespace(from_cubin=no_room))
    monkeypatch.setattr(ptx_module, "assemble", lambda ptx, sm: b"cubin")

    class Disk:
        removed: list = []

        def get(self, key):
            return b"a cubin verified earlier"

        def remove(self, key):
            self.removed.append(key)

        def put(self, key, value):
            pass
    be = object.__new__(CudaBackend)
    be.__dict__.update(caps=types.SimpleNamespace(sm=90, max_threads_per_block=1024, max_block_dim=(1024, 1024, 64)),
                       module_cache=LRUCache(8), disk_cache=Disk(), _toolchain=("tk",),
                       ptx=lambda program, config: "ptx")
    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.read("a", 0, "f32"), ir.BufferDecl.output("out", 1, "f32")], 64,
                   [ir.let("i", ir.gid(0)), ir.store("out", i, ir.load("a", i) * 2)])
    with pytest.raises(DeviceMemoryError, match=r"^CudaBackend.kernel\(\) ran out of GPU memory \(loading kernel "):
        be.kernel(p)
    assert Disk.removed == []


@pytest.mark.parametrize("compiling", [False, True])
def test_a_predicates_compile_or_run_without_room_is_out_of_memory(compiling):
    """select_if's handler said a restart (running) or "does not compile" (compiling) of the
    driver's out-of-memory, as loading the compiled module takes room too."""
    from vyre_numba.compaction import _compiled

    def call():
        raise _driver_oom()
    with pytest.raises(DeviceMemoryError) as e:
        _compiled(call, "predicate", compiling)
    assert str(e.value).startswith("selecting with the predicate ran out of GPU memory (")
    assert e.value.unnamed is not None  # select_if(), the public call, names itself in its place


def test_a_host_dispatch_tells_the_gpus_memory_page_locked_memory_and_the_hosts_apart():
    import types

    from numba.cuda.cudadrv.driver import CudaAPIError
    from cuda.bindings import driver as drv

    from vyre_numba.gpu.backend import CudaBackend

    be = object.__new__(CudaBackend)
    plan = types.SimpleNamespace(kernel=types.SimpleNamespace(name="k"), total=4096, in_bytes=1024, out_lo=512,
                                 out_hi=2560, shape=(1, 1, 1))  # 3,072 bytes staged: 1,024 in, 2,048 out
    gpu = be._host_failure(_driver_oom(), plan)
    pinned = be._host_failure(CudaAPIError(drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY,
                                           "Call to cuMemHostAlloc results in CUDA_ERROR_OUT_OF_MEMORY"), plan)
    host = be._host_failure(MemoryError("staging"), plan)
    assert type(gpu) is DeviceMemoryError and str(gpu).startswith(
        "kernel 'k' (4096 bytes of buffers on the GPU, 3072 staged in page-locked host memory) ran out of GPU memory")
    assert type(pinned) is vn.HostMemoryError and str(pinned).startswith(
        "kernel 'k' (4096 bytes of buffers on the GPU, 3072 staged in page-locked host memory) ran out of "
        "page-locked host memory")
    assert type(host) is vn.HostMemoryError and "the host ran out of memory staging 3072 bytes" in str(host)
    for e in (gpu, pinned, host):
        assert_fix(str(e))


@pytest.mark.parametrize("order, mode", [(["graph", "relaunch"], "relaunch"), (["graph"], None)])
def test_a_fixpoint_graph_without_room_moves_on_to_relaunch_or_says_so(monkeypatch, order, mode):
    """"auto" tries a graph's while loop before a launch a round: a graph that has no room (its
    build is a DeviceMemoryError) moves on as a mode the device cannot run does; asked for alone,
    it is the out-of-memory error, not "unsupported"."""
    from vyre_numba.fixpoint import device

    ctl = type("Ctl", (), {"__cuda_array_interface__": {"data": (0, False)}})()
    no_room = errors.device_memory_error("building a CUDA graph with a while loop for the fixpoint loop",
                                         "CUDA_ERROR_OUT_OF_MEMORY")

    def graph(*a):  # as _graph raises it where WhileGraph had no room, before any round
        here = device._NotHere(str(no_room))
        here.no_room = no_room
        raise here
    for name, value in {"_step_args": lambda step, args: (None, []), "_module": lambda *a: {"vyre_fixpoint_round": 0},
                        "_take_ctl": lambda be: ctl, "_give_ctl": lambda be, c: None, "_bar": lambda p: None,
                        "_graph": graph, "_relaunch": lambda *a: (3, True, 0)}.items():
        monkeypatch.setattr(device, name, value)
    if mode is None:
        with pytest.raises(DeviceMemoryError) as e:
            device.run(None, None, 4, [], 10, "graph", 256, 0, False)
        assert e.value is no_room
    else:
        monkeypatch.setattr(device, "_auto_order", lambda caps, rounds: order)
        result = device.run(SimpleNamespace(caps=None), None, 4, [], 10, "auto", 256, 0, False)
        assert (result.rounds, result.converged, result.mode) == (3, True, mode)


@pytest.mark.parametrize("raised", ["driver", "pool"])
def test_a_graph_without_room_for_its_copy_says_the_module_calls_need_none(monkeypatch, raised):
    """A Graph of device arrays holds a copy of its own: where the GPU has no room for it, the Fix
    names the module calls, which read the caller's arrays where they are."""
    from cuda.bindings import driver as drv

    from vyre_numba.gpu import memory
    from vyre_numba.graph import resident

    class Device:  # what a device array shows the CSR checks
        def __init__(self, n: int) -> None:
            self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<i8", "data": (0, False), "version": 3}

    def pool(*a, **k):
        memory._check(drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, "allocating 24 bytes on the device")
    monkeypatch.setattr(resident, "graph_arguments", lambda indptr, indices, source, call: (indptr, indices, None))
    monkeypatch.setattr(resident, "resolve", lambda *a: (SimpleNamespace(name="cuda"), None, 2, True))
    monkeypatch.setattr(resident, "_device_copy", _in_library(_driver_oom(), "device_array") if raised == "driver"
                        else pool)
    with pytest.raises(DeviceMemoryError) as e:
        vn.graph.Graph(Device(3), Device(2))
    text = str(e.value)
    assert text.startswith("Graph() ran out of GPU memory (")
    assert text.endswith("or call the module functions on the arrays instead (bfs(indptr, indices, source) and the "
                         "others read them where they are; a Graph holds a copy of its own).")
    assert e.value.unnamed is None


def test_a_cache_whose_weight_raises_stores_nothing():
    """A red-team: put stored the value, then weighed it; a weight that raised left it cached and
    uncounted in weight_total."""
    from vyre_numba.lru import LRUCache

    def weight(v):
        if v == "bad":
            raise ValueError("cannot weigh")
        return 1

    c = LRUCache(4, max_weight=10, weight=weight)
    c.put("a", "ok")
    with pytest.raises(ValueError):
        c.put("b", "bad")
    assert c.get("b") is None and c.get("a") == "ok" and c.weight_total == 1
