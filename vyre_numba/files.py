"""Files that must be regular, opened for reading without waiting on what is not: a FIFO would
block an open for reading until some writer came, and a device such as /dev/zero never ends."""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from typing import BinaryIO, Iterator

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegular(Exception):
    """The path names no regular file: `mode` is what it is (its st_mode; a link's where a link is
    not followed)."""

    def __init__(self, mode: int):
        super().__init__(mode)
        self.mode = mode


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
