"""The CUDA backend: vyre programs as PTX, assembled by nvJitLink and launched through numba-cuda."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import checked, errors, profiling
from ..backend import (Backend, HostTimer, InFlight, Telemetry, Timer, check_each, check_empty, check_span,
                       check_upload, check_write, left_by, wait_seconds)
from ..bindings import Binding, bind, check_config, coverage_once
from ..config import DispatchConfig
from ..display import Duration
from ..errors import (INTEGERS, BackendUnavailableError, DeviceError, DispatchError, LaunchError, VyreError, a_type,
                      DeviceMemoryError, HostMemoryError, check_calls, device_out_of_memory, driver_memory_error,
                      raise_if_out_of_memory, shown, told)
from ..ir import Program, check
from ..lru import LRUCache
from . import diskcache, tuning
from .device import DeviceCaps, caps, probe
from .diskcache import DiskCache, code_fingerprint
from .host import HostPlan, plan_key
from .launch import LaunchShape, driver_check, validate_cooperative, validate_launch
from .numba_launch import is_numba_stream, stream_handle
from .streams import StreamPool
from .resident import BufferViews, Prepared
from .tuning import TuneStore

_CURRENT = threading.local()  # .context: the context a backend last made current in this thread
_GPU: list = []  # the GPU (id, name) this process computes on, once a backend is made


def _one_gpu_a_process(dev) -> None:
    """Refuse a backend on a second GPU: numba-cuda allocates and launches in the context it
    attached to the thread, so a backend on GPU 1 in a process already on GPU 0 would put its
    arrays on GPU 0."""
    with _GPU_LOCK:
        if not _GPU:
            _GPU.append((int(dev.id), dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)))
        if _GPU[0][0] != int(dev.id):
            raise DeviceError(f"this process computes on GPU {_GPU[0][0]} ({_GPU[0][1]}); a backend on GPU "
                              f"{int(dev.id)} is refused: numba-cuda would place its arrays and launches on GPU "
                              f"{_GPU[0][0]}. Fix: run one process per GPU (dask_cuda.LocalCUDACluster, or "
                              "CUDA_VISIBLE_DEVICES=<gpu> python ...) and use vyre_numba.distributed across them.")


_GPU_LOCK = threading.Lock()


@dataclass
class CompiledKernel:
    """A loaded kernel (a cuda.core `Kernel` in the current context) and what launch checks need.
    The module is unloaded when the last reference to its `ObjectCode` goes."""

    name: str
    ptx: str | None
    code: Any  # cuda.core ObjectCode
    kernel: Any  # cuda.core Kernel
    static_shared: int
    max_threads: int
    occupancy: dict = dataclasses.field(default_factory=dict)  # (block, dynamic shared) -> blocks per SM
    launches: dict = dataclasses.field(default_factory=dict)  # callers' reusable launches, keyed by the caller

    @property
    def handle(self):
        """The driver's CUfunction of the kernel."""
        return self.kernel.handle

    @property
    def registers(self) -> int:
        """Registers a thread of the kernel uses."""
        return self.kernel.attributes.num_regs


