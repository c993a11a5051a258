"""vyre_numba.unique against NumPy's own answers, on the edge cases and on random inputs."""
from __future__ import annotations

import numpy as np
import pytest

from vyre_numba.errors import DispatchError
from vyre_numba.unique import count_distinct, index_of, unique, unique_rows

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("a", [np.zeros(0, np.int64), np.array([5], np.int32), RNG.integers(-5, 5, 100),
                               RNG.integers(0, 2**40, 1000, dtype=np.uint64), RNG.integers(0, 1 << 24, 200_000),
                               np.arange(10_000)[::-1].copy(), RNG.integers(0, 3, (40, 5)),
                               np.array([-100, 100, 45, -10], np.int8), np.array([True, False, True]),
                               np.array([False, True, True]), np.array([70, 3, 70], np.uint8)])
def test_unique_is_numpys(a):
    got = unique(a)
    assert got.dtype == a.dtype and np.array_equal(got, np.unique(a))
    assert count_distinct(a) == np.unique(a).size


@pytest.mark.parametrize("p", [np.zeros((0, 2), np.int64), np.array([[1, 2]]), RNG.integers(-3, 3, (200, 2)),
                               RNG.integers(0, 4, (500, 2)).astype(np.int32), RNG.integers(0, 1 << 24, (100_000, 2)),
                               np.array([[2**40, 1], [2**40, 1], [0, 2**40]]), np.array([[7, 7]] * 9, np.uint32)])
def test_unique_rows_is_numpys(p):
    got = unique_rows(p)
    assert got.dtype == p.dtype and got.shape[1:] == (2,)
    assert np.array_equal(got, np.unique(p, axis=0) if p.size else p)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 100_000])
def test_index_of_is_searchsorted(size):
    keys = unique(RNG.integers(0, 1 << 20, 50_000))
    v = RNG.integers(-10, (1 << 20) + 10, size)
    assert np.array_equal(index_of(keys, v), np.searchsorted(keys, v))


@pytest.mark.parametrize("call, why", [
    (lambda: unique_rows(np.array([1, 2, 3])), r"shape \(3,\); it takes \(k, 2\)"),
    (lambda: unique_rows(np.zeros(0, np.int64)), r"shape \(0,\)"),
    (lambda: unique_rows([[1, 2, 3], [1, 2, 4]]), r"shape \(2, 3\)"),  # not [[1, 2]]: no column dropped
    (lambda: unique_rows(np.zeros((2, 2, 2), np.int64)), r"shape \(2, 2, 2\)"),
    (lambda: unique_rows([[.5, 1.5], [.25, 1.]]), r"float64"),  # not [[0, 1]]: nothing truncated
    (lambda: unique(np.array([1, "a"], object)), r"object"),
    (lambda: unique(np.array([2.5, np.nan])), r"float64"),
    (lambda: unique(["b", "a"]), r"<U1"),
    (lambda: count_distinct([[1], [2, 3]]), r"not an array"),
    (lambda: index_of("abc", 1), r"keys are <U3"),
    (lambda: index_of(np.arange(3), [0.5]), r"values are float64"),
    (lambda: index_of(np.arange(4).reshape(2, 2), 1), r"keys have shape \(2, 2\)"),
])
def test_what_is_not_integers_or_pairs_is_refused_with_a_fix(call, why):
    with pytest.raises(DispatchError, match=why + r".*Fix: .+"):
        call()


def test_empty_lists_and_scalars_are_fine():
    assert unique([]).size == 0 and count_distinct(7) == 1 and unique_rows(np.zeros((0, 2), np.int8)).shape == (0, 2)
    assert np.array_equal(index_of([1, 3, 5], 3), [1]) and np.array_equal(unique(np.array([True, False, True])), [0, 1])
