"""Device arrays from a stream-ordered memory pool of this package's own (cuMemPoolCreate, a
release threshold that keeps up to KEEP bytes of freed memory for reuse): an allocation or a free
costs about a microsecond, where Numba's `device_array` costs tens (cuMemAlloc, and deferred frees
that synchronise the context in batches). For outputs whose size is known only after a count on
the device (compaction) and for a call's own scratch arrays, allocated and freed on the legacy
default stream, so that every blocking stream's earlier work is ordered before the free. The last
few small arrays freed are kept as spares for the next allocation of their size made for use on
the legacy stream (`_reuse`), which then costs no driver call. `trim()` gives the spares and the
pool's idle memory back to the device."""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..errors import on_device_memory_error

_POOLS: dict = {}
_LOCK = threading.RLock()  # re-entered where an error made while a pool is made trims the pools (`room`)
@functools.cache
def _driver() -> tuple:
    """(driver, DeviceNDArray, MemoryPointer), imported on first use: an import statement in a call
    costs about a microsecond, and a pooled array is a few of them."""
    from cuda.bindings import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.driver import MemoryPointer

    return driver, DeviceNDArray, MemoryPointer
OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY
KEEP = 1 << 30  # freed bytes a pool holds for reuse past a synchronisation; more goes back to the device


def _check(err, what: str) -> None:
    from ..errors import DeviceError, device_memory_error

    code = getattr(err, "value", err)
    if code == OUT_OF_MEMORY:
        raise device_memory_error(what, getattr(err, "name", err))
    if code:
        raise DeviceError(f"{what} failed with CUDA error {err}. Fix: check free device memory "
                          "(nvidia-smi) and that the device is healthy.")


def _pool(device_id: int):
    with _LOCK:
        pool = _POOLS.get(device_id)
        if pool is None:
            from cuda.bindings import driver as drv

            props = drv.CUmemPoolProps()
            props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            props.handleTypes = drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
            props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = device_id
            err, pool = drv.cuMemPoolCreate(props)
            _check(err, "cuMemPoolCreate")
            keep = drv.cuuint64_t(KEEP)
            (err,) = drv.cuMemPoolSetAttribute(pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, keep)
            _check(err, "cuMemPoolSetAttribute")
            _POOLS[device_id] = pool
        return pool


def pool_free(address: int, context: int = 0) -> None:
    """Give memory from `pool_alloc` back to the pool (stream-ordered on the legacy default stream
    of its context). `context`: the driver handle of the context it was allocated in, made current
    for the free where this thread has another or none (an array dropped by a thread that never
    used the GPU, such as Dask's event loop); 0: the current one."""
    drv = _driver()[0]
    err, current = drv.cuCtxGetCurrent()
    if err:
        return  # at interpreter exit the driver may be gone, and the memory with it
    pushed = bool(context) and int(current) != context
    if pushed and drv.cuCtxPushCurrent(drv.CUcontext(context))[0]:
        return  # at interpreter exit the context may be gone, and its memory with it
    try:
        drv.cuMemFreeAsync(drv.CUdeviceptr(address), drv.CUstream(0))
    finally:
        if pushed:
            drv.cuCtxPopCurrent()


_CONTEXT: tuple = (0, None, None)  # (driver handle, numba context, pool) of the context current last time


def _context() -> tuple:
    """(handle, numba context, pool) of the current context; Numba's current_context() costs
    microseconds, the driver's handle a fraction of one. A tuple replaced whole, so a thread on
    another device never reads a mix of two contexts' entries."""
    global _CONTEXT
    drv = _driver()[0]
    handle = int(drv.cuCtxGetCurrent()[1])
    last = _CONTEXT
    if last[0] != handle or handle == 0:
        from numba import cuda

        ctx = cuda.current_context()
        last = _CONTEXT = (int(drv.cuCtxGetCurrent()[1]), ctx, _pool(ctx.device.id))
    return last


SPARES = 4  # freed pooled arrays kept for the next allocation of their size (see `_reuse`)
SPARE_BYTES = 1 << 26  # the largest kept
_SPARE: list = []  # (context handle, bytes, address), oldest first
_SPARE_LOCK = threading.RLock()  # a finalizer may free an array in the thread that holds it


def pool_alloc(nbytes: int, *, spare: bool = False) -> int:
    """The address of `nbytes` (at least 1) of device memory from the pool of the current
    device, ordered on the legacy default stream; owned by the caller (`pooled_array` or `pool_free`).
    `spare`: the caller's first use of it is on the legacy default stream, so it may be a spare
    (see `_reuse`)."""
    drv = _driver()[0]
    handle, ctx, pool = _context()
    size = max(int(nbytes), 1)
    if spare and _SPARE:
        address = _reuse(handle, size)
        if address:
            return address
    stream = drv.CUstream(0)
    err, ptr = drv.cuMemAllocFromPoolAsync(size, pool, stream)
    if err == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:  # Numba's pending frees and our spares may hold what is missing
        for owner in (getattr(ctx, "memory_manager", None), ctx):
            pending = getattr(owner, "deallocations", None)
            if pending is not None:
                pending.clear()
        _free_spares()
        err, ptr = drv.cuMemAllocFromPoolAsync(size, pool, stream)
    _check(err, f"allocating {nbytes} bytes on the device")
    return int(ptr)


