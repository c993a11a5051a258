"""PTX emitter, assembler and templates: everything the IR can say is emitted and assembled with
nvJitLink for sm_80 and sm_90 (no GPU needed)."""
from __future__ import annotations

import re

import numpy as np

import pytest

import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.errors import CompileError, TemplateError, UnsupportedError, VyreError
from vyre_numba import ptx
from vyre_numba.ir import DataType as D

SMS = (80, 90)
INTS = [D.U8, D.U16, D.U32, D.U64, D.I8, D.I16, D.I32, D.I64]
FLOATS = [D.F16, D.BF16, D.F32, D.F64]
ALL = INTS + [D.BOOL] + FLOATS
FLOAT_NON_TRANSCENDENTAL = [op for op in ir.FLOAT_UNOPS
                            if op not in ("exp", "exp2", "log", "log2", "sin", "cos", "tan")]

i = ir.var("i")


def assemble_all(program: ir.Program, sms=SMS, **kw) -> str:
    """PTX of `program` for every target, each assembled; the program as written unless
    optimize=True is passed (these tests are of the emitter, the optimizer has its own)."""
    kw.setdefault("optimize", False)
    text = ""
    for sm in sms:
        text = ptx.emit(program, sm=sm, **kw)
        cubin = ptx.assemble(text, sm=sm)
        assert cubin[:4] == b"\x7fELF"
    return text


def ops_program(dt: D) -> ir.Program:
    """Every binary and unary operation that applies to dt, each stored to its own slot."""
    a, b = ir.load("a", i), ir.load("b", i)
    body, k, f = [ir.let("i", ir.gid(0))], 0, 0

    def out(e):
        nonlocal k
        body.append(ir.store("out", ir.u32(k) + i, e))
        k += 1

    def flag(e):
        nonlocal f
        body.append(ir.store("flags", ir.u32(f) + i, e))
        f += 1

    for op in ir.ARITH_BINOPS:
        if op == "mod" and dt.is_float:
            continue
        out(ir.binary(op, a, b))
    if dt.is_int:
        for op in ir.INT_BINOPS:
            out(ir.binary(op, a, b))
        for op in ir.INT_UNOPS:
            e = ir.unary(op, a)
            out(e if op in ("bitnot", "reverse_bits") else ir.cast(e, dt))
    for op in ir.CMP_BINOPS:
        flag(ir.binary(op, a, b))
    for op in ir.NUM_UNOPS:
        out(ir.unary(op, a))
    if dt.is_float:
        for op in FLOAT_NON_TRANSCENDENTAL:
            out(ir.unary(op, a))
        for op in ir.FLOAT_PRED_UNOPS:
            flag(ir.unary(op, a))
    out(ir.fma(a, b, ir.load("a", i + 1)))
    out(ir.select(a < b, a, b))
    out(ir.lit(1, dt) if not dt.is_float else ir.lit(-1.5, dt))
    return ir.Program([ir.BufferDecl.read("a", 0, dt), ir.BufferDecl.uniform("b", 1, dt),
                       ir.BufferDecl.output("out", 2, dt), ir.BufferDecl.output("flags", 3, "bool")],
                      128, body, name=f"ops_{dt}")


@pytest.mark.parametrize("dt", INTS + FLOATS, ids=str)
def test_every_op_on_every_type_assembles(dt):
    text = assemble_all(ops_program(dt))
    assert ".approx" not in text and ".ftz" not in text
    assert "// out[(0u32 + i)] = (a[i] + b[i])" in text
    optimized = assemble_all(ops_program(dt), optimize=True)
    assert ".approx" not in optimized and "// out[i] = (_v" in optimized


def test_bool_ops():
    a, b = ir.load("a", i), ir.load("b", i)
    body = [ir.let("i", ir.gid(0))]
    for k, e in enumerate([ir.logical_and(a, b), ir.logical_or(a, b), ir.not_(a), a.eq(b), a.ne(b),
                           ir.select(a, b, ir.boolean(True)), ir.boolean(False)]):
        body.append(ir.store("out", ir.u32(k) + i, e))
    text = assemble_all(ir.Program([ir.BufferDecl.read("a", 0, "bool"), ir.BufferDecl.read("b", 1, "bool"),
                                    ir.BufferDecl.output("out", 2, "bool")], 64, body))
    assert text.count("st.global") >= 7, "every bool result is stored as a 32-bit word"


