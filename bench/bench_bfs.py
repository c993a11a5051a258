"""BFS against SciPy on the CPU, same graphs, same run (issue 11):

(a) a 2048 x 2048 grid (diameter 4094): microseconds per level, vyre `graph.bfs` on device arrays.
(b) an R-MAT graph, 2^22 vertices and 2^26 undirected edges, from its largest hub: traversed CSR
    entries per second (GTEPS), vyre against `scipy.sparse.csgraph.breadth_first_order`.
    The same on a `graph.Graph` made of the arrays, which checked them once and skips the CSR check
    that every `bfs(indptr, indices, source)` call makes (a pass over every entry).
(c) 64 sources on the same graph: one `graph.bfs_many` call against 64 `graph.bfs` calls (issue 15),
    and the same two on the `Graph`.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import vyre_numba as vn  # noqa: E402
from vyre_numba.graph import Graph, bfs  # noqa: E402
from vyre_numba.graph.csr import _SYMMETRIC  # noqa: E402


def best_s(fn, sync, reps: int = 3) -> float:
    fn()
    best = 1e9
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    a = common.arguments(__doc__)
    if common.skipped():
        return 0
    from scipy.sparse.csgraph import breadth_first_order

    from bench_fixpoint import grid_csr, rmat_csr
    from vyre_numba.gpu import caps

    be = vn.get_backend("cuda")
    res = {"device": caps().name, "date": time.strftime("%Y-%m-%d")}
    side = 512 if a.quick else 2048
    g = grid_csr(side, side)
    ip, ix = be.upload(g.indptr.astype(np.int64)), be.upload(g.indices.astype(np.int32))
    dist = be.download(bfs(ip, ix, 0, symmetric=True))
    levels = int(dist.max()) + 1
    s = best_s(lambda: bfs(ip, ix, 0, symmetric=True), be.synchronize, reps=1)
    t0 = time.perf_counter()
    breadth_first_order(g, 0, directed=True, return_predecessors=False)
    cpu = time.perf_counter() - t0
    res["grid"] = {"side": side, "levels": levels, "vyre_s": s, "vyre_us_per_level": s / levels * 1e6, "scipy_s": cpu,
                   "ratio_scipy_over_vyre": cpu / s}
    print(f"(a) grid {side}x{side}: {levels} levels, vyre {s * 1e3:.1f} ms = {s / levels * 1e6:.1f} us/level "
          f"(target <= 10), SciPy {cpu * 1e3:.1f} ms ({cpu / s:.2f}x)")
    r = rmat_csr(18 if a.quick else 22, 1 << (22 if a.quick else 26))
    ip, ix = be.upload(r.indptr.astype(np.int64)), be.upload(r.indices.astype(np.int32))
    source = int(np.argmax(np.diff(r.indptr)))
    dist = be.download(bfs(ip, ix, source, symmetric=True))
    reached = dist >= 0
    entries = int(np.diff(r.indptr)[reached].sum())  # CSR entries of the reached vertices: the edges traversed
    s = best_s(lambda: bfs(ip, ix, source, symmetric=True), be.synchronize)
    first = best_s(lambda: (_SYMMETRIC.clear(), bfs(ip, ix, source, symmetric=True)), be.synchronize)
    t0 = time.perf_counter()
    order = breadth_first_order(r, source, directed=True, return_predecessors=False)
    cpu = time.perf_counter() - t0
    assert order.size == int(reached.sum())
    res["rmat"] = {"vertices": r.shape[0], "csr_entries": int(r.nnz), "traversed_entries": entries,
                   "levels": int(dist.max()) + 1, "vyre_s": s, "vyre_gteps": entries / s / 1e9, "scipy_s": cpu,
                   "scipy_gteps": entries / cpu / 1e9, "ratio_scipy_over_vyre": cpu / s,
                   "first_call_s": first}
    print(f"(b) rmat {r.shape[0]:,} vertices, {r.nnz:,} entries, {entries:,} traversed in {int(dist.max()) + 1} levels: "
          f"vyre {s * 1e3:.2f} ms = {entries / s / 1e9:.2f} GTEPS (target >= 100), SciPy {cpu * 1e3:.0f} ms "
          f"({cpu / s:.0f}x); a first call on the graph (its symmetry checked once) {first * 1e3:.2f} ms")
    t0 = time.perf_counter()
    resident = Graph(ip, ix, symmetric=True)
    be.synchronize()
    made = time.perf_counter() - t0
    same = np.array_equal(be.download(resident.bfs(source)), dist)
    s_res = best_s(lambda: resident.bfs(source), be.synchronize, reps=5)
    res["rmat"].update({"graph_s": s_res, "graph_gteps": entries / s_res / 1e9, "graph_made_s": made,
                        "graph_equal": same})
    print(f"    on a Graph (checked once when made, {made * 1e3:.1f} ms): {s_res * 1e3:.2f} ms = "
          f"{entries / s_res / 1e9:.2f} GTEPS (target >= 100), distances equal: {same}")
    res["many"] = many_sources(be, r, ip, ix, 64, resident)
    m = res["many"]
    print(f"(c) {m['sources']} sources on the same graph: bfs_many {m['many_s'] * 1e3:.1f} ms, {m['sources']} single BFS "
          f"{m['singles_s'] * 1e3:.1f} ms: {m['ratio_singles_over_many']:.1f}x the throughput (target >= 10), "
          f"distances equal: {m['equal']}; on the Graph: {m['graph_many_s'] * 1e3:.1f} ms against "
          f"{m['graph_singles_s'] * 1e3:.1f} ms, {m['graph_ratio']:.1f}x, equal: {m['graph_equal']}")
    resident.close()
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


def many_sources(be, r, ip, ix, k: int, resident) -> dict:
    """(c) k sources (non-isolated vertices, fixed seed) on the resident CSR: one `bfs_many` call
    against k `bfs` calls, each returning device distances; then the same on the `Graph` `resident`."""
    from vyre_numba.graph import bfs_many

    deg = np.diff(r.indptr)
    sources = np.random.default_rng(5).choice(np.flatnonzero(deg > 0), k, replace=False)
    many = be.download(bfs_many(ip, ix, sources, symmetric=True)).reshape(k, -1)
    equal = all(np.array_equal(many[i], be.download(bfs(ip, ix, int(s), symmetric=True)))
                for i, s in enumerate(sources[:8]))
    t_many = best_s(lambda: bfs_many(ip, ix, sources, symmetric=True), be.synchronize)
    t_one = best_s(lambda: [bfs(ip, ix, int(s), symmetric=True) for s in sources], be.synchronize, reps=1)
    g_equal = np.array_equal(be.download(resident.bfs_many(sources)).reshape(k, -1), many)
    g_many = best_s(lambda: resident.bfs_many(sources), be.synchronize)
    g_one = best_s(lambda: [resident.bfs(int(s)) for s in sources], be.synchronize, reps=1)
    return {"sources": k, "many_s": t_many, "singles_s": t_one, "ratio_singles_over_many": t_one / t_many,
            "equal": equal, "graph_many_s": g_many, "graph_singles_s": g_one, "graph_ratio": g_one / g_many,
            "graph_equal": g_equal}


if __name__ == "__main__":
    raise SystemExit(main())
