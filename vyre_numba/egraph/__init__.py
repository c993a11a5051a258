"""The GPU e-graph: a columnar e-graph resident on the device, batched hash-consing, union-find and
congruence closure (rebuild), with egglog interop through egraph-serialize JSON.

    g = EGraph.from_arrays(eclass, op, children_offsets, children)
    g.union([[1, 2]])
    stats = g.rebuild()                       # RebuildStats(rounds, unions, nodes_touched, ...)
    result = congruence_closure(g)            # ClosureResult(eclass, rounds, merged, ...)

On the GPU (`backend="cuda"`) the rows, union-find and hash table live in device memory and the
rebuild runs as Numba kernels (`kernels.py`, loop in `device.py`); on the reference backend the
NumPy twins (`closure_numpy.py`, `signature.py`) do the same work on the host."""
from __future__ import annotations

from .egraph import ClosureResult, EGraph, RebuildStats, congruence_closure, structural_equivalences

__all__ = ["EGraph", "RebuildStats", "ClosureResult", "congruence_closure", "structural_equivalences"]

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
