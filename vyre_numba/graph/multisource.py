"""Many BFS queries over one graph at once: up to 64 sources a batch, each a bit of a 64-bit mask
per vertex (multi-source BFS: Then et al., "The More the Merrier", VLDB 2015), so one pass over an
edge serves every source whose frontier crosses it, and k queries cost about k / 64 traversals.

A level: the vertices whose frontier mask is not empty offer it to their neighbours (top-down),
or, on a symmetric CSR while the frontier is large, every vertex not yet reached by all sources
ORs its neighbours' frontier masks (bottom-up); then each vertex keeps the bits it had not seen,
which are its next frontier, and those sources' distances there are the level. The host reads
one count a level. `bfs_many_numpy` is the CPU implementation and the oracle."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..errors import INTEGERS, DispatchError, host_memory
from .bfs import BOTTOM_UP_ABOVE, SCALAR_VERTICES, TOP_DOWN_BELOW, each_once, small_spans
from .csr import CSR, _as_index_array, check_device_csr, checked_graph, graph_arguments, indices_by_name, is_graph, resolve

from ..backend import ArrayIn, ArrayOut, Backend  # noqa: F401  (the annotations name them: typing.get_type_hints reads them)

_PER_SOURCE = ("Its result holds one int32 distance per source and vertex. Fix: pass fewer sources a call "
               "(or a graph of fewer vertices).")
BATCH = 64  # sources a pass: the bits of one uint64 mask
PIECE = 1024  # neighbours a warp takes of a vertex with more than this many (a hub is many warps' work)


@host_memory("bfs_many_numpy", _PER_SOURCE)
def bfs_many_numpy(g: CSR, sources: np.ndarray) -> np.ndarray:
    """Distances (int32, (len(sources), n), -1 unreachable) from each source over the stored
    (directed) edges, bit-parallel as on the device."""
    g = checked_graph(g, "bfs_many_numpy")
    return _bfs_many_numpy(g, _sources(sources, g.n))


def _bfs_many_numpy(g: CSR, sources: np.ndarray) -> np.ndarray:
    """`bfs_many_numpy` of a CSR and sources just checked: a level costs its frontier's edges (the
    frontier is the vertices reached at the last level, each with the bits of the sources that
    reached it then), not a pass over every vertex, and sorts nothing: the bits offered to each
    neighbour are OR-ed in place (`acc`, zero again after each level) and each neighbour is kept
    once (`bfs.each_once`). Small levels (a path's, a road's) are expanded by a Python loop
    (`_small_level`), as `bfs_numpy` expands them: a few microseconds a level, not NumPy's ~30."""
    n = g.n
    dist = np.full((sources.size, n), -1, np.int32)
    indptr, indices = g.indptr.astype(np.int64, copy=False), g.indices.astype(np.int64, copy=False)
    acc, stamp = np.zeros(n, np.uint64), np.zeros(n, np.intp)
    for start in range(0, sources.size, BATCH):
        batch = sources[start:start + BATCH].astype(np.int64, copy=False)
        seen = np.zeros(n, np.uint64)
        np.bitwise_or.at(seen, batch, np.uint64(1) << np.arange(batch.size, dtype=np.uint64))
        dist[start + np.arange(batch.size), batch] = 0
        at = np.flatnonzero(seen)
        bits, level = seen[at], 0
        while len(at):
            level += 1
            if len(at) <= SCALAR_VERTICES:
                small = _small_level(dist, start, seen, indptr, indices, at, bits, level)
                if small is not None:
                    at, bits = small
                    continue
            at, bits = np.asarray(at, np.int64), np.asarray(bits, np.uint64)
            lo, counts = indptr[at], indptr[at + 1] - indptr[at]
            ends = np.cumsum(counts)
            if not ends[-1]:
                break
            nbrs = indices[np.repeat(lo - (ends - counts), counts) + np.arange(ends[-1])]
            np.bitwise_or.at(acc, nbrs, np.repeat(bits, counts))
            at = each_once(nbrs, stamp)
            bits = acc[at] & ~seen[at]
            acc[at] = 0
            keep = bits != 0
            at, bits = at[keep], bits[keep]
            seen[at] |= bits
            _record(dist, start, at, bits, level, batch.size)
    return dist


