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
    ("x.npy", _save_text, "not a .npy array"),
    ("x.npy", _save_object_array, "not a .npy array"),
    ("x.npy", _save_empty, "not a .npy array"),
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
    assert "bit-identical to the reference interpreter: True" in out and "Fix:" in out
    assert "compiling" not in out and "nothing compiles" in out  # the reference interprets
    assert "PTX for sm_90" in out and "ld.global" in out  # emitted even without a GPU: no step skipped
    table = [row for row in out[out.index("\nstep "):].splitlines()[2:] if row.strip()]
    assert [row.split()[0] for row in table] == ["saxpy", "a", "components", "components", "e-graph"]
    assert all(row.endswith(" ok") for row in table)


@pytest.mark.gpu
def test_gpu_demo_runs_every_step_on_the_gpu(capsys):
    assert main(["demo", "--backend", "cuda", "-n", "100000"]) == 0
    out = capsys.readouterr().out
    assert "on the GPU" in out and "equal to the NumPy twin: True" in out and "(includes compiling)" in out
    assert all(row.endswith(" ok") for row in out[out.index("\nstep "):].splitlines()[2:] if row.strip())


@pytest.mark.parametrize("n", ["-5", "0", str(2**32), str(10**30)])
def test_demo_refuses_a_bad_element_count(capsys, n):
    assert main(["demo", "--backend", "reference", "-n", n]) == 2
    assert_fix(one_error_line(capsys, f"-n {n}"))


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
    assert ok.returncode == 0 and "info,run,emit,demo,bench" in ok.stdout
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
