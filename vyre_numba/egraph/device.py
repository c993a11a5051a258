"""The e-graph resident on the GPU and its incremental rebuild (kernels in `kernels.py`).

    compress the unions made since the last rebuild      # flags the rows using a merged class
    loop:
        worklist: the flagged rows, compacted (the count is the round's one host read)
        rewrite:  the listed rows' children and class made canonical, their table entries freed
        insert:   each listed row hashed into the table; an equal row found there unions the classes
        compress: every class id pointed at its root; the rows using a class whose root changed flagged

Invariants: every row's table entry (if any) was made from its current children, which are
canonical unless the row is flagged; a class whose root changes has its rows flagged in the same
pass; so when no row is flagged, no two rows with equal signatures are in different classes. The
hash table only claims never-used slots (freed ones stay tombstones until the host clears it),
so equal rows inserted at once always meet at one slot. Only counts cross to the host: the
worklist's length and the insert's control words, read together once a round.

A round of few rows is mostly that read and four launches, so once a worklist fits the GPU's
threads (`_room`), the rounds go to one persistent cooperative launch (`kernels.rounds_on_device`,
a bounded grid barrier after each phase, where listing a row also rewrites it), which reads the
count on the device and returns when the rebuild converges, after ROUNDS_PER_LAUNCH rounds (to
report them), or with a worklist past `_room` handed back. Its rounds are the host's, round for
round. Phase times are device times (CUDA events around each phase, or around the launch)."""
from __future__ import annotations

import time

import numpy as np

from ..errors import DispatchError
from ..gpu.numba_launch import launch_quietly
from ..simulator import SIMULATED as _SIM

THREADS = 32 if _SIM else 256  # the simulator runs a thread per thread
PHASES = ("worklist", "rewrite", "insert", "compress", "on_device")  # on_device: rounds of one persistent launch
PER_SM = 1  # blocks a multiprocessor in a persistent launch: a chain round took 10.0 us at 1, 11.9 at 2, 16.6 at 4 (H200)
ROWS_PER_THREAD = 16  # a round of more listed rows than this times the persistent grid's threads goes back to the host
ROUNDS_PER_LAUNCH = 4096  # so a long rebuild still reports its rounds (and hears Ctrl-C) every few milliseconds
SPINS = 1 << 24  # polls of the persistent launch's grid barrier before a block gives up (seconds)


