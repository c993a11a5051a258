"""Record once, replay many times: `backend.record_graph(...)` and `backend.record_sequence(...)`
return a `RecordedGraph`. On the GPU it is a CUDA graph that owns its stream and buffers; here is
the surface every backend offers and the implementation that re-dispatches, which serves the
reference backend (so notebooks run anywhere) and is the oracle for the CUDA one."""
from __future__ import annotations

import abc
import dataclasses
import operator
import threading
from collections.abc import Mapping as MappingABC
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import display
from .bindings import Binding, bind, check_config, check_resident, coverage_said
from .config import DispatchConfig
from .errors import (IN_HOST_MEMORY, DispatchError, ImmutableError, LaunchError, NotACollection, UnknownBufferError,
                     UnknownStepError, VyreError, check_calls, del_unless_read_only, flag, host_memory,
                     set_unless_read_only, shown)
from .ir import Program
from .owned import Unshared

__all__ = ["RecordedGraph", "RecordedSequence", "Frozen", "StepBuffers", "UnknownStepError",
           "MAX_RECORDED_LAUNCHES"]


class RecordedGraph(NotACollection, Unshared, abc.ABC):
    """A dispatch or a resident sequence captured once and replayed. It owns what it captured
    (on the GPU: the graph, its stream, device and pinned buffers), released exactly once by
    `close()`, by leaving a `with` block, or when the object is collected."""

    _collection_fix = ("g.buffers holds a recording's buffers by name (s.buffers[k] step k's, for a sequence), "
                       "and g.replay() runs it again.")

    def __new__(cls, *args, **kwargs):
        missing = getattr(cls, "__abstractmethods__", None)
        if missing and not cls.__module__.startswith("vyre_numba."):  # a user's subclass
            ours = next(b for b in cls.__mro__ if b.__module__.startswith("vyre_numba."))
            raise DispatchError(f"{cls.__name__} does not implement {', '.join(sorted(missing))} of {ours.__name__}. "
                                "Fix: define them, or use what backend.record_graph and record_sequence return.")
        if missing:
            raise DispatchError(f"{cls.__name__} is what a backend's record_graph and record_sequence return, not "
                                "made directly. Fix: backend.record_graph(program, inputs, config), or "
                                "backend.record_sequence(steps, read).")
        return super().__new__(cls)

    _closed: bool = False
    _buffers: Any = None
    _read_only_fix = "record again (backend.record_graph / record_sequence)"
    _RECORDED = ("backend", "program", "config", "binding", "steps", "read")  # what it was made for, set once

    def __setattr__(self, name: str, value) -> None:
        self._refuse_change(name)
        set_unless_read_only(self, name, value, 2)

    def __delattr__(self, name: str) -> None:
        self._refuse_change(name)
        del_unless_read_only(self, name)

    def _refuse_change(self, name: str) -> None:
        if name in self._RECORDED and name in self.__dict__:
            raise ImmutableError(f"{self._kind()}.{name} is what it was recorded with and cannot change. Fix: record "
                                 f"again with the {name} you want (backend.record_graph / record_sequence).")

    @property
    def closed(self) -> bool:
        """Whether `close()` has released what the recording owned (then it replays no more)."""
        return self._closed

    @property
    def buffers(self):
        """The buffers the recording runs over, by name (for a sequence, each step's): read-only,
        so write new data into the arrays themselves."""
        return self._buffers

    @buffers.setter
    def buffers(self, value) -> None:
        where = "s.buffers[k]['x']" if isinstance(self, RecordedSequence) else "g.buffers['x']"
        raise DispatchError("a recording's buffers are the ones it captured and cannot be replaced. Fix: write into "
                            f"them (backend.write({where}, values)), or record again over new buffers.")

    @abc.abstractmethod
    def replay(self, inputs: Sequence | Mapping | None = None) -> list[np.ndarray]:
        """Run again; for a recorded dispatch, on new host inputs of the recorded sizes and dtypes,
        written into `buffers` (the outputs come back as new arrays, and `buffers` keep this run's
        state for `replay_resident`); for a recorded sequence, the reads."""

    @abc.abstractmethod
    def replay_resident(self, *, read: bool = True) -> list[np.ndarray]:
        """Run only the kernels over the buffers bound at recording (`buffers`), then, unless
        `read` is False, the declared readback: the outputs of a dispatch, the reads of a sequence."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release everything the recording owns (once; later calls do nothing)."""

    def synchronize(self) -> None:
        """Wait for replays issued with `read=False` (here every replay has finished already)."""

    def __enter__(self) -> "RecordedGraph":
        with self._lock:
            self._check_open()  # a closed one is refused here, not at the first replay inside
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _summary(self) -> list[tuple[str, object]]:
        """(field, value) pairs describing the recording, for its displays."""
        backend = getattr(self, "backend", None)
        program, steps = getattr(self, "program", None), getattr(self, "steps", None)
        what = (f"dispatch of {program.name!r}" if program is not None else
                f"sequence of {len(steps)} step{'s' if len(steps) != 1 else ''}" if steps else "sequence")
        out = [("records", what), ("backend", getattr(backend, "name", "?")), ("state", "closed" if self.closed else "open")]
        buffers = getattr(self, "buffers", None)
        if isinstance(buffers, MappingABC) and buffers:
            out.append(("buffers", ", ".join(f"{k}: {display.shape_text(v)}" for k, v in buffers.items()
                                             if hasattr(v, "dtype"))))
        launches = getattr(self, "launches", None)
        if launches is not None:
            out.append(("kernel launches per replay", launches))
        return out

    def _kind(self) -> str:
        """The documented type it is (each backend's class is its own)."""
        return "RecordedSequence" if isinstance(self, RecordedSequence) else "RecordedGraph"

    def __repr__(self) -> str:
        fields = dict(self._summary())
        return f"<{self._kind()}: {fields['records']} on {fields['backend']}, {fields['state']}>"

    def _repr_html_(self) -> str:
        return display.fields_table(self._summary(), title=self._kind())

    def _check_open(self) -> None:
        """Refused once closed. Callers hold `self._lock` with a plain `with` (a close from another
        thread waits for the call in flight): a C lock's `with` leaves no point where an interrupt
        finds it taken and never released, as a generator's context manager did."""
        if self.closed:
            raise DispatchError("this recorded graph was closed. Fix: record a new one "
                                "(backend.record_graph / record_sequence).")

    @staticmethod
    def _read_flag(read) -> bool:
        """`replay_resident`'s `read`, a bool (a string such as "no" is not read as True)."""
        return flag(read, "read", "pass read=True (read the outputs back) or read=False (leave them on the device).")


