"""The grid barrier of persistent Numba kernels (imported when a GPU or the CUDA simulator runs
them): every block of a launch arrives at a counter that only grows, and waits, within a bound,
until the launch's blocks have all arrived. A kernel using it runs no more blocks than fit on the
GPU at once (a cooperative launch guarantees them a place); a block that waits its bound of polls
gives up and marks the state, so a kernel never hangs: its host sees the mark and says so."""
from __future__ import annotations

import os

from numba import cuda

SPINS = 1 << 20  # polls of a short wait (about a second on an H100: a poll and its sleep take ~0.6-1 us), for a
# kernel whose host can redo the work another way
ARRIVED, FINISHED, FAILED = 0, 1, 2  # the words of a barrier's state (int64, zero when made)

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    @cuda.jit(device=True)
    def pause():
        pass
else:
    @cuda.jit(device=True)
    def pause():
        cuda.nanosleep(100)


@cuda.jit(device=True)
def grid_wait(bar, target, tid, ok, spins):
    """Arrive at bar[ARRIVED] and wait until it reaches `target` (its value once every block of
    this launch has arrived: the count before the launch plus the blocks times the barriers so
    far); True then, False where this block waited `spins` polls (it then adds to bar[FAILED]).
    Every thread of the block calls; `ok` is one shared int32. Memory written before the barrier
    is visible after it to atomics and to loads of lines this block has not cached."""
    cuda.syncthreads()
    if tid == 0:
        cuda.threadfence()
        cuda.atomic.add(bar, ARRIVED, 1)
        good = 1
        polls = 0
        while cuda.atomic.add(bar, ARRIVED, 0) < target:
            polls += 1
            if polls > spins:
                good = 0
                cuda.atomic.add(bar, FAILED, 1)
                break
            pause()
        cuda.threadfence()
        ok[0] = good
    cuda.syncthreads()
    return ok[0] != 0