def _small_level(dist: np.ndarray, start: int, seen: np.ndarray, indptr: np.ndarray, indices: np.ndarray, at, bits,
                 level: int) -> "tuple[list, list] | None":
    """The next frontier (vertices, their new source bits: lists of ints) of a level whose frontier
    `at` (with `bits`: arrays or lists) reaches at most SCALAR_EDGES edges, expanded by a Python
    loop, its distances recorded and `seen` updated; None for a larger level (left to NumPy)."""
    if isinstance(at, np.ndarray):
        at, bits = at.tolist(), bits.tolist()
    spans = small_spans(indptr, at)
    if spans is None:
        return None
    offered: dict = {}
    for (a, b), bit in zip(spans, bits):
        for v in indices[a:b].tolist():
            offered[v] = offered.get(v, 0) | bit
    nxt, nbits = [], []
    for v, bit in offered.items():
        old = int(seen[v])
        bit &= ~old
        if bit:
            seen[v] = old | bit
            nxt.append(v)
            nbits.append(bit)
            while bit:
                low = bit & -bit
                dist[start + low.bit_length() - 1, v] = level
                bit ^= low
    return nxt, nbits


def _record(dist: np.ndarray, start: int, at: np.ndarray, bits: np.ndarray, level: int, width: int) -> None:
    """dist[start + s, at[i]] = level for each source bit s of bits[i]. Most rows hold one source
    (frontiers of different sources rarely meet): its row is log2 of the bit, exact for powers of two."""
    one = (bits & (bits - np.uint64(1))) == 0
    if one.any():
        dist[start + np.log2(bits[one].astype(np.float64)).astype(np.int64), at[one]] = level
    many = ~one
    if many.any():
        rows, cols = np.nonzero(np.unpackbits(bits[many].astype("<u8").view(np.uint8).reshape(-1, 8), axis=1,
                                              bitorder="little")[:, :width])
        dist[start + cols, at[many][rows]] = level


def many_sources(sources, n: int) -> np.ndarray:
    """`sources` checked as vertices of an n-vertex graph (int64), their rows within the size
    `bfs_many` gives."""
    s = _sources(sources, n)
    if n * s.size >= 2**34:  # 64 GiB of int32 distances
        raise DispatchError(f"{s.size} sources x {n} vertices is {s.size * n:,} distances ({s.size * n * 4 / 2**30:.0f} "
                            "GiB). Fix: pass fewer sources a call (the result holds one int32 per source and vertex).")
    return s


def _sources(sources, n: int) -> np.ndarray:
    if hasattr(sources, "__cuda_array_interface__") or hasattr(sources, "copy_to_host"):
        raise DispatchError("sources is a device array. Fix: pass the source vertices as a list or NumPy array "
                            "(sources.copy_to_host()).")
    if isinstance(sources, np.ma.MaskedArray):
        raise DispatchError("sources is a masked array; its mask would be ignored. Fix: pass the unmasked "
                            "vertices, sources.compressed().")
    if isinstance(sources, (*INTEGERS, np.ndarray)) and np.ndim(sources) == 0:  # one source
        sources = np.reshape(sources, 1)
    s = _as_index_array(sources, "sources", whole="pass the source vertices as a list or NumPy array of ints",
                        not_array="pass the source vertices as an int, a list or a 1-D NumPy array of ints.")
    s = np.array(s, copy=True)  # checked below: a change to the caller's array after the check cannot slip in
    if s.size and n == 0:
        raise DispatchError("the graph has no vertices, so no sources. Fix: pass a graph with vertices, or sources=[].")
    if s.size and (int(s.min()) < 0 or int(s.max()) >= n):  # in the caller's type: a uint64 past 2**63 as itself
        at = int(np.argmin(s)) if int(s.min()) < 0 else int(np.argmax(s))
        raise DispatchError(f"sources[{at}] = {int(s[at])} is not a vertex of this {n}-vertex graph. Fix: pass sources "
                            f"in 0..{n - 1}.")
    return s.astype(np.int64, copy=False)


