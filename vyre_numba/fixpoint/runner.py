"""The fixpoint runner: argument checks, the CPU loop, and the three GPU modes."""
from __future__ import annotations

import contextlib
import inspect
import numbers

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .. import display
from ..errors import (INTEGERS, IN_HOST_MEMORY, BarrierTimeoutError, DispatchError, HostMemoryError, UnsupportedError,
                      VyreError, a_type, host_memory, native, numba_reason, shown, whole, yields)
from ..compaction.select import kept_compiled, predicate_key
from ..lru import LRUCache
from ..progress import check_progress, finished, stopped

from ..ir import Program
from ..backend import Backend, interface_dtype  # noqa: F401  (the annotations name it: typing.get_type_hints reads them)

MODES = ("auto", "cooperative", "graph", "relaunch")
_CTL_WORDS = 8  # see ptx_templates/fixpoint.ptx
_ROUNDS, _CONVERGED, _ERROR = 6, 7, 2


@dataclass(frozen=True, repr=False)
class FixpointResult(display.Shown):
    """How a run ended: rounds run, whether the last round changed nothing (False means it
    stopped at max_rounds), the mode that ran, and device nanoseconds (a `Duration`; None on the CPU)."""

    rounds: int
    converged: bool
    mode: str
    device_ns: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "device_ns", display.duration(self.device_ns))


def run(step: "Callable | Program", n: int, args: Sequence[Any] = (), *, max_rounds: int = 10_000,
        mode: str = "auto", backend: "Backend | str | None" = None, block: int = 256, timeout_s: float = 10.0,
        progress: bool | None = None) -> FixpointResult:
    """Run the step for every item i < n (n below 2**31), round after round, until a round that
    changed nothing, or `max_rounds`; the arrays in `args` are updated in place. `backend`: None
    runs on the GPU where an array of `args` is a device array, else on the reference backend
    (the arrays say where the data is; nothing is copied between host and device).

    The step is either a Numba-compilable function `step(i, *args)` returning non-zero when it
    changed something (`args`: arrays and scalars), or a vyre `Program` run once per item with
    `invocation_id(0)` as the item (`args`: one array per bound buffer, in binding order, of the
    buffer's dtype), which changed something when one of its stores or atomics changed the bits it
    overwrote. Arrays are device arrays on the GPU and NumPy arrays on the reference backend.
    `mode="auto"` runs one round (`max_rounds=1`) as a plain launch, more as a cooperative kernel
    where the device can launch one and the grid fits, else as a graph's while loop where the
    driver builds one, else one launch a round (`FixpointResult.mode` says which ran). `timeout_s`
    (seconds, 0 < timeout_s < 1e6) bounds each grid barrier's wait in
    cooperative mode (a stuck barrier raises BarrierTimeoutError instead of hanging the GPU);
    `block` is the threads of a GPU block, 32 to 1024 (checked on every backend, used only on
    the GPU); `progress` shows a tqdm bar of rounds: None (the default) once the run has taken a second,
    True at once, False never (see `vyre_numba.progress`)."""
    max_rounds = whole(max_rounds, "max_rounds", 1, 2**31 - 1)
    if not isinstance(mode, str) or mode not in MODES:
        raise DispatchError(f"mode={shown(mode)} is not one of {', '.join(MODES)}. Fix: pass one of those.")
    if isinstance(timeout_s, np.timedelta64):  # a numbers.Real to NumPy, but no number of seconds
        raise DispatchError(f"timeout_s={shown(timeout_s)} is a timedelta64, not a number of seconds. Fix: pass "
                            "timeout_s / np.timedelta64(1, 's').")
    if isinstance(timeout_s, (bool, np.bool_)) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s < 1e6:
        raise DispatchError(f"timeout_s={shown(timeout_s)} is not a number of seconds with 0 < timeout_s < 1e6. "
                            "Fix: pass e.g. 10.0.")
    check_progress(progress)  # before a step is compiled or an array copied
    be, is_program, n, args, block = _checked(step, n, args, backend, block)
    if be.name == "cuda":
        from . import device

        return device.run(be, step, n, args, max_rounds, mode, block, max(1, int(timeout_s * 1e9)), progress)
    if mode not in ("auto", "relaunch"):
        raise UnsupportedError(f"mode={shown(mode)} needs a GPU; the {be.name} backend runs rounds on the CPU. "
                               "Fix: use mode='auto' (it picks what the backend can do).")
    if is_program:
        return _run_program_cpu(step, n, args, max_rounds, progress, be)
    return _run_cpu(step, n, args, max_rounds, progress)


