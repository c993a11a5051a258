"""Where a distributed call's time goes: each phase's task time on the workers (Dask's task stream:
compute and transfer, summed over tasks, and the span from its first start to its last stop) for
connected components and e-graph closure on 1 and 2 GPUs.

    python bench/profile_distributed.py [--scale 24 --log2m 28 --enodes 20] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def phases(records: list) -> dict:
    """{phase: {action: seconds summed, 'span': first start to last stop}} of a task stream."""
    out: dict = defaultdict(lambda: defaultdict(float))
    first: dict = {}
    last: dict = {}
    for r in records:
        name = re.sub(r"-[0-9a-f]{32}$", "", str(r["key"]))
        for s in r["startstops"]:
            out[name][s["action"]] += s["stop"] - s["start"]
            first[name] = min(first.get(name, s["start"]), s["start"])
            last[name] = max(last.get(name, s["stop"]), s["stop"])
    t0 = min(first.values(), default=0.0)
    return {k: {**{a: round(v * 1e3, 2) for a, v in d.items()}, "from_ms": round((first[k] - t0) * 1e3, 1),
                "to_ms": round((last[k] - t0) * 1e3, 1)} for k, d in sorted(out.items(), key=lambda kv: first[kv[0]])}


def profiled(client, call) -> tuple[dict, object]:
    """({wall_ms, phases}, its result) of `call()` run once more after a warm run, under Dask's task
    stream."""
    from distributed import get_task_stream

    call()
    with get_task_stream(client) as ts:
        t = time.perf_counter()
        out = call()
        wall = time.perf_counter() - t
    return {"wall_ms": round(wall * 1e3, 1), "phases": phases(ts.data)}, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=24)
    ap.add_argument("--log2m", type=int, default=28)
    ap.add_argument("--enodes", type=int, default=20)
    ap.add_argument("--only", choices=["cc", "egraph"], help="profile one workload")
    ap.add_argument("--json")
    a = ap.parse_args()
    from dask_cuda import LocalCUDACluster
    from distributed import Client
    from numba import cuda

    from bench_distributed import cut_rows, rmat_edges
    from bench_egraph import workload
    from vyre_numba.distributed import congruence_closure, connected_components

    gpus = [1, 2] if len(cuda.gpus) >= 2 else [1]
    n, m = 1 << a.scale, 1 << a.log2m
    sizes = [m // 2, m - m // 2]
    rows, unions = workload(1 << a.enodes) if a.only != "cc" else (None, None)
    res: dict = {}
    for g in gpus:
        with LocalCUDACluster(n_workers=g, CUDA_VISIBLE_DEVICES=list(range(g)), threads_per_worker=1,
                              dashboard_address=":0") as lc, Client(lc) as c:
            workers = sorted(c.scheduler_info()["workers"])
            if a.only != "egraph":
                cases = {f"cc_{g}gpu": (rmat_edges(c, workers, a.scale, sizes), True)}
                try:
                    import cupy  # noqa: F401
                    cases[f"cc_{g}gpu_edges_on_gpus_left"] = (rmat_edges(c, workers, a.scale, sizes, True), False)
                except ImportError:
                    pass
                for name, (e, gather) in cases.items():
                    res[name], st = profiled(c, lambda: connected_components(client=c, edges=e, n=n, gather=gather,
                                                                             stats=True))
                    res[name].update(cut=st[1].cut_pairs, merged=st[1].merged_pairs)
            if a.only != "cc":
                res[f"egraph_{g}gpu"], _ = profiled(c, lambda: congruence_closure(rows, unions, client=c, backend="cuda"))
                held = [c.scatter([p], workers=[w], hash=False)[0] for p, w in zip(cut_rows(rows, g), workers)]
                res[f"egraph_{g}gpu_on_workers_left"], _ = profiled(
                    c, lambda: congruence_closure(held, unions, client=c, backend="cuda", gather=False))
    text = json.dumps(res, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
