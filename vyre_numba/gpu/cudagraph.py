"""CUDA graphs of dispatches and resident sequences: captured once on a stream of their own with
cuda.core's `GraphBuilder` (the copies, memsets and launches are the same driver calls every
dispatch makes, enqueued on the capturing stream), uploaded, and replayed with one graph launch."""
from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Iterable, Mapping, Sequence

import numpy as np

from .. import checked
from ..backend import _iterable, as_step, label_counts
from ..bindings import Binding, bind, check_config, check_resident
from ..config import DispatchConfig
from ..errors import (CompileError, DeviceError, DispatchError, UnsupportedError, VyreError, check_calls,
                      raise_if_out_of_memory)
from ..ir import Program, check
from ..recording import (Frozen, RecordedGraph, RecordedSequence, StepBuffers, check_recorded_launches,
                         check_replay_dtypes, check_replay_sizes, input_dtypes, pinned_steps)
from .backend import _repeat
from .host import HostPlan
from .launch import driver_check


class _Owned:
    """Everything a recording owns; `release` frees it once (from close() or the finaliser)."""

    def __init__(self, backend):
        self.drv, self.free_now = backend._drv, backend.release_memory
        self.stream: int | None = None
        self.builders: list = []
        self.graphs: list = []
        self.device: list = []
        self.pinned: list = []
        self.held: list = []  # resident buffers a sequence launches over, kept alive
        self.event = None
        self.lock = threading.Lock()
        self.released = False

    def release(self) -> None:
        with self.lock:
            if self.released:
                return
            self.released = True
        if self.stream is not None:
            self.drv.cuStreamSynchronize(self.stream)
        for g in self.graphs + self.builders:
            try:
                g.close()
            except Exception:  # a builder left mid-capture by a failure cannot always close cleanly
                pass
        self.graphs, self.builders = [], []
        self.device, self.pinned, self.held = [], [], []
        if self.event is not None:
            self.drv.cuEventDestroy(self.event)
            self.event = None
        if self.stream is not None:
            self.drv.cuStreamDestroy(self.stream)
            self.stream = None
        try:
            self.free_now()
        except Exception:  # at interpreter exit the context may already be gone, and its memory with it
            pass


class _Capture:
    """Captures what is enqueued on the recording's stream between enter and exit into a graph."""

    def __init__(self, owned: _Owned, what: str):
        self.owned, self.what = owned, what
        self.graph = None

    def __enter__(self) -> int:
        from cuda.core import Stream

        builder = Stream.from_handle(self.owned.stream).create_graph_builder()
        self.owned.builders.append(builder)
        builder.begin_building("thread_local")
        self.builder = builder
        return self.owned.stream

    def __exit__(self, kind, error, tb) -> bool:
        if kind is not None:
            try:
                self.builder.end_building()  # leave capture mode; the partial graph is discarded
            except Exception:
                pass
            return False
        try:
            self.builder.end_building()
            self.graph = self.builder.complete()
            self.owned.graphs.append(self.graph)
            from cuda.core import Stream

            self.graph.upload(Stream.from_handle(self.owned.stream))
        except Exception as e:
            raise_if_out_of_memory(e, f"capturing {self.what} into a CUDA graph")
            raise DeviceError(f"capturing {self.what} into a CUDA graph failed ({type(e).__name__}: {e}). "
                              "Fix: replay it with plain dispatches instead; report the program if it "
                              "dispatches fine.") from e
        return False


def _stream(backend) -> int:
    from .backend import _new_stream

    return _new_stream(backend._drv)


