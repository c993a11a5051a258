"""A mistake's error points at the caller's line: the traceback of a VyreError raised out of a
public call keeps the caller's frames (its callbacks included) and none of vyre-numba's own,
as a builtin's does; failures of the toolchain or the device, and $VYRE_NUMBA_DEBUG, keep them all."""
from __future__ import annotations

import traceback

import numpy as np
import pytest

from vyre_numba import compaction, get_backend, graph, ir
from vyre_numba.config import DispatchConfig
from vyre_numba.errors import ArgumentError, DispatchError, IRValidationError, TemplateError, VyreError


def saxpy() -> ir.Program:
    i = ir.var("i")
    return ir.Program([ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.output("y", 1, "f32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i))])],
                      name="p")


def frames(error: BaseException) -> list[str]:
    """The functions of the traceback, each as module:function."""
    out = []
    for fs, _ in traceback.walk_tb(error.__traceback__):
        out.append(f"{fs.f_globals.get('__name__')}:{fs.f_code.co_name}")
    return out


def ours(names: list[str]) -> list[str]:
    return [n for n in names if n.split(":")[0].split(".")[0] == "vyre_numba"]


MISTAKES = {
    "dispatch of too many arrays": (DispatchError, lambda be: be.dispatch(saxpy(), [np.ones(3, np.float32)] * 3)),
    "a value f32 cannot hold": (DispatchError, lambda be: be.dispatch(saxpy(), [np.array([2**40 + 1])])),
    "a negative grid": (DispatchError, lambda be: DispatchConfig(grid=-1)),
    "an unknown type": (IRValidationError, lambda be: ir.Program([ir.BufferDecl.read("x", 0, "f99")], 64, [])),
    "a store to a read buffer": (IRValidationError, lambda be: ir.check(
        ir.Program([ir.BufferDecl.read("x", 0, "f32")], 64, [ir.store("x", 0, 1.0)]))),
    "flags of another length": (DispatchError, lambda be: compaction.select(np.arange(4), np.ones(3, bool))),
    "a source past the graph": (DispatchError, lambda be: graph.bfs(np.array([0, 1, 2]), np.array([1, 0]), 7)),
    "a misspelt keyword": (ArgumentError, lambda be: graph.bfs(np.array([0, 1, 2]), np.array([1, 0]), 0, backnd=be)),
    "an object array": (DispatchError, lambda be: be.upload(np.array([object()]))),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_mistake_points_at_the_callers_line_only(name):
    kind, mistake = MISTAKES[name]
    with pytest.raises(kind, match="Fix:") as e:
        mistake(get_backend("reference"))
    names = frames(e.value)
    assert not ours(names), names
    assert names and names[-1].endswith(":<lambda>"), names  # the line that made the mistake is the last shown


def test_a_callbacks_frames_stay_between_the_caller_and_the_mistake():
    be = get_backend("reference")

    def each(buffer, first, count):
        DispatchConfig(grid=(1, -2))  # the callback's own mistake

    with pytest.raises(DispatchError, match="negative axis") as e:
        be.upload_in_pieces(np.arange(5, dtype=np.uint32), each)
    names = frames(e.value)
    assert not ours(names), names
    assert [n.split(":")[1] for n in names] == [
        "test_a_callbacks_frames_stay_between_the_caller_and_the_mistake", "each"], names


def test_debugging_keeps_every_frame(monkeypatch):
    monkeypatch.setenv("VYRE_NUMBA_DEBUG", "1")
    with pytest.raises(DispatchError) as e:
        compaction.select(np.arange(4), np.ones(3, bool))
    assert ours(frames(e.value))  # the checks that found it, for a bug report
    monkeypatch.setenv("VYRE_NUMBA_DEBUG", "0")
    with pytest.raises(DispatchError) as e:
        compaction.select(np.arange(4), np.ones(3, bool))
    assert not ours(frames(e.value))


def test_toolchain_failures_keep_every_frame():
    from vyre_numba.ptx import templates

    with pytest.raises(TemplateError) as e:
        templates.load("no_such_template")
    assert ours(frames(e.value)), frames(e.value)


def test_errors_caught_inside_the_package_keep_their_frames_until_they_leave_it():
    """The trimming happens only where a public call returns to code outside vyre-numba: an error
    one of its public functions raises to another of its functions keeps its frames (the caller
    inside can still tell where it came from). The caller here is code run as a vyre_numba module."""
    from vyre_numba.errors import _own_frame

    assert _own_frame({"__name__": "vyre_numba"}) and _own_frame({"__name__": "vyre_numba.ir.nodes"})
    assert not _own_frame({"__name__": "vyre_numba_extra"}) and not _own_frame({"__name__": "__main__"})
    assert not _own_frame({})
    inside = {"__name__": "vyre_numba._probe"}
    exec("def probe(np, compaction):\n"
         "    try:\n"
         "        compaction.select(np.arange(4), np.ones(3, bool))\n"
         "    except Exception as e:\n"
         "        return e\n", inside)
    error = inside["probe"](np, compaction)
    assert isinstance(error, DispatchError)
    assert "vyre_numba.compaction:_check_flags" in frames(error), frames(error)  # the check that found it


def test_host_memory_run_out_in_any_public_call_is_a_host_memory_error():
    """Regression (a red-team): twelve calls (unique.*, check_csr, EGraph batches, host compaction)
    let NumPy's raw MemoryError out. Every public call now turns one its own checks did not name
    into a HostMemoryError with a fix, pointing at the caller's line. Stride-0 arrays claim 2**40
    elements at no cost; copying one asks for terabytes (calls that scan them first take minutes)."""
    from numpy.lib.stride_tricks import as_strided

    from vyre_numba import unique
    from vyre_numba.errors import HostMemoryError

    def lying(n):
        return as_strided(np.zeros(1, np.int64), shape=(n,), strides=(0,))

    for call in (lambda: unique.unique(lying(2**40)), lambda: unique.index_of(np.array([0]), lying(2**40))):
        with pytest.raises(HostMemoryError, match=r"ran out of host memory.*Fix: ") as e:
            call()
        assert not ours(frames(e.value)) and e.value.__cause__ is None and e.value.__suppress_context__


def test_host_memory_run_out_keeps_the_closest_message_and_a_callbacks_own_error():
    """Regression (a review): the public-call wrapper also translated MemoryErrors passing between
    vyre-numba's own calls (a closer check's message, such as "renumber ids densely", was lost),
    and a MemoryError of the caller's own callback was blamed on the call; and a HostMemoryError
    was no MemoryError, so `except MemoryError` stopped catching the calls it translated."""
    from numpy.lib.stride_tricks import as_strided

    from vyre_numba import unique
    from vyre_numba.errors import HostMemoryError

    lying = as_strided(np.zeros(1, np.int64), shape=(2**40,), strides=(0,))
    with pytest.raises(MemoryError) as e:  # as it was caught before the translation
        unique.unique(lying)
    assert isinstance(e.value, HostMemoryError)

    def each(buffer, first, count):
        np.zeros(2**44, np.int64)  # the callback's own: 128 TiB

    with pytest.raises(MemoryError) as e:
        get_backend("reference").upload_in_pieces(np.arange(5, dtype=np.uint32), each)
    assert not isinstance(e.value, VyreError)  # theirs, not the call's
    assert "each" in [name.split(":")[1] for name in frames(e.value)]


def test_debugging_keeps_where_a_translated_error_was_raised(monkeypatch):
    from numpy.lib.stride_tricks import as_strided

    from vyre_numba import unique
    from vyre_numba.errors import HostMemoryError

    monkeypatch.setenv("VYRE_NUMBA_DEBUG", "1")
    with pytest.raises(HostMemoryError) as e:
        unique.unique(as_strided(np.zeros(1, np.int64), shape=(2**40,), strides=(0,)))
    assert isinstance(e.value.__cause__, MemoryError)  # NumPy's, with its traceback into vyre_numba.unique
    assert any(name.startswith("vyre_numba.unique:") for name in frames(e.value.__cause__))


def test_a_closer_checks_memory_message_is_kept_and_a_librarys_frames_are_no_callback(monkeypatch):
    """A MemoryError passing between vyre-numba's own calls is left to the closer check (here
    EGraph's "renumber ids densely"), not translated by the inner call's wrapper; and one raised in
    a library the package called (the standard library's json here) is the package's, not a callback
    of the caller's: a HostMemoryError, not a raw MemoryError."""
    import vyre_numba.unique as U
    from vyre_numba.egraph import EGraph
    from vyre_numba.errors import HostMemoryError

    numpy_like = {"__name__": "numpy._probe"}
    exec("def boom(*a, **k):\n    raise MemoryError('np.sort ran out')\n", numpy_like)
    monkeypatch.setattr(U, "_integers", numpy_like["boom"])
    with pytest.raises(HostMemoryError, match="building the e-graph ran out.*renumber ids densely"):
        EGraph.from_arrays(np.array([0, 10**9]), np.array([0, 1]), np.zeros(3, np.int64), np.zeros(0, np.int64),
                           backend="reference")
    monkeypatch.undo()

    import json

    library = {"__name__": "json.decoder"}
    code = compile("def loads(*a, **k):\n    raise MemoryError('no room to parse')\n", json.decoder.__file__, "exec")
    exec(code, library)  # a frame whose code is the standard library's
    monkeypatch.setattr(json, "loads", library["loads"])
    with pytest.raises(HostMemoryError, match=r"Program.from_json\(\) ran out of host memory.*Fix:") as e:
        ir.Program.from_json('{"nodes": []}')
    assert not ours(frames(e.value))
