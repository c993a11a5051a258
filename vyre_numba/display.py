"""How objects show themselves: short, code-like text in a terminal (`repr`) and HTML in Jupyter
(`_repr_html_`). HTML tables, highlighted code, nanosecond durations and PTX text.

Every value put into HTML is escaped, except `Html` strings, which are markup already. Pygments
highlights code where it is installed and has a lexer for the language; otherwise code shows as
plain escaped text.

`Duration` and `PTX` are public (calls return them); the functions are the package's own helpers
for its reprs and HTML, checked for what the package passes them.
"""
from __future__ import annotations

import dataclasses
import html
import itertools
import numbers
import operator
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any, Iterable

import numpy as np

from .errors import DispatchError, a_type, check_calls, shown

__all__ = ["Duration", "PTX"]  # what calls return; the rest are the package's helpers for its reprs and HTML

MAX_ROWS = 300  # table rows shown before the rest is summarised in a note
MAX_LINES = 1_000  # lines of code highlighted before the rest is summarised in a note
ARRAYS = 8  # arrays of a list field shown (each short) before the rest is counted
COUNTED = 10_000  # rows of a lazy table counted past its limit for the note, before it says only "more"
STYLE = "border-collapse:collapse;font-family:monospace;font-size:90%"
CELL = "text-align:left;vertical-align:top"


class Html(str):
    """A string of HTML markup, inserted into tables as it is."""

    __slots__ = ()


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # C0, DEL, C1: not allowed in HTML text


def escape(x: Any) -> str:
    """`x` as text safe inside HTML (an `Html` value is kept as it is): control characters and lone
    surrogates (a JSON name can hold one; no UTF-8 can) are shown as their escapes."""
    if isinstance(x, Html):
        return x
    return html.escape(_spelt(str(x)), quote=True)


def _spelt(text: str) -> str:
    """`text` with its control characters (but tabs and line breaks) and lone surrogates shown as
    their escapes: what HTML may hold and UTF-8 (a notebook's display message) can carry."""
    if not text.isprintable():  # the common case costs one scan
        text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _cells(x: Any, what: str) -> Iterable[Any]:
    """`x` as an iterable of cells, or a DispatchError (a str would read as one cell per character)."""
    try:
        if isinstance(x, (str, bytes)):
            raise TypeError
        return iter(x)
    except TypeError:
        raise DispatchError(f"table: the {what} is {type(x).__name__} {shown(x, 60)}, not a sequence of cells. "
                            f"Fix: pass the {what} as a list or tuple of values.") from None


def _count(n: Any, what: str, where: str = "table", least: int = 0) -> int:
    """`n` as an int of at least `least`, or a DispatchError naming `where` it was passed."""
    try:
        if isinstance(n, bool):
            raise TypeError
        k = operator.index(n)
    except TypeError:
        k = least - 1
    if k < least:
        raise DispatchError(f"{where}: {what}={shown(n)}. Fix: pass an int of at least {least}.")
    return k


def counted(n: int, what: str, plural: str | None = None) -> str:
    """`n` and `what`, plural unless n is 1: "1 kernel", "3 kernels", "1,000 classes" (`plural`
    given as "classes")."""
    return f"{n:,} {what if n == 1 else plural or what + 's'}"


def more(shown: int, total: int, what: str = "rows") -> str:
    """The note under a capped listing: how many were left out."""
    return f"... ({total - shown:,} more {what})" if total > shown else ""


def table(rows: Iterable[Iterable[Any]], header: Iterable[str] | None = None, *, title: Any = None,
          note: Any = None, total: int | None = None, limit: int = MAX_ROWS) -> Html:
    """An HTML table of `rows`, at most `limit` of them, then a note on how many were left out:
    `total` rows in all where given, else as many as `rows` has (a lazy iterable's rest counted
    up to COUNTED more, past that the note says only that there are more)."""
    if total is None and hasattr(rows, "__len__") and not isinstance(rows, (str, bytes)):
        try:
            total = len(rows)
        except TypeError:  # a __len__ that refuses (an unsized view): counted as it is read
            pass
    try:
        rows = iter(rows)
    except TypeError:
        raise DispatchError(f"table: rows is {type(rows).__name__}, not an iterable of rows. "
                            "Fix: pass a list (or generator) of rows, each a list or tuple of values.") from None
    limit = _count(limit, "limit")
    total = None if total is None else _count(total, "total")
    out = [f'<table style="{STYLE}">']
    if title is not None:
        out.append(f'<caption style="text-align:left;font-weight:bold">{escape(title)}</caption>')
    if header is not None:
        out.append("<tr>" + "".join(f'<th style="{CELL}">{escape(h)}</th>' for h in _cells(header, "header")) + "</tr>")
    shown, cut = 0, False
    for row in rows:
        if shown == limit:
            cut = True
            break
        out.append("<tr>" + "".join(f'<td style="{CELL}">{escape(c)}</td>' for c in _cells(row, "row")) + "</tr>")
        shown += 1
    out.append("</table>")
    if total is None and cut:  # the row read past the limit, and up to COUNTED more
        rest = 1 + sum(1 for _ in itertools.islice(rows, COUNTED))
        left = f"... ({rest:,} more rows)" if rest <= COUNTED else f"... (more than {COUNTED:,} more rows)"
    else:
        left = more(shown, total, "rows") if total is not None else ""
    notes = [left, escape(note) if note else ""]
    out += [f"<div><small>{n}</small></div>" for n in notes if n]
    return Html("".join(out))


