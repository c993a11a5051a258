"""Autotuned workgroups (`DispatchConfig(workgroup="tune")`, `gpu.tuning`): the choice, the store's
persistence, corruption handling and bound (as the disk cache's), and on the GPU the same results
as the reference with the timing done once per (program, device, size bucket)."""
from __future__ import annotations

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.errors import DispatchError
from vyre_numba.gpu import tuning
from vyre_numba.gpu.tuning import TuneStore

B = ir.BufferDecl


def saxpy() -> ir.Program:
    i = ir.var("i")
    return ir.Program([B.read("x", 0, "f32"), B.read_write("y", 1, "f32")], 128,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) * 3.0 + ir.load("y", i))])],
                      name="saxpy3")


def test_config_takes_tune_and_refuses_other_words():
    assert DispatchConfig(workgroup="tune").workgroup == "tune"
    with pytest.raises(DispatchError, match="'tune'.*Fix:"):
        DispatchConfig(workgroup="tuned")


def test_fastest_takes_the_smallest_time_and_ties_go_to_the_smaller_size():
    times = {32: 5.0, 64: 3.0, 128: 3.0, 256: float("inf")}
    assert tuning.fastest(list(times), times.get) == (64, times)
    assert [tuning.bucket(n) for n in (0, 1, 2, 3, 4, 1000, 1 << 20)] == [0, 1, 2, 2, 3, 10, 21]


def test_a_choice_persists_across_stores_and_processes(tmp_path):
    key = ("tune", "abc", "NVIDIA H100", 90, 21, True)
    TuneStore(tmp_path, persist=True).put(key, 256, {128: 2.0, 256: 1.5})
    again = TuneStore(tmp_path, persist=True)
    assert again.get(key) == 256 and again.disk.hits == 1
    assert TuneStore(tmp_path, persist=True).get(("tune", "other")) is None
    # Regression (a red-team): the occupancy rule's choice (any multiple of 32) competes with the
    # candidates, and a later process deleted it as corrupt and timed everything again.
    for wg in (96, 384, 640, 992):
        TuneStore(tmp_path, persist=True).put(key, wg, {256: 2.0, wg: 1.0})
        again = TuneStore(tmp_path, persist=True)
        assert again.get(key) == wg and again.disk.corrupt == 0, wg


def test_an_entry_that_fails_its_checks_is_deleted_and_timed_again(tmp_path):
    store = TuneStore(tmp_path, persist=True)
    key = ("tune", "abc", 1)
    store.put(key, 512, {512: 1.0})
    path = store.disk.path(key)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = TuneStore(tmp_path, persist=True)
    assert fresh.get(key) is None and not path.exists() and fresh.disk.corrupt == 1
    for payload in (b"not json", b'{"workgroup": 7}', b'{"workgroup": 1056}', b'{"workgroup": 0}',
                    b'{"workgroup": 96.0}', b'{"workgroup": true}', b'{"wg": 64}', b"\xff\xfe",
                    b"[" * 100_000):  # nested past Python's recursion limit (a red-team: a raw RecursionError)
        fresh.disk.put(key, payload)  # a valid digest over a payload that is not a choice
        assert TuneStore(tmp_path, persist=True).get(key) is None and not path.exists(), payload


def test_the_store_is_bounded_in_bytes(tmp_path):
    store = TuneStore(tmp_path, persist=True, max_bytes=2000)
    for k in range(200):
        store.put(("tune", "p", k), 64, {64: 1.0})
    assert sum(p.stat().st_size for p in tmp_path.glob("*.cubin")) <= 2000
    assert len(list(tmp_path.glob("*.cubin"))) < 200


def test_persist_is_a_bool_or_none():
    from vyre_numba.errors import ArgumentError

    for bad in ("yes", 1, "no"):
        with pytest.raises(ArgumentError, match="persist=.* is not a bool. Fix:"):
            TuneStore(persist=bad)


def test_a_store_that_does_not_persist_writes_nothing(tmp_path):
    store = TuneStore(tmp_path / "t", persist=False)
    store.put(("k",), 128, {128: 1.0})
    assert store.get(("k",)) == 128 and not (tmp_path / "t").exists()


def test_the_reference_backend_runs_a_tuned_config_as_declared():
    be = vn.get_backend("reference")
    x, y = np.arange(300, dtype=np.float32), np.ones(300, np.float32)
    want = be.dispatch(saxpy(), [x, y])
    assert np.array_equal(be.dispatch(saxpy(), [x, y], DispatchConfig(workgroup="tune"))[0], want[0])


@pytest.mark.gpu
def test_gpu_tunes_once_per_bucket_remembers_and_matches_the_reference(tmp_path):
    be = vn.get_backend("cuda")
    ref = vn.get_backend("reference")
    be.tune_store = TuneStore(tmp_path, persist=True)
    be.reset_telemetry()
    cfg = DispatchConfig(workgroup="tune")
    for n in (1000, 1023, 1 << 20, 1):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        y = np.ones(n, np.float32)
        want = ref.dispatch(saxpy(), [x, y])[0]
        assert np.array_equal(be.dispatch(saxpy(), [x, y], cfg)[0], want), n
        dx, dy = be.upload(x), be.upload(y)
        be.dispatch_resident(saxpy(), [dx, dy], cfg)
        assert np.array_equal(be.download(dy), want), n
    assert be.telemetry()["workgroups_tuned"] == 3  # buckets 10, 21 and 1; 1023 shares 1000's
    assert len(list(tmp_path.glob("*.cubin"))) == 3
    fresh = TuneStore(tmp_path, persist=True)
    key = ("tune", saxpy().digest(), be.caps.name, be.caps.sm, tuning.bucket(1 << 20), True)
    assert fresh.get(key) in tuning.CANDIDATES


def test_an_entry_stored_for_another_key_is_deleted_not_used(tmp_path):
    """Regression (a red-team): the payload kept `"key": repr(key)` but get never compared it."""
    import json

    store = TuneStore(tmp_path, persist=True)
    mine, other = ("tune", "mine", 1), ("tune", "other", 1)
    for payload in ({"workgroup": 512, "us": {}, "key": repr(other)}, {"workgroup": 512, "us": {}}):
        store.disk.put(mine, json.dumps(payload).encode())  # valid digests, another key's choice (or none named)
        fresh = TuneStore(tmp_path, persist=True)
        assert fresh.get(mine) is None and fresh.disk.corrupt == 1 and not store.disk.path(mine).exists()
    store.put(mine, 256, {256: 1.0})
    assert TuneStore(tmp_path, persist=True).get(mine) == 256
