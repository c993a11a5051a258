"""The cross-process cubin cache: atomic, verified, bounded, switchable; a fresh process on a GPU
loads from it without emitting or assembling."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

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


def test_switch_and_directory_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", str(tmp_path / "here"))
    assert diskcache.default_dir() == tmp_path / "here"
    monkeypatch.setenv("VYRE_NUMBA_CACHE", "0")
    assert not diskcache.enabled()
    monkeypatch.setenv("VYRE_NUMBA_CACHE", "1")
    assert diskcache.enabled()


def test_unwritable_directory_costs_only_the_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = DiskCache(blocker / "sub")
    c.put(("k",), b"data")
    assert c.get(("k",)) is None


def test_fingerprint_is_stable():
    assert diskcache.code_fingerprint() == diskcache.code_fingerprint()
    assert len(diskcache.code_fingerprint()) == 16


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
    t0 = time.perf_counter()
    b.kernel(p)
    dt = time.perf_counter() - t0
    (x,) = b.dispatch(p, [np.arange(100, dtype=np.uint32)])
    assert np.array_equal(x, np.arange(100, dtype=np.uint32) * 7 + 3)
    print(json.dumps({"seconds": dt, **b.telemetry()}))
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
    assert first["disk_cache_misses"] == 1 and first["ptx_cache_misses"] == 1
    assert second["disk_cache_hits"] == 1 and second["ptx_cache_misses"] == 0, second
