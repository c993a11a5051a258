"""Launch fusion: adjacent steps of a resident sequence whose only dependencies are same-index
become one program, so a pipeline of elementwise steps is one kernel and its intermediate buffers
can be registers.

Invariants: a group runs the same 1-D grid of invocations; every buffer some step of the group
writes is touched, by every step of the group, only at the invocation's own index (`invocation_id.x`
or a variable that holds it and is never assigned), so invocation i of a later step reads exactly
what invocation i of the earlier ones left there, as it would after a full launch boundary; no
step of a group has barriers, subgroup operations, workgroup memory or an early return (each would
couple invocations, or skip the steps after it). A boundary that stays says why.

Scratch buffers (written in the group, read back by nobody, at least one element per invocation,
never read before the group writes them) become one variable per invocation: loads after a store
read the variable, stores assign it, and the buffer is never touched. A buffer some path reads
before writing carries data into the group, so it stays a buffer."""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..errors import immutable
from . import nodes as n
from .optimizer import _bodies, _exprs, _rebuild, _transform, _with_exprs, map_statements
from .program import Access, BufferDecl, Program, Role, walk
from .recursion import drive
from .types import DataType
from .validate import MAX_PARAM_BYTES, param_bytes

OWN = n.Builtin("invocation_id", 0)
INDEX = "_i"  # the fused program's one name for the invocation's own index


@dataclass(frozen=True)
class StepShape:
    """What fusion knows of one step: its program, the storage each bound buffer is ((address,
    bytes): equal for the same memory), each bound buffer's element count, and its launch
    (invocations along x, workgroup; invocations None where the launch is not 1-D)."""

    program: Program
    storage: tuple
    sizes: tuple
    invocations: int | None
    workgroup: tuple


@dataclass(frozen=True)
class Boundary:
    """A boundary that stayed: between step `after` and step `after + 1`, and why."""

    after: int
    reason: str

    def __str__(self) -> str:
        return f"after step {self.after}: {self.reason}"


def _own_vars(program: Program) -> set[str]:
    """Top-level variables bound to the invocation's own index and never assigned or bound again."""
    lets: dict[str, int] = {}
    assigned: set[str] = set()
    for x in walk(program.entry):
        if isinstance(x, n.Let):
            lets[x.name] = lets.get(x.name, 0) + 1
        elif isinstance(x, (n.Assign,)):
            assigned.add(x.name)
        elif isinstance(x, n.Loop):
            assigned.add(x.var)
    return {s.name for s in program.entry if isinstance(s, n.Let) and s.value.equals(OWN)
            and lets[s.name] == 1 and s.name not in assigned}


def _is_own(index: n.Expr, own: set[str]) -> bool:
    return index.equals(OWN) or (isinstance(index, n.Var) and index.name in own)


def accesses(program: Program) -> tuple[dict, str | None]:
    """({buffer: (read, written, every access at the own index)}, why the step cannot fuse or None)."""
    for x in walk(program.entry):
        if isinstance(x, n.Barrier):
            return {}, "has a barrier"
        if isinstance(x, n.Return):
            return {}, "returns early (the steps after it would be skipped)"
        if isinstance(x, (n.SubgroupBallot, n.SubgroupShuffle, n.SubgroupAdd)):
            return {}, "uses subgroup operations"
    if any(b.access is Access.WORKGROUP for b in program.buffers):
        return {}, "has workgroup memory"
    own = _own_vars(program)
    # a pure output is zeroed at its step's dispatch: a write of every element, each by its own invocation
    out: dict[str, list] = {b.name: [False, b.role is Role.OUTPUT, True] for b in program.bound_buffers}
    for x in walk(program.entry):
        if isinstance(x, (n.Load, n.Store, n.Atomic)) and x.buffer in out:
            a = out[x.buffer]
            a[0] |= isinstance(x, (n.Load, n.Atomic))
            a[1] |= isinstance(x, (n.Store, n.Atomic))
            a[2] &= _is_own(x.index, own)
    return {k: tuple(v) for k, v in out.items()}, None


