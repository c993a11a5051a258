"""Breadth-first search: each vertex's distance in edges from a source, -1 where unreachable.

Level by level: the frontier is a work queue on the device; top-down levels expand it (each
unseen neighbour claimed by compare-and-swap), bottom-up levels scan the unseen vertices for a
neighbour in it, and the direction follows Beamer's direction-optimizing rule (bottom-up once the
frontier's edges outnumber the unexplored edges / ALPHA, top-down again once it holds fewer than
n / BETA vertices), bottom-up only for a symmetric CSR (stored edges then serve as in-edges). The
host reads two counts a level (the frontier's vertices and edges) in one synchronisation. `bfs_numpy` is the CPU implementation and the oracle."""
from __future__ import annotations

import numpy as np

from ..errors import DispatchError
from ..unique import unique
from .csr import CSR, check_device_csr, resolve

HUB = 256  # see bfs_kernels.HUB
PERSISTENT_AFTER = 8  # levels run from the host before a small frontier's remaining levels go on the device
BOTTOM_UP_ABOVE = 1 / 20  # bfs_many: bottom-up while the frontier holds more than this share of the vertices
TOP_DOWN_BELOW = 1 / 50  # and back below this share
ALPHA = 14  # bfs: bottom-up once the frontier's edges exceed the unexplored edges / ALPHA (Beamer et al.)
BETA = 24  # and back to top-down once the frontier holds fewer than n / BETA vertices


def bfs_numpy(g: CSR, source: int) -> np.ndarray:
    """Distances (int32, -1 unreachable) from `source` over the stored (directed) edges."""
    dist = np.full(g.n, -1, np.int32)
    dist[source] = 0
    frontier = np.array([source], np.int64)
    level = 0
    while frontier.size:
        lo, hi = g.indptr[frontier], g.indptr[frontier + 1]
        counts = hi - lo
        offsets = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        nbrs = unique(g.indices[offsets].astype(np.int64))
        nbrs = nbrs[dist[nbrs] == -1]
        level += 1
        dist[nbrs] = level
        frontier = nbrs
    return dist


def _source(source, n: int) -> int:
    if isinstance(source, (bool, np.bool_)) or not isinstance(source, (int, np.integer)) or not 0 <= source < n:
        raise DispatchError(f"source={source!r} is not a vertex of this {n}-vertex graph. Fix: pass an int "
                            f"0 <= source < {n}.")
    return int(source)


def bfs(indptr, indices, source: int, *, backend=None, symmetric: bool = False):
    """Distances (int32) from `source` along the stored edges of the CSR graph `(indptr,
    indices)`, -1 for vertices it cannot reach: NumPy out for host arrays (computed on the GPU
    when `backend` is "cuda", or is None and a GPU is usable), a device array out for device
    arrays. `symmetric=True` promises every edge is stored both ways, which lets large frontiers
    be searched bottom-up; it is not checked."""
    be, g, n, on_device = resolve(indptr, indices, backend, symmetric)
    if n < 1:
        raise DispatchError("the graph has no vertices, so no source. Fix: pass a graph with at least one vertex.")
    source = _source(source, n)
    if on_device:
        hubs = check_device_csr(be, indptr, indices, n, HUB)
        return _bfs_gpu(be, indptr, indices, n, source, bool(symmetric), hubs=hubs)
    if be.name != "cuda":
        return bfs_numpy(g, source)
    ix = g.indices.astype(np.int32) if g.nnz < 2**31 and g.n < 2**31 else g.indices
    hubs = bool(g.n) and int(np.diff(g.indptr).max()) > HUB
    return be.download(_bfs_gpu(be, be.upload(g.indptr), be.upload(ix), g.n, source, bool(symmetric), hubs=hubs))


