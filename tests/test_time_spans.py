"""np.timedelta64, which NumPy counts among its integers, is no count, size or index anywhere: each
is refused with a fix (its unit used to be dropped without a word, or a raw TypeError raised)."""
from __future__ import annotations

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.egraph import EGraph
from vyre_numba.workqueue import QueueModel

TD = np.timedelta64(64, "ns")
R = vn.get_backend("reference")
P = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.output("y", 1, "u32")], 64,
               [ir.store("y", ir.gid(0), ir.load("x", ir.gid(0)))], name="copy")

CALLS = {
    "DispatchConfig(workgroup=)": lambda: DispatchConfig(workgroup=TD),
    "DispatchConfig(grid=)": lambda: DispatchConfig(grid=TD),
    "DispatchConfig(fixpoint_iterations=)": lambda: DispatchConfig(fixpoint_iterations=TD),
    "allocate(n=)": lambda: R.allocate(P, "y", TD),
    "empty(n)": lambda: R.empty(TD, np.uint32),
    "download(offset)": lambda: R.download(R.upload(np.arange(4, dtype=np.uint32)), TD),
    "download(count=)": lambda: R.download(R.upload(np.arange(4, dtype=np.uint32)), 0, TD),
    "dispatch(sizes=)": lambda: R.dispatch(P, [np.arange(4, dtype=np.uint32)], sizes={"y": TD}),
    "Program(workgroup)": lambda: ir.Program([], TD, []),
    "BufferDecl(count=)": lambda: ir.BufferDecl.read("x", 0, "u32", count=TD),
    "BufferDecl(binding)": lambda: ir.BufferDecl.read("x", TD, "u32"),
    "ir.gid(axis)": lambda: ir.gid(TD),
    "QueueModel(capacity)": lambda: QueueModel(TD, np.int32),
    "EGraph.rebuild(max_rounds=)": lambda: EGraph().rebuild(max_rounds=TD),
    # a time as text: it showed np.timedelta64(5, 'ms') as "5 milliseconds ns" (a red-team)
    "display.time_text": lambda: vn.display.time_text(np.timedelta64(5, "ms")),
    "display.time_text(unit='s')": lambda: vn.display.time_text(np.timedelta64(5, "ms"), "s"),
}


@pytest.mark.parametrize("call", list(CALLS), ids=list(CALLS))
def test_a_time_span_is_no_count(call):
    with pytest.raises(vn.VyreError, match="Fix:"):
        CALLS[call]()


def test_integers_of_every_numpy_type_stay_counts():
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.longlong,
              np.ulonglong):
        assert DispatchConfig(workgroup=t(64)).workgroup == (64, 1, 1)
        assert R.download(R.upload(np.arange(4, dtype=np.uint32)), t(1)).tolist() == [1, 2, 3]
