"""Connected components: each vertex labelled with the smallest vertex id of its component.

Both implementations hook the larger root of an edge's ends under the smaller and point vertices
at their roots (Shiloach-Vishkin style, as in ECL-CC and Afforest, not label propagation, so a
long path needs no round per vertex). Parents only ever decrease, so each component's root ends
as its smallest id.

- NumPy (`components_numpy`): the CPU backend and the oracle of the GPU one.
- GPU (`afforest`, its steps in `steps.py` run by `vyre_numba.fixpoint`): Afforest's neighbour
  sampling and skipping of the largest tree, with ECL-CC's compare-and-swap hooking and path
  halving; the same steps run under the CUDA simulator in the tests.
"""
from __future__ import annotations

import numpy as np

from ..errors import DispatchError
from .csr import CSR, edges, resolve


def components_numpy(g: CSR) -> tuple[np.ndarray, int]:
    """(labels, rounds) of the connected components of `g` (edges taken as undirected)."""
    parent = np.arange(g.n, dtype=np.int64)
    src, dst = edges(g)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    rounds = 0
    while src.size:
        rounds += 1
        pu, pv = parent[src], parent[dst]
        lo, hi = np.minimum(pu, pv), np.maximum(pu, pv)
        join = lo != hi
        if not join.any():
            break
        np.minimum.at(parent, hi[join], lo[join])
        while True:  # pointer jumping until every vertex points at a root
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
        src, dst = src[join], dst[join]  # edges already inside one tree stay so
    return parent, rounds


