"""The CUDA backend: vyre programs as PTX, assembled by nvJitLink and launched through numba-cuda."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..backend import Backend
from ..bindings import Binding, bind, output_view
from ..config import DispatchConfig
from ..errors import DeviceError, DispatchError, VyreError
from ..ir import Program, check
from ..ir.program import Role
from .cache import LRUCache
from .device import DeviceCaps, caps
from .launch import ArgBlock, LaunchShape, launch, validate_cooperative, validate_launch


@dataclass
class CompiledKernel:
    """A loaded kernel: the numba-cuda module and function, and what launch checks need."""

    name: str
    ptx: str
    module: Any
    function: Any
    static_shared: int
    max_threads: int
    registers: int

    @property
    def handle(self):
        return self.function.handle


class CudaBackend(Backend):
    """Runs programs on the current CUDA device. Results equal the reference backend's."""

    name = "cuda"

    def __init__(self, *, ptx_cache_size: int = 512, module_cache_size: int = 128):
        from numba import cuda

        self._cuda = cuda
        self.caps: DeviceCaps = caps()
        self.context = cuda.current_context()
        self.stream = cuda.stream()
        self.ptx_cache: LRUCache[str] = LRUCache(ptx_cache_size)
        self.module_cache: LRUCache[CompiledKernel] = LRUCache(module_cache_size, on_evict=self._unload)
        self._blocks_per_sm: dict[tuple, int] = {}
        self._prepared: dict[tuple, tuple] = {}
        self._stream_handle = int(self.stream.handle) if self.stream.handle else 0

    # ---- compilation ----------------------------------------------------------------------------
    def ptx(self, program: Program, config: DispatchConfig | None = None) -> str:
        """The PTX of `program` for this device (cached by digest, configuration and SM)."""
        from ..ptx import emit

        config = config or DispatchConfig()
        key = (program.digest(), config.key(), self.caps.sm)
        return self.ptx_cache.get_or_build(key, lambda: emit(program, sm=self.caps.sm, config=config))

    def kernel(self, program: Program, config: DispatchConfig | None = None) -> CompiledKernel:
        """The loaded kernel of `program` (cached by its PTX text)."""
        ptx = self.ptx(program, config)
        key = hashlib.sha256(ptx.encode()).hexdigest()
        return self.module_cache.get_or_build(key, lambda: self._load(program.name, ptx))

    def _load(self, name: str, ptx: str) -> CompiledKernel:
        from cuda.core import ObjectCode

        from ..ptx import assemble

        cubin = assemble(ptx, sm=self.caps.sm)
        try:
            module = self.context.create_module_image(ObjectCode.from_cubin(cubin))
            fn = module.get_function(name)
        except Exception as e:
            raise DeviceError(f"loading kernel {name!r} failed ({type(e).__name__}: {e}). "
                              "Fix: check the driver supports this GPU's toolkit version.") from e
        a = fn.attrs
        return CompiledKernel(name, ptx, module, fn, a.shared, a.maxthreads, a.regs)

    def _unload(self, k: CompiledKernel) -> None:
        try:
            self.context.unload_module(k.module)
        except Exception:  # already gone with the context: nothing left to free
            pass

    # ---- launching ------------------------------------------------------------------------------
    def blocks_per_sm(self, k: CompiledKernel, block: tuple[int, int, int], dynamic_shared: int = 0) -> int:
        """Occupancy: how many workgroups of `block` fit on one SM (cached)."""
        key = (id(k), block, dynamic_shared)
        if key not in self._blocks_per_sm:
            threads = block[0] * block[1] * block[2]
            self._blocks_per_sm[key] = int(self.context.get_active_blocks_per_multiprocessor(
                k.function, threads, dynamic_shared))
        return self._blocks_per_sm[key]

    def check_launch(self, k: CompiledKernel, shape: LaunchShape, config: DispatchConfig) -> None:
        """Every launch check, before the driver sees anything."""
        validate_launch(self.caps, shape, kernel=k.name, max_threads=k.max_threads, static_shared=k.static_shared)
        if config.cooperative and not shape.empty:
            validate_cooperative(self.caps, shape, self.blocks_per_sm(k, shape.block, shape.shared_bytes),
                                 kernel=k.name)

    def dispatch(self, program: Program, inputs: Sequence | Mapping | None = None,
                 config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                 ) -> list[np.ndarray]:
        b = bind(program, inputs, config, sizes, copy_inputs=False)
        k = self.kernel(program, b.config)
        shape = LaunchShape(b.grid, b.workgroup)
        self.check_launch(k, shape, b.config)
        try:
            device = self._upload(b)
            self._launch(k, shape, b, device)
            out = [self._readback(d, decl) for decl, d in ((o, device[o.name]) for o in program.outputs)]
            self.stream.synchronize()
        except VyreError:
            raise
        except Exception as e:
            raise DeviceError(f"kernel {k.name!r} with {shape} failed: {type(e).__name__}: {e}. "
                              "Fix: a fault inside a kernel poisons the CUDA context; restart the process. "
                              "Report it with the program's JSON if it passes the reference backend.") from e
        return out

    def dispatch_resident(self, program: Program, buffers: Sequence | Mapping, config: DispatchConfig | None = None
                          ) -> None:
        """Run `program` over device arrays (numba device arrays or any `__cuda_array_interface__`
        object: CuPy, PyTorch) bound in binding order, writing outputs in place; nothing is copied.
        Pure outputs are zeroed first. The launch is enqueued on this backend's stream; call
        `synchronize()` (or read a result) to wait for it."""
        config = config or DispatchConfig()
        prep = self._prepared.get((program.digest(), config))
        if prep is None:
            check(program)
            k = self.kernel(program, config)
            bound = program.bound_buffers
            prep = self._prepared[(program.digest(), config)] = (k, bound, [d.role is Role.OUTPUT for d in bound],
                                                                 [d.is_output for d in bound])
        k, bound, pure, is_out = prep
        if isinstance(buffers, Mapping):
            buffers = [buffers[d.name] if d.name in buffers else _missing(program, d.name) for d in bound]
        if len(buffers) != len(bound):
            raise DispatchError(f"dispatch_resident of {program.name!r}: expected {len(bound)} buffers "
                                f"{[d.name for d in bound]} in binding order, got {len(buffers)}. "
                                "Fix: pass one device array per non-workgroup buffer, outputs included.")
        args = ArgBlock(2 * len(bound))
        n = len(bound)
        cover = 0
        for i, (decl, buf) in enumerate(zip(bound, buffers)):
            ptr, size = _device_view(decl, buf, program.name)
            args.values[i] = ptr
            args.values[n + i] = size
            if is_out[i]:
                cover = max(cover, size)
                if pure[i] and size:
                    _memset(ptr, size * decl.dtype.nbytes, self._stream_handle)
        wg = program.workgroup_size if config.workgroup in (None, "auto") else config.workgroup
        shape = LaunchShape(config.grid or (-(-cover // wg[0]), 1, 1), wg)
        self.check_launch(k, shape, config)
        if not shape.empty:
            for _ in range(config.fixpoint_iterations):
                launch(k.handle, shape, args, self._stream_handle, kernel=k.name, cooperative=config.cooperative)

    def synchronize(self) -> None:
        """Wait for everything enqueued on this backend's stream; a kernel fault becomes DeviceError."""
        try:
            self.stream.synchronize()
        except Exception as e:
            raise DeviceError(f"the stream failed: {type(e).__name__}: {e}. Fix: a fault inside a kernel poisons "
                              "the CUDA context; restart the process.") from e

    def _upload(self, b: Binding) -> dict[str, Any]:
        cuda, stream = self._cuda, self.stream
        device = {}
        for decl in b.program.bound_buffers:
            arr = b.arrays[decl.name]
            if decl.role is Role.OUTPUT:
                d = cuda.device_array(arr.size, dtype=arr.dtype, stream=stream)
                if arr.size:
                    d.gpu_data.memset(0, stream=stream)
            else:
                d = cuda.to_device(arr, stream=stream)
            device[decl.name] = d
        return device

    def _launch(self, k: CompiledKernel, shape: LaunchShape, b: Binding, device: Mapping[str, Any]) -> None:
        bound = b.program.bound_buffers
        args = ArgBlock(2 * len(bound))
        for i, decl in enumerate(bound):
            d = device[decl.name]
            args.values[i] = d.__cuda_array_interface__["data"][0] or 0 if d.size else 0
            args.values[len(bound) + i] = d.size
        if shape.empty:
            return
        for _ in range(b.config.fixpoint_iterations):
            launch(k.handle, shape, args, self._stream_handle, kernel=k.name, cooperative=b.config.cooperative)

    def _readback(self, d, decl) -> np.ndarray:
        view = output_view(decl, d)
        return view.copy_to_host(stream=self.stream) if view.size else np.zeros(0, dtype=d.dtype)


def _missing(program: Program, name: str):
    raise DispatchError(f"dispatch_resident of {program.name!r}: no buffer given for {name!r}. "
                        "Fix: pass a device array for every non-workgroup buffer, outputs included.")


def _device_view(decl, buf, kernel: str) -> tuple[int, int]:
    """(device pointer, element count) of a device array bound to `decl`, after checking it."""
    try:
        cai = buf.__cuda_array_interface__
    except AttributeError:
        raise DispatchError(f"dispatch_resident of {kernel!r}: {decl.name!r} is a {type(buf).__name__}, not a device "
                            "array. Fix: pass numba.cuda.to_device(x) (or a CuPy/PyTorch CUDA array); use "
                            "dispatch() for host arrays.") from None
    want = decl.dtype.storage
    if np.dtype(cai["typestr"]) != want:
        raise DispatchError(f"dispatch_resident of {kernel!r}: {decl.name!r} is declared {decl.dtype} but the device "
                            f"array holds {np.dtype(cai['typestr'])}. Fix: allocate it with dtype {want}.")
    shape = cai["shape"]
    size = int(np.prod(shape)) if shape else 1
    strides = cai.get("strides")
    if strides is not None and size > 1:
        expect, ok = want.itemsize, True
        for dim, st in zip(reversed(shape), reversed(strides)):
            if dim > 1 and st != expect:
                ok = False
            expect *= dim
        if not ok:
            raise DispatchError(f"dispatch_resident of {kernel!r}: {decl.name!r} is a non-contiguous view "
                                f"(strides {strides}). Fix: pass a contiguous copy (e.g. cupy.ascontiguousarray).")
    if decl.count and size < decl.count:
        raise DispatchError(f"dispatch_resident of {kernel!r}: {decl.name!r} is declared with {decl.count} elements "
                            f"but the device array has {size}. Fix: allocate at least {decl.count} elements.")
    return (cai["data"][0] or 0) if size else 0, size


def _memset(ptr: int, nbytes: int, stream: int) -> None:
    from cuda.bindings import driver

    (err,) = driver.cuMemsetD8Async(ptr, 0, nbytes, stream)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"zeroing an output of {nbytes} bytes failed: {err.name}. Fix: check the device array is "
                          "alive and belongs to the current context.")
