"""Progress bars: none for quick work, one once work runs long (or at once when asked), never when
switched off; the fixpoint runner, the e-graph rebuild and long sequences use them."""
from __future__ import annotations

import numpy as np
import pytest

from vyre_numba import progress
from vyre_numba.errors import VyreError


class FakeBar:
    made: list = []

    def __init__(self, **kw):
        self.kw, self.n, self.closed, self.total = kw, kw.get("initial", 0), False, kw.get("total")
        FakeBar.made.append(self)

    def refresh(self):
        pass

    def update(self, n=1):
        self.n += n

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    FakeBar.made = []
    monkeypatch.setattr(progress, "_tqdm", lambda **kw: FakeBar(**kw))
    monkeypatch.delenv(progress.ENV, raising=False)
    return FakeBar.made


def test_false_gives_no_bar_and_true_one_at_once(bars):
    assert progress.bar(False, desc="x", unit="u") is None and not bars
    b = progress.bar(True, desc="x", unit="u", total=3)
    assert bars == [b.shown] and b.shown.kw["total"] == 3
    assert progress.bar(np.False_, desc="x", unit="u") is None and len(bars) == 1  # NumPy's bools as Python's
    assert progress.bar(np.True_, desc="x", unit="u").shown is bars[1]


def test_the_default_shows_a_bar_only_once_the_work_is_long(bars, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    b = progress.bar(None, desc="rounds", unit="round")
    b.update(5)
    clock[0] = progress.DELAY_S - 0.01
    b.update(1)
    assert not bars
    clock[0] = progress.DELAY_S + 0.01
    b.update(1)
    b.update(2)
    b.close()
    assert len(bars) == 1 and bars[0].n == 9 and bars[0].closed and bars[0].kw["desc"] == "rounds"


def test_without_tqdm_an_asked_bar_is_refused_at_once_and_an_automatic_one_not_shown(monkeypatch):
    """Regression (a red-team): with tqdm missing, progress=True raised a raw ModuleNotFoundError,
    and the default raised it a second into the work, after part of it had run."""
    import sys

    from vyre_numba.errors import SettingError

    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    monkeypatch.delenv(progress.ENV, raising=False)
    with pytest.raises(SettingError, match=r"tqdm cannot be imported.*Fix: pip install tqdm.*or pass progress=False"):
        progress.bar(True, desc="x", unit="u")
    b = progress.bar(None, desc="x", unit="u")
    clock[0] = progress.DELAY_S + 1
    b.update(3)
    b.update(1)
    b.close()
    assert b.shown is None and b.n == 4
    # Regression (a red-team): congruence_closure checked progress=True's type only, applied the
    # unions, and was refused in the rebuild, the e-graph left half closed
    from vyre_numba.egraph import EGraph, congruence_closure

    g = EGraph.from_terms(["a", "b", ("f", "a"), ("f", "b")], backend="reference")
    with pytest.raises(SettingError, match=r"tqdm cannot be imported"):
        congruence_closure(g, [[0, 1]], progress=True)
    assert g.find([0, 1, 2, 3]).tolist() == [0, 1, 2, 3]
    assert congruence_closure(g, [[0, 1]], progress=False).eclass.tolist() == [0, 0, 2, 2]


def test_the_environment_switches_the_automatic_bars_off(bars, monkeypatch):
    monkeypatch.setenv(progress.ENV, "0")
    assert progress.bar(None, desc="x", unit="u") is None
    assert progress.bar(True, desc="x", unit="u") is not None



@pytest.mark.parametrize("value, automatic", [("0", False), ("OFF", False), ("No", False), ("false", False),
                                              ("1", True), ("Yes", True), ("", True), (" on ", True),
                                              ("Disabled", False), ("enabled", True)])  # as VYRE_NUMBA_CACHE reads them
def test_the_environment_is_read_in_any_case(monkeypatch, value, automatic):
    monkeypatch.setenv(progress.ENV, value)
    assert progress._automatic() is automatic


def test_an_environment_value_that_is_not_a_setting_is_refused(monkeypatch):
    """Regression: the error was the VyreError base class itself, which no except clause but the
    broadest names."""
    from vyre_numba.errors import SettingError

    monkeypatch.setenv(progress.ENV, "garbage")
    with pytest.raises(SettingError, match="VYRE_NUMBA_PROGRESS='garbage' is not a setting.*Fix:"):
        progress.bar(None, desc="x", unit="round")
    assert progress.bar(False, desc="x", unit="round") is None  # an explicit choice needs no setting

@pytest.mark.parametrize("bad", [1, "yes", 0.5])
def test_a_progress_that_is_not_a_bool_or_none_is_refused(bad):
    with pytest.raises(VyreError, match="Fix:"):
        progress.bar(bad, desc="x", unit="u")


def test_fixpoint_rounds_show_on_a_bar_when_asked(bars):
    from vyre_numba import fixpoint

    def step(i, x):
        if x[i] < 5:
            x[i] += 1
            return 1
        return 0

    x = np.zeros(4, np.int64)
    r = fixpoint.run(step, 4, [x], max_rounds=100, backend="reference", progress=True)
    assert r.rounds == 6 and bars and bars[0].n == 6 and bars[0].closed
    assert bars[0].kw["total"] is None  # max_rounds is a cap: out of it the bar sat near 0 % with an ETA of hours
    assert bars[0].total == 6  # ended full
    r = fixpoint.run(step, 4, [np.zeros(4, np.int64)], max_rounds=3, backend="reference", progress=True)
    assert not r.converged and bars[1].n == 3 and bars[1].total == 3


def test_a_bar_of_unknown_length_stopped_by_an_error_goes_rather_than_look_finished(bars):
    """Regression (a Jupyter audit): an interrupted fixpoint's bar of rounds closed as tqdm closes a
    bar without a total, green and full in a notebook, as if the run had finished."""
    from vyre_numba import fixpoint

    def step(i, x):
        x[i] += 1
        if x[i] == 3:
            x[i + 10] = 1  # out of range: stops the run
        return 1

    with pytest.raises(VyreError):
        fixpoint.run(step, 4, [np.zeros(4, np.int64)], max_rounds=100, backend="reference", progress=True)
    assert bars[0].closed and bars[0].leave is False and bars[0].total is None
    known = progress.bar(True, desc="x", unit="u", total=5)
    progress.stopped(known)  # a bar of known length keeps its place (tqdm paints a short one red)
    assert known.shown.closed and not hasattr(known.shown, "leave")


def test_a_quick_fixpoint_shows_nothing_by_default(bars):
    from vyre_numba import fixpoint

    r = fixpoint.run(lambda i, x: 0, 4, [np.zeros(4)], max_rounds=10, backend="reference")
    assert r.converged and not bars


def test_fixpoint_chunks_grow_for_an_automatic_bar():
    from vyre_numba.fixpoint.runner import chunks

    auto = chunks(None, 10**9)
    assert [next(auto) for _ in range(4)] == [1024, 2048, 4096, 8192]
    shown = chunks(True, 10**9)
    assert [next(shown) for _ in range(3)] == [64, 64, 64]
    assert next(chunks(False, 777)) == 777


def test_an_egraph_rebuild_counts_its_rounds_on_the_bar(bars):
    from vyre_numba.egraph import EGraph, congruence_closure

    g = EGraph.from_terms(["a", "b", ("g", ("f", "a")), ("g", ("f", "b"))], backend="reference")
    a, b = g.term_classes[:2]
    res = congruence_closure(g, [[a, b]], progress=True)
    assert res.rounds >= 2 and bars and bars[0].n == res.rounds and bars[0].closed


def test_sequences_count_their_steps(bars):
    from vyre_numba import get_backend, ir

    p = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64,
                   [ir.let("i", ir.gid(0)),
                    ir.if_(ir.var("i") < ir.buf_len("x"), [ir.store("x", ir.var("i"), ir.load("x", ir.var("i")) + 1)])])
    be = get_backend("reference")
    x = be.upload(np.zeros(10, np.uint32))
    (out,) = be.dispatch_repeated([(p, [x])], [(p, [x])], 4, read=[(x,)], progress=True)
    assert out.tolist() == [5] * 10 and bars[0].n == 5 and bars[0].kw["total"] == 5 and bars[0].closed
    be.dispatch_sequence(iter([(p, [x])] * 3), progress=True)
    assert bars[1].n == 3 and bars[1].kw["total"] is None


