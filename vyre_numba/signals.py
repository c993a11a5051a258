"""A Ctrl-C held back while a change that would be left half made is enqueued."""
from __future__ import annotations

import signal
import threading
from typing import Callable


class _Caught:
    """The SIGINT handler while one is held back: it notes the signal and nothing else."""

    def __init__(self) -> None:
        self.caught = False

    def __call__(self, signum, frame) -> None:
        self.caught = True


class uninterrupted:
    """A block whose host calls (a few device copies enqueued together) happen all or none: a
    SIGINT (Ctrl-C) that arrives inside it is delivered again as it ends, so the KeyboardInterrupt
    comes after the block. `undo`, where given, is called first where one came (once, before it is
    delivered): for a block whose change the interrupt would lose, such as a drain that emptied its
    queue but will not return the items. Does nothing where Python cannot hold one back: off the
    main thread (which Python never interrupts), inside another such block, or under a handler set
    outside Python."""

    __slots__ = ("_old", "_held", "_undo")

    def __init__(self, undo: Callable[[], object] | None = None) -> None:
        self._undo = undo

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

    def __exit__(self, kind, *exc) -> bool:
        held, self._held = self._held, None
        if held is None:
            return False
        # a block that raised says itself what it left; undo runs at most once, however this ends
        undo = [self._undo] if kind is None and self._undo is not None else []

        def take_back() -> None:
            while undo:
                undo.pop()()
        try:
            if held.caught:
                take_back()
        finally:  # the handler back and the signal delivered, even where undo raised
            try:
                signal.signal(signal.SIGINT, self._old)
                if held.caught:
                    try:
                        take_back()  # (one that came after the first look, held all the same)
                    finally:
                        signal.raise_signal(signal.SIGINT)  # to the handler that was there before, as it would be
            except BaseException:  # or one that came once the old handler was back
                take_back()
                raise
        return False
