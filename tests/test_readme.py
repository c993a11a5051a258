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


def test_the_readmes_elementwise_line_runs():
    """The one-line kernel the README shows, run as written."""
    import numpy as np

    import vyre_numba as vn

    text = " ".join(README.read_text().split())
    kernel = re.search(r"`saxpy = (vn\.elementwise\(.*?\))`", text).group(1)
    call = re.search(r"`(saxpy\(np\.float32\(2\), x, y\))`", text).group(1)
    scope = {"vn": vn, "np": np, "x": np.arange(4, dtype=np.float32), "y": np.ones(4, np.float32)}
    scope["saxpy"] = eval(kernel, scope)
    assert eval(call, scope).tolist() == [1.0, 3.0, 5.0, 7.0]
