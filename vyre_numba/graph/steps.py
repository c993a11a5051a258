"""Device steps of connected components, for the fixpoint runner (compiled by Numba for the GPU;
imported only when a GPU or the CUDA simulator runs them, since they need numba.cuda).

Invariants: parent[v] <= v always (a root is hooked only under a smaller root), so every tree's
root is its smallest vertex; path halving points a vertex at its grandparent, an ancestor, so
trees never split; `link` returns only once both ends share a root. `compress` writes only its own
vertex's parent and reads without writing: path halving beside it could store back a stale
grandparent over a root another thread had just written, leaving a label that is not a root."""
from __future__ import annotations

from numba import cuda


@cuda.jit(device=True)
def find(parent, x):
    """x's root, halving the path on the way."""
    while parent[x] != x:
        nxt = parent[x]
        parent[x] = parent[nxt]
        x = nxt
    return x


@cuda.jit(device=True)
def root(parent, x):
    """x's root, read without writing."""
    p = parent[x]
    while p != x:
        x = p
        p = parent[x]
    return x


@cuda.jit(device=True)
def link(parent, u, v):
    """Join the trees of u and v: a compare-and-swap hooks the larger root under the smaller and
    succeeds only on a root; when another thread hooked it first, try again from the new roots."""
    ru = find(parent, u)
    rv = find(parent, v)
    while ru != rv:
        lo = min(ru, rv)
        hi = max(ru, rv)
        if cuda.atomic.cas(parent, hi, hi, lo) == hi:
            return
        ru = find(parent, lo)
        rv = find(parent, hi)


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
