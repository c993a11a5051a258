"""`NumbaLaunch`: a Numba `@cuda.jit` kernel launched through the driver with parameters packed
here. Numba's own launch types and packs every argument on every call (about 50 us for ten
arrays on the H100 host), which a loop of short kernels pays many times a round; this packs an
argument again only when it is not the object passed last time. Under the CUDA simulator, and
for argument kinds it does not pack, it calls the kernel the ordinary way."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..simulator import SIMULATED as _SIM
from .launch import KernelLaunch, LaunchShape

_MASK = 0xFFFFFFFFFFFFFFFF


class RawArray:
    """A C-contiguous device array named by its address, shape and type: a kernel argument that
    costs next to nothing to make, where a Numba device array view costs microseconds. It does
    not own the memory; whoever made it keeps the owner alive for the launch."""

    __slots__ = ("kind", "params", "shape", "_address", "_dtype")

    def __init__(self, address: int, shape: tuple, dtype):
        dt = np.dtype(dtype)
        size = dt.itemsize
        if len(shape) == 1:
            strides = (size,)
        else:
            strides = (shape[1] * size, size) if len(shape) == 2 else \
                tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) * size for k in range(len(shape)))
        count = 1
        for d in shape:
            count *= d
        self.kind, self.shape, self._address, self._dtype = (dt.str, len(shape), True), tuple(shape), address, dt
        self.params = [0, 0, count, size, address, *shape, *strides]

    @property
    def __cuda_array_interface__(self) -> dict:
        cai = {"shape": self.shape, "typestr": self._dtype.str, "data": (self._address, False), "strides": None,
               "version": 3}
        if self._dtype.fields is not None:  # a record's typestr is only |V<size>
            cai["descr"] = self._dtype.descr
        return cai


def overload_kind(a) -> Any:
    """What decides the compiled overload: an array's element type, rank and contiguity; a
    scalar's type."""
    return _describe(a)[0]


def _params(a) -> list | None:
    """Numba's kernel parameters for `a` (a device array: meminfo, parent, size, itemsize, data,
    shape, strides; an integer or float scalar: its bits), or None for kinds left to Numba."""
    return _describe(a)[1]


def _describe(a) -> tuple[Any, list | None]:
    """(`overload_kind(a)`, `_params(a)`) in one look at the array (a Numba array's interface dict
    costs microseconds to build, so its attributes are read directly)."""
    if type(a) is RawArray:
        return a.kind, a.params
    dummy = getattr(a, "_dummy", None)
    if dummy is not None and hasattr(a, "gpu_data"):  # a Numba device array
        shape, strides, dt = a.shape, a.strides, a.dtype
        ptr = a.device_ctypes_pointer.value or 0
        contiguous = dummy.is_c_contig
        return (dt.str, len(shape), contiguous), [0, 0, a.size, dt.itemsize, ptr, *shape, *strides]
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(cai["shape"])
        itemsize = np.dtype(cai["typestr"]).itemsize
        strides = cai.get("strides")
        kind = cai["typestr"], len(shape), strides is None
        if strides is None:
            strides, step = [], itemsize
            for d in reversed(shape):
                strides.insert(0, step)
                step *= d
        return kind, [0, 0, int(np.prod(shape, dtype=np.int64)), itemsize, cai["data"][0] or 0, *shape, *strides]
    return type(a), _scalar(a)


def _scalar(a) -> list | None:
    if isinstance(a, (np.integer, int)) and not isinstance(a, bool):
        return [int(a) & _MASK]
    if isinstance(a, (np.floating, float)):
        x = np.asarray(a, np.float64 if isinstance(a, float) else a.dtype)
        return [int(x.view(f"u{x.itemsize}"))]
    return None


def launch_quietly(kernel, grid, block, stream, *args) -> None:
    """`kernel[grid, block, stream](*args)` through Numba, without its low-occupancy warning: this
    package sizes small grids for small inputs on purpose, and a notebook user can do nothing
    about the warning (their own kernels still get it)."""
    import warnings

    with warnings.catch_warnings():
        for category in _performance_warnings():
            warnings.simplefilter("ignore", category)
        if stream is None:
            kernel[grid, block](*args)
        else:
            kernel[grid, block, stream](*args)


