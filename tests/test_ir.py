"""The IR surface: data types, builders, literals, weak literal typing, buffers, programs,
canonical JSON, digests and the text form."""
from __future__ import annotations

import json
import math
import re
import struct
import subprocess
import sys
import textwrap
from dataclasses import FrozenInstanceError
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_fix
import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.errors import IRValidationError
from vyre_numba.ir import DataType as D
from vyre_numba.ir.nodes import BinOp, Lit, UnOp

B = ir.BufferDecl
REPO = Path(__file__).resolve().parents[1]


def bits32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_prog(*entry, out="f32") -> ir.Program:
    return ir.Program([B.read("a", 0, "f32"), B.output("out", 1, out)], 64, list(entry))


def stored_value(p: ir.Program, k: int = -1):
    """The value expression of the k-th top-level statement (after literal resolution)."""
    return p.entry[k].value


# ---- DataType ---------------------------------------------------------------------------------

EXPECTED_TYPES = {
    # name: (bits, storage, is_int, is_signed, is_float, min, max)
    "u8": (8, np.uint8, True, False, False, 0, 255),
    "u16": (16, np.uint16, True, False, False, 0, 65535),
    "u32": (32, np.uint32, True, False, False, 0, 2**32 - 1),
    "u64": (64, np.uint64, True, False, False, 0, 2**64 - 1),
    "i8": (8, np.int8, True, True, False, -128, 127),
    "i16": (16, np.int16, True, True, False, -32768, 32767),
    "i32": (32, np.int32, True, True, False, -2**31, 2**31 - 1),
    "i64": (64, np.int64, True, True, False, -2**63, 2**63 - 1),
    "bool": (32, np.uint32, False, False, False, None, None),
    "f16": (16, np.float16, False, False, True, -65504.0, 65504.0),
    "bf16": (16, np.uint16, False, False, True, -3.3895313892515355e38, 3.3895313892515355e38),
    "f32": (32, np.float32, False, False, True, -3.4028234663852886e38, 3.4028234663852886e38),
    "f64": (64, np.float64, False, False, True, -1.7976931348623157e308, 1.7976931348623157e308),
}


def test_every_datatype_is_covered():
    assert {d.value for d in D} == set(EXPECTED_TYPES)


@pytest.mark.parametrize("name", sorted(EXPECTED_TYPES))
def test_datatype_properties(name):
    bits, storage, is_int, signed, is_float, lo, hi = EXPECTED_TYPES[name]
    d = D.parse(name)
    assert d is D(name) and str(d) == name and repr(d) == f"DataType.{d.name}"
    assert d.bits == bits and d.nbytes == bits // 8
    assert d.storage == np.dtype(storage)
    assert d.storage.itemsize * 8 == bits  # one element of storage per element of the type
    assert (d.is_int, d.is_signed, d.is_float, d.is_bool) == (is_int, signed, is_float, name == "bool")
    if lo is not None:
        assert d.min == lo and d.max == hi
        assert type(d.min) is (int if is_int else float)


def test_datatype_ranges_match_numpy():
    assert (D.BOOL.min, D.BOOL.max) == (False, True)  # were a raw ValueError (np.finfo of its u32 storage)
    for d in D:
        if d.is_int:
            info = np.iinfo(d.storage)
            assert (d.min, d.max) == (int(info.min), int(info.max))
    # bf16's largest finite value is 0x7F7F, and one ulp further is inf
    assert ir.bf16_bits_to_f32(0x7F7F) == np.float32(D.BF16.max)
    assert np.isinf(ir.bf16_bits_to_f32(0x7F80))


def test_datatype_parse_accepts_datatype_and_rejects_unknown():
    assert D.parse(D.F32) is D.F32
    for bad in ("", "i128", "i3", None, 32):
        with pytest.raises(IRValidationError) as info:
            D.parse(bad)
        assert_fix(str(info.value))
        assert "u8, u16, u32" in str(info.value)


@pytest.mark.parametrize("name, fix", [
    ("float", "'float' names different widths in C, in NumPy and on different platforms, so say which: 'f32' or 'f64'"),
    ("int", "say which: 'i32' or 'i64'"),
    ("intp", "say which: 'i32' or 'i64'"),
    ("U32", "write 'u32' (type names are lower case, without spaces)"),
    (" f32", "write 'f32'"),
    (">i4", "vyre buffers hold little-endian values: use 'i32', and convert a big-endian array with "
            "a.astype(a.dtype.newbyteorder('<'))"),
    (np.dtype(">f8"), "is big-endian; vyre buffers hold little-endian values. Fix: use 'f64'"),
    ("f1", "use one of u8"),  # was a raw TypeError (NumPy has no 1-byte float)
    ("<f1", "use one of u8"),
    ("<i8", "NumPy's 8-byte signed integer, while vyre's i8 is 8 bits: say which, i64 or i8"),  # 'i8' is vyre's
    ("=u8", "say which, u64 or u8"),
    ("l", "say which: 'i32' or 'i64'"), ("L", "say which: 'u32' or 'u64'"),  # C's long: platform widths
    ("F", "use one of u8"),  # NumPy's complex64, not 'f' (f32) in capitals
    ("bool8", "write 'bool'"),  # NumPy 1's alias
])
def test_datatype_parse_says_what_to_write_for_a_name_it_refuses(name, fix):
    with pytest.raises(IRValidationError) as info:
        D.parse(name)
    assert fix in str(info.value)
    assert_fix(str(info.value))


@pytest.mark.parametrize("name, want", [
    ("i4", D.I32), ("<f8", D.F64), ("i8", D.I8), ("u8", D.U8), ("=u2", D.U16), ("u1", D.U8), (">u1", D.U8), ("f2", D.F16), ("half", D.F16),
    ("single", D.F32), ("double", D.F64), ("intc", D.I32), ("longlong", D.I64), ("?", D.BOOL), ("b1", D.BOOL), ("|b1", D.BOOL),
    ("=?", D.BOOL), ("<?", D.BOOL), (">?", D.BOOL), ("|?", D.BOOL), ("<b1", D.BOOL), (">b1", D.BOOL), ("=b1", D.BOOL),
    ("bool_", D.BOOL),
    # NumPy's one-letter codes of one width (empty(n, 'f') took them before types were read alike)
    ("b", D.I8), ("B", D.U8), ("h", D.I16), ("H", D.U16), ("i", D.I32), ("I", D.U32), ("q", D.I64), ("Q", D.U64),
    ("e", D.F16), ("f", D.F32), ("d", D.F64),
])
def test_datatype_parse_takes_numpys_sized_codes_and_fixed_aliases(name, want):
    """A string NumPy reads as one width on every platform names that type, as np.dtype(name) does,
    but for vyre's own names: 'i8' and 'u8' are 8 bits (their prefixed NumPy forms are refused)."""
    assert D.parse(name) is want
    if name not in ("i8", "u8"):
        assert D.parse(np.dtype(name)) is want


@pytest.mark.parametrize("call, fragment", [
    (lambda: ir.wrap_int(1.5, D.I32), "takes an integer"),
    (lambda: ir.wrap_int(True, D.U8), "takes an integer"),
    (lambda: ir.wrap_int("7", D.U8), "takes an integer"),
    (lambda: ir.wrap_int(3, D.F32), "takes an integer type, and f32 is not one"),
    (lambda: ir.wrap_int(3, "float32"), "takes an integer type, and f32 is not one"),
    (lambda: ir.wrap_int(3, "u9"), "unknown data type 'u9'"),
    (lambda: ir.float_to_bits("1.0", D.F32), "takes a number"),
    (lambda: ir.float_to_bits(None, D.F32), "takes a number"),
    (lambda: ir.float_to_bits(np.bool_(True), D.F32), "takes a number"),
    (lambda: ir.float_to_bits(1.5, D.I32), "takes a float type, and i32 is not one"),
    (lambda: ir.bits_to_float(2**40, D.F32), "not a 32-bit pattern"),
    (lambda: ir.bits_to_float(-1, D.F16), "not a 16-bit pattern"),
    (lambda: ir.bits_to_float(1.0, D.F32), "takes an integer"),
    (lambda: ir.bits_to_float(1, D.U32), "takes a float type"),
    (lambda: list(ir.walk(5)), "iterable of IR"),
    (lambda: list(ir.walk([1, 2])), "item 0 is an int"),
    (lambda: list(ir.walk("abc")), "iterable of IR"),
    (lambda: ir.walk(5), "iterable of IR"),  # at the call, not once the result is iterated
    (lambda: ir.walk(f32_prog()), "not a Program. Fix: pass program.entry"),  # Program has no .body
])
def test_bit_helpers_and_walk_refuse_what_they_cannot_take(call, fragment):
    with pytest.raises(IRValidationError, match="Fix:") as e:
        call()
    assert fragment in str(e.value)


def test_the_walk_fix_names_an_attribute_a_program_has():
    p = f32_prog(ir.store("out", 0, 1.0))
    assert [type(x).__name__ for x in ir.walk(p.entry)] == ["Store", "Lit", "Lit"]


def test_float_to_bits_takes_numpy_numbers_and_rounds_huge_ints_to_inf():
    assert ir.float_to_bits(np.float16(1.0), D.F32) == 0x3F800000
    assert ir.float_to_bits(np.int64(2), D.F64) == ir.float_to_bits(2.0, D.F64)
    assert ir.float_to_bits(10**400, D.F32) == ir.float_to_bits(math.inf, D.F32)
    assert ir.float_to_bits(-10**400, D.F64) == ir.float_to_bits(-math.inf, D.F64)
    assert ir.wrap_int(np.uint64(2**64 - 1), D.I64) == -1


