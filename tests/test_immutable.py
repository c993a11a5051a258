"""Immutable values (DispatchConfig, IR nodes and programs, results): a change refused with
ImmutableError (a VyreError and dataclasses' FrozenInstanceError) saying how to make a changed copy,
and that copy works."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import pytest

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.errors import ImmutableError
from vyre_numba.gpu.launch import LaunchShape


def _public_classes(kind, defined: bool = False) -> set[type]:
    """The classes in any module's __all__ (`defined`: or defined in it under a public name, as
    results such as Fusion are, in modules without an __all__) for which `kind(cls)` holds."""
    found = set()
    names = [m.name for m in pkgutil.walk_packages(vn.__path__, "vyre_numba.")
             if not m.name.endswith(("__main__", ".cli"))]
    for name in ["vyre_numba"] + names:
        try:
            mod = importlib.import_module(name)
        except vn.VyreError:  # a module that needs what this machine lacks (a GPU, Dask)
            continue
        own = [a for a, o in vars(mod).items() if defined and not a.startswith("_") and isinstance(o, type)
               and getattr(o, "__module__", "") == name]
        for attr in [*getattr(mod, "__all__", ()), *own]:
            obj = getattr(mod, attr, None)
            if isinstance(obj, type) and kind(obj):
                found.add(obj)
    return found


def _public_frozen_classes() -> set[type]:
    return _public_classes(lambda c: dataclasses.is_dataclass(c) and c.__dataclass_params__.frozen, defined=True)


def test_every_public_frozen_dataclass_refuses_changes_with_a_fix():
    classes = _public_frozen_classes()
    from vyre_numba.backend import Fusion
    from vyre_numba.checked import CheckReport
    from vyre_numba.ptx.devices import DeviceReport

    # the last three come from modules without an __all__ (they took a change with a raw FrozenInstanceError)
    assert {DispatchConfig, ir.Program, ir.BufferDecl, ir.Var, ir.Let, Fusion, CheckReport, DeviceReport} <= classes
    lacking = [c.__qualname__ for c in classes if not getattr(c.__setattr__, "_vyre_immutable", False)
               or not getattr(c.__delattr__, "_vyre_immutable", False)]
    assert not lacking, lacking


def test_every_public_result_that_holds_arrays_or_dicts_compares_and_hashes_without_a_raw_error():
    """Regression (a red-team): ClosureResult == ClosureResult raised NumPy's ambiguous-truth
    ValueError and hash() of it and of RebuildStats a bare TypeError. A frozen dataclass compared
    by value hashes and compares its fields, which fails for arrays, lists and dicts: such a class
    is compared by identity (eq=False) or writes its own __eq__."""
    import re

    held = re.compile(r"\b(list|dict|set|ndarray)\b")
    bad = []
    for cls in _public_frozen_classes():
        if not cls.__dataclass_params__.eq:
            continue
        own_eq = getattr(cls.__dict__.get("__eq__"), "__code__", None)
        if own_eq is not None and own_eq.co_filename != "<string>":  # written by hand, not by dataclasses
            continue  # (a hand-written __hash__ alone left == comparing arrays: Fusion's, a red-team)
        if any(held.search(str(f.type)) for f in dataclasses.fields(cls) if f.compare):
            bad.append(cls.__qualname__)
    assert not bad, bad
    from vyre_numba.egraph import EGraph, congruence_closure

    make = lambda: EGraph.from_arrays([0, 1, 2], [0, 0, 1], [0, 0, 0, 1], [0], backend="reference")  # noqa: E731
    r1, r2 = congruence_closure(make()), congruence_closure(make())
    assert r1 == r1 and r1 != r2 and r1 in [r1] and len({r1, r2}) == 2
    s = make().rebuild()
    assert s == s and hash(s) == hash(s)


def _values():
    prog = ir.Program([ir.BufferDecl.read("x", 0, "u32")], 64, [ir.let("i", ir.gid(0))], name="p")
    return [(DispatchConfig(grid=2), "grid", (3, 1, 1)), (ir.BufferDecl.read("x", 0, "u32"), "name", "y"),
            (prog, "name", "q"), (ir.var("i"), "name", "j"), (ir.let("i", ir.gid(0)), "name", "k"),
            (ir.var("i") + 1, "op", "sub"), (LaunchShape((1, 1, 1), (32, 1, 1)), "grid", (2, 1, 1))]


@pytest.mark.parametrize("value, field, new", _values(), ids=lambda v: type(v).__name__ if not isinstance(v, (str, int, tuple)) else "")
def test_setting_or_deleting_a_field_says_how_to_make_a_changed_copy_and_that_copy_works(value, field, new):
    before = getattr(value, field)
    with pytest.raises(ImmutableError, match=rf"{type(value).__name__} is immutable: its field '{field}'.*Fix: .*"
                                             rf"dataclasses.replace\(x, {field}=\.\.\.\)") as e:
        setattr(value, field, new)
    assert isinstance(e.value, dataclasses.FrozenInstanceError) and isinstance(e.value, AttributeError)
    with pytest.raises(ImmutableError, match="Fix:"):
        delattr(value, field)
    assert getattr(value, field) == before
    changed = dataclasses.replace(value, **{field: new})
    assert getattr(changed, field) == new and type(changed) is type(value)


def test_a_new_attribute_is_refused_naming_the_nearest_field():
    config = DispatchConfig()
    with pytest.raises(ImmutableError, match=r"'gird' is none of its fields .*did you mean 'grid'.*Fix:"):
        config.gird = 4
    assert not hasattr(config, "gird")


def test_a_step_refuses_a_change_and_says_how_to_make_a_changed_one():
    from vyre_numba.backend import Step

    step = Step(ir.Program([], 1, []), [])
    with pytest.raises(ImmutableError, match=r"Step is immutable: 'config' cannot be set. Fix: .*_replace\(config="):
        step.config = DispatchConfig(grid=2)
    with pytest.raises(ImmutableError, match="none of .*Fix:"):
        step.label = "x"
    assert step.config is None and step._replace(config=DispatchConfig(grid=2)).config.grid == (2, 1, 1)


def _public_named_tuples() -> set[type]:
    return _public_classes(lambda c: issubclass(c, tuple) and hasattr(c, "_fields"))


def test_public_named_tuples_refuse_bad_calls_changes_and_unknown_fields_with_a_fix():
    """Named tuples are made by __new__, which the argument checks wrap as they wrap __init__: a
    call that does not fit is an ArgumentError, a change an ImmutableError, an unknown field given
    to _replace an ArgumentError (they were raw TypeError, AttributeError and ValueError)."""
    import copy
    import pickle

    import numpy as np

    from vyre_numba.backend import Step
    from vyre_numba.errors import ArgumentError
    from vyre_numba.graph import CSR

    classes = _public_named_tuples() | {Step}
    assert CSR in classes
    for cls in classes:
        with pytest.raises(ArgumentError, match=rf"{cls.__name__}\(\): .*Fix: call it as {cls.__name__}\("):
            cls()
        with pytest.raises(ArgumentError, match="Fix:"):
            cls(*range(len(cls._fields) + 1))
        value = cls(*range(len(cls._fields)))
        with pytest.raises(ImmutableError, match="Fix:"):
            setattr(value, cls._fields[0], 5)
        with pytest.raises(ImmutableError, match="Fix:"):
            delattr(value, cls._fields[0])
        with pytest.raises(ArgumentError, match=r"_replace\(\): 'nope' is none of its fields.*Fix:"):
            value._replace(nope=1)
        assert value._replace(**{cls._fields[0]: 9})[0] == 9 and tuple(value) == tuple(range(len(cls._fields)))
        copies = [pickle.loads(pickle.dumps(value)), copy.deepcopy(value), cls._make(value)]
        assert all(type(c) is cls and tuple(c) == tuple(value) for c in copies)  # (a Step compares by identity)
        assert cls in (Step, CSR) or all(c == value for c in copies)  # (those two compare by identity)
    with pytest.raises(ArgumentError, match="did you mean `indices`"):
        CSR(indptr=np.zeros(1, np.int64), indces=np.zeros(0, np.int64))


def test_phase_times_that_are_not_a_dict_are_refused_with_a_fix():
    from vyre_numba.egraph import RebuildStats
    from vyre_numba.errors import DispatchError

    with pytest.raises(DispatchError, match="not a dict of names to nanoseconds. Fix:"):
        RebuildStats(1, 1, 1, True, 1, 1.0, phase_ns=5)
    assert RebuildStats(1, 1, 1, True, 1, 1.0, phase_ns={"a": 5}).phase_ns == {"a": 5}


def _read_only_properties(cls: type) -> list[str]:
    return sorted({k for c in cls.__mro__ for k, v in vars(c).items() if isinstance(v, property) and v.fset is None})


def test_every_public_read_only_property_refuses_assignment_with_a_fix():
    import enum

    classes = _public_classes(lambda c: not issubclass(c, (enum.Enum, tuple, int, float, str))
                              and not dataclasses.is_dataclass(c) and _read_only_properties(c))
    assert {"EGraph", "WorkQueue", "QueueModel"} <= {c.__name__ for c in classes}
    for cls in classes:
        if inspect.isabstract(cls):  # a concrete class of its own, which inherits what it refuses
            cls = type(cls.__name__, (cls,), {m: lambda *a: None for m in cls.__abstractmethods__})
        bare = object.__new__(cls)  # the refusal needs only the class: no device, no state
        for name in _read_only_properties(cls):
            if name.startswith("_"):
                continue
            with pytest.raises(ImmutableError, match=rf"{name}.*Fix: "):
                setattr(bare, name, 1)
            with pytest.raises(ImmutableError, match=rf"{name}.*Fix: "):
                delattr(bare, name)


def test_an_egraph_and_a_queue_keep_what_they_were_made_with():
    import numpy as np

    from vyre_numba.egraph import EGraph
    from vyre_numba.workqueue import QueueModel

    g = EGraph.from_arrays([0, 1], [0, 0], [0, 0, 0], [], backend="reference")
    assert g.term_classes is None and g.backend == "reference"
    for name in ("backend", "ops", "n_nodes", "n_classes", "term_classes"):
        with pytest.raises(ImmutableError, match=rf"EGraph\.{name} is read-only.*Fix: change the e-graph through"):
            setattr(g, name, "cuda")
    assert g.backend == "reference" and g.n_nodes == 2
    assert EGraph.from_terms([("f", "a"), "a"], backend="reference").term_classes.tolist() == [1, 0]
    q = QueueModel(4, np.int32)
    with pytest.raises(ImmutableError, match=r"QueueModel\.capacity.*Fix: .*QueueModel\(capacity, dtype\)"):
        q.capacity = 5
    assert q.capacity == 4


def test_a_setting_misspelt_by_a_letter_is_refused_with_the_name_meant():
    """Regression (a red-team): `queue.capcity = 8` and `backend.memory_budjet = ...` were kept beside
    the real attribute and changed nothing. A new name one letter from a public attribute is now
    refused (naming it); a name of the caller's own, far from every attribute, is still kept."""
    import numpy as np

    from vyre_numba import get_backend
    from vyre_numba.workqueue import QueueModel

    b = get_backend("reference")
    with pytest.raises(ImmutableError, match=r"no attribute 'memory_budjet' to set; did you mean 'memory_budget'\?.*"
                                             r"Fix: set ReferenceBackend\.memory_budget"):
        b.memory_budjet = 1 << 20
    assert not hasattr(b, "memory_budjet")
    b.memory_budget = 1 << 30
    assert b.memory_budget == 1 << 30
    b.memory_budget = None
    q = QueueModel(4, np.int32)
    with pytest.raises(ImmutableError, match=r"did you mean 'capacity'"):
        q.capcity = 8
    q.note = "mine"
    assert q.note == "mine" and q.capacity == 4


