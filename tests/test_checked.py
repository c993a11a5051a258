"""Checked dispatch (`DispatchConfig(checked=...)`): the same results as unchecked, every kind of
problem counted per site with its first invocation, the same counts on the GPU as on the reference
backend, warnings or errors as asked, and nothing added to unchecked dispatches."""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import strategies as S
import vyre_numba as vn
from program_table import CASES, compare
from vyre_numba import DispatchConfig, ir
from vyre_numba.errors import CheckError, CheckWarning, DispatchError, IRValidationError, UnsupportedError
from vyre_numba.ir import checks

B = ir.BufferDecl
WARN, RAISE = DispatchConfig(checked=True), DispatchConfig(checked="raise")
N = 40


def problems() -> ir.Program:
    """One site of every kind that fires, and guarded ones (select, logical and) that must not
    count where their guard keeps them from mattering."""
    i = ir.gid()
    return ir.Program(
        [B.read("x", 0, "f32"), B.read("d", 1, "i32"), B.output("y", 2, "f32"), B.output("q", 3, "i32"),
         B.read_write("c", 4, "u32"), B.workgroup("t", 8, "u32")], 32,
        [ir.if_(i < ir.buf_len("y"), [
            ir.store("y", i, ir.sqrt(ir.load("x", i + 3)) + ir.select(i < 2, ir.load("x", i * 1000), 0.0)),
            ir.store("q", i, ir.load("d", i) % ir.load("d", ir.select(i + 1 < ir.buf_len("d"), i + 1, i))),
            ir.store("q", i + 50, 1),
            ir.let("ok", ir.logical_and(i + 1 < ir.buf_len("x"), ir.load("x", i + 1) > 0.0)),
            ir.let("old", ir.atomic("add", "c", i % 5, 1)),
            ir.let("w", ir.load("t", ir.lid() + 4)),
            ir.if_(ir.var("ok"), [ir.store("y", i, ir.load("x", i) / (ir.load("x", i) - ir.load("x", i)))]),
        ])], name="problems")


def inputs():
    x = np.linspace(-2, 2, N).astype(np.float32)
    x[30] = 0.0
    d = (np.arange(N) % 4 - 1).astype(np.int32)
    return [x, d, np.zeros(3, np.uint32)]


def findings(report) -> dict:
    return {f.expr[:40]: (f.kind, f.count, f.invocation, f.index) for f in report.findings}


def expected() -> dict:
    x, d, _ = inputs()
    i = np.arange(N)
    t_oob = i % 32 >= 4  # lid + 4 >= 8
    return {k[:40]: v for k, v in {
        "x[(invocation_id.x + 3u32)]": ("load", 3, 37, 40),
        "sqrt(x[(invocation_id.x + 3u32)])": ("nan", int(np.sum(x[3:] < 0)), 0, None),
        "x[(invocation_id.x * 1000u32)]": ("load", 1, 1, 1000),  # only where i < 2 matters
        # d[i] % d[i + 1]: divisor zero where (i + 1) % 4 == 1, the last element reading itself
        "(d[invocation_id.x] % d[select(((invocation_id.x + 1u32) < len(d)), (invocation_id.x + 1u32), ": ("mod", int(np.sum(d[np.minimum(i + 1, N - 1)] == 0)), 0, None),
        "q[(invocation_id.x + 50u32)] = 1i32": ("store", N, 0, 50),
        "c[(invocation_id.x % 5u32)]": ("atomic", int(np.sum(i % 5 >= 3)), 3, 3),
        "t[(local_id.x + 4u32)]": ("load", int(np.sum(t_oob)), 4, 8),
        "(x[invocation_id.x] / (x[invocation_id.x] - x[invocation_id.x]))": ("nan", 1, 30, None),
    }.items()}