def test_the_bf16_helpers_take_numbers_and_bit_patterns_only():
    """Regression (a red-team): floats became bit patterns (0.5 -> 0), ints past 16 bits wrapped,
    a bool was bit 1, "1.5" was parsed, and inf, strings and objects raised raw errors."""
    assert ir.bf16_bits_to_f32(np.uint16([0x3F80, 0xC000])).tolist() == [1.0, -2.0]
    assert ir.bf16_bits_to_f32([0, 0xFFFF]).dtype == np.float32 and float(ir.bf16_bits_to_f32(0x3F80)) == 1.0
    assert ir.f32_to_bf16_bits([1.0, 2, np.float16(-2)]).tolist() == [0x3F80, 0x4000, 0xC000]
    assert ir.f32_to_bf16_bits(np.float64(1e300)).tolist() == 0x7F80  # past f32: an infinity, as the cast
    assert ir.bf16_bits_to_f32([]).dtype == np.float32 and ir.f32_to_bf16_bits(()).dtype == np.uint16
    # f64 values go through f32 first, as a cast to bf16 does (docs/semantics.md)
    assert int(ir.f32_to_bf16_bits(1 + 2**-8 + 2**-30)) == ir.float_to_bits(1 + 2**-8 + 2**-30, D.BF16) == 0x3F80
    for bad in (np.array([0.5, 1.7]), 1.0, [True], "1", b"1", object(), None, [1, [2]], 1j):
        with pytest.raises(IRValidationError, match="bf16_bits_to_f32 takes bit patterns.*Fix:"):
            ir.bf16_bits_to_f32(bad)
    for bad in ([70000], -1, 2**70):
        with pytest.raises(IRValidationError, match="bf16_bits_to_f32.*(16-bit pattern|takes bit patterns).*Fix:"):
            ir.bf16_bits_to_f32(bad)
    for bad in ("1.5", [True], np.bool_(True), object(), None, 1j, np.array(["a"])):
        with pytest.raises(IRValidationError, match="f32_to_bf16_bits takes numbers.*Fix:"):
            ir.f32_to_bf16_bits(bad)


def test_wrap_int_and_bit_helpers():
    assert ir.wrap_int(256, D.U8) == 0
    assert ir.wrap_int(-1, D.U32) == 2**32 - 1
    assert ir.wrap_int(2**31, D.I32) == -2**31
    assert ir.wrap_int(-2**63 - 1, D.I64) == 2**63 - 1
    assert ir.float_to_bits(1.0, D.F32) == 0x3F800000
    assert ir.float_to_bits(-0.0, D.F64) == 1 << 63
    assert ir.float_to_bits(1.0, D.BF16) == 0x3F80
    assert ir.float_to_bits(1.0, D.F16) == 0x3C00
    assert ir.bits_to_float(0x3C00, D.F16) == 1.0
    assert ir.bits_to_float(0xC000, D.BF16) == -2.0



def vn_reference():
    import vyre_numba

    return vyre_numba.get_backend("reference")


# ---- builders and operator overloading --------------------------------------------------------

def test_operator_overloading_builds_binops():
    x = ir.load("a", ir.gid(0))
    assert (x + 1).equals(BinOp("add", x, Lit(D.I64, 1, weak=True)))
    table = {
        "add": x + 1, "sub": x - 1, "mul": x * 1, "div": x / 1, "mod": x % 1,
        "bitand": x & 1, "bitor": x | 1, "bitxor": x ^ 1, "shl": x << 1, "shr": x >> 1,
        "lt": x < 1, "le": x <= 1, "gt": x > 1, "ge": x >= 1, "eq": x.eq(1), "ne": x.ne(1),
    }
    for op, e in table.items():
        assert isinstance(e, BinOp) and e.op == op and e.a.equals(x) and e.b.equals(Lit(D.I64, 1, weak=True)), op
    assert (-x).equals(UnOp("neg", x)) and (~x).equals(UnOp("bitnot", x))
    assert x.cast("u8").equals(ir.cast(x, D.U8))