def test_every_cast_pair():
    bufs = [ir.BufferDecl.read(f"in_{t}", k, t) for k, t in enumerate(ALL)]
    bufs += [ir.BufferDecl.output(f"out_{t}", 100 + k, t) for k, t in enumerate(ALL)]
    body = [ir.let("i", ir.gid(0))]
    for k, src in enumerate(ALL):
        for dst in ALL:
            body.append(ir.store(f"out_{dst}", ir.u32(k) + i, ir.cast(ir.load(f"in_{src}", i), dst)))
    text = assemble_all(ir.Program(bufs, 256, body, name="casts"))
    assert "cvt.rzi.sat.s32.f32" in text and "cvt.rn.bf16.f32" in text


def test_transcendentals_link_math_modules():
    body = [ir.let("i", ir.gid(0))]
    for t in FLOATS:
        for k, op in enumerate(("exp", "exp2", "log", "log2", "sin", "cos", "tan")):
            body.append(ir.store(f"o_{t}", ir.u32(k) + i, ir.unary(op, ir.load(f"x_{t}", i))))
    bufs = [ir.BufferDecl.read(f"x_{t}", k, t) for k, t in enumerate(FLOATS)]
    bufs += [ir.BufferDecl.output(f"o_{t}", 10 + k, t) for k, t in enumerate(FLOATS)]
    text = assemble_all(ir.Program(bufs, 64, body, name="transcendental"))
    assert ".approx" not in text
    assert ".extern .func (.param .b32 func_retval0) vyre_math_sin_f32" in text
    assert ".extern .func (.param .b64 func_retval0) vyre_math_tan_f64" in text
    sources = ptx.link_sources(text)
    assert len(sources) == 15 and sources[0] == text
    assert all(".visible .func" in s for s in sources[1:])
    assert "cvt.rn.f32.f64" in ptx.mathlib.module("vyre_math_sin_f32")


def atomics_program() -> ir.Program:
    body = [ir.let("i", ir.gid(0)), ir.let("l", ir.lid(0))]
    bufs = []
    for k, t in enumerate([D.U32, D.I32, D.U64, D.I64]):
        bufs += [ir.BufferDecl.read_write(f"g_{t}", k, t), ir.BufferDecl.workgroup(f"s_{t}", 64, t),
                 ir.BufferDecl.output(f"old_{t}", 10 + k, t)]
        for buf in (f"g_{t}", f"s_{t}"):
            for j, op in enumerate(ir.ATOMIC_OPS):
                one = ir.lit(1, t)
                expected = ir.lit(0, t) if op == "compare_exchange" else None
                e = ir.atomic(op, buf, i % 7, one, expected)
                body.append(ir.store(f"old_{t}", ir.u32(j) + i, e))
        body.append(ir.barrier("workgroup"))
        body.append(ir.store(f"g_{t}", i, ir.load(f"s_{t}", ir.var("l"))))
    return ir.Program(bufs, 64, body, name="atomics")


def test_atomics_global_and_shared():
    text = assemble_all(atomics_program())
    for frag in ("atom.global.add.u32", "atom.global.add.u64", "atom.shared.min.s64",
                 "atom.global.max.u32", "atom.shared.cas.b32", "atom.global.exch.b64",
                 "atom.shared.xor.b64", "atom.global.min.s32"):
        assert frag in text, frag
    # Predicated (old value 0 out of bounds), never a branch around the access.
    assert re.search(r"@%p\d+ atom\.global\.add\.u32", text)


def subgroup_program() -> ir.Program:
    body = [ir.let("i", ir.gid(0)), ir.let("lane", ir.subgroup_local_id()),
            ir.store("ballot", i, ir.subgroup_ballot(ir.load("u32", i) > 3)),
            ir.store("sum_u", i, ir.subgroup_add(ir.load("u32", i))),
            ir.store("sum_i", i, ir.subgroup_add(ir.load("i32", i))),
            ir.store("ballot", i + 1000, ir.subgroup_size())]
    bufs = [ir.BufferDecl.output("ballot", 0, "u32"), ir.BufferDecl.output("sum_u", 1, "u32"),
            ir.BufferDecl.output("sum_i", 2, "i32")]
    for k, t in enumerate(ALL):
        bufs += [ir.BufferDecl.read(t.value, 10 + k, t), ir.BufferDecl.output(f"sh_{t}", 30 + k, t)]
        src = (ir.var("lane") + 1) % 32
        body.append(ir.store(f"sh_{t}", i, ir.subgroup_shuffle(ir.load(t.value, i), src)))
    return ir.Program(bufs, (48, 2), body, name="subgroups")


def test_subgroup_ops():
    p = subgroup_program()
    text = assemble_all(p)
    assert "vote.sync.ballot.b32" in text and "shfl.sync.idx.b32" in text
    assert "redux.sync.add.u32" in text and "redux.sync.add.s32" in text
    old = ptx.emit(p, sm=75)
    assert "redux" not in old and "shfl.sync.down.b32" in old
    ptx.assemble(old, sm=75)


