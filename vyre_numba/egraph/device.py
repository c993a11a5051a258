"""The e-graph resident on the GPU and its incremental rebuild (kernels in `kernels.py`).

    while the worklist is not empty:          # rows that may have a new signature
        rewrite: the listed rows' children and class made canonical, their table entries freed
        insert:  each listed row hashed into the table; an equal row found there unions the classes
        compress: every class id pointed at its root, flagged where the root changed
        worklist: the rows using a flagged class (through `uses`), compacted into the next list

Invariants: every row's table entry (if any) was made from its current children, which are
canonical unless the row is flagged; a flagged class id's rows are flagged before the next round;
so when no class changes, no two rows with equal signatures are in different classes. The
hash table only claims never-used slots (freed ones stay tombstones until the host clears it),
so equal rows inserted at once always meet at one slot. Only counts cross to the host."""
from __future__ import annotations

import os
import time

import numpy as np

from ..errors import DispatchError

THREADS = 32 if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else 256  # the simulator runs a thread per thread
PHASES = ("rewrite", "insert", "compress", "worklist")


def _blocks(n: int) -> int:
    return max(1, -(-n // THREADS))


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())


class DeviceEGraph:
    """The device arrays of an e-graph (rows, union-find, hash table, flags) and its rebuild.
    `table_capacity` (a power of two, at least 2 slots a row by default) is grown when full."""

    def __init__(self, eclass: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                 n_classes: int, table_capacity: int | None = None):
        from numba import cuda

        self._cuda = cuda
        self.n, self.n_classes = op.size, n_classes
        self.op = cuda.to_device(op.astype(np.int32))
        self.off = cuda.to_device(offsets.astype(np.int64))
        self.ch = cuda.to_device(children.astype(np.int32) if children.size else np.zeros(1, np.int32))
        self.cls = cuda.to_device(eclass.astype(np.int32))
        ids = np.arange(n_classes, dtype=np.int32)
        self.parent, self.canon = cuda.to_device(ids), cuda.to_device(ids)
        self.classflag = cuda.device_array(n_classes, np.uint8)
        self.rowflag = cuda.to_device(np.ones(self.n, np.uint8))  # every row is new to the table
        self.slot = cuda.to_device(np.full(self.n, -1, np.int32))
        self.ctl = cuda.to_device(np.zeros(4, np.int64))
        self._set_uses(children)
        self.capacity = _pow2(max(table_capacity or 2 * self.n, 2))
        self.table = cuda.to_device(np.full(self.capacity, -1, np.int32))
        self.used = 0

    def _set_uses(self, children: np.ndarray) -> None:
        order = np.argsort(children, kind="stable")
        row = np.repeat(np.arange(self.n, dtype=np.int32), np.diff(self.off.copy_to_host()))
        uses_off = np.searchsorted(children[order], np.arange(self.n_classes + 1)).astype(np.int64)
        self.uses_off = self._cuda.to_device(uses_off)
        self.uses = self._cuda.to_device(row[order] if row.size else np.zeros(1, np.int32))

    # --- small operations -------------------------------------------------------------------
    def union(self, a: np.ndarray, b: np.ndarray) -> None:
        from . import kernels

        if a.size:
            da, db = self._cuda.to_device(a.astype(np.int32)), self._cuda.to_device(b.astype(np.int32))
            kernels.link_pairs[_blocks(a.size), THREADS](da, db, self.parent, self.ctl)

    def find(self, ids: np.ndarray) -> np.ndarray:
        from . import kernels

        if ids.size == 0:
            return np.zeros(0, np.int64)
        d = self._cuda.to_device(ids.astype(np.int32))
        out = self._cuda.device_array(ids.size, np.int32)
        kernels.find_ids[_blocks(ids.size), THREADS](d, self.parent, out)
        return out.copy_to_host().astype(np.int64)

    def lookup(self, op: np.ndarray, offsets: np.ndarray, children: np.ndarray) -> np.ndarray:
        """Classes of the rows equal to the given e-nodes (-1 where none); needs a rebuilt graph."""
        from . import kernels

        if op.size == 0:
            return np.zeros(0, np.int64)
        out = self._cuda.device_array(op.size, np.int32)
        qch = self._cuda.to_device(children.astype(np.int32) if children.size else np.zeros(1, np.int32))
        kernels.lookup[_blocks(op.size), THREADS](self._cuda.to_device(op.astype(np.int32)),
                                                 self._cuda.to_device(offsets.astype(np.int64)), qch, self.op,
                                                 self.off, self.ch, self.cls, self.canon, self.table, out)
        return out.copy_to_host().astype(np.int64)

    def classes(self) -> np.ndarray:
        return self.parent.copy_to_host().astype(np.int64)[self.cls.copy_to_host()]

    def download(self) -> dict[str, np.ndarray]:
        """Host copies of the rows and the union-find."""
        ch = self.ch.copy_to_host()
        off = self.off.copy_to_host()
        return dict(eclass=self.cls.copy_to_host().astype(np.int64), op=self.op.copy_to_host(),
                    offsets=off, children=ch[:off[-1]].astype(np.int64),
                    parent=self.parent.copy_to_host().astype(np.int64))

    def append(self, eclass: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
               n_classes: int, all_children: np.ndarray) -> None:
        """Add rows (flagged for the next rebuild) and class ids up to `n_classes`;
        `all_children` are every row's children as first given, for the uses index."""
        cuda = self._cuda
        k = op.size

        def cat(dev, host):
            return cuda.to_device(np.concatenate([dev.copy_to_host()[:dev.size], host]))

        base = int(self.off[self.n:self.n + 1].copy_to_host()[0])
        self.op = cat(self.op, op.astype(np.int32))
        self.cls = cat(self.cls, eclass.astype(np.int32))
        old_ch = self.ch.copy_to_host()[:base]
        self.ch = cuda.to_device(np.concatenate([old_ch, children.astype(np.int32)]) if base + children.size
                                 else np.zeros(1, np.int32))
        self.off = cuda.to_device(np.concatenate([self.off.copy_to_host()[:self.n], base + offsets.astype(np.int64)]))
        self.slot = cat(self.slot, np.full(k, -1, np.int32))
        self.rowflag = cat(self.rowflag, np.ones(k, np.uint8))
        ids = np.arange(self.n_classes, n_classes, dtype=np.int32)
        self.parent, self.canon = cat(self.parent, ids), cat(self.canon, ids)
        self.classflag = cuda.device_array(n_classes, np.uint8)
        self.n, self.n_classes = self.n + k, n_classes
        self._set_uses(all_children)

    # --- rebuild ---------------------------------------------------------------------------
    def _ctl(self) -> np.ndarray:
        return self.ctl.copy_to_host()

    def _clear_table(self, capacity: int) -> None:
        cuda = self._cuda
        if capacity != self.capacity:
            self.table = cuda.device_array(capacity, np.int32)
            self.capacity = capacity
        self.table[:] = -1
        self.slot[:] = -1
        self.rowflag[:] = 1
        self.used = 0

    def rebuild(self, max_rounds: int | None = None) -> dict:
        """Restore congruence (see the module docstring); rounds, unions, nodes_touched, converged,
        per-phase device seconds and the table's capacity after."""
        from .. import compaction
        from . import kernels

        cuda = self._cuda
        times = dict.fromkeys(PHASES, 0.0)
        unions, rounds, touched, converged, regrown = 0, 0, 0, False, 0
        t_all = time.perf_counter()
        self._compress_and_mark(times)  # unions made since the last rebuild flag their parents
        while max_rounds is None or rounds < max_rounds:
            t = time.perf_counter()
            work = compaction.nonzero(self.rowflag) if self.n else cuda.device_array(0, np.int64)
            if work.size == 0:
                converged = True
                break
            if self.used + work.size > self.capacity // 2:  # tombstones and rows past half: a fresh table
                self._clear_table(_pow2(max(self.capacity, 2 * (self.n + 1))))
                work = compaction.nonzero(self.rowflag)
            times["worklist"] += time.perf_counter() - t
            t = time.perf_counter()
            kernels.rewrite[_blocks(work.size), THREADS](work, self.canon, self.off, self.ch, self.cls, self.table,
                                                       self.slot, self.rowflag)
            cuda.synchronize()
            times["rewrite"] += time.perf_counter() - t
            t = time.perf_counter()
            self.ctl[:] = 0
            kernels.insert[_blocks(work.size), THREADS](work, self.op, self.off, self.ch, self.cls, self.parent,
                                                      self.table, self.slot, self.ctl, np.int32(1))
            ctl = self._ctl()
            times["insert"] += time.perf_counter() - t
            touched += int(work.size)
            rounds += 1
            unions += int(ctl[kernels.UNIONS])
            self.used += int(ctl[kernels.USED])
            if ctl[kernels.FULL]:  # some rows found no slot: a table twice the size, every row again
                regrown += 1
                self._clear_table(2 * self.capacity)
                continue
            self._compress_and_mark(times)
        t = time.perf_counter()
        kernels.canonical_classes[_blocks(self.n), THREADS](self.cls, self.canon)
        cuda.synchronize()
        times["compress"] += time.perf_counter() - t
        return dict(rounds=rounds, unions=unions, nodes_touched=touched, converged=converged,
                    seconds=time.perf_counter() - t_all, phase_seconds=times, table_capacity=self.capacity,
                    table_regrown=regrown)

    def _compress_and_mark(self, times: dict) -> None:
        from .. import compaction
        from . import kernels

        t = time.perf_counter()
        kernels.compress[_blocks(self.n_classes), THREADS](self.parent, self.canon, self.classflag)
        self._cuda.synchronize()
        times["compress"] += time.perf_counter() - t
        t = time.perf_counter()
        dirty = compaction.nonzero(self.classflag)
        if dirty.size:
            kernels.mark_parents[_blocks(dirty.size), THREADS](dirty, self.uses_off, self.uses, self.rowflag)
        times["worklist"] += time.perf_counter() - t

    def structural_pairs(self, capacity: int) -> tuple[np.ndarray, int]:
        """((k, 2) pairs written, pairs found): for every signature group (one pass over a fresh
        table), its smallest class with each row's other class; duplicates included. found >
        capacity means only the first `capacity` were written."""
        from . import kernels

        cuda = self._cuda
        size = _pow2(2 * self.n + 2)
        table = cuda.to_device(np.full(size, -1, np.int32))
        low = cuda.to_device(np.full(size, np.iinfo(np.int32).max, np.int32))
        slot = cuda.device_array(max(self.n, 1), np.int32)
        ctl = cuda.to_device(np.zeros(4, np.int64))
        work = cuda.to_device(np.arange(self.n, dtype=np.int64))
        pairs = cuda.device_array((max(capacity, 1), 2), np.int32)
        if self.n:
            b = _blocks(self.n)
            kernels.insert[b, THREADS](work, self.op, self.off, self.ch, self.cls, self.parent, table, slot, ctl,
                                       np.int32(0))
            kernels.group_min[b, THREADS](self.op, self.off, self.ch, self.cls, table, low)
            ctl[:] = 0
            kernels.congruent_pairs[b, THREADS](self.op, self.off, self.ch, self.cls, table, low, pairs, ctl)
        found = int(ctl.copy_to_host()[kernels.UNIONS])
        return pairs.copy_to_host()[:min(found, capacity)].astype(np.int64), found


def check_rebuilt(pending: bool, what: str) -> None:
    if pending:
        raise DispatchError(f"{what} needs canonical children, and unions were made since the last rebuild. "
                            "Fix: call egraph.rebuild() first.")