def test_floor_division_and_numpy_functions_are_refused_with_the_ir_form():
    """Regression (a new user's walkthrough): `x // 2` on an f32 expression silently built true
    division ([7, -7] -> [3.5, -3.5], NumPy [3, -4]), and np.sqrt(x) raised NumPy's own TypeError."""
    x = ir.load("a", ir.gid(0))
    for call in (lambda: x // 2, lambda: 7 // x, lambda: np.float32(7) // x):
        with pytest.raises(IRValidationError, match=r"floor division \(//\).*Fix: write a / b.*ir.floor\(a / b\)"):
            call()
    for call, fix in ((lambda: np.sqrt(x), "use ir.sqrt"), (lambda: np.maximum(x, 0), "use ir.max_"),
                      (lambda: np.abs(x), "use ir.abs_"), (lambda: np.hypot(x, 1.0), "build it from the ir"),
                      (lambda: np.float32(2) ** x, "multiply")):
        with pytest.raises(IRValidationError, match=f"Fix: {fix}"):
            call()
    # a NumPy scalar on the left builds what the operator builds, operands in order, types kept
    f32_two, i32_three = Lit(D.F32, ir.float_to_bits(2.0, D.F32)), Lit(D.I32, 3)
    assert (np.float32(2) * x).equals(BinOp("mul", f32_two, x)) and (np.int32(3) - x).equals(BinOp("sub", i32_three, x))
    assert (np.float32(2) < x).equals(BinOp("lt", f32_two, x)) and (np.int32(3) == x).equals(BinOp("eq", i32_three, x))
    # a 0-d array is such a scalar on either side (on the right it was refused, on the left taken: a red-team)
    assert (np.array(3, np.int32) - x).equals(BinOp("sub", i32_three, x))
    assert (x - np.array(3, np.int32)).equals(BinOp("sub", x, i32_three))
    # the functions behind operators, called on IR, are NumPy's (floor modulo, true division): refused, as
    # np.sqrt is (np.mod(x, 3) built the IR's truncating mod, np.true_divide(x_i32, 2) integer division)
    for call, op in ((lambda: np.mod(x, 3), "mod"), (lambda: np.true_divide(x, 2), "div"),
                     (lambda: np.left_shift(x, 33), "shl"), (lambda: np.add(x, x), "add"),
                     (lambda: np.negative(x), "neg"), (lambda: np.invert(x), "bitnot")):
        with pytest.raises(IRValidationError, match=rf"given an IR expression.*Fix: write the operator or ir.{op}\("):
            call()


def test_reflected_operators_keep_operand_order():
    x = ir.var("x")
    one = Lit(D.I64, 1, weak=True)
    for op, e in {"add": 1 + x, "sub": 1 - x, "mul": 1 * x, "div": 1 / x, "mod": 1 % x,
                  "bitand": 1 & x, "bitor": 1 | x, "bitxor": 1 ^ x, "shl": 1 << x,
                  "shr": 1 >> x}.items():
        assert e.equals(BinOp(op, one, x)), op
    # `1 < x` is evaluated by Python as `x > 1`
    assert (1 < x).equals(BinOp("gt", x, one))
    assert (2.5 * x).equals(BinOp("mul", Lit(D.F64, ir.float_to_bits(2.5, D.F64), weak=True), x))


def test_double_equals_builds_ir_and_equals_compares_structure():
    """Regression: `i == 0` was structural dataclass equality, a Python False, so
    `ir.if_(i == 0, ...)` silently built `if false`."""
    a, b = ir.load("a", 0), ir.load("a", 0)
    assert (a == b).equals(BinOp("eq", a, b)) and (a != b).equals(BinOp("ne", a, b))
    assert a.equals(b) and hash(a) == hash(b) and a.key() == b.key()
    assert not a.equals(ir.load("a", 1)) and not ir.var("x").equals(ir.var("y"))
    i = ir.var("i")
    cond = ir.if_(i == 0, [ir.return_()]).cond
    assert isinstance(cond, BinOp) and cond.op == "eq" and cond.b.equals(ir.lit(0))
    assert (3 == i).equals(BinOp("eq", i, ir.lit(3)))        # reflected, as Python does
    assert (np.uint32(3) == i).equals(BinOp("eq", ir.u32(3), i))  # NumPy hands the IR its ufunc: the same comparison
    for make in (lambda: bool(i == 0), lambda: i in [ir.var("i")], lambda: {ir.var("i"): 1}[i]):
        with pytest.raises(IRValidationError, match="a.equals"):
            make()
    assert len({ir.var("i").key(), ir.var("i").key(), ir.var("j").key()}) == 2


def test_if_with_double_equals_runs_the_comparison():
    """The `==` condition reaches the interpreter as a comparison, not as a constant."""
    i = ir.var("i")
    p = ir.Program([ir.BufferDecl.output("y", 0, "u32", 8)], 8,
                   [ir.let("i", ir.gid(0)), ir.if_((i == 3) | (i == 5), [ir.store("y", i, 1)]),
                    ir.if_(i != 0, [ir.store("y", 0, 7)])])
    (y,) = vn_reference().dispatch(p, [])
    assert y.tolist() == [7, 0, 0, 1, 0, 1, 0, 0]


def test_bool_of_expression_raises_with_fix():
    x = ir.load("a", 0)
    for make in (lambda: bool(x < 1), lambda: (x if x else 0), lambda: (x < 1 and x > 0),
                 lambda: not x):
        with pytest.raises(IRValidationError) as info:
            make()
        assert_fix(str(info.value))
        assert "ir.if_" in str(info.value)


def test_named_builders_match_generic_ones():
    x, y = ir.var("x"), ir.var("y")
    for op in ir.BINOPS:
        fn = {"min": ir.min_, "max": ir.max_}.get(op) or getattr(ir, op)
        assert fn(x, y).equals(ir.binary(op, x, y)) and fn(x, y).equals(BinOp(op, x, y))
    for op in ir.UNOPS:
        fn = {"abs": ir.abs_, "round": ir.round_, "not": ir.not_}.get(op) or getattr(ir, op)
        assert fn(x).equals(ir.unary(op, x)) and fn(x).equals(UnOp(op, x))
    assert ir.atomic_add("c", 0, 1).equals(ir.atomic("add", "c", 0, 1))
    assert ir.gid(1).equals(ir.invocation_id(1)) and ir.lid(2).equals(ir.local_id(2))
    assert ir.wgid(0).equals(ir.workgroup_id(0))


@pytest.mark.parametrize("make", [
    lambda: ir.binary("pow", 1, 2),
    lambda: ir.unary("cbrt", 1),
    lambda: ir.atomic("nand", "c", 0, 1),
    lambda: ir.atomic("compare_exchange", "c", 0, 1),
    lambda: ir.atomic("add", "c", 0, 1, expected=0),
    lambda: ir.barrier("device"),
    lambda: ir.gid(3),
    lambda: ir.lid(-1),
    lambda: ir.load("", 0),
    lambda: ir.load(3, 0),
    lambda: ir.let("", 1),
    lambda: ir.var(None),
    lambda: ir.load("a", "0"),
    lambda: ir.load("a", [1]),
    lambda: ir.if_(ir.boolean(True), [ir.var("x")]),
    lambda: ir.block(ir.load("a", 0)),
    lambda: ir.cast(1, "f128"),
    *[lambda f=f: f(ir.var("x")) for f in (lambda x: x ** 2, lambda x: 2 ** x, abs, round, int, float, len, list,
                                           lambda x: x @ x, math.floor, math.ceil, math.trunc, lambda x: [1, 2][x],
                                           lambda x: divmod(x, 2), lambda x: divmod(2, x), lambda x: x[0],
                                           lambda x: f"{x:>8}", math.sqrt, range)],
    lambda: ir.Program([], {4, 16}, []),
    lambda: ir.BufferDecl("a", 0, "read_write", "f32", 0, True, {4, 0}),
])
def test_builder_errors_carry_fix(make):
    with pytest.raises(IRValidationError) as info:
        make()
    assert_fix(str(info.value))


def test_python_calls_on_expressions_are_told_the_ir_call_that_works():
    """Regression (a red-team): math.sqrt(x) was told x.cast('f32'), which fails the same way;
    range(x) was told ir.load; divmod, x[0] and f"{x:>8}" raised raw TypeErrors."""
    x = ir.var("x")
    for call, fix in ((lambda: math.sqrt(x), "Fix: use the IR's functions on the device (ir.sqrt(x), ir.exp(x), ...)"),
                      (lambda: range(x), "Fix: loop on the device with ir.loop(var, start, end, body)"),
                      (lambda: x[0], "Fix: an expression is one value, not a buffer: read element i of buffer a with "
                                     "ir.load('a', i)."),
                      (lambda: divmod(x, 3), "Fix: write x / y and x % y"),
                      (lambda: f"{x:>8}", "Fix: format its text: f'{str(x):>8}'")):
        with pytest.raises(IRValidationError) as e:
            call()
        assert fix in str(e.value)
    assert f"{x}" == "x" == format(x)


def test_a_missing_buffer_is_a_key_error_and_a_vyre_error():
    p = ir.Program([ir.BufferDecl.output("o", 0, "f32")], 1, [])
    for kind in (KeyError, IRValidationError):
        with pytest.raises(kind) as info:
            p.buffer("nope")
        assert_fix(str(info.value))


@pytest.mark.parametrize("buffers,name,fragment", [
    ([ir.BufferDecl(["a"], 0, "read_only", "f32")], "main", "not an identifier"),
    ([], "_", "not one PTX can give a kernel"),
    ([], "WARP_SZ", "not one PTX can give a kernel"),
    ([], "vyre_math_sin_f32", "begins with vyre_, which names the functions the kernels link"),  # a red-team:
    ([], "vyre_grid_barrier", "Fix: choose another name, e.g. 'grid_barrier'"),  # it failed in assembly
])
def test_names_nothing_downstream_can_take_are_reported_by_validate(buffers, name, fragment):
    p = ir.Program(buffers, 1, [], name=name)
    with pytest.raises(IRValidationError) as info:
        ir.check(p)
    assert fragment in str(info.value)
    assert_fix(str(info.value))


def test_statement_lists_flatten_nested_lists():
    s1, s2, s3 = ir.let("a", 1), ir.let("b", 2), ir.return_()
    assert ir.if_(True, [s1, [s2, (s3,)]]).then == (s1, s2, s3)
    assert ir.if_(True, s1).then == (s1,) and ir.if_(True, s1).otherwise == ()
    assert ir.block(s1, [s2]).body == (s1, s2)
    assert ir.loop("k", 0, 2, s3).body == (s3,)


def test_numpy_scalars_keep_their_type():
    assert ir.load("a", np.uint8(3)).index.equals(ir.u8(3))
    assert (ir.var("x") + np.float32(0.5)).equals(BinOp("add", ir.var("x"), ir.f32(0.5)))
    assert (ir.var("x") + np.int16(-2)).equals(BinOp("add", ir.var("x"), ir.i16(-2)))
    assert ir.select(np.bool_(True), 1, 2).cond.equals(ir.boolean(True))
    assert ir.u32(np.uint32(5)).raw == 5 and ir.f32(np.float32(1.5)).value == 1.5
    assert ir.i8(np.float64(-3.0)).raw == -3
    for bad in (lambda: ir.u8(np.int64(256)), lambda: ir.u32(np.float32(1.5)), lambda: ir.u32(True),
                lambda: ir.u32(np.bool_(True)), lambda: ir.lit(np.complex64(1), "f32")):
        with pytest.raises(IRValidationError, match="Fix:"):
            bad()


@pytest.mark.parametrize("spelling", [np.float32, np.dtype("float32"), "float32", "f32", D.F32])
def test_numpy_dtypes_name_data_types(spelling):
    assert D.parse(spelling) is D.F32
    assert ir.BufferDecl.read("x", 0, spelling).dtype is D.F32
    assert ir.cast(ir.var("x"), spelling).dtype is D.F32


def test_numpy_dtype_names_for_every_type():
    assert D.parse(np.bool_) is D.BOOL and D.parse("bool") is D.BOOL
    assert D.parse("bfloat16") is D.BF16
    for d in D:
        if d not in (D.BOOL, D.BF16):
            assert D.parse(d.storage) is d and D.parse(d.storage.name) is d
    for bad in (np.complex64, "complex128", ">f4", object, np.dtype("U3"), 5, True, None):
        with pytest.raises(IRValidationError, match="Fix:"):
            D.parse(bad)


# ---- literals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [d for d in D if d.is_int])
def test_integer_literal_range(dt):
    assert ir.lit(dt.min, dt).raw == dt.min and ir.lit(dt.max, dt).raw == dt.max
    for bad in (dt.min - 1, dt.max + 1):
        with pytest.raises(IRValidationError) as info:
            ir.lit(bad, dt)
        assert_fix(str(info.value))
        assert str(dt) in str(info.value)


def test_integer_literal_from_integral_float_and_rejects_fraction():
    assert ir.lit(3.0, "u8").equals(ir.u8(3))
    with pytest.raises(IRValidationError):
        ir.lit(2.5, "i32")
    with pytest.raises(IRValidationError):
        ir.lit("3", "i32")


def test_bool_and_float_literal_type_errors():
    assert ir.boolean(True).equals(Lit(D.BOOL, 1)) and ir.lit(False, "bool").equals(Lit(D.BOOL, 0))
    with pytest.raises(IRValidationError):
        ir.lit(2, "bool")
    with pytest.raises(IRValidationError):
        ir.lit(True, "f32")
    with pytest.raises(IRValidationError):
        ir.f32("1.0")


def test_float_literals_round_to_nearest_even():
    # 0.1 in each format, from the IEEE definitions
    assert ir.f32(0.1).raw == 0x3DCCCCCD
    assert ir.f16(0.1).raw == 0x2E66
    assert ir.bf16(0.1).raw == 0x3DCD
    assert ir.f64(0.1).raw == struct.unpack("<Q", struct.pack("<d", 0.1))[0]
    # ties go to even: 1 + 2^-24 lies halfway between 1.0f and its successor
    assert ir.f32(1 + 2**-24).raw == 0x3F800000
    assert ir.f32(1 + 3 * 2**-24).raw == 0x3F800002
    assert ir.f16(1 + 2**-11).raw == 0x3C00
    assert ir.f16(1 + 3 * 2**-11).raw == 0x3C02
    assert ir.bf16(1 + 2**-8).raw == 0x3F80
    assert ir.bf16(1 + 3 * 2**-8).raw == 0x3F82
    # the value reads back as the rounded number
    assert ir.f32(0.1).value == float(np.float32(0.1)) != 0.1
    assert ir.f16(65519.0).value == 65504.0
    assert ir.f16(65519.0).value == 65504.0  # within half an ulp of the largest finite: rounds to it
    assert ir.f16(2**-24).raw == 1  # smallest subnormal kept
    assert ir.f32(1e-45).raw == 1
    assert ir.bf16(1e-40).raw != 0  # bf16 subnormal kept


def test_huge_int_float_literal_rounds_to_infinity_only_when_asked():
    """Regression: ir.f32(10**400) and a weak 10**400 in a float context raised OverflowError. A
    finite literal past its float type's largest finite is now refused with a fix (it became inf
    silently, while binding such a value to a buffer was refused); an explicit cast still
    overflows to inf, as IEEE conversion does."""
    for make, value in ((ir.f32, 10**400), (ir.f64, -10**400), (ir.f64, 2**1024 - 2**970), (ir.bf16, 2**200),
                        (ir.f16, 65520.0), (ir.f16, -1e6), (ir.f32, 1e39)):
        with pytest.raises(IRValidationError, match=r"past the largest finite .*Fix: write -?math\.inf"):
            make(value)
    assert ir.f64(2**1024 - 2**971).value == D.F64.max  # below the halfway point: the largest finite
    assert ir.f32(math.inf).value == math.inf and ir.f16(-math.inf).value == -math.inf  # infinities as written
    assert math.isnan(ir.f16(math.nan).value)
    for value, shown in ((-10**400, r"-1000*\.\.\.0* "), (1e40, r"1e\+40 ")):
        (d,) = ir.validate(f32_prog(ir.store("out", 0, ir.load("a", 0) + value)))
        assert re.match(f"literal {shown}cannot be a f32 \\(past its largest finite", d.message) and "math.inf" in d.message
        with pytest.raises(IRValidationError, match="cannot be a f32"):
            vn.get_backend("reference").dispatch(f32_prog(ir.store("out", 0, value)), [np.zeros(1, np.float32)])
    p = f32_prog(ir.store("out", 0, ir.cast(ir.f64(1e40), "f32")))  # overflow asked for: a cast
    assert vn.get_backend("reference").dispatch(p, [np.zeros(1, np.float32)])[0][0] == np.inf


def test_a_weak_literal_cast_starts_from_its_exact_value():
    """Regression: ir.cast(0.1, 'f64') was 0.1 rounded to f32 (the weak default) and widened, and
    ir.cast(16777217.0, 'i64') went through f32 to 16777216."""
    p = ir.Program([B.output("d", 0, "f64", 2), B.output("i", 1, "i64", 1), B.output("h", 2, "f16", 1)], 1,
                   [ir.store("d", 0, ir.cast(0.1, "f64")), ir.store("d", 1, ir.cast(2**53 + 1, "f64")),
                    ir.store("i", 0, ir.cast(16777217.0, "i64")), ir.store("h", 0, ir.cast(0.1, "f16"))])
    d, i, h = vn.get_backend("reference").dispatch(p, [])
    assert d.tolist() == [0.1, float(2**53)] and i[0] == 16777217 and h[0] == np.float16(0.1)
    (d,) = ir.validate(ir.Program([B.output("h", 0, "f16", 1)], 1, [ir.store("h", 0, ir.cast(1e5, "f16"))]))
    assert "cannot be a f16 (past its largest finite" in d.message



@pytest.mark.parametrize("value, dtype, wraps", [(300, "u8", 44), (-1, "u32", 2**32 - 1), (2**31, "i32", -2**31),
                                                 (2**64 - 1, "i64", -1), (-129, "i8", 127)])
def test_a_weak_int_literal_cast_to_a_type_that_cannot_hold_it_is_refused(value, dtype, wraps):
    """ir.cast(300, 'u8') wrapped silently to 44 (the literal took the default type first); NumPy 2
    refuses np.uint8(300) too. The error names the wrapped value, and a typed value wraps on purpose."""
    (d,) = ir.validate(ir.Program([B.output("u", 0, dtype, 1)], 1, [ir.store("u", 0, ir.cast(value, dtype))]))
    assert f"would wrap to {wraps}. Fix:" in d.message and f"ir.cast(ir.{'u64' if value > 2**63 else 'i64'}(" in d.message
    typed = ir.u64(value) if value >= 2**63 else ir.i64(value)
    p = ir.Program([B.output("u", 0, dtype, 1)], 1, [ir.store("u", 0, ir.cast(typed, dtype))])
    assert vn.get_backend("reference").dispatch(p, [])[0][0] == wraps
    edge = D.parse(dtype).max if value > 0 else D.parse(dtype).min  # the last value that fits is taken as it is
    p = ir.Program([B.output("u", 0, dtype, 1)], 1, [ir.store("u", 0, ir.cast(edge, dtype))])
    assert vn.get_backend("reference").dispatch(p, [])[0][0] == edge


@pytest.mark.parametrize("value", [2**64, -2**63 - 1, 10**30])
@pytest.mark.parametrize("alone", [True, False])
def test_a_literal_no_integer_type_holds_is_told_so_not_offered_a_typed_literal_that_fails(value, alone):
    """Regression (a red-team): the Fix of ir.cast(2**64, 'u32') offered ir.u64(2**64), which
    raises; no typed literal holds it, so the Fix says to write one in range."""
    lit = value if alone else ir.add(value, 1)
    (d,) = ir.validate(ir.Program([B.output("u", 0, "u32", 1)], 1, [ir.store("u", 0, ir.cast(lit, "u32"))]))
    assert f"no integer type holds {value}." in d.message and "ir.u64(" not in d.message
    assert "ir.i64(" not in d.message


def test_the_enums_read_their_names_and_refuse_others_with_a_fix():
    assert D("float32") is D.F32 and D(np.float32) is D.F32 and D("u8") is D.U8  # as DataType.parse reads them
    for make, value in ((D, "nope"), (D, "float"), (D, object()), (ir.Access, "rw"), (ir.Role, "x"), (ir.Role, [1])):
        with pytest.raises(IRValidationError, match=r"Fix: "):
            make(value)
    assert ir.Access("read_write") is ir.Access.READ_WRITE and ir.Role("inout") is ir.Role.INOUT
    with pytest.raises(IRValidationError, match=r"access 'rw' is not one of .*Fix: use the constructors"):
        B("a", 0, "rw", "u32")


@pytest.mark.parametrize("value, dtype, becomes", [(300.0, "u8", 255), (-1.0, "u8", 0), (1e10, "i32", 2**31 - 1),
                                                   (-1e300, "i64", -2**63), (math.inf, "u16", 65535),
                                                   (math.nan, "i32", 0)])
def test_a_weak_float_literal_cast_to_an_integer_type_that_cannot_hold_it_is_refused(value, dtype, becomes):
    """Regression (a red-team): ir.cast(300.0, 'u8') saturated silently to 255 while ir.cast(300, 'u8')
    was refused; NumPy 2 refuses np.uint8(300.0) too. The error names what the cast would give,
    and casting a typed value gives exactly that; a value that fits (3.7 -> 3) is taken."""
    p = ir.Program([B.output("u", 0, dtype, 1)], 1, [ir.store("u", 0, ir.cast(value, dtype))])
    (d,) = ir.validate(p)
    assert f"it would {'become' if math.isnan(value) else 'saturate to'} {becomes}. Fix:" in d.message
    typed = ir.Program([B.output("u", 0, dtype, 1)], 1, [ir.store("u", 0, ir.cast(ir.f64(value), dtype))])
    assert vn.get_backend("reference").dispatch(typed, [])[0][0] == becomes
    fits = ir.Program([B.output("u", 0, dtype, 1)], 1, [ir.store("u", 0, ir.cast(3.7, dtype))])
    assert vn.get_backend("reference").dispatch(fits, [])[0][0] == 3


@pytest.mark.parametrize("dt", [D.F16, D.BF16, D.F32, D.F64])
@pytest.mark.parametrize("v", [2**60 + 2**36 + 1, -(2**60 + 2**36 + 1), 2**53 + 1, 2**24 + 1, 2**24 + 3, 2049, 2051,
                               2**64 - 1, 2**63 + 2**39 + 1, 2**127 * 3 + 1, 2**128 - 2**103, 2**128 - 2**103 - 1])
def test_int_literals_into_floats_round_once_as_cast_does(dt, v):
    """Regression: ir.f32(2**60 + 2**36 + 1) went int -> f64 -> f32 (a tie at f32 after the first
    rounding, so 2**60 instead of the nearest 2**60 + 2**37). The literal is what cast gives."""
    exact = ir.float_to_bits(v, dt)
    if ir.bits_to_float(exact, dt) in (math.inf, -math.inf):  # past the largest finite: refused, as cast is asked
        with pytest.raises(IRValidationError, match="past the largest finite"):
            ir.lit(v, dt)
    else:
        assert ir.lit(v, dt).raw == exact
    if -2**63 <= v < 2**64:
        src = D.U64 if v >= 0 else D.I64
        run = vn.get_backend("reference").dispatch(ir.Program(
            [B.read("x", 0, src), B.output("y", 1, dt, 1)], 1, [ir.store("y", 0, ir.cast(ir.load("x", 0), dt))]),
            [np.array([v], src.storage)])[0]
        assert int(run.view(np.dtype(f"u{dt.bits // 8}"))[0]) == exact
    if dt is not D.BF16 and v > 0 and math.isfinite(ir.bits_to_float(exact, dt)):  # bf16 is through f32, as cast
        from fractions import Fraction
        err = abs(Fraction(ir.lit(v, dt).value) - v)
        for k in (1, -1):  # no neighbour is nearer
            near = ir.bits_to_float(exact + k, dt)
            assert not math.isfinite(near) or err <= abs(Fraction(near) - v)


def test_int_literal_f32_rounds_to_the_nearest_and_so_does_a_weak_one():
    v = 2**60 + 2**36 + 1
    assert ir.f32(v).value == 2**60 + 2**37 and ir.float_to_bits(v, D.F32) == 0x5D800001
    p = f32_prog(ir.store("out", 0, ir.load("a", 0) + v))
    assert ir.validate(p) == [] and p.entry[0].value.b.equals(ir.f32(2**60 + 2**37))


def test_time_spans_are_no_literals_though_numpy_counts_them_among_its_integers():
    """Regression: ir.i64(np.timedelta64(5, "m")) raised a raw TypeError and ir.i64(np.timedelta64(5,
    "ns")) was 5, its unit dropped; wrap_int and float_to_bits did the same."""
    for span in (np.timedelta64(5, "ns"), np.timedelta64(5, "m"), np.timedelta64(1, "s")):
        for make in (lambda: ir.i64(span), lambda: ir.f32(span), lambda: ir.lit(span, "u32"),
                     lambda: ir.wrap_int(span, D.I32), lambda: ir.float_to_bits(span, D.F32)):
            with pytest.raises(IRValidationError, match="timedelta64") as info:
                make()
            assert_fix(str(info.value))


def test_long_double_literals_are_taken_at_their_exact_value():
    """Regression: np.longdouble went through float(): ir.u64(np.longdouble(2**60 + 1)) stored 2**60,
    ir.u64(np.longdouble(2**64 - 1)) was refused and a fraction was taken as an int."""
    ld = np.longdouble
    if np.finfo(ld).nmant <= 52:
        pytest.skip("long double is a float64 here")
    assert ir.u64(ld(2**60 + 1)).raw == 2**60 + 1 and ir.i64(ld(-(2**62) - 1)).raw == -(2**62) - 1
    assert ir.u64(ld(2**64 - 1)).raw == 2**64 - 1
    for bad, dt in ((ld(3) + ld(2) ** -60, "u32"), (ld("inf"), "i64"), (ld("nan"), "u8")):
        with pytest.raises(IRValidationError, match="not an integer") as info:
            ir.lit(bad, dt)
        assert_fix(str(info.value))
    with pytest.raises(IRValidationError, match="does not fit u64"):
        ir.u64(ld(2**64))
    # into floats: rounded once from the exact value (f64 first would make a tie at f32 here)
    assert ir.f32(ld(1) + ld(2) ** -24 + ld(2) ** -60).raw == 0x3F800001
    assert ir.f32(ld(1) + ld(2) ** -24).raw == 0x3F800000
    assert ir.f64(ld(1) / 3).value == 1 / 3
    assert ir.f16(ld(1) + ld(2) ** -11 + ld(2) ** -60).raw == 0x3C01
    # without a type it has none of its own: the message says how to give one
    with pytest.raises(IRValidationError, match="is a NumPy float128, which no IR type holds.*Fix: .*ir.lit"):
        ir.var("x") + ld(2)


def test_nan_and_negative_zero_literals_compare_and_hash_as_ir():
    nan1, nan2 = ir.f32(float("nan")), ir.f32(float("nan"))
    assert math.isnan(nan1.value)
    assert nan1.equals(nan2) and hash(nan1) == hash(nan2)          # same bits: same IR
    assert not ir.f32(-0.0).equals(ir.f32(0.0))                    # -0.0 is a different literal
    assert ir.f32(-0.0).raw == 0x80000000 and math.copysign(1, ir.f32(-0.0).value) == -1
    assert len({x.key() for x in (ir.f32(0.0), ir.f32(-0.0), nan1, nan2)}) == 3
    assert not ir.f64(float("inf")).equals(ir.f64(float("-inf")))
    assert not ir.f32(1.0).equals(ir.f64(1.0)) and not ir.u32(1).equals(ir.i32(1))
    # programs containing them follow the same rules
    p1 = f32_prog(ir.store("out", 0, ir.f32(float("nan"))))
    p2 = f32_prog(ir.store("out", 0, ir.f32(float("nan"))))
    pz = f32_prog(ir.store("out", 0, ir.f32(-0.0)))
    p0 = f32_prog(ir.store("out", 0, ir.f32(0.0)))
    assert p1 == p2 and hash(p1) == hash(p2)
    assert pz != p0 and pz.digest() != p0.digest()


def test_weak_literals_from_python_numbers():
    assert ir.lit(5).equals(Lit(D.I64, 5, weak=True))
    assert ir.lit(-2.5).equals(Lit(D.F64, ir.float_to_bits(-2.5, D.F64), weak=True))
    assert ir.lit(True).equals(Lit(D.BOOL, 1))  # bools are never weak
    assert str(ir.lit(5)) == "5"


# ---- weak literal typing at Program construction ----------------------------------------------

def test_weak_literal_takes_float_context():
    p = f32_prog(ir.store("out", 0, ir.load("a", 0) * 2 + 0.1))
    add = stored_value(p)
    assert add.b.equals(ir.f32(0.1)) and add.a.b.equals(ir.f32(2.0))
    assert p.entry[0].index.equals(ir.u32(0))  # index context is u32
    assert not any(isinstance(x, Lit) and x.weak for x in ir.walk(p.entry))


def test_weak_literal_takes_small_int_context():
    p = ir.Program([B.read_write("v", 0, "u8")], 1,
                   [ir.store("v", 0, ir.load("v", 0) + 255), ir.store("v", 1, ir.select(True, 7, ir.load("v", 2)))])
    assert p.entry[0].value.b.equals(ir.u8(255))
    assert p.entry[1].value.a.equals(ir.u8(7))
    assert ir.validate(p) == []


def test_weak_literal_left_of_strong_operand_takes_its_type():
    p = f32_prog(ir.store("out", 0, 1 - ir.load("a", 0)), ir.let("c", 3 < ir.load("a", 0)))
    assert p.entry[0].value.equals(BinOp("sub", ir.f32(1.0), ir.load("a", ir.u32(0))))
    assert p.entry[1].value.equals(BinOp("gt", ir.load("a", ir.u32(0)), ir.f32(3.0)))
    assert ir.validate(p) == []


def test_out_of_range_weak_literal_becomes_a_diagnostic():
    p = ir.Program([B.read_write("v", 0, "u8")], 1, [ir.store("v", 0, ir.load("v", 0) + 256)])
    (d,) = ir.validate(p)
    assert d.where == "entry[0]" and "256" in d.message and "u8" in d.message
    assert_fix(d.message)
    neg = ir.Program([B.read_write("v", 0, "u32")], 1, [ir.store("v", 0, -1)])
    (d,) = ir.validate(neg)
    assert "-1" in d.message and "u32" in d.message


def test_float_weak_literal_in_int_context_is_a_diagnostic():
    p = ir.Program([B.read_write("v", 0, "i32")], 1, [ir.store("v", 0, 1.5)])
    (d,) = ir.validate(p)
    assert "1.5" in d.message and "i32" in d.message


@pytest.mark.parametrize("value,expected", [
    (0, ir.u32(0)), (2**32 - 1, ir.u32(2**32 - 1)), (-1, ir.i32(-1)), (-2**31, ir.i32(-2**31)),
    (2**32, ir.i64(2**32)), (-2**31 - 1, ir.i64(-2**31 - 1)), (-2**63, ir.i64(-2**63)),
    (2**63, ir.u64(2**63)), (2**64 - 1, ir.u64(2**64 - 1)), (0.5, ir.f32(0.5)),
    (0.1, ir.f32(0.1)),
])
def test_weak_literal_defaults_without_context(value, expected):
    p = ir.Program([], 1, [ir.let("x", value)])
    assert p.entry[0].value.equals(expected)
    assert ir.validate(p) == []


def test_weak_literal_beyond_every_integer_type_is_a_diagnostic():
    p = ir.Program([], 1, [ir.let("x", 2**64)])
    (d,) = ir.validate(p)
    assert d.where == "entry[0]" and str(2**64) in d.message
    assert_fix(d.message)


def test_weak_literal_equivalent_to_explicit_literal():
    weak = f32_prog(ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)) * 2))
    strong = f32_prog(ir.store("out", ir.gid(0), ir.load("a", ir.gid(0)) * ir.f32(2.0)))
    assert weak == strong and weak.digest() == strong.digest()


