"""Seeded synthetic graphs in CSR form, NumPy only: R-MAT (skewed, social-network-like) and grids
(road-like, optionally with edges removed). Both are symmetric: every edge is stored both ways."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import DispatchError, a_type, host_memory, shown, whole
from .csr import _as_index_array

__all__ = ["from_edges", "rmat", "grid"]

_SHRINK = "The graph is built in host memory at once. Fix: generate a smaller graph (fewer vertices or edges)."


@host_memory("from_edges", _SHRINK)
def from_edges(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices int32) of the graph on n vertices with edges src[k] -- dst[k], stored
    both ways, each vertex's neighbours sorted and listed once (self-loops kept)."""
    return _from_edges(n, src, dst)


NEGATIVE_IDS_FIX = ("drop the edges with a negative end, or number the vertices from 0 with one mapping for both "
                    "ends: ids = np.unique(np.concatenate([src, dst])); src, dst = np.searchsorted(ids, src), "
                    "np.searchsorted(ids, dst); n = ids.size")


def _from_edges(n, src, dst) -> tuple[np.ndarray, np.ndarray]:
    """`from_edges`, for the generators too: running out of memory is said by the call the user made."""
    n = whole(n, "from_edges: n", 0, 2**31 - 1)
    src, dst = _ends(src, "src", n), _ends(dst, "dst", n)
    if src.size != dst.size:
        raise DispatchError(f"from_edges: src has {src.size} ends and dst {dst.size}. Fix: pass one dst per src.")
    s = np.concatenate([src, dst]).astype(np.int64)
    d = np.concatenate([dst, src]).astype(np.int64)
    order = np.lexsort((d, s))
    s, d = s[order], d[order]
    first = np.ones(s.size, bool)
    first[1:] = (s[1:] != s[:-1]) | (d[1:] != d[:-1])
    s, d = s[first], d[first]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(s, minlength=n), out=indptr[1:])
    return indptr, d.astype(np.int32)


def _ends(a, name: str, n: int) -> np.ndarray:
    """Edge ends as a 1-D int64 array of vertices below n (checked as a CSR's indices are: no
    masked arrays, bools, floats or ragged lists)."""
    a = _as_index_array(a, name, whole="pass its edges' ends: A = A.tocoo(), then from_edges(A.shape[0], A.row, A.col)",
                        not_array="pass the edges' ends as a list or 1-D array of ints: from_edges(n, src, dst), "
                                  "edge k running from src[k] to dst[k].")
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, -1)
    if lo < 0 or hi >= n:
        fix = "pass n larger than every vertex id" if lo >= 0 else NEGATIVE_IDS_FIX
        raise DispatchError(f"from_edges: {name} holds vertex {lo if lo < 0 else hi}, outside 0..{n - 1}. Fix: {fix}.")
    return a.astype(np.int64, copy=False)


@host_memory("rmat", _SHRINK)
def rmat(scale: int, edges: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A symmetric R-MAT graph (a=0.57, b=c=0.19) on 2**scale vertices from `edges` draws."""
    scale, edges = whole(scale, "rmat: scale", 0, 30), whole(edges, "rmat: edges", 0, 2**63 - 1)  # Python ints:
    rng = np.random.default_rng(whole(seed, "rmat: seed", 0, 2**63 - 1))  # 1 << np.uint8(10) would wrap to 0
    src = np.zeros(edges, np.int64)
    dst = np.zeros(edges, np.int64)
    for bit in range(scale):
        r = rng.random(edges, dtype=np.float32)
        src |= (r >= 0.76).astype(np.int64) << bit
        dst |= (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).astype(np.int64) << bit
    return _from_edges(1 << scale, src, dst)


@host_memory("grid", _SHRINK)
def grid(width: int, height: int, *, keep: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A width x height grid (vertex y * width + x joined to its right and lower neighbours); with
    keep < 1 each edge survives with that probability, which splits it into many components like a
    road map with closed roads."""
    width = whole(width, "grid: width", 0, 2**31 - 1)  # Python ints: np.uint8(16) * np.uint8(16) would wrap to 0
    height = whole(height, "grid: height", 0, 2**31 - 1)
    seed = whole(seed, "grid: seed", 0, 2**63 - 1)
    if isinstance(keep, (bool, np.bool_)) or not isinstance(keep, numbers.Real) or not 0 <= keep <= 1:
        what = "not in [0, 1]" if isinstance(keep, numbers.Real) and not isinstance(keep, (bool, np.bool_)) else \
            f"{a_type(keep)}, not a real number (an int, float or Fraction)"
        raise DispatchError(f"grid: keep={shown(keep)} is {what}. Fix: pass a probability, e.g. grid(256, 256, "
                            "keep=0.6).")
    keep = float(keep)  # a Fraction or NumPy float as the probability it is
    if width * height > 2**31 - 1:
        raise DispatchError(f"grid: {width} x {height} is {width * height:,} vertices, past 2**31 - 1 (vertex ids are "
                            "32-bit). Fix: pass a smaller width or height.")
    v = np.arange(width * height, dtype=np.int64).reshape(height, width)
    src = np.concatenate([v[:, :-1].ravel(), v[:-1, :].ravel()])
    dst = np.concatenate([v[:, 1:].ravel(), v[1:, :].ravel()])
    if keep < 1.0:
        mask = np.random.default_rng(seed).random(src.size) < keep
        src, dst = src[mask], dst[mask]
    return _from_edges(width * height, src, dst)


from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
