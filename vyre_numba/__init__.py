"""vyre-numba: a Python GPU compute layer with PTX-level control, built on Numba.

Write a program in the vyre IR (`vyre_numba.ir`), run it with `get_backend().dispatch(...)`:
on the GPU through PTX where one is usable, else on the exact NumPy reference interpreter.
"""
from . import ir
from . import ptx  # noqa: F401  (lazy; loading it gives Program.ptx() its emitter)
from .backend import Backend
from .registry import available_backends, get_backend
from .elementwise import elementwise
from .config import DispatchConfig
from .errors import (ArgumentError, BackendUnavailableError, BarrierTimeoutError, CapacityError, CheckError,
                     CacheWarning, CheckWarning, CompileError, CoverageWarning, DeviceError, DeviceMemoryError,
                     DispatchError, HostMemoryError, ImmutableError, IRValidationError, LaunchError, ResultTimeoutError,
                     SettingError, TemplateError, UnknownBufferError, UnknownNameError, UnknownStepError,
                     UnsupportedError, VyreError)
from .ir import BufferDecl, DataType, Program

from .version import __version__

__all__ = ["ir", "Backend", "available_backends", "get_backend", "DispatchConfig", "elementwise", "BufferDecl",
           "DataType", "Program",
           # every error a user can meet, so that `except vn.CapacityError` works where it is raised
           "VyreError", "ArgumentError", "IRValidationError", "UnknownBufferError", "UnknownNameError",
           "BackendUnavailableError", "SettingError", "TemplateError", "DispatchError", "LaunchError", "CapacityError",
           "CheckError", "HostMemoryError", "ImmutableError", "UnsupportedError", "CompileError", "DeviceError",
           "DeviceMemoryError", "BarrierTimeoutError", "CacheWarning", "CheckWarning", "CoverageWarning",
           "UnknownStepError", "ResultTimeoutError"]

_SUBPACKAGES = ("compaction", "distributed", "egraph", "fixpoint", "gpu", "graph", "megakernel", "profiling",
                "recording", "reference", "testing", "unionfind", "unique", "workqueue")


def __getattr__(name: str):
    """`vn.graph`, `vn.fixpoint` and the other subpackages, imported on first use (so a notebook's
    `import vyre_numba as vn` reaches them all without loading them all)."""
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'vyre_numba' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What `vn.<TAB>` offers: the names here and the subpackages not yet imported."""
    return sorted({*(k for k in globals() if not k.startswith("_")), *_SUBPACKAGES} - {"annotations", "importlib"})

from .errors import check_calls as _check_calls

_check_calls(globals(), __all__)