def _one_array(x) -> bool:
    try:
        return any(hasattr(x, k) for k in ("dtype", "__array_interface__", "__cuda_array_interface__"))
    except Exception:  # a property that raises: binding the value says what is wrong
        return False


def input_dtypes(program: Program, inputs: Sequence | Mapping | None) -> dict[str, str]:
    """The dtype (as text) of each given input that has one (arrays, tensors, NumPy scalars), by
    buffer name; inputs without a dtype (lists, Python numbers) are left out."""
    names = [d.name for d in program.inputs]
    if inputs is None or _one_array(inputs):  # a bare array is no list of inputs: binding says so
        return {}
    if isinstance(inputs, Mapping):
        items = [(k, inputs[k]) for k in names if k in inputs]
    else:
        try:
            items = list(zip(names, inputs))
        except TypeError:
            return {}
    out = {}
    for k, v in items:
        try:
            dt = getattr(v, "dtype", None)
        except Exception:  # a property that raises: no dtype to record; binding the value says what is wrong
            dt = None
        if dt is not None:
            try:
                out[k] = np.dtype(dt).str
            except TypeError:
                out[k] = str(dt)  # a framework's dtype (torch.float32): compared by name
    return out


def check_replay_dtypes(program: Program, recorded: Mapping[str, str], inputs: Sequence | Mapping | None) -> None:
    """Refuse a replay whose input arrays have a dtype other than the recorded sample's and the
    buffer's own (a replay never converts what the recording did not)."""
    now = input_dtypes(program, inputs)
    own = {d.name: np.dtype(d.dtype.storage).str for d in program.inputs}
    diff = {k: (recorded.get(k, own[k]), v) for k, v in now.items() if v not in (recorded.get(k), own[k])}
    if diff:
        untyped = sorted(k for k in diff if k not in recorded)
        why = (f" ({', '.join(map(repr, untyped))} recorded from values without a dtype, such as a list: a replay "
               "takes the buffer's own dtype there)" if untyped else "")
        raise DispatchError(f"replay of {program.name!r}: input dtypes differ from the recording's "
                            f"(recorded, given): {diff}{why}. Fix: pass arrays of the recorded dtypes, or record "
                            "a new graph for these with backend.record_graph(program, inputs, config).")