def test_weak_literals_in_fma_select_loop_and_atomic():
    p = ir.Program([B.read_write("c", 0, "i64"), B.output("f", 1, "f16")], 1, [
        ir.store("f", 0, ir.fma(2, ir.f16(1.0), 0.5)),
        ir.loop("k", 0, 4, [ir.let("o", ir.atomic("max", "c", 0, -5))]),
    ])
    assert ir.validate(p) == []
    fma = p.entry[0].value
    assert ir.structurally_equal((fma.a, fma.b, fma.c), (ir.f16(2.0), ir.f16(1.0), ir.f16(0.5)))
    loop = p.entry[1]
    assert ir.structurally_equal((loop.start, loop.end), (ir.u32(0), ir.u32(4)))
    assert loop.body[0].value.value.equals(ir.i64(-5)) and loop.body[0].value.index.equals(ir.u32(0))


# ---- buffers ----------------------------------------------------------------------------------

def test_bufferdecl_constructors_and_roles():
    r = B.read("a", 0, "f32")
    rw = B.read_write("b", 1, D.U32, 8)
    o = B.output("c", 2, "i16")
    u = B.uniform("d", 3, "u32", 4)
    w = B.workgroup("e", 128, "f64")
    assert (r.access, r.role, r.output, r.count) == (ir.Access.READ_ONLY, ir.Role.INPUT, False, 0)
    assert (rw.access, rw.role, rw.output, rw.count) == (ir.Access.READ_WRITE, ir.Role.INOUT, True, 8)
    assert (o.access, o.role, o.output) == (ir.Access.WRITE_ONLY, ir.Role.OUTPUT, True)
    assert (u.access, u.role, u.count) == (ir.Access.UNIFORM, ir.Role.INPUT, 4)
    assert (w.access, w.role, w.binding, w.count) == (ir.Access.WORKGROUP, ir.Role.SHARED, None, 128)
    assert [b.is_input for b in (r, rw, o, u, w)] == [True, True, False, True, False]
    assert [b.is_output for b in (r, rw, o, u, w)] == [False, True, True, False, False]
    assert [b.access.writable for b in (r, rw, o, u, w)] == [False, True, True, False, True]
    assert r.dtype is D.F32 and o.dtype is D.I16
    # a read_only buffer flagged output is an output by role (the validator refuses it)
    assert B("x", 0, "read_only", "u32", output=True).role is ir.Role.OUTPUT
    assert B.output("c", 2, "u32", 4, output_byte_range=[4, 8]).output_byte_range == (4, 8)
    assert str(rw) == "@1 read_write b: u32[8]"
    assert str(w) == "workgroup e: f64[128]"
    assert str(B.output("c", 2, "u32", 4, output_byte_range=(4, 8))) == "@2 write_only c: u32[4] bytes 4..8"
    with pytest.raises(FrozenInstanceError):
        r.name = "z"
    with pytest.raises(IRValidationError, match="access 'sometimes' is not one of"):
        B("x", 0, "sometimes", "u32")


