"""docs/inputs.md, "The library calls' inputs": each family of calls takes the kinds of array its
row names and refuses the others with a Fix, leaving the caller's arrays as they were."""
from __future__ import annotations

import array

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import compaction, egraph, fixpoint, graph
from vyre_numba.workqueue import QueueModel

INDPTR, INDICES = np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 0])  # the cycle 0 -> 1 -> 2 -> 3 -> 0
LEVELS = np.array([0, 1, 2, 3])


def _refused(call) -> str:
    """The message of the DispatchError `call` raises (it fails the test where none is raised)."""
    with pytest.raises(vn.DispatchError, match="Fix:") as e:
        call()
    return str(e.value)


@pytest.mark.parametrize("values", [np.array([5, 6, 7, 8]), np.array([5, 6, 7, 8], ">i4"), np.float32([5, 6, 7, 8])])
def test_compaction_takes_contiguous_numpy_arrays(values):
    flags = np.array([1, 0, 1, 1], np.uint8)
    assert np.array_equal(compaction.select(values, flags), values[flags != 0])


def test_compaction_takes_a_numeric_pandas_column():
    pd = pytest.importorskip("pandas")
    assert compaction.select(pd.Series([1, 2, 3]), np.array([1, 0, 1], bool)).tolist() == [1, 3]


@pytest.mark.parametrize("values,fragment", [
    ([5, 6, 7, 8], "np.asarray(values)"), ((5, 6, 7, 8), "np.asarray(values)"),
    (np.repeat(np.arange(4), 2)[::2], "np.ascontiguousarray(values)"),
    (np.arange(4).reshape(2, 2), "values.reshape(-1)"), (np.ma.array(np.arange(4)), "values.filled(0)"),
    (np.array([1, 2, 3, 4], object), "compaction.nonzero(flags)"),
])
def test_compaction_refuses_what_it_would_have_to_convert_or_copy(values, fragment):
    before = np.array(values, copy=True) if not isinstance(values, (list, tuple)) else None
    assert fragment in _refused(lambda: compaction.select(values, np.ones(4, bool)))
    if before is not None:
        assert np.array_equal(values, before)


def test_compaction_refuses_float_flags():
    assert "(x > 0)" in _refused(lambda: compaction.nonzero(np.array([1.0, 0.0])))


@pytest.mark.parametrize("kind", [list, tuple, lambda a: array.array("q", a), lambda a: memoryview(np.asarray(a)),
                                  lambda a: np.asarray(a, object), lambda a: np.repeat(a, 2)[::2],
                                  lambda a: np.asarray(a, ">u2"), lambda a: np.asarray(a, np.uint8)])
def test_graph_calls_take_any_one_dimensional_integers(kind):
    indptr, indices = kind(INDPTR), kind(INDICES)
    assert np.array_equal(graph.bfs(indptr, indices, 0), LEVELS)
    assert np.array_equal(graph.bfs_many(indptr, indices, kind([0, 2])), [LEVELS, np.roll(LEVELS, 2)])
    assert np.array_equal(graph.connected_components(indptr, indices), np.zeros(4))


def test_one_source_is_an_int_or_a_zero_dimensional_integer_array():
    assert np.array_equal(graph.bfs(INDPTR, INDICES, np.array(1, np.uint8)), np.roll(LEVELS, 1))
    assert np.array_equal(graph.bfs(INDPTR, INDICES, np.int16(1)), np.roll(LEVELS, 1))


@pytest.mark.parametrize("indices,fragment", [
    (INDICES.astype(np.float64), ".astype(np.int64)"), (INDICES.astype(bool), "np.flatnonzero(mask)"),
    ((int(v) for v in INDICES), "not an array of integers"), (INDICES.reshape(2, 2), "Fix:"),
])
def test_graph_calls_refuse_what_is_not_integers(indices, fragment):
    assert fragment in _refused(lambda: graph.bfs(INDPTR, indices, 0))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own
