"""Autotuning (issue 15): `DispatchConfig(workgroup="tune")` against `"auto"` (the occupancy rule)
on five kernels of different register pressure over 2^24 items: an add, a polynomial, a hash
mixing loop, an unrolled 16-wide accumulation that keeps many values live, and an f64
transcendental chain. Resident dispatches timed between CUDA events, median of 7 runs of 20 (auto
and tune interleaved); the
first "tune" call (which times the candidates) is reported apart, and the outputs are checked equal.

    python bench/bench_tuning.py [--quick] [--json out.json]
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
from vyre_numba import DispatchConfig, ir  # noqa: E402

B = ir.BufferDecl


def kernel(name: str, dtype: str, body) -> ir.Program:
    """y[i] = body(x[i], i); a body returning (statements, value) binds its temporaries first."""
    i = ir.gid(0)
    out = body(ir.load("x", i), i)
    stmts, value = out if isinstance(out, tuple) else ([], out)
    return ir.Program([B.read("x", 0, dtype), B.output("y", 1, dtype)], 256,
                      [ir.if_(i < ir.buf_len("y"), stmts + [ir.store("y", i, value)])], name=name)


def poly(x, i):
    acc = x
    for c in (3.0, -2.5, 1.25, 0.5, -0.75, 2.0, 1.5, -1.0):
        acc = ir.fma(acc, x, c)
    return acc


def mix(x, i):
    h = x ^ i
    for r in (13, 7, 17, 5, 11, 19, 3, 23):
        h = (h ^ (h >> r)) * 0x9E3779B1 + r
    return h


def wide(x, i):
    """Sixteen values live at once, then folded one by one (each step a variable, not a tree)."""
    stmts = [ir.let(f"v{k}", x * float(k + 1) + float(k)) for k in range(16)]
    stmts += [ir.let(f"p{k}", ir.fma(ir.var(f"v{k}"), ir.var(f"v{(k + 5) % 16}"), ir.var(f"v{(k + 11) % 16}")))
              for k in range(16)]
    stmts.append(ir.let("acc", ir.var("p0")))
    for k in range(1, 16):
        stmts.append(ir.assign("acc", ir.max_(ir.var("acc"), ir.var(f"p{k}")) + ir.min_(ir.var("acc"), ir.var(f"p{k}")) * 0.5))
    return stmts, ir.var("acc")


def transcendental(x, i):
    return ir.log(ir.exp(ir.sin(x) * 0.5) + ir.cos(x) * ir.cos(x) + 1.0) + ir.sqrt(ir.abs_(x))


KERNELS = [("add", "f32", lambda x, i: x + 1.0), ("poly", "f32", poly), ("mix", "u32", mix),
           ("wide", "f32", wide), ("f64_transcendental", "f64", transcendental)]


def timed_us(be, program, runs, reps: int = 20) -> list[float]:
    """Median device microseconds a dispatch of each (buffers, config) in `runs`, their samples
    interleaved so clock and cache drift fall on all of them alike."""
    samples = [[] for _ in runs]
    for _ in range(7):
        for k, (bufs, config) in enumerate(runs):
            with be.device_timer() as t:
                for _ in range(reps):
                    be.dispatch_resident(program, bufs, config)
            samples[k].append(t.ns / reps / 1e3)
    return [statistics.median(s) for s in samples]


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from vyre_numba.gpu import caps

    n = 1 << (20 if a.quick else 24)
    be = vn.get_backend("cuda")
    auto, tune = DispatchConfig(workgroup="auto"), DispatchConfig(workgroup="tune")
    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d"), "items": n, "kernels": {}}
    rng = np.random.default_rng(0)
    for name, dtype, body in KERNELS:
        print(f"{name}: compiling and tuning", flush=True)
        p = kernel(name, dtype, body)
        host = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) if dtype == "u32"
                else rng.standard_normal(n).astype(dtype.replace("f", "float")))
        x, ya, yt = be.upload(host), be.empty(n, host.dtype), be.empty(n, host.dtype)
        be.dispatch_resident(p, [x, ya], auto)
        t0 = time.perf_counter()
        be.dispatch_resident(p, [x, yt], tune)
        be.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        equal = bool(np.array_equal(be.download(ya).view(np.uint8), be.download(yt).view(np.uint8)))
        row = {"registers": be.kernel(p, auto).registers, "auto_workgroup": be.auto_workgroup(p)[0],
               "tuned_workgroup": be.tuned_workgroup(p, tune, n)[0], "first_tune_call_ms": first_ms,
               "equal": equal}
        row["auto_us"], row["tune_us"] = timed_us(be, p, [([x, ya], auto), ([x, yt], tune)])
        row["tune_speedup"] = row["auto_us"] / row["tune_us"]
        res["kernels"][name] = row
        print(name, ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