def test_every_kind_of_problem_is_counted_with_its_first_invocation():
    be = vn.get_backend("reference")
    with pytest.warns(CheckWarning) as got:
        outs = be.dispatch(problems(), inputs(), WARN)
    report = be.last_check
    assert got[0].message.report is report and "Fix:" in str(got[0].message)
    have = findings(report)
    want = expected()
    for k in list(have):  # the atomic's text is the whole atomic; key it by its index
        if have[k][0] == "atomic":
            have["c[(invocation_id.x % 5u32)]"[:40]] = have.pop(k)
    assert have == want, "\n".join(f"{k}: {have.get(k)} vs {want.get(k)}" for k in set(have) | set(want))
    plain = be.dispatch(problems(), inputs())
    for a, b in zip(outs, plain):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_every_checked_dispatch_that_finds_a_problem_warns_at_the_callers_line():
    """Regression: the warning was attributed to a line of vyre_numba, so Python's once-per-line
    rule showed only the first: a loop's later dispatches, or a re-run cell, warned of nothing."""
    be = vn.get_backend("reference")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        for _ in range(3):
            be.dispatch(problems(), inputs(), WARN); line = sys._getframe().f_lineno  # noqa: E702
    assert not be.last_check.ok
    assert [(w.filename, w.lineno, w.category) for w in got] == [(__file__, line, CheckWarning)] * 3


def test_a_checked_dispatch_warns_from_python_c_and_stdin():
    """Regression (a red-team): warning at the caller's line fetched its source through
    `__main__`'s loader, which raised ImportError under `python -c` and a piped script."""
    import subprocess

    code = ("import numpy as np, vyre_numba as vn\nfrom vyre_numba import ir, DispatchConfig\n"
            "i = ir.var('i')\np = ir.Program([ir.BufferDecl.read('x', 0, 'f32'), ir.BufferDecl.output('y', 1, 'f32')],"
            " 64, [ir.let('i', ir.gid(0)), ir.if_(i < ir.buf_len('y'), [ir.store('y', i, ir.load('x', i + 2))])])\n"
            "out = vn.get_backend('reference').dispatch(p, [np.ones(10, np.float32)], DispatchConfig(checked=True))\n"
            "print('returned', out[0].size)\n")
    for args, stdin in (([sys.executable, "-c", code], None), ([sys.executable, "-"], code)):
        r = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "returned 10" in r.stdout, r.stderr
        assert "CheckWarning: " in r.stderr and "out-of-bounds loads" in r.stderr, r.stderr


def test_a_once_filter_shows_a_checked_dispatchs_warning_once():
    be = vn.get_backend("reference")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("once")
        for _ in range(3):
            be.dispatch(problems(), inputs(), WARN)
    assert [w.category for w in got] == [CheckWarning]


def test_last_check_is_none_before_any_checked_dispatch():
    assert type(vn.get_backend("reference"))().last_check is None


def report_bits(report):
    return [(f.kind, f.what, f.expr, f.count, f.invocation, f.index) for f in report.findings]


@pytest.mark.gpu
def test_the_gpu_counts_what_the_reference_counts():
    ref, cuda = vn.get_backend("reference"), vn.get_backend("cuda")
    for config in (WARN, DispatchConfig(checked=True, workgroup="auto"), DispatchConfig(checked=True, optimize=False)):
        with pytest.warns(CheckWarning):
            want = ref.dispatch(problems(), inputs(), config)
        with pytest.warns(CheckWarning):
            got = cuda.dispatch(problems(), inputs(), config)
        assert report_bits(cuda.last_check) == report_bits(ref.last_check)
        for a, b in zip(got, want):  # NaNs equal whatever their sign (the reference's semantics)
            assert np.array_equal(a, b, equal_nan=True)
    bufs = [cuda.upload(a) for a in inputs()] + [cuda.empty(N, np.float32), cuda.empty(N, np.int32)]
    with pytest.warns(CheckWarning):
        cuda.dispatch_resident(problems(), [bufs[0], bufs[1], bufs[3], bufs[4], bufs[2]], WARN)
    assert report_bits(cuda.last_check) == report_bits(ref.last_check)


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_checked_table_programs_give_the_table_results(name):
    """Every program of the program table, checked: the table's outputs (a wrong index found by
    the checks never changes what the program computes)."""
    be = vn.get_backend(name)
    for case in CASES:
        config = DispatchConfig(**{**(case.config.__dict__ if case.config else {}), "checked": True})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckWarning)
            outs = be.dispatch(case.program, [a.copy() for a in case.inputs], config, sizes=case.sizes)
        compare(case, outs)


