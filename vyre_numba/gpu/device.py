"""The GPU as numba-cuda sees it: whether one is usable, and its limits (probed once)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from ..simulator import SIMULATED

MIN_CC = (7, 5)  # CUDA 13's nvJitLink assembles nothing older


@lru_cache(maxsize=1)
def probe() -> str | None:
    """None if a CUDA GPU is usable here, else why not (ending in `Fix: ...`)."""
    if SIMULATED:
        return (f"NUMBA_ENABLE_CUDASIM={os.environ.get('NUMBA_ENABLE_CUDASIM', '').strip()} is set, so numba-cuda "
                "simulates the GPU and cannot run PTX. "
                "Fix: unset NUMBA_ENABLE_CUDASIM, or use get_backend('reference').")
    try:
        from numba import cuda
    except ImportError as e:
        return f"numba-cuda is not importable ({e}). Fix: pip install 'numba-cuda[cu13]'."
    try:
        if not cuda.is_available():
            return ("no CUDA driver or GPU was found. Fix: run on a machine with an NVIDIA GPU and driver, "
                    "or use get_backend('reference').")
        cc = cuda.get_current_device().compute_capability
    except Exception as e:  # the driver can fail in many ways; all mean "not usable"
        return f"the CUDA driver failed to start ({type(e).__name__}: {e}). Fix: check nvidia-smi works, or use the reference backend."
    if tuple(cc) < MIN_CC:
        return (f"the GPU has compute capability {cc[0]}.{cc[1]}, below the {MIN_CC[0]}.{MIN_CC[1]} that CUDA 13 "
                "supports. Fix: use a newer GPU or the reference backend.")
    return None


@dataclass(frozen=True)
class DeviceCaps:
    """Limits of the current device that launch validation checks."""

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    warp_size: int
    max_threads_per_block: int
    max_block_dim: tuple[int, int, int]
    max_grid_dim: tuple[int, int, int]
    max_shared_per_block: int
    cooperative_launch: bool
    max_threads_per_sm: int = 2048

    @property
    def sm(self) -> int:
        """The compute capability as the integer of `sm_XY`."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]


@lru_cache(maxsize=None)
def caps(device_id: int | None = None) -> DeviceCaps:
    """Probe the current (or given) device once."""
    from numba import cuda

    dev = cuda.get_current_device() if device_id is None else cuda.select_device(device_id)
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return DeviceCaps(
        name=name,
        compute_capability=tuple(dev.compute_capability),
        sm_count=dev.MULTIPROCESSOR_COUNT,
        warp_size=dev.WARP_SIZE,
        max_threads_per_block=dev.MAX_THREADS_PER_BLOCK,
        max_block_dim=(dev.MAX_BLOCK_DIM_X, dev.MAX_BLOCK_DIM_Y, dev.MAX_BLOCK_DIM_Z),
        max_grid_dim=(dev.MAX_GRID_DIM_X, dev.MAX_GRID_DIM_Y, dev.MAX_GRID_DIM_Z),
        max_shared_per_block=dev.MAX_SHARED_MEMORY_PER_BLOCK,
        cooperative_launch=bool(dev.COOPERATIVE_LAUNCH),
        max_threads_per_sm=dev.MAX_THREADS_PER_MULTIPROCESSOR,
    )
