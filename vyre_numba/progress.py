"""Progress bars for long work (fixpoint rounds, e-graph rebuild rounds, long sequences,
benchmarks): `tqdm.auto`, so a widget in Jupyter and a line in a terminal.

`progress=None` (the default everywhere) shows a bar only once the work has run DELAY_S seconds,
so quick calls print nothing; True shows it at once; False never. VYRE_NUMBA_PROGRESS=0 in the
environment turns the automatic bars off (explicit True still shows)."""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from .errors import DispatchError, SettingError, shown, warn_user

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


def bar(progress: bool | None, *, desc: str, unit: str, total: int | None = None) -> "Bar | None":
    """A bar for `progress` (see the module docstring) with tqdm's `update(n)` and `close()`, or
    None when there is none to show."""
    progress = check_progress(progress)
    if progress is False or (progress is None and not _automatic()):
        return None
    try:
        return Bar(desc, unit, total, at_once=progress is True)
    except ImportError as e:  # before the work: an explicit bar that cannot be shown is refused at the call
        raise _no_tqdm(e) from None


def _tqdm(**kw):
    from tqdm.auto import tqdm

    return tqdm(**kw)


class Bar:
    """A tqdm bar shown at once, or (`at_once` False) only once DELAY_S has passed, so that a quick
    call costs a clock read an update (making a bar costs tens of microseconds). The work never
    stops for its bar: one that cannot be drawn (standard error closed or full, a broken tqdm) goes,
    with a warning."""

    __slots__ = ("desc", "unit", "total", "n", "start", "shown")

    def __init__(self, desc: str, unit: str, total: int | None, *, at_once: bool = False):
        self.desc, self.unit, self.total, self.n = desc, unit, total, 0
        self.start, self.shown = time.perf_counter(), None
        if at_once:
            try:
                self.shown = _tqdm(desc=desc, unit=unit, total=total)
            except ImportError:  # the caller refuses the call
                raise
            except Exception as e:
                self._gone(e)

    def _draw(self, draw: Callable) -> None:
        """`draw()` on the tqdm bar; where it fails, the bar goes (said once) and the work goes on."""
        try:
            draw()
        except ImportError:  # a broken install without tqdm: the automatic bar is not shown
            self.shown = self.start = None
        except Exception as e:
            self._gone(e)

    def _gone(self, e: Exception) -> None:
        self.shown = self.start = None
        warn_user(UserWarning(f"the {self.desc} progress bar cannot be drawn ({type(e).__name__}: {e}); the work "
                              "goes on without it. Fix: make standard error writable, or pass progress=False (or "
                              f"set {ENV}=0 for the automatic bars)."))

    def update(self, n: int = 1) -> None:
        """Count `n` more done, showing the bar once DELAY_S has passed."""
        if self.shown is not None:
            self._draw(lambda: self.shown.update(n))
            return
        self.n += n
        if self.start is not None and time.perf_counter() - self.start >= DELAY_S:
            def show():
                self.shown = _tqdm(desc=self.desc, unit=self.unit, total=self.total, initial=self.n, leave=False)
            self._draw(show)

    def finished(self) -> None:
        """Fill a bar of work whose length was not known (a fixed point's rounds): its total, the count done."""
        shown = self.shown
        if shown is not None and shown.n and (shown.total is None or shown.n < shown.total):
            def fill():
                shown.total = shown.n
                shown.refresh()
            self._draw(fill)

    def stopped(self) -> None:
        """Close a bar whose work stopped on an error or an interrupt: one of known length turns red
        (tqdm's own), one of unknown length goes (a closed bar of unknown length looks finished)."""
        if self.shown is not None and self.shown.total is None:
            self.shown.leave = False
        self.close()

    def close(self) -> None:
        """Close the bar, where one is shown."""
        if self.shown is not None:
            self._draw(self.shown.close)


def finished(bar: Bar | None) -> None:
    """`bar.finished()` where there is a bar."""
    if bar is not None:
        bar.finished()


def stopped(bar: Bar | None) -> None:
    """`bar.stopped()` where there is a bar."""
    if bar is not None:
        bar.stopped()


def automatic(progress: bool | None) -> bool:
    """Whether `progress` asks for a bar only if the work turns out long (so callers need not
    split their work into pieces small enough to update a bar often)."""
    return progress is None
