"""The Numba kernel that checks a CSR graph already on the device (imported when a GPU or the CUDA
simulator runs it; see `csr.check_device_csr`)."""
from __future__ import annotations

from numba import cuda, int64, uint64

from ..egraph.kernels import mix64
from .bfs_kernels import add_sum


@cuda.jit(device=True)
def outside(v, n):
    return 1 if v < 0 or v >= n else 0


@cuda.jit
def check(indptr, indices, n, hub, bad):
    """(bad zeroed) bad[0] = vertices whose offsets decrease, bad[1] = indices outside 0..n-1,
    bad[2] = indptr[0] != 0, bad[3] = indptr[n] != len(indices), bad[4] = vertices of more than
    `hub` neighbours. The indices, nearly all the bytes, are read four to a thread a step, so
    that enough loads are in flight to run at the memory's bandwidth."""
    first = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    nnz = int64(indices.shape[0])
    down = int64(0)
    hubs = int64(0)
    i = first
    while i < n:
        lo, hi = int64(indptr[i]), int64(indptr[i + 1])
        down += 1 if hi < lo else 0  # compared, not subtracted: the difference can wrap around
        d = hi - lo
        hubs += 1 if d > hub else 0
        i += stride
    out = int64(0)
    i = first
    while i + 3 * stride < nnz:
        a = int64(indices[i])
        b = int64(indices[i + stride])
        c = int64(indices[i + 2 * stride])
        e = int64(indices[i + 3 * stride])
        out += outside(a, n) + outside(b, n) + outside(c, n) + outside(e, n)
        i += 4 * stride
    while i < nnz:
        out += outside(int64(indices[i]), n)
        i += stride
    add_sum(bad, 0, down)
    add_sum(bad, 1, out)
    add_sum(bad, 4, hubs)
    if first == 0:
        bad[2] = 1 if int64(indptr[0]) != 0 else 0
        bad[3] = 1 if int64(indptr[n]) != nnz else 0


@cuda.jit
def edge_sums(indptr, indices, n, sums):
    """(sums zeroed; a valid CSR) sums[0] += mix64(u * n + v) and sums[1] += mix64(v * n + u) for
    every entry u -> v, modulo 2**64: equal where the entries and the reversed entries are the same
    multiset. Each thread sums a contiguous run of entries, finding its first entry's vertex by
    bisection and the rest by walking on, so a hub's entries are spread over many threads."""
    nnz = int64(indices.shape[0])
    threads = int64(cuda.gridsize(1))
    chunk = (nnz + threads - 1) // threads
    e = int64(cuda.grid(1)) * chunk
    end = min(e + chunk, nnz)
    ahead = uint64(0)
    back = uint64(0)
    if e < end:
        lo = int64(0)
        hi = int64(n)  # indptr[lo] <= e < indptr[hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if int64(indptr[mid]) <= e:
                lo = mid
            else:
                hi = mid
        u = lo
        scale = uint64(n)
        while e < end:
            while u < n - 1 and int64(indptr[u + 1]) <= e:
                u += 1
            v = uint64(int64(indices[e]))
            ahead += mix64(uint64(u) * scale + v)
            back += mix64(v * scale + uint64(u))
            e += 1
    add_sum(sums, 0, int64(ahead))
    add_sum(sums, 1, int64(back))
