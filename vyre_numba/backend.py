"""The dispatch surface every backend implements: `Backend`, `Step`, `Pending`."""
from __future__ import annotations

import abc
import contextlib
import itertools
import numbers
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeAlias

import numpy as np

from . import display, errors
from .bindings import coverage_once
from .config import DispatchConfig
from .owned import Unshared
from .errors import (INTEGERS, ArgumentError, CheckError, CheckWarning, DispatchError, ImmutableError,
                     IRValidationError, ResultTimeoutError, UnknownNameError, UnsupportedError, VyreError, a_type,
                     check_calls, clip, did_you_mean, flag, int_range, refuse_misread, shown)
from .ir import DataType, Program, fusion
from .ir.types import NUMPY_BOOL_CODES
from .lru import LRUCache

ResidentBuffer: TypeAlias = Any
"""A backend's resident buffer: a Numba device array on the GPU, a NumPy array on the reference backend."""
ArrayIn: TypeAlias = Any
"""A host array (NumPy, or what `np.asarray` reads) or a device array (`__cuda_array_interface__`)."""
ArrayOut: TypeAlias = Any
"""A NumPy array where the inputs were host arrays, a Numba device array where they were on the device."""
Stream: TypeAlias = Any
"""A Numba stream (`numba.cuda.stream()`, or `cuda.external_stream(ptr)` for another library's)."""


@errors.by_identity  # as Fusion
class Step(NamedTuple):
    """One step of a resident sequence: run `program` over `buffers` (binding order or by name)."""

    program: Program
    buffers: Sequence | Mapping
    config: DispatchConfig | None = None

    def __setattr__(self, name: str, value) -> None:
        raise ImmutableError(f"Step is immutable: {shown(name)} cannot be set. Fix: make a changed copy, "
                             f"step._replace({name}=...), and use that." if name in self._fields else
                             f"Step takes no attributes of its own ({shown(name)} is none of {list(self._fields)}). "
                             "Fix: keep your own values in a variable or dict.")


Read = tuple  # (buffer, offset, count), (buffer, offset) or (buffer,), or the bare buffer: a range of a resident
#                buffer to bring back to the host

_TELEMETRY_LOCK = threading.Lock()  # counters are updated from dispatching threads and workers
_UNCOUNTED = threading.local()  # this thread's depth in `uncounted()`


@contextlib.contextmanager
def uncounted():
    """Nothing this thread does inside is counted in any backend's telemetry: a replay on the
    reference backend runs dispatches and downloads, and counts itself as the GPU's replay does."""
    _UNCOUNTED.depth = _UNCOUNTED.__dict__.get("depth", 0) + 1
    try:
        yield
    finally:
        _UNCOUNTED.depth -= 1


# Every backend reports these counters (zero where it has nothing to count), plus
# `dispatches[<label>]` for each DispatchConfig label it has seen.
TELEMETRY_KEYS = (
    "dispatches", "resident_dispatches", "kernel_launches", "sync_points",
    "bytes_uploaded", "bytes_read_back", "bytes_moved_by_graphs", "graph_recordings", "graph_replays",
    "timed_dispatches", "timed_ns", "ptx_cache_hits", "ptx_cache_misses", "module_cache_hits",
    "module_cache_misses", "disk_cache_hits", "disk_cache_misses", "fusion_plan_hits", "fusion_plan_misses",
    "workgroups_tuned", "megakernel_plan_hits", "megakernel_plan_misses", "megakernel_runs", "megakernel_fallbacks")
MAX_REPEAT = 2**32  # dispatch_repeated's most repetitions: hours of back-to-back launches at the least
COOPERATIVE_WORKGROUPS = 8  # the persistent grid of a megakernel on a backend that cannot say how many fit
FUSION_PLANS = 256  # fusion plans a backend keeps (programs and group structure; never the buffers)


class Telemetry(dict):
    """A backend's counters by name (a dict of str to ints; `*_ns` values are `Duration`s), shown in
    Jupyter as a table; `to_frame()` gives a pandas DataFrame. Every way of storing a counter
    checks it: a str name and an int value >= 0 (Python or NumPy, never a bool)."""

    def __init__(self, counters: Mapping[str, int] = ()):
        super().__init__()
        self.update(dict.fromkeys(TELEMETRY_KEYS, 0))
        self.update(counters)

    def __missing__(self, key):
        if not isinstance(key, str):
            raise UnknownNameError(f"telemetry has no counter {shown(key, 60)} ({type(key).__name__}): counters are "
                                   "named by str. Fix: use a name that list(backend.telemetry()) shows.")
        raise UnknownNameError(f"telemetry has no counter {shown(key, 60)}{did_you_mean(key, self)}. Fix: use a name "
                               "that list(backend.telemetry()) shows (vyre_numba.backend.TELEMETRY_KEYS, and "
                               "'dispatches[<label>]' for each label dispatched since the last reset); "
                               "telemetry().get(name, 0) reads a counter that may be absent.")

    def __getitem__(self, key: object) -> int:
        """The counter named `key`; UnknownNameError (with the names to use) for any other key."""
        try:
            return super().__getitem__(key)
        except (TypeError, ValueError):  # unhashable (a writable memoryview's hash is a ValueError): no
            self.__missing__(key)  # counter's name, so missing like any other

    def get(self, key: object, default: object = None) -> object:
        """The counter named `key`, or `default` where it is absent; UnknownNameError for a key
        that cannot name a counter (unhashable)."""
        try:
            return super().get(key, default)
        except (TypeError, ValueError):
            self.__missing__(key)

    def __contains__(self, key: object) -> bool:
        try:
            return super().__contains__(key)
        except (TypeError, ValueError):
            self.__missing__(key)

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, self._checked(key, value))

    @staticmethod
    def _checked(key: str, value: int) -> int:
        """`value` as the counter `key` holds it, or a DispatchError for a name or value no counter takes."""
        if not isinstance(key, str):
            raise DispatchError(f"telemetry: {shown(key, 60)} ({type(key).__name__}) cannot name a counter; counters "
                                "are named by str. Fix: use a name that list(backend.telemetry()) shows.")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, INTEGERS):
            raise DispatchError(f"telemetry: counter {shown(key, 60)} = {shown(value, 60)} ({type(value).__name__}) is "
                                "not an int. Fix: store whole counts (nanoseconds for `*_ns`); keep other values in a "
                                "dict of your own.")
        if value < 0:  # a count or a duration is never below zero
            raise DispatchError(f"telemetry: counter {shown(key, 60)} = {int(value)} is negative. Fix: store counts "
                                "and durations, which are 0 or more; keep differences in a dict of your own.")
        return display.Duration(value) if key.endswith("_ns") else int(value)

    def __delitem__(self, key: object) -> None:
        self[key]  # noqa: B018 - a missing or unhashable name is refused as a lookup is
        super().__delitem__(key)

    def pop(self, key: object, *default: object) -> object:
        """Remove the counter named `key` and return it (`default` where it is absent, if given)."""
        if len(default) > 1:
            raise ArgumentError(f"Telemetry.pop takes a key and at most one default, got {1 + len(default)} "
                                "arguments. Fix: call it as t.pop(key) or t.pop(key, default).")
        if default and key not in self:
            return default[0]
        value = self[key]
        super().__delitem__(key)
        return value

    def setdefault(self, key: str, default: int = 0) -> int:
        """The counter named `key`, first set to `default` (an int) where it is absent."""
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, counters: Mapping[str, int] | Iterable = (), /, **more: int) -> None:
        """Store each (name, int) of `counters` (a mapping or pairs) and of `more`, checked."""
        if hasattr(counters, "keys"):  # as dict.update reads a mapping
            pairs = [(k, counters[k]) for k in counters.keys()]
        else:
            try:
                pairs = [(k, v) for k, v in counters]
            except (TypeError, ValueError):
                raise DispatchError(f"telemetry counters {shown(counters, 60)} are not a mapping or (name, int) pairs. "
                                    "Fix: pass a dict of counter names to ints.") from None
        checked = [(k, self._checked(k, v)) for k, v in pairs + list(more.items())]  # all, before any is stored
        dict.update(self, checked)

    def __ior__(self, counters: Mapping[str, int] | Iterable) -> "Telemetry":
        self.update(counters)
        return self

    def __or__(self, counters: Mapping[str, int] | Iterable) -> "Telemetry":
        """A new Telemetry of these counters and `counters` (a mapping or pairs, checked as stored ones are)."""
        out = self.copy()
        out.update(counters)
        return out

    def __ror__(self, counters: Mapping[str, int]) -> "Telemetry":
        if not isinstance(counters, Mapping):
            return NotImplemented
        out = Telemetry(counters)
        out.update(self)
        return out

    def copy(self) -> "Telemetry":
        """A Telemetry of the same counters (shown and converted as this one is)."""
        out = Telemetry.__new__(Telemetry)
        dict.update(out, self)  # its counters, already checked
        return out

    def to_frame(self):
        """The counters as a pandas DataFrame (index: counter, column: value)."""
        try:
            import pandas as pd
        except ImportError:
            raise UnsupportedError("Telemetry.to_frame needs pandas, which is not installed. "
                                   "Fix: pip install pandas, or read the counters as a dict.") from None
        return pd.DataFrame({"value": [int(v) for v in self.values()]}, index=pd.Index(list(self), name="counter"))

    def _repr_html_(self) -> str:
        return display.table(((k, _counter_text(v)) for k, v in self.items()), ("counter", "value"), total=len(self))


