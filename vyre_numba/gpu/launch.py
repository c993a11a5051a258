"""Launch geometry checks (pure, testable without a GPU) and the kernel launch itself."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError, LaunchError
from .device import DeviceCaps


@dataclass(frozen=True)
class LaunchShape:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0

    @property
    def empty(self) -> bool:
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
        raise LaunchError(f"kernel {kernel!r}: this device does not support cooperative launches. "
                          "Fix: drop cooperative=True and grid barriers, or use another GPU.")
    total = shape.grid[0] * shape.grid[1] * shape.grid[2]
    limit = blocks_per_sm * caps.sm_count
    if total > limit:
        raise LaunchError(f"kernel {kernel!r} with {shape}: a cooperative launch needs all {total} workgroups "
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


def _driver():
    global _DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver

        _DRIVER = (driver.cuLaunchKernel, driver.cuLaunchCooperativeKernel, driver.CUresult.CUDA_SUCCESS)
    return _DRIVER


def launch(function_handle, shape: LaunchShape, args: ArgBlock, stream_handle: int, *, kernel: str,
           cooperative: bool = False) -> None:
    """Enqueue one launch; a driver error becomes DeviceError naming the kernel and geometry."""
    plain, coop, ok = _DRIVER or _driver()
    g, b = shape.grid, shape.block
    if cooperative:
        (err,) = coop(function_handle, g[0], g[1], g[2], b[0], b[1], b[2], shape.shared_bytes, stream_handle,
                      args.address)
    else:
        (err,) = plain(function_handle, g[0], g[1], g[2], b[0], b[1], b[2], shape.shared_bytes, stream_handle,
                       args.address, 0)
    if err != ok:
        raise DeviceError(f"launching kernel {kernel!r} with {shape} failed: {err.name}. "
                          "Fix: check the launch geometry and that the device is healthy (nvidia-smi); "
                          "a previous kernel fault poisons the context until the process restarts.")
