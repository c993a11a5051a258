"""Megakernel (issue 15): a 4-stage u32 sequence in which every stage reads other indices of what
the stage before wrote (so fusion keeps every boundary), at 2^16 and 2^22 items, run as one
persistent cooperative launch with three grid barriers (`backend.megakernel`) against a CUDA graph
replaying its four kernels (`backend.record_sequence`) and against the four resident dispatches;
then 20 rounds of it: one megakernel launch of 20 rounds against 20 graph replays. Each call is
timed to completion (host wall time, median of 30 after warm-up); the results are checked equal.

    python bench/bench_megakernel.py [--quick] [--json out.json]
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
import vyre_numba as vn  # noqa: E402
from vyre_numba import ir  # noqa: E402

B = ir.BufferDecl


def stage(k: int, src: str, dst: str, value) -> ir.Program:
    i, n = ir.gid(0), ir.buf_len(dst)
    return ir.Program([B.read(src, 0, "u32"), B.read_write(dst, 1, "u32")], 256,
                      [ir.if_(i < n, [ir.store(dst, i, value(i, n, lambda j: ir.load(src, j)))])], name=f"stage{k}")


STAGES = [("a", "b", lambda i, n, x: x(i) + x((i + 1) % n)),
          ("b", "c", lambda i, n, x: x(n - 1 - i) * 3),
          ("c", "d", lambda i, n, x: x(i ^ 1) ^ x(i)),
          ("d", "a", lambda i, n, x: x((i + 7) % n) + 1)]


def wall_us(fn, reps: int = 30) -> float:
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def case(be, n: int) -> dict:
    host = np.random.default_rng(n).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    names = {s: be.empty(n, np.uint32) for s in "bcd"}

    def fresh():
        bufs = dict(names, a=be.upload(host))
        return [(stage(k, s, d, f), [bufs[s], bufs[d]]) for k, (s, d, f) in enumerate(STAGES)], bufs

    steps, bufs = fresh()
    want = be.dispatch_repeated([], steps, 20, [(bufs["a"],)])[0]
    out = {"items": n}
    steps, bufs = fresh()
    with be.megakernel(steps, [(bufs["a"],)], max_rounds=20) as check:
        out["megakernel_equals_sequence"] = bool(np.array_equal(check.run().outputs[0], want))
    with be.megakernel(steps) as mk, be.megakernel(steps, max_rounds=20) as mk20, be.record_sequence(steps) as graph:
        assert mk.mode == "megakernel", mk.reason
        out["barriers"], out["workgroups"] = mk.barriers, mk.workgroups
        out["megakernel_us"] = wall_us(mk.run)
        out["graph_replay_us"] = wall_us(graph.replay)
        out["dispatches_us"] = wall_us(lambda: (be.dispatch_sequence(steps), be.synchronize()))
        out["megakernel_device_us"] = mk.run().device_ns / 1e3
        out["megakernel_20_rounds_us"] = wall_us(mk20.run, 10)

        def replays():
            for _ in range(20):
                graph.replay_resident(read=False)
            graph.synchronize()
        out["graph_20_replays_us"] = wall_us(replays, 10)
    out["speedup_over_graph"] = out["graph_replay_us"] / out["megakernel_us"]
    out["speedup_20_rounds_over_graph"] = out["graph_20_replays_us"] / out["megakernel_20_rounds_us"]
    return out


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from vyre_numba.gpu import caps

    be = vn.get_backend("cuda")
    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d"),
           "cases": [case(be, 1 << k) for k in ((16,) if a.quick else (16, 22))]}
    for c in res["cases"]:
        print(", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in c.items()))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
