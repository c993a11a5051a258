"""A resident sequence, repeated sequence or megakernel that fails or is interrupted says exactly what
ran: a step its check stopped (checked="raise") ran to completion and says so; a KeyboardInterrupt,
wherever it lands, carries a note and `steps_ran` (and a megakernel's fallback `rounds_ran`) that the
buffers agree with; ranges to read back that cannot be read are refused before any step runs.
Recorded sequences' step buffers and telemetry refuse what they cannot take with a VyreError."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.backend import SEQUENCE_NOTE, TELEMETRY_KEYS, Telemetry
from vyre_numba.display import Duration
from vyre_numba.errors import CheckError, CheckWarning, DispatchError, UnknownNameError, VyreError
from vyre_numba.recording import UnknownStepError

from interrupts import interrupted

B = ir.BufferDecl
RAISE, WARN = DispatchConfig(checked="raise"), DispatchConfig(checked=True)
BACKENDS = ["reference", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return vn.get_backend(request.param)


def add(amount: int, name: str = "add", workgroup: int = 32) -> ir.Program:
    """x[i] += amount over u32."""
    i = ir.gid(0)
    return ir.Program([B.read_write("x", 0, "u32")], workgroup,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + amount)])], name=name)


def spill() -> ir.Program:
    """x[i] += 1000, and a store past the end of x: what a checked dispatch finds, after writing."""
    i = ir.gid(0)
    return ir.Program([B.read_write("x", 0, "u32")], 32,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1000),
                                                    ir.store("x", i + ir.buf_len("x"), 7)])], name="spill")


def notes(e: BaseException) -> str:
    return "\n".join(getattr(e, "__notes__", []))


# ---- a step its check stopped ran to completion, and the message says so --------------------------

def test_a_resident_checked_dispatch_that_raises_says_it_wrote(backend):
    x = backend.upload(np.arange(4, dtype=np.uint32))
    with pytest.raises(CheckError) as e:
        backend.dispatch_resident(spill(), [x], RAISE)
    assert "checked dispatch of 'spill' (it ran to completion: its buffers keep everything it wrote) found:" \
        in str(e.value) and "Fix:" in str(e.value), str(e.value)
    assert backend.download(x).tolist() == [1000, 1001, 1002, 1003] and e.value.outputs is None
    with pytest.warns(CheckWarning, match=r"it ran to completion: its buffers keep everything it wrote"):
        backend.dispatch_resident(spill(), [x], WARN)
    assert backend.download(x).tolist() == [2000, 2001, 2002, 2003]


def test_a_sequence_stopped_by_a_check_says_that_step_ran(backend):
    """Regression: the message said "nothing of step 1 ran" while step 1's writes stayed."""
    x = backend.upload(np.zeros(4, np.uint32))
    with pytest.raises(CheckError) as e:
        backend.dispatch_sequence([(add(1), [x]), (spill(), [x], RAISE), (add(100), [x])], [(x,)])
    assert str(e.value).startswith("step 1 of the sequence (step 0 ran and its writes stay; step 1 ran to "
                                   "completion and its writes stay, then its check raised): checked dispatch of "
                                   "'spill'"), str(e.value)
    assert backend.download(x).tolist() == [1001] * 4 and e.value.steps_ran == 2
    with pytest.raises(CheckError) as e:  # the first step: said too, though nothing ran before it
        backend.dispatch_sequence([(spill(), [x], RAISE), (add(100), [x])])
    assert str(e.value).startswith("step 0 of the sequence (step 0 ran to completion and its writes stay, then its "
                                   "check raised): "), str(e.value)
    assert backend.download(x).tolist() == [2001] * 4 and e.value.steps_ran == 1


def test_a_repeated_sequence_stopped_by_a_check_says_that_step_ran(backend):
    x = backend.upload(np.zeros(4, np.uint32))
    with pytest.raises(CheckError) as e:
        backend.dispatch_repeated([(add(1), [x])], [(add(10), [x]), (spill(), [x], RAISE)], 3)
    assert str(e.value).startswith("step 2 of the sequence (steps 0 to 1 ran and their writes stay; step 2 ran to "
                                   "completion and its writes stay, then its check raised)"), str(e.value)
    assert backend.download(x).tolist() == [1011] * 4 and e.value.steps_ran == 3


