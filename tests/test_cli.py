"""The `vyre-numba` command: info, run, emit (PTX, cubin, manifest), demo, and its errors: every
argument and path is checked before any work, a mistake is one `error: ... Fix: ...` line with
exit status 2, and nothing ever ends in a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import assert_fix
from vyre_numba import get_backend, ir
from vyre_numba.errors import HostMemoryError
from vyre_numba.cli import demo_program, main


@pytest.fixture
def saxpy_json(tmp_path):
    path = tmp_path / "saxpy.json"
    path.write_text(demo_program().to_json())
    return path


@pytest.fixture
def saxpy_inputs(tmp_path):
    """--input arguments for a, x, y of the demo program (5 elements)."""
    np.save(tmp_path / "a.npy", np.float32([2]))
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.float32))
    np.save(tmp_path / "y.npy", np.ones(5, np.float32))
    args = []
    for name in "axy":
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    return args


@pytest.fixture
def dispatches(monkeypatch):
    """Calls to the reference backend's dispatch, recorded (the real dispatch still runs)."""
    backend = get_backend("reference")
    real = backend.dispatch
    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, "dispatch", spy)
    return calls


def one_error_line(capsys, *fragments) -> str:
    """The single `error: ... Fix: ...` line the command wrote to stderr."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for f in fragments:
        assert f in lines[0], (f, err)
    return lines[0]


def no_temporaries(directory) -> bool:
    return not [p for p in directory.iterdir() if p.name.startswith(".")]


def test_an_input_files_array_refused_by_dispatch_is_told_how_to_save_it_again(saxpy_json, saxpy_inputs, tmp_path,
                                                                               capsys):
    """Regression (a red-team): run printed the Python call's Fix (pass x.reshape(-1)), with no
    array to pass on the command line; it now says to load, fix and save the file again."""
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.float64) / 3)
    args = ["run", str(saxpy_json), "--out", str(tmp_path / "out"), "--backend", "reference", *saxpy_inputs]
    assert main(args) == 2
    one_error_line(capsys, "'x'", "On the command line an input is a .npy file: load it (x = numpy.load(path)), "
                               "make the array the fix describes, and save it again (numpy.save(path, x)).")
    assert not (tmp_path / "out").exists()


def test_info_lists_backends(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "reference  available" in out and "default backend:" in out and "numba-cuda" in out


def test_run_writes_outputs(saxpy_json, saxpy_inputs, tmp_path, capsys):
    args = ["run", str(saxpy_json), "--out", str(tmp_path / "out"), "--backend", "reference", *saxpy_inputs]
    assert main(args) == 0
    assert np.array_equal(np.load(tmp_path / "out" / "y.npy"), np.arange(5, dtype=np.float32) * 2 + 1)
    assert "ran 'saxpy' on reference" in capsys.readouterr().out
    assert no_temporaries(tmp_path / "out")


def test_run_creates_a_missing_nested_out_directory(saxpy_json, saxpy_inputs, tmp_path):
    out = tmp_path / "a" / "b" / "c"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 0
    assert (out / "y.npy").is_file()


def test_run_replaces_an_existing_output_file(saxpy_json, saxpy_inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "y.npy").write_text("stale")
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 0
    assert np.load(out / "y.npy").shape == (5,)


@pytest.mark.parametrize("bad, fragment", [
    (["--input", "a"], "NAME=FILE.npy"),
    (["--input", "=a.npy"], "NAME=FILE.npy"),
    (["--input", "a="], "NAME=FILE.npy"),
    ([], "missing inputs ['a', 'x', 'y']"),
    (["--input", "a={tmp}/a.npy", "--input", "x={tmp}/x.npy"], "missing inputs ['y']"),
    (["--input", "z={tmp}/a.npy"], "its inputs: ['a', 'x', 'y']"),
    (["--input", "a={tmp}/a.npy", "--input", "a={tmp}/x.npy"], "given twice"),
    (["--grid", "1", "2", "3", "4"], "--grid 1 2 3 4"),
    (["--grid", "-1"], "--grid -1"),
    (["--grid", str(2**32)], "--grid"),
    (["--iterations", "0"], "--iterations 0"),
    (["--iterations", "-3"], "--iterations -3"),
    (["--iterations", str(10**20)], "--iterations 100000000000000000000"),
])
def test_run_argument_errors_exit_2_before_any_work(saxpy_json, tmp_path, capsys, dispatches, bad, fragment):
    bad = [b.replace("{tmp}", str(tmp_path)) for b in bad]
    np.save(tmp_path / "a.npy", np.float32([2]))
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    out = tmp_path / "o"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *bad]) == 2
    assert_fix(one_error_line(capsys, fragment))
    assert dispatches == [] and not out.exists()


def test_unknown_input_names_are_told_clipped(saxpy_json, tmp_path, capsys, dispatches):
    """Regression (a red-team): thousands of --input names, or one of 10,000 characters, were all
    echoed in the one error line."""
    np.save(tmp_path / "a.npy", np.float32([2]))
    many = [f"--input=b{k}={tmp_path}/a.npy" for k in range(2000)] + [f"--input={'z' * 10_000}={tmp_path}/a.npy"]
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *many]) == 2
    line = one_error_line(capsys, "are not inputs of 'saxpy' (its inputs: ['a', 'x', 'y']). Fix: name only those: "
                                  "a, x, y.")
    assert_fix(line)
    assert len(line) < 700 and "..." in line, line


def test_run_with_an_empty_out_exits_2_and_writes_nothing(saxpy_json, tmp_path, capsys, dispatches, monkeypatch):
    np.save(tmp_path / "a.npy", np.float32([2]))
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    np.save(tmp_path / "y.npy", np.zeros(3, np.float32))
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    args = ["--input", "a=a.npy", "--input", "x=x.npy", "--input", "y=y.npy", "--backend", "reference"]
    assert main(["run", str(saxpy_json), "--out", "", *args]) == 2
    assert_fix(one_error_line(capsys, "--out is empty"))
    assert dispatches == [] and sorted(p.name for p in tmp_path.iterdir()) == before


def _save_npz(path):
    with open(path, "wb") as f:  # through a file, so that savez keeps the name as given
        np.savez(f, x=np.zeros(5, np.float32))


def _save_text(path):
    path.write_text("1 2 3 4 5\n")


def _save_object_array(path):
    np.save(path, np.array([1, "two"], dtype=object), allow_pickle=True)


def _save_empty(path):
    path.write_bytes(b"")


def _save_truncated_npy(path):
    np.save(path, np.arange(100))
    path.write_bytes(path.read_bytes()[:140])


def _save_truncated_zip(path):
    with open(path, "wb") as f:
        np.savez(f, x=np.arange(100))
    path.write_bytes(path.read_bytes()[:60])


@pytest.mark.parametrize("name, make, fragment", [
    ("x.npz", _save_npz, ".npz archive"),
    ("x.npy", _save_npz, ".npz archive"),
    ("x.npy", _save_text, "not a .npy file (it does not begin with the .npy signature)"),
    ("x.npy", _save_object_array, "holds Python objects (dtype object)"),
    ("x.npy", _save_empty, "not a .npy file (it is empty)"),
    ("x.npy", _save_truncated_npy, "not a .npy array"),
    ("x.npy", _save_truncated_zip, "not a .npy array"),
    ("missing.npy", None, "No such file"),
    ("adir.npy", lambda p: p.mkdir(), "not a regular file"),
])
def test_run_bad_input_files(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches, name, make, fragment):
    path = tmp_path / "bad" / name
    path.parent.mkdir()
    if make is not None:
        make(path)
    args = [a if not a.startswith("x=") else f"x={path}" for a in saxpy_inputs]
    out = tmp_path / "o"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *args]) == 2
    line = one_error_line(capsys, fragment, "'x'")
    assert_fix(line)
    assert dispatches == [] and not out.exists()


def test_run_an_unreadable_input_says_to_make_it_readable(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches,
                                                         monkeypatch):
    """Regression (a red-team): a .npy file this user may not read was called "not a .npy array",
    with a Fix to save it with numpy.save."""
    from vyre_numba import cli

    path = tmp_path / "x.npy"
    np.save(path, np.zeros(5, np.float32))
    real = cli.regular

    def guarded(f, *a, **k):
        if str(f) == str(path):
            raise PermissionError(13, "Permission denied", str(f))
        return real(f, *a, **k)

    monkeypatch.setattr(cli, "regular", guarded)  # as root, chmod would not stop the read
    args = [a if not a.startswith("x=") else f"x={path}" for a in saxpy_inputs]
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *args]) == 2
    line = one_error_line(capsys, "cannot read", "Permission denied", "Fix: make the file readable")
    assert "not a .npy" not in line and dispatches == []


def test_a_closed_standard_output_is_refused_before_any_work(monkeypatch, capsys, tmp_path):
    """Regression (a red-team): `vyre-numba info >&-` (sys.stdout None) ran, then reported an
    internal error ("a bug in vyre-numba") from flushing None; run and emit had written their files."""
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["info"]) == 1
    line = one_error_line(capsys, "standard output is closed", "Fix: run it with standard output open")
    assert "internal error" not in line


def test_run_npz_message_says_to_pass_one_npy_per_input(saxpy_json, saxpy_inputs, tmp_path, capsys):
    np.savez(tmp_path / "all.npz", x=np.zeros(5, np.float32))
    args = [a if not a.startswith("x=") else f"x={tmp_path / 'all.npz'}" for a in saxpy_inputs]
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), *args]) == 2
    line = one_error_line(capsys)
    assert "numpy.save" in line.split("Fix:")[1] and "x=FILE.npy" in line


def test_run_missing_program_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.json"), "--out", str(tmp_path)]) == 2
    assert_fix(one_error_line(capsys, "cannot read program"))


def test_run_paths_with_a_nul_byte(saxpy_json, saxpy_inputs, tmp_path, capsys):
    assert main(["run", "bad\0.json", "--out", str(tmp_path / "o")]) == 2
    assert_fix(one_error_line(capsys, "cannot read program"))
    args = [a if not a.startswith("x=") else "x=x\0.npy" for a in saxpy_inputs]
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), *args]) == 2
    assert_fix(one_error_line(capsys, "cannot load"))
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o\0"), *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "--out"))


def test_run_binary_program_file(tmp_path, capsys):
    bad = tmp_path / "bin.json"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert_fix(one_error_line(capsys, "not UTF-8"))


def test_run_out_under_a_file_is_refused_before_the_dispatch(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", str(saxpy_json), "--out", str(blocker / "sub"), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "--out", "not a directory"))
    assert dispatches == []


def test_run_out_that_is_a_file_is_refused(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", str(saxpy_json), "--out", str(blocker), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "--out"))
    assert dispatches == [] and blocker.read_text() == "x"


def test_run_output_name_taken_by_a_directory_is_refused(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches):
    (tmp_path / "o" / "y.npy").mkdir(parents=True)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "y.npy", "is a directory"))
    assert dispatches == []


def chmod_is_effective(directory) -> bool:
    """Whether a 0o500 directory really refuses writes (not for root, which overrides file modes)."""
    try:
        (directory / "probe").touch()
    except PermissionError:
        return True
    (directory / "probe").unlink()
    return False


def test_run_unwritable_out_directory_is_refused_before_the_dispatch(saxpy_json, saxpy_inputs, tmp_path, capsys,
                                                                     dispatches):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not chmod_is_effective(locked):
            pytest.skip(f"running as {'root' if os.geteuid() == 0 else 'a privileged user'}: "
                        "chmod does not make a directory unwritable")
        for out in (locked, locked / "sub"):
            assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 2
            assert_fix(one_error_line(capsys, "--out", "cannot write there"))
        assert dispatches == [] and list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def test_run_failing_dispatch_removes_the_directories_it_created(saxpy_json, saxpy_inputs, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.float64) / 3)  # not exactly f32
    out = tmp_path / "new" / "deeper"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "DispatchError", "float64"))
    assert not (tmp_path / "new").exists()


def test_run_oserror_while_writing_is_one_line_exit_1(saxpy_json, saxpy_inputs, tmp_path, capsys, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "save", full)
    out = tmp_path / "o"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 1
    assert_fix(one_error_line(capsys, "cannot write", "y.npy", "No space left on device"))
    assert list(out.iterdir()) == []


def test_run_interrupted_while_writing_leaves_no_partial_file(saxpy_json, saxpy_inputs, tmp_path, capsys,
                                                              monkeypatch):
    def interrupted(f, arr, *args, **kwargs):
        f.write(b"\x93NUMPY partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "save", interrupted)
    out = tmp_path / "o"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 130
    one_error_line(capsys, "interrupted")
    assert list(out.iterdir()) == []


def test_run_interrupted_during_the_dispatch_exits_130(saxpy_json, saxpy_inputs, tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(get_backend("reference"), "dispatch", interrupted)
    out = tmp_path / "o"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 130
    one_error_line(capsys, "interrupted")
    assert not out.exists()


@pytest.mark.parametrize("exc, status, fragment", [
    (RuntimeError("boom\nsecond line"), 1, "a bug in vyre-numba: RuntimeError: boom second line"),
    (KeyError("k"), 1, "KeyError"),
    (MemoryError(), 1, "out of host memory"),
    # the work ran out of memory, no usage was wrong: 1, not the usage status 2 every other VyreError gets
    (HostMemoryError("unique() ran out of host memory. Fix: pass less."), 1, "HostMemoryError: unique() ran out"),
])
def test_run_unexpected_exception_is_one_line(saxpy_json, saxpy_inputs, tmp_path, capsys, monkeypatch,
                                              exc, status, fragment):
    def broken(*args, **kwargs):
        raise exc

    monkeypatch.delenv("VYRE_NUMBA_DEBUG", raising=False)
    monkeypatch.setattr(get_backend("reference"), "dispatch", broken)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) \
        == status
    assert_fix(one_error_line(capsys, fragment))


def test_closed_stdout_pipe_ends_quietly(capsys, monkeypatch):
    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("vyre_numba.cli.cmd_info", closed)
    assert main(["info"]) == 1
    assert capsys.readouterr().err == ""


def test_console_script_piped_into_a_closed_reader_prints_no_traceback():
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-m', 'vyre_numba.cli', 'info'], "
            "stdout=subprocess.PIPE, stderr=subprocess.PIPE); p.stdout.close(); "
            "err = p.stderr.read().decode(); p.wait(); print(p.returncode, repr(err))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "1 ''", out.stdout


def test_debug_variable_shows_the_traceback_of_a_bug(saxpy_json, saxpy_inputs, tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setenv("VYRE_NUMBA_DEBUG", "1")
    monkeypatch.setattr(get_backend("reference"), "dispatch", broken)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "in broken" in err
    assert err.strip().splitlines()[-1].startswith("error: internal error")


@pytest.mark.parametrize("value, shown, warned", [("false", False, False), ("OFF", False, False), ("no", False, False),
                                                   ("0", False, False), ("yes", True, False), ("maybe", True, True)])
def test_the_debug_variable_reads_false_as_off(saxpy_json, saxpy_inputs, tmp_path, capsys, monkeypatch, value, shown,
                                              warned):
    """Regression (a red-team): anything but '' and '0' turned tracebacks on, 'false' too."""
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setenv("VYRE_NUMBA_DEBUG", value)
    monkeypatch.setattr(get_backend("reference"), "dispatch", broken)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) == 1
    err = capsys.readouterr().err
    assert ("Traceback" in err) is shown and ("is not a setting, so it is read as on" in err) is warned


def test_info_says_a_reference_backend_with_a_bad_setting_is_unusable(capsys, monkeypatch):
    """Regression (a red-team): info said 'available' and named it the default, while get_backend
    refused it."""
    monkeypatch.setenv("VYRE_NUMBA_REFERENCE_MEMORY", "abc")
    monkeypatch.setattr("vyre_numba.registry._INSTANCES", {})
    assert main(["info"]) == 2  # a bad setting: said, and the status says so
    out = capsys.readouterr().out
    assert "reference  unavailable: $VYRE_NUMBA_REFERENCE_MEMORY='abc' is not a whole positive" in out
    assert "default backend: none usable" in out or "default backend: cuda" in out


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
    assert no_temporaries(tmp_path)


def test_emit_leaves_the_lazy_ptx_assemble_function_in_place(saxpy_json, tmp_path):
    code = (f"from vyre_numba.cli import main; assert main(['emit', {str(saxpy_json)!r}, '-o', "
            f"{str(tmp_path / 'k.ptx')!r}]) == 0; from vyre_numba.ptx import assemble; "
            "assert callable(assemble), assemble")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_emit_creates_a_missing_output_directory(saxpy_json, tmp_path):
    out = tmp_path / "build" / "ptx" / "k.ptx"
    assert main(["emit", str(saxpy_json), "-o", str(out)]) == 0
    assert b".entry saxpy(" in out.read_bytes() and (out.parent / "k.ptx.json").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["k.ptx", "k.ptx.json"]


@pytest.mark.parametrize("device, sm", [("h100", 90), ("A100", 80), ("l4", 89), ("t4", 75)])
def test_emit_for_a_named_device_checks_its_limits_without_it(saxpy_json, tmp_path, capsys, device, sm):
    out = tmp_path / "k.ptx"
    assert main(["emit", str(saxpy_json), "--device", device, "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"checked against {device.lower()} (sm_{sm}" in said and "registers a thread" in said
    man = json.loads((tmp_path / "k.ptx.json").read_text())
    assert man["sm"] == sm and man["device"]["registers"] > 0 and man["device"]["max_cooperative_grid"] > 0


def test_emit_for_a_device_refuses_a_workgroup_it_cannot_run(tmp_path, capsys):
    i = ir.var("i")
    wide = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.output("y", 1, "u32")], 1024,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("x", i))])],
                      name="wide")
    src = tmp_path / "wide.json"
    src.write_text(wide.to_json())
    assert main(["emit", str(src), "--device", "t4", "-o", str(tmp_path / "new" / "w.ptx")]) == 0  # fits: 1024 threads
    from vyre_numba.ptx import devices

    tight = devices.DeviceProfile("tiny", 90, 1, 512, 1, 1024, 1024)
    report = devices.check(wide, tight)
    assert report.problems and "Fix:" in report.problems[0] and report.blocks_per_sm == 0
    co = devices.check(wide, "h100", cooperative=True, grid=10**6)
    assert any("cooperative grid" in x and "Fix:" in x for x in co.problems)
    from vyre_numba.errors import VyreError

    for kw in (dict(workgroup=5.0), dict(workgroup=(0, 1, 1)), dict(workgroup=(-32, 1, 1)),
               dict(workgroup=(True, 1, 1)), dict(workgroup=("32", 1, 1)), dict(workgroup=(32, 1, 1, 9)),
               dict(grid="x"), dict(grid=True), dict(grid=-1), dict(grid=1.5), dict(cooperative="yes"),
               dict(cooperative=1)):
        with pytest.raises(VyreError, match="Fix:"):
            devices.check(wide, "v100", **kw)
    for bad in (None, 5, "", "h-100", "h1-0-0"):
        with pytest.raises(VyreError, match="Fix:"):
            devices.profile(bad)
    assert devices.profile(" H100 ").name == "h100"
    with pytest.raises(VyreError, match="Fix:"):
        devices.check("prog", "h100")
    with pytest.raises(VyreError, match="Fix:"):
        devices.DeviceProfile("none", 90, 0, 2048, 32, 1024, 1024)
    gb = ir.Program([ir.BufferDecl.read_write("x", 0, "u32")], 64, [ir.barrier("grid")], name="gb")
    src = tmp_path / "gb.json"
    src.write_text(gb.to_json())
    assert main(["emit", str(src), "--device", "h100", "-o", str(tmp_path / "g.ptx")]) == 2
    assert "--cooperative" in capsys.readouterr().err
    assert main(["emit", str(src), "--device", "h100", "--cooperative", "-o", str(tmp_path / "g.ptx")]) == 0


@pytest.mark.parametrize("extra, fragment", [
    (["--device", "b200"], "b200"),
    (["--device", "h100", "--sm", "80"], "disagree"),
    (["--sm", "42"], "--sm 42"),
    (["--sm", "-90"], "--sm -90"),
    (["--sm", "70", "--cubin"], "sm_70"),
])
def test_emit_target_errors(saxpy_json, tmp_path, capsys, extra, fragment):
    out = tmp_path / "new" / "k.ptx"
    assert main(["emit", str(saxpy_json), "-o", str(out), *extra]) == 2
    assert_fix(one_error_line(capsys, fragment))
    assert not (tmp_path / "new").exists()


def test_emit_cubin_for_an_sm_this_nvjitlink_does_not_know_is_one_usage_line(saxpy_json, tmp_path, capsys,
                                                                              monkeypatch):
    """Regression (a red-team): --sm 101 --cubin printed nvJitLink's three-line error, exit 1, with a
    Fix that was a Python call."""
    from vyre_numba.errors import CompileError
    from vyre_numba.ptx import assembler

    def unknown(text, *, sm):
        e = CompileError(f"nvJitLink failed to assemble PTX for sm_{sm}:\nERROR_UNSUPPORTED_ARCH (17)\n...")
        e.unknown_sm = f"this nvJitLink does not know sm_{sm}"
        raise e

    monkeypatch.setattr(assembler, "assemble", unknown)
    out = tmp_path / "new" / "k.cubin"
    assert main(["emit", str(saxpy_json), "--sm", "100", "--cubin", "-o", str(out)]) == 2
    said = one_error_line(capsys, "--cubin --sm 100: this nvJitLink does not know sm_100")
    assert_fix(said) and "drop --cubin" in said
    assert not (tmp_path / "new").exists()


def test_emit_ptx_that_calls_another_module_names_it_in_the_manifest(tmp_path):
    """Regression (a red-team): PTX calling a math function or the grid barrier declares it extern,
    and nothing said it must be linked; the manifest's `links` names them (a cubin has none)."""
    from vyre_numba import ir, ptx

    B = ir.BufferDecl
    p = ir.Program([B.read_write("x", 0, "f32")], 64, [ir.barrier("grid"),
                   ir.store("x", ir.gid(0), ir.sin(ir.load("x", ir.gid(0))))], name="k")
    src = tmp_path / "k.json"
    src.write_text(p.to_json())
    out = tmp_path / "k.ptx"
    assert main(["emit", str(src), "--cooperative", "-o", str(out)]) == 0
    man = json.loads((tmp_path / "k.ptx.json").read_text())
    assert man["links"] == ["vyre_grid_barrier", "vyre_math_sin_f32"]
    assert len(ptx.link_sources(out.read_text())) == 3  # the kernel, the math module and the barrier
    assert main(["emit", str(src), "--cooperative", "--cubin", "-o", str(tmp_path / "k.cubin")]) == 0
    assert json.loads((tmp_path / "k.cubin.json").read_text())["links"] == []


