"""Resident dispatch on the reference backend: NumPy arrays play the part of device buffers and
are updated in place, so code written for the GPU's resident path runs unchanged on the CPU."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..bindings import (STRIDED_FIX, Binding, check_config, check_resident, check_unaliased, launch_geometry,
                        storage_mismatch)
from ..config import DispatchConfig  # noqa: F401  (type hints)
from ..errors import DispatchError, a_type
from ..ir import Program, check
from ..ir.program import Role
from .interpreter import memory_budget, plan, prepare, work_budget


def dispatch_resident(program: Program, buffers: Sequence | Mapping, config: DispatchConfig | None = None, *,
                      memory: int | None = None, work: int | None = None) -> None:
    """Run `program` in place over NumPy arrays bound in binding order (or by name), within the
    memory and work budgets (None: the configured ones). All or nothing: when a check fails
    nothing is written, and when the program fails while running every buffer it writes is put
    back as it was (at the cost of one copy of those buffers)."""
    launch, arrays, touched, decls = _checked(program, buffers, config, memory, work)
    saved = [(arrays[name], arrays[name].copy()) for name in touched]
    try:
        for d in decls:
            if d.role is Role.OUTPUT:
                arrays[d.name][...] = 0
        launch.run()
    except BaseException:
        for arr, before in saved:
            arr[...] = before
        raise


def check_buffer(buf, what: str) -> None:
    """Refuse `buf` (`what` in the message) unless it is a reference-backend buffer: a NumPy array
    itself, not a subclass whose meaning a kernel would lose (a masked array's mask, a matrix's shape)."""
    if type(buf) is np.ndarray:
        return
    how = ("backend.upload(x.filled(value)), with the value the program should see where x is masked"
           if isinstance(buf, np.ma.MaskedArray) else "backend.upload(np.asarray(m).ravel())"
           if isinstance(buf, np.matrix) else "backend.upload(x) or backend.allocate / empty")
    raise DispatchError(f"{what}: {a_type(buf)} is not a reference-backend buffer (a NumPy array made "
                        f"by upload / empty / allocate of this backend). Fix: make one with {how}.")


def check_step(program: Program, buffers: Sequence | Mapping, config: DispatchConfig | None = None, *,
               memory: int | None = None, work: int | None = None) -> None:
    """What `dispatch_resident` would refuse of this step, refused now; nothing runs."""
    _checked(program, buffers, config, memory, work)


def _checked(program: Program, buffers, config, memory, work) -> tuple:
    """(the prepared launch, the arrays by name, the names it writes, the declarations) of a
    resident dispatch, after every check."""
    check(program)
    config = check_config(config)
    where = f"dispatch_resident of {program.name!r}"
    arrays: dict[str, np.ndarray] = {}
    for decl, buf in zip(program.bound_buffers, check_resident(program, buffers)):
        check_buffer(buf, f"{where}: {decl.name!r}")
        if buf.dtype != decl.dtype.storage:
            raise storage_mismatch(where, decl, buf.dtype)
        if not buf.flags.c_contiguous:
            raise DispatchError(f"{where}: {decl.name!r} is a non-contiguous view. {STRIDED_FIX}")
        if decl.is_output and not buf.flags.writeable:
            raise DispatchError(f"{where}: output {decl.name!r} is read-only. Fix: pass a writeable array.")
        if buf.size >= 2**32:
            raise DispatchError(f"{where}: {decl.name!r} has {buf.size} elements; lengths are u32. "
                                "Fix: split the data into dispatches of fewer than 2**32 elements.")
        if decl.count and buf.size < decl.count:
            raise DispatchError(f"{where}: {decl.name!r} is declared with {decl.count} elements but has {buf.size}. "
                                f"Fix: allocate at least {decl.count}.")
        arrays[decl.name] = buf.reshape(-1)
    decls = program.bound_buffers
    check_unaliased(decls, lambda i, j: np.shares_memory(arrays[decls[i].name], arrays[decls[j].name]), where)
    grid, wg = launch_geometry(program, config, {name: a.size for name, a in arrays.items()})
    binding = Binding(program, arrays, grid, wg, config)
    written = plan(program).written
    touched = [d.name for d in decls if d.role is Role.OUTPUT or d.name in written]
    launch = prepare(binding, memory_budget(memory), work_budget(work),
                     reserved=sum(arrays[name].nbytes for name in touched))
    return launch, arrays, touched, decls