def test_a_fused_sequence_stopped_by_a_check_names_the_callers_step(backend):
    x = backend.upload(np.zeros(4, np.uint32))
    with pytest.raises(CheckError) as e:  # steps 0 and 1 fuse; the checked step runs alone
        backend.dispatch_sequence([(add(1), [x]), (add(2), [x]), (spill(), [x], RAISE), (add(100), [x])], fuse=True)
    assert str(e.value).startswith("step 2 of the sequence (steps 0 to 1 ran and their writes stay") and \
        "; step 2 ran to completion and its writes stay, then its check raised): " in str(e.value), str(e.value)
    assert backend.download(x).tolist() == [1003] * 4 and e.value.steps_ran == 3


def test_a_check_warning_raised_as_an_error_in_a_sequence_gets_a_note():
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckWarning)
        with pytest.raises(CheckWarning) as e:
            be.dispatch_sequence([(add(1), [x]), (spill(), [x], WARN), (add(100), [x])])
    assert f"{SEQUENCE_NOTE}at step 1 of the sequence (step 0 ran and its writes stay; step 1 ran to " \
           "completion and its writes stay, then its check raised)." in notes(e.value)
    assert be.download(x).tolist() == [1001] * 4 and e.value.steps_ran == 2


@pytest.mark.parametrize("until", [False, True])
def test_a_megakernel_fallback_stopped_by_a_check_says_that_step_ran(backend, until):
    """Regression: the fallback's message said "nothing of step 1 ran" while its writes stayed."""
    x = backend.upload(np.zeros(4, np.uint32))
    flag = backend.upload(np.array([5], np.uint32))
    i = ir.gid(0)
    mark = ir.Program([B.read_write("x", 0, "u32"), B.read_write("flag", 1, "u32")], 32,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1), ir.store("flag", 0, 1)])],
                      name="mark")
    with backend.megakernel([(mark, [x, flag]), (spill(), [x], RAISE)], [(x,)], until=flag if until else None,
                            max_rounds=3) as mk:
        assert mk.mode == "sequence" and mk.reason == "step 1 is checked (a checked dispatch reads its counts back " \
            "after its launch)"  # planned so: it said "graph", then found at run time that none records a check
        with pytest.raises(CheckError) as e:
            mk.run()
    cleared = "the flag `until` was cleared; " if until else ""
    assert str(e.value).startswith(f"round 1 of the megakernel's sequence fallback, step 1 (no earlier round ran; "
                                   f"{cleared}step 0 of round 1 ran and its writes stay; step 1 ran to completion and "
                                   "its writes stay, then its check raised): checked dispatch of 'spill'"), str(e.value)
    assert backend.download(x).tolist() == [1001] * 4 and e.value.rounds_ran == 0 and e.value.steps_ran == 2


# ---- interrupts carry what ran -----------------------------------------------------------------

def check_every_interrupt(run, state, after, every: int) -> int:
    """Interrupt `run()` at every `every`-th event until it finishes: each interrupt's `steps_ran`
    (and note) agrees with `state()`, which is `after(n)` once n steps ran; without a note, nothing
    or everything ran. The number of interrupts."""
    k = 0
    while True:
        k += every
        reset = state(reset=True)
        e = interrupted(k, run)
        if e is None:
            return k // every
        got, said = state(), notes(e)
        if not hasattr(e, "steps_ran"):  # before the sequence began, or once it had returned
            assert said == "" and got in (reset, after(None)), (k, got)
            continue
        n = e.steps_ran
        assert said.startswith(SEQUENCE_NOTE), said
        if "was under way: a dispatch on the reference backend is all or nothing" in said:
            assert f"at step {n} of the sequence" in said and got in (after(n), after(n + 1)), (k, said, got)
        else:
            assert got == after(n), (k, said, got)
            ran = f"({'step 0 ran and its' if n == 1 else f'steps 0 to {n - 1} ran and their'} writes stay"
            assert (f"reading back the ranges in `read` {ran})" in said and n == after.steps) or \
                f"after step {n - 1} of the sequence {ran}; nothing after them ran)" in said or \
                (said.endswith("before its first step (nothing ran).") and n == 0), (k, said)


