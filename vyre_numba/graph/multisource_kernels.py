"""The Numba kernels of multi-source BFS (imported when a GPU or the CUDA simulator runs them).

Each vertex holds three 64-bit masks, one bit a source of the batch: `seen` (the sources that have
reached it), `frontier` (the sources that reached it at the last level) and `nxt` (the sources
reaching it at this level, gathered before `settle` keeps the new ones). A warp works on one vertex
at a time, its lanes striding over the vertex's neighbours, so index reads are coalesced and a hub
is 32 lanes' work, not one thread's."""
from __future__ import annotations

from numba import cuda, int32, int64, uint8, uint32, uint64

from ..simulator import SIMULATED

FULL = 0xFFFFFFFF


@cuda.jit(device=True)
def lowest_bit(m):
    """The index of m's lowest set bit (m a non-zero uint64), by 32-bit halves (the simulator's
    ffs counts 32 bits only)."""
    low = uint32(m & uint64(0xFFFFFFFF))
    if low != uint32(0):
        return int64(cuda.ffs(low)) - 1
    return int64(cuda.ffs(uint32(m >> uint64(32)))) + 31


if SIMULATED:  # the simulator has no warp votes or shuffles
    @cuda.jit(device=True)
    def count(active, gained):
        """Add to active[0] the lanes of the warp where `gained`."""
        if gained:
            cuda.atomic.add(active, 0, int32(1))

    @cuda.jit(device=True)
    def gather(nxt, u, acc):
        """nxt[u] = the OR of acc over the warp's lanes (nothing stored where that is 0)."""
        if acc != uint64(0):
            cuda.atomic.or_(nxt, u, acc)

    @cuda.jit(device=True)
    def offer(nxt, u, acc):
        """nxt[u] |= the OR of acc over the warp's lanes, atomically (other warps offer to u too)."""
        if acc != uint64(0):
            cuda.atomic.or_(nxt, u, acc)
else:
    @cuda.jit(device=True)
    def count(active, gained):
        """Add to active[0] the lanes of the warp where `gained`: one atomic a warp."""
        votes = cuda.ballot_sync(FULL, gained)
        if cuda.laneid == 0 and votes != 0:
            cuda.atomic.add(active, 0, int32(cuda.popc(votes)))

    @cuda.jit(device=True)
    def gather(nxt, u, acc):
        """nxt[u] = the OR of acc over the warp's lanes (nothing stored where that is 0): a
        shuffle tree (as int64, the type shfl takes), one store."""
        y = int64(acc)
        for off in (16, 8, 4, 2, 1):
            y |= cuda.shfl_xor_sync(FULL, y, off)
        if cuda.laneid == 0 and y != 0:
            nxt[u] = uint64(y)

    @cuda.jit(device=True)
    def offer(nxt, u, acc):
        """nxt[u] |= the OR of acc over the warp's lanes, atomically (other warps offer to u too): a
        shuffle tree, one atomic."""
        y = int64(acc)
        for off in (16, 8, 4, 2, 1):
            y |= cuda.shfl_xor_sync(FULL, y, off)
        if cuda.laneid == 0 and y != 0:
            cuda.atomic.or_(nxt, u, uint64(y))


@cuda.jit(device=True)
def _write_own(dist, n, i, new, level):
    m = new
    while m != uint64(0):
        j = lowest_bit(m)
        dist[j * n + i] = int32(level)
        m &= m - uint64(1)


if SIMULATED:
    @cuda.jit(device=True)
    def write_level(dist, n, i, new, level):
        """dist[j, i] = level for every source j in `new`, a lane at a time."""
        _write_own(dist, n, i, new, level)
else:
    @cuda.jit(device=True)
    def write_level(dist, n, i, new, level):
        """dist[j, i] = level for every source j in `new` (every lane of the warp calls, lanes on
        consecutive vertices i): the warp walks the union of its lanes' sources, so each store
        instruction writes one source's row at 32 consecutive vertices, where a lane walking its
        own sources would scatter a warp's stores over up to 32 rows."""
        union = int64(new)
        for off in (16, 8, 4, 2, 1):
            union |= cuda.shfl_xor_sync(FULL, union, off)
        m = uint64(union)
        while m != uint64(0):
            j = lowest_bit(m)
            if (new >> uint64(j)) & uint64(1):
                dist[j * n + i] = int32(level)
            m &= m - uint64(1)


@cuda.jit(device=True)
def offer_range(indices, k, end, f, seen, nxt):
    """Offer the sources f to the neighbours indices[k], indices[k + 32], ... before `end` that
    they have not reached (a lane's share of a list the warp walks): one atomic OR a neighbour
    that gains something."""
    while k < end:
        u = indices[k]
        m = f & ~seen[u]
        if m != uint64(0):
            cuda.atomic.or_(nxt, u, m)
        k += 32


@cuda.jit(device=True)
def masks_of(indices, k, end, frontier):
    """The OR of the frontier masks of the neighbours indices[k], indices[k + 32], ... before
    `end` (a lane's share of a list the warp walks)."""
    acc = uint64(0)
    while k < end:
        acc |= frontier[indices[k]]
        k += 32
    return acc