def plan(shapes: list[StepShape]) -> tuple[list[list[int]], list[Boundary]]:
    """Groups of consecutive step indices that fuse, and every boundary that stayed with its reason."""
    groups: list[list[int]] = []
    boundaries: list[Boundary] = []
    facts = [accesses(s.program) for s in shapes]
    joined: _Joined | None = None  # the last group's: made with the group
    for k, s in enumerate(shapes):
        why = None
        if not groups:
            pass
        elif facts[k][1] or facts[k - 1][1]:
            bad = k if facts[k][1] else k - 1
            why = f"step {bad} {facts[bad][1]}"
        elif s.invocations is None or shapes[k - 1].invocations is None:
            why = ("a launch is not a plain one-dimensional one (grid and workgroup along x, without "
                   "fixpoint_iterations, cooperative or checked, fuse)")
        elif s.invocations != shapes[k - 1].invocations or s.workgroup != shapes[k - 1].workgroup:
            why = (f"the launches differ ({shapes[k - 1].invocations} invocations of {shapes[k - 1].workgroup} "
                   f"against {s.invocations} of {s.workgroup})")
        elif len(groups[-1]) == 1 or joined.clashes(k):  # one step alone was never checked against itself
            why = _hazard(shapes, facts, groups[-1] + [k])
        if why is None and groups:
            why = joined.too_big(k)
        if groups and why is None:
            groups[-1].append(k)
            joined.add(k)
        else:
            if groups:
                boundaries.append(Boundary(k - 1, why))
            groups.append([k])
            joined = _Joined(shapes, facts)
            joined.add(k)
    return groups, boundaries


class _Joined:
    """What the steps of a group (which `_hazard` passed) bind, kept as steps join it, so that a
    further step is checked against it in the time of its own buffers, not the group's: a long
    chain of fused steps was quadratic. Where it finds a clash, `_hazard` of the whole group says
    which and why."""

    def __init__(self, shapes: list[StepShape], facts: list):
        self.shapes, self.facts = shapes, facts
        self.types: dict = {}  # storage key -> the type it is bound as
        self.written: set = set()  # keys some step writes
        self.elsewhere: set = set()  # keys some step touches at an index other than its own
        self.spans: list = []  # the keys, sorted ((address, bytes): no two overlap)
        self.nodes = 0  # IR nodes of the fused program at most

    def _bound(self, k: int):
        for b, key, size in zip(self.shapes[k].program.bound_buffers, self.shapes[k].storage, self.shapes[k].sizes):
            read, written, own = self.facts[k][0][b.name]
            yield b, key, size, written, (read or written) and not own

    def clashes(self, k: int) -> bool:
        """Whether step k could not join the group (the conditions of `_hazard`, for its buffers)."""
        types, written, elsewhere = {}, set(), set()
        for b, key, size, w, other in self._bound(k):
            first = types.setdefault(key, b.dtype)  # this step's first binding of it
            if self.types.get(key, first) is not b.dtype or first is not b.dtype:
                return True  # bound as another type before, by this step or an earlier one
            if b.role is Role.OUTPUT and size > self.shapes[k].invocations:
                return True
            if w:
                written.add(key)
            if other:
                elsewhere.add(key)
        if any(key in self.elsewhere or key in elsewhere for key in written) or \
                any(key in self.written for key in elsewhere):
            return True
        fresh = sorted(key for key in types if key not in self.types)
        for i, (a, na) in enumerate(fresh):  # the spans were apart: only a new one can overlap
            at = bisect.bisect_left(self.spans, (a, na))
            before = [s for s in (self.spans[at - 1] if at else None, fresh[i - 1] if i else None) if s]
            after = [s for s in (self.spans[at] if at < len(self.spans) else None,
                                 fresh[i + 1] if i + 1 < len(fresh) else None) if s]
            if any(b + nb > a for b, nb in before) or any(c < a + na for c, _ in after):
                return True
        return False

    def too_big(self, k: int) -> str | None:
        """Why step k joining the group would make a kernel past a program's limits, or None."""
        bound = len(self.types) + len({key for key in self.shapes[k].storage if key not in self.types})
        if param_bytes(bound) > MAX_PARAM_BYTES:
            return (f"fused, the steps would bind {bound} buffers, {param_bytes(bound)} bytes of kernel parameters, "
                    f"over the {MAX_PARAM_BYTES}-byte limit")
        if self.nodes + _nodes(self.shapes[k].program) > n.MAX_NODES:
            return f"fused, the steps would be more than MAX_NODES = {n.MAX_NODES:,} IR nodes"
        return None

    def add(self, k: int) -> None:
        self.nodes += _nodes(self.shapes[k].program)
        if self.facts[k][1]:  # a step that cannot fuse is a group of its own: nothing joins it
            return
        for b, key, _, w, other in self._bound(k):
            if key not in self.types:
                self.types[key] = b.dtype
                bisect.insort(self.spans, key)
            if w:
                self.written.add(key)
            if other:
                self.elsewhere.add(key)


