"""The Numba kernels of compaction (see `select.py` for the design). Imported only when a GPU or
the CUDA simulator runs them: importing numba.cuda is slow, and the simulator swaps this
module's `cuda` for its own."""
from __future__ import annotations

from typing import Callable

from numba import cuda, int32, int64, uint8, uint64

from .select import ITEMS, THREADS, TILE

SCAN_THREADS, SCAN_RAKERS = 1024, 32  # the one block that scans the tile counts
RAKERS = 16  # THREADS == RAKERS ** 2


@cuda.jit(device=True)
def flag_nonzero(flags, i):
    return flags[i] != 0


@cuda.jit(device=True)
def copy_words(out, j, words, i):
    for w in range(words.shape[1]):
        out[j, w] = words[i, w]


@cuda.jit(device=True)
def write_index(out, j, words, i):
    out[j, 0] = i


_KERNELS: dict = {}


@cuda.jit(device=True)
def block_scan(scan, seg, tid, value):
    """Exclusive scan of `value` over the block's threads (`scan`: one shared slot a thread; `seg`:
    one per raking thread, len(seg)**2 == len(scan)): the first len(seg) threads each scan a run
    of len(seg) slots, one of them scans the runs' totals, and every thread adds its run's offset.
    Three barriers, syncthreads only, so the CUDA simulator runs it too."""
    rakers = seg.shape[0]
    scan[tid] = value
    cuda.syncthreads()
    if tid < rakers:
        run = 0
        for t in range(tid * rakers, (tid + 1) * rakers):
            v = scan[t]
            scan[t] = run
            run += v
        seg[tid] = run
    cuda.syncthreads()
    if tid == 0:
        run = 0
        for r in range(rakers):
            v = seg[r]
            seg[r] = run
            run += v
    cuda.syncthreads()
    return scan[tid] + seg[tid // rakers]


@cuda.jit
def scan_tiles(counts, tiles, offsets, ctl):
    """One block of SCAN_THREADS: offsets[t] = counts of the tiles before t; ctl[2] = the total."""
    tid = cuda.threadIdx.x
    scan = cuda.shared.array(SCAN_THREADS, int64)
    seg = cuda.shared.array(SCAN_RAKERS, int64)
    per = (tiles + SCAN_THREADS - 1) // SCAN_THREADS
    lo = min(tid * per, tiles)
    hi = min(lo + per, tiles)
    mine = int64(0)
    for t in range(lo, hi):
        mine += counts[t]
    run = block_scan(scan, seg, tid, mine)
    for t in range(lo, hi):
        offsets[t] = run
        run += counts[t]
    if tid == SCAN_THREADS - 1:
        ctl[2] = uint64(run)


def select_kernels(flag_of: Callable, emit: Callable):
    """(count, scatter) kernels keeping item i where `flag_of(src, i)` and writing it with
    `emit(out, j, words, i)` (both device functions), compiled once per pair. A tile is THREADS
    threads of ITEMS items; the count kernel writes each tile's kept total; after `scan_tiles` the
    scatter kernel ranks the tile's items by a block scan, lists the kept ones in shared memory
    and writes them out with consecutive threads at consecutive places."""
    key = (flag_of, emit)
    k = _KERNELS.get(key)
    if k is not None:
        return k

    @cuda.jit
    def count(src, n, counts):
        tid = cuda.threadIdx.x
        part = cuda.shared.array(THREADS, int32)
        base = cuda.blockIdx.x * TILE
        mine = 0
        for k in range(ITEMS):  # strided over the block: each load instruction reads one run of memory
            i = base + k * THREADS + tid
            if i < n and flag_of(src, i):
                mine += 1
        part[tid] = mine
        cuda.syncthreads()
        half = THREADS // 2
        while half > 0:  # tree sum (same-address shared atomics would serialise the block)
            if tid < half:
                part[tid] += part[tid + half]
            cuda.syncthreads()
            half //= 2
        if tid == 0:
            counts[cuda.blockIdx.x] = part[0]

    @cuda.jit
    def scatter(src, n, words, out, offsets, capacity):
        tid = cuda.threadIdx.x
        keep = cuda.shared.array(TILE, uint8)
        kept = cuda.shared.array(TILE, int32)  # the tile's kept items (offsets in the tile), in order
        scan = cuda.shared.array(THREADS, int64)
        seg = cuda.shared.array(RAKERS, int64)
        total = cuda.shared.array(1, int64)
        base = cuda.blockIdx.x * TILE
        for k in range(ITEMS):  # the flags read strided, then each thread takes ITEMS consecutive ones
            i = base + k * THREADS + tid
            keep[k * THREADS + tid] = 1 if i < n and flag_of(src, i) else 0
        cuda.syncthreads()
        mine = 0
        for k in range(ITEMS):
            mine += keep[tid * ITEMS + k]
        r = block_scan(scan, seg, tid, int64(mine))
        if tid == THREADS - 1:
            total[0] = r + mine
        for k in range(ITEMS):
            if keep[tid * ITEMS + k]:
                kept[r] = tid * ITEMS + k
                r += 1
        cuda.syncthreads()
        start = offsets[cuda.blockIdx.x]
        for r in range(tid, total[0], THREADS):  # consecutive threads write consecutive places
            if start + r < capacity:
                emit(out, start + r, words, base + kept[r])

    _KERNELS[key] = (count, scatter)
    return count, scatter


_PREDICATES: dict = {}


def predicate_flag(predicate: Callable) -> Callable:
    """The flag function of select_if: predicate(values[i])."""
    fn = _PREDICATES.get(predicate)
    if fn is None:
        pred = cuda.jit(device=True)(predicate)

        @cuda.jit(device=True)
        def flag_predicate(values, i):
            return bool(pred(values[i]))
        fn = _PREDICATES[predicate] = flag_predicate
    return fn
