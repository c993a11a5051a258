"""The reference interpreter: every invocation of a launch runs in lockstep, statement by statement.

A program is compiled once (cached by digest) into nested closures. Each variable holds one NumPy
array with every invocation's value, of shape (n,) or (1,) when all invocations share it.
Invocations are numbered in invocation order (workgroups in linear order, then the linear local
index), so array order is the order atomics and plain stores apply in. Divergent control flow runs
under an active mask: `None` means every invocation is active (the fast path, no masking work);
otherwise a bool array that already excludes returned invocations. Inactive invocations may
compute throwaway values (every operation is total); only stores, atomics and assignments look at
the mask.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

from ..bindings import Binding
from ..errors import DispatchError
from ..ir import DataType, Program
from ..ir import nodes as n
from ..ir.program import Role, walk
from . import ops

MAX_INVOCATIONS = 1 << 28
MAX_WORKGROUP_BYTES = 1 << 31
Expr = Callable[["_Run", "np.ndarray | None"], np.ndarray]
Stmt = Callable[["_Run", "np.ndarray | None"], None]
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


# ---- launch geometry ---------------------------------------------------------------------------

class Geometry:
    """Builtins of one launch shape, built lazily and shared (read-only) between dispatches."""

    def __init__(self, grid: tuple[int, int, int], wg: tuple[int, int, int]):
        self.grid, self.wg = grid, wg
        self.W, self.G = wg[0] * wg[1] * wg[2], grid[0] * grid[1] * grid[2]
        self.n = self.W * self.G
        self.S = -(-self.W // 32)  # subgroups per workgroup
        self.one_d = grid[1] == grid[2] == wg[1] == wg[2] == 1
        self.iota = _ro(np.arange(self.n, dtype=_U32))
        self._cache: dict = {}

    def _memo(self, key, make: Callable[[], np.ndarray]) -> np.ndarray:
        if key not in self._cache:
            self._cache[key] = _ro(make())
        return self._cache[key]

    @property
    def local_linear(self) -> np.ndarray:
        return self.iota if self.G == 1 else self._memo("l", lambda: self.iota % _U32(self.W))

    @property
    def wg_linear(self) -> np.ndarray:
        return self._memo("wgl", lambda: self.iota // _U32(self.W))

    def builtin(self, name: str, axis: int) -> np.ndarray:
        return self._memo((name, axis), lambda: self._make(name, axis))

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
        """Offset of each invocation's workgroup in a flat (num_workgroups * count) buffer."""
        return self._memo(("base", count), lambda: self.wg_linear.astype(np.int64) * count)

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
        return self._memo("lanes", lambda: np.tile(np.array([32] * (self.S - 1) + [last]), self.G))


_GEOMETRIES: "OrderedDict[tuple, Geometry]" = OrderedDict()
_CACHE_LOCK = threading.Lock()  # dispatches may come from several threads


def geometry(grid: tuple[int, int, int], wg: tuple[int, int, int]) -> Geometry:
    """The (cached) Geometry of a launch."""
    key = (tuple(grid), tuple(wg))
    with _CACHE_LOCK:
        g = _GEOMETRIES.pop(key, None) or Geometry(*key)
        _GEOMETRIES[key] = g
        while len(_GEOMETRIES) > 4:
            _GEOMETRIES.popitem(last=False)
    return g


# ---- one run of the program --------------------------------------------------------------------

class _Run:
    """The mutable state of one run: buffers, variables and which invocations have returned."""

    __slots__ = ("plan", "geo", "n", "iota", "bufs", "lens", "vars", "ret")

    def __init__(self, plan: "Plan", arrays: dict[str, np.ndarray], geo: Geometry):
        self.plan, self.geo, self.n, self.iota = plan, geo, geo.n, geo.iota
        self.bufs = dict(arrays)
        for b in plan.shared:
            self.bufs[b.name] = np.zeros(geo.G * b.count, b.dtype.storage)
        self.lens = {name: np.array([a.size if name not in plan.shared_counts else plan.shared_counts[name]], _U32)
                     for name, a in self.bufs.items()}
        self.vars: dict[str, np.ndarray] = {}
        self.ret: np.ndarray | None = None

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
    if decl.access.value == "workgroup":
        return arr, r.geo.wg_base(decl.count) + idx, decl.count
    return arr, idx, arr.size


