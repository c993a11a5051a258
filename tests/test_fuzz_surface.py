"""Bad arguments thrown at every public function and backend method: only VyreErrors may come
out (each ending in `Fix: ...`), never a TypeError, KeyError, ValueError, OverflowError,
MemoryError or RecursionError. Arguments are drawn from junk (None, bools, odd ints, NaN, strings,
bytes, lists, dicts, objects, arrays of every dtype and shape) mixed with valid values, so calls
get past the first check and into the deeper ones."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.errors import VyreError

B = ir.BufferDecl


def _program() -> ir.Program:
    i = ir.var("i")
    return ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) + 1)])],
                      name="fuzz")


PROGRAM = _program()
DTYPES = [np.uint8, np.int16, np.uint32, np.int64, np.float16, np.float32, np.float64, np.bool_, np.complex64]

JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70), st.sampled_from([2**32, 2**40, -2**63, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6), st.binary(max_size=4),
    st.lists(st.one_of(st.integers(-3, 3), st.floats(), st.none()), max_size=4),
    st.tuples(st.integers(-2, 70), st.integers(-2, 70)), st.dictionaries(st.text(max_size=3), st.integers(-2, 5), max_size=2),
    st.builds(object), st.just(float), st.just(np.float32), st.just("f32"), st.just("u32"), st.just("auto"),
    hnp.arrays(st.sampled_from(DTYPES), st.sampled_from([(), (0,), (1,), (5,), (2, 3)])),
    st.just(PROGRAM), st.just(DispatchConfig()), st.just(ir.var("x")), st.just(ir.u32(1)),
    st.just(ir.store("y", 0, 1)), st.just([np.arange(5, dtype=np.uint32)]), st.just({"x": np.zeros(3, np.uint32)}),
)

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def required(fn) -> int:
    """How many positional arguments `fn` cannot do without (calling with fewer is Python's error)."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 0
    return sum(1 for p in sig.parameters.values()
               if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self")


def assert_only_vyre_errors(fn, *args, **kw):
    """Call fn; an exception other than a VyreError (with a Fix) fails the test."""
    try:
        return fn(*args, **kw)
    except VyreError as e:
        text = str(e)
        assert "Fix:" in text and text.rsplit("Fix:", 1)[1].strip(), f"{fn.__name__}: no Fix in {text!r}"
    except Exception as e:  # noqa: BLE001 - the point of the test
        raise AssertionError(f"{getattr(fn, '__qualname__', fn)}{args!r:.300} {kw!r:.200} raised "
                             f"{type(e).__name__}: {e}") from e


IR_BUILDERS = [
    (ir.lit, 2), (ir.u8, 1), (ir.i32, 1), (ir.u64, 1), (ir.f16, 1), (ir.bf16, 1), (ir.f32, 1), (ir.f64, 1),
    (ir.boolean, 1), (ir.var, 1), (ir.load, 2), (ir.buf_len, 1), (ir.gid, 1), (ir.lid, 1), (ir.wgid, 1),
    (ir.num_workgroups, 1), (ir.binary, 3), (ir.unary, 2), (ir.add, 2), (ir.shl, 2), (ir.eq, 2), (ir.neg, 1),
    (ir.sqrt, 1), (ir.select, 3), (ir.cast, 2), (ir.fma, 3), (ir.atomic, 4), (ir.atomic_add, 3),
    (ir.subgroup_ballot, 1), (ir.subgroup_shuffle, 2), (ir.subgroup_add, 1), (ir.let, 2), (ir.assign, 2),
    (ir.store, 3), (ir.if_, 3), (ir.loop, 4), (ir.barrier, 1), (ir.block, 2), (ir.DataType.parse, 1),
    (B.read, 4), (B.read_write, 4), (B.output, 4), (B.uniform, 4), (B.workgroup, 3), (B, 7), (ir.Program, 4),
    (ir.Program.from_json, 1), (ir.Program.from_dict, 1), (ir.validate, 1), (ir.check, 1), (DispatchConfig, 5),
]


@pytest.mark.parametrize("fn,arity", IR_BUILDERS, ids=[getattr(f, "__name__", str(f)) for f, _ in IR_BUILDERS])
@SETTINGS
@given(data=st.data())
def test_ir_builders_raise_only_vyre_errors(fn, arity, data):
    args = [data.draw(JUNK) for _ in range(data.draw(st.integers(min(required(fn), arity), arity)))]
    assert_only_vyre_errors(fn, *args)


def test_operators_on_expressions_raise_only_vyre_errors():
    x = ir.var("x")
    for other in (None, "a", [1], {}, object(), np.arange(3), 1 + 2j, b"x"):
        for op in ("__add__", "__radd__", "__sub__", "__mul__", "__truediv__", "__mod__", "__and__", "__or__",
                   "__xor__", "__lshift__", "__rshift__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
            assert_only_vyre_errors(getattr(x, op), other)
        assert_only_vyre_errors(x.cast, other)
    assert_only_vyre_errors(bool, x)


BACKEND_METHODS = [("dispatch", 3), ("dispatch_async", 3), ("dispatch_timed", 3), ("dispatch_resident", 3),
                   ("upload", 1), ("empty", 2), ("allocate", 3), ("download", 3), ("dispatch_sequence", 2),
                   ("dispatch_repeated", 4), ("record_graph", 3), ("record_sequence", 2)]


@pytest.mark.parametrize("backend_name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("method,arity", BACKEND_METHODS, ids=[m for m, _ in BACKEND_METHODS])
@SETTINGS
@given(data=st.data())
def test_backend_methods_raise_only_vyre_errors(backend_name, method, arity, data):
    backend = vn.get_backend(backend_name)
    fn = getattr(backend, method)
    args = [data.draw(JUNK) for _ in range(data.draw(st.integers(min(required(fn), arity), arity)))]
    kw = {}
    if method.startswith("dispatch") and method not in ("dispatch_sequence", "dispatch_repeated", "dispatch_resident"):
        if data.draw(st.booleans()):
            kw["sizes"] = data.draw(JUNK)
    result = assert_only_vyre_errors(fn, *args, **kw)
    if method == "dispatch_async" and result is not None:
        assert_only_vyre_errors(result.result)
    if method in ("record_graph", "record_sequence") and result is not None:
        assert_only_vyre_errors(result.replay, data.draw(JUNK))
        result.close()


def test_get_backend_raises_only_vyre_errors():
    for name in (None, 5, "", "nope", b"cuda", ["reference"], object()):
        if name is None:
            continue
        assert_only_vyre_errors(vn.get_backend, name)


class _ReprRaises:
    def __repr__(self):
        raise ValueError("a repr that fails")


def _nested(depth: int) -> list:
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


@pytest.mark.parametrize("value", [_nested(100_000), _ReprRaises(), list(range(1_000_000)), "x" * 10_000])
def test_any_value_in_a_message_is_shown_short_and_never_raises(value):
    """A wrong argument of any shape (nested past the recursion limit, huge, with a failing repr)
    gives a VyreError with a short message, not a RecursionError or the repr's own error."""
    from vyre_numba import fixpoint
    from vyre_numba.egraph import EGraph, workload
    from vyre_numba.errors import VyreError, shown
    from vyre_numba.graph import bfs

    assert len(shown(value)) <= 80
    g = EGraph.from_arrays([0, 1], [0, 1], [0, 0, 0], [], backend="reference")
    for call in (lambda: g.rebuild(max_rounds=value), lambda: g.rebuild(progress=value),
                 lambda: workload.arithmetic(value), lambda: bfs([0, 1, 1], [0], 0, symmetric=value),
                 lambda: fixpoint.run(lambda i, a: 0, 1, [np.zeros(1)], max_rounds=value, backend="reference"),
                 lambda: vn.DispatchConfig(fixpoint_iterations=value)):
        with pytest.raises(VyreError) as e:
            call()
        assert "Fix:" in str(e.value) and len(str(e.value)) < 1000


_SPECIAL = {"nested 5000 deep": lambda: _nested(5000), "repr raises": _ReprRaises, "bools among ints": lambda: [True, 0, 1]}


def _calls_with(value, arity: int, fn) -> list[tuple]:
    """Argument lists with `value` in each position (None elsewhere), and in all at once."""
    n = max(required(fn), 1)
    lists = [[value] * max(n, arity)]
    for p in range(max(n, arity)):
        lists.append([value if i == p else None for i in range(max(n, arity))])
    return lists


@pytest.mark.parametrize("special", list(_SPECIAL))
def test_values_hypothesis_cannot_show_get_only_vyre_errors_from_every_builder_and_method(special):
    """Values whose repr recurses past the limit or raises (which the generated fuzz cannot carry,
    as hypothesis prints its examples) and lists that mix bools with ints, at every position of
    every IR builder and reference backend method."""
    from vyre_numba.errors import shown

    from vyre_numba import compaction, fixpoint, graph
    from vyre_numba.egraph import EGraph, congruence_closure, structural_equivalences, workload
    from vyre_numba.elementwise import elementwise
    from vyre_numba.workqueue import QueueModel

    value = _SPECIAL[special]()
    backend = vn.get_backend("reference")
    model = QueueModel(4, np.int32)
    egraph = EGraph.from_arrays([0, 1], [0, 1], [0, 0, 0], [], backend="reference")
    resident = graph.Graph([0, 1, 1], [0], backend="reference")
    targets = list(IR_BUILDERS) + [(getattr(backend, m), k) for m, k in BACKEND_METHODS] + [
        (compaction.select, 2), (compaction.select_if, 2), (compaction.nonzero, 1), (compaction.read_compacted, 2),
        (QueueModel, 2), (model.push, 1), (graph.check_csr, 2), (graph.bfs, 3), (graph.connected_components, 2),
        (graph.bfs_many, 3), (graph.Graph, 2), (resident.bfs, 1), (resident.bfs_many, 1),
        (resident.reachable_many, 1), (EGraph.from_arrays, 4), (EGraph.from_terms, 1), (EGraph.from_serialized, 1),
        (congruence_closure, 2), (structural_equivalences, 1), (workload.arithmetic, 1), (egraph.union, 1),
        (egraph.find, 1), (egraph.add, 3), (egraph.lookup, 3), (fixpoint.run, 3),
        (elementwise, 3), (vn.get_backend, 1)]
    wrong = []
    for fn, arity in targets:
        for k, args in enumerate(_calls_with(value, arity, fn)):
            name = f"{getattr(fn, '__qualname__', fn)} (argument list {k})"
            try:
                fn(*args)
            except VyreError as e:
                text = str(e)
                if "Fix:" not in text or len(text) > 4000:
                    wrong.append(f"{name}: {shown(text, 200)}")
            except Exception as e:  # noqa: BLE001 - the point of the test
                wrong.append(f"{name} raised {type(e).__name__}: {shown(str(e), 150)}")
    assert not wrong, "\n".join(wrong)
