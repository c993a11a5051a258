"""Where a device select's time goes (issue 11): the host cost of each piece at 2^20 (launches,
the count, the pooled output, a bare synchronisation) and the device time of each kernel at 2^20,
2^24 and 2^28 (the count eight flags a load, the generic count, count and scan, scatter); then a
select of 2^20 to 2^26 items by each path forced (one launch, three into room, count first) beside
PyTorch, each call synchronised. A profile to read beside bench_compaction.py, which measures
against the peers; run on a GPU machine:

    python bench/profile_compaction.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vyre_numba as vn  # noqa: E402


def per_call_us(fn, k: int = 300) -> float:
    """Mean wall time of `fn` over k calls, waiting for the device once at the end."""
    from numba import cuda

    for _ in range(5):
        fn()
    cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    cuda.synchronize()
    return (time.perf_counter() - t0) / k * 1e6


def device_us(fn, k: int = 20) -> float:
    """Mean device time of `fn`'s launches over k back-to-back calls (event to event); a call
    whose host part is slower than its kernels measures the host instead."""
    from numba import cuda

    fn()
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    for _ in range(k):
        fn()
    end.record()
    end.synchronize()
    return cuda.event_elapsed_time(start, end) / k * 1000


def main() -> int:
    why = vn.registry.unavailable_reason("cuda")
    if why:
        print(f"skipped: {why}")
        return 0
    from numba import cuda
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from vyre_numba import compaction
    from vyre_numba.compaction import _octs, _words, kernels
    from vyre_numba.compaction.select import TILE, THREADS
    from vyre_numba.gpu.memory import pool_alloc, pool_free, pooled_array

    dt = np.dtype(np.int32)
    n = 1 << 20
    v = cuda.to_device(np.arange(n, dtype=np.int32))
    f = cuda.to_device((np.arange(n) % 2).astype(np.uint8))
    out = cuda.device_array(n, np.int32)
    w, ow, q = _words(v, n, dt), _words(out, n, dt), _octs(f, n)
    nz = kernels.flag_nonzero
    with compaction.Selector() as sel:
        print("host, 2^20 items, us a call:")
        for label, fn in [("select", lambda: compaction.select(v, f)),
                          ("nonzero", lambda: compaction.nonzero(f)),
                          ("count (count + scan launched, count watched for)", lambda: sel.count(nz, f, n, q)),
                          ("run (count + scan + scatter, one synchronisation)", lambda: sel.run(nz, f, n, w, ow, n, q)),
                          ("enqueue (three launches, no wait)", lambda: sel.enqueue(nz, f, n, w, ow, n, q)),
                          ("raw words view", lambda: _words(v, n, dt)),
                          ("pooled output, made and freed", lambda: pooled_array(n // 2, dt)),
                          ("pool alloc + free", lambda: pool_free(pool_alloc(2 * n))),
                          ("a DeviceNDArray", lambda: DeviceNDArray((n,), (4,), dt, gpu_data=v.gpu_data)),
                          ("stream synchronisation, nothing queued", lambda: cuda.default_stream().synchronize())]:
            print(f"  {label}: {per_call_us(fn):.1f}")
        try:
            import torch

            tv = torch.arange(n, dtype=torch.int32, device="cuda")
            tf = (torch.arange(n, device="cuda") % 2).bool()
            print(f"  torch.masked_select: {per_call_us(lambda: torch.masked_select(tv, tf)):.1f}")
            print(f"  torch.cuda.synchronize: {per_call_us(torch.cuda.synchronize):.1f}")
        except ImportError:
            pass
        print("device, us a call (50% of random flags):")
        for log_n in (20, 24, 28):
            n = 1 << log_n
            tiles = -(-n // TILE)
            v = cuda.to_device(np.arange(n, dtype=np.int32))
            f = cuda.to_device((np.random.default_rng(0).random(n) < 0.5).astype(np.uint8))
            out = cuda.device_array(n, np.int32)
            w, ow, q = _words(v, n, dt), _words(out, n, dt), _octs(f, n)
            with compaction.Selector() as raw:  # counts added here are never scanned: a selector of its own
                raw._grow(tiles)
                counts = raw._args[0]
                count8 = device_us(lambda: raw._launch(kernels.count_bytes)(-(-tiles // kernels.GROUP), THREADS, f, q,
                                                                            n, counts))
                count1 = device_us(lambda: raw._launch(kernels.count_kernel(nz))(tiles, THREADS, f, n, counts))
            offsets = device_us(lambda: sel.offsets(nz, f, n, q))
            scatter = device_us(lambda: sel.scatter(nz, f, n, w, ow, n))
            both = device_us(lambda: sel.enqueue(nz, f, n, w, ow, n, q))
            wall = per_call_us(lambda: compaction.select(v, f), 20)
            print(f"  2^{log_n}: count eight a load {count8:.1f}, count one a load {count1:.1f}, count + scan "
                  f"{offsets:.1f}, scatter {scatter:.1f}, all three {both:.1f}; select wall {wall:.1f}")
    paths()
    return 0


def paths() -> None:
    """Median us of a synchronised select of int32 at 50 % by each path, forced through
    compaction.FUSED_BYTES and ROOM_BYTES, beside torch.masked_select."""
    import statistics

    from numba import cuda

    from vyre_numba import compaction

    def median_us(fn, reps: int = 100) -> float:
        for _ in range(5):
            fn()
        cuda.synchronize()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6

    saved = compaction.FUSED_BYTES, compaction.ROOM_BYTES
    rng = np.random.default_rng(0)
    print("select by path, us a synchronised call:")
    try:
        for log_n in (20, 22, 24, 26):
            n = 1 << log_n
            x = rng.integers(0, 1 << 30, n, dtype=np.int32)
            flags = (rng.random(n) < 0.5).astype(np.uint8)
            dx, df = cuda.to_device(x), cuda.to_device(flags)
            row = {}
            for name, fused, room in (("one launch", 1 << 40, 0), ("three into room", 0, 1 << 40), ("count first", 0, 0)):
                compaction.FUSED_BYTES, compaction.ROOM_BYTES = fused, room
                assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags != 0])
                row[name] = median_us(lambda: compaction.select(dx, df))
            try:
                import torch

                tx, tf = torch.from_numpy(x).cuda(), torch.from_numpy(flags.astype(bool)).cuda()
                row["torch.masked_select"] = median_us(lambda: torch.masked_select(tx, tf))
            except ImportError:
                pass
            print(f"  2^{log_n}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    finally:
        compaction.FUSED_BYTES, compaction.ROOM_BYTES = saved


if __name__ == "__main__":
    raise SystemExit(main())
