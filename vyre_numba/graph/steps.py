"""Device steps of connected components, for the fixpoint runner (compiled by Numba for the GPU;
imported only when a GPU or the CUDA simulator runs them, since they need numba.cuda).

The union-find (`find`, `link`, `root`) and its invariants are in `vyre_numba.unionfind`; every
tree's root is its smallest vertex."""
from __future__ import annotations

from numba import cuda, int64, uint32

from ..unionfind import link, root

UNREACHED = 2**31 - 1  # a distance while relaxing (atomic min needs "unreached" to be the largest)


def init(v, parent):
    """v starts as its own root."""
    parent[v] = v
    return 0


def sample(v, parent, indptr, indices, r):
    """Link v with its r-th stored neighbour, if it has one (Afforest's neighbour sampling)."""
    k = int64(indptr[v]) + r  # int64: a uint64 beside a signed int reads as a float under the simulator
    if k < indptr[v + 1]:
        link(parent, v, int64(indices[k]))
    return 0


def link_edge(i, parent, src, dst):
    """Join the trees of edge i's ends (components of an edge list)."""
    link(parent, int64(src[i]), int64(dst[i]))
    return 0


def compress(v, parent):
    """Point v at its root."""
    parent[v] = root(parent, v)
    return 0


def gather(j, parent, out, stride):
    """out[j] = parent[j * stride]: the roots of evenly spaced vertices, to find the largest tree."""
    out[j] = parent[j * stride]
    return 0


def vote(j, roots, votes):
    """Sample j votes for roots[j]: votes[0] ends as the largest key (how often the root was
    sampled, then the smaller root), so the most sampled root wins and a tie goes to the smallest,
    as `np.unique(...)[counts.argmax()]` picks."""
    r = roots[j]
    c = 0
    for i in range(roots.size):
        c += roots[i] == r
    cuda.atomic.max(votes, 0, (int64(c) << 32) | (int64(0x7FFFFFFF) - r))
    return 0


@cuda.jit(device=True)
def giant_root(votes):
    """The root the vote chose, or -1 before any vote (votes[0] still 0)."""
    key = votes[0]
    return -1 if key == 0 else int64(0x7FFFFFFF) - (key & int64(0xFFFFFFFF))


def rest(v, parent, indptr, indices, skip, votes):
    """Link v with its neighbours after the first `skip`, unless v is already in the tree whose root
    won the vote (Afforest: for a symmetric CSR, that tree's edges to others are seen from the
    other end); no vote, no skipping."""
    giant = giant_root(votes)
    if giant >= 0 and root(parent, v) == giant:  # read only: after `compress`, one step away
        return 0
    for k in range(int64(indptr[v]) + skip, int64(indptr[v + 1])):
        link(parent, v, int64(indices[k]))
    return 0


def clear(i, a):
    """a[i] = 0."""
    a[i] = 0
    return 0


def mark_items(i, words, items):
    """Set bit items[i] of the bitset `words` (uint32)."""
    v = items[i]
    cuda.atomic.or_(words, v >> 5, uint32(1) << uint32(v & 31))
    return 0


def unreached_to_max(v, dist):
    """-1 (unreached) becomes UNREACHED, so an atomic min can lower it."""
    if dist[v] < 0:
        dist[v] = UNREACHED
    return 0


def max_to_unreached(v, dist):
    """UNREACHED becomes -1 again."""
    if dist[v] == UNREACHED:
        dist[v] = -1
    return 0


def relax(w, indptr, indices, dist, dirty):
    """Asynchronous BFS over the 32 vertices of bitset word w: each vertex u whose distance went
    down since it last pushed (its bit in `dirty`) offers dist[u] + 1 to each neighbour; a
    neighbour lowered gets its bit set. Distances only go down, so rounds of this reach the BFS
    distances in any order of items; a word an item, so a round over a quiet graph reads n / 32
    words. The pusher's fence orders its lowered distance before its bit; this step takes the
    bits by exchange and fences before reading distances, so a bit set after the exchange means
    its vertex runs again."""
    if dirty[w] == 0:
        return 0
    bits = cuda.atomic.exch(dirty, w, uint32(0))
    cuda.threadfence()
    changed = 0
    for b in range(32):
        if bits & (uint32(1) << uint32(b)):
            u = w * 32 + b
            d = dist[u] + 1
            for k in range(indptr[u], indptr[u + 1]):
                v = indices[k]
                if dist[v] > d and cuda.atomic.min(dist, v, d) > d:
                    cuda.threadfence()
                    cuda.atomic.or_(dirty, v >> 5, uint32(1) << uint32(v & 31))
                    changed = 1
    return changed
