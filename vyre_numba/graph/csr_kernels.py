"""The Numba kernel that checks a CSR graph already on the device (imported when a GPU or the CUDA
simulator runs it; see `csr.check_device_csr`)."""
from __future__ import annotations

import functools

from numba import cuda, int64, uint64

from ..egraph.kernels import mix64
from .bfs_kernels import add_sum


@cuda.jit(device=True)
def outside(v, n):
    return 1 if v < 0 or v >= n else 0


_AT, _ROW = uint64(0x9E3779B97F4A7C15), uint64(0xC2B2AE3D27D4EB4F)  # position keys of the fingerprint


@cuda.jit
def check(indptr, indices, n, hub, fingerprint, secret, bad):
    """(bad zeroed) bad[0] = vertices whose offsets decrease, bad[1] = indices outside 0..n-1,
    bad[2] = indptr[0] != 0, bad[3] = indptr[n] != len(indices), bad[4] = vertices of more than
    `hub` neighbours; where `fingerprint`, bad[5] = a sum of every offset and index mixed with its
    position and `secret` (modulo 2**64), which tells one CSR from another. The indices, nearly all
    the bytes, are read four to a thread a step, so that enough loads are in flight to run at the
    memory's bandwidth."""
    first = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    nnz = int64(indices.shape[0])
    down = int64(0)
    hubs = int64(0)
    fp = uint64(0)
    s = uint64(secret)
    i = first
    while i < n:
        lo, hi = int64(indptr[i]), int64(indptr[i + 1])
        down += 1 if hi < lo else 0  # compared, not subtracted: the difference can wrap around
        d = hi - lo
        hubs += 1 if d > hub else 0
        if fingerprint:
            fp += mix64((uint64(i) * _ROW + uint64(hi)) ^ s)
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
            fp += mix64((uint64(i) * _AT + uint64(a)) ^ s) + mix64((uint64(i + stride) * _AT + uint64(b)) ^ s) + \
                mix64((uint64(i + 2 * stride) * _AT + uint64(c)) ^ s) + \
                mix64((uint64(i + 3 * stride) * _AT + uint64(e)) ^ s)
        i += 4 * stride
    while i < nnz:
        a = int64(indices[i])
        out += outside(a, n)
        if fingerprint:
            fp += mix64((uint64(i) * _AT + uint64(a)) ^ s)
        i += stride
    add_sum(bad, 0, down)
    add_sum(bad, 1, out)
    add_sum(bad, 4, hubs)
    add_sum(bad, 5, int64(fp))
    if first == 0:
        bad[2] = 1 if int64(indptr[0]) != 0 else 0
        bad[3] = 1 if int64(indptr[n]) != nnz else 0


SUMS_THREADS, SUMS_RUN = 256, 8  # edge_sums' block and entries a thread a tile: `csr` launches blocks of SUMS_THREADS


@functools.lru_cache(maxsize=None)
def edge_sums(threads: int = SUMS_THREADS, per_thread: int = SUMS_RUN):
    """The kernel, for blocks of exactly `threads` (a multiple of 32 on a GPU: its sums are warp
    sums), that sets (sums zeroed; a valid CSR) sums[0] += mix64((u * n + v) ^ secret) and sums[1] +=
    mix64((v * n + u) ^ secret) over the entries u -> v, modulo 2**64: equal where the entries and the
    reversed entries are one multiset (`csr.edge_sums_host` is its twin).
    A block takes tiles of threads * per_thread entries, read coalesced; their vertices' offsets,
    where they fit in shared memory, find each entry's vertex there by bisection, else in indptr."""
    from numba import config

    if threads % 32 and not config.ENABLE_CUDASIM:
        raise ValueError(f"edge_sums needs whole warps, not {threads} threads")
    tile = threads * per_thread
    rows = tile + 1  # offsets a tile's vertices need when each has at least one entry

    @cuda.jit
    def sums_of(indptr, indices, n, secret, sums):
        offsets = cuda.shared.array(rows, int64)
        ends = cuda.shared.array(2, int64)
        nnz = int64(indices.shape[0])
        t = int64(cuda.threadIdx.x)
        scale = uint64(n)
        s = uint64(secret)
        ahead = uint64(0)
        back = uint64(0)
        first = int64(cuda.blockIdx.x) * tile
        while first < nnz:
            end = min(first + tile, nnz)
            if t == 0:
                ends[0] = _vertex_of(indptr, 0, n, first)
            if t == 1 or threads == 1:
                ends[1] = _vertex_of(indptr, 0, n, end - 1)
            cuda.syncthreads()
            u0 = ends[0]
            count = ends[1] - u0 + 2  # offsets of u0 .. ends[1] + 1
            if count <= rows:
                k = t
                while k < count:
                    offsets[k] = int64(indptr[u0 + k])
                    k += threads
            cuda.syncthreads()
            lo = int64(0)  # offsets[lo] <= e, and e only grows
            e = first + t
            while e < end:
                if count <= rows:
                    hi = count - 1  # offsets[hi] > the tile's last entry
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        if offsets[mid] <= e:
                            lo = mid
                        else:
                            hi = mid
                    u = u0 + lo
                else:
                    u = _vertex_of(indptr, u0, ends[1] + 1, e)
                v = uint64(int64(indices[e]))
                ahead += mix64((uint64(u) * scale + v) ^ s)
                back += mix64((v * scale + uint64(u)) ^ s)
                e += threads
            cuda.syncthreads()  # every thread is done with this tile's offsets
            first += int64(cuda.gridDim.x) * tile
        add_sum(sums, 0, int64(ahead))
        add_sum(sums, 1, int64(back))

    return sums_of


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


@cuda.jit
def copy_into(dst, src):
    """dst[i] = src[i] read as int64 (as `check` reads it) for every i, src of any stride and
    integer type; where dst is 32-bit, -1 for a value it cannot hold: a CSR's indices copied into
    int32 before the copy is checked stay out of range, never wrapped onto a vertex id."""
    i = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    n = int64(dst.shape[0])
    wide = dst.itemsize >= 8
    while i < n:
        v = int64(src[i])
        if wide or (v >= -0x80000000 and v <= 0x7FFFFFFF):
            dst[i] = v
        else:
            dst[i] = -1
        i += stride
