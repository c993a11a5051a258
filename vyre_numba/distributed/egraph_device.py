"""The distributed e-graph's rounds on a worker's GPU (see `egraph.py` for the round): a partition
resident on the device, the rows it sends found and canonicalised there, and an owner's kept
signatures held there as a hash table, so the match is a few passes over the rows received.

An owner's table (open addressing, linear probing, one row id a slot) holds one row per distinct
signature it was sent; the rows it holds are stored after one another (op, offsets, children,
class). A round copies what it keeps, appends the rows received, inserts them (a row meeting an
equal signature on its probe path holds no slot), takes each slot's smallest class, reports the
pairs that makes, and keeps only the rows that took a slot.

Invariants: the table is at most half full, so a probe always ends; equal signatures hash alike
and claim only empty slots, so rows inserted at once meet at one slot; the rows kept are distinct
signatures; nothing of a round's input is written (a round makes a new partition and a new table),
so Dask may rerun any round's task. On an owner only counts and the pairs cross to the host in a
round (and a mark and an offset a row when it drops rows: rarely); a sender reads back only each
batch's row and child counts; a batch for an owner on another worker goes from GPU to GPU where
the workers share a host (CUDA IPC), else as host arrays."""
from __future__ import annotations

import numpy as np

from ..errors import DispatchError
from ..unique import unique_rows


def _ops(bname: str):
    from ..backend import resolve_backend
    from .device import Ops

    return Ops(resolve_backend(bname))


class _Resident:
    """Device arrays named in `_DEVICE` that travel as host arrays (pickled off the device) and are
    uploaded again, lazily, where they land; or, where `shared` is set (the workers' GPUs share one
    host: `cluster.shares_memory`), as CUDA IPC handles, copied from the sender's GPU as they land."""

    _DEVICE: tuple = ()
    bname: str
    shared: bool = False

    def __getstate__(self):
        d = dict(self.__dict__)
        d.pop("_views", None)  # views of device arrays, made again where it lands
        arrays = [k for k in self._DEVICE if d.get(k) is not None and not isinstance(d[k], np.ndarray)]
        if self.shared and arrays:
            from numba import cuda

            cuda.synchronize()  # the arrays' writes are done before another process reads them
        for k in arrays:
            d[k] = _handle(d[k]) if self.shared else d[k].copy_to_host()
        return d

    def __setstate__(self, d):
        shared = [k for k, v in d.items() if isinstance(v, _Shared)]
        if shared:
            from numba import cuda

            ops, opened = _ops(d["bname"]), []
            try:
                for k in shared:
                    opened.append(d[k])
                    d[k].copied(ops)
            finally:
                cuda.synchronize()  # the copies are done before the handles close and their owner may free them
                for h in opened:
                    if h.src is not None:
                        h.handle.close()
            for k in shared:
                d[k] = d[k].copy
            d["shared"] = False  # this copy is the receiver's own: pickled again, it goes as bytes
        self.__dict__.update(d)

    def ops(self):
        ops = _ops(self.bname)
        for k in self._DEVICE:
            if isinstance(getattr(self, k, None), np.ndarray):
                setattr(self, k, ops.upload(getattr(self, k)))
        return ops


class _Shared:
    """A device array of another process on this host, by CUDA IPC handle: `copied()` opens it and
    enqueues its `copy` into a new array of this process's GPU; the handle is closed after a
    synchronisation. Taken while the sender holds the array: Dask keeps a task's result on its
    worker until every task that reads it has run, and it lands (unpickled) before it counts as
    held where it lands, so no other copy of it can be dropped in between."""

    opened = 0  # handles opened in this process (the tests read it on the workers)

    def __init__(self, handle):
        import os

        self.handle, self.src, self.copy, self.pid = handle, None, None, os.getpid()

    def copied(self, ops) -> None:
        import os

        from ..errors import DeviceError, raise_if_out_of_memory

        if os.getpid() == self.pid:  # Dask spilled a batch and read it back where it was made
            raise DeviceError("a batch of e-nodes handed from GPU to GPU was read back in the worker that made it "
                              "(spilled to disk?), whose arrays are gone. Fix: give the workers more memory before "
                              "they spill (distributed.worker.memory.spill), or pass backend='reference'.")
        try:
            self.src = src = self.handle.open()
        except Exception as e:  # noqa: BLE001 - the driver's refusal, whatever its type, is said below
            raise_if_out_of_memory(e, "opening a batch of e-nodes from another worker's GPU")
            raise DeviceError(f"a batch of e-nodes from another worker's GPU could not be opened here ({e}). Fix: "
                              "run the workers on one host, each seeing every GPU (dask_cuda.LocalCUDACluster "
                              "does), or pass backend='reference'.") from None
        _Shared.opened += 1
        self.copy = ops.scratch(src.size, src.dtype)  # on the worker's GPU, in its backend's context
        if src.size:
            self.copy.copy_to_device(src)


