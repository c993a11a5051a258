"""The `vyre-numba` command: info, run, emit (PTX, cubin, manifest), demo, and its errors."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from vyre_numba import ir
from vyre_numba.cli import demo_program, main


@pytest.fixture
def saxpy_json(tmp_path):
    path = tmp_path / "saxpy.json"
    path.write_text(demo_program().to_json())
    return path


def test_info_lists_backends(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "reference  available" in out and "default backend:" in out and "numba-cuda" in out


def test_run_writes_outputs(saxpy_json, tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.float32([2]))
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.float32))
    np.save(tmp_path / "y.npy", np.ones(5, np.float32))
    args = ["run", str(saxpy_json), "--out", str(tmp_path / "out"), "--backend", "reference"]
    for name in "axy":
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    assert main(args) == 0
    assert np.array_equal(np.load(tmp_path / "out" / "y.npy"), np.arange(5, dtype=np.float32) * 2 + 1)
    assert "ran 'saxpy' on reference" in capsys.readouterr().out


@pytest.mark.parametrize("bad, fragment", [
    (["--input", "a"], "NAME=FILE.npy"),
    (["--input", "a=/nonexistent.npy"], "cannot load"),
    ([], "missing inputs"),
])
def test_run_errors_exit_2_with_fix(saxpy_json, tmp_path, capsys, bad, fragment):
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *bad]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Fix:" in err


def test_run_missing_program_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.json"), "--out", str(tmp_path)]) == 2
    assert "Fix:" in capsys.readouterr().err


@pytest.mark.parametrize("cubin", [False, True])
def test_emit_writes_code_and_abi_manifest(saxpy_json, tmp_path, cubin):
    out = tmp_path / ("k.cubin" if cubin else "k.ptx")
    assert main(["emit", str(saxpy_json), "--sm", "80", "-o", str(out)] + (["--cubin"] if cubin else [])) == 0
    data = out.read_bytes()
    if cubin:
        assert data[:4] == b"\x7fELF"
    else:
        assert b".visible .entry saxpy(" in data and b".target sm_80" in data
    man = json.loads((tmp_path / (out.name + ".json")).read_text())
    assert man["entry"] == "saxpy" and man["sm"] == 80 and man["format"] == ("cubin" if cubin else "ptx")
    assert [p["name"] for p in man["params"]] == ["a_ptr", "x_ptr", "y_ptr", "a_len", "x_len", "y_len"]
    assert man["workgroup_size"] == [256, 1, 1] and man["digest"] == demo_program().digest()
    assert [b["dtype"] for b in man["buffers"]] == ["f32", "f32", "f32"]


def test_demo_runs_on_the_reference_backend(capsys):
    assert main(["demo", "--backend", "reference", "-n", "5000"]) == 0
    out = capsys.readouterr().out
    assert "bit-identical to the reference interpreter: True" in out and "Fix:" in out


def test_console_script_entry_point():
    out = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "info"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "vyre-numba" in out.stdout


def test_invalid_program_json_is_reported(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else"}))
    assert main(["emit", str(bad), "-o", str(tmp_path / "x.ptx")]) == 2
    assert "Fix:" in capsys.readouterr().err
    assert isinstance(ir.Program.from_json(demo_program().to_json()), ir.Program)