def test_an_interrupted_sequence_says_which_steps_ran_wherever_it_lands():
    """Regression: a KeyboardInterrupt out of dispatch_sequence / dispatch_repeated carried no
    record of which steps had run."""
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    steps = [(add(1), [x]), (add(10), [x]), (add(100, "hundred"), [x])]

    def state(reset: bool = False) -> int:
        if reset:
            be.write(x, np.zeros(4, np.uint32))
        v = be.download(x).tolist()
        assert len(set(v)) == 1, v
        return v[0]

    def after(n):
        return 111 if n is None else [0, 1, 11, 111][n]

    after.steps = 3
    assert check_every_interrupt(lambda: be.dispatch_sequence(steps, [(x,)]), state, after, 1) > 100
    assert check_every_interrupt(lambda: be.dispatch_repeated(steps[:1], steps[1:2], 2), state,
                                 _repeated_after, 1) > 100


def _repeated_after(n):
    return 21 if n is None else [0, 1, 11, 21][n]


_repeated_after.steps = 3


def test_an_interrupt_in_a_step_or_between_steps_is_said_exactly(monkeypatch):
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    real, calls = be.dispatch_resident, []

    def interrupt_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(be, "dispatch_resident", interrupt_third)
    with pytest.raises(KeyboardInterrupt) as e:
        be.dispatch_repeated([(add(1), [x])], [(add(10), [x])], 5)
    assert e.value.steps_ran == 2 and e.value.sequence_step[0] == 2
    assert notes(e.value) == (f"{SEQUENCE_NOTE}at step 2 of the sequence (steps 0 to 1 ran and their writes stay; "
                              "step 2 was under way: a dispatch on the reference backend is all or nothing, so either "
                              "all of its writes stay or none do).")
    assert be.download(x).tolist() == [11] * 4
    monkeypatch.undo()

    def steps():
        yield (add(1), [x])
        yield (add(10), [x])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as e:
        be.dispatch_sequence(steps())
    assert e.value.steps_ran == 2 and notes(e.value) == (
        f"{SEQUENCE_NOTE}after step 1 of the sequence (steps 0 to 1 ran and their writes stay; nothing after them "
        "ran).")
    assert be.download(x).tolist() == [22] * 4


def test_an_interrupt_on_another_backend_names_the_buffers_the_step_under_way_writes(monkeypatch):
    from vyre_numba.reference import ReferenceBackend

    class Elsewhere(ReferenceBackend):
        name = "elsewhere"  # a backend whose dispatch is not all or nothing, such as the GPU's

        def dispatch_resident(self, program, buffers, config=None):
            super().dispatch_resident(program, buffers, config)
            if program.name == "hundred":
                raise KeyboardInterrupt

    be = Elsewhere()
    x = be.upload(np.zeros(4, np.uint32))
    with pytest.raises(KeyboardInterrupt) as e:
        be.dispatch_sequence([(add(1), [x]), (add(100, "hundred"), [x])])
    assert notes(e.value) == (f"{SEQUENCE_NOTE}at step 1 of the sequence (step 0 ran and its writes stay; "
                              "step 1 was under way: the buffers it writes (['x']) may hold some or all of its work "
                              "(its kernel may have been launched)).")
    assert e.value.steps_ran == 1


