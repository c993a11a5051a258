"""Interrupting a call at a chosen point of vyre_numba's code, as a Ctrl-C would (shared by the
failure-atomicity tests)."""
from __future__ import annotations

import inspect
import linecache
import os
import signal
import sys

import vyre_numba


def interrupted(k: int, call, within: str = "", by_signal: bool = False) -> KeyboardInterrupt | None:
    """call() with a KeyboardInterrupt raised at its k-th event (a call, line or return) in
    vyre_numba's code (under `within`, a folder or file of it), where a Ctrl-C lands (`by_signal`: a
    real SIGINT sent there, delivered by whatever handler is set then); the interrupt,
    or None where the call finished first. Generators are left out (closed early by any() and the
    like, where an exception is ignored), and so is the line of a `with` statement: its event as
    the block ends comes before __exit__, where an exception would leave a lock held (CPython's own
    hazard, not what is tested here)."""
    root = os.path.join(os.path.dirname(vyre_numba.__file__), within)
    seen = 0

    def trace(frame, event, arg):
        nonlocal seen
        code = frame.f_code
        if not code.co_filename.startswith(root) or code.co_flags & inspect.CO_GENERATOR:
            return None
        if event == "line" and linecache.getline(code.co_filename, frame.f_lineno).lstrip().startswith("with "):
            return trace
        seen += 1
        if seen == k:
            if not by_signal:
                raise KeyboardInterrupt
            signal.raise_signal(signal.SIGINT)
        return trace

    old = sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    except KeyboardInterrupt as e:
        return e
    finally:
        sys.settrace(old)
    assert seen < k, f"event {k} raised, and the call went on"
    return None
