"""Checked dispatch: `DispatchConfig(checked=True)` runs `ir.checks.instrument(program)` in place of
the program, with two counter buffers of its own, reads the counters back with the results and
reports what they found: a `CheckWarning` naming, per site, how often it happened and the first
invocation (and index) that did it, or `CheckError` with `checked="raise"`. The report of the
last checked dispatch (this thread's) is also `backend.last_check`. Every backend runs it the same way, so the
counts on the GPU equal the reference backend's."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from . import display
from .config import DispatchConfig
from .errors import CheckError, CheckWarning, UnsupportedError, VyreError, immutable, shown, warn_user
from .ir import Program
from .ir.checks import COUNTS, FIRST, KINDS, Site, instrument

NONE = np.uint64(2**64 - 1)
MESSAGE_FINDINGS = 20  # a CheckError names this many sites; its report holds every one
FIXES = {"load": "bound the index (e.g. ir.if_(i < ir.buf_len(name), ...)) or size the buffer so every index fits",
         "store": "bound the stored index as well (e.g. ir.if_(i < ir.buf_len(name), ...)), or make the buffer long "
                  "enough for every index (pass a longer array; an output-only buffer of a host dispatch is sized by "
                  "sizes={...})",
         "atomic": "bound the atomic's index or size its buffer so every index fits",
         "div": "make divisors nonzero (e.g. ir.select(d == 0, 1, d)) or guard the division",
         "mod": "make divisors nonzero or guard the modulo",
         "nan": "keep float operands in the operation's domain (sqrt and log of negatives, 0/0, inf-inf give NaN)"}


@dataclass(frozen=True)
class Finding:
    """One site that was hit: its kind, buffer or operation, statement, the operation as text, how
    many times, the first (smallest linear) invocation that hit it with the index it used (None for
    div/nan), and the buffer's length where known."""

    kind: str
    what: str
    where: str
    expr: str
    count: int
    invocation: int
    index: int | None
    length: int | None = None

    def __str__(self) -> str:
        size = f", `{self.what}` has {self.length} elements" if self.length is not None else ""
        first = f"first: invocation {self.invocation}" + (f" at index {self.index}" if self.index is not None else "")
        where = "" if self.kind == "store" else f" in `{self.where}`"
        return f"{self.count} {KINDS[self.kind]}: `{self.expr}`{where} ({first}{size})"


@dataclass(frozen=True)
class CheckReport:
    """What a checked dispatch of `program` found: `findings` (sites hit, in program order) out of
    `sites` checked. `ok` when nothing was hit."""

    program: str
    sites: int
    findings: tuple

    @property
    def ok(self) -> bool:
        """Whether no site was hit."""
        return not self.findings

    def message(self, *, resident: bool = False) -> str:
        """What was found and each kind's fix; `resident`: said of a resident dispatch, which ran to
        completion with its writes kept in its buffers."""
        if self.ok:
            return f"checked dispatch of {self.program!r}: {self.sites} sites checked, nothing found."
        kinds = list(dict.fromkeys(f.kind for f in self.findings))
        alike: dict[str, int] = {}  # sites that read the same (x[i] + x[i]) are one line
        for f in self.findings:
            alike[str(f)] = alike.get(str(f), 0) + 1
        listed = [f"  - {text}" + (f" (at {k} sites alike)" if k > 1 else "") for text, k in alike.items()]
        if len(listed) > MESSAGE_FINDINGS:  # the report's .findings keeps every one
            listed = listed[:MESSAGE_FINDINGS] + [f"  ... and {len(listed) - MESSAGE_FINDINGS} more sites "
                                                  "(report.findings lists all)"]
        kept = " (it ran to completion: its buffers keep everything it wrote)" if resident else ""
        return (f"checked dispatch of {self.program!r}{kept} found:\n" + "\n".join(listed)
                + "\nFix: " + "; ".join(FIXES[k] for k in kinds) + ".")

    def __str__(self) -> str:
        return self.message()

    def __repr__(self) -> str:
        listed = [repr(f) for f in self.findings[:MESSAGE_FINDINGS]]
        if len(self.findings) > MESSAGE_FINDINGS:  # the report's .findings keeps every one
            listed.append(display.more(MESSAGE_FINDINGS, len(self.findings), "findings"))
        return f"CheckReport(program={shown(self.program)}, sites={self.sites}, findings=({', '.join(listed)}))"

    def _repr_html_(self) -> str:
        rows = [(f.kind, f"{f.count} {KINDS[f.kind]} ({f.what}) in {f.where}; first invocation {f.invocation}"
                 + (f", index {f.index}" if f.index is not None else "")) for f in self.findings]
        return display.fields_table([("program", self.program), ("sites checked", self.sites)] + rows,
                                    title="CheckReport")


