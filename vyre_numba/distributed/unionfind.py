"""A union-find over pairs spread across Dask workers, iterated to a fixed point.

Each shard of (a, b) pairs stays on its worker; the parent map over the ids the pairs name (the
keys, few next to the data: labels of partitions, classes merged in a round) is one array that
every round reads. A round: every shard proposes, for each pair whose ends have different roots,
to hook the larger root under the smaller; one task applies the smallest proposal per root and
jumps pointers until every key points at its root; shards drop pairs already inside one tree.
It ends when no shard proposes anything.

Invariants: parent[k] <= k (as positions in the sorted keys, so as ids), hence every tree's root
is its smallest id; a hook joins two roots, so trees never split; after a round every key points
straight at its root. Each round hooks at least one root per set still in pieces, so it ends."""
from __future__ import annotations

import numpy as np

from ..unique import index_of, unique
from .cluster import part, submit


def _keys(*shards: np.ndarray) -> np.ndarray:
    ids = [s.reshape(-1) for s in shards if s.size]
    return unique(np.concatenate(ids)).astype(np.int64) if ids else np.zeros(0, np.int64)


def _positions(shard: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if not shard.size:
        return np.zeros((0, 2), np.int64)
    pos = index_of(keys, shard).reshape(-1, 2)
    return pos[pos[:, 0] != pos[:, 1]]


def _identity(keys: np.ndarray) -> np.ndarray:
    return np.arange(keys.size, dtype=np.int64)


def _hooks(pairs: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(proposals (hi root, lo root), the pairs still joining two trees)."""
    ra, rb = parent[pairs[:, 0]], parent[pairs[:, 1]]
    apart = ra != rb
    hooks = np.stack([np.maximum(ra, rb)[apart], np.minimum(ra, rb)[apart]], 1)
    return hooks, pairs[apart]


def _apply(parent: np.ndarray, *proposals: np.ndarray) -> tuple[np.ndarray, int]:
    hooks = [p for p in proposals if p.size]
    if not hooks:
        return parent, 0
    h = np.concatenate(hooks)
    parent = parent.copy()
    np.minimum.at(parent, h[:, 0], h[:, 1])
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return parent, int(h.shape[0])
        parent = grand


def _mapping(keys: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, roots) of every key whose root is another id."""
    moved = parent != np.arange(keys.size)
    return keys[moved], keys[parent[moved]]


def merge(client, shards: list, places: list, *, name: str = "merge") -> tuple[object, int]:
    """(future of (ids, roots) for every id the pairs joined to a smaller one, rounds): the
    union of the pairs in `shards` (futures of (k, 2) int64 arrays, shard i kept on worker
    places[i]), the root of each set its smallest id."""
    keys = submit(client, _keys, *shards, worker=places[0] if places else None, name=f"{name}-keys")
    pairs = [submit(client, _positions, s, keys, worker=w, name=f"{name}-positions") for s, w in zip(shards, places)]
    parent = submit(client, _identity, keys, worker=places[0] if places else None, name=f"{name}-parent")
    rounds = 0
    while True:
        out = [submit(client, _hooks, p, parent, worker=w, name=f"{name}-hooks") for p, w in zip(pairs, places)]
        hooks = [part(client, o, 0, w, f"{name}-proposals") for o, w in zip(out, places)]
        pairs = [part(client, o, 1, w, f"{name}-pairs") for o, w in zip(out, places)]
        applied = submit(client, _apply, parent, *hooks, worker=places[0] if places else None, name=f"{name}-apply")
        count = part(client, applied, 1, None, f"{name}-count").result()
        if count == 0:
            break
        parent = part(client, applied, 0, places[0] if places else None, f"{name}-parent")
        rounds += 1
    return submit(client, _mapping, keys, parent, worker=places[0] if places else None, name=f"{name}-mapping"), rounds