def test_program_inputs_outputs_bound_buffers_in_binding_order():
    p = ir.Program([
        B.output("o2", 5, "u32"), B.workgroup("tile", 16, "u32"), B.read("a", 3, "u32"),
        B.read_write("rw", 1, "u32"), B.uniform("un", 0, "u32"), B.output("o1", 2, "u32"),
    ], 32, [])
    assert [b.name for b in p.bound_buffers] == ["un", "rw", "o1", "a", "o2"]
    assert [b.name for b in p.inputs] == ["un", "rw", "a"]
    assert [b.name for b in p.outputs] == ["rw", "o1", "o2"]
    assert p.buffer("tile").role is ir.Role.SHARED
    with pytest.raises(KeyError):
        p.buffer("nope")


# ---- programs ---------------------------------------------------------------------------------

def test_program_is_immutable(scale_program):
    p = scale_program
    for field, value in (("entry", ()), ("buffers", ()), ("workgroup_size", (1, 1, 1)), ("name", "x")):
        with pytest.raises(FrozenInstanceError):
            setattr(p, field, value)
    assert isinstance(p.entry, tuple) and isinstance(p.buffers, tuple)
    bufs = [B.output("o", 0, "u32")]
    body = [ir.store("o", 0, 1)]
    q = ir.Program(bufs, 1, body)
    bufs.append(B.read("late", 1, "u32"))
    body.append(ir.return_())
    assert len(q.buffers) == 1 and len(q.entry) == 1  # later edits of the lists do not leak in


def test_structurally_equal_refuses_what_is_not_ir():
    """Regression (a red-team): two arrays reached `x != y` and raised NumPy's raw ValueError."""
    assert ir.structurally_equal(ir.var("a") + 1, ir.var("a") + 1) and not ir.structurally_equal(ir.u32(1), ir.u32(2))
    for a, b in ((np.arange(2), np.arange(2)), ((ir.u32(1), [1]), (ir.u32(1), [1])), (object(), object())):
        with pytest.raises(IRValidationError, match="structurally_equal takes IR nodes.*Fix:"):
            ir.structurally_equal(a, b)


