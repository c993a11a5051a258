"""IR nested far beyond Python's recursion limit: every walker of the IR layer (construction,
validation, digest, JSON, text form, pickling) uses an explicit stack; past `ir.MAX_DEPTH` a
clear error says so. The reference interpreter and the emitter have deep tests of their own."""
from __future__ import annotations

import pickle

import pytest

from vyre_numba import ir
from vyre_numba.errors import IRValidationError

B = ir.BufferDecl
DEPTH = 10_000


def deep_sum(n: int = DEPTH) -> ir.Program:
    s = ir.load("x", 0)
    for k in range(1, n):
        s = s + ir.load("x", k % 7)
    return ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", 1)], 1, [ir.store("y", 0, s)])


def deep_ifs(n: int = DEPTH) -> ir.Program:
    body = [ir.store("y", 0, 1)]
    for k in range(n):
        body = [ir.if_(ir.load("x", 0) < k + 5, body)]
    return ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", 1)], 1, body)


@pytest.fixture(scope="module", params=["sum", "ifs"])
def program(request) -> ir.Program:
    return deep_sum() if request.param == "sum" else deep_ifs()


def test_deep_programs_validate(program):
    assert program.depth > DEPTH
    assert ir.validate(program) == []
    assert ir.check(program) is program


def test_deep_programs_have_a_stable_digest(program):
    again = deep_sum() if program.entry[0].__class__ is ir.Store else deep_ifs()
    assert again is not program and again.digest() == program.digest() and again == program


def test_deep_programs_round_trip_through_json(program):
    assert ir.Program.from_json(program.to_json()) == program
    indented = program.to_json(indent=2)
    assert ir.Program.from_json(indented) == program
    assert len(indented) < 40 * len(program.to_json())  # indentation stops growing: linear size


def test_deep_programs_render_as_linear_text(program):
    text = str(program)
    assert len(text) < 400 * DEPTH
    assert text.count("\n") >= (DEPTH if "if" in text else 2)


def test_deep_programs_pickle(program):
    assert pickle.loads(pickle.dumps(program)) == program
    node = program.entry[0]
    assert pickle.loads(pickle.dumps(node)) == node


def test_deep_validation_errors_name_a_bounded_location():
    body = [ir.store("y", 0, ir.f32(1.0))]  # wrong type, 10,000 levels down
    for k in range(DEPTH):
        body = [ir.if_(ir.load("x", 0) < k + 5, body)]
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", 1)], 1, body)
    (d,) = ir.validate(p)
    assert d.where.startswith("entry[0].then[0]") and d.where.endswith(".then[0]")
    assert "levels)" in d.where and len(d.where) < 400
    assert "value stored into y must be u32, got f32" in d.message


def test_past_the_depth_limit_construction_says_so():
    e = ir.var("a")
    with pytest.raises(IRValidationError, match=f"more than {ir.MAX_DEPTH} levels deep.*Fix:"):
        for _ in range(ir.MAX_DEPTH + 1):
            e = -e
    stmt = ir.return_()
    with pytest.raises(IRValidationError, match="levels deep.*Fix:"):
        for _ in range(ir.MAX_DEPTH + 1):
            stmt = ir.block(stmt)


def test_a_value_used_again_and_again_is_refused_past_the_size_limit_not_walked_for_hours():
    """Regression (a red-team): `e = e * e + e` twenty times is 20 lines of Python and 3**20 nodes
    written out; check, digest and dispatch walked every one (check took 7 s at 12, hours at 20)."""
    import time

    e = ir.load("a", ir.var("i"))
    start = time.perf_counter()
    with pytest.raises(IRValidationError, match=r"1,062,881 nodes written out, more than MAX_NODES = 1,048,576.*"
                                                r"Fix: bind a value used more than once to a variable \(ir\.let"):
        for _ in range(20):
            e = e * e + e
    assert time.perf_counter() - start < 5  # refused as it is built, nothing walked
    assert e.size == 531_440 and e.depth == 24  # the last tree under the limit
    body = ir.block(*[ir.store("y", ir.u32(k), ir.var("i") + k) for k in range(1000)])
    assert body.size == 1 + 1000 * 5  # a block and its stores: store, index, sum, its two leaves
    t = ir.let("t", ir.var("x") * ir.var("x"))  # the Fix: the variable is one node wherever it is used
    assert (ir.var("t") * ir.var("t") + ir.var("t")).size == 5 and t.size == 4


