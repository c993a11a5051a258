"""Buffers and programs; the canonical JSON form and the content digest."""
from __future__ import annotations

import enum
import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

from .. import display
from ..errors import (INTEGERS, IRValidationError, NotACollection, UnknownBufferError, UnsupportedError, VyreError,
                      a_type, clip, did_you_mean, shown)
from . import jsontext
from . import nodes as n
from .recursion import drive
from .types import DataType, TypeLike

FORMAT = "vyre-numba-ir/1"
PTX_RENDERER = None  # Program -> PTX text, set by vyre_numba.ptx (a layer below this one) when it loads


class _Named(enum.Enum):
    """An enum whose values are names: a name that is none of them is an IRValidationError."""

    @classmethod
    def _missing_(cls, value):
        first = next(iter(cls))
        raise IRValidationError(f"{shown(value)} is no {cls.__name__}: one of {', '.join(repr(m.value) for m in cls)}. "
                                f"Fix: pass one of those names, or the member itself ({cls.__name__}.{first.name} "
                                "and the others).")


class Access(_Named):
    """How a program may use a buffer: read_only, read_write, write_only, uniform or workgroup."""
    READ_ONLY = "read_only"
    READ_WRITE = "read_write"
    WRITE_ONLY = "write_only"
    UNIFORM = "uniform"
    WORKGROUP = "workgroup"

    def __repr__(self) -> str:
        return f"Access.{self.name}"

    @property
    def writable(self) -> bool:
        """Whether the program may store to or run atomics on a buffer of this access."""
        return self in (Access.READ_WRITE, Access.WRITE_ONLY, Access.WORKGROUP)


class Role(_Named):
    """What a buffer is to a dispatch: input, output, in-out (both) or shared (workgroup memory)."""
    INPUT = "input"
    OUTPUT = "output"
    INOUT = "inout"
    SHARED = "shared"


