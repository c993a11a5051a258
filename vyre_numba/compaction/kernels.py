"""The Numba kernel of compaction (see `select.py` for the design). Imported only when a GPU or
the CUDA simulator runs it: importing numba.cuda is slow, and the simulator swaps this module's
`cuda` for its own.

The warp-level pieces (vote, tile scan, look-back) come in two forms: warp intrinsics on the
GPU, and under the CUDA simulator, which has none, the same results from shared memory and one
thread (the simulator runs blocks one after another, so its look-back never waits)."""
from __future__ import annotations

import os
from typing import Callable

from numba import cuda, int32, int64, uint8, uint32, uint64

from .select import AGGREGATE, EPOCH_SHIFT, FLAG_SHIFT, ITEMS, PREFIX, THREADS, TILE, VALUE_MASK

WARPS = THREADS // 32
SLOTS = ITEMS * WARPS  # (item row, warp) counts of a tile
PER_LANE = SLOTS // 32  # of them a lane of warp 0 scans
FULL = 0xFFFFFFFF
_SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


@cuda.jit(device=True)
def flag_nonzero(flags, i):
    return flags[i] != 0


@cuda.jit(device=True)
def copy_words(out, j, words, i):  # records: several words an item
    for w in range(words.shape[1]):
        out[j, w] = words[i, w]


@cuda.jit(device=True)
def write_index(out, j, words, i):
    out[j, 0] = i


@cuda.jit(device=True)
def gave_up(ctl, host, waited, limit):
    """True (and the error recorded for the host and the other blocks) once a wait passed its bound
    or another block gave up."""
    if waited > limit:
        cuda.atomic.exch(ctl, 1, int64(1))
        host[1] = 1
        return True
    return cuda.atomic.or_(ctl, 1, int64(0)) != 0