def test_program_workgroup_size_normalised():
    assert ir.Program([], 64, []).workgroup_size == (64, 1, 1)
    assert ir.Program([], (8, 8), []).workgroup_size == (8, 8, 1)
    assert ir.Program([], [4, 4, 4], []).workgroup_size == (4, 4, 4)
    assert ir.Program([], np.int64(8), []).workgroup_size == (8, 1, 1)  # NumPy ints are ints
    assert ir.Program([], np.array(8), []).workgroup_size == (8, 1, 1)  # and a 0-d int array its one int
    for bad in ((), (1, 2, 3, 4), (8.0,), ("8",), True, (8, False), 8.0, None, "64", np.array(8.0), np.array("8"),
                np.array(True)):
        with pytest.raises(IRValidationError) as info:
            ir.Program([], bad, [])
        assert_fix(str(info.value))
    with pytest.raises(IRValidationError):
        ir.Program(["not a buffer"], 1, [])
    with pytest.raises(IRValidationError):
        ir.Program([], 1, [ir.load("a", 0)])


def test_program_equality_and_hash(scale_program):
    def build(**kw):
        args = dict(bufs=[B.read("a", 0, "f32"), B.output("out", 1, "f32")], wg=64, k=2, name="main")
        args.update(kw)
        return ir.Program(args["bufs"], args["wg"],
                          [ir.let("i", ir.gid(0)),
                           ir.store("out", ir.var("i"), ir.load("a", ir.var("i")) * args["k"])],
                          name=args["name"])
    p = build()
    assert p == scale_program and hash(p) == hash(scale_program)
    assert p != build(wg=32) and p != build(k=3) and p != build(name="other")
    assert p != build(bufs=[B.read("a", 0, "f32"), B.output("out", 1, "f64")])
    assert len({p, scale_program, build(k=3)}) == 2
    assert (p == "main") is False


def test_capabilities():
    base = [B.read_write("v", 0, "u32")]
    assert ir.Program(base, 32, [ir.store("v", 0, 1)]).capabilities == frozenset()
    assert ir.Program(base, 32, [ir.let("x", ir.subgroup_add(ir.u32(1)))]).capabilities == {"subgroup"}
    assert ir.Program(base, 32, [ir.let("x", ir.subgroup_ballot(True))]).capabilities == {"subgroup"}
    assert ir.Program(base, 32, [ir.let("x", ir.subgroup_shuffle(ir.u32(1), 0))]).capabilities == {"subgroup"}
    assert ir.Program(base, 32, [ir.let("x", ir.subgroup_local_id())]).capabilities == {"subgroup"}
    assert ir.Program(base, 32, [ir.if_(True, [ir.let("x", ir.subgroup_size())])]).capabilities == {"subgroup"}
    assert ir.Program(base, 32, [ir.barrier("workgroup")]).capabilities == frozenset()
    assert ir.Program(base, 32, [ir.loop("k", 0, 1, [ir.barrier("grid")])]).capabilities == {"grid_sync"}
    both = ir.Program(base, 32, [ir.block(ir.barrier("grid")), ir.let("s", ir.subgroup_size())])
    assert both.capabilities == {"grid_sync", "subgroup"}


# ---- JSON and digest --------------------------------------------------------------------------

def test_json_round_trip_every_node_kind(every_node_program):
    p = every_node_program
    kinds = {type(x).__name__ for x in ir.walk(p.entry)}
    assert kinds == {"Lit", "Var", "Load", "BufLen", "Builtin", "BinOp", "UnOp", "Select", "Cast",
                     "Fma", "Atomic", "SubgroupBallot", "SubgroupShuffle", "SubgroupAdd", "Let",
                     "Assign", "Store", "If", "Loop", "Barrier", "Return", "Block"}
    text = p.to_json()
    q = ir.Program.from_json(text)
    assert q == p and q.to_json() == text and q.digest() == p.digest()
    assert ir.Program.from_json(text.encode()) == p
    assert ir.Program.from_json(p.to_json(indent=2)) == p
    assert ir.Program.from_dict(json.loads(text)) == p
    assert json.loads(text)["format"] == ir.FORMAT
    assert ir.validate(q) == []


def test_json_round_trip_special_float_literals_exactly():
    specials = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 5e-324, 1e-45, 2**-24]
    entry = []
    for k, dt in enumerate(("f16", "bf16", "f32", "f64")):
        for j, v in enumerate(specials):
            entry.append(ir.let(f"v{k}_{j}", ir.lit(v, dt)))
    entry.append(ir.let("qnan", Lit(D.F32, 0x7FC00001)))  # a NaN payload survives too
    entry.append(ir.let("snan", Lit(D.F64, 0xFFF0000000000001)))
    p = ir.Program([], 1, entry)
    q = ir.Program.from_json(p.to_json())
    assert [s.value.raw for s in q.entry] == [s.value.raw for s in p.entry]
    assert [s.value.dtype for s in q.entry] == [s.value.dtype for s in p.entry]
    assert q == p and q.digest() == p.digest()
    assert "NaN" not in p.to_json() and "Infinity" not in p.to_json()  # strict JSON
    assert q.entry[-1].value.raw == 0xFFF0000000000001


def test_json_round_trip_keeps_unresolvable_weak_literal_and_its_diagnostic():
    p = ir.Program([B.read_write("v", 0, "u8")], 1, [ir.store("v", 0, 999)])
    q = ir.Program.from_json(p.to_json())
    assert q == p and q.entry[0].value.weak
    assert [str(d) for d in ir.validate(q)] == [str(d) for d in ir.validate(p)] != []


def test_json_is_canonical_and_compact(scale_program):
    text = scale_program.to_json()
    assert " " not in text and "\n" not in text
    d = json.loads(text)
    assert text == json.dumps(d, sort_keys=True, separators=(",", ":"))
    assert set(d) == {"format", "name", "workgroup_size", "buffers", "entry"}


def _mutations():
    good = {"format": ir.FORMAT, "name": "m", "workgroup_size": [1, 1, 1],
            "buffers": [{"name": "o", "binding": 0, "access": "write_only", "dtype": "u32",
                         "count": 0, "output": True, "output_byte_range": None}],
            "entry": [{"k": "Store", "buffer": "o", "index": {"k": "Lit", "dtype": "u32", "raw": 0, "weak": False},
                       "value": {"k": "Lit", "dtype": "u32", "raw": 1, "weak": False}}]}

    def m(fn):
        d = json.loads(json.dumps(good))
        fn(d)
        return json.dumps(d)
    yield "good", json.dumps(good)
    yield "not json", "{"
    yield "empty", ""
    yield "list", "[]"
    yield "wrong format", m(lambda d: d.update(format="vyre-ir/99"))
    yield "no entry", m(lambda d: d.pop("entry"))
    yield "entry not a list", m(lambda d: d.update(entry=5))
    yield "unknown node", m(lambda d: d["entry"][0].update(k="Goto"))
    yield "node without k", m(lambda d: d["entry"][0].pop("k"))
    yield "missing field", m(lambda d: d["entry"][0].pop("value"))
    yield "bad dtype", m(lambda d: d["buffers"][0].update(dtype="u31"))
    yield "bad access", m(lambda d: d["buffers"][0].update(access="sometimes"))
    yield "buffer missing key", m(lambda d: d["buffers"][0].pop("count"))
    yield "expression as statement", m(lambda d: d.update(entry=[d["entry"][0]["value"]]))
    yield "bad workgroup", m(lambda d: d.update(workgroup_size=["x"]))
    yield "bad lit dtype", m(lambda d: d["entry"][0]["value"].update(dtype="q8"))
    yield "unhashable kind", m(lambda d: d["entry"][0].update(k=[]))
    # a misspelt or extra key was dropped without a word (a red-team)
    yield "unknown program key", m(lambda d: d.update(workgroup_sise=[1, 1, 1]))
    yield "unknown buffer key", m(lambda d: d["buffers"][0].update(cout=3))
    yield "unknown node key", m(lambda d: d["entry"][0].update(vaule=1))
    yield "unknown key beside a missing one", m(lambda d: d["entry"][0].update(vaule=d["entry"][0].pop("value")))
    # an int past Python's digit limit for text (a raw ValueError before)
    yield "5000-digit count", json.dumps(good).replace('"count": 0', '"count": ' + "9" * 5000)
    yield "5000-digit raw, nested past the C decoder", "[" * 3000 + "9" * 5000 + "]" * 3000


@pytest.mark.parametrize("label,text", list(_mutations()))
def test_malformed_json_raises_ir_validation_error_with_fix(label, text):
    if label == "good":
        assert ir.validate(ir.Program.from_json(text)) == []
        return
    with pytest.raises(IRValidationError) as info:
        ir.Program.from_json(text)
    assert_fix(str(info.value))
    if label.startswith("unknown") and "key" in label:
        assert "(did you mean" in str(info.value) or "lacks its field 'value'" in str(info.value)


def _saxpy_text() -> str:
    from vyre_numba.cli import demo_program

    return demo_program().to_json()