def control_program() -> ir.Program:
    x = ir.var("x")
    return ir.Program(
        [ir.BufferDecl.read("a", 0, "u32"), ir.BufferDecl.read_write("acc", 1, "f32"),
         ir.BufferDecl.output("h", 2, "f16"), ir.BufferDecl.output("bh", 3, "bf16"),
         ir.BufferDecl.output("flag", 4, "bool"), ir.BufferDecl.workgroup("tile", 96, "f32"),
         ir.BufferDecl.workgroup("bytes", 5, "u8")],
        (8, 4, 2),
        [ir.let("i", ir.gid(0) + ir.gid(1) * 1000 + ir.gid(2) * 7 + ir.wgid(2) + ir.num_workgroups(1)),
         ir.let("x", ir.f32(0.0)),
         ir.if_(i >= ir.buf_len("a"), [ir.return_()]),
         ir.loop("k", 0, ir.load("a", i), [
             ir.if_((ir.var("k") % 2).eq(0),
                    [ir.assign("x", x + ir.cast(ir.var("k"), "f32"))],
                    [ir.assign("x", x - 1.0), ir.block(ir.let("y", x * 2), ir.assign("x", ir.var("y")))]),
         ]),
         ir.store("tile", ir.lid(0) + ir.lid(1) * 8, x),
         ir.store("bytes", ir.lid(0), ir.u8(200) + ir.u8(100)),
         ir.barrier("workgroup"),
         ir.store("acc", i, ir.load("acc", i) + ir.load("tile", ir.lid(0)) + ir.cast(ir.buf_len("tile"), "f32")),
         ir.store("h", i, ir.cast(x, "f16") * ir.f16(0.5)),
         ir.store("bh", i, ir.cast(x, "bf16") + ir.load("bh", i)),
         ir.store("flag", i, ir.isnan(x).ne(ir.load("flag", i))),
         ir.loop("z", 5, 2, [ir.barrier("workgroup")])],
        name="control")


def test_a_workgroup_array_never_takes_a_parameters_name():
    """Regression (a red-team): a bound buffer `wg_s` has the parameter `wg_s_ptr`, and a
    workgroup buffer `s_ptr` was the shared array `wg_s_ptr`: ptxas refused the duplicate."""
    B = ir.BufferDecl
    for shared in ("s_ptr", "s_len"):
        p = ir.Program([B.read_write("wg_s", 0, "u32"), B.workgroup(shared, 4, "u32")], 4,
                       [ir.store(shared, ir.lid(0), ir.load("wg_s", ir.lid(0))),
                        ir.store("wg_s", ir.lid(0), ir.load(shared, ir.lid(0)) + 1)])
        assert ir.validate(p) == []
        assert f"wg${shared}[16]" in assemble_all(p)


def test_bound_buffers_past_the_parameter_space_are_refused_before_ptx():
    """Regression (a red-team): 363 bound buffers validated, then nvJitLink refused the kernel's
    4,360 bytes of parameters, 8-byte aligned (4,352 at most in the PTX versions emitted); 362 assemble."""
    B = ir.BufferDecl

    def program(k: int, grid: bool = False) -> ir.Program:
        body = [ir.store("b0", ir.gid(0), k)] + ([ir.barrier("grid")] if grid else [])
        return ir.Program([B.read_write(f"b{j}", j, "u32") for j in range(k)], 32, body)

    assemble_all(program(362), sms=(80,))
    assemble_all(program(362, True), sms=(80,), cooperative=True)  # and the grid barrier's state: 4,352 bytes
    for k, grid, need in ((363, False, 4360), (363, True, 4368)):
        with pytest.raises(vn.IRValidationError, match=rf"{k} bound buffers take {need} bytes of kernel parameters "
                                                        r"\(a pointer and a length each\), over the 4352-byte limit\. "
                                                        r"Fix: bind fewer buffers"):
            ir.check(program(k, grid))


def test_control_flow_barriers_workgroup_buffers_and_narrow_buffers():
    text = assemble_all(control_program())
    assert "bar.sync\t0;" in text and "\tret;" in text
    assert ".shared .align 8 .b8 wg$tile[384]" in text and "wg$bytes[8]" in text
    assert "ld.global.u16" in text and "st.global.b16" in text and "st.global.u16" in text
    assert "// for k in 0u32..a[i]" in text and "// if (i >= len(a))" in text


def test_sm70_text_avoids_newer_instructions():
    for p in (ops_program(D.BF16), control_program(), subgroup_program()):
        text = ptx.emit(p, sm=70)
        assert ".target sm_70" in text and ".version 6.0" in text
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
        assert ".bf16" not in code and "redux" not in code
    assert "cvt.rn.bf16.f32" in ptx.emit(ops_program(D.BF16), sm=80)


