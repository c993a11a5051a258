"""Named GPUs' published limits, and a program's kernel checked against one without that GPU
present: launch geometry, registers and shared memory (from ptxas, through nvJitLink), and the
workgroups that fit on one multiprocessor at once (so a cooperative grid can be sized ahead).

Limits are NVIDIA's (CUDA C++ Programming Guide, "Compute Capabilities", and each GPU's data
sheet for its multiprocessor count)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UnsupportedError, a_type, immutable, shown
from ..ir import Access, Program
from ..ir.validate import MAX_AXIS


@dataclass(frozen=True)
class DeviceProfile:
    """A GPU's limits: compute capability, multiprocessors, threads, registers, shared memory."""

    name: str
    sm: int
    sms: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm: int  # bytes a multiprocessor shares among its resident blocks
    shared_per_block: int  # bytes one block may use (opting in past 48 KiB)
    registers_per_sm: int = 65536
    registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    max_threads_per_block: int = 1024
    reserved_shared_per_block: int = 1024  # the driver keeps this much a block on sm_80 and newer

    def __post_init__(self) -> None:
        for f in self.__dataclass_fields__:
            v = getattr(self, f)
            if f != "name" and (isinstance(v, bool) or not isinstance(v, int) or v < (0 if f.startswith("reserved") else 1)):
                raise UnsupportedError(f"DeviceProfile {self.name!r}: {f}={shown(v)} is not a positive int. Fix: give "
                                       "every limit as a positive int (reserved_shared_per_block may be 0).")


KIB = 1024
PROFILES = {p.name: p for p in (
    DeviceProfile("h100", 90, 132, 2048, 32, 228 * KIB, 227 * KIB),
    DeviceProfile("h200", 90, 132, 2048, 32, 228 * KIB, 227 * KIB),
    DeviceProfile("a100", 80, 108, 2048, 32, 164 * KIB, 163 * KIB),
    DeviceProfile("a10", 86, 72, 1536, 16, 100 * KIB, 99 * KIB),
    DeviceProfile("l4", 89, 58, 1536, 24, 100 * KIB, 99 * KIB),
    DeviceProfile("l40s", 89, 142, 1536, 24, 100 * KIB, 99 * KIB),
    DeviceProfile("rtx4090", 89, 128, 1536, 24, 100 * KIB, 99 * KIB),
    DeviceProfile("t4", 75, 40, 1024, 16, 64 * KIB, 64 * KIB, reserved_shared_per_block=0),
    DeviceProfile("v100", 70, 80, 2048, 32, 96 * KIB, 96 * KIB, reserved_shared_per_block=0),
)}


OTHER_GPU = "(or, for another GPU, give check() a DeviceProfile of its limits)"  # the CLI says --sm instead


def profile(name: str) -> DeviceProfile:
    """The profile of a named GPU (case-insensitive: "h100", "A100", ...)."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in PROFILES:
        raise UnsupportedError(f"no profile for a device named {shown(name)}. Fix: pass one of {', '.join(PROFILES)} "
                               f"{OTHER_GPU}.")
    return PROFILES[key]


@dataclass(frozen=True)
class DeviceReport:
    """A kernel against a device profile: its resources (None where they could not be measured,
    with `notes` saying why), the workgroups one multiprocessor holds at once and what limits
    that, the largest co-resident (cooperative) grid, and every problem, each with its fix."""

    device: DeviceProfile
    threads_per_block: int
    registers: int | None
    shared_bytes: int
    local_bytes: int | None
    blocks_per_sm: int | None
    limited_by: str | None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def max_cooperative_grid(self) -> int | None:
        """Workgroups a cooperative launch may have on this device (all resident at once)."""
        return None if self.blocks_per_sm is None else self.blocks_per_sm * self.device.sms

    def summary(self) -> str:
        """A few lines for a terminal."""
        d = self.device
        regs = "unknown" if self.registers is None else str(self.registers)
        lines = [f"checked against {d.name} (sm_{d.sm}, {d.sms} SMs): {self.threads_per_block} threads a workgroup, "
                 f"{regs} registers a thread, {self.shared_bytes} bytes of shared memory a workgroup"
                 + ("" if not self.local_bytes else f", {self.local_bytes} bytes of local memory (spills)")]
        if self.blocks_per_sm is not None:
            lines.append(f"  {self.blocks_per_sm} workgroups an SM at once (limited by {self.limited_by}); a "
                         f"cooperative grid may have up to {self.max_cooperative_grid} workgroups")
        lines += [f"  note: {x}" for x in self.notes] + [f"  problem: {x}" for x in self.problems]
        return "\n".join(lines)


def resources(ptx_text: str, sm: int) -> tuple[int, int, int]:
    """(registers a thread, shared bytes, local bytes) of the one kernel in `ptx_text` for sm_<sm>,
    as ptxas reports them through nvJitLink."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    from .assembler import link_sources

    objs = [ObjectCode.from_ptx(s.encode(), name=f"module{i}.ptx") for i, s in enumerate(link_sources(ptx_text))]
    try:
        linker = Linker(*objs, options=LinkerOptions(arch=f"sm_{sm}", verbose=True))
        linker.link("cubin")
        log = linker.get_info_log() or ""
    except Exception as e:  # nvJitLinkError and cuda.core's own: an unknown target, or text that is no kernel
        said = " ".join(str(e).replace("\x00", " ").split())[:200]  # its log spans lines and ends in a NUL
        raise UnsupportedError(f"nvJitLink could not assemble the kernel for sm_{sm} ({said}). Fix: "
                               "pass the emitter's PTX (ptx.emit(program, sm=...)) for a target the installed "
                               "toolkit knows (ptx.assembler.MIN_ASSEMBLE_SM and up, as ptx.assemble takes).") from None
    regs = re.findall(r"[Uu]sed (\d+) registers", log)
    smem = re.findall(r"(\d+) bytes smem", log)
    lmem = re.findall(r"(\d+) bytes lmem", log) or re.findall(r"(\d+) bytes spill stores", log)
    if not regs:
        raise UnsupportedError(f"nvJitLink reported no register count for sm_{sm}. Fix: report this log as a bug:\n"
                               f"{log.strip()}")
    return int(regs[-1]), int(smem[-1]) if smem else 0, int(lmem[-1]) if lmem else 0


