"""The reference interpreter's execution model: masks, loops, returns, workgroup memory, barriers,
subgroups, atomics, launch geometry and dispatch plumbing. Expectations are computed independently
in plain Python / NumPy."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from vyre_numba import DispatchConfig, DispatchError, VyreError, get_backend, ir
from vyre_numba.reference import ReferenceBackend, run

B = ir.BufferDecl
i, v = ir.var("i"), ir.var


def P(bufs, wg, body):
    return ir.Program(bufs, wg, body)


def test_registered_as_reference_backend():
    assert isinstance(get_backend("reference"), ReferenceBackend)
    assert get_backend("reference").name == "reference"


# ---- divergent control flow --------------------------------------------------------------------

def test_if_else_divergent_with_assign_in_branches():
    p = P([B.read("a", 0, "i32"), B.output("out", 1, "i32")], 64, [
        ir.let("i", ir.gid(0)),
        ir.let("x", ir.load("a", i)),
        ir.if_((v("x") & 1).eq(0),
               [ir.assign("x", v("x") * 3), ir.if_(v("x") > 30, ir.assign("x", v("x") - 1000))],
               [ir.assign("x", v("x") + 7)]),
        ir.store("out", i, v("x")),
    ])
    a = np.arange(-50, 150, dtype=np.int32)
    exp = [((x * 3) - 1000 if x * 3 > 30 else x * 3) if x % 2 == 0 else x + 7 for x in a.tolist()]
    assert run(p, [a])[0].tolist() == exp


@pytest.mark.parametrize("dtype", ["u8", "i16", "u32", "i64", "f32", "f64"])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000])
def test_a_masked_store_at_the_invocation_id_writes_only_where_the_mask_holds(dtype, n):
    """A store at invocation_id(0) under a mask (the bounds guard of a ragged size, or any
    condition) writes the lanes in the mask and leaves every other element's bits as they were
    (NaN payloads too); the store through the mask in place must match a per-element model."""
    rng = np.random.default_rng(n)
    nd = ir.DataType.parse(dtype).storage
    if nd.kind == "f":
        bits = np.dtype(f"u{nd.itemsize}")
        x = rng.integers(0, np.iinfo(bits).max, n, dtype=bits, endpoint=True).view(nd)
        old = rng.integers(0, np.iinfo(bits).max, n + 5, dtype=bits, endpoint=True).view(nd)
    else:
        x = rng.integers(np.iinfo(nd).min, np.iinfo(nd).max, n, dtype=nd, endpoint=True)
        old = rng.integers(np.iinfo(nd).min, np.iinfo(nd).max, n + 5, dtype=nd, endpoint=True)
    keep = rng.integers(0, 3, n).astype(np.uint32)
    p = P([B.read("x", 0, dtype), B.read("k", 1, "u32"), B.read_write("out", 2, dtype)], 64, [
        ir.let("i", ir.gid(0)),
        ir.if_(i < ir.buf_len("x"), ir.if_(ir.load("k", i).ne(0), ir.store("out", i, ir.load("x", i))))])
    (out,) = ReferenceBackend().dispatch(p, [x, keep, old.copy()])
    want = old.copy()
    for j in range(n):
        if keep[j]:
            want[j] = x[j]
    u = np.dtype(f"u{nd.itemsize}")
    assert out.view(u).tolist() == want.view(u).tolist()


def test_uniform_condition_takes_one_branch_for_everyone():
    p = P([B.read("a", 0, "u32"), B.output("out", 1, "u32")], 32, [
        ir.if_(ir.load("a", 0).eq(5), ir.store("out", ir.gid(0), 1), ir.store("out", ir.gid(0), 2))])
    assert run(p, [np.array([5, 0, 0], np.uint32)])[0].tolist() == [1, 1, 1]
    assert run(p, [np.array([4, 0, 0], np.uint32)])[0].tolist() == [2, 2, 2]


def test_loop_with_per_invocation_trip_counts_and_assign():
    p = P([B.read("a", 0, "u32"), B.output("out", 1, "u32")], 16, [
        ir.let("i", ir.gid(0)),
        ir.let("acc", ir.u32(0)),
        ir.loop("j", ir.load("a", i), i % 9, [
            ir.if_((v("j") % 2).eq(0), ir.assign("acc", v("acc") + v("j")), ir.assign("acc", v("acc") * 2)),
        ]),
        ir.store("out", i, v("acc")),
    ])
    a = np.array([(k * 5) % 4 for k in range(50)], np.uint32)
    exp = []
    for k in range(50):
        acc = 0
        for j in range(int(a[k]), k % 9):  # nothing when start >= end
            acc = (acc + j) if j % 2 == 0 else acc * 2
        exp.append(acc)
    assert run(p, [a])[0].tolist() == exp


def test_nested_loops_bounds_evaluated_once():
    p = P([B.output("out", 0, "u32", 20)], 4, [
        ir.let("i", ir.gid(0)), ir.let("n", i), ir.let("c", ir.u32(0)),
        ir.loop("j", 0, v("n"), [ir.assign("n", v("n") + 1),  # does not extend the loop
                                 ir.loop("k", v("j"), 3, ir.assign("c", v("c") + 1))]),
        ir.store("out", i, v("c") * 100 + v("n")),
    ])
    exp = []
    for k in range(20):
        c = sum(max(0, 3 - j) for j in range(k))
        exp.append(c * 100 + 2 * k)
    assert run(p, [])[0].tolist() == exp


def test_early_return_and_return_inside_loop():
    p = P([B.output("out", 0, "u32", 100), B.output("hit", 1, "u32", 100)], 32, [
        ir.let("i", ir.gid(0)),
        ir.if_((i % 3).eq(0), ir.return_()),
        ir.store("hit", i, 1),
        ir.loop("j", 0, 10, [
            ir.if_(v("j").eq(i % 7), [ir.store("out", i, v("j") + 100), ir.return_()]),
            ir.store("out", i, v("j")),
        ]),
        ir.store("out", i, 999),  # only reached when i % 7 >= 10: never
    ])
    out, hit = run(p, [])
    assert hit.tolist() == [0 if k % 3 == 0 else 1 for k in range(100)]
    assert out.tolist() == [0 if k % 3 == 0 else (k % 7) + 100 for k in range(100)]


def test_return_by_everyone_stops_everything():
    p = P([B.output("out", 0, "u32", 8)], 8, [ir.store("out", ir.gid(0), 1), ir.return_(),
                                               ir.store("out", ir.gid(0), 2)])
    assert run(p, [])[0].tolist() == [1] * 8


def test_load_is_a_value_not_a_view():
    p = P([B.read_write("x", 0, "f32"), B.output("out", 1, "f32")], 8, [
        ir.let("i", ir.gid(0)), ir.let("old", ir.load("x", i)),
        ir.store("x", i, ir.f32(0.0)), ir.store("out", i, v("old"))])
    x = np.arange(8, dtype=np.float32) + 1
    new_x, out = run(p, [x])
    assert out.tolist() == (np.arange(8) + 1).tolist() and new_x.tolist() == [0.0] * 8


# ---- workgroup memory and barriers -------------------------------------------------------------

def test_workgroup_reversal_with_barrier_and_partial_last_workgroup():
    W = 64
    p = P([B.read("a", 0, "i32"), B.output("out", 1, "i32"), B.workgroup("tile", W, "i32")], W, [
        ir.let("l", ir.lid(0)),
        ir.store("tile", v("l"), ir.load("a", ir.gid(0))),
        ir.barrier(),
        ir.store("out", ir.gid(0), ir.load("tile", W - 1 - v("l"))),
    ])
    n = 200
    a = np.arange(n, dtype=np.int32) * 3 - 7
    padded = np.zeros(256, np.int32)
    padded[:n] = a  # out-of-bounds loads give 0
    exp = padded.reshape(4, W)[:, ::-1].reshape(-1)[:n]
    assert run(p, [a])[0].tolist() == exp.tolist()


def test_workgroup_buffers_start_zeroed_in_every_workgroup_and_run():
    p = P([B.read_write("out", 0, "u32"), B.workgroup("s", 4, "u32")], 4, [
        ir.let("_", ir.atomic_add("s", 0, 1)),
        ir.barrier(),
        ir.store("out", ir.gid(0), ir.load("out", ir.gid(0)) + ir.load("s", 0)),
        ir.store("out", ir.gid(0), ir.load("out", ir.gid(0)) + ir.load("s", 9)),  # out of bounds: 0
    ])
    cfg = DispatchConfig(fixpoint_iterations=3)
    assert run(p, [np.zeros(12, np.uint32)], cfg)[0].tolist() == [12] * 12


def test_barrier_in_divergent_branch_raises():
    p = P([B.output("out", 0, "u32", 64)], 32, [
        ir.if_(ir.lid(0) < 3, [ir.barrier()]), ir.store("out", ir.gid(0), 1)])
    with pytest.raises(DispatchError, match="Fix:"):
        run(p, [])


def test_barrier_uniform_per_workgroup_or_after_returns_is_fine():
    p = P([B.output("out", 0, "u32", 64)], 16, [
        ir.if_(ir.lid(0).eq(3), ir.return_()),
        ir.if_(ir.wgid(0).eq(1), [ir.barrier(), ir.store("out", ir.gid(0), 2)]),
        ir.barrier(),
        ir.store("out", ir.gid(0), ir.load("out", ir.gid(0)) + 1),
    ])
    exp = [0 if k % 16 == 3 else (3 if k // 16 == 1 else 1) for k in range(64)]
    assert run(p, [])[0].tolist() == exp


def test_grid_barrier_divergent_across_workgroups_raises():
    p = P([B.output("out", 0, "u32", 64)], 16, [ir.if_(ir.wgid(0).eq(1), ir.barrier("grid"))])
    with pytest.raises(DispatchError, match="Fix:"):
        run(p, [])


def test_barrier_inside_divergent_loop_raises():
    p = P([B.output("out", 0, "u32", 32)], 32, [ir.loop("j", 0, ir.lid(0) % 2 + 1, ir.barrier())])
    with pytest.raises(DispatchError, match="Fix:"):
        run(p, [])


# ---- subgroups ---------------------------------------------------------------------------------

def _subgroups(W, n_wg):
    """(workgroup, subgroup, lane) of every invocation and the lanes of its subgroup."""
    for g in range(n_wg):
        for l in range(W):
            s = l // 32
            yield g, s, l % 32, min(32, W - 32 * s)


def test_subgroup_ballot_shuffle_add_with_partial_last_subgroup():
    W, G = 48, 3  # subgroups of 32 and 16 lanes
    n = W * G
    p = P([B.read("a", 0, "u32"), B.output("ballot", 1, "u32"), B.output("shuf", 2, "u32"),
           B.output("sum", 3, "i32"), B.output("lane", 4, "u32"), B.output("sgsize", 5, "u32")], W, [
        ir.let("i", ir.gid(0)),
        ir.let("x", ir.load("a", i)),
        ir.store("ballot", i, ir.subgroup_ballot((v("x") % 3).eq(0))),
        ir.store("shuf", i, ir.subgroup_shuffle(v("x"), (ir.subgroup_local_id() * 7 + 3) % 40)),
        ir.store("sum", i, ir.subgroup_add(ir.cast(v("x"), "i32") - 1000)),
        ir.store("lane", i, ir.subgroup_local_id()),
        ir.store("sgsize", i, ir.subgroup_size()),
    ])
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2**31, n, dtype=np.uint32)
    ballot, shuf, total, lane, size = run(p, [a])
    groups: dict = {}
    for k, (g, s, ln, _) in enumerate(_subgroups(W, G)):
        groups.setdefault((g, s), {})[ln] = k
    for k, (g, s, ln, _) in enumerate(_subgroups(W, G)):
        members = groups[(g, s)]
        assert ballot[k] == sum(1 << q for q, kk in members.items() if a[kk] % 3 == 0)
        src = (ln * 7 + 3) % 40
        assert shuf[k] == (a[members[src]] if src in members else 0)
        tot = sum(int(a[kk]) - 1000 for kk in members.values())
        assert total[k] == (tot + 2**31) % 2**32 - 2**31
        assert lane[k] == ln and size[k] == 32


def test_subgroup_in_divergent_branch_raises():
    p = P([B.output("out", 0, "u32", 64)], 64, [
        ir.if_(ir.lid(0) < 40, ir.store("out", ir.gid(0), ir.subgroup_ballot(ir.boolean(True))))])
    with pytest.raises(DispatchError, match="Fix:"):
        run(p, [])


def test_subgroup_after_partial_return_raises_but_whole_subgroup_branch_is_fine():
    bad = P([B.output("out", 0, "u32", 64)], 64, [
        ir.if_(ir.lid(0).eq(5), ir.return_()), ir.store("out", ir.gid(0), ir.subgroup_add(ir.u32(1)))])
    with pytest.raises(DispatchError, match="Fix:"):
        run(bad, [])
    good = P([B.output("out", 0, "u32", 64)], 64, [
        ir.if_(ir.lid(0) < 32, ir.store("out", ir.gid(0), ir.subgroup_add(ir.u32(1))))])
    assert run(good, [])[0].tolist() == [32] * 32 + [0] * 32


# ---- atomics -----------------------------------------------------------------------------------

def test_atomic_counter_allocation_in_invocation_order():
    p = P([B.read("a", 0, "u32"), B.read_write("count", 1, "u32", 1), B.output("slots", 2, "u32")], 32, [
        ir.let("i", ir.gid(0)),
        ir.if_((ir.load("a", i) % 3).ne(0), [
            ir.let("slot", ir.atomic_add("count", 0, 1)),
            ir.store("slots", v("slot"), i),
        ]),
    ])
    a = np.arange(100, dtype=np.uint32) * 7
    count, slots = run(p, [a, np.array([5], np.uint32)])
    chosen = [k for k in range(100) if (7 * k) % 3 != 0]
    assert count.tolist() == [5 + len(chosen)]
    exp = [0] * 100
    for s, k in enumerate(chosen):
        if 5 + s < 100:
            exp[5 + s] = k
    assert slots.tolist() == exp


@pytest.mark.parametrize("op", ["add", "or", "and", "xor", "min", "max", "exchange"])
@pytest.mark.parametrize("dtype", ["i32", "u64"])
def test_atomic_old_values_follow_invocation_order(op, dtype):
    n, m = 320, 5  # a multiple of the workgroup: no extra invocations
    p = P([B.read("idx", 0, "u32"), B.read("val", 1, dtype), B.read_write("buf", 2, dtype, m),
           B.output("old", 3, dtype)], 64, [
        ir.let("i", ir.gid(0)),
        ir.if_((i % 4).ne(1),
               ir.store("old", i, ir.atomic(op, "buf", ir.load("idx", i), ir.load("val", i)))),
    ])
    rng = np.random.default_rng(7)
    st = np.dtype(np.int32 if dtype == "i32" else np.uint64)
    idx = rng.integers(0, m + 2, n).astype(np.uint32)  # some out of bounds
    val = rng.integers(-2**31 if dtype == "i32" else 0, 2**31 if dtype == "i32" else 2**64 - 1, n,
                       dtype=np.int64 if dtype == "i32" else np.uint64).astype(st)
    buf0 = rng.integers(0, 2**30, m).astype(st)
    bits = 32 if dtype == "i32" else 64

    def wrap(x):
        x %= 2**bits
        return x - 2**bits if dtype == "i32" and x >= 2**31 else x
    f = {"add": lambda o, x: wrap(o + x), "or": lambda o, x: o | x, "and": lambda o, x: o & x,
         "xor": lambda o, x: o ^ x, "min": min, "max": max, "exchange": lambda o, x: x}[op]
    buf = [int(x) for x in buf0]
    old = [0] * n
    for k in range(n):
        if k % 4 != 1 and idx[k] < m:
            old[k] = buf[idx[k]]
            buf[idx[k]] = f(buf[idx[k]], int(val[k]))
    got_buf, got_old = run(p, [idx, val, buf0])
    assert [int(x) for x in got_old] == old
    assert [int(x) for x in got_buf] == buf


def test_atomic_compare_exchange_claims_first_come():
    n = 100
    p = P([B.read_write("owner", 0, "u32", 4), B.output("old", 1, "u32", n)], 32, [
        ir.let("i", ir.gid(0)),
        ir.store("old", i, ir.atomic("compare_exchange", "owner", i % 4, i + 1, expected=ir.u32(0))),
    ])
    owner, old = run(p, [np.array([0, 0, 7, 0], np.uint32)])
    assert owner.tolist() == [1, 2, 7, 4]
    exp = [0 if k < 4 and k != 2 else (7 if k % 4 == 2 else (k % 4) + 1) for k in range(n)]
    assert old.tolist() == exp


def test_compare_exchange_long_chains():
    n = 512  # one element updated 512 times: value i+1 replaces i (a chain that always succeeds)
    p = P([B.read_write("x", 0, "i64", 1), B.output("old", 1, "i64", n)], 64, [
        ir.let("i", ir.cast(ir.gid(0), "i64")),
        ir.store("old", ir.gid(0), ir.atomic("compare_exchange", "x", 0, v("i") + 1, expected=v("i"))),
    ])
    x, old = run(p, [np.zeros(1, np.int64)])
    assert x.tolist() == [n] and old.tolist() == list(range(n))


@pytest.mark.parametrize("pattern", ["lock", "chain", "mixed"])
def test_compare_exchange_runs_of_every_length_match_one_after_another(pattern):
    """Thousands of compare_exchanges on a few elements, in invocation order: a contended lock
    (one success, then failures: handled from one success to the next, in one pass), a chain of
    successes (one Python step an update past 64 of them) and mixed runs, against a loop."""
    n, rng = 5000, np.random.default_rng(len(pattern))
    t = rng.integers(0, 3, n).astype(np.uint32) if pattern == "mixed" else np.zeros(n, np.uint32)
    e = {"lock": np.zeros(n), "chain": np.arange(n), "mixed": rng.integers(0, 3, n)}[pattern].astype(np.uint32)
    val = {"lock": np.ones(n), "chain": np.arange(n) + 1, "mixed": rng.integers(0, 3, n)}[pattern].astype(np.uint32)
    p = P([B.read("t", 0, "u32"), B.read("e", 1, "u32"), B.read("v", 2, "u32"), B.read_write("x", 3, "u32", 3),
           B.output("old", 4, "u32", n)], 64, [
        ir.let("i", ir.gid(0)),
        ir.if_(i < n, [ir.store("old", i, ir.atomic("compare_exchange", "x", ir.load("t", i), ir.load("v", i),
                                                    expected=ir.load("e", i)))])])
    x, old = run(p, [t, e, val, np.zeros(3, np.uint32)])
    want_x, want_old = [0, 0, 0], []
    for k in range(n):
        want_old.append(want_x[t[k]])
        if want_x[t[k]] == e[k]:
            want_x[t[k]] = int(val[k])
    assert x.tolist() == want_x and old.tolist() == want_old


def test_out_of_bounds_atomics_do_nothing_and_give_zero():
    p = P([B.read_write("buf", 0, "i32"), B.output("old", 1, "i32", 8), B.workgroup("s", 2, "i32")], 8, [
        ir.let("i", ir.gid(0)),
        ir.store("old", i, ir.atomic_add("buf", i + 3, ir.i32(5)) + ir.atomic("max", "s", i + 2, ir.i32(9))),
    ])
    buf, old = run(p, [np.array([1, 2, 3, 4], np.int32)])
    assert buf.tolist() == [1, 2, 3, 9] and old.tolist() == [4] + [0] * 7


def test_atomics_on_workgroup_buffer_per_workgroup():
    p = P([B.output("out", 0, "u32", 96), B.workgroup("c", 1, "u32")], 32, [
        ir.store("out", ir.gid(0), ir.atomic_add("c", 0, ir.wgid(0) + 1))])
    assert run(p, [])[0].tolist() == [k % 32 * (k // 32 + 1) for k in range(96)]


# ---- launch geometry and builtins --------------------------------------------------------------

def test_multi_dimensional_grid_and_workgroup_builtins():
    wg, grid = (4, 2, 3), (3, 2, 2)
    names = [("invocation_id", a) for a in range(3)] + [("local_id", a) for a in range(3)] + \
            [("workgroup_id", a) for a in range(3)] + [("num_workgroups", a) for a in range(3)]
    W = 24
    N = W * 12
    body = [ir.let("lin", ir.wgid(0) + ir.wgid(1) * 3 + ir.wgid(2) * 6),
            ir.let("l", ir.lid(0) + ir.lid(1) * 4 + ir.lid(2) * 8),
            ir.let("k", v("lin") * W + v("l"))]
    body += [ir.store(f"b{j}", v("k"), ir.Builtin(nm, ax)) for j, (nm, ax) in enumerate(names)]
    p = P([B.output(f"b{j}", j, "u32", N) for j in range(len(names))], wg, body)
    outs = run(p, [], DispatchConfig(grid=grid))
    exp = {key: [0] * N for key in names}
    for gz in range(2):
        for gy in range(2):
            for gx in range(3):
                for lz in range(3):
                    for ly in range(2):
                        for lx in range(4):
                            k = (gx + gy * 3 + gz * 6) * W + lx + ly * 4 + lz * 8
                            for key, val in [(("invocation_id", 0), gx * 4 + lx), (("invocation_id", 1), gy * 2 + ly),
                                             (("invocation_id", 2), gz * 3 + lz), (("local_id", 0), lx),
                                             (("local_id", 1), ly), (("local_id", 2), lz),
                                             (("workgroup_id", 0), gx), (("workgroup_id", 1), gy),
                                             (("workgroup_id", 2), gz), (("num_workgroups", 0), 3),
                                             (("num_workgroups", 1), 2), (("num_workgroups", 2), 2)]:
                                exp[key][k] = val
    for key, got in zip(names, outs):
        assert got.tolist() == exp[key], key


def test_grid_and_workgroup_override():
    p = P([B.output("out", 0, "u32", 64)], 256, [ir.store("out", ir.gid(0), ir.lid(0) + 1000 * ir.wgid(0))])
    out = run(p, [], DispatchConfig(grid=3, workgroup=8))[0]
    exp = [k % 8 + 1000 * (k // 8) if k < 24 else 0 for k in range(64)]
    assert out.tolist() == exp


def test_default_grid_covers_largest_output_not_multiple_of_workgroup():
    p = P([B.read("a", 0, "f32"), B.output("out", 1, "f32"), B.output("cnt", 2, "u32", 1)], 256, [
        ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)) + 1.0),  # no bounds check: stores past the end drop
        ir.let("_", ir.atomic_add("cnt", 0, 1)),
    ])
    a = np.linspace(0, 1, 1000, dtype=np.float32)
    out, cnt = run(p, [a])
    assert np.array_equal(out, a + np.float32(1)) and cnt.tolist() == [1024]


def test_one_element_and_empty_buffers():
    p = P([B.read("a", 0, "i64"), B.output("out", 1, "i64")], 64, [
        ir.if_(ir.gid(0) < ir.buf_len("a"), ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)) * 2))])
    assert run(p, [np.array([21], np.int64)])[0].tolist() == [42]
    out = run(p, [np.zeros(0, np.int64)])[0]
    assert out.shape == (0,) and out.dtype == np.int64


def test_buf_len_and_zero_grid():
    p = P([B.read("a", 0, "u8"), B.output("out", 1, "u32", 2), B.workgroup("s", 7, "f16")], 1, [
        ir.store("out", 0, ir.buf_len("a")), ir.store("out", 1, ir.buf_len("s"))])
    assert run(p, [np.zeros(5, np.uint8)])[0].tolist() == [5, 7]
    assert run(p, [np.zeros(5, np.uint8)], DispatchConfig(grid=0))[0].tolist() == [0, 0]


def test_last_writer_wins_in_invocation_order():
    p = P([B.output("one", 0, "u32", 1), B.output("quarter", 1, "u32", 25), B.output("even", 2, "u32", 3)], 32, [
        ir.let("i", ir.gid(0)),
        ir.store("one", 0, i),
        ir.store("quarter", i / 4, i),
        ir.if_((i % 2).eq(0), ir.store("even", i % 3, i)),
    ], )
    one, quarter, even = run(p, [], DispatchConfig(grid=3))
    assert one.tolist() == [95]
    assert quarter.tolist() == [4 * q + 3 for q in range(24)] + [0]
    assert even.tolist() == [max(k for k in range(0, 96, 2) if k % 3 == r) for r in range(3)]


def test_scattered_store_with_duplicates_and_out_of_bounds():
    p = P([B.read("dst", 0, "u32"), B.output("out", 1, "i16", 10)], 16, [
        ir.store("out", ir.load("dst", ir.gid(0)), ir.cast(ir.gid(0), "i16") - 50)])
    dst = np.array([3, 9, 3, 0, 12, 9, 3, 5, 100, 0], np.uint32)
    exp = [0] * 10
    for k, d in enumerate(dst.tolist() + [0] * 6):  # invocations past len(dst) load index 0
        if d < 10:
            exp[d] = k - 50
    assert run(p, [dst])[0].tolist() == exp


def test_fixpoint_iterations_run_over_same_buffers_outputs_zeroed_once():
    p = P([B.read_write("x", 0, "i32"), B.output("hits", 1, "u32", 4)], 4, [
        ir.store("x", ir.gid(0), ir.load("x", ir.gid(0)) * 2 + 1),
        ir.let("_", ir.atomic_add("hits", ir.gid(0), 1)),
    ])
    x0 = np.array([0, 1, -3, 10], np.int32)
    x, hits = run(p, [x0], DispatchConfig(fixpoint_iterations=4))
    exp = x0.tolist()
    for _ in range(4):
        exp = [2 * e + 1 for e in exp]
    assert x.tolist() == exp and hits.tolist() == [4] * 4
    assert x0.tolist() == [0, 1, -3, 10]


def test_output_byte_range_cuts_results():
    p = P([B.read_write("x", 0, "u16", output_byte_range=(4, 10)), B.output("o", 1, "u32", 3, (4, 12))], 8, [
        ir.store("x", ir.gid(0), ir.load("x", ir.gid(0)) + 1),
        ir.store("o", ir.gid(0), ir.gid(0) * 10)])
    x, o = run(p, [np.arange(8, dtype=np.uint16)])
    assert x.tolist() == [3, 4, 5] and o.tolist() == [10, 20]


def test_inputs_are_never_modified():
    p = P([B.read("a", 0, "f32"), B.read_write("b", 1, "f32"), B.output("out", 2, "f32")], 32, [
        ir.store("b", ir.gid(0), ir.load("a", ir.gid(0)) + ir.load("b", ir.gid(0))),
        ir.store("out", ir.gid(0), ir.load("b", ir.gid(0)))])
    a, b = np.arange(40, dtype=np.float32), np.ones(40, np.float32)
    a0, b0 = a.copy(), b.copy()
    new_b, out = run(p, {"a": a, "b": b})
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
    assert np.array_equal(new_b, a0 + 1) and np.array_equal(out, a0 + 1)


def test_bool_and_bf16_buffers_round_trip():
    p = P([B.read("f", 0, "bool"), B.read("h", 1, "bf16"), B.output("nf", 2, "bool"), B.output("h2", 3, "bf16")], 8, [
        ir.store("nf", ir.gid(0), ir.not_(ir.load("f", ir.gid(0)))),
        ir.store("h2", ir.gid(0), ir.load("h", ir.gid(0)) * ir.bf16(3.0))])
    f = np.array([0, 1, 7, 0], np.uint32)
    vals = np.array([1.0, 1.5, -2.25, 1e30], np.float32)
    nf, h2 = run(p, [f, ir.f32_to_bf16_bits(vals)])
    assert nf.tolist() == [1, 0, 0, 1]
    assert h2.tolist() == ir.f32_to_bf16_bits(ir.bf16_bits_to_f32(ir.f32_to_bf16_bits(vals)) * 3).tolist()


# ---- exactness spot checks of the hardest operations -------------------------------------------

def _fma_prog(t):
    return P([B.read("a", 0, t), B.read("b", 1, t), B.read("c", 2, t), B.output("o", 3, t)], 64, [
        ir.store("o", ir.gid(0), ir.fma(ir.load("a", ir.gid(0)), ir.load("b", ir.gid(0)), ir.load("c", ir.gid(0))))])


def _round_fraction(x: Fraction, np_t) -> float:
    """Correctly round an exact rational to np_t: the nearest of np_t(float(x)) and its neighbours,
    ties to the even bit pattern."""
    f = np_t(float(x))
    cands = [c for c in (np.nextafter(f, np_t(-np.inf)), f, np.nextafter(f, np_t(np.inf))) if np.isfinite(c)]
    bits = lambda c: int(np.array(c, np_t).view(f"u{np.dtype(np_t).itemsize}"))  # noqa: E731
    return float(min(cands, key=lambda c: (abs(Fraction(float(c)) - x), bits(c) & 1)))


@pytest.mark.parametrize("t,np_t,spread", [("f64", np.float64, 300), ("f32", np.float32, 30),
                                           ("f16", np.float16, 5)])
def test_fma_single_rounding_matches_exact_rationals(t, np_t, spread):
    rng = np.random.default_rng(3)
    n = 3000
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-spread, spread, n)).astype(np_t)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-spread, spread, n)).astype(np_t)
    c = -(a.astype(np.float64) * b.astype(np.float64)).astype(np_t)  # heavy cancellation
    c[::3] = (rng.standard_normal(len(c[::3])) * 2.0 ** rng.integers(-spread, spread, len(c[::3]))).astype(np_t)
    c[1::3] = (c[1::3] * np_t(1.001)).astype(np_t)
    got = run(_fma_prog(t), [a, b, c])[0]
    for x, y, z, g in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist()):
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:
            assert g == 0
            continue
        assert g == _round_fraction(exact, np_t), (x, y, z, g)


def test_fma_f64_special_and_extreme_values():
    a = np.array([1e300, 1e-300, 5e-324, 0.0, -0.0, np.inf, 1e308, 3.0, 1e200], np.float64)
    b = np.array([1e10, 1e-30, 0.5, -1.0, -2.0, 1.0, 10.0, 1e-320, 1e200], np.float64)
    c = np.array([-np.inf, 1e-320, 0.0, -0.0, -0.0, 1.0, -1e308, 0.0, -1e308], np.float64)
    got = run(_fma_prog("f64"), [a, b, c])[0]
    assert got[0] == -np.inf and got[5] == np.inf and got[8] == np.inf
    assert got[3] == 0 and np.signbit(got[3]) and got[4] == 0 and not np.signbit(got[4])  # -0*-2 + -0 = +0
    assert got[6] == np.inf  # 9e308 overflows, though 1e308 * 10 alone would too
    for k in (1, 2, 7):
        assert got[k] == float(Fraction(a[k]) * Fraction(b[k]) + Fraction(c[k]))


def _f64_exact_fma(x: float, y: float, z: float) -> float:
    """a*b + c rounded once to f64 (subnormals and signed zeros included) from exact rationals."""
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        return x * y + z  # an exact zero: IEEE's sign rules for sums of zeros
    try:
        return exact.numerator / exact.denominator  # correctly rounded by CPython, sign kept on underflow
    except OverflowError:
        return float("inf") if exact > 0 else float("-inf")


def _far_apart_operands(rng, n):
    """f64 operands of every magnitude: tiny products, huge ones, subnormal sums, exact ties."""
    def mag(lo, hi, size):
        return np.ldexp(rng.uniform(0.5, 1, size) * rng.choice([-1.0, 1.0], size), rng.integers(lo, hi, size))
    a, b, c = mag(-1074, 1024, n), mag(-1074, 1024, n), mag(-1074, 1024, n)
    k = n // 4  # products near the subnormal range, c on the subnormal grid: ties and cancellation
    a[:k] = mag(-600, -450, k)
    b[:k] = np.ldexp(1 + rng.integers(0, 3, k) * 2.0 ** -52, -1075 - np.frexp(a[:k])[1] + rng.integers(-2, 50, k))
    c[:k] = np.ldexp(rng.integers(-2**40, 2**40, k).astype(np.float64), -1074)
    few = slice(k, 2 * k)  # operands with few bits: products that are exact midpoints
    a[few] = np.ldexp(rng.integers(1, 8, k).astype(np.float64), rng.integers(-560, -520, k))
    b[few] = np.ldexp(rng.integers(1, 8, k).astype(np.float64) * rng.choice([-1.0, 1.0], k), rng.integers(-560, -520, k))
    c[few] = np.ldexp(rng.integers(-64, 64, k).astype(np.float64), -1074)
    c[2 * k:2 * k + 20] = 0.0  # products that underflow, with a zero addend of either sign
    c[2 * k + 20:2 * k + 40] = -0.0
    a[2 * k:2 * k + 40], b[2 * k:2 * k + 40] = mag(-700, -600, 40), mag(-700, -600, 40)
    return a, b, c


def test_fma_f64_far_from_one_is_exact_without_rational_arithmetic(monkeypatch):
    from vyre_numba.ir import ops

    def no_fractions(*args):
        raise AssertionError("the exact rational fallback ran")
    monkeypatch.setattr(ops, "_fma_exact", no_fractions)
    a, b, c = _far_apart_operands(np.random.default_rng(11), 8000)
    got = run(_fma_prog("f64"), [a, b, c])[0]
    for x, y, z, g in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist()):
        want = _f64_exact_fma(x, y, z)
        assert g == want and np.signbit(g) == np.signbit(want), (x.hex(), y.hex(), z.hex(), g.hex(), want.hex())


def test_mul_high_div_mod_edges_64_bit():
    p = P([B.read("a", 0, "i64"), B.read("b", 1, "i64"), B.output("hi", 2, "i64"), B.output("q", 3, "i64"),
           B.output("r", 4, "i64")], 8, [
        ir.let("x", ir.load("a", ir.gid(0))), ir.let("y", ir.load("b", ir.gid(0))),
        ir.store("hi", ir.gid(0), ir.mul_high(v("x"), v("y"))),
        ir.store("q", ir.gid(0), v("x") / v("y")), ir.store("r", ir.gid(0), v("x") % v("y"))])
    MIN, MAX = -2**63, 2**63 - 1
    a = np.array([MIN, MIN, -7, 7, MAX, -1, 123456789012345, MIN], np.int64)
    b = np.array([-1, 0, 2, -2, MAX, -1, -98765432109, MIN], np.int64)
    hi, q, r = run(p, [a, b])
    for x, y, h, qq, rr in zip(a.tolist(), b.tolist(), hi.tolist(), q.tolist(), r.tolist()):
        assert h == (x * y) >> 64
        tq = 0 if y == 0 else (MIN if (x, y) == (MIN, -1) else int(Fraction(x, y)))
        assert qq == tq and rr == (0 if y in (0, -1) else x - tq * y)


# ---- errors ------------------------------------------------------------------------------------

ELEMENTWISE = P([B.read("a", 0, "f32", ), B.read("k", 1, "u32", 4), B.output("out", 2, "f32")], 64, [
    ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)))])


@pytest.mark.parametrize("inputs", [
    [np.zeros(4, np.float32)],  # wrong count
    [np.full(4, 0.1, np.float64), np.zeros(4, np.uint32)],  # a dtype that does not convert exactly
    [np.zeros(4, np.float32), np.zeros(5, np.uint32)],  # static count mismatch
    {"a": np.zeros(4, np.float32), "k": np.zeros(4, np.uint32), "zz": np.zeros(1)},  # unknown name
])
def test_bad_inputs_raise_with_fix(inputs):
    with pytest.raises(DispatchError, match="Fix:"):
        ReferenceBackend().dispatch(ELEMENTWISE, inputs)


def test_absurd_launch_is_refused_with_fix():
    with pytest.raises(VyreError, match="Fix:"):
        run(ELEMENTWISE, [np.zeros(4, np.float32), np.zeros(4, np.uint32)], DispatchConfig(grid=(1 << 20, 1 << 10)))


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
@pytest.mark.parametrize("op", ["min_", "max_"])
def test_min_max_with_a_signalling_nan_give_the_other_operand_at_every_launch_size(dtype, op):
    """Regression (a red-team): min/max were np.fmin/np.fmax, whose scalar loop gives NaN for a
    signalling NaN where their SIMD loop gives the other operand: the same element's result hung
    on the launch's size (a launch of 17: sixteen 1.0 and a NaN), on chunking, and on the
    optimizer folding a literal. The semantics: where exactly one operand is NaN, the other."""
    snan = {"f32": (np.uint32, 0x7F800001), "f64": (np.uint64, 0x7FF0000000000001), "bf16": (np.uint16, 0x7F81)}[dtype]
    storage = {"f32": np.float32, "f64": np.float64, "bf16": np.uint16}[dtype]
    one = {"f32": np.float32(1).view(np.uint32), "f64": np.float64(1).view(np.uint64), "bf16": 0x3F80}[dtype]
    f, ref = getattr(ir, op), get_backend("reference")
    for wg in (1, 7, 17, 32, 64):
        i = ir.gid(0)
        p = ir.Program([B.read("a", 0, dtype), B.output("y", 1, dtype)], wg,
                       [ir.store("y", i, f(ir.load("a", i), ir.lit(1.0, dtype))),
                        ir.store("y", i + ir.u32(wg), f(ir.lit(1.0, dtype), ir.load("a", i)))], name="m")
        a = np.full(wg, snan[1], snan[0]).view(storage)
        for prog in (p, p.optimized()):
            y = ref.dispatch(prog, [a], sizes={"y": 2 * wg})[0]
            assert (y.view(snan[0]) == one).all(), (wg, y)
    lit = ir.Lit(getattr(ir.DataType, dtype.upper()), snan[1])  # a literal: the optimizer folds it
    p = ir.Program([B.output("y", 0, dtype, count=1)], 1, [ir.store("y", 0, f(lit, ir.lit(1.0, dtype)))])
    for prog in (p, p.optimized()):
        assert ref.dispatch(prog, None)[0].view(snan[0])[0] == one


@pytest.mark.parametrize("returns, refused", [(ir.workgroup_id(0).eq(1), True), (ir.local_id(0).eq(0), True),
                                              (ir.local_id(0).eq(5), False)])
def test_a_grid_barrier_after_a_workgroups_first_invocation_returned_is_refused(returns, refused):
    """Regression (a red-team): the reference ran what the GPU's barrier waits on until it times
    out (local id 0 of each workgroup arrives for it); other invocations may return before it."""
    from vyre_numba import DispatchConfig, DispatchError

    p = P([B.read_write("y", 0, "u32")], 64, [
        ir.let("i", ir.gid(0)), ir.if_(returns, [ir.return_()]), ir.barrier("grid"),
        ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.u32(5))])])
    y = np.zeros(200, np.uint32)
    if refused:
        with pytest.raises(DispatchError, match=r"first invocation \(local id 0\).*had returned.*Fix: return only "
                                                r"after the grid barrier"):
            ReferenceBackend().dispatch_resident(p, [y], DispatchConfig(cooperative=True))
        assert not y.any()
    else:
        ReferenceBackend().dispatch_resident(p, [y], DispatchConfig(cooperative=True))
        assert (y.reshape(-1)[np.arange(200) % 64 != 5] == 5).all()