def test_a_fused_sequence_counts_the_callers_steps(bars):
    """Regression: fuse=True sized and advanced the bar labelled 'steps' by the fused kernels (four
    steps read 2/2)."""
    from vyre_numba import get_backend, ir

    i = ir.var("i")

    def step(name, f, neighbour=False):
        src = ir.load("a", i + 1) if neighbour else ir.load("a", i)
        return ir.Program([ir.BufferDecl.read("a", 0, "f32"), ir.BufferDecl.output("b", 1, "f32")], 64,
                          [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("b"), [ir.store("b", i, f(src))])], name=name)

    be = get_backend("reference")
    bufs = [be.upload(np.linspace(0, 1, 100, dtype=np.float32))] + [be.empty(100, np.float32) for _ in range(4)]
    steps = [(step("double", lambda v: v * 2.0), bufs[0:2]), (step("shift", lambda v: v + 1.0), bufs[1:3]),
             (step("smooth", lambda v: v * 0.5, True), bufs[2:4]), (step("square", lambda v: v * v), bufs[3:5])]
    assert len(be.fuse(steps, [(bufs[4], 0, 4)]).steps) == 2
    for fuse in (False, True):
        be.dispatch_sequence(steps, read=[(bufs[4], 0, 4)], progress=True, fuse=fuse)
        assert bars[-1].kw["unit"] == "step" and bars[-1].kw["total"] == 4 and bars[-1].n == 4 and bars[-1].closed


