"""The GPU phases of distributed connected components (local components, cut, contraction at the
owner, final relabelling) as Numba kernels under the CUDA simulator (CI has no GPU), composed in
one process the way the workers compose them, against the NumPy labels."""
from __future__ import annotations

import textwrap

from simulated import run_script

SCRIPT = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba.distributed import components as dc, device
    from vyre_numba.graph.components import components_of_edges

    from simulated import SimOps, merged

    ops = SimOps()
    rng = np.random.default_rng(0)
    cases = {"path": (40, np.arange(39), np.arange(1, 40)), "empty": (0, np.zeros(0, int), np.zeros(0, int)),
             "isolated": (5, np.zeros(0, int), np.zeros(0, int)), "star": (30, np.zeros(29, int), np.arange(1, 30)),
             "random": (60, rng.integers(0, 60, 60), rng.integers(0, 60, 60)),
             "matching": (40, np.arange(20), np.arange(20, 40))}  # every cut label differs: sent plain
    encodings = set()
    for name, (n, src, dst) in cases.items():
        want, _ = components_of_edges(n, src.astype(np.int64), dst.astype(np.int64))
        for kind in ("csr", "edges"):
            k = 3
            bounds = np.linspace(0, n, k + 1).astype(np.int64)
            parts, cuts = [], []
            for p in range(k):
                lo, hi = int(bounds[p]), int(bounds[p + 1])
                if kind == "csr":
                    mine = (src >= lo) & (src < hi)
                    s, d = src[mine], dst[mine]
                    order = np.argsort(s, kind="stable")
                    ip = np.zeros(n + 1, np.int64)
                    np.add.at(ip, s + 1, 1)
                    a, b = ops.upload(np.cumsum(ip)), ops.upload(d[order].astype(np.int32))
                    touched = [(b, d.size)]
                else:
                    sl = slice(p * src.size // k, (p + 1) * src.size // k)
                    a, b, linked = dc.split_linked(ops, n, np.stack([src[sl], dst[sl]], 1).astype(np.int64))
                    touched = [(b, src[sl].size), (a, src[sl].size)]
                m = touched[0][1]
                labels = dc.local_gpu(ops, n, kind, a, b, m)
                if kind == "edges":  # linked piece by piece as they uploaded, the same labels as in one pass
                    assert np.array_equal(linked.copy_to_host(), labels.copy_to_host()), (name, p)
                    assert np.array_equal(a.copy_to_host()[:m], src[sl]) and np.array_equal(b.copy_to_host()[:m], dst[sl])
                    on_gpu = dc.split_linked(ops, n, ops.upload(np.stack([src[sl], dst[sl]], 1).astype(np.int32)))
                    for x, y in zip(on_gpu, (a, b, linked)):  # a chunk already on the GPU: the same columns and labels
                        assert np.array_equal(x.copy_to_host()[:m], y.copy_to_host()[:m]), (name, p)
                msgs = dc.cut_gpu(ops, n, lo, hi, labels, touched, bounds)
                host = labels.copy_to_host()
                flagged = np.zeros(n, bool)
                for ids, count in touched:
                    flagged[ids.copy_to_host()[:count]] = True
                flagged[lo:hi] = False
                twin = dc.cut_numpy(flagged, host, bounds)
                for q in range(k):
                    assert msgs[q][1] == twin[q][1], (name, kind, q, msgs[q], twin[q])
                    for j in (0, 2, 3):
                        assert np.array_equal(msgs[q][j], twin[q][j]), (name, kind, q, j, msgs[q], twin[q])
                    if msgs[q][0].size:
                        encodings.add(msgs[q][1] >= 0)
                    rows = dc.cut_rows(int(bounds[q]), int(bounds[q + 1] - bounds[q]), [msgs[q]])
                    v = np.flatnonzero(flagged[bounds[q]:bounds[q + 1]]) + bounds[q]
                    assert np.array_equal(rows, np.stack([v, host[v]], 1)), (name, kind, q, rows)
                cuts.append(msgs)
                parts.append((lo, hi, labels))
            shards = []
            for q, (lo, hi, labels) in enumerate(parts):
                incoming = [c[q] for c in cuts]
                shard = dc.contract_gpu(ops, n, lo, hi, labels, incoming)
                twin = dc.contract_numpy(labels.copy_to_host(), dc.cut_rows(lo, hi - lo, incoming))
                assert np.array_equal(shard, twin), (name, kind, shard, twin)
                shards.append(shard)
            ids, roots = merged(shards)
            mapping = device.join_gpu(ops, n, np.concatenate([np.zeros((0, 2), np.int32)] + shards))
            assert np.array_equal(mapping, np.stack([ids, roots], 1)), (name, kind, mapping, ids, roots)
            got = np.concatenate([np.zeros(0, np.int32)] + [dc.settle_gpu(ops, n, lo, hi, labels, shards)
                                                            for lo, hi, labels in parts])
            assert np.array_equal(got, want), (name, kind, got, want)
            print("ok", name, kind)
    assert encodings == {True, False}, encodings
    print("ok cut labels sent both with a common label and plain")
    try:
        dc.split_linked(ops, 5, np.array([[0, 1], [2, 5], [3, 4], [1, 2]], np.int64))
    except Exception as e:
        assert type(e).__name__ == "DispatchError" and "vertex 5" in str(e) and "Fix:" in str(e), e
        print("ok split rejects vertex 5")
    try:
        dc.split_linked(ops, 5, ops.upload(np.array([[0, 1], [2, 7], [3, 4]], np.int32)))
    except Exception as e:
        assert type(e).__name__ == "DispatchError" and "vertex 7" in str(e) and "Fix:" in str(e), e
        print("ok split rejects vertex 7 of a chunk on the device")
    try:  # no vertices: every edge is out of range, and nothing may be linked into the empty labels
        dc.split_linked(ops, 0, np.array([[0, 1], [1, 0]], np.int64))
    except Exception as e:
        assert type(e).__name__ == "DispatchError" and "vertex 1" in str(e) and "Fix:" in str(e), e
        print("ok split rejects the edges of a graph without vertices")
''')


def test_distributed_components_phases_under_the_cuda_simulator():
    out = run_script(SCRIPT, 900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok ") == 16


EGRAPH_SCRIPT = textwrap.dedent('''
    import numpy as np
    from egraph_cases import chain_pair, distributed_lockstep, random_egraph, bucket, rows
    from vyre_numba.distributed import egraph as de, egraph_device as dd
    from vyre_numba.egraph import EGraph, congruence_closure

    from simulated import SimOps

    sim = SimOps()
    dd._ops = lambda bname: sim

    rng = np.random.default_rng(3)
    twice = rows([[], [], [0], [0], [1], [0], [1]], [1, 2, 3, 3, 3, 3, 3], [0, 1, 2, 3, 4, 5, 6])
    cases = [(random_egraph(rng, 24), [(2, 9), (4, 4)]), (chain_pair(4), [(0, 1)]), (bucket(8)[0], bucket(8)[1]),
             (random_egraph(rng, 1), []), (random_egraph(rng, 40, n_ops=2, max_arity=2, shared=0.4), [(1, 3), (5, 8)]),
             (twice, []), (random_egraph(rng, 300, n_ops=2, max_arity=2, shared=0.1), rng.integers(0, 200, (20, 2)))]
    seen = np.zeros(3, int)
    for i, (g, u) in enumerate(cases):
        want = congruence_closure(EGraph.from_arrays(*g, backend="reference"), u).eclass
        for k, moved, garbage in ((1, False, 0.5), (3, False, 0.0), (3, True, 0.5)):
            dd.GARBAGE = garbage  # 0: every row received equal to a held one is dropped the next round
            host, dev, *paths = distributed_lockstep(de._partitions(g, k, k), u, moved)
            assert np.array_equal(host, want) and np.array_equal(dev, want), (i, k, moved, host, dev, want)
            seen += paths
        print("ok egraph", i)
    assert seen.all(), seen  # the table grew, rows equal to held ones came, stored rows were compacted
    print("ok egraph paths", seen)
    g = random_egraph(rng, 40)
    for name, value, words in (("MAX_ROWS", 20, "more partitions"), ("_pow2", lambda n: 16, "found no slot")):
        saved = getattr(dd, name)
        setattr(dd, name, value)  # an owner past the row limit; a table too small (what sizing rules out)
        try:
            distributed_lockstep(de._partitions(g, 1, 1), [])
            raise AssertionError(name + " was not refused")
        except Exception as e:
            assert type(e).__name__ == "DispatchError" and words in str(e) and "Fix:" in str(e), e
        setattr(dd, name, saved)
        print("ok egraph refuses", name)
''')


def test_distributed_egraph_device_phases_under_the_cuda_simulator():
    out = run_script(EGRAPH_SCRIPT, 900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok egraph") == 10
