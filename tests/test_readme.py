"""The README's example runs as written (on whichever backend this machine has), and names the
notebooks that exist."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_runs(capsys):
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    assert len(code.splitlines()) <= 22
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "program saxpy" in out and ".entry" in out and "[ 1.  3.  5.  7." in out


def test_the_readme_links_every_notebook():
    text = README.read_text()
    for nb in sorted((README.parent / "notebooks").glob("*.ipynb")):
        assert f"notebooks/{nb.name}" in text, nb.name
