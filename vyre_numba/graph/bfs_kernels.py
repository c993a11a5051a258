"""The Numba kernels of BFS (imported when a GPU or the CUDA simulator runs them). Frontiers are
work queues (`vyre_numba.workqueue`): a vertex enters the next frontier once, by the thread whose
compare-and-swap set its distance (top-down) or by its own thread (bottom-up), so a queue of n
slots never overflows."""
from __future__ import annotations

from numba import cuda, int32, int64

from ..simulator import SIMULATED
from ..workqueue.barrier import grid_wait
from ..workqueue.device import HEAD, TAIL, push_any, push_block

UNSEEN = -1


from .bfs import HUB  # frontier vertices with more neighbours are expanded by a whole block


@cuda.jit(device=True)
def visit(dist, v, nxt, out_items, out_state):
    won = dist[v] == UNSEEN and cuda.atomic.cas(dist, v, int32(UNSEEN), nxt) == UNSEEN
    push_any(out_items, out_state, int32(v), won)


@cuda.jit
def top_down(indptr, indices, dist, level, items, state, capacity, out_items, out_state):
    """Every unseen neighbour of a frontier vertex gets distance level + 1 and joins the next
    frontier: a thread a vertex, hubs (more than HUB neighbours) left to `top_down_hubs`."""
    filled = min(int64(state[TAIL]), int64(capacity))
    i = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    nxt = int32(level + 1)
    while i < filled:
        u = items[i]
        if indptr[u + 1] - indptr[u] <= HUB:
            for k in range(indptr[u], indptr[u + 1]):
                visit(dist, indices[k], nxt, out_items, out_state)
        i += stride


@cuda.jit
def top_down_hubs(indptr, indices, dist, level, items, state, capacity, out_items, out_state):
    """The hubs of the frontier, a block a hub, its threads striding over the neighbours (so one
    vertex of a million neighbours is not one thread's work)."""
    filled = min(int64(state[TAIL]), int64(capacity))
    i = int64(cuda.blockIdx.x)
    nxt = int32(level + 1)
    while i < filled:
        u = items[i]
        lo, hi = indptr[u], indptr[u + 1]
        if hi - lo > HUB:
            k = lo + cuda.threadIdx.x
            while k < hi:
                visit(dist, indices[k], nxt, out_items, out_state)
                k += cuda.blockDim.x
        i += cuda.gridDim.x


@cuda.jit
def top_down_few(indptr, indices, dist, level, items, state, capacity, out_items, out_state):
    """`top_down` for a frontier of a few vertices (the host chooses it by the frontier's size):
    the whole grid strides over each vertex's neighbours in turn, so a source of 10^5 neighbours
    is spread over every multiprocessor, not one block's."""
    filled = min(int64(state[TAIL]), int64(capacity))
    stride = int64(cuda.gridsize(1))
    nxt = int32(level + 1)
    for i in range(filled):
        u = items[i]
        k = int64(indptr[u]) + int64(cuda.grid(1))
        hi = indptr[u + 1]
        while k < hi:
            visit(dist, indices[k], nxt, out_items, out_state)
            k += stride


@cuda.jit
def bottom_up(indptr, indices, dist, level, n, out_items, out_state):
    """Every unseen vertex with a neighbour at distance `level` gets level + 1 and joins the next
    frontier (stored edges taken as in-edges: the CSR is symmetric)."""
    v = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while v - cuda.threadIdx.x < n:  # whole blocks step together: push_block sums over the block
        found = False
        if v < n and dist[v] == UNSEEN:
            for k in range(indptr[v], indptr[v + 1]):
                if dist[indices[k]] == level:
                    found = True
                    break
            if found:
                dist[v] = int32(level + 1)
        push_block(out_items, out_state, int32(v), found)
        v += stride


if SIMULATED:  # no shuffles in the simulator: an atomic a thread
    @cuda.jit(device=True)
    def add_sum(out, i, x):
        """out[i] += x."""
        if x != 0:
            cuda.atomic.add(out, i, x)
else:
    @cuda.jit(device=True)
    def add_sum(out, i, x):
        """out[i] += the sum of x over the warp's lanes (every lane calls): one atomic a warp."""
        y = int64(x)
        for off in (16, 8, 4, 2, 1):
            y += cuda.shfl_xor_sync(0xFFFFFFFF, y, off)
        if cuda.laneid == 0 and y != 0:
            cuda.atomic.add(out, i, y)


@cuda.jit(device=True)
def last_block_total(counts, host):
    """(Thread 0 of each block, once its block's share is added to counts[0].) In the launch's last
    block to get here: host[0] = the whole grid's sum and `counts` (sum, blocks done) zero again for
    the next launch, then True; False in the others. The caller then sets the word the host
    watches for, after a system fence."""
    cuda.threadfence()
    if cuda.atomic.add(counts, 1, 1) == cuda.gridDim.x - 1:
        cuda.threadfence()
        host[0] = cuda.atomic.add(counts, 0, 0)
        counts[0] = 0
        counts[1] = 0
        return True
    return False