def _handle(a):
    """A `_Shared` for a device array, or its host copy where the driver gives no IPC handle (memory
    from a stream-ordered pool)."""
    try:
        return _Shared(a.get_ipc_handle())
    except Exception:  # noqa: BLE001 - any refusal means: send the bytes instead
        return a.copy_to_host()


class DevicePart(_Resident):
    """A partition resident on its worker's GPU: rows and the canonical map on the device, the
    offsets also on the host (they never change). A round makes a new one with a
    new map (the rows are shared), so Dask may rerun any round's task. Moved to another worker, it
    travels as host arrays and is uploaded again there."""

    _DEVICE = ("eclass", "op", "offsets_d", "children", "canon")

    def __init__(self, bname, eclass, op, offsets, children, n_classes, _from=None):
        self.bname, self.offsets, self.n_classes = bname, offsets, n_classes
        if _from is not None:
            self.__dict__.update({k: getattr(_from, k) for k in self._DEVICE})
            return
        from . import steps

        ops = self.ops()

        def up(a):  # int32 on the device, at least one element (sizes come from the host offsets)
            if not a.size or a.dtype == np.int32:
                return ops.upload(a if a.size else np.zeros(1, np.int32))
            wide, out = ops.upload(a), ops.scratch(a.size, np.int32)
            ops.run(steps.put, a.size, [out, wide, 0])  # narrowed on the device (ids are checked to fit): no host pass
            return out

        self.eclass, self.op, self.children = up(eclass), up(op), up(children)
        self.offsets_d = ops.upload(offsets)
        from ..graph import steps as graph_steps

        self.canon = ops.empty(max(n_classes, 1), np.int32)
        ops.run(graph_steps.init, n_classes, [self.canon])

    @property
    def n_rows(self) -> int:
        return self.offsets.size - 1


class DeviceRows(_Resident):
    """Rows sent to an owner: n rows (op, class, offsets from 0) and their nch children, in one
    device buffer of int32 words, so a batch crossing to another worker's GPU is one IPC handle:
    the n + 1 offsets first (int64 where `wide`), then op, class and children (at least one word,
    so every view holds an element)."""

    _DEVICE = ("buf",)

    def __init__(self, bname, buf, n: int, nch: int, wide: bool = False, shared: bool = False):
        self.bname, self.buf, self.n_rows, self.nch, self.wide, self.shared = bname, buf, n, nch, wide, shared

    @staticmethod
    def words(n: int, nch: int, wide: bool) -> int:
        return (n + 1) * (2 if wide else 1) + 2 * n + max(nch, 1)

    @classmethod
    def empty(cls, ops, bname, n: int, nch: int, wide: bool, shared: bool) -> "DeviceRows":
        """A batch of n rows and nch children to be written (every word read is), in Numba's memory,
        which gives IPC handles."""
        return cls(bname, ops.unzeroed(cls.words(n, nch, wide), np.int32), n, nch, wide, shared)

    @classmethod
    def of(cls, ops, bname, op, offsets, children, eclass, n: int, nch: int, shared: bool = False,
           wide: bool | None = None) -> "DeviceRows":
        """A batch holding copies of the device arrays given; its offsets int64 where `wide` (by
        default: where nch needs it)."""
        from . import steps

        b = cls.empty(ops, bname, n, nch, nch >= 2**31 if wide is None else wide, shared)
        for dst, src, k in ((b.offsets, offsets, n + 1), (b.op, op, n), (b.eclass, eclass, n), (b.children, children, nch)):
            ops.run(steps.put, k, [dst, src, 0])
        return b

    def _view(self, i: int):
        views = self.__dict__.get("_views")
        if views is None or views[0] is not self.buf:
            n, w, buf = self.n_rows, 2 if self.wide else 1, self.buf
            at = (n + 1) * w
            off = buf[:at].view(np.int64) if self.wide else buf[:at]
            views = self._views = (buf, off, buf[at:at + n], buf[at + n:at + 2 * n], buf[at + 2 * n:at + 2 * n + max(self.nch, 1)])
        return views[i]

    offsets = property(lambda self: self._view(1))
    op = property(lambda self: self._view(2))
    eclass = property(lambda self: self._view(3))
    children = property(lambda self: self._view(4))


