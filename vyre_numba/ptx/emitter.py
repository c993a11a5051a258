"""Program -> PTX text.

Kernel ABI (fixed; `abi(program)` returns it as a `KernelABI`):

- Entry: `.visible .entry <program.name>`, one per module.
- Parameters, in this order: for every non-workgroup buffer in binding order
  (`program.bound_buffers`) one `.param .u64 <name>_ptr`, a global-memory pointer to element 0;
  then for the same buffers in the same order one `.param .u32 <name>_len`, the element count.
  `buf_len(b)` reads `<name>_len`, and every load, store and atomic compares its index with it.
  A program with `barrier("grid")` takes one more, `.param .u64 vyre_grid_state`: 12 zeroed bytes
  for the grid barrier (ptx_templates/grid_barrier.ptx, linked by `assemble`), whose third word
  the host reads after the launch (non-zero: a barrier timed out and the kernel left early).
- Block shape: the workgroup size (`workgroup=` where given, else the program's) is declared with
  `.reqntid x, y, z`, so launching another block shape fails; with `workgroup="auto"` no
  `.reqntid` is written and any block shape runs.
- Workgroup buffers are module-scope `.shared` arrays `wg$<name>` (no IR name holds a `$`, so none
  is a parameter's name; no dynamic shared memory), zeroed at entry
  by all threads of the block, then `bar.sync 0`.
- Transcendentals call `vyre_math_<op>_<f32|f64>` device functions declared `.extern .func`;
  `assemble` links their modules (see `mathlib`).

Value representation: bool in `.pred`; 8/16/32-bit integers in `.b32` registers, kept
normalised (sign-extended for signed types, zero-extended for unsigned ones) by re-wrapping after
every operation that can leave the type's range; 64-bit integers in `.b64`; f16, bf16 and f32
values in `.f32` registers (f16/bf16 values exactly representable, re-rounded once after every
arithmetic operation); f64 in `.f64`.
"""
from __future__ import annotations

import numbers
import struct
from dataclasses import dataclass

import numpy as np

from .. import ir
from .. import display
from ..display import PTX
from ..errors import INTEGERS, UnsupportedError, immutable, shown
from ..ir import DataType as D
from ..ir import nodes as n
from ..ir.program import Access, BufferDecl, Program, walk
from ..ir.recursion import drive
from ..ir.validate import MAX_AXIS, MAX_THREADS
from . import mathlib
from . import templates

# Lowest PTX ISA that knows each target (everything the emitter writes exists in all of them).
PTX_VERSION = {70: "6.0", 72: "6.1", 75: "6.3", 80: "7.0", 86: "7.1", 87: "7.4", 89: "7.8",
               90: "7.8", 100: "8.6", 101: "8.6", 103: "8.8", 110: "9.0", 120: "8.7", 121: "8.8"}

# Register class of each type, and the banks: prefix and PTX register type.
RCLASS = {D.BOOL: "pred", D.F16: "f32", D.BF16: "f32", D.F32: "f32", D.F64: "f64",
          D.U64: "b64", D.I64: "b64", D.U8: "b32", D.U16: "b32", D.U32: "b32", D.I8: "b32",
          D.I16: "b32", D.I32: "b32"}
BANKS = {"pred": ("%p", ".pred"), "h": ("%h", ".b16"), "b32": ("%r", ".b32"),
         "b64": ("%rd", ".b64"), "f32": ("%f", ".f32"), "f64": ("%fd", ".f64")}
# Instruction type suffix for arithmetic on each type (sub-word integers work in 32 bits).
ITY = {D.U8: "u32", D.U16: "u32", D.U32: "u32", D.I8: "s32", D.I16: "s32", D.I32: "s32",
       D.U64: "u64", D.I64: "s64", D.F16: "f32", D.BF16: "f32", D.F32: "f32", D.F64: "f64"}
# Memory access type of one buffer element.
MTY = {D.U8: "u8", D.I8: "s8", D.U16: "u16", D.I16: "s16", D.U32: "u32", D.I32: "s32",
       D.U64: "u64", D.I64: "s64", D.BOOL: "u32", D.F16: "b16", D.BF16: "u16", D.F32: "f32",
       D.F64: "f64"}
# selp / mov type of each register class.
STY = {"b32": "b32", "b64": "b64", "f32": "f32", "f64": "f64"}

ATOM = {"add": ("add", "u"), "or": ("or", "b"), "and": ("and", "b"), "xor": ("xor", "b"),
        "min": ("min", "s"), "max": ("max", "s"), "exchange": ("exch", "b"),
        "compare_exchange": ("cas", "b")}


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter: PTX name, PTX type (".u64" / ".u32"), the buffer it describes and
    whether it is that buffer's pointer ("ptr") or element count ("len")."""

    name: str
    ptx_type: str
    buffer: str
    kind: str


@dataclass(frozen=True)
class KernelABI:
    """How to launch an emitted kernel: entry name, parameters in order, block shape (None when
    any shape is accepted) and static shared-memory bytes."""

    entry: str
    params: tuple[KernelParam, ...]
    workgroup_size: tuple[int, int, int] | None
    shared_bytes: int

    def to_dict(self) -> dict:
        """JSON-ready form (the manifest `vyre-numba emit` writes next to the PTX)."""
        return {"entry": self.entry, "workgroup_size": None if self.workgroup_size is None else list(self.workgroup_size),
                "shared_bytes": self.shared_bytes,
                "params": [{"name": p.name, "type": p.ptx_type, "buffer": p.buffer, "kind": p.kind}
                           for p in self.params]}

    def _repr_html_(self) -> str:
        wg = "any (no .reqntid)" if self.workgroup_size is None else str(self.workgroup_size)
        head = display.fields_table([("entry", self.entry), ("workgroup size", wg),
                                     ("static shared memory", f"{self.shared_bytes:,} bytes")], title="KernelABI")
        return head + display.table(((k, p.name, p.ptx_type, p.buffer, p.kind) for k, p in enumerate(self.params)),
                                    ("#", "parameter", "type", "buffer", "kind"), total=len(self.params))


GRID_STATE = "vyre_grid_state"  # the extra kernel parameter of programs with grid barriers
STEP_ITEM, STEP_CHANGED, STEP_DONE = "vyre_item", "vyre_changed", "$L_step_done"  # see emit_step
GRID_BARRIER_DECL = ".extern .func (.param .b32 ok) vyre_grid_barrier(.param .b64 state, .param .b64 timeout_ns);"
GRID_BARRIER_TIMEOUT_NS = 10_000_000_000  # a grid barrier waits at most this long (see grid_barrier.ptx)


def _checked_workgroup(workgroup):
    """`emit`'s workgroup: None (the program's own), "auto" (any, no .reqntid) or three positive ints
    (whether a device can launch them is the launch check's to say); else UnsupportedError."""
    if workgroup is None or (isinstance(workgroup, str) and workgroup == "auto"):
        return workgroup
    fix = "Fix: pass None (the program's workgroup), 'auto', or three ints such as (256, 1, 1)."
    if isinstance(workgroup, (str, bytes, set, frozenset, dict)) or not isinstance(workgroup, (tuple, list)):
        raise UnsupportedError(f"workgroup={shown(workgroup, 60)} is not a workgroup shape. {fix}")
    if len(workgroup) != 3 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in workgroup):
        raise UnsupportedError(f"workgroup={shown(workgroup, 60)} is not three ints. {fix}")
    wg = tuple(int(v) for v in workgroup)
    if min(wg) < 1:
        raise UnsupportedError(f"workgroup={wg} has an axis below 1. {fix}")
    if wg[0] * wg[1] * wg[2] > MAX_THREADS or any(v > m for v, m in zip(wg, MAX_AXIS)):
        raise UnsupportedError(f"workgroup={wg} is past what every CUDA device launches ({MAX_THREADS} invocations, "
                               f"{MAX_AXIS} per axis). Fix: pass a smaller workgroup, such as (256, 1, 1).")
    return wg


