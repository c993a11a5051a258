"""How host inputs bind to a program's buffers: checks, output sizing and launch geometry.
Shared by every backend so they agree on what a dispatch means."""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .config import DispatchConfig
from .errors import (INTEGERS, CoverageWarning, DispatchError, HostMemoryError, LaunchError, a_type, flat_fix,
                     refuse_missing, refuse_raw_bytes, shown, warn_user)
from .ir import BufferDecl, DataType, Program, check
from .ir.types import _bf16_to_f32, _f32_to_bf16
from .ir.program import Role


@dataclass
class Binding:
    """Host arrays for one dispatch: every non-workgroup buffer by name, 1-D, in storage dtype
    (pure outputs only when bound with `allocate_outputs`); `sizes` has every buffer's count."""

    program: Program
    arrays: dict[str, np.ndarray]
    grid: tuple[int, int, int]
    workgroup: tuple[int, int, int]
    config: DispatchConfig
    sizes: dict[str, int] | None = None

    def __post_init__(self):
        if self.sizes is None:
            self.sizes = {name: a.size for name, a in self.arrays.items()}

    @property
    def invocations(self) -> int:
        """Invocations the launch runs: every workgroup of the grid, whole."""
        g, w = self.grid, self.workgroup
        return g[0] * g[1] * g[2] * w[0] * w[1] * w[2]

    def results(self) -> list[np.ndarray]:
        """The output buffers in binding order, each cut to its output_byte_range if it has one."""
        return [output_view(b, self.arrays[b.name]) for b in self.program.outputs]


