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

from dataclasses import dataclass

from . import nodes as n
from .optimizer import _bodies, _exprs, _rebuild, _transform, _with_exprs, map_statements
from .program import Access, BufferDecl, Program, Role, walk
from .recursion import drive
from .types import DataType

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
        else:
            why = _hazard(shapes, facts, groups[-1] + [k])
        if groups and why is None:
            groups[-1].append(k)
        else:
            if groups:
                boundaries.append(Boundary(k - 1, why))
            groups.append([k])
    return groups, boundaries


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
    registers = [key for key, d in decls.items() if key in scratch and d["write"] and d["own"]
                 and (d["size"] >= invocations or _guarded(body, d["name"], d["size"]))
                 and not _atomic_on(body, d["name"])]
    buffers = []
    for key, d in decls.items():
        if key in registers:
            forwarded, early = _forward(body, d["name"], d["dtype"])
            if early:  # it may be read before the group writes it: it carries data in, so it stays memory
                registers.remove(key)
            else:
                body = forwarded
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


def _atomic_on(body, name: str) -> bool:
    return any(isinstance(x, n.Atomic) and x.buffer == name for x in walk(tuple(body)))


def _forward(body: list[n.Node], name: str, dtype: DataType) -> tuple[list[n.Node], bool]:
    """Buffer `name` (touched only at INDEX) as the variable `_r_<name>`: stores assign it, loads
    read it; and whether some path may read it before writing it (then the buffer's contents
    matter and it must stay a buffer)."""
    reg = f"_r_{name}"
    early = [False]

    def expr(e, written: bool):
        def node(x, kids):
            if isinstance(x, n.Load) and x.buffer == name:
                early[0] |= not written
                return n.Var(reg)
            return _rebuild(x, kids)
        return _transform(e, node)

    def block(stmts, written: bool):  # a walk for drive: (statements, whether every path wrote it)
        out = []
        for s in stmts:
            t = _with_exprs(s, [expr(e, written) for e in _exprs(s)])
            if isinstance(t, n.Store) and t.buffer == name:
                out.append(n.Assign(reg, t.value))
                written = True
                continue
            if isinstance(t, n.If):
                then, w1 = yield block(t.then, written)
                other, w2 = yield block(t.otherwise, written)
                t, written = n.If(t.cond, tuple(then), tuple(other)), w1 and w2
            elif isinstance(t, n.Loop):
                inner, _ = yield block(t.body, written)
                t = n.Loop(t.var, t.start, t.end, tuple(inner))
            elif isinstance(t, n.Block):
                inner, written = yield block(t.body, written)
                t = n.Block(tuple(inner))
            out.append(t)
        return out, written

    out, _ = drive(block(body[1:], False))
    return [body[0], n.Let(reg, n.lit(False if dtype is DataType.BOOL else 0, dtype))] + out, early[0]


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
    for s in stmts:
        prev = out[-1] if out else None
        if (isinstance(s, n.If) and isinstance(prev, n.If) and prev.cond.equals(s.cond)
                and all(isinstance(x, (n.Var, n.Lit, n.BinOp, n.UnOp, n.Cast)) and
                        (not isinstance(x, n.Var) or x.name == INDEX) for x in walk((s.cond,)))
                and not _redeclares(prev.then, s.then) and not _redeclares(prev.otherwise, s.otherwise)):
            out[-1] = n.If(s.cond, prev.then + s.then, prev.otherwise + s.otherwise)
        else:
            out.append(s)
    return out


def _redeclares(first, second) -> bool:
    """Whether `second`, placed after `first` in one block, declares a name that `first` declares
    at the block's top level (the validator refuses that)."""
    top = {x.name for x in first if isinstance(x, n.Let)}
    return any(isinstance(x, n.Let) and x.name in top or isinstance(x, n.Loop) and x.var in top
               for x in walk(tuple(second)))


def _guarded(body: list[n.Node], name: str, size: int) -> bool:
    """Whether every access to buffer `name` lies in the then-branch of an `if (_i < L)` with
    L <= size, so no invocation past the buffer's end touches it (there a load would read 0 and
    a store would be dropped, which a variable would not mimic)."""
    stack = [(s, False) for s in body]
    while stack:
        s, safe = stack.pop()
        if not safe and any(isinstance(x, (n.Load, n.Store, n.Atomic)) and x.buffer == name
                            for e in _exprs(s) for x in walk((e,))):
            return False
        if not safe and isinstance(s, n.Store) and s.buffer == name:
            return False
        if isinstance(s, n.If):
            c = s.cond
            bound = (isinstance(c, n.BinOp) and c.op == "lt" and isinstance(c.a, n.Var) and c.a.name == INDEX
                     and isinstance(c.b, n.Lit) and not c.b.dtype.is_float and int(c.b.raw) <= size)
            stack += [(x, safe or bound) for x in s.then] + [(x, safe) for x in s.otherwise]
        else:
            stack += [(x, safe) for b in _bodies(s) for x in b]
    return True


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
