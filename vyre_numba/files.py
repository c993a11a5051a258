"""Files that must be regular, opened for reading without waiting on what is not: a FIFO would
block an open for reading until some writer came, and a device such as /dev/zero never ends; and
sets of files written whole or not at all."""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from contextlib import contextmanager
from typing import BinaryIO, Callable, Iterable, Iterator

from .signals import uninterrupted

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegular(Exception):
    """The path names no regular file: `mode` is what it is (its st_mode; a link's where a link is
    not followed)."""

    def __init__(self, mode: int, path: str | os.PathLike | None = None):
        super().__init__(mode)
        self.mode, self.path = mode, path


@contextmanager
def regular(path: str | os.PathLike, *, follow: bool = True) -> Iterator[BinaryIO]:
    """The regular file at `path` open for reading, else NotRegular; a symbolic link is followed
    only where `follow`. OSError where it cannot be opened at all (missing, no permission)."""
    try:
        fd = os.open(path, _FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0)))
    except OSError:
        if not follow and os.path.islink(path):  # O_NOFOLLOW's ELOOP
            raise NotRegular(stat.S_IFLNK) from None
        raise
    try:
        mode = os.fstat(fd).st_mode  # the descriptor's: the path may name something else by now
        if not stat.S_ISREG(mode):
            raise NotRegular(mode)
        with open(fd, "rb", closefd=False) as f:
            yield f
    finally:
        os.close(fd)


def new_file_mode() -> int:
    """The mode `open()` gives a file it creates (0o666 less the umask), read without setting the
    umask where Linux shows it, since setting it to read it races with other threads' files."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_all(files: Iterable[tuple[str | os.PathLike, Callable[[BinaryIO], object]]]) -> None:
    """Write every (path, write(file)) as one set: each is written in full beside its path (for a
    symbolic link, the file it leads to, whose mode it keeps) before any replaces its path, so a
    failure while writing (a full disk, Ctrl-C) leaves every old file, or none, as it was. A path
    that names a folder (IsADirectoryError) or another file that is not regular (NotRegular) is
    refused before any is replaced; an OSError's `written` is the path it came at, its `replaced`
    the paths a failed rename came after."""
    files = list(files)
    staged: list[tuple[str, str]] = []  # (temporary name, the file it replaces)
    replaced: list = []
    path = None
    try:
        for path, write in files:
            real = os.path.realpath(path) if os.path.islink(path) else os.fspath(path)
            try:
                st = os.lstat(real)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise NotRegular(st.st_mode, path)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(real)),
                                       prefix=f".{os.path.basename(real)}.", suffix=".tmp")
            staged.append((tmp, real))
            with os.fdopen(fd, "wb") as f:
                write(f)
            # as open() would leave it: mkstemp's 0600 is for the temporary name
            os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else new_file_mode())
        with uninterrupted():  # a Ctrl-C between two renames would pair a new file with an old one
            for (tmp, real), (path, _) in zip(staged, files):
                os.replace(tmp, real)
                replaced.append(path)
    except OSError as e:
        e.written, e.replaced = path, replaced
        raise
    finally:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:  # renamed, as it should be
                pass
