"""Stream compaction in three launches: count the kept items of each tile, scan the tile counts
(a block a chunk of 1024; the last block to finish, told by a ticket, scans the chunk totals), then
each tile ranks its items by warp votes and writes the kept ones at their places, in the original
order. The flags are read twice, the values once; nothing waits on another block, so nothing
spins and nothing can hang.

Or in one launch (`Selector.fused`), where the output has room for every item: a grid of no
more blocks than fit on the GPU at once, each counting a run of whole tiles, waits at a grid
barrier, adds up the runs before its own and writes its tiles from there. The barrier's wait is
bounded: should a block wait too long (another stream's kernels holding the multiprocessors so
that not every block got a place), it gives up and writes nothing, the call selects again in
three launches, and the selector takes three launches for FUSED_BACKOFF seconds.

Selections of Numba arrays are bound by the host up to tens of MB, and the count's wait leaves
the GPU idle at any size: `fused_at`, `enqueue_at` and `offsets_at` take items by device address
and launch the selector's last launches again with only the changed parameters rewritten
(`Relaunch`), so a call costs the host its launches and one watch of mapped memory.

A select with an exact output needs the kept count on the host before the output exists, so the
count pass is paid anyway; given it, the tile offsets come from a scan instead of the decoupled
look-back of a single pass (Merrill and Garland; CUB's DeviceSelect), whose waits measured 2.9 ms
against 0.2 for the count at 2^28 items on an H100 when written in Numba here (bench/RESULTS.md).

`Selector` owns the tile counts and offsets of one stream and the kept count in mapped host
memory; the kernels are in `kernels.py` (imported when a GPU or the CUDA simulator runs them).
`select_numpy` and friends are the NumPy twins: the CPU implementation and the oracle."""
from __future__ import annotations

import contextlib
import dis
import functools
import math
import threading
import time
import types
from typing import Any, Callable

import numpy as np

from ..errors import (INTEGERS, BackendUnavailableError, DispatchError, VyreError, clip, del_unless_read_only,
                      set_unless_read_only, shown)
from ..gpu import mapped
from ..gpu.numba_launch import NumbaLaunch, RawArray, _describe, overload_kind, stream_handle
from ..lru import LRUCache
from ..owned import Unshared
from ..simulator import SIMULATED as _SIM


THREADS, ITEMS = 256, 16
TILE = THREADS * ITEMS
MAX_ITEMS = TILE * 1024 * 1024  # tile counts scanned in two levels of 1024
POLL_SECONDS = 200e-6  # how long `count` watches for the count before it waits on the stream
FUSED_BLOCKS = None  # at most this many blocks in a one-launch selection (None: all that fit at once)
FUSED_BACKOFF = 10.0  # seconds a selector takes three launches after a one-launch selection gave up
LAUNCHES_KEPT = 256  # kernels a selector keeps a launcher of (every new predicate brings a few)
COOPERATIVE = False  # launch one-launch selections cooperatively (the driver then guarantees every block a
# place at once, but the launch call costs the host ~20 us more than a plain one on an H100 machine)


# ---- the NumPy twins ---------------------------------------------------------------------------

def _kept(flags) -> np.ndarray:
    f = np.asarray(flags)
    return f if f.dtype == np.bool_ else f != 0  # bool flags as they are: no mask of their size again


