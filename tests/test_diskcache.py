"""The cross-process cubin cache: atomic, verified, bounded, switchable; a fresh process on a GPU
loads from it without emitting or assembling."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from vyre_numba.errors import CacheWarning, SettingError
from vyre_numba.gpu import diskcache
from vyre_numba.gpu.diskcache import MAGIC, DiskCache


def test_roundtrip_and_counts(tmp_path):
    c = DiskCache(tmp_path)
    assert c.get(("k", 1)) is None
    c.put(("k", 1), b"cubin bytes")
    assert c.get(("k", 1)) == b"cubin bytes"
    assert c.get(("k", 2)) is None
    assert c.stats() == {"hits": 1, "misses": 2, "corrupt": 0, "writes": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")], "temporary files left behind"


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty"])
def test_corrupt_entries_are_detected_removed_and_rebuilt(tmp_path, damage):
    c = DiskCache(tmp_path)
    c.put(("k",), b"x" * 1000)
    p = c.path(("k",))
    data = bytearray(p.read_bytes())
    if damage == "truncate":
        data = data[:-10]
    elif damage == "flip":
        data[-1] ^= 0xFF
    elif damage == "magic":
        data[:len(MAGIC)] = b"NOTACUBN"
    else:
        data = bytearray()
    p.write_bytes(bytes(data))
    assert c.get(("k",)) is None
    assert c.corrupt == 1 and not p.exists()
    c.put(("k",), b"x" * 1000)
    assert c.get(("k",)) == b"x" * 1000


def test_size_bound_evicts_least_recently_used(tmp_path):
    c = DiskCache(tmp_path, max_bytes=2500)
    for k in range(3):
        c.put((k,), bytes(1000))
        os.utime(c.path((k,)), (k + 1, k + 1))
    c.put((3,), bytes(1000))
    total = sum(p.stat().st_size for p in tmp_path.glob("*.cubin"))
    assert total <= 2500
    assert c.get((0,)) is None and c.get((3,)) is not None


def test_directory_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", str(tmp_path / "here"))
    assert diskcache.default_dir() == tmp_path / "here"


@pytest.mark.parametrize("value, on", [
    *[(v, False) for v in ("0", "off", "false", "no", "disabled", "OFF", " Disabled ", "False")],
    *[(v, True) for v in ("1", "on", "true", "yes", "enabled", "ON", " Yes ", "Enabled", "")],
    (None, True),
])
def test_switch_from_environment(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("VYRE_NUMBA_CACHE", raising=False)
    else:
        monkeypatch.setenv("VYRE_NUMBA_CACHE", value)
    assert diskcache.enabled() is on


@pytest.mark.parametrize("value", ["2", "disable", "maybe", "yes please", "-1", "none", "nope"])
def test_unknown_switch_value_is_an_error_not_ignored(monkeypatch, value):
    monkeypatch.setenv("VYRE_NUMBA_CACHE", value)
    with pytest.raises(SettingError) as info:  # a subclass, never the base class itself
        diskcache.enabled()
    msg = str(info.value)
    assert "VYRE_NUMBA_CACHE" in msg and repr(value) in msg
    assert all(word in msg for word in ("off", "disabled", "enabled", "0", "1"))
    assert msg.rsplit("Fix:", 1)[1].strip()


class _BreaksMidWrite:
    """A file that writes the first few bytes it is given, then raises `exc`."""

    def __init__(self, f, exc):
        self.f, self.exc = f, exc

    def __enter__(self):
        return self

    def __exit__(self, *info):
        self.f.close()

    def write(self, data):
        self.f.write(data[:5])
        self.f.flush()
        raise self.exc


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), RuntimeError("boom"), MemoryError()])
def test_interrupted_write_removes_its_temporary_file_and_reraises(tmp_path, monkeypatch, exc):
    real = os.fdopen
    seen = []

    def fdopen(fd, *args, **kwargs):
        seen.append(fd)
        return _BreaksMidWrite(real(fd, *args, **kwargs), exc)

    monkeypatch.setattr(diskcache.os, "fdopen", fdopen)
    c = DiskCache(tmp_path)
    with pytest.raises(type(exc)):
        c.put(("k",), b"payload" * 100)
    monkeypatch.undo()
    assert seen, "the write path was not exercised"
    assert list(tmp_path.iterdir()) == []
    assert c.writes == 0 and c.get(("k",)) is None


def test_interrupted_rename_removes_its_temporary_file(tmp_path, monkeypatch):
    def replace(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(diskcache.os, "replace", replace)
    c = DiskCache(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        c.put(("k",), b"payload")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_costs_only_the_cache_and_leaves_nothing(tmp_path, monkeypatch):
    real = os.fdopen
    monkeypatch.setattr(diskcache.os, "fdopen",
                        lambda fd, *a, **k: _BreaksMidWrite(real(fd, *a, **k), OSError(28, "No space left on device")))
    c = DiskCache(tmp_path)
    with pytest.warns(CacheWarning, match="No space left on device.*Fix: pass a writable directory"):  # as passed
        c.put(("k",), b"payload")
    assert list(tmp_path.iterdir()) == [] and c.writes == 0


def test_unwritable_directory_costs_only_the_cache_and_says_so_once(tmp_path):
    """Regression (a red-team): a directory that could not be written switched the cache off
    without a word, so every process compiled afresh and nothing said why."""
    import warnings

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = DiskCache(blocker / "sub")
    with pytest.warns(CacheWarning, match=r"the disk cache at '.*sub' cannot be used \(NotADirectoryError.*"
                                          r"Fix: pass a writable directory\.") as said:  # one passed, not the settings'
        c.put(("k",), b"data")
    assert [w.filename for w in said] == [__file__]  # at the caller's line, not inside vyre_numba
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c.put(("k2",), b"data")  # said once a directory
        DiskCache(blocker / "sub").put(("k3",), b"data")
    assert c.get(("k",)) is None


def test_entries_have_the_mode_open_would_give_so_a_shared_cache_is_shared(tmp_path, monkeypatch):
    """Regression (a red-team): every entry kept mkstemp's 0600, so in a shared cache (or one filled
    when an image was built) other users' lookups were silent misses."""
    import stat

    old = os.umask(0o002)
    try:
        c = DiskCache(tmp_path)
        c.put(("k",), b"payload")
    finally:
        os.umask(old)
    assert stat.S_IMODE(c.path(("k",)).stat().st_mode) == 0o664

    def no_modes(path, mode):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(diskcache.os, "chmod", no_modes)  # a file system without modes: the entry still serves
    c.put(("k2",), b"other")  # (a review: this switched the whole cache off with a warning)
    assert c.get(("k2",)) == b"other" and c.writes == 2