def test_abi_and_param_order():
    p = ir.Program([ir.BufferDecl.output("z", 2, "u32"), ir.BufferDecl.read("x", 0, "f64"),
                    ir.BufferDecl.workgroup("w", 32, "u32"), ir.BufferDecl.read_write("y", 1, "i8")],
                   (16, 2), [ir.store("z", ir.gid(0), ir.buf_len("x"))], name="abi_probe")
    a = ptx.abi(p)  # of the optimized program, as emit compiles it: the unread workgroup buffer is gone
    assert a.entry == "abi_probe" and a.workgroup_size == (16, 2, 1) and a.shared_bytes == 0
    assert ptx.abi(p, optimize=False).shared_bytes == 128 and ".shared" not in ptx.emit(p)
    assert [(q.name, q.ptx_type, q.buffer, q.kind) for q in a.params] == [
        ("x_ptr", ".u64", "x", "ptr"), ("y_ptr", ".u64", "y", "ptr"), ("z_ptr", ".u64", "z", "ptr"),
        ("x_len", ".u32", "x", "len"), ("y_len", ".u32", "y", "len"), ("z_len", ".u32", "z", "len")]
    text = assemble_all(p)
    params = re.findall(r"\.param (\.u\d+) (\w+)", text.split(".visible .entry abi_probe(")[1])
    assert params == [(q.ptx_type, q.name) for q in a.params]
    assert ".reqntid 16, 2, 1" in text
    # buf_len reads the count parameter.
    assert "ld.param.u32\t%r1, [x_len]" in text


def test_abi_describes_what_emit_compiles_when_the_optimizer_removes_a_grid_barrier():
    """Regression (a red-team): abi described the program as written (the workgroup bytes) while
    emit compiled the optimized one without them; the CLI's manifest too. The grid-state parameter
    stays (a review): the launches of a program written with a grid barrier pass its state."""
    p = ir.Program([ir.BufferDecl.read("a", 0, "f32"), ir.BufferDecl.output("o", 1, "f32"),
                    ir.BufferDecl.workgroup("w", 16, "f32")], 32,
                   [ir.let("i", ir.gid(0)), ir.store("o", ir.var("i"), ir.load("a", ir.var("i"))), ir.return_(),
                    ir.barrier("grid")], name="gone")
    text = ptx.emit(p, cooperative=True)
    declared = re.findall(r"\.param \.u\d+ (\w+)", text.split(".visible .entry gone(")[1].split(")")[0])
    assert declared == [q.name for q in ptx.abi(p).params] and ptx.abi(p).shared_bytes == 0
    assert "grid_sync" not in p.optimized().capabilities and "vyre_grid_barrier" not in text
    assert declared[-1] == "vyre_grid_state" == [q.name for q in ptx.abi(p, optimize=False).params][-1]


def test_grid_barrier_needs_a_cooperative_launch_and_links_the_template():
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64,
                   [ir.store("o", ir.gid(0), 1), ir.barrier("grid"), ir.store("o", ir.gid(0), 2)])
    for call in (lambda: ptx.emit(p), lambda: p.ptx()):  # the Fix named DispatchConfig, which neither takes
        with pytest.raises(UnsupportedError, match=r"Fix: pass cooperative=True \(ptx.emit\(p, cooperative=True\), "
                                                   r"p.ptx\(cooperative=True\)\)"):
            call()
    text = assemble_all(p, cooperative=True)
    assert "(retval0), vyre_grid_barrier, (param0, param1)" in text and "vyre_grid_state" in text
    a = ptx.abi(p)
    assert a.params[-1].kind == "grid_state" and a.params[-1].ptx_type == ".u64"
    assert "vyre_grid_barrier" in "".join(ptx.link_sources(text))


def test_unknown_target_and_old_assemble_target():
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)])
    with pytest.raises(UnsupportedError, match="Fix:"):
        ptx.emit(p, sm=61)
    with pytest.raises(UnsupportedError, match="Fix:"):
        ptx.assemble(ptx.emit(p, sm=70), sm=70)


def test_assembling_for_an_sm_below_the_ptx_target_says_which_to_use():
    """Regression (a red-team): it said to correct the PTX or report an emitter bug."""
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)])
    with pytest.raises(CompileError, match=r"targets sm_90, past sm_80\. Fix: assemble with sm=90 or higher"):
        ptx.assemble(ptx.emit(p, sm=90), sm=80)
    assert ptx.assemble(ptx.emit(p, sm=110), sm=110)  # CUDA 13's name for sm_101