def test_emit_output_paths_that_cannot_be_written(saxpy_json, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["emit", str(saxpy_json), "-o", str(blocker / "k.ptx")]) == 2
    assert_fix(one_error_line(capsys, "-o", "not a directory"))
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path)]) == 2
    assert_fix(one_error_line(capsys, "is a directory"))
    (tmp_path / "k.ptx.json").mkdir()
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.ptx")]) == 2
    assert_fix(one_error_line(capsys, "k.ptx.json", "is a directory"))
    assert not (tmp_path / "k.ptx").exists()
    for directory in ("kernels/", "kernels/.", ".", "kernels/.."):  # a directory, maybe not there yet: no file "kernels"
        assert main(["emit", str(saxpy_json), "-o", f"{tmp_path}/{directory}"]) == 2
        assert_fix(one_error_line(capsys, "names a directory"))
        assert not (tmp_path / "kernels").exists()


def test_emit_oserror_while_writing_is_one_line(saxpy_json, tmp_path, capsys, monkeypatch):
    import vyre_numba.cli as cli

    real = cli.os.replace

    def denied(src, dst):
        if str(dst).endswith(".json"):
            raise PermissionError(13, "Permission denied")
        return real(src, dst)

    monkeypatch.setattr(cli.os, "replace", denied)
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.ptx")]) == 1
    assert_fix(one_error_line(capsys, "k.ptx.json", "Permission denied"))
    assert not (tmp_path / "k.ptx.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_demo_runs_on_the_reference_backend(capsys):
    assert main(["demo", "--backend", "reference", "-n", "5000"]) == 0
    out = capsys.readouterr().out
    assert "bit-identical to NumPy's a*x + y, rounded once: True" in out and "Fix:" in out
    assert "compiling" not in out and "nothing compiles" in out  # the reference interprets
    assert "PTX for sm_90" in out and "ld.global" in out  # emitted even without a GPU: no step skipped
    table = [row for row in out[out.index("\nstep "):].splitlines()[2:] if row.strip()]
    assert [row.split()[0] for row in table] == ["saxpy", "a", "components", "components", "e-graph"]
    assert all(row.endswith(" ok") for row in table)


@pytest.mark.parametrize("env,value", [("VYRE_NUMBA_PROGRESS", "garbage"), ("VYRE_NUMBA_CACHE", "maybe"),
                                       ("VYRE_NUMBA_REFERENCE_WORK", "-1"), ("VYRE_NUMBA_REFERENCE_MEMORY", "lots")])
def test_a_bad_setting_is_said_before_the_demos_first_step_and_by_info(capsys, monkeypatch, env, value):
    """Regression (a red-team): VYRE_NUMBA_PROGRESS=garbage ran five of the demo's steps and failed at
    the sixth, `info` said nothing of it, and VYRE_NUMBA_CACHE was never read without a GPU."""
    monkeypatch.setenv(env, value)
    assert main(["demo", "--backend", "reference", "-n", "100"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and env in captured.err and "Fix:" in captured.err
    assert main(["info"]) == 2
    settings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("settings: ")]
    assert len(settings) == 1 and env in settings[0] and "Fix:" in settings[0]
    monkeypatch.delenv(env)
    assert main(["info"]) == 0 and "settings: every one valid" in capsys.readouterr().out


def test_info_says_a_debug_setting_that_is_not_one(capsys, monkeypatch):
    """Regression (a red-team): `info` checked every setting but VYRE_NUMBA_DEBUG, which a value
    such as 'maybe' turns on; the commands still run with it (read as on)."""
    monkeypatch.setenv("VYRE_NUMBA_DEBUG", "maybe")
    assert main(["info"]) == 2
    settings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("settings: ")]
    assert settings == ["settings: $VYRE_NUMBA_DEBUG='maybe' is not a setting, so it is read as on. Fix: set it to 1 "
                        "or 0, or unset it."]
    for fine in ("0", "On", ""):
        monkeypatch.setenv("VYRE_NUMBA_DEBUG", fine)
        assert main(["info"]) == 0 and "settings: every one valid" in capsys.readouterr().out


def test_info_says_a_vyre_numba_setting_it_never_reads(capsys, monkeypatch):
    """Regression (a red-team): a misspelt name (VYRE_NUMBA_CACHEDIR) had no effect, and `info` said
    every setting was valid."""
    monkeypatch.setenv("VYRE_NUMBA_CACHEDIR", "/tmp/x")
    assert main(["info"]) == 2
    settings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("settings: ")]
    assert len(settings) == 1 and "VYRE_NUMBA_CACHEDIR is set, but vyre-numba reads no setting of that name" in \
        settings[0] and "(did you mean VYRE_NUMBA_CACHE_DIR?)" in settings[0] and "Fix: spell it as one of " in \
        settings[0], settings
    monkeypatch.delenv("VYRE_NUMBA_CACHEDIR")
    monkeypatch.setenv("VYRE_NUMBA_VERBOSE", "1")  # near no name: none is suggested (a review: the shared prefix
    assert main(["info"]) == 2  # made every name look near VYRE_NUMBA_DEBUG)
    out = capsys.readouterr().out
    assert "VYRE_NUMBA_VERBOSE is set" in out and "did you mean" not in out and "NUMBA_ENABLE_CUDASIM" not in out
    monkeypatch.delenv("VYRE_NUMBA_VERBOSE")
    assert main(["info"]) == 0 and "settings: every one valid" in capsys.readouterr().out