def _load(r: _Run, decl, idx: np.ndarray, copy: bool) -> np.ndarray:
    arr, eff, bound = _address(r, decl, idx)
    size = arr.size
    if idx is r.iota and eff is idx:
        if size >= r.n:
            v = arr[:r.n].copy() if copy else arr[:r.n]
        else:
            v = np.zeros(r.n, arr.dtype)
            v[:size] = arr
    elif idx.shape[0] == 1 and eff is idx:
        i = int(idx[0])
        v = arr[i:i + 1].copy() if i < bound else np.zeros(1, arr.dtype)
    elif size and int(idx.max()) < bound:
        v = arr.take(eff)
    else:
        inb = idx < bound
        v = np.where(inb, arr.take(np.where(inb, eff, 0)) if size else 0, arr.dtype.type(0))
    return ops.from_storage(v, decl.dtype)


def _store(r: _Run, decl, idx: np.ndarray, value: np.ndarray, m) -> None:
    arr, eff, bound = _address(r, decl, idx)
    v = ops.to_storage(value, decl.dtype)
    if idx is r.iota and eff is idx and m is None:
        k = min(r.n, arr.size)
        arr[:k] = v[:k] if v.shape[0] != 1 else v
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


def _cas_in_order(arr, ts, vs, es, starts, seg) -> np.ndarray:
    """compare_exchange applied one after another on targets sorted stably (ts)."""
    longest = int(np.diff(np.append(starts, ts.size)).max())
    if longest <= 64:  # vectorise across elements, step through the k-th update of each
        old = np.empty_like(vs)
        rank = np.arange(ts.size) - starts[seg]
        for k in range(longest):
            sel = np.flatnonzero(rank == k)
            cur = arr[ts[sel]]
            old[sel] = cur
            arr[ts[sel]] = np.where(cur == es[sel], vs[sel], cur)
        return old
    state: dict[int, int] = {}
    out = []
    for i, v, e in zip(ts.tolist(), vs.tolist(), es.tolist()):
        cur = state[i] if i in state else arr[i].item()
        out.append(cur)
        if cur == e:
            state[i] = v
    for i, v in state.items():
        arr[i] = v
    return np.array(out, dtype=arr.dtype)


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
        out[pos] = _apply_atomic(arr, op, t, _full(val, r.n)[pos], e)
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
                           f"{k // r.geo.S} had {active[k]} of its {r.geo.lanes[k]} lanes active",
                     "call subgroup operations where every lane of the subgroup takes the same path "
                     "(outside if/loop conditions that differ within a subgroup, and before any early "
                     "return); compute a per-lane choice with ir.select instead")


def _ballot(r: _Run, c: np.ndarray) -> np.ndarray:
    bits = np.packbits(r.geo.pad(c), axis=1, bitorder="little").view("<u4").astype(_U32)
    return r.geo.unpad(np.repeat(bits, 32, axis=1))


def _shuffle(r: _Run, v: np.ndarray, lane: np.ndarray) -> np.ndarray:
    vp = r.geo.pad(v)
    if lane.shape[0] == 1:
        L = int(lane[0])
        col = vp[:, L] if L < 32 else np.zeros(vp.shape[0], vp.dtype)
        return r.geo.unpad(np.repeat(col[:, None], 32, axis=1))
    lp = r.geo.pad(lane)
    ok = lp < 32
    got = np.take_along_axis(vp, np.where(ok, lp, 0).astype(np.intp), axis=1)
    return r.geo.unpad(np.where(ok, got, vp.dtype.type(0)))


def _subgroup_add(r: _Run, v: np.ndarray) -> np.ndarray:
    s = r.geo.pad(v).sum(axis=1, dtype=v.dtype)  # wraps
    return r.geo.unpad(np.repeat(s[:, None], 32, axis=1))


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
        where = f"workgroup {k}" if scope == "workgroup" else "the grid"
        raise r.fail(f"barrier({scope!r})", f"was reached by {act[k]} of the {run[k]} running invocations "
                                            f"of {where} (divergent control flow)",
                     f"place the barrier where every invocation of the {scope} that has not returned reaches "
                     "it: outside if branches and loops whose condition or trip count differs between "
                     "invocations, and not after an early return taken by only some of them")


# ---- compilation -------------------------------------------------------------------------------

