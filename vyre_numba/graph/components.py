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

from typing import Any

import numpy as np

from ..errors import host_memory
from .csr import CSR, check_device_csr, checked_graph, edges, graph_arguments, is_graph, resolve

from ..backend import ArrayIn, ArrayOut, Backend  # noqa: F401  (the annotations name them: typing.get_type_hints reads them)


@host_memory("components_numpy")
def components_numpy(g: CSR) -> tuple[np.ndarray, int]:
    """(labels, rounds) of the connected components of `g` (edges taken as undirected): each
    vertex's label is the smallest vertex of its component, int32 as `connected_components` gives."""
    g = checked_graph(g, "components_numpy")
    return components_of_edges(g.n, *edges(g), dtype=np.int32)


def components_of_edges(n: int, src: np.ndarray, dst: np.ndarray, dtype=np.int64) -> tuple[np.ndarray, int]:
    """(labels of `dtype`, rounds) of the components of n vertices joined by the edges (src[i],
    dst[i])."""
    it = np.int32 if n < 2**31 else np.int64  # half the memory traffic where ids fit
    parent = np.arange(n, dtype=it)
    keep = src != dst
    lo, hi = np.minimum(src[keep], dst[keep]).astype(it), np.maximum(src[keep], dst[keep]).astype(it)
    rounds = 0
    while lo.size:  # each edge as (smaller, larger) root of its ends: the same components
        rounds += 1
        if rounds > 1:  # in the first, every vertex is its own root
            pu, pv = parent[lo], parent[hi]
            lo, hi = np.minimum(pu, pv), np.maximum(pu, pv)
            join = lo != hi
            if not join.any():
                break
            lo, hi = lo[join], hi[join]  # edges already inside one tree stay so
        np.minimum.at(parent, hi, lo)
        while True:  # pointer jumping until every vertex points at a root
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
    return parent.astype(dtype, copy=False), rounds


@host_memory("connected_components")
def connected_components(indptr: "ArrayIn | Any", indices: ArrayIn | None = None, *,
                         backend: "Backend | str | None" = None, symmetric: bool = False) -> ArrayOut:
    """Component labels (int32) of the graph `(indptr, indices)` in CSR form, or of a SciPy sparse
    matrix A given whole (`connected_components(A)`), edges taken as undirected: label[v] is the
    smallest vertex id in v's component. Host arrays give a NumPy result (computed on the GPU
    when `backend` is "cuda", or is None and a GPU is usable); device
    arrays (numba, CuPy, PyTorch) give a device array and run on the GPU. `symmetric=True`
    promises every edge is stored both ways (as scipy's undirected graphs are), so the GPU can skip
    the largest component's edges, seen from their other ends: checked (as for `bfs`), on the host
    for host arrays, on the device for device arrays. `connected_components(g)` of a `Graph` is
    `g.connected_components()`."""
    if is_graph(indptr):
        indptr._given(indices, None, None, "connected_components", backend, symmetric)
        return indptr.connected_components()
    indptr, indices, _ = graph_arguments(indptr, indices, None, "connected_components")
    be, g, n, on_device = resolve(indptr, indices, backend, symmetric, "connected_components(A)")
    if on_device:
        check_device_csr(be, indptr, indices, n, symmetric=symmetric, call="connected_components(A)")
        return _components_gpu(be, indptr, indices, n, symmetric)
    if be.name != "cuda":
        return components_of_edges(g.n, *edges(g), dtype=np.int32)[0]
    narrow = g.nnz < 2**31 and g.n < 2**31
    ip = be.upload(g.indptr)
    ix = be.upload(g.indices.astype(np.int32) if narrow else g.indices)
    return be.download(_components_gpu(be, ip, ix, g.n, symmetric))


SAMPLED_NEIGHBOURS = 2  # Afforest's neighbour rounds before the largest tree is found
SAMPLES = 1024  # vertices whose roots name the largest tree


def _components_gpu(be, indptr, indices, n: int, symmetric: bool):
    from ..fixpoint import device
    from ..gpu.memory import unzeroed

    def run(step, count, args):  # the arguments are this module's own: fixpoint.for_each less its checks
        device.for_each(be, step, count, args, 256)

    return afforest(run, lambda k, dt: unzeroed(be, k, dt), indptr, indices, n, symmetric)


def afforest(run, empty, indptr, indices, n: int, symmetric: bool):
    """Parents (int32 device array) of the components of a CSR on the device, in the style of
    Afforest: link every vertex with its first SAMPLED_NEIGHBOURS stored neighbours, find the
    largest tree from SAMPLES vertices' roots (a vote on the device, so the host never waits), then
    link the remaining neighbours of every vertex outside it (of every vertex unless the CSR is
    symmetric), and point each vertex at its root. `run(step, count, args)` runs a step of
    `steps.py` once over items 0..count-1; `empty(n, dtype)` gives a device array (any contents)."""
    from . import steps

    parent = empty(n, np.int32)
    if n == 0:
        return parent
    run(steps.init, n, [parent])
    for r in range(SAMPLED_NEIGHBOURS):
        run(steps.sample, n, [parent, indptr, indices, np.int32(r)])
        run(steps.compress, n, [parent])
    votes = empty(1, np.int64)
    run(steps.clear, 1, [votes])  # stays 0, no giant tree, unless the CSR is symmetric
    if symmetric:
        m = min(SAMPLES, n)
        roots = empty(m, np.int32)
        run(steps.gather, m, [parent, roots, np.int64(n // m)])
        run(steps.vote, m, [roots, votes])
    run(steps.rest, n, [parent, indptr, indices, np.int32(SAMPLED_NEIGHBOURS), votes])
    run(steps.compress, n, [parent])
    return parent


def edge_components(run, empty, n: int, src, dst, m: int):
    """Parents (int32 device array) of the components of n vertices joined by the m device edges
    (src[i], dst[i]): every edge linked by the lock-free union-find, then every vertex pointed at
    its root. `run` as in `afforest`."""
    from . import steps

    parent = empty(n, np.int32)
    if n == 0:
        return parent
    run(steps.init, n, [parent])
    if m:
        run(steps.link_edge, m, [parent, src, dst])
    run(steps.compress, n, [parent])
    return parent
