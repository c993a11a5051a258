"""vyre_numba.unique against NumPy's own answers, on the edge cases and on random inputs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vyre_numba.errors import DispatchError, VyreError
from vyre_numba.testing import mismatches, ordered_bits
from vyre_numba.unique import count_distinct, index_of, inserted, unique, unique_rows

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
    (lambda: unique([1, 2.5]), r"values are float64"),  # not "ints": a float among them
    (lambda: unique(["b", "a"]), r"<U1"),
    (lambda: count_distinct([[1], [2, 3]]), r"not an array"),
    (lambda: index_of("abc", 1), r"keys are <U3"),
    (lambda: index_of(np.arange(3), [0.5]), r"values are float64"),
    (lambda: index_of(np.arange(4).reshape(2, 2), 1), r"keys have shape \(2, 2\)"),
    (lambda: index_of([5, 3, 1], [3]), r"keys are not ascending \(keys\[1\] = 3 < keys\[0\] = 5\)"),  # it said 0
    (lambda: index_of(np.array([1, 3, 2], ">i4"), [2]), r"keys\[2\] = 2 < keys\[1\] = 3"),
    (lambda: unique(np.zeros(0)), r"values are float64"),  # refused as a longer float array is
    (lambda: unique(np.array([], dtype=object)), r"values are object"),  # was a raw ValueError from min()
])
def test_what_is_not_integers_or_pairs_is_refused_with_a_fix(call, why):
    with pytest.raises(DispatchError, match=why + r".*Fix: .+"):
        call()


def test_empty_lists_and_scalars_are_fine():
    assert unique([]).size == 0 and count_distinct(7) == 1 and unique_rows(np.zeros((0, 2), np.int8)).shape == (0, 2)
    assert index_of([1, 3, 5], 3) == 1 and np.ndim(index_of([1, 3, 5], 3)) == 0 and np.array_equal(unique(np.array([True, False, True])), [0, 1])


def test_empty_lists_give_integer_arrays_and_index_of_keeps_the_values_shape():
    """Regression (a red-team): `[]` read as float64 made inserted([], [0], [5]) float64, and
    index_of flattened what np.searchsorted answers in the values' own shape."""
    assert inserted([], [0], [5]).dtype == np.int64 and unique([]).dtype == np.int64
    assert np.array_equal(inserted([], [0], [5]), [5])
    for values in ([[1], [3]], 3, np.arange(6).reshape(2, 3), np.arange(5000).reshape(50, 100) % 7):
        want = np.searchsorted([1, 3], values)
        got = index_of([1, 3], values)
        assert np.shape(got) == np.shape(want) and np.array_equal(got, want)


def test_an_object_array_of_python_ints_says_how_to_pass_it():
    with pytest.raises(DispatchError, match=r"Python ints in an object array.*Fix: pass np.asarray\(x, dtype=np.int64\)"):
        unique(np.array([3, 1, 3], dtype=object))
    assert np.array_equal(unique(np.asarray(np.array([3, 1, 3], dtype=object), dtype=np.int64)), [1, 3])  # the fix
    with pytest.raises(DispatchError, match=r"uint64 holds them all\). Fix: pass np.array\(values, dtype=np.uint64\)"):
        unique(np.array([3, 2**64 - 1], dtype=object))


# ---- found by a red-team: mixed signedness, masks, the insert helper ---------------------------

@pytest.mark.parametrize("keys, values", [
    (np.array([2**53, 2**53 + 1, 2**53 + 2], np.uint64), np.array([2**53 + 1, -1, 2**53 + 3, 0], np.int64)),
    (np.array([-5, 2**53, 2**53 + 1, 2**63 - 1], np.int64), np.array([2**53 + 1, 2**63, 2**64 - 1, 0], np.uint64)),
    (np.array([-5, 3], np.int32), np.array([2**63, 3], np.uint64)),
    (np.array([0, 2**64 - 1], np.uint64), np.array([-128, 127], np.int8)),
])
@pytest.mark.parametrize("repeat", [1, 2000])  # small batches and the sorted path
def test_index_of_mixed_signedness_is_exact(keys, values, repeat):
    v = np.tile(values, repeat)
    want = [sum(int(k) < int(x) for k in keys) for x in v.tolist()]  # Python ints: exact
    assert index_of(keys, v).tolist() == want


