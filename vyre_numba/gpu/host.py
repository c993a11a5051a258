"""Host dispatch: NumPy arrays in, NumPy arrays out. A `HostPlan` is one program at one set of
buffer sizes, with its launch geometry checked and its buffers kept between calls.

A plan's buffers live in one device allocation laid out as [inputs | read_write | outputs], each
buffer 256-byte aligned, mirrored by pinned host staging, so a dispatch is: the inputs copied
into staging on the host, one copy in, one memset of the outputs, the launches, one copy out,
one synchronisation, and the outputs copied out of staging. Between DIRECT_BYTES moved and
buffers large enough to stage on several threads, the copies go straight between the caller's
memory and the device instead (the driver pipelines its own staging: 343 against 435 us for a
1 MiB round trip on an H100 host, 1.28 against 1.72 ms at 4 MiB)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Mapping

import numpy as np

from ..bindings import Binding
from ..ir.program import Role
from .launch import KernelLaunch, LaunchShape, driver_check as check

ALIGN = 256
COPY_CHUNK = 4 << 20  # host copies of several such chunks are split over threads (smaller splits measured slower)
DIRECT_BYTES = 384 << 10  # below this many bytes moved, staging's lower fixed cost wins (33 against 49 us at 48 KiB)
_COPIERS: ThreadPoolExecutor | None = None
_COPIERS_LOCK = threading.Lock()


def copy_bytes(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src for two uint8 arrays of one size; large copies run on several threads
    (NumPy releases the GIL while it copies), so staging keeps up with the copy engines."""
    n = dst.size
    workers = min(8, os.cpu_count() or 1)
    parts = min(workers, n // COPY_CHUNK)
    if parts < 2:
        dst[...] = src
        return
    global _COPIERS
    with _COPIERS_LOCK:
        if _COPIERS is None:
            _COPIERS = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vyre-copy")
    step = -(-n // parts // 4096) * 4096
    jobs = [_COPIERS.submit(dst.__setitem__, slice(a, a + step), src[a:a + step]) for a in range(0, n, step)]
    wait(jobs)  # every part has stopped writing before this returns or raises
    for j in jobs:
        j.result()


class BufferSet:
    """One device allocation holding every bound buffer of a plan, its pinned staging, and the
    launch that reads it."""

    __slots__ = ("device", "base", "staging_in", "staging_out", "launch")

    def __init__(self, plan: "HostPlan", device_array, pinned_array):
        self.device = device_array(max(plan.total, 1))  # owned: freed with this set
        self.base = self.device.__cuda_array_interface__["data"][0]
        self.staging_in = pinned_array(max(plan.in_bytes, 1))
        self.staging_out = pinned_array(max(plan.out_hi - plan.out_lo, 1))
        n = len(plan.bound)
        self.launch = KernelLaunch(plan.kernel.handle, plan.kernel.name, plan.shape, n,
                                   cooperative=plan.cooperative, nparams=2 * n + (plan.grid_state is not None),
                                   programmatic=plan.programmatic)
        for i, (off, count) in enumerate(zip(plan.offsets, plan.counts)):
            self.launch.set_buffer(i, self.base + off, count)
        if plan.grid_state is not None:
            self.launch.set_param(2 * n, self.base + plan.grid_state)

    def pointer(self, plan: "HostPlan", i: int) -> int:
        return self.base + plan.offsets[i]


class HostPlan:
    """A program, configuration and buffer sizes, ready to run host dispatches. Buffer sets are
    taken for the duration of one dispatch and given back, so concurrent dispatches of the same
    plan each get their own."""

    def __init__(self, backend, binding: Binding, kernel, *, programmatic: bool = False):
        program, config = binding.program, binding.config
        self.kernel = kernel
        self.programmatic = programmatic  # launches may overlap the previous kernel's end (see KernelLaunch)
        self.bound = program.bound_buffers
        self.counts = [binding.sizes[d.name] for d in self.bound]
        self.nbytes = [c * d.dtype.nbytes for c, d in zip(self.counts, self.bound)]
        self.shape = LaunchShape(binding.grid, binding.workgroup)
        self.cooperative = config.cooperative
        self.iterations = config.fixpoint_iterations
        backend.check_launch(kernel, self.shape, config)
        rank = {Role.INPUT: 0, Role.INOUT: 1, Role.OUTPUT: 2}
        order = sorted(range(len(self.bound)), key=lambda i: rank[self.bound[i].role])
        self.offsets = [0] * len(self.bound)
        end = 0
        for i in order:
            self.offsets[i] = end
            end += -(-self.nbytes[i] // ALIGN) * ALIGN
        self.grid_state = None  # byte offset of a grid barrier's state, zeroed with the outputs
        if "grid_sync" in program.capabilities:
            self.grid_state, end = end, end + ALIGN
        self.total = end
        ins = [i for i in order if self.bound[i].is_input]
        self.inputs = [(i, self.bound[i].name, self.offsets[i], self.nbytes[i]) for i in ins]
        self.in_total = sum(self.nbytes[i] for i in ins)
        self.in_bytes = max((self.offsets[i] + self.nbytes[i] for i in ins), default=0)
        pure = [i for i in order if self.bound[i].role is Role.OUTPUT]
        self.zero_lo = min([self.offsets[i] for i in pure] + ([self.grid_state] if self.grid_state is not None else []),
                           default=end)
        self.zero_bytes = end - self.zero_lo if any(self.nbytes[i] for i in pure) or self.grid_state is not None else 0
        index = {d.name: i for i, d in enumerate(self.bound)}
        self.outputs = []  # (byte offset in the allocation, bytes, dtype, elements) in binding order
        for d in program.outputs:
            i = index[d.name]
            lo, hi = d.output_byte_range or (0, self.nbytes[i])
            self.outputs.append((self.offsets[i] + lo, hi - lo, d.dtype.storage, (hi - lo) // d.dtype.nbytes))
        spans = [(o, o + n) for o, n, _, _ in self.outputs if n]
        self.out_lo = min((a for a, _ in spans), default=0)
        self.out_hi = max((b for _, b in spans), default=0)
        self.read_bytes = sum(n for _, n, _, _ in self.outputs)
        largest = max([n for *_, n in self.inputs] + [n for _, n, _, _ in self.outputs], default=0)
        self.direct = self.in_total + self.read_bytes >= DIRECT_BYTES and largest < 2 * COPY_CHUNK
        self.device_bytes = self.total + self.in_bytes + (self.out_hi - self.out_lo)  # device + pinned
        self._device_array, self._pinned_array = backend._device_bytes, backend._pinned_bytes
        self._free: list[BufferSet] = []
        self._lock = threading.Lock()
        self.retired = False
        self.sets_created = 0

    def take(self) -> BufferSet:
        with self._lock:
            if self._free:
                return self._free.pop()
            self.sets_created += 1
        return BufferSet(self, self._device_array, self._pinned_array)

    def give(self, buffers: BufferSet) -> None:
        """Return a set whose work has finished; kept for the next call unless the plan was retired."""
        with self._lock:
            if not self.retired and len(self._free) < 4:
                self._free.append(buffers)

    def retire(self) -> None:
        """Drop the idle buffer sets (sets in use are dropped when given back)."""
        with self._lock:
            self.retired = True
            self._free.clear()

    @property
    def idle_sets(self) -> int:
        return len(self._free)

    def stage_in(self, buffers: BufferSet, arrays: Mapping[str, np.ndarray]) -> int:
        """Copy the host inputs (1-D, contiguous, by name) into the pinned staging, now; bytes staged."""
        staging = buffers.staging_in
        for _, name, off, n in self.inputs:
            if n:
                copy_bytes(staging[off:off + n], arrays[name].view(np.uint8))
        return self.in_total

    def upload_direct(self, buffers: BufferSet, arrays: Mapping[str, np.ndarray], stream: int, drv) -> int:
        """On `stream`: the host inputs copied in straight from their memory (a copy from pageable
        memory returns once the driver has staged it, so the caller may change them after); bytes."""
        for _, name, off, n in self.inputs:
            if n:
                check(drv.cuMemcpyHtoDAsync(buffers.base + off, arrays[name].ctypes.data, n, stream),
                      "uploading the inputs")
        return self.in_total

    def collect_direct(self, buffers: BufferSet, stream: int, drv) -> list[np.ndarray]:
        """The outputs copied from the device straight into new arrays, after the stream's work (a
        copy to pageable memory returns when it is done)."""
        outs = []
        for off, n, dt, count in self.outputs:
            out = np.empty(count, dt)
            if n:
                check(drv.cuMemcpyDtoHAsync(out.ctypes.data, buffers.base + off, n, stream), "reading back the outputs")
            outs.append(out)
        return outs

    def fast_key(self, binding: Binding) -> tuple:
        """(dtype, size) of each input in binding order: what a repeat call must match to skip binding."""
        return tuple((binding.arrays[d.name].dtype, binding.arrays[d.name].size) for d in binding.program.inputs)

    def enqueue(self, buffers: BufferSet, stream: int, drv, *, copy_in: bool = True, copy_out: bool = True) -> None:
        """On `stream`: the staged inputs copied in, the pure outputs zeroed, `iterations`
        launches, and the outputs copied to the pinned staging (either copy can be left out)."""
        base = buffers.base
        if copy_in and self.in_bytes:
            check(drv.cuMemcpyHtoDAsync(base, buffers.staging_in.ctypes.data, self.in_bytes, stream),
                  "uploading the inputs")
        if self.zero_bytes:
            check(drv.cuMemsetD8Async(base + self.zero_lo, 0, self.zero_bytes, stream), "zeroing the outputs")
        buffers.launch.enqueue(stream, self.iterations)
        if copy_out:
            self.enqueue_readback(buffers, stream, drv)

    def enqueue_readback(self, buffers: BufferSet, stream: int, drv) -> None:
        """On `stream`: the outputs copied to the pinned staging."""
        if self.out_hi > self.out_lo:
            check(drv.cuMemcpyDtoHAsync(buffers.staging_out.ctypes.data, buffers.base + self.out_lo,
                                        self.out_hi - self.out_lo, stream), "reading back the outputs")

    def check_finished(self, buffers: BufferSet, drv) -> None:
        """After the stream's work: raise BarrierTimeoutError if a grid barrier gave up."""
        if self.grid_state is not None:
            from .backend import check_grid_state

            check_grid_state(drv, buffers.base + self.grid_state, self.kernel.name)

    def collect(self, buffers: BufferSet) -> list[np.ndarray]:
        """The outputs, copied out of the pinned staging into new arrays (after the stream's work)."""
        staging, lo = buffers.staging_out, self.out_lo
        outs = []
        for off, n, dt, count in self.outputs:
            out = np.empty(count, dt)
            if n:
                copy_bytes(out.view(np.uint8), staging[off - lo:off - lo + n])
            outs.append(out)
        return outs


def plan_key(binding: Binding) -> tuple[Any, ...]:
    """What decides a plan: the program, the launch configuration and every buffer's size."""
    c = binding.config
    return (binding.program.digest(), c.workgroup, c.cooperative, c.fixpoint_iterations, binding.grid,
            tuple(binding.sizes.items()))
