"""Resident-data benchmarks, each side by side with its peer in the same run, on the same data.

  (a) resident dispatch of a small cached program: host overhead per call, against a raw
      cuLaunchKernel with a prebuilt argument array and numba @cuda.jit on the same device arrays.
  (b) a 10-step resident sequence against 10 separate host dispatches (each synchronised): us per step.
  (c) loading a kernel from the disk cache in a fresh process against a cold compile (emit + assemble).

    python bench/bench_resident.py [--json OUT.json] [--quick]
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import vyre_numba as vn  # noqa: E402
from bench_dispatch import inc_program, launch_overhead  # noqa: E402


def bench_sequence(reps: int) -> dict:
    backend = vn.get_backend("cuda")
    p = inc_program()
    n = 1 << 16
    host = np.zeros(n, np.uint32)
    x = backend.upload(host)
    steps = [(p, [x])] * 10

    def sequence():
        backend.dispatch_sequence(steps, read=[(x, 0, 4)])

    def separate():
        for _ in range(10):
            backend.dispatch(p, [host])

    def timeit(fn):
        fn()
        return min(_wall(fn) for _ in range(reps))

    seq = timeit(sequence) / 10
    sep = timeit(separate) / 10
    return {"sequence_us_per_step": seq * 1e6, "separate_dispatch_us_per_step": sep * 1e6,
            "ratio_separate_over_sequence": sep / seq, "n": n}


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


CHILD = """
import json, sys, time, numpy as np, vyre_numba as vn
from vyre_numba import ir
i, v = ir.var("i"), ir.var("v")
body = ir.sqrt(v * v + 1.0) * v - ir.floor(v)
if sys.argv[1] == "exp":
    body = body + ir.exp(v)
p = ir.Program([ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.output("y", 1, "f32")], 256,
               [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.let("v", ir.load("x", i)), ir.store("y", i, body)])],
               name="disk_bench_" + sys.argv[1])
b = vn.get_backend("cuda")
t0 = time.perf_counter(); b.kernel(p); dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, **b.telemetry()}))
"""


def bench_disk(reps: int) -> dict:
    res = {}
    for kind in ("plain", "exp"):
        cold, warm = [], []
        for _ in range(reps):
            with tempfile.TemporaryDirectory() as d:
                env = {**os.environ, "VYRE_NUMBA_CACHE_DIR": d}
                for into in (cold, warm):
                    out = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True, env=env,
                                         timeout=300)
                    if out.returncode:
                        raise RuntimeError(out.stderr[-2000:])
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    into.append(r["seconds"])
                assert r["disk_cache_hits"] == 1 and r["ptx_cache_misses"] == 0, r
        c, w = statistics.median(cold), statistics.median(warm)
        res[kind] = {"cold_compile_ms": c * 1e3, "disk_load_ms": w * 1e3, "ratio_cold_over_disk": c / w}
    return res


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from vyre_numba.gpu import caps

    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d")}
    r = res["resident"] = launch_overhead(500 if a.quick else 5000)[0]
    print(f"(a) resident dispatch per call: vyre {r['vyre_dispatch_resident_us']:.2f} us, raw {r['raw_cuLaunchKernel_us']:.2f} us "
          f"(ratio {r['ratio_vyre_over_raw']:.2f}, target <= 1.5), numba {r['numba_jit_us']:.2f} us "
          f"(numba/vyre {r['ratio_numba_over_vyre']:.2f}, target >= 3)")
    s = res["sequence"] = bench_sequence(3 if a.quick else 10)
    print(f"(b) 10-step sequence {s['sequence_us_per_step']:.1f} us/step vs separate host dispatches "
          f"{s['separate_dispatch_us_per_step']:.1f} us/step (ratio {s['ratio_separate_over_sequence']:.1f}, target >= 2)")
    res["disk"] = bench_disk(1 if a.quick else 3)
    for kind, d in res["disk"].items():
        print(f"(c) {kind} kernel from disk cache {d['disk_load_ms']:.2f} ms vs cold compile {d['cold_compile_ms']:.1f} ms "
              f"(ratio {d['ratio_cold_over_disk']:.1f}, target >= 10)")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