def test_a_value_assigned_over_a_method_is_refused_and_a_wrapping_callable_is_kept():
    """Regression (a red-team): `g.bfs = None` or `q.drain = 0` was taken silently, and the calls
    after it (`graph.bfs(g, 0)` among them) raised a bare TypeError far from the mistake. A value
    that is no callable over a public method is refused, as is deleting one; a callable (a spy, a
    mock, pytest's monkeypatch) is kept, and taking it away restores the method."""
    import numpy as np

    from vyre_numba import graph
    from vyre_numba.workqueue import QueueModel

    g = graph.Graph([0, 2, 3, 3], [1, 2, 0])
    for obj, name, value in ((g, "bfs", None), (QueueModel(4, np.int32), "drain", 0),
                             (QueueModel(4, np.int32), "close", None)):
        cls = type(obj).__name__
        with pytest.raises(ImmutableError, match=rf"{cls}\.{name} is a method and cannot be assigned over on a "
                                                 rf"{cls}.*Fix: call {cls}\.{name}\(\.\.\.\) as it is"):
            setattr(obj, name, value)
        with pytest.raises(ImmutableError, match=rf"{cls}\.{name} is a method and cannot be deleted from a {cls}"):
            delattr(obj, name)
        assert name not in vars(obj)
    assert graph.bfs(g, 0).tolist() == [0, 1, 1]
    calls = []
    g.bfs = lambda *a, **k: calls.append(a) or "spied"
    assert graph.bfs(g, 0) == "spied" and calls == [(0,)]
    del g.bfs
    assert graph.bfs(g, 0).tolist() == [0, 1, 1]


