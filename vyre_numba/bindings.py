"""How host inputs bind to a program's buffers: checks, output sizing and launch geometry.
Shared by every backend so they agree on what a dispatch means."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .config import DispatchConfig
from .errors import DispatchError, LaunchError
from .ir import BufferDecl, DataType, Program, bf16_bits_to_f32, check, f32_to_bf16_bits
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
        g, w = self.grid, self.workgroup
        return g[0] * g[1] * g[2] * w[0] * w[1] * w[2]

    def results(self) -> list[np.ndarray]:
        """The output buffers in binding order, each cut to its output_byte_range if it has one."""
        return [output_view(b, self.arrays[b.name]) for b in self.program.outputs]


def output_view(b: BufferDecl, arr: np.ndarray) -> np.ndarray:
    if b.output_byte_range is None:
        return arr
    lo, hi = (v // b.dtype.nbytes for v in b.output_byte_range)
    return arr[lo:hi]


def as_host_array(b: BufferDecl, value, where: str) -> np.ndarray:
    """`value` as a flat array of b's storage dtype: a 1-D array of that dtype as it is (no copy);
    anything else (lists, scalars, arrays of another dtype) converted only where every value
    converts exactly, else a DispatchError naming the buffer, the types and an offending value.
    Accepted shapes: 1-D, and scalars or 0-d arrays as one element."""
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
        raise DispatchError(f"{where}: {b.name!r} has shape {arr.shape}, but buffers are flat. "
                            f"Fix: pass x.reshape(-1) (row-major) if the flat layout is what the program indexes.")
    out = arr if arr.dtype == want else _exact(b, arr, where)
    return out if out.flags.c_contiguous else np.ascontiguousarray(out)


def _host_values(b: BufferDecl, value, where: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError, OverflowError) as e:  # ragged lists, odd objects
            raise DispatchError(f"{where}: {b.name!r} is not an array of numbers ({type(e).__name__}: {e}). "
                                f"Fix: pass a flat list or a NumPy array of {b.dtype.storage}.") from None
    if arr.dtype.kind not in "biuf":
        what = {"O": "objects (None, huge ints or mixed values)", "U": "strings", "S": "bytes",
                "c": "complex numbers", "M": "dates", "m": "time spans"}.get(arr.dtype.kind, str(arr.dtype))
        raise DispatchError(f"{where}: {b.name!r} holds {what}, not {b.dtype} values. "
                            f"Fix: pass a NumPy array of {b.dtype.storage} (e.g. np.asarray(x, dtype=np.{b.dtype.storage})).")
    return arr


def _exact(b: BufferDecl, arr: np.ndarray, where: str) -> np.ndarray:
    """`arr` in b's storage dtype where every value converts exactly; else a DispatchError."""
    dt, want, kind = b.dtype, b.dtype.storage, arr.dtype.kind
    if dt.is_bool:
        if kind == "b":
            return arr.astype(np.uint32)
        ok = (arr == 0) | (arr == 1) if kind in "iu" else None
        return _convert(b, arr, where, ok, "bool buffers take bools, or the integers 0 and 1")
    if kind == "b":
        return _refuse(b, arr, where, 0, f"{dt} buffers take numbers, not bools; use x.astype(np.{want}) to count "
                                         "True as 1")
    if dt.is_int:
        if kind == "f":
            with np.errstate(invalid="ignore"):
                ok = np.isfinite(arr) & (np.floor(arr) == arr) & (arr >= float(dt.min)) & (arr < float(dt.max) + 1)
        else:
            ok = _in_range(arr, dt.min, dt.max)
        return _convert(b, arr, where, ok, f"{dt} holds integers from {dt.min} to {dt.max}")
    if dt is DataType.BF16:
        with np.errstate(over="ignore", invalid="ignore"):
            f32 = arr.astype(np.float32)
            bits = f32_to_bf16_bits(f32)
            back = bf16_bits_to_f32(bits)
        ok = _same_values(back, arr)
        if not ok.all():
            return _refuse(b, arr, where, int(np.flatnonzero(~ok)[0]), "bf16 holds 8 significant bits; pass values "
                           "bf16 represents exactly, or raw bf16 bits as uint16 (ir.f32_to_bf16_bits(x))")
        return bits
    with np.errstate(over="ignore", invalid="ignore"):
        conv = arr.astype(want)
    ok = _same_values(conv, arr)
    return _convert(b, arr, where, ok, f"{dt} represents these values only approximately or not at all", conv)