def wanted(config) -> bool:
    """Whether `config` asks for a checked dispatch (anything not a DispatchConfig: no; it is
    refused by the normal path)."""
    return isinstance(config, DispatchConfig) and config.checked is not False


def refuse(config, what: str) -> None:
    """Raise UnsupportedError where `what` cannot run checked."""
    if wanted(config):
        raise UnsupportedError(f"{what} cannot run checked: the counts are read back after every dispatch. Fix: "
                               "drop checked=True here and find the problem with backend.dispatch(program, inputs, "
                               "DispatchConfig(checked=True)) (or dispatch_resident) first.")


def _plain(config: DispatchConfig) -> DispatchConfig:
    """`config` unchecked, with the program's own workgroup for "auto" and "tune": a checked
    dispatch is for finding mistakes, and a chosen block size would only change its launch."""
    wg = None if config.workgroup in ("auto", "tune") else config.workgroup
    return dataclasses.replace(config, checked=False, workgroup=wg)


def _renumbered(e: VyreError) -> None:
    """A note on an error from the checked run where its message places a statement: the checks
    add statements of their own, so the numbers are the instrumented program's."""
    if "entry[" in str(e):
        e.add_note("checked dispatch: entry[k] counts the statements of the program as the checks instrument it "
                   "(they bind checked operands in statements of their own); dispatch it with checked=False to see "
                   "the statement as written.")


def _numbered(program: Program, grid, wg) -> None:
    """UnsupportedError where the launch has more invocations than the checks number (their first
    invocation is kept in 32 bits)."""
    total = math.prod(map(int, grid)) * math.prod(map(int, wg))  # Python ints: no wrap
    if total > 2**32:
        raise UnsupportedError(f"checked dispatch of {shown(program.name)}: the launch has {total:,} invocations, and "
                               "the checks number the first invocation to hit a site in 32 bits (2**32 at most). "
                               "Fix: check a launch of fewer workgroups (grid=...) on a part of the data, or "
                               "dispatch it unchecked.")


def dispatch(backend, program: Program, inputs: Sequence | Mapping | None, config: DispatchConfig,
             sizes: Mapping[str, int] | None = None) -> list[np.ndarray]:
    """`backend.dispatch(program, inputs, config)` checked (see the module docstring)."""
    return _prepared(backend, program, inputs, config, sizes)()


def _prepared(backend, program: Program, inputs, config: DispatchConfig, sizes) -> Callable[[], list[np.ndarray]]:
    """The checked dispatch as a call that runs it: what is wrong with the call itself is raised
    here, what goes wrong running (and the CheckError) when it is called."""
    from .ir.validate import check

    from .bindings import bind
    from .ir.program import Role

    check(program)
    plain = _plain(config)
    b = bind(program, inputs, plain, sizes, copy_inputs=False, allocate_outputs=False)
    _numbered(program, b.grid, b.workgroup)
    probe, sites = instrument(program, b.workgroup)
    # the program's own launch and output sizes: the counters must change neither
    run = dataclasses.replace(plain, grid=b.grid, workgroup=b.workgroup)
    sizes = {d.name: b.sizes[d.name] for d in program.outputs if d.role is Role.OUTPUT}
    counts, first = np.zeros(max(len(sites), 1), np.uint64), np.full(max(len(sites), 1), NONE, np.uint64)
    if isinstance(inputs, Mapping):
        given = {**inputs, COUNTS: counts, FIRST: first}
    elif inputs is None or isinstance(inputs, (list, tuple)):
        given = list(inputs or []) + [counts, first]
    else:  # not inputs at all: the plain dispatch says what is wrong with them
        backend.dispatch(program, inputs, plain, sizes=sizes)
        raise AssertionError("unreachable: the plain dispatch refuses what is not inputs")

    def running() -> list[np.ndarray]:
        try:
            outs = backend.dispatch(probe, given, run, sizes=sizes)
        except VyreError as e:
            _renumbered(e)
            raise
        results, counts, first = outs[:-2], outs[-2], outs[-1]
        lengths = {d.name: _len(v) for d, v in zip(program.inputs, _input_values(program, inputs))}
        lengths.update({d.name: len(o) for d, o in zip(program.outputs, results)})
        lengths.update({d.name: d.count for d in program.buffers if d.is_shared})
        _report(backend, program, config, sites, counts, first, lengths, results)
        return results
    return running


