"""`vyre-numba bench`: the suite runner's outcomes, the generated RESULTS.md section (replaced per
device, hand-written notes kept), the plots from benchmark JSON, and the command's errors."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from vyre_numba.cli import main

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_suite():
    spec = importlib.util.spec_from_file_location("suite_under_test", BENCH / "suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


suite = load_suite()

FAKE = {
    "bench_dispatch": {"warm": {"vyre_dispatch_resident_us": 5.4, "raw_cuLaunchKernel_us": 4.0, "numba_jit_us": 18.4,
                                "cupy_rawkernel_us": 4.8}},
    "bench_fixpoint": {"rounds": {"2^16": {"cooperative_us_per_round": 2.4, "graph_us_per_round": 7.4,
                                           "relaunch_us_per_round": 77.0, "numba_relaunch_us_per_round": 169.0}},
                       "components": {"rmat": {"csr_entries": 1 << 27, "vyre_entries_per_s": 3e10,
                                               "scipy_entries_per_s": 3e7}}},
    "bench_egraph": {"sizes": {"2^16": {"N": 1 << 16, "enodes_per_s": 3e7, "with_upload_ms": 11.0,
                                        "egglog_1t_ms_devmachine": 6.0, "numpy_ms": 47.0},
                               "2^20": {"N": 1 << 20, "enodes_per_s": 4e8, "with_upload_ms": 55.0}}},
}


def test_a_script_that_skips_is_reported_with_its_reason(tmp_path):
    s = tmp_path / "bench_x.py"
    s.write_text("print('skipped: no GPU here. Fix: run on a GPU')\n")
    r = suite.run_one(s, False, tmp_path / "x.json")
    assert r["skipped"] == "no GPU here. Fix: run on a GPU"


def test_a_script_that_fails_is_reported_with_its_output(tmp_path):
    s = tmp_path / "bench_x.py"
    s.write_text("import sys\nprint('boom happened')\nsys.exit(3)\n")
    r = suite.run_one(s, False, tmp_path / "x.json")
    assert "boom happened" in r["failed"]


def test_a_script_that_runs_gives_its_json_and_quick_is_passed(tmp_path):
    s = tmp_path / "bench_x.py"
    s.write_text("import sys, json\nout = sys.argv[sys.argv.index('--json') + 1]\n"
                 "open(out, 'w').write(json.dumps({'quick': '--quick' in sys.argv}))\nprint('(a) fast')\n")
    r = suite.run_one(s, True, tmp_path / "x.json")
    assert r["json"] == {"quick": True} and "(a) fast" in r["output"]


def test_the_section_is_replaced_per_device_and_notes_stay(tmp_path):
    md = tmp_path / "RESULTS.md"
    md.write_text("# Benchmark results\n\nIntro.\n\n## 2026-01-01 — old notes\n\nkept by hand\n")
    suite.write_section(md, "GPU A", "## run 1 on A\n")
    suite.write_section(md, "GPU B", "## run 1 on B\n")
    suite.write_section(md, "GPU A", "## run 2 on A\n")
    text = md.read_text()
    assert "run 1 on A" not in text and text.count("run 2 on A") == 1 and "run 1 on B" in text
    assert text.index("Intro.") < text.index("run 2 on A") < text.index("old notes")
    assert text.endswith("kept by hand\n")


def test_summary_groups_the_benchmarks_that_could_not_run():
    lines = suite.summary_lines({"bench_a": {"skipped": "no GPU"}, "bench_b": {"skipped": "no GPU"},
                                 "bench_c": {"json": {}, "output": "(a) 2x faster\n{\"raw\": 1}"},
                                 "bench_d": {"failed": "Traceback\nValueError"}})
    text = "\n".join(lines)
    assert "not run here (no GPU): `bench_a.py`, `bench_b.py`" in text
    assert "(a) 2x faster" in text and "raw" not in text and "FAILED" in text and "ValueError" in text
    reason = "no CUDA driver or GPU was found. Fix: run on a machine with an NVIDIA GPU, or use get_backend('reference')."
    text = "\n".join(suite.summary_lines({"bench_a": {"skipped": reason}}))
    assert text == "- not run here (no CUDA driver or GPU was found): `bench_a.py`"  # no Python call to make


def test_plots_are_drawn_from_the_benchmarks_json(tmp_path):
    pytest.importorskip("matplotlib")
    res = {k: {"json": v} for k, v in FAKE.items()}
    assert suite.plot_overhead(res, tmp_path / "o.png") and (tmp_path / "o.png").stat().st_size > 5000
    assert suite.plot_throughput(res, tmp_path / "t.png") and (tmp_path / "t.png").stat().st_size > 5000
    assert not suite.plot_overhead({"bench_reference": {"json": {}}}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_the_report_writes_the_section_and_the_json(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(suite, "device_name", lambda: "Test GPU 9000")
    res = {k: {"json": v, "output": f"(a) {k} line"} for k, v in FAKE.items()}
    res["bench_graphs"] = {"skipped": "no GPU"}
    md, plots = suite.report(res, False, here=tmp_path)
    text = md.read_text()
    assert "<!-- bench: Test GPU 9000 -->" in text and "(a) bench_egraph line" in text
    assert [p.name for p in plots] == ["overhead.png", "throughput.png"]
    assert json.loads((tmp_path / "plots" / "test-gpu-9000" / "bench_egraph.json").read_text()) == FAKE["bench_egraph"]


def test_the_command_without_a_suite_says_where_to_run_it(tmp_path, capsys):
    assert main(["bench", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "bench/suite.py" in err and "Fix:" in err


def test_the_command_runs_a_suite_folder(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    (tmp_path / "suite.py").write_text((BENCH / "suite.py").read_text())
    (tmp_path / "bench_one.py").write_text("print('skipped: nothing to do here')\n")
    assert main(["bench", "--dir", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "not run: nothing to do here" in out
    assert "nothing to do here" in (tmp_path / "RESULTS.md").read_text()


def _suite_folder(folder: Path, script: str) -> Path:
    folder.mkdir()
    (folder / "suite.py").write_text((BENCH / "suite.py").read_text())
    (folder / "bench_one.py").write_text(script)
    return folder


def test_a_relative_dir_runs_its_benchmarks(tmp_path, capsys, monkeypatch):
    """Regression (a red-team): `--dir bench` (the command's own example) named every script twice
    over, as each runs in its own folder: every benchmark failed."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    _suite_folder(tmp_path / "bench", "import sys, json\nout = sys.argv[sys.argv.index('--json') + 1]\n"
                  "open(out, 'w').write(json.dumps({}))\n")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--dir", "bench", "--no-progress"]) == 0
    assert "bench_one          ok" in capsys.readouterr().out


