"""One test per validator rule (every `err` call site in vyre_numba/ir/validate.py), plus check(),
DispatchConfig argument errors and bindings.bind input errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

from vyre_numba import DispatchConfig, ir
from vyre_numba.bindings import bind
from vyre_numba.errors import DispatchError, IRValidationError, VyreError
from vyre_numba.ir import nodes as n
from vyre_numba.ir.validate import MAX_STATIC_SHARED_BYTES

B = ir.BufferDecl
FIX_AT_END = re.compile(r"Fix: \S[^\n]*[.)]\Z")


def std_bufs():
    return [B.read("a", 0, "f32"), B.read("b", 1, "f64"), B.output("out", 2, "f32"),
            B.read_write("c", 3, "u32"), B.read("idx", 4, "u32")]


def prog(*entry, bufs=None, wg=64, name="main") -> ir.Program:
    return ir.Program(std_bufs() if bufs is None else bufs, wg, list(entry), name=name)


def assert_only(p: ir.Program, where: str, *fragments: str) -> ir.Diagnostic:
    """Assert `p` has exactly one diagnostic, at `where`, containing every fragment, whose message
    ends with a `Fix: ...` sentence."""
    diags = ir.validate(p)
    assert len(diags) == 1, "\n".join(map(str, diags))
    (d,) = diags
    assert isinstance(d, ir.Diagnostic)
    assert d.where == where, d
    for f in fragments:
        assert f in d.message, (f, d.message)
    assert FIX_AT_END.search(d.message), d.message
    assert str(d) == f"{where}: {d.message}"
    return d


def assert_error_with_fix(exc_type, fn, *fragments):
    with pytest.raises(exc_type) as info:
        fn()
    assert isinstance(info.value, VyreError)
    msg = str(info.value)
    assert "Fix:" in msg and msg.rsplit("Fix:", 1)[1].strip(), msg
    for f in fragments:
        assert f in msg, (f, msg)
    return info.value


A0 = ir.load("a", 0)  # an f32 expression
B0 = ir.load("b", 0)  # an f64 expression
C0 = ir.load("c", 0)  # a u32 expression


# ---- clean programs ---------------------------------------------------------------------------

def test_valid_programs_validate_clean(scale_program, every_node_program):
    assert ir.validate(scale_program) == []
    assert ir.validate(every_node_program) == []
    assert ir.check(scale_program) is scale_program
    assert ir.validate(ir.Program([], 1, [])) == []


# ---- expression rules -------------------------------------------------------------------------

def test_undeclared_buffer_where_points_into_branch():
    p = prog(ir.let("i", ir.gid(0)), ir.if_(ir.var("i") < 4, [ir.store("out", 0, ir.load("nope", 0))]))
    d = assert_only(p, "entry[1].then[0]", "buffer 'nope' is not declared", "declared: a, b, out, c, idx")
    assert "BufferDecl named 'nope'" in d.message


def test_an_undeclared_buffer_among_many_is_told_the_nearest_and_a_few_names():
    """Regression (a red-team): each use listed every declared buffer (2,000 buffers and uses:
    26 MB of diagnostics, quadratic time)."""
    names = [f"col{k}" for k in range(300)]
    p = ir.Program([ir.BufferDecl.read(x, k, "u32") for k, x in enumerate(names)]
                   + [ir.BufferDecl.output("out", 300, "u32")], 1,
                   [ir.store("out", 0, ir.load("coll7", 0)), ir.store("out", 1, ir.load("coll7", 1))])
    ds = ir.validate(p)
    assert len(ds) == 2 and ds[0].message == ds[1].message
    assert ds[0].message.startswith("buffer 'coll7' is not declared (did you mean 'col7'?) (declared: col0, col1, col2, "
                                    "col3, col4, col5, col6, col7, and 293 more). Fix: add a BufferDecl named 'coll7'")


def test_a_location_deep_in_nesting_shows_its_first_and_last_steps():
    body = [ir.let("u", ir.var("missing"))]
    for _ in range(40):
        body = [ir.if_(ir.boolean(True), body)]
    (d,) = ir.validate(prog(*body))
    assert d.where == "entry[0]" + ".then[0]" * 5 + "...(60 levels)..." + ".then[0]" * 5  # 82 steps: 12, 10 shown


def test_undeclared_buffer_in_store_buf_len_and_atomic():
    assert_only(prog(ir.store("ghost", 0, 1)), "entry[0]", "'ghost' is not declared")
    assert_only(prog(ir.let("n", ir.buf_len("ghost"))), "entry[0]", "'ghost' is not declared")
    assert_only(prog(ir.let("o", ir.atomic("add", "ghost", 0, 1))), "entry[0]", "'ghost' is not declared")


def test_undeclared_buffer_with_no_buffers_says_none():
    assert_only(ir.Program([], 1, [ir.let("x", ir.load("a", 0))]), "entry[0]", "(declared: none)")


@pytest.mark.parametrize("label,stmt,fragment", [
    ("load index", ir.let("x", ir.load("a", ir.f32(0.0))), "index of load a[...] must be u32, got f32"),
    ("store index", ir.store("out", ir.i32(0), 1.0), "index of store out[...] must be u32, got i32"),
    ("store value", ir.store("out", 0, ir.u64(1)), "value stored into out must be f32, got u64"),
    ("select condition", ir.let("x", ir.select(ir.u32(1), A0, A0)), "condition of select must be bool, got u32"),
    ("if condition", ir.if_(C0, [ir.return_()]), "if condition must be bool, got u32"),
    ("loop start", ir.loop("k", ir.i32(0), 4, []), "loop start of 'k' must be u32, got i32"),
    ("loop end", ir.loop("k", 0, ir.u64(4), []), "loop end of 'k' must be u32, got u64"),
    ("ballot", ir.let("m", ir.subgroup_ballot(C0)), "subgroup_ballot condition must be bool, got u32"),
    ("shuffle lane", ir.let("m", ir.subgroup_shuffle(C0, ir.i32(1))), "subgroup_shuffle lane must be u32, got i32"),
    ("logic left", ir.let("m", ir.logical_and(C0, ir.boolean(True))), "left operand of logical_and must be bool, got u32"),
    ("logic right", ir.let("m", ir.logical_or(ir.boolean(True), A0)), "right operand of logical_or must be bool, got f32"),
    ("not", ir.let("m", ir.not_(C0)), "operand of not must be bool, got u32"),
    ("atomic index", ir.let("o", ir.atomic("add", "c", ir.i32(0), 1)), "index of atomic on c must be u32, got i32"),
    ("atomic value", ir.let("o", ir.atomic("add", "c", 0, ir.i32(1))), "value of atomic on c must be u32, got i32"),
    ("atomic expected", ir.let("o", ir.atomic("compare_exchange", "c", 0, 1, expected=ir.u64(0))),
     "expected value of compare_exchange on c must be u32, got u64"),
])
def test_type_must_be(label, stmt, fragment):
    d = assert_only(prog(stmt), "entry[0]", fragment)
    if "must be bool" in fragment:
        assert "x != 0" in d.message
    else:
        assert "ir.cast(" in d.message


def test_assigned_value_type_must_match_variable():
    assert_only(prog(ir.let("x", A0), ir.block(ir.assign("x", B0))), "entry[1].block[0]",
         "value assigned to 'x' must be f32, got f64")


def test_operands_of_different_types():
    assert_only(prog(ir.store("out", 0, A0 + B0)), "entry[0]", "add has operands of different types f32 and f64")
    assert_only(prog(ir.let("x", ir.select(True, A0, C0))), "entry[0]", "select has operands of different types f32 and u32")
    assert_only(prog(ir.let("x", ir.fma(A0, A0, B0))), "entry[0]", "fma has operands of different types f32 and f64")
    assert_only(prog(ir.let("x", A0.eq(C0))), "entry[0]", "eq has operands of different types")
    assert_only(prog(ir.let("x", ir.shl(C0, ir.u8(1)))), "entry[0]", "shl has operands of different types u32 and u8")


@pytest.mark.parametrize("label,expr,fragment", [
    ("int binop on float", ir.shl(A0, A0), "shl needs an integer type, got f32"),
    ("saturating on float", ir.saturating_add(B0, B0), "saturating_add needs an integer type, got f64"),
    ("int unop on float", ir.popcount(A0), "popcount needs an integer type, got f32"),
    ("float unop on int", ir.sqrt(C0), "sqrt needs a float type, got u32"),
    ("transcendental on int", ir.exp(ir.i64(1)), "exp needs a float type, got i64"),
    ("float predicate on int", ir.isnan(C0), "isnan needs a float type, got u32"),
    ("arith on bool", ir.add(ir.boolean(True), ir.boolean(True)), "add needs a numeric (non-bool) type, got bool"),
    ("neg on bool", ir.neg(ir.boolean(True)), "neg needs a numeric (non-bool) type, got bool"),
    ("ordering on bool", ir.lt(ir.boolean(True), ir.boolean(False)), "lt needs a numeric (non-bool) type, got bool"),
    ("fma on bool", ir.fma(ir.boolean(True), ir.boolean(True), ir.boolean(True)), "fma needs a numeric (non-bool) type"),
    ("subgroup_add on u64", ir.subgroup_add(ir.u64(1)), "subgroup_add needs u32 or i32, got u64"),
    ("subgroup_add on f32", ir.subgroup_add(A0), "subgroup_add needs u32 or i32, got f32"),
])
def test_operation_needs_kind(label, expr, fragment):
    assert_only(prog(ir.let("x", expr)), "entry[0]", fragment)


def test_bitwise_operators_on_conditions_become_logical_ones():
    """`(a < b) & (c < d)`, `|`, `^` and `~` combine conditions as in NumPy and PyTorch."""
    c1, c2 = A0 < 1.0, C0 > 2
    p = prog(ir.let("a", c1 & c2), ir.let("o", c1 | c2), ir.let("x", c1 ^ c2), ir.let("n", ~c1))
    assert ir.validate(p) == []
    assert [s.value.op for s in p.entry] == ["logical_and", "logical_or", "ne", "not"]
    assert [s.value.op for s in prog(ir.let("i", C0 & 3), ir.let("j", ~C0)).entry] == ["bitand", "bitnot"]


def test_eq_and_ne_accept_bool_operands():
    assert ir.validate(prog(ir.let("x", ir.boolean(True).eq(ir.boolean(False))),
                            ir.let("y", ir.ne(ir.boolean(True), ir.boolean(False))))) == []


def test_mod_is_for_integers_only():
    d = assert_only(prog(ir.store("out", 0, A0 % 2.0)), "entry[0]", "mod is defined for integers only")
    assert "ir.trunc" in d.message
    assert ir.validate(prog(ir.store("c", 0, C0 % 3))) == []


def test_the_float_remainder_fix_gives_np_fmod_for_f32():
    """Regression (a red-team): the Fix's a - b * ir.trunc(a / b) in f32 differed from np.fmod in
    94% of values for b = 2pi (by a whole b for 0.1); computed in f64 as the Fix now says, it is
    np.fmod on these values."""
    import vyre_numba as vn

    i = ir.gid(0)
    A, Bd = ir.cast(ir.load("a", i), "f64"), ir.cast(ir.load("b", i), "f64")
    p = ir.Program([B.read("a", 0, "f32"), B.read("b", 1, "f32"), B.output("o", 2, "f32")], 64,
                   [ir.if_(i < ir.buf_len("o"), [ir.store("o", i, ir.cast(A - Bd * ir.trunc(A / Bd), "f32"))])])
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(5000) * 1000).astype(np.float32)
    b = np.concatenate([np.full(2500, np.float32(2 * np.pi)), rng.uniform(0.01, 10, 2500).astype(np.float32)])
    (out,) = vn.get_backend("reference").dispatch(p, [a, b])
    assert np.array_equal(out, np.fmod(a, b))
    d = ir.validate(prog(ir.store("out", 0, A0 % 2.0)))[0]
    assert "ir.cast(A - B * ir.trunc(A / B), 'f32')" in d.message


def test_weak_literal_that_cannot_take_its_type():
    assert_only(prog(ir.store("c", 0, C0 + -1)), "entry[0]", "literal -1 cannot be a u32")
    assert_only(prog(ir.if_(ir.lit(1), [])), "entry[0]", "literal 1 cannot be a bool")
    assert_only(prog(ir.store("c", 0, 0.5)), "entry[0]", "literal 0.5 cannot be a u32")
    d = assert_only(prog(ir.store("c", 0, C0 + -1)), "entry[0]", "literal -1 cannot be a u32")
    assert d.facts == {"problem": "literal", "value": -1, "dtype": ir.DataType.U32}


@pytest.mark.parametrize("value, dtype, want", [(1e40, "f32", np.float32(np.inf)), (300, "u8", 44), (-1, "u32", 2**32 - 1),
                                               (1.5, "u32", 1), (70000, "f16", np.float16(np.inf))])
def test_the_fix_for_a_literal_past_its_type_works_when_followed(value, dtype, want):
    """Regression (a docs review): the Fix said "ir.lit(value, 'type') ... or ir.cast", and the
    natural ir.cast(1e40, 'f32') is refused the same way (its literal is weak)."""
    import vyre_numba as vn

    B = ir.BufferDecl
    made = []
    for build in (lambda v: ir.load("x", 0) + v, lambda v: ir.lit(v, dtype)):  # a weak literal; a typed one
        try:
            ir.check(ir.Program([B.read_write("x", 0, dtype)], 1, [ir.store("x", 0, build(value))]))
            raise AssertionError("accepted")
        except IRValidationError as e:
            call = re.search(r"on purpose, (ir\.cast\(.*\))\.", str(e)).group(1)
        made.append(call)
        p = ir.Program([B.read_write("x", 0, dtype)], 1, [ir.store("x", 0, eval(call, {"ir": ir}))])
        (got,) = vn.get_backend("reference").dispatch(p, [np.zeros(1, np.dtype(ir.DataType.parse(dtype).storage))])
        assert got.view(np.dtype(want).type if dtype.startswith("f") else got.dtype)[0] == want, (call, got)
    assert made[0] == made[1]


def test_an_untyped_literal_beyond_every_integer_type_says_so():
    """Regression: it said 'literal ... cannot be a None'."""
    d = assert_only(prog(ir.let("t", ir.lit(2**70)), ir.store("c", 0, C0)), "entry[0]",
                    f"literal {2**70} is beyond every integer type (u64 holds up to {2**64 - 1})")
    assert "None" not in d.message and d.facts == {"problem": "literal", "value": 2**70, "dtype": None}


def test_a_literal_cast_that_would_wrap_names_its_facts():
    d = assert_only(prog(ir.store("c", 0, ir.cast(ir.lit(2**33), "u32"))), "entry[0]",
                    f"cast of the literal {2**33} to u32")
    assert d.facts == {"problem": "literal cast", "text": str(2**33), "dtype": ir.DataType.U32, "how": "wrap to"}


@pytest.mark.parametrize("lit,fragment", [
    (n.Lit(ir.DataType.U32, 2**40), "holds 1099511627776, which is not a u32 value"),
    (n.Lit(ir.DataType.I8, 128), "holds 128, which is not a i8 value"),
    (n.Lit(ir.DataType.U8, -1), "holds -1, which is not a u8 value"),
    (n.Lit(ir.DataType.BOOL, 2), "holds 2, which is not a bool value"),
    (n.Lit(ir.DataType.F32, 2**32), "which is not a f32 bit pattern"),
    (n.Lit(ir.DataType.F16, -1), "which is not a f16 bit pattern"),
])
def test_literal_that_holds_no_value_of_its_type(lit, fragment):
    """Regression: such literals (built directly or read from JSON) validated clean or crashed."""
    assert_only(prog(ir.let("x", lit)), "entry[0]", fragment)


@pytest.mark.parametrize("make,fragment", [
    (lambda: n.Lit(ir.DataType.F32, "x"), "Lit.raw is 'x', not an int"),
    (lambda: n.Lit(ir.DataType.U32, True), "Lit.raw is True, not an int"),
    (lambda: n.Lit(ir.DataType.U32, 1.5, weak=True), "Lit.raw is 1.5, not an int"),
    (lambda: n.Lit("u64x", 1), "unknown data type 'u64x'"),
    (lambda: n.Cast("float", C0), "unknown data type 'float'"),
    (lambda: n.Store("out", ir.u32(0), "1.0"), "'1.0' (str) is not an IR expression"),
    (lambda: n.Load(["a"], ir.u32(0)), "Load.buffer is ['a'], not a str"),
    (lambda: n.If(ir.boolean(True), [5]), "5 is not an IR statement"),
    (lambda: n.Builtin("local_id", 1.0), "Builtin.axis is 1.0, not an int"),
])
def test_nodes_built_directly_refuse_fields_of_the_wrong_kind(make, fragment):
    """Regression: directly built nodes with unhashable or mistyped fields crashed the walkers."""
    with pytest.raises(IRValidationError, match="Fix:") as e:
        make()
    assert fragment in str(e.value)


def test_nodes_built_directly_normalise_convertible_fields():
    assert n.Cast("u32", C0).dtype is ir.DataType.U32
    assert n.Let("x", 5).value.equals(ir.lit(5))
    assert n.If(ir.boolean(True), [ir.return_()]).then == (ir.return_(),)


def test_literal_raw_checked_after_json_round_trip():
    import json
    good = ir.Program([B.output("o", 0, "u8")], 1, [ir.store("o", 0, ir.u8(7))])
    d = json.loads(good.to_json())
    d["entry"][0]["value"]["raw"] = 300
    assert_only(ir.Program.from_dict(d), "entry[0]", "holds 300, which is not a u8 value")


def test_undefined_variable_after_its_scope_ends():
    p = prog(ir.if_(True, [ir.let("t", 1)], [ir.let("e", 1)]), ir.loop("k", 0, 2, []),
             ir.block(ir.let("q", ir.var("t"))))
    d = assert_only(p, "entry[2].block[0]", "variable 't' is not defined here")
    assert "ir.let('t', ...)" in d.message
    assert_only(prog(ir.let("z", ir.var("k"))), "entry[0]", "variable 'k' is not defined")


def test_variable_used_before_its_let():
    assert_only(prog(ir.let("x", ir.var("y") + 1), ir.let("y", ir.u32(1))), "entry[0]", "variable 'y' is not defined")


def test_unknown_builtin():
    assert_only(prog(ir.let("x", n.Builtin("lane_id", 0))), "entry[0]", "unknown builtin lane_id.0")
    assert_only(prog(ir.let("x", n.Builtin("invocation_id", 3))), "entry[0]", "unknown builtin invocation_id.3")


def test_unknown_binary_and_unary_ops():
    assert_only(prog(ir.let("x", n.BinOp("pow", C0, C0))), "entry[0]", "unknown binary op 'pow'")
    assert_only(prog(ir.let("x", n.UnOp("cbrt", A0))), "entry[0]", "unknown unary op 'cbrt'")


def test_unknown_atomic_op():
    assert_only(prog(ir.let("x", n.Atomic("nand", "c", ir.u32(0), ir.u32(1)))), "entry[0]", "unknown atomic op 'nand'")


def test_atomic_on_read_only_buffer():
    d = assert_only(prog(ir.let("x", ir.atomic("add", "idx", 0, 1))), "entry[0]", "atomic on read_only buffer 'idx'")
    assert "read_write" in d.message
    bufs = [B.uniform("u", 0, "u32")]
    assert_only(prog(ir.let("x", ir.atomic("or", "u", 0, 1)), bufs=bufs), "entry[0]", "atomic on uniform buffer 'u'")


def test_atomics_on_writable_32_and_64_bit_ints_are_valid():
    bufs = [B.read_write("a", 0, "u32"), B.output("b", 1, "i32"), B.read_write("c", 2, "u64"),
            B.read_write("d", 3, "i64"), B.workgroup("w", 4, "u32")]
    body = [ir.let(f"o{k}", ir.atomic(op, name, 0, 1))
            for k, (op, name) in enumerate([("add", "a"), ("min", "b"), ("max", "c"), ("xor", "d"),
                                            ("exchange", "w"), ("and", "a"), ("or", "b")])]
    body.append(ir.let("cx", ir.atomic("compare_exchange", "d", 0, 1, expected=2)))
    assert ir.validate(ir.Program(bufs, 32, body)) == []


@pytest.mark.parametrize("dtype", ["u8", "u16", "i8", "i16", "f16", "bf16", "f32", "f64", "bool"])
def test_atomic_needs_32_or_64_bit_int_buffer(dtype):
    bufs = [B.read_write("v", 0, dtype)]
    value = ir.boolean(True) if dtype == "bool" else ir.lit(1, dtype)
    assert_only(ir.Program(bufs, 1, [ir.let("x", ir.atomic("add", "v", 0, value))]), "entry[0]",
         f"atomics need a u32, i32, u64 or i64 buffer; 'v' is {dtype}")


def test_expected_given_exactly_for_compare_exchange():
    assert_only(prog(ir.let("x", n.Atomic("compare_exchange", "c", ir.u32(0), ir.u32(1)))), "entry[0]",
         "`expected` is given exactly for compare_exchange")
    assert_only(prog(ir.let("x", n.Atomic("add", "c", ir.u32(0), ir.u32(1), ir.u32(0)))), "entry[0]",
         "`expected` is given exactly for compare_exchange")


# ---- statement rules --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["2x", "a-b", "with space", "ünï"])
def test_variable_name_not_an_identifier(name):
    assert_only(prog(ir.let(name, 1)), "entry[0]", f"variable name {name!r} is not an identifier")


def test_loop_variable_name_not_an_identifier():
    assert_only(prog(ir.loop("k k", 0, 1, [])), "entry[0]", "variable name 'k k' is not an identifier")


def test_variable_already_defined():
    d = assert_only(prog(ir.let("x", 1), ir.if_(True, [ir.let("x", 2)])), "entry[1].then[0]",
             "variable 'x' is already defined")
    assert "ir.assign('x', ...)" in d.message
    assert_only(prog(ir.let("x", 1), ir.let("x", 2)), "entry[1]", "'x' is already defined")
    assert_only(prog(ir.loop("k", 0, 2, [ir.let("k", 1)])), "entry[0].body[0]", "'k' is already defined")
    assert_only(prog(ir.let("k", 1), ir.loop("k", 0, 2, [])), "entry[1]", "'k' is already defined")


def test_same_name_in_sibling_scopes_is_fine():
    p = prog(ir.if_(True, [ir.let("t", 1)], [ir.let("t", 2)]), ir.block(ir.let("t", 3)),
             ir.loop("k", 0, 2, []), ir.loop("k", 0, 2, []), ir.let("t", 4))
    assert ir.validate(p) == []


def test_assignment_to_undeclared_variable():
    d = assert_only(prog(ir.if_(True, [], [ir.assign("y", 1)])), "entry[0].else[0]",
             "assignment to undeclared variable 'y'")
    assert "ir.let('y', initial_value)" in d.message


def test_loop_variable_is_read_only():
    assert_only(prog(ir.loop("k", 0, 4, [ir.if_(True, [ir.assign("k", 1)])])), "entry[0].body[0].then[0]",
         "loop variable 'k' is read-only")


def test_store_into_read_only_and_uniform_buffers():
    d = assert_only(prog(ir.store("a", 0, 1.0)), "entry[0]", "store into read_only buffer 'a'")
    assert "BufferDecl.output or read_write" in d.message
    assert_only(prog(ir.store("u", 0, 1), bufs=[B.uniform("u", 0, "u32")]), "entry[0]", "store into uniform buffer 'u'")


def test_unknown_barrier_scope():
    assert_only(prog(ir.block(n.Barrier("device"))), "entry[0].block[0]", "barrier scope 'device' is unknown")


def test_not_an_ir_statement_in_a_nested_body():
    with pytest.raises(IRValidationError, match="5 is not an IR statement.*Fix:"):
        prog(ir.loop("k", 0, 1, [ir.block(n.If(ir.boolean(True), (5,), ()))]))


def test_where_paths_for_every_body_kind():
    bad = ir.store("a", 0, 1.0)  # a read-only store
    p = prog(ir.if_(True, [ir.return_(), bad], [bad]), ir.loop("k", 0, 1, [bad]), ir.block(bad, bad), bad)
    assert [d.where for d in ir.validate(p)] == [
        "entry[0].then[1]", "entry[0].else[0]", "entry[1].body[0]", "entry[2].block[0]",
        "entry[2].block[1]", "entry[3]"]


# ---- buffer rules -----------------------------------------------------------------------------

def bufs_only(*bufs, **kw) -> ir.Program:
    return ir.Program(list(bufs), kw.get("wg", 32), [])


@pytest.mark.parametrize("name", ["a b", "1a", "", "x.y"])
def test_buffer_name_not_an_identifier(name):
    assert_only(bufs_only(B.read("ok", 0, "u32"), B.read(name, 1, "u32")), f"buffers[1] ({name})",
         f"buffer name {name!r} is not an identifier")


def test_buffer_declared_twice():
    assert_only(bufs_only(B.read("a", 0, "u32"), B.output("a", 1, "u32")), "buffers[1] (a)",
         "buffer name 'a' is declared twice (also buffers[0])")


def test_buffer_count_negative_or_too_large():
    assert_only(bufs_only(B("a", 0, "read_only", "u32", -1)), "buffers[0] (a)", "count -1 is negative")
    assert_only(bufs_only(B("a", 0, "read_only", "u32", 2**32)), "buffers[0] (a)", "count 4294967296 is 2**32 or more")
    assert ir.validate(bufs_only(B("a", 0, "read_only", "u32", np.uint32(4)))) == []


@pytest.mark.parametrize("field,value", [("count", 1.5), ("count", "4"), ("count", True), ("binding", True),
                                         ("binding", "0"), ("binding", 1.0), ("output", "yes"), ("output", 1)])
def test_buffer_fields_of_the_wrong_type_are_refused_at_construction(field, value):
    kw = {"name": "a", "binding": 0, "access": "read_only", "dtype": "u32", field: value}
    with pytest.raises(IRValidationError, match=f"{field}.*{re.escape(repr(value))}.*Fix:"):
        B(**kw)


def test_workgroup_buffer_takes_no_binding():
    assert_only(bufs_only(B("t", 0, "workgroup", "u32", 16)), "buffers[0] (t)", "workgroup buffers take no binding slot")


def test_workgroup_buffer_needs_static_count():
    assert_only(bufs_only(B.workgroup("t", 0, "u32")), "buffers[0] (t)", "workgroup buffer 't' needs a static count > 0")


def test_workgroup_buffer_cannot_be_output():
    assert_only(bufs_only(B("t", None, "workgroup", "u32", 16, output=True)), "buffers[0] (t)",
         "a workgroup buffer cannot be an output")


@pytest.mark.parametrize("binding", [None, -1])
def test_binding_not_a_non_negative_int(binding):
    assert_only(bufs_only(B("a", binding, "read_only", "u32")), "buffers[0] (a)", f"binding {binding!r} is not a non-negative int")


@pytest.mark.parametrize("binding", [2**32, 2**64, 10**30])
def test_a_binding_past_u32_is_refused(binding):
    assert_only(bufs_only(B("a", binding, "read_only", "u32")), "buffers[0] (a)", "binding slots are u32")
    assert ir.validate(bufs_only(B("a", 2**32 - 1, "read_only", "u32"))) == []


def test_binding_used_twice():
    assert_only(bufs_only(B.read("a", 3, "u32"), B.output("b", 3, "u32")), "buffers[1] (b)", "binding 3 is used by 'a' too")


@pytest.mark.parametrize("access", ["read_only", "uniform"])
def test_read_only_buffer_flagged_output(access):
    assert_only(bufs_only(B("a", 0, access, "u32", output=True)), "buffers[0] (a)",
         f"{access} buffer 'a' is flagged output but cannot be written")


def test_output_byte_range_on_non_output():
    assert_only(bufs_only(B("a", 0, "read_only", "u32", 4, output_byte_range=(0, 4))), "buffers[0] (a)",
         "output_byte_range is set on a buffer that is not an output")


@pytest.mark.parametrize("rng", [(8, 4), (-4, 4)])
def test_output_byte_range_out_of_order(rng):
    assert_only(bufs_only(B.output("o", 0, "u32", 4, output_byte_range=rng)), "buffers[0] (o)",
         f"output_byte_range {tuple(rng)} is not (start, end)")


@pytest.mark.parametrize("rng", [(0, 4, 8), (4,), "ab", 5, (0.0, 4)])
def test_output_byte_range_not_a_pair_is_refused_at_construction(rng):
    with pytest.raises(IRValidationError, match="output_byte_range.*Fix:"):
        B.output("o", 0, "u32", 4, output_byte_range=rng)


@pytest.mark.parametrize("rng", [(2, 8), (0, 6)])
def test_output_byte_range_not_whole_elements(rng):
    assert_only(bufs_only(B.output("o", 0, "u32", 4, output_byte_range=rng)), "buffers[0] (o)",
         "is not a multiple of the 4-byte element")


def test_output_byte_range_past_end():
    assert_only(bufs_only(B.read_write("o", 0, "u64", 2, output_byte_range=(0, 24))), "buffers[0] (o)",
         "output_byte_range end 24 is past the buffer's 16 bytes")
    # count=0 (sized at dispatch): any end a buffer can have is accepted statically; past u32 lengths none can
    assert ir.validate(bufs_only(B.output("o", 0, "u64", 0, output_byte_range=(0, 24)))) == []
    assert ir.validate(bufs_only(B.output("o", 0, "u64", 0, output_byte_range=(0, (2**32 - 1) * 8)))) == []
    for end in ((2**32) * 8, 2**64):
        assert_only(bufs_only(B.read_write("o", 0, "u64", 0, output_byte_range=(0, end))), "buffers[0] (o)",
                    f"output_byte_range end {end} is past any buffer's bytes (lengths are u32")
    assert ir.validate(bufs_only(B.output("o", 0, "u64", 2, output_byte_range=(8, 16)))) == []


def test_static_shared_memory_limit():
    limit_u32 = MAX_STATIC_SHARED_BYTES // 4
    assert ir.validate(bufs_only(B.workgroup("t", limit_u32, "u32"))) == []
    assert ir.validate(bufs_only(B.workgroup("t", limit_u32 - 8, "u32"), B.workgroup("s", 4, "u64"))) == []
    assert_only(bufs_only(B.workgroup("t", limit_u32 - 7, "u32"), B.workgroup("s", 4, "u64")), "buffers",
         f"workgroup buffers take {MAX_STATIC_SHARED_BYTES + 8} bytes (each rounded up to a multiple of 8)")
    # 49,152 bytes in all, but u8[49145] is declared as 49,152 bytes of 8-byte aligned PTX (a red-team: ptxas refused it)
    assert_only(bufs_only(B.workgroup("t", MAX_STATIC_SHARED_BYTES - 7, "u8"), B.workgroup("s", 7, "u8")), "buffers",
                f"workgroup buffers take {MAX_STATIC_SHARED_BYTES + 8} bytes")
    assert_only(bufs_only(B.workgroup("t", limit_u32 + 1, "u32")), "buffers",
         f"over the {MAX_STATIC_SHARED_BYTES}-byte static shared-memory limit")


# ---- program rules ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["my kernel", "", "9lives", "a-b"])
def test_program_name_not_an_identifier(name):
    assert_only(ir.Program([], 1, [], name=name), "program", f"program name {name!r} is not an identifier")


@pytest.mark.parametrize("name", [5, None, 1.5, True, ["a"], b"main"])
def test_a_program_name_that_is_no_str_is_refused_where_it_is_built(name):
    """Regression (a red-team): Program(..., name=5) was built, saved (to_json wrote 5) and pickled,
    and then neither loaded back: from_json said to_json writes a string."""
    with pytest.raises(IRValidationError, match=r"^name=.* is an? .*, not a str\. Fix: name the program with a string"):
        ir.Program([], 1, [], name=name)


@pytest.mark.parametrize("wg", [0, 1025, (1024, 2), (1, 1, 65), (32, 33), (1, 0, 1), (-1, -1)])
def test_workgroup_size_out_of_limits(wg):
    assert_only(ir.Program([], wg, []), "workgroup_size", "is outside 1..")


@pytest.mark.parametrize("wg", [1, 1024, (1, 1024), (1, 1, 64), (32, 32), (16, 8, 8)])
def test_workgroup_size_at_limits(wg):
    assert ir.validate(ir.Program([], wg, [])) == []


# ---- collection and check() -------------------------------------------------------------------

def test_validate_collects_every_problem_in_order():
    p = ir.Program([B.read("a", 0, "f32"), B.read("dup", 0, "u32")], 2048,
                   [ir.store("a", 0, 1.0), ir.let("x", ir.var("nope"))], name="bad name")
    wheres = [d.where for d in ir.validate(p)]
    assert wheres == ["program", "buffers[1] (dup)", "workgroup_size", "entry[0]", "entry[1]"]


def test_check_raises_with_every_diagnostic():
    p = ir.Program([B.read("a", 0, "f32")], 2048, [ir.store("a", 0, 1.0), ir.let("x", ir.var("nope"))])
    with pytest.raises(IRValidationError) as info:
        ir.check(p)
    err = info.value
    assert isinstance(err, VyreError)
    assert err.diagnostics == ir.validate(p) and len(err.diagnostics) == 3
    msg = str(err)
    assert msg.startswith("program 'main' is invalid (3 problems):")
    for d in err.diagnostics:
        assert str(d) in msg
    one = ir.Program([], 1, [ir.let("x", ir.var("nope"))])
    with pytest.raises(IRValidationError, match=r"\(1 problem\)"):
        ir.check(one)


def test_check_stays_strict_when_called_twice(scale_program):
    bad = ir.Program([], 1, [ir.let("x", ir.var("nope"))])
    for _ in range(2):
        with pytest.raises(IRValidationError):
            ir.check(bad)
    assert ir.check(scale_program) is scale_program
    assert ir.check(scale_program) is scale_program


def test_validate_does_not_mutate_the_program(every_node_program):
    before = every_node_program.to_json()
    ir.validate(every_node_program)
    assert every_node_program.to_json() == before


# ---- DispatchConfig ---------------------------------------------------------------------------

def test_dispatch_config_normalises():
    c = DispatchConfig(grid=4, workgroup=(8, 8))
    assert c.grid == (4, 1, 1) and c.workgroup == (8, 8, 1)
    assert DispatchConfig().grid is None and DispatchConfig().workgroup is None
    assert DispatchConfig(workgroup="auto").workgroup == "auto"
    assert DispatchConfig(grid=0).grid == (0, 1, 1)
    assert DispatchConfig(workgroup=(8, 8)).key() == ((8, 8, 1), False)
    assert DispatchConfig(grid=(2, 3, 4), fixpoint_iterations=3, cooperative=True, label="x").fixpoint_iterations == 3
    # integer arrays of up to one axis, as Program takes a workgroup size (a 0-d one was refused)
    c = DispatchConfig(grid=np.array(4), workgroup=np.array([8, 8], np.uint16))
    assert c.grid == (4, 1, 1) and c.workgroup == (8, 8, 1) and all(type(v) is int for v in c.grid + c.workgroup)


@pytest.mark.parametrize("kw,fragment", [
    (dict(grid=-1), "grid=-1"),
    (dict(grid=(1.7,)), "grid=(1.7,)"),
    (dict(grid=(1, 2, 3, 4)), "grid=(1, 2, 3, 4)"),
    (dict(grid=(1, 2, 3, 4)), "grid=(1, 2, 3, 4)"),
    (dict(grid=()), "grid=()"),
    (dict(grid="big"), "grid='big'"),
    (dict(grid=(True, 1)), "grid=(True, 1)"),
    (dict(grid=True), "grid=True"),
    (dict(grid=(1, -2)), "grid=(1, -2)"),
    (dict(grid=np.array(-1)), "grid=array(-1) has a negative axis"),
    (dict(grid=np.array([2.0])), "grid=array([2.])"),
    (dict(grid=np.array([[2]])), "grid=array([[2]])"),
    (dict(workgroup=np.array([1, 2, 3, 4])), "workgroup=array([1, 2, 3, 4])"),
    (dict(workgroup=(0,)), "has an empty axis"),
    (dict(workgroup=(8, 0, 1)), "has an empty axis"),
    (dict(workgroup="fast"), "workgroup='fast'"),
    (dict(workgroup=(1, 2, 3, 4)), "workgroup=(1, 2, 3, 4)"),
    (dict(fixpoint_iterations=0), "fixpoint_iterations=0"),
    (dict(fixpoint_iterations=-3), "fixpoint_iterations=-3"),
    (dict(fixpoint_iterations=True), "fixpoint_iterations=True"),
    (dict(fixpoint_iterations=2.0), "fixpoint_iterations=2.0"),
])
def test_dispatch_config_argument_errors(kw, fragment):
    assert_error_with_fix(DispatchError, lambda: DispatchConfig(**kw), fragment)


# ---- bindings.bind ----------------------------------------------------------------------------

def two_in_one_out(count_a=0):
    return ir.Program([B.read("a", 0, "f32", count_a), B.read("b", 1, "u32"), B.output("o", 2, "f32")], 64,
                      [ir.let("i", ir.gid(0)), ir.store("o", ir.var("i"), ir.load("a", ir.var("i")))])


def test_bind_happy_path_sizes_and_geometry():
    a = np.arange(100, dtype=np.float32)
    b = np.arange(3, dtype=np.uint32)
    bd = bind(two_in_one_out(), [a, b])
    assert bd.arrays["o"].shape == (100,) and bd.arrays["o"].dtype == np.float32 and not bd.arrays["o"].any()
    assert bd.grid == (2, 1, 1) and bd.workgroup == (64, 1, 1) and bd.invocations == 128
    assert np.shares_memory(bd.arrays["a"], a)  # read-only inputs are not copied
    assert [r.shape for r in bd.results()] == [(100,)]
    by_name = bind(two_in_one_out(), {"b": b, "a": a}, sizes={"o": 7}, config=DispatchConfig(grid=3))
    assert by_name.arrays["o"].shape == (7,) and by_name.grid == (3, 1, 1)


def test_bind_copies_read_write_inputs():
    p = ir.Program([B.read_write("v", 0, "u32", output_byte_range=(4, 8))], 32, [ir.store("v", 0, 1)])
    v = np.arange(4, dtype=np.uint32)
    bd = bind(p, [v])
    assert not np.shares_memory(bd.arrays["v"], v)
    assert bd.results()[0].tolist() == [1]


def test_bind_checks_the_program_first():
    bad = ir.Program([B.output("o", 0, "u32")], 1, [ir.store("o", 0, ir.var("x"))])
    assert_error_with_fix(IRValidationError, lambda: bind(bad, []), "variable 'x' is not defined")


@pytest.mark.parametrize("inputs", [[], [np.zeros(2, np.float32)], [np.zeros(2, np.float32)] * 3])
def test_bind_wrong_input_count(inputs):
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), inputs),
                          "expected 2 input(s) ['a', 'b'] in binding order", f"got {len(inputs)}")


def test_bind_none_inputs_for_a_program_with_inputs():
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), None), "expected 2 input(s)")


@pytest.mark.parametrize("arr,example", [(np.full(4, 0.1, np.float64), "element 0: np.float64(0.1)"),
                                         (np.array([0, 2**24 + 1], np.int32), "element 1: np.int32(16777217)"),
                                         (np.array([1.0, 1e300]), "element 1: np.float64(1e+300)")])
def test_bind_refuses_inexact_conversion(arr, example):
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), [arr, np.zeros(1, np.uint32)]),
                          "'a' is declared f32, but the given", "do not all convert exactly", example)


@pytest.mark.parametrize("arr", [np.zeros(4, np.float64), np.arange(4, dtype=np.int32), np.zeros(4, np.float16),
                                 [0.5, 1.5, -2.0], [np.nan, np.inf, -np.inf, 2**24]])
def test_bind_converts_exact_values(arr):
    got = bind(two_in_one_out(), [arr, np.zeros(1, np.uint32)]).arrays["a"]
    assert got.dtype == np.float32 and np.array_equal(got, np.asarray(arr, np.float64), equal_nan=True)


def test_bind_bf16_dtype_hint():
    p = ir.Program([B.read("h", 0, "bf16"), B.output("o", 1, "bf16")], 32, [])
    assert_error_with_fix(DispatchError, lambda: bind(p, [np.full(2, 1.1, np.float32)]), "f32_to_bf16_bits")
    assert bind(p, [np.array([1.5, -2.0], np.float32)]).arrays["h"].tolist() == [0x3FC0, 0xC000]
    assert bind(p, [np.zeros(2, np.uint16)]).arrays["o"].dtype == np.uint16


def test_bind_bool_buffer_accepts_numpy_bool():
    p = ir.Program([B.read("f", 0, "bool"), B.output("o", 1, "bool")], 32, [])
    bd = bind(p, [np.array([True, False])])
    assert bd.arrays["f"].dtype == np.uint32 and bd.arrays["f"].tolist() == [1, 0]


def test_bind_unconvertible_list():
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), [["x"], [1]]), "'a' holds strings")
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), [[1.0], [-1]]), "'b' is declared u32",
                          "element 0: np.int64(-1)")


def test_bind_rejects_gpu_arrays():
    class FakeDeviceArray:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), [FakeDeviceArray(), [1]]),
                          "'a' is a GPU array")


def test_bind_static_count_mismatch():
    assert_error_with_fix(DispatchError,
                          lambda: bind(two_in_one_out(count_a=4), [np.zeros(3, np.float32), np.zeros(1, np.uint32)]),
                          "'a' is declared with 4 elements, got 3")


def test_bind_unknown_and_missing_names_in_dict():
    a, b = np.zeros(2, np.float32), np.zeros(2, np.uint32)
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), {"a": a, "b": b, "zz": a, "o": a}),
                          "['o', 'zz'] are not input buffers")
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), {"a": a}), "missing inputs ['b']")


def test_bind_sizes_for_a_non_output():
    p = ir.Program([B.read("a", 0, "u32"), B.read_write("rw", 1, "u32"), B.output("o", 2, "u32")], 32, [])
    args = [np.zeros(2, np.uint32), np.zeros(2, np.uint32)]
    for name in ("a", "rw", "nope"):
        assert_error_with_fix(DispatchError, lambda: bind(p, args, sizes={name: 4}),
                              f"sizes names '{name}', which are not output-only buffers")


@pytest.mark.parametrize("size", [-1, 2.5, "3", 5])
def test_bind_invalid_size_value(size):
    p = ir.Program([B.output("o", 0, "u32", 4)], 32, [])
    assert_error_with_fix(DispatchError, lambda: bind(p, [], sizes={"o": size}), f"sizes['o']={size!r}")


def test_bind_missing_size_source():
    p = ir.Program([B.output("o", 0, "u32")], 32, [ir.store("o", ir.gid(0), 1)])
    assert_error_with_fix(DispatchError, lambda: bind(p, []), "output 'o' has count=0 and there is no input",
                          "sizes={'o': n}")
    assert bind(p, [], sizes={"o": 0}).arrays["o"].size == 0
    assert bind(ir.Program([B.output("o", 0, "u32", 5)], 32, []), []).arrays["o"].size == 5


def test_bind_rejects_non_config():
    assert_error_with_fix(DispatchError, lambda: bind(two_in_one_out(), [[1.0], [1]], config={"grid": 1}),
                          "config is a dict, not a DispatchConfig")


def test_an_error_naming_the_first_problems_of_many_ends_in_a_fix():
    """Regression (a docs audit): past the problems a message shows, its last line said how many
    more there were and no Fix."""
    from vyre_numba.ir.validate import MESSAGE_PROBLEMS

    k = MESSAGE_PROBLEMS + 5
    p = ir.Program([ir.BufferDecl.output("y", 0, "u32")], 64, [ir.store(f"nope{j}", 0, 1) for j in range(k)],
                   name="many")
    with pytest.raises(IRValidationError) as e:
        ir.check(p)
    assert len(e.value.diagnostics) == k and str(e.value).count("\n  ") == MESSAGE_PROBLEMS + 1
    assert str(e.value).endswith("... and 5 more, listed in the error's .diagnostics. Fix: correct the problems above "
                                 "and those, then check again."), str(e.value)[-300:]


def test_a_variable_a_literal_typed_is_told_the_let_that_gives_it_the_type_meant():
    """Regression (a red-team): ir.let("acc", 0) is u32; adding f32 values was told to cast, and
    following the casts gave a valid program whose sum of ten 0.5 was 0.0. The Fix now names the
    let, and following it sums to 5.0."""
    def program(init, update=None):
        acc, k = ir.var("acc"), ir.var("k")
        update = update if update is not None else acc + ir.load("a", k)
        return ir.Program([B.read("a", 0, "f32"), B.output("o", 1, "f32", 1)], 1,
                          [ir.let("acc", init), ir.loop("k", 0, ir.buf_len("a"), [ir.assign("acc", update)]),
                           ir.store("o", 0, ir.var("acc"))])

    d, stored = ir.validate(program(0))
    assert stored.message.startswith("value stored into o must be f32, got u32: 'acc' is u32 from its let")
    assert d.message == ("add has operands of different types u32 and f32: 'acc' is u32 from its let (let acc = 0u32). "
                         "Fix: where 'acc' should hold f32 values, declare it so: ir.let('acc', ir.f32(0.0)); else "
                         "ir.cast one operand to the other's type.")
    d, _ = ir.validate(program(0, ir.load("a", ir.var("k"))))
    assert d.message.startswith("value assigned to 'acc' must be u32, got f32: 'acc' is u32 from its let")
    assert d.message.endswith("else convert the value with ir.cast(..., 'u32').")
    import vyre_numba as vn

    out = vn.get_backend("reference").dispatch(program(ir.f32(0.0)), [np.full(10, 0.5, np.float32)])
    assert out[0].tolist() == [5.0]


def test_a_loop_variable_used_again_is_told_to_take_a_new_name():
    """Regression (a red-team): nested loops over one name were told to use ir.assign, which a
    loop variable refuses."""
    p = prog(ir.loop("i", 0, 4, [ir.loop("i", 0, 4, [])]))
    assert_only(p, "entry[0].body[0]", "variable 'i' is already defined in an enclosing scope. Fix: pick a new name "
                                       "(a loop variable cannot be assigned).")
    p = prog(ir.let("j", 0), ir.let("j", 1))
    assert "Fix: use ir.assign('j', ...) to update it, or pick a new name." in ir.validate(p)[0].message


def test_the_let_offered_is_one_that_builds():
    """Review of the let Fix: a NaN is written float('nan'), a value the meant type cannot hold
    (or a bool let) gets the plain cast Fix, and a let of a bad literal bit pattern still builds
    its Program (the check ran at construction and raised)."""
    def program(init, dt):
        i = ir.gid(0)
        return ir.Program([B.read("a", 0, dt), B.output("out", 1, dt)], 64,
                          [ir.let("acc", init), ir.store("out", i, ir.var("acc") + ir.load("a", i))])

    (d,) = ir.validate(program(ir.f64(float("nan")), "f32"))
    assert "Fix: where 'acc' should hold f32 values, declare it so: ir.let('acc', ir.f32(float('nan')))" in d.message
    import math

    assert math.isnan(ir.f32(float("nan")).value)  # the Fix builds
    for init, dt in ((2**40, "f16"), (ir.f64(1e300), "f32"), (True, "f32")):
        assert all("declare it so" not in d.message for d in ir.validate(program(init, dt))), (init, dt)
    p = program(ir.Lit(ir.DataType.F32, 1 << 40), "f64")
    assert any("is not a f32 bit pattern" in d.message or "bit pattern" in d.message for d in ir.validate(p))


def _one(expr, t: str):
    """The value `expr` stores into a one-element buffer of type `t` on the reference backend."""
    import vyre_numba as vn

    prog = ir.Program([ir.BufferDecl.output("y", 0, t, 1), ir.BufferDecl.read("x", 1, "f64", 1)], 1,
                      [ir.store("y", 0, expr)], name="one")
    return vn.get_backend("reference").dispatch(prog, [np.float64([0.30000000000000004])])[0][0]


@pytest.mark.parametrize("make, t, want", [
    (lambda: ir.lt(ir.add(0.1, 0.2), ir.load("x", 0)), "bool", False),  # 0.1 + 0.2 typed f64, as x is
    (lambda: ir.eq(ir.add(0.1, 0.2), ir.load("x", 0)), "bool", True),
    (lambda: ir.cast(ir.div(7, 2), "f64"), "f64", 3.5),  # semantics.md's example
    (lambda: ir.cast(ir.div(1.0, 3.0), "f64"), "f64", 1 / 3),
    (lambda: ir.cast(ir.mul(3000000000, 2), "i64"), "i64", 6000000000),  # not wrapped in u32
    (lambda: ir.cast(ir.shl(ir.u32(1), 4), "f32"), "f32", 16.0),  # typed: an integer-only operation's type said
    (lambda: ir.cast(ir.add(1, ir.popcount(5)), "f32"), "f32", 3.0),  # popcount is u32 whatever its operand
    (lambda: ir.cast(ir.sub(16777217, 1), "f32"), "f32", 16777216.0),  # computed in f64, rounded once
    (lambda: ir.cast(ir.mod(ir.i64(4294967297), 3), "i32"), "i32", 2),
    (lambda: ir.lt(ir.add(0.5, 0.5), ir.fma(ir.add(1.0, 1.0), 2.0, ir.load("x", 0))), "bool", True),
])
def test_an_expression_of_weak_literals_takes_the_type_beside_it_or_converted_to(make, t, want):
    assert _one(make(), t) == want


def test_an_expression_of_weak_literals_cast_to_f16_is_rounded_once():
    got = _one(ir.cast(ir.add(0.1, 0.2), "f16"), "f16")
    assert np.float16(got).view(np.uint16) == np.float16(0.1 + 0.2).view(np.uint16)


@pytest.mark.parametrize("make, fragment, fix", [
    (lambda: ir.cast(ir.mod(4294967297, 3), "i32"), "the literal 4294967297, which i32 does not hold",
     r"ir.i64\(4294967297\)"),
    (lambda: ir.cast(ir.mul(1.0, 300.0), "u8"), "a float literal", r"ir.f64\(1.0\)"),
])
def test_an_expression_of_literals_an_integer_cast_cannot_compute_is_refused(make, fragment, fix):
    with pytest.raises(IRValidationError, match=f"{fragment}.*Fix: .*{fix}"):
        ir.check(ir.Program([ir.BufferDecl.output("y", 0, "u64", 1)], 1, [ir.store("y", 0, ir.cast(make(), "u64"))],
                            name="p"))


@pytest.mark.parametrize("make, op", [(lambda: ir.shl(1, 40), "shl"), (lambda: ir.mod(7, 3), "mod"),
                                      (lambda: ir.div(7, 2) + ir.bitand(1, 1), "bitand")])
def test_an_expression_of_literals_with_an_integer_only_operation_cast_to_a_float_is_refused(make, op):
    """Regression (a red-team): it was computed in the default type, u32, and converted silently
    (ir.cast(ir.shl(1, 40), "f64") was 256.0), where storing it into an f64 buffer is refused."""
    for t in ("f16", "f32", "f64"):
        with pytest.raises(IRValidationError, match=f"integer-only operation {op}: {t} has no {op}.*Fix: .*ir.u64"):
            ir.check(ir.Program([ir.BufferDecl.output("y", 0, t, 1)], 1, [ir.store("y", 0, ir.cast(make(), t))],
                                name="p"))
    assert _one(ir.cast(ir.shl(ir.u64(1), 40), "f64"), "f64") == 2.0**40  # the Fix
