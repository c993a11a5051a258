"""PTX -> cubin through nvJitLink (cuda.core's `Linker`), linking the math modules kernels call."""
from __future__ import annotations

import numbers
import re
from typing import Sequence

from ..errors import CompileError, UnsupportedError, a_type, shown
from . import mathlib, templates

MIN_ASSEMBLE_SM = 75
_EXTERN = re.compile(r"^\s*\.extern\s+\.func\s*(?:\([^)]*\))?\s*([A-Za-z_$][\w$]*)", re.M)
_LINE = re.compile(r"line (\d+)")
_INPUT = re.compile(r"\(([^()]+\.ptx)\)")


def externs(*sources: str) -> list[str]:
    """The functions `sources` declare `.extern` (defined in another module, linked beside them),
    each once, in order of first declaration."""
    return list(dict.fromkeys(name for src in sources for name in _EXTERN.findall(src)))


def link_sources(kernel_ptx: str | Sequence[str]) -> list[str]:
    """The given PTX module(s) followed by the math modules (see `mathlib`) their `.extern .func`
    declarations name, each once."""
    sources = [kernel_ptx] if isinstance(kernel_ptx, str) else None
    if sources is None and isinstance(kernel_ptx, (list, tuple)) and all(isinstance(s, str) for s in kernel_ptx):
        sources = list(kernel_ptx)
    if not sources:
        listed = isinstance(kernel_ptx, (list, tuple))
        odd = next((s for s in kernel_ptx if not isinstance(s, str)), None) if listed else None
        got = (f"{a_type(kernel_ptx)} holding {a_type(odd)}" if odd is not None else
               f"an empty {type(kernel_ptx).__name__}" if listed else
               f"{a_type(kernel_ptx)}")
        raise UnsupportedError(f"PTX to link must be text (a str) or a non-empty list of str; got {got}. "
                               "Fix: pass what ptx.emit returns (bytes: .decode() them first).")
    needed = [name for name in externs(*sources) if mathlib.is_math_symbol(name)]
    defined = {m for src in sources for m in re.findall(r"\.visible\s+\.func\s*(?:\([^)]*\))?\s*(\w+)", src)}
    extra = [mathlib.module(name) for name in needed if name not in defined]
    barrier = [src for src in sources if "vyre_grid_barrier" in _EXTERN.findall(src)]
    if barrier and "vyre_grid_barrier" not in defined:  # the grid barrier of ptx_templates/, at the kernel's target
        version = re.search(r"^\s*\.version\s+(\d+\.\d+)", barrier[0], re.M)
        target = re.search(r"^\s*\.target\s+(sm_\w+)", barrier[0], re.M)  # its first target, options after a comma
        if version is None or target is None:
            raise UnsupportedError("PTX that calls vyre_grid_barrier has no .version or .target line (a module "
                                   "header such as '.version 7.8' and '.target sm_90'), so the barrier cannot be "
                                   "linked at its target. Fix: pass the whole module ptx.emit returns.")
        extra.append(templates.load("grid_barrier", version=version.group(1), target=target.group(1)))
    return sources + extra


def _quote(log: str, sources: list[str], names: list[str]) -> str:
    """The PTX lines the log points at, with a line of context either side."""
    m = _INPUT.search(log)
    order = list(range(len(sources)))
    if m and m.group(1) in names:
        i = names.index(m.group(1))
        order = [i] + [j for j in order if j != i]
    out = []
    for num in dict.fromkeys(int(x) for x in _LINE.findall(log)):
        lines = sources[order[0]].splitlines()
        if 1 <= num <= len(lines):
            out.append(f"{names[order[0]]}:")
            for k in range(max(1, num - 1), min(len(lines), num + 1) + 1):
                out.append(f"{'>>' if k == num else '  '} {k:5d} | {lines[k - 1]}")
    return "\n".join(out)


def assemble(ptx_sources: str | Sequence[str], *, sm: int) -> bytes:
    """Link PTX text (one module or several) and the math modules it calls into a cubin for
    `sm_<sm>`; raises CompileError with nvJitLink's log and the offending PTX lines."""
    if isinstance(sm, bool) or not isinstance(sm, numbers.Integral):
        raise UnsupportedError(f"sm={shown(sm, 60)} is not a target: targets are ints, 90 for sm_90. Fix: pass sm= an "
                               "int, e.g. the device's compute capability.")
    sm = int(sm)
    if sm < MIN_ASSEMBLE_SM:
        from .emitter import PTX_VERSION

        older = (f" (emit still writes sm_{sm} PTX for an older toolchain)" if sm in PTX_VERSION else "")
        raise UnsupportedError(f"nvJitLink from CUDA 13 cannot assemble for sm_{sm}. "
                               f"Fix: assemble for sm_{MIN_ASSEMBLE_SM} or newer{older}.")
    from cuda.core import Linker, LinkerOptions, ObjectCode

    sources = link_sources(ptx_sources)
    names = [f"module{i}.ptx" for i in range(len(sources))]
    linker = None
    try:
        objs = [ObjectCode.from_ptx(src.encode(), name=nm) for src, nm in zip(sources, names)]
        linker = Linker(*objs, options=LinkerOptions(arch=f"sm_{sm}"))
        return bytes(linker.link("cubin").code)
    except Exception as e:  # nvJitLinkError and cuda.core's own errors carry the log
        log = str(e)
        if linker is not None:
            try:
                extra = linker.get_error_log()
                if extra and extra.strip() not in log:
                    log += "\n" + extra
            except Exception:
                pass
        if "UNSUPPORTED_ARCH" in log or "UNRECOGNIZED_ARCH" in log:
            renamed = " (CUDA 13 renamed sm_101 to sm_110)" if sm == 101 else ""
            unknown = CompileError(f"nvJitLink failed to assemble PTX for sm_{sm}:\n{log.strip()}\nThis nvJitLink "
                                   f"does not know sm_{sm}{renamed}. Fix: assemble for an sm it knows (the GPU's own: "
                                   "vyre_numba.get_backend('cuda').caps.sm), or install the nvJitLink of a CUDA that "
                                   "has it.")
            unknown.unknown_sm = f"this nvJitLink does not know sm_{sm}{renamed}"  # said in a command's own terms
            raise unknown from e
        target = re.search(r"\.target\s+sm_(\d+)", "".join(sources))
        if target and int(target.group(1)) > sm:
            from .emitter import PTX_VERSION

            emit = (f", or emit the PTX for sm_{sm} (program.ptx({sm}))" if sm in PTX_VERSION else
                    f" (the emitter writes no sm_{sm} PTX; its targets: {', '.join(map(str, PTX_VERSION))})")
            raise CompileError(f"nvJitLink failed to assemble PTX for sm_{sm}:\n{log.strip()}\nThe PTX targets "
                               f"sm_{target.group(1)}, past sm_{sm}. Fix: assemble with sm={target.group(1)} or "
                               f"higher{emit}.") from e
        quoted = _quote(log, sources, names)
        where = f"\nOffending PTX:\n{quoted}" if quoted else ""
        fix = "correct the PTX at the quoted line" if quoted else ("pass a whole PTX module (.version, .target and "
                                                                   ".address_size, then its entries, as Program.ptx() "
                                                                   "writes)")
        raise CompileError(f"nvJitLink failed to assemble PTX for sm_{sm}:\n{log.strip()}{where}\n"
                           f"Fix: {fix} (for emitted PTX, report the program and this message as an emitter "
                           "bug).") from e
