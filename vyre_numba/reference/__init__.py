"""The NumPy reference backend: the semantic oracle every other backend is compared against, and
the CPU fallback. See docs/semantics.md for what it computes and interpreter.py for how."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..backend import Backend
from ..bindings import Binding, bind
from ..config import DispatchConfig
from ..errors import DispatchError
from ..ir import Program
from .interpreter import MAX_INVOCATIONS, execute, plan

__all__ = ["ReferenceBackend", "execute", "run", "plan", "MAX_INVOCATIONS"]


class ReferenceBackend(Backend):
    """Runs programs on the CPU with the exact NumPy interpreter."""

    name = "reference"

    def dispatch(self, program: Program, inputs: Sequence | Mapping | None = None,
                 config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                 ) -> list[np.ndarray]:
        binding = bind(program, inputs, config, sizes)
        execute(binding)
        self._count(dispatches=1)
        if binding.config.label:
            self._count(**{f"dispatches[{binding.config.label}]": 1})
        return binding.results()

    # resident buffers are plain NumPy arrays, updated in place
    def dispatch_resident(self, program: Program, buffers: Sequence | Mapping,
                          config: DispatchConfig | None = None) -> None:
        from .resident import dispatch_resident

        dispatch_resident(program, buffers, config)
        self._count(resident_dispatches=1)
        if config is not None and config.label:
            self._count(**{f"dispatches[{config.label}]": 1})

    def upload(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def empty(self, n: int, dtype) -> np.ndarray:
        return np.zeros(int(n), dtype)

    def download(self, buffer, offset: int = 0, count: int | None = None) -> np.ndarray:
        if not isinstance(buffer, np.ndarray):
            raise DispatchError(f"download: a {type(buffer).__name__} is not a reference-backend buffer. "
                                "Fix: pass an array made by upload / empty / allocate of this backend.")
        flat = buffer.reshape(-1)
        end = flat.size if count is None else offset + count
        if not 0 <= offset <= end <= flat.size:
            raise DispatchError(f"download: elements [{offset}, {end}) are outside the buffer's {flat.size}. "
                                "Fix: pass 0 <= offset and offset + count <= len(buffer).")
        return flat[offset:end].copy()


def run(program: Program, inputs: Sequence | Mapping | None = None, config: DispatchConfig | None = None,
        *, sizes: Mapping[str, int] | None = None) -> list[np.ndarray]:
    """Dispatch `program` on the reference backend and return its outputs in binding order."""
    return ReferenceBackend().dispatch(program, inputs, config, sizes=sizes)


def run_binding(binding: Binding) -> list[np.ndarray]:
    """Execute an already bound dispatch in place and return its outputs."""
    execute(binding)
    return binding.results()