def test_a_relative_cache_dir_is_fixed_where_the_cache_is_made(tmp_path, monkeypatch):
    """Regression (a red-team): VYRE_NUMBA_CACHE_DIR=kcache was read against the working directory at
    each call, so after a chdir (%cd in a notebook) every entry stored before missed, without a word."""
    monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", "kcache")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    c = DiskCache()
    assert c.directory == tmp_path / "a" / "kcache"
    c.put(("k",), b"payload")
    monkeypatch.chdir(tmp_path / "b")
    assert c.get(("k",)) == b"payload" and not (tmp_path / "b" / "kcache").exists()
    assert DiskCache("rel").directory == tmp_path / "b" / "rel"  # a passed one alike


def test_a_directory_that_cannot_be_looked_into_costs_only_the_cache(tmp_path, monkeypatch):
    """Regression (a red-team): pathlib's is_dir raises EACCES and ENAMETOOLONG, so a cache under a
    directory the user cannot enter (a container run as another user, HOME=/root) or a name too long
    for the system failed the first dispatch with a raw OSError instead of costing only the cache."""
    from pathlib import Path

    def no_entry(self):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "is_dir", no_entry)
    monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: no_entry(self))
    c = DiskCache(tmp_path / "locked" / "cache")
    with pytest.warns(CacheWarning, match=r"cannot be used \(PermissionError: Permission denied\)"):
        c.put(("k",), b"payload")
    assert c.get(("k",)) is None and c.writes == 0
    monkeypatch.undo()
    long = DiskCache(tmp_path / ("x" * 300))  # ENAMETOOLONG, for real
    with pytest.warns(CacheWarning, match=r"cannot be used \(OSError: File name too long\)"):
        long.put(("k",), b"payload")
    assert long.get(("k",)) is None