def select_numpy(values: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """values[i] for every i with flags[i] != 0, in order."""
    return values[_kept(flags)]


def nonzero_numpy(flags: np.ndarray) -> np.ndarray:
    """The indices (int64) of the non-zero flags, in order."""
    return np.flatnonzero(_kept(flags)).astype(np.int64, copy=False)


def select_if_numpy(values: np.ndarray, predicate: Callable, key: Any = None) -> np.ndarray:
    """values[i] for every i where predicate(values[i]) holds, in order (the predicate compiled by
    numba.njit with NumPy's error model, as the GPU compiles it for the device: an integer
    divided by zero is 0, a float inf or nan; it reads the values in native byte order). `key`:
    the predicate's `predicate_key` where the caller has it."""
    native = values if values.dtype.isnative else values.astype(values.dtype.newbyteorder("="))
    return values[cpu_masks(predicate, key)[0](native)]


FROZEN_BYTES = 1 << 14  # the largest array a predicate or step may read from outside itself (see _typed)
PREDICATES_KEPT = 64  # compiled predicates kept (each cache below): a loop making a new lambda a call frees the old
_CPU_MASKS: LRUCache = LRUCache(PREDICATES_KEPT)


def predicate_key(predicate: Callable, helpers: bool = False, _keys: dict | None = None):
    """What a compiled predicate is kept by: its code and the values it reads (closure cells,
    defaults, the globals and module attributes it names, each with its type, a tuple's items'
    too; with `helpers`, an `@njit` helper it calls by what that helper reads, for callers that
    compile the helpers afresh, `checked_helpers`), where all of them hash, so that a lambda
    written anew each call (in a loop, a notebook cell run again) compiles once and a changed
    threshold compiles afresh; else the function itself, whose globals Numba fixes at its first
    compilation."""
    code = getattr(predicate, "__code__", None)
    if code is None:
        return predicate
    try:
        scope, names, defaults = predicate.__globals__, _names(code), predicate.__defaults__ or ()
        named = list(zip(code.co_freevars, [c.cell_contents for c in predicate.__closure__ or ()]))
        named += list(zip(code.co_varnames[code.co_argcount - len(defaults):code.co_argcount], defaults))
        named += [(name, scope[name]) for name in _global_names(code) if name in scope]
        modules = [v for _, v in named if isinstance(v, types.ModuleType)]
        for m in modules:  # cfg.limit: Numba fixes a module's attributes at compilation too
            named += [(name, vars(m)[name]) for name in names if name in vars(m)]
            if "__getattr__" in vars(m):  # a module's own lookup (PEP 562) answers the rest, as it answers Numba
                named += [(name, v) for name in names if name not in vars(m)
                          for v in [_module_attribute(m, name)] if v is not _ABSENT]
            modules += [v for _, v in named if isinstance(v, types.ModuleType) and v not in modules]
        _check_frozen(predicate, named)
        keywords = sorted((name, _typed(v)) for name, v in (predicate.__kwdefaults__ or {}).items())
        if not helpers:
            typed = _typed
        else:
            keys = {} if _keys is None else _keys  # each helper keyed once a call; one calling back, by itself
            keys.setdefault(predicate, predicate)

            def typed(v):
                if isinstance(v, tuple):
                    return type(v), tuple(map(typed, v))
                if isinstance(v, types.ModuleType):  # by name: checked_helpers' copy of it keys alike (the
                    return types.ModuleType, v.__name__  # attributes read are keyed on their own in `named`)
                helper = helper_of(v)
                if helper is None:
                    return _typed(v)
                if helper not in keys:
                    keys[helper] = predicate_key(helper, True, keys)  # (refusing what it reads, as its caller's)
                return type(v), keys[helper]
        # by name too: one code run in two namespaces may read the same value as different names
        key = (code, tuple((name, typed(v)) for name, v in named), tuple(keywords))
        hash(key)
    except VyreError:  # `_check_frozen`'s refusal
        raise
    except Exception:  # an array, a list, an empty cell, a tuple nested past the interpreter's depth, a value
        return predicate  # whose own __hash__ raises: the function itself
    return key


_ABSENT = object()


def _module_attribute(m: types.ModuleType, name: str):
    """What `m.name` gives through the module's __getattr__, or _ABSENT where it raises."""
    try:
        return getattr(m, name)
    except Exception:  # AttributeError for a name the module lacks; whatever its own lookup raises
        return _ABSENT


def snapshot(fn: Callable) -> Callable:
    """A copy of the plain function `fn` that reads a snapshot of its globals and closure cells;
    anything else (a Numba dispatcher, a builtin) as it is. Numba reads a function's globals when
    it compiles it: compiling the copy compiles the values `predicate_key(copy)` names, though
    another thread changes a global meanwhile."""
    if not isinstance(fn, types.FunctionType):
        return fn
    try:
        cells = tuple(types.CellType(_held(c.cell_contents)) for c in fn.__closure__ or ())
    except ValueError:  # an empty cell: nothing to read yet
        return fn
    # only the names the code reads: a copy of a notebook's whole namespace would keep its deleted arrays alive
    scope = fn.__globals__
    read = {name: _held(scope[name]) for name in _names(fn.__code__) if name in scope}
    read.update({k: scope[k] for k in ("__builtins__", "__name__") if k in scope})
    defaults = tuple(map(_held, fn.__defaults__)) if fn.__defaults__ else None
    copy = types.FunctionType(fn.__code__, read, fn.__name__, defaults, cells or None)
    copy.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return copy


def helper_of(v) -> types.FunctionType | None:
    """The Python function of `v` where `v` is a helper Numba compiles on its own for the host (an
    `@njit` function, `inline="always"` ones too), else None (numba-cuda's device functions, plain
    functions, whatever Numba types by other means)."""
    if type(v) is not _cpu_dispatcher():
        return None
    py = getattr(v, "py_func", None)
    return py if isinstance(py, types.FunctionType) else None


@functools.lru_cache(maxsize=1)
def _cpu_dispatcher() -> type:
    from numba.core.registry import CPUDispatcher

    return CPUDispatcher


def checked_helpers(fn: Callable, jit: Callable[[Callable, Any], Callable], _done: dict | None = None,
                    _within: tuple = ()) -> Callable:
    """A snapshot of `fn` whose helpers (`helper_of` each value it names: globals, module
    attributes, closure cells, defaults, tuples' items) are `jit(the helper's own checked_helpers,
    helper)`, each once however many paths reach it: so that a step compiled with bounds checks
    calls helpers compiled with them too (Numba compiles each function with its own options). A
    DispatchError where helpers call each other round (recursion, which a long chain runs off the
    host's stack with, killing the process)."""
    done = {} if _done is None else _done
    copy = snapshot(fn)
    if copy is fn:  # a dispatcher or a builtin, or an empty cell: nothing of its own to rewrite
        return fn
    within = (*_within, fn)

    modules: dict = {}  # each module read once: a copy holding the checked helpers, or itself

    def checked(v):
        if isinstance(v, tuple):
            return _rebuilt(v, tuple(map(checked, v)))
        if isinstance(v, types.ModuleType):  # mod.helper, pkg.sub.helper: a copy holding the checked helpers
            if v not in modules:
                modules[v] = v  # (a submodule naming its package back finds it here)
                found = {}
                for n in _names(fn.__code__):
                    x = vars(v).get(n)
                    if helper_of(x) or isinstance(x, types.ModuleType):
                        y = checked(x)
                        if y is not x:
                            found[n] = y
                if found:
                    module = types.ModuleType(v.__name__)
                    module.__dict__.update(vars(v))
                    module.__dict__.update(found)
                    modules[v] = module
            return modules[v]
        helper = helper_of(v)
        if helper is None:
            return v
        if helper in within:
            names = " -> ".join(getattr(f, "__name__", "?") for f in (*within[within.index(helper):], helper))
            raise DispatchError(f"the helper {helper.__name__!r} is recursive (it calls {names}): compiled for the "
                                "host, a deep recursion (a long chain of parents) runs off the thread's stack and "
                                "kills the process. Fix: write it as a loop (e.g. `while parent[x] != x: x = "
                                "parent[x]`).")
        if helper not in done:
            done[helper] = jit(checked_helpers(helper, jit, done, within), v)
        return done[helper]
    scope = copy.__globals__
    for name in _global_names(fn.__code__):
        if name in scope:
            scope[name] = checked(scope[name])
    for cell in copy.__closure__ or ():
        cell.cell_contents = checked(cell.cell_contents)
    if copy.__defaults__:
        copy.__defaults__ = checked(copy.__defaults__)
    return copy


def _held(v):
    """v as a snapshot holds it: an array Numba compiles in, copied (another thread may write the
    caller's while the copy compiles), within a tuple too; anything else as it is."""
    if isinstance(v, tuple):
        return _rebuilt(v, tuple(map(_held, v)))
    return v.copy() if _frozen(v) and v.nbytes <= FROZEN_BYTES else v


def _rebuilt(v: tuple, items: tuple) -> tuple:
    """The tuple `v` of its type holding `items` instead, or `v` itself where they are its own or
    its type cannot be made from them."""
    if all(a is b for a, b in zip(items, v)):
        return v
    try:
        made = type(v)(*items) if hasattr(v, "_fields") else type(v)(items)  # a namedtuple takes its fields
    except Exception:  # a tuple type made otherwise: the caller's (a plain tuple would key apart from it)
        return v
    return made if type(made) is type(v) else v


def kept_compiled(cache: LRUCache, fn: Callable, build: Callable[[Callable], Any], key=None,
                  helpers: Callable[[Callable, Any], Callable] | None = None) -> Any:
    """`cache`'s value for `fn` by `predicate_key` (`key` where the caller has it), else
    `build(snapshot(fn))` kept by the snapshot's key: what is compiled and what it is kept by name
    the same values. `helpers`: how to compile the `@njit` helpers `fn` calls afresh
    (`checked_helpers`), which then key it too."""
    key = predicate_key(fn, helpers is not None) if key is None else key
    found = cache.get(key)
    if found is not None:
        return found
    target = to_compile(fn) if helpers is None else checked_helpers(fn, helpers)
    target_key = predicate_key(target, helpers is not None)
    return cache.put(key if target_key is target else target_key, build(target))


def to_compile(fn: Callable) -> Callable:
    """What to compile for `fn`: its snapshot, or `fn` itself where `predicate_key` keeps it by
    itself (what it reads does not hash; Numba fixes its globals at its first compilation)."""
    return fn if predicate_key(fn) is fn else snapshot(fn)


def _typed(v):
    """v with its type, and its items' within a tuple, and a float by its bits: equal values Numba
    compiles differently (1 and 1.0, float32 and float64, 0.0 and -0.0) differ here, and a NaN,
    unequal to itself, still finds its compiled predicate. A NumPy array (at most FROZEN_BYTES) by
    its type, dtype, shape and bytes: Numba compiles its contents in as constants, so a changed or
    rebound array compiles afresh."""
    if isinstance(v, tuple):
        return type(v), tuple(map(_typed, v))
    if _frozen(v):
        return type(v), v.dtype, v.shape, v.tobytes()  # the bytes themselves: hashed faster than any digest
    return (type(v), np.asarray(v).tobytes()) if isinstance(v, (float, complex, np.inexact)) else (type(v), v)


def _check_frozen(fn: Callable, named: list) -> None:
    """Refuse a function that reads a NumPy array of more than FROZEN_BYTES from its globals,
    closure or defaults: Numba compiles such an array's contents in as constants (a changed array
    would need compiling again, and a large one bloats the compiled code)."""
    todo = list(named)
    while todo:
        name, v = todo.pop()
        if isinstance(v, tuple):  # its arrays are compiled in too
            todo += [(f"{name}[{i}]", x) for i, x in enumerate(v)]
        elif _frozen(v) and v.nbytes > FROZEN_BYTES:
            raise DispatchError(f"{getattr(fn, '__name__', 'the function')} reads the array {name!r} ({v.dtype}, "
                                f"{v.nbytes} bytes) from outside itself, which Numba compiles in as constants: "
                                f"arrays of at most {FROZEN_BYTES} bytes compile afresh when they change, larger ones "
                                "are refused. Fix: pass the array as an argument (fixpoint.run's and "
                                "WorkQueue.consume's args; for select_if, compute the flags and call select(values, "
                                "flags)).")


def _frozen(v) -> bool:
    """Whether `v` is an array Numba would compile in as constants (not a masked array or a matrix,
    which it refuses, nor one of objects)."""
    return isinstance(v, np.ndarray) and not isinstance(v, (np.ma.MaskedArray, np.matrix)) and not v.dtype.hasobject


@functools.lru_cache(maxsize=256)
def _global_names(code) -> tuple[str, ...]:
    """The names `code` and the functions defined in it read as globals (not the attributes they
    read: `a.size` names no global `size`)."""
    own = tuple(i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
    return own + tuple(n for c in code.co_consts if hasattr(c, "co_names") for n in _global_names(c))


@functools.lru_cache(maxsize=256)
def _names(code) -> tuple[str, ...]:
    """The global names `code` and the functions defined in it may read."""
    return code.co_names + tuple(n for c in code.co_consts if hasattr(c, "co_names") for n in _names(c))


def cpu_masks(predicate: Callable, key=None) -> tuple[Callable, Callable]:
    """(the mask of predicate over an array, predicate itself) compiled for the host: the one
    dispatcher the mask calls also tells the result type. error_model="numpy": division by zero
    gives NumPy's result, as it does on the device (numba-cuda compiles with that model), not an
    error. `key`: the predicate's `predicate_key` where the caller has it."""
    return kept_compiled(_CPU_MASKS, predicate, _mask_of, key)


def _mask_of(predicate: Callable) -> tuple[Callable, Callable]:
    """The compiled mask of predicate over an array, and the compiled predicate."""
    from numba import njit

    pred = njit(predicate, error_model="numpy")

    @njit(error_model="numpy")
    def mask(values):
        out = np.empty(values.size, np.bool_)
        for i in range(values.size):
            out[i] = bool(pred(values[i]))
        return out
    return mask, pred


# ---- the host object ---------------------------------------------------------------------------

def word_type(dt: np.dtype) -> tuple[np.dtype, int]:
    """(unsigned word type, words an item) of items of `dt`: the widest word dividing its size."""
    g = math.gcd(np.dtype(dt).itemsize, 8)
    return np.dtype(f"<u{g}"), np.dtype(dt).itemsize // g


def word_view(a, n: int):
    """The 1-D device array `a` of n items (any 8- to 64-bit type or record) as unsigned words
    (see `word_type`): 1-D where an item is one word (so the kernels' addresses need no stride),
    else an (n, w) array. Refuses (DispatchError) what is not n contiguous items of such a type."""
    dt, shape = getattr(a, "dtype", None), getattr(a, "shape", None)
    fix = "Fix: pass a 1-D contiguous device array (cuda.to_device(np.ascontiguousarray(x))) and its length."
    if not isinstance(dt, np.dtype) or not isinstance(shape, tuple):
        raise DispatchError(f"word_view takes a device array, not {shown(a, 60)}. {fix}")
    if len(shape) != 1 or shape[0] > 1 and a.strides[0] != dt.itemsize:
        raise DispatchError(f"word_view takes a 1-D contiguous array, not one of shape {shape} and strides "
                            f"{a.strides}. {fix}")
    if dt.hasobject or dt.itemsize == 0:
        raise DispatchError(f"word_view takes items of plain bits (numbers, records of them), not {dt}. {fix}")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, INTEGERS) or not 0 <= n <= shape[0]:
        raise DispatchError(f"word_view(n={shown(n, 40)}) of an array of {shape[0]} items: n is how many of them, "
                            f"from 0 to {shape[0]}. {fix}")
    word, w = word_type(dt)
    a = a[:int(n)] if n != shape[0] else a
    return a.view(word) if w == 1 else a.view(word).reshape(int(n), w)


_UNLOCKED = contextlib.nullcontext()
_ZERO = np.zeros(1, np.int64)


def _one_call_at_a_time(method: Callable) -> Callable:
    """`method` with its Selector's lock held: a close() from another thread waits for the call to
    end (which then has every buffer it began with), and the calls after it are refused. None
    for a selector only its own thread calls (`for_this_thread`): 0.2 us a call saved."""
    @functools.wraps(method)
    def held(self, *args, **kwargs):
        lock = self._lock
        if lock is None:
            return method(self, *args, **kwargs)
        with lock:
            return method(self, *args, **kwargs)
    return held


class _Tally:
    """A Selector's two counters that every selection moves, held apart so that moving them is a
    slot's store and not a pass through `Selector.__setattr__`."""

    __slots__ = ("selections", "arrived")

    def __init__(self) -> None:
        self.selections = 0  # selections begun: a scatter made ready for one refuses to run after the next
        self.arrived = 0  # the grid barrier's arrival count after every one-launch selection so far


class Selector(Unshared):
    """The tile counts and offsets of compactions on one stream, and the kept count in mapped host
    memory; reused across calls, released by `close()` (or `with`). One call at a time: a call from
    another thread waits for the one running (a selection of several calls, such as `offsets` then
    a scatter, is the caller's to keep together)."""

    def __init__(self, stream=None):
        from numba import cuda

        from ..gpu.numba_launch import check_stream

        self._lock = threading.RLock()  # first: close() takes it, even on a half-made Selector
        self._closed = False
        check_stream(stream)  # before anything is allocated on it
        check_gpu()
        self._cuda = cuda
        self._stream = stream if stream is not None else cuda.default_stream()
        self._host = cuda.mapped_array(1, np.int64)
        self._host[0] = -1  # no count yet: total() says so
        self._tally = _Tally()
        self._ctl = cuda.to_device(np.zeros(4, np.int64), stream=self.stream)  # [-, -, kept count, scan ticket]
        self._tiles = 0
        self._launches: dict = {}  # kernel -> NumbaLaunch on this stream
        self._plans: dict = {}  # what `fused_at`/`enqueue_at` launch for their arguments' kinds (see `_plan`)
        self._relaunches: dict = {}  # (kernel, use, source type) -> its last launch, for `enqueue_at` (and with
        # its resident blocks, for `fused_at`)
        self._grow(1024)
        self._bar = cuda.to_device(np.zeros(4, np.int64), stream=self.stream)  # see kernels.grid_wait
        self._sums = None  # a one-launch selection's kept items a block
        self._resident: dict = {}  # (one-launch kernel, source type) -> blocks that fit at once
        self._fused_args = None  # (sums, barrier, host count, control words) as kernel arguments
        self._timeouts = 0  # one-launch selections given up at the grid barrier (and done again in three)
        self._fused_off_until = 0.0  # time.monotonic() before which `fused` declines (after a give-up)
        self._handle = 0 if _SIM else stream_handle(self.stream)

    @property
    def stream(self):
        """The stream every call runs on (fixed: the buffers and launches were made on it)."""
        return self._stream

    @property
    def timeouts(self) -> int:
        """How many one-launch selections gave up at their grid barrier (and were done again in three)."""
        return self._timeouts

    @property
    def closed(self) -> bool:
        """Whether `close()` has released the device buffers (then every call is refused)."""
        return self._closed

    def __setattr__(self, name: str, value) -> None:
        if name[:1] == "_":  # its own (the calls set them): a plain set, about 0.2 us
            object.__setattr__(self, name, value)
        else:  # a read-only property (stream) or a misspelt one refused with a fix
            set_unless_read_only(self, name, value, 2)

    def __delattr__(self, name: str) -> None:
        del_unless_read_only(self, name)

    _read_only_fix = ("make another Selector(stream) to run on another stream (timeouts and closed say what this one "
                      "did)")

    @classmethod
    def for_this_thread(cls, stream=None) -> "Selector":
        """A Selector that only the calling thread will ever call (compaction keeps one a thread
        and stream): its calls take no lock."""
        s = cls(stream)
        s._lock = None
        return s

    def _holding(self):
        """What a closure a call returned holds while it runs: the lock, or nothing for a selector
        only its own thread calls."""
        return self._lock or _UNLOCKED

    def _grow(self, tiles: int) -> None:
        from .kernels import SCAN_THREADS

        cuda, stream = self._cuda, self.stream
        self._tiles = max(tiles, 2 * self._tiles)
        chunks = -(-self._tiles // SCAN_THREADS)
        owned = (cuda.to_device(np.zeros(self._tiles, np.int64), stream=stream),  # tile counts, zero between calls
                 cuda.device_array(self._tiles, np.int64, stream=stream),  # offsets within a chunk of tiles
                 cuda.device_array(chunks, np.int64, stream=stream),  # chunk totals
                 cuda.device_array(chunks, np.int64, stream=stream),  # chunk offsets
                 self._ctl, self._host)
        self._owned = owned
        self._relaunches = {}
        self._args = owned if _SIM else tuple(RawArray(a.device_ctypes_pointer.value, a.shape, a.dtype) for a in owned)

    def __repr__(self) -> str:
        return f"<Selector on {self.stream!r}, {'closed' if self._closed else f'{self._tiles} tiles'}>"

    def __enter__(self) -> "Selector":
        self._check_open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @_one_call_at_a_time
    def close(self) -> None:
        """Release the device buffers (once; later calls do nothing), after any call running."""
        self._owned = self._ctl = self._host = self._args = self._bar = self._sums = None
        self._launches, self._relaunches, self._plans = {}, {}, {}
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise DispatchError("this Selector was closed. Fix: make a new one.")

    def _begin(self) -> None:
        """A new selection: no count until it lands, and scatters made ready for the last one void."""
        self._host[0] = -1
        self._tally.selections += 1

    def _none_kept(self) -> None:
        """A new selection of no items: its count, 0, on the host and the device (which copy_kept
        reads), with no launch; after the launches before it, whose scan would write its count
        over the 0."""
        self._begin()
        self._ctl[2:3].copy_to_device(_ZERO, stream=self.stream)
        self.stream.synchronize()
        self._host[0] = 0

    def _check_ready(self, made: int) -> None:
        """A scatter made ready at selection `made` may still run: the Selector is open and no
        selection has since rewritten (or, growing, freed) the offsets it reads."""
        self._check_open()
        if self._tally.selections != made:
            raise DispatchError("this scatter was made ready for a selection that a later one on the same Selector "
                                "has replaced: it would read that selection's offsets (or buffers freed when it "
                                "grew). Fix: enqueue a scatter before the next selection on its Selector, or make "
                                "it ready again after that selection.")

    @_one_call_at_a_time
    def offsets(self, flag_of: Callable, src, n: int, octs=None) -> None:
        """Enqueue the tile counts and their scan for items 0..n-1 kept where `flag_of(src, i)`; the
        kept count lands in mapped host memory (`total()`) and on the device. `octs`: one-byte
        flags `src` (with flag_nonzero) seen as n // 8 u64 words, counted eight at a time."""
        self._check_open()
        _check_call("offsets", flag_of, src, n)
        if octs is not None and type(octs) is not RawArray:  # a RawArray is compaction's own, made at src
            _check_octs(src, n, octs)
        if n == 0:
            self._none_kept()
            return
        kernels = _kernels()
        tiles = -(-n // TILE)
        if tiles > self._tiles:
            self._grow(tiles)
        counts, offsets, sums, bases, ctl, host = self._args
        self._begin()
        try:
            if octs is not None:
                self._launch(kernels.count_bytes)(-(-tiles // kernels.GROUP), THREADS, src, octs, n, counts)
            else:
                self._launch(kernels.count_kernel(flag_of))(tiles, THREADS, src, n, counts)
            self._launch(kernels.scan_chunks)(-(-tiles // kernels.SCAN_THREADS), kernels.SCAN_THREADS, counts, tiles,
                                              offsets, sums, bases, ctl, host)
        except BaseException as e:
            self._afresh(tiles)
            _unrunnable(e, flag_of, src)
            raise

    def _afresh(self, tiles: int) -> None:
        """Fresh zeroed tile counts and scan ticket, after launches that may have added counts but
        not scanned them (which clears them)."""
        self._ctl = self._cuda.to_device(np.zeros(4, np.int64), stream=self.stream)
        self._fused_args = None  # they name the old control words, which a one-launch selection writes
        self._tiles = 0
        self._grow(tiles)

    @_one_call_at_a_time
    def scatter(self, flag_of: Callable, src, n: int, words, out, capacity: int) -> None:
        """Enqueue writing the kept items (`words` None: their indices) into `out`, at most
        `capacity` rows, after `offsets` of the same items."""
        self._check_open()
        _check_call("scatter", flag_of, src, n, words, out, capacity)
        try:
            kernel = _kernels().scatter_kernel(flag_of, *_emit(words))
            self._launch(kernel)(-(-n // TILE), THREADS, src, n, out if words is None else words, out,
                                 self._args[1], self._args[3], capacity)
        except Exception as e:
            _unrunnable(e, flag_of, src)
            raise

    @_one_call_at_a_time
    def scatter_later(self, flag_of: Callable, src, n: int, words, word) -> Callable[[int, int], None] | None:
        """`scatter` of items 0..n-1 (after `offsets` of them) made ready now and enqueued by the
        returned `put(address, capacity)` into `capacity` items of `word` (one word an item, or
        the indices where `words` is None) at device `address`: so that once a count read on the
        host sizes the output, rewriting two parameters and one launch are all that stand between
        them. The launch is kept and rewritten call to call (`Relaunch`), as `enqueue_at`'s are.
        None under the CUDA simulator and for inputs that are not 1-D contiguous arrays of one
        word an item (then `scatter` it is)."""
        self._check_open()
        if _SIM:
            return None
        _check_call("scatter", flag_of, src, n, words)
        kernel = _kernels().scatter_kernel(flag_of, *_emit(words))
        (src_kind, src_params), (words_kind, words_params) = _describe(src), _describe(words)
        kinds = (src_kind, None if words is None else words_kind)
        if any(k is not None and (type(k) is not tuple or k[1:] != (1, True)) for k in kinds):
            return None
        key = (kernel, 1, kinds)
        again = self._relaunches.get(key)
        if again is None:
            room = RawArray(0, (n,), word)  # a stand-in of the output's type, rewritten by put
            try:
                again = self._launch(kernel, 1).packed(src, n, room if words is None else words, room,
                                                       self._args[1], self._args[3], n)
            except Exception as e:
                _unrunnable(e, flag_of, src)
                raise
            if again is None:
                return None
            self._relaunches[key] = again
        else:
            _scatter_from(again, src_params[4], n, None if words is None else words_params[4])
        tiles = -(-n // TILE)
        made = self._tally.selections

        def put(address: int, capacity: int) -> None:
            with self._holding():
                self._check_ready(made)
                _scatter_into(again, address, capacity, words is None)
                again(tiles, THREADS)
        return put

    @_one_call_at_a_time
    def fused(self, flag_of: Callable, src, n: int, words, out, octs=None) -> int | None:
        """Select items 0..n-1 (n >= 1) into `out`, which has room for all n (`words` None: their
        indices), in one launch, and return how many were kept; None where a block gave up at the
        grid barrier (the output is then incomplete; `timeouts` counts these). The count is read
        from mapped host memory, where the launch's last block puts it once everything is
        written to device memory: watched for POLL_SECONDS, then waited for on the stream. An
        `out` in mapped host memory is whole once the stream is synchronised (no system-wide
        fence is paid before the count)."""
        self._check_open()
        _check_call("fused", flag_of, src, n, words, out, n)
        if octs is not None and type(octs) is not RawArray:
            _check_octs(src, n, octs)
        if time.monotonic() < self._fused_off_until:
            return None
        kernels = _kernels()
        kernel = kernels.fused_kernel(flag_of, *_emit(words), by_bytes=octs is not None)
        launch = self._launch(kernel, cooperative=COOPERATIVE)
        fit = (kernel, overload_kind(src))
        blocks = self._resident.get(fit)
        if blocks is None or self._fused_args is None:
            if self._sums is None:
                self._sums = self._cuda.device_array(1024, np.int64, stream=self.stream)
            self._fused_args = (self._sums, self._bar, self._host, self._ctl) if _SIM else tuple(
                RawArray(a.device_ctypes_pointer.value, a.shape, a.dtype)
                for a in (self._sums, self._bar, self._host, self._ctl))
            blocks = self._resident[fit] = launch.resident_blocks(
                THREADS, src, src if octs is None else octs, n, out if words is None else words, out,
                self._fused_args[0], self._fused_args[1], 0, *self._fused_args[2:])
        blocks = max(1, min(blocks, -(-n // TILE), FUSED_BLOCKS or blocks))
        if self._sums.shape[0] < blocks:
            self._sums, self._fused_args = self._cuda.device_array(blocks, np.int64, stream=self.stream), None
            self._relaunches = {}
            return self.fused(flag_of, src, n, words, out, octs)
        sums, bar, host, ctl = self._fused_args
        return self._fused_launch(lambda: launch(blocks, THREADS, src, src if octs is None else octs, n,
                                                 out if words is None else words, out, sums, bar,
                                                 self._tally.arrived + blocks, host, ctl), blocks)

    @_one_call_at_a_time
    def fused_at(self, flag_of: Callable, src: int, src_type, n: int, by_bytes: bool, word, words: int | None,
                 out: int, meanwhile: Callable | None = None) -> int | None:
        """`fused` of items of one word (`word`) named by device addresses: `src` the n flags (or
        the values of a predicate) of `src_type`, seen as n // 8 words where `by_bytes`; `words`
        the items (None: write their indices); `out` room for n. The launch is the last one's with
        those parameters rewritten (`Relaunch`), so a call costs the host a launch and a watch, not
        the packing of argument objects: what a small selection's time is made of. `meanwhile()`
        runs once the selection is launched, before its count is known (where the launch is
        packed afresh, after it), so what it enqueues follows the selection on the stream; not
        where nothing was launched, and not always where the launch gave up."""
        self._check_open()
        if time.monotonic() < self._fused_off_until:
            return None
        kinds = ("fused", flag_of, src_type, by_bytes, word, words is None)
        key = self._plans.get(kinds)
        known = None if key is None else self._relaunches.get(key)  # (the launch, the resident blocks `fused` found)
        blocks = max(1, min(known[1] if known else 1, -(-n // TILE), FUSED_BLOCKS or n))
        if known is None or self._sums.shape[0] < blocks:  # the kernel looked up afresh: the one `fused` launches
            kernel = _kernels().fused_kernel(flag_of, *_emit_of(word, words), by_bytes=by_bytes)
            key = (kernel, 0, np.dtype(src_type).str)
            raw = RawArray(src, (n,), src_type)
            kept = self.fused(flag_of, raw, n, _raw(words, n, word), RawArray(out, (n,), word),
                              RawArray(src, (n // 8,), np.uint64) if by_bytes else None)
            if kept is None:
                return None
            again = self._launch(kernel, cooperative=COOPERATIVE).detached()  # before `meanwhile`'s launches,
            if again is not None:  # which may start the launcher table afresh
                self._relaunches[key] = (again, self._resident.get((kernel, overload_kind(raw)), 1))
                self._plan(kinds, key)
            if meanwhile is not None:
                meanwhile()
            return kept
        again = known[0]
        again.array(0, src, n)
        again.array(1, src, n // 8 if by_bytes else n)
        again.scalar(2, n)
        again.array(3, out if words is None else words, n)
        again.array(4, out, n)
        again.scalar(7, self._tally.arrived + blocks)
        return self._fused_launch(lambda: again(blocks, THREADS), blocks, meanwhile)

    @_one_call_at_a_time
    def enqueue_at(self, flag_of: Callable, src: int, src_type, n: int, by_bytes: bool, word, words: int | None,
                   out: int, capacity: int | None = None) -> None:
        """`enqueue` (count, scan and scatter, n >= 1) into `out`, room for `capacity` items (None:
        all n), of items named by device addresses as in `fused_at`, each launch the last one's
        with its parameters rewritten; the kept count is then `watch()`'s or `total()`'s."""
        self.offsets_at(flag_of, src, src_type, n, by_bytes, word, words)(out, n if capacity is None else capacity)

    @_one_call_at_a_time
    def offsets_at(self, flag_of: Callable, src: int, src_type, n: int, by_bytes: bool, word,
                   words: int | None) -> Callable[[int, int], None]:
        """`offsets` (count and scan, n >= 1) of items named by device addresses as in `fused_at`,
        returning `put(out, capacity)`, which enqueues their scatter into room for `capacity` items
        at device address `out` (so a count read on the host can size it first). Each launch is
        the last one's of these argument kinds with its parameters rewritten (`Relaunch`); the
        first call of a kind packs them (`offsets`, then `scatter` in its put)."""
        self._check_open()
        _check_items(n)
        kernels = _kernels()
        tiles = -(-n // TILE)
        kinds = ("three", flag_of, src_type, by_bytes, word, words is None)
        used = self._plans.get(kinds)
        again = [None] if used is None else [self._relaunches.get(key) for key in used]
        if tiles > self._tiles or None in again:  # the kernels looked up afresh: the ones `offsets`/`scatter` launch
            st = np.dtype(src_type).str
            count = kernels.count_bytes if by_bytes else kernels.count_kernel(flag_of)
            scatter = kernels.scatter_kernel(flag_of, *_emit_of(word, words))
            keys = tuple((k, 0, st) for k in (count, kernels.scan_chunks, scatter))
            raw = RawArray(src, (n,), src_type)
            self.offsets(flag_of, raw, n, RawArray(src, (n // 8,), np.uint64) if by_bytes else None)
            made = self._tally.selections

            def first(out: int, capacity: int) -> None:
                with self._holding():
                    self._check_ready(made)
                    self.scatter(flag_of, raw, n, _raw(words, n, word), RawArray(out, (capacity,), word), capacity)
                    for key in keys:
                        self._relaunches[key] = self._launch(key[0], key[1]).detached()
                    self._plan(kinds, keys)
            return first
        counts, scan, put = again
        self._begin()
        try:
            counts.array(0, src, n)
            if by_bytes:
                counts.array(1, src, n // 8)
                counts.scalar(2, n)
                counts(-(-tiles // kernels.GROUP), THREADS)
            else:
                counts.scalar(1, n)
                counts(tiles, THREADS)
            scan.scalar(1, tiles)
            scan(-(-tiles // kernels.SCAN_THREADS), kernels.SCAN_THREADS)
        except BaseException:
            self._afresh(tiles)
            raise
        _scatter_from(put, src, n, words)
        made = self._tally.selections

        def later(out: int, capacity: int) -> None:
            with self._holding():
                self._check_ready(made)
                _scatter_into(put, out, capacity, words is None)
                put(tiles, THREADS)
        return later

    def _fused_launch(self, launch: Callable, blocks: int, meanwhile: Callable | None = None) -> int | None:
        """Run `launch` (a one-launch selection of `blocks`), then `meanwhile()`, and return its kept
        count; None where a block gave up at the grid barrier (then `timeouts` counts it and one
        launch backs off)."""
        self._begin()
        try:
            launch()
            self._tally.arrived += blocks
            if meanwhile is not None:
                meanwhile()
            kept = self.watch()  # -2 (given up) only after the bound and a synchronisation
        except BaseException:
            # Interrupted: the launch may still be writing (the thread's pinned memory, where a readback on
            # another stream would use it next), and how far the barrier's count got is unknown.
            try:
                self.stream.synchronize()
            except Exception:  # a fault of the launch: the interruption is what the caller hears of
                pass
            self._fresh_barrier()
            raise
        if kept >= 0:
            return kept
        self.stream.synchronize()
        self._fresh_barrier()
        self._timeouts += 1
        self._fused_off_until = time.monotonic() + FUSED_BACKOFF
        return None

    def _fresh_barrier(self) -> None:
        """A new, zeroed barrier state (the old one may still be in use by a launch)."""
        self._bar = self._cuda.to_device(np.zeros(4, np.int64), stream=self.stream)
        self._fused_args, self._tally.arrived, self._relaunches = None, 0, {}

    @_one_call_at_a_time
    def enqueue(self, flag_of: Callable, src, n: int, words, out, capacity: int, octs=None) -> None:
        """Enqueue the selection of items 0..n-1 (where `flag_of(src, i)`) into `out`, at most
        `capacity` rows of it (`words` None writes indices); the kept count, which may exceed
        capacity, is `total()`. Nothing waits: callers enqueue more work before reading it."""
        self._check_open()
        _check_call("enqueue", flag_of, src, n, words, out, capacity)  # all of it before the first launch
        if n:
            self.offsets(flag_of, src, n, octs)
            self.scatter(flag_of, src, n, words, out, capacity)
        else:
            self._none_kept()

    @_one_call_at_a_time
    def copy_kept(self, src, dst, src8, dst8, itemsize: int, room: int) -> None:
        """Enqueue copying the last selection's kept bytes (at most `room` items of `itemsize`)
        from `src` to `dst` (seen as u64 words, and as bytes `src8`/`dst8` for the tail)."""
        self._check_open()
        kernels = _kernels()
        blocks = min(max(-(-room * itemsize // (8 * THREADS)), 1), 1024)
        self._launch(kernels.copy_kept)(blocks, THREADS, src, dst, src8, dst8, self._args[4], itemsize, room)

    @_one_call_at_a_time
    def copy_kept_at(self, src: int, dst: int, itemsize: int, room: int) -> None:
        """`copy_kept` of device memory at `src` to `dst`, `room * itemsize` bytes at most, the
        last launch of it relaunched with these parameters rewritten (see `enqueue_at`)."""
        self._check_open()
        kernels = _kernels()
        nbytes = room * itemsize
        again = self._relaunches.get((kernels.copy_kept, 0, ""))
        if again is None:
            self.copy_kept(RawArray(src, (nbytes // 8,), np.uint64), RawArray(dst, (nbytes // 8,), np.uint64),
                           RawArray(src, (nbytes,), np.uint8), RawArray(dst, (nbytes,), np.uint8), itemsize, room)
            self._relaunches[(kernels.copy_kept, 0, "")] = self._launch(kernels.copy_kept).detached()
            return
        for i, (address, count) in enumerate(((src, nbytes // 8), (dst, nbytes // 8), (src, nbytes), (dst, nbytes))):
            again.array(i, address, count)
        again.scalar(5, itemsize)
        again.scalar(6, room)
        again(min(max(-(-nbytes // (8 * THREADS)), 1), 1024), THREADS)

    @_one_call_at_a_time
    def total(self) -> int:
        """The kept count of the last `offsets` or `enqueue`, after waiting for the stream."""
        self._check_open()
        self.stream.synchronize()
        kept = int(self._host[0])
        if kept == -1:
            raise DispatchError("this Selector has no count: no selection was made on it, or the last one failed "
                                "(its error said why). Fix: call run, count or enqueue (again) before total().")
        return kept

    @_one_call_at_a_time
    def count(self, flag_of: Callable, src, n: int, octs=None) -> int:
        """How many of items 0..n-1 are kept; `scatter` may follow. The count is read as soon as
        the scan writes it to mapped memory (a driver synchronisation costs several microseconds
        more), within a bound past which the stream is synchronised (and any error raised)."""
        self._check_open()
        self.offsets(flag_of, src, n, octs)
        return self.watch()

    @_one_call_at_a_time
    def watch(self) -> int:
        """The kept count of the last `offsets`, `enqueue` or `fused` launch, read as soon as it is in
        mapped memory (a scatter may still run), within a bound past which the stream is
        synchronised (a negative count: a one-launch selection that gave up). Interrupted, it waits
        for the launches first, so that a later call never reads their count as its own."""
        self._check_open()
        if not self._tally.selections:
            raise DispatchError("this Selector has no count to watch: no selection was made on it. Fix: call "
                                "offsets, enqueue or fused before watch().")
        try:
            mapped.watch(self._host, 0, -1, self.stream, POLL_SECONDS)
        except BaseException:
            try:
                self.stream.synchronize()
            except Exception:  # a fault of the launches: the interruption is what the caller hears of
                pass
            raise
        kept = int(self._host[0])
        if kept < 0:  # past the bound, or a one-launch selection gave up: the stream decides
            self.stream.synchronize()
            kept = int(self._host[0])
        return kept

    @_one_call_at_a_time
    def run(self, flag_of: Callable, src, n: int, words, out, capacity: int, octs=None) -> int:
        """Select items 0..n-1 into `out` (at most `capacity` rows) and return how many were kept,
        which may exceed capacity (then only the first `capacity` were written). One
        synchronisation, after everything, to read the count."""
        self.enqueue(flag_of, src, n, words, out, capacity, octs)
        return self.total()

    def _plan(self, kinds: tuple, keys) -> None:
        """Keep the relaunch keys (kernel, use, source type) that `fused_at` or `offsets_at` just
        stored launches under for these argument kinds, so that the next call finds its launches
        by one dict look: the kernels' lookup costs microseconds on the path small selections
        take. Only a call that launched those kernels keeps them, so a key never names a kernel
        other than the one its launch was packed for (the kernel caches may since have made anew)."""
        if len(self._plans) >= LAUNCHES_KEPT:  # select_if of ever new predicates
            self._plans = {}
        self._plans[kinds] = keys

    def _launch(self, kernel, use: int = 0, cooperative: bool = False) -> NumbaLaunch:
        """The launcher of `kernel` (`use` tells apart two uses of one kernel, so each keeps its
        own packed arguments and geometry)."""
        k = self._launches.get((kernel, use))
        if k is None:  # retain=False: callers' arrays stay theirs
            if len(self._launches) >= LAUNCHES_KEPT:  # select_if of ever new predicates: start afresh
                self._launches, self._relaunches, self._resident = {}, {}, {}
            k = self._launches[(kernel, use)] = NumbaLaunch(kernel, self.stream, retain=False,
                                                            cooperative=cooperative)
        return k


def _scatter_from(again, src: int, n: int, words: int | None) -> None:
    """Rewrite a scatter's launch (`again`, a Relaunch) to take items 0..n-1 of the flags (or
    predicate values) at device address `src` and of the items at `words` (None: their indices)."""
    again.array(0, src, n)
    again.scalar(1, n)
    if words is not None:
        again.array(2, words, n)


def _scatter_into(again, out: int, room: int, indices: bool) -> None:
    """Rewrite a scatter's launch to write at most `room` items at device address `out` (and,
    writing `indices`, to read nothing else as its items)."""
    if indices:
        again.array(2, out, room)
    again.array(3, out, room)
    again.scalar(6, room)


def _is_device_function(f) -> bool:
    """Whether `f` is a Numba CUDA device function (or the simulator's stand-in for one)."""
    options = getattr(f, "targetoptions", None)
    return bool(options.get("device")) if isinstance(options, dict) else getattr(f, "_device", False) is True


def _rows(a) -> int | None:
    """Rows of a device array (a RawArray's or a Numba array's first axis), None for anything else."""
    if type(a) is RawArray:
        return a.shape[0]
    if isinstance(a, np.ndarray):  # host memory: the kernels would read it as an address
        return None
    shape = getattr(a, "shape", None)
    return shape[0] if isinstance(shape, tuple) and shape and isinstance(shape[0], INTEGERS) else None


_NO_OUT = object()  # a call that writes no output (offsets, scatter_later): no out, no capacity


def _check_call(what: str, flag_of, src, n, words=None, out=_NO_OUT, capacity=_NO_OUT) -> None:
    """Refuse arguments of Selector.`what` that the kernels would fail on or run past."""
    if not (_is_device_function(flag_of) and _fits(src, n, words, out, capacity)):  # the common case stays cheap
        _refuse_call(what, flag_of, src, n, words, out, capacity)


def _fits(src, n, words, out, capacity) -> bool:
    """Whether the arguments are plainly fine: int counts, device arrays of enough rows, out of the word written."""
    if out is _NO_OUT:
        out, capacity = None, 0
    elif out is None:
        return False
    if type(n) is not int or not 0 <= n <= MAX_ITEMS or not (type(capacity) is int and capacity >= 0):
        return False
    for a, need in ((src, n), (words, n), (out, capacity)):
        rows = -1 if a is None and a is not src else _rows(a)
        if rows is None or (rows >= 0 and rows < need):
            return False
    if out is None:
        return True
    w = _word_of(out)
    if words is None:
        return w.kind in "iu" and w.itemsize == 8 and len(out.shape) == 1
    return w == _word_of(words) and out.shape[1:] == words.shape[1:]


def _refuse_call(what: str, flag_of, src, n, words, out, capacity) -> None:
    """Raise what is wrong with the arguments of Selector.`what` (return where nothing is)."""
    where = f"Selector.{what}"
    if not _is_device_function(flag_of):
        raise DispatchError(f"{where}: flag_of={shown(flag_of, 60)} is not a Numba device function. Fix: pass a "
                            "function decorated with @cuda.jit(device=True) taking (src, i) and returning whether "
                            "item i is kept, such as compaction.kernels.flag_nonzero for non-zero flags.")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, INTEGERS) or n < 0:
        raise DispatchError(f"{where}: n={shown(n, 40)} is not a count of items. Fix: pass a non-negative int.")
    _check_items(n)
    if out is not _NO_OUT and (isinstance(capacity, (bool, np.bool_)) or not isinstance(capacity, INTEGERS)
                               or capacity < 0):
        raise DispatchError(f"{where}: capacity={shown(capacity, 40)} is not a count of rows. Fix: pass a "
                            "non-negative int, at most out's rows.")
    for name, a, need in (("src", src, n), ("words", words, n), ("out", out, capacity)):
        if a is _NO_OUT or (a is None and name == "words"):
            continue
        rows = _rows(a)
        if rows is None:
            raise DispatchError(f"{where}: {name}={shown(a, 60)} is not a device array. Fix: pass a Numba device "
                                "array (cuda.to_device, cuda.device_array).")
        if need is not None and rows < need:
            raise DispatchError(f"{where}: {name} has {rows} rows, fewer than the {need} it is used for. Fix: pass "
                                f"a larger {name}, or a smaller {'capacity' if name == 'out' else 'n'}.")
    if out is not _NO_OUT:
        got = (_word_of(out), tuple(out.shape[1:]))
        fits = (got[0].kind in "iu" and got[0].itemsize == 8 and not got[1]) if words is None else \
            got == (_word_of(words), tuple(words.shape[1:]))
        if not fits:
            raise DispatchError(f"{where}: out holds {got[0]} rows of shape {got[1]}, but the kernel writes "
                                + ("8-byte integer indices" if words is None else
                                   f"{_word_of(words)} rows of shape {tuple(words.shape[1:])} (the words)")
                                + ". Fix: make out like words (word_view of both), or uint64 (int64) for indices.")


def _unrunnable(e: BaseException, flag_of, src) -> None:
    """Raise a DispatchError from `e` where flag_of did not compile (Numba) or run (the simulator) for src."""
    from numba.core.errors import NumbaError

    # the simulator runs flag_of as Python: any error of its body (an AttributeError, a NameError) is its
    if (isinstance(e, (NumbaError, TypeError)) or _SIM and isinstance(e, Exception) and not isinstance(e, MemoryError)) \
            and not isinstance(e, VyreError):
        raise DispatchError(f"flag_of {getattr(flag_of, '__name__', shown(flag_of, 40))!r} cannot run as "
                            f"flag_of(src, i) on this src ({type(e).__name__}: {clip(str(e), 200)}). Fix: make it take "
                            "(src, i), i an int64 below n, and return a bool.") from e


def _check_items(n: int) -> None:
    if n > MAX_ITEMS:
        raise DispatchError(f"{n} items are more than one compaction takes ({MAX_ITEMS}). Fix: select in parts "
                            "and concatenate.")


@functools.cache
def _kernels():
    """The kernels module, imported on first use (an import statement costs a microsecond a call)."""
    from . import kernels

    return kernels


def _emit(words) -> tuple:
    """(emit, word) of the scatter writing `words` (None: the indices of the kept items)."""
    kernels = _kernels()
    if words is None:
        return kernels.write_index, np.uint64
    if len(words.shape) == 1:  # one word an item: read with the flags
        return None, _word_of(words)
    return kernels.copy_words, np.uint64


def _emit_of(word, words: int | None) -> tuple:
    """`_emit` of items of one word `word` (`words` None: indices)."""
    return _emit(None) if words is None else (None, np.dtype(word))


def _raw(words: int | None, n: int, word):
    """The n items of one word at device address `words` (None stays None: indices)."""
    return None if words is None else RawArray(words, (n,), word)


def _check_octs(src, n: int, octs) -> None:
    """Refuse an `octs` that is not src's own first n // 8 * 8 bytes seen as u64 words: the count
    reads the flags through it, so other memory would count other flags (or read past its end)."""
    fix = ("Fix: pass src.view(np.uint64)[:n // 8] of one-byte flags src whose address is a multiple of 8 (or "
           "octs=None, which counts them one at a time).")
    rows = _rows(octs)
    if rows is None or len(octs.shape) != 1 or _word_of(octs) != np.uint64:
        raise DispatchError(f"Selector: octs={shown(octs, 60)} is not a 1-D device array of uint64. {fix}")
    if _word_of(src).itemsize != 1:
        raise DispatchError(f"Selector: octs was given for {_word_of(src)} flags; it reads one-byte flags eight at "
                            f"a time. {fix}")
    if rows < n // 8:
        raise DispatchError(f"Selector: octs has {rows} words, fewer than the {n // 8} that {n} flags make. {fix}")
    if address_of(octs) != address_of(src):
        raise DispatchError(f"Selector: octs is not a view of src's flags (it starts elsewhere in memory). {fix}")


def address_of(a) -> int:
    """The device address of a device array's first element (the simulator's: its host array's)."""
    if type(a) is RawArray:
        return a._address
    if _SIM:
        return getattr(a, "_ary", a).__array_interface__["data"][0]
    ptr = getattr(a, "device_ctypes_pointer", None)
    if ptr is not None and hasattr(a, "gpu_data"):
        return ptr.value or 0
    return a.__cuda_array_interface__["data"][0] or 0


def check_gpu() -> None:
    """A BackendUnavailableError where no CUDA GPU is usable (no driver, no device)."""
    from numba import cuda

    if not cuda.is_available():
        raise BackendUnavailableError("a Selector keeps its counts on a CUDA GPU and none is usable here. Fix: "
                                      "run on a machine with a GPU (or under NUMBA_ENABLE_CUDASIM=1); select, "
                                      "nonzero and read_compacted take host arrays on the CPU.")


def _word_of(words) -> np.dtype:
    """The element type of a words array (a RawArray's or Numba's)."""
    if type(words) is RawArray:
        return words._dtype
    kind = getattr(words, "kind", None)
    return np.dtype(kind[0]) if kind is not None else np.dtype(words.dtype)
