"""graph.generators and egraph.workload: the synthetic inputs the demo, notebooks and benchmarks
share, checked against independent constructions (SciPy's CSR, the shared workload file)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from vyre_numba.errors import VyreError
from vyre_numba.egraph.workload import arithmetic
from vyre_numba.graph.generators import from_edges, grid, rmat


def scipy_csr(n, src, dst):
    a = sp.coo_matrix((np.ones(2 * len(src), np.int8), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n)).tocsr()
    a.sort_indices()
    return a


@pytest.mark.parametrize("n,src,dst", [(3, [0, 0, 2], [1, 1, 2]), (1, [], []), (5, [4, 3, 0], [0, 3, 4])])
def test_from_edges_is_scipys_csr_of_the_symmetric_graph(n, src, dst):
    ip, ix = from_edges(n, np.array(src, np.int64), np.array(dst, np.int64))
    a = scipy_csr(n, src, dst)
    assert ip.dtype == np.int64 and ix.dtype == np.int32
    assert np.array_equal(ip, a.indptr) and np.array_equal(ix, a.indices)


@pytest.mark.parametrize("scale,edges", [(0, 0), (0, 5), (4, 100), (10, 5000)])
def test_rmat_is_symmetric_sorted_and_seeded(scale, edges):
    ip, ix = rmat(scale, edges, seed=3)
    a = sp.csr_matrix((np.ones(ix.size), ix, ip), shape=(1 << scale,) * 2)
    assert (a != a.T).nnz == 0
    assert all(np.all(np.diff(ix[ip[v]:ip[v + 1]]) > 0) for v in range(ip.size - 1))
    again = rmat(scale, edges, seed=3)
    assert np.array_equal(ip, again[0]) and np.array_equal(ix, again[1])


def test_grid_has_the_expected_edges_and_keep_removes_some():
    ip, ix = grid(4, 3)
    assert ip.size == 13 and ix.size == 2 * (3 * 3 + 4 * 2)
    assert set(ix[ip[5]:ip[6]].tolist()) == {1, 4, 6, 9}
    ip2, ix2 = grid(64, 64, keep=0.5, seed=1)
    full = 2 * (63 * 64 * 2)
    assert 0.4 * full < ix2.size < 0.6 * full
    assert grid(0, 0)[0].tolist() == [0] and grid(1, 1)[1].size == 0


@pytest.mark.parametrize("call", [
    lambda: rmat(-1, 10), lambda: rmat(31, 10), lambda: rmat(4, -1), lambda: grid(-1, 3), lambda: grid(3, 3, keep=1.5),
    lambda: rmat(3.5, 10), lambda: rmat("3", 10), lambda: rmat(True, 4), lambda: rmat(3, 10.0),
    lambda: rmat(np.timedelta64(3), 10), lambda: rmat(3, 10, seed="x"), lambda: rmat(3, 10, seed=-1),
    lambda: grid(np.timedelta64(3), 3), lambda: grid(3, True), lambda: grid(3, 3, keep="x"),
    lambda: grid(3, 3, keep=float("nan")), lambda: grid(3, 3, seed=1.5),
    lambda: from_edges(-1, [], []), lambda: from_edges(2.0, [0], [1]), lambda: from_edges(2, [0, 1], [1]),
    lambda: from_edges(2, [0], [2]), lambda: from_edges(2, [-1], [0]), lambda: from_edges(2, [0.0], [1.0]),
    lambda: from_edges(2, [[0]], [[1]])])
def test_bad_sizes_raise_with_a_fix(call):
    with pytest.raises(VyreError, match="Fix:"):
        call()


def test_numpy_integers_and_empty_edge_lists_are_taken():
    assert np.array_equal(rmat(np.int64(4), np.uint32(50), seed=np.int32(2))[1], rmat(4, 50, seed=2)[1])
    assert np.array_equal(grid(np.int16(3), 2, keep=np.float32(0.5), seed=np.uint8(1))[1], grid(3, 2, keep=0.5, seed=1)[1])
    from fractions import Fraction  # a probability as a Fraction is one (it was refused as "not a number")

    assert np.array_equal(grid(8, 8, keep=Fraction(1, 2), seed=3)[1], grid(8, 8, keep=0.5, seed=3)[1])
    assert from_edges(3, [], [])[0].tolist() == [0, 0, 0, 0]
    # sizes in narrow NumPy types: width * height and 1 << scale are computed past their range
    assert np.array_equal(grid(np.uint8(16), np.uint8(16))[1], grid(16, 16)[1])
    assert np.array_equal(grid(np.int16(200), np.int16(200))[0], grid(200, 200)[0])
    assert np.array_equal(rmat(np.uint8(10), 100, seed=1)[0], rmat(10, 100, seed=1)[0])
    assert np.array_equal(rmat(np.int8(7), 100, seed=1)[0], rmat(7, 100, seed=1)[0])


@pytest.mark.parametrize("n", [0, 8, 64, 1000, 1 << 14])
def test_the_workload_is_the_shared_benchmarks(n):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from egraph_workload import generate

    w = generate(n)
    (eclass, op, off, ch), unions = arithmetic(n)
    assert np.array_equal(eclass, np.arange(n)) and off.size == n + 1 and off[-1] == ch.size
    assert np.array_equal(np.where(w["op"] >= 0, w["op"], 6 + np.arange(n)), op)
    kids = [[c for c in (a, b) if c >= 0] for a, b in zip(w["a"], w["b"])]
    assert [ch[off[k]:off[k + 1]].tolist() for k in range(n)] == kids
    assert np.array_equal(unions, np.stack([w["ua"], w["ub"]], 1))


@pytest.mark.parametrize("call", [
    lambda: from_edges(3, [[0], [1, 2]], [1, 2]),  # ragged: NumPy's ValueError
    lambda: from_edges(3, [True, 0], [1, 2]),  # True read as vertex 1
    lambda: from_edges(3, np.ma.array([0, 1], mask=[0, 1]), [1, 2]),  # the mask dropped: edge 1 -- 2 made
    lambda: from_edges(3, [0, 2**64 - 1], [1, 2]),  # NumPy reads these as float64
    lambda: grid(2**31 - 1, 2**31 - 1),  # NumPy's "array is too big"
    lambda: grid(2**16, 2**15),  # 2**31 vertices: past 32-bit ids, refused before anything is allocated
    lambda: rmat(3, 2**62)])
def test_odd_edge_lists_and_sizes_past_memory_raise_with_a_fix(call):
    with pytest.raises(VyreError, match="Fix:"):
        call()


def test_generators_name_their_parameters_for_a_misspelt_keyword():
    from vyre_numba.errors import ArgumentError

    with pytest.raises(ArgumentError, match="did you mean `keep`"):
        grid(3, 3, kep=0.5)
    with pytest.raises(ArgumentError, match="did you mean `seed`"):
        rmat(3, 10, sed=1)
    with pytest.raises(ArgumentError, match="did you mean `seed`"):
        arithmetic(8, sed=1)


def test_a_sparse_matrix_given_as_edge_ends_is_told_to_pass_its_rows_and_columns():
    """Regression (a review): from_edges was told to call check_csr(A.indptr, A.indices), another
    function that builds no graph from edges."""
    A = sp.coo_matrix(np.array([[0, 1], [1, 0]]))
    with pytest.raises(VyreError, match=r"src is a coo_matrix .*Fix: pass its edges' ends: A = A\.tocoo\(\), "
                                            r"then from_edges\(A\.shape\[0\], A\.row, A\.col\)"):
        from_edges(2, A, A)
    A = A.tocoo()
    indptr, indices = from_edges(A.shape[0], A.row, A.col)  # what the Fix says
    assert indptr.tolist() == [0, 1, 2] and indices.tolist() == [1, 0]


def test_edges_that_are_no_arrays_are_refused_in_from_edges_terms():
    """Regression (a red-team): from_edges(3, None, None) was told to call check_csr on a SciPy matrix."""
    with pytest.raises(VyreError, match=r"^src is a NoneType, not an array of integers\. Fix: pass the edges' ends as "
                                        r"a list or 1-D array of ints: from_edges\(n, src, dst\)"):
        from_edges(3, None, None)


@pytest.mark.parametrize("call,name", [(lambda: rmat(4, 8), "rmat"), (lambda: grid(4, 4), "grid"),
                                       (lambda: from_edges(3, [0, 1], [1, 2]), "from_edges")])
def test_running_out_of_host_memory_names_the_generator_called(call, name, monkeypatch):
    """A red-team: rmat and grid out of memory said 'from_edges ran out of host memory' (their CSR
    is built by it), a call the user never made."""
    from vyre_numba.errors import HostMemoryError

    def no_room(*args, **kwargs):
        raise MemoryError("Unable to allocate 8.00 GiB")

    monkeypatch.setattr(np, "lexsort", no_room)
    with pytest.raises(HostMemoryError, match=rf"^{name} ran out of host memory.*Fix: generate a smaller graph"):
        call()
