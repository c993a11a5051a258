"""Megakernels (`backend.megakernel`): generated sequences give the same bits as one launch per step,
on the reference backend (half of them on a persistent grid of 1-3 workgroups, so every stage loops)
and on the GPU;
grid barriers stand only where fusion keeps a boundary; rounds run to convergence on the device;
sequences that cannot be one program, or grids that cannot be co-resident, fall back and say why."""
from __future__ import annotations

import re

import numpy as np
import pytest

import vyre_numba as vn
from races import assert_close_waits_for_users
from test_fusion import random_sequence
from vyre_numba import DispatchConfig, ir
from vyre_numba.errors import DispatchError

B = ir.BufferDecl


def shared_reverse(k: int, wg: int = 32) -> ir.Program:
    """out[i] = a[the mirror of i within its workgroup] + b[i], through workgroup memory."""
    i, lid = ir.gid(0), ir.lid(0)
    body = [ir.store("t", lid, ir.load("a", i)), ir.barrier(),
            ir.if_(i < ir.buf_len("out"), [ir.store("out", i, ir.load("t", (wg - 1) - lid) + ir.load("b", i))])]
    return ir.Program([B.read("a", 0, "u32"), B.read("b", 1, "u32"), B.output("out", 2, "u32"),
                       B.workgroup("t", wg, "u32")], wg, body, name=f"shared{k}")


def block_ids(k: int) -> ir.Program:
    """out[i] = a[i] ^ (workgroup id * 1000 + workgroups): launch geometry a stage must keep."""
    i = ir.gid(0)
    v = ir.load("a", i) ^ (ir.wgid(0) * 1000 + ir.num_workgroups(0) + ir.gid(1) + ir.wgid(2))
    return ir.Program([B.read("a", 0, "u32"), B.read("b", 1, "u32"), B.read_write("out", 2, "u32")], 32,
                      [ir.if_(i < ir.buf_len("out"), [ir.store("out", i, v)])], name=f"ids{k}")


def sequence(seed: int):
    """test_fusion's generated sequences, with steps using workgroup memory, launch ids and
    repeats mixed in."""
    rng = np.random.default_rng(seed)
    specs, pool, reads, keep = random_sequence(rng, None)
    out = []
    for k, (p, bufs) in enumerate(specs):
        r = rng.random()
        if r < 0.15:
            p = shared_reverse(k)
        elif r < 0.25:
            p = block_ids(k)
        config = DispatchConfig(fixpoint_iterations=2) if rng.random() < 0.1 else None
        out.append((p, bufs, config))
    return out, pool, sorted(set(reads) | set(keep))


def compare(be, seeds, oracle=None) -> int:
    """Megakernel against one launch per step (on `oracle`, the same backend by default); the
    number of seeds whose megakernel had a grid barrier."""
    oracle = oracle or be
    barriers = 0
    for seed in seeds:
        specs, pool, reads = sequence(seed)
        results = []
        for b, mega in ((oracle, False), (be, True)):
            bufs = [b.upload(p) for p in pool]
            steps = [(p, [bufs[x] for x in xs], c) for p, xs, c in specs]
            if mega:
                small = 1 + seed % 3 if b.name == "reference" and seed % 2 else None  # a grid of 1-3: stages loop
                with b.megakernel(steps, [(bufs[r],) for r in reads], workgroups=small) as mk:
                    assert mk.mode == "megakernel", (seed, mk.reason)
                    got = mk.run().outputs
                    barriers += mk.barriers > 0
            else:
                got = b.dispatch_sequence(steps, [(bufs[r],) for r in reads])
            results.append(got)
        for want, got in zip(*results):
            assert np.array_equal(want, got), seed
    return barriers


def test_generated_sequences_give_the_same_bits_as_a_megakernel_on_the_reference_backend():
    assert compare(vn.get_backend("reference"), range(150)) > 20


@pytest.mark.gpu
def test_generated_sequences_give_the_same_bits_as_a_megakernel_on_the_gpu():
    assert compare(vn.get_backend("cuda"), range(120), vn.get_backend("reference")) > 20


def _pipeline(be, n: int):
    """x -> y = 2x (same index) -> z = y reversed (another index) -> w = z*z (same index)."""
    i = ir.gid()
    p1 = ir.Program([B.read("x", 0, "u32"), B.read_write("y", 1, "u32")], 64,
                    [ir.if_(i < ir.buf_len("x"), [ir.store("y", i, ir.load("x", i) * 2)])], name="dbl")
    p2 = ir.Program([B.read("y", 0, "u32"), B.read_write("z", 1, "u32")], 64,
                    [ir.if_(i < ir.buf_len("y"), [ir.store("z", i, ir.load("y", ir.buf_len("y") - 1 - i) + 1)])],
                    name="rev")
    p3 = ir.Program([B.read("z", 0, "u32"), B.output("w", 1, "u32")], 64,
                    [ir.if_(i < ir.buf_len("z"), [ir.store("w", i, ir.load("z", i) * ir.load("z", i))])], name="sq")
    x = be.upload(np.arange(n, dtype=np.uint32))
    y, z, w = (be.empty(n, np.uint32) for _ in range(3))
    return [(p1, [x, y]), (p2, [y, z]), (p3, [z, w])], (x, y, z, w)


def test_grid_barriers_stand_only_where_fusion_keeps_a_boundary():
    be = vn.get_backend("reference")
    steps, (x, y, z, w) = _pipeline(be, 1000)
    mk = be.megakernel(steps, [(w,)])
    assert mk.mode == "megakernel" and mk.groups == [[0], [1, 2]] and mk.barriers == 1
    assert "other than its own" in str(mk.boundaries[0])
    assert sum(isinstance(s, ir.Barrier) for s in ir.walk(mk.program.entry)) == 1
    want = ((np.arange(1000, dtype=np.uint32)[::-1] * 2 + 1) ** 2).astype(np.uint32)
    r = mk.run()
    assert r.mode == "megakernel" and r.reason is None and r.rounds == 1 and r.converged is None
    assert np.array_equal(r.outputs[0], want)


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_buffer_kept_is_stored_as_the_sequence_leaves_it(name):
    """y is written only inside the one fused stage and not read back: scratch, unless kept."""
    be = vn.get_backend(name)
    i = ir.gid()
    bump = ir.Program([B.read_write("x", 0, "u32")], 64,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])], name="bump")
    affine = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32")], 64,
                        [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) * 3 + 1)])], name="affine")
    start = np.arange(100, dtype=np.uint32)
    x, y = be.upload(start), be.upload(np.full(100, 7, np.uint32))
    with be.megakernel([(bump, [x]), (affine, [x, y])], [(x,)], keep=[y]) as mk:
        assert mk.mode == "megakernel" and mk.groups == [[0, 1]]
        assert np.array_equal(mk.run().outputs[0], start + 1)
    assert np.array_equal(be.download(y), (start + 1) * 3 + 1)
    with pytest.raises(DispatchError, match="keep=.*Fix:"):
        be.megakernel([(bump, [x])], keep=5)


