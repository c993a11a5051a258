"""Large copies between pageable host memory and the device through a pair of pinned buffers: the
host side of each piece is copied on several threads (`host.copy_bytes`) while the copy engine
moves the piece before it. The driver's own pageable path stages on one thread (about 9 GB/s up
and 3.5 GB/s down on an H100 host, against 54 GB/s from pinned memory).

One pair of buffers a context, taken under the context's lock: copies from several threads take
turns on the bus anyway. Every copy waits for its own pieces before it returns or raises, so the
caller's host memory may change (upload) or be read (download) as soon as the call returns, and
no piece is in flight when the next copy takes the buffers. Reads below SMALL_BYTES have a small
pinned buffer a context of their own, for latency rather than bandwidth.

The buffers live as long as the process (one set a context handle); a context destroyed and
another made at the same handle would find them stale, so a process keeps its contexts."""
from __future__ import annotations

import threading

import numpy as np

from ..errors import DispatchError
from .host import COPY_CHUNK, copy_bytes
from .launch import driver_check as check

STAGED_BYTES = 2 * COPY_CHUNK  # from this size on, the copy is staged (below it the driver's path is as fast)
SMALL_BYTES = 1 << 20  # reads below this go through a pinned buffer of their own: on an H200 host a read of
#                        4 bytes took 26-28 us against 28-31 pageable, of 64 KiB 46-50 against 54-59
_SMALL: dict = {}  # context handle -> [lock, pinned uint8 array of SMALL_BYTES]
PIECE = 8 * COPY_CHUNK  # one buffer: a piece copied on up to eight threads
_BUFFERS: dict = {}  # context handle -> [lock, pinned uint8 array, pinned uint8 array, event, event]
_BUFFERS_LOCK = threading.Lock()
_HOLDING = threading.local()  # the contexts whose buffers this thread holds (inside an upload's `each`)


class _held:
    """`with _held(context, lock)`: the context's buffers taken by this thread; taking them again
    from inside (a staged copy started by an upload's `each`) would wait for itself forever, so
    it is refused."""

    def __init__(self, context: int, lock):
        self.context, self.lock = context, lock

    def __enter__(self) -> None:
        held = getattr(_HOLDING, "contexts", None)
        if held is None:
            held = _HOLDING.contexts = set()
        if self.context in held:
            raise DispatchError("a copy of 8 MiB or more was started from inside upload_in_pieces' `each`, while "
                                "the upload holds the staging buffers. Fix: make that copy before or after "
                                "upload_in_pieces; `each` should only enqueue work on the piece.")
        self.lock.acquire()
        try:  # an interrupt here must not leave the process's staging lock taken
            held.add(self.context)
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, *exc) -> None:
        try:
            _HOLDING.contexts.discard(self.context)
        finally:
            self.lock.release()


def _buffers(drv, context: int) -> list:
    """The context's lock, pair of pinned buffers and their events (made on first use; the
    context is current)."""
    with _BUFFERS_LOCK:
        bufs = _BUFFERS.get(context)
        if bufs is None:
            from numba import cuda

            events = []
            for _ in range(2):
                err, ev = drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
                check(err, "creating a copy event")
                events.append(ev)
            bufs = _BUFFERS[context] = [threading.Lock(), cuda.pinned_array(PIECE, np.uint8),
                                        cuda.pinned_array(PIECE, np.uint8), *events]
    return bufs


def _settle(drv, events) -> None:
    """Wait for both buffers' last copies (so none is in flight when the lock is let go)."""
    for ev in events:
        check(drv.cuEventSynchronize(ev)[0], "waiting for a staged copy")