@settings(max_examples=int(os.environ.get("VYRE_CHECKED_EXAMPLES", "60")), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(S.programs_with_inputs())
def test_generated_programs_give_the_same_bits_checked(case):
    program, inputs, config = case
    be = vn.get_backend("reference")
    try:
        want = be.dispatch(program, inputs, config)
    except vn.VyreError:
        return
    checked = DispatchConfig(**{**(config.__dict__ if config else {}), "checked": True})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        got = be.dispatch(program, inputs, checked)
    for a, b in zip(got, want):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.gpu
def test_generated_programs_report_the_same_on_the_gpu():
    ref, cuda = vn.get_backend("reference"), vn.get_backend("cuda")
    compared = []

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(S.programs_with_inputs())
    def run(case):
        program, inputs, config = case
        checked = DispatchConfig(**{**(config.__dict__ if config else {}), "checked": True})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckWarning)
            try:
                want = ref.dispatch(program, inputs, checked)
            except vn.VyreError:
                return
            got = cuda.dispatch(program, inputs, checked)
        assert [(f.kind, f.expr, f.count, f.invocation, f.index) for f in cuda.last_check.findings if f.kind != "nan"] \
            == [(f.kind, f.expr, f.count, f.invocation, f.index) for f in ref.last_check.findings if f.kind != "nan"]
        compared.append(len(want) == len(got))

    run()
    assert len(compared) >= 50


def test_raise_mode_raises_with_the_outputs_and_resident_buffers_hold_theirs():
    be = vn.get_backend("reference")
    with pytest.raises(CheckError, match="Fix:") as info:
        be.dispatch(problems(), inputs(), RAISE)
    assert not info.value.report.ok and len(info.value.outputs) == 3
    plain = be.dispatch(problems(), inputs())
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(info.value.outputs, plain))
    x, d, c = (be.upload(a) for a in inputs())
    y, q = be.empty(N, np.float32), be.empty(N, np.int32)
    with pytest.raises(CheckError) as info:
        be.dispatch_resident(problems(), {"x": x, "d": d, "y": y, "q": q, "c": c}, RAISE)
    assert info.value.outputs is None and np.array_equal(y.view(np.uint8), plain[0].view(np.uint8))
    pending = be.dispatch_async(problems(), inputs(), RAISE)
    with pytest.raises(CheckError):
        pending.result()


def test_a_clean_dispatch_warns_nothing_and_reports_ok():
    be = vn.get_backend("reference")
    i = ir.gid()
    p = ir.Program([B.read("x", 0, "f32"), B.output("y", 1, "f32")], 64,
                   [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) * 2.0)])], name="clean")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = be.dispatch(p, [np.arange(100, dtype=np.float32)], RAISE)
    assert be.last_check.ok and be.last_check.sites == 3 and "nothing found" in str(be.last_check)
    assert np.array_equal(out[0], np.arange(100, dtype=np.float32) * 2)
    assert be.dispatch_timed(p, [np.ones(3, np.float32)], WARN)[0][0].tolist() == [2.0] * 3