def test_the_demos_cpu_check_is_fma_and_can_fail(capsys, monkeypatch):
    """Regression (a red-team): on the CPU the demo compared the reference backend with itself, a
    check that could not fail; it now checks against NumPy, rounded once as fma rounds."""
    from vyre_numba import cli

    a, x, y = np.float32(1 + 2**-23), np.float32([2**-24 * (1 - 2**-23)]), np.float32([1 + 2**-23])
    naive = (np.float64(a) * x.astype(np.float64) + y).astype(np.float32)  # rounded twice: a tie, to even
    assert naive[0] == np.float32(1 + 2**-22) and cli.fma_f32(a, x, y)[0] == np.float32(1 + 2**-23)
    (ref,) = get_backend("reference").dispatch(cli.demo_program(), [np.float32([a]), x, y])
    assert ref[0] == np.float32(1 + 2**-23)
    backend = get_backend("reference")
    real = type(backend).dispatch

    def off_by_one_ulp(self, program, buffers, *args, **kwargs):
        out = real(self, program, buffers, *args, **kwargs)
        if program.name == "saxpy" and len(out) == 1:
            out[0].view(np.uint32)[0] += 1
        return out

    monkeypatch.setattr(type(backend), "dispatch", off_by_one_ulp)
    assert main(["demo", "--backend", "reference", "-n", "100"]) == 1
    out = capsys.readouterr().out
    assert "rounded once: False" in out and [r for r in out.splitlines() if r.startswith("saxpy")][0].endswith("FAILED")