def test_what_a_megakernel_was_planned_from_cannot_be_changed():
    """Regression (a red-team): mk.max_rounds = 5 after planning was taken silently; the persistent
    program still ran the planned rounds while run() reported 5 (the fallbacks ran 5)."""
    from vyre_numba.errors import ImmutableError

    be = vn.get_backend("reference")
    steps, (x, y, z, w) = _pipeline(be, 64)
    mk = be.megakernel(steps, [(x,)], max_rounds=2)
    for name, value in (("max_rounds", 5), ("until", None), ("steps", ()), ("read", ())):
        with pytest.raises(ImmutableError, match=f"Megakernel.{name} is fixed once it is planned.*Fix: plan another"):
            setattr(mk, name, value)
    with pytest.raises(ImmutableError, match="Fix:"):
        del mk.max_rounds
    assert mk.max_rounds == 2 and isinstance(mk.steps, tuple) and mk.run().rounds == 2
    mk.close()


def test_without_a_flag_the_rounds_run_exactly_max_rounds_times():
    be = vn.get_backend("reference")
    steps, (x, y, z, w) = _pipeline(be, 300)
    i = ir.gid()
    back = ir.Program([B.read("w", 0, "u32"), B.read_write("x", 1, "u32")], 64,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("w", i) + i)])], name="back")
    steps = steps + [(back, [w, x])]
    want = be.dispatch_repeated([], steps, 3, [(x,)])[0]
    x2 = be.upload(np.arange(300, dtype=np.uint32))  # x itself now holds the three rounds' result
    steps2 = [(p, [x2 if b is x else b for b in bs]) for p, bs in steps]
    r = be.megakernel(steps2, [(x2,)], max_rounds=3).run()
    assert (r.rounds, r.converged) == (3, None) and np.array_equal(r.outputs[0], want)


def relabel_steps(be, seg: np.ndarray, labels: np.ndarray):
    """Min-label propagation along a path cut into segments: each round, every item takes the
    smallest label of itself and its same-segment neighbours, setting flag[0] when it changed."""
    i, n = ir.gid(), ir.buf_len("lab")
    left, right = ir.select(i > 0, i - 1, i), ir.select(i + 1 < n, i + 1, i)

    def nb(j):
        return ir.select(ir.load("seg", j) == ir.load("seg", i), ir.load("lab", j), ir.load("lab", i))

    best = ir.min_(ir.load("lab", i), ir.min_(nb(left), nb(right)))
    find = ir.Program([B.read("seg", 0, "u32"), B.read("lab", 1, "u32"), B.read_write("nxt", 2, "u32"),
                       B.read_write("flag", 3, "u32")], 128,
                      [ir.if_(i < n, [ir.let("b", best), ir.store("nxt", i, ir.var("b")),
                                      ir.if_(ir.var("b") != ir.load("lab", i), [ir.store("flag", 0, 1)])])],
                      name="find")
    take = ir.Program([B.read("nxt", 0, "u32"), B.read_write("lab", 1, "u32")], 128,
                      [ir.if_(i < ir.buf_len("lab"), [ir.store("lab", i, ir.load("nxt", i))])], name="take")
    s, lab = be.upload(seg), be.upload(labels)
    nxt, flag = be.empty(len(labels), np.uint32), be.empty(1, np.uint32)
    return [(find, [s, lab, nxt, flag]), (take, [nxt, lab])], lab, flag


def relabel_numpy(seg, labels, max_rounds):
    lab = labels.copy()
    for r in range(1, max_rounds + 1):
        left = np.where(seg[np.maximum(np.arange(len(lab)) - 1, 0)] == seg, lab[np.maximum(np.arange(len(lab)) - 1, 0)], lab)
        idx = np.minimum(np.arange(len(lab)) + 1, len(lab) - 1)
        right = np.where(seg[idx] == seg, lab[idx], lab)
        new = np.minimum(lab, np.minimum(left, right))
        if np.array_equal(new, lab):
            return lab, r, True
        lab = new
    return lab, max_rounds, False


