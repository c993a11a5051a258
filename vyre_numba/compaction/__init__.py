"""Stream compaction: keep the selected items of an array, in order, in one pass on the GPU.

    kept = compaction.select(values, flags)          # values[flags != 0]
    big = compaction.select_if(values, lambda v: v > 10)
    where = compaction.nonzero(flags)                # int64 indices
    host = compaction.read_compacted(values, flags)  # only the kept records cross to the host (a NumPy array)

Host arrays give NumPy results (computed by the NumPy twins, with no GPU involved); device
arrays (numba, CuPy, PyTorch: anything with `__cuda_array_interface__`) give device arrays of
exactly the kept length, computed on the GPU (see `select.py` for the design).
Every call takes `stream=`, a Numba stream the GPU work is queued on (None: the default stream);
it applies to device inputs only, host inputs being computed on the host. Device results made on
the default stream come from a stream-ordered pool (`gpu.memory`): dropped, their memory goes to
the next call on the default stream, after the work of every blocking stream. Work on a
non-blocking stream (PyTorch's and CuPy's own streams, one made with `non_blocking`) that reads a
result is not ordered so: synchronise that stream before dropping the result (as PyTorch's
`record_stream` asks of its allocator), or pass `stream=` to have the result from Numba's allocator.
Values may be any 8- to 64-bit type or a record (structured) dtype; flags any integer or bool
type, non-zero meaning keep; the predicate of `select_if` a function Numba compiles, taking one
value and returning a bool.

A predicate's arithmetic follows NumPy's error model on the host and the device alike (numba-cuda
compiles device code with it, and the CPU twin is compiled with it too): an integer divided by
zero (`//`, `%`) is 0, a float one inf or nan, so `select_if(x, lambda v: 10 % (v - v) == 0)` keeps
every item on both. A predicate that raises an exception itself is refused on the host
(`DispatchError` "raised ..."), and one that raises for every value before it runs anywhere;
numba-cuda does not report exceptions raised in device code, so on the GPU make the predicate
return False instead of raising.

A predicate's types are Numba's, not NumPy 2's: integers are computed in 64 bits, so on uint8
values `v - 1` is the int64 -1 (NumPy wraps `u - 1` to 255: `select_if(u, lambda v: v - 1 > 0)`
keeps fewer than `u[u - 1 > 0]`), and a uint64 beside a signed int is a float64, exact only
below 2**53 (`x > 2**53` misses 2**53 + 1; write `x > np.uint64(2**53)`). A float32 value beside
a Python float is computed in float64, so on float32 values `v == 0.1` keeps nothing where NumPy
keeps float32(0.1) (write `v == np.float32(0.1)`), and `v + 1e-8 > v` holds for v = 1;
bools in arithmetic are ints (`v + v > 1` keeps True, where NumPy's `x + x` is logical or).
Signed overflow is undefined to Numba's compiler, as in C, on the host and the device alike:
`lambda v: v * 2**62 > 0` on int64 values compiles to `v > 0`, where NumPy's product wraps (keeps
1 of [1, 2, 3] where the predicate keeps all three); write arithmetic meant to wrap on unsigned
values (`np.uint64(v) * np.uint64(2**62) > 0`), which wrap in both. A constant written as arithmetic
is computed so too: in `lambda v: v > 2**70`, 2**70 is an int64 power, which wraps to 0 (Numba
refuses the literal 1180591620717411303424; write a constant past 64 bits as a float, `2.0**70`).
Host and GPU agree; under the
CUDA simulator the predicate runs as Python on NumPy scalars, with NumPy's promotion.
"""
from __future__ import annotations

import functools
import operator
import sys
import threading
import types
from typing import Any, Callable

import numpy as np

from ..backend import ArrayIn, ArrayOut, Stream, interface_dtype
from ..errors import (INTEGERS, CapacityError, DeviceError, DispatchError, HostMemoryError, VyreError, a_type, clip,
                      flat_fix, numba_reason, raise_if_out_of_memory, refuse_missing, shown, told, yields)
from ..gpu import memory
from ..gpu.numba_launch import RawArray, check_stream, stream_handle
from ..lru import LRUCache
from .. import simulator
from ..simulator import SIMULATED as _SIM
from .select import (PREDICATES_KEPT, Selector, _kernels, address_of, check_gpu, cpu_masks,
                     predicate_key, word_type, word_view)
from .select import nonzero_numpy as _nonzero_numpy, select_if_numpy as _select_if_numpy, select_numpy as _select_numpy

__all__ = ["select", "select_if", "nonzero", "read_compacted", "Selector", "select_numpy", "select_if_numpy",
           "nonzero_numpy"]


def _is_numba(a) -> bool:
    """A Numba device array, told by attributes that cost nothing to read (its interface dict
    costs microseconds to build, and every check here would build it again)."""
    return getattr(a, "gpu_data", None) is not None and hasattr(a, "_dummy")


def _is_device(a) -> bool:
    if _is_numba(a):
        return True
    try:
        if hasattr(a, "__cuda_array_interface__"):
            return True
    except Exception as e:  # a property that raises (no context, a freed buffer): not AttributeError, hasattr's
        raise DispatchError(f"reading the __cuda_array_interface__ of {a_type(a)} raised {type(e).__name__} "
                            f"({clip(str(e), 120)}). Fix: pass a device array whose interface can be read (a numba, "
                            "CuPy or PyTorch array in a live context), or a NumPy array.") from None
    if isinstance(a, np.ndarray) or not hasattr(a, "dtype"):
        return False
    from numba import cuda

    fake = getattr(getattr(cuda, "devicearray", None), "FakeCUDAArray", None)  # the CUDA simulator's arrays
    return fake is not None and isinstance(a, fake)


