"""Hypothesis strategies for vyre IR programs, reused by the differential GPU tests.

Public API:

    well_typed_programs(max_depth=2, max_stmts=4)        -> SearchStrategy[ir.Program]
    programs_with_inputs(max_depth=2, max_stmts=4, transcendentals=False)
                                                        -> SearchStrategy[tuple[ir.Program, list[np.ndarray], DispatchConfig]]
    ill_typed_programs(max_depth=2, max_stmts=4)        -> SearchStrategy[ir.Program]
    values(dtype)                                        -> SearchStrategy of one host value (storage dtype)
    host_arrays(dtype, size)                             -> SearchStrategy[np.ndarray] (storage dtype)
    literals(dtype)                                      -> SearchStrategy[ir.Lit] (strong, exactly of dtype)
    ALL_TYPES, INT_TYPES, FLOAT_TYPES, ATOMIC_TYPES, SUBGROUP_ADD_TYPES, EXACT_FLOAT_UNOPS

Every strategy keeps programs small (expression depth and statement nesting bounded by
`max_depth`, at most `max_stmts` statements per body) so a run stays fast on 2 CPU cores.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vyre_numba.errors import IRValidationError
from vyre_numba import DispatchConfig, ir
from vyre_numba.ir import DataType as D
from vyre_numba.ir import nodes as n

B = ir.BufferDecl
ALL_TYPES = tuple(D)
INT_TYPES = tuple(d for d in D if d.is_int)
FLOAT_TYPES = tuple(d for d in D if d.is_float)
NUM_TYPES = INT_TYPES + FLOAT_TYPES
ATOMIC_TYPES = (D.U32, D.I32, D.U64, D.I64)
SUBGROUP_ADD_TYPES = (D.U32, D.I32)
#: float unary ops whose result is exact (correctly rounded): safe to compare bit for bit
EXACT_FLOAT_UNOPS = tuple(op for op in n.FLOAT_UNOPS if op not in n.TRANSCENDENTAL_UNOPS)
#: atomics whose final memory state does not depend on the order concurrent invocations run in
ORDER_FREE_ATOMICS = ("add", "or", "and", "xor", "min", "max")

_F_SPECIAL = {
    D.F16: [0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), 65504.0, -65504.0,
            2.0**-24, -(2.0**-24), 2.0**-14, 0.5, 1.5, 2.5, -2.5],
    D.F32: [0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), float(np.finfo(np.float32).max),
            float(np.finfo(np.float32).min), 1e-45, -1e-45, float(np.finfo(np.float32).tiny), 0.5, 2.5, -2.5,
            16777217.0, 2147483648.0, -2147483904.0, 4294967296.0],
    D.F64: [0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), float(np.finfo(np.float64).max),
            float(np.finfo(np.float64).min), 5e-324, -5e-324, 2.2250738585072014e-308, 0.5, 2.5, -2.5,
            9007199254740993.0, 9.223372036854776e18, 1.8446744073709552e19],
}
_F_SPECIAL[D.BF16] = [0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), D.BF16.max, D.BF16.min,
                      9.183549615799121e-41, -9.183549615799121e-41, 0.5, 2.5, 256.0, 257.0]
_BF16_SPECIAL_BITS = [0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7F7F, 0xFF7F,
                      0x0001, 0x8001, 0x007F, 0x0080]


# ---- values -----------------------------------------------------------------------------------

def _int_values(dt: D) -> st.SearchStrategy[int]:
    edges = [dt.min, dt.max, 0, 1, dt.max - 1, dt.min + 1] + ([-1] if dt.is_signed else [])
    return st.one_of(st.sampled_from(edges), st.integers(dt.min, dt.max))


def _float_values(dt: D) -> st.SearchStrategy[float]:
    width = {D.F16: 16, D.BF16: 32, D.F32: 32, D.F64: 64}[dt]
    if dt is D.BF16:  # f32s past bf16's largest finite would round to inf: literals refuse them
        return st.one_of(st.sampled_from(_F_SPECIAL[dt]), st.floats(D.BF16.min, D.BF16.max, width=width))
    return st.one_of(st.sampled_from(_F_SPECIAL[dt]), st.floats(width=width))


def values(dtype: D | str) -> st.SearchStrategy:
    """One host element of `dtype` in its storage form: extremes (min, max, 0, +-1), and for floats
    NaN, +-inf, -0.0, subnormals and integer-boundary values; bf16 as raw uint16 bits; bool as a
    uint32 word (mostly 0/1, sometimes another non-zero word, which reads as true)."""
    dt = D.parse(dtype)
    if dt.is_int:
        return _int_values(dt)
    if dt is D.BF16:
        return st.one_of(st.sampled_from(_BF16_SPECIAL_BITS), st.integers(0, 0xFFFF))
    if dt.is_bool:
        return st.one_of(st.sampled_from([0, 1]), st.sampled_from([0, 1, 2, 0x80000000, 0xFFFFFFFF]))
    return _float_values(dt)


def host_arrays(dtype: D | str, size: int) -> st.SearchStrategy[np.ndarray]:
    """A 1-D host array of `size` elements in `dtype`'s storage dtype, elements from `values`."""
    dt = D.parse(dtype)
    if dt is D.F16:
        # hypothesis checks elements are exactly representable: round specials first
        elems = st.one_of(st.sampled_from([float(np.float16(v)) for v in _F_SPECIAL[D.F16]]), st.floats(width=16))
    elif dt is D.F32:
        elems = st.one_of(st.sampled_from([float(np.float32(v)) for v in _F_SPECIAL[D.F32]]), st.floats(width=32))
    else:
        elems = values(dt)
    return hnp.arrays(dt.storage, (size,), elements=elems)