def test_no_progress_bar_is_drawn_where_standard_error_is_no_terminal(tmp_path):
    """Regression (a red-team): the bar's frames piled up in logs (stderr to a file or a pipe)."""
    import subprocess
    import sys

    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    here = _suite_folder(tmp_path / "b", "print('skipped: nothing to do')\n")
    run = subprocess.run([sys.executable, "-m", "vyre_numba", "bench", "--dir", str(here)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "not run: nothing to do" in run.stdout, run.stdout + run.stderr
    assert "benchmarks:" not in run.stderr and "\r" not in run.stderr, run.stderr


def test_a_run_where_every_benchmark_failed_leaves_the_results_as_they_were(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    here = _suite_folder(tmp_path / "b", "import sys\nprint('broke')\nsys.exit(3)\n")
    (here / "RESULTS.md").write_text("# kept\n")
    assert main(["bench", "--dir", str(here), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "bench_one failed" in err and "broke" in err and "left as they were" in err
    assert (here / "RESULTS.md").read_text() == "# kept\n" and not (here / "plots").exists()


@pytest.mark.parametrize("make", ["plots_file", "results_folder"])
def test_outputs_that_cannot_be_written_are_refused_before_any_benchmark_runs(tmp_path, capsys, make):
    """Regression (a red-team): a plots/ that is a file, or a RESULTS.md that is a folder, was an
    'internal error, a bug in vyre-numba' after the whole suite had run."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    here = _suite_folder(tmp_path / "b", "open('ran', 'w').write('1')\n")
    (here / "plots").write_text("x") if make == "plots_file" else (here / "RESULTS.md").mkdir()
    assert main(["bench", "--dir", str(here), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is not a " in err and "Fix:" in err and "internal error" not in err
    assert not (here / "ran").exists()


def test_the_results_are_written_as_a_set_or_not_at_all(tmp_path, monkeypatch):
    """Regression (a review): the plots, RESULTS.md and each JSON were written one by one, so a
    failure left new files beside old. A disk that fills at the second file, or a JSON path that
    is a folder, now leaves every file as it was, and no temporary behind."""
    pytest.importorskip("matplotlib")
    here = tmp_path / "b"
    here.mkdir()
    (here / "RESULTS.md").write_text("# before\n")
    res = {name: {"json": data, "output": f"(a) {name} line"} for name, data in FAKE.items()}
    md, plots = suite.report(res, False, here=here, device="dev", date="2026-01-01")
    assert len(plots) == 2
    before = {p: p.read_bytes() for p in here.rglob("*") if p.is_file()}
    real, calls = suite.os.fdopen, []

    def fills_at_second(*args, **kwargs):
        f = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            f.close()
            raise OSError(28, "No space left on device")
        return f
    monkeypatch.setattr(suite.os, "fdopen", fills_at_second)
    with pytest.raises(OSError, match="No space"):
        suite.report(res, False, here=here, device="dev", date="2026-02-02")
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in here.rglob("*") if p.is_file()} == before
    json_path = here / "plots" / "dev" / "bench_egraph.json"
    json_path.unlink()
    json_path.mkdir()
    with pytest.raises(IsADirectoryError):
        suite.report(res, False, here=here, device="dev", date="2026-02-02")
    assert (here / "RESULTS.md").read_bytes() == before[here / "RESULTS.md"]


def test_every_benchmark_takes_the_arguments_the_suite_passes():
    """`vyre-numba bench --quick` passes --quick (or QUICK_ARGS) and --json to every bench_*.py."""
    common = (BENCH / "common.py").read_text()
    assert '"--json"' in common and '"--quick"' in common
    for script in suite.scripts():
        text = script.read_text()
        if "common.arguments(" in text:  # bench/common.py gives it both
            continue
        assert '"--json"' in text, script.name
        assert '"--quick"' in text or script.name in suite.QUICK_ARGS, script.name


def test_only_runs_the_named_benchmarks_and_refuses_unknown_names(tmp_path):
    for name in ("bench_a.py", "bench_b.py", "bench_c.py"):
        (tmp_path / name).write_text("print('skipped: here')\n")
    found = suite.scripts(tmp_path)
    assert [s.stem for s in suite.chosen(found, "c, bench_a.py")] == ["bench_c", "bench_a"]
    assert suite.chosen(found, None) == found
    with pytest.raises(SystemExit, match=r"no benchmark bench_z\. Fix: name some of a, b, c"):
        suite.chosen(found, "a,z")
    with pytest.raises(SystemExit, match="none named"):
        suite.chosen(found, " , ")


def test_parts_saved_apart_make_one_section_for_the_device_they_ran_on(tmp_path, monkeypatch):
    """A suite run in two parts (--only ... --save DIR) is reported later (--report DIR DIR) under the
    device the parts were measured on, not the machine that writes the section."""
    pytest.importorskip("matplotlib")
    here = tmp_path / "bench"
    here.mkdir()
    (here / "bench_a.py").write_text("import sys, json\nout = sys.argv[sys.argv.index('--json') + 1]\n"
                                     "open(out, 'w').write(json.dumps({'x': 1}))\nprint('(a) part one line')\n")
    (here / "bench_b.py").write_text("print('skipped: needs two GPUs')\n")
    monkeypatch.setattr(suite, "device_name_apart", lambda: "Test GPU 9000")
    one = suite.run(here=here, progress=False, only="a", save=tmp_path / "p1")
    two = suite.run(here=here, progress=False, only="b", save=tmp_path / "p2")
    assert set(one) == {"bench_a"} and set(two) == {"bench_b"}
    assert not list((tmp_path / "p1").glob("*.tmp"))
    monkeypatch.setattr(suite, "device_name", lambda: "CPU only (the writing machine)")
    with pytest.raises(SystemExit, match=r"lack bench_b; a section holds the whole suite\. Fix: .*--only b --save"):
        suite.kept([tmp_path / "p1"], here=here)
    res, device, quick, date = suite.kept([tmp_path / "p1", tmp_path / "p2"], here=here)
    assert device == "Test GPU 9000" and quick is False and set(res) == {"bench_a", "bench_b"}
    md, _ = suite.report(res, quick, here=here, device=device, date=date)
    text = md.read_text()
    assert "<!-- bench: Test GPU 9000 -->" in text and "CPU only" not in text
    assert "(a) part one line" in text and "not run here (needs two GPUs): `bench_b.py`" in text


def test_saved_parts_of_different_devices_or_sizes_are_refused(tmp_path, monkeypatch):
    here = tmp_path / "bench"
    here.mkdir()
    (here / "bench_a.py").write_text("print('skipped: here')\n")
    monkeypatch.setattr(suite, "device_name_apart", lambda: "GPU A")
    suite.run(here=here, progress=False, save=tmp_path / "a")
    monkeypatch.setattr(suite, "device_name_apart", lambda: "GPU B")
    suite.run(here=here, progress=False, save=tmp_path / "b")
    with pytest.raises(SystemExit, match=r"differ in device \(GPU A, GPU B\).*Fix:"):
        suite.kept([tmp_path / "a", tmp_path / "b"], here=here)
    suite.run(True, here=here, progress=False, save=tmp_path / "q")
    with pytest.raises(SystemExit, match="differ in quick"):
        suite.kept([tmp_path / "b", tmp_path / "q"], here=here)
    with pytest.raises(SystemExit, match="no saved outcomes.*Fix:"):
        suite.kept([tmp_path / "empty"], here=here)
    with pytest.raises(SystemExit, match=r"no saved outcomes .* in \S*typo\. Fix:"):
        suite.kept([tmp_path / "b", tmp_path / "typo"], here=here)
    assert suite.kept([tmp_path / "b", tmp_path / "b"], here=here)[1] == "GPU B"
    (here / "bench_gone.py").write_text("")
    (here / "bench_a.py").rename(here / "bench_c.py")
    with pytest.raises(SystemExit, match=r"lack bench_c, bench_gone and hold bench_a \(not in .*Fix:"):
        suite.kept([tmp_path / "b"], here=here)


def _outcome(**changes):
    record = {"device": "GPU A", "quick": False, "date": "2026-12-02", "at": 1.5,
              "outcome": {"json": {"x": 1}, "output": "(a) figure", "stderr": ""}}
    return json.dumps({**record, **changes})


@pytest.mark.parametrize("text, why", [
    ('{"device": "GPU A", "qu', "JSONDecodeError"),
    ("[1, 2]", "not a JSON object"),
    (_outcome(device=None), "device is not a name"),
    (_outcome(quick="yes"), "quick is not true or false"),
    (_outcome(date="yesterday"), "date is not YYYY-MM-DD"),
    (_outcome(at="noon"), "at is not a time"),
    (_outcome(at=float("nan")), "at is not a time"),
    (_outcome(outcome={"json": {}}), "outcome's text is not text"),
    (_outcome(outcome={"skipped": "x", "failed": "y"}), "outcome is not one of"),
    (_outcome(outcome=[]), "outcome is not one of"),
])
def test_a_broken_or_hand_edited_outcome_is_refused_naming_the_file(tmp_path, text, why):
    (tmp_path / "bench_a.py").write_text("")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "bench_a.outcome.json").write_text(text)
    with pytest.raises(SystemExit, match=rf"bench_a\.outcome\.json is not an outcome saved by --save \({why}.*Fix: "):
        suite.kept([tmp_path / "p"], here=tmp_path)
    (tmp_path / "p" / "bench_a.outcome.json").write_text(_outcome())
    assert suite.kept([tmp_path / "p"], here=tmp_path)[0] == {"bench_a": json.loads(_outcome())["outcome"]}
    missing = json.loads(_outcome())
    del missing["at"]
    (tmp_path / "p" / "bench_a.outcome.json").write_text(json.dumps(missing))
    with pytest.raises(SystemExit, match=r"at is not a time"):
        suite.kept([tmp_path / "p"], here=tmp_path)


def test_a_later_part_replaces_an_earlier_of_the_same_benchmark_whatever_the_folder_order(tmp_path):
    (tmp_path / "bench_a.py").write_text("")
    for name, at in (("new", 9.0), ("old", 2.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "bench_a.outcome.json").write_text(_outcome(at=at, date=f"2026-12-0{int(at)}",
                                                                       outcome={"skipped": name}))
    for order in (["new", "old"], ["old", "new"]):
        res, _, _, date = suite.kept([tmp_path / n for n in order], here=tmp_path)
        assert res == {"bench_a": {"skipped": "new"}} and date == "2026-12-09"


@pytest.mark.parametrize("argv, says", [
    (["--report", "x", "--save", "y"], "--save would do nothing"),
    (["--report", "x", "--only", "a"], "--only would do nothing"),
    (["--report", "x", "--quick"], "--quick would do nothing"),
    (["--only", "bfs"], "without --save would replace"),
])
def test_options_that_would_do_nothing_or_overwrite_the_section_are_refused(argv, says, monkeypatch):
    monkeypatch.setattr(suite, "run", lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setattr(suite, "report", lambda *a, **k: pytest.fail("wrote a section"))
    with pytest.raises(SystemExit, match=rf"{says}.*Fix: "):
        suite.main(argv)


def test_an_empty_folder_name_is_a_usage_error(capsys):
    for argv in (["--save", "", "--only", "bfs"], ["--report", " "]):
        with pytest.raises(SystemExit) as e:
            suite.main(argv)
        assert e.value.code == 2 and "empty folder name. Fix:" in capsys.readouterr().err


def test_save_into_a_file_is_refused_before_any_benchmark_runs(tmp_path, monkeypatch):
    (tmp_path / "bench_a.py").write_text("raise SystemExit('ran')")
    (tmp_path / "f").write_text("")
    monkeypatch.setattr(suite, "run_one", lambda *a: pytest.fail("ran"))
    with pytest.raises(SystemExit, match=r"--save .*f: cannot make that folder.*Fix: "):
        suite.run(here=tmp_path, progress=False, save=tmp_path / "f")


def test_the_device_of_saved_parts_is_named_by_a_child_process():
    """So that the suite itself holds no GPU context while its benchmarks run."""
    assert suite.device_name_apart() == suite.device_name()


def test_summary_leaves_out_python_warnings_with_their_continuation_lines():
    output = ("(a) first figure\n"
              "/site/distributed/client.py:3429: UserWarning: Sending large graph of size 17.83 MiB.\n"
              "This may cause some slowdown.\n"
              "Consider loading the data with Dask directly\n"
              "  warnings.warn(\n"
              "(b) second figure\n"
              "/site/numba/dispatcher.py:748: NumbaPerformanceWarning: Grid size 16\n"
              "(c) third figure\n")
    text = "\n".join(suite.summary_lines({"bench_x": {"json": {}, "output": output}}))
    assert "(a) first figure" in text and "(b) second figure" in text and "(c) third figure" in text
    assert "slowdown" not in text and "Dask" not in text and "Grid size" not in text and "warn" not in text


def test_the_warning_filter_keeps_benchmark_lines_that_are_not_warnings():
    lines = ["x.py:1: UserWarning: first", "  f(x)", "(b) figure", "y.py:2: UserWarning: second", "  warnings.warn(",
             "(c) 0 RuntimeWarning raised", "(d) figure"]
    assert suite._without_warnings(lines) == ["  f(x)", "(b) figure", "(c) 0 RuntimeWarning raised", "(d) figure"]


def test_a_script_that_runs_keeps_its_warnings_out_of_its_output(tmp_path):
    s = tmp_path / "bench_x.py"
    s.write_text("import sys, json, warnings\nout = sys.argv[sys.argv.index('--json') + 1]\n"
                 "open(out, 'w').write('{}')\nwarnings.warn('noisy\\nsecond line')\nprint('(a) figure')\n")
    r = suite.run_one(s, False, tmp_path / "x.json")
    assert r["output"] == "(a) figure" and "second line" in r["stderr"]
