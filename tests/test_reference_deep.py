"""The reference interpreter on IR nested far beyond Python's recursion limit: 10,000-level
expressions and statements compile and run with no recursion proportional to depth (each test
runs the dispatch under a recursion limit only a few hundred frames above the caller's), and give
the results of closed forms computed here."""
from __future__ import annotations

import sys
from contextlib import contextmanager

import numpy as np
import pytest

from vyre_numba import DispatchError, ir
from vyre_numba.reference import ReferenceBackend, interpreter

B = ir.BufferDecl
N = 10_000
HEADROOM = 300  # frames the interpreter may use on top of the caller's, whatever the depth


@contextmanager
def shallow_stack():
    """Python's recursion limit lowered to the current depth plus HEADROOM."""
    depth, f = 0, sys._getframe()
    while f is not None:
        depth, f = depth + 1, f.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + HEADROOM)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def run(program: ir.Program, inputs=(), **kw) -> list[np.ndarray]:
    ir.check(program)
    program.digest()  # the IR layer's own walkers are tested in test_ir_deep.py
    with shallow_stack():
        return ReferenceBackend().dispatch(program, list(inputs), **kw)


def test_the_depth_thresholds_are_crossed():
    assert interpreter.SHALLOW < N and interpreter.FLAT_DEPTH < N


def test_ten_thousand_term_sum():
    s = ir.load("x", 0)
    for k in range(1, N):
        s = ir.BinOp("add", s, ir.load("x", k % 7))
    s = ir.BinOp("add", s, ir.gid(0))
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", 40)], 8, [ir.store("y", ir.gid(0), s)])
    x = np.arange(3, 10, dtype=np.uint32)
    total = sum(int(x[k % 7]) for k in range(N))
    assert run(p, [x])[0].tolist() == [total + i for i in range(40)]


def test_deep_expression_evaluates_children_left_to_right():
    """A chain of atomic counters: each atomic applies for every invocation before the next one,
    in evaluation order, so invocation i of n gets k*n + i from the k-th."""
    n = 6
    s = ir.atomic_add("c", 0, ir.u32(1))
    for _ in range(1, N):
        s = ir.BinOp("add", s, ir.atomic_add("c", 0, ir.u32(1)))
    p = ir.Program([B.read_write("c", 0, "u32", 1), B.output("y", 1, "u32", n)], n, [ir.store("y", ir.gid(0), s)])
    c, y = run(p, [np.zeros(1, np.uint32)])
    assert c.tolist() == [N * n]
    assert y.tolist() == [(n * N * (N - 1) // 2 + N * i) % 2**32 for i in range(n)]


def test_deep_expression_of_every_arity():
    """select (3 operands), fma (3), binary ops (2), casts (1), loads and builtins (0), deep."""
    s = ir.gid(0)
    for k in range(N):
        match k % 4:
            case 0:
                s = ir.BinOp("add", s, ir.load("x", ir.u32(k % 5)))
            case 1:
                s = ir.Fma(s, ir.u32(1), ir.u32(1))
            case 2:
                s = ir.Select(ir.BinOp("lt", ir.gid(0), ir.u32(3)), ir.BinOp("add", s, ir.u32(2)), ir.u32(k))
            case 3:
                s = ir.Cast(ir.DataType.U32, ir.Cast(ir.DataType.U64, s))
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", 8)], 8, [ir.store("y", ir.gid(0), s)])
    x = np.array([1, 10, 100, 1000, 10000], np.uint32)
    expect = []
    for i in range(8):
        v = i
        for k in range(N):
            v = v + {0: int(x[k % 5]), 1: 1, 2: 2, 3: 0}[k % 4] if k % 4 != 2 or i < 3 else k
        expect.append(v % 2**32)
    assert run(p, [x])[0].tolist() == expect


def test_ten_thousand_nested_divergent_ifs():
    """Level j (0 outermost) is entered by invocation i while i + j < T and counts itself, so
    invocation i ends with min(N, max(0, T - i)); the innermost level also stores a flag."""
    n, T = 64, N - 20
    body: list = [ir.store("flag", ir.gid(0), ir.u32(1))]
    for j in reversed(range(N)):
        body = [ir.If(ir.BinOp("lt", ir.BinOp("add", ir.gid(0), ir.u32(j)), ir.u32(T)),
                      (ir.assign("c", ir.var("c") + ir.u32(1)), *body), ())]
    p = ir.Program([B.output("y", 0, "u32", n), B.output("flag", 1, "u32", n)], 16,
                   [ir.let("c", ir.u32(0)), *body, ir.store("y", ir.gid(0), ir.var("c"))])
    y, flag = run(p)
    assert y.tolist() == [min(N, max(0, T - i)) for i in range(n)]
    assert flag.tolist() == [int(T - i >= N) for i in range(n)]


def test_ten_thousand_nested_blocks_with_a_return_at_the_bottom():
    n = 10
    inner: tuple = (ir.if_(ir.BinOp("eq", ir.gid(0) % ir.u32(2), ir.u32(1)), ir.return_()),)
    for _ in range(N):
        inner = (ir.assign("c", ir.var("c") + ir.u32(1)), ir.Block(inner))
    p = ir.Program([B.output("y", 0, "u32", n)], n,
                   [ir.let("c", ir.u32(0)), ir.Block(inner), ir.store("y", ir.gid(0), ir.var("c"))])
    assert run(p)[0].tolist() == [N if i % 2 == 0 else 0 for i in range(n)]


def test_two_thousand_nested_loops_of_one_trip():
    depth, n = 2_000, 4
    body: tuple = (ir.assign("c", ir.var("c") + ir.gid(0)),)
    for k in reversed(range(depth)):
        v = f"v{k}"
        body = (ir.Loop(v, ir.u32(k), ir.u32(k + 1), (ir.assign("c", ir.var("c") + ir.var(v)), *body)),)
    p = ir.Program([B.output("y", 0, "u32", n)], n,
                   [ir.let("c", ir.u32(0)), *body, ir.store("y", ir.gid(0), ir.var("c"))])
    assert run(p)[0].tolist() == [depth * (depth - 1) // 2 + i for i in range(n)]


def test_deep_loops_still_count_work_and_name_the_innermost():
    depth = 3_000
    body: tuple = (ir.Loop("spin", ir.u32(0), ir.u32(2**32 - 1), (ir.assign("c", ir.var("c") + ir.u32(1)),)),)
    for k in range(depth):
        body = (ir.Block(body),)
    p = ir.Program([B.output("y", 0, "u32", 1)], 1, [ir.let("c", ir.u32(0)), *body, ir.store("y", 0, ir.var("c"))])
    with shallow_stack(), pytest.raises(DispatchError, match=r"loop over 'spin' at entry\[1\]\.block\[0\]"):
        ReferenceBackend(work_budget=10**6).dispatch(p, [])
