"""BFS against SciPy on every shape of graph that breaks naive traversals, the kernels under the
CUDA simulator, and a clear error for every bad call."""
from __future__ import annotations

import importlib
import re
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

import vyre_numba as vn
from vyre_numba.errors import DispatchError
from vyre_numba import graph
from vyre_numba.graph import bfs

from simulated import run_script


def coo(n, src, dst, symmetric=False):
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    return sp.coo_matrix((np.ones(src.size), (src, dst)), shape=(n, n)).tocsr()


def rmat(scale, edges, seed=0, symmetric=True):
    rng = np.random.default_rng(seed)
    src = np.zeros(edges, np.int64)
    dst = np.zeros(edges, np.int64)
    for bit in range(scale):
        r = rng.random(edges)
        src |= (r >= 0.76).astype(np.int64) << bit
        dst |= (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).astype(np.int64) << bit
    return coo(1 << scale, src, dst, symmetric)


def grid(w, h):
    v = np.arange(w * h).reshape(h, w)
    return coo(w * h, np.concatenate([v[:, :-1].ravel(), v[:-1, :].ravel()]),
               np.concatenate([v[:, 1:].ravel(), v[1:, :].ravel()]), True)


rng = np.random.default_rng(7)
GRAPHS = {
    "random directed": coo(500, rng.integers(0, 500, 1500), rng.integers(0, 500, 1500)),
    "random symmetric": coo(500, rng.integers(0, 500, 700), rng.integers(0, 500, 700), True),
    "rmat": rmat(10, 6000),
    "grid": grid(30, 20),
    "path with chords": coo(2000, np.r_[np.arange(1999), rng.integers(0, 2000, 20)],
                            np.r_[np.arange(1, 2000), rng.integers(0, 2000, 20)], True),
    "path": coo(300, np.arange(299), np.arange(1, 300), True),
    "directed path": coo(300, np.arange(299), np.arange(1, 300)),
    "star": coo(200, np.zeros(199, np.int64), np.arange(1, 200), True),
    "large star": coo(5000, np.zeros(4999, np.int64), np.arange(1, 5000), True),  # source 0: the whole grid expands it
    "hub behind a wide frontier": coo(400, [0] * 40 + [1] * 300, list(range(1, 41)) + list(range(41, 341))),
    "disconnected": coo(100, [0, 1, 2, 50, 51], [1, 2, 3, 51, 52], True),
    "self loops and duplicates": coo(10, [0, 0, 0, 1, 1, 3], [0, 1, 1, 2, 2, 3], True),
    "single vertex": coo(1, [], []),
}
SYMMETRIC = {"random symmetric", "rmat", "grid", "path with chords", "path", "star", "large star", "disconnected",
             "self loops and duplicates", "single vertex"}


def expected(a, source):
    d = shortest_path(a, unweighted=True, directed=True, indices=source)
    return np.where(np.isinf(d), -1, d).astype(np.int32)


