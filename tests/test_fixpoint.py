"""The fixpoint runner: every mode reaches the same fixpoint as the CPU loop (its oracle), reports
rounds and convergence honestly, and a stuck grid barrier ends in an error, never a hang."""
from __future__ import annotations

import numpy as np
import pytest

import vyre_numba as vn
import numba
from numba import cuda
from vyre_numba import fixpoint, ir, unionfind
from vyre_numba.fixpoint import runner
from vyre_numba.errors import BarrierTimeoutError, DispatchError, UnsupportedError


def relax(i, labels, indptr, indices):
    """Pull the smallest label of i's neighbours (monotone: any order reaches the same fixpoint)."""
    best = labels[i]
    for k in range(indptr[i], indptr[i + 1]):
        j = indices[k]
        if labels[j] < best:
            best = labels[j]
    if best < labels[i]:
        labels[i] = best
        return 1
    return 0


def path(n: int):
    """An undirected path 0 - 1 - ... - n-1 in CSR form."""
    src = np.concatenate([np.arange(n - 1), np.arange(1, n)])
    dst = np.concatenate([np.arange(1, n), np.arange(n - 1)])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.add.at(indptr, src + 1, 1)
    return np.cumsum(indptr), dst[order].astype(np.int64)


def atomic_hook(i, parent):
    """Uses Numba's own array features in a step: `.size` and cuda.atomic."""
    if i + 1 < parent.size:
        old = cuda.atomic.min(parent, i + 1, parent[i])
        return old > parent[i]
    return 0


def cpu_labels(n: int, start: np.ndarray, indptr, indices, **kw):
    labels = start.copy()
    r = fixpoint.run(relax, n, [labels, indptr, indices], backend="reference", **kw)
    return labels, r


def test_cpu_loop_reaches_the_fixpoint_and_counts_rounds():
    n = 300
    indptr, indices = path(n)
    labels, r = cpu_labels(n, np.arange(n, dtype=np.uint32)[::-1].copy(), indptr, indices)
    assert r.converged and r.mode == "relaunch" and r.device_ns is None
    assert labels.tolist() == [0] * n
    assert 2 <= r.rounds <= n + 1


def test_max_rounds_is_reported_not_hidden():
    n = 300
    indptr, indices = path(n)
    labels, r = cpu_labels(n, np.arange(n, dtype=np.uint32)[::-1].copy(), indptr, indices, max_rounds=3)
    assert r.rounds == 3 and not r.converged
    assert labels.max() > 0


def test_nothing_to_do_converges_in_one_round():
    labels, r = cpu_labels(5, np.zeros(5, np.uint32), *path(5))
    assert (r.rounds, r.converged) == (1, True)
    _, r = cpu_labels(0, np.zeros(0, np.uint32), np.zeros(1, np.int64), np.zeros(0, np.int64))
    assert (r.rounds, r.converged) == (1, True)


LIMIT = 5


def up_to_limit(i, x):
    if x[i] < LIMIT:
        x[i] += 1
        return 1
    return 0


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_step_reads_the_global_it_names_as_it_is_now(name):
    """Regression (a red-team): the compiled step was kept by the function, and Numba fixes a
    global at compilation: a notebook that changed a threshold got the old threshold's fixpoint."""
    global LIMIT
    be = vn.get_backend(name)
    try:
        for limit in (5, 10, 5):
            LIMIT = limit
            x = be.upload(np.zeros(3, np.int64))
            r = fixpoint.run(up_to_limit, 3, [x], backend=be)
            fixpoint.for_each(up_to_limit, 3, [x], backend=be)  # a fixed point: one more round changes nothing
            assert r.converged and r.rounds == limit + 1 and be.download(x).tolist() == [limit] * 3
    finally:
        LIMIT = 5



@numba.njit
def capped(v):
    return min(v, LIMIT)


@numba.njit(inline="always")
def item(a, j):
    return a[j]


@numba.njit
def item_of_item(a, j):
    return item(a, j)  # a helper's helper


@numba.njit
def put(a, j, v):
    a[j] = v


@numba.njit
def norm(v):
    return np.sqrt(v * v)  # named like NumPy's own (np.linalg.norm): no recursion


@numba.njit("int32(int32)")
def wrapped(v):
    return v + np.int32(1)  # declared int32: wraps at 2**31, compiled afresh as declared


@numba.njit
def root(parent, x):
    if parent[x] == x:
        return x
    return root(parent, parent[x])


def test_the_helpers_a_cpu_step_calls_are_bounds_checked_keyed_and_not_recursive():
    """Regression (a red-team): only the step itself was compiled with bounds checks, so an @njit
    helper's read past an array gave garbage and a "converged" run, and its write past one changed
    memory beside it; a global the helper read was compiled in once, stale when a cell changed it;
    a recursive helper on a long chain ran off the stack and killed the process."""
    global LIMIT

    def reads_past(i, a, out):
        v = item_of_item(a, i + 2)  # two helpers down, one inlined
        if out[i] != v:
            out[i] = v
            return 1
        return 0

    def writes_past(i, a):
        put(a, i + 2, 12345)
        return 0

    for step, args in ((reads_past, [np.arange(4), np.zeros(4, np.int64)]), (writes_past, [np.zeros(4, np.int64)])):
        before = [a.copy() for a in args]
        with pytest.raises(DispatchError, match=r"the step indexed outside an array.*the arrays are as they were"):
            fixpoint.run(step, 4, args, backend="reference")
        assert all(np.array_equal(a, b) for a, b in zip(args, before))
    x = np.arange(8)
    assert fixpoint.run(reads_past, 6, [x, np.zeros(6, np.int64)], backend="reference").converged  # in range: fine

    def up_to_capped(i, x):
        v = capped(x[i] + 1)
        if v != x[i]:
            x[i] = v
            return 1
        return 0
    try:
        for limit in (5, 9):
            LIMIT = limit
            x = np.zeros(3, np.int64)
            assert fixpoint.run(up_to_capped, 3, [x], backend="reference").converged and x.tolist() == [limit] * 3
    finally:
        LIMIT = 5

    def labels(i, parent, label):
        r = root(parent, i)
        if label[i] != r:
            label[i] = r
            return 1
        return 0
    with pytest.raises(DispatchError, match=r"the helper 'root' is recursive \(it calls root -> root\).*kills the "
                                            r"process\. Fix: write it as a loop"):
        fixpoint.run(labels, 4, [np.array([1, 2, 3, 3]), np.zeros(4, np.int64)], backend="reference")

    def norms(i, x):  # a helper named like a NumPy function is no recursion (a review: it was refused as one)
        v = norm(x[i])
        if x[i] != v:
            x[i] = v
            return 1
        return 0
    x = np.array([-2.0, 3.0])
    assert fixpoint.run(norms, 2, [x], backend="reference").converged and x.tolist() == [2.0, 3.0]

    def bumps(i, x):  # an explicit signature is kept (a review: it was compiled lazily, int64, without the wrap)
        x[i] = wrapped(x[i])
        return 0
    x = np.array([2**31 - 1, 5], np.int32)
    fixpoint.run(bumps, 2, [x], backend="reference")
    assert x.tolist() == [-(2**31), 6]


