"""How objects show themselves: short text-form reprs of IR, `_repr_html_` tables for programs,
diagnostics, ABIs, telemetry, pendings, recordings and results, durations that read in ns/us/ms/s,
PTX that is a str, and e-graphs drawn or tabulated. Everything is checked on the CPU."""
from __future__ import annotations

import html.parser
import json
import pickle
import sys
import threading

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import display, ir, ptx
from vyre_numba.backend import TELEMETRY_KEYS, Pending, Telemetry
from vyre_numba.display import PTX, Duration
from vyre_numba.egraph import EGraph, congruence_closure
from vyre_numba.errors import DispatchError, UnsupportedError
from vyre_numba.fixpoint import FixpointResult
from vyre_numba.reference import ReferenceBackend

B = ir.BufferDecl
VOID = {"br", "hr", "img", "meta", "link", "input", "col", "wbr"}


class _Balance(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def well_formed(markup: str) -> str:
    """`markup` if its tags nest and close properly, else an AssertionError."""
    assert isinstance(markup, str) and markup.strip()
    p = _Balance()
    p.feed(markup)
    p.close()
    assert not p.errors and not p.stack, (p.errors, p.stack)
    return markup


def scale(name: str = "scale", buf: str = "x") -> ir.Program:
    i = ir.var("i")
    return ir.Program([B.read(buf, 0, "f32"), B.output("y", 1, "f32")], 256,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load(buf, i) * 2 + 1)])],
                      name=name)


# ---- IR reprs: the text form, short ---------------------------------------------------------------

def test_counted_is_plural_unless_one_with_thousands_grouped():
    from vyre_numba.display import counted

    assert [counted(k, "kernel") for k in (0, 1, 2, 1500)] == ["0 kernels", "1 kernel", "2 kernels", "1,500 kernels"]
    assert counted(1, "class", "classes") == "1 class" and counted(3, "class", "classes") == "3 classes"


def test_expression_repr_is_its_text_form():
    i = ir.var("i")
    assert repr(i + 1) == str(i + 1) == "(i + 1)"
    assert repr(ir.load("x", i) * ir.f32(2.0)) == "(x[i] * 2.0f32)"
    assert repr([i, ir.sqrt(ir.f32(2))]) == "[i, sqrt(2.0f32)]"
    assert repr(i == 0) == "(i == 0)" and isinstance(i == 0, ir.BinOp)  # == still builds IR
    assert (i + 1).equals(i + 1) and not (i + 1).equals(i + 2)


def test_statement_repr_is_its_text_form_and_short():
    s = ir.if_(ir.var("i") < 3, [ir.store("y", 0, 1)], [ir.barrier()])
    assert repr(s) == str(s) == "if (i < 3) {\n    y[0] = 1\n} else {\n    barrier(workgroup)\n}"
    long = ir.loop("k", 0, 9, [ir.let(f"v{k}", k) for k in range(100)])
    lines = repr(long).splitlines()
    assert len(lines) == 12 and lines[0] == "for k in 0..9 {" and lines[-1] == "... (91 more lines)"
    assert len(str(long).splitlines()) == 102  # str is the whole text


def test_program_repr_is_the_text_form_with_a_bounded_body():
    p = scale()
    assert repr(p) == str(p)
    assert repr(p).startswith("program scale workgroup(256, 1, 1) {\n    @0 read_only x: f32[]\n")
    big = ir.Program([B.output("y", 0, "u32")], 1, [ir.store("y", k, k) for k in range(1000)])
    text = repr(big).splitlines()
    assert text[0].startswith("program main") and text[-1] == "}"
    assert text[-2] == "    ... (981 more lines)" and len(text) == 23
    assert len(str(big).splitlines()) == 1003


def test_a_100000_deep_program_has_a_short_repr():
    e = ir.load("x", 0)
    for _ in range(ir.MAX_DEPTH - 3):
        e = -e
    p = ir.Program([B.read("x", 0, "i32"), B.output("y", 1, "i32", 1)], 1, [ir.store("y", 0, e)])
    assert p.depth == ir.MAX_DEPTH
    for r in (repr(p), repr(p.entry[0]), repr(e)):
        assert 50 < len(r) < 2000 and r.count("neg(") > 10 and "..." in r
    assert all(len(line) <= 120 for line in repr(p).splitlines())
    well_formed(p._repr_html_())


def test_deep_statement_nesting_has_a_short_repr():
    body = [ir.store("y", 0, 1)]
    for _ in range(5000):
        body = [ir.if_(ir.var("c") < 5, body)]
    p = ir.Program([B.output("y", 0, "i32", 1)], 1, [ir.let("c", 1), *body])
    r = repr(p)
    assert r.count("\n") == 22 and "    ... (9,983 more lines)\n}" in r and len(r) < 3000


# ---- Program._repr_html_ ------------------------------------------------------------------------

def test_program_html_shows_buffers_body_and_digest():
    p = scale()
    h = well_formed(p._repr_html_())
    for text in ("program scale", "(256, 1, 1)", ">x<", ">y<", "read_only", "write_only", "f32", p.digest(),
                 "at dispatch", "invocation_id"):
        assert text in h, text


