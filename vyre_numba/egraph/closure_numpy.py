"""Congruence closure in NumPy: the CPU backend's rebuild and the oracle of the device one.

One loop: canonicalise the rows (children and class through the union-find), group rows by
signature, union the classes of congruent rows, repeat until a round unions nothing. The first
round hashes and sorts every row; later rounds revisit only the worklist, the rows a child of which
changed class in the last union, and group each of them with the rows of its hash, whose order is
kept sorted by moving the worklist's rows to their new hashes (no sort of every row again).

Invariants: `parent` is always fully compressed (parent[x] is x's root, the smallest id of its
class), so canonicalising is one gather; unions only hook a larger root under a smaller one. After
a round's unions, rows off the next worklist have the signatures they had, and any two of them
with one signature are in one class already: only a group holding a worklist row can hold a new
congruence."""
from __future__ import annotations

import time

import numpy as np

from ..unique import unique
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
    while max_rounds is None or rounds < max_rounds:
        if stale is None:
            hashes = signature_hash(op, offsets, children, row_of)
            ra, order = signature_heads(op, offsets, children, hashes, with_order=True)
            rb, hs = np.arange(op.size), hashes[order]
            touched += op.size
        else:
            children[stale] = parent[children[stale]]
            work = unique(row_of[stale])
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
    if not converged and stale is not None:  # the last round's unions are applied: the rows are made canonical
        children[stale] = parent[children[stale]]
    eclass[:] = parent[eclass]
    return dict(rounds=rounds, unions=int(unions), nodes_touched=int(touched), converged=converged,
                seconds=time.perf_counter() - t0, index=(hashes, order, hs) if converged and hashes is not None else None)


def _worklist_round(op, offsets, children, hashes, order, hs, work) -> tuple:
    """One later round: the rows `work` rehashed (in `hashes`, in place) and moved to their new
    places in `order` (the rows by ascending hash) and `hs` (their hashes); every row of a hash
    group that holds a work row is compared exactly with the group's smallest row, and rows that
    collided with it with each other. (order, hs, ra, rb): rows ra[k] and rb[k] are congruent."""
    empty = np.zeros(0, np.int64)
    if work.size == 0:
        return order, hs, empty, empty
    width = offsets[work + 1] - offsets[work]
    slots = np.repeat(offsets[work] - np.cumsum(width) + width, width) + np.arange(int(width.sum()))
    sub = np.concatenate([[0], np.cumsum(width)])
    fresh = signature_hash(op[work], sub, children[slots], np.repeat(np.arange(work.size), width))
    hashes[work] = fresh
    moved = np.zeros(op.size, bool)
    moved[work] = True
    keep = ~moved[order]
    by = np.argsort(fresh, kind="stable")
    at = np.searchsorted(hs[keep], fresh[by])
    order, hs = np.insert(order[keep], at, work[by]), np.insert(hs[keep], at, fresh[by])
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
