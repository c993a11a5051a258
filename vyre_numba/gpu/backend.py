"""The CUDA backend: vyre programs as PTX, assembled by nvJitLink and launched through numba-cuda."""
from __future__ import annotations

import collections
import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..backend import Backend, Pending
from ..bindings import Binding, bind, check_config
from ..config import DispatchConfig
from ..errors import DeviceError, DispatchError, VyreError
from ..ir import Program, check
from ..ir.program import Role
from .. import profiling
from . import diskcache
from ..lru import LRUCache
from .diskcache import DiskCache, code_fingerprint
from .device import DeviceCaps, caps
from .memory import Pool, StreamPool
from .resident import BufferViews, Prepared
from .launch import ArgBlock, LaunchShape, launch, validate_cooperative, validate_launch


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

    @property
    def handle(self):
        return self.kernel.handle

    @property
    def registers(self) -> int:
        return self.kernel.attributes.num_regs


class CudaBackend(Backend):
    """Runs programs on the current CUDA device. Results equal the reference backend's."""

    name = "cuda"

    def __init__(self, *, ptx_cache_size: int = 512, module_cache_size: int = 128):
        """Bind to the current device and context; caches are bounded by the given entry counts."""
        from numba import cuda

        self._cuda = cuda
        self.caps: DeviceCaps = caps()
        self.context = cuda.current_context()
        self.stream = cuda.stream()
        self.ptx_cache: LRUCache[str] = LRUCache(ptx_cache_size)
        self.module_cache: LRUCache[CompiledKernel] = LRUCache(module_cache_size, on_evict=self._unload)
        self.disk_cache: DiskCache | None = DiskCache() if diskcache.enabled() else None
        self._toolchain = _toolchain_versions()
        self._prepared: dict[tuple, tuple] = {}
        self._auto: dict[str, tuple[int, int, int]] = {}
        self._retired: list[CompiledKernel] = []
        self.views = BufferViews(self)
        self._counters = collections.Counter()
        self._resident_dispatches = self._resident_launches = 0  # hot-path counters, merged by telemetry()
        self._stream_handle = int(self.stream.handle) if self.stream.handle else 0
        self._thread = threading.local()
        self._thread.ready = True
        self.streams = StreamPool(cuda.stream)
        self.pinned_pool = Pool(lambda n: cuda.pinned_array(n, dtype=np.uint8), max_bytes=256 << 20)
        self.device_pool = Pool(lambda n: cuda.device_array(n, dtype=np.uint8), max_bytes=1 << 30)

    # ---- compilation ----------------------------------------------------------------------------
    def ptx(self, program: Program, config: DispatchConfig | None = None) -> str:
        """The PTX of `program` for this device (cached by digest, configuration and SM)."""
        from ..ptx import emit

        config = config or DispatchConfig()
        key = (program.digest(), config.key(), self.caps.sm)
        def build() -> str:
            with profiling.range("emit"):
                return emit(program, sm=self.caps.sm, config=config)

        return self.ptx_cache.get_or_build(key, build)

    def kernel(self, program: Program, config: DispatchConfig | None = None) -> CompiledKernel:
        """The loaded kernel of `program` for this device: from memory, else from the disk cache,
        else emitted and assembled (and stored on disk)."""
        config = config or DispatchConfig()
        key = (program.digest(), config.key(), self.caps.sm)
        return self.module_cache.get_or_build(key, lambda: self._build(program, config, key))

    def _build(self, program: Program, config: DispatchConfig, key: tuple) -> CompiledKernel:
        full_key = key + self._toolchain
        cubin = self.disk_cache.get(full_key) if self.disk_cache else None
        if cubin is not None:
            try:
                return self._load(program.name, cubin, None)
            except DeviceError:  # verified bytes the driver will not load: drop them and rebuild
                self.disk_cache.remove(full_key)
        from ..ptx import assemble

        ptx = self.ptx(program, config)
        with profiling.range("assemble"):
            cubin = assemble(ptx, sm=self.caps.sm)
        if self.disk_cache:
            self.disk_cache.put(full_key, cubin)
        return self._load(program.name, cubin, ptx)

    def _load(self, name: str, cubin: bytes, ptx: str | None) -> CompiledKernel:
        from cuda.core import ObjectCode

        try:
            code = ObjectCode.from_cubin(cubin)
            kernel = code.get_kernel(name)
            attrs = kernel.attributes
            shared, max_threads = attrs.shared_size_bytes, attrs.max_threads_per_block
        except Exception as e:
            raise DeviceError(f"loading kernel {name!r} failed ({type(e).__name__}: {e}). "
                              "Fix: check the driver supports this GPU's toolkit version.") from e
        return CompiledKernel(name, ptx, code, kernel, shared, max_threads)

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

    def auto_workgroup(self, program: Program) -> tuple[int, int, int]:
        """The 1-D block size with the highest occupancy for `program` on this device (ties go to the
        smaller), cached per program. Programs whose results depend on the workgroup shape (local or
        workgroup ids, workgroup buffers, barriers, subgroups) or that declare a 2-D/3-D shape keep
        their own workgroup size."""
        key = program.digest()
        if key not in self._auto:
            choice = program.workgroup_size
            if program.workgroup_size[1:] == (1, 1) and not _shape_dependent(program):
                k = self.kernel(program, DispatchConfig(workgroup="auto"))
                limit = min(k.max_threads, self.caps.max_threads_per_block)
                per_sm = self.caps.max_threads_per_sm
                best = max(range(32, limit + 1, 32),
                           key=lambda b: (min(per_sm, self.blocks_per_sm(k, (b, 1, 1)) * b), -b))
                choice = (best, 1, 1)
            self._auto[key] = choice
        return self._auto[key]

    def _resolve(self, program: Program, config: DispatchConfig | None) -> DispatchConfig:
        config = config or DispatchConfig()
        if config.workgroup == "auto":
            config = dataclasses.replace(config, workgroup=self.auto_workgroup(program))
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
        return self.dispatch_async(program, inputs, config, sizes=sizes).result()

    def dispatch_async(self, program: Program, inputs: Sequence | Mapping | None = None,
                       config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                       ) -> "CudaPending":
        """Upload, launch and read back on a stream of its own; returns at once. Everything it
        takes from the pools goes back when its result is collected (or on error)."""
        return self._issue(program, inputs, config, sizes, timed=False)

    def dispatch_timed(self, program: Program, inputs: Sequence | Mapping | None = None,
                       config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                       ) -> tuple[list[np.ndarray], int]:
        """Outputs plus the device nanoseconds of the launches, measured with CUDA events."""
        pending = self._issue(program, inputs, config, sizes, timed=True)
        out = pending.result()
        ns = pending.device_ns()
        self._count(timed_dispatches=1, timed_ns=ns)
        return out, ns

    def _issue(self, program, inputs, config, sizes, *, timed: bool) -> "CudaPending":
        self._ensure_context()
        b = bind(program, inputs, self._resolve(program, config), sizes, copy_inputs=False)
        k = self.kernel(program, b.config)
        shape = LaunchShape(b.grid, b.workgroup)
        self.check_launch(k, shape, b.config)
        pending = CudaPending(self, k.name, shape)
        try:
            self._stage(pending, k, shape, b, timed)
        except BaseException as e:
            pending.release()
            if isinstance(e, VyreError) or not isinstance(e, Exception):
                raise
            if "OUT_OF_MEMORY" in str(e) or isinstance(e, MemoryError):
                raise DeviceError(f"kernel {k.name!r}: out of memory staging the dispatch ({e}). "
                                  "Fix: free device or pinned memory, or dispatch less data at a time.") from e
            raise DeviceError(f"kernel {k.name!r} with {shape} failed: {type(e).__name__}: {e}. "
                              "Fix: a fault inside a kernel poisons the CUDA context; restart the process.") from e
        return pending

    def _stage(self, pending: "CudaPending", k: CompiledKernel, shape: LaunchShape, b: Binding, timed: bool) -> None:
        from cuda.bindings import driver as drv

        stream = pending.stream = self.streams.take()
        sh = int(stream.handle) if stream.handle else 0
        bound = b.program.bound_buffers
        args = ArgBlock(2 * len(bound))
        up = 0
        with profiling.range("upload"):
            for i, decl in enumerate(bound):
                arr = b.arrays[decl.name]
                nbytes = arr.nbytes
                dev = self.device_pool.take(nbytes)
                pending.device.append((dev, nbytes))
                ptr = dev.__cuda_array_interface__["data"][0]
                args.values[i], args.values[len(bound) + i] = ptr, arr.size
                if decl.role is Role.OUTPUT:
                    if nbytes:
                        _check(drv.cuMemsetD8Async(ptr, 0, nbytes, sh), "zeroing an output")
                elif nbytes:
                    pinned = self.pinned_pool.take(nbytes)
                    pending.pinned.append((pinned, nbytes))
                    pinned[:nbytes] = arr.view(np.uint8).reshape(-1)
                    _check(drv.cuMemcpyHtoDAsync(ptr, pinned.ctypes.data, nbytes, sh), "uploading an input")
                    up += nbytes
        if timed:
            pending.events = (self._cuda.event(), self._cuda.event())
            pending.events[0].record(stream)
        with profiling.range(f"launch {b.config.label}" if b.config.label else "launch"):
            if not shape.empty:
                for _ in range(b.config.fixpoint_iterations):
                    launch(k.handle, shape, args, sh, kernel=k.name, cooperative=b.config.cooperative)
        if timed:
            pending.events[1].record(stream)
        down = 0
        with profiling.range("readback"):
            index = {d.name: i for i, d in enumerate(bound)}
            for decl in b.program.outputs:
                arr = b.arrays[decl.name]
                lo, hi = (0, arr.nbytes) if decl.output_byte_range is None else decl.output_byte_range
                nbytes = max(0, min(hi, arr.nbytes) - lo)
                host = self.pinned_pool.take(nbytes)
                pending.pinned.append((host, nbytes))
                pending.outputs.append((host, nbytes, decl.dtype.storage))
                if nbytes:
                    src = int(args.values[index[decl.name]]) + lo
                    _check(drv.cuMemcpyDtoHAsync(host.ctypes.data, src, nbytes, sh), "reading back an output")
                    down += nbytes
        pending.done_event = self._cuda.event(timing=False)
        pending.done_event.record(stream)
        launches = 0 if shape.empty else b.config.fixpoint_iterations
        self._count(dispatches=1, kernel_launches=launches, bytes_uploaded=up, bytes_read_back=down)
        if b.config.label:
            self._count(**{f"dispatches[{b.config.label}]": 1})

    # ---- resident dispatch ------------------------------------------------------------------------
    def dispatch_resident(self, program: Program, buffers: Sequence | Mapping, config: DispatchConfig | None = None
                          ) -> None:
        """Run `program` over device arrays (numba device arrays or any `__cuda_array_interface__`
        object: CuPy, PyTorch) bound in binding order, writing outputs in place; nothing is copied.
        Pure outputs are zeroed first. The launch is enqueued on this backend's stream; call
        `synchronize()` (or `download`) to wait for it."""
        if not getattr(self._thread, "ready", False):
            self._ensure_context()
        try:
            prep = self._prepared.get((id(program), config))
        except TypeError:  # an unhashable config is not a DispatchConfig
            prep = None
        if prep is None or prep.program is not program:
            prep = self._prepare(program, config)
        self._resident_dispatches += 1
        self._resident_launches += prep.run(buffers)
        if prep.label:
            self._count(**{f"dispatches[{prep.label}]": 1})

    def _prepare(self, program: Program, config: DispatchConfig | None) -> Prepared:
        """Compile and precompute for (program, config), remembered under the config as given."""
        self._ensure_context()
        check(program)
        prep = Prepared(self, program, self._resolve(program, check_config(config)))
        if len(self._prepared) >= 4096:  # bounded: forget the oldest preparations
            for key in list(self._prepared)[:1024]:
                self._prepared.pop(key, None)
        self._prepared[(id(program), config)] = prep
        return prep

    def pointer_device(self, ptr: int) -> int | None:
        """The ordinal of the device that memory at `ptr` lives on, or None if it is not device memory."""
        from cuda.bindings import driver as drv

        err, dev = drv.cuPointerGetAttribute(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        return dev if err == drv.CUresult.CUDA_SUCCESS else None

    def _memset(self, ptr: int, nbytes: int, stream: int) -> None:
        _memset(ptr, nbytes, stream)

    def upload(self, array: np.ndarray):
        """A device copy of a host array (a numba device array)."""
        arr = np.ascontiguousarray(array)
        d = self._cuda.to_device(arr, stream=self.stream)
        self._count(bytes_uploaded=arr.nbytes)
        return d

    def empty(self, n: int, dtype) -> Any:
        """A zeroed numba device array of `n` elements."""
        d = self._cuda.device_array(int(n), dtype=dtype, stream=self.stream)
        if d.nbytes:
            _memset(d.__cuda_array_interface__["data"][0], d.nbytes, self._stream_handle)
        return d

    def download(self, buffer, offset: int = 0, count: int | None = None) -> np.ndarray:
        """Elements [offset, offset+count) of a contiguous device array, after the work issued before it."""
        from cuda.bindings import driver as drv

        try:
            cai = buffer.__cuda_array_interface__
        except AttributeError:
            if not hasattr(buffer, "__dlpack__"):
                raise DispatchError(f"download() got a {type(buffer).__name__}, not a device array. "
                                    "Fix: pass a numba/CuPy/PyTorch CUDA array.") from None
            cai = self.views._from_dlpack(buffer, _DOWNLOAD, "download")
        dtype = np.dtype(cai["typestr"])
        size = int(np.prod(cai["shape"])) if cai["shape"] else 1
        count = size - offset if count is None else count
        if offset < 0 or count < 0 or offset + count > size:
            raise DispatchError(f"download(offset={offset}, count={count}) is outside the buffer's {size} elements. "
                                "Fix: pass a range inside the buffer.")
        strides = cai.get("strides")
        if strides is not None and size > 1 and tuple(strides) != tuple(
                int(np.prod(cai["shape"][k + 1:])) * dtype.itemsize for k in range(len(cai["shape"]))):
            raise DispatchError("download() needs a contiguous device array. Fix: download a contiguous copy.")
        host = np.empty(count, dtype=dtype)
        self.synchronize()
        if count:
            self._ensure_context()
            _check(drv.cuMemcpyDtoH(host.ctypes.data, cai["data"][0] + offset * dtype.itemsize, host.nbytes),
                   "reading back a buffer")
        self._count(bytes_read_back=host.nbytes)
        return host

    def _ensure_context(self) -> None:
        """Make this backend's context current in the calling thread (numba-cuda keeps contexts per
        thread; raw driver calls need the right one current)."""
        if getattr(self._thread, "ready", False):
            return
        from cuda.bindings import driver as drv

        (err,) = drv.cuCtxSetCurrent(self.context.handle)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"making the CUDA context current in this thread failed: {err.name}. "
                              "Fix: create the backend in the process that uses it, after selecting the device.")
        self._thread.ready = True

    def synchronize(self) -> None:
        """Wait for everything enqueued on this backend's stream; a kernel fault becomes DeviceError."""
        try:
            self.stream.synchronize()
        except Exception as e:
            raise DeviceError(f"the stream failed: {type(e).__name__}: {e}. Fix: a fault inside a kernel poisons "
                              "the CUDA context; restart the process.") from e
        self._count(sync_points=1)
        if self._retired:
            self.context.synchronize()  # host dispatches run on streams of their own
            self._retired.clear()

    def telemetry(self) -> dict[str, int]:
        self._count(resident_dispatches=self._resident_dispatches, kernel_launches=self._resident_launches)
        self._resident_dispatches = self._resident_launches = 0
        t = super().telemetry()
        for level, cache in (("ptx", self.ptx_cache), ("module", self.module_cache), ("disk", self.disk_cache)):
            if cache is not None:
                st = cache.stats()
                t[f"{level}_cache_hits"], t[f"{level}_cache_misses"] = st["hits"], st["misses"]
        return t

    def reset_telemetry(self) -> None:
        super().reset_telemetry()
        self._resident_dispatches = self._resident_launches = 0
        for cache in (self.ptx_cache, self.module_cache, self.disk_cache):
            if cache is not None:
                cache.hits = cache.misses = 0