def run_relabel(be, n, seg_len, max_rounds, seed=0, workgroups=None):
    rng = np.random.default_rng(seed)
    seg = (np.arange(n) // seg_len).astype(np.uint32)
    labels = rng.permutation(n).astype(np.uint32)
    steps, lab, flag = relabel_steps(be, seg, labels)
    with be.megakernel(steps, [(lab,)], until=flag, max_rounds=max_rounds, workgroups=workgroups) as mk:
        r = mk.run()
        again = mk.run()  # a second run starts from the first's labels: one round, nothing changes
    want, rounds, converged = relabel_numpy(seg, labels, max_rounds)
    return mk, r, again, want, rounds, converged


@pytest.mark.parametrize("workgroups", [None, 2])  # 2: every round loops over its items (grid-stride)
@pytest.mark.parametrize("max_rounds", [200, 7])
def test_rounds_repeat_on_the_device_until_the_flag_stays_zero(max_rounds, workgroups):
    be = vn.get_backend("reference")
    mk, r, again, want, rounds, converged = run_relabel(be, 1500, 40, max_rounds, workgroups=workgroups)
    assert mk.mode == "megakernel" and mk.barriers == 4  # find | take, then three around the flag
    assert mk.workgroups == (2 if workgroups else -(-1500 // mk.program.workgroup_size[0]))
    assert np.array_equal(r.outputs[0], want)
    assert (r.rounds, r.converged) == (rounds, converged) and converged == (max_rounds == 200)
    if converged:
        assert (again.rounds, again.converged) == (1, True)


@pytest.mark.gpu
@pytest.mark.parametrize("n, seg_len, workgroups", [(1, 1, None), (1000, 1000, None), (1 << 20, 60, None),
                                                    (100_000, 30, 1), (300_001, 64, 3)])
def test_rounds_to_convergence_on_the_gpu_match_numpy(n, seg_len, workgroups):
    be = vn.get_backend("cuda")
    mk, r, again, want, rounds, converged = run_relabel(be, n, seg_len, 10_000, 1, workgroups)
    assert r.mode == "megakernel", r.reason
    assert np.array_equal(r.outputs[0], want) and (r.rounds, r.converged) == (rounds, True)
    assert (again.rounds, again.converged) == (1, True) and r.device_ns > 0


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_until_without_max_rounds_runs_to_convergence_and_without_until_once(name):
    """Regression (an API review): max_rounds defaulted to 1, so `until=` without it ran one round
    and returned converged=False, a half-finished result that looked like an answer."""
    be = vn.get_backend(name)
    seg = (np.arange(900) // 45).astype(np.uint32)
    labels = np.random.default_rng(3).permutation(900).astype(np.uint32)
    steps, lab, flag = relabel_steps(be, seg, labels)
    with be.megakernel(steps, [(lab,)], until=flag) as mk:
        assert mk.max_rounds == vn.megakernel.UNTIL_ROUNDS == 10_000
        r = mk.run()
    want, rounds, converged = relabel_numpy(seg, labels, 10_000)
    assert converged and rounds > 2 and (r.rounds, r.converged) == (rounds, True)
    assert np.array_equal(r.outputs[0], want)
    assert (r.device_ns is None) == (name == "reference")  # no device clock on the CPU (a host time is no device's)
    steps, lab, flag = relabel_steps(be, seg, labels)
    with be.megakernel(steps, [(lab,)]) as mk:
        r = mk.run()
    assert mk.max_rounds == 1 and (r.rounds, r.converged) == (1, None)
    assert np.array_equal(r.outputs[0], relabel_numpy(seg, labels, 1)[0])


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_converged_round_ends_the_launch_however_large_max_rounds_is(name):
    """The rounds after convergence are not spun through: with max_rounds at its largest (2**31 - 1)
    the launch still ends once the flag stays zero (before, every invocation looped to max_rounds)."""
    be = vn.get_backend(name)
    top = vn.megakernel.MAX_ROUNDS  # the largest allowed (regression: the constant was one past it)
    mk, r, again, want, rounds, converged = run_relabel(be, 3000, 50, top)
    assert mk.mode == "megakernel" and converged and rounds < 60
    assert any(isinstance(x, ir.nodes.Return) for x in ir.walk(mk.program.entry))
    assert np.array_equal(r.outputs[0], want) and (r.rounds, r.converged) == (rounds, True)
    assert (again.rounds, again.converged) == (1, True)
    if name == "cuda":
        assert r.device_ns < 1e9, r.device_ns  # looping to 2**31 took seconds


def test_steps_that_cannot_share_a_launch_fall_back_to_graph_replay_and_say_why():
    be = vn.get_backend("reference")
    steps, (x, y, z, w) = _pipeline(be, 100)
    p = steps[1][0]
    early = ir.Program(p.buffers, p.workgroup_size, [ir.if_(ir.gid() > 5000, [ir.return_()])] + list(p.entry),
                       name="early")
    cases = [([steps[0], (early, steps[1][1]), steps[2]], "returns early"),
             ([steps[0], (p, steps[1][1], DispatchConfig(cooperative=True)), steps[2]], "cooperative"),
             ([steps[0], (ir.Program(p.buffers, 32, p.entry, name="narrow"), steps[1][1]), steps[2]],
              "workgroups differ"),
             ([steps[0], (p, steps[1][1], DispatchConfig(fixpoint_iterations=1000)), steps[2]], "unroll")]
    want = be.dispatch_sequence(steps, [(w,)])[0]
    for seq, why in cases:
        with be.megakernel(seq, [(w,)]) as mk:
            assert mk.mode == "graph" and why in mk.reason and "fall" in repr(mk)
            r = mk.run()
            assert r.mode == "graph" and why in r.reason
            if why != "unroll":
                assert np.array_equal(r.outputs[0], want)
    with be.megakernel(steps, [(w,)], workgroups=10**5) as mk:  # more than the reference's persistent grid
        assert mk.mode == "graph" and "co-resident" in mk.reason
        assert np.array_equal(mk.run().outputs[0], want)


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_fallback_repeats_to_convergence_too(name):
    be = vn.get_backend(name)
    seg = (np.arange(300) // 25).astype(np.uint32)
    labels = np.random.default_rng(3).permutation(300).astype(np.uint32)
    steps, lab, flag = relabel_steps(be, seg, labels)
    with be.megakernel(steps, [(lab,)], until=flag, max_rounds=500, workgroups=10**5) as mk:
        r = mk.run()
    want, rounds, _ = relabel_numpy(seg, labels, 500)
    assert r.mode == "graph" and np.array_equal(r.outputs[0], want) and (r.rounds, r.converged) == (rounds, True)
    assert "co-resident" in r.reason


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("workgroups", [None, 10**5])  # a megakernel; one falling back to a recorded graph
def test_a_close_from_another_thread_waits_for_the_run_in_flight(name, workgroups):
    be = vn.get_backend(name)
    steps, (x, y, z, w) = _pipeline(be, 1000)
    want = ((np.arange(1000, dtype=np.uint32)[::-1] * 2 + 1) ** 2).astype(np.uint32)
    mk = be.megakernel(steps, [(w,)], workgroups=workgroups)
    assert (mk.mode == "megakernel") == (workgroups is None)
    assert_close_waits_for_users(lambda: np.array_equal(mk.run().outputs[0], want), mk.close, "megakernel was closed")
    assert mk._graph is None  # nothing recorded after the close


def test_a_plan_is_made_once_per_sequence_and_counted():
    be = vn.get_backend("reference")
    steps, (x, y, z, w) = _pipeline(be, 64)
    be.reset_telemetry()
    for _ in range(3):
        be.megakernel(steps, [(w,)]).run()
    t = be.telemetry()
    assert (t["megakernel_plan_misses"], t["megakernel_plan_hits"], t["megakernel_runs"]) == (1, 2, 3)
    be.megakernel(steps, [(w,)], workgroups=10**5).run()
    assert be.telemetry()["megakernel_fallbacks"] == 1


@pytest.mark.parametrize("name", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_labelled_steps_count_once_a_round_in_every_mode(name):
    """Regression (a red-team): a megakernel counted no `dispatches[label]` for its steps, where a
    sequence, a fused sequence, a replay and the megakernel's fallback count each."""
    be = vn.get_backend(name)
    steps, (x, y, z, w) = _pipeline(be, 64)
    steps = [(p, bs, DispatchConfig(label=label)) for (p, bs), label in zip(steps, ["dbl", "rev", "dbl"])]
    counts = []
    for run, mode in ((lambda: be.megakernel(steps, [(w,)], max_rounds=3).run().mode, "megakernel"),
                      (lambda: be.megakernel(steps, [(w,)], max_rounds=3, workgroups=10**5).run().mode, "graph"),
                      (lambda: [be.dispatch_sequence(steps, [(w,)]) for _ in range(3)] and None, None)):
        be.reset_telemetry()
        assert run() == mode
        t = be.telemetry()
        counts.append((t.get("dispatches[dbl]"), t.get("dispatches[rev]")))
    assert counts == [(6, 3)] * 3


def test_bad_calls_say_how_to_fix_them():
    be = vn.get_backend("reference")
    steps, (x, y, z, w) = _pipeline(be, 64)
    stray = be.empty(1, np.uint32)
    bad = [lambda: be.megakernel([]), lambda: be.megakernel(steps, until=stray),
           lambda: be.megakernel(steps, until=be.empty(1, np.float32)),
           lambda: be.megakernel(steps, max_rounds=0), lambda: be.megakernel(steps, max_rounds=True),
           lambda: be.megakernel(steps, workgroups=0), lambda: be.megakernel([("nope", [x])]),
           lambda: be.megakernel([(steps[0][0], [x, y], "fast")]), lambda: be.megakernel(steps, read=[(w, -1)]), lambda: be.megakernel(steps, read=[5])]
    for call in bad:
        with pytest.raises(DispatchError, match="Fix:"):
            call()
    mk = be.megakernel(steps)
    mk.close()
    mk.close()
    with pytest.raises(DispatchError, match="closed"):
        mk.run()


def test_float_change_flag_is_refused():
    be = vn.get_backend("reference")
    i = ir.gid()
    p = ir.Program([B.read_write("f", 0, "f32")], 32, [ir.if_(i < 1, [ir.store("f", 0, 1.0)])], name="f")
    f = be.empty(1, np.float32)
    with pytest.raises(DispatchError, match="integer"):
        be.megakernel([(p, [f])], until=f)


@pytest.mark.parametrize("view", [np.int32, np.float32])
def test_a_change_flag_seen_through_another_type_is_refused(view):
    """Regression (a red-team): until=f.view(...) was taken, ran as a megakernel and failed in the
    fallback (a generated program refused it), so whether it ran hung on the device's plan."""
    be = vn.get_backend("reference")
    i = ir.gid()
    p = ir.Program([B.read_write("f", 0, "u32")], 32, [ir.if_(i < 1, [ir.store("f", 0, 0)])], name="f")
    f = be.upload(np.ones(1, np.uint32))
    with pytest.raises(DispatchError, match=f"until= is a {np.dtype(view)} view of `f` of step 0, a u32 buffer.*Fix: "
                                            "pass the buffer the step binds itself"):
        be.megakernel([(p, [f])], until=f.view(view))
    with be.megakernel([(p, [f])], until=f, max_rounds=3) as mk:
        assert mk.run().converged


def test_megakernel_programs_assemble_for_every_target_without_a_gpu():
    from vyre_numba import ptx

    be = vn.get_backend("reference")
    seg = (np.arange(100) // 10).astype(np.uint32)
    steps, lab, flag = relabel_steps(be, seg, np.arange(100, dtype=np.uint32)[::-1].copy())
    programs = [be.megakernel(steps, [(lab,)], until=flag, max_rounds=50).program]
    for seed in range(6):
        specs, pool, reads = sequence(seed)
        bufs = [be.upload(p) for p in pool]
        programs.append(be.megakernel([(p, [bufs[x] for x in xs], c) for p, xs, c in specs]).program)
    for program in programs:
        for sm in (80, 90):
            text = ptx.emit(program, sm=sm, cooperative=True)
            assert "vyre_grid_barrier" in text or not any(isinstance(s, ir.Barrier) and s.scope == "grid"
                                                          for s in ir.walk(program.entry))
            assert ptx.assemble(text, sm=sm)


def test_step_variables_named_like_the_megakernel_own_never_collide():
    """A step whose variables and buffers are named as the persistent program names its own
    (idx, j, _stride, w0_t...) runs the same."""
    be = vn.get_backend("reference")
    i = ir.gid()
    p = ir.Program([B.read("w0_t", 0, "u32"), B.read_write("_stats", 1, "u32"), B.workgroup("t", 32, "u32")], 32,
                   [ir.let("idx", i * 3), ir.let("j", ir.var("idx") + 1), ir.let("_stride", ir.u32(5)),
                    ir.store("t", ir.lid(), ir.var("j")), ir.barrier(),
                    ir.if_(i < ir.buf_len("_stats"), [ir.store("_stats", i, ir.load("w0_t", i) + ir.var("_stride")
                                                                + ir.load("t", 31 - ir.lid()) + ir.wgid())])],
                   name="names")
    src = np.arange(100, dtype=np.uint32)
    a, b = be.upload(src), be.empty(100, np.uint32)
    want = be.dispatch_sequence([(p, [a, b]), (p, [a, b])], [(b,)])[0]
    b2 = be.empty(100, np.uint32)
    with be.megakernel([(p, [a, b2]), (p, [a, b2])], [(b2,)]) as mk:
        assert mk.mode == "megakernel", mk.reason
        assert np.array_equal(mk.run().outputs[0], want)


@pytest.mark.filterwarnings("ignore::vyre_numba.CoverageWarning")  # 'acc' counts the first 32 of x on purpose
def test_found_by_red_team_each_runs_as_the_unfused_sequence():
    """Cases a red-team run found: a repeated step's pure output zeroed once, a store whose value
    holds an atomic kept, a buffer read before it is written never scratch, the flag left as the
    last round set it."""
    be = vn.get_backend("reference")
    i, v = ir.gid(), ir.var("i")

    def both(steps_of, read_of, **kw):
        want_bufs, got_bufs = steps_of(), steps_of()
        want = be.dispatch_repeated([], want_bufs[0], kw.get("max_rounds", 1), read_of(want_bufs[1]))
        with be.megakernel(got_bufs[0], read_of(got_bufs[1]), **kw) as mk:
            got = mk.run().outputs
            again = mk.run().outputs
        again_want = be.dispatch_repeated([], want_bufs[0], kw.get("max_rounds", 1), read_of(want_bufs[1]))
        for a, b in zip(want + again_want, got + again):
            assert np.array_equal(a, b), (a, b)

    acc = ir.Program([B.read("x", 0, "u32"), B.output("c", 1, "u32")], 32,
                     [ir.if_(i < ir.buf_len("x"), [ir.let("o", ir.atomic("add", "c", i % 4, ir.load("x", i)))])],
                     name="acc")

    def repeated():
        x, c = be.upload(np.arange(64, dtype=np.uint32)), be.empty(4, np.uint32)
        return [(acc, [x, c], DispatchConfig(fixpoint_iterations=3))], [c]
    both(repeated, lambda b: [(b[0],)])

    p0 = ir.Program([B.read_write("c", 0, "u32"), B.read_write("out", 1, "u32")], 32,
                    [ir.let("i", ir.gid()), ir.store("out", v, ir.atomic("add", "c", v, 1))], name="s0")
    p1 = ir.Program([B.read_write("out", 0, "u32")], 32, [ir.let("i", ir.gid()), ir.store("out", v, 5)], name="s1")

    def atomic_store():
        c, out = be.upload(np.arange(64, dtype=np.uint32)), be.empty(64, np.uint32)
        return [(p0, [c, out]), (p1, [out])], [c, out]
    both(atomic_store, lambda b: [(b[0],), (b[1],)])

    add = ir.Program([B.read("x", 0, "u32"), B.read_write("y", 1, "u32")], 32,
                     [ir.let("i", ir.gid()), ir.if_(v < ir.buf_len("y"), [ir.store("y", v, ir.load("y", v) + ir.load("x", v))])],
                     name="accumulate")
    dbl = ir.Program([B.read("y", 0, "u32"), B.read_write("z", 1, "u32")], 32,
                     [ir.let("i", ir.gid()), ir.if_(v < ir.buf_len("z"), [ir.store("z", v, ir.load("y", v) * 2)])], name="dbl")

    def carried():
        x, y, z = be.upload(np.ones(8, np.uint32)), be.upload(np.zeros(8, np.uint32)), be.empty(8, np.uint32)
        return [(add, [x, y]), (dbl, [y, z])], [z]
    both(carried, lambda b: [(b[0],)])

    flagp = ir.Program([B.read_write("x", 0, "u32"), B.read_write("flag", 1, "u32")], 32,
                       [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1),
                                                     ir.if_(i == 0, [ir.store("flag", 0, 1)])])], name="f")
    for workgroups in (None, 10**5):
        x, f = be.upload(np.zeros(64, np.uint32)), be.empty(1, np.uint32)
        r = be.megakernel([(flagp, [x, f])], [(f,), (x, 0, 2)], until=f, max_rounds=3, workgroups=workgroups).run()
        assert (r.rounds, r.converged, r.outputs[0].tolist(), r.outputs[1].tolist()) == (3, False, [1], [3, 3])


def test_steps_are_checked_as_their_own_dispatch_would_check_them():
    be = vn.get_backend("reference")
    i = ir.gid()
    ro = ir.Program([B.read("x", 0, "u32"), B.read_write("y", 1, "u32")], 32,
                    [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 100)])], name="ro")
    x, y = be.upload(np.zeros(8, np.uint32)), be.empty(8, np.uint32)
    for call in (lambda: be.megakernel([(ro, [x, y]), (ro, [x, y])]), lambda: be.fuse([(ro, [x, y]), (ro, [x, y])])):
        with pytest.raises(vn.IRValidationError, match="Fix:"):
            call()
    assert be.download(x).tolist() == [0] * 8
    inc = ir.Program([B.read("x", 0, "u32"), B.read_write("y", 1, "u32")], 32,
                     [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i) + 1)])], name="inc")
    with pytest.raises(DispatchError, match="no step may write"):
        be.megakernel([(inc, [x, y])], until=x)
    e = be.empty(0, np.uint32)
    with pytest.raises(DispatchError, match="empty"):
        be.megakernel([(inc, [x, y]), (inc, [x, e])], until=e)
    for bad in ([(y, 5, 100)], [(y, [0], 1)], [(y, 1.5)], [(y, True, 1)], [(y, -1, 2)]):
        with pytest.raises(DispatchError, match="Fix:"):
            be.megakernel([(inc, [x, y])], bad)
    same = ir.Program(inc.buffers, 32, inc.entry, name="same")
    with be.megakernel([(inc, [x, y], DispatchConfig(workgroup=32)), (same, [x, y])]) as mk:
        assert mk.mode == "megakernel", mk.reason


