"""Connected components and e-graph closure over Dask: one GPU without Dask, then 1 and 2 GPUs
(dask_cuda.LocalCUDACluster, one worker per GPU) on the same data.

    python bench/bench_distributed.py [--quick] [--json out.json]

CC: an RMAT graph (a=0.57, b=c=0.19) of 2^scale vertices and 2^log2m edges, generated on the
workers' GPUs in one chunk per GPU and kept in the workers' host memory as a Dask array (the
distributed call uploads, computes and returns the labels; also with gather=False, the labels
left on the workers as a Dask array); where CuPy is installed, also with the edges left on the
GPUs that made them (a CuPy-backed Dask array: no upload). One GPU without Dask: the same edges
from host memory through the same single-GPU kernels (upload, components of the edge list,
labels back). E-graph: the shared workload (`egraph_workload.py`) at N e-nodes, its rows cut into
one partition per worker: given as host rows (shipped with the call), then already on the
workers (scattered there before the timing: Dask futures), with the classes gathered or left on
the workers, against the single-GPU resident closure (with its upload). Scaling
efficiency = time on one GPU / (2 x time on two); Dask overhead = Dask on one GPU / without Dask."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _rmat_kernel():
    from numba import cuda, uint64

    @cuda.jit
    def rmat(out, scale, seed):
        i = cuda.grid(1)
        if i >= out.shape[0]:
            return
        x = uint64(seed) * uint64(0x9E3779B97F4A7C15) + uint64(i) * uint64(0xD1B54A32D192ED03)
        u = 0
        v = 0
        for level in range(scale):
            x += uint64(0x9E3779B97F4A7C15)
            z = x
            z = (z ^ (z >> uint64(30))) * uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> uint64(27))) * uint64(0x94D049BB133111EB)
            z = z ^ (z >> uint64(31))
            r = (z >> uint64(11)) * (1.0 / 9007199254740992.0)
            if r >= 0.57:
                if r < 0.76:
                    v |= 1 << level
                elif r < 0.95:
                    u |= 1 << level
                else:
                    u |= 1 << level
                    v |= 1 << level
        out[i, 0] = u
        out[i, 1] = v

    return rmat


def rmat_chunk(scale: int, m: int, seed: int, on_gpu: bool = False):
    """(Runs on a worker.) m RMAT edges as an (m, 2) int32 array generated on this GPU: a host
    array, or (`on_gpu`) a CuPy array left there."""
    from numba import cuda

    out = cuda.device_array((m, 2), np.int32)
    if m:
        _rmat_kernel()[(m + 255) // 256, 256](out, scale, seed)
    if on_gpu:
        import cupy

        cuda.synchronize()
        return cupy.array(out)  # a copy CuPy owns (the Numba array's memory goes with it)
    return out.copy_to_host()


def rmat_edges(client, workers: list, scale: int, sizes: list, on_gpu: bool = False):
    """A persisted Dask array of RMAT edges, chunk i (sizes[i] rows, seed 1000 + i) generated on
    workers[i % len(workers)]: host chunks, or (`on_gpu`) CuPy chunks left on the GPUs."""
    import dask.array as da

    meta = {}
    if on_gpu:
        import cupy

        meta = {"meta": cupy.empty((0, 2), np.int32)}
    futs = [client.submit(rmat_chunk, scale, m, 1000 + i, on_gpu, workers=[workers[i % len(workers)]], pure=False)
            for i, m in enumerate(sizes)]
    return client.persist(da.concatenate([da.from_delayed(f, shape=(m, 2), dtype=np.int32, **meta)
                                          for f, m in zip(futs, sizes)]))


def median_ms(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), out


def single_gpu_cc(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Labels of the edge list (contiguous host columns) on this process's GPU, upload included."""
    from vyre_numba import get_backend
    from vyre_numba.distributed.device import Ops
    from vyre_numba.graph.components import edge_components

    be = get_backend("cuda")
    ops = Ops(be)
    return ops.download(edge_components(ops.run, ops.empty, n, ops.upload(src), ops.upload(dst), src.size))


