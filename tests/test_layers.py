"""Imports go down the layer table of DESIGN.md, never up: a module imports only from its own
row or the rows above it. Every import counts, lazy ones inside functions included."""
from __future__ import annotations

import ast
from pathlib import Path

import vyre_numba

ROOT = Path(vyre_numba.__file__).resolve().parent

# DESIGN.md's layer table, top to bottom; a module belongs to the first row naming a prefix of it.
LAYERS = [
    ("errors", "owned", "config", "lru", "profiling", "version", "display", "progress", "unique",
     "signals", "simulator", "files"),
    ("ir",),
    ("backend", "bindings", "recording", "megakernel", "checked"),
    ("reference",),
    ("ptx",),
    ("gpu",),
    ("compaction", "workqueue", "unionfind"),
    ("fixpoint",),
    ("egraph",),
    ("graph",),
    ("distributed",),
    ("registry", "cli", "testing", "elementwise", "__init__", "__main__"),
]


def row(module: str) -> int:
    """Layer row of `vyre_numba.<module>` (dotted, without the package name)."""
    head = module.split(".")[0]
    for i, names in enumerate(LAYERS):
        if head in names:
            return i
    raise AssertionError(f"vyre_numba.{module} is in no row of the layer table; add it to LAYERS and DESIGN.md")


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, vyre_numba-relative module) of every import of the package's own modules in `path`."""
    package = module.split(".") if path.name == "__init__.py" and module != "__init__" else module.split(".")[:-1]
    if module == "__init__":
        package = []
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("vyre_numba."):
                    found.append((node.lineno, alias.name[len("vyre_numba."):]))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1] if node.level > 1 else list(package)
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("vyre_numba"):
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:  # `from pkg import sub` imports the submodule, else pkg itself
                sub = ".".join(target + [alias.name])
                found.append((node.lineno, sub if sub in MODULES else (".".join(target) or "__init__")))
    return found


MODULES = modules()


def test_every_module_is_in_the_layer_table():
    assert len(MODULES) > 20
    for module in MODULES:
        assert 0 <= row(module) < len(LAYERS), module


def test_imports_go_down_the_layer_table():
    upward = []
    for module, path in MODULES.items():
        mine = row(module)
        for line, target in imported(module, path):
            if row(target) > mine:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line}: vyre_numba.{module} (row {mine}) "
                              f"imports vyre_numba.{target} (row {row(target)})")
    assert not upward, "imports that go up the layer table:\n" + "\n".join(upward)


def test_the_checker_sees_lazy_and_relative_imports():
    """The walk must find imports inside functions and resolve relative ones, or it checks nothing."""
    found = dict((t, ln) for ln, t in imported("registry", ROOT / "registry.py"))
    assert "reference" in found and "gpu" in found  # both lazy, inside factory functions
    assert any(t.startswith("ir") for _, t in imported("reference.interpreter", ROOT / "reference" / "interpreter.py"))


def test_every_subpackage_is_reached_from_the_package_alone():
    """`import vyre_numba as vn` then `vn.graph.bfs`: the subpackages load on first use, in a fresh
    interpreter where nothing imported them before."""
    import subprocess
    import sys

    names = list(vyre_numba._SUBPACKAGES)
    script = ("import vyre_numba as vn\n"
              f"for name in {names!r}:\n"
              "    assert getattr(vn, name).__name__ == f'vyre_numba.{name}'\n"
              "try:\n    vn.no_such_thing\nexcept AttributeError:\n    print('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
