"""Device work queues: device code appends with an atomic tail, the host (or a persistent kernel)
drains, and a full queue pushes back instead of losing items.

    q = WorkQueue(1 << 20, np.int32)
    kernel[grid, block](q.items, q.state, ...)      # device code: workqueue.device.push(items, state, v)
    frontier = q.drain()                            # the filled items (a device array), queue emptied
    q.consume(step, (labels,))                      # step(value, args) on every item, count read on the device

A push at capacity stores nothing and returns False on the device; the producer keeps its item
and pushes it again after a drain (`overflowed()` says how many pushes were refused). Drain
strategies are explicit: `drain()` takes the whole queue, `chunks(k)` hands it out k items at a
time, `consume(step)` runs a persistent grid-stride kernel over it with no host read in between
and leaves the items queued.
`QueueModel` is the NumPy twin of the device semantics: the CPU implementation and the oracle.
"""
from __future__ import annotations

import copy
import functools
import threading
from typing import Callable, Iterator

import numpy as np
from numpy.typing import DTypeLike

from ..backend import ArrayIn, ArrayOut, Stream, check_empty, check_not_a_value, host_array
from ..ir import DataType
from ..ir.types import NUMPY_BOOL_CODES
from ..errors import (INTEGERS, BackendUnavailableError, CapacityError, DispatchError, NotACollection, VyreError,
                      a_type, device_memory_error, device_out_of_memory, flat_fix, host_memory, mixes_bools,
                      native, numba_reason, public_name, raise_if_out_of_memory, shown, yields)
from ..owned import Unshared
from ..signals import uninterrupted
from ..simulator import SIMULATED as _SIM

__all__ = ["WorkQueue", "QueueModel"]


class _Shared(NotACollection):
    """What a queue and its model share: `with` (closing on leaving) and `chunks`, the fixed-size
    drain. The class gives `close()`, `_slots()` (its items, refused once closed), `size()`,
    `_lock`, `_iterating`, `_emptied` and `_drop_first`."""

    _collection_fix = ("q.size() is how many items it holds; q.drain() takes them all as one array, and "
                       "q.chunks(k) k at a time.")

    def __enter__(self):
        self._slots()  # a closed one is refused here, not at the first call inside
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def chunks(self, chunk: int) -> Iterator:
        """The items filled when the iteration starts, `chunk` at a time (views, valid until the
        iteration ends), then the queue emptied of them: items pushed meanwhile stay queued. One
        iteration at a time (a second, before the first ends, raises DispatchError); one whose items
        a drain or reset took meanwhile raises DispatchError at its next piece or its end."""
        chunk = _items(chunk, "chunk")
        self._slots()

        def pieces():
            with self._lock:
                if self._iterating:
                    raise DispatchError("another chunks iteration is handing out this queue's items; two would hand "
                                        "out the same ones. Fix: finish (or drop) it first: one consumer iterates "
                                        "chunks at a time (drain() gives each caller its own items).")
                n, emptied = self.size(), self._emptied  # waits on the stream: before the flag, which only
                self._iterating = True  # the finally below clears
            try:
                for start in range(0, n, chunk):
                    items = self._slots()  # closed between two pieces: refused, not a raw error
                    self._check_not_emptied(emptied)
                    yield items[start:min(n, start + chunk)]
                try:
                    self._drop_first(n, emptied)
                except Exception as e:  # past the call's return: named here, as a public call names its own
                    raise_if_out_of_memory(e, f"{public_name(type(self))}.chunks()",
                                           "push fewer items while it hands them out", named=True)
                    raise
            finally:
                self._iterating = False
        return pieces()

    def _check_not_emptied(self, emptied: int) -> None:
        if self._emptied != emptied:
            raise DispatchError("the queue was drained or reset while chunks handed out its items, so they went "
                                "there too (and the views may show later pushes). Fix: finish (or drop) the chunks "
                                "iteration before drain() or reset().")


