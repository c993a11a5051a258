"""E-graphs for the e-graph tests: an independent, deliberately simple congruence closure (the
oracle), generators of random and adversarial e-graphs, and the shared benchmark workload's rows."""
from __future__ import annotations

import numpy as np


def naive_closure(eclass, op, offsets, children, unions=()) -> np.ndarray:
    """Canonical class (smallest id) of every row: union-find by dict, re-scan until nothing merges."""
    parent: dict = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    def union(a, b):
        a, b = find(a), find(b)
        if a != b:
            parent[max(a, b)] = min(a, b)
            return True
        return False

    for a, b in unions:
        union(int(a), int(b))
    rows = [(int(op[r]), [int(c) for c in children[offsets[r]:offsets[r + 1]]], int(eclass[r]))
            for r in range(len(op))]
    changed = True
    while changed:
        changed = False
        seen: dict = {}
        for o, kids, c in rows:
            key = (o, tuple(find(k) for k in kids))
            if key in seen:
                changed |= union(seen[key], c)
            else:
                seen[key] = c
    return np.array([find(c) for _, _, c in rows], np.int64)


def rows(kids: list[list[int]], ops: list[int], eclass: list[int] | None = None):
    eclass = list(range(len(ops))) if eclass is None else eclass
    offsets = np.concatenate([[0], np.cumsum([len(k) for k in kids])]).astype(np.int64)
    flat = np.array([c for k in kids for c in k], np.int64)
    return np.array(eclass, np.int64), np.array(ops, np.int64), offsets, flat


def random_egraph(rng, n: int, n_ops: int = 3, max_arity: int = 3, shared: float = 0.2):
    """n rows over earlier classes (some rows share a class), with a few back edges (cycles)."""
    eclass, ops, kids = [], [], []
    for r in range(n):
        c = int(rng.integers(0, r)) if r and rng.random() < shared else r
        eclass.append(c)
        ops.append(int(rng.integers(0, n_ops)))
        k = int(rng.integers(0, max_arity + 1)) if r else 0
        top = max(eclass) + 1
        kids.append([int(rng.integers(0, top)) for _ in range(k)])
    used = set(eclass)
    kids = [[c if c in used else min(used) for c in k] for k in kids]
    return rows(kids, ops, eclass)


def chain_pair(depth: int):
    """f^depth(a) and f^depth(b): union(a, b) needs `depth` rounds to merge the tops."""
    kids, ops = [[], []], [0, 1]  # a, b
    for side in (0, 1):
        prev = side
        for _ in range(depth):
            kids.append([prev])
            ops.append(2)
            prev = len(ops) - 1
    return rows(kids, ops)


def bucket(size: int):
    """`size` leaves a_i unioned into one class, and size rows f(a_i): one signature bucket."""
    kids = [[] for _ in range(size)] + [[i] for i in range(size)]
    ops = list(range(1, size + 1)) + [0] * size
    return rows(kids, ops), [(0, i) for i in range(1, size)]