def test_helpers_named_as_module_attributes_in_defaults_or_tuples_are_checked_and_each_compiled_once(tmp_path,
                                                                                                     monkeypatch):
    """Regression (a review): mod.helper, a helper as a default argument or in a tuple was left unchecked
    (garbage and "converged"); a helper reached by many paths (a diamond) was compiled once a path."""
    import sys

    select = sys.modules["vyre_numba.compaction.select"]  # (the package's `select` is the function)
    (tmp_path / "helpmod60.py").write_text("import numba\nLIMIT = 5\n\n@numba.njit\ndef item(a, j):\n    return a[j]\n"
                                           "\n@numba.njit\ndef capped(v):\n    return min(v, LIMIT)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import helpmod60

    def via_module(i, a, out):
        out[i] = helpmod60.item(a, i + 2)
        return 0

    def via_default(i, a, out, get=helpmod60.item):
        out[i] = get(a, i + 2)
        return 0
    GETS = (helpmod60.item,)

    def via_tuple(i, a, out):
        out[i] = GETS[0](a, i + 2)
        return 0
    for step in (via_module, via_default, via_tuple):
        with pytest.raises(DispatchError, match=r"the step indexed outside an array"):
            fixpoint.run(step, 4, [np.arange(4), np.zeros(4, np.int64)], backend="reference")

    def up_to_module_limit(i, x):
        v = helpmod60.capped(x[i] + 1)
        if v != x[i]:
            x[i] = v
            return 1
        return 0
    for limit in (5, 9):  # the module's global, read through its helper, as it is now
        helpmod60.LIMIT = limit
        x = np.zeros(3, np.int64)
        assert fixpoint.run(up_to_module_limit, 3, [x], backend="reference").converged and x.tolist() == [limit] * 3
    kept = len(runner._CPU_ROUNDS)
    fixpoint.run(up_to_module_limit, 3, [np.zeros(3, np.int64)], backend="reference")
    assert len(runner._CPU_ROUNDS) == kept  # found again, not compiled afresh (a review: a module's copy keyed apart)
    del sys.modules["helpmod60"]

    (tmp_path / "pkg60").mkdir()  # pkg.sub.helper: the submodule's helper checked too (a review)
    (tmp_path / "pkg60" / "__init__.py").write_text("from . import sub\n")
    (tmp_path / "pkg60" / "sub.py").write_text("import numba\n\n@numba.njit\ndef peek(a, j):\n    return a[j]\n")
    import pkg60

    def via_submodule(i, a, out):
        out[i] = pkg60.sub.peek(a, i + 2)
        return 0
    with pytest.raises(DispatchError, match=r"the step indexed outside an array"):
        fixpoint.run(via_submodule, 4, [np.arange(4), np.zeros(4, np.int64)], backend="reference")
    del sys.modules["pkg60"], sys.modules["pkg60.sub"]

    made = []
    real = select.checked_helpers

    def counted(fn, jit, *rest):
        made.append(fn.__name__)
        return real(fn, jit, *rest)
    monkeypatch.setattr(select, "checked_helpers", counted)
    leaf = numba.njit(lambda v: v + 1)
    left = numba.njit(lambda v: leaf(v) + leaf(v))
    right = numba.njit(lambda v: leaf(v) * 2)
    top = numba.njit(lambda v: left(v) + right(v))

    def diamond(i, x):
        x[i] = top(x[i])
        return 0
    x = np.zeros(2, np.int64)
    fixpoint.run(diamond, 2, [x], backend="reference")
    assert x.tolist() == [4, 4] and len(made) == 5  # the step and each of its four helpers once



def test_a_step_that_runs_out_of_memory_is_still_a_memory_error():
    """Regression (a red-team): a step's own allocation failing became a plain DispatchError telling
    it to raise no exceptions, which `except MemoryError` missed (the docs: the caller's own stays theirs)."""
    def greedy(i, x):
        big = np.empty(1 << 62, np.int8)
        x[i] = big.size
        return 0
    x = np.zeros(2, np.int64)
    with pytest.raises(MemoryError) as e:
        fixpoint.run(greedy, 2, [x], backend="reference")
    assert isinstance(e.value, vn.HostMemoryError) and "Fix: allocate less inside the step" in str(e.value)
    assert x.tolist() == [0, 0]



SEEN = np.zeros(4, np.int64)


def test_a_step_writing_an_array_it_names_from_outside_is_told_to_take_it_as_an_argument():
    """Regression (a red-team): it was told `setitem(readonly array ...)` of an array the user never
    made read-only, with the Fix to write the step in Numba's subset."""
    def marks(i, x):
        SEEN[i] = 1
        return 0
    with pytest.raises(DispatchError, match=r"writes to an array it reads from outside itself .*Fix: pass the array "
                                            r"in args"):
        fixpoint.run(marks, 4, [np.zeros(4, np.int64)], backend="reference")
    assert SEEN.tolist() == [0] * 4



def test_a_step_with_a_keyword_only_parameter_is_told_to_make_it_ordinary():
    """Regression (a red-team): Numba bound the array to the keyword-only `damping` and said a required
    argument 'a' was missing, with the Fix to write the step in Numba's subset."""
    def damped(i, a, *, damping=0.5):
        a[i] = a[i] * damping
        return 0
    with pytest.raises(DispatchError, match=r"the step takes 'damping' by keyword only.*Fix: make 'damping' an "
                                            r"ordinary parameter"):
        fixpoint.run(damped, 4, [np.ones(4)], backend="reference")



TABLE = np.array([5])


def up_to_table(i, x):
    if x[i] < TABLE[0]:
        x[i] += 1
        return 1
    return 0


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_step_reads_the_global_array_it_names_as_it_is_now(name):
    """Regression (a red-team): a step reading a global array was kept by the function, and Numba
    compiles the array's contents in: a notebook cell that rebound the array, or changed it in
    place, got the old contents' fixpoint. A large array is refused, with the fix of an argument."""
    global TABLE
    be = vn.get_backend(name)
    try:
        for table in (np.array([5]), np.array([9]), "in place 3", np.array([5])):
            if isinstance(table, str):
                TABLE[0] = 3
            else:
                TABLE = table
            x = be.upload(np.zeros(3, np.int64))
            r = fixpoint.run(up_to_table, 3, [x], backend=be)
            limit = int(TABLE[0])
            assert r.converged and r.rounds == limit + 1 and be.download(x).tolist() == [limit] * 3
        TABLE = np.full(1 << 14, 4, np.int64)  # 128 KiB: over FROZEN_BYTES
        with pytest.raises(DispatchError, match=r"up_to_table reads the array 'TABLE' \(int64, 131072 bytes\) from "
                                                r"outside itself.*Fix: pass the array as an argument"):
            fixpoint.run(up_to_table, 3, [be.upload(np.zeros(3, np.int64))], backend=be)
    finally:
        TABLE = np.array([5])


def test_for_each_is_one_round_without_a_result():
    n = 10
    indptr, indices = path(n)
    once, by_run = (np.arange(n, dtype=np.uint32)[::-1].copy() for _ in range(2))
    assert fixpoint.for_each(relax, n, [once, indptr, indices]) is None
    fixpoint.run(relax, n, [by_run, indptr, indices], max_rounds=1)
    assert np.array_equal(once, by_run) and once.tolist() == [8, 7, 6, 5, 4, 3, 2, 1, 0, 0]
    with pytest.raises(vn.VyreError, match="n=-1.*Fix:"):
        fixpoint.for_each(relax, -1, [once, indptr, indices])


def _raises(i, a, indptr, indices):
    if i == 1:
        a[i] = 5
        raise ValueError("boom")
    return 0


async def _async_step(i, a, indptr, indices):
    return 0


def _generator_step(i, a, indptr, indices):
    yield 0


@pytest.mark.parametrize("kw,fragment", [
    ({"n": -1}, "n=-1"), ({"n": True}, "n=True is not an int in [0, 2147483647]. Fix: pass int(n) (True is not "),
    ({"n": 2**32}, "n=4294967296"), ({"n": np.array(3)}, "Fix: pass n.item(), the number it holds (an array, 0-d too"),
    ({"max_rounds": np.array([5])}, "Fix: pass max_rounds.item(), the number it holds"),
    ({"block": np.array([[64]], np.uint16)}, "Fix: pass block.item()"), ({"block": np.array(8)}, "in range"),
    # the GPU's 32-bit grid-stride loops wrapped past 2**32 - stride (items ran twice, or forever): refused alike
    ({"n": 2**31}, "n=2147483648 is 2**31 or more"), ({"n": np.uint32(2**32 - 1)}, "n=4294967295 is 2**31 or more"),
    ({"max_rounds": 0}, "max_rounds=0"), ({"mode": "fast"}, "mode='fast'"), ({"mode": "cooperative"}, "needs a GPU"),
    ({"timeout_s": -1}, "timeout_s=-1"), ({"args": "abc"}, "not a list"), ({"step": 5}, "not a Python function"),
    ({"step": np.sin}, "not a Python function"), ({"step": int}, "the class int"), ({"args": [[1, 2, 3], *path(3)]}, "writes would be lost"),
    ({"step": lambda i, a, p, q: a.no_such_attribute}, "does not compile"), ({"backend": "nope"}, "no backend named"),
    ({"step": _raises}, "the step raised ValueError (boom)"), ({"step": _async_step}, "async or generator"),
    ({"step": _generator_step}, "async or generator"), ({"timeout_s": np.True_}, "timeout_s=np.True_"),
    ({"timeout_s": float("nan")}, "timeout_s=nan"), ({"timeout_s": np.float32(-1)}, "timeout_s=np.float32(-1.0)"),
    # a red-team: np.asarray of these is an object array, which fails again; a number is what they mean
    ({"args": [np.zeros(3, np.uint32), path(3)[0], None]}, "a number as an int or a float"),
    ({"args": [np.zeros(3, np.uint32), path(3)[0], {"k": 1}]}, "a number as an int or a float"),
])
def test_bad_arguments_raise_vyre_errors_with_a_fix(kw, fragment):
    call = {"step": relax, "n": 3, "args": [np.zeros(3, np.uint32), *path(3)]}
    call.update(kw)
    step, n, args = call.pop("step"), call.pop("n"), call.pop("args")
    before = [np.array(x, copy=True) for x in args]
    with pytest.raises(vn.VyreError, match="Fix:") as e:
        fixpoint.run(step, n, args, **({"backend": "reference"} | call))
    assert fragment in str(e.value)
    assert all(np.array_equal(x, y) for x, y in zip(args, before))


@pytest.mark.parametrize("timeout_s", [5, 2.5, np.float32(5), np.float64(5), np.int64(5), np.uint8(5)])
def test_a_timeout_of_any_real_number_type_is_taken(timeout_s):
    a = np.zeros(3, np.uint32)
    assert fixpoint.run(relax, 3, [a, *path(3)], timeout_s=timeout_s).converged


def _zero_like(i, a):
    return a[i] * 0  # the array's type: a float for float arrays, an int for int arrays


def test_the_result_type_is_checked_for_this_calls_arguments_only():
    """Numba keeps one compilation of the step for each argument types; an earlier call's float
    result does not refuse a later call whose step returns an integer, nor the other way round."""
    assert fixpoint.run(_zero_like, 3, [np.ones(3, np.int64)]).converged
    with pytest.raises(DispatchError, match="returns float64.*Fix:"):
        fixpoint.run(_zero_like, 3, [np.ones(3)])
    assert fixpoint.run(_zero_like, 3, [np.ones(3, np.int64)]).converged
    assert fixpoint.run(_zero_like, 3, [np.ones(3, np.int32)]).converged
    with pytest.raises(DispatchError, match="returns float64.*Fix:"):  # float32 * 0, as Numba types it
        fixpoint.run(_zero_like, 3, [np.ones(3, np.float32)])


def _writes_the_first(i, a, b):
    a[i] = 1
    return 0


@pytest.mark.parametrize("frozen,fragment", [((0,), "args[0] is read-only, but the step writes it"),
                                             ((0, 1), "args[0], args[1] are read-only, and the step writes one")])
def test_a_read_only_array_the_step_writes_is_named_as_such(frozen, fragment):
    args = [np.zeros(3), np.zeros(3)]
    for k in frozen:
        args[k].flags.writeable = False
    with pytest.raises(DispatchError, match="Fix: pass a writable array") as e:
        fixpoint.run(_writes_the_first, 3, args)
    assert fragment in str(e.value)
    b = np.zeros(3)
    b.flags.writeable = False
    assert fixpoint.run(_writes_the_first, 3, [np.zeros(3), b]).converged  # only read: taken


def test_a_big_endian_record_field_and_long_doubles_are_named():
    """Regression (a red-team): a record with a big-endian field was named '|V4' (its dtype.str),
    and a long double got Numba's "non-precise type pyobject"."""
    with pytest.raises(DispatchError, match=r"args\[0\] has dtype \[\('x', '>i4'\)\], not in this machine's byte order"):
        fixpoint.run(lambda i, a: 0, 1, [np.zeros(2, [("x", ">i4")])], backend="reference")
    # a subarray field, which NumPy's isnative misses: "does not compile with Numba" (a review)
    with pytest.raises(DispatchError, match=r"args\[0\] has dtype \[\('x', '>i4', \(2,\)\)\], not in this machine"):
        fixpoint.run(lambda i, a: 0, 1, [np.zeros(2, [("x", ">i4", (2,))])], backend="reference")
    for bad in (np.longdouble(1), np.zeros(2, np.longdouble), np.clongdouble(1)):
        if np.dtype(bad.dtype).itemsize <= (8 if bad.dtype.kind == "f" else 16):
            continue  # a platform whose long double is a double: nothing to refuse
        with pytest.raises(DispatchError, match=r"args\[1\] holds (float|complex)\d+, which Numba does not compile.*Fix:"):
            fixpoint.run(lambda i, a, x: 0, 1, [np.zeros(2), bad], backend="reference")


def test_a_big_endian_array_is_refused_even_after_the_step_compiled_for_native_ones():
    indptr, indices = path(5)
    cpu_labels(5, np.arange(5, dtype=np.int64), indptr, indices)  # Numba would now read a '>i8' array as '<i8'
    swapped = np.arange(5, dtype=">i8")[::-1].copy()
    with pytest.raises(DispatchError, match=r"args\[0\] has dtype >i8, not in this machine's byte order.*Fix:"):
        fixpoint.run(relax, 5, [swapped, indptr, indices])
    with pytest.raises(DispatchError, match=r"args\[0\] has dtype >i8"):
        fixpoint.for_each(relax, 5, [swapped, indptr, indices])
    assert swapped.tolist() == [4, 3, 2, 1, 0]


def test_float16_arguments_are_refused_as_such_not_as_an_exception_the_step_raised():
    for args in ([np.ones(3, np.float16), np.zeros(3)], [np.zeros(3), np.float16(1)]):
        with pytest.raises(DispatchError, match=r"holds float16, which Numba's CPU compiler does not take.*Fix: ") as e:
            fixpoint.run(_writes_the_first, 3, args)
        assert "raised" not in str(e.value)


def test_a_list_argument_is_told_a_fix_that_keeps_the_steps_writes():
    """Regression (a red-team): the Fix was "pass np.asarray(...) of it", and passing
    np.asarray(labels) inline converged with labels unchanged (it is the copy the Fix warned of)."""
    indptr, indices = path(4)
    labels = [0, 1, 2, 3]
    with pytest.raises(DispatchError, match=r"args\[0\] is a list.*Fix: make it an array first, x = np\.asarray\(\.\.\.\), "
                                            r"pass x and read the results from x"):
        fixpoint.run(relax, 4, [labels, indptr, indices], backend="reference")
    x = np.asarray(labels)  # the fix, as written
    assert fixpoint.run(relax, 4, [x, indptr, indices], backend="reference").converged and x.tolist() == [0, 0, 0, 0]


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_an_np_matrix_is_refused_as_such_not_as_an_exception_the_step_raised():
    indptr, indices = path(3)
    labels = np.matrix(np.arange(3, dtype=np.int64))
    for call in (fixpoint.run, fixpoint.for_each):
        with pytest.raises(DispatchError, match=r"args\[0\] is an np.matrix.*Fix: pass np.asarray\(m\)\.ravel\(\)") as e:
            call(relax, 3, [labels, indptr, indices])
        assert "raised" not in str(e.value)
    assert labels.tolist() == [[0, 1, 2]]
    labels = np.asarray(labels).ravel()
    assert fixpoint.run(relax, 3, [labels, indptr, indices]).converged and labels.tolist() == [0, 0, 0]


def _set_rows(i, x, s):
    if x[i] != s:  # of a 2-D x, a row's truth
        x[i] = s
        return 1
    return 0


def test_a_2d_array_whose_row_the_step_tests_is_told_as_2d_not_as_an_exception_the_step_raised():
    """Regression (a red-team): "the step raised ValueError (truth value ...). Fix: make the step total"."""
    x = np.zeros((3, 4), np.int64)
    with pytest.raises(DispatchError, match=r"a comparison of whole arrays \(a == b\), or of x\[i\] where x is args\[0\] "
                                            r"\(shape \(3, 4\)\), not 1-D, so x\[i\] is a whole row\. Fix: compare items "
                                            r"\(a\[i\] == b\[i\]\), and index a 2-D array as x\[r, c\] or pass "
                                            r"x\.reshape\(-1\)"):
        fixpoint.run(_set_rows, 3, [x, 1], backend="reference", progress=False)
    assert not x.any()
    flat = x.reshape(-1)  # the fix, as written
    assert fixpoint.run(_set_rows, 12, [flat, 1], backend="reference", progress=False).converged and x.all()


def test_no_host_memory_for_the_undo_copies_is_a_vyre_error_with_a_fix(monkeypatch):
    from vyre_numba.errors import HostMemoryError
    from vyre_numba.fixpoint import runner

    def no_room(*args, **kwargs):
        raise MemoryError("Unable to allocate 2.00 GiB")

    monkeypatch.setattr(runner, "_restored_on_failure", no_room)
    p = ir.Program([ir.BufferDecl.read_write("y", 0, "u32")], 64,
                   [ir.store("y", ir.invocation_id(0), ir.lit(9, "u32"))], name="nine")
    for call in (lambda: fixpoint.run(relax, 3, [np.zeros(3, np.uint32), *path(3)]),
                 lambda: fixpoint.for_each(relax, 3, [np.zeros(3, np.uint32), *path(3)]),
                 lambda: fixpoint.run(p, 3, [np.zeros(3, np.uint32)], backend="reference")):
        with pytest.raises(HostMemoryError, match="fixpoint run ran out of host memory.*Fix: work on less data"):
            call()


def _writes_then_strays(i, a):
    a[i] = 1
    return 0


def _writes_then_raises(i, a):
    a[i] = 7
    if i == 2:
        raise ZeroDivisionError("mine")
    return 1


def _says_yes(i, a):
    a[i] = 5
    return "x"


@pytest.mark.parametrize("step,n,fragment", [
    (_writes_then_strays, 200_000, "outside an array"),  # without bounds checks this wrote past the array
    (_writes_then_raises, 3, "the step raised ZeroDivisionError (mine)"),
    (_says_yes, 3, "not a bool or an integer"),
])
def test_a_failing_cpu_step_raises_and_leaves_the_arrays_as_they_were(step, n, fragment):
    a = np.arange(3, dtype=np.int64)
    with pytest.raises(vn.VyreError, match="Fix:") as e:
        fixpoint.run(step, n, [a], backend="reference")
    assert fragment in str(e.value)
    assert a.tolist() == [0, 1, 2]



def _divides(i, a, q, r):
    q[i] = a[i] // (i - 1)  # i = 1 divides by zero
    r[i] = 1.0 / (a[i] - 2.0)  # and a = 2 too
    return 0


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_step_divides_by_zero_as_numpy_does_on_every_backend(name):
    """Regression (a red-team): the CPU compiled steps with Python's error model (division by zero
    raised), the GPU with NumPy's (an integer 0, a float inf): the oracle disagreed with the device."""
    be = vn.get_backend(name)
    a = np.array([4, 5, 2], np.int64)
    q, r = be.upload(np.full(3, -1, np.int64)), be.upload(np.zeros(3))
    fixpoint.for_each(_divides, 3, [be.upload(a), q, r], backend=be)
    assert be.download(q).tolist() == [-4, 0, 2]
    assert be.download(r).tolist() == [0.5, 1 / 3, np.inf]


def _up_wide(i, a):
    if a[i] < 3:
        a[i] += 1
        return np.int64(1) << 32  # non-zero only in the high word
    return 0


def _up_unsigned(i, a):
    if a[i] < 3:
        a[i] += 1
        return np.uint64(1) << np.uint64(63)
    return np.uint64(0)


def _up_bool(i, a):
    if a[i] < 3:
        a[i] += 1
        return True
    return False


def _up_byte(i, a):
    if a[i] < 3:
        a[i] += 1
        return np.int8(-128)
    return np.int8(0)


@pytest.mark.parametrize("step", [_up_wide, _up_unsigned, _up_bool, _up_byte])
@pytest.mark.parametrize("name,mode", [("reference", "auto")] +
                         [pytest.param("cuda", m, marks=pytest.mark.gpu) for m in ("cooperative", "graph", "relaunch")])
def test_any_non_zero_integer_result_is_a_change_on_every_backend(step, name, mode):
    """Regression (a red-team): the GPU compiled every step to return int32, so `1 << 32` (or
    2^63 unsigned) read as "nothing changed" there and the run stopped after one round."""
    be = vn.get_backend(name)
    a = be.upload(np.zeros(5, np.int64))
    r = fixpoint.run(step, 5, [a], backend=be, mode=mode)
    assert r.converged and r.rounds == 4 and be.download(a).tolist() == [3] * 5


def _halves(i, a):
    a[i] = a[i] / 2
    return a[i]


def _none_at_one(i, a):
    a[i] = 7
    if i == 1:
        return None
    return 1


def _falls_off_at_one(i, a):
    if i == 1:
        return
    return True


def test_a_step_returning_none_on_some_paths_is_told_so_on_the_cpu_and_for_the_gpu():
    """Regression (a red-team): a None on some paths got Numba's bool(OptionalType(int64)) and a
    generic fix; the arrays are put back."""
    from offline_link import InterfaceArray as DeviceArray
    from vyre_numba.fixpoint import device

    for step, other in ((_none_at_one, "int64"), (_falls_off_at_one, "bool")):
        a = np.zeros(3)
        with pytest.raises(DispatchError, match=rf"^the step returns None on some paths and {other} on others.*"
                                                r"Fix: return a bool or an integer on every path"):
            fixpoint.run(step, 3, [a], backend="reference")
        assert not a.any()
        with pytest.raises(DispatchError, match=r"^the step returns None on some paths"):
            device._step_ptx(step, device._arg_kinds([DeviceArray(np.float64)])[0], (9, 0))


def test_a_float_result_is_refused_for_the_gpu_as_on_the_cpu():
    """Regression (a red-team): the GPU truncated a float result to int32 (0.4 read as no change)
    where the CPU refuses it. Typed to PTX here, which needs no GPU."""
    from offline_link import InterfaceArray as DeviceArray
    from vyre_numba.fixpoint import device

    with pytest.raises(DispatchError, match=r"returns float64, not a bool or an integer\. Fix: return"):
        fixpoint.run(_halves, 3, [np.ones(3)])
    with pytest.raises(DispatchError, match=r"returns float64, not a bool or an integer\. Fix: return"):
        device._step_ptx(_halves, device._arg_kinds([DeviceArray(np.float64)])[0], (9, 0))
    for step, ret in ((_up_wide, "b64"), (_up_unsigned, "b64"), (_up_bool, "b32"), (_up_byte, "b32")):
        ptx, got = device._step_ptx(step, device._arg_kinds([DeviceArray(np.int64)])[0], (9, 0))
        assert got == ret and f".param .{ret} func_retval0" in ptx, (step, ptx[:600])


def _writes(i, a):
    a[i] = a[i]
    return 0


def test_device_arrays_of_any_numpy_dtype_are_typed_or_refused_with_a_fix():
    """Regression (a red-team): the GPU's step arguments were typed from the interface's typestr
    alone: a datetime64 raised a raw ValueError (its itemsize read from '8[s]'), a record or
    big-endian array a raw NumbaNotImplementedError, '<U2' got itemsize 2, and a read-only array
    was writable in the step. Typed to PTX here, which needs no GPU."""
    from offline_link import InterfaceArray as DeviceArray
    from vyre_numba.fixpoint import device

    rec = np.dtype([("x", "<i4"), ("y", "<f4")])
    for dt in ("<M8[s]", "<m8[ns]", rec, "<U2", "<f2", "?"):
        kinds, params = device._arg_kinds([DeviceArray(dt, 3)])
        assert kinds[0].dtype == numba.from_dtype(np.dtype(dt)) and params[3] == ("b64", np.dtype(dt).itemsize), dt
    device._step_ptx(lambda i, a: a[i].x > a[i].y, device._arg_kinds([DeviceArray(rec, 3)])[0], (9, 0))
    with pytest.raises(DispatchError, match=r"args\[0\] is a device array of >i4, not in this machine's byte order.*Fix:"):
        device._arg_kinds([DeviceArray(">i4", 3)])
    with pytest.raises(DispatchError, match=r"args\[1\] is a device array of object.*Fix:"):
        device._arg_kinds([DeviceArray("<i4"), DeviceArray(object)])
    kinds, _ = device._arg_kinds([DeviceArray("<i8", 3, readonly=True)])
    device._step_ptx(lambda i, a: a[i] > 0, kinds, (9, 0))  # read: fine
    with pytest.raises(DispatchError, match=r"args\[0\] is read-only, but the step writes it .*Fix: pass a writable"):
        device._step_ptx(_writes, kinds, (9, 0))


def test_a_program_step_refuses_a_read_only_device_array_it_writes():
    from offline_link import InterfaceArray as DeviceArray

    p = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.read_write("y", 1, "u32")], 64,
                   [ir.store("y", ir.gid(0), ir.load("x", ir.gid(0)))], name="copy")
    with pytest.raises(DispatchError, match=r"read-only, but the step writes the buffer\. Fix:"):
        runner.program_args(p, [DeviceArray("<u4"), DeviceArray("<u4", readonly=True)], device=True)
    x, y = DeviceArray("<u4", readonly=True), DeviceArray("<u4")
    y.__cuda_array_interface__["data"] = (1 << 20, False)  # apart from x
    assert runner.program_args(p, [x, y], device=True) == [x, y]  # only a written one must be writable


