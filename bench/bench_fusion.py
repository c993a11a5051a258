"""Launch fusion (issue 15): a 10-step elementwise f32 pipeline over 2^24 items as ten resident
dispatches, as the one kernel `backend.fuse` makes of them (intermediate buffers kept in registers),
and as the same ten steps in CuPy and PyTorch (their ufuncs with out= buffers, two calls where a
step is two operations), all on the same device data. Median of 5 runs of 20 pipelines between
CUDA events.

    python bench/bench_fusion.py [--quick] [--json out.json]
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

STEPS = [lambda v: v * 2.0, lambda v: v + 1.0, lambda v: ir.sqrt(ir.abs_(v)), lambda v: v * v, lambda v: v - 0.5,
         lambda v: ir.max_(v, 0.25), lambda v: v / 3.0, lambda v: v + v, lambda v: ir.exp(ir.min_(v, 4.0)),
         lambda v: v * 0.5]


def unary(k: int, f) -> ir.Program:
    i = ir.var("i")
    B = ir.BufferDecl
    return ir.Program([B.read("x", 0, "f32"), B.output("y", 1, "f32")], 256,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, f(ir.load("x", i)))])],
                      name=f"step{k}")


def peer_steps(xp, x, bufs):
    """The ten steps with the library's own operations, each writing the next buffer."""
    a = bufs
    xp.multiply(x, 2.0, out=a[0])
    xp.add(a[0], 1.0, out=a[1])
    xp.sqrt(xp.abs(a[1], out=a[2]), out=a[2])
    xp.multiply(a[2], a[2], out=a[3])
    xp.subtract(a[3], 0.5, out=a[4])
    clamp(xp, a[4], lo=0.25, out=a[5])
    xp.divide(a[5], 3.0, out=a[6])
    xp.add(a[6], a[6], out=a[7])
    xp.exp(clamp(xp, a[7], hi=4.0, out=a[8]), out=a[8])
    xp.multiply(a[8], 0.5, out=a[9])


def clamp(xp, a, *, lo=None, hi=None, out):
    """max(a, lo) or min(a, hi) into out: CuPy's maximum/minimum take a scalar, PyTorch's clamp does."""
    if xp.__name__ == "torch":
        return xp.clamp(a, min=lo, max=hi, out=out)
    return xp.maximum(a, lo, out=out) if lo is not None else xp.minimum(a, hi, out=out)


def timed_ms(fn, sync_event, reps: int = 20) -> float:
    from numba import cuda

    fn()
    cuda.synchronize()
    samples = []
    for _ in range(5):
        start, stop = cuda.event(), cuda.event()
        start.record()
        for _ in range(reps):
            fn()
        sync_event()
        stop.record()
        stop.synchronize()
        samples.append(cuda.event_elapsed_time(start, stop) / reps)
    return statistics.median(samples)


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from vyre_numba.gpu import caps

    n = 1 << (20 if a.quick else 24)
    be = vn.get_backend("cuda")
    host = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    bufs = [be.upload(host)] + [be.empty(n, np.float32) for _ in STEPS]
    steps = [(unary(k, f), [bufs[k], bufs[k + 1]]) for k, f in enumerate(STEPS)]
    read = [(bufs[-1], 0, n)]
    plan = be.fuse(steps, read)
    assert len(plan.steps) == 1, plan
    want = be.dispatch_sequence(steps, read)[0]
    got = be.dispatch_sequence(plan.steps, read)[0]
    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d"), "items": n, "steps": len(STEPS),
           "fused_equals_unfused": bool(np.array_equal(want.view(np.uint32), got.view(np.uint32)))}
    nosync = lambda: None  # noqa: E731
    res["unfused_ms"] = timed_ms(lambda: be.dispatch_sequence(steps, []), be.synchronize)
    res["fused_ms"] = timed_ms(lambda: be.dispatch_sequence(plan.steps, []), be.synchronize)
    res["fuse_each_call_ms"] = timed_ms(lambda: be.dispatch_sequence(steps, [], fuse=True), be.synchronize)
    for name in ("cupy", "torch"):
        try:
            lib = __import__(name)
        except ImportError:
            res[f"{name}_ms"] = None
            continue
        if name == "cupy":
            x = lib.asarray(host)
            out = [lib.empty_like(x) for _ in STEPS]
            res["cupy_ms"] = timed_ms(lambda: peer_steps(lib, x, out), nosync)
            peer = lib.asnumpy(out[-1])
        else:
            x = lib.as_tensor(host, device="cuda")
            out = [lib.empty_like(x) for _ in STEPS]
            res["torch_ms"] = timed_ms(lambda: peer_steps(lib, x, out), lib.cuda.synchronize)
            peer = out[-1].cpu().numpy()
        res[f"{name}_max_abs_diff"] = float(np.max(np.abs(peer - got)))
    res["fused_speedup_over_unfused"] = res["unfused_ms"] / res["fused_ms"]
    for name in ("cupy", "torch"):
        if res.get(f"{name}_ms"):
            res[f"fused_speedup_over_{name}"] = res[f"{name}_ms"] / res["fused_ms"]
    print(", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