def literals(dtype: D | str) -> st.SearchStrategy[n.Lit]:
    """A strong literal of exactly `dtype` (floats rounded to the type, NaN/inf/-0 included)."""
    dt = D.parse(dtype)
    if dt.is_bool:
        return st.booleans().map(ir.boolean)
    if dt.is_int:
        return _int_values(dt).map(lambda v: ir.lit(v, dt))
    return _float_values(dt).map(lambda v: ir.lit(v, dt))


# ---- the typed expression / statement generator ----------------------------------------------

class _Gen:
    """Draws well-typed IR. `diff=True` adds the restrictions that make a program's result
    independent of invocation order and scheduling (see programs_with_inputs)."""

    def __init__(self, draw, bufs: list[B], *, diff: bool, max_depth: int, max_stmts: int,
                 transcendentals: bool = True, counters: dict[str, str] | None = None,
                 own: tuple[str, ...] = (), shared_readable: tuple[str, ...] = ()):
        self.draw = draw
        self.bufs = {b.name: b for b in bufs}
        self.diff = diff
        self.max_depth = max_depth
        self.max_stmts = max_stmts
        self.unops_float = n.FLOAT_UNOPS if transcendentals else EXACT_FLOAT_UNOPS
        self.counters = counters or {}        # diff: counter buffer -> its one atomic op
        self.own = own                        # diff: read_write buffers touched only at gid
        self.shared_readable = shared_readable
        self.scopes: list[list[tuple[str, D, bool]]] = [[]]
        self.names = 0
        self.may_have_returned = False        # diff: a return_ was emitted before this point
        self.top_level = True

    # -- helpers
    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def flip(self, p_true_in_16: int = 8) -> bool:
        return self.draw(st.integers(0, 15)) < p_true_in_16

    def fresh(self, prefix: str = "v") -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def visible(self, dt: D | None = None, mutable: bool | None = None):
        return [(nm, t, m) for s in self.scopes for (nm, t, m) in s
                if (dt is None or t is dt) and (mutable is None or m is mutable)]

    def declare(self, name: str, dt: D, mutable: bool = True):
        self.scopes[-1].append((name, dt, mutable))

    def readable(self, dt: D) -> list[str]:
        out = []
        for b in self.bufs.values():
            if b.dtype is not dt:
                continue
            if not self.diff:
                out.append(b.name)
            elif b.access in (ir.Access.READ_ONLY, ir.Access.UNIFORM) or b.name in self.shared_readable:
                out.append(b.name)
        return out

    def uniform_here(self) -> bool:
        return (not self.diff) or (self.top_level and not self.may_have_returned)

    # -- expressions
    def index(self, depth: int, buf: str | None = None) -> n.Expr:
        """A u32 index, in bounds or not."""
        choices = ["gid", "gid+k", "small", "huge", "len", "len-1", "expr"]
        c = self.pick(choices)
        if c == "gid":
            return ir.gid(0)
        if c == "gid+k":
            return ir.gid(0) + ir.u32(self.draw(st.integers(1, 40)))
        if c == "small":
            return ir.u32(self.draw(st.integers(0, 8)))
        if c == "huge":
            return ir.u32(self.pick([2**31, 2**32 - 1, 2**32 - 2, 1 << 20]))
        if c in ("len", "len-1") and buf is not None:
            e = ir.buf_len(buf)
            return e if c == "len" else e - ir.u32(1)
        return self.expr(D.U32, min(depth, 1))

    def leaf(self, dt: D, weak_ok: bool = False) -> n.Expr:
        kinds = ["lit", "lit"]
        if self.visible(dt):
            kinds += ["var", "var", "var"]
        if self.readable(dt):
            kinds += ["load", "load"]
        if self.diff and any(self.bufs[o].dtype is dt for o in self.own):
            kinds.append("own")
        if dt is D.U32:
            kinds += ["builtin", "buf_len"]
        k = self.pick(kinds)
        if k == "lit":
            if weak_ok and not dt.is_bool and self.flip(5):
                v = self.draw(_int_values(dt) if dt.is_int else _float_values(dt))
                return n.Lit(D.I64, v, weak=True) if dt.is_int else ir.lit(float(v))
            return self.draw(literals(dt))
        if k == "var":
            return ir.var(self.pick(self.visible(dt))[0])
        if k == "load":
            b = self.pick(self.readable(dt))
            return ir.load(b, self.index(0, b))
        if k == "own":
            return ir.load(self.pick([o for o in self.own if self.bufs[o].dtype is dt]), ir.gid(0))
        if k == "builtin":
            name = self.pick(["invocation_id", "local_id", "workgroup_id", "num_workgroups",
                              "subgroup_local_id", "subgroup_size"])
            axis = 0 if name.startswith("subgroup") else self.draw(st.integers(0, 2))
            return n.Builtin(name, axis)
        return ir.buf_len(self.pick(list(self.bufs)))

    def expr(self, dt: D, depth: int, weak_ok: bool = False) -> n.Expr:
        if depth <= 0 or self.flip(3):
            return self.leaf(dt, weak_ok)
        d = depth - 1
        kinds = ["binop", "binop", "binop", "unop", "unop", "select", "cast"]
        if not dt.is_bool:
            kinds.append("fma")
        if dt.is_bool:
            kinds += ["cmp", "cmp", "cmp", "cmp", "logic", "pred", "pred"]
        if dt is D.U32:
            kinds.append("count")
        if not self.diff and dt in ATOMIC_TYPES and any(
                b.dtype is dt and b.access.writable for b in self.bufs.values()):
            kinds.append("atomic")
        if self.uniform_here():
            if dt is D.U32:
                kinds.append("ballot")
            if dt in SUBGROUP_ADD_TYPES:
                kinds.append("sgadd")
            kinds.append("shuffle")
        k = self.pick(kinds)
        if k == "binop":
            if dt.is_bool:
                return self.expr(dt, d)  # bool results come from cmp/logic below
            ops = list(n.ARITH_BINOPS) + (list(n.INT_BINOPS) if dt.is_int else [])
            if dt.is_float:
                ops.remove("mod")
            op = self.pick(ops)
            return n.BinOp(op, self.expr(dt, d), self.expr(dt, d, weak_ok=True))
        if k == "unop":
            if dt.is_bool:
                return ir.not_(self.expr(D.BOOL, d))
            ops = list(n.NUM_UNOPS) + (["bitnot", "reverse_bits"] if dt.is_int else list(self.unops_float))
            return n.UnOp(self.pick(ops), self.expr(dt, d))
        if k == "select":
            return ir.select(self.expr(D.BOOL, d), self.expr(dt, d), self.expr(dt, d, weak_ok=True))
        if k == "cast":
            return ir.cast(self.expr(self.pick(ALL_TYPES), d), dt)
        if k == "fma":
            return ir.fma(self.expr(dt, d), self.expr(dt, d), self.expr(dt, d))
        if k == "cmp":
            src = self.pick(ALL_TYPES)
            ops = n.CMP_BINOPS if not src.is_bool else ("eq", "ne")
            return n.BinOp(self.pick(ops), self.expr(src, d), self.expr(src, d, weak_ok=True))
        if k == "logic":
            return n.BinOp(self.pick(n.LOGIC_BINOPS), self.expr(D.BOOL, d), self.expr(D.BOOL, d))
        if k == "pred":
            return n.UnOp(self.pick(n.FLOAT_PRED_UNOPS), self.expr(self.pick(FLOAT_TYPES), d))
        if k == "count":
            return n.UnOp(self.pick(["popcount", "clz", "ctz"]), self.expr(self.pick(INT_TYPES), d))
        if k == "atomic":
            return self.atomic_expr(dt, d)
        if k == "ballot":
            return ir.subgroup_ballot(self.expr(D.BOOL, d))
        if k == "sgadd":
            return ir.subgroup_add(self.expr(dt, d))
        return ir.subgroup_shuffle(self.expr(dt, d), self.index(d))

    def atomic_expr(self, dt: D, d: int, buf: str | None = None, op: str | None = None) -> n.Atomic:
        if buf is None:
            buf = self.pick([b.name for b in self.bufs.values() if b.dtype is dt and b.access.writable])
        op = op or self.pick(n.ATOMIC_OPS)
        expected = self.expr(dt, d) if op == "compare_exchange" else None
        idx = self.index(d, buf)
        return n.Atomic(op, buf, idx, self.expr(dt, d), expected)

    # -- statements
    def body(self, depth: int, top: bool = False) -> list[n.Node]:
        count = self.draw(st.integers(1 if top else 0, self.max_stmts))
        return [self.stmt(depth) for _ in range(count)]

    def nested(self, depth: int, make_body):
        """Run make_body in a new scope, out of top-level (possibly divergent) flow."""
        was_top = self.top_level
        self.top_level = False
        self.scopes.append([])
        try:
            return make_body()
        finally:
            self.scopes.pop()
            self.top_level = was_top

    def stored_buffers(self) -> list[str]:
        if not self.diff:
            return [b.name for b in self.bufs.values() if b.access.writable]
        return [b.name for b in self.bufs.values()
                if b.is_output and b.name not in self.counters]

    def stmt(self, depth: int) -> n.Node:
        kinds = ["let", "let", "let", "store", "store"]
        if self.visible(mutable=True):
            kinds.append("assign")
        if depth > 0:
            kinds += ["if", "loop", "block"]
        if self.stored_buffers():
            kinds.append("store")
        if self.diff and self.counters:
            kinds += ["counter", "counter"]
        kinds.append("return")
        if not self.diff:
            kinds.append("barrier")
        elif self.uniform_here():
            kinds.append("barrier")
        d = self.max_depth + 1  # expression depth
        k = self.pick(kinds)
        if k == "let":
            if self.flip(3):  # a weak literal: the default type (u32/i32/i64/u64, f32)
                v = self.draw(st.one_of(st.integers(-2**63, 2**64 - 1), st.floats(width=32)))
                dt = D.F32 if isinstance(v, float) else next(
                    t for t in (D.U32, D.I32, D.I64, D.U64) if t.min <= v <= t.max)
                name = self.fresh()
                s = ir.let(name, v)
                self.declare(name, dt)
                return s
            dt = self.pick(ALL_TYPES)
            value = self.expr(dt, d)
            name = self.fresh()
            self.declare(name, dt)
            return ir.let(name, value)
        if k == "assign":
            name, dt, _ = self.pick(self.visible(mutable=True))
            return ir.assign(name, self.expr(dt, d, weak_ok=True))
        if k == "store" and self.stored_buffers():
            b = self.bufs[self.pick(self.stored_buffers())]
            idx = ir.gid(0) if self.diff else self.index(1, b.name)
            return ir.store(b.name, idx, self.expr(b.dtype, d, weak_ok=True))
        if k == "if":
            cond = self.expr(D.BOOL, d)
            then = self.nested(depth, lambda: self.body(depth - 1))
            other = self.nested(depth, lambda: self.body(depth - 1)) if self.flip() else []
            return ir.if_(cond, then, other)
        if k == "loop":
            start = self.draw(st.integers(0, 3))
            end = self.draw(st.integers(0, 4))
            var = self.fresh("k")

            def make():
                self.declare(var, D.U32, mutable=False)
                return self.body(depth - 1)
            return ir.loop(var, ir.u32(start), ir.u32(end), self.nested(depth, make))
        if k == "block":
            was_top = self.top_level
            self.scopes.append([])
            try:
                return ir.block(self.body(depth - 1))  # a block at top level stays uniform
            finally:
                self.scopes.pop()
                self.top_level = was_top
        if k == "counter":
            buf = self.pick(sorted(self.counters))
            dt = self.bufs[buf].dtype
            # the old value goes into a variable nothing reads: its value depends on the order
            return ir.let(self.fresh("_old"), self.atomic_expr(dt, d, buf, self.counters[buf]))
        if k == "return":
            if self.diff and self.top_level and self.flip(12):
                return ir.block()  # rarely end every invocation at top level: keep programs useful
            self.may_have_returned = True
            return ir.return_()
        if k == "barrier":
            return ir.barrier("workgroup" if self.diff or self.flip(12) else "grid")
        # a "store" with no writable buffer: fall back to a let
        return ir.let(self.fresh(), self.expr(D.U32, d))


