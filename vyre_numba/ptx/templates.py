"""Hand-written PTX templates (the top-level `ptx_templates/` folder, installed as data files
under `<prefix>/share/vyre-numba/ptx_templates`).

Each template is a `.ptx` file that starts with a comment header; one header line reads
`// params: a, b, c` and lists every `${name}` placeholder the body uses. `load(name, **params)`
substitutes them (string.Template syntax; `$$` is a literal `$`) and returns the text without the
header. Missing or unknown parameters raise `TemplateError`.
"""
from __future__ import annotations

import functools
import os
import re
import string
import sys
import sysconfig
from pathlib import Path

from ..display import PTX
from ..errors import TemplateError, a_type, check_calls, shown

_PARAMS_LINE = re.compile(r"^//\s*params:\s*(.*)$")


def _candidates() -> list[Path]:
    here = Path(__file__).resolve().parent
    # Source checkout: <repo>/ptx_templates. Non-editable install: pyproject ships the folder as
    # data files under <scheme data>/share/vyre-numba/ptx_templates (or inside the package).
    out = [here.parent.parent / "ptx_templates", here.parent / "ptx_templates"]
    for scheme in (None, f"{os.name}_user"):
        try:
            data = sysconfig.get_paths(scheme)["data"] if scheme else sysconfig.get_paths()["data"]
        except KeyError:
            continue
        out.append(Path(data) / "share" / "vyre-numba" / "ptx_templates")
    out.append(Path(sys.prefix) / "share" / "vyre-numba" / "ptx_templates")
    return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=1)
def template_dir() -> Path:
    """The folder the templates are read from."""
    for d in _candidates():
        if d.is_dir() and any(d.glob("*.ptx")):
            return d
    tried = ", ".join(str(d) for d in _candidates())
    raise TemplateError(f"no PTX template folder found (looked in {tried}). "
                    "Fix: reinstall vyre-numba (`pip install .`) so ptx_templates ships with it.")


def names() -> list[str]:
    """Names of every available template (file names without `.ptx`), sorted."""
    return sorted(p.stem for p in template_dir().glob("*.ptx"))


@functools.lru_cache(maxsize=None)
def _read(name: str) -> tuple[tuple[str, ...], str]:
    if name not in names():  # checked once a name: reads are cached
        raise TemplateError(f"no PTX template named {shown(name, 80)}. Fix: use one of {', '.join(names())} "
                            "(ptx.templates.names()).")
    lines = (template_dir() / f"{name}.ptx").read_text().splitlines()
    header_end = 0
    while header_end < len(lines) and lines[header_end].startswith("//"):
        header_end += 1
    declared = None
    for line in lines[:header_end]:
        m = _PARAMS_LINE.match(line)
        if m:
            declared = tuple(p.strip() for p in m.group(1).split(",") if p.strip())
    if declared is None:
        raise TemplateError(f"PTX template {shown(name)} has no `// params: ...` header line. "
                        "Fix: list the template's ${...} placeholders in its comment header.")
    return declared, "\n".join(lines[header_end:]) + "\n"


def _known(name: object) -> str:
    """`name` when it can name a template (a str: `_read` checks which, once a name); else
    TemplateError listing them."""
    if not isinstance(name, str):
        raise TemplateError(f"no PTX template named {shown(name, 80)}. Fix: use one of {', '.join(names())} "
                            "(ptx.templates.names()).")
    return name


_FORMATS = {"version": (re.compile(r"\d{1,2}\.\d{1,2}", re.ASCII), "a PTX ISA version string such as '7.8'"),
            "target": (re.compile(r"sm_\d{2,3}[a-z]?", re.ASCII), "a target string such as 'sm_90'")}


def _value(name: str, param: str, value: object) -> str:
    """`value` as the text substituted for `param`; TemplateError where it has no place there."""
    fmt = _FORMATS.get(param)
    if fmt is not None:
        if not isinstance(value, str) or not fmt[0].fullmatch(value):
            raise TemplateError(f"PTX template {shown(name)}: {param}={shown(value, 80)} is not {fmt[1]}. "
                                f"Fix: pass {fmt[1]}.")
        return value
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
        return str(value)
    raise TemplateError(f"PTX template {shown(name)}: {param}={shown(value, 80)} is {a_type(value)}, not "
                        "PTX text or a count. Fix: pass a str (or an int from 0 to 2**31 - 1).")


def params(name: str) -> tuple[str, ...]:
    """The parameters template `name` declares in its header, in order."""
    return _read(_known(name))[0]


_LEAST_VERSION = {"grid_barrier": "6.3"}  # the PTX ISA a template's instructions need (nanosleep: 6.3)


def _isa(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def load(name: str, **params: object) -> PTX:
    """Template `name` with every `${param}` replaced by `params[param]`: PTX text (a str), a count
    (an int from 0 to 2**31 - 1), and for `version` and `target` strings such as '7.8' and 'sm_90'."""
    declared, body = _read(_known(name))
    missing = [p for p in declared if p not in params]
    unknown = [p for p in params if p not in declared]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown {', '.join(unknown)}")
        raise TemplateError(f"PTX template {shown(name)}: {'; '.join(parts)} parameter(s). "
                        f"Fix: pass exactly {', '.join(declared)}.")
    values = {k: _value(name, k, v) for k, v in params.items()}
    least = _LEAST_VERSION.get(name)
    if least is not None and "version" in values and _isa(values["version"]) < _isa(least):
        values["version"] = least  # a module of its own: an older target takes the newer ISA beside its kernel's
    try:
        return PTX(string.Template(body).substitute(values))
    except (KeyError, ValueError) as e:
        raise TemplateError(f"PTX template {shown(name)} uses a placeholder its header does not declare ({e}). "
                        "Fix: add it to the template's `// params:` line.") from e


check_calls(globals(), ["template_dir", "names", "params", "load"])
