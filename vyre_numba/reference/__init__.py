"""The NumPy reference backend: the semantic oracle every other backend is compared against, and
the CPU fallback. See docs/semantics.md for what it computes and interpreter.py for how."""
from __future__ import annotations

import collections
import os
import threading
from typing import Callable, Mapping, Sequence

import numpy as np

from .. import checked
from ..backend import (STORAGE_DTYPES, Backend, InFlight, check_empty, check_span, check_upload, check_write,
                       wait_seconds)
from ..bindings import Binding, bind
from ..config import DispatchConfig
from ..errors import IN_HOST_MEMORY, DispatchError, HostMemoryError, host_memory, set_unless_read_only
from ..ir import Program
from ..ir.program import Role
from . import interpreter
from .interpreter import MAX_INVOCATIONS, Budget, check_launch, execute, plan, prepare
from .resident import check_buffer

__all__ = ["ReferenceBackend", "ReferencePending", "execute", "run", "plan", "MAX_INVOCATIONS"]


COOPERATIVE_LANES = 1 << 15  # a megakernel's persistent grid here: about this many invocations (see below)
# Resident buffers are plain arrays any reference backend may bind, so one lock for them all: a
# dispatch's run and its undo, a write and a download happen whole, as on a GPU's stream. Code
# that changes resident arrays in place outside a dispatch (the CPU fixpoint runner) holds it too.
RESIDENT_LOCK = threading.RLock()
_FUSED = threading.local()  # `steps`: the caller's steps fused into the kernel a sequence dispatches now


