"""The Numba kernels of compaction (see `select.py` for the design). Imported only when a GPU or
the CUDA simulator runs them: importing numba.cuda is slow, and the simulator swaps this
module's `cuda` for its own.

The warp-level pieces (vote, block sum, tile scan) come in two forms: warp intrinsics on the
GPU, and under the CUDA simulator, which has none, the same results from shared memory."""
from __future__ import annotations

from typing import Callable

import numpy as np
from numba import cuda, from_dtype, int32, int64, uint8, uint32, uint64

from ..lru import LRUCache
from ..simulator import SIMULATED as _SIM
from ..workqueue import barrier
from ..workqueue.barrier import FAILED, FINISHED, grid_wait
from .select import ITEMS, PREDICATES_KEPT, THREADS, TILE, kept_compiled

WARPS = THREADS // 32
SLOTS = ITEMS * WARPS  # (item row, warp) counts of a tile
PER_LANE = SLOTS // 32  # of them a lane of warp 0 scans
OCTS = ITEMS // 8  # eight-flag words a thread of count_bytes reads a tile
GROUP = 4  # tiles a block of count_bytes counts
GROUP_OCTS = GROUP * OCTS
SCAN_THREADS = 1024  # tile counts a block of the scan takes
FULL = 0xFFFFFFFF


@cuda.jit(device=True)
def flag_nonzero(flags, i):
    return flags[i] != 0


@cuda.jit(device=True)
def copy_words(out, j, words, i):  # records: several words an item, (n, w) arrays
    for w in range(words.shape[1]):
        out[j, w] = words[i, w]


@cuda.jit(device=True)
def write_index(out, j, words, i):  # `out`: 1-D
    out[j] = i


if _SIM:
    @cuda.jit(device=True)
    def vote(keep, votes, tid):
        """The warp's ballot: bit l set where lane l keeps its item (every thread of the block calls)."""
        votes[tid] = 1 if keep else 0
        cuda.syncthreads()
        first = tid - tid % 32
        m = 0
        for lane in range(32):
            m |= int(votes[first + lane]) << lane
        cuda.syncthreads()
        return uint32(m)

    @cuda.jit(device=True)
    def add_count(counts, tile, v, lane):
        """counts[tile] += v summed over the warp (here: each thread adds its own)."""
        cuda.atomic.add(counts, tile, v)

    @cuda.jit(device=True)
    def scan_tile(counts, lane):
        """Exclusive scan of the tile's (row, warp) counts in place, by warp 0."""
        if lane == 0:
            run = 0
            for s in range(SLOTS):
                c = counts[s]
                counts[s] = run
                run += c
else:
    @cuda.jit(device=True)
    def vote(keep, votes, tid):
        return cuda.ballot_sync(FULL, keep)

    @cuda.jit(device=True)
    def add_count(counts, tile, v, lane):
        for d in (1, 2, 4, 8, 16):
            v += cuda.shfl_xor_sync(FULL, v, d)
        if lane == 0:
            cuda.atomic.add(counts, tile, v)

    @cuda.jit(device=True)
    def scan_tile(counts, lane):
        mine = 0
        for s in range(PER_LANE):
            mine += counts[lane * PER_LANE + s]
        run = mine
        for d in (1, 2, 4, 8, 16):
            up = cuda.shfl_up_sync(FULL, run, d)
            if lane >= d:
                run += up
        run -= mine
        for s in range(PER_LANE):
            c = counts[lane * PER_LANE + s]
            counts[lane * PER_LANE + s] = run
            run += c


@cuda.jit(device=True)
def load_flags(flag_of, src, n, first, tid, keep):
    """keep[r] = item (first + r * THREADS + tid) is kept; a whole tile without bounds checks, so
    that its loads are all in flight at once."""
    if first + TILE <= n:
        for r in range(ITEMS):
            keep[r] = 1 if flag_of(src, uint64(first + r * THREADS + tid)) else 0
    else:
        for r in range(ITEMS):
            i = first + r * THREADS + tid
            keep[r] = 1 if i < n and flag_of(src, uint64(i)) else 0


if _SIM:
    @cuda.jit(device=True)
    def block_scan(scan, tid, value):
        """Exclusive scan of `value` over the block's SCAN_THREADS threads (`scan`: SCAN_THREADS
        shared int64): one thread walks them."""
        scan[tid] = value
        cuda.syncthreads()
        if tid == 0:
            run = int64(0)
            for t in range(SCAN_THREADS):
                v = scan[t]
                scan[t] = run
                run += v
        cuda.syncthreads()
        return scan[tid]