def test_a_bad_setting_refuses_a_closure_before_its_unions_change_the_egraph(monkeypatch):
    """Regression: congruence_closure checked its `progress` argument first but read the setting
    only in the rebuild, after the unions were in: it raised with the e-graph changed."""
    from vyre_numba import egraph
    from vyre_numba.errors import SettingError

    g = egraph.EGraph.from_arrays(np.arange(3), np.arange(3, dtype=np.int32), np.zeros(4, np.int64), np.zeros(0, np.int64),
                                  backend="reference")
    g.rebuild()
    monkeypatch.setenv(progress.ENV, "2")
    with pytest.raises(SettingError, match="Fix:"):
        egraph.congruence_closure(g, [[0, 1]])
    assert g.find([0, 1, 2]).tolist() == [0, 1, 2] and "pending" not in repr(g)


def test_a_bad_progress_is_refused_before_a_fused_plan_or_a_fixpoint_step_is_made(monkeypatch):
    """A red-team: dispatch_sequence(fuse=True) made and counted its fusion plan, and fixpoint.run
    compiled its step and copied every array, before the progress value or setting was refused."""
    from vyre_numba import fixpoint, get_backend, ir
    from vyre_numba.errors import SettingError
    from vyre_numba.fixpoint import runner

    be = get_backend("reference")
    p = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64, [ir.store("x", ir.gid(0), 1)], name="p")
    x = be.upload(np.zeros(4, np.uint32))
    calls = {"fixpoint run": lambda bad: fixpoint.run(lambda i, a: 0, 2, [np.zeros(2)], backend="reference",
                                                      progress=bad),
             "fused sequence": lambda bad: be.dispatch_sequence([(p, [x])], read=[(x, 0, 4)], fuse=True, progress=bad)}
    for name, call in calls.items():
        for bad, error in (("x", VyreError), (None, SettingError)):
            before = (be.telemetry(), runner._CPU_ROUNDS.hits + runner._CPU_ROUNDS.misses)
            if bad is None:
                monkeypatch.setenv(progress.ENV, "2")
            with pytest.raises(error, match="Fix:"):
                call(bad)
            monkeypatch.delenv(progress.ENV, raising=False)
            assert (be.telemetry(), runner._CPU_ROUNDS.hits + runner._CPU_ROUNDS.misses) == before, name


@pytest.mark.parametrize("fails_at", ["made", "update", "close"])
def test_a_bar_that_cannot_be_drawn_goes_with_a_warning_and_the_work_goes_on(bars, monkeypatch, fails_at):
    """Regression (a red-team): with standard error closed (tqdm's AttributeError) or full (OSError), the
    default bar, once shown, stopped the work with a raw error: a fixed point rolled back every round."""
    from vyre_numba import fixpoint

    class Broken(FakeBar):
        def __init__(self, **kw):
            if fails_at == "made":
                raise OSError(28, "No space left on device")
            super().__init__(**kw)

        def update(self, n=1):
            if fails_at == "update":
                raise AttributeError("'NoneType' object has no attribute 'write'")
            super().update(n)

        def close(self):
            if fails_at == "close":
                raise OSError(28, "No space left on device")
            super().close()

    monkeypatch.setattr(progress, "_tqdm", lambda **kw: Broken(**kw))
    clock = iter(np.arange(0, 100, 0.3))  # every read a third of a second on: the automatic bar shows by the fifth
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))

    def step(i, x):
        x[i] = min(x[i] + 1, 20)
        return int(x[i] < 20)

    for asked in (None, True):  # the automatic bar and one asked for (a review: True raised the raw error)
        x = np.zeros(1, np.int64)
        with pytest.warns(UserWarning, match=r"the fixpoint rounds progress bar cannot be drawn .*the work goes on "
                                             r"without it\. Fix: "):
            r = fixpoint.run(step, 1, [x], max_rounds=100, backend="reference", progress=asked)
        assert r.converged and x.tolist() == [20]