def test_an_interrupt_in_a_fused_kernel_names_the_callers_steps(monkeypatch):
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    real = be.dispatch_resident

    def interrupt_fused(program, *args, **kwargs):
        if program.name not in ("add", "thousand"):  # the kernel steps 1 and 2 fused into
            raise KeyboardInterrupt
        return real(program, *args, **kwargs)

    monkeypatch.setattr(be, "dispatch_resident", interrupt_fused)
    with pytest.raises(KeyboardInterrupt) as e:  # step 0 runs alone (another workgroup size)
        be.dispatch_sequence([(add(1000, "thousand", 64), [x]), (add(1), [x]), (add(2), [x])], fuse=True)
    assert notes(e.value) == (f"{SEQUENCE_NOTE}at steps 1 to 2, fused into one kernel, of the sequence (step 0 "
                              "ran and its writes stay; steps 1 to 2 were under way: a dispatch on the reference "
                              "backend is all or nothing, so either all of its writes stay or none do).")
    assert e.value.steps_ran == 1 and be.download(x).tolist() == [1000] * 4


@pytest.mark.gpu
def test_an_interrupt_on_the_gpu_names_the_buffers_the_step_under_way_writes(monkeypatch):
    be = vn.get_backend("cuda")
    x = be.upload(np.zeros(4, np.uint32))
    real = be.dispatch_resident

    def launch_then_interrupt(program, *args, **kwargs):
        real(program, *args, **kwargs)
        if program.name == "hundred":
            raise KeyboardInterrupt

    monkeypatch.setattr(be, "dispatch_resident", launch_then_interrupt)
    with pytest.raises(KeyboardInterrupt) as e:
        be.dispatch_sequence([(add(1), [x]), (add(100, "hundred"), [x]), (add(10), [x])])
    assert "step 1 was under way: the buffers it writes (['x']) may hold some or all of its work" in notes(e.value)
    assert e.value.steps_ran == 1 and be.download(x).tolist() == [101] * 4  # launched: it ran


def test_an_interrupted_megakernel_fallback_says_which_rounds_and_steps_ran():
    """Regression: a KeyboardInterrupt out of the fallback's host loop carried no record of the
    rounds and steps that had run."""
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    # steps of two workgroup sizes cannot be stages of one kernel: the plan replays the two kernels
    steps = [(add(1), [x]), (add(1000, "thousand", 64), [x])]
    with be.megakernel(steps, [(x,)], max_rounds=3) as mk:
        assert mk.mode == "graph", mk.reason
        seen = 0
        k = 0
        while True:
            k += 1
            be.write(x, np.zeros(4, np.uint32))
            e = interrupted(k, mk.run)
            if e is None:
                break
            got, said = int(be.download(x)[0]), notes(e)
            assert SEQUENCE_NOTE not in said, said  # the megakernel's note replaces the sequence's
            if not hasattr(e, "rounds_ran"):
                assert said == "" and got in (0, 3 * 1001), (k, got)
                continue
            seen += 1
            r, s = e.rounds_ran, getattr(e, "steps_ran", None)
            assert said.startswith("Stopped in "), said
            if s is None:  # outside the round's sequence: the round is all or nothing
                assert got in (r * 1001, (r + 1) * 1001), (k, said, got)
                continue
            assert f"round {r + 1} of the megakernel's graph fallback" in said, (k, said)
            mine = [0, 1, 1001]
            if "under way" in said:
                assert got in (r * 1001 + mine[s], r * 1001 + mine[s + 1]), (k, said, got)
            else:
                assert got == r * 1001 + mine[s], (k, said, got)
        assert seen > 10 and int(be.download(x)[0]) == 3 * 1001


def test_an_interrupt_in_a_megakernel_fallback_step_names_the_round_and_step(monkeypatch):
    be = vn.get_backend("reference")
    x, flag = be.upload(np.zeros(4, np.uint32)), be.upload(np.zeros(1, np.uint32))
    i = ir.gid(0)
    mark = ir.Program([B.read_write("x", 0, "u32"), B.read_write("flag", 1, "u32")], 32,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1), ir.store("flag", 0, 1)])],
                      name="mark")
    steps = [(mark, [x, flag], DispatchConfig(fixpoint_iterations=65)), (add(1000, "thousand"), [x])]
    real, calls = be.dispatch_resident, []

    def interrupt(*args, **kwargs):
        calls.append(args[0].name)
        if calls.count("thousand") == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with be.megakernel(steps, [(x,)], until=flag, max_rounds=5) as mk:
        assert mk.mode == "graph", mk.reason
        monkeypatch.setattr(be, "dispatch_resident", interrupt)
        with pytest.raises(KeyboardInterrupt) as e:
            mk.run()
    assert notes(e.value) == ("Stopped in round 2 of the megakernel's graph fallback, step 1 (rounds 1 to 1 "
                              "completed and their writes stay; the flag `until` was cleared; step 0 of round 2 ran "
                              "and its writes stay; step 1 was under way: a dispatch on the reference backend is all "
                              "or nothing, so either all of its writes stay or none do).")
    assert e.value.rounds_ran == 1 and e.value.steps_ran == 1
    assert be.download(x).tolist() == [1065 + 65] * 4