def for_each(step: "Callable | Program", n: int, args: Sequence[Any] = (), *, backend: "Backend | str | None" = None,
             block: int = 256) -> None:
    """Run the step once for every item i < n: one round of `run`, without waiting for it or
    reading back whether it changed anything. On the GPU the round is enqueued on the backend's
    stream (work queued after it sees its writes; `backend.synchronize()` waits for it), so a
    pipeline of one-pass phases costs a launch each, not a round trip. `block` as in `run`."""
    be, is_program, n, args, block = _checked(step, n, args, backend, block)
    if be.name == "cuda":
        from . import device

        device.for_each(be, step, n, args, block)
    elif is_program:
        _run_program_cpu(step, n, args, 1, False, be)
    else:
        _run_cpu(step, n, args, 1, False)


def _checked(step, n, args, backend, block):
    """(backend, is the step a Program, n, args, block) checked and resolved."""
    from ..backend import resolve_backend
    from ..ir import Program

    is_program = isinstance(step, Program)
    if is_program:
        from ..ptx.emitter import check_step

        check_step(step)
    elif not _python_function(step):
        raise DispatchError(f"step is {_named(step)}, not a Python function. Fix: pass a function (def or lambda) "
                            "step(i, *args) that returns non-zero when it changed something, or a vyre Program.")
    elif yields(step):
        raise DispatchError(f"step is {_named(step)}, an async or generator function, which Numba would run as "
                            "another function. Fix: pass a plain def step(i, *args) that returns non-zero when it "
                            "changed something.")
    if not isinstance(n, (bool, np.bool_)) and isinstance(n, INTEGERS) and 2**31 <= n < 2**32:
        raise DispatchError(f"n={int(n)} is 2**31 or more: the GPU's grid-stride loops count items in 32 bits, so "
                            "the last strides would wrap (and every backend takes the same n). Fix: run the items "
                            "in parts below 2**31 (the step's i offset by each part's start).")
    n = whole(n, "n", 0, 2**31 - 1)
    block = whole(block, "block", 32, 1024)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise DispatchError(f"args is {a_type(args)}, not a list. Fix: pass the step's arguments as a list.")
    if not is_program:
        _check_arity(step, len(args))
    if backend is None:  # device arrays run on the GPU, host arrays on the CPU
        backend = "cuda" if any(hasattr(a, "__cuda_array_interface__") for a in args) else "reference"
    be = resolve_backend(backend)
    if is_program:
        args = program_args(step, args, device=be.name == "cuda")
    return be, is_program, n, list(args), block


def _check_arity(step, given: int) -> None:
    """Refuse a step that cannot take (i, *args) for `given` args (Numba would say only that it
    cannot bind them, as if the step did not compile)."""
    params = inspect.signature(getattr(step, "py_func", step)).parameters.values()
    params = list(params)
    keywords = [p.name for p in params if p.kind is p.VAR_KEYWORD]
    if keywords:
        raise DispatchError(f"the step takes **{keywords[0]}, and it is called as step(i, *args), with no keywords. "
                            f"Fix: take each value as a parameter after i, given in args, instead of **{keywords[0]}.")
    named = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    if named:  # Numba binds positional arguments to them and says a required one is missing
        star = any(p.kind is p.VAR_POSITIONAL for p in params)
        raise DispatchError(f"the step takes {named[0]!r} by keyword only, and it is called as step(i, *args), all "
                            "positional. Fix: " + (f"read {named[0]!r} from a global the step names, or take it as the "
                                                   "last item of args" if star else
                                                   f"make {named[0]!r} an ordinary parameter (before the `*`), given "
                                                   "in args or by its default") + ".")
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return  # *args takes any number
    takes = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not takes:
        raise DispatchError("the step takes no parameters; it is called as step(i, *args). Fix: make i, the item, "
                            "its first parameter, and one parameter for each item of args after it.")
    least = sum(p.default is p.empty for p in takes)
    if not least <= 1 + given <= len(takes):
        names = ", ".join(p.name for p in takes) or "nothing"
        raise DispatchError(f"the step takes ({names}): i and then {max(len(takes) - 1, 0)} argument(s), but args "
                            f"holds {given}. Fix: pass one item of args for each of the step's parameters after i, "
                            "in order.")