if _SIM:
    @cuda.jit(device=True)
    def read_status(status, j):
        return cuda.atomic.or_(status, j, int64(0))

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
    def block_sum(v, tid, part):
        """The sum of v over the block (every thread calls; `part` holds THREADS int64)."""
        part[tid] = v
        cuda.syncthreads()
        total = int64(0)
        for t in range(THREADS):
            total += part[t]
        cuda.syncthreads()
        return total

    @cuda.jit(device=True)
    def scan_tile(counts, lane):
        """Exclusive scan of the tile's (row, warp) counts in place; the tile's total (lane 0)."""
        run = 0
        if lane == 0:
            for s in range(SLOTS):
                c = counts[s]
                counts[s] = run
                run += c
        return run

    @cuda.jit(device=True)
    def look_back(status, ctl, host, tile, epoch, limit, lane):
        """The kept count of the tiles before `tile` (lane 0; -1 if the wait gave up)."""
        total = int64(0)
        if lane != 0:
            return total
        j, waited = tile - 1, 0
        while j >= 0:
            s = read_status(status, j)
            if s >> EPOCH_SHIFT != epoch:
                waited += 1
                if gave_up(ctl, host, waited, limit):
                    return int64(-1)
                continue
            total += s & VALUE_MASK
            if (s >> FLAG_SHIFT) & 3 == 2:
                break
            j -= 1
        return total
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def read_status(typingctx, status, j):
        """status[j] by `ld.relaxed.gpu`: from L2, never a stale L1 line, and (a volatile asm with a
        memory clobber) never hoisted out of a wait. An atomic read would do, but hundreds of
        waiting warps polling by read-modify-write queue up in L2's atomic units."""
        def codegen(context, builder, sig, args):
            array = context.make_array(sig.args[0])(context, builder, value=args[0])
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], array, [index], wraparound=False)
            load = ir.InlineAsm(ir.FunctionType(ir.IntType(64), [ptr.type]), "ld.relaxed.gpu.global.b64 $0, [$1];",
                                "=l,l,~{memory}", side_effect=True)
            return builder.call(load, [ptr])
        return types.int64(status, j), codegen

    @cuda.jit(device=True)
    def vote(keep, votes, tid):
        return cuda.ballot_sync(FULL, keep)

    @cuda.jit(device=True)
    def warp_sum(v):
        for d in (1, 2, 4, 8, 16):
            v += cuda.shfl_xor_sync(FULL, v, d)
        return v

    @cuda.jit(device=True)
    def block_sum(v, tid, part):
        v = warp_sum(v)
        if tid % 32 == 0:
            part[tid // 32] = v
        cuda.syncthreads()
        total = int64(0)
        for w in range(WARPS):
            total += part[w]
        return total

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
        total = cuda.shfl_sync(FULL, run, 31)
        run -= mine
        for s in range(PER_LANE):
            c = counts[lane * PER_LANE + s]
            counts[lane * PER_LANE + s] = run
            run += c
        return total

    @cuda.jit(device=True)
    def look_back(status, ctl, host, tile, epoch, limit, lane):
        """Warp 0 reads the 32 tiles before a window at once: once all have published, the nearest
        with a prefix ends the walk (its prefix plus the aggregates after it), else all 32
        aggregates count and the window moves back."""
        total = int64(0)
        top, waited = tile - 1, 0
        while True:
            j = top - lane
            s = read_status(status, j) if j >= 0 else (int64(epoch) << EPOCH_SHIFT) | PREFIX
            if not cuda.all_sync(FULL, s >> EPOCH_SHIFT == epoch):
                waited += 1
                if gave_up(ctl, host, waited, limit):
                    return int64(-1)
                cuda.nanosleep(uint32(64))
                continue
            prefixes = cuda.ballot_sync(FULL, (s >> FLAG_SHIFT) & 3 == 2)
            if prefixes != 0:
                nearest = cuda.popc((prefixes & -prefixes) - 1)
                total += warp_sum(s & VALUE_MASK if lane <= nearest else int64(0))
                return total
            total += warp_sum(s & VALUE_MASK)
            top -= 32


@cuda.jit(device=True)
def load_flags(flag_of, src, n, first, tid, keep):
    """keep[r] = item (first + r * THREADS + tid) is kept; a whole tile without bounds checks, so
    that its loads are all in flight at once."""
    if first + TILE <= n:
        for r in range(ITEMS):
            keep[r] = 1 if flag_of(src, first + r * THREADS + tid) else 0
    else:
        for r in range(ITEMS):
            i = first + r * THREADS + tid
            keep[r] = 1 if i < n and flag_of(src, i) else 0


_KERNELS: dict = {}


def count_kernel(flag_of: Callable):
    """The kernel counting the items where `flag_of(src, i)`: each block counts tiles blockIdx,
    blockIdx + gridDim, ... and adds its count to ctl[3]; the last block to finish writes the
    total to host[0] and clears ctl[3] and ctl[4] (so the next call starts from zero). Few blocks,
    so few atomics on those two words (one a tile queued in L2 for as long as a pass takes)."""
    k = _KERNELS.get(("count", flag_of))
    if k is not None:
        return k

    @cuda.jit
    def count(src, n, ctl, host):
        tid = cuda.threadIdx.x
        part = cuda.shared.array(THREADS, int64)
        keep = cuda.local.array(ITEMS, uint8)
        mine = int64(0)
        for tile in range(cuda.blockIdx.x, (n + TILE - 1) // TILE, cuda.gridDim.x):
            load_flags(flag_of, src, n, tile * TILE, tid, keep)
            for r in range(ITEMS):
                mine += keep[r]
        total = block_sum(mine, tid, part)
        if tid == 0:
            cuda.atomic.add(ctl, 3, total)
            cuda.threadfence()
            if cuda.atomic.add(ctl, 4, int64(1)) == cuda.gridDim.x - 1:
                host[0] = cuda.atomic.exch(ctl, 3, int64(0))
                cuda.atomic.exch(ctl, 4, int64(0))

    _KERNELS[("count", flag_of)] = count
    return count


def select_kernel(flag_of: Callable, emit: Callable):
    """The single-pass kernel keeping item i where `flag_of(src, i)` and writing it with
    `emit(out, j, words, i)`, compiled once per pair (`emit` None: `words` has one column, read
    with the flags and copied to `out`).

    A block takes the next tile by ticket (so every tile before it has started: the look-back
    always ends), votes its items' flags warp by warp, scans the (row, warp) counts, publishes the
    tile's total, looks back for the count before it, publishes its inclusive count, then writes
    its kept items at their places (a warp's kept items land side by side). Only the first
    `capacity` places are written; the last tile writes the total to ctl[2] and host[0]."""
    key = ("select", flag_of, emit)
    k = _KERNELS.get(key)
    if k is not None:
        return k
    carry = emit is None
    put = copy_words if carry else emit  # typed even where `carry` leaves it unused

    @cuda.jit
    def select(src, n, words, out, capacity, status, ctl, host, base, epoch, limit):
        tid = cuda.threadIdx.x
        lane, warp = tid % 32, tid // 32
        votes = cuda.shared.array(THREADS, uint8)  # used by the simulator's vote only
        counts = cuda.shared.array(SLOTS, int32)  # per (row, warp): kept items, then their offset
        tile_of = cuda.shared.array(2, int64)  # the tile, the kept count before it
        if tid == 0:
            tile_of[0] = cuda.atomic.add(ctl, 0, int64(1)) - base
        cuda.syncthreads()
        tile = tile_of[0]
        first = tile * TILE
        keep = cuda.local.array(ITEMS, uint8)
        masks = cuda.local.array(ITEMS, uint32)
        values = cuda.local.array(ITEMS, uint64)
        load_flags(flag_of, src, n, first, tid, keep)
        if carry:
            if first + TILE <= n:
                for r in range(ITEMS):
                    values[r] = words[first + r * THREADS + tid, 0]
            else:
                for r in range(ITEMS):
                    if keep[r]:
                        values[r] = words[first + r * THREADS + tid, 0]
        for r in range(ITEMS):
            m = vote(keep[r] != 0, votes, tid)
            masks[r] = m
            if lane == 0:
                counts[r * WARPS + warp] = cuda.popc(m)
        cuda.syncthreads()
        if warp == 0:
            kept = scan_tile(counts, lane)
            stamp = int64(epoch) << EPOCH_SHIFT
            if lane == 0:
                cuda.atomic.exch(status, tile, stamp | (PREFIX if tile == 0 else AGGREGATE) | kept)
            before = look_back(status, ctl, host, tile, epoch, limit, lane) if tile > 0 else int64(0)
            if lane == 0:
                tile_of[1] = before
                if tile > 0 and before >= 0:
                    cuda.atomic.exch(status, tile, stamp | PREFIX | (before + kept))
                if first + TILE >= n and before >= 0:
                    ctl[2] = before + kept
                    host[0] = before + kept
        cuda.syncthreads()
        start = tile_of[1]
        if start < 0:
            return
        for r in range(ITEMS):
            m = masks[r]
            if (m >> lane) & 1:
                j = start + counts[r * WARPS + warp] + cuda.popc(m & ((uint32(1) << lane) - uint32(1)))
                if j < capacity:
                    if carry:
                        out[j, 0] = values[r]
                    else:
                        put(out, j, words, first + r * THREADS + tid)

    _KERNELS[key] = select
    return select


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
