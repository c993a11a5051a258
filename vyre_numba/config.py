"""Launch configuration shared by every backend."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import INTEGERS, DispatchError, flag, shown

# Invocation ids are u32 in the IR, so no axis can usefully exceed this.
MAX_AXIS = 2**32 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, INTEGERS) and not isinstance(value, bool)


def _dims(value: object, what: str, low: int) -> tuple[int, int, int] | None:
    """`value` (None, an int, or a tuple/list of 1 to 3 ints, NumPy ints and integer arrays of
    up to one axis included) as a plain-int
    3-tuple padded with 1s; every axis in [low, MAX_AXIS]."""
    if value is None:
        return None
    given = value
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim <= 1:  # as Program takes them
        value = value.item() if value.ndim == 0 else tuple(value.tolist())
    if _is_int(value):
        axes: tuple = (value,)
    elif isinstance(value, (tuple, list)):
        axes = tuple(value)
    else:
        axes = ()
    lowest = "non-negative" if low == 0 else "positive"
    if not 1 <= len(axes) <= 3 or not all(_is_int(v) for v in axes):
        raise DispatchError(f"{what}={shown(given)} is not an int or a tuple of 1 to 3 {lowest} ints "
                            f"(bool, float and str are refused). Fix: pass e.g. {what}=64 or {what}=(8, 8).")
    dims = tuple(int(v) for v in axes)
    if any(d < 0 for d in dims):
        raise DispatchError(f"{what}={shown(given)} has a negative axis. Fix: pass {lowest} ints, e.g. {what}=(8, 8).")
    if any(d < low for d in dims):
        raise DispatchError(f"{what}={shown(given)} has an empty axis. Fix: every axis needs >= {low} thread.")
    if any(d > MAX_AXIS for d in dims):
        raise DispatchError(f"{what}={shown(given)} has an axis over 2**32 - 1 (invocation ids are u32). "
                            f"Fix: split the work into several dispatches.")
    return dims + (1,) * (3 - len(dims))


@dataclass(frozen=True, kw_only=True)
class DispatchConfig:
    """How to launch a program.

    grid: workgroups per axis (an int or a tuple of 1 to 3 ints >= 0; 0 is an empty launch);
        None covers the largest output buffer along x.
    workgroup: overrides the program's workgroup size (an int or a tuple of 1 to 3 ints >= 1);
        "auto" lets the CUDA backend choose by occupancy; "tune" times the candidate sizes once per
        (program, device, size bucket) and remembers the fastest on disk (`gpu.tuning`); both keep
        the declared size for programs whose results depend on it, and with an explicit `grid`.
    fixpoint_iterations: run the program this many times (an int >= 1) over the same buffers.
    cooperative: True to launch so every workgroup is co-resident (needed by grid barriers).
    label: None or a non-blank name for telemetry (a `dispatches[label]` counter) and profiles
        (the NVTX launch range).
    optimize: compile `program.optimized()` (`ir.optimize`: folding, dead code, hoisting, common
        subexpressions; the same results bit for bit) rather than the program as written. The
        reference backend, the oracle every backend is tested against, always runs it as written.
    checked: False; True or "warn" to count, on the device, out-of-bounds loads, stores and
        atomics, integer division by zero and NaNs produced, per site, and warn (`CheckWarning`)
        with the first invocation of each; "raise" to raise `CheckError` instead (`vyre_numba.checked`).
        A checked dispatch synchronises to read the counts; unchecked ones carry no checks at all.

    NumPy integer scalars are accepted wherever an int is and stored as plain ints; bool is never
    taken for an int. Anything else raises DispatchError.
    """

    grid: tuple[int, int, int] | None = None
    workgroup: tuple[int, int, int] | str | None = None
    fixpoint_iterations: int = 1
    cooperative: bool = False
    label: str | None = None
    optimize: bool = True
    checked: bool | str = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _dims(self.grid, "grid", 0))
        wg = self.workgroup
        if isinstance(wg, str):
            if wg not in ("auto", "tune"):
                raise DispatchError(f"workgroup={shown(wg)} is not 'auto', 'tune' or ints. Fix: pass workgroup='auto', "
                                    "'tune', an int such as 256, or a tuple such as (8, 8).")
            object.__setattr__(self, "workgroup", str(wg))
        else:
            object.__setattr__(self, "workgroup", _dims(wg, "workgroup", 1))
        it = self.fixpoint_iterations
        if not _is_int(it) or it < 1:
            raise DispatchError(f"fixpoint_iterations={shown(it)} is not a positive int. Fix: pass an int of 1 or "
                                "more.")
        if it > 2**31 - 1:
            raise DispatchError(f"fixpoint_iterations={shown(it)} is more than 2**31 - 1. Fix: pass a smaller count (a "
                                "program that runs until nothing changes belongs in vyre_numba.fixpoint.run, "
                                "which stops at the fixed point).")
        object.__setattr__(self, "fixpoint_iterations", int(it))
        object.__setattr__(self, "cooperative", flag(self.cooperative, "cooperative",
                                                     "pass cooperative=True or cooperative=False."))
        label = self.label
        if label is not None and (not isinstance(label, str) or not label.strip() or not label.isprintable()):
            raise DispatchError(f"label={shown(label)} is not a non-blank str of printable characters (it names a "
                                "counter and a profiler range). Fix: pass a name such as label='step1', or leave "
                                "label=None.")
        if label is not None:
            object.__setattr__(self, "label", str(label))
        if not isinstance(self.optimize, (bool, np.bool_)):
            raise DispatchError(f"optimize={shown(self.optimize)} is not a bool. Fix: pass optimize=True or optimize=False.")
        object.__setattr__(self, "optimize", bool(self.optimize))
        c = self.checked
        if isinstance(c, (bool, np.bool_)):
            c = "warn" if c else False
        if c is not False and (not isinstance(c, str) or c not in ("warn", "raise")):
            raise DispatchError(f"checked={shown(self.checked)} is not True, False, 'warn' or 'raise'. Fix: pass "
                                "checked=True (warn about what the checks find) or checked='raise'.")
        object.__setattr__(self, "checked", c if c is False else str(c))  # np.str_('raise') as 'raise'

    def key(self) -> tuple:
        """What of the configuration changes generated code."""
        return (self.workgroup, self.cooperative)