class QueueModel(_Shared):
    """The queue's semantics on the host: push returns False at capacity, drain (or `chunks`)
    empties; `close()` (or `with`) releases its items as the device queue's. Safe to push and drain
    from several threads."""

    _read_only_fix = "change what it holds with push, drain and reset, or make a new QueueModel(capacity, dtype)"

    @host_memory("QueueModel", "It holds its capacity's items in host memory at once. Fix: make a smaller queue "
                               "and drain it more often.")
    def __init__(self, capacity: int, dtype: DTypeLike):
        self._capacity, self._dtype = _capacity(capacity), _dtype(dtype)
        self._items = np.zeros(self._capacity, self._dtype)
        self._tail = 0
        self._lock = threading.RLock()
        self._iterating = False  # as WorkQueue's
        self._emptied = 0

    def __repr__(self) -> str:
        if self._items is None:
            return f"<QueueModel: room for {self._capacity} {self._dtype} items, closed>"
        refused = self.overflowed()
        return (f"<QueueModel: room for {self._capacity} {self._dtype} items, {self.size()} filled"
                + (f", {refused} refused" if refused else "") + ">")

    def __getstate__(self) -> dict:
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_iterating")}
            state["_items"] = None if self._items is None else self._items.copy()
            return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()
        self._iterating = False

    def __copy__(self) -> "QueueModel":
        """An independent queue (of the same class) holding the same items (a queue's items are its
        own: a copy that shared them would overwrite the original's)."""
        new = type(self).__new__(type(self))
        new.__setstate__(self.__getstate__())
        return new

    def __deepcopy__(self, memo: dict) -> "QueueModel":
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return new

    def close(self) -> None:
        """Release the items (once; later calls do nothing; any other use is refused), as `WorkQueue.close`."""
        with self._lock:
            self._items = None

    @property
    def closed(self) -> bool:
        """Whether `close()` has released the items (then every use is refused)."""
        return self._items is None

    def _slots(self) -> np.ndarray:
        items = self._items
        if items is None:
            raise DispatchError("this QueueModel was closed. Fix: make a new one.")
        return items

    @property
    def items(self) -> np.ndarray:
        """The queue's slots (the first `size()` hold the items pushed), as the device queue's `items`."""
        return self._slots()

    @property
    def tail(self) -> int:
        """Pushes so far since the last drain or reset, refused ones included (`size()` caps it)."""
        return self._tail

    def push(self, value: object) -> bool:
        """Append `value` (converted to the queue's dtype as `WorkQueue.push` does: integers exactly,
        floats rounded to the nearest of a float queue; else a DispatchError and the queue
        unchanged); False (nothing stored) when the queue is full, as the device's push."""
        dt = self._dtype
        lo, hi = _int_range(dt) if dt.kind in "iu" else (1, 0)
        if isinstance(value, INTEGERS) and not isinstance(value, (bool, np.bool_)) and lo <= value <= hi:
            value = (int(value),)  # the common case, an int in range, without the array checks
        else:
            value = _values(value, dt, one=True)
        with self._lock:
            items = self._slots()
            slot = self._tail
            if slot < items.size:  # stored before the tail moves past it: a Ctrl-C between queues nothing
                items[slot] = value[0]
            self._tail = slot + 1
        return slot < items.size

    @property
    def capacity(self) -> int:
        """How many items it holds at most (as `WorkQueue.capacity`)."""
        return self._capacity

    @property
    def dtype(self) -> np.dtype:
        """The items' dtype (as `WorkQueue.dtype`)."""
        return self._dtype

    def reset(self) -> None:
        """Empty the queue, its overflow count too (as `WorkQueue.reset`)."""
        with self._lock:
            self._slots()
            with uninterrupted():  # emptied, and said so to an iteration in flight, or neither
                self._empty()

    def _empty(self) -> None:
        self._tail = 0
        self._emptied += 1

    def size(self) -> int:
        """The number of filled slots."""
        return min(self._tail, self._slots().size)

    def overflowed(self) -> int:
        """How many pushes found the queue full since the last drain or reset."""
        return max(0, self._tail - self._slots().size)

    def drain(self) -> np.ndarray:
        """The filled items, in push order; the queue is empty afterwards."""
        with self._lock:
            out = self._slots()[:self.size()].copy()
            tail, emptied = self._tail, self._emptied

            def undo():  # a Ctrl-C came: the items stay queued, since the caller never gets them
                self._tail, self._emptied = tail, emptied
            with uninterrupted(undo):
                self._empty()
                return out

    def _drop_first(self, n: int, emptied: int) -> None:
        """Empty the queue of its first n items, moving any after them to the front (as WorkQueue's)."""
        with self._lock:
            items = self._slots()
            if n == 0:
                return
            self._check_not_emptied(emptied)
            rest = self.size() - n
            with uninterrupted():  # the items moved under the old tail would be queued twice
                if rest > 0:
                    items[:rest] = items[n:n + rest].copy()
                self._tail = max(rest, 0)
                self._emptied += 1