def test_each_thread_sees_its_own_last_check():
    """Regression (a red-team): `last_check` was one attribute of the backend, so a thread read the
    report of another thread's checked dispatch made in between."""
    import threading

    be = vn.get_backend("reference")
    i = ir.gid()
    clean = ir.Program([B.read("x", 0, "f32"), B.output("y", 1, "f32")], 64,
                       [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) * 2.0)])], name="clean")
    first_done, second_done, seen = threading.Event(), threading.Event(), {}

    def warned():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            be.dispatch(problems(), inputs(), WARN)
        first_done.set()
        second_done.wait(30)
        seen["warned"] = be.last_check

    def tidy():
        first_done.wait(30)
        be.dispatch(clean, [np.ones(5, np.float32)], WARN)
        seen["clean"] = be.last_check
        second_done.set()

    threads = [threading.Thread(target=warned), threading.Thread(target=tidy)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not seen["warned"].ok and seen["warned"].program == problems().name
    assert seen["clean"].ok and seen["clean"].program == "clean"
    be.last_check = None  # forgets this thread's report (as setting the attribute did before)
    assert be.last_check is None


def test_a_report_of_many_findings_has_a_bounded_repr():
    """Regression: the dataclass repr listed every finding (2,000 sites: 640 KB of text/plain in a
    notebook); it lists as many as the message does and says how many more."""
    be = vn.get_backend("reference")
    i = ir.var("i")
    body = [ir.let("i", ir.gid(0))] + [ir.store("y", i, ir.load("x", i + 20 + k)) for k in range(100)]  # 200 sites
    p = ir.Program([B.read("x", 0, "f32"), B.output("y", 1, "f32")], 64, body, name="many")
    with pytest.raises(CheckError) as info:
        be.dispatch(p, [np.zeros(10, np.float32)], RAISE)
    report = info.value.report
    r = repr(report)
    assert len(report.findings) == 200 and r.startswith("CheckReport(program='many', sites=")
    assert r.count("Finding(") == 20 and r.endswith("... (180 more findings)))") and len(r) < 10_000


def test_sites_that_read_alike_are_one_line_of_the_message():
    """Regression (a red-team): x[i] + x[i] past x's end gave two identical lines."""
    i = ir.gid(0)
    p = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.output("y", 1, "u32")], 64,
                   [ir.store("y", i, ir.load("x", i) + ir.load("x", i))], name="dbl")
    with pytest.raises(vn.CheckError) as e:
        vn.get_backend("reference").dispatch(p, [np.ones(8, np.uint32)], DispatchConfig(checked="raise"), sizes={"y": 64})
    text = str(e.value)
    assert len(e.value.report.findings) == 2 and text.count("56 out-of-bounds loads") == 1
    assert "(at 2 sites alike)" in text and text.rstrip().splitlines()[-1].startswith("Fix: bound the index")


def test_unchecked_dispatch_carries_no_checks():
    cuda_ptx = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32")], 64,
                          [ir.store("y", ir.gid(), ir.load("x", ir.gid() + 1))], name="plain").ptx()
    assert checks.COUNTS not in cuda_ptx and "atom" not in cuda_ptx


@pytest.mark.parametrize("bad", [1, 0, "loud", "Raise", None, 2.0])
def test_bad_checked_values_say_how_to_fix_them(bad):
    with pytest.raises(DispatchError, match="Fix:"):
        DispatchConfig(checked=bad)
    assert DispatchConfig(checked=np.bool_(True)).checked == "warn" and DispatchConfig().checked is False


