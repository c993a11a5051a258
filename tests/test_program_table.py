"""Runs the program table (tests/program_table.py) on the reference interpreter and checks that
the table covers every operation, builtin, atomic op, data type, cast pair and (op, type) pair
that the validator accepts, so a new operation cannot be added untested.

Other backends reuse the table: `for case in CASES: run_case(backend, case)`.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from program_table import ALL_TYPES, CASES, Case, compare, run_case  # noqa: E402

from vyre_numba import ir  # noqa: E402
from vyre_numba.ir import DataType as D  # noqa: E402

# case id -> reason, for reference-interpreter bugs that have been reported to the lead.
KNOWN_REFERENCE_BUGS: dict[str, str] = {}


def _params():
    out = []
    for c in CASES:
        marks = ()
        if c.id in KNOWN_REFERENCE_BUGS:
            marks = (pytest.mark.xfail(strict=True, reason=f"reference bug: {KNOWN_REFERENCE_BUGS[c.id]}"),)
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@pytest.fixture(scope="module")
def reference():
    mod = pytest.importorskip("vyre_numba.reference")
    return mod.ReferenceBackend()


@pytest.mark.parametrize("case", _params())
def test_reference(reference, case: Case):
    outs = run_case(reference, case)  # compares every output with the table's expectation
    assert len(outs) == len(case.expected)


# ---- coverage ----------------------------------------------------------------------------------

def _typeof(e, bufs, env):
    """Result type of an expression in a (valid) table program."""
    match e:
        case ir.Lit():
            return e.dtype
        case ir.Var():
            return env[e.name]
        case ir.Load() | ir.Atomic():
            return bufs[e.buffer]
        case ir.BufLen() | ir.Builtin() | ir.SubgroupBallot():
            return D.U32
        case ir.BinOp():
            return D.BOOL if e.op in ir.CMP_BINOPS + ir.LOGIC_BINOPS else _typeof(e.a, bufs, env)
        case ir.UnOp():
            if e.op in ("popcount", "clz", "ctz"):
                return D.U32
            if e.op in ir.FLOAT_PRED_UNOPS + ir.BOOL_UNOPS:
                return D.BOOL
            return _typeof(e.a, bufs, env)
        case ir.Cast():
            return e.dtype
        case ir.Select():
            return _typeof(e.a, bufs, env)
        case ir.Fma():
            return _typeof(e.a, bufs, env)
        case ir.SubgroupShuffle():
            return _typeof(e.value, bufs, env)
        case ir.SubgroupAdd():
            return _typeof(e.value, bufs, env)
    raise AssertionError(f"unknown expression {e!r}")


def _collect_expr(e, bufs, env, seen):
    for x in ir.walk([e]):
        match x:
            case ir.BinOp():
                seen.add(("bin", x.op, _typeof(x.a, bufs, env)))
            case ir.UnOp():
                seen.add(("un", x.op, _typeof(x.a, bufs, env)))
            case ir.Cast():
                seen.add(("cast", _typeof(x.a, bufs, env), x.dtype))
            case ir.Select():
                seen.add(("select", _typeof(x.a, bufs, env)))
            case ir.Fma():
                seen.add(("fma", _typeof(x.a, bufs, env)))
            case ir.Atomic():
                seen.add(("atomic", x.op, bufs[x.buffer]))
            case ir.Builtin():
                seen.add(("builtin", x.name))
            case ir.SubgroupBallot() | ir.SubgroupShuffle() | ir.SubgroupAdd():
                seen.add(("subgroup", type(x).__name__))


def _collect_body(body, bufs, env, seen):
    env = dict(env)
    for s in body:
        match s:
            case ir.Let():
                _collect_expr(s.value, bufs, env, seen)
                env[s.name] = _typeof(s.value, bufs, env)
            case ir.Assign():
                _collect_expr(s.value, bufs, env, seen)
            case ir.Store():
                _collect_expr(s.index, bufs, env, seen)
                _collect_expr(s.value, bufs, env, seen)
            case ir.If():
                _collect_expr(s.cond, bufs, env, seen)
                _collect_body(s.then, bufs, env, seen)
                _collect_body(s.otherwise, bufs, env, seen)
            case ir.Loop():
                _collect_expr(s.start, bufs, env, seen)
                _collect_expr(s.end, bufs, env, seen)
                _collect_body(s.body, bufs, {**env, s.var: D.U32}, seen)
            case ir.Block():
                _collect_body(s.body, bufs, env, seen)
            case ir.Barrier():
                seen.add(("barrier", s.scope))
            case ir.Return():
                seen.add(("return",))


def covered() -> set:
    seen: set = set()
    for c in CASES:
        bufs = {b.name: b.dtype for b in c.program.buffers}
        seen.update(("type", b.dtype) for b in c.program.buffers)
        _collect_body(c.program.entry, bufs, {}, seen)
        if c.config is not None and c.config.fixpoint_iterations > 1:
            seen.add(("fixpoint",))
    return seen


def _valid(body, extra_bufs=(), keeps: str | None = None) -> bool:
    """Whether `body` validates (and, given `keeps`, its first value still has that op)."""
    bufs = [ir.BufferDecl.read(f"a_{t}", k, t) for k, t in enumerate(ALL_TYPES)]
    bufs += list(extra_bufs)
    p = ir.Program(bufs, 32, body)
    return not ir.validate(p) and (keeps is None or p.entry[0].value.op == keeps)


def _a(t):
    return ir.load(f"a_{t}", ir.u32(0))


def required() -> set:
    """Every (operation, type) the validator accepts, and every name of the IR's op tables."""
    req = {("type", t) for t in D}
    # (bool operands of & | ^ ~ are rewritten to logical operations, which are required as such)
    for op in ir.BINOPS:
        for t in D:
            if _valid([ir.let("r", ir.binary(op, _a(t), _a(t)))], keeps=op):
                req.add(("bin", op, t))
    for op in ir.UNOPS:
        for t in D:
            if _valid([ir.let("r", ir.unary(op, _a(t)))], keeps=op):
                req.add(("un", op, t))
    for s in D:
        for t in D:
            if _valid([ir.let("r", ir.cast(_a(s), t))]):
                req.add(("cast", s, t))
        if _valid([ir.let("r", ir.select(_a(D.BOOL), _a(s), _a(s)))]):
            req.add(("select", s))
        if _valid([ir.let("r", ir.fma(_a(s), _a(s), _a(s)))]):
            req.add(("fma", s))
        for op in ir.ATOMIC_OPS:
            rw = ir.BufferDecl.read_write("x", 100, s)
            kw = {"expected": _a(s)} if op == "compare_exchange" else {}
            if _valid([ir.let("r", ir.atomic(op, "x", ir.u32(0), _a(s), **kw))], [rw]):
                req.add(("atomic", op, s))
    req |= {("builtin", b) for b in ir.BUILTINS}
    req |= {("subgroup", k) for k in ("SubgroupBallot", "SubgroupShuffle", "SubgroupAdd")}
    req |= {("barrier", scope) for scope in ir.BARRIER_SCOPES}
    req |= {("return",), ("fixpoint",)}
    return req