def test_an_sm_the_linker_does_not_know_is_said_so(monkeypatch):
    import cuda.core

    def unsupported(*objs, options=None):
        raise RuntimeError("ERROR_UNSUPPORTED_ARCH (17)")  # what CUDA 13's nvJitLink answers for sm_101

    monkeypatch.setattr(cuda.core, "Linker", unsupported)
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)])
    with pytest.raises(CompileError, match=r"does not know sm_101 .CUDA 13 renamed sm_101 to sm_110.\. Fix: "
                                           r"assemble for an sm it knows"):
        ptx.assemble(ptx.emit(p, sm=101), sm=101)


@pytest.mark.parametrize("options", [
    {"workgroup": 0}, {"workgroup": (64,)}, {"workgroup": (0, 1, 1)}, {"workgroup": (True, 1, 1)},
    {"workgroup": "bogus"}, {"workgroup": {64, 1}}, {"cooperative": "yes"}, {"optimize": "no"},
])
def test_emit_options_are_checked(options):
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)])
    with pytest.raises(UnsupportedError, match="Fix:"):
        ptx.emit(p, **options)
    assert str(ptx.emit(p, workgroup=(np.int64(32), 1, 1))) == str(ptx.emit(p, workgroup=(32, 1, 1)))


def test_invalid_program_is_refused():
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), ir.f32(1.0))])
    with pytest.raises(VyreError):
        ptx.emit(p)


def test_compile_error_quotes_log_and_line():
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 7)])
    text = ptx.emit(p, sm=80)
    lines = text.splitlines()
    at = next(k for k, line in enumerate(lines) if "st.global.u32" in line)
    lines.insert(at, "\tbogus.instruction.u32\t%r1, %r2;")
    with pytest.raises(CompileError) as err:
        ptx.assemble("\n".join(lines), sm=80)
    msg = str(err.value)
    assert f"line {at + 1}" in msg
    assert "bogus.instruction.u32" in msg and ">>" in msg
    assert msg.rstrip().splitlines()[-1].startswith("Fix:") or "Fix:" in msg.splitlines()[-1]


def test_assembling_what_is_not_ptx_says_what_to_pass():
    """Regression: the Fix pointed at a quoted line where none was quoted."""
    with pytest.raises(CompileError) as err:
        ptx.assemble("garbage", sm=90)
    msg = str(err.value)
    assert "Offending PTX" not in msg and "quoted line" not in msg
    assert "Fix: pass a whole PTX module (.version, .target and .address_size" in msg


def test_emit_is_deterministic_and_config_sensitive():
    p = control_program()
    a, b = ptx.emit(p), ptx.emit(p)
    assert a == b
    assert ptx.emit(p, workgroup=(4, 4, 4)) != a
    assert ".reqntid" not in ptx.emit(p, workgroup="auto")
    assert ptx.emit(p, cooperative=True) != a
    assert ptx.emit(p, sm=80) != a


def test_semantic_fixups_present():
    text = ptx.emit(ops_program(D.I32), sm=90)
    assert "div.s32" in text and "rem.s32" in text
    assert re.search(r"selp\.s32\t%r\d+, 1, %r\d+, %p\d+", text)  # divisor guarded
    assert "and.b32" in text  # shift amounts masked
    f = ptx.emit(ops_program(D.F32), sm=90)
    assert "min.f32" in f and "or.b32" in f and "and.b32" in f  # ±0 fix-up
    assert "sqrt.rn.f32" in f and "rcp.rn.f32" in f and "div.rn.f32" in f
    assert "ld.global.nc.f32" in f  # read-only and uniform loads
    # f16/bf16 fma rounds once: exact f64 product, TwoSum, round to odd; no f32 fma.
    for dt in (D.F16, D.BF16):
        h = ptx.emit(ops_program(dt), sm=90)
        assert "fma.rn.f32" not in h and "mul.rn.f64" in h and "or.b64" in h
    assert "cvt.rz.f32.f64" in ptx.emit(ops_program(D.BF16), sm=90)


# ---- templates ---------------------------------------------------------------------------------

TEMPLATE_ARGS = {
    "fill_u32": dict(entry="fill_u32"),
    "module": dict(comment="// t", externs="", entry=".entry k", params="\t.param .u64 p",
                   directives="", registers="", shared="", body="\tret;"),
}
LINKED_TEMPLATES = {"fixpoint"}  # call a step function: assembled with one in tests/test_fixpoint.py


def test_template_names():
    assert {"module", "fill_u32"} <= set(ptx.templates.names())


@pytest.mark.parametrize("name", [n for n in ptx.templates.names() if n not in LINKED_TEMPLATES])
def test_every_template_loads_and_assembles(name):
    declared = set(ptx.templates.params(name))
    raw = (ptx.templates.template_dir() / f"{name}.ptx").read_text()
    used = set(re.findall(r"\$\{(\w+)\}", raw))
    assert used == declared
    for sm in SMS:
        args = dict(TEMPLATE_ARGS.get(name, {}))
        args.update(version=ptx.PTX_VERSION[sm], target=f"sm_{sm}")
        text = ptx.templates.load(name, **args)
        assert "${" not in text
        assert ptx.assemble(text, sm=sm)[:4] == b"\x7fELF"


