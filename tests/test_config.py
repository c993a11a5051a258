"""DispatchConfig takes exactly what it documents (ints, NumPy ints, tuples and lists of 1 to 3 of
them, "auto", real bools, non-blank labels), stores plain ints and bools, and refuses everything
else with a DispatchError that ends with `Fix: ...`, never another exception."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_fix
from vyre_numba import DispatchConfig
from vyre_numba.config import MAX_AXIS
from vyre_numba.errors import DispatchError

BAD = [
    # grid: axes may be 0 but never negative; never bool, float, str or another container
    ("grid", -1), ("grid", (1, -2)), ("grid", [4, np.int64(-1)]), ("grid", True), ("grid", False),
    ("grid", (True, 1)), ("grid", (1, np.bool_(True))), ("grid", np.bool_(False)), ("grid", 1.0),
    ("grid", (1.5,)), ("grid", np.float32(2)), ("grid", "8"), ("grid", b"8"), ("grid", ()), ("grid", []),
    ("grid", (1, 2, 3, 4)), ("grid", [1, 2, 3, 4]), ("grid", (None,)), ("grid", ((1, 2),)), ("grid", [[1]]),
    ("grid", {1, 2}), ("grid", range(3)), ("grid", np.array([[8, 8]])), ("grid", np.array([8.0])), ("grid", 2**32), ("grid", (1, 2**64)),
    ("grid", object()), ("grid", 1 + 2j),
    # workgroup: axes >= 1; "auto" is the only string
    ("workgroup", 0), ("workgroup", (8, 0)), ("workgroup", (np.uint8(0),)), ("workgroup", -1),
    ("workgroup", True), ("workgroup", (True,)), ("workgroup", "fast"), ("workgroup", "AUTO"), ("workgroup", ""),
    ("workgroup", 64.0), ("workgroup", (1, 2, 3, 4)), ("workgroup", ()), ("workgroup", [None]),
    ("workgroup", 2**40),
    # fixpoint_iterations: an int >= 1
    ("fixpoint_iterations", 0), ("fixpoint_iterations", -3), ("fixpoint_iterations", True),
    ("fixpoint_iterations", False), ("fixpoint_iterations", 2.0), ("fixpoint_iterations", "2"),
    ("fixpoint_iterations", None), ("fixpoint_iterations", np.int32(0)), ("fixpoint_iterations", np.bool_(True)),
    ("fixpoint_iterations", (1,)),
    # cooperative: a real bool, never a truthy stand-in
    ("cooperative", "no"), ("cooperative", "yes"), ("cooperative", "True"), ("cooperative", 1), ("cooperative", 0),
    ("cooperative", None), ("cooperative", np.int64(1)), ("cooperative", 1.0), ("cooperative", [True]),
    # label: None or a non-blank str
    ("label", ""), ("label", "   "), ("label", 5), ("label", b"x"), ("label", ["a"]), ("label", True),
    ("label", "a\nb"), ("label", "tab\there"), ("label", "\x1b[31mred"),  # a red-team: counter names with control characters
]


@pytest.mark.parametrize("field, value", BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_bad_values_are_dispatch_errors_with_fix(field, value):
    with pytest.raises(DispatchError) as info:
        DispatchConfig(**{field: value})
    msg = str(info.value)
    assert msg.startswith(f"{field}="), msg
    assert_fix(msg)


GOOD = [
    ("grid", None, None), ("grid", 0, (0, 1, 1)), ("grid", 5, (5, 1, 1)), ("grid", np.int64(5), (5, 1, 1)),
    ("grid", np.uint32(7), (7, 1, 1)), ("grid", (1,), (1, 1, 1)), ("grid", [2, 3], (2, 3, 1)),
    ("grid", (np.int16(2), 3, np.uint64(4)), (2, 3, 4)), ("grid", (0, 0, 0), (0, 0, 0)),
    ("grid", (MAX_AXIS,), (MAX_AXIS, 1, 1)),
    ("workgroup", None, None), ("workgroup", "auto", "auto"), ("workgroup", 64, (64, 1, 1)),
    ("workgroup", np.int32(64), (64, 1, 1)), ("workgroup", [8, 8], (8, 8, 1)), ("workgroup", (4, 4, 4), (4, 4, 4)),
    ("workgroup", (np.uint8(8), 8), (8, 8, 1)), ("workgroup", [np.int64(2), np.int8(3), np.uint16(4)], (2, 3, 4)),
    ("fixpoint_iterations", 1, 1), ("fixpoint_iterations", np.int64(5), 5), ("fixpoint_iterations", 10**6, 10**6),
    ("cooperative", True, True), ("cooperative", False, False), ("cooperative", np.bool_(True), True),
    ("label", None, None), ("label", "x", "x"), ("label", "step 1", "step 1"),
    ("checked", np.str_("raise"), "raise"), ("checked", np.True_, "warn"), ("checked", False, False),  # a red-team
]


@pytest.mark.parametrize("field, value, stored", GOOD, ids=[f"{f}={v!r}" for f, v, _ in GOOD])
def test_good_values_are_stored_as_plain_python_values(field, value, stored):
    config = DispatchConfig(**{field: value})
    got = getattr(config, field)
    assert got == stored
    assert type(got) is type(stored)
    if isinstance(got, tuple):
        assert all(type(v) is int for v in got)
    assert dataclasses.replace(config) == config
    hash(config)


def test_defaults():
    c = DispatchConfig()
    assert (c.grid, c.workgroup, c.fixpoint_iterations, c.cooperative, c.label) == (None, None, 1, False, None)
    assert c.key() == (None, False)


def test_numpy_workgroup_keys_equal_plain_ones():
    assert DispatchConfig(workgroup=(np.int64(8), np.int32(8))).key() == DispatchConfig(workgroup=(8, 8)).key()
    assert DispatchConfig(cooperative=np.bool_(True)).key() == DispatchConfig(cooperative=True).key()


def test_fields_are_given_by_keyword():
    """An API review: DispatchConfig(None, 64, 1, True) read as well as any call of four unnamed
    values; fields are keyword-only, and positional ones an ArgumentError naming them."""
    from vyre_numba.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"Fix: .*call it as DispatchConfig\(\*, grid="):
        DispatchConfig(None, None, 1, "no")
    with pytest.raises(DispatchError):
        DispatchConfig(cooperative="no")


leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                 st.text(max_size=5), st.binary(max_size=3), st.integers(-2**63, 2**63 - 1).map(np.int64),
                 st.integers(0, 255).map(np.uint8), st.booleans().map(np.bool_), st.just("auto"))
anything = st.one_of(
    st.from_type(object), leaf,
    st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                                               st.tuples(inner, inner, inner)), max_leaves=8),
    st.lists(st.integers(-3, 2**33), min_size=0, max_size=4).map(tuple),
)


def check_invariants(c: DispatchConfig) -> None:
    assert c.grid is None or (len(c.grid) == 3 and all(type(v) is int and 0 <= v <= MAX_AXIS for v in c.grid))
    assert c.workgroup is None or c.workgroup == "auto" or (
        len(c.workgroup) == 3 and all(type(v) is int and 1 <= v <= MAX_AXIS for v in c.workgroup))
    assert type(c.fixpoint_iterations) is int and c.fixpoint_iterations >= 1
    assert type(c.cooperative) is bool
    assert c.label is None or (type(c.label) is str and c.label.strip())


@pytest.mark.parametrize("field", ["grid", "workgroup", "fixpoint_iterations", "cooperative", "label"])
@settings(max_examples=300, deadline=None)
@given(value=anything)
def test_arbitrary_values_give_a_valid_config_or_a_dispatch_error(field, value):
    try:
        config = DispatchConfig(**{field: value})
    except DispatchError as e:
        assert_fix(str(e))
        return
    check_invariants(config)


@settings(max_examples=300, deadline=None)
@given(grid=anything, workgroup=anything, iterations=anything, cooperative=anything, label=anything)
def test_arbitrary_values_in_every_field_at_once(grid, workgroup, iterations, cooperative, label):
    try:
        config = DispatchConfig(grid=grid, workgroup=workgroup, fixpoint_iterations=iterations,
                                cooperative=cooperative, label=label)
    except DispatchError as e:
        assert_fix(str(e))
        return
    check_invariants(config)