class CudaBackend(Backend):
    """Runs programs on the current CUDA device. Results equal the reference backend's."""

    name = "cuda"
    device_clock = True

    def __init__(self, *, ptx_cache_size: int = 512, module_cache_size: int = 128, host_plans: int = 32,
                 host_plan_bytes: int = 1 << 30):
        """Bind to the current device and context. Caches are bounded by the given entry counts;
        host dispatch keeps the device buffers of at most `host_plans` shapes, `host_plan_bytes` in all.
        A process computes on one GPU: a backend on another GPU than the first one is refused."""
        for name, value in (("ptx_cache_size", ptx_cache_size), ("module_cache_size", module_cache_size),
                            ("host_plans", host_plans), ("host_plan_bytes", host_plan_bytes)):
            if isinstance(value, bool) or not isinstance(value, INTEGERS) or value < 1:
                raise DispatchError(f"CudaBackend({name}={shown(value)}): a bound of the backend's caches must be a "
                                    "positive int. Fix: pass one, or leave the default.")
        why = probe()
        if why is not None:  # as get_backend("cuda") says it, not the driver's own exception
            raise BackendUnavailableError(f"CudaBackend cannot start here: {why}")
        from cuda.bindings import driver as drv
        from numba import cuda

        _one_gpu_a_process(cuda.get_current_device())
        self._cuda, self._drv = cuda, drv
        self.caps: DeviceCaps = caps()
        self.context = cuda.current_context()
        self.stream = cuda.stream()
        self.stream_handle = int(self.stream.handle) if self.stream.handle else 0
        self.ptx_cache: LRUCache[str] = LRUCache(int(ptx_cache_size))
        self.module_cache: LRUCache[CompiledKernel] = LRUCache(int(module_cache_size), on_evict=self._unload)
        self.host_plans: LRUCache[HostPlan] = LRUCache(int(host_plans), on_evict=HostPlan.retire,
                                                       max_weight=host_plan_bytes,
                                                       weight=lambda plan: plan.device_bytes)
        self.linked_modules: LRUCache[dict] = LRUCache(64)
        self.disk_cache: DiskCache | None = DiskCache() if diskcache.enabled() else None
        self._toolchain = _toolchain_versions()
        self._prepared: dict[tuple, tuple] = {}
        self._auto: dict[str, tuple[int, int, int]] = {}
        self._fixed: dict[str, bool] = {}  # program digest -> whether it keeps its declared workgroup size
        self.tune_store = TuneStore()
        self._retired: list[CompiledKernel] = []
        self.views = BufferViews(self)
        self._grid_states: dict[int, str] = {}  # grid-barrier states launched since the last sync
        self._hot: list[tuple[threading.Thread, list[int]]] = []  # live threads' [resident dispatches, launches]
        self._hot_ended = [0, 0]  # the counts of threads that have ended, folded in as new threads come
        self._hot_base = [0, 0]
        self._hot_lock = threading.Lock()
        self._thread = threading.local()
        self._ctx = self._context_key()
        self.streams = StreamPool(lambda: _new_stream(drv), destroy=lambda s: drv.cuStreamDestroy(s))
        self._dropped = _Dropped(self)  # dispatches dropped in flight: given back by the next one

    # ---- compilation ----------------------------------------------------------------------------
    def ptx(self, program: Program, config: DispatchConfig | None = None) -> str:
        """The PTX of `program` for this device (cached by digest, configuration and SM)."""
        from ..ptx import emit

        config = config or DispatchConfig()

        def build() -> str:  # its header names the program as given, as p.ptx() does
            with profiling.span("emit"):
                return emit(program, sm=self.caps.sm, workgroup=config.workgroup, cooperative=config.cooperative,
                            optimize=bool(config.optimize))

        return self.ptx_cache.get_or_build(_kernel_key(program, config, self.caps.sm), build)

    def kernel(self, program: Program, config: DispatchConfig | None = None) -> CompiledKernel:
        """The loaded kernel of `program` for this device: from memory, else from the disk cache,
        else emitted and assembled (and stored on disk)."""
        config = config or DispatchConfig()
        key = _kernel_key(program, config, self.caps.sm)
        return self.module_cache.get_or_build(key, lambda: self._build(program, config, key))

    def programmatic_kernel(self, program: Program, config: DispatchConfig) -> CompiledKernel | None:
        """`kernel(program, config)` built to be launched with programmatic dependent launch
        (`launch.programmatic_ptx`), or None where the device or launch cannot use it (before
        sm_90, cooperative launches)."""
        if self.caps.sm < 90 or config.cooperative:
            return None
        from .launch import programmatic_ptx

        key = _kernel_key(program, config, self.caps.sm) + ("programmatic",)
        return self.module_cache.get_or_build(key, lambda: self._build(program, config, key, programmatic_ptx))

    def _build(self, program: Program, config: DispatchConfig, key: tuple, edit=None) -> CompiledKernel:
        """The kernel from the disk cache, else assembled from the program's PTX (`edit(ptx)`
        first, where given) and stored there."""
        wg = program.workgroup_size if config.workgroup is None else config.workgroup
        if not isinstance(wg, str) and (wg[0] * wg[1] * wg[2] > self.caps.max_threads_per_block
                                        or any(v > m for v, m in zip(wg, self.caps.max_block_dim))):
            raise LaunchError(f"kernel {program.name!r}: the workgroup {tuple(wg)} exceeds this device's limits (axes "
                              f"{self.caps.max_block_dim}, {self.caps.max_threads_per_block} threads). Fix: use a "
                              "smaller workgroup and more workgroups.")  # as a launch check says it, before emit
        full_key = key + self._toolchain
        cubin = self.disk_cache.get(full_key) if self.disk_cache else None
        if cubin is not None:
            try:
                return self._load(program.name, cubin, None)
            except DeviceError as e:  # verified bytes the driver will not load: drop them and rebuild
                if isinstance(e, DeviceMemoryError):  # the bytes are fine: the GPU had no room to load them
                    raise
                self.disk_cache.remove(full_key)
        from ..ptx import assemble

        ptx = self.ptx(program, config)
        if edit is not None:
            ptx = edit(ptx)
        with profiling.span("assemble"):
            cubin = assemble(ptx, sm=self.caps.sm)
        if self.disk_cache:
            self.disk_cache.put(full_key, cubin)
        return self._load(program.name, cubin, ptx)

    def _load(self, name: str, cubin: bytes, ptx: str | None, code=None) -> CompiledKernel:
        from cuda.core import ObjectCode

        try:
            code = code or ObjectCode.from_cubin(cubin)
            kernel = code.get_kernel(name)
            attrs = kernel.attributes
            shared, max_threads = attrs.shared_size_bytes, attrs.max_threads_per_block
        except Exception as e:
            raise_if_out_of_memory(e, f"loading kernel {shown(name)}")
            raise DeviceError(f"loading kernel {shown(name)} failed ({type(e).__name__}: {e}). "
                              "Fix: check the driver supports this GPU's toolkit version.") from e
        return CompiledKernel(name, ptx, code, kernel, shared, max_threads)

    def load_linked(self, key: str, sources: Sequence[str], entries: Sequence[str]) -> dict[str, CompiledKernel]:
        """The kernels `entries` of the PTX `sources` linked together (with the math modules
        they call), assembled for this device; cached under `key` in memory and on disk."""
        self._ensure_context()

        def build() -> dict[str, CompiledKernel]:
            from cuda.core import ObjectCode

            full_key = ("linked", key, self.caps.sm) + self._toolchain
            cubin = self.disk_cache.get(full_key) if self.disk_cache else None
            if cubin is None:
                from ..ptx import assemble

                with profiling.span("assemble"):
                    cubin = assemble(list(sources), sm=self.caps.sm)
                if self.disk_cache:
                    self.disk_cache.put(full_key, cubin)
            code = ObjectCode.from_cubin(cubin)
            return {name: self._load(name, cubin, None, code) for name in entries}

        return self.linked_modules.get_or_build(key, build)

    def _unload(self, k: CompiledKernel) -> None:
        """Forget every preparation that launches `k`. Its module is unloaded with the last reference,
        so it is kept until the work already issued has finished (the next synchronisation)."""
        for key, prep in list(self._prepared.items()):
            if prep.kernel is k:
                self._prepared.pop(key, None)
        self._retired.append(k)
        if len(self._retired) > 64:
            self.context.synchronize()
            self._retired.clear()

    # ---- launching ------------------------------------------------------------------------------
    def blocks_per_sm(self, k: CompiledKernel, block: tuple[int, int, int], dynamic_shared: int = 0) -> int:
        """Occupancy: how many workgroups of `block` fit on one SM (cached)."""
        key = (block, dynamic_shared)
        if key not in k.occupancy:
            threads = block[0] * block[1] * block[2]
            k.occupancy[key] = int(k.kernel.occupancy.max_active_blocks_per_multiprocessor(
                threads, dynamic_shared))
        return k.occupancy[key]

    def cooperative_workgroups(self, program: Program, reserved: int = 0) -> int:
        """How many workgroups of `program` (its own workgroup size) one cooperative launch can
        hold at once on this device: occupancy times SMs; 0 without cooperative launches."""
        if not self.caps.cooperative_launch:
            return 0
        k = self.kernel(program, DispatchConfig(cooperative=True))
        return self.blocks_per_sm(k, tuple(program.workgroup_size)) * self.caps.sm_count

    def auto_workgroup(self, program: Program) -> tuple[int, int, int]:
        """The 1-D block size with the highest occupancy for `program` on this device (ties go to the
        one nearest 256 threads: as many threads resident, in fewer blocks for the block scheduler to
        start; 64-thread blocks ran a streaming f32 add over 2^24 items 2.1x slower on an H100),
        cached per program. Programs whose results depend on the workgroup shape (local or
        workgroup ids, workgroup buffers, barriers, subgroups, or a write an invocation past the
        largest output could make: `_shape_dependent`) or that declare a 2-D/3-D shape keep their
        own workgroup size."""
        key = program.digest()
        if key not in self._auto:
            choice = program.workgroup_size
            if not self._keeps_its_workgroup(program):
                k = self.kernel(program, DispatchConfig(workgroup="auto"))
                limit = min(k.max_threads, self.caps.max_threads_per_block)
                per_sm = self.caps.max_threads_per_sm
                best = max(range(32, limit + 1, 32),
                           key=lambda b: (min(per_sm, self.blocks_per_sm(k, (b, 1, 1)) * b), -abs(b - 256), b))
                choice = (best, 1, 1)
            self._auto[key] = choice
        return self._auto[key]

    def _keeps_its_workgroup(self, program: Program) -> bool:
        """Whether "auto" and "tune" leave `program` its declared size (a 2-D/3-D shape, or results
        that depend on it), per program: a "tune" dispatch asks on every call."""
        key = program.digest()
        fixed = self._fixed.get(key)
        if fixed is None:
            fixed = self._fixed[key] = program.workgroup_size[1:] != (1, 1) or _shape_dependent(program)
        return fixed

    def tuned_workgroup(self, program: Program, config: DispatchConfig, largest: int) -> tuple[int, int, int]:
        """The fastest 1-D block size for `program` at dispatches whose largest buffer has about
        `largest` elements (`gpu.tuning`): remembered, else timed now on zero-filled scratch
        buffers. Programs `auto_workgroup` leaves alone keep their own workgroup size here too."""
        if self._keeps_its_workgroup(program):
            return program.workgroup_size
        key = ("tune", program.digest(), self.caps.name, self.caps.sm, tuning.bucket(largest), config.optimize)
        wg = self.tune_store.get(key)
        if wg is None:
            n = max(int(largest), 1)
            scratch = [self.empty(max(d.count or n, 1), d.dtype.storage) for d in program.bound_buffers]
            base = dataclasses.replace(config, workgroup=None, grid=None, fixpoint_iterations=1, label=None)

            def time_us(c: int) -> float:
                cfg = dataclasses.replace(base, workgroup=(c, 1, 1))
                try:
                    for _ in range(2):
                        self.dispatch_resident(program, scratch, cfg)
                    self.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(5):
                        self.dispatch_resident(program, scratch, cfg)
                    self.synchronize()
                except VyreError:  # too many registers for this block size, say
                    return float("inf")
                return (time.perf_counter() - t0) / 5 * 1e6

            auto = self.auto_workgroup(program)[0]  # the occupancy rule's choice competes too: "tune" never loses to it
            cands = sorted({c for c in tuning.CANDIDATES if c <= self.caps.max_threads_per_block} | {auto})
            wg, times = tuning.fastest(cands, time_us)
            if times[wg] == float("inf"):
                return program.workgroup_size
            self.tune_store.put(key, wg, times)
            self._count(workgroups_tuned=1)
        return (wg, 1, 1)

    def _resolve(self, program: Program, config: DispatchConfig | None, inputs=None, sizes=None) -> DispatchConfig:
        """`config` checked, with "auto" and "tune" replaced by the workgroup they choose (a tuned one
        for the size of `inputs` and `sizes`, the dispatch's buffers)."""
        config = check_config(config)
        if config.workgroup in ("auto", "tune") and config.grid is not None:  # the grid counts declared workgroups
            config = dataclasses.replace(config, workgroup=program.workgroup_size)
        elif config.workgroup == "auto":
            config = dataclasses.replace(config, workgroup=self.auto_workgroup(program))
        elif config.workgroup == "tune":
            largest = _largest_input(inputs, sizes)
            config = dataclasses.replace(config, workgroup=self.tuned_workgroup(program, config, largest))
        return config

    def check_launch(self, k: CompiledKernel, shape: LaunchShape, config: DispatchConfig) -> None:
        """Every launch check, before the driver sees anything."""
        validate_launch(self.caps, shape, kernel=k.name, max_threads=k.max_threads, static_shared=k.static_shared)
        if config.cooperative and not shape.empty:
            validate_cooperative(self.caps, shape, self.blocks_per_sm(k, shape.block, shape.shared_bytes),
                                 kernel=k.name)

    # ---- host dispatch ----------------------------------------------------------------------------
    def dispatch(self, program: Program, inputs: Sequence | Mapping | None = None,
                 config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                 ) -> list[np.ndarray]:
        """Copy the inputs in, run, copy the outputs out, on this thread's stream; one synchronisation.
        A call that repeats this thread's previous one (same program and configuration objects,
        inputs of the same dtypes and sizes as plain 1-D arrays) skips binding."""
        if config is not None and checked.wanted(config):
            return checked.dispatch(self, program, inputs, config, sizes)
        last = getattr(self._thread, "host_last", None)
        arrays = None
        if last is not None and last[0] is program and last[1] is config and sizes is None:
            arrays = _repeat(inputs, last[3], last[4])
        if arrays is None:
            b, plan = self._host_plan(program, inputs, config, sizes)
            arrays, label = b.arrays, b.config.label
            self._thread.host_last = (program, config, plan, [d.name for d in program.inputs], plan.fast_key(b), label)
        else:
            plan, label = last[2], last[5]
            if plan.retired:
                self._thread.host_last = None
                return self.dispatch(program, inputs, config)
        drv, stream = self._drv, self._host_stream()
        bufs = plan.take()
        try:
            if plan.direct:
                outs, up = self._dispatch_direct(plan, bufs, arrays, label, stream)
            else:
                with profiling.span("upload"):
                    up = plan.stage_in(bufs, arrays)
                with profiling.span(f"launch {label}" if label else "launch"):
                    plan.enqueue(bufs, stream, drv)
                    _sync(drv, stream, plan.kernel.name, plan.shape)
                plan.check_finished(bufs, drv)
                with profiling.span("readback"):
                    outs = plan.collect(bufs)
        except BaseException as e:
            raise self._host_failure(e, plan) from e
        plan.give(bufs)
        self._count_host(label, plan, up, sync_points=1)
        return outs

    def _dispatch_direct(self, plan: HostPlan, bufs, arrays, label: str | None, stream: int
                         ) -> tuple[list[np.ndarray], int]:
        """A host dispatch whose copies go straight between the caller's memory and the device."""
        drv = self._drv
        with profiling.span("upload"):
            up = plan.upload_direct(bufs, arrays, stream, drv)
        with profiling.span(f"launch {label}" if label else "launch"):
            plan.enqueue(bufs, stream, drv, copy_in=False, copy_out=False)
        with profiling.span("readback"):
            try:
                outs = plan.collect_direct(bufs, stream, drv)
            except VyreError:  # a fault in the kernel surfaces at the copy; name the kernel
                _sync(drv, stream, plan.kernel.name, plan.shape)
                raise
        _sync(drv, stream, plan.kernel.name, plan.shape)
        plan.check_finished(bufs, drv)
        return outs, up

    def dispatch_async(self, program: Program, inputs: Sequence | Mapping | None = None,
                       config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                       ) -> "CudaPending":
        """Upload, launch and read back on a stream of its own; returns once the inputs are copied
        (they may be changed afterwards). What it holds goes back when its result is collected.
        A checked dispatch runs at once."""
        if checked.wanted(config):
            return checked.dispatch_now(self, program, inputs, config, sizes)
        return self._issue(program, inputs, config, sizes, timed=False)

    def dispatch_timed(self, program: Program, inputs: Sequence | Mapping | None = None,
                       config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                       ) -> tuple[list[np.ndarray], Duration]:
        """Outputs plus the device nanoseconds of the launches, measured with CUDA events (the
        host's clock for a checked dispatch)."""
        if checked.wanted(config):
            return super().dispatch_timed(program, inputs, config, sizes=sizes)
        pending = self._issue(program, inputs, config, sizes, timed=True)
        out = pending.result()
        ns = pending.device_ns()
        self._count(timed_dispatches=1, timed_ns=ns)
        return out, ns

    def _host_plan(self, program, inputs, config, sizes) -> tuple[Binding, HostPlan]:
        self._ensure_context()
        b = bind(program, inputs, self._resolve(program, config, inputs, sizes), sizes, copy_inputs=False,
                 allocate_outputs=False)
        key = plan_key(b)
        plan = self.host_plans.get(key)
        if plan is None:
            k = self.kernel(program, b.config)
            plan = self.host_plans.put(key, HostPlan(self, b, k))  # checks the launch before any allocation
        return b, plan

    def _issue(self, program, inputs, config, sizes, *, timed: bool) -> "CudaPending":
        b, plan = self._host_plan(program, inputs, config, sizes)
        drv = self._drv
        self._dropped.drain()
        pending = CudaPending(self, plan)
        pending.timed = timed
        try:
            pending.stream = stream = self.streams.take()
            pending.buffers = bufs = plan.take()
            with profiling.span("upload"):
                up = plan.stage_in(bufs, b.arrays)
            if timed:
                pending.events = (_event(drv, True), _event(drv, True))
                driver_check(drv.cuEventRecord(pending.events[0], stream), "recording an event")
            with profiling.span(b.config.label and f"launch {b.config.label}" or "launch"):
                plan.enqueue(bufs, stream, drv)
            if timed:
                driver_check(drv.cuEventRecord(pending.events[1], stream), "recording an event")
            pending.done_event = _event(drv, False)
            driver_check(drv.cuEventRecord(pending.done_event, stream), "recording an event")
        except BaseException as e:
            pending.release(failed=True)
            raise self._host_failure(e, plan) from e
        self._count_host(b.config.label, plan, up)
        return pending

    def _host_failure(self, e: BaseException, plan: HostPlan) -> BaseException:
        """The error a failed host dispatch raises (Ctrl-C and VyreErrors pass through as they are)."""
        if isinstance(e, VyreError) or not isinstance(e, Exception):
            return e
        staged = plan.in_bytes + plan.out_hi - plan.out_lo  # page-locked host memory beside the GPU's plan.total
        if device_out_of_memory(e):
            return driver_memory_error(f"kernel {plan.kernel.name!r} ({plan.total} bytes of buffers on the GPU, "
                                       f"{staged} staged in page-locked host memory)", e,
                                       "dispatch less data at a time", named=True)
        if isinstance(e, MemoryError):  # the host's: staging copies of the buffers
            return HostMemoryError(f"kernel {plan.kernel.name!r}: the host ran out of memory staging {staged} bytes "
                                   f"of its buffers{told(e)}. Fix: free host memory, or dispatch less data at a time.")
        return DeviceError(f"kernel {plan.kernel.name!r} with {plan.shape} failed: {type(e).__name__}: {e}. "
                           "Fix: a fault inside a kernel poisons the CUDA context; restart the process.")

    def _count_host(self, label: str | None, plan: HostPlan, up: int, **more: int) -> None:
        launches = 0 if plan.shape.empty else plan.iterations
        counts = dict(dispatches=1, kernel_launches=launches, bytes_uploaded=up, bytes_read_back=plan.read_bytes,
                      **more)
        if label:
            counts[f"dispatches[{label}]"] = 1
        self._count(**counts)

    def _device_bytes(self, n: int):
        """A device allocation of `n` bytes (a numba device array, freed when dropped)."""
        return self._cuda.device_array(n, dtype=np.uint8)

    def _pinned_bytes(self, n: int):
        """A pinned host allocation of `n` bytes (a numba pinned array, freed when dropped)."""
        return self._cuda.pinned_array(n, dtype=np.uint8)

    def device_timer(self, stream: Any = None) -> contextlib.AbstractContextManager[Timer]:
        """`with backend.device_timer() as t:` times the work enqueued on `stream` (this backend's by
        default; a Numba stream or a driver stream handle) inside the block with CUDA events; on
        leaving it waits for that work and sets `t.ns`. A stream of another kind is refused here,
        at the call."""
        if stream is None:
            handle = self.stream_handle
        elif isinstance(stream, INTEGERS) and not isinstance(stream, (bool, np.bool_)) and 0 <= stream < 2**64:
            handle = int(stream)
        elif is_numba_stream(stream):
            handle = stream_handle(stream)
        else:
            raise DispatchError(f"device_timer(stream={shown(stream, 40)}): the stream is {a_type(stream)}. Fix: pass "
                                "a Numba stream (numba.cuda.stream(), or cuda.external_stream(ptr) for another "
                                "library's), a driver stream handle (an int), or None for this backend's stream.")
        return _EventTimer(self, int(handle))

    def _timer_spares(self) -> list:
        """Pairs of events from earlier timers, their work completed: kept for reuse, destroyed with
        the backend."""
        spare = self.__dict__.get("_timer_events")
        if spare is None:
            spare = self.__dict__["_timer_events"] = []
            weakref.finalize(self, _destroy_events, self._drv, spare)
        return spare

    def release_memory(self) -> None:
        """Free device memory dropped since the last call now, rather than when numba next
        collects (recorded graphs and retired host plans call this when they let go), and give the
        memory pool's idle memory back to the device."""
        self.context.deallocations.clear()
        from .memory import trim

        trim()

    def _host_stream(self) -> int:
        """This thread's stream for synchronous host dispatches: taken from the pool on first use
        and given back when the thread ends."""
        lease = getattr(self._thread, "host_stream", None)
        if lease is None:
            lease = self._thread.host_stream = _Lease(self.streams)
        return lease.stream

    # ---- resident dispatch ------------------------------------------------------------------------
    def dispatch_resident(self, program: Program, buffers: Sequence | Mapping, config: DispatchConfig | None = None
                          ) -> None:
        """Run `program` over device arrays (numba device arrays or any `__cuda_array_interface__`
        object: CuPy, PyTorch) bound in binding order, writing outputs in place; nothing is copied.
        Pure outputs are zeroed first. The launch is enqueued on this backend's stream; call
        `synchronize()` (or `download`) to wait for it."""
        if getattr(_CURRENT, "context", None) != self._ctx:
            self._ensure_context()
        try:
            prep = self._prepared.get((id(program), config, _tune_bucket(config, buffers)))
        except TypeError:  # an unhashable config is not a DispatchConfig
            prep = None
        if prep is None or prep.program is not program:
            if checked.wanted(config):  # never prepared, so the checks cost unchecked calls nothing
                return checked.dispatch_resident(self, program, buffers, config)
            prep = self._prepare(program, config, buffers)
        hot = getattr(self._thread, "hot", None) or self._hot_counter()
        hot[1] += prep.run(buffers)
        hot[0] += 1
        if prep.label:
            self._count(**{f"dispatches[{prep.label}]": 1})

    def _hot_counter(self) -> list[int]:
        """This thread's resident-dispatch counters (one writer each, so exact without a lock); the
        counters of threads that have ended are folded into one, so a pool's turnover keeps no list."""
        hot = self._thread.hot = [0, 0]
        with self._hot_lock:
            live = []
            for thread, counts in self._hot:
                if thread.is_alive():
                    live.append((thread, counts))
                else:
                    self._hot_ended[0] += counts[0]
                    self._hot_ended[1] += counts[1]
            live.append((threading.current_thread(), hot))
            self._hot = live
        return hot

    def _prepare(self, program: Program, config: DispatchConfig | None, buffers=None) -> Prepared:
        """Compile and precompute for (program, config), remembered under the config as given (and
        the size bucket of `buffers`, for a tuned workgroup)."""
        self._ensure_context()
        check(program)
        prep = Prepared(self, program, self._resolve(program, check_config(config), buffers))
        if len(self._prepared) >= 4096:  # bounded: forget the oldest preparations
            for key in list(self._prepared)[:1024]:
                self._prepared.pop(key, None)
        self._prepared[(id(program), config, _tune_bucket(config, buffers))] = prep
        return prep

    def pointer_device(self, ptr: int) -> int | None:
        """The ordinal of the device that memory at `ptr` lives on, or None if it is not device memory."""
        from cuda.bindings import driver as drv

        err, dev = drv.cuPointerGetAttribute(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        return dev if err == drv.CUresult.CUDA_SUCCESS else None

    def memset(self, ptr: int, nbytes: int, stream: int | None = None) -> None:
        """Enqueue zeroing `nbytes` of device memory at `ptr` (on this backend's stream by default)."""
        driver_check(self._drv.cuMemsetD8Async(ptr, 0, nbytes, self.stream_handle if stream is None else stream),
                     f"zeroing {nbytes} bytes of device memory")

    def upload(self, array: np.ndarray):
        """A device copy of a host array (a numba device array)."""
        return self._upload(check_upload(array), None)

    def upload_in_pieces(self, array: np.ndarray, each: Callable[[Any, int, int], None]):
        """`upload(array)`, calling `each(buffer, first, count)` once the elements [first, first +
        count) of the flattened array are enqueued (in order, covering it; pieces of transfer.PIECE
        bytes, or the whole array where it is small): work `each` enqueues on this backend's
        stream runs on a piece while the host stages the next ones."""
        arr = check_upload(array)
        check_each(each)
        return self._upload(arr, each)

    def _upload(self, arr: np.ndarray, each):
        from . import transfer

        self._ensure_context()
        if arr.nbytes >= transfer.STAGED_BYTES:
            d, size = self._cuda.device_array(arr.shape, arr.dtype, stream=self.stream), arr.dtype.itemsize
            transfer.upload(self._drv, self._ctx, d.__cuda_array_interface__["data"][0], arr, self.stream_handle,
                            None if each is None else lambda at, nbytes: each(d, at // size, nbytes // size))
        else:
            d = self._cuda.to_device(arr, stream=self.stream)
            if each is not None and arr.size:
                each(d, 0, arr.size)
        self._count(bytes_uploaded=arr.nbytes)
        return d

    def empty(self, n: int, dtype) -> Any:
        """A zeroed numba device array of `n` elements of a vyre storage dtype."""
        n, dtype = check_empty(n, dtype)
        self._ensure_context()
        d = self._cuda.device_array(n, dtype=dtype, stream=self.stream)
        if d.nbytes:
            self.memset(d.__cuda_array_interface__["data"][0], d.nbytes)
        return d

    def device_range(self, buffer, offset: int = 0, count: int | None = None, what: str = "download"
                     ) -> tuple[int, int, np.dtype]:
        """(pointer, bytes, dtype) of elements [offset, offset+count) of a contiguous device array."""
        try:
            cai = buffer.__cuda_array_interface__
        except AttributeError:
            if not hasattr(buffer, "__dlpack__"):
                raise DispatchError(f"{what}: {a_type(buffer)} is not a device array. "
                                    "Fix: pass a numba/CuPy/PyTorch CUDA array.") from None
            cai = self.views._from_dlpack(buffer, _DOWNLOAD, what)
        dtype = np.dtype(cai["typestr"])
        size = int(np.prod(cai["shape"])) if cai["shape"] else 1
        offset, count = check_span(offset, count, size, what)
        strides = cai.get("strides")
        if strides is not None and size > 1 and tuple(strides) != tuple(
                int(np.prod(cai["shape"][k + 1:])) * dtype.itemsize for k in range(len(cai["shape"]))):
            raise DispatchError(f"{what} needs a contiguous device array. Fix: pass a contiguous copy.")
        return (cai["data"][0] or 0) + int(offset) * dtype.itemsize, count * dtype.itemsize, dtype

    def write(self, buffer, values, offset: int = 0) -> None:
        """Copy host `values` into elements [offset, offset + len(values)) of a contiguous device
        array, enqueued on this backend's stream after the work issued before it (staged, so
        `values` may change once it returns); converted exactly into its dtype."""
        from . import transfer

        ptr, nbytes, dtype = self.device_range(buffer, 0, None, "write")
        arr, offset = check_write(dtype, nbytes // dtype.itemsize, values, offset)
        if arr.size:
            self._ensure_context()
            transfer.upload(self._drv, self._ctx, ptr + offset * dtype.itemsize, arr, self.stream_handle)
        self._count(bytes_uploaded=arr.nbytes)

    def download(self, buffer, offset: int = 0, count: int | None = None) -> np.ndarray:
        """Elements [offset, offset+count) of a contiguous device array, after the work issued before it."""
        ptr, nbytes, dtype = self.device_range(buffer, offset, count)
        from . import transfer

        host = np.empty(nbytes // dtype.itemsize, dtype=dtype)
        self.synchronize()
        if nbytes:
            self._ensure_context()
            transfer.download(self._drv, self._ctx, host, ptr, self.stream_handle)
        self._count(bytes_read_back=nbytes)
        return host

    def read_compacted(self, values, flags, *, capacity: int | None = None) -> np.ndarray:
        """`Backend.read_compacted`, after the work issued before it (as `download`), in this
        backend's context."""
        self.synchronize()
        self._ensure_context()
        return super().read_compacted(values, flags, capacity=capacity)

    # ---- graphs -----------------------------------------------------------------------------------
    def record_graph(self, program: Program, sample_inputs: Sequence | Mapping | None = None,
                     config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None):
        """A CUDA graph of `dispatch(program, sample_inputs, config)`: its buffers allocated once,
        its copies in, `fixpoint_iterations` launches and copies out captured; `replay(inputs)`
        runs it on new inputs of the same sizes. Release it with `close()` or a `with` block."""
        from .cudagraph import CudaRecordedGraph

        return CudaRecordedGraph(self, program, sample_inputs, config, sizes)

    @coverage_once
    def record_sequence(self, steps, read=()):
        """A CUDA graph of `dispatch_sequence(steps, read)` over the resident buffers the steps
        name (kept alive by the graph); `replay()` runs every step and returns the reads."""
        from .cudagraph import CudaRecordedSequence

        return CudaRecordedSequence(self, steps, read)

    def _context_key(self) -> int:
        """This backend's context handle, as an int (what its staged copies are kept by)."""
        h = self.context.handle
        return int(getattr(h, "value", h) or 0)

    def _ensure_context(self) -> None:
        """Make this backend's context current in the calling thread (numba-cuda keeps contexts per
        thread; raw driver calls need the right one current). The driver is asked which context is
        current (other code in the thread may have changed it); the answer is kept, once a thread,
        for the resident dispatch, whose microseconds trust it."""
        drv = self._drv
        err, current = drv.cuCtxGetCurrent()
        if err == drv.CUresult.CUDA_SUCCESS and int(current) == self._ctx:
            _CURRENT.context = self._ctx
            return
        (err,) = drv.cuCtxSetCurrent(self.context.handle)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"making the CUDA context current in this thread failed: {err.name}. "
                              "Fix: create the backend in the process that uses it, after selecting the device.")
        _CURRENT.context = self._ctx

    def synchronize(self) -> None:
        """Wait for everything enqueued on this backend's stream; a kernel fault becomes DeviceError."""
        (err,) = self._drv.cuStreamSynchronize(self.stream_handle)
        if err == self._drv.CUresult.CUDA_SUCCESS and self._grid_states:
            states, self._grid_states = self._grid_states, {}
            for ptr, kernel in states.items():
                check_grid_state(self._drv, ptr, kernel)
        if err != self._drv.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"work on the backend's stream failed: {err.name}. Every resident buffer written by a "
                              "dispatch enqueued since the last synchronisation may hold partial results (launches "
                              "before the fault completed; the faulting one and those after it may have written "
                              "part of their outputs or nothing). Fix: a fault inside a kernel poisons the CUDA "
                              "context; restart the process and re-run from data you kept on the host.")
        self._count(sync_points=1)
        if self._retired:
            self.context.synchronize()  # host dispatches run on streams of their own
            self._retired.clear()

    def _hot_totals(self) -> list[int]:
        with self._hot_lock:
            return [self._hot_ended[0] + sum(h[0] for _, h in self._hot),
                    self._hot_ended[1] + sum(h[1] for _, h in self._hot)]

    def telemetry(self) -> Telemetry:
        t = super().telemetry()
        dispatches, launches = (now - base for now, base in zip(self._hot_totals(), self._hot_base))
        t["resident_dispatches"] += dispatches
        t["kernel_launches"] += launches
        for level, cache in (("ptx", self.ptx_cache), ("module", self.module_cache), ("disk", self.disk_cache)):
            if cache is not None:
                st = cache.stats()
                t[f"{level}_cache_hits"], t[f"{level}_cache_misses"] = st["hits"], st["misses"]
        return t

    def reset_telemetry(self) -> None:
        super().reset_telemetry()
        self._hot_base = self._hot_totals()
        for cache in (self.ptx_cache, self.module_cache, self.disk_cache):
            if cache is not None:
                cache.hits = cache.misses = 0

    def host_stats(self) -> dict[str, int]:
        """Host dispatch's kept device memory: plans cached, buffer sets allocated, their bytes."""
        plans = self.host_plans.values()
        return {"plans": len(plans), "plan_bytes": self.host_plans.weight_total,
                "buffer_sets": sum(p.sets_created for p in plans), "idle_sets": sum(p.idle_sets for p in plans),
                "streams": self.streams.created}


class _Held:
    """What a dispatch in flight holds (its stream, buffer set and events): kept apart from the
    CudaPending so that one dropped uncollected can hand it to the backend (`_Dropped`)."""

    __slots__ = ("stream", "buffers", "events", "done_event", "plan")

    def __init__(self, plan: HostPlan):
        self.stream = self.buffers = self.events = self.done_event = None
        self.plan = plan


def _held(name: str) -> property:
    return property(lambda self: getattr(self._held, name), lambda self, v: setattr(self._held, name, v))


class _Dropped:
    """The holdings of dispatches dropped before their result was collected. A finaliser only
    queues them (it may run inside a lock their release would take); the next dispatch gives back
    those whose work has finished, and destroys what a faulted one held."""

    def __init__(self, backend: "CudaBackend"):
        self._backend = backend
        self._queue: collections.deque = collections.deque()

    def put(self, held: _Held) -> None:
        if held.stream is not None or held.buffers is not None or held.done_event is not None:
            self._queue.append(held)

    def drain(self) -> None:
        drv, later = self._backend._drv, []
        while self._queue:
            held = self._queue.popleft()
            (err,) = drv.cuEventQuery(held.done_event) if held.done_event is not None else (drv.CUresult.CUDA_SUCCESS,)
            if err == drv.CUresult.CUDA_ERROR_NOT_READY:
                later.append(held)  # still running: its buffers and stream stay its own
                continue
            _give_back(self._backend, held, failed=err != drv.CUresult.CUDA_SUCCESS)
        self._queue.extend(later)


def _give_back(backend: "CudaBackend", held: _Held, *, failed: bool) -> None:
    """Destroy the events; give the stream and buffer set back for reuse, or after a failure (the
    device may still be using them) destroy the stream and drop the buffers."""
    drv = backend._drv
    stream, held.stream = held.stream, None
    for ev in (*(held.events or ()), held.done_event):
        if ev is not None:
            drv.cuEventDestroy(ev)
    held.events = held.done_event = None
    buffers, held.buffers = held.buffers, None
    if stream is not None and not failed:
        backend.streams.give(stream)
    elif stream is not None:
        drv.cuStreamDestroy(stream)  # its resources are freed once the work in it ends
    if buffers is not None and not failed:
        held.plan.give(buffers)


class CudaPending(InFlight):
    """A host dispatch in flight on its own stream (copy, deepcopy and pickle refuse it). One dropped
    before its result is collected gives what it holds back to the backend (see `_Dropped`)."""

    stream, buffers, events, done_event = _held("stream"), _held("buffers"), _held("events"), _held("done_event")

    def __init__(self, backend: CudaBackend, plan: HostPlan):
        self.backend, self.plan = backend, plan
        self._held = _Held(plan)
        weakref.finalize(self, backend._dropped.put, self._held)
        self.timed = False  # events around the launches (their handles go back with the rest)
        self._elapsed_ns = 0
        self._result: list[np.ndarray] | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def done(self) -> bool:
        if self._result is not None or self._error is not None or self.done_event is None:
            return True
        (err,) = self.backend._drv.cuEventQuery(self.done_event)
        return err != self.backend._drv.CUresult.CUDA_ERROR_NOT_READY  # an error: done, result() says what

    def wait(self, timeout: float | None = None) -> bool:
        timeout = wait_seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 1e-5
        while not self.done():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)
        return True

    def _collect(self) -> list[np.ndarray]:
        with self._lock:
            if self._result is None and self._error is None:
                try:
                    _sync(self.backend._drv, self.stream, self.plan.kernel.name, self.plan.shape)
                    self.plan.check_finished(self.buffers, self.backend._drv)
                    self.backend._count(sync_points=1)
                    with profiling.span("readback"):
                        self._result = self.plan.collect(self.buffers)
                    self.release(failed=False)
                except BaseException as e:
                    self._fail(e if isinstance(e, VyreError) else self.backend._host_failure(e, self.plan))
                    self.release(failed=True)
            if self._error is not None:
                self._raise_kept()
            return self._result

    def device_ns(self) -> Duration:
        """Device nanoseconds between the events around the launches (timed dispatches only)."""
        if not self.timed:
            raise DispatchError("this dispatch was not timed. Fix: use dispatch_timed.")
        self.result()
        return Duration(self._elapsed_ns)

    def release(self, *, failed: bool) -> None:
        """Give back what the dispatch holds, once. After a failure the device may still be using
        its memory, so buffers are dropped rather than reused, and the stream is destroyed."""
        drv = self.backend._drv
        if self.events is not None and not failed:
            err, ms = drv.cuEventElapsedTime(*self.events)
            self._elapsed_ns = int(round(ms * 1e6)) if err == drv.CUresult.CUDA_SUCCESS else 0
        _give_back(self.backend, self._held, failed=failed)


_DOWNLOAD = type("_Decl", (), {"name": "buffer"})()


def _shape_dependent(program: Program) -> bool:
    """Whether the program's results may depend on its workgroup size: it reads ids other than the
    invocation's, synchronises or shares within a workgroup, or an invocation past the largest
    output (whose number depends on the size, the launch being whole workgroups) may write."""
    from .. import ir

    if any(b.is_shared for b in program.buffers):
        return True
    for x in ir.walk(program.entry, distinct=True):
        if isinstance(x, ir.Builtin) and x.name != "invocation_id":
            return True
        if isinstance(x, (ir.Barrier, ir.SubgroupAdd, ir.SubgroupBallot, ir.SubgroupShuffle)):
            return True
    return _writes_past_the_end(program)


def _writes_past_the_end(program: Program) -> bool:
    """Whether an invocation past the largest output may store or update an atomic: a write not
    at the invocation's own index, outside `if id < buf_len(output)` (or after
    `if id >= buf_len(output): return`). Such an invocation's store at its own index lies past
    every output, so it is dropped whatever the launch."""
    from .. import ir
    from ..ir.optimizer import _bodies, _exprs

    nodes = list(ir.walk(program.entry))
    bound = {x.name for x in nodes if isinstance(x, ir.Let) and _own_id(x.value, ())}
    bound -= {x.name for x in nodes if isinstance(x, ir.Assign) or isinstance(x, ir.Let) and not _own_id(x.value, ())}
    bound -= {x.var for x in nodes if isinstance(x, ir.Loop)}
    outputs = {b.name for b in program.outputs}

    def guard(c, op: str, flipped: str) -> bool:
        return isinstance(c, ir.BinOp) and (
            c.op == op and _own_id(c.a, bound) and isinstance(c.b, ir.BufLen) and c.b.buffer in outputs or
            c.op == flipped and _own_id(c.b, bound) and isinstance(c.a, ir.BufLen) and c.a.buffer in outputs)

    stack = [(list(program.entry), False)]
    while stack:
        stmts, safe = stack.pop()
        for s in stmts:
            if safe:
                break
            if isinstance(s, ir.Store) and not _own_id(s.index, bound):
                return True
            if any(isinstance(x, ir.Atomic) and not _own_id(x.index, bound) for e in _exprs(s) for x in ir.walk((e,))):
                return True
            if isinstance(s, ir.If) and guard(s.cond, "ge", "le") and s.then and isinstance(s.then[-1], ir.Return) \
                    and not s.otherwise:
                safe = True  # what follows runs only below the output's end
            inner = guard(s.cond, "lt", "gt") if isinstance(s, ir.If) else False
            for k, body in enumerate(_bodies(s)):
                stack.append((list(body), inner and k == 0))
    return False


def _own_id(e, names) -> bool:
    """Whether `e` is the invocation's x id (or a variable bound to it once and never changed)."""
    from .. import ir

    return (isinstance(e, ir.Builtin) and e.name == "invocation_id" and e.axis == 0) or \
        (isinstance(e, ir.Var) and e.name in names)


def _repeat(inputs, names: list[str], key: tuple) -> dict[str, np.ndarray] | None:
    """`inputs` by name if they are plain 1-D contiguous arrays of exactly the dtypes and sizes in
    `key` (what the previous call bound), else None (the caller binds them in full)."""
    if type(inputs) not in (list, tuple) or len(inputs) != len(key):
        return None
    for a, (dt, n) in zip(inputs, key):
        if type(a) is not np.ndarray or a.dtype != dt or a.size != n or a.ndim != 1 or not a.flags.c_contiguous:
            return None
    return dict(zip(names, inputs))


class _Lease:
    """A stream held for as long as this object lives (a thread-local holds it)."""

    __slots__ = ("stream", "__weakref__")

    def __init__(self, pool: StreamPool):
        self.stream = pool.take()
        weakref.finalize(self, pool.give, self.stream)


def check_grid_state(drv, ptr: int, kernel: str) -> None:
    """Raise BarrierTimeoutError if the grid barrier state at `ptr` reports a timeout (the work
    that used it has finished)."""
    word = np.zeros(1, np.uint32)
    driver_check(drv.cuMemcpyDtoH(word.ctypes.data, ptr + 8, 4), "reading a grid barrier's state")
    if word[0]:
        from ..errors import BarrierTimeoutError
        from ..ptx.emitter import GRID_BARRIER_TIMEOUT_NS

        raise BarrierTimeoutError(
            f"kernel {shown(kernel)}: a grid barrier waited more than {GRID_BARRIER_TIMEOUT_NS / 1e9:g} s for the "
            "other workgroups and gave up; the kernel left early, so its outputs hold partial results. Fix: make "
            "every invocation reach each barrier('grid') (not inside divergent control flow or after an early "
            "return).")


def _sync(drv, stream: int, kernel: str, shape: LaunchShape) -> None:
    """Wait for `stream`; a fault in its work becomes DeviceError naming the kernel."""
    (err,) = drv.cuStreamSynchronize(stream)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"kernel {shown(kernel)} with {shape} failed: {err.name}. Fix: a fault inside a kernel "
                          "poisons the CUDA context; restart the process.")


def _destroy_events(drv, pairs: list) -> None:
    for pair in pairs:
        for ev in pair:
            drv.cuEventDestroy(ev)
    pairs.clear()


class _EventTimer(HostTimer):
    """`device_timer`'s block. Its two events are made at the call, so that running out of room for
    them is the call's error, not the block's; they go back to the spares when the block is left
    whole or never entered, and are destroyed when it fails."""

    def __init__(self, backend: "CudaBackend", stream: int):
        drv, spare = backend._drv, backend._timer_spares()
        try:
            events = spare.pop()
        except IndexError:
            start = _event(drv, True)
            try:
                events = (start, _event(drv, True))
            except BaseException:
                drv.cuEventDestroy(start)
                raise
        super().__init__()
        self._backend = backend  # alive while the timer is: its spares, where the events go back, with it
        self._drv, self._stream, self._events = drv, stream, events
        self._keep = weakref.finalize(self, _keep_events, drv, spare, events)
        self._keep.atexit = False

    @errors._checked
    def __enter__(self) -> Timer:
        self.check_unused()  # a second block's events may be another timer's by now
        self._start = 0
        try:
            driver_check(self._drv.cuEventRecord(self._events[0], self._stream), "recording an event")
        except DeviceMemoryError as e:  # named by what the caller wrote, not this class's method
            raise_if_out_of_memory(e, "entering device_timer()'s block", named=True)
            raise
        return self._timer

    def __exit__(self, kind, error, tb) -> None:
        drv, (start, end) = self._drv, self._events
        ok = False
        self._timer._why = (left_by(kind) if kind is not None else  # (the second stands if the checks below raise)
                            "the timed work or its events failed (the error said so as the block was left)")
        try:
            if kind is None:
                driver_check(drv.cuEventRecord(end, self._stream), "recording an event")
                (err,) = drv.cuEventSynchronize(end)
                if err != drv.CUresult.CUDA_SUCCESS:
                    raise DeviceError(f"the timed work failed: {err.name}. Fix: a fault inside a kernel poisons the "
                                      "CUDA context; restart the process.")
                err, ms = drv.cuEventElapsedTime(start, end)
                driver_check(err, "reading the time between two events")
                self._timer._ns = int(round(ms * 1e6))
                ok = True
        finally:
            if ok:
                self._keep()
            elif self._keep.detach() is not None:
                _destroy_events(drv, [self._events])


def _keep_events(drv, spare: list, events: tuple) -> None:
    """A timer's events, their work done or never recorded, back to the spares (at most 8 pairs)."""
    if len(spare) < 8:
        spare.append(events)
    else:
        _destroy_events(drv, [events])


def _event(drv, timing: bool):
    flags = drv.CUevent_flags.CU_EVENT_DEFAULT if timing else drv.CUevent_flags.CU_EVENT_DISABLE_TIMING
    err, ev = drv.cuEventCreate(flags)
    driver_check((err,), "creating a CUDA event")
    return ev


def _new_stream(drv) -> int:
    err, s = drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
    driver_check((err,), "creating a CUDA stream")
    return int(s)


def _toolchain_versions() -> tuple:
    """What besides the program decides the cubin: driver, nvJitLink and the emitter's code."""
    from cuda.bindings import driver

    try:
        from cuda.bindings import nvjitlink

        jit = tuple(nvjitlink.version())
    except Exception:  # an unknown nvJitLink version only makes the key more specific
        jit = ("unknown",)
    _, drv = driver.cuDriverGetVersion()
    return (drv, jit, code_fingerprint())


def _kernel_key(program: Program, config: DispatchConfig, sm: int) -> tuple:
    """What a loaded kernel is kept by, in memory and (with the toolchain) on disk: the program as
    written, not its optimized form, so that a kernel found on disk costs no optimization (the
    optimizer's code is in the toolchain's fingerprint)."""
    return (program.digest(), config.key(), bool(config.optimize), sm)


def _tune_bucket(config, buffers) -> int | None:
    """The size bucket a tuned workgroup depends on (None when `config` does not tune)."""
    return tuning.bucket(_largest_input(buffers, None)) if getattr(config, "workgroup", None) == "tune" else None


def _largest_input(inputs, sizes) -> int:
    """The most elements any of a dispatch's inputs (arrays, device arrays, lists) or given sizes
    has; 0 for inputs it cannot read (bind() then says what is wrong with them)."""
    try:
        values = list(inputs.values()) if isinstance(inputs, Mapping) else \
            [] if inputs is None else list(inputs) if isinstance(inputs, (list, tuple)) else []
        out = max([int(v) for v in (sizes.values() if isinstance(sizes, Mapping) else ())
                   if isinstance(v, INTEGERS)] + [0])
    except Exception:
        return 0
    for a in values:
        cai = getattr(a, "__cuda_array_interface__", None)
        try:
            out = max(out, int(np.prod(cai["shape"])) if cai is not None else int(np.size(a)))
        except Exception:
            pass
    return out

check_calls(globals(), ["CudaPending"])