def test_a_queue_refuses_a_value_where_its_dtype_goes():
    """Regression (a red-team): NumPy takes any object with a .dtype as that dtype, so
    QueueModel(4, np.int32(7)) (a value where a type was meant) made an int32 queue silently."""
    import numpy as np

    from vyre_numba.errors import DispatchError
    from vyre_numba.workqueue import QueueModel

    for value in (np.int32(7), np.zeros(3), QueueModel(4, np.int32)):
        with pytest.raises(DispatchError, match=r"is a value \(.*\), not a type.*Fix: pass the type itself"):
            QueueModel(4, value)
    assert QueueModel(4, np.dtype([("a", "<i4"), ("b", "<f4")])).dtype.names == ("a", "b")
    assert QueueModel(4, [("a", "<i4")]).dtype.names == ("a",) and QueueModel(4, np.int16).dtype == np.int16


def test_a_backend_refuses_a_value_where_a_buffers_dtype_goes():
    """As a queue does (the same check): empty(3, np.int32(7)) made an int32 buffer silently."""
    import numpy as np

    from vyre_numba import get_backend
    from vyre_numba.errors import DispatchError

    b = get_backend("reference")
    with pytest.raises(DispatchError, match=r"empty\(n=3\): np\.int32\(7\) is a value \(an int32\), not a type.*Fix: "
                                            r"pass the type itself"):
        b.empty(3, np.int32(7))
    assert b.empty(3, np.int32).dtype == np.int32
