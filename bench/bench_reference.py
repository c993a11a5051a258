"""Throughput of the reference backend on an elementwise program, against the same computation
written directly in NumPy, on the same data in the same run.

    python bench/bench_reference.py [--log2n 20] [--repeats 9] [--workgroup 256]

Prints a table and a JSON line: median seconds per dispatch (bind included), invocations per
second, and the ratio reference / NumPy.
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

from vyre_numba import ir  # noqa: E402
from vyre_numba.reference import ReferenceBackend  # noqa: E402


def elementwise(workgroup: int) -> ir.Program:
    """out[i] = a[i] * 2 + b[i] for i < len(out)."""
    B, i = ir.BufferDecl, ir.var("i")
    return ir.Program([B.read("a", 0, "f32"), B.read("b", 1, "f32"), B.output("out", 2, "f32")], workgroup, [
        ir.let("i", ir.gid(0)),
        ir.if_(i < ir.buf_len("out"), ir.store("out", i, ir.load("a", i) * 2.0 + ir.load("b", i))),
    ], name="saxpy_like")


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm: compile the plan, build the launch geometry
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=20, help="invocations = 2**log2n (default 20)")
    ap.add_argument("--repeats", type=int, default=9, help="timed runs; the median is reported (>= 5)")
    ap.add_argument("--workgroup", type=int, default=256)
    ap.add_argument("--json", help="also write the result row to this file")
    args = ap.parse_args(argv)
    n, repeats = 1 << args.log2n, max(5, args.repeats)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    program, backend = elementwise(args.workgroup), ReferenceBackend()

    def numpy_direct() -> np.ndarray:  # the idiomatic NumPy peer: no output zeroing, no bounds check
        return a * np.float32(2.0) + b

    got = backend.dispatch(program, [a, b])[0]
    if not np.array_equal(got, numpy_direct()):
        raise SystemExit("reference result differs from NumPy: the benchmark is void")
    t_ref = median_seconds(lambda: backend.dispatch(program, [a, b]), repeats)
    t_np = median_seconds(numpy_direct, repeats)
    row = {"program": program.name, "invocations": n, "repeats": repeats,
           "reference_s": t_ref, "numpy_s": t_np,
           "reference_inv_per_s": n / t_ref, "numpy_inv_per_s": n / t_np, "ratio_reference_over_numpy": t_ref / t_np}
    print(f"{'backend':<10} {'median ms':>10} {'Minv/s':>10}")
    print(f"{'reference':<10} {t_ref * 1e3:>10.3f} {n / t_ref / 1e6:>10.1f}")
    print(f"{'numpy':<10} {t_np * 1e3:>10.3f} {n / t_np / 1e6:>10.1f}")
    print(f"reference / numpy time ratio: {t_ref / t_np:.2f}")
    print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2)
    return row


if __name__ == "__main__":
    main()
