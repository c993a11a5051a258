"""A cross-process cache of assembled cubins on disk.

Entries are keyed by everything that changes the machine code (program digest, launch
configuration, SM, driver and toolkit versions, and a fingerprint of the emitter's own source),
written atomically (temporary file + rename), and verified by SHA-256 on load: a truncated or
corrupt entry is removed and rebuilt, never loaded. The directory is bounded in bytes, oldest
entries (by last use) go first.

    VYRE_NUMBA_CACHE_DIR   where entries live (default: ~/.cache/vyre-numba)
    VYRE_NUMBA_CACHE       0/off/false/no/disabled switch the disk cache off; 1/on/true/yes/enabled
                           or unset (or empty) leave it on; case and surrounding blanks are
                           ignored; any other value raises SettingError
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from ..errors import SettingError, shown

MAGIC = b"VYRECUB1"
DEFAULT_MAX_BYTES = 512 * 1024 * 1024


_OFF = ("0", "off", "false", "no", "disabled")
_ON = ("1", "on", "true", "yes", "enabled")


def enabled() -> bool:
    """Whether the disk cache is on, from VYRE_NUMBA_CACHE; an unrecognised value raises SettingError."""
    raw = os.environ.get("VYRE_NUMBA_CACHE")
    if raw is None:
        return True
    value = raw.strip().lower()
    if value in _ON or not value:
        return True
    if value in _OFF:
        return False
    raise SettingError(f"VYRE_NUMBA_CACHE={shown(raw)} is not a recognised setting (on: {', '.join(_ON)}; "
                    f"off: {', '.join(_OFF)}). Fix: set VYRE_NUMBA_CACHE to one of those, or unset it.")


def default_dir() -> Path:
    """Where entries live: VYRE_NUMBA_CACHE_DIR, else vyre-numba under the user's cache directory."""
    env = os.environ.get("VYRE_NUMBA_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vyre-numba"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of what decides the PTX a program becomes: the IR, optimizer, emitter and templates,
    the launch edits (`programmatic_ptx`), and NumPy's version (the optimizer folds constants
    through NumPy's functions)."""
    import numpy

    from ..version import __version__

    from ..ptx.templates import template_dir

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"{__version__} numpy {numpy.__version__}".encode())
    files = (sorted((root / "ptx").glob("*.py")) + sorted((root / "ir").glob("*.py")) + [root / "gpu" / "launch.py"]
             + sorted(template_dir().glob("*.ptx")))
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


class DiskCache:
    """Bytes by key on disk, verified on load. Safe across threads and processes."""

    def __init__(self, directory: str | os.PathLike | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory) if directory is not None else default_dir()
        self.max_bytes = max_bytes
        self.hits = self.misses = self.corrupt = self.writes = 0
        self._lock = threading.Lock()

    def path(self, key: tuple) -> Path:
        """The file that holds `key`'s entry."""
        return self.directory / (hashlib.sha256(repr(key).encode()).hexdigest() + ".cubin")

    def get(self, key: tuple) -> bytes | None:
        """The stored bytes, or None when absent or invalid (an invalid file is deleted)."""
        p = self.path(key)
        try:
            data = p.read_bytes()
        except OSError:
            self.misses += 1
            return None
        payload = data[len(MAGIC) + 32:]
        if data[:len(MAGIC)] != MAGIC or hashlib.sha256(payload).digest() != data[len(MAGIC):len(MAGIC) + 32]:
            self.corrupt += 1
            self.misses += 1
            self.remove(key)
            return None
        try:
            os.utime(p)
        except OSError:
            pass
        self.hits += 1
        return payload

    def remove(self, key: tuple) -> None:
        """Delete an entry (one that verified but would not load, say); never raises."""
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError:
            pass

    def put(self, key: tuple, payload: bytes) -> None:
        """Store atomically; an unwritable directory only costs the cache, never the dispatch."""
        tmp = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".cubin")
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, self.path(key))
            tmp = None
            self.writes += 1
        except BaseException as e:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            if isinstance(e, OSError):
                return
            raise
        self._trim()

    def _trim(self) -> None:
        with self._lock:
            entries = []
            for p in self.directory.glob("*.cubin"):
                try:
                    st = p.stat()
                except OSError:
                    continue
                entries.append((st.st_mtime, st.st_size, p))
            total = sum(e[1] for e in entries)
            for _, size, p in sorted(entries, key=lambda e: e[0]):
                if total <= self.max_bytes:
                    break
                try:
                    p.unlink(missing_ok=True)
                except OSError:
                    continue
                total -= size

    def stats(self) -> dict[str, int]:
        """Hits, misses, corrupt entries found and writes, since this object was made."""
        return {"hits": self.hits, "misses": self.misses, "corrupt": self.corrupt, "writes": self.writes}
