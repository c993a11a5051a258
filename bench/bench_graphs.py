"""The everyday call and the repeated call, each beside its peers in the same run, on the same data.

  (a) host round trip y = 2x + y over f32 (NumPy in, NumPy out) at 16 KiB, 1 MiB and 64 MiB:
      vyre `dispatch`, and the same replayed from a recorded graph, against PyTorch
      (`torch.add(y.cuda(), x.cuda(), alpha=2).cpu()`), CuPy (asarray + ElementwiseKernel + .get())
      and numba (to_device + @cuda.jit kernel + copy_to_host). Median of warm calls.
  (b) 100 kernels: a program with fixpoint_iterations=100 replayed from a graph (replay_resident),
      against 100 resident dispatches and 100 raw cuLaunchKernel calls of the same cubin, wall time
      including the final synchronisation; and device time per kernel.
  (c) a 10-step resident sequence replayed from a graph against dispatch_sequence, per step.

    python bench/bench_graphs.py [--json OUT.json] [--quick]
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


def axpy2() -> ir.Program:
    i = ir.var("i")
    return ir.Program([B.read("x", 0, "f32"), B.read_write("y", 1, "f32")], 256,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.fma(ir.f32(2.0), ir.load("x", i), ir.load("y", i)))])],
                      name="axpy2")


def bump() -> ir.Program:
    i = ir.var("i")
    return ir.Program([B.read_write("x", 0, "u32")], 256,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])],
                      name="bump")


def median_us(fn, reps: int, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


# ---- (a) host round trips ----------------------------------------------------------------------

def peers(n: int):
    """name -> callable(x, y) returning 2x + y as a NumPy array, for each peer importable here."""
    out = {}
    try:
        import torch

        if torch.cuda.is_available():
            out["pytorch"] = lambda x, y: torch.add(torch.from_numpy(y).cuda(), torch.from_numpy(x).cuda(),
                                                    alpha=2).cpu().numpy()
    except ImportError as e:
        print(f"   (PyTorch unavailable: {e})")
    try:
        import cupy as cp

        k = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = 2.0f * x + y", "axpy2")
        out["cupy"] = lambda x, y: k(cp.asarray(x), cp.asarray(y)).get()
    except ImportError as e:
        print(f"   (CuPy unavailable: {e})")
    from numba import cuda

    @cuda.jit
    def axpy(x, y):
        i = cuda.grid(1)
        if i < y.size:
            y[i] = np.float32(2.0) * x[i] + y[i]

    def numba_rt(x, y):
        dx, dy = cuda.to_device(x), cuda.to_device(y)
        axpy[(y.size + 255) // 256, 256](dx, dy)
        return dy.copy_to_host()
    out["numba"] = numba_rt
    return out


def bench_round_trip(quick: bool) -> dict:
    backend = vn.get_backend("cuda")
    p = axpy2()
    res = {}
    for label, n in (("16KiB", 4096), ("1MiB", 1 << 18), ("64MiB", 1 << 24)):
        rng = np.random.default_rng(0)
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        want = (np.float32(2) * x + y).astype(np.float32)
        reps = 7 if n >= 1 << 24 else (20 if quick else 50)
        row = {}
        (got,) = backend.dispatch(p, [x, y])
        assert np.array_equal(got, want), "vyre dispatch differs from NumPy"
        row["vyre_dispatch_us"] = median_us(lambda: backend.dispatch(p, [x, y]), reps)
        with backend.record_graph(p, [x, y]) as g:
            assert np.array_equal(g.replay([x, y])[0], want)
            row["vyre_graph_replay_us"] = median_us(lambda: g.replay([x, y]), reps)
        for name, fn in peers(n).items():
            assert np.allclose(fn(x, y), want, rtol=1e-6, atol=1e-6), name
            row[f"{name}_us"] = median_us(lambda: fn(x, y), reps)
        peer_times = {k: v for k, v in row.items() if not k.startswith("vyre")}
        fastest = min(peer_times, key=peer_times.get)
        row["fastest_peer"] = fastest
        row["ratio_vyre_over_fastest_peer"] = row["vyre_dispatch_us"] / peer_times[fastest]
        if "pytorch_us" in row:
            row["ratio_vyre_over_pytorch"] = row["vyre_dispatch_us"] / row["pytorch_us"]
        res[label] = row
    return res


# ---- (b) 100 kernels ------------------------------------------------------------------------------

def bench_hundred(quick: bool) -> dict:
    from cuda.bindings import driver as drv

    from vyre_numba.gpu.launch import ArgBlock

    backend = vn.get_backend("cuda")
    p, n = bump(), 256
    config = DispatchConfig(fixpoint_iterations=100)
    reps = 20 if quick else 100
    res = {}
    with backend.record_graph(p, [np.zeros(n, np.uint32)], config) as g:
        before = g.replay_resident()[0][0]
        after = g.replay_resident()[0][0]
        assert after - before == 100
        def replay():
            g.replay_resident(read=False)
            g.synchronize()
        res["graph_replay_100_us"] = median_us(replay, reps)
    x = backend.upload(np.zeros(n, np.uint32))

    def resident():
        for _ in range(100):
            backend.dispatch_resident(p, [x])
        backend.synchronize()
    res["resident_100_us"] = median_us(resident, reps)
    k = backend.kernel(p)
    args = ArgBlock(2)
    args.values[0], args.values[1] = x.__cuda_array_interface__["data"][0], n
    f, h, s = drv.cuLaunchKernel, k.handle, backend.stream_handle

    def raw():
        for _ in range(100):
            f(h, 1, 1, 1, 256, 1, 1, 0, s, args.address, 0)
        drv.cuStreamSynchronize(s)
    res["raw_cuLaunchKernel_100_us"] = median_us(raw, reps)
    res["ratio_graph_over_raw"] = res["graph_replay_100_us"] / res["raw_cuLaunchKernel_100_us"]
    (_, ns_plain) = backend.dispatch_timed(p, [np.zeros(n, np.uint32)], config)
    res["device_us_per_kernel_dispatch"] = ns_plain / 100 / 1e3
    return res


# ---- (c) a 10-step resident sequence ----------------------------------------------------------------

def bench_sequence(quick: bool) -> dict:
    backend = vn.get_backend("cuda")
    p = bump()
    x = backend.upload(np.zeros(1 << 16, np.uint32))
    steps = [(p, [x])] * 10
    reads = [(x, 0, 4)]
    reps = 50 if quick else 300
    res = {"dispatch_sequence_us_per_step": median_us(lambda: backend.dispatch_sequence(steps, reads), reps) / 10}
    with backend.record_sequence(steps, reads) as g:
        a = g.replay()[0][0]
        assert g.replay()[0][0] == a + 10
        res["graph_replay_us_per_step"] = median_us(g.replay, reps) / 10
    res["ratio_sequence_over_graph"] = res["dispatch_sequence_us_per_step"] / res["graph_replay_us_per_step"]
    return res


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from vyre_numba.gpu import caps

    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d")}
    res["round_trip"] = rt = bench_round_trip(a.quick)
    for label, row in rt.items():
        others = ", ".join(f"{k[:-3]} {v:.0f} us" for k, v in row.items() if k.endswith("_us") and not k.startswith("vyre"))
        print(f"(a) round trip {label}: vyre {row['vyre_dispatch_us']:.0f} us (graph replay "
              f"{row['vyre_graph_replay_us']:.0f} us); {others}; vyre / fastest peer ({row['fastest_peer'][:-3]}) "
              f"{row['ratio_vyre_over_fastest_peer']:.2f}")
    res["hundred"] = h = bench_hundred(a.quick)
    print(f"(b) 100 kernels: graph replay {h['graph_replay_100_us']:.0f} us, resident dispatches "
          f"{h['resident_100_us']:.0f} us, raw cuLaunchKernel {h['raw_cuLaunchKernel_100_us']:.0f} us; graph / raw "
          f"{h['ratio_graph_over_raw']:.3f} (target <= 0.25); device {h['device_us_per_kernel_dispatch']:.2f} us/kernel")
    res["sequence"] = s = bench_sequence(a.quick)
    print(f"(c) 10-step sequence: dispatch_sequence {s['dispatch_sequence_us_per_step']:.2f} us/step, graph replay "
          f"{s['graph_replay_us_per_step']:.2f} us/step: {s['ratio_sequence_over_graph']:.1f}x fewer (target >= 3)")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