# ---- ranges to read back are checked before anything runs ---------------------------------------

class DLPackOnly:
    """Something with `__dlpack__` and nothing else to size it by."""

    def __dlpack__(self, stream=None):
        raise AssertionError("never read")

    def __dlpack_device__(self):
        return (1, 0)


def unreadable(backend, tmp_path, x) -> list:
    mapped = np.memmap(tmp_path / "m.bin", np.uint32, "w+", shape=(4,))
    return [[(mapped, 0, 4)], [(DLPackOnly(), 0, 1)], [(x, 3, 10)], [(x, -1, 1)], [([1, 2], 0, 1)],
            [(x, 0, 4), ("x", 0, 1)]]


@pytest.mark.parametrize("call", ["sequence", "fused", "repeated", "megakernel", "record_sequence"])
def test_a_read_that_cannot_be_read_is_refused_before_any_step_runs(backend, tmp_path, call):
    """Regression: a memmap or DLPack-only object in read= was refused by the download after
    every step had run (their writes stayed; the message did not say so)."""
    x = backend.upload(np.zeros(4, np.uint32))
    steps = [(add(1), [x]), (add(10), [x])]
    for read in unreadable(backend, tmp_path, x):
        with pytest.raises(DispatchError) as e:
            if call == "sequence":
                backend.dispatch_sequence(steps, read)
            elif call == "fused":
                backend.dispatch_sequence(steps, read, fuse=True)
            elif call == "repeated":
                backend.dispatch_repeated(steps[:1], steps[1:], 3, read)
            elif call == "megakernel":
                backend.megakernel(steps, read, max_rounds=2).run()
            else:
                backend.record_sequence(steps, read).replay()
        text = str(e.value)
        assert "nothing ran" in text and "Fix:" in text, text
        assert backend.download(x).tolist() == [0] * 4, (read, text)


def test_read_entries_are_named_by_their_place():
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    with pytest.raises(DispatchError, match=r"^read entry 1, checked before anything runs \(nothing ran\): download: "
                                            r"a DLPackOnly is not a reference-backend buffer.*Fix:"):
        be.dispatch_sequence([(add(1), [x])], [(x,), (DLPackOnly(), 0, 1)])
    assert be.download(x).tolist() == [0] * 4


# ---- a recorded sequence's step buffers -----------------------------------------------------------

def test_step_buffers_past_the_end_or_closed_are_a_vyre_error_and_an_index_error(backend):
    """Regression: s.buffers[5] and, once closed, s.buffers[0] raised a raw IndexError."""
    x = backend.upload(np.zeros(4, np.uint32))
    s = backend.record_sequence([(add(1), [x]), (add(10), [x])])
    assert s.buffers[-1]["x"] is x and s.buffers[1]["x"] is x and len(s.buffers[:1]) == 1
    for k in (2, -3, np.int64(5), 2**100):
        with pytest.raises(UnknownStepError, match=r"no step .*it has 2 steps, numbered 0 to 1 .*Fix: index a step "
                                                   r"from 0 to 1\.") as e:
            s.buffers[k]
        assert isinstance(e.value, IndexError) and isinstance(e.value, VyreError)
    assert [f["x"] is x for f in s.buffers] == [True, True]
    s.close()
    with pytest.raises(IndexError, match=r"it holds none: it is closed.*Fix: record again"):
        s.buffers[0]


# ---- telemetry -----------------------------------------------------------------------------------

