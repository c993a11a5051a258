"""Stream compaction in three launches: count the kept items of each tile, scan the tile counts
(one block), then each tile ranks its items with a block-wide scan and writes the kept ones at
their place, in the original order. The flags are read twice and the values once.

That beat the single-pass design with decoupled look-back as this package first wrote it
(kernels restricted to what the CUDA simulator runs, so no warp intrinsics): there the running
totals crossed the tiles 32 at a time, one round of block barriers per step, and the look-back
chain, not memory, set the pace (1.6 ms against 0.3 for 2^26 int32 values on an H100; see
bench/RESULTS.md). Nothing spins, so nothing can hang.

`Selector` owns the tile counts and offsets of one stream; the kernels are in `kernels.py`
(imported when a GPU or the CUDA simulator runs them). `select_numpy` and friends are the NumPy
twins: the CPU implementation and the oracle."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..errors import DispatchError
from ..gpu.numba_launch import NumbaLaunch

THREADS, ITEMS = 256, 16
TILE = THREADS * ITEMS


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
    """The tile counts and offsets (and the kept count) of compactions on one stream; reused
    across calls and released by `close()` (or `with`)."""

    def __init__(self, stream=None):
        from numba import cuda

        self._cuda = cuda
        self.stream = stream if stream is not None else cuda.default_stream()
        self._counts = self._offsets = None
        self._ctl = cuda.device_array(4, np.uint64, stream=self.stream)
        self._fast: dict = {}  # kernel -> NumbaLaunch on this stream
        self._closed = False

    def __enter__(self) -> "Selector":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the device buffers (once; later calls do nothing)."""
        self._counts = self._offsets = self._ctl = None
        self._fast = {}
        self._closed = True

    def enqueue(self, flag_of: Callable, src, n: int, words) -> Callable:
        """Enqueue the tile counts and their scan (the total lands on the device, read by `total()`);
        returns the `write(out, capacity)` that enqueues the scatter after them (`words` None
        writes indices). Nothing waits: callers that can enqueue more work before reading the
        count do so between the two."""
        if self._closed:
            raise DispatchError("this Selector was closed. Fix: make a new one.")
        from . import kernels

        tiles = -(-n // TILE)
        if self._counts is None or self._counts.size < tiles:
            size = max(tiles, 1024)
            self._counts = self._cuda.device_array(size, np.int64, stream=self.stream)
            self._offsets = self._cuda.device_array(size, np.int64, stream=self.stream)
        count, scatter = kernels.select_kernels(flag_of, kernels.write_index if words is None else kernels.copy_words)
        self._launch(count)(tiles, THREADS, src, n, self._counts)
        self._launch(kernels.scan_tiles)(1, kernels.SCAN_THREADS, self._counts, tiles, self._offsets, self._ctl)
        launch = self._launch(scatter)
        return lambda out, capacity: launch(tiles, THREADS, src, n, out if words is None else words, out,
                                            self._offsets, capacity)

    def _launch(self, kernel) -> NumbaLaunch:
        k = self._fast.get(kernel)
        if k is None:
            k = self._fast[kernel] = NumbaLaunch(kernel, self.stream, retain=False)  # callers' arrays stay theirs
        return k

    def total(self) -> int:
        """The kept count of the last `enqueue`, after waiting for the stream."""
        ctl = self._ctl.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return int(ctl[2])

    def run(self, flag_of: Callable, src, n: int, words, out, capacity: int) -> int:
        """Select items 0..n-1 into `out` (at most `capacity` rows) and return how many were kept,
        which may exceed capacity (then only the first `capacity` were written). One
        synchronisation, after everything, to read the count."""
        self.enqueue(flag_of, src, n, words)(out, capacity)
        return self.total()

    def counted(self, flag_of: Callable, src, n: int, words) -> tuple[int, Callable]:
        """(kept count, write): the count after one synchronisation; `write(out, capacity)` then
        enqueues writing the kept items into `out` and returns without waiting."""
        write = self.enqueue(flag_of, src, n, words)
        return self.total(), write