def test_recordings_refuse_checked_and_sequences_keep_checked_steps_apart():
    be = vn.get_backend("reference")
    p = problems()
    with pytest.raises(UnsupportedError, match="Fix:"):
        be.record_graph(p, inputs(), WARN)
    x, d, c = (be.upload(a) for a in inputs())
    y, q = be.empty(N, np.float32), be.empty(N, np.int32)
    step = (p, [x, d, y, q, c], WARN)
    with pytest.raises(UnsupportedError, match="Fix:"):
        be.record_sequence([step])
    i = ir.gid()
    double = ir.Program([B.read("x", 0, "f32"), B.read_write("y", 1, "f32")], 64,
                        [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) * 2.0)])], name="double")
    z = be.empty(N, np.float32)
    assert "checked" in str(be.fuse([(double, [x, y]), (double, [y, z], WARN)]).boundaries[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        with be.megakernel([step], [(y,)]) as mk:
            assert "checked" in mk.reason
            r = mk.run()
    assert r.mode == "sequence" and be.last_check.findings


def test_names_checked_dispatch_owns_are_refused():
    """As a let's name, and as a loop's variable (a red-team: that one failed inside the
    instrumented program, on a statement the user never wrote, with a Fix that did not apply)."""
    for body in ([ir.let("_vyre_ck0", 1), ir.store("y", ir.gid(), 2)],
                 [ir.loop("_vyre_ck0", 0, 2, [ir.store("y", ir.gid(), 2)])]):
        p = ir.Program([B.output("y", 0, "u32")], 32, body, name="n")
        with pytest.raises(IRValidationError, match="are checked dispatch's own. Fix: rename them"):
            vn.get_backend("reference").dispatch(p, [], WARN, sizes={"y": 4})


def test_found_by_red_team():
    """An atomic's index that reads memory another atomic of the statement changes is left in
    place (the results stay those of the unchecked run); a non-buffer is a DispatchError; a deep
    expression is instrumented in time linear in its depth."""
    be = vn.get_backend("reference")
    i = ir.gid()
    p = ir.Program([B.read_write("c", 0, "u32"), B.output("o", 1, "u32")], 32,
                   [ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.atomic("add", "c", 0, 1)
                                                           + ir.atomic("add", "c", ir.load("c", 0), 1))])], name="aa")
    plain = be.dispatch(p, [np.zeros(4, np.uint32)], sizes={"o": 1})
    got = be.dispatch(p, [np.zeros(4, np.uint32)], WARN, sizes={"o": 1})
    assert all(np.array_equal(a, b) for a, b in zip(plain, got))
    for bad in ([1, 2], (1,), 3, "x", None):
        with pytest.raises(DispatchError, match="Fix:"):
            be.dispatch_resident(p, [bad, be.empty(1, np.uint32)], WARN)
    import time

    def instrument_s(depth):
        e = ir.load("x", i)
        for _ in range(depth):
            e = e + 1.0
        q = ir.Program([B.read("x", 0, "f32"), B.output("y", 1, "f32")], 32, [ir.store("y", i, e)], name="deep")
        t0 = time.perf_counter()
        checks.instrument(q)
        return time.perf_counter() - t0
    small, large = instrument_s(500), instrument_s(2000)
    assert large < 10 * small + 0.5, (small, large)  # 4x the depth: linear, not 16x


@pytest.mark.parametrize("resident", [False, True])
def test_a_store_past_a_read_write_buffer_is_told_a_fix_that_works_there(resident):
    """Regression (a docstring audit): the store's Fix said to size the output with sizes={...},
    which a read_write buffer, or any resident dispatch, does not take. Following the Fix given,
    a longer array, stops the finding."""
    be = vn.get_backend("reference")
    i = ir.gid()
    p = ir.Program([B.read_write("a", 0, "u32")], 32, [ir.store("a", i + 1, 7)], name="shift")
    one = DispatchConfig(checked="raise", grid=1)  # 32 invocations, storing at 1..32
    for n, found in ((32, True), (33, False)):
        a = np.zeros(n, np.uint32)
        try:
            if resident:
                be.dispatch_resident(p, [be.upload(a)], one)
            else:
                be.dispatch(p, [a], one)
        except CheckError as e:
            assert found and "pass a longer array" in str(e) and "size the output" not in str(e), str(e)
        else:
            assert not found


def test_a_sites_count_does_not_wrap_at_2_32():
    """Regression (a red-team): the counts were u32 atomics, so 2**32 out-of-bounds loads at a site
    read as none (no warning, and checked="raise" did not raise). Seeded at 2**32 - 1 here, for
    that many earlier hits; the GPU runs the same instrumented program."""
    from vyre_numba.checked import NONE
    from vyre_numba.ir.checks import instrument

    p = ir.Program([ir.BufferDecl.read("a", 0, "u32"), ir.BufferDecl.output("y", 1, "u32", 1)], 1,
                   [ir.let("v", ir.load("a", 5))], name="oob")
    probe, sites = instrument(p)
    assert [d.dtype for d in probe.buffers[-2:]] == [ir.DataType.U64, ir.DataType.U64]
    outs = vn.get_backend("reference").dispatch(
        probe, [np.zeros(1, np.uint32), np.array([2**32 - 1], np.uint64), np.full(1, NONE, np.uint64)],
        DispatchConfig(grid=(1, 1, 1)))
    assert outs[-2].tolist() == [2**32] and int(outs[-1][0]) == 5  # invocation 0, index 5