class ReferenceBackend(Backend):
    """Runs programs on the CPU with the exact NumPy interpreter.

    memory_budget: bytes of working memory (variables, temporaries, masks, launch geometry,
    workgroup buffers, undo copies of resident buffers) one dispatch may use; larger launches run
    in chunks of whole workgroups. Default: $VYRE_NUMBA_REFERENCE_MEMORY (bytes, or with a K/M/G/T
    suffix), else 2 GiB.
    work_budget: work units one dispatch may spend in loops and fixpoint iterations before it
    stops with an error naming the loop (see `interpreter.Budget`). Default:
    $VYRE_NUMBA_REFERENCE_WORK, else 10**11 (minutes of work).
    A budget not given is read from its variable at each dispatch, so setting it in a running
    notebook (`%env VYRE_NUMBA_REFERENCE_WORK=1e13`) takes effect at the next call.
    """

    name = "reference"
    __setattr__ = set_unless_read_only  # a misspelt budget (memory_budjet) is refused, not kept beside the real one

    def __init__(self, *, memory_budget: int | None = None, work_budget: int | None = None):
        self.memory_budget, self.work_budget = memory_budget, work_budget  # checked now, the variables too

    @property
    def memory_budget(self) -> int:
        """Bytes one dispatch may use: the one given, else $VYRE_NUMBA_REFERENCE_MEMORY now, else 2 GiB."""
        return interpreter.memory_budget(self._memory)

    @memory_budget.setter
    def memory_budget(self, value: int | None) -> None:
        interpreter.memory_budget(value)
        self._memory = value

    @property
    def work_budget(self) -> int:
        """Work units one dispatch may spend: the one given, else $VYRE_NUMBA_REFERENCE_WORK now, else 10**11."""
        return interpreter.work_budget(self._work)

    @work_budget.setter
    def work_budget(self, value: int | None) -> None:
        interpreter.work_budget(value)
        self._work = value

    def cooperative_workgroups(self, program: Program, reserved: int = 0) -> int:
        """How many workgroups of `program` a megakernel's persistent grid holds here: in lockstep
        any grid is co-resident, so as many as COOPERATIVE_LANES invocations (wider, its vectors
        leave the cache and a round is slower) in the memory budget less `reserved` bytes (the copies
        that undo a failed run; half the budget where not given); 0 where not one workgroup fits."""
        wg = tuple(program.workgroup_size)
        per_wg = max(interpreter.plan(program).workgroup_bytes(wg), 1)
        room = self.memory_budget - reserved if reserved else self.memory_budget // 2
        return min(max(COOPERATIVE_LANES // (wg[0] * wg[1] * wg[2]), 1), max(room, 0) // per_wg)

    def dispatch(self, program: Program, inputs: Sequence | Mapping | None = None,
                 config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                 ) -> list[np.ndarray]:
        if checked.wanted(config):
            return checked.dispatch(self, program, inputs, config, sizes)
        binding = bind(program, inputs, config, sizes, before_outputs=check_launch)
        prepare(binding, self.memory_budget, self.work_budget).run()
        self._counted(binding.config)
        return binding.results()

    def dispatch_async(self, program: Program, inputs: Sequence | Mapping | None = None,
                       config: DispatchConfig | None = None, *, sizes: Mapping[str, int] | None = None
                       ) -> "ReferencePending":
        """`dispatch` on a worker thread. The inputs are checked and copied here (changing them
        afterwards does not change the results) and mistakes raise here; failures while running
        are raised by `result()`. `cancel()` stops it at its next loop iteration. A checked
        dispatch runs here, at once."""
        if checked.wanted(config):
            return checked.dispatch_now(self, program, inputs, config, sizes)
        binding = bind(program, inputs, config, sizes, before_outputs=check_launch)
        for d in program.inputs:
            if d.role is not Role.INOUT:  # read_write inputs were copied by bind already
                binding.arrays[d.name] = binding.arrays[d.name].copy()
        launch = prepare(binding, self.memory_budget, self.work_budget)
        pending = ReferencePending(launch.budget)

        def job() -> None:
            try:  # cancelled while queued, or after the last check of a run: result() says so all the same
                launch.budget.check(binding.program.name, "its start")
                launch.run()
                with pending._lock:  # past here a cancel() is refused: the results are handed over
                    if launch.budget.cancelled:
                        launch.budget.check(binding.program.name, "its end")
                    pending._finishing = True
                self._counted(binding.config)
                pending._finish(binding.results(), None)
            except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
                pending._finish(None, e)
        _POOL.submit(job)
        return pending

    def _counted(self, config: DispatchConfig) -> None:
        if config.label:
            self._count(**{"dispatches": 1, f"dispatches[{config.label}]": 1})
        else:
            self._count(dispatches=1)

    # resident buffers are plain NumPy arrays, updated in place
    @host_memory("dispatch_resident", IN_HOST_MEMORY)
    def dispatch_resident(self, program: Program, buffers: Sequence | Mapping,
                          config: DispatchConfig | None = None) -> None:
        """Run `program` in place on NumPy arrays; all or nothing (a failure restores every
        buffer the program writes)."""
        from .resident import dispatch_resident

        with RESIDENT_LOCK:
            if checked.wanted(config):
                return checked.dispatch_resident(self, program, buffers, config)
            work = self.work_budget * getattr(_FUSED, "steps", 1)
            dispatch_resident(program, buffers, config, memory=self.memory_budget, work=work)
        if config is not None and config.label:
            self._count(**{"resident_dispatches": 1, f"dispatches[{config.label}]": 1})
        else:
            self._count(resident_dispatches=1)

    def _run_step(self, step, steps: int) -> None:
        before, _FUSED.steps = getattr(_FUSED, "steps", 1), steps  # read by this thread's dispatch_resident,
        try:  # which a caller may wrap
            super()._run_step(step, steps)
        finally:
            _FUSED.steps = before

    def _check_step(self, step) -> None:
        from .resident import check_step

        if not checked.wanted(step.config):
            check_step(step.program, step.buffers, step.config, memory=self.memory_budget, work=self.work_budget)

    @host_memory("upload", IN_HOST_MEMORY)
    def upload(self, array: np.ndarray) -> np.ndarray:
        arr = check_upload(array)  # outside the lock: an array-like may compute (a Dask graph) on other threads
        with RESIDENT_LOCK:  # a resident array uploaded again is read whole, as download reads it
            out = np.array(arr, copy=True, order="C")
        self._count(bytes_uploaded=out.nbytes)
        return out

    def empty(self, n: int, dtype) -> np.ndarray:
        n, dt = check_empty(n, dtype)
        return _zeros(n, dt)

    @host_memory("write", IN_HOST_MEMORY)
    def write(self, buffer, values, offset: int = 0) -> None:
        check_buffer(buffer, "write")
        if not buffer.flags.c_contiguous or not buffer.flags.writeable:
            raise DispatchError("write: the buffer is a non-contiguous or read-only view. Fix: write into a buffer "
                                "made by upload / empty / allocate (or a contiguous slice of one).")
        arr, offset = check_write(buffer.dtype, buffer.size, values, offset)
        with RESIDENT_LOCK:
            buffer.reshape(-1)[offset:offset + arr.size] = arr
        self._count(bytes_uploaded=arr.nbytes)

    def read_compacted(self, values, flags, *, capacity: int | None = None) -> np.ndarray:
        with RESIDENT_LOCK:  # read whole, as download reads: never between another thread's run and its undo
            return super().read_compacted(values, flags, capacity=capacity)

    @host_memory("download", IN_HOST_MEMORY)
    def download(self, buffer, offset: int = 0, count: int | None = None) -> np.ndarray:
        check_buffer(buffer, "download")
        if buffer.dtype.kind not in "biu" and buffer.dtype not in STORAGE_DTYPES:  # none that upload makes
            raise DispatchError(f"download: the buffer holds {buffer.dtype}, which no vyre buffer holds (upload "
                                "makes them of bools, integers and float16/32/64). Fix: read from a buffer made by "
                                "upload / empty / allocate.")
        flat = buffer.reshape(-1)
        offset, count = check_span(offset, count, flat.size)
        with RESIDENT_LOCK:
            out = flat[offset:offset + count].copy()
        self._count(bytes_read_back=out.nbytes)
        return out




def _zeros(n: int, dt: np.dtype) -> np.ndarray:
    try:
        return np.zeros(n, dt)
    except MemoryError:
        raise HostMemoryError(f"empty({n}, {dt}): the host has no room for {n * dt.itemsize} bytes (the reference "
                              "backend keeps buffers in host memory). Fix: ask for fewer elements, or split the "
                              "work.") from None


class ReferencePending(InFlight):
    """A reference dispatch running on a worker thread: a handle to work in flight, which copy,
    deepcopy and pickle refuse (a copy could never finish: only this one is told the outcome)."""

    def __init__(self, budget: Budget):
        self._budget = budget
        self._event = threading.Event()
        self._lock = threading.Lock()  # cancel() against the run's last check
        self._finishing = False
        self._outputs: list[np.ndarray] | None = None
        self._error: BaseException | None = None

    def _finish(self, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        self._outputs = outputs
        self._fail(error)
        self._event.set()

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(wait_seconds(timeout))

    def _collect(self) -> list[np.ndarray]:
        self._event.wait()
        if self._error is not None:
            self._raise_kept()
        return self._outputs

    def cancel(self) -> bool:
        """Ask the dispatch to stop at its next loop iteration, fixpoint iteration or chunk; its
        `result()` then raises DispatchError. False if it had already finished (or had passed its
        last check, and so gives its results)."""
        with self._lock:
            if self._event.is_set() or self._finishing:
                return False
            self._budget.cancel()
            return True


class _Pool:
    """Daemon worker threads (so an endless dispatch never holds up interpreter exit), started
    as needed up to `size`; jobs run in submission order."""

    def __init__(self, size: int):
        self.size, self.threads, self.waiting = size, 0, 0
        self.jobs: collections.deque[Callable[[], None]] = collections.deque()
        self.cv = threading.Condition()

    def submit(self, job: Callable[[], None]) -> None:
        with self.cv:
            self.jobs.append(job)
            if self.waiting < len(self.jobs) and self.threads < self.size:
                self.threads += 1
                threading.Thread(target=self._work, name=f"vyre-reference-{self.threads}", daemon=True).start()
            else:
                self.cv.notify()

    def _work(self) -> None:
        while True:
            with self.cv:
                self.waiting += 1
                while not self.jobs:
                    self.cv.wait()
                self.waiting -= 1
                job = self.jobs.popleft()
            job()
            del job  # an idle worker holds nothing: the finished job held its inputs and outputs


_POOL = _Pool(max(2, os.cpu_count() or 2))


def run(program: Program, inputs: Sequence | Mapping | None = None, config: DispatchConfig | None = None,
        *, sizes: Mapping[str, int] | None = None) -> list[np.ndarray]:
    """Dispatch `program` on the reference backend and return its outputs in binding order."""
    return ReferenceBackend().dispatch(program, inputs, config, sizes=sizes)


def run_binding(binding: Binding) -> list[np.ndarray]:
    """Execute an already bound dispatch in place and return its outputs."""
    execute(binding)
    return binding.results()

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
