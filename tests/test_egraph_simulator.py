"""The e-graph's Numba kernels under the CUDA simulator (CI has no GPU): the device rebuild loop,
lookup, append and the structural pass against the NumPy twins, on small e-graphs, including a hash
table too small to start with and a pair buffer of one."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import warnings
    import numpy as np
    warnings.simplefilter("ignore")  # the simulator runs uint64 hashing on NumPy scalars, which warn on wrap
    from egraph_cases import bucket, chain_pair, naive_closure, random_egraph, rows, workload_rows
    from vyre_numba.egraph.device import DeviceEGraph
    from vyre_numba.egraph.host import HostEGraph

    def both(r, unions, **kw):
        out = []
        for G in (HostEGraph, DeviceEGraph):
            g = G(*[a.copy() for a in r], int(max(r[0].max(initial=-1), r[3].max(initial=-1))) + 1, **kw)  # a HostEGraph owns its rows
            g.rebuild()
            u = np.asarray(unions, np.int64).reshape(-1, 2)
            g.union(u[:, 0], u[:, 1])
            s = g.rebuild()
            assert s["converged"], s
            out.append((g, s))
        (h, _), (d, s) = out
        want = naive_closure(*r, unions)
        assert np.array_equal(h.classes(), want) and np.array_equal(d.classes(), want), (d.classes(), want)
        return h, d, s

    rng = np.random.default_rng(0)
    for seed in range(4):
        r = random_egraph(rng, 60, n_ops=2)
        both(r, rng.integers(0, int(r[0].max()) + 1, (5, 2)))
    print("ok random")
    h, d, s = both(chain_pair(8), [(0, 1)])
    assert s["rounds"] >= 8 and s["nodes_touched"] < 8 * 18, s  # incremental: a round touches the next level
    print("ok chain", s["rounds"], s["nodes_touched"])
    r, u = bucket(120)
    both(r, u)
    print("ok bucket")
    h, d, s = both(random_egraph(np.random.default_rng(5), 80), [(0, 3), (5, 9)], table_capacity=2)
    assert s["table_capacity"] >= 128, s
    print("ok tiny table", s["table_capacity"], s["table_regrown"])
    *w, wu = workload_rows(256)
    both(tuple(w), wu)
    print("ok workload")

    r = rows([[], []] + [[0]] * 7 + [[1]] * 3, [1, 2] + [0] * 10)
    for G in (HostEGraph, DeviceEGraph):
        g = G(*[a.copy() for a in r], 12)
        pairs, found = g.structural_pairs(1)
        assert found >= 8 and len(pairs) == 1, (found, pairs)
        pairs, found2 = g.structural_pairs(found)
        assert found2 == found
        got = np.unique(pairs, axis=0)
        assert got.tolist() == [[2, c] for c in range(3, 9)] + [[9, 10], [9, 11]], got
    print("ok structural")

    for G in (HostEGraph, DeviceEGraph):
        g = G(*rows([[], [], [0], [1]], [1, 2, 0, 0]), 4)
        g.rebuild()
        g.union(np.array([0]), np.array([1]))
        g.rebuild()
        got = g.lookup(np.array([0, 0, 3]), np.array([0, 1, 2, 2]), np.array([1, 0]))
        assert got.tolist() == [2, 2, -1], got
        g.append(np.array([4]), np.array([3]), np.array([0, 1]), np.array([2]), 5)
        g.rebuild()
        assert g.lookup(np.array([3]), np.array([0, 1]), np.array([3])).tolist() == [4]
        assert g.find(np.array([1, 3, 4])).tolist() == [0, 2, 4]
    print("ok lookup append")

    import vyre_numba.egraph.device as D
    from egraph_cases import fan
    real = D.DeviceEGraph._rounds_on_device
    seen = []
    D.DeviceEGraph._rounds_on_device = lambda self, clock, budget: seen.append(real(self, clock, budget)) or seen[-1]

    per_launch = D.ROUNDS_PER_LAUNCH

    def modes(r, unions, **kw):
        """The rounds in one persistent launch (one block here) against one host read a round."""
        out, outcomes = {}, {}
        for mode in ("host", "on device", "paused", "handed back"):
            D.ROUNDS_PER_LAUNCH, room = (2 if mode == "paused" else per_launch), D.DeviceEGraph._room
            if mode == "handed back":
                D.DeviceEGraph._room = lambda self: 3
            del seen[:]
            g = D.DeviceEGraph(*[a.copy() for a in r], int(max(r[0].max(initial=-1), r[3].max(initial=-1))) + 1, **kw)
            g.on_device = mode != "host"
            first = g.rebuild()
            u = np.asarray(unions, np.int64).reshape(-1, 2)
            g.union(u[:, 0], u[:, 1])
            s = g.rebuild()
            D.DeviceEGraph._room = room
            assert s["converged"] and np.array_equal(g.classes(), naive_closure(*r, unions)), mode
            out[mode] = [(x["rounds"], x["unions"], x["nodes_touched"]) for x in (first, s)]
            assert out[mode] == out["host"], out
            outcomes[mode] = {int(st[8]) for st in seen}
            assert (mode == "host") == (not seen) and 4 not in outcomes[mode], (mode, outcomes)  # a round of <= 3 rows
        return outcomes

    assert 1 in modes(chain_pair(6), [(0, 1)])["paused"]
    assert 2 in modes(fan(5), [(0, 1)])["handed back"]
    # a round that would fill the table past half goes back too (24 of 64 slots claimed, then 20 rows
    # to list): the host files every row afresh, as its own rounds do
    assert 2 in modes(fan(20, shared=True), [(0, 1)], table_capacity=64)["on device"]
    print("ok on device")
''')


def test_egraph_kernels_match_the_numpy_twins_under_the_cuda_simulator():
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    for case in ("random", "chain", "bucket", "tiny table", "workload", "structural", "lookup append"):
        assert f"ok {case}" in out.stdout