@pytest.mark.gpu
def test_gpu_demo_runs_every_step_on_the_gpu(capsys):
    assert main(["demo", "--backend", "cuda", "-n", "100000"]) == 0
    out = capsys.readouterr().out
    assert "on the GPU" in out and "equal to the NumPy twin: True" in out and "(includes compiling)" in out
    assert all(row.endswith(" ok") for row in out[out.index("\nstep "):].splitlines()[2:] if row.strip())


@pytest.mark.parametrize("n", ["-5", "0", str(2**32), str(10**30), str(2**28 + 1)])
def test_demo_refuses_a_bad_element_count(capsys, n):
    """2**28 + 1: more than the reference backend's launch (it was refused at the third step, after
    the first two had run on gigabytes)."""
    assert main(["demo", "--backend", "reference", "-n", n]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # before any step
    assert "-n " + n in out.err and "Fix:" in out.err


@pytest.mark.parametrize("argv", [
    ["run"],
    ["run", "p.json"],
    ["run", "p.json", "--out", "o", "--grid", "abc"],
    ["run", "p.json", "--out", "o", "--iterations", "1.5"],
    ["demo", "-n", "many"],
    ["emit", "p.json"],
    ["nonsense"],
])
def test_argparse_errors_still_exit_2_with_a_fix(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert err.rstrip().endswith("--help` for the commands and arguments it takes."), err
    assert "Fix: see `vyre-numba" in err


def test_console_script_entry_point():
    out = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "info"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "vyre-numba" in out.stdout


def test_console_script_usage_error_is_one_line_without_traceback():
    out = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "demo", "-n", "-5"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: -n -5") and "Fix:" in out.stderr



def test_a_simulator_setting_numba_cannot_read_is_a_setting_error_without_tracebacks():
    """Regression (a red-team): NUMBA_ENABLE_CUDASIM=yes printed Numba's two warnings, each with a
    traceback, and `info` called every setting valid."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="yes")
    info = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "info"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert info.returncode == 2 and "Traceback" not in info.stdout + info.stderr, info.stdout + info.stderr
    assert "settings: NUMBA_ENABLE_CUDASIM='yes' is not a number, so Numba warns" in info.stdout
    demo = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "demo", "--backend", "reference", "-n", "8"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert demo.returncode == 2 and "Traceback" not in demo.stdout + demo.stderr, demo.stdout + demo.stderr
    assert demo.stderr.startswith("error: SettingError: NUMBA_ENABLE_CUDASIM='yes' is not a number") and "Fix: set " in demo.stderr
    # a review: Numba's warning of another variable vyre-numba does not read is left to say what it says
    other = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "info"], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, NUMBA_OPT="fast"))
    assert "Environment variable 'NUMBA_OPT' is defined but its associated value 'fast'" in other.stderr, other.stderr


def test_the_fix_of_an_unknown_home_in_the_cache_dir_works_when_followed():
    """Regression (a review): VYRE_NUMBA_CACHE_DIR='~nosuchuser/c' said to set VYRE_NUMBA_CACHE=0,
    and with it set run and demo still refused the directory."""
    env = dict(os.environ, VYRE_NUMBA_CACHE_DIR="~nosuchuser_vyre/c")
    refused = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "demo", "--backend", "reference", "-n", "8"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2 and "VYRE_NUMBA_CACHE=0" in refused.stderr, refused.stderr
    followed = subprocess.run([sys.executable, "-m", "vyre_numba.cli", "demo", "--backend", "reference", "-n", "8"],
                              capture_output=True, text=True, timeout=300, env=dict(env, VYRE_NUMBA_CACHE="0"))
    assert followed.returncode == 0, followed.stdout + followed.stderr


def test_invalid_program_json_is_reported(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else"}))
    assert main(["emit", str(bad), "-o", str(tmp_path / "x.ptx")]) == 2
    assert_fix(one_error_line(capsys, "IRValidationError"))
    assert not (tmp_path / "x.ptx").exists()
    assert isinstance(ir.Program.from_json(demo_program().to_json()), ir.Program)


def test_a_program_json_with_a_huge_integer_is_an_invalid_program(tmp_path, capsys):
    """Regression: an int of 5000 digits raised Python's ValueError, reported as an internal error."""
    bad = tmp_path / "huge.json"
    bad.write_text(demo_program().to_json().replace('"count":0', '"count":' + "9" * 5000, 1))
    assert '"count":9999' in bad.read_text()
    assert main(["emit", str(bad), "-o", str(tmp_path / "x.ptx")]) == 2
    assert_fix(one_error_line(capsys, "IRValidationError", "digits"))


def test_python_dash_m_runs_the_same_command():
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "vyre_numba", "--help"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "COMMAND" in ok.stdout
    assert all(f"\n    {cmd} " in ok.stdout for cmd in ("info", "run", "emit", "demo", "bench")), ok.stdout
    bad = subprocess.run([sys.executable, "-m", "vyre_numba", "run"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "required" in bad.stderr and "Traceback" not in bad.stderr


def test_outputs_get_the_modes_a_plain_open_gives(saxpy_json, tmp_path):
    import os
    import stat

    out = tmp_path / "k.ptx"
    old = os.umask(0o022)
    try:
        assert main(["emit", str(saxpy_json), "-o", str(out)]) == 0
    finally:
        os.umask(old)
    for path in (out, out.with_name(out.name + ".json")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_bench_with_an_empty_dir_exits_2_and_runs_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--dir", ""]) == 2
    assert_fix(one_error_line(capsys, "--dir is empty"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["def run(:\n", "x = 1\n"])
def test_bench_of_a_folder_whose_suite_is_not_one_exits_2(tmp_path, capsys, text):
    (tmp_path / "suite.py").write_text(text)
    assert main(["bench", "--dir", str(tmp_path)]) == 2
    assert_fix(one_error_line(capsys, "suite.py"))


# ---- outputs that are not plain new files, and outputs that are inputs -----------------------------

def _special_files(tmp_path):
    """Name -> maker of each kind of special file this machine lets a test make in `tmp_path`."""
    import socket
    import stat

    def sock(path):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()

    makers = {"FIFO (named pipe)": os.mkfifo, "socket": sock}
    if os.geteuid() == 0:  # a private node with /dev/null's numbers, never the system's
        makers["character device"] = lambda p: os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return makers


@pytest.mark.parametrize("which", ["code", "manifest"])
def test_emit_refuses_special_files_and_leaves_them_as_they_were(saxpy_json, tmp_path, capsys, monkeypatch, which):
    """Regression: `emit -o` renamed a regular file over a FIFO, a device node (the real /dev/null, run
    as root) or a socket, and said "wrote"; /dev/full "succeeded"."""
    import stat

    import vyre_numba.ptx.emitter as emitter

    monkeypatch.setattr(emitter, "emit", lambda *a, **k: pytest.fail("emitted before refusing the output"))
    for kind, make in _special_files(tmp_path).items():
        out = tmp_path / f"{kind[:4]}.ptx"
        special = out if which == "code" else out.with_name(out.name + ".json")
        make(special)
        before = os.lstat(special)
        assert main(["emit", str(saxpy_json), "-o", str(out)]) == 2, kind
        assert_fix(one_error_line(capsys, str(special), f"is a {kind}, not a regular file"))
        after = os.lstat(special)
        assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino, kind
        assert not os.path.lexists(out if which == "manifest" else out.with_name(out.name + ".json"))


def test_run_refuses_a_special_file_where_an_output_goes(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches):
    """Regression: `run --out DIR` renamed DIR/y.npy over a FIFO or device node there."""
    import stat

    for kind, make in _special_files(tmp_path).items():
        out = tmp_path / kind[:4]
        out.mkdir()
        make(out / "y.npy")
        assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 2
        assert_fix(one_error_line(capsys, "y.npy", f"is a {kind}, not a regular file"))
        assert not stat.S_ISREG(os.lstat(out / "y.npy").st_mode)
    assert dispatches == []


def test_an_output_that_is_a_symbolic_link_writes_the_file_it_leads_to(saxpy_json, saxpy_inputs, tmp_path):
    """Regression: an output path that was a symbolic link was replaced by a regular file, and the file
    it led to was never written."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "k.ptx"
    link.symlink_to(real / "k.ptx")  # not there yet: made through the link
    assert main(["emit", str(saxpy_json), "-o", str(link)]) == 0
    assert link.is_symlink() and b".entry saxpy(" in (real / "k.ptx").read_bytes()
    (real / "k.ptx").write_text("old")  # there now: replaced through the link
    assert main(["emit", str(saxpy_json), "-o", str(link)]) == 0
    assert link.is_symlink() and b".entry saxpy(" in (real / "k.ptx").read_bytes()
    assert no_temporaries(real) and no_temporaries(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    (out / "y.npy").symlink_to(real / "y.npy")
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 0
    assert (out / "y.npy").is_symlink() and np.load(real / "y.npy").shape == (5,)


def test_symbolic_links_that_lead_nowhere_writable_are_refused(saxpy_json, tmp_path, capsys):
    """Regression: a dangling or looping symbolic link given as the output was replaced by a regular file."""
    dangling = tmp_path / "d.ptx"
    dangling.symlink_to(tmp_path / "missing" / "k.ptx")
    loop = tmp_path / "loop.ptx"
    loop.symlink_to(loop)
    assert main(["emit", str(saxpy_json), "-o", str(dangling)]) == 2
    assert_fix(one_error_line(capsys, "d.ptx", "symbolic link", "cannot be written"))
    assert main(["emit", str(saxpy_json), "-o", str(loop)]) == 2
    assert_fix(one_error_line(capsys, "loop.ptx", "symbolic link loop"))
    assert dangling.is_symlink() and loop.is_symlink() and not (tmp_path / "missing").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.ptx", "loop.ptx", "saxpy.json"]


def test_a_replaced_output_keeps_its_mode(saxpy_json, tmp_path):
    """Regression: an existing output file was replaced by one with the umask's mode, as if new."""
    import stat

    out = tmp_path / "k.ptx"
    out.write_text("old")
    out.chmod(0o600)
    assert main(["emit", str(saxpy_json), "-o", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and b".entry saxpy(" in out.read_bytes()


def test_a_ctrl_c_between_the_renames_of_a_set_of_outputs_comes_after_the_last(tmp_path, monkeypatch):
    """Regression (a red-team): an interrupt between write_all's renames left a new k.ptx beside the old
    k.ptx.json (another program's digest and ABI), against its promise of every old file or none."""
    import signal

    from vyre_numba import files

    a, b = tmp_path / "k.ptx", tmp_path / "k.ptx.json"
    a.write_text("old ptx")
    b.write_text("old json")
    real, renamed = files.os.replace, []

    def replace(src, dst):
        real(src, dst)
        renamed.append(dst)
        if len(renamed) == 1:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C after the first
    monkeypatch.setattr(files.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        files.write_all([(a, lambda f: f.write(b"new ptx")), (b, lambda f: f.write(b"new json"))])
    assert len(renamed) == 2 and a.read_text() == "new ptx" and b.read_text() == "new json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.ptx", "k.ptx.json"]  # no temporary left


def test_a_write_error_into_an_output_is_exit_1_with_a_fix(saxpy_json, tmp_path, capsys, monkeypatch):
    """Regression guard: a full disk while writing (ENOSPC at close) is an error with a Fix, and no file
    or temporary is left."""
    import vyre_numba.cli as cli

    real = cli.os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self.f

        def __exit__(self, *exc):
            self.f.close()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli.os, "fdopen", lambda *a, **k: Full(real(*a, **k)))
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.ptx")]) == 1
    assert_fix(one_error_line(capsys, "cannot write", "k.ptx", "No space left on device"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saxpy.json"]


def test_outputs_are_replaced_as_a_set_or_not_at_all(saxpy_json, saxpy_inputs, tmp_path, capsys, monkeypatch):
    """Regression (a red-team, on a full disk): emit replaced the code, then failed on the manifest,
    which went on describing the old code; run replaced one output of two. Now a failure while
    writing any of them replaces none."""
    import vyre_numba.cli as cli

    out = tmp_path / "k.ptx"
    assert main(["emit", str(saxpy_json), "-o", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real, calls = cli.os.fdopen, []

    class FullOnSecond:
        def __init__(self, f):
            self.f = f
            calls.append(1)

        def __enter__(self):
            return self.f

        def __exit__(self, *exc):
            self.f.close()
            if len(calls) == 2:  # the disk fills as the second file of the set is written
                raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli.os, "fdopen", lambda *a, **k: FullOnSecond(real(*a, **k)))
    assert main(["emit", str(saxpy_json), "--sm", "80", "-o", str(out)]) == 1
    assert_fix(one_error_line(capsys, "cannot write", "k.ptx.json", "No space left on device",
                              "no file was replaced"))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temporary left either
    calls.clear()
    two = ir.Program([ir.BufferDecl.read("x", 0, "u32"), ir.BufferDecl.output("a", 1, "u32", 4),
                      ir.BufferDecl.output("b", 2, "u32", 4)], 64,
                     [ir.store("a", ir.gid(0), ir.load("x", ir.gid(0))), ir.store("b", ir.gid(0), ir.u32(7))],
                     name="two")
    (tmp_path / "two.json").write_text(two.to_json())
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.uint32))
    outs = tmp_path / "outs"
    outs.mkdir()
    for name in ("a", "b"):
        np.save(outs / f"{name}.npy", np.zeros(1, np.uint32))
    assert main(["run", str(tmp_path / "two.json"), "--input", f"x={tmp_path / 'x.npy'}", "--out", str(outs),
                 "--backend", "reference"]) == 1
    assert_fix(one_error_line(capsys, "cannot write", "b.npy", "no file was replaced"))
    assert [np.load(outs / f"{n}.npy").tolist() for n in ("a", "b")] == [[0], [0]]
    assert sorted(p.name for p in outs.iterdir()) == ["a.npy", "b.npy"]


@pytest.mark.parametrize("output, clobbered", [("saxpy", "the manifest"), ("saxpy.json", "the code"),
                                               ("alias.json", "the code"), ("hard.json", "the code"),
                                               ("alias", "the manifest")])
def test_emit_refuses_to_write_over_its_program(saxpy_json, tmp_path, capsys, monkeypatch, output, clobbered):
    """Regression: `emit saxpy.json -o saxpy` wrote the manifest over the program saxpy.json (and
    `-o saxpy.json` wrote PTX over it), so the next emit had no program to read."""
    import vyre_numba.ptx.emitter as emitter

    (tmp_path / "alias.json").symlink_to(saxpy_json)
    os.link(saxpy_json, tmp_path / "hard.json")
    monkeypatch.setattr(emitter, "emit", lambda *a, **k: pytest.fail("emitted before refusing the output"))
    monkeypatch.chdir(tmp_path)
    program = saxpy_json.read_bytes()
    assert main(["emit", "saxpy.json", "-o", output]) == 2
    assert_fix(one_error_line(capsys, f"-o {output}: {clobbered} would be written", "the program (saxpy.json)"))
    assert saxpy_json.read_bytes() == program
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias.json", "hard.json", "saxpy.json"]


def test_emit_refuses_code_and_manifest_that_are_one_file(saxpy_json, tmp_path, capsys):
    """Regression: when FILE.json was a link to FILE, the manifest was written over the code."""
    (tmp_path / "k.ptx.json").symlink_to(tmp_path / "k.ptx")
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.ptx")]) == 2
    assert_fix(one_error_line(capsys, "are one file"))
    assert not (tmp_path / "k.ptx").exists()


def test_run_refuses_to_write_over_an_input(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches):
    """Regression: `run --out DIR` where DIR held an input named like an output (y.npy) wrote the
    result over that input."""
    before = (tmp_path / "y.npy").read_bytes()
    assert main(["run", str(saxpy_json), "--out", str(tmp_path), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "output 'y' would be written to", "the file of --input y"))
    assert dispatches == [] and (tmp_path / "y.npy").read_bytes() == before
    renamed = tmp_path / "prog"
    renamed.mkdir()
    (renamed / "y.npy").symlink_to(saxpy_json)  # the program, reached through a link
    assert main(["run", str(saxpy_json), "--out", str(renamed), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "which is the program"))
    assert dispatches == [] and ir.Program.from_json(saxpy_json.read_text()).name == "saxpy"


# ---- standard output that cannot be written --------------------------------------------------------

class _FullStdout:
    """A standard output on a full disk: every write or flush fails with ENOSPC."""

    def write(self, text):
        raise OSError(28, "No space left on device")

    flush = write


@pytest.mark.parametrize("argv", [["info"], ["--help"], ["--version"], ["run", "--help"]])
def test_a_full_standard_output_is_a_write_error(capsys, monkeypatch, argv):
    """Regression: `info > /dev/full` was reported as "internal error, a bug in vyre-numba", and
    `--help > /dev/full` exited 0 having written nothing."""
    monkeypatch.setattr(sys, "stdout", _FullStdout())
    assert main(argv) == 1
    assert_fix(one_error_line(capsys, "cannot write to standard output: No space left on device"))
    assert isinstance(sys.stdout, _FullStdout)  # given back as it was


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("argv", [["info"], ["--help"]])
def test_console_script_into_dev_full_says_so_and_exits_1(argv):
    """Regression: the same through a real full device, with nothing more said at interpreter exit."""
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "vyre_numba", *argv], stdout=full, stderr=subprocess.PIPE,
                             text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: cannot write to standard output"), out.stderr
    assert "Fix:" in out.stderr


# ---- run options the library's fixes ask for --------------------------------------------------------

def _grid_program():
    i = ir.var("i")
    return ir.Program([ir.BufferDecl.read_write("y", 0, "u32")], 64,
                      [ir.let("i", ir.gid(0)),
                       ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("y", i) + ir.lit(1, "u32"))]),
                       ir.barrier("grid"),
                       ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.load("y", i) * ir.lit(2, "u32"))])],
                      name="gridp")


def _sized_program(**kw):
    """y[i] = i over an output-only y of no declared count (and no input to size it from)."""
    i = ir.var("i")
    return ir.Program([ir.BufferDecl.output("y", 0, "u32", **kw)], 64,
                      [ir.let("i", ir.gid(0)), ir.if_(i < ir.buf_len("y"), [ir.store("y", i, i)])], name="noin")


def test_run_cooperative_runs_a_grid_barrier_program(tmp_path, capsys, dispatches):
    """Regression: a program with barrier('grid') could not be run from the command line; its error
    said to use DispatchConfig(cooperative=True), which `run` had no option for."""
    src = tmp_path / "grid.json"
    src.write_text(_grid_program().to_json())
    np.save(tmp_path / "u.npy", np.arange(10, dtype=np.uint32))
    args = ["run", str(src), "--input", f"y={tmp_path / 'u.npy'}", "--out", str(tmp_path / "o"), "--backend",
            "reference"]
    assert main(args) == 2
    line = one_error_line(capsys, "barrier('grid')")
    assert "pass --cooperative" in line.split("Fix:")[1] and "DispatchConfig" not in line
    assert dispatches == [] and not (tmp_path / "o").exists()
    assert main(args + ["--cooperative"]) == 0
    assert np.array_equal(np.load(tmp_path / "o" / "y.npy"), (np.arange(10) + 1) * 2)


def test_run_size_sizes_an_output_with_no_count(tmp_path, capsys, dispatches):
    """Regression: an output-only buffer of count 0 with no input could not be run; the error said
    to pass sizes={'y': n}, which `run` took no option for."""
    src = tmp_path / "noin.json"
    src.write_text(_sized_program().to_json())
    args = ["run", str(src), "--out", str(tmp_path / "o"), "--backend", "reference"]
    assert main(args) == 2
    line = one_error_line(capsys, "'y'", "no input to take its size from")
    assert "--size y=N" in line.split("Fix:")[1] and "sizes=" not in line
    assert dispatches == []
    assert main(args + ["--size", "y=7"]) == 0
    assert np.array_equal(np.load(tmp_path / "o" / "y.npy"), np.arange(7))
    assert main(args + ["--size", "y=0"]) == 0 and np.load(tmp_path / "o" / "y.npy").size == 0


@pytest.mark.parametrize("program, size, fragment", [
    ("noin", "y", "is not NAME=N"),
    ("noin", "y=-1", "is not NAME=N"),
    ("noin", "y=1.5", "is not NAME=N"),
    ("noin", "y=+5", "is not NAME=N"),
    ("noin", f"y={2**32}", "is not NAME=N"),
    ("noin", "=5", "is not NAME=N"),
    ("noin", "z=5", "'z' is not an output-only buffer of 'noin'"),
    ("saxpy", "y=5", "'y' is not an output-only buffer of 'saxpy'"),
    ("counted", "y=5", "declared with 8 elements"),
    ("ranged", "y=5", "ends past its 5 elements"),
])
def test_run_size_mistakes_exit_2_before_any_work(tmp_path, capsys, dispatches, program, size, fragment):
    """Regression: no --size option existed; its mistakes are each one line with a fix in its own terms."""
    prog = {"noin": _sized_program(), "saxpy": demo_program(), "counted": _sized_program(count=8),
            "ranged": _sized_program(output_byte_range=(0, 40))}[program]
    src = tmp_path / "p.json"
    src.write_text(prog.to_json())
    ins = []
    if program == "saxpy":
        for name in "axy":
            np.save(tmp_path / f"{name}.npy", np.ones(1 if name == "a" else 5, np.float32))
            ins += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    out = tmp_path / "o"
    assert main(["run", str(src), "--out", str(out), "--backend", "reference", "--size", size, *ins]) == 2
    line = one_error_line(capsys, fragment)
    assert_fix(line)
    assert "sizes=" not in line and "DispatchConfig" not in line
    assert dispatches == [] and not out.exists()


def test_run_size_given_twice_is_refused(tmp_path, capsys, dispatches):
    src = tmp_path / "p.json"
    src.write_text(_sized_program().to_json())
    assert main(["run", str(src), "--out", str(tmp_path / "o"), "--size", "y=1", "--size", "y=2"]) == 2
    assert_fix(one_error_line(capsys, "--size 'y' is given twice"))
    assert dispatches == []


def test_run_of_an_unavailable_backend_names_the_option(saxpy_json, saxpy_inputs, tmp_path, capsys, monkeypatch):
    """Regression: `run --backend cuda` without a GPU said "use get_backend('reference')", a Python call."""
    import vyre_numba.cli as cli

    reason = "no CUDA driver or GPU was found. Fix: run on a machine with an NVIDIA GPU, or use get_backend('reference')."
    monkeypatch.setattr(cli, "unavailable_reason", lambda name: reason if name == "cuda" else None)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "cuda", *saxpy_inputs]) == 2
    line = one_error_line(capsys, "--backend cuda is unavailable here")
    assert "--backend reference" in line.split("Fix:")[1] and "get_backend" not in line
    assert main(["demo", "--backend", "cuda"]) == 2
    assert "get_backend" not in one_error_line(capsys, "--backend cuda")
    assert main(["info"]) == 0
    assert "get_backend" not in capsys.readouterr().out


