"""Every error a user can cause is one of these. Messages end with an actionable `Fix: ...`."""
from __future__ import annotations

import functools
import reprlib

import numpy as np


class VyreError(Exception):
    """Base of all vyre-numba errors."""


class IRValidationError(VyreError):
    """A program (or a piece of IR under construction) is not valid. `diagnostics` lists every problem."""

    def __init__(self, message: str, diagnostics: "list | tuple" = ()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)


class UnknownBufferError(IRValidationError, KeyError):
    """A buffer name a program does not declare (also a KeyError, as a lookup by name)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownNameError(VyreError, KeyError):
    """A name a read-only mapping does not hold, such as a telemetry counter (also a KeyError, so
    `in` and `.get` read it as a missing key)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BackendUnavailableError(VyreError):
    """The requested backend cannot run on this machine."""


class SettingError(VyreError):
    """An environment variable vyre-numba reads (VYRE_NUMBA_PROGRESS, VYRE_NUMBA_CACHE) holds a
    value it does not recognise."""


class TemplateError(VyreError):
    """A hand-written PTX template (`ptx.templates`) is missing, its header does not declare its
    parameters, or it is loaded with other parameters than its header declares."""


def flag(value, name: str, fix: str) -> bool:
    """`value` as a bool where it is one (Python's or NumPy's); anything else, such as the string
    "no" that `if` would read as True, is a DispatchError saying `name` and ending in `Fix: fix`."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise DispatchError(f"{name}={shown(value, 60)} is not a bool. Fix: {fix}")


class DispatchError(VyreError):
    """Inputs, outputs or configuration of a dispatch are wrong."""


class LaunchError(DispatchError):
    """Launch geometry or resources exceed what the device allows."""


class UnsupportedError(VyreError):
    """The program uses something this backend or target cannot lower."""


class CompileError(VyreError):
    """PTX assembly or linking failed; the message carries the toolchain log."""


class DeviceError(VyreError):
    """The CUDA driver reported an error while running a kernel."""


class BarrierTimeoutError(DeviceError):
    """A grid barrier on the device waited past its bound: not every block arrived."""


class CapacityError(DispatchError):
    """A result needs more room than the capacity given; `needed` says how much. Nothing was lost:
    the inputs are as they were, so the call can be repeated with `capacity >= needed`."""

    def __init__(self, message: str, needed: int):
        super().__init__(message)
        self.needed = needed


class CheckError(DispatchError):
    """A checked dispatch (`DispatchConfig(checked="raise")`) found out-of-bounds accesses, division
    by zero or NaNs. The dispatch ran to completion: `report` says what it found, `outputs` holds a
    host dispatch's results (None for a resident one, whose buffers hold them)."""

    def __init__(self, message: str, report, outputs=None):
        super().__init__(message)
        self.report, self.outputs = report, outputs


class CheckWarning(UserWarning):
    """What a checked dispatch (`DispatchConfig(checked=True)`) found; `report` has the details."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class HostMemoryError(DispatchError):
    """The host ran out of memory for arrays sized by the inputs (usually by the largest id)."""


BY_IDS = ("Arrays are sized by the largest vertex or class id, not by how many are used. Fix: renumber ids densely "
          "from 0 (np.unique(ids, return_inverse=True)), or split the input.")


IN_HOST_MEMORY = ("The reference backend keeps every buffer, and a copy of each it writes (to undo a failed "
                  "run), in host memory. Fix: work on less data at a time, or run on the GPU backend.")


def converting(matches, error):
    """Decorator: an exception inside the function for which `matches(e)` holds is raised as
    `error(e)`, a VyreError, instead (the original left out of the traceback)."""

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if not matches(e):
                    raise
                raise error(e) from None
        return call
    return wrap


def host_memory(what: str, why: str = BY_IDS):
    """Decorator: a MemoryError inside `what` (here or raised on a Dask worker) becomes a
    HostMemoryError that says, in `why`, what sizes the arrays and how to shrink them (the
    default: a graph algorithm's arrays, sized by the largest id)."""
    return converting(lambda e: isinstance(e, MemoryError),
                      lambda e: HostMemoryError(f"{what} ran out of host memory ({e}). {why}"))


def shown(x, width: int = 80) -> str:
    """repr(x) for an error message: about `width` characters at most, whatever `x` is (a list
    nested 100,000 deep, a huge list, an object whose repr raises), never an exception itself."""
    try:
        text = _widths(width).repr(x)
    except Exception:  # a user's __repr__ that raises, or recurses without end
        text = f"<a {type(x).__name__}>"
    return clip(text, width)


def clip(text: str, width: int) -> str:
    """`text` if it has at most `width` characters, else its start and "..." (`width` in all), so
    a cut is never mistaken for the whole."""
    return text if len(text) <= width else text[:max(width - 3, 1)] + "..."


@functools.lru_cache(maxsize=None)  # a handful of widths, each made once
def _widths(width: int) -> reprlib.Repr:
    """A Repr shortening strings, ints and other values to `width` characters."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlong = 3, width, width, width
    return r
