"""A call whose arguments do not fit a public function or method (a misspelt keyword, one too
many, one missing) raises ArgumentError, a VyreError naming the parameters, not Python's TypeError."""
from __future__ import annotations

import importlib
import inspect
import pickle
import re
from unittest import mock

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.errors import ArgumentError, VyreError, check_calls

PACKAGES = ["vyre_numba", "vyre_numba.ir", "vyre_numba.ptx", "vyre_numba.compaction", "vyre_numba.graph",
            "vyre_numba.fixpoint", "vyre_numba.egraph", "vyre_numba.workqueue", "vyre_numba.distributed",
            "vyre_numba.reference", "vyre_numba.graph.generators", "vyre_numba.egraph.workload", "vyre_numba.unique",
            "vyre_numba.testing"]
CLASSES = ["vyre_numba.megakernel:Megakernel", "vyre_numba.megakernel:MegakernelResult",
           "vyre_numba.recording:Redispatch", "vyre_numba.recording:Resequence",
           "vyre_numba.elementwise:Elementwise", "vyre_numba.gpu:CudaBackend",
           "vyre_numba.gpu.cudagraph:CudaRecordedGraph", "vyre_numba.gpu.cudagraph:CudaRecordedSequence",
           "vyre_numba.gpu.backend:CudaPending"]
TEMPLATES = ["template_dir", "names", "params", "load"]


def public_callables():
    """(name, callable, arguments that take the place of self) of every public function and
    method the packages export."""
    found = {}
    classes = []
    for name in PACKAGES:
        mod = importlib.import_module(name)
        exported = mod.__all__
        for attr in exported:
            obj = getattr(mod, attr)
            if inspect.ismodule(obj):
                continue
            if inspect.isfunction(obj):
                found[f"{name}.{attr}"] = (obj, ())
            elif isinstance(obj, type):
                classes.append(obj)
    for attr in TEMPLATES:
        found[f"vyre_numba.ptx.templates.{attr}"] = (getattr(vn.ptx.templates, attr), ())
    for spec in CLASSES:
        mod, attr = spec.split(":")
        classes.append(getattr(importlib.import_module(mod), attr))
    for cls in classes:
        if not cls.__module__.startswith("vyre_numba") or issubclass(cls, BaseException):
            continue
        for klass in cls.__mro__:
            if not klass.__module__.startswith("vyre_numba"):
                continue
            for attr, raw in vars(klass).items():
                if attr.startswith("_") and attr not in ("__init__", "__call__"):
                    continue
                if isinstance(raw, (classmethod, staticmethod)):
                    found[f"{klass.__qualname__}.{attr}"] = (getattr(cls, attr), ())
                elif inspect.isfunction(raw):
                    found[f"{klass.__qualname__}.{attr}"] = (raw, (mock.MagicMock(),))  # stands for self
    return found


CALLABLES = public_callables()
INC = vn.elementwise("u32 x", "u32 y", "y = x + 1")
X = np.arange(3, dtype=np.uint32)
ANY_KEYWORD_ARGS = {"Elementwise.__call__": (INC, X), "Elementwise.program": (INC, X), "Elementwise.ptx": (INC, X),
                    "vyre_numba.ptx.templates.load": ("grid_barrier",)}  # what a call needs beside the keywords


def test_the_public_surface_is_large_and_every_part_of_it_is_checked():
    assert len(CALLABLES) > 250
    unchecked = [name for name, (fn, _) in CALLABLES.items() if not getattr(fn, "_vyre_checked", False)]
    assert not unchecked, unchecked


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_an_unknown_keyword_is_an_argument_error_naming_the_parameters(name):
    fn, self_ = CALLABLES[name]
    sig = inspect.signature(fn)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        with pytest.raises(VyreError, match="Fix: "):  # the function names the keywords it takes itself
            fn(*ANY_KEYWORD_ARGS[name], no_such_keyword=1)
        return
    with pytest.raises(ArgumentError, match=r"`no_such_keyword` is no parameter.*Fix:|Fix: `no_such_keyword`") as e:
        fn(*self_, no_such_keyword=1)
    assert str(e.value).rstrip(".").endswith(")") and "call it as" in str(e.value)
    assert isinstance(e.value, TypeError) and isinstance(e.value, VyreError)


@pytest.mark.parametrize("make, call", [(lambda: ir.add(1, 2, 3), "add(a, b)"), (lambda: ir.min_(1), "min_(a, b)"),
                                        (lambda: ir.sqrt(x=1.0), "sqrt(a)"), (lambda: ir.not_(), "not_(a)")])
def test_an_ir_builders_wrong_arguments_name_the_builder(make, call):
    """Regression (a red-team): the builders made by one factory were named _bin.<locals>.make."""
    with pytest.raises(ArgumentError, match=rf"^{re.escape(call.split('(')[0])}\(\): .*Fix: .*call it as {re.escape(call)}"):
        make()