# ---- usage messages ------------------------------------------------------------------------------------

def test_no_command_says_so_without_argparse_internals(capsys):
    """Regression: no command said "the following arguments are required: cmd" (argparse's dest name)."""
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "no command given" in err and "info, run, emit, demo and bench" in err and "cmd" not in err, err
    assert "Fix: see `vyre-numba --help`" in err


def test_version_prints_the_package_version(capsys):
    """Regression: there was no --version (it said "the following arguments are required: cmd")."""
    from vyre_numba.version import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"vyre-numba {__version__}"


def test_run_out_that_is_a_file_says_the_path_is_a_file(saxpy_json, saxpy_inputs, tmp_path, capsys):
    """Regression: `--out FILE` said "Fix: choose a path whose parents are directories"; its parents are."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", str(saxpy_json), "--out", str(blocker), "--backend", "reference", *saxpy_inputs]) == 2
    line = one_error_line(capsys, f"{blocker} is a regular file, not a directory")
    assert "parents" not in line and "name a directory for the outputs" in line.split("Fix:")[1]


def test_an_input_that_is_not_npy_gives_no_pickle_advice(saxpy_json, saxpy_inputs, tmp_path, capsys):
    """Regression: a text file given as --input passed on NumPy's "pickled data ... allow_pickle" advice."""
    (tmp_path / "notes.npy").write_text("hello\n")
    args = [a if not a.startswith("x=") else f"x={tmp_path / 'notes.npy'}" for a in saxpy_inputs]
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), *args]) == 2
    line = one_error_line(capsys, "not a .npy file")
    assert "pickle" not in line.lower()