def _bfs_gpu(be, indptr, indices, n: int, source: int, symmetric: bool, levels: list | None = None,
             hubs: bool = True, rounds=None):
    """Distances on the device; `levels`, where given, records each level's direction. `hubs`
    False promises no vertex has more than HUB neighbours (one kernel a top-down level, not two).

    After PERSISTENT_AFTER levels, a small frontier (a long, thin graph: roads, grids, paths) hands
    the remaining levels to the device: asynchronous relaxation from that frontier (`steps.relax`)
    run to its fixed point by the fixpoint runner, all rounds in one persistent cooperative launch
    where the grid fits (else a CUDA graph's while loop), with no host round trip a level.
    `rounds` (each, until) replaces the fixpoint runner (the CUDA simulator's tests pass theirs)."""
    from ..gpu.numba_launch import launch_quietly
    from ..workqueue import WorkQueue
    from . import bfs_kernels as k

    stream = be.stream
    block = 256
    grid = max(1, min(-(-n // block), be.caps.sm_count * 16))
    dist = be.empty(n, np.int32)
    counts = be.empty(2, np.int64)
    zeros = np.zeros(2, np.int64)

    def measure(queue) -> tuple[int, int]:  # (vertices, edges) of a frontier, one synchronisation
        counts.copy_to_device(zeros, stream=stream)
        launch_quietly(k.frontier_edges, grid, block, stream, indptr, queue.items, queue.state, n, counts)
        got = counts.copy_to_host(stream=stream)
        if stream is not None:
            stream.synchronize()
        return int(got[1]), int(got[0])

    with WorkQueue(n, np.int32, stream=stream) as frontier, WorkQueue(n, np.int32, stream=stream) as nxt:
        launch_quietly(k.start, grid, block, stream, dist, n, source, frontier.items, frontier.state)
        size, edges = measure(frontier)
        unexplored = int(indices.shape[0]) - edges
        level, bottom = 0, False
        while size:
            if bottom:
                bottom = symmetric and size >= n / BETA
            else:
                bottom = symmetric and edges > unexplored / ALPHA
            if level >= PERSISTENT_AFTER and not bottom:
                _relax_rest(rounds or _fixpoint_rounds(be), indptr, indices, dist, frontier.items, size, n, be)
                if levels is not None:
                    levels.append("persistent")
                break
            if bottom:
                launch_quietly(k.bottom_up, grid, block, stream, indptr, indices, dist, level, n, nxt.items, nxt.state)
            else:
                for kernel in (k.top_down, k.top_down_hubs) if hubs else (k.top_down,):
                    launch_quietly(kernel, grid, block, stream, indptr, indices, dist, level, frontier.items, frontier.state, n,
                                                nxt.items, nxt.state)
            if levels is not None:
                levels.append("bottom-up" if bottom else "top-down")
            frontier.reset()
            frontier, nxt = nxt, frontier
            size, edges = measure(frontier)
            unexplored -= edges
            level += 1
    return dist


def _fixpoint_rounds(be):
    from .. import fixpoint

    def each(step, count, args):
        fixpoint.for_each(step, count, args, backend=be)

    def until(step, count, args, max_rounds):
        return fixpoint.run(step, count, args, max_rounds=max_rounds, backend=be, progress=False).converged

    return each, until


def _relax_rest(rounds, indptr, indices, dist, items, size: int, n: int, be) -> None:
    """The levels after the frontier `items[:size]`, by asynchronous relaxation on the device."""
    from ..errors import DeviceError
    from . import steps

    each, until = rounds
    words = -(-n // 32)
    dirty = be.empty(words, np.uint32)
    each(steps.clear, words, [dirty])
    each(steps.mark_items, size, [dirty, items])
    each(steps.unreached_to_max, n, [dist])
    if not until(steps.relax, words, [indptr, indices, dist, dirty], min(n + 1, 2**31 - 1)):
        raise DeviceError(f"BFS relaxation did not settle within {n + 1} rounds on a {n}-vertex graph, which "
                          "cannot happen for correct distances. Fix: report this with the graph.")
    each(steps.max_to_unreached, n, [dist])