def test_a_large_programs_html_leaves_a_digest_not_yet_made():
    """Regression (a Jupyter audit): the first display of a program of 10^5 statements made its
    digest, seconds of JSON; one already made is shown."""
    from vyre_numba.ir import program as prog

    p = ir.Program([ir.BufferDecl.output("y", 0, "u32")], 64,
                   [ir.store("y", ir.gid(0), ir.u32(k)) for k in range(prog._DIGEST_SHOWN)], name="big")
    assert "digest: program.digest() (not made" in well_formed(p._repr_html_()) and p._digest is None
    assert p.digest() in p._repr_html_()


def test_program_html_shows_an_output_byte_range_as_the_text_does():
    """Regression: the HTML's buffer table left out the range the text form shows."""
    i = ir.var("i")
    p = ir.Program([B.read("x", 0, "u32"), B.output("y", 1, "u32", output_byte_range=(8, 64))], 64,
                   [ir.let("i", ir.gid(0)), ir.store("y", i, ir.load("x", i))], name="ranged")
    assert "y: u32[] bytes 8..64" in str(p) and ">output bytes 8..64<" in well_formed(p._repr_html_())
    assert "bytes" not in scale()._repr_html_().split("<pre")[0]


def test_program_html_escapes_names():
    p = scale(name="<script>alert(1)</script>", buf="<b>x</b>")
    h = well_formed(p._repr_html_())
    assert "<script>" not in h and "&lt;script&gt;" in h
    assert "<b>x</b>" not in h and "&lt;b&gt;x&lt;/b&gt;" in h


def test_program_html_without_pygments_is_escaped_text(monkeypatch):
    monkeypatch.setitem(sys.modules, "pygments", None)
    h = well_formed(scale(buf="<i>x</i>")._repr_html_())
    assert "<pre" in h and "&lt;i&gt;x&lt;/i&gt;[i]" in h and "<i>" not in h


# ---- diagnostics, ABI ---------------------------------------------------------------------------

def test_diagnostics_show_as_a_table_of_where_problem_fix():
    bad = ir.Program([B.read("x", 0, "f32"), B.output("y", 1, "u32")], 256,
                     [ir.let("i", ir.gid(0)), ir.store("y", ir.var("i"), ir.load("x", ir.var("i")) + 1.5)])
    diags = ir.validate(bad)
    assert isinstance(diags, ir.Diagnostics) and isinstance(diags, list) and len(diags) == 1
    h = well_formed(diags._repr_html_())
    assert "entry[1]" in h and "must be u32" in h and "ir.cast(..., &#x27;u32&#x27;)" in h
    assert ">fix<" in h and "Fix:" not in h  # the fix has a column of its own
    ok = ir.validate(scale())
    assert ok == [] and "no problems" in well_formed(ok._repr_html_())


def test_kernel_abi_html_lists_the_parameters():
    a = ptx.abi(scale())
    h = well_formed(a._repr_html_())
    for text in ("scale", "x_ptr", "y_ptr", "x_len", "y_len", ".u64", ".u32", "(256, 1, 1)", "0 bytes"):
        assert text in h, text
    assert "any" in ptx.abi(scale(), workgroup="auto")._repr_html_()


# ---- durations ----------------------------------------------------------------------------------

@pytest.mark.parametrize("ns, text", [
    (0, "0 ns"), (1, "1 ns"), (999, "999 ns"), (1000, "1.00 us"), (41_300, "41.3 us"), (999_400, "999 us"),
    (999_999, "1.00 ms"), (1_000_000, "1.00 ms"), (2_750_000, "2.75 ms"), (999_999_999, "1.00 s"),
    (1_000_000_000, "1.00 s"), (1_200_000_000, "1.20 s"), (3_600 * 10**9, "3600 s"), (-5, "-5 ns"),
    (-41_300, "-41.3 us"),
    # three figures as rounded (a red-team: these read "10.00 ms", "100.0 us", "-10.00 ms", "10.00 s")
    (9_999_499, "10.0 ms"), (99_950, "100 us"), (-9_999_499, "-10.0 ms"), (9_999_999_999, "10.0 s"),
    (99_949, "99.9 us"), (9_994_999, "9.99 ms")])
def test_duration_reads_in_the_right_unit(ns, text):
    d = Duration(ns)
    assert repr(d) == str(d) == f"{d}" == text
    assert d == ns and isinstance(d, int) and hash(d) == hash(ns)


def test_duration_stays_an_int():
    d = Duration(41_300)
    assert d + 1 == 41_301 and type(d + 1) is int and d / 1e3 == 41.3 and d > 41_000
    assert f"{d:,}" == "41,300" and json.dumps({"t": d}) == '{"t": 41300}'
    assert pickle.loads(pickle.dumps(d)) == d and type(pickle.loads(pickle.dumps(d))) is Duration
    assert Duration(2.6) == 3 and Duration.from_seconds(1.5) == 1_500_000_000 and d.seconds == 41.3e-6
    # NumPy scalars: seconds times 1e9 in f64, not in the scalar's own type (f16 overflowed, f32 rounded)
    assert Duration.from_seconds(np.float16(0.5)) == 500_000_000
    assert Duration.from_seconds(np.float32(1.1)) == round(float(np.float32(1.1)) * 1e9) == 1_100_000_024
    assert Duration.from_seconds(np.int64(2)) == 2_000_000_000 and Duration.from_seconds(np.uint8(3)) == 3 * 10**9


