"""The distributed algorithms with one worker per GPU (dask_cuda.LocalCUDACluster) against the
single-GPU calls: each worker on its own GPU, partitions resident there."""
from __future__ import annotations

import numpy as np
import pytest

from egraph_cases import bucket, chain_pair, distributed_lockstep, random_egraph, workload_rows

pytestmark = pytest.mark.gpu
distributed = pytest.importorskip("distributed", reason="the [dask] extra is not installed")
dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is not installed (one worker per GPU)")
import dask.array as da  # noqa: E402

from vyre_numba.distributed import congruence_closure, connected_components  # noqa: E402
from vyre_numba.egraph import EGraph  # noqa: E402
from vyre_numba.egraph import congruence_closure as closure_one  # noqa: E402
from vyre_numba.graph import connected_components as components_one  # noqa: E402
from vyre_numba.graph.generators import grid, rmat  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with dask_cuda.LocalCUDACluster(threads_per_worker=2, dashboard_address=":0") as lc, distributed.Client(lc) as c:
        yield c


def test_every_worker_computes_on_its_own_gpu(client):
    from numba import cuda

    indptr, indices = rmat(12, 8, seed=1)
    _, stats = connected_components(indptr, indices, client=client, stats=True)
    gpus = [d["gpu"] for d in stats.devices.values()]
    assert {d["backend"] for d in stats.devices.values()} == {"cuda"}
    assert len(gpus) == len(set(gpus)) == len(cuda.gpus)


@pytest.mark.parametrize("partitions", [None, 1, 3, 7])
def test_components_equal_the_single_gpu_labels(client, partitions):
    rng = np.random.default_rng(partitions or 0)
    n, m = 3001, 2500
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    order = np.argsort(src, kind="stable")
    indptr = np.cumsum(np.concatenate([[0], np.bincount(src, minlength=n)])).astype(np.int64)
    graphs = [(indptr, dst[order].astype(np.int32)), grid(120, 50), rmat(13, 8, seed=3),
              (np.zeros(1, np.int64), np.zeros(0, np.int32)), (np.zeros(2, np.int64), np.zeros(0, np.int32))]
    for ip, ix in graphs:
        want = components_one(ip, ix, backend="cuda")
        assert np.array_equal(want, components_one(ip, ix, backend="reference"))
        got = connected_components(ip, ix, client=client, partitions=partitions)
        assert got.dtype == np.int32 and np.array_equal(got, want)


def _edges_and_labels(rng, n: int, m: int) -> tuple:
    """m random (src, dst) int32 rows over n vertices, and their single-GPU component labels."""
    e = np.stack([rng.integers(0, n, m), rng.integers(0, n, m)], 1).astype(np.int32)
    order = np.argsort(e[:, 0], kind="stable")
    indptr = np.cumsum(np.concatenate([[0], np.bincount(e[:, 0], minlength=n)])).astype(np.int64)
    return e, components_one(indptr, e[order, 1], backend="cuda")


def test_components_of_a_dask_array_of_edges(client):
    rng = np.random.default_rng(9)
    n, m = 5000, 6000
    e, want = _edges_and_labels(rng, n, m)
    for chunks in ((m, 2), ((1000, 0, 4999, 1), (2,))):
        got = connected_components(client=client, edges=da.from_array(e, chunks=chunks).persist(), n=n)
        assert np.array_equal(got, want)
        left = connected_components(client=client, edges=da.from_array(e, chunks=chunks).persist(), n=n, gather=False)
        assert isinstance(left, da.Array) and np.array_equal(left.compute(), want)


