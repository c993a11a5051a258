"""Lock-free union-find as Numba device functions, shared by connected components and the e-graph
(imported only where a GPU or the CUDA simulator runs them: they need numba.cuda).

Invariants: parent[x] <= x always (a root is hooked only under a smaller root), so every tree's
root is its smallest member; path halving points a node at its grandparent, an ancestor, so trees
never split; `link` returns only once both ends share a root. `root` reads without writing: a pass
that stores every node's root must not halve paths beside itself, or a stale grandparent could be
stored over a root another thread had just written."""
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
    """Join the trees of u and v; 1 if this call hooked a root, 0 if they already shared one. A
    compare-and-swap hooks the larger root under the smaller and succeeds only on a root; when
    another thread hooked it first, try again from the new roots."""
    ru = find(parent, u)
    rv = find(parent, v)
    while ru != rv:
        lo = min(ru, rv)
        hi = max(ru, rv)
        if cuda.atomic.cas(parent, hi, hi, lo) == hi:
            return 1
        ru = find(parent, lo)
        rv = find(parent, hi)
    return 0