@pytest.mark.parametrize("label, edit, message", [
    ("a program key twice", lambda t: t.replace('"name":"saxpy"', '"name":"saxpy","name":"other"'),
     "program JSON names the key 'name' twice in one object"),
    ("format twice", lambda t: t.replace('"format":', '"format":"nope","format":'), "the key 'format' twice"),
    ("a node's kind twice", lambda t: t.replace('{"k":"Let",', '{"k":"Store","k":"Let",'), "the key 'k' twice"),
    ("a key twice past the C decoder's depth", lambda t: t.replace('"entry":[', '"entry":[' + "[" * 1500 + '{"a":1,"a":2}'
                                                                    + "]" * 1500 + ",", 1), "the key 'a' twice"),
    ("a null entry", lambda t: re.sub(r'"entry":\[.*\],"format"', '"entry":null,"format"', t),
     "program JSON has null where the program's entry takes a list of statements"),
    ("a null then", lambda t: re.sub(r'"then":\[.*\]\}\]', '"then":null}]', t),
     "has null where If.then takes a list of statements"),
    ("a null otherwise", lambda t: t.replace('"otherwise":[]', '"otherwise":null'),
     "has null where If.otherwise takes a list of statements"),
    ("an empty list as a statement", lambda t: t.replace('"otherwise":[]', '"otherwise":[[]]'),
     "has a list where If.otherwise takes statements only"),
    ("a bare float where an expression goes",
     lambda t: t.replace('"c":{"buffer":"y","index":{"k":"Var","name":"i"},"k":"Load"}', '"c":1e30'),
     "has 1e+30 where Fma.c takes an IR expression"),
    ("a bare bool as an index", lambda t: t.replace('"index":{"k":"Var","name":"i"},"k":"Store"',
                                                    '"index":true,"k":"Store"'),
     "has true where Store.index takes an IR expression"),
    ("a bare int as a let's value", lambda t: t.replace('"value":{"axis":0,"k":"Builtin","name":"invocation_id"}',
                                                        '"value":-1'),
     "has -1 where Let.value takes an IR expression"),
    ("a null expression", lambda t: t.replace('"value":{"axis":0,"k":"Builtin","name":"invocation_id"}',
                                              '"value":null'), "has null where Let.value takes an IR expression"),
    ("a bare workgroup number", lambda t: t.replace('"workgroup_size":[256,1,1]', '"workgroup_size":256'),
     "program JSON has workgroup_size = 256, where to_json writes a list of three ints"),
    ("a one-axis workgroup", lambda t: t.replace('"workgroup_size":[256,1,1]', '"workgroup_size":[256]'),
     "workgroup_size = [256]"),
    ("a number as the name", lambda t: t.replace('"name":"saxpy"', '"name":5'), "name = 5, where to_json writes a string"),
    ("a buffer dtype alias", lambda t: t.replace('"dtype":"f32","name":"x"', '"dtype":"float32","name":"x"'),
     "the dtype of buffer 'x' = 'float32'"),
    ("an access in capitals", lambda t: t.replace('"access":"read_only"', '"access":"READ_ONLY"'),
     "the access of buffer 'x' = 'READ_ONLY'"),
    ("a literal's dtype alias", lambda t: t.replace('"dtype":"u32"', '"dtype":"uint32"', 1), ".dtype = 'uint32'"),
    ("buffers as an object", lambda t: re.sub(r'"buffers":\[.*?\],"entry"', '"buffers":{},"entry"', t),
     "buffers = {}, where to_json writes a list of buffer objects"),
    ("a typed literal made weak", lambda t: t.replace('"raw":0,"weak":false', '"raw":0,"weak":true', 1),
     ".weak = True, where to_json writes False for the program it describes"),
    ("NaN", lambda t: t.replace('"raw":0', '"raw":NaN', 1), "program JSON holds NaN, which is not JSON"),
    ("a byte-order mark", lambda t: "\ufeff" + t, "byte-order mark (U+FEFF)"),
])
def test_program_json_holds_only_what_to_json_writes(label, edit, message):
    """Regression (a red-team): duplicate keys loaded (the last one winning), `"entry": null` was an
    empty program, null statement lists were [], and bare numbers and bools where a node goes were
    read as literals: documents to_json never writes, loaded without a word."""
    text = _saxpy_text()
    bad = edit(text)
    assert bad != text, label
    for form in (bad, bad.encode()):
        with pytest.raises(IRValidationError) as info:
            ir.Program.from_json(form)
        assert message in str(info.value), str(info.value)
        assert_fix(str(info.value))
        assert "Program.to_json()" in str(info.value).rsplit("Fix:", 1)[1]


def test_program_json_as_written_still_loads_and_the_builders_stay_lenient(every_node_program):
    assert '"expected":null' in every_node_program.to_json()  # an optional expression: null is as written
    for p in (every_node_program, ir.Program([B.read_write("y", 0, "f32")], 1,
                                             [ir.store("y", 0, 1e30), ir.if_(ir.u32(1) < 2, None)])):
        assert ir.Program.from_json(p.to_json()) == p and ir.Program.from_json(p.to_json(indent=2)) == p


@pytest.mark.parametrize("depth", [1, 1500])
@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_json_text_refuses_nan_and_infinity_at_every_depth(word, depth):
    """Regression (a red-team): `[NaN]` loaded through the C decoder, but failed ("unexpected
    character 'N'") when nested past it; dumps wrote `NaN`, which is not JSON."""
    from vyre_numba.ir import jsontext

    with pytest.raises(IRValidationError, match=f"program JSON holds {word}, which is not JSON.*Fix:"):
        jsontext.loads("[" * depth + word + "]" * depth)
    assert jsontext.loads("[" * depth + '"NaN"' + "]" * depth) is not None  # a string is a string
    value = float(word.replace("Infinity", "inf"))
    for nested in ([value], {"a": value}):
        for _ in range(depth - 1):
            nested = [nested]
        with pytest.raises(IRValidationError, match="has no JSON form.*Fix:"):
            jsontext.dumps(nested)


def test_json_text_names_duplicate_keys_at_every_depth():
    from vyre_numba.ir import jsontext

    for depth in (0, 1500):
        with pytest.raises(IRValidationError, match=r"names the key 'k' twice in one object.*Fix:"):
            jsontext.loads("[" * depth + '{"k": 1, "j": 2, "k": 3}' + "]" * depth)
        assert jsontext.loads("[" * depth + '[{"k": 1}, {"k": 3}]' + "]" * depth) is not None


@pytest.mark.parametrize("call", [lambda: ir.from_dict({"k": []}), lambda: ir.from_dict({"k": {}}),
                                  lambda: ir.from_dict({"k": "Lit"}), lambda: ir.to_dict(5),
                                  lambda: ir.to_dict(object()), lambda: ir.to_dict((ir.u32(1), "x"))])
def test_node_documents_that_are_not_nodes_raise_with_a_fix(call):
    with pytest.raises(IRValidationError) as info:
        call()
    assert_fix(str(info.value))


def test_digest_is_sha256_of_canonical_json(scale_program):
    import hashlib
    d = scale_program.digest()
    assert len(d) == 64 and int(d, 16) >= 0
    assert d == hashlib.sha256(scale_program.to_json().encode()).hexdigest()
    assert scale_program.digest() == d  # cached value is the same


def test_a_shared_node_is_written_at_each_use_and_built_once():
    """A node object used twice is written out at both places (the JSON of a tree, so a shared and
    a written-out program have one text and one digest), from one dict built once: deep and
    shallow documents alike."""
    B = ir.BufferDecl
    for depth in (3, 250):  # below and above the recursion threshold of to_dict
        e = ir.load("x", ir.gid(0))
        for _ in range(depth):
            e = e + ir.u32(1)
        shared, fresh = e * e, ir.from_dict(ir.to_dict(e)) * ir.from_dict(ir.to_dict(e))
        assert shared.a is shared.b and fresh.a is not fresh.b
        d = ir.to_dict(shared)
        assert d["a"] is d["b"] and ir.to_dict(fresh) == d
        ps = [ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", 4)], 4, [ir.store("y", ir.gid(0), v)])
              for v in (shared, fresh)]
        assert ps[0].to_json() == ps[1].to_json() and ps[0].digest() == ps[1].digest()
        assert ir.Program.from_json(ps[0].to_json()) == ps[0]


def test_equal_programs_have_equal_digests(every_node_program):
    copy = ir.Program.from_json(every_node_program.to_json())
    assert copy is not every_node_program and copy.digest() == every_node_program.digest()


def _base(**kw):
    bufs = kw.get("bufs", [B.read("a", 0, "f32"), B.output("out", 1, "f32")])
    return ir.Program(bufs, kw.get("wg", 64), kw.get("entry", [
        ir.let("i", ir.gid(0)),
        ir.store("out", ir.var("i"), ir.load("a", ir.var("i")) * kw.get("k", ir.f32(2.0)))]),
        name=kw.get("name", "main"))


@pytest.mark.parametrize("label,changed", [
    ("one literal bit", lambda: _base(k=Lit(D.F32, 0x40000001))),
    ("literal type", lambda: _base(k=ir.f64(2.0), bufs=[B.read("a", 0, "f32"), B.output("out", 1, "f32")])),
    ("buffer name", lambda: _base(bufs=[B.read("b", 0, "f32"), B.output("out", 1, "f32")])),
    ("buffer binding", lambda: _base(bufs=[B.read("a", 2, "f32"), B.output("out", 1, "f32")])),
    ("buffer dtype", lambda: _base(bufs=[B.read("a", 0, "f64"), B.output("out", 1, "f32")])),
    ("buffer count", lambda: _base(bufs=[B.read("a", 0, "f32", 4), B.output("out", 1, "f32")])),
    ("buffer access", lambda: _base(bufs=[B.uniform("a", 0, "f32"), B.output("out", 1, "f32")])),
    ("buffer order", lambda: _base(bufs=[B.output("out", 1, "f32"), B.read("a", 0, "f32")])),
    ("output byte range", lambda: _base(bufs=[B.read("a", 0, "f32"), B.output("out", 1, "f32", 0, (0, 4))])),
    ("workgroup size", lambda: _base(wg=32)),
    ("workgroup axis", lambda: _base(wg=(64, 1, 2))),
    ("program name", lambda: _base(name="other")),
    ("an op", lambda: _base(entry=[ir.let("i", ir.gid(0)),
                                   ir.store("out", ir.var("i"), ir.load("a", ir.var("i")) + 2.0)])),
    ("builtin axis", lambda: _base(entry=[ir.let("i", ir.gid(1)),
                                          ir.store("out", ir.var("i"), ir.load("a", ir.var("i")) * 2.0)])),
    ("variable name", lambda: _base(entry=[ir.let("j", ir.gid(0)),
                                           ir.store("out", ir.var("j"), ir.load("a", ir.var("j")) * 2.0)])),
    ("extra statement", lambda: _base(entry=[ir.let("i", ir.gid(0)),
                                             ir.store("out", ir.var("i"), ir.load("a", ir.var("i")) * 2.0),
                                             ir.return_()])),
])
def test_any_change_changes_the_digest(label, changed):
    base = _base()
    other = changed()
    assert other != base
    assert other.digest() != base.digest(), label