def test_a_fallback_failure_names_the_callers_step_and_the_rounds_that_completed():
    from vyre_numba.reference import ReferenceBackend

    be = ReferenceBackend(work_budget=50_000)
    i = ir.gid(0)
    inc = ir.Program([B.read_write("x", 0, "u32"), B.read_write("flag", 1, "u32")], 32,
                     [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1), ir.store("flag", 0, 1)])],
                     name="inc")
    busy = ir.Program([B.read("x", 0, "u32"), B.read_write("y", 1, "u32")], 64,
                      [ir.if_(i < ir.buf_len("y"), [ir.loop("k", 0, ir.load("x", 0) * 5, [ir.store("y", i, ir.var("k"))])])],
                      name="busy")
    x, f, y = be.upload(np.zeros(4, np.uint32)), be.empty(1, np.uint32), be.empty(4, np.uint32)
    mk = be.megakernel([(inc, [x, f]), (busy, [x, y])], [(x,), (y,)], until=f, max_rounds=100)
    assert mk.mode == "graph"
    with pytest.raises(vn.VyreError) as e:
        mk.run()
    assert str(e.value).startswith("round 5 of the megakernel's graph fallback, step 1 (rounds 1 to 4 completed and "
                                   "their writes stay; the flag `until` was cleared; step 0 of round 5 ran and its "
                                   "writes stay; nothing of step 1 ran): dispatch of 'busy'")
    assert be.download(x).tolist() == [5] * 4 and be.download(y).tolist() == [19] * 4
    assert be.telemetry()["graph_replays"] == 4