@dataclass(frozen=True)
class BufferDecl:
    """A buffer the program reads or writes. `count=0` means sized at dispatch time.
    `output_byte_range=(start, end)` limits what is read back of an output."""

    name: str
    binding: int | None
    access: Access
    dtype: DataType
    count: int = 0
    output: bool = False
    output_byte_range: tuple[int, int] | None = None

    def __post_init__(self):
        where = f"BufferDecl {shown(self.name)}"
        if not isinstance(self.access, Access):
            try:
                object.__setattr__(self, "access", Access(self.access))
            except (IRValidationError, ValueError, TypeError, RecursionError):  # Enum's own message reprs the value
                names = ", ".join(a.value for a in Access)
                raise IRValidationError(f"{where}: access {shown(self.access)} is not one of {names}. Fix: use the "
                                        "constructors BufferDecl.read / read_write / output / uniform / workgroup.") from None
        object.__setattr__(self, "dtype", DataType.parse(self.dtype))
        object.__setattr__(self, "count", _int(self.count, f"{where}: count"))
        if self.binding is not None:
            object.__setattr__(self, "binding", _int(self.binding, f"{where}: binding"))
        if not isinstance(self.output, (bool, np.bool_)):
            raise IRValidationError(f"{where}: output={shown(self.output)} is not a bool. Fix: pass True or False.")
        object.__setattr__(self, "output", bool(self.output))
        r = self.output_byte_range
        if r is not None:
            if isinstance(r, (str, bytes, set, frozenset, dict, NotACollection)) or not hasattr(r, "__len__") \
                    or len(r) != 2:
                raise IRValidationError(f"{where}: output_byte_range={shown(r)} is not a (start, end) pair. "
                                        "Fix: pass two byte offsets, e.g. (0, 64).")
            object.__setattr__(self, "output_byte_range", tuple(_int(v, f"{where}: output_byte_range") for v in r))
        a = self.access
        role = (Role.SHARED if a is Access.WORKGROUP else Role.INOUT if a is Access.READ_WRITE else
                Role.OUTPUT if self.output or a is Access.WRITE_ONLY else Role.INPUT)
        object.__setattr__(self, "_role", role)

    @property
    def role(self) -> Role:
        """Shared (workgroup), in-out (read_write), output (write_only or flagged) or input."""
        return self._role

    @property
    def is_shared(self) -> bool:
        """A workgroup buffer: shared memory of each workgroup, never bound to a kernel parameter."""
        return self._role is Role.SHARED

    @property
    def is_input(self) -> bool:
        """Whether dispatch takes the buffer's contents from the caller (read_only, uniform, read_write)."""
        return self._role is Role.INPUT or self._role is Role.INOUT

    @property
    def is_output(self) -> bool:
        """Whether dispatch returns the buffer (write_only, flagged output, read_write)."""
        return self._role is Role.OUTPUT or self._role is Role.INOUT

    @classmethod
    def read(cls, name: str, binding: int, dtype: TypeLike, count: int = 0) -> "BufferDecl":
        """A read-only input buffer at `binding` (`count=0`: sized by the data at dispatch)."""
        return cls(name, binding, Access.READ_ONLY, dtype, count)

    @classmethod
    def read_write(cls, name: str, binding: int, dtype: TypeLike, count: int = 0,
                   output_byte_range: tuple[int, int] | None = None) -> "BufferDecl":
        """An in-out buffer: starts as the caller's data, comes back as an output."""
        return cls(name, binding, Access.READ_WRITE, dtype, count, True, output_byte_range)

    @classmethod
    def uniform(cls, name: str, binding: int, dtype: TypeLike, count: int = 0) -> "BufferDecl":
        """A read-only input buffer of values every invocation shares (parameters, scalars)."""
        return cls(name, binding, Access.UNIFORM, dtype, count)

    @classmethod
    def workgroup(cls, name: str, count: int, dtype: TypeLike) -> "BufferDecl":
        """Workgroup (shared) memory of `count` elements, zeroed in every workgroup at every run."""
        return cls(name, None, Access.WORKGROUP, dtype, count)

    def __str__(self) -> str:
        size = f"[{self.count}]" if self.count else "[]"
        slot = "" if self.binding is None else f"@{self.binding} "
        return f"{slot}{self.access.value} {self.name}: {self.dtype}{size}{self._range()}"

    def _range(self) -> str:
        """` bytes start..end` where only that range of an output is read back, else nothing."""
        r = self.output_byte_range
        return f" bytes {r[0]}..{r[1]}" if r else ""


def _output(cls, name: str, binding: int, dtype: TypeLike, count: int = 0,
            output_byte_range: tuple[int, int] | None = None) -> BufferDecl:
    """A write-only output buffer (zeroed before each dispatch)."""
    return cls(name, binding, Access.WRITE_ONLY, dtype, count, True, output_byte_range)


# Set after the dataclass is built: the field `output` (a bool on instances) and the constructor
# `BufferDecl.output(...)` share a name, as in vyre.
BufferDecl.output = classmethod(_output)  # type: ignore[assignment]


def _is_int(v) -> bool:
    return isinstance(v, INTEGERS) and not isinstance(v, (bool, np.bool_))


def _int(v, what: str) -> int:
    """`v` as a plain int; bools, floats and other types are refused."""
    if not _is_int(v):
        raise IRValidationError(f"{what} is {shown(v)} ({type(v).__name__}), not an int. Fix: pass a whole number "
                                "(a Python or NumPy int; True/False are not numbers here).")
    return _within_int_bits(int(v), what)


def _within_int_bits(v: int, what: str) -> int:
    """`v`, or an IRValidationError where it is past `n.MAX_INT_BITS`: the validator says what is wrong
    with a smaller one in its context."""
    if v.bit_length() > n.MAX_INT_BITS:
        raise IRValidationError(f"{what} is {shown(v)}, which no count, size or offset here is. Fix: pass a value "
                                "that fits in 32 bits.")
    return v