def check(program: Program, device: str | DeviceProfile, *, workgroup: tuple | None = None,
          cooperative: bool = False, grid: int | None = None) -> DeviceReport:
    """`program`'s kernel checked against `device`'s limits (no GPU needed): the workgroup, the
    registers and shared memory ptxas gives it for the device's architecture, and, for a
    cooperative launch of `grid` workgroups, whether they fit at once."""
    from ..config import DispatchConfig
    from ..errors import DispatchError
    from .assembler import MIN_ASSEMBLE_SM
    from .emitter import emit

    if not isinstance(program, Program):
        raise DispatchError(f"program is {a_type(program)}. Fix: pass an ir.Program.")
    d = device if isinstance(device, DeviceProfile) else profile(device)
    launch = DispatchConfig(workgroup=None if workgroup in ("auto", "tune") else workgroup, grid=grid,
                            cooperative=cooperative)  # the same checks as a dispatch's
    wg = tuple(launch.workgroup) if launch.workgroup is not None else tuple(program.workgroup_size)
    grid = None if launch.grid is None else launch.grid[0] * launch.grid[1] * launch.grid[2]
    cooperative = launch.cooperative
    threads = wg[0] * wg[1] * wg[2]
    problems, notes = [], []
    if threads > d.max_threads_per_block:
        problems.append(f"a workgroup of {threads} invocations; {d.name} runs at most {d.max_threads_per_block}. "
                        "Fix: use a smaller workgroup and more of them.")
    if any(v > m for v, m in zip(wg, MAX_AXIS)):
        problems.append(f"a workgroup of {wg}; a CUDA device takes at most {MAX_AXIS} along x, y, z. Fix: put the "
                        "invocations along x (and y).")
    declared = sum(b.dtype.nbytes * b.count for b in program.buffers if b.access is Access.WORKGROUP)
    regs = local = None
    shared = declared
    if problems:  # no kernel of that shape is emitted (emit refuses it), so nothing is measured
        notes.append("registers not measured: the workgroup itself does not fit")
    elif d.sm >= MIN_ASSEMBLE_SM:
        regs, smem, local = resources(emit(program, sm=d.sm, workgroup=wg, cooperative=cooperative), d.sm)
        shared = max(shared, smem)
    else:
        notes.append(f"registers not measured: nvJitLink (CUDA 13) cannot assemble for sm_{d.sm}")
    if shared > d.shared_per_block:
        problems.append(f"{shared} bytes of workgroup memory; {d.name} gives a workgroup at most {d.shared_per_block}. "
                        "Fix: make the workgroup buffers smaller (or tile the work).")
    if regs is not None and regs * threads > d.registers_per_block:
        problems.append(f"{regs} registers x {threads} invocations = {regs * threads} registers a workgroup; {d.name} "
                        f"has {d.registers_per_block}. Fix: use a workgroup of at most "
                        f"{d.registers_per_block // max(regs, 1) // 32 * 32} invocations.")
    if local:
        notes.append(f"{local} bytes of local memory a thread (register spills or large arrays): slower loads")
    blocks, limit = _occupancy(d, threads, regs, shared)
    if blocks == 0 and not problems:
        problems.append(f"no workgroup fits on one {d.name} SM ({limit}). Fix: use a smaller workgroup.")
    if cooperative and grid is not None and blocks is not None and grid > blocks * d.sms:
        problems.append(f"a cooperative grid of {grid} workgroups; {d.name} holds {blocks * d.sms} at once "
                        f"({blocks} an SM). Fix: launch at most {blocks * d.sms} workgroups and loop over the rest.")
    return DeviceReport(d, threads, regs, shared, local, blocks, limit, tuple(problems), tuple(notes))


def _occupancy(d: DeviceProfile, threads: int, regs: int | None, shared: int) -> tuple[int | None, str | None]:
    """(workgroups resident on one SM, the limit that decides it)."""
    if threads > d.max_threads_per_block:
        return 0, "threads a workgroup"
    warps = -(-threads // 32)
    limits = {"workgroups an SM": d.max_blocks_per_sm, "threads an SM": d.max_threads_per_sm // (warps * 32)}
    if regs is not None:
        per_warp = -(-max(regs, 1) * 32 // 256) * 256  # registers are allocated 256 at a time a warp
        limits["registers"] = d.registers_per_sm // (per_warp * warps)
    if shared:
        limits["shared memory"] = d.shared_per_sm // (shared + d.reserved_shared_per_block)
    limit = min(limits, key=limits.get)
    return limits[limit], limit


immutable(DeviceProfile, DeviceReport)
