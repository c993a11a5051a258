"""The arithmetic e-graph workload of the shared benchmark (`bench/egraph_workload.py`, whose
definition this follows draw for draw): N e-nodes, N/8 leaves, interior nodes Add/Mul/Sub/Div/
Neg/Sq over earlier nodes chosen uniformly, and N/64 unions of random leaves."""
from __future__ import annotations

import numpy as np

from ..errors import HostMemoryError, told
from .egraph import MAX_ID, _count

__all__ = ["arithmetic"]

OPS = ("Add", "Mul", "Sub", "Div", "Neg", "Sq")


def arithmetic(n: int, *, seed: int = 1) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """((eclass, op, children_offsets, children), unions (U, 2)) for `EGraph.from_arrays` and
    `congruence_closure`: row k is e-class k; leaf k has operator 6 + k (a constant each), the
    interior operators are 0..5 in the order of OPS. Below 8 e-nodes there is one leaf (the
    benchmark's N/8 is none there, and its first interior node would have no earlier node to use)."""
    n = _count(n, "n", f"pass how many e-nodes to make, an int from 0 to {MAX_ID + 1}.", lo=0, hi=MAX_ID + 1)
    seed = _count(seed, "seed", "pass a non-negative int.", lo=0)
    try:
        return _arithmetic(n, seed)
    except MemoryError as e:
        raise HostMemoryError(f"the workload of {n} e-nodes ran out of host memory{told(e)}. Fix: make fewer "
                              "e-nodes.") from None


def _arithmetic(n: int, seed: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    rng = np.random.default_rng(seed)
    leaves = max(n // 8, min(n, 1))
    interior, u = n - leaves, n // 64
    k = np.arange(leaves, n, dtype=np.int64)
    opi = rng.integers(0, 6, size=interior)
    a = np.minimum(np.floor(rng.random(interior) * k).astype(np.int64), k - 1)
    b = np.minimum(np.floor(rng.random(interior) * k).astype(np.int64), k - 1)
    unions = np.stack([rng.integers(0, leaves, size=u), rng.integers(0, leaves, size=u)], 1).astype(np.int64)
    b = np.where(opi < 4, b, -1)
    arity = np.concatenate([np.zeros(leaves, np.int64), 1 + (b >= 0)])
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(arity, out=offsets[1:])
    children = np.stack([a, b], 1).ravel()
    op = np.concatenate([6 + np.arange(leaves, dtype=np.int64), opi.astype(np.int64)])
    return (np.arange(n, dtype=np.int64), op, offsets, children[children >= 0]), unions


from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
