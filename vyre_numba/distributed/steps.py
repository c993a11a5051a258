"""Device steps of the distributed phases, for the fixpoint runner's `for_each` (compiled by Numba;
imported only where a GPU or the CUDA simulator runs them)."""
from __future__ import annotations


def clear(i, a):
    """a[i] = 0."""
    a[i] = 0
    return 0


def mark_outside(i, flags, ids, lo, hi):
    """Flag vertex ids[i] if it lies outside the owned range [lo, hi)."""
    v = ids[i]
    if v < lo or v >= hi:
        flags[v] = 1
    return 0


def mark_moved(i, flags, parent, ids):
    """Flag id ids[i] if it is not its own root."""
    x = ids[i]
    if parent[x] != x:
        flags[x] = 1
    return 0


def take(i, out, values, ids):
    """out[i] = values[ids[i]]."""
    out[i] = values[ids[i]]
    return 0


def assign(i, table, ids, values):
    """table[ids[i]] = values[i]."""
    table[ids[i]] = values[i]
    return 0


def relabel(i, out, table, labels, lo):
    """out[i] = table[labels[lo + i]]: an owned vertex's final label through its local one."""
    out[i] = table[labels[lo + i]]
    return 0