def _reuse(context: int, nbytes: int) -> int:
    """The address of a spare of exactly `nbytes` in `context`, taken from the spares, or 0.
    Spares are pooled arrays freed while no more than SPARES smaller than SPARE_BYTES were kept:
    the next allocation of the same size takes one back without the driver (an allocation and a
    free cost several microseconds of host time each, most of a small selection's). Nothing is
    enqueued when a spare is freed or taken, so only callers whose first use is on the legacy
    default stream take spares (`pool_alloc(spare=True)`): that work waits for all the work that
    blocking streams enqueued before it, the previous owner's included, as the pool's free would
    have made it. A call's scratch used on another stream comes from the pool."""
    with _SPARE_LOCK:  # nothing in here allocates a tracked object, so no collection frees an array midway
        for i in range(len(_SPARE)):
            entry = _SPARE[i]
            if entry[1] == nbytes and entry[0] == context:
                _SPARE.pop(i)
                return entry[2]
    return 0


def _release(address: int, nbytes: int, context: int) -> None:
    """Free a pooled array of `nbytes` (see `owning_pointer`): kept as a spare for the next
    allocation of that size where it is small enough, the oldest spare beyond SPARES going
    back to the pool."""
    if nbytes > SPARE_BYTES:
        pool_free(address, context)
        return
    entry = (context, nbytes, address)  # made outside the lock: a collection it starts may free arrays
    with _SPARE_LOCK:
        _SPARE.append(entry)
        old = _SPARE.pop(0) if len(_SPARE) > SPARES else None
    if old is not None:
        pool_free(old[2], old[0])


def _free_spares() -> None:
    """Give every spare back to its pool."""
    spares: list = []
    with _SPARE_LOCK:
        spares.extend(_SPARE)
        _SPARE.clear()
    for context, _, address in spares:
        pool_free(address, context)


def pool_copy(address: int, nbytes: int, free=None) -> int:
    """A new pool allocation holding the first `nbytes` of the one at `address`, which is then
    given back (`free()` where given: by its owner), both stream-ordered on the legacy default
    stream."""
    drv = _driver()[0]
    new = pool_alloc(nbytes, spare=True)  # first written by the copy below, on the legacy stream
    (err,) = drv.cuMemcpyDtoDAsync(drv.CUdeviceptr(new), drv.CUdeviceptr(address), max(int(nbytes), 1), drv.CUstream(0))
    if err:
        pool_free(new)
        _check(err, f"copying {nbytes} bytes on the device")
    if free is None:
        pool_free(address)
    else:
        free()
    return new


def owning_pointer(address: int, nbytes: int):
    """A Numba MemoryPointer owning the pool memory of `nbytes` (what `pool_alloc` gave: a spare
    is taken by that size) at `address`: given back (stream-ordered) once when it is garbage
    collected or `free()`d, in whichever thread drops it."""
    drv, _, MemoryPointer = _driver()
    handle, ctx, _ = _context()
    size = max(int(nbytes), 1)
    return MemoryPointer(ctx, drv.CUdeviceptr(address), size, finalizer=lambda: _release(address, size, handle))


def pooled_array(n: int, dtype, address: int | None = None, pointer=None) -> "object":
    """A 1-D numba device array of `n` items of `dtype` from the pool (at `address`, from
    `pool_alloc`, when given; it then owns that memory; or in the memory `pointer` of
    `owning_pointer` owns), ordered on the legacy default stream; freed (stream-ordered) when the
    array is garbage collected."""
    _, DeviceNDArray, _ = _driver()
    dtype = np.dtype(dtype)
    if pointer is None:
        size = max(int(n) * dtype.itemsize, 1)
        pointer = owning_pointer(pool_alloc(size) if address is None else address, size)
    return DeviceNDArray((int(n),), (dtype.itemsize,), dtype, gpu_data=pointer)


def trim() -> None:
    """Give every pool's idle memory back to the device (memory in use stays)."""
    from cuda.bindings import driver as drv

    _free_spares()
    with _LOCK:
        pools = list(_POOLS.values())
    for pool in pools:
        _check(drv.cuMemPoolTrimTo(pool, 0)[0], "trimming the memory pool")


def unzeroed(backend, n: int, dtype) -> "object":
    """A numba device array of n items, not zeroed (its caller writes it before reading it), on
    the backend's stream: what an algorithm hands back to its caller, which then owns it like any
    numba array (zeroing a GiB of results costs 0.4 ms). `backend.empty(n, dtype)` elsewhere (the
    CUDA simulator's stand-ins)."""
    if getattr(backend, "name", None) != "cuda":
        return backend.empty(n, dtype)
    from numba import cuda

    return cuda.device_array(int(n), dtype=dtype, stream=backend.stream)


def scratch(backend, n: int, dtype) -> "object":
    """A device array of n items, not zeroed, that a call uses and drops before it returns: from
    the pool on the cuda backend, where an allocation costs a microsecond (its free is ordered on
    the legacy stream, after the backend's blocking stream's work); `backend.empty(n, dtype)`
    elsewhere."""
    if getattr(backend, "name", None) != "cuda":
        return backend.empty(n, dtype)
    return pooled_array(n, dtype)


def room() -> str:
    """Gives the pools' idle memory and the spares back to the device, then says what the current
    context's GPU has free: for the message of a call that ran out of GPU memory."""
    drv = _driver()[0]
    if _POOLS or _SPARE:
        trim()
    err, free, total = drv.cuMemGetInfo()
    if err:
        return ""
    return f"The GPU has {free / 2**30:.2f} GiB of {total / 2**30:.2f} GiB free now."


on_device_memory_error(room)
