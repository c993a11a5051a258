"""Where a small device select's time goes (issue 11's 2^20 target): `compaction.select` of int32
values with u8 flags at 50 % density, 2^16 and 2^20 items, beside its pieces: host time in the
functions it calls (timed by wrappers over the same calls), the one-launch kernel's device time
(launched back to back, CUDA events around a hundred), the launch and watch alone into a ready
output, an empty kernel's synchronised launch (the floor any GPU call pays), and PyTorch's
`masked_select` alone. A profile to read beside bench_compaction.py; run on a GPU machine:

    python bench/profile_select.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402
from profile_readback import Pieces, median_us  # noqa: E402


def main() -> int:
    if common.skipped():
        return 0
    from numba import cuda

    from vyre_numba import compaction
    from vyre_numba.gpu import mapped, memory
    from vyre_numba.gpu.numba_launch import NumbaLaunch, RawArray
    select_module = sys.modules["vyre_numba.compaction.select"]
    package = sys.modules["vyre_numba.compaction"]
    kernels = package._kernels()

    @cuda.jit
    def empty(x):
        pass

    @cuda.jit
    def signal(host):
        host[0] = 1

    @cuda.jit
    def stall(us):  # keeps the stream busy while the host enqueues what is timed behind it
        for _ in range(us):
            cuda.nanosleep(1000)

    sync = cuda.synchronize
    ready = cuda.device_array(1, np.int32)
    print(f"empty kernel, launched and synchronised: {median_us(lambda: empty[1, 32](ready), sync, 200):.1f} us")
    host = cuda.mapped_array(1, np.int64)
    signalled = NumbaLaunch(signal, cuda.default_stream(), retain=False)
    at = RawArray(host.device_ctypes_pointer.value, (1,), np.int64)

    def launch_and_watch_floor():
        host[0] = 0
        signalled(1, 32, at)
        while host[0] == 0:
            pass
    print(f"a one-thread launch and a watch of mapped memory (the floor of one launch and one count read): "
          f"{median_us(launch_and_watch_floor, sync, 200):.1f} us")
    rng = np.random.default_rng(0)
    try:
        import torch
    except ImportError:
        torch = None
    for log_n in (16, 20):
        n = 1 << log_n
        x = rng.integers(0, 1 << 30, n, dtype=np.int32)
        flags = (rng.random(n) < 0.5).astype(np.uint8)
        dx, df = cuda.to_device(x), cuda.to_device(flags)
        assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags != 0])
        row = {"select": median_us(lambda: compaction.select(dx, df), sync, 200)}
        sel = package._selector(None)
        out = cuda.device_array(n, np.int32)
        src_at, words, out_at = (a.device_ctypes_pointer.value for a in (df, dx, out))

        def launch_and_watch():
            return sel.fused_at(kernels.flag_nonzero, src_at, np.dtype(np.uint8), n, True, package._one_word(np.dtype(np.int32)),
                                words, out_at)
        assert launch_and_watch() == int(flags.sum())
        row["fused_at into a ready output"] = median_us(launch_and_watch, sync, 200)
        kept = compaction.select(dx, df)
        row["pooled_array of the kept"] = median_us(
            lambda: memory.pooled_array(kept.shape[0], np.int32, pointer=kept.gpu_data), sync, 200)
        again, resident = next(v for v in sel._relaunches.values() if isinstance(v, tuple))
        again.array(4, out_at, n)
        start, end = cuda.event(), cuda.event()

        def kernel_us(blocks: int) -> float:
            """The one-launch kernel's device time with `blocks`, a hundred launched back to back
            behind a stall, so that the host's launch rate does not set it."""
            for attempt in range(2):
                sel._begin()
                stall[1, 1](3000)
                start.record()
                for _ in range(100):
                    again.scalar(7, sel._tally.arrived + blocks)
                    again(blocks, select_module.THREADS)
                    sel._tally.arrived += blocks
                end.record()
                end.synchronize()
            return cuda.event_elapsed_time(start, end) * 1e3 / 100
        tiles = -(-n // select_module.TILE)
        for cap in (None, 128, 64, 32, 16):
            blocks = max(1, min(resident, tiles, cap or n))
            if cap is not None and blocks == min(resident, tiles):
                continue
            row[f"kernel, device ({blocks} blocks)"] = kernel_us(blocks)
            select_module.FUSED_BLOCKS = cap
            try:
                row[f"select ({blocks} blocks)"] = median_us(lambda: compaction.select(dx, df), sync, 200)
            finally:
                select_module.FUSED_BLOCKS = None
        if torch is not None:
            tx, tf = torch.from_numpy(x).cuda(), torch.from_numpy(flags.astype(bool)).cuda()
            row["torch.masked_select"] = median_us(lambda: torch.masked_select(tx, tf), sync, 200)
        pieces = Pieces()
        for owner, name, label in ((package, "_small", "_small"), (package, "_selector", "_selector"),
                                   (memory, "pool_alloc", "pool_alloc"), (select_module.Selector, "fused_at", "fused_at"),
                                   (select_module.Selector, "_fused_launch", "launch+watch"),
                                   (mapped, "watch", "watch"), (memory, "owning_pointer", "owning_pointer"),
                                   (memory, "pooled_array", "pooled_array")):
            pieces.wrap(owner, name, label)
        calls = 200
        total = pieces.calls(lambda: compaction.select(dx, df), calls)
        print(f"2^{log_n}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
        print(f"  select's pieces, host us a call (wrapped, {total:.1f} a call): {pieces.per_call_us(calls)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
