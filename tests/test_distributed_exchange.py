"""The shared-memory exchange of the distributed calls (`distributed.exchange`), in one process:
what is sent comes back bit for bit, small arrays and missing directories fall back to the array
itself, an area is written in ranges, and closing the exchange removes every file."""
from __future__ import annotations

import os

import numpy as np
import pytest

from vyre_numba import VyreError
from vyre_numba.distributed import exchange

pytestmark = pytest.mark.skipif(not os.path.isdir(exchange.ROOT), reason="no /dev/shm on this machine")


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.uint64, np.float32])
def test_a_sent_array_comes_back_bit_for_bit_and_private(dtype):
    a = np.random.default_rng(1).integers(0, 200, (1 << 19, 2)).astype(dtype)
    a[0, 0] = np.nan if a.dtype.kind == "f" else a[0, 0]
    with exchange.Exchange() as ex:
        sent = exchange.send(ex.path, a)
        assert isinstance(sent, exchange.Sent) and os.path.exists(sent.path)
        got = exchange.received(sent)
        assert got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == a.tobytes()
        got[1, 1] = 7  # a private mapping: the file (and a second receiver) keep the sent bytes
        assert exchange.received(sent).tobytes() == a.tobytes()
    assert got.tobytes()[:a.itemsize] == a.tobytes()[:a.itemsize]  # mapped memory outlives the directory


def test_small_arrays_non_arrays_and_no_directory_pass_through():
    small = np.arange(10, dtype=np.int32)
    big = np.zeros(exchange.MIN_BYTES, np.uint8)
    with exchange.Exchange() as ex:
        assert exchange.send(ex.path, small) is small
        assert exchange.send(ex.path, (1, 2)) == (1, 2)
    assert exchange.send(None, big) is big
    assert exchange.send("/dev/shm/vyre-no-such-directory", big) is big  # cannot write: Dask carries it
    assert exchange.received(small) is small


def test_an_area_is_written_in_ranges_and_read_whole():
    n = 1000
    with exchange.Exchange() as ex:
        area = ex.area(4 * n)
        exchange.write_at(area, np.arange(600, dtype=np.int32), 0)
        exchange.write_at(area, np.arange(600, 1000, dtype=np.int32), 4 * 600)
        got = exchange.mapped(area, np.int32, (n,))
        assert np.array_equal(got, np.arange(n))
        assert ex.area(0) is None
        assert ex.area(1 << 62) is None  # no room: the caller gathers through Dask
        assert exchange.mapped(area, np.int32, (0,)).shape == (0,)


def test_closing_removes_the_directory_once_and_a_disabled_exchange_has_none():
    ex = exchange.Exchange()
    path = ex.path
    exchange.send(path, np.zeros(exchange.MIN_BYTES, np.uint8))
    ex.close()
    ex.close()
    assert not os.path.exists(path)
    assert exchange.Exchange(enabled=False).path is None
    assert exchange.Exchange(root="/no/such/root").path is None
    assert not exchange.visible(None) and not exchange.visible(path)


def test_a_file_gone_before_it_is_read_says_how_to_go_on():
    with exchange.Exchange() as ex:
        sent = exchange.send(ex.path, np.zeros(exchange.MIN_BYTES, np.uint8))
        area = ex.area(16)
    with pytest.raises(VyreError, match=r"shared_memory=False"):
        exchange.received(sent)
    with pytest.raises(VyreError, match=r"Fix:"):
        exchange.write_at(area, np.zeros(4, np.int32), 0)