@cuda.jit
def frontier_edges(indptr, items, state, capacity, counts, host, spent):
    """Measure the frontier just built: host[0] = the neighbours of the queue's filled items (the
    edges a top-down level from it would check), then host[1] = how many items are filled: what
    the next level's direction is chosen from, put by the launch's last block into `host` (mapped
    host memory, host[1] -1 before) so that the host reads both without a copy. `counts` (edges,
    blocks done) is zero on entry and left zero; the last block also empties the queue `spent`
    (the frontier before, which the next level fills)."""
    filled = min(int64(state[TAIL]), int64(capacity))
    i = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    acc = int64(0)
    while i < filled:
        u = items[i]
        acc += int64(indptr[u + 1] - indptr[u])
        i += stride
    add_sum(counts, 0, acc)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0 and last_block_total(counts, host):
        spent[TAIL] = 0
        spent[HEAD] = 0
        cuda.threadfence_system()
        host[1] = filled


@cuda.jit
def start(dist, n, source, items, state, spent, counts, third):
    """dist = UNSEEN everywhere but the source (0), which is the first frontier (`items`, `state`);
    the queues of states `spent` and `third` empty and `counts` zero (see `frontier_edges`)."""
    v = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    while v < n:
        dist[v] = 0 if v == source else UNSEEN
        v += stride
    if cuda.grid(1) == 0:
        items[0] = int32(source)
        state[TAIL] = 1
        state[HEAD] = 0
        spent[TAIL] = 0
        spent[HEAD] = 0
        third[TAIL] = 0
        third[HEAD] = 0
        counts[0] = 0
        counts[1] = 0


@cuda.jit
def levels_on_device(indptr, indices, dist, queues, states, first, level, n, limit, bar, arrived, spins, out):
    """The remaining top-down levels in one persistent launch (no more blocks than fit at once), a
    grid barrier between levels: level L reads queue L % 3 (rows of `queues`, `states`; the
    first is row `first`, filled, the next one empty), fills queue (L + 1) % 3, and empties
    queue (L + 2) % 3, which level L - 1 read and every block has finished with. A thread expands
    an item; an item of more than HUB neighbours is expanded by its thread's whole block. Items
    are read by atomics: another block wrote them, and this block may hold their lines from
    three levels ago. Ends when a level finds its queue empty, or holding more than `limit`
    items (handed back to the host, the next queue empty). `out` (mapped host memory, out[1]
    written last): out[0] = the levels run; out[1] = 0 done, 2 handed back, 1 where a block gave
    up at a barrier after `spins` polls (`barrier.grid_wait`; the distances are then unfinished)."""
    ok = cuda.shared.array(1, int32)
    tail = cuda.shared.array(1, int64)
    hubs = cuda.shared.array(256, int32)
    tid = cuda.threadIdx.x
    blocks = cuda.gridDim.x
    i0 = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    cur = first
    done = int64(0)
    outcome = 0
    while True:
        if i0 == 0:
            spent = (cur + 2) % 3
            states[spent, TAIL] = 0
            states[spent, HEAD] = 0
        if tid == 0:  # one atomic a block, not a thread, on the one tail
            tail[0] = min(int64(cuda.atomic.add(states, (cur, TAIL), 0)), int64(n))
        cuda.syncthreads()
        filled = tail[0]
        if filled == 0:
            break
        if filled > limit:
            outcome = 2
            break
        nx = (cur + 1) % 3
        nxt = int32(level + 1)
        items, state = queues[nx], states[nx]
        first_item = int64(cuda.blockIdx.x) * cuda.blockDim.x
        while first_item < filled:  # the same trip count for every thread of the block
            i = first_item + tid
            hub = int32(-1)
            if i < filled:
                u = cuda.atomic.add(queues, (cur, i), 0)
                if indptr[u + 1] - indptr[u] <= HUB:
                    for k in range(indptr[u], indptr[u + 1]):
                        visit(dist, indices[k], nxt, items, state)
                else:
                    hub = u
            if cuda.syncthreads_or(int32(1) if hub >= 0 else int32(0)):
                hubs[tid] = hub
                cuda.syncthreads()
                for t in range(cuda.blockDim.x):
                    h = hubs[t]
                    if h >= 0:
                        k = int64(indptr[h]) + tid
                        while k < indptr[h + 1]:
                            visit(dist, indices[k], nxt, items, state)
                            k += cuda.blockDim.x
                cuda.syncthreads()
            first_item += stride
        done += 1
        if not grid_wait(bar, arrived + done * blocks, tid, ok, spins):
            outcome = 1
            break
        cur = nx
        level += 1
    if i0 == 0:
        out[0] = done
        cuda.threadfence_system()
        out[1] = outcome