class Plan:
    """A program compiled to closures, plus what execution needs to know about it."""

    def __init__(self, program: Program):
        self.name = program.name
        self.decls = {b.name: b for b in program.buffers}
        self.shared = [b for b in program.buffers if b.role is Role.SHARED]
        self.shared_counts = {b.name: b.count for b in self.shared}
        self.written = {x.buffer for x in walk(program.entry) if isinstance(x, (n.Store, n.Atomic))}
        self.types: dict[str, DataType] = {}
        self.body = self._body(program.entry)

    # expressions: each compiles to (closure, type)
    def _expr(self, e: n.Expr) -> tuple[Expr, DataType]:
        if isinstance(e, n.Lit):
            a = ops.literal(e.raw, e.dtype)
            return (lambda r, m: a), e.dtype
        if isinstance(e, n.Var):
            name = e.name
            return (lambda r, m: r.vars[name]), self.types[name]
        if isinstance(e, n.Load):
            decl, fi = self.decls[e.buffer], self._expr(e.index)[0]
            copy = e.buffer in self.written
            return (lambda r, m: _load(r, decl, fi(r, m), copy)), decl.dtype
        if isinstance(e, n.BufLen):
            name = e.buffer
            return (lambda r, m: r.lens[name]), DataType.U32
        if isinstance(e, n.Builtin):
            name, axis = e.name, e.axis
            return (lambda r, m: r.geo.builtin(name, axis)), DataType.U32
        if isinstance(e, n.BinOp):
            (fa, ta), (fb, _) = self._expr(e.a), self._expr(e.b)
            f = ops.binary(e.op, ta)
            out = DataType.BOOL if e.op in ops.COMPARE else ta
            return (lambda r, m: f(fa(r, m), fb(r, m))), out
        if isinstance(e, n.UnOp):
            fa, ta = self._expr(e.a)
            f = ops.unary(e.op, ta)
            out = (DataType.U32 if e.op in ("popcount", "clz", "ctz") else
                   DataType.BOOL if e.op in n.FLOAT_PRED_UNOPS + n.BOOL_UNOPS else ta)
            return (lambda r, m: f(fa(r, m))), out
        if isinstance(e, n.Select):
            (fc, _), (fa, ta), (fb, _) = self._expr(e.cond), self._expr(e.a), self._expr(e.b)

            def select(r, m):
                c, a, b = fc(r, m), fa(r, m), fb(r, m)
                return (a if c[0] else b) if c.shape[0] == 1 else np.where(c, a, b)
            return select, ta
        if isinstance(e, n.Cast):
            fa, ta = self._expr(e.a)
            f = ops.cast(ta, e.dtype)
            return (lambda r, m: f(fa(r, m))), e.dtype
        if isinstance(e, n.Fma):
            (fa, ta), (fb, _), (fc, _) = self._expr(e.a), self._expr(e.b), self._expr(e.c)
            f = ops.fma(ta)
            return (lambda r, m: f(fa(r, m), fb(r, m), fc(r, m))), ta
        if isinstance(e, n.Atomic):
            decl, op = self.decls[e.buffer], e.op
            fi, fv = self._expr(e.index)[0], self._expr(e.value)[0]
            fx = None if e.expected is None else self._expr(e.expected)[0]
            return (lambda r, m: _atomic(r, decl, op, fi(r, m), fv(r, m),
                                         None if fx is None else fx(r, m), m)), decl.dtype
        if isinstance(e, n.SubgroupBallot):
            fc = self._expr(e.cond)[0]

            def ballot(r, m):
                c = fc(r, m)
                _check_subgroup(r, m, "subgroup_ballot")
                return _ballot(r, c)
            return ballot, DataType.U32
        if isinstance(e, n.SubgroupShuffle):
            (fv, tv), (fl, _) = self._expr(e.value), self._expr(e.lane)

            def shuffle(r, m):
                v, lane = fv(r, m), fl(r, m)
                _check_subgroup(r, m, "subgroup_shuffle")
                return _shuffle(r, v, lane)
            return shuffle, tv
        if isinstance(e, n.SubgroupAdd):
            fv, tv = self._expr(e.value)

            def sg_add(r, m):
                v = fv(r, m)
                _check_subgroup(r, m, "subgroup_add")
                return _subgroup_add(r, v)
            return sg_add, tv
        raise TypeError(f"unknown expression {e!r}")  # unreachable for validated programs

    # statements
    def _body(self, stmts: tuple[n.Node, ...]) -> Stmt:
        compiled = [(self._stmt(s), any(isinstance(x, n.Return) for x in walk((s,)))) for s in stmts]

        def run_body(r: _Run, m) -> None:
            for f, may_return in compiled:
                f(r, m)
                if may_return and r.ret is not None:
                    m = r.live(m)
                    if m is False:
                        return
        return run_body

    def _stmt(self, s: n.Node) -> Stmt:
        if isinstance(s, n.Let):
            f, t = self._expr(s.value)
            self.types[s.name] = t
            name = s.name

            def let(r, m):  # masks only shrink within the variable's scope: no merge needed
                r.vars[name] = f(r, m)
            return let
        if isinstance(s, n.Assign):
            f, name = self._expr(s.value)[0], s.name

            def assign(r, m):
                v = f(r, m)
                r.vars[name] = v if m is None else np.where(m, v, r.vars[name])
            return assign
        if isinstance(s, n.Store):
            decl, fi, fv = self.decls[s.buffer], self._expr(s.index)[0], self._expr(s.value)[0]
            return lambda r, m: _store(r, decl, fi(r, m), fv(r, m), m)
        if isinstance(s, n.If):
            fc = self._expr(s.cond)[0]
            then, other = self._body(s.then), (self._body(s.otherwise) if s.otherwise else None)

            def if_(r, m):
                c = fc(r, m)
                if c.shape[0] == 1:
                    if c[0]:
                        then(r, m)
                    elif other is not None:
                        other(r, m)
                    return
                tm = _narrow(c if m is None else m & c)
                em = _narrow(~c if m is None else m & ~c) if other is not None else False
                if tm is not False:
                    then(r, tm)
                if em is not False:
                    other(r, em)
            return if_
        if isinstance(s, n.Loop):
            (fs, _), (fe, _) = self._expr(s.start), self._expr(s.end)
            self.types[s.var] = DataType.U32
            body, var = self._body(s.body), s.var

            def loop(r, m):
                start, end = fs(r, m), fe(r, m)
                count = np.where(end > start, end - start, _U32(0))
                if m is not None:
                    count = np.where(m, count, _U32(0))
                top = int(count.max())
                same = count.shape[0] == 1 or int(count.min()) == top
                for k in range(top):
                    mk = r.live(m if same else _narrow(count > k))
                    if mk is False:
                        return
                    r.vars[var] = start + _U32(k)
                    body(r, mk)
            return loop
        if isinstance(s, n.Barrier):
            scope = s.scope
            return lambda r, m: _barrier(r, m, scope)
        if isinstance(s, n.Return):
            def return_(r, m):
                if m is None:
                    r.ret = np.ones(r.n, bool)
                else:
                    r.ret = m.copy() if r.ret is None else r.ret | m
            return return_
        if isinstance(s, n.Block):
            return self._body(s.body)
        raise TypeError(f"unknown statement {s!r}")  # unreachable for validated programs


