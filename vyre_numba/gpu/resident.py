"""The hot path of resident dispatch: a program prepared once per (program, configuration), then
launched over device arrays with as little Python as a launch can take. Every check still runs:
the first sight of a buffer checks it fully; later sights check only what can change (freed)."""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..bindings import STRIDED_FIX, check_resident, launch_geometry, storage_mismatch
from ..config import DispatchConfig
from ..errors import DispatchError, a_type, shown
from ..ir import Program
from ..ir.program import Role
from .launch import KernelLaunch, LaunchShape



class BufferViews:
    """(pointer, element count, dtype, finalizer) of each device array seen, checked once; later
    sights re-check only dtype, size and whether it was freed."""

    def __init__(self, backend):
        self.backend = backend
        self._views: dict[int, tuple] = {}

    def get(self, buf, decl, dtype: np.dtype, kernel: str) -> tuple[int, int, object]:
        """(pointer, element count, finalizer or None) of `buf` bound to `decl`, checked. Only numba
        device arrays (whose memory cannot move) are remembered; other arrays (CuPy, PyTorch, DLPack)
        are looked at afresh each time, since a tensor can be resized in place."""
        hit = self._views.get(id(buf))
        if hit is not None and hit[0]() is buf:
            _, ptr, size, have, fin = hit
        else:
            ptr, size, have, fin, readonly = self._inspect(buf, decl, kernel)
            if readonly and decl.access.writable:
                raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} is a read-only array but the "
                                    "program may write it. Fix: pass a writable array (or declare it read-only).")
            if fin is not None:
                ref = weakref.ref(buf, lambda _, key=id(buf), views=self._views: views.pop(key, None))
                if len(self._views) > 65536:
                    self._views.clear()
                self._views[id(buf)] = (ref, ptr, size, have, fin)
        if have is not dtype and have != dtype:
            raise storage_mismatch(f"dispatch_resident of {shown(kernel)}", decl, have)
        if fin is not None and not fin.alive:
            raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} was freed. "
                                "Fix: allocate a new buffer (backend.allocate / backend.upload).")
        if size < decl.count:
            raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} is declared with {decl.count} "
                                f"elements but the device array has {size}. Fix: allocate at least {decl.count}.")
        return ptr, size, fin

    def _inspect(self, buf, decl, kernel: str) -> tuple:
        try:
            cai = buf.__cuda_array_interface__
        except AttributeError:
            if not hasattr(buf, "__dlpack__"):
                raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} is {a_type(buf)}, "
                                    "not a device array. Fix: pass numba.cuda.to_device(x) (or a CuPy/PyTorch/JAX "
                                    "CUDA array); use dispatch() for host arrays.") from None
            cai = self._from_dlpack(buf, decl, kernel)
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        size = 1
        for d in shape:
            size *= d
        strides = cai.get("strides")
        if strides is not None and size > 1:
            expect = dtype.itemsize
            for dim, st in zip(reversed(shape), reversed(strides)):
                if dim > 1 and st != expect:
                    raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} is a non-contiguous view "
                                        f"(strides {strides}). {STRIDED_FIX}")
                expect *= dim
        if size >= 2**32:
            raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} has {size} elements; lengths are "
                                "u32. Fix: split the data into dispatches of fewer than 2**32 elements.")
        ptr = (cai["data"][0] or 0) if size else 0
        readonly = bool(cai["data"][1])
        self._wait_for(cai.get("stream"))
        fin = None
        gd = getattr(buf, "gpu_data", None)
        if gd is not None:
            try:
                owner = getattr(gd, "owner", gd)
                fin = getattr(owner, "_finalizer", None)
                ctx = getattr(gd, "context", None)
            except ReferenceError:  # numba's view proxies die with the memory they point to
                raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} was freed. "
                                    "Fix: allocate a new buffer (backend.allocate / backend.upload).") from None
            if ctx is not None and getattr(ctx, "handle", None) != self.backend.context.handle:
                raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} belongs to another CUDA "
                                    f"context ({ctx}). Fix: create it on this backend's device, or copy it over.")
        elif ptr:
            dev = self.backend.pointer_device(ptr)
            here = self.backend.context.device.id
            if dev != here:
                where = "is not device memory" if dev is None else f"is on device {dev}"
                raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} {where}, but this backend "
                                    f"runs on device {here}. Fix: move the array to that device.")
        return ptr, size, dtype, fin, readonly

    def _wait_for(self, stream) -> None:
        """Order this backend's stream after the producer's (`__cuda_array_interface__` v3 "stream")."""
        if stream in (None, 0, 1, 2) or stream == self.backend.stream_handle:
            return  # no producer stream, or a default stream our blocking stream already orders after
        from cuda.bindings import driver as drv

        err, event = drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        if err == drv.CUresult.CUDA_SUCCESS:
            drv.cuEventRecord(event, stream)
            drv.cuStreamWaitEvent(self.backend.stream_handle, event, 0)
            drv.cuEventDestroy(event)

    def _from_dlpack(self, buf, decl, kernel: str) -> dict:
        """A CUDA-array-interface description of a DLPack-only object, through cuda.core."""
        from cuda.core.utils import StridedMemoryView

        try:  # DLPack: -1 asks for no synchronisation (0 would be ambiguous)
            view = StridedMemoryView.from_dlpack(buf, stream_ptr=self.backend.stream_handle or -1)
        except Exception as e:  # the exporter refuses: say why, in our terms
            raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} ({type(buf).__name__}) could "
                                f"not be viewed through DLPack ({type(e).__name__}: {e}). Fix: pass a CUDA array "
                                "(numba, CuPy, PyTorch) or use dispatch() for host arrays.") from e
        if not view.is_device_accessible:
            raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} lives in host memory. "
                                "Fix: move it to the GPU first, or use dispatch() for host arrays.")
        here = self.backend.context.device.id
        if view.device_id != here:
            raise DispatchError(f"dispatch_resident of {shown(kernel)}: {decl.name!r} is on device {view.device_id}, "
                                f"but this backend runs on device {here}. Fix: move the array to that device.")
        itemsize = np.dtype(view.dtype).itemsize
        strides = None if view.strides is None else tuple(st * itemsize for st in view.strides)
        return {"typestr": np.dtype(view.dtype).str, "shape": tuple(view.shape), "strides": strides,
                "data": (view.ptr, view.readonly)}


