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
- Workgroup buffers are module-scope `.shared` arrays (no dynamic shared memory), zeroed at entry
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

import struct
from dataclasses import dataclass

from .. import ir
from ..errors import UnsupportedError
from ..ir import DataType as D
from ..ir import nodes as n
from ..ir.program import Access, BufferDecl, Program
from ..ir.recursion import drive
from . import mathlib
from . import templates

# Lowest PTX ISA that knows each target (everything the emitter writes exists in all of them).
PTX_VERSION = {70: "6.0", 72: "6.1", 75: "6.3", 80: "7.0", 86: "7.1", 87: "7.4", 89: "7.8",
               90: "7.8", 100: "8.6", 101: "8.6", 103: "8.8", 120: "8.7", 121: "8.8"}

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

INT_ARITH = {"add": "add", "wrapping_add": "add", "sub": "sub", "wrapping_sub": "sub",
             "mul": "mul.lo", "min": "min", "max": "max"}
BITWISE = {"bitand": "and", "bitor": "or", "bitxor": "xor"}
FLOAT_ARITH = {"add": "add.rn", "sub": "sub.rn", "mul": "mul.rn", "div": "div.rn"}
CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "gt": "gt", "le": "le", "ge": "ge"}
FCMP = {"eq": "eq", "ne": "neu", "lt": "lt", "gt": "gt", "le": "le", "ge": "ge"}
FROUND = {"floor": "rmi", "ceil": "rpi", "round": "rni", "trunc": "rzi"}
FTEST = {"isnan": "notanumber", "isinf": "infinite", "isfinite": "finite"}
SREG = {"local_id": "%tid", "workgroup_id": "%ctaid", "num_workgroups": "%nctaid"}
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


GRID_STATE = "vyre_grid_state"  # the extra kernel parameter of programs with grid barriers
GRID_BARRIER_DECL = ".extern .func (.param .b32 ok) vyre_grid_barrier(.param .b64 state, .param .b64 timeout_ns);"
GRID_BARRIER_TIMEOUT_NS = 10_000_000_000  # a grid barrier waits at most this long (see grid_barrier.ptx)


def _wg(program: Program, workgroup) -> tuple[int, int, int] | None:
    if workgroup == "auto":
        return None
    return tuple(workgroup) if workgroup is not None else program.workgroup_size