def _nodes(program: Program) -> int:
    """IR nodes a step brings to a fused program at most: its statements, and the zeroing and
    index of its bound buffers (renaming and specializing never add any)."""
    return sum(st.size for st in program.entry) + 8 * len(program.bound_buffers) + 4


def _hazard(shapes: list[StepShape], facts: list, group: list[int]) -> str | None:
    """Why the steps of `group` cannot share a kernel (a buffer some of them write is touched at
    another index, or is bound as two types), or None."""
    written, types, bounds = set(), {}, {}
    for k in group:
        for b, key in zip(shapes[k].program.bound_buffers, shapes[k].storage):
            if facts[k][0][b.name][1]:
                written.add(key)
            if types.setdefault(key, b.dtype) is not b.dtype:
                return f"one buffer is bound as {types[key].value} and as {b.dtype.value} (step {k}, `{b.name}`)"
            bounds.setdefault(key, []).append((k, b.name))
    for k in group:
        for b, size in zip(shapes[k].program.bound_buffers, shapes[k].sizes):
            if b.role is Role.OUTPUT and size > shapes[k].invocations:
                return (f"step {k}'s output `{b.name}` is zeroed at its dispatch and has {size} elements, more than "
                        f"the {shapes[k].invocations} invocations that could zero them in a shared kernel")
    spans = sorted(bounds)
    for (a, na), (b, nb) in zip(spans, spans[1:]):
        if b < a + na:
            k, name = bounds[(b, nb)][0]
            return f"`{name}` of step {k} overlaps another buffer of these steps without being it"
    for k in group:
        for b, key in zip(shapes[k].program.bound_buffers, shapes[k].storage):
            if key in written and not facts[k][0][b.name][2] and (facts[k][0][b.name][0] or facts[k][0][b.name][1]):
                writer = next(j for j in group if any(s == key and facts[j][0][d.name][1]
                                                       for d, s in zip(shapes[j].program.bound_buffers, shapes[j].storage)))
                return (f"step {k} touches `{b.name}` at an index other than its own, and step {writer} writes "
                        "that buffer (a kernel boundary orders them)")
    return None


def overlap(a: tuple, b: tuple) -> bool:
    """Whether two (address, bytes) storages share a byte (a view of a buffer shares with it)."""
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def scratch_keys(shapes: list[StepShape], groups: list[list[int]], kept: set) -> list[set]:
    """For each group (of consecutive steps), the storage its steps bind that nothing outside it
    touches: no step outside the group binds storage sharing a byte with it, and none of `kept`
    (read after the group, or held by the caller) shares one. Each storage's first and last
    users, over the storages it overlaps, are found once: groups cost their own steps."""
    first: dict = {}
    last: dict = {}
    for j, sh in enumerate(shapes):
        for k in sh.storage:
            first.setdefault(k, j)
            last[k] = j
    spans = sorted(first)
    # a storage overlaps itself unless it is empty (then it shares a byte with nothing)
    lo = {k: first[k] if k[1] > 0 else len(shapes) for k in spans}
    hi = {k: last[k] if k[1] > 0 else -1 for k in spans}
    for i, a in enumerate(spans):  # sorted by address: what overlaps a starts before a's end
        j = i + 1
        while j < len(spans) and spans[j][0] < a[0] + a[1]:
            b = spans[j]
            if overlap(a, b):
                lo[a], hi[a] = min(lo[a], first[b]), max(hi[a], last[b])
                lo[b], hi[b] = min(lo[b], first[a]), max(hi[b], last[a])
            j += 1
    kept_hit = {k for k in spans if any(overlap(k, o) for o in kept)}
    return [{k for j in g for k in shapes[j].storage if lo[k] >= g[0] and hi[k] <= g[-1] and k not in kept_hit}
            for g in groups]


