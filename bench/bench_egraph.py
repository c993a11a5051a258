"""E-graph congruence closure on the shared workload (issue 12): `egraph_workload.py` (a copy of
../shared/bench's), N e-nodes with N/64 unions between leaves, at N = 2^16, 2^20, 2^22 and 2^24.

- resident: the e-graph already on the device and congruent; time `union` + `rebuild` (what
  egglog's rebuild after the unions does), median of 3 fresh graphs.
- with upload: from host arrays to the canonical classes on the host (`from_arrays`, the first
  rebuild that hash-conses the rows, the unions, the rebuild, the classes read back).
- NumPy: the reference backend's closure after the unions, on this machine's CPU (up to 2^22).
- egglog: its rebuild time, single thread, measured on the development machine with
  `../shared/bench/egglog_rebuild.py` (egglog does not travel to the GPU machine), recorded in
  `egglog_devmachine.json` (or given with --egglog '{"16": ms, ...}'), for the ratios. Reported: e-nodes per second of the resident closure.
- grouping, hash table against sort: the rebuild groups equal signatures by inserting only the
  touched rows into a resident hash table (compare-and-swap). A sort-based design has to find
  a touched row's equals among all rows, so it sorts every row's 64-bit signature each round
  (or merges into a sorted copy, also a pass over all rows): its floor is one device sort of N
  keys (PyTorch's radix sort, or CuPy's), timed here beside the insert phase's time per round
  (from a closure whose rounds are all launched from the host, so each phase has its own events;
  its resident time is reported too).
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import vyre_numba as vn  # noqa: E402
from vyre_numba.egraph import EGraph  # noqa: E402


def workload(N: int):
    from egraph_workload import generate

    w = generate(N)
    a, b = w["a"], w["b"]
    arity = (a >= 0).astype(np.int64) + (b >= 0).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(arity)]).astype(np.int64)
    children = np.stack([a, b], 1).ravel()
    children = children[children >= 0]
    op = np.where(w["op"] >= 0, w["op"], 6 + np.arange(N)).astype(np.int64)  # Leaf(k): an operator each
    return (np.arange(N, dtype=np.int64), op, offsets, children), np.stack([w["ua"], w["ub"]], 1)


def one(N: int, numpy_too: bool) -> dict:
    rows, unions = workload(N)
    out: dict = {"N": N}
    resident, upload, build, stats = [], [], [], None
    for _ in range(3):
        t0 = time.perf_counter()
        g = EGraph.from_arrays(*rows, backend="cuda")
        build.append(time.perf_counter() - t0)
        first = g.rebuild()
        t1 = time.perf_counter()
        g.union(unions)
        s = g.rebuild()
        t2 = time.perf_counter()
        classes = g.classes()
        t3 = time.perf_counter()
        resident.append(t2 - t1)
        upload.append(t3 - t0)
        stats = s
        g.close()
    out.update(resident_ms=statistics.median(resident) * 1e3, with_upload_ms=statistics.median(upload) * 1e3,
               from_arrays_ms=statistics.median(build) * 1e3, first_rebuild_device_ms=first.device_ns / 1e6,
               first_rebuild_rounds=first.rounds, rounds=stats.rounds, unions=stats.unions,
               nodes_touched=stats.nodes_touched, classes_after=int(np.unique(classes).size),
               phase_ms={k: v / 1e6 for k, v in stats.phase_ns.items()},
               device_ms=stats.device_ns / 1e6)
    out["enodes_per_s"] = N / (out["resident_ms"] / 1e3)
    host = host_rounds(rows, unions)  # each phase timed on its own: the insert's time a round
    out["host_rounds_resident_ms"], out["host_rounds_phase_ms"] = host[0] * 1e3, host[1]
    out["insert_ms_per_round"] = host[1]["insert"] / max(1, out["rounds"])
    out["sort_ms"] = sort_ms(N)
    if numpy_too:
        h = EGraph.from_arrays(*rows, backend="reference")
        h.rebuild()
        h.union(unions)
        t0 = time.perf_counter()
        sh = h.rebuild()
        out["numpy_ms"] = (time.perf_counter() - t0) * 1e3
        out["numpy_rounds"] = sh.rounds
        out["numpy_equal"] = bool(np.array_equal(h.classes(), classes))
    return out


def host_rounds(rows, unions) -> tuple[float, dict]:
    """(seconds, device ms by phase) of the resident union and rebuild with every round launched
    from the host (none in one persistent launch), so that each phase has events of its own."""
    g = EGraph.from_arrays(*rows, backend="cuda")
    g.rebuild(persistent=False)  # untimed, and compiles the host rounds' kernels
    t = time.perf_counter()
    g.union(unions)
    s = g.rebuild(persistent=False)
    seconds = time.perf_counter() - t
    g.close()
    return seconds, {k: v / 1e6 for k, v in s.phase_ns.items()}


def sort_ms(N: int) -> float | None:
    """Device time (ms, median of 5) of sorting N random 64-bit keys with their row ids: the floor
    of one round of sort-based grouping. None where neither PyTorch nor CuPy is installed."""
    try:
        import torch

        keys = torch.randint(-2**63, 2**63 - 1, (N,), dtype=torch.int64, device="cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        return _median_ms(lambda: torch.sort(keys), start, end, lambda a, b: a.elapsed_time(b))
    except ImportError:
        pass
    try:
        import cupy as cp
    except ImportError:
        return None
    keys = cp.random.randint(0, 2**62, N, dtype=cp.uint64)
    return _median_ms(lambda: cp.argsort(keys), cp.cuda.Event(), cp.cuda.Event(), cp.cuda.get_elapsed_time)


def _median_ms(fn, start, end, elapsed) -> float:
    """Median of five timings of `fn` between the events (after one warm-up)."""
    times = []
    for _ in range(6):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(elapsed(start, end))
    return statistics.median(times[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--egglog", default=None, help='egglog single-thread rebuild ms by log2 N, e.g. {"16": 6} '
                    '(default: rebuild_ms of bench/egglog_devmachine.json)')
    a = ap.parse_args()
    why = vn.registry.unavailable_reason("cuda")
    if why:
        print(f"skipped: {why}")
        return 0
    from vyre_numba.gpu import caps

    anchor = json.loads(a.egglog) if a.egglog is not None else \
        json.loads((Path(__file__).parent / "egglog_devmachine.json").read_text())["rebuild_ms"]
    egglog = {int(k): float(v) for k, v in anchor.items()}
    sizes = [16, 20] if a.quick else [16, 20, 22, 24]
    one(1 << 12, False)  # compile the kernels
    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d"), "sizes": {}}
    for k in sizes:
        row = one(1 << k, k <= 22)
        if k in egglog:
            row["egglog_1t_ms_devmachine"] = egglog[k]
            row["ratio_egglog_over_resident"] = egglog[k] / row["resident_ms"]
        res["sizes"][f"2^{k}"] = row
        extra = (f", NumPy {row['numpy_ms']:.1f} ms ({row['numpy_rounds']} rounds, same classes: {row['numpy_equal']})"
                 if "numpy_ms" in row else "")
        vs = f", egglog 1 thread {egglog[k]:.1f} ms: {row['ratio_egglog_over_resident']:.1f}x" if k in egglog else ""
        print(f"2^{k}: resident closure {row['resident_ms']:.2f} ms (device {row['device_ms']:.2f} ms, {row['rounds']} rounds, {row['unions']} unions, "
              f"{row['nodes_touched']} rows touched, {row['enodes_per_s'] / 1e9:.2f} G e-nodes/s), with upload "
              f"{row['with_upload_ms']:.1f} ms (from_arrays {row['from_arrays_ms']:.1f}){extra}{vs}; device ms by phase " +
              ", ".join(f"{p} {v:.2f}" for p, v in row["phase_ms"].items()), flush=True)
        print(f"2^{k}: the same with every round launched from the host: resident closure "
              f"{row['host_rounds_resident_ms']:.2f} ms; device ms by phase " +
              ", ".join(f"{p} {v:.2f}" for p, v in row["host_rounds_phase_ms"].items()), flush=True)
        if row["sort_ms"] is not None:
            print(f"2^{k}: grouping: hash-table insert of the touched rows {row['insert_ms_per_round']:.3f} ms a round; "
                  f"a sort of all {1 << k:,} signatures {row['sort_ms']:.3f} ms a round "
                  f"({row['sort_ms'] / max(row['insert_ms_per_round'], 1e-9):.1f}x the insert)", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
