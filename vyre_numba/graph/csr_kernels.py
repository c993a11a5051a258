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
def check(indptr, indices, n, hub, symmetric, bad):
    """(bad zeroed) bad[0] = vertices whose offsets decrease, bad[1] = indices outside 0..n-1,
    bad[2] = indptr[0] != 0, bad[3] = indptr[n] != len(indices), bad[4] = vertices of more than
    `hub` neighbours; where `symmetric`, bad[5] and bad[6] the sums modulo 2**64 of mix64(u * n + v)
    and of mix64(v * n + u) over the entries u -> v, equal where the entries and the reversed entries
    are one multiset (each thread sums a contiguous run of them). Otherwise the indices, nearly all the bytes, are read four to a thread a
    step, so that enough loads are in flight to run at the memory's bandwidth."""
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
    ahead = uint64(0)
    back = uint64(0)
    if symmetric:
        e, end = _run_of(nnz)
        if e < end:
            u = _vertex_of(indptr, n, e)
            scale = uint64(n)
            while e < end:
                while u < n - 1 and int64(indptr[u + 1]) <= e:
                    u += 1
                w = int64(indices[e])
                out += outside(w, n)
                v = uint64(w)
                ahead += mix64(uint64(u) * scale + v)
                back += mix64(v * scale + uint64(u))
                e += 1
    else:
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
    add_sum(bad, 5, int64(ahead))
    add_sum(bad, 6, int64(back))
    if first == 0:
        bad[2] = 1 if int64(indptr[0]) != 0 else 0
        bad[3] = 1 if int64(indptr[n]) != nnz else 0


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