def fuse_group(shapes: list[StepShape], group: list[int], scratch: set) -> tuple[Program, list]:
    """One program running the steps of `group` in order, and the storage key of each of its
    bound buffers (binding order). `scratch`: storage keys nobody reads after the group."""
    decls: dict = {}
    rename: list[dict[str, str]] = []
    names: set[str] = set()
    facts = {k: accesses(shapes[k].program)[0] for k in group}
    for k in group:
        local = {}
        for b, key, size in zip(shapes[k].program.bound_buffers, shapes[k].storage, shapes[k].sizes):
            a = facts[k][b.name]
            if key not in decls:
                name, j = b.name, 1
                while name in names:  # another buffer of the group has this name: a fresh one
                    name, j = f"{b.name}_{j}", j + 1
                names.add(name)
                decls[key] = {"name": name, "dtype": b.dtype, "size": size, "read": False, "write": False,
                              "output": False, "uniform": True, "own": True}
            d = decls[key]
            d["read"] |= a[0]
            d["write"] |= a[1]
            d["own"] &= a[2]
            d["output"] |= b.output
            d["uniform"] &= b.access is Access.UNIFORM
            local[b.name] = d["name"]
        rename.append(local)
    invocations = shapes[group[0]].invocations
    sizes = {d["name"]: d["size"] for d in decls.values()}
    first: list[n.Node] = []  # zeroing of outputs no earlier step touches: at the top
    steps: list[n.Node] = []
    touched: set[str] = set()
    for local, k in zip(rename, group):
        p = shapes[k].program
        zeros = []
        for b in p.bound_buffers:
            if b.role is Role.OUTPUT:  # what its dispatch would do to element _i
                name = local[b.name]
                zero = n.lit(False if b.dtype is DataType.BOOL else 0, b.dtype)
                store = n.If(n.BinOp("lt", n.Var(INDEX), n.lit(sizes[name], DataType.U32)),
                             (n.Store(name, n.Var(INDEX), zero),))
                (zeros if name in touched else first).append(store)
        steps += zeros + _rename(p.entry, local, _own_vars(p), f"s{k}_")
        touched |= set(local.values())
    body = [n.Let(INDEX, OWN)] + _dead_stores(_merge_guards([_specialize(s, sizes) for s in first + steps]))
    unguarded = _unguarded(body, sizes)
    atomic = {x.buffer for x in walk(tuple(body)) if isinstance(x, n.Atomic)}
    registers = {key for key, d in decls.items() if key in scratch and d["write"] and d["own"]
                 and (d["size"] >= invocations or d["name"] not in unguarded) and d["name"] not in atomic}
    # one read before the group writes it carries data in, so it stays memory
    body, _ = _forward(body, {decls[key]["name"]: decls[key]["dtype"] for key in decls if key in registers})
    buffers = []
    for key, d in decls.items():
        # written buffers are read_write: the zeroing of outputs is in the body, where each step did it;
        # one the steps declare writable but none stores to is read here only, so it is no output either
        access = (Access.UNIFORM if d["uniform"] and not d["write"] else Access.READ_WRITE if d["write"]
                  else Access.READ_ONLY)
        buffers.append(BufferDecl(d["name"], len(buffers), access, d["dtype"], d["size"], d["output"] and d["write"]))
    program = Program(buffers, shapes[group[0]].workgroup, body,
                      name=("fused_" + "_".join(shapes[k].program.name for k in group))[:120])
    return program, list(decls)


def _rename(stmts, buffers: dict[str, str], own: set[str], prefix: str) -> list[n.Node]:
    """The statements with buffers renamed, own-index variables read as INDEX (their lets
    dropped) and every other variable prefixed."""
    def expr(e):
        def node(x, kids):
            match x:
                case n.Var(name=v):
                    return n.Var(INDEX if v in own else prefix + v)
                case n.Load(buffer=b):
                    return n.Load(buffers.get(b, b), kids[0])
                case n.BufLen(buffer=b):
                    return n.BufLen(buffers.get(b, b))
                case n.Atomic(op=op, buffer=b):
                    return n.Atomic(op, buffers.get(b, b), *kids)
            return _rebuild(x, kids)
        return _transform(e, node)

    def one(s):
        if isinstance(s, n.Let) and s.name in own:
            return None
        t = _with_exprs(s, [expr(e) for e in _exprs(s)])
        match t:
            case n.Let(name=v, value=e):
                return n.Let(prefix + v, e)
            case n.Assign(name=v, value=e):
                return n.Assign(prefix + v, e)
            case n.Store(buffer=b, index=i, value=e):
                return n.Store(buffers.get(b, b), i, e)
            case n.Loop(var=v, start=a, end=b, body=body):
                return n.Loop(prefix + v, a, b, body)
        return t
    return map_statements(stmts, one)


