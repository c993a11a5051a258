"""A worker's device as the distributed phases use it: `Ops` (run a step over items, allocate,
copy in and out) and the device helpers connected components and the e-graph share: flags marked
by id, flagged items read back as (index, value) rows, flags packed into bits, and (id, id) pairs
joined into a forest."""
from __future__ import annotations

import numpy as np


class Ops:
    """A worker's device: `run(step, count, args)` over items, allocate, copy in and out. The GPU
    (through the fixpoint runner's `for_each`) in production; the CUDA simulator's harness in CI."""

    def __init__(self, backend):
        self.be = backend

    def run(self, step, count, args) -> None:
        from .. import fixpoint

        fixpoint.for_each(step, count, list(args), backend=self.be)

    def empty(self, n, dtype):
        return self.be.empty(n, dtype)

    def scratch(self, n, dtype):
        """A device array of n items, not zeroed, from the package's memory pool on a GPU (a
        microsecond, where `empty`'s cuMemAlloc, memset and batched frees cost tens to thousands):
        for arrays a task drops, or hands to Dask but never to another process (the pool gives
        no IPC handle)."""
        from ..gpu.memory import scratch

        return scratch(self.be, n, dtype)

    def unzeroed(self, n, dtype):
        """A device array of n items, not zeroed, in Numba's memory (which gives IPC handles, and
        no cap on the count): for arrays that may cross to another process's GPU."""
        from ..gpu.memory import unzeroed

        return unzeroed(self.be, n, dtype)

    def staged(self, a):
        """A `scratch` copy of the host array `a` on the device."""
        a = np.ascontiguousarray(a)
        d = self.scratch(a.size, a.dtype)
        if a.size:
            d.copy_to_device(a)
        return d

    def upload(self, a):
        return self.be.upload(np.ascontiguousarray(a))

    def upload_in_pieces(self, a, each):
        return self.be.upload_in_pieces(np.ascontiguousarray(a), each)

    def download(self, a) -> np.ndarray:
        return self.be.download(a)

    def nonzero(self, flags):
        """The indices (int64, a device array of their exact count) of the non-zero device flags
        (`compaction.nonzero`)."""
        from .. import compaction

        return compaction.nonzero(flags)

    def read_compacted(self, values, flags, capacity: int) -> np.ndarray:
        """values[flags != 0] of device arrays, on the host (`compaction.read_compacted`)."""
        from .. import compaction

        return compaction.read_compacted(values, flags, capacity=capacity)


def narrow(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int32, copy=False)


def moved_pairs(ops, n: int, parent, columns) -> np.ndarray:
    """(id, root) int32 rows, ascending by id, of every id in the device id arrays `columns`
    ((ids, count) each) whose root in `parent` is another id: selected on the device, one read."""
    from . import steps

    flags = marked(ops, n, steps.mark_moved, columns, parent)
    return indexed(ops, n, parent, flags, sum(count for _, count in columns))


def marked(ops, n: int, step, columns, *args):
    """n zeroed uint8 flags, then `step(i, flags, ids, *args)` over each device id array of
    `columns` ((ids, count) each)."""
    from . import steps

    flags = ops.scratch(n, np.uint8)
    ops.run(steps.clear, n, [flags])
    for ids, count in columns:
        if count:
            ops.run(step, count, [flags, ids, *args])
    return flags


def indexed(ops, n: int, values, flags, most: int) -> np.ndarray:
    """(i, values[i]) int32 rows for every flagged i < n (at most `most` are), ascending: packed
    into one 64-bit word an item on the device so the rows come back in one selection and one
    synchronisation."""
    from . import steps

    packed = ops.scratch(n, np.uint64)
    ops.run(steps.pack_index, n, [packed, values])
    return ops.read_compacted(packed, flags, min(n, most)).view(np.int32).reshape(-1, 2)


def packed(ops, bits, offs, flags, starts, sizes) -> None:
    """Runs q of the device flags (`sizes[q]` from `starts[q]`) packed into bits[offs[q]:offs[q+1]]."""
    from . import steps

    for q, size in enumerate(sizes):
        if size:
            ops.run(steps.pack_bits, int(offs[q + 1] - offs[q]),
                    [bits[int(offs[q]):int(offs[q + 1])], flags, np.int64(starts[q]), np.int64(size)])


def join_gpu(ops, n: int, pairs: np.ndarray) -> np.ndarray:
    """(id, root) int32 rows, ascending by id: every id of the (id, id) rows `pairs` whose set's
    smallest id is another id, with that id (the union-find of `unionfind.union`, on the GPU)."""
    from ..graph.components import edge_components
    from . import steps

    k = pairs.shape[0]
    if not k:
        return np.zeros((0, 2), np.int32)
    flat = ops.staged(narrow(pairs).reshape(-1))
    a, b = ops.scratch(k, np.int32), ops.scratch(k, np.int32)
    ops.run(steps.columns, k, [a, b, flat])
    parent = edge_components(ops.run, ops.scratch, n, a, b, k)
    return moved_pairs(ops, n, parent, [(a, k), (b, k)])


def bits(ops, flags, n: int) -> np.ndarray:
    """The n device flags as host bits, packed eight a byte, the first flag lowest."""
    m = -(-n // 8)
    out = ops.scratch(max(m, 1), np.uint8)
    packed(ops, out, np.array([0, m], np.int64), flags, np.zeros(1, np.int64), np.array([n], np.int64))
    return ops.download(out)[:m]
