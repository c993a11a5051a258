"""The Numba kernels of multi-source BFS (imported when a GPU or the CUDA simulator runs them).

Each vertex holds three 64-bit masks, one bit a source of the batch: `seen` (the sources that have
reached it), `frontier` (the sources that reached it at the last level) and `nxt` (the sources
reaching it at this level, gathered before `settle` keeps the new ones). Work is split by degree,
once a call (`split_by_degree`, or once a `Graph`): a vertex of up to SMALL neighbours is one
thread's (`push`, `pull`: a warp reads 32 vertices' masks in one load), one of up to the piece
limit one warp's, its lanes striding over the neighbours (`push_wide`, `pull_wide`, over a queue
of those vertices, so the wide vertices, which cluster in id order, are spread over every warp),
and a hub's neighbours are cut into pieces (`cut_pieces`), a warp a piece (`push_heavy`,
`pull_heavy`)."""
from __future__ import annotations

from numba import cuda, int32, int64, uint8, uint32, uint64

from ..simulator import SIMULATED
from .bfs_kernels import add_sum, last_block_total
from ..workqueue.device import TAIL, push_block

FULL = 0xFFFFFFFF
SMALL = 32  # neighbours a lane walks alone; a vertex with more is its whole warp's work


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
    def offer(nxt, u, acc):
        """nxt[u] |= the OR of acc over the warp's lanes, atomically (other warps offer to u too)."""
        if acc != uint64(0):
            cuda.atomic.or_(nxt, u, acc)
else:
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
def offer_range(indices, k, end, step, f, seen, nxt):
    """Offer the sources f to the neighbours indices[k], indices[k + step], ... before `end` that
    they have not reached: one atomic OR a neighbour that gains something."""
    while k < end:
        u = indices[k]
        m = f & ~seen[u]
        if m != uint64(0):
            cuda.atomic.or_(nxt, u, m)
        k += step


@cuda.jit(device=True)
def step_masks(indices, k, end, frontier):
    """The OR of the frontier masks of the neighbours indices[k], indices[k + 32], indices[k + 64]
    and indices[k + 96] that come before `end`: four loads in flight a lane, not one."""
    a = frontier[indices[k]] if k < end else uint64(0)
    b = frontier[indices[k + 32]] if k + 32 < end else uint64(0)
    c = frontier[indices[k + 64]] if k + 64 < end else uint64(0)
    d = frontier[indices[k + 96]] if k + 96 < end else uint64(0)
    return (a | b) | (c | d)


@cuda.jit(device=True)
def masks_of(indices, k, end, frontier):
    """The OR of the frontier masks of the neighbours indices[k], indices[k + 32], ... before
    `end` (a lane's share of a list the warp walks)."""
    acc = uint64(0)
    while k < end:  # one load in flight a lane: four (step_masks) measured 8 % slower for pieces of 1,024
        acc |= frontier[indices[k]]
        k += 32
    return acc


@cuda.jit(device=True)
def own_masks(indices, k, end, frontier, want):
    """The sources of `want` in the frontier masks of the neighbours indices[k:end], read until
    every one of them is found (a lane's own vertex)."""
    acc = uint64(0)
    while k < end:
        acc |= frontier[indices[k]]
        if acc & want == want:
            break
        k += 1
    return acc & want


if SIMULATED:
    @cuda.jit(device=True)
    def warp_masks(indices, lo, hi, frontier, want):
        """The sources of `want` in the frontier masks of the neighbours indices[lo:hi], the same
        on every lane: each lane reads them all here."""
        return own_masks(indices, lo, hi, frontier, want)
else:
    @cuda.jit(device=True)
    def warp_masks(indices, lo, hi, frontier, want):
        """The sources of `want` in the frontier masks of the neighbours indices[lo:hi], the same
        on every lane (every lane calls, with the same arguments): the lanes read 128 neighbours a
        step and stop at the step where every source is found."""
        acc = int64(0)
        c = lo
        while c < hi:  # the same trip count for every lane: the shuffles need them all
            acc |= int64(step_masks(indices, c + cuda.laneid, hi, frontier))
            for off in (16, 8, 4, 2, 1):
                acc |= cuda.shfl_xor_sync(FULL, acc, off)
            if uint64(acc) & want == want:
                break
            c += 128
        return uint64(acc) & want


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
def push(indptr, indices, n, seen, frontier, nxt, own):
    """Top-down: every vertex of up to `own` neighbours with sources in its frontier mask offers
    them to its neighbours that those sources have not reached (one atomic OR a neighbour that
    gains something), a thread a vertex; larger ones are left to `push_wide` and `push_heavy`."""
    v = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while v < n:
        f = frontier[v]
        if f != uint64(0):
            lo, hi = int64(indptr[v]), int64(indptr[v + 1])
            if hi - lo <= own:
                offer_range(indices, lo, hi, 1, f, seen, nxt)
        v += stride


