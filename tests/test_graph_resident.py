"""`graph.Graph`: a graph checked once and kept on its backend gives what the module calls give on
its arrays, keeps its own copy, refuses what it cannot take with a Fix, and releases its copy."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import vyre_numba as vn
from vyre_numba.errors import ArgumentError, DispatchError, ImmutableError
from vyre_numba.graph import Graph, bfs, bfs_many, connected_components, reachable_many

from simulated import run_script
from test_graph_bfs import GRAPHS, SYMMETRIC, expected, rmat

SMALL = {name: a for name, a in GRAPHS.items() if name != "large star"}


def sources_of(a):
    n = a.shape[0]
    return sorted({0, n // 2, n - 1})


def components(a):
    _, labels = sp.csgraph.connected_components(a, directed=True, connection="weak")
    first = np.full(labels.max() + 1, a.shape[0])
    np.minimum.at(first, labels, np.arange(a.shape[0]))
    return first[labels].astype(np.int32)


def check_queries(g, a, to_host=lambda x: x):
    """Every query of `g` against SciPy and the module calls on the arrays of `a`."""
    ss = sources_of(a)
    for s in ss:
        got = to_host(g.bfs(s))
        assert got.dtype == np.int32 and np.array_equal(got, expected(a, s)), s
        assert np.array_equal(to_host(bfs(g, s)), got)
    many = to_host(g.bfs_many(ss))
    assert many.shape == (len(ss), a.shape[0])
    assert np.array_equal(many, np.stack([expected(a, s) for s in ss]))
    assert np.array_equal(to_host(reachable_many(g, ss)), many >= 0)
    assert np.array_equal(to_host(g.connected_components()), components(a))
    assert np.array_equal(to_host(connected_components(g)), components(a))


@pytest.mark.parametrize("name", SMALL)
def test_reference_graph_answers_as_the_calls_on_its_arrays(name):
    a = SMALL[name]
    for symmetric in ({False, True} if name in SYMMETRIC else {False}):
        with Graph(a, symmetric=symmetric, backend="reference") as g:
            assert (g.n, g.nnz, g.symmetric, g.backend) == (a.shape[0], a.nnz, symmetric, "reference")
            check_queries(g, a)
            assert np.array_equal(g.to_csr().indices, a.indices) and np.array_equal(g.to_csr().indptr, a.indptr)


def test_the_graph_keeps_its_own_copy_of_host_arrays():
    a = GRAPHS["path"]
    indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int64)
    g = Graph(indptr, indices, symmetric=True, backend="reference")
    before = g.bfs(0)
    indices[:] = 0  # the caller's arrays change; the graph's do not
    assert np.array_equal(g.bfs(0), before) and np.array_equal(before, expected(a, 0))
    with pytest.raises(ValueError):  # NumPy's own refusal of a write to a read-only array
        g._host.indices[0] = 1
    out = g.to_csr()
    out.indices[0] = 7  # a copy: the graph is unchanged
    assert np.array_equal(g.bfs(0), before)


def test_the_caller_s_arrays_are_checked_as_copied(monkeypatch):
    """Regression (a red-team): the arrays were checked in place and copied after, so a change
    between the two (another thread writing them) reached the graph unchecked."""
    import vyre_numba.graph.resident as resident

    indptr, indices = np.arange(6), np.array([1, 2, 3, 4, 0])
    kept = resident._kept

    def meanwhile(a, owned):
        indices[0] = -4  # the caller's array changes once the graph's copy has been checked
        return kept(a, owned)
    monkeypatch.setattr(resident, "_kept", meanwhile)
    g = Graph(indptr, indices, backend="reference")
    assert g.to_csr().indices.tolist() == [1, 2, 3, 4, 0] and g.bfs(0).tolist() == [0, 1, 2, 3, 4]


def test_an_array_like_handing_out_its_own_memory_is_neither_made_read_only_nor_shared():
    """Regression (a red-team): an object whose __array__ hands out its own buffer (as xarray's and
    pint's do) was kept without a copy, made read-only under its owner, and changes to it reached
    the graph."""

    class Wrapped:
        def __init__(self, a):
            self.data = a

        def __array__(self, dtype=None, copy=None):
            return self.data

    indptr, indices = np.array([0, 1, 2, 2], np.int64), np.array([1, 2], np.int64)
    g = Graph(Wrapped(indptr), Wrapped(indices), backend="reference")
    assert indptr.flags.writeable and indices.flags.writeable
    indices[0] = 0  # the caller's own array, still theirs
    assert g.bfs(0).tolist() == [0, 1, 2] and g.to_csr().indices.tolist() == [1, 2]
    # Regression (a review): a pandas Index's copy() is shallow, so its memory was shared and made read-only
    pd = pytest.importorskip("pandas")
    ip, ix = pd.Index(np.array([0, 1, 2, 2])), pd.Index(np.array([1, 2]))
    g = Graph(ip, ix, backend="reference")
    assert np.asarray(ix).flags.writeable and not np.shares_memory(g._host.indices, np.asarray(ix))
    for ip, ix in ((pd.array([0, 1, 2, 2]), pd.array([1, 2])), ((0, 1, 2, 2), range(1, 3))):  # no `deep`; sequences
        assert Graph(ip, ix, backend="reference").bfs(0).tolist() == [0, 1, 2]


def test_sources_are_copied_before_they_are_checked():
    from vyre_numba.graph.multisource import many_sources

    s = np.array([1, 2], np.int64)
    out = many_sources(s, 5)
    assert out.tolist() == [1, 2] and not np.shares_memory(out, s)


@pytest.mark.parametrize("graph,fragment", [
    (lambda: (np.array([0, 2, 1, 2]), np.array([0, 1])), "decreases"),
    (lambda: (np.array([0, 1, 2]), np.array([0, 5])), "not a vertex"),
    (lambda: (np.array([1, 2]), np.array([0, 0])), "must run from 0"),
    (lambda: (np.zeros((2, 2), np.int64), None), "dense adjacency"),
    (lambda: (np.array([0, 1, 1]), None), "missing indices"),
    (lambda: (np.array([0.5, 1.0]), np.array([0])), "not a whole number"),
])
def test_an_invalid_csr_is_refused_when_the_graph_is_made(graph, fragment):
    indptr, indices = graph()
    with pytest.raises((DispatchError, ArgumentError), match=f"{fragment}.*Fix:"):
        Graph(indptr, indices, backend="reference")


def test_symmetric_is_checked_when_the_graph_is_made():
    a = GRAPHS["directed path"]
    with pytest.raises(DispatchError, match="Fix:"):
        Graph(a, symmetric=True, backend="reference")
    with pytest.raises(DispatchError, match="symmetric='yes' is not a bool.*Fix:"):
        Graph(a, symmetric="yes", backend="reference")


@pytest.mark.parametrize("call,error,fragment", [
    (lambda g: bfs(g, 1, 2), ArgumentError, r"a Graph and arrays too. Fix: .*bfs\(g, source\)"),
    (lambda g: bfs(g), ArgumentError, r"missing source. Fix:"),
    (lambda g: bfs_many(g, None, None), ArgumentError, r"missing sources. Fix:"),
    (lambda g: connected_components(g, np.array([0])), ArgumentError, r"a Graph and arrays too. Fix:"),
    (lambda g: bfs(g, 1, symmetric=True), DispatchError, r"made without it.*Fix: .*symmetric=True"),
    (lambda g: bfs(g, 1, symmetric=1.5), DispatchError, r"not a bool.*Fix:"),
    (lambda g: g.bfs(300), DispatchError, r"source=300 is not a vertex.*Fix:"),
    (lambda g: g.bfs_many([0, -1]), DispatchError, r"sources\[1\] = -1 is not a vertex.*Fix:"),
    (lambda g: g.bfs([1, 2]), DispatchError, r"not one vertex. Fix:"),
    (lambda g: g.bfs(), ArgumentError, r"Fix:"),
    (lambda g: g.bfs(1, backend="cuda"), ArgumentError, r"Fix:"),
    (lambda g: vn.graph.check_csr(g), DispatchError, r"not a Graph. Fix: pass g.to_csr\(\)"),
    (lambda g: vn.graph.bfs_numpy(g, 0), DispatchError, r"not a Graph. Fix: pass g.to_csr\(\)"),
    (lambda g: bfs(np.array([0, 1]), g, 0), DispatchError, r"not a Graph. Fix:"),
    (lambda g: copy.copy(g), DispatchError, r"cannot be copied.*Fix:"),
    (lambda g: pickle.dumps(g), DispatchError, r"cannot be copied.*Fix:"),
])
def test_a_bad_call_on_a_graph_is_refused_with_a_fix(call, error, fragment):
    g = Graph(GRAPHS["path"], backend="reference")
    with pytest.raises(error, match=fragment):
        call(g)


def test_a_graph_on_one_backend_refuses_another():
    g = Graph(GRAPHS["path"], backend="reference")
    with pytest.raises(vn.VyreError, match="Fix:"):
        bfs(g, 0, backend="cuda")
    assert np.array_equal(bfs(g, 0, backend="reference"), expected(GRAPHS["path"], 0))


def test_a_closed_graph_refuses_every_query_and_closes_once():
    g = Graph(GRAPHS["star"], backend="reference")
    g.close()
    g.close()
    assert g.closed and repr(g) == "Graph(closed)" and g.backend == "reference" and g.n == 200
    for call in (lambda: g.bfs(0), lambda: g.bfs_many([0]), lambda: g.reachable_many([0]), lambda: bfs(g, 0),
                 lambda: g.connected_components(), lambda: connected_components(g), lambda: g.to_csr()):
        with pytest.raises(DispatchError, match="was closed. Fix: make a new one"):
            call()


def test_properties_are_read_only_and_the_repr_says_what_it_holds():
    g = Graph(GRAPHS["star"], symmetric=True, backend="reference")
    assert repr(g) == "Graph(n=200, nnz=398, symmetric=True, backend='reference', results=NumPy)"
    for name in ("n", "nnz", "symmetric", "backend", "closed"):
        with pytest.raises(ImmutableError, match=r"Fix: make a new Graph .*close\(\) releases one"):
            setattr(g, name, 1)


def test_the_empty_and_one_vertex_graphs():
    empty = Graph(np.zeros(1, np.int64), np.zeros(0, np.int64), backend="reference")
    assert empty.n == 0 and empty.connected_components().shape == (0,)
    assert empty.bfs_many([]).shape == (0, 0)
    with pytest.raises(DispatchError, match="no vertices.*Fix:"):
        empty.bfs(0)
    one = Graph(np.array([0, 0]), np.zeros(0, np.int64), symmetric=True, backend="reference")
    assert one.bfs(0).tolist() == [0] and one.connected_components().tolist() == [0]


SIMULATED = """
import numpy as np
from numba import cuda
from vyre_numba.graph.csr_kernels import copy_into

for n in (0, 1, 255, 256, 1000):
    src = np.arange(2 * n, dtype=np.int64) * 3 - 7
    d = cuda.to_device(src)
    for step in (1, 2):
        view = d[::step][:n]
        out = cuda.to_device(np.full(n, -99, np.int32))
        if n:
            copy_into[3, 64](out, view)
        assert np.array_equal(out.copy_to_host(), src[::step][:n].astype(np.int32)), (n, step)
# values read as int64, as the CSR check reads them; one int32 cannot hold is -1 in an int32 copy
# (out of range, as it was), never wrapped onto a vertex id
big = np.array([2**32 + 1, 2**31, 2**31 - 1, -1, -2**31, -2**31 - 1, -2**40, 5], np.int64)
wanted = np.array([-1, -1, 2**31 - 1, -1, -2**31, -1, -1, 5], np.int32)
for src in (big, big.astype(np.uint64)):  # a uint64 past 2**63 reads as the negative int64 of its bits
    out = cuda.to_device(np.zeros(big.size, np.int32))
    copy_into[1, 32](out, cuda.to_device(src))
    assert np.array_equal(out.copy_to_host(), wanted), (src.dtype, out.copy_to_host())
    wide = cuda.to_device(np.zeros(big.size, np.int64))
    copy_into[1, 32](wide, cuda.to_device(src))
    assert np.array_equal(wide.copy_to_host(), big), (src.dtype, wide.copy_to_host())
small = np.array([2**32 - 1, 2**31, 7], np.uint32)  # uint32 into int32: past 2**31 - 1 is -1
out = cuda.to_device(np.zeros(3, np.int32))
copy_into[1, 32](out, cuda.to_device(small))
assert np.array_equal(out.copy_to_host(), [-1, -1, 7]), out.copy_to_host()
print("copy ok")
"""


def test_the_copy_kernel_under_the_cuda_simulator():
    out = run_script(SIMULATED, 300)
    assert out.returncode == 0 and "copy ok" in out.stdout, out.stdout + out.stderr


# --- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", GRAPHS)
def test_gpu_graph_of_host_and_device_arrays_answers_as_scipy(name):
    be = vn.get_backend("cuda")
    a = GRAPHS[name]
    for symmetric in ({False, True} if name in SYMMETRIC else {False}):
        g = Graph(a, symmetric=symmetric)
        assert g.backend == "cuda" and "results=NumPy" in repr(g)
        check_queries(g, a)
        for ip_type, ix_type in ((np.int64, np.int32), (np.int32, np.int64)):
            d = Graph(be.upload(a.indptr.astype(ip_type)), be.upload(a.indices.astype(ix_type)), symmetric=symmetric)
            assert hasattr(d.bfs(0), "__cuda_array_interface__")
            check_queries(d, a, lambda x: be.download(x).reshape(x.shape))
            assert np.array_equal(d.to_csr().indices, a.indices)
            d.close()


@pytest.mark.gpu
def test_gpu_graph_keeps_its_own_copy_of_device_arrays_of_any_stride():
    from numba import cuda

    be = vn.get_backend("cuda")
    a = rmat(12, 40_000)
    ix = be.upload(np.repeat(a.indices.astype(np.int64), 2))  # every second entry: a strided view
    ip = be.upload(a.indptr.astype(np.int64))
    g = Graph(ip, ix[::2], symmetric=True)
    want = expected(a, 5)
    assert np.array_equal(be.download(g.bfs(5)), want)
    cuda.to_device(np.zeros(ix.shape[0], np.int64), to=ix)  # the caller's array changes; the graph's does not
    be.synchronize()
    assert np.array_equal(be.download(g.bfs(5)), want)
    with pytest.raises(DispatchError, match="Fix:"):  # the module call checks the changed arrays, as always
        bfs(ip, ix[::2], 5, symmetric=True)


@pytest.mark.gpu
def test_gpu_graph_refuses_an_invalid_device_csr_when_made():
    be = vn.get_backend("cuda")
    a = GRAPHS["path"]
    with pytest.raises(DispatchError, match="not vertices of this 300-vertex graph.*Fix:"):
        Graph(be.upload(a.indptr.astype(np.int64)), be.upload(a.indices.astype(np.int64) + (1 << 32)))
    with pytest.raises(DispatchError, match="Fix:"):
        Graph(be.upload(GRAPHS["directed path"].indptr.astype(np.int64)),
              be.upload(GRAPHS["directed path"].indices.astype(np.int32)), symmetric=True)


@pytest.mark.gpu
def test_gpu_graph_on_a_large_rmat_agrees_with_the_calls_on_its_arrays():
    be = vn.get_backend("cuda")
    a = rmat(16, 1 << 19)
    ip, ix = be.upload(a.indptr.astype(np.int64)), be.upload(a.indices.astype(np.int32))
    with Graph(ip, ix, symmetric=True) as g:
        ss = [0, 1, int(np.argmax(np.diff(a.indptr)))]
        for s in ss:
            assert np.array_equal(be.download(g.bfs(s)), be.download(bfs(ip, ix, s, symmetric=True)))
        assert np.array_equal(be.download(g.bfs_many(ss)), be.download(bfs_many(ip, ix, ss, symmetric=True)))
        assert np.array_equal(be.download(g.connected_components()),
                              be.download(connected_components(ip, ix, symmetric=True)))
    assert g.closed
