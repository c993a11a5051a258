"""Distinct values and distinct rows of integer arrays, sorted, by one sort and one comparison.

NumPy 2.3+ answers a bare `np.unique(a)` with a hash table that measured 2.6 s for 3M int64 values
(and for `np.arange(3M)`) where sorting takes 17 ms; these helpers are what the host phases use."""
from __future__ import annotations

import numpy as np

from .errors import DispatchError, int_range, refuse_misread

__all__ = ["unique", "count_distinct", "unique_rows", "index_of", "inserted"]

INTEGER_KINDS = "biu"  # bool, signed and unsigned ints: what sorts and compares exactly


def _integers(a, where: str, what: str = "values") -> np.ndarray:
    """`a` as an array, or a DispatchError where it holds anything but integers or is masked."""
    if hasattr(a, "__cuda_array_interface__") or hasattr(a, "copy_to_host"):
        raise DispatchError(f"{where}: the {what} are a device array; these helpers sort and search on the host. "
                            "Fix: copy them to the host first (x.copy_to_host(), cupy.asnumpy(x) or x.cpu().numpy()).")
    refuse_misread(a, f"{where}: the {what} argument", not_bool="a number here",
                   masked="pass x.compressed() or x.filled(...), whichever the values mean.")
    try:
        arr = np.asarray(a)
    except MemoryError:
        raise
    except Exception as e:  # an __array__ that raises too
        raise DispatchError(f"{where}: the {what} are not an array ({e}). "
                            "Fix: pass a NumPy integer array (or equal-length lists of ints).") from None
    if arr.size == 0 and arr.dtype.kind == "f" and not isinstance(a, np.ndarray):  # [] reads as float64
        return arr.astype(np.int64)
    if arr.dtype.kind not in INTEGER_KINDS and (arr.size or isinstance(a, np.ndarray)):  # an empty float array too
        ints = int_range(a, arr)
        if ints is not None:
            lo, hi = ints
            if isinstance(a, np.ndarray) and -2**63 <= lo and hi < 2**63:
                raise DispatchError(f"{where}: the {what} are Python ints in an object array; these helpers compare "
                                    "fixed-width integers. Fix: pass np.asarray(x, dtype=np.int64).")
            held = lo >= 0 and hi < 2**64
            raise DispatchError(
                f"{where}: the {what} are {f'ints from {lo} to {hi}' if lo < hi else f'the int {lo}'}, which NumPy "
                f"reads as {arr.dtype}: it infers no one integer type for them "
                f"({'uint64 holds them all' if held else 'and none holds them all'}). Fix: "
                + ("pass np.array(values, dtype=np.uint64)." if held else "keep them within int64's range or "
                   "uint64's (offset them), which these helpers compare; np.unique(np.array(values, dtype=object)) "
                   "compares Python ints of any size."))
        other = ("np.insert for other dtypes" if where == "inserted" else
                 "np.unique for other dtypes, or ids from np.unique(x, return_inverse=True)")
        raise DispatchError(f"{where}: the {what} are {arr.dtype} ({arr.dtype.kind!r} kind); these helpers "
                            f"handle integers only. Fix: pass an integer array ({other}).")
    return arr


def unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of `a` (flattened), ascending, in a's dtype."""
    s = np.sort(_integers(a, "unique").reshape(-1))
    if s.size < 2:
        return s
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def count_distinct(a: np.ndarray) -> int:
    """How many distinct values `a` holds (by marks where integers span little more than their
    count: one pass, no sort)."""
    a = _integers(a, "count_distinct").reshape(-1)
    if a.size and a.dtype.kind in "iu" and not (a.dtype.kind == "u" and a.dtype.itemsize == 8):  # >u8 too
        lo, hi = int(a.min()), int(a.max())
        if hi - lo <= 8 * a.size + 1024:
            seen = np.zeros(hi - lo + 1, bool)
            seen[np.subtract(a, lo, dtype=np.int64) if lo else a] = True  # int64: a narrow type would wrap
            return int(np.count_nonzero(seen))
    return int(unique(a).size)


def unique_rows(pairs: np.ndarray) -> np.ndarray:
    """The distinct rows of a (k, 2) integer array, in lexicographic order, in its dtype."""
    p = _integers(pairs, "unique_rows", "rows")
    if p.ndim != 2 or p.shape[1] != 2:
        raise DispatchError(f"unique_rows: the rows have shape {p.shape}; it takes (k, 2) pairs. "
                            "Fix: pass a (k, 2) array (np.unique(a, axis=0) for other widths).")
    if p.shape[0] < 2:
        return p.copy()
    lo, hi = (int(p.min()), int(p.max()))
    if lo >= 0 and hi < 2**32:
        packed = unique((p[:, 0].astype(np.uint64) << np.uint64(32)) | p[:, 1].astype(np.uint64))
        out = np.empty((packed.size, 2), p.dtype)
        out[:, 0] = packed >> np.uint64(32)
        out[:, 1] = packed & np.uint64(0xFFFFFFFF)
        return out
    order = np.lexsort((p[:, 1], p[:, 0]))
    s = p[order]
    keep = np.empty(s.shape[0], bool)
    keep[0] = True
    np.any(s[1:] != s[:-1], axis=1, out=keep[1:])
    return s[keep]