def _blocks(n: int) -> int:
    return max(1, -(-n // THREADS))


def _cooperative() -> bool:
    """Whether this GPU launches cooperatively (the simulator runs one block, whose barrier is its own)."""
    if _SIM:
        return True
    from numba import cuda

    return bool(cuda.get_current_device().COOPERATIVE_LAUNCH)


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())


class _PhaseClock:
    """CUDA events between the phases of a rebuild, summed per phase once the stream has been
    waited for (an interval starts at `start()` or the last `lap`, so host gaps are not counted)."""

    def __init__(self, cuda):
        self._cuda, self._free, self._open, self._last = cuda, [], [], None
        self.ns = dict.fromkeys(PHASES, 0)

    def _record(self):
        e = self._free.pop() if self._free else self._cuda.event()
        e.record()
        return e

    def start(self) -> None:
        self._last = self._record()

    def lap(self, phase: str) -> None:
        e = self._record()
        self._open.append((phase, self._last, e))
        self._last = e

    def collect(self) -> None:
        """Add up the intervals recorded so far; call after a synchronisation."""
        done = {}
        for phase, a, b in self._open:
            self.ns[phase] += max(0, int(a.elapsed_time(b) * 1e6))  # the simulator says -1
            done[id(a)], done[id(b)] = a, b
        self._open = []
        done.pop(id(self._last), None)
        self._free.extend(done.values())


_APPENDED = ("op", "cls", "ch", "off", "slot", "rowflag", "parent", "canon", "uses_off", "uses", "n", "n_classes", "nch")


class DeviceEGraph:
    """The device arrays of an e-graph (rows, union-find, hash table, flags) and its rebuild.
    `table_capacity` (a power of two, at least 2 slots a row by default) is grown when full."""

    def __init__(self, eclass: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
                 n_classes: int, table_capacity: int | None = None):
        from numba import cuda

        self._cuda = cuda
        self.n, self.n_classes = op.size, n_classes
        self._launches: dict = {}  # kernel name -> NumbaLaunch, owned by this e-graph
        self.op = cuda.to_device(np.ascontiguousarray(op, np.int32))  # no host copy where the type is right
        self.off = cuda.to_device(np.ascontiguousarray(offsets, np.int64))
        self.ch = cuda.to_device(np.ascontiguousarray(children, np.int32) if children.size else np.zeros(1, np.int32))
        self.cls = cuda.to_device(np.ascontiguousarray(eclass, np.int32))
        self.parent = cuda.to_device(np.arange(n_classes, dtype=np.int32))
        self.canon = cuda.device_array(n_classes, np.int32)
        if n_classes:
            self.canon.copy_to_device(self.parent)
        # filled on the device: the table alone is 16 bytes a row, which the host need not write nor send
        self.rowflag = cuda.device_array(self.n, np.uint8)
        self._fill(self.rowflag, np.uint8(1))  # every row is new to the table
        self.slot = cuda.device_array(self.n, np.int32)
        self._fill(self.slot, np.int32(-1))
        self.ctl = cuda.to_device(np.zeros(4, np.int64))
        self._ctl_host = cuda.pinned_array(4, np.int64)
        self._work = None  # the round's row list, room for every row
        self._selector = None  # the worklist's compaction, made on first use
        self.nch = int(children.size)
        self.uses_off, self.uses = self._uses(self.off, self.ch, self.n, self.n_classes, self.nch)
        self.capacity = _pow2(max(table_capacity or 4 * self.n, 2))  # rows fill a quarter; tombstones the next
        self.table = cuda.device_array(self.capacity, np.int32)
        self._fill(self.table, np.int32(-1))
        self.used = 0
        self._stale = False  # a rebuild stopped part way: rows may be out of the table, counts unread
        self.on_device = _cooperative()  # small rounds run in one persistent launch (False: one host read a round)
        self._sms = 1 if _SIM else cuda.get_current_device().MULTIPROCESSOR_COUNT  # asked once: `_room` runs a round
        self._coop = None  # that launch's (launcher, words: grid barrier state then st, blocks), made on first use

    def _uses(self, off, ch, n: int, n_classes: int, nch: int) -> tuple:
        """(uses_off, uses): the rows using each class id (`uses[uses_off[c]:uses_off[c + 1]]`), from
        the children `ch` as stored: any member of a class serves, since compress flags a class id's
        rows whenever its root changes. A counting sort: counts and scatter on the device, the scan
        on the host."""
        from . import kernels

        cuda = self._cuda
        counts = cuda.to_device(np.zeros(max(n_classes, 1), np.int32))
        if n:
            launch_quietly(kernels.count_uses, _blocks(n), THREADS, None, off, ch, counts)
        uses_off = np.zeros(n_classes + 1, np.int64)
        np.cumsum(counts.copy_to_host()[:n_classes], out=uses_off[1:])
        uses = cuda.device_array(max(nch, 1), np.int32)
        if n:
            cursor = cuda.to_device(uses_off[:-1].copy() if n_classes else np.zeros(1, np.int64))
            launch_quietly(kernels.index_uses, _blocks(n), THREADS, None, off, ch, cursor, uses)
        return cuda.to_device(uses_off), uses

    # --- small operations -------------------------------------------------------------------
    def union(self, a: np.ndarray, b: np.ndarray) -> None:
        from . import kernels

        if a.size:
            da, db = self._cuda.to_device(a.astype(np.int32)), self._cuda.to_device(b.astype(np.int32))
            launch_quietly(kernels.link_pairs, _blocks(a.size), THREADS, None, da, db, self.parent, self.ctl)

    def find(self, ids: np.ndarray) -> np.ndarray:
        from . import kernels

        if ids.size == 0:
            return np.zeros(0, np.int64)
        d = self._cuda.to_device(ids.astype(np.int32))
        out = self._cuda.device_array(ids.size, np.int32)
        launch_quietly(kernels.find_ids, _blocks(ids.size), THREADS, None, d, self.parent, out)
        return out.copy_to_host().astype(np.int64)

    def lookup(self, op: np.ndarray, offsets: np.ndarray, children: np.ndarray) -> np.ndarray:
        """Classes of the rows equal to the given e-nodes (-1 where none); needs a rebuilt graph."""
        from . import kernels

        if op.size == 0:
            return np.zeros(0, np.int64)
        out = self._cuda.device_array(op.size, np.int32)
        qch = self._cuda.to_device(children.astype(np.int32) if children.size else np.zeros(1, np.int32))
        launch_quietly(kernels.lookup, _blocks(op.size), THREADS, None, self._cuda.to_device(op.astype(np.int32)),
                                                 self._cuda.to_device(offsets.astype(np.int64)), qch, self.op,
                                                 self.off, self.ch, self.cls, self.canon, self.table, out)
        return out.copy_to_host().astype(np.int64)

    def _roots(self) -> np.ndarray:
        """Every class id's root, on the host: unions link roots alone, so until a rebuild compresses
        it, `parent` may point at a root's former self."""
        parent = self.parent.copy_to_host()[:self.n_classes].astype(np.int64)
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                return parent
            parent = grand

    def classes(self) -> np.ndarray:
        return self._roots()[self.cls.copy_to_host()[:self.n]]

    def download(self) -> dict[str, np.ndarray]:
        """Host copies of the rows and the union-find (compressed: each id's parent is its root)."""
        ch = self.ch.copy_to_host()
        off = self.off.copy_to_host()
        return dict(eclass=self.cls.copy_to_host().astype(np.int64), op=self.op.copy_to_host().astype(np.int64),
                    offsets=off, children=ch[:off[-1]].astype(np.int64), parent=self._roots())

    def append(self, eclass: np.ndarray, op: np.ndarray, offsets: np.ndarray, children: np.ndarray,
               n_classes: int) -> None:
        """Add rows (flagged for the next rebuild) and class ids up to `n_classes`; the rows already
        here are copied on the device, only the new ones cross from the host."""
        cuda = self._cuda

        def grow(dev, n_old: int, new: np.ndarray):
            out = cuda.device_array(max(n_old + new.size, 1), dev.dtype)
            if n_old:
                out[:n_old].copy_to_device(dev[:n_old])
            if new.size:
                out[n_old:n_old + new.size].copy_to_device(np.ascontiguousarray(new, dev.dtype))
            return out

        k, n, nch = op.size, self.n, self.nch + int(children.size)
        ids = np.arange(self.n_classes, n_classes, dtype=np.int32)
        grown = (grow(self.op, n, op), grow(self.cls, n, eclass), grow(self.ch, self.nch, children),
                 grow(self.off, n + 1, self.nch + offsets[1:]), grow(self.slot, n, np.full(k, -1, np.int32)),
                 grow(self.rowflag, n, np.ones(k, np.uint8)), grow(self.parent, self.n_classes, ids),
                 grow(self.canon, self.n_classes, ids))
        uses = self._uses(grown[3], grown[2], n + k, n_classes, nch)
        # one call into C: an interruption (Ctrl-C) lands before it or after it, never between two fields
        vars(self).update(zip(_APPENDED, (*grown, *uses, n + k, n_classes, nch), strict=True))

    # --- rebuild ---------------------------------------------------------------------------
    def _k(self, name: str):
        """The rebuild's kernel `name`, launched as `self._k(name)(blocks, THREADS, *args)`."""
        k = self._launches.get(name)
        if k is None:
            from ..gpu.numba_launch import NumbaLaunch
            from . import kernels

            k = self._launches[name] = NumbaLaunch(getattr(kernels, name))
        return k

    def _fill(self, a, value) -> None:
        if a.size:
            self._k("fill")(_blocks(a.size), THREADS, a, value)

    def _clear_table(self, capacity: int) -> None:
        """An empty table of `capacity` slots, every row flagged to go into it."""
        if capacity != self.capacity:
            self.table, self.capacity = self._cuda.device_array(capacity, np.int32), capacity
        self._fill(self.table, np.int32(-1))
        self._fill(self.slot, np.int32(-1))
        self._fill(self.rowflag, np.uint8(1))
        self.used = 0

    def _worklist(self, clock: _PhaseClock, inserted: bool):
        """(number of flagged rows, written in order into the work list; the last insert's control
        words or None): one synchronisation."""
        from .. import compaction
        from ..compaction.kernels import flag_nonzero

        clock.start()
        if self._selector is None:
            self._selector = compaction.Selector()
        if self._work is None or self._work.size < self.n:  # each row at most once; a view costs host time
            self._work = self._cuda.device_array(max(2 * self.n, 1024), np.int64)
        if self.n:
            self._selector.enqueue(flag_nonzero, self.rowflag, self.n, None, self._work, self.n)
        if inserted:
            self.ctl.copy_to_host(self._ctl_host, stream=self._selector.stream)
        clock.lap("worklist")
        count = self._selector.total() if self.n else 0
        clock.collect()
        return count, (self._ctl_host.copy() if inserted else None)

    def rebuild(self, max_rounds: int | None = None, on_round=None, persistent: bool = True) -> dict:
        """Restore congruence (see the module docstring); rounds, unions, nodes_touched, converged,
        device nanoseconds in all and per phase, the table's capacity after. `on_round()`, when
        given, is called once a round: after a host round is enqueued, and for the rounds of a
        persistent launch once it has ended (up to ROUNDS_PER_LAUNCH calls at once). `persistent`:
        False launches every round from the host."""
        from . import kernels

        cuda = self._cuda
        clock = _PhaseClock(cuda)
        unions, rounds, touched, converged, regrown, inserted = 0, 0, 0, False, 0, False
        t_all = time.perf_counter()
        if self._stale:  # the last one stopped part way (Ctrl-C, an error): every row is filed afresh
            self._selector = None  # it may have stopped inside a compaction, too
            self._clear_table(self.capacity)
        self._stale = True
        clock.start()
        self._compress(clock)  # unions made since the last rebuild flag their parents
        while True:
            count, ctl = self._worklist(clock, inserted)
            if inserted:
                inserted = False
                unions += int(ctl[kernels.UNIONS])
                self.used += int(ctl[kernels.USED])
                if ctl[kernels.FULL]:  # some rows found no slot: a table twice the size, every row again
                    regrown += 1
                    self._clear_table(2 * self.capacity)
                    continue
            if count == 0:
                converged = True
                break
            if max_rounds is not None and rounds >= max_rounds:
                break
            if self.used + count > self.capacity // 2:  # tombstones and rows past half: a fresh table
                self._clear_table(_pow2(max(self.capacity, 4 * (self.n + 1))))
                continue
            if persistent and self.on_device and count <= self._room():
                budget = ROUNDS_PER_LAUNCH if max_rounds is None else min(max_rounds - rounds, ROUNDS_PER_LAUNCH)
                st = self._rounds_on_device(clock, budget)
                ran, outcome = int(st[kernels.ROUNDS]), int(st[kernels.OUTCOME])
                rounds += ran
                touched += int(st[kernels.TOUCHED])
                unions += int(st[kernels.UNIONS])
                self.used += int(st[kernels.USED])
                if on_round is not None:
                    for _ in range(ran):
                        on_round()
                if outcome == kernels.CONVERGED:
                    converged = True
                    break
                if outcome == kernels.TABLE_FULL:
                    regrown += 1
                    self._clear_table(2 * self.capacity)
                elif outcome == kernels.PAUSED and max_rounds is not None and rounds >= max_rounds:
                    break
                continue  # paused for a report, or handed back: the host lists the rows again
            work, n_work = self._work, np.int64(count)
            b = _blocks(count)
            clock.start()  # the GPU idled while the host read the count: not the rewrite's time
            self._k("rewrite")(b, THREADS, work, n_work, self.canon, self.off, self.ch, self.cls, self.table, self.slot,
                               self.rowflag, self.ctl)
            clock.lap("rewrite")
            self._k("insert")(b, THREADS, work, n_work, self.op, self.off, self.ch, self.cls, self.parent, self.table,
                              self.slot, self.ctl, np.int32(1))
            clock.lap("insert")
            self._compress(clock)
            inserted = True
            touched += count
            rounds += 1
            if on_round is not None:
                on_round()
        clock.start()
        self._k("canonical_classes")(_blocks(self.n), THREADS, self.cls, self.canon)
        clock.lap("compress")
        cuda.synchronize()
        clock.collect()
        self._stale = False
        return dict(rounds=rounds, unions=unions, nodes_touched=touched, converged=converged,
                    seconds=time.perf_counter() - t_all, device_ns=sum(clock.ns.values()), phase_ns=clock.ns,
                    table_capacity=self.capacity, table_regrown=regrown)

    def _room(self) -> int:
        """The most listed rows a persistent round takes (more go back to the host's rounds)."""
        return ROWS_PER_THREAD * THREADS * (1 if _SIM else PER_SM * self._sms)

    def _rounds_on_device(self, clock: _PhaseClock, rounds: int) -> np.ndarray:
        """Up to `rounds` rounds in one persistent launch (`kernels.rounds_on_device`) and its st
        words, once it has ended; a BarrierTimeoutError where a block gave up at its barrier."""
        from ..errors import BarrierTimeoutError
        from ..gpu.numba_launch import NumbaLaunch
        from ..workqueue.barrier import FAILED
        from . import kernels

        cuda = self._cuda
        if self._coop is None:
            self._coop = [NumbaLaunch(kernels.rounds_on_device, None, cooperative=True), cuda.device_array(13, np.int64),
                          None]
        launch, words, blocks = self._coop
        bar, st = words[:4], words[4:]
        self._fill(words, np.int64(0))  # a fresh barrier each launch: no count to keep right across interruptions
        args = (self.op, self.off, self.ch, self.cls, self.parent, self.canon, self.uses_off, self.uses, self.rowflag,
                self.table, self.slot, self._work, np.int64(self.n), np.int64(self.n_classes), np.int64(rounds),
                np.int64(self._room()), np.int64(self.capacity // 2 - self.used), bar, np.int64(SPINS), st)
        if blocks is None:
            fit = launch.resident_blocks(THREADS, *args)
            blocks = self._coop[2] = max(1, min(fit, self._room() // (ROWS_PER_THREAD * THREADS)))
        clock.start()
        try:
            launch(blocks, THREADS, *args)
            clock.lap("on_device")
            got = words.copy_to_host()  # waits for the launch (the legacy stream); one copy of barrier and st
            out, failed = got[4:], int(got[FAILED])
        except BaseException:  # interrupted: a launch may still run, its words in use; the next takes new ones
            self._coop = None
            raise
        clock.collect()
        if failed or out[kernels.OUTCOME] == kernels.TIMED_OUT:
            raise BarrierTimeoutError(
                f"the e-graph's rebuild stopped in a persistent launch: a block waited {SPINS} polls at its grid "
                "barrier, though a cooperative launch gives every block a place (the GPU was interrupted: a debugger, "
                "preemption or a fault). The union-find holds only true merges; the next rebuild files every row "
                "afresh. Fix: check the device (nvidia-smi) and call rebuild() again.")
        return out

    def _compress(self, clock: _PhaseClock) -> None:
        self._k("compress")(_blocks(self.n_classes), THREADS, self.parent, self.canon, self.uses_off, self.uses,
                            self.rowflag)
        clock.lap("compress")

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
            launch_quietly(kernels.insert, b, THREADS, None, work, np.int64(self.n), self.op, self.off, self.ch, self.cls, self.parent, table,
                                       slot, ctl, np.int32(0))
            launch_quietly(kernels.group_min, b, THREADS, None, self.op, self.off, self.ch, self.cls, table, low)
            ctl.copy_to_device(np.zeros(4, np.int64))
            launch_quietly(kernels.congruent_pairs, b, THREADS, None, self.op, self.off, self.ch, self.cls, table, low, pairs, ctl)
        found = int(ctl.copy_to_host()[kernels.UNIONS])
        return pairs.copy_to_host()[:min(found, capacity)].astype(np.int64), found


def check_rebuilt(pending: bool, what: str) -> None:
    if pending:
        raise DispatchError(f"{what} needs canonical children, and unions were made since the last rebuild. "
                            "Fix: call egraph.rebuild() first.")
