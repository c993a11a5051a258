"""Launch fusion (`backend.fuse`, `dispatch_sequence(fuse=True)`): generated sequences of steps
give the same bits fused and unfused, in every buffer read back or kept, on the reference backend
and on the GPU; each kind of dependency keeps its boundary and says why."""
from __future__ import annotations

import re

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.errors import DispatchError

B = ir.BufferDecl
OPS = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a ^ b, lambda a, b: ir.min_(a, b),
       lambda a, b: (a >> 3) + b, lambda a, b: a - b * 7, lambda a, b: ir.select(a < b, a, b + 1)]


def step_program(rng, k: int, cross: bool, guard: bool = True, out_kind: str = "output",
                 conditional: bool = False) -> ir.Program:
    """out[i] = op(a[i], b[i or i+1]) over u32, inside the usual bounds guard; `out` a pure output
    (zeroed at each dispatch) or read_write (kept where not stored), stored always or only where
    a[i] < b[i]."""
    i = ir.var("i")
    other = ir.load("b", i + 1) if cross else ir.load("b", i)
    value = OPS[int(rng.integers(len(OPS)))](ir.load("a", i), other)
    store = [ir.store("out", i, value)]
    if conditional:
        store = [ir.if_(ir.load("a", i) < ir.load("b", i), store)]
    body = [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("out"), store) if guard else store[0]]
    out = B.output("out", 2, "u32") if out_kind == "output" else B.read_write("out", 2, "u32")
    return ir.Program([B.read("a", 0, "u32"), B.read("b", 1, "u32"), out], 32, body, name=f"step{k}")


def random_sequence(rng, be):
    """Steps over a pool of u32 buffers of one length (and one of another), some reading a
    neighbour's element; the pool's initial contents; reads; kept buffers."""
    n = int(rng.choice([1, 31, 32, 100, 257]))
    pool = [rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(5)]
    pool += [rng.integers(0, 2**32, n + 5, dtype=np.uint64).astype(np.uint32) for _ in range(2)]
    specs = []
    for k in range(int(rng.integers(1, 9))):
        if rng.random() < 0.1:  # a launch of another size
            a, b, out = 5, 5, 6
        else:
            a, b = (int(x) for x in rng.integers(0, 5, 2))
            out = int(rng.choice([j for j in range(5) if j not in (a, b)]))  # a dispatch never aliases its output
        specs.append((step_program(rng, k, rng.random() < 0.2, guard=rng.random() < 0.9,
                                   out_kind=str(rng.choice(["output", "read_write"])),
                                   conditional=rng.random() < 0.3), (a, b, out)))
    reads = sorted({int(x) for x in rng.integers(0, 7, 2)})
    keep = sorted({int(x) for x in rng.integers(0, 7, 2)})
    return specs, pool, reads, keep


def run(be, specs, pool, reads, keep, fuse):
    bufs = [be.upload(p) for p in pool]
    steps = [(p, [bufs[a], bufs[b], bufs[o]]) for p, (a, b, o) in specs]
    plan = be.fuse(steps, [(bufs[r], 0, None) for r in reads], keep=[bufs[j] for j in keep]) if fuse else None
    if fuse:
        be.dispatch_sequence(plan.steps, [])
    else:
        be.dispatch_sequence(steps, [])
    return [be.download(bufs[j]) for j in sorted(set(reads) | set(keep))], plan


def check_backend(be, seeds):
    fused_some = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        specs, pool, reads, keep = random_sequence(rng, be)
        want, _ = run(be, specs, pool, reads, keep, False)
        got, plan = run(be, specs, pool, reads, keep, True)
        for w, g in zip(want, got):
            assert np.array_equal(w, g), (seed, plan)
        fused_some += any(len(g) > 1 for g in plan.groups)
    return fused_some


def test_generated_sequences_give_the_same_bits_fused_on_the_reference_backend():
    assert check_backend(vn.get_backend("reference"), range(300)) > 100