def test_a_checked_async_dispatch_raises_run_failures_from_result_as_an_unchecked_one():
    """Regression (a red-team): checked dispatch_async raised what went wrong running (a divergent
    barrier) at the call, where the unchecked one, and the docs, hand it to result(); a mistake in
    the call itself still raises at the call. (The reference only: a GPU does not detect a divergent
    barrier, and checked.dispatch_now, the code changed, is the same for both backends.)"""
    be = vn.get_backend("reference")
    divergent = ir.Program([B.read("a", 0, "u32"), B.output("out", 1, "u32")], 4,
                           [ir.if_(ir.gid(0) < ir.u32(2), [ir.barrier("workgroup")]),
                            ir.store("out", ir.gid(0), ir.u32(1))], name="divergent")
    for config in (None, WARN, RAISE):
        pending = be.dispatch_async(divergent, [np.arange(8, dtype=np.uint32)], config)
        with pytest.raises(vn.VyreError, match="Fix:"):
            pending.result()
        with pytest.raises(DispatchError, match="Fix:"):
            be.dispatch_async(divergent, [np.arange(8) + 0.5], config)


def _program_size(p: ir.Program) -> int:
    return sum(s.size for s in p.entry)


@pytest.mark.parametrize("shape", ["select chain", "logical chain", "atomic beside a chain"])
def test_instrumenting_grows_a_program_in_proportion_to_it(shape):
    """Regression (a red-team): each check site in nested selects (or logical ands) repeated the
    whole chain of conditions above it, so a 500-case lookup chain became 391,806 nodes (instrument
    took 1.5 s, dispatch 10 s); an atomic's statement was re-typed at every node. Twice the
    program is now about twice the instrumented program."""
    from vyre_numba.ir.checks import instrument

    def program(d: int) -> ir.Program:
        i = ir.var("i")
        e = ir.load("x", i) > 0 if shape == "logical chain" else ir.load("x", i)  # a valid program
        for k in range(d):
            if shape == "select chain":
                e = ir.select(i == k, ir.load("x", i + k), e)
            elif shape == "logical chain":
                e = ir.logical_and(ir.load("x", i + k) > 0, e)
            else:
                e = e + ir.load("x", i + k)
        if shape == "atomic beside a chain":
            e = ir.atomic_add("x", i, 1) + e
        y = "f32" if shape == "select chain" else "u32"
        body = [ir.let("i", ir.gid(0)), ir.store("y", i, ir.cast(e, y))]
        return ir.Program([ir.BufferDecl.read_write("x", 0, "u32"), ir.BufferDecl.output("y", 1, y, 4)], 4, body)

    small, large = (_program_size(instrument(program(d))[0]) for d in (100, 200))
    assert large < 2.2 * small, (small, large)


def test_a_site_shows_the_start_of_a_huge_statement_as_it_did():
    """The site text is rendered only as far as its 90 characters (it rendered the whole statement
    once a finding: 2,048 loads in one statement took 32 s to report)."""
    from vyre_numba.ir.checks import _text, instrument

    i = ir.var("i")
    terms = ir.load("x", i)
    for k in range(1, 300):
        terms = terms + ir.load("x", i + k)
    p = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.output("y", 1, "u32", 4)], 4,
                   [ir.let("i", ir.gid(0)), ir.if_(i < 4, [ir.store("y", i, terms)])])
    _, sites = instrument(p)
    store = p.entry[1].then[0]
    whole = " ".join(str(store).split())
    assert {s.where for s in sites} == {whole[:87] + "..."} and len(sites) == 301  # 300 loads and the store
    nested = " ".join(str(p.entry[1]).split())  # an if's lines joined into one
    assert _text(p.entry[1], 20) == nested[:17] + "..." and _text(p.entry[1], 2000) == nested[:1997] + "..."


