"""The CUDA simulator's stand-in for the fixpoint runner and a backend's buffers, shared by the
tests that run device steps under NUMBA_ENABLE_CUDASIM=1 (imported inside their subprocess, whose
working directory is this folder)."""
from __future__ import annotations

import numpy as np
from numba import cuda


class SimOps:
    """`run(step, count, args)` launches the step over items 0..count-1 and says whether one
    changed something; `until` repeats it to a fixed point; `empty`, `upload`, `download`."""

    def __init__(self) -> None:
        self._kernels: dict = {}

    def run(self, step, count: int, args) -> int:
        k = self._kernels.get((step, len(args)))
        if k is None:
            names = ", ".join(f"a{i}" for i in range(len(args)))
            src = (f"def k(count, flag, {names}):\n    i = cuda.grid(1)\n    if i < count:\n"
                   f"        if step(i, {names}):\n            flag[0] = 1\n")
            scope = {"cuda": cuda, "step": cuda.jit(device=True)(step)}
            exec(src, scope)
            k = self._kernels[(step, len(args))] = cuda.jit(scope["k"])
        flag = cuda.to_device(np.zeros(1, np.int32))
        if count:
            k[(count + 31) // 32, 32](count, flag, *args)
        return int(flag.copy_to_host()[0])

    def until(self, step, count: int, args, max_rounds: int) -> bool:
        for _ in range(max_rounds):
            if not self.run(step, count, args):
                return True
        return False

    def empty(self, n: int, dtype):
        return cuda.to_device(np.zeros(n, dtype))  # zeroed, as a backend's empty is

    def scratch(self, n: int, dtype):
        """Not zeroed, as the pool's arrays are not: filled with 0xA5 bytes, so a step that reads
        an item nobody wrote reads garbage here too and the test comparing with NumPy fails."""
        dtype = np.dtype(dtype)
        return cuda.to_device(np.full(n * dtype.itemsize, 0xA5, np.uint8).view(dtype))

    unzeroed = scratch  # Numba's memory in production (IPC handles), as unwritten here

    def staged(self, a):
        return self.upload(a)

    def upload(self, a):
        return cuda.to_device(np.ascontiguousarray(a))

    def upload_in_pieces(self, a, each, piece: int = 6):
        """`upload`, then `each(buffer, first, count)` over pieces of `piece` items (small, so
        that a few edges already make several)."""
        d = self.upload(a)
        for first in range(0, d.size, piece):
            each(d, first, min(piece, d.size - first))
        return d

    def download(self, a, offset: int = 0, count: int | None = None) -> np.ndarray:
        host = a.copy_to_host()
        return host[offset:] if count is None else host[offset:offset + count]

    def nonzero(self, flags):
        """`compaction.nonzero`'s NumPy twin, on the device (its kernels have simulator tests of
        their own, and take seconds a call here)."""
        return cuda.to_device(np.flatnonzero(flags.copy_to_host()).astype(np.int64))

    def read_compacted(self, values, flags, capacity: int) -> np.ndarray:
        """`compaction.read_compacted`'s NumPy twin (its kernels have simulator tests of their own,
        and take seconds a call here): the flagged values, refused past `capacity`."""
        from vyre_numba.errors import CapacityError

        kept = values.copy_to_host()[flags.copy_to_host() != 0]
        if kept.size > capacity:
            raise CapacityError(f"{kept.size} records for a capacity of {capacity}. Fix: none (a test twin).",
                                kept.size)
        return kept


class SimBackend:
    """The backend members the BFS drivers use (caps.sm_count, stream, empty, upload, download), over the
    simulator's arrays."""

    class caps:
        sm_count = 1

    def __init__(self) -> None:
        self.stream = cuda.default_stream()

    def empty(self, n: int, dtype):
        return cuda.to_device(np.zeros(n, dtype))  # zeroed, as a backend's empty is

    def upload(self, a):
        return cuda.to_device(np.ascontiguousarray(a))

    def download(self, a, offset: int = 0, count: int | None = None) -> np.ndarray:
        host = a.copy_to_host()
        return host[offset:] if count is None else host[offset:offset + count]


def csr(n: int, src, dst, both: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices int32) of the n-vertex graph of edges src -> dst (and back, `both`)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if both:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.add.at(indptr, src + 1, 1)
    return np.cumsum(indptr), dst[order].astype(np.int32)


def merged(shards: list) -> tuple:
    """`vyre_numba.distributed.unionfind.merge` without Dask: the same round functions, one process."""
    from vyre_numba.distributed import unionfind as uf

    return uf._joined(*[uf._forest(s) for s in shards])


def refused(call, error, *fragments: str) -> None:
    """Assert that `call()` raises `error` whose message holds every fragment and a Fix (for the
    scripts run under the simulator, which have no pytest.raises)."""
    try:
        call()
    except error as e:
        assert all(f in str(e) for f in fragments) and "Fix: " in str(e), str(e)
        return
    raise AssertionError("not refused: " + " / ".join(fragments))


def run_script(script: str, timeout: int = 900):
    """Run a test's script under the simulator in a subprocess whose working directory is this
    folder (so it imports this module and the tests' case generators)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