def _performance_warnings() -> tuple:
    """Numba's performance-warning classes: numba-cuda raises its own, not numba.core's."""
    from numba.core.errors import NumbaPerformanceWarning

    try:
        from numba.cuda.core.errors import NumbaPerformanceWarning as cuda_warning
    except ImportError:
        return (NumbaPerformanceWarning,)
    return (NumbaPerformanceWarning, cuda_warning)


def is_numba_stream(stream) -> bool:
    """Whether `stream` is a Numba stream (the CUDA simulator's have no handle)."""
    return (hasattr(stream, "handle") and hasattr(stream, "synchronize")) or \
        (_SIM and type(stream).__module__ == "numba.cuda.simulator.api" and type(stream).__name__ == "stream")


def check_stream(stream) -> None:
    """A DispatchError unless `stream` is None or a Numba stream."""
    if stream is not None and not is_numba_stream(stream):
        from ..errors import DispatchError, a_type

        raise DispatchError(f"stream is {a_type(stream)}, not a Numba stream. Fix: pass numba.cuda.stream() "
                            "(or cuda.external_stream(ptr) for another library's stream), or None.")


def stream_handle(stream) -> int:
    """The driver handle of a Numba stream as an int (0 for None or the legacy default stream)."""
    h = getattr(stream, "handle", None) if stream is not None else None
    h = getattr(h, "value", h)
    return int(h or 0)


class NumbaLaunch:
    """Launches of one `@cuda.jit` kernel on one stream (Numba's default when None):
    `launch(blocks, threads, *args)` with device arrays and int/float scalars (typed as Numba
    types them). Owns its parameter block and, with `retain` (for owners that outlive no
    argument of theirs), the arguments it packed last, so that the same objects are not packed
    again; without it every argument is packed each launch and none is kept alive.
    `cooperative` launches every block at once (cuLaunchCooperativeKernel): for kernels with a
    grid barrier, whose grid must not exceed `resident_blocks`."""

    def __init__(self, dispatcher, stream=None, *, retain: bool = True, cooperative: bool = False):
        self._kernel, self._stream, self._retain, self._cooperative = dispatcher, stream, retain, cooperative
        self._handle = 0 if _SIM else stream_handle(stream)
        self._launch: KernelLaunch | None = None
        self._kinds: list = []
        self._last: list = []
        self._slots: list = []

    def __call__(self, blocks: int, threads: int, *args: Any) -> None:
        if blocks < 1:
            return
        if not self._pack(args):
            self._numba(blocks, threads, args)
            return
        launch = self._launch
        if launch.shape.grid[0] != blocks or launch.shape.block[0] != threads:
            launch = self._launch = launch.reshaped(LaunchShape((blocks, 1, 1), (threads, 1, 1)))
        launch.enqueue(self._handle)
        self._forget(args)

    def _pack(self, args: tuple) -> bool:
        """Pack `args` into the parameter block (only those not passed last time); False where
        the launch must go through Numba (the simulator, or an argument kind not packed here)."""
        launch, last = self._launch, self._last
        if launch is None or _SIM or len(args) != len(last):
            return not _SIM and self._prepare(args)
        values, slots, kinds = launch.args.values, self._slots, self._kinds
        for i, a in enumerate(args):
            if a is not last[i]:
                kind, params = _describe(a)
                if kind != kinds[i] or params is None:  # another overload of the kernel
                    return self._prepare(args)
                values[slots[i]:slots[i + 1]] = params
                last[i] = a
        return True

    def packed(self, *args: Any) -> "Relaunch | None":
        """The launch of these arguments packed (compiled first where need be) but not enqueued,
        as a `Relaunch` of its own: for a caller that learns the last of its parameters (an
        output's address) only when the launch must go, and packs the rest before. None under
        the CUDA simulator or for argument kinds not packed here."""
        if not self._pack(args):
            return None
        self._forget(args)
        return self.detached()

    def _forget(self, args: tuple) -> None:
        """Without `retain`, keep none of `args` but raw arrays (they own nothing: keeping them
        costs nothing and saves packing them again)."""
        if not self._retain:
            self._last = [a if type(a) is RawArray else None for a in args]

    def detached(self) -> "Relaunch | None":
        """The last packed launch as a `Relaunch` with a parameter block of its own, or None where
        the last launch went through Numba."""
        k = self._launch
        if k is None or _SIM:
            return None
        copy = KernelLaunch(k._head[0], k.name, k.shape, 0, nparams=k.args.values.size, cooperative=self._cooperative)
        copy.args.values[:] = k.args.values
        return Relaunch(copy, self._slots, self._handle)

    def resident_blocks(self, threads: int, *args: Any) -> int:
        """How many blocks of `threads` of the kernel compiled for `args` fit on the device at once
        (1 under the CUDA simulator, which runs blocks one after another)."""
        if _SIM:
            return 1
        return int(self._overload(args).max_cooperative_grid_blocks(threads))

    def _overload(self, args: tuple):
        types = tuple(self._kernel.typeof_pyval(a) for a in args)
        return self._kernel.overloads.get(types) or self._kernel.compile(types)

    def _numba(self, blocks: int, threads: int, args: tuple) -> None:
        launch_quietly(self._kernel, blocks, threads, self._stream, *args)

    def _prepare(self, args: tuple) -> bool:
        """Compile (through Numba) for these argument kinds and pack every parameter."""
        packed = [_params(a) for a in args]
        if any(p is None for p in packed):
            self._launch, self._last = None, []
            return False
        from cuda.bindings import driver as drv

        overload = self._overload(args)
        handle = drv.CUfunction(int(overload._codelibrary.get_cufunc().handle))
        self._slots = np.cumsum([0] + [len(p) for p in packed]).tolist()
        self._launch = KernelLaunch(handle, self._kernel.__name__, LaunchShape((1, 1, 1), (1, 1, 1)), 0,
                                    nparams=self._slots[-1], cooperative=self._cooperative)
        for i, p in enumerate(packed):
            self._launch.args.values[self._slots[i]:self._slots[i + 1]] = p
        self._last, self._kinds = list(args), [overload_kind(a) for a in args]
        return True