def _joined(ops, canon, n: int, forests):
    """`egraph._joined` on the device: a new map of the n class ids, `canon` (each id's root) with
    the sets of the forests' (k, 2) class id pairs joined (the single-GPU union-find over the pairs'
    roots, then every id through its root's root); `canon` itself where no pair was given."""
    from ..graph.components import edge_components
    from . import steps
    from .device import narrow

    pairs = [f for f in forests if f.size]
    if not pairs or not n:
        return canon
    pairs = np.concatenate(pairs)
    k = pairs.shape[0]
    flat = ops.staged(narrow(pairs).reshape(-1))
    a, b = ops.scratch(k, np.int32), ops.scratch(k, np.int32)
    ops.run(steps.columns, k, [a, b, flat])
    ops.run(steps.relabel, k, [a, canon, a, 0])  # each item read before it is written, by its own thread
    ops.run(steps.relabel, k, [b, canon, b, 0])
    parent = edge_components(ops.run, ops.scratch, n, a, b, k)
    out = ops.scratch(n, np.int32)  # the pool's: a partition moved by Dask travels as bytes, never by IPC
    ops.run(steps.relabel, n, [out, parent, canon, 0])
    return out


def settled(p: DevicePart, forests) -> DevicePart:
    """`egraph._settled` on the partition's GPU: the forests joined into a new map, nothing sent."""
    q = DevicePart(p.bname, None, None, p.offsets, None, p.n_classes, _from=p)
    q.canon = _joined(p.ops(), p.canon, p.n_classes, forests)
    return q


def send(p: DevicePart, forests, owners: int, first: bool, shared: bool = False) -> tuple:
    """(the partition with the forests joined into its map, the rows each owner receives, rows
    sent): the pairs joined into the map, the rows whose children moved found, canonicalised and
    hashed, split by owner and gathered into one batch an owner, all on the device; only each
    batch's row and child counts come to the host. `shared`: a batch crossing to another worker
    goes from GPU to GPU."""
    from . import steps

    ops = p.ops()
    n, nc, nch = p.n_rows, p.n_classes, int(p.offsets[-1])
    canon = _joined(ops, p.canon, nc, forests)
    moved = canon is not p.canon
    q = DevicePart(p.bname, None, None, p.offsets, None, nc, _from=p)
    q.canon = canon
    if not n:
        return q, [_no_rows(p.bname)] * owners, 0
    flags = ops.scratch(n, np.uint8)
    if first:
        ops.run(steps.fill_one, n, [flags])
    elif moved:
        ops.run(steps.dirty_rows, n, [flags, p.offsets_d, p.children, p.canon, canon])
    else:
        return q, [_no_rows(p.bname)] * owners, 0
    chc = ops.scratch(max(nch, 1), np.int32)
    cls = ops.scratch(n, np.int32)
    ops.run(steps.canon_rows, n, [chc, cls, p.offsets_d, p.children, p.eclass, canon])

    def whole() -> DeviceRows:  # every row, as it is
        return DeviceRows.of(ops, p.bname, p.op, p.offsets_d, chc, cls, n, nch, shared)

    if owners == 1 and first:
        return q, [whole()], n
    if owners == 1:
        marks = [flags]
    else:
        h, dest = ops.scratch(n, np.uint64), ops.scratch(n, np.uint16)
        ops.run(steps.row_hash, n, [h, p.op, p.offsets_d, chc])
        ops.run(steps.owner_of, n, [dest, flags, h, owners])
        marks = [ops.scratch(n, np.uint8) for _ in range(owners)]
        for o, sel in enumerate(marks):
            ops.run(steps.mark_owner, n, [sel, dest, o])
    wide = nch >= 2**31  # offsets of 4 bytes a row where they fit: less to move (`whole` narrows them too)
    cflags = ops.scratch(max(nch, 1), np.uint8)
    out, sent = [], 0
    for sel in marks:
        rows = ops.nonzero(sel[:n])
        m = int(rows.size)
        sent += m
        if m == n:
            out.append(whole())
            continue
        if not m:
            out.append(_no_rows(p.bname))
            continue
        mc, cidx = 0, rows  # the children chosen, by position (a stand-in where there are none)
        if nch:
            ops.run(steps.mark_children, n, [cflags, p.offsets_d, sel])
            cidx = ops.nonzero(cflags[:nch])
            mc = int(cidx.size)
        b = DeviceRows.empty(ops, p.bname, m, mc, wide, shared)
        ops.run(steps.batch_offsets, m + 1, [b.offsets, p.offsets_d, rows, cidx, m, mc])
        ops.run(steps.gather_batch, m, [b.op, b.eclass, p.op, cls, rows])
        if mc:
            ops.run(steps.take, mc, [b.children, chc, cidx])
        out.append(b)
    return q, out, sent