def check_replay_sizes(recorded: Binding, now: Binding) -> None:
    """Refuse a replay whose buffers differ in size from the recording's."""
    if now.sizes != recorded.sizes:
        diff = {k: (recorded.sizes[k], now.sizes.get(k)) for k in recorded.sizes if recorded.sizes[k] != now.sizes.get(k)}
        raise DispatchError(f"replay of {recorded.program.name!r}: buffer sizes differ from the recording's "
                            f"(recorded, given): {diff}. Fix: record a new graph for these sizes with "
                            "backend.record_graph(program, inputs, config).")


MAX_RECORDED_LAUNCHES = 1 << 16  # fixpoint iterations one recorded graph holds (on the GPU a node and a capture
#                                  call each; every backend refuses more alike)


def check_recorded_launches(what: str, launches: int) -> None:
    """A recording of `launches` kernel launches (`what` names it), refused past MAX_RECORDED_LAUNCHES."""
    if launches > MAX_RECORDED_LAUNCHES:
        raise LaunchError(f"{what}: a recorded graph keeps one node a launch, and its launches (one a step, or its "
                          f"fixpoint_iterations) make {launches}. Fix: record at most {MAX_RECORDED_LAUNCHES} launches "
                          "and replay the graph repeatedly, or run to convergence on the device with fixpoint.run or "
                          "backend.megakernel(..., until=...).")