def test_a_program_whose_statements_share_a_value_is_refused_past_the_size_limit_at_once():
    """Regression (a red-team): the limit was each node's, so a value under it stored in 16
    statements (8.5 M nodes written out) took a minute and 690 MB to build into a Program, and
    every later walk as long; the program's total is known from its statements' sizes."""
    import time

    x = ir.load("x", ir.var("i"))
    e = x
    for _ in range(11):
        e = e * e + e
    bufs = [ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.output("out", 1, "f32")]
    start = time.perf_counter()
    with pytest.raises(IRValidationError, match=r"this program is 8,503,074 nodes written out, more than MAX_NODES.*"
                                                r"Fix: bind a value used more than once to a variable"):
        ir.Program(bufs, 64, [ir.let("i", ir.gid(0))] + [ir.store("out", ir.u32(k), e) for k in range(16)])
    assert time.perf_counter() - start < 1
    t = ir.let("t", e)  # the Fix: one statement holds it, the stores read the variable
    p = ir.Program(bufs, 64, [ir.let("i", ir.gid(0)), t] + [ir.store("out", ir.u32(k), ir.var("t")) for k in range(16)])
    assert sum(s.size for s in p.entry) == 2 + t.size + 16 * 3


def test_deep_steps_fuse_and_run_as_a_megakernel():
    """Regression (a red-team): fusion and the megakernel's plan recursed once per nesting level
    (a RecursionError past about 450 nested ifs), and a fused sequence's dead-store pass walked
    every nested if once per level above it (minutes at 10,000)."""
    import numpy as np

    import vyre_numba as vn

    be = vn.get_backend("reference")
    i = ir.var("i")
    body = [ir.store("o", i, ir.load("t", i) * 2)]
    for k in range(DEPTH):
        body = [ir.if_(i < ir.u32(DEPTH + 64 - k), body)]
    s0 = ir.Program([B.read("a", 0, "u32"), B.output("t", 1, "u32")], 64,
                    [ir.let("i", ir.gid(0)), ir.store("t", i, ir.load("a", i) + 1)], name="s0")
    s1 = ir.Program([B.read("t", 0, "u32"), B.output("o", 1, "u32")], 64, [ir.let("i", ir.gid(0))] + body,
                    name="s1")
    a, t, o = be.upload(np.arange(64, dtype=np.uint32)), be.empty(64, np.uint32), be.empty(64, np.uint32)
    want = (np.arange(64, dtype=np.uint32) + 1) * 2
    (got,) = be.dispatch_sequence([(s0, [a, t]), (s1, [t, o])], read=[(o,)], fuse=True, progress=False)
    assert np.array_equal(got, want)
    be.write(o, np.zeros(64, np.uint32))
    with be.megakernel([(s0, [a, t]), (s1, [t, o])], read=[(o,)]) as mk:
        assert np.array_equal(mk.run().outputs[0], want)


def test_a_value_shared_by_many_statements_is_typed_once_at_construction():
    """Regression (a red-team): each statement storing a partial sum of `s = s + x` had its whole sum
    typed again at construction (resolve_literals), 57 us a node written out: 2.6 s at 300 statements,
    8 s at 1,000. The checker keeps a typed node by its id and what it was wanted as, until a
    variable's type may change (a scope closes), so the statements' shared part is typed once; a
    node read under another type of its variable is typed afresh."""
    import time

    x = ir.load("x", ir.var("i"))
    bufs = [ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.output("out", 1, "f32")]
    body, s = [ir.let("i", ir.gid(0))], x
    for k in range(700):
        s = s + x
        body.append(ir.store("out", ir.u32(k % 16), s))
    start = time.perf_counter()
    p = ir.Program(bufs, 64, body)
    assert time.perf_counter() - start < 1.0  # about 0.03 s; 4 s before
    assert sum(st.size for st in p.entry) > 240_000 and ir.validate(p) == []
    t = ir.var("t") + 1  # one node, read where t is i32 and where it is f32: each typed for its own
    two = ir.Program([ir.BufferDecl.output("a", 0, "i32"), ir.BufferDecl.output("b", 1, "f32")], 64, [
        ir.if_(ir.gid(0) == 0, [ir.let("t", ir.i32(2)), ir.let("u", t), ir.store("a", 0, ir.var("u"))],
               [ir.let("t", ir.f32(2.5)), ir.let("u", t), ir.store("b", 0, ir.var("u"))])])  # u: nothing wanted
    assert ir.validate(two) == []
    lets = [st for st in ir.walk(two.entry) if isinstance(st, ir.Let) and st.name == "u"]
    assert [str(st.value.b.dtype) for st in lets] == ["i32", "f32"]


def test_a_distinct_walk_visits_a_shared_value_once_and_validate_uses_it():
    """Regression (a red-team): validate's capability and guard walks visited a value stored by N
    statements once per use (N**2 / 2 nodes: 4 s at 800 partial sums)."""
    import time

    x = ir.load("x", ir.var("i"))
    body, s = [ir.let("i", ir.gid(0))], x
    for k in range(800):
        s = s + x
        body.append(ir.store("out", ir.u32(k % 16), s))
    p = ir.Program([ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.output("out", 1, "f32")], 64, body)
    assert sum(1 for _ in ir.walk(p.entry)) == 964_402  # once a use, as documented
    assert sum(1 for _ in ir.walk(p.entry, distinct=True)) == 2_404  # 801 statements, 800 sums, x, i, 800 indices, gid
    start = time.perf_counter()
    assert ir.validate(p) == [] and p.capabilities == frozenset()
    assert time.perf_counter() - start < 1.0  # about 0.05 s; 4 s before
