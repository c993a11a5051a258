"""Stream compaction in one pass: one kernel reads the flags and the kept values once and writes
the kept values at their places, in the original order (the single-pass design of Merrill and
Garland, as CUB's DeviceSelect does it).

Each block takes a tile of TILE items by ticket, counts its kept items with warp votes, and finds
the kept count of the tiles before it by decoupled look-back: every tile publishes its own count
(an aggregate) as soon as it has it and its inclusive count (a prefix) once it knows it, each in
one 64-bit status word with the call's epoch; a tile sums its predecessors' words back to the
nearest prefix. Tickets make the look-back end (a tile only waits on tiles that started before
it), and every wait is bounded anyway: past `spin_limit` polls the kernel gives up, says so, and
the host raises DeviceTimeoutError. The epoch in each word means nothing is cleared between calls.

The first design here, before the warp intrinsics (three launches: count, scan, scatter),
read the flags twice and took 2.2 ms for 2^28 int32 values on an H100 (bench/RESULTS.md).

`Selector` owns the status words, the ticket and the mapped count of one stream; the kernel is
in `kernels.py` (imported when a GPU or the CUDA simulator runs it). `select_numpy` and friends
are the NumPy twins: the CPU implementation and the oracle."""
from __future__ import annotations

import math
import os
from typing import Callable

import numpy as np

from ..errors import DeviceTimeoutError, DispatchError
from ..gpu.numba_launch import NumbaLaunch, RawArray

_SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

THREADS, ITEMS = 256, 16
TILE = THREADS * ITEMS
FLAG_SHIFT, EPOCH_SHIFT = 40, 42  # a status word: epoch (21 bits), flag (2), kept count (40)
VALUE_MASK = (1 << FLAG_SHIFT) - 1
AGGREGATE, PREFIX = 1 << FLAG_SHIFT, 2 << FLAG_SHIFT
EPOCHS = 1 << 21
MAX_ITEMS = 1 << 40
COUNT_BLOCKS = 1024  # the count kernel's grid at most: eight blocks an SM of the largest GPUs
SPIN_LIMIT = 1 << 22  # polls of one look-back before it gives up: seconds, where a healthy wait is microseconds


# ---- the NumPy twins ---------------------------------------------------------------------------

