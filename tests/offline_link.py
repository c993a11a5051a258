"""Stand-ins for linking fixpoint modules without a GPU: a backend whose `load_linked` only
assembles with nvJitLink (keeping the cubin), and device arrays that exist only as interfaces."""
from __future__ import annotations

import numpy as np

from vyre_numba.ptx import assemble


class OfflineLinker:
    """Enough of a backend for `fixpoint.device._module` on a machine without a GPU."""

    def __init__(self, sm: int):
        self.sm = sm
        self.caps = type("Caps", (), {"sm": sm, "compute_capability": (sm // 10, sm % 10)})()
        self.cubin = b""

    def load_linked(self, key, sources, entries):
        self.cubin = assemble(sources, sm=self.sm)
        return {}


class InterfaceArray:
    """A device array that is only its `__cuda_array_interface__` (nothing is ever read)."""

    def __init__(self, dtype, n: int = 4, readonly: bool = False):
        self.__cuda_array_interface__ = {"typestr": np.dtype(dtype).str, "shape": (n,), "strides": None,
                                         "data": (4096, readonly), "version": 3, "descr": np.dtype(dtype).descr}
