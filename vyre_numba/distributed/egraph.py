"""E-graph congruence closure over a Dask cluster: e-nodes partitioned across workers, congruent
e-nodes brought together by the hash of their canonical signature.

A round:
1. Send: every partition joins the last round's forests (the class pairs every owner found, or the
   unions given, in the first round) into its copy of the canonical map, and sends each of its rows
   whose children changed class (all of them in the first round) to the worker that owns its
   signature's hash, as (operator, canonical children, canonical class, hash).
2. Match: every owner groups what it received with the signatures it kept from earlier rounds
   (exact comparison; a hash only chooses the owner and the candidates), and emits, for each group
   holding more than one class, its smallest class paired with each other one. It keeps one entry
   a signature, indexed by hash, so a round searches what it kept instead of sorting it again.
3. Merge: each owner's pairs are reduced to a forest where they live; every partition joins all
   the forests in the next round's step 1, so no task gathers them and no merge crosses to the
   host. No pair anywhere: the fixed point.

Partitions given as Dask futures stay on the workers that hold them and are checked there; only
their sizes and largest ids come to the client, and `gather=False` leaves the classes there too.

Where: on a GPU worker both steps run on its device (`egraph_device.py`): the partition (its rows
and the canonical map) stays there and step 1 finds, canonicalises and splits the rows whose
children moved there; an owner keeps its signatures there as a hash table, and a batch sent to an
owner on the same worker never leaves the GPU, and one for a worker of the same host goes from GPU
to GPU (CUDA IPC); the owners' forests are made on their GPUs and joined into each partition's map
on its own. CPU workers run all steps with NumPy.

Invariants: every partition joins the same forests, so all copies of the map are equal after step 1;
a signature kept from an earlier round stays true (merging only makes more e-nodes equal), so old
entries are never wrong, only redundant; every row whose canonical signature changed is sent again,
so two e-nodes congruent at the end were compared at their owner; at the fixed point no group holds
two classes, which is the single-GPU rebuild's invariant."""
from __future__ import annotations

import time

import numpy as np
from numpy.typing import ArrayLike
from typing import Any

from ..backend import as_ints
from ..egraph import ClosureResult, EGraph
from ..egraph.egraph import IDS_FIX, SPARSE_IDS, _ints, _rows, _take_rows
from ..egraph.signature import signature_hash, signature_heads
from ..errors import INTEGERS, DispatchError, a_type, flag, host_memory, refuse_misread, shown
from ..unique import _inserted, count_distinct, unique, unique_rows
from . import cluster
from .egraph_device import DeviceKept, DevicePart
from .unionfind import _forest, union

from ..backend import Backend  # noqa: F401  (the annotations name it: typing.get_type_hints reads them)

_EMPTY_ROWS = (np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
               np.zeros(0, np.uint64))


class EPart:
    """A partition of e-nodes on its worker: its rows as given and its copy of the canonical map.
    Never changed in place (a round makes a new one), so Dask may rerun any round's task."""

    def __init__(self, eclass, op, offsets, children, canon, row_of=None):
        self.eclass, self.op, self.offsets, self.children, self.canon = eclass, op, offsets, children, canon
        self._row_of = row_of

    @property
    def row_of(self) -> np.ndarray:
        """The row of each child (made once a partition, shared by the rounds' partitions)."""
        if self._row_of is None:
            self._row_of = np.repeat(np.arange(self.op.size), np.diff(self.offsets))
        return self._row_of


def _shipped(part: tuple) -> tuple:
    """A checked partition as it travels to its worker: ids (checked to fit) as int32, offsets as
    int32 where they fit, so the task graph carries half the bytes."""
    eclass, op, off, ch = part
    narrow = off.dtype if off.size and off[-1] > np.iinfo(np.int32).max else np.int32
    return eclass.astype(np.int32), op.astype(np.int32), off.astype(narrow), ch.astype(np.int32)