def _python_function(step) -> bool:
    """A plain Python function (what Numba compiles), or a Numba dispatcher of one."""
    import types

    if isinstance(step, types.FunctionType):
        return True
    return isinstance(getattr(step, "py_func", None), types.FunctionType)


def _named(x) -> str:
    return f"the class {x.__name__}" if isinstance(x, type) else a_type(x)


def program_args(program, args: Sequence[Any], *, device: bool) -> list:
    """The arrays of a Program step, one per bound buffer, checked: the buffer's dtype exactly (they
    are updated in place, so nothing is converted), contiguous, fewer than 2**32 elements, the
    declared count where there is one; NumPy arrays flattened."""
    from ..backend import _storage
    from ..ir.fusion import overlap
    from ..bindings import check_unaliased
    from ..ir import Access

    bufs = program.bound_buffers
    names = ", ".join(b.name for b in bufs)
    if len(args) != len(bufs):
        raise DispatchError(f"program {program.name!r} binds {len(bufs)} buffer{'s' if len(bufs) != 1 else ''} ({names}); {len(args)} arrays were "
                            f"given. Fix: pass one array per buffer, in binding order.")
    out = []
    for b, a in zip(bufs, args):
        want = np.dtype(b.dtype.storage)
        where = f"the array for buffer {b.name!r} of step {program.name!r}"
        cai = getattr(a, "__cuda_array_interface__", None)
        if device and cai is None:
            raise DispatchError(f"{where} is {a_type(a)}, not a device array. Fix: upload it first "
                                "(backend.upload(x)) and pass the device array; it is updated in place.")
        if not device and not isinstance(a, np.ndarray):
            raise DispatchError(f"{where} is {a_type(a)}, not a NumPy array. Fix: pass a NumPy array "
                                f"of dtype {want} (it is updated in place), or run on the cuda backend.")
        if not device and isinstance(a, np.ma.MaskedArray):
            raise DispatchError(f"{where} is a masked array, whose mask the step would not see (it reads and writes "
                                "the masked values too). Fix: pass x.data (updated in place), or x.filled(...).")
        dt = interface_dtype(cai) if device else a.dtype
        size = int(np.prod(cai["shape"])) if device else a.size
        if dt != want:
            stored = f", stored as {want} words (0 or 1)" if want != np.dtype(dt) and b.dtype.value == "bool" else ""
            raise DispatchError(f"{where} has dtype {dt}; the buffer is {b.dtype}{stored}. Fix: pass an array of "
                                f"dtype {want} (a converted copy would not be updated in place).")
        contiguous = (cai.get("strides") is None or size <= 1 or tuple(cai["strides"]) == tuple(
            int(np.prod(cai["shape"][j + 1:])) * dt.itemsize for j in range(len(cai["shape"])))) if device \
            else a.flags.c_contiguous
        if not contiguous:
            copy = ("a contiguous copy on the device, x = cupy.ascontiguousarray(x) (x.contiguous() in PyTorch)"
                    if device else "x = np.ascontiguousarray(x)")
            raise DispatchError(f"{where} is not contiguous. Fix: pass {copy}, and read the results from x (the step "
                                "writes the array it is given).")
        if size >= 2**32 or (b.count and size != b.count):
            raise DispatchError(f"{where} has {size} elements; the buffer takes "
                                f"{b.count if b.count else 'fewer than 2**32'}. Fix: pass an array of that size.")
        if b.access in (Access.READ_WRITE, Access.WRITE_ONLY) and (cai["data"][1] if device else not a.flags.writeable):
            raise DispatchError(f"{where} is read-only, but the step writes the buffer. Fix: pass a writable array.")
        out.append(a if device else np.asarray(a).reshape(-1))  # a view: a matrix's reshape(-1) stays 2-D
    spans = [_storage(a) for a in out]
    check_unaliased(bufs, lambda i, j: overlap(spans[i], spans[j]), f"fixpoint step {program.name!r}")
    return out


def _guarded(program, n: int):
    """`program` with its body run only by items below n."""
    from .. import ir

    return ir.Program(program.buffers, (min(256, max(n, 1)), 1, 1),
                      [ir.if_(ir.invocation_id(0) < ir.lit(n, "u32"), list(program.entry))], name=program.name)


