"""The distributed algorithms on a CPU Dask cluster (workers on the reference backend) against the
single-process calls: several workers, uneven and empty partitions, Dask arrays and DataFrames of
edges, bad input, and a worker that dies mid-call (Dask reruns its tasks; nothing is lost)."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from egraph_cases import bucket, chain_pair, random_egraph, workload_rows

distributed = pytest.importorskip("distributed", reason="the [dask] extra is not installed")
import dask.array as da  # noqa: E402

from vyre_numba import VyreError  # noqa: E402
from vyre_numba.errors import DispatchError  # noqa: E402
from vyre_numba.distributed import congruence_closure, connected_components  # noqa: E402
from vyre_numba.egraph import EGraph  # noqa: E402
from vyre_numba.egraph import congruence_closure as closure_one  # noqa: E402
from vyre_numba.graph import connected_components as components_one  # noqa: E402
from vyre_numba.graph.generators import grid, rmat  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=3, threads_per_worker=2, processes=True, dashboard_address=":0") as lc, \
            distributed.Client(lc) as c:
        yield c


def csr(n, src, dst):
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.add.at(indptr, src + 1, 1)
    return np.cumsum(indptr), dst[order].astype(np.int32)


def random_graph(rng, n, m):
    return csr(n, rng.integers(0, max(n, 1), m), rng.integers(0, max(n, 1), m)) if n else csr(0, [], [])


GRAPHS = {
    "empty": (0, 0), "one vertex": (1, 0), "two isolated": (2, 0), "sparse": (300, 120),
    "dense": (400, 3000), "more partitions than vertices": (3, 2),
}


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("partitions", [None, 1, 2, 5])
def test_components_of_a_csr_equal_the_single_process_labels(client, name, partitions):
    n, m = GRAPHS[name]
    indptr, indices = random_graph(np.random.default_rng(n + m), n, m)
    want = components_one(indptr, indices, backend="reference")
    got, stats = connected_components(indptr, indices, client=client, backend="reference", partitions=partitions,
                                      stats=True)
    assert got.dtype == np.int32 and np.array_equal(got, want)
    assert stats.partitions == (3 if partitions is None else partitions)
    assert {d["backend"] for d in stats.devices.values()} == {"reference"}


@pytest.mark.parametrize("share", [0.0, 0.3, 0.9, 1.0])
def test_cut_messages_carry_every_cut_label_and_send_a_common_one_once(share):
    from vyre_numba.distributed import components as dc

    rng = np.random.default_rng(int(share * 10))
    n, bounds = 5000, np.array([0, 1500, 3250, 5000])  # a cut of about 1,300: more than dc.SAMPLE
    flags = rng.random(n) < 0.4
    flags[1500:3250] = False  # the sender owns [1500, 3250)
    labels = rng.integers(0, n, n).astype(np.int32)
    labels[rng.random(n) < share] = 7  # a largest component's label, on `share` of the vertices
    msgs = dc.cut_numpy(flags, labels, bounds)
    v = np.flatnonzero(flags)
    rows = np.concatenate([dc.cut_rows(int(bounds[q]), int(bounds[q + 1] - bounds[q]), [msgs[q]]) for q in range(3)])
    assert np.array_equal(rows, np.stack([v, labels[v]], 1))
    assert msgs[1][0].size == msgs[1][2].size == msgs[1][3].size == 0 and msgs[1][1] == -1  # nothing to itself
    if share >= 0.9:
        assert all(m[1] == 7 for q, m in enumerate(msgs) if q != 1)
        assert sum(m[3].size for m in msgs) == int((labels[v] != 7).sum())  # the common label is not repeated
    else:
        assert all(m[1] == -1 for m in msgs) and sum(m[3].size for m in msgs) == v.size
    assert all(m[3].dtype == np.int32 for m in msgs)


def test_an_owner_whose_cut_lacks_the_common_label_gets_its_labels_plain():
    from vyre_numba.distributed import components as dc

    rng = np.random.default_rng(5)
    n, bounds = 5000, np.array([0, 3000, 3500, 5000])
    flags = rng.random(n) < 0.4
    flags[3000:3500] = False
    labels = rng.integers(0, n, n).astype(np.int32)
    labels[:3000] = 7  # two thirds of the cut carry 7, all of them owner 0's
    msgs = dc.cut_numpy(flags, labels, bounds)
    assert msgs[0][1] == 7 and msgs[0][3].size == 0
    assert msgs[2][1] == -1 and msgs[2][2].size == 0 and msgs[2][3].size == int(flags[3500:].sum())
    v = np.flatnonzero(flags)
    rows = np.concatenate([dc.cut_rows(int(bounds[q]), int(bounds[q + 1] - bounds[q]), [msgs[q]]) for q in range(3)])
    assert np.array_equal(rows, np.stack([v, labels[v]], 1))


def test_without_client_the_default_client_is_used_as_dask_does(client, monkeypatch):
    """Regression (an API review): client=None was the default and always raised."""
    assert distributed.default_client() is client
    indptr, indices = random_graph(np.random.default_rng(7), 300, 400)
    want = components_one(indptr, indices, backend="reference")
    assert np.array_equal(connected_components(indptr, indices, backend="reference"), want)
    got = congruence_closure([chain_pair(4)], [(0, 1)], backend="reference")
    assert np.array_equal(got.eclass, closure_one(chain_pair(4), [(0, 1)], backend="reference").eclass)

    def none():
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "default_client", none)
    with pytest.raises(VyreError, match=r"no Dask client was given and none is running.*Fix: make one"):
        connected_components(indptr, indices, backend="reference")


def test_components_of_structured_graphs(client):
    for indptr, indices in (grid(40, 30), rmat(10, 8, seed=5), csr(500, np.arange(499), np.arange(1, 500))):
        want = components_one(indptr, indices, backend="reference")
        got, stats = connected_components(indptr, indices, client=client, backend="reference", partitions=4,
                                          stats=True)
        assert np.array_equal(got, want)
    # a path cut into 4 pieces meets itself at 3 places: the cut is tiny, the merge joins 4 labels
    assert stats.cut_pairs == 3 and stats.merged_pairs == 3
    assert stats.extra["labels_sent"] == 3  # three cuts of one vertex: each label sent as it is


def test_components_of_a_scipy_matrix_given_whole(client):
    """As the single-GPU call: a matrix of any format is the graph of its rows (a CSC's own arrays
    are its transpose's)."""
    import scipy.sparse as sp

    A = sp.random(60, 60, 0.03, format="csc", random_state=4)
    want = components_one(A.tocsr().indptr, A.tocsr().indices, backend="reference")
    assert np.array_equal(connected_components(A, client=client, backend="reference", partitions=3), want)


def test_a_cut_whose_vertices_share_a_label_sends_it_once(client):
    n = 2000  # one component: every cut vertex of a partition carries its smallest vertex
    rng = np.random.default_rng(11)
    src = np.concatenate([np.arange(n - 1), rng.integers(0, n, 3000)])
    dst = np.concatenate([np.arange(1, n), rng.integers(0, n, 3000)])
    indptr, indices = csr(n, np.concatenate([src, dst]), np.concatenate([dst, src]))
    got, stats = connected_components(indptr, indices, client=client, backend="reference", partitions=3,
                                      stats=True)
    assert np.array_equal(got, np.zeros(n, np.int32))
    assert stats.cut_pairs > 500 and stats.extra["labels_sent"] < stats.cut_pairs / 10, stats


@pytest.mark.parametrize("partitions", [1, 3, 5])
def test_components_left_on_the_workers_are_a_dask_array_of_the_same_labels(client, partitions):
    indptr, indices = rmat(10, 8, seed=partitions)
    want = components_one(indptr, indices, backend="reference")
    got, stats = connected_components(indptr, indices, client=client, backend="reference", partitions=partitions,
                                      gather=False, stats=True)
    assert isinstance(got, da.Array) and got.dtype == np.int32 and got.shape == want.shape
    assert got.chunks == ((tuple(hi - lo for lo, hi in stats.extra["owned_ranges"])),)
    assert np.array_equal(got.compute(), want)
    assert np.array_equal(got[5:700].compute(), want[5:700])  # a slice reads only its chunks
    empty = connected_components(np.zeros(1, np.int64), np.zeros(0, np.int32), client=client, backend="reference",
                                 gather=False)
    assert isinstance(empty, da.Array) and empty.shape == (0,) and empty.compute().size == 0


def test_a_worker_error_left_on_the_workers_is_raised_at_the_call(client):
    e = da.from_array(np.array([[0, 1], [2, 9]]), chunks=(1, 2))
    with pytest.raises(VyreError, match=r"outside 0..4.*Fix: pass n = the vertex count"):
        connected_components(client=client, edges=e, n=5, backend="reference", gather=False)
    # a negative id: no n helps, so the Fix says what does (it said to pass n: a red-team)
    e = da.from_array(np.array([[0, 1], [-1, 3]]), chunks=(1, 2))
    with pytest.raises(VyreError, match=r"vertex -1, outside 0..4. Fix: drop the edges with a negative end"):
        connected_components(client=client, edges=e, n=5, backend="reference", gather=False)


def test_components_of_uneven_dask_array_chunks(client):
    rng = np.random.default_rng(3)
    n, m = 700, 900
    e = np.stack([rng.integers(0, n, m), rng.integers(0, n, m)], 1)
    want = components_one(*csr(n, e[:, 0], e[:, 1]), backend="reference")
    for chunks in ((m, 2), ((1, 0, 600, 299), (2,)), ((450, 450), (1, 1))):
        edges = da.from_array(e, chunks=chunks).persist()
        got = connected_components(client=client, edges=edges, n=n, backend="reference")
        assert np.array_equal(got, want), chunks


def test_components_of_a_dask_dataframe(client):
    pd = pytest.importorskip("pandas", reason="dask DataFrames need pandas ([dask] extra)")
    dd = pytest.importorskip("dask.dataframe")
    rng = np.random.default_rng(4)
    n, m = 300, 250
    frame = pd.DataFrame({"u": rng.integers(0, n, m), "v": rng.integers(0, n, m)})
    want = components_one(*csr(n, frame.u, frame.v), backend="reference")
    got = connected_components(client=client, edges=dd.from_pandas(frame, npartitions=3), n=n,
                               columns=("u", "v"), backend="reference")
    assert np.array_equal(got, want)


def _case(g, u=None):
    return (g, u) if u is not None else g


def test_closure_of_random_egraphs_equals_the_single_process_closure(client):
    rng = np.random.default_rng(7)
    for trial in range(8):
        g = random_egraph(rng, int(rng.integers(1, 160)))
        u = rng.integers(0, g[0].max() + 1, (int(rng.integers(0, 8)), 2))
        want = closure_one(EGraph.from_arrays(*g, backend="reference"), u)
        for partitions in (None, 1, 4):
            got = congruence_closure(g, u, client=client, backend="reference", partitions=partitions)
            assert np.array_equal(got.eclass, want.eclass), (trial, partitions)
            assert (got.merged, got.classes_before, got.classes_after, got.converged) == \
                   (want.merged, want.classes_before, want.classes_after, True)


def test_closure_of_deep_chains_buckets_and_the_workload(client):
    w = workload_rows(2048)
    for g, u in ((chain_pair(12), [(0, 1)]), bucket(300), (w[:4], w[4])):
        want = closure_one(EGraph.from_arrays(*g, backend="reference"), u)
        got = congruence_closure(g, u, client=client, backend="reference")
        assert np.array_equal(got.eclass, want.eclass)
    assert got.rounds >= 2


def test_closure_of_an_egraph_keeps_its_unions_rebuilt_or_pending(client):
    rng = np.random.default_rng(11)
    for trial in range(4):
        g = random_egraph(rng, 120)
        top = int(g[0].max())
        first, then = rng.integers(0, top + 1, (3, 2)), rng.integers(0, top + 1, (2, 2))
        want_g, got_g = (EGraph.from_arrays(*g, backend="reference") for _ in range(2))
        for e in (want_g, got_g):
            e.union(first)
            if trial % 2:
                e.rebuild()  # merged before the call, or (even trials) still pending
        want = closure_one(want_g, then)
        snapshot = got_g.classes()
        got = congruence_closure(got_g, then, client=client, backend="reference")
        assert np.array_equal(got.eclass, want.eclass), trial
        assert (got.merged, got.classes_before, got.classes_after) == (want.merged, want.classes_before,
                                                                       want.classes_after), trial
        # the EGraph given is read, not changed (the single-process call changes its own); the
        # docstring's one line applies the result to it
        assert np.array_equal(got_g.classes(), snapshot), trial
        got_g.union(np.stack([got_g.classes(), got.eclass], axis=1))
        got_g.rebuild()
        assert np.array_equal(got_g.classes(), want_g.classes()), trial


def test_closure_of_given_partitions_with_an_empty_one(client):
    g = chain_pair(6)
    rows = [np.arange(0, 5), np.arange(5, 5), np.arange(5, g[1].size)]
    parts = []
    for r in rows:
        off = np.concatenate([[0], np.cumsum(np.diff(g[2])[r])]).astype(np.int64)
        kids = np.concatenate([g[3][g[2][i]:g[2][i + 1]] for i in r]) if r.size else np.zeros(0, np.int64)
        parts.append((g[0][r], g[1][r], off, kids.astype(np.int64)))
    want = closure_one(EGraph.from_arrays(*g, backend="reference"), [(0, 1)])
    got = congruence_closure(parts, [(0, 1)], client=client, backend="reference")
    assert np.array_equal(got.eclass, want.eclass)
    egraph = EGraph.from_arrays(*g, backend="reference")
    assert np.array_equal(congruence_closure(egraph, [(0, 1)], client=client, backend="reference").eclass,
                          want.eclass)


def _cut(g, bounds):
    """The rows [bounds[i], bounds[i+1]) of the e-graph g, as one partition each."""
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        off = g[2][lo:hi + 1] - g[2][lo]
        out.append((g[0][lo:hi], g[1][lo:hi], off, g[3][g[2][lo]:g[2][hi]]))
    return out


def test_closure_of_partitions_already_on_the_workers_equals_the_single_process_closure(client):
    import dask

    rng = np.random.default_rng(5)
    workers = sorted(client.scheduler_info()["workers"])
    for trial in range(4):
        g = random_egraph(rng, int(rng.integers(20, 200)))
        u = rng.integers(0, g[0].max() + 1, (3, 2))
        want = closure_one(EGraph.from_arrays(*g, backend="reference"), u)
        n = g[1].size
        parts = _cut(g, [0, n // 3, n // 3, n])  # one partition empty
        futs = [client.scatter([p], workers=[workers[i % len(workers)]])[0] for i, p in enumerate(parts)]
        mixed = [futs[0], parts[1], dask.delayed(tuple)(parts[2])]  # a future, host rows, a delayed
        for given in (futs, mixed):
            got = congruence_closure(given, u, client=client, backend="reference")
            assert np.array_equal(got.eclass, want.eclass), trial
            assert (got.merged, got.classes_before, got.classes_after, got.converged) == \
                   (want.merged, want.classes_before, want.classes_after, True), trial
        left = congruence_closure(futs, u, client=client, backend="reference", gather=False)
        assert isinstance(left.eclass, da.Array) and left.eclass.chunks == ((n // 3, n - n // 3),)  # the empty one dropped
        assert np.array_equal(left.eclass.compute(), want.eclass), trial
        assert (left.classes_before, left.classes_after) == (want.classes_before, want.classes_after)
    held = client.scatter([parts[0]], workers=[workers[1]], hash=False)[0]
    assert congruence_closure([held], client=client, backend="reference").eclass.size == parts[0][0].size
    assert client.who_has([held])[held.key] == (workers[1],)  # the rows stayed where they were


def test_rounds_hold_a_bounded_number_of_partitions_on_the_workers(client, monkeypatch):
    """A long closure keeps only the latest rounds' partitions on the workers, not every round's."""
    from vyre_numba.distributed import cluster

    held, submit = [], cluster.submit

    def watching(c, fn, *args, name, **kw):
        if name == "eg-size":  # a round's delta is about to be read: count what the client keeps
            held.append(sum(str(key).startswith("vyre-eg-partition") for key in c.futures))
        return submit(c, fn, *args, name=name, **kw)

    monkeypatch.setattr(cluster, "submit", watching)
    got = congruence_closure(chain_pair(20), [(0, 1)], client=client, backend="reference", partitions=2)
    assert got.converged and got.rounds >= 15 and len(held) == got.rounds
    assert max(held) <= 3 * 2, held  # two rounds' partitions (and one round's being made), whatever the round


def test_bad_arguments_are_refused_before_any_task_is_sent(client, monkeypatch):
    """Regression (a red-team): a bad max_rounds or n was refused after each worker had been sent a
    task asking for its device."""
    from vyre_numba.distributed import cluster

    def no_task(*args, **kwargs):
        raise AssertionError("a task was sent before the arguments were checked")

    monkeypatch.setattr(cluster, "ask_devices", no_task)
    monkeypatch.setattr(cluster, "submit", no_task)
    for bad in (0, 1.5, True, "3"):
        with pytest.raises(VyreError, match="max_rounds is .*Fix:"):
            congruence_closure([chain_pair(3)], client=client, backend="reference", max_rounds=bad)
    edges = da.from_array(np.array([[0, 1], [1, 2]]), chunks=(1, 2))
    for bad in (-1, 2.0, None, 2**31):
        with pytest.raises(VyreError, match="n .*Fix:"):
            connected_components(edges=edges, n=bad, client=client, backend="reference")
    with pytest.raises(VyreError, match="edges is a list.*Fix:"):
        connected_components(edges=[[0, 1]], n=2, client=client, backend="reference")


def test_bad_partitions_on_the_workers_raise_vyre_errors_with_a_fix(client):
    g = chain_pair(3)
    bad = client.scatter([(g[0][:2], g[1], g[2], g[3]), "rows", (g[0], g[1], g[2], g[3] + 100)])
    for given, fix in ((bad[:1], "equal length"), (bad[1:2], "(eclass, op, children_offsets, children)"),
                       (bad[2:], "children are e-class ids")):
        with pytest.raises(VyreError) as e:
            congruence_closure(given, client=client, backend="reference")
        assert fix in str(e.value) and "Fix:" in str(e.value), str(e.value)
    with pytest.raises(VyreError, match="Fix:"):
        congruence_closure(client.scatter([g]), client=client, backend="reference", gather="no")
    gone = client.scatter([g], hash=False)[0]
    client.cancel([gone])
    with pytest.raises(VyreError) as e:
        congruence_closure([gone], client=client, backend="reference")
    assert "cancelled future" in str(e.value) and "Fix:" in str(e.value)
    kept = congruence_closure(client.scatter([g], hash=False), client=client, backend="reference", gather=np.False_)
    assert np.array_equal(kept.eclass.compute(), congruence_closure([g], client=client, backend="reference").eclass)


def test_a_child_naming_a_class_no_enode_is_in_is_refused_as_egraph_refuses_it(client):
    # class 2 has no e-node, but 3 does: the child below the largest class is checked across partitions
    rows = [(np.array([0, 1]), np.array([0, 0]), np.array([0, 0, 0]), np.zeros(0, np.int64)),
            (np.array([3]), np.array([1]), np.array([0, 1]), np.array([2]))]
    with pytest.raises(VyreError, match="children"):
        EGraph.from_arrays(np.array([0, 1, 3]), np.array([0, 0, 1]), np.array([0, 0, 0, 1]), np.array([2]),
                           backend="reference")
    workers = sorted(client.scheduler_info()["workers"])
    held = [client.scatter([p], workers=[workers[i % len(workers)]], hash=False)[0] for i, p in enumerate(rows)]
    for given in (rows, held, [rows[1], held[0]]):
        for gather in (True, False):
            with pytest.raises(VyreError) as e:
                congruence_closure(given, client=client, backend="reference", gather=gather)
            assert "refers to class 2" in str(e.value) and "Fix:" in str(e.value), str(e.value)
    fixed = (np.array([3, 2]), np.array([1, 0]), np.array([0, 1, 1]), np.array([2]))  # the child's class given a row
    got = congruence_closure([rows[0], fixed], client=client, backend="reference")
    assert got.eclass.tolist() == [0, 0, 3, 0]  # the three leaves of op 0 are congruent


def test_ids_numpy_promotes_when_mixed_are_read_as_the_integers_they_are(client):
    g = chain_pair(3)
    want = congruence_closure(g, [(0, 1)], client=client, backend="reference")
    for unions in ([np.array([0, 1], np.uint64)], [(np.uint64(0), np.int64(1))], np.array([[0, 1]], object)):
        got = congruence_closure(g, unions, client=client, backend="reference")
        assert np.array_equal(got.eclass, want.eclass), unions
    as_objects = (np.array(g[0].tolist(), object),) + tuple(g[1:])
    assert np.array_equal(congruence_closure(as_objects, [(0, 1)], client=client, backend="reference").eclass,
                          want.eclass)
    with pytest.raises(VyreError, match="beyond 64 bits.*Fix:"):
        congruence_closure(g, [(0, 2**70)], client=client, backend="reference")


def test_a_future_cancelled_while_the_call_runs_is_a_vyre_error(client, monkeypatch):
    from distributed.client import FutureCancelledError

    from vyre_numba.distributed import cluster

    def cancelled(*args, **kwargs):
        raise FutureCancelledError("vyre-eg-extent-0", "lost dependencies")

    monkeypatch.setattr(cluster, "checked_devices", cancelled)
    for call in (lambda: congruence_closure(chain_pair(2), client=client, backend="reference"),
                 lambda: connected_components(np.array([0, 1, 1]), np.array([0]), client=client, backend="reference")):
        with pytest.raises(VyreError, match="cancelled while it ran.*the client or its cluster was closed, a worker "
                                            "holding scattered data died.*Fix: keep the client open and a reference"
                                            ".*hash=False"):
            call()


def test_max_rounds_reports_no_convergence(client):
    """Stopped short, the classes hold every merge the rounds made (the last round's pairs joined):
    finer than the fixed point, coarser than the round before, and counted as they are."""
    g = chain_pair(10)
    final = congruence_closure(g, [(0, 1)], client=client, backend="reference")
    got = congruence_closure(g, [(0, 1)], client=client, backend="reference", max_rounds=2)
    assert got.rounds == 2 and not got.converged
    again = congruence_closure(g, [(0, 1)], client=client, backend="reference", max_rounds=np.int64(2))
    assert again.rounds == 2 and np.array_equal(again.eclass, got.eclass)
    one = congruence_closure(g, [(0, 1)], client=client, backend="reference", max_rounds=1)
    for fine, coarse in ((one.eclass, got.eclass), (got.eclass, final.eclass)):
        assert np.unique(fine).size > np.unique(coarse).size
        assert np.array_equal(coarse[np.unique(fine, return_index=True)[1]][np.unique(fine, return_inverse=True)[1]],
                              coarse)  # each finer class lies in one coarser class
    assert got.classes_after == np.unique(got.eclass).size and got.merged == got.classes_before - got.classes_after


def _bag(items):
    import dask.bag as db

    return db.from_sequence(items)


def _frame(columns: dict):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    return dd.from_pandas(pd.DataFrame(columns), npartitions=1)


class _OnAGpu:
    """An (m, 2) edge chunk that says it lives on a GPU (the CUDA array interface), as a CuPy chunk
    does, on a machine without one."""

    shape, dtype, ndim = (2, 2), np.dtype(np.int32), 2
    __cuda_array_interface__ = {"shape": (2, 2), "typestr": "<i4", "data": (0, False), "version": 3,
                                "strides": None}


def test_edges_on_a_gpu_are_refused_by_cpu_workers_with_a_fix(client):
    import dask

    edges = da.from_delayed(dask.delayed(_OnAGpu)(), shape=(2, 2), dtype=np.int32, meta=np.empty((0, 2), np.int32))
    with pytest.raises(VyreError) as e:
        connected_components(client=client, edges=edges, n=3, backend="reference")
    assert "GPU array" in str(e.value) and "Fix:" in str(e.value)


def test_dataframe_columns_of_different_integer_types_are_widened_not_promoted_to_float(client):
    edges = _frame({"src": np.array([0, 1, 3], np.uint64), "dst": np.array([1, 2, 4], np.int32)})
    got = connected_components(client=client, edges=edges, n=5, backend="reference")
    assert np.array_equal(got, [0, 0, 0, 3, 3])


def test_a_host_memory_error_becomes_a_vyre_error(client, monkeypatch):
    from vyre_numba.distributed import components
    from vyre_numba.errors import HostMemoryError

    def no_memory(*a, **k):
        raise MemoryError("Unable to allocate 16.0 GiB")

    monkeypatch.setattr(components, "_csr_parts", no_memory)
    with pytest.raises(HostMemoryError, match=r"renumber ids densely.*|Fix:"):
        connected_components(np.array([0, 1, 1]), np.array([0]), client=client, backend="reference")


def _workload_rows(cut: str) -> tuple:
    """The rows of a small workload e-graph with `eclass` one short, one long or as is."""
    from vyre_numba.egraph import workload

    (ec, op, off, ch), _ = workload.arithmetic(200, seed=3)
    ec = {"short": ec[:-1], "long": np.r_[ec, 5], "as is": ec}[cut]
    return ec, op, off, ch


def test_an_egraph_whose_eclass_is_a_tuple_of_ids_is_one_egraph_not_partitions(client):
    ec, op, off, ch = _workload_rows("as is")
    whole = congruence_closure((ec, op, off, ch), client=client, backend="reference")
    as_tuple = congruence_closure((tuple(ec.tolist()), op, off, ch), client=client, backend="reference")
    assert np.array_equal(as_tuple.eclass, whole.eclass)


@pytest.mark.parametrize("call, fix", [
    (lambda c: connected_components(np.array([0, 1]), np.array([0]), client=object()), "Client("),
    (lambda c: connected_components(client=c), "pass indptr"),
    (lambda c: connected_components(np.array([0, 0]), np.zeros(0, np.int32), client=c, partitions=0), "positive int"),
    (lambda c: connected_components(np.array([0, 0]), np.zeros(0, np.int32), client=c, n=1), "leave n out"),
    (lambda c: connected_components(np.array([0, 1]), np.array([5]), client=c), "indices"),
    (lambda c: connected_components(client=c, edges=np.zeros((2, 2), np.int64), n=3), "Dask array"),
    (lambda c: connected_components(client=c, edges=da.zeros((2, 2), dtype=np.int64, chunks=1)), "vertex count"),
    (lambda c: connected_components(client=c, edges=da.from_array(np.array([[0, 9]])), n=3, backend="reference"),
     "outside 0..2"),
    (lambda c: connected_components(client=c, edges=da.from_array(np.array([[0.5, 1.0]])), n=3,
                                    backend="reference"), "integer"),
    (lambda c: connected_components(np.array([0, 0]), np.zeros(0, np.int32), client=c, backend=3), "backend"),
    (lambda c: connected_components(np.array([0, 0]), np.zeros(0, np.int32), client=c, gather=1), "Dask array"),
    *[(lambda c, v=v: connected_components(np.array([0, 0]), np.zeros(0, np.int32), client=c, stats=v),
       "DistributedStats") for v in ("no", 1, None)],
    *[(lambda c, cut=cut: congruence_closure(_workload_rows(cut), client=c, backend="reference"), "equal length")
      for cut in ("short", "long")],
    (lambda c: congruence_closure(chain_pair(2), [(0, 1, 2)], client=c, backend="reference"), "(k, 2)"),
    (lambda c: congruence_closure(chain_pair(2), [(0, 99)], client=c, backend="reference"), "outside"),
    (lambda c: congruence_closure([(np.array([0]), np.array([0]), np.array([0, 1]), np.array([4]))], client=c,
                                  backend="reference"), "children"),
    (lambda c: congruence_closure("graph", client=c, backend="reference"), "list of"),
    (lambda c: congruence_closure(chain_pair(2)[:3], client=c, backend="reference"), "tuple of 3 arrays; one e-graph"),
    (lambda c: congruence_closure((EGraph.from_arrays(*chain_pair(2), backend="reference"),) + chain_pair(2)[1:],
                                  client=c, backend="reference"), "an EGraph goes alone"),
    (lambda c: congruence_closure(chain_pair(2), np.ma.masked_array([[0, 1]], mask=[[0, 1]]), client=c,
                                  backend="reference"), "masked array"),
    (lambda c: congruence_closure([], client=c, backend="reference"), "at least one"),
    (lambda c: congruence_closure([chain_pair(1)] * 257, client=c, backend="reference"), "concatenate partitions"),
    (lambda c: congruence_closure(chain_pair(2), client=c, backend="reference", max_rounds=0), "positive int"),
    # no client= takes Dask's default client now: test_without_client_the_default_client_is_used_as_dask_does
    (lambda c: connected_components([0, [1, 2]], [1], client=c, backend="reference"), "flat list"),
    *[(lambda c, k=k: connected_components(np.array([0, 1, 1]), np.array([0]), client=c, backend="reference",
                                          partitions=k), "partitions <= 256") for k in (257, 10**12, 2**63, 2**70)],
    *[(lambda c, k=k: congruence_closure(chain_pair(2), client=c, backend="reference", partitions=k),
       "partitions <= 256") for k in (257, 2**63)],
    (lambda c: connected_components(client=c, edges=da.from_array(np.array([[0, 1]])), n=3, partitions=2,
                                    backend="reference"), "rechunk"),
    (lambda c: connected_components(client=c, edges=_bag([(0, 1)]), n=3, backend="reference"), "Dask array"),
    *[(lambda c, cols=cols: connected_components(client=c, edges=_frame({"src": [0, 1], "dst": [1, 2]}), n=3,
                                                 columns=cols, backend="reference"), "columns=(src, dst)")
      for cols in (None, 5, ("src",), {"src", "dst"}, ("src", "dst", "x"), ("src", "src"))],
    (lambda c: connected_components(client=c, edges=_frame({"src": [True, False], "dst": [1, 2]}), n=3,
                                    backend="reference"), "integers"),
    (lambda c: congruence_closure(chain_pair(2), [[0, 1], [1]], client=c, backend="reference"), "pairs of class ids"),
    (lambda c: congruence_closure(chain_pair(2), np.zeros((0, 3), np.int64), client=c, backend="reference"), "(k, 2)"),
    (lambda c: congruence_closure(chain_pair(2), np.zeros((3, 0), np.int64), client=c, backend="reference"), "(k, 2)"),
    (lambda c: congruence_closure((np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64),
                                   np.zeros(0, np.int64)), [[0, 0]], client=c, backend="reference"), "no e-nodes"),
])
def test_mistakes_raise_vyre_errors_with_a_fix(client, call, fix):
    with pytest.raises(VyreError) as e:
        call(client)
    assert fix in str(e.value) and "Fix:" in str(e.value)


def _frame_of(rows, columns):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    return dd.from_pandas(pd.DataFrame(rows, columns=columns), npartitions=1)


def _boom():
    raise ValueError("the user's producer failed")


def _a_frame():
    import pandas as pd

    return pd.DataFrame([[0, 1]], columns=["src", "dst"])


def _delayed(fn):
    import dask

    return dask.delayed(fn)()


@pytest.mark.parametrize("call, fix", [
    (lambda c: connected_components(client=c, edges=_frame({"src": [0, 1], "dst": [1, 2]}), n=3,
                                    columns=("src", np.str_("src")), backend="reference"), "names one column twice"),
    (lambda c: connected_components(client=c, edges=_frame_of([[0, 1]], [0, 1]), n=3, columns=(1, 1.0),
                                    backend="reference"), "names one column twice"),
    (lambda c: connected_components(client=c, edges=_frame({"src": [0, 1], "dst": [1, 2]}), n=3,
                                    columns=(["src"], "dst"), backend="reference"), "has no column"),
    (lambda c: connected_components(client=c, edges=_frame_of([[0, 1, 0]], ["src", "dst", "src"]), n=3,
                                    backend="reference"), "more than one column named 'src'"),
    (lambda c: connected_components(client=c, edges=_frame({"src": np.array([0, 2**63], np.uint64),
                                                            "dst": [1, 2]}), n=3, backend="reference"),
     "names vertex 9223372036854775808"),
    (lambda c: connected_components(client=c, edges=da.from_array(np.array([[0, 1]])), n=0, backend="reference"),
     "but n = 0"),
    (lambda c: connected_components(client=c, edges=da.from_array(np.zeros((520, 2), np.int64), chunks=(2, 2)),
                                    n=3, backend="reference"), "rechunk to fewer"),
    (lambda c: connected_components(client=c, edges=da.from_delayed(_delayed(_a_frame), shape=(1, 2), dtype=np.int64),
                                    n=3, backend="reference"), "but edges is a Dask array"),
    (lambda c: connected_components(client=c, edges=da.from_delayed(_delayed(_boom), shape=(1, 2), dtype=np.int64),
                                    n=3, backend="reference"), "raised ValueError: the user's producer failed"),
    (lambda c: congruence_closure([_delayed(_boom)], client=c, backend="reference"), "partition 0 raised ValueError"),
    (lambda c: congruence_closure([c.submit(_boom, pure=False)], client=c, backend="reference"), "raised ValueError"),
    (lambda c: congruence_closure([c.scatter(chain_pair(1))], client=c, backend="reference"), "client.scatter([rows])"),
    (lambda c: congruence_closure(list(chain_pair(1)), client=c, backend="reference"), "goes as a tuple"),
    (lambda c: congruence_closure(([0.0, 1.0],) + chain_pair(1)[1:], client=c, backend="reference"), "float64"),
    (lambda c: congruence_closure(chain_pair(2), [(0, True)], client=c, backend="reference"), "mixes bools"),
    (lambda c: congruence_closure(chain_pair(2), bytearray(2), client=c, backend="reference"), "unions is raw bytes"),
    (lambda c: connected_components([0, 1, 2, 2], [True, 0], client=c, backend="reference"), "mixes bools"),
    (lambda c: connected_components(np.array([0, 1]), client=c, backend="reference"), "indices is missing"),
    (lambda c: connected_components(client=c, edges=da.from_array(np.ma.masked_array([[0, 1], [2, 3]],
                                                                                     mask=[[0, 0], [1, 1]])),
                                    n=4, backend="reference"), "masked array"),  # its mask was dropped
    (lambda c: connected_components(client=c, edges=da.from_array(np.array([[0, 1]])), n=3, columns=5,
                                    backend="reference"), "but edges is not a DataFrame"),  # was ignored
    (lambda c: connected_components(np.array([0, 1, 1]), np.array([0]), client=c, columns=("x", "y"),
                                    backend="reference"), "leave it out for a CSR"),
])
def test_more_mistakes_with_dataframes_futures_and_producers_raise_vyre_errors(client, call, fix):
    with pytest.raises(VyreError) as e:
        call(client)
    assert fix in str(e.value) and "Fix:" in str(e.value)


def test_futures_of_another_client_are_refused_with_a_fix(client):
    with distributed.Client(client.scheduler.address) as other:
        rows = other.scatter([chain_pair(1)])
        with pytest.raises(VyreError, match="another client.*Fix:"):
            congruence_closure(rows, client=client, backend="reference")


def test_a_collection_persisted_with_another_client_is_refused_as_such(client):
    """Regression: it read as 'edge chunk 0 is a cancelled future ... keep a reference', which the
    user did."""
    with distributed.Client(client.scheduler.address) as other:
        edges = other.persist(da.from_array(np.array([[0, 1], [1, 2]]), chunks=(1, 2)))
        with pytest.raises(VyreError, match="persisted .*with another client.*Fix:"):
            connected_components(client=client, edges=edges, n=3, backend="reference")


def test_a_failed_call_leaves_none_of_its_futures_on_the_cluster(client):
    """Regression: the exception the client keeps for the failed task held the call's frames, so
    every future it made (partitions, cut messages) stayed on the workers, about 13 a failure."""
    import gc
    import time

    def held() -> int:
        return client.run_on_scheduler(lambda dask_scheduler: sum(
            ts.state == "memory" and isinstance(ts.key, str) and ts.key.startswith("vyre-")  # Dask arrays' keys are tuples
                for ts in dask_scheduler.tasks.values()))
    before = held()
    for _ in range(2):
        with pytest.raises(VyreError, match="names vertex 9"):
            connected_components(edges=da.from_array(np.array([[0, 9], [1, 2]]), chunks=(1, 2)), n=3, client=client,
                                 backend="reference")
    gc.collect()
    deadline = time.monotonic() + 10
    while held() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert held() <= before


def test_an_asynchronous_client_is_refused_with_a_fix():
    """Regression: the call never awaited the client's coroutines and said the cluster had no
    workers. (A stand-in client: a real asynchronous one closed in this process can cut the
    module's client off its scheduler.)"""
    class Asynchronous(distributed.Client):
        def __init__(self):
            self.status = "running"

        asynchronous = True

        def close(self, *args, **kwargs):
            pass

        def __del__(self):
            pass

    with pytest.raises(VyreError, match="asynchronous.*Fix:"):
        connected_components(np.array([0, 1, 1]), np.array([1]), client=Asynchronous(), backend="reference")


def test_stats_takes_a_numpy_bool_as_gather_does(client):
    labels, stats = connected_components(np.array([0, 1, 1]), np.array([0]), client=client, backend="reference",
                                         stats=np.True_)
    assert labels.tolist() == [0, 1] and stats is not None


class _KillOnce(distributed.WorkerPlugin):
    """Ends its worker's process the first time (in the whole cluster) a task of the given phase
    finishes there: the worker dies holding that partition."""

    def __init__(self, marker: str, prefix: str, when: str = "memory"):
        self.marker, self.prefix, self.when = marker, prefix, when

    def transition(self, key, start, finish, **kwargs):
        if finish == self.when and str(key).startswith(self.prefix):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                return
            os.close(fd)
            os._exit(1)


@pytest.mark.parametrize("prefix", ["vyre-cc-local", "vyre-eg-match"])
def test_a_worker_that_dies_mid_call_loses_nothing(tmp_path, prefix):
    indptr, indices = rmat(9, 8, seed=2)
    want_cc = components_one(indptr, indices, backend="reference")
    w = workload_rows(1024)
    want_eg = closure_one(EGraph.from_arrays(*w[:4], backend="reference"), w[4])
    marker = str(tmp_path / "killed")
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0") as lc, \
            distributed.Client(lc) as c:
        c.register_plugin(_KillOnce(marker, prefix))
        if prefix == "vyre-cc-local":
            got = connected_components(indptr, indices, client=c, backend="reference", partitions=3)
            assert np.array_equal(got, want_cc)
        else:
            got = congruence_closure(w[:4], w[4], client=c, backend="reference", partitions=3)
            assert np.array_equal(got.eclass, want_eg.eclass)
    assert os.path.exists(marker), "no worker was killed: the test did not test the failure"


def test_a_worker_that_dies_telling_its_device_is_a_vyre_error_not_a_hang(tmp_path):
    """Regression (a red-team): the device question is pinned to its worker; one that died
    answering it (restarted by its nanny at a new address) left the call waiting for ever."""
    marker = str(tmp_path / "killed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as lc, \
            distributed.Client(lc) as c:
        c.register_plugin(_KillOnce(marker, "vyre-device", when="executing"))
        with pytest.raises(DispatchError, match=r"worker tcp://\S+ left the cluster before saying which device it "
                                                r"runs on .* Fix: see that worker's log .*then call again"):
            connected_components(np.array([0, 1, 2, 2]), np.array([1, 0]), client=c, backend="reference")
        assert os.path.exists(marker)
        c.wait_for_workers(2, timeout=60)
        got = connected_components(np.array([0, 1, 2, 2]), np.array([1, 0]), client=c, backend="reference")
        assert got.tolist() == [0, 0, 2]


def test_a_call_from_inside_a_task_of_a_one_thread_worker_runs():
    """Regression (a red-team): the call's device probe is pinned to each worker, and the calling
    task held its worker's only thread (dask_cuda's default), so it waited for itself forever. The
    call leaves the pool while it runs, as distributed.worker_client() does."""
    indptr, indices = np.array([0, 1, 2, 2, 2]), np.array([1, 2], np.int32)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as lc, \
            distributed.Client(lc) as c:
        def task():
            return connected_components(indptr, indices, backend="reference")  # the worker's default client
        got = c.submit(task, pure=False).result(timeout=120)
        assert got.tolist() == components_one(indptr, indices, backend="reference").tolist() == [0, 0, 0, 3]
        assert connected_components(indptr, indices, client=c, backend="reference").tolist() == [0, 0, 0, 3]


def test_a_paused_worker_is_an_error_not_a_wait_without_end(monkeypatch):
    """Regression (a red-team): a worker paused by Dask's memory monitor runs no task, and the call
    waited for its device probe forever. (memory_limit=0: no memory monitor, which would resume
    the worker paused here at once.)"""
    from distributed.core import Status

    from vyre_numba.distributed import cluster

    monkeypatch.setattr(cluster, "PAUSED_S", 0.5)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  memory_limit=0) as lc, \
            distributed.Client(lc) as c:
        worker = next(iter(lc.workers.values()))
        worker.status = Status.paused  # as the memory monitor pauses it
        deadline = time.monotonic() + 30
        while next(iter(c.scheduler_info()["workers"].values()))["status"] != "paused" and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(DispatchError, match=r"has been paused for 0 s .*Fix: free memory on the workers"):
            connected_components(np.array([0, 1, 1]), np.array([0]), client=c, backend="reference")
        worker.status = Status.running


def test_float_edges_are_refused_from_the_arrays_metadata_before_any_chunk_runs(client):
    edges = da.from_array(np.array([[0.0, 1.0], [1.0, 2.0]]), chunks=(1, 2))
    with pytest.raises(DispatchError, match=r"edges has dtype float64; vertex ids are integers. Fix: pass "
                                            r"edges.astype\('int64'\)"):
        connected_components(client=client, edges=edges, n=3, backend="reference")
    assert connected_components(client=client, edges=edges.astype("int64"), n=3, backend="reference").tolist() \
        == [0, 0, 0]


def test_a_cluster_without_workers_is_waited_for_then_refused(monkeypatch):
    from vyre_numba.distributed import cluster

    monkeypatch.setattr(cluster, "WAIT_FOR_WORKERS", 0.5)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as lc, \
            distributed.Client(lc) as c:
        with pytest.raises(VyreError, match=r"no workers \(none came within 0.5 s\).*Fix:"):
            connected_components(np.array([0, 1, 1]), np.array([0]), client=c, backend="reference")


def test_the_workers_are_asked_of_the_scheduler_not_read_from_the_clients_cached_identity(client, monkeypatch):
    """Regression (.ci/run under load): the client's periodic refresh stores an identity without its
    workers, which could land between scheduler_info()'s fetch and its read, so a device wait took
    a worker present for one gone ("left the cluster before saying which device it runs on")."""
    from vyre_numba.distributed.cluster import _worker_info

    there = sorted(client.nthreads())
    monkeypatch.setattr(type(client), "scheduler_info", lambda self, *a, **k: {"workers": {}})  # the race's result
    assert sorted(_worker_info(client)) == there and len(there) == 3
    indptr, indices = rmat(6, 4, seed=3)
    assert np.array_equal(connected_components(indptr, indices, client=client, backend="reference"),
                          components_one(indptr, indices, backend="reference"))


def test_workers_devices_are_asked_once_while_the_same_worker_processes_live():
    indptr, indices = rmat(8, 4, seed=1)
    want = components_one(indptr, indices, backend="reference")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as lc, \
            distributed.Client(lc) as c:
        def asked() -> int:
            with distributed.get_task_stream(c) as ts:
                assert np.array_equal(connected_components(indptr, indices, client=c, backend="reference"), want)
            return sum(str(t["key"]).startswith("vyre-device") for t in ts.data)

        assert asked() == 2
        assert asked() == 0
        c.restart()  # new worker processes: asked again
        c.wait_for_workers(2)
        assert asked() == 2
        assert asked() == 0


def test_gpus_hand_over_device_arrays_only_on_one_host_where_each_sees_the_others():
    from vyre_numba.distributed.cluster import shares_memory

    def gpu(host, me, sees):
        return {"backend": "cuda", "host": host, "gpu": me, "sees": sees}

    both = ["GPU-a", "GPU-b"]
    assert shares_memory({"w0": gpu("h", "GPU-a", both), "w1": gpu("h", "GPU-b", both)})
    assert not shares_memory({"w0": gpu("h", "GPU-a", both)})  # one worker: nothing crosses
    assert not shares_memory({"w0": gpu("h", "GPU-a", both), "w1": gpu("g", "GPU-b", both)})  # two hosts
    assert not shares_memory({"w0": gpu("h", "GPU-a", ["GPU-a"]), "w1": gpu("h", "GPU-b", both)})  # a hidden GPU
    cpu = {"backend": "reference", "host": "h", "gpu": None}
    assert not shares_memory({"w0": cpu, "w1": dict(cpu)})


def test_the_union_find_gives_each_id_its_sets_smallest_id():
    """`unionfind.union`, `_forest` and `_joined` (what the workers and the join task run) against
    SciPy's components on random pairs: dense and sparse ids, negative ids, shards of any split."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as scipy_components

    from vyre_numba.distributed import unionfind as uf

    rng = np.random.default_rng(11)
    for trial in range(60):
        k = int(rng.integers(1, 2000))
        span = int(rng.choice([3, 50, 10**4, 10**9, 2**62]))
        low = int(rng.choice([0, -5, -2**40])) if span < 2**40 else 0
        pairs = (rng.integers(0, span, (k, 2)) + low).astype(np.int64)
        ids = np.unique(pairs)
        pos = np.searchsorted(ids, pairs)
        _, lab = scipy_components(coo_matrix((np.ones(k), (pos[:, 0], pos[:, 1])), shape=(ids.size,) * 2),
                                  directed=False)
        smallest = np.full(lab.max() + 1, np.iinfo(np.int64).max)
        np.minimum.at(smallest, lab, ids)
        roots = smallest[lab]
        moved = roots != ids
        shards = np.array_split(pairs, int(rng.integers(1, 5)))
        got = uf._joined(*[uf._forest(s) for s in shards])
        assert np.array_equal(got[0], ids[moved]) and np.array_equal(got[1], roots[moved]), trial
    assert [a.size for a in uf._joined()] == [0, 0] and uf._forest(np.zeros((0, 2), np.int64)).shape == (0, 2)


@pytest.mark.parametrize("buckets", [None, 7])
def test_owners_keep_distinct_signatures_indexed_by_hash_across_rounds(monkeypatch, buckets):
    """The owners' matching (`_match`) run round by round without a cluster, with the hashes
    folded into 7 values (every row collides) or as they are: after every round each owner's kept
    rows hold distinct signatures, their index lists them by ascending hash, and the classes
    equal the single-process closure."""
    from vyre_numba.distributed import egraph as de
    from vyre_numba.distributed.unionfind import _forest
    from vyre_numba.egraph.signature import signature_hash, signature_heads

    if buckets:
        monkeypatch.setattr(de, "signature_hash", lambda *a: signature_hash(*a) % np.uint64(buckets))
    rng = np.random.default_rng(5)
    for trial in range(4):
        eclass, op, off, ch = random_egraph(rng, 300)
        unions = rng.choice(np.unique(eclass), (20, 2))
        parts = [(eclass[lo:hi], op[lo:hi], *_rows_of(off, ch, lo, hi)) for lo, hi in ((0, 90), (90, 90), (90, 300))]
        k, nc = len(parts), int(eclass.max()) + 1
        eps = [de.EPart(*p, np.arange(nc)) for p in parts]
        kept = [de._no_kept()] * k
        forests, rounds = [np.asarray(unions, np.int64)], 0
        while True:
            out = [de._send(e, forests, k, rounds == 0) for e in eps]
            eps = [o[0] for o in out]
            m = [de._match(kept[o], eps[o], *[x[1][o] for x in out]) for o in range(k)]
            kept = [x[0] for x in m]
            for kp in kept:
                assert np.array_equal(signature_heads(kp[0], kp[1], kp[2]), np.arange(kp[0].size))
                assert np.array_equal(np.sort(kp[6]), np.arange(kp[0].size))
                assert np.array_equal(kp[4][kp[6]], kp[5]) and np.all(kp[5][1:] >= kp[5][:-1])
            forests = [_forest(x[1]) for x in m]
            rounds += 1
            if not any(f.size for f in forests):
                break
        want = closure_one(EGraph.from_arrays(eclass, op, off, ch, backend="reference"), unions).eclass
        assert np.array_equal(np.concatenate([de._classes(e) for e in eps]), want), trial


def test_an_owners_index_merges_like_numpy_insert():
    from vyre_numba.unique import inserted as _merged

    rng = np.random.default_rng(3)
    for trial in range(200):
        a = np.sort(rng.integers(0, 40, int(rng.integers(0, 25)))).astype(np.uint64)
        v = np.sort(rng.integers(0, 40, int(rng.integers(0, 25)))).astype(np.uint64)
        at = np.searchsorted(a, v)
        got = _merged(a, at, v)
        assert got.dtype == a.dtype and np.array_equal(got, np.insert(a, at, v)), trial


def _rows_of(off, ch, lo, hi):
    return off[lo:hi + 1] - off[lo], ch[off[lo]:off[hi]]


def test_joining_forests_into_a_map_equals_joining_every_pair_again():
    """`egraph._joined` (each partition's step 1) against the union-find of all pairs so far: the
    same map after every round, the map itself returned where the pairs join nothing new, and
    never written in place (Dask may rerun a round)."""
    from vyre_numba.distributed import egraph as de
    from vyre_numba.distributed import unionfind as uf

    rng = np.random.default_rng(17)
    for trial in range(60):
        n = int(rng.choice([1, 6, 40, 1000]))
        canon, seen = np.arange(n, dtype=np.int64), np.zeros((0, 2), np.int64)
        for _ in range(int(rng.integers(1, 5))):
            shards = [rng.integers(0, n, (int(rng.integers(0, 20)), 2)).astype(np.int64)
                      for _ in range(int(rng.integers(0, 4)))]
            forests = [uf._forest(canon[s] if j % 2 else s) for j, s in enumerate(shards)]  # and raw ids, as unions
            before = canon.copy()
            got = de._joined(canon, forests)
            assert np.array_equal(canon, before), trial
            seen = np.concatenate([seen, *shards])
            ids, roots = uf.union(seen)
            want = np.arange(n, dtype=np.int64)
            want[ids] = roots
            assert np.array_equal(got, want), trial
            if np.array_equal(got, canon):
                assert got is canon, trial
            canon = got


def test_a_checked_partition_carries_the_extent_its_check_found():
    """`_checked` finds each partition's extent (largest class, largest child, rows) in its own
    passes, and `_extent` returns that, equal to computing it again; after a pickle too (Dask may
    move a checked partition)."""
    import pickle

    from vyre_numba.distributed import egraph as de

    rng = np.random.default_rng(23)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64))
    leaves = (np.array([4, 2], np.int32), np.array([0, 1], np.int32), np.zeros(3, np.int64), np.zeros(0, np.int32))
    parts = [empty, leaves] + [random_egraph(rng, int(rng.integers(1, 200))) for _ in range(20)]
    for i, t in enumerate(parts):
        c = de._checked(t, i)
        want = (int(np.max(t[0], initial=-1)), int(np.max(t[3], initial=-1)), int(len(t[0])))
        assert de._extent(c) == want == de._extent(tuple(c)) == de._extent(pickle.loads(pickle.dumps(c))), (i, want)


def test_sparse_class_ids_are_refused_as_the_single_process_call_refuses_them(client):
    """Regression (a red-team): eclass [0, 2**24] for 2 e-nodes ran, every partition allocating by
    the largest id (849 MiB here; about 100 GiB at ids near 2**31)."""
    rows = (np.array([0, 2**24], np.int64), np.array([0, 1], np.int32), np.zeros(3, np.int64), np.zeros(0, np.int64))
    with pytest.raises(VyreError, match="ids this sparse cost memory for nothing.*Fix:"):
        closure_one(rows, backend="reference")
    with pytest.raises(VyreError, match="ids this sparse cost memory for nothing.*Fix:"):
        congruence_closure([rows], client=client, backend="reference")


def test_partitions_past_a_workers_memory_limit_are_refused_before_they_run():
    """Regression (a red-team): every CPU partition labels all n vertex ids, so 3 edges with n =
    2**31 - 1 had the whole process killed for lack of memory, and 1 GiB workers died or paused (a
    raw KilledWorker, or a hang). The partitions a worker would hold are now weighed against its limit."""
    from vyre_numba.distributed.components import BYTES_A_VERTEX
    from vyre_numba.errors import HostMemoryError

    edges = da.from_array(np.array([[0, 1], [2, 3], [1, 2]]), chunks=(2, 2))
    # in-process workers: the limit is weighed against the whole process, so it is far above what it holds
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit="8GB",
                                  dashboard_address=":0") as lc, distributed.Client(lc) as c:
        n = 2**31 - 1
        with pytest.raises(HostMemoryError, match=rf"2 partition\(s\) on worker .* would hold at least {BYTES_A_VERTEX} "
                                                   rf"bytes for each of the graph's {n} vertex ids .* above its memory "
                                                   r"limit of 7.45 GiB\. Fix: use fewer partitions"):
            connected_components(edges=edges, n=n, client=c, backend="reference")
        ip, ix = csr(2**23, [0, 2, 1], [1, 3, 2])
        with pytest.raises(HostMemoryError, match=r"64 partition\(s\) on worker"):
            connected_components(ip, ix, client=c, backend="reference", partitions=64)
        got = connected_components(ip, ix, client=c, backend="reference", partitions=1)  # 128 MiB: it fits
        assert got[:5].tolist() == [0, 0, 0, 0, 4] and got.size == 2**23
        one = da.from_array(np.array([[0, 1], [2, 3], [1, 2]]), chunks=(3, 2))  # one partition a worker already:
        with pytest.raises(HostMemoryError, match=r"1 partition\(s\) on worker .*Fix: use workers with more memory"):
            connected_components(edges=one, n=n, client=c, backend="reference")  # fewer cannot help (a red-team)


def test_a_task_whose_workers_died_is_a_vyre_error():
    """A KilledWorker (every worker that ran a task died running it) is a DispatchError with the
    fix, not distributed's own error (a red-team saw one reach the caller)."""
    from vyre_numba.distributed import cluster

    KilledWorker = type("KilledWorker", (Exception,), {})

    @cluster.lost_workers_as_errors("distributed connected_components")
    def call():
        raise KilledWorker("Attempted to run task 'cc-local' on 4 different workers, but all those workers died")

    with pytest.raises(VyreError, match=r"^distributed connected_components: the workers that ran one of its tasks "
                                        r"died running it \(Attempted to run task .*Fix: give the workers more memory"):
        call()


def test_the_fix_for_float_dataframe_columns_converts_both_and_works(client):
    """Regression (a red-team): the Fix named one column, as an expression that assigned nothing."""
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    df = dd.from_pandas(pd.DataFrame({"a": [0.0, 1.0], "b": [1, 2]}), npartitions=1)
    with pytest.raises(VyreError, match=r"column 'a' has dtype float64; .*Fix: once no value is missing, convert the "
                                        r"columns: edges = edges\.astype\(\{'a': 'int64', 'b': 'int64'\}\)") as e:
        connected_components(edges=df, n=3, columns=("a", "b"), client=client, backend="reference")
    assert "read as" not in str(e.value)  # refused from the frame's metadata, before a partition ran (a red-team)
    nullable = dd.from_pandas(pd.DataFrame({"a": pd.array([0, None], "Int64"), "b": [1, 2]}), npartitions=1)
    with pytest.raises(VyreError, match=r"column 'a' has dtype Int64; vertex ids are integers, none missing"):
        connected_components(edges=nullable, n=3, columns=("a", "b"), client=client, backend="reference")
    df = df.astype({"a": "int64", "b": "int64"})
    assert connected_components(edges=df, n=3, columns=("a", "b"), client=client, backend="reference").tolist() == [0] * 3


def test_bool_unions_are_told_a_bool_is_no_id(client):
    rows = (np.array([0, 1]), np.array([0, 0]), np.array([0, 0, 0]), np.zeros(0, np.int64))
    with pytest.raises(VyreError, match=r"has dtype bool; it must hold integers\. Fix: pass an integer array \(a bool is "
                                        r"no id\)\."):
        congruence_closure([rows], np.array([[True, False]]), client=client, backend="reference")


def _load_edges_that_fail():
    raise ValueError("bad file")


def test_a_callers_loader_failing_on_a_worker_keeps_where_it_failed(client):
    """Regression (a red-team): the worker's error came chained below the DispatchError, but with
    its traceback dropped (so that no frame keeps a future alive), so the failing line of the
    caller's loader was nowhere. It is kept as a note, frames of vyre-numba and Dask left out."""
    import dask

    edges = da.from_delayed(dask.delayed(_load_edges_that_fail)(), shape=(1, 2), dtype=np.int64)
    with pytest.raises(DispatchError, match="its error is chained below") as info:
        connected_components(edges=edges, n=3, client=client, backend="reference")
    cause = info.value.__cause__
    assert isinstance(cause, ValueError) and cause.__traceback__ is None
    (note,) = cause.__notes__
    assert note.startswith("Where it was raised (most recent call last):\n") and "_load_edges_that_fail" in note
    assert "vyre_numba" not in note and "site-packages" not in note, note


def test_a_whole_graph_odd_unions_and_unknown_backend_names_are_told_before_any_task(client):
    """Regression (a red-team): a generator's (indptr, indices) tuple, a dense matrix and a Graph
    were told "indices is missing"; a set or a future of unions "unions has shape ()"; and an
    unknown backend name was refused only on the workers, after a task on each."""
    from vyre_numba.errors import ArgumentError, BackendUnavailableError
    from vyre_numba.graph import Graph
    from vyre_numba.graph.generators import grid

    g = grid(3, 3)
    for whole, said in ((g, "a tuple of two arrays.*Fix: unpack it"), (np.eye(3), "dense adjacency matrix"),
                        (Graph(*g, backend="reference"), "not a Graph. Fix: pass g.to_csr()")):
        with pytest.raises((ArgumentError, DispatchError), match=said):
            connected_components(whole, client=client, backend="reference")
    for unions in ({(0, 1)}, client.scatter(np.array([[0, 1]]))):
        with pytest.raises(DispatchError, match=r"unions is a (set|Future), not pairs of class ids\. Fix: "):
            congruence_closure(chain_pair(2), unions, client=client, backend="reference")
    def transitions():
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)

    before = transitions()
    with pytest.raises(BackendUnavailableError, match=r"no backend named 'Reference' \(did you mean 'reference'\?\)"):
        connected_components(np.array([0, 1, 1]), np.array([0]), client=client, backend="Reference")
    assert transitions() == before  # no task went to the scheduler


@pytest.mark.parametrize("name", ["cuda", "qqqqqqqq"])  # the second registered nowhere, too far from a name to be refused here
def test_a_backend_the_workers_cannot_run_is_told_with_the_worker_and_a_fix(client, name):
    """Regression (a carried note): backend='cuda' on workers without a GPU failed in a worker
    task (Dask logged "Compute Failed") with the one-process Fix, use get_backend('reference')."""
    import vyre_numba as vn

    if name in vn.available_backends():
        pytest.skip(f"this host runs {name!r}, and so do its workers")
    indptr, indices = grid(4, 4)
    with pytest.raises(vn.BackendUnavailableError, match="workers cannot run the backend asked for; worker ") as e:
        connected_components(indptr, indices, client=client, backend=name)
    assert "Fix: pass backend=None (each worker runs the best backend it has" in str(e.value)
    assert ".." not in str(e.value)
    want = components_one(indptr, indices, backend="reference")
    assert np.array_equal(connected_components(indptr, indices, client=client, backend="reference"), want)


def test_many_partitions_for_the_workers_are_warned_of_with_a_fix(client):
    """Regression (a carried note): a ring of 20,000 edges in 200 chunks of 100 took 99 s on two
    workers, in 2 chunks 2.2 s, without a word. One a worker (3 here) up to 12 is quiet."""
    import warnings

    indptr, indices = grid(6, 6)
    want = components_one(indptr, indices, backend="reference")
    src = np.repeat(np.arange(36), np.diff(indptr))
    edges = np.stack([src, indices], 1)
    for k, warned in ((12, False), (13, True)):
        e = da.from_array(edges, chunks=(tuple(map(len, np.array_split(np.arange(len(edges)), k))), (2,)))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert np.array_equal(connected_components(edges=e, n=36, client=client), want)
        told = [str(x.message) for x in w if "partitions on 3 workers" in str(x.message)]
        assert bool(told) == warned, (e.numblocks, told)
        if warned:
            assert told[0].startswith(f"edges has {e.numblocks[0]} chunks, each a partition: ")
            assert "Fix: rechunk to one chunk a worker (edges.rechunk((m // workers + 1, 2))" in told[0]
            assert w[0].filename == __file__  # at the caller's line
    for k, warned in ((12, False), (13, True)):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert np.array_equal(connected_components(indptr, indices, client=client, partitions=k), want)
        assert any("Fix: leave partitions out (one per worker)" in str(x.message) for x in w) == warned
    g = chain_pair(6)
    want_eg = closure_one(EGraph.from_arrays(*g, backend="reference"), [(0, 1)])
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64))
    for k, warned in ((12, False), (13, True)):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = congruence_closure([g] + [empty] * (k - 1), [(0, 1)], client=client, backend="reference")
        assert np.array_equal(got.eclass, want_eg.eclass)
        assert any(f"{k} e-graph partitions were given: {k} partitions on 3 workers" in str(x.message) and
                   "Fix: concatenate them into one a worker." in str(x.message) for x in w) == warned


def test_sparse_edge_chunks_are_told_to_be_dense_or_the_matrix_given_whole(client):
    """Regression (a carried note): a Dask array of SciPy sparse chunks was refused as 'shape ()
    and dtype object' with the fix edges.astype('int64'), which does not help."""
    import scipy.sparse as sp

    edges = np.array([[0, 1], [1, 2], [2, 3]])
    sparse_chunks = da.from_array(edges, chunks=(2, 2)).map_blocks(sp.csr_matrix)
    with pytest.raises(DispatchError, match=r"an edge chunk is a sparse matrix \(csr_matrix\); edges are dense .* "
                                            r"Fix: pass dense chunks, edges.map_blocks\(lambda b: b.toarray\(\), dtype=edges.dtype\)"):
        connected_components(edges=sparse_chunks, n=4, client=client)
    dense = sparse_chunks.map_blocks(lambda b: b.toarray(), dtype=edges.dtype)
    assert connected_components(edges=dense, n=4, client=client).tolist() == [0, 0, 0, 0]
