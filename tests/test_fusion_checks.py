"""Fused sequences (`dispatch_sequence(fuse=True)`, `fuse`) and megakernels run what the unfused
sequence runs and refuse what it refuses: buffers declared writable that no step of a fused group
stores to (as a plain buffer, a would-be scratch buffer or the change flag), and every check a
step's own resident dispatch makes of its buffers."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.errors import DispatchError, VyreError

B = ir.BufferDecl
N = 40


def _decl(name: str, binding: int, writable: bool) -> B:
    return B.read_write(name, binding, "u32") if writable else B.read(name, binding, "u32")


def unwritten_steps(where: str, writer: bool) -> list[ir.Program]:
    """s0: a[i] += u[i] + u[0] + 1; s1: b[i] = a[i] * 3 + u[i] (b a pure output), fusing into one
    kernel; `u` declared read_write by s0, s1 or both (`where`) and stored to by neither. With
    `writer`, a third step (a stage of its own: it stores u[0] from every invocation) sets u[0] to
    1 while a[i] < 3, so a flag `u` converges after a few rounds."""
    i = ir.var("i")
    s0 = ir.Program([B.read_write("a", 0, "u32"), _decl("u", 1, where in ("s0", "both"))], 8,
                    [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("a"), [
                        ir.store("a", i, ir.load("a", i) + ir.load("u", i) + ir.load("u", ir.lit(0, "u32")) + 1)])],
                    name="s0")
    s1 = ir.Program([B.read("a", 0, "u32"), _decl("u", 1, where in ("s1", "both")), B.output("b", 2, "u32")], 8,
                    [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("b"), [
                        ir.store("b", i, ir.load("a", i) * 3 + ir.load("u", i))])], name="s1")
    out = [s0, s1]
    if writer:
        out.append(ir.Program([B.read("a", 0, "u32"), B.read_write("u", 1, "u32")], 8,
                              [ir.let("i", ir.gid(0)), ir.if_((i < ir.buf_len("a")) & (ir.load("a", i) < 3), [
                                  ir.store("u", ir.lit(0, "u32"), ir.lit(1, "u32"))])], name="writer"))
    return out


def fresh(be, programs):
    a = be.upload(np.arange(N, dtype=np.uint32) % 2)
    u = be.upload(np.zeros(N, np.uint32))
    b = be.upload(np.full(N, 7, np.uint32))
    bound = {"s0": [a, u], "s1": [a, u, b], "writer": [a, u]}
    return [(p, bound[p.name]) for p in programs], {"a": a, "u": u, "b": b}


def unfused(be, programs, kind: str, max_rounds: int):
    """What the sequence does run step by step: (the buffers' contents, rounds, converged)."""
    steps, bufs = fresh(be, programs)
    rounds, converged = max_rounds, None
    for r in range(1, max_rounds + 1):
        if kind == "flag":
            be.write(bufs["u"], [0])
        be.dispatch_sequence(steps)
        if kind == "flag" and not be.download(bufs["u"], 0, 1)[0]:
            rounds, converged = r, True
            break
    else:
        converged = False if kind == "flag" else None
    return {k: be.download(v) for k, v in bufs.items()}, rounds, converged


CASES = [(kind, where, writer, mode, rounds)
         for kind, where, writer, (mode, rounds) in itertools.product(
             ["plain", "scratch", "flag"], ["s0", "s1", "both"], [False, True],
             [("fuse", 1), ("megakernel", 1), ("megakernel", 3), ("megakernel", 6)])
         if not (kind == "flag" and mode == "fuse") and not (kind == "flag" and rounds == 1)]


@pytest.mark.parametrize("kind, where, writer, mode, max_rounds", CASES)
def test_a_buffer_declared_writable_that_no_fused_step_stores_runs_as_unfused(kind, where, writer, mode, max_rounds):
    be = vn.get_backend("reference")
    programs = unwritten_steps(where, writer)
    want, rounds, converged = unfused(be, programs, kind, max_rounds)
    steps, bufs = fresh(be, programs)
    names = ["a", "b"] + (["u"] if kind != "scratch" else [])
    read = [(bufs[k],) for k in names]
    if mode == "fuse":
        plan = be.fuse(steps, read)
        assert plan.groups[0] == [0, 1], plan
        got = be.dispatch_sequence(steps, read, fuse=True)
    else:
        with be.megakernel(steps, read, until=bufs["u"] if kind == "flag" else None, max_rounds=max_rounds) as mk:
            assert mk.mode == "megakernel", mk.reason
            assert mk.groups[0] == [0, 1], mk.groups
            result = mk.run()
        got = result.outputs
        assert (result.rounds, result.converged) == (rounds, converged)
    for name, g in zip(names, got):
        np.testing.assert_array_equal(g, want[name], err_msg=name)


def test_a_fused_program_declares_an_unwritten_buffer_read_only_and_no_output():
    be = vn.get_backend("reference")
    steps, bufs = fresh(be, unwritten_steps("both", False))
    program = be.fuse(steps, [(bufs["b"],)]).program
    u = program.buffer("u")
    assert (u.access, u.output) == (ir.Access.READ_ONLY, False)
    ir.validate(program)