def _shared_layout(program: Program) -> list[tuple[BufferDecl, int]]:
    return [(b, (b.count * b.dtype.nbytes + 7) // 8 * 8) for b in program.buffers
            if b.is_shared]


def abi(program: Program, *, workgroup: tuple[int, int, int] | str | None = None) -> KernelABI:
    """The launch interface of `emit(program, workgroup=workgroup)`. Programs with grid barriers
    take one more parameter, the grid barrier's state (12 zeroed bytes, see grid_barrier.ptx)."""
    bound = program.bound_buffers
    ps = tuple(KernelParam(f"{b.name}_ptr", ".u64", b.name, "ptr") for b in bound) + tuple(
        KernelParam(f"{b.name}_len", ".u32", b.name, "len") for b in bound)
    if "grid_sync" in program.capabilities:
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


class _Emitter:
    def __init__(self, program: Program, sm: int, workgroup, cooperative: bool):
        self.p, self.sm, self.workgroup, self.cooperative = program, sm, workgroup, cooperative
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

    # ---- normalisation -------------------------------------------------------------------------
    def wrap(self, x: str, dt: D) -> str:
        """Reduce a 32-bit register to sub-word type dt's range (no-op for other types)."""
        if dt.bits >= 32 or not dt.is_int:
            return x
        d = self.r(dt)
        if dt.is_signed:
            self.ins(f"cvt.s32.s{dt.bits} {d}, {x}")
        else:
            self.ins(f"and.b32 {d}, {x}, {_hex((1 << dt.bits) - 1, 32)}")
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
            h, d = self.reg("h"), self.reg("f32")
            self.ins(f"cvt.rn.f16.f32 {h}, {x}")
            self.ins(f"cvt.f32.f16 {d}, {h}")
            return d
        if dt is D.BF16:
            return self.widen_bf16(self.bf16_bits(x))
        return x

    def bf16_bits(self, x: str) -> str:
        """bf16 bits (in the low half of a .b32 register) of the f32 value x, rounded to nearest
        even."""
        u = self.reg("b32")
        if self.sm >= 80:
            h = self.reg("h")
            self.ins(f"cvt.rn.bf16.f32 {h}, {x}")
            self.ins(f"cvt.u32.u16 {u}, {h}")
            return u
        # Exact integer RNE: (u + 0x7FFF + ((u >> 16) & 1)) >> 16; NaN keeps its top bits, quietened.
        b, t, nan, q = self.reg("b32"), self.reg("b32"), self.reg("pred"), self.reg("b32")
        self.ins(f"mov.b32 {b}, {x}")
        self.ins(f"bfe.u32 {t}, {b}, 16, 1")
        self.ins(f"add.u32 {t}, {t}, 0x7FFF")
        self.ins(f"add.u32 {t}, {b}, {t}")
        self.ins(f"shr.u32 {t}, {t}, 16")
        self.ins(f"shr.u32 {q}, {b}, 16")
        self.ins(f"or.b32 {q}, {q}, 0x40")
        self.ins(f"testp.notanumber.f32 {nan}, {x}")
        self.ins(f"selp.b32 {u}, {q}, {t}, {nan}")
        return u

    def widen_bf16(self, u: str) -> str:
        t, d = self.reg("b32"), self.reg("f32")
        self.ins(f"shl.b32 {t}, {u}, 16")
        self.ins(f"mov.b32 {d}, {t}")
        return d

    # ---- expressions ---------------------------------------------------------------------------
    def expr(self, e: n.Expr) -> tuple[str, D]:
        m = getattr(self, "x_" + type(e).__name__)
        return m(e)

    def x_Lit(self, e: n.Lit) -> tuple[str, D]:
        dt = e.dtype
        if dt is D.BOOL:
            t, d = self.reg("b32"), self.reg("pred")
            self.ins(f"mov.u32 {t}, {e.raw}")
            self.ins(f"setp.ne.u32 {d}, {t}, 0")
            return d, dt
        if dt.is_float:
            d = self.r(dt)
            self.ins(f"mov.{RCLASS[dt]} {d}, {_flit(e.raw, dt)}")
            return d, dt
        return self.const(e.raw, dt), dt

    def x_Var(self, e: n.Var) -> tuple[str, D]:
        for scope in reversed(self.scopes):
            if e.name in scope:
                return scope[e.name]
        raise UnsupportedError(f"variable {e.name!r} is not defined. Fix: run ir.check(program).")

    def x_BufLen(self, e: n.BufLen) -> tuple[str, D]:
        b = self.bufs[e.buffer]
        if b.is_shared:
            return self.const(b.count, D.U32), D.U32
        return self.len[b.name], D.U32

    def x_Builtin(self, e: n.Builtin) -> tuple[str, D]:
        d, ax = self.reg("b32"), "xyz"[e.axis]
        if e.name in SREG:
            self.ins(f"mov.u32 {d}, {SREG[e.name]}.{ax}")
        elif e.name == "invocation_id":
            c, w, t = self.reg("b32"), self.reg("b32"), self.reg("b32")
            self.ins(f"mov.u32 {c}, %ctaid.{ax}")
            self.ins(f"mov.u32 {w}, %ntid.{ax}")
            self.ins(f"mov.u32 {t}, %tid.{ax}")
            self.ins(f"mad.lo.u32 {d}, {c}, {w}, {t}")
        elif e.name == "subgroup_local_id":
            self.ins(f"mov.u32 {d}, %laneid")
        else:
            self.ins(f"mov.u32 {d}, 32")
        return d, D.U32

    def address(self, b: BufferDecl, idx: str) -> tuple[str, str, str]:
        """(in-bounds predicate, address register, state space) of b[idx]."""
        p, off, a = self.reg("pred"), self.reg("b64"), self.reg("b64")
        if b.is_shared:
            self.ins(f"setp.lt.u32 {p}, {idx}, {b.count}")
            base = self.reg("b64")
            self.ins(f"mov.u64 {base}, wg_{b.name}")
            space = "shared"
        else:
            self.ins(f"setp.lt.u32 {p}, {idx}, {self.len[b.name]}")
            base = self.ptr[b.name]
            space = "global"
        self.ins(f"mul.wide.u32 {off}, {idx}, {b.dtype.nbytes}")
        self.ins(f"add.s64 {a}, {base}, {off}")
        return p, a, space

    def x_Load(self, e: n.Load) -> tuple[str, D]:
        b = self.bufs[e.buffer]
        idx, _ = (yield self.expr(e.index))
        p, a, space = self.address(b, idx)
        nc = ".nc" if b.access in (Access.READ_ONLY, Access.UNIFORM) else ""
        dt = b.dtype
        op = f"ld.{space}{nc}.{MTY[dt]}"
        if dt is D.F16:
            h, d = self.reg("h"), self.reg("f32")
            self.ins(f"mov.b16 {h}, 0")
            self.ins(f"@{p} {op} {h}, [{a}]")
            self.ins(f"cvt.f32.f16 {d}, {h}")
            return d, dt
        if dt in (D.BF16, D.BOOL):
            w = self.reg("b32")
            self.ins(f"mov.b32 {w}, 0")
            self.ins(f"@{p} {op} {w}, [{a}]")
            if dt is D.BF16:
                return self.widen_bf16(w), dt
            d = self.reg("pred")
            self.ins(f"setp.ne.u32 {d}, {w}, 0")
            return d, dt
        d = self.r(dt)
        self.ins(f"mov.{STY[RCLASS[dt]]} {d}, 0" if not dt.is_float else
                 f"mov.{RCLASS[dt]} {d}, {'0d' + '0' * 16 if dt is D.F64 else '0f00000000'}")
        self.ins(f"@{p} {op} {d}, [{a}]")
        return d, dt

    def stored(self, v: str, dt: D) -> str:
        """The register holding value v in its memory form."""
        if dt is D.BOOL:
            w = self.reg("b32")
            self.ins(f"selp.u32 {w}, 1, 0, {v}")
            return w
        if dt is D.F16:
            h = self.reg("h")
            self.ins(f"cvt.rn.f16.f32 {h}, {v}")
            return h
        if dt is D.BF16:
            w = self.reg("b32")
            self.ins(f"mov.b32 {w}, {v}")
            self.ins(f"shr.u32 {w}, {w}, 16")
            return w
        return v

    def x_Atomic(self, e: n.Atomic) -> tuple[str, D]:
        b = self.bufs[e.buffer]
        dt = b.dtype
        idx, _ = (yield self.expr(e.index))
        v, _ = (yield self.expr(e.value))
        x = (yield self.expr(e.expected))[0] if e.expected is not None else None
        p, a, space = self.address(b, idx)
        op, kind = ATOM[e.op]
        ty = {"u": "u", "b": "b", "s": "s" if dt.is_signed else "u"}[kind] + str(dt.bits)
        d = self.const(0, dt)
        args = f"{x}, {v}" if x is not None else v
        self.ins(f"@{p} atom.{space}.{op}.{ty} {d}, [{a}], {args}")
        return d, dt

    def x_Select(self, e: n.Select) -> tuple[str, D]:
        c, _ = (yield self.expr(e.cond))
        a, dt = (yield self.expr(e.a))
        b, _ = (yield self.expr(e.b))
        return self.select(c, a, b, dt), dt

    def select(self, c: str, a: str, b: str, dt: D) -> str:
        d = self.r(dt)
        if dt is D.BOOL:
            self.ins(f"mov.pred {d}, {b}")
            self.ins(f"@{c} mov.pred {d}, {a}")
        else:
            self.ins(f"selp.{STY[RCLASS[dt]]} {d}, {a}, {b}, {c}")
        return d

    def x_Fma(self, e: n.Fma) -> tuple[str, D]:
        a, dt = (yield self.expr(e.a))
        b, _ = (yield self.expr(e.b))
        c, _ = (yield self.expr(e.c))
        d = self.r(dt)
        if dt in (D.F16, D.BF16):
            return self.fma_narrow(a, b, c, dt), dt
        if dt.is_float:
            self.ins(f"fma.rn.{ITY[dt]} {d}, {a}, {b}, {c}")
            return d, dt
        self.ins(f"mad.lo.{ITY[dt]} {d}, {a}, {b}, {c}")
        return self.wrap(d, dt), dt

    def fma_narrow(self, a: str, b: str, c: str, dt: D) -> str:
        """f16/bf16 fma rounded once: a*b is exact in f64, TwoSum gives the exact a*b + c as s + e,
        and rounding s to odd (keeping e as a sticky bit) makes the final rounding to the narrow
        type the only one (an f32 fma then a second rounding would round twice)."""
        fa, fb, fc, p, s, bb, t1, t2, e = (self.reg("f64") for _ in range(9))
        for src, dst in ((a, fa), (b, fb), (c, fc)):
            self.ins(f"cvt.f64.f32 {dst}, {src}")
        self.ins(f"mul.rn.f64 {p}, {fa}, {fb}")
        self.ins(f"add.rn.f64 {s}, {p}, {fc}")
        self.ins(f"sub.rn.f64 {bb}, {s}, {p}")
        self.ins(f"sub.rn.f64 {t1}, {s}, {bb}")
        self.ins(f"sub.rn.f64 {t1}, {p}, {t1}")
        self.ins(f"sub.rn.f64 {t2}, {fc}, {bb}")
        self.ins(f"add.rn.f64 {e}, {t1}, {t2}")
        fin, inexact, towards0 = self.reg("pred"), self.reg("pred"), self.reg("pred")
        bits, sx = self.reg("b64"), self.reg("b64")
        self.ins(f"testp.finite.f64 {fin}, {s}")
        self.ins(f"setp.ne.and.f64 {inexact}, {e}, 0d0000000000000000, {fin}")
        self.ins(f"mov.b64 {bits}, {s}")
        self.ins(f"mov.b64 {sx}, {e}")
        self.ins(f"xor.b64 {sx}, {sx}, {bits}")
        self.ins(f"setp.lt.and.s64 {towards0}, {sx}, 0, {inexact}")
        self.ins(f"@{towards0} sub.s64 {bits}, {bits}, 1")
        self.ins(f"@{inexact} or.b64 {bits}, {bits}, 1")
        v = self.reg("f64")
        self.ins(f"mov.b64 {v}, {bits}")
        if dt is D.F16:
            return self.float_cast(v, D.F64, D.F16)
        # bf16: round to odd again at f32 (24 bits), then to nearest at 8 bits.
        y, back, ne, yb = self.reg("f32"), self.reg("f64"), self.reg("pred"), self.reg("b32")
        self.ins(f"cvt.rz.f32.f64 {y}, {v}")
        self.ins(f"cvt.f64.f32 {back}, {y}")
        self.ins(f"setp.neu.and.f64 {ne}, {back}, {v}, {fin}")
        self.ins(f"mov.b32 {yb}, {y}")
        self.ins(f"@{ne} or.b32 {yb}, {yb}, 1")
        y2 = self.reg("f32")
        self.ins(f"mov.b32 {y2}, {yb}")
        return self.narrow(y2, D.BF16)

    # ---- casts ---------------------------------------------------------------------------------
    def x_Cast(self, e: n.Cast) -> tuple[str, D]:
        x, src = (yield self.expr(e.a))
        return self.cast(x, src, e.dtype), e.dtype

    def cast(self, x: str, src: D, dst: D) -> str:
        if src is dst:
            return x
        if dst is D.BOOL:
            d = self.reg("pred")
            if src.is_float:
                self.ins(f"setp.neu.{ITY[src]} {d}, {x}, {'0d' + '0' * 16 if src is D.F64 else '0f00000000'}")
            else:
                self.ins(f"setp.ne.{ITY[src]} {d}, {x}, 0")
            return d
        if src is D.BOOL:
            d = self.r(dst)
            if dst.is_float:
                one, zero = (("0d3FF0000000000000", "0d" + "0" * 16) if dst is D.F64
                             else ("0f3F800000", "0f00000000"))
                self.ins(f"selp.{RCLASS[dst]} {d}, {one}, {zero}, {x}")
            else:
                self.ins(f"selp.{ITY[dst]} {d}, 1, 0, {x}")
            return d
        if src.is_int and dst.is_int:
            return self.int_cast(x, src, dst)
        if src.is_int:
            return self.int_to_float(x, src, dst)
        if dst.is_int:
            return self.float_to_int(x, src, dst)
        return self.float_cast(x, src, dst)

    def int_cast(self, x: str, src: D, dst: D) -> str:
        s64, d64 = RCLASS[src] == "b64", RCLASS[dst] == "b64"
        if s64 and d64:
            return x
        if d64:
            d = self.reg("b64")
            self.ins(f"cvt.{'s64.s32' if src.is_signed else 'u64.u32'} {d}, {x}")
            return d
        if s64:
            d = self.reg("b32")
            self.ins(f"cvt.u32.u64 {d}, {x}")
            x = d
        return self.wrap(x, dst) if dst.bits < 32 and (dst.bits < src.bits or dst.is_signed != src.is_signed or s64) else x

    def int_to_float(self, x: str, src: D, dst: D) -> str:
        sty = ITY[src]
        if dst is D.F16:
            h, d = self.reg("h"), self.reg("f32")
            self.ins(f"cvt.rn.f16.{sty} {h}, {x}")
            self.ins(f"cvt.f32.f16 {d}, {h}")
            return d
        d = self.reg("f64" if dst is D.F64 else "f32")
        self.ins(f"cvt.rn.{'f64' if dst is D.F64 else 'f32'}.{sty} {d}, {x}")
        return self.narrow(d, dst) if dst is D.BF16 else d

    def float_to_int(self, x: str, src: D, dst: D) -> str:
        fty = ITY[src]
        nan = self.reg("pred")
        self.ins(f"testp.notanumber.{fty} {nan}, {x}")
        d = self.r(dst)
        if dst.bits >= 32:
            ity = ITY[dst]
            self.ins(f"cvt.rzi.sat.{ity}.{fty} {d}, {x}")
        else:
            # Saturate to s32 first, then clamp to the narrow type's range.
            self.ins(f"cvt.rzi.sat.s32.{fty} {d}, {x}")
            self.ins(f"max.s32 {d}, {d}, {int(dst.min)}")
            self.ins(f"min.s32 {d}, {d}, {int(dst.max)}")
        out = self.r(dst)
        self.ins(f"selp.{STY[RCLASS[dst]]} {out}, 0, {d}, {nan}")
        return out

    def float_cast(self, x: str, src: D, dst: D) -> str:
        if dst is D.F64:
            d = self.reg("f64")
            self.ins(f"cvt.f64.f32 {d}, {x}")
            return d
        if src is D.F64:
            if dst is D.F16:
                h, d = self.reg("h"), self.reg("f32")
                self.ins(f"cvt.rn.f16.f64 {h}, {x}")
                self.ins(f"cvt.f32.f16 {d}, {h}")
                return d
            d = self.reg("f32")
            self.ins(f"cvt.rn.f32.f64 {d}, {x}")
            return self.narrow(d, dst)
        return self.narrow(x, dst) if dst in (D.F16, D.BF16) else x

    # ---- binary --------------------------------------------------------------------------------
    def x_BinOp(self, e: n.BinOp) -> tuple[str, D]:
        a, dt = (yield self.expr(e.a))
        b, _ = (yield self.expr(e.b))
        op = e.op
        if op in CMP:
            return self.compare(op, a, b, dt), D.BOOL
        if op in ("logical_and", "logical_or"):
            d = self.reg("pred")
            self.ins(f"{op[8:]}.pred {d}, {a}, {b}")
            return d, D.BOOL
        if dt.is_float:
            return self.fbin(op, a, b, dt), dt
        return self.ibin(op, a, b, dt), dt

    def compare(self, op: str, a: str, b: str, dt: D) -> str:
        d = self.reg("pred")
        if dt is D.BOOL:
            self.ins(f"xor.pred {d}, {a}, {b}")
            if op == "eq":
                self.ins(f"not.pred {d}, {d}")
        elif dt.is_float:
            self.ins(f"setp.{FCMP[op]}.{ITY[dt]} {d}, {a}, {b}")
        else:
            self.ins(f"setp.{CMP[op]}.{ITY[dt]} {d}, {a}, {b}")
        return d

    def fbin(self, op: str, a: str, b: str, dt: D) -> str:
        t = ITY[dt]
        d = self.r(dt)
        if op in FLOAT_ARITH:
            self.ins(f"{FLOAT_ARITH[op]}.{t} {d}, {a}, {b}")
            return self.narrow(d, dt)
        if op == "absdiff":
            self.ins(f"sub.rn.{t} {d}, {a}, {b}")
            d = self.narrow(d, dt)
            r = self.r(dt)
            self.ins(f"abs.{t} {r}, {d}")
            return r
        # min/max: PTX already returns the non-NaN operand; ±0 order is not specified, so equal
        # operands are merged bitwise (OR keeps -0 for min, AND keeps +0 for max).
        bits = "b64" if dt is D.F64 else "b32"
        eq, m, out = self.reg("pred"), self.r(dt), self.r(dt)
        self.ins(f"{op}.{t} {d}, {a}, {b}")
        self.ins(f"setp.eq.{t} {eq}, {a}, {b}")
        self.ins(f"{'or' if op == 'min' else 'and'}.{bits} {m}, {a}, {b}")
        self.ins(f"selp.{t} {out}, {m}, {d}, {eq}")
        return out

    def ibin(self, op: str, a: str, b: str, dt: D) -> str:
        t, w, bits = ITY[dt], "b64" if dt.bits == 64 else "b32", dt.bits
        d = self.r(dt)
        if op in INT_ARITH:
            self.ins(f"{INT_ARITH[op]}.{t} {d}, {a}, {b}")
            return self.wrap(d, dt) if op not in ("min", "max") else d
        if op in BITWISE:
            self.ins(f"{BITWISE[op]}.{w} {d}, {a}, {b}")
            return d
        if op in ("div", "mod"):
            return self.divmod(op, a, b, dt)
        if op == "absdiff":
            lo, hi = self.r(dt), self.r(dt)
            self.ins(f"min.{t} {lo}, {a}, {b}")
            self.ins(f"max.{t} {hi}, {a}, {b}")
            self.ins(f"sub.{t} {d}, {hi}, {lo}")
            return self.wrap(d, dt)
        if op in ("saturating_add", "saturating_sub"):
            return self.saturating(op[11:], a, b, dt)
        if op == "mul_high":
            if bits >= 32:
                self.ins(f"mul.hi.{t} {d}, {a}, {b}")
                return d
            self.ins(f"mul.lo.{t} {d}, {a}, {b}")
            r = self.r(dt)
            self.ins(f"shr.{t} {r}, {d}, {bits}")
            return self.wrap(r, dt)
        # Shifts and rotates: the amount is masked to bits - 1.
        amt = b
        if bits == 64:
            amt = self.reg("b32")
            self.ins(f"cvt.u32.u64 {amt}, {b}")
        m = self.reg("b32")
        self.ins(f"and.b32 {m}, {amt}, {bits - 1}")
        if op == "shl":
            self.ins(f"shl.{w} {d}, {a}, {m}")
            return self.wrap(d, dt)
        if op == "shr":
            self.ins(f"shr.{t} {d}, {a}, {m}")
            return d
        # rotl / rotr on the zero-extended pattern; a shift by `bits` gives 0 (PTX clamps).
        x, inv, hi, lo = self.zext(a, dt), self.reg("b32"), self.r(dt), self.r(dt)
        self.ins(f"sub.u32 {inv}, {bits}, {m}")
        first, second = (m, inv) if op == "rotl" else (inv, m)
        self.ins(f"shl.{w} {hi}, {x}, {first}")
        self.ins(f"shr.{'u64' if bits == 64 else 'u32'} {lo}, {x}, {second}")
        self.ins(f"or.{w} {d}, {hi}, {lo}")
        return self.wrap(d, dt)

    def divmod(self, op: str, a: str, b: str, dt: D) -> str:
        """Division / remainder with x/0 = x%0 = 0, MIN/-1 = MIN and MIN%-1 = 0 (PTX leaves all of
        these unspecified), without a branch."""
        t = ITY[dt]
        zero, guard, bs, q = self.reg("pred"), self.reg("pred"), self.r(dt), self.r(dt)
        self.ins(f"setp.eq.{t} {zero}, {b}, 0")
        minus1 = None
        if dt.is_signed:
            minus1 = self.reg("pred")
            self.ins(f"setp.eq.{t} {minus1}, {b}, -1")
            self.ins(f"or.pred {guard}, {zero}, {minus1}")
        else:
            guard = zero
        self.ins(f"selp.{t} {bs}, 1, {b}, {guard}")
        self.ins(f"{'div' if op == 'div' else 'rem'}.{t} {q}, {a}, {bs}")
        if minus1 is not None:
            fix = self.r(dt)
            if op == "div":
                self.ins(f"neg.{t} {fix}, {a}")
            else:
                self.ins(f"mov.{STY[RCLASS[dt]]} {fix}, 0")
            q2 = self.r(dt)
            self.ins(f"selp.{t} {q2}, {fix}, {q}, {minus1}")
            q = q2
        out = self.r(dt)
        self.ins(f"selp.{t} {out}, 0, {q}, {zero}")
        return self.wrap(out, dt)

    def saturating(self, kind: str, a: str, b: str, dt: D) -> str:
        t, d = ITY[dt], self.r(dt)
        if dt.bits < 32:
            # Exact in 32 bits; clamp to the type's range.
            self.ins(f"{kind}.s32 {d}, {a}, {b}")
            self.ins(f"max.s32 {d}, {d}, {int(dt.min)}")
            self.ins(f"min.s32 {d}, {d}, {int(dt.max)}")
            return d
        if dt is D.I32:
            self.ins(f"{kind}.sat.s32 {d}, {a}, {b}")
            return d
        s, ovf, out = self.r(dt), self.reg("pred"), self.r(dt)
        self.ins(f"{kind}.{t} {s}, {a}, {b}")
        if not dt.is_signed:
            if kind == "add":
                self.ins(f"setp.lt.{t} {ovf}, {s}, {a}")
                self.ins(f"selp.{t} {out}, {self.imm(-1, dt)}, {s}, {ovf}")
            else:
                self.ins(f"setp.lt.{t} {ovf}, {a}, {b}")
                self.ins(f"selp.{t} {out}, 0, {s}, {ovf}")
            return out
        # i64: overflow iff the sign of the result disagrees with what the operands force.
        x1, x2, neg, sat = self.r(dt), self.r(dt), self.reg("pred"), self.r(dt)
        if kind == "add":
            self.ins(f"xor.b64 {x1}, {s}, {a}")
            self.ins(f"xor.b64 {x2}, {s}, {b}")
        else:
            self.ins(f"xor.b64 {x1}, {a}, {b}")
            self.ins(f"xor.b64 {x2}, {a}, {s}")
        self.ins(f"and.b64 {x1}, {x1}, {x2}")
        self.ins(f"setp.lt.s64 {ovf}, {x1}, 0")
        self.ins(f"setp.lt.s64 {neg}, {a}, 0")
        self.ins(f"selp.s64 {sat}, {self.imm(int(dt.min), dt)}, {self.imm(int(dt.max), dt)}, {neg}")
        self.ins(f"selp.s64 {out}, {sat}, {s}, {ovf}")
        return out

    # ---- unary ---------------------------------------------------------------------------------
    def x_UnOp(self, e: n.UnOp) -> tuple[str, D]:
        a, dt = (yield self.expr(e.a))
        op = e.op
        if op == "not":
            d = self.reg("pred")
            self.ins(f"not.pred {d}, {a}")
            return d, D.BOOL
        if op in FTEST:
            d = self.reg("pred")
            self.ins(f"testp.{FTEST[op]}.{ITY[dt]} {d}, {a}")
            return d, D.BOOL
        if dt.is_float:
            return self.funary(op, a, dt), dt
        return self.iunary(op, a, dt)

    def funary(self, op: str, a: str, dt: D) -> str:
        t, d = ITY[dt], self.r(dt)
        if op in ("neg", "abs"):
            self.ins(f"{op}.{t} {d}, {a}")
            return d
        if op in FROUND:
            self.ins(f"cvt.{FROUND[op]}.{t}.{t} {d}, {a}")
            return d
        if op == "sqrt":
            self.ins(f"sqrt.rn.{t} {d}, {a}")
        elif op == "recip":
            self.ins(f"rcp.rn.{t} {d}, {a}")
        elif op == "rsqrt":
            s = self.r(dt)
            self.ins(f"sqrt.rn.{t} {s}, {a}")
            self.ins(f"rcp.rn.{t} {d}, {self.narrow(s, dt)}")
        elif op == "sign":
            gt, lt, s = self.reg("pred"), self.reg("pred"), self.r(dt)
            one, m1, zero = (("0d3FF0000000000000", "0dBFF0000000000000", "0d" + "0" * 16)
                             if dt is D.F64 else ("0f3F800000", "0fBF800000", "0f00000000"))
            self.ins(f"setp.gt.{t} {gt}, {a}, {zero}")
            self.ins(f"setp.lt.{t} {lt}, {a}, {zero}")
            self.ins(f"selp.{t} {s}, {one}, {a}, {gt}")
            self.ins(f"selp.{t} {d}, {m1}, {s}, {lt}")
            return d
        else:
            name = mathlib.symbol(op, t)
            self.externs.add(name)
            self.lines.append("\t{")
            self.lines.append(f"\t.param .b{t[1:]} param0;")
            self.lines.append(f"\t.param .b{t[1:]} retval0;")
            self.ins(f"st.param.{t} [param0], {a}")
            self.ins(f"call (retval0), {name}, (param0)")
            self.ins(f"ld.param.{t} {d}, [retval0]")
            self.lines.append("\t}")
        return self.narrow(d, dt)

    def iunary(self, op: str, a: str, dt: D) -> tuple[str, D]:
        t, w, bits = ITY[dt], "b64" if dt.bits == 64 else "b32", dt.bits
        if op in ("popcount", "clz", "ctz"):
            x, d = self.zext(a, dt), self.reg("b32")
            if op == "popcount":
                self.ins(f"popc.{w} {d}, {x}")
            elif op == "clz":
                self.ins(f"clz.{w} {d}, {x}")
                if bits < 32:
                    self.ins(f"sub.u32 {d}, {d}, {32 - bits}")
            else:
                r = self.r(dt)
                self.ins(f"brev.{w} {r}, {x}")
                self.ins(f"clz.{w} {d}, {r}")
                if bits < 32:
                    self.ins(f"min.u32 {d}, {d}, {bits}")
            return d, D.U32
        d = self.r(dt)
        if op == "bitnot":
            self.ins(f"not.{w} {d}, {a}")
            return self.wrap(d, dt), dt
        if op == "reverse_bits":
            self.ins(f"brev.{w} {d}, {self.zext(a, dt)}")
            if bits < 32:
                r = self.r(dt)
                self.ins(f"shr.u32 {r}, {d}, {32 - bits}")
                return self.wrap(r, dt), dt
            return d, dt
        if op == "neg":
            self.ins(f"neg.{'s64' if bits == 64 else 's32'} {d}, {a}")
            return self.wrap(d, dt), dt
        if op == "abs":
            if not dt.is_signed:
                return a, dt
            p, ng = self.reg("pred"), self.r(dt)
            self.ins(f"setp.lt.{t} {p}, {a}, 0")
            self.ins(f"neg.{t} {ng}, {a}")
            self.ins(f"selp.{t} {d}, {ng}, {a}, {p}")
            return self.wrap(d, dt), dt
        if op == "sign":
            if not dt.is_signed:
                p = self.reg("pred")
                self.ins(f"setp.ne.{t} {p}, {a}, 0")
                self.ins(f"selp.{t} {d}, 1, 0, {p}")
                return d, dt
            gt, lt, s = self.reg("pred"), self.reg("pred"), self.r(dt)
            self.ins(f"setp.gt.{t} {gt}, {a}, 0")
            self.ins(f"setp.lt.{t} {lt}, {a}, 0")
            self.ins(f"selp.{t} {s}, 1, 0, {gt}")
            self.ins(f"selp.{t} {d}, -1, {s}, {lt}")
            return d, dt
        raise UnsupportedError(f"unary {op} on {dt} has no PTX lowering. Fix: run ir.check(program).")

    # ---- subgroups -----------------------------------------------------------------------------
    def x_SubgroupBallot(self, e: n.SubgroupBallot) -> tuple[str, D]:
        c, _ = (yield self.expr(e.cond))
        d = self.reg("b32")
        self.ins(f"vote.sync.ballot.b32 {d}, {c}, {self.lane_mask}")
        return d, D.U32

    def shfl(self, v: str, lane: str) -> str:
        d = self.reg("b32")
        self.ins(f"shfl.sync.idx.b32 {d}, {v}, {lane}, 31, {self.lane_mask}")
        return d

    def x_SubgroupShuffle(self, e: n.SubgroupShuffle) -> tuple[str, D]:
        v, dt = (yield self.expr(e.value))
        lane, _ = (yield self.expr(e.lane))
        ok, src = self.reg("pred"), self.reg("b32")
        # Lanes >= 32 or past the warp's last existing lane read 0 (hardware would wrap or give
        # an undefined value); such lanes shuffle from themselves and are replaced by 0.
        self.ins(f"setp.lt.u32 {ok}, {lane}, {self.lane_count}")
        lid = self.reg("b32")
        self.ins(f"mov.u32 {lid}, %laneid")
        self.ins(f"selp.b32 {src}, {lane}, {lid}, {ok}")
        rc = RCLASS[dt]
        if rc == "pred":
            w = self.reg("b32")
            self.ins(f"selp.u32 {w}, 1, 0, {v}")
            s, d = self.shfl(w, src), self.reg("pred")
            self.ins(f"setp.ne.and.u32 {d}, {s}, 0, {ok}")
            return d, dt
        if rc in ("b64", "f64"):
            lo, hi = self.reg("b32"), self.reg("b32")
            self.ins(f"mov.b64 {{{lo}, {hi}}}, {v}")
            slo, shi = self.shfl(lo, src), self.shfl(hi, src)
            self.ins(f"selp.b32 {slo}, {slo}, 0, {ok}")
            self.ins(f"selp.b32 {shi}, {shi}, 0, {ok}")
            d = self.r(dt)
            self.ins(f"mov.b64 {d}, {{{slo}, {shi}}}")
            return d, dt
        s = self.shfl(v, src)
        d = self.r(dt)
        self.ins(f"selp.b32 {s}, {s}, 0, {ok}")
        self.ins(f"mov.b32 {d}, {s}")
        return d, dt

    def x_SubgroupAdd(self, e: n.SubgroupAdd) -> tuple[str, D]:
        v, dt = (yield self.expr(e.value))
        d = self.reg("b32")
        if self.sm >= 80:
            self.ins(f"redux.sync.add.{ITY[dt]} {d}, {v}, {self.lane_mask}")
            return d, dt
        # Tree reduction towards lane 0 over the existing lanes, then a broadcast.
        lid, acc = self.reg("b32"), self.reg("b32")
        self.ins(f"mov.u32 {lid}, %laneid")
        self.ins(f"mov.b32 {acc}, {v}")
        for off in (16, 8, 4, 2, 1):
            t, src, ok = self.reg("b32"), self.reg("b32"), self.reg("pred")
            self.ins(f"shfl.sync.down.b32 {t}, {acc}, {off}, 31, {self.lane_mask}")
            self.ins(f"add.u32 {src}, {lid}, {off}")
            self.ins(f"setp.lt.u32 {ok}, {src}, {self.lane_count}")
            self.ins(f"selp.b32 {t}, {t}, 0, {ok}")
            self.ins(f"add.u32 {acc}, {acc}, {t}")
        self.ins(f"shfl.sync.idx.b32 {d}, {acc}, 0, 31, {self.lane_mask}")
        return d, dt

    # ---- statements ----------------------------------------------------------------------------
    def body(self, stmts, scope: bool = True) -> None:
        if scope:
            self.scopes.append({})
        for s in stmts:
            (yield self.stmt(s))
        if scope:
            self.scopes.pop()

    def stmt(self, s: n.Node):
        if not isinstance(s, n.Block):
            self.comment(_head(s))
        yield getattr(self, "s_" + type(s).__name__)(s)

    def s_Let(self, s: n.Let) -> None:
        v, dt = (yield self.expr(s.value))
        d = self.r(dt)
        self.ins(f"mov.{'pred' if dt is D.BOOL else STY[RCLASS[dt]]} {d}, {v}")
        self.scopes[-1][s.name] = (d, dt)

    def s_Assign(self, s: n.Assign) -> None:
        v, dt = (yield self.expr(s.value))
        d, _ = self.x_Var(n.Var(s.name))
        self.ins(f"mov.{'pred' if dt is D.BOOL else STY[RCLASS[dt]]} {d}, {v}")

    def s_Store(self, s: n.Store) -> None:
        b = self.bufs[s.buffer]
        idx, _ = (yield self.expr(s.index))
        v, dt = (yield self.expr(s.value))
        w = self.stored(v, dt)
        p, a, space = self.address(b, idx)
        self.ins(f"@{p} st.{space}.{MTY[dt]} [{a}], {w}")

    def s_If(self, s: n.If) -> None:
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

    def s_Loop(self, s: n.Loop) -> None:
        start, _ = (yield self.expr(s.start))
        end, _ = (yield self.expr(s.end))
        i, stop = self.reg("b32"), self.reg("b32")
        self.ins(f"mov.b32 {i}, {start}")
        self.ins(f"mov.b32 {stop}, {end}")
        top, done = self.label("loop"), self.label("endloop")
        p = self.reg("pred")
        self.place(top)
        self.ins(f"setp.ge.u32 {p}, {i}, {stop}")
        self.ins(f"@{p} bra {done}")
        self.scopes.append({s.var: (i, D.U32)})
        (yield self.body(s.body))
        self.scopes.pop()
        self.ins(f"add.u32 {i}, {i}, 1")
        self.ins(f"bra.uni {top}")
        self.place(done)

    def s_Barrier(self, s: n.Barrier) -> None:
        if s.scope == "workgroup":
            self.ins("bar.sync 0")
            return
        # Every thread calls the grid barrier (ptx_templates/grid_barrier.ptx); when it reports a
        # timeout the whole block leaves, and the host reads the error word.
        self.externs.add("vyre_grid_barrier")
        ok, p = self.reg("b32"), self.reg("pred")
        self.lines.append("\t{")
        self.lines.append("\t.param .b64 gs;")
        self.lines.append("\t.param .b64 gt;")
        self.lines.append("\t.param .b32 gok;")
        self.ins(f"st.param.b64 [gs], {self.grid_state}")
        self.ins(f"st.param.b64 [gt], {GRID_BARRIER_TIMEOUT_NS}")
        self.ins("call (gok), vyre_grid_barrier, (gs, gt)")
        self.ins(f"ld.param.b32 {ok}, [gok]")
        self.lines.append("\t}")
        self.ins(f"setp.eq.u32 {p}, {ok}, 0")
        self.ins(f"@{p} ret")

    def s_Return(self, s: n.Return) -> None:
        self.ins("ret")

    def s_Block(self, s: n.Block) -> None:
        (yield self.body(s.body))

    # ---- kernel --------------------------------------------------------------------------------
    def prologue(self) -> None:
        if "grid_sync" in self.p.capabilities:
            raw, self.grid_state = self.reg("b64"), self.reg("b64")
            self.ins(f"ld.param.u64 {raw}, [{GRID_STATE}]")
            self.ins(f"cvta.to.global.u64 {self.grid_state}, {raw}")
        for b in self.p.bound_buffers:
            raw, ptr, ln = self.reg("b64"), self.reg("b64"), self.reg("b32")
            self.ins(f"ld.param.u64 {raw}, [{b.name}_ptr]")
            self.ins(f"cvta.to.global.u64 {ptr}, {raw}")
            self.ins(f"ld.param.u32 {ln}, [{b.name}_len]")
            self.ptr[b.name], self.len[b.name] = ptr, ln
        shared = _shared_layout(self.p)
        needs_lanes = "subgroup" in self.p.capabilities
        if not shared and not needs_lanes:
            return
        # Linear thread index l and block size T.
        l, T, t = self.reg("b32"), self.reg("b32"), self.reg("b32")
        self.ins(f"mov.u32 {l}, %tid.z")
        self.ins(f"mov.u32 {t}, %ntid.y")
        self.ins(f"mov.u32 {T}, %tid.y")
        self.ins(f"mad.lo.u32 {l}, {l}, {t}, {T}")
        self.ins(f"mov.u32 {t}, %ntid.x")
        self.ins(f"mov.u32 {T}, %tid.x")
        self.ins(f"mad.lo.u32 {l}, {l}, {t}, {T}")
        self.ins(f"mov.u32 {T}, %ntid.y")
        self.ins(f"mul.lo.u32 {T}, {T}, {t}")
        self.ins(f"mov.u32 {t}, %ntid.z")
        self.ins(f"mul.lo.u32 {T}, {T}, {t}")
        if needs_lanes:
            self.comment("member mask: the existing lanes of this warp (the last warp may be partial)")
            cnt, mask = self.reg("b32"), self.reg("b32")
            self.ins(f"and.b32 {cnt}, {l}, 0xFFFFFFE0")
            self.ins(f"sub.u32 {cnt}, {T}, {cnt}")
            self.ins(f"min.u32 {cnt}, {cnt}, 32")
            self.ins(f"shl.b32 {mask}, 1, {cnt}")
            self.ins(f"sub.u32 {mask}, {mask}, 1")
            self.lane_mask, self.lane_count = mask, cnt
        if shared:
            self.comment("zero the workgroup buffers, then wait for the whole block")
            for b, size in shared:
                i, p, a, base, off = (self.reg("b32"), self.reg("pred"), self.reg("b64"),
                                      self.reg("b64"), self.reg("b64"))
                top, done = self.label("zero"), self.label("zeroed")
                self.ins(f"mov.u64 {base}, wg_{b.name}")
                self.ins(f"mov.u32 {i}, {l}")
                self.place(top)
                self.ins(f"setp.ge.u32 {p}, {i}, {size // 4}")
                self.ins(f"@{p} bra {done}")
                self.ins(f"mul.wide.u32 {off}, {i}, 4")
                self.ins(f"add.s64 {a}, {base}, {off}")
                self.ins(f"st.shared.u32 [{a}], 0")
                self.ins(f"add.u32 {i}, {i}, {T}")
                self.ins(f"bra.uni {top}")
                self.place(done)
            self.ins("bar.sync 0")

    def render(self) -> str:
        self.prologue()
        drive(self.body(self.p.entry, scope=False))
        self.lines.append("")
        self.ins("ret")
        a = abi(self.p, workgroup=self.workgroup)
        wg = a.workgroup_size
        regs = "\n".join(f"\t.reg {BANKS[k][1]} \t{BANKS[k][0]}<{c + 1}>;"
                         for k, c in self.count.items() if c)
        shared = "\n".join(f"\t.shared .align 8 .b8 wg_{b.name}[{size}];  // {b}"
                           for b, size in _shared_layout(self.p))
        header = [f"// vyre-numba PTX for program {self.p.name!r} (digest {self.p.digest()[:16]})",
                  f"// workgroup {wg if wg else 'auto'}; cooperative={self.cooperative}"]
        return templates.load(
            "module",
            comment="\n".join(header),
            version=PTX_VERSION[self.sm],
            target=f"sm_{self.sm}",
            externs="".join(f"\n{GRID_BARRIER_DECL if x == 'vyre_grid_barrier' else mathlib.extern_decl(x)}"
                            for x in sorted(self.externs)),
            entry=a.entry,
            params=",\n".join(f"\t.param {q.ptx_type} {q.name}" for q in a.params),
            directives=f"\n.reqntid {wg[0]}, {wg[1]}, {wg[2]}" if wg else "",
            registers=regs,
            shared=shared,
            body="\n".join(self.lines),
        )


def _head(s: n.Node, limit: int = 120) -> str:
    """A one-line summary of a statement for the PTX comment above its code (bounded, so deep
    programs do not render whole subtrees at every level)."""
    match s:
        case n.If(cond):
            text = f"if {n.render_expr(cond)}"
        case n.Loop(v, start, end):
            text = f"for {v} in {n.render_expr(start)}..{n.render_expr(end)}"
        case _:
            text = n.render_stmt(s, 0)[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def emit(program: Program, *, sm: int = 90, workgroup: tuple[int, int, int] | str | None = None,
         cooperative: bool = False) -> str:
    """PTX text of `program` as one kernel for target `sm_<sm>` (see the module docstring for the
    ABI). Raises IRValidationError for an invalid program and UnsupportedError for what the
    target cannot run."""
    ir.check(program)
    if sm not in PTX_VERSION:
        known = ", ".join(str(s) for s in PTX_VERSION)
        raise UnsupportedError(f"sm_{sm} is not a target the PTX emitter knows (known: {known}). "
                               "Fix: pass sm= one of those, e.g. the device's compute capability.")
    if "grid_sync" in program.capabilities and not cooperative:
        raise UnsupportedError(f"program {program.name!r} has barrier('grid'), which needs every workgroup "
                               "resident at once. Fix: dispatch it with DispatchConfig(cooperative=True).")
    return _Emitter(program, sm, workgroup, cooperative).render()