def _items(count, name: str) -> int:
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, INTEGERS) or count < 1:
        raise DispatchError(f"{name}={shown(count)} is not a positive number of items. Fix: pass an int >= 1.")
    return int(count)


def _capacity(capacity) -> int:
    capacity = _items(capacity, "capacity")
    if capacity >= 2**40:
        raise DispatchError(f"capacity={capacity} is 2**40 items or more, past what a queue holds. Fix: pass "
                            "fewer items (drain more often).")
    return capacity


_QUEUE_NAMES = "uint8, int8, u16, u32, u64, i16, i32, i64, f16, f32, f64"  # no bool or bf16: no numbers of NumPy's


def _dtype(dtype) -> np.dtype:
    """The items' dtype: a number type named as wherever a type is taken ('u32', DataType.I64,
    np.float32; "int" and the 'u8' that is 8 bits to vyre and 8 bytes to NumPy refused as in
    `empty`), or a record dtype of such numbers."""
    given = dtype
    if dtype is DataType.BOOL:
        dtype = np.bool_  # refused below as every bool is
    if dtype is DataType.BF16 or (isinstance(dtype, str) and _vyre_type(dtype) is DataType.BF16):
        raise DispatchError(f"dtype={shown(given, 60)}: a queue holds NumPy numbers and NumPy has no bfloat16, so its "
                            "items would be raw bits that push could not check. Fix: make a 'u16' queue and push the "
                            "values' bit patterns, vyre_numba.ir.f32_to_bf16_bits(x); device code reads them as uint16.")
    if isinstance(dtype, str) and _not_a_number(dtype):  # 'U1', 'S8', 'O', 'M8[ns]', 'c8': NumPy's, not vyre's
        dtype = np.dtype(dtype)  # refused below as a type that cannot be queued
    if isinstance(dtype, DataType) or (
            isinstance(dtype, str) and "," not in dtype and dtype not in ("bool", *NUMPY_BOOL_CODES)):  # bools: no numbers
        return check_empty(1, dtype, call=f"dtype={shown(given, 60)}", names=_QUEUE_NAMES)[1]
    check_not_a_value(dtype, f"dtype={shown(given, 60)}")
    try:
        dt = None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError, RecursionError) as e:
        raise DispatchError(f"dtype={shown(given, 60)} is not a NumPy type ({e}). Fix: pass e.g. np.int32.") from None
    def field(t: np.dtype) -> bool:  # a record's field: a number, a bool, a nested record or a subarray of them
        todo = [(t, 0)]  # a walk, not recursion: a record may nest past Python's depth
        while todo:
            t, depth = todo.pop()
            if depth > _MAX_NESTING:  # NumPy itself recurses to print or compare such a dtype
                raise DispatchError(f"the record dtype nests more than {_MAX_NESTING} levels deep, deeper than NumPy "
                                    "prints or compares dtypes reliably. Fix: flatten the record (its fields side by "
                                    "side, named apart).")
            if t.subdtype is not None:
                todo.append((t.subdtype[0], depth + 1))
            elif t.fields is not None:
                if not t.itemsize:
                    return False
                todo.extend((f[0], depth + 1) for f in t.fields.values())
            elif not (t.kind in "biuf" and t.itemsize <= 8):
                return False
        return True
    if dt is None or not ((dt.kind in "iuf" and dt.itemsize <= 8) if dt.fields is None else field(dt)):
        raise DispatchError(f"dtype={shown(given, 60)} cannot be queued. Fix: pass a number type of at most 64 bits "
                            "(e.g. np.int32) or a record dtype whose fields are such numbers.")
    if not native(dt):  # the model refuses it too: it is the twin of a queue device code reads
        raise DispatchError(f"dtype={shown(given, 60)} is not in this machine's byte order: Numba's kernels "
                            "cannot read such an "
                            f"array. Fix: pass {dt.newbyteorder('=')} ("
                            + ("push converts the values)." if dt.fields is None else
                               "and push records converted to it, x.astype(q.dtype))."))
    return dt