def _counter_text(v) -> object:
    """A counter's table cell: a Duration as it reads, an int with thousands separators, and a value
    stored past the checks (dict.__setitem__) as shown, so the table never fails."""
    if isinstance(v, display.Duration):
        return v
    return f"{v:,}" if isinstance(v, INTEGERS) and not isinstance(v, (bool, np.bool_)) else shown(v, 60)


class Pending(abc.ABC):
    """A dispatch in flight."""

    def _state(self) -> tuple[str, str]:
        """(state, detail) without blocking: running, failed (the error) or done (the outputs)."""
        if not self.done():
            return "running", ""
        error = getattr(self, "_error", None)
        if error is not None:
            return "failed", f"{type(error).__name__}: {error}"
        outs = getattr(self, "_outputs", None)
        outs = getattr(self, "_result", None) if outs is None else outs
        if outs is None:
            return "done", "result() collects the outputs"
        return "done", ", ".join(display.shape_text(a) for a in outs) or "no outputs"

    def __repr__(self) -> str:
        state, detail = self._state()
        detail = clip(display.head(detail, 1).replace("\n", " "), 200)  # one line, with a note of any more
        return f"<{type(self).__name__} {state}{': ' + detail if detail else ''}>"

    def _repr_html_(self) -> str:
        state, detail = self._state()
        return display.fields_table([("state", state)] + ([("detail", detail)] if detail else []),
                                    title=type(self).__name__)

    @abc.abstractmethod
    def done(self) -> bool:
        """True once the results are ready (never blocks)."""

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> bool:
        """Block until done or `timeout` seconds pass; True if done."""

    def result(self, timeout: float | None = None) -> list[np.ndarray]:
        """The outputs in binding order, waiting for them at most `timeout` seconds (None: until
        done); raises the dispatch's error, or ResultTimeoutError (a TimeoutError, as
        concurrent.futures raises) while it is still running, after which it can be asked again."""
        if timeout is not None and not self.wait(wait_seconds(timeout, "result")):
            raise ResultTimeoutError(f"the dispatch was still running after result(timeout={timeout!r}) waited; "
                                     "it runs on. Fix: call result() again later (or with a longer timeout, or none), or "
                                     "cancel() it.")
        return self._collect()

    @abc.abstractmethod
    def _collect(self) -> list[np.ndarray]:
        """The outputs, waiting for them; raises the dispatch's error."""

    def cancel(self) -> bool:
        """Ask the dispatch to stop early; `result()` then raises. True if the request was taken
        (the dispatch had not finished and this backend can stop it), else False."""
        return False

    def _fail(self, error: BaseException | None) -> None:
        """Keep `error` (None: none) for `result()` with the traceback it has now."""
        self._error, self._traceback = error, None if error is None else error.__traceback__

    def _raise_kept(self) -> None:
        """Raise the kept error from its own traceback: raised again as it is, it would grow by each
        caller's frames (and keep their locals alive)."""
        raise self._error.with_traceback(self._traceback)


class InFlight(Unshared, Pending):
    """A dispatch in flight (on a worker thread or a stream): copy, deepcopy and pickle refuse it, as
    a copy could never finish (only this one is told the outcome)."""

    def _unshared(self) -> DispatchError:
        return DispatchError(f"this {type(self).__name__} is a handle to a dispatch in flight and cannot be copied or "
                             "pickled. Fix: copy or pickle its outputs, pending.result(), instead.")


def wait_seconds(timeout, call: str = "wait") -> float | None:
    """`Pending.wait`'s timeout as seconds to wait, or None for no limit (None, inf, or longer than a
    thread can be told to wait, threading.TIMEOUT_MAX: days); anything else is a DispatchError."""
    if timeout is None:
        return None
    if isinstance(timeout, (np.timedelta64, np.datetime64)):  # NumPy counts them as numbers; they compare as none
        raise DispatchError(f"{call}(timeout={shown(timeout)}): a time span is not a number of seconds. Fix: pass "
                            "span / np.timedelta64(1, 's').")
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, numbers.Real) or not timeout >= 0:
        raise DispatchError(f"{call}(timeout={shown(timeout)}): the timeout is not a non-negative number of seconds. "
                            "Fix: pass seconds as an int or float, or None to wait until done.")
    if isinstance(timeout, numbers.Integral):  # compared exactly: 10**400 has no float
        return None if int(timeout) >= threading.TIMEOUT_MAX else float(timeout)
    seconds = float(timeout)  # a float16 compared with TIMEOUT_MAX would overflow (a warning)
    return None if seconds >= threading.TIMEOUT_MAX else seconds


class Completed(Pending):
    """A dispatch that finished when it was issued (what `Backend.dispatch_async` returns by default)."""

    def __init__(self, outputs: list[np.ndarray] | None = None, error: BaseException | None = None):
        self._outputs = outputs
        self._fail(error)

    def done(self) -> bool:
        return True

    def wait(self, timeout: float | None = None) -> bool:
        wait_seconds(timeout)
        return True

    def _collect(self) -> list[np.ndarray]:
        if self._error is not None:
            self._raise_kept()
        return self._outputs


_RUNNING = "its block has not ended yet"


class Timer:
    """The result of `device_timer`: `ns`, the nanoseconds the block took, once it is left."""

    __slots__ = ("_ns", "_why")

    def __init__(self) -> None:
        self._ns: int | None = None
        self._why = _RUNNING

    @property
    def ns(self) -> int:
        """The block's time in nanoseconds (refused until the block is left, or where its work failed)."""
        if self._ns is None:
            fix = ("read t.ns after the block `with backend.device_timer() as t:` is left" if self._why == _RUNNING
                   else "time a block that ends without an error")
            raise DispatchError(f"this timer has no time: {self._why}. Fix: {fix}.")
        return self._ns

    def __repr__(self) -> str:
        return f"<Timer: {'no time: ' + self._why if self._ns is None else f'{self._ns:,} ns'}>"


def left_by(kind: type) -> str:
    """Why a timer whose block was left by an exception of `kind` has no time."""
    return f"its block was left by {kind.__name__}, so the work in it was not timed"


class HostTimer(Unshared):
    """A `device_timer` block timed with the host's clock, once: `ns` is set where it is left whole.
    Not copied or pickled: a copy would time into the same Timer (on a GPU, the same events)."""

    def _unshared(self) -> DispatchError:
        return DispatchError("a device_timer() times one block and owns what it records into (on a GPU, two CUDA "
                             "events): it cannot be copied or pickled. Fix: call backend.device_timer() again for "
                             "each block to time.")

    def __init__(self) -> None:
        self._timer: Timer = Timer()
        self._start: int | None = None

    def check_unused(self) -> None:
        """A DispatchError where the block was entered before (a timer times one block)."""
        if self._start is not None:
            raise DispatchError("this device_timer() was entered already: a timer times one block. Fix: call "
                                "backend.device_timer() again for each `with` block.")

    @errors._checked  # a mistake's error points at the caller's `with` line, as a public call's does
    def __enter__(self) -> Timer:
        self.check_unused()
        self._start = time.perf_counter_ns()
        return self._timer

    def __exit__(self, kind, *exc) -> None:
        if kind is None:
            self._timer._ns = time.perf_counter_ns() - self._start
        else:  # as on the GPU, whose events time no failed block: the same code reads the same on both
            self._timer._why = left_by(kind)

    @property
    def ns(self) -> int:
        """The block's time, as the Timer that `with` gave says (for `timer = device_timer(); with timer:`)."""
        return self._timer.ns

    def __repr__(self) -> str:
        return f"<device_timer: {'not entered yet' if self._start is None else 'entered'}; `with` it for its Timer>"


