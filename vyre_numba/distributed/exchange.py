"""Arrays handed between the processes of one distributed call through shared memory, where the
client and every worker share a host: a directory in /dev/shm that the call owns (made when it
starts, removed when it ends, however it ends). A task writes an array there and sends Dask only
its name; the receiver maps the file. Dask's comm moves bytes between processes of one host at
about 1 GB/s; a file in shared memory costs one copy in and none out.

Where a worker cannot see the directory (another host), or shared memory is short, the arrays go
through Dask as they would without it."""
from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import uuid
import weakref
from dataclasses import dataclass

import numpy as np

from ..errors import DispatchError

ROOT = "/dev/shm"
MIN_BYTES = 1 << 20  # below this a file costs more than Dask's comm


@dataclass(frozen=True)
class Sent:
    """An array a task wrote into the call's directory: what the receiver maps."""

    path: str
    dtype: str
    shape: tuple


class Exchange:
    """The call's directory, or none (`path` None: everything goes through Dask). `close()` (also
    on exit of a `with` block, and when the object is collected) removes it with every file."""

    def __init__(self, enabled: bool = True, root: str = ROOT):
        self.path: str | None = None
        if enabled and os.path.isdir(root) and os.access(root, os.W_OK):
            try:
                self.path = tempfile.mkdtemp(prefix="vyre-", dir=root)
            except OSError:
                self.path = None
        self._done = weakref.finalize(self, shutil.rmtree, self.path, True) if self.path else None

    def close(self) -> None:
        if self._done is not None:
            self._done()
        self.path = None

    def __enter__(self) -> "Exchange":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def area(self, nbytes: int) -> str | None:
        """A new file of `nbytes` bytes, its memory reserved (so writers cannot fault on a full
        /dev/shm), for workers to write into with `write_at`; None where there is no room."""
        if self.path is None or nbytes <= 0:
            return None
        name = os.path.join(self.path, uuid.uuid4().hex)
        try:
            fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.posix_fallocate(fd, 0, nbytes)
            finally:
                os.close(fd)
        except OSError:
            _unlink(name)
            return None
        return name


def visible(path: str | None) -> bool:
    """(Runs on a worker.) Whether this process sees the call's directory (shares its host)."""
    return path is not None and os.path.isdir(path)


def send(path: str | None, a: np.ndarray):
    """(Runs on a worker.) `a` as a `Sent` file in the directory `path`, or `a` itself where there
    is no directory, `a` is small, or the file cannot be written."""
    if path is None or not isinstance(a, np.ndarray) or a.nbytes < MIN_BYTES:
        return a
    name = os.path.join(path, uuid.uuid4().hex)
    try:
        fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.posix_fallocate(fd, 0, a.nbytes)
            _write(fd, np.ascontiguousarray(a), 0)
        finally:
            os.close(fd)
    except OSError:
        _unlink(name)
        return a
    return Sent(name, a.dtype.str, a.shape)


def write_at(name: str, a: np.ndarray, offset: int) -> None:
    """(Runs on a worker.) `a`'s bytes into the area file `name` from byte `offset`."""
    try:
        fd = os.open(name, os.O_WRONLY)
    except OSError as e:
        raise _gone(name, e) from None
    try:
        _write(fd, np.ascontiguousarray(a), offset)
    finally:
        os.close(fd)


def received(x):
    """The array a task sent: a `Sent` file mapped (private, populated: reads cost no faults later,
    writes stay in this process), anything else as it is."""
    if not isinstance(x, Sent):
        return x
    return mapped(x.path, np.dtype(x.dtype), x.shape)


def mapped(name: str, dtype, shape) -> np.ndarray:
    """The file `name` as a NumPy array of `shape`, private to this process."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError as e:
        raise _gone(name, e) from None
    try:
        flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
        mm = mmap.mmap(fd, nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return np.frombuffer(mm, dtype).reshape(shape)


def _write(fd: int, a: np.ndarray, offset: int) -> None:
    view = memoryview(a.reshape(-1).view(np.uint8))
    done = 0
    while done < view.nbytes:
        done += os.pwrite(fd, view[done:], offset + done)


def _unlink(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def _gone(name: str, e: OSError) -> DispatchError:
    return DispatchError(f"the shared-memory file {name} of this call is gone ({e.strerror}): a task ran on a "
                         "host other than the one the call started on, or after the call ended. Fix: call again "
                         "with shared_memory=False (every array through Dask's comm).")