def test_telemetry_refuses_unhashable_names_and_non_int_counts_with_a_vyre_error():
    """Regression: `[] in t` and t.setdefault([]) raised a raw TypeError; a float stored in a counter
    made _repr_html_ raise a raw ValueError."""
    t = vn.get_backend("reference").telemetry()
    odd = memoryview(bytearray(b"a"))  # its hash raises ValueError, not TypeError (as np.timedelta64(3)'s)
    for call in (lambda: [] in t, lambda: t.setdefault([]), lambda: t.pop({}), lambda: t.pop([], 0),
                 lambda: t.get([]), lambda: t[[1]], lambda: odd in t, lambda: t[odd], lambda: t.get(odd),
                 lambda: t.pop(odd), lambda: np.timedelta64(3) in t):
        with pytest.raises(UnknownNameError, match="Fix:"):
            call()
    for call in (lambda: t.__setitem__("mine", 1.5), lambda: t.__setitem__("mine", True),
                 lambda: t.__setitem__(3, 1), lambda: t.setdefault("mine", "x"), lambda: t.update({"mine": None}),
                 lambda: t.update(mine=2.0), lambda: t.update(5), lambda: t.__ior__({"mine": [1]}),
                 lambda: Telemetry({"dispatches": 0.5})):
        with pytest.raises(DispatchError, match="Fix:"):
            call()
    assert "mine" not in t and t.setdefault("mine", np.int64(3)) == 3 and type(t["mine"]) is int
    t["late_ns"] = 1500
    t |= {"dispatches": np.uint8(2)}
    assert isinstance(t["late_ns"], Duration) and t["dispatches"] == 2 and t.pop("mine") == 3
    assert t.pop("mine", None) is None and "mine" not in t
    with pytest.raises(UnknownNameError):
        del t["never"]
    dict.__setitem__(t, "forced", 1.5)  # past every check: still shown
    html = t._repr_html_()
    assert "forced" in html and "1.5<" in html and "1.50 us" in html
    assert set(TELEMETRY_KEYS) <= set(t)


def test_a_sigint_inside_an_uninterrupted_block_arrives_as_it_ends():
    """signals.uninterrupted: the Ctrl-C waits for the block, once, to the handler set before it;
    nested blocks, other threads and an ignored SIGINT are left as they are."""
    import signal
    import threading

    from vyre_numba.signals import uninterrupted

    done = []
    with pytest.raises(KeyboardInterrupt):
        with uninterrupted():
            signal.raise_signal(signal.SIGINT)
            done.append("after the signal")
            with uninterrupted():  # nested: the outer block holds it
                signal.raise_signal(signal.SIGINT)
                done.append("nested")
            done.append("end")
    assert done == ["after the signal", "nested", "end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    calls = []
    old = signal.signal(signal.SIGINT, lambda *a: calls.append(len(done)))
    try:
        with uninterrupted():  # a handler of the caller's: called once, after the block
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            done.append("mine")
        assert calls == [4]
        with pytest.raises(ZeroDivisionError):
            with uninterrupted():  # the block's own error still comes out; the handler is put back
                1 / 0
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with uninterrupted():
            signal.raise_signal(signal.SIGINT)  # ignored, as before
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
    undone = []
    with pytest.raises(KeyboardInterrupt):  # undo: called once where one came, before it is delivered
        with uninterrupted(lambda: undone.append("undo")):
            signal.raise_signal(signal.SIGINT)
    with uninterrupted(lambda: undone.append("never")):
        pass  # none came: nothing to take back
    assert undone == ["undo"]

    def fails():
        undone.append("failed")
        raise RuntimeError("the copy back failed")
    with pytest.raises(KeyboardInterrupt) as e:  # an undo that raises: the Ctrl-C still comes, the failure its context
        with uninterrupted(fails):
            signal.raise_signal(signal.SIGINT)
    assert undone == ["undo", "failed"] and isinstance(e.value.__context__, RuntimeError)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (a review: it stayed held for good)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(uninterrupted().__enter__()._held))
    thread.start()
    thread.join()
    assert seen == [None]  # off the main thread, which Python never interrupts, it holds nothing
