"""The e-graph on the reference backend (NumPy twins) against an independent simple closure, its
API and its errors; the same checks on the GPU where one is present (marked gpu)."""
from __future__ import annotations

import json
import types

import numpy as np
import pytest

from egraph_cases import bucket, chain_pair, fan, naive_closure, random_egraph, rows, workload_rows
from interrupts import interrupted
from vyre_numba.egraph import EGraph, congruence_closure, structural_equivalences
from vyre_numba.errors import DispatchError, VyreError

BACKENDS = ["reference", pytest.param("cuda", marks=pytest.mark.gpu)]


def close(rows_, unions=(), backend="reference", **kw):
    g = EGraph.from_arrays(*rows_, backend=backend, **kw)
    return g, congruence_closure(g, np.array(unions, np.int64).reshape(-1, 2))


def few_hashes(monkeypatch, m: int) -> None:
    """Make the host's signature hashes take m values, so that most groups collide and are settled
    exactly: the rows' hash and the one-row hash of the scalar rounds alike."""
    from vyre_numba.egraph import signature

    monkeypatch.setattr(signature, "mix64", lambda x: x % np.uint64(m))
    monkeypatch.setattr(signature, "mix64_int", lambda x: x % m)


ROUNDS = {"vector": (-10**9, 8), "scalar": (10**9, 0), "scalar, scanned": (10**9, 10**9), "mixed": (2, 1)}