class CudaRecordedGraph(RecordedGraph):
    """A host dispatch as a CUDA graph: pinned input staging -> device buffers -> kernels ->
    pinned output staging, on buffers of its own (`buffers`, numba device arrays by name)."""

    def __init__(self, backend, program: Program, sample_inputs, config: DispatchConfig | None,
                 sizes: Mapping[str, int] | None):
        self.backend, self.program = backend, program
        checked.refuse(config, "record_graph")
        what = f"record_graph of {program.name!r}" if isinstance(program, Program) else "record_graph"  # bind says
        check_recorded_launches(what, check_config(config).fixpoint_iterations)  # what else is wrong with it
        backend._ensure_context()  # before any occupancy query or tuning run _resolve may make
        b = bind(program, sample_inputs, backend._resolve(program, config, sample_inputs, sizes), sizes,
                 copy_inputs=False, allocate_outputs=False, call="record_graph")
        self.config = b.config
        self._dtypes = input_dtypes(program, sample_inputs)
        # a graph of many short kernels pays each one's launch latency; programmatic dependent launch
        # lets the next start launching while the one before ends (each waits for it on entry)
        fast = None
        if b.config.fixpoint_iterations > 1:
            try:
                fast = backend.programmatic_kernel(program, b.config)
            except (CompileError, DeviceError, UnsupportedError):  # a toolkit or driver without it: plain launches
                fast = None
        self.plan = plan = HostPlan(backend, b, fast or backend.kernel(program, b.config),  # launch checked here
                                    programmatic=fast is not None)
        self._owned = owned = _Owned(backend)
        self._finalizer = weakref.finalize(self, owned.release)
        drv = backend._drv
        try:
            owned.stream = stream = _stream(backend)
            self._set = bufs = plan.take()
            owned.device.append(bufs)
            self._buffers = Frozen({d.name: bufs.device[plan.offsets[i]:plan.offsets[i] + plan.nbytes[i]]
                                    .view(d.dtype.storage) for i, d in enumerate(plan.bound)})
            if plan.cooperative:
                self._check_cooperative_capture(plan)
            what = f"kernel {plan.kernel.name!r}"
            with _Capture(owned, what) as cap:
                plan.enqueue(bufs, cap, drv, copy_in=True)
            self._full = owned.graphs[-1]
            with _Capture(owned, what) as cap:
                plan.enqueue(bufs, cap, drv, copy_in=False, copy_out=False)
            self._kernels = owned.graphs[-1]
            plan.stage_in(bufs, b.arrays)  # the buffers start with the sample, as replay_resident promises
            if plan.in_bytes:
                driver_check(drv.cuMemcpyHtoDAsync(bufs.base, bufs.staging_in.ctypes.data, plan.in_bytes, stream),
                             "uploading the sample inputs")
            driver_check(drv.cuStreamSynchronize(stream), "uploading the sample inputs")
        except BaseException as e:
            self._set, self._buffers = None, Frozen({})
            owned.release()
            if isinstance(e, VyreError) or not isinstance(e, Exception):
                raise
            raise backend._host_failure(e, plan) from e
        from cuda.core import Stream

        self._cstream = Stream.from_handle(stream)
        self._lock = threading.Lock()
        self._names = [d.name for d in program.inputs]
        self._fast_key = plan.fast_key(b)
        self.binding = dataclasses.replace(b, arrays={})  # its sizes, for replays: not the caller's sample
        backend._count(graph_recordings=1)

    def _check_cooperative_capture(self, plan: HostPlan) -> None:
        """Capture a lone cooperative launch first: where the driver refuses, say so plainly."""
        probe = _Owned(self.backend)
        probe.stream = _stream(self.backend)
        try:
            with _Capture(probe, "a cooperative launch") as s:
                self._set.launch.enqueue(s)
        except Exception as e:
            if isinstance(e, MemoryError):  # no room to capture it (a DeviceMemoryError): no refusal of the driver's
                raise
            raise_if_out_of_memory(e, "capturing a cooperative launch into a CUDA graph")
            raise UnsupportedError(
                f"record_graph of {self.program.name!r}: this driver cannot capture a cooperative launch "
                f"into a CUDA graph ({type(e).__name__}: {e}). Fix: dispatch it with dispatch_resident "
                "in a loop (or drop cooperative=True where no grid barrier needs it).") from e
        finally:
            probe.release()

    def replay(self, inputs: Sequence | Mapping | None = None) -> list[np.ndarray]:
        """Copy `inputs` (the recorded sizes and dtypes) into the staging buffers, replay the
        graph (copies in, kernels, copies out) and return the outputs as new arrays."""
        self._check_open()
        arrays = _repeat(inputs, self._names, self._fast_key)  # plain arrays of the recorded dtypes and sizes
        if arrays is None:
            check_replay_dtypes(self.program, self._dtypes, inputs)
            now = bind(self.program, inputs, self.config, _pure_sizes(self.binding), copy_inputs=False,
                       allocate_outputs=False, call="replay")
            check_replay_sizes(self.binding, now)
            arrays = now.arrays
        with self._lock:
            self._check_open()  # checked again: another thread may have closed it since
            moved = self.plan.stage_in(self._set, arrays)
            return self._launch(self._full, moved + self.plan.read_bytes)

    def replay_resident(self, *, read: bool = True) -> list[np.ndarray]:
        """Replay only the kernels over `buffers` (as they are now), then, unless `read` is
        False, read the outputs back (else return [] at once: the work is still in flight until
        the next replay or `synchronize()`)."""
        read = self._read_flag(read)
        with self._lock:
            self._check_open()
            return self._launch(self._kernels, self.plan.read_bytes if read else 0, read=read)

    def synchronize(self) -> None:
        """Wait for the replays issued so far (closed, there are none: close waited for them)."""
        with self._lock:
            if not self.closed:
                _wait(self.backend._drv, self._owned.stream, f"the graph of {self.program.name!r}")

    def _launch(self, graph, moved: int, read: bool = True) -> list[np.ndarray]:
        drv = self.backend._drv
        (err,) = drv.cuGraphLaunch(graph.handle, self._owned.stream)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"replaying the graph of {self.program.name!r} failed: {err.name}. Fix: after a kernel "
                              "fault the context is poisoned; restart the process.")
        launches = 0 if self.plan.shape.empty else self.plan.iterations
        labelled = {f"dispatches[{self.config.label}]": 1} if self.config.label else {}  # as the reference's replays
        self.backend._count(graph_replays=1, kernel_launches=launches, bytes_moved_by_graphs=moved, **labelled)
        if not read:
            return []
        if graph is self._kernels:
            self.plan.enqueue_readback(self._set, self._owned.stream, self.backend._drv)
        _wait(self.backend._drv, self._owned.stream, f"the graph of {self.program.name!r}")
        self.backend._count(sync_points=1)
        self.plan.check_finished(self._set, self.backend._drv)
        return self.plan.collect(self._set)

    def close(self) -> None:
        with self._lock:  # after any replay in flight on another thread, never under it
            self._closed = True
            self._buffers, self._set = Frozen({}), None
            self._finalizer()