@cuda.jit
def pull(indptr, indices, n, everyone, seen, frontier, nxt, own):
    """Bottom-up (symmetric CSRs): every vertex of up to `own` neighbours that some source has not
    reached gathers, from its neighbours' frontier masks, the sources it has not seen, reading
    until it has them all, a thread a vertex; no atomics. Larger ones are left to `pull_wide` and
    `pull_heavy`."""
    u = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while u < n:
        want = everyone & ~seen[u]
        if want != uint64(0):
            lo, hi = int64(indptr[u]), int64(indptr[u + 1])
            if hi > lo and hi - lo <= own:
                got = own_masks(indices, lo, hi, frontier, want)
                if got != uint64(0):
                    nxt[u] = got
        u += stride


@cuda.jit
def split_by_degree(indptr, n, own, limit, out, found, wide):
    """Sort out the vertices a thread does not take alone, once a call: each with more than `limit`
    neighbours appends (vertex, first entry, end) to `out` (found[2] counts them; room for every
    such vertex, nnz // (limit + 1) rows), each other with more than `own` joins the queue `wide`
    (its tail found[TAIL]; room for nnz // (own + 1)). Both in the order atomics meet them."""
    v = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while v - cuda.threadIdx.x < n:  # whole blocks step together: push_block sums over the block
        d = int64(0)
        if v < n:
            lo = int64(indptr[v])
            d = int64(indptr[v + 1]) - lo
            if d > limit:
                j = int64(cuda.atomic.add(found, 2, uint64(1)))
                out[j, 0] = v
                out[j, 1] = lo
                out[j, 2] = lo + d
        push_block(wide, found, v, d > own and d <= limit)
        v += stride


@cuda.jit
def push_wide(indptr, indices, wide, found, seen, frontier, nxt):
    """`push` for the queued vertices `wide` (found[TAIL] of them): a warp a vertex, its lanes
    striding over the neighbours, so index reads are coalesced and the wide vertices, which
    cluster in id order, are spread over every warp."""
    lane = cuda.laneid
    c = int64(cuda.grid(1)) // 32
    warps = int64(cuda.gridsize(1)) // 32
    count = int64(found[TAIL])
    while c < count:
        v = wide[c]
        f = frontier[v]
        if f != uint64(0):
            offer_range(indices, int64(indptr[v]) + lane, indptr[v + 1], 32, f, seen, nxt)
        c += warps


@cuda.jit
def pull_wide(indptr, indices, wide, found, everyone, seen, frontier, nxt):
    """`pull` for the queued vertices `wide`: a warp a vertex, reading 128 neighbours a step until
    it has every source it wants."""
    c = int64(cuda.grid(1)) // 32
    warps = int64(cuda.gridsize(1)) // 32
    count = int64(found[TAIL])
    while c < count:
        u = wide[c]
        want = everyone & ~seen[u]
        if want != uint64(0):
            got = warp_masks(indices, int64(indptr[u]), int64(indptr[u + 1]), frontier, want)
            if cuda.laneid == 0 and got != uint64(0):
                nxt[u] = got
        c += warps


@cuda.jit
def cut_pieces(rows, ends, count, piece, pieces):
    """The pieces of `split_by_degree`'s rows 0..count-1 (vertex, first entry, end): row r's neighbour
    list cut into runs of `piece` entries, written as rows (vertex, first entry, end) of `pieces`
    from ends[r - 1] (0 for the first) up to ends[r]."""
    r = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while r < count:
        v, hi = rows[r, 0], rows[r, 2]
        first = rows[r, 1]
        at = ends[r - 1] if r > 0 else int64(0)
        while first < hi:
            pieces[at, 0] = v
            pieces[at, 1] = first
            pieces[at, 2] = min(first + piece, hi)
            first += piece
            at += 1
        r += stride


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
            offer_range(indices, pieces[c, 1] + lane, pieces[c, 2], 32, f, seen, nxt)
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
def settle(n, level, seen, frontier, nxt, dist, counts, host):
    """Keep what each vertex gained this level: the new bits become its frontier and its seen
    mask, each new source's row gets distance `level` there. The vertices that gained are summed
    a block at a time (one atomic on one word a warp serialised a level's count for up to a
    millisecond) and the launch's last block puts the count in host[0], then 1 in host[1] (mapped
    host memory, host[1] -1 before: what the host watches for); `counts` (vertices, blocks done)
    is zero on entry and left zero."""
    total = cuda.shared.array(1, int64)
    if cuda.threadIdx.x == 0:
        total[0] = 0
    cuda.syncthreads()
    lane = cuda.laneid
    base = int64(cuda.grid(1)) - lane  # whole warps step together: write_level shuffles across the warp
    stride = int64(cuda.gridsize(1))
    gained = int64(0)
    while base < n:
        i = base + lane
        new = uint64(0)
        if i < n:
            new = nxt[i] & ~seen[i]
            nxt[i] = uint64(0)
            frontier[i] = new
            if new != uint64(0):
                seen[i] |= new
                gained += 1
        write_level(dist, n, i, new, level)
        base += stride
    add_sum(total, 0, gained)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        if total[0] != 0:
            cuda.atomic.add(counts, 0, total[0])
        if last_block_total(counts, host):
            cuda.threadfence_system()
            host[1] = 1


@cuda.jit
def reached(dist, out, total):
    """out[i] = 1 where dist[i] >= 0, else 0 (out is bytes, read as bool)."""
    i = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while i < total:
        out[i] = uint8(1) if dist[i] >= 0 else uint8(0)
        i += stride
