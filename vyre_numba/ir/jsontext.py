"""JSON text for IR documents at any nesting depth: the standard library's encoder and decoder
recurse (and stop near 1,000 levels), so these keep their own stack. `dumps` writes exactly what
`json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)` writes (or its `indent=`
form, whose indentation stops growing past `MAX_INDENT` levels so deep documents stay linear in
size); `loads` reads any standard JSON document, at every depth alike: NaN and Infinity (not
JSON), an object that names a key twice (readers differ on which value wins) and a leading
byte-order mark are refused."""
from __future__ import annotations

import json
import math
import re
from json.decoder import scanstring
from json.encoder import encode_basestring_ascii
from typing import Any

from ..errors import IRValidationError, shown


def _scalar(x: Any) -> str:
    if x is None:
        return "null"
    if x is True:
        return "true"
    if x is False:
        return "false"
    if isinstance(x, str):
        return encode_basestring_ascii(x)
    if isinstance(x, int):
        return int.__repr__(x)
    if isinstance(x, float) and math.isfinite(x):
        return json.dumps(x)
    raise IRValidationError(f"{type(x).__name__} {shown(x)} has no JSON form. Fix: IR documents hold only "
                            "dicts, lists, strings, ints, bools and None.")


MAX_INDENT = 64


def dumps(obj: Any, indent: int | None = None) -> str:
    """`obj` as JSON with sorted keys: compact without `indent`, else indented by that many spaces."""
    try:  # the C encoder where the document is shallow enough for it
        if indent is None:
            return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
        if _shallow(obj, MAX_INDENT):
            return json.dumps(obj, sort_keys=True, indent=indent, allow_nan=False)
    except RecursionError:
        pass
    except (TypeError, ValueError) as e:  # ValueError: NaN or an infinity, which JSON has no word for
        raise IRValidationError(f"this document has no JSON form ({e}). Fix: IR documents hold only "
                                "dicts, lists, strings, ints, bools and None.") from None
    out: list[str] = []
    sep, colon = (",", ":") if indent is None else (",", ": ")
    # Stack of pending work: ("v", value, level) writes a value, ("t", text) writes text.
    stack: list[tuple] = [("v", obj, 0)]
    while stack:
        item = stack.pop()
        if item[0] == "t":
            out.append(item[1])
            continue
        _, x, level = item
        if isinstance(x, dict):
            keys = sorted(x)
            if not keys:
                out.append("{}")
                continue
            nl, end = _breaks(indent, level)
            out.append("{")
            stack.append(("t", end + "}"))
            for i in range(len(keys) - 1, -1, -1):
                k = keys[i]
                if not isinstance(k, str):
                    raise IRValidationError(f"JSON object key {shown(k)} is not a string. Fix: use string keys.")
                stack.append(("v", x[k], level + 1))
                stack.append(("t", (sep if i else "") + nl + encode_basestring_ascii(k) + colon))
        elif isinstance(x, (list, tuple)):
            if not x:
                out.append("[]")
                continue
            nl, end = _breaks(indent, level)
            out.append("[")
            stack.append(("t", end + "]"))
            for i in range(len(x) - 1, -1, -1):
                stack.append(("v", x[i], level + 1))
                stack.append(("t", (sep if i else "") + nl))
        else:
            out.append(_scalar(x))
    return "".join(out)


def _shallow(obj: Any, levels: int) -> bool:
    """Whether `obj` nests fewer than `levels` containers deep."""
    frontier = [obj] if isinstance(obj, (dict, list, tuple)) else []
    for _ in range(levels):
        frontier = [v for x in frontier for v in (x.values() if isinstance(x, dict) else x)
                    if isinstance(v, (dict, list, tuple))]
        if not frontier:
            return True
    return False


def _breaks(indent: int | None, level: int) -> tuple[str, str]:
    """The line breaks before the items and before the closing bracket of a container at `level`."""
    if indent is None:
        return "", ""
    return "\n" + " " * (indent * min(level + 1, MAX_INDENT)), "\n" + " " * (indent * min(level, MAX_INDENT))


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?", re.ASCII)  # JSON's digits only
_WORDS = {"true": True, "false": False, "null": None}
_CONSTANTS = ("NaN", "Infinity", "-Infinity")


def _constant(word: str):
    raise IRValidationError(f"program JSON holds {word}, which is not JSON (Program.to_json() never writes it: a "
                            "float literal is stored as its bit pattern). Fix: load a file written by "
                            "Program.to_json().")