class Redispatch(RecordedGraph):
    """A recorded dispatch that replays by dispatching again: the reference backend's graphs."""

    @host_memory("record_graph", IN_HOST_MEMORY)
    def __init__(self, backend, program: Program, sample_inputs: Sequence | Mapping | None,
                 config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None):
        from .checked import refuse

        refuse(config, "record_graph")
        self.backend, self.program, self.config = backend, program, check_config(config)
        binding = bind(program, sample_inputs, self.config, sizes, call="record_graph")
        check_recorded_launches(f"record_graph of {program.name!r}", self.config.fixpoint_iterations)
        self._dtypes = input_dtypes(program, sample_inputs)
        self._sizes = {b.name: binding.sizes[b.name] for b in program.outputs}
        from .backend import uncounted

        with uncounted():  # as the GPU's recording counts: the recording, not its buffers' uploads
            self._buffers = Frozen({d.name: backend.upload(binding.arrays[d.name]) for d in program.bound_buffers})
        self._layout = {k: (tuple(b.shape), b.dtype) for k, b in self._buffers.items()}
        self.binding = dataclasses.replace(binding, arrays={})  # its sizes, for replays; the arrays went up
        self._lock = threading.RLock()  # a close from another thread waits for the replay in flight
        backend._count(graph_recordings=1)

    @coverage_said
    @host_memory("replay", IN_HOST_MEMORY)
    def replay(self, inputs: Sequence | Mapping | None = None) -> list[np.ndarray]:
        self._check_open()
        check_replay_dtypes(self.program, self._dtypes, inputs)
        now = bind(self.program, inputs, self.config, self._sizes_for_outputs(), call="replay")
        check_replay_sizes(self.binding, now)
        # as on the GPU, the inputs go into the recording's own buffers, so a replay_resident after
        # this continues from the state this replay leaves; a replay that fails puts them back
        with self._lock:
            self._check_open()
            # what was copied in and what the run writes are put back where it fails, even where the
            # failure (an interrupt) comes after the run's own all-or-nothing has let its writes stand
            self._check_own_buffers("replay")
            saved = {name: self.buffers[name].copy() for name in dict.fromkeys(d.name for d in self.program.inputs
                                                                                 + self.program.outputs)}
            own = list(self.buffers.values())
            given = {d.name: now.arrays[d.name] for d in self.program.inputs}  # copied where they are views of the
            given = {k: a.copy() if any(np.may_share_memory(a, b) for b in own) else a  # buffers written below
                     for k, a in given.items()}
            try:
                for d in self.program.inputs:
                    self.buffers[d.name][...] = given[d.name].reshape(-1)
                from .backend import uncounted

                with uncounted():
                    self.backend.dispatch_resident(self.program, self.buffers, self.config)
            except BaseException:
                for name, was in saved.items():
                    self.buffers[name][...] = was
                raise
            try:
                moved = sum(given[d.name].nbytes for d in self.program.inputs)
                return self._counted_read(moved)
            except BaseException as e:  # the run is done: its inputs and results stay together, as they are
                e.add_note("replay: the run completed, and its inputs and results stay in the recording's buffers "
                           "(.buffers); only reading the results back stopped.")
                raise

    @coverage_said
    @host_memory("replay_resident", IN_HOST_MEMORY)
    def replay_resident(self, *, read: bool = True) -> list[np.ndarray]:
        read = self._read_flag(read)
        with self._lock:
            self._check_open()
            self._check_own_buffers("replay_resident")
            from .backend import uncounted

            with uncounted():
                self.backend.dispatch_resident(self.program, self.buffers, self.config)
            return self._counted_read(0, read)

    def _counted_read(self, moved: int, read: bool = True) -> list[np.ndarray]:
        """The outputs read back (none unless `read`), counted as the GPU's replay counts: one replay,
        the labelled dispatch, the bytes it moved in and out, and its wait where it reads."""
        from .backend import uncounted

        out = []
        if read:
            with uncounted():
                out = [_declared(d, self.backend.download(self.buffers[d.name])) for d in self.program.outputs]
        labelled = {f"dispatches[{self.config.label}]": 1} if self.config.label else {}
        self.backend._count(graph_replays=1, bytes_moved_by_graphs=moved + sum(a.nbytes for a in out),
                            sync_points=int(read), **labelled)
        return out

    def _check_own_buffers(self, call: str) -> None:
        """The recording's buffers as recorded, else a DispatchError naming the change: each as
        shaped and typed, and writable where the call writes it (a replay copies the inputs in and
        writes the results; a replay_resident writes only what the program writes)."""
        from .ir.program import Access

        written = {d.name for d in self.program.bound_buffers if d.access in (Access.READ_WRITE, Access.WRITE_ONLY)}
        if call == "replay":
            written |= {d.name for d in self.program.inputs}
        for name, (shape, dtype) in self._layout.items():
            b = self._buffers[name]
            what = ("made read-only" if isinstance(b, np.ndarray) and not b.flags.writeable and name in written else
                    layout_change(b, shape, dtype))
            if what is not None:
                raise DispatchError(f"{call}: the recording's buffer {name!r} was {what}, so the replay cannot write "
                                    "it. Fix: record again (backend.record_graph(program, inputs, config)), and read "
                                    "or copy the new recording's buffers rather than change their flags, shape or "
                                    "dtype.")

    def _sizes_for_outputs(self) -> dict[str, int]:
        from .ir.program import Role

        return {d.name: self._sizes[d.name] for d in self.program.outputs if d.role is Role.OUTPUT}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._buffers = Frozen({})


