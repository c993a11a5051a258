"""How host inputs bind to a program's buffers: checks, output sizing and launch geometry.
Shared by every backend so they agree on what a dispatch means."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .config import DispatchConfig
from .errors import DispatchError
from .ir import BufferDecl, DataType, Program, check
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
    """`value` as a flat array of b's storage dtype, without copying when it already is one."""
    want = b.dtype.storage
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "__cuda_array_interface__") or hasattr(value, "copy_to_host"):
        raise DispatchError(f"{where}: {b.name!r} is a GPU array, but dispatch() takes host arrays. "
                            "Fix: use backend.dispatch_resident for device data, or copy it to the host first.")
    else:
        try:
            arr = np.asarray(value, dtype=want)
        except (TypeError, ValueError, OverflowError) as e:
            raise DispatchError(f"{where}: {b.name!r} cannot be read as {b.dtype} ({e}). "
                                f"Fix: pass a numpy array of dtype {want}.") from e
    if b.dtype is DataType.BOOL and arr.dtype == np.bool_:
        arr = arr.astype(np.uint32)
    if arr.dtype != want:
        hint = " (bf16 buffers hold raw bits: ir.f32_to_bf16_bits(x))" if b.dtype is DataType.BF16 else ""
        raise DispatchError(f"{where}: {b.name!r} is declared {b.dtype} but the array has dtype {arr.dtype}{hint}. "
                            f"Fix: pass np.asarray(x, dtype=np.{want}).")
    return np.ascontiguousarray(arr).reshape(-1)


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
    sizes = dict(sizes or {})
    unknown = set(sizes) - {b.name for b in program.outputs if b.role is Role.OUTPUT}
    if unknown:
        raise DispatchError(f"{where}: sizes names {sorted(unknown)}, which are not output-only buffers. "
                            "Fix: give sizes only for buffers declared with BufferDecl.output.")
    default = max((a.size for a in arrays.values()), default=None)
    counts = {name: a.size for name, a in arrays.items()}
    for b in program.outputs:
        if b.role is not Role.OUTPUT:
            continue
        if b.name in sizes:
            size = sizes[b.name]
            if not isinstance(size, (int, np.integer)) or not 0 <= size < 2**32 or (b.count and size != b.count):
                raise DispatchError(f"{where}: sizes[{b.name!r}]={size!r} is not a valid element count"
                                    f"{f' (declared {b.count})' if b.count else ''}. Fix: pass a non-negative int.")
        elif b.count:
            size = b.count
        elif default is not None:
            size = default
        else:
            raise DispatchError(f"{where}: output {b.name!r} has count=0 and there is no input to size it from. "
                                f"Fix: declare a count, or pass sizes={{{b.name!r}: n}}.")
        counts[b.name] = int(size)
        if allocate_outputs:
            arrays[b.name] = np.zeros(int(size), dtype=b.dtype.storage)
    grid, wg = launch_geometry(program, config, counts)
    return Binding(program, arrays, grid, wg, config, counts)


def launch_geometry(program: Program, config: DispatchConfig, sizes: Mapping[str, int]) -> tuple[tuple, tuple]:
    """(grid, workgroup) of a dispatch whose bound buffers have element counts `sizes` (by name):
    `config.grid`, else enough workgroups along x to cover the largest output (the largest buffer
    when there is no output, one workgroup when there is no buffer)."""
    wg = program.workgroup_size if config.workgroup in (None, "auto") else config.workgroup
    if config.grid is not None:
        return config.grid, wg
    outputs = [sizes[b.name] for b in program.outputs]
    cover = max(outputs) if outputs else max(sizes.values(), default=wg[0])
    return (-(-cover // wg[0]), 1, 1), wg


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
    buffers = list(buffers)
    if len(buffers) != len(bound):
        raise DispatchError(f"{what} of {program.name!r}: expected {len(bound)} buffers {[d.name for d in bound]} "
                            f"in binding order, got {len(buffers)}. Fix: pass one resident buffer per "
                            "non-workgroup buffer, outputs included.")
    return buffers