def test_fixpoint_takes_arrays_of_any_shape_and_numbers_and_refuses_copies_that_would_take_the_writes():
    a = np.zeros((2, 3), np.int64)

    def fill(i, a, v):
        r, c = i // 3, i % 3
        if a[r, c] != v:
            a[r, c] = v
            return 1
        return 0
    assert fixpoint.run(fill, 6, (a, 7)).converged and (a == 7).all()
    for x, fragment in (([0, 0], "x = np.asarray(...)"), (np.ma.array([0, 0]), "x = np.asarray(...)"),
                        (np.matrix([0, 0]), "np.asarray(m).ravel()"), (np.zeros(2, ">i8"), "newbyteorder")):
        assert fragment in _refused(lambda: fixpoint.run(lambda i, x: 0, 2, (x,)))


def test_egraph_ids_are_integers_never_rounded():
    g = egraph.EGraph.from_terms(["a", "b", "c"])
    assert g.find(np.array(1)) == 1 and g.find([0, 2]).tolist() == [0, 2]
    assert "never rounded" in _refused(lambda: g.find(np.array([1.0])))
    assert "a bool is no id" in _refused(lambda: g.find(np.array([True])))
    assert "never rounded" in _refused(lambda: g.union([(0.0, 1)]))


@pytest.mark.parametrize("value", [np.array(3), np.array([3])])
def test_counts_are_ints_and_an_array_is_told_its_item(value):
    told = _refused(lambda: fixpoint.run(lambda i, a: 0, value, (np.zeros(4),)))
    assert "Fix: pass n.item(), the number it holds" in told
    assert "Fix: pass an int >= 1" in _refused(lambda: QueueModel(value, np.int32))



class _RaisingArray:
    """What a PyTorch tensor that requires grad does: its conversion to NumPy raises RuntimeError."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad")

    def __len__(self):
        return 4


def test_an_array_whose_conversion_raises_is_a_dispatch_error_in_every_family():
    """Regression (a red-team): the graph calls, the unique helpers, upload and QueueModel.push let
    the RuntimeError through raw; they caught only TypeError and ValueError."""
    from vyre_numba import unique

    x = _RaisingArray()
    calls = [lambda: graph.bfs(x, INDICES, 0), lambda: graph.bfs(INDPTR, x, 0), lambda: graph.check_csr(x, INDICES),
             lambda: graph.bfs_many(INDPTR, INDICES, x), lambda: graph.connected_components(INDPTR, x),
             lambda: unique.unique(x), lambda: unique.unique_rows(x), lambda: QueueModel(4, np.int64).push(x),
             lambda: vn.get_backend("reference").upload(x), lambda: egraph.EGraph.from_terms(["a"]).find(x),
             lambda: compaction.select(x, np.ones(4, bool))]
    for call in calls:
        with pytest.raises(vn.DispatchError, match="Fix:") as e:
            call()
        assert not isinstance(e.value, MemoryError)


def test_egraph_ids_past_the_hosts_memory_are_a_host_memory_error():
    """Regression (a red-team): range(2**40) as ids was 'not an array of integers ()' with the Fix
    'pass a 1-D NumPy integer array' (NumPy refuses the 8 TiB array at once: no memory is used)."""
    g = egraph.EGraph.from_terms(["a", "b"])
    for call, fragment in ((lambda: g.find(range(2**40)), "ids does not fit"),
                           (lambda: g.union([range(2**40), range(2**40)]), "pairs does not fit"),
                           (lambda: egraph.EGraph(range(2**40), [0], [0, 0], []), "eclass does not fit")):
        with pytest.raises(vn.HostMemoryError, match="host's memory as an array.*Fix: ") as e:
            call()
        assert fragment in str(e.value) and isinstance(e.value, MemoryError)
    assert g.n_nodes == 2


def test_serialized_text_as_a_memoryview_or_an_open_file_is_told_how_to_pass_it(tmp_path):
    """Regression (a red-team): both were told 'holds a value JSON cannot write ... pass the dict'."""
    text = egraph.EGraph.from_terms([("Add", 1, 2)]).to_serialized()
    for given, fix in ((memoryview(text.encode()), "Fix: pass bytes(view)."), (None, "Fix: pass its text, f.read().")):
        path = tmp_path / "g.json"
        path.write_text(text)
        with open(path) as f:
            with pytest.raises(vn.DispatchError) as e:
                egraph.EGraph.from_serialized(f if given is None else given)
        assert str(e.value).endswith(fix)
    assert egraph.EGraph.from_serialized(bytes(memoryview(text.encode()))).n_nodes == 3
