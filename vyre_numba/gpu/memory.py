"""Reusable memory for host dispatches: pinned host staging buffers, transient device buffers and
streams, each pooled and bounded so repeated dispatches allocate nothing after warm-up."""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Callable


def bucket(nbytes: int) -> int:
    """Allocation size class: the next power of two, at least 256 bytes."""
    return max(256, 1 << max(0, int(nbytes) - 1).bit_length())


class Pool:
    """Free lists of buffers by size class, holding at most `max_bytes` of idle buffers."""

    def __init__(self, allocate: Callable[[int], Any], max_bytes: int):
        self._allocate = allocate
        self.max_bytes = max_bytes
        self._free: dict[int, list] = defaultdict(list)
        self._idle_bytes = 0
        self._lock = threading.Lock()
        self.allocations = 0
        self.reuses = 0

    def take(self, nbytes: int):
        """A buffer of at least `nbytes` bytes (its size class)."""
        size = bucket(nbytes)
        with self._lock:
            free = self._free.get(size)
            if free:
                self._idle_bytes -= size
                self.reuses += 1
                return free.pop()
            self.allocations += 1
        return self._allocate(size)

    def give(self, buf, nbytes: int) -> None:
        """Return a buffer taken for `nbytes`; dropped (freed) if the pool is full."""
        size = bucket(nbytes)
        with self._lock:
            if self._idle_bytes + size <= self.max_bytes:
                self._free[size].append(buf)
                self._idle_bytes += size

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._idle_bytes = 0

    def stats(self) -> dict[str, int]:
        return {"allocations": self.allocations, "reuses": self.reuses, "idle_bytes": self._idle_bytes}


class StreamPool:
    """Streams for in-flight dispatches: one per dispatch, reused afterwards."""

    def __init__(self, create: Callable[[], Any], keep: int = 16):
        self._create = create
        self._keep = keep
        self._free: list = []
        self._lock = threading.Lock()

    def take(self):
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._create()

    def give(self, stream) -> None:
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(stream)