@pytest.mark.parametrize("call", [lambda m: unique(m), lambda m: count_distinct(m), lambda m: index_of(m, [1]),
                                  lambda m: index_of([1, 2], m), lambda m: unique_rows(m.reshape(-1, 2))])
def test_masked_arrays_are_refused(call):
    m = np.ma.array([1, 2, 3, 4], mask=[0, 1, 0, 0])
    with pytest.raises(DispatchError, match="masked array.*Fix: pass x.compressed"):
        call(m)


def test_inserted_is_numpys_insert_for_ascending_places():
    from vyre_numba.unique import inserted

    a = np.array([1, 5, 9], np.int64)
    for at, v in (([0, 0, 3], [7, 8, 9]), ([], []), ([1, 2], [4, 6]), ([3], [2**40])):
        got = inserted(a, np.array(at, np.intp), np.array(v, np.int64))
        assert got.dtype == a.dtype and np.array_equal(got, np.insert(a, at, v))
    assert inserted([1, 2], [0], [5]).tolist() == [5, 1, 2]  # lists, as the other helpers take them
    assert np.array_equal(inserted(np.zeros(0, np.uint8), [0, 0], np.array([3, 4], np.uint8)), [3, 4])


@pytest.mark.parametrize("a, at, v, fragment", [
    (np.array([1, 2, 3]), [7], [8], "ascend within 0..3"),
    (np.array([1, 2, 3]), [-1], [8], "ascend within 0..3"),
    (np.array([1, 2, 3]), [2, 0], [8, 9], "ascend"),
    (np.array([1, 2]), [0], np.array([5.7]), "float64"),
    (np.array([1, 2], np.uint8), [0], [300], "do not fit"),
    (np.array([1, 2], np.uint8), [0], [-1], "do not fit"),
    (np.array([1, 2]), [0, 1], [5], "one place for each value"),
    (np.array([[1, 2]]), [0], [5], "1-D"),
    (np.array([1, 3, 5]), [1], np.array([True]), "a bool is not a number here"),  # was inserted as 1
    (np.array([True, False]), [1], np.array([1]), "a bool is not a number here"),  # was inserted as True
])
def test_inserted_refuses_what_np_insert_would_read_otherwise(a, at, v, fragment):
    from vyre_numba.unique import inserted

    with pytest.raises(DispatchError, match="Fix:") as e:
        inserted(a, at, v)
    assert fragment in str(e.value)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64])
def test_inserted_takes_places_of_every_integer_type(dtype):
    """Regression: uint64 places raised a raw IndexError (uint64 + the int64 offsets is float64)."""
    from vyre_numba.unique import inserted

    a = np.array([1, 2, 3], np.int64)
    assert inserted(a, np.array([1, 3], dtype), np.array([9, 8])).tolist() == np.insert(a, [1, 3], [9, 8]).tolist()


def test_inserted_refuses_bool_places():
    """Regression: bool places were read as 0 and 1, where np.insert reads them as a mask."""
    from vyre_numba.unique import inserted

    with pytest.raises(DispatchError, match=r"places are bools.*Fix: pass integer places"):
        inserted(np.array([1, 2, 3]), np.array([True]), np.array([9]))