def test_components_of_edges_that_live_on_the_gpus(client):
    cupy = pytest.importorskip("cupy")
    import dask

    rng = np.random.default_rng(4)
    n, m = 6000, 9000
    e, want = _edges_and_labels(rng, n, m)
    workers = sorted(client.scheduler_info()["workers"])
    cuts = [0, 4000, 4000, m]  # one chunk empty
    futs = [client.submit(cupy.asarray, e[lo:hi], workers=[workers[i % len(workers)]], pure=False)
            for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:]))]
    edges = da.concatenate([da.from_delayed(dask.delayed(f), shape=(hi - lo, 2), dtype=np.int32,
                                            meta=cupy.empty((0, 2), np.int32))
                            for f, (lo, hi) in zip(futs, zip(cuts[:-1], cuts[1:]))])
    assert np.array_equal(connected_components(client=client, edges=edges, n=n), want)
    bad = da.from_delayed(dask.delayed(client.submit(cupy.asarray, np.array([[0, 1], [2, n]], np.int64))),
                          shape=(2, 2), dtype=np.int64, meta=cupy.empty((0, 2), np.int64))
    with pytest.raises(Exception) as err:
        connected_components(client=client, edges=bad, n=n)
    assert type(err.value).__name__ == "DispatchError" and f"vertex {n}" in str(err.value)


def test_closure_equals_the_single_gpu_closure(client):
    rng = np.random.default_rng(5)
    w = workload_rows(4096)
    cases = [(random_egraph(rng, 150), [(3, 7)]), (chain_pair(9), [(0, 1)]), (w[:4], w[4])]
    for g, u in cases:
        want = closure_one(EGraph.from_arrays(*g, backend="cuda"), u)
        for partitions in (None, 3):  # one partition a worker; several, so an owner gets its own rows on its GPU
            got = congruence_closure(g, u, client=client, partitions=partitions)
            assert np.array_equal(got.eclass, want.eclass)
            assert (got.merged, got.classes_after) == (want.merged, want.classes_after)


def test_closure_of_partitions_on_the_workers_equals_the_single_gpu_closure(client):
    from vyre_numba.distributed import egraph as de

    w = workload_rows(1 << 13)
    g, u = w[:4], w[4]
    want = closure_one(EGraph.from_arrays(*g, backend="cuda"), u)
    workers = sorted(client.scheduler_info()["workers"])
    parts = de._partitions(g, 2 * len(workers), len(workers))
    held = [client.scatter([p], workers=[workers[i % len(workers)]], hash=False)[0] for i, p in enumerate(parts)]
    got = congruence_closure(held, u, client=client)
    assert np.array_equal(got.eclass, want.eclass)
    assert (got.merged, got.classes_before, got.classes_after) == (want.merged, want.classes_before,
                                                                   want.classes_after)
    left = congruence_closure(held, u, client=client, gather=False)
    assert isinstance(left.eclass, da.Array) and left.eclass.dtype == np.int32
    assert np.array_equal(left.eclass.compute(), want.eclass) and left.classes_after == want.classes_after


def test_a_child_naming_a_class_no_enode_is_in_is_refused_on_the_gpus(client):
    from vyre_numba import VyreError

    rng = np.random.default_rng(8)
    g = random_egraph(rng, 300)
    eclass, op, off, ch = (np.asarray(a).copy() for a in g)
    gone = int(ch[-1])
    keep = eclass != gone  # the rows of one class that a child names removed, their children too
    lens = np.diff(off)[keep]
    kids = np.concatenate([ch[off[i]:off[i + 1]] for i in np.flatnonzero(keep)])
    bad = (eclass[keep], op[keep], np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), kids)
    assert (bad[0] == gone).sum() == 0 and (bad[3] == gone).any() and gone < bad[0].max()
    for partitions in (None, 3):
        with pytest.raises(VyreError, match=f"refers to class {gone}.*Fix:"):
            congruence_closure(bad, client=client, partitions=partitions)


def _ipc_opened() -> int:
    from vyre_numba.distributed.egraph_device import _Shared

    return _Shared.opened


def test_a_closure_stopped_short_equals_the_numpy_rounds_stopped_there(client):
    """max_rounds on the GPUs: the classes after the last round's pairs are joined equal the NumPy
    path's, stopped at the same round, on the same workers."""
    rng = np.random.default_rng(8)
    for g, u, rounds in ((chain_pair(10), [(0, 1)], 2), (random_egraph(rng, 3000, n_ops=2, max_arity=2, shared=0.2),
                                                         rng.integers(0, 2000, (40, 2)), 1)):
        got = congruence_closure(g, u, client=client, max_rounds=rounds)
        want = congruence_closure(g, u, client=client, backend="reference", max_rounds=rounds)
        assert got.rounds == want.rounds == rounds and np.array_equal(got.eclass, want.eclass)
        assert (got.merged, got.classes_after, got.converged) == (want.merged, want.classes_after, want.converged)


