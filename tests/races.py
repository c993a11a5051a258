"""Threads that keep using an owner while the main thread closes it."""
from __future__ import annotations

import threading

from vyre_numba.errors import DispatchError


def assert_close_waits_for_users(use, close, closed_text: str, uses: int = 50, threads: int = 3) -> None:
    """`threads` threads call `use()` (True when its result is right) up to `uses` times while
    the main thread calls `close()`: every call must give the right result or a DispatchError
    saying `closed_text`, never a wrong result or another error, and no thread may hang."""
    outcomes, go = [], threading.Event()

    def using():
        go.wait()
        for _ in range(uses):
            try:
                outcomes.append(bool(use()))
            except DispatchError as e:
                outcomes.append("closed" if closed_text in str(e) else e)
                return

    workers = [threading.Thread(target=using) for _ in range(threads)]
    for t in workers:
        t.start()
    go.set()
    close()
    for t in workers:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in workers)
    assert all(o is True or o == "closed" for o in outcomes), [o for o in outcomes if o is not True][:3]
