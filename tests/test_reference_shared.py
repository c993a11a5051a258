"""The reference interpreter on expressions that use one node object more than once (a DAG, as
`e = e * e` in a Python loop builds): a shared node is evaluated once an evaluation of its
expression, and gives the same bits as the same expression written out with a fresh node at each
use; with an atomic in the expression every use is evaluated, as written."""
from __future__ import annotations

import numpy as np
import pytest

from vyre_numba import ir
from vyre_numba.reference import ReferenceBackend, interpreter

B = ir.BufferDecl


def squares(k: int, fresh: bool, leaf) -> ir.Expr:
    """x ** (2 ** k) by k squarings: one node object a level (shared by both operands), or, with
    `fresh`, the same tree written out, 2 ** k leaves."""
    if k == 0:
        return leaf()
    if fresh:
        return squares(k - 1, True, leaf) * squares(k - 1, True, leaf)
    e = leaf()
    for _ in range(k):
        e = e * e
    return e


def program(value: ir.Expr, dtype: str = "u32", extra=()) -> ir.Program:
    return ir.Program([B.read("x", 0, dtype), B.output("y", 1, dtype, 37), *extra], 16,
                      [ir.if_(ir.gid(0) < ir.buf_len("y"), [ir.store("y", ir.gid(0), value)])], name="shared")


def dispatch(p: ir.Program, inputs: list) -> list[np.ndarray]:
    """The buffers the program writes, in binding order (y, then c where there is one)."""
    ir.check(p)
    return ReferenceBackend().dispatch(p, inputs)


def counting_loads(monkeypatch) -> list:
    calls: list = []
    real = interpreter._load

    def load(decl, copy, r, m, idx):
        calls.append(decl.name)
        return real(decl, copy, r, m, idx)
    monkeypatch.setattr(interpreter, "_load", load)
    interpreter._PLANS.clear()  # plans compiled earlier hold the real _load
    return calls


@pytest.mark.parametrize("dtype, values", [
    ("u32", np.arange(3, 40, dtype=np.uint32)),
    ("i32", np.arange(-20, 17, dtype=np.int32)),
    ("f32", np.array([0.5, -1.25, np.nan, np.inf, -0.0, 1e-20, 3.0e10] * 5 + [2.0, 1.5], np.float32)),
])
def test_a_shared_value_gives_the_bits_of_the_written_out_tree(dtype, values):
    def leaf():
        return ir.load("x", ir.gid(0))
    for k in (1, 3, 8):
        got = dispatch(program(squares(k, False, leaf), dtype), [values.copy()])[0]
        want = dispatch(program(squares(k, True, leaf), dtype), [values.copy()])[0]
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), (dtype, k)


def test_a_shared_load_is_read_once_an_evaluation(monkeypatch):
    calls = counting_loads(monkeypatch)
    x = ir.load("x", ir.gid(0))
    dispatch(program(x * x + x), [np.arange(37, dtype=np.uint32)])
    assert calls == ["x"]  # one chunk, one evaluation of the store's value: the load once, not three times
    calls.clear()
    dispatch(program(ir.load("x", ir.gid(0)) * ir.load("x", ir.gid(0))), [np.arange(37, dtype=np.uint32)])
    assert calls == ["x", "x"]  # two node objects: two loads


def test_a_value_of_a_third_of_a_million_nodes_written_out_runs_in_its_distinct_nodes(monkeypatch):
    calls = counting_loads(monkeypatch)
    e = squares(16, False, lambda: ir.load("x", ir.gid(0)) | ir.lit(1, "u32"))  # 5 * 2**16 nodes written out
    x = np.arange(37, dtype=np.uint32)
    y = dispatch(program(e), [x])[0]
    assert calls == ["x"]
    assert y.tolist() == [pow(int(v) | 1, 2 ** 16, 2 ** 32) for v in x]


def test_shared_nodes_deeper_than_the_closures_run_on_the_tape_once(monkeypatch):
    """A shared subtree deeper than SHALLOW is computed on the tape once, its value pushed again
    at its later uses."""
    calls = counting_loads(monkeypatch)
    deep = ir.load("x", ir.gid(0))
    for k in range(interpreter.SHALLOW + 5):
        deep = deep + ir.lit(k, "u32")
    e = deep * deep + deep
    x = np.arange(37, dtype=np.uint32)
    y = dispatch(program(e), [x])[0]
    d = (x.astype(np.uint64) + sum(range(interpreter.SHALLOW + 5))) % 2**32
    assert y.tolist() == ((d * d + d) % 2**32).tolist()
    assert calls == ["x"]


def test_every_use_is_evaluated_where_the_expression_holds_an_atomic(monkeypatch):
    """load(c, 0) before and after an atomic add to c: the shared load reads both times, as the
    tree written out does (per invocation: the count before the adds, then after all of them)."""
    calls = counting_loads(monkeypatch)
    seen = ir.load("c", 0)
    bump = ir.Atomic("add", "c", ir.lit(0, "u32"), ir.lit(1, "u32"))
    e = seen + ir.BinOp("mul", bump, ir.lit(0, "u32")) + seen * ir.lit(1000, "u32")
    p = program(e, extra=[B.read_write("c", 2, "u32")])
    y, c = dispatch(p, [np.zeros(37, np.uint32), np.array([5], np.uint32)])
    assert calls == ["c", "c"]
    assert y.tolist() == [5 + 1000 * (5 + 37)] * 37 and c.tolist() == [5 + 37]


def test_shared_values_in_two_statements_and_under_masks():
    """A node shared by a let, a store's index and value, and both arms of an if: each expression
    keeps its own values, under its own mask."""
    x = ir.load("x", ir.gid(0))
    sq = x * x
    body = [ir.if_(ir.gid(0) < ir.buf_len("y"), [
        ir.let("t", sq + sq),
        ir.if_(ir.BinOp("lt", x, ir.lit(10, "u32")),
               [ir.store("y", ir.gid(0), sq + ir.var("t"))],
               [ir.store("y", ir.gid(0), sq * sq - ir.var("t"))])])]
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", 37)], 16, body, name="masks")
    x_np = np.arange(37, dtype=np.uint32)
    y = dispatch(p, [x_np.copy()])[0]
    s = x_np.astype(np.uint64) ** 2
    want = np.where(x_np < 10, s + 2 * s, s * s - 2 * s) % 2**32
    assert y.tolist() == want.tolist()