def _device_csr_ok(backend, indptr, indices, n: int) -> int:
    """Check a CSR already on the device (ends, monotone offsets, indices in range) without
    copying it back: one small vyre program counts the violations, and finds the largest degree,
    which it returns."""
    from .. import ir
    from ..config import DispatchConfig

    key = (np.dtype(indptr.__cuda_array_interface__["typestr"]).str,
           np.dtype(indices.__cuda_array_interface__["typestr"]).str)
    prog = _CHECKS.get(key)
    if prog is None:
        ip_t, ix_t = (ir.DataType.parse(np.dtype(t)) for t in key)
        i = ir.var("i")
        lo = ir.cast(ir.load("indptr", i), "i64")
        hi = ir.cast(ir.load("indptr", i + 1), "i64")
        v = ir.cast(ir.load("indices", i), "i64")
        nv = ir.cast(ir.buf_len("indptr"), "i64") - 1
        nnz = ir.cast(ir.buf_len("indices"), "i64")
        prog = ir.Program([ir.BufferDecl.read("indptr", 0, ip_t), ir.BufferDecl.read("indices", 1, ix_t),
                           ir.BufferDecl.read_write("bad", 2, "u32", 5)], 256, [
            ir.let("i", ir.gid(0)),
            ir.if_((i + 1 < ir.buf_len("indptr")) & (hi < lo), [ir.let("_a", ir.atomic_add("bad", 0, 1))]),
            ir.if_((i + 1 < ir.buf_len("indptr")) & (hi > lo),
                   [ir.let("_d", ir.atomic("max", "bad", 4, ir.cast(ir.min_(hi - lo, 0xFFFFFFFF), "u32")))]),
            ir.if_((i < ir.buf_len("indices")) & ((v < 0) | (v >= nv)), [ir.let("_b", ir.atomic_add("bad", 1, 1))]),
            ir.if_(i == 0, [ir.store("bad", 2, ir.cast(lo != 0, "u32")),
                            ir.store("bad", 3, ir.cast(ir.cast(ir.load("indptr", ir.buf_len("indptr") - 1), "i64") != nnz,
                                                       "u32"))]),
        ], name="csr_check")
        _CHECKS[key] = prog
    bad = backend.empty(5, np.uint32)
    total = max(int(np.prod(indptr.__cuda_array_interface__["shape"])), int(np.prod(indices.__cuda_array_interface__["shape"])))
    backend.dispatch_resident(prog, [indptr, indices, bad], DispatchConfig(grid=(max(1, -(-total // 256)), 1, 1)))
    counts = backend.download(bad)  # the one synchronisation of a valid CSR
    nnz = int(np.prod(indices.__cuda_array_interface__["shape"]))
    if counts[2] or counts[3]:
        first, last = (int(x) for x in backend.download(indptr, 0, 1).tolist() + backend.download(indptr, n, 1).tolist())
        raise DispatchError(f"indptr runs from {first} to {last}, but must run from 0 to len(indices) = {nnz}. "
                            "Fix: pass the indptr that belongs to these indices.")
    if counts[0]:
        raise DispatchError(f"indptr decreases at {int(counts[0])} vertices; offsets must never decrease. "
                            "Fix: build the CSR with scipy.sparse.csr_matrix(...).indptr.")
    if counts[1]:
        raise DispatchError(f"{int(counts[1])} indices are not vertices of this {n}-vertex graph. "
                            "Fix: every index must satisfy 0 <= v < len(indptr) - 1.")
    return int(counts[4])


_CHECKS: dict = {}


def connected_components(indptr, indices, *, backend=None, symmetric: bool = False):
    """Component labels (int32) of the graph `(indptr, indices)` in CSR form, edges taken as
    undirected: label[v] is the smallest vertex id in v's component. Host arrays give a NumPy
    result (computed on the GPU when `backend` is "cuda", or is None and a GPU is usable); device
    arrays (numba, CuPy, PyTorch) give a device array and run on the GPU. `symmetric=True`
    promises every edge is stored both ways (as scipy's undirected graphs are), so the GPU can skip
    the largest component's edges, seen from their other ends; it is not checked, and a CSR that
    is not symmetric then gets wrong labels."""
    be, g, n, on_device = resolve(indptr, indices, backend, symmetric)
    if on_device:
        _device_csr_ok(be, indptr, indices, n)
        return _components_gpu(be, indptr, indices, n, symmetric)
    if be.name != "cuda":
        labels, _ = components_numpy(g)
        return labels.astype(np.int32)
    narrow = g.nnz < 2**31 and g.n < 2**31
    ip = be.upload(g.indptr)
    ix = be.upload(g.indices.astype(np.int32) if narrow else g.indices)
    return be.download(_components_gpu(be, ip, ix, g.n, symmetric))


SAMPLED_NEIGHBOURS = 2  # Afforest's neighbour rounds before the largest tree is found
SAMPLES = 1024  # vertices whose roots name the largest tree


def _components_gpu(be, indptr, indices, n: int, symmetric: bool):
    from .. import fixpoint

    def run(step, count, args):
        fixpoint.for_each(step, count, args, backend=be)

    return afforest(run, be.empty, be.download, indptr, indices, n, symmetric)


def afforest(run, empty, download, indptr, indices, n: int, symmetric: bool):
    """Parents (int32 device array) of the components of a CSR on the device, in the style of
    Afforest: link every vertex with its first SAMPLED_NEIGHBOURS stored neighbours, find the
    largest tree from SAMPLES vertices' roots, then link the remaining neighbours of every vertex
    outside it (of every vertex unless the CSR is symmetric), and point each vertex at its root.
    `run(step, count, args)` runs a step of `steps.py` once over items 0..count-1."""
    from . import steps

    parent = empty(n, np.int32)
    if n == 0:
        return parent
    run(steps.init, n, [parent])
    for r in range(SAMPLED_NEIGHBOURS):
        run(steps.sample, n, [parent, indptr, indices, np.int32(r)])
        run(steps.compress, n, [parent])
    giant = -1
    if symmetric:
        m = min(SAMPLES, n)
        roots = empty(m, np.int32)
        run(steps.gather, m, [parent, roots, np.int64(n // m)])
        values, counts = np.unique(download(roots), return_counts=True)
        giant = int(values[counts.argmax()])
    run(steps.rest, n, [parent, indptr, indices, np.int32(SAMPLED_NEIGHBOURS), np.int32(giant)])
    run(steps.compress, n, [parent])
    return parent
