"""Device steps of the graph algorithms, for the fixpoint runner (compiled by Numba for the GPU;
imported only when a GPU runs them, since they need numba.cuda)."""
from __future__ import annotations

from numba import cuda


def hook(v, parent, indptr, indices):
    """One vertex's part of a connected-components round: hook the roots at both ends of each of
    its edges together (the larger under the smaller, by atomic minimum), then point v at its
    root. Non-zero when it hooked something. Parents only decrease, so every chase ends."""
    changed = 0
    for k in range(indptr[v], indptr[v + 1]):
        u = indices[k]
        rv = parent[v]
        while parent[rv] != rv:
            rv = parent[rv]
        ru = parent[u]
        while parent[ru] != ru:
            ru = parent[ru]
        if ru != rv:
            if ru < rv:
                cuda.atomic.min(parent, rv, ru)
            else:
                cuda.atomic.min(parent, ru, rv)
            changed = 1
    r = parent[v]
    while parent[r] != r:
        r = parent[r]
    parent[v] = r
    return changed