def dispatch_now(backend, program: Program, inputs, config: DispatchConfig, sizes=None):
    """A checked `dispatch_async`: it runs at once, and `result()` gives its outputs or raises what
    went wrong running (its CheckError among them), as an unchecked one's does; mistakes in the
    call raise here."""
    from .backend import Completed

    run = _prepared(backend, program, inputs, config, sizes)
    try:
        return Completed(run())
    except Exception as e:  # noqa: BLE001 - kept for result(); interrupts still stop the caller
        return Completed(error=e)


def dispatch_resident(backend, program: Program, buffers: Sequence | Mapping, config: DispatchConfig) -> None:
    """`backend.dispatch_resident(program, buffers, config)` checked; synchronises to read the counts."""
    from .bindings import check_resident
    from .ir.validate import check

    from .bindings import launch_geometry

    check(program)
    plain = _plain(config)
    bound = check_resident(program, buffers, "dispatch_resident")
    for b in bound:
        _storage(b)  # DispatchError, with the fix, for anything that is not a resident buffer
    lengths = {d.name: _elements(b) for d, b in zip(program.bound_buffers, bound)}
    grid, wg = launch_geometry(program, plain, lengths)
    _numbered(program, grid, wg)
    probe, sites = instrument(program, wg)
    counts = backend.upload(np.zeros(max(len(sites), 1), np.uint64))
    first = backend.upload(np.full(max(len(sites), 1), NONE, np.uint64))
    try:
        backend.dispatch_resident(probe, list(bound) + [counts, first],
                                  dataclasses.replace(plain, grid=grid, workgroup=wg))
    except VyreError as e:
        _renumbered(e)
        raise
    lengths.update({d.name: d.count for d in program.buffers if d.is_shared})
    _report(backend, program, config, sites, backend.download(counts), backend.download(first), lengths, None)


def _report(backend, program: Program, config: DispatchConfig, sites: list[Site], counts, first, lengths,
            outputs) -> None:
    findings = []
    for site, c, f in zip(sites, counts, first):
        if c:
            f = int(f)
            findings.append(Finding(site.kind, site.what, site.where, site.expr, int(c), f >> 32,
                                    (f & 0xFFFFFFFF) if site.kind in ("load", "store", "atomic") else None,
                                    lengths.get(site.what) if site.kind in ("load", "store", "atomic") else None))
    report = CheckReport(program.name, len(sites), tuple(findings))
    backend.last_check = report
    if report.ok:
        return
    message = report.message(resident=outputs is None)
    if config.checked == "raise":
        raise CheckError(message, report, outputs)
    warn_user(CheckWarning(message, report))


def _input_values(program: Program, inputs) -> list:
    if isinstance(inputs, Mapping):
        return [inputs.get(d.name) for d in program.inputs]
    try:
        return list(inputs) if inputs is not None else []
    except TypeError:
        return []


def _len(v) -> int | None:
    try:
        return int(np.asarray(v).size) if not hasattr(v, "__cuda_array_interface__") else _elements(v)
    except Exception:  # noqa: BLE001 - a length is only a detail of the message
        return None


def _elements(buffer) -> int:
    from .backend import _elements as elements
    return elements(buffer)


def _storage(buffer) -> tuple:
    from .backend import _storage as storage
    return storage(buffer)


immutable(Finding, CheckReport)