def _norm_wg(ws) -> tuple[int, int, int]:
    given = ws

    def bad() -> IRValidationError:  # built only when raised: no repr of a valid size on every call
        return IRValidationError(f"workgroup_size {shown(given)} is not 1 to 3 ints. Fix: pass e.g. 256 or (16, 16).")
    if isinstance(ws, np.ndarray) and ws.ndim == 0 and ws.dtype.kind in "iu":  # a 0-d array is its one int
        ws = ws.item()
    if _is_int(ws):
        return (_within_int_bits(int(ws), "workgroup_size"), 1, 1)
    if isinstance(ws, (str, bytes, set, frozenset, dict)) or not isinstance(ws, Iterable):  # sets have no order
        raise bad()
    try:
        ws = tuple(ws)
    except (TypeError, ValueError):  # a 0-d array of another kind, an iterable that fails
        raise bad() from None
    if not 1 <= len(ws) <= 3 or not all(_is_int(v) for v in ws):
        raise bad()
    return tuple(_within_int_bits(int(v), "workgroup_size") for v in ws) + (1,) * (3 - len(ws))


_DIGEST_SHOWN = 20_000  # IR nodes past which a display leaves a digest not yet made to program.digest()


@dataclass(frozen=True, eq=True, init=False)
class Program(NotACollection):
    """A vyre program: buffers, the workgroup shape, and the statement body every invocation runs.
    Weak literals in the body are typed from their context at construction."""

    _collection_fix = ("read its parts by name: program.buffers (the declarations), program.entry (the "
                       "statements), program.workgroup_size.")

    buffers: tuple[BufferDecl, ...]
    workgroup_size: tuple[int, int, int]
    entry: tuple[n.Node, ...]
    name: str = "main"
    _digest: str | None = field(default=None, compare=False, repr=False, init=False)

    def __init__(self, buffers: Iterable[BufferDecl], workgroup_size: int | Iterable[int],
                 entry: Iterable[n.Node] | n.Node, name: str = "main"):
        from .validate import resolve_literals

        if not isinstance(name, str):  # the kernel's name, and what to_json writes and from_json reads as one
            raise IRValidationError(f"name={shown(name, 40)} is {a_type(name)}, not a str. Fix: name the program with "
                                    "a string, e.g. name='saxpy' (it names the kernel).")
        if isinstance(buffers, (str, bytes, BufferDecl, NotACollection)) or not isinstance(buffers, Iterable):
            raise IRValidationError(f"buffers={shown(buffers)} is not a list of BufferDecl. "
                                    "Fix: pass a list, e.g. [ir.BufferDecl.read('x', 0, 'f32'), ...].")
        bufs = tuple(buffers)
        for b in bufs:
            if not isinstance(b, BufferDecl):
                raise IRValidationError(f"{shown(b)} is not a BufferDecl. "
                                        "Fix: declare buffers with ir.BufferDecl.read / output / ...")
        object.__setattr__(self, "buffers", bufs)
        bound = [b for b in bufs if not b.is_shared]
        try:
            bound.sort(key=lambda b: b.binding)
        except TypeError:  # a missing binding: validate() names it; keep declaration order meanwhile
            pass
        object.__setattr__(self, "_bound", tuple(bound))
        object.__setattr__(self, "_inputs", tuple(b for b in bound if b.is_input))
        object.__setattr__(self, "_outputs", tuple(b for b in bound if b.is_output))
        object.__setattr__(self, "workgroup_size", _norm_wg(workgroup_size))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_digest", None)
        object.__setattr__(self, "_caps", None)
        object.__setattr__(self, "_guards", None)
        object.__setattr__(self, "_optimized", None)
        body = n._body(entry)
        size = sum(st.size for st in body)  # each statement's is known: nothing is walked to tell
        if size > n.MAX_NODES:
            raise IRValidationError(
                f"this program is {size:,} nodes written out, more than MAX_NODES = {n.MAX_NODES:,}: an expression "
                "used in more than one statement counts once per use (storing each partial sum of s = s + x, N of "
                "them, is N**2 / 2 nodes), and checking, optimizing and running it would walk every one. Fix: bind "
                "a value used more than once to a variable (ir.let('t', e), then ir.var('t')) and use the variable.")
        object.__setattr__(self, "entry", resolve_literals(bufs, body))

    def __hash__(self) -> int:
        return hash(self.digest())

    def __eq__(self, other: Any) -> bool:
        """Structural equality: the same canonical form (name included)."""
        if not isinstance(other, Program):
            return NotImplemented
        return self is other or self.digest() == other.digest()

    def __reduce__(self):
        return Program.from_json, (self.to_json(),)

    @property
    def depth(self) -> int:
        """The deepest nesting of statements and expressions in the body."""
        return max((s.depth for s in self.entry), default=0)

    # ---- lookups --------------------------------------------------------------------------
    def buffer(self, name: str) -> BufferDecl:
        """The declaration of the buffer called `name` (UnknownBufferError, a KeyError, if there is none)."""
        for b in self.buffers:
            if b.name == name:
                return b
        raise UnknownBufferError(f"program {self.name!r} declares no buffer {shown(name)}. Fix: use one of "
                                 f"{[b.name for b in self.buffers]}.")

    @property
    def bound_buffers(self) -> tuple[BufferDecl, ...]:
        """Non-workgroup buffers in binding order: the kernel's parameters."""
        return self._bound

    @property
    def inputs(self) -> tuple[BufferDecl, ...]:
        """The input-role buffers (read_only, uniform, read_write) in binding order."""
        return self._inputs

    @property
    def outputs(self) -> tuple[BufferDecl, ...]:
        """The output-role buffers (write_only, flagged output, read_write) in binding order."""
        return self._outputs

    @property
    def capabilities(self) -> frozenset[str]:
        """Required device capabilities: "subgroup" and/or "grid_sync"."""
        if self._caps is not None:
            return self._caps
        caps = set()
        for x in walk(self.entry, distinct=True):
            if isinstance(x, (n.SubgroupAdd, n.SubgroupBallot, n.SubgroupShuffle)) or (
                    isinstance(x, n.Builtin) and x.name.startswith("subgroup")):
                caps.add("subgroup")
            if isinstance(x, n.Barrier) and x.scope == "grid":
                caps.add("grid_sync")
        object.__setattr__(self, "_caps", frozenset(caps))
        return self._caps

    @property
    def length_guards(self) -> frozenset[str]:
        """The buffers whose length the invocation id along x is compared with (`gid(0) <
        buf_len("x")`, through a `let` too): a guard that says which invocations have work."""
        if self._guards is None:
            def gid(e) -> bool:
                return isinstance(e, n.Builtin) and e.name == "invocation_id" and e.axis == 0
            ids, moved, compared = set(), set(), []  # one walk: lets of the id, assigned names, id-length pairs
            for x in walk(self.entry, distinct=True):
                if isinstance(x, n.Let) and gid(x.value):
                    ids.add(x.name)
                elif isinstance(x, n.Assign):
                    moved.add(x.name)  # a grid-stride index moves on
                elif isinstance(x, n.BinOp) and x.op in ("lt", "le", "gt", "ge"):
                    compared += [(i, b.buffer) for i, b in ((x.a, x.b), (x.b, x.a)) if isinstance(b, n.BufLen)]
            ids -= moved
            guarded = {name for i, name in compared if gid(i) or isinstance(i, n.Var) and i.name in ids}
            object.__setattr__(self, "_guards", frozenset(guarded))
        return self._guards

    # ---- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The program as plain JSON-ready data (what `to_json` writes)."""
        return {"format": FORMAT, "name": self.name, "workgroup_size": list(self.workgroup_size),
                "buffers": [_buf_to_dict(b) for b in self.buffers],
                "entry": to_dict(self.entry)}

    def to_json(self, indent: int | None = None) -> str:
        """Canonical JSON (sorted keys); `from_json(to_json())` gives an equal program."""
        if indent is not None and (isinstance(indent, (bool, np.bool_)) or not isinstance(indent, INTEGERS)
                                   or not 0 <= indent <= 1000):
            raise IRValidationError(f"to_json(indent={shown(indent, 40)}): indent is a number of spaces. Fix: pass "
                                    "an int from 0 to 1000, or None for one line.")
        return jsontext.dumps(self.to_dict(), indent)

    @classmethod
    def from_dict(cls, d: dict) -> "Program":
        """The program of a `to_dict` document; IRValidationError with a Fix if it is not one."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise IRValidationError(f"not a {FORMAT} document (format={shown(d.get('format') if isinstance(d, dict) else None)}). "
                                    "Fix: load a file written by Program.to_json().")
        _known_keys(d, _PROGRAM_KEYS, "the program")
        try:
            for b in d["buffers"]:
                if isinstance(b, dict):
                    _known_keys(b, _BUFFER_KEYS, f"buffer {shown(b.get('name'), 40)}")
            bufs = [BufferDecl(b["name"], b["binding"], b["access"], b["dtype"], b["count"], b["output"],
                               b["output_byte_range"])
                    for b in d["buffers"]]
            return cls(bufs, d["workgroup_size"], _entry_of(d["entry"]), d["name"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise IRValidationError(f"malformed program JSON ({type(e).__name__}: {e}). "
                                    "Fix: load a file written by Program.to_json().") from e

    @classmethod
    def from_json(cls, text: str | bytes) -> "Program":
        """The program of a `to_json` text; IRValidationError with a Fix if it is not one (a text
        is held to what to_json writes, where `from_dict` takes what the ir.* builders take)."""
        d = jsontext.loads(text)
        if isinstance(d, dict) and d.get("format") == FORMAT:
            _header_as_written(d)
            if "entry" in d:
                _as_written(d["entry"])
        program = cls.from_dict(d)
        written = program.to_dict()
        if jsontext.dumps(written) != jsontext.dumps(d):  # what the builders took, but to_json never writes
            where, got, want = _first_difference(d, written)
            raise IRValidationError(f"program JSON has {where} = {shown(got, 60)}, where to_json writes {shown(want, 60)} "
                                    "for the program it describes (a literal's type or weakness, say, that building "
                                    "the program resolves). Fix: load a file written by Program.to_json().")
        return program

    def optimized(self) -> "Program":
        """This program through `ir.optimize` with the default passes (computed once): what the
        CUDA backend compiles unless `DispatchConfig(optimize=False)`; the same results bit for bit."""
        if self._optimized is None:
            from .optimizer import optimize

            opt = optimize(self)
            object.__setattr__(opt, "_optimized", opt)
            object.__setattr__(self, "_optimized", opt)
        return self._optimized

    def digest(self) -> str:
        """Stable SHA-256 hex digest of the canonical JSON form."""
        if self._digest is None:
            object.__setattr__(self, "_digest", hashlib.sha256(self.to_json().encode()).hexdigest())
        return self._digest

    def __str__(self) -> str:
        return "\n".join(self._head() + n.render_body(self.entry, 1) + ["}"])

    def __repr__(self) -> str:  # bounded and one line a row, whatever names it was given (none checked yet)
        lines = self._head() + n.render_short(self.entry, 1, 120, 20) + ["}"]
        return "\n".join(clip(line if line.isprintable() else line.encode("unicode_escape").decode(), 200)
                         for line in lines)

    def _name(self) -> str:
        """The name as a display shows it: as written, unless it is not a short printable string."""
        return self.name if isinstance(self.name, str) and len(self.name) <= 80 and self.name.isprintable() \
            else shown(self.name)

    def _head(self, buffers: int = 20) -> list[str]:
        x, y, z = self.workgroup_size
        more = [f"    ... and {len(self.buffers) - buffers} more buffers"] if len(self.buffers) > buffers else []
        return ([f"program {self._name()} workgroup({x}, {y}, {z}) {{"]
                + ["    " + str(b) for b in self.buffers[:buffers]] + more)

    def _repr_html_(self) -> str:
        x, y, z = self.workgroup_size
        bufs = display.table(((b.name, "" if b.binding is None else b.binding, b.access.value, b.dtype,
                               b.count or "at dispatch", b.role.value + b._range()) for b in self.buffers),
                             ("name", "binding", "access", "type", "count", "role"), total=len(self.buffers))
        cap = 500
        lines = n.render_body(self.entry, 0, 200, cap + 1)
        text = "\n".join(lines[:cap])
        more = display.more(cap, n.line_count(self.entry), "lines") if len(lines) > cap else ""
        try:  # a display must be quick: a large program's digest (seconds at 10^5 nodes) only once made
            big = self._digest is None and sum(1 for _ in itertools.islice(walk(self.entry), _DIGEST_SHOWN)) \
                >= _DIGEST_SHOWN
            digest = "digest: program.digest() (not made for the display of a program this large)" if big else \
                f"digest {self.digest()}"
        except VyreError as e:  # an invalid name has no JSON form: show the program, and why
            digest = f"no digest: {str(e).split('. Fix:')[0]}"
        return (f"<div><b>program {display.escape(self._name())}</b> workgroup ({x}, {y}, {z})</div>{bufs}"
                f"{display.highlighted(text, 'rust')}{f'<div><small>{more}</small></div>' if more else ''}"
                f"<div><small>{display.escape(digest)}</small></div>")

    def ptx(self, sm: int | None = None, *, workgroup: "tuple[int, int, int] | str | None" = None,
            cooperative: bool = False, optimize: bool = True) -> "display.PTX":
        """This program's PTX text for target `sm_<sm>` (sm_90 unless given), shown highlighted in
        Jupyter: the optimized program's, as the CUDA backend compiles it; the keywords are those of
        `vyre_numba.ptx.emit`."""
        if PTX_RENDERER is None:
            raise UnsupportedError("no PTX emitter is loaded. Fix: import vyre_numba (the package), which loads "
                                   "it, or call vyre_numba.ptx.emit(program) directly.")
        return PTX_RENDERER(self, **({} if sm is None else {"sm": sm}), workgroup=workgroup, cooperative=cooperative,
                            optimize=optimize)


def _buf_to_dict(b: BufferDecl) -> dict:
    return {"name": b.name, "binding": b.binding, "access": b.access.value, "dtype": b.dtype.value,
            "count": b.count, "output": b.output,
            "output_byte_range": None if b.output_byte_range is None else list(b.output_byte_range)}


_DTYPE_NAMES = tuple(t.value for t in DataType)
_ACCESS_NAMES = tuple(a.value for a in Access)
_PROGRAM_KEYS = frozenset(("format", "name", "workgroup_size", "buffers", "entry"))
_BUFFER_KEYS = frozenset(("name", "binding", "access", "dtype", "count", "output", "output_byte_range"))


def _known_keys(d: dict, known: frozenset | tuple, what: str) -> None:
    """An IRValidationError where `d` holds a key that is none of `known` (a misspelt field would
    otherwise be dropped without a word, its value replaced by nothing)."""
    extra = [k for k in d if k not in known]
    if extra:
        near = did_you_mean(extra[0], known)
        raise IRValidationError(f"{what} has the unknown key {shown(extra[0], 40)}{near}"
                                f"{f' (and {len(extra) - 1} more)' if len(extra) > 1 else ''}; its keys are "
                                f"{', '.join(sorted(known))}. Fix: correct or remove it (a file written by "
                                "Program.to_json() holds only those).")


_CLASSES = {c.__name__: c for c in (
    n.Lit, n.Var, n.Load, n.BufLen, n.Builtin, n.BinOp, n.UnOp, n.Select, n.Cast, n.Fma, n.Atomic,
    n.SubgroupBallot, n.SubgroupShuffle, n.SubgroupAdd,
    n.Let, n.Assign, n.Store, n.If, n.Loop, n.Barrier, n.Return, n.Block)}


def _first_difference(a: Any, b: Any) -> tuple[str, Any, Any]:
    """(path, a's value, b's value) of the first place two JSON documents differ, depth first."""
    stack = [("", a, b)]
    while stack:
        where, x, y = stack.pop()
        if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
            stack.extend((f"{where}.{k}" if where else k, x[k], y[k]) for k in sorted(x, reverse=True))
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            stack.extend((f"{where}[{i}]", x[i], y[i]) for i in reversed(range(len(x))))
        elif type(x) is not type(y) or x != y:
            return where, x, y
    return "", a, b


def _header_as_written(d: dict) -> None:
    """An IRValidationError where a program text's name, workgroup or buffer fields are other than
    to_json writes them (a bare workgroup number, a dtype alias such as "uint32", a number as name)."""
    def refuse(what: str, v: Any, want: str) -> None:
        raise IRValidationError(f"program JSON has {what} = {shown(v, 40)}, where to_json writes {want}. Fix: load a "
                                "file written by Program.to_json() (or build the program with ir.Program).")

    wg = d.get("workgroup_size")
    if "workgroup_size" in d and not (isinstance(wg, list) and len(wg) == 3 and
                                      all(isinstance(x, int) and not isinstance(x, bool) for x in wg)):
        refuse("workgroup_size", wg, "a list of three ints")
    if "name" in d and not isinstance(d["name"], str):
        refuse("name", d["name"], "a string")
    if "buffers" in d and not isinstance(d["buffers"], list):
        refuse("buffers", d["buffers"], "a list of buffer objects")
    for b in d.get("buffers") if isinstance(d.get("buffers"), list) else ():
        if isinstance(b, dict):
            if "dtype" in b and b["dtype"] not in _DTYPE_NAMES:
                refuse(f"the dtype of buffer {shown(b.get('name'), 40)}", b["dtype"], "a type name (" + ", ".join(_DTYPE_NAMES) + ")")
            if "access" in b and b["access"] not in _ACCESS_NAMES:
                refuse(f"the access of buffer {shown(b.get('name'), 40)}", b["access"], ", ".join(_ACCESS_NAMES))


def _as_written(entry: Any) -> None:
    """An IRValidationError where a program text's `entry` holds what to_json never writes: a
    statement list that is not a list of node objects (null, a nested list), or a bare number,
    bool, string or null where an expression goes (the builders would read 1e30 as a literal)."""
    fine = object()
    stack: list[tuple[str, Any, str]] = [("the program's entry", entry, "body")]
    while stack:
        where, v, kind = stack.pop()
        if kind == "body":
            x = next((s for s in v if not isinstance(s, dict)), fine) if isinstance(v, list) else v
            want = "statements only" if isinstance(v, list) else "a list of statements"
        else:
            x = fine if isinstance(v, dict) or (v is None and kind == "expr?") else v
            want = 'an IR expression (a {"k": ...} object)'
        if x is not fine:
            what = ("null" if x is None else str(x).lower() if isinstance(x, bool) else "a list" if isinstance(x, list)
                    else shown(x, 40))
            raise IRValidationError(f"program JSON has {what} where {where} takes {want}. Fix: load a file written "
                                    "by Program.to_json(), which writes each statement and expression as an object.")
        for d in (v if kind == "body" else (v,) if v is not None else ()):
            cls = _CLASSES.get(d.get("k")) if isinstance(d.get("k"), str) else None
            for name, k in (cls._kinds.items() if cls is not None else ()):
                if k in ("expr", "expr?", "body") and name in d:
                    stack.append((f"{cls.__name__}.{name}", d[name], k))


def _to(x: Any, memo: dict):
    names = x._kinds if isinstance(x, n._Structural) else None
    if names is not None:
        d = memo.get(id(x))
        if d is None:
            d = {"k": type(x).__name__}
            for name in names:
                d[name] = yield _to(getattr(x, name), memo)
            memo[id(x)] = d
        return d
    if isinstance(x, tuple):
        out = []
        for v in x:
            out.append((yield _to(v, memo)))
        return out
    if isinstance(x, DataType):
        return x.value
    return x


_SHALLOW = 200  # below this depth plain recursion is safe, and faster than the explicit stack


def _to_shallow(x: Any, memo: dict) -> Any:
    names = x._kinds if isinstance(x, n._Structural) else None
    if names is not None:
        d = memo.get(id(x))
        if d is None:
            d = {"k": type(x).__name__}
            for name in names:
                d[name] = _to_shallow(getattr(x, name), memo)
            memo[id(x)] = d
        return d
    if isinstance(x, tuple):
        return [_to_shallow(v, memo) for v in x]
    if isinstance(x, DataType):
        return x.value
    return x


def to_dict(x: Any) -> Any:
    """JSON-ready form of an expression or statement (or a tuple of them). A node object used more
    than once gives one dict, found at each of its places (built once: time in distinct nodes)."""
    items = x if isinstance(x, tuple) else (x,)
    if not all(isinstance(v, n._Structural) for v in items):
        raise IRValidationError(f"to_dict takes IR expressions and statements, not {a_type(x)}. Fix: pass a "
                                "node or a tuple of nodes (a Program has its own program.to_dict()).")
    memo: dict = {}  # id of node -> its dict; the nodes outlive the call, so ids stay unique
    if all(not isinstance(v, n._Structural) or v._depth < _SHALLOW for v in items):
        return _to_shallow(x, memo)
    return drive(_to(x, memo))


def _from(d: Any):
    if isinstance(d, list):
        out = []
        for v in d:
            out.append((yield _from(v)))
        return tuple(out)
    if not isinstance(d, dict):
        return d
    kind = d.get("k")
    cls = _CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise IRValidationError(f"unknown IR node kind {shown(d.get('k'))}. Fix: load a file written by Program.to_json().")
    kw = {}
    if len(d) != len(cls._kinds) + 1:
        _known_keys(d, ("k", *cls._kinds), f"IR node {kind}")
    for name in cls._kinds:
        if name not in d:
            raise IRValidationError(f"IR node {d['k']} lacks its field {shown(name)}. "
                                    "Fix: load a file written by Program.to_json().")
        kw[name] = yield _from(d[name])
    return cls(**kw)


def from_dict(d: Any) -> Any:
    """Inverse of `to_dict`; IRValidationError with a Fix where `d` is not such a document."""
    if not isinstance(d, dict):  # every node's document is an object; lists and atoms are only inside one
        raise IRValidationError(f"an IR node document is a dict, not {shown(d, 60)}. Fix: load a document written by "
                                "ir.to_dict (or a file by Program.to_json()).")
    return _entry_of(d)


def _entry_of(doc: Any) -> Any:
    """A program document's statements (a list of node documents), read as `from_dict` reads one."""
    try:
        return drive(_from(doc))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise IRValidationError(f"malformed IR node document ({type(e).__name__}: {e}). "
                                "Fix: load a document written by ir.to_dict (or a file by Program.to_json()).") from e


