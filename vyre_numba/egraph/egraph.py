"""`EGraph`: a columnar e-graph that stays where its backend keeps it (device memory on the GPU,
host arrays on the reference backend), with batched add / union / find / lookup / rebuild.

Layout, one row per e-node, rows in the order given:

    eclass[r]                      the row's e-class id (after a rebuild: the smallest id in its class)
    op[r]                          operator id (the index of its name in `ops`, where names are known)
    children[offsets[r]:offsets[r+1]]   the row's children, e-class ids, in order

Class ids are 0 .. n_classes-1 (one more than the largest id given or added); a union-find over
them (`parent`) records which are merged. Ids are below 2**31 - 1 (they are int32 on the device),
and an e-graph holds fewer than 2**29 rows (its hash table keeps 4 int32-addressed slots a row).
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from .. import display
from ..backend import as_ints
from ..errors import (INTEGERS, BackendUnavailableError, DispatchError, HostMemoryError, NotACollection, a_type,
                      flag, flat_fix, host_memory, refuse_misread, shown, told)
from ..owned import Unshared
from ..progress import check_progress
from ..unique import count_distinct, index_of, unique, unique_rows
from .signature import signature_heads

from ..backend import Backend  # noqa: F401  (the annotations name it: typing.get_type_hints reads them)

MAX_ID = 2**31 - 2
MAX_ROWS = 2**29 - 1  # the device's hash table keeps 4 slots a row, addressed by int32 slot ids


@dataclass(frozen=True, repr=False, eq=False)  # compared and hashed by identity, as every run's timings differ
class RebuildStats(display.Shown):
    """What a rebuild did: rounds run, classes it merged (`unions`: by congruence; the unions the
    caller asked for before it are not counted, see `ClosureResult.merged`), rows (re)hashed in
    all, whether it reached the fixed point, device nanoseconds in all and per phase (CUDA events on
    the GPU; on the reference backend the CPU is the device, timed by the host clock) and host
    seconds in all."""

    rounds: int
    unions: int
    nodes_touched: int
    converged: bool
    device_ns: int
    seconds: float
    phase_ns: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _timings(self)


@dataclass(frozen=True, repr=False, eq=False)  # holds an array: compared and hashed by identity
class ClosureResult(display.Shown):
    """Congruence closure of an e-graph: `eclass` (the canonical class of each row, the smallest id
    in its class, aligned with the rows), rounds, classes merged, classes before and after, whether
    it reached the fixed point within its rounds (`converged`), and the rebuild's device
    nanoseconds in all and per phase, and its host seconds."""

    eclass: np.ndarray
    rounds: int
    merged: int
    classes_before: int
    classes_after: int
    converged: bool
    device_ns: int
    seconds: float
    phase_ns: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _timings(self)


def _timings(result) -> None:
    """Device times as `Duration`s (ints that read as `41.3 us`)."""
    object.__setattr__(result, "device_ns", display.Duration(result.device_ns))
    object.__setattr__(result, "phase_ns", display.durations(result.phase_ns))


SPARSE_IDS = 16  # class ids may outnumber the rows this many times (past a MiB's worth): else renumber them
IDS_FIX = ("renumber every class id (eclass, children and pairs alike) with one mapping, densely from 0: ids = "
           "np.unique(eclass); eclass = np.searchsorted(ids, eclass); children = np.searchsorted(ids, children) "
           "(ids are int32 on the device).")
OPS_FIX = ("renumber the operator ids densely from 0 with one mapping: kinds, op = np.unique(op, return_inverse=True) "
           "(ops=[name of each of kinds], where the e-graph has operator names).")


def _ints(a, name: str, *, lo: int = 0, hi: int = MAX_ID, copy: bool = True, bounds: list | None = None,
          fix: str | None = None, why: str | None = None) -> np.ndarray:
    """`a` as a 1-D int64 NumPy array, checked: integers only (no floats or bools), within [lo, hi];
    `a` itself where it already is one and `copy` is off (for callers that never write it).
    `bounds`: (smallest, largest) is appended to it, None for an empty array. `fix`: what a
    value out of range is told (by default: renumber ids, or keep within lo..hi), after `why`."""
    if hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray):
        raise DispatchError(f"{name} is a device array; e-graphs are built from host arrays (they are checked and "
                            f"indexed on the host first). Fix: pass a NumPy array (e.g. x.copy_to_host()).")
    x, being = (name, "") if name.isidentifier() else ("x", f", x being {name}")
    refuse_misread(a, name, not_bool="an id", masked=f"pass {x}.compressed() or {x}.filled(...), whichever the ids "
                                                     f"mean{being}.")
    try:
        arr = np.asarray(a)
    except MemoryError as e:
        raise HostMemoryError(f"{name} does not fit in the host's memory as an array{told(e)}. Fix: pass less "
                              "data at a time, or free host memory first.") from None
    except Exception as e:  # ragged lists and the like
        raise DispatchError(f"{name} is not an array of integers ({e}). Fix: pass a 1-D NumPy integer array.") from e
    fix = fix or (IDS_FIX if hi == MAX_ID else f"keep every value in {lo}..{hi}.")
    arr = as_ints(a, arr, name, fix)
    if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        if arr.size == 0 and arr.dtype.kind == "f":  # [] comes in as float64
            arr = arr.astype(np.int64)
        else:
            raise DispatchError(f"{name} has dtype {arr.dtype}; it must hold integers. Fix: pass an integer array "
                                + ("(a bool is no id)." if arr.dtype == np.bool_ else
                                   "(ids are not converted, so a float id is never rounded silently)."
                                   if arr.dtype.kind == "f" else "of the ids meant."))
    if arr.ndim != 1:
        raise DispatchError(f"{name} has shape {arr.shape}; it must be 1-D. Fix: pass a flat array "
                            f"({flat_fix(a, name)}).")
    low = high = None
    if arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < lo or high > hi:
            bad = low if low < lo else high
            where = f"outside {lo}..{hi}" if hi >= lo else "where no value is valid"
            raise DispatchError(f"{name} holds {bad}, {where}{'; ' + why if why else ''}. Fix: {fix}")
    if bounds is not None:
        bounds.append(None if low is None else (low, high))
    return arr.astype(np.int64, copy=copy)


def _count(value, name: str, fix: str, *, lo: int = 1, hi: int | None = None) -> int:
    """`value` as an int in [lo, hi]: a Python or NumPy integer, never a bool or a float."""
    if isinstance(value, (bool, np.bool_)):
        raise DispatchError(f"{name} is {shown(value)}; a bool is not a count. Fix: {fix}")
    if not isinstance(value, INTEGERS) or value < lo or (hi is not None and value > hi):
        raise DispatchError(f"{name} is {shown(value, 60)}. Fix: {fix}")
    return int(value)


def _max_rounds(max_rounds) -> int | None:
    if max_rounds is None:
        return None
    return _count(max_rounds, "max_rounds", "pass a positive int, or None to run to the fixed point.")


_PAIRS_FIX = "pass [[a, b]] for one pair of class ids, np.stack([a, b], axis=1) for arrays a and b of them."


def _op_names(ops) -> list[str] | None:
    """`ops` as a list of distinct operator names (None stays None); names are never made from other values."""
    if ops is None:
        return None
    if not isinstance(ops, (list, tuple, np.ndarray)) or (isinstance(ops, np.ndarray) and ops.ndim != 1):
        raise DispatchError(f"ops is {shown(ops, 60)}; it is a list of operator names, one per operator id. "
                            "Fix: pass e.g. ops=['Add', 'Mul'] (or None).")
    bad = [o for o in ops if not isinstance(o, str)]  # a list, not next(..., None): None may be the item
    if bad:
        fix = ("[o.decode() for o in ops] (str(b'Add') is \"b'Add'\", a name no later call would spell)"
               if isinstance(bad[0], (bytes, np.bytes_)) else "[str(o) for o in ops] if numbers are meant as names")
        raise DispatchError(f"ops holds {shown(bad[0], 60)} ({type(bad[0]).__name__}); operator names are str. "
                            f"Fix: pass names, e.g. {fix}.")
    names = [str(o) for o in ops]
    if len(set(names)) != len(names):
        seen: set = set()
        dup = next(o for o in names if o in seen or seen.add(o))
        raise DispatchError(f"ops names {shown(dup)} twice; each name is one operator id. Fix: pass distinct names.")
    return names


def _same_length(eclass: np.ndarray, op: np.ndarray, what: str) -> None:
    if eclass.size != op.size:
        raise DispatchError(f"{what}: eclass has {eclass.size} entries and op {op.size}; there is one of each per "
                            "e-node. Fix: pass arrays of equal length.")


def _classes_of_rows(eclass: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(the class ids some row is in, ascending; a mark per id below the largest, or None): by
    marks where ids are dense (one pass, no sort: e-graphs of 2**24 rows are built often)."""
    top = int(eclass.max(initial=-1)) + 1
    if top > 8 * eclass.size + 1024:
        return unique(eclass), None
    present = np.zeros(top, bool)
    present[eclass] = True
    return np.flatnonzero(present), present


