"""Owners of resources across the package, alike: `closed` says whether one was released, `with` on
a closed one is refused at once (as a closed file's is), closing lets go of the caller's buffers, and
an argument whose conversion closes the owner is refused, not half-run (a red-team's findings)."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.egraph import EGraph
from vyre_numba.errors import DispatchError
from vyre_numba.graph import Graph
from vyre_numba.workqueue import QueueModel

B = ir.BufferDecl


def bump() -> ir.Program:
    i = ir.gid(0)
    return ir.Program([B.read_write("x", 0, "u32")], 64,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])], name="bump")


def owners(be) -> dict:
    """One of each owner the reference backend makes, by name."""
    x = be.upload(np.zeros(8, np.uint32))
    return {
        "Graph": Graph(np.array([0, 1, 2, 2]), np.array([1, 0]), backend="reference"),
        "EGraph": EGraph.from_arrays([0, 1], [0, 0], [0, 0, 0], [], backend="reference"),
        "QueueModel": QueueModel(4, np.int32),
        "RecordedGraph": be.record_graph(bump(), [np.zeros(8, np.uint32)]),
        "RecordedSequence": be.record_sequence([(bump(), [x])], [x]),
        "Megakernel": be.megakernel([(bump(), [x])], [x]),
    }


@pytest.mark.parametrize("name", ["Graph", "EGraph", "QueueModel", "RecordedGraph", "RecordedSequence", "Megakernel"])
def test_a_closed_owner_says_so_and_refuses_with_at_once(name):
    owner = owners(vn.get_backend("reference"))[name]
    assert owner.closed is False
    with owner as same:  # open: `with` gives the owner and closes it on leaving
        assert same is owner
    assert owner.closed is True
    with pytest.raises(DispatchError, match=r"(?i)closed\. Fix: "):
        with owner:
            raise AssertionError("a closed owner was entered")


def test_a_closed_megakernel_lets_go_of_its_steps_buffers():
    """Regression: close() kept the steps, reads, flag and bound buffers, so a closed megakernel
    left in a notebook variable held every step's device buffers (recordings let go of theirs)."""
    be = vn.get_backend("reference")
    y = be.upload(np.zeros(1 << 12, np.uint32))
    seen = weakref.ref(y)
    mk = be.megakernel([(bump(), [y])], [y])
    assert mk.run().outputs[0].tolist() == [1] * (1 << 12)
    del y
    gc.collect()
    assert seen() is not None  # held while open: run() needs it
    mk.close()
    gc.collect()
    assert seen() is None and mk.closed and "closed" in repr(mk)
    with pytest.raises(DispatchError, match="closed. Fix: plan a new one"):
        mk.run()


class Closing:
    """An array-like whose conversion closes `owner` (a lazy array with side effects)."""

    def __init__(self, owner, values):
        self.owner, self.values = owner, values

    def __array__(self, dtype=None, copy=None):
        self.owner.close()
        return np.asarray(self.values, dtype=dtype)


@pytest.mark.parametrize("call", ["bfs_many", "reachable_many"])
def test_an_argument_that_closes_the_graph_as_it_is_read_is_refused(call):
    """Regression: the graph was checked open before its argument was converted; one closed by
    the conversion went down the GPU path with no arrays (a raw IndexError)."""
    g = Graph(np.array([0, 1, 2, 2]), np.array([1, 0]), backend="reference")
    arg = Closing(g, [0])
    with pytest.raises(DispatchError, match="this Graph was closed. Fix:"):
        getattr(g, call)(arg)
    assert g.closed


def test_ids_that_close_the_egraph_as_they_are_read_are_refused():
    g = EGraph.from_arrays([0, 1], [0, 0], [0, 0, 0], [], backend="reference")
    with pytest.raises(DispatchError, match="this EGraph was closed. Fix:"):
        g.find(Closing(g, [0, 1]))


SIMULATED = r"""
import numpy as np
from vyre_numba.compaction import Selector
from vyre_numba.errors import DispatchError, ImmutableError
from vyre_numba.workqueue import WorkQueue

from simulated import refused

q = WorkQueue(8, np.int32)
assert q.closed is False
with q:
    pass
assert q.closed is True
refused(lambda: q.__enter__(), DispatchError, "this WorkQueue was closed")

s = Selector()
stream = s.stream
assert s.closed is False and s.timeouts == 0
refused(lambda: setattr(s, "stream", None), ImmutableError, "stream")  # its buffers and launches are on the first
refused(lambda: setattr(s, "timeouts", 5), ImmutableError, "timeouts")
refused(lambda: setattr(s, "closed", True), ImmutableError, "closed")
refused(lambda: delattr(s, "stream"), ImmutableError, "stream")
refused(lambda: setattr(s, "strem", 1), ImmutableError, "stream")  # misspelt: kept beside it, changing nothing
assert s.stream is stream and s.timeouts == 0 and not hasattr(s, "strem")
s.close()
assert s.closed is True
refused(lambda: s.__enter__(), DispatchError, "this Selector was closed")
print("owners ok")
"""


def test_a_work_queue_and_a_selector_say_closed_and_keep_their_stream_under_the_cuda_simulator():
    from simulated import run_script

    out = run_script(SIMULATED, 600)
    assert out.returncode == 0 and "owners ok" in out.stdout, out.stdout + out.stderr


def test_a_closed_while_graph_refuses_its_block_and_launch():
    """The fixpoint runner's own CUDA graph (a loop on the device) alike: `with` or launch once closed
    is refused, not sent to the driver with a released graph (a red-team's leftover)."""
    from vyre_numba.gpu.cudagraph import WhileGraph

    g = WhileGraph.__new__(WhileGraph)  # its owned graph and stream, released by a finaliser, stood in for
    g.what, g._finalizer = "the fixpoint loop", weakref.finalize(g, lambda: None)
    assert g.closed is False and g.__enter__() is g
    g.close()
    assert g.closed is True
    for call in (g.__enter__, g.launch, g.run):
        with pytest.raises(DispatchError, match=r"this CUDA graph of the fixpoint loop was closed\. Fix: build another"):
            call()