# ---- well-typed programs ----------------------------------------------------------------------

_WG_SIZES = [1, 2, 32, 33, 64, 100, 256, 1024, (8, 8), (4, 4, 4), (1, 1, 64), (16, 2, 2)]


@st.composite
def well_typed_programs(draw, max_depth: int = 2, max_stmts: int = 4) -> ir.Program:
    """Random VALID programs: `ir.validate(p) == []` for every draw.

    Buffers: 1-4 bound buffers of random DataType (all 13) and role (read, read_write, output,
    uniform; sometimes a static count), bindings in shuffled order, plus sometimes a workgroup
    buffer. Workgroup sizes from 1 to 1024 threads, 1-3 axes.
    Body: let / assign / store / if (with or without else) / loop (u32 literal bounds 0..4, read-only
    loop variable) / block / return / barrier (workgroup or grid); expressions up to `max_depth`
    deep over every binary and unary op (typing respected: equal operand types, integer-only ops
    on integers, float-only ops and predicates on floats, no float `mod`, popcount/clz/ctz give u32,
    comparisons give bool, logic ops on bool), select, cast between any two types, fma, every
    builtin and axis, buf_len, atomics (every op, compare_exchange with `expected`) only on
    writable u32/i32/u64/i64 buffers, subgroup ballot/shuffle/add (add only on u32/i32), loads
    with in- and out-of-bounds indices, weak (bare Python) literals where the context types them.
    Variable names are unique, so no shadowing. Programs may race, diverge around barriers or
    subgroup ops, or use grid barriers: they are valid IR, not necessarily well-defined runs.
    """
    nbound = draw(st.integers(1, 4))
    order = draw(st.permutations(range(nbound)))
    bufs = []
    for i in range(nbound):
        dt = draw(st.sampled_from(ALL_TYPES))
        role = draw(st.sampled_from(["read", "read_write", "output", "uniform"]))
        count = draw(st.sampled_from([0, 0, 0, 1, 4, 100]))
        bufs.append(getattr(B, role)(f"b{i}", order[i], dt, count))
    if draw(st.booleans()):
        bufs.append(B.workgroup("tile", draw(st.integers(1, 64)), draw(st.sampled_from(ALL_TYPES))))
    wg = draw(st.sampled_from(_WG_SIZES))
    g = _Gen(draw, bufs, diff=False, max_depth=max_depth, max_stmts=max_stmts)
    entry = g.body(max_depth, top=True)
    return ir.Program(bufs, wg, entry, name=draw(st.sampled_from(["main", "k", "gen_1"])))