def test_the_directory_is_read_as_users_expect(monkeypatch, tmp_path):
    """Regression (a red-team): an empty XDG_CACHE_HOME put the cache in the working directory,
    '~' was a directory named '~', a blank VYRE_NUMBA_CACHE_DIR a directory named ' '."""
    from pathlib import Path

    monkeypatch.delenv("VYRE_NUMBA_CACHE_DIR", raising=False)
    for xdg in ("", "relative/dir"):  # the XDG rule: only an absolute path counts
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert diskcache.default_dir() == Path.home() / ".cache" / "vyre-numba"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert diskcache.default_dir() == tmp_path / "vyre-numba"
    monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", "~/vc")
    assert diskcache.default_dir() == Path.home() / "vc"
    monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", "  ")
    assert diskcache.default_dir() == tmp_path / "vyre-numba"


def test_no_home_directory_costs_only_the_cache(monkeypatch):
    """Regression (a red-team): with no $HOME and no passwd entry (a container's uid), Path.home()
    raised a raw RuntimeError from DiskCache() and TuneStore(), which the GPU backend always makes."""
    from pathlib import Path

    from vyre_numba.gpu.tuning import TuneStore

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    for name in ("VYRE_NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    monkeypatch.setattr(diskcache, "_WARNED", set())
    with pytest.raises(SettingError, match=r"no home directory\. Fix: set VYRE_NUMBA_CACHE_DIR"):
        diskcache.default_dir()
    with pytest.warns(CacheWarning, match=r"\$HOME is unset.*Fix:"):
        c = DiskCache()
    c.put(("k",), b"x")
    assert c.get(("k",)) is None and c.directory is None
    assert TuneStore(persist=False).get(("k",)) is None  # off: no directory looked for
    with pytest.warns(CacheWarning, match=r"workgroup sizes are timed afresh"):  # its own cost, said once too
        store = TuneStore(persist=True)
    store.put(("k",), 64, {64: 1.0})
    assert store.get(("k",)) == 64  # in memory still


@pytest.mark.parametrize("kw,fragment", [
    ({"max_bytes": "abc"}, "max_bytes='abc' is not a positive"), ({"max_bytes": 0}, "max_bytes=0"),
    ({"max_bytes": None}, "max_bytes=None"), ({"max_bytes": True}, "max_bytes=True"),
    ({"directory": 123}, "directory is an int, not a path"), ({"directory": b"/x"}, "directory is a bytes"),
    ({"directory": ""}, "directory='' is no directory name"), ({"directory": "a\0b"}, "is no directory name"),
])
def test_bad_cache_arguments_are_refused(kw, fragment):
    from vyre_numba.errors import ArgumentError

    with pytest.raises(ArgumentError, match="Fix:") as e:
        DiskCache(**kw)
    assert fragment in str(e.value)


def test_fingerprint_is_stable():
    assert diskcache.code_fingerprint() == diskcache.code_fingerprint()
    assert len(diskcache.code_fingerprint()) == 16


def test_fingerprint_follows_numpy_and_the_launch_edits(monkeypatch):
    """The optimizer folds constants through NumPy, and programmatic kernels are PTX edited by
    gpu/launch.py: a change to either is another cubin, never one served from disk."""
    import numpy
    from pathlib import Path

    before = diskcache.code_fingerprint()
    diskcache.code_fingerprint.cache_clear()
    monkeypatch.setattr(numpy, "__version__", numpy.__version__ + ".other")
    assert diskcache.code_fingerprint() != before
    monkeypatch.undo()
    diskcache.code_fingerprint.cache_clear()
    read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read(self) + (b"#" if self.name == "launch.py" else b""))
    assert diskcache.code_fingerprint() != before
    monkeypatch.undo()
    diskcache.code_fingerprint.cache_clear()
    assert diskcache.code_fingerprint() == before


CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import vyre_numba as vn
    from vyre_numba import ir
    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64,
                   [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) * 7 + 3)])],
                   name="disk_probe")
    b = vn.get_backend("cuda")
    from vyre_numba.ir import optimizer
    optimize, runs = optimizer.optimize, []
    optimizer.optimize = lambda *a, **k: runs.append(1) or optimize(*a, **k)
    t0 = time.perf_counter()
    b.kernel(p)
    dt = time.perf_counter() - t0
    optimizer.optimize = optimize
    (x,) = b.dispatch(p, [np.arange(100, dtype=np.uint32)])
    assert np.array_equal(x, np.arange(100, dtype=np.uint32) * 7 + 3)
    print(json.dumps({"seconds": dt, "optimizer_runs": len(runs), **b.telemetry()}))
""")


@pytest.mark.gpu
def test_second_process_loads_from_disk_without_emitting(tmp_path):
    env = {**os.environ, "VYRE_NUMBA_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["disk_cache_misses"] == 1 and first["ptx_cache_misses"] == 1 and first["optimizer_runs"] == 1
    assert second["disk_cache_hits"] == 1 and second["ptx_cache_misses"] == 0, second
    assert second["optimizer_runs"] == 0, "a kernel found on disk needs no optimization"


def test_kernels_are_kept_by_the_program_as_written_and_whether_it_is_optimized():
    """The kernel key names the program as written (so a disk hit skips the optimizer), and
    optimize=False, which compiles different code, is another kernel."""
    from vyre_numba import DispatchConfig, ir
    from vyre_numba.gpu.backend import _kernel_key

    def program(name="k"):
        i = ir.var("i")
        return ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64,
                          [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])],
                          name=name)

    on, off = DispatchConfig(), DispatchConfig(optimize=False)
    assert _kernel_key(program(), on, 90) == _kernel_key(program(), on, 90)
    assert _kernel_key(program(), on, 90)[0] == program().digest()
    assert _kernel_key(program(), on, 90) != _kernel_key(program(), off, 90)
    assert _kernel_key(program(), on, 90) != _kernel_key(program(), on, 80)
    assert _kernel_key(program(), on, 90) != _kernel_key(program("other"), on, 90)


@pytest.mark.parametrize("how", ["symlink", "copy", "rename"])
def test_an_entry_under_another_keys_name_is_corrupt_not_loaded(tmp_path, how):
    """Regression (a red-team): only the file name tied an entry to its key, so B's cubin, linked,
    copied or renamed to A's name, was loaded for A."""
    import shutil

    c = DiskCache(tmp_path)
    a, b = ("progA", 90), ("progB", 90)
    c.put(a, b"AAAA")
    c.put(b, b"BBBB")
    os.unlink(c.path(a))
    {"symlink": os.symlink, "copy": shutil.copy, "rename": os.rename}[how](c.path(b), c.path(a))
    assert c.get(a) is None and c.corrupt == 1 and not os.path.lexists(c.path(a))
    c.put(a, b"AAAA")
    assert c.get(a) == b"AAAA"
    assert c.get(b) == (None if how == "rename" else b"BBBB")


def test_an_entry_of_the_former_format_is_a_plain_miss_and_replaced(tmp_path):
    c = DiskCache(tmp_path)
    old = b"VYRECUB1" + hashlib_sha256(b"old") + b"old"  # the first format: no key digest
    c.path(("k",)).write_bytes(old)
    assert c.get(("k",)) is None and c.corrupt == 0 and c.misses == 1
    c.put(("k",), b"new")
    assert c.get(("k",)) == b"new" and MAGIC == b"VYRECUB2"


def hashlib_sha256(data: bytes) -> bytes:
    import hashlib

    return hashlib.sha256(data).digest()