def _pipeline(be, n, ops):
    bufs = [be.upload(np.arange(n, dtype=np.uint32) * 2654435761 % 1000)] + [be.empty(n, np.uint32) for _ in ops]
    steps = []
    for k, cross in enumerate(ops):
        steps.append((step_program(np.random.default_rng(k), k, cross), [bufs[k], bufs[0], bufs[k + 1]]))
    return steps, bufs


def test_same_index_steps_fuse_into_one_kernel_whose_scratch_is_registers():
    be = vn.get_backend("reference")
    steps, bufs = _pipeline(be, 100, [False] * 6)
    plan = be.fuse(steps, [(bufs[-1], 0, 100)])
    assert plan.groups == [[0, 1, 2, 3, 4, 5]] and plan.boundaries == []
    text = str(plan.program)
    stores = re.findall(r"\b(out\w*)\[_i\] =", text)
    assert stores == ["out_5"] and "_r_out_4" in text  # intermediate outputs are variables; the one read back is stored
    want = be.dispatch_sequence(steps, [(bufs[-1], 0, 100)])[0]
    assert np.array_equal(be.dispatch_sequence(steps, [(bufs[-1], 0, 100)], fuse=True)[0], want)


def test_a_step_reading_another_index_of_what_an_earlier_step_wrote_keeps_its_boundary():
    be = vn.get_backend("reference")
    steps, bufs = _pipeline(be, 64, [False, False])
    i = ir.var("i")
    reader = ir.Program([B.read("a", 0, "u32"), B.output("out", 1, "u32")], 32,
                        [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("out"), [ir.store("out", i, ir.load("a", i + 1))])],
                        name="shift")
    extra = be.empty(64, np.uint32)
    plan = be.fuse(steps + [(reader, [bufs[2], extra])])
    assert plan.groups == [[0, 1], [2]]
    assert "index other than its own" in str(plan.boundaries[0]) and plan.boundaries[0].after == 1
    with pytest.raises(DispatchError, match="not one.*Fix:"):
        plan.program


@pytest.mark.parametrize("make, why", [
    (lambda body, i: body + [ir.barrier()], "barrier"),
    (lambda body, i: [body[0], ir.if_(i > 5, [ir.return_()])] + body[1:], "returns early"),
])
def test_steps_that_couple_invocations_keep_their_boundaries(make, why):
    be = vn.get_backend("reference")
    steps, bufs = _pipeline(be, 64, [False, False])
    p = steps[1][0]
    odd = ir.Program(p.buffers, p.workgroup_size, make(list(p.entry), ir.var("i")), name="odd")
    plan = be.fuse([steps[0], (odd, steps[1][1])])
    assert len(plan.groups) == 2 and why in str(plan.boundaries[0])


def test_launches_of_different_sizes_do_not_fuse():
    be = vn.get_backend("reference")
    a, b = _pipeline(be, 64, [False])[0], _pipeline(be, 65, [False])[0]
    plan = be.fuse(a + b)
    assert len(plan.groups) == 2 and "launches differ" in str(plan.boundaries[0])


def test_a_long_sequence_shows_a_bounded_repr_and_error():
    be = vn.get_backend("reference")
    a, b = _pipeline(be, 64, [False])[0], _pipeline(be, 65, [False])[0]
    plan = be.fuse((a + b) * 100)
    assert len(plan.groups) == 200 and len(plan.boundaries) == 199
    text = repr(plan)
    assert len(text) < 2000 and text.startswith("Fusion(200 kernels from 200 steps") and "194 more in .boundaries" in text
    with pytest.raises(DispatchError) as e:
        plan.program
    assert len(str(e.value)) < 2000 and "194 more in .boundaries" in str(e.value) and "Fix:" in str(e.value)