def _bumps_record(i, row, a):
    row["x"] = 9
    if i == 1:
        raise ValueError("boom")
    return 0


def test_a_record_scalar_is_refused_not_written_through_to_its_array():
    """Regression (a red-team): rows[1] (a view into rows) passed the checks; the step wrote the
    caller's structured array through it, and a failed run left that write, though its error said
    the arrays were as they were."""
    rows = np.zeros(2, [("x", np.int64)])
    with pytest.raises(DispatchError, match=r"args\[0\] is one record of a structured array.*Fix: pass the structured"):
        fixpoint.run(_bumps_record, 3, [rows[1], np.zeros(3)])
    assert rows.tolist() == [(0,), (0,)]


def _whole(i, a):
    return a


def test_a_step_returning_an_array_is_told_so_not_that_it_raised():
    with pytest.raises(DispatchError, match=r"the step returns array\(float64, 1d, C\), not a bool or an integer"):
        fixpoint.run(_whole, 3, [np.ones(3)])


def _defaulted(i, a, k=0):
    return a[i] * k


def _starred(i, *arrs):
    return arrs[0][i] * 0


@pytest.mark.parametrize("step", [_defaulted, _starred])
def test_a_step_with_defaults_or_star_args_is_checked_for_this_calls_arguments(step):
    """Regression (a red-team): the result check could not find such a step's overload (Numba
    keys it with the default left out and *args folded), so after one refused float call every
    later int call was refused too."""
    with pytest.raises(DispatchError, match="returns float64"):
        fixpoint.run(step, 3, [np.ones(3)])
    assert fixpoint.run(step, 3, [np.ones(3, np.int64)]).converged