@cuda.jit
def clear(width, n, seen, frontier, nxt, dist):
    """Every mask empty, every distance of the batch's rows -1."""
    t = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    i = t
    while i < n:
        seen[i] = uint64(0)
        frontier[i] = uint64(0)
        nxt[i] = uint64(0)
        i += stride
    i = t
    while i < int64(width) * n:
        dist[i] = int32(-1)
        i += stride


@cuda.jit
def place(sources, width, n, seen, frontier, dist):
    """(One thread a source, after `clear`.) The source's bit at its vertex, its distance 0 there."""
    j = cuda.grid(1)
    if j < width:
        s = int64(sources[j])
        bit = uint64(1) << uint64(j)
        cuda.atomic.or_(seen, s, bit)
        cuda.atomic.or_(frontier, s, bit)
        dist[int64(j) * n + s] = int32(0)


@cuda.jit
def push(indptr, indices, n, seen, frontier, nxt, limit):
    """Top-down: every vertex with sources in its frontier mask offers them to its neighbours that
    those sources have not reached (one atomic OR a neighbour that gains something); vertices
    with more than `limit` neighbours are left to `push_heavy`."""
    lane = cuda.laneid
    warp = int64(cuda.grid(1)) // 32
    warps = int64(cuda.gridsize(1)) // 32
    v = warp
    while v < n:
        f = frontier[v]
        if f != uint64(0) and indptr[v + 1] - indptr[v] <= limit:
            offer_range(indices, int64(indptr[v]) + lane, indptr[v + 1], f, seen, nxt)
        v += warps


@cuda.jit
def pull(indptr, indices, n, everyone, seen, frontier, nxt, limit):
    """Bottom-up (symmetric CSRs): every vertex some source has not reached gathers, from its
    neighbours' frontier masks, the sources it has not seen; no atomics. Vertices with more than
    `limit` neighbours are left to `pull_heavy`."""
    lane = cuda.laneid
    warp = int64(cuda.grid(1)) // 32
    warps = int64(cuda.gridsize(1)) // 32
    u = warp
    while u < n:
        want = everyone & ~seen[u]
        if want != uint64(0) and indptr[u + 1] - indptr[u] <= limit:
            gather(nxt, u, masks_of(indices, int64(indptr[u]) + lane, indptr[u + 1], frontier) & want)
        u += warps


@cuda.jit
def find_heavy(indptr, n, limit, out, count):
    """Every vertex with more than `limit` neighbours appends (vertex, first entry, end) to `out`
    (rows in any order; `out` has room for every such vertex: nnz // (limit + 1) rows)."""
    v = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while v < n:
        lo = int64(indptr[v])
        hi = int64(indptr[v + 1])
        if hi - lo > limit:
            j = cuda.atomic.add(count, 0, int64(1))
            out[j, 0] = v
            out[j, 1] = lo
            out[j, 2] = hi
        v += stride


@cuda.jit
def push_heavy(indices, pieces, count, seen, frontier, nxt):
    """`push` for the vertices it left: a warp a piece (vertex, first entry, end) of their
    neighbour lists, so a hub of millions of neighbours is thousands of warps' work."""
    lane = cuda.laneid
    c = int64(cuda.grid(1)) // 32
    warps = int64(cuda.gridsize(1)) // 32
    while c < count:
        v = pieces[c, 0]
        f = frontier[v]
        if f != uint64(0):
            offer_range(indices, pieces[c, 1] + lane, pieces[c, 2], f, seen, nxt)
        c += warps


@cuda.jit
def pull_heavy(indices, pieces, count, everyone, seen, frontier, nxt):
    """`pull` for the vertices it left: a warp a piece of their neighbour lists, each piece's
    gathered sources ORed into the vertex's nxt atomically."""
    lane = cuda.laneid
    c = int64(cuda.grid(1)) // 32
    warps = int64(cuda.gridsize(1)) // 32
    while c < count:
        u = pieces[c, 0]
        want = everyone & ~seen[u]
        if want != uint64(0):
            offer(nxt, u, masks_of(indices, pieces[c, 1] + lane, pieces[c, 2], frontier) & want)
        c += warps


@cuda.jit
def settle(n, level, seen, frontier, nxt, dist, active):
    """Keep what each vertex gained this level: the new bits become its frontier and its seen
    mask, each new source's row gets distance `level` there; count the vertices that gained."""
    lane = cuda.laneid
    base = int64(cuda.grid(1)) - lane
    stride = int64(cuda.gridsize(1))
    while base < n:
        i = base + lane
        new = uint64(0)
        if i < n:
            new = nxt[i] & ~seen[i]
            nxt[i] = uint64(0)
            frontier[i] = new
            if new != uint64(0):
                seen[i] |= new
        write_level(dist, n, i, new, level)
        count(active, new != uint64(0))
        base += stride


@cuda.jit
def reached(dist, out, total):
    """out[i] = 1 where dist[i] >= 0, else 0 (out is bytes, read as bool)."""
    i = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while i < total:
        out[i] = uint8(1) if dist[i] >= 0 else uint8(0)
        i += stride