class Prepared:
    """One program and configuration, compiled, with everything a launch needs precomputed."""

    def __init__(self, backend, program: Program, config: DispatchConfig):
        self.backend = backend
        self.program = program
        self.config = config
        self.kernel = backend.kernel(program, config)
        self.bound = program.bound_buffers
        self.n = len(self.bound)
        self.pure = [i for i, d in enumerate(self.bound) if d.role is Role.OUTPUT]
        self.nbytes = [d.dtype.nbytes for d in self.bound]
        self.writable = [d.access.writable for d in self.bound]
        self.wg = program.workgroup_size if config.workgroup in (None, "auto", "tune") else config.workgroup
        self.iterations = config.fixpoint_iterations
        self.label = config.label
        self.dtypes = [d.dtype.storage for d in self.bound]
        self.grid_sync = "grid_sync" in program.capabilities  # launches carry a grid barrier's state
        self._shapes: dict = {}
        self._tls = threading.local()

    def run(self, buffers, stream: int | None = None) -> int:
        """Bind, check and launch on `stream` (this backend's by default); returns the number of
        kernel launches enqueued. Binding the same arrays as this thread's previous call reuses
        that call's checked arguments."""
        sh = self.backend.stream_handle if stream is None else stream
        tls = self._tls.__dict__
        last = tls.get("last")
        if last is not None and type(buffers) in (list, tuple) and len(buffers) == self.n:
            refs, fins = last[0], last[1]
            for i in range(self.n):
                if refs[i]() is not buffers[i] or not fins[i].alive:
                    break
            else:
                launch = last[3]
                if last[4]:  # one launch, nothing to zero: the common case, kept short
                    return launch.enqueue(sh)
                for ptr, nbytes in last[2]:
                    self.backend.memset(ptr, nbytes, sh)
                self._note_grid_state(launch)
                return launch.enqueue(sh, self.iterations)
        return self._bind_and_launch(buffers, tls, sh)

    def _bind_and_launch(self, buffers, tls: dict, sh: int) -> int:
        if type(buffers) not in (list, tuple) or len(buffers) != self.n:
            buffers = check_resident(self.program, buffers)
        tls["last"] = None
        views = self.backend.views
        name = self.kernel.name
        ptrs, fins = [], []
        for i in range(self.n):
            ptr, size, fin = views.get(buffers[i], self.bound[i], self.dtypes[i], name)
            ptrs.append((ptr, size))
            fins.append(fin)
        if self.n > 1:
            self._check_aliasing(ptrs)
        grid, _ = launch_geometry(self.program, self.config, {d.name: p[1] for d, p in zip(self.bound, ptrs)})
        launch = self._launch_for(grid, tls)
        for i, (ptr, size) in enumerate(ptrs):
            launch.set_buffer(i, ptr, size)
        memsets = tuple((ptrs[i][0], ptrs[i][1] * self.nbytes[i]) for i in self.pure if ptrs[i][1])
        if self.grid_sync:
            memsets += ((tls["grid_states"][grid][1], 12),)
        for ptr, nbytes in memsets:
            self.backend.memset(ptr, nbytes, sh)
        self._note_grid_state(launch)
        launches = launch.enqueue(sh, self.iterations)
        if all(f is not None for f in fins):  # only numba arrays, whose memory cannot move, take the fast path
            simple = not memsets and not launch.shape.empty and self.iterations == 1
            tls["last"] = (tuple(weakref.ref(b) for b in buffers), tuple(fins), memsets, launch, simple)
        return launches

    def _launch_for(self, grid: tuple, tls: dict) -> KernelLaunch:
        """This thread's prepared launch at `grid` (its geometry checked once)."""
        launches = tls.setdefault("launches", {})
        launch = launches.get(grid)
        if launch is None:
            shape = self._shapes.get(grid)
            if shape is None:
                shape = LaunchShape(grid, self.wg)
                self.backend.check_launch(self.kernel, shape, self.config)
                self._shapes[grid] = shape
            if len(launches) > 64:
                launches.clear()
            launch = launches[grid] = KernelLaunch(self.kernel.handle, self.kernel.name, shape, self.n,
                                                   cooperative=self.config.cooperative,
                                                   nparams=2 * self.n + self.grid_sync)
            if self.grid_sync:  # this thread's grid barrier state for this launch shape
                state = self.backend._device_bytes(16)
                ptr = state.__cuda_array_interface__["data"][0]
                tls.setdefault("grid_states", {})[grid] = (state, ptr)
                launch.set_param(2 * self.n, ptr)
        return launch

    def _note_grid_state(self, launch: KernelLaunch) -> None:
        """Have the next synchronisation check this launch's grid barrier state for a timeout."""
        if self.grid_sync:
            self.backend._grid_states[int(launch.args.values[2 * self.n])] = self.kernel.name

    def _check_aliasing(self, ptrs: list) -> None:
        spans = [(p, p + s * b) for (p, s), b in zip(ptrs, self.nbytes)]
        for i in range(self.n):
            a0, a1 = spans[i]
            for j in range(i + 1, self.n):
                b0, b1 = spans[j]
                if a0 < b1 and b0 < a1 and (self.writable[i] or self.writable[j]):
                    da, db = self.bound[i].name, self.bound[j].name
                    raise DispatchError(f"dispatch_resident of {self.program.name!r}: {shown(da)} and {shown(db)} "
                                        "share device memory and one of them is written, a race. Fix: bind distinct "
                                        "buffers (copy one of them first).")


__all__ = ["BufferViews", "Prepared"]