@pytest.mark.parametrize("call, why", [
    (lambda: unique([1, 2, 2**64 - 1]), r"ints from 1 to 18446744073709551615, which NumPy reads as float64.*"
                                        r"uint64 holds them all\). Fix: pass np.array\(values, dtype=np.uint64\)"),
    (lambda: count_distinct([1, -1, 2**63]), r"ints from -1 to 9223372036854775808.*none holds them all\). Fix: "),
    (lambda: unique([[1, 2**70], [2, 3]]), r"ints from 1 to 1180591620717411303424, which NumPy reads as object"),
    (lambda: index_of([1, 2], [np.uint64(2**64 - 1), np.int64(-1)]), r"values are ints from -1 to"),
    (lambda: unique_rows([[1, 2**64 - 1]]), r"rows are ints from 1 to"),
])
def test_ints_numpy_reads_as_no_integer_type_are_named_as_ints(call, why):
    """Regression: a list of ints that NumPy reads as float64 or object ([1, 2, 2**64 - 1],
    [1, -1, 2**63]) was refused as "the values are float64"; the user passed only ints."""
    with pytest.raises(DispatchError, match=why):
        call()


@pytest.mark.parametrize("call, fragment", [
    (lambda: mismatches(np.float32([1.0, 2.0]), np.float64([1.0, 2.0])), "float bits compare only within one type"),
    (lambda: mismatches(np.float32([1.0]), np.float32([1.0]), ulp=-1), "ulp=-1 is not a count"),
    (lambda: mismatches(np.float32([1.0]), np.float32([1.0]), ulp=True), "ulp=True is not a count"),
    (lambda: mismatches([1.0], [1.0]), "got is a list"),
    (lambda: mismatches(np.float32([1.0]), np.array(["a"])), "expected is a <U1 array"),
    (lambda: mismatches(np.float32([1.0]), np.float32([1.0]), bf16=True), "takes the raw bits as uint16"),
    (lambda: ordered_bits(np.array([1], np.uint8)), "not a uint8 array"),
])
def test_the_comparison_helpers_refuse_what_they_cannot_compare(call, fragment):
    """Regression (a red-team): equal float32 and float64 values all 'mismatched' (bits of two
    widths), a negative ulp was taken, a list or a uint8 array raised AttributeError / KeyError."""
    with pytest.raises(VyreError, match="Fix:") as e:
        call()
    assert fragment in str(e.value)


def test_the_comparison_helpers_compare_ints_of_two_types_by_value():
    assert mismatches(np.int32([1, 2, -3]), np.int64([1, 3, -3])).tolist() == [1]
    assert mismatches(np.float32([np.nan, 1.0]), np.float32([np.nan, np.nextafter(1, 2, dtype=np.float32)]),
                      ulp=1).tolist() == []


def test_mismatches_tells_the_signed_zeros_apart_bit_for_bit():
    """Regression (a docs audit): -0.0 and +0.0 both ordered to 0, so a backend giving +0 for
    min(-0, +0) passed a bit-for-bit check; within an ulp they stay 0 apart."""
    for t in (np.float16, np.float32, np.float64):
        got, want = np.array([-0.0, 0.0, 0.0, -0.0, np.nan], t), np.array([0.0, -0.0, 0.0, -0.0, -np.nan], t)
        assert mismatches(got, want).tolist() == [0, 1]
        assert mismatches(got, want, ulp=1).tolist() == []
    zeros = np.uint16([0x8000, 0x0000])  # bf16's -0 and +0
    assert mismatches(zeros, zeros[::-1].copy(), bf16=True).tolist() == [0, 1]