@pytest.mark.parametrize("until, max_rounds, loops, when", [
    (True, 1000, 1, r"within one of its at most 1000 rounds"),  # inside a stage: which round is not known
    (True, 1000, 20, r"within one of its at most 1000 rounds"),
    (False, 1000, 1, r"at the start of round 5 of at most 1000 \(after 4 rounds\)"),  # charging the round loop
    (True, 1, 200, r"within its one round"),
    (False, 1, 200, r"within its one round"),
])
def test_a_megakernel_out_of_the_work_budget_says_so_in_the_callers_terms_and_writes_nothing(
        until, max_rounds, loops, when):
    from vyre_numba.reference import ReferenceBackend

    be = ReferenceBackend(work_budget=100_000)
    i = ir.gid(0)
    p = ir.Program([B.read_write("x", 0, "u32"), B.read_write("flag", 1, "u32")], 32,
                   [ir.if_(i < ir.buf_len("x"), [ir.loop("k", 0, loops, [ir.store("x", i, ir.load("x", i) + 1)]),
                                                 ir.store("flag", 0, 1)])], name="busy")
    q = ir.Program(p.buffers, 32, p.entry, name="again")
    x, f = be.upload(np.arange(64, dtype=np.uint32)), be.upload(np.array([7], np.uint32))
    with be.megakernel([(p, [x, f]), (q, [x, f])], [(x,)], until=f if until else None, max_rounds=max_rounds) as mk:
        assert mk.mode == "megakernel", mk.reason
        with pytest.raises(DispatchError) as e:
            mk.run()
    text = str(e.value)
    assert re.match(f"the megakernel of steps 'busy', 'again' ran out of the reference backend's work budget "
                    rf"of 1e\+05 units {when}\. The megakernel is one dispatch", text), text
    for said in ["every buffer is as it was before run()", "ReferenceBackend(work_budget=...)", "a budget of its own"] + \
            ([f"smaller max_rounds (now {max_rounds})"] if max_rounds > 1 else []):
        assert said in text, (said, text)
    assert ("smaller max_rounds" in text) == (max_rounds > 1), text
    assert "Fix:" in text and "'_round'" not in text and "_g0" not in text and "trip count" not in text, text
    assert be.download(x).tolist() == list(range(64)) and be.download(f).tolist() == [7]


