"""The reference backend's bounds: a host memory budget (large launches run in chunks of whole
workgroups, with the same results), a work budget that stops runaway loops with an error naming
the loop, atomic resident dispatch, `dispatch_repeated` without materialising its steps, and the
plan and geometry caches."""
from __future__ import annotations

import os
import sys
import time
import tracemalloc

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from conftest import assert_fix  # noqa: E402
from program_table import CASES, compare  # noqa: E402

from vyre_numba import DispatchConfig, DispatchError, ir  # noqa: E402
from vyre_numba.backend import Backend, Step  # noqa: E402
from vyre_numba.bindings import bind  # noqa: E402
from vyre_numba.reference import ReferenceBackend, interpreter  # noqa: E402

B = ir.BufferDecl
i, v = ir.var("i"), ir.var
HUGE = 1 << 40


def effective_workgroup(case) -> tuple[int, int, int]:
    wg = case.config.workgroup if case.config is not None and case.config.workgroup else None
    return wg if wg is not None else case.program.workgroup_size


def one_workgroup_budget(program: ir.Program, wg: tuple[int, int, int], workgroups: int = 1) -> int:
    return interpreter.plan(program).workgroup_bytes(wg) * workgroups


def chunks(program, inputs, config, budget, sizes=None) -> int:
    return interpreter.prepare(bind(program, inputs, config, sizes), budget, 10**12).chunks


# ---- memory budget: chunked runs give the same results -------------------------------------------

NO_GRID_BARRIER = [c for c in CASES
                   if not any(isinstance(x, ir.Barrier) and x.scope == "grid" for x in ir.walk(c.program.entry))]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in NO_GRID_BARRIER])
def test_program_table_in_one_workgroup_chunks_matches_one_run(case):
    budget = one_workgroup_budget(case.program, effective_workgroup(case))
    whole = ReferenceBackend(memory_budget=HUGE).dispatch(case.program, [a.copy() for a in case.inputs],
                                                          case.config, sizes=case.sizes)
    small = ReferenceBackend(memory_budget=budget).dispatch(case.program, [a.copy() for a in case.inputs],
                                                            case.config, sizes=case.sizes)
    compare(case, small)
    for a, b in zip(whole, small):
        assert a.tobytes() == b.tobytes()
    b = bind(case.program, [a.copy() for a in case.inputs], case.config, case.sizes)
    groups = b.grid[0] * b.grid[1] * b.grid[2]
    assert chunks(case.program, [a.copy() for a in case.inputs], case.config, budget, case.sizes) == groups


def test_the_table_has_multi_workgroup_cases_to_chunk():
    many = [c for c in NO_GRID_BARRIER
            if chunks(c.program, [a.copy() for a in c.inputs], c.config,
                      one_workgroup_budget(c.program, effective_workgroup(c)), c.sizes) > 1]
    assert len(many) > 20