else:
    @cuda.jit(device=True)
    def block_scan(scan, tid, value):
        lane, warp = tid % 32, tid // 32
        run = value
        for d in (1, 2, 4, 8, 16):
            up = cuda.shfl_up_sync(FULL, run, d)
            if lane >= d:
                run += up
        if lane == 31:
            scan[warp] = run
        cuda.syncthreads()
        if warp == 0:
            own = scan[lane]
            total = own
            for d in (1, 2, 4, 8, 16):
                up = cuda.shfl_up_sync(FULL, total, d)
                if lane >= d:
                    total += up
            scan[lane] = total - own
        cuda.syncthreads()
        return run - value + scan[warp]


@cuda.jit
def scan_chunks(values, n, offsets, sums, bases, ctl, host):
    """Block b: offsets[i] = values[b*SCAN_THREADS .. i) (exclusive, within its chunk of
    SCAN_THREADS) and sums[b] = its chunk's total; the values read are cleared. The last block to
    finish (a ticket in ctl[3], put back to 0 by it) scans the chunk totals (at most SCAN_THREADS)
    into bases and puts the grand total in ctl[2] (for device readers) and host[0] (mapped host
    memory): one launch for what would take a second one over the chunk totals."""
    tid = cuda.threadIdx.x
    scan = cuda.shared.array(SCAN_THREADS, int64)
    last = cuda.shared.array(1, int32)
    i = cuda.blockIdx.x * SCAN_THREADS + tid
    v = int64(0)
    if i < n:
        v = values[i]
        values[i] = 0  # the next call's count adds into it
    ex = block_scan(scan, tid, v)
    if i < n:
        offsets[i] = ex
    if tid == SCAN_THREADS - 1:
        sums[cuda.blockIdx.x] = ex + v
        cuda.threadfence()
        last[0] = 1 if cuda.atomic.add(ctl, 3, 1) == cuda.gridDim.x - 1 else 0
    cuda.syncthreads()
    if last[0]:  # every block's total is written (each fenced before its ticket)
        chunks = cuda.gridDim.x
        s = cuda.atomic.add(sums, tid, 0) if tid < chunks else int64(0)  # past this SM's cache
        base = block_scan(scan, tid, s)
        if tid < chunks:
            bases[tid] = base
        if tid == SCAN_THREADS - 1:
            ctl[3] = 0
            ctl[2] = base + s
            cuda.threadfence_system()
            host[0] = base + s


