"""Where a compact readback's time goes (issue 11, item 2): `compaction.read_compacted` of int32
values at 1 % density, 2^20, 2^24 and 2^28 items (and 50 % at 2^20, of int32 and of uint8),
beside its pieces, each timed on the host by
a wrapper over the same calls (the one launch straight into pinned memory and the stream's
synchronisation; else the select into device memory, the copy of the kept records into pinned
memory and the wait for the count; the copy out of pinned memory; for readbacks past
STAGING_KEEP the count first, the scatter and the staged download), the same readback in
three launches where one launch would select (FUSED_BYTES set to 0), the device select alone,
a fresh host array's first touch, and PyTorch's `x[mask]` and `.cpu()` apart and together.
A profile to read beside bench_compaction.py, which measures against the peers; run on a GPU
machine:

    python bench/profile_readback.py
"""
from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402


def median_us(fn, sync, reps: int = 50, warm: int = 3) -> float:
    """Median wall time of a synchronised call of `fn`."""
    for _ in range(warm):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


class Pieces:
    """Host time spent in chosen functions, summed over the calls made while they are wrapped."""

    def __init__(self) -> None:
        self.spent: dict = defaultdict(float)
        self._undo: list = []

    def wrap(self, owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[label] += time.perf_counter() - t0

        setattr(owner, name, timed)
        self._undo.append((owner, name, fn))

    def calls(self, fn, calls: int) -> float:
        """Call `fn` `calls` times with the wrappers in place, then take them off; the host us a
        call, wrapped."""
        try:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - t0) / calls * 1e6
        finally:
            self.undo()

    def undo(self) -> None:
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)

    def per_call_us(self, calls: int) -> str:
        return ", ".join(f"{k} {v / calls * 1e6:.1f}" for k, v in self.spent.items())


def main() -> int:
    if common.skipped():
        return 0
    from cuda.bindings import driver as drv
    from numba import cuda

    from vyre_numba import compaction
    select_module = sys.modules["vyre_numba.compaction.select"]
    from vyre_numba.gpu import host, transfer

    sync = cuda.synchronize
    rng = np.random.default_rng(0)
    try:
        import torch
    except ImportError:
        torch = None
    print(f"STAGING_KEEP {compaction.STAGING_KEEP >> 20} MiB; us a synchronised call, medians")
    for log_n, density, dt in ((20, 0.01, np.int32), (20, 0.5, np.int32), (20, 0.5, np.uint8), (24, 0.01, np.int32),
                               (28, 0.01, np.int32)):
        n = 1 << log_n
        x = rng.integers(0, np.iinfo(dt).max, n, dtype=dt)
        flags = (rng.random(n) < density).astype(np.uint8)
        dx, df = cuda.to_device(x), cuda.to_device(flags)
        want = x[flags != 0]
        assert np.array_equal(compaction.read_compacted(dx, df), want)
        reps = 50 if log_n < 28 else 15
        row = {"read_compacted": median_us(lambda: compaction.read_compacted(dx, df), sync, reps)}
        package = sys.modules["vyre_numba.compaction"]
        fused_bytes, package.FUSED_BYTES = package.FUSED_BYTES, 0  # the three launches' path, for comparison
        try:
            row["read_compacted in three launches"] = median_us(lambda: compaction.read_compacted(dx, df), sync, reps)
        finally:
            package.FUSED_BYTES = fused_bytes
        row.update({
               "select, device out": median_us(lambda: compaction.select(dx, df), sync, reps)})
        kept = compaction.select(dx, df)
        row["kept.copy_to_host()"] = median_us(lambda: kept.copy_to_host(), sync, reps)
        ready = np.empty(want.size, dt)
        ctx = int(drv.cuCtxGetCurrent()[1])
        address = kept.device_ctypes_pointer.value
        row["transfer.download, into a ready array"] = median_us(
            lambda: transfer.download(drv, ctx, ready, address, 0), sync, reps)
        row["transfer.download, into a fresh array"] = median_us(
            lambda: transfer.download(drv, ctx, np.empty(want.size, dt), address, 0), sync, reps)
        row["a fresh array, first touched"] = median_us(lambda: np.copyto(np.empty(want.size, dt), want), sync,
                                                        reps)
        if torch is not None:
            tx, tf = torch.from_numpy(x).cuda(), torch.from_numpy(flags.astype(bool)).cuda()
            tk = tx[tf]
            row["torch x[mask]"] = median_us(lambda: tx[tf], sync, reps)
            row["torch kept.cpu()"] = median_us(lambda: tk.cpu(), sync, reps)
            row["torch x[mask].cpu()"] = median_us(lambda: tx[tf].cpu(), sync, reps)
        pieces = Pieces()
        for owner, name, label in ((select_module.Selector, "fused_at", "select straight into pinned (fused_at)"),
                                   (type(compaction._selector(None).stream), "synchronize",
                                    "stream synchronisations (the waits' own among them)"),
                                   (select_module.Selector, "enqueue_at", "select (enqueue_at)"),
                                   (select_module.Selector, "enqueue", "select (enqueue)"),
                                   (select_module.Selector, "copy_kept_at", "copy into pinned"),
                                   (select_module.Selector, "total", "wait for the count"),
                                   (select_module.Selector, "count", "count first"),
                                   (select_module.Selector, "scatter", "scatter"),
                                   (transfer, "download", "staged download"),
                                   (host, "copy_bytes", "copy out of pinned")):
            pieces.wrap(owner, name, label)
        calls = 10 if log_n < 28 else 5
        pieces.calls(lambda: compaction.read_compacted(dx, df), calls)
        print(f"2^{log_n} {np.dtype(dt).name} at {density:.0%} ({want.size:,} kept): "
              + ", ".join(f"{k} {v:.0f}" for k, v in row.items()))
        print(f"  read_compacted's pieces, host us a call: {pieces.per_call_us(calls)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