def _dev(a):
    """A numba view of a device array (the CUDA simulator's arrays are their own)."""
    from numba import cuda

    if not hasattr(cuda, "as_cuda_array") or isinstance(a, cuda.cudadrv.devicearray.DeviceNDArray):
        return a
    return cuda.as_cuda_array(a)


def _on_device(*arrays) -> bool:
    where = {_is_device(a) for a in arrays}
    if len(where) > 1:
        raise DispatchError("some arrays are on the device and some on the host. Fix: pass all of them as device "
                            "arrays or all as NumPy arrays.")
    return where.pop()


def _dtype(a) -> np.dtype:
    """a's element type: its NumPy dtype where it has one (a record keeps its fields), else its
    interface's (PyTorch's dtypes are not NumPy's)."""
    if isinstance(getattr(a, "dtype", None), np.dtype):
        return a.dtype
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is None:
        return np.dtype(a.dtype)
    return interface_dtype(cai)


def _from_pandas(x, name: str):
    """A pandas Series or Index (a RangeIndex too) of a NumPy dtype, or of a nullable number or bool
    type (Int64, boolean ...) without missing values, as its NumPy array (host in, NumPy out); one
    with missing values (pd.NA) is refused, as the rest of vyre_numba refuses it."""
    pd = sys.modules.get("pandas")  # not imported: x is no pandas object
    if pd is not None and isinstance(x, (pd.Series, pd.Index, pd.Categorical)):
        refuse_missing(x, name)
        if isinstance(x.dtype, np.dtype):
            return x.to_numpy()
        exact = getattr(x.dtype, "numpy_dtype", None)  # a masked (nullable) type's values, no longer masked
        if str(x.dtype) == "category":  # its values, as every other module reads it (not its codes)
            exact = x.dtype.categories.dtype
            exact = getattr(exact, "numpy_dtype", exact)  # categories of a nullable type (Int64)
        if isinstance(exact, np.dtype) and exact.kind in "biufmM":
            return np.asarray(x, dtype=exact) if isinstance(x, pd.Categorical) else x.to_numpy(dtype=exact)
    return x