def upload(drv, context: int, dst: int, src: np.ndarray, stream: int, each=None) -> None:
    """Copy the bytes of the contiguous host array `src` to device address `dst`, in order on
    `stream` (of the current context, whose handle is `context`). `each(at, size)`, if given, is
    called after each piece (bytes [at, at + size), PIECE bytes but the last) is enqueued: work it
    enqueues on `stream` runs on that piece while the host stages the next ones."""
    flat = src.reshape(-1).view(np.uint8)
    lock, *bufs = _buffers(drv, context)
    with _held(context, lock):
        try:
            for i, at in enumerate(range(0, flat.size, PIECE)):
                size = min(PIECE, flat.size - at)
                buf, ev = bufs[i % 2], bufs[2 + i % 2]
                check(drv.cuEventSynchronize(ev)[0], "waiting for a staging buffer")  # its last piece has left
                copy_bytes(buf[:size], flat[at:at + size])
                check(drv.cuMemcpyHtoDAsync(dst + at, buf.ctypes.data, size, stream)[0], "uploading a piece")
                check(drv.cuEventRecord(ev, stream)[0], "recording a copy event")
                if each is not None:
                    each(at, size)
        finally:
            _settle(drv, bufs[2:])


def download(drv, context: int, dst: np.ndarray, src: int, stream: int) -> None:
    """Copy the bytes at device address `src` into the contiguous host array `dst`, after the
    work enqueued on `stream` before it (`context` as for `upload`): below SMALL_BYTES through the
    context's small pinned buffer, staged from STAGED_BYTES on, the driver's own copy between
    (as fast there, and no buffer to take)."""
    flat = dst.reshape(-1).view(np.uint8)
    if flat.size < SMALL_BYTES:
        if flat.size:
            _small_download(drv, context, flat, src, stream)
        return
    if flat.size < STAGED_BYTES:
        _pageable_download(drv, flat, src, stream)
        return
    starts = list(range(0, flat.size, PIECE))
    lock, *bufs = _buffers(drv, context)

    def enqueue(i: int) -> None:
        at = starts[i]
        size = min(PIECE, flat.size - at)
        check(drv.cuMemcpyDtoHAsync(bufs[i % 2].ctypes.data, src + at, size, stream)[0], "reading back a piece")
        check(drv.cuEventRecord(bufs[2 + i % 2], stream)[0], "recording a copy event")

    with _held(context, lock):
        try:
            for i in range(min(2, len(starts))):
                enqueue(i)
            for i, at in enumerate(starts):
                size = min(PIECE, flat.size - at)
                check(drv.cuEventSynchronize(bufs[2 + i % 2])[0], "waiting for a piece")
                copy_bytes(flat[at:at + size], bufs[i % 2][:size])
                if i + 2 < len(starts):  # this buffer is free again
                    enqueue(i + 2)
        finally:
            _settle(drv, bufs[2:])


def _small_buffer(context: int) -> list | None:
    """The context's [lock, pinned buffer of SMALL_BYTES] for small reads, made on first use; None
    where pinned memory was refused (its reads then take the driver's pageable path)."""
    with _BUFFERS_LOCK:
        if context not in _SMALL:
            try:
                from numba import cuda

                _SMALL[context] = [threading.Lock(), cuda.pinned_array(SMALL_BYTES, np.uint8)]
            except Exception:  # out of pinned memory: a slower read, not a failed one
                _SMALL[context] = None
        return _SMALL[context]


def _small_download(drv, context: int, flat: np.ndarray, src: int, stream: int) -> None:
    """A read of fewer than SMALL_BYTES: copied on `stream` into the context's small pinned buffer
    (its own lock, so a read from inside an upload's `each` does not wait for that upload), then
    out of it once the stream reaches it. The stream is waited for even when the copy's call is
    interrupted, so no copy is in flight into the buffer once its lock is let go."""
    small = _small_buffer(context)
    if small is None:
        _pageable_download(drv, flat, src, stream)
        return
    lock, buf = small
    with lock:
        try:
            check(drv.cuMemcpyDtoHAsync(buf.ctypes.data, src, flat.size, stream)[0], "reading back a buffer")
        finally:
            (err,) = drv.cuStreamSynchronize(stream)
        check(err, "waiting for a read-back")
        flat[:] = buf[:flat.size]


def _pageable_download(drv, flat: np.ndarray, src: int, stream: int) -> None:
    """The driver's own copy into `flat`, once the work on `stream` before it is done."""
    check(drv.cuStreamSynchronize(stream)[0], "waiting for the work before a read-back")
    check(drv.cuMemcpyDtoH(flat.ctypes.data, src, flat.size)[0], "reading back a buffer")