def _missing_class(have: np.ndarray, present: np.ndarray | None, children: np.ndarray) -> int | None:
    """The position of a child naming a class no row is in (see `_classes_of_rows`), or None."""
    if children.size == 0:
        return None
    if have.size == 0:
        return 0
    if present is not None:
        if int(children.max()) >= present.size:
            return int(np.argmax(children >= present.size))
        bad = ~present[children]
    else:
        bad = have[np.minimum(index_of(have, children), have.size - 1)] != children
    return int(np.argmax(bad)) if bad.any() else None


def _rows(op, children_offsets, children, n_classes: int | None, what: str, copy: bool = True,
          bounds: list | None = None, eclass: tuple | None = None):
    """(op, offsets, children) of a batch of e-nodes, checked (`copy` as for `_ints`; `bounds`: the
    children's, as `_ints` gives them; `eclass`: (the rows' classes, what they are called), one
    class per op, checked first)."""
    op = _ints(op, f"{what} op", copy=copy, fix=OPS_FIX if n_classes is None else
               "use the operator ids the e-graph's rows use, 0..2147483646 (g.ops names them, where it has names).")
    if eclass is not None:  # a short op is told as such, not as offsets one too many
        _same_length(eclass[0], op, eclass[1])
    offsets = _ints(children_offsets, f"{what} children_offsets", hi=2**62, copy=copy,
                    fix="children_offsets are positions in children: pass np.concatenate([[0], np.cumsum(arities)]).")
    if offsets.size != op.size + 1:
        raise DispatchError(f"{what} children_offsets has {offsets.size} entries for {op.size} e-nodes; it needs "
                            f"{op.size + 1} (row r's children are children[offsets[r]:offsets[r+1]]). Fix: pass n+1 "
                            "offsets starting at 0.")
    why = fix = None
    if n_classes is not None:
        why = ("children name classes already in the e-graph, and it has none yet" if n_classes == 0 else
               "children name classes already in the e-graph; a batch's own e-nodes get their ids when added")
        fix = ("add the leaves (e-nodes without children) first, then the e-nodes over them in a later call."
               if n_classes == 0 else f"keep every child in 0..{n_classes - 1}, adding a child's e-node in an "
               "earlier call.")
    children = _ints(children, f"{what} children", hi=MAX_ID if n_classes is None else max(n_classes - 1, -1),
                     copy=copy, bounds=bounds, fix=fix, why=why)
    down = np.flatnonzero(offsets[1:] < offsets[:-1])
    if offsets[0] != 0 or down.size or offsets[-1] != children.size:
        seen = (f"it decreases at e-node {int(down[0])} ({offsets[down[0]]} then {offsets[down[0] + 1]})" if down.size
                else f"it starts at {offsets[0]} and ends at {offsets[-1]}")
        raise DispatchError(f"{what} children_offsets must start at 0, never decrease and end at len(children) "
                            f"= {children.size}; {seen}. Fix: pass np.concatenate([[0], np.cumsum(arities)]).")
    return op, offsets, children


