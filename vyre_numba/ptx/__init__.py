"""Program -> PTX (emitter), hand-written PTX templates, and nvJitLink assembly.

    text = ptx.emit(program, sm=90)     # a PTX: a str shown highlighted in Jupyter (also program.ptx(90))
    cubin = ptx.assemble(text, sm=90)   # links the math modules the kernel calls

The emitter and assembler load on first use, so a process that finds its kernels in the disk
cache never imports the compiler side.
"""
from __future__ import annotations

import importlib

from ..display import PTX
from ..errors import check_calls, shown
from ..ir import program as _program

_LAZY = {"emit": "emitter", "abi": "emitter", "KernelABI": "emitter", "KernelParam": "emitter",
         "PTX_VERSION": "emitter", "assemble": "assembler", "link_sources": "assembler",
         "templates": None, "mathlib": None, "devices": None}

__all__ = ["PTX", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {shown(__name__)} has no attribute {shown(name)}")
    module = importlib.import_module(f"{__name__}.{_LAZY[name] or name}")
    globals()[name] = module if _LAZY[name] is None else getattr(module, name)
    check_calls(globals(), [name])
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(__all__)


def _render(program, **options) -> PTX:
    """`program.ptx(...)`: the emitter, loaded on first use."""
    return __getattr__("emit")(program, **options)


_program.PTX_RENDERER = _render