def workload_rows(N: int):
    """The rows of ../shared/bench/egraph_workload.py: leaf k is its own operator (6 + k), so leaves
    differ; node k is class k. Returns (eclass, op, offsets, children, unions)."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "bench"))  # a copy of ../shared/bench's workload
    from egraph_workload import generate

    w = generate(N)
    a, b = w["a"], w["b"]
    arity = (a >= 0).astype(np.int64) + (b >= 0).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(arity)]).astype(np.int64)
    children = np.stack([a, b], 1).ravel()
    children = children[children >= 0]
    op = np.where(w["op"] >= 0, w["op"], 6 + np.arange(N)).astype(np.int64)
    return np.arange(N, dtype=np.int64), op, offsets, children, np.stack([w["ua"], w["ub"]], 1)


def same_rows(host: tuple, batch, where) -> None:
    """A device batch (`egraph_device.DeviceRows`) holds exactly the host rows (op, offsets,
    children, class) a NumPy sender made for the same owner, in order."""
    m, mc = host[0].size, host[2].size
    assert (batch.n_rows, batch.nch) == (m, mc), (where, batch.n_rows, batch.nch, m, mc)
    if not m:
        return
    batch.ops()
    got = (batch.op.copy_to_host()[:m], batch.offsets.copy_to_host()[:m + 1], batch.children.copy_to_host()[:mc],
           batch.eclass.copy_to_host()[:m])
    for name, h, d in zip(("op", "offsets", "children", "class"), host[:4], got):
        assert np.array_equal(h, d), (where, name, h, d)


def distributed_lockstep(parts, unions, moved: bool = False) -> tuple:
    """The distributed closure's rounds without Dask, host (NumPy) and device partitions and owners
    side by side, checked every round: the same rows sent, the same pairs found by each owner, as
    many signatures held as the host keeps, each in the owner's table once. `moved`: every
    owner's table and every batch for another partition's owner pickled and unpickled between
    steps, as Dask moves them between workers. Each device owner reduces its pairs to a forest
    (`egraph_device.forest`) that must equal the host's, and each device partition joins every
    forest into its own map, which must equal the host partition's every round; the classes
    present (`marks`) and after (`distinct_roots`) are counted on both sides.
    Returns (host classes, device classes, counts of
    owner rounds in which the table grew, rows equal to held ones were received, and the rows
    stored were compacted)."""
    import pickle

    from vyre_numba.distributed import egraph as de, egraph_device as dd
    from vyre_numba.distributed.unionfind import _forest

    def travel(x):
        return pickle.loads(pickle.dumps(x)) if moved else x

    nc = max(int(p[0].max(initial=-1)) for p in parts) + 1
    k = len(parts)
    hp = [de.EPart(*p, np.arange(nc)) for p in parts]
    dp = [dd.DevicePart("cuda", *p, nc) for p in parts]
    hk, dk = [de._no_kept()] * k, [dd.DeviceKept("cuda")] * k
    marks = [dd.marks(e) for e in dp]
    for m, p in zip(marks, parts):
        assert np.array_equal(m, de._marks(p[0], nc)), (m, p[0])
    given = np.asarray(unions, np.int64).reshape(-1, 2)
    hf, df = [given], [given.astype(np.int32)]
    r, grown, dropped, compacted = 0, 0, 0, 0
    while True:
        ho = [de._send(e, hf, k, r == 0) for e in hp]
        do = [de._send(e, [travel(f) for f in df], k, r == 0) for e in dp]
        hp, dp = [o[0] for o in ho], [o[0] for o in do]
        assert [o[2] for o in ho] == [o[2] for o in do], (r, [o[2] for o in ho], [o[2] for o in do])
        for i in range(k):
            for o in range(k):
                same_rows(ho[i][1][o], do[i][1][o], (r, i, o))
        for h, d in zip(hp, dp):
            assert np.array_equal(h.canon, d.canon.copy_to_host()[:nc]), r
        hm, dm = [], []
        for o in range(k):
            got = [travel(x[1][o]) if i != o else x[1][o] for i, x in enumerate(do)]
            received = sum(b.n_rows for b in got)
            assert sum(x[1][o][0].size for x in ho) == received, (r, o)
            hm.append(de._match(hk[o], hp[o], *[x[1][o] for x in ho]))
            dm.append(de._match(travel(dk[o]), dp[o], *got))
            new = dm[o][0]
            assert np.array_equal(hm[o][1], dm[o][1]), (r, o, hm[o][1], dm[o][1])
            assert hm[o][0][0].size == new.live, (r, o, hm[o][0][0].size, new.live)
            hold = new.table.copy_to_host()
            hold = np.sort(hold[hold >= 0])
            assert hold.size == new.live and np.unique(hold).size == hold.size and hold.max(initial=-1) < new.n, r
            grown += new.table.size > dk[o].table.size
            dropped += received > new.live - dk[o].live
            compacted += new.n < dk[o].n + received
        hk, dk = [x[0] for x in hm], [x[0] for x in dm]
        hf = [_forest(x[1]) for x in hm]
        df = [dd.forest("cuda", nc, x[1]) if x[1].size else np.zeros((0, 2), np.int32) for x in dm]
        for h, d in zip(hf, df):
            assert d.dtype == np.int32 and np.array_equal(h, d), (r, h, d)
        r += 1
        if not any(f.size for f in hf):
            host = np.concatenate([de._classes(e) for e in hp])
            dev = np.concatenate([de._classes(e) for e in dp])
            after = np.unique(dev).size
            assert dd.distinct_roots(dp[0], np.bitwise_or.reduce(marks)) == after == de._after(hp[0], *marks), r
            return host, dev, grown, dropped, compacted


def fan(width: int, shared: bool = False):
    """a, b, f(a), f(b), then h_i(f(a)) and h_i(f(b)) for i < width: after union(a, b) a round
    lists 2 rows, the next 2 * width (a worklist that grows). `shared`: only h_i(f(b)), whose
    rows each claim a new table slot in that round."""
    kids, ops = [[], [], [0], [1]], [0, 1, 2, 2]
    for i in range(width):
        kids += [[3]] if shared else [[2], [3]]
        ops += [3 + i] if shared else [3 + i, 3 + i]
    return rows(kids, ops)