def test_template_parameter_errors():
    with pytest.raises(TemplateError, match="missing entry.*Fix:"):
        ptx.templates.load("fill_u32", version="7.0", target="sm_80")
    with pytest.raises(TemplateError, match="unknown bogus.*Fix:"):
        ptx.templates.load("fill_u32", version="7.0", target="sm_80", entry="k", bogus=1)
    with pytest.raises(TemplateError, match="Fix:"):
        ptx.templates.load("no_such_template")


def test_ptx_does_not_import_the_dispatch_configuration():
    """The emitter takes the few values it needs; DispatchConfig belongs to the layers that dispatch."""
    import inspect

    from vyre_numba.ptx import emitter

    assert not hasattr(emitter, "DispatchConfig") and "from ..config" not in inspect.getsource(emitter)
    assert set(inspect.signature(ptx.emit).parameters) == {"program", "sm", "workgroup", "cooperative", "optimize"}


def test_deep_programs_emit_without_recursion():
    """10,000 levels of expression and statement nesting emit (the emitter walks with an explicit
    stack); 1,000 levels also assemble (ptxas is slow on the deepest, not wrong)."""
    from test_ir_deep import deep_ifs, deep_sum

    for make in (deep_sum, deep_ifs):
        text = ptx.emit(make(10_000), sm=90)
        assert text.count("\n") > 10_000 and max(len(line) for line in text.splitlines()) < 200
        assert ptx.assemble(ptx.emit(make(1_000), sm=90), sm=90)[:4] == b"\x7fELF"


def test_a_grid_barrier_after_a_return_still_needs_a_cooperative_launch():
    """The optimizer drops the dead barrier, but the emitter judges the program as written, as
    dispatch does (found by the random-program test)."""
    p = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64, [ir.return_(), ir.barrier("grid")], name="dead_gb")
    from vyre_numba.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="cooperative=True"):
        ptx.emit(p, sm=90)
    assert ".entry dead_gb" in ptx.emit(p, sm=90, cooperative=True)


@pytest.mark.parametrize("dt, v", [(D.F32, 2**60 + 2**36 + 1), (D.F16, 2051), (D.BF16, 2**60 + 2**36 + 1),
                                   (D.F64, 2**60 + 1)])
def test_int_literals_into_floats_print_the_bits_the_reference_stores(dt, v):
    """The immediate is the literal rounded once (not through f64: 2**60 + 2**36 + 1 is 2**60 + 2**37
    as f32), the value the reference stores, weak or typed."""
    p = ir.Program([ir.BufferDecl.output("out", 0, dt, 2)], 1,
                   [ir.store("out", 0, v), ir.store("out", 1, ir.lit(-v, dt))], name="lit")
    (ref,) = vn.get_backend("reference").dispatch(p, [])
    bits = [int(b) for b in ref.view(f"u{dt.bits // 8}")]
    assert bits == [ir.float_to_bits(v, dt), ir.float_to_bits(-v, dt)]
    text = assemble_all(p)
    for b in bits:
        imm = f"0d{b:016X}" if dt is D.F64 else f"0f{b:08X}" if dt is D.F32 else \
            "0f%08X" % np.float32(ir.bits_to_float(b, dt)).view(np.uint32)
        assert imm in text, imm


@pytest.mark.parametrize("name", [["grid_barrier"], {}, None, "a" * 5000, "../ptx_templates/grid_barrier",
                                  "/etc/passwd", "grid_barrier.ptx"])
def test_a_template_name_that_is_not_one_of_the_templates_is_refused(name):
    for call in (lambda: ptx.templates.load(name, version="7.8", target="sm_90"),
                 lambda: ptx.templates.params(name)):
        with pytest.raises(TemplateError, match=r"Fix: use one of .*grid_barrier.*module"):
            call()


@pytest.mark.parametrize("args", [dict(version=None), dict(version=7.8), dict(version="7.8; ret"),
                                  dict(target=12), dict(target="sm_90\n.entry x"), dict(entry=None),
                                  dict(entry=True), dict(entry=-1), dict(entry=b"k")])
def test_template_parameter_values_are_checked(args):
    full = dict(version="7.8", target="sm_90", entry="fill_u32") | args
    with pytest.raises(TemplateError, match=f"{next(iter(args))}=.*Fix: pass"):
        ptx.templates.load("fill_u32", **full)
    assert ".target sm_90a" in ptx.templates.load("fill_u32", version="7.8", target="sm_90a", entry="k")