class CudaRecordedSequence(RecordedSequence):
    """A resident sequence as a CUDA graph: every step's memsets and launches over the resident
    buffers given at recording (held alive by this object), then the reads into pinned buffers."""

    def __init__(self, backend, steps: Iterable, read: Iterable = ()):
        self.backend = backend
        backend._ensure_context()
        steps = [as_step(s) for s in _iterable(steps, "steps")]
        for st in steps:
            checked.refuse(st.config, "record_sequence")
        reads = backend._reads(read)  # each checked as its download would check it, before anything runs
        for st in steps:
            check(st.program)
        steps, self._buffers = pinned_steps(steps)  # the launch limit and the buffers, checked before compiling
        preps = [backend._prepare(st.program, st.config, st.buffers) for st in steps]  # all before capturing
        # a replay counts its labelled steps as their own dispatches would, as the reference's replays do
        self._labels = label_counts(steps)
        self._owned = owned = _Owned(backend)
        self._finalizer = weakref.finalize(self, owned.release)
        drv, cuda = backend._drv, backend._cuda
        self.launches = 0
        try:
            owned.stream = stream = _stream(backend)
            self._reads = []
            for buf, off, cnt in reads:
                ptr, nbytes, dtype = backend.device_range(buf, off, cnt, "record_sequence read")
                host = cuda.pinned_array(max(nbytes, 1), dtype=np.uint8)
                owned.pinned.append(host)
                owned.held.append(buf)
                self._reads.append((ptr, nbytes, dtype, host))
            with _Capture(owned, "a resident sequence") as cap:
                for st, prep in zip(steps, preps):
                    buffers = check_resident(st.program, st.buffers, "record_sequence")
                    owned.held.extend(buffers)
                    self.launches += prep.run(buffers, stream=cap)
                for ptr, nbytes, _, host in self._reads:
                    if nbytes:
                        driver_check(drv.cuMemcpyDtoHAsync(host.ctypes.data, ptr, nbytes, cap), "reading back a range")
            self._graph = owned.graphs[-1]
            self._after = owned.event = _new_event(drv)
        except BaseException as e:
            owned.release()
            if isinstance(e, VyreError) or not isinstance(e, Exception):
                raise
            raise_if_out_of_memory(e, "recording the sequence")
            raise DeviceError(f"recording the sequence failed ({type(e).__name__}: {e}). Fix: check the steps "
                              "run with dispatch_sequence first.") from e
        from cuda.core import Stream

        self._cstream = Stream.from_handle(stream)
        self._lock = threading.Lock()
        backend._count(graph_recordings=1)

    def replay(self, inputs: Sequence | Mapping | None = None) -> list[np.ndarray]:
        """Run the whole sequence again; returns the reads as new arrays."""
        self._check_sequence_replay(inputs)
        with self._lock:
            self._check_open()  # checked again: another thread may have closed it since
            drv, stream = self.backend._drv, self._owned.stream
            # work already enqueued on the backend's stream (uploads, dispatches) comes first
            driver_check(drv.cuEventRecord(self._after, self.backend.stream_handle), "ordering the replay")
            driver_check(drv.cuStreamWaitEvent(stream, self._after, 0), "ordering the replay")
            (err,) = drv.cuGraphLaunch(self._graph.handle, stream)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise DeviceError(f"replaying the sequence failed: {err.name}. Fix: after a kernel fault the context "
                                  "is poisoned; restart the process.")
            _wait(drv, stream, "the recorded sequence")
            self.backend._count(graph_replays=1, kernel_launches=self.launches, sync_points=1, **self._labels)
            return [host[:n].view(dt).copy() for _, n, dt, host in self._reads]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._buffers = StepBuffers()
            self._finalizer()


