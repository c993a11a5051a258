"""Launch configuration shared by every backend."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DispatchError


def _dims(value, what: str) -> tuple[int, int, int] | None:
    if value is None:
        return None
    original = value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(int(v) for v in value if isinstance(v, (int, np.integer)) and not isinstance(v, bool))
        ok = len(dims) == len(tuple(value))
    except TypeError:
        dims, ok = (), False
    if not ok or not 1 <= len(dims) <= 3 or any(d < 0 for d in dims):
        raise DispatchError(f"{what}={original!r} is not 1 to 3 non-negative ints. Fix: pass e.g. 64 or (8, 8).")
    return dims + (1,) * (3 - len(dims))


@dataclass(frozen=True)
class DispatchConfig:
    """How to launch a program.

    grid: workgroups per axis; None covers the largest output buffer along x.
    workgroup: overrides the program's workgroup size ("auto" lets the CUDA backend choose).
    fixpoint_iterations: run the program this many times over the same buffers.
    cooperative: launch so every workgroup is co-resident (needed by grid barriers).
    label: a name for telemetry (a `dispatches[label]` counter) and profiles (the NVTX launch range).
    """

    grid: tuple[int, int, int] | None = None
    workgroup: tuple[int, int, int] | str | None = None
    fixpoint_iterations: int = 1
    cooperative: bool = False
    label: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "grid", _dims(self.grid, "grid"))
        if self.workgroup != "auto":
            wg = _dims(self.workgroup, "workgroup")
            if wg is not None and any(d < 1 for d in wg):
                raise DispatchError(f"workgroup={self.workgroup!r} has an empty axis. Fix: every axis needs >= 1 thread.")
            object.__setattr__(self, "workgroup", wg)
        it = self.fixpoint_iterations
        if not isinstance(it, int) or isinstance(it, bool) or it < 1:
            raise DispatchError(f"fixpoint_iterations={it!r} is not a positive int. Fix: pass 1 or more.")

    def key(self) -> tuple:
        """What of the configuration changes generated code."""
        return (self.workgroup, self.cooperative)
