"""A graph checked once and kept on its backend, for many queries: `Graph`.

`bfs(indptr, indices, source)` checks the CSR every call (its arrays are the caller's and may have
changed): on the device a pass over every entry, 0.3 ms of a 1.2 ms search on an R-MAT graph of
2^27 entries. A `Graph` checks its input once and keeps its own copy, which nothing else can
write, so its queries skip the check."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import ArgumentError, DispatchError, NotACollection, flag, host_memory, raise_if_out_of_memory
from ..owned import Unshared
from .bfs import HUB, _bfs_gpu, _bfs_numpy, _source
from .components import _components_gpu, components_of_edges
from .csr import CSR, check_device_csr, edges, graph_arguments, resolve
from .multisource import _PER_SOURCE, _bfs_many_gpu, _bfs_many_numpy, _by_degree, _grid, many_sources, reached

from ..backend import ArrayIn, ArrayOut, Backend  # noqa: F401  (the annotations name them: typing.get_type_hints reads them)

__all__ = ["Graph"]


class Graph(NotACollection, Unshared):
    """A CSR graph, checked when made (as `bfs` checks one every call: ends, monotone offsets,
    indices in range, and where `symmetric`, every edge stored both ways), and held as its own
    copy on its backend: on the GPU a device copy (indices as int32), on the reference backend
    read-only host arrays. Later changes to the arrays it was made from do not reach it.

    `Graph(indptr, indices)`, or `Graph(A)` for a SciPy sparse matrix A (any format, read as CSR);
    host or device arrays; `backend` as for `bfs` (None: the GPU where usable). Queries give what
    the graph's arrays were: NumPy results for host arrays, device arrays for device arrays. The
    module calls take one in the CSR's place, `bfs(g, source)`. Release its device copy with
    `close()` or `with`; a query after that is refused."""

    _resident_graph = True  # how `csr.is_graph` tells a Graph (the module calls cannot import this module)
    _collection_fix = ("g.n is its vertex count and g.nnz its edge count; g.to_csr() gives its arrays (indptr, "
                       "indices), and g.bfs(v) the distances from vertex v.")
    _read_only_fix = "make a new Graph with what you want, Graph(indptr, indices) or Graph(A) (close() releases one)"

    @host_memory("Graph")
    def __init__(self, indptr: "ArrayIn | Any", indices: ArrayIn | None = None, *, symmetric: bool = False,
                 backend: "Backend | str | None" = None):
        indptr, indices, _ = graph_arguments(indptr, indices, None, "Graph")
        # checked as copied: a later change to the caller's arrays cannot slip in unchecked
        (indptr, own_ip), (indices, own_ix) = _own(indptr), _own(indices)
        be, g, n, on_device = resolve(indptr, indices, backend, symmetric, "Graph(A)")
        self._lock = threading.RLock()  # a close waits for the query in flight
        self._be, self._n, self._symmetric, self._to_host = be, n, bool(symmetric), not on_device
        self._backend = be.name
        self._host, self._split = None, None  # bfs_many's split of the vertices by degree, found once
        if be.name != "cuda":
            self._host = CSR(_kept(g.indptr, own_ip), _kept(g.indices, own_ix))
            self._nnz, self._hubs, self._arrays = g.nnz, False, ()
            return
        if on_device:  # copied first, the copy checked: a later write to the caller's arrays cannot slip in
            self._nnz = int(indices.__cuda_array_interface__["shape"][0])
            try:
                copies = (_device_copy(be, indptr, np.int64), _device_copy(be, indices, np.int32))
                self._hubs = check_device_csr(be, *copies, n, HUB, symmetric, "Graph(A)")
            except BaseException as e:
                copies = None  # a refused graph holds no device memory, whoever keeps the exception
                if isinstance(e, Exception):
                    raise_if_out_of_memory(e, "Graph()", _IN_PLACE, named=True)
                raise
            self._arrays = copies
        else:
            self._nnz = g.nnz
            self._hubs = bool(n) and int(np.diff(g.indptr).max()) > HUB
            self._arrays = (be.upload(g.indptr), be.upload(g.indices.astype(np.int32)))

    @property
    def n(self) -> int:
        """The number of vertices."""
        return self._n

    @property
    def nnz(self) -> int:
        """The number of stored entries (directed edges)."""
        return self._nnz

    @property
    def symmetric(self) -> bool:
        """Whether every edge was found stored both ways when the graph was made (it was asked to be)."""
        return self._symmetric

    @property
    def backend(self) -> str:
        """The name of the backend the graph lives on: "cuda" or "reference" (kept after close)."""
        return self._backend

    @property
    def closed(self) -> bool:
        """Whether `close()` has released the graph."""
        return self._be is None

    def __repr__(self) -> str:
        if self._be is None:
            return "Graph(closed)"
        return (f"Graph(n={self._n:,}, nnz={self._nnz:,}, symmetric={self._symmetric}, backend={self._backend!r}, "
                f"results={'NumPy' if self._to_host else 'device arrays'})")

    def _live(self):
        if self._be is None:
            raise DispatchError("this Graph was closed. Fix: make a new one, Graph(indptr, indices) or Graph(A).")
        return self._be

    def _out(self, be, dist):
        return be.download(dist) if self._to_host else dist

    @host_memory("Graph.bfs")
    def bfs(self, source: int) -> ArrayOut:
        """Distances (int32) from `source`, -1 where unreachable: `bfs(indptr, indices, source)`
        of the graph's arrays, without checking them again."""
        with self._lock:
            self._live()
            source = _source(source, self._n)
            be = self._live()  # again: converting the argument ran the caller's code, which may have closed it
            if self._host is not None:
                return _bfs_numpy(self._host, source)
            return self._out(be, _bfs_gpu(be, *self._arrays, self._n, source, self._symmetric, hubs=self._hubs))

    @host_memory("Graph.bfs_many", _PER_SOURCE)
    def bfs_many(self, sources: ArrayIn) -> ArrayOut:
        """Distances (int32, shape (len(sources), n)) from each of `sources`: `bfs_many` of the
        graph's arrays, without checking them again."""
        return self._bfs_many(sources)

    def _bfs_many(self, sources):
        with self._lock:
            self._live()
            s = many_sources(sources, self._n)
            be = self._live()  # again, as in bfs
            if self._host is not None:
                return _bfs_many_numpy(self._host, s)
            if self._split is None and s.size:
                self._split = _by_degree(be, self._arrays[0], self._n, self._nnz)
            dist = _bfs_many_gpu(be, *self._arrays, self._n, s, self._symmetric, split=self._split)
            return be.download(dist).reshape(s.size, self._n) if self._to_host else dist

    @host_memory("Graph.reachable_many", _PER_SOURCE)
    def reachable_many(self, sources: ArrayIn) -> ArrayOut:
        """Whether each of `sources` reaches each vertex (bool, shape (len(sources), n)):
        `bfs_many(sources) >= 0`."""
        with self._lock:
            be = self._live()
            dist = self._bfs_many(sources)
            return dist >= 0 if isinstance(dist, np.ndarray) else reached(be, dist)

    @host_memory("Graph.connected_components")
    def connected_components(self) -> ArrayOut:
        """Component labels (int32), edges taken as undirected: `connected_components` of the
        graph's arrays, without checking them again."""
        with self._lock:
            be = self._live()
            if self._host is not None:
                return components_of_edges(self._n, *edges(self._host), dtype=np.int32)[0]
            return self._out(be, _components_gpu(be, *self._arrays, self._n, self._symmetric))

    def to_csr(self) -> CSR:
        """A host copy of the graph's arrays, as a `CSR` (int64)."""
        with self._lock:
            be = self._live()
            if self._host is not None:
                return CSR(self._host.indptr.copy(), self._host.indices.copy())
            ip, ix = self._arrays
            return CSR(be.download(ip).astype(np.int64), be.download(ix).astype(np.int64))

    def close(self) -> None:
        """Release the graph's copy (once; later calls do nothing)."""
        with self._lock:
            self._be, self._host, self._arrays, self._split = None, None, (), None

    def __enter__(self) -> "Graph":
        self._live()  # a closed one is refused here, not at the first call inside
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _given(self, first, second, then_name: str | None, call: str, backend, symmetric) -> Any:
        """The argument after the graph in a module call given this Graph, `call(g, x)` (None where
        `then_name` is None: the call takes none), its other arguments checked against the graph's."""
        flag(symmetric, "symmetric", "pass True only for a CSR that stores every edge both ways.")
        then, extra = (first, second) if first is not None else (second, None)
        usage = f"{call}(g, {then_name})" if then_name else f"{call}(g)"
        if extra is not None or (then_name is None and then is not None):
            raise ArgumentError(f"{call}() was given a Graph and arrays too. Fix: pass the Graph alone in the CSR's "
                                f"place, {usage}.")
        if then_name and then is None:
            raise ArgumentError(f"{call}() is missing {then_name}. Fix: pass it after the graph: {usage}.")
        from ..backend import resolve_backend

        be = self._live()
        if backend is not None and resolve_backend(backend).name != be.name:
            raise DispatchError(f"{call}() was given backend={backend!r}, but the Graph lives on {be.name!r}. Fix: "
                                "leave backend out (the Graph's own is used), or make the Graph with "
                                f"Graph(..., backend={backend!r}).")
        if symmetric and not self._symmetric:
            raise DispatchError(f"{call}() was given symmetric=True, but the Graph was made without it, so its edges "
                                "were not checked both ways. Fix: make it with Graph(..., symmetric=True).")
        return then