class Relaunch:
    """A packed launch of one kernel, launched again with some parameters rewritten in place: 1-D
    C-contiguous arrays by address and length (their type and itemsize stay those packed), scalars
    by value. For callers whose launches differ call to call only in those, where packing argument
    objects would be most of a call's time."""

    __slots__ = ("_launch", "_values", "_slots", "_shapes", "_handle")

    def __init__(self, launch: KernelLaunch, slots: list, handle: int):
        self._launch, self._values, self._slots, self._handle = launch, launch.args.values, slots, handle
        self._shapes: dict = {}

    def array(self, i: int, address: int, n: int) -> None:
        """Argument i (a 1-D array) is now the n items at device `address`."""
        v, s = self._values, self._slots[i]
        v[s + 2] = v[s + 5] = n
        v[s + 4] = address

    def scalar(self, i: int, value: int) -> None:
        """Argument i (an integer) is now `value`."""
        self._values[self._slots[i]] = value & _MASK

    def __call__(self, blocks: int, threads: int) -> None:
        shaped = self._shapes.get((blocks, threads))
        if shaped is None:
            if len(self._shapes) >= 64:  # sizes vary call to call; keep the few recent ones
                self._shapes.clear()
            shaped = self._shapes[(blocks, threads)] = self._launch.reshaped(LaunchShape((blocks, 1, 1),
                                                                                       (threads, 1, 1)))
        shaped.enqueue(self._handle)


_LAUNCHERS: dict = {}


def launchers(stream):
    """`launch(kernel, blocks, threads, *args)` on `stream` through a `NumbaLaunch` a kernel, kept
    per stream, thread and context (a launcher's packed arguments are written by every call): for the
    drivers that launch the same few Numba kernels many times a call."""
    from . import memory

    key = (stream_handle(stream), threading.get_ident(), 0 if _SIM else memory._context()[0])  # kernels are a GPU's own
    table = _LAUNCHERS.get(key)
    if table is None:
        if len(_LAUNCHERS) >= 64:  # threads come and go
            _LAUNCHERS.clear()
        table = _LAUNCHERS[key] = {}

    def launch(kernel, blocks: int, threads: int, *args) -> None:
        launcher = table.get(kernel)
        if launcher is None:
            launcher = table[kernel] = NumbaLaunch(kernel, stream, retain=False)
        launcher(blocks, threads, *args)
    return launch