@pytest.mark.parametrize("call, why", [
    (lambda: Duration(float("nan")), r"Duration\(nan\).*finite"), (lambda: Duration(float("inf")), r"Duration\(inf\)"),
    (lambda: Duration(-float("inf")), r"Duration\(-inf\)"), (lambda: Duration(np.float32("nan")), r"finite"),
    (lambda: Duration(10**400), r"finite"), (lambda: Duration.from_seconds(float("inf")), r"finite"),
    (lambda: Duration.from_seconds(1e300), r"from_seconds\(1e\+300\).*finite"),
    (lambda: Duration.from_seconds(10**400), r"finite"), (lambda: Duration("5"), r"not a str"),
    (lambda: Duration(None), r"not a NoneType"), (lambda: Duration.from_seconds("5"), r"not a str"),
    (lambda: Duration([1]), r"not a list"), (lambda: Duration(True), r"Duration\(True\).*not a bool"),
    (lambda: Duration(np.bool_(False)), r"not a bool"), (lambda: Duration.from_seconds(True), r"not a bool"),
    (lambda: Duration.from_seconds(np.True_), r"not a bool"), (lambda: display.time_text(True), r"not a bool"),
    (lambda: display.time_text(np.True_, "s"), r"not a bool"), (lambda: display.format_ns(np.False_), r"not a bool"),
    (lambda: display.format_ns(float("nan")), r"finite"), (lambda: display.format_ns(10**400), r"finite"),
    (lambda: display.format_ns("5"), r"not a str"), (lambda: display.time_text(5, "ms"), r"unit 'ms' is not"),
    (lambda: Duration.from_seconds(np.timedelta64(1, "s")), r"a time span is not a number of seconds"),
    (lambda: Duration.from_seconds(np.timedelta64(5, "ns")), r"from_seconds\(np.timedelta64\(5,'ns'\)\): a time span")])
def test_a_duration_of_what_is_not_a_finite_number_is_refused_with_a_fix(call, why):
    with pytest.raises(DispatchError, match=why + r".*Fix: .+"):
        call()


@pytest.mark.parametrize("name, v, text", [
    ("device_ns", float("nan"), "nan ns"), ("device_ns", float("inf"), "inf ns"), ("seconds", -float("inf"), "-inf s"),
    ("seconds", 1e300, "1e+300 s"), ("phase_ns", {"a": float("nan"), "b": 5}, "{a: nan ns, b: 5 ns}")])
def test_reprs_show_nan_and_infinite_times_as_they_are(name, v, text):
    assert display.value_text(name, v) == text  # a display shows what was measured rather than fail


def test_time_helpers_read_each_unit_as_what_it_is():
    """Regression: time_text(5, "ms") read 5 ms as 5 seconds; format_ns(nan) gave 'nan s'."""
    assert display.time_text(5) == "5 ns" and display.time_text(5, "s") == "5.00 s"
    assert display.format_ns(41_300) == "41.3 us" == str(Duration(41_300))


def test_seconds_of_every_number_type_convert_to_the_nanosecond_they_mean():
    """Regression: Duration.from_seconds(Decimal("1.5")) was 2 ns, and time_text(Decimal("1.5"), "s")
    showed it: `* 1e9` raised TypeError for a Decimal and the fallback passed the seconds on as
    nanoseconds. Ints, Fractions and Decimals convert exactly; what is no number is refused."""
    from decimal import Decimal
    from fractions import Fraction

    assert Duration.from_seconds(Decimal("1.5")) == 1_500_000_000 == Duration.from_seconds(Fraction(3, 2))
    assert Duration.from_seconds(Decimal("2")) == 2 * 10**9 and display.time_text(Decimal("1.5"), "s") == "1.50 s"
    exact = 12_345_678_123_456_789  # ns past 2**53: a float in between would round it
    assert Duration.from_seconds(Decimal("12345678.123456789")) == exact == Duration.from_seconds(Fraction(exact, 10**9))
    assert Duration.from_seconds(Decimal("-1.0000000025")) == -1_000_000_002  # to the nearest, ties to even
    assert Duration.from_seconds(np.uint64(2**64 - 1)) == (2**64 - 1) * 10**9  # as a Python int: no wrapping
    assert Duration.from_seconds(np.array(1.5)) == 1_500_000_000 and Duration(Decimal("2.5")) == 2
    assert display.time_text(Decimal("NaN"), "s") == "NaN s" and display.time_text(Decimal("-Infinity")) == "-Infinity ns"
    for bad, why in ((Decimal("NaN"), "finite"), (Decimal("1e999999999"), "finite"), (1 + 2j, "not a complex"),
                     (np.array("1"), "not a str_"), (np.array(True), "not a bool"), (Fraction(10**400), "finite")):
        with pytest.raises(DispatchError, match=why + r".*Fix: .+"):
            Duration.from_seconds(bad)
    with pytest.raises(DispatchError, match=r"finite.*Fix: .+"):
        Duration(Decimal("-1e999999999"))  # refused at once: round() would build a billion-digit int


