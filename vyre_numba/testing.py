"""Test support: a pytest plugin (`-p vyre_numba.testing`) that skips `gpu`-marked tests, with the
reason, where the CUDA backend cannot run, turns the automatic progress bars off (a bar that
appears when a cell happens to run past a second would make notebook outputs depend on the
machine's speed) and, where VYRE_FAILURE_LOG names a file, appends each failure's report to it as
it happens (a run cut by a time limit keeps them); and helpers to compare results as the
semantics define."""
from __future__ import annotations

import os

import numpy as np

from .errors import INTEGERS, ArgumentError, a_type, shown

__all__ = ["ordered_bits", "mismatches"]  # and the pytest hooks, found by pytest itself


def pytest_configure(config) -> None:
    from .progress import ENV

    os.environ.setdefault(ENV, "0")  # inherited by the notebook kernels nbval starts
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, with the reason, where none is usable)")


FAILURE_LOG = "VYRE_FAILURE_LOG"


def pytest_runtest_logreport(report) -> None:
    path = os.environ.get(FAILURE_LOG, "").strip()
    if path and report.failed:
        try:  # a report may hold any text, lone surrogates included: written escaped, never refused
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
                f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        except (OSError, ValueError) as e:  # the log is an aid: a path that cannot be written must not end the run
            import warnings

            warnings.warn(f"{FAILURE_LOG}={path!r} cannot be written ({e}); failures are reported as usual. Fix: "
                          f"set {FAILURE_LOG} to a writable file's path, or unset it.", stacklevel=1)


def pytest_collection_modifyitems(config, items) -> None:
    import pytest

    from .registry import unavailable_reason

    # by the marker, not pytest's keywords: those hold folder names and parameter ids too (a test in a
    # folder named gpu, or a case [gpu], is no gpu test)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    why = unavailable_reason("cuda")
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {why}")
    for item in gpu_items:
        item.add_marker(skip)


def ordered_bits(a: np.ndarray) -> np.ndarray:
    """Float bit patterns mapped to integers that order like the floats (for ULP distances)."""
    if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.dtype.itemsize not in _SIGNED:
        raise ArgumentError(f"ordered_bits takes a float16, float32 or float64 array, not {_what(a)}. Fix: pass "
                            "a float array (bf16 bits widened with ir.bf16_bits_to_f32 first).")
    bits = _SIGNED[a.dtype.itemsize]
    i = _native(a).view(bits).astype(np.int64)  # a big-endian array's bytes read natively would be others
    return np.where(i < 0, np.int64(np.iinfo(bits).min) - i, i)


_SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}


def _native(a: np.ndarray) -> np.ndarray:
    """`a` in the machine's byte order (the same values; a copy only where it was not)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _what(a) -> str:
    return f"a {a.dtype} array" if isinstance(a, np.ndarray) else f"{a_type(a)}"


def mismatches(got: np.ndarray, expected: np.ndarray, *, ulp: int = 0, bf16: bool = False) -> np.ndarray:
    """Indices where `got` differs from `expected`: integers exactly; floats bit for bit, so -0.0
    differs from +0.0 (or within `ulp` units in the last place, the two zeros 0 apart), every NaN
    equal to every NaN. bf16 arrays hold raw uint16 bits.
    Floats compare only with floats of their width (bits of different widths are not comparable),
    and AssertionError says the shapes differ."""
    for name, a in (("got", got), ("expected", expected)):
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
            raise ArgumentError(f"mismatches: {name} is {_what(a)}. Fix: pass NumPy arrays of numbers "
                                "(np.asarray(x), x.copy_to_host() for a device array).")
    got, expected = _native(got), _native(expected)  # values compare, whatever order their bytes are kept in
    if isinstance(ulp, (bool, np.bool_)) or not isinstance(ulp, INTEGERS) or ulp < 0:
        raise ArgumentError(f"mismatches: ulp={shown(ulp)} is not a count of units in the last place. Fix: pass an "
                            "int >= 0 (0: bit for bit).")
    if not isinstance(bf16, (bool, np.bool_)):  # "no" would read as True
        raise ArgumentError(f"mismatches: bf16={shown(bf16, 60)} is not a bool. Fix: pass True for arrays of raw "
                            "bf16 bits (uint16), False for numbers.")
    if bf16 and not (got.dtype == expected.dtype == np.uint16):
        raise ArgumentError(f"mismatches: bf16=True takes the raw bits as uint16 arrays, not {got.dtype} and "
                            f"{expected.dtype}. Fix: pass the bf16 buffers' uint16 bits, or bf16=False for floats.")
    if not bf16 and "f" in (got.dtype.kind + expected.dtype.kind) and got.dtype != expected.dtype:
        raise ArgumentError(f"mismatches: got is {got.dtype} and expected {expected.dtype}; float bits compare only "
                            "within one type. Fix: convert one to the other's type (expected.astype(got.dtype)) "
                            "where that is the comparison meant.")
    if got.shape != expected.shape:
        raise AssertionError(f"shape {got.shape} != expected {expected.shape}")
    if bf16:
        from .ir import bf16_bits_to_f32

        got, expected = bf16_bits_to_f32(got), bf16_bits_to_f32(expected)
    if got.dtype.kind != "f":
        return np.flatnonzero(got != expected)
    nan_g, nan_e = np.isnan(got), np.isnan(expected)
    g, e = ordered_bits(got), ordered_bits(expected)
    with np.errstate(over="ignore"):  # 0-d arrays subtract as scalars, which warn where they wrap
        wrapped = g.view(np.uint64) - e.view(np.uint64)  # exact mod 2**64; the true distance is below 2**64
        dist = np.where(g >= e, wrapped, np.uint64(0) - wrapped)  # (int64's |g - e| overflowed for 2.0 against -2.0)
    if bf16:  # widened bf16 values step by 2**16 in the f32 ordering
        dist = dist >> np.uint64(16)
    bad = (dist > np.uint64(min(int(ulp), 2**64 - 1))) & ~(nan_g & nan_e) | (nan_g != nan_e)
    if ulp == 0:  # the ordering puts both zeros at 0: bit for bit, their signs differ
        bad |= (np.signbit(got) != np.signbit(expected)) & ~(nan_g & nan_e)
    return np.flatnonzero(bad)


from .errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