def geometry_program(wg) -> ir.Program:
    """Every builtin, subgroup operations, an atomic counter, a workgroup buffer with a barrier
    and a contiguous load/store, each to its own output."""
    names = ["gx", "gy", "gz", "lx", "ly", "lz", "wx", "wy", "wz", "nx", "ny", "nz", "lane", "ballot",
             "shuf", "sgsum", "ticket", "mirror", "copy"]
    body = [ir.let("k", ir.gid(0) + ir.gid(1) * ir.num_workgroups(0) * ir.u32(wg[0])
                   + ir.gid(2) * ir.num_workgroups(0) * ir.u32(wg[0]) * ir.num_workgroups(1) * ir.u32(wg[1])),
            ir.let("l", ir.lid(0) + ir.lid(1) * ir.u32(wg[0]) + ir.lid(2) * ir.u32(wg[0] * wg[1]))]
    values = [ir.gid(0), ir.gid(1), ir.gid(2), ir.lid(0), ir.lid(1), ir.lid(2), ir.wgid(0), ir.wgid(1), ir.wgid(2),
              ir.num_workgroups(0), ir.num_workgroups(1), ir.num_workgroups(2), ir.subgroup_local_id(),
              ir.subgroup_ballot((ir.var("k") % ir.u32(3)).eq(0)),
              ir.subgroup_shuffle(ir.var("k"), (ir.subgroup_local_id() + ir.u32(5)) % ir.u32(32)),
              ir.subgroup_add(ir.var("k")), ir.atomic_add("counter", 0, ir.u32(1))]
    body += [ir.store(name, ir.var("k"), value) for name, value in zip(names, values)]
    W = wg[0] * wg[1] * wg[2]
    body += [ir.store("scratch", ir.var("l"), ir.var("k")), ir.barrier(),
             ir.store("mirror", ir.var("k"), ir.load("scratch", ir.u32(W - 1) - ir.var("l"))),
             ir.store("copy", ir.gid(0), ir.load("src", ir.gid(0)) * ir.u32(3))]
    bufs = [B.read("src", 0, "u32"), B.read_write("counter", 1, "u32", 1)]
    bufs += [B.output(name, 2 + k, "u32") for k, name in enumerate(names)]
    bufs += [B.workgroup("scratch", W, "u32")]
    return ir.Program(bufs, wg, body)


@pytest.mark.parametrize("wg, grid", [
    ((64, 1, 1), (13, 1, 1)), ((48, 1, 1), (7, 1, 1)), ((8, 4, 1), (3, 5, 1)), ((5, 4, 2), (2, 3, 2)),
    ((4, 2, 3), (3, 1, 4))])