def test_head_counts_lines_as_it_is_given_them():
    """Regression: head(text, -1) cut a line off and said "(1 more lines)" of three."""
    assert display.head("a\nb\nc", 1) == "a\n... (2 more lines)" and display.head("a\nb", 2) == "a\nb"
    assert display.head("a\nb", 0) == "... (2 more lines)" and display.head("a", 10**30) == "a"
    for bad in (-1, 1.5, None, True):
        with pytest.raises(DispatchError, match=r"head: lines=.*Fix: .+"):
            display.head("a\nb\nc", bad)


def test_highlighted_takes_any_line_limit():
    """Regression: limit=10**30 passed the check, then str.split raised OverflowError."""
    assert "more lines" not in display.highlighted("a\nb", "text", limit=10**30)
    assert "(1 more lines)" in display.highlighted("a\nb", "text", limit=1)


def test_record_html_shows_a_nan_phase():
    r = FixpointResult(3, True, "cooperative", 41_300)
    object.__setattr__(r, "device_ns", float("nan"))
    assert "device_ns=nan ns" in repr(r) and "nan ns" in well_formed(r._repr_html_())


def test_timed_dispatch_returns_a_duration():
    (y,), ns = ReferenceBackend().dispatch_timed(scale(), [np.ones(8, np.float32)])
    assert isinstance(ns, Duration) and ns > 0 and str(ns).split()[-1] in ("ns", "us", "ms", "s")


# ---- PTX ----------------------------------------------------------------------------------------

def test_ptx_is_a_str_that_reads_and_renders():
    p = scale()
    text = ptx.emit(p, sm=90)
    assert isinstance(text, PTX) and isinstance(text, str)
    plain = str(text)
    assert type(plain) is str and text == plain and hash(text) == hash(plain)
    assert repr(text) == plain and "\n.target sm_90\n" in repr(text)  # its lines, not an escaped one-liner
    h = well_formed(text._repr_html_())
    assert "sm_90" in h and "<span" in h  # highlighted by Pygments' PTX lexer
    assert pickle.loads(pickle.dumps(text)) == text


def test_ptx_html_without_a_ptx_lexer_is_escaped_text(monkeypatch):
    """Regression: with Pygments before 2.16 (no PTX lexer) PTX's _repr_html_ raised a DispatchError
    telling the user to pass another lexer name; a display shows the code instead."""
    lexers = pytest.importorskip("pygments.lexers")
    from pygments.util import ClassNotFound

    def older(name, **kw):
        raise ClassNotFound(f"no lexer for alias {name!r} found")

    monkeypatch.setattr(lexers, "get_lexer_by_name", older)
    h = well_formed(PTX("// <a>\n.target sm_90\n" + "nop;\n" * 1500)._repr_html_())
    assert h.startswith("<pre") and "&lt;a&gt;" in h and ".target sm_90" in h and "<span" not in h
    assert "(503 more lines)" in h


def test_ptx_repr_is_bounded():
    text = PTX("\n".join(f"mov.u32 %r{k}, {k};" for k in range(5000)))
    r = repr(text).splitlines()
    assert len(r) == 201 and r[-1] == "... (4,800 more lines)"
    h = well_formed(text._repr_html_())
    assert "4,000 more lines" in h


def test_program_ptx_is_emit():
    p = scale()
    assert p.ptx() == ptx.emit(p) and isinstance(p.ptx(), PTX)
    assert p.ptx(80) == ptx.emit(p, sm=80) and ".target sm_80" in p.ptx(80)
    assert p.ptx(90, workgroup="auto") == ptx.emit(p, sm=90, workgroup="auto")


def test_program_ptx_without_an_emitter_says_what_to_do(monkeypatch):
    monkeypatch.setattr(ir.program, "PTX_RENDERER", None)
    with pytest.raises(UnsupportedError, match=r"no PTX emitter.*Fix: .+"):
        scale().ptx()


def test_templates_are_ptx():
    from vyre_numba.ptx import templates

    assert isinstance(templates.load("grid_barrier", version="7.8", target="sm_90"), PTX)


# ---- telemetry ----------------------------------------------------------------------------------

def test_reference_telemetry_reports_the_documented_keys():
    b = ReferenceBackend()
    t = b.telemetry()
    assert isinstance(t, Telemetry) and set(t) == set(TELEMETRY_KEYS) and not any(t.values())
    b.dispatch(scale(), [np.ones(4, np.float32)], vn.DispatchConfig(label="warm"))
    b.dispatch_timed(scale(), [np.ones(4, np.float32)])
    t = b.telemetry()
    assert set(t) == set(TELEMETRY_KEYS) | {"dispatches[warm]"}
    assert t["dispatches"] == 2 and t["timed_dispatches"] == 1 and isinstance(t["timed_ns"], Duration)
    h = well_formed(t._repr_html_())
    assert "kernel_launches" in h and "dispatches[warm]" in h and str(t["timed_ns"]) in h
    b.reset_telemetry()
    assert set(b.telemetry()) == set(TELEMETRY_KEYS)