def _two(i, a, b):
    return 0


def _own_type_error(i, a):
    if i == 1:
        raise TypeError("mine")
    return 0


def _own_index_error(i, a):
    if i == 1:
        raise IndexError("mine")
    return 0


def test_a_steps_own_errors_are_told_apart_from_numbas():
    """Regression (a red-team): args of the wrong number, or a TypeError the step raised itself,
    were said not to compile with Numba; an IndexError it raised, to index outside an array."""
    a = np.zeros(3)
    for args, given in (([a], 1), ([a, a, a], 3)):
        with pytest.raises(DispatchError, match=rf"the step takes \(i, a, b\): i and then 2 argument\(s\), but args "
                                                rf"holds {given}\. Fix: pass one item of args for each"):
            fixpoint.run(_two, 3, args)
    fixpoint.run(lambda i, a, b=0: 0, 3, [a])  # a default fills the rest
    with pytest.raises(DispatchError, match=r"^the step takes no parameters; it is called as step\(i, \*args\)\. Fix: "
                                            r"make i, the item, its first parameter"):
        fixpoint.run(lambda: 0, 3, [])
    fixpoint.run(lambda i, *rest: 0, 3, [a, a])
    with pytest.raises(DispatchError, match=r"^the step raised TypeError \(mine\)\. Fix: make the step total"):
        fixpoint.run(_own_type_error, 3, [a])
    with pytest.raises(DispatchError, match=r"^the step raised IndexError \(mine\)\. Fix: make the step total"):
        fixpoint.run(_own_index_error, 3, [a])
    with pytest.raises(DispatchError, match=r"timeout_s=.* is a timedelta64, not a number of seconds\. Fix: pass "
                                            r"timeout_s / np\.timedelta64\(1, 's'\)"):
        fixpoint.run(_two, 3, [a, a], timeout_s=np.timedelta64(1, "s"))