@cuda.jit
def copy_kept(src, dst, src8, dst8, ctl, itemsize, room):
    """dst[:m] = src[:m] for the m = min(kept count, room) * itemsize bytes of a selection (the
    count from ctl[2], so no host read comes between), eight bytes a store: a device buffer copied
    into mapped host memory in long runs, where the scatter's own stores would cross the bus four
    bytes at a time."""
    nbytes = min(ctl[2], room) * itemsize
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for w in range(start, nbytes // 8, stride):
        dst[uint64(w)] = src[uint64(w)]
    for b in range(nbytes // 8 * 8 + start, nbytes, stride):
        dst8[uint64(b)] = src8[uint64(b)]


_KERNELS: LRUCache = LRUCache(8 * PREDICATES_KEPT)  # kernels and device functions by (kind, flag, ...): bounded, as
# select_if brings a flag function per predicate


def count_kernel(flag_of: Callable):
    """The kernel adding to counts[tile] (zero before: `scan_chunks` clears what it reads) how many
    items of each tile (one block a tile) are kept: a sum a warp and an atomic add, so no block
    waits for its slowest warp at a barrier."""
    k = _KERNELS.get(("count", flag_of))
    if k is not None:
        return k

    @cuda.jit
    def count(src, n, counts):
        tid = cuda.threadIdx.x
        keep = cuda.local.array(ITEMS, uint8)
        load_flags(flag_of, src, n, cuda.blockIdx.x * TILE, tid, keep)
        mine = int64(0)
        for r in range(ITEMS):
            mine += keep[r]
        add_count(counts, cuda.blockIdx.x, mine, tid % 32)

    return _KERNELS.put(("count", flag_of), count)


@cuda.jit(device=True)
def nonzero_bytes(w):
    """How many of the eight bytes of w are not zero (a byte's high bit after adding 0x7F to its
    low seven bits, or its own)."""
    low = uint64(0x7F7F7F7F7F7F7F7F)
    return cuda.popc((((w & low) + low) | w) & uint64(0x8080808080808080))


@cuda.jit
def count_bytes(flags, octs, n, counts):
    """count_kernel(flag_nonzero) for one-byte flags also seen as `octs` (n // 8 u64 words, same
    memory): a block counts GROUP tiles, all their words in flight at once, eight flags a load;
    tiles that reach past n are counted one flag at a time."""
    tid = cuda.threadIdx.x
    lane = tid % 32
    first = cuda.blockIdx.x * GROUP
    if (first + GROUP) * TILE <= n:
        words = cuda.local.array(GROUP_OCTS, uint64)
        for g in range(GROUP):
            for r in range(OCTS):
                words[g * OCTS + r] = octs[uint64((first + g) * (TILE // 8) + r * THREADS + tid)]
        for g in range(GROUP):
            mine = int64(0)
            for r in range(OCTS):
                mine += nonzero_bytes(words[g * OCTS + r])
            add_count(counts, first + g, mine, lane)
    else:
        for tile in range(first, min(first + GROUP, (n + TILE - 1) // TILE)):
            mine = int64(0)
            for r in range(ITEMS):
                i = tile * TILE + r * THREADS + tid
                if i < n and flags[uint64(i)] != 0:
                    mine += 1
            add_count(counts, tile, mine, lane)


def tile_writer(flag_of: Callable, emit: Callable | None, word=np.uint64):
    """The device function `write_tile(src, n, words, out, first, start, capacity, votes, counts,
    tot, counted)` writing the kept items of the tile at `first` (one block) at `start` + their
    rank in it, and returning how many it kept where `counted` (else 0; `tot`: one shared int64).
    `emit(out, j, words, i)` writes an item; `emit` None: `words` and `out` are 1-D arrays of
    `word`s (an item a word), read with the flags (all of a tile's loads in flight at once).

    The block votes its items' flags warp by warp, scans the (row, warp) counts with warp 0, and
    writes the kept items at start + their row-and-warp's offset + the kept lanes before them (a
    warp's kept items land side by side). Only places below `capacity` are written."""
    key = ("tile", flag_of, emit, np.dtype(word).str)
    f = _KERNELS.get(key)
    if f is not None:
        return f
    carry = emit is None
    put = copy_words if carry else emit  # typed even where `carry` leaves it unused
    word_t = from_dtype(np.dtype(word))

    @cuda.jit(device=True)
    def write_tile(src, n, words, out, first, start, capacity, votes, counts, tot, counted):
        tid = cuda.threadIdx.x
        lane, warp = tid % 32, tid // 32
        keep = cuda.local.array(ITEMS, uint8)
        masks = cuda.local.array(ITEMS, uint32)
        values = cuda.local.array(ITEMS, word_t)
        load_flags(flag_of, src, n, first, tid, keep)
        if carry:
            if first + TILE <= n:
                for r in range(ITEMS):
                    values[r] = words[uint64(first + r * THREADS + tid)]
            else:
                for r in range(ITEMS):
                    if keep[r]:
                        values[r] = words[uint64(first + r * THREADS + tid)]
        for r in range(ITEMS):
            m = vote(keep[r] != 0, votes, tid)
            masks[r] = m
            if lane == 0:
                counts[r * WARPS + warp] = cuda.popc(m)
        cuda.syncthreads()
        if warp == 0:
            scan_tile(counts, lane)
        cuda.syncthreads()
        for r in range(ITEMS):
            m = masks[r]
            if (m >> lane) & 1:
                j = start + counts[r * WARPS + warp] + cuda.popc(m & ((uint32(1) << lane) - uint32(1)))
                if j < capacity:
                    if carry:
                        out[uint64(j)] = values[r]
                    else:
                        put(out, uint64(j), words, uint64(first + r * THREADS + tid))
        if not counted:
            return 0
        if tid == THREADS - 1:  # the last (row, warp) slot's offset and count
            tot[0] = counts[SLOTS - 1] + cuda.popc(masks[ITEMS - 1])
        cuda.syncthreads()
        kept = tot[0]
        cuda.syncthreads()  # before the next tile's vote overwrites counts and tot
        return kept

    return _KERNELS.put(key, write_tile)


def scatter_kernel(flag_of: Callable, emit: Callable | None, word=np.uint64):
    """The kernel writing each kept item i (`flag_of(src, i)`) at its place, one block a tile,
    at offsets[tile] + bases[tile // SCAN_THREADS] (see `scan_chunks` and `tile_writer`);
    compiled once per (flag, emit, word). Only places below `capacity` are written."""
    key = ("scatter", flag_of, emit, np.dtype(word).str)
    k = _KERNELS.get(key)
    if k is not None:
        return k
    write_tile = tile_writer(flag_of, emit, word)

    @cuda.jit
    def scatter(src, n, words, out, offsets, bases, capacity):
        votes = cuda.shared.array(THREADS, uint8)  # used by the simulator's vote only
        counts = cuda.shared.array(SLOTS, int32)  # per (row, warp): kept items, then their offset
        tot = cuda.shared.array(1, int64)
        start = offsets[cuda.blockIdx.x] + bases[cuda.blockIdx.x // SCAN_THREADS]
        write_tile(src, n, words, out, cuda.blockIdx.x * TILE, start, capacity, votes, counts, tot, False)

    return _KERNELS.put(key, scatter)


# ---- one launch: count, grid barrier, offsets, scatter ----------------------------------------

if _SIM:
    @cuda.jit(device=True)
    def block_sum(red, tid, value):
        """The sum of `value` over the block's threads (`red`: THREADS shared int64)."""
        red[tid] = value
        cuda.syncthreads()
        total = int64(0)
        for t in range(THREADS):
            total += red[t]
        cuda.syncthreads()
        return total
else:
    @cuda.jit(device=True)
    def block_sum(red, tid, value):
        v = int64(value)
        for d in (16, 8, 4, 2, 1):
            v += cuda.shfl_xor_sync(FULL, v, d)
        if tid % 32 == 0:
            red[tid // 32] = v
        cuda.syncthreads()
        total = int64(0)
        for w in range(WARPS):
            total += red[w]
        cuda.syncthreads()
        return total


def fused_kernel(flag_of: Callable, emit: Callable | None, word=np.uint64, by_bytes: bool = False):
    """The kernel selecting items 0..n-1 in one launch (of no more blocks than fit on the GPU at
    once): block b takes a run of whole tiles, counts its kept items (eight one-byte flags a load
    from `octs` where `by_bytes`) into sums[b], waits at a grid barrier, sums the runs before its
    own, then writes its tiles in order from there (`tile_writer`). The last block to finish puts
    the kept count (or -2 where a block timed out at the barrier) in host[0], so a host that sees
    it there knows the whole selection is in device memory (an `out` in mapped host memory once
    the launch is done), and in ctl[2] (0 for -2) for a `copy_kept` behind it."""
    key = ("fused", flag_of, emit, np.dtype(word).str, by_bytes)
    k = _KERNELS.get(key)
    if k is not None:
        return k
    write_tile = tile_writer(flag_of, emit, word)

    @cuda.jit
    def fused(src, octs, n, words, out, sums, bar, target, host, ctl):
        tid = cuda.threadIdx.x
        votes = cuda.shared.array(THREADS, uint8)
        counts = cuda.shared.array(SLOTS, int32)
        red = cuda.shared.array(THREADS, int64)
        ok = cuda.shared.array(1, int32)
        tot = cuda.shared.array(1, int64)
        blocks, b = cuda.gridDim.x, cuda.blockIdx.x
        tiles = (n + TILE - 1) // TILE
        per = (tiles + blocks - 1) // blocks
        t0, t1 = min(b * per, tiles), min(b * per + per, tiles)
        keep = cuda.local.array(ITEMS, uint8)
        mine = int64(0)
        for t in range(t0, t1):
            if by_bytes and (t + 1) * TILE <= n:
                for r in range(OCTS):
                    mine += nonzero_bytes(octs[uint64(t * (TILE // 8) + r * THREADS + tid)])
            else:
                load_flags(flag_of, src, n, t * TILE, tid, keep)
                for r in range(ITEMS):
                    mine += keep[r]
        run = block_sum(red, tid, mine)
        if tid == 0:
            sums[b] = run
        if grid_wait(bar, target, tid, ok, barrier.SPINS):
            below = int64(0)
            every = int64(0)
            for i in range(tid, blocks, THREADS):
                v = cuda.atomic.add(sums, i, 0)  # another block's store: read past this SM's cache
                every += v
                if i < b:
                    below += v
            start = block_sum(red, tid, below)
            grand = block_sum(red, tid, every)
            for t in range(t0, t1):
                start += write_tile(src, n, words, out, t * TILE, start, n, votes, counts, tot, True)
        else:
            grand = int64(-2)
        if tid == 0:
            cuda.threadfence()
            if cuda.atomic.add(bar, FINISHED, 1) == target - 1:  # the last block of this launch
                cuda.threadfence()
                kept = grand if cuda.atomic.add(bar, FAILED, 0) == 0 else int64(-2)
                ctl[2] = max(kept, int64(0))  # read by a later kernel on the stream: no fence needed
                host[0] = kept

    return _KERNELS.put(key, fused)


_PREDICATES: LRUCache = LRUCache(PREDICATES_KEPT)


def predicate_flag(predicate: Callable, key=None) -> Callable:
    """The flag function of select_if: predicate(values[i]). debug=False pins NumPy's error model
    (numba-cuda's without debug; NUMBA_CUDA_DEBUGINFO would switch it to Python's), the one the
    CPU twin compiles with: an integer divided by zero is 0 on both. `key`: the predicate's
    `predicate_key` where the caller has it."""
    def build(fn: Callable):
        pred = cuda.jit(device=True, debug=False)(fn)

        @cuda.jit(device=True)
        def flag_predicate(values, i):
            return bool(pred(values[i]))
        return flag_predicate
    return kept_compiled(_PREDICATES, predicate, build, key)