def test_a_megakernel_launch_failing_otherwise_names_the_megakernel_and_its_steps(monkeypatch):
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(8, np.uint32))
    i = ir.gid(0)
    p = ir.Program([B.read_write("x", 0, "u32")], 4, [ir.if_(i < 8, [ir.store("x", i, 1)])], name="one")

    def refuse(*args, **kwargs):
        raise DispatchError("launch refused. Fix: something.")

    with be.megakernel([(p, [x])]) as mk:
        monkeypatch.setattr(be, "dispatch_resident", refuse)
        with pytest.raises(DispatchError, match=r"^the megakernel of step 'one' \(one persistent launch of the "
                                                r"generated program 'megakernel_one'\): launch refused\. Fix:"):
            mk.run()


def test_results_compare_by_identity_not_by_their_arrays():
    """Regression (a red-team): == and hash() of a MegakernelResult raised raw ValueError and
    TypeError (its outputs are arrays); FixpointResult compared fine."""
    import copy

    backend = vn.get_backend("reference")
    x = backend.upload(np.arange(4, dtype=np.uint32))
    p = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64,
                   [ir.if_(ir.gid(0) < ir.buf_len("x"), [ir.store("x", ir.gid(0), ir.load("x", ir.gid(0)) + 1)])],
                   name="inc")
    r = backend.megakernel([(p, [x])], [(x,)]).run()
    twin = copy.deepcopy(r)
    assert r == r and r != twin and hash(r) == hash(r) and len({r, twin}) == 2
    assert np.array_equal(twin.outputs[0], r.outputs[0]) and twin.rounds == r.rounds  # compare the fields