def test_ptx_helpers_refuse_arguments_of_the_wrong_kind_with_a_fix():
    i = ir.gid(0)
    p = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 32,
                   [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + 1)])], name="inc")
    text = ptx.emit(p, sm=90)
    bad = [(lambda: ptx.assemble(text.encode(), sm=90), "must be text"), (lambda: ptx.assemble(None, sm=90), "must be text"),
           (lambda: ptx.assemble([text, 5], sm=90), "must be text"), (lambda: ptx.assemble([], sm=90), "must be text"),
           (lambda: ptx.assemble(text, sm="90"), "targets are ints"), (lambda: ptx.assemble(text, sm=90.0), "targets are ints"),
           (lambda: ptx.assemble(text, sm=True), "targets are ints"), (lambda: ptx.link_sources(None), "must be text"),
           (lambda: ptx.abi("inc"), "abi takes a Program"), (lambda: ptx.emit(p, sm=90.0), "targets are ints"),
           (lambda: p.ptx(90.0), "targets are ints"), (lambda: ptx.emit(p, sm="90"), "targets are ints"),
           (lambda: ptx.emit(p, sm=91), "sm_91 is not a target"), (lambda: ptx.emit(p, cooperative="yes"), "not a bool")]
    for call, why in bad:
        with pytest.raises(vn.UnsupportedError, match=f"{why}.*Fix: "):
            call()
    # NumPy ints and bools are the ints and bools they hold
    assert ptx.emit(p, sm=np.int64(90), cooperative=np.False_, optimize=np.True_) == text
    assert ptx.link_sources((text,))[0] == text


def test_assemble_stays_the_function_whatever_was_imported_first():
    """Regression (a docs audit): the assembler's module was named `assemble` too, so once
    `ptx.devices.check` (or `import vyre_numba.ptx.assemble`) imported it first, `ptx.assemble`
    was the module and the documented call raised a raw TypeError (the CUDA backend's too)."""
    import subprocess
    import sys

    script = ("from vyre_numba import ptx\nfrom vyre_numba.ptx import devices\nfrom vyre_numba.cli import demo_program\n"
              "devices.check(demo_program(), 'h100')\nimport vyre_numba.ptx.assembler\n"
              "from vyre_numba.ptx import assemble\nassert callable(ptx.assemble) and assemble is ptx.assemble\n"
              "assert ptx.assemble(ptx.emit(demo_program(), sm=90), sm=90)[:4] == b'\\x7fELF'\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stdout + out.stderr


def test_abi_checks_the_program_and_workgroup_as_emit_does():
    """Regression (a red-team): abi(p, workgroup="AUTO") reported ('A', 'U', 'T', 'O'), (0, 0, 0) and
    (1.5,) were taken, 64 raised a raw TypeError, and an invalid program got duplicate parameters."""
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)])
    for bad in ("AUTO", (0, 0, 0), (1.5,), 64):
        with pytest.raises(UnsupportedError, match="Fix: pass None"):
            ptx.abi(p, workgroup=bad)
    assert ptx.abi(p, workgroup="auto").workgroup_size is None and ptx.abi(p).workgroup_size == (64, 1, 1)
    twice = ir.Program([ir.BufferDecl.output("o", 0, "u32"), ir.BufferDecl.output("o", 1, "u32")], 64, [])
    with pytest.raises(vn.IRValidationError, match="declared twice"):
        ptx.abi(twice)


@pytest.mark.parametrize("sm", [76, 81, 95])
def test_an_sm_nvjitlink_does_not_know_is_said_so_not_blamed_on_the_ptx(sm):
    """Regression (a red-team): sm 81 or 95 was told to pass a whole PTX module and report an
    emitter bug (nvJitLink says UNRECOGNIZED_ARCH, not UNSUPPORTED_ARCH)."""
    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)])
    with pytest.raises(CompileError, match=rf"This nvJitLink does not know sm_{sm}\. Fix: assemble for an sm it knows"):
        ptx.assemble(ptx.emit(p, sm=80), sm=sm)


def test_emit_refuses_a_workgroup_no_device_launches():
    from vyre_numba import ptx
    from vyre_numba.errors import UnsupportedError

    p = ir.Program([ir.BufferDecl.output("o", 0, "u32")], 64, [ir.store("o", ir.gid(0), 1)], name="p")
    for wg in ((2048, 1, 1), (1, 1, 128)):
        with pytest.raises(UnsupportedError, match=r"past what every CUDA device launches.*Fix: pass a smaller"):
            ptx.emit(p, workgroup=wg)


