"""The IR optimizer on the test suite's programs (tests/program_table.py, every operation and type,
plus the redundant programs of tests/test_optimize.py's kind): PTX instructions per kernel as
written and after `ir.optimize`, and, on a GPU, each kernel's device time both ways.

    python bench/bench_optimizer.py [--json out.json]

Instructions: the lines of the kernel body that end in ';' and are not declarations (.reg,
.shared, .local, .param). Device time: CUDA events around 50 back-to-back launches over the
case's inputs held on the device (`dispatch_resident`), median of 5, with
DispatchConfig(optimize=False) and the default: launch overhead included, so only the larger
kernels (the 2^20-item redundant programs) show the optimizer's device-side effect."""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def instructions(ptx: str) -> int:
    """Executable PTX instructions in `ptx` (labels, directives and declarations not counted)."""
    count = 0
    for line in ptx.splitlines():
        s = line.strip()
        if s.endswith(";") and not s.startswith((".", "//")):
            count += 1
    return count


def redundant_programs() -> list:
    """Hand-made programs with repeated values, loop invariants and dead code (what the passes
    are for), u32 over x."""
    from vyre_numba import ir

    B = ir.BufferDecl
    i, x = ir.var("i"), ir.load("x", ir.var("i"))
    bufs = [B.read("x", 0, "u32"), B.output("out", 1, "u32")]
    progs = []
    poly = (x * x + x * 3) ^ (x * x + x * 3) >> 3
    progs.append(ir.Program(bufs, 64, [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("out"),
                 [ir.store("out", i, poly + (x * x + x * 3) * 7)])], name="repeated"))
    body = [ir.let("acc", ir.u32(0)), ir.loop("k", 0, 16, [ir.assign("acc", ir.var("acc") + (x * 2654435761 ^ (x >> 7))
                                                                     + ir.var("k"))]),
            ir.store("out", i, ir.var("acc"))]
    progs.append(ir.Program(bufs, 64, [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("out"), body)], name="invariant"))
    dead = [ir.let("unused", x * x * x), ir.if_(ir.u32(1) < ir.u32(0), [ir.store("out", i, x)]),
            ir.store("out", i, (x + ir.u32(0)) * ir.u32(1))]
    progs.append(ir.Program(bufs, 64, [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("out"), dead)], name="dead"))
    return progs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="2^16 items for the redundant programs (not 2^20)")
    a = ap.parse_args()
    import vyre_numba as vn
    from vyre_numba.ptx import emit

    if not (ROOT / "tests" / "program_table.py").is_file():  # a bench/ folder copied out of its checkout
        print(f"skipped: needs the checkout's tests/program_table.py beside bench/ ({ROOT / 'tests'} has none)")
        return 0
    from program_table import CASES

    cases = [(c.id, c.program, c.inputs, c.config) for c in CASES]
    n = 1 << (16 if a.quick else 20)
    rng = np.random.default_rng(0)
    cases += [(p.name, p, [rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32), np.zeros(n, np.uint32)], None)
              for p in redundant_programs()]
    rows, seen = [], set()
    for cid, p, inputs, config in cases:
        if p.digest() in seen:
            continue
        seen.add(p.digest())
        opts = {} if config is None else {"workgroup": config.workgroup, "cooperative": config.cooperative}
        try:
            before = instructions(emit(p, optimize=False, **opts))
            after = instructions(emit(p, optimize=True, **opts))
        except vn.VyreError:
            continue  # programs the PTX target refuses (the table holds a few on purpose)
        rows.append({"case": cid, "before": before, "after": after, "inputs": inputs, "config": config, "program": p})
    total_b, total_a = sum(r["before"] for r in rows), sum(r["after"] for r in rows)
    res = {"date": time.strftime("%Y-%m-%d"), "programs": len(rows), "instructions_before": total_b,
           "instructions_after": total_a, "fewer": sum(r["after"] < r["before"] for r in rows),
           "more": sum(r["after"] > r["before"] for r in rows),
           "largest_cuts": sorted(((r["case"], r["before"], r["after"]) for r in rows),
                                  key=lambda t: t[2] - t[1])[:8]}
    print(f"{len(rows)} programs: {total_b} PTX instructions as written, {total_a} optimized "
          f"({100 * (total_b - total_a) / max(total_b, 1):.1f} % fewer); {res['fewer']} programs shrank, "
          f"{res['more']} grew")
    for cid, b, af in res["largest_cuts"]:
        print(f"  {cid}: {b} -> {af}")
    why = vn.registry.unavailable_reason("cuda")
    if why:
        print(f"device time skipped: {why}")
    else:
        res["device"] = _device_times(rows)
        d = res["device"]
        print(f"device time, {d['kernels']} kernels: {d['before_us']:.1f} us as written, {d['after_us']:.1f} us "
              f"optimized (sum of per-kernel medians)")
        for x in d["per_kernel"]:
            if x["items"] >= 1 << 16:
                print(f"  {x['case']} ({x['items']} items): {x['before_us']:.1f} -> {x['after_us']:.1f} us")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


def _device_times(rows: list) -> dict:
    """Per kernel whose buffers the case gives in full: microseconds a resident dispatch as written
    and optimized, the two timed alternately (200 launches between CUDA events, median of 7)."""
    from numba import cuda

    import vyre_numba as vn

    be = vn.get_backend("cuda")
    per = []
    for r in rows:
        if len(r["inputs"]) != len(r["program"].bound_buffers):
            continue  # outputs the dispatch would allocate: not a resident call
        base = r["config"] or vn.DispatchConfig()
        cfgs = [dataclasses.replace(base, optimize=o) for o in (False, True)]
        try:
            bufs = [be.upload(x) for x in r["inputs"]]
            for cfg in cfgs:
                be.dispatch_resident(r["program"], bufs, cfg)
        except vn.VyreError:
            continue
        samples: list[list[float]] = [[], []]
        for _ in range(7):
            for k, cfg in enumerate(cfgs):
                start, stop = cuda.event(), cuda.event()
                start.record()
                for _ in range(200):
                    be.dispatch_resident(r["program"], bufs, cfg)
                be.synchronize()
                stop.record()
                stop.synchronize()
                samples[k].append(cuda.event_elapsed_time(start, stop) * 1e3 / 200)
        per.append({"case": r["case"], "items": int(r["inputs"][0].size), "before_us": statistics.median(samples[0]),
                    "after_us": statistics.median(samples[1])})
    return {"kernels": len(per), "before_us": sum(x["before_us"] for x in per),
            "after_us": sum(x["after_us"] for x in per), "per_kernel": per}


if __name__ == "__main__":
    sys.exit(main())
