"""Launch geometry checks (pure, testable without a GPU) and the kernel launch itself."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError, LaunchError, device_memory_error, shown
from .device import DeviceCaps


@dataclass(frozen=True)
class LaunchShape:
    """A launch's geometry: workgroups in the grid, threads in a block, dynamic shared bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0

    @property
    def empty(self) -> bool:
        """Whether the grid has no workgroups (nothing to launch)."""
        return 0 in self.grid

    def __str__(self) -> str:
        return f"grid={self.grid} block={self.block} shared={self.shared_bytes}B"


def validate_launch(caps: DeviceCaps, shape: LaunchShape, *, kernel: str, max_threads: int | None = None,
                    static_shared: int = 0) -> None:
    """Raise LaunchError if `shape` exceeds what `caps` (and the kernel's own limits) allow."""
    g, b = shape.grid, shape.block
    where = f"kernel {kernel!r} with {shape}"
    limit = min(caps.max_threads_per_block, max_threads or caps.max_threads_per_block)
    threads = b[0] * b[1] * b[2]
    if any(v < 1 for v in b) or any(v > m for v, m in zip(b, caps.max_block_dim)) or threads > limit:
        raise LaunchError(f"{where}: the workgroup of {threads} invocations exceeds this device's limits "
                          f"(axes {caps.max_block_dim}, {limit} threads for this kernel). "
                          "Fix: use a smaller workgroup and more workgroups.")
    if any(v < 0 for v in g) or any(v > m for v, m in zip(g, caps.max_grid_dim)):
        raise LaunchError(f"{where}: the grid exceeds this device's limits {caps.max_grid_dim} workgroups per axis. "
                          "Fix: spread workgroups over the y and z axes, or loop inside the program.")
    for axis in range(3):
        if g[axis] * b[axis] > 2**32:
            raise LaunchError(f"{where}: {g[axis] * b[axis]} invocations along axis {axis} overflow the u32 "
                              "invocation id. Fix: split the work into several dispatches.")
    if static_shared + shape.shared_bytes > caps.max_shared_per_block:
        raise LaunchError(f"{where}: needs {static_shared + shape.shared_bytes} bytes of shared memory, over the "
                          f"device's {caps.max_shared_per_block}. Fix: shrink the workgroup buffers.")


def validate_cooperative(caps: DeviceCaps, shape: LaunchShape, blocks_per_sm: int, *, kernel: str) -> None:
    """Raise LaunchError unless every workgroup of `shape` can be resident at once."""
    if not caps.cooperative_launch:
        raise LaunchError(f"kernel {shown(kernel)}: this device does not support cooperative launches. "
                          "Fix: drop cooperative=True and grid barriers, or use another GPU.")
    total = shape.grid[0] * shape.grid[1] * shape.grid[2]
    limit = blocks_per_sm * caps.sm_count
    if total > limit:
        raise LaunchError(f"kernel {shown(kernel)} with {shape}: a cooperative launch needs all {total} workgroups "
                          f"resident at once, but only {limit} fit ({blocks_per_sm} per SM x {caps.sm_count} SMs). "
                          f"Fix: launch at most {limit} workgroups and loop over the data inside the program.")


class ArgBlock:
    """A prebuilt `void**` kernel-parameter array: one 8-byte slot per parameter, reused per launch.
    u32 parameters read the low half of their slot (little-endian)."""

    __slots__ = ("values", "pointers", "address")

    def __init__(self, count: int):
        self.values = np.zeros(max(count, 1), dtype=np.uint64)
        base = self.values.ctypes.data
        self.pointers = np.array([base + 8 * i for i in range(max(count, 1))], dtype=np.uint64)
        self.address = int(self.pointers.ctypes.data)


_DRIVER = None


def driver():
    """(cuLaunchKernel, cuLaunchCooperativeKernel, CUDA_SUCCESS), looked up once."""
    global _DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver as drv

        _DRIVER = (drv.cuLaunchKernel, drv.cuLaunchCooperativeKernel, drv.CUresult.CUDA_SUCCESS)
    return _DRIVER


