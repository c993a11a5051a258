"""A bounded least-recently-used cache that counts its hits and misses."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

from .errors import DispatchError, shown

V = TypeVar("V")


class LRUCache(Generic[V]):
    """At most `capacity` entries (and, given `weight`, at most `max_weight` in all, though never
    fewer than the newest entry); `on_evict(value)` runs for each entry pushed out."""

    def __init__(self, capacity: int, on_evict: Callable[[V], None] | None = None, *,
                 max_weight: int | None = None, weight: Callable[[V], int] | None = None):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise DispatchError(f"a cache of capacity {shown(capacity)} holds nothing. Fix: give a positive int.")
        self.capacity = capacity
        self.on_evict = on_evict
        self.max_weight, self.weight = max_weight, weight
        self.weight_total = 0
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The cached value for `key` (counted as a hit) or None (a miss)."""
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
            self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> V:
        """Store `value` under `key` (evicting the oldest past the bounds); the value now cached."""
        evicted = []
        with self._lock:
            old = self._data.get(key)
            if old is not None:  # another thread stored it first: keep one
                self._data.move_to_end(key)
                evicted.append(value)
                value = old
            else:
                w = self.weight(value) if self.weight else 0  # first: a weight that raises stores nothing
                self._data[key] = value
                self.weight_total += w
                evicted += self._trim()
        self._release(evicted)
        return value

    def _trim(self) -> list:
        out = []
        while len(self._data) > self.capacity or (
                self.max_weight is not None and self.weight_total > self.max_weight and len(self._data) > 1):
            _, v = self._data.popitem(last=False)
            self.weight_total -= self.weight(v) if self.weight else 0
            out.append(v)
        return out

    def get_or_build(self, key: Hashable, build: Callable[[], V]) -> V:
        """The cached value for `key`, building (outside the lock) and storing it on a miss."""
        with self._lock:
            if key in self._data:
                self.hits += 1
                self._data.move_to_end(key)
                return self._data[key]
            self.misses += 1
        return self.put(key, build())

    def values(self) -> list[V]:
        """The cached values, oldest first."""
        with self._lock:
            return list(self._data.values())

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def stats(self) -> dict[str, int]:
        """Hits, misses, entries held and the capacity."""
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._data), "capacity": self.capacity}

    def clear(self) -> None:
        """Drop every entry (each evicted value goes to `on_evict`)."""
        with self._lock:
            values = list(self._data.values())
            self._data.clear()
            self.weight_total = 0
        self._release(values)

    def _release(self, values: list) -> None:
        """`on_evict` for every value, even after one raises (the first error is raised after)."""
        failed = None
        for v in values:
            try:
                if self.on_evict:
                    self.on_evict(v)
            except BaseException as e:  # noqa: B902 (released all the same, then raised)
                failed = failed or e
        if failed is not None:
            raise failed
