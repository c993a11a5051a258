"""Device steps of the graph algorithms, for the fixpoint runner (compiled by Numba for the GPU;
imported only when a GPU runs them, since they need numba.cuda)."""
from __future__ import annotations

from numba import cuda


def expand(v, src, indptr, parent):
    """Start v as its own root and write it as the source of each of its CSR entries (CSR -> COO);
    changes nothing to iterate."""
    parent[v] = v
    for k in range(indptr[v], indptr[v + 1]):
        src[k] = v
    return 0


def hook(k, parent, src, dst, symmetric):
    """Join the trees at both ends of CSR entry k (every entry, or, for a symmetric CSR, each
    pair once from its larger end): hook the larger root under the smaller with a compare-and-swap that succeeds only on
    a root, and retry from the new roots when another thread hooked first, so one pass over the
    edges leaves every component one tree (as in ECL-CC). Finding a root halves the path as it
    goes (each vertex is pointed at its grandparent, always an ancestor). Non-zero if it hooked."""
    u = src[k]
    v = dst[k]
    if u == v or (symmetric and u < v):
        return 0
    ru = u
    while parent[ru] != ru:
        nxt = parent[ru]
        parent[ru] = parent[nxt]
        ru = nxt
    rv = v
    while parent[rv] != rv:
        nxt = parent[rv]
        parent[rv] = parent[nxt]
        rv = nxt
    while ru != rv:
        lo = min(ru, rv)
        hi = max(ru, rv)
        if cuda.atomic.cas(parent, hi, hi, lo) == hi:
            return 1
        while parent[hi] != hi:  # hi was hooked meanwhile: both ends again from their trees
            hi = parent[hi]
        while parent[lo] != lo:
            lo = parent[lo]
        ru = lo
        rv = hi
    return 0


def flatten(v, parent):
    """Point v at its root (parents only decrease, so the root is the component's smallest id)."""
    r = parent[v]
    while parent[r] != r:
        r = parent[r]
    parent[v] = r
    return 0