@pytest.mark.parametrize("kind", ["fifo", "link to a fifo", "link to /dev/zero", "directory", "dangling link"])
def test_an_entry_that_is_not_a_regular_file_is_corrupt_and_never_waited_on(tmp_path, kind):
    """Regression (a red-team): an entry symlinked to a FIFO blocked get() forever (read_bytes
    followed the link), and every process that wanted that kernel hung."""
    import threading

    c = DiskCache(tmp_path / "c")
    c.put(("x",), b"x")  # makes the directory
    p = c.path(("k",))
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "link to a fifo":
        os.mkfifo(tmp_path / "fifo")
        os.symlink(tmp_path / "fifo", p)
    elif kind == "link to /dev/zero":
        os.symlink("/dev/zero", p)
    elif kind == "directory":
        p.mkdir()
    else:
        os.symlink(tmp_path / "nowhere", p)
    got = []
    t = threading.Thread(target=lambda: got.append(c.get(("k",))), daemon=True)
    t.start()
    t.join(10)
    assert got == [None], "get() blocked"
    assert c.corrupt == 1 and not os.path.lexists(p)  # an empty directory too (a red-team: it stayed for ever)
    c.put(("k",), b"fresh")
    assert c.get(("k",)) == b"fresh"


def test_a_non_empty_directory_in_an_entrys_place_is_said_of_that_entry_not_of_the_cache(tmp_path):
    """Regression (a red-team): the warning said the whole cache could not be used and to set
    VYRE_NUMBA_CACHE_DIR, and the directory stayed, that entry never stored again."""
    import warnings

    c = DiskCache(tmp_path / "c")
    c.put(("x",), b"x")
    p = c.path(("k",))
    p.mkdir()
    (p / "mine").write_text("kept")
    with pytest.warns(CacheWarning, match=r"entry .* is a directory that is not empty, so that entry is never stored\. "
                                          r"Fix: remove that directory"):
        c.put(("k",), b"cubin")
    assert (p / "mine").read_text() == "kept" and c.get(("x",)) == b"x"
    small = DiskCache(tmp_path / "c", max_bytes=4096)  # the directory (4,096 bytes as stat says) is no entry's size
    small.put(("z",), b"z" * 100)
    assert small.get(("z",)) == b"z" * 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c.put(("k",), b"cubin")  # said once an entry
        c.put(("y",), b"y")
    assert c.get(("y",)) == b"y"


def test_an_entry_longer_than_the_cache_can_hold_is_corrupt_and_not_read(tmp_path):
    """Regression (a red-team): a 4 GiB file in an entry's place was read whole (twice the memory
    at peak; a bare MemoryError where that was short)."""
    c = DiskCache(tmp_path, max_bytes=1 << 20)
    p = c.path(("k",))
    with open(p, "wb") as f:
        f.truncate(4 << 30)  # sparse: no disk taken
    assert c.get(("k",)) is None and c.corrupt == 1 and not p.exists()
    c.put(("k",), b"fresh")
    assert c.get(("k",)) == b"fresh"


def test_trim_removes_only_the_caches_own_entries(tmp_path):
    """Regression (a red-team): _trim removed every *.cubin by age, a user's own among them, where
    VYRE_NUMBA_CACHE_DIR named a folder holding others."""
    mine = tmp_path / "my_kernel.cubin"
    mine.write_bytes(bytes(4096))
    os.utime(mine, (1, 1))  # the oldest
    c = DiskCache(tmp_path, max_bytes=4096)
    c.put(("k",), b"x" * 100)
    assert mine.read_bytes() == bytes(4096) and c.get(("k",)) == b"x" * 100


def test_trim_leaves_other_writers_temporary_files_alone(tmp_path):
    """Regression (a red-team): _trim's glob matched `.tmp-*.cubin`, so one process deleted
    another's file mid-write (and counted it against the budget)."""
    c = DiskCache(tmp_path, max_bytes=2500)
    inflight = tmp_path / ".tmp-other.cubin"
    inflight.write_bytes(bytes(100_000))  # far past the budget: it must be neither removed nor counted
    for k in range(2):
        c.put((k,), bytes(1000))
    assert inflight.exists() and c.get((0,)) is not None and c.get((1,)) is not None