_IN_PLACE = ("call the module functions on the arrays instead (bfs(indptr, indices, source) and the others read them "
             "where they are; a Graph holds a copy of its own)")


def _own(a) -> tuple[Any, bool]:
    """(`a` or its copy, whether the array the check reads from it is memory of the package's own).
    A NumPy array is copied (its own type: a masked array stays one, for the check to refuse), a
    pandas object deeply (an Index's own copy shares its memory); a list, tuple or range is read
    into a new array; anything else is passed on as it is: a device array (copied on the device,
    the copy then checked), or an object whose `__array__` may hand out its own memory."""
    if isinstance(a, np.ndarray):
        return a.copy(), True
    if isinstance(a, (list, tuple, range)):
        return a, True
    if not type(a).__module__.startswith("pandas"):
        return a, False
    try:  # a Series', DataFrame's or Index's copy takes `deep`; an extension array's (pd.array) is deep
        return a.copy(deep=True), True
    except TypeError:
        return a.copy(), True


def _kept(a: np.ndarray, owned: bool) -> np.ndarray:
    """`a` (checked) as int64 and read-only: copied unless its memory is the package's own (`owned`),
    so the caller's own array is never made read-only nor shared."""
    out = a.astype(np.int64, copy=not owned)
    out.setflags(write=False)
    return out


def _device_copy(be, a, dtype):
    """A new device array of `a`'s items (a device array of any stride and integer type) as `dtype`,
    -1 for an item `dtype` cannot hold (`copy_into`)."""
    from ..gpu.memory import unzeroed
    from ..gpu.numba_launch import launchers
    from .csr_kernels import copy_into

    size = int(a.__cuda_array_interface__["shape"][0])
    out = unzeroed(be, max(size, 1), dtype)[:size]
    if size:
        launchers(be.stream)(copy_into, _grid(be, size), 256, out, a)
    return out
