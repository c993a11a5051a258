"""`backend.megakernel(steps, ...)`: a resident sequence as one persistent cooperative launch, with a
grid barrier only where fusion keeps a boundary (`ir.persistent` builds the program), optionally
repeated on the device until a change flag stays zero. Where the sequence cannot be one program or
its grid cannot be co-resident, the plan says why and runs the unfused kernels as a recorded graph
instead (or, where even recording is refused, as a plain sequence)."""
from __future__ import annotations

import dataclasses
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from . import display
from .backend import (BEFORE, SEQUENCE_NOTE, UNDER_WAY, Backend, ResidentBuffer, Step, _elements, _fate, _iterable,
                      _shape, _storage, as_step, checked_steps, label_counts)
from .config import DispatchConfig
from .errors import (DeviceError, DispatchError, ImmutableError, IRValidationError, NotACollection, UnsupportedError,
                     VyreError, check_calls, clip, del_unless_read_only, set_unless_read_only, whole)
from .ir import Program, check
from .ir import nodes as n
from .ir.program import Access, BufferDecl, Role
from .ir.persistent import STATS
from .ir.types import DataType
from .lru import LRUCache
from .owned import Unshared
from .recording import MAX_RECORDED_LAUNCHES, layout_change

__all__ = ["Megakernel", "MegakernelResult", "MAX_ROUNDS", "UNTIL_ROUNDS"]

PLANS = 64  # megakernel plans a backend keeps (programs and decisions; never the buffers)
MAX_UNROLL = 64  # a step's fixpoint_iterations becomes that many stages, up to this many
MAX_ROUNDS = (1 << 31) - 1  # the largest max_rounds (the device counts rounds in 32 bits)
UNTIL_ROUNDS = 10_000  # max_rounds with `until` where none is given, as fixpoint.run's
STATS_BYTES = 8  # the persistent program's stats buffer: rounds run and whether the flag stayed zero


@dataclass(frozen=True, repr=False, eq=False)  # outputs are arrays: compared by identity, as arrays are not
class MegakernelResult(NotACollection, display.Shown):
    """A run: the reads, rounds run, whether the last round left the flag zero (None without
    `until`), the mode that ran ("megakernel", "graph" or "sequence"), why it was not a megakernel
    (None when it was), and device nanoseconds (a `Duration`; None on the CPU)."""

    _collection_fix = "its reads are result.outputs, one array a read: (out,) = mk.run().outputs."

    outputs: list
    rounds: int
    converged: bool | None
    mode: str
    reason: str | None = None
    device_ns: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "device_ns", display.duration(self.device_ns))


@dataclass(frozen=True)
class _Plan:
    mode: str
    reason: str | None
    groups: list
    boundaries: list
    program: Program | None = None
    keys: list | None = None
    barriers: int = 0
    workgroups: int = 0


_PLANNED = ("backend", "steps", "read", "until", "max_rounds")  # what the plan was made from
_CLOSED = "this megakernel was closed. Fix: plan a new one with backend.megakernel(...)."