class CudaPending(Pending):
    """A host dispatch in flight on its own stream."""

    def __init__(self, backend: CudaBackend, kernel: str, shape: LaunchShape):
        self.backend, self.kernel, self.shape = backend, kernel, shape
        self.stream = None
        self.device: list = []
        self.pinned: list = []
        self.outputs: list = []
        self.events = None
        self.done_event = None
        self._result: list[np.ndarray] | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def done(self) -> bool:
        if self._result is not None or self._error is not None:
            return True
        try:
            return self.done_event is None or self.done_event.query()
        except Exception:  # a failed stream: done, and result() says what went wrong
            return True

    def wait(self, timeout: float | None = None) -> bool:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 1e-5
        while not self.done():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)
        return True

    def result(self) -> list[np.ndarray]:
        with self._lock:
            return self._collect()

    def _collect(self) -> list[np.ndarray]:
        if self._result is None and self._error is None:
            try:
                self.stream.synchronize()
                self.backend._count(sync_points=1)
                self._result = [host[:n].view(dt).copy() for host, n, dt in self.outputs]
            except Exception as e:
                self._error = DeviceError(
                    f"kernel {self.kernel!r} with {self.shape} failed: {type(e).__name__}: {e}. "
                    "Fix: a fault inside a kernel poisons the CUDA context; restart the process.")
            finally:
                self.release()
        if self._error is not None:
            raise self._error
        return self._result

    def device_ns(self) -> int:
        """Device nanoseconds between the events around the launches (timed dispatches only)."""
        if self.events is None:
            raise DispatchError("this dispatch was not timed. Fix: use dispatch_timed.")
        self.result()
        return int(round(self.backend._cuda.event_elapsed_time(*self.events) * 1e6))

    def release(self) -> None:
        """Give pooled memory and the stream back (after the stream has finished with them)."""
        b = self.backend
        stream, self.stream = self.stream, None
        device, self.device = self.device, []
        pinned, self.pinned = self.pinned, []
        if stream is not None:
            try:
                stream.synchronize()
            except Exception:  # the error itself is reported by result(); the memory may still be in use
                return
            b.streams.give(stream)
        for dev, n in device:
            b.device_pool.give(dev, n)
        for host, n in pinned:
            b.pinned_pool.give(host, n)


_DOWNLOAD = type("_Decl", (), {"name": "buffer"})()


def _shape_dependent(program: Program) -> bool:
    from .. import ir

    if any(b.role is Role.SHARED for b in program.buffers):
        return True
    for x in ir.walk(program.entry):
        if isinstance(x, ir.Builtin) and x.name != "invocation_id":
            return True
        if isinstance(x, (ir.Barrier, ir.SubgroupAdd, ir.SubgroupBallot, ir.SubgroupShuffle)):
            return True
    return False


def _check(result, what: str) -> None:
    from cuda.bindings import driver as drv

    err = result[0] if isinstance(result, tuple) else result
    if err != drv.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"{what} failed: {err.name}. Fix: check the device is healthy (nvidia-smi) and memory "
                          "is not exhausted.")


def _memset(ptr: int, nbytes: int, stream: int) -> None:
    from cuda.bindings import driver

    _check(driver.cuMemsetD8Async(ptr, 0, nbytes, stream), f"zeroing {nbytes} bytes of an output")


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
