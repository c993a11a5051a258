"""Autotuned workgroup sizes, remembered: `DispatchConfig(workgroup="tune")` times the candidate
1-D block sizes once per (program digest, device, size bucket), keeps the fastest, and stores the
choice beside the disk cache (`<cache dir>/tune/`), so later processes reuse it without timing.

The candidates run on zero-filled scratch buffers of the dispatch's sizes, never on the caller's
data. Entries are checked on load like the disk cache's (digests of the key and the payload, then
a well-formed choice stored for this key); a bad entry is deleted and timed again. The directory
is bounded in bytes."""
from __future__ import annotations

import json
from typing import Callable, Sequence

import numpy as np

from ..errors import ArgumentError, shown
from .diskcache import DiskCache, _directory, check_max_bytes, enabled

CANDIDATES = (32, 64, 128, 256, 512, 1024)  # timed beside the occupancy rule's choice, any warp multiple
MAX_BYTES = 1 << 20


def choosable(wg) -> bool:
    """Whether `wg` is a block size the tuner can choose: a multiple of 32 from 32 to 1024."""
    return isinstance(wg, int) and not isinstance(wg, bool) and 32 <= wg <= 1024 and wg % 32 == 0


def bucket(largest: int) -> int:
    """The size bucket of a dispatch whose largest buffer has `largest` elements: its bit length,
    so sizes within a factor of two share a choice."""
    return max(int(largest), 0).bit_length()


def fastest(candidates: Sequence[int], time_us: Callable[[int], float]) -> tuple[int, dict[int, float]]:
    """(the candidate with the smallest time, ties to the smaller; every candidate's time)."""
    times = {int(c): float(time_us(int(c))) for c in candidates}
    return min(times, key=lambda c: (times[c], c)), times


class TuneStore:
    """Tuned workgroup sizes by key, in memory and (when the disk cache is on) on disk."""

    def __init__(self, directory=None, *, max_bytes: int = MAX_BYTES, persist: bool | None = None):
        if persist is not None and not isinstance(persist, (bool, np.bool_)):
            raise ArgumentError(f"TuneStore: persist={shown(persist, 60)} is not a bool. Fix: pass True, False, or "
                                "None to follow VYRE_NUMBA_CACHE.")
        check_max_bytes(max_bytes, "TuneStore", MAX_BYTES)  # checked where it persists or not
        if directory is not None:
            _directory(directory, "TuneStore")
        self.persist = enabled() if persist is None else bool(persist)
        self.disk: DiskCache | None = None  # read and written only where the store persists
        if self.persist:  # beside the disk cache by default (no home: DiskCache says so once and stores nothing)
            self.disk = DiskCache(directory, max_bytes=max_bytes, lost="workgroup sizes are timed afresh in every "
                                  "process", owner="TuneStore", subdir="tune")
        self.memory: dict[tuple, int] = {}
        self.timed = 0

    def get(self, key: tuple) -> int | None:
        """The stored choice for `key`, or None (absent, or an entry that failed its checks)."""
        if key in self.memory:
            return self.memory[key]
        if not self.persist:
            return None
        raw = self.disk.get(key)
        if raw is None:
            return None
        try:
            doc = json.loads(raw.decode())
            wg = doc["workgroup"]
            ok = choosable(wg) and doc["key"] == repr(key)  # the entry of this key, not one copied from another's
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):  # RecursionError: '[' * 10**5
            ok = False
        if not ok:
            self.disk.corrupt += 1
            self.disk.remove(key)
            return None
        self.memory[key] = wg
        return wg

    def put(self, key: tuple, workgroup: int, times: dict[int, float]) -> None:
        """Remember `workgroup` for `key` (and the times that chose it)."""
        self.memory[key] = int(workgroup)
        if self.persist:
            payload = {"workgroup": int(workgroup), "us": {str(c): t for c, t in times.items()}, "key": repr(key)}
            self.disk.put(key, json.dumps(payload).encode())