class Backend(abc.ABC):
    """Runs vyre programs. Every backend gives the same results as the reference backend.

    Host dispatch (`dispatch`, `dispatch_async`, `dispatch_timed`) takes and returns NumPy arrays.
    Resident dispatch (`dispatch_resident`, `dispatch_sequence`, `dispatch_repeated`) works on the
    backend's own buffers (`allocate`, `upload`, `download`): device arrays on the GPU, NumPy arrays
    on the reference backend, so the same code runs on both.
    """

    name: str = "abstract"
    device_clock: bool = False  # whether device_timer reads a device's clock (else the host's)

    @property
    def last_check(self):
        """The CheckReport of this thread's last checked dispatch on this backend
        (DispatchConfig(checked=...)); None before one. Each thread sees its own: threads sharing
        a backend do not see each other's."""
        return getattr(self.__dict__.get("_last_checks"), "report", None)

    @last_check.setter
    def last_check(self, report) -> None:  # (this thread's: `be.last_check = None` forgets its own report)
        self.__dict__.setdefault("_last_checks", threading.local()).report = report

    def __copy__(self) -> "Backend":
        return self  # a handle on this process's device and caches, not a value: a copy is the same backend

    def __deepcopy__(self, memo) -> "Backend":
        return self

    def __reduce__(self):
        """Pickled by name: unpickled, it is the process's own backend of that name (its device,
        its caches), as `get_backend(name)` gives."""
        if _SHARED is not None and _SHARED(self):
            return (resolve_backend, (self.name,))
        raise DispatchError(f"this {type(self).__name__} was made directly, not by get_backend({self.name!r}), so "
                            "another process has no backend to stand for it. Fix: pass the backend's name "
                            f"({self.name!r}) or vyre_numba.get_backend({self.name!r}), which pickle by name.")

    @abc.abstractmethod
    def dispatch(self, program: Program, inputs: Sequence | Mapping | None = None,
                 config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                 ) -> list[np.ndarray]:
        """Run `program` once (or `config.fixpoint_iterations` times) on host arrays and return the
        output buffers in binding order. `inputs`: one array (or list, or scalar) per input buffer,
        in binding order or by name in a dict; `sizes`: the element count of an output whose size
        no input gives, by name (docs/inputs.md says what is accepted and how it converts).
        Inputs are never modified."""

    def dispatch_resident(self, program: Program, buffers: Sequence | Mapping,
                          config: DispatchConfig | None = None) -> None:
        """Run `program` over resident buffers (every non-workgroup buffer, binding order or by
        name), writing outputs in place. May return before the work is done."""
        raise NotImplementedError(f"{self.name} backend has no resident dispatch")

    def upload(self, array: np.ndarray) -> ResidentBuffer:
        """A resident copy of a host array."""
        raise NotImplementedError(f"{self.name} backend has no resident buffers")

    def upload_in_pieces(self, array: np.ndarray,
                         each: Callable[[ResidentBuffer, int, int], object]) -> ResidentBuffer:
        """`upload(array)`, calling `each(buffer, first, count)` once the elements [first, first +
        count) of the flattened array are in place (in order, covering it), so that work on a piece
        can start while later ones still travel (on the GPU; here, once for the whole array)."""
        check_each(each)
        buffer = self.upload(array)
        if np.size(array):
            each(buffer, 0, int(np.size(array)))
        return buffer

    def empty(self, n: int, dtype: np.dtype | type | str) -> object:
        """A resident buffer of `n` zeroed elements of `dtype`: a vyre type's storage dtype (a NumPy
        number type, not bool), or a vyre type, which gives its storage ("bool" uint32 words of 0
        or 1, "bf16" uint16 bits). The names "u8" and "i8" are refused as ambiguous (8 bits to
        vyre, 8 bytes to NumPy): pass DataType.U8 or "uint8"."""
        raise NotImplementedError(f"{self.name} backend has no resident buffers")

    def write(self, buffer: ResidentBuffer, values: ArrayIn, offset: int = 0) -> None:
        """Copy host `values` into elements [offset, offset + len(values)) of the resident buffer
        `buffer`, in order with the work issued before and after it (on the GPU, enqueued on the
        backend's stream; `values` may change once it returns). Values convert into the buffer's
        storage dtype only where every one converts exactly: a bool or bf16 buffer holds its
        storage words (uint32 0/1, bf16 bits as uint16), so write those."""
        raise UnsupportedError(f"the {self.name} backend has no write. Fix: upload the values into a new buffer.")

    def download(self, buffer: ResidentBuffer, offset: int = 0, count: int | None = None) -> np.ndarray:
        """Elements [offset, offset+count) of a resident buffer, as a host array (waits for pending work)."""
        raise NotImplementedError(f"{self.name} backend has no resident buffers")

    def read_compacted(self, values: ArrayIn, flags: ArrayIn, *, capacity: int | None = None) -> np.ndarray:
        """values[flags != 0] as a NumPy array: of this backend's buffers (1-D, flags of any
        integer or bool type), only the kept records cross to the host, with their count read in
        the same synchronisation (`vyre_numba.compaction.read_compacted` on this backend's
        stream); host arrays give the NumPy twin's result on every backend. More than `capacity`
        kept records raise CapacityError naming the count needed (`.needed`), the inputs untouched."""
        if _COMPACT_READER is None:
            from .errors import BackendUnavailableError

            raise BackendUnavailableError("no compaction is loaded. Fix: import vyre_numba (the package) first.")
        out = _COMPACT_READER(self, values, flags, capacity)
        self._count(bytes_read_back=out.nbytes)
        return out

    def synchronize(self) -> None:
        """Wait for the work issued on this backend's own stream (resident dispatches, sequences,
        writes); a `dispatch_async` runs apart from it: wait for one with its `result()`."""

    def release_memory(self) -> None:
        """Give back now the memory this backend keeps for reuse (on the GPU: device memory dropped
        since the last call, and the memory pool's idle memory). The reference backend keeps none."""

    def device_timer(self, stream: int | None = None) -> contextlib.AbstractContextManager["Timer"]:
        """`with backend.device_timer() as t:` times the work issued inside the block on the
        backend's stream and sets `t.ns` on leaving it, once that work is done: on the GPU with CUDA
        events on `stream` (this backend's by default); here, where work runs as it is called, with
        the host's clock. A `dispatch_async` runs apart from the stream: time it by its `result()`."""
        if stream is not None:
            raise DispatchError(f"device_timer(stream={shown(stream, 40)}): the {self.name} backend has no streams. "
                                "Fix: leave stream out (None).")
        return HostTimer()

    def allocate(self, program: Program, name: str, n: int | None = None) -> ResidentBuffer:
        """A zeroed resident buffer for `program`'s buffer `name` (`n` elements, or its static count)."""
        if not isinstance(program, Program):
            raise DispatchError(f"allocate: {shown(program, 60)} is not an ir.Program. Fix: pass the program whose "
                                "buffer this is.")
        if not isinstance(name, str):
            raise DispatchError(f"allocate: the buffer name {shown(name, 60)} is not a str. Fix: pass one of "
                                f"{[b.name for b in program.buffers]}.")
        if n is not None and (isinstance(n, (bool, np.bool_)) or not isinstance(n, INTEGERS)):
            raise DispatchError(f"allocate({shown(name)}, n={shown(n, 60)}): n is not an int. Fix: pass a number of "
                                "elements.")
        try:
            decl = program.buffer(name)
        except KeyError:
            raise DispatchError(f"{program.name!r} has no buffer {shown(name)} (buffers: "
                                f"{[b.name for b in program.buffers]}). Fix: use one of those names.") from None
        if decl.is_shared:
            raise DispatchError(f"{shown(name)} is a workgroup buffer; it lives in shared memory during a launch. "
                                "Fix: allocate only bound (non-workgroup) buffers.")
        if n is None and not decl.count:
            raise DispatchError(f"allocate({shown(name)}) needs an element count: the buffer is declared with "
                                f"count=0 (sized at dispatch). Fix: pass n=number of elements.")
        count, storage = check_empty(decl.count if n is None else n, decl.dtype.storage,
                                     f"allocate({shown(name)}{'' if n is None else f', n={int(n)}'})")
        if decl.count and count < decl.count:
            raise DispatchError(f"allocate({shown(name)}, n={count}) is smaller than the declared {decl.count} "
                                f"elements. Fix: allocate at least {decl.count}.")
        return self.empty(count, storage)

    def dispatch_async(self, program: Program, inputs: Sequence | Mapping | None = None,
                       config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                       ) -> Pending:
        """`dispatch` that returns at once with a `Pending`. Mistakes in the arguments raise here;
        failures while running are raised by `result()`."""
        return Completed(self.dispatch(program, inputs, config, sizes=sizes))

    def dispatch_timed(self, program: Program, inputs: Sequence | Mapping | None = None,
                       config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                       ) -> tuple[list[np.ndarray], display.Duration]:
        """`dispatch` plus the nanoseconds the program itself ran (device time on a GPU), as a
        `Duration` (an int that reads as `41.3 us`)."""
        t0 = time.perf_counter_ns()
        out = self.dispatch(program, inputs, config, sizes=sizes)
        ns = display.Duration(time.perf_counter_ns() - t0)
        self._count(timed_dispatches=1, timed_ns=ns)
        return out, ns

    @coverage_once
    def dispatch_sequence(self, steps: Iterable[Step | tuple], read: Iterable[Read] = (), *,
                          progress: bool | None = None, fuse: bool = False) -> list[np.ndarray]:
        """Run several programs over resident buffers, one after another with no host
        synchronisation between them, then read back only the ranges in `read`. `progress`: a bar
        of steps enqueued, None (the default) once the run has taken a second, True at once,
        False never. `fuse=True` runs `self.fuse(steps, read)`'s kernels instead: the same results
        in the buffers read back, and in every buffer except the scratch ones (written only inside
        one fused kernel and not in `read`), whose contents it leaves unspecified. The ranges in
        `read` are checked before any step runs. Stopped part way (a step refused or failing, its
        check raising, a KeyboardInterrupt), the exception says which steps ran, their writes
        staying: a VyreError in its message, anything else in a note; its `steps_ran` counts them."""
        from .progress import check_progress

        check_progress(progress)  # before a fusion plan is made or counted
        total = _length(steps, "steps")
        if flag(fuse, "fuse", "pass fuse=True or fuse=False."):
            reads = self._reads(read)
            steps = [as_step(s) for s in _iterable(steps, "steps")]  # as fuse converts them, once
            if not steps:  # nothing to fuse: the reads, as without fusion
                return self._sequence([], reads, progress, 0)
            plan = self.fuse(steps, reads)
            labels = [[] if len(g) == 1 else [c.label for j in g if (c := steps[j].config) and c.label]
                      for g in plan.groups]
            return self._sequence(plan.steps, reads, progress, len(steps), plan.groups, labels)
        return self._sequence(steps, read, progress, total)

    @coverage_once
    def fuse(self, steps: Iterable[Step | tuple], read: Iterable[Read] = (), *, keep: Iterable = ()) -> "Fusion":
        """The resident sequence `steps` with adjacent steps that depend on each other only at the
        same index merged into one kernel each (`ir.fusion` says when): `Fusion.steps` to run,
        `.boundaries` saying why each remaining boundary stayed, `.program` when all fused into
        one. Buffers written only inside a fused kernel, not in `read` (ranges as for
        `dispatch_sequence`) and not in `keep` are scratch: values kept in registers, never stored.
        Every step is checked first as its own resident dispatch would check it."""
        steps = [as_step(s) for s in _iterable(steps, "steps")]
        if not steps:
            raise DispatchError("no steps to fuse. Fix: pass at least one Step(program, buffers[, config]).")
        bound = checked_steps(self, steps, "fuse", "sequence to fuse")
        shapes = [_shape(s, buffers) for s, buffers in zip(steps, bound)]
        kept = {_storage(b) for b in [_read(r)[0] for r in _iterable(read, "read")] + list(_iterable(keep, "keep"))}
        key = (tuple((s.program.digest(), sh.storage, sh.sizes, s.config) for s, sh in zip(steps, shapes)),
               frozenset(kept))
        plans = self.__dict__.setdefault("_fusion_plans", LRUCache(FUSION_PLANS))
        cached = plans.get(key)
        self._count(**{"fusion_plan_hits" if cached is not None else "fusion_plan_misses": 1})
        if cached is None:
            groups, boundaries = fusion.plan(shapes)
            kernels = []
            for group, scratch in zip(groups, fusion.scratch_keys(shapes, groups, kept)):
                if len(group) == 1:
                    kernels.append(None)
                    continue
                program, keys = fusion.fuse_group(shapes, group, scratch)
                wg = shapes[group[0]].workgroup
                kernels.append((program, keys, DispatchConfig(grid=(shapes[group[0]].invocations // wg[0], 1, 1))))
            cached = plans.put(key, (groups, boundaries, kernels))
        groups, boundaries, kernels = cached
        out = []
        for group, kernel in zip(groups, kernels):
            if kernel is None:
                out.append(steps[group[0]])
                continue
            program, keys, config = kernel
            storage_buffer = {k: b for j in group for k, b in zip(shapes[j].storage, bound[j])}
            out.append(Step(program, [storage_buffer[k] for k in keys], config))
        return Fusion(out, groups, boundaries)

    @coverage_once
    def megakernel(self, steps: Iterable[Step | tuple], read: Iterable[Read] = (), *, until: ResidentBuffer = None,
                   max_rounds: int | None = None, workgroups: int | None = None,
                   keep: Iterable = ()) -> "Megakernel":
        """The resident sequence `steps` planned as one persistent cooperative kernel: fused groups
        (`fuse`) as stages with a grid barrier between stages only where a boundary stayed (and
        where outputs are zeroed, between rounds and around `until`'s flag). `run()` runs it
        `max_rounds` times (default once), or with `until` (a resident integer buffer whose element
        0 is a change flag: set to zero before every round, set nonzero by a step that changed
        something; the buffer's other elements are left alone) until a round leaves it zero, at
        most `max_rounds` rounds (default 10,000, as `fixpoint.run`'s), all on the device, then
        reads `read`. Where the steps cannot be one program or its grid cannot be co-resident, it replays the unfused kernels as a recorded
        graph (dispatches them where recording fails) and its `reason` says why. `workgroups`: the
        persistent grid (default: as many as fit co-resident, at most as many as the largest step
        needs). As in `fuse`, with one round a buffer written only inside one stage and not in
        `read`, `keep` or `until` is scratch, its contents afterwards unspecified; every other
        buffer ends as the sequence leaves it."""
        from .megakernel import Megakernel

        return Megakernel(self, steps, read, until=until, max_rounds=max_rounds, workgroups=workgroups, keep=keep)

    def _check_step(self, step: Step) -> None:
        """What a resident dispatch of `step` would refuse, refused now without running it: here
        what every backend's dispatch checks of the bound buffers against the step's declarations
        (`check_bound`); a backend that can tell more checks more (the reference backend, all its
        dispatch checks; the GPU's recordings check as they capture)."""
        from .bindings import check_resident

        check_bound(step.program, check_resident(step.program, step.buffers))

    def cooperative_workgroups(self, program: Program, reserved: int = 0) -> int:
        """How many workgroups of `program` one cooperative launch can hold at once (a backend that
        cannot say answers COOPERATIVE_WORKGROUPS, and persistent programs loop); `reserved`: bytes of
        host memory the launch holds besides its workgroups (where the backend's memory is the host's)."""
        return COOPERATIVE_WORKGROUPS

    def _sequence(self, steps, read, progress: bool | None, total: int | None,
                  groups: list | None = None, labels: list | None = None) -> list[np.ndarray]:
        """Run `steps` then read `read`; `groups`: the caller's step indices each of `steps` runs
        (a fused sequence's), so a failure names the caller's steps and the bar (of `total`
        steps) counts them; `labels`: the labels of the caller's steps fused into each of `steps`,
        each counted in `dispatches[label]` once its kernel ran."""
        from .progress import bar

        reads = self._reads(read)
        steps = _iterable(steps, "steps")
        b = bar(progress, desc="steps", unit="step", total=total)
        done, at = 0, BEFORE  # kernels whose dispatch returned; where kernel `done` stands (None: reading back)
        try:
            for k, step in enumerate(steps):
                step = as_step(step)
                at = UNDER_WAY
                self._run_step(step, 1 if groups is None else len(groups[k]))
                done, at = k + 1, BEFORE
                if labels and labels[k]:
                    self._count(**Counter(f"dispatches[{x}]" for x in labels[k]))
                if b is not None:
                    b.update(1 if groups is None else len(groups[k]))
            at = None
            return [self.download(buf, off, cnt) for buf, off, cnt in reads]
        except BaseException as e:
            _stopped(self, e, done, at, groups, step if at is UNDER_WAY else None)
            raise
        finally:
            if b is not None:
                b.close()

    def _run_step(self, step: Step, steps: int) -> None:
        """Dispatch `step` of a sequence, a kernel of `steps` of the caller's steps fused (where a
        budget bounds one dispatch, such a kernel has as much as the steps had together)."""
        self.dispatch_resident(step.program, step.buffers, step.config)

    def _reads(self, read: Iterable[Read]) -> list[tuple]:
        """`read`'s entries as (buffer, offset, count), each refused now where `download` would refuse
        it once the steps had run."""
        if isinstance(read, (tuple, list)) and 2 <= len(read) <= 3 and _is_buffer(read[0]) and all(
                isinstance(x, INTEGERS) or x is None for x in read[1:]):  # one range, not a list of them
            raise DispatchError(f"read={shown(read, 60)} is one range, not a list of them. Fix: pass "
                                "read=[(buffer, offset, count)].")
        reads = []
        for k, r in enumerate(_iterable(read, "read")):
            try:
                reads.append(_read(r))
                self._check_read(*reads[-1])
            except VyreError as e:
                if e.args:
                    why = str(e.args[0]).removeprefix("read entry: ")
                    e.args = (f"read entry {k}, checked before anything runs (nothing ran): {why}", *e.args[1:])
                raise
        return reads

    def _check_read(self, buffer, offset: int, count: int | None) -> None:
        """What `download(buffer, offset, count)` would refuse, refused without reading: a device
        backend's `device_range` (its download's own check; the download itself would wait for the
        work issued), else a download of none of the elements."""
        device_range = getattr(self, "device_range", None)
        if device_range is not None:
            device_range(buffer, offset, count, "download")
        else:
            self.download(buffer, offset, 0)

    def dispatch_repeated(self, prefix: Iterable[Step | tuple], body: Iterable[Step | tuple], repeat: int,
                          read: Iterable[Read] = (), *, progress: bool | None = None) -> list[np.ndarray]:
        """`prefix` once, then `body` `repeat` times (at most `MAX_REPEAT`, 2**32), then the reads.
        The steps are generated one at a time, so `repeat` costs no memory. `progress` as in
        `dispatch_sequence`."""
        if isinstance(repeat, (bool, np.bool_)) or not isinstance(repeat, INTEGERS) or repeat < 0:
            raise DispatchError(f"repeat={shown(repeat)} is not a non-negative int. Fix: pass 0 or more "
                                "(a Python or NumPy integer).")
        if repeat > MAX_REPEAT:
            raise DispatchError(f"repeat={shown(repeat)} is more than MAX_REPEAT = 2**32 repetitions (hours of "
                                "launches at the least). Fix: repeat at most 2**32 times per call; for work until a "
                                "condition holds, use backend.megakernel(..., until=...) or vyre_numba.fixpoint.")
        body = [as_step(s) for s in _iterable(body, "body")]
        repeat = int(repeat) if body else 0  # an empty body repeated is nothing, however often
        steps: Iterator = itertools.chain(_iterable(prefix, "prefix"),
                                          itertools.chain.from_iterable(itertools.repeat(body, repeat)))
        first = _length(prefix, "prefix")
        total = None if first is None else first + len(body) * repeat
        return self._sequence(steps, read, progress, total)

    # ---- telemetry ---------------------------------------------------------------------------
    def _count(self, **deltas: int) -> None:
        if _UNCOUNTED.__dict__.get("depth"):
            return
        with _TELEMETRY_LOCK:
            counters = self.__dict__.setdefault("_counters", Counter())
            for key, delta in deltas.items():
                counters[key] += delta

    def telemetry(self) -> Telemetry:
        """Counters since the last reset: launches, sync points, bytes uploaded and read back,
        cache hits and misses per level, timed dispatches and their nanoseconds. Every backend
        reports the same keys (`TELEMETRY_KEYS`, zero where nothing was counted), plus
        `dispatches[<label>]` for each label seen."""
        with _TELEMETRY_LOCK:
            return Telemetry(self.__dict__.setdefault("_counters", Counter()))

    def reset_telemetry(self) -> None:
        """Set every counter back to zero."""
        with _TELEMETRY_LOCK:
            self.__dict__["_counters"] = Counter()

    # ---- recorded graphs -------------------------------------------------------------------------
    def record_graph(self, program: Program, sample_inputs: Sequence | Mapping | None = None,
                     config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None) -> RecordedGraph:
        """Record `dispatch(program, sample_inputs, config)` once; the `RecordedGraph` it returns
        replays it on new inputs of the same sizes (`replay`) or over its own buffers
        (`replay_resident`). Here replay dispatches again; the CUDA backend captures a CUDA graph."""
        from .recording import Redispatch

        return Redispatch(self, program, sample_inputs, config, sizes=sizes)

    @coverage_once
    def record_sequence(self, steps: Iterable[Step | tuple], read: Iterable[Read] = ()) -> RecordedSequence:
        """Record `dispatch_sequence(steps, read)` once over the resident buffers the steps name;
        `replay()` runs it again and returns the reads."""
        from .recording import Resequence

        return Resequence(self, steps, read)

    def __repr__(self) -> str:
        return f"<vyre_numba {self.name} backend>"


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: it holds its steps' buffers (arrays)
class Fusion:
    """What `Backend.fuse` made of a sequence: `steps` to run (fused kernels and the steps left as
    they were), `groups` (the original step indices each runs) and `boundaries` (why each boundary
    between groups stayed)."""

    steps: list
    groups: list
    boundaries: list

    @property
    def program(self) -> Program:
        """The one fused program, when every step fused into it."""
        if len(self.steps) != 1:
            why = self._why()
            raise DispatchError(f"the steps fused into {len(self.steps)} kernels, not one ({why}). Fix: read "
                                "`.steps` (and `.boundaries` for why each boundary stayed).")
        return self.steps[0].program

    def _why(self, most: int = 5) -> str:
        """The first `most` boundaries, and how many more there are."""
        more = len(self.boundaries) - most
        return "; ".join([str(b) for b in self.boundaries[:most]] + ([f"{more} more in .boundaries"] if more > 0 else []))

    def __repr__(self) -> str:
        why = self._why()
        return (f"Fusion({display.counted(len(self.groups), 'kernel')} from "
                f"{display.counted(sum(map(len, self.groups)), 'step')}: {shown(self.groups, 200)}"
                + (f"; {why}" if why else "") + ")")


def _storage(buffer) -> tuple:
    """(address, bytes) of a resident buffer: equal for the same memory."""
    cai = getattr(buffer, "__cuda_array_interface__", None)
    if cai is not None:
        shape = cai["shape"]
        return int(cai["data"][0]), int(np.prod(shape, dtype=np.int64)) * np.dtype(cai["typestr"]).itemsize
    if not isinstance(buffer, np.ndarray):
        raise DispatchError(f"{type(buffer).__name__} is not a resident buffer. Fix: pass buffers made by "
                            "backend.upload / backend.empty (or device arrays on the GPU).")
    return int(buffer.__array_interface__["data"][0]), int(buffer.nbytes)


def _elements(buffer) -> int:
    cai = getattr(buffer, "__cuda_array_interface__", None)
    return int(np.prod(cai["shape"], dtype=np.int64)) if cai is not None else int(buffer.size)


def _shape(step: Step, buffers: list):
    from .bindings import launch_geometry
    from .ir.fusion import StepShape

    program = step.program
    config = step.config or DispatchConfig()
    storage = tuple(_storage(b) for b in buffers)
    decls = program.bound_buffers
    for i, (a, sa) in enumerate(zip(decls, storage)):
        for b, sb in zip(decls[i + 1:], storage[i + 1:]):
            if (a.access.writable or b.access.writable) and sa[0] < sb[0] + sb[1] and sb[0] < sa[0] + sa[1]:
                raise DispatchError(f"fuse: {program.name!r} binds {a.name!r} and {b.name!r} to overlapping memory and "
                                    "one of them is written, a race. Fix: bind distinct buffers (copy one first).")
    sizes = tuple(_elements(b) for b in buffers)
    one_d = (config.fixpoint_iterations == 1 and not config.cooperative and not config.checked
             and (config.workgroup in (None, "auto", "tune") or tuple(config.workgroup[1:]) == (1, 1)))
    invocations, wg = None, program.workgroup_size
    if one_d:
        grid, wg = launch_geometry(program, config, {d.name: s for d, s in zip(program.bound_buffers, sizes)})
        if grid[1:] == (1, 1) and tuple(wg[1:]) == (1, 1):
            invocations = grid[0] * wg[0]
    return StepShape(program, storage, sizes, invocations, tuple(wg))


def checked_steps(backend: "Backend", steps: list, call: str, what: str) -> list[list]:
    """The bound buffers of each step of a fused sequence or megakernel (`what` in messages, `call`
    naming the caller to `check_resident`), each step refused first where its own resident dispatch
    would refuse it (`backend._check_step`): fusion declares each buffer at its bound size, so the
    kernel that runs cannot see what the step declared."""
    from .bindings import check_resident
    from .ir import check

    bound = []
    for k, s in enumerate(steps):
        if not isinstance(s.program, Program):
            raise DispatchError(f"step {k}'s program is {a_type(s.program)}. Fix: pass an ir.Program.")
        if s.config is not None and not isinstance(s.config, DispatchConfig):
            raise DispatchError(f"step {k}'s config is {a_type(s.config)}. Fix: pass a DispatchConfig "
                                "or None.")
        check(s.program)  # the step as written: what its own dispatch would refuse, refused here
        bound.append(check_resident(s.program, s.buffers, call))
        try:
            backend._check_step(Step(s.program, bound[-1], s.config))
        except VyreError as e:
            if e.args:
                e.args = (f"step {k} of the {what}, checked before anything runs (nothing ran): {e.args[0]}",
                          *e.args[1:])
            raise
    return bound


def label_counts(steps: Iterable[Step]) -> Counter:
    """The `dispatches[label]` counts one run of `steps` adds: one for each labelled step."""
    return Counter(f"dispatches[{s.config.label}]" for s in steps if s.config and s.config.label)


def check_bound(program: Program, buffers: list) -> None:
    """Refuse what every backend's resident dispatch of `program` refuses of its bound `buffers`
    (binding order) against their declarations, from what the host can see of them: the storage
    dtype, a contiguous layout, fewer than 2**32 elements, at least the declared count, and a
    writable array where the program may write. NumPy arrays and `__cuda_array_interface__` arrays
    are checked; anything else is left to the dispatch."""
    from .bindings import STRIDED_FIX

    where = f"dispatch_resident of {program.name!r}"
    for decl, buf in zip(program.bound_buffers, buffers):
        cai = getattr(buf, "__cuda_array_interface__", None)
        if cai is not None:
            dtype, shape, readonly = interface_dtype(cai), tuple(cai["shape"]), bool(cai["data"][1])
            strides = cai.get("strides")
        elif isinstance(buf, np.ndarray):
            dtype, shape, readonly = buf.dtype, buf.shape, not buf.flags.writeable
            strides = None if buf.flags.c_contiguous else buf.strides
        else:
            continue
        size = int(np.prod(shape, dtype=object))
        if dtype != decl.dtype.storage:
            raise DispatchError(f"{where}: {decl.name!r} is declared {decl.dtype} but the array holds {dtype}. "
                                f"Fix: allocate it with dtype {decl.dtype.storage}.")
        expect = dtype.itemsize
        for dim, stride in zip(reversed(shape), reversed(strides or ())):
            if size > 1 and dim > 1 and stride != expect:
                raise DispatchError(f"{where}: {decl.name!r} is a non-contiguous view (strides {tuple(strides)}). "
                                    f"{STRIDED_FIX}")
            expect *= dim
        if size >= 2**32:
            raise DispatchError(f"{where}: {decl.name!r} has {size} elements; lengths are u32. Fix: split the data "
                                "into dispatches of fewer than 2**32 elements.")
        if decl.count and size < decl.count:
            raise DispatchError(f"{where}: {decl.name!r} is declared with {decl.count} elements but has {size}. "
                                f"Fix: allocate at least {decl.count}.")
        if readonly and decl.access.writable:
            raise DispatchError(f"{where}: {decl.name!r} is a read-only array but the program may write it. "
                                "Fix: pass a writable array (or declare it read-only).")


# Where a resident sequence stood at the kernel it was stopped at: before its dispatch began, refused
# by it (a failed dispatch is all or nothing: none of it ran), checked (it ran to completion, then
# its check raised CheckError or a CheckWarning), or under way (stopped by something else inside it).
BEFORE, REFUSED, CHECKED, UNDER_WAY = "before", "refused", "checked", "under way"
SEQUENCE_NOTE = "Sequence stopped "  # how the note a sequence adds to an exception begins


def _stopped(backend: Backend, e: BaseException, k: int, at: str | None, groups: list | None, step) -> None:
    """Say on `e`, raised by a resident sequence at its k-th kernel (`step`, where `at` is UNDER_WAY;
    `at` None: reading back, every kernel ran), what ran: `e.steps_ran` counts the caller's steps that
    ran, their writes staying, and `e.sequence_step` is (the caller's step it stopped at, the message);
    a VyreError's message starts with where it stopped, any other exception gets a note saying so."""
    if hasattr(e, "steps_ran"):  # said already, by a sequence inside this one
        return
    ran = k if groups is None else sum(map(len, groups[:k]))  # the caller's steps before kernel k
    if at is UNDER_WAY and isinstance(e, (CheckError, CheckWarning)):
        at = CHECKED  # checked steps never fuse: kernel k is the caller's step `ran`
    elif at is UNDER_WAY and isinstance(e, VyreError):
        at = REFUSED
    e.steps_ran = ran + 1 if at is CHECKED else ran
    e.sequence_step, e._sequence_at = (ran, e.args[0] if e.args else ""), at
    if at is None or (at is BEFORE and not isinstance(e, VyreError)):  # no step k to name: there may be none
        ok = f"{_ran(list(range(ran)))}{_scratch(groups, k)}" if ran else "no step ran"
        e.add_note(f"{SEQUENCE_NOTE}reading back the ranges in `read` ({ok})." if at is None else
                   f"{SEQUENCE_NOTE}after step {ran - 1} of the sequence ({ok}; nothing after them ran)." if ran else
                   f"{SEQUENCE_NOTE}before its first step (nothing ran).")
        return
    mine = [k] if groups is None else groups[k]
    where = _failed_at(k, groups, _fate(mine, at, groups is not None, backend, step))
    if not isinstance(e, VyreError):
        e.add_note(f"{SEQUENCE_NOTE}at {where}.")
    elif e.args:
        e.args = (f"{where}: {e.args[0]}", *e.args[1:])


def _failed_at(k: int, groups: list | None, fate: str) -> str:
    """Which of the caller's steps a sequence was stopped at, at its k-th kernel, and what ran:
    the steps before it, and `fate`, what became of its own."""
    mine = [k] if groups is None else groups[k]
    where = f"{_which(mine)}{'' if len(mine) == 1 else ', fused into one kernel,'} of the sequence"
    if not mine[0]:
        return f"{where} ({fate})"
    return f"{where} ({_ran(list(range(mine[0])))}{_scratch(groups, k)}; {fate})"


def _which(mine: list) -> str:
    return f"step {mine[0]}" if len(mine) == 1 else f"steps {mine[0]} to {mine[-1]}"


def _ran(mine: list) -> str:
    """"step k ran and its writes stay", or the steps' (their) for several."""
    return f"{_which(mine)} ran and {'its' if len(mine) == 1 else 'their'} writes stay"


def _scratch(groups: list | None, k: int) -> str:
    """What a fused sequence's first k kernels left in their scratch buffers, where any fused steps."""
    return ("; buffers fusion kept as scratch in them (written only inside a fused kernel, not read back or kept) "
            "hold unspecified contents" if groups and any(len(g) > 1 for g in groups[:k]) else "")


def _fate(mine: list, at: str, fused: bool = False, backend: Backend | None = None, step=None) -> str:
    """What became of the caller's steps `mine` (one kernel) where a sequence stopped at them (`at` as
    in `_stopped`; `step`, the kernel, names the buffers it writes where it was under way)."""
    which = _which(mine)
    if at is CHECKED:
        return f"{which} ran to completion and its writes stay, then its check raised"
    if at is not UNDER_WAY:
        return f"nothing of {which} ran" if not fused else f"{which} did not run" if mine[0] else "nothing ran"
    was = f"{which} {'was' if len(mine) == 1 else 'were'} under way"
    if backend is not None and backend.name == "reference":
        return (f"{was}: a dispatch on the reference backend is all or nothing, so either all of its writes stay or "
                "none do")
    written = [d.name for d in step.program.bound_buffers if d.access.writable or d.is_output] if step else []
    return (f"{was}: the buffers it writes{f' ({shown(written, 200)})' if written else ''} may hold some or all of its "
            "work (its kernel may have been launched)")


def as_step(step) -> Step:
    """`step` as a Step: a Step already, or a (program, buffers[, config]) tuple or list."""
    if isinstance(step, Step):
        return step
    if isinstance(step, (tuple, list)) and _length(step, "a step") in (2, 3) and isinstance(step[0], Program):
        return Step(*(step[k] for k in range(len(step))))
    raise DispatchError(f"{shown(step, 80)} is not a step of a resident sequence. "
                        "Fix: pass Step(program, buffers[, config]) or a (program, buffers[, config]) tuple.")


def _length(x, what: str) -> int | None:
    """len(x) for sized collections, None for iterators and anything unsized (a 0-d array); a
    DispatchError naming `what` where its `__len__` gives no length (negative, or past sys.maxsize)."""
    try:
        return len(x)
    except TypeError:
        return None
    except (ValueError, OverflowError) as e:
        raise DispatchError(f"{what}: len() of the {type(x).__name__} given fails ({e}). Fix: pass a plain list or "
                            "tuple, or give the collection a __len__ that returns its number of items.") from None


def _iterable(x, what: str):
    if what in ("keep", "read") and (hasattr(x, "__cuda_array_interface__") or isinstance(x, np.ndarray) or
                                     hasattr(x, "copy_to_host")):
        raise DispatchError(f"{what} is one buffer, not a list. Fix: pass {what}=[buffer]"
                            f"{' (or [(buffer, offset, count)] for a range)' if what == 'read' else ''}.")
    if what in ("steps", "body", "prefix") and (isinstance(x, Step) or (isinstance(x, (tuple, list)) and
                                                              2 <= (_length(x, what) or 0) <= 3 and
                                                              isinstance(x[0], Program))):
        raise DispatchError(f"{what} is one step ({type(x[0] if not isinstance(x, Step) else x.program).__name__} "
                            f"{x.program.name if isinstance(x, Step) else x[0].name!r} and its buffers), not a list "
                            f"of steps. Fix: pass a list of steps, e.g. {what}=[(program, buffers)].")
    try:
        return iter(x)
    except TypeError:
        wanted = {"read": "(buffer, offset, count) ranges", "keep": "resident buffers"}.get(what, "steps")
        raise DispatchError(f"{what}={shown(x, 60)} is not iterable. Fix: pass a list of {wanted}.") from None


def _is_buffer(r) -> bool:
    """Whether `r` is an array a read entry may name (not a tuple or list of one)."""
    return not isinstance(r, (tuple, list)) and (isinstance(r, np.ndarray) or hasattr(r, "__cuda_array_interface__")
                                                 or hasattr(r, "__dlpack__"))


def _read(r) -> tuple:
    """A read entry as (buffer, offset, count or None), checked before anything runs: ints (not
    bools) inside the buffer where its length can be read. A bare buffer is (buffer,): all of it."""
    if _is_buffer(r):
        r = (r,)
    size = _length(r, "read entry") if isinstance(r, (tuple, list)) else None
    if size is None or not 1 <= size <= 3:
        raise DispatchError(f"read entry {shown(r, 60)} is not a buffer or a (buffer[, offset[, count]]) tuple. "
                            "Fix: pass read=[buffer, (buffer, offset, count), ...].")
    buf, off, cnt = (r[0], 0, None) if size == 1 else (r[0], r[1], None) if size == 2 else (r[0], r[1], r[2])
    for what, x in (("offset", off), ("count", cnt)):
        if (x is not None or what == "offset") and (isinstance(x, (bool, np.bool_))
                                                    or not isinstance(x, INTEGERS)):
            raise DispatchError(f"read entry: {what}={shown(x, 60)} is not an int. Fix: pass element offsets and "
                                "counts as ints (count None for the rest of the buffer).")
    sized = isinstance(buf, np.ndarray) or hasattr(buf, "__cuda_array_interface__")
    if not (sized or hasattr(buf, "__dlpack__")):
        raise DispatchError(f"read entry: the buffer is {a_type(buf)}, not a resident buffer; nothing ran. "
                            "Fix: name a buffer the steps use, as backend.upload or backend.empty returned it.")
    size = _elements(buf) if sized else None  # a DLPack-only array: download checks its range
    end = size if cnt is None else int(off) + int(cnt)
    if size is not None and not 0 <= off <= end <= size:
        raise DispatchError(f"read entry: elements [{off}, {end}) are outside the buffer's {size}. Fix: pass "
                            "0 <= offset and offset + count <= the buffer's length.")
    return buf, int(off), None if cnt is None else int(cnt)


_RESOLVER = None  # set by vyre_numba.registry (the bottom layer) when the package is imported
_SHARED = None  # likewise: whether a backend is the one get_backend gives for its name
_COMPACT_READER = None  # likewise: (backend, values, flags, capacity) -> the kept records (compaction is above)


def resolve_backend(backend: "Backend | str | None" = None) -> Backend:
    """`backend` itself, the backend of that name, or (None) the best one here: how the layers
    above this one pick a backend without importing the registry below them."""
    if isinstance(backend, Backend):
        return backend
    if _RESOLVER is None:
        from .errors import BackendUnavailableError

        raise BackendUnavailableError("no backend registry is loaded. Fix: import vyre_numba (the package) first.")
    return _RESOLVER(backend)


_NAMES = None  # set by vyre_numba.registry, as _RESOLVER


def backend_names() -> list[str]:
    """The names of the registered backends, usable here or not (as `resolve_backend`, for the
    layers above this one)."""
    return [] if _NAMES is None else _NAMES()


STORAGE_DTYPES = frozenset(d.storage for d in DataType)


def check_empty(n, dtype, call: str | None = None, names: str = ", ".join(
        ["uint8", "int8"] + [d.value for d in DataType if d.value not in ("u8", "i8")])) -> tuple[int, np.dtype]:
    """(n, dtype) of a new resident buffer, checked: a whole number of elements below 2**32 and
    the storage dtype of a vyre type. `call` names the call in messages (default `empty(n=...)`);
    `names`, the type names an unknown one is told it takes ('u8' and 'i8' are ambiguous here)."""
    def name() -> str:  # made only for a message: shown() costs about a microsecond
        return call or f"empty(n={shown(n, 60)})"

    if isinstance(n, (bool, np.bool_)) or not isinstance(n, INTEGERS):
        raise DispatchError(f"{name()}: n is not an int. Fix: pass a whole number of elements (lengths are u32).")
    if n < 0:
        raise DispatchError(f"{name()}: n is negative. Fix: pass a number of elements from 0 to 2**32 - 1.")
    if n >= 2**32:
        raise DispatchError(f"{name()}: {int(n)} elements is 2**32 or more; lengths and indices are u32. Fix: split the "
                            "data into buffers of fewer than 2**32 elements.")
    if dtype is None:  # NumPy reads None as float64: a default the call does not have
        raise DispatchError(f"{name()}: dtype is None. Fix: name the element type, e.g. 'f32', np.float32 or "
                            "'uint32'.")
    if isinstance(dtype, str) and dtype in ("i8", "u8"):
        small, big = ("int8", "int64") if dtype == "i8" else ("uint8", "uint64")
        raise DispatchError(f"{name()}: {dtype!r} is vyre's 8-bit integer but NumPy's 8-byte one. Fix: say which: "
                            f"{small!r} or {big!r} (np.{small} or np.{big}).")
    if isinstance(dtype, str) and dtype not in NUMPY_BOOL_CODES:  # a name reads as wherever a type is taken ("int"
        try:  # is refused, not int64); NumPy's codes of its one-byte bools are refused as np.bool_ is
            dt = DataType.parse(dtype).storage
        except IRValidationError:
            from .ir.types import _name_fix

            fix = _name_fix(dtype, names)
            raise DispatchError(f"{name()}: unknown data type {shown(dtype)}. Fix: {fix}.") from None
    else:
        check_not_a_value(dtype, name())
        try:  # a vyre type (DataType.BF16, DataType.BOOL) is its storage: bf16's raw bits, bool's u32 words
            dt = dtype.storage if isinstance(dtype, DataType) else np.dtype(dtype)
        except (TypeError, ValueError, RecursionError):
            dt = None
    if dt is None or dt not in STORAGE_DTYPES:
        raise DispatchError(f"{name()}: {shown(dtype, 60)} is not the storage dtype of a vyre type. Fix: pass one of "
                            f"{sorted({str(d) for d in STORAGE_DTYPES})}, or a vyre type ('f32', 'bool', 'bf16', "
                            "DataType.F32).")
    return int(n), dt


def check_not_a_value(dtype, call: str) -> None:
    """Refuse a value where a type goes (np.int32(7), an array, a queue): NumPy takes the dtype of
    anything that has one, silently."""
    if isinstance(dtype, (np.generic, np.ndarray)) or (
            not isinstance(dtype, (type, np.dtype, list, tuple, dict)) and hasattr(dtype, "dtype")):
        raise DispatchError(f"{call}: {shown(dtype, 60)} is a value ({a_type(dtype)}), not a type; NumPy would take "
                            "its type silently. Fix: pass the type itself, e.g. np.int32 (or x.dtype for an array "
                            "x).")


def check_each(each) -> None:
    """`each` of `upload_in_pieces`: something to call with (buffer, first, count)."""
    fix = "Fix: pass a function each(buffer, first, count) that enqueues work on elements [first, first + count)."
    if not callable(each) or isinstance(each, type):
        what = f"the class {each.__name__}" if isinstance(each, type) else a_type(each)
        raise DispatchError(f"upload_in_pieces: each is {what}, not a function. {fix}")
    import inspect

    try:
        signature = inspect.signature(each)
    except (TypeError, ValueError):  # builtins and some callables say nothing: they are called as they are
        return
    try:
        signature.bind(None, 0, 0)
    except TypeError:
        raise DispatchError(f"upload_in_pieces: each{signature} cannot be called with (buffer, first, count). "
                            f"{fix}") from None


def check_span(offset, count, size: int, what: str = "download") -> tuple[int, int]:
    """(offset, count) of elements [offset, offset + count) of a buffer of `size`, checked: ints
    (any integer type, taken as Python ints) inside the buffer; count None means to the end."""
    for name, v in (("offset", offset), ("count", count)):
        if (v is None and name == "offset") or (v is not None and (
                isinstance(v, (bool, np.bool_)) or not isinstance(v, INTEGERS))):
            raise DispatchError(f"{what}: {name}={shown(v, 60)} is not an int. Fix: pass a whole number of elements "
                                "(offset=0 for the start, count=None for the rest).")
    offset = int(offset)
    count = size - offset if count is None else int(count)
    if offset < 0 or count < 0 or offset + count > size:
        raise DispatchError(f"{what}: elements [{offset}, {offset + count}) are outside the buffer's {size}. "
                            "Fix: pass 0 <= offset and offset + count <= len(buffer).")
    return offset, count


def int_items(a, name: str, fix: str) -> np.ndarray | None:
    """`a` as int64 where every item is an integer (of any Python or NumPy type; NumPy reads a
    mix of uint64 and int64, or Python ints past int64, as float or object), else None; one
    outside int64 is refused, the message ending in `Fix: fix`."""
    try:
        obj = np.array(a, dtype=object)
    except Exception:
        return None
    flat = obj.ravel().tolist()
    if not all(isinstance(v, INTEGERS) and not isinstance(v, (bool, np.bool_)) for v in flat):
        return None
    ints = [int(v) for v in flat]
    if min(ints) < -(2**63) or max(ints) >= 2**63:
        big = max(ints, key=abs)
        what = "integers beyond 64 bits" if big >= 2**64 or big < -(2**63) else "an integer past int64"
        raise DispatchError(f"{name} holds {what} (such as {shown(big)}); its integers are read as int64. "
                            f"Fix: {fix}")
    return np.array(ints, np.int64).reshape(obj.shape)


def as_ints(given, arr: np.ndarray, name: str, fix: str) -> np.ndarray:
    """`arr` (NumPy's reading of `given`) as int64 where it holds integers as objects (Python ints,
    exact or refused past int64 with `Fix: fix`), or `given` is a list or tuple of integers NumPy
    promoted to float (a mix of uint64 and int64); else `arr` as it is."""
    if arr.size and (arr.dtype == object or (arr.dtype.kind == "f" and isinstance(given, (list, tuple)))):
        ints = int_items(given, name, fix)
        if ints is not None:
            return ints
    return arr


def interface_dtype(cai: dict) -> np.dtype:
    """The element type a `__cuda_array_interface__` names: its record fields where `descr` has
    them (a record array's typestr is only `|V<size>`), else its typestr."""
    descr = cai.get("descr")
    try:
        if descr and any(name for name, *_ in descr):
            if not all(isinstance(name, str) for name, *_ in descr):  # (title, name) pairs: NumPy's own reading
                return np.dtype(descr)
            names, formats, offsets, at = [], [], [], 0
            for name, fmt, *shape in descr:  # unnamed entries are padding (an aligned record's), not fields
                d = np.dtype((fmt, tuple(shape[0])) if shape else fmt)
                if name:
                    names.append(name), formats.append(d), offsets.append(at)
                at += d.itemsize
            return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": at})
        return np.dtype(cai["typestr"])
    except (TypeError, ValueError, KeyError) as e:
        raise DispatchError(f"the device array's __cuda_array_interface__ names no element type NumPy knows "
                            f"({shown(cai.get('typestr'))}: {e}). Fix: pass a numba, CuPy or PyTorch array of "
                            "numbers or records.") from None


def host_array(x, what: str, on_device: str, masked: str, other: str) -> np.ndarray:
    """`x` as a NumPy array, or a DispatchError saying `what` is on the device, masked (its mask
    would be lost) or not an array of numbers, ending in the matching Fix."""
    if hasattr(x, "copy_to_host") or hasattr(x, "__cuda_array_interface__"):  # Numba's first: its interface costs more
        raise DispatchError(f"{what} is on the device. Fix: {on_device}")
    refuse_misread(x, what, masked=masked)
    try:
        arr = np.asarray(x)
    except MemoryError:
        raise
    except Exception as e:  # an __array__ that raises too (a PyTorch tensor that requires grad)
        raise DispatchError(f"{what} is not an array of numbers ({type(e).__name__}: {e}). Fix: {other}") from None
    _refuse_inexact_frame(x, arr, what)
    return arr


def _refuse_inexact_frame(x, arr: np.ndarray, what: str) -> None:
    """A DispatchError where `x` is a table (a pandas DataFrame) whose columns of several dtypes NumPy
    read as one (`arr`) that changes some value of a column (int64 ids past 2**53 in float64)."""
    dtypes = getattr(x, "dtypes", None)
    if arr.ndim != 2 or dtypes is None or isinstance(dtypes, np.dtype) or not hasattr(x, "iloc"):
        return
    for j, (name, dt) in enumerate(dtypes.items()):
        if dt == arr.dtype or not isinstance(dt, np.dtype) or dt.kind not in "biuf":
            continue
        col = np.asarray(x.iloc[:, j])
        with np.errstate(all="ignore"):
            back = arr[:, j].astype(dt)
        bad = np.flatnonzero(back != col)
        if bad.size:
            raise DispatchError(f"{what} is a table whose column {shown(name)} ({dt}) NumPy reads, with the others, as "
                                f"{arr.dtype}, which changes its value in row {int(bad[0])} ({shown(col[bad[0]].item())} "
                                f"becomes {shown(arr[bad[0], j].item())}). Fix: pass each column on its own "
                                f"(x[{name!r}].to_numpy()), or convert the table on purpose (x.astype(...)).")


def check_write(dtype: np.dtype, size: int, values, offset) -> tuple[np.ndarray, int]:
    """(the values as a flat array of `dtype`, converted exactly, and the offset) of a write into a
    buffer of `size` elements of `dtype`, checked: they fit from `offset` on."""
    from .bindings import as_host_array
    from .ir import BufferDecl

    if isinstance(offset, (bool, np.bool_)) or not isinstance(offset, INTEGERS) or offset < 0:
        raise DispatchError(f"write: offset={shown(offset, 60)} is not an element index. Fix: pass an int from 0.")
    offset = int(offset)
    if dtype not in STORAGE_DTYPES:
        raise DispatchError(f"write: the buffer holds {dtype}, not one of the vyre storage dtypes "
                            f"{sorted({str(d) for d in STORAGE_DTYPES})}. Fix: write into a buffer of one of them "
                            "(backend.empty(n, dtype), or upload an array of that dtype).")
    if hasattr(values, "__cuda_array_interface__") or hasattr(values, "copy_to_host"):
        raise DispatchError("write: the values are a GPU array; write copies host values. Fix: pass a NumPy array "
                            "(values.copy_to_host(), or values.get() for CuPy).")
    arr = as_host_array(BufferDecl.read("values", 0, DataType.parse(dtype)), values, "write")
    if offset + arr.size > size:
        raise DispatchError(f"write: {arr.size} values from element {offset} need {offset + arr.size} "
                            f"elements, but the buffer has {size}. Fix: write fewer values, from an earlier offset, or "
                            "into a larger buffer.")
    return arr, offset


def _listed(values: list | tuple, arr: np.ndarray) -> np.ndarray:
    """`arr`, NumPy's reading of the (nested) list `values`, where it holds exactly the listed values,
    checked as dispatch checks a list: bools among numbers and integers rounded to a common float
    type (`[2**53 + 1, 0.5]`) are refused. Arrays (and other array-likes) in the list are checked
    whole where their dtype casts to `arr`'s safely, element by element otherwise."""
    from .bindings import _check_elements
    from .ir import BufferDecl

    try:
        b = BufferDecl.read("array", 0, DataType.parse(arr.dtype))
    except VyreError:
        return arr  # not a vyre type (long double): refused below
    if arr.ndim == 1:  # NumPy read it flat, so its elements are the scalars
        return _check_elements(b, values, arr, "upload")
    flat, scalars, places, mixed, at = arr.reshape(-1), [], [], False, 0
    todo = [(iter(values), 1)]  # NumPy read the nesting as regular: an item at depth d has shape arr.shape[d:]
    while todo:
        items, depth = todo[-1]
        v = next(items, _END)
        if v is _END:
            todo.pop()
        elif isinstance(v, (list, tuple)) and depth < arr.ndim - 1:
            todo.append((iter(v), depth + 1))
        elif isinstance(v, (list, tuple)) and depth == arr.ndim - 1:  # a row of scalars
            scalars.extend(v)
            places.extend(range(at, at + len(v)))
            at += len(v)
        elif depth == arr.ndim:
            scalars.append(v)
            places.append(at)
            at += 1
        else:  # an array-like (ndarray, range, array.array ...) standing for arr.shape[depth:]
            a, mixed = np.asarray(v), True
            if not _exact_cast(a.dtype, arr.dtype):
                scalars.extend(a.reshape(-1).tolist())  # checked one by one, and named where refused
                places.extend(range(at, at + a.size))
            at += a.size
    if not mixed:
        return _check_elements(b, scalars, flat, "upload").reshape(arr.shape)
    if scalars:
        _check_elements(b, scalars, flat[places], "upload", widen=False)
    return arr


_END = object()


def _exact_cast(src: np.dtype, dst: np.dtype) -> bool:
    """Whether every value of dtype `src` is a value of `dtype` dst (bools only of bools; NumPy's
    'safe' casting takes int64 to float64, which rounds past 2**53)."""
    if src.kind == "b" or dst.kind == "b":
        return src.kind == dst.kind
    if src.kind in "iu" and dst.kind == "f":
        return src.itemsize * 8 - (src.kind == "i") <= np.finfo(dst).nmant + 1
    return src.kind in "iuf" and np.can_cast(src, dst, "safe")


def _refuse_ints_read_as_floats(values: list | tuple, arr: np.ndarray) -> None:
    """A DispatchError where a list holds integers only and NumPy read it as floats (no one integer
    type holds them all: [1, -1, 2**63]), which would make a float buffer of a list of ids."""
    got = int_range(values, arr) if arr.dtype.kind == "f" else None
    if got is None:
        return
    lo, hi = got
    fix = ("pass np.array(values, dtype=np.int64), which holds them all" if -2**63 <= lo and hi < 2**63 else
           "pass np.array(values, dtype=np.uint64), which holds them all" if lo >= 0 and hi < 2**64 else
           "keep them within one integer type's range (offset them), or pass np.array(values, dtype=np.float64) "
           "where floats are meant")
    raise DispatchError(f"upload: the list holds integers from {lo} to {hi}, which NumPy reads as {arr.dtype}: no one "
                        f"integer type it infers holds them all. Fix: {fix}.")


def _refuse_int_table_read_as_floats(x, arr: np.ndarray) -> None:
    """A DispatchError where `x` is a table (a pandas DataFrame) of integer columns only that NumPy
    read as floats (uint64 beside int64): as a list of such integers is refused, not uploaded as a
    float buffer of ids."""
    dtypes = getattr(x, "dtypes", None)
    if arr.dtype.kind != "f" or dtypes is None or isinstance(dtypes, np.dtype) or not hasattr(x, "iloc"):
        return
    kinds = {str(dt) for dt in dtypes}
    if len(dtypes) and all(isinstance(dt, np.dtype) and dt.kind in "iu" for dt in dtypes):
        raise DispatchError(f"upload: the table's columns are all integers ({', '.join(sorted(kinds))}), which NumPy "
                            f"reads together as {arr.dtype}: no one integer type it infers holds them all. Fix: "
                            "convert the table on purpose, x.astype(np.int64) (or np.uint64) where its values fit, "
                            "or upload each column on its own (x['a'].to_numpy()).")


def check_upload(array) -> np.ndarray:
    """`array` as a contiguous host array of numbers (or bools) to copy to the device."""
    arr = np.ascontiguousarray(host_array(
        array, "upload: the array", "bind it directly in dispatch_resident, or copy it with its library's own "
        "copy method.", "pass array.filled(value) or the unmasked values (array.compressed()).",
        "pass a NumPy array."))
    if arr.dtype.kind not in "biuf":
        raise DispatchError(f"upload: the array holds {arr.dtype} values, not numbers. Fix: pass a NumPy array of "
                            "one of the vyre storage dtypes (uint8 ... float64).")
    if isinstance(array, (list, tuple)) and arr.size:
        arr = _listed(array, arr)
        _refuse_ints_read_as_floats(array, arr)
    _refuse_int_table_read_as_floats(array, arr)
    if not arr.dtype.isnative:  # the same values in this machine's byte order: what kernels and write read
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype.kind == "f" and arr.dtype not in STORAGE_DTYPES:
        raise DispatchError(f"upload: the array holds {arr.dtype} values, which no kernel reads. Fix: convert it "
                            "to float64 or float32 first (x.astype(np.float64)), rounding as you mean to.")
    if arr.size >= 2**32:
        raise DispatchError(f"upload: {arr.size} elements is 2**32 or more; lengths are u32. Fix: split the data.")
    return arr


check_calls(globals(), ["Telemetry", "Step", "Fusion"])

from .megakernel import Megakernel  # noqa: E402,F401  (Backend.megakernel's annotation names it; it imports this module)
from .recording import RecordedGraph, RecordedSequence  # noqa: E402,F401  (as Megakernel: record_graph's and record_sequence's)
