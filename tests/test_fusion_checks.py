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


def _readonly(a):
    a.flags.writeable = False
    return a


def _strided(be, n):
    return be.upload(np.zeros(2 * n, np.uint32))[::2]


# (what is wrong, the buffer bound to `x` of `inc`, declared read_write with 16 elements, or to `u`,
# declared read_write by `peek` that never stores it)
BAD = {
    "shorter than declared": ("x", lambda be: be.upload(np.zeros(8, np.uint32))),
    "read-only written": ("x", lambda be: _readonly(be.upload(np.zeros(16, np.uint32)))),
    "read-only declared writable, never stored": ("u", lambda be: _readonly(be.upload(np.zeros(16, np.uint32)))),
    "another dtype": ("x", lambda be: be.upload(np.zeros(16, np.int32))),
    "non-contiguous": ("x", lambda be: _strided(be, 16)),
}


def checked_steps(be, which: str):
    i = ir.gid(0)
    inc = ir.Program([B.read_write("x", 0, "u32", 16), B.read_write("u", 1, "u32")], 4,
                     [ir.if_(i < 16, [ir.store("x", i, ir.load("x", i) + ir.load("u", i) + 1)])], name="inc")
    peek = ir.Program([B.read("x", 0, "u32"), B.read_write("u", 1, "u32"), B.read_write("f", 2, "u32")], 4,
                      [ir.if_(i < 16, [ir.store("f", ir.lit(0, "u32"), ir.load("x", i) * 0 + ir.load("u", i) * 0)])],
                      name="peek")
    name, make = BAD[which]
    x = make(be) if name == "x" else be.upload(np.zeros(16, np.uint32))
    u = make(be) if name == "u" else be.upload(np.zeros(16, np.uint32))
    f = be.upload(np.zeros(1, np.uint32))
    return [(inc, [x, u]), (inc, [x, u]), (peek, [x, u, f])], [x, u, f]


@pytest.mark.parametrize("which", list(BAD))
@pytest.mark.parametrize("mode", ["fuse", "megakernel", "until"])
def test_fused_sequences_and_megakernels_refuse_what_each_steps_own_dispatch_refuses(which, mode):
    be = vn.get_backend("reference")
    steps, bufs = checked_steps(be, which)
    with pytest.raises(DispatchError) as own:
        be.dispatch_sequence(steps)
    steps, bufs = checked_steps(be, which)
    before = [b.copy() for b in bufs]
    with pytest.raises(DispatchError) as fused:
        if mode == "fuse":
            be.dispatch_sequence(steps, [(bufs[0],)], fuse=True)
        else:
            be.megakernel(steps, [(bufs[0],)], until=bufs[2] if mode == "until" else None, max_rounds=3).run()
    text = str(fused.value)
    assert "(nothing ran)" in text and text.endswith(str(own.value).split(": ", 1)[-1]), (text, str(own.value))
    assert "Fix:" in text
    for b, was in zip(bufs, before):
        np.testing.assert_array_equal(b, was)


class _Device:
    """A stand-in for a device array: only its `__cuda_array_interface__`, as a GPU backend reads it."""

    def __init__(self, shape, typestr="<u4", strides=None, readonly=False):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (0x10000, readonly), "version": 3}


@pytest.mark.parametrize("buf, match", [
    (_Device((16,)), None), (_Device((4, 4)), None), (_Device((16,), strides=(4,)), None),
    (_Device((8,)), "declared with 16 elements but has 8"),
    (_Device((16,), "<i4"), "declared u32 but the array holds int32"),
    (_Device((16,), strides=(8,)), "non-contiguous"),
    (_Device((4, 4), strides=(4, 16)), "non-contiguous"),
    (_Device((16,), readonly=True), "read-only"),
    (_Device((2**32,)), "lengths are u32"),
])
def test_the_host_checks_every_backend_shares_read_device_arrays_as_a_gpu_dispatch_does(buf, match):
    from vyre_numba.backend import Backend, Step

    inc = ir.Program([B.read_write("x", 0, "u32", 16)], 4, [ir.store("x", ir.gid(0), 1)], name="inc")
    if match is None:
        Backend._check_step(None, Step(inc, [buf]))
    else:
        with pytest.raises(DispatchError, match=f"{match}.*Fix:"):
            Backend._check_step(None, Step(inc, [buf]))


@pytest.mark.parametrize("which", list(BAD))
def test_the_shared_host_checks_refuse_what_the_reference_dispatch_refuses(which):
    from vyre_numba.backend import Backend, Step

    be = vn.get_backend("reference")
    steps, _ = checked_steps(be, which)
    for program, buffers in steps:
        try:
            be._check_step(Step(program, buffers))
        except DispatchError as e:
            with pytest.raises(DispatchError) as shared:
                Backend._check_step(be, Step(program, buffers))
            name = BAD[which][0]
            assert f"'{name}'" in str(shared.value) and f"'{name}'" in str(e), (str(shared.value), str(e))
            assert "Fix:" in str(shared.value)
        else:
            Backend._check_step(be, Step(program, buffers))
