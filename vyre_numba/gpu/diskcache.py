"""A cross-process cache of assembled cubins on disk.

Entries are keyed by everything that changes the machine code (program digest, launch
configuration, SM, driver and toolkit versions, and a fingerprint of the emitter's own source),
written atomically (temporary file + rename), and verified on load by a SHA-256 of the payload
and one of the key it was stored for: a truncated or corrupt entry, one copied or linked from
another key's name, and anything but a regular file in an entry's place are removed and rebuilt,
never loaded (nor waited on). The directory is bounded in bytes, oldest entries (by last use)
go first; another writer's temporary files are neither counted nor removed.

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
import re
import stat
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import INTEGERS, ArgumentError, CacheWarning, SettingError, a_type, shown, warn_user
from ..files import NotRegular, new_file_mode, regular

MAGIC = b"VYRECUB2"  # then SHA-256 of repr(key), SHA-256 of the payload, the payload
_FORMER = b"VYRECUB"  # an entry of another format version: a plain miss, replaced by the next put
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
    (an absolute $XDG_CACHE_HOME, else ~/.cache); a SettingError where the home directory it needs
    is not known (no $HOME, or a `~user` of a user this system does not know)."""
    env = os.environ.get("VYRE_NUMBA_CACHE_DIR", "").strip()
    if env:
        try:
            return _absolute(Path(env).expanduser())
        except RuntimeError:  # `~user/...` of a user this system does not know, or `~` with no home
            raise SettingError(f"VYRE_NUMBA_CACHE_DIR={shown(env)} starts with {shown(env.split('/')[0], 40)}, a "
                               "home directory this system does not know. Fix: set VYRE_NUMBA_CACHE_DIR to a writable "
                               "directory's absolute path, or VYRE_NUMBA_CACHE=0 to work without the disk "
                               "cache.") from None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG rule: a relative (or empty) one is ignored, not read from the working directory
        return Path(xdg) / "vyre-numba"
    try:
        return Path.home() / ".cache" / "vyre-numba"
    except RuntimeError:  # no $HOME and no passwd entry for this user (a container's arbitrary uid)
        raise SettingError("the disk cache has no directory: $HOME is unset and this user has no home directory. "
                           "Fix: set VYRE_NUMBA_CACHE_DIR to a writable directory (or HOME), or VYRE_NUMBA_CACHE=0 "
                           "to work without the disk cache.") from None


_WARNED: set = set()  # directories (and entries) a CacheWarning was given for
LOST = "kernels compile afresh in every process"  # what an unusable disk cache costs
_ENTRY = re.compile(r"[0-9a-f]{64}\.cubin\Z")  # an entry's name: only these are counted and trimmed


def _unusable(directory, why: str, lost: str = LOST, explicit: bool = False) -> None:
    """A CacheWarning, once a directory, that the disk cache cannot be used there (`lost`: what that
    costs; `explicit`: the directory was passed, not read from the settings)."""
    said = directory if directory is not None else ("no directory", lost)  # each cache's cost said once
    if said in _WARNED:
        return
    _WARNED.add(said)
    where = f"at {str(directory)!r} " if directory is not None else ""
    fix = ("pass a writable directory" if explicit else
           "set VYRE_NUMBA_CACHE_DIR to a writable directory, or VYRE_NUMBA_CACHE=0 to work without it")
    warn_user(CacheWarning(f"the disk cache {where}cannot be used ({why}); {lost}. Fix: {fix}."))


def _entry_unusable(path: Path) -> None:
    """A CacheWarning, once an entry, that something not the cache's own stands in its place."""
    if path in _WARNED:
        return
    _WARNED.add(path)
    warn_user(CacheWarning(f"the disk cache entry {str(path)!r} is a directory that is not empty, so that entry is "
                           "never stored. Fix: remove that directory (the cache keeps only files there)."))


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


def _key_digest(key: tuple) -> bytes:
    """SHA-256 of `key`'s repr: the entry's file name, and stored in it to tie the two together."""
    return hashlib.sha256(repr(key).encode()).digest()


def check_max_bytes(value, owner: str, default: int | None) -> int:
    """A cache's `max_bytes` argument as an int; ArgumentError where it is no positive int."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, INTEGERS) or value < 1:
        raise ArgumentError(f"{owner}: max_bytes={shown(value, 60)} is not a positive number of bytes. Fix: pass an "
                            f"int of at least 1{f' (default {default})' if default else ''}.")
    return int(value)


def _directory(directory, owner: str = "DiskCache") -> Path:
    """A cache's `directory` argument as a Path; ArgumentError where it names no directory."""
    fs = os.fspath(directory) if isinstance(directory, (str, os.PathLike)) else None
    if not isinstance(fs, str):
        raise ArgumentError(f"{owner}: directory is {a_type(directory if fs is None else fs)}, not a path. Fix: "
                            "pass a str or a pathlib.Path, or None for the default.")
    try:
        if fs.strip() and "\0" not in fs:
            return _absolute(Path(fs).expanduser())
    except RuntimeError:  # `~user` of a user this system does not know
        pass
    raise ArgumentError(f"{owner}: directory={shown(directory, 60)} is no directory name. Fix: pass a "
                        "directory's path (an absolute one, or ~ for your own home), or None for the default.")


