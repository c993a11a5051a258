"""A Ctrl-C held back while a change that would be left half made is enqueued."""
from __future__ import annotations

import signal
import threading


class _Caught:
    """The SIGINT handler while one is held back: it notes the signal and nothing else."""

    def __init__(self) -> None:
        self.caught = False

    def __call__(self, signum, frame) -> None:
        self.caught = True


class uninterrupted:
    """A block whose host calls (a few device copies enqueued together) happen all or none: a
    SIGINT (Ctrl-C) that arrives inside it is delivered again as it ends, so the KeyboardInterrupt
    comes after the block. Does nothing where Python cannot hold one back: off the main thread
    (which Python never interrupts), inside another such block, or under a handler set outside
    Python."""

    __slots__ = ("_old", "_held")

    def __enter__(self) -> uninterrupted:
        self._old = self._held = None
        if threading.current_thread() is not threading.main_thread():
            return self
        old = signal.getsignal(signal.SIGINT)
        if not callable(old) or isinstance(old, _Caught):
            return self
        held = _Caught()
        try:
            signal.signal(signal.SIGINT, held)
        except ValueError:  # not the main interpreter: it gets no signals either
            return self
        self._old, self._held = old, held
        return self

    def __exit__(self, *exc) -> bool:
        held, self._held = self._held, None
        if held is not None:
            signal.signal(signal.SIGINT, self._old)
            if held.caught:
                signal.raise_signal(signal.SIGINT)  # to the handler that was there before, as it would have been
        return False
