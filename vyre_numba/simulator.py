"""Whether numba-cuda simulates the GPU: NUMBA_ENABLE_CUDASIM, read as Numba reads the variable (a
.numba_config.yaml that sets it is not read here)."""
from __future__ import annotations

import os

from .errors import SettingError, shown

ENV = "NUMBA_ENABLE_CUDASIM"


def simulated() -> bool:
    """Whether NUMBA_ENABLE_CUDASIM turns numba-cuda's simulator on: an int other than 0 (`1`,
    `01`, ` 2`); Numba takes a value that is no int as 0."""
    try:
        return int(os.environ.get(ENV, "0")) != 0
    except ValueError:
        return False


def check() -> None:
    """A SettingError where NUMBA_ENABLE_CUDASIM holds what Numba cannot read (it warns with a
    traceback and leaves the simulator off)."""
    value = os.environ.get(ENV)
    if value is None:
        return
    try:
        int(value)
    except ValueError:
        raise SettingError(f"{ENV}={shown(value, 40)} is not a number, so Numba warns and leaves its CUDA simulator "
                           f"off. Fix: set {ENV}=1 to simulate the GPU, or unset it.") from None


SIMULATED = simulated()  # at import, as numba-cuda reads it at its own


def settle(timeout: float = 10.0) -> bool:
    """After a simulated kernel raised: wait, at most `timeout` seconds, for the other threads of
    its block to end. The simulator raises the first thread's exception at once, while the others
    still run device functions, for which it swaps each such module's `cuda` for its fake one (and
    a kernel built meanwhile would find no `cuda.jit`). Whether vyre-numba's modules have their
    own `cuda` back; True where the simulator is off."""
    if not SIMULATED:
        return True
    import sys
    import time

    end = time.monotonic() + timeout
    while True:
        swapped = [m for name, m in list(sys.modules.items()) if name.startswith("vyre_numba.") and m is not None
                   and type(getattr(m, "cuda", None)).__name__ == "FakeCUDAModule"]
        if not swapped or time.monotonic() > end:
            return not swapped
        time.sleep(0.005)
