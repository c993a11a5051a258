"""A cross-process cache of assembled cubins on disk.

Entries are keyed by everything that changes the machine code (program digest, launch
configuration, SM, driver and toolkit versions, and a fingerprint of the emitter's own source),
written atomically (temporary file + rename), and verified by SHA-256 on load: a truncated or
corrupt entry is removed and rebuilt, never loaded. The directory is bounded in bytes, oldest
entries (by last use) go first.

    VYRE_NUMBA_CACHE_DIR   where entries live (`~` expanded; unset or blank: vyre-numba under
                           $XDG_CACHE_HOME where that is an absolute path, else ~/.cache)
    VYRE_NUMBA_CACHE       0/off/false/no/disabled switch the disk cache off; 1/on/true/yes/enabled
                           or unset (or empty) leave it on; case and surrounding blanks are
                           ignored; any other value raises SettingError
A directory that cannot be used (none can be found, or it cannot be written) costs the cache,
never the work: a CacheWarning says so once, with a Fix.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import INTEGERS, ArgumentError, CacheWarning, SettingError, a_type, shown

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
    """Where entries live: VYRE_NUMBA_CACHE_DIR, else vyre-numba under the user's cache directory
    (an absolute $XDG_CACHE_HOME, else ~/.cache); a SettingError where no home directory is known."""
    env = os.environ.get("VYRE_NUMBA_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG rule: a relative (or empty) one is ignored, not read from the working directory
        return Path(xdg) / "vyre-numba"
    try:
        return Path.home() / ".cache" / "vyre-numba"
    except RuntimeError:  # no $HOME and no passwd entry for this user (a container's arbitrary uid)
        raise SettingError("the disk cache has no directory: $HOME is unset and this user has no home directory. "
                           "Fix: set VYRE_NUMBA_CACHE_DIR to a writable directory (or HOME), or VYRE_NUMBA_CACHE=0 "
                           "to work without the disk cache.") from None


_WARNED: set = set()  # directories a CacheWarning was given for


def _unusable(directory, why: str) -> None:
    """A CacheWarning, once a directory, that the disk cache cannot be used there."""
    if directory in _WARNED:
        return
    _WARNED.add(directory)
    where = f"at {str(directory)!r} " if directory is not None else ""
    warnings.warn(f"the disk cache {where}cannot be used ({why}); kernels compile afresh in every process. Fix: "
                  "set VYRE_NUMBA_CACHE_DIR to a writable directory, or VYRE_NUMBA_CACHE=0 to work without it.",
                  CacheWarning, stacklevel=3)


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
        if isinstance(max_bytes, (bool, np.bool_)) or not isinstance(max_bytes, INTEGERS) or max_bytes < 1:
            raise ArgumentError(f"DiskCache: max_bytes={shown(max_bytes, 60)} is not a positive number of bytes. Fix: "
                                f"pass an int of at least 1 (default {DEFAULT_MAX_BYTES}).")
        if directory is not None and not isinstance(directory, (str, os.PathLike)):
            raise ArgumentError(f"DiskCache: directory is {a_type(directory)}, not a path. Fix: pass a str or a "
                                "pathlib.Path, or None for the default.")
        if isinstance(directory, str) and (not directory.strip() or "\0" in directory):
            raise ArgumentError(f"DiskCache: directory={shown(directory, 60)} is no directory name. Fix: pass a "
                                "directory's path, or None for the default.")
        self.directory: Path | None
        if directory is not None:
            self.directory = Path(directory).expanduser()
        else:
            try:
                self.directory = default_dir()
            except SettingError:  # no home: the work goes on without the cache, said once
                self.directory = None
                _unusable(None, "$HOME is unset and this user has no home directory")
        self.max_bytes = int(max_bytes)
        self.hits = self.misses = self.corrupt = self.writes = 0
        self._lock = threading.Lock()

    def path(self, key: tuple) -> Path:
        """The file that holds `key`'s entry."""
        return self.directory / (hashlib.sha256(repr(key).encode()).hexdigest() + ".cubin")

    def get(self, key: tuple) -> bytes | None:
        """The stored bytes, or None when absent or invalid (an invalid file is deleted)."""
        if self.directory is None:
            self.misses += 1
            return None
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
        if self.directory is None:
            return
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError:
            pass

    def put(self, key: tuple, payload: bytes) -> None:
        """Store atomically; an unwritable directory only costs the cache (a CacheWarning, once),
        never the dispatch."""
        if self.directory is None:
            return
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
                _unusable(self.directory, f"{type(e).__name__}: {e.strerror or e}")
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