def _forward(body: list[n.Node], regs: dict[str, DataType]) -> tuple[list[n.Node], set[str]]:
    """The buffers `regs` names (each touched only at INDEX) as variables `_r_<name>`: stores
    assign them, loads read them; but those some path may read before writing them (their
    contents matter: they stay buffers), returned as the second value. One walk for all of
    them, and a second where some stay."""
    out, early = _forwarded(body, regs)
    if early:  # which ones are read early depends on each one's own loads and stores alone
        out, _ = _forwarded(body, {name: t for name, t in regs.items() if name not in early})
    return out, early


def _forwarded(body: list[n.Node], regs: dict[str, DataType]) -> tuple[list[n.Node], set[str]]:
    early: set[str] = set()

    def expr(e, written: frozenset):
        def node(x, kids):
            if isinstance(x, n.Load) and x.buffer in regs:
                if x.buffer not in written:
                    early.add(x.buffer)
                return n.Var(f"_r_{x.buffer}")
            return _rebuild(x, kids)
        return _transform(e, node)

    def block(stmts, written: frozenset):  # a walk for drive: (statements, the registers every path wrote)
        out = []
        for s in stmts:
            t = _with_exprs(s, [expr(e, written) for e in _exprs(s)])
            if isinstance(t, n.Store) and t.buffer in regs:
                out.append(n.Assign(f"_r_{t.buffer}", t.value))
                written = written | {t.buffer}
                continue
            if isinstance(t, n.If):
                then, w1 = yield block(t.then, written)
                other, w2 = yield block(t.otherwise, written)
                t, written = n.If(t.cond, tuple(then), tuple(other)), w1 & w2
            elif isinstance(t, n.Loop):
                inner, _ = yield block(t.body, written)
                t = n.Loop(t.var, t.start, t.end, tuple(inner))
            elif isinstance(t, n.Block):
                inner, written = yield block(t.body, written)
                t = n.Block(tuple(inner))
            out.append(t)
        return out, written

    if not regs:
        return body, early
    out, _ = drive(block(body[1:], frozenset()))
    lets = [n.Let(f"_r_{name}", n.lit(False if t is DataType.BOOL else 0, t)) for name, t in reversed(regs.items())]
    return [body[0], *lets] + out, early


def _specialize(s: n.Node, sizes: dict[str, int]) -> n.Node:
    """`s` with every buffer length a literal (the fused program declares each buffer's count)."""
    def expr(e):
        def node(x, kids):
            if isinstance(x, n.BufLen):
                return n.lit(sizes[x.buffer], DataType.U32)
            return _rebuild(x, kids)
        return _transform(e, node)

    return map_statements([s], lambda t: _with_exprs(t, [expr(e) for e in _exprs(t)]))[0]


def _merge_guards(stmts: list[n.Node]) -> list[n.Node]:
    """Adjacent ifs on the same condition of the invocation index and literals only (the steps'
    bounds guards) as one if: the condition cannot change between them. Ifs stay apart where a
    variable of the second would redeclare one the first's branch declares."""
    out: list[n.Node] = []
    run = None  # the if merged into: [it, its then, its otherwise, the names each branch's top declares]
    for s in stmts:
        if (run is not None and isinstance(s, n.If) and run[0].cond.equals(s.cond)
                and all(isinstance(x, (n.Var, n.Lit, n.BinOp, n.UnOp, n.Cast)) and
                        (not isinstance(x, n.Var) or x.name == INDEX) for x in walk((s.cond,)))
                and not _redeclares(run[3], s.then) and not _redeclares(run[4], s.otherwise)):
            run[1] += s.then
            run[2] += s.otherwise
            run[3] |= _declared(s.then)
            run[4] |= _declared(s.otherwise)
            continue
        _close(run, out)
        run = [s, list(s.then), list(s.otherwise), _declared(s.then), _declared(s.otherwise)] \
            if isinstance(s, n.If) else None
        if run is None:
            out.append(s)
    _close(run, out)
    return out


