"""E-node signatures on the host: a 64-bit hash of (operator, canonical children) for grouping, and
the exact comparison that decides equality (a hash never merges anything by itself). The NumPy
twins of the device's signature and comparison phases."""
from __future__ import annotations

import numpy as np

from ..unique import unique_rows

SEED, CHILD = np.uint64(0xA24BAED4963EE407), np.uint64(0x9FB21C651E98DF25)
M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping)."""
    x = x ^ (x >> np.uint64(30))
    x = x * M1
    x = x ^ (x >> np.uint64(27))
    x = x * M2
    return x ^ (x >> np.uint64(31))


_MASK = (1 << 64) - 1
_SEED, _CHILD, _M1, _M2 = int(SEED), int(CHILD), int(M1), int(M2)  # the constants above as Python ints


def mix64_int(x: int) -> int:
    """`mix64` of one Python int in [0, 2**64)."""
    x ^= x >> 30
    x = x * _M1 & _MASK
    x ^= x >> 27
    x = x * _M2 & _MASK
    return x ^ x >> 31


def row_hash(op: int, children: tuple) -> int:
    """`signature_hash` of one row, its operator and canonical children given as Python ints: the
    same bits, without the dozens of array operations a call on a few rows costs."""
    h = mix64_int(((op & _MASK) << 32 & _MASK) ^ len(children) ^ _SEED)
    acc = 0
    for k, c in enumerate(children):
        acc ^= mix64_int((c & _MASK) ^ (k << 32) ^ _CHILD)
    return mix64_int(h ^ acc)


def signature_hash(op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                   row: np.ndarray | None = None) -> np.ndarray:
    """hash(op, arity, children in order) of every row, uint64; `children` must be canonical
    (`row`: the row of each child, where the caller has it). The hash: mix64((op << 32) ^ arity ^
    SEED) xor-ed with mix64(child ^ (position << 32) ^ CHILD) of each child, mixed again: ids and
    positions are below 2**32, so no part is another's in disguise."""
    n = op.size
    arity = np.diff(offsets).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = mix64((op.astype(np.int64).astype(np.uint64) << np.uint64(32)) ^ arity ^ SEED)
        acc = np.zeros(n, np.uint64)
        if children.size:
            row = np.repeat(np.arange(n), np.diff(offsets)) if row is None else row
            pos = (np.arange(children.size, dtype=np.int64) - offsets[row]).astype(np.uint64)
            part = mix64(children.astype(np.int64).astype(np.uint64) ^ (pos << np.uint64(32)) ^ CHILD)
            np.bitwise_xor.at(acc, row, part)
        return mix64(h ^ acc)


def same_signature(op: np.ndarray, offsets: np.ndarray, children: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Whether rows r[k] and s[k] have the same operator and the same children in order (exact)."""
    ar_r = offsets[r + 1] - offsets[r]
    same = (op[r] == op[s]) & (ar_r == offsets[s + 1] - offsets[s])
    k = np.flatnonzero(same)
    if k.size:
        width = ar_r[k]
        pair = np.repeat(np.arange(k.size), width)
        pos = np.arange(pair.size) - np.repeat(np.cumsum(width) - width, width)
        differ = children[offsets[r[k]][pair] + pos] != children[offsets[s[k]][pair] + pos]
        same[k[np.bincount(pair[differ], minlength=k.size) > 0]] = False
    return same


def signature_heads(op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                    hashes: np.ndarray | None = None, with_order: bool = False):
    """head[r]: the first row (in row order) with the same operator and children as row r. Rows
    are grouped by hash (`hashes`, the rows' `signature_hash`, when already known) and each
    compared exactly with its group's first row, so a group of any size costs one comparison a
    row; rows whose hash collided with another signature's are grouped exactly instead.
    `with_order`: (head, the rows in ascending order of hash), the order the grouping sorted."""
    n = op.size
    head = np.arange(n)
    if n < 2:
        return (head, np.arange(n)) if with_order else head
    h = signature_hash(op, offsets, children) if hashes is None else hashes
    order = np.argsort(h)  # not stable (4x faster): each group's first row is its smallest
    hs = h[order]
    start = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])
    first = np.repeat(np.minimum.reduceat(order, start), np.diff(np.r_[start, n]))
    same = np.ones(n, bool)
    other = np.flatnonzero(order != first)
    same[other] = same_signature(op, offsets, children, order[other], first[other])
    head[order[same]] = first[same]
    odd = order[~same]
    if odd.size:
        seen: dict = {}
        for r in np.sort(odd).tolist():  # a collided row may still equal an earlier collided row
            key = (int(op[r]), tuple(children[offsets[r]:offsets[r + 1]].tolist()))
            head[r] = seen.setdefault(key, r)
    return (head, order) if with_order else head


def congruent_pairs(op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                    eclass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) class ids of rows with equal signatures in different classes: each row's class
    against its group's first row's class."""
    head = signature_heads(op, offsets, children)
    a, b = eclass[head], eclass
    differ = a != b
    return a[differ].astype(np.int64), b[differ].astype(np.int64)


def structural_pairs(op: np.ndarray, offsets: np.ndarray, children: np.ndarray, eclass: np.ndarray) -> np.ndarray:
    """Unique (min, max) class pairs of one pass: for every signature group, its smallest class
    with each other class in the group; sorted."""
    head = signature_heads(op, offsets, children)
    low = eclass.astype(np.int64).copy()
    np.minimum.at(low, head, eclass)
    a, b = low[head], eclass.astype(np.int64)
    differ = a != b
    pairs = np.stack([a[differ], b[differ]], 1)
    return unique_rows(pairs) if pairs.size else pairs.reshape(0, 2)
