"""E-graph congruence closure over a Dask cluster: e-nodes partitioned across workers, congruent
e-nodes brought together by the hash of their canonical signature.

A round:
1. Send: every worker applies the last round's class merges (id -> root, the delta) to its copy of
   the canonical map, and sends each of its rows whose children changed class (all of them in the
   first round) to the worker that owns its signature's hash, as (operator, canonical children,
   canonical class, hash).
2. Match: every owner groups what it received with the signatures it kept from earlier rounds
   (exact comparison; a hash only chooses the owner and the candidates), and emits, for each group
   holding more than one class, its smallest class paired with each other one. It keeps one entry
   a signature.
3. Merge: the distributed union-find joins those pairs with every merge made so far; the classes
   whose root changed are the next round's delta. No change: the fixed point.

Invariants: every worker applies the same deltas, so all copies of the map are equal after step 1;
a signature kept from an earlier round stays true (merging only makes more e-nodes equal), so old
entries are never wrong, only redundant; every row whose canonical signature changed is sent again,
so two e-nodes congruent at the end were compared at their owner; at the fixed point no group holds
two classes, which is the single-GPU rebuild's invariant."""
from __future__ import annotations

import time

import numpy as np

from ..egraph import ClosureResult, EGraph
from ..egraph.egraph import _ints, _rows, _take_rows
from ..egraph.signature import signature_hash, signature_heads
from ..errors import DispatchError
from . import cluster
from .unionfind import merge

_EMPTY_ROWS = (np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
               np.zeros(0, np.uint64))


class EPart:
    """A partition of e-nodes on its worker: its rows as given and its copy of the canonical map.
    Never changed in place (a round makes a new one), so Dask may rerun any round's task."""

    def __init__(self, eclass, op, offsets, children, canon):
        self.eclass, self.op, self.offsets, self.children, self.canon = eclass, op, offsets, children, canon


def _start(eclass, op, offsets, children, n_classes: int) -> EPart:
    return EPart(eclass, op, offsets, children, np.arange(n_classes, dtype=np.int64))


def _concat(rows: list) -> tuple:
    """Rows (op, offsets, children, class, hash) of several batches as one batch."""
    rows = [r for r in rows if r[0].size] or [_EMPTY_ROWS]
    op = np.concatenate([r[0] for r in rows])
    sizes = np.concatenate([np.diff(r[1]) for r in rows])
    off = np.zeros(op.size + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    return (op, off, np.concatenate([r[2] for r in rows]), np.concatenate([r[3] for r in rows]),
            np.concatenate([r[4] for r in rows]))


def _subset(rows: tuple, keep: np.ndarray) -> tuple:
    off, ch = _take_rows(rows[1], rows[2], keep)
    return rows[0][keep], off, ch, rows[3][keep], rows[4][keep]


def _send(p: EPart, delta, owners: int, first: bool) -> tuple:
    """(the partition with the delta applied, rows to send to each owner, rows sent)."""
    ids, roots = delta
    canon = p.canon
    if ids.size:
        table = np.arange(canon.size, dtype=np.int64)
        table[ids] = roots
        canon = table[canon]
    q = EPart(p.eclass, p.op, p.offsets, p.children, canon)
    n = p.op.size
    if first:
        dirty = np.arange(n)
    elif ids.size:
        moved = canon != p.canon
        hit = moved[p.children]
        row = np.repeat(np.arange(n), np.diff(p.offsets))
        dirty = np.unique(row[hit])
    else:
        dirty = np.zeros(0, np.int64)
    off, ch = _take_rows(p.offsets, canon[p.children] if p.children.size else p.children, dirty)
    op = p.op[dirty]
    h = signature_hash(op, off, ch)
    rows = (op, off, ch, canon[p.eclass[dirty]], h)
    dest = (h % np.uint64(owners)).astype(np.int64)
    return q, [_subset(rows, np.flatnonzero(dest == o)) for o in range(owners)], int(dirty.size)


def _match(kept: tuple, p: EPart, *incoming: tuple) -> tuple:
    """(the signatures kept after this round, (k, 2) class pairs to merge)."""
    new = _concat(list(incoming))
    if not new[0].size:
        return kept, np.zeros((0, 2), np.int64)
    rows = _concat([kept, new])
    cls = p.canon[rows[3]]
    touched = _sharing_a_hash(rows[4], kept[0].size)
    sub = _subset(rows, touched)
    head = signature_heads(sub[0], sub[1], sub[2])
    c = cls[touched]
    low = c.copy()
    np.minimum.at(low, head, c)
    a, b = low[head], c
    differ = a != b
    pairs = np.unique(np.stack([a[differ], b[differ]], 1), axis=0) if differ.any() else np.zeros((0, 2), np.int64)
    firsts = head == np.arange(head.size)
    keep = np.ones(rows[0].size, bool)
    keep[touched[~firsts]] = False
    keep_rows = np.flatnonzero(keep)
    out = _subset(rows, keep_rows)
    cls_kept = cls[keep_rows]
    at = np.searchsorted(touched, keep_rows)
    is_head = (at < touched.size) & (touched[np.minimum(at, touched.size - 1)] == keep_rows)
    cls_kept[is_head] = low[at[is_head]]
    return (out[0], out[1], out[2], cls_kept, out[4]), pairs


def _sharing_a_hash(h: np.ndarray, first_new: int) -> np.ndarray:
    """The rows (ascending) whose hash equals the hash of some row at or after `first_new`."""
    order = np.argsort(h, kind="stable")
    hs = h[order]
    start = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])
    group = np.repeat(np.arange(start.size), np.diff(np.r_[start, h.size]))
    has_new = np.zeros(start.size, bool)
    has_new[group[order >= first_new]] = True
    return np.sort(order[has_new[group]])