def select_numpy(values: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """values[i] for every i with flags[i] != 0, in order."""
    return values[np.asarray(flags) != 0]


def nonzero_numpy(flags: np.ndarray) -> np.ndarray:
    """The indices (int64) of the non-zero flags, in order."""
    return np.flatnonzero(np.asarray(flags) != 0).astype(np.int64)


def select_if_numpy(values: np.ndarray, predicate: Callable) -> np.ndarray:
    """values[i] for every i where predicate(values[i]) holds, in order (the predicate compiled by
    numba.njit, as the GPU compiles it for the device)."""
    return values[_cpu_mask(predicate)(values)]


_CPU_MASKS: dict = {}


def _cpu_mask(predicate: Callable) -> Callable:
    fn = _CPU_MASKS.get(predicate)
    if fn is None:
        from numba import njit

        pred = njit(predicate)

        @njit
        def mask(values):
            out = np.empty(values.size, np.bool_)
            for i in range(values.size):
                out[i] = bool(pred(values[i]))
            return out
        fn = _CPU_MASKS[predicate] = mask
    return fn


# ---- the host object ---------------------------------------------------------------------------

def word_type(dt: np.dtype) -> tuple[np.dtype, int]:
    """(unsigned word type, words an item) of items of `dt`: the widest word dividing its size."""
    g = math.gcd(np.dtype(dt).itemsize, 8)
    return np.dtype(f"<u{g}"), np.dtype(dt).itemsize // g


def word_view(a, n: int):
    """The 1-D device array `a` of n items (any 8- to 64-bit type or record) as an (n, w) array
    of unsigned words (see `word_type`)."""
    word, w = word_type(a.dtype)
    return a.view(word).reshape(n, w)


class Selector:
    """The look-back state of compactions on one stream (status words, ticket counter, epoch, and
    the count and error words in mapped host memory); reused across calls, released by `close()`
    (or `with`). One call at a time: `enqueue` then `total`."""

    def __init__(self, stream=None, *, spin_limit: int = SPIN_LIMIT):
        from numba import cuda

        self._cuda = cuda
        self.stream = stream if stream is not None else cuda.default_stream()
        self.spin_limit = int(spin_limit)
        self._host = cuda.mapped_array(2, np.int64)  # [kept count, gave up]
        self._launches: dict = {}  # kernel -> NumbaLaunch on this stream
        self._reset()
        self._closed = False

    def _reset(self, tiles: int = 1024) -> None:
        """Fresh status words and ticket (after a wait gave up, or when the epochs run out)."""
        cuda = self._cuda
        self._status = cuda.to_device(np.zeros(max(tiles, 1024), np.int64), stream=self.stream)
        # ticket, gave up, kept, count's sum, count's blocks done
        self._ctl = cuda.to_device(np.zeros(8, np.int64), stream=self.stream)
        self._ticket, self._epoch = 0, 0
        self._args = self._status, self._ctl, self._host
        if not _SIM:  # as raw arguments, which cost nothing to pack (the arrays above own the memory)
            self._args = tuple(RawArray(a.device_ctypes_pointer.value, a.shape, a.dtype) for a in self._args)

    def __enter__(self) -> "Selector":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the device buffers (once; later calls do nothing)."""
        self._status = self._ctl = self._host = None
        self._launches = {}
        self._closed = True

    def enqueue(self, flag_of: Callable, src, n: int, words, out, capacity: int) -> None:
        """Enqueue the selection of items 0..n-1 (where `flag_of(src, i)`) into `out`, at most
        `capacity` rows of it (`words` None writes indices); the kept count, which may exceed
        capacity, is `total()`. Nothing waits: callers enqueue more work before reading it."""
        if self._closed:
            raise DispatchError("this Selector was closed. Fix: make a new one.")
        if n >= MAX_ITEMS:
            raise DispatchError(f"{n} items are more than compaction counts ({MAX_ITEMS}). Fix: select in parts.")
        from . import kernels

        tiles = -(-n // TILE)
        self._epoch += 1
        if self._status.size < tiles or self._epoch >= EPOCHS:
            self._reset(tiles)
            self._epoch = 1
        if words is None:
            emit = kernels.write_index
        else:
            emit = None if words.shape[1] == 1 else kernels.copy_words  # one word an item: read with the flags
        host = self._host
        host[0], host[1] = -1, 0
        self._launch(kernels.select_kernel(flag_of, emit))(
            tiles, THREADS, src, n, out if words is None else words, out, capacity, *self._args, self._ticket, self._epoch, self.spin_limit)
        self._ticket += tiles

    def count(self, flag_of: Callable, src, n: int) -> int:
        """How many of items 0..n-1 are kept (`flag_of(src, i)`), after one synchronisation."""
        if self._closed:
            raise DispatchError("this Selector was closed. Fix: make a new one.")
        if n == 0:
            return 0
        from . import kernels

        self._host[0] = -1
        self._launch(kernels.count_kernel(flag_of))(min(-(-n // TILE), COUNT_BLOCKS), THREADS, src, n, self._args[1],
                                                     self._args[2])
        self.stream.synchronize()
        return int(self._host[0])

    def _launch(self, kernel) -> NumbaLaunch:
        k = self._launches.get(kernel)
        if k is None:  # retain=False: callers' arrays stay theirs
            k = self._launches[kernel] = NumbaLaunch(kernel, self.stream, retain=False)
        return k

    def total(self) -> int:
        """The kept count of the last `enqueue`, after waiting for the stream."""
        self.stream.synchronize()
        count, failed = int(self._host[0]), int(self._host[1])
        if failed or count < 0:
            self._reset(self._status.size)
            raise DeviceTimeoutError(
                "a compaction tile waited past its bound for the tiles before it, so the kept items are not "
                "all written. Fix: call again (the selector has reset itself); if it repeats, another kernel is "
                "holding the GPU: check the device with nvidia-smi.")
        return count

    def run(self, flag_of: Callable, src, n: int, words, out, capacity: int) -> int:
        """Select items 0..n-1 into `out` (at most `capacity` rows) and return how many were kept,
        which may exceed capacity (then only the first `capacity` were written). One
        synchronisation, after everything, to read the count."""
        self.enqueue(flag_of, src, n, words, out, capacity)
        return self.total()