def _a_directory(p: Path) -> bool:
    """Whether `p` is a directory and not a link to one; False where that cannot be known (no
    permission to look, a name too long), as Path.is_dir would raise."""
    return os.path.isdir(p) and not os.path.islink(p)


def _absolute(p: Path) -> Path:
    """`p` made absolute now, so that a later chdir (`%cd` in a notebook) does not move the cache."""
    try:
        return p.absolute()
    except OSError:  # the working directory was removed: the path is kept as given
        return p


def _read_regular(p: Path, limit: int) -> bytes | None:
    """The bytes of the regular file `p`; None where it is missing or unreadable; b"" (so corrupt)
    where it is anything else (a link, FIFO, device or directory is neither followed nor waited
    on) or longer than `limit` bytes (no entry is: it is not read)."""
    try:
        with regular(p, follow=False) as f:
            if os.fstat(f.fileno()).st_size > limit:
                return b""
            return f.read(limit + 1)
    except NotRegular:
        return b""
    except OSError:
        return None


class DiskCache:
    """Bytes by key on disk, verified on load. Safe across threads and processes."""

    def __init__(self, directory: str | os.PathLike | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 lost: str = LOST, owner: str = "DiskCache", subdir: str | None = None):
        self.max_bytes = check_max_bytes(max_bytes, owner, DEFAULT_MAX_BYTES if owner == "DiskCache" else None)
        self._lost, self._explicit = lost, directory is not None  # for the warning an unusable directory gives
        self.directory: Path | None
        if directory is not None:
            self.directory = _directory(directory, owner)
        else:
            try:
                self.directory = default_dir() / subdir if subdir else default_dir()
            except SettingError as e:  # no home, or `~nouser`: the work goes on without the cache, said once
                self.directory = None
                _unusable(None, str(e).split(" Fix: ")[0].rstrip("."), lost)
        self.hits = self.misses = self.corrupt = self.writes = 0
        self._lock = threading.Lock()

    def path(self, key: tuple) -> Path:
        """The file that holds `key`'s entry."""
        return self.directory / (_key_digest(key).hex() + ".cubin")

    def get(self, key: tuple) -> bytes | None:
        """The stored bytes, or None when absent or invalid (an invalid file is deleted)."""
        if self.directory is None:
            self.misses += 1
            return None
        p = self.path(key)
        head = len(MAGIC) + 64
        data = _read_regular(p, head + self.max_bytes)  # no entry is longer: the trim keeps none past max_bytes
        if data is None or data[:len(_FORMER)] == _FORMER and data[:len(MAGIC)] != MAGIC:
            self.misses += 1
            return None
        payload = data[head:]
        if (data[:len(MAGIC)] != MAGIC or data[len(MAGIC):len(MAGIC) + 32] != _key_digest(key)
                or data[len(MAGIC) + 32:head] != hashlib.sha256(payload).digest()):
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
        p = self.path(key)
        try:
            p.unlink(missing_ok=True)
        except OSError:
            try:  # a directory in its place (unlink refuses one): removed where empty
                if _a_directory(p):
                    p.rmdir()
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
                f.write(MAGIC + _key_digest(key) + hashlib.sha256(payload).digest() + payload)
            try:  # readable by whom open() would let: mkstemp's 0600 hid entries from other users
                os.chmod(tmp, new_file_mode())
            except OSError:  # a file system without modes (some FUSE and network mounts): the entry still serves
                pass
            os.replace(tmp, self.path(key))
            tmp = None
            self.writes += 1
        except BaseException as e:
            lost = tmp is not None and not os.path.lexists(tmp)  # another process took it: a race, not a fault
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            if isinstance(e, OSError):
                entry = self.path(key)
                if _a_directory(entry):  # this entry's place alone, not the directory
                    self.remove(key)  # (removed where empty: the next put stores it)
                    if _a_directory(entry):
                        _entry_unusable(entry)
                elif not (lost and isinstance(e, FileNotFoundError)):
                    _unusable(self.directory, f"{type(e).__name__}: {e.strerror or e}", self._lost, self._explicit)
                return
            raise
        self._trim()

    def _trim(self) -> None:
        with self._lock:
            entries = []
            for p in self.directory.glob("*.cubin"):
                if not _ENTRY.match(p.name):  # another writer's temporary file, or no file of the cache's
                    continue
                try:
                    st = p.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):  # a directory or link in an entry's place is no entry's size
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
