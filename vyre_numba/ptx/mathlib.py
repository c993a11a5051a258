"""Transcendental device functions of libdevice quality (never the `.approx` instructions alone).

Each function is a tiny PTX module compiled by Numba from libdevice's f64 functions (`__nv_sin`,
`__nv_exp`, ...; documented within 2 ULP; their internal `.approx` seeds are refined to that),
with the C ABI and a fixed name, `vyre_math_<op>_<f32|f64>`: one `.b32`/`.b64` parameter, one
return value of the same width. Kernels declare the ones they call `.extern .func`; `assemble`
links the modules in. Compiled once per process (the first costs about 3 s: Numba's start-up).
The modules target sm_75 and PTX ISA 6.3, so they link into any target nvJitLink supports.
"""
from __future__ import annotations

import functools
import re

from ..errors import UnsupportedError, check_calls, shown

OPS = ("exp", "exp2", "log", "log2", "sin", "cos", "tan")
TARGET_SM = 75
_VERSION = "6.3"
_NAME = re.compile(r"^vyre_math_(exp|exp2|log|log2|sin|cos|tan)_(f32|f64)$")


def symbol(op: str, width: str) -> str:
    """Name of the device function computing `op` in `width` ("f32" or "f64")."""
    if op not in OPS or width not in ("f32", "f64"):
        raise UnsupportedError(f"no math function {shown(op, 40)} in {shown(width, 40)}. Fix: pass an op of {OPS} and "
                               "a width 'f32' or 'f64'.")
    return f"vyre_math_{op}_{width}"


def _known(name) -> re.Match:
    m = _NAME.match(name) if isinstance(name, str) else None
    if m is None:
        raise UnsupportedError(f"{shown(name, 60)} is no math function's name (vyre_math_<op>_<f32|f64>, op one of "
                               f"{', '.join(OPS)}). Fix: pass symbol(op, width)'s name, e.g. {symbol('sin', 'f32')!r}.")
    return m


def extern_decl(name: str) -> str:
    """The `.extern .func` declaration a kernel uses to call `name`."""
    b = "b32" if _known(name).group(2) == "f32" else "b64"
    return f".extern .func (.param .{b} func_retval0) {name}(.param .{b} param0);"


def is_math_symbol(name: str) -> bool:
    """Whether `name` names one of the math functions (see `symbol`)."""
    return isinstance(name, str) and bool(_NAME.match(name))


def module(name: str) -> str:
    """The PTX module that defines math function `name` (see `symbol`)."""
    _known(name)
    return _module(name)


@functools.lru_cache(maxsize=None)
def _module(name: str) -> str:
    op, width = _NAME.match(name).groups()
    from numba import cuda, float32, float64
    from numba.cuda import libdevice

    fn = getattr(libdevice, op)
    ty = float32 if width == "f32" else float64

    if width == "f32":
        # Evaluated in f64 and rounded once, as the reference does: within 0.5 ULP + a hair,
        # subnormal results included (libdevice's f32 versions allow up to 4 ULP and flush inside).
        def kernel(x):
            return float32(fn(float64(x)))
    else:
        def kernel(x):
            return fn(x)

    ptx, _ = cuda.compile_ptx(kernel, (ty,), device=True, abi="c", abi_info={"abi_name": name},
                              cc=(TARGET_SM // 10, TARGET_SM % 10))
    # NVVM stamps its own (newer) ISA version; the code is plain sm_75 PTX, and an old stamp keeps
    # it acceptable to older drivers and linkers than the toolkit that compiled it.
    return re.sub(r"^\.version\s+\S+", f".version {_VERSION}", ptx, count=1, flags=re.M)


check_calls(globals(), ["symbol", "extern_decl", "is_math_symbol", "module"])
