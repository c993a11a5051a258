"""The reference interpreter: every invocation of a launch runs in lockstep, statement by statement.

A program is compiled once (cached by digest) into a `Plan`. Each variable holds one NumPy array
with every invocation's value, of shape (n,) or (1,) when all invocations share it. Invocations
are numbered in invocation order (workgroups in linear order, then the linear local index), so
array order is the order atomics and plain stores apply in. Divergent control flow runs under an
active mask: `None` means every invocation is active (the fast path, no masking work); otherwise a
bool array that already excludes returned invocations. Inactive invocations may compute throwaway
values (every operation is total); only stores, atomics and assignments look at the mask.

Depth costs no Python recursion: the compiler's walkers run on an explicit stack
(`ir.recursion.drive`); an expression nested deeper than `SHALLOW` levels runs as a flat
post-order tape of steps (shallower ones as nested closures, the fast path); a statement body whose
control flow nests more than `FLAT_DEPTH` levels runs as generators on an explicit stack. A node
object used more than once in one expression (`e = e * e` in a Python loop) is compiled and
evaluated once an evaluation of it, unless the expression holds an atomic (see `_shared`).

A launch larger than the host memory budget runs in chunks of whole workgroups, in workgroup
order (see `prepare`); loops and fixpoint iterations draw on a work budget (see `Budget`).
"""
from __future__ import annotations

import os
import re
from fractions import Fraction
from functools import partial
from typing import Callable, Iterator, NamedTuple

import numpy as np

from ..bindings import Binding
from ..errors import INTEGERS, DispatchError, HostMemoryError, SettingError, shown, told
from ..ir import DataType, Program, drive, result_type
from ..ir import nodes as n
from ..ir.program import walk
from ..ir.validate import Where
from ..lru import LRUCache
from ..ir import ops

MAX_INVOCATIONS = 1 << 28
SHALLOW = 48  # expressions up to this depth run as nested closures; deeper ones as a tape
FLAT_DEPTH = 8  # control flow nested up to this many levels runs by plain calls; deeper on a stack

MEMORY_ENV, WORK_ENV = "VYRE_NUMBA_REFERENCE_MEMORY", "VYRE_NUMBA_REFERENCE_WORK"
DEFAULT_MEMORY_BUDGET = 2 << 30  # bytes of interpreter working memory per dispatch
DEFAULT_WORK_BUDGET = 10 ** 11  # work units per dispatch (see Budget)
STATEMENT_UNITS = 1000  # what one statement costs beyond its invocations: the interpreter's own overhead

Expr = Callable[["_Run", "np.ndarray | None"], np.ndarray]
_U32 = np.uint32


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _full(x: np.ndarray, size: int) -> np.ndarray:
    return np.broadcast_to(x, (size,)) if x.shape[0] != size else x


def _narrow(m: np.ndarray) -> "np.ndarray | None | bool":
    """A mask normalised: None when every invocation is in it, False when none is."""
    if m.all():
        return None
    return m if m.any() else False


def _distinct_sorted(t: np.ndarray) -> bool:
    return t.size < 2 or bool(np.all(t[1:] > t[:-1]))


# ---- budgets -----------------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d{1,30}(?:\.\d{0,30})?(?:[eE]\d{1,2})?)\s*(?:([kmgt])(?:i?b)?|b)?\s*$",
                   re.IGNORECASE | re.ASCII)  # ASCII digits, as the command line's; bounded: a budget
#                                               past 2**63 is refused anyway, so no thousands of digits to read
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _parse_amount(text: str, units: bool = True) -> int | None:
    """The whole positive amount `text` says ('2G', '1.5KiB', '1e11'; without `units`, a number
    alone), exactly; else None (a fraction of a unit, such as '1.5' bytes, is no amount)."""
    match = _SIZE.match(text)
    if not match or not units and match.group(0).strip() != match.group(1):
        return None
    value = Fraction(match.group(1)) * _SCALE[(match.group(2) or "").lower()]
    return int(value) if value.denominator == 1 and 1 <= value < 2 ** 63 else None


def _budget(value: int | None, env: str, default: int, what: str) -> int:
    """`value`, else the environment variable `env`, else `default`; refused unless a positive int."""
    if value is None:
        text = os.environ.get(env)
        if text is None or not text.strip():  # set empty reads as unset, as every other setting's does
            return default
        parsed = _parse_amount(text, units=env == MEMORY_ENV)  # work units are no bytes: a number alone
        if parsed is None:
            raise SettingError(f"${env}={shown(text)} is not a whole positive {what}. Fix: set it to a number such "
                               f"as {'2G or 2147483648' if env == MEMORY_ENV else '1e11'}, or unset it for the "
                               "default.")
        return parsed
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, INTEGERS) or value < 1:
        raise DispatchError(f"{what}={shown(value)} is not a positive int. Fix: pass a positive number of "
                            f"{'bytes' if env == MEMORY_ENV else 'work units'}, or None for the default.")
    return int(value)


def memory_budget(value: int | None = None) -> int:
    """Bytes of working memory a reference dispatch may use: `value`, else $VYRE_NUMBA_REFERENCE_MEMORY
    (an int of bytes, or with a K/M/G/T binary suffix, as 2G, 2GB or 2GiB), else 2 GiB."""
    return _budget(value, MEMORY_ENV, DEFAULT_MEMORY_BUDGET, "memory_budget")


def work_budget(value: int | None = None) -> int:
    """Work units a reference dispatch may spend in loops: `value`, else $VYRE_NUMBA_REFERENCE_WORK,
    else 10**11 (see `Budget`)."""
    return _budget(value, WORK_ENV, DEFAULT_WORK_BUDGET, "work_budget")