def test_mismatches_measures_distances_across_the_sign_without_overflow():
    """Regression (a red-team): the ulp distance was an int64 difference, which wrapped for f64 values
    of opposite signs: 2.0 against -2.0 matched within one ulp, inf against -inf within 2**62."""
    from vyre_numba.errors import ArgumentError

    big = np.finfo(np.float64).max
    assert mismatches(np.array([2.0]), np.array([-2.0]), ulp=1).tolist() == [0]
    assert mismatches(np.array([np.inf]), np.array([-np.inf]), ulp=2**62).tolist() == [0]
    assert mismatches(np.array([big]), np.array([-big]), ulp=2**63 - 1).tolist() == [0]
    assert mismatches(np.array([big]), np.array([-big]), ulp=2**64).tolist() == []  # every pair is nearer
    assert mismatches(np.float32([1, -1]), np.float32([-1, 1]), ulp=2 * 0x3F800000).tolist() == []
    assert mismatches(np.float32([1, -1]), np.float32([-1, 1]), ulp=2 * 0x3F800000 - 1).tolist() == [0, 1]
    with pytest.raises(ArgumentError, match=r"bf16='no' is not a bool\. Fix:"):  # "no" read as True before
        mismatches(np.uint16([0x3F80]), np.uint16([0x3F81]), bf16="no", ulp=1)