def test_a_program_step_past_its_work_budget_leaves_the_arrays_as_they_were():
    from vyre_numba.reference import ReferenceBackend

    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.read_write("y", 0, "u32")], 64,
                   [ir.let("i", ir.invocation_id(0)), ir.store("y", i, ir.lit(9, "u32")),
                    ir.loop("k", 0, 1000, [ir.store("y", i, ir.lit(8, "u32"))])], name="nine")
    y = np.arange(3, dtype=np.uint32)
    with pytest.raises(DispatchError, match=r"dispatch of 'nine' on the reference backend ran out of its work budget "
                                            r"of 1 units at the loop over 'k'.*\. Fix: bound the loop's trip count"):
        fixpoint.run(p, 3, [y], backend=ReferenceBackend(work_budget=1))
    assert y.tolist() == [0, 1, 2]


# ---- the GPU -----------------------------------------------------------------------------------

MODES = ["cooperative", "graph", "relaunch"]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES + ["auto"])
@pytest.mark.parametrize("n", [1, 255, 257, 5000, 100_000])
def test_every_mode_reaches_the_cpu_fixpoint(mode, n):
    backend = vn.get_backend("cuda")
    indptr, indices = path(n)
    rng = np.random.default_rng(n)
    start = rng.permutation(n).astype(np.uint32)
    if n <= 5000:  # the CPU loop itself is the oracle where it is quick enough
        want, r = cpu_labels(n, start, indptr, indices, max_rounds=10 * n + 10)
        assert r.converged
    else:  # the fixpoint of min-propagation over a connected path: the smallest start label everywhere
        want = np.full(n, start.min(), np.uint32)
    labels = backend.upload(start)
    r = fixpoint.run(relax, n, [labels, backend.upload(indptr), backend.upload(indices)], mode=mode,
                     max_rounds=10 * n + 10)
    assert r.converged and r.rounds >= 1 and r.device_ns > 0
    assert r.mode == (mode if mode != "auto" else r.mode) and r.mode in MODES
    assert np.array_equal(backend.download(labels), want)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_gpu_max_rounds_stops_and_says_so(mode):
    backend = vn.get_backend("cuda")
    n = 20_000
    indptr, indices = path(n)
    labels = backend.upload(np.arange(n, dtype=np.uint32)[::-1].copy())
    r = fixpoint.run(relax, n, [labels, backend.upload(indptr), backend.upload(indices)], mode=mode, max_rounds=3)
    assert (r.rounds, r.converged) == (3, False)


