"""A bounded least-recently-used cache that counts its hits and misses."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class LRUCache(Generic[V]):
    """At most `capacity` entries; `on_evict(value)` runs for each entry pushed out."""

    def __init__(self, capacity: int, on_evict: Callable[[V], None] | None = None):
        self.capacity = capacity
        self.on_evict = on_evict
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_build(self, key: Hashable, build: Callable[[], V]) -> V:
        """The cached value for `key`, building (outside the lock) and storing it on a miss."""
        with self._lock:
            if key in self._data:
                self.hits += 1
                self._data.move_to_end(key)
                return self._data[key]
            self.misses += 1
        value = build()
        evicted = []
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                evicted.append(self._data.popitem(last=False)[1])
        for v in evicted:
            if self.on_evict:
                self.on_evict(v)
        return value

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._data), "capacity": self.capacity}

    def clear(self) -> None:
        with self._lock:
            values = list(self._data.values())
            self._data.clear()
        for v in values:
            if self.on_evict:
                self.on_evict(v)