def node_to_json(x: Any) -> str:
    """Canonical JSON of one expression or statement (how nodes pickle)."""
    return jsontext.dumps(to_dict(x))


def node_from_json(text: str) -> Any:
    """Inverse of `node_to_json`."""
    return from_dict(jsontext.loads(text))


def walk(body: Iterable[Any], *, distinct: bool = False) -> Iterator[Any]:
    """Every statement and expression in `body` (e.g. `program.entry`), depth first, parents before
    children: an expression used twice is visited twice, or once where `distinct` (each node
    object once: what a question of which kinds of node a program holds needs, in time linear in
    its distinct nodes). A `body` that is not an iterable of IR nodes is refused here, at the call."""
    fix = "Fix: pass program.entry (or a list of statements and expressions)."
    if isinstance(body, (str, bytes, NotACollection)) or not hasattr(body, "__iter__"):
        raise IRValidationError(f"walk takes an iterable of IR statements and expressions, not "
                                f"{a_type(body)}. {fix}")
    stack = list(reversed(tuple(body)))
    for i, x in enumerate(reversed(stack)):
        if not isinstance(x, n._Structural):
            raise IRValidationError(f"walk takes an iterable of IR statements and expressions; item {i} is "
                                    f"{a_type(x)}. {fix}")
    return _walk(stack, set() if distinct else None)


def _walk(stack: list, seen: set | None = None) -> Iterator[Any]:
    while stack:
        x = stack.pop()
        if seen is not None:
            if id(x) in seen:
                continue
            seen.add(id(x))  # the body holds every node while the walk runs: ids stay unique
        yield x
        kids = []
        for name in x._kinds:
            v = getattr(x, name)
            if isinstance(v, n._Structural):
                kids.append(v)
            elif isinstance(v, tuple):
                kids.extend(v)
        stack.extend(reversed(kids))
