"""Streams for host dispatches, pooled and bounded so repeated dispatches create none after
warm-up."""
from __future__ import annotations

import threading
from typing import Any, Callable


class StreamPool:
    """Streams for in-flight dispatches: one per dispatch, reused afterwards; streams beyond
    `keep` idle ones are destroyed when given back."""

    def __init__(self, create: Callable[[], Any], keep: int = 16, destroy: Callable[[Any], Any] | None = None):
        self._create, self._destroy = create, destroy
        self._keep = keep
        self._free: list = []
        self._lock = threading.Lock()
        self.created = 0

    def take(self):
        with self._lock:
            if self._free:
                return self._free.pop()
            self.created += 1
        return self._create()

    def give(self, stream) -> None:
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(stream)
                return
        if self._destroy:
            self._destroy(stream)
