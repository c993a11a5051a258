"""Many BFS queries at once (`graph.bfs_many`, `graph.reachable_many`) against one SciPy BFS per
source on the graphs of the BFS tests, the kernels under the CUDA simulator, and bad calls."""
from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest
from scipy.sparse.csgraph import shortest_path

import vyre_numba as vn
from vyre_numba.errors import ArgumentError, DispatchError
from vyre_numba.graph import bfs_many, reachable_many

from simulated import run_script
from test_graph_bfs import GRAPHS, SYMMETRIC


def expected(a, sources) -> np.ndarray:
    d = shortest_path(a, unweighted=True, directed=True, indices=np.asarray(sources))
    d = np.atleast_2d(d)
    return np.where(np.isinf(d), -1, d).astype(np.int32)


def some_sources(n: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([[0, n - 1, 0], rng.integers(0, n, max(k - 3, 0))])[:k]  # a repeated source too


@pytest.mark.parametrize("name", GRAPHS)
def test_reference_matches_one_scipy_bfs_per_source(name):
    a = GRAPHS[name]
    for k in (1, 3, 64, 65, 130):
        src = some_sources(a.shape[0], k, seed=k)
        got = bfs_many(a.indptr, a.indices, src, backend="reference")
        assert got.shape == (k, a.shape[0]) and got.dtype == np.int32
        assert np.array_equal(got, expected(a, src)), (name, k)
        assert np.array_equal(reachable_many(a.indptr, a.indices, src, backend="reference"), got >= 0)


@pytest.mark.parametrize("name", ["path", "rmat"])
def test_reference_expands_small_levels_in_python_and_large_ones_in_numpy_alike(name, monkeypatch):
    """A path's levels are small (the Python loop's), an R-MAT graph's mostly large (NumPy's): each
    way matches SciPy, and with the loop turned off NumPy gives the same distances."""
    from vyre_numba.graph import multisource

    a = GRAPHS[name]
    src = some_sources(a.shape[0], 5)
    small = multisource._small_level
    taken = []

    def counted(*args):
        out = small(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(multisource, "_small_level", counted)
    got = bfs_many(a.indptr, a.indices, src, backend="reference")
    assert np.array_equal(got, expected(a, src))
    assert any(taken) and (name == "path") == all(taken), taken
    monkeypatch.setattr(multisource, "_small_level", lambda *args: None)
    assert np.array_equal(bfs_many(a.indptr, a.indices, src, backend="reference"), got)


def test_no_sources_give_an_empty_result():
    a = GRAPHS["grid"]
    got = bfs_many(a.indptr, a.indices, [], backend="reference")
    assert got.shape == (0, a.shape[0]) and got.dtype == np.int32


@pytest.mark.parametrize("sources, fix", [
    ([5000], "0..499"), ([-1], "0..499"), ([1.5], "integer"), ([[1, 2], [3]], "flat list"), ([True], "integer"),
    ("0", "integer"), ([[0, 1]], "1-D"), (np.ma.array([0, 1], mask=[0, 1]), "masked"),
    (np.array([], np.float64), "integer"),
    # no array at all: the Fix is about sources, not a SciPy matrix's CSR (a red-team)
    ({0}, "Fix: pass the source vertices as an int, a list"),
    ((s for s in [0]), "Fix: pass the source vertices as an int, a list"),
])
def test_bad_sources_say_how_to_fix_them(sources, fix):
    a = GRAPHS["random directed"]
    with pytest.raises(DispatchError) as e:
        bfs_many(a.indptr, a.indices, sources, backend="reference")
    assert fix in str(e.value) and "Fix:" in str(e.value)


SIMULATED = textwrap.dedent('''
    import itertools
    import numpy as np
    from numba import cuda
    from vyre_numba.graph import bfs_many_numpy, check_csr
    from vyre_numba.graph import multisource
    from vyre_numba.graph.multisource import _bfs_many_gpu
    from simulated import SimBackend as Backend, csr

    def edge_cases(*degrees):
        """(n, sources, targets): hubs of these out-degrees, each reached from a leaf of the one before."""
        s, d, hub = [], [], 0
        for i, k in enumerate(degrees):
            s += [hub] * k
            d += list(range(hub + 1, hub + 1 + k))
            if i:
                s.append(hub - 1)  # the last leaf of the hub before
                d.append(hub)
            hub += k + 1
        return hub, s, d

    rng = np.random.default_rng(3)
    cases = [(1, [], []), (12, range(11), range(1, 12)), (40, rng.integers(0, 40, 70), rng.integers(0, 40, 70)),
             (70, [0] * 69, range(1, 70)),  # a hub wider than a warp
             (110, [0] * 69 + [70] * 39 + [0], list(range(1, 70)) + list(range(71, 110)) + [70]),  # two, 69 and 40 wide
             edge_cases(32, 33, 48, 49)]  # stored out-degrees either side of the thread / warp / piece limits at 48
    done = pulls = kept = 0
    rounds = [(1024, cases), (16, cases[-2:]), (48, cases[-2:])]  # hubs a warp's each; in pieces; one of each
    for piece, graphs in rounds:
        multisource.PIECE = piece
        for (n, s, d), symmetric in itertools.product(graphs, (False, True)):
            indptr, indices = csr(n, list(s), list(d), symmetric)
            sources = np.concatenate([[0, n - 1, 0], rng.integers(0, n, 67)])  # two batches, a repeat
            want = bfs_many_numpy(check_csr(indptr, indices), sources)
            levels = []
            got = _bfs_many_gpu(Backend(), cuda.to_device(indptr), cuda.to_device(indices), n, sources, symmetric,
                                levels)
            assert np.array_equal(got.copy_to_host(), want), (n, symmetric, piece)
            done += 1
            pulls += "bottom-up" in levels
            if piece == 16:  # a split found once and passed in, as a Graph keeps it, serves later calls
                be, dip, dix = Backend(), cuda.to_device(indptr), cuda.to_device(indices)
                split = multisource._by_degree(be, dip, n, indices.size)
                assert split.pieces is not None and split.own == 16, split
                for again in (sources, sources[::-1][:5]):
                    got = _bfs_many_gpu(be, dip, dix, n, again, symmetric, split=split)
                    assert np.array_equal(got.copy_to_host(), bfs_many_numpy(check_csr(indptr, indices), again))
                kept += 1
    assert pulls >= 4 and kept == 4, (pulls, kept)
    print("multisource ok", done)
''')


def test_kernels_match_the_twin_under_the_cuda_simulator():
    out = run_script(SIMULATED, 900)
    assert out.returncode == 0 and "multisource ok 20" in out.stdout, out.stdout + out.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("name", GRAPHS)
def test_gpu_matches_scipy_for_host_and_device_arrays(name):
    be = vn.get_backend("cuda")
    a = GRAPHS[name]
    symmetric = name in SYMMETRIC
    for k in (1, 64, 130):
        src = some_sources(a.shape[0], k, seed=k)
        want = expected(a, src)
        got = bfs_many(a.indptr, a.indices, src, backend="cuda", symmetric=symmetric)
        assert isinstance(got, np.ndarray) and np.array_equal(got, want), (name, k)
        ip, ix = be.upload(a.indptr.astype(np.int64)), be.upload(a.indices.astype(np.int32))
        dev = bfs_many(ip, ix, src, symmetric=symmetric)
        assert dev.shape == (k, a.shape[0]) and np.array_equal(be.download(dev).reshape(want.shape), want)
        reach = reachable_many(ip, ix, src, symmetric=symmetric)
        assert reach.shape == want.shape and np.array_equal(be.download(reach).reshape(want.shape), want >= 0)


@pytest.mark.gpu
@pytest.mark.parametrize("piece", [1024, 64, 8])
def test_gpu_large_graph_goes_bottom_up_and_equals_single_bfs(piece, monkeypatch):
    from vyre_numba.graph import bfs, multisource
    from vyre_numba.graph.generators import rmat
    from vyre_numba.graph.multisource import _bfs_many_gpu

    monkeypatch.setattr(multisource, "PIECE", piece)  # 64: warps and pieces both; 8: most vertices in pieces
    be = vn.get_backend("cuda")
    ip, ix = rmat(16, 1 << 19, seed=4)
    src = some_sources(ip.size - 1, 100, seed=9)
    dip, dix = be.upload(ip), be.upload(ix.astype(np.int32))
    levels = []
    got = be.download(_bfs_many_gpu(be, dip, dix, ip.size - 1, src.astype(np.int64), True, levels))
    got = got.reshape(src.size, ip.size - 1)
    assert "bottom-up" in levels and "top-down" in levels
    for i, s in enumerate(src[:12]):
        assert np.array_equal(got[i], be.download(bfs(dip, dix, int(s), symmetric=True))), i


def test_running_out_of_host_memory_says_to_pass_fewer_sources(monkeypatch):
    """Regression (a red-team): the HostMemoryError said to renumber ids densely, where the result's
    size is sources x vertices."""
    from vyre_numba.errors import HostMemoryError
    from vyre_numba.graph import multisource

    def no_room(*args, **kwargs):
        raise MemoryError("Unable to allocate 16.0 GiB")

    monkeypatch.setattr(multisource, "_bfs_many_numpy", no_room)
    a = GRAPHS["random directed"]
    for call in (bfs_many, reachable_many):
        with pytest.raises(HostMemoryError, match="one int32 distance per source and vertex. Fix: pass fewer sources"):
            call(a.indptr, a.indices, [0, 1], backend="reference")


def test_sources_on_an_empty_graph_and_results_too_large_say_so():
    with pytest.raises(DispatchError, match="no vertices.*Fix:"):
        bfs_many(np.zeros(1, np.int64), np.zeros(0, np.int32), [0], backend="reference")
    assert bfs_many(np.zeros(1, np.int64), np.zeros(0, np.int32), [], backend="reference").shape == (0, 0)
    with pytest.raises(DispatchError, match="GiB.*Fix: pass fewer sources"):
        bfs_many(np.zeros(2**20 + 1, np.int64), np.zeros(0, np.int32), np.zeros(2**14, np.int64), backend="reference")


def test_a_source_out_of_range_is_told_as_given_and_where():
    """Regression (a red-team): sources were made int64 before their check, so a uint64 2**64 - 1
    was told as "source -1" and 2**63 as a negative number."""
    ip, ix = np.array([0, 1, 2, 3, 3]), np.array([1, 2, 3])
    for sources, said in ((np.array([0, 2**64 - 1], np.uint64), "sources[1] = 18446744073709551615"),
                          (np.array([1, 2**63], np.uint64), "sources[1] = 9223372036854775808"),
                          ([3, -2, 0], "sources[1] = -2"),
                          (np.array([7], np.uint8), "sources[0] = 7")):
        with pytest.raises(DispatchError, match=re.escape(said) + r" is not a vertex of this 4-vertex graph\. Fix: "
                                                                  r"pass sources in 0\.\.3\."):
            bfs_many(ip, ix, sources, backend="reference")


@pytest.mark.parametrize("call", ["bfs", "bfs_many", "connected_components"])
def test_a_graph_in_a_form_no_call_takes_is_named_not_told_missing_its_source(call):
    """Regression (a red-team): bfs(G, 0) of a networkx graph, an edge list, an adjacency dict or
    list of lists, or a DataFrame said "missing source. Fix: pass it after the graph", which it was."""
    import vyre_numba.graph as graph

    nx = pytest.importorskip("networkx")
    forms = [(nx.path_graph(4), "a networkx Graph"), (np.array([[0, 1], [1, 2], [2, 3]]), "an ndarray"),
             ({0: [1], 1: [2], 2: []}, "a dict"), ([[1], [2], []], "a list")]
    then = {"bfs": (0,), "bfs_many": ([0, 1],), "connected_components": ()}[call]
    for g, kind in forms:
        with pytest.raises(DispatchError, match=rf"{call}\(\): the graph is {kind}, a form {call}\(\) does not take\. "
                                                r"Fix: pass it as a SciPy sparse matrix.*nx\.to_scipy_sparse_array"):
            getattr(graph, call)(g, *then, backend="reference")
    # the Fix's networkx conversion, followed, gives networkx's answer where nodes were added out of order
    # (without nodelist, row i is the i-th node added: distances came out under the wrong vertices, a red-team)
    G = nx.Graph([(3, 1), (1, 0), (0, 2), (4, 5)])
    with pytest.raises(DispatchError, match=r"nodelist=range\(len\(G\)\)") as e:
        getattr(graph, call)(G, *then, backend="reference")
    fix = str(e.value).split("Fix: ")[1]
    A = eval(fix[fix.index("A = ") + 4:fix.index(", since")], {"nx": nx, "G": G})
    got = getattr(graph, call)(A, *then, backend="reference")
    if call == "bfs":
        d = nx.single_source_shortest_path_length(G, 0)
        assert got.tolist() == [d.get(v, -1) for v in range(len(G))] == [0, 1, 1, 2, -1, -1]
    elif call == "connected_components":
        assert got.tolist() == [min(c) for v in range(len(G)) for c in nx.connected_components(G) if v in c]
    ip, ix = np.array([0, 1, 2, 3, 3]), np.array([1, 2, 3])
    if call != "connected_components":  # offsets and their indices given, the source not: missing, as before
        with pytest.raises(ArgumentError, match=f"{call}\\(\\) is missing source"):
            getattr(graph, call)(ip, ix, backend="reference")