def test_workers_of_one_host_hand_batches_over_from_gpu_to_gpu(client):
    """Workers on one host share memory exactly when there are several GPUs, and then a closure's
    batches for another worker land by IPC (the handles opened on the workers count up)."""
    from numba import cuda

    from vyre_numba.distributed import cluster

    several = len(cuda.gpus) > 1
    devices = cluster.devices(client, cluster.worker_table(client), "cuda")
    assert cluster.shares_memory(devices) == several
    w = workload_rows(1 << 13)
    want = closure_one(EGraph.from_arrays(*w[:4], backend="cuda"), w[4])
    before = sum(client.run(_ipc_opened).values())
    got = congruence_closure(w[:4], w[4], client=client)
    assert np.array_equal(got.eclass, want.eclass)
    assert (sum(client.run(_ipc_opened).values()) > before) == several


def test_a_shared_batch_lands_in_another_process_by_ipc(tmp_path):
    """A batch of rows pickled as between workers of one host carries CUDA IPC handles, and another
    process gets exactly its arrays; unshared, it carries host arrays."""
    import pickle
    import subprocess
    import sys

    from vyre_numba import VyreError
    from vyre_numba.distributed import egraph_device as dd

    ops = dd._ops("cuda")
    rng = np.random.default_rng(2)
    op, cls = rng.integers(0, 9, 5000).astype(np.int32), rng.integers(0, 10**6, 5000).astype(np.int32)
    off = np.concatenate([[0], np.cumsum(rng.integers(0, 4, 5000))]).astype(np.int32)
    ch = rng.integers(0, 10**6, int(off[-1])).astype(np.int32)
    for shared, wide in ((True, False), (False, False), (True, True)):  # wide: int64 offsets (past 2**31 children)
        rows = dd.DeviceRows.of(ops, "cuda", ops.upload(op), ops.upload(off), ops.upload(ch), ops.upload(cls), op.size,
                                int(off[-1]), shared, wide)
        assert rows.offsets.dtype == (np.int64 if wide else np.int32)
        state = rows.__getstate__()
        kinds = {type(state[k]) for k in dd.DeviceRows._DEVICE}
        assert kinds == ({dd._Shared} if shared else {np.ndarray}), kinds
        if shared:  # read back where it was made (as after a spill to disk): refused, not read from freed memory
            with pytest.raises(VyreError, match="read back in the worker that made it.*Fix:"):
                pickle.loads(pickle.dumps(rows))
        blob, out = tmp_path / f"rows{shared}{wide}.pkl", tmp_path / f"got{shared}{wide}.npz"
        blob.write_bytes(pickle.dumps(rows))
        code = ("import pickle, sys, numpy as np; r = pickle.loads(open(sys.argv[1], 'rb').read()); r.ops(); "
                "np.savez(sys.argv[2], n=r.n_rows, nch=r.nch, **{k: getattr(r, k).copy_to_host() for k in "
                "('op', 'offsets', 'children', 'eclass')})")
        done = subprocess.run([sys.executable, "-c", code, str(blob), str(out)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        got = np.load(out)
        assert (int(got["n"]), int(got["nch"])) == (op.size, int(off[-1]))
        for k, want in (("op", op), ("offsets", off.astype(np.int64) if wide else off), ("children", ch), ("eclass", cls)):
            assert got[k].dtype == want.dtype and np.array_equal(got[k], want), (shared, wide, k)


def test_device_rounds_match_the_numpy_rounds_step_by_step(monkeypatch):
    """The GPU partitions and owners (no Dask) against the NumPy ones, round by round: rows sent,
    pairs found, signatures kept; with the tables and batches pickled as between workers."""
    from vyre_numba.distributed import egraph as de, egraph_device as dd

    rng = np.random.default_rng(11)
    w = workload_rows(1 << 14)
    cases = [(w[:4], w[4]), (random_egraph(rng, 2000, n_ops=2, max_arity=2, shared=0.1), rng.integers(0, 1500, (60, 2))),
             bucket(500), (chain_pair(12), [(0, 1)])]
    seen = np.zeros(3, int)
    for i, (g, u) in enumerate(cases):
        want = closure_one(EGraph.from_arrays(*g, backend="cuda"), u).eclass
        for k, moved, garbage in ((1, False, 0.5), (3, False, 0.0), (3, True, 0.5)):
            monkeypatch.setattr(dd, "GARBAGE", garbage)
            host, dev, *paths = distributed_lockstep(de._partitions(g, k, k), u, moved)
            assert np.array_equal(host, want) and np.array_equal(dev, want), (i, k, moved)
            seen += paths
    assert seen.all(), seen  # the table grew, rows equal to held ones came, stored rows were compacted


def test_cc_phases_on_the_gpu_match_numpy_on_cuts_larger_than_the_sample():
    """Cut, contraction and settling on this GPU (no Dask) against their NumPy twins, with cuts of
    tens of thousands of vertices: a giant component's label sent once, and an owner whose cut
    vertices carry labels of their own getting them plain."""
    from vyre_numba import get_backend
    from vyre_numba.distributed import components as dc
    from vyre_numba.distributed.device import Ops
    from vyre_numba.graph.components import components_of_edges

    ops = Ops(get_backend("cuda"))
    rng = np.random.default_rng(3)
    n, k = 200_000, 3
    bounds = np.linspace(0, n, k + 1).astype(np.int64)
    giant = lambda m: rng.integers(0, 120_000, (m, 2))  # noqa: E731
    pairs = np.stack([np.arange(140_000, 160_000, 2), np.arange(140_001, 160_001, 2)], 1)  # owner 2's own
    chunks = [np.concatenate([giant(200_000), pairs]), giant(200_000), rng.integers(100_000, n, (50_000, 2))]
    every = np.concatenate(chunks)
    want, _ = components_of_edges(n, every[:, 0].astype(np.int64), every[:, 1].astype(np.int64))
    parts, cuts, seen = [], [], set()
    for p, e in enumerate(chunks):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        a, b, labels = dc.split_linked(ops, n, e.astype(np.int64))
        msgs = dc.cut_gpu(ops, n, lo, hi, labels, [(b, e.shape[0]), (a, e.shape[0])], bounds)
        flags = np.zeros(n, bool)
        flags[e.reshape(-1)] = True
        flags[lo:hi] = False
        twin = dc.cut_numpy(flags, labels.copy_to_host(), bounds)
        for q in range(k):
            assert msgs[q][1] == twin[q][1], (p, q, msgs[q][1], twin[q][1])
            for j in (0, 2, 3):
                assert np.array_equal(msgs[q][j], twin[q][j]), (p, q, j)
            if msgs[q][0].size:
                seen.add((p, q, msgs[q][1] >= 0))
        parts.append((lo, hi, labels))
        cuts.append(msgs)
    assert (0, 1, True) in seen and (0, 2, False) in seen, seen  # one sender: its common label, and plain
    shards = []
    for q, (lo, hi, labels) in enumerate(parts):
        incoming = [c[q] for c in cuts]
        shard = dc.contract_gpu(ops, n, lo, hi, labels, incoming)
        twin = dc.contract_numpy(labels.copy_to_host(), dc.cut_rows(lo, hi - lo, incoming))
        assert np.array_equal(shard, twin), q
        shards.append(shard)
    got = np.concatenate([dc.settle_gpu(ops, n, lo, hi, labels, shards) for lo, hi, labels in parts])
    assert np.array_equal(got, want)


def test_an_edge_out_of_range_is_refused_on_the_device(client):
    from vyre_numba import VyreError

    for bad in ([[0, 9]], [[-1, 0]]):
        with pytest.raises(VyreError, match=r"outside 0\.\.2.*Fix:"):
            connected_components(client=client, edges=da.from_array(np.array(bad, np.int64)), n=3)
    with pytest.raises(VyreError, match="Fix:"):  # no vertices: every edge is out of range, and nothing is linked
        connected_components(client=client, edges=da.from_array(np.array([[0, 1], [1, 0]], np.int64)), n=0)
    labels = connected_components(client=client, edges=da.from_array(np.array([[0, 1], [2, 2]], np.int64)), n=3)
    assert np.array_equal(labels, [0, 0, 2])  # the workers' GPUs are still well after the refusals
