"""Congruence closure in NumPy: the CPU backend's rebuild and the oracle of the device one.

One loop: canonicalise the rows (children and class through the union-find), group rows by
signature, union the classes of congruent rows, repeat until a round unions nothing. The first
round hashes and sorts every row; later rounds revisit only the worklist, the rows a child of which
changed class in the last union, and group each of them with the rows of its hash, whose order is
kept sorted by moving the worklist's rows to their new hashes (no sort of every row again). A
round whose rows (and their children) are few against the graph's runs in Python on point lookups
(`_PointRounds`), so that a congruence chain of depth d, d rounds of a row or two, costs its rows
and not d times every row.

Invariants: `parent` is always fully compressed (parent[x] is x's root, the smallest id of its
class), so canonicalising is one gather; unions only hook a larger root under a smaller one. After
a round's unions, rows off the next worklist have the signatures they had, and any two of them
with one signature are in one class already: only a group holding a worklist row can hold a new
congruence."""
from __future__ import annotations

import time

import numpy as np

from ..unique import unique
from . import signature
from .signature import same_signature, signature_hash, signature_heads


def union_numpy(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> int:
    """Merge the classes of a[k] and b[k] in the compressed union-find `parent` (in place, in one
    write at the end: an interrupted call leaves it as it was, still compressed); the number of
    merges (classes that stopped being roots)."""
    return _union(parent, a, b)[0]


def _union(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[int, np.ndarray]:
    """`union_numpy`, and the ids whose root changed (ascending)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    out, parent = parent, parent.copy()
    merged, changed = 0, [np.zeros(0, np.int64)]
    while a.size:
        ra, rb = parent[a], parent[b]
        lo, hi = np.minimum(ra, rb), np.maximum(ra, rb)
        join = lo != hi
        if not join.any():
            break
        roots = unique(hi[join])  # each to go under a smaller id, perhaps another of them
        under = np.zeros(parent.size, bool)
        under[roots] = True
        moved = np.flatnonzero(under[parent])  # the ids whose root is one of them, the roots too
        np.minimum.at(parent, hi[join], lo[join])
        while True:  # pointer jumping over the hooked roots until each points at a root
            up = parent[parent[roots]]
            if np.array_equal(up, parent[roots]):
                break
            parent[roots] = up
        parent[moved] = parent[parent[moved]]
        merged += roots.size
        changed.append(moved)
        a, b = a[join], b[join]
    out[:] = parent
    return merged, unique(np.concatenate(changed))


# A later round runs in Python (`_PointRounds`) where its rows and their children number at most
# SCALAR_BASE + (rows + child slots) / SCALAR_RATIO: measured on one core, a row costs about 20 us
# there and a round on arrays about 300 us plus 0.02 us a row, so the break-even grows with the graph.
SCALAR_BASE, SCALAR_RATIO = 16, 1024
CSR_AFTER = 8  # scalar rounds that scan every child slot for the stale ones (each a round on arrays' cost)
# before the slots are sorted by class once


def rebuild_numpy(parent: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                  eclass: np.ndarray, max_rounds: int | None = None, on_round=None, index: tuple | None = None
                  ) -> dict:
    """Restore congruence in place: on return every child and class is canonical and no two rows
    with equal (operator, children) are in different classes (unless `max_rounds` stopped it:
    then converged is False). Returns rounds, unions, nodes_touched (rows hashed and grouped),
    converged, seconds and index; `on_round()`, when given, is called after each round. `index`:
    what a converged rebuild returned as its index, given back while nothing but unions changed the
    rows since (it is updated in place): the first round then revisits only the rows whose
    children changed class; None where the rebuild did not converge."""
    t0 = time.perf_counter()
    rounds = unions = touched = 0
    converged = False
    row_of = np.repeat(np.arange(op.size), np.diff(offsets))  # the row of each child slot
    if index is None:
        hashes = order = hs = stale = None  # the first round hashes and groups every row
        children[:] = parent[children]
    else:
        hashes, order, hs = index
        stale = np.flatnonzero(parent[children] != children)  # child slots whose class merged since
    point = None  # the scalar rounds' state while they run (their unions reach `parent` when they close)
    limit = SCALAR_BASE + (op.size + children.size) // SCALAR_RATIO
    while max_rounds is None or rounds < max_rounds:
        work = None if stale is None else unique(row_of[stale])
        scalar = work is not None and stale.size <= limit  # then its rows and their children, counted
        if scalar and work.size + int((offsets[work + 1] - offsets[work]).sum()) <= limit:
            if point is None:
                point = _PointRounds(parent, op, offsets, children, eclass, row_of, hashes, order, hs)
            pairs = point.round(work)
            touched += work.size
            rounds += 1
            if on_round is not None:
                on_round()
            if not pairs:
                converged = True
                break
            merged, stale = point.union(pairs)
            unions += merged
            continue
        if point is not None:
            order, hs = point.close()
            point = None
        if stale is None:
            hashes = signature_hash(op, offsets, children, row_of)
            ra, order = signature_heads(op, offsets, children, hashes, with_order=True)
            rb, hs = np.arange(op.size), hashes[order]
            touched += op.size
        else:
            children[stale] = parent[children[stale]]
            order, hs, ra, rb = _worklist_round(op, offsets, children, hashes, order, hs, work)
            touched += work.size
        a, b = parent[eclass[ra]], parent[eclass[rb]]
        differ = a != b
        a, b = a[differ], b[differ]
        rounds += 1
        if on_round is not None:
            on_round()
        if a.size == 0:
            converged = True
            break
        merged, changed = _union(parent, a, b)
        unions += merged
        mark = np.zeros(parent.size, bool)
        mark[changed] = True
        stale = np.flatnonzero(mark[children])
    if point is not None:
        order, hs = point.close()
    if not converged and stale is not None:  # the last round's unions are applied: the rows are made canonical
        children[stale] = parent[children[stale]]
    eclass[:] = parent[eclass]
    return dict(rounds=rounds, unions=int(unions), nodes_touched=int(touched), converged=converged,
                seconds=time.perf_counter() - t0, index=(hashes, order, hs) if converged and hashes is not None else None)


def _rehash(op, offsets, children, work: np.ndarray) -> np.ndarray:
    """The signature hashes of rows `work` (their children canonical)."""
    width = offsets[work + 1] - offsets[work]
    slots = np.repeat(offsets[work] - np.cumsum(width) + width, width) + np.arange(int(width.sum()))
    sub = np.concatenate([[0], np.cumsum(width)])
    return signature_hash(op[work], sub, children[slots], np.repeat(np.arange(work.size), width))


def _move(order, hs, rows: np.ndarray, fresh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, hs) with `rows` (distinct) moved to their hashes `fresh`, kept in ascending order."""
    moved = np.zeros(order.size, bool)
    moved[rows] = True
    keep = ~moved[order]
    by = np.argsort(fresh, kind="stable")
    at = np.searchsorted(hs[keep], fresh[by])
    return np.insert(order[keep], at, rows[by]), np.insert(hs[keep], at, fresh[by])


def _worklist_round(op, offsets, children, hashes, order, hs, work) -> tuple:
    """One later round: the rows `work` rehashed (in `hashes`, in place) and moved to their new
    places in `order` (the rows by ascending hash) and `hs` (their hashes); every row of a hash
    group that holds a work row is compared exactly with the group's smallest row, and rows that
    collided with it with each other. (order, hs, ra, rb): rows ra[k] and rb[k] are congruent."""
    empty = np.zeros(0, np.int64)
    if work.size == 0:
        return order, hs, empty, empty
    fresh = _rehash(op, offsets, children, work)
    hashes[work] = fresh
    order, hs = _move(order, hs, work, fresh)
    keys = unique(fresh)
    lo, hi = np.searchsorted(hs, keys, "left"), np.searchsorted(hs, keys, "right")
    size = hi - lo
    members = order[np.repeat(lo - np.cumsum(size) + size, size) + np.arange(int(size.sum()))]
    first = np.repeat(np.minimum.reduceat(members, np.cumsum(size) - size), size)
    same = same_signature(op, offsets, children, members, first)
    ra, rb = [first[same]], [members[same]]
    odd = np.sort(members[~same])
    if odd.size:
        seen: dict = {}
        for r in odd.tolist():  # a collided row may still equal another collided row
            key = (int(op[r]), tuple(children[offsets[r]:offsets[r + 1]].tolist()))
            ra.append(np.array([seen.setdefault(key, r)]))
            rb.append(np.array([r]))
    return order, hs, np.concatenate(ra), np.concatenate(rb)


class _PointRounds:
    """Later rounds of a few stale slots each, run in Python on point lookups so that a round costs
    its worklist, not every row (a congruence chain of depth d takes d rounds).

    Invariants while they run: `parent` and `children` are as they found them; their unions link
    roots in `up` (a root to a smaller id of its class), a slot's class is `find` of the id it
    holds, and `close()` writes the unions into `parent` in one assignment and then the classes
    into `children` in another, so an interruption leaves the rows as a round of arrays would
    (children that are never ahead of `parent`). The rows rehashed since the sorted index (`order`,
    `hs`) was made are found by hash in `moved`, and their index entries are void. Once `uses` is
    made, the slots of root r's class are uses' run of r and the runs in `extra[r]`."""

    def __init__(self, parent, op, offsets, children, eclass, row_of, hashes, order, hs):
        self.parent, self.op, self.offsets, self.children, self.eclass = parent, op, offsets, children, eclass
        self.row_of, self.hashes, self.order, self.hs = row_of, hashes, order, hs
        self.up: dict = {}  # root -> the smaller id it was linked under
        self.moved: dict = {}  # hash -> the rehashed rows that have it now
        self.rehashed: set = set()
        self.scans = 0  # rounds whose stale slots were found by scanning every slot
        self.uses = None  # (the slots sorted by their class's root, those roots), made after CSR_AFTER scans
        self.extra: dict = {}  # root -> runs of slots whose class joined its class since `uses` was made

    def find(self, x: int) -> int:
        up = self.up
        root = int(self.parent[x])
        path = []
        while root in up:
            path.append(root)
            root = up[root]
        for r in path[:-1]:
            up[r] = root
        return root

    def roots(self) -> np.ndarray:
        """Every id's root through the links made so far (the union-find written out)."""
        to = np.arange(self.parent.size)
        if self.up:
            links = np.fromiter(self.up, np.int64, len(self.up))
            to[links] = [self.find(r) for r in links.tolist()]
        return to[self.parent]

    def signature(self, r: int) -> tuple:
        return int(self.op[r]), tuple(map(self.find, self.children[self.offsets[r]:self.offsets[r + 1]].tolist()))

    def round(self, rows: np.ndarray) -> list:
        """Rehash `rows` (ascending: the rows of the stale slots) and group each with the rows of
        its hash: [(row, row)] of congruent rows in different classes."""
        if self.uses is None and self.scans >= CSR_AFTER:
            held = self.roots()[self.children]
            by = np.argsort(held, kind="stable")
            self.uses, self.extra = (by, held[by]), {}
        work = rows.tolist()
        if not work:
            return []
        sigs = [self.signature(r) for r in work]
        fresh = [signature.row_hash(*sig) for sig in sigs]
        old = self.hashes[rows].tolist()
        self.hashes[rows] = fresh
        for r, was, h in zip(work, old, fresh):
            if r in self.rehashed:
                self.moved[was].discard(r)
            self.rehashed.add(r)
            self.moved.setdefault(h, set()).add(r)
        doing, seen, pairs, find = set(work), {}, [], self.find
        for r, h, sig in zip(work, fresh, sigs):
            rep = seen.get(sig)
            if rep is None:  # rows off the worklist with one signature share a class already: one stands for all
                rep = self._resident(h, sig, doing)
                rep = seen[sig] = r if rep is None else rep
            if rep != r and find(int(self.eclass[rep])) != find(int(self.eclass[r])):
                pairs.append((rep, r))
        return pairs

    def _resident(self, h: int, sig: tuple, doing: set) -> int | None:
        """A row off the worklist with hash h and signature `sig`, or None: the rows rehashed to h
        first (a group's rows rehashed one a round would leave void entries in front of the index's)."""
        for q in self.moved.get(h, ()):
            if q not in doing and self.signature(q) == sig:
                return q
        key = np.uint64(h)  # a Python int past int64 would make searchsorted convert every hash
        lo, hi = self.hs.searchsorted(key, "left"), self.hs.searchsorted(key, "right")
        for j in range(int(lo), int(hi)):
            q = int(self.order[j])
            if q not in self.rehashed and q not in doing and self.signature(q) == sig:
                return q
        return None

    def union(self, pairs: list) -> tuple[int, np.ndarray]:
        """Merge the classes of the rows paired (the larger root under the smaller): (merges, the
        child slots whose class changed)."""
        held = self.roots()[self.children] if self.uses is None else None  # each slot's class before
        hooked = []
        for x, y in pairs:
            a, b = self.find(int(self.eclass[x])), self.find(int(self.eclass[y]))
            if a != b:
                self.up[max(a, b)] = min(a, b)
                hooked.append((max(a, b), min(a, b)))
        if held is not None:
            self.scans += 1
            mark = np.zeros(self.parent.size, bool)
            mark[[hi for hi, _ in hooked]] = True
            return len(hooked), np.flatnonzero(mark[held])
        by, roots = self.uses
        runs = []
        for hi, lo in hooked:  # in the order hooked: a root hooked after taking another's runs passes them on
            own = by[roots.searchsorted(hi, "left"):roots.searchsorted(hi, "right")]
            mine = ([own] if own.size else []) + self.extra.pop(hi, [])  # no empty runs: they would pile up
            if mine:
                runs += mine
                self.extra.setdefault(lo, []).extend(mine)
        return len(hooked), unique(np.concatenate(runs)) if runs else np.zeros(0, np.int64)

    def close(self) -> tuple[np.ndarray, np.ndarray]:
        """Write the unions into `parent` (compressed) and the classes into `children`, and return
        (order, hs) with the rehashed rows moved to their hashes."""
        if self.up:
            self.parent[:] = self.roots()
            self.up = {}
        self.children[:] = self.parent[self.children]
        if not self.rehashed:
            return self.order, self.hs
        rows = np.array(sorted(self.rehashed), np.int64)
        return _move(self.order, self.hs, rows, self.hashes[rows])