# ---- rt40: program paths, names, inputs and outputs a red-team found mishandled -------------------

@pytest.mark.parametrize("kind", ["character device", "FIFO (named pipe)", "directory"])
@pytest.mark.parametrize("cmd", ["run", "emit"])
def test_a_program_path_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, capsys, dispatches,
                                                                                  kind, cmd):
    """Regression (a red-team): `emit /dev/zero` read until memory ran out (killed, or "out of host
    memory" with a Fix that did not apply), and a FIFO blocked the command forever."""
    import threading

    if kind == "character device":
        path = "/dev/null"  # as /dev/zero, without the endless read should the check be gone
    elif kind == "directory":
        path = str(tmp_path)
    else:
        path = str(tmp_path / "fifo.json")
        os.mkfifo(path)  # no writer: opening it for reading blocks unless the loader does not wait
    argv = (["run", path, "--out", str(tmp_path / "o"), "--backend", "reference"] if cmd == "run" else
            ["emit", path, "-o", str(tmp_path / "o" / "k.ptx")])
    status = []
    t = threading.Thread(target=lambda: status.append(main(argv)), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():  # let the blocked open go, then fail
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail("the command blocked on the program path")
    assert status == [2]
    assert_fix(one_error_line(capsys, f"program {path!r} is a {kind}, not a regular file",
                              "Fix: pass the path of a file written by Program.to_json()"))
    assert dispatches == [] and not (tmp_path / "o").exists()


def test_an_input_replaced_by_a_fifo_after_its_check_is_refused_not_waited_on(saxpy_json, saxpy_inputs, tmp_path,
                                                                             capsys, dispatches, monkeypatch):
    """The input file checked is the file read: one that was regular when looked at and is a FIFO
    with no writer when opened is refused, where an open() by its name would wait forever."""
    import threading
    from pathlib import Path

    fifo = tmp_path / "late.npy"
    os.mkfifo(fifo)
    regular_stat = os.stat(saxpy_json)
    real = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, *a, **k: regular_stat if str(self) == str(fifo) else
                        real(self, *a, **k))  # as though it were replaced between the look and the open
    args = [a if not a.startswith("x=") else f"x={fifo}" for a in saxpy_inputs]
    status = []
    t = threading.Thread(target=lambda: status.append(main(["run", str(saxpy_json), "--out", str(tmp_path / "o"),
                                                            "--backend", "reference", *args])), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail("the command blocked on the input")
    assert status == [2]
    assert_fix(one_error_line(capsys, "for input 'x': not a regular file", "Fix: pass the path of a .npy file"))
    assert dispatches == []


def test_a_program_file_past_the_size_cap_is_refused(saxpy_json, tmp_path, capsys, monkeypatch):
    from vyre_numba import cli

    monkeypatch.setattr(cli, "MAX_PROGRAM_BYTES", saxpy_json.stat().st_size - 1)
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.ptx")]) == 2
    assert_fix(one_error_line(capsys, "is larger than", "the most a program file may be"))
    monkeypatch.setattr(cli, "MAX_PROGRAM_BYTES", saxpy_json.stat().st_size)
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.ptx")]) == 0


def test_an_empty_program_path_says_it_is_empty(tmp_path, capsys):
    """Regression (a red-team): `emit ""` said "cannot read program '': Is a directory"."""
    assert main(["emit", "", "-o", str(tmp_path / "k.ptx")]) == 2
    assert_fix(one_error_line(capsys, "error: the program path is empty. Fix: pass the path of a file"))


def test_a_program_file_with_a_byte_order_mark_says_so(saxpy_json, tmp_path, capsys):
    """Regression (a red-team): "Unexpected UTF-8 BOM (decode using utf-8-sig)", with a Fix that did
    not mention it."""
    saxpy_json.write_bytes(b"\xef\xbb\xbf" + saxpy_json.read_bytes())
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.ptx")]) == 2
    line = one_error_line(capsys, "begins with a byte-order mark")
    assert "remove the BOM" in line.split("Fix:")[1]


def test_a_program_json_with_null_for_its_entry_is_refused_not_run_empty(saxpy_json, saxpy_inputs, tmp_path,
                                                                         capsys, dispatches):
    """Regression (a red-team): `"entry": null` ran as an empty program, exit 0, y written unchanged."""
    d = json.loads(saxpy_json.read_text())
    d["entry"] = None
    saxpy_json.write_text(json.dumps(d))
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference",
                 *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "has null where the program's entry takes a list of statements"))
    assert dispatches == [] and not (tmp_path / "o").exists()


