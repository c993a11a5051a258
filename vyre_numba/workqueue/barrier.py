"""The grid barrier of persistent Numba kernels (imported when a GPU or the CUDA simulator runs
them): every block of a launch arrives at a counter that only grows, and waits, within a bound,
until the launch's blocks have all arrived. A kernel using it runs no more blocks than fit on the
GPU at once (a cooperative launch guarantees them a place); a block that waits its bound of polls
gives up and marks the state, so a kernel never hangs: its host sees the mark and says so."""
from __future__ import annotations

from numba import cuda

from ..simulator import SIMULATED

SPINS = 1 << 20  # polls of a short wait (about a second on an H100: a poll and its sleep take ~0.6-1 us), for a
# kernel whose host can redo the work another way
ARRIVED, FINISHED, FAILED = 0, 1, 2  # the words of a barrier's state (int64, zero when made)

if SIMULATED:
    @cuda.jit(device=True)
    def pause():
        pass
else:
    @cuda.jit(device=True)
    def pause():
        cuda.nanosleep(100)


@cuda.jit(device=True)
def arrive(bar, target, spins):
    """One thread's arrival at bar[ARRIVED] and its bounded wait for `target` (grid_wait's
    thread 0): 1 once every block has arrived, 0 where it polled `spins` times (bar[FAILED] then
    counts it). Polls are atomics: Numba's uncached load (`cuda.ldcv`, ld.global.cv) is an inline
    asm without side effects, which the compiler may hoist out of the loop (polled so on an H200,
    BFS and the e-graph rounds timed out at their barriers), and a nanosleep between polls costs
    nothing measurable (1.17 against 1.12 us a barrier of 132 blocks on an H200)."""
    cuda.threadfence()
    cuda.atomic.add(bar, ARRIVED, 1)
    polls = 0
    while cuda.atomic.add(bar, ARRIVED, 0) < target:
        polls += 1
        if polls > spins:
            cuda.atomic.add(bar, FAILED, 1)
            return 0
        pause()
    cuda.threadfence()
    return 1


@cuda.jit(device=True)
def grid_wait(bar, target, tid, ok, spins):
    """Arrive at bar[ARRIVED] and wait until it reaches `target` (its value once every block of
    this launch has arrived: the count before the launch plus the blocks times the barriers so
    far); True then, False where this block waited `spins` polls (it then adds to bar[FAILED]).
    Every thread of the block calls; `ok` is one shared int32. The pattern is cooperative groups'
    grid sync (a block barrier, thread 0's fence, arrival and wait, its fence, a block barrier),
    after which CUDA makes the grid's earlier writes visible to every thread; the kernels here
    still read words other blocks wrote in the same launch with atomics where a stale line would
    cost correctness."""
    cuda.syncthreads()
    if tid == 0:
        ok[0] = arrive(bar, target, spins)
    cuda.syncthreads()
    return ok[0] != 0


@cuda.jit(device=True)
def grid_wait_reading(bar, target, tid, ok, spins, words, i, j, seen):
    """grid_wait, and words[i] and words[j] as they stand once every block has arrived, read
    once for the block (into the shared int64 seen[0] and seen[1]; j == i reads one word): a word every thread decides
    on costs one atomic a block, not one a thread (1.43 against 1.84 us a barrier and word, 132
    blocks of 256 threads on an H200)."""
    cuda.syncthreads()
    if tid == 0:
        ok[0] = arrive(bar, target, spins)
        seen[0] = cuda.atomic.add(words, i, 0)
        seen[1] = seen[0] if j == i else cuda.atomic.add(words, j, 0)
    cuda.syncthreads()
    return ok[0] != 0