def test_a_device_check_reports_a_workgroup_that_does_not_fit_and_wraps_nvjitlinks_errors():
    from vyre_numba.errors import UnsupportedError
    from vyre_numba.ptx import devices

    p = ir.Program([ir.BufferDecl.output("o", 0, "f32")], 64, [ir.store("o", ir.gid(0), ir.sin(ir.f32(1.0)))],
                   name="p")
    for wg, fragment in (((2048, 1, 1), "2048 invocations"), ((1, 1, 128), "at most (1024, 1024, 64)")):
        report = devices.check(p, "h100", workgroup=wg)  # reported, not raised (nvJitLink's INTERNAL error before)
        assert any(fragment in x for x in report.problems)
    with pytest.raises(UnsupportedError, match="nvJitLink could not assemble the kernel for sm_90.*Fix:"):
        devices.resources("garbage", 90)


@pytest.mark.parametrize("sm", [70, 72])
def test_a_grid_barrier_emitted_for_an_older_target_links_valid_ptx(sm):
    """Regression (a red-team): sm_70 and sm_72 kernels are PTX ISA 6.0 and 6.1, and the grid
    barrier linked beside them took their version, but it uses nanosleep (ISA 6.3): invalid PTX.
    Checked by assembling for sm_75, which takes older targets' PTX (nvJitLink has no sm_70)."""
    B = ir.BufferDecl
    p = ir.Program([B.read_write("x", 0, "u32")], 64, [ir.barrier("grid"), ir.store("x", ir.gid(0), 1)], name="g")
    text = ptx.emit(p, sm=sm, cooperative=True)
    barrier = ptx.link_sources(text)[-1]
    assert ".version 6.3" in barrier and f".target sm_{sm}" in barrier
    assert ptx.assemble(text, sm=75)[:4] == b"\x7fELF"


def test_a_grid_kernels_header_is_read_as_ptx_writes_it_or_refused_with_a_fix():
    """Regression (a red-team): a header without .version/.target raised a raw AttributeError, and a
    valid `.target sm_90, texmode_independent` a TemplateError whose Fix named a target never passed."""
    B = ir.BufferDecl
    p = ir.Program([B.read_write("x", 0, "u32")], 64, [ir.barrier("grid"), ir.store("x", ir.gid(0), 1)], name="g")
    text = ptx.emit(p, sm=90, cooperative=True)
    options = text.replace(".target sm_90", ".target sm_90, texmode_independent")
    assert ".target sm_90\n" in ptx.link_sources(options)[-1] and ptx.assemble(options, sm=90)[:4] == b"\x7fELF"
    bare = "\n".join(line for line in text.splitlines() if not line.startswith((".version", ".target")))
    with pytest.raises(UnsupportedError, match=r"no \.version or \.target line.*Fix: pass the whole module"):
        ptx.link_sources(bare)


@pytest.mark.parametrize("call", [lambda m: m.module("nope"), lambda m: m.module(5), lambda m: m.module([1]),
                                  lambda m: m.extern_decl(5), lambda m: m.symbol("x", "f32"),
                                  lambda m: m.symbol("sin", "f16")])
def test_the_math_modules_functions_refuse_what_names_no_math_function(call):
    """Regression (a red-team): KeyError, TypeError and AttributeError from ptx.mathlib."""
    with pytest.raises(UnsupportedError, match="Fix: "):
        call(ptx.mathlib)
    assert ptx.mathlib.is_math_symbol(None) is False and ptx.mathlib.is_math_symbol("vyre_math_sin_f32") is True


def test_assembles_refusal_of_an_old_target_offers_emit_only_where_emit_writes_it():
    for sm, offered in ((70, True), (72, True), (74, False), (0, False), (-1, False)):
        with pytest.raises(UnsupportedError) as e:
            ptx.assemble("", sm=sm)
        assert ("emit still writes" in str(e.value)) is offered, (sm, e.value)


def test_the_ptx_header_names_the_programs_own_digest():
    """Regression (a red-team): the header showed the optimized program's digest, which neither the
    manifest nor the program says."""
    B = ir.BufferDecl
    p = ir.Program([B.output("o", 0, "u32", 1)], 1, [ir.store("o", 0, ir.add(1, 2))], name="k")
    assert p.optimized().digest() != p.digest()
    assert f"(digest {p.digest()[:16]})" in ptx.emit(p, sm=90)


def test_the_ptx_submodules_the_docs_name_are_reached_through_vn_ptx():
    """A docs audit: README and robustness.md name vyre_numba.ptx.devices.check, which raised
    AttributeError (the lazy table lacked it) unless the module was imported first."""
    import subprocess
    import sys

    code = ("import vyre_numba as vn; print(callable(vn.ptx.devices.check), callable(vn.ptx.mathlib.extern_decl), "
            "sorted({'devices', 'mathlib', 'templates'} - set(dir(vn.ptx))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True", "[]"], out.stdout + out.stderr