_MAX_NESTING = 64  # levels of records within records a queue's dtype may have


def _vyre_type(name: str) -> DataType | None:
    """The vyre type `name` spells, as wherever a type is taken, or None."""
    try:
        return DataType.parse(name)
    except VyreError:
        return None


def _not_a_number(name: str) -> bool:
    """Whether NumPy reads `name` as a type other than a number or a bool (a string, bytes, an
    object, a time, a complex)."""
    try:
        return np.dtype(name).kind not in "biuf"
    except (TypeError, ValueError, RecursionError):
        return False


@functools.lru_cache(maxsize=None)  # a few integer dtypes; read on every push
def _int_range(dt: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


_NUMBERS = [np.dtype(t) for t in ("i1", "u1", "i2", "u2", "f2", "i4", "u4", "f4", "i8", "u8", "f8")]


def _holds(t: np.dtype, v) -> bool:
    """Whether a queue of `t` takes `v` as push converts it: an integer exactly, a float rounded
    short of overflow (an integer queue takes no float)."""
    whole = isinstance(v, INTEGERS)
    if t.kind in "iu":
        lo, hi = _int_range(t)
        return whole and lo <= int(v) <= hi
    try:
        with np.errstate(all="ignore"):
            x = t.type(v)
    except OverflowError:
        return False
    return bool(np.isfinite(x)) and (not whole or int(x) == int(v))


def _holds_all(t: np.dtype, values) -> bool:
    """Whether a queue of `t` takes every one of `values` (a list, or an array checked at once)."""
    if not isinstance(values, np.ndarray):
        return all(_holds(t, v) for v in values)
    with np.errstate(all="ignore"):
        if values.dtype.kind == "f":
            return t.kind == "f" and bool(np.isfinite(values.astype(t))[np.isfinite(values)].all())
        if t.kind in "iu":
            lo, hi = _int_range(t)
            return lo <= int(values.min()) and int(values.max()) <= hi
        out = values.astype(t)
        return bool(np.isfinite(out).all() and (out.astype(values.dtype) == values).all()
                    and (np.abs(out) < 2.0**63).all())


def _room_fix(v, values, dt: np.dtype, rest: str) -> str:
    """The Fix for values a queue of `dt` cannot take (`v` the one shown): the narrowest other
    type of the same kind (float or integer) that takes them all, else of the other kind, else
    none ("make it wider" misleads where dt is 64-bit)."""
    others = sorted((t for t in _NUMBERS if t != dt and t.itemsize >= dt.itemsize),
                    key=lambda t: ((t.kind == "f") != (dt.kind == "f"), t.itemsize))
    t = next((t for t in others if _holds_all(t, values)), None)
    them = f"{shown(v)} and the rest" if np.size(values) > 1 else shown(v)
    if t is None:
        return f"{rest}: no queue type holds {them}."
    return f"make the queue of {t} (it holds {them}), or {rest}."


_RECORDS = ("make them records: np.array([(1, 2.0), ...], dtype=q.dtype) (a tuple is a record only inside such an "
            "array; each field converts as astype does).")


def _values(values, dt: np.dtype, *, one: bool = False) -> np.ndarray:
    """`values` (a number, a list or a 1-D host array) as a 1-D array of `dt`, or a DispatchError
    where the conversion would change a value (a float to an integer, an integer out of range, a
    bool, a rounded or overflowing float): nothing is coerced silently."""
    if dt.fields is not None and isinstance(values, (list, tuple)) and len(values):
        raise DispatchError(f"the values are a Python {type(values).__name__}, and the queue holds records of {dt}. "
                            f"Fix: {_RECORDS}")
    if isinstance(values, (int, list, tuple)) and not isinstance(values, bool):  # NumPy would read some as floats
        values = _python_ints(values, dt)
    arr = host_array(values, "push: the values argument", "push from device code (workqueue.device.push), or pass "
                     "values.copy_to_host().", "pass values.compressed().", f"pass a list or a 1-D array of {dt}.")
    if dt.fields is not None and arr.size and arr.dtype != dt:
        raise DispatchError(f"the values have dtype {arr.dtype}, not the queue's records of {dt}. Fix: {_RECORDS}")
    if one and arr.size != 1:
        raise DispatchError(f"push takes one value; got {arr.size}{f' (shape {arr.shape})' if arr.ndim > 1 else ''}. "
                            "Fix: push them one at a time (for v in np.asarray(values).reshape(-1): q.push(v)).")
    if arr.ndim > 1:
        raise DispatchError(f"the values have shape {arr.shape}, not 1-D. Fix: pass "
                            f"{flat_fix(values, 'values')} if the order is the one you mean.")
    arr = arr.reshape(-1)
    if dt.fields is not None:
        if not arr.size:  # nothing to push: its type says nothing (an empty list reads as float64)
            return np.zeros(0, dt)
        return np.ascontiguousarray(arr)
    if not arr.size:
        return np.zeros(0, dt)
    if arr.dtype.kind not in "iuf":
        hint = f" (convert bools yourself: np.asarray(values).astype(np.{dt}))" if arr.dtype.kind == "b" else ""
        raise DispatchError(f"the values have dtype {arr.dtype}, not numbers. Fix: pass numbers of the queue's dtype "
                            f"{dt}{hint}.")
    if dt.kind in "iu":
        if arr.dtype.kind == "f":
            listed = isinstance(values, (list, tuple))  # NumPy read the list as floats: a big int in it is rounded
            raise DispatchError(f"the values are floats and the queue holds {dt}. Fix: round them yourself, e.g. "
                                f"np.rint(values).astype(np.{dt})" + (
                                    f"; for a list mixing integers past 2**53 with floats, "
                                    f"np.array([round(v) for v in values], dtype=np.{dt}), which keeps each integer "
                                    "exact." if listed else "."))
        info = np.iinfo(dt)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            v = lo if lo < info.min else hi
            fix = _room_fix(v, arr, dt, "push values in range")
            raise DispatchError(f"the value {v} does not fit in {dt}. Fix: {fix}")
        return arr.astype(dt)
    with np.errstate(all="ignore"):
        out = arr.astype(dt)
        if arr.dtype.kind == "f":  # floats round to the nearest of dt, as NumPy's; only overflow is refused
            wrong = np.isfinite(arr) & ~np.isfinite(out)
        else:  # integers must arrive exactly
            wrong = out.astype(arr.dtype) != arr
    if wrong.any():
        k = int(np.argmax(wrong))
        raise DispatchError(f"the value {arr[k]} is not a {dt} (it would become {out[k]}). "
                            f"Fix: {_room_fix(arr[k].item(), arr, dt, 'convert the values yourself')}")
    return out


def _python_ints(values, dt: np.dtype):
    """Python ints as `dt` where each arrives exactly, else a DispatchError (a list's ints checked
    so beside its floats too); anything else as it was. (NumPy reads [1, 2**64 - 1] as floats,
    which would round before any check.)"""
    if mixes_bools(values):
        raise DispatchError("the values mix bools and numbers. Fix: convert the bools yourself (int(b)).")
    items = [values] if isinstance(values, int) else values
    if not items or dt.fields is not None:
        return values
    ints = [v for v in items if isinstance(v, INTEGERS) and not isinstance(v, (bool, np.bool_))]
    for v in map(int, ints):  # beside floats too: [2**53 + 1, 0.5] would round as NumPy reads it
        try:
            with np.errstate(over="ignore"):
                same = int(dt.type(v)) == v
        except (OverflowError, ValueError):  # out of an integer type's range; infinite as a float
            same = False
        if not same:
            raise DispatchError(f"the value {shown(v)} is not exactly representable as {dt}. "
                                f"Fix: {_room_fix(v, items, dt, 'push values in range')}")
    return np.array(items, dt) if len(ints) == len(items) else values


class WorkQueue(_Shared, Unshared):
    """A device-resident queue of `capacity` items of `dtype` on `stream` (numba's default stream
    unless given); owns its two device arrays until `close()` (or `with`, or the finaliser). Its
    host calls are safe from several threads."""

    _read_only_fix = "change what it holds with push, drain and reset, or make a new WorkQueue(capacity, dtype)"

    @property
    def capacity(self) -> int:
        """How many items the queue holds at most."""
        return self._capacity

    @property
    def dtype(self) -> np.dtype:
        """The items' NumPy dtype."""
        return self._dtype

    @property
    def stream(self):
        """The Numba stream its host calls and kernels are enqueued on."""
        return self._stream

    def __init__(self, capacity: int, dtype: DTypeLike, *, stream: Stream | None = None):
        from numba import cuda

        from ..gpu.numba_launch import check_stream

        self._capacity, self._dtype = _capacity(capacity), _dtype(dtype)
        check_stream(stream)
        self._dev_items = self._dev_state = None
        self._cuda = cuda
        self._lock = threading.RLock()  # a push reads the tail, then writes after it: two at once would share slots
        self._iterating = False  # a chunks iteration is handing out items (one at a time)
        self._emptied = 0  # how many times reset, drain or a chunks iteration emptied the queue: an iteration's items
        # are gone, and not to be dropped again, once it moved
        if not cuda.is_available():
            raise BackendUnavailableError("WorkQueue lives on a CUDA GPU and none is usable here. Fix: run on a "
                                          "machine with a GPU (or under NUMBA_ENABLE_CUDASIM=1), or use QueueModel, "
                                          "its NumPy twin, on the CPU.")
        self._stream = stream if stream is not None else cuda.default_stream()
        self._bound = 0 if stream is None else stream  # what its arrays name as their stream to other libraries:
        # none for the default (numba-cuda's int() of it warns and gives 0, which the array interface disallows)
        try:
            self._dev_items = cuda.device_array(self.capacity, self.dtype, stream=self._bound)
        except MemoryError:  # the CUDA simulator keeps device arrays in host memory
            self._no_room()
        except Exception as e:  # the driver's out-of-memory, as numba raises it
            if not device_out_of_memory(e):
                raise
            self._no_room()
        self._dev_state = cuda.to_device(np.zeros(2, np.uint64), stream=self._bound)

    def _no_room(self) -> None:
        raise device_memory_error(f"WorkQueue({self.capacity}, {self.dtype})",
                                  f"no room for its {self.capacity * self.dtype.itemsize} bytes",
                                  "make a smaller queue and drain it more often", named=True) from None

    def __repr__(self) -> str:
        state = "closed" if self._dev_items is None else "open"
        return f"<WorkQueue: room for {self.capacity} {self.dtype} items, {state}>"  # no read of the device's count

    def close(self) -> None:
        """Release the device arrays (once; later calls do nothing)."""
        with self._lock:
            self._dev_items = self._dev_state = None

    @property
    def items(self):
        """The device array of the items (for the device helpers in `workqueue.device`); a
        DispatchError once the queue is closed (a kernel given None would fail inside Numba)."""
        return self._live()[0]

    @property
    def state(self):
        """The device array of the tail and head words (for the device helpers); as `items`."""
        return self._live()[1]

    @property
    def closed(self) -> bool:
        """Whether `close()` has released the device arrays (then every use is refused)."""
        return self._dev_items is None

    def _slots(self):
        return self._live()[0]

    def _live(self) -> tuple:
        """(items, state) of an open queue, taken once: a close from another thread mid-call then
        leaves this call its arrays, never half of them."""
        items, state = self._dev_items, self._dev_state
        if items is None or state is None:
            raise DispatchError("this WorkQueue was closed. Fix: make a new one.")
        return items, state

    def _words(self) -> tuple[int, int]:
        """(tail, head) as the device has them (one synchronisation)."""
        _, state = self._live()
        words = state.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return int(words[0]), int(words[1])

    def _tail(self) -> int:
        return self._words()[0]

    def size(self) -> int:
        """Filled items (one synchronisation)."""
        return min(self._tail(), self.capacity)

    def overflowed(self) -> int:
        """Pushes refused, the queue being full, since it was last emptied (`drain`, `chunks` or
        `reset`; one synchronisation)."""
        return max(0, self._tail() - self.capacity)

    def reset(self) -> None:
        """Empty the queue (enqueued on its stream)."""
        with self._lock:
            _, state = self._live()
            with uninterrupted():  # emptied, and said so to an iteration in flight, or neither
                self._empty(state)

    def _empty(self, state) -> None:
        state.copy_to_device(np.zeros(2, np.uint64), stream=self.stream)
        self._emptied += 1

    def push(self, values: ArrayIn) -> None:
        """Append host values after the filled items; CapacityError (naming the room needed, the
        queue unchanged) where they do not fit. Values convert to the queue's dtype only where
        nothing is lost (floats round to the nearest float of a float queue); else DispatchError."""
        values = _values(values, self.dtype)
        with self._lock:
            items, state = self._live()
            tail, head = self._words()
            tail = min(tail, self.capacity)
            if not values.size:  # nothing to store; the tail, and so the overflow count, stays as it is
                return
            if tail + values.size > self.capacity:
                raise CapacityError(f"{values.size} items do not fit after {tail} of {self.capacity}. Fix: drain the "
                                    f"queue first, or make one with capacity >= {tail + values.size}.",
                                    needed=tail + values.size)
            items[tail:tail + values.size].copy_to_device(values, stream=self.stream)
            # the head stays: claimed items are not handed out again (take never moves it past the filled ones)
            state.copy_to_device(np.array([tail + values.size, head], np.uint64), stream=self.stream)

    def drain(self) -> ArrayOut:
        """The filled items as a new device array (exactly their number), and the queue emptied."""
        with self._lock:
            items, state = self._live()
            words = self._words()
            n = min(words[0], self.capacity)
            if _SIM and self.dtype.fields is not None:  # the simulator's device copy loses a record's fields
                out = self._cuda.to_device(items[:n].copy_to_host())
            else:
                out = self._cuda.device_array(n, self.dtype, stream=self._bound)
                if n:
                    out.copy_to_device(items[:n], stream=self.stream)
            emptied = self._emptied

            def undo():  # a Ctrl-C came: the items stay queued, since the caller never gets them
                state.copy_to_device(np.array(words, np.uint64), stream=self.stream)
                self._emptied = emptied
            with uninterrupted(undo):
                self._empty(state)
                return out

    def _drop_first(self, n: int, emptied: int) -> None:
        """Empty the queue of its first n items, moving any after them to the front; nothing where it
        was emptied since `emptied` was read (those n went then, and what it holds now came after)."""
        with self._lock:
            items, state = self._live()
            if n == 0:
                return
            self._check_not_emptied(emptied)  # its items went with a drain or reset as well: say so
            rest = self.size() - n
            kept = None
            if rest > 0 and _SIM and self.dtype.fields is not None:  # as drain's: through the host
                kept = items[n:n + rest].copy_to_host()
            elif rest > 0:
                kept = self._cuda.device_array(rest, self.dtype, stream=self.stream)
                kept.copy_to_device(items[n:n + rest], stream=self.stream)
            words = np.array([max(rest, 0), 0], np.uint64)
            with uninterrupted():  # the items moved under the old tail would be queued twice
                if kept is not None:
                    items[:rest].copy_to_device(kept, stream=self.stream)
                state.copy_to_device(words, stream=self.stream)
                self._emptied += 1  # the items moved: another iteration's views no longer hold its items

    def consume(self, step: Callable, args: tuple | list = (), *, block: int = 256) -> None:
        """Run `step(value, args)` (a Numba device function; `args` a tuple, or a list given to it
        as a tuple, of device arrays and numbers) for every filled item, in a persistent grid-stride kernel that reads the count on
        the device; enqueued on the queue's stream, nothing read back. The items stay queued
        (`drain()` or `reset()` empties the queue)."""
        from ..gpu.numba_launch import launch_quietly

        items, state = self._live()
        if not callable(step):
            raise DispatchError(f"step is {a_type(step)}, not a function. Fix: pass a function "
                                "step(value, args) that Numba compiles.")
        if yields(step):
            raise DispatchError(f"step {getattr(getattr(step, 'py_func', step), '__name__', '')} is an async or "
                                "generator function, which Numba would compile as if it were plain (its yield "
                                "would run nothing). Fix: pass a plain def step(value, args) that writes its "
                                "results into args.")
        if isinstance(args, list):  # as fixpoint.run takes its args; the step gets a tuple either way
            args = tuple(args)
        if not isinstance(args, tuple):
            raise DispatchError(f"args is {a_type(args)}, not a tuple. Fix: pass the step's extra "
                                "arguments as a tuple or a list, e.g. (labels,).")
        if isinstance(block, (bool, np.bool_)) or not isinstance(block, INTEGERS) or not 1 <= block <= 1024:
            raise DispatchError(f"block={shown(block, 60)} is not a block size. Fix: pass threads a block, an int "
                                "from 1 to 1024 (256 is a good default).")
        from . import device

        sms = getattr(self._cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)  # the simulator has none
        grid = max(1, min(sms * 8, -(-self.capacity // block)))
        try:
            with self._lock:  # a host push reads the state and writes it back: not across this kernel
                launch_quietly(device.consumer(step), grid, block, self.stream, items, state, self.capacity, args)
        except DispatchError:
            raise
        except Exception as e:  # Numba's errors say the step does not compile; others it raised running
            from numba.core.errors import NumbaError  # (under the CUDA simulator, which runs it as Python)

            raise_if_out_of_memory(e, "consuming the queue")
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if not isinstance(e, NumbaError):
                raise DispatchError(f"the step raised {type(e).__name__} while it ran ({first}); the queue's items "
                                    "stay queued, and the step's writes to args for the items it had run on stay. "
                                    "Fix: correct the step (indices within its arrays), then consume again.") from e
            raise DispatchError(f"the step does not compile with Numba ({numba_reason(e)}). Fix: write step(value, "
                                "args) in Numba's CUDA subset.") from None  # Numba's frames say nothing more

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
