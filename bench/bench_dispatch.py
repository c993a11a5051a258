"""Program -> PTX -> GPU benchmarks, each side by side with its peer in the same run, on the same data.

  (a) cold: emit + assemble + load + first launch of an elementwise program, in fresh processes,
      against numba @cuda.jit's first call (compile + launch) of the same kernel.
  (b) warm: host overhead per enqueued dispatch of a small cached program on resident device
      arrays, against a raw cuLaunchKernel with a prebuilt argument array (same cubin), numba
      @cuda.jit dispatch and a CuPy RawKernel of the same cubin.
  (c) device time of elementwise kernels (CUDA events) against numba-generated kernels.

    python bench/bench_dispatch.py [--json OUT.json] [--quick]
"""
from __future__ import annotations

import argparse
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

import vyre_numba as vn  # noqa: E402
from vyre_numba import ir  # noqa: E402


def saxpy_program() -> ir.Program:
    i = ir.var("i")
    return ir.Program(
        [ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.read_write("y", 1, "f32")], 256,
        [ir.let("i", ir.gid(0)),
         ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.fma(ir.f32(2.5), ir.load("x", i), ir.load("y", i)))])],
        name="saxpy")


def hash_program() -> ir.Program:
    i = ir.var("i")
    h = ir.var("h")
    return ir.Program(
        [ir.BufferDecl.read_write("x", 0, "u32")], 256,
        [ir.let("i", ir.gid(0)),
         ir.if_(i < ir.buf_len("x"), [
             ir.let("h", ir.load("x", i)),
             ir.assign("h", (h ^ (h >> 16)) * 0x7FEB352D),
             ir.assign("h", (h ^ (h >> 15)) * 0x846CA68B),
             ir.assign("h", h ^ (h >> 16)),
             ir.store("x", i, h)])],
        name="hash32")


def inc_program() -> ir.Program:
    i = ir.var("i")
    return ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 256,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])],
                      name="inc")