def _in_range(arr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    info = np.iinfo(arr.dtype)
    if info.min >= lo and info.max <= hi:
        return np.ones(arr.shape, bool)
    ok = np.ones(arr.shape, bool)
    if info.min < lo:
        ok &= arr >= np.array(lo).astype(arr.dtype) if lo >= info.min else True
    if info.max > hi:
        ok &= arr <= np.array(hi).astype(arr.dtype) if hi <= info.max else True
    return ok


def _same_values(conv: np.ndarray, arr: np.ndarray) -> np.ndarray:
    """Where `conv` holds exactly the value of `arr` (NaN for NaN), comparing without rounding."""
    if arr.dtype.kind in "iu" and conv.dtype.kind == "f":  # through the widest exact integers
        back = np.where(np.isfinite(conv), conv, 0).astype(np.float64)
        same = np.isfinite(conv) & (back == arr.astype(np.float64))
        big = np.abs(back) >= 2.0**53
        if big.any():  # float64 itself rounds there: compare as integers
            idx = np.flatnonzero(big)
            same[idx] = [int(c) == int(a) for c, a in zip(conv.reshape(-1)[idx], arr.reshape(-1)[idx])]
        return same
    wide = np.float64 if max(conv.dtype.itemsize, arr.dtype.itemsize) <= 8 else np.longdouble
    c, a = conv.astype(wide), arr.astype(wide)
    return (c == a) | (np.isnan(c) & np.isnan(a))


def _convert(b, arr, where, ok, why, converted=None) -> np.ndarray:
    if ok is None or not np.all(ok):
        bad = 0 if ok is None else int(np.flatnonzero(~np.asarray(ok).reshape(-1))[0])
        return _refuse(b, arr, where, bad, why)
    return converted if converted is not None else arr.astype(b.dtype.storage)


def _refuse(b, arr, where, index: int, why: str):
    flat = arr.reshape(-1)
    example = f" (element {index}: {flat[index]!r})" if flat.size else ""
    raise DispatchError(f"{where}: {b.name!r} is declared {b.dtype}, but the given {arr.dtype} values do not all "
                        f"convert exactly{example}: {why}. Fix: pass a NumPy array of {b.dtype.storage} holding the "
                        "values you mean (convert and round explicitly), or declare the buffer with the data's type.")


def check_config(config) -> DispatchConfig:
    """`config`, or the default configuration for None; anything else is refused."""
    if config is None:
        return _DEFAULT
    if not isinstance(config, DispatchConfig):
        raise DispatchError(f"config is a {type(config).__name__}, not a DispatchConfig. "
                            "Fix: pass vyre_numba.DispatchConfig(grid=..., ...).")
    return config


_DEFAULT = DispatchConfig()


def bind(program: Program, inputs: Sequence | Mapping | None, config: DispatchConfig | None = None,
         sizes: Mapping[str, int] | None = None, *, copy_inputs: bool = True,
         allocate_outputs: bool = True) -> Binding:
    """Check `inputs` against `program` and build the buffers of one dispatch.

    inputs: the input-role buffers (read_only, uniform, read_write) in binding order, or a dict by name.
    sizes: element counts of output-only buffers declared with count=0; by default they take the
    largest input's length. read_write buffers are copied unless copy_inputs is False; pure
    outputs get zeroed host arrays unless allocate_outputs is False (a device backend that makes
    its own needs only their sizes).
    """
    check(program)
    config = check_config(config)
    decls = program.inputs
    where = f"dispatch of {program.name!r}"
    if inputs is None:
        inputs = ()
    if not isinstance(inputs, (Mapping, list, tuple)):
        raise DispatchError(f"{where}: inputs is a {type(inputs).__name__}, not a list or dict of arrays. Fix: pass "
                            f"[x, ...] in binding order ({[b.name for b in decls]}) or {{'name': x, ...}}.")
    if isinstance(inputs, Mapping):
        unknown = set(inputs) - {b.name for b in decls}
        if unknown:
            raise DispatchError(f"{where}: {sorted(unknown)} are not input buffers (inputs: "
                                f"{[b.name for b in decls]}). Fix: pass only the program's input buffers.")
        missing = [b.name for b in decls if b.name not in inputs]
        if missing:
            raise DispatchError(f"{where}: missing inputs {missing}. Fix: pass an array for each of them.")
        values = [inputs[b.name] for b in decls]
    else:
        values = list(inputs)
        if len(values) != len(decls):
            raise DispatchError(f"{where}: expected {len(decls)} input(s) {[b.name for b in decls]} in binding "
                                f"order, got {len(values)}. Fix: pass one array per input buffer (outputs are "
                                "created for you), or a dict by name.")
    arrays: dict[str, np.ndarray] = {}
    for b, v in zip(decls, values):
        arr = as_host_array(b, v, where)
        if b.count and arr.size != b.count:
            raise DispatchError(f"{where}: {b.name!r} is declared with {b.count} elements, got {arr.size}. "
                                f"Fix: pass exactly {b.count} elements or declare count=0.")
        if arr.size >= 2**32:
            raise DispatchError(f"{where}: {b.name!r} has {arr.size} elements; indices are u32. "
                                "Fix: split the data into dispatches of fewer than 2**32 elements.")
        arrays[b.name] = arr.copy() if (b.role is Role.INOUT and copy_inputs) else arr
    if sizes is None:
        sizes = {}
    if not isinstance(sizes, Mapping):
        raise DispatchError(f"{where}: sizes is a {type(sizes).__name__}, not a dict. "
                            "Fix: pass sizes={'output_name': element_count}.")
    unknown = sorted(map(repr, set(sizes) - {b.name for b in program.outputs if b.role is Role.OUTPUT}))
    if unknown:
        raise DispatchError(f"{where}: sizes names {', '.join(unknown)}, which are not output-only buffers. "
                            "Fix: give sizes only for buffers declared with BufferDecl.output.")
    default = max((a.size for a in arrays.values()), default=None)
    counts = {name: a.size for name, a in arrays.items()}
    for b in program.outputs:
        if b.role is not Role.OUTPUT:
            continue
        if b.name in sizes:
            size = sizes[b.name]
            if (isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or not 0 <= size < 2**32
                    or (b.count and size != b.count)):
                raise DispatchError(f"{where}: sizes[{b.name!r}]={size!r} is not a valid element count"
                                    f"{f' (declared {b.count})' if b.count else ''}. Fix: pass an int from 0 to "
                                    "2**32 - 1 (lengths are u32).")
        elif b.count:
            size = b.count
        elif default is not None:
            size = default
        else:
            raise DispatchError(f"{where}: output {b.name!r} has count=0 and there is no input to size it from. "
                                f"Fix: declare a count, or pass sizes={{{b.name!r}: n}}.")
        counts[b.name] = int(size)
    for b in program.outputs:
        r = b.output_byte_range
        if r is not None and r[1] > counts[b.name] * b.dtype.nbytes:
            raise DispatchError(f"{where}: output_byte_range {r} of {b.name!r} ends past its "
                                f"{counts[b.name] * b.dtype.nbytes} bytes at this dispatch. Fix: pass a larger "
                                "buffer (or sizes=...), or end the range within it.")
    grid, wg = launch_geometry(program, config, counts)
    if allocate_outputs:
        for b in program.outputs:
            if b.role is Role.OUTPUT:
                try:
                    arrays[b.name] = np.zeros(counts[b.name], dtype=b.dtype.storage)
                except MemoryError:
                    raise DispatchError(f"{where}: no host memory for output {b.name!r} "
                                        f"({counts[b.name] * b.dtype.nbytes} bytes). Fix: dispatch less data at a "
                                        "time.") from None
    return Binding(program, arrays, grid, wg, config, counts)


def launch_geometry(program: Program, config: DispatchConfig, sizes: Mapping[str, int]) -> tuple[tuple, tuple]:
    """(grid, workgroup) of a dispatch whose bound buffers have element counts `sizes` (by name):
    `config.grid`, else enough workgroups along x to cover the largest output (the largest buffer
    when there is no output, one workgroup when there is no buffer)."""
    wg = program.workgroup_size if config.workgroup in (None, "auto") else config.workgroup
    if config.grid is not None:
        grid = config.grid
    else:
        outputs = [sizes[b.name] for b in program.outputs]
        cover = max(outputs) if outputs else max(sizes.values(), default=wg[0])
        grid = (-(-cover // wg[0]), 1, 1)
    check_launch_limits(program.name, grid, wg)
    if not config.cooperative and "grid_sync" in program.capabilities:
        raise DispatchError(f"program {program.name!r} has barrier('grid'), which needs every workgroup resident at "
                            "once. Fix: dispatch it with DispatchConfig(cooperative=True) (on the GPU the grid must "
                            "then fit on the device at once).")
    return grid, wg


MAX_WORKGROUP = 1024
MAX_WORKGROUP_AXES = (1024, 1024, 64)
MAX_GRID_AXES = (2**31 - 1, 65535, 65535)


def check_launch_limits(name: str, grid: tuple, wg: tuple) -> None:
    """Raise LaunchError unless (grid, workgroup) is within what every CUDA device allows, so a
    launch that runs on one backend runs on all of them."""
    where = f"launch of {name!r} with grid {tuple(grid)} x workgroup {tuple(wg)}"
    threads = wg[0] * wg[1] * wg[2]
    if threads > MAX_WORKGROUP or any(w > m for w, m in zip(wg, MAX_WORKGROUP_AXES)):
        raise LaunchError(f"{where}: a workgroup may have at most {MAX_WORKGROUP} invocations and "
                          f"{MAX_WORKGROUP_AXES} per axis, on every backend. Fix: use a smaller workgroup and more "
                          "workgroups.")
    if any(g > m for g, m in zip(grid, MAX_GRID_AXES)):
        raise LaunchError(f"{where}: the grid may have at most {MAX_GRID_AXES} workgroups per axis, on every "
                          "backend. Fix: spread the workgroups over the x axis, or loop inside the program.")
    for axis in range(3):
        if grid[axis] * wg[axis] > 2**32:
            raise LaunchError(f"{where}: {grid[axis] * wg[axis]} invocations along axis {axis} overflow the u32 "
                              "invocation id. Fix: split the work into several dispatches.")


def check_resident(program: Program, buffers, what: str = "dispatch_resident") -> list:
    """The resident buffers of a dispatch in binding order, from a sequence or a dict by name."""
    bound = program.bound_buffers
    if isinstance(buffers, Mapping):
        missing = [d.name for d in bound if d.name not in buffers]
        unknown = sorted(set(buffers) - {d.name for d in bound})
        if missing or unknown:
            raise DispatchError(f"{what} of {program.name!r}: missing buffers {missing}, unknown {unknown}. "
                                "Fix: pass one resident buffer for every non-workgroup buffer, outputs included.")
        return [buffers[d.name] for d in bound]
    if not isinstance(buffers, (list, tuple)):
        raise DispatchError(f"{what} of {program.name!r}: buffers is a {type(buffers).__name__}, not a list or dict. "
                            f"Fix: pass [buffer, ...] in binding order ({[d.name for d in bound]}) or a dict by name.")
    buffers = list(buffers)
    if len(buffers) != len(bound):
        raise DispatchError(f"{what} of {program.name!r}: expected {len(bound)} buffers {[d.name for d in bound]} "
                            f"in binding order, got {len(buffers)}. Fix: pass one resident buffer per "
                            "non-workgroup buffer, outputs included.")
    return buffers