class KernelLaunch:
    """One launch of a loaded kernel, prepared once: geometry checked by the caller, arguments
    packed in an `ArgBlock` (`set_buffer` fills a buffer's pointer and length). `enqueue(stream)`
    puts it on a stream, or into the graph being captured there. Every dispatch mode launches
    through this; a driver error becomes DeviceError naming the kernel and geometry."""

    __slots__ = ("name", "shape", "args", "nbuffers", "_fn", "_head", "_tail", "_ok", "_stream", "_argv", "_ex")

    def __init__(self, handle, name: str, shape: LaunchShape, nbuffers: int, *, cooperative: bool = False,
                 nparams: int | None = None, programmatic: bool = False):
        """A launch of a vyre kernel (a pointer and a length per buffer), or, given `nparams`, of
        a kernel with that many parameters of up to 8 bytes each (fill them with `set_param`).
        `programmatic` launches with programmatic stream serialization (sm_90+): the kernel may
        start while the one before it on the stream finishes, so it must wait for it itself
        (`programmatic_ptx`)."""
        plain, coop, ok = _DRIVER or driver()
        self.name, self.shape, self.nbuffers = name, shape, nbuffers
        self.args = ArgBlock(2 * nbuffers if nparams is None else nparams)
        (gx, gy, gz), (bx, by, bz) = shape.grid, shape.block
        self._fn = coop if cooperative else plain
        self._head = (handle, gx, gy, gz, bx, by, bz, shape.shared_bytes)
        self._tail = (self.args.address,) if cooperative else (self.args.address, 0)
        self._ok = ok
        self._stream, self._argv = None, ()
        self._ex = _programmatic_config(shape) if programmatic and not cooperative else None

    def set_buffer(self, i: int, pointer: int, length: int) -> None:
        """Bind parameter buffer `i` (binding order) to device memory at `pointer` of `length` elements."""
        self.args.values[i] = pointer
        self.args.values[self.nbuffers + i] = length

    def set_param(self, i: int, value: int | float | np.generic) -> None:
        """Parameter `i` as its bits: ints and NumPy integers as themselves (u32 parameters read the
        low half), Python floats as f64, NumPy floats as their own width."""
        if isinstance(value, (float, np.floating)):
            value = np.asarray(value, np.float64 if isinstance(value, float) else value.dtype)
            value = int(value.view(np.uint64 if value.itemsize == 8 else np.uint32))
        self.args.values[i] = int(value) & 0xFFFFFFFFFFFFFFFF

    def reshaped(self, shape: LaunchShape) -> "KernelLaunch":
        """The same kernel and parameter block (shared, not copied) with another geometry."""
        new = KernelLaunch.__new__(KernelLaunch)
        for name in KernelLaunch.__slots__:
            setattr(new, name, getattr(self, name))
        (gx, gy, gz), (bx, by, bz) = shape.grid, shape.block
        new.shape, new._head = shape, (self._head[0], gx, gy, gz, bx, by, bz, shape.shared_bytes)
        new._stream, new._argv = None, ()
        new._ex = _programmatic_config(shape) if self._ex is not None else None
        return new

    def enqueue(self, stream: int, times: int = 1) -> int:
        """Enqueue `times` launches on `stream`; the number enqueued (0 for an empty grid)."""
        if self.shape.empty:
            return 0
        if self._ex is not None:
            drv, cfg = self._ex
            cfg.hStream = drv.CUstream(stream)
            for _ in range(times):
                (err,) = drv.cuLaunchKernelEx(cfg, self._head[0], self.args.address, 0)
                if err != self._ok:
                    self.failed(err)
            return times
        if stream != self._stream:  # the full argument tuple, rebuilt only when the stream changes
            self._stream, self._argv = stream, (*self._head, stream, *self._tail)
        fn, argv, ok = self._fn, self._argv, self._ok
        for _ in range(times):
            (err,) = fn(*argv)
            if err is not ok and err != ok:
                self.failed(err)
        return times

    def failed(self, err) -> None:
        """Raise the DeviceError of a launch the driver refused with `err`."""
        raise DeviceError(f"launching kernel {self.name!r} with {self.shape} failed: {err.name}. "
                          "Fix: check the launch geometry and that the device is healthy (nvidia-smi); "
                          "a previous kernel fault poisons the context until the process restarts.")


def _programmatic_config(shape: LaunchShape) -> tuple:
    """(driver module, CUlaunchConfig of `shape` with programmatic stream serialization allowed)."""
    from cuda.bindings import driver as drv

    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg = drv.CUlaunchConfig()
    (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) = shape.grid, shape.block
    cfg.sharedMemBytes = shape.shared_bytes
    cfg.attrs, cfg.numAttrs = [attr], 1
    return drv, cfg


def programmatic_ptx(ptx: str) -> str:
    """The PTX of one vyre kernel (sm_90+, PTX ISA 7.8+) made to run under programmatic dependent
    launch: on entry it lets the next kernel on the stream start launching, then waits until the
    kernel before it has finished and its writes are visible, so it reads what an ordinary launch
    would. Launched without the attribute, both instructions do nothing."""
    lines = ptx.split("\n")
    at = lines.index("{", next(i for i, line in enumerate(lines) if ".entry" in line)) + 1
    while at < len(lines) and (not lines[at].strip() or lines[at].lstrip().startswith((".", "//"))):
        at += 1  # after the declarations
    return "\n".join(lines[:at] + ["\tgriddepcontrol.launch_dependents;", "\tgriddepcontrol.wait;"] + lines[at:])


def driver_check(result, what: str) -> None:
    """Raise DeviceError if a cuda.bindings driver call's result is not CUDA_SUCCESS."""
    ok = (_DRIVER or driver())[2]
    err = result[0] if isinstance(result, tuple) else result
    if err == ok:
        return
    if err.name == "CUDA_ERROR_OUT_OF_MEMORY":
        raise device_memory_error(what, err.name)
    raise DeviceError(f"{what} failed: {err.name}. Fix: check the device is healthy (nvidia-smi) and memory "
                      "is not exhausted; after a kernel fault, restart the process.")
