"""The pytest plugin `vyre_numba.testing`: failures logged as they happen, for runs a time limit cuts."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_each_failure_is_appended_to_the_failure_log_as_it_happens(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""
        def test_passes():
            assert True

        def test_fails():
            assert 1 == 2, "the sample's own failure"
    """))
    log = tmp_path / "failures.log"
    env = dict(os.environ, VYRE_FAILURE_LOG=str(log))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "vyre_numba.testing",
                          "-p", "no:cacheprovider", "-p", "no:nbval", "test_sample.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    text = log.read_text()
    assert "==== test_sample.py::test_fails (call)" in text
    assert "the sample's own failure" in text
    assert "test_passes" not in text


def test_the_log_folder_is_made_and_an_unwritable_log_does_not_end_the_run(tmp_path):
    (tmp_path / "test_sample.py").write_text("def test_fails():\n    assert False\n\ndef test_passes():\n    pass\n")
    for log, written in ((tmp_path / "new" / "folder" / "failures.log", True), (tmp_path / "test_sample.py" / "x", False)):
        env = dict(os.environ, VYRE_FAILURE_LOG=str(log))
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "vyre_numba.testing",
                              "-p", "no:cacheprovider", "-p", "no:nbval", "test_sample.py"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
        assert log.exists() is written


def test_nothing_is_logged_without_the_variable(tmp_path):
    (tmp_path / "test_sample.py").write_text("def test_fails():\n    assert False\n")
    env = {k: v for k, v in os.environ.items() if k != "VYRE_FAILURE_LOG"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "vyre_numba.testing",
                          "-p", "no:cacheprovider", "-p", "no:nbval", "test_sample.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["test_sample.py"]


def _pytest(tmp_path, env, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-o", "addopts=", "-p", "vyre_numba.testing",
                           "-p", "no:cacheprovider", "-p", "no:nbval", "--strict-markers", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_failure_whose_report_no_encoding_can_write_is_logged_escaped_and_the_run_goes_on(tmp_path):
    """Regression (a red-team): a lone surrogate in a report ended the session with INTERNALERROR."""
    (tmp_path / "test_sample.py").write_text('def test_fails():\n    assert "\\ud800" == "x"\n\n'
                                             'def test_after():\n    pass\n')
    log = tmp_path / "failures.log"
    run = _pytest(tmp_path, dict(os.environ, VYRE_FAILURE_LOG=str(log)), "test_sample.py")
    assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    assert "\\ud800" in log.read_text()


def test_only_tests_marked_gpu_are_skipped_without_a_gpu_and_the_marker_is_registered(tmp_path):
    """Regression (a red-team): a folder named gpu, a parameter id 'gpu' or a function attribute
    made a test look marked (pytest's keywords hold them all). Run with the simulator off and no
    GPU here, so the marked test is skipped; --strict-markers passes: the plugin registers `gpu`."""
    from vyre_numba.registry import unavailable_reason

    if unavailable_reason("cuda") is None:
        import pytest
        pytest.skip("a usable GPU here: nothing is skipped")
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "test_plain.py").write_text("def test_cpu():\n    pass\n")
    (tmp_path / "test_p.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("dev", ["cpu", "gpu"])
        def test_dev(dev):
            pass

        def test_attr():
            pass
        test_attr.gpu = False

        @pytest.mark.gpu
        def test_marked():
            pass
    """))
    run = _pytest(tmp_path, dict(os.environ), ".")
    assert run.returncode == 0 and "4 passed, 1 skipped" in run.stdout, run.stdout + run.stderr
    assert "test_p.py:" in run.stdout and "no usable CUDA GPU" in run.stdout
