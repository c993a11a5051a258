"""A union-find over pairs spread across Dask workers: each worker first reduces its shard of
(a, b) pairs to a forest (every id the shard names paired with its smallest id in the shard's own
sets), in parallel; one task then joins the forests. A forest has fewer pairs than ids, so what
moves between workers is bounded by the ids a shard names, not by its pairs.

Both steps run the same sequential union-find (compiled with Numba): ids are mapped to dense
positions (directly, as an offset, where the ids span a range not much larger than their count;
else by one sort), each pair hooks the larger root under the smaller, paths are halved on the way.
Invariants: parent[x] <= x, so every tree's root is its smallest id; a hook joins two roots, so
trees never split; the result names each id whose root is another id once, with that root."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..unique import index_of, unique
from .cluster import submit

DENSE_SPAN = 1 << 26  # ids spanning fewer values than this and 32x their count (or 2**20, or 8x their count) are
# their own positions; sparser ones are sorted (a pass over the span would cost more)


def _join(pos: np.ndarray, size: int) -> np.ndarray:
    """Parent positions after joining the (k, 2) positions `pos` in 0..size-1: every position
    points straight at its tree's smallest."""
    parent = np.arange(size, dtype=np.int32 if size < 2**31 else np.int64)  # int32: half the cache misses
    _hook(pos, parent)
    return parent


@njit(cache=False)
def _hook(pos: np.ndarray, parent: np.ndarray) -> None:
    size = parent.size
    for i in range(pos.shape[0]):
        a, b = pos[i, 0], pos[i, 1]
        while parent[a] != a:  # path halving
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    for x in range(size):  # parents are smaller, so one ascending pass flattens every path
        parent[x] = parent[parent[x]]


@njit(cache=False)
def _moved(parent: np.ndarray, base: int) -> tuple:
    """(ids, roots), ascending by id, of every dense position whose root is another position
    (id = base + position); positions no pair named are their own roots and stay out."""
    m = 0
    for x in range(parent.size):
        if parent[x] != x:
            m += 1
    out_ids = np.empty(m, np.int64)
    out_roots = np.empty(m, np.int64)
    m = 0
    for x in range(parent.size):
        if parent[x] != x:
            out_ids[m] = x + base
            out_roots[m] = parent[x] + base
            m += 1
    return out_ids, out_roots


def union(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, roots): every id of the (k, 2) int64 `pairs` whose set's smallest id is another id,
    with that id, ascending by id (each once)."""
    pairs = np.ascontiguousarray(np.asarray(pairs, np.int64).reshape(-1, 2))
    if not pairs.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    flat = pairs.reshape(-1)
    lo, hi = int(flat.min()), int(flat.max())
    span = hi - lo
    if span < max(1 << 20, 8 * flat.size) or span < min(DENSE_SPAN, 32 * flat.size):
        pos = pairs - lo
        return _moved(_join(pos, hi - lo + 1), lo)
    keys = unique(flat)
    pos = index_of(keys, flat).astype(np.int64)
    parent = _join(pos.reshape(-1, 2), keys.size)
    moved = parent != np.arange(keys.size)
    return keys[moved], keys[parent[moved]]


def _forest(shard: np.ndarray) -> np.ndarray:
    """The shard's pairs reduced to (id, smallest id of its set) rows."""
    ids, roots = union(shard)
    return np.stack([ids, roots], 1) if ids.size else np.zeros((0, 2), np.int64)


def _joined(*forests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    forests = [f for f in forests if f.size]
    return union(np.concatenate(forests)) if forests else (np.zeros(0, np.int64), np.zeros(0, np.int64))


def merge(client, shards: list, places: list, *, name: str = "merge") -> tuple[object, int]:
    """(future of (ids, roots) for every id the pairs joined to a smaller one, join rounds): the
    union of the pairs in `shards` (futures of (k, 2) int64 arrays, shard i kept on worker
    places[i]), the root of each set its smallest id. Each shard is reduced where it lives, then
    one task joins the reductions: one join round (0 without shards)."""
    forests = [submit(client, _forest, s, worker=w, name=f"{name}-forest") for s, w in zip(shards, places)]
    joined = submit(client, _joined, *forests, worker=places[0] if places else None, name=f"{name}-join")
    return joined, int(bool(shards))