def test_an_interrupt_in_the_readback_says_every_round_ran(monkeypatch):
    """Regression (a red-team): it carried no note and no rounds_ran, though all rounds ran."""
    be = vn.get_backend("reference")
    i = ir.gid()
    p = ir.Program([B.read_write("x", 0, "u32")], 32, [ir.if_(i < ir.buf_len("x"), [
        ir.store("x", i, ir.load("x", i) + 1)])], name="inc")
    x = be.upload(np.zeros(4, np.uint32))
    with be.megakernel([(p, [x])], [(x,)], max_rounds=3) as mk:
        real = be.download

        def interrupted(buf, *args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(be, "download", interrupted)
        with pytest.raises(KeyboardInterrupt) as e:
            mk.run()
        monkeypatch.setattr(be, "download", real)
    assert e.value.rounds_ran == 3 and "after all 3 round(s) ran; their writes stay" in "".join(e.value.__notes__)
    assert be.download(x).tolist() == [3] * 4


def test_an_interrupt_while_waiting_for_the_persistent_launch_says_it_went_ahead(monkeypatch):
    """Regression (a red-team): an interrupt in the wait for the launch (its synchronisation, or
    the round counters' read) came out bare, though every round it runs writes the buffers."""
    be = vn.get_backend("reference")
    i = ir.var("i")
    u = lambda v: ir.lit(v, "u32")  # noqa: E731
    inc = ir.Program([B.read_write("y", 0, "u32"), B.read_write("flag", 1, "u32")], 64,
                     [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.if_(ir.load("y", i) < u(5), [
                         ir.store("y", i, ir.load("y", i) + u(1)), ir.store("flag", u(0), u(1))])])], name="inc")
    for until in (True, False):
        y, flag = be.upload(np.zeros(4, np.uint32)), be.upload(np.zeros(1, np.uint32))
        with be.megakernel([(inc, [y, flag])], [(y, 0, 4)], until=flag if until else None, max_rounds=8) as mk:
            assert mk.mode == "megakernel", mk.reason
            if until:
                real = type(be).download
                monkeypatch.setattr(type(be), "download", lambda self, buf, *a, **k: (
                    (_ for _ in ()).throw(KeyboardInterrupt) if buf is mk._stats else real(self, buf, *a, **k)))
            else:
                monkeypatch.setattr(type(be), "synchronize", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
            with pytest.raises(KeyboardInterrupt) as e:
                mk.run()
            monkeypatch.undo()
        assert "waiting for the persistent launch, which was issued" in "".join(e.value.__notes__)
        assert be.download(y).tolist() == [5] * 4  # the rounds ran and their writes stayed

    import contextlib

    @contextlib.contextmanager
    def waits_then_interrupted():  # the GPU's device timer: its exit waits for the launch to end
        yield
        raise KeyboardInterrupt

    y, flag = be.upload(np.zeros(4, np.uint32)), be.upload(np.zeros(1, np.uint32))
    with be.megakernel([(inc, [y, flag])], [(y, 0, 4)], until=flag, max_rounds=8) as mk:
        monkeypatch.setattr(be, "device_timer", waits_then_interrupted, raising=False)
        monkeypatch.setattr(be, "device_clock", True, raising=False)  # the megakernel reads only a device clock
        with pytest.raises(KeyboardInterrupt) as e:
            mk.run()
        monkeypatch.undo()
    assert "waiting for the persistent launch, which was issued" in "".join(e.value.__notes__)


@pytest.mark.parametrize("invocations, stride, want", [
    (2**32 - 1, 2**31, [0, 2**31]), (2**32 - 1, 2**32 - 1, [0]), (2**32 - 1, 3 * 2**30, [0, 3 * 2**30]),
    (7, 3, [0, 3, 6]), (6, 3, [0, 3]), (0, 5, []), (1, 2**31, [0])])
def test_a_grid_stride_loop_covers_every_index_below_2_to_the_32(invocations, stride, want):
    """Regression (a red-team): the trips were (invocations + stride - 1) / stride in u32, which
    wrapped for an output of nearly 2**32 elements (a megakernel zeroes pure outputs in such a
    loop): 0 trips, the output never zeroed. Run by one invocation with the stride given."""
    from vyre_numba.ir.persistent import _stride_loop

    body = [ir.let("_stride", ir.u32(stride)),
            *_stride_loop("t", invocations, [ir.let("c", ir.atomic_add("out", 0, ir.u32(1))),
                                               ir.store("out", ir.var("c") + 1, ir.var("t_idx"))])]
    p = ir.Program([B.read_write("out", 0, "u32")], 1, body, name="strides")
    (out,) = vn.get_backend("reference").dispatch(p, [np.zeros(8, np.uint32)], DispatchConfig(grid=1))
    assert out[0] == len(want) and sorted(out[1:1 + out[0]].tolist()) == want


def test_a_reference_megakernel_sizes_its_grid_to_leave_room_for_its_undo_copies():
    """Regression (a red-team): the grid took half the memory budget whatever the copies needed,
    so a megakernel planned fine and then failed to run."""
    from vyre_numba.reference import ReferenceBackend

    rb, n = ReferenceBackend(memory_budget=2_000_000), 200_000
    i = ir.var("i")
    copy = ir.Program([ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.read_write("a", 1, "f32")], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("a"), [ir.store("a", i, ir.load("x", i))])],
                      name="copy")
    shift = ir.Program([ir.BufferDecl.read("a", 0, "f32"), ir.BufferDecl.read_write("b", 1, "f32")], 64,
                       [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("b"), [
                           ir.store("b", i, ir.load("a", (i + 1) % n))])], name="shift")
    x, a, b = np.arange(n, dtype=np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    steps = [(copy, [x, a]), (shift, [a, b])]
    want = rb.dispatch_sequence(steps, read=[(b, n - 3, 3)])
    a[:], b[:] = 0, 0
    mk = rb.megakernel(steps, read=[(b, n - 3, 3)])
    got = mk.run()
    assert got.mode == "megakernel"  # it planned one before too, and then its run was refused
    assert [g.tolist() for g in got.outputs] == [w.tolist() for w in want]


def _inc(wg: int) -> ir.Program:
    i = ir.gid(0)
    return ir.Program([ir.BufferDecl.read_write("y", 0, "u32")], wg,
                      [ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("y", i) + 1)])], name=f"inc{wg}")


@pytest.mark.parametrize("second, config", [(32, None), (64, None), (32, DispatchConfig(checked=True))],
                         ids=["megakernel", "graph", "sequence"])
def test_every_mode_runs_over_the_buffers_it_was_planned_with(second, config):
    """Regression (a red-team): the fallbacks ran over the caller's list as it was at run(), the
    megakernel over the buffers found when planning; a list changed between ran different buffers."""
    be = vn.get_backend("reference")
    a, b = be.upload(np.zeros(4, np.uint32)), be.upload(np.zeros(4, np.uint32))
    bufs = [a]
    mk = be.megakernel([(_inc(32), bufs), (_inc(second), [a], config)], [a])
    assert mk.mode == {32: "megakernel", 64: "graph"}[second] if config is None else mk.mode != "megakernel"
    bufs[0] = b
    mk.run()
    assert be.download(a).tolist() == [2] * 4 and be.download(b).tolist() == [0] * 4


@pytest.mark.parametrize("second", [32, 64], ids=["megakernel", "graph"])
@pytest.mark.parametrize("change", ["dtype", "read-only"])
def test_a_buffer_changed_since_planning_is_refused_in_the_callers_steps_and_the_plan_stays(second, change):
    """Regressions (a red-team): in the graph fallback a buffer made read-only before the first run
    turned the plan into "sequence" for good (the caller's mistake read as a refused recording),
    and one given another dtype was told as the inner sequence's step 1 "since it was recorded",
    with "what round 1 wrote is unknown (nothing ran)" and a Fix to record again."""
    be = vn.get_backend("reference")
    a = be.upload(np.zeros(8, np.uint32))
    mk = be.megakernel([(_inc(32), [a]), (_inc(second), [a])], [a])
    mode = mk.mode
    if change == "dtype":
        a.dtype = np.int32
        said = r"^Megakernel\.run: step 0's buffer 'y' was given dtype int32 since the megakernel was planned \(nothing ran\)\. Fix: put it back"
    else:
        a.setflags(write=False)
        said = r"^Megakernel\.run: step 0 writes 'y', and its array was made read-only since .*\(nothing ran\)\. Fix: make it writable"
    with pytest.raises(DispatchError, match=said):
        mk.run()
    a.dtype = np.uint32
    a.setflags(write=True)
    assert not a.any()
    got = mk.run()
    assert got.mode == mode == ("megakernel" if second == 32 else "graph") and got.outputs[0].tolist() == [2] * 8
    mk.close()