def test_table_covers_every_operation_and_type():
    have = covered()
    req = required()
    # the op tables themselves: every name must be required (guards the validator probes above)
    names = {("bin", k[1]) for k in req if k[0] == "bin"} | {("un", k[1]) for k in req if k[0] == "un"}
    assert {("bin", op) for op in ir.BINOPS} <= names
    assert {("un", op) for op in ir.UNOPS} <= names
    assert {k[1] for k in req if k[0] == "atomic"} == set(ir.ATOMIC_OPS)
    missing = sorted(req - have, key=str)
    assert not missing, f"{len(missing)} (operation, type) pairs have no case in the program table: {missing}"


def test_table_shape():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert 200 <= len(CASES) <= 1000
    for c in CASES:
        ir.check(c.program)
        assert len(c.inputs) == len(c.program.inputs), c.id
        assert len(c.expected) == len(c.program.outputs), c.id
        for b, a in zip(c.program.inputs, c.inputs):
            assert a.dtype == b.dtype.storage, (c.id, b.name)
        for b, a in zip(c.program.outputs, c.expected):
            assert a.dtype == b.dtype.storage, (c.id, b.name)
    sizes = {a.size for c in CASES for a in c.inputs}
    assert {0, 1} <= sizes and any(s % 64 for s in sizes)


def test_compare_reports_mismatch():
    c = next(c for c in CASES if c.id == "bin_add_f32")
    got = [e.copy() for e in c.expected]
    compare(c, got)
    k = int(np.flatnonzero(np.isfinite(got[0]))[3])
    got[0].view(np.uint32)[k] ^= 1  # one ULP off
    with pytest.raises(AssertionError, match=rf"bin_add_f32: output 'out' \(f32\): 1 of \d+ elements differ:\n +\[{k}\] got"):
        compare(c, got)
    nan_case = next(c for c in CASES if c.id == "un_sqrt_f32")
    got = [e.copy() for e in nan_case.expected]
    got[0][np.isnan(got[0])] = -np.float32("nan")  # any NaN equals any NaN
    compare(nan_case, got)
    ulp_case = next(c for c in CASES if c.id == "un_exp_f32")
    got = [e.copy() for e in ulp_case.expected]
    fin = np.flatnonzero(np.isfinite(got[0]) & (got[0] > 1))
    got[0].view(np.uint32)[fin[:5]] += np.uint32(ulp_case.ulp)  # within budget
    compare(ulp_case, got)
    got[0].view(np.uint32)[fin[0]] += np.uint32(1)  # one past it
    with pytest.raises(AssertionError, match="tolerance 4 ulp"):
        compare(ulp_case, got)


# ---- errors the reference must raise (no GPU analogue: there these programs are undefined) --------

def test_reference_rejects_divergent_barrier(reference):
    from vyre_numba import DispatchError
    B = ir.BufferDecl
    prog = ir.Program([B.output("out", 0, "u32")], 64,
                      [ir.if_(ir.lid(0) < ir.u32(5), [ir.barrier("workgroup")]),
                       ir.store("out", ir.gid(0), ir.u32(1))])
    with pytest.raises(DispatchError):
        reference.dispatch(prog, [], sizes={"out": 64})


def test_reference_rejects_non_uniform_subgroup_op(reference):
    from vyre_numba import DispatchError
    B = ir.BufferDecl
    prog = ir.Program([B.output("out", 0, "u32")], 64,
                      [ir.if_(ir.lid(0) < ir.u32(5), [ir.store("out", ir.gid(0), ir.subgroup_add(ir.u32(1)))])])
    with pytest.raises(DispatchError):
        reference.dispatch(prog, [], sizes={"out": 64})