def cc_case(scale: int, log2m: int, gpus: list[int], repeats: int) -> dict:
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from vyre_numba.distributed import connected_components

    n, m = 1 << scale, 1 << log2m
    row: dict = {"vertices": n, "edges": m}
    chunks = max(gpus)  # the same chunks (seeds) whatever the GPU count, so every run sees the same graph
    sizes = [m // chunks + (1 if i < m % chunks else 0) for i in range(chunks)]
    labels = {}
    for g in gpus:
        with LocalCUDACluster(n_workers=g, CUDA_VISIBLE_DEVICES=list(range(g)), threads_per_worker=1,
                              dashboard_address=":0") as lc, Client(lc) as c:
            workers = sorted(c.scheduler_info()["workers"])
            edges = rmat_edges(c, workers, scale, sizes)
            connected_components(client=c, edges=edges, n=n)  # compile on every worker
            ms, (lab, st) = median_ms(lambda: connected_components(client=c, edges=edges, n=n, stats=True), repeats)
            row[f"dask_{g}gpu_ms"] = ms
            left, kept = median_ms(lambda: connected_components(client=c, edges=edges, n=n, gather=False), repeats)
            row[f"dask_{g}gpu_left_on_workers_ms"] = left
            row[f"dask_{g}gpu_left_on_workers_equal"] = bool(np.array_equal(kept.compute(), lab))
            row[f"dask_{g}gpu_merge_rounds"] = st.merge_rounds
            row[f"dask_{g}gpu_cut_pairs"] = st.cut_pairs
            row[f"dask_{g}gpu_merged_pairs"] = st.merged_pairs
            row[f"dask_{g}gpu_devices"] = sorted({d["gpu"] for d in st.devices.values()})
            labels[g] = lab
            try:
                import cupy  # noqa: F401
            except ImportError:
                continue
            held = rmat_edges(c, workers, scale, sizes, on_gpu=True)
            connected_components(client=c, edges=held, n=n)
            ms, lab = median_ms(lambda: connected_components(client=c, edges=held, n=n), repeats)
            row[f"dask_{g}gpu_edges_on_gpus_ms"] = ms
            row[f"dask_{g}gpu_edges_on_gpus_equal"] = bool(np.array_equal(lab, labels[g]))
            left, _ = median_ms(lambda: connected_components(client=c, edges=held, n=n, gather=False), repeats)
            row[f"dask_{g}gpu_edges_on_gpus_left_on_workers_ms"] = left
    whole = np.concatenate([rmat_chunk(scale, s, 1000 + i) for i, s in enumerate(sizes)])
    src, dst = np.ascontiguousarray(whole[:, 0]), np.ascontiguousarray(whole[:, 1])
    del whole
    single_gpu_cc(src, dst, n)
    ms, lab1 = median_ms(lambda: single_gpu_cc(src, dst, n), repeats)
    row["one_gpu_no_dask_ms"] = ms
    row["components"] = int(np.unique(lab1).size)
    row["labels_equal"] = all(np.array_equal(lab1, v) for v in labels.values())
    return row


def egraph_case(log2n: int, gpus: list[int], repeats: int) -> dict:
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from bench_egraph import workload
    from vyre_numba.distributed import congruence_closure as dclosure
    from vyre_numba.egraph import EGraph, congruence_closure

    N = 1 << log2n
    rows, unions = workload(N)
    row: dict = {"enodes": N}

    def one():
        return congruence_closure(EGraph.from_arrays(*rows, backend="cuda"), unions)

    one()
    ms, want = median_ms(one, repeats)
    row["one_gpu_no_dask_with_upload_ms"] = ms
    equal = True
    for g in gpus:
        with LocalCUDACluster(n_workers=g, CUDA_VISIBLE_DEVICES=list(range(g)), threads_per_worker=1,
                              dashboard_address=":0") as lc, Client(lc) as c:
            dclosure(rows, unions, client=c, backend="cuda")
            ms, got = median_ms(lambda: dclosure(rows, unions, client=c, backend="cuda"), repeats)
            row[f"dask_{g}gpu_ms"] = ms
            row[f"dask_{g}gpu_rounds"] = got.rounds
            equal &= bool(np.array_equal(got.eclass, want.eclass))
            workers = sorted(c.scheduler_info()["workers"])
            held = [c.scatter([p], workers=[w], hash=False)[0] for p, w in zip(cut_rows(rows, g), workers)]
            dclosure(held, unions, client=c, backend="cuda")
            ms, got = median_ms(lambda: dclosure(held, unions, client=c, backend="cuda"), repeats)
            row[f"dask_{g}gpu_on_workers_ms"] = ms
            equal &= bool(np.array_equal(got.eclass, want.eclass))
            dclosure(held, unions, client=c, backend="cuda", gather=False)  # its first call imports dask.array
            ms, got = median_ms(lambda: dclosure(held, unions, client=c, backend="cuda", gather=False), repeats)
            row[f"dask_{g}gpu_left_on_workers_ms"] = ms
            equal &= bool(np.array_equal(got.eclass.compute(), want.eclass))
    row["classes_equal"] = equal
    return row


def cut_rows(rows: tuple, k: int) -> list:
    """The e-graph's rows (eclass, op, offsets, children) cut into k row ranges, one partition each."""
    eclass, op, off, ch = rows
    cuts = np.linspace(0, op.size, k + 1).astype(np.int64)
    return [(eclass[lo:hi], op[lo:hi], off[lo:hi + 1] - off[lo], ch[off[lo]:off[hi]])
            for lo, hi in zip(cuts[:-1], cuts[1:])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    import vyre_numba as vn

    why = vn.registry.unavailable_reason("cuda")
    try:
        import dask_cuda  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        why = why or f"needs dask, distributed and dask-cuda ({e}); pip install 'vyre-numba[dask]' dask-cuda"
    if why:
        print(f"skipped: {why}")
        return 0
    from numba import cuda

    from vyre_numba.gpu import caps

    gpus = [1, 2] if len(cuda.gpus) >= 2 else [1]
    cc_sizes = [(18, 22)] if a.quick else [(22, 26), (24, 28)]
    eg_sizes = [14] if a.quick else [16, 20, 24]
    res = {"device": caps().name, "gpus": len(cuda.gpus), "date": time.strftime("%Y-%m-%d"), "cc": {}, "egraph": {}}
    for scale, log2m in cc_sizes:
        r = res["cc"][f"2^{scale}/2^{log2m}"] = cc_case(scale, log2m, gpus, a.repeats)
        _ratios(r)
        print(f"CC RMAT 2^{scale} vertices, 2^{log2m} edges: " + _line(r), flush=True)
    for k in eg_sizes:
        r = res["egraph"][f"2^{k}"] = egraph_case(k, gpus, min(a.repeats, 2))
        _ratios(r, base="one_gpu_no_dask_with_upload_ms")
        print(f"e-graph closure 2^{k} e-nodes: " + _line(r), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


def _ratios(r: dict, base: str = "one_gpu_no_dask_ms") -> None:
    for how in ("on_workers", "left_on_workers", "edges_on_gpus", "edges_on_gpus_left_on_workers"):
        if f"dask_2gpu_{how}_ms" in r:
            r[f"speedup_2gpu_over_1gpu_{how}"] = r[f"dask_1gpu_{how}_ms"] / r[f"dask_2gpu_{how}_ms"]
    if "dask_1gpu_ms" in r:
        r["dask_overhead_1gpu"] = r["dask_1gpu_ms"] / r[base]
    if "dask_2gpu_ms" in r:
        r["speedup_2gpu_over_1gpu_dask"] = r["dask_1gpu_ms"] / r["dask_2gpu_ms"]
        r["speedup_2gpu_over_no_dask"] = r[base] / r["dask_2gpu_ms"]
        r["scaling_efficiency"] = r["dask_1gpu_ms"] / (2 * r["dask_2gpu_ms"])


def _line(r: dict) -> str:
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items())


if __name__ == "__main__":
    sys.exit(main())