def _wait(drv, stream: int, what: str) -> None:
    (err,) = drv.cuStreamSynchronize(stream)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"replaying {what} failed: {err.name}. Fix: a fault inside a kernel poisons the CUDA "
                          "context; restart the process.")


def _new_event(drv):
    err, ev = drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    driver_check((err,), "creating a CUDA event")
    return ev


def _pure_sizes(b: Binding) -> dict[str, int]:
    from ..ir.program import Role

    return {d.name: b.sizes[d.name] for d in b.program.outputs if d.role is Role.OUTPUT}


class WhileGraph:
    """A CUDA graph that repeats a body while its condition stays non-zero, all on the device:
    `body(stream, condition)` enqueues one iteration on `stream` (captured), and some kernel of
    it ends the loop by calling cudaGraphSetConditional(condition, 0). Built with cuda.core's
    GraphBuilder conditional nodes; owns its graph and stream (`close()`, `with`, finaliser)."""

    def __init__(self, backend, body, what: str):
        from cuda.core import Stream

        self.backend, self.what = backend, what
        backend._ensure_context()
        self._owned = owned = _Owned(backend)
        self._finalizer = weakref.finalize(self, owned.release)
        try:
            owned.stream = _stream(backend)
            builder = Stream.from_handle(owned.stream).create_graph_builder()
            owned.builders.append(builder)
            builder.begin_building("thread_local")
            condition = builder.create_condition(default_value=1)
            loop = builder.while_loop(condition)
            owned.builders.append(loop)
            loop.begin_building("thread_local")
            body(int(loop.stream.handle), int(condition.handle))
            loop.end_building()
            builder.end_building()
            self._graph = builder.complete()
            owned.graphs.append(self._graph)
            self._cstream = Stream.from_handle(owned.stream)
            self._graph.upload(self._cstream)
        except BaseException as e:
            owned.release()
            if isinstance(e, VyreError) or not isinstance(e, Exception):
                raise
            raise_if_out_of_memory(e, f"building a CUDA graph with a while loop for {what}")
            raise UnsupportedError(f"building a CUDA graph with a while loop for {what} failed ({type(e).__name__}: "
                                   f"{e}). Fix: use another mode (e.g. mode='relaunch'); conditional graph nodes "
                                   "need CUDA 12.4 or newer.") from e

    @property
    def stream(self) -> int:
        """The stream the graph runs on."""
        return self._owned.stream

    @property
    def closed(self) -> bool:
        """Whether `close()` has released the graph and its stream (then every call is refused)."""
        return not self._finalizer.alive

    def _check_open(self) -> None:
        if self.closed:
            raise DispatchError(f"this CUDA graph of {self.what} was closed. Fix: build another.")

    def launch(self) -> None:
        """Enqueue the graph on its stream, after the work already on the backend's stream."""
        self._check_open()
        self.backend.synchronize()  # inputs written on the backend's stream come first
        try:
            self._graph.launch(self._cstream)
        except Exception as e:
            raise_if_out_of_memory(e, f"launching the graph of {self.what}")
            raise DeviceError(f"launching the graph of {self.what} failed ({type(e).__name__}: {e}). Fix: after a "
                              "kernel fault the context is poisoned; restart the process.") from e

    def run(self) -> None:
        """Launch the graph and wait for the loop to end."""
        self.launch()
        _wait(self.backend._drv, self._owned.stream, self.what)

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "WhileGraph":
        self._check_open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

check_calls(globals(), ["CudaRecordedGraph", "CudaRecordedSequence"])