@pytest.mark.gpu
def test_auto_runs_one_round_as_a_plain_launch_and_reuses_control_blocks():
    backend = vn.get_backend("cuda")
    n = 100_000  # the smallest label starts at the far end: far more rounds than 20 to arrive
    indptr, indices = path(n)
    args = [backend.upload(np.arange(n, dtype=np.uint32)[::-1].copy()), backend.upload(indptr), backend.upload(indices)]
    for k in range(20):  # control blocks come back zeroed where read: each run sees only its own round
        r = fixpoint.run(relax, n, args, max_rounds=1)
        assert (r.mode, r.rounds, r.converged) == ("relaunch", 1, False)
    assert fixpoint.run(relax, n, args, max_rounds=2).mode in ("cooperative", "graph")


@pytest.mark.gpu
def test_auto_falls_back_to_graph_then_relaunch_where_a_mode_cannot_run(monkeypatch):
    """"auto" moves on when no cooperative block fits, then when no while-loop graph can be built,
    and reaches the same fixpoint; a mode named explicitly still says why it cannot run."""
    from vyre_numba.gpu import cudagraph

    be = vn.get_backend("cuda")
    n = 5000
    indptr, indices = path(n)
    start = np.arange(n, dtype=np.uint32)[::-1].copy()
    want, _ = cpu_labels(n, start, indptr, indices)
    ip, ix = cuda.to_device(indptr), cuda.to_device(indices)

    def solve(mode="auto"):
        labels = cuda.to_device(start)
        r = fixpoint.run(relax, n, [labels, ip, ix], mode=mode)
        assert r.converged and labels.copy_to_host().tolist() == want.tolist()
        return r.mode

    monkeypatch.setattr(type(be), "blocks_per_sm", lambda self, k, block, smem=0: 0)
    assert solve() == "graph"
    with pytest.raises(UnsupportedError, match="smaller block"):
        solve("cooperative")

    def no_graph(*a, **k):
        raise UnsupportedError("no conditional nodes here. Fix: use mode='relaunch'.")
    monkeypatch.setattr(cudagraph, "WhileGraph", no_graph)
    assert solve() == "relaunch"
    with pytest.raises(UnsupportedError, match="conditional"):
        solve("graph")
    monkeypatch.undo()
    assert solve() == "cooperative"


@pytest.mark.gpu
def test_gpu_progress_bar_runs_in_chunks_with_the_same_result():
    backend = vn.get_backend("cuda")
    n = 3000
    indptr, indices = path(n)
    start = np.arange(n, dtype=np.uint32)[::-1].copy()
    for mode in ("cooperative", "graph"):
        labels = backend.upload(start)
        r = fixpoint.run(relax, n, [labels, backend.upload(indptr), backend.upload(indices)], mode=mode,
                         max_rounds=100_000, progress=True)
        assert r.converged and backend.download(labels).tolist() == [0] * n


def stalls_block_zero(i, flag):
    """Item 0 sleeps ~1.5 s in its first round, so block 0 reaches the grid barrier late."""
    if i == 0 and flag[0] == 0:
        flag[0] = 1
        for _ in range(1500):
            cuda.nanosleep(1_000_000)
    return 1


@pytest.mark.gpu
def test_stuck_grid_barrier_reports_a_timeout_instead_of_hanging():
    backend = vn.get_backend("cuda")
    flag = backend.upload(np.zeros(1, np.uint32))
    with pytest.raises(BarrierTimeoutError, match="Fix:"):
        fixpoint.run(stalls_block_zero, 1 << 16, [flag], mode="cooperative", timeout_s=0.2, max_rounds=5)
    # the context is healthy afterwards
    assert backend.download(backend.upload(np.arange(3, dtype=np.uint32))).tolist() == [0, 1, 2]


@pytest.mark.gpu
def test_gpu_refuses_host_arrays_and_bad_scalars():
    with pytest.raises(DispatchError, match="NumPy array.*Fix:"):
        fixpoint.run(relax, 3, [np.zeros(3, np.uint32), *path(3)], backend="cuda")
    with pytest.raises(DispatchError, match="Fix:"):
        fixpoint.run(relax, 3, [object()], backend="cuda")


