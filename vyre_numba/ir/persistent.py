"""A resident sequence as one persistent program: the megakernel. Each group of steps that fusion
merges (`ir.fusion.plan`) becomes a stage; stages run one after another in the same launch, each
over its own invocations in a grid-stride loop, with a grid barrier only at the boundaries fusion
kept. Optionally the stages repeat, round after round, until a change flag stays zero.

Names: the steps' variables are prefixed `g<stage>_` and their buffers keep names that never start
with `_`; every name the program adds starts with `_`, so none can meet a step's.

Invariants: stage g runs invocations 0..G_g-1 of its step's 1-D launch, `_i = gid + j * stride`
for j = 0, 1, ...; G_g and the stride are multiples of the workgroup, so a whole workgroup takes an
iteration or skips it and workgroup barriers inside a stage stay uniform; a pure output of a stage
is zeroed (as its dispatch would) after every earlier access to it and before the stage, with a
grid barrier between; the change flag is cleared by one invocation at the start of a round, a grid
barrier orders that before the stages' stores, another orders their stores before every
invocation reads it, and a third orders those reads before the next round's clearing (so the flag
keeps what the last round set, as after running the steps); every invocation reads the same flag,
so a converged round returns everywhere at once (no barrier is left waiting, and no empty rounds
are spun through to `max_rounds`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import immutable
from . import nodes as n
from .fusion import StepShape, fuse_group, _rename
from .optimizer import _exprs, _rebuild, _transform, _with_exprs, map_statements
from .program import Access, BufferDecl, Program, Role, walk
from .types import DataType

U32 = DataType.U32
STATS = ("megakernel", "stats")  # the storage key of the rounds/converged words the program writes
MAX_INVOCATIONS = 1 << 31  # a stage's `gid + j * stride` stays below 2**32


@dataclass(frozen=True, eq=False)  # by identity: it holds a list
class Persistent:
    """What `build` made: the program, the storage key of each bound buffer (binding order; the
    last is `STATS` when the rounds are counted), and the grid barriers one round runs."""

    program: Program
    keys: list
    barriers: int


def why_not(shapes: list[StepShape]) -> str | None:
    """Why these steps cannot run as one persistent program, or None."""
    wg = shapes[0].workgroup
    types: dict = {}
    for k, s in enumerate(shapes):
        if s.invocations is None:
            return f"step {k}'s launch is not a plain one-dimensional one (grid and workgroup along x only)"
        if s.workgroup != wg:
            return f"the steps' workgroups differ ({wg} in step 0, {s.workgroup} in step {k})"
        if s.invocations >= MAX_INVOCATIONS:
            return f"step {k} launches {s.invocations} invocations, 2**31 or more"
        for x in walk(s.program.entry):
            if isinstance(x, n.Return):
                return f"step {k} returns early (inside one launch it would skip the grid barriers)"
            if isinstance(x, n.Barrier) and x.scope == "grid":
                return f"step {k} has a grid barrier of its own"
        for b, key in zip(s.program.bound_buffers, s.storage):
            if types.setdefault(key, b.dtype) is not b.dtype:
                return f"one buffer is bound as {types[key].value} and as {b.dtype.value} (step {k}, `{b.name}`)"
    spans = sorted(types)
    for a, b in zip(spans, spans[1:]):
        if b[0] < a[0] + a[1]:
            return "two buffers of the steps overlap without being the same buffer"
    return None


def build(shapes: list[StepShape], groups: list[list[int]], scratch: list[set], *, flag=None,
          max_rounds: int = 1, name: str | None = None) -> Persistent:
    """One program running `groups` (fusion's groups of step indices, in order) as stages with a
    grid barrier between them, `max_rounds` times; with `flag` (the storage key of a bound buffer),
    until a round leaves its element 0 zero. `scratch[g]`: storage keys group g may keep in registers."""
    wg = shapes[0].workgroup[0]
    decls: dict = {}
    names = _Names(shapes)
    stages, zeros, touched = [], [], []
    for g, group in enumerate(groups):
        if len(group) > 1:
            program, keys = fuse_group(shapes, group, scratch[g])
        else:
            program, keys = shapes[group[0]].program, list(shapes[group[0]].storage)
        local: dict[str, str] = {}
        for b, key in zip(program.bound_buffers, keys):
            local[b.name] = names.declare(decls, key, b)
        for b in program.buffers:
            if b.is_shared:
                local[b.name] = f"_w{g}_{b.name}"
                decls[("shared", g, b.name)] = BufferDecl.workgroup(local[b.name], b.count, b.dtype)
        invocations = shapes[group[0]].invocations
        body = _rename(program.entry, local, set(), f"g{g}_")
        shared = [b for b in program.buffers if b.is_shared]
        if shared:  # a dispatch starts each workgroup's memory zeroed: so does every stride
            body = ([n.Barrier("workgroup")] + [_zero_shared(f"_w{g}_{b.name}", local[b.name], b, wg) for b in shared]
                    + [n.Barrier("workgroup")] + body)
        stages.append(_stride_loop(f"_g{g}", invocations, _at(body, f"_g{g}_idx", wg, invocations)))
        outputs = [] if len(group) > 1 else [(b, key) for b, key in zip(program.bound_buffers, keys)
                                             if b.role is Role.OUTPUT]  # a fused group zeroes its own
        zeros.append({local[b.name]: _zeroing(f"_z{g}_{i}", local[b.name], decls[key]["size"], b.dtype)
                      for i, (b, key) in enumerate(outputs)})
        touched.append({local[b.name] for b in program.bound_buffers})
    barrier = n.Barrier("grid")
    one_round: list[n.Node] = []
    barriers = 0
    for g, stage in enumerate(stages):
        zero = list(zeros[g].values())
        if g > 0 and zero and not set(zeros[g]) & touched[g - 1]:
            one_round += zero + [barrier]  # the previous stage does not touch them: zeroed beside it
            barriers += 1
        else:
            if g > 0:
                one_round.append(barrier)
                barriers += 1
            if zero:
                one_round += zero + [barrier]
                barriers += 1
        one_round += stage
    body: list[n.Node] = [n.Let("_stride", n.BinOp("mul", n.Builtin("num_workgroups", 0), n.lit(wg, U32)))]
    keys = list(decls)
    first = n.BinOp("eq", n.Builtin("invocation_id", 0), n.lit(0, U32))
    if flag is None:
        body += (one_round if max_rounds == 1 else
                 [n.Loop("_round", n.lit(0, U32), n.lit(max_rounds, U32), tuple(one_round + [barrier]))])
        barriers += 0 if max_rounds == 1 else 1
    else:  # clear, barrier, the stages, barrier, everyone reads the flag, barrier (before the next clear)
        f = decls[flag]
        f["write"] = True  # the program clears it, whether or not a stage stores to it
        zero = n.lit(False if f["dtype"] is DataType.BOOL else 0, f["dtype"])
        clear = n.If(first, (n.Store(f["name"], n.lit(0, U32), zero),))
        def stats(rounds, converged):
            return n.If(first, (n.Store("_stats", n.lit(0, U32), rounds), n.Store("_stats", n.lit(1, U32), n.lit(converged, U32))))
        step = [clear, barrier] + one_round + [
            barrier, n.Let("_changed", n.BinOp("ne", n.Load(f["name"], n.lit(0, U32)), zero)), barrier,
            n.If(n.UnOp("not", n.Var("_changed")),
                 (stats(n.BinOp("add", n.Var("_round"), n.lit(1, U32)), 1), n.Return()))]
        barriers += 3
        body += [n.Loop("_round", n.lit(0, U32), n.lit(max_rounds, U32), tuple(step)), stats(n.lit(max_rounds, U32), 0)]
        keys.append(STATS)
    buffers = [BufferDecl(d["name"], i, Access.READ_WRITE if d["write"] else Access.READ_ONLY, d["dtype"], d["size"])
               for i, d in enumerate(v for k, v in decls.items() if k[0] != "shared")]
    if flag is not None:
        buffers.append(BufferDecl("_stats", len(buffers), Access.READ_WRITE, U32, 2))
    buffers += [d for k, d in decls.items() if k[0] == "shared"]
    keys = [k for k in keys if k[0] != "shared"]
    label = name or ("megakernel_" + "_".join(shapes[g[0]].program.name for g in groups))[:120]
    return Persistent(Program(buffers, (wg, 1, 1), body, name=label), keys, barriers)


class _Names:
    """The program's buffer names, given as storages are first seen: a buffer's own name, else
    the first of name_1, name_2, ... not taken (each name's next suffix kept, and each storage's
    size looked up once: a megakernel of many steps was quadratic in them)."""

    def __init__(self, shapes: list[StepShape]):
        self.taken: set[str] = set()
        self.suffix: dict[str, int] = {}
        self.sizes: dict = {}
        for s in shapes:
            for k, size in zip(s.storage, s.sizes):
                self.sizes.setdefault(k, size)

    def declare(self, decls: dict, key, b: BufferDecl) -> str:
        """The program's name for the storage `key` (declared on first sight), noting whether
        this step writes it."""
        if key not in decls:
            base = b.name if not b.name.startswith("_") else "b" + b.name  # names starting with _ are the program's
            name, j = base, self.suffix.get(base, 1)  # every suffix below the last one given is taken
            while name in self.taken:
                name, j = f"{base}_{j}", j + 1
            if name != base:
                self.suffix[base] = j
            self.taken.add(name)
            decls[key] = {"name": name, "dtype": b.dtype, "size": self.sizes[key], "write": False}
        d = decls[key]
        d["write"] |= b.access.writable
        return d["name"]


def _stride_loop(tag: str, invocations: int, body: list[n.Node]) -> list[n.Node]:
    """`body` for _i = gid, gid + stride, ... below `invocations` (`tag_idx` holds _i). No sum
    here passes 2**32 for any `invocations` below it (a zeroed output may be that long): the trips
    are (invocations - 1) / stride + 1, and an index is taken only where gid < invocations - j * stride."""
    j, off = f"{tag}_j", f"{tag}_off"
    trips = n.lit(0, U32) if invocations == 0 else n.BinOp(
        "add", n.BinOp("div", n.lit(invocations - 1, U32), n.Var("_stride")), n.lit(1, U32))
    gid = n.Builtin("invocation_id", 0)
    return [n.Loop(j, n.lit(0, U32), trips,
                   (n.Let(off, n.BinOp("mul", n.Var(j), n.Var("_stride"))),
                    n.If(n.BinOp("lt", gid, n.BinOp("sub", n.lit(invocations, U32), n.Var(off))),
                         (n.Let(f"{tag}_idx", n.BinOp("add", gid, n.Var(off))), *body))))]


def _zeroing(tag: str, buffer: str, size: int, dtype: DataType) -> n.Node:
    """A grid-stride loop storing zero to every element of `buffer`, as a dispatch zeroes an output."""
    zero = n.lit(False if dtype is DataType.BOOL else 0, dtype)
    return _stride_loop(tag, size, [n.Store(buffer, n.Var(f"{tag}_idx"), zero)])[0]


def _zero_shared(tag: str, buffer: str, b: BufferDecl, wg: int) -> n.Node:
    """Every lane of the workgroup stores zero to its share of workgroup buffer `buffer`."""
    zero = n.lit(False if b.dtype is DataType.BOOL else 0, b.dtype)
    k = n.BinOp("add", n.Builtin("local_id", 0), n.BinOp("mul", n.Var(f"{tag}_e"), n.lit(wg, U32)))
    return n.Loop(f"{tag}_e", n.lit(0, U32), n.lit(-(-b.count // wg), U32),
                  (n.Let(f"{tag}_k", k), n.If(n.BinOp("lt", n.Var(f"{tag}_k"), n.lit(b.count, U32)),
                                             (n.Store(buffer, n.Var(f"{tag}_k"), zero),))))


def _at(stmts, idx: str, wg: int, invocations: int) -> list[n.Node]:
    """The statements with the launch's ids read from invocation `idx` of a 1-D launch of
    `invocations` invocations in workgroups of `wg` (local and subgroup ids are the lane's own)."""
    def expr(e):
        def node(x, kids):
            if isinstance(x, n.Builtin) and x.name in ("invocation_id", "workgroup_id", "num_workgroups"):
                if x.axis:
                    return n.lit(1 if x.name == "num_workgroups" else 0, U32)
                return (n.Var(idx) if x.name == "invocation_id" else
                        n.BinOp("div", n.Var(idx), n.lit(wg, U32)) if x.name == "workgroup_id" else
                        n.lit(invocations // wg, U32))
            return _rebuild(x, kids)
        return _transform(e, node)

    return map_statements(stmts, lambda s: _with_exprs(s, [expr(e) for e in _exprs(s)]))


immutable(Persistent)