_PLANS: "OrderedDict[str, Plan]" = OrderedDict()


def plan(program: Program) -> Plan:
    """The compiled form of `program` (cached by digest)."""
    key = program.digest()
    with _CACHE_LOCK:
        p = _PLANS.pop(key, None)
    p = p or Plan(program)
    with _CACHE_LOCK:
        _PLANS[key] = p
        while len(_PLANS) > 256:
            _PLANS.popitem(last=False)
    return p


def check_launch(binding: Binding) -> None:
    """Raise DispatchError if the launch is more than the CPU interpreter takes."""
    p = plan(binding.program)
    total = binding.invocations
    where = f"dispatch of {binding.program.name!r} on the reference backend"
    if total > MAX_INVOCATIONS:
        raise DispatchError(f"{where}: the launch has {total} invocations (grid {binding.grid} x workgroup "
                            f"{binding.workgroup}), over the CPU interpreter's limit of {MAX_INVOCATIONS}. "
                            "Fix: split the work into smaller dispatches or a smaller grid, or run on the "
                            "cuda backend.")
    groups = binding.grid[0] * binding.grid[1] * binding.grid[2]
    shared = sum(b.count * b.dtype.nbytes for b in p.shared) * groups
    if shared > MAX_WORKGROUP_BYTES:
        raise DispatchError(f"{where}: workgroup buffers for {groups} workgroups take {shared} bytes, over "
                            f"the reference's {MAX_WORKGROUP_BYTES}. Fix: use fewer or larger workgroups, "
                            "or smaller workgroup buffers.")


def execute(binding: Binding) -> None:
    """Run `binding.program` in place on `binding.arrays`, `fixpoint_iterations` times."""
    check_launch(binding)
    if binding.invocations == 0:
        return
    p = plan(binding.program)
    geo = geometry(binding.grid, binding.workgroup)
    where = f"dispatch of {binding.program.name!r} on the reference backend"
    try:
        with np.errstate(all="ignore"):
            for _ in range(binding.config.fixpoint_iterations):
                p.body(_Run(p, binding.arrays, geo), None)
    except MemoryError as e:
        raise DispatchError(f"{where}: out of host memory ({e}). Fix: dispatch less data at a time.") from e
