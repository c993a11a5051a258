"""Program -> PTX (emitter), hand-written PTX templates, and nvJitLink assembly.

    text = ptx.emit(program, sm=90)
    cubin = ptx.assemble(text, sm=90)   # links the math modules the kernel calls
"""
from . import mathlib, templates
from .assemble import assemble, link_sources
from .emitter import PTX_VERSION, KernelABI, KernelParam, abi, emit

__all__ = ["emit", "assemble", "link_sources", "abi", "KernelABI", "KernelParam", "templates",
           "mathlib", "PTX_VERSION"]