def index_of(keys: np.ndarray, values: np.ndarray) -> np.ndarray | np.int64:
    """np.searchsorted(keys, values) for ascending `keys` (of the values' shape; a scalar for one
    value): the values are looked up in sorted order and the answers put back (4x faster for millions of scattered values, which miss the cache)."""
    keys = _integers(keys, "index_of", "keys")
    if keys.ndim != 1:
        raise DispatchError(f"index_of: the keys have shape {keys.shape}; they must be 1-D and ascending. "
                            "Fix: pass unique(...) of the keys (or keys.ravel() where already sorted).")
    if keys.size > 1 and np.any(keys[1:] < keys[:-1]):  # searchsorted would answer wrongly, without a word
        k = int(np.argmax(keys[1:] < keys[:-1]))
        raise DispatchError(f"index_of: the keys are not ascending (keys[{k + 1}] = {keys[k + 1]} < keys[{k}] = "
                            f"{keys[k]}). Fix: sort them first, order = np.argsort(keys, kind='stable'), pass "
                            "keys[order], and read a position p as order[p] in the keys as given.")
    v = _integers(values, "index_of")
    if (keys.dtype.kind == "b") != (v.dtype.kind == "b"):  # NumPy would compare True as 1, without a word
        which = "keys" if keys.dtype.kind == "b" else "values"
        raise DispatchError(f"index_of: the {which} are bools and the others integers; a bool is not an id. Fix: "
                            f"pass both as integers (np.asarray({which}, np.int64) where 0 and 1 are meant) or both "
                            "as bools.")
    shape, v = v.shape, v.reshape(-1)
    keys, v, past = _comparable(keys, v)
    if v.size < 4096:
        out = np.searchsorted(keys, v)
    else:
        order = np.argsort(v)
        out = np.empty(v.size, np.intp)
        out[order] = np.searchsorted(keys, v[order])
    if past is not None:
        out[past] = keys.size
    return out.reshape(shape)[()] if not shape else out.reshape(shape)


def _comparable(keys: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(keys, values, values past every key or None) in one integer type, where NumPy would compare
    uint64 with a signed type as float64 (and round past 2**53): a negative value is below every
    uint64 key, so it is looked up as 0; a uint64 value past int64 is above every signed key."""
    if np.result_type(keys.dtype, v.dtype).kind != "f":
        return keys, v, None
    if keys.dtype.kind == "u":
        return keys, np.maximum(v, 0).astype(np.uint64), None
    past = v > np.iinfo(np.int64).max
    return keys.astype(np.int64, copy=False), np.where(past, 0, v).astype(np.int64), past


def inserted(a: np.ndarray, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`a` with values[i] placed before a[at[i]] (`at` ascending, each in 0..len(a); equal places
    keep the values' order): np.insert's result, without the sort it makes of the places. 1-D
    integer arrays; the values must fit a's type exactly."""
    a = _integers(a, "inserted", "array")
    at = _integers(at, "inserted", "places")
    values = _integers(values, "inserted")
    if a.ndim != 1 or at.shape != (values.size,) or values.ndim != 1:
        raise DispatchError(f"inserted: the array, places and values have shapes {a.shape}, {at.shape} and "
                            f"{values.shape}. Fix: pass 1-D arrays, one place for each value.")
    if at.dtype.kind == "b":
        raise DispatchError("inserted: the places are bools, which np.insert reads as a mask and this helper would "
                            "read as 0 and 1. Fix: pass integer places (np.flatnonzero(mask) where they are a mask).")
    if at.size and (int(at.min()) < 0 or int(at.max()) > a.size or np.any(at[1:] < at[:-1])):
        raise DispatchError(f"inserted: the places must ascend within 0..{a.size} (the array's length). Fix: "
                            "pass np.searchsorted(a, values) of ascending values, or np.insert for other places.")
    if values.size and (values.dtype.kind == "b") != (a.dtype.kind == "b"):
        raise DispatchError(f"inserted: the values are {values.dtype} and the array {a.dtype}; a bool is not a number "
                            "here. Fix: pass values of the array's type (x.astype(a.dtype) where 0 and 1 are meant).")
    if values.size and not np.can_cast(values.dtype, a.dtype):
        lo, hi = (np.iinfo(a.dtype).min, np.iinfo(a.dtype).max) if a.dtype.kind in "iu" else (0, 1)
        if int(values.min()) < lo or int(values.max()) > hi:
            raise DispatchError(f"inserted: the values ({values.dtype}) do not fit the array's {a.dtype}. Fix: "
                                "pass values of its type, or widen the array first.")
    return _inserted(a, at, values)


def _inserted(a: np.ndarray, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`inserted` of arguments already known to be what it checks (the distributed closure's own,
    a round's whole-array passes fewer)."""
    if not a.size:
        return values.astype(a.dtype)
    out = np.empty(a.size + values.size, a.dtype)
    put = at.astype(np.intp, copy=False) + np.arange(values.size)  # uint64 + int64 would be float64
    rest = np.ones(out.size, bool)
    rest[put] = False
    out[put] = values
    out[rest] = a
    return out


from .errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