# ---- programs with inputs, for differential testing -------------------------------------------

@st.composite
def programs_with_inputs(draw, max_depth: int = 2, max_stmts: int = 4, transcendentals: bool = False):
    """(program, inputs, config) whose outputs are fully determined by ../docs/semantics.md, so
    every backend must return the same bits (NaNs compare equal as NaNs; bf16 outputs are raw
    uint16 bits, so compare NaN-ness after widening).

    Guarantees, on top of those of `well_typed_programs` (every program validates clean):
    - No data races. Plain stores go only to `out[invocation_id(0)]` of pure output buffers and
      of "own-element" read_write buffers, which are also loaded only at `invocation_id(0)`.
      Pure outputs are never loaded. Read-only/uniform inputs are loaded at any index.
    - Atomics only on dedicated counter buffers (u32/i32/u64/i64, static count 1-4), one
      order-independent op per buffer (add, or, and, xor, min or max); the returned old value
      goes into a variable that nothing reads. Counters are never loaded or plainly stored.
    - Subgroup ops (ballot, shuffle, add) and workgroup barriers only in top-level statements
      (not inside if/loop bodies) and only before the first `return_` in program order; no
      grid barriers. Workgroups are 1-D (1 to 100 threads, including partial subgroups).
    - Shared memory, when present, is written once at `tile[local_id(0)]` by the first
      statement, then a barrier, then only read (any index).
    - Loops have u32 literal bounds (at most 4 iterations, at most `max_depth` nested).
    - Unless `transcendentals=True`, no exp/exp2/log/log2/sin/cos/tan (they are only ULP-bounded,
      and a 1-ULP difference can flip a later comparison); rsqrt is exact and drawn.
    - Inputs: one array per `program.inputs` entry, in binding order and storage dtype, sizes
      0, 1, around the workgroup size and not a multiple of it (always at least one read-only
      input, so count=0 outputs are sized from it); values include type min/max, 0, +-1, and for
      floats NaN, +-inf, -0.0 and subnormals; bool words other than 0/1.
    - config: DispatchConfig with grid None (cover the outputs) or 1-3 workgroups, and
      fixpoint_iterations 1 or 2.
    """
    wx = draw(st.sampled_from([1, 2, 31, 32, 33, 64, 100]))
    names: list[tuple[str, str, D, int]] = []  # (name, role, dtype, count)
    for i in range(draw(st.integers(1, 3))):
        names.append((f"in{i}", "read", draw(st.sampled_from(ALL_TYPES)), 0))
    if draw(st.booleans()):
        names.append(("par", "uniform", draw(st.sampled_from(ALL_TYPES)), draw(st.integers(1, 4))))
    for i in range(draw(st.integers(1, 2))):
        names.append((f"out{i}", "output", draw(st.sampled_from(ALL_TYPES)), 0))
    own = ()
    if draw(st.booleans()):
        names.append(("rw0", "read_write", draw(st.sampled_from(ALL_TYPES)), 0))
        own = ("rw0",)
    counters = {}
    if draw(st.booleans()):
        role = draw(st.sampled_from(["output", "read_write"]))
        names.append(("cnt", role, draw(st.sampled_from(ATOMIC_TYPES)), draw(st.integers(1, 4))))
        counters["cnt"] = draw(st.sampled_from(ORDER_FREE_ATOMICS))
    order = draw(st.permutations(range(len(names))))
    bufs = [getattr(B, role)(nm, order[i], dt, count) for i, (nm, role, dt, count) in enumerate(names)]
    shared = draw(st.booleans())
    if shared:
        bufs.append(B.workgroup("tile", wx, draw(st.sampled_from(ALL_TYPES))))
    g = _Gen(draw, bufs, diff=True, max_depth=max_depth, max_stmts=max_stmts,
             transcendentals=transcendentals, counters=counters, own=own)
    entry: list[n.Node] = []
    if shared:
        tile = g.bufs["tile"]
        entry.append(ir.store("tile", ir.lid(0), g.expr(tile.dtype, max_depth, weak_ok=True)))
        entry.append(ir.barrier("workgroup"))
        g.shared_readable = ("tile",)
    entry += g.body(max_depth, top=True)
    # every output gets at least one store, so the comparison always has something to look at
    for b in bufs:
        if b.is_output and b.name not in counters:
            entry.append(ir.store(b.name, ir.gid(0), g.expr(b.dtype, 1, weak_ok=True)))
    program = ir.Program(bufs, (wx, 1, 1), entry, name="diff")

    inputs = []
    for b in program.inputs:
        size = b.count or draw(st.one_of(st.sampled_from([0, 1, wx - 1, wx, wx + 1, 2 * wx + 3]),
                                         st.integers(0, 3 * wx + 5)))
        inputs.append(draw(host_arrays(b.dtype, max(size, 0))))
    grid = draw(st.sampled_from([None, None, 1, 2, 3]))
    config = DispatchConfig(grid=grid, fixpoint_iterations=draw(st.sampled_from([1, 1, 2])))
    return program, inputs, config


