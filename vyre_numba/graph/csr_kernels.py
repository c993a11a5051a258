"""The Numba kernel that checks a CSR graph already on the device (imported when a GPU or the CUDA
simulator runs it; see `csr.check_device_csr`)."""
from __future__ import annotations

import functools

from numba import cuda, int32, int64, uint64

from ..egraph.kernels import mix64
from .bfs_kernels import add_sum


@cuda.jit(device=True)
def outside(v, n):
    return 1 if v < 0 or v >= n else 0


_AT, _ROW = uint64(0x9E3779B97F4A7C15), uint64(0xC2B2AE3D27D4EB4F)  # position keys of the fingerprint


@cuda.jit
def check(indptr, indices, n, hub, fingerprint, bad):
    """(bad zeroed) bad[0] = vertices whose offsets decrease, bad[1] = indices outside 0..n-1,
    bad[2] = indptr[0] != 0, bad[3] = indptr[n] != len(indices), bad[4] = vertices of more than
    `hub` neighbours; where `fingerprint`, bad[5] = a sum of every offset and index mixed with its
    position (modulo 2**64), which tells one CSR from another. The indices, nearly all the bytes,
    are read four to a thread a step, so that enough loads are in flight to run at the memory's
    bandwidth."""
    first = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    nnz = int64(indices.shape[0])
    down = int64(0)
    hubs = int64(0)
    fp = uint64(0)
    i = first
    while i < n:
        lo, hi = int64(indptr[i]), int64(indptr[i + 1])
        down += 1 if hi < lo else 0  # compared, not subtracted: the difference can wrap around
        d = hi - lo
        hubs += 1 if d > hub else 0
        if fingerprint:
            fp += mix64(uint64(i) * _ROW + uint64(hi))
        i += stride
    out = int64(0)
    i = first
    while i + 3 * stride < nnz:
        a = int64(indices[i])
        b = int64(indices[i + stride])
        c = int64(indices[i + 2 * stride])
        e = int64(indices[i + 3 * stride])
        out += outside(a, n) + outside(b, n) + outside(c, n) + outside(e, n)
        if fingerprint:
            fp += mix64(uint64(i) * _AT + uint64(a)) + mix64(uint64(i + stride) * _AT + uint64(b)) + \
                mix64(uint64(i + 2 * stride) * _AT + uint64(c)) + mix64(uint64(i + 3 * stride) * _AT + uint64(e))
        i += 4 * stride
    while i < nnz:
        a = int64(indices[i])
        out += outside(a, n)
        if fingerprint:
            fp += mix64(uint64(i) * _AT + uint64(a))
        i += stride
    add_sum(bad, 0, down)
    add_sum(bad, 1, out)
    add_sum(bad, 4, hubs)
    add_sum(bad, 5, int64(fp))
    if first == 0:
        bad[2] = 1 if int64(indptr[0]) != 0 else 0
        bad[3] = 1 if int64(indptr[n]) != nnz else 0


SUMS_THREADS, SUMS_RUN = 256, 8  # edge_sums' block and run: `csr` launches blocks of SUMS_THREADS


@functools.lru_cache(maxsize=None)
def edge_sums(threads: int = SUMS_THREADS, per_thread: int = SUMS_RUN):
    """The kernel, for blocks of exactly `threads` (a multiple of 32 on a GPU: its sums are warp
    sums), that sets (sums zeroed; a valid CSR) sums[0] += mix64(u * n + v) and sums[1] +=
    mix64(v * n + u) over the entries u -> v, modulo 2**64: equal where the entries and the
    reversed entries are one multiset (`csr.edge_sums_host` is its twin). A block takes a
    contiguous share of tiles of threads * per_thread entries, each read coalesced into shared
    memory, where each thread sums a run of per_thread; with the tile's vertices' offsets there too
    (where they fit), a run's first vertex is a bisection and the next ones a step each. A tile's
    first and last vertices are searched from the last tile's, by galloping."""
    from numba import config

    if threads % 32 and not config.ENABLE_CUDASIM:
        raise ValueError(f"edge_sums needs whole warps, not {threads} threads")
    tile = threads * per_thread
    rows = tile + 1  # offsets a tile's vertices need when each has at least one entry
    width = per_thread + 1  # a run's room: padded, so the runs start in different banks
    room = threads * width

    @cuda.jit
    def sums_of(indptr, indices, n, sums):
        offsets = cuda.shared.array(rows, int64)
        targets = cuda.shared.array(room, int32)
        ends = cuda.shared.array(2, int64)
        nnz = int64(indices.shape[0])
        t = int64(cuda.threadIdx.x)
        scale = uint64(n)
        ahead = uint64(0)
        back = uint64(0)
        tiles = (nnz + tile - 1) // tile
        share = (tiles + int64(cuda.gridDim.x) - 1) // int64(cuda.gridDim.x)
        first = int64(cuda.blockIdx.x) * share * tile
        last = min(first + share * tile, nnz)
        near = int64(0)  # a vertex at or before the tile's first entry's: the last tile's last
        while first < last:
            end = min(first + tile, nnz)
            if t == 0:
                ends[0] = _vertex_from(indptr, near, n, first)
            if t == 1 or threads == 1:
                ends[1] = _vertex_from(indptr, near, n, end - 1)
            k = t
            while k < end - first:
                targets[k + k // per_thread] = int32(indices[first + k])  # vertex ids: below n < 2**31
                k += threads
            cuda.syncthreads()
            u0 = ends[0]
            count = ends[1] - u0 + 2  # offsets of u0 .. ends[1] + 1
            if count <= rows:
                k = t
                while k < count:
                    offsets[k] = int64(indptr[u0 + k])
                    k += threads
            cuda.syncthreads()
            e = first + t * per_thread
            stop = min(e + per_thread, end)
            at = t * width
            if e < stop:
                if count <= rows:
                    lo = int64(0)  # offsets[lo] <= e < offsets[hi]: the last offset is past the tile
                    hi = count - 1
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        if offsets[mid] <= e:
                            lo = mid
                        else:
                            hi = mid
                else:
                    lo = _vertex_of(indptr, u0, ends[1] + 1, e) - u0
                while e < stop:
                    if count <= rows:
                        while offsets[lo + 1] <= e:
                            lo += 1
                    else:
                        lo = _vertex_of(indptr, u0 + lo, ends[1] + 1, e) - u0
                    u = uint64(u0 + lo)
                    v = uint64(targets[at])
                    ahead += mix64(u * scale + v)
                    back += mix64(v * scale + u)
                    e += 1
                    at += 1
            near = ends[1]
            cuda.syncthreads()  # every thread is done with this tile's offsets, entries and ends
            first = end
        add_sum(sums, 0, int64(ahead))
        add_sum(sums, 1, int64(back))

    return sums_of


@cuda.jit(device=True)
def _vertex_from(indptr, lo, n, e):
    """The last vertex u in lo..n-1 with indptr[u] <= e (where indptr[lo] <= e), by steps doubling
    from lo, then bisection: about 2 log2(u - lo) reads."""
    step = int64(1)
    hi = lo + 1
    while hi < n and int64(indptr[hi]) <= e:
        lo = hi
        step *= 2
        hi = lo + step
    return _vertex_of(indptr, lo, min(hi, n), e)


@cuda.jit(device=True)
def _vertex_of(indptr, lo, hi, e):
    """The last vertex u in lo..hi-1 with indptr[u] <= e (where indptr[lo] <= e: the vertex whose
    entries hold e), by bisection; in bounds whatever indptr holds."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if int64(indptr[mid]) <= e:
            lo = mid
        else:
            hi = mid
    return lo