class RecordedSequence(RecordedGraph):
    """A recorded resident sequence: replay() runs its steps over the buffers bound at recording
    and returns its reads, so replay_resident is replay with the reads kept or dropped."""

    def replay_resident(self, *, read: bool = True) -> list[np.ndarray]:
        read = self._read_flag(read)
        out = self.replay()
        return out if read else []

    def _check_sequence_replay(self, inputs) -> None:
        """A recorded sequence replays open, and over the buffers bound at recording only."""
        self._check_open()
        if inputs is not None:
            raise DispatchError("a recorded sequence runs over the resident buffers bound at recording and "
                                "takes no inputs. Fix: write new data into those buffers (backend.write(buffer, values)), then call "
                                "replay().")


class Resequence(RecordedSequence):
    """A recorded resident sequence that replays by running it again."""

    def __init__(self, backend, steps: Iterable, read: Iterable = ()):
        from .backend import _iterable, as_step

        self.backend = backend
        from .checked import refuse

        steps = [as_step(s) for s in _iterable(steps, "steps")]
        for k, s in enumerate(steps):
            refuse(s.config, "record_sequence")
            try:  # what a replay would refuse, refused now, as the GPU's recording does
                backend._check_step(s)
            except VyreError as e:
                if e.args:
                    e.recorded_step = (k, e.args[0])  # the step and its own message, for callers that renumber
                    e.args = (f"record_sequence, step {k}: {e.args[0]}", *e.args[1:])
                raise
        self.read = backend._reads(read)
        self.steps, self._buffers = pinned_steps(steps)  # held, so they outlive the recording's use
        self._layout = [{n: (tuple(b.shape), b.dtype) for n, b in f.items()} for f in self._buffers]
        self._lock = threading.Lock()
        backend._count(graph_recordings=1)

    @coverage_said
    def replay(self, inputs: Sequence | Mapping | None = None) -> list[np.ndarray]:
        self._check_sequence_replay(inputs)
        with self._lock:
            self._check_open()
            self._check_buffers()
            from .backend import label_counts, uncounted

            with uncounted():
                out = self.backend.dispatch_sequence(self.steps, self.read, progress=False)  # as the GPU's: no bar
            self.backend._count(graph_replays=1, sync_points=1, **label_counts(self.steps))
            return out

    def _check_buffers(self) -> None:
        """Each step's buffers (the caller's own arrays, bound at recording) shaped and typed as
        recorded, and writable where the step writes them: all checked before any step runs."""
        from .ir.program import Access

        for k, step in enumerate(self.steps):
            for d in step.program.bound_buffers:
                b = self._buffers[k][d.name]
                shape, dtype = self._layout[k][d.name]
                what = layout_change(b, shape, dtype)
                if what is not None:
                    raise DispatchError(f"replay: step {k}'s buffer {d.name!r} was {what} since it was recorded "
                                        "(nothing ran). Fix: record again (backend.record_sequence(steps, read)), "
                                        "and copy the recording's buffers rather than change their shape or dtype.")
                if d.access in (Access.READ_WRITE, Access.WRITE_ONLY) and isinstance(b, np.ndarray) and \
                        not b.flags.writeable:
                    raise DispatchError(f"replay: step {k} writes {d.name!r}, and the array bound to it at recording "
                                        "was made read-only since. Fix: make it writable again "
                                        "(x.setflags(write=True) on the array you uploaded), or record again over "
                                        "writable buffers.")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._buffers = StepBuffers()
            object.__setattr__(self, "steps", [])  # released: what it was recorded with, dropped once
            object.__setattr__(self, "read", [])