@host_memory("the fixpoint run", IN_HOST_MEMORY)
def _run_program_cpu(program, n: int, arrays: list, max_rounds: int, progress: bool | None,
                     backend) -> FixpointResult:
    from ..bindings import Binding
    from ..config import DispatchConfig
    from ..reference import interpreter

    guarded = _guarded(program, n)
    wg = guarded.workgroup_size
    binding = Binding(guarded, {b.name: a for b, a in zip(program.bound_buffers, arrays)},
                      (max(1, -(-n // wg[0])), 1, 1), wg, DispatchConfig())
    if binding.invocations > interpreter.MAX_INVOCATIONS:  # said in this call's terms, not a dispatch's grid
        raise DispatchError(f"fixpoint.run of {program.name!r} with n={n}: a round runs {binding.invocations} "
                            f"invocations, over the reference interpreter's limit of {interpreter.MAX_INVOCATIONS}. "
                            "Fix: pass a smaller n (the items a round covers), or run on the cuda backend.")

    memory = interpreter.memory_budget(getattr(backend, "memory_budget", None))
    work = interpreter.work_budget(getattr(backend, "work_budget", None))

    def one_round() -> bool:
        changes: list = []
        interpreter.prepare(binding, memory, work).run(changes)
        return bool(changes)

    with _restored_on_failure(arrays):
        return _cpu_rounds(one_round, max_rounds, progress)


@contextlib.contextmanager
def _restored_on_failure(args):
    """`with _restored_on_failure(args)`: the NumPy arrays among `args` as they were, put back if
    the block raises (a failed run leaves the caller's arrays unchanged). The block holds the
    reference backend's lock on resident arrays, as its dispatch_resident does: another thread's
    write, download, upload, read_compacted or dispatch_resident comes before the run or after it
    (or its undo), never between (a host dispatch reads its inputs without it)."""
    from ..reference import RESIDENT_LOCK

    with RESIDENT_LOCK:
        saved = [(a, a.copy()) for a in args if isinstance(a, np.ndarray) and a.flags.writeable]
        try:
            yield
        except BaseException:
            for a, before in saved:
                np.copyto(a, before)
            raise


def _cpu_rounds(one_round: Callable[[], bool], max_rounds: int, progress: bool | None) -> FixpointResult:
    """Call `one_round()` (True when the round changed something) until a quiet round or max_rounds."""
    bar = _bar(progress)
    rounds, converged = 0, False
    try:
        while rounds < max_rounds:
            changed = one_round()
            rounds += 1
            if bar is not None:
                bar.update(1)
            if not changed:
                converged = True
                break
    finally:
        if bar is not None:
            if converged or rounds == max_rounds:  # ended, not stopped by an error
                finished(bar)
                bar.close()
            else:
                stopped(bar)
    return FixpointResult(rounds, converged, "relaunch", None)


# Compiled steps kept, least recently used first out: each entry holds its step function and all it
# references (closure, attributes, globals) and its Numba compilation, so a step made anew per call
# or per re-run notebook cell must not be kept forever. Keyed by `step_key`, the step's code and the
# values it reads: Numba fixes a global at compilation, so a changed threshold must compile afresh,
# and a step written anew with the same code and values need not. As many as the GPU's fixpoint
# modules (device._SOURCES): more than the package's own phases use in one session, whose steps
# would otherwise be compiled again in turn.
STEP_CACHE = 64
_CPU_ROUNDS: LRUCache = LRUCache(STEP_CACHE)  # step function -> (jitted round, jitted step)


def _cpu_round(step: Callable) -> tuple[Callable, Callable]:
    """(a jitted round `(n, args) -> changed` calling the jitted step for every item in order,
    the jitted step)."""

    def build(fn: Callable) -> tuple[Callable, Callable]:
        from numba import njit

        inner = _bounds_checked(fn)  # (its helpers are checked_helpers' by now)

        @njit
        def one_round(n, args):
            changed = False
            for i in range(n):
                if inner(np.uint32(i), *args):
                    changed = True
            return changed
        return one_round, inner
    return kept_compiled(_CPU_ROUNDS, getattr(step, "py_func", step), build,  # keyed as step_key(step)
                         helpers=_bounds_checked)


def _bounds_checked(fn: Callable, helper=None) -> Callable:
    """`fn` compiled for the host as a step or its `helper` (whose inlining and explicit
    signatures it keeps): an index out of range raises, never corrupts; division by zero gives
    NumPy's result, as on the GPU."""
    from numba import njit

    options = dict(boundscheck=True, error_model="numpy",
                   inline=getattr(helper, "targetoptions", {}).get("inline", "never"))
    if helper is not None and not getattr(helper, "_can_compile", True):  # @njit("int32(int32)"): as declared
        return njit(list(helper.nopython_signatures), **options)(fn)
    return njit(**options)(fn)


def step_key(step: Callable):
    """What a compiled step is kept by: its Python code and the values it reads (an njit step's
    too, and the `@njit` helpers' it calls), so that a changed global compiles afresh."""
    return predicate_key(getattr(step, "py_func", step), helpers=True)


@host_memory("the fixpoint run", IN_HOST_MEMORY)
def _run_cpu(step: Callable, n: int, args: list, max_rounds: int, progress: bool | None) -> FixpointResult:
    for k, a in enumerate(args):
        if hasattr(a, "__cuda_array_interface__"):
            raise DispatchError(f"args[{k}] is a device array, but the reference backend runs on the CPU. "
                                "Fix: pass NumPy arrays, or run on the cuda backend.")
        if not isinstance(a, (np.ndarray, np.generic, int, float, complex)) or isinstance(a, np.ma.MaskedArray):
            fix = (f"make it an array first, x = np.asarray(...), pass x and read the results from x ({a_type(a)} "
                   "is copied into an array the caller never sees, so the step's writes would be lost)"
                   if isinstance(a, (list, tuple, range, np.ma.MaskedArray)) or hasattr(a, "__array__") else
                   "pass a NumPy array, or a number as an int or a float (float(x) for a Decimal or Fraction)")
            raise DispatchError(f"args[{k}] is {_named(a)}; the step takes arrays (updated in place) and numbers. "
                                f"Fix: {fix}.")
        if isinstance(a, np.void):  # a view into its array: the step's writes would reach it, past any undo
            raise DispatchError(f"args[{k}] is one record of a structured array, which the step would write "
                                "through to that array (and a failed run could not put back). Fix: pass the "
                                "structured array itself and index it in the step.")
        if isinstance(a, np.matrix):  # Numba cannot type it, and in Python m[i] is a row, not an item
            raise DispatchError(f"args[{k}] is an np.matrix, whose m[i] is a whole row (the step would see "
                                "matrices where it indexes items). Fix: pass np.asarray(m).ravel() (its items in one "
                                "row, a view updated in place), or np.asarray(m) for a step that indexes a[r, c].")
        if isinstance(a, np.ndarray) and not native(a.dtype):  # Numba would read a tuple's such array as native
            shown_dt = a.dtype if a.dtype.fields is not None else a.dtype.str  # a record's str ('|V4') hides its fields
            raise DispatchError(f"args[{k}] has dtype {shown_dt}, not in this machine's byte order, which Numba "
                                "cannot compile a step for. Fix: pass x = x.astype(x.dtype.newbyteorder('=')) and read "
                                "the results from that array (it is updated in place).")
        if isinstance(a, (np.ndarray, np.generic)) and a.dtype == np.float16:  # it would be "the step raised"
            raise DispatchError(f"args[{k}] holds float16, which Numba's CPU compiler does not take (the reference "
                                "backend runs the step with it). Fix: pass a float32 copy (x.astype(np.float32)) and "
                                "round the results back, or run on the cuda backend.")
        if isinstance(a, (np.ndarray, np.generic)) and a.dtype.kind in "fc" and a.dtype.itemsize > 8 + 8 * (
                a.dtype.kind == "c"):  # long doubles: Numba's "non-precise type pyobject" said nothing of them
            raise DispatchError(f"args[{k}] holds {a.dtype}, which Numba does not compile. Fix: pass float(x) for "
                                "one number; for an array, y = x.astype(np.float64) (np.complex128 for complex ones), "
                                "pass y and read the results from y.")
        if type(a) is int and not -2**63 <= a < 2**64:
            raise DispatchError(f"args[{k}] = {shown(a)} is past 64 bits; the step takes int64 or uint64 numbers. "
                                "Fix: pass a float (float(x)), or keep the value within int64 or uint64.")
    # Numba reads an int past int64 as uint64, but only while no int64 compilation could take it
    args = [np.uint64(a) if type(a) is int and a >= 2**63 else a for a in args]
    jitted, inner = _cpu_round(step)
    checked: list = []

    def one_round() -> bool:
        try:
            changed = _numba_call(jitted, n, args)
        except DispatchError:
            # a result the round cannot read (an array's truth, None) is the step's mistake, not a raise
            if not checked and (_compiled_for(jitted, n, args) or _maybe_none(inner)):
                _check_result(inner, args)
            raise
        if not checked:  # the step is typed by its first round
            _check_result(inner, args)
            checked.append(True)
        return bool(changed)

    with _restored_on_failure(args):
        return _cpu_rounds(one_round, max_rounds, progress)


def _check_result(inner, args: list) -> None:
    """Refuses a step (`inner`, its jitted function) whose result is not a bool or an integer (a
    string or a tuple would always count as a change), as Numba typed it in the first round for
    these arguments (the same step may be compiled for others, with other results)."""
    from numba import typeof, types

    given = (types.uint32, *(typeof(a) for a in args))
    try:  # as Numba keys its overloads: defaults left out and *args folded
        given = tuple(inner._compiler.fold_argument_types(given, {})[1])
    except Exception:  # noqa: BLE001 - a Numba internal; unfolded types still find plain steps
        pass
    cres = inner.overloads.get(given)
    returns = [cres.signature.return_type] if cres is not None else \
        [sig.return_type for sig in inner.nopython_signatures]  # not found by its types: every signature so far
    for r in returns:
        check_changed_type(r)


def check_changed_type(r) -> None:
    """Refuse a step's result type (a Numba type) that is not a bool or an integer: a float, a string
    or a tuple would be read as "changed" by truth, which is not what a step means."""
    from numba import types

    if isinstance(r, types.Optional):
        raise DispatchError(f"the step returns None on some paths and {r.type} on others (a bare `return`, or the "
                            "end of the function, is None), so whether it changed something cannot be read. Fix: "
                            "return a bool or an integer on every path, e.g. `return 0` where nothing changed.")
    if not isinstance(r, (types.Boolean, types.Integer)):
        raise DispatchError(f"the step returns {r}, not a bool or an integer. Fix: return whether "
                            "it changed something, e.g. `return 1` after a write and `return 0` otherwise.")


def _numba_call(fn, n: int, args: list):
    """fn(n, tuple(args)), a jitted step; Numba's typing errors become DispatchErrors that say what
    to fix (naming the argument where one of them is the cause)."""
    try:
        return fn(n, tuple(args))
    except IndexError as e:  # bounds checked: the step indexed outside an array
        if "index is out of bounds" not in str(e):  # Numba's words; the step raised its own
            raise DispatchError(f"the step raised IndexError ({e}). Fix: make the step total over its inputs (no "
                                "exceptions raised); the arrays are as they were.") from e
        raise DispatchError(f"the step indexed outside an array ({e}). Fix: check the step's indices against the "
                            "arrays' lengths (n items run, i from 0 to n - 1); the arrays are as they were.") from None
    except Exception as e:  # Numba's errors mean the step does not compile; others, that the step raised them
        from numba.core.errors import NumbaError

        if isinstance(e, VyreError):
            raise
        # not compiled for these arguments: whatever was raised (a ValueError typing a default argument, say)
        # came from compiling; once compiled, only a NumbaError is Numba's
        numba_error = isinstance(e, NumbaError) or not _compiled_for(fn, n, args)
        text = str(e)
        if type(e).__module__.startswith("numba.cuda") or (numba_error and ("numba.cuda" in text or "CUDA" in text)):
            raise DispatchError("the step calls CUDA device code (numba.cuda, vyre_numba.unionfind), which runs only "
                                "on the GPU; the reference backend compiles the step for the CPU. Fix: run it on the "
                                "cuda backend with device arrays, or write it without CUDA calls (on the CPU items run "
                                "one at a time, so plain reads and writes need no atomics); the arrays are as they "
                                "were.") from e
        lines = [line.strip() for line in text.splitlines() if line.strip()]  # the reason, past Numba's stages
        first = next((line for line in lines if not line.startswith("Failed in ")), lines[0]) if lines else \
            type(e).__name__
        grids = [f"args[{k}] (shape {a.shape})" for k, a in enumerate(args) if isinstance(a, np.ndarray) and a.ndim > 1]
        if not numba_error and grids and "truth value of an array" in text:  # x[i] of a 2-D array is a row
            raise DispatchError(f"the step took the truth of an array (ValueError: {first}): a comparison of whole "
                                f"arrays (a == b), or of x[i] where x is {' or '.join(grids)}, not 1-D, so x[i] is a "
                                "whole row. Fix: compare items (a[i] == b[i]), and index a 2-D array as x[r, c] or pass "
                                "x.reshape(-1) (a view, updated in place); the arrays are as they were.") from e
        if not numba_error and isinstance(e, MemoryError):  # an allocation in the step: a MemoryError still
            raise HostMemoryError(f"the step ran out of host memory ({first}). Fix: allocate less inside the step "
                                  "(pass arrays made once in args, which it fills); the arrays are as they "
                                  "were.") from e  # (`except MemoryError` around the call catches it, as before)
        if not numba_error:  # a `raise` in the compiled step, run
            raise DispatchError(f"the step raised {type(e).__name__} ({first}). Fix: make the step total over its "
                                "inputs (no exceptions raised); the arrays are as they were.") from e
        frozen = [f"args[{k}]" for k, a in enumerate(args) if isinstance(a, np.ndarray) and not a.flags.writeable]
        if frozen and writes_read_only(e):
            raise DispatchError(f"{read_only_written(frozen)}. Fix: pass a writable array (np.array(x) is a writable "
                                "copy; the step's writes then go to the copy).") from e
        if writes_read_only(e):  # none of the arguments is read-only: an array named from outside the step
            raise DispatchError("the step writes to an array it reads from outside itself (a global or a closure's), "
                                "which Numba compiles in as a read-only constant. Fix: pass the array in args, "
                                "fixpoint.run(step, n, [..., array]), and take it as a parameter; the arrays are as "
                                "they were.") from None
        raise DispatchError(f"the step function does not compile with Numba ({numba_reason(e)}). Fix: write it in "
                            "Numba's subset (array indexing, arithmetic, loops) taking (i, *args), and check the "
                            "argument types it is given.") from None  # Numba's frames say nothing more


def writes_read_only(e: BaseException) -> bool:
    """Whether Numba's compile error `e` is an item set on a read-only array (not merely a failure
    whose listed argument types include one)."""
    return "setitem(readonly array" in str(e)


def read_only_written(frozen: list[str]) -> str:
    return f"{frozen[0]} is read-only, but the step writes it" if len(frozen) == 1 else \
        f"{', '.join(frozen)} are read-only, and the step writes one of them"


def _maybe_none(inner) -> bool:
    """Whether the jitted step was typed to return None on some paths (the round then fails to
    compile its truth, which is the step's mistake)."""
    from numba import types

    return any(isinstance(sig.return_type, types.Optional) for sig in inner.nopython_signatures)


def _compiled_for(fn, n: int, args: list) -> bool:
    """Whether `fn` (a jitted round) was compiled for (n, args): then what it raised, it raised running."""
    try:
        return tuple(map(fn.typeof_pyval, (n, tuple(args)))) in fn.overloads
    except Exception:  # untypeable arguments: it never compiled for them
        return False


def _bar(progress: bool | None):
    """A bar of rounds with no total: max_rounds is a cap, not the expected count (a bar out of it
    would sit near 0 % with an ETA of hours for a run about to converge)."""
    from ..progress import bar

    return bar(progress, desc="fixpoint rounds", unit="round")


def chunks(progress: bool | None, max_rounds: int):
    """Rounds a launch may run between two bar updates: none (all at once) without a bar, 64 for
    a bar shown from the start, and growing from 1,024 (so a short run stays one launch and a
    long one adds only a few) for a bar that appears once the run is long."""
    if progress is False:
        while True:
            yield max_rounds
    size = 64 if progress else 1024
    while True:
        yield size
        if not progress:
            size *= 2


def raise_barrier_timeout(timeout_ns: int) -> None:
    raise BarrierTimeoutError(
        f"a grid barrier of the cooperative fixpoint kernel waited more than {timeout_ns / 1e9:g} s: not every "
        "block arrived (a block that returned early, or a step that never finishes). The kernel left instead of "
        "hanging the GPU; the arrays hold the last complete round or part of the next. Fix: make every step "
        "return for every item, raise timeout_s for slow rounds, or use mode='graph'.")