# ---- ill-typed programs -----------------------------------------------------------------------

_JUNK_OPS = ("pow", "", "ADD", "nand")


@st.composite
def ill_typed_programs(draw, max_depth: int = 2, max_stmts: int = 4) -> ir.Program:
    """Random programs that ignore typing and well-formedness, built with the node classes
    directly (bypassing the builders' checks): operands of any type for any op, unknown op
    names, unknown builtins and axes, undeclared variables and buffers, literals of any type
    (weak or strong, some with a raw value outside their type), casts to non-DataTypes,
    atomics on any buffer with or without `expected`, unknown barrier scopes, non-statements in
    bodies, duplicate or invalid buffer names/bindings/counts, odd workgroup sizes and names.
    Returns the program, or the IRValidationError its construction raised (fields of the wrong
    kind, such as a bool binding or a str where an expression belongs, are refused as the node
    or buffer is built); `ir.validate` should report the rest, never crash."""
    try:
        return _ill_typed_program(draw, max_depth, max_stmts)
    except IRValidationError as e:
        return e


def _ill_typed_program(draw, max_depth: int, max_stmts: int) -> ir.Program:
    names = ["a", "b", "c", "x", "1bad"]
    bufs = []
    for i in range(draw(st.integers(0, 4))):
        access = draw(st.sampled_from(list(ir.Access)))
        binding = draw(st.one_of(st.none(), st.integers(-1, 3), st.just(True)))
        count = draw(st.one_of(st.integers(-2, 5), st.just(20000)))
        out = draw(st.booleans())
        rng = draw(st.one_of(st.none(), st.tuples(st.integers(-4, 40), st.integers(-4, 40))))
        bufs.append(B(draw(st.sampled_from(names)), binding, access, draw(st.sampled_from(ALL_TYPES)),
                      count, out, rng))
    var_names = ["v", "w", "k", "9", "a"]

    def lit():
        dt = draw(st.sampled_from(ALL_TYPES))
        raw = draw(st.one_of(st.integers(-2**65, 2**65), st.integers(-3, 3)))
        weak = draw(st.booleans())
        if weak:
            return n.Lit(draw(st.sampled_from([D.I64, D.F64])), raw if dt.is_int else raw & (2**64 - 1), True)
        return n.Lit(dt, raw)

    def expr(d: int):
        k = draw(st.integers(0, 13 if d > 0 else 4))
        if k == 0:
            return lit()
        if k == 1:
            return n.Var(draw(st.sampled_from(var_names)))
        if k == 2:
            return n.Builtin(draw(st.sampled_from(n.BUILTINS + ("lane",))), draw(st.integers(-1, 3)))
        if k == 3:
            return n.BufLen(draw(st.sampled_from(names)))
        if k == 4:
            return draw(st.sampled_from([5, "x", None, 1.5]))  # not an expression at all
        if k == 5:
            return n.BinOp(draw(st.sampled_from(n.BINOPS + _JUNK_OPS)), expr(d - 1), expr(d - 1))
        if k == 6:
            return n.UnOp(draw(st.sampled_from(n.UNOPS + _JUNK_OPS)), expr(d - 1))
        if k == 7:
            return n.Select(expr(d - 1), expr(d - 1), expr(d - 1))
        if k == 8:
            return n.Cast(draw(st.sampled_from(ALL_TYPES + ("u32", None))), expr(d - 1))
        if k == 9:
            return n.Fma(expr(d - 1), expr(d - 1), expr(d - 1))
        if k == 10:
            return n.Load(draw(st.sampled_from(names)), expr(d - 1))
        if k == 11:
            has_exp = draw(st.booleans())
            return n.Atomic(draw(st.sampled_from(n.ATOMIC_OPS + _JUNK_OPS)), draw(st.sampled_from(names)),
                            expr(d - 1), expr(d - 1), expr(d - 1) if has_exp else None)
        if k == 12:
            return draw(st.sampled_from([n.SubgroupBallot, n.SubgroupAdd]))(expr(d - 1))
        return n.SubgroupShuffle(expr(d - 1), expr(d - 1))

    def stmt(d: int):
        k = draw(st.integers(0, 9 if d > 0 else 5))
        if k == 0:
            return n.Let(draw(st.sampled_from(var_names)), expr(max_depth))
        if k == 1:
            return n.Assign(draw(st.sampled_from(var_names)), expr(max_depth))
        if k == 2:
            return n.Store(draw(st.sampled_from(names)), expr(1), expr(max_depth))
        if k == 3:
            return n.Barrier(draw(st.sampled_from(["workgroup", "grid", "device"])))
        if k == 4:
            return n.Return()
        if k == 5:
            return n.Let(draw(st.sampled_from(var_names)), expr(0))
        if k == 6:
            return n.If(expr(1), tuple(body(d - 1)), tuple(body(d - 1)))
        if k == 7:
            return n.Loop(draw(st.sampled_from(var_names)), expr(1), expr(1), tuple(body(d - 1)))
        if k == 8:
            return n.Block(tuple(body(d - 1)) + (draw(st.sampled_from([5, "s", None])),))
        return n.Block(tuple(body(d - 1)))

    def body(d: int):
        return [stmt(d) for _ in range(draw(st.integers(0, max_stmts)))]

    wg = draw(st.one_of(st.integers(-1, 2048), st.tuples(st.integers(0, 70), st.integers(0, 70)),
                        st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(0, 70))))
    return ir.Program(bufs, wg, body(max_depth), name=draw(st.sampled_from(["main", "bad name", "", "x1"])))
