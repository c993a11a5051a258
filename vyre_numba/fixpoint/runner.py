"""The fixpoint runner: argument checks, the CPU loop, and the three GPU modes."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import BarrierTimeoutError, DispatchError, UnsupportedError, VyreError

MODES = ("auto", "cooperative", "graph", "relaunch")
_CTL_WORDS = 8  # see ptx_templates/fixpoint.ptx
_ROUNDS, _CONVERGED, _ERROR = 6, 7, 2


@dataclass(frozen=True)
class FixpointResult:
    """How a run ended: rounds run, whether the last round changed nothing (False means it
    stopped at max_rounds), the mode that ran, and device nanoseconds (None on the CPU)."""

    rounds: int
    converged: bool
    mode: str
    device_ns: int | None = None


def _count(value, name: str, lo: int, hi: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise DispatchError(f"{name}={value!r} is not an int in [{lo}, {hi}]. Fix: pass a whole number in range.")
    return int(value)


def run(step: Callable, n: int, args: Sequence[Any] = (), *, max_rounds: int = 10_000, mode: str = "auto",
        backend=None, block: int = 256, timeout_s: float = 10.0, progress: bool = False) -> FixpointResult:
    """Run `step(i, *args)` for every item i < n, round after round, until a round in which no
    call returned non-zero, or `max_rounds`. `args` are the backend's arrays (device arrays on
    the GPU, NumPy arrays on the reference backend) or scalars. `timeout_s` bounds each grid
    barrier's wait in cooperative mode (a stuck barrier raises BarrierTimeoutError instead of
    hanging the GPU); `progress` shows a tqdm bar of rounds."""
    from ..backend import resolve_backend

    if not callable(step):
        raise DispatchError(f"step is a {type(step).__name__}, not a function. Fix: pass a Python function "
                            "step(i, *args) that returns non-zero when it changed something.")
    n = _count(n, "n", 0, 2**32 - 1)
    max_rounds = _count(max_rounds, "max_rounds", 1, 2**31 - 1)
    block = _count(block, "block", 32, 1024)
    if not isinstance(mode, str) or mode not in MODES:
        raise DispatchError(f"mode={mode!r} is not one of {', '.join(MODES)}. Fix: pass one of those.")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < 1e6:
        raise DispatchError(f"timeout_s={timeout_s!r} is not a positive number of seconds. Fix: pass e.g. 10.0.")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise DispatchError(f"args is a {type(args).__name__}, not a list. Fix: pass the step's arguments as a list.")
    if backend is None:  # device arrays run on the GPU, host arrays on the CPU
        backend = "cuda" if any(hasattr(a, "__cuda_array_interface__") for a in args) else "reference"
    be = resolve_backend(backend)
    if be.name == "cuda":
        from . import device

        return device.run(be, step, n, list(args), max_rounds, mode, block, int(timeout_s * 1e9), progress)
    if mode not in ("auto", "relaunch"):
        raise UnsupportedError(f"mode={mode!r} needs a GPU; the {be.name} backend runs rounds on the CPU. "
                               "Fix: use mode='auto' (it picks what the backend can do).")
    return _run_cpu(step, n, list(args), max_rounds, progress)


_CPU_ROUNDS: dict = {}


def _cpu_round(step: Callable) -> Callable:
    """A jitted round `(n, args) -> changed` calling the jitted step for every item in order."""
    key = step
    fn = _CPU_ROUNDS.get(key)
    if fn is None:
        from numba import njit

        inner = njit(step)

        @njit
        def one_round(n, args):
            changed = False
            for i in range(n):
                if inner(np.uint32(i), *args):
                    changed = True
            return changed
        fn = _CPU_ROUNDS[key] = one_round
    return fn


def _run_cpu(step: Callable, n: int, args: list, max_rounds: int, progress: bool) -> FixpointResult:
    for k, a in enumerate(args):
        if hasattr(a, "__cuda_array_interface__"):
            raise DispatchError(f"args[{k}] is a device array, but the reference backend runs on the CPU. "
                                "Fix: pass NumPy arrays, or run on the cuda backend.")
    one_round = _cpu_round(step)
    bar = _bar(progress, max_rounds)
    rounds, converged = 0, False
    try:
        while rounds < max_rounds:
            changed = _numba_call(one_round, n, tuple(args))
            rounds += 1
            if bar is not None:
                bar.update(1)
            if not changed:
                converged = True
                break
    finally:
        if bar is not None:
            bar.close()
    return FixpointResult(rounds, converged, "relaunch", None)


def _numba_call(fn, *args):
    """Call a jitted function; Numba's typing errors become DispatchErrors that say what to fix."""
    try:
        return fn(*args)
    except Exception as e:  # Numba raises many kinds; each means the step does not compile
        if isinstance(e, VyreError):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DispatchError(f"the step function does not compile with Numba ({first}). Fix: write it in Numba's "
                            "subset (array indexing, arithmetic, loops) taking (i, *args), and check the argument "
                            "types it is given.") from e


def _bar(progress: bool, total: int):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="fixpoint rounds", unit="round")


def raise_barrier_timeout(timeout_ns: int) -> None:
    raise BarrierTimeoutError(
        f"a grid barrier of the cooperative fixpoint kernel waited more than {timeout_ns / 1e9:g} s: not every "
        "block arrived (a block that returned early, or a step that never finishes). The kernel left instead of "
        "hanging the GPU; the arrays hold the last complete round or part of the next. Fix: make every step "
        "return for every item, raise timeout_s for slow rounds, or use mode='graph'.")