def test_digest_stable_in_a_fresh_process(every_node_program):
    code = textwrap.dedent("""
        import sys, json
        sys.path[:0] = [sys.argv[1], sys.argv[2]]
        import conftest
        from vyre_numba import ir
        fn = conftest.every_node_program
        fn = getattr(fn, "__wrapped__", None) or fn.__pytest_wrapped__.obj
        p = fn()
        q = ir.Program.from_json(sys.stdin.read())
        print(json.dumps([p.digest(), q.digest()]))
    """)
    out = subprocess.run([sys.executable, "-c", code, str(REPO), str(REPO / "tests")],
                         input=every_node_program.to_json(), capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "random", "PATH": "/usr/bin:/bin"})
    fresh_built, fresh_loaded = json.loads(out.stdout)
    assert fresh_built == fresh_loaded == every_node_program.digest()


def test_digest_pinned_for_a_known_program():
    """The digest is part of on-disk cache keys: it must not drift between releases by accident.
    If the canonical form changes on purpose, bump FORMAT and update this value."""
    p = ir.Program([B.read("a", 0, "u32"), B.output("o", 1, "u32")], 32,
                   [ir.store("o", ir.gid(0), ir.load("a", ir.gid(0)) + ir.u32(1))], name="pin")
    assert p.to_json() == (
        '{"buffers":[{"access":"read_only","binding":0,"count":0,"dtype":"u32","name":"a","output":false,'
        '"output_byte_range":null},{"access":"write_only","binding":1,"count":0,"dtype":"u32","name":"o",'
        '"output":true,"output_byte_range":null}],"entry":[{"buffer":"o","index":{"axis":0,"k":"Builtin",'
        '"name":"invocation_id"},"k":"Store","value":{"a":{"buffer":"a","index":{"axis":0,"k":"Builtin",'
        '"name":"invocation_id"},"k":"Load"},"b":{"dtype":"u32","k":"Lit","raw":1,"weak":false},"k":"BinOp",'
        '"op":"add"}}],"format":"vyre-numba-ir/1","name":"pin","workgroup_size":[32,1,1]}')


# ---- text form --------------------------------------------------------------------------------

def test_str_program_is_readable(every_node_program):
    text = str(every_node_program)
    lines = text.splitlines()
    assert lines[0] == "program every_node workgroup(64, 1, 1) {" and lines[-1] == "}"
    for expected in (
        "    @0 read_only a: f32[]",
        "    @4 uniform params: u32[4]",
        "    workgroup tile: f32[64]",
        "    let i = invocation_id.x",
        "    let nan = nanf32",
        "    let pinf = inff64",
        "    let ninf = -inff16",
        "    let nz = -0.0bf16",
        "    let b = true",
        "    let c = (i32(x) + -3i32)",
        "    let old = atomic_add(counter[0u32], 1u32)",
        "    let cx = atomic_compare_exchange(counter[1u32], 5u32, expected=0u32)",
        "    let shf = subgroup_shuffle(u, subgroup_local_id())",
        "    barrier(workgroup)",
        "    if (i < n) {",
        "        s = (tile[0u32] + 1.0f32)",
        "    } else {",
        "        return",
        "    for k in 0u32..3u32 {",
        "        let inner = (b && not(isnan(nan)))",
        "    out[i] = s",
        "    io[i] = (io[i] * 3i64)",
    ):
        assert expected in lines, expected


def test_str_of_expressions_and_statements():
    x = ir.var("x")
    assert str(ir.load("a", ir.gid(0)) + 1) == "(a[invocation_id.x] + 1)"
    assert str(ir.min_(x, ir.u8(3))) == "min(x, 3u8)"
    assert str(ir.select(x < 1.5, x, ir.f32(-0.0))) == "select((x < 1.5), x, -0.0f32)"
    assert str(ir.fma(x, x, x)) == "fma(x, x, x)"
    assert str(ir.buf_len("a")) == "len(a)"
    assert str(ir.cast(x, "u16")) == "u16(x)"
    assert str(ir.let("y", x)) == "let y = x"
    assert str(ir.if_(x.eq(1), [ir.return_()])) == "if (x == 1) {\n    return\n}"


def test_a_numpy_float64_scalar_keeps_its_type_as_other_numpy_scalars_do():
    """Regression: np.float64 is a subclass of float, so it became a weak literal and was rounded
    silently into an f32 expression, while np.float32 into f64 and np.int64 into u32 were refused."""
    x = ir.load("x", 0)
    f32 = ir.Program([B.read_write("x", 0, "f32")], 1, [ir.store("x", 0, x * np.float64(0.1))])
    with pytest.raises(vn.IRValidationError, match="different types f32 and f64"):
        ir.check(f32)
    assert not ir.lit(np.float64(0.1)).weak and ir.lit(np.float64(0.1)).dtype is D.F64 and ir.lit(0.1).weak
    f64 = ir.Program([B.read_write("x", 0, "f64")], 1, [ir.store("x", 0, x * np.float64(0.1))])
    out = vn.get_backend("reference").dispatch(f64, [np.array([3.0])])[0]
    assert out[0] == 3.0 * 0.1


def test_bit_helpers_take_a_type_by_any_name_the_ir_takes():
    """Regression (a red-team): wrap_int(3, "i32") was refused as if i32 were no integer type."""
    for name in ("i32", np.int32, np.dtype("int32"), "int32", D.I32):
        assert ir.wrap_int(2**31, name) == -2**31
    for name in ("f32", np.float32, "float32", D.F32):
        assert ir.float_to_bits(1.0, name) == 0x3F800000 and ir.bits_to_float(0x3F800000, name) == 1.0
    assert ir.float_to_bits(1.0, "bf16") == 0x3F80


def test_result_type_says_what_it_needs_when_called_without_it():
    """Regression (a red-team): ir.result_type, public, raised a raw IndexError or ValueError with
    no Fix for calls its signature allows (operands default to ())."""
    from vyre_numba.errors import IRValidationError

    for e, kw, fragment in ((ir.add(ir.u32(1), ir.u32(2)), {}, "needs the types of its 2 operands"),
                            (ir.select(True, ir.u32(1), ir.u32(2)), {}, "needs the types of its 3 operands"),
                            (ir.load("x", 0), {}, "Fix: pass buffer="),
                            (ir.var("a"), {}, "the variable 'a'"),
                            (ir.let("a", 1), {}, "takes an expression, not let a = 1")):
        with pytest.raises(IRValidationError, match="Fix: ") as got:
            ir.result_type(e, **kw)
        assert fragment in str(got.value)
    assert ir.result_type(ir.add(ir.u32(1), ir.u32(2)), (ir.DataType.U32, ir.DataType.U32)) is ir.DataType.U32


def test_unary_plus_is_the_value_and_three_argument_pow_and_nan_literal_fixes_are_runnable():
    import math

    x = ir.var("x")
    assert (+x).equals(x)
    with pytest.raises(IRValidationError, match=r"no Python power.*Fix:"):
        pow(x, 2, 3)
    with pytest.raises(IRValidationError, match=r"ir.cast\(ir.f64\(math.nan\), 'u8'\)") as e:
        ir.lit(math.nan, "u8")
    fix = str(e.value).rsplit("on purpose, ", 1)[1].rstrip(".")
    assert eval(fix, {"ir": ir, "math": math}).dtype == ir.DataType.U8  # the Fix, followed, builds


def test_from_dict_takes_documents_only_and_to_json_an_int_indent():
    for d in (5, "x", None, [1, 2]):
        with pytest.raises(IRValidationError, match="an IR node document is a dict.*Fix:"):
            ir.from_dict(d)
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)], name="p")
    with pytest.raises(IRValidationError, match=r"indent is a number of spaces. Fix: pass an int"):
        p.to_json(indent=1.5)
    assert ir.Program.from_json(p.to_json(indent=2)).digest() == p.digest()


def test_ints_past_what_str_shows_are_refused_with_their_size():
    """Regression (a red-team): ir.lit(10**5000, 'u64') and str(ir.Lit(u64, 10**5000)) raised Python's
    raw ValueError (an int past 4,300 digits has no str), and so did `x + 10**5000`."""
    huge = 10**5000
    for make, message in ((lambda: ir.lit(huge, "u64"), "does not fit u64"), (lambda: ir.lit(-huge, "i8"), "does not fit i8"),
                          (lambda: ir.lit(huge, "f64"), "past the largest finite f64"),
                          (lambda: ir.load("x", 0) + huge, "past any IR type's range"),
                          (lambda: ir.Lit(ir.DataType.U64, huge), "Lit.raw is <an int of 16,610 bits>, not an int of at most 4096 bits")):
        with pytest.raises(IRValidationError, match=message) as info:
            make()
        assert "16,610 bits" in str(info.value) and "wider type" not in str(info.value), str(info.value)
        assert_fix(str(info.value))
    big = 2**20000  # nor in a count, size or offset, where messages would show the number
    for make in (lambda: ir.Program([B.output("o", 0, "u32")], big, [ir.store("o", 0, 1)]),
                 lambda: ir.Program([B.output("o", 0, "u32")], (1, big), [ir.store("o", 0, 1)]),
                 lambda: B.output("o", 0, "u32", big), lambda: B.output("o", big, "u32"),
                 lambda: B.output("o", 0, "u32", 0, (0, big))):
        with pytest.raises(IRValidationError, match=r"<an int of 20,00\d bits>.*Fix:"):
            make()
    with pytest.raises(vn.DispatchError, match=r"fixpoint_iterations=<an int of 20,001 bits>.*Fix:"):
        vn.DispatchConfig(fixpoint_iterations=big)
    with pytest.raises(IRValidationError, match=r"indent=9223372036854775808.*Fix: pass an int from 0 to 1000"):
        ir.Program([B.output("o", 0, "u32")], 1, [ir.store("o", 0, 1)]).to_json(indent=2**63)
    with pytest.raises(IRValidationError, match=r"past the largest finite f32.*or use a smaller value\.$"):
        ir.lit(2**1100, "f32")  # f64 cannot hold it either: no wider type is offered
    x = ir.load("x", 0) + 2**70  # a weak int past 64 bits still types as a float (exactly)
    p = ir.Program([B.read("x", 0, "f64"), B.output("y", 1, "f64")], 1, [ir.store("y", 0, x)])
    assert vn.get_backend("reference").dispatch(p, [np.zeros(1)], None)[0][0] == 2.0**70
