"""Device steps of connected components, for the fixpoint runner (compiled by Numba for the GPU;
imported only when a GPU or the CUDA simulator runs them, since they need numba.cuda).

The union-find (`find`, `link`, `root`) and its invariants are in `vyre_numba.unionfind`; every
tree's root is its smallest vertex."""
from __future__ import annotations

from ..unionfind import find, link, root


def init(v, parent):
    """v starts as its own root."""
    parent[v] = v
    return 0


def sample(v, parent, indptr, indices, r):
    """Link v with its r-th stored neighbour, if it has one (Afforest's neighbour sampling)."""
    k = indptr[v] + r
    if k < indptr[v + 1]:
        link(parent, v, indices[k])
    return 0


def link_edge(i, parent, src, dst):
    """Join the trees of edge i's ends (components of an edge list)."""
    link(parent, src[i], dst[i])
    return 0


def compress(v, parent):
    """Point v at its root."""
    parent[v] = root(parent, v)
    return 0


def gather(j, parent, out, stride):
    """out[j] = parent[j * stride]: the roots of evenly spaced vertices, to find the largest tree."""
    out[j] = parent[j * stride]
    return 0


def rest(v, parent, indptr, indices, skip, giant):
    """Link v with its neighbours after the first `skip`, unless v is already in the tree rooted at
    `giant` (Afforest: for a symmetric CSR, that tree's edges to others are seen from the other end)."""
    if giant >= 0 and find(parent, v) == giant:
        return 0
    for k in range(indptr[v] + skip, indptr[v + 1]):
        link(parent, v, indices[k])
    return 0