def test_cpu_refuses_device_looking_arrays():
    class Fake:
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<u4", "data": (0, False), "version": 3}

    with pytest.raises(DispatchError, match="device array.*Fix:"):
        fixpoint.run(relax, 3, [Fake(), *path(3)], backend="reference")


def test_unsupported_mode_on_cpu_is_refused():
    with pytest.raises(UnsupportedError, match="Fix:"):
        fixpoint.run(relax, 3, [np.zeros(3, np.uint32), *path(3)], backend="reference", mode="graph")


@pytest.mark.parametrize("sm", [80, 90])
def test_fixpoint_templates_link_with_a_numba_step(sm):
    """CI has no GPU: the fixpoint module (every entry), the grid barrier and a Numba step link
    into a cubin for sm_80 and sm_90 with nvJitLink."""
    from vyre_numba.fixpoint import device

    from offline_link import InterfaceArray as DeviceArray
    from offline_link import OfflineLinker

    for step, args in ((relax, [DeviceArray(np.uint32), DeviceArray(np.int64), DeviceArray(np.int64)]),
                       (atomic_hook, [DeviceArray(np.int64)]),
                       (lambda i, a, s, f: a[i] > s + f, [DeviceArray(np.float32), np.int32(3), 2.5]),
                       (lambda i: 0, []), (_up_bool, [DeviceArray(np.int64)])):
        linker = OfflineLinker(sm)
        device._module(linker, step, *device._arg_kinds(args))
        assert linker.cubin[:4] == b"\x7fELF"


class _Held:
    """Something large a step references (a function attribute, as decorators add)."""


def _raise_to(k: int):
    """A new step function per call, closing over k: raises every item to k."""
    def step(i, a):
        if a[i] < k:
            a[i] = k
            return 1
        return 0
    step.held = _Held()
    return step


def test_cpu_steps_are_compiled_into_a_bounded_cache_that_lets_old_ones_go(monkeypatch):
    """Regression: runner._CPU_ROUNDS was a plain dict keeping every step function ever run (a
    lambda made per call, a re-run notebook cell), its Numba compilation and all it references,
    forever. It is an LRU cache keyed by the step's code and the values it reads, so a function
    collected and a new one made at its id (here ids are reused: each step is dropped before the
    next is made) finds the old one's compilation only where it would compute the same."""
    import gc
    import weakref

    from vyre_numba.fixpoint import runner
    from vyre_numba.lru import LRUCache

    assert isinstance(runner._CPU_ROUNDS, LRUCache) and runner._CPU_ROUNDS.capacity == runner.STEP_CACHE <= 64
    monkeypatch.setattr(runner, "_CPU_ROUNDS", LRUCache(3))
    held = []
    for k in range(1, 9):
        step = _raise_to(k)
        held.append(weakref.ref(step.held))
        a = np.zeros(5, np.int64)
        assert fixpoint.run(step, 5, [a]) == fixpoint.FixpointResult(2, True, "relaunch")
        assert a.tolist() == [k] * 5 and len(runner._CPU_ROUNDS) <= 3 and runner.predicate_key(step) in runner._CPU_ROUNDS
        fixpoint.for_each(step, 5, [b := np.full(5, -1, np.int64)])
        assert b.tolist() == [k] * 5 and runner._CPU_ROUNDS.stats()["hits"] == k  # compiled once per step
        del step
    gc.collect()
    assert sum(r() is not None for r in held) <= 3  # only what the cache still holds is alive



DIVIDES_UNDER_DEBUGINFO = """
import numpy as np
from offline_link import InterfaceArray as DeviceArray
from vyre_numba.fixpoint import device

def step(i, a):
    a[i] = a[i] // (i - 1)
    return 0

kinds, _ = device._arg_kinds([DeviceArray(np.int64)])
ptx, _ = device._step_ptx(step, kinds, (8, 0))
assert "div" in ptx, ptx[:400]
print("ok")
"""