def _close(run, out: list) -> None:
    """The if of a merge run, as one if of all its branches (the first if itself where none merged)."""
    if run is not None:
        first = run[0]
        same = len(run[1]) == len(first.then) and len(run[2]) == len(first.otherwise)
        out.append(first if same else n.If(first.cond, tuple(run[1]), tuple(run[2])))


def _declared(block) -> set[str]:
    return {x.name for x in block if isinstance(x, n.Let)}


def _redeclares(top: set[str], second) -> bool:
    """Whether `second`, placed after a block whose top level declares `top`, declares one of
    those names (the validator refuses that)."""
    return any(isinstance(x, n.Let) and x.name in top or isinstance(x, n.Loop) and x.var in top
               for x in walk(tuple(second)))


def _unguarded(body: list[n.Node], sizes: dict[str, int]) -> set[str]:
    """The buffers with some access outside the then-branch of every `if (_i < L)` with L <= the
    buffer's size: an invocation past its end may touch them (there a load would read 0 and a
    store would be dropped, which a variable would not mimic). One walk, the tightest enclosing
    L carried down."""
    found: set[str] = set()
    stack = [(s, None) for s in body]
    while stack:
        s, bound = stack.pop()
        touched = [x.buffer for e in _exprs(s) for x in walk((e,)) if isinstance(x, (n.Load, n.Store, n.Atomic))]
        if isinstance(s, n.Store):
            touched.append(s.buffer)
        found.update(b for b in touched if bound is None or bound > sizes.get(b, -1))
        if isinstance(s, n.If):
            c = s.cond
            guard = (isinstance(c, n.BinOp) and c.op == "lt" and isinstance(c.a, n.Var) and c.a.name == INDEX
                     and isinstance(c.b, n.Lit) and not c.b.dtype.is_float)
            inner = bound if not guard else int(c.b.raw) if bound is None else min(bound, int(c.b.raw))
            stack += [(x, inner) for x in s.then] + [(x, bound) for x in s.otherwise]
        else:
            stack += [(x, bound) for b in _bodies(s) for x in b]
    return found


def _dead_stores(stmts: list[n.Node]) -> list[n.Node]:
    """Drop a store of buf[_i] that a later store of buf[_i] in the same block overwrites with
    nothing in between reading buf (an output's zeroing, then the step's own store)."""
    return drive(_dead_stores_in(stmts))[0]


def _reads(nodes) -> set[str]:
    return {x.buffer for x in walk(nodes) if isinstance(x, (n.Load, n.Atomic, n.BufLen))}


def _dead_stores_in(stmts):
    """A walk for drive: (the statements without their dead stores, the buffers they read); an if's
    reads are its branches' (returned up, so nested ifs are walked once, not once per level)."""
    out: list = []
    pending: dict[str, int] = {}
    read: set[str] = set()
    for s in stmts:
        if isinstance(s, n.If):
            then, r1 = yield _dead_stores_in(list(s.then))
            other, r2 = yield _dead_stores_in(list(s.otherwise))
            s, reads = n.If(s.cond, tuple(then), tuple(other)), r1 | r2 | _reads((s.cond,))
        else:
            reads = _reads((s,))
        read |= reads
        for b in reads:
            pending.pop(b, None)
        if isinstance(s, n.Store) and isinstance(s.index, n.Var) and s.index.name == INDEX:
            if s.buffer in pending:
                out[pending[s.buffer]] = None
            pending.pop(s.buffer, None)
            if not any(isinstance(x, n.Atomic) for x in walk((s.value,))):  # an atomic's effect must stay
                pending[s.buffer] = len(out)
        elif not isinstance(s, (n.Let, n.Assign)):
            pending.clear()  # a nested or other statement may store conditionally: keep what came before
        out.append(s)
    return [s for s in out if s is not None], read


immutable(StepShape, Boundary)