def _serial(method: Callable) -> Callable:
    """The method run under the e-graph's lock: one call at a time, so threads sharing an e-graph
    never interleave the steps of an add (look up, number, append) or read rows half appended."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return call


def _resolve(backend):
    from ..backend import resolve_backend

    return resolve_backend(backend)


class EGraph(NotACollection, Unshared):
    """A columnar e-graph (see the module docstring for the layout). Build one with
    `from_arrays`, `from_terms` or `from_serialized`; release its device memory with `close()` or
    `with`. Operations are batched: pass arrays, get arrays."""

    _collection_fix = ("e.n_nodes and e.n_classes are its sizes; e.classes() gives every row's class, e.rows() "
                       "its arrays, and e.find(ids) the classes of given ids.")

    @host_memory("building the e-graph")
    def __init__(self, eclass: ArrayLike, op: ArrayLike, children_offsets: ArrayLike, children: ArrayLike, *,
                 ops: Sequence[str] | None = None, backend: "Backend | str | None" = None,
                 table_capacity: int | None = None):
        """The rows as given (see `from_arrays`)."""
        self._lock = threading.RLock()  # public calls one at a time (`_serial`); a close waits for the call in flight
        eclass = _ints(eclass, "eclass")
        op, offsets, children = _rows(op, children_offsets, children, None, "the e-graph's",
                                      eclass=(eclass, "the e-graph"))
        _check_row_limit(0, op.size)
        have, present = _classes_of_rows(eclass)
        k = _missing_class(have, present, children)
        if k is not None:
            bad, row = int(children[k]), int(np.searchsorted(offsets, k, side="right")) - 1
            raise DispatchError(f"a child refers to class {bad} (row {row}), but no e-node is in class {bad}. "
                                "Fix: children are e-class ids of e-nodes in the graph (ids that eclass holds).")
        n_classes = int(eclass.max(initial=-1)) + 1
        if n_classes > SPARSE_IDS * op.size + (1 << 20):  # the union-find keeps an entry for every id below the largest
            raise DispatchError(f"eclass holds ids up to {n_classes - 1} for {op.size} e-nodes; the union-find keeps "
                                f"an entry for every id below the largest ({n_classes * 8 / 2**20:,.0f} MiB here), so "
                                f"ids this sparse cost memory for nothing. Fix: {IDS_FIX}")
        if table_capacity is not None:
            table_capacity = _count(table_capacity, "table_capacity", "pass a positive int up to 2**31 (or None: "
                                    "the table starts at 4 slots a row and grows when full).", hi=2**31)
        ops = _op_names(ops)
        if ops is not None and op.size and int(op.max()) >= len(ops):
            raise DispatchError(f"op holds {int(op.max())} but only {len(ops)} operator names were given. "
                                "Fix: pass one name per operator id.")
        self._ops = ops  # the e-graph's own: rows name operators by index, so `ops` hands out a tuple
        self._be = _resolve(backend)
        self._meta = None  # what egraph-serialize JSON held besides the rows (`from_serialized` keeps it)
        if self.backend == "cuda":
            from .device import DeviceEGraph

            self._g = DeviceEGraph(eclass, op, offsets, children, n_classes, table_capacity)
        else:
            from .host import HostEGraph

            self._g = HostEGraph(eclass, op, offsets, children, n_classes, table_capacity)
        self._term_classes = None
        self._pending = True  # the rows have never been checked for congruence
        self._unioned = False  # unions made since the last rebuild: children may not be canonical
        # the class ids given rows, where some id below n_classes has none (no child of `add` may name it)
        self._with_rows = None if have.size == n_classes else have

    _read_only_fix = ("change the e-graph through its calls (add, union, rebuild), or make a new one with "
                      "EGraph.from_arrays / from_terms / from_serialized")

    @property
    def backend(self) -> str:
        """The name of the backend the e-graph lives on: "cuda" or "reference"."""
        return self._be.name

    @property
    def term_classes(self) -> np.ndarray | None:
        """The class of each term given to `from_terms`, in order (read-only); None for an e-graph
        made otherwise."""
        return self._term_classes

    # --- constructors ----------------------------------------------------------------------
    @property
    def ops(self) -> tuple[str, ...] | None:
        """The operator names, by operator id (a tuple: the rows name operators by index, so the
        names are the e-graph's to keep; `add` appends new ones), or None where ops are ids only."""
        return None if self._ops is None else tuple(self._ops)

    @classmethod
    def from_arrays(cls, eclass: ArrayLike, op: ArrayLike, children_offsets: ArrayLike, children: ArrayLike, *,
                    ops: Sequence[str] | None = None, backend: "Backend | str | None" = None,
                    table_capacity: int | None = None) -> "EGraph":
        """An e-graph of the given rows, kept in the given order: row r is an e-node in class
        eclass[r] with operator op[r] and children (class ids) children[children_offsets[r]:
        children_offsets[r+1]]. Congruent rows are merged by the first `rebuild()`. `ops`: the
        operator names, one per operator id (None: operators are plain ids, and `add` takes ids);
        `backend`: None for the GPU where present, else the reference backend; `table_capacity`:
        the GPU hash table's first size in slots (None: 4 a row; it grows when full; unused on the
        reference backend, which keeps no such table)."""
        return cls(eclass, op, children_offsets, children, ops=ops, backend=backend, table_capacity=table_capacity)

    @classmethod
    def from_terms(cls, terms: Sequence[Any], *, backend: "Backend | str | None" = None) -> "EGraph":
        """An e-graph of Python terms, hash-consed: a term is a tuple (operator, child terms...) or
        a leaf (a str, int or float, an operator without children). Equal subterms share a class;
        `egraph.term_classes` lists the class of each given term. Leaves are typed, as egglog's
        literals are: a str is an operator name; an int (Python or NumPy) and a float are literals
        equal where their type and value are (1 and np.int64(1) are one leaf; 1.0 and "1" are
        others; 0.0 and -0.0 one leaf, and every NaN one). A number is named by its text in `ops`,
        its type appended where a str has that text ("1:int" beside "1")."""
        from .serialize import rows_of_terms

        eclass, op, offsets, children, ops, roots = rows_of_terms(terms)
        g = cls(eclass, op, offsets, children, ops=ops, backend=backend)
        roots.setflags(write=False)  # the e-graph's own record: a write through it would change it for all
        g._term_classes = roots
        return g

    @classmethod
    def from_serialized(cls, data: "str | bytes | bytearray | dict", *, backend: "Backend | str | None" = None) -> "EGraph":
        """An e-graph from egraph-serialize JSON (what egglog's `serialize(...).to_json()` writes):
        one row per node, in the file's order, its e-class and children looked up by name. Node
        ids are strings (or ints, written back as the strings JSON makes of them). A dict given is
        copied: changing it later does not change the e-graph."""
        from .serialize import rows_of_serialized

        eclass, op, offsets, children, ops, meta = rows_of_serialized(data)
        g = cls(eclass, op, offsets, children, ops=ops, backend=backend)
        g._meta = meta
        return g

    @_serial
    def to_serialized(self) -> str:
        """egraph-serialize JSON of the e-graph as it is now: after a rebuild, merged nodes share
        their class's canonical name; `class_data` keeps each class's data read in under its name,
        merged classes' too (nothing is lost); `root_eclasses` names each root's class as it is
        now, in the order read, each once; any other key read at the top level is written back as
        read."""
        from .serialize import serialized_of_rows

        return serialized_of_rows(self._host_rows(), self._ops, self._meta)

    # --- state -----------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        """The number of rows (e-nodes)."""
        return self._live().n

    @property
    def n_classes(self) -> int:
        """Class ids in use: one more than the largest (merged ids included)."""
        return self._live().n_classes

    def _live(self):
        if self._g is None:
            raise DispatchError("this EGraph was closed. Fix: build a new one.")
        return self._g

    def _host_rows(self) -> dict[str, np.ndarray]:
        return self._live().download()

    @_serial
    def rows(self) -> dict[str, np.ndarray]:
        """Host copies of the rows as they are now: `eclass`, `op`, `children_offsets`, `children`
        (the arguments of `from_arrays`; after a rebuild, children are canonical)."""
        r = self._host_rows()
        return {"eclass": r["eclass"], "op": r["op"], "children_offsets": r["offsets"], "children": r["children"]}

    @_serial
    def classes(self) -> np.ndarray:
        """The canonical class of every row (the smallest id in its class), as a NumPy array."""
        return self._live().classes()

    @_serial
    def close(self) -> None:
        """Release the e-graph's device memory (once; later calls do nothing)."""
        self._g = None

    @property
    def closed(self) -> bool:
        """Whether `close()` has released the e-graph's memory (then every use is refused)."""
        return self._g is None

    def __enter__(self) -> "EGraph":
        self._live()  # a closed one is refused here, as a closed file is, not at the first call inside
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _unless_busy(self, show: Callable, busy: Callable[[str], str]) -> str:
        """`show(self)` under the lock, or at once `busy(text)` saying so where another thread's call
        holds it: a debugger's repr or Jupyter's display must not wait behind a rebuild."""
        if not self._lock.acquire(blocking=False):
            return busy(f"EGraph(busy: another thread's call is running, backend={self.backend!r})")
        try:
            return show(self)
        finally:
            self._lock.release()

    def __repr__(self) -> str:
        from .view import text

        return self._unless_busy(text, str)

    def _repr_html_(self) -> str:
        """The e-classes as boxes holding their e-nodes, edges to the children's classes (Graphviz
        SVG where `graphviz` is installed, a table otherwise); a summary past a few hundred e-nodes."""
        import html as escape

        from .view import html

        return self._unless_busy(html, lambda text: f"<pre>{escape.escape(text)}</pre>")

    @_serial
    def to_graphviz(self, limit: int | None = 300) -> Any:
        """A `graphviz.Digraph` drawing of the e-graph (at most `limit` e-nodes; None: all)."""
        from .view import to_graphviz

        try:
            return to_graphviz(self, limit)
        except ImportError as e:
            raise BackendUnavailableError(f"drawing an e-graph needs the graphviz package ({e}). "
                                          "Fix: pip install graphviz.") from None

    # --- operations ------------------------------------------------------------------------
    def _ids(self, ids, name: str) -> np.ndarray:
        if self.n_classes == 0:  # no range to name: "outside 0..-1" would say nothing
            arr = _ints(ids, name)
            if arr.size:
                raise DispatchError(f"{name} names class ids, but this e-graph has none yet. Fix: add e-nodes first.")
            return arr
        return _ints(ids, name, hi=self.n_classes - 1)

    @_serial
    def union(self, pairs: ArrayLike) -> None:
        """Merge the classes of each pair (a (k, 2) array of class ids, each in 0..n_classes - 1, an
        empty class's too). Congruence is restored by the next `rebuild()` (or by `add`, `lookup`
        and the closure, which rebuild first)."""
        g = self._live()
        refuse_misread(pairs, "pairs", not_bool="a class id", masked="pass the pairs to merge without the masked "
                                                                      "ones (pairs[~pairs.mask.any(axis=1)].data).")
        try:
            arr = np.asarray(pairs) if not hasattr(pairs, "__cuda_array_interface__") else pairs
        except MemoryError as e:
            raise HostMemoryError(f"pairs does not fit in the host's memory as an array{told(e)}. Fix: merge fewer "
                                  "pairs a call, or free host memory first.") from None
        except Exception as e:  # ragged rows; an object whose conversion raises (a tensor that needs grad)
            raise DispatchError(f"pairs is not a (k, 2) array ({type(e).__name__}: {e}). Fix: {_PAIRS_FIX}") from None
        arr = as_ints(pairs, arr, "pairs", IDS_FIX) if isinstance(arr, np.ndarray) else arr
        shape = getattr(arr, "shape", None)
        if shape == (0,):  # [] : no unions
            return
        if getattr(arr, "ndim", None) != 2 or shape[1] != 2:
            what = f"has shape {shape}" if isinstance(pairs, (np.ndarray, list, tuple)) or hasattr(
                pairs, "__array__") or hasattr(pairs, "__cuda_array_interface__") else f"is {a_type(pairs)}"
            raise DispatchError(f"pairs {what}; union takes a (k, 2) array of class ids. Fix: {_PAIRS_FIX}")
        a = self._ids(arr[:, 0], "pairs[:, 0]")
        b = self._ids(arr[:, 1], "pairs[:, 1]")
        if a.size:  # marked first: an interrupted union may have merged some classes
            self._pending = self._unioned = True
        g.union(a, b)

    @_serial
    def find(self, ids: ArrayLike) -> "np.ndarray | np.int64":
        """The canonical id (smallest in its class) of each class id, or of one id given alone (as
        `unique.index_of` answers a scalar with one); valid at any time."""
        if (isinstance(ids, INTEGERS) or isinstance(ids, np.ndarray) and ids.ndim == 0 and ids.dtype.kind in "iu") \
                and not isinstance(ids, (bool, np.bool_)):  # one id, a 0-d array too (as bfs takes a source)
            one = self._ids([int(ids)], "ids")
            return self._live().find(one)[0]
        ids = self._ids(ids, "ids")  # first: converting them runs the caller's code, which may close the e-graph
        return self._live().find(ids)

    @_serial
    def rebuild(self, *, max_rounds: int | None = None, progress: bool | None = None,
                persistent: bool = True) -> RebuildStats:
        """Restore the invariants: every child canonical, no two rows with equal (operator,
        canonical children) in different classes. Incremental on the GPU: a round revisits only the
        rows that use a class merged in the round before. `max_rounds`: stop after that many rounds
        (None, the default: at the fixed point; `converged` says whether it was reached, and the
        rebuild stays pending where it was not). `progress`: a bar of rounds, None (the
        default) once the rebuild has run a second, True at once, False never. `persistent`: on
        the GPU, small rounds run in one persistent launch (their device time is the phase
        "on_device"); False launches every round from the host, a read of its count each, so that
        each phase has a device time of its own (the same rounds, slower). The reference backend's
        rounds are always the host's."""
        from ..progress import bar

        max_rounds = _max_rounds(max_rounds)
        persistent = flag(persistent, "persistent", "pass True (small rounds in one persistent launch on the GPU) "
                                                    "or False (every round launched from the host).")
        g = self._live()
        b = bar(progress, desc="e-graph rebuild", unit="round")
        self._pending = self._unioned = True  # until it finishes: an interrupted rebuild leaves rows to visit again
        from ..progress import stopped

        try:
            s = g.rebuild(max_rounds, None if b is None else lambda: b.update(1), persistent)
        except BaseException:
            if b is not None:  # red, or gone where its length was unknown: not finished-looking
                stopped(b)
            raise
        if b is not None:
            b.close()
        self._pending = self._unioned = not s["converged"]
        return RebuildStats(s["rounds"], s["unions"], s["nodes_touched"], s["converged"], s["device_ns"],
                            s["seconds"], s["phase_ns"])

    def _rebuilt(self) -> None:
        """Hash-consing compares canonical children, so queries after unions rebuild first."""
        if self._pending:
            self.rebuild()

    @_serial
    def lookup(self, op: ArrayLike, children_offsets: ArrayLike, children: ArrayLike) -> np.ndarray:
        """The class of the e-node equal to each given one (children canonicalised first), or -1.
        Rebuilds first if unions are pending: equality is only meaningful on canonical children.
        `op` as in `add` (a name the e-graph has never seen finds nothing)."""
        check_progress(None)  # its rebuild's bar setting, read before anything runs
        op, new_ops = self._op_ids(op, "lookup")
        op, offsets, children = _rows(op, children_offsets, children, self.n_classes, "lookup")
        self._check_op_ids(op, len(new_ops))
        self._rebuilt()  # after the checks: a refused call leaves an unconverged e-graph as it was
        return self._live().lookup(op, offsets, children)

    def _op_ids(self, op, what: str) -> tuple[Any, list[str]]:
        """(operator ids, names new to the e-graph) of `op`, which holds ids or, where the e-graph
        names its operators, names; a new name gets the next id (no row has it yet)."""
        if hasattr(op, "__cuda_array_interface__"):
            return op, []
        if isinstance(op, (str, np.str_)):
            raise DispatchError(f"{what} op is the str {shown(op, 60)}; op holds one operator (a name or an id) per "
                                f"e-node. Fix: pass a list, e.g. [{shown(op, 60)}].")
        try:  # a pandas column of names too, as NumPy reads it
            arr = op if isinstance(op, (list, tuple, np.ndarray)) else np.asarray(op)
        except Exception:  # not an array: _rows says what it takes
            arr = None
        names = op if isinstance(op, (list, tuple)) else (
            arr.tolist() if isinstance(arr, np.ndarray) and arr.ndim == 1 and arr.dtype.kind in "UOS" else None)
        if names is not None and any(isinstance(x, bytes) for x in names):  # (np.bytes_ is one)
            raise DispatchError(f"{what} op holds bytes ({shown(next(x for x in names if isinstance(x, bytes)), 40)}); "
                                "operator names are str. Fix: decode them, [x.decode() for x in op] (or "
                                "np.char.decode(op) for an array).")
        if names is None or not any(isinstance(x, str) for x in names):
            return op, []
        k = next((i for i, x in enumerate(names) if not isinstance(x, str)), None)
        if k is not None:
            x = names[k]
            if x is None or isinstance(x, float) and x != x or type(x).__name__ in ("NAType", "NaTType"):
                raise DispatchError(f"{what} op has no operator name at position {k} ({shown(x, 40)}), among names. "
                                    "Fix: name every e-node's operator (fill the gaps, e.g. s.fillna('name'), or drop "
                                    "those rows).")
            raise DispatchError(f"{what} op mixes operator names and ids (position {k} holds {shown(x, 40)}). Fix: "
                                "pass all names or all ids.")
        if self._ops is None:
            raise DispatchError(f"{what} op holds names, but this e-graph has no operator names. Fix: pass operator "
                                "ids, or build the e-graph with names (from_terms, from_serialized, or ops=[...]).")
        index = {name: i for i, name in enumerate(self._ops)}
        new: list[str] = []
        for x in names:
            if x not in index:
                index[x] = len(self._ops) + len(new)
                new.append(str(x))  # a str subclass (np.str_) kept as the str from_arrays makes of a name
        return np.array([index[x] for x in names], np.int64), new

    def _check_op_ids(self, op: np.ndarray, new: int) -> None:
        """Where the e-graph names its operators, every id must name one (of them or the `new`
        names of this call)."""
        if self._ops is not None and op.size and int(op.max()) >= len(self._ops) + new:
            raise DispatchError(f"op holds {int(op.max())}, but the e-graph names {len(self._ops)} operators. "
                                "Fix: use an operator id below that, or the operator's name.")

    @_serial
    def add(self, op: ArrayLike, children_offsets: ArrayLike, children: ArrayLike) -> np.ndarray:
        """Add e-nodes (children: existing class ids) and return their classes, hash-consed: an
        e-node equal to an existing one (after canonicalising children), or to an earlier one of
        the batch, returns that one's class and adds no row. Rebuilds first if unions are pending.
        `op` holds operator ids or, where the e-graph names its operators, names: a new name
        becomes a new operator (appended to `ops`). A refused add changes nothing (pending unions
        stay pending); an interrupted one either added nothing or added its rows with their names."""
        check_progress(None)  # read by the rebuilds it runs: a bad setting is refused before any row goes in
        op, new_ops = self._op_ids(op, "add")
        op, offsets, children = _rows(op, children_offsets, children, self.n_classes, "add")
        self._check_op_ids(op, len(new_ops))
        g = self._live()
        canon = g.find(children) if children.size else children  # exact before a rebuild too
        self._check_children(children, canon)
        base = self.n_classes
        if self._pending:
            if base + op.size - 1 > MAX_ID or g.n + op.size > MAX_ROWS:  # which e-nodes exist is known only
                # after the rebuild, which a refused add must not run: bound them now
                most = int(np.count_nonzero(signature_heads(op, offsets, canon) == np.arange(op.size)))
                _check_id_limit(base, most, "up to ", _REBUILD_FIRST)
                _check_row_limit(g.n, most, "up to ", _REBUILD_FIRST)
            self.rebuild()
            canon = g.find(children) if children.size else children
        out = g.lookup(op, offsets, canon)
        new = np.flatnonzero(out < 0)
        if not new.size:
            return out
        n_off, n_children = _take_rows(offsets, canon, new)
        head = signature_heads(op[new], n_off, n_children)  # equal e-nodes of the batch: one row
        first = head == np.arange(new.size)
        _check_id_limit(base, int(first.sum()))
        _check_row_limit(g.n, int(first.sum()))
        out[new] = base + (np.cumsum(first) - 1)[head]
        fresh = new[first]
        f_off, f_children = _take_rows(offsets, canon, fresh)
        rows, names = g.n, len(self._ops) if self._ops is not None else 0
        self._pending = True  # from here on: the next query files the new rows for hash-consing
        try:  # names before rows: a name without a row is harmless, a row without its name is not
            if new_ops:
                self._ops.extend(new_ops)
            g.append(np.arange(base, base + fresh.size), op[fresh], f_off, f_children, base + fresh.size)
        except BaseException:
            if g.n == rows and new_ops:  # the rows never went in
                del self._ops[names:]
            raise
        try:
            self.rebuild()  # new rows go into the hash table (they are equal to no row, so nothing merges)
        except BaseException as e:
            e.add_note(f"add: its {fresh.size} new e-node(s) were added, with their operator names; only the "
                       "rebuild that files them for hash-consing stopped, and the next add, lookup or rebuild "
                       "runs it.")
            raise
        return out

    def _check_children(self, children: np.ndarray, canon: np.ndarray) -> None:
        """Refuse a child whose class has no e-node (an id below n_classes that no row was given)."""
        if self._with_rows is None or children.size == 0:
            return
        known = self._with_rows
        odd = known[np.minimum(index_of(known, children), known.size - 1)] != children
        odd &= children < known[-1]  # ids past the first rows' are classes that `add` made, each with a row
        if odd.any():
            live = unique(self._live().classes())  # a union may have joined the id to a class with rows
            roots = canon[odd]
            empty = live[np.minimum(index_of(live, roots), live.size - 1)] != roots
            if empty.any():
                bad = int(children[odd][np.argmax(empty)])
                raise DispatchError(f"add: a child refers to class {bad}, but no e-node is in class {bad}. "
                                    "Fix: children are e-class ids of e-nodes in the graph.")


def _check_id_limit(base: int, count: int, what: str = "", fix: str = " Split the graph.") -> None:
    if base + count - 1 > MAX_ID:
        raise DispatchError(f"adding {what}{count} classes passes the id limit {MAX_ID}; nothing was added. Fix:{fix}")


_REBUILD_FIRST = " Call rebuild() first (then only e-nodes not in the e-graph count), or split the graph."


def _check_row_limit(rows: int, count: int, what: str = "",
                     fix: str = " split the e-graph (distributed.congruence_closure works on partitions).") -> None:
    if rows + count > MAX_ROWS:
        raise DispatchError(f"{what}{rows + count} e-nodes (rows) pass the e-graph's limit of 2**29 - 1: its hash "
                            "table keeps 4 slots a row, addressed by 32-bit slot ids on the device; nothing was "
                            f"added. Fix:{fix}")


def _take_rows(offsets: np.ndarray, children: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, children) of the listed rows alone, in the order listed."""
    arity = (offsets[1:] - offsets[:-1])[rows]
    sub = np.zeros(rows.size + 1, np.int64)
    np.cumsum(arity, out=sub[1:])
    idx = np.repeat(offsets[rows] - sub[:-1], arity) + np.arange(int(sub[-1]), dtype=np.int64)
    return sub, children[idx]


@host_memory("congruence_closure")
def congruence_closure(egraph: "EGraph | tuple", unions: ArrayLike | None = None, *, backend: "Backend | str | None" = None,
                       max_rounds: int | None = None, progress: bool | None = None) -> ClosureResult:
    """Apply `unions` ((k, 2) class ids) to `egraph` (an EGraph, changed in place, or a tuple
    (eclass, op, children_offsets, children) built on `backend`) and rebuild to the fixed point:
    the canonical class of every row, rounds, classes merged and per-phase times. `max_rounds`
    and `progress` as in `EGraph.rebuild`."""
    max_rounds = _max_rounds(max_rounds)
    check_progress(progress)  # before the unions change the e-graph
    if not isinstance(egraph, EGraph):
        if not (isinstance(egraph, (tuple, list)) and len(egraph) == 4):
            items = f" of {len(egraph)} items" if isinstance(egraph, (tuple, list)) else ""
            raise DispatchError(f"egraph is {a_type(egraph)}{items}. Fix: pass an EGraph or a tuple of four "
                                "arrays (eclass, op, children_offsets, children).")
        egraph = EGraph.from_arrays(*egraph, backend=backend)
    elif backend is not None:
        from ..backend import resolve_backend

        name = resolve_backend(backend).name
        if name != egraph.backend:
            raise DispatchError(f"backend={shown(backend)}, but this EGraph lives on {egraph.backend!r} and computes "
                                "there. Fix: leave backend out for an EGraph (or build it on that backend).")
    with egraph._lock:  # the unions, the rebuild and the classes read, with no other thread's call between
        before = _class_count(egraph)
        if unions is not None:
            egraph.union(unions)
        s = egraph.rebuild(max_rounds=max_rounds, progress=progress)
        eclass = egraph.classes()
    after = count_distinct(eclass)
    return ClosureResult(eclass, s.rounds, before - after, before, after, s.converged, s.device_ns, s.seconds,
                         s.phase_ns)


def _class_count(egraph: "EGraph") -> int:
    return count_distinct(egraph.classes())


def structural_equivalences(egraph: "EGraph", *, capacity: int | None = None) -> np.ndarray:
    """Unique (min, max) class pairs found in one pass over the rows as they are: for every group
    of rows with equal (operator, children), its smallest class with each other class in it.
    The pair buffer starts at `capacity`; if more pairs are found, the pass runs again with room
    for all of them (nothing is dropped). Raises if unions are pending (children not canonical)."""
    from .device import check_rebuilt

    if not isinstance(egraph, EGraph):
        raise DispatchError(f"egraph is {a_type(egraph)}. Fix: pass an EGraph (EGraph.from_arrays(...)).")
    if capacity is not None:
        capacity = _count(capacity, "capacity", "pass a non-negative int (or None).", lo=0)
    with egraph._lock:
        g = egraph._live()
        check_rebuilt(egraph._unioned, "structural_equivalences")
        cap = capacity if capacity is not None else max(16, g.n // 8)
        cap = min(cap, max(g.n, 1))  # a row adds at most one pair: more room would go unused
        pairs, found = g.structural_pairs(cap)
        if found > cap:
            pairs, found = g.structural_pairs(found)
    pairs = pairs[:found]
    return unique_rows(pairs) if pairs.size else pairs.reshape(0, 2).astype(np.int64)
