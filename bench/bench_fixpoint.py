"""Rounds to convergence on the device, each beside its peer in the same run, on the same data.

  (a) per-round cost of each fixpoint mode (cooperative, graph, relaunch) against a numba
      @cuda.jit relaunch loop that reads a flag back each round, at 2^16 and 2^22 items. The
      step bumps a per-item counter until it reaches R, so every run takes exactly R rounds.
  (b) connected components on an R-MAT graph (2^22 vertices, 2^26 undirected edges, 2^27 CSR
      entries; 2^20 / 2^24 with --quick) and a 2048 x 2048 grid: CSR entries per second against
      SciPy's connected_components on this machine's CPU.

    python bench/bench_fixpoint.py [--json OUT.json] [--quick]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402
import vyre_numba as vn  # noqa: E402
from vyre_numba import fixpoint  # noqa: E402
from vyre_numba.graph import connected_components  # noqa: E402


def count_to(i, counter, target):
    """Bump item i's counter until it reaches target: exactly `target` rounds for every item."""
    if counter[i] < target:
        counter[i] += 1
        return 1
    return 0


def bench_rounds(quick: bool) -> dict:
    from numba import cuda

    backend = vn.get_backend("cuda")

    @cuda.jit
    def numba_round(counter, target, flag):
        i = cuda.grid(1)
        if i < counter.size and counter[i] < target:
            counter[i] += 1
            flag[0] = 1

    res = {}
    for label, n in (("2^16", 1 << 16), ("2^22", 1 << 22)):
        rounds = 200 if quick else 1000
        row = {}
        for mode in ("cooperative", "graph", "relaunch"):
            counter = backend.empty(n, np.uint32)
            fixpoint.run(count_to, n, [counter, np.uint32(3)], mode=mode)  # compile and warm
            counter = backend.empty(n, np.uint32)
            t0 = time.perf_counter()
            r = fixpoint.run(count_to, n, [counter, np.uint32(rounds)], mode=mode, max_rounds=rounds + 5)
            wall = time.perf_counter() - t0
            assert r.converged and r.rounds == rounds + 1, r
            assert int(backend.download(counter, 0, 1)[0]) == rounds
            row[f"{mode}_us_per_round"] = wall / r.rounds * 1e6
        zero = np.zeros(1, np.uint32)
        flag = cuda.to_device(zero)
        blocks = (n + 255) // 256
        numba_round[blocks, 256](cuda.to_device(np.zeros(n, np.uint32)), np.uint32(1), flag)  # compile
        counter = cuda.to_device(np.zeros(n, np.uint32))
        cuda.synchronize()
        t0 = time.perf_counter()
        done = 0
        while True:
            flag.copy_to_device(zero)
            numba_round[blocks, 256](counter, np.uint32(rounds), flag)
            done += 1
            if flag.copy_to_host()[0] == 0:
                break
        wall = time.perf_counter() - t0
        assert done == rounds + 1
        row["numba_relaunch_us_per_round"] = wall / done * 1e6
        for mode in ("cooperative", "graph", "relaunch"):
            row[f"ratio_numba_over_{mode}"] = row["numba_relaunch_us_per_round"] / row[f"{mode}_us_per_round"]
        res[label] = row
    return res


def rmat_csr(scale: int, edges: int, seed: int = 0):
    """Symmetric R-MAT (a=0.57, b=c=0.19) in CSR form, duplicates and self-loops kept."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    src = np.zeros(edges, np.int64)
    dst = np.zeros(edges, np.int64)
    for bit in range(scale):
        r = rng.random(edges, dtype=np.float32)
        src |= (r >= 0.76).astype(np.int64) << bit
        dst |= (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).astype(np.int64) << bit
    n = 1 << scale
    a = sp.coo_matrix((np.ones(2 * edges, np.int8), (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                      shape=(n, n)).tocsr()
    return a


def grid_csr(w: int, h: int):
    import scipy.sparse as sp

    v = np.arange(w * h).reshape(h, w)
    src = np.concatenate([v[:, :-1].ravel(), v[:-1, :].ravel()])
    dst = np.concatenate([v[:, 1:].ravel(), v[1:, :].ravel()])
    return sp.coo_matrix((np.ones(2 * src.size, np.int8), (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                         shape=(w * h, w * h)).tocsr()


def bench_components(quick: bool) -> dict:
    from scipy.sparse.csgraph import connected_components as scipy_cc

    backend = vn.get_backend("cuda")
    res = {}
    graphs = {"rmat": rmat_csr(20 if quick else 22, 1 << (24 if quick else 26)), "grid2048": grid_csr(2048, 2048)}
    for name, a in graphs.items():
        nnz = int(a.nnz)
        ip = backend.upload(a.indptr.astype(np.int64))
        ix = backend.upload(a.indices.astype(np.int32))
        labels = backend.download(connected_components(ip, ix, symmetric=True))  # compile and warm
        times = []
        for _ in range(3):
            backend.synchronize()
            t0 = time.perf_counter()
            out = connected_components(ip, ix, symmetric=True)
            backend.synchronize()
            times.append(time.perf_counter() - t0)
        gpu = min(times)
        t0 = time.perf_counter()
        k, lab = scipy_cc(a, directed=False)
        cpu = time.perf_counter() - t0
        mins = np.full(k, a.shape[0], np.int64)
        np.minimum.at(mins, lab, np.arange(a.shape[0]))
        assert np.array_equal(backend.download(out), mins[lab]) and np.array_equal(labels, mins[lab])
        res[name] = {"vertices": a.shape[0], "csr_entries": nnz, "components": int(k), "vyre_s": gpu,
                     "scipy_s": cpu, "vyre_entries_per_s": nnz / gpu, "scipy_entries_per_s": nnz / cpu,
                     "ratio_scipy_over_vyre": cpu / gpu}
    return res


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from vyre_numba.gpu import caps

    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d")}
    res["rounds"] = rounds = bench_rounds(a.quick)
    for label, row in rounds.items():
        print(f"(a) per round at {label}: cooperative {row['cooperative_us_per_round']:.1f} us, graph "
              f"{row['graph_us_per_round']:.1f} us, relaunch {row['relaunch_us_per_round']:.1f} us; numba relaunch "
              f"loop {row['numba_relaunch_us_per_round']:.1f} us (numba / cooperative "
              f"{row['ratio_numba_over_cooperative']:.1f}x, numba / graph {row['ratio_numba_over_graph']:.1f}x)")
    res["components"] = cc = bench_components(a.quick)
    for name, row in cc.items():
        print(f"(b) components {name}: {row['vertices']:,} vertices, {row['csr_entries']:,} entries, "
              f"{row['components']:,} components: vyre {row['vyre_s'] * 1e3:.1f} ms "
              f"({row['vyre_entries_per_s'] / 1e9:.2f} G entries/s), SciPy {row['scipy_s'] * 1e3:.0f} ms: "
              f"{row['ratio_scipy_over_vyre']:.0f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
