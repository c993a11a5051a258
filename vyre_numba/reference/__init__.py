"""The NumPy reference backend: the semantic oracle every other backend is compared against, and
the CPU fallback. See docs/semantics.md for what it computes and interpreter.py for how."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..backend import Backend
from ..bindings import Binding, bind
from ..config import DispatchConfig
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
        return binding.results()


def run(program: Program, inputs: Sequence | Mapping | None = None, config: DispatchConfig | None = None,
        *, sizes: Mapping[str, int] | None = None) -> list[np.ndarray]:
    """Dispatch `program` on the reference backend and return its outputs in binding order."""
    return ReferenceBackend().dispatch(program, inputs, config, sizes=sizes)


def run_binding(binding: Binding) -> list[np.ndarray]:
    """Execute an already bound dispatch in place and return its outputs."""
    execute(binding)
    return binding.results()
