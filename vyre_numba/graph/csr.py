"""Graphs in compressed sparse row form (`indptr`, `indices`), checked by every call that takes one."""
from __future__ import annotations

import functools
import secrets
from typing import NamedTuple

from typing import Any, Callable

import numpy as np

from ..backend import ArrayIn, as_ints, interface_dtype
from ..errors import (INTEGERS, ArgumentError, DispatchError, by_identity, NotACollection, a_type, flag, flat_fix, refuse_misread,
                      shown)
from ..lru import LRUCache
from ..unique import unique


@by_identity  # as a Step (compare the arrays with np.array_equal)
class CSR(NamedTuple):
    """A CSR graph on the host: vertex v's neighbours are indices[indptr[v]:indptr[v+1]]. The
    algorithms check one each time they are given it (its arrays may have changed since)."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n(self) -> int:
        """The number of vertices."""
        n = _length(self.indptr, "indptr") - 1
        if n < 0:
            raise DispatchError("the CSR's indptr is empty; a CSR graph of n vertices has n + 1 offsets. Fix: build "
                                "the graph with check_csr(indptr, indices) (indptr [0] for the empty graph).")
        return n

    @property
    def nnz(self) -> int:
        """The number of stored entries (directed edges)."""
        return _length(self.indices, "indices")


def _length(a, name: str) -> int:
    """The length of the flat array or list `a`, else a DispatchError."""
    try:
        shape = np.shape(a)
    except (ValueError, TypeError):  # ragged nested lists
        shape = None
    if shape is None or len(shape) != 1:
        what = f"of shape {shape}" if shape else f"{a_type(a)}"
        raise DispatchError(f"the CSR's {name} is {what}, not a flat array. Fix: build the graph with "
                            "check_csr(indptr, indices).")
    return int(shape[0])


def is_graph(a) -> bool:
    """Whether `a` is a `Graph` (told without importing `resident`, which imports the algorithms)."""
    return getattr(a, "_resident_graph", False) is True


def whole_graph(a) -> bool:
    """Whether `a` is a whole sparse graph (a SciPy sparse matrix or array, or a CSR of two arrays),
    where an array of it was meant."""
    return not isinstance(a, np.ndarray) and (hasattr(a, "indptr") and hasattr(a, "indices")
                                              or type(a).__module__.startswith("scipy.sparse")
                                              and isinstance(getattr(a, "format", None), str))


CHECK_CSR = "check_csr(A)"


def graph_arguments(indptr, indices, then, call: str, then_name: str | None = None) -> tuple:
    """(indptr, indices, then) of a graph call written with a CSR's two arrays, `call(indptr,
    indices[, then])`, or with the whole graph in indptr's place, `call(A[, then])`: a SciPy (or
    CuPy) sparse matrix or array of any format, read as the same matrix in CSR form (a CSC's own
    two arrays are its transpose's), or a `CSR`. `then_name` names the argument after the graph
    (bfs's source), None where the call takes none; every stored entry is an edge, explicit zeros
    too, as SciPy's csgraph reads a sparse matrix."""
    after = f", {then_name}" if then_name else ""
    if is_graph(indptr) or is_graph(indices):
        raise DispatchError(f"{call}() takes a graph's arrays, not a Graph. Fix: pass g.to_csr() (a host copy of "
                            "its arrays), or call the Graph's own method where it has one (g.bfs, g.bfs_many, "
                            "g.connected_components).")
    if _square(indptr):
        if np.shape(indptr) == (2, 2):  # two edges (u, v) read as rows look the same
            raise DispatchError(f"{call}(): indptr is a 2 x 2 array, not a CSR's offsets: a dense adjacency matrix, or "
                                "a list of two edges (u, v)? Fix: for a matrix M, pass "
                                f"{call}(scipy.sparse.csr_array(M){after}); for an (m, 2) array of edges E, {_EDGES}.")
        raise DispatchError(f"{call}(): indptr is a square 2-D array (a dense adjacency matrix?), not a CSR's offsets. "
                            f"Fix: pass the graph as a sparse matrix, {call}(scipy.sparse.csr_array(M){after}).")
    if _pair(indptr):
        raise ArgumentError(f"{call}(): indptr is a {type(indptr).__name__} of two arrays (a graph's (indptr, indices), "
                            f"as the generators return it?), not a CSR's offsets. Fix: unpack it, {call}(*g{after}), "
                            f"or pass the arrays apart, {call}(indptr, indices{after}).")
    if _no_array(indptr) and not whole_graph(indptr):  # before "missing source", which bfs(None, 0) would meet
        _as_index_array(indptr, "indptr", f"{call}(A{after})")
    if whole_graph(indptr):
        if then_name and then is None:  # call(A, x): x came in indices' place
            indices, then = None, indices
        if indices is not None:
            raise _graph_and_indices(call, indptr, after, "indices")
        indptr, indices = _arrays_of(indptr, call)
    elif indices is None:
        if not _offsets_like(indptr):
            raise _unsupported_form(call, indptr, after)
        raise ArgumentError(f"{call}() is missing indices. Fix: pass the graph's CSR arrays, {call}(indptr, indices"
                            f"{after}), or the graph whole, {call}(A{after}) for a SciPy sparse matrix A.")
    if then_name and then is None:
        if not _offsets_like(indptr):  # call(G, x) with G in a form no graph call takes: x came in indices' place
            raise _unsupported_form(call, indptr, after)
        raise ArgumentError(f"{call}() is missing {then_name}. Fix: pass it after the graph: {call}(indptr, indices"
                            f"{after}) or {call}(A{after}).")
    return indptr, indices, then


def _unsupported_form(call: str, g, after: str) -> DispatchError:
    """The error of `call` given a graph in a form no graph call takes (a networkx graph, an edge
    list, an adjacency dict or list of lists, a DataFrame)."""
    kind = f"a networkx {type(g).__name__}" if _networkx(g) else a_type(g)
    return DispatchError(f"{call}(): the graph is {kind}, a form {call}() does not take. Fix: pass it as a SciPy "
                         f"sparse matrix, {call}(A{after}) (a networkx graph G of nodes 0..n-1: A = "
                         "nx.to_scipy_sparse_array(G, nodelist=range(len(G))), since without nodelist row i is the "
                         f"i-th node added, not node i; an (m, 2) array of edges E: {_EDGES}), or as its CSR arrays, {call}(indptr, "
                         f"indices{after}).")


_EDGES = "A = scipy.sparse.coo_array((np.ones(len(u)), (u, v)), shape=(n, n)) (u, v = E[:, 0], E[:, 1])"


def _networkx(a) -> bool:
    return type(a).__module__.split(".")[0] == "networkx"


def _offsets_like(a) -> bool:
    """Whether `a` could be meant as a CSR's offsets: a 1-D device array, or what NumPy reads as a
    1-D array of numbers (a float or bool one is told its own mistake by the CSR check)."""
    if _networkx(a):  # NumPy reads a networkx graph as its node ids
        return False
    try:
        cai = getattr(a, "__cuda_array_interface__", None)
        if cai is not None:
            return len(cai.get("shape", ())) == 1
        arr = np.asarray(a)
    except Exception:  # noqa: BLE001 - ragged lists, objects NumPy cannot hold, an interface that raises
        return False
    return arr.ndim == 1 and arr.dtype != object


def _graph_and_indices(call: str, g, after: str, named: str) -> ArgumentError:
    """The error of `call` given the whole graph `g` and indices too (`named` as the caller wrote them)."""
    return ArgumentError(f"{call}() was given the whole graph ({a_type(g)}) and {named} too. Fix: pass the graph "
                         f"alone, {call}(A{after}), or its CSR arrays, {call}(indptr, indices{after}).")


def indices_by_name(call: str, then_name: str) -> Callable[[Callable], Callable]:
    """Decorator of a graph call `call(indptr, indices=None, <then_name>=None)`: `indices=` named
    beside a whole graph or a Graph is refused (an ArgumentError), where the call would otherwise
    read it as `then_name`, as it reads `call(A, x)`; only the position says which was meant."""

    def wrap(fn):
        @functools.wraps(fn)
        def call_(*args, **kwargs):
            if kwargs.get("indices") is not None:  # the default named is the default
                g = args[0] if args else kwargs.get("indptr")
                if is_graph(g):
                    raise ArgumentError(f"{call}() was given a Graph and indices= too. Fix: pass the Graph alone, "
                                        f"{call}(g, {then_name}) or g.{call}({then_name}).")
                if whole_graph(g):
                    raise _graph_and_indices(call, g, f", {then_name}", "indices=")
            return fn(*args, **kwargs)
        return call_
    return wrap


def _pair(a) -> bool:
    """Whether `a` is a tuple or list of two arrays (or lists): a graph's (indptr, indices) as one."""
    return type(a) in (tuple, list) and len(a) == 2 and all(  # exactly: a CSR is a named tuple, and a graph
        isinstance(x, list) or np.ndim(x) == 1 and (isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__"))
        for x in a)


def _no_array(a) -> bool:
    """Whether `a` is nothing an array can be read from: no sequence, no array interface (None, a
    LinearOperator, a function, a Graph or a queue)."""
    return isinstance(a, NotACollection) or not (
        hasattr(a, "__len__") or hasattr(a, "__array__") or hasattr(a, "__array_interface__")
        or hasattr(a, "__cuda_array_interface__") or hasattr(a, "copy_to_host"))


def _square(a) -> bool:
    """Whether `a` is a square 2-D host array or list of lists: a dense adjacency matrix."""
    if not (isinstance(a, np.ndarray) or isinstance(a, list) and a and isinstance(a[0], (list, tuple, np.ndarray))):
        return False  # (a flat list is not read here: its reading is the CSR reader's)
    try:
        shape = np.shape(a)
    except ValueError:  # ragged
        return False
    return len(shape) == 2 and shape[0] == shape[1] and shape[0] > 0


def _arrays_of(g, call: str) -> tuple:
    """(indptr, indices) of a whole graph: a CSR's, else a square sparse matrix's in CSR form."""
    if isinstance(g, CSR):
        return g.indptr, g.indices
    shape = getattr(g, "shape", None)
    if not isinstance(shape, tuple) or len(shape) != 2 or shape[0] != shape[1]:
        raise DispatchError(f"{call}(): the graph is {a_type(g)} of shape {shape}, but an adjacency matrix is square "
                            "(row v and column v are both vertex v). Fix: pass an n x n matrix for a graph of n "
                            "vertices.")
    if getattr(g, "format", "csr") != "csr":
        _check_size(shape[0], getattr(g, "nnz", 0))  # before the conversion, whose offsets alone could be huge
        g = g.tocsr()  # the same matrix: rows stay rows
    return g.indptr, g.indices


def _as_index_array(a, name: str, call: str = CHECK_CSR, whole: str | None = None,
                    not_array: str | None = None) -> np.ndarray:
    """`a` as a 1-D host integer array, else a DispatchError. Where `a` is a whole sparse graph,
    the Fix is `whole` where given, else to make `call` (the user's call, with a sparse matrix A's
    arrays); where it is no array at all (None, a set, a generator), `not_array` where given."""
    if whole_graph(a):
        if whole is not None:
            fix = whole
        elif getattr(a, "format", "csr") == "csr":
            fix = f"pass the graph alone, in indptr's place: {call}"
        else:  # a CSC's arrays are its transpose's; COO, LIL and the rest have none
            fix = f"pass the graph alone, in indptr's place (any format is read as CSR): {call}"
        raise DispatchError(f"{name} is {a_type(a)} (a whole sparse graph), not an array of integers. "
                            f"Fix: {fix}.")
    if hasattr(a, "copy_to_host") and not hasattr(a, "__cuda_array_interface__"):  # the CUDA simulator's
        raise DispatchError(f"{name} is a CUDA-simulator array; graph calls take device arrays only on a GPU. Fix: "
                            f"pass NumPy arrays ({name}.copy_to_host()).")
    if hasattr(a, "__cuda_array_interface__"):
        raise DispatchError(f"{name} is a device array, but this path takes host arrays. Fix: pass NumPy arrays "
                            "(or call the device path with device arrays for both indptr and indices).")
    if isinstance(a, str):
        raise DispatchError(f"{name} is a str, not an array of integers. Fix: pass a list or array of integers.")
    refuse_misread(a, name, not_bool="a vertex id", masked=f"pass a plain array ({name}.filled(...) or "
                                                           f"{name}.compressed(), whichever the graph means).")
    try:
        arr = np.asarray(a) if not isinstance(a, np.ndarray) else a
    except MemoryError:
        raise
    except Exception as e:  # ragged nested lists, objects NumPy cannot hold, an __array__ that raises
        raise DispatchError(f"{name} is not an array of integers ({e}). Fix: pass a flat list or 1-D array of "
                            "integers (nested lists of different lengths are no array).") from None
    # integers NumPy read as floats (uint64 with int64) or as objects (past 64 bits)
    arr = as_ints(a, arr, name, "pass only vertex ids and offsets, which are below 2**31 (the one named is none); "
                  f"{name} as int64 then holds them all.")
    if arr.size == 0 and arr.dtype.kind == "f" and not isinstance(a, np.ndarray):  # `[]` reads as float64
        arr = arr.astype(np.int64)
    if arr.dtype == object and arr.ndim == 0:  # no array at all (a LinearOperator, a function): NumPy wrapped it
        raise DispatchError(f"{name} is {a_type(a)}, not an array of integers. Fix: " + (
            not_array or f"pass 1-D arrays of integers, or a SciPy sparse matrix A whole: {call}."))
    if arr.dtype == np.bool_:
        raise DispatchError(f"{name} holds bools; a bool is not a vertex id. Fix: pass integers (np.flatnonzero(mask) "
                            "gives the ids a mask marks).")
    if arr.dtype.kind == "f":  # a whole float may be made an id; any other would be truncated
        flat = arr.reshape(-1)
        bad = np.flatnonzero(~np.isfinite(flat) | (flat != np.trunc(flat)) | (np.abs(flat) >= 2.0**63))
        if bad.size and np.isfinite(flat[bad[0]]) and flat[bad[0]] == np.trunc(flat[bad[0]]):  # whole, past int64
            k = int(bad[0])
            raise DispatchError(f"{name}[{k}] is {float(flat[k])!r}, past any int64, so it is no vertex id or offset. "
                                "Fix: pass integers only, each a vertex id or an offset into indices.")
        if bad.size:
            k, v = int(bad[0]), float(flat[bad[0]])
            what = "NaN (a missing value?)" if v != v else f"{v!r}, not a whole number"
            raise DispatchError(f"{name}[{k}] is {what}, so it is no vertex id or offset. Fix: pass integers only.")
        said = " (its values are whole)" if arr.size else ""
        raise DispatchError(f"{name} has dtype {arr.dtype}, not an integer type{said}. Fix: pass "
                            f"np.asarray({name}).astype(np.int64).")
    odd = next(((k, v) for k, v in enumerate(arr.reshape(-1)) if isinstance(v, (bool, np.bool_))
                or not isinstance(v, INTEGERS)), None) if arr.dtype == object else None
    if odd is not None:  # as_ints took integers held as objects: this item is something else
        raise DispatchError(f"{name}[{odd[0]}] is {shown(odd[1], 40)} ({a_type(odd[1])}), so it is no vertex id or "
                            "offset. Fix: pass integers only.")
    if arr.dtype == object or arr.dtype.kind not in "iu":  # an empty object array too
        raise DispatchError(f"{name} has dtype {arr.dtype}, not an integer type. Fix: pass integers "
                            f"(np.asarray({name}, dtype=np.int64) where they are held as {arr.dtype}).")
    if arr.ndim != 1:
        raise DispatchError(f"{name} has shape {arr.shape}, not 1-D. Fix: pass a flat array ({flat_fix(a, name)}).")
    return arr


def checked_graph(g, what: str) -> CSR:
    """`g` checked as `check_csr` checks, else a DispatchError. Every time: a CSR's arrays may be
    the caller's, changed since an earlier check (a copy would double the graph's memory). The
    check is a few vectorised passes over the whole graph, so a search that reaches little of a
    large graph costs more than it did when a checked CSR was trusted (3.6 ms against 0.3 ms on
    2 M vertices): the price of never indexing with arrays that changed."""
    if is_graph(g):
        raise DispatchError(f"{what} takes a CSR, not a Graph. Fix: pass g.to_csr().")
    if not isinstance(g, CSR):
        args = "A" if whole_graph(g) else "indptr, indices"
        raise DispatchError(f"{what} takes a CSR, not {a_type(g)}. Fix: pass check_csr({args}).")
    return check_csr(*g)


def check_csr(indptr: "ArrayIn | Any", indices: ArrayIn | None = None) -> CSR:
    """`(indptr, indices)` as a CSR graph, or a DispatchError saying what is wrong and how to fix it:
    integer 1-D arrays, indptr starting at 0, never decreasing and ending at len(indices), every
    index a vertex (0 <= v < len(indptr) - 1), fewer than 2**31 vertices and entries. int64
    arrays are held as they are, not copied: the CSR sees later changes to them. `check_csr(A)`
    reads a SciPy sparse matrix A's graph (any format, as CSR)."""
    indptr, indices, _ = graph_arguments(indptr, indices, None, "check_csr")
    return _check_csr(indptr, indices)


def _check_csr(indptr, indices, call: str = CHECK_CSR) -> CSR:
    indptr = _as_index_array(indptr, "indptr", call)
    indices = _as_index_array(indices, "indices", call)
    if indptr.size == 0:
        raise DispatchError("indptr is empty; a CSR graph of n vertices has n + 1 offsets. "
                            "Fix: pass np.zeros(1, np.int64) for the empty graph.")
    n, nnz = indptr.size - 1, indices.size
    _check_size(n, nnz)
    if indptr[0] != 0 or indptr[-1] != nnz:
        raise DispatchError(f"indptr runs from {int(indptr[0])} to {int(indptr[-1])}, but must run from 0 to "
                            f"len(indices) = {nnz}. Fix: pass the indptr and indices of one CSR (A.indptr "
                            "with A.indices), or the SciPy matrix A whole.")
    falls = indptr[1:] < indptr[:-1]  # not np.diff, which wraps around in unsigned and narrow types
    if falls.any():
        v = int(np.argmax(falls))
        raise DispatchError(f"indptr decreases at vertex {v} ({int(indptr[v])} -> {int(indptr[v + 1])}); offsets "
                            "must never decrease. Fix: build the CSR from the edges, "
                            "A = scipy.sparse.csr_array((np.ones(m), (src, dst)), shape=(n, n)), and pass A.")
    if nnz:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= n:
            bad = int(np.flatnonzero((indices < 0) | (indices >= n))[0])
            raise DispatchError(f"indices[{bad}] = {int(indices[bad])} is not a vertex of this {n}-vertex graph. "
                                "Fix: keep every index a vertex id: give indptr n + 1 offsets for ids 0..n-1, and "
                                "drop the entries below 0 or past the last vertex.")
    return CSR(indptr.astype(np.int64, copy=False), indices.astype(np.int64, copy=False))


def edges(g: CSR) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) of every entry, in CSR order."""
    src = np.repeat(np.arange(g.n, dtype=np.int64), np.diff(g.indptr))
    return src, g.indices


def check_device_csr(backend, indptr, indices, n: int, hub: int = 256, symmetric: bool = False,
                     call: str = CHECK_CSR) -> bool:
    """Check a CSR already on the device (ends, monotone offsets, indices in range, and where
    `symmetric` every edge stored both ways) without copying it back: one pass over it counts the
    violations (`csr_kernels.check`; one synchronisation), and a graph not yet found symmetric takes
    one more (`_check_device_symmetric`). Returns whether some vertex has more than `hub` neighbours."""
    return enqueue_check(backend, indptr, indices, n, hub, symmetric, call)()


def enqueue_check(backend, indptr, indices, n: int, hub: int = 256, symmetric: bool = False,
                  call: str = CHECK_CSR) -> Callable[[], bool]:
    """`check_device_csr` enqueued on the backend's stream; the function returned waits for it,
    raises DispatchError for a bad CSR and returns whether some vertex has more than `hub`
    neighbours. Work enqueued between may read the CSR but must not write through it. Where
    `symmetric`, the pass also fingerprints the contents for `_check_device_symmetric` (`call` names
    the call in its Fix)."""
    from ..gpu.numba_launch import launchers
    from .csr_kernels import check

    bad = backend.empty(6, np.int64)
    nnz = int(indices.shape[0] if hasattr(indices, "shape") else indices.__cuda_array_interface__["shape"][0])
    blocks = max(1, min(-(-max(n, nnz) // 256), backend.caps.sm_count * 16))
    launchers(backend.stream)(check, blocks, 256, indptr, indices, n, hub, bool(symmetric), SECRET, bad)

    def result() -> bool:
        counts = backend.download(bad)  # the one synchronisation of a valid CSR
        if counts[2] or counts[3]:
            first, last = (int(x) for x in backend.download(indptr, 0, 1).tolist() + backend.download(indptr, n, 1).tolist())
            raise DispatchError(f"indptr runs from {first} to {last}, but must run from 0 to len(indices) = {nnz}. "
                                "Fix: pass the indptr and indices of one CSR (A.indptr with A.indices), or the "
                                "SciPy matrix A whole.")
        if counts[0]:
            raise DispatchError(f"indptr decreases at {int(counts[0])} vertices; offsets must never decrease. "
                                "Fix: build the CSR from the edges, A = scipy.sparse.csr_array((np.ones(m), "
                                "(src, dst)), shape=(n, n)), and pass A.")
        if counts[1]:
            raise DispatchError(f"{int(counts[1])} indices are not vertices of this {n}-vertex graph. "
                                "Fix: keep every index a vertex id: give indptr n + 1 offsets for ids 0..n-1, and "
                                "drop the entries below 0 or past the last vertex.")
        if symmetric:
            _check_device_symmetric(backend, indptr, indices, n, nnz, int(counts[5]), call)
        return bool(counts[4])
    return result


_SYMMETRIC: LRUCache = LRUCache(64)  # (n, nnz, fingerprint) of device CSRs found symmetric


def _check_device_symmetric(backend, indptr, indices, n: int, nnz: int, fingerprint: int, call: str) -> None:
    """`check_symmetric` of a valid CSR on the device, remembered by its contents' fingerprint (the
    check's pass computes it): the sums of `csr_kernels.edge_sums`, and only where they differ (an
    edge stored one way, or twice one way and once the other) the CSR copied to the host and checked
    as a host CSR is, which shows an edge or passes the repeated one. The sums cost several times
    the check's pass (1.4 ms against 0.33 on an R-MAT graph of 2^27 entries, H100), once a graph
    rather than once a call."""
    from ..gpu.numba_launch import launchers
    from .csr_kernels import SUMS_RUN, SUMS_THREADS, edge_sums

    key = (n, nnz, fingerprint)
    if nnz == 0 or _SYMMETRIC.get(key) is not None:
        return
    sums = backend.empty(2, np.int64)
    tiles = -(-nnz // (SUMS_THREADS * SUMS_RUN))
    launchers(backend.stream)(edge_sums(), max(1, min(tiles, backend.caps.sm_count * 8)), SUMS_THREADS,
                              indptr, indices, n, SECRET, sums)
    ahead, back = backend.download(sums).tolist()
    if ahead != back:
        check_symmetric(_check_csr(backend.download(indptr), backend.download(indices), call))
    _SYMMETRIC.put(key, True)


def resolve(indptr, indices, backend, symmetric, call: str) -> tuple:
    """(backend, CSR on the host or None, vertex count, on the device) of a graph algorithm's CSR
    arguments: both arrays on the host or both on the device (then the backend must be the GPU),
    `symmetric` a bool, host CSRs checked here (device ones by the caller, on the device); `call`
    the algorithm's call with a sparse matrix A's arrays, for a Fix."""
    from ..backend import resolve_backend

    flag(symmetric, "symmetric", "pass True only for a CSR that stores every edge both ways.")
    on_device = [hasattr(a, "__cuda_array_interface__") for a in (indptr, indices)]
    if on_device[0] != on_device[1]:
        raise DispatchError("indptr and indices are not both on the device or both on the host. "
                            "Fix: pass both as NumPy arrays or both as device arrays.")
    be = resolve_backend(backend)
    if not on_device[0]:
        g = _check_csr(indptr, indices, call)
        if symmetric:
            check_symmetric(g)
        return be, g, g.n, False
    if be.name != "cuda":
        chose = "was chosen" if backend is not None else "is what None chose (no GPU is usable here)"
        fix = ("pass backend='cuda' (or None), or host arrays" if backend is not None else
               "copy the arrays to the host (x.copy_to_host(), cupy.asnumpy(x), x.cpu().numpy()) and pass those")
        raise DispatchError(f"the CSR is on the device but backend {be.name!r}, which runs on the CPU, {chose}. "
                            f"Fix: {fix}.")
    n = _device_index_array(indptr, "indptr") - 1
    nnz = _device_index_array(indices, "indices")
    if n < 0:
        raise DispatchError("indptr is empty; a CSR graph of n vertices has n + 1 offsets. "
                            "Fix: pass a one-element indptr [0] for the empty graph.")
    _check_size(n, nnz)  # as on the host: the kernels keep vertex ids and counts in 32 bits
    return be, None, n, True


_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
# Mixed into every key the symmetry sums and the device fingerprint hash, drawn afresh by each
# process: a set of one-way edges whose sums agree by design (a red-team found one in a minute for
# unkeyed sums) must be made without knowing it. By chance, sums agree once in 2**64. 63 bits, so
# Numba types it as the int64 it always was.
SECRET = secrets.randbits(63)


def _mixed(key: np.ndarray) -> np.ndarray:
    """A 64-bit mix of each key with SECRET (splitmix64's finaliser): sums of these tell multisets
    apart."""
    key = key ^ np.uint64(SECRET)
    key = key ^ (key >> np.uint64(30))
    key *= _MIX[0]
    key ^= key >> np.uint64(27)
    key *= _MIX[1]
    return key ^ (key >> np.uint64(31))


def _pieces(g: CSR, piece: int, first: int = 0, last: int | None = None):
    """(sources, targets) as uint64 of vertices first..last-1's entries (all by default), in CSR
    order, whole vertices at a time of about `piece` entries (one vertex alone where it has more):
    a vertex's entries, repeated edges among them, come in one piece."""
    ip, last = g.indptr, g.n if last is None else last
    v = first
    while v < last:
        w = min(last, max(v + 1, int(np.searchsorted(ip, ip[v] + piece, "right")) - 1))
        rows = np.repeat(np.arange(v, w, dtype=np.uint64), np.diff(ip[v:w + 1]))
        yield rows, g.indices[ip[v]:ip[w]].astype(np.uint64)
        v = w


def edge_sums_host(g: CSR, piece: int = 1 << 16) -> np.ndarray:
    """[the sum of mix(u * n + v), the sum of mix(v * n + u)] (`_mixed`, with SECRET) over the
    entries u -> v, as uint64 modulo 2**64: equal where the entries and the reversed entries are
    one multiset (the twin of `csr_kernels.edge_sums`)."""
    sums, scale = np.zeros(2, np.uint64), np.uint64(g.n)
    with np.errstate(over="ignore"):
        for r, c in _pieces(g, piece):
            sums += _mixed(r * scale + c).sum(dtype=np.uint64), _mixed(c * scale + r).sum(dtype=np.uint64)
    return sums


def check_symmetric(g: CSR, piece: int = 1 << 16) -> None:
    """Refuse a host CSR that stores some edge u -> v but not v -> u, for `symmetric=True` (an edge
    stored twice counts as stored). Sums of mixed keys compare the entries with the reversed
    entries, `piece` entries at a time (memory for a piece, never for the graph): first as
    multisets, which agree for every CSR stored once each way; where they differ, as sets of
    distinct edges; where those differ too, the same sums a block of vertices, then the first such
    block's edges, find an edge to show."""
    n, scale = g.n, np.uint64(g.n)
    sums = edge_sums_host(g, piece)
    with np.errstate(over="ignore"):
        if sums[0] == sums[1]:
            return
        blocks = np.uint64(min(n, 256))  # a key's block: its first vertex's
        ahead, back = np.zeros(int(blocks), np.uint64), np.zeros(int(blocks), np.uint64)
        for r, c in _pieces(g, piece):
            key = unique(r * scale + c)  # distinct: a vertex's entries are all in its piece
            r, c = key // scale, key % scale
            np.add.at(ahead, r * blocks // scale, _mixed(key))
            np.add.at(back, c * blocks // scale, _mixed(c * scale + r))
    if np.array_equal(ahead, back):
        return
    k, nb = int(np.argmax(ahead != back)), int(blocks)
    first, last = -(-k * n // nb), -(-(k + 1) * n // nb)  # the vertices v with v * blocks // n == k
    own = unique(np.concatenate([np.zeros(0, np.uint64)] + [
        r * scale + c for r, c in _pieces(g, piece, first, last)]))
    into = unique(np.concatenate([np.zeros(0, np.uint64)] + [
        (c * scale + r)[(c >= first) & (c < last)] for r, c in _pieces(g, piece)]))
    alone = np.setdiff1d(own, into, assume_unique=True)
    if alone.size:
        u, v = divmod(int(alone[0]), n)
    else:  # a reversed key with no key its way: the edge v -> u is stored, u -> v is not
        v, u = divmod(int(np.setdiff1d(into, own, assume_unique=True)[0]), n)
    raise DispatchError(f"symmetric=True, but the edge {u} -> {v} is stored and {v} -> {u} is not (symmetric "
                        "promises every edge stored both ways). Fix: pass symmetric=False, or store every edge "
                        "both ways: for a SciPy matrix A, P = A.copy(); P.data[:] = 1; pass P + P.T (its explicit "
                        "zeros are edges too, which A + A.T would drop).")


def _check_size(n: int, nnz: int) -> None:
    if n >= 2**31 or nnz >= 2**31:
        raise DispatchError(f"the graph has {n} vertices and {nnz} entries; vertex ids and offsets are 32-bit. "
                            "Fix: split the graph into pieces of fewer than 2**31 vertices and entries.")


def _device_index_array(a, name: str) -> int:
    cai = a.__cuda_array_interface__
    dt = interface_dtype(cai)
    if dt.kind not in "iu" or dt.itemsize < 4:
        raise DispatchError(f"{name} on the device has dtype {dt}, not a 32- or 64-bit integer. "
                            f"Fix: convert it (e.g. {name}.astype('int64')) before the call.")
    if len(cai["shape"]) != 1:
        raise DispatchError(f"{name} has shape {tuple(cai['shape'])}, not 1-D. Fix: pass a flat array "
                            f"({name}.reshape(-1)).")
    return int(cai["shape"][0])