def _no_rows(bname: str) -> DeviceRows:
    return DeviceRows(bname, np.zeros(DeviceRows.words(0, 0, False), np.int32), 0, 0)


class DeviceKept(_Resident):
    """An owner's kept signatures on its GPU: n stored rows (op, offsets, children, class) and the
    hash table of their signatures. `live` of the rows hold a slot (distinct signatures, classes
    canonical as of the round that made it); the others were received equal to one of them and
    are left in place until they outweigh the live ones (`GARBAGE`), then dropped at once."""

    _DEVICE = ("op", "offsets", "children", "eclass", "table")

    def __init__(self, bname, op=None, offsets=None, children=None, eclass=None, table=None, n=0, nch=0, live=0):
        self.bname, self.n, self.nch, self.live = bname, n, nch, live
        if op is None:
            z = np.zeros(1, np.int32)
            op, offsets, children, eclass, table = z, np.zeros(1, np.int64), z, z, np.full(16, -1, np.int32)
        self.op, self.offsets, self.children, self.eclass, self.table = op, offsets, children, eclass, table


GARBAGE = 0.5  # stored rows that hold no slot, as a fraction of those that do, before they are dropped
MAX_ROWS = 2**29 - 1  # rows an owner stores, as an EGraph (int32 row ids; its table, up to twice as many slots
#                      as it holds rounded up to a power of two, stays below the 2**31 items a device pass takes)


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())


def _compacted(ops, kept: DeviceKept, cls, size: int) -> DeviceKept:
    """The live rows of `kept` (classes `cls`) alone, in order, with a new table of `size` slots."""
    from . import steps

    n = kept.n
    live = ops.scratch(max(n, 1), np.uint8)
    ops.run(steps.clear, n, [live])
    ops.run(steps.mark_live, kept.table.size, [live, kept.table])
    rows = np.flatnonzero(ops.download(live)[:n])
    off = np.zeros(rows.size + 1, np.int64)
    np.cumsum(np.diff(ops.download(kept.offsets)[:n + 1])[rows], out=off[1:])
    k, kch = rows.size, int(off[-1])
    op, ch, c2, off_d = ops.scratch(max(k, 1), np.int32), ops.scratch(max(kch, 1), np.int32), \
        ops.scratch(max(k, 1), np.int32), ops.staged(off)
    ops.run(steps.gather_rows, k, [op, c2, ch, off_d, kept.op, cls, kept.children, kept.offsets,
                                   ops.staged(rows.astype(np.int32))])
    table = ops.scratch(size, np.int32)
    ops.run(steps.set_to, size, [table, np.int32(steps.EMPTY)])
    ops.run(steps.insert_row, k, [ops.scratch(max(k, 1), np.int64), table, op, off_d, ch, 0])
    return DeviceKept(kept.bname, op, off_d, ch, c2, table, k, kch, k)