def test_a_fallback_past_a_recorded_graphs_launches_is_planned_as_a_sequence():
    """Regression (a review): with only the driver's refusals turning the graph fallback into a
    sequence, the recording's own launch limit (a LaunchError) made every run() fail."""
    from vyre_numba.recording import MAX_RECORDED_LAUNCHES

    be = vn.get_backend("reference")
    a = be.upload(np.zeros(1, np.uint32))
    with be.megakernel([(_inc(1), [a], DispatchConfig(fixpoint_iterations=MAX_RECORDED_LAUNCHES + 1))], [a]) as mk:
        assert mk.mode == "sequence" and f"more than a recorded graph holds ({MAX_RECORDED_LAUNCHES})" in mk.reason
        assert mk.run().outputs[0].tolist() == [MAX_RECORDED_LAUNCHES + 1]


def test_a_megakernel_result_used_as_the_list_of_reads_says_to_read_outputs():
    be = vn.get_backend("reference")
    a = be.upload(np.zeros(4, np.uint32))
    with be.megakernel([(_inc(32), [a])], [a]) as mk:
        with pytest.raises(vn.errors.ArgumentError, match=r"MegakernelResult is not a Python collection.*Fix: its reads "
                                                          r"are result\.outputs"):
            (out,) = mk.run()
        (out,) = mk.run().outputs
        assert out.tolist() == [2] * 4


def test_a_plan_is_not_reused_under_another_memory_budget():
    """Regression (a red-team): the cached plan kept the persistent grid sized under the old budget,
    and its run was refused as over the new one."""
    from vyre_numba.reference import ReferenceBackend

    i = ir.gid(0)
    nb = ir.Program([ir.BufferDecl.read("o", 0, "u32"), ir.BufferDecl.read_write("y", 1, "u32")], 64,
                    [ir.if_(i < ir.buf_len("y"),
                            [ir.store("y", i, ir.load("y", i) + ir.load("o", (i + 1) % ir.buf_len("o")))])])
    be = ReferenceBackend()
    y, z = be.upload(np.zeros(100_000, np.uint32)), be.upload(np.zeros(100_000, np.uint32))
    steps = [(_inc(64), [y]), (nb, [y, z])]
    wide = be.megakernel(steps, [(z, 0, 3)])
    wide.close()
    be.memory_budget = 1_500_000
    mk = be.megakernel(steps, [(z, 0, 3)])
    assert mk.workgroups < wide.workgroups
    assert mk.run().outputs[0].tolist() == [1, 1, 1]


def test_a_megakernel_whose_stages_together_pass_a_programs_limits_falls_back_and_says_why():
    """Regression (a red-team): two valid steps of 32 KiB of workgroup memory each planned as a
    megakernel (mode 'megakernel', no reason), whose run then refused the 64 KiB persistent
    program; 200 two-buffer steps bound 400 buffers in it, past the parameter limit."""
    ref = vn.get_backend("reference")
    i = ir.gid(0)

    def tiled(name):
        return ir.Program([B.read("a", 0, "u32"), B.read_write("o", 1, "u32"), B.workgroup("tile", 8192, "u32")], 64,
                          [ir.store("tile", ir.lid(0), ir.load("a", i) + 1), ir.barrier("workgroup"),
                           ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.load("tile", ir.lid(0)))])], name=name)

    a, o1, o2 = (ref.upload(np.arange(128, dtype=np.uint32)), ref.upload(np.zeros(128, np.uint32)),
                 ref.upload(np.zeros(128, np.uint32)))
    mk = ref.megakernel([(tiled("s0"), [a, o1]), (tiled("s1"), [o1, o2])], [(o2, 0, None)])
    assert mk.mode == "graph" and mk.reason == (
        "the steps do not make one valid persistent program (buffers: workgroup buffers take 65536 bytes (each "
        "rounded up to a multiple of 8), over the 49152-byte static shared-memory limit.)")
    assert mk.run().outputs[0].tolist() == list(range(2, 130))

    inc = ir.Program([B.read("a", 0, "u32"), B.output("o", 1, "u32")], 32,
                     [ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.load("a", i) + 1)])], name="inc")
    pairs = [(ref.upload(np.arange(8, dtype=np.uint32)), ref.upload(np.zeros(8, np.uint32))) for _ in range(200)]
    mk = ref.megakernel([(inc, [x, y]) for x, y in pairs], [(pairs[-1][1], 0, None)])
    assert mk.mode == "graph" and "bound buffers take" in mk.reason and "Fix" not in mk.reason
    assert mk.run().outputs[0].tolist() == list(range(1, 9))


def test_a_megakernel_grid_under_a_tight_budget_leaves_room_for_the_stats_undo_copy():
    """Regression (a red-team): with `until`, the plan's grid left out the 8 bytes of the stats
    buffer's undo copy, so under a budget that tight the run refused the grid it planned."""
    from vyre_numba.reference import ReferenceBackend
    from vyre_numba.reference import interpreter

    i = ir.gid(0)
    dec = ir.Program([B.read_write("l", 0, "u32"), B.read_write("f", 1, "u32")], 32,
                     [ir.if_(i < ir.buf_len("l"), [ir.if_(ir.load("l", i) > 0, [
                         ir.store("l", i, ir.load("l", i) - 1), ir.store("f", 0, 1)])])], name="dec")

    def planned(be):
        left, flag = be.upload(np.arange(1280, dtype=np.uint32) % 5), be.upload(np.zeros(1, np.uint32))
        return left, be.megakernel([(dec, [left, flag])], [(left, 0, 4)], until=flag, max_rounds=10)

    _, roomy = planned(ReferenceBackend(memory_budget=1 << 30))
    per_wg = interpreter.plan(roomy.program).workgroup_bytes((32, 1, 1))
    tight = ReferenceBackend(memory_budget=1280 * 4 + 4 + 7 * per_wg + 4)  # 7 workgroups and 4 bytes, not 8
    left, mk = planned(tight)
    assert (mk.mode, mk.workgroups) == ("megakernel", 6)
    r = mk.run()
    assert r.converged and r.outputs[0].tolist() == [0, 0, 0, 0] and not left.any()