def _start(bname, shipped: tuple, n_classes: int):
    """(Runs on a worker.) The partition, from its checked rows (`_shipped`, or as held there): on a
    GPU worker its rows and map go to the device."""
    from ..backend import resolve_backend

    eclass, op, offsets, children = shipped
    be = resolve_backend(bname)
    offsets = np.asarray(offsets, np.int64)
    if be.name == "cuda":
        return DevicePart(be.name, eclass, op, offsets, children, n_classes)
    eclass, op, children = (np.asarray(a, np.int64) for a in (eclass, op, children))  # never written
    return EPart(eclass, op, offsets, children, np.arange(n_classes, dtype=np.int64))


def _by_owner(rows: tuple, owners: int) -> list:
    """The rows each owner receives: those whose hash is its number modulo the owners (one
    owner: all of them, as they are)."""
    if owners == 1:
        return [rows]
    dest = (rows[4] % np.uint64(owners)).astype(np.int64)
    return [_subset(rows, np.flatnonzero(dest == o)) for o in range(owners)]


def _concat(rows: list) -> tuple:
    """Rows (op, offsets, children, class, hash) of several batches as one batch."""
    rows = [r for r in rows if r[0].size] or [_EMPTY_ROWS]
    if len(rows) == 1:  # rows are never written in place, so one batch is its own concatenation
        return tuple(rows[0][:5])
    op = np.concatenate([r[0] for r in rows])
    sizes = np.concatenate([np.diff(r[1]) for r in rows])
    off = np.zeros(op.size + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    return (op, off, np.concatenate([r[2] for r in rows]), np.concatenate([r[3] for r in rows]),
            np.concatenate([r[4] for r in rows]))


def _subset(rows: tuple, keep: np.ndarray) -> tuple:
    off, ch = _take_rows(rows[1], rows[2], keep)
    return rows[0][keep], off, ch, rows[3][keep], rows[4][keep]


def _joined(canon: np.ndarray, forests) -> np.ndarray:
    """`canon` (each class id's root) with the sets the (k, 2) class id pairs of `forests` make
    joined, each id under its set's smallest root; `canon` itself where they move no id."""
    pairs = [f for f in forests if f.size]
    if not pairs:
        return canon
    pairs = np.concatenate(pairs).astype(np.int64, copy=False)
    a, b = canon[pairs[:, 0]], canon[pairs[:, 1]]
    differ = a != b
    ids, roots = union(np.stack([a[differ], b[differ]], 1))
    if not ids.size:
        return canon
    table = np.arange(canon.size, dtype=np.int64)
    table[ids] = roots
    return table[canon]


def _send(p, forests, owners: int, first: bool, shared: bool = False) -> tuple:
    """(the partition with the forests joined into its map, rows to send to each owner, rows sent);
    `forests`: (k, 2) class id pairs (the owners' forests, or the unions given); `shared`: the
    workers' GPUs hand each other device arrays (`cluster.shares_memory`)."""
    if isinstance(p, DevicePart):
        from .egraph_device import send

        return send(p, forests, owners, first, shared)
    canon = _joined(p.canon, forests)
    q = EPart(p.eclass, p.op, p.offsets, p.children, canon, p._row_of)
    if first:  # every row, as it is
        op, off, ch = p.op, p.offsets, canon[p.children]
        rows = (op, off, ch, canon[p.eclass], signature_hash(op, off, ch, q.row_of))
        return q, _by_owner(rows, owners), int(op.size)
    if canon is not p.canon:
        moved = canon != p.canon
        dirty = unique(q.row_of[moved[p.children]])  # q's own: p is its task's input, never written
    else:
        dirty = np.zeros(0, np.int64)
    off, ch = _take_rows(p.offsets, canon[p.children] if p.children.size else p.children, dirty)
    op = p.op[dirty]
    rows = (op, off, ch, canon[p.eclass[dirty]], signature_hash(op, off, ch))
    return q, _by_owner(rows, owners), int(dirty.size)


def _settled(p, forests):
    """The partition with the forests joined into its map, nothing sent (the round `max_rounds`
    stopped short of)."""
    if isinstance(p, DevicePart):
        from .egraph_device import settled

        return settled(p, forests)
    return EPart(p.eclass, p.op, p.offsets, p.children, _joined(p.canon, forests), p._row_of)


def _send_task(p, owners: int, first: bool, shared: bool, *forests) -> tuple:
    """`_send` as a task: (the partition, the rows for owner 0, ..., for owner `owners` - 1), each an
    item Dask hands on alone."""
    q, out, _ = _send(p, forests, owners, first, shared)
    return (q, *out)


_NO_KEPT = _EMPTY_ROWS + (np.zeros(0, np.uint64), np.zeros(0, np.int64))


def _no_kept(bname: str = "reference"):
    """An owner's kept signatures before the first round: rows (see `_match`) and their index, or
    on a GPU worker its table (`egraph_device.DeviceKept`)."""
    from ..backend import resolve_backend

    if resolve_backend(bname).name == "cuda":
        return DeviceKept(bname)
    return _NO_KEPT


def _match(kept: tuple, part, *incoming: tuple) -> tuple:
    """(the signatures kept after this round, (k, 2) class pairs to merge). `kept`: rows (op,
    offsets, children, class, hash), one a distinct signature, then their hashes ascending and the
    rows in that order (the index a round searches, so it never sorts what it kept). Kept classes
    were canonical a round ago: the map of `part` (a partition on the owner's worker, this round's
    step 1 done) makes them canonical now; the incoming ones already are.

    The incoming rows meet the kept rows sharing a hash with one of them; each group of equal
    signatures pairs its smallest class with every other; a kept row (a group's first, since kept
    signatures are distinct) takes its group's smallest class, and an incoming row whose signature
    is new is kept. On a GPU worker (`kept` a `DeviceKept`), `egraph_device.match` does it."""
    if isinstance(kept, DeviceKept):
        from .egraph_device import match

        return match(kept, part, *incoming)
    rows = kept[:3] + (part.canon[kept[3]],) + kept[4:5]
    hs, order = kept[5], kept[6]
    new = _concat(list(incoming))
    if not new[0].size:
        return rows + (hs, order), np.zeros((0, 2), np.int64)
    old = _rows_hashed(hs, order, new[4])
    sub = _concat([_subset(rows, old), new])
    head, by_hash = signature_heads(sub[0], sub[1], sub[2], sub[4], with_order=True)
    c = sub[3]
    low = c.copy()
    np.minimum.at(low, head, c)
    a, b = low[head], c
    differ = a != b
    pairs = unique_rows(np.stack([a[differ], b[differ]], 1)) if differ.any() else np.zeros((0, 2), np.int64)
    first = head == np.arange(head.size)
    cls = rows[3]
    if old.size:
        cls = cls.copy() if cls is kept[3] else cls  # never written in place: Dask may rerun a round
        cls[old] = low[:old.size]
    first[:old.size] = False
    fresh = np.flatnonzero(first)
    added = sub if fresh.size == head.size else _subset(sub, fresh)  # every row new and distinct: as it is
    added = added[:3] + (low[fresh],) + added[4:]
    out = _concat([rows[:3] + (cls,) + rows[4:], added])  # just `added` in the first round
    rank = np.cumsum(first) - 1  # a fresh row's place among the added ones
    ranked = rank[by_hash[first[by_hash]]]  # the added rows, ascending by hash
    at = np.searchsorted(hs, added[4][ranked])
    return out + (_inserted(hs, at, added[4][ranked]), _inserted(order, at, ranked + rows[0].size)), pairs


def _rows_hashed(hs: np.ndarray, order: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The rows (ascending, each once) whose hash is one of `wanted`, from the rows' hashes in
    ascending order `hs` and the rows in that order."""
    lo = np.searchsorted(hs, wanted, "left")
    span = np.searchsorted(hs, wanted, "right") - lo
    total = int(span.sum())
    if not total:
        return np.zeros(0, np.int64)
    starts = np.cumsum(span) - span
    return unique(order[np.repeat(lo - starts, span) + np.arange(total)])


def _pairs(*forests: np.ndarray) -> int:
    return sum(int(f.shape[0]) for f in forests)


def _classes(p) -> np.ndarray:
    if isinstance(p, DevicePart):
        from .steps import relabel

        ops, n = p.ops(), p.n_rows
        out = ops.scratch(max(n, 1), np.int32)  # int32: half the bytes to the client
        ops.run(relabel, n, [out, p.canon, p.eclass, 0])
        return ops.download(out)[:n]
    return p.canon[p.eclass]


def _match_task(bname, n_classes: int, kept, part, *incoming) -> tuple:
    """`_match` and `_forest_of` as one task: (the signatures kept, the owner's forest)."""
    matched = _match(kept, part, *incoming)
    return matched[0], _forest_of(bname, n_classes, matched)


def _forest_of(bname, n_classes: int, matched: tuple) -> np.ndarray:
    """An owner's class pairs (`_match`'s) reduced to (id, smallest id of its set) rows, on its GPU
    if it has one."""
    from ..backend import resolve_backend

    pairs = matched[1]
    if pairs.size and resolve_backend(bname).name == "cuda":
        from .egraph_device import forest

        return forest("cuda", n_classes, pairs)
    return _forest(pairs)


def _marks(classes: np.ndarray, n_classes: int) -> np.ndarray:
    """The class ids among `classes`, as bits (n_classes of them, packed, lowest first)."""
    seen = np.zeros(n_classes, bool)
    seen[classes] = True
    return np.packbits(seen, bitorder="little")


def _marks_of(p, n_classes: int, children: bool = False) -> np.ndarray:
    """(Runs on a worker.) `_marks` of a partition's classes, with `children` stacked over those of
    the ids its children name ((2, bytes)); on its GPU, if it has one."""
    if isinstance(p, DevicePart):
        from .egraph_device import marks

        got = [marks(p)] + ([marks(p, True)] if children else [])
    else:
        got = [_marks(p.eclass, n_classes)] + ([_marks(p.children, n_classes)] if children else [])
    return np.stack(got)


def _present(marks) -> np.ndarray:
    """The ids any partition's rows are in, as bits, from the partitions' `_marks_of`."""
    return np.bitwise_or.reduce([np.atleast_2d(m)[0] for m in marks]) if marks else np.zeros(0, np.uint8)


def _census(*marks: np.ndarray) -> tuple[int, int]:
    """(how many class ids any partition's rows are in, the smallest id some partition's children
    name but no partition's rows are in or -1), from the partitions' `_marks_of` with children."""
    present = _present(marks)
    missing = np.bitwise_or.reduce([m[1] for m in marks]) & ~present if marks else present
    at = np.flatnonzero(missing)
    first = -1 if not at.size else int(at[0]) * 8 + int(np.flatnonzero(np.unpackbits(missing[at[:1]],
                                                                                     bitorder="little"))[0])
    return int(np.bitwise_count(present).sum()), first


def _after(p, *marks: np.ndarray) -> int:
    """How many classes the ids any partition's rows are in (`_marks_of`) are in under the map of
    the partition `p` (every partition's is the same)."""
    present = _present(marks)
    if isinstance(p, DevicePart):
        from .egraph_device import distinct_roots

        return distinct_roots(p, present)
    return count_distinct(p.canon[np.flatnonzero(np.unpackbits(present, bitorder="little"))])


def _pending_unions(g) -> np.ndarray:
    """(root, id) for every class id of an EGraph that its unions (rebuilt or still pending) put
    under another: its rows name classes as they were built or last rebuilt, and unions given
    with the call may name any id, so the closure starts from everything the EGraph knows."""
    if not isinstance(g, EGraph):
        return np.zeros((0, 2), np.int64)
    ids = np.arange(g.n_classes, dtype=np.int64)
    roots = g.find(ids).astype(np.int64)
    moved = roots != ids
    return np.stack([roots[moved], ids[moved]], 1)


def _partitions(egraph_partitions, partitions, k_workers: int) -> list[tuple]:
    """The partitions as checked host rows."""
    if isinstance(egraph_partitions, EGraph):
        rows = egraph_partitions.rows()
        whole = [(rows["eclass"], rows["op"], rows["children_offsets"], rows["children"])]
    elif isinstance(egraph_partitions, tuple) and len(egraph_partitions) == 4 and _ids(egraph_partitions[0]):
        whole = [egraph_partitions]
    elif (isinstance(egraph_partitions, tuple) and egraph_partitions
          and all(isinstance(x, np.ndarray) for x in egraph_partitions)):
        raise DispatchError(f"egraph_partitions is a tuple of {len(egraph_partitions)} arrays; one e-graph is a tuple "
                            "of 4. Fix: pass (eclass, op, children_offsets, children), or a list of such tuples, "
                            "one per partition.")
    elif isinstance(egraph_partitions, (list, tuple)):
        if partitions is not None:
            raise DispatchError("partitions= splits one e-graph; these are already partitions. Fix: leave it out.")
        whole = None
        parts = list(egraph_partitions)
    else:
        raise DispatchError(f"egraph_partitions is {a_type(egraph_partitions)}. Fix: pass a list of "
                            "(eclass, op, children_offsets, children) tuples, one per partition, or an EGraph.")
    if whole is not None:
        k = cluster.partition_count(partitions, k_workers)
        eclass, op, off, ch = whole[0]
        eclass = _ints(eclass, "eclass", copy=False)  # never written here: checked, cut and shipped
        op, off, ch = _rows(op, off, ch, None, "the e-graph's", copy=False, eclass=(eclass, "the e-graph"))
        cuts = np.linspace(0, op.size, int(k) + 1).astype(np.int64)
        return [(eclass[lo:hi], op[lo:hi], off[lo:hi + 1] - off[lo], ch[off[lo]:off[hi]])  # views but the offsets
                for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist())]
    if not parts:
        raise DispatchError("no partitions were given. Fix: pass at least one (possibly empty) partition.")
    if len(parts) > cluster.MAX_PARTITIONS:
        raise DispatchError(f"{len(parts)} partitions would exchange {len(parts)}*{len(parts)} messages a round (at "
                            f"most {cluster.MAX_PARTITIONS} partitions). Fix: concatenate partitions; one per worker "
                            "is what the algorithm is built for.")
    cluster.warn_many(len(parts), k_workers, f"{len(parts)} e-graph partitions were given",
                      "concatenate them into one a worker")
    return [t if _is_lazy(t) else _checked(t, i) for i, t in enumerate(parts)]


def _is_lazy(t) -> bool:
    """Whether a partition is a Dask future or delayed object (its rows on the workers)."""
    try:
        from dask.delayed import Delayed
        from distributed import Future
    except ImportError:
        return False
    return isinstance(t, (Future, Delayed))


class _Checked(tuple):
    """A partition's checked rows (eclass, op, children_offsets, children), with its `_extent`,
    found by the check's own passes."""

    extent: tuple


def _checked(t, i: int) -> tuple:
    """Partition i as checked host rows (eclass, op, children_offsets, children); on a worker for
    one given as a future."""
    if isinstance(t, EGraph):
        raise DispatchError(f"partition {i} is an EGraph; an EGraph goes alone, not in a list or tuple. Fix: pass the "
                            "EGraph itself (it is cut into partitions=k row ranges), or one rows tuple per partition.")
    if not (isinstance(t, (tuple, list)) and len(t) == 4):
        one = (" A list holds partitions: one e-graph goes as a tuple, not a list." if isinstance(t, np.ndarray) and
               i == 0 else "")
        raise DispatchError(f"partition {i} is {a_type(t)}, not (eclass, op, children_offsets, children).{one} "
                            "Fix: pass one such tuple of host arrays per partition (or a Dask future of one).")
    if any(_is_lazy(x) for x in t):
        raise DispatchError(f"partition {i} is a tuple of Dask futures; a partition is one future of a whole tuple. "
                            "Fix: pass client.scatter([rows]) (a list holding the tuple), or host arrays.")
    bounds: list = []
    eclass = _ints(t[0], f"partition {i} eclass", copy=False, bounds=bounds)
    op, off, ch = _rows(t[1], t[2], t[3], None, f"partition {i}'s", copy=False, bounds=bounds,
                        eclass=(eclass, f"partition {i}"))
    out = _Checked((eclass, op, off, ch))
    out.extent = tuple(-1 if b is None else b[1] for b in bounds) + (int(eclass.size),)
    return out


def _extent(p: tuple) -> tuple[int, int, int]:
    """(largest class id of a partition's rows, largest child id, rows), -1 where it has none."""
    if isinstance(p, _Checked):
        return p.extent
    return int(p[0].max(initial=-1)), int(p[3].max(initial=-1)), int(p[0].size)


def _ids(x) -> bool:
    """Whether `x` is one array of class ids (not a tuple of partitions): an array, or a list or
    tuple of numbers."""
    if isinstance(x, (list, tuple)):  # numbers of any type: the check of eclass then names a wrong one
        return all(isinstance(v, (int, float, np.number, np.bool_)) for v in x)
    return not _is_lazy(x) and not isinstance(x, EGraph)


@cluster.releasing
@cluster.cancelled_as_errors("distributed congruence_closure")
@cluster.lost_workers_as_errors("distributed congruence_closure")
@host_memory("distributed congruence_closure")
def congruence_closure(egraph_partitions: Any, unions: ArrayLike | None = None, *, client: Any = None,
                       backend: "Backend | str | None" = None,
                       partitions: int | None = None, max_rounds: int | None = None,
                       gather: bool = True) -> ClosureResult:
    """Congruence closure of an e-graph whose e-nodes are spread over a Dask cluster: the same
    `ClosureResult` as `vyre_numba.egraph.congruence_closure` on the whole e-graph (`eclass` aligned
    with the partitions' rows in order, each the smallest id of its class).

    `egraph_partitions`: a list of partitions, one per item: (eclass, op, children_offsets, children)
    host arrays, or a Dask future (or delayed) of such a tuple, whose rows stay on the worker that
    holds them and are checked there (class ids global; children name classes some partition's rows
    are in, as `EGraph` requires: a child naming a class no row is in is refused, after the rounds
    when it is below the largest class and before them when above); or one such host tuple or an
    `EGraph`, cut into `partitions` row ranges (default: one per worker; a round exchanges a batch
    between every two partitions, so partitions beyond the workers add k * k Dask tasks a round
    and no speed). `unions`: (k, 2) class
    ids merged first. `backend` and `client` as for `connected_components`.
    `gather=False` leaves `eclass` on the workers: a Dask array, one chunk per partition (int32 on
    GPU workers, as they hold it), computed (the call waits for it and raises what the workers
    raised) but not brought to the client.

    `max_rounds`: stop after that many rounds (None, the default: at the fixed point; the result's
    `converged` says whether it was reached).

    An `EGraph` given is read, not changed (the single-process call changes its own); to give it
    the classes found: `g.union(np.stack([g.classes(), result.eclass], axis=1)); g.rebuild()`."""
    gather = flag(gather, "gather", "pass True (classes as a NumPy array) or False (a Dask array left on the workers).")
    t0 = time.perf_counter()
    if max_rounds is not None and (not isinstance(max_rounds, INTEGERS) or isinstance(max_rounds, bool)
                                   or max_rounds < 1):
        raise DispatchError(f"max_rounds is {shown(max_rounds)}. Fix: pass a positive int, or None to run to the "
                            "fixed point.")
    max_rounds = None if max_rounds is None else int(max_rounds)
    client = cluster.client_or_default(client)
    table = cluster.worker_table(client)
    workers = list(table)
    bname = cluster.backend_name(backend)
    given = _partitions(egraph_partitions, partitions, len(workers))  # checked before any task is sent
    asked = cluster.ask_devices(client, table, bname)  # answered while the partitions are placed
    k = len(given)
    lazy = [i for i, t in enumerate(given) if _is_lazy(t)]
    places = [workers[i % len(workers)] for i in range(k)]
    if lazy:
        futs, where = cluster.placed(client, [given[i] for i in lazy], [places[i] for i in lazy], "partition")
        for j, (i, f) in enumerate(zip(lazy, futs)):
            places[i] = where[j]
            given[i] = cluster.submit(client, _checked, f, i, worker=places[i], name="eg-checked")
    shipped = [t if i in lazy else _shipped(t) for i, t in enumerate(given)]
    extents = [None if i in lazy else _extent(t) for i, t in enumerate(given)]
    if lazy:
        for i, e in zip(lazy, client.gather([cluster.submit(client, _extent, shipped[i], worker=places[i],
                                                            name="eg-extent") for i in lazy])):
            extents[i] = e
    devices = cluster.checked_devices(asked)
    shared = cluster.shares_memory(devices)
    pending = _pending_unions(egraph_partitions)
    top = max([-1] + [e[0] for e in extents])
    if isinstance(egraph_partitions, EGraph):
        top = max(top, egraph_partitions.n_classes - 1)  # ids merged away name no row but stay valid
    used = max([-1] + [e[1] for e in extents])
    if used > top:
        raise DispatchError(f"a child refers to class {used}, but no e-node is in a class above {top}. "
                            "Fix: children are e-class ids of e-nodes in some partition.")
    n_classes = top + 1
    rows = sum(e[2] for e in extents)
    if not isinstance(egraph_partitions, EGraph) and n_classes > SPARSE_IDS * rows + (1 << 20):  # as EGraph refuses
        raise DispatchError(f"eclass holds ids up to {top} for {rows} e-nodes; every partition keeps an entry for "
                            f"every id below the largest ({n_classes * 8 / 2**20:,.0f} MiB each here), so ids this "
                            f"sparse cost memory for nothing. Fix: {IDS_FIX}")
    unions = _checked_unions(unions, top)
    if pending.size:
        unions = pending if unions is None else np.concatenate([pending, unions])
    eps = [cluster.submit(client, _start, bname, shipped[i], n_classes, worker=places[i], name="eg-partition")
           for i in range(k)]
    kept = [cluster.submit(client, _no_kept, bname, worker=places[i], name="eg-kept") for i in range(k)]
    home = places[0]
    forests = [] if unions is None else [cluster.submit(client, _narrowed, unions, worker=home, name="eg-unions")]
    # An EGraph checked its children; other rows' children are checked here, beside the rounds, when a
    # worker has nothing of theirs to run (ids are in range, so a child naming no class cannot fault
    # a kernel), and a child naming a class no e-node is in is raised before anything is returned.
    given_egraph = isinstance(egraph_partitions, EGraph)
    marks = [cluster.submit(client, _marks_of, e, n_classes, not given_egraph, worker=w, name="eg-marks", priority=-1)
             for e, w in zip(eps, places)]
    if given_egraph:  # its classes as the EGraph counts them: pending unions applied
        census = (count_distinct(egraph_partitions.classes()), -1)
    else:
        census = cluster.submit(client, _census, *marks, worker=home, name="eg-census", priority=-1)

    def round_after(state: tuple, first: bool) -> tuple:
        """A round's tasks: (partitions, kept signatures, forests) after it."""
        eps, kept, forests = state
        sent = [cluster.submit(client, _send_task, eps[i], k, first, shared, *forests, worker=places[i],
                               name="eg-send") for i in range(k)]
        parts = [cluster.part(client, s, 0, w, "eg-partition") for s, w in zip(sent, places)]
        matched = [cluster.submit(client, _match_task, bname, n_classes, kept[o], parts[o],
                                  *[cluster.part(client, sent[i], 1 + o, places[i], "eg-to") for i in range(k)],
                                  worker=places[o], name="eg-match") for o in range(k)]
        return (parts, [cluster.part(client, m, 0, w, "eg-kept") for m, w in zip(matched, places)],
                [cluster.part(client, m, 1, w, "eg-forest") for m, w in zip(matched, places)])

    # Round r + 1 is submitted before round r's pairs are counted, so the workers never wait for the
    # client; after the fixed point it has nothing to do (no pairs, no rows) and is dropped.
    states, rounds, converged = [(eps, kept, forests)], 0, False
    del eps, kept, forests  # held by states[0] alone, so Dask frees them once round 1 has them
    while max_rounds is None or rounds < max_rounds:
        if len(states) == rounds + 1:
            states.append(round_after(states[rounds], rounds == 0))
        if max_rounds is None or rounds + 1 < max_rounds:
            states.append(round_after(states[rounds + 1], False))
        rounds += 1
        states[rounds - 1] = None  # only rounds r and r + 1 are read again: let Dask free the rest
        if cluster.submit(client, _pairs, *states[rounds][2], worker=home, name="eg-size").result() == 0:
            converged = True
            break
    eps, _, forests = states[rounds]
    del states
    if not converged:  # the last pairs were never joined into the partitions' maps
        eps = [cluster.submit(client, _settled, eps[i], forests, worker=places[i], name="eg-settle") for i in range(k)]
    finals = [cluster.submit(client, _classes, e, worker=w, name="eg-classes") for e, w in zip(eps, places)]
    after = cluster.submit(client, _after, eps[0], *marks, worker=home, name="eg-after")
    if gather:
        eclass = np.concatenate([np.zeros(0, np.int64)] + client.gather(finals, direct=True))
    else:
        dtype = np.int32 if any(d["backend"] == "cuda" for d in devices.values()) else np.int64
        eclass = cluster.left_on_workers(finals, [(0, e[2]) for e in extents], dtype)
    (before, unclassed), after = (x if isinstance(x, tuple) else x.result() for x in (census, after))
    if unclassed >= 0:
        raise DispatchError(f"a child refers to class {unclassed}, but no e-node of any partition is in it. Fix: "
                            "children are e-class ids of e-nodes in some partition (add the e-node, or renumber "
                            "the classes).")
    return ClosureResult(eclass, rounds, before - after, before, after, converged, 0, time.perf_counter() - t0, {})


def _narrowed(pairs: np.ndarray) -> np.ndarray:
    """(Runs on a worker.) Class id pairs as int32 where they fit: half the bytes to every worker."""
    return pairs.astype(np.int32) if pairs.size and pairs.max() <= np.iinfo(np.int32).max else pairs


def _checked_unions(unions, top: int):
    """`unions` as a checked (k, 2) int64 array of class ids up to `top`, or None for none."""
    if unions is None:
        return None
    refuse_misread(unions, "unions", not_bool="a class id", masked="pass the pairs to merge without the masked "
                                                                    "ones (unions[~unions.mask.any(axis=1)].data).")
    try:
        u = np.asarray(unions)
    except (ValueError, TypeError) as e:  # ragged rows
        raise DispatchError(f"unions is not a (k, 2) array ({e}). Fix: pass pairs of class ids, "
                            "np.stack([a, b], axis=1).") from None
    if u.ndim == 0:  # a set, a dict, a generator, a Dask future: no array NumPy can read pairs from
        raise DispatchError(f"unions is {a_type(unions)}, not pairs of class ids. Fix: pass a (k, 2) array, "
                            "np.stack([a, b], axis=1) (for a Dask future, its result: future.result()).")
    u = as_ints(unions, u, "unions", IDS_FIX)
    if u.shape == (0,) or (u.ndim == 2 and u.shape[0] == 0 and u.shape[1] == 2):
        return None
    if u.ndim != 2 or u.shape[1] != 2:
        raise DispatchError(f"unions has shape {u.shape}; it is a (k, 2) array of class ids. "
                            "Fix: np.stack([a, b], axis=1).")
    if top < 0:
        raise DispatchError("unions were given for an e-graph with no e-nodes (no class ids exist). "
                            "Fix: add e-nodes, or pass unions=None.")
    return np.stack([_ints(u[:, 0], "unions[:, 0]", hi=top), _ints(u[:, 1], "unions[:, 1]", hi=top)], 1)
