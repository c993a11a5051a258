"""Congruence closure in NumPy: the CPU backend's rebuild and the oracle of the device one.

One loop: canonicalise every row (children and class through the union-find), group rows by
signature, union the classes of congruent rows, repeat until a round unions nothing. Each round
re-reads every row (NumPy has no cheap scatter into a hash table); the device version revisits only
the parents of merged classes.

Invariants: `parent` is always fully compressed (parent[x] is x's root, the smallest id of its
class), so canonicalising is one gather; unions only hook a larger root under a smaller one."""
from __future__ import annotations

import time

import numpy as np

from .signature import congruent_pairs


def union_numpy(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> int:
    """Merge the classes of a[k] and b[k] in the compressed union-find `parent` (in place, in one
    write at the end: an interrupted call leaves it as it was, still compressed); the number of
    merges (classes that stopped being roots)."""
    merged = 0
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    out, parent = parent, parent.copy()
    while a.size:
        ra, rb = parent[a], parent[b]
        lo, hi = np.minimum(ra, rb), np.maximum(ra, rb)
        join = lo != hi
        if not join.any():
            break
        before = np.count_nonzero(parent == np.arange(parent.size))
        np.minimum.at(parent, hi[join], lo[join])
        while True:  # pointer jumping until every id points at a root
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent[:] = grand
        merged += before - int(np.count_nonzero(parent == np.arange(parent.size)))
        a, b = a[join], b[join]
    out[:] = parent
    return merged


def rebuild_numpy(parent: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                  eclass: np.ndarray, max_rounds: int | None = None, on_round=None) -> dict:
    """Restore congruence in place: on return every child and class is canonical and no two rows
    with equal (operator, children) are in different classes (unless `max_rounds` stopped it:
    then converged is False). Returns rounds, unions, nodes_touched, converged, seconds;
    `on_round()`, when given, is called after each round."""
    t0 = time.perf_counter()
    rounds = unions = touched = 0
    converged = False
    while max_rounds is None or rounds < max_rounds:
        children[:] = parent[children]
        eclass[:] = parent[eclass]
        touched += op.size
        a, b = congruent_pairs(op, offsets, children, eclass)
        rounds += 1
        if on_round is not None:
            on_round()
        if a.size == 0:
            converged = True
            break
        unions += union_numpy(parent, a, b)
    if not converged:  # the last round's unions are applied, so the rows are made canonical again
        children[:] = parent[children]
        eclass[:] = parent[eclass]
    return dict(rounds=rounds, unions=int(unions), nodes_touched=int(touched), converged=converged,
                seconds=time.perf_counter() - t0)