def test_bad_calls_say_how_to_fix_them():
    be = vn.get_backend("reference")
    with pytest.raises(DispatchError, match="no steps.*Fix:"):
        be.fuse([])
    steps, bufs = _pipeline(be, 8, [False])
    with pytest.raises(DispatchError, match="fuse=.*Fix:"):
        be.dispatch_sequence(steps, [], fuse="yes")
    for bad in ([("not a step", [])], [(steps[0][0], [bufs[0], bufs[1], "out"])],
                [(steps[0][0], [bufs[0], bufs[0], bufs[0]])], [(steps[0][0], steps[0][1], 7)], None):
        with pytest.raises(DispatchError, match="Fix:"):
            be.fuse(bad)
    for kw in (dict(keep=5), dict(keep=[object()]), dict(read=7)):
        with pytest.raises(DispatchError, match="Fix:"):
            be.fuse(steps, **kw)


@pytest.mark.gpu
def test_generated_sequences_give_the_same_bits_fused_on_the_gpu():
    be = vn.get_backend("cuda")
    assert check_backend(be, range(120)) > 40
    ref = vn.get_backend("reference")
    for seed in range(40):  # and the GPU's fused kernels give the reference's bits
        rng = np.random.default_rng(seed)
        specs, pool, reads, keep = random_sequence(rng, be)
        want, _ = run(ref, specs, pool, reads, keep, False)
        got, _ = run(be, specs, pool, reads, keep, True)
        for w, g in zip(want, got):
            assert np.array_equal(w, g), seed


def test_a_plan_is_made_once_per_sequence_and_buffers_and_reused():
    be = vn.get_backend("reference")
    steps, bufs = _pipeline(be, 50, [False, False, True])
    be.reset_telemetry()
    first = be.fuse(steps, [(bufs[-1], 0, 50)])
    again = be.fuse(steps, [(bufs[-1], 0, 50)])
    t = be.telemetry()
    assert (t["fusion_plan_misses"], t["fusion_plan_hits"]) == (1, 1)
    assert again.steps[0].program is first.steps[0].program and again.groups == first.groups
    other, obufs = _pipeline(be, 50, [False, False, True])  # the same programs over other buffers
    plan = be.fuse(other, [(obufs[-1], 0, 50)])
    assert be.telemetry()["fusion_plan_misses"] == 2 and plan.steps[0].buffers[0] is obufs[0]
    want = be.dispatch_sequence(other, [(obufs[-1], 0, 50)])[0]
    assert np.array_equal(be.dispatch_sequence(other, [(obufs[-1], 0, 50)], fuse=True)[0], want)


def test_outputs_are_zeroed_where_their_step_would_zero_them():
    """A pure output is zeroed at its step's dispatch, a read_write one keeps what it held: fused,
    each step still sees that (the zeroing is in the kernel, where the step was)."""
    be = vn.get_backend("reference")
    rng = np.random.default_rng(3)
    for out_kind in ("output", "read_write"):
        a = be.upload(np.arange(8, dtype=np.uint32))
        t, o = be.upload(np.full(8, 77, np.uint32)), be.upload(np.full(8, 77, np.uint32))
        steps = [(step_program(rng, 0, False), [a, a, t]),
                 (step_program(rng, 1, False, out_kind=out_kind, conditional=True), [t, a, o])]
        want = be.dispatch_sequence(steps, [(o, 0, 8)])[0]
        t[:], o[:] = 77, 77
        got = be.dispatch_sequence(steps, [(o, 0, 8)], fuse=True)[0]
        assert np.array_equal(got, want), out_kind


def test_an_output_longer_than_the_launch_keeps_its_boundary():
    be = vn.get_backend("reference")
    rng = np.random.default_rng(4)
    a, t = be.upload(np.arange(40, dtype=np.uint32)), be.empty(40, np.uint32)
    o = be.empty(100, np.uint32)
    steps = [(step_program(rng, 0, False), [a, a, t]), (step_program(rng, 1, False), [t, t, o])]
    cfg = DispatchConfig(grid=2)  # 64 invocations: the step zeroes 100 elements, a shared kernel only 64
    plan = be.fuse([(s[0], s[1], cfg) for s in steps], [(o, 0, 100)])
    assert len(plan.groups) == 2 and "zeroed at its dispatch" in str(plan.boundaries[0])


