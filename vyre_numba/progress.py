"""Progress bars for long work (fixpoint rounds, e-graph rebuild rounds, long sequences,
benchmarks): `tqdm.auto`, so a widget in Jupyter and a line in a terminal.

`progress=None` (the default everywhere) shows a bar only once the work has run DELAY_S seconds,
so quick calls print nothing; True shows it at once; False never. VYRE_NUMBA_PROGRESS=0 in the
environment turns the automatic bars off (explicit True still shows)."""
from __future__ import annotations

import os
import time

import numpy as np

from .errors import DispatchError, SettingError, shown

DELAY_S = 1.0
ENV = "VYRE_NUMBA_PROGRESS"


_OFF, _ON = ("0", "false", "off", "no", "disabled"), ("", "1", "true", "on", "yes", "enabled")  # VYRE_NUMBA_CACHE's words


def _automatic() -> bool:
    """Whether $VYRE_NUMBA_PROGRESS leaves the automatic bars on (any case; unknown values refused)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value not in _OFF + _ON:
        raise SettingError(f"${ENV}={shown(os.environ.get(ENV))} is not a setting. Fix: set it to 0 (no automatic "
                        "progress bars) or 1 (bars once work has run a second), or unset it.")
    return value in _ON


def check_progress(progress) -> bool | None:
    """`progress` as True, False or None (NumPy's bools read as Python's), else a DispatchError;
    for None, $VYRE_NUMBA_PROGRESS is read too (a SettingError): checked before work that a late
    refusal would leave half done."""
    if progress is None:
        _automatic()
        return None
    if not isinstance(progress, (bool, np.bool_)):
        raise DispatchError(f"progress={shown(progress)} is not True, False or None. Fix: pass True (always show a "
                            f"bar), False (never) or None (only once the work has run {DELAY_S:g} s).")
    if progress:
        try:
            import tqdm.auto  # noqa: F401 - a bar asked for that cannot be shown is refused before the work
        except ImportError as e:
            raise _no_tqdm(e) from None
    return bool(progress)


def _no_tqdm(e: ImportError) -> SettingError:
    return SettingError(f"progress=True shows a tqdm bar, and tqdm cannot be imported ({e}). Fix: pip install tqdm (a "
                        "dependency of vyre-numba), or pass progress=False.")


def bar(progress: bool | None, *, desc: str, unit: str, total: int | None = None):
    """A bar for `progress` (see the module docstring) with tqdm's `update(n)` and `close()`, or
    None when there is none to show."""
    progress = check_progress(progress)
    if progress is False or (progress is None and not _automatic()):
        return None
    if progress is None:
        return Deferred(desc, unit, total)
    try:
        return _tqdm(desc=desc, unit=unit, total=total)
    except ImportError as e:  # before the work: an explicit bar that cannot be shown is refused at the call
        raise _no_tqdm(e) from None


def _tqdm(**kw):
    from tqdm.auto import tqdm

    return tqdm(**kw)


class Deferred:
    """A bar that costs a clock read an update and becomes a tqdm bar only once DELAY_S has
    passed (making one costs tens of microseconds, too much for every quick call)."""

    __slots__ = ("desc", "unit", "total", "n", "start", "shown")

    def __init__(self, desc: str, unit: str, total: int | None):
        self.desc, self.unit, self.total, self.n = desc, unit, total, 0
        self.start, self.shown = time.perf_counter(), None

    def update(self, n: int = 1) -> None:
        """Count `n` more done, showing the bar once DELAY_S has passed."""
        if self.shown is not None:
            self.shown.update(n)
            return
        self.n += n
        if self.start is not None and time.perf_counter() - self.start >= DELAY_S:
            try:
                self.shown = _tqdm(desc=self.desc, unit=self.unit, total=self.total, initial=self.n, leave=False)
            except ImportError:  # a broken install without tqdm: the automatic bar is not shown, the work goes on
                self.start = None

    def close(self) -> None:
        """Close the bar, where one is shown."""
        if self.shown is not None:
            self.shown.close()


def finished(bar) -> None:
    """Ends a bar of work whose length was not known (a fixed point's rounds) full: its total then
    the count done."""
    shown = getattr(bar, "shown", bar)
    if shown is not None and shown.n and (getattr(shown, "total", None) is None or shown.n < shown.total):
        shown.total = shown.n
        shown.refresh()


def stopped(bar) -> None:
    """Close a bar whose work stopped on an error or an interrupt: one of known length turns red
    (tqdm's own), one of unknown length goes (a closed bar of unknown length looks finished)."""
    shown = getattr(bar, "shown", bar)
    if shown is not None and getattr(shown, "total", None) is None:
        shown.leave = False
    bar.close()


def automatic(progress: bool | None) -> bool:
    """Whether `progress` asks for a bar only if the work turns out long (so callers need not
    split their work into pieces small enough to update a bar often)."""
    return progress is None
