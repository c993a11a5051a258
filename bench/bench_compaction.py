"""Stream compaction against the peers a user would pick instead, same data, same run (issue 11):

(a) select: device int32 values and u8 flags at 50% density -> the kept values on the device, vyre
    `compaction.select` against PyTorch `torch.masked_select`, CuPy `x[mask]` and the bandwidth
    bound (bytes moved / device-to-device copy bandwidth measured in the same run); `nonzero`
    against `cupy.flatnonzero` and `torch.nonzero`. 2^20, 2^24 and 2^28 items; median of warm
    calls, each synchronised, the peers' calls taken in turn (vyre, PyTorch, CuPy, vyre, ...) so
    that a slow moment of the host falls on all of them alike: 200 rounds up to 2^24, 20 beyond.
(b) compact readback at 1% density: the kept values on the host, vyre `compaction.read_compacted`
    against CuPy `x[mask].get()` and PyTorch `x[mask].cpu()`.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402
from vyre_numba import compaction  # noqa: E402


def median_us(fn, sync, reps: int = 20, warm: int = 3) -> float:
    return medians_us({"": fn}, sync, reps, warm)[""]


def medians_us(fns: dict, sync, reps: int = 20, warm: int = 3) -> dict:
    """{name: median us of a synchronised call of fns[name]}, the calls taken in turn a round."""
    for fn in fns.values():
        for _ in range(warm):
            fn()
    sync()
    times: dict = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def bench(quick: bool) -> dict:
    from numba import cuda

    import cupy
    import torch

    def sync():  # Numba, CuPy and PyTorch share the device's primary context: one context synchronisation waits for all
        cuda.synchronize()

    res = {}
    rng = np.random.default_rng(0)
    big, dst = cupy.empty(1 << 28, cupy.uint8), cupy.empty(1 << 28, cupy.uint8)
    copy_s = median_us(lambda: dst.data.copy_from_device(big.data, big.nbytes), sync) / 1e6
    copy_bw = 2 * big.nbytes / copy_s  # cudaMemcpy device to device: read + write
    del big, dst
    res["copy_GBps"] = copy_bw / 1e9
    for log_n in ((20, 24) if quick else (20, 24, 28)):
        n = 1 << log_n
        x = rng.integers(0, 1 << 30, n, dtype=np.int32)
        flags = (rng.random(n) < 0.5).astype(np.uint8)
        dx, df = cuda.to_device(x), cuda.to_device(flags)
        cx, cf = cupy.asarray(x), cupy.asarray(flags.astype(bool))
        tx, tf = torch.from_numpy(x).cuda(), torch.from_numpy(flags.astype(bool)).cuda()
        kept = int(flags.sum())
        assert np.array_equal(compaction.select(dx, df).copy_to_host(), x[flags != 0])
        reps = 200 if log_n <= 24 else 20
        row = medians_us({"select_vyre_us": lambda: compaction.select(dx, df),
                          "select_torch_us": lambda: torch.masked_select(tx, tf),
                          "select_cupy_us": lambda: cx[cf]}, sync, reps)
        row.update(medians_us({"nonzero_vyre_us": lambda: compaction.nonzero(df),
                               "nonzero_cupy_us": lambda: cupy.flatnonzero(cf),
                               "nonzero_torch_us": lambda: torch.nonzero(tf)}, sync, reps))
        moved = n * 5 + kept * 4  # values and flags read once, kept values written
        row["bound_us"] = moved / copy_bw * 1e6
        row["select_share_of_bound"] = row["bound_us"] / row["select_vyre_us"]
        row["select_ratio_vyre_over_torch"] = row["select_vyre_us"] / row["select_torch_us"]
        row["nonzero_ratio_vyre_over_fastest"] = row["nonzero_vyre_us"] / min(row["nonzero_cupy_us"], row["nonzero_torch_us"])
        sparse = cuda.to_device((rng.random(n) < 0.01).astype(np.uint8))
        csparse = cupy.asarray(sparse.copy_to_host().astype(bool))
        tsparse = torch.from_numpy(sparse.copy_to_host().astype(bool)).cuda()
        assert np.array_equal(compaction.read_compacted(dx, sparse), x[sparse.copy_to_host() != 0])
        row.update(medians_us({"readback_vyre_us": lambda: compaction.read_compacted(dx, sparse),
                               "readback_cupy_us": lambda: cx[csparse].get(),
                               "readback_torch_us": lambda: tx[tsparse].cpu()}, sync, reps))
        row["readback_ratio_vyre_over_fastest"] = row["readback_vyre_us"] / min(row["readback_cupy_us"],
                                                                                row["readback_torch_us"])
        res[f"2^{log_n}"] = row
        del dx, df, cx, cf, tx, tf
    return res


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from vyre_numba.gpu import caps

    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d"), "cases": bench(a.quick)}
    print(f"device-to-device copy: {res['cases']['copy_GBps']:.0f} GB/s")
    for label, row in res["cases"].items():
        if not isinstance(row, dict):
            continue
        print(f"{label} at 50%: select vyre {row['select_vyre_us']:.0f} us, torch.masked_select {row['select_torch_us']:.0f}, "
              f"cupy {row['select_cupy_us']:.0f}, bound {row['bound_us']:.0f} us (vyre at {row['select_share_of_bound']:.0%} "
              f"of the bound, {1 / row['select_ratio_vyre_over_torch']:.2f}x as fast as torch, target >= 2); nonzero vyre {row['nonzero_vyre_us']:.0f}, "
              f"cupy {row['nonzero_cupy_us']:.0f}, torch {row['nonzero_torch_us']:.0f}; readback at 1% vyre "
              f"{row['readback_vyre_us']:.0f}, cupy {row['readback_cupy_us']:.0f}, torch {row['readback_torch_us']:.0f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