def fields_table(pairs: Iterable[tuple[str, Any]], *, title: Any = None, note: Any = None) -> Html:
    """A two-column HTML table: name, value."""
    try:
        pairs = iter(pairs)
    except TypeError:
        raise DispatchError(f"fields_table: pairs is {type(pairs).__name__}, not an iterable of (name, value) "
                            "pairs. Fix: pass a list of (name, value) tuples.") from None
    rows = [_field(p) for p in pairs]
    return table(rows, title=title, note=note, total=len(rows))  # past the limit: a note says how many more


def _field(pair: Any) -> tuple[Html, Any]:
    """A (name, value) pair as a row: the name in bold, the value."""
    try:
        if isinstance(pair, (str, bytes)):
            raise TypeError
        k, v = pair
    except (TypeError, ValueError):
        raise DispatchError(f"fields_table: {shown(pair, 60)} is not a (name, value) pair. "
                            "Fix: pass a list of (name, value) tuples.") from None
    return Html(f"<b>{escape(k)}</b>"), v


def highlighted(text: str, language: str, *, limit: int = MAX_LINES) -> Html:
    """`text` as highlighted HTML (Pygments' lexer for `language`), or as plain escaped text
    where Pygments is missing or has no such lexer (its PTX lexer is new in 2.16); at most
    `limit` lines, then a note."""
    if not isinstance(text, str) or not isinstance(language, str):
        raise DispatchError(f"highlighted({type(text).__name__}, {shown(language)}): the text and the language name "
                            "must be str. Fix: pass str(text) and a Pygments language name such as 'python'.")
    limit = _count(limit, "limit", "highlighted", least=1)
    lines = text.split("\n", min(limit, len(text)))  # a text has at most len(text) breaks; str.split takes a C size
    rest = 0
    if len(lines) > limit:
        rest = lines.pop().count("\n") + 1
        text = "\n".join(lines)
    note = f"<div><small>... ({rest:,} more lines)</small></div>" if rest else ""
    text = _spelt(text)  # what Pygments is given reaches the HTML as it is
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name
        from pygments.util import ClassNotFound
    except ImportError:
        return Html(f'<pre style="font-size:90%">{escape(text)}</pre>{note}')
    try:
        lexer = get_lexer_by_name(language)
    except ClassNotFound:  # a display shows the code rather than fail
        return Html(f'<pre style="font-size:90%">{escape(text)}</pre>{note}')
    body = highlight(text, lexer, HtmlFormatter(noclasses=True, nobackground=True))
    return Html(body + note)


def head(text: str, lines: int) -> str:
    """The first `lines` lines of `text`, then a line saying how many more there are."""
    lines = _count(lines, "lines", "head")
    parts = text.split("\n", min(lines, len(text)))  # str.split takes a C size
    if len(parts) <= lines:
        return text
    rest = parts.pop().count("\n") + 1
    return "\n".join(parts + [f"... ({rest:,} more lines)"])


def format_ns(ns: int) -> str:
    """A nanosecond count for people: `812 ns`, `41.3 us`, `2.75 ms`, `1.20 s` (as a `Duration`
    reads; what no Duration holds, such as NaN, is refused as Duration refuses it)."""
    return str(Duration(ns))


