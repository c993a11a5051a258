"""The backend registry: `get_backend()` returns "cuda" where a usable GPU is present and
"reference" otherwise; `register` adds a backend."""
from __future__ import annotations

import threading
from typing import Callable

from .backend import Backend
from .errors import BackendUnavailableError, DispatchError, a_type, shown

_FACTORIES: dict[str, Callable[[], Backend]] = {}
_PROBES: dict[str, Callable[[], str | None]] = {}
_INSTANCES: dict[str, Backend] = {}
_MAKING: dict[str, threading.RLock] = {}  # a lock a name: one backend a name, though several threads ask first
_LOCKS = threading.Lock()  # at once (a lock a name, and an RLock: a factory may ask for a backend, itself or another)
PREFERENCE = ("cuda", "reference")


def register(name: str, factory: Callable[[], Backend], probe: Callable[[], str | None]) -> None:
    """Register a backend: `factory()` makes it (once, when first asked for), `probe()` returns
    None when it is usable, else why not (ending in `Fix: ...`). A name registered again is made
    afresh by its new factory."""
    if not isinstance(name, str) or not name:
        raise DispatchError(f"register: name={shown(name, 60)} is not a backend name. Fix: pass a non-empty str.")
    for what, f in (("factory", factory), ("probe", probe)):
        if not callable(f):
            raise DispatchError(f"register: {what}={shown(f, 60)} is not callable. Fix: pass a function"
                                + (" that returns the Backend." if what == "factory" else
                                   " that returns None where the backend can run, else why not."))
    _load_builtin()  # first, so that registering "cuda" or "reference" replaces the built-in one
    with _LOCKS:
        _FACTORIES[name] = factory
        _PROBES[name] = probe
        _INSTANCES.pop(name, None)


def unavailable_reason(name: str) -> str | None:
    """None if backend `name` can run here, else the reason."""
    _load_builtin()
    if not isinstance(name, str) or name not in _PROBES:
        return f"no backend named {name!r}. Fix: use one of {', '.join(sorted(_PROBES))}."
    return _asked(name)


def _asked(name: str) -> str | None:
    """The registered probe's answer for `name`: None (usable) or why not, ending in a Fix; a probe
    that raises or answers anything else is a BackendUnavailableError naming it."""
    try:
        why = _PROBES[name]()
    except Exception as e:  # noqa: BLE001 - a probe of the caller's, said as such
        raise BackendUnavailableError(f"the probe registered for backend {name!r} raised {type(e).__name__} ({e}). "
                                      "Fix: make the probe return None where the backend can run, else a str saying "
                                      "why not.") from e
    if why is None:
        return None
    if not isinstance(why, str) or not why.strip():
        raise BackendUnavailableError(f"the probe registered for backend {name!r} returned {shown(why, 60)}, neither "
                                      "None (usable) nor a reason. Fix: register a probe that returns None where the "
                                      "backend can run, else a str saying why not (ending in 'Fix: ...').")
    return why if "Fix:" in why else f"{why.rstrip('. ')}. Fix: see what backend {name!r} needs (its probe says " \
        "no more), or use another backend."


def backend_names() -> list[str]:
    """The names of the registered backends, usable here or not."""
    _load_builtin()
    return sorted(_PROBES)


def available_backends() -> list[str]:
    """The names of the backends usable on this machine, best first ("cuda" only where a GPU is usable)."""
    _load_builtin()
    return [n for n, why in _answers().items() if why is None]


def _answers() -> dict[str, str | None]:
    """Each preferred backend's probe answer, asked once (answers may change between asks)."""
    return {n: _asked(n) for n in PREFERENCE if n in _PROBES}


def get_backend(name: str | None = None) -> Backend:
    """The named backend, or the best usable one ("cuda" where a GPU is usable, else "reference")."""
    _load_builtin()
    if name is None:
        whys = _answers()
        usable = [n for n, why in whys.items() if why is None]
        if not usable:  # the built-in ones replaced (register) by unusable ones
            whys = "; ".join(f"{n}: {why.rstrip('.')}" for n, why in whys.items())
            raise BackendUnavailableError(f"no backend can run here ({whys}). Fix: name a backend that can "
                                          f"(get_backend(name), one of {', '.join(sorted(_PROBES))}), or register "
                                          "a usable 'reference' backend again.")
        name = usable[0]
    if not isinstance(name, str) or name not in _PROBES:
        raise BackendUnavailableError(f"no backend named {shown(name)}. Fix: use one of {', '.join(sorted(_PROBES))}, "
                                      "or None for the best one here.")
    made = _INSTANCES.get(name)
    if made is not None:
        return made
    with _LOCKS:
        making = _MAKING.setdefault(name, threading.RLock())
    with making:
        if name not in _INSTANCES:
            why = unavailable_reason(name)
            if why is not None:
                raise BackendUnavailableError(f"backend {shown(name)} is unavailable: {why}")
            factory = _FACTORIES[name]
            made = factory()
            if not isinstance(made, Backend):
                raise BackendUnavailableError(f"backend {shown(name)}'s factory returned {a_type(made)}, not a Backend. "
                                              "Fix: register a factory that returns a vyre_numba.backend.Backend.")
            with _LOCKS:
                if _FACTORIES.get(name) is not factory:  # registered again meanwhile: the new factory makes it
                    return made
                _INSTANCES[name] = made
        return _INSTANCES[name]


def _reference() -> Backend:
    from .reference import ReferenceBackend

    return ReferenceBackend()


def _cuda() -> Backend:
    from .gpu import CudaBackend

    return CudaBackend()


def _cuda_probe() -> str | None:
    try:
        from .gpu import probe
    except ImportError as e:
        return f"vyre_numba.gpu failed to import ({e}). Fix: pip install 'numba-cuda[cu13]'."
    return probe()


def _load_builtin() -> None:
    _FACTORIES.setdefault("reference", _reference)
    _PROBES.setdefault("reference", lambda: None)
    _FACTORIES.setdefault("cuda", _cuda)
    _PROBES.setdefault("cuda", _cuda_probe)


def _install() -> None:
    from . import backend

    backend._RESOLVER = get_backend
    backend._NAMES = backend_names
    backend._SHARED = lambda b: _INSTANCES.get(b.name) is b
    backend._COMPACT_READER = _read_compacted


def _read_compacted(b: Backend, values, flags, capacity):
    from .compaction import read_on

    return read_on(b, values, flags, capacity)


_install()