def output_view(b: BufferDecl, arr: np.ndarray) -> np.ndarray:
    """The part of output `b`'s array `arr` that its output_byte_range selects (all of it without one);
    a DispatchError where the range ends past the array."""
    if b.output_byte_range is None:
        return arr
    lo, hi = (v // b.dtype.nbytes for v in b.output_byte_range)
    if hi > arr.size:
        raise DispatchError(f"output_byte_range {b.output_byte_range} of {b.name!r} ends past its "
                            f"{arr.size * b.dtype.nbytes} bytes. Fix: bind a larger buffer, or end the range "
                            "within it.")
    return arr[lo:hi]


def as_host_array(b: BufferDecl, value, where: str) -> np.ndarray:
    """`value` as a flat, C-contiguous array of b's storage dtype, for the buffer `b`.

    A 1-D array of exactly that dtype binds as it is (no copy). Anything else (lists, tuples,
    scalars, arrays of another dtype) is converted only where every value converts exactly,
    else a DispatchError names the buffer, the given and declared types and the first offending
    element. Scalars and 0-d arrays are one element; arrays of two or more dimensions, GPU arrays,
    masked elements, objects, strings, complex numbers and bools for numbers are refused.
    docs/inputs.md has the whole table."""
    want = b.dtype.storage
    if type(value) is np.ndarray and value.dtype == want and value.ndim == 1:
        return value if value.flags.c_contiguous else np.ascontiguousarray(value)
    if hasattr(value, "__cuda_array_interface__") or hasattr(value, "copy_to_host"):
        raise DispatchError(f"{where}: {b.name!r} is a GPU array, but dispatch() takes host arrays. "
                            "Fix: use backend.dispatch_resident for device data, or copy it to the host first.")
    arr = _host_values(b, value, where)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    elif arr.ndim > 1:
        raise DispatchError(f"{where}: {b.name!r} has shape {arr.shape}, but buffers are flat (1-D). "
                            f"Fix: pass {flat_fix(value)} (row-major) if the flat layout is what the program indexes.")
    if arr.dtype == want:
        out = arr
    elif arr.size == 0:
        out = np.empty(0, want)
    else:
        out = _exact(b, arr, value, where)
    return out if out.flags.c_contiguous else np.ascontiguousarray(out)


_KINDS = {"O": "Python objects rather than numbers", "U": "strings", "S": "bytes",
          "c": "complex numbers", "M": "dates", "m": "time spans", "V": "records"}


def _host_values(b: BufferDecl, value, where: str) -> np.ndarray:
    """`value` as a plain ndarray of numbers or bools (any shape, any numeric dtype), read without loss."""
    if isinstance(value, np.ma.MaskedArray):
        masked = np.flatnonzero(np.ma.getmaskarray(value))
        if masked.size:
            raise DispatchError(f"{where}: {b.name!r} is a masked array with {masked.size} masked element(s) (the "
                                f"first at flat index {int(masked[0])}), which have no value to bind. Fix: pass "
                                "x.filled(value) with the value the program should see.")
        value = value.data
    refuse_missing(value, f"{where}: {b.name!r}")
    refuse_raw_bytes(value, f"{where}: {b.name!r}")
    if isinstance(value, np.ndarray):
        arr = value if type(value) is np.ndarray else value.view(np.ndarray)
    else:
        try:
            arr = np.asarray(value)
        except MemoryError:
            raise
        except Exception as e:  # ragged lists, objects whose __array__ fails
            raise DispatchError(f"{where}: {b.name!r} ({type(value).__name__}) cannot be read as an array of numbers "
                                f"({type(e).__name__}: {e}). Fix: pass a flat list of numbers or a 1-D NumPy array "
                                f"of {b.dtype.storage}.") from None
    if arr.dtype.kind not in "biuf":
        odd = _first_odd(value, arr)
        what = _KINDS.get(arr.dtype.kind, str(arr.dtype))
        if odd and arr.dtype.kind == "O":
            v = odd[1]
            what = ("integers beyond 64 bits" if isinstance(v, int) else "None" if v is None
                    else f"values of type {type(v).__name__}")
        example = f"; element {odd[0]}: {_show(odd[1])}" if odd else ""
        raise DispatchError(f"{where}: {b.name!r} holds {what}, not {b.dtype} values (given {_given(value, arr)}"
                            f"{example}). Fix: pass numbers that {b.dtype} holds, e.g. a NumPy array of "
                            f"{b.dtype.storage}.")
    if arr.ndim == 1 and isinstance(value, (list, tuple)):
        arr = _check_elements(b, value, arr, where)
    return arr


def _check_elements(b: BufferDecl, values: list | tuple, arr: np.ndarray, where: str,
                    widen: bool = True) -> np.ndarray:
    """`arr`, NumPy's reading of the list `values`, where it holds exactly the listed values; else a
    DispatchError for what the reading changed: bools counted as numbers (`[True, 2]`), integers rounded
    to a common float type (`[2**53 + 1, 0.5]`, `[np.uint64(2**64 - 1), np.int64(-1)]`). `widen`: a
    list of non-negative ints NumPy read as floats is read as uint64 instead (False where `values`
    are only some of an array's elements)."""
    types = set(map(type, values))
    kind = arr.dtype.kind
    if widen and values and types <= {int} and kind == "f" and min(values) >= 0:
        # NumPy reads [2**64 - 1, 0] as float64 (no common type of uint64 and int64): uint64 holds them all
        arr, kind = np.array(values, dtype=np.uint64), "u"
    if widen and values and kind == "f" and b.dtype.is_int and all(
            t is int or issubclass(t, np.integer) for t in types):
        # integers no one NumPy type holds ([2**64 - 1, -1]): what counts is whether the buffer's type does
        dt = b.dtype
        for i, v in enumerate(values):
            if not dt.min <= int(v) <= dt.max:
                _refuse(b, arr, values, where, i, f"{dt} holds integers from {dt.min} to {dt.max}",
                        f"pass values {dt} holds (drop or change element {i}), or a buffer of a type that holds "
                        "them", element=v)
        return np.array([int(v) for v in values], dtype=dt.storage)
    if (types <= {bool, np.bool_} and kind == "b") or (types <= {int} and kind in "iu") or (types <= {float} and kind == "f"):
        return arr  # NumPy reads these exactly
    if len(types) == 1 and issubclass(t := next(iter(types)), np.generic) and np.dtype(t) == arr.dtype:
        return arr  # NumPy scalars of one type
    got = arr.tolist()
    for i, (v, a) in enumerate(zip(values, got)):
        x = v.item() if isinstance(v, (np.generic, np.ndarray)) and v.dtype.itemsize <= 8 else v
        if isinstance(x, bool) and kind != "b":
            if b.dtype.is_bool:
                continue  # bools among the integers 0 and 1: all mean what they say
            _refuse(b, arr, values, where, i, f"{b.dtype} buffers take numbers, not bools",
                    f"pass numbers (np.asarray(x, np.{b.dtype.storage}) counts True as 1)", element=v)
        if not (x == a or (x != x and a != a)):
            _refuse(b, arr, values, where, i, f"the list mixes types and no common type holds every element "
                    f"exactly: NumPy reads it as {_show(a)}",
                    f"pass a NumPy array of {b.dtype.storage} holding the values you mean (np.asarray(x, "
                    f"np.{b.dtype.storage}) converts them, rounding where {b.dtype} must)", element=v)
    return arr


def _given(value, arr: np.ndarray) -> str:
    """What the user passed, for messages: 'a float64 array', 'a list, read as int64', 'a float'."""
    if isinstance(value, np.ndarray):
        what = f"{arr.dtype} array"
    elif isinstance(value, (list, tuple)):
        what = f"{type(value).__name__}, read as {arr.dtype}"
    else:
        what = type(value).__name__
    return ("an " if what[0] in "aeio" else "a ") + what


def _first_odd(value, arr: np.ndarray) -> tuple[int, object] | None:
    """(flat index, element) of the first element of `value` that is not a real number or a bool, or is
    an integer no NumPy integer type holds; None if there is none."""
    flat = value if isinstance(value, (list, tuple)) and arr.ndim == 1 else arr.reshape(-1)
    for i, v in enumerate(flat):
        if isinstance(v, (np.generic, np.ndarray)) and v.ndim == 0:
            if v.dtype.kind not in "biuf":
                return i, v
        elif isinstance(v, int) and not isinstance(v, bool):
            if not -2**63 <= v < 2**64:
                return i, v
        elif not isinstance(v, (bool, float)):
            return i, v
    return None


def _exact(b: BufferDecl, arr: np.ndarray, value, where: str) -> np.ndarray:
    """`arr` (numbers or bools, 1-D, not empty, not of b's storage dtype) in b's storage dtype where every
    value converts exactly; else a DispatchError."""
    dt, want, kind = b.dtype, b.dtype.storage, arr.dtype.kind
    if dt.is_bool:
        if kind == "b":
            return arr.astype(np.uint32)
        ok = (arr == 0) | (arr == 1) if kind in "iu" else np.zeros(arr.shape, bool)
        return _convert(b, arr, value, where, ok, "bool buffers take bools, or the integers 0 and 1",
                        fix="pass a NumPy bool array (np.asarray(x) != 0 if every nonzero value means true), or "
                        "0/1 integers")
    if kind == "b":
        return _refuse(b, arr, value, where, 0, f"{dt} buffers take numbers, not bools",
                       f"pass numbers (np.asarray(x, np.{want}) counts True as 1)")
    if dt.is_int:
        if kind == "f":
            wide = arr if arr.dtype.itemsize >= 8 else arr.astype(np.float64)  # bounds below are exact there
            with np.errstate(invalid="ignore"):
                ok = np.isfinite(wide) & (np.floor(wide) == wide) & (wide >= float(dt.min)) & (wide < float(dt.max) + 1)
        else:
            ok = _in_range(arr, dt.min, dt.max)
        return _convert(b, arr, value, where, ok, f"{dt} holds integers from {dt.min} to {dt.max}")
    if dt is DataType.BF16:
        if kind != "f":
            return _refuse(b, arr, value, where, 0, "bf16 buffers take float values, or raw bfloat16 bit patterns "
                           "as uint16; other integers could mean either",
                           "pass np.asarray(x, np.float32) for values, or np.asarray(x, np.uint16) for raw bits")
        with np.errstate(over="ignore", invalid="ignore"):
            bits = _f32_to_bf16(arr.astype(np.float32))
        ok = _same_values(_bf16_to_f32(bits), arr)
        return _convert(b, arr, value, where, ok, "bf16 holds 8 significant bits and this value is not one of its "
                        "values", converted=bits, fix="pass values bf16 represents exactly, or round them yourself "
                        "to raw bits with vyre_numba.ir.f32_to_bf16_bits(x)")
    with np.errstate(over="ignore", invalid="ignore"):
        conv = arr.astype(want)
    ok = _same_values(conv, arr)
    return _convert(b, arr, value, where, ok, f"{dt} represents this value only approximately or not at all", conv)


def _in_range(arr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    info = np.iinfo(arr.dtype)
    ok = np.ones(arr.shape, bool)
    if info.min < lo:
        ok &= arr >= np.array(lo).astype(arr.dtype)
    if info.max > hi:
        ok &= arr <= np.array(hi).astype(arr.dtype)
    return ok


def _same_values(conv: np.ndarray, arr: np.ndarray) -> np.ndarray:
    """Where `conv` holds exactly the value of `arr` (NaN for NaN), comparing without rounding."""
    if arr.dtype.kind in "iu" and conv.dtype.kind == "f":  # through the widest exact integers
        finite = np.isfinite(conv)
        back = np.where(finite, conv, 0).astype(np.float64)
        same = finite & (back == arr.astype(np.float64))
        big = np.flatnonzero(np.abs(back) >= 2.0**53)
        if big.size:  # float64 itself rounds there: compare as integers
            same[big] = [int(c) == int(a) for c, a in zip(conv[big].tolist(), arr[big].tolist())]
        return same
    wide = np.float64 if max(conv.dtype.itemsize, arr.dtype.itemsize) <= 8 else np.longdouble
    c, a = conv.astype(wide), arr.astype(wide)
    return (c == a) | (np.isnan(c) & np.isnan(a))


def _convert(b: BufferDecl, arr: np.ndarray, value, where: str, ok: np.ndarray, why: str,
             converted: np.ndarray | None = None, fix: str | None = None) -> np.ndarray:
    if not ok.all():
        return _refuse(b, arr, value, where, int(np.argmin(ok)), why, fix)
    return converted if converted is not None else arr.astype(b.dtype.storage)


_NO_ELEMENT = object()


def _show(x) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


def _refuse(b: BufferDecl, arr: np.ndarray, value, where: str, index: int, why: str, fix: str | None = None,
            element=_NO_ELEMENT):
    into = where == "write"  # backend.write: a buffer of a dtype, declared nowhere
    fix = fix or (f"pass a NumPy array of {b.dtype.storage} holding the values you mean (convert and round "
                  "explicitly), or " + ("upload the values as a new buffer of their own type (backend.upload(values))"
                                        if into else "declare the buffer with the data's type"))
    subject = (f"the buffer holds {b.dtype.storage}" if into else
               "NumPy reads the list as one array" if where == "upload" else f"{b.name!r} is declared {b.dtype}")
    raise DispatchError(f"{where}: {subject}, but the given values ({_given(value, arr)}) "
                        f"do not all convert exactly (element {index}: "
                        f"{_show(arr.reshape(-1)[index] if element is _NO_ELEMENT else element)}): {why}. Fix: {fix}.")


def check_config(config) -> DispatchConfig:
    """`config`, or the default configuration for None; anything else is refused."""
    if config is None:
        return _DEFAULT
    if not isinstance(config, DispatchConfig):
        raise DispatchError(f"config is {a_type(config)}, not a DispatchConfig. "
                            "Fix: pass vyre_numba.DispatchConfig(grid=..., ...).")
    return config


_DEFAULT = DispatchConfig()


def _check_size(b: BufferDecl, size: int, where: str) -> None:
    if b.count and size != b.count:
        raise DispatchError(f"{where}: {b.name!r} is declared with {b.count} elements, got {size}. "
                            f"Fix: pass exactly {b.count} elements or declare count=0.")
    if size >= 2**32:
        raise DispatchError(f"{where}: {b.name!r} has {size} elements; lengths and indices are u32. "
                            "Fix: split the data into dispatches of fewer than 2**32 elements.")


def bind(program: Program, inputs: Sequence | Mapping | None, config: DispatchConfig | None = None,
         sizes: Mapping[str, int] | None = None, *, copy_inputs: bool = True,
         allocate_outputs: bool = True, before_outputs=None, call: str = "dispatch") -> Binding:
    """Check `inputs` against `program` and build the buffers of one dispatch.

    inputs: the input-role buffers (read_only, uniform, read_write) in binding order, or a dict by name;
    each converted by `as_host_array` (exact conversions only).
    sizes: element counts of output-only buffers declared with count=0; by default they take the
    largest input's length. read_write buffers are copied unless copy_inputs is False; pure
    outputs get zeroed host arrays unless allocate_outputs is False (a device backend that makes
    its own needs only their sizes); `call` names the caller's call in messages. Every mistake
    raises a DispatchError (LaunchError for the launch geometry) before anything is allocated for
    the outputs; `before_outputs(binding)`, a backend's own check of the launch, runs then too
    (its binding has no outputs yet).
    """
    check(program)
    config = check_config(config)
    decls = program.inputs
    names = [b.name for b in decls]
    where = f"{call} of {program.name!r}"
    if inputs is None:
        inputs = ()
    if isinstance(inputs, Mapping):
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise DispatchError(f"{where}: [{', '.join(sorted(map(repr, unknown)))}] are not input buffers "
                                f"(inputs: {names}). Fix: key the dict by the names of the program's input "
                                "buffers (outputs are created for you).")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise DispatchError(f"{where}: missing inputs {missing}. Fix: pass an array for each of them.")
        values = [inputs[n] for n in names]
    elif isinstance(inputs, (list, tuple)):
        try:
            values = list(inputs)
        except (ValueError, OverflowError) as e:  # a subclass whose __len__ answers -1 or past sys.maxsize
            raise DispatchError(f"{where}: len() of the {type(inputs).__name__} of inputs fails ({e}). Fix: pass a "
                                "plain list or tuple.") from None
        if len(values) != len(decls):
            raise DispatchError(f"{where}: expected {len(decls)} input(s) {names} in binding "
                                f"order, got {len(values)}. Fix: pass one array per input buffer (outputs are "
                                "created for you), or a dict by name.")
    else:
        raise DispatchError(f"{where}: inputs is {a_type(inputs)}, not a list or dict of arrays. Fix: pass "
                            f"[x, ...] in binding order ({names}) or {{'name': x, ...}}"
                            f"{' (a single array goes in a list: [x])' if isinstance(inputs, np.ndarray) else ''}.")
    arrays: dict[str, np.ndarray] = {}
    for b, v in zip(decls, values):
        try:
            if isinstance(v, np.ndarray) and v.ndim == 1:  # sizes first: a strided view is copied to convert it
                _check_size(b, v.size, where)
            arr = as_host_array(b, v, where)
            _check_size(b, arr.size, where)
            arrays[b.name] = arr.copy() if (b.role is Role.INOUT and copy_inputs) else arr
        except MemoryError:
            raise HostMemoryError(f"{where}: no host memory to convert or copy input {b.name!r}. Fix: pass a "
                                f"contiguous 1-D array of {b.dtype.storage} (bound without a copy when read-only), "
                                "or dispatch less data at a time.") from None
    counts = _output_counts(program, arrays, sizes, where)
    grid, wg = launch_geometry(program, config, counts)
    if before_outputs is not None:
        before_outputs(Binding(program, arrays, grid, wg, config, counts))
    if allocate_outputs:
        for b in program.outputs:
            if b.role is Role.OUTPUT:
                try:
                    arrays[b.name] = np.zeros(counts[b.name], dtype=b.dtype.storage)
                except MemoryError:
                    raise HostMemoryError(f"{where}: no host memory for output {b.name!r} "
                                        f"({counts[b.name] * b.dtype.nbytes} bytes). Fix: dispatch less data at a "
                                        "time.") from None
    return Binding(program, arrays, grid, wg, config, counts)


def _output_counts(program: Program, arrays: Mapping[str, np.ndarray], sizes, where: str) -> dict[str, int]:
    """Element counts of every bound buffer: the inputs' sizes, and the pure outputs' from `sizes`, their
    declared count or the largest input."""
    if sizes is None:
        sizes = {}
    if not isinstance(sizes, Mapping):
        raise DispatchError(f"{where}: sizes is {a_type(sizes)}, not a dict. "
                            "Fix: pass sizes={'output_name': element_count}.")
    pure = [b for b in program.outputs if b.role is Role.OUTPUT]
    unknown = sorted(repr(k) for k in sizes if k not in {b.name for b in pure})
    if unknown:
        raise DispatchError(f"{where}: sizes names {', '.join(unknown)}, which are not output-only buffers "
                            f"({[b.name for b in pure]}). Fix: give sizes only for buffers declared with "
                            "BufferDecl.output, keyed by name.")
    default = max((a.size for a in arrays.values()), default=None)
    counts = {name: a.size for name, a in arrays.items()}
    for b in pure:
        if b.name in sizes:
            size = sizes[b.name]
            if (isinstance(size, (bool, np.bool_)) or not isinstance(size, INTEGERS) or not 0 <= size < 2**32
                    or (b.count and size != b.count)):
                fix = (f"pass {b.count}, the count it is declared with, or leave {b.name!r} out of sizes" if b.count
                       else "pass an int from 0 to 2**32 - 1 (lengths are u32)")
                raise DispatchError(f"{where}: sizes[{b.name!r}]={shown(size)} is not a valid element count"
                                    f"{f' (declared {b.count})' if b.count else ''}. Fix: {fix}.")
        elif b.count:
            size = b.count
        elif default is not None:
            size = default
        else:
            raise DispatchError(f"{where}: output {b.name!r} has count=0 and there is no input to size it from. "
                                f"Fix: declare a count, or pass sizes={{{b.name!r}: n}}.")
        counts[b.name] = int(size)
    return counts


STRIDED_FIX = ("Fix: dispatch on a contiguous copy you keep (c = np.ascontiguousarray(x), or "
               "cupy.ascontiguousarray on the GPU) and copy its results back (x[...] = c): the program writes "
               "in place, so a copy made for the call alone would take the writes.")


def storage_mismatch(where: str, decl, have) -> DispatchError:
    """The error for a resident buffer of dtype `have` bound to `decl`, whose storage differs."""
    said, fix = _STORED.get(decl.dtype, ("", f"allocate it with dtype {decl.dtype.storage}"))
    if decl.dtype is DataType.BOOL and np.dtype(have) == np.bool_:  # bools convert exactly: no 0.5 to warn of
        fix = (f"upload x.astype(np.uint32) (True is 1), or make the buffer for the program, "
               f"backend.allocate(program, {decl.name!r}, n)")
    return DispatchError(f"{where}: {decl.name!r} is declared {decl.dtype}{said} but the array holds "
                         f"{np.dtype(have)}. Fix: {fix}.")


_STORED = {DataType.BOOL: (" (stored as uint32: 0 or 1 in one word each)",
                           "upload (x != 0).astype(np.uint32) (nonzero is true; a plain astype would truncate 0.5 "
                           "to false and wrap 2**32 to 0)"),
           DataType.BF16: (" (stored as its raw bits, uint16)", "upload ir.f32_to_bf16_bits(x)")}


def launch_geometry(program: Program, config: DispatchConfig, sizes: Mapping[str, int]) -> tuple[tuple, tuple]:
    """(grid, workgroup) of a dispatch whose bound buffers have element counts `sizes` (by name):
    `config.grid`, else enough workgroups along x to cover the largest output (the largest buffer
    when there is no output, one workgroup when there is no buffer).

    Every dispatch of every backend, host and resident, goes through here, so all of them refuse the
    same things: a launch over the limits every CUDA device has (LaunchError, see
    `check_launch_limits`), an output_byte_range that ends past its buffer, and a grid barrier
    without a cooperative launch (DispatchError)."""
    wg = program.workgroup_size if config.workgroup in (None, "auto", "tune") else config.workgroup
    if config.grid is not None:
        grid = config.grid
    else:
        outputs = [sizes[b.name] for b in program.outputs]
        cover = max(outputs) if outputs else max(sizes.values(), default=wg[0])
        grid = (-(-cover // wg[0]), 1, 1)
        if program.length_guards:
            _warn_uncovered(program, sizes, grid[0] * wg[0], wg[0])
    check_launch_limits(program.name, grid, wg)
    for b in program.outputs:
        r = b.output_byte_range
        if r is not None and r[1] > sizes[b.name] * b.dtype.nbytes:
            raise DispatchError(f"dispatch of {program.name!r}: output_byte_range {r} of {b.name!r} ends past its "
                                f"{sizes[b.name] * b.dtype.nbytes} bytes ({sizes[b.name]} elements) at this dispatch. "
                                f"Fix: bind a buffer of at least {-(-r[1] // b.dtype.nbytes)} elements (for an "
                                "output sized at dispatch, pass sizes=... or a longer input), or end the range "
                                "within it.")
    if not config.cooperative and "grid_sync" in program.capabilities:
        raise DispatchError(f"program {program.name!r} has barrier('grid'), which needs every workgroup resident at "
                            "once. Fix: dispatch it with DispatchConfig(cooperative=True) (on the GPU the grid must "
                            "then fit on the device at once).")
    return grid, wg


_ONCE = threading.local()  # the CoverageWarnings this thread's call in `coverage_once` has issued


def _seen_during(make: Callable[[Any], Any], doc: str) -> Callable[[Callable], Callable]:
    """A decorator (saying `doc`) running its method with this thread's set of CoverageWarnings
    issued made by `make(the set of the call around it, or None)`, and that set back afterwards."""
    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def run(*args, **kwargs):
            outer = getattr(_ONCE, "seen", None)
            _ONCE.seen = make(outer)
            try:
                return method(*args, **kwargs)
            finally:
                _ONCE.seen = outer
        return run
    decorate.__doc__ = doc
    return decorate


class _Everything:
    def __contains__(self, _) -> bool:
        return True

    def add(self, _) -> None:
        pass


coverage_once = _seen_during(
    lambda outer: set() if outer is None else outer,
    "Run the method issuing each distinct CoverageWarning once a call: a sequence, fusion or megakernel checks its "
    "steps more than once, and a sequence may repeat one step many times (inside another such call: that call's set).")
coverage_said = _seen_during(
    lambda outer: _Everything(),
    "Run the method issuing no CoverageWarning: a replay runs what its recording warned of (as the GPU's graph "
    "replay, which binds nothing, does).")


def _warn_uncovered(program: Program, sizes: Mapping[str, int], launched: int, wx: int) -> None:
    """A CoverageWarning where a buffer the program guards the invocation id with is longer than the
    invocations a launch sized by the outputs has."""
    longer = [(sizes[b], b) for b in program.length_guards if sizes.get(b, 0) > launched]
    if longer:
        size, name = max(longer)
        seen = getattr(_ONCE, "seen", None)
        if seen is not None:
            key = (program.digest(), size, name, launched, wx)
            if key in seen:
                return
            seen.add(key)
        warn_user(CoverageWarning(
            f"dispatch of {program.name!r}: the launch covers its outputs ({launched} invocations), but the program "
            f"compares the invocation id with buf_len({name!r}), {size} elements: invocations from {launched} on "
            f"never run, so the rest of {name!r} is not visited. Fix: pass DispatchConfig(grid=({-(-size // wx)}, 1, "
            f"1)) to cover {name!r} (or loop over it in a grid-stride loop), or compare with an output's length if "
            f"the launch is meant to cover only the outputs."))


MAX_WORKGROUP = 1024
MAX_WORKGROUP_AXES = (1024, 1024, 64)
MAX_GRID_AXES = (2**31 - 1, 65535, 65535)


def check_launch_limits(name: str, grid: tuple, wg: tuple) -> None:
    """Raise LaunchError unless (grid, workgroup) is within what every CUDA device allows: at most
    `MAX_WORKGROUP` invocations per workgroup and `MAX_WORKGROUP_AXES` per axis, at most
    `MAX_GRID_AXES` workgroups per axis, and at most 2**32 invocations along each axis (u32 ids).
    Both backends check it, so a launch that runs on one runs on the other."""
    where = f"launch of {name!r} with grid {tuple(grid)} x workgroup {tuple(wg)}"
    threads = wg[0] * wg[1] * wg[2]
    if threads > MAX_WORKGROUP or any(w > m for w, m in zip(wg, MAX_WORKGROUP_AXES)):
        raise LaunchError(f"{where}: a workgroup may have at most {MAX_WORKGROUP} invocations and "
                          f"{MAX_WORKGROUP_AXES} per axis (x, y, z) on every backend (it has {threads}). Fix: use a "
                          "smaller workgroup (DispatchConfig(workgroup=...) or the program's workgroup_size) and "
                          "more workgroups.")
    if any(g > m for g, m in zip(grid, MAX_GRID_AXES)):
        raise LaunchError(f"{where}: the grid may have at most {MAX_GRID_AXES} workgroups per axis (x, y, z) on "
                          "every backend. Fix: move workgroups to the x axis, use larger workgroups, or loop "
                          "inside the program over several elements per invocation.")
    for axis in range(3):
        if grid[axis] * wg[axis] > 2**32:
            raise LaunchError(f"{where}: {grid[axis] * wg[axis]} invocations along axis {'xyz'[axis]} overflow the "
                              "u32 invocation id (at most 2**32). Fix: split the work into several dispatches, or "
                              "loop inside the program over several elements per invocation.")


def check_resident(program: Program, buffers, what: str = "dispatch_resident") -> list:
    """The resident buffers of a dispatch in binding order, from a sequence or a dict by name."""
    bound = program.bound_buffers
    if isinstance(buffers, Mapping):
        missing = [d.name for d in bound if d.name not in buffers]
        unknown = sorted(repr(k) for k in buffers if k not in {d.name for d in bound})
        if missing or unknown:
            local = {repr(b.name) for b in program.buffers if b.is_shared}  # declared, but never bound
            stray = [name for name in unknown if name not in local]
            said = ([f"missing buffers {missing}"] if missing else []) + ([f"no buffer is named {', '.join(stray)}"]
                                                                          if stray else [])
            said += [f"{name} is a workgroup buffer (made for each workgroup, never bound)" for name in unknown
                     if name in local]
            fix = ("pass one resident buffer for every non-workgroup buffer, outputs included"
                   + (f", and drop {', '.join(unknown)} (its names: {[d.name for d in bound]})" if unknown else ""))
            raise DispatchError(f"{what} of {program.name!r}: {'; '.join(said)}. Fix: {fix}.")
        return [buffers[d.name] for d in bound]
    if not isinstance(buffers, (list, tuple)):
        raise DispatchError(f"{what} of {program.name!r}: buffers is {a_type(buffers)}, not a list or dict. "
                            f"Fix: pass [buffer, ...] in binding order ({[d.name for d in bound]}) or a dict by name.")
    buffers = list(buffers)
    if len(buffers) != len(bound):
        raise DispatchError(f"{what} of {program.name!r}: expected {len(bound)} buffers {[d.name for d in bound]} "
                            f"in binding order, got {len(buffers)}. Fix: pass one resident buffer per "
                            "non-workgroup buffer, outputs included.")
    return buffers


def check_unaliased(decls, shares, where: str) -> None:
    """A DispatchError where two of the buffers `decls` share memory (`shares(i, j)`) and one of
    them is written: a race."""
    for i, a in enumerate(decls):
        for j in range(i + 1, len(decls)):
            b = decls[j]
            if (a.access.writable or b.access.writable) and shares(i, j):
                raise DispatchError(f"{where}: {a.name!r} and {b.name!r} share memory and one of them is written, "
                                    "a race. Fix: bind distinct buffers (copy one of them first).")
