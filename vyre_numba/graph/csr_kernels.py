"""The Numba kernel that checks a CSR graph already on the device (imported when a GPU or the CUDA
simulator runs it; see `csr.check_device_csr`)."""
from __future__ import annotations

from numba import cuda, int64, uint64

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


@cuda.jit
def edge_sums(indptr, indices, n, sums):
    """(sums zeroed; a valid CSR) sums[0] += mix64(u * n + v) and sums[1] += mix64(v * n + u) over
    the entries u -> v, modulo 2**64: equal where the entries and the reversed entries are one
    multiset. Each thread sums a contiguous run of them, so a hub's are spread over many threads
    (a walk costing several times the check's pass: `csr._check_device_symmetric` runs it once a graph)."""
    nnz = int64(indices.shape[0])
    e, end = _run_of(nnz)
    ahead = uint64(0)
    back = uint64(0)
    if e < end:
        u = _vertex_of(indptr, n, e)
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


@cuda.jit(device=True)
def _run_of(nnz):
    """(first, end) of the contiguous run of entries this thread sums: a hub's entries are spread
    over many threads."""
    threads = int64(cuda.gridsize(1))
    chunk = (nnz + threads - 1) // threads
    e = int64(cuda.grid(1)) * chunk
    return e, min(e + chunk, nnz)


@cuda.jit(device=True)
def _vertex_of(indptr, n, e):
    """The vertex u with indptr[u] <= e < indptr[u + 1], by bisection (in bounds whatever indptr holds)."""
    lo = int64(0)
    hi = int64(n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if int64(indptr[mid]) <= e:
            lo = mid
        else:
            hi = mid
    return lo