def _long_named(tmp_path, n=200_000):
    p = demo_program()
    path = tmp_path / "long.json"
    path.write_text(ir.Program(p.buffers, p.workgroup_size, p.entry, name="a" * n).to_json())
    return path


@pytest.mark.parametrize("extra, fragment", [
    (["--input", "q={tmp}/y.npy"], "--input 'q' is not an input of 'aaa"),
    (["--size", "y=5"], "--size 'y' is not an output-only buffer of 'aaa"),
    ([], "ran 'aaa"),
])
def test_a_long_program_name_is_clipped_in_what_the_command_says(tmp_path, saxpy_inputs, capsys, extra, fragment):
    """Regression (a red-team): a 200,000-character program name made a 200 KB error line."""
    argv = ["run", str(_long_named(tmp_path)), "--out", str(tmp_path / "o"), "--backend", "reference",
            *saxpy_inputs, *[e.replace("{tmp}", str(tmp_path)) for e in extra]]
    status = main(argv)
    captured = capsys.readouterr()
    said = captured.err if extra else captured.out.splitlines()[-1]
    assert status == (2 if extra else 0) and fragment in said and "a" * 100 not in said, said[:300]
    assert len(said) < 300 and "aaa...aaa" in said


def test_a_npy_header_claiming_more_than_the_file_holds_is_a_bad_file(saxpy_json, saxpy_inputs, tmp_path, capsys,
                                                                       dispatches):
    """Regression (a red-team): a 96-byte .npy whose header claimed 99999999999 elements was
    reported as "out of host memory" (exit 1), with a Fix to use smaller inputs."""
    path = tmp_path / "x.npy"
    with open(path, "wb") as f:  # a header of 99999999999 f32s over the data of 10
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (99999999999,)})
        f.write(np.arange(10, dtype=np.float32).tobytes())
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) == 2
    line = one_error_line(capsys, "cannot load", "for input 'x': not a .npy array (its header claims "
                          "399,999,999,996 bytes of data, the file holds 40)")
    assert "out of host memory" not in line and "numpy.save" in line.split("Fix:")[1]
    assert dispatches == []