def test_a_view_of_a_buffer_read_back_or_used_elsewhere_is_not_scratch():
    be = vn.get_backend("reference")
    rng = np.random.default_rng(5)
    a, t, o = be.upload(np.arange(8, dtype=np.uint32)), be.empty(8, np.uint32), be.empty(8, np.uint32)
    steps = [(step_program(rng, 0, False), [a, a, t]), (step_program(rng, 1, False), [t, t, o])]
    whole = be.dispatch_sequence(steps, [(t, 0, 8)])[0]
    t[:] = 0
    assert np.array_equal(be.dispatch_sequence(steps, [(t[:4], 0, 4)], fuse=True)[0], whole[:4])
    t[:] = 0
    be.dispatch_sequence(be.fuse(steps, keep=[t[2:6]]).steps, [])
    assert np.array_equal(t, whole)  # a kept view keeps the whole buffer it is part of


def test_buffer_names_of_different_steps_never_collide():
    be = vn.get_backend("reference")
    i = ir.var("i")
    two = ir.Program([B.read("a", 0, "u32"), B.read("a_1", 1, "u32"), B.read_write("o", 2, "u32")], 32,
                     [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.load("a", i) + ir.load("a_1", i))])],
                     name="two")
    one = ir.Program([B.read("a", 0, "u32"), B.read_write("o", 1, "u32")], 32,
                     [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.load("o", i) * ir.load("a", i))])],
                     name="one")
    x, y, z = (be.upload(np.arange(8, dtype=np.uint32) + k) for k in range(3))
    o = be.empty(8, np.uint32)
    steps = [(two, [x, y, o]), (one, [z, o])]
    want = be.dispatch_sequence(steps, [(o, 0, 8)])[0]
    plan = be.fuse(steps, [(o, 0, 8)])
    assert len(plan.steps) == 1 and len({b.name for b in plan.program.buffers}) == 4
    assert np.array_equal(be.dispatch_sequence(plan.steps, [(o, 0, 8)])[0], want)


def test_a_buffer_read_before_it_is_written_carries_its_data_and_atomic_stores_stay():
    """Found by a red-team run: `y[i] += x[i]` then `z = 2y` fused kept y in a register that
    started from y and was never written back, so a second run read stale y; a store whose value
    holds an atomic was dropped as dead with the atomic's effect."""
    be = vn.get_backend("reference")
    v = ir.var("i")
    add = ir.Program([B.read("x", 0, "u32"), B.read_write("y", 1, "u32")], 32,
                     [ir.let("i", ir.gid()), ir.if_(v < ir.buf_len("y"), [ir.store("y", v, ir.load("y", v) + ir.load("x", v))])],
                     name="accumulate")
    dbl = ir.Program([B.read("y", 0, "u32"), B.read_write("z", 1, "u32")], 32,
                     [ir.let("i", ir.gid()), ir.if_(v < ir.buf_len("z"), [ir.store("z", v, ir.load("y", v) * 2)])], name="dbl")
    outs = []
    for fuse in (False, True):
        x, y, z = be.upload(np.ones(8, np.uint32)), be.upload(np.zeros(8, np.uint32)), be.empty(8, np.uint32)
        steps = [(add, [x, y]), (dbl, [y, z])]
        outs.append([be.dispatch_sequence(steps, [(z,)], fuse=fuse)[0] for _ in range(2)])
    assert [o.tolist() for o in outs[0]] == [o.tolist() for o in outs[1]] == [[2] * 8, [4] * 8]
    p0 = ir.Program([B.read_write("c", 0, "u32"), B.read_write("out", 1, "u32")], 32,
                    [ir.let("i", ir.gid()), ir.store("out", v, ir.atomic("add", "c", v, 1))], name="s0")
    p1 = ir.Program([B.read_write("out", 0, "u32")], 32, [ir.let("i", ir.gid()), ir.store("out", v, 5)], name="s1")
    c, out = be.upload(np.arange(32, dtype=np.uint32)), be.empty(32, np.uint32)
    plan = be.fuse([(p0, [c, out]), (p1, [out])], [(c,), (out,)])
    assert len(plan.steps) == 1
    be.dispatch_sequence(plan.steps)
    assert be.download(c).tolist() == list(range(1, 33)) and be.download(out).tolist() == [5] * 32