def test_the_message_names_the_nearest_parameter_and_the_call():
    with pytest.raises(ArgumentError) as e:
        vn.compaction.select(np.arange(4), flgs=np.ones(4, bool))
    assert "did you mean `flags`?" in str(e.value)
    assert "call it as select(values, flags, *, stream=None)" in str(e.value)
    be = vn.get_backend("reference")
    with pytest.raises(ArgumentError, match=r"ReferenceBackend.upload\(\): got an unexpected keyword argument 'dtyp'"):
        be.upload(np.arange(3), dtyp=np.int32)
    with pytest.raises(ArgumentError, match=r"missing a required argument: 'program'.*dispatch\(program, inputs=None"):
        be.dispatch()
    with pytest.raises(ArgumentError, match=r"too many positional arguments"):
        vn.ir.load("a", 0, 1)
    with pytest.raises(ArgumentError, match=r"did you mean `name`"):
        vn.ir.Program([], 64, [], nam="x")
    with pytest.raises(ArgumentError, match=r"did you mean `count`"):
        vn.ir.BufferDecl.read("a", 0, "u32", cnt=3)


def test_a_type_error_raised_inside_the_function_is_left_as_it_was():
    def inner(a, *, b=1):
        raise TypeError("from inside")

    def forwarding(*args, **kwargs):  # as a decorator's wrapper: the inner call binds, or fails inside
        return inner(*args, **kwargs)

    forwarding.__wrapped__ = inner
    space = {"inner": inner, "forwarding": forwarding}
    check_calls(space, ["inner", "forwarding"])
    for fn in (space["inner"], space["forwarding"]):
        with pytest.raises(TypeError, match="from inside") as e:
            fn(1, b=2)
        assert not isinstance(e.value, VyreError)
        with pytest.raises(ArgumentError, match="did you mean `b`"):
            fn(1, bb=2)


def test_checked_functions_keep_their_name_signature_docs_and_pickle_by_reference():
    f = vn.compaction.select
    assert f.__name__ == "select" and "values" in inspect.signature(f).parameters and f.__doc__
    assert pickle.loads(pickle.dumps(f)) is f
    assert pickle.loads(pickle.dumps(vn.graph.bfs)) is vn.graph.bfs
    m = vn.get_backend("reference").upload
    assert m.__name__ == "upload" and inspect.signature(m).parameters.keys() == {"array"}
    assert vn.ptx.templates.template_dir.cache_info().maxsize == 1  # an lru_cache keeps its controls
    check_calls({"select": f}, ["select"])  # checking twice does not wrap twice
    assert vn.compaction.select is f


def test_every_error_class_is_exported_where_users_look_for_it():
    """Regression (an API review): `except vn.CapacityError` raised AttributeError (README and
    notebook 06 name it); seven of the error classes were only in vyre_numba.errors."""
    import inspect as _inspect

    from vyre_numba import errors

    public = {name for name, obj in vars(errors).items() if _inspect.isclass(obj) and not name.startswith("_")
              and obj.__module__ == errors.__name__ and issubclass(obj, (VyreError, Warning))}
    assert public == set(errors.__all__) and len(public) == 24  # DeviceMemoryError the twenty-fourth
    assert public <= set(vn.__all__) and all(getattr(vn, name) is getattr(errors, name) for name in public)
    assert "elementwise" in vn.__all__ and callable(vn.elementwise)


def test_tab_completion_lists_the_subpackages_before_they_are_imported():
    names = dir(vn)
    for sub in ("compaction", "egraph", "fixpoint", "graph", "unique", "testing", "recording", "workqueue"):
        assert sub in names, sub
        assert importlib.import_module(f"vyre_numba.{sub}") is getattr(vn, sub)
    assert hasattr(vn.graph, "generators") and callable(vn.graph.generators.grid)


def test_every_error_pickles_whole():
    """Regression (a review): CapacityError and CheckError did not unpickle (Exception's pickling
    passes the message alone), so one raised on a Dask worker could not reach the client."""
    import pickle

    from vyre_numba import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        extra = {"CapacityError": (7,), "CheckError": ({"sites": 1}, [1, 2])}.get(name, ())
        e = cls("it failed. Fix: nothing.", *extra)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and str(back) == str(e) and back.__dict__ == e.__dict__, name
        again = cls.__new__(cls)  # as tblib unpickles a Dask worker's error (MemoryError's __new__ refused this)
        assert type(again) is cls, name


def test_every_public_signature_resolves_its_type_hints():
    """Regression (a review): annotations naming Backend (imported only for type checkers) made
    typing.get_type_hints raise NameError for 13 public calls, and with it typeguard or pydantic."""
    import typing

    unresolved = {}
    for name, (fn, _) in CALLABLES.items():
        try:
            typing.get_type_hints(getattr(fn, "__func__", fn))
        except Exception as e:  # noqa: BLE001 - listed below
            unresolved[name] = f"{type(e).__name__}: {e}"
    assert not unresolved, unresolved