class Megakernel(NotACollection, Unshared):
    """A planned megakernel over resident buffers: `mode` ("megakernel", or "graph" where it fell
    back, "sequence" where recording that graph failed too; `reason` saying why), `program` (the
    persistent program), `barriers` (grid barriers a round: one where each boundary between
    stages stayed, one after outputs are zeroed, one between rounds, or with `until` three: after
    its flag is cleared, after the stages, after the flag is read), `groups` (step indices each
    stage runs), `boundaries` (why each boundary between stages stayed), `workgroups` (the
    co-resident grid). `run()` runs it. It owns its recorded graph and counters, released once by
    `close()`, a `with` block, or collection."""

    _closed = False

    @property
    def closed(self) -> bool:
        """Whether `close()` has released what the megakernel held (then it runs no more)."""
        return self._closed

    def __init__(self, backend: "Backend", steps: Iterable, read: Iterable = (), *, until: "ResidentBuffer" = None,
                 max_rounds: int | None = None,
                 workgroups: int | None = None, keep: Iterable = ()):
        self.backend = backend
        self.steps = tuple(as_step(s) for s in _iterable(steps, "steps"))
        if not self.steps:
            raise DispatchError("no steps for a megakernel. Fix: pass at least one Step(program, buffers[, config]).")
        self.read = tuple(backend._reads(read))
        self._keep = frozenset(_storage(b) for b in _iterable(keep, "keep"))
        if max_rounds is None:  # one round, or to convergence: one round of `until` would stop half done
            max_rounds = 1 if until is None else UNTIL_ROUNDS
        self.max_rounds = whole(max_rounds, "max_rounds", 1, MAX_ROUNDS)
        if workgroups is not None:
            workgroups = whole(workgroups, "workgroups", 1, 1 << 20)
        bound = checked_steps(backend, self.steps, "megakernel", "megakernel")
        self._labels = label_counts(self.steps)  # counted once a round, as the steps' own dispatches
        self.until = until
        flag = None if until is None else self._flag(until, bound)
        key = (tuple((s.program.digest(), tuple(_storage(b) for b in bs), s.config) for s, bs in zip(self.steps, bound)),
               tuple(_storage(r[0]) + r[1:] for r in self.read), flag, self.max_rounds, workgroups, self._keep,
               getattr(backend, "memory_budget", None))  # the persistent grid is sized in it (the reference's)
        plans = backend.__dict__.setdefault("_megakernel_plans", LRUCache(PLANS))
        plan = plans.get(key)
        backend._count(**{"megakernel_plan_hits" if plan is not None else "megakernel_plan_misses": 1})
        if plan is None:
            plan = plans.put(key, self._recordable(self._plan(bound, flag, workgroups)))
        self._p = plan
        self._bound = bound
        self._checks = [(k, d.name, b, (tuple(b.shape), b.dtype), d.access.writable and isinstance(b, np.ndarray))
                        for k, (s, bs) in enumerate(zip(self.steps, bound))
                        for d, b in zip(s.program.bound_buffers, bs)
                        if hasattr(b, "shape") and hasattr(b, "dtype")]  # as planned: run() refuses them changed
        self._graph = self._stats = self._launch = None
        self._lock = threading.RLock()  # a close from another thread waits for the run in flight
        self._held = [None]  # the fallback graph, once recorded: the finaliser releases what it holds
        self._finalizer = weakref.finalize(self, _release, self._held)

    def __setattr__(self, name: str, value) -> None:
        if name in _PLANNED and name in self.__dict__:  # the plan (the persistent program) was made from it
            raise ImmutableError(f"Megakernel.{name} is fixed once it is planned (its persistent program was built "
                                 f"from it). Fix: plan another, backend.megakernel(steps, read, until=..., "
                                 f"max_rounds=...), with the {name} you want.")
        set_unless_read_only(self, name, value, 2)

    def __delattr__(self, name: str) -> None:
        if name in _PLANNED and name in self.__dict__:
            self.__setattr__(name, None)  # refused: the plan was made from it
        del_unless_read_only(self, name)

    _collection_fix = "mk.steps are its steps, and mk.run() runs them (its result's outputs are what it reads)."
    _read_only_fix = ("plan another, backend.megakernel(steps, read, until=..., max_rounds=...), as you want it "
                      "(close() releases this one)")

    # ---- what it is --------------------------------------------------------------------------
    mode = property(lambda self: self._p.mode, doc="\"megakernel\", or \"graph\" where it fell back (\"sequence\" where "
                    "recording that graph failed too).")
    reason = property(lambda self: self._p.reason, doc="Why it fell back (None when it did not).")
    program = property(lambda self: self._p.program, doc="The persistent program (None where it fell back).")
    barriers = property(lambda self: self._p.barriers, doc="Grid barriers one round runs (see the class).")
    groups = property(lambda self: self._p.groups, doc="The (unrolled) step indices each stage runs.")
    boundaries = property(lambda self: self._p.boundaries, doc="Why each grid barrier between stages stayed.")
    workgroups = property(lambda self: self._p.workgroups, doc="Workgroups of the persistent launch.")

    def __repr__(self) -> str:
        closed = ", closed" if self.closed else ""
        if self.mode != "megakernel":
            return f"<Megakernel falling back to {self.mode}: {self.reason}{closed}>"
        c = display.counted
        return (f"<Megakernel: {c(len(self.groups), 'stage')} from {c(sum(map(len, self.groups)), 'step')}, "
                f"{c(self.barriers, 'grid barrier')} a round, {c(self.workgroups, 'workgroup')}{closed}>")

    # ---- running -----------------------------------------------------------------------------
    def run(self) -> MegakernelResult:
        """Run the sequence (until the flag stays zero, at most `max_rounds` rounds, with `until`;
        else exactly `max_rounds` times) and read back `read`. As a megakernel it is one dispatch:
        on the reference backend one work budget covers every round (a fallback's dispatches have
        one each). An exception out of a fallback's rounds says which rounds and steps ran (a
        VyreError in its message, anything else in a note; `rounds_ran`, `steps_ran`)."""
        with self._lock:
            if self.closed:
                raise DispatchError(_CLOSED)
            return self._run()

    def _recordable(self, plan: _Plan) -> _Plan:
        """`plan`, its graph fallback a plain sequence where a round's launches are more than a
        recorded graph holds (recording would refuse them)."""
        launches = sum(s.config.fixpoint_iterations if s.config is not None else 1 for s in self.steps)
        launches += self.until is not None  # the flag's clearing
        if plan.mode != "graph" or launches <= MAX_RECORDED_LAUNCHES:
            return plan
        return dataclasses.replace(plan, mode="sequence", reason=f"{plan.reason}; and a round's {launches} launches are "
                                   f"more than a recorded graph holds ({MAX_RECORDED_LAUNCHES})")

    def _check_buffers(self) -> None:
        """The buffers the plan was made from, shaped and typed as then and writable where a step
        writes them: checked before anything runs, in the caller's step numbers."""
        for k, name, buf, was, writes in self._checks:
            what = layout_change(buf, *was)
            if what is not None:
                raise DispatchError(f"Megakernel.run: step {k}'s buffer {name!r} was {what} since the megakernel "
                                    "was planned (nothing ran). Fix: put it back as it was, or plan another over "
                                    "the buffers as they are now (backend.megakernel(steps, read, ...)).")
            if writes and not buf.flags.writeable:
                raise DispatchError(f"Megakernel.run: step {k} writes {name!r}, and its array was made read-only "
                                    "since the megakernel was planned (nothing ran). Fix: make it writable again "
                                    "(x.setflags(write=True)), or plan another over writable buffers.")

    def _run(self) -> MegakernelResult:
        b = self.backend
        self._check_buffers()
        timer = b.device_timer if getattr(b, "device_clock", False) else None  # device_ns: None on the CPU
        if self.mode == "megakernel":
            p = self._p
            if self._launch is None:  # the bound buffers in the program's order, found once
                if p.keys[-1:] == [STATS]:
                    self._stats = b.empty(STATS_BYTES // 4, np.uint32)
                by_key = {_storage(buf): buf for bs in self._bound for buf in bs}
                self._launch = ([self._stats if k == STATS else by_key[k] for k in p.keys],
                                DispatchConfig(grid=(p.workgroups, 1, 1), cooperative=True))
            buffers, config = self._launch
            ns, issued = None, False
            try:
                try:
                    if timer is not None:
                        with timer() as t:  # whose exit waits for the launch to end
                            b.dispatch_resident(p.program, buffers, config)
                            issued = True
                        ns = t.ns
                    else:
                        b.dispatch_resident(p.program, buffers, config)
                        issued = True
                except VyreError as e:
                    if e.args:
                        e.args = (self._failed_launch(str(e.args[0])), *e.args[1:])
                    raise
                if self.until is None:
                    b.synchronize()  # and a grid barrier that timed out becomes BarrierTimeoutError
                    rounds, converged = self.max_rounds, None
                else:  # download synchronises and checks the barriers too
                    rounds, done = (int(v) for v in b.download(self._stats))
                    converged = bool(done)
            except BaseException as e:
                if issued and not isinstance(e, Exception):  # an interrupt while the host waits
                    e.add_note("Stopped while waiting for the persistent launch, which was issued and goes on (or "
                               "went) to its end on the device; the rounds it runs write the caller's buffers, and "
                               "how many ran is not known here.")
                raise
            b._count(megakernel_runs=1, **{k: v * rounds for k, v in self._labels.items()})
            return MegakernelResult(self._read_after(rounds), rounds, converged, "megakernel", None, ns)
        b._count(megakernel_fallbacks=1)
        rounds, converged = self._fallback_rounds()
        return MegakernelResult(self._read_after(rounds), rounds, converged, self.mode, self.reason)

    def _read_after(self, rounds: int) -> list:
        """`_reads()`, an exception out of it noted with the rounds that ran (all of them)."""
        try:
            return self._reads()
        except BaseException as e:
            e.add_note(f"Stopped in reading back `read`, after all {rounds} round(s) ran; their writes stay.")
            if not hasattr(e, "rounds_ran"):
                e.rounds_ran = rounds
            raise

    def _fallback_rounds(self) -> tuple[int, bool | None]:
        b = self.backend
        # over the buffers it was planned with, as the megakernel runs: not a caller's list as it is now
        steps = [Step(s.program, bs, s.config) for s, bs in zip(self.steps, self._bound)]
        if self.until is not None:
            steps = [Step(_clear_program(self._until_dtype), [self.until], DispatchConfig(grid=(1, 1, 1)))] + steps
        flag_read = [(self.until, 0, 1)] if self.until is not None else []
        if self._graph is None and self.mode == "graph":
            try:
                graph = b.record_sequence(steps, flag_read)
                self._held[0] = self._graph = graph  # one statement: no interrupt between the two
            except (UnsupportedError, DeviceError) as e:  # the driver will not capture a step: the plain sequence
                if isinstance(e, MemoryError):  # no room now is no refusal of the plan's
                    raise
                self._p = dataclasses.replace(self._p, mode="sequence", reason=f"{self._p.reason}; and recording "
                                              f"the fallback graph failed ({e})")
            except VyreError as e:  # the caller's: said in the caller's steps, the plan left as it is
                if hasattr(e, "recorded_step"):
                    k, said = e.recorded_step
                    k -= self.until is not None
                    where = "clearing the flag `until`" if k < 0 else f"step {k}"
                    e.args = (f"the megakernel's graph fallback, recording its steps ({where}; nothing ran): {said}",
                              *e.args[1:])
                raise
        done, under_way = 0, False  # rounds completed; whether the next is under way (set in one statement
        # each, so that an interrupt between two lines never finds a round counted that has not run)
        try:
            for r in range(1, self.max_rounds + 1):
                under_way = True
                out = self._graph.replay() if self._graph is not None else b.dispatch_sequence(steps, flag_read)
                done, under_way = r, False
                if self.until is not None and not np.any(out[0]):
                    return r, True
        except BaseException as e:
            self._stopped(done + 1 if under_way else done, under_way, e)
            raise
        return self.max_rounds, (False if self.until is not None else None)

    def _stopped(self, r: int, under_way: bool, e: BaseException) -> None:
        """Say on `e`, raised in the fallback's round `r` (`under_way`, else after it), what ran in the
        caller's steps and rounds: `e.rounds_ran` counts the rounds that completed, `e.steps_ran` the
        steps of the next that ran (where known), their writes staying; a VyreError's message starts
        with it, any other exception gets a note in place of the sequence's own."""
        e.rounds_ran = r - 1 if under_way else r
        cleared = self.until is not None  # the sequence's step 0 clears the flag: the caller's steps follow
        k, at = getattr(e, "sequence_step", (0, None))[0] - cleared, getattr(e, "_sequence_at", None)
        if hasattr(e, "steps_ran"):
            e.steps_ran = max(e.steps_ran - cleared, 0)
        where = self._failed_round(r, under_way, k, at, hasattr(e, "sequence_step"))
        if isinstance(e, VyreError):
            if e.args:
                e.args = (f"{where}: {getattr(e, 'sequence_step', (0, e.args[0]))[1]}", *e.args[1:])
            return
        if hasattr(e, "__notes__"):
            e.__notes__ = [note for note in e.__notes__ if not note.startswith(SEQUENCE_NOTE)]
        e.add_note(f"Stopped in {where}.")

    def _failed_round(self, r: int, under_way: bool, k: int, at: str | None, known: bool) -> str:
        """Where the fallback stopped, in the caller's steps and rounds: in round `r` (`under_way`, else
        after it) at the caller's step `k` (-1: clearing the flag `until`), which stood `at` as
        `backend._stopped` says (None: the round's steps ran, its flag was being read); `known`:
        whether the sequence said where (a recorded graph on the GPU does not)."""
        fallback = f"the megakernel's {self.mode} fallback"
        if not under_way:
            return (f"{fallback}, after round {r} (rounds 1 to {r} completed and their writes stay)" if r else
                    f"{fallback}, before its first round (nothing ran)")
        done = f"rounds 1 to {r - 1} completed and their writes stay" if r > 1 else "no earlier round ran"
        where = f"round {r} of {fallback}"
        if not known:
            return f"{where} ({done}; what round {r} wrote is unknown)"
        if k < 0:
            fate = "the flag `until` was being cleared" if at is UNDER_WAY else f"nothing of round {r} ran"
            return f"{where}, clearing the flag `until` ({done}; {fate})"
        ran = ["the flag `until` was cleared"] if self.until is not None else []
        ran += [f"step 0 of round {r} ran and its writes stay"] if k == 1 else \
            [f"steps 0 to {k - 1} of round {r} ran and their writes stay"] if k else []
        if at is None or at is BEFORE:  # between steps: there may be no step k
            what = ("reading its flag `until`" if at is None and self.until is not None else
                    f"after step {k - 1}" if k else "after clearing the flag `until`")
            return (f"{where}, {what} ({'; '.join([done] + ran + ['nothing after them ran'])})" if ran else
                    f"{where} ({done}; nothing of round {r} ran)")
        fate = _fate([k], at, backend=self.backend, step=self.steps[k])
        return f"{where}, step {k} ({'; '.join([done] + ran + [fate])})"

    def _failed_launch(self, message: str) -> str:
        """The message of the persistent launch's failure `message`, in the caller's terms: the
        generated program's loops are no loops the caller wrote."""
        names = list(dict.fromkeys(s.program.name for s in self.steps))
        what = (f"the megakernel of step{'s' if len(names) > 1 else ''} {', '.join(map(repr, names[:8]))}"
                f"{f' and {len(names) - 8} more' if len(names) > 8 else ''}")
        budget = re.search(r"ran out of its work budget of (\S+) units", message)
        if budget is None:
            return f"{what} (one persistent launch of the generated program {self.program.name!r}): {message}"
        rounds = re.search(r"the loop over '_round' at [^,]*, iteration (\d+) of (\d+)", message)
        if rounds is not None:
            r = int(rounds.group(1))
            when = (f"at the start of round {r} of at most {self.max_rounds} (after {r - 1} rounds)"
                    if r > 1 else "at the start of its first round")
        elif self.max_rounds == 1:
            when = "within its one round"
        else:
            when = f"within one of its at most {self.max_rounds} rounds"
        env = re.search(r"\$(\w+)", message)
        return (f"{what} ran out of the {self.backend.name} backend's work budget of {budget.group(1)} units {when}. "
                "The megakernel is one dispatch, so one budget covers every step of every round; the backend undid the "
                "dispatch, so every buffer is as it was before run() (nothing of any round stays). Fix: "
                f"{f'pass a smaller max_rounds (now {self.max_rounds}), ' if self.max_rounds > 1 else ''}raise the budget with "
                f"{type(self.backend).__name__}(work_budget=...){f' or ${env.group(1)}' if env else ''}, or run the "
                "steps as separate dispatches (dispatch_sequence for each round, or dispatch_repeated), where each "
                "dispatch has a budget of its own (as in a megakernel's graph fallback).")

    def _reads(self) -> list[np.ndarray]:
        return [self.backend.download(buf, off, cnt) for buf, off, cnt in self.read]

    def close(self) -> None:
        """Release the recorded fallback graph and the counters, and let go of the steps' buffers
        (once; later calls do nothing)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._finalizer()
                self._graph = self._stats = self._launch = None
                for name, none in (("steps", ()), ("read", ()), ("until", None), ("_bound", ()), ("_checks", [])):
                    object.__setattr__(self, name, none)  # the caller's buffers are theirs again (_PLANNED: by-passed)

    def __enter__(self) -> "Megakernel":
        if self.closed:
            raise DispatchError(_CLOSED)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- planning ----------------------------------------------------------------------------
    def _flag(self, until, bound) -> tuple:
        key = _storage(until)
        where = [(k, d.name) for k, (s, bs) in enumerate(zip(self.steps, bound))
                 for d, buf in zip(s.program.bound_buffers, bs) if _storage(buf) == key]
        if not where:
            raise DispatchError("until= names a buffer no step binds. Fix: pass the resident buffer a step sets "
                                "nonzero when it changed something (and binds as one of its buffers).")
        decls = [next(d for d in self.steps[k].program.bound_buffers if d.name == name) for k, name in where]
        k, name = where[0]
        decl = decls[0]
        if not any(d.access.writable for d in decls):
            raise DispatchError(f"until= is `{name}` of step {k}, which no step may write. Fix: pass the buffer a "
                                "step sets nonzero when it changed something (declared read_write there).")
        if _elements(until) < 1:
            raise DispatchError("until= is an empty buffer. Fix: pass a buffer of at least one element; element 0 "
                                "is the change flag.")
        if decl.dtype.is_float:
            raise DispatchError(f"until= is `{name}` of step {k}, a {decl.dtype.value} buffer. Fix: use an integer "
                                "or bool change flag.")
        have = getattr(until, "dtype", None)
        if have is None or np.dtype(have) != decl.dtype.storage:  # a view in another type reads the flag's bits so
            raise DispatchError(f"until= is a {have} view of `{name}` of step {k}, a {decl.dtype.value} buffer "
                                f"(stored as {decl.dtype.storage}). Fix: pass the buffer the step binds itself.")
        self._until_dtype = decl.dtype
        return key

    def _unroll(self):
        """([(program, step index, config)] with each fixpoint_iterations > 1 as that many copies,
        the copies after the first keeping what the first wrote to pure outputs (a dispatch zeroes
        them once, before its first iteration), or why not)."""
        out = []
        for k, s in enumerate(self.steps):
            c = s.config or DispatchConfig()
            if c.cooperative:
                return None, f"step {k} is a cooperative launch of its own"
            if c.checked:
                return None, f"step {k} is checked (a checked dispatch reads its counts back after its launch)"
            if c.fixpoint_iterations > MAX_UNROLL:
                return None, f"step {k} repeats {c.fixpoint_iterations} times, more than the {MAX_UNROLL} stages it may unroll to"
            once = dataclasses.replace(c, fixpoint_iterations=1)
            out += [(s.program, k, once)] + [(_outputs_kept(s.program), k, once)] * (c.fixpoint_iterations - 1)
        return out, None

    def _plan(self, bound, flag, workgroups) -> _Plan:
        from .ir import fusion, persistent

        unrolled, why = self._unroll()
        if why is None:
            shapes = [_shape(Step(p, bound[k], c), bound[k]) for p, k, c in unrolled]
            why = persistent.why_not(shapes) if shapes else "no step runs (every fixpoint_iterations is 0)"
        if why is not None:  # a checked step reads its counts back after its launch: no graph records that
            checked = any((s.config or DispatchConfig()).checked for s in self.steps)
            return _Plan("sequence" if checked else "graph", why, [[k] for k in range(len(self.steps))], [])
        groups, boundaries = fusion.plan(shapes)
        kept = {_storage(r[0]) for r in self.read} | set(self._keep) | ({flag} if flag is not None else set())
        # rounds read what the previous round left: nothing is scratch when the stages repeat
        scratch = [set() for _ in groups] if self.max_rounds > 1 else fusion.scratch_keys(shapes, groups, kept)
        try:  # one program of every stage: their workgroup memory, parameters and nodes add up
            built = persistent.build(shapes, groups, scratch, flag=flag, max_rounds=self.max_rounds)
            check(built.program)
        except IRValidationError as e:
            return _Plan("graph", f"the steps do not make one valid persistent program ({_first_problem(e)})", groups,
                         boundaries)
        needed = max(sh.invocations for sh in shapes) // shapes[0].workgroup[0]
        try:
            written = {id(b): b for st, buffers in zip(self.steps, bound)  # at most these are copied to undo a run
                       for d, b in zip(st.program.bound_buffers, buffers) if d.access.writable}
            undo = sum(int(getattr(b, "nbytes", 0) or 0) for b in written.values())
            fit = self.backend.cooperative_workgroups(built.program, undo + (STATS_BYTES if STATS in built.keys else 0))
        except VyreError as e:
            return _Plan("graph", f"the persistent program cannot launch cooperatively here ({e})", groups, boundaries)
        if fit < 1:
            return _Plan("graph", "not one workgroup of the persistent program fits co-resident on this device "
                         "(or the device has no cooperative launch)", groups, boundaries)
        if workgroups is not None and workgroups > fit:
            return _Plan("graph", f"workgroups={workgroups} do not fit co-resident (at most {fit} here)", groups,
                         boundaries)
        grid = min(workgroups or fit, max(needed, 1))
        return _Plan("megakernel", None, groups, boundaries, built.program, built.keys, built.barriers, grid)


def _first_problem(e: IRValidationError) -> str:
    """The first of the problems `e` lists, without its Fix (the program is made here, not by the caller)."""
    text = str(getattr(e, "diagnostics", None) and e.diagnostics[0] or e)
    return clip(text.split(" Fix: ")[0].strip(), 300)


def _release(held: list) -> None:
    for g in held:
        if g is not None:
            g.close()


def _outputs_kept(program: Program) -> Program:
    """`program` with its pure outputs read_write: run again, it keeps what it wrote before."""
    if all(b.role is not Role.OUTPUT for b in program.buffers):
        return program
    return Program([dataclasses.replace(b, access=Access.READ_WRITE, output=False) if b.role is Role.OUTPUT else b
                    for b in program.buffers], program.workgroup_size, program.entry, name=program.name)


_CLEARS: dict = {}


def _clear_program(dtype: DataType) -> Program:
    """One invocation storing zero to element 0 of a flag buffer of `dtype`."""
    if dtype not in _CLEARS:
        zero = n.lit(False if dtype is DataType.BOOL else 0, dtype)
        _CLEARS[dtype] = Program([BufferDecl("flag", 0, Access.READ_WRITE, dtype)], (1, 1, 1),
                                 [n.Store("flag", n.lit(0, DataType.U32), zero)], name="clear_flag")
    return _CLEARS[dtype]

check_calls(globals(), ["Megakernel", "MegakernelResult"])