def test_an_unknown_telemetry_counter_is_a_vyre_error_and_still_a_missing_key():
    """Regression: telemetry()['dispatch'] raised a bare KeyError."""
    from vyre_numba.errors import UnknownNameError

    t = ReferenceBackend().telemetry()
    with pytest.raises(UnknownNameError, match=r"no counter 'dispatch' \(did you mean 'dispatches'\?\).*Fix: "):
        t["dispatch"]
    with pytest.raises(KeyError):
        t["dispatches[never]"]
    assert "dispatch" not in t and t.get("dispatches[never]", 0) == 0 and t["dispatches"] == 0


def test_a_telemetry_copied_or_joined_is_a_telemetry_and_checks_what_joins_it():
    """Regression (a red-team): copy() and | gave plain dicts (no table, no to_frame) that took
    any value."""
    from vyre_numba.backend import Telemetry

    t = ReferenceBackend().telemetry()
    for made in (t.copy(), t | {"mine": 3}, {"mine": 3} | t):
        assert type(made) is Telemetry and made["dispatches"] == t["dispatches"] and "<table" in made._repr_html_()
    assert (t | {"mine": 3})["mine"] == 3 and "mine" not in t
    with pytest.raises(DispatchError, match=r"counter 'mine' = 1.5 \(float\) is not an int\. Fix:"):
        t | {"mine": 1.5}
    for negative in ({"mine": -5}, {"device_ns": np.int64(-1)}):  # (a red-team: a negative count was stored)
        with pytest.raises(DispatchError, match=r"= -\d is negative\. Fix: store counts and durations"):
            t | negative
    t["mine"] = 0
    assert t["mine"] == 0