def layout_change(b, shape: tuple, dtype) -> str | None:
    """How a recording's buffer `b` differs from the `shape` and `dtype` it was recorded with, for a
    message ("reshaped to (2, 2)", "given dtype float32"); None where it does not."""
    return (f"reshaped to {tuple(b.shape)}" if tuple(b.shape) != shape else
            f"given dtype {b.dtype}" if b.dtype != dtype else None)


class Frozen(MappingABC):
    """A read-only mapping of a recording's buffers by name (`where`: how a lookup is written, for
    its errors: "g.buffers", or "s.buffers[k]" for step k of a sequence)."""

    def __init__(self, items: Mapping, where: str = "g.buffers") -> None:
        if not isinstance(items, MappingABC) or not isinstance(where, str):
            raise DispatchError(f"Frozen({shown(items, 40)}, where={shown(where, 40)}): it takes a mapping of buffers "
                                "by name and the text its errors write a lookup with. Fix: pass a dict, e.g. "
                                "Frozen({'x': x}); recordings make their own (g.buffers).")
        self._items = dict(items)
        self._where = where

    def __getitem__(self, name):
        try:
            return self._items[name]
        except (KeyError, TypeError, ValueError):  # an unhashable name (a writable memoryview's hash: ValueError)
            pass
        if self._items:
            names = f"its buffers are {sorted(self._items)}"
            fix = f"use one of those names ({self._where}[{next(iter(self._items))!r}])"
        else:
            names = "it holds none: it is closed, or its program binds no buffers"
            fix = "record again (backend.record_graph / record_sequence) to have buffers to read"
        whose = "the recording" if self._where == "g.buffers" else f"{self._where} (a step of the recording)"
        raise UnknownBufferError(f"{whose} has no buffer {shown(name, 60)}; {names}. Fix: {fix}.")

    def __contains__(self, name) -> bool:  # without building __getitem__'s message for a miss
        try:
            return name in self._items
        except (TypeError, ValueError):
            return False

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other) -> bool:  # the same names bound to the same buffers (arrays have no one truth of ==)
        if not isinstance(other, MappingABC):
            return NotImplemented
        try:
            return self.keys() == other.keys() and all(v is other[k] for k, v in self._items.items())
        except Exception:  # noqa: BLE001 - a mapping whose lookups raise equals none of ours
            return False

    def __hash__(self) -> int:
        return hash(frozenset((k, id(v)) for k, v in self._items.items()))

    def copy(self) -> dict:
        """The buffers by name, as a dict of one's own (the arrays are the recording's)."""
        return dict(self._items)

    def __or__(self, other) -> dict:
        return dict(self._items) | dict(other) if isinstance(other, MappingABC) else NotImplemented

    def __ror__(self, other) -> dict:
        return dict(other) | self._items if isinstance(other, MappingABC) else NotImplemented

    def __repr__(self) -> str:  # each buffer's type and shape: its values are a wall of numbers in a notebook
        def kind(v) -> str:  # a buffer given by its __cuda_array_interface__ alone has no dtype or shape
            return display.shape_text(v) if hasattr(v, "dtype") and hasattr(v, "shape") else type(v).__name__
        items = [f"{k!r}: {kind(v)}" for k, v in list(self._items.items())[:20]]
        more = [f"... {len(self._items) - 20} more"] if len(self._items) > 20 else []
        return "{" + ", ".join(items + more) + "}"

    def _refuse(self, *args):
        """Refused with a DispatchError: the recording's buffers stay the ones it captured."""
        raise DispatchError("a recording's buffers are the ones it captured; the mapping cannot change. Fix: write "
                            f"into the arrays themselves (backend.write({self._where}['x'], values)).")

    __setitem__ = __delitem__ = pop = popitem = clear = update = setdefault = _refuse


class _NoSuchStep(DispatchError, ValueError):
    """No step's buffers are the value `StepBuffers.index` was asked for."""


