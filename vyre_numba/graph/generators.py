"""Seeded synthetic graphs in CSR form, NumPy only: R-MAT (skewed, social-network-like) and grids
(road-like, optionally with edges removed). Both are symmetric: every edge is stored both ways."""
from __future__ import annotations

import numpy as np

from ..errors import DispatchError


def from_edges(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices int32) of the graph on n vertices with edges src[k] -- dst[k], stored
    both ways, each vertex's neighbours sorted and listed once (self-loops kept)."""
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


def rmat(scale: int, edges: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A symmetric R-MAT graph (a=0.57, b=c=0.19) on 2**scale vertices from `edges` draws."""
    if not 0 <= scale <= 30 or edges < 0:
        raise DispatchError(f"rmat(scale={scale}, edges={edges}): scale must be 0..30 and edges >= 0. "
                            "Fix: pass e.g. rmat(16, 1 << 20).")
    rng = np.random.default_rng(seed)
    src = np.zeros(edges, np.int64)
    dst = np.zeros(edges, np.int64)
    for bit in range(scale):
        r = rng.random(edges, dtype=np.float32)
        src |= (r >= 0.76).astype(np.int64) << bit
        dst |= (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).astype(np.int64) << bit
    return from_edges(1 << scale, src, dst)


def grid(width: int, height: int, *, keep: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A width x height grid (vertex y * width + x joined to its right and lower neighbours); with
    keep < 1 each edge survives with that probability, which splits it into many components like a
    road map with closed roads."""
    if width < 0 or height < 0 or not 0.0 <= keep <= 1.0:
        raise DispatchError(f"grid({width}, {height}, keep={keep}): sizes must be >= 0 and keep in [0, 1]. "
                            "Fix: pass e.g. grid(256, 256, keep=0.6).")
    v = np.arange(width * height, dtype=np.int64).reshape(height, width)
    src = np.concatenate([v[:, :-1].ravel(), v[:-1, :].ravel()])
    dst = np.concatenate([v[:, 1:].ravel(), v[1:, :].ravel()])
    if keep < 1.0:
        mask = np.random.default_rng(seed).random(src.size) < keep
        src, dst = src[mask], dst[mask]
    return from_edges(width * height, src, dst)