def _text(ns: int) -> str:
    if -1000 < ns < 1000:
        return f"{ns} ns"
    for scale, unit in ((1e3, "us"), (1e6, "ms"), (1e9, "s")):
        v = ns / scale
        for places in (2, 1, 0):  # three figures, as rounded: 9.9995 reads 10.0, not 10.00
            text = f"{v:.{places}f}"
            if abs(float(text)) < 10 ** (3 - places):
                break
        if abs(float(text)) < 1000:
            break
    return f"{text} {unit}"


class Duration(int):
    """A time in nanoseconds: an int (arithmetic and comparisons as on any int) that reads as
    `812 ns`, `41.3 us`, `2.75 ms` or `1.20 s`. Being an int, it holds no NaN or infinite time
    (`time_text` shows those as `nan ns`, `inf ns`)."""

    __slots__ = ()

    def __new__(cls, ns: int | float = 0) -> "Duration":
        _no_bool(ns, "Duration")
        try:  # a Decimal NaN or one past the range is refused before round(), which raises or takes minutes
            d = (None if isinstance(ns, Decimal) and not (ns.is_finite() and ns.adjusted() < 300)
                 else super().__new__(cls, round(ns)))
        except TypeError:
            raise DispatchError(f"Duration({shown(ns, 60)}): a time is a number, not {a_type(ns)}. "
                                "Fix: pass an int or float (nanoseconds; Duration.from_seconds for seconds).") from None
        except (ValueError, OverflowError):
            d = None
        if d is None or not -1e300 < d < 1e300:  # within floats: `seconds` and the text divide it
            raise DispatchError(f"Duration({shown(ns, 60)}): a Duration is a finite whole number of nanoseconds, which "
                                "this is not. Fix: pass a finite time (and check what measured this one).")
        return d

    @classmethod
    def from_seconds(cls, seconds: float) -> "Duration":
        """`seconds` (an int, float, Fraction, Decimal or NumPy number) as a Duration, to the nearest
        nanosecond; ints, Fractions and Decimals exactly."""
        if isinstance(seconds, np.ndarray) and seconds.ndim == 0:
            seconds = seconds[()]
        _no_bool(seconds, "Duration.from_seconds")
        if isinstance(seconds, (np.timedelta64, np.datetime64)):  # NumPy counts a timedelta64 among its integers
            raise DispatchError(f"Duration.from_seconds({shown(seconds, 60)}): a time span is not a number of seconds. "
                                "Fix: pass Duration(int(span / np.timedelta64(1, 'ns'))) for a span.")
        if isinstance(seconds, Decimal):  # the exponent moved: exact, where `* 1e9` raises and `* 10**9` rounds
            sign, digits, exp = seconds.as_tuple()
            ns = Decimal((sign, digits, exp + 9)) if seconds.is_finite() else seconds  # NaN and inf in any unit
        elif isinstance(seconds, numbers.Integral):  # NumPy ints too, as Python ints (no wrapping)
            ns = int(seconds) * 10**9
        elif isinstance(seconds, numbers.Rational):
            ns = Fraction(int(seconds.numerator), int(seconds.denominator)) * 10**9
        elif isinstance(seconds, numbers.Real):  # NumPy floats in f64, not their own type (f16 overflows)
            ns = float(seconds) * 1e9
        else:
            raise DispatchError(f"Duration.from_seconds({shown(seconds, 60)}): a time is a number, not "
                                f"{a_type(seconds)}. Fix: pass the seconds as an int, float, Fraction or "
                                "Decimal.")
        try:
            return cls(ns)
        except DispatchError:  # told of the nanoseconds (`Duration(inf)` for 1e300 s): told of the seconds instead
            raise DispatchError(f"Duration.from_seconds({shown(seconds, 60)}): a Duration is a finite whole number "
                                "of nanoseconds of magnitude below 1e300 (1e291 seconds), which this is not. "
                                "Fix: pass a finite time (and check what measured this one).") from None

    @property
    def seconds(self) -> float:
        """The time in seconds."""
        return int(self) / 1e9

    def __repr__(self) -> str:
        return _text(int(self))

    __str__ = __repr__

    def __reduce__(self):
        return Duration, (int(self),)


def _no_bool(x: Any, what: str) -> None:
    if isinstance(x, (bool, np.bool_)):
        raise DispatchError(f"{what}({x}): a time is a number, not a bool. Fix: pass an int or float (nanoseconds; "
                            "Duration.from_seconds for seconds).")


def duration(ns: int | None) -> Duration | None:
    """`ns` as a Duration (None stays None)."""
    return None if ns is None else Duration(ns)


