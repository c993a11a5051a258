"""The CUDA backend over numba-cuda's driver layer. Every use of numba-cuda's driver lives here."""
from .backend import CompiledKernel, CudaBackend
from .device import DeviceCaps, caps, probe
from .launch import ArgBlock, KernelLaunch, LaunchShape, validate_cooperative, validate_launch

__all__ = ["CudaBackend", "CompiledKernel", "DeviceCaps", "ArgBlock", "KernelLaunch", "LaunchShape",
           "caps", "probe", "validate_launch", "validate_cooperative"]

from ..errors import check_calls as _check_calls, immutable as _immutable  # noqa: E402

_check_calls(globals(), ["CudaBackend", "caps", "probe"])  # the launch path's helpers stay unwrapped: it is hot
_immutable(DeviceCaps, LaunchShape)