def test_guards_declaring_the_same_variable_stay_apart_and_the_sequence_fuses():
    be = vn.get_backend("reference")
    i = ir.var("i")
    p0 = ir.Program([B.read("a", 0, "u32"), B.read_write("y", 1, "u32"), B.read_write("z", 2, "u32")], 32,
                    [ir.let("i", ir.gid(0)),
                     ir.if_(i < ir.buf_len("y"), [ir.let("t", ir.load("a", i) + 1), ir.store("y", i, ir.var("t"))]),
                     ir.if_(i < ir.buf_len("y"), [ir.let("t", ir.load("a", i) + 2), ir.store("z", i, ir.var("t"))])],
                    name="p0")
    p1 = ir.Program([B.read("y", 0, "u32"), B.read_write("w", 1, "u32")], 32,
                    [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("w"), [ir.store("w", i, ir.load("y", i) * 2)])],
                    name="p1")
    runs = []
    for fuse in (False, True):
        a = be.upload(np.arange(8, dtype=np.uint32))
        y, z, w = (be.empty(8, np.uint32) for _ in range(3))
        runs.append([o.tolist() for o in be.dispatch_sequence([(p0, [a, y, z]), (p1, [y, w])],
                                                              [(y, 0, 8), (z, 0, 8), (w, 0, 8)], fuse=fuse)])
    assert runs[0] == runs[1] == [list(range(1, 9)), list(range(2, 10)), list(range(2, 17, 2))]
    a = be.upload(np.arange(8, dtype=np.uint32))
    y, z, w = (be.empty(8, np.uint32) for _ in range(3))
    assert be.megakernel([(p0, [a, y, z]), (p1, [y, w])], [(w, 0, 8)]).run().outputs[0].tolist() == list(range(2, 17, 2))


def test_a_fused_sequences_failure_says_scratch_buffers_hold_unspecified_contents():
    from vyre_numba.reference import ReferenceBackend

    be = ReferenceBackend(work_budget=100_000)
    i = ir.var("i")
    p0 = ir.Program([B.read("a", 0, "u32"), B.read_write("t", 1, "u32")], 32,
                    [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("t"), [ir.store("t", i, ir.load("a", i) + 1)])], name="p0")
    p1 = ir.Program([B.read("t", 0, "u32"), B.read_write("y", 1, "u32")], 32,
                    [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("t", i) * 2)])], name="p1")
    busy = ir.Program([B.read("y", 0, "u32"), B.read_write("z", 1, "u32")], 32,
                      [ir.let("i", ir.gid(0)), ir.loop("k", 0, ir.load("y", 0) * 100000, [ir.store("z", i, ir.var("k"))])],
                      name="busy")
    for fuse in (False, True):
        a = be.upload(np.arange(8, dtype=np.uint32))
        t, y, z = be.upload(np.full(8, 99, np.uint32)), be.empty(8, np.uint32), be.empty(8, np.uint32)
        with pytest.raises(DispatchError) as e:
            be.dispatch_sequence([(p0, [a, t]), (p1, [t, y]), (busy, [y, z])], [(z,)], fuse=fuse)
        scratch = "buffers fusion kept as scratch in them (written only inside a fused kernel, not read back or kept) hold unspecified contents"
        assert (scratch in str(e.value)) == fuse
        assert "steps 0 to 1 ran and their writes stay" in str(e.value)
        assert be.download(y).tolist() == list(range(2, 17, 2))