def match(kept: DeviceKept, part: DevicePart, *incoming) -> tuple:
    """`egraph._match` on the owner's GPU: (the signatures kept after this round, (k, 2) int64 class
    pairs to merge, unique rows), the kept classes made canonical by the map of `part` (a partition
    on this GPU). Only counts and the pairs come to the host."""
    from . import steps

    ops = kept.ops()
    part.ops()
    n = kept.n
    cls = ops.scratch(max(n, 1), np.int32)
    ops.run(steps.relabel, n, [cls, part.canon, kept.eclass, 0])
    batches = [b for b in incoming if b.n_rows]
    m = sum(b.n_rows for b in batches)
    if n + m > MAX_ROWS:
        raise DispatchError(f"an owner would store {n + m} e-nodes; row ids are int32 on the device (at most "
                            f"{MAX_ROWS}). Fix: spread the e-graph over more partitions (partitions=...), one "
                            "owner each.")
    size = max(kept.table.size, _pow2(2 * (kept.live + m) + 2))  # at most half full after the round
    if size > kept.table.size or n - kept.live > GARBAGE * max(kept.live, 1):
        kept = _compacted(ops, kept, cls, size)
        n, cls = kept.n, kept.eclass
        table = kept.table
    elif batches:
        table = ops.scratch(size, np.int32)
        ops.run(steps.put, size, [table, kept.table, 0])
    if not batches:
        return DeviceKept(kept.bname, kept.op, kept.offsets, kept.children, cls, kept.table, n, kept.nch, kept.live), \
            np.zeros((0, 2), np.int64)
    for b in batches:
        b.ops()
    nch = kept.nch
    mch = sum(b.nch for b in batches)
    op, off = ops.scratch(n + m, np.int32), ops.scratch(n + m + 1, np.int64)
    ch, c2 = ops.scratch(max(nch + mch, 1), np.int32), ops.scratch(n + m, np.int32)
    ops.run(steps.put, n, [op, kept.op, 0])
    ops.run(steps.put, n + 1, [off, kept.offsets, 0])
    ops.run(steps.put, nch, [ch, kept.children, 0])
    ops.run(steps.put, n, [c2, cls, 0])
    row, at = n, nch
    for b in batches:
        k, kc = b.n_rows, b.nch
        ops.run(steps.put, k, [op, b.op, row])
        ops.run(steps.put_offsets, k + 1, [off, b.offsets, row, at])
        ops.run(steps.put, kc, [ch, b.children, at])
        ops.run(steps.put, k, [c2, b.eclass, row])
        row, at = row + k, at + kc
    slot = ops.scratch(m, np.int64)
    ops.run(steps.insert_row, m, [slot, table, op, off, ch, n])
    low = ops.scratch(table.size, np.int32)
    ops.run(steps.low_first, m, [low, slot, table, c2])
    ops.run(steps.low_min, m, [low, slot, c2, n])
    pairs, count = ops.scratch(4 * m, np.int32), ops.scratch(3, np.int64)
    ops.run(steps.clear, 3, [count])
    ops.run(steps.settle, m, [pairs, count, low, slot, table, c2, n])
    ops.run(steps.count_held, m, [count, slot, table, n])
    found, fresh, lost = (int(x) for x in ops.download(count))
    if found > 2 * m or lost:
        raise DispatchError(f"an owner found {found} class pairs for {m} rows (at most 2 a row) and {lost} rows "
                            f"found no slot in a table of {table.size}. Fix: none on your side; this is a defect, "
                            "please report it.")
    got = ops.download(pairs[:max(2 * found, 1)])[:2 * found].astype(np.int64).reshape(-1, 2)
    out = DeviceKept(kept.bname, op, off, ch, c2, table, n + m, nch + mch, kept.live + fresh)
    return out, unique_rows(got) if got.size else np.zeros((0, 2), np.int64)


def forest(bname, n: int, pairs: np.ndarray) -> np.ndarray:
    """`unionfind._forest` on the worker's GPU: (id, root) int32 rows, ascending by id, for every id
    of the (k, 2) class pairs whose set's smallest id (of n) is another id."""
    from .device import join_gpu

    return join_gpu(_ops(bname), n, pairs)


def marks(p: DevicePart, children: bool = False) -> np.ndarray:
    """The class ids the partition's rows are in (or, with `children`, the ids its children name),
    as bits (`egraph._marks`), marked on its GPU."""
    from . import steps
    from .device import bits, marked

    if not p.n_classes:
        return np.zeros(0, np.uint8)
    ops = p.ops()
    column = (p.children, int(p.offsets[-1])) if children else (p.eclass, p.n_rows)
    return bits(ops, marked(ops, p.n_classes, steps.mark_ids, [column]), p.n_classes)


def distinct_roots(p: DevicePart, present: np.ndarray) -> int:
    """How many distinct roots the ids whose bit is set in `present` (`marks`) have in the map of
    the partition `p`, on its GPU."""
    from . import steps

    n = p.n_classes
    if not n:
        return 0
    ops = p.ops()
    flags = ops.scratch(n, np.uint8)
    ops.run(steps.clear, n, [flags])
    ops.run(steps.mark_roots, n, [flags, ops.staged(present), p.canon])
    from .device import bits

    return int(np.bitwise_count(bits(ops, flags, n)).sum())
