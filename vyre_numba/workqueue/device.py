"""Device-side queue helpers for Numba kernels and fixpoint steps (imported when a GPU or the CUDA
simulator runs them). A queue is two device arrays: `items` (capacity slots) and `state`
(uint64 words: [0] tail, the number of pushes tried since the last reset; [1] head, the number
of items taken by `take`, never past the filled ones).

Invariant: items[0 : min(tail, capacity)] are filled; a push at or past capacity stores nothing
and returns False, so the producer keeps its item and pushes it again after the host drains the
queue (backpressure: nothing is lost, nothing overwritten)."""
from __future__ import annotations

from numba import cuda, int64, uint32, uint64

from ..compaction.select import PREDICATES_KEPT, kept_compiled
from ..lru import LRUCache
from ..simulator import SIMULATED

__all__ = ["push", "push_any", "push_block", "size", "take", "consumer"]

TAIL, HEAD = 0, 1


@cuda.jit(device=True)
def push(items, state, value):
    """Append value; False (nothing stored) when the queue is full. The value converts to the
    items' type as any Numba assignment does (a float into an integer queue truncates, an integer
    out of range wraps), unchecked on the device, where the host's `WorkQueue.push` refuses both."""
    slot = cuda.atomic.add(state, TAIL, uint64(1))
    if slot < items.shape[0]:
        items[slot] = value
        return True
    return False


if SIMULATED:  # the simulator has no warp votes: one push a lane, and a block's pushes counted a thread each
    @cuda.jit(device=True)
    def push_any(items, state, value, want):
        """As `push` where `want`, True elsewhere."""
        return push(items, state, value) if want else True

    @cuda.jit(device=True)
    def push_block(items, state, value, want):
        """The GPU's `push_block` (one atomic a block, slots in thread order, the same barriers),
        its counts kept a thread each where the GPU counts a warp's by vote."""
        ranks = cuda.shared.array(1025, int64)  # each thread's pushes before it; [1024] the block's first slot
        t = cuda.threadIdx.x
        ranks[t] = 1 if want else 0
        cuda.syncthreads()
        if t == 0:
            total = int64(0)
            for i in range(cuda.blockDim.x):
                c = ranks[i]
                ranks[i] = total
                total += c
            ranks[1024] = int64(cuda.atomic.add(state, TAIL, uint64(total))) if total else int64(0)
        cuda.syncthreads()
        slot = ranks[1024] + ranks[t]
        cuda.syncthreads()  # every thread has read its slot before the words are used again
        if not want:
            return True
        if slot < items.shape[0]:
            items[slot] = value
            return True
        return False
else:
    @cuda.jit(device=True)
    def push_any(items, state, value, want):
        """Append value where `want` (True where not), one atomic for all the lanes that call it
        together: a whole frontier pushed lane by lane would queue every push on the one tail."""
        mask = cuda.activemask()
        votes = cuda.ballot_sync(mask, want)
        if votes == 0:
            return True
        leader = cuda.popc((votes & (~votes + uint32(1))) - uint32(1))
        lane = cuda.laneid
        base = int64(0)
        if lane == leader:
            base = int64(cuda.atomic.add(state, TAIL, uint64(cuda.popc(votes))))
        base = cuda.shfl_sync(mask, base, leader)
        if not want:
            return True
        slot = base + int64(cuda.popc(votes & ((uint32(1) << uint32(lane)) - uint32(1))))
        if slot < items.shape[0]:
            items[slot] = value
            return True
        return False

    @cuda.jit(device=True)
    def push_block(items, state, value, want):
        """`push_any` with one atomic for the whole block: every thread of a 1-D block of whole warps
        calls it together (it holds barriers). Where most warps push, as a bottom-up level over
        every vertex does, a warp's atomic each would queue 100,000 of them on the one tail."""
        counts = cuda.shared.array(33, int64)  # a warp's pushes, then its first slot; [32] the block's
        lane = cuda.laneid
        warp = cuda.threadIdx.x // 32
        votes = cuda.ballot_sync(uint32(0xFFFFFFFF), want)
        if lane == 0:
            counts[warp] = cuda.popc(votes)
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            total = int64(0)
            for w in range((cuda.blockDim.x + 31) // 32):
                c = counts[w]
                counts[w] = total
                total += c
            counts[32] = int64(cuda.atomic.add(state, TAIL, uint64(total))) if total else int64(0)
        cuda.syncthreads()
        slot = counts[32] + counts[warp] + int64(cuda.popc(votes & ((uint32(1) << uint32(lane)) - uint32(1))))
        cuda.syncthreads()  # every thread has read its slot before the words are used again
        if not want:
            return True
        if slot < items.shape[0]:
            items[slot] = value
            return True
        return False


@cuda.jit(device=True)
def size(state, capacity):
    """The number of filled slots."""
    return min(int64(state[TAIL]), int64(capacity))


@cuda.jit(device=True)
def take(state, capacity, want):
    """Claim up to `want` filled items: (first index, how many), how many 0 when none are left (or
    `want` < 1). The head moves by exactly the number claimed, so items pushed after a claim that
    found fewer than it wanted go to a later claim. Claim items pushed by an earlier launch (or the
    host): a push in this launch counts its slot before it writes the item, so a claim in the same
    launch may get a slot still being written. The retry loop is bounded: each failed swap is
    another thread's claim of at least one of the finitely many pushed items."""
    w = int64(want)  # an unsigned want past 2**63 reads as negative: no claim
    head = int64(cuda.atomic.add(state, HEAD, uint64(0)))
    while True:
        filled = min(int64(cuda.atomic.add(state, TAIL, uint64(0))), int64(capacity))
        if w < 1 or head >= filled:
            return head, int64(0)
        n = min(w, filled - head)
        seen = int64(cuda.atomic.cas(state, HEAD, uint64(head), uint64(head + n)))
        if seen == head:
            return head, n
        head = seen


_CONSUMERS: LRUCache = LRUCache(PREDICATES_KEPT)  # a loop passing a new step function a call frees the old


def consumer(step):
    """A persistent grid-stride kernel `(items, state, capacity, args)` calling `step(value, args)`
    for every filled item, with the count read on the device (no host read before it runs). Kept
    by the step's code and the values it reads, as `select_if`'s predicates are (`predicate_key`)."""
    return kept_compiled(_CONSUMERS, step, _consumer)


def _consumer(step):
    fn = cuda.jit(device=True, debug=False)(step) if not hasattr(step, "targetoptions") else step  # as select_if's

    @cuda.jit
    def consume(items, state, capacity, args):
        filled = min(int64(state[TAIL]), int64(capacity))
        i = int64(cuda.grid(1))
        stride = int64(cuda.gridsize(1))
        while i < filled:
            fn(items[i], args)
            i += stride
    return consume