def test_telemetry_to_frame_needs_pandas(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(UnsupportedError, match=r"pandas.*Fix: pip install pandas"):
        Telemetry().to_frame()


def test_telemetry_to_frame():
    pytest.importorskip("pandas")
    f = Telemetry({"dispatches": 3}).to_frame()
    assert f.loc["dispatches", "value"] == 3 and list(f.index) == list(TELEMETRY_KEYS)


@pytest.mark.gpu
def test_cuda_telemetry_reports_the_same_keys():
    b = vn.get_backend("cuda")
    b.reset_telemetry()
    assert set(b.telemetry()) == set(TELEMETRY_KEYS)
    b.dispatch(scale(), [np.ones(4, np.float32)])
    assert set(b.telemetry()) == set(TELEMETRY_KEYS)


# ---- pending, recorded graphs -------------------------------------------------------------------

def test_pending_shows_its_state():
    b = ReferenceBackend()
    pending = b.dispatch_async(scale(), [np.ones(1000, np.float32)])
    pending.wait()
    assert repr(pending) == "<ReferencePending done: float32[1000]>"
    assert "float32[1000]" in well_formed(pending._repr_html_())

    failing = b.dispatch_async(ir.Program([B.output("y", 0, "u32", 4)], 1, [ir.loop("k", 0, 2**31, [])]),
                               [], vn.DispatchConfig())
    failing.cancel()
    failing.wait()
    assert repr(failing).startswith("<ReferencePending failed: DispatchError")

    class Busy(Pending):
        def done(self): return False
        def wait(self, timeout=None): return False
        def _collect(self): raise AssertionError

    assert repr(Busy()) == "<Busy running>" and "running" in well_formed(Busy()._repr_html_())


def test_a_pending_marks_where_its_repr_cuts_the_failure():
    """Regression: the failure was cut at 200 characters mid-word with no mark."""
    class Failed(Pending):
        def __init__(self, message): self._error = DispatchError(message)
        def done(self): return True
        def wait(self, timeout=None): return True
        def _collect(self): raise self._error

    r = repr(Failed("word " * 100 + "Fix: do this."))
    assert r.endswith("...>") and len(r) == len("<Failed failed: >") + 200
    assert repr(Failed("short. Fix: x.")) == "<Failed failed: DispatchError: short. Fix: x.>"
    assert repr(Failed("one\ntwo\nthree")) == "<Failed failed: DispatchError: one ... (2 more lines)>"


def test_recorded_graph_shows_what_it_records():
    b = ReferenceBackend()
    g = b.record_graph(scale(), [np.ones(8, np.float32)])
    assert repr(g) == "<RecordedGraph: dispatch of 'scale' on reference, open>"  # the documented type
    h = well_formed(g._repr_html_())
    assert "scale" in h and "float32[8]" in h and "open" in h
    g.close()
    assert "closed" in repr(g) and "closed" in g._repr_html_()
    x = b.upload(np.ones(8, np.float32))
    y = b.empty(8, np.float32)
    s = b.record_sequence([(scale(), [x, y]), (scale(), [y, x])], read=[(x,)])
    assert repr(s) == "<RecordedSequence: sequence of 2 steps on reference, open>"
    well_formed(s._repr_html_())


# ---- results ------------------------------------------------------------------------------------

def test_fixpoint_result_shows_durations():
    r = FixpointResult(3, True, "cooperative", 41_300)
    assert r.device_ns == 41_300 and isinstance(r.device_ns, Duration)
    assert repr(r) == "FixpointResult(rounds=3, converged=True, mode='cooperative', device_ns=41.3 us)"
    assert "41.3 us" in well_formed(r._repr_html_())
    cpu = FixpointResult(2, False, "relaunch")
    assert cpu.device_ns is None and repr(cpu).endswith("device_ns=None)")
    assert r == FixpointResult(3, True, "cooperative", 41_300)


def test_a_megakernel_result_shows_its_reads_short():
    """Regression: its repr printed each read in full, up to NumPy's 1,000 elements."""
    from vyre_numba.megakernel import MegakernelResult

    r = MegakernelResult([np.arange(2000, dtype=np.uint32), np.zeros(3, np.float32)], 3, True, "graph")
    assert repr(r).startswith("MegakernelResult(outputs=[uint32[2000] [   0    1    2 ... 1997 1998 1999], "
                              "float32[3] [0. 0. 0.]], rounds=3")
    many = repr(MegakernelResult([np.zeros(1, np.uint8)] * 20, 1, None, "sequence"))
    assert many.count("uint8[1]") == 8 and "... (12 more arrays)]" in many and len(many) < 400
    assert "uint32[2000]" in well_formed(r._repr_html_())


def test_rebuild_stats_and_closure_results_show_phases():
    g = EGraph.from_terms([("add", ("mul", "x", 2), ("mul", "y", 2)), ("mul", "x", 2)])
    c = congruence_closure(g, [[0, 3]])  # x = y, so (mul x 2) = (mul y 2)
    assert c.merged == 2 and isinstance(c.device_ns, Duration)
    assert all(isinstance(v, Duration) for v in c.phase_ns.values())
    r = repr(c)
    assert r.startswith("ClosureResult(eclass=int64[6] [") and "merged=2" in r and "phase_ns={rebuild: " in r
    h = well_formed(c._repr_html_())
    assert "phase" in h and "share" in h and "100.0%" in h and "classes_before" in h
    s = g.rebuild()
    assert repr(s).startswith("RebuildStats(rounds=") and "device_ns=" in repr(s)
    assert "nodes_touched" in well_formed(s._repr_html_())


# ---- e-graphs -----------------------------------------------------------------------------------

def small_egraph() -> EGraph:
    return EGraph.from_terms([("add", ("mul", "x", 2), ("mul", "y", 2))])


def test_egraph_draws_classes_as_clusters():
    pytest.importorskip("graphviz")
    src = small_egraph().to_graphviz().source
    assert src.count("subgraph cluster_") == 6 and "label=mul" in src and "label=add" in src
    assert "lhead=cluster_" in src and 'label=0' in src and 'label=1' in src  # numbered children


def test_egraph_html_is_the_svg_where_graphviz_draws(monkeypatch):
    graphviz = pytest.importorskip("graphviz")
    monkeypatch.setattr(graphviz.Digraph, "pipe",
                        lambda self, **kw: '<?xml version="1.0"?>\n<svg width="10"><g><text>mul</text></g></svg>\n')
    h = well_formed(small_egraph()._repr_html_())
    assert "<svg" in h and "<?xml" not in h and "e-nodes" in h


def test_egraph_html_is_a_table_without_graphviz(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)
    g = small_egraph()
    h = well_formed(g._repr_html_())
    assert "<svg" not in h and ">class<" in h and ">mul<" in h and ">add<" in h and "pip install graphviz" in h
    assert ">2, 4<" in h  # add's children: the two mul classes


def test_an_egraph_shows_how_many_classes_it_has():
    """Regression: after a rebuild merged ten classes into four, the repr read '10 class ids' and
    the HTML of a small e-graph had no class count."""
    terms = ["a", "2", ("*", "a", "2"), ("/", ("*", "a", "2"), "2"), "1", ("<<", "a", "1"),
             ("/", ("<<", "a", "1"), "2"), ("/", "2", "2"), ("*", "a", ("/", "2", "2")), ("*", "a", "1")]
    g = EGraph.from_terms(terms, backend="reference")
    c = {t: int(k) for t, k in zip(terms, g.term_classes)}
    assert repr(g) == "EGraph(10 e-nodes, 10 classes, backend='reference', rebuild pending)"
    g.union(np.array([[c[("*", "a", "2")], c[("<<", "a", "1")]], [c[("/", "2", "2")], c["1"]],
                      [c[("*", "a", "1")], c["a"]], [c[("/", ("*", "a", "2"), "2")], c[("*", "a", ("/", "2", "2"))]]]))
    g.rebuild()
    assert np.unique(g.classes()).size == 4
    assert repr(g) == "EGraph(10 e-nodes, 4 classes, backend='reference')"
    h = well_formed(g._repr_html_())
    assert "<b>classes</b></td><td style=\"text-align:left;vertical-align:top\">4<" in h and ">class ids<" in h
    assert repr(EGraph.from_arrays([], [], [0], [], backend="reference")).startswith("EGraph(0 e-nodes, 0 classes")
    assert repr(EGraph.from_arrays([0], [0], [0, 0], [], backend="reference")).startswith("EGraph(1 e-node, 1 class,")
    big = EGraph.from_terms([("f", str(k)) for k in range(400)], backend="reference")
    assert repr(big) == "EGraph(800 e-nodes, 800 class ids, backend='reference', rebuild pending)"  # not counted
    # Regression (a red-team): past 300 rows the HTML counted operators with a bincount as long as
    # the largest id: 16 GiB (a raw MemoryError, or the process killed) for an id near 2**31.
    op = np.zeros(301, np.int64)
    op[:3] = 2**31 - 2
    huge = EGraph.from_arrays(np.arange(301), op, np.zeros(302, np.int64), [], backend="reference")
    assert "0 (298), 2147483646 (3)" in huge._repr_html_()
    held = threading.Event()

    def hold():  # another thread's call in flight: the repr does not wait for it
        with g._lock:
            held.set()
            release.wait(10)
    release = threading.Event()
    th = threading.Thread(target=hold)
    th.start()
    held.wait(10)
    try:
        assert repr(g) == "EGraph(busy: another thread's call is running, backend='reference')"
        assert g._repr_html_() == "<pre>EGraph(busy: another thread&#x27;s call is running, backend=&#x27;reference&#x27;)</pre>"
    finally:
        release.set()
        th.join()
    assert repr(g) == "EGraph(10 e-nodes, 4 classes, backend='reference')"
    g.close()
    assert repr(g) == "EGraph(closed)"


def test_large_egraphs_show_a_summary():
    terms = [("f", str(k)) for k in range(400)]
    g = EGraph.from_terms(terms)
    h = well_formed(g._repr_html_())
    assert "800" in h and "more than the 300" in h and "f (400)" in h and "500 more rows" in h
    g.close()
    assert "closed" in g._repr_html_()


# ---- the public API ------------------------------------------------------------------------------

def test_all_lists_only_the_api():
    for module in (ir, ptx):
        assert all(hasattr(module, name) for name in module.__all__), module
        assert dir(module) == sorted(module.__all__)
    assert "drive" not in ir.__all__ and "Program" in ir.__all__ and "importlib" not in dir(ptx)
    assert {"emit", "assemble", "abi", "PTX"} <= set(ptx.__all__)


def test_no_error_is_the_base_class_and_no_bool_is_found_by_its_type_name():
    """The package raises VyreError's subclasses only (`except DispatchError` and the like catch
    each); NumPy 2's bool is named `bool`, so a check by the name `bool_` misses it."""
    import ast
    import pathlib

    root = pathlib.Path(vn.__file__).parent
    bare, by_name = [], []
    for path in root.rglob("*.py"):
        text = path.read_text()
        names = [line for line in text.splitlines() if not line.startswith("NUMPY_BOOL_CODES = ")]  # what users write
        if any("bool_\"" in line or "bool_'" in line for line in names):
            by_name.append(str(path))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                    getattr(node.exc.func, "id", getattr(node.exc.func, "attr", None)) == "VyreError":
                bare.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not bare and not by_name, (bare, by_name)


def test_display_helpers_escape_everything():
    h = display.table([("<a>", 1)], ("<th>", "n"), title="<t>", note="<n>")
    assert "<a>" not in h and "&lt;a&gt;" in h and "&lt;th&gt;" in h and "&lt;t&gt;" in h and "&lt;n&gt;" in h
    well_formed(h)
    capped = display.table(([k] for k in range(10)), ("k",), total=10, limit=3)
    assert capped.count("<tr>") == 4 and "7 more rows" in capped
    assert "2 more rows" in display.table([[1]], total=np.int64(3))


@pytest.mark.parametrize("rows, note", [
    (lambda: [[k] for k in range(500)], "... (200 more rows)"), (lambda: ([k] for k in range(500)), "... (200 more rows)"),
    (lambda: _Lazy(10**12), "... (999,999,999,700 more rows)"), (lambda: ([k] for k in range(300 + display.COUNTED)), "... (10,000 more rows)"),
    (lambda: ([k] for k in range(301 + display.COUNTED)), "... (more than 10,000 more rows)"),
    (lambda: ([k] for k in range(300)), ""), (lambda: [[k] for k in range(300)], "")])
def test_a_table_without_a_total_says_how_many_rows_it_left_out(rows, note):
    """Regression: without total= the rows past the limit (300) were dropped without a note."""
    h = display.table(rows())
    assert h.count("<tr>") == 300 and (note in h if note else "more rows" not in h)


class _Lazy:
    """A sized sequence of rows made as they are read (its length is not read through)."""

    def __init__(self, n): self.n = n
    def __len__(self): return self.n
    def __getitem__(self, k):
        if k >= self.n:
            raise IndexError
        return [k]


@pytest.mark.parametrize("call, why", [
    (lambda: display.highlighted(None, "python"), r"must be str"), (lambda: display.highlighted("x", 3), r"must be str"),
    (lambda: display.highlighted("x", "python", limit=0), r"limit=0"),
    (lambda: display.highlighted("x", "python", limit=2.5), r"limit=2.5"),
    (lambda: display.table(None), r"rows is NoneType"), (lambda: display.table(5), r"rows is int"),
    (lambda: display.table([1, 2]), r"the row is int"), (lambda: display.table(["ab"]), r"the row is str"),
    (lambda: display.table([[1]], "ab"), r"the header is str"), (lambda: display.table([[1]], 5), r"header is int"),
    (lambda: display.table([[1]], limit=-1), r"limit=-1"), (lambda: display.table([[1]], limit=2.5), r"limit=2.5"),
    (lambda: display.table([[1]], total="x"), r"total='x'"), (lambda: display.fields_table(None), r"pairs is NoneType"),
    (lambda: display.fields_table([("a", 1, 2)]), r"not a \(name, value\) pair"),
    (lambda: display.fields_table(["ab"]), r"'ab' is not a")])
def test_display_helpers_refuse_what_they_cannot_show_with_a_fix(call, why):
    with pytest.raises(DispatchError, match=why + r".*Fix: .+"):
        call()


PUBLIC_MODULES = ("vyre_numba", "vyre_numba.ir", "vyre_numba.ptx", "vyre_numba.fixpoint", "vyre_numba.compaction",
                  "vyre_numba.workqueue", "vyre_numba.egraph", "vyre_numba.graph", "vyre_numba.elementwise",
                  "vyre_numba.recording", "vyre_numba.backend", "vyre_numba.errors", "vyre_numba.config")


def test_every_public_function_class_and_method_says_what_it_does():
    """Tab completion shows a docstring for everything the public modules offer (inherited ones
    count: an override documented in its base class says the same)."""
    import importlib
    import inspect

    missing, seen = [], set()
    for m in PUBLIC_MODULES:
        mod = importlib.import_module(m)
        for name in getattr(mod, "__all__", [n for n in dir(mod) if not n.startswith("_")]):
            obj = getattr(mod, name, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or id(obj) in seen:
                continue
            if not getattr(obj, "__module__", "").startswith("vyre_numba"):
                continue
            seen.add(id(obj))
            if not inspect.getdoc(obj):
                missing.append(f"{m}.{name}")
            if inspect.isclass(obj):
                for k, v in vars(obj).items():
                    f = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v.fget if isinstance(v, property) else v
                    if not k.startswith("_") and inspect.isfunction(f) and not inspect.getdoc(getattr(obj, k, f)):
                        missing.append(f"{m}.{name}.{k}")
    assert not missing, missing


def test_escape_shows_control_characters_and_lone_surrogates_so_the_html_can_be_sent():
    """Regression (a red-team): an operator name from JSON can hold a lone surrogate, which no
    UTF-8 can encode (Jupyter could not send the HTML), and a NUL went into the HTML raw."""
    from vyre_numba.display import escape

    out = escape("a\x00b\ud800c<&>\te")
    assert out == "a\\x00b\\ud800c&lt;&amp;&gt;\te" and out.encode("utf-8")
    assert escape("plain é") == "plain é" and escape("a\x85b") == "a\\x85b"  # C1 controls too


def test_highlighted_code_shows_lone_surrogates_and_controls_so_the_html_can_be_sent():
    """Regression (a red-team): a program from JSON with a lone surrogate in a buffer name showed it
    escaped in its header and table but raw in its highlighted code, so Jupyter could not send the
    HTML; PTX's display alike. Tabs and line breaks stay code."""
    good = ir.Program([ir.BufferDecl.read_write("a", 0, "f32", 4)], 4, [ir.store("a", ir.gid(0), ir.f32(1.5))],
                      name="p")
    text = good.to_json().replace('"name":"a"', '"name":"a\\ud800"').replace('"buffer":"a"', '"buffer":"a\\ud800"')
    assert text != good.to_json()
    for shown_html in (ir.Program.from_json(text)._repr_html_(), display.PTX("mov \ud800\x00\t;\n")._repr_html_(),
                       display.highlighted("x = '\ud800'\n\ty", "python")):
        assert shown_html.encode("utf-8") and "ud800" in shown_html and "\ud800" not in shown_html  # (Pygments
        # may colour the backslash of an escape apart)


def test_duration_and_ptx_refuse_what_they_cannot_be_made_of():
    for make in (lambda: display.Duration(1, 2), lambda: display.Duration.from_seconds(),
                 lambda: display.Duration.from_seconds(secs=1)):
        with pytest.raises(vn.ArgumentError, match="Fix: "):
            make()
    for x in (5, b"x"):
        with pytest.raises(vn.VyreError, match=r"PTX is text.*Fix: pass a str"):
            display.PTX(x)
    assert str(display.PTX("ret;")) == "ret;" and display.PTX() == ""


def test_a_programs_repr_is_bounded_and_escapes_control_characters_in_names():
    """Regression (a red-team): a 100,000-character buffer name gave a 100 KB repr, and an ANSI
    escape or a newline in a name reached the terminal as it was (ir.check refuses such names,
    but the repr shows a program before it is checked)."""
    from vyre_numba import ir

    long = ir.Program([ir.BufferDecl.read_write("x" * 100_000, 0, "u32")], 64, [], name="p")
    assert len(repr(long)) < 400
    odd = ir.Program([ir.BufferDecl.read_write("a\nb", 0, "u32")], 64, [], name="\x1b[31mRED")
    text = repr(odd)
    assert "\x1b" not in text and "\\x1b[31mRED" in text and "a\\nb" in text and len(text.splitlines()) == 3
    name = "\x1b[31mRED" + "y" * 300  # stored to in the body: the body's lines too (a review)
    body = ir.Program([ir.BufferDecl.read_write(name, 0, "u32")], 64, [ir.store(name, 0, ir.u32(1))], name="p")
    text = repr(body)
    assert "\x1b" not in text and max(map(len, text.splitlines())) <= 200 and len(text.splitlines()) == 4
    assert repr(ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64, [], name="ok")).splitlines()[0] == \
        "program ok workgroup(64, 1, 1) {"