@pytest.mark.parametrize("small", [(0, 0), (4, 8), None, (10**9, 10**9)])  # NumPy levels only, tiny Python
# levels, the defaults, Python levels only
@pytest.mark.parametrize("name", GRAPHS)
def test_numpy_bfs_matches_scipy_from_several_sources(name, small, monkeypatch):
    """bfs_numpy expands small levels in a Python loop and large ones with NumPy, switching either
    way between levels: the distances are SciPy's whichever expands which level."""
    module = importlib.import_module("vyre_numba.graph.bfs")  # the package exports the function as bfs

    if small is not None:
        monkeypatch.setattr(module, "SCALAR_VERTICES", small[0])
        monkeypatch.setattr(module, "SCALAR_EDGES", small[1])
    a = GRAPHS[name]
    for source in {0, a.shape[0] // 2, a.shape[0] - 1}:
        got = bfs(a.indptr, a.indices, source, backend="reference")
        assert got.dtype == np.int32 and np.array_equal(got, expected(a, source)), (name, source)


class _Device:
    """A stand-in for a one-item device array (CuPy, PyTorch, Numba): no GPU is needed to refuse it."""
    __cuda_array_interface__ = {"shape": (1,), "typestr": "<i8", "data": (0, False), "version": 3}


@pytest.mark.parametrize("call,fragment", [
    (lambda a: bfs(a.indptr, a.indices, -1, backend="reference"), "source=-1"),
    (lambda a: bfs(a.indptr, a.indices, 500, backend="reference"), "source=500"),
    (lambda a: bfs(a.indptr, a.indices, True, backend="reference"), "source=True is a bool, not an int naming"),
    (lambda a: bfs(a.indptr, a.indices, 1.0, backend="reference"), "source=1.0 is a float, not an int naming"),
    (lambda a: bfs(a.indptr, a.indices, np.timedelta64(1, "s"), backend="reference"), "source=np.timedelta64(1,'s')"),
    (lambda a: bfs(a.indptr, a.indices, np.array([1]), backend="reference"), "source=array([1])"),
    (lambda a: bfs(a.indptr, a.indices, np.ma.array(1), backend="reference"), "source is a masked array"),
    (lambda a: bfs(a.indptr, a.indices, _Device(), backend="reference"),
     "source is a device array (a _Device), not one vertex. Fix: pass an int on the host"),
    (lambda a: bfs(a.indptr, a.indices, pytest.importorskip("pandas").Series([1]), backend="reference"),
     "source is a Series, not one vertex. Fix:"),  # named, not its repr of several lines
    (lambda a: bfs(a.indptr[::-1].copy(), a.indices, 0, backend="reference"),  # reversed: its ends are wrong
     "indptr runs from 1497 to 0, but must run from 0 to len(indices) = 1497. Fix: pass the indptr and indices of one CSR"),
    (lambda a: bfs(np.r_[a.indptr[:2], a.indptr[3] + 1, a.indptr[3:]], a.indices, 0, backend="reference"),
     "indptr decreases at vertex 2 (8 -> 7); offsets must never decrease. Fix: build the CSR from the edges"),
    (lambda a: bfs(a.indptr, a.indices + 1000, 0, backend="reference"),
     "indices[0] = 1051 is not a vertex of this 500-vertex graph. Fix: keep every index a vertex id"),
    (lambda a: bfs(a.indptr, a.indices.astype(np.float32), 0, backend="reference"),
     "indices has dtype float32, not an integer type (its values are whole). Fix: pass "
     "np.asarray(indices).astype(np.int64)"),
    (lambda a: bfs(a.indptr, a.indices, 0, backend="reference", symmetric="yes"), "symmetric='yes'"),
    (lambda a: bfs(np.array([]), a.indices, 0, backend="reference"),  # nothing said of values it has none of
     "indptr has dtype float64, not an integer type. Fix: pass np.asarray(indptr).astype(np.int64)"),
    (lambda a: bfs(np.zeros(1, np.int64), np.zeros(0, np.int64), 0, backend="reference"), "no vertices"),
    (lambda a: bfs(a.indptr, np.ma.array(a.indices), 0, backend="reference"), "masked array"),
    (lambda a: graph.bfs_numpy(graph.check_csr(a.indptr, a.indices), 500), "source=500"),
    (lambda a: graph.bfs_numpy(graph.check_csr(a.indptr, a.indices), -1), "source=-1"),
    (lambda a: graph.bfs_numpy((a.indptr, a.indices), 0), "check_csr(indptr, indices)"),
    (lambda a: graph.bfs_many_numpy(graph.check_csr(a.indptr, a.indices), np.array([500])), "sources[0] = 500 is not a vertex"),
    (lambda a: graph.components_numpy((a.indptr, a.indices)), "check_csr(indptr, indices)"),
])
def test_bad_calls_raise_with_a_fix(call, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        call(GRAPHS["random directed"])
    assert fragment in str(e.value)



@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_symmetric_true_for_a_host_csr_that_is_not_is_refused(name):
    """Regression (a red-team): symmetric=True on a directed path gave [0, -1, -1] on the GPU (its
    first level went bottom-up) and [0, 1, 2] on the reference, which ignored the promise."""
    be = vn.get_backend(name)
    rng = np.random.default_rng(7)
    for _ in range(60):
        n, m = int(rng.integers(1, 40)), int(rng.integers(0, 120))
        a = sp.coo_matrix((np.ones(m), (rng.integers(0, n, m), rng.integers(0, n, m))), shape=(n, n)).tocsr()
        for g in (a, a + a.T):
            g = sp.csr_matrix(g)  # duplicates summed: each edge stored once
            stored = (g != 0).astype(np.int8)
            symmetric = (stored != stored.T).nnz == 0
            calls = (lambda: graph.bfs(g.indptr, g.indices, 0, backend=be, symmetric=True),
                     lambda: graph.bfs_many(g.indptr, g.indices, [0], backend=be, symmetric=True),
                     lambda: graph.connected_components(g.indptr, g.indices, backend=be, symmetric=True))
            for call in calls:
                if symmetric:
                    call()
                else:
                    with pytest.raises(DispatchError, match=r"^symmetric=True, but the edge \d+ -> \d+ is stored and "
                                                            r"\d+ -> \d+ is not .*Fix: pass symmetric=False"):
                        call()
    with pytest.raises(DispatchError, match=r"the edge 0 -> 1 is stored and 1 -> 0 is not"):
        bfs([0, 1, 2, 2], [1, 2], 0, backend=be, symmetric=True)
    # an edge stored twice one way and once the other is stored both ways (a regression: refused)
    assert bfs([0, 2, 3], [1, 1, 0], 0, backend=be, symmetric=True).tolist() == [0, 1]
    assert graph.connected_components([0, 2, 3, 3], [1, 1, 0], backend=be, symmetric=True).tolist() == [0, 0, 2]
    with pytest.raises(DispatchError, match=r"the edge 1 -> 2 is stored and 2 -> 1 is not"):
        bfs([0, 2, 5, 5], [1, 1, 0, 0, 2], 0, backend=be, symmetric=True)  # duplicates do not hide a one-way edge
    assert bfs([0, 1, 2, 3], [1, 0, 2], 0, backend=be, symmetric=True).tolist() == [0, 1, -1]  # a self-loop is both


@pytest.mark.gpu
def test_symmetric_true_for_a_device_csr_that_is_not_is_refused_on_the_device():
    """Regression (a carried-over gap): symmetric=True was trusted for device arrays, whose distances
    and labels were then wrong where it was broken; checked there now, as on the host."""
    from numba import cuda

    rng = np.random.default_rng(8)
    for _ in range(30):
        n, m = int(rng.integers(1, 40)), int(rng.integers(0, 120))
        a = sp.coo_matrix((np.ones(m), (rng.integers(0, n, m), rng.integers(0, n, m))), shape=(n, n)).tocsr()
        for g in (a, a + a.T):
            g = sp.csr_matrix(g)
            stored = (g != 0).astype(np.int8)
            ip, ix = cuda.to_device(g.indptr.astype(np.int64)), cuda.to_device(g.indices.astype(np.int32))
            calls = (lambda: graph.bfs(ip, ix, 0, symmetric=True), lambda: graph.bfs_many(ip, ix, [0], symmetric=True),
                     lambda: graph.connected_components(ip, ix, symmetric=True))
            for call in calls:
                if (stored != stored.T).nnz == 0:
                    call()
                else:
                    with pytest.raises(DispatchError, match=r"^symmetric=True, but the edge \d+ -> \d+ is stored"):
                        call()
    dup = (cuda.to_device(np.array([0, 2, 3], np.int64)), cuda.to_device(np.array([1, 1, 0], np.int32)))
    assert graph.bfs(*dup, 0, symmetric=True).copy_to_host().tolist() == [0, 1]  # stored twice one way: both ways


def test_check_symmetric_agrees_with_scipy_on_edge_sets_with_duplicates_at_every_piece_size():
    """symmetric means the set of stored edges equals its reverse: duplicates, whether or not a
    piece boundary splits them, neither refuse a symmetric CSR nor hide a one-way edge, and the
    edge a refusal names is stored one way only."""
    rng = np.random.default_rng(11)
    for _ in range(400):
        n, m = int(rng.integers(1, 30)), int(rng.integers(0, 80))
        r, c = rng.integers(0, n, m), rng.integers(0, n, m)
        if rng.random() < 0.5:
            r, c = np.r_[r, c], np.r_[c, r]
        if rng.random() < 0.5 and r.size:
            k = rng.integers(0, r.size, r.size // 2 + 1)
            r, c = np.r_[r, r[k]], np.r_[c, c[k]]
        if rng.random() < 0.3 and r.size:
            r, c = r[:-1], c[:-1]
        order = np.argsort(r, kind="stable")
        r, c = r[order], c[order]
        g = graph.check_csr(np.r_[0, np.cumsum(np.bincount(r, minlength=n))], c)
        a = sp.csr_matrix((np.ones(c.size), c, g.indptr), shape=(n, n))
        a.sum_duplicates()
        a.data[:] = 1
        stored = set(zip(r.tolist(), c.tolist()))
        for piece in (1, 3, 1 << 16):
            if (a != a.T).nnz == 0:
                graph.csr.check_symmetric(g, piece)
                continue
            with pytest.raises(DispatchError) as e:
                graph.csr.check_symmetric(g, piece)
            u, v = (int(x) for x in re.search(r"the edge (\d+) -> (\d+) is stored and", str(e.value)).groups())
            assert (u, v) in stored and (v, u) not in stored


# One-way edges whose unkeyed symmetry sums agree (n = 4096), found by a red-team's birthday search
# in under a minute: the sums alone took the graph as symmetric, and Afforest then mislabelled 16 vertices.
COLLIDING = [(2, 2269), (29, 2905), (51, 2520), (116, 3450), (191, 3810), (284, 3108), (333, 3848), (391, 3040),
             (486, 2284), (496, 3086), (543, 2150), (543, 3849), (729, 3791), (872, 3062), (884, 2783), (1002, 2241)]


def _colliding_graph():
    n = 4096
    path = np.arange(2047)
    r = np.r_[path, path + 1, [u for u, _ in COLLIDING]]
    c = np.r_[path + 1, path, [v for _, v in COLLIDING]]
    a = sp.csr_array((np.ones(r.size), (r, c)), shape=(n, n))
    return a.indptr, a.indices


def test_one_way_edges_made_to_collide_in_unkeyed_sums_are_refused_under_the_process_secret(monkeypatch):
    """symmetric=True is checked with sums keyed by a secret drawn each process: edges crafted so
    that unkeyed sums agree (they do, with the secret 0) are refused, naming one of them."""
    indptr, indices = _colliding_graph()
    g = graph.check_csr(indptr, indices)
    monkeypatch.setattr(graph.csr, "SECRET", 0)
    sums = graph.csr.edge_sums_host(g)
    assert sums[0] == sums[1]  # the crafted collision is real without a key
    monkeypatch.undo()
    assert graph.csr.SECRET != 0
    with pytest.raises(DispatchError, match=r"^symmetric=True, but the edge \d+ -> \d+ is stored") as e:
        graph.csr.check_symmetric(g)
    u, v = (int(x) for x in re.search(r"the edge (\d+) -> (\d+) is stored", str(e.value)).groups())
    assert (u, v) in COLLIDING
    with pytest.raises(DispatchError, match="symmetric=True, but the edge"):
        graph.connected_components(indptr, indices, symmetric=True, backend="reference")


@pytest.mark.gpu
def test_gpu_one_way_edges_made_to_collide_in_unkeyed_sums_are_refused_on_the_device():
    """As on the host: the device's sums and fingerprint are keyed by the process secret, so the
    crafted edges are refused and components of the graph, told it is not symmetric, are right."""
    from numba import cuda

    indptr, indices = _colliding_graph()
    d = cuda.to_device(indptr), cuda.to_device(indices)
    for call in (lambda: graph.connected_components(*d, symmetric=True), lambda: graph.bfs(*d, 0, symmetric=True),
                 lambda: graph.Graph(*d, symmetric=True)):
        with pytest.raises(DispatchError, match="symmetric=True, but the edge"):
            call()
    want = graph.connected_components(indptr, indices, backend="reference")
    assert np.array_equal(graph.connected_components(*d).copy_to_host(), want)


def test_a_0d_integer_array_is_a_source_as_bfs_many_takes_one():
    a = GRAPHS["random directed"]
    assert np.array_equal(bfs(a.indptr, a.indices, np.array(3), backend="reference"),
                          bfs(a.indptr, a.indices, 3, backend="reference"))
    assert np.array_equal(graph.bfs_numpy(graph.check_csr(a.indptr, a.indices), np.array(np.uint8(3))),
                          bfs(a.indptr, a.indices, 3, backend="reference"))
    for many in (np.array([3]), [3], (3, 4)):  # said to be many, not "not a vertex"
        with pytest.raises(DispatchError, match=r"not one vertex\. Fix: pass one int .*bfs_many takes many"):
            bfs(a.indptr, a.indices, many, backend="reference")


SIMULATED = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba.graph.bfs import HUB, _bfs_gpu, bfs_numpy
    from vyre_numba.graph.csr import check_csr, enqueue_check

    from simulated import SimBackend as Backend, SimOps, csr

    sim = SimOps()
    rounds = (sim.run, sim.until)

    def grid_edges(w, h):
        v = np.arange(w * h).reshape(h, w)
        return list(np.r_[v[:, :-1].ravel(), v[:-1, :].ravel()]), list(np.r_[v[:, 1:].ravel(), v[1:, :].ravel()])

    rng = np.random.default_rng(1)
    cases = [(1, [], []), (30, range(29), range(1, 30)), (40, rng.integers(0, 40, 60), rng.integers(0, 40, 60)),
             (300, [0] * 299, range(1, 300)),  # a source of 299 neighbours: expanded by the whole grid
             (400, [0] * 40 + [1] * 300, list(range(1, 41)) + list(range(41, 341))),  # a hub among 40: by a block
             (120, list(range(9)) + [9] * 110, list(range(1, 10)) + list(range(10, 120))),  # a hub past level 8
             (12 * 9, *grid_edges(12, 9)),  # the tail's wavefront chains along rows and columns
             (90, list(range(89)) + [3, 12, 40, 70], list(range(1, 90)) + [60, 85, 20, 15])]  # chains later undercut
    done = tails = persistent = 0
    for n, s, d in cases:
        for symmetric in (False, True):
            indptr, indices = csr(n, list(s), list(d), symmetric)
            want = bfs_numpy(check_csr(indptr, indices), 0)
            levels = []
            dip, dix = cuda.to_device(indptr), cuda.to_device(indices)
            hubs = enqueue_check(Backend(), dip, dix, n, HUB) if symmetric else True  # the check's wait folded in
            got = _bfs_gpu(Backend(), dip, dix, n, 0, symmetric, levels, hubs=hubs, rounds=rounds)
            assert np.array_equal(got.copy_to_host(), want), (n, symmetric)
            done += 1
            tails += "persistent" in levels
            if "persistent" in levels:  # the same tail as one persistent launch (levels_on_device)
                levels = []
                got = _bfs_gpu(Backend(), dip, dix, n, 0, symmetric, levels)
                assert "persistent" in levels and np.array_equal(got.copy_to_host(), want), (n, symmetric)
                persistent += 1
    assert tails >= 6 and persistent == tails, (tails, persistent)  # the path's, grid's and chorded path's levels
    print("bfs ok", done)

    # the device CSR check, its four-a-step loop included (300 indices, 64 threads)
    from vyre_numba.graph.csr_kernels import check
    ix = rng.integers(0, 10, 300).astype(np.int32)
    ix[[0, 7, 150, 298, 299]] = [-1, 10, 12, -5, 10]
    for ip, ix, n, want in ((np.arange(0, 301, 30), ix, 10, [0, 5, 0, 0, 10]),
                            (np.array([1, 5, 3, 300]), np.zeros(300, np.int32), 3, [1, 0, 1, 0, 2]),
                            (np.array([0, 2]), np.array([0, 0], np.int64), 1, [0, 0, 0, 0, 0])):
        for symmetric in (False, True):  # the run-by-run walk of the symmetry sums counts the same
            bad = cuda.to_device(np.zeros(7, np.int64))
            check[2, 32](cuda.to_device(ip.astype(np.int64)), cuda.to_device(ix), n, 3, symmetric, 12345, bad)
            assert list(bad.copy_to_host())[:5] == want, (list(bad.copy_to_host()), want, symmetric)
    prints = []  # the fingerprint is keyed by the secret: the same contents print alike under one, apart under two
    for secret in (12345, 12345, 99):
        bad = cuda.to_device(np.zeros(7, np.int64))
        check[2, 32](cuda.to_device(np.arange(0, 301, 30)), cuda.to_device(np.arange(300) % 10), 10, 3, True, secret,
                     bad)
        prints.append(int(bad.copy_to_host()[5]))
    assert prints[0] == prints[1] != prints[2] and prints[0] != 0, prints
    print("csr ok")

    # the simulator's arrays say what to do (a red-team: they were told to pass device arrays for both)
    from vyre_numba import graph
    from vyre_numba.errors import DispatchError
    ip, ix = np.array([0, 1, 2]), np.array([1, 0])
    for call, fix in ((lambda: graph.bfs(cuda.to_device(ip), cuda.to_device(ix), 0), "Fix: pass NumPy arrays (indptr.copy_to_host())"),
                      (lambda: graph.bfs_many(ip, ix, cuda.to_device(np.array([0]))), "(sources.copy_to_host())")):
        try:
            call()
        except DispatchError as e:
            assert fix in str(e), str(e)
        else:
            raise AssertionError("a simulator array was taken")
    print("simulator arrays ok")
''')


def test_kernels_match_the_twin_under_the_cuda_simulator():
    out = run_script(SIMULATED, 600)
    assert out.returncode == 0 and "bfs ok 16" in out.stdout and "csr ok" in out.stdout and \
        "simulator arrays ok" in out.stdout, out.stdout + out.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("name", GRAPHS)
def test_gpu_bfs_matches_scipy_for_host_and_device_arrays(name):
    backend = vn.get_backend("cuda")
    a = GRAPHS[name]
    symmetric = name in SYMMETRIC
    for source in {0, a.shape[0] // 2, a.shape[0] - 1}:
        want = expected(a, source)
        got = bfs(a.indptr, a.indices, source, backend="cuda", symmetric=symmetric)
        assert isinstance(got, np.ndarray) and np.array_equal(got, want), (name, source)
        dev = bfs(backend.upload(a.indptr.astype(np.int64)), backend.upload(a.indices.astype(np.int32)), source,
                  symmetric=symmetric)
        assert hasattr(dev, "__cuda_array_interface__") and np.array_equal(backend.download(dev), want)


@pytest.mark.gpu
def test_gpu_large_frontiers_go_bottom_up_and_agree():
    from vyre_numba.graph.bfs import _bfs_gpu

    backend = vn.get_backend("cuda")
    a = rmat(16, 1 << 19)
    source = int(np.argmax(np.diff(a.indptr)))  # the biggest hub: the frontier grows fast
    levels = []
    got = _bfs_gpu(backend, backend.upload(a.indptr.astype(np.int64)), backend.upload(a.indices.astype(np.int32)),
                   a.shape[0], source, True, levels)
    assert "bottom-up" in levels and "top-down" in levels
    assert np.array_equal(backend.download(got), expected(a, source))
    g = grid(256, 256)
    assert np.array_equal(bfs(g.indptr, g.indices, 0, backend="cuda", symmetric=True), expected(g, 0))


@pytest.mark.gpu
def test_gpu_invalid_device_csr_is_refused():
    backend = vn.get_backend("cuda")
    a = GRAPHS["path"]
    bad = backend.upload((a.indices.astype(np.int32) + 10_000))
    with pytest.raises(DispatchError, match="Fix:"):
        bfs(backend.upload(a.indptr.astype(np.int64)), bad, 0)
    with pytest.raises(DispatchError, match="source=300.*Fix:"):
        bfs(backend.upload(a.indptr.astype(np.int64)), backend.upload(a.indices.astype(np.int32)), 300)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["cooperative", "graph", "relaunch"])
def test_gpu_device_tail_agrees_in_every_fixpoint_mode(mode):
    """The long tail of a grid's levels runs on the device by the fixpoint runner; its step's
    loops leave warps diverged, which once lost the change flag of lanes other than lane 0 in the
    graph and relaunch modes (they stopped early, leaving far vertices unreached)."""
    from vyre_numba import fixpoint
    from vyre_numba.graph.bfs import _bfs_gpu

    backend = vn.get_backend("cuda")

    def each(step, count, args):
        fixpoint.for_each(step, count, args, backend=backend)

    def until(step, count, args, max_rounds):
        return fixpoint.run(step, count, args, max_rounds=max_rounds, mode=mode, backend=backend).converged

    for g in (grid(64, 64), grid(300, 7), GRAPHS["path"]):
        levels = []
        got = _bfs_gpu(backend, backend.upload(g.indptr.astype(np.int64)), backend.upload(g.indices.astype(np.int32)),
                       g.shape[0], 0, True, levels, rounds=(each, until))
        assert "persistent" in levels
        assert np.array_equal(backend.download(got), expected(g, 0))


@pytest.mark.gpu
def test_gpu_persistent_levels_report_a_barrier_timeout_and_recover(monkeypatch):
    """The barrier's arrival count made wrong on purpose: every block gives up after its bounded
    wait, BFS raises DeviceError with a Fix, and the next search is right."""
    import importlib

    from vyre_numba.errors import BarrierTimeoutError

    bfs_mod = importlib.import_module("vyre_numba.graph.bfs")
    backend = vn.get_backend("cuda")
    g = grid(64, 64)
    ip, ix = backend.upload(g.indptr.astype(np.int64)), backend.upload(g.indices.astype(np.int32))
    want = expected(g, 0)
    levels = []
    assert np.array_equal(backend.download(bfs_mod._bfs_gpu(backend, ip, ix, g.shape[0], 0, True, levels)), want)
    assert "persistent" in levels
    bfs_mod._host_words().arrived += 1
    monkeypatch.setattr(bfs_mod, "PERSISTENT_SPINS", 1000)
    with pytest.raises(BarrierTimeoutError, match="grid barrier.*Fix:"):
        bfs(ip, ix, 0, symmetric=True)
    assert np.array_equal(backend.download(bfs(ip, ix, 0, symmetric=True)), want)


@pytest.mark.gpu
def test_gpu_persistent_levels_expand_hubs_and_hand_large_frontiers_back():
    """A directed path of 12 vertices into a hub of 200,000 neighbours, each with one more: the
    hub is reached after PERSISTENT_AFTER levels, so the persistent launch expands it (a block,
    not a thread), then hands its 200,000-vertex frontier back to the host, which finishes."""
    import importlib

    bfs_mod = importlib.import_module("vyre_numba.graph.bfs")
    backend = vn.get_backend("cuda")
    fan = 200_000
    hub = 11
    n = 12 + 2 * fan
    src = np.r_[np.arange(11), np.full(fan, hub), np.arange(12, 12 + fan)]
    dst = np.r_[np.arange(1, 12), np.arange(12, 12 + fan), np.arange(12 + fan, 12 + 2 * fan)]
    a = coo(n, src, dst)
    want = expected(a, 0)
    levels = []
    got = bfs_mod._bfs_gpu(backend, backend.upload(a.indptr.astype(np.int64)), backend.upload(a.indices.astype(np.int32)),
                           n, 0, False, levels)
    assert np.array_equal(backend.download(got), want)
    assert levels.count("persistent") >= 2 and levels[-1] == "top-down", levels  # ran, then handed back


def test_a_whole_sparse_matrix_in_the_indptr_place_is_the_graph():
    """A SciPy matrix passed whole (bfs(A, 0), the natural first try) was told to go as its two
    arrays; now it is read as its CSR form, whatever its format, and so is a CSR."""
    a = sp.random(40, 40, 0.08, format="csr", random_state=1)
    want = bfs(a.indptr, a.indices, 0, backend="reference")
    for g in (a, a.tocsc(), a.tocoo(), sp.csr_array(a), graph.check_csr(a.indptr, a.indices)):
        assert np.array_equal(bfs(g, 0, backend="reference"), want)
        assert np.array_equal(bfs(g, source=0, backend="reference"), want)
        assert np.array_equal(graph.bfs_many(g, [0, 3], backend="reference")[0], want)
    assert not np.array_equal(bfs(a.tocsc().indptr, a.tocsc().indices, 0, backend="reference"), want)  # the trap
    assert np.array_equal(graph.connected_components(a.tocsc(), backend="reference"),
                          graph.connected_components(a.indptr, a.indices, backend="reference"))


def test_the_symmetric_fix_keeps_explicit_zeros_as_edges():
    import scipy.sparse as sp

    a = sp.csr_array((np.array([0.0, 1.0]), np.array([1, 2]), np.array([0, 2, 2, 2])), shape=(3, 3))
    with pytest.raises(DispatchError, match=r"P = A.copy\(\); P.data\[:\] = 1; pass P \+ P.T"):
        graph.bfs(a, 0, symmetric=True, backend="reference")
    p = a.copy()
    p.data[:] = 1
    assert graph.bfs(p + p.T, 0, symmetric=True, backend="reference").tolist() == \
        graph.bfs(a, 0, backend="reference").tolist() == [0, 1, 1]


def test_device_csr_arrays_without_a_gpu_are_told_to_come_to_the_host():
    interface = {"shape": (3,), "typestr": "<i4", "data": (0, False), "version": 3}
    device = type("DeviceArray", (), {"__cuda_array_interface__": interface})
    with pytest.raises(DispatchError, match=r"was chosen. Fix: pass backend='cuda' \(or None\), or host arrays"):
        graph.bfs(device(), device(), 0, backend="reference")
    if vn.get_backend().name != "cuda":  # None chose the CPU: the Fix cannot be to pass None
        with pytest.raises(DispatchError, match=r"is what None chose.*Fix: copy the arrays to the host"):
            graph.bfs(device(), device(), 0)