class Budget:
    """The work a dispatch may do, and its cancellation. Every loop iteration costs (invocations
    in the chunk + STATEMENT_UNITS) x (1 + statements in the loop body, a nested loop counted as
    one); every fixpoint iteration after the first costs (invocations + STATEMENT_UNITS per chunk)
    x (statements of the program). `cancel()` may come from any thread; it takes effect at the next
    loop iteration, fixpoint iteration or chunk."""

    __slots__ = ("used", "limit", "cancelled")

    def __init__(self, limit: int):
        self.used, self.limit, self.cancelled = 0, limit, False

    def cancel(self) -> None:
        """Stop the dispatch at its next check (writes only `limit`, which the runner only reads)."""
        self.cancelled = True
        self.limit = -1

    def check(self, program: str, what: str) -> None:
        """Raise the right DispatchError if the budget is spent or the dispatch was cancelled;
        `what` says where the dispatch is (`the loop over 'j' at entry[1], iteration 5 of 9`)."""
        if self.used <= self.limit:
            return
        where = f"dispatch of {program!r} on the reference backend"
        if self.cancelled:
            raise DispatchError(f"{where} was cancelled, at {what}. Fix: nothing to fix if you cancelled it; "
                                "dispatch again to run it to the end.")
        raise DispatchError(
            f"{where} ran out of its work budget of {self.limit:.3g} units at {what}. Fix: bound the loop's "
            f"trip count (its end is evaluated once, on entry), dispatch fewer invocations or iterations, "
            f"raise the budget with vyre_numba.reference.ReferenceBackend(work_budget=...) or ${WORK_ENV}, "
            "or run on the cuda backend.")


# ---- launch geometry ---------------------------------------------------------------------------