def _check_values(a, name: str = "values"):
    if not (isinstance(a, np.ndarray) or _is_device(a)):
        kind = type(a).__name__
        categorical = str(getattr(a, "dtype", "")) == "category"  # of strings or other objects: numbers are read
        if categorical and name == "flags":
            kind = "objects"  # codes are no flags: the bools meant are computed from the values
        elif kind == "Series" and categorical:
            kind = "categorical Series"
        elif kind in ("Series", "Index") and getattr(getattr(a, "dtype", None), "kind", "O") not in "biuf":
            kind = "objects"  # strings, tz-aware times, periods: to_numpy() holds Python objects
        hint = {"Series": f"{name}.to_numpy()", "Index": f"{name}.to_numpy()", "Array": f"{name}.compute()",
                "Tensor": f"{name}.numpy()", "list": f"np.asarray({name})", "tuple": f"np.asarray({name})",
                "Categorical": f"np.asarray({name}.codes), the category codes",
                "CategoricalIndex": f"np.asarray({name}.codes), the category codes",
                "categorical Series": f"{name}.cat.codes.to_numpy(), the category codes, -1 where one is missing",
                "bytes": f"np.frombuffer({name}, np.uint8)", "bytearray": f"np.frombuffer({name}, np.uint8)",
                "memoryview": f"np.asarray({name})"}.get(kind, "np.asarray(...)")
        if kind == "objects" and name == "flags":
            raise DispatchError(f"flags is a pandas {type(a).__name__} of {a.dtype}, not of bools or integers. Fix: "
                                f"compute the bools you mean from it (e.g. flags == '1', or flags.notna()) and pass "
                                f"those.")
        if kind == "objects":
            raise DispatchError(f"{name} is a pandas {type(a).__name__} of {a.dtype}, whose values NumPy holds as "
                                f"Python objects, which compaction cannot move. Fix: select positions instead, keep = "
                                f"compaction.nonzero(flags), and take {name}.iloc[keep] on the host.")
        raise DispatchError(f"{name} is {a_type(a)}, not a NumPy or device array. Fix: pass a NumPy array "
                            f"(e.g. {hint}) or a device array (numba, CuPy, PyTorch).")
    if isinstance(a, np.ma.MaskedArray):
        raise DispatchError(f"{name} is a masked array; compaction would ignore its mask. Fix: pass "
                            f"{name}.filled(0) or select by the mask itself.")
    if not isinstance(a, np.ndarray) and not hasattr(a, "copy_to_host") and \
            not isinstance(getattr(a, "__cuda_array_interface__", None), dict):  # numba's (simulator's too): apart
        raise DispatchError(f"{name} is {a_type(a)}, whose __cuda_array_interface__ is no dict (the protocol's "
                            "shape, typestr and data). Fix: pass a numba, CuPy or PyTorch device array, or a "
                            "NumPy array.")
    cai = None if isinstance(a, np.ndarray) or _is_numba(a) else getattr(a, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and cai.get("mask") is not None:  # (a numba array has none: its interface costs us)
        raise DispatchError(f"{name} is a device array with a mask (its __cuda_array_interface__'s 'mask'); "
                            f"compaction would ignore it. Fix: pass the array without the mask, and select by the "
                            "mask itself where it is what you mean.")
    dt = _dtype(a)
    shape = _shape(a)
    if len(shape) != 1:
        raise DispatchError(f"{name} has shape {shape}, not 1-D. Fix: pass a flat array ({flat_fix(a, name)}).")
    if dt.hasobject or dt.itemsize == 0 or dt.itemsize > 64 or (dt.fields is None and dt.itemsize not in (1, 2, 4, 8)):
        fix = ("pass flags as bools or integers (non-zero keeps the item), e.g. (x > 0)" if name == "flags" else
               f"pass such an array, or select by index: keep = compaction.nonzero(flags), then {name}[keep]")
        raise DispatchError(f"{name} has dtype {dt}; compaction moves items of 1, 2, 4 or 8 bytes and records of at "
                            f"most 64 bytes. Fix: {fix}.")
    if isinstance(a, np.ndarray):
        if not a.flags.c_contiguous:
            raise DispatchError(f"{name} is not contiguous. Fix: pass np.ascontiguousarray({name}).")
    else:
        strides = cai.get("strides") if cai is not None else (None if a.is_c_contiguous() else ())
        if strides not in (None, (dt.itemsize,)) and shape[0] > 1:
            raise DispatchError(f"{name} is not contiguous on the device. Fix: pass a contiguous copy.")
    return shape[0]


def _shape(a) -> tuple:
    """a's shape: its own, else its __cuda_array_interface__'s (the protocol asks for no more)."""
    shape = getattr(a, "shape", None)
    if type(shape) is tuple:
        return shape
    if shape is None:
        shape = getattr(a, "__cuda_array_interface__", {}).get("shape")
    try:
        sizes = tuple(operator.index(d) for d in shape)  # a float size is no size: 3.5 is not read as 3
    except (TypeError, ValueError):
        sizes = None
    if sizes is None or any(d < 0 for d in sizes):
        raise DispatchError(f"the array's shape is {shown(shape)}, not a tuple of sizes. Fix: pass a NumPy array "
                            "or a numba, CuPy or PyTorch device array.")
    return sizes


def _check_flags(flags, n: int | None) -> int:
    m = _check_values(flags, "flags")
    dt = _dtype(flags)
    if dt.kind not in "biu":
        raise DispatchError(f"flags has dtype {dt}, not integers or bools. Fix: pass flags as bool or integer "
                            "(non-zero keeps the item), e.g. (x > 0).")
    if n is not None and m != n:
        raise DispatchError(f"flags has {m} elements and values {n}. Fix: pass one flag per value.")
    return m


def _check_predicate(predicate) -> None:
    if not callable(predicate):
        raise DispatchError(f"predicate is {a_type(predicate)}, not a function. Fix: pass a function of "
                            "one value returning a bool, e.g. lambda v: v > 0.")
    from numba.np.ufunc.dufunc import DUFunc  # (loaded with numba, which compiles the predicate)

    vectorized = isinstance(predicate, DUFunc)
    if vectorized or isinstance(predicate, (np.ufunc, types.BuiltinFunctionType, type)):  # Python functions only
        name = getattr(predicate, "__name__", "f")
        home = "np" if isinstance(predicate, np.ufunc) else (getattr(predicate, "__module__", None) or "").lstrip("_")
        call = f"{home}.{name}(v)" if home not in ("", "builtins") and not vectorized else f"{name}(v)"  # math.isnan(v)
        what = ("Numba @vectorize ufunc" if vectorized else "NumPy ufunc" if isinstance(predicate, np.ufunc) else
                "type" if isinstance(predicate, type) else "builtin")
        raise DispatchError(f"predicate is the {what} {name}, which Numba cannot compile as a function of its own. "
                            f"Fix: wrap it in a lambda: lambda v: {call}.")
    if yields(predicate):
        fn = getattr(predicate, "py_func", predicate)
        raise DispatchError(f"predicate {getattr(fn, '__name__', '')} is an async or generator function, whose call "
                            "returns a coroutine or generator, not a bool (Numba would compile its body as if it "
                            "were plain). Fix: pass a plain def or lambda returning the bool.")
    try:
        hash(predicate)  # a compiled predicate may be kept by the function itself (`select.predicate_key`)
    except TypeError:
        raise DispatchError(f"predicate is {a_type(predicate)} that cannot be hashed, so its compiled form "
                            "cannot be kept. Fix: pass a plain function or lambda.") from None


def _host_only(*arrays) -> None:
    if _on_device(*arrays):
        raise DispatchError("the NumPy twins take host arrays. Fix: call select / select_if / nonzero for device "
                            "arrays.")


def select_numpy(values, flags) -> np.ndarray:
    """values[i] for every i with flags[i] != 0, in order (NumPy arrays; the CPU implementation)."""
    values, flags = _from_pandas(values, "values"), _from_pandas(flags, "flags")
    n = _check_values(values)
    _check_flags(flags, n)
    _host_only(values, flags)
    return _select_numpy(values, flags)


def nonzero_numpy(flags) -> np.ndarray:
    """The indices (int64) of the non-zero flags, in order (a NumPy array; the CPU implementation)."""
    flags = _from_pandas(flags, "flags")
    _check_flags(flags, None)
    _host_only(flags)
    return _nonzero_numpy(flags)


def select_if_numpy(values, predicate: Callable) -> np.ndarray:
    """values[i] for every i where predicate(values[i]) holds, in order (a NumPy array; the CPU
    implementation, the predicate compiled by numba.njit)."""
    values = _from_pandas(values, "values")
    _, predicate, key = _checked_if(values, predicate)
    _host_only(values)
    return _compiled(lambda: _select_if_numpy(values, predicate, key), "predicate")


def _checked_if(values, predicate) -> tuple[int, Callable, Any]:
    """(the length of `values`, the predicate as a Python function, its `predicate_key`), after
    checking both for select_if. A Numba dispatcher (njit, cuda.jit(device=True)) stands for its
    Python function. The key is taken once a call: it reads every value the predicate names."""
    n = _check_values(values)
    _check_predicate(predicate)
    predicate = getattr(predicate, "py_func", predicate)
    dt = _dtype(values)
    if dt.fields is not None:
        raise DispatchError("select_if takes plain numbers; values is a record array. Fix: compute flags from its "
                            "fields and call select(values, flags).")
    if dt.newbyteorder("=") == np.float16:
        raise DispatchError("select_if does not take float16 values: its predicate is typed by Numba's CPU "
                            "compiler, which has no float16. Fix: compute flags yourself and call select(values, "
                            "flags), which keeps float16; or pass values.astype(np.float32) and cast the kept values "
                            "back (.astype(np.float16)).")
    key = predicate_key(predicate)
    _check_result(predicate, dt.newbyteorder("="), key)
    return n, predicate, key


_RESULT_TYPES: LRUCache = LRUCache(4 * PREDICATES_KEPT)  # (predicate, dtype) -> "ok" or what is wrong


def _check_result(predicate: Callable, dt: np.dtype, pkey) -> None:
    """Refuses a predicate whose result is not a bool or an integer (a tuple or a string is
    always true, a float is true for NaN): the result type as Numba infers it for dt (`pkey`:
    the predicate's `predicate_key`)."""
    key = (pkey, dt)
    result = _RESULT_TYPES.get(key)
    if result is None:
        from numba import from_dtype, types

        def infer():  # typed as the mask calls it, pred(values[i]), so that its defaults fill the rest
            mask, dispatcher = cpu_masks(predicate, pkey)
            value = from_dtype(dt)
            mask.compile((types.Array(value, 1, "C"),))
            for s in dispatcher.nopython_signatures:
                first = s.args[0] if s.args else None  # lambda v: takes the value, lambda *v: a tuple of it
                if first == value or isinstance(first, types.BaseTuple) and tuple(first.types) == (value,):
                    return s.return_type
            raise DispatchError(f"the predicate could not be typed for one {dt} value. Fix: write it taking one "
                                "value, e.g. lambda v: v > 0.")
        result = _compiled(infer, "predicate", compiling=True)
        if isinstance(result, (types.Boolean, types.Integer)):
            result = "ok"
        elif isinstance(result, types.NoneType) and not _returns(predicate):
            result = "raises"  # Numba types a function that never returns as returning none
        else:
            result = f"returns {result}"
        _RESULT_TYPES.put(key, result)
    if result == "raises":
        raise DispatchError(f"the predicate raises an exception for every {dt} value (it has no return). Fix: "
                            "return a comparison, e.g. lambda v: v > 0, and False for values it should not keep.")
    if result != "ok":
        raise DispatchError(f"the predicate {result} for {dt} values, not a bool. Fix: return a "
                            "comparison, e.g. lambda v: v > 0 (or bool(...) of an integer).")


def _returns(predicate: Callable) -> bool:
    """Whether the predicate's code returns anywhere (a body that only raises has no return)."""
    import dis

    try:
        return any(i.opname.startswith("RETURN") for i in dis.get_instructions(predicate))
    except TypeError:  # no Python code to read: say what Numba found
        return True


_COMPILE_ERRORS = {"NvvmError", "NvvmSupportError", "nvvmError", "nvJitLinkError", "LinkerError", "NvrtcError",
                   "NvrtcCompilationError", "NvrtcSupportError"}  # NVVM, NVRTC and the linker, by name: their
# classes move between numba-cuda and cuda-bindings releases
_DRIVER_MODULES = ("numba.cuda.cudadrv", "numba.cuda.simulator", "cuda.")


def _compiled(call: Callable, what: str, compiling: bool = False):
    """call(), where it compiles the user's `what` with Numba (and runs it, unless `compiling`):
    a compile failure of it, a fault of the driver, running out of host memory and an exception
    it raises while running each end in their own VyreError."""
    try:
        return call()
    except VyreError:
        raise
    except MemoryError as e:
        if str(e) and not str(e).startswith("Unable to allocate") and not compiling:  # the user's own, raised
            raise DispatchError(f"the {what} raised MemoryError ({e}). Fix: make the {what} total over the values "
                                "(no exceptions raised); nothing was selected.") from e
        raise HostMemoryError(f"selecting with the {what} ran out of host memory{told(e)}. Fix: select from fewer "
                              "values at a time.") from None
    except Exception as e:
        from numba.core.errors import NumbaError

        simulator.settle()  # the simulator's other threads of the block: the next call's kernels need numba.cuda
        raise_if_out_of_memory(e, f"selecting with the {what}")  # compiling too: loading the module takes room
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if compiling or isinstance(e, NumbaError) or type(e).__name__ in _COMPILE_ERRORS:  # Numba's own
            raise DispatchError(f"the {what} does not compile with Numba ({numba_reason(e)}). Fix: write it in "  # frames
                                "Numba's subset, taking one value and returning a bool.") from None  # say nothing more
        if type(e).__module__.startswith(_DRIVER_MODULES):
            raise DeviceError(f"the GPU failed while selecting with the {what} ({type(e).__name__}: {first}). Fix: "
                              "check the device's free memory and state (nvidia-smi); a fault here also means "
                              "the context is lost: restart the process.") from e
        raise DispatchError(f"the {what} raised {type(e).__name__} ({first}) while selecting. Fix: make it total "
                            "over the values' type (no division by zero, no exceptions raised).") from e


_SELECTORS: dict = {}


@functools.cache
def _cuda():
    """numba.cuda, imported on first use (an import statement in a call costs about a microsecond,
    and a small select is a few tens of them)."""
    from numba import cuda

    return cuda


def _selector(stream) -> Selector:
    """The selector of this stream, thread and context: a selector's tile counts are written by
    every call, so two threads (Dask workers run several) must never share one, and its buffers
    and kernels belong to the GPU that made them."""
    try:
        key = (0 if stream is None else id(stream) if _SIM else stream_handle(stream), threading.get_ident(),
               0 if _SIM else memory._context()[0])
    except Exception:  # no driver, or no GPU: said as Selector() says it
        check_gpu()
        raise
    s = _SELECTORS.get(key)
    if s is None:
        if len(_SELECTORS) >= 64:  # threads come and go; their selectors need not outlive them
            _SELECTORS.clear()
        s = _SELECTORS[key] = Selector.for_this_thread(stream)
    return s


def _words(a, n: int, dt: np.dtype, address: int | None = None):
    """The n items of device array `a` (or of the memory at `address`) as unsigned words (`word_view`'s
    shape), for the kernel: a raw view on the GPU, Numba's view under the simulator."""
    if _SIM:
        return word_view(_dev(a), n)
    word, w = word_type(dt)
    return RawArray(address_of(a) if address is None else address, (n,) if w == 1 else (n, w), word)


def _native(flags):
    """Device flags in this machine's byte order, a view (whether a flag is non-zero does not depend
    on it, and Numba's kernels read no other)."""
    dt = _dtype(flags)
    return flags if dt.isnative else _dev(flags).view(dt.newbyteorder("="))


def _octs(flags, n: int):
    """One-byte device flags as n // 8 u64 words (for the count that reads eight at a time), or
    None: for wider flags, or where the address is not a multiple of 8."""
    if n < 8 or _dtype(flags).itemsize != 1:
        return None
    if _SIM:
        return _dev(flags)[:n // 8 * 8].view(np.uint64)
    address = address_of(flags)
    if address % 8:
        return None
    return RawArray(address, (n // 8,), np.uint64)


FUSED_BYTES = 1 << 23  # room for every item up to this size: selected in one launch (`Selector.fused_at`)
ROOM_BYTES = 1 << 28  # up to this size: three launches into room for every item, one wait at the end
SLACK = 4 << 20  # a result in room for every item leaving more than this and 3/4 of it unused is copied to its size


def _exact(sel: Selector, flag_of, src, n: int, words, dt: np.dtype, octs=None):
    """The kept items (of `words`, or their indices where None) as a device array of exactly their
    number, from the stream-ordered pool on the legacy default stream (a microsecond, where
    Numba's allocation costs tens), else from Numba. Up to FUSED_BYTES of room for every item:
    one launch into that room (`Selector.fused`); up to ROOM_BYTES (or where that launch gave up
    at its grid barrier): count, scan and scatter into the room, launched back to back; beyond
    it, the count first (one synchronisation), then the scatter into an output of that size."""
    cuda = _cuda()
    pooled = not _SIM and stream_handle(sel.stream) == 0
    size = n * dt.itemsize
    if size <= FUSED_BYTES:
        out = _in_room(sel, n, dt, pooled, lambda out: sel.fused(flag_of, src, n, words, out, octs))
        if out is not None:
            return out
    if size <= max(ROOM_BYTES, FUSED_BYTES):
        def three(out) -> int:
            sel.enqueue(flag_of, src, n, words, out, n, octs)
            return sel.watch()
        out = _in_room(sel, n, dt, pooled, three)
        if out is not None:
            return out
    sel.offsets(flag_of, src, n, octs)
    put = sel.scatter_later(flag_of, src, n, words, word_type(dt)[0]) if pooled else None  # while the GPU counts
    count = sel.watch()
    if count == 0:
        return cuda.device_array(0, dt)
    if not pooled:
        out = cuda.device_array(count, dt, stream=sel.stream)
        sel.scatter(flag_of, src, n, words, _words(out, count, dt), count)
        return out
    if put is None:
        def put(address: int, capacity: int) -> None:
            sel.scatter(flag_of, src, n, words, _words(None, capacity, dt, address), capacity)
    return _pooled_exactly(count, dt, put)


def _pooled_exactly(count: int, dt: np.dtype, put: Callable[[int, int], None]):
    """A pooled device array of exactly `count` (>= 1) items of `dt`, which `put(address, count)`
    enqueues writing on the legacy stream; its memory given back where `put` fails."""
    address = memory.pool_alloc(count * dt.itemsize, spare=True)  # first written by `put`, on the legacy stream
    try:
        put(address, count)
    except BaseException:
        memory.pool_free(address)
        raise
    return memory.pooled_array(count, dt, address)


def _in_room(sel: Selector, n: int, dt: np.dtype, pooled: bool, select: Callable):
    """The kept items that `select(out)` writes into `out`, room for all n items, returning their
    count (None where it gave up, or the room could not be had: then so does this); a result that would leave more than SLACK
    bytes and three quarters of that room unused is copied into an array of its size."""
    cuda = _cuda()
    size = n * dt.itemsize
    if not pooled:
        try:
            out = cuda.device_array(n, dt, stream=sel.stream)
        except Exception:  # no room for every item: the caller counts first
            return None
        count = select(_words(out, n, dt))
        if count is None:
            return None
        if 4 * count < n and size - count * dt.itemsize > SLACK:
            return _copied(out[:count], dt, sel.stream)
        return out[:count]
    try:
        address = memory.pool_alloc(size, spare=True)  # `pooled`: the selection runs on the legacy stream
    except DeviceError:  # no room for every item: the caller counts first
        return None
    try:
        count = select(_words(None, n, dt, address))
        if not count:
            memory.pool_free(address)
            return None if count is None else cuda.device_array(0, dt)
        if 4 * count < n and size - count * dt.itemsize > SLACK:
            address, size = memory.pool_copy(address, count * dt.itemsize), count * dt.itemsize
    except BaseException:
        memory.pool_free(address)
        raise
    return memory.pooled_array(count, dt, pointer=memory.owning_pointer(address, size))  # owning all it has


def _copied(view, dt: np.dtype, stream):
    """A new device array holding `view`'s items (so that the larger array under it can go)."""
    from numba import cuda

    out = cuda.device_array(view.shape[0], dt, stream=stream)
    out.copy_to_device(view, stream=stream)
    return out


def _device_select(values, src, flag_of, n: int, stream, octs=None):
    """The kept values of a device select, as a device array of exactly their number."""
    dt = _dtype(values)
    if n == 0:
        return _cuda().device_array(0, dt)
    return _exact(_selector(stream), flag_of, src, n, _words(values, n, dt), dt, octs)


@functools.cache
def _numba_array_type() -> type:
    """Numba's DeviceNDArray class (the simulator's stand-in under it)."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray


_WORDS: dict = {}  # dtype -> its word type where an item is one word (else None)


def _one_word(dt: np.dtype):
    word = _WORDS.get(dt, False)
    if word is False:
        ok = dt.fields is None and dt.kind != "O" and dt.itemsize in (1, 2, 4, 8)
        word = _WORDS[dt] = word_type(dt)[0] if ok else None
    return word


def _small(src, values, by_flags: bool, flag_of, dt: np.dtype):
    """The kept items of a selection of the kind that dominates calls: Numba device arrays,
    contiguous, of one word an item, on the default stream. Within FUSED_BYTES in one launch
    (`Selector.fused_at`), within ROOM_BYTES (or where that gave up) count, scan and scatter into
    room for every item (`Selector.enqueue_at`), beyond it (or where that room could not be had)
    the count first (`_counted_at`); all rewrite their last launches' parameters, where the general
    path packs argument objects and checks what is known here. `src`: the flags (`by_flags`) or
    the values of a predicate; `values`: the items (None: their indices, of type `dt`). None for
    every other case, which the general path checks and selects: an input taken here passes every
    check that path makes."""
    dna = _numba_array_type()
    if type(src) is not dna or (values is not None and type(values) is not dna):
        return None
    shape, st = src.shape, src.dtype
    if len(shape) != 1 or (values is not None and values.shape != shape) or (by_flags and st.kind not in "biu") or \
            not st.isnative:  # byte-swapped flags: the general path views them as native
        return None
    n = shape[0]
    size = n * dt.itemsize
    word = _one_word(dt)
    if word is None or _one_word(st) is None or n < 8 or src.strides[0] != st.itemsize or \
            (values is not None and values.strides[0] != dt.itemsize):
        return None
    sel = _selector(None)
    if sel._handle != 0:  # a per-thread default stream: outside the pool's ordering
        return None
    src_at = src.device_ctypes_pointer.value or 0
    words = None if values is None else values.device_ctypes_pointer.value or 0
    by_bytes = by_flags and st.itemsize == 1 and src_at % 8 == 0
    address = 0
    if size <= max(FUSED_BYTES, ROOM_BYTES):
        try:
            address = memory.pool_alloc(size, spare=True)  # on the legacy stream (the selector's handle is 0)
        except DeviceError:  # no room for every item: counted first, below (not while this error is handled)
            pass
    if not address:
        return _counted_at(sel, flag_of, src_at, st, n, by_bytes, word, words, dt)
    owner = []  # the output's memory pointer, made while the GPU selects (the host would only wait)

    def own() -> None:
        owner.append(memory.owning_pointer(address, size))
    try:
        count = sel.fused_at(flag_of, src_at, st, n, by_bytes, word, words, address, own) if size <= FUSED_BYTES \
            else None
        if count is None:
            sel.enqueue_at(flag_of, src_at, st, n, by_bytes, word, words, address)
            if not owner:
                own()
            count = sel.watch()
    except BaseException:
        if owner:
            owner[0].free()
        else:
            memory.pool_free(address)
        raise
    if not count:
        owner[0].free()
        return _cuda().device_array(0, dt)
    if 4 * count < n and (n - count) * dt.itemsize > SLACK:
        return memory.pooled_array(count, dt, memory.pool_copy(address, count * dt.itemsize, free=owner[0].free))
    return memory.pooled_array(count, dt, pointer=owner[0])


def _counted_at(sel: Selector, flag_of, src: int, src_type, n: int, by_bytes: bool, word, words: int | None,
                dt: np.dtype):
    """`_small`'s selection into an output of exactly the kept items: count and scan, the count
    read from mapped memory, the output allocated, the scatter (made ready while the GPU counted)
    launched into it. The GPU idles only between the count and the scatter."""
    put = sel.offsets_at(flag_of, src, src_type, n, by_bytes, word, words)
    count = sel.watch()
    return _pooled_exactly(count, dt, put) if count else _cuda().device_array(0, dt)


def _numba_pair(a, b, stream) -> bool:
    """Whether `a` and `b` may be Numba device arrays for `_small` (told without importing numba)."""
    return stream is None and not _SIM and getattr(a, "gpu_data", None) is not None and \
        getattr(b, "gpu_data", None) is not None


def select(values: ArrayIn, flags: ArrayIn, *, stream: Stream | None = None) -> ArrayOut:
    """values[i] for every i with flags[i] != 0, in order: a NumPy array for host inputs, a
    device array of exactly that length for device inputs."""
    if _numba_pair(values, flags, stream):
        out = _small(flags, values, True, _kernels().flag_nonzero, values.dtype)
        if out is not None:
            return out
    values, flags = _from_pandas(values, "values"), _from_pandas(flags, "flags")
    n = _check_values(values)
    _check_flags(flags, n)
    check_stream(stream)
    if not _on_device(values, flags):
        return _select_numpy(values, flags)
    flags = _native(flags)
    return _device_select(values, _dev(flags) if _SIM else flags, _kernels().flag_nonzero, n, stream, _octs(flags, n))


def select_if(values: ArrayIn, predicate: Callable, *, stream: Stream | None = None) -> ArrayOut:
    """values[i] for every i where predicate(values[i]) holds, in order (host in, NumPy out;
    device in, device out). The predicate is compiled once for its code and the values it reads
    (closure, defaults, the globals and module attributes it names, such as `cfg.limit`): a lambda
    written anew every call compiles once, and a changed threshold compiles afresh; an array it
    reads counts by its contents (Numba compiles them in), at most 16 KiB of them (compaction.select.FROZEN_BYTES).
    Where it reads something else that does not hash and Numba still compiles (rare: a list, a
    dict or a set does not compile, and is refused so), it is compiled once per function object,
    and Numba fixes the globals it reads at that first call (pass a new function to change them).
    The last PREDICATES_KEPT stay compiled. Its error model is NumPy's on both and its types are Numba's
    (see the module docstring): an integer divided by zero is 0, and integers are computed in 64
    bits. Under the CUDA simulator the predicate runs as Python on NumPy scalars, whose integer
    promotion differs from Numba's compiled one (int8 * int8 wraps in int8 there, uint64 + int64
    is a float): check such predicates on a GPU or the host."""
    values = _from_pandas(values, "values")
    n, predicate, key = _checked_if(values, predicate)
    check_stream(stream)
    if not _on_device(values):
        return _compiled(lambda: _select_if_numpy(values, predicate, key), "predicate")
    if not _dtype(values).isnative:
        raise DispatchError(f"values on the device are {_dtype(values)}, not in this machine's byte order: Numba's "
                            "kernels cannot read them. Fix: compute flags yourself and call select(values, flags), "
                            "or select_if from a native copy.")
    from .kernels import predicate_flag

    v = _dev(values) if _SIM else values

    def run():
        flag_of = predicate_flag(predicate, key)
        out = _small(values, values, False, flag_of, values.dtype) if _numba_pair(values, values, stream) else None
        return out if out is not None else _device_select(values, v, flag_of, n, stream)
    return _compiled(run, "predicate")


def nonzero(flags: ArrayIn, *, stream: Stream | None = None) -> ArrayOut:
    """The indices (int64) of the non-zero flags, in order (host in, NumPy out; device in, device out)."""
    if _numba_pair(flags, flags, stream):
        out = _small(flags, None, True, _kernels().flag_nonzero, np.dtype(np.int64))
        if out is not None:
            return out
    flags = _from_pandas(flags, "flags")
    n = _check_flags(flags, None)
    check_stream(stream)
    if not _on_device(flags):
        return _nonzero_numpy(flags)
    flags = _native(flags)
    from numba import cuda

    from .kernels import flag_nonzero

    if n == 0:
        return cuda.device_array(0, np.int64)
    return _exact(_selector(stream), flag_nonzero, _dev(flags) if _SIM else flags, n, None, np.dtype(np.int64),
                  _octs(flags, n))


_STAGING = threading.local()  # a thread's own: two threads reading back at once must not share one
STAGING_KEEP = 256 << 20  # the most a thread pins: larger readbacks count first (`_read_counted`)


def _staging(nbytes: int):
    """(this thread's pinned host buffer mapped into the device's address space, its device
    pointer), grown as needed."""
    from numba import cuda

    buf = getattr(_STAGING, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        _STAGING.buf = None  # the old one is freed first
        try:
            buf = _STAGING.buf = cuda.mapped_array(max(nbytes, 1 << 16), np.uint8)
        except Exception as e:  # the driver's out-of-memory, as numba raises it
            raise DeviceError(f"read_compacted could not pin {nbytes} bytes of host memory for the records ({e}). "
                              "Fix: pass capacity= (the most records you expect), or read in pieces.") from None
    return buf, buf.device_ctypes_pointer.value


class _device_bytes:
    """`with _device_bytes(selector, nbytes) as address`: scratch device memory for one call,
    from the pool where the selector runs on the legacy default stream, else from Numba; given
    back on leaving (the caller has synchronised the stream by then, or nothing was enqueued)."""

    def __init__(self, sel: Selector, nbytes: int):
        self._sel, self._nbytes, self._owner, self._address = sel, max(nbytes, 8), None, None

    def __enter__(self) -> int:
        if stream_handle(self._sel.stream) == 0:
            self._address = memory.pool_alloc(self._nbytes)
            return self._address
        self._owner = _cuda().device_array(self._nbytes, np.uint8, stream=self._sel.stream)
        return address_of(self._owner)

    def __exit__(self, *exc) -> None:
        if self._address is not None:
            memory.pool_free(self._address)
        self._owner = self._address = None


def _read_counted(sel: Selector, values, flags, n: int, dt: np.dtype, capacity: int | None) -> np.ndarray:
    """`read_compacted` where room for every record would pin more than STAGING_KEEP bytes: the
    count first (one wait), then the kept records selected into device memory of their size and
    read back through the staged copy (`gpu.transfer`: two pinned pieces, pipelined)."""
    from cuda.bindings import driver as drv

    from ..gpu import transfer
    from .kernels import flag_nonzero

    octs = _octs(flags, n)
    count = sel.count(flag_nonzero, flags, n, octs)
    _check_capacity(count, capacity)
    out = np.empty(count, dt)
    if count:
        nbytes = count * dt.itemsize
        with _device_bytes(sel, nbytes) as address:
            sel.scatter(flag_nonzero, flags, n, _words(values, n, dt), _words(None, count, dt, address), count)
            transfer.download(drv, int(drv.cuCtxGetCurrent()[1]), out, address, stream_handle(sel.stream))
    return out


def read_compacted(values: ArrayIn, flags: ArrayIn, *, capacity: int | None = None,
                   stream: Stream | None = None) -> np.ndarray:
    """values[flags != 0] of device arrays, brought to the host: only the kept records cross the
    bus, with one synchronisation. Up to FUSED_BYTES of records with room for all, one launch
    selects them straight into pinned host memory; else they are selected into device memory and
    copied in long runs into pinned memory, the count read there too; where room for every record
    would pin more than STAGING_KEEP bytes, the count comes first and the records are read back
    in pinned pieces.
    Without a capacity the result always fits; with one, a result larger than `capacity` raises
    CapacityError naming the count needed, and nothing is lost (the inputs are untouched). Host
    arrays give the same result from the NumPy twin, so code written for both runs unchanged."""
    values, flags = _from_pandas(values, "values"), _from_pandas(flags, "flags")
    n = _check_values(values)
    _check_flags(flags, n)
    check_stream(stream)
    if capacity is not None and (isinstance(capacity, (bool, np.bool_)) or not isinstance(capacity, INTEGERS)
                                 or capacity < 0):
        raise DispatchError(f"capacity={shown(capacity)} is not a count of records. Fix: pass an int >= 0 or None.")
    if not _on_device(values, flags):  # already on the host: the NumPy twin, with the same capacity rule
        kept = _select_numpy(values, flags)
        _check_capacity(kept.size, capacity)
        return kept
    from .kernels import flag_nonzero

    flags = _native(flags)
    dt = _dtype(values)
    room = n if capacity is None else min(int(capacity), n)
    if n == 0:
        return np.zeros(0, dt)
    sel, nbytes, (word, w) = _selector(stream), room * dt.itemsize, word_type(dt)
    one_launch = room == n and nbytes <= FUSED_BYTES and w == 1 and n >= 8  # room for every record of one word
    if _SIM:  # the simulator has no mapped memory: a device array stands in for it, copied back
        from numba import cuda

        size = -(-max(nbytes, 8) // 8) * 8
        buf, dst = cuda.device_array(size, np.uint8), cuda.device_array(size, np.uint8)
        args, octs = (flag_nonzero, _dev(flags), n, _words(values, n, dt)), _octs(flags, n)
        count = sel.fused(*args, dst[:nbytes].view(word), octs) if one_launch else None
        if count is None:  # as on a GPU: one launch straight into the records' room where it has room, else three
            sel.enqueue(*args, buf[:nbytes].view(word) if w == 1 else buf[:nbytes].view(word).reshape(room, w), room,
                        octs)
            sel.copy_kept(buf.view(np.uint64), dst.view(np.uint64), buf, dst, dt.itemsize, room)
            count = sel.total()
        kept = dst.copy_to_host()
    elif nbytes > STAGING_KEEP:
        return _read_counted(sel, values, flags, n, dt, capacity)
    else:
        kept, ptr = _staging(nbytes)
        dna = _numba_array_type()
        count = None
        fast = type(values) is dna and type(flags) is dna and w == 1 and n >= 8  # the last launches, rewritten
        if fast:
            at, items = flags.device_ctypes_pointer.value or 0, values.device_ctypes_pointer.value or 0
            by_bytes = flags.dtype.itemsize == 1 and at % 8 == 0
        else:
            words, octs = _words(values, n, dt), _octs(flags, n)
        if one_launch:  # straight into the pinned records, whole once the launch is done
            count = sel.fused_at(flag_nonzero, at, flags.dtype, n, by_bytes, word, items, ptr) if fast else \
                sel.fused(flag_nonzero, flags, n, words, _words(None, n, dt, ptr), octs)
            if count is not None:
                sel.stream.synchronize()
        if count is None:  # or the one launch gave up: three, into device memory, then copied
            with _device_bytes(sel, nbytes) as address:
                if fast:
                    sel.enqueue_at(flag_nonzero, at, flags.dtype, n, by_bytes, word, items, address, room)
                else:
                    sel.enqueue(flag_nonzero, flags, n, words, _words(None, room, dt, address), room, octs)
                sel.copy_kept_at(address, ptr, dt.itemsize, room)
                count = sel.total()
    _check_capacity(count, capacity)
    from ..gpu.host import copy_bytes

    out = np.empty(count, dt)
    copy_bytes(out.view(np.uint8), np.asarray(kept)[:count * dt.itemsize])  # on several threads when large
    return out


def read_on(backend, values, flags, capacity: int | None = None) -> np.ndarray:
    """`backend.read_compacted(values, flags, capacity=...)`: `read_compacted` on the CUDA
    backend's stream; the reference backend's buffers are host arrays, so it refuses device ones."""
    if backend.name == "cuda":
        return read_compacted(values, flags, capacity=capacity, stream=backend.stream)
    if any(_is_device(a) for a in (values, flags)):
        raise DispatchError(f"read_compacted on the {backend.name} backend takes its buffers, host (NumPy) arrays; "
                            "a device array was given. Fix: pass host arrays (x.copy_to_host()), or call it on "
                            "get_backend('cuda').")
    return read_compacted(values, flags, capacity=capacity)


def _check_capacity(count: int, capacity: int | None) -> None:
    if capacity is not None and count > capacity:
        raise CapacityError(f"{count} records are selected, more than capacity={capacity}. Fix: call again with "
                            f"capacity >= {count} (or capacity=None); the inputs are unchanged.", needed=count)

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
