"""The vyre IR: types, buffers, expressions, statements, programs, validation.

    from vyre_numba import ir
    p = ir.Program([ir.BufferDecl.read("a", 0, "f32"), ir.BufferDecl.output("out", 1, "f32")], 256,
                   [ir.let("i", ir.gid(0)), ir.store("out", ir.var("i"), ir.load("a", ir.var("i")) * 2)])
    ir.check(p)
"""
from .types import DataType, bf16_bits_to_f32, bits_to_float, f32_to_bf16_bits, float_to_bits, wrap_int
from .nodes import (
    ARITH_BINOPS, ATOMIC_OPS, BARRIER_SCOPES, BINOPS, BUILTINS, CMP_BINOPS, FLOAT_PRED_UNOPS,
    FLOAT_UNOPS, INT_BINOPS, INT_UNOPS, LOGIC_BINOPS, NUM_UNOPS, TRANSCENDENTAL_UNOPS, UNOPS,
    BOOL_UNOPS, MAX_DEPTH, MAX_NODES, Assign, StructuralKey, result_type, structurally_equal, Atomic, Barrier, BinOp, Block, BufLen, Builtin, Cast, Expr, Fma, If, Let,
    Lit, Load, Loop, Node, Return, Select, Store, SubgroupAdd, SubgroupBallot, SubgroupShuffle,
    UnOp, Var,
    abs_, absdiff, add, assign, atomic, atomic_add, barrier, bf16, binary, bitand, bitnot, bitor,
    bitxor, block, boolean, buf_len, cast, ceil, clz, cos, ctz, div, eq, exp, exp2, f16, f32, f64,
    floor, fma, ge, gid, gt, i8, i16, i32, i64, if_, invocation_id, isfinite, isinf, isnan, le,
    let, lid, lit, load, local_id, log, log2, logical_and, logical_or, loop, lt, max_, min_, mod,
    mul, mul_high, ne, neg, not_, num_workgroups, popcount, recip, return_, reverse_bits, rotl,
    rotr, round_, rsqrt, saturating_add, saturating_sub, select, shl, shr, sign, sin, sqrt, store,
    sub, subgroup_add, subgroup_ballot, subgroup_local_id, subgroup_shuffle, subgroup_size, tan,
    trunc, u8, u16, u32, u64, unary, var, wgid, workgroup_id, wrapping_add, wrapping_sub,
)
from .program import FORMAT, Access, BufferDecl, Program, Role, from_dict, to_dict, walk
from .recursion import drive
from .validate import Diagnostic, Diagnostics, check, validate
from .optimizer import optimize

DataType.__module__ = __name__

__all__ = [
    # types, buffers, programs, validation
    "DataType", "BufferDecl", "Access", "Role", "Program", "FORMAT", "MAX_DEPTH", "MAX_NODES", "validate", "check",
    "Diagnostic", "Diagnostics", "walk", "structurally_equal", "optimize",
    "wrap_int", "float_to_bits", "bits_to_float", "f32_to_bf16_bits", "bf16_bits_to_f32",
    # expressions
    "lit", "u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64", "boolean",
    "var", "load", "buf_len", "invocation_id", "local_id", "workgroup_id", "num_workgroups", "gid", "lid",
    "wgid", "subgroup_local_id", "subgroup_size", "binary", "unary", "add", "sub", "mul", "div", "mod",
    "min_", "max_", "absdiff", "wrapping_add", "wrapping_sub", "saturating_add", "saturating_sub",
    "mul_high", "bitand", "bitor", "bitxor", "shl", "shr", "rotl", "rotr", "eq", "ne", "lt", "gt", "le",
    "ge", "logical_and", "logical_or", "neg", "bitnot", "not_", "popcount", "clz", "ctz", "reverse_bits",
    "abs_", "sign", "sqrt", "floor", "ceil", "round_", "trunc", "isnan", "isinf", "isfinite", "exp",
    "exp2", "log", "log2", "rsqrt", "recip", "sin", "cos", "tan", "select", "cast", "fma", "atomic",
    "atomic_add", "subgroup_ballot", "subgroup_shuffle", "subgroup_add",
    # statements
    "let", "assign", "store", "if_", "loop", "barrier", "return_", "block",
    # node classes and operation tables
    "Expr", "Node", "Lit", "Var", "Load", "BufLen", "Builtin", "BinOp", "UnOp", "Select", "Cast", "Fma",
    "Atomic", "SubgroupBallot", "SubgroupShuffle", "SubgroupAdd", "Let", "Assign", "Store", "If", "Loop",
    "Barrier", "Return", "Block", "BINOPS", "ARITH_BINOPS", "INT_BINOPS", "CMP_BINOPS", "LOGIC_BINOPS",
    "UNOPS", "INT_UNOPS", "NUM_UNOPS", "FLOAT_UNOPS", "FLOAT_PRED_UNOPS", "BOOL_UNOPS",
    "TRANSCENDENTAL_UNOPS", "ATOMIC_OPS", "BUILTINS", "BARRIER_SCOPES",
]


def __dir__() -> list[str]:
    return sorted(__all__)

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
