"""NUMBA_ENABLE_CUDASIM read as Numba reads it (vyre_numba.simulator)."""
from __future__ import annotations

import os

import pytest


@pytest.mark.parametrize("value,on", [("1", True), ("01", True), (" 2", True), ("-1", True), ("0", False), ("00", False),
                                      ("yes", False), ("", False), (None, False)])
def test_the_simulator_setting_is_read_as_numba_reads_it(value, on, monkeypatch):
    """Regression (a red-team): the package took only "1" for on, while Numba takes any int other
    than 0, so under NUMBA_ENABLE_CUDASIM=01 Numba simulated the GPU and vyre-numba drove it as a real
    one (a refused Numba stream, a raw AttributeError)."""
    from vyre_numba import simulator
    from vyre_numba.errors import SettingError

    if value is None:
        monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    else:
        monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", value)
    assert simulator.simulated() is on
    try:
        int("0" if value is None else value)
    except ValueError:  # what Numba cannot read is refused with the setting to use
        with pytest.raises(SettingError, match=r"is not a number, so Numba warns .*Fix: set NUMBA_ENABLE_CUDASIM=1"):
            simulator.check()
    else:
        simulator.check()


def test_a_select_under_numba_enable_cudasim_01_runs_on_the_simulator():
    import subprocess
    import sys

    script = ("import numpy as np; from numba import cuda; from vyre_numba import compaction\n"
              "v = np.arange(20, dtype=np.int32); dv, df = cuda.to_device(v), cuda.to_device(v % 2 == 0)\n"
              "a = compaction.select(dv, df, stream=cuda.stream()).copy_to_host()\n"
              "b = compaction.select(dv, df).copy_to_host()\n"
              "assert a.tolist() == b.tolist() == list(range(0, 20, 2)), (a, b)\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, NUMBA_ENABLE_CUDASIM="01"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
