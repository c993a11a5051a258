"""The e-graph's rows in host memory with the NumPy twins of the device phases: the reference
backend's e-graph, with the same operations as `device.DeviceEGraph`."""
from __future__ import annotations

import numpy as np

from .closure_numpy import rebuild_numpy, union_numpy
from .signature import same_signature, signature_hash, structural_pairs


class HostEGraph:
    def __init__(self, eclass: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                 n_classes: int, table_capacity: int | None = None):
        """The rows given, kept as they are where they are int64 already: the e-graph passes its own
        checked copies, never the caller's arrays."""
        self.eclass, self.op = eclass.astype(np.int64, copy=False), op.astype(np.int64, copy=False)
        self.offsets, self.children = offsets.astype(np.int64, copy=False), children.astype(np.int64, copy=False)
        self.parent = np.arange(n_classes, dtype=np.int64)
        self.n, self.n_classes = op.size, n_classes
        self._memo = None  # (sorted signature hashes, their rows), made after a rebuild
        self._index = None  # a converged rebuild's signature index, kept while only unions follow it
        self._settled = False  # the index is a converged rebuild's and no union came since: nothing to rebuild

    def union(self, a: np.ndarray, b: np.ndarray) -> None:
        self._settled = False  # first: an interrupted union may have merged some classes
        union_numpy(self.parent, a, b)
        self._memo = None

    def find(self, ids: np.ndarray) -> np.ndarray:
        return self.parent[ids]

    def rebuild(self, max_rounds: int | None = None, on_round=None, persistent: bool = True) -> dict:
        if self._settled and self._index is not None:  # what rebuild_numpy would find: one round, over no rows,
            if on_round is not None:                   # merging nothing
                on_round()
            return dict(rounds=1, unions=0, nodes_touched=0, converged=True, seconds=0.0, device_ns=0,
                        phase_ns={"rebuild": 0})
        self._memo = None
        self._settled = False
        index, self._index = self._index, None  # a rebuild stopped part way leaves none
        stats = rebuild_numpy(self.parent, self.op, self.offsets, self.children, self.eclass, max_rounds, on_round,
                              index)
        self._index = stats.pop("index")
        self._settled = self._index is not None
        stats["device_ns"] = int(stats["seconds"] * 1e9)  # the CPU is this backend's device
        stats["phase_ns"] = {"rebuild": stats["device_ns"]}
        return stats

    def lookup(self, op: np.ndarray, offsets: np.ndarray, children: np.ndarray) -> np.ndarray:
        if self._memo is None and self._index is not None:  # a converged rebuild's: rows by hash, children canonical
            self._memo = (self._index[2], self._index[1])
        if self._memo is None:
            h = signature_hash(self.op, self.offsets, self.children)
            order = np.argsort(h, kind="stable")
            self._memo = (h[order], order)
        hs, rows = self._memo
        q_children = self.parent[children]
        qh = signature_hash(op, offsets, q_children)
        at = np.searchsorted(hs, qh)
        out = np.full(op.size, -1, np.int64)
        if rows.size == 0:
            return out
        cand = np.minimum(at, rows.size - 1)
        hit = hs[cand] == qh
        # compare the query with its first candidate row exactly; rare collisions scan the run
        both_op = np.concatenate([self.op, op])
        both_off = np.concatenate([self.offsets[:-1], self.offsets[-1] + offsets])
        both_ch = np.concatenate([self.children, q_children])
        q = np.arange(op.size) + self.n
        ok = hit & same_signature(both_op, both_off, both_ch, rows[cand], q)
        out[ok] = self.parent[self.eclass[rows[cand[ok]]]]
        for k in np.flatnonzero(hit & ~ok):
            j = at[k]
            while j < rows.size and hs[j] == qh[k]:
                if same_signature(both_op, both_off, both_ch, rows[[j]], q[[k]])[0]:
                    out[k] = self.parent[self.eclass[rows[j]]]
                    break
                j += 1
        return out

    def classes(self) -> np.ndarray:
        return self.parent[self.eclass]

    def download(self) -> dict[str, np.ndarray]:
        return dict(eclass=self.eclass.copy(), op=self.op.copy(), offsets=self.offsets.copy(),
                    children=self.children.copy(), parent=self.parent.copy())

    def append(self, eclass: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
               n_classes: int) -> None:
        grown = (np.concatenate([self.eclass, eclass]), np.concatenate([self.op, op]),
                 np.concatenate([self.offsets[:-1], self.offsets[-1] + offsets]),
                 np.concatenate([self.children, children]),
                 np.concatenate([self.parent, np.arange(self.n_classes, n_classes)]))
        index = None if self._index is None else _filed(self._index, self.n, op, offsets, children)
        self._index = None  # first: a Ctrl-C between the two leaves no index of fewer rows
        # one assignment, no call in it and on one line: an interruption (Ctrl-C) lands before it or after it
        self.eclass, self.op, self.offsets, self.children, self.parent, self.n, self.n_classes, self._memo, \
            self._index = (*grown, grown[1].size, n_classes, None, index)

    def structural_pairs(self, capacity: int) -> tuple[np.ndarray, int]:
        pairs = structural_pairs(self.op, self.offsets, self.children, self.eclass)
        return pairs[:capacity], len(pairs)


def _filed(index: tuple, n: int, op: np.ndarray, offsets: np.ndarray, children: np.ndarray) -> tuple:
    """A converged rebuild's signature index (hashes, rows by hash, their hashes) with rows n, n+1,
    ... appended: rows with canonical children, equal to no row (as `add` appends them), so the
    rebuild after them has nothing to merge and hashes no other row (a one-row add cost a hash and
    a sort of every row)."""
    hashes, order, hs = index
    fresh = signature_hash(op, offsets, children)
    by = np.argsort(fresh, kind="stable")
    at = np.searchsorted(hs, fresh[by], "right")  # after equal hashes: a hash's rows stay in ascending order
    return np.concatenate([hashes, fresh]), _spliced(order, at, n + by), _spliced(hs, at, fresh[by])


def _spliced(a: np.ndarray, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """np.insert(a, at, values) for ascending `at`, by slices where they are few (np.insert's own
    index work cost 20 ms on 1.6M rows for one value)."""
    if at.size > 64:
        return np.insert(a, at, values)
    cuts = at.tolist()
    pieces = [a[lo:hi] for lo, hi in zip([0] + cuts, cuts + [a.size])]
    out = [pieces[0]]
    for k in range(at.size):
        out += [values[k:k + 1], pieces[k + 1]]
    return np.concatenate(out)

