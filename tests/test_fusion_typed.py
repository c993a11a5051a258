"""Generated sequences over buffers of every type (order-free atomics, change flags, conditional and
guarded stores, workgroup memory, launches of other sizes): fused (`backend.fuse`) and as a
megakernel (one or two rounds, or until a flag stays zero) they leave the same bits as the plain
sequence, in every buffer read back or kept, and a megakernel with `until=` counts the rounds a
host loop runs. test_fusion.py covers u32 pipelines and each dependency's boundary; this file
covers the types and statement kinds a sequence may mix."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import vyre_numba as vn
from strategies import ALL_TYPES, ATOMIC_TYPES, ORDER_FREE_ATOMICS, _Gen, host_arrays
from vyre_numba import DispatchConfig, ir
from vyre_numba.backend import Step
from vyre_numba.ir.optimizer import map_statements
from vyre_numba.testing import mismatches

B = ir.BufferDecl
D = ir.DataType
FLAG_TYPES = (D.U32, D.I32, D.U64, D.I64, D.U8)


class _SameIndex(_Gen):
    """Programs fusion may merge: no uniform-only statements, and mostly the invocation's own index."""

    def uniform_here(self) -> bool:
        return False

    def index(self, depth: int, buf: str | None = None):
        return ir.gid(0) if self.draw(st.integers(0, 2)) else super().index(depth, buf)


@st.composite
def sequences(draw):
    """(pool arrays, steps as (program, buffer name -> pool key, config), reads, keeps, flag type
    or None, each pool key's type): 1 to 4 steps over a pool of 3 to 6 buffers of any type, plus an atomic counter and
    a change flag that some steps use."""
    n = draw(st.sampled_from([1, 5, 31, 33, 64, 100]))
    wg = draw(st.sampled_from([1, 32, 33, 64]))
    types = [draw(st.sampled_from(ALL_TYPES)) for _ in range(draw(st.integers(3, 6)))]
    sizes = [n if draw(st.integers(0, 9)) else draw(st.sampled_from([n + 3, max(n - 1, 1), 4])) for _ in types]
    pool = {k: draw(host_arrays(t, m)) for k, (t, m) in enumerate(zip(types, sizes))}
    counter_type, counter_op = draw(st.sampled_from(ATOMIC_TYPES)), draw(st.sampled_from(ORDER_FREE_ATOMICS))
    flag_type = draw(st.sampled_from(FLAG_TYPES)) if draw(st.booleans()) else None
    pool["cnt"] = np.array([1, 2, 3, 0], counter_type.storage)
    steps = []
    for k in range(draw(st.integers(1, 4)) if draw(st.integers(0, 3)) == 0 else draw(st.integers(2, 4))):
        keys = list(range(len(types)))
        ins = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=min(3, len(keys) - 1), unique=True))
        outs = draw(st.lists(st.sampled_from([j for j in keys if j not in ins]), min_size=1, max_size=2, unique=True))
        bufs, names, own, counters = [], {}, [], {}
        for j, key in enumerate(ins):
            bufs.append(getattr(B, draw(st.sampled_from(["read", "read", "uniform"])))(f"in{j}", len(bufs), types[key]))
            names[f"in{j}"] = key
        for j, key in enumerate(outs):
            role = draw(st.sampled_from(["output", "read_write"]))
            bufs.append(getattr(B, role)(f"out{j}", len(bufs), types[key]))
            names[f"out{j}"] = key
            if role == "read_write" and draw(st.booleans()):
                own.append(f"out{j}")  # touched at the invocation's own index only
        if flag_type is not None and draw(st.integers(0, 2)) == 0:
            bufs.append(B.read_write("flag", len(bufs), flag_type, 0))
            names["flag"] = "flag"
        if draw(st.booleans()):
            bufs.append(B.read_write("cnt", len(bufs), counter_type, 4))
            names["cnt"], counters["cnt"] = "cnt", counter_op
        fusable = draw(st.integers(0, 5)) > 0
        if not fusable and draw(st.integers(0, 5)) == 0:
            bufs.append(B.workgroup("tile", wg, draw(st.sampled_from(ALL_TYPES))))
        g = (_SameIndex if fusable else _Gen)(draw, bufs, diff=True, max_depth=2, max_stmts=4, transcendentals=False,
                                               counters=counters, own=tuple(own))
        entry = []
        if any(b.is_shared for b in bufs):
            entry += [ir.store("tile", ir.lid(0), g.expr(bufs[-1].dtype, 1, weak_ok=True)), ir.barrier("workgroup")]
            g.shared_readable = ("tile",)
        index = ir.gid(0)
        if draw(st.booleans()):
            entry.append(ir.let("i", ir.gid(0)))
            index = ir.var("i")
        body = g.body(2, top=True)
        for b in bufs:
            if b.is_output and b.name not in counters:
                store = ir.store(b.name, index, g.expr(b.dtype, 1, weak_ok=True))
                body.append(ir.if_(index < ir.buf_len(b.name), [store]) if draw(st.booleans()) else store)
        entry += body
        if "flag" in names:
            changed = g.expr(D.BOOL, 2)
            how = draw(st.integers(0, 2))
            if how == 0:
                entry.append(ir.if_(changed, [ir.store("flag", 0, 1)]))
            elif how == 1 and flag_type in ATOMIC_TYPES:
                entry.append(ir.let("_set", ir.atomic("or", "flag", 0, ir.select(changed, ir.lit(1, flag_type),
                                                                                 ir.lit(0, flag_type)))))
            else:
                entry.append(ir.if_(changed, [ir.store("flag", ir.gid(0) % 4, 3)]))
        if fusable:
            entry = map_statements(entry, lambda s: None if isinstance(s, (ir.Return, ir.Barrier)) else s)
        grid = draw(st.sampled_from([None] * 6 + [1, 2]))
        steps.append((ir.Program(bufs, (wg, 1, 1), entry, name=f"s{k}"), names,
                      DispatchConfig(grid=(grid, 1, 1)) if grid else None))
    keys = list(range(len(types)))
    reads = draw(st.lists(st.sampled_from(keys + ["cnt"]), max_size=3, unique=True))
    keep = draw(st.lists(st.sampled_from(keys), max_size=2, unique=True))
    if flag_type is not None:
        pool["flag"] = np.zeros(draw(st.sampled_from([1, 4])), flag_type.storage)
    typed = dict(enumerate(types), cnt=counter_type, flag=flag_type)
    return pool, steps, reads, keep, flag_type if any("flag" in names for _, names, _ in steps) else None, typed