def test_a_lost_race_in_put_is_a_quiet_miss(tmp_path, monkeypatch):
    """Regression (a red-team): when another process's trim removed the temporary file before the
    rename, put warned that the cache 'cannot be used'."""
    import warnings

    real = os.replace

    def replace(src, dst):
        os.unlink(src)  # what the other process did
        return real(src, dst)

    monkeypatch.setattr(diskcache.os, "replace", replace)
    monkeypatch.setattr(diskcache, "_WARNED", set())
    c = DiskCache(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c.put(("k",), b"payload")
    monkeypatch.undo()
    assert c.writes == 0 and c.get(("k",)) is None and list(tmp_path.iterdir()) == []


def test_a_cache_dir_naming_an_unknown_users_home_costs_only_the_cache(monkeypatch):
    """Regression (a red-team): VYRE_NUMBA_CACHE_DIR=~nouser/x raised a raw RuntimeError from
    DiskCache() and TuneStore()."""
    from vyre_numba.gpu.tuning import TuneStore

    monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", "~nosuchuser-vyre/x")
    monkeypatch.setattr(diskcache, "_WARNED", set())
    with pytest.raises(SettingError, match=r"VYRE_NUMBA_CACHE_DIR='~nosuchuser-vyre/x' starts with "
                                           r"'~nosuchuser-vyre', a home directory this system does not know\. "
                                           r"Fix: set VYRE_NUMBA_CACHE_DIR"):
        diskcache.default_dir()
    with pytest.warns(CacheWarning, match=r"cannot be used \(VYRE_NUMBA_CACHE_DIR=.*does not know\).*Fix:"):
        c = DiskCache()
    c.put(("k",), b"x")
    assert c.directory is None and c.get(("k",)) is None
    with pytest.warns(CacheWarning, match=r"workgroup sizes are timed afresh"):  # its own cost, said once too
        store = TuneStore(persist=True)
    store.put(("k",), 64, {64: 1.0})
    assert store.get(("k",)) == 64 and store.disk.directory is None


@pytest.mark.parametrize("directory", ["~nosuchuser-vyre/x", "a\0b"])
def test_a_directory_argument_that_names_no_directory_is_refused_in_either_form(directory):
    """Regression (a red-team): DiskCache(Path('a\\0b')) was taken, and its get and put raised a raw
    ValueError; TuneStore(Path('a\\0b')) the same."""
    from pathlib import Path

    from vyre_numba.errors import ArgumentError
    from vyre_numba.gpu.tuning import TuneStore

    for make in (DiskCache, lambda d: TuneStore(d, persist=True)):
        for form in (directory, Path(directory)):
            with pytest.raises(ArgumentError, match=r"is no directory name\. Fix: pass a directory's path"):
                make(form)


def test_the_tuning_stores_warning_says_what_it_costs_and_a_passed_directorys_fix(tmp_path, monkeypatch):
    """Regression (a red-team): a TuneStore given a directory that cannot be used said "kernels
    compile afresh" and to set VYRE_NUMBA_CACHE_DIR, which does not move a directory passed; its
    directory and max_bytes went unchecked where it did not persist, and a bad max_bytes named
    DiskCache and its default."""
    from vyre_numba.errors import ArgumentError
    from vyre_numba.gpu.tuning import MAX_BYTES, TuneStore

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(CacheWarning, match=r"workgroup sizes are timed afresh in every process\. Fix: pass a writable "
                                          r"directory\.$") as said:
        TuneStore(blocker / "tune", persist=True).put(("t",), 64, {64: 1.0})
    assert [w.filename for w in said] == [__file__]  # the caller's line (it was tuning.py's, a frame short)
    for persist in (False, True):
        with pytest.raises(ArgumentError, match=rf"^TuneStore: max_bytes='x' .*\(default {MAX_BYTES}\)\.$"):
            TuneStore(tmp_path, max_bytes="x", persist=persist)
        with pytest.raises(ArgumentError, match=r"^TuneStore: directory is an int, not a path\. Fix:"):
            TuneStore(12345, persist=persist)
    monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", str(blocker / "env"))
    with pytest.warns(CacheWarning, match=r"kernels compile afresh in every process\. Fix: set VYRE_NUMBA_CACHE_DIR"):
        DiskCache().put(("k",), b"x")  # the settings' directory: the settings' fix