@pytest.mark.parametrize("per_chunk", [1, 2, 5])
def test_chunked_grids_of_every_shape_give_the_whole_runs_results(wg, grid, per_chunk):
    p = geometry_program(wg)
    total = wg[0] * wg[1] * wg[2] * grid[0] * grid[1] * grid[2]
    src = np.arange(total, dtype=np.uint32) * 7 + 1
    cfg = DispatchConfig(grid=grid)
    sizes = {b.name: total for b in p.outputs if b.name != "counter"}
    whole = ReferenceBackend(memory_budget=HUGE).dispatch(p, [src, np.zeros(1, np.uint32)], cfg, sizes=sizes)
    budget = one_workgroup_budget(p, wg, per_chunk)
    assert chunks(p, [src, np.zeros(1, np.uint32)], cfg, budget, sizes) == -(-(grid[0] * grid[1] * grid[2]) // per_chunk)
    small = ReferenceBackend(memory_budget=budget).dispatch(p, [src, np.zeros(1, np.uint32)], cfg, sizes=sizes)
    for decl, a, b in zip(p.outputs, whole, small):
        assert a.tolist() == b.tolist(), decl.name
    out = dict(zip([d.name for d in p.outputs], small))
    k = np.arange(total)
    wx, wy, wz = wg
    W = wx * wy * wz
    # invocation order is workgroup-major; recover each invocation's ids independently
    g_lin, l_lin = k // W, k % W
    lx, ly, lz = l_lin % wx, (l_lin // wx) % wy, l_lin // (wx * wy)
    gx_, gy_, gz_ = g_lin % grid[0], (g_lin // grid[0]) % grid[1], g_lin // (grid[0] * grid[1])
    ids = {"lx": lx, "ly": ly, "lz": lz, "wx": gx_, "wy": gy_, "wz": gz_,
           "gx": gx_ * wx + lx, "gy": gy_ * wy + ly, "gz": gz_ * wz + lz}
    row = ids["gx"] + ids["gy"] * grid[0] * wx + ids["gz"] * grid[0] * wx * grid[1] * wy
    for name, want in ids.items():
        got = np.empty(total, np.int64)
        got[row] = want
        assert out[name].tolist() == got.tolist(), name
    assert out["counter"].tolist() == [total]
    assert sorted(out["ticket"].tolist()) == list(range(total))
    if grid[1] == grid[2] == wy == wz == 1:  # invocation_id(0) is the linear id: the contiguous path
        assert out["copy"].tolist() == (src * np.uint32(3)).tolist()


def test_a_chunked_run_holds_to_its_memory_budget():
    """14 f64 lets (the report that brought the OOM killer): tracemalloc sees at most the budget
    beyond the output buffer, while one run would need far more."""
    body = [ir.let("i", ir.gid(0)), ir.let("x0", ir.cast(i, "f64") * 0.5)]
    for j in range(1, 14):
        body.append(ir.let(f"x{j}", ir.fma(v(f"x{j - 1}"), 1.5, ir.cast(i % ir.u32(j + 2), "f64"))))
    total = v("x0")
    for j in range(1, 14):
        total = total + v(f"x{j}")
    body.append(ir.if_(i < ir.buf_len("out"), ir.store("out", i, total)))
    p = ir.Program([B.output("out", 0, "f64")], 256, body)
    n, budget = 1 << 18, 2 << 20
    assert interpreter.plan(p).invocation_bytes * n > 10 * budget
    expect = ReferenceBackend(memory_budget=HUGE).dispatch(p, [], sizes={"out": n})[0]
    backend = ReferenceBackend(memory_budget=budget)
    tracemalloc.start()
    try:
        got = backend.dispatch(p, [], sizes={"out": n})[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - got.nbytes <= budget, (peak, budget)
    assert got.tobytes() == expect.tobytes()


def test_grid_barrier_over_the_budget_is_refused_before_anything_runs():
    p = ir.Program([B.read_write("x", 0, "u32"), B.output("out", 1, "u32")], 32, [
        ir.let("i", ir.gid(0)), ir.store("x", i, ir.u32(7)), ir.barrier("grid"),
        ir.store("out", i, ir.load("x", ir.buf_len("x") - ir.u32(1) - i))])
    x = np.arange(320, dtype=np.uint32)
    budget = one_workgroup_budget(p, (32, 1, 1), 9)  # 10 workgroups needed at once
    coop = DispatchConfig(cooperative=True)
    with pytest.raises(DispatchError) as e:
        ReferenceBackend(memory_budget=budget).dispatch(p, [x], coop)
    text = str(e.value)
    assert "grid barrier" in text and str(budget) in text and str(one_workgroup_budget(p, (32, 1, 1), 10)) in text
    assert "memory_budget" in text and "VYRE_NUMBA_REFERENCE_MEMORY" in text
    assert_fix(text)
    assert x.tolist() == list(range(320))
    out = ReferenceBackend(memory_budget=budget + one_workgroup_budget(p, (32, 1, 1))).dispatch(p, [x], coop)
    assert out[1].tolist() == [7] * 320
    with pytest.raises(DispatchError, match="cooperative=True"):
        ReferenceBackend().dispatch(p, [x])


def test_a_workgroup_over_the_budget_is_refused():
    p = ir.Program([B.output("out", 0, "u32")], 64, [ir.store("out", ir.gid(0), ir.u32(1))])
    with pytest.raises(DispatchError, match="one workgroup") as e:
        ReferenceBackend(memory_budget=100).dispatch(p, [], sizes={"out": 64})
    assert_fix(str(e.value))


def test_memory_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_MEMORY", "3M")
    assert ReferenceBackend().memory_budget == 3 << 20
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_MEMORY", "123456")
    assert ReferenceBackend().memory_budget == 123456
    for text, size in (("2GiB", 2 << 30), ("1 kb", 1024), ("64b", 64), ("64", 64)):
        monkeypatch.setenv("VYRE_NUMBA_REFERENCE_MEMORY", text)
        assert ReferenceBackend().memory_budget == size, text
    assert ReferenceBackend(memory_budget=999).memory_budget == 999
    monkeypatch.delenv("VYRE_NUMBA_REFERENCE_MEMORY")
    monkeypatch.delenv("VYRE_NUMBA_REFERENCE_WORK", raising=False)
    assert ReferenceBackend().memory_budget == 2 << 30 and ReferenceBackend().work_budget == 10**11
    for empty in ("", "  "):  # set empty reads as unset, as VYRE_NUMBA_PROGRESS and VYRE_NUMBA_CACHE do
        monkeypatch.setenv("VYRE_NUMBA_REFERENCE_MEMORY", empty)
        monkeypatch.setenv("VYRE_NUMBA_REFERENCE_WORK", empty)
        assert ReferenceBackend().memory_budget == 2 << 30 and ReferenceBackend().work_budget == 10**11


def test_a_budget_set_in_the_environment_after_the_backend_was_made_takes_effect(monkeypatch):
    """Regression (a red-team): the budget errors' Fix names the variable, and a notebook setting
    it (%env) kept the budget the shared backend read when it was made; a given budget stays."""
    from vyre_numba.errors import DispatchError

    monkeypatch.delenv("VYRE_NUMBA_REFERENCE_WORK", raising=False)
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32", 1)], 1,
                   [ir.loop("k", 0, 2000, [ir.store("o", 0, ir.load("o", 0) + 1)])])
    backend, fixed = ReferenceBackend(), ReferenceBackend(work_budget=10**9)
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_WORK", "1000")
    with pytest.raises(DispatchError, match=r"ran out of its work budget of 1e\+03 units.*Fix: .*VYRE_NUMBA_REFERENCE_WORK"):
        backend.dispatch(p, [])
    assert fixed.dispatch(p, [])[0].tolist() == [2000] and fixed.work_budget == 10**9
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_WORK", "1e9")  # the fix, followed in the running session
    assert backend.dispatch(p, [])[0].tolist() == [2000] and backend.work_budget == 10**9
    backend.memory_budget = 5000
    assert backend.memory_budget == 5000


@pytest.mark.parametrize("env, value", [("VYRE_NUMBA_REFERENCE_MEMORY", "lots"), ("VYRE_NUMBA_REFERENCE_MEMORY", "0"),
                                        ("VYRE_NUMBA_REFERENCE_WORK", "-5"),
                                        ("VYRE_NUMBA_REFERENCE_MEMORY", "1.5"),  # was a 1-byte budget
                                        ("VYRE_NUMBA_REFERENCE_MEMORY", "1.9K"),  # was 1945 (1945.6 cut)
                                        ("VYRE_NUMBA_REFERENCE_WORK", "9" * 5000),  # a raw ValueError (int digits)
                                        ("VYRE_NUMBA_REFERENCE_WORK", "1e30000000"),  # 45 s of big-number work
                                        ("VYRE_NUMBA_REFERENCE_MEMORY", "1ib"),  # was 1 byte: a unit without a size
                                        ("VYRE_NUMBA_REFERENCE_WORK", "2G"),  # work units are no bytes (was 2**31)
                                        ("VYRE_NUMBA_REFERENCE_WORK", "1KiB")])
def test_bad_budgets_in_the_environment_are_refused(monkeypatch, env, value):
    from vyre_numba.errors import SettingError

    monkeypatch.setenv(env, value)
    with pytest.raises(SettingError, match=env) as e:  # a setting's error, as every environment variable's
        ReferenceBackend()
    assert_fix(str(e.value))


def test_budgets_in_the_environment_are_read_exactly(monkeypatch):
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_MEMORY", "9007199254740993")  # was read through a float: ...992
    assert ReferenceBackend().memory_budget == 2**53 + 1
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_MEMORY", "1.5K")
    assert ReferenceBackend().memory_budget == 1536


@pytest.mark.parametrize("kw", [{"memory_budget": 0}, {"memory_budget": 1.5}, {"work_budget": True},
                                {"work_budget": -1}])
def test_bad_budgets_as_arguments_are_refused(kw):
    with pytest.raises(DispatchError) as e:
        ReferenceBackend(**kw)
    assert_fix(str(e.value))


# ---- work budget -------------------------------------------------------------------------------

def spin_program(end: int = 2**32 - 1) -> ir.Program:
    return ir.Program([B.output("out", 0, "u32", 4)], 4, [
        ir.let("c", ir.u32(0)),
        ir.loop("outer", 0, 1, [ir.if_(ir.gid(0) < 9, ir.loop("j", ir.u32(0), ir.u32(end), ir.assign("c", v("c") + 1)))]),
        ir.store("out", ir.gid(0), v("c"))])


def test_a_runaway_loop_stops_with_an_error_naming_it():
    t0 = time.monotonic()
    with pytest.raises(DispatchError) as e:
        ReferenceBackend(work_budget=2 * 10**7).dispatch(spin_program(), [])
    assert time.monotonic() - t0 < 60
    text = str(e.value)
    assert "the loop over 'j' at entry[1].body[0].then[0]" in text and "of 4294967295" in text
    assert "work_budget" in text and "VYRE_NUMBA_REFERENCE_WORK" in text
    assert_fix(text)


def test_the_work_budget_is_charged_exactly_per_iteration():
    # each iteration of j costs (4 invocations + 1000) x (1 statement + 1): 2008 units
    per = (4 + interpreter.STATEMENT_UNITS) * 2
    outer = (4 + interpreter.STATEMENT_UNITS) * 3  # the outer loop's one iteration: if, inner loop, itself
    assert ReferenceBackend(work_budget=outer + 100 * per).dispatch(spin_program(100), [])[0].tolist() == [100] * 4
    with pytest.raises(DispatchError, match=r"iteration 100 of 100"):
        ReferenceBackend(work_budget=outer + 100 * per - 1).dispatch(spin_program(100), [])


def test_fixpoint_iterations_draw_on_the_work_budget():
    p = ir.Program([B.read_write("x", 0, "u32")], 4, [ir.store("x", ir.gid(0), ir.load("x", ir.gid(0)) + ir.u32(1))])
    x = np.zeros(4, np.uint32)
    with pytest.raises(DispatchError, match="fixpoint iteration") as e:
        ReferenceBackend(work_budget=10**6).dispatch(p, [x], DispatchConfig(fixpoint_iterations=10**9))
    assert_fix(str(e.value))
    assert x.tolist() == [0] * 4
    assert ReferenceBackend().dispatch(p, [x], DispatchConfig(fixpoint_iterations=50))[0].tolist() == [50] * 4


def test_fixpoint_iterations_past_the_budget_are_refused_before_the_first():
    import time

    p = ir.Program([B.read_write("x", 0, "u32")], 4, [ir.store("x", ir.gid(0), ir.load("x", ir.gid(0)) + ir.u32(1))])
    x = np.zeros(4, np.uint32)
    t0 = time.perf_counter()
    with pytest.raises(DispatchError, match="refused before the first") as e:
        ReferenceBackend().dispatch(p, [x], DispatchConfig(fixpoint_iterations=2**31 - 1))
    assert time.perf_counter() - t0 < 5 and x.tolist() == [0] * 4
    assert_fix(str(e.value))
    with pytest.raises(DispatchError, match="more than 2\\*\\*31 - 1.*Fix:"):
        DispatchConfig(fixpoint_iterations=10**20)


def test_work_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_WORK", "1e5")
    backend = ReferenceBackend()
    assert backend.work_budget == 10**5
    with pytest.raises(DispatchError, match="work budget of 1e\\+05"):
        backend.dispatch(spin_program(), [])


# ---- atomic resident dispatch ------------------------------------------------------------------

def diverging_program() -> ir.Program:
    """Stores into every kind of written buffer, then reaches a barrier in divergent control flow."""
    return ir.Program([B.read("a", 0, "u32"), B.read_write("x", 1, "u32"), B.output("out", 2, "u32"),
                       B.read_write("count", 3, "u32", 1)], 32, [
        ir.let("i", ir.gid(0)),
        ir.store("x", i, ir.load("a", i) + ir.u32(1000)),
        ir.store("out", i, ir.u32(77)),
        ir.let("_", ir.atomic_add("count", 0, ir.u32(1))),
        ir.if_((ir.wgid(0).eq(2)) & (ir.lid(0) < 5), ir.barrier()),
    ])


@pytest.mark.parametrize("budget", [HUGE, None])
def test_a_resident_dispatch_that_fails_while_running_writes_nothing(budget):
    p = diverging_program()
    backend = ReferenceBackend(memory_budget=budget or one_workgroup_budget(p, (32, 1, 1), 1) + 4096)
    a = backend.upload(np.arange(128, dtype=np.uint32))
    x = backend.upload(np.arange(128, dtype=np.uint32) * 3)
    out = backend.upload(np.full(128, 5, np.uint32))
    count = backend.upload(np.array([9], np.uint32))
    before = [b.copy() for b in (a, x, out, count)]
    with pytest.raises(DispatchError, match="barrier") as e:
        backend.dispatch_resident(p, [a, x, out, count])
    assert_fix(str(e.value))
    for got, want in zip((a, x, out, count), before):
        assert got.tolist() == want.tolist()


def test_a_resident_dispatch_stopped_by_the_work_budget_writes_nothing():
    p = ir.Program([B.read_write("x", 0, "u32")], 4, [
        ir.store("x", ir.gid(0), ir.u32(1)),
        ir.loop("j", 0, ir.u32(2**32 - 1), ir.store("x", ir.gid(0), v("j")))])
    x = np.full(4, 3, np.uint32)
    with pytest.raises(DispatchError, match="loop over 'j'"):
        ReferenceBackend(work_budget=10**6).dispatch_resident(p, [x])
    assert x.tolist() == [3] * 4


def test_a_resident_dispatch_that_succeeds_commits_and_counts_its_undo_copies():
    p = ir.Program([B.read("a", 0, "u32"), B.read_write("x", 1, "u32"), B.output("out", 2, "u32")], 32, [
        ir.let("i", ir.gid(0)), ir.store("x", i, ir.load("x", i) + ir.load("a", i)), ir.store("out", i, i)])
    a, x, out = np.arange(64, dtype=np.uint32), np.ones(64, np.uint32), np.full(64, 9, np.uint32)
    ReferenceBackend().dispatch_resident(p, [a, x, out])
    assert x.tolist() == list(range(1, 65)) and out.tolist() == list(range(64))
    wg = one_workgroup_budget(p, (32, 1, 1))
    with pytest.raises(DispatchError, match="copies it keeps to undo"):  # x and out: 512 bytes of copies
        ReferenceBackend(memory_budget=wg + 511).dispatch_resident(p, [a, x, out])
    assert x.tolist() == list(range(1, 65))
    ReferenceBackend(memory_budget=wg + 512).dispatch_resident(p, [a, x, out])
    assert x.tolist() == [1 + 2 * k for k in range(64)]


# ---- dispatch_repeated -------------------------------------------------------------------------

class CountingBackend(Backend):
    """Records resident dispatches; the `fail_at`-th one raises."""

    name = "counting"

    def __init__(self, fail_at: int):
        self.calls, self.fail_at = 0, fail_at

    def dispatch(self, program, inputs=None, config=None, *, sizes=None):
        raise NotImplementedError

    def dispatch_resident(self, program, buffers, config=None):
        self.calls += 1
        if self.calls == self.fail_at:
            raise DispatchError("step failed. Fix: none, this is a test.")


def test_dispatch_repeated_generates_its_steps_lazily():
    p = ir.Program([B.read_write("x", 0, "u32")], 1, [ir.store("x", 0, ir.u32(1))])
    backend = CountingBackend(fail_at=4)
    tracemalloc.start()
    try:
        with pytest.raises(DispatchError, match="step failed"):
            backend.dispatch_repeated([(p, [None])], [Step(p, [None]), (p, [None])], 10**9)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert backend.calls == 4
    assert peak < 1 << 20  # a list of 2e9 steps would take 16 GB


def test_dispatch_repeated_runs_prefix_then_body_n_times_on_the_reference():
    bump = ir.Program([B.read_write("x", 0, "u32")], 4, [ir.store("x", ir.gid(0), ir.load("x", ir.gid(0)) + ir.u32(1))])
    double = ir.Program([B.read_write("x", 0, "u32")], 4, [ir.store("x", ir.gid(0), ir.load("x", ir.gid(0)) * ir.u32(2))])
    backend = ReferenceBackend()
    x = backend.upload(np.zeros(4, np.uint32))
    (got,) = backend.dispatch_repeated([(bump, [x])], [(double, [x]), (bump, [x])], np.int64(3), read=[(x, 0, 4)])
    assert got.tolist() == [15] * 4  # ((1*2+1)*2+1)*2+1
    backend.dispatch_repeated([], [(bump, [x])], 0)
    assert x.tolist() == [15] * 4


@pytest.mark.parametrize("repeat", [True, -1, 2.0, "3", None])
def test_dispatch_repeated_refuses_a_bad_repeat(repeat):
    with pytest.raises(DispatchError, match="repeat") as e:
        ReferenceBackend().dispatch_repeated([], [], repeat)
    assert_fix(str(e.value))


# ---- caches ------------------------------------------------------------------------------------

def test_plans_and_geometries_live_in_lru_caches():
    from vyre_numba.lru import LRUCache

    assert isinstance(interpreter._PLANS, LRUCache) and isinstance(interpreter._GEOMETRIES, LRUCache)
    p = ir.Program([B.output("out", 0, "u32", 8)], 8, [ir.store("out", ir.gid(0), ir.u32(41) + ir.u32(1))],
                   name="cache_probe")
    backend = ReferenceBackend()
    backend.dispatch(p, [])
    hits = interpreter._PLANS.hits
    assert backend.dispatch(p, [])[0].tolist() == [42] * 8
    assert interpreter._PLANS.hits == hits + 1
    assert interpreter._PLANS.stats()["capacity"] == 256 and interpreter._GEOMETRIES.stats()["capacity"] == 4


def test_a_launch_past_the_invocation_limit_is_refused_before_its_outputs_are_allocated():
    """Regression (a red-team): sizes={'out': 2**32 - 1} allocated 16 GiB of outputs before the
    limit refused the launch (under a memory limit: 'no host memory', not the limit)."""
    import tracemalloc

    p = ir.Program([B.output("out", 0, "f32")], 64, [ir.store("out", ir.gid(0), 1.0)])
    tracemalloc.start()
    try:
        with pytest.raises(DispatchError, match="over the CPU interpreter's limit of 268435456") as e:
            ReferenceBackend().dispatch(p, [], sizes={"out": 2**32 - 1})
        assert tracemalloc.get_traced_memory()[1] < 2**26
    finally:
        tracemalloc.stop()
    assert_fix(str(e.value))


@pytest.mark.parametrize("env, value", [("VYRE_NUMBA_REFERENCE_MEMORY", "\u0662G"),
                                        ("VYRE_NUMBA_REFERENCE_WORK", "\uff11e\uff11\uff11")])
def test_budget_settings_take_ascii_digits_only(monkeypatch, env, value):
    """Regression (a red-team): the pattern's \\d took any script's digits ('٢G' read as 2 GiB),
    where the command line refuses them."""
    from vyre_numba.errors import SettingError

    monkeypatch.setenv(env, value)
    with pytest.raises(SettingError, match="Fix: set it to a number such as"):
        ReferenceBackend().memory_budget if "MEMORY" in env else ReferenceBackend().work_budget