class Geometry:
    """Builtins of `count` workgroups of a launch from linear workgroup `first` on (the whole grid
    by default), built lazily. Builtins that do not depend on `first` live in `local`, which chunks
    of equal size share."""

    def __init__(self, grid: tuple[int, int, int], wg: tuple[int, int, int], first: int = 0,
                 count: int | None = None, local: dict | None = None):
        self.grid, self.wg = grid, wg
        self.W = wg[0] * wg[1] * wg[2]
        self.G = grid[0] * grid[1] * grid[2] - first if count is None else count  # workgroups here
        self.first, self.base, self.n = first, first * self.W, self.W * self.G
        self.S = -(-self.W // 32)  # subgroups per workgroup
        self.one_d = grid[1] == grid[2] == wg[1] == wg[2] == 1
        self.iota = _ro(np.arange(self.base, self.base + self.n, dtype=_U32))  # global linear ids
        self._cache: dict = {}
        self._local: dict = {} if local is None else local

    def _memo(self, key, make: Callable[[], np.ndarray], local: bool = False) -> np.ndarray:
        cache = self._local if local else self._cache
        if key not in cache:
            cache[key] = _ro(make())
        return cache[key]

    @property
    def local_linear(self) -> np.ndarray:
        return self._memo("l", lambda: np.arange(self.n, dtype=_U32) % _U32(self.W), True)

    @property
    def wg_linear(self) -> np.ndarray:
        return self._memo("wgl", lambda: self.iota // _U32(self.W))

    def builtin(self, name: str, axis: int) -> np.ndarray:
        key = (name, axis)
        v = self._cache.get(key)
        if v is None:  # ids that do not depend on the chunk's first workgroup are shared through _local
            local = name not in ("workgroup_id", "invocation_id")
            v = self._cache[key] = self._memo(key, lambda: self._make(name, axis), local)
        return v

    def _make(self, name: str, axis: int) -> np.ndarray:
        (gx, gy, _), (wx, wy, _) = self.grid, self.wg
        zero = np.zeros(1, _U32)
        if name == "num_workgroups":
            return np.array([self.grid[axis]], _U32)
        if name == "subgroup_size":
            return np.array([32], _U32)
        if name == "subgroup_local_id":
            return self.local_linear & _U32(31)
        if name == "local_id":
            if self.wg[axis] == 1:
                return zero
            l = self.local_linear
            return [l % _U32(wx), (l // _U32(wx)) % _U32(wy), l // _U32(wx * wy)][axis]
        if name == "workgroup_id":
            if self.grid[axis] == 1:
                return zero
            g = self.wg_linear
            return [g % _U32(gx), (g // _U32(gx)) % _U32(gy), g // _U32(gx * gy)][axis]
        if self.one_d and axis == 0:
            return self.iota
        return self.builtin("workgroup_id", axis) * _U32(self.wg[axis]) + self.builtin("local_id", axis)

    def wg_base(self, count: int) -> np.ndarray:
        """Offset of each invocation's workgroup in a flat (workgroups here * count) buffer."""
        return self._memo(("base", count), lambda: np.repeat(np.arange(self.G, dtype=np.int64) * count, self.W), True)

    # subgroups: a padded (G*S, 32) layout where lanes that do not exist hold 0
    def pad(self, x: np.ndarray) -> np.ndarray:
        x = _full(x, self.n)
        if self.W % 32 == 0:
            return x.reshape(-1, 32)
        out = np.zeros((self.G, self.S * 32), x.dtype)
        out[:, :self.W] = x.reshape(self.G, self.W)
        return out.reshape(-1, 32)

    def unpad(self, p: np.ndarray) -> np.ndarray:
        if self.W % 32 == 0:
            return p.reshape(-1)
        return p.reshape(self.G, self.S * 32)[:, :self.W].reshape(-1)

    @property
    def lanes(self) -> np.ndarray:
        """Existing lanes of each subgroup, in the padded layout's row order."""
        last = self.W - 32 * (self.S - 1)
        return self._memo("lanes", lambda: np.tile(np.array([32] * (self.S - 1) + [last]), self.G), True)


_GEOMETRIES: LRUCache[Geometry] = LRUCache(4)
GEOMETRY_CACHE_MAX = 1 << 22  # invocations; larger launches build their geometry per dispatch


def geometry(grid: tuple[int, int, int], wg: tuple[int, int, int]) -> Geometry:
    """The Geometry of a whole launch (cached for launches of up to GEOMETRY_CACHE_MAX invocations)."""
    key = (tuple(grid), tuple(wg))
    if wg[0] * wg[1] * wg[2] * grid[0] * grid[1] * grid[2] > GEOMETRY_CACHE_MAX:
        return Geometry(*key)
    return _GEOMETRIES.get_or_build(key, lambda: Geometry(*key))


# ---- one run of the program --------------------------------------------------------------------

class _Run:
    """The mutable state of one run over one chunk: buffers, variables, returned invocations."""

    __slots__ = ("plan", "geo", "n", "iota", "base", "bufs", "lens", "vars", "ret", "budget", "unit", "changes",
                 "memo")

    def __init__(self, plan: "Plan", arrays: dict[str, np.ndarray], geo: Geometry, budget: Budget,
                 changes: list | None = None):
        self.plan, self.geo, self.n, self.iota, self.base = plan, geo, geo.n, geo.iota, geo.base
        self.changes = changes  # where given, a store or atomic that changes a buffer's bits appends True
        self.budget, self.unit = budget, geo.n + STATEMENT_UNITS
        self.bufs = dict(arrays)
        for b in plan.shared:
            self.bufs[b.name] = np.zeros(geo.G * b.count, b.dtype.storage)
        self.lens = {name: np.array([a.size if name not in plan.shared_counts else plan.shared_counts[name]], _U32)
                     for name, a in self.bufs.items()}
        self.vars: dict[str, np.ndarray] = {}
        self.ret: np.ndarray | None = None
        self.memo: list = []  # the values of an expression's shared nodes while it is evaluated (see _shared)

    def live(self, m):
        """`m` without the returned invocations (normalised like _narrow)."""
        if self.ret is None:
            return m
        alive = ~self.ret
        return _narrow(alive if m is None else m & alive)

    def fail(self, what: str, detail: str, fix: str) -> DispatchError:
        return DispatchError(f"{what} in program {self.plan.name!r} {detail}. Fix: {fix}")


# ---- memory ------------------------------------------------------------------------------------

def _address(r: _Run, decl, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(flat storage, element index, bound): buffer[idx] is in bounds where idx < bound."""
    arr = r.bufs[decl.name]
    if decl.is_shared:
        return arr, r.geo.wg_base(decl.count) + idx, decl.count
    return arr, idx, arr.size


def _load(decl, copy: bool, r: _Run, m, idx: np.ndarray) -> np.ndarray:
    """decl[idx] as values (0 out of bounds); `copy` where the buffer is written later."""
    arr, eff, bound = _address(r, decl, idx)
    size = arr.size
    if idx is r.iota and eff is idx:  # this chunk's invocation ids: a contiguous slice
        lo, hi = r.base, r.base + r.n
        if size >= hi:
            v = arr[lo:hi].copy() if copy else arr[lo:hi]
        else:
            v = np.zeros(r.n, arr.dtype)
            if lo < size:
                v[:size - lo] = arr[lo:]
    elif idx.shape[0] == 1 and eff is idx:
        i = int(idx[0])
        v = arr[i:i + 1].copy() if i < bound else np.zeros(1, arr.dtype)
    elif size and int(idx.max()) < bound:
        v = arr.take(eff)
    else:
        inb = idx < bound
        v = np.where(inb, arr.take(np.where(inb, eff, 0)) if size else 0, arr.dtype.type(0))
    return ops.from_storage(v, decl.dtype)


def _changes(old: np.ndarray, new: np.ndarray) -> bool:
    """Whether any element's bits differ (so NaN over the same NaN is no change, -0 over +0 is)."""
    bits = np.dtype(f"u{old.dtype.itemsize}")
    return bool(np.any(np.ascontiguousarray(old).view(bits) != np.ascontiguousarray(new).view(bits)))


def _store(r: _Run, decl, idx: np.ndarray, value: np.ndarray, m) -> None:
    arr, eff, bound = _address(r, decl, idx)
    v = ops.to_storage(value, decl.dtype)
    if r.changes is not None and not decl.is_shared and not r.changes:
        inb = idx < bound
        act = _full(inb, r.n) if m is None else inb & m
        pos = np.flatnonzero(act)
        if pos.size and _changes(arr[_full(eff, r.n)[pos]], _full(v, r.n)[pos]):
            r.changes.append(True)
    if idx is r.iota and eff is idx:  # this chunk's invocation ids: a contiguous slice, masked in place
        lo = r.base
        k = min(r.n, arr.size - lo)
        if k > 0:
            src = v[:k] if v.shape[0] != 1 else v
            if m is None:
                arr[lo:lo + k] = src
            else:
                np.copyto(arr[lo:lo + k], src, where=_full(m, r.n)[:k])
        return
    inb = idx < bound
    act = _full(inb, r.n) if m is None else inb & m
    pos = np.flatnonzero(act)
    if pos.size == 0:
        return
    if eff.shape[0] == 1:  # one element for every invocation: the last writer wins
        arr[int(eff[0])] = v[pos[-1] if v.shape[0] != 1 else 0]
        return
    tgt = eff[pos]
    vals = v[pos] if v.shape[0] != 1 else v
    if not (idx is r.iota or _distinct_sorted(tgt)):
        _, first_from_end = np.unique(tgt[::-1], return_index=True)
        keep = tgt.size - 1 - first_from_end  # last occurrence of each element, in invocation order
        tgt, vals = tgt[keep], (vals[keep] if vals.shape[0] != 1 else vals)
    arr[tgt] = vals


_COMBINE = {"add": np.add, "or": np.bitwise_or, "and": np.bitwise_and, "xor": np.bitwise_xor,
            "min": np.minimum, "max": np.maximum}


def _segmented_scan(op: str, vs: np.ndarray, seg: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Inclusive scan of vs within runs of equal seg (sorted), by `op`."""
    if op == "add":
        c = np.cumsum(vs, dtype=vs.dtype)  # wraps, like the atomic
        return c - (c - vs)[starts][seg]
    f, x, d = _COMBINE[op], vs.copy(), 1
    longest = int(np.diff(np.append(starts, vs.size)).max())
    while d < longest:  # Hillis-Steele, log2(longest) vectorised steps
        x[d:] = np.where(seg[d:] == seg[:-d], f(x[d:], x[:-d]), x[d:])
        d <<= 1
    return x


_CAS_STEPS = 64  # updates of every target stepped through together, then each longer run on its own


def _cas_in_order(arr, ts, vs, es, starts, seg) -> np.ndarray:
    """compare_exchange applied one after another on targets sorted stably (ts): the first
    _CAS_STEPS updates of every target vectorised across targets, then the rest of each longer run
    from one success to the next (a search for the next expected value equal to the current one:
    a contended lock's many failures cost one pass), by Python steps where successes are many."""
    old = np.empty_like(vs)
    lengths = np.diff(np.append(starts, ts.size))
    rank = np.arange(ts.size) - starts[seg]
    early = np.flatnonzero(rank < _CAS_STEPS)
    early = early[np.argsort(rank[early], kind="stable")]  # by rank: the k-th update of every target together
    bounds = np.concatenate([[0], np.cumsum(np.bincount(rank[early], minlength=_CAS_STEPS))])
    for k in range(min(int(lengths.max()), _CAS_STEPS)):
        sel = early[bounds[k]:bounds[k + 1]]
        cur = arr[ts[sel]]
        old[sel] = cur
        arr[ts[sel]] = np.where(cur == es[sel], vs[sel], cur)
    for s in np.flatnonzero(lengths > _CAS_STEPS).tolist():
        pos, end = int(starts[s]) + _CAS_STEPS, int(starts[s] + lengths[s])
        target, jumps = ts[pos], 0
        cur = arr[target]
        while pos < end and jumps < _CAS_STEPS:
            hit = es[pos:end] == cur
            if not hit.any():
                break
            k = pos + int(hit.argmax())
            old[pos:k + 1] = cur
            cur, pos, jumps = vs[k], k + 1, jumps + 1
        if jumps == _CAS_STEPS:  # successes are many: one Python step an update
            cur = cur.item()
            for k, (v, e) in enumerate(zip(vs[pos:end].tolist(), es[pos:end].tolist()), pos):
                old[k] = cur
                if cur == e:
                    cur = v
            pos = end
        old[pos:end] = cur
        arr[target] = cur
    return old


def _apply_atomic(arr, op: str, t, v, e) -> np.ndarray:
    """Apply `op` at arr[t[k]] for k in order; return each one's old value."""
    if _distinct_sorted(t):
        old = arr[t]
        if op == "exchange":
            arr[t] = v
        elif op == "compare_exchange":
            arr[t] = np.where(old == e, v, old)
        else:
            arr[t] = _COMBINE[op](old, v)
        return old
    order = np.argsort(t, kind="stable")
    ts, vs = t[order], v[order]
    first = np.ones(ts.size, bool)
    first[1:] = ts[1:] != ts[:-1]
    starts = np.flatnonzero(first)
    seg = np.cumsum(first) - 1
    last = np.append(starts[1:] - 1, ts.size - 1)
    if op == "compare_exchange":
        old_sorted = _cas_in_order(arr, ts, vs, e[order], starts, seg)
    else:
        base = arr[ts]
        prev = np.empty_like(vs)
        if op == "exchange":
            prev[1:] = vs[:-1]
            arr[ts[starts]] = vs[last]
        else:
            incl = _segmented_scan(op, vs, seg, starts)
            prev[1:] = _COMBINE[op](base[1:], incl[:-1])
            arr[ts[starts]] = _COMBINE[op](base[starts], incl[last])
        prev[0] = base[0]
        old_sorted = np.where(first, base, prev)
    old = np.empty_like(old_sorted)
    old[order] = old_sorted
    return old


def _atomic(r: _Run, decl, op: str, idx, val, exp, m) -> np.ndarray:
    arr, eff, bound = _address(r, decl, idx)
    inb = idx < bound
    act = _full(inb, r.n) if m is None else inb & m
    pos = np.flatnonzero(act)
    out = np.zeros(r.n, arr.dtype)
    if pos.size:
        t = _full(eff, r.n)[pos].astype(np.intp)
        e = None if exp is None else _full(exp, r.n)[pos]
        vs = _full(val, r.n)[pos]
        old = out[pos] = _apply_atomic(arr, op, t, vs, e)
        if r.changes is not None and not decl.is_shared and not r.changes:
            new = (vs if op == "exchange" else np.where(old == e, vs, old) if op == "compare_exchange"
                   else _COMBINE[op](old, vs))
            if _changes(old, new):
                r.changes.append(True)
    return out


# ---- subgroups and barriers --------------------------------------------------------------------

def _check_subgroup(r: _Run, m, what: str) -> None:
    if m is None:
        return
    active = r.geo.pad(m).sum(axis=1)
    bad = np.flatnonzero((active != 0) & (active != r.geo.lanes))
    if bad.size:
        k = int(bad[0])
        raise r.fail(what, f"ran in divergent control flow: subgroup {k % r.geo.S} of workgroup "
                           f"{r.geo.first + k // r.geo.S} had {active[k]} of its {r.geo.lanes[k]} lanes active",
                     "call subgroup operations where every lane of the subgroup takes the same path "
                     "(outside if/loop conditions that differ within a subgroup, and before any early "
                     "return); compute a per-lane choice with ir.select instead")


def _ballot(r: _Run, m, c: np.ndarray) -> np.ndarray:
    _check_subgroup(r, m, "subgroup_ballot")
    bits = np.packbits(r.geo.pad(c), axis=1, bitorder="little").view("<u4").astype(_U32)
    return r.geo.unpad(np.repeat(bits, 32, axis=1))


def _shuffle(r: _Run, m, v: np.ndarray, lane: np.ndarray) -> np.ndarray:
    _check_subgroup(r, m, "subgroup_shuffle")
    vp = r.geo.pad(v)
    if lane.shape[0] == 1:
        L = int(lane[0])
        col = vp[:, L] if L < 32 else np.zeros(vp.shape[0], vp.dtype)
        return r.geo.unpad(np.repeat(col[:, None], 32, axis=1))
    lp = r.geo.pad(lane)
    ok = lp < 32
    got = np.take_along_axis(vp, np.where(ok, lp, 0).astype(np.intp), axis=1)
    return r.geo.unpad(np.where(ok, got, vp.dtype.type(0)))


def _subgroup_add(r: _Run, m, v: np.ndarray) -> np.ndarray:
    _check_subgroup(r, m, "subgroup_add")
    s = r.geo.pad(v).sum(axis=1, dtype=v.dtype)  # wraps
    return r.geo.unpad(np.repeat(s[:, None], 32, axis=1))


def _select(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a if c[0] else b) if c.shape[0] == 1 else np.where(c, a, b)


def _barrier(r: _Run, m, scope: str) -> None:
    if m is None:
        return
    alive = np.ones(r.n, bool) if r.ret is None else ~r.ret
    groups = r.geo.G if scope == "workgroup" else 1
    act = m.reshape(groups, -1).sum(axis=1)
    run = alive.reshape(groups, -1).sum(axis=1)
    bad = np.flatnonzero((act != 0) & (act != run))
    if bad.size:
        k = int(bad[0])
        where = f"workgroup {r.geo.first + k}" if scope == "workgroup" else "the grid"
        raise r.fail(f"barrier({shown(scope)})", f"was reached by {act[k]} of the {run[k]} running invocations "
                                            f"of {where} (divergent control flow)",
                     f"place the barrier where every invocation of the {scope} that has not returned reaches "
                     "it: outside if branches and loops whose condition or trip count differs between "
                     "invocations, and not after an early return taken by only some of them")
    if scope == "grid" and act.any():
        gone = np.flatnonzero(~alive.reshape(r.geo.G, -1)[:, 0])  # local id 0 of each workgroup arrives for it
        if gone.size:
            k = int(gone[0])
            raise r.fail("barrier('grid')", f"was reached while the first invocation (local id 0) of workgroup "
                                            f"{r.geo.first + k} had returned; on the GPU that invocation arrives "
                                            "for its workgroup, so the barrier would wait for it until it timed out",
                         "return only after the grid barrier, or skip the work with an if_ instead of "
                         "returning, so that every workgroup's first invocation reaches it")


# ---- compiled code: expressions ----------------------------------------------------------------
#
# Every node kind compiles (in Plan._op, one match) to an operation `f` of its operand values;
# `rm` says whether it also takes the run and the mask first. Leaves are f(r, m). Shallow
# subtrees nest those operations in closures; deep ones become steps of a post-order tape that
# keeps operand values on a list.

def _closure(f, rm: bool, kids: list[Expr]) -> Expr:
    if not kids:
        return f
    if len(kids) == 1:
        a, = kids
        return (lambda r, m: f(r, m, a(r, m))) if rm else (lambda r, m: f(a(r, m)))
    if len(kids) == 2:
        a, b = kids
        return (lambda r, m: f(r, m, a(r, m), b(r, m))) if rm else (lambda r, m: f(a(r, m), b(r, m)))
    if len(kids) == 3:
        a, b, c = kids
        return (lambda r, m: f(r, m, a(r, m), b(r, m), c(r, m))) if rm else (lambda r, m: f(a(r, m), b(r, m), c(r, m)))
    if rm:
        return lambda r, m: f(r, m, *[k(r, m) for k in kids])
    return lambda r, m: f(*[k(r, m) for k in kids])


def _step(f, rm: bool, arity: int) -> Callable:
    """A tape step: pops `arity` operand values, pushes the result."""
    if arity == 0:
        return lambda r, m, st: st.append(f(r, m))
    if arity == 1:
        if rm:
            def step(r, m, st):
                st[-1] = f(r, m, st[-1])
        else:
            def step(r, m, st):
                st[-1] = f(st[-1])
        return step

    def step(r, m, st):
        args = st[-arity:]
        del st[-arity:]
        st.append(f(r, m, *args) if rm else f(*args))
    return step


def _tape(steps: list) -> Expr:
    def run_tape(r, m):
        st: list = []
        for s in steps:
            s(r, m, st)
        return st[0]
    return run_tape


def _kept(ev: Expr, slot: int) -> Expr:
    """`ev`, evaluated once an evaluation of its expression: a node used more than once."""
    def kept(r, m):
        v = r.memo[slot]
        if v is None:
            v = r.memo[slot] = ev(r, m)
        return v
    return kept


def _keep(slot: int) -> Callable:
    """A tape step that keeps the value on top (a shared node's, just computed) in its slot."""
    def keep(r, m, st):
        r.memo[slot] = st[-1]
    return keep


def _again(slot: int) -> Callable:
    """A tape step that pushes a shared node's value, computed earlier on the tape."""
    return lambda r, m, st: st.append(r.memo[slot])


def _scoped(ev: Expr, slots: int) -> Expr:
    """`ev` with `slots` empty memo slots for its shared nodes, fresh each evaluation."""
    def scoped(r, m):
        outer = r.memo
        r.memo = [None] * slots
        try:
            return ev(r, m)
        finally:
            r.memo = outer
    return scoped


def _shared(e: n.Expr) -> dict[int, int]:
    """{id of node: memo slot} for the nodes of `e` that are used more than once (a child of more
    than one parent, or twice of one), in time linear in its distinct nodes. Empty where `e`
    holds an atomic: every other node is pure within one evaluation of an expression (no store
    runs in it), so a shared node's value is the same at each use, and evaluating it once gives
    the same bits; an atomic changes a buffer, so a load used before and after it may differ."""
    uses: dict[int, int] = {}
    for x in walk([e], distinct=True):
        if isinstance(x, n.Atomic):
            return {}
        for c in x.children():
            uses[id(c)] = uses.get(id(c), 0) + 1
    shared = [i for i, k in uses.items() if k > 1]
    return {i: slot for slot, i in enumerate(shared)}


class _Code(NamedTuple):
    """A compiled expression: its closure (None when its value is left on the enclosing tape),
    its type, and the most bytes per invocation alive while it is evaluated."""

    ev: Expr | None
    type: DataType
    peak: int


_NBYTES = {t.value: ops.VALUE_DTYPE[t].itemsize for t in DataType}


def _nbytes(t: DataType) -> int:
    return _NBYTES[t._value_]  # keyed by the name: hashing a str is cheaper than an Enum member


# ---- compiled code: statements -----------------------------------------------------------------
#
# Every statement compiles to fn(r, m) that runs it and returns None, or returns a generator
# (only when its control flow nests deeper than FLAT_DEPTH) that `_trampoline` drives: the
# generator yields the generators of the bodies it runs, one after another.

class _Stmt(NamedTuple):
    fn: Callable
    may_return: bool
    height: int  # levels of nested control flow below it
    cost: int  # statements it runs once, nested loop bodies not counted


def _run_flat(steps: tuple, r: _Run, m) -> None:
    for f, may_return in steps:
        f(r, m)
        if may_return and r.ret is not None:
            m = r.live(m)
            if m is False:
                return


def _run_gen(steps: tuple, r: _Run, m) -> Iterator:
    for f, may_return in steps:
        g = f(r, m)
        if g is not None:
            yield g
        if may_return and r.ret is not None:
            m = r.live(m)
            if m is False:
                return


def _trampoline(g: Iterator) -> None:
    stack = [g]
    while stack:
        try:
            stack.append(next(stack[-1]))
        except StopIteration:
            stack.pop()


class _Body:
    """A compiled statement list; `enter(r, m)` runs it (flat) or returns its generator."""

    __slots__ = ("steps", "height", "flat", "may_return", "cost", "enter")

    def __init__(self, items: list[_Stmt]):
        self.steps = tuple((s.fn, s.may_return) for s in items)
        self.height = max((s.height for s in items), default=0)
        self.flat = self.height <= FLAT_DEPTH
        self.may_return = any(s.may_return for s in items)
        self.cost = sum(s.cost for s in items)
        self.enter = partial(_run_flat if self.flat else _run_gen, self.steps)


def _then_else(g: Iterator, other: _Body, r: _Run, em) -> Iterator:
    yield g
    g = other.enter(r, em)
    if g is not None:
        yield g


def _if(fc: Expr, then: _Body, other: _Body | None) -> Callable:
    then_enter = then.enter
    other_enter = other.enter if other is not None else None

    def if_(r, m):
        c = fc(r, m)
        if c.shape[0] == 1:
            if c[0]:
                return then_enter(r, m)
            return None if other_enter is None else other_enter(r, m)
        tm = _narrow(c if m is None else m & c)
        if other_enter is None:
            return None if tm is False else then_enter(r, tm)
        em = _narrow(~c if m is None else m & ~c)
        if tm is False:
            return None if em is False else other_enter(r, em)
        g = then_enter(r, tm)
        if em is False:
            return g
        if g is None:
            return other_enter(r, em)
        return _then_else(g, other, r, em)
    return if_


def _loop(fs: Expr, fe: Expr, body: _Body, var: str, where: Where) -> Callable:
    def masks(r, m, start, count, top, same):
        """Each iteration's mask, with the variable set and the work budget charged."""
        budget, cost = r.budget, r.unit * (body.cost + 1)
        for k in range(top):
            budget.used += cost
            if budget.used > budget.limit:
                budget.check(r.plan.name, f"the loop over {var!r} at {where}, iteration {k + 1} of {top}")
            mk = r.live(m if same else _narrow(count > k))
            if mk is False:
                return
            r.vars[var] = start + _U32(k)
            yield mk

    def nested(its, r):
        for mk in its:
            yield body.enter(r, mk)

    def loop(r, m):
        start, end = fs(r, m), fe(r, m)
        count = np.where(end > start, end - start, _U32(0))
        if m is not None:
            count = np.where(m, count, _U32(0))
        top = int(count.max())
        if top == 0:
            return None
        same = count.shape[0] == 1 or int(count.min()) == top
        its = masks(r, m, start, count, top, same)
        if not body.flat:
            return nested(its, r)
        run = body.enter
        for mk in its:
            run(r, mk)
        return None
    return loop


def _let(ev: Expr, name: str) -> Callable:
    def let(r, m):  # masks only shrink within the variable's scope: no merge needed
        r.vars[name] = ev(r, m)
    return let


def _assign(ev: Expr, name: str) -> Callable:
    def assign(r, m):
        v = ev(r, m)
        r.vars[name] = v if m is None else np.where(m, v, r.vars[name])
    return assign


def _return(r: _Run, m) -> None:
    if m is None:
        r.ret = np.ones(r.n, bool)
    else:
        r.ret = m.copy() if r.ret is None else r.ret | m


# Bytes per invocation that operations allocate beyond their result, generously (see Plan._op).
_SCRATCH_STORE, _SCRATCH_ATOMIC, _SCRATCH_SUBGROUP = 64, 160, 64
_MASK_IF, _MASK_LOOP, _ASSIGN_EXTRA = 4, 24, 8


# ---- compilation -------------------------------------------------------------------------------

class Plan:
    """A program compiled for the interpreter, plus what execution needs to know about it:
    the buffers it writes and the bytes per invocation it needs (`invocation_bytes`)."""

    def __init__(self, program: Program):
        self.name = program.name
        self.decls = {b.name: b for b in program.buffers}
        self.shared = [b for b in program.buffers if b.is_shared]
        self.shared_counts = {b.name: b.count for b in self.shared}
        self.written: set[str] = set()
        self.grid_barrier = False
        builtins, counts = set(), {b.count for b in self.shared}
        for x in walk(program.entry, distinct=True):
            match x:
                case n.Store(buffer=b) | n.Atomic(buffer=b):
                    self.written.add(b)
                case n.Barrier(scope="grid"):
                    self.grid_barrier = True
                case n.Builtin(name=name, axis=axis):
                    builtins.add((name, axis))
        self.types: dict[str, DataType] = {}
        self._var_bytes: dict[str, int] = {}
        self._peak = 0
        self._slots: dict[int, int] = {}  # while an expression compiles: its shared nodes' memo slots (`_shared`)
        self._done: dict[int, _Code] = {}  # and the code of those compiled so far
        self.body: _Body = drive(self._body(program.entry, Where(None, "entry"), 0))
        self._slots, self._done = {}, {}  # compile-time only: a cached plan keeps none of it
        geometry_bytes = 16 + 4 * len(builtins) + 8 * len(counts)  # ids, local ids, builtins, workgroup offsets
        self.invocation_bytes = sum(self._var_bytes.values()) + self._peak + geometry_bytes + 2
        self.workgroup_shared_bytes = sum(b.count * b.dtype.nbytes for b in self.shared)

    def workgroup_bytes(self, wg: tuple[int, int, int]) -> int:
        """Estimated host bytes the interpreter needs per workgroup of shape `wg`."""
        return wg[0] * wg[1] * wg[2] * self.invocation_bytes + self.workgroup_shared_bytes

    def run(self, r: _Run) -> None:
        g = self.body.enter(r, None)
        if g is not None:
            _trampoline(g)

    # ---- expressions: compiled children first (walkers run by `drive`) --------------------------
    def _expr(self, e: n.Expr):
        """Walker: the `_Code` of an expression: nested closures, or a tape when it is deep. A node
        used more than once in it (`_shared`) is compiled once and evaluated once an evaluation,
        so an expression costs its distinct nodes, not its size written out."""
        self._slots, self._done = _shared(e), {}
        if e.depth <= SHALLOW:
            code = self._shallow(e)
        else:
            tape: list = []
            code = yield self._deep(e, tape)
            code = code._replace(ev=_tape(tape))
        if self._slots:  # the shared values stay alive until the expression's value is made
            kept = sum(_nbytes(c.type) for c in self._done.values())
            code = _Code(_scoped(code.ev, len(self._slots)), code.type, code.peak + kept)
        return code

    def _shallow(self, e: n.Expr) -> _Code:
        """The closure of an expression at most SHALLOW deep (so this recursion is bounded)."""
        slot = self._slots.get(id(e))
        if slot is not None and id(e) in self._done:
            return self._done[id(e)]
        kids = [self._shallow(child) for child in e.children()]
        f, rm, t, peak = self._combine(e, kids)
        code = _Code(_closure(f, rm, [k.ev for k in kids]), t, peak)
        if slot is not None:
            code = self._done[id(e)] = code._replace(ev=_kept(code.ev, slot))
        return code

    def _deep(self, e: n.Expr, tape: list):
        """Walker appending the steps of a deep expression to `tape`, children first; a shallow
        subtree becomes one step, a shared deep one met again a step that pushes its kept value.
        Its `_Code` has no closure: the value is left on the tape."""
        kids = []
        for child in e.children():
            slot = self._slots.get(id(child))
            if child.depth > SHALLOW and slot is not None and id(child) in self._done:
                tape.append(_again(slot))
                kids.append(self._done[id(child)])
            elif child.depth > SHALLOW:
                kids.append((yield self._deep(child, tape)))
                if slot is not None:
                    tape.append(_keep(slot))
                    self._done[id(child)] = kids[-1]
            else:
                k = self._shallow(child)
                tape.append(_step(k.ev, True, 0))
                kids.append(k)
        f, rm, t, peak = self._combine(e, kids)
        tape.append(_step(f, rm, len(kids)))
        return _Code(None, t, peak)

    def _combine(self, e: n.Expr, kids: list[_Code]) -> tuple[Callable, bool, DataType, int]:
        """`_op` of a node given its compiled children, with the bytes alive at its peak."""
        live = peak = 0
        for k in kids:
            peak = max(peak, live + k.peak)
            live += _nbytes(k.type)
        f, rm, t, scratch = self._op(e, tuple(k.type for k in kids))
        return f, rm, t, max(peak, live + scratch + _nbytes(t))

    def _op(self, e: n.Expr, tys: tuple[DataType, ...]) -> tuple[Callable, bool, DataType, int]:
        """(operation, takes run and mask, result type, scratch bytes per invocation) of one node."""
        w = max((_nbytes(t) for t in tys), default=4)
        scratch = 0
        buffer = None
        match e:
            case n.Lit(raw=raw, dtype=dt):
                a = ops.literal(raw, dt)
                f, rm = (lambda r, m: a), True
            case n.Var(name=name):
                f, rm = (lambda r, m: r.vars[name]), True
                return f, rm, self.types[name], 0
            case n.Load(buffer=b):
                decl, copy = self.decls[b], b in self.written
                f, rm, buffer, scratch = partial(_load, decl, copy), True, decl.dtype, 40
            case n.BufLen(buffer=b):
                f, rm = (lambda r, m: r.lens[b]), True
            case n.Builtin(name=name, axis=axis):
                f, rm = (lambda r, m: r.geo.builtin(name, axis)), True
            case n.BinOp(op=op):
                f, rm, scratch = ops.binary(op, tys[0]), False, 10 * max(w, 8)
            case n.UnOp(op=op):
                f, rm, scratch = ops.unary(op, tys[0]), False, 8 * max(w, 8)
            case n.Select():
                f, rm = _select, False
            case n.Cast(dtype=dt):
                f, rm, scratch = ops.cast(tys[0], dt), False, 48
            case n.Fma():
                f, rm, scratch = ops.fma(tys[0]), False, 200 if tys[0].is_float else 3 * w
            case n.Atomic(op=op, buffer=b, expected=x):
                decl = self.decls[b]
                if x is None:
                    f = lambda r, m, i, v: _atomic(r, decl, op, i, v, None, m)  # noqa: E731
                else:
                    f = lambda r, m, i, v, x: _atomic(r, decl, op, i, v, x, m)  # noqa: E731
                rm, buffer, scratch = True, decl.dtype, _SCRATCH_ATOMIC
            case n.SubgroupBallot():
                f, rm, scratch = _ballot, True, _SCRATCH_SUBGROUP
            case n.SubgroupShuffle():
                f, rm, scratch = _shuffle, True, _SCRATCH_SUBGROUP
            case n.SubgroupAdd():
                f, rm, scratch = _subgroup_add, True, _SCRATCH_SUBGROUP
            case _:
                raise TypeError(f"unknown expression {shown(e)}")  # unreachable for validated programs
        return f, rm, result_type(e, tys, buffer=buffer), scratch

    # ---- statements --------------------------------------------------------------------------
    def _body(self, stmts: tuple[n.Node, ...], where: Where, ctx: int):
        """Walker: the `_Body` of a statement list; `ctx` is the mask bytes of the enclosing flow."""
        items = []
        for i, s in enumerate(stmts):
            items.append((yield self._stmt(s, Where(where, f"[{i}]"), ctx)))
        return _Body(items)

    def _expr_at(self, e: n.Expr, ctx: int, extra: int = 0):
        code = yield self._expr(e)
        self._peak = max(self._peak, ctx + code.peak + extra)
        return code

    def _stmt(self, s: n.Node, where: Where, ctx: int):
        """Walker: the `_Stmt` of one statement."""
        match s:
            case n.Let(name=name, value=value):
                code = yield self._expr_at(value, ctx)
                self.types[name] = code.type
                self._var_bytes[name] = max(self._var_bytes.get(name, 0), _nbytes(code.type))
                return _Stmt(_let(code.ev, name), False, 0, 1)
            case n.Assign(name=name, value=value):
                code = yield self._expr_at(value, ctx, _ASSIGN_EXTRA)
                return _Stmt(_assign(code.ev, name), False, 0, 1)
            case n.Store(buffer=b, index=index, value=value):
                fi = yield self._expr_at(index, ctx)
                fv = yield self._expr_at(value, ctx, _nbytes(fi.type) + _SCRATCH_STORE)
                decl, ei, ev = self.decls[b], fi.ev, fv.ev
                return _Stmt(lambda r, m: _store(r, decl, ei(r, m), ev(r, m), m), False, 0, 1)
            case n.If(cond=cond, then=then, otherwise=otherwise):
                fc = yield self._expr_at(cond, ctx)
                t = yield self._body(then, Where(where, ".then"), ctx + _MASK_IF)
                o = (yield self._body(otherwise, Where(where, ".else"), ctx + _MASK_IF)) if otherwise else None
                height = 1 + max(t.height, o.height if o else 0)
                may_return = t.may_return or (o is not None and o.may_return)
                return _Stmt(_if(fc.ev, t, o), may_return, height, 1 + t.cost + (o.cost if o else 0))
            case n.Loop(var=var, start=start, end=end, body=body):
                fs = yield self._expr_at(start, ctx)
                fe = yield self._expr_at(end, ctx, 4)
                self.types[var] = DataType.U32
                self._var_bytes[var] = max(self._var_bytes.get(var, 0), 4)
                b = yield self._body(body, Where(where, ".body"), ctx + _MASK_LOOP)
                return _Stmt(_loop(fs.ev, fe.ev, b, var, where), b.may_return, 1 + b.height, 1)
            case n.Barrier(scope=scope):
                self._peak = max(self._peak, ctx + 2)
                return _Stmt(lambda r, m: _barrier(r, m, scope), False, 0, 1)
            case n.Return():
                return _Stmt(_return, True, 0, 1)
            case n.Block(body=body):
                b = yield self._body(body, Where(where, ".block"), ctx)
                return _Stmt(b.enter, b.may_return, 1 + b.height, b.cost)
        raise TypeError(f"unknown statement {shown(s)}")  # unreachable for validated programs


_PLANS: LRUCache[Plan] = LRUCache(256)


def plan(program: Program) -> Plan:
    """The compiled form of `program` (cached by digest)."""
    return _PLANS.get_or_build(program.digest(), lambda: Plan(program))


# ---- launching ---------------------------------------------------------------------------------

def _where(binding: Binding) -> str:
    return f"dispatch of {binding.program.name!r} on the reference backend"


def check_launch(binding: Binding) -> None:
    """Raise DispatchError if the launch has more invocations than the CPU interpreter takes."""
    total = binding.invocations
    if total > MAX_INVOCATIONS:
        raise DispatchError(f"{_where(binding)}: the launch has {total} invocations (grid {binding.grid} x "
                            f"workgroup {binding.workgroup}), over the CPU interpreter's limit of "
                            f"{MAX_INVOCATIONS}. Fix: split the work into smaller dispatches or a smaller grid, "
                            "or run on the cuda backend.")


class Launch:
    """A dispatch checked and planned, ready to `run`: `chunk` workgroups at a time."""

    __slots__ = ("binding", "plan", "groups", "chunk", "chunks", "budget", "memory")

    def __init__(self, binding: Binding, plan: Plan, groups: int, chunk: int, budget: Budget, memory: int):
        self.binding, self.plan, self.groups, self.chunk = binding, plan, groups, chunk
        self.chunks = -(-groups // chunk) if groups else 0  # how many chunks one run of the program takes
        self.budget, self.memory = budget, memory

    def run(self, changes: list | None = None) -> None:
        """Run the program in place on the binding's arrays, `fixpoint_iterations` times; where
        `changes` is given, True is appended to it once a store or atomic changes a buffer's bits."""
        b, p, budget, total, chunks = self.binding, self.plan, self.budget, self.groups, self.chunks
        if chunks == 0 or b.invocations == 0:
            return
        iterations = b.config.fixpoint_iterations
        need = budget.used + (iterations - 1) * (b.invocations + STATEMENT_UNITS * chunks) * max(p.body.cost, 1)
        if need > budget.limit >= 0:  # a bound from below: refused now rather than after hours of iterations
            raise DispatchError(
                f"dispatch of {p.name!r} on the reference backend: {iterations} fixpoint iterations need at least "
                f"{need:.3g} work units, over its work budget of {budget.limit:.3g}; refused before the first. Fix: "
                "dispatch fewer iterations, raise the budget with "
                f"vyre_numba.reference.ReferenceBackend(work_budget=...) or ${WORK_ENV}, or run on the cuda backend.")
        try:
            with np.errstate(all="ignore"):
                for it in range(iterations):
                    if it:
                        budget.used += (b.invocations + STATEMENT_UNITS * chunks) * max(p.body.cost, 1)
                        budget.check(p.name, f"fixpoint iteration {it + 1} of {iterations}")
                    if chunks == 1:
                        p.run(_Run(p, b.arrays, geometry(b.grid, b.workgroup), budget, changes))
                        continue
                    full: dict = {}
                    rest: dict = {}  # the last chunk may be shorter: its own offset-free builtins
                    for first in range(0, total, self.chunk):
                        if first:
                            budget.check(p.name, f"the chunk from workgroup {first} of {total}, fixpoint "
                                                 f"iteration {it + 1} of {iterations}")
                        count = min(self.chunk, total - first)
                        geo = Geometry(b.grid, b.workgroup, first, count, full if count == self.chunk else rest)
                        p.run(_Run(p, b.arrays, geo, budget, changes))
                        del geo  # before the next chunk's geometry is built
        except MemoryError as e:
            raise HostMemoryError(f"{_where(b)}: out of host memory{told(e)}. Fix: dispatch less data at a time, or "
                                f"lower the reference backend's memory budget (${MEMORY_ENV}, now {self.memory} "
                                "bytes) so that it runs in smaller chunks.") from e


def prepare(binding: Binding, memory: int, work: int | Budget, reserved: int = 0) -> Launch:
    """Check `binding` against the interpreter's limits and plan its chunks: as many whole
    workgroups at a time as `memory` bytes (less `reserved` bytes held elsewhere for the
    dispatch) allow. `work` is the work budget (a fresh `Budget` of that many units, or one to
    share). Raises DispatchError, before anything runs, where no chunk fits."""
    check_launch(binding)
    p = plan(binding.program)
    g, wg = binding.grid, binding.workgroup
    total = g[0] * g[1] * g[2]
    budget = work if isinstance(work, Budget) else Budget(work)
    per_wg = p.workgroup_bytes(wg)
    room = memory - reserved
    if per_wg * total <= room:
        return Launch(binding, p, total, total, budget, memory)
    chunk = max(room, 0) // per_wg
    fix = ("raise the budget with vyre_numba.reference.ReferenceBackend(memory_budget=...) or "
           f"${MEMORY_ENV} (now {memory} bytes), or dispatch less data at a time")
    held = f", besides the {reserved} bytes of copies it keeps to undo a failed dispatch," if reserved else ""
    if p.grid_barrier:
        raise DispatchError(f"{_where(binding)}: the program has a grid barrier, so all {total} workgroups run at "
                            f"once, which needs about {per_wg * total} bytes of host memory{held} over the reference "
                            f"backend's memory budget of {memory} bytes. Fix: {fix}, or split the program at the "
                            "grid barrier into two dispatches.")
    if chunk < 1:
        smaller = ", or use a smaller workgroup" if reserved < memory else ""  # no room at all past the copies
        raise DispatchError(f"{_where(binding)}: one workgroup of {wg} invocations needs about {per_wg} bytes of "
                            f"host memory{held} over the reference backend's memory budget of {memory} bytes. "
                            f"Fix: {fix}{smaller}.")
    return Launch(binding, p, total, chunk, budget, memory)


def execute(binding: Binding, *, memory: int | None = None, work: int | None = None) -> None:
    """Run `binding.program` in place on `binding.arrays`, `fixpoint_iterations` times, within
    `memory` bytes of working memory and `work` units of loop work (None: the configured budgets,
    see `memory_budget` and `work_budget`)."""
    prepare(binding, memory_budget(memory), work_budget(work)).run()