@pytest.mark.parametrize("write, fragment", [
    # Regression (a red-team): a header of format 3.0 went unchecked (10**12 elements said "out of host memory")
    (lambda f: f.write(_npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", 3) + b"\0" * 16),
     "its header claims 4,000,000,000,000 bytes of data, the file holds 16"),
    (lambda f: f.write(_npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", 3) + b"\0" * 28),
     "its header claims 20 bytes of data, the file holds 28"),
    # an unbalanced bracket in the header raised tokenize's TokenError, said as a bug of vyre-numba
    (lambda f: f.write(_npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (5, }", 1) + b"\0" * 20),
     "for input 'x': not a .npy array ("),
    # a negative size was said to be data past the array
    (lambda f: (np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (-5,)}),
                f.write(b"\0" * 20)), "its header claims the shape (-5,), a negative size"),
])
def test_a_corrupt_npy_header_of_any_format_is_a_bad_file(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches,
                                                           write, fragment):
    with open(tmp_path / "x.npy", "wb") as f:
        write(f)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) == 2
    line = one_error_line(capsys, "cannot load", fragment)
    assert "bug in vyre-numba" not in line and "out of host memory" not in line and "numpy.save" in line
    assert dispatches == []


def _npy(header: bytes, major: int) -> bytes:
    """A .npy file's signature and header (format major.0), written by hand: NumPy writes none of these."""
    header += b" " * (-(len(header) + (10 if major == 1 else 12) + 1) % 64) + b"\n"
    size = len(header).to_bytes(2 if major == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([major, 0]) + size + header


def test_an_output_path_the_terminal_cannot_spell_is_no_failure(saxpy_json, saxpy_inputs, tmp_path, capsys,
                                                                 monkeypatch):
    """Regression (a red-team): with PYTHONIOENCODING=ascii, `run --out outé` wrote its outputs, then
    exited 1 calling the UnicodeEncodeError "a bug in vyre-numba"."""
    import io

    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii", write_through=True)
    monkeypatch.setattr(sys, "stdout", ascii_out)
    out = tmp_path / "outé"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 0
    assert capsys.readouterr().err == ""
    said = raw.getvalue().decode("ascii")
    assert f"-> {str(out).replace('é', chr(92) + 'xe9')}/y.npy" in said and "ran 'saxpy'" in said
    assert np.array_equal(np.load(out / "y.npy"), np.arange(5, dtype=np.float32) * 2 + 1)


@pytest.mark.parametrize("env, value", [("VYRE_NUMBA_PROGRESS", "maybe"), ("VYRE_NUMBA_CACHE", "maybe"),
                                        ("VYRE_NUMBA_CACHE_DIR", "~nosuchuser-vyre/x")])
def test_run_refuses_a_bad_setting_before_any_work_as_demo_and_info_do(saxpy_json, saxpy_inputs, tmp_path, capsys,
                                                                        dispatches, monkeypatch, env, value):
    """Regression (a red-team): `run` never checked the settings (exit 0 on the reference backend)
    while `info` called them invalid and `demo` refused them; info did not read VYRE_NUMBA_CACHE_DIR."""
    monkeypatch.setenv(env, value)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, env, repr(value)))
    assert dispatches == [] and not (tmp_path / "o").exists()
    assert main(["info"]) == 2
    settings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("settings: ")]
    assert len(settings) == 1 and f"{env}={value!r}" in settings[0] and "Fix:" in settings[0]


def test_info_takes_an_unset_or_usable_cache_dir_as_valid(capsys, monkeypatch, tmp_path):
    for value in ("", "  ", str(tmp_path / "c"), "~/c"):
        monkeypatch.setenv("VYRE_NUMBA_CACHE_DIR", value)
        assert main(["info"]) == 0 and "settings: every one valid" in capsys.readouterr().out


def test_bench_whose_suite_exits_at_import_is_said_not_silent(tmp_path, capsys):
    """Regression (a red-team): a suite.py raising SystemExit(3) at import made bench exit 3 without a word."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    (tmp_path / "suite.py").write_text("raise SystemExit(3)\n")
    assert main(["bench", "--dir", str(tmp_path)]) == 2
    assert_fix(one_error_line(capsys, "suite.py does not load (SystemExit"))


@pytest.mark.parametrize("argv, usage, said", [
    (["demo", "--n", "5"], "vyre-numba demo", "unrecognized arguments: --n 5 (did you mean -n?)"),
    (["demo", "--backnd", "reference"], "vyre-numba demo", "(did you mean --backend?)"),
    (["bench", "--quik"], "vyre-numba bench", "unrecognized arguments: --quik (did you mean --quick?)"),
    (["run", "p.json", "--out", "o", "--bogus"], "vyre-numba run", "unrecognized arguments: --bogus. Fix"),
    (["dmeo"], "vyre-numba", "invalid choice: 'dmeo'"),
    (["bench", "--qui"], "vyre-numba bench", "unrecognized arguments: --qui (did you mean --quick?)"),
    (["demo", "--back", "reference"], "vyre-numba demo", "unrecognized arguments: --back reference (did you mean "
                                                          "--backend?)"),
])
def test_an_unknown_argument_is_told_with_its_commands_usage_and_the_nearest_option(capsys, argv, usage, said):
    """Regression (a red-team): a subcommand's misspelt option got the top-level usage, a Fix
    naming `vyre-numba --help` (which lists no subcommand's options) and no suggestion."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"usage: {usage} " in err and said in err, err
    assert f"Fix: see `{usage} --help`" in err
    if argv == ["dmeo"]:
        assert "(did you mean 'demo'?)" in err


@pytest.mark.parametrize("argv", [
    ["run", "p.json", "--out", "o", "--grid", "\u0663"], ["run", "p.json", "--out", "o", "--iterations", "1_0"],
    ["demo", "-n", "\u0661\u0660\u0660"], ["emit", "p.json", "-o", "k.ptx", "--sm", "\uff19\uff10"],
])
def test_counts_take_ascii_digits_only_as_size_does(capsys, argv):
    """Regression (a red-team): argparse's int() took `--grid ٣` and `--iterations 1_0`, while
    `--size y=٣` was refused: one rule now, digits 0-9."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "invalid int value" in err and "(digits 0-9 only)" in err and "Fix:" in err


def test_an_out_that_is_a_symbolic_link_loop_is_called_one(saxpy_json, saxpy_inputs, tmp_path, capsys):
    """Regression (a red-team): a loop was called "a broken symbolic link"."""
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "loop1"), *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "loop1 is a symbolic link loop, not a directory"))
    os.symlink(tmp_path / "nowhere", tmp_path / "broken")
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "broken"), *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "broken is a broken symbolic link, not a directory"))


def test_an_npy_file_with_data_past_its_array_is_refused(saxpy_json, saxpy_inputs, tmp_path, capsys, dispatches):
    with open(tmp_path / "x.npy", "ab") as f:  # numpy.save writes exactly the header's bytes
        f.write(bytes(8))
    out = tmp_path / "o"
    assert main(["run", str(saxpy_json), "--out", str(out), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "claims 20 bytes of data, the file holds 28", "has data past the array"))
    assert dispatches == [] and not out.exists()


def test_output_names_too_long_or_taken_by_a_directory_are_told_what_to_change(saxpy_json, saxpy_inputs, tmp_path,
                                                                               capsys):
    (tmp_path / "o" / "y.npy").mkdir(parents=True)
    assert main(["run", str(saxpy_json), "--out", str(tmp_path / "o"), "--backend", "reference", *saxpy_inputs]) == 2
    assert_fix(one_error_line(capsys, "y.npy is a directory", "Fix: choose another --out directory"))
    long = ir.Program([ir.BufferDecl.read("x", 0, "f32"), ir.BufferDecl.output("y" * 300, 1, "f32")], 64,
                      [ir.store("y" * 300, ir.gid(0), ir.load("x", ir.gid(0)))], name="long")
    path = tmp_path / "long.json"
    path.write_text(long.to_json())
    args = ["run", str(path), "--out", str(tmp_path / "o2"), "--backend", "reference", "--input",
            f"x={tmp_path / 'x.npy'}"]
    assert main(args) == 2
    assert_fix(one_error_line(capsys, "a file name there is too long", "Fix: name the program's buffers shorter"))
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k" / ("a" * 252))]) == 2
    assert_fix(one_error_line(capsys, "a file name there is too long", "Fix: choose a shorter file name"))


def test_cubin_for_a_device_too_old_is_told_to_name_a_newer_device(saxpy_json, tmp_path, capsys):
    assert main(["emit", str(saxpy_json), "-o", str(tmp_path / "k.cubin"), "--cubin", "--device", "v100"]) == 2
    line = one_error_line(capsys, "nvJitLink needs sm_75", "name a device of sm_75 or newer with --device")
    assert "--sm" not in line.split("Fix:")[1]