def numba_kernels():
    from numba import cuda

    @cuda.jit
    def saxpy(x, y):
        i = cuda.grid(1)
        if i < y.size:
            y[i] = np.float32(2.5) * x[i] + y[i]

    @cuda.jit
    def hash32(x):
        i = cuda.grid(1)
        if i < x.size:
            h = x[i]
            h = (h ^ (h >> np.uint32(16))) * np.uint32(0x7FEB352D)
            h = (h ^ (h >> np.uint32(15))) * np.uint32(0x846CA68B)
            x[i] = h ^ (h >> np.uint32(16))

    @cuda.jit
    def inc(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = x[i] + np.uint32(1)

    return {"saxpy": saxpy, "hash32": hash32, "inc": inc}


# ---- (a) cold ---------------------------------------------------------------------------------

def cold_child(which: str) -> None:
    """Runs in a fresh process: print the seconds of a first compile+launch."""
    from numba import cuda

    cuda.current_context()
    x = cuda.to_device(np.ones(1 << 16, np.float32))
    y = cuda.to_device(np.ones(1 << 16, np.float32))
    cuda.synchronize()
    if which == "vyre":
        backend = vn.get_backend("cuda")
        t0 = time.perf_counter()
        backend.dispatch_resident(saxpy_program(), [x, y])
        backend.synchronize()
    else:
        kernels = numba_kernels()
        t0 = time.perf_counter()
        kernels["saxpy"][256, 256](x, y)
        cuda.synchronize()
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def bench_cold(reps: int) -> dict:
    res = {}
    for which in ("vyre", "numba"):
        times = []
        for _ in range(reps):
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "VYRE_NUMBA_CACHE": "0"}  # cold: no disk cache
            out = subprocess.run([sys.executable, __file__, "--cold-child", which], capture_output=True, text=True,
                                 env=env, timeout=300)
            if out.returncode:
                raise RuntimeError(out.stderr[-2000:])
            times.append(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
        res[which] = statistics.median(times)
    res["ratio_vyre_over_numba"] = res["vyre"] / res["numba"]
    return res


# ---- (b) warm dispatch overhead -----------------------------------------------------------------

def per_call(fn, n: int, sync) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        sync()
        best = min(best, (t1 - t0) / n)
    return best


def launch_overhead(n_calls: int) -> tuple[dict, object]:
    """Host cost per call of the same cached kernel on the same device array: vyre's resident
    dispatch, a raw cuLaunchKernel with a prebuilt argument array, and numba @cuda.jit."""
    from cuda.bindings import driver as drv

    from vyre_numba.gpu.launch import ArgBlock

    backend = vn.get_backend("cuda")
    p = inc_program()
    n = 4096
    x = backend.upload(np.zeros(n, np.uint32))
    k = backend.kernel(p)
    sync = backend.synchronize
    res = {"vyre_dispatch_resident_us": per_call(lambda: backend.dispatch_resident(p, [x]), n_calls, sync) * 1e6}
    args = ArgBlock(2)
    args.values[0], args.values[1] = x.__cuda_array_interface__["data"][0], n
    f, hdl, h, g = drv.cuLaunchKernel, k.handle, backend.stream_handle, n // 256
    res["raw_cuLaunchKernel_us"] = per_call(lambda: f(hdl, g, 1, 1, 256, 1, 1, 0, h, args.address, 0), n_calls,
                                            sync) * 1e6
    kern = numba_kernels()["inc"]
    res["numba_jit_us"] = per_call(lambda: kern[g, 256, backend.stream](x), n_calls, sync) * 1e6
    res["ratio_vyre_over_raw"] = res["vyre_dispatch_resident_us"] / res["raw_cuLaunchKernel_us"]
    res["ratio_numba_over_vyre"] = res["numba_jit_us"] / res["vyre_dispatch_resident_us"]
    return res, p


def bench_warm(n_calls: int) -> dict:
    import cupy as cp

    backend = vn.get_backend("cuda")
    sync = backend.synchronize
    res, p = launch_overhead(n_calls)
    n = 4096
    from vyre_numba.ptx import assemble

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "inc.cubin"
        path.write_bytes(assemble(backend.ptx(p), sm=backend.caps.sm))
        fn = cp.RawModule(path=str(path)).get_function("inc")
    cx = cp.zeros(n, cp.uint32)
    un = np.uint32(n)
    res["cupy_rawkernel_us"] = per_call(lambda: fn((n // 256,), (256,), (cx, un)), n_calls,
                                        cp.cuda.runtime.deviceSynchronize) * 1e6
    host = np.zeros(n, np.uint32)
    res["vyre_host_dispatch_with_transfers_us"] = per_call(lambda: backend.dispatch(p, [host]), max(50, n_calls // 20),
                                                           sync) * 1e6
    res["ratio_cupy_over_vyre"] = res["cupy_rawkernel_us"] / res["vyre_dispatch_resident_us"]
    return res


# ---- (c) device time --------------------------------------------------------------------------------

def device_ms(launch_fn, reps: int = 50) -> float:
    from numba import cuda

    launch_fn()
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(reps):
            launch_fn()
        end.record()
        end.synchronize()
        best = min(best, cuda.event_elapsed_time(start, end) / reps)
    return best


def bench_device(n: int) -> dict:
    from numba import cuda

    backend = vn.get_backend("cuda")
    nk = numba_kernels()
    rng = np.random.default_rng(0)
    x = cuda.to_device(rng.standard_normal(n).astype(np.float32))
    y = cuda.to_device(rng.standard_normal(n).astype(np.float32))
    u = cuda.to_device(rng.integers(0, 2**32, n, dtype=np.uint32))
    grid = -(-n // 256)
    res = {"n": n}
    for name, prog, bufs, numba_args in (("saxpy", saxpy_program(), [x, y], (x, y)),
                                         ("hash32", hash_program(), [u], (u,))):
        v = device_ms(lambda: backend.dispatch_resident(prog, bufs))
        # numba launches on the default stream; vyre on its own: time each on its own stream's events
        m = device_ms(lambda: nk[name][grid, 256](*numba_args))
        res[name] = {"vyre_ms": v, "numba_ms": m, "ratio_vyre_over_numba": v / m}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cold-child", choices=["vyre", "numba"])
    a = ap.parse_args()
    if a.cold_child:
        cold_child(a.cold_child)
        return 0
    if vn.registry.unavailable_reason("cuda"):
        print(f"skipped: {vn.registry.unavailable_reason('cuda')}")
        return 0
    from vyre_numba.gpu import caps

    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d")}
    res["cold"] = bench_cold(1 if a.quick else 3)
    print(f"(a) cold first launch: vyre {res['cold']['vyre'] * 1e3:.1f} ms, numba {res['cold']['numba'] * 1e3:.1f} ms, "
          f"ratio {res['cold']['ratio_vyre_over_numba']:.3f} (target <= 0.5)")
    res["warm"] = bench_warm(500 if a.quick else 5000)
    w = res["warm"]
    print(f"(b) warm per-call host overhead: vyre {w['vyre_dispatch_resident_us']:.2f} us, raw "
          f"{w['raw_cuLaunchKernel_us']:.2f} us (ratio {w['ratio_vyre_over_raw']:.2f}, target <= 1.5), numba "
          f"{w['numba_jit_us']:.2f} us, CuPy {w['cupy_rawkernel_us']:.2f} us; host dispatch with transfers "
          f"{w['vyre_host_dispatch_with_transfers_us']:.1f} us")
    res["device_time"] = bench_device(1 << 24)
    for k in ("saxpy", "hash32"):
        d = res["device_time"][k]
        print(f"(c) device time {k} 2^24: vyre {d['vyre_ms'] * 1e3:.1f} us, numba {d['numba_ms'] * 1e3:.1f} us, "
              f"ratio {d['ratio_vyre_over_numba']:.3f} (target <= 1.10)")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