def test_reprs_count_in_the_singular_where_there_is_one():
    be = vn.get_backend("reference")
    a = _pipeline(be, 64, [False])[0]
    assert repr(be.fuse(a[:1])).startswith("Fusion(1 kernel from 1 step: ")
    x = be.upload(np.zeros(64, np.uint32))
    i = ir.gid()
    inc = ir.Program([B.read_write("x", 0, "u32")], 64, [ir.if_(i < ir.buf_len("x"), [
        ir.store("x", i, ir.load("x", i) + 1)])], name="inc")
    with be.megakernel([(inc, [x])], max_rounds=1) as mk:
        assert repr(mk) == "<Megakernel: 1 stage from 1 step, 0 grid barriers a round, 1 workgroup>"


def _whole_group_plan(shapes):
    """fusion.plan as first written: every further step checked against its whole group with
    _hazard (quadratic in a long group): the oracle of the plan that keeps what its group binds."""
    from vyre_numba.ir import fusion

    groups, boundaries = [], []
    facts = [fusion.accesses(s.program) for s in shapes]
    for k, s in enumerate(shapes):
        why = None
        if groups:
            if facts[k][1] or facts[k - 1][1]:
                why = "unfusable"
            elif (s.invocations, s.workgroup) != (shapes[k - 1].invocations, shapes[k - 1].workgroup):
                why = "launches"
            else:
                why = fusion._hazard(shapes, facts, groups[-1] + [k])
        if groups and why is None:
            groups[-1].append(k)
        else:
            if groups:
                boundaries.append((k - 1, why))
            groups.append([k])
    return groups, boundaries


def test_the_plan_equals_checking_each_whole_group_on_generated_sequences():
    """Regression (a red-team): each step was checked against its whole group, so 1,600 fusible
    steps took 79 s to fuse; the group's bindings are now kept as steps join. Views that overlap,
    types bound two ways, other-index reads and barriers all occur here."""
    from vyre_numba.backend import Step, _shape
    from vyre_numba.ir import fusion

    B = ir.BufferDecl
    rng = np.random.default_rng(7)

    def program(kind: int, dt: str) -> ir.Program:
        i = ir.var("i")
        src = {1: ir.load("a", i + 1), 2: ir.load("a", i)}.get(kind, ir.load("a", i) * 3 + 1)
        body = [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("out"), [ir.store("out", i, src)])]
        if kind == 3:
            body.insert(1, ir.barrier("workgroup"))
        return ir.Program([B.read("a", 0, dt), B.output("out", 1, dt)], 64, body)

    seen = set()
    for _ in range(150):
        big = np.zeros(192, np.uint32)
        pool = [np.zeros(64, np.uint32) for _ in range(5)] + [big[:64], big[64:128], big[32:96]]
        shapes = []
        for _ in range(int(rng.integers(2, 10))):
            a, o = rng.choice(len(pool), 2, replace=False)
            if a >= 5 and o >= 5:
                o = int(rng.integers(0, 5))
            bufs, dt = [pool[a], pool[o]], "u32"
            if rng.random() < 0.15:
                bufs, dt = [b.view(np.int32) for b in bufs], "i32"
            shapes.append(_shape(Step(program(int(rng.integers(0, 4)), dt), bufs), bufs))
        groups, boundaries = fusion.plan(shapes)
        want_groups, want = _whole_group_plan(shapes)
        assert groups == want_groups
        assert [b.after for b in boundaries] == [k for k, _ in want]
        for b, (_, why) in zip(boundaries, want):
            if why not in ("unfusable", "launches"):
                assert b.reason == why
                seen |= {kind for kind in ("overlaps", "touches", "bound as") if kind in why}
    assert seen == {"overlaps", "touches", "bound as"}, seen