class StepBuffers(tuple):
    """A recorded sequence's buffers: for each step, in order, a read-only mapping (`Frozen`) of
    the buffers it runs over by name, so `s.buffers[k]['x']`."""

    def __new__(cls, steps: Iterable = ()) -> "StepBuffers":
        try:
            steps = None if isinstance(steps, (str, bytes, MappingABC)) else tuple(steps)
        except TypeError:  # not iterable
            steps = None
        if steps is None or not all(isinstance(f, Frozen) for f in steps):
            raise DispatchError("StepBuffers takes a list of Frozen mappings, one a step. Fix: read a recorded "
                                "sequence's own (s.buffers) rather than make one.")
        return super().__new__(cls, steps)

    def index(self, value, *args) -> int:
        """The number of the first step whose mapping equals `value` (a DispatchError, also a ValueError
        as tuple.index raises, where none does)."""
        try:
            return super().index(value, *args)
        except (ValueError, TypeError):
            raise _NoSuchStep(f"no step's buffers are {shown(value, 60)}. Fix: look a step's buffers up by its "
                                "number, s.buffers[k], or a buffer by name, s.buffers[k]['x'].") from None

    def __getitem__(self, k):
        if isinstance(k, slice):
            return StepBuffers(super().__getitem__(k))
        try:
            if isinstance(k, (bool, np.bool_)):  # a bool is no step number: said as any other key that is none
                raise TypeError
            k = operator.index(k)
        except TypeError:
            pass
        else:
            if -len(self) <= k < len(self):
                return super().__getitem__(k)
            held = (f"it has {len(self)} steps, numbered 0 to {len(self) - 1} (or -{len(self)} to -1 from the end)"
                    if self else "it holds none: it is closed, or it has no steps")
            fix = f"index a step from 0 to {len(self) - 1}" if self else "record again to have buffers to read"
            raise UnknownStepError(f"a recorded sequence's buffers have no step {shown(k, 60)}; {held}. Fix: {fix}.")
        steps = [i for i, f in enumerate(self) if isinstance(k, str) and k in f]
        if steps:
            one = len(steps) == 1
            where = f"step{'' if one else 's'} {', '.join(map(str, steps))} bind{'s' if one else ''} {k!r}"
            fix = f"s.buffers[{steps[0]}][{k!r}]"
        else:
            where = (f"no step binds it; they bind {[sorted(f) for f in self]}" if self else
                     "it holds none: it is closed, or it has no steps")
            fix = "s.buffers[k]['name'], with a name step k binds" if self else "record again to have buffers to read"
        raise UnknownBufferError(f"a recorded sequence's buffers are one mapping per step, indexed by the step's "
                                 f"number, not by {shown(k, 60)}; {where}. Fix: {fix}.")


def pinned_steps(steps: Sequence, what: str = "record_sequence") -> tuple[list, StepBuffers]:
    """The steps of a recording with each one's buffers fixed by name as they are now (a later
    change to the caller's list or dict does not change the recording: a CUDA graph captured the
    buffers' addresses), and those read-only mappings, one per step (its `buffers`)."""
    from .backend import Step

    check_recorded_launches(what, sum(st.config.fixpoint_iterations if st.config is not None else 1 for st in steps))
    bound = [tuple(check_resident(st.program, st.buffers, what)) for st in steps]
    frozen = StepBuffers(Frozen(dict(zip((d.name for d in st.program.bound_buffers), b)), f"s.buffers[{k}]")
                         for k, (st, b) in enumerate(zip(steps, bound)))
    return [Step(st.program, b, st.config) for st, b in zip(steps, bound)], frozen  # replays bind the tuples


def _declared(decl, arr: np.ndarray) -> np.ndarray:
    from .bindings import output_view

    return output_view(decl, arr)


check_calls(globals(), __all__ + ["Redispatch", "Resequence"])