def test_mismatches_of_zero_dimensional_arrays_warn_nothing():
    """Regression (a red-team): 0-d arrays subtract as NumPy scalars, whose wrap warned (an error
    under -W error or pytest's filterwarnings=error)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mismatches(np.array(1.0), np.array(2.0)).tolist() == [0]
        assert mismatches(np.array(-2.0), np.array(2.0), ulp=2**63).tolist() == []


def test_mismatches_compares_values_whatever_byte_order_they_are_kept_in():
    """Regression (a red-team): ordered_bits read a big-endian float's bytes natively, so with
    ulp=1, 1.0 against 4.0 matched and two values 1 ulp apart did not."""
    from vyre_numba.testing import ordered_bits

    for t in (np.float16, np.float32, np.float64):
        big = np.dtype(t).newbyteorder(">")
        one, four = np.array([1.0], big), np.array([4.0], big)
        step = np.nextafter(np.array([1.0], t), np.array([2.0], t)).astype(big)
        assert mismatches(one, four, ulp=1).tolist() == [0]
        assert mismatches(one, step, ulp=1).tolist() == [] and mismatches(one, step).tolist() == [0]
        assert mismatches(one, np.array([1.0], t)).tolist() == []  # one value, two byte orders
        assert ordered_bits(np.array([1.0, -2.0], big)).tolist() == ordered_bits(np.array([1.0, -2.0], t)).tolist()
    assert mismatches(np.array([5, 6], ">i4"), np.int64([5, 7])).tolist() == [1]
    bits = np.array([0x3F80, 0x8000], ">u2")  # bf16's 1.0 and -0.0, big-endian
    assert mismatches(bits, np.uint16([0x3F80, 0x0000]), bf16=True).tolist() == [1]


def test_count_distinct_of_big_endian_uint64_past_2_63():
    """Regression (a red-team): `>u8` took the marks path meant for narrower types: a raw OverflowError."""
    a = np.array([2**63, 2**63 + 1, 2**63], dtype=">u8")
    assert count_distinct(a) == 2 == unique(a).size


@pytest.mark.parametrize("call,fragment", [
    (lambda: unique([True, 2]), "unique: the values argument mixes bools and integers"),
    (lambda: count_distinct([True, 1]), "count_distinct: the values argument mixes bools"),
    (lambda: index_of([0, 1, 2], [True, 5]), "index_of: the values argument mixes bools"),
    (lambda: inserted(np.array([1, 2, 3]), [0, 1], [True, 5]), "inserted: the values argument mixes bools"),
    (lambda: unique(bytearray(b"ba")), "unique: the values argument is raw bytes"),
    (lambda: index_of(memoryview(b"ab"), [1]), "index_of: the keys argument is raw bytes"),
    (lambda: unique(pd.Series([0, 1, None, 2], dtype="Int64")), "unique: the values argument is a pandas Series "
                                                                 r"with 1 missing value\(s\) \(the first at position 2\)"),
    (lambda: inserted(np.array([1, 2], np.uint8), [0], [3.0]), r"float64.*handle integers only\. (?=Fix: pass an integer array \(np.insert)"),
])
def test_bools_among_ints_and_raw_bytes_are_refused_not_read_as_numbers(call, fragment):
    """Regression (a red-team): [True, 2] read as [1, 2] and a bytearray as uint8 values, silently."""
    with pytest.raises(DispatchError, match=f"{fragment}.*Fix:"):
        call()
    assert unique([True, False, True]).tolist() == [False, True]  # bools alone are a bool array, as for np.unique


def test_index_of_refuses_bools_beside_integers():
    for keys, values, which in (([0, 1, 2], [True], "values"), (np.array([False, True]), [1], "keys")):
        with pytest.raises(DispatchError, match=f"the {which} are bools and the others integers.*Fix:"):
            index_of(keys, values)
    assert index_of(np.array([False, True]), [True]).tolist() == [1]
    assert index_of([0, 1, 2], np.asarray([True], np.int64)).tolist() == [1]  # the Fix, followed


def test_a_device_array_is_told_to_come_to_the_host():
    device = type("DeviceArray", (), {"__cuda_array_interface__": {"shape": (3,), "typestr": "<i4",
                                                                  "data": (0, False), "version": 3}})()
    for call in (lambda: unique(device), lambda: count_distinct(device), lambda: index_of(np.arange(3), device)):
        with pytest.raises(DispatchError, match=r"a device array.*Fix: copy them to the host first"):
            call()


def test_a_pyarrow_array_with_nulls_is_refused_as_missing_values_not_as_floats():
    """Regression (a red-team): NumPy reads an Arrow int64 array with a null as float64 holding NaN,
    and unique and EGraph.find said "the values are float64" of an integer array."""
    pa = pytest.importorskip("pyarrow")
    import vyre_numba as vn
    from vyre_numba.egraph import EGraph

    g = EGraph.from_arrays([0, 1, 2, 3], [0, 0, 0, 0], [0, 0, 0, 0, 0], [], backend="reference")
    for values in (pa.array([3, None, 1], pa.int64()), pa.chunked_array([[3], [None, 1]], pa.int64())):
        for call, what in ((lambda: unique(values), "unique: the values argument"), (lambda: g.find(values), "ids"),
                           (lambda: vn.graph.bfs_many([0, 1, 2, 3, 4], [1, 2, 3, 0], values, backend="reference"),
                            "sources")):
            with pytest.raises(DispatchError) as e:
                call()
            assert str(e.value).startswith(f"{what} is a pyarrow {type(values).__name__} with 1 missing value(s) "
                                           "(nulls; the first at position 1)"), e.value
            assert "Fix: pass x.fill_null(value).to_numpy()" in str(e.value)
    assert unique(pa.array([3, 1, 3], pa.int64())).tolist() == [1, 3]  # without nulls, read as it is
    # Regression (a review): objects of pyarrow's with no null_count (a table, a scalar) raised AttributeError
    assert unique(pa.table({"x": [3, 1, 3]})).tolist() == [1, 3]
    # Regression (a red-team): a table's nulls were told as float columns ("pairs[:, 0] has dtype float64")
    for table in (pa.table({"a": [0, None], "b": [2, 0]}), pa.record_batch({"a": [0, None], "b": [2, 0]})):
        for call in (lambda: g.union(table), lambda: unique_rows(table)):
            with pytest.raises(DispatchError, match=rf"a pyarrow {type(table).__name__} whose column 'a' has 1 missing "
                                                    r"value\(s\) \(nulls; the first at row 1\).*Fix: drop those rows"):
                call()
    g.union(pa.table({"a": [0, 1], "b": [2, 0]}))  # without nulls, read as its rows
    assert g.find(np.array([1, 2])).tolist() == [0, 0]
    with pytest.raises(DispatchError, match="Fix:"):
        unique(pa.scalar(3))
    with pytest.raises(DispatchError, match="Fix:"):
        g.find(pa.scalar(1))