def _pairs(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                _twice(k)
            seen.add(k)
    return d


def _twice(key: str):
    raise IRValidationError(f"program JSON names the key {shown(key, 60)} twice in one object, and JSON readers "
                            "differ on which value counts. Fix: load a file written by Program.to_json(), which "
                            "names each key once.")


_HUGE = ("program JSON holds an integer of thousands of digits, past any IR value (u64's largest has 20). "
         "Fix: check the file is the one Program.to_json() wrote; a count or a literal has at most 20 digits.")


def loads(text: str | bytes) -> Any:
    """The value of a JSON document; malformed text raises IRValidationError saying where."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise IRValidationError(f"program JSON is not UTF-8 ({e}). Fix: load the file as written.") from None
    if not isinstance(text, str):
        raise IRValidationError(f"program JSON must be str or bytes, not {type(text).__name__}. "
                                "Fix: pass the text of a Program.to_json() file.")
    if text.startswith("\ufeff"):
        raise IRValidationError("program JSON begins with a byte-order mark (U+FEFF), which JSON text does not "
                                "hold. Fix: remove the BOM (save the file as UTF-8 without one), or load a file "
                                "written by Program.to_json().")

    def fail(pos: int, what: str) -> IRValidationError:
        line = text.count("\n", 0, pos) + 1
        return IRValidationError(f"program JSON does not parse: {what} at line {line}, char {pos}. "
                                 "Fix: check the file is complete JSON written by Program.to_json().")

    try:  # the C decoder where the document is shallow enough for it
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except RecursionError:
        pass
    except json.JSONDecodeError as e:
        raise IRValidationError(f"program JSON does not parse: {e.msg} at line {e.lineno}, char {e.pos}. "
                                "Fix: check the file is complete JSON written by Program.to_json().") from None
    except ValueError:  # Python's limit on the digits of an int read from text
        raise IRValidationError(_HUGE) from None
    # Each open container is [container, key waiting for its value (objects), expecting a value].
    stack: list[list] = []
    pos = _WS.match(text, 0).end()
    result: Any = None
    done = False
    while True:
        if done:
            pos = _WS.match(text, pos).end()
            if not stack:
                if pos != len(text):
                    raise fail(pos, "extra data after the document")
                return result
            frame = stack[-1]
            cont = frame[0]
            if isinstance(cont, dict):
                if frame[1] in cont:
                    _twice(frame[1])
                cont[frame[1]] = result
            else:
                cont.append(result)
            if pos < len(text) and text[pos] == ",":
                pos = _WS.match(text, pos + 1).end()
                done = False
                if isinstance(cont, dict):
                    pos = _key(text, pos, frame, fail)
                continue
            close = "}" if isinstance(cont, dict) else "]"
            if pos >= len(text) or text[pos] != close:
                raise fail(pos, f"expected ',' or '{close}'")
            stack.pop()
            result, pos = cont, pos + 1
            continue
        if pos >= len(text):
            raise fail(pos, "unexpected end of text")
        c = text[pos]
        if c == "{":
            frame = [{}, None]
            pos = _WS.match(text, pos + 1).end()
            if pos < len(text) and text[pos] == "}":
                result, pos, done = frame[0], pos + 1, True
                continue
            stack.append(frame)
            pos = _key(text, pos, frame, fail)
        elif c == "[":
            pos = _WS.match(text, pos + 1).end()
            if pos < len(text) and text[pos] == "]":
                result, pos, done = [], pos + 1, True
                continue
            stack.append([[], None])
        elif c == '"':
            try:
                result, pos = scanstring(text, pos + 1)
            except ValueError as e:
                raise fail(pos, f"bad string ({e})") from None
            done = True
        else:
            m = _NUMBER.match(text, pos)
            if m:
                s = m.group(0)
                try:
                    result = float(s) if m.group(1) or m.group(2) else int(s)
                except ValueError:
                    raise IRValidationError(_HUGE) from None
                pos, done = m.end(), True
                continue
            word = next((w for w in _CONSTANTS if text.startswith(w, pos)), None)
            if word is not None:
                _constant(word)
            for word, value in _WORDS.items():
                if text.startswith(word, pos):
                    result, pos, done = value, pos + len(word), True
                    break
            else:
                raise fail(pos, f"unexpected character {shown(c)}")


def _key(text: str, pos: int, frame: list, fail) -> int:
    """Read `"key" :` into frame[1]; the position of the value."""
    if pos >= len(text) or text[pos] != '"':
        raise fail(pos, "expected a string key")
    try:
        frame[1], pos = scanstring(text, pos + 1)
    except ValueError as e:
        raise fail(pos, f"bad string ({e})") from None
    pos = _WS.match(text, pos).end()
    if pos >= len(text) or text[pos] != ":":
        raise fail(pos, "expected ':'")
    return _WS.match(text, pos + 1).end()