def _bound(be, seq):
    pool, steps = seq[0], seq[1]
    bufs = {k: be.upload(a.copy()) for k, a in pool.items()}
    return bufs, [Step(p, {nm: bufs[key] for nm, key in names.items()}, cfg) for p, names, cfg in steps]


def _differ(want: dict, got: dict, typed: dict) -> list:
    """The keys whose arrays differ (bit for bit, every NaN equal to every NaN, bf16's too)."""
    return [k for k in want if want[k].shape != got[k].shape
            or mismatches(want[k], got[k], bf16=typed[k] is D.BF16).size]


def check_sequence(be, seq, mode: str, rounds: int) -> None:
    pool, steps, reads, keep, flag_type, typed = seq
    if mode == "until" and flag_type is None:
        mode, rounds = "megakernel", 2
    which = list(dict.fromkeys(reads + keep + (["flag"] if mode == "until" else [])))
    ref = vn.get_backend("reference")
    bufs, plain = _bound(ref, seq)
    ran = None
    try:
        for r in range(rounds if mode != "fuse" else 1):
            if mode == "until":
                ref.write(bufs["flag"], np.zeros(1, flag_type.storage))
            ref.dispatch_sequence(plain, [])
            if mode == "until" and ref.download(bufs["flag"])[0] == 0:
                ran = r + 1
                break
        else:
            ran = rounds
    except vn.VyreError:  # a sequence the plain run refuses (a launch too small for an output, ...)
        return
    want = {k: ref.download(bufs[k]) for k in which}
    bufs, steps_ = _bound(be, seq)
    read, kept = [(bufs[k], 0, None) for k in reads], [bufs[k] for k in keep]
    if mode == "fuse":
        plan = be.fuse(steps_, read, keep=kept)
        be.dispatch_sequence(plan.steps, [])
        what = plan
    else:
        with be.megakernel(steps_, read, max_rounds=rounds, keep=kept,
                           until=bufs["flag"] if mode == "until" else None) as mk:
            result = mk.run()
            what = mk
        if mode == "until":
            assert result.rounds == ran, (result.rounds, ran, mk.mode)
    got = {k: be.download(bufs[k]) for k in which}
    assert not _differ(want, got, typed), (mode, _differ(want, got, typed), what, [str(p) for p, _, _ in steps])


MODES = st.sampled_from(["fuse", "megakernel", "until"])


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(sequences(), MODES, st.integers(1, 4))
def test_typed_sequences_fused_and_as_megakernels_equal_the_plain_sequence(seq, mode, rounds):
    check_sequence(vn.get_backend("reference"), seq, mode, rounds)


@pytest.mark.gpu
@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(sequences(), MODES, st.integers(1, 3))
def test_gpu_typed_sequences_fused_and_as_megakernels_equal_the_reference_plain_sequence(seq, mode, rounds):
    check_sequence(vn.get_backend("cuda"), seq, mode, rounds)