def _pairs_of(mapping) -> np.ndarray:
    ids, roots = mapping
    return np.stack([ids, roots], 1).astype(np.int64)


def _delta(old, new) -> tuple:
    """(ids, roots) of the ids whose root the new mapping changed."""
    oi, orr = old
    ni, nr = new
    was = ni.copy()
    at = np.searchsorted(oi, ni)
    hit = at < oi.size
    hit[hit] = oi[at[hit]] == ni[hit]
    was[hit] = orr[at[hit]]
    moved = was != nr
    return ni[moved], nr[moved]


def _size(x) -> int:
    return int(x[0].size)


def _classes(p: EPart) -> np.ndarray:
    return p.canon[p.eclass]


def _no_mapping() -> tuple:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)


def _partitions(egraph_partitions, partitions, k_workers: int) -> list[tuple]:
    """The partitions as checked host rows."""
    if isinstance(egraph_partitions, EGraph):
        rows = egraph_partitions.rows()
        whole = [(rows["eclass"], rows["op"], rows["children_offsets"], rows["children"])]
    elif isinstance(egraph_partitions, tuple) and len(egraph_partitions) == 4 and not isinstance(egraph_partitions[0], tuple):
        whole = [egraph_partitions]
    elif isinstance(egraph_partitions, (list, tuple)):
        if partitions is not None:
            raise DispatchError("partitions= splits one e-graph; these are already partitions. Fix: leave it out.")
        whole = None
        parts = list(egraph_partitions)
    else:
        raise DispatchError(f"egraph_partitions is a {type(egraph_partitions).__name__}. Fix: pass a list of "
                            "(eclass, op, children_offsets, children) tuples, one per partition, or an EGraph.")
    if whole is not None:
        k = k_workers if partitions is None else partitions
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise DispatchError(f"partitions is {partitions!r}. Fix: pass a positive int (or None: one per worker).")
        eclass, op, off, ch = whole[0]
        eclass = _ints(eclass, "eclass")
        op, off, ch = _rows(op, off, ch, None, "the e-graph's")
        cuts = np.linspace(0, op.size, int(k) + 1).astype(np.int64)
        parts = []
        for i in range(int(k)):
            rows = np.arange(cuts[i], cuts[i + 1])
            o, c = _take_rows(off, ch, rows)
            parts.append((eclass[rows], op[rows], o, c))
    if not parts:
        raise DispatchError("no partitions were given. Fix: pass at least one (possibly empty) partition.")
    out = []
    for i, t in enumerate(parts):
        if not (isinstance(t, (tuple, list)) and len(t) == 4):
            raise DispatchError(f"partition {i} is a {type(t).__name__}, not (eclass, op, children_offsets, children). "
                                "Fix: pass one such tuple of host arrays per partition.")
        eclass = _ints(t[0], f"partition {i} eclass")
        op, off, ch = _rows(t[1], t[2], t[3], None, f"partition {i}'s")
        if eclass.size != op.size:
            raise DispatchError(f"partition {i}: eclass has {eclass.size} entries and op {op.size}; there is one of "
                                "each per e-node. Fix: pass arrays of equal length.")
        out.append((eclass, op, off, ch))
    return out


