"""Where the graph algorithms' device time goes (issues 10, 11 and 15): every kernel of
`bfs_many` (64 sources), of a single BFS and of connected components, timed by CUDA events per
level or phase, on the R-MAT 2^22 / 2^26 graph and the 2048 x 2048 grid of bench_bfs.py and
bench_fixpoint.py; and the grid BFS's device tail for several values of `bfs.CHAIN`. A profile to
read beside those benchmarks; run on a GPU machine:

    python bench/profile_graph.py [--quick]
"""
from __future__ import annotations

import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import vyre_numba as vn  # noqa: E402


@contextmanager
def kernel_times(be, out: list):
    """Record (kernel name, ms) for every `launch_quietly`, `launchers(...)` launch, `fixpoint.run`
    and fixpoint `device.for_each` call made inside the block, by events around each on the backend's
    stream (an interval includes the host's time to enqueue where the GPU waited for it)."""
    from numba import cuda

    from vyre_numba import fixpoint
    from vyre_numba.gpu import numba_launch

    pending = []

    def timed(name, fn):
        def wrapper(*args, **kw):
            a, b = cuda.event(), cuda.event()
            a.record(be.stream)
            r = fn(*args, **kw)
            b.record(be.stream)
            pending.append((name(args), a, b))
            return r
        return wrapper

    from vyre_numba.fixpoint import device

    # fixpoint.for_each ends in device's
    saved = numba_launch.launch_quietly, fixpoint.run, device.for_each, numba_launch.launchers
    numba_launch.launch_quietly = timed(lambda a: getattr(a[0], "__name__", str(a[0])), saved[0])
    fixpoint.run = timed(lambda a: "run:" + a[0].__name__, saved[1])
    device.for_each = timed(lambda a: a[1].__name__, saved[2])
    numba_launch.launchers = lambda stream: timed(lambda a: getattr(a[0], "__name__", str(a[0])), saved[3](stream))
    try:
        yield
    finally:
        numba_launch.launch_quietly, fixpoint.run, device.for_each, numba_launch.launchers = saved
        be.synchronize()
        out.extend((name, cuda.event_elapsed_time(a, b)) for name, a, b in pending)


def summary(rows: list) -> str:
    by = defaultdict(lambda: [0, 0.0])
    for name, ms in rows:
        by[name][0] += 1
        by[name][1] += ms
    return ", ".join(f"{k} {c}x {ms:.2f} ms" for k, (c, ms) in sorted(by.items(), key=lambda kv: -kv[1][1]))


def wall_ms(fn, be, reps: int = 3) -> float:
    fn()
    best = 1e9
    for _ in range(reps):
        be.synchronize()
        t0 = time.perf_counter()
        fn()
        be.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> int:
    quick = "--quick" in sys.argv
    from bench_fixpoint import grid_csr, rmat_csr

    import importlib
    bfs_mod = importlib.import_module("vyre_numba.graph.bfs")
    from vyre_numba.graph import bfs, bfs_many, connected_components
    from vyre_numba.gpu import caps

    be = vn.get_backend("cuda")
    print("device", caps().name, time.strftime("%Y-%m-%d %H:%M"))
    side = 512 if quick else 2048
    g = grid_csr(side, side)
    gip, gix = be.upload(g.indptr.astype(np.int64)), be.upload(g.indices.astype(np.int32))
    r = rmat_csr(18 if quick else 22, 1 << (22 if quick else 26))
    rip, rix = be.upload(r.indptr.astype(np.int64)), be.upload(r.indices.astype(np.int32))

    for gname, ip, ix in (("grid", gip, gix), ("rmat", rip, rix)):
        ms = wall_ms(lambda: connected_components(ip, ix, symmetric=True), be)
        rows: list = []
        with kernel_times(be, rows):
            connected_components(ip, ix, symmetric=True)
        print(f"CC {gname}: wall {ms:.2f} ms; " + ", ".join(f"{k} {v:.3f}" for k, v in rows))

    # the grid BFS, a kernel or fixpoint run at a time
    d = be.download(bfs(gip, gix, 0, symmetric=True))
    ms = wall_ms(lambda: bfs(gip, gix, 0, symmetric=True), be, reps=2)
    rows = []
    with kernel_times(be, rows):
        bfs(gip, gix, 0, symmetric=True)
    print(f"BFS grid: {ms:.2f} ms = {ms * 1e3 / (int(d.max()) + 1):.2f} us/level; by kernel: " + summary(rows))

    # single BFS on R-MAT, a kernel at a time
    source = int(np.argmax(np.diff(r.indptr)))
    levels: list = []
    bfs_mod._bfs_gpu(be, rip, rix, r.shape[0], source, True, levels)
    rows = []
    with kernel_times(be, rows):
        bfs_mod._bfs_gpu(be, rip, rix, r.shape[0], source, True, None)
    print(f"BFS rmat wall {wall_ms(lambda: bfs(rip, rix, source, symmetric=True), be):.2f} ms, levels {levels}")
    print("  kernels: " + ", ".join(f"{k} {v:.3f}" for k, v in rows))

    # bfs_many, 64 sources, a kernel at a time, warp-a-vertex kernels against 32-vertex tiles
    from vyre_numba.graph import multisource
    from vyre_numba.graph.multisource import _bfs_many_gpu
    deg = np.diff(r.indptr)
    sources = np.random.default_rng(5).choice(np.flatnonzero(deg > 0), 64, replace=False)
    singles = wall_ms(lambda: [bfs(rip, rix, int(s), symmetric=True) for s in sources], be, reps=1)
    print(f"64 single BFS {singles:.1f} ms")
    saved = multisource.PIECE
    want = None
    for piece in (1 << 40, 2048, 1024, 512):
        multisource.PIECE = piece
        try:
            got = be.download(bfs_many(rip, rix, sources, symmetric=True))
            want = got if want is None else want
            levels = []
            _bfs_many_gpu(be, rip, rix, r.shape[0], sources, True, levels)
            rows = []
            with kernel_times(be, rows):
                _bfs_many_gpu(be, rip, rix, r.shape[0], sources, True, None)
            ms = wall_ms(lambda: bfs_many(rip, rix, sources, symmetric=True), be)
        finally:
            multisource.PIECE = saved
        print(f"bfs_many piece={piece}: wall {ms:.2f} ms ({singles / ms:.1f}x the singles), "
              f"same distances {np.array_equal(got, want)}, levels {levels}")
        print("  kernels: " + ", ".join(f"{k} {v:.3f}" for k, v in rows))
        print("  by kernel: " + summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