def test_a_valid_program_that_the_checks_take_past_a_limit_is_refused_as_checked_dispatchs_own(monkeypatch):
    """Regression (a red-team): a program a quarter of MAX_NODES, or of 361 buffers, ran unchecked
    and, checked, was told it was invalid (at the instrumented program's size or buffer count,
    with a Fix to bind a repeated value to a variable that did not apply)."""
    from vyre_numba.ir import nodes

    be = vn.get_backend("reference")
    i = ir.var("i")
    total = ir.load("x", i)
    for k in range(1, 40):
        total = total + ir.load("x", i + k)
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32")], 1,
                   [ir.let("i", ir.gid(0)), ir.store("y", i, total)], name="long")
    x = np.arange(64, dtype=np.uint32)
    monkeypatch.setattr(nodes, "MAX_NODES", 600)
    assert be.dispatch(p, [x], sizes={"y": 1})[0].tolist() == [sum(range(40))]
    for run in (lambda: be.dispatch(p, [x], WARN, sizes={"y": 1}),
                lambda: be.dispatch_resident(p, [be.upload(x), be.empty(1, np.uint32)], WARN)):
        with pytest.raises(UnsupportedError, match=r"^checked dispatch cannot check program 'long': with a check at "
                                                   r"each of its 41 sites .*\([\d,]+ nodes written out, more than "
                                                   r"MAX_NODES = 600\)\. Fix: dispatch it unchecked \(checked=False\)"):
            run()
    monkeypatch.undo()
    nb = 362  # 364 with the two counters: past the kernel parameters' 4,352 bytes
    wide = ir.Program([B.read(f"x{k}", k, "u32") for k in range(nb - 1)] + [B.output("y", nb - 1, "u32")], 4,
                      [ir.store("y", ir.gid(0), ir.load("x0", ir.gid(0)))], name="wide")
    assert ir.validate(wide) == []
    with pytest.raises(UnsupportedError, match=r"^checked dispatch cannot check program 'wide'.*\(364 bound buffers "
                                               r"take 4368 bytes .*limit\)\. Fix: dispatch it unchecked"):
        be.dispatch(wide, [np.arange(4, dtype=np.uint32)] * (nb - 1), WARN)


def test_a_launch_past_the_checks_32_bit_invocation_numbers_is_refused():
    """A red-team: the first invocation to hit a site is kept in 32 bits, so past 2**32 invocations
    (a 2-D grid: each axis is within u32) a report would have named a wrapped invocation."""
    be = vn.get_backend("reference")
    p = ir.Program([B.output("o", 0, "u32", 1)], 1024, [ir.if_(ir.gid(0) == 0, [ir.store("o", 0, 1)])], name="wide")
    config = DispatchConfig(checked=True, grid=(65536, 65535, 1))  # 2**26 * 65,535 invocations
    with pytest.raises(UnsupportedError, match=r"^checked dispatch of 'wide': the launch has 4,397,979,402,240 "
                                               r"invocations.*Fix: check a launch of fewer workgroups"):
        be.dispatch(p, [], config)
    with pytest.raises(UnsupportedError, match=r"in 32 bits"):
        be.dispatch_resident(p, [be.empty(1, np.uint32)], config)


def test_a_run_error_placing_a_statement_notes_that_the_checks_renumber_statements():
    """A red-team: out of work budget, the checked run named entry[2] for a loop written at
    entry[1] (the checks bind operands in statements of their own) and did not say so."""
    from vyre_numba.reference import ReferenceBackend

    i = ir.gid(0)
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32")], 32,
                   [ir.let("s", ir.u32(0)),
                    ir.loop("k", 0, 50, [ir.assign("s", ir.var("s") + ir.load("x", (i + ir.var("k")) % 64))]),
                    ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.var("s"))])], name="sum")
    be = ReferenceBackend(work_budget=20000)
    with pytest.raises(DispatchError, match=r"work budget .* at entry\[1\]") as plain:
        be.dispatch(p, [np.arange(64, dtype=np.uint32)], sizes={"y": 64})
    assert not getattr(plain.value, "__notes__", None)
    with pytest.raises(DispatchError, match=r"work budget .* at entry\[\d\]") as checked:
        be.dispatch(p, [np.arange(64, dtype=np.uint32)], WARN, sizes={"y": 64})
    assert any("checked dispatch: entry[k] counts the statements of the program as the checks instrument it" in n
               for n in checked.value.__notes__)