def test_a_gpu_step_divides_as_numpy_does_under_numba_cuda_debuginfo():
    """Regression (a review): the GPU's steps took numba-cuda's default error model, which
    NUMBA_CUDA_DEBUGINFO=1 makes Python's: a step that divides did not compile (and would not have
    divided as the CPU's steps do). Compiled to PTX, which needs no GPU."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", DIVIDES_UNDER_DEBUGINFO], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, NUMBA_CUDA_DEBUGINFO="1"), cwd=os.path.dirname(__file__))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_gpu_step_ptx_is_kept_in_a_bounded_cache(monkeypatch):
    """Regression: device._STEPS (the GPU's compiled steps, PTX by step function) was a plain dict
    keeping every step function forever (runs on the CPU: Numba compiles PTX without a GPU)."""
    from offline_link import InterfaceArray as DeviceArray
    from vyre_numba.fixpoint import device, runner
    from vyre_numba.lru import LRUCache

    assert isinstance(device._STEPS, LRUCache) and device._STEPS.capacity == runner.STEP_CACHE
    monkeypatch.setattr(device, "_STEPS", LRUCache(2))
    kinds, _ = device._arg_kinds([DeviceArray(np.int64)])
    for k in (1234567, 1234568, 1234569):
        step = _raise_to(k)
        ptx = device._step_ptx(step, kinds, (8, 0))
        assert str(k) in ptx[0] and device._step_ptx(step, kinds, (8, 0)) is ptx and len(device._STEPS) <= 2
        del step


def _below(i, a, limit):
    if a[i] < limit:
        a[i] += 1
        return 1
    return 0


def test_python_ints_past_int64_are_taken_as_numba_reads_them_whatever_ran_before():
    a = np.zeros(3, np.uint64)
    fixpoint.run(_below, 3, [a, 2])  # compiled for an int64 limit: Numba then refused 2**63 (OverflowError)
    assert fixpoint.run(_below, 3, [a, 2**63], max_rounds=2).rounds == 2 and a.tolist() == [4, 4, 4]
    for limit in (2**64, -2**63 - 1):
        with pytest.raises(DispatchError, match=r"args\[1\] = .* is past 64 bits.*Fix: ") as e:
            fixpoint.run(_below, 3, [a, limit])
        assert "raised" not in str(e.value) and a.tolist() == [4, 4, 4]


def test_step_scalars_are_typed_for_the_gpu_as_the_cpu_reads_them():
    """The cuda backend's step parameters: an int from 2**63 up is a uint64 (as the CPU's step
    reads it), past 64 bits or a long double is refused with a fix (they wrapped silently to
    what fits, and a long double reached the user as Numba's error)."""
    from numba import types

    from vyre_numba.fixpoint.device import _arg_kinds

    assert _arg_kinds([5, -2**63, 2**63, 2**64 - 1])[0] == [types.int64, types.int64, types.uint64, types.uint64]
    small = [np.int8(-3), np.uint8(250), np.int16(-300), np.uint16(60000)]
    assert _arg_kinds(small) == ([types.int8, types.uint8, types.int16, types.uint16], [("b32", x) for x in small])
    for bad, said in ((2**64 + 5, "past 64 bits.*Fix: "), (-2**63 - 1, "past 64 bits.*Fix: "), (2**70, "past 64 bits.*Fix: "),
                      (np.longdouble(1), "scalar.*Fix: pass a float32"), (np.float16(1), "scalar.*Fix: pass a float32")):
        with pytest.raises(DispatchError, match=f"args\\[0\\].*{said}"):
            _arg_kinds([bad])


@pytest.mark.gpu
def test_gpu_scalars_from_2_63_up_reach_the_step_as_on_the_cpu():
    from numba import cuda

    for limit in (2**63 + 2, 2**64 - 1):
        host = np.full(3, limit - 2, np.uint64)
        assert fixpoint.run(_below, 3, [host, limit], max_rounds=5, backend="reference").converged
        a = cuda.to_device(np.full(3, limit - 2, np.uint64))
        assert fixpoint.run(_below, 3, [a, limit], max_rounds=5, backend="cuda").converged
        assert a.copy_to_host().tolist() == host.tolist() == [limit] * 3
    with pytest.raises(DispatchError, match="past 64 bits.*Fix:"):
        fixpoint.run(_below, 3, [a, 2**64 + 5], backend="cuda")
    assert a.copy_to_host().tolist() == [2**64 - 1] * 3


def _add_small(i, a, step, zero):
    a[()] = a[()] + step if a[()] < 100 else a[()]  # 0-d: a[()] on the CPU and the GPU alike
    return 1 if a[()] < 100 else zero


@pytest.mark.gpu
def test_gpu_takes_0d_arrays_and_8_and_16_bit_scalars_as_the_cpu_does():
    from numba import cuda

    for step, zero in ((np.int8(-3), np.uint8(0)), (np.uint16(7), np.int16(0)), (np.uint8(250), np.int8(0))):
        host = np.zeros((), np.int64)
        cpu = fixpoint.run(_add_small, 1, [host, step, zero], max_rounds=200, backend="reference")
        a = cuda.to_device(np.zeros((), np.int64))
        gpu = fixpoint.run(_add_small, 1, [a, step, zero], max_rounds=200, backend="cuda")
        assert a.copy_to_host()[()] == host[()] and (gpu.rounds, gpu.converged) == (cpu.rounds, cpu.converged)
    assert host[()] == 250 and cpu.converged  # uint8 250 reached the step whole (not -6)


def _links(i, parent, u, v):
    return unionfind.link(parent, u[i], v[i])


def _imports(i, a):
    import math

    a[i] = math.floor(a[i])
    return 0


@pytest.mark.parametrize("step", [atomic_hook, _links])
def test_a_cpu_step_calling_cuda_device_code_is_told_so_not_that_it_raised(step):
    args = [np.arange(4, dtype=np.int32)] + ([np.array([0, 2]), np.array([1, 3])] if step is _links else [])
    with pytest.raises(DispatchError, match=r"CUDA device code.*Fix: run it on the cuda backend") as e:
        fixpoint.run(step, 2, args, backend="reference")
    assert "raised" not in str(e.value) and args[0].tolist() == [0, 1, 2, 3]


def test_a_step_that_does_not_compile_is_told_numbas_reason_not_its_pipeline_stage():
    with pytest.raises(DispatchError, match=r"does not compile with Numba \(Unknown attribute 'no_such_attribute'"):
        fixpoint.run(lambda i, a: a.no_such_attribute, 3, [np.zeros(3)], backend="reference")
    with pytest.raises(DispatchError, match=r"does not compile with Numba \(Use of unsupported opcode") as e:
        fixpoint.run(_imports, 3, [np.zeros(3)], backend="reference")  # it was "the step raised ..."
    assert "raised" not in str(e.value)
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no chain of Numba's frames under it

    def writes_text(i, a):
        a[i] = "text"
    with pytest.raises(DispatchError, match=r"\(No implementation of function .*setitem.* found for signature: "
                                            r">>> setitem\(array\(float64"):
        fixpoint.run(writes_text, 3, [np.zeros(3)], backend="reference")


class _Settings:
    limit = 3


_SETTINGS = _Settings()


def _reads_an_object(i, a):
    if a[i] < _SETTINGS.limit:
        a[i] += 1
        return 1
    return 0


def test_a_step_reading_an_objects_attribute_is_told_to_read_it_into_a_number_first():
    """A notebook's `cfg.t` in a step: Numba has no type for the object; the message says what to do."""
    with pytest.raises(DispatchError, match=r"Untyped global name '_SETTINGS'.*read what it needs from _SETTINGS into "
                                            r"a number or an array first \(t = _SETTINGS.t\)"):
        fixpoint.run(_reads_an_object, 3, [np.zeros(3, np.int64)])


class _NumbaLike:
    """A device array as numba's DeviceNDArray shows itself: a NumPy dtype, and an interface with no descr."""

    def __init__(self, dtype, n: int = 3):
        self.dtype = np.dtype(dtype)
        self.__cuda_array_interface__ = {"typestr": self.dtype.str, "shape": (n,), "strides": None,
                                         "data": (4096, False), "version": 3}


def test_record_device_arrays_without_descr_or_with_padding_are_typed_as_their_records():
    """Regression (the session's review): numba's own device arrays (what upload gives) name a record
    only as |V8 and were refused; an aligned record's descr has padding entries, read as a field."""
    from offline_link import InterfaceArray as DeviceArray
    from vyre_numba.fixpoint import device

    rec = np.dtype([("x", "<i4"), ("y", "<f4")])
    aligned = np.dtype([("x", "<i4"), ("y", "<f8")], align=True)
    for a, dt in ((_NumbaLike(rec), rec), (DeviceArray(aligned), aligned)):
        kinds, params = device._arg_kinds([a])
        got = numba.np.numpy_support.as_dtype(kinds[0].dtype)
        assert got.itemsize == dt.itemsize and params[3] == ("b64", dt.itemsize)
        assert {k: (v[0], v[1]) for k, v in got.fields.items()} == {k: (v[0], v[1]) for k, v in dt.fields.items()}
        device._step_ptx(lambda i, a: a[i].x > a[i].y, kinds, (9, 0))


def _reads_badly(i, a):
    return a.no_such_attribute


def test_a_step_that_only_reads_a_read_only_array_is_not_blamed_for_a_write():
    """Regression (the session's review): any compile error naming a read-only array's type was
    reported as "is read-only, but the step writes it"."""
    from offline_link import InterfaceArray as DeviceArray
    from vyre_numba.fixpoint import device

    frozen = np.zeros(3, np.int64)
    frozen.setflags(write=False)
    with pytest.raises(DispatchError, match="does not compile with Numba") as e:
        fixpoint.run(_reads_badly, 3, [frozen])
    assert "read-only" not in str(e.value)
    with pytest.raises(DispatchError, match="does not compile for the GPU") as e:
        device._step_ptx(_reads_badly, device._arg_kinds([DeviceArray("<i8", 3, readonly=True)])[0], (9, 0))
    assert "read-only" not in str(e.value)


def _with_a_dict_default(i, x, k={}):  # noqa: B006 (Numba cannot type the default: that is the test)
    return 0


def _reading_a_closed_over_list():
    seen = [1]

    def step(i, x):
        return 1 if seen is None else 0
    return step


def test_a_step_numba_cannot_type_is_told_it_does_not_compile_not_that_it_raised():
    for step, reason in ((_with_a_dict_default, r"Cannot determine Numba type of <class 'dict'>"),
                         (_reading_a_closed_over_list(), r"'seen' \(List\(int64, True\)\), read from the function's "
                                                         r"closure or globals, is no constant")):
        x = np.zeros(2)
        with pytest.raises(DispatchError, match=rf"does not compile with Numba \({reason}.*Fix:") as e:
            fixpoint.run(step, 2, [x], backend="reference")
        assert "object at 0x" not in str(e.value) and "raised" not in str(e.value)