@host_memory("bfs_many", _PER_SOURCE)
@indices_by_name("bfs_many", "sources")
def bfs_many(indptr: "ArrayIn | Any", indices: ArrayIn | None = None, sources: ArrayIn | None = None, *,
             backend: "Backend | str | None" = None, symmetric: bool = False) -> ArrayOut:
    """Distances (int32, shape (len(sources), n)) from each of `sources` along the stored edges of
    the CSR graph `(indptr, indices)` (or of a SciPy sparse matrix A given whole: `bfs_many(A,
    sources)`), -1 where a source cannot reach: row i is `bfs(indptr, indices, sources[i])`.
    Sources are searched 64 at a time in one traversal. Host arrays give a NumPy result (computed
    on the GPU when `backend` is "cuda", or is None and a GPU is usable); device arrays give a
    device array (an int `sources` gives one row). `symmetric=True` as for `bfs` (bottom-up
    levels; checked, for device arrays on the device). A `Graph` in the CSR's place, `bfs_many(g,
    sources)`, is `g.bfs_many(sources)`."""
    if is_graph(indptr):
        return indptr.bfs_many(indptr._given(indices, sources, "sources", "bfs_many", backend, symmetric))
    return _bfs_many(indptr, indices, sources, backend, symmetric, "bfs_many")


def _bfs_many(indptr, indices, sources, backend, symmetric, call: str):
    indptr, indices, sources = graph_arguments(indptr, indices, sources, call, "sources")
    be, g, n, on_device = resolve(indptr, indices, backend, symmetric, f"{call}(A, sources)")
    s = many_sources(sources, n)
    if on_device:
        check_device_csr(be, indptr, indices, n, symmetric=symmetric, call=f"{call}(A, sources)")
        return _bfs_many_gpu(be, indptr, indices, n, s, bool(symmetric))
    if be.name != "cuda":
        return _bfs_many_numpy(g, s)
    ix = g.indices.astype(np.int32) if g.nnz < 2**31 else g.indices
    dist = _bfs_many_gpu(be, be.upload(g.indptr), be.upload(ix), n, s, bool(symmetric))
    return be.download(dist).reshape(s.size, n)


@host_memory("reachable_many", _PER_SOURCE)
@indices_by_name("reachable_many", "sources")
def reachable_many(indptr: "ArrayIn | Any", indices: ArrayIn | None = None, sources: ArrayIn | None = None, *,
                   backend: "Backend | str | None" = None, symmetric: bool = False) -> ArrayOut:
    """Whether each of `sources` reaches each vertex (bool, shape (len(sources), n)): `bfs_many(...)
    >= 0` (`reachable_many(A, sources)` for a SciPy sparse matrix A), on the device for device arrays;
    `reachable_many(g, sources)` of a `Graph` is `g.reachable_many(sources)`."""
    if is_graph(indptr):
        return indptr.reachable_many(indptr._given(indices, sources, "sources", "reachable_many", backend, symmetric))
    from ..backend import resolve_backend

    dist = _bfs_many(indptr, indices, sources, backend, symmetric, "reachable_many")
    return dist >= 0 if isinstance(dist, np.ndarray) else reached(resolve_backend(backend), dist)


def reached(be, dist):
    """`dist >= 0` of device distances, a bool device array of their shape."""
    from ..gpu.numba_launch import launch_quietly
    from . import multisource_kernels as k

    out = be.empty(max(dist.size, 1), np.uint8)  # bool has no storage type of its own: bytes 0 and 1
    launch_quietly(k.reached, _grid(be, dist.size), 256, be.stream, dist.reshape(dist.size), out, dist.size)
    return out[:dist.size].view(np.bool_).reshape(dist.shape)


