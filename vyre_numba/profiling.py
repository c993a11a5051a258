"""Named ranges for Nsight timelines: NVTX through the `nvtx` package when installed, free when not."""
from __future__ import annotations

import contextlib

from .errors import ArgumentError, a_type, check_calls

__all__ = ["DOMAIN", "available"]  # and `range`, called as profiling.range(...): a star import would hide the builtin

try:
    import nvtx as _nvtx
except ImportError:  # optional: without it a range costs one attribute lookup
    _nvtx = None

DOMAIN = "vyre-numba"


def range(name: str):  # noqa: A001 - mirrors nvtx.annotate's role
    """A context manager marking `name` (emit, assemble, upload, launch, readback) on the timeline."""
    return span(name)


def span(name: str):
    """`range(name)` without the check of the call's arguments (the package's own calls, on hot paths)."""
    if not isinstance(name, str):
        raise ArgumentError(f"range: the name is {a_type(name)}, not a str. Fix: pass the range's name as a str.")
    if _nvtx is None:
        return contextlib.nullcontext()
    return _nvtx.annotate(name, domain=DOMAIN)


def available() -> bool:
    """Whether NVTX ranges are marked (the `nvtx` package is installed)."""
    return _nvtx is not None


check_calls(globals(), ("range", "available"))  # a call that does not fit is an ArgumentError naming the signature