def durations(ns: dict) -> dict:
    """A copy of `{name: nanoseconds}` with Duration values."""
    if not isinstance(ns, dict):
        raise DispatchError(f"phase times are {shown(ns, 60)}, {a_type(ns)}, not a dict of names to "
                            "nanoseconds. Fix: pass {'phase': ns, ...} (or {} for none).")
    return {k: Duration(v) for k, v in ns.items()}


class PTX(str):
    """PTX assembly text: a `str` that shows highlighted in Jupyter and as its own lines (the
    first few hundred) in a terminal."""

    __slots__ = ()

    def __new__(cls, text: str = "") -> "PTX":
        if not isinstance(text, str):
            raise DispatchError(f"PTX({shown(text, 60)}): PTX is text, not {a_type(text)}. Fix: pass a str "
                                "(bytes.decode() for bytes).")
        return super().__new__(cls, text)

    def __repr__(self) -> str:
        return head(str(self), 200)

    def _repr_html_(self) -> str:
        return highlighted(str(self), "ptx")

    def __reduce__(self):
        return PTX, (str(self),)


def shape_text(a: Any) -> str:
    """An array's type and shape: `float32[1000]`, `int64[4x3]`."""
    return f"{a.dtype}[{'x'.join(str(s) for s in a.shape)}]"


def array_text(a: Any, items: int = 6) -> str:
    """A short description of an array: `int64[1000] [0 0 1 ... 997 998 999]`."""
    a = np.asarray(a)
    values = np.array2string(a.ravel(), threshold=items, edgeitems=items // 2, max_line_width=10**6)
    return f"{shape_text(a)} {values}"


def time_text(t: Any, unit: str = "ns") -> str:
    """A time in `unit` ("ns" or "s") as a Duration reads; a NaN or infinite one as `nan ns`, `inf s`
    (a display shows what was measured rather than fail)."""
    if unit not in ("ns", "s"):
        raise DispatchError(f"time_text: unit {shown(unit)} is not 'ns' or 's'. Fix: pass the time in nanoseconds "
                            "(unit='ns') or seconds (unit='s').")
    try:
        return str(Duration(t) if unit == "ns" else Duration.from_seconds(t))
    except DispatchError:
        if isinstance(t, (numbers.Real, Decimal)) and not isinstance(t, (bool, np.bool_, np.timedelta64)):
            return f"{t} {unit}"
        raise


def value_text(name: str, v: Any) -> str:
    """A field value for reprs and tables: durations for `*_ns` and `seconds` fields, short arrays."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if name == "seconds" and isinstance(v, (int, float)):
        return time_text(v, "s")
    if name.endswith("_ns") and isinstance(v, (int, float)):
        return time_text(v)
    if name.endswith("_ns") and isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {time_text(t)}" for k, t in v.items()) + "}"
    if hasattr(v, "dtype") and hasattr(v, "shape"):
        return array_text(v)
    if isinstance(v, (list, tuple)) and v and all(hasattr(a, "dtype") and hasattr(a, "shape") for a in v):
        listed = [array_text(a) for a in v[:ARRAYS]] + ([more(ARRAYS, len(v), "arrays")] if len(v) > ARRAYS else [])
        return ("[{}]" if isinstance(v, list) else "({})").format(", ".join(listed))
    return repr(v)


def record_repr(obj: Any) -> str:
    """`Name(field=value, ...)` of a dataclass, with `value_text` values."""
    parts = ", ".join(f"{f.name}={value_text(f.name, getattr(obj, f.name))}" for f in dataclasses.fields(obj))
    return f"{type(obj).__name__}({parts})"


class Shown:
    """A dataclass (made with repr=False) shown by `record_repr` as text and by `record_html` in Jupyter."""

    def __repr__(self) -> str:
        return record_repr(self)

    def _repr_html_(self) -> str:
        return record_html(self)


def record_html(obj: Any, *, note: Any = None) -> Html:
    """An HTML table of a dataclass's fields; `*_ns` dicts (per-phase times) become a table of
    their own with each phase's share."""
    pairs, phases = [], None
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.name.endswith("_ns") and isinstance(v, dict):
            phases = (f.name, v)
            continue
        pairs.append((f.name, value_text(f.name, v)))
    out = fields_table(pairs, title=type(obj).__name__, note=note)
    if phases and phases[1]:
        total = sum(phases[1].values()) or 1
        out += table(((k, time_text(t), f"{100 * t / total:.1f}%") for k, t in phases[1].items()),
                     ("phase", "time", "share"), title=phases[0])
    return Html(out)


check_calls(globals(), __all__)