def _grid(be, items: int) -> int:
    return max(1, min(-(-items // 256), be.caps.sm_count * 16))


def _warp_grid(be, items: int) -> int:
    """Blocks of 256 threads for kernels that take a warp an item (8 items a block)."""
    return max(1, min(-(-items // 8), be.caps.sm_count * 16))


def _bfs_many_gpu(be, indptr, indices, n: int, sources: np.ndarray, symmetric: bool, levels: list | None = None,
                  split: "DegreeSplit | None" = None):
    """Distances on the device, (len(sources), n) int32; `levels`, where given, records each
    level's direction. `split`: `_by_degree` of this graph, where the caller keeps it (a `Graph`,
    whose offsets never change); None: found here."""
    from ..gpu.memory import scratch, unzeroed
    from ..gpu.numba_launch import launchers
    from . import multisource_kernels as k
    from .bfs import _host_words

    launch = launchers(be.stream)
    k_all = sources.size
    dist = unzeroed(be, max(k_all * n, 1), np.int32)  # `clear` fills each batch's rows
    if k_all == 0 or n == 0:
        return dist[:k_all * n].reshape(k_all, n)
    masks = [scratch(be, n, np.uint64) for _ in range(3)]  # `clear` zeroes them
    seen, frontier, nxt = masks
    counts, host = be.empty(2, np.int64), _host_words()  # see `settle`
    vgrid = _grid(be, n)
    own, wide, found, pieces = split if split is not None else _by_degree(be, indptr, n, int(indices.shape[0]))
    wgrid = _warp_grid(be, len(wide))
    pgrid = _warp_grid(be, len(pieces)) if pieces is not None else 0
    for start in range(0, k_all, BATCH):
        batch = sources[start:start + BATCH]
        width = batch.size
        rows = dist[start * n:(start + width) * n]
        everyone = np.uint64((1 << width) - 1)
        launch(k.clear, vgrid, 256, width, n, seen, frontier, nxt, rows)
        launch(k.place, 1, 64, be.upload(batch), width, n, seen, frontier, rows)
        size, level, bottom = width, 0, False
        while size:
            level += 1
            share = size / n
            bottom = symmetric and (share > BOTTOM_UP_ABOVE or (bottom and share > TOP_DOWN_BELOW))
            if bottom:
                launch(k.pull, vgrid, 256, indptr, indices, n, everyone, seen, frontier, nxt, own)
                if len(wide):
                    launch(k.pull_wide, wgrid, 256, indptr, indices, wide, found, everyone, seen, frontier, nxt)
                if pieces is not None:
                    launch(k.pull_heavy, pgrid, 256, indices, pieces, len(pieces), everyone, seen, frontier, nxt)
            else:
                launch(k.push, vgrid, 256, indptr, indices, n, seen, frontier, nxt, own)
                if len(wide):
                    launch(k.push_wide, wgrid, 256, indptr, indices, wide, found, seen, frontier, nxt)
                if pieces is not None:
                    launch(k.push_heavy, pgrid, 256, indices, pieces, len(pieces), seen, frontier, nxt)
            if levels is not None:
                levels.append("bottom-up" if bottom else "top-down")
            host.reset()
            launch(k.settle, vgrid, 256, n, level, seen, frontier, nxt, rows, counts, host.device)
            size = host.read(be.stream)[0]
    return dist.reshape(k_all, n)


class DegreeSplit(NamedTuple):
    """A graph's vertices sorted by degree for bfs_many's kernels (`_by_degree`)."""
    own: int  # a thread takes a vertex of up to this many neighbours (SMALL, or PIECE where less)
    wide: Any  # device array: the vertices of more, up to PIECE, a warp each
    found: Any  # device words whose TAIL counts `wide`
    pieces: Any  # device rows (vertex, first entry, end) cutting the lists of more than PIECE; None: no such vertex


def _by_degree(be, indptr, n: int, nnz: int) -> DegreeSplit:
    """The vertices sorted by degree, once a call (once a `Graph`). The pieces come in the order
    `split_by_degree`'s atomics met their vertices, which varies, as the kernels that take them
    need no order. One small read back, two where there are pieces."""
    from ..gpu.memory import scratch
    from ..gpu.numba_launch import launch_quietly
    from ..workqueue.device import TAIL
    from . import multisource_kernels as k

    own = min(k.SMALL, PIECE)
    room, wide_room = nnz // (PIECE + 1), nnz // (own + 1)  # a vertex of more than d neighbours holds d + 1 entries
    found = be.empty(3, np.uint64)
    if wide_room == 0:
        return DegreeSplit(own, found[:0], found, None)
    out = scratch(be, max(room, 1) * 3, np.int64).reshape(max(room, 1), 3)
    wide = scratch(be, wide_room, np.int64)
    launch_quietly(k.split_by_degree, _grid(be, n), 256, be.stream, indptr, n, own, PIECE, out, found, wide)
    counts = be.download(found)
    w, h = int(counts[TAIL]), int(counts[2])
    wide = wide[:w]
    if h == 0:
        return DegreeSplit(own, wide, found, None)
    rows = be.download(out[:h].reshape(h * 3)).reshape(h, 3)
    ends = np.cumsum(-(-(rows[:, 2] - rows[:, 1]) // PIECE))  # each heavy vertex's last piece + 1
    pieces = scratch(be, int(ends[-1]) * 3, np.int64).reshape(int(ends[-1]), 3)
    launch_quietly(k.cut_pieces, _grid(be, h), 256, be.stream, out, be.upload(ends), h, PIECE, pieces)
    return DegreeSplit(own, wide, found, pieces)