def congruence_closure(egraph_partitions, unions=None, *, client, backend=None, partitions: int | None = None,
                       max_rounds: int | None = None) -> ClosureResult:
    """Congruence closure of an e-graph whose e-nodes are spread over a Dask cluster: the same
    `ClosureResult` as `vyre_numba.egraph.congruence_closure` on the whole e-graph (`eclass` aligned
    with the partitions' rows in order, each the smallest id of its class).

    `egraph_partitions`: a list of (eclass, op, children_offsets, children) host-array tuples, one per
    partition (class ids global; children name classes some partition's rows are in), or one such
    tuple or an `EGraph`, cut into `partitions` row ranges (default: one per worker). `unions`: (k, 2)
    class ids merged first. `backend` as for `connected_components`."""
    t0 = time.perf_counter()
    workers = cluster.workers_of(client)
    bname = cluster.backend_name(backend)
    cluster.devices(client, workers, bname)
    if max_rounds is not None and (not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 1):
        raise DispatchError(f"max_rounds is {max_rounds!r}. Fix: pass a positive int, or None to run to the fixed point.")
    parts = _partitions(egraph_partitions, partitions, len(workers))
    top = max([-1] + [int(p[0].max(initial=-1)) for p in parts])
    used = max([-1] + [int(p[3].max(initial=-1)) for p in parts])
    if used > top:
        raise DispatchError(f"a child refers to class {used}, but no e-node is in a class above {top}. "
                            "Fix: children are e-class ids of e-nodes in some partition.")
    n_classes = top + 1
    if unions is not None:
        u = np.asarray(unions)
        if u.size == 0:
            unions = None
        elif u.ndim != 2 or u.shape[1] != 2:
            raise DispatchError(f"unions has shape {u.shape}; it is a (k, 2) array of class ids. "
                                "Fix: np.stack([a, b], axis=1).")
        else:
            unions = np.stack([_ints(u[:, 0], "unions[:, 0]", hi=max(top, 0)),
                               _ints(u[:, 1], "unions[:, 1]", hi=max(top, 0))], 1)
    k = len(parts)
    places = [workers[i % len(workers)] for i in range(k)]
    eps = [cluster.submit(client, _start, *parts[i], n_classes, worker=places[i], name="eg-partition")
           for i in range(k)]
    kept = [cluster.submit(client, lambda: _EMPTY_ROWS, worker=places[i], name="eg-kept") for i in range(k)]
    mapping = cluster.submit(client, _no_mapping, worker=places[0], name="eg-mapping")
    if unions is not None:
        mapping, _ = merge(client, [cluster.submit(client, np.asarray, unions, worker=places[0], name="eg-unions")],
                           places[:1], name="eg-unions")
    delta = mapping
    rounds, converged = 0, False
    before = int(np.unique(np.concatenate([p[0] for p in parts])).size)
    while True:
        if max_rounds is not None and rounds >= max_rounds:
            break
        sent = [cluster.submit(client, _send, eps[i], delta, k, rounds == 0, worker=places[i], name="eg-send")
                for i in range(k)]
        eps = [cluster.part(client, s, 0, w, "eg-partition") for s, w in zip(sent, places)]
        out = [cluster.part(client, s, 1, w, "eg-out") for s, w in zip(sent, places)]
        matched = [cluster.submit(client, _match, kept[o], eps[o],
                                  *[cluster.part(client, out[i], o, places[i], "eg-to") for i in range(k)],
                                  worker=places[o], name="eg-match") for o in range(k)]
        kept = [cluster.part(client, m, 0, w, "eg-kept") for m, w in zip(matched, places)]
        pairs = [cluster.part(client, m, 1, w, "eg-pairs") for m, w in zip(matched, places)]
        old = cluster.submit(client, _pairs_of, mapping, worker=places[0], name="eg-old")
        new, _ = merge(client, pairs + [old], places + places[:1], name="eg-merge")
        delta = cluster.submit(client, _delta, mapping, new, worker=places[0], name="eg-delta")
        mapping = new
        rounds += 1
        if cluster.submit(client, _size, delta, worker=places[0], name="eg-size").result() == 0:
            converged = True
            break
    if not converged:  # the last delta was never applied to the partitions
        eps = [cluster.part(client, cluster.submit(client, _send, eps[i], delta, k, False, worker=places[i],
                                                   name="eg-send"), 0, places[i], "eg-partition") for i in range(k)]
    eclass = np.concatenate([np.zeros(0, np.int64)] + client.gather(
        [cluster.submit(client, _classes, e, worker=w, name="eg-classes") for e, w in zip(eps, places)]))
    after = int(np.unique(eclass).size)
    return ClosureResult(eclass, rounds, before - after, before, after, converged, 0, time.perf_counter() - t0, {})
