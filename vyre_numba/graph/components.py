"""Connected components: each vertex labelled with the smallest vertex id of its component.

The NumPy implementation here is the CPU backend and the oracle of the GPU one: rounds of
hooking (every edge whose ends have different roots hooks the larger root under the smaller,
by an atomic minimum) and pointer jumping (every vertex points at its root), until no edge joins
two roots. Parents only ever decrease, so the root of each component ends as its smallest id."""
from __future__ import annotations

import numpy as np

from .csr import CSR, check_csr, edges


def components_numpy(g: CSR) -> tuple[np.ndarray, int]:
    """(labels, rounds) of the connected components of `g` (edges taken as undirected)."""
    parent = np.arange(g.n, dtype=np.int64)
    src, dst = edges(g)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    rounds = 0
    while src.size:
        rounds += 1
        pu, pv = parent[src], parent[dst]
        lo, hi = np.minimum(pu, pv), np.maximum(pu, pv)
        join = lo != hi
        if not join.any():
            break
        np.minimum.at(parent, hi[join], lo[join])
        while True:  # pointer jumping until every vertex points at a root
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
        src, dst = src[join], dst[join]  # edges already inside one tree stay so
    return parent, rounds


def connected_components(indptr, indices, *, backend=None) -> np.ndarray:
    """Component labels of the graph `(indptr, indices)` in CSR form (edges taken as undirected):
    label[v] is the smallest vertex id in v's component. Host arrays give a NumPy result."""
    g = check_csr(indptr, indices)
    labels, _ = components_numpy(g)
    return labels.astype(g.indptr.dtype if g.n < 2**31 else np.int64)
