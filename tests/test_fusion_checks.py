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


def _inc(name: str = "inc") -> ir.Program:
    i = ir.gid(0)
    return ir.Program([B.read("a", 0, "u32"), B.output("o", 1, "u32")], 32,
                      [ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.load("a", i) + 1)])], name=name)


def test_fusion_keeps_a_boundary_where_the_fused_kernel_would_pass_a_programs_limits():
    """Regression (a red-team): 200 valid two-buffer steps fused into one kernel of 400 buffers,
    past the kernel-parameter limit, and three steps of 655k nodes into one past MAX_NODES: each
    refused with an IRValidationError whose Fix did not apply. A boundary now stays, with why."""
    ref = vn.get_backend("reference")
    pairs = [(ref.upload(np.arange(8, dtype=np.uint32) + k), ref.upload(np.zeros(8, np.uint32))) for k in range(200)]
    steps = [(_inc(), [x, y]) for x, y in pairs]
    reads = [(y, 0, None) for _, y in pairs]
    plan = ref.fuse(steps, reads)
    assert [len(g) for g in plan.groups] == [181, 19]  # 362 buffers: 4,344 bytes of the 4,352
    assert str(plan.boundaries[0]) == ("after step 180: fused, the steps would bind 364 buffers, 4368 bytes of kernel "
                                       "parameters, over the 4352-byte limit")
    got = ref.dispatch_sequence(steps, reads, fuse=True)
    assert all(g.tolist() == list(range(k + 1, k + 9)) for k, g in enumerate(got))

    i = ir.gid(0)
    e = ir.load("a", i)
    for _ in range(17):
        e = e ^ (e >> 1)  # 2**17 uses of the load: about 655k nodes written out
    big = ir.Program([B.read("a", 0, "u32"), B.output("o", 1, "u32")], 32,
                     [ir.if_(i < ir.buf_len("o"), [ir.store("o", i, e)])], name="big")
    bufs = [ref.upload(np.arange(64, dtype=np.uint32))] + [ref.upload(np.zeros(64, np.uint32)) for _ in range(3)]
    plan = ref.fuse([(big, bufs[k:k + 2]) for k in range(3)], [(bufs[3], 0, None)])
    assert plan.groups == [[0], [1], [2]]
    assert {b.reason for b in plan.boundaries} == {"fused, the steps would be more than MAX_NODES = 1,048,576 IR nodes"}


def test_a_fused_kernel_has_the_work_budget_its_steps_had_together():
    """Regression (a red-team): on the reference backend each step of a sequence fitted its
    dispatch's work budget, but fused, the three shared one budget and the run was refused."""
    from vyre_numba.reference import ReferenceBackend

    i = ir.gid(0)
    summed = ir.Program([B.read("a", 0, "u32"), B.output("o", 1, "u32")], 32,
                        [ir.let("s", ir.u32(0)),
                         ir.loop("k", 0, 100, [ir.assign("s", ir.var("s") + ir.load("a", i) * ir.var("k"))]),
                         ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.var("s"))])], name="sum")
    be = ReferenceBackend(work_budget=250_000)
    bufs = [be.upload(np.arange(64, dtype=np.uint32))] + [be.upload(np.zeros(64, np.uint32)) for _ in range(3)]
    steps = [(summed, bufs[k:k + 2]) for k in range(3)]
    assert len(be.fuse(steps, [(bufs[3], 0, None)]).steps) == 1
    want = be.dispatch_sequence(steps, [(bufs[3], 0, None)])
    assert np.array_equal(be.dispatch_sequence(steps, [(bufs[3], 0, None)], fuse=True)[0], want[0])
    be.work_budget = 20_000  # each step alone runs out, and so does their kernel: three budgets, not more
    for fuse in (False, True):
        with pytest.raises(DispatchError, match="work budget of 2e\\+04 units" if not fuse else "6e\\+04 units"):
            be.dispatch_sequence(steps, [(bufs[3], 0, None)], fuse=fuse)
