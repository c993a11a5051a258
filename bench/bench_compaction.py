"""Stream compaction against the peers a user would pick instead, same data, same run (issue 11):

(a) select: device int32 values and bool flags -> the kept values on the device, vyre
    `compaction.select` against CuPy `x[mask]` and PyTorch `x[mask]`; and `nonzero` against
    `cupy.flatnonzero` and `torch.nonzero`. Median of warm calls, each synchronised.
(b) compact readback: the kept values on the host, vyre `compaction.read_compacted` against
    CuPy `x[mask].get()` and PyTorch `x[mask].cpu()`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vyre_numba as vn  # noqa: E402
from vyre_numba import compaction  # noqa: E402


def median_us(fn, sync, reps: int = 20, warm: int = 3) -> float:
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


def bench(quick: bool) -> dict:
    from numba import cuda

    import cupy
    import torch

    def sync():
        cuda.synchronize()
        cupy.cuda.runtime.deviceSynchronize()
        torch.cuda.synchronize()

    res = {}
    rng = np.random.default_rng(0)
    for log_n in ((20, 24) if quick else (20, 26)):
        n = 1 << log_n
        x = rng.integers(0, 1 << 30, n, dtype=np.int32)
        for density in (0.5, 0.01):
            flags = rng.random(n) < density
            dx, df = cuda.to_device(x), cuda.to_device(flags)
            cx, cf = cupy.asarray(x), cupy.asarray(flags)
            tx, tf = torch.from_numpy(x).cuda(), torch.from_numpy(flags).cuda()
            want = x[flags]
            assert np.array_equal(compaction.select(dx, df).copy_to_host(), want)
            assert np.array_equal(compaction.read_compacted(dx, df), want)
            row = {
                "select_vyre_us": median_us(lambda: compaction.select(dx, df), sync),
                "select_cupy_us": median_us(lambda: cx[cf], sync),
                "select_torch_us": median_us(lambda: tx[tf], sync),
                "nonzero_vyre_us": median_us(lambda: compaction.nonzero(df), sync),
                "nonzero_cupy_us": median_us(lambda: cupy.flatnonzero(cf), sync),
                "nonzero_torch_us": median_us(lambda: torch.nonzero(tf), sync),
                "readback_vyre_us": median_us(lambda: compaction.read_compacted(dx, df), sync),
                "readback_cupy_us": median_us(lambda: cx[cf].get(), sync),
                "readback_torch_us": median_us(lambda: tx[tf].cpu(), sync),
            }
            for what in ("select", "nonzero", "readback"):
                peers = {k: v for k, v in row.items() if k.startswith(what) and "vyre" not in k}
                best = min(peers, key=peers.get)
                row[f"{what}_ratio_vyre_over_fastest"] = row[f"{what}_vyre_us"] / peers[best]
                row[f"{what}_fastest_peer"] = best
            row["select_vyre_GBps"] = n * 5 / row["select_vyre_us"] / 1e3  # 4 B value + 1 B flag read once
            res[f"2^{log_n} density {density}"] = row
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    why = vn.registry.unavailable_reason("cuda")
    if why:
        print(f"skipped: {why}")
        return 0
    from vyre_numba.gpu import caps

    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d"), "cases": bench(a.quick)}
    for label, row in res["cases"].items():
        print(f"{label}: select vyre {row['select_vyre_us']:.0f} us ({row['select_vyre_GBps']:.0f} GB/s), cupy "
              f"{row['select_cupy_us']:.0f}, torch {row['select_torch_us']:.0f} (ratio {row['select_ratio_vyre_over_fastest']:.2f}); "
              f"nonzero vyre {row['nonzero_vyre_us']:.0f}, cupy {row['nonzero_cupy_us']:.0f}, torch "
              f"{row['nonzero_torch_us']:.0f} ({row['nonzero_ratio_vyre_over_fastest']:.2f}); readback vyre "
              f"{row['readback_vyre_us']:.0f}, cupy {row['readback_cupy_us']:.0f}, torch {row['readback_torch_us']:.0f} "
              f"({row['readback_ratio_vyre_over_fastest']:.2f})")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