@pytest.fixture(params=list(ROUNDS))
def rounds(request, monkeypatch):
    """The NumPy rebuild's later rounds all on arrays, all in Python on point lookups (with the slots
    sorted by class from the start, or found by scanning), or switching between them."""
    from vyre_numba.egraph import closure_numpy

    base, after = ROUNDS[request.param]  # mixed: a round of one row with at most one child in Python
    monkeypatch.setattr(closure_numpy, "SCALAR_BASE", base)
    monkeypatch.setattr(closure_numpy, "SCALAR_RATIO", 10**9)
    monkeypatch.setattr(closure_numpy, "CSR_AFTER", after)
    return request.param


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(12))
def test_random_egraphs_match_the_simple_closure(backend, seed):
    rng = np.random.default_rng(seed)
    r = random_egraph(rng, int(rng.integers(1, 300)), n_ops=int(rng.integers(1, 4)))
    top = int(r[0].max()) + 1
    unions = rng.integers(0, top, (int(rng.integers(0, 20)), 2))
    g, res = close(r, unions, backend)
    want = naive_closure(*r, unions)
    assert np.array_equal(res.eclass, want)
    assert res.converged and res.classes_after == np.unique(want).size
    assert np.array_equal(g.find(r[0]), want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_rebuilds_after_unions_and_adds_match_the_simple_closure_of_everything_so_far(backend, seed, rounds,
                                                                                      monkeypatch):
    """Unions, rebuilds and adds on one e-graph (on the CPU a rebuild after a converged one revisits
    only rows whose children changed class; an add, a stopped or an interrupted rebuild starts
    afresh), each rebuild's classes against the simple closure of the rows and every union made
    so far; with seed odd the hash collides often, so groups are settled exactly."""
    if seed % 2 and backend == "reference":
        few_hashes(monkeypatch, 3)
    rng = np.random.default_rng(100 + seed)
    g = EGraph.from_arrays(*random_egraph(rng, int(rng.integers(20, 200)), n_ops=2, max_arity=2), backend=backend)
    made = np.zeros((0, 2), np.int64)
    for step in range(8):
        have = np.unique(g.rows()["eclass"])
        u = rng.choice(have, (int(rng.integers(1, 4)), 2)).astype(np.int64)
        g.union(u)
        made = np.concatenate([made, u])
        if step == 2:
            g.rebuild(max_rounds=1)
        if step == 5 and backend == "reference":
            interrupted(25, g.rebuild, within="egraph")
        s = g.rebuild()
        r = g.rows()
        want = naive_closure(r["eclass"], r["op"], r["children_offsets"], r["children"], made)
        assert s.converged and np.array_equal(g.classes(), want), step
        if step % 3 == 1:  # rows over the current classes, some equal to rows there are
            k = int(rng.integers(1, 6))
            g.add(rng.integers(0, 2, k), np.arange(k + 1), rng.choice(have, k))


@pytest.mark.parametrize("seed", range(40))
def test_the_numpy_union_find_against_a_simple_one(seed):
    """union_numpy on a compressed union-find: every id points at the smallest id of its merged
    class, merges count the roots that stopped being roots, and the rebuild's ids whose root
    changed are exactly those."""
    from vyre_numba.egraph.closure_numpy import _union, union_numpy

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    parent = np.arange(n, dtype=np.int64)
    union_numpy(parent, *rng.integers(0, n, (2, int(rng.integers(0, n)))))
    a, b = rng.integers(0, n, (2, int(rng.integers(0, 2 * n))))
    groups = {int(r): {int(x) for x in np.flatnonzero(parent == r)} for r in np.unique(parent)}
    for x, y in zip(a.tolist(), b.tolist()):
        gx, gy = next(g for g in groups.values() if x in g), next(g for g in groups.values() if y in g)
        if gx is not gy:
            groups = {k: v for k, v in groups.items() if v is not gx and v is not gy}
            groups[min(gx | gy)] = gx | gy
    want = np.empty(n, np.int64)
    for g in groups.values():
        want[list(g)] = min(g)
    before = parent.copy()
    merged, changed = _union(parent, a, b)
    assert np.array_equal(parent, want) and merged == np.unique(before).size - len(groups)
    assert np.array_equal(changed, np.flatnonzero(parent != before))


@pytest.mark.parametrize("seed", range(6))
def test_the_worklist_rebuild_is_the_full_scan_round_for_round(seed, rounds, monkeypatch):
    """rebuild_numpy with the index of the last converged rebuild kept (as the reference e-graph
    keeps it), after unions and stops at max_rounds, against a rebuild that canonicalises and
    regroups every row each round: the same rounds, unions, convergence, union-find and rows, and
    the index kept is the rows' hashes in order; with seed odd most hashes collide."""
    from vyre_numba.egraph.closure_numpy import rebuild_numpy, union_numpy
    from vyre_numba.egraph.signature import congruent_pairs, signature_hash

    def full_scan(parent, op, offsets, children, eclass, max_rounds):
        rounds = unions = 0
        while max_rounds is None or rounds < max_rounds:
            children[:], eclass[:] = parent[children], parent[eclass]
            a, b = congruent_pairs(op, offsets, children, eclass)
            rounds += 1
            if a.size == 0:
                return rounds, unions, True
            unions += union_numpy(parent, a, b)
        children[:], eclass[:] = parent[children], parent[eclass]
        return rounds, unions, False

    if seed % 2:
        few_hashes(monkeypatch, 3)
    rng = np.random.default_rng(300 + seed)
    for case in range(30):
        e, op, offsets, children = random_egraph(rng, int(rng.integers(1, 150)), n_ops=int(rng.integers(1, 3)),
                                                 max_arity=int(rng.integers(0, 3)))
        n = int(e.max()) + 1
        ours, theirs = [np.arange(n), children.copy(), e.copy()], [np.arange(n), children.copy(), e.copy()]
        index = None
        for step in range(int(rng.integers(1, 8))):
            a, b = rng.integers(0, n, (2, int(rng.integers(0, 4))))
            assert union_numpy(ours[0], a, b) == union_numpy(theirs[0], a, b)
            stop = None if rng.random() < 0.7 else int(rng.integers(1, 3))
            s = rebuild_numpy(ours[0], op, offsets, ours[1], ours[2], stop, index=index)
            index = s["index"]
            assert (s["rounds"], s["unions"], s["converged"]) == full_scan(theirs[0], op, offsets, theirs[1],
                                                                           theirs[2], stop), (case, step)
            assert all(np.array_equal(x, y) for x, y in zip(ours, theirs)), (case, step)
            assert (index is not None) == s["converged"] and s["nodes_touched"] <= s["rounds"] * op.size
            if index is not None:
                hashes, order, hs = index
                assert np.array_equal(hashes, signature_hash(op, offsets, ours[1])), (case, step)
                assert np.array_equal(hs, hashes[order]) and np.all(hs[1:] >= hs[:-1]), (case, step)
                assert np.array_equal(np.sort(order), np.arange(op.size)), (case, step)


def test_one_rows_hash_is_the_hash_of_the_rows():
    """The scalar rounds' hash of one row (Python ints) has the bits of the rows' hash, for ids up to
    2**32 - 1, operators past 2**31 and every arity up to 4."""
    from vyre_numba.egraph.signature import row_hash, signature_hash

    rng = np.random.default_rng(5)
    arity = rng.integers(0, 5, 400)
    offsets = np.r_[0, np.cumsum(arity)]
    children = rng.integers(0, 2**32, int(offsets[-1]))
    children[:20] = [0, 2**32 - 1] * 10
    op = rng.integers(0, 2**33, arity.size)
    want = signature_hash(op, offsets, children)
    got = [row_hash(int(op[r]), tuple(children[offsets[r]:offsets[r + 1]].tolist())) for r in range(op.size)]
    assert got == want.tolist()


@pytest.mark.parametrize("depth", [1, 50, 3000])
def test_a_deep_chain_takes_a_round_a_level_each_costing_its_worklist(depth, monkeypatch):
    """f^k(a) and f^k(b) for k <= depth, union(a, b): depth + 1 rounds, a round of one row for each
    level past the first. Those are scalar rounds: no hash of all rows again, no union over every
    id (found by counting the calls that would make a round cost every row)."""
    from vyre_numba.egraph import closure_numpy

    calls = {"signature_hash": 0, "_union": 0}

    def counted(name):
        real = getattr(closure_numpy, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(closure_numpy, name, call)
    n = 2 + 2 * depth
    op = np.r_[0, 1, np.full(2 * depth, 2)]
    offsets = np.r_[0, 0, 0, np.arange(1, 2 * depth + 1)]
    children = np.empty(2 * depth, np.int64)  # f(a) in row 2, f(b) in row 3, f(f(a)) in row 4, ...
    children[0::2], children[1::2] = np.r_[0, np.arange(2, 2 * depth, 2)], np.r_[1, np.arange(3, 2 * depth, 2)]
    rows = (np.arange(n), op, offsets, children)
    g = EGraph.from_arrays(*rows, backend="reference")
    g.union([[0, 1]])
    for name in calls:
        counted(name)
    s = g.rebuild()
    assert s.converged and s.rounds == depth + 1 and s.unions == depth
    assert s.nodes_touched == n + depth - 1  # every row, then f^k(b) as f^(k-1)(b) joins f^(k-1)(a)
    assert np.array_equal(g.classes(), naive_closure(*rows, [(0, 1)]))
    assert calls == {"signature_hash": 1, "_union": 1}, calls  # the first round's, over every row


@pytest.mark.parametrize("collide", [False, True])
def test_a_rebuild_interrupted_anywhere_then_more_unions_give_the_simple_closure(collide, rounds, monkeypatch):
    """A converged rebuild (its index kept), unions, a rebuild interrupted at every event, then
    more unions, a rebuild stopped after a round and a full one: after each interruption the
    union-find lies between the unions made and their closure, and at the end the classes are
    the simple closure's (an interrupted rebuild drops the index it was given, half updated)."""
    if collide:
        few_hashes(monkeypatch, 2)
    rng = np.random.default_rng(8)
    r = random_egraph(rng, 40, n_ops=2, max_arity=2)
    n = int(r[0].max()) + 1
    first, second, third = (rng.integers(0, n, (k, 2)) for k in (2, 3, 2))
    g = EGraph.from_arrays(*r, backend="reference")
    g.rebuild()
    g.union(first)
    s = g.rebuild()
    assert s.rounds == 3 and s.unions == 6 and s.nodes_touched < 3 * g.n_nodes  # worklist rounds, one per level
    loose = naive_closure(np.arange(n), np.arange(n), np.zeros(n + 1, np.int64), np.zeros(0, np.int64), first)
    tight = naive_closure(*r, first)
    want = naive_closure(*r, np.concatenate([first, second, third]))
    k = 0
    while True:
        k += 1
        g = EGraph.from_arrays(*r, backend="reference")
        g.rebuild()
        g.union(first)
        if not interrupted(k, g.rebuild, within="egraph"):
            break
        got = g.find(np.arange(n))
        assert all(len(set(got[loose == c])) == 1 for c in np.unique(loose)), k  # no union made is lost
        rows_in = got[r[0]]
        assert all(len(set(tight[rows_in == c])) == 1 for c in np.unique(rows_in)), k  # nothing merged wrongly
        g.union(second)
        g.rebuild(max_rounds=1)
        g.union(third)
        g.rebuild()
        assert np.array_equal(g.classes(), want), k
    assert k > 150


@pytest.mark.parametrize("backend", BACKENDS)
def test_deep_chains_take_a_round_per_level(backend):
    r = chain_pair(40)
    g, res = close(r, [(0, 1)], backend)
    want = naive_closure(*r, [(0, 1)])
    assert np.array_equal(res.eclass, want)
    assert res.classes_after == 41 and res.rounds >= 40


@pytest.mark.parametrize("backend", BACKENDS)
def test_cycles_through_children(backend):
    # class 0 holds a and f(0); class 1 holds b and f(1): union(a, b) merges everything
    r = rows([[], [0], [], [2]], [1, 0, 2, 0], [0, 0, 2, 2])
    _, res = close(r, [(0, 2)], backend)
    assert np.array_equal(res.eclass, naive_closure(*r, [(0, 2)]))
    # f(x) = x and f(y) = y, never unioned: no merge
    r = rows([[0], [1]], [0, 0])
    _, res = close(r, (), backend)
    assert np.array_equal(res.eclass, [0, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bucket_of_thousands_of_equal_signatures(backend):
    r, unions = bucket(3000)
    _, res = close(r, unions, backend)
    assert np.array_equal(res.eclass, naive_closure(*r, unions))
    assert res.classes_after == 2


@pytest.mark.parametrize("buckets", [1, 3])
def test_hash_collisions_never_merge_and_never_hide_a_merge(monkeypatch, buckets):
    """With a hash that sends every signature to one of `buckets` values, grouping falls back on
    the exact comparison: the partition, lookups and structural pairs stay those of the simple
    closure (a collision never merges two classes, and never hides two equal signatures)."""
    from vyre_numba.egraph import closure_numpy, host, signature

    real, real_row = signature.signature_hash, signature.row_hash

    def weak(*args):
        return real(*args) % np.uint64(buckets)
    for module in (signature, host, closure_numpy):  # every hash the rebuild and lookups take
        monkeypatch.setattr(module, "signature_hash", weak)
    monkeypatch.setattr(signature, "row_hash", lambda *args: real_row(*args) % buckets)  # the scalar rounds'
    for seed in range(4):
        rng = np.random.default_rng(100 + seed)
        r = random_egraph(rng, 200, n_ops=2)
        unions = rng.integers(0, int(r[0].max()) + 1, (8, 2))
        g, res = close(r, unions)
        assert np.array_equal(res.eclass, naive_closure(*r, unions))
        _, op, offsets, children = r
        found = g.lookup(op, offsets, children)
        assert np.array_equal(g.find(found), res.eclass)  # every row's own signature finds its class
    r, unions = bucket(500)
    _, res = close(r, unions)
    assert np.array_equal(res.eclass, naive_closure(*r, unions))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workload_matches_the_numpy_closure(backend):
    *r, unions = workload_rows(1 << 12)
    _, res = close(r, unions, backend)
    assert np.array_equal(res.eclass, naive_closure(*r, unions))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_and_single_node_graphs(backend):
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64))
    g, res = close(empty, (), backend)
    assert res.eclass.size == 0 and res.converged and g.n_nodes == 0
    g, res = close(rows([[]], [0]), [(0, 0)], backend)
    assert np.array_equal(res.eclass, [0]) and res.merged == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_arrays_given_are_the_callers_a_change_to_them_later_changes_nothing(backend):
    """The e-graph keeps checked copies of its rows: the caller's int64 arrays, changed after
    from_arrays, neither change its classes nor are changed by its rebuild."""
    eclass, op, offsets, children = (np.array(a, np.int64) for a in ([0, 1, 2, 3], [0, 1, 2, 2], [0, 0, 0, 1, 2], [0, 1]))
    given = [a.copy() for a in (eclass, op, offsets, children)]
    g = EGraph.from_arrays(eclass, op, offsets, children, backend=backend)
    op[:2] = 0  # leaves a and b made one operator: 0 and 1 (then f(0) and f(1)) would merge if the e-graph read it
    res = congruence_closure(g, np.zeros((0, 2), np.int64))
    assert np.array_equal(res.eclass, [0, 1, 2, 3])
    assert all(np.array_equal(a, b) for a, b in zip((eclass, offsets, children), (given[0], given[2], given[3])))


@pytest.mark.parametrize("backend", BACKENDS)
def test_operators_by_name_and_new_operators(backend):
    g = EGraph.from_terms([("+", "a", "b")], backend=backend)
    a, b = (int(c) for c in g.lookup(["a", "b"], [0, 0, 0], []))
    assert g.lookup(["+"], [0, 2], [a, b])[0] == g.term_classes[0]
    assert g.lookup(["*"], [0, 2], [a, b])[0] == -1  # a name never seen finds nothing
    before = g.ops
    with pytest.raises(VyreError, match="Fix:"):  # a bad child: the new name is not kept
        g.add(["*"], [0, 2], [a, 99])
    assert g.ops == before
    (times,) = g.add(["*"], [0, 2], [a, b])
    assert g.ops == (*before, "*") and g.lookup(["*"], [0, 2], [a, b])[0] == times != g.term_classes[0]
    assert g.add([g.ops.index("*")], [0, 2], [a, b])[0] == times  # by id: the same e-node
    with pytest.raises(AttributeError):  # the e-graph's names are its own: a caller cannot reorder them
        g.ops.sort()
    assert g.lookup(["*"], [0, 2], [a, b])[0] == times
    rows = g.rows()
    assert set(rows) == {"eclass", "op", "children_offsets", "children"} and rows["op"].size == g.n_nodes
    with pytest.raises(VyreError, match="mixes"):
        g.add(["*", 0], [0, 0, 0], [])
    unnamed = EGraph.from_arrays([0], [0], [0, 0], [], backend=backend)
    with pytest.raises(VyreError, match="no operator names.*Fix:"):
        unnamed.add(["f"], [0, 0], [])


def test_operator_names_from_a_pandas_column_and_a_bare_name():
    pd = pytest.importorskip("pandas")
    g = EGraph.from_terms([("+", "a", "b")], backend="reference")
    a, b = (int(c) for c in g.lookup(pd.Series(["a", "b"]), [0, 0, 0], []))  # was "op has dtype object"
    assert g.lookup(pd.Series(["+"]), [0, 2], [a, b])[0] == g.term_classes[0]
    (times,) = g.add(pd.Series(["*"], dtype="string"), [0, 2], [a, b])
    assert g.ops[-1] == "*" and g.add(pd.Series([g.ops.index("*")]), [0, 2], [a, b])[0] == times
    for call in (g.add, g.lookup):
        with pytest.raises(DispatchError, match=r"op is the str '\+'; .*Fix: pass a list, e\.g\. \['\+'\]"):
            call("+", [0, 2], [a, b])


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_hash_conses_and_lookup_finds(backend):
    g = EGraph.from_terms([("g", ("f", "a")), ("g", ("f", "b"))], backend=backend)
    a, b = (int(g.lookup([g.ops.index(x)], [0, 0], [])[0]) for x in "ab")
    f = g.ops.index("f")
    assert g.lookup([f, f, 0], [0, 1, 2, 3], [a, b, 5]).tolist()[:2] == [1, 4]
    g.union([[a, b]])
    # unions pending: lookup rebuilds first, so f(a) and f(b) are one class
    found = g.lookup([f, f], [0, 1, 2], [a, b])
    assert found[0] == found[1] == 1
    before = g.n_nodes
    ids = g.add([f, f, f], [0, 1, 2, 3], [a, b, 1])  # two existing, one new (f(f(a)))
    assert ids[0] == ids[1] == 1 and ids[2] == g.n_classes - 1 and g.n_nodes == before + 1
    again = g.add([f, f], [0, 1, 2], [1, 1])  # a batch of two equal new e-nodes: one class, one row
    assert again[0] == again[1] == ids[2]
    assert g.n_nodes == before + 1
    new = g.add([f, f], [0, 1, 2], [ids[2], ids[2]])
    assert new[0] == new[1] == g.n_classes - 1 and g.n_nodes == before + 2
    assert np.array_equal(g.find(g.term_classes), [2, 2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(3))
def test_a_large_batch_of_adds_matches_a_dict_model(backend, seed):
    rng = np.random.default_rng(seed)
    g = EGraph.from_arrays(*random_egraph(rng, 200, n_ops=3), backend=backend)
    g.union(rng.integers(0, g.n_classes, (10, 2)))
    g.rebuild()
    arity = rng.integers(0, 3, 3000)
    off = np.concatenate([[0], np.cumsum(arity)])
    pool = np.unique(g.classes())[:40]  # classes with e-nodes (ids in the gaps of random_egraph's have none)
    ch = pool[rng.integers(0, pool.size, int(off[-1]))]  # few distinct children: many duplicates, many existing rows
    op = rng.integers(0, 3, arity.size)
    canon = g.find(ch)
    existing = g.lookup(op, off, ch)
    n0, c0 = g.n_nodes, g.n_classes
    ids = g.add(op, off, ch)
    keys = [(int(op[r]), tuple(canon[off[r]:off[r + 1]].tolist())) for r in range(op.size)]
    model: dict = {}
    for r, k in enumerate(keys):
        if existing[r] >= 0:
            assert ids[r] == existing[r]
        model.setdefault(k, ids[r])
        assert ids[r] == model[k]  # equal e-nodes of the batch share one class
    fresh = sorted({ids[r] for r in range(op.size) if existing[r] < 0})
    assert fresh == list(range(c0, c0 + len(fresh))) and g.n_nodes == n0 + len(fresh)
    assert np.array_equal(g.lookup(op, off, ch), ids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_structural_equivalences_grow_their_buffer(backend):
    r = rows([[], []] + [[0]] * 30 + [[1]] * 5, [1, 2] + [0] * 35)  # two groups: 30 and 5 rows
    g = EGraph.from_arrays(*r, backend=backend)
    want = np.array([(2, c) for c in range(3, 32)] + [(32, c) for c in range(33, 37)])
    for cap in (None, 0, 1, 3):
        assert np.array_equal(structural_equivalences(g, capacity=cap), want)
    g.union([[0, 1]])
    with pytest.raises(DispatchError, match="Fix: call egraph.rebuild"):
        structural_equivalences(g)
    g.rebuild()
    assert structural_equivalences(g).shape == (0, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rebuild_stats_and_max_rounds(backend):
    r = chain_pair(10)
    g = EGraph.from_arrays(*r, backend=backend)
    assert g.rebuild().unions == 0
    g.union([[0, 1]])
    s = g.rebuild(max_rounds=3)
    assert not s.converged and s.rounds == 3
    s = g.rebuild()
    assert s.converged
    assert np.array_equal(g.classes(), naive_closure(*r, [(0, 1)]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nodes_touched_counts_the_rows_each_round_hashed(backend):
    """Regression (a test audit): only upper bounds were checked, so a rebuild that reported no
    work at all passed. Rows a, b, f(a), f(b), g(f(a)), g(f(b)) and union(a, b): the NumPy twin's
    first round hashes all 6 rows (never checked), merging f(a) = f(b); the second only g(f(b)),
    whose child changed class, merging the g rows; the third finds nothing left to hash."""
    g = EGraph.from_arrays([0, 1, 2, 3, 4, 5], [0, 3, 1, 1, 2, 2], [0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3],
                           backend=backend)
    g.union([[0, 1]])
    s = g.rebuild()
    assert s.converged and s.unions == 2 and np.array_equal(g.classes(), [0, 0, 2, 2, 4, 4])
    if backend == "reference":
        assert (s.rounds, s.nodes_touched) == (3, 7)
    else:  # the GPU's worklist starts from the parents the union flagged: it rehashes at least f(b) and g(f(b))
        assert 2 <= s.nodes_touched <= 2 * 6 and s.rounds >= 2
    idle = g.rebuild()  # nothing changed since: no row to hash again
    assert idle.converged and idle.unions == 0 and idle.nodes_touched == 0


def test_ids_far_sparser_than_the_rows_are_refused_before_memory_goes_on_them():
    """Regression (a red-team): two e-nodes in classes 0 and 300,000,000 built a 2.3 GiB union-find
    (seconds per union, which copies it); one in class 2**31 - 2 took 17 GB."""
    for ids in ([0, 300_000_000], [2**31 - 2]):
        n = len(ids)
        with pytest.raises(DispatchError, match=r"ids this sparse cost memory for nothing\. Fix: renumber every class id"):
            EGraph.from_arrays(ids, [0] * n, [0] * (n + 1), [], backend="reference")
        eclass = ids
        ids = np.unique(eclass)  # the fix, as written
        eclass = np.searchsorted(ids, eclass)
        assert EGraph.from_arrays(eclass, [0] * n, [0] * (n + 1), [], backend="reference").n_classes == n
    g = EGraph.from_arrays([0, 5, 1 << 20], [0, 1, 2], [0, 0, 0, 0], [], backend="reference")  # sparse, but small
    assert g.n_classes == (1 << 20) + 1


def test_the_renumbering_fix_keeps_which_class_each_child_names():
    """Regression (a red-team): the Fix renumbered one array at a time (np.unique(ids,
    return_inverse=True)), so eclass and children renumbered apart made f(b) into f(a), silently."""
    big = 1 << 40
    eclass, ops, offsets, children = [big, big + 2, big + 4], [0, 1, 2], [0, 0, 0, 1], [big + 2]  # a, b, f(b)
    with pytest.raises(DispatchError, match="Fix: renumber every class id") as e:
        EGraph.from_arrays(eclass, ops, offsets, children, backend="reference")
    assert "ids = np.unique(eclass); eclass = np.searchsorted(ids, eclass); children = np.searchsorted(ids, children)" \
        in str(e.value)
    ids = np.unique(eclass)
    eclass, children = np.searchsorted(ids, eclass), np.searchsorted(ids, children)
    g = EGraph.from_arrays(eclass, ops, offsets, children, backend="reference")
    assert g.lookup([2], [0, 1], [1]).tolist() == [2]  # f(b) is in class 2, as f(big + 2) was in big + 4


@pytest.mark.parametrize("n_classes", [0, 1])
def test_children_outside_the_classes_there_are_say_to_add_them_first(n_classes):
    """Regression (a red-team): on an empty e-graph the Fix was "keep every value in 0..-1"."""
    g = EGraph.from_arrays(list(range(n_classes)), [0] * n_classes, [0] * (n_classes + 1), [], backend="reference")
    for call in (lambda: g.add([1], [0, 1], [3]), lambda: g.lookup([1], [0, 1], [3])):
        with pytest.raises(DispatchError, match="children name classes already in the e-graph") as e:
            call()
        assert ("none yet" in str(e.value)) == (n_classes == 0) and "0..-1" not in str(e.value)
        assert "Fix: add the leaves" in str(e.value) if n_classes == 0 else "Fix: keep every child in 0..0" in str(e.value)
    assert g.n_nodes == n_classes  # nothing was added


@pytest.mark.parametrize("bad", ['{"nodes": {"a": {"op": "x", "eclass": "c", "cost": 1e999}}}',
                                 '{"nodes": {"a": {"op": "x", "eclass": "c", "cost": NaN}}}',
                                 {"nodes": {"a": {"op": "x", "eclass": "c", "cost": float("-inf")}}}])
def test_serialized_numbers_json_cannot_hold_are_refused(bad):
    """Regression (a red-team): 1e999 read as inf and to_serialized() wrote `Infinity`, which is not JSON."""
    with pytest.raises(DispatchError, match="NaN or an infinity.*Fix: replace it with a finite number"):
        EGraph.from_serialized(bad, backend="reference")
    fine = EGraph.from_serialized('{"nodes": {"a": {"op": "x", "eclass": "c", "cost": 1.5}}}', backend="reference")
    assert json.loads(fine.to_serialized())["nodes"]["a"]["cost"] == 1.5


def test_serialized_round_trip_and_the_format():
    g = EGraph.from_terms([("Add", 1, 2), ("Add", 3, 2)], backend="reference")
    text = g.to_serialized()
    data = json.loads(text)
    assert set(data) == {"nodes", "root_eclasses", "class_data"}
    assert all({"op", "children", "eclass"} <= set(nd) for nd in data["nodes"].values())
    h = EGraph.from_serialized(text, backend="reference")
    for raw in (text.encode(), bytearray(text.encode())):  # the text as bytes, as json.loads reads it too
        assert EGraph.from_serialized(raw, backend="reference").to_serialized() == text
    one, three = (int(h.lookup([h.ops.index(x)], [0, 0], [])[0]) for x in "13")
    h.union([[one, three]])
    res = congruence_closure(h)
    assert res.classes_after == 3  # {1, 3}, {2}, {Add(1, 2), Add(3, 2)}
    out = json.loads(h.to_serialized())
    adds = [nd["eclass"] for nd in out["nodes"].values() if nd["op"] == "Add"]
    assert adds[0] == adds[1]


def test_egglog_partitions_agree():
    egglog = pytest.importorskip("egglog", reason="egglog is not installed: pip install 'vyre-numba[egglog]'")
    from egglog import bindings

    eg = bindings.EGraph()
    program = """(datatype M (Num i64) (Var String) (Add M M) (Mul M M))
    (let $x (Add (Mul (Num 1) (Var "a")) (Num 2)))
    (let $y (Add (Mul (Num 3) (Var "a")) (Num 2)))
    (let $z (Mul (Num 1) (Var "b")))"""
    eg.run_program(*eg.parse_program(program))
    g = EGraph.from_serialized(eg.serialize([]).to_json(), backend="reference")
    eg.run_program(*eg.parse_program("(union (Num 1) (Num 3)) (run 1)"))
    theirs = json.loads(eg.serialize([]).to_json())["nodes"]
    ours = json.loads(g.to_serialized())["nodes"]
    num = {nd["children"][0]: nid for nid, nd in ours.items() if nd["op"] == "Num"}
    one, three = (g.find([int(g._meta["class_names"].index(ours[num[p]]["eclass"]))])[0]
                  for p in ("primitive-i64-1", "primitive-i64-3"))
    g.union([[one, three]])
    g.rebuild()
    ours = json.loads(g.to_serialized())["nodes"]

    def terms(nodes):  # egglog renumbers node ids in a rebuild: compare nodes by the term they spell
        memo: dict = {}

        def spell(nid):
            if nid not in memo:
                nd = nodes[nid]
                memo[nid] = nd["op"] + "(" + ",".join(spell(c) for c in nd["children"]) + ")"
            return memo[nid]

        return {spell(nid): nd["eclass"] for nid, nd in nodes.items()}

    def partition(classes, keep):
        groups: dict = {}
        for term, c in classes.items():
            if term in keep:
                groups.setdefault(c, set()).add(term)
        return sorted(sorted(s) for s in groups.values())

    theirs, ours = terms(theirs), terms(ours)
    # egglog drops the e-nodes its rebuild found duplicate; on the terms both keep, the classes agree
    kept = set(theirs)
    assert kept < set(ours)
    assert partition(theirs, kept) == partition(ours, kept)
    assert len(set(theirs.values())) == len(set(ours.values()))


BAD = {
    "child out of range": (([0, 1], [0, 0], [0, 0, 1], [5]), "child refers to class 5"),
    "offsets decrease": (([0, 1], [0, 0], [0, 1, 0], [0]), r"never decrease.*; it decreases at e-node 1 \(1 then 0\)"),
    "offsets wrong length": (([0, 1], [0, 0], [0, 1], [0]), "needs 3"),
    "float ids": ((np.array([0.0, 1.0]), [0, 0], [0, 0, 0], []), "dtype float64"),
    "bool ops": (([0, 1], np.array([True, False]), [0, 0, 0], []), "dtype bool"),
    "id past 2**32": (([0, 2**32], [0, 0], [0, 0, 0], []), "outside 0"),
    "negative child": (([0, 1], [0, 0], [0, 1, 1], [-1]), "outside 0"),
    "2-D eclass": ((np.zeros((2, 1), np.int64), [0, 0], [0, 0, 0], []), "1-D"),
    "lengths differ": (([0, 1, 2], [0, 0], [0, 0, 0], []), "one of each"),
    "ragged": (([[0], [1, 2]], [0, 0], [0, 0, 0], []), "not an array of integers"),
    "offsets start past 0": (([0, 1], [0, 0], [1, 1, 1], []), "must start at 0"),
    "offsets end short": (([0, 1], [0, 0], [0, 1, 1], [0, 0]), "end at len"),
    "device array": ((type("DeviceLike", (), {"__cuda_array_interface__": {}})(), [0, 0], [0, 0, 0], []),
                     "device array"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_says_how_to_fix_it(case):
    args, match = BAD[case]
    with pytest.raises(VyreError, match=match) as e:
        EGraph.from_arrays(*args, backend="reference")
    assert "Fix:" in str(e.value)


def test_bad_operations_say_how_to_fix_them():
    g = EGraph.from_arrays(*rows([[], [0]], [0, 1]), backend="reference")
    for call, match in [(lambda: g.union([1, 2]), "(k, 2)"), (lambda: g.union([[0, 7]]), "outside 0..1"),
                        (lambda: g.find([2.0]), "dtype float64"), (lambda: g.add([0], [0, 1], [9]), "outside"),
                        (lambda: g.rebuild(max_rounds=0), "max_rounds"),
                        (lambda: structural_equivalences(g, capacity=-1), "capacity"),
                        (lambda: EGraph.from_serialized("{", backend="reference"), "not JSON"),
                        (lambda: EGraph.from_serialized({"nodes": {"a": {"op": "x", "children": ["zz"],
                                                                         "eclass": "c"}}}), "no node"),
                        (lambda: EGraph.from_terms([(1, 2)], backend="reference"), "operator name"),
                        (lambda: EGraph([0, 1], [0, 1], [0, 0, 0], [], ops=["a"], backend="reference"),
                         "operator names"),
                        (lambda: EGraph.from_terms([object()], backend="reference"), "a term is"),
                        (lambda: congruence_closure("x"), "Fix:")]:
        with pytest.raises(VyreError, match=match) as e:
            call()
        assert "Fix:" in str(e.value)
    g.close()
    with pytest.raises(VyreError, match="closed"):
        g.find([0])
    assert "closed" in repr(g)


def test_deep_terms_need_no_recursion():
    t = "x"
    for _ in range(20000):
        t = ("f", t)
    g = EGraph.from_terms([t], backend="reference")
    assert g.n_nodes == 20001 and g.term_classes.tolist() == [20000]


def test_children_name_classes_that_have_e_nodes():
    with pytest.raises(DispatchError, match=r"class 1 \(row 1\), but no e-node is in class 1") as e:
        EGraph.from_arrays([0, 2], [0, 1], [0, 0, 1], [1], backend="reference")  # class 1 has no row
    assert "Fix:" in str(e.value)
    # gaps in the class ids are fine where no child names them; the closure is the simple one's
    r = rows([[], [], [0], [3]], [0, 1, 2, 2], [0, 3, 5, 5])
    g, res = close(r, [(0, 3)])
    assert np.array_equal(res.eclass, naive_closure(*r, [(0, 3)])) and g.n_classes == 6
    with pytest.raises(DispatchError, match="no e-node is in class 1") as e:  # add checks the same
        g.add([2], [0, 1], [1])
    assert "Fix:" in str(e.value) and g.n_nodes == 4
    g.union([[1, 3]])  # now class 1 is class 0's, which has rows
    (new,) = g.add([2], [0, 1], [1])
    assert g.find([new])[0] == res.eclass[2] and g.n_nodes == 4  # f(1) is f(0), already there
    (h,) = g.add([1], [0, 1], [new])
    assert h == 6 and g.n_nodes == 5 and g.add([1], [0, 1], [new])[0] == 6
    t = EGraph.from_terms([("f", ("g", "a"), "a"), ("g", "b")], backend="reference")
    assert t.n_nodes == 5 and congruence_closure(t, [t.lookup(["a", "b"], [0, 0, 0], [])]).classes_after == 3


BAD_COUNTS = {
    "table_capacity=True": lambda g: EGraph.from_arrays(*chain_pair(2), backend="reference", table_capacity=True),
    "table_capacity=1.5": lambda g: EGraph.from_arrays(*chain_pair(2), backend="reference", table_capacity=1.5),
    "table_capacity=0": lambda g: EGraph.from_arrays(*chain_pair(2), backend="reference", table_capacity=0),
    "table_capacity=2**40": lambda g: EGraph.from_arrays(*chain_pair(2), backend="reference", table_capacity=2**40),
    "rebuild max_rounds=True": lambda g: g.rebuild(max_rounds=True),
    "rebuild max_rounds='2'": lambda g: g.rebuild(max_rounds="2"),
    "rebuild persistent='no'": lambda g: g.rebuild(persistent="no"),
    "rebuild persistent=1": lambda g: g.rebuild(persistent=1),
    "closure max_rounds=True": lambda g: congruence_closure(g, [[0, 1]], max_rounds=True),
    "closure max_rounds=0": lambda g: congruence_closure(g, [[0, 1]], max_rounds=0),
    "structural capacity=True": lambda g: structural_equivalences(g, capacity=True),
    "structural capacity=2.0": lambda g: structural_equivalences(g, capacity=2.0),
    "graphviz limit=1.5": lambda g: g.to_graphviz(limit=1.5),
    "graphviz limit=-1": lambda g: g.to_graphviz(limit=-1),
    "graphviz limit=True": lambda g: g.to_graphviz(limit=True),
}


@pytest.mark.parametrize("case", BAD_COUNTS)
def test_counts_are_ints_never_bools(case):
    g = EGraph.from_arrays(*chain_pair(2), backend="reference")
    with pytest.raises(DispatchError, match="Fix:") as e:
        BAD_COUNTS[case](g)
    assert case.split()[-1].split("=")[0] in str(e.value)  # the parameter is named
    assert g.find([1])[0] == 1  # nothing ran: the closure's unions were not made


def test_persistent_false_is_the_same_rebuild_on_the_reference_backend():
    """`persistent` chooses where the GPU's rounds run; the reference backend's are the host's either way."""
    got = []
    for persistent in (True, False, np.bool_(False)):
        g = EGraph.from_arrays(*chain_pair(40), backend="reference")
        g.rebuild(persistent=persistent)
        g.union([(0, 1)])
        s = g.rebuild(persistent=persistent)
        got.append((s.rounds, s.unions, s.nodes_touched, s.converged, g.classes().tolist()))
    assert got[0] == got[1] == got[2] and got[0][0] == 41 and got[0][3]


def test_counts_take_numpy_ints():
    g = EGraph.from_arrays(*chain_pair(3), backend="reference", table_capacity=np.int64(8))
    assert congruence_closure(g, [[0, 1]], max_rounds=np.int32(1)).rounds == 1
    g.rebuild()
    assert structural_equivalences(g, capacity=np.uint8(0)).shape[1] == 2


class Unconvertible:
    """Stands in for a tensor that requires grad: its conversion to an array raises RuntimeError."""

    def __array__(self, *args, **kwargs):
        raise RuntimeError("needs grad")


BAD_CALLS = {
    "ragged union": (lambda g: g.union([[0, 1], [2]]), "not a \\(k, 2\\) array"),
    "union of shape (0, 3)": (lambda g: g.union(np.zeros((0, 3), np.int64)), "shape \\(0, 3\\)"),
    "union of shape (3, 0)": (lambda g: g.union(np.zeros((3, 0), np.int64)), "shape \\(3, 0\\)"),
    "ops=5": (lambda g: EGraph.from_arrays([0], [0], [0, 0], [], ops=5, backend="reference"), "list of operator"),
    "ops a str": (lambda g: EGraph.from_arrays([0, 1], [0, 1], [0, 0, 0], [], ops="ab", backend="reference"),
                  "list of operator"),
    "ops not names": (lambda g: EGraph.from_arrays([0], [0], [0, 0], [], ops=[1], backend="reference"),
                      "names are str"),
    "ops holding None": (lambda g: EGraph.from_arrays([0, 1], [0, 1], [0, 0, 0], [], ops=["a", None],
                                                      backend="reference"), "holds None .*names are str"),
    "pairs that cannot be an array": (lambda g: g.union(Unconvertible()), "RuntimeError: needs grad"),
    "one pair not in a list": (lambda g: g.union((0, 1)), r"shape \(2,\).*Fix: pass \[\[a, b\]\] for one pair"),
    "ops twice": (lambda g: EGraph.from_arrays([0], [0], [0, 0], [], ops=["a", "a"], backend="reference"),
                  "'a' twice"),
    "structural of a str": (lambda g: structural_equivalences("x"), "egraph is a str"),
    "a bool among union ids": (lambda g: g.union([(0, True)]), "mixes bools"),
    "a bool among eclass ids": (lambda g: EGraph.from_arrays([0, True], [0, 1], [0, 0, 0], [], backend="reference"),
                                "mixes bools"),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_bad_arguments_say_how_to_fix_them(case):
    call, match = BAD_CALLS[case]
    g = EGraph.from_arrays(*chain_pair(2), backend="reference")
    with pytest.raises(DispatchError, match=match) as e:
        call(g)
    assert "Fix:" in str(e.value)


def test_ids_numpy_promotes_when_mixed_are_taken_as_the_integers_they_are():
    g = EGraph.from_arrays(*chain_pair(3), backend="reference")
    g.union([np.array([0, 1], np.uint64), np.array([2, 3])])  # NumPy reads the two rows as float64
    g.union(np.array([[4, 5]], object))
    assert g.find([1, 3, 5]).tolist() == [0, 2, 4]
    for bad in ([(1.5, 2)], [(0, 2**70)], np.ma.masked_array([[0, 7]], mask=[[False, True]])):
        with pytest.raises(DispatchError, match="Fix:"):
            g.union(bad)
    assert g.find([7]).tolist() == [7]  # the masked pair merged nothing


def test_empty_unions_are_no_unions():
    g = EGraph.from_arrays(*chain_pair(2), backend="reference")
    g.union([])
    g.union(np.zeros((0, 2), np.int64))
    assert not g._unioned and g.rebuild().unions == 0
    assert EGraph.from_arrays([0], [0], [0, 0], [], ops=np.array(["a"]), backend="reference").ops == ("a",)


@pytest.mark.parametrize("what", ["n_nodes", "n_classes", "to_serialized", "rebuild", "to_graphviz"])
def test_a_closed_egraph_says_so(what):
    g = EGraph.from_arrays(*chain_pair(2), backend="reference")
    g.close()
    with pytest.raises(DispatchError, match="this EGraph was closed. Fix:"):
        x = getattr(g, what)
        if callable(x):
            x()


def _deep_dict(depth: int) -> dict:
    d: dict = {}
    cur = d
    for _ in range(depth):
        cur["a"] = {}
        cur = cur["a"]
    return d


def _node(**kw) -> dict:
    return {"nodes": {"n": {"op": "a", "children": [], "eclass": "c", **kw}}}


BAD_JSON = {
    "deep text": ('{"nodes": {}, "x": ' + "[" * 100000 + "]" * 100000 + "}", "nests too deep"),
    "deep dict": ({"nodes": {}, "x": _deep_dict(100000)}, "nests too deep"),
    "children a number": (_node(children=5), "not a list of node ids"),
    "children null": (_node(children=None), "not a list of node ids"),
    "children a str": (_node(children="n"), "not a list of node ids"),
    "children nested": (_node(children=[["n"]]), "not a list of node ids"),
    "children a bool": (_node(children=[True]), "not a list of node ids"),
    "op a number": (_node(op=5), "both are strings"),
    "eclass a list": (_node(eclass=["c"]), "both are strings"),
    "class_data a list": ({**_node(), "class_data": [1]}, "'class_data' is a list"),
    "root_eclasses a number": ({**_node(), "root_eclasses": 5}, "'root_eclasses'"),
    "root_eclasses nested": ({**_node(), "root_eclasses": [["c"]]}, "'root_eclasses'"),
    "a set": ({**_node(), "class_data": {"c": {1, 2}}}, "JSON cannot write"),
    # keys JSON writes alike: the save wrote what its load refuses, or one value was lost (a red-team)
    "node fields 1 and '1'": ({"nodes": {"n": {"op": "a", "eclass": "c", 1: "first", "1": "second"}}},
                              "two keys in one object that JSON writes alike"),
    "nested 1 and '1'": (_node(cost={1: "int", "1": "str"}), "two keys in one object that JSON writes alike"),
    "class data True and 'true'": ({**_node(), "class_data": {"c": {True: 1, "true": 2}}}, "JSON writes alike"),
}


@pytest.mark.parametrize("case", BAD_JSON)
def test_malformed_serialized_egraphs_are_refused(case):
    data, match = BAD_JSON[case]
    with pytest.raises(DispatchError, match=match) as e:
        EGraph.from_serialized(data, backend="reference")
    assert "Fix:" in str(e.value)


def test_serialized_root_and_class_data_come_back():
    data = {**_node(), "root_eclasses": ["c"], "class_data": {"c": {"type": "M"}}}
    for given in (data, json.dumps(data)):
        out = json.loads(EGraph.from_serialized(given, backend="reference").to_serialized())
        assert out == data
    # a top-level key of the writer's own is written back as read (it was dropped: a red-team)
    mine = {**data, "source": {"tool": "egglog", "version": [1, 2]}}
    g = EGraph.from_serialized(mine, backend="reference")
    mine["source"]["tool"] = "changed later"  # a dict given is copied
    assert json.loads(g.to_serialized())["source"] == {"tool": "egglog", "version": [1, 2]}


@pytest.mark.parametrize("kw", [dict(n=-5), dict(n=1.5), dict(n="8"), dict(n=True), dict(n=2**31),
                                dict(n=64, seed="x"), dict(n=64, seed=-1), dict(n=64, seed=True)])
def test_the_workload_refuses_bad_sizes_and_seeds(kw):
    from vyre_numba.egraph import workload

    with pytest.raises(DispatchError, match="Fix:"):
        workload.arithmetic(**kw)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 64, 1000])
def test_the_workload_is_valid_at_every_size(n):
    from vyre_numba.egraph import workload

    r, unions = workload.arithmetic(n)
    g, res = close(r, unions)
    assert g.n_nodes == n and np.array_equal(res.eclass, naive_closure(*r, unions))
    if n >= 8:  # the shared benchmark's rows, draw for draw
        *want, want_unions = workload_rows(n)
        assert all(np.array_equal(a, b) for a, b in zip(r, want)) and np.array_equal(unions, want_unions)
    assert np.array_equal(workload.arithmetic(n, seed=np.int64(2))[0][2], workload.arithmetic(n, seed=2)[0][2])


def test_graphviz_limits():
    pytest.importorskip("graphviz")
    g = EGraph.from_arrays(*chain_pair(2), backend="reference")
    boxes = [sum(' [label=' in line and '->' not in line for line in g.to_graphviz(limit=k).body)
             for k in (0, 2, None)]
    assert boxes == [0, 2, g.n_nodes]


# ---- found by a red-team: names, orders of work, messages ----------------------------------------

def test_names_made_for_new_rows_and_classes_never_take_a_name_read_in():
    g = EGraph.from_serialized({"nodes": {"n2": {"op": "a", "children": [], "eclass": "c2"},
                                          "q": {"op": "b", "children": [], "eclass": "y"}}}, backend="reference")
    g.add(["f"], [0, 1], [0])  # row 2 in class 2: "n2" and "c2" are the file's already
    out = json.loads(g.to_serialized())
    assert len(out["nodes"]) == 3 and out["nodes"]["n2"] == {"op": "a", "children": [], "eclass": "c2"}
    new = [v for k, v in out["nodes"].items() if k not in ("n2", "q")]
    assert new[0]["children"] == ["n2"] and new[0]["eclass"] not in ("c2", "y")
    back = EGraph.from_serialized(out, backend="reference")
    assert (back.n_nodes, len(set(back.classes().tolist()))) == (3, 3)


def test_a_made_class_name_never_takes_a_name_of_the_class_data():
    g = EGraph.from_serialized({"nodes": {"a": {"op": "x", "children": [], "eclass": "c0"}},
                                "class_data": {"c1": {"stale": True}}}, backend="reference")
    g.add(["f"], [0, 1], [0])  # class 1: "c1" names class data of a class with no node
    out = json.loads(g.to_serialized())
    assert [v["eclass"] for v in out["nodes"].values()] == ["c0", "c1_1"]
    assert out["class_data"] == {"c1": {"stale": True}}  # kept as read: nothing read in is lost


def test_int_node_ids_round_trip_as_the_strings_json_writes():
    g = EGraph.from_serialized({"nodes": {1: {"op": "a", "eclass": "c"}, 2: {"op": "f", "children": [1],
                                                                            "eclass": "d"}}}, backend="reference")
    again = EGraph.from_serialized(g.to_serialized(), backend="reference")
    assert again.n_nodes == 2 and json.loads(again.to_serialized()) == json.loads(g.to_serialized())


@pytest.mark.parametrize("data, fragment", [
    ({"nodes": {1: {"op": "a", "eclass": "c"}, "1": {"op": "f", "eclass": "d"}}}, "an int and a string"),
    ({"nodes": {"a": {"op": "a", "eclass": "c"}}, "root_eclasses": ["zz"]}, "root class 'zz' is the class of no"),
])
def test_serialized_ids_that_cannot_round_trip_are_refused(data, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        EGraph.from_serialized(data, backend="reference")
    assert fragment in str(e.value)


def test_one_term_where_a_list_of_terms_belongs_is_refused():
    with pytest.raises(DispatchError, match="terms is one term.*Fix: pass \\[term\\]"):
        EGraph.from_terms(("Add", 1, 2), backend="reference")
    assert EGraph.from_terms([("Add", 1, 2)], backend="reference").n_nodes == 3
    assert EGraph.from_terms((("Add", 1, 2), "x"), backend="reference").n_nodes == 4  # a tuple of terms is fine


def test_a_refused_closure_leaves_the_egraph_as_it_was():
    g = EGraph.from_arrays([0, 1, 2, 3], [0, 1, 2, 2], [0, 0, 0, 1, 2], [0, 1], backend="reference")
    with pytest.raises(DispatchError, match="progress='x'.*Fix:"):
        congruence_closure(g, [[0, 1]], progress="x")
    be, g._be = g._be, types.SimpleNamespace(name="elsewhere")  # as an EGraph built on another backend names it
    with pytest.raises(DispatchError, match="lives on 'elsewhere'.*Fix:"):
        congruence_closure(g, [[0, 1]], backend="reference")
    g._be = be
    assert g.find([0, 1]).tolist() == [0, 1]  # the unions were never applied
    with pytest.raises(VyreError, match="no backend named 'bogus'"):
        congruence_closure(g, [[0, 1]], backend="bogus")
    assert congruence_closure(g, [[0, 1]], backend="reference").classes_after == 2


def test_a_refused_add_or_lookup_does_not_rebuild_first():
    g = EGraph.from_arrays([0, 1, 2, 3], [0, 1, 2, 2], [0, 0, 0, 1, 2], [0, 1], backend="reference")
    g.union([[0, 1]])
    for call in (lambda: g.add([2], [0, 1], [7]), lambda: g.lookup([2], [0, 1], [7])):
        with pytest.raises(DispatchError, match="outside 0..3"):
            call()
        assert g._pending  # the unions still wait for a rebuild the caller asked for
    assert g.lookup([2], [0, 1], [0]).tolist() == [2]


@pytest.mark.parametrize("call, fragment", [
    (lambda g: g.find([0]), "has none yet"), (lambda g: g.union([[0, 0]]), "has none yet"),
])
def test_ids_of_an_egraph_without_classes_say_so(call, fragment):
    g = EGraph.from_arrays([], [], [0], [], backend="reference")
    with pytest.raises(DispatchError, match="Fix:") as e:
        call(g)
    assert fragment in str(e.value) and "0..-1" not in str(e.value)
    assert g.find([]).size == 0


@pytest.mark.parametrize("eclass, fragment", [
    ([0, 2**64], "integers beyond 64 bits"),
    (np.ma.MaskedArray([0, 1], mask=[0, 1]), "masked array"),
])
def test_ids_numpy_would_misread_are_refused(eclass, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        EGraph.from_arrays(eclass, [0, 0], [0, 0, 0], [], backend="reference")
    assert fragment in str(e.value)


def test_a_closure_of_a_tuple_of_the_wrong_length_says_its_length():
    with pytest.raises(DispatchError, match="tuple of 3 items.*Fix:"):
        congruence_closure(([0], [0], [0, 0]), backend="reference")


def test_operator_names_are_text_in_the_drawing():
    pytest.importorskip("graphviz")
    g = EGraph.from_arrays([0, 1], [0, 1], [0, 0, 0], [], ops=['a"b\\', "x\\l"], backend="reference")
    source = g.to_graphviz().source
    assert 'label="a\\"b\\\\"' in source and 'label="x\\\\l"' in source


def test_running_out_of_host_memory_while_building_is_a_vyre_error(monkeypatch):
    from vyre_numba.egraph import host, workload
    from vyre_numba.errors import HostMemoryError

    def no_memory(*a, **k):
        raise MemoryError("Unable to allocate 16.0 GiB")

    monkeypatch.setattr(host, "HostEGraph", no_memory)
    with pytest.raises(HostMemoryError, match="building the e-graph.*Fix:"):
        EGraph.from_arrays([0], [0], [0, 0], [], backend="reference")
    monkeypatch.setattr(workload, "_arithmetic", no_memory)
    with pytest.raises(HostMemoryError, match="Fix: make fewer e-nodes"):
        workload.arithmetic(100)


# ---- found by a second red-team: threads, typed leaves, serialized copies and names ---------------

def test_threads_adding_to_one_egraph_get_one_class_per_distinct_node():
    import sys
    import threading

    g = EGraph.from_arrays([0], [0], [0, 0], [], backend="reference")
    threads, per = 6, 60
    got, errors, go = {}, [], threading.Event()

    def work(t):
        go.wait()
        try:
            got[t] = [int(g.add([1 + t * per + k], [0, 0], [])[0]) for k in range(per)]
            got[t] += [int(g.add([1 + t * per], [0, 0], [])[0])]  # added already: its class again
        except Exception as e:  # any error is a failure of the lock
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, inside an add
    try:
        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        go.set()
        for w in workers:
            w.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    classes = [c for t in range(threads) for c in got[t][:-1]]
    assert len(set(classes)) == threads * per and all(got[t][-1] == got[t][0] for t in range(threads))
    assert g.n_nodes == g.n_classes == threads * per + 1
    r = g.rows()
    assert np.array_equal(r["eclass"], np.arange(g.n_nodes)) and r["children_offsets"].size == g.n_nodes + 1


def test_a_close_from_another_thread_waits_for_the_call_in_flight():
    from races import assert_close_waits_for_users

    g = EGraph.from_arrays(*chain_pair(30), backend="reference")
    want = naive_closure(*chain_pair(30), [(0, 1)])
    g.union([[0, 1]])

    def use():
        return np.array_equal(congruence_closure(g).eclass, want)
    assert_close_waits_for_users(use, g.close, "EGraph was closed")


@pytest.mark.parametrize("terms, same", [
    ([1, "1"], False), ([("Add", 1, 2), ("Add", "1", "2")], False), ([np.float32(0.1), 0.1], False),
    ([1, 1.0], False), ([1, np.int64(1)], True), ([np.uint8(7), 7], True),
    ([0.0, -0.0], True), ([float("nan"), np.float64("nan")], True), ([np.float32(0.5), 0.5], True),
    (["x", ("x",)], True),
])
def test_leaves_are_typed_literals(terms, same):
    g = EGraph.from_terms(terms, backend="reference")
    a, b = g.term_classes.tolist()
    assert (a == b) is same, g.ops
    assert len(set(g.ops)) == len(g.ops)


def test_a_number_named_as_a_str_leaf_gets_its_type_in_its_name():
    g = EGraph.from_terms([("Add", 1, "1"), 2, 2.0], backend="reference")
    assert g.ops == ("1:int", "1", "Add", "2", "2.0")
    assert EGraph.from_terms([1, 2.5, "a"], backend="reference").ops == ("1", "2.5", "a")  # names as they were


@pytest.mark.parametrize("leaf, fragment", [(10**5000, "too many digits"), (np.longdouble(1) / 3, "wider than"),
                                            (True, "a bool"), (None, "NoneType")],
                         ids=["huge int", "longdouble", "bool", "None"])
def test_leaves_that_cannot_be_named_exactly_are_refused(leaf, fragment):
    with pytest.raises(DispatchError, match="Fix:") as e:
        EGraph.from_terms([("f", leaf)], backend="reference")
    assert fragment in str(e.value)


@pytest.mark.parametrize("key", [1.0, True, None])
def test_node_ids_json_would_rename_are_refused(key):
    data = {"nodes": {key: {"op": "x", "children": [], "eclass": "A"},
                      "f": {"op": "f", "children": [], "eclass": "F"}}}
    with pytest.raises(DispatchError, match="node id .* node ids are strings.*Fix:"):
        EGraph.from_serialized(data, backend="reference")


def test_a_serialized_dict_is_copied_when_read():
    data = {"nodes": {"a": {"op": "x", "children": [], "eclass": "A", "cost": [1]}},
            "root_eclasses": ["A"], "class_data": {"A": {"type": "Int"}}}
    g = EGraph.from_serialized(data, backend="reference")
    before = g.to_serialized()
    data["class_data"]["A"]["type"] = "changed"
    data["class_data"]["B"] = {}
    data["root_eclasses"].append("ZZZ")
    data["nodes"]["a"]["cost"].append(999)
    assert g.to_serialized() == before


@pytest.mark.parametrize("text, key", [
    ('{"nodes": {"a": {"op": "x", "children": [], "eclass": "A"}, "a": {"op": "y", "children": [], "eclass": "B"}}}',
     "'a'"),
    ('{"nodes": {"a": {"op": "x", "op": "y", "children": [], "eclass": "A"}}}', "'op'"),
    ('{"nodes": {}, "nodes": {"a": {"op": "x", "children": [], "eclass": "A"}}}', "'nodes'"),
])
def test_a_key_repeated_in_serialized_json_is_refused_not_dropped(text, key):
    """json.loads keeps a repeated key's last value: a node (or its op) would be lost silently."""
    for data in (text, text.encode()):
        with pytest.raises(DispatchError, match=f"repeats the key {key} in one JSON object.*Fix: give every node"):
            EGraph.from_serialized(data, backend="reference")


@pytest.mark.parametrize("method", ["add", "lookup"])
def test_a_missing_operator_name_is_named_as_missing_and_a_str_subclass_is_kept_as_str(method):
    pd = pytest.importorskip("pandas")
    g = EGraph.from_terms([("f", "x")], backend="reference")
    for op, shown_as in ((["x", None], "None"), (pd.Series(["x", None], dtype="string"), "<NA>"),
                         (["x", np.nan], "nan"), (pd.Categorical(["x", np.nan]), "nan")):
        with pytest.raises(DispatchError, match=rf"^{method} op has no operator name at position 1 \({shown_as}\), "
                                                r"among names\. Fix: name every"):
            getattr(g, method)(op, [0, 0, 0], [])
    with pytest.raises(DispatchError, match=r"mixes operator names and ids \(position 1 holds 3\)\. Fix:"):
        getattr(g, method)(["x", 3], [0, 0, 0], [])
    g.add([np.str_("q")], [0, 0], [])
    assert g.ops == ("x", "f", "q") and all(type(o) is str for o in g.ops)


def test_term_classes_are_read_only():
    g = EGraph.from_terms([("f", "x"), "x"], backend="reference")
    before = g.term_classes.copy()
    with pytest.raises(ValueError, match="read-only"):
        g.term_classes[0] = 99
    assert np.array_equal(g.term_classes, before)


def test_merged_classes_keep_their_data_and_roots_keep_their_order():
    data = {"nodes": {"a": {"op": "x", "children": [], "eclass": "A"},
                      "b": {"op": "y", "children": [], "eclass": "B"},
                      "c": {"op": "z", "children": [], "eclass": "C"}},
            "root_eclasses": ["C", "B", "A"],
            "class_data": {"A": {"type": "Int"}, "B": {"type": "Int", "note": "keep me"}, "gone": {}}}
    g = EGraph.from_serialized(data, backend="reference")
    g.union([[0, 1]])
    g.rebuild()
    out = json.loads(g.to_serialized())
    assert [n["eclass"] for n in out["nodes"].values()] == ["A", "A", "C"]
    assert out["class_data"] == data["class_data"]  # B's under its own name; "gone" (no node's) as read
    assert out["root_eclasses"] == ["C", "A"]  # B is A's now: each once, in the order read
    again = json.loads(EGraph.from_serialized(out, backend="reference").to_serialized())
    assert again == out  # Regression (a red-team): a second round trip dropped B's data, no node naming B


@pytest.mark.parametrize("limit", [-1, 1.5, "3", True])
def test_a_listing_limit_is_checked(limit):
    from vyre_numba.egraph import view

    g = EGraph.from_arrays([0, 1], [0, 1], [0, 0, 1], [0], backend="reference")
    with pytest.raises(DispatchError, match="limit.*Fix:"):
        view.rows(g, limit)
    assert len(view.rows(g, 1)) == 1 and len(view.rows(g, None)) == 2


@pytest.mark.parametrize("call, fragment", [
    (lambda: EGraph.from_arrays([np.uint64(2**63), np.int64(0)], [0, 0], [0, 0, 0], [], backend="reference"),
     r"eclass holds an integer past int64 \(such as 9223372036854775808\).*Fix: renumber every class id"),
    (lambda: EGraph.from_arrays([0], [0], [0, 2**63], [], backend="reference"),
     "children_offsets holds an integer past int64.*Fix: children_offsets are positions in children"),
])
def test_integers_past_int64_are_named_for_what_they_are(call, fragment):
    with pytest.raises(DispatchError, match=fragment):
        call()


# ---- found by a red-team of failure atomicity: interrupted and refused calls -----------------------


def on(g: EGraph, device: bool) -> EGraph:
    """`g` (built on the reference backend, not yet rebuilt) with its rows on the device, where asked
    (the CUDA simulator stands in for a GPU)."""
    if device:
        from vyre_numba.egraph.device import DeviceEGraph

        h = g._g
        g._g = DeviceEGraph(h.eclass, h.op, h.offsets, h.children, h.n_classes)
    return g


def assert_sound(g: EGraph) -> None:
    """`g` is an e-graph a finished call could have left: rows of matching lengths, every operator
    named, each id's find a root, each row's class the root of its class id, and a rebuild pending
    wherever a union or a row may not be filed yet (checked by the calls that follow)."""
    r = g.rows()
    n = g.n_nodes
    assert r["eclass"].size == r["op"].size == n and r["children_offsets"].size == n + 1
    assert r["children_offsets"][-1] == r["children"].size
    assert g.ops is None or r["op"].max(initial=-1) < len(g.ops)
    roots = g.find(np.arange(g.n_classes))
    assert np.array_equal(g.find(roots), roots) and np.all(roots <= np.arange(g.n_classes))
    assert np.array_equal(g.classes(), roots[r["eclass"]])


def final(g: EGraph, got, rebuild: bool = True) -> tuple:
    """What `g` holds, after a rebuild where asked, with the results `got` of the calls made."""
    if rebuild:
        g.rebuild()
    r = g.rows()
    return (list(g.ops or ()), [np.asarray(x).tolist() for x in got], g.classes().tolist(),
            g.find(np.arange(g.n_classes)).tolist(), *(r[k].tolist() for k in sorted(r)))


def check_interrupted_adds(device: bool = False, within: str = "", every: int = 1) -> int:
    """An add interrupted at every `every`-th event, then done again, and a new operator added after
    it: the same e-graph as with no interruption. The events interrupted."""
    def fresh():
        g = on(EGraph.from_terms([("g", "a"), ("g", "b"), ("f", "a", "b")], backend="reference"), device)
        g.rebuild()
        a, b = (int(x) for x in g.lookup(["a", "b"], [0, 0, 0], []))
        g.union([[a, b]])  # pending: the add rebuilds first
        return g, a, b

    def add(g, a, b):
        return g.add(["h", "h", "g"], [0, 1, 2, 3], [a, b, a])  # h(a) = h(b) after the rebuild; g(a) exists

    def after(g, a, b):
        return [add(g, a, b), g.add(["k"], [0, 1], [a]), g.lookup(["h", "k", "g"], [0, 1, 2, 3], [a, a, b])]

    g, a, b = fresh()
    want = final(g, after(g, a, b))
    assert len(set(want[1][2])) == 3 and want[0][-2:] == ["h", "k"]
    k = 0
    while True:
        k += every
        g, a, b = fresh()
        if not interrupted(k, lambda: add(g, a, b), within):
            return k // every
        assert_sound(g)
        assert final(g, after(g, a, b)) == want, k


def check_interrupted_unions(device: bool = False, within: str = "", every: int = 1) -> int:
    """A union and then a rebuild, each interrupted at every `every`-th event: the e-graph is sound
    right after (a rebuild pending unless it is as before the call or as after the rebuild), and
    once the call is done again it is the e-graph of no interruption. The events interrupted."""
    pairs = [[1, 0], [2, 1], [3, 2], [5, 4]]  # a chain: linking them takes several rounds of pointer jumping

    def fresh():
        g = on(EGraph.from_arrays(*chain_pair(4), backend="reference"), device)
        g.rebuild()
        return g

    g = fresh()
    before = final(g, [], rebuild=False)
    g.union(pairs)
    want = final(g, [])
    assert len(set(want[2])) < g.n_nodes
    k, done = 0, [False, False]
    while not all(done):
        k += every
        for second in (False, True):
            if done[second]:
                continue
            g = fresh()
            if second:
                g.union(pairs)
            call = g.rebuild if second else (lambda: g.union(pairs))
            if not interrupted(k, call, within):
                done[second] = True
                continue
            assert_sound(g)
            if "rebuild pending" not in repr(g):
                assert final(g, [], rebuild=False) in (before, want), (k, second)
            if not second:
                g.union(pairs)
            assert final(g, []) == want, (k, second)
    return k // every


def test_an_interrupted_add_keeps_every_row_it_added_named():
    """Regression: a Ctrl-C (any exception) in add after its rows went in rolled back their new
    operator names but kept the rows, so the next new name took the same id and was hash-consed
    onto them (k(a) answered with the class of h(a), which no lookup found any more)."""
    assert check_interrupted_adds() > 100


def test_an_interrupted_union_or_rebuild_leaves_a_sound_egraph():
    """Regression: a Ctrl-C inside a union (or a rebuild's unions) left the union-find half linked:
    find gave ids that were not roots, and the next union could split a class; a union stopped
    after its merges did not mark the rebuild pending."""
    assert check_interrupted_unions() > 50


@pytest.mark.parametrize("shape", ["shared child", "chains"])
def test_a_rebuild_interrupted_anywhere_loses_no_merge_and_names_no_class_ahead_of_find(shape, rounds):
    """Regression (a differential fuzzer): the scalar rounds wrote a slot's new class into the rows
    before their unions reached the union-find. A Ctrl-C between left h(0, 2) beside h(0, 3), no
    longer congruent, so the next rebuild converged with classes 2 and 3 apart; and rows named
    classes that find did not. Interrupted at every event of the e-graph's code: every child still
    names the class its first id has, and a rebuild after gives the closure."""
    rows_ = {"shared child": (np.arange(4), np.array([0, 1, 2, 2]), np.array([0, 0, 0, 2, 4]), np.array([0, 3, 1, 3])),
             "chains": chain_pair(3)}[shape]
    want = naive_closure(*rows_, [(0, 1)])
    k = 0
    while True:
        k += 1
        g = EGraph.from_arrays(*rows_, backend="reference")
        g.rebuild()
        g.union([[0, 1]])
        if not interrupted(k, g.rebuild, "egraph"):
            break
        assert_sound(g)
        assert np.array_equal(g.find(g.rows()["children"]), g.find(rows_[3])), k
        g.rebuild()
        assert np.array_equal(g.classes(), want), k
    assert k > 20


def test_a_refused_add_leaves_pending_unions_pending():
    """Regression: add rebuilt before checking its children, so an add refused for a child of no
    e-node had already applied the pending unions."""
    g = EGraph.from_arrays([0, 2, 3], [0, 1, 1], [0, 0, 1, 2], [0, 0], backend="reference")  # class 1 has no row
    g.rebuild()
    g.union([[2, 3]])
    before = final(g, [], rebuild=False)
    with pytest.raises(DispatchError, match="no e-node is in class 1") as e:
        g.add([1], [0, 1], [1])
    assert "Fix:" in str(e.value) and "rebuild pending" in repr(g)
    assert final(g, [], rebuild=False) == before
    (new,) = g.add([1], [0, 1], [0])  # g(0), in class 2 and 3 alike: the add rebuilds first
    assert "rebuild pending" not in repr(g) and g.find([new])[0] == g.find([2])[0] and g.n_nodes == 3


@pytest.mark.gpu
def test_gpu_an_interrupted_add_union_or_rebuild_on_the_device_leaves_a_sound_egraph():
    """The two regressions above with the rows on the GPU (DeviceEGraph), interrupted at every
    25th event of the e-graph's code (each interruption rebuilds a fresh e-graph on the device)."""
    assert check_interrupted_adds(device=True, within="egraph", every=25) > 10
    assert check_interrupted_unions(device=True, within="egraph", every=25) > 10


GPU_CASES = {"chains": lambda: (chain_pair(300), [(0, 1)]), "fan": lambda: (fan(700), [(0, 1)]),
             "bucket": lambda: bucket(2000), "workload": lambda: (lambda *w: (tuple(w[:4]), w[4]))(*workload_rows(1 << 12)),
             "random": lambda: (lambda r: (r, np.random.default_rng(7).integers(0, int(r[0].max()) + 1, (30, 2))))(
                 random_egraph(np.random.default_rng(7), 3000, n_ops=2))}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_gpu_rounds_in_one_persistent_launch_are_the_host_rounds(case, monkeypatch):
    """The device rebuild's rounds run in a persistent launch (`kernels.rounds_on_device`) or one
    host read a round (where the GPU cannot launch cooperatively, or `rebuild(persistent=False)`,
    which gives each phase its device time): the same classes (the simple closure's) and the same rounds, unions and rows
    touched, also where each launch stops after 3 rounds to report, and where a round of more than
    3 rows goes back to the host (the launch hands back, the host lists it again)."""
    from vyre_numba.egraph import device
    from vyre_numba.egraph.kernels import OUTCOME

    r, unions = GPU_CASES[case]()
    want = naive_closure(*r, unions)
    outcomes = []
    real = device.DeviceEGraph._rounds_on_device

    def spy(self, clock, budget):
        st = real(self, clock, budget)
        outcomes.append(int(st[OUTCOME]))
        return st

    def closed(mode):
        with monkeypatch.context() as m:
            m.setattr(device.DeviceEGraph, "_rounds_on_device", spy)
            if mode == "host":
                m.setattr(device, "_cooperative", lambda: False)
            if mode == "paused":
                m.setattr(device, "ROUNDS_PER_LAUNCH", 3)
            if mode == "handed back":
                m.setattr(device.DeviceEGraph, "_room", lambda self: 3)
            del outcomes[:]
            kw = {"persistent": False} if mode == "persistent=False" else {}
            g = EGraph.from_arrays(*r, backend="cuda")
            first = g.rebuild(**kw)
            g.union(unions)
            s = g.rebuild(**kw)
            if kw and s.rounds:
                assert s.phase_ns["on_device"] == 0 and s.phase_ns["insert"] > 0, s.phase_ns
            assert first.converged and s.converged and np.array_equal(g.classes(), want), mode
            idle = g.rebuild()
            assert idle.converged and (idle.rounds, idle.unions, idle.nodes_touched) == (0, 0, 0), mode
            return [(x.rounds, x.unions, x.nodes_touched) for x in (first, s)], set(outcomes)

    host, none = closed("host")
    assert none == set()
    assert closed("persistent=False") == (host, set())  # the public switch: every round from the host
    for mode, need in (("on device", {0}), ("paused", {1} if host[1][0] > 3 else set()),
                       ("handed back", {2} if case == "fan" else set())):
        got, seen = closed(mode)
        assert got == host, (mode, got, host)
        assert need <= seen and 4 not in seen, (mode, seen)


@pytest.mark.gpu
def test_gpu_a_persistent_launch_that_gives_up_at_its_barrier_says_so_and_loses_nothing(monkeypatch):
    """With no polls allowed at the grid barrier, the blocks that arrive first give up: the rebuild
    raises BarrierTimeoutError with a Fix, and the next rebuild (with the real bound) files every row
    afresh and gives the closure."""
    from vyre_numba.egraph import device
    from vyre_numba.errors import BarrierTimeoutError

    r = chain_pair(200)
    g = EGraph.from_arrays(*r, backend="cuda")
    g.rebuild()
    g.union([[0, 1]])
    with monkeypatch.context() as m:
        m.setattr(device, "SPINS", 0)
        with pytest.raises(BarrierTimeoutError, match="Fix: check the device"):
            g.rebuild()
    assert "rebuild pending" in repr(g)
    s = g.rebuild()
    assert s.converged and np.array_equal(g.classes(), naive_closure(*r, [(0, 1)]))


def test_more_rows_than_the_table_can_address_are_refused_and_nothing_is_added(monkeypatch):
    """Regression (a red-team): class ids were bounded but rows were not, while the device keeps
    row ids and hash-table slots (4 a row) in int32: past 2**29 rows slots wrapped negative."""
    from vyre_numba.egraph import egraph as module

    assert module.MAX_ROWS == 2**29 - 1
    monkeypatch.setattr(module, "MAX_ROWS", 4)
    with pytest.raises(DispatchError, match=r"5 e-nodes \(rows\) pass the e-graph's limit.*Fix: split the e-graph"):
        EGraph.from_arrays(np.arange(5), np.zeros(5, np.int64), np.zeros(6, np.int64), np.zeros(0, np.int64),
                           backend="reference")
    g = EGraph.from_arrays(np.arange(3), np.arange(3), np.zeros(4, np.int64), np.zeros(0, np.int64),
                           backend="reference")
    assert g.add([7], [0, 1], [0]).tolist() == [3]  # the fourth row fits
    with pytest.raises(DispatchError, match=r"6 e-nodes \(rows\) pass the e-graph's limit.*nothing was added"):
        g.add([8, 9], [0, 1, 2], [1, 2])
    assert (g.n_nodes, g.n_classes) == (4, 4)
    assert g.add([7], [0, 1], [0]).tolist() == [3]  # an existing e-node adds no row: still answered
    # Regression (a red-team): with unions pending, the row limit was checked after the rebuild, so
    # a refused add had rebuilt ("changes nothing (pending unions stay pending)" was false).
    g.union([[0, 1]])
    with pytest.raises(DispatchError, match=r"up to 6 e-nodes \(rows\) pass.*nothing was added.*Call rebuild"):
        g.add([8, 9], [0, 1, 2], [1, 2])
    assert "rebuild pending" in repr(g) and (g.n_nodes, g.n_classes) == (4, 4)
    assert g.find([1]).tolist() == [0]


def test_terms_made_as_they_are_read_keep_their_own_classes():
    """Regression (a red-team): from_terms told shared subterms apart by id() without keeping them
    alive, so a Sequence making each term on access got a freed term's class for the next: 1,000
    distinct terms landed in 2 classes."""
    from collections.abc import Sequence

    class Made(Sequence):
        def __len__(self):
            return 1000

        def __getitem__(self, i):
            if not 0 <= i < 1000:
                raise IndexError(i)
            return ("Neg", ("Add", i, i + 1))

    made, listed = EGraph.from_terms(Made(), backend="reference"), EGraph.from_terms(list(Made()), backend="reference")
    assert len(set(made.term_classes.tolist())) == 1000
    assert np.array_equal(made.term_classes, listed.term_classes) and made.n_nodes == listed.n_nodes


@pytest.mark.parametrize("backend", BACKENDS)
def test_find_of_one_id_answers_one_id(backend):
    """Regression (an API review): find(3) said "ids has shape ()", where unique.index_of answers a
    scalar with one."""
    g = EGraph.from_terms([("f", "a"), ("g", "a"), "b"], backend=backend)
    a, b = g.find(1), g.find(np.int64(2))
    g.union([[0, 2]])
    assert g.find(2) == 0 and np.ndim(g.find(2)) == 0 and g.find([2]).tolist() == [0]
    assert g.find(np.array(2)) == 0 and np.ndim(g.find(np.array(np.uint8(2)))) == 0
    for bad in (True, -1, 10**6, 1.0):
        with pytest.raises(DispatchError, match="Fix:"):
            g.find(bad)
    assert (a, b) == (1, 2)


# ---- a red-team's findings (session 42) --------------------------------------------------------

def test_a_duplicate_operator_name_in_a_long_list_is_named_at_once():
    """Regression: the duplicate was found by slicing the list at each name (quadratic: 24 s for
    40,000 names, days for a million)."""
    ops = [f"c{i}" for i in range(200_000)] + ["c7"]
    with pytest.raises(DispatchError, match="ops names 'c7' twice.*Fix: pass distinct names"):
        EGraph.from_arrays([0], [0], [0, 0], [], ops=ops, backend="reference")


def test_a_bad_progress_setting_is_refused_before_add_changes_anything(monkeypatch):
    """Regression: with $VYRE_NUMBA_PROGRESS unreadable, add appended its rows, then its filing
    rebuild raised: the new class ids were lost and every later add or lookup failed alike."""
    from vyre_numba.errors import SettingError

    g = EGraph.from_terms(["x", "y"], backend="reference")
    g.rebuild(progress=False)
    monkeypatch.setenv("VYRE_NUMBA_PROGRESS", "2")
    for call in (lambda: g.add(["f"], [0, 1], [0]), lambda: g.lookup(["x"], [0, 0], [])):
        with pytest.raises(SettingError, match="VYRE_NUMBA_PROGRESS.*Fix:"):
            call()
    assert g.n_nodes == 2 and tuple(g.ops) == ("x", "y")
    monkeypatch.delenv("VYRE_NUMBA_PROGRESS")
    assert g.add(["f"], [0, 1], [0]).tolist() == [2]


@pytest.mark.parametrize("call,fragment", [
    (lambda g: g.find(bytearray(b"\x00\x01")), "ids is raw bytes"),
    (lambda g: g.union(memoryview(bytearray(b"\x00\x01")).cast("B", (1, 2))), "pairs is raw bytes"),
    (lambda g: g.add([0], bytearray(b"\x00\x01"), [0]), "children_offsets is raw bytes"),
    (lambda g: g.union(None), "pairs is a NoneType; union takes a"),
    (lambda g: g.union({0: 1}), "pairs is a dict; union takes a"),
    (lambda g: g.union([0, 1]), r"pairs has shape \(2,\); union takes a"),
])
def test_raw_bytes_and_non_arrays_are_told_as_such(call, fragment):
    g = EGraph.from_arrays([0, 1], [0, 0], [0, 0, 0], [], backend="reference")
    with pytest.raises(DispatchError, match=f"{fragment}.*Fix:"):
        call(g)
    assert g.find([0, 1]).tolist() == [0, 1] and g.n_nodes == 2


def test_a_missing_id_in_a_pandas_column_is_told_as_missing_not_as_a_float():
    pd = pytest.importorskip("pandas")
    g = EGraph.from_arrays([0, 1], [0, 0], [0, 0, 0], [], backend="reference")
    with pytest.raises(DispatchError, match=r"ids is a pandas Series with 1 missing value.*Fix: pass x.fillna"):
        g.find(pd.Series([1, None], dtype="Int64"))


def test_an_op_one_short_is_told_against_eclass_not_the_offsets():
    with pytest.raises(DispatchError, match="eclass has 2 entries and op 1.*Fix: pass arrays of equal length"):
        EGraph.from_arrays([0, 1], [0], [0, 0, 0], [], backend="reference")


def test_class_data_keyed_by_an_int_is_kept_as_json_text_keeps_it():
    data = {"nodes": {"a": {"op": "x", "children": [], "eclass": "1"}}, "root_eclasses": ["1"],
            "class_data": {1: {"type": "Math"}}}
    want = EGraph.from_serialized(json.dumps(data)).to_serialized()
    assert EGraph.from_serialized(data).to_serialized() == want and '"1": {"type": "Math"}' in want
    for bad, fragment in (({1: {}, "1": {}}, "an int key and a string key"), ({1.5: {}}, "the key 1.5")):
        with pytest.raises(DispatchError, match=f"class_data.*{fragment}.*Fix:"):
            EGraph.from_serialized(dict(data, class_data=bad))


def test_adds_file_their_rows_into_the_kept_index_and_stay_exact():
    """Performance regression guard (a red-team): a one-row add re-hashed and sorted every row (0.8 s
    at 1.6M rows); the converged rebuild's index now takes the new rows. Whatever the path, the index
    must equal a fresh one and the classes those of the same rows built from scratch."""
    from vyre_numba.egraph.signature import signature_hash

    rng = np.random.default_rng(7)
    g = EGraph.from_terms([("f", "a", "b"), ("g", "a"), "c"], backend="reference")
    for step in range(60):
        n = g.n_classes
        k = int(rng.integers(1, 4))
        kids = rng.integers(0, n, 2 * k)
        g.add(rng.integers(0, 3, k).tolist(), list(range(0, 2 * k + 1, 2)), kids.tolist())
        if step % 7 == 3:
            g.union([[int(rng.integers(0, g.n_classes)), int(rng.integers(0, g.n_classes))]])
        if step % 5 == 0:
            g.rebuild(progress=False)
            h = g._g
            hashes, order, hs = h._index
            assert np.array_equal(hashes, signature_hash(h.op, h.offsets, h.children))
            assert np.array_equal(hs, hashes[order]) and np.all(hs[1:] >= hs[:-1])
            assert np.array_equal(np.sort(order), np.arange(h.n))
    g.rebuild(progress=False)
    d = g._g.download()
    fresh = EGraph.from_arrays(d["eclass"], d["op"], d["offsets"], d["children"], backend="reference")
    fresh.rebuild(progress=False)
    assert np.array_equal(fresh.find(d["eclass"]), g.find(d["eclass"]))


def test_a_path_to_a_serialized_egraph_is_told_to_be_read_first(tmp_path):
    from pathlib import Path

    f = tmp_path / "g.json"
    f.write_text(json.dumps({"nodes": {"a": {"op": "x", "children": [], "eclass": "c"}}}))
    for given in (str(f), Path(f)):
        with pytest.raises(DispatchError, match=r"Fix: .*pass its text, open\(path\).read\(\)"):
            EGraph.from_serialized(given)
    assert EGraph.from_serialized(f.read_text()).n_nodes == 1

    f.write_text(json.dumps({"nodes": {"a": {"op": "x", "children": [], "eclass": "c"}}}), encoding="utf-8-sig")
    with pytest.raises(DispatchError, match=r"begins with a byte-order mark.*Fix: read the file with "
                                            r"encoding='utf-8-sig' \(or pass its bytes"):  # was "not JSON" (a red-team)
        EGraph.from_serialized(f.read_text())
    assert EGraph.from_serialized(f.read_text(encoding="utf-8-sig")).n_nodes == 1
    assert EGraph.from_serialized(f.read_bytes()).n_nodes == 1


def test_operator_names_given_as_bytes_are_told_to_decode():
    """Regression (a red-team): ops=[b'Add'] was told [str(o) for o in ops], which names it "b'Add'", so
    later calls by name missed it; add/lookup with bytes names were told ids are integers."""
    with pytest.raises(DispatchError, match=r"ops holds b'Add' \(bytes\); operator names are str\. Fix: pass names, "
                                            r"e\.g\. \[o\.decode\(\) for o in ops\]"):
        EGraph.from_arrays([0, 1], [1, 0], [0, 0, 2], [0, 0], ops=[b"Add", b"x"], backend="reference")
    g = EGraph.from_terms([("Add", "x", "x")], backend="reference")
    for call in (lambda: g.add([b"Mul"], [0, 2], [0, 0]), lambda: g.lookup(np.array([b"Add"]), [0, 2], [0, 0])):
        with pytest.raises(DispatchError, match=r"op holds bytes \(b'(Mul|Add)'\); operator names are str\. Fix: "
                                                r"decode them"):
            call()
    decoded = g.lookup(np.char.decode(np.array([b"Add"])), [0, 2], [0, 0])  # the Fix, followed
    assert decoded.tolist() == g.lookup(["Add"], [0, 2], [0, 0]).tolist() == [g.find(g.term_classes)[0]]


def test_union_of_a_table_with_a_missing_id_is_told_as_missing():
    pd = pytest.importorskip("pandas")
    g = EGraph.from_arrays([0, 1], [0, 0], [0, 0, 0], [], backend="reference")
    with pytest.raises(DispatchError, match=r"pairs is a pandas DataFrame with 1 missing value.*row 1.*Fix:"):
        g.union(pd.DataFrame({"a": pd.array([0, None], "Int64"), "b": [1, 1]}))
    g.union(pd.DataFrame({"a": pd.array([0], "Int64"), "b": [1]}))
    assert g.find([0, 1]).tolist() == [0, 0]


def test_serialized_values_of_any_json_depth_and_long_ints_are_read_or_refused_with_a_fix():
    deep: list = []
    for _ in range(600):  # deeper than copy.deepcopy goes, well within what JSON text reads
        deep = [deep]
    for d in ({"nodes": {"a": {"op": "x", "eclass": "A", "cost": deep}}},
              {"nodes": {"a": {"op": "x", "eclass": "A"}}, "class_data": {"A": deep}}):
        back = json.loads(EGraph.from_serialized(d, backend="reference").to_serialized())
        assert back["nodes"]["a"].get("cost", []) == d["nodes"]["a"].get("cost", [])  # as given, copied
        assert back["class_data"] == d.get("class_data", {})
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(DispatchError, match="nests too deep to read.*Fix:"):
        EGraph.from_serialized({"nodes": {"a": {"op": "x", "eclass": "A", "cost": deep}}}, backend="reference")
    text = '{"nodes": {"a": {"op": "x", "eclass": "A", "cost": ' + "9" * 5000 + "}}}"
    for data in (text, {"nodes": {"a": {"op": "x", "eclass": "A", "cost": 10**5000}}}):
        with pytest.raises(DispatchError, match=r"more digits than Python converts.*Fix: call "
                                                r"sys.set_int_max_str_digits\(0\)"):
            EGraph.from_serialized(data, backend="reference")
    import sys

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # the Fix, followed
    try:
        out = EGraph.from_serialized(text, backend="reference").to_serialized()
        assert json.loads(out)["nodes"]["a"]["cost"] == int("9" * 5000)
    finally:
        sys.set_int_max_str_digits(limit)


def test_serialized_node_ids_match_children_as_json_text_would():
    want = {"1": {"op": "x", "children": [], "eclass": "A"}, "2": {"op": "f", "children": ["1"], "eclass": "B"}}
    for nodes in ({1: {"op": "x", "eclass": "A"}, 2: {"op": "f", "children": ["1"], "eclass": "B"}},
                  {"1": {"op": "x", "eclass": "A"}, "2": {"op": "f", "children": [1], "eclass": "B"}}):
        for data in ({"nodes": nodes}, json.dumps({"nodes": nodes})):
            assert json.loads(EGraph.from_serialized(data, backend="reference").to_serialized())["nodes"] == want


def test_operator_ids_out_of_range_are_told_about_operator_ids():
    with pytest.raises(DispatchError, match=r"op holds -1.*Fix: renumber the operator ids.*np.unique\(op, "
                                            r"return_inverse=True\)"):
        EGraph.from_arrays([0], [-1], [0, 0], [], backend="reference")
    g = EGraph.from_arrays([0], [0], [0, 0], [], backend="reference")
    for call in (lambda: g.add([-3], [0, 0], []), lambda: g.lookup([2**31], [0, 0], [])):
        with pytest.raises(DispatchError, match="Fix: use the operator ids the e-graph's rows use"):
            call()


def test_lookup_of_an_operator_id_past_the_named_operators_is_refused_as_add_refuses_it():
    g = EGraph.from_arrays([0, 1], [0, 1], [0, 0, 0], [], ops=["a", "b"], backend="reference")
    for call in (lambda: g.add([2], [0, 0], []), lambda: g.lookup([2], [0, 0], [])):
        with pytest.raises(DispatchError, match=r"op holds 2, but the e-graph names 2 operators\. Fix: use an "
                                                r"operator id below that, or the operator's name\."):
            call()
    assert g.lookup([1], [0, 0], []).tolist() == [1]
    assert g.lookup(["c", "b"], [0, 0, 0], []).tolist() == [-1, 1]  # a name it never saw finds nothing
    assert list(g.ops) == ["a", "b"]  # the lookup named nothing new