def test_a_method_of_an_internal_class_is_named_by_the_public_class_users_know():
    """Regression (a red-team): the reference backend's recordings said Redispatch.replay_resident()
    and 'this Redispatch owns', a class no doc names (users hold a RecordedGraph)."""
    import copy

    be = vn.get_backend("reference")
    g = be.record_graph(ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64, []), [np.zeros(4, np.uint32)])
    with pytest.raises(ArgumentError, match=r"^RecordedGraph\.replay_resident\(\): .*call it as "
                                            r"RecordedGraph\.replay_resident\(\*, read=True\)") as e:
        g.replay_resident([1])
    assert "Redispatch" not in str(e.value)
    with pytest.raises(vn.DispatchError, match="this RecordedGraph owns what it holds"):
        copy.copy(g)
    g.close()
    with pytest.raises(ArgumentError, match=r"^ReferenceBackend\.dispatch\(\): got an unexpected keyword"):
        be.dispatch(None, [], bogus=1)


def test_a_type_says_the_article_a_type_name_is_spoken_with():
    """Regression (a review): messages said "a int" ("is a <type>"), then "an uint32" by spelling."""
    import uuid

    from vyre_numba.errors import a_type

    said = [a_type(x) for x in (3, [], np.uint8(1), np.add, uuid.uuid4(), np.zeros(1), np.int32(1), object())]
    assert said == ["an int", "a list", "a uint8", "a ufunc", "a UUID", "an ndarray", "an int32", "an object"]


def _holders():
    from vyre_numba import egraph, graph, workqueue
    yield "a Graph", graph.Graph(np.array([0, 1, 1]), np.array([1]), backend="reference"), "g.n is its vertex count"
    yield "a QueueModel", workqueue.QueueModel(4, np.int32), "q.size() is how many items it holds"
    yield "an EGraph", egraph.EGraph.from_terms([("a",)], backend="reference"), "e.n_nodes and e.n_classes"
    be = vn.get_backend("reference")
    i = ir.gid(0)
    inc = ir.Program([ir.BufferDecl.read_write("y", 0, "u32")], 32,
                     [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("y", i) + 1)])], name="inc")
    y = be.upload(np.zeros(4, np.uint32))
    yield "a RecordedGraph", be.record_graph(inc, [np.zeros(4, np.uint32)]), "g.buffers holds a recording's"
    yield "a RecordedSequence", be.record_sequence([(inc, [y])], [y]), "g.buffers holds"
    yield "a Megakernel", be.megakernel([(inc, [y])], [y]), "mk.steps are its steps"
    yield "a Program", inc, "read its parts by name: program.buffers (the declarations), program.entry"


@pytest.mark.parametrize("use", [len, iter, list, lambda x: x[0], lambda x: 0 in x, lambda x: [*x]],
                         ids=["len", "iter", "list", "index", "in", "unpack"])
def test_a_holder_of_many_things_used_as_a_python_collection_says_what_to_use_instead(use):
    for name, obj, fix in _holders():
        said = rf"^{name} is not a Python collection: it has no .*Fix: {re.escape(fix)}"
        with pytest.raises(ArgumentError, match=said):
            use(obj)
        assert bool(obj) is True  # truth does not go through the refused len()


def test_the_device_queue_refuses_python_collection_use_as_its_model_does():
    from vyre_numba.errors import NotACollection
    from vyre_numba.workqueue import WorkQueue

    assert issubclass(WorkQueue, NotACollection)


def test_a_holder_given_where_an_array_goes_is_still_named_as_no_array():
    from vyre_numba import graph, workqueue

    q = workqueue.QueueModel(4, np.int32)
    with pytest.raises(VyreError, match="indptr is a QueueModel, not an array of integers"):
        graph.bfs(q, 0)
    with pytest.raises(VyreError, match="indptr is a QueueModel, not an array of integers"):
        graph.Graph(q)


def test_a_holder_given_where_the_ir_takes_a_list_is_named_as_no_list():
    """Regression (a review): with len() and iteration defined (to refuse them), a queue passed as
    a program's buffers or body got the queue's fix, not the IR's."""
    from vyre_numba import workqueue

    q = workqueue.QueueModel(4, np.int32)
    with pytest.raises(vn.IRValidationError, match=r"^buffers=.* is not a list of BufferDecl"):
        ir.Program(q, 64, [])
    with pytest.raises(vn.IRValidationError, match=r"^walk takes an iterable of IR statements"):
        list(ir.walk(q))
    with pytest.raises(vn.IRValidationError, match=r"output_byte_range=.* is not a \(start, end\) pair"):
        ir.BufferDecl.read_write("x", 0, "u32", output_byte_range=q)