def _wg(program: Program, workgroup) -> tuple[int, int, int] | None:
    if workgroup == "auto":
        return None
    return tuple(workgroup) if workgroup is not None else program.workgroup_size


def _shared_layout(program: Program) -> list[tuple[BufferDecl, int]]:
    return [(b, (b.count * b.dtype.nbytes + 7) // 8 * 8) for b in program.buffers
            if b.is_shared]


def abi(program: Program, *, workgroup: tuple[int, int, int] | str | None = None,
        optimize: bool = True) -> KernelABI:
    """The launch interface of `emit(program, workgroup=workgroup, optimize=optimize)`: of
    `program.optimized()` unless `optimize=False`, as emit compiles it (a grid barrier or a workgroup
    buffer the optimizer removed is not in it). Programs with grid barriers take one more parameter,
    the grid barrier's state (12 zeroed bytes, see grid_barrier.ptx)."""
    if not isinstance(program, Program):
        raise UnsupportedError(f"abi takes a Program, not {shown(program, 60)}. Fix: pass the ir.Program to emit.")
    if not isinstance(optimize, (bool, np.bool_)):
        raise UnsupportedError(f"optimize={shown(optimize, 60)} is not a bool. Fix: pass True or False.")
    ir.check(program)
    return _abi(program.optimized() if optimize else program, _checked_workgroup(workgroup),
                "grid_sync" in program.capabilities)


def _abi(program: Program, workgroup, grid_state: bool) -> KernelABI:
    """`grid_state`: the program as written has a grid barrier (its launches pass the state, even
    where the optimizer removed every barrier as dead code)."""
    bound = program.bound_buffers
    ps = tuple(KernelParam(f"{b.name}_ptr", ".u64", b.name, "ptr") for b in bound) + tuple(
        KernelParam(f"{b.name}_len", ".u32", b.name, "len") for b in bound)
    if grid_state:
        ps += (KernelParam(GRID_STATE, ".u64", "", "grid_state"),)
    return KernelABI(program.name, ps, _wg(program, workgroup),
                     sum(size for _, size in _shared_layout(program)))


def _hex(v: int, bits: int) -> str:
    return f"0x{v & ((1 << bits) - 1):0{bits // 4}X}"


def _f32(v: float) -> str:
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", v))[0]


def _flit(bits: int, dt: D) -> str:
    """PTX immediate of a float literal (f16/bf16 given as their exact f32 value)."""
    if dt is D.F64:
        return f"0d{bits:016X}"
    if dt is D.F32:
        return f"0f{bits:08X}"
    return _f32(ir.bits_to_float(bits, dt))


WRAP, NARROW = "~wrap d d", "~narrow d d"


def _fz(dt: D) -> str:
    return "0d" + "0" * 16 if dt is D.F64 else "0f00000000"


# Names a lowering template may use besides its operands a, b, c: facts of the operand type dt...
FACTS = {
    "t": lambda dt: ITY[dt], "w": lambda dt: "b64" if dt.bits == 64 else "b32",
    "u": lambda dt: "u64" if dt.bits == 64 else "u32", "n": lambda dt: "s64" if dt.bits == 64 else "s32",
    "bits": lambda dt: dt.bits, "pad": lambda dt: 32 - dt.bits, "bm1": lambda dt: dt.bits - 1,
    "m": lambda dt: STY.get(RCLASS[dt], "pred"), "lo": lambda dt: int(dt.min), "hi": lambda dt: int(dt.max),
    "ones": lambda dt: _hex(-1, 64 if dt.bits == 64 else 32), "minx": lambda dt: _hex(int(dt.min), 64),
    "maxx": lambda dt: _hex(int(dt.max), 64),
    "zero": _fz, "one": lambda dt: "0d3FF0000000000000" if dt is D.F64 else "0f3F800000",
    "mone": lambda dt: "0dBFF0000000000000" if dt is D.F64 else "0fBF800000",
}
# ...and fresh registers, their bank named by prefix (d: the result's type, s: the operand's);
# x is the zero-extended operand a ("~zext x a").
TEMPS = {"p": "pred", "r": "b32", "rd": "b64", "f": "f32", "fd": "f64", "h": "h"}

_CMP = {"eq": ("eq", "eq"), "ne": ("ne", "neu"), "lt": ("lt", "lt"), "gt": ("gt", "gt"),
        "le": ("le", "le"), "ge": ("ge", "ge")}
_AMOUNT = lambda dt: (["cvt.u32.u64 {r0}, {b}", "and.b32 {r1}, {r0}, {bm1}"] if dt.bits == 64
                      else ["and.b32 {r1}, {b}, {bm1}"])
_ROT = lambda first, second: lambda dt: _AMOUNT(dt) + [
    "~zext x a", "sub.u32 {r2}, {bits}, {r1}", "shl.{w} {s1}, {x}, {%s}" % first, "shr.{u} {s2}, {x}, {%s}" % second,
    "or.{w} {d}, {s1}, {s2}", WRAP]


def _divmod(op: str):
    """x/0 = x%0 = 0, MIN/-1 = MIN and MIN%-1 = 0 (PTX leaves these unspecified), without a branch."""
    ins = "div" if op == "div" else "rem"
    return lambda dt: ([
        "setp.eq.{t} {p1}, {b}, 0", "setp.eq.{t} {p2}, {b}, -1", "or.pred {p3}, {p1}, {p2}", "selp.{t} {s1}, 1, {b}, {p3}",
        f"{ins}.{{t}} {{s2}}, {{a}}, {{s1}}", "neg.{t} {s3}, {a}" if op == "div" else "mov.{m} {s3}, 0",
        "selp.{t} {s4}, {s3}, {s2}, {p2}", "selp.{t} {d}, 0, {s4}, {p1}", WRAP] if dt.is_signed else [
        "setp.eq.{t} {p1}, {b}, 0", "selp.{t} {s1}, 1, {b}, {p1}", f"{ins}.{{t}} {{s2}}, {{a}}, {{s1}}",
        "selp.{t} {d}, 0, {s2}, {p1}", WRAP])


def _saturating(kind: str):
    """Narrow types are exact in 32 bits and clamped; i64 overflows iff the result's sign disagrees
    with what the operands force."""
    def lines(dt: D) -> list[str]:
        if dt.bits < 32:
            return [f"{kind}.s32 {{d}}, {{a}}, {{b}}", "max.s32 {d}, {d}, {lo}", "min.s32 {d}, {d}, {hi}"]
        if dt is D.I32:
            return [f"{kind}.sat.s32 {{d}}, {{a}}, {{b}}"]
        if not dt.is_signed:
            return [f"{kind}.{{t}} {{s1}}, {{a}}, {{b}}"] + (
                ["setp.lt.{t} {p1}, {s1}, {a}", "selp.{t} {d}, {ones}, {s1}, {p1}"] if kind == "add" else
                ["setp.lt.{t} {p1}, {a}, {b}", "selp.{t} {d}, 0, {s1}, {p1}"])
        return [f"{kind}.{{t}} {{s1}}, {{a}}, {{b}}"] + (
            ["xor.b64 {s2}, {s1}, {a}", "xor.b64 {s3}, {s1}, {b}"] if kind == "add" else
            ["xor.b64 {s2}, {a}, {b}", "xor.b64 {s3}, {a}, {s1}"]) + [
            "and.b64 {s2}, {s2}, {s3}", "setp.lt.s64 {p1}, {s2}, 0", "setp.lt.s64 {p2}, {a}, 0",
            "selp.s64 {s4}, {minx}, {maxx}, {p2}", "selp.s64 {d}, {s4}, {s1}, {p1}"]
    return lines


# Lowering of each operator, by operand kind: "i" integer, "f" float, "p" bool. A value is a list
# of instruction templates (falsy entries skipped; "~f out x" sets out = self.f(x, dt)), a function
# of the operand type giving that list, or the name of an _Emitter method.
BINARY = {
    **{op: {"i": [f"setp.{i}.{{t}} {{d}}, {{a}}, {{b}}"], "f": [f"setp.{f}.{{t}} {{d}}, {{a}}, {{b}}"],
            "p": ["xor.pred {d}, {a}, {b}", op == "eq" and "not.pred {d}, {d}"] if op in ("eq", "ne") else None}
       for op, (i, f) in _CMP.items()},
    "logical_and": {"p": ["and.pred {d}, {a}, {b}"]}, "logical_or": {"p": ["or.pred {d}, {a}, {b}"]},
    **{op: {"i": [f"{ins}.{{t}} {{d}}, {{a}}, {{b}}", WRAP]} for op, ins in
       (("wrapping_add", "add"), ("wrapping_sub", "sub"))},
    **{op: {"i": [f"{i}.{{t}} {{d}}, {{a}}, {{b}}", WRAP], "f": [f"{f}.{{t}} {{d}}, {{a}}, {{b}}", NARROW]}
       for op, i, f in (("add", "add", "add.rn"), ("sub", "sub", "sub.rn"), ("mul", "mul.lo", "mul.rn"))},
    "div": {"i": _divmod("div"), "f": ["div.rn.{t} {d}, {a}, {b}", NARROW]}, "mod": {"i": _divmod("mod")},
    # Float min/max: PTX returns the non-NaN operand but leaves the order of ±0 open, so equal
    # operands are merged bitwise (OR keeps -0 for min, AND keeps +0 for max).
    **{op: {"i": [f"{op}.{{t}} {{d}}, {{a}}, {{b}}"],
            "f": [f"{op}.{{t}} {{s1}}, {{a}}, {{b}}", "setp.eq.{t} {p1}, {a}, {b}",
                  f"{merge}.{{w}} {{s2}}, {{a}}, {{b}}", "selp.{t} {d}, {s2}, {s1}, {p1}"]}
       for op, merge in (("min", "or"), ("max", "and"))},
    **{op: {"i": [f"{ins}.{{w}} {{d}}, {{a}}, {{b}}"]} for op, ins in
       (("bitand", "and"), ("bitor", "or"), ("bitxor", "xor"))},
    "absdiff": {"i": ["min.{t} {s1}, {a}, {b}", "max.{t} {s2}, {a}, {b}", "sub.{t} {d}, {s2}, {s1}", WRAP],
                "f": ["sub.rn.{t} {s1}, {a}, {b}", "~narrow s1 s1", "abs.{t} {d}, {s1}"]},
    "saturating_add": {"i": _saturating("add")}, "saturating_sub": {"i": _saturating("sub")},
    "mul_high": {"i": lambda dt: ["mul.hi.{t} {d}, {a}, {b}"] if dt.bits >= 32 else
                 ["mul.lo.{t} {s1}, {a}, {b}", "shr.{t} {d}, {s1}, {bits}", WRAP]},
    # Shift amounts are masked to bits - 1; a rotate's second shift by `bits` gives 0 (PTX clamps).
    "shl": {"i": lambda dt: _AMOUNT(dt) + ["shl.{w} {d}, {a}, {r1}", WRAP]},
    "shr": {"i": lambda dt: _AMOUNT(dt) + ["shr.{t} {d}, {a}, {r1}"]},
    "rotl": {"i": _ROT("r1", "r2")}, "rotr": {"i": _ROT("r2", "r1")},
}
UNARY = {
    "not": {"p": ["not.pred {d}, {a}"]},
    **{op: {"f": [f"testp.{test}.{{t}} {{d}}, {{a}}"]} for op, test in
       (("isnan", "notanumber"), ("isinf", "infinite"), ("isfinite", "finite"))},
    **{op: {"f": [f"cvt.{mode}.{{t}}.{{t}} {{d}}, {{a}}"]} for op, mode in
       (("floor", "rmi"), ("ceil", "rpi"), ("round", "rni"), ("trunc", "rzi"))},
    **{op: {"f": "call_math"} for op in mathlib.OPS},
    "neg": {"i": ["neg.{n} {d}, {a}", WRAP], "f": ["neg.{t} {d}, {a}"]},
    "abs": {"i": lambda dt: ["setp.lt.{t} {p1}, {a}, 0", "neg.{t} {s1}, {a}", "selp.{t} {d}, {s1}, {a}, {p1}",
                             WRAP] if dt.is_signed else ["~keep d a"],
            "f": ["abs.{t} {d}, {a}"]},
    "sqrt": {"f": ["sqrt.rn.{t} {d}, {a}", NARROW]},
    "recip": {"f": ["rcp.rn.{t} {d}, {a}", NARROW]},
    "rsqrt": {"f": ["sqrt.rn.{t} {s1}, {a}", "~narrow s1 s1", "rcp.rn.{t} {d}, {s1}", NARROW]},
    "sign": {"i": lambda dt: ["setp.gt.{t} {p1}, {a}, 0", "setp.lt.{t} {p2}, {a}, 0", "selp.{t} {s1}, 1, 0, {p1}",
                              "selp.{t} {d}, -1, {s1}, {p2}"] if dt.is_signed else
             ["setp.ne.{t} {p1}, {a}, 0", "selp.{t} {d}, 1, 0, {p1}"],
             "f": ["setp.gt.{t} {p1}, {a}, {zero}", "setp.lt.{t} {p2}, {a}, {zero}",
                   "selp.{t} {s1}, {one}, {a}, {p1}", "selp.{t} {d}, {mone}, {s1}, {p2}"]},
    "popcount": {"i": ["~zext x a", "popc.{w} {d}, {x}"]},
    "clz": {"i": lambda dt: ["~zext x a", "clz.{w} {d}, {x}", dt.bits < 32 and "sub.u32 {d}, {d}, {pad}"]},
    "ctz": {"i": lambda dt: ["~zext x a", "brev.{w} {s1}, {x}", "clz.{w} {d}, {s1}",
                             dt.bits < 32 and "min.u32 {d}, {d}, {bits}"]},
    "bitnot": {"i": ["not.{w} {d}, {a}", WRAP]},
    "reverse_bits": {"i": lambda dt: ["~zext x a", "brev.{w} {d}, {x}"] if dt.bits >= 32 else
                     ["~zext x a", "brev.{w} {s1}, {x}", "shr.u32 {d}, {s1}, {pad}", WRAP]},
}
# Memory form of a value and back: bool as a u32 0/1, f16 as its bits, bf16 as the top half of
# its f32 pattern; every other type is stored as it is held.
TO_MEMORY = {D.BOOL: ["selp.u32 {r1}, 1, 0, {a}", "~keep d r1"], D.F16: ["cvt.rn.f16.f32 {h1}, {a}", "~keep d h1"],
             D.BF16: ["mov.b32 {r1}, {a}", "shr.u32 {r1}, {r1}, 16", "~keep d r1"]}
# f16/bf16 fma: the exact a*b + c (TwoSum in f64: sum fd5, error fd9) rounded to odd into fd10.
FMA_TO_ODD = ["cvt.f64.f32 {fd1}, {a}", "cvt.f64.f32 {fd2}, {b}", "cvt.f64.f32 {fd3}, {c}",
              "mul.rn.f64 {fd4}, {fd1}, {fd2}", "add.rn.f64 {fd5}, {fd4}, {fd3}", "sub.rn.f64 {fd6}, {fd5}, {fd4}",
              "sub.rn.f64 {fd7}, {fd5}, {fd6}", "sub.rn.f64 {fd7}, {fd4}, {fd7}", "sub.rn.f64 {fd8}, {fd3}, {fd6}",
              "add.rn.f64 {fd9}, {fd7}, {fd8}", "testp.finite.f64 {p1}, {fd5}",
              "setp.ne.and.f64 {p2}, {fd9}, 0d0000000000000000, {p1}", "mov.b64 {rd1}, {fd5}", "mov.b64 {rd2}, {fd9}",
              "xor.b64 {rd2}, {rd2}, {rd1}", "setp.lt.and.s64 {p3}, {rd2}, 0, {p2}", "@{p3} sub.s64 {rd1}, {rd1}, 1",
              "@{p2} or.b64 {rd1}, {rd1}, 1", "mov.b64 {fd10}, {rd1}"]
# bf16 from there: round to odd again at f32 (24 bits), then to nearest at 8 bits.
BF16_FROM_ODD = ["cvt.rz.f32.f64 {f1}, {fd10}", "cvt.f64.f32 {fd11}, {f1}", "setp.neu.and.f64 {p4}, {fd11}, {fd10}, {p1}",
                 "mov.b32 {r1}, {f1}", "@{p4} or.b32 {r1}, {r1}, 1", "mov.b32 {f2}, {r1}", "~narrow d f2"]
# The value an atomic leaves behind, s1, from the old value a, the operand b and the expected c.
ATOMIC_RESULT = {**{op: [f"{op}.{{t}} {{s1}}, {{a}}, {{b}}"] for op in ("add", "min", "max")},
                 **{op: [f"{op}.{{w}} {{s1}}, {{a}}, {{b}}"] for op in ("or", "and", "xor")},
                 "exchange": ["~keep s1 b"],
                 "compare_exchange": ["setp.eq.{t} {p2}, {a}, {c}", "selp.{t} {s1}, {b}, {a}, {p2}"]}
FROM_MEMORY = {D.BOOL: ("b32", ["setp.ne.u32 {d}, {a}, 0"]), D.F16: ("h", ["cvt.f32.f16 {d}, {a}"]),
               D.BF16: ("b32", ["~widen_bf16 d a"])}


class _Env(dict):
    """Template names of one lowering: operands, facts of the operand type dt, fresh registers."""

    def __init__(self, em: "_Emitter", dt: D, rt: D, regs=()):
        super().__init__(zip("abc", regs))
        self.em, self.dt, self.rt = em, dt, rt

    def __missing__(self, name: str):
        prefix = name.rstrip("0123456789")
        if name in FACTS:
            value = FACTS[name](self.dt)
        elif prefix in ("d", "s"):
            value = self.em.r(self.rt if prefix == "d" else self.dt)
        else:
            value = self.em.reg(TEMPS[prefix])
        self[name] = value
        return value


class _Emitter:
    def __init__(self, program: Program, sm: int, workgroup, cooperative: bool, step: str | None = None,
                 digest: str | None = None, grid_state: bool | None = None):
        self.p, self.sm, self.workgroup, self.cooperative = program, sm, workgroup, cooperative
        # the ABI is the program's as written: its launches pass a grid barrier's state it has
        self.grid_abi = "grid_sync" in program.capabilities if grid_state is None else grid_state
        self.digest = digest or program.digest()  # the program as given (its manifest's), not as optimized
        self.step, self.item, self.changed = step, "", ""  # step: the name of the device function rendered
        self.grid_state: str | None = None
        self.lines: list[str] = []
        self.count = {k: 0 for k in BANKS}
        self.nlabels = 0
        self.scopes: list[dict[str, tuple[str, D]]] = [{}]
        self.externs: set[str] = set()
        self.bufs = {b.name: b for b in program.buffers}
        self.ptr: dict[str, str] = {}
        self.len: dict[str, str] = {}
        self.lane_mask: str | None = None
        self.lane_count: str | None = None

    # ---- plumbing ------------------------------------------------------------------------------
    def reg(self, cls: str) -> str:
        self.count[cls] += 1
        return f"{BANKS[cls][0]}{self.count[cls]}"

    def r(self, dt: D) -> str:
        return self.reg(RCLASS[dt])

    def ins(self, text: str) -> None:
        guard = ""
        if text.startswith("@"):
            guard, _, text = text.partition(" ")
            guard += " "
        op, _, args = text.partition(" ")
        self.lines.append(f"\t{guard}{op}\t{args};" if args else f"\t{guard}{op};")

    def run(self, lines, env: _Env) -> str:
        """Emit the template lines over env; the register named d."""
        for line in lines(env.dt) if callable(lines) else lines:
            if not line:
                continue
            if line[-1] == ":":
                self.place(line[:-1].format_map(env))
            elif line[0] == "~":
                fn, out, x = line[1:].split()
                env[out] = getattr(self, fn)(env[x], env.dt)
            else:
                self.ins(line.format_map(env))
        return dict.get(env, "d")

    def lower(self, table: dict, op: str, env: _Env) -> str:
        dt = env.dt
        rule = table.get(op, {}).get("p" if dt is D.BOOL else "f" if dt.is_float else "i")
        if rule is None:
            raise UnsupportedError(f"{op} on {dt} has no PTX lowering. Fix: run ir.check(program).")
        return getattr(self, rule)(op, env) if isinstance(rule, str) else self.run(rule, env)

    def label(self, stem: str) -> str:
        self.nlabels += 1
        return f"$L_{stem}_{self.nlabels}"

    def place(self, label: str) -> None:
        self.lines.append(f"{label}:")

    def comment(self, text: str) -> None:
        self.lines.append("")
        self.lines.extend(f"\t// {line.strip()}" for line in text.splitlines())

    def imm(self, value: int, dt: D) -> str:
        """`value` as an immediate of integer type dt's register width."""
        return _hex(value, 64 if RCLASS[dt] == "b64" else 32)

    def const(self, value: int, dt: D) -> str:
        d = self.r(dt)
        self.ins(f"mov.{STY[RCLASS[dt]]} {d}, {self.imm(value, dt)}")
        return d

    def fresh(self, **given: str) -> _Env:
        env = _Env(self, D.U32, D.U32)
        env.update(given)
        return env

    def keep(self, x: str, dt: D) -> str:
        return x

    def call(self, name: str, args: list[tuple[str, str]], ret: tuple[str, str] | None) -> str | None:
        """Call device function `name` with (register, PTX type) arguments; its result register."""
        self.lines.append("\t{")
        params = [f"param{i}" for i in range(len(args))]
        for q, (_, ty) in zip(params, args):
            self.lines.append(f"\t.param .b{ty[1:]} {q};")
        if ret:
            self.lines.append(f"\t.param .b{ret[1][1:]} retval0;")
        for q, (x, ty) in zip(params, args):
            self.ins(f"st.param.{ty} [{q}], {x}")
        self.ins(f"call {'(retval0), ' if ret else ''}{name}, ({', '.join(params)})")
        if ret:
            self.ins(f"ld.param.{ret[1]} {ret[0]}, [retval0]")
        self.lines.append("\t}")
        return ret[0] if ret else None

    # ---- normalisation -------------------------------------------------------------------------
    def wrap(self, x: str, dt: D) -> str:
        """Reduce a 32-bit register to sub-word type dt's range (no-op for other types)."""
        if dt.bits >= 32 or not dt.is_int:
            return x
        d = self.r(dt)
        self.ins(f"cvt.s32.s{dt.bits} {d}, {x}" if dt.is_signed else f"and.b32 {d}, {x}, {_hex((1 << dt.bits) - 1, 32)}")
        return d

    def zext(self, x: str, dt: D) -> str:
        """The bit pattern of a signed sub-word value, zero-extended to 32 bits."""
        if dt.bits >= 32 or not dt.is_signed:
            return x
        d = self.r(dt)
        self.ins(f"and.b32 {d}, {x}, {_hex((1 << dt.bits) - 1, 32)}")
        return d

    def narrow(self, x: str, dt: D) -> str:
        """Round an f32 register holding an f16/bf16 result to that type (no-op otherwise)."""
        if dt is D.F16:
            return self.run(["cvt.rn.f16.f32 {h1}, {a}", "cvt.f32.f16 {d}, {h1}"], _Env(self, dt, dt, (x,)))
        return self.widen_bf16(self.bf16_bits(x), dt) if dt is D.BF16 else x

    def bf16_bits(self, x: str) -> str:
        """bf16 bits (in the low half of a .b32 register) of the f32 value x, rounded to nearest even."""
        env = _Env(self, D.U32, D.U32, (x,))
        if self.sm >= 80:
            return self.run(["cvt.rn.bf16.f32 {h1}, {a}", "cvt.u32.u16 {d}, {h1}"], env)
        # Exact integer RNE: (u + 0x7FFF + ((u >> 16) & 1)) >> 16; NaN keeps its top bits, quietened.
        return self.run(["mov.b32 {r1}, {a}", "bfe.u32 {r2}, {r1}, 16, 1", "add.u32 {r2}, {r2}, 0x7FFF",
                         "add.u32 {r2}, {r1}, {r2}", "shr.u32 {r2}, {r2}, 16", "shr.u32 {r3}, {r1}, 16",
                         "or.b32 {r3}, {r3}, 0x40", "testp.notanumber.f32 {p1}, {a}",
                         "selp.b32 {d}, {r3}, {r2}, {p1}"], env)

    def widen_bf16(self, u: str, dt: D = D.BF16) -> str:
        return self.run(["shl.b32 {r1}, {a}, 16", "mov.b32 {d}, {r1}"], _Env(self, D.F32, D.F32, (u,)))

    # ---- expressions: operands first (post-order), then one table from node kind to lowering ----
    def expr(self, e: n.Expr):
        """(register, type) of e: a value for leaves, a walk (see ir.recursion) otherwise."""
        if type(e) is n.Var:
            return self.var(e.name)
        kids = e.children()
        return self.node(e, ()) if not kids else self.walk(e, kids)

    def walk(self, e: n.Expr, kids):
        ops = []
        for k in kids:
            ops.append((yield self.expr(k)))
        return self.node(e, ops)

    def node(self, e: n.Expr, ops) -> tuple[str, D]:
        buf = self.bufs[e.buffer].dtype if type(e) in (n.Load, n.Atomic) else None
        rt = n.result_type(e, tuple(t for _, t in ops), buf)
        env = _Env(self, ops[0][1] if ops and type(e) is not n.Select else rt, rt, [r for r, _ in ops])
        return EXPR[type(e)](self, e, env), rt

    def var(self, name: str) -> tuple[str, D]:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise UnsupportedError(f"variable {shown(name)} is not defined. Fix: run ir.check(program).")

    def lit(self, e: n.Lit, env: _Env) -> str:
        dt = e.dtype
        if dt is D.BOOL:
            return self.run([f"mov.u32 {{r1}}, {e.raw}", "setp.ne.u32 {d}, {r1}, 0"], env)
        if dt.is_float:
            return self.run([f"mov.{RCLASS[dt]} {{d}}, {_flit(e.raw, dt)}"], env)
        return self.const(e.raw, dt)

    def buflen(self, e: n.BufLen, env: _Env) -> str:
        b = self.bufs[e.buffer]
        return self.const(b.count, D.U32) if b.is_shared else self.len[b.name]

    def builtin(self, e: n.Builtin, env: _Env) -> str:
        if self.step:
            return self.item  # the only builtin a step may use (check_step): invocation_id.x
        ax = "xyz"[e.axis]
        return self.run({"invocation_id": [f"mov.u32 {{r1}}, %ctaid.{ax}", f"mov.u32 {{r2}}, %ntid.{ax}",
                                           f"mov.u32 {{r3}}, %tid.{ax}", "mad.lo.u32 {d}, {r1}, {r2}, {r3}"],
                         "local_id": [f"mov.u32 {{d}}, %tid.{ax}"], "workgroup_id": [f"mov.u32 {{d}}, %ctaid.{ax}"],
                         "num_workgroups": [f"mov.u32 {{d}}, %nctaid.{ax}"],
                         "subgroup_local_id": ["mov.u32 {d}, %laneid"], "subgroup_size": ["mov.u32 {d}, 32"]}[e.name], env)

    def address(self, b: BufferDecl, idx: str) -> tuple[str, str, str]:
        """(in-bounds predicate, address register, state space) of b[idx]."""
        p, off, a = self.reg("pred"), self.reg("b64"), self.reg("b64")
        if b.is_shared:
            self.ins(f"setp.lt.u32 {p}, {idx}, {b.count}")
            base = self.reg("b64")
            self.ins(f"mov.u64 {base}, wg${b.name}")
        else:
            self.ins(f"setp.lt.u32 {p}, {idx}, {self.len[b.name]}")
            base = self.ptr[b.name]
        self.ins(f"mul.wide.u32 {off}, {idx}, {b.dtype.nbytes}")
        self.ins(f"add.s64 {a}, {base}, {off}")
        return p, a, "shared" if b.is_shared else "global"

    def load(self, e: n.Load, env: _Env) -> str:
        b, dt = self.bufs[e.buffer], env.rt
        p, a, space = self.address(b, env["a"])
        nc = ".nc" if b.access in (Access.READ_ONLY, Access.UNIFORM) else ""
        cls, fix = FROM_MEMORY.get(dt, (RCLASS[dt], None))
        w = self.reg(cls)
        self.ins(f"mov.{RCLASS[dt]} {w}, {_fz(dt)}" if dt.is_float and not fix else
                 f"mov.{BANKS[cls][1][1:]} {w}, 0")
        self.ins(f"@{p} ld.{space}{nc}.{MTY[dt]} {w}, [{a}]")
        return self.run(fix, _Env(self, dt, dt, (w,))) if fix else w

    def atomic(self, e: n.Atomic, env: _Env) -> str:
        b, dt = self.bufs[e.buffer], env.rt
        p, a, space = self.address(b, env["a"])
        op, kind = ATOM[e.op]
        ty = {"u": "u", "b": "b", "s": "s" if dt.is_signed else "u"}[kind] + str(dt.bits)
        d = self.const(0, dt)
        args = f"{env['c']}, {env['b']}" if e.expected is not None else env["b"]
        self.ins(f"@{p} atom.{space}.{op}.{ty} {d}, [{a}], {args}")
        if self.step and not b.is_shared:
            new = ATOMIC_RESULT[e.op]
            self.run(new + [f"setp.ne.and.{{t}} {{p1}}, {{s1}}, {d}, {p}", f"@{{p1}} mov.u32 {self.changed}, 1"],
                     _Env(self, dt, dt, (d, env["b"], env.get("c", ""))))
        return d

    def select(self, e: n.Select, env: _Env) -> str:
        return self.run(["mov.pred {d}, {c}", "@{a} mov.pred {d}, {b}"] if env.dt is D.BOOL else
                        ["selp.{m} {d}, {b}, {c}, {a}"], env)

    def fma(self, e: n.Fma, env: _Env) -> str:
        dt = env.dt
        if dt in (D.F16, D.BF16):
            return self.fma_narrow(env["a"], env["b"], env["c"], dt)
        return self.run(["fma.rn.{t} {d}, {a}, {b}, {c}"] if dt.is_float else ["mad.lo.{t} {d}, {a}, {b}, {c}", WRAP], env)

    def fma_narrow(self, a: str, b: str, c: str, dt: D) -> str:
        """f16/bf16 fma rounded once: a*b is exact in f64, TwoSum gives the exact a*b + c as s + e,
        and rounding s to odd (keeping e as a sticky bit) makes the final rounding to the narrow
        type the only one (an f32 fma then a second rounding would round twice)."""
        return self.run(FMA_TO_ODD + (["~from_f64 d fd10"] if dt is D.F16 else BF16_FROM_ODD), _Env(self, dt, dt, (a, b, c)))

    def from_f64(self, x: str, dt: D) -> str:
        return self.convert(x, D.F64, dt)

    # ---- casts: the env's facts are of the target type, the source's type is spelt out ------------
    def cast(self, e: n.Cast, env: _Env) -> str:
        return self.convert(env["a"], env.dt, env.rt)

    def convert(self, x: str, src: D, dst: D) -> str:
        to, st = _Env(self, dst, dst, (x,)), ITY.get(src)
        if src is dst:
            return x
        if dst is D.BOOL:
            return self.run(["setp.neu.{t} {d}, {a}, {zero}" if src.is_float else "setp.ne.{t} {d}, {a}, 0"],
                            _Env(self, src, dst, (x,)))
        if src is D.BOOL:
            return self.run(["selp.{t} {d}, {one}, {zero}, {a}" if dst.is_float else "selp.{t} {d}, 1, 0, {a}"], to)
        if src.is_int and dst.is_int:
            s64, d64 = RCLASS[src] == "b64", RCLASS[dst] == "b64"
            short = dst.bits < 32 and (dst.bits < src.bits or dst.is_signed != src.is_signed or s64)
            if d64:
                return x if s64 else self.run([f"cvt.{'s64.s32' if src.is_signed else 'u64.u32'} {{d}}, {{a}}"], to)
            return self.run(["cvt.u32.u64 {r1}, {a}" if s64 else "~keep r1 a", "~wrap d r1" if short else "~keep d r1"], to)
        if src.is_int:
            return self.run([f"cvt.rn.f16.{st} {{h1}}, {{a}}", "cvt.f32.f16 {d}, {h1}"] if dst is D.F16 else
                            [f"cvt.rn.{'f64' if dst is D.F64 else 'f32'}.{st} {{d}}, {{a}}", NARROW], to)
        if dst.is_int:
            # Saturating, NaN to 0; narrow types saturate to s32 first, then clamp.
            sat = ([f"cvt.rzi.sat.{{t}}.{st} {{s1}}, {{a}}"] if dst.bits >= 32 else
                   [f"cvt.rzi.sat.s32.{st} {{s1}}, {{a}}", "max.s32 {s1}, {s1}, {lo}", "min.s32 {s1}, {s1}, {hi}"])
            return self.run([f"testp.notanumber.{st} {{p1}}, {{a}}"] + sat + ["selp.{m} {d}, 0, {s1}, {p1}"], to)
        if dst is D.F64:
            return self.run(["cvt.f64.f32 {d}, {a}"], to)
        if src is D.F64:
            return self.run(["cvt.rn.f16.f64 {h1}, {a}", "cvt.f32.f16 {d}, {h1}"] if dst is D.F16 else
                            ["cvt.rn.f32.f64 {d}, {a}", NARROW], to)
        return self.narrow(x, dst)

    # ---- operators -----------------------------------------------------------------------------
    def binop(self, e: n.BinOp, env: _Env) -> str:
        return self.lower(BINARY, e.op, env)

    def unop(self, e: n.UnOp, env: _Env) -> str:
        return self.lower(UNARY, e.op, env)

    def call_math(self, op: str, env: _Env) -> str:
        name = mathlib.symbol(op, env["t"])
        self.externs.add(name)
        return self.narrow(self.call(name, [(env["a"], env["t"])], (env["d"], env["t"])), env.dt)

    # ---- subgroups: lanes past the warp's last existing lane (or >= 32) read 0 --------------------
    def ballot(self, e: n.SubgroupBallot, env: _Env) -> str:
        return self.run([f"vote.sync.ballot.b32 {{d}}, {{a}}, {self.lane_mask}"], env)

    def shuffle(self, e: n.SubgroupShuffle, env: _Env) -> str:
        shfl = lambda d, v: f"shfl.sync.idx.b32 {{{d}}}, {{{v}}}, {{r3}}, 31, {self.lane_mask}"
        head = [f"setp.lt.u32 {{p1}}, {{b}}, {self.lane_count}", "mov.u32 {r2}, %laneid", "selp.b32 {r3}, {b}, {r2}, {p1}"]
        rc = RCLASS[env.dt]
        if rc == "pred":
            body = ["selp.u32 {r4}, 1, 0, {a}", shfl("r5", "r4"), "setp.ne.and.u32 {d}, {r5}, 0, {p1}"]
        elif rc in ("b64", "f64"):
            body = ["mov.b64 {{{r4}, {r5}}}, {a}", shfl("r6", "r4"), shfl("r7", "r5"), "selp.b32 {r6}, {r6}, 0, {p1}",
                    "selp.b32 {r7}, {r7}, 0, {p1}", "mov.b64 {d}, {{{r6}, {r7}}}"]
        else:
            body = [shfl("r4", "a"), "selp.b32 {r4}, {r4}, 0, {p1}", "mov.b32 {d}, {r4}"]
        return self.run(head + body, env)

    def subgroup_add(self, e: n.SubgroupAdd, env: _Env) -> str:
        mask, cnt = self.lane_mask, self.lane_count
        if self.sm >= 80:
            return self.run([f"redux.sync.add.{{t}} {{d}}, {{a}}, {mask}"], env)
        # Tree reduction towards lane 0 over the existing lanes, then a broadcast.
        tree = [line for i, off in enumerate((16, 8, 4, 2, 1)) for line in (
            f"shfl.sync.down.b32 {{r1{i}}}, {{r2}}, {off}, 31, {mask}", f"add.u32 {{r2{i}}}, {{r1}}, {off}",
            f"setp.lt.u32 {{p{i}}}, {{r2{i}}}, {cnt}", f"selp.b32 {{r1{i}}}, {{r1{i}}}, 0, {{p{i}}}",
            f"add.u32 {{r2}}, {{r2}}, {{r1{i}}}")]
        return self.run(["mov.u32 {r1}, %laneid", "mov.b32 {r2}, {a}"] + tree +
                        [f"shfl.sync.idx.b32 {{d}}, {{r2}}, 0, 31, {mask}"], env)

    # ---- statements ----------------------------------------------------------------------------
    def body(self, stmts, scope: bool = True):
        if scope:
            self.scopes.append({})
        for s in stmts:
            if type(s) is not n.Block:
                self.comment(_head(s))
            (yield STMT[type(s)](self, s))
        if scope:
            self.scopes.pop()

    def let(self, s: n.Let):
        v, dt = (yield self.expr(s.value))
        d = self.r(dt)
        self.ins(f"mov.{FACTS['m'](dt)} {d}, {v}")
        self.scopes[-1][s.name] = (d, dt)

    def assign(self, s: n.Assign):
        v, dt = (yield self.expr(s.value))
        self.ins(f"mov.{FACTS['m'](dt)} {self.var(s.name)[0]}, {v}")

    def store(self, s: n.Store):
        b = self.bufs[s.buffer]
        idx, _ = (yield self.expr(s.index))
        v, dt = (yield self.expr(s.value))
        w = self.run(TO_MEMORY[dt], _Env(self, dt, dt, (v,))) if dt in TO_MEMORY else v
        p, a, space = self.address(b, idx)
        if self.step and not b.is_shared:
            self.note_store(p, a, w, dt)
        self.ins(f"@{p} st.{space}.{MTY[dt]} [{a}], {w}")

    def note_store(self, p: str, a: str, w: str, dt: D) -> None:
        """In a step: set the changed flag where storing w (memory form) at [a] overwrites other bits."""
        ty = {D.F16: "b16", D.F32: "b32", D.F64: "b64"}.get(dt, MTY[dt])
        cls = "h" if ty == "b16" else "b64" if dt.bits == 64 else "b32"
        old, pc = self.reg(cls), self.reg("pred")
        self.ins(f"@{p} ld.global.{ty} {old}, [{a}]")
        if dt in (D.F32, D.F64):
            w2 = self.reg(cls)
            self.ins(f"mov.{ty} {w2}, {w}")
            w = w2
        self.ins(f"setp.ne.and.{'b16' if cls == 'h' else cls} {pc}, {old}, {w}, {p}")
        self.ins(f"@{pc} mov.u32 {self.changed}, 1")

    def if_(self, s: n.If):
        c, _ = (yield self.expr(s.cond))
        other, end = self.label("else"), self.label("endif")
        self.ins(f"@!{c} bra {other if s.otherwise else end}")
        (yield self.body(s.then))
        if s.otherwise:
            self.ins(f"bra.uni {end}")
            self.place(other)
            self.comment("} else {")
            (yield self.body(s.otherwise))
        self.place(end)

    def loop(self, s: n.Loop):
        start, _ = (yield self.expr(s.start))
        end, _ = (yield self.expr(s.end))
        i, stop, p = self.reg("b32"), self.reg("b32"), self.reg("pred")
        top, done = self.label("loop"), self.label("endloop")
        self.ins(f"mov.b32 {i}, {start}")
        self.ins(f"mov.b32 {stop}, {end}")
        self.place(top)
        self.ins(f"setp.ge.u32 {p}, {i}, {stop}")
        self.ins(f"@{p} bra {done}")
        self.scopes.append({s.var: (i, D.U32)})
        (yield self.body(s.body))
        self.scopes.pop()
        self.ins(f"add.u32 {i}, {i}, 1")
        self.ins(f"bra.uni {top}")
        self.place(done)

    def barrier(self, s: n.Barrier) -> None:
        if s.scope == "workgroup":
            self.ins("bar.sync 0")
            return
        # Every thread calls the grid barrier (ptx_templates/grid_barrier.ptx); when it reports a
        # timeout the whole block leaves, and the host reads the error word.
        self.externs.add("vyre_grid_barrier")
        ok, p = self.reg("b32"), self.reg("pred")
        self.call("vyre_grid_barrier", [(self.grid_state, "b64"), (str(GRID_BARRIER_TIMEOUT_NS), "b64")], (ok, "b32"))
        self.ins(f"setp.eq.u32 {p}, {ok}, 0")
        self.ins(f"@{p} ret")

    def block(self, s: n.Block):
        (yield self.body(s.body))

    # ---- kernel --------------------------------------------------------------------------------
    def prologue(self) -> None:
        env = _Env(self, D.U32, D.U32)
        if self.step:
            self.run([f"ld.param.u32 {{r1}}, [{STEP_ITEM}]", "mov.u32 {r2}, 0"], env)
            self.item, self.changed, env = env["r1"], env["r2"], _Env(self, D.U32, D.U32)
        if "grid_sync" in self.p.capabilities:  # read where a barrier is left (declared as grid_abi says)
            self.run([f"ld.param.u64 {{rd1}}, [{GRID_STATE}]", "cvta.to.global.u64 {rd2}, {rd1}"], env)
            self.grid_state = env["rd2"]
        for b in self.p.bound_buffers:
            e = _Env(self, D.U32, D.U32)
            self.run([f"ld.param.u64 {{rd1}}, [{b.name}_ptr]", "cvta.to.global.u64 {rd2}, {rd1}",
                      f"ld.param.u32 {{r1}}, [{b.name}_len]"], e)
            self.ptr[b.name], self.len[b.name] = e["rd2"], e["r1"]
        shared = _shared_layout(self.p)
        needs_lanes = "subgroup" in self.p.capabilities
        if not shared and not needs_lanes:
            return
        # Linear thread index r1 and block size r2.
        self.run(["mov.u32 {r1}, %tid.z", "mov.u32 {r3}, %ntid.y", "mov.u32 {r2}, %tid.y", "mad.lo.u32 {r1}, {r1}, {r3}, {r2}",
                  "mov.u32 {r3}, %ntid.x", "mov.u32 {r2}, %tid.x", "mad.lo.u32 {r1}, {r1}, {r3}, {r2}",
                  "mov.u32 {r2}, %ntid.y", "mul.lo.u32 {r2}, {r2}, {r3}", "mov.u32 {r3}, %ntid.z",
                  "mul.lo.u32 {r2}, {r2}, {r3}"], env)
        if needs_lanes:
            self.comment("member mask: the existing lanes of this warp (the last warp may be partial)")
            self.run(["and.b32 {r4}, {r1}, 0xFFFFFFE0", "sub.u32 {r4}, {r2}, {r4}", "min.u32 {r4}, {r4}, 32",
                      "shl.b32 {r5}, 1, {r4}", "sub.u32 {r5}, {r5}, 1"], env)
            self.lane_mask, self.lane_count = env["r5"], env["r4"]
        if shared:
            self.comment("zero the workgroup buffers, then wait for the whole block")
            for b, size in shared:
                top, done = self.label("zero"), self.label("zeroed")
                self.run([f"mov.u64 {{rd1}}, wg${b.name}", "mov.u32 {r9}, {r1}", f"{top}:",
                          f"setp.ge.u32 {{p1}}, {{r9}}, {size // 4}", f"@{{p1}} bra {done}", "mul.wide.u32 {rd2}, {r9}, 4",
                          "add.s64 {rd3}, {rd1}, {rd2}", "st.shared.u32 [{rd3}], 0", "add.u32 {r9}, {r9}, {r2}",
                          f"bra.uni {top}", f"{done}:"], self.fresh(r1=env["r1"], r2=env["r2"]))
            self.ins("bar.sync 0")

    def render(self) -> str:
        self.prologue()
        drive(self.body(self.p.entry, scope=False))
        self.lines.append("")
        if self.step:
            self.place(STEP_DONE)
            self.ins(f"st.param.b32 [{STEP_CHANGED}], {self.changed}")
        self.ins("ret")
        a = _abi(self.p, None if self.step else self.workgroup, self.grid_abi)
        params = ((f"\t.param .b32 {STEP_ITEM}",) if self.step else ()) + tuple(
            f"\t.param {'.b' + q.ptx_type[2:] if self.step else q.ptx_type} {q.name}" for q in a.params)
        wg = None if self.step else a.workgroup_size
        regs = "\n".join(f"\t.reg {BANKS[k][1]} \t{BANKS[k][0]}<{c + 1}>;"
                         for k, c in self.count.items() if c)
        shared = "\n".join(f"\t.shared .align 8 .b8 wg${b.name}[{size}];  // {b}"
                           for b, size in _shared_layout(self.p))
        header = [f"// vyre-numba PTX for program {self.p.name!r} (digest {self.digest[:16]})",
                  f"// fixpoint step {self.step}" if self.step else
                  f"// workgroup {wg if wg else 'auto'}; cooperative={self.cooperative}"]
        return templates.load(
            "module",
            comment="\n".join(header),
            version=PTX_VERSION[self.sm],
            target=f"sm_{self.sm}",
            externs="".join(f"\n{GRID_BARRIER_DECL if x == 'vyre_grid_barrier' else mathlib.extern_decl(x)}"
                            for x in sorted(self.externs)),
            entry=f".func (.param .b32 {STEP_CHANGED}) {self.step}" if self.step else f".entry {a.entry}",
            params=",\n".join(params),
            directives=f"\n.reqntid {wg[0]}, {wg[1]}, {wg[2]}" if wg else "",
            registers=regs,
            shared=shared,
            body="\n".join(self.lines),
        )


EXPR = {n.Lit: _Emitter.lit, n.BufLen: _Emitter.buflen, n.Builtin: _Emitter.builtin, n.Load: _Emitter.load,
        n.Atomic: _Emitter.atomic, n.Select: _Emitter.select, n.Fma: _Emitter.fma, n.Cast: _Emitter.cast,
        n.BinOp: _Emitter.binop, n.UnOp: _Emitter.unop, n.SubgroupBallot: _Emitter.ballot,
        n.SubgroupShuffle: _Emitter.shuffle, n.SubgroupAdd: _Emitter.subgroup_add}
STMT = {n.Let: _Emitter.let, n.Assign: _Emitter.assign, n.Store: _Emitter.store, n.If: _Emitter.if_,
        n.Loop: _Emitter.loop, n.Barrier: _Emitter.barrier,
        n.Return: lambda em, s: em.ins(f"bra.uni {STEP_DONE}" if em.step else "ret"),
        n.Block: _Emitter.block}


def _head(s: n.Node, limit: int = 120) -> str:
    """A one-line summary of a statement for the PTX comment above its code (bounded, so deep
    programs do not render whole subtrees at every level)."""
    match s:
        case n.If(cond):
            text = f"if {n.render_expr(cond, limit)}"
        case n.Loop(v, start, end):
            text = f"for {v} in {n.render_expr(start, limit)}..{n.render_expr(end, limit)}"
        case _:
            text = n.render_stmt(s, 0, limit, 1)[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def emit(program: Program, *, sm: int = 90, workgroup: tuple[int, int, int] | str | None = None,
         cooperative: bool = False, optimize: bool = True) -> PTX:
    """PTX text of `program` as one kernel for target `sm_<sm>` (see the module docstring for the
    ABI), of `program.optimized()` unless `optimize=False`. Raises IRValidationError for an
    invalid program and UnsupportedError for what the target cannot run."""
    ir.check(program)
    workgroup = _checked_workgroup(workgroup)
    for name, flag in (("cooperative", cooperative), ("optimize", optimize)):
        if not isinstance(flag, (bool, np.bool_)):
            raise UnsupportedError(f"{name}={shown(flag, 60)} is not a bool. Fix: pass True or False.")
    cooperative, optimize, sm = bool(cooperative), bool(optimize), target(sm)
    if "grid_sync" in program.capabilities and not cooperative:  # as written: dispatch refuses it so too
        raise UnsupportedError(f"program {program.name!r} has barrier('grid'), which needs every workgroup "
                               "resident at once. Fix: pass cooperative=True (ptx.emit(p, cooperative=True), "
                               "p.ptx(cooperative=True)), and dispatch it with DispatchConfig(cooperative=True).")
    given, grid_state = program.digest(), "grid_sync" in program.capabilities
    if optimize:
        program = program.optimized()
    return _Emitter(program, sm, workgroup, cooperative, digest=given, grid_state=grid_state).render()


def check_step(program: Program) -> Program:
    """`program` if it can be a fixpoint step (see `emit_step`), else UnsupportedError."""
    ir.check(program)
    why = None
    if any(b.is_shared for b in program.buffers):
        why = "declares a workgroup buffer"
    else:
        for x in walk(program.entry, distinct=True):
            if isinstance(x, n.Barrier):
                why = f"has barrier({x.scope!r})"
            elif isinstance(x, (n.SubgroupBallot, n.SubgroupShuffle, n.SubgroupAdd)):
                why = "uses a subgroup operation"
            elif isinstance(x, n.Builtin) and (x.name, x.axis) != ("invocation_id", 0):
                why = f"reads {x.name}({x.axis})"
            if why:
                break
    if why:
        raise UnsupportedError(f"program {program.name!r} {why}, but a fixpoint step runs once per item, with no "
                               "workgroup around it. Fix: use only invocation_id(0) (the item) and buffers in the "
                               "step, and no barriers, subgroup operations or workgroup buffers.")
    return program


def emit_step(program: Program, *, sm: int = 90, name: str = "vyre_fixpoint_step") -> PTX:
    """PTX text of `program` as a fixpoint step for `sm_<sm>`: a device function
    `.func (.param .b32 vyre_changed) <name>(.param .b32 vyre_item, <the kernel ABI's parameters as .b64/.b32>)`
    that runs the body for one item (invocation_id(0) is the item) and returns 1 when one of its
    stores or atomics to a buffer changed the bits it overwrote."""
    check_step(program)
    return _Emitter(program, target(sm), None, False, step=name).render()


def target(sm) -> int:
    """`sm` as one of the targets the emitter knows (an int such as 90 for sm_90); else UnsupportedError."""
    if isinstance(sm, (bool, np.bool_)) or not isinstance(sm, INTEGERS):
        raise UnsupportedError(f"sm={shown(sm, 60)} is not a target: targets are ints, 90 for sm_90 (known: "
                               f"{', '.join(map(str, PTX_VERSION))}). Fix: pass sm= one of those ints, e.g. the "
                               "device's compute capability.")
    if int(sm) not in PTX_VERSION:
        raise UnsupportedError(f"sm_{int(sm)} is not a target the PTX emitter knows (known: "
                               f"{', '.join(map(str, PTX_VERSION))}). "
                               "Fix: pass sm= one of those, e.g. the device's compute capability.")
    return int(sm)


immutable(KernelParam, KernelABI)
