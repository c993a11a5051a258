"""Every error a user can cause is one of these. Messages end with an actionable `Fix: ...`."""
from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import inspect
import re
import reprlib
import sys
import threading
import types
from typing import Callable

import numpy as np


__all__ = ["VyreError", "IRValidationError", "UnknownBufferError", "UnknownNameError", "BackendUnavailableError",
           "SettingError", "TemplateError", "DispatchError", "ArgumentError", "ImmutableError", "LaunchError",
           "UnsupportedError", "CompileError", "DeviceError", "DeviceMemoryError", "BarrierTimeoutError",
           "CapacityError", "CheckError", "CheckWarning", "CacheWarning", "CoverageWarning", "HostMemoryError",
           "UnknownStepError", "ResultTimeoutError"]

# Python's and NumPy's integer types, less np.timedelta64 (NumPy counts a time span among its integers;
# taken as a count, its unit would be dropped without a word)
INTEGERS = (int,) + tuple(t for k in (np.signedinteger, np.unsignedinteger) for t in k.__subclasses__()
                          if t is not np.timedelta64)


class VyreError(Exception):
    """Base of all vyre-numba errors."""

    keeps_frames = False  # True for a failure inside (the toolchain's, the device's): its traceback keeps
    # vyre-numba's frames, where it was found; a mistake's points at the caller's line


class IRValidationError(VyreError):
    """A program (or a piece of IR under construction) is not valid. `diagnostics` lists every problem."""

    def __init__(self, message: str, diagnostics: "list | tuple" = ()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)


class _Lookup(KeyError):
    """A KeyError whose message reads as written (KeyError would quote it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownBufferError(IRValidationError, _Lookup):
    """A buffer name a program does not declare (also a KeyError, as a lookup by name)."""


class UnknownNameError(VyreError, _Lookup):
    """A name a read-only mapping does not hold, such as a telemetry counter (also a KeyError, so
    `in` and `.get` read it as a missing key)."""


class BackendUnavailableError(VyreError):
    """The requested backend cannot run on this machine."""


class SettingError(VyreError):
    """A setting vyre-numba reads holds a value it does not recognise (VYRE_NUMBA_PROGRESS,
    VYRE_NUMBA_CACHE, VYRE_NUMBA_CACHE_DIR, VYRE_NUMBA_REFERENCE_MEMORY, VYRE_NUMBA_REFERENCE_WORK,
    Numba's NUMBA_ENABLE_CUDASIM), or one cannot work here (no home directory for the disk cache,
    no tqdm for progress=True)."""


class TemplateError(VyreError):
    """A hand-written PTX template (`ptx.templates`) is missing, its header does not declare its
    parameters, or it is loaded with other parameters than its header declares."""

    keeps_frames = True


def flag(value, name: str, fix: str) -> bool:
    """`value` as a bool where it is one (Python's or NumPy's); anything else, such as the string
    "no" that `if` would read as True, is a DispatchError saying `name` and ending in `Fix: fix`."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise DispatchError(f"{name}={shown(value, 60)} is not a bool. Fix: {fix}")


class DispatchError(VyreError):
    """Inputs, outputs or configuration of a dispatch are wrong."""


def whole(value, name: str, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi] where it is a Python or NumPy integer (never a bool); anything
    else is a DispatchError naming `name` and the range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, INTEGERS) or not lo <= value <= hi:
        arg = name.rpartition(" ")[2]
        one = isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iu" and lo <= value <= hi
        fix = (f"pass int({arg}) (True is not read as 1)" if isinstance(value, (bool, np.bool_)) else
               f"pass {arg}.item(), the number it holds (an array, 0-d too, is not taken as one number)" if one
               else "pass a whole number in range")
        raise DispatchError(f"{name}={shown(value)} is not an int in [{lo}, {hi}]. Fix: {fix}.")
    return int(value)


def yields(fn) -> bool:
    """Whether calling `fn` (or the Python function a Numba dispatcher wraps) returns a generator or
    a coroutine: Numba would compile its body as if it were a plain function."""
    fn = getattr(fn, "py_func", fn)
    return inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


class ArgumentError(VyreError, TypeError):
    """A call's arguments do not fit the parameters of the public function or method called: a
    misspelt keyword, one argument too many or a required one missing, or an object given to what
    it does not support, such as len() of a Graph (also a TypeError, which Python raises for the
    same mistakes)."""


class NotACollection:
    """A mix-in for an object that holds many things but is no Python collection (a Graph, a queue,
    an e-graph): len(), iteration, indexing and `in` raise ArgumentError with the class's
    `_collection_fix`, where Python would raise a bare TypeError; its truth stays True."""

    _collection_fix = "use its methods and properties (help(x) lists them)."

    def _not_a_collection(self, what: str):
        __tracebackhide__ = True  # noqa: F841
        raise ArgumentError(f"{with_article(public_name(type(self)))} is not a Python collection: it has no {what}. "
                            f"Fix: {self._collection_fix}")

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        self._not_a_collection("len()")

    def __iter__(self):
        self._not_a_collection("iteration (for, list(), unpacking)")

    def __getitem__(self, key):
        self._not_a_collection("indexing (x[...])")

    def __contains__(self, item) -> bool:
        self._not_a_collection("membership test (in)")


class ImmutableError(VyreError, dataclasses.FrozenInstanceError):
    """A field set or deleted on an immutable value, such as a DispatchConfig, an IR node or a
    result, or a read-only property set, or a new attribute set whose name is a letter from one the
    object has (a misspelt setting) (also dataclasses.FrozenInstanceError, an AttributeError, which
    Python raises for the same mistakes)."""


def _refuse_change(self, name: str, value=None) -> None:
    """__setattr__ and __delattr__ of an immutable dataclass or named tuple: the change refused,
    with the fix."""
    __tracebackhide__ = True  # noqa: F841
    cls = type(self).__name__
    if isinstance(self, tuple):
        fields, copy = list(self._fields), "x._replace({}=...)"
    else:
        fields, copy = [f.name for f in dataclasses.fields(self) if not f.name.startswith("_")], \
            "dataclasses.replace(x, {}=...)"
    if name in fields:
        raise ImmutableError(f"{cls} is immutable: its field {name!r} cannot be changed. Fix: make a changed copy, "
                             f"{copy.format(name)}, and use that.")
    raise ImmutableError(f"{cls} is immutable and takes no attributes of its own ({shown(name)} is none of its fields "
                         f"{fields}{did_you_mean(name, fields)}). Fix: keep your own values in a variable or dict, or "
                         f"make a changed copy with {copy.format('field')}.")


def _replacing(replace):
    """A named tuple's _replace, refusing a field it does not have with ArgumentError (it raised
    ValueError)."""
    @functools.wraps(replace)
    def call(self, /, **changes):
        unknown = [k for k in changes if k not in self._fields]
        if unknown:
            raise ArgumentError(f"{type(self).__name__}._replace(): {shown(unknown[0])} is none of its fields "
                                f"{list(self._fields)}{did_you_mean(unknown[0], list(self._fields))}. Fix: replace "
                                "only those fields.")
        return replace(self, **changes)
    return call


def _making(make):
    """A named tuple's _make, refusing a number of items other than its fields' with ArgumentError
    (it raised TypeError)."""
    @functools.wraps(make)
    def call(cls, iterable):
        items = tuple(iterable)
        if len(items) != len(cls._fields):
            raise ArgumentError(f"{cls.__name__}._make() takes one item for each of its fields {list(cls._fields)}, "
                                f"got {len(items)}. Fix: pass {len(cls._fields)} items, or call {cls.__name__}(...), "
                                "which fills in the defaults.")
        return make(items)
    return classmethod(call)


_refuse_change._vyre_immutable = True


_READ_ONLY: dict[type, frozenset] = {}  # a class's properties without a setter, found once


def _read_only(self, name: str) -> None:
    """Refuses an assignment to, or deletion of, a property without a setter, with ImmutableError
    (Python's own refusal is a bare AttributeError)."""
    __tracebackhide__ = True  # noqa: F841
    cls = type(self)
    names = _READ_ONLY.get(cls)
    if names is None:
        found = {k for c in cls.__mro__ for k, v in vars(c).items() if isinstance(v, property)}
        names = _READ_ONLY[cls] = frozenset(k for k in found if isinstance(p := getattr(cls, k, None), property)
                                            and p.fset is None)  # as cls resolves the name
    if name in names:
        cls = public_name(type(self))
        fix = getattr(self, "_read_only_fix", None) or f"make a new {cls} with the value you want"
        raise ImmutableError(f"{cls}.{name} is read-only: the {cls} keeps it from what it was made with and what "
                             f"was done to it since. Fix: {fix}.")


def set_unless_read_only(self, name: str, value, depth: int = 1) -> None:
    """__setattr__ refusing a read-only property, a value over a method and a misspelt setting where
    the caller (`depth` frames up: 2 from a class's own __setattr__ that calls this) is not vyre-numba."""
    _read_only(self, name)
    if not name.startswith("_") and not _own_frame(sys._getframe(depth).f_globals):
        if not callable(value):  # a callable over a method is a deliberate wrapping (a spy, a mock)
            _method(self, name, "assigned over on")
        if name not in getattr(self, "__dict__", ()) and not hasattr(type(self), name):
            _misspelt(self, name)
    object.__setattr__(self, name, value)


def _method(self, name: str, done: str) -> None:
    """Refuse assigning a value over (or deleting) a public method on an instance: the calls after
    it, the package's own among them, would fail far from the mistake (Python takes it silently)."""
    __tracebackhide__ = True  # noqa: F841
    attr = inspect.getattr_static(type(self), name, None)
    if isinstance(attr, (staticmethod, classmethod)) or inspect.isfunction(attr):
        cls = public_name(type(self))
        raise ImmutableError(f"{cls}.{name} is a method and cannot be {done} a {cls}: the calls of it after "
                             f"that (the library's own among them) would fail. Fix: call {cls}.{name}(...) as it "
                             f"is, and keep a value of your own under a name that is none of {cls}'s (or subclass "
                             f"{cls} to change what {name} does).")


def _misspelt(self, name: str) -> None:
    """Refuse setting `name`, new on `self`, where it is one letter or so from a public attribute (a
    property, an attribute of the instance; not a method): a misspelt setting would otherwise be
    kept beside the real one and change nothing."""
    __tracebackhide__ = True  # noqa: F841
    known = {k for c in type(self).__mro__ for k, v in vars(c).items() if not k.startswith("_") and isinstance(v, property)}
    known |= {k for k in getattr(self, "__dict__", {}) if not k.startswith("_")}
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
    if near:
        cls = public_name(type(self))
        raise ImmutableError(f"{cls} has no attribute {name!r} to set; did you mean {near[0]!r}? Fix: set "
                             f"{cls}.{near[0]} (help({cls}) lists what it has), or keep a value of your own under a "
                             "name that is not one letter from one of its attributes.")


def del_unless_read_only(self, name: str) -> None:
    _read_only(self, name)
    if not name.startswith("_") and name not in getattr(self, "__dict__", ()):
        _method(self, name, "deleted from")
    prop = getattr(type(self), name, None)
    if isinstance(prop, property) and prop.fdel is None:  # one with a setter, which no deletion undoes
        cls = public_name(type(self))
        raise ImmutableError(f"{cls}.{name} cannot be deleted. Fix: leave it in place (help({cls}.{name}) says what "
                             "may change it).")
    try:
        object.__delattr__(self, name)
    except AttributeError:  # Python's own, naming the class it was made by (Redispatch for a RecordedGraph)
        cls = public_name(type(self))
        raise ImmutableError(f"{cls} has no attribute {shown(name)} of its own to delete. Fix: delete only what you "
                             f"set on it (help({cls}) lists what it has).") from None


def _read_only_properties(cls: type) -> bool:
    return any(isinstance(v, property) and v.fset is None for c in cls.__mro__ for v in vars(c).values())


def by_identity(cls: type) -> type:
    """Class decorator: `cls` (a named tuple holding arrays) compares and hashes by identity, against
    a plain tuple too. Compared as tuples, two holding equal arrays raised NumPy's ambiguous-truth
    ValueError, and one holding a list could not be hashed."""
    cls.__eq__ = lambda self, other: self is other  # (not NotImplemented: tuple's == would compare the arrays)
    cls.__ne__ = lambda self, other: self is not other
    cls.__hash__ = object.__hash__
    return cls


def immutable(*classes: type) -> None:
    """Makes each frozen dataclass among `classes` refuse a change of a field with ImmutableError
    (`check_calls` does this for the classes it checks)."""
    for cls in classes:
        params = vars(cls).get("__dataclass_params__")
        if params is not None and params.frozen:
            cls.__setattr__ = cls.__delattr__ = _refuse_change
        elif issubclass(cls, tuple) and hasattr(cls, "_fields") and "_vyre_checked" not in vars(cls):
            if "__setattr__" not in vars(cls):  # a named tuple's own refusal stays
                cls.__setattr__ = _refuse_change
            cls.__delattr__ = _refuse_change
            cls._replace = _replacing(cls._replace)
            cls._make = _making(cls._make)
            if hasattr(cls, "__replace__"):  # copy.replace (Python 3.13)
                cls.__replace__ = _replacing(cls.__replace__)
        elif (cls.__setattr__ is object.__setattr__ and not issubclass(cls, (tuple, int, float, str, enum.Enum))
              and _read_only_properties(cls)):
            cls.__setattr__, cls.__delattr__ = set_unless_read_only, del_unless_read_only


def check_calls(namespace: dict, names) -> None:
    """Makes every function named in `names` (looked up and replaced in `namespace`, a package's
    globals) and every public method of every class named there raise ArgumentError, naming the
    parameters and the nearest one to a misspelt keyword, where a call's arguments do not fit; and
    every frozen dataclass among those classes refuse a change of a field with ImmutableError."""
    for name in names:
        obj = namespace.get(name)
        if _function(obj):
            namespace[name] = checked = _checked(obj)
            home = sys.modules.get(obj.__module__)  # where pickle looks it up
            if home is not None and getattr(home, obj.__qualname__, None) is obj:
                setattr(home, obj.__qualname__, checked)
        elif isinstance(obj, type) and _ours(obj):
            for cls in obj.__mro__:
                if _ours(cls):
                    _check_methods(cls)


def _function(obj) -> bool:
    """A Python function, or a decorator's wrapper of one (such as functools.lru_cache's)."""
    if isinstance(obj, types.FunctionType):
        return True
    return (not isinstance(obj, type) and callable(obj) and hasattr(obj, "__wrapped__")
            and isinstance(inspect.unwrap(obj), types.FunctionType))


def _ours(cls: type) -> bool:
    return (cls.__module__.startswith("vyre_numba") and not issubclass(cls, BaseException)
            and "_vyre_checked" not in cls.__dict__)


def _check_methods(cls: type) -> None:
    immutable(cls)
    for name, attr in list(vars(cls).items()):
        if name.startswith("_") and name not in ("__init__", "__call__", "__new__"):
            continue
        if isinstance(attr, (classmethod, staticmethod)) and _function(attr.__func__):
            setattr(cls, name, type(attr)(_checked(attr.__func__)))
        elif _function(attr):
            setattr(cls, name, _checked(attr))
    cls._vyre_checked = True


def _checked(fn):
    if getattr(fn, "_vyre_checked", False):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841 (IPython and pytest leave this frame out of tracebacks)
        try:
            return fn(*args, **kwargs)
        except VyreError as e:
            error = _named(fn, args, e, sys._getframe(1))
            if error is None:
                _leaving(e, sys._getframe(1))
                raise
            cause = e if _debugging() else None
        except Exception as e:  # a TypeError, MemoryError, ValueError or the driver's out-of-memory, translated
            error = _translated(fn, e, args, kwargs, sys._getframe(1))
            if error is None:
                raise
            cause = e if _debugging() or type(error) is DeviceError else None  # where it was raised stays in view
            # while debugging, and for the driver's failures (a bug report needs the call that failed)
        try:  # raised here, past the handler, so that Python's error is no context of it
            raise error from cause
        except VyreError as e:
            _leaving(e, sys._getframe(1))
            raise
    for attr in ("cache_clear", "cache_info", "cache_parameters"):  # functools.lru_cache's controls
        if hasattr(fn, attr):
            setattr(call, attr, getattr(fn, attr))
    call._vyre_checked = True
    return call


def _own_frame(namespace: dict) -> bool:
    """Whether a frame with these globals runs vyre-numba's own code."""
    name = namespace.get("__name__") or ""
    return name == "vyre_numba" or name.startswith("vyre_numba.")


def _callers_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` less vyre-numba's own frames: a mistake's error points at the caller's line (and at
    any of the caller's functions it passed through, such as a step or a callback), as a builtin's
    does, not at the checks that found it."""
    kept = []
    while tb is not None:
        if not _own_frame(tb.tb_frame.f_globals):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _leaving(e: VyreError, caller: types.FrameType) -> None:
    """`e` as it leaves a public call for `caller`: its traceback less vyre-numba's frames, unless
    it keeps them whole."""
    if not _kept_whole(e, caller):
        e.__traceback__ = _callers_frames(e.__traceback__)


def _kept_whole(e: VyreError, caller: types.FrameType) -> bool:
    """Whether `e`, leaving a public call for `caller`, keeps every frame: a failure inside
    (`keeps_frames`), a call from vyre-numba's own code (the error is still inside), or
    $VYRE_NUMBA_DEBUG set."""
    return e.keeps_frames or _own_frame(caller.f_globals) or _debugging()


def _call_name(fn, args: tuple) -> str:
    """The name the user called `fn` by: a method by the public class of what it was called on
    (RecordedGraph.replay, not the CUDA class's own; WorkQueue.chunks, not a base class's)."""
    name = fn.__qualname__
    code = getattr(inspect.unwrap(fn), "__code__", None)
    method = code is not None and code.co_argcount > 0 and code.co_varnames[0] in ("self", "cls", "_cls")
    if method and "." in name and "<locals>" not in name and args:
        owner = args[0] if isinstance(args[0], type) else type(args[0])
        if owner.__module__.startswith("vyre_numba") and getattr(owner, fn.__name__, None) is not None:
            name = f"{public_name(owner)}.{fn.__name__}"
    return name.replace(".__init__", "").replace(".__call__", "").replace(".__new__", "")


def _named(fn, args: tuple, e: VyreError, caller: types.FrameType) -> "DeviceMemoryError | None":
    """A DeviceMemoryError of an allocation (`e`, naming no call) as it leaves public `fn` for the
    caller: the same, naming `fn`; None for every other error, inside the package, and for one whose
    message a caller on the way out added to (its words are kept as they are)."""
    if type(e) is not DeviceMemoryError or _own_frame(caller.f_globals):
        return None
    return _renamed(e, f"{_call_name(fn, args)}()")


def _renamed(e: "DeviceMemoryError", what: str, fix: str | None = None) -> "DeviceMemoryError | None":
    """The DeviceMemoryError `e` of an allocation, as one of `what` (a call; ending in `fix` where
    given, else in e's own); None where `e` names its call already, or a caller on the way out
    added to its message (its words are kept)."""
    if e.unnamed is None:
        return None
    inner, detail, own_fix, message = e.unnamed
    if e.args[:1] != (message,):
        return None
    return device_memory_error(what, f"{inner}: {detail}", fix or own_fix, named=True)


def _translated(fn, e: BaseException, args: tuple, kwargs: dict, caller: types.FrameType) -> "VyreError | None":
    """The VyreError that Python's `e`, leaving public `fn` for `caller`, stands for: arguments that
    do not fit its parameters (ArgumentError), or GPU or host memory that vyre-numba's own code ran
    out of where no closer check said what sized it (DeviceMemoryError, HostMemoryError; a call from
    inside the package leaves it to that closer check, and a callback of the caller's own keeps its
    error); None where `e` is none of these (it leaves as it is)."""
    if isinstance(e, TypeError):
        why = _unfit(fn, args, kwargs)
        return None if why is None else ArgumentError(why)
    if _own_frame(caller.f_globals) or not _raised_by_us(e.__traceback__):
        return None
    name = _call_name(fn, args)
    said = driver_error(f"{name}()", e)
    if said is not None:
        return said
    if _out_of_memory(e):
        return HostMemoryError(f"{name}() ran out of host memory{told(e)}. Fix: pass less data at a time, or free "
                               "host memory first (del the arrays no longer needed).")
    return None


def _raised_by_us(tb: types.TracebackType | None) -> bool:
    """Whether the innermost frame of `tb` that is not a library's (NumPy's, the standard library's,
    an installed package's) runs vyre-numba's code, not a callback of the caller's it called."""
    last = None
    while tb is not None:
        g = tb.tb_frame.f_globals
        if _own_frame(g) or not tb.tb_frame.f_code.co_filename.startswith(_library_paths()):
            last = g
        tb = tb.tb_next
    return last is not None and _own_frame(last)


@functools.lru_cache(maxsize=1)
def _library_paths() -> tuple[str, ...]:
    """Where the standard library and installed packages live (their frames are nobody's callback)."""
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(sorted({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}))


DEBUG_ENV = "VYRE_NUMBA_DEBUG"
DEBUG_OFF, DEBUG_ON = ("", "0", "false", "no", "off", "disabled"), ("1", "true", "yes", "on", "enabled")


def _debugging() -> bool:
    """$VYRE_NUMBA_DEBUG set (1/true/yes/on, any case; another value too, as a debugging aid should
    not hide what it was set to show): errors keep vyre-numba's frames in their tracebacks."""
    import os

    return os.environ.get(DEBUG_ENV, "").strip().lower() not in DEBUG_OFF


def public_name(cls: type) -> str:
    """The name users know `cls` by: its own where its module exports it, else that of the nearest
    base its module exports (RecordedGraph for the reference backend's Redispatch)."""
    for c in cls.__mro__:
        if not c.__module__.startswith("vyre_numba"):  # Enum, object: nobody's name for ours
            break
        if c.__name__ in getattr(sys.modules.get(c.__module__), "__all__", ()):
            return c.__name__
    return cls.__name__


def _unfit(fn, args: tuple, kwargs: dict) -> str | None:
    """Why `fn(*args, **kwargs)` cannot bind, with the fix; None where it binds (the TypeError came
    from inside)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(*args, **kwargs)
        return None
    except TypeError as e:
        why = str(e)
    params = list(sig.parameters.values())
    method = "." in fn.__qualname__ and params and params[0].name in ("self", "cls", "_cls")
    shown_sig = sig.replace(parameters=[p.replace(annotation=p.empty) for p in params[1 if method else 0:]],
                            return_annotation=sig.empty)
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    hints = []
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        for k in kwargs:
            if k not in names:
                near = difflib.get_close_matches(k, names, 1, 0.6)
                hints.append(f"`{k}` is no parameter" + (f" (did you mean `{near[0]}`?)" if near else ""))
    name = _call_name(fn, args)  # Redispatch's replay is RecordedGraph.replay
    hint = "; ".join(hints) + "; " if hints else ""
    why = why.replace(f"{fn.__qualname__}()", f"{name}()")
    return f"{name}(): {why}. Fix: {hint}call it as {name}{clip(str(shown_sig), 400)}."


class LaunchError(DispatchError):
    """Launch geometry or resources exceed what the device allows."""


class UnsupportedError(VyreError):
    """The program uses something this backend or target cannot lower."""


class CompileError(VyreError):
    """PTX assembly or linking failed; the message carries the toolchain log."""

    keeps_frames = True


class DeviceError(VyreError):
    """The CUDA driver reported an error while running a kernel."""

    keeps_frames = True


class DeviceMemoryError(DeviceError, MemoryError):
    """The GPU had no room for what a call needed; also a MemoryError, so `except MemoryError`
    around a call still catches it."""

    unnamed = None  # (what, detail, fix, message) of an allocation's error, which the public call it leaves names
    keeps_frames = False  # the size of the caller's data, not a failure: it points at the caller's line, as
    # running out of host memory does

    def __new__(cls, *args, **kwargs):  # as HostMemoryError's
        return Exception.__new__(cls, *args)


class BarrierTimeoutError(DeviceError):
    """A grid barrier on the device waited past its bound: not every block arrived."""


class CapacityError(DispatchError):
    """A result needs more room than the capacity given; `needed` says how much. Nothing was lost:
    the inputs are as they were, so the call can be repeated with `capacity >= needed`."""

    def __init__(self, message: str, needed: int):
        super().__init__(message)
        self.needed = needed

    def __reduce__(self):  # pickled whole (a Dask worker's error travels so): Exception's takes args alone
        return type(self), (*self.args[:1], self.needed), self.__dict__


class CheckError(DispatchError):
    """A checked dispatch (`DispatchConfig(checked="raise")`) found out-of-bounds accesses, division
    by zero or NaNs. The dispatch ran to completion: `report` says what it found, `outputs` holds a
    host dispatch's results (None for a resident one, whose buffers hold them)."""

    def __init__(self, message: str, report, outputs=None):
        super().__init__(message)
        self.report, self.outputs = report, outputs

    def __reduce__(self):
        return type(self), (*self.args[:1], self.report, self.outputs), self.__dict__


class CacheWarning(UserWarning):
    """The disk cache cannot be used (no directory, or one that cannot be written); work goes on
    without it, compiling afresh in every process. Said once a directory."""


class CoverageWarning(UserWarning):
    """A dispatch sized by its outputs launches fewer invocations than a buffer its program compares
    the invocation id with (`i < buf_len("x")`) is long: the rest of that buffer is never visited
    (a histogram or a count into a small output, say). Its message names the grid that covers it."""


class CheckWarning(UserWarning):
    """What a checked dispatch (`DispatchConfig(checked=True)`) found; `report` has the details."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


def warn_user(warning: Warning) -> None:
    """Issue `warning` at the first line outside vyre_numba (the user's call), every time: no
    registry, since Python's once-per-line registry would hide a re-run cell's or a loop's later
    findings; the user's warning filters ('ignore', 'error', 'once') apply as ever."""
    import os
    import warnings

    root = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(root):
        frame = frame.f_back
    g = frame.f_globals
    warnings.warn_explicit(warning, type(warning), frame.f_code.co_filename, frame.f_lineno,
                           module=g.get("__name__", "<unknown>"), registry=None)  # no module_globals: in a REPL
    # its loader raises ImportError fetching the source line


class UnknownStepError(DispatchError, IndexError):
    """A step number a recorded sequence's `buffers` does not have (also an IndexError, as a tuple's
    index out of range is, so `except IndexError` keeps working)."""


class ResultTimeoutError(DispatchError, TimeoutError):
    """`Pending.result(timeout=...)` waited and the dispatch still runs (also a TimeoutError, as
    concurrent.futures raises, so `except TimeoutError` catches it)."""


class HostMemoryError(DispatchError, MemoryError):
    """The host ran out of memory for arrays sized by the inputs (usually by the largest id); also
    a MemoryError, so `except MemoryError` around a call still catches it."""

    def __new__(cls, *args, **kwargs):
        # MemoryError's own __new__ is unsafe for a class whose first base is another exception; tblib
        # (which Dask uses to bring a worker's error back) unpickles by calling cls.__new__(cls)
        return Exception.__new__(cls, *args)


BY_IDS = ("Arrays are sized by the largest vertex or class id, not by how many are used. Fix: renumber ids densely "
          "from 0 (np.unique(ids, return_inverse=True)), or split the input.")


IN_HOST_MEMORY = ("The reference backend keeps every buffer, and a copy of each it writes (to undo a failed "
                  "run), in host memory. Fix: work on less data at a time, or run on the GPU backend.")


def converting(matches, error):
    """Decorator: an exception inside the function for which `matches(e)` holds is raised as
    `error(e)`, a VyreError, instead (the original left out of the traceback)."""

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if not matches(e):
                    raise
                raise error(e) from None
        return call
    return wrap


def told(e: BaseException) -> str:
    """" (what e says)" for a message, or nothing where e says nothing (a bare MemoryError)."""
    return f" ({e})" if str(e) else ""


def host_memory(what: str, why: str = BY_IDS):
    """Decorator: a MemoryError inside `what` (here or raised on a Dask worker), or NumPy's
    ValueError for an array past the address space, becomes a HostMemoryError that says, in
    `why`, what sizes the arrays and how to shrink them (the default: a graph algorithm's
    arrays, sized by the largest id)."""
    return converting(_out_of_memory, lambda e: HostMemoryError(f"{what} ran out of host memory{told(e)}. {why}"))


LESS_DATA = "give the call less data at a time"  # the Fix's last resort where a call's data did not fit
_ASKING = threading.local()
_ROOM: list = []  # what `device_memory_error` asks for the room on the GPU (the gpu layer's, once imported)


def on_device_memory_error(room: Callable[[], str]) -> None:
    """Register `room()`, called when a call runs out of GPU memory: it may give back memory held
    idle (a pool's) and returns a sentence on what the GPU has free, or ""."""
    _ROOM.append(room)


def device_out_of_memory(e: BaseException) -> bool:
    """Whether `e` is the CUDA driver's out-of-memory error (as Numba, cuda.bindings or cuda.core
    raise it: each names CUDA_ERROR_OUT_OF_MEMORY), not one of ours."""
    return not isinstance(e, VyreError) and "CUDA_ERROR_OUT_OF_MEMORY" in _text(e)


def _text(e: BaseException) -> str:
    """str(e), or "" where its own __str__ fails."""
    try:
        return str(e)
    except Exception:
        return ""


_DRIVER_ERRORS = (("numba.cuda.cudadrv.", "CudaDriverError"), ("cuda.core.", "CUDAError"))  # (module, class)
_STICKY = re.compile(r"CUDA_ERROR_(ILLEGAL_ADDRESS|LAUNCH_FAILED|ILLEGAL_INSTRUCTION|MISALIGNED_ADDRESS|INVALID_PC|"
                     r"INVALID_ADDRESS_SPACE|HARDWARE_STACK_ERROR|ASSERT|ECC_UNCORRECTABLE|LAUNCH_TIMEOUT|"
                     r"CONTEXT_IS_DESTROYED)\b")


def driver_failure(e: BaseException) -> bool:
    """Whether `e` is an error of the CUDA driver as Numba or cuda.core raise it."""
    return not isinstance(e, VyreError) and any(
        c.__name__ == name and c.__module__.startswith(home) for c in type(e).__mro__ for home, name in _DRIVER_ERRORS)


def driver_error(what: str, e: BaseException) -> "VyreError | None":
    """The VyreError of the CUDA driver's error `e` in `what` (a call): running out of memory (GPU or
    page-locked host), or a failure, with what to do; None where `e` is no driver's error."""
    if device_out_of_memory(e):
        return driver_memory_error(what, e, named=True)
    if driver_failure(e):
        return DeviceError(f"{what} failed in the CUDA driver ({_text(e)}). Fix: {_driver_fix(e)}")
    return None


def _driver_fix(e: BaseException) -> str:
    """What to do after the driver error `e`: a kernel's fault leaves the context unusable; a forked
    process cannot use the CUDA its parent had begun."""
    if "before forking" in _text(e):
        return ("this process was forked from one that had already used the GPU, and CUDA cannot be used after a "
                "fork: start worker processes with multiprocessing.get_context('spawn') (or 'forkserver'), or let "
                "Dask run the work (vyre_numba.distributed).")
    if _STICKY.search(_text(e)):
        return ("a fault inside a kernel leaves this process's CUDA context unusable, so every later GPU call fails "
                "too: restart the process (in Jupyter, restart the kernel); compute-sanitizer names the kernel and "
                "the access at fault.")
    return "check that the GPU is healthy and not held by another process (nvidia-smi); if it persists, restart " \
        "the process."


def device_memory_error(what: str, e: "BaseException | str", fix: str = LESS_DATA,
                        named: bool = False) -> DeviceMemoryError:
    """The DeviceMemoryError of `what` (a call, an allocation) the GPU had no room for, `e` the
    driver's error (or what it lacked room for): what is free on the GPU now, and how to make room
    (ending in `fix`, what to change in the call). Not `named` (an allocation's, not a call's), the
    public call it leaves names itself in its place."""
    room = ""
    if not getattr(_ASKING, "now", False):  # a room() that itself runs out says nothing of the room
        _ASKING.now = True
        try:
            for find in _ROOM:
                try:
                    room = find() or room
                except Exception:  # a context the error left unusable: the message goes without it
                    pass
        finally:
            _ASKING.now = False
    said = e if isinstance(e, str) else _text(e)
    from .simulator import SIMULATED

    if SIMULATED:  # numba-cuda's simulator keeps device arrays in host memory: no GPU, no nvidia-smi
        memory, held, arrays, others = "the CUDA simulator's device memory, which is host memory", "memory", "", ""
    else:
        memory, held, arrays, others = ("GPU memory", "GPU memory", "device ",
                                        "end other processes using the GPU (nvidia-smi lists them), ")
    error = DeviceMemoryError(
        f"{what} ran out of {memory} ({said}).{' ' + room if room else ''} Fix: free {held} this process holds "
        f"(del {arrays}arrays no longer needed; close() Graphs, EGraphs and WorkQueues), {others}or {fix}.")
    error.unnamed = None if named else (what, said, fix, error.args[0])
    return error


_PINNED = ("cuMemHostAlloc", "cuMemAllocHost", "cuMemHostRegister")  # the driver's page-locked host allocations


def driver_memory_error(what: str, e: BaseException, fix: str = LESS_DATA,
                        named: bool = False) -> "DeviceMemoryError | HostMemoryError":
    """The error of `what` where the driver said CUDA_ERROR_OUT_OF_MEMORY (`e`): of page-locked host
    memory (a HostMemoryError) where the allocation that failed was one, else of GPU memory."""
    text = _text(e)
    if any(call in text for call in _PINNED):
        return HostMemoryError(f"{what} ran out of page-locked host memory ({text}). Fix: free host memory (del "
                               "arrays no longer needed), or move less data a call: uploads, downloads and host "
                               "dispatches stage their copies through page-locked buffers.")
    return device_memory_error(what, e, fix, named)


def raise_if_out_of_memory(e: BaseException, what: str, fix: str = LESS_DATA,
                           named: bool = False) -> None:
    """Raise `driver_memory_error(what, e, fix)` where `e` is the driver's out-of-memory error (for a
    handler that would otherwise say something else of it); nothing for any other error. `named`:
    `what` is the call the user made (work done past a public call's return, such as a generator's,
    or a call with a Fix of its own), and an allocation's DeviceMemoryError `e` is raised again
    naming it, ending in `fix`."""
    if named and isinstance(e, DeviceMemoryError):
        renamed = _renamed(e, what, fix)
        if renamed is not None:
            raise renamed from None
    if device_out_of_memory(e):
        raise driver_memory_error(what, e, fix, named) from None


def _out_of_memory(e: BaseException) -> bool:
    """A MemoryError, or the ValueError NumPy raises for an array whose bytes no address holds."""
    if isinstance(e, VyreError):  # a HostMemoryError already says what ran out: kept as it is
        return False
    return isinstance(e, MemoryError) or (isinstance(e, ValueError) and str(e).startswith("array is too big"))


def did_you_mean(name, names) -> str:
    """" (did you mean 'x'?)" naming the one of `names` nearest to `name`, or "" where none is near."""
    close = difflib.get_close_matches(name, list(names), n=1) if isinstance(name, str) else []
    return f" (did you mean {shown(close[0], 80)}?)" if close else ""  # a name may be of any length


_NUMBA_NOISE = ("Failed in ", "During: ", "File \"", "^", "Enable logging", "For more information",
                "This error may have been", "raised from", "<source missing")


def numba_reason(e: BaseException, width: int = 300) -> str:
    """The reason in a Numba compile error's text, past its stage headers, source listings and
    "During:" lines (`Unknown attribute 'x' of type float32`; `No implementation of function ...
    found for signature: >>> setitem(...)`), clipped to `width`: what a message names."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(_NUMBA_NOISE)]
    if not useful:
        return clip(lines[0], width) if lines else type(e).__name__
    text = useful[0]
    if " object at 0x" in text:  # Numba's lowering failed with its own internals as the message
        value = re.search(r"(?:freevar|global)\((\w+): ", " ".join(lines))
        kinds = re.findall(r"\(([A-Z]\w*\(.*\))\s*,?\)\s*$", text)
        kind = f" ({kinds[0]})" if kinds else ""
        return clip(f"{value.group(1)!r}{kind}, read from the function's closure or globals, is no constant Numba "
                    f"can compile; pass it as an argument (an array or a number)" if value else
                    f"Numba cannot compile a value here{kind}", width)
    if text.endswith(":") and len(useful) > 1:  # "... found for signature:" and the signature
        text = f"{text} {useful[1]}"
    name = re.match(r"Untyped global name '(\w+)'", text)
    if name and "Cannot determine Numba type of <class 'function'>" in text:  # a plain helper it calls
        x = name.group(1)
        return clip(text, width) + (f"; {x} is a plain Python function, which compiled code cannot call: decorate "
                                    f"it with @numba.njit (the host and the GPU both call an njit function)")
    if name and "Cannot determine Numba type of <class" in text:  # an object: a notebook's `cfg.t`, say
        x = name.group(1)
        return clip(text, width) + (f"; read what it needs from {x} into a number or an array first (t = {x}.t) "
                                    f"and use that")
    return clip(text, width)


def mixes_bools(x) -> bool:
    """Whether the (nested) list or tuple `x` holds bools among other numbers, which np.asarray
    reads as 0 and 1 without a word (a list of bools alone becomes a bool array, refused by dtype)."""
    kinds: set = set()
    todo, seen = [x], set()
    while todo and len(kinds) < 2:
        items = todo.pop()
        if not isinstance(items, (list, tuple)) or id(items) in seen:
            continue
        seen.add(id(items))
        for t in set(map(type, items)):  # by type: a list of millions of ints is one step here
            if issubclass(t, (list, tuple)):
                todo.extend(v for v in items if type(v) is t)
            elif issubclass(t, np.ndarray):  # a 0-d bool array is a bool to NumPy too
                kinds.update(v.dtype == np.bool_ for v in items if type(v) is t)
            else:
                kinds.add(issubclass(t, (bool, np.bool_)))
    return len(kinds) == 2


def refuse_raw_bytes(x, what: str) -> None:
    """A DispatchError where `x` is raw bytes that NumPy would read as one uint8 number a byte (a
    bytearray, a memoryview of bytes), as `bytes` itself is refused: four bytes of a float32 are
    not four numbers."""
    if isinstance(x, bytearray) or (isinstance(x, memoryview) and isinstance(x.obj, (bytes, bytearray))
                                    and x.format in ("B", "b", "c")):
        raise DispatchError(f"{what} is raw bytes ({a_type(x)}), which would be read as one number a byte. Fix: pass "
                            "np.frombuffer(x, dtype) for the values the bytes encode, or np.asarray(x, np.uint8) for "
                            "the bytes as numbers.")


def refuse_missing(value, what: str) -> None:
    """A DispatchError, saying `what` it is, where `value` is a pandas object of pandas' own dtype
    (nullable, Arrow, categorical) holding missing values (pd.NA, NaT), which NumPy reads as NaN
    or None (a NaN of a NumPy-dtype Series is a value); and where it is a pyarrow array holding
    nulls, which NumPy reads so too."""
    if type(value).__module__.startswith("pyarrow") and isinstance(getattr(value, "column_names", None), list):
        for name, column in zip(value.column_names, value.columns):  # a Table or RecordBatch: a column's nulls
            if column.null_count:
                first = int(np.flatnonzero(np.asarray(column.is_null()))[0])
                raise DispatchError(f"{what} is a pyarrow {type(value).__name__} whose column {shown(name)} has "
                                    f"{column.null_count} missing value(s) (nulls; the first at row {first}), which "
                                    f"have no value (NumPy reads them as NaN or None). Fix: drop those rows "
                                    f"(x.drop_null()) or fill them (pyarrow.compute.fill_null(x[{name!r}], value)) "
                                    f"first, x being that {type(value).__name__}.")
        return
    nulls = getattr(value, "null_count", None) if type(value).__module__.startswith("pyarrow") else None
    if isinstance(nulls, int) and nulls and callable(getattr(value, "is_null", None)):  # an array's (a table has none)
        first = int(np.flatnonzero(np.asarray(value.is_null()))[0])
        name = type(value).__name__
        raise DispatchError(f"{what} is a pyarrow {name} with {nulls} missing value(s) (nulls; the first at "
                            f"position {first}), which have no value (NumPy reads them as NaN or None). Fix: pass "
                            f"x.fill_null(value).to_numpy() with the value meant, x being that {name}.")
    if not type(value).__module__.startswith("pandas") or not callable(getattr(value, "isna", None)):
        return
    dt = getattr(value, "dtype", None)  # a table has one a column
    if all(isinstance(d, np.dtype) for d in ([dt] if dt is not None else getattr(value, "dtypes", ()))):
        return
    gaps = np.argwhere(np.asarray(value.isna()))
    if gaps.size:
        where = f"position {int(gaps[0][0])}" if gaps.shape[1] == 1 else f"row {int(gaps[0][0])}"
        kind = getattr(dt, "kind", "O") if dt is not None else "O"
        fix = ("pass x.cat.codes.to_numpy() for the category codes (-1 where one is missing), or "
               "x.astype(x.cat.categories.dtype).fillna(value).to_numpy() for the values" if str(dt) == "category"
               else "pass x.fillna(value).to_numpy() with the value meant" if kind in "biuf" else
               "fill them with values of a NumPy type, or take the positions of what you mean instead "
               "(np.flatnonzero(mask)) and index x with them")
        raise DispatchError(f"{what} is a pandas {type(value).__name__} with {len(gaps)} missing value(s) (the first at "
                            f"{where}), which have no value (NumPy reads them as NaN or None). Fix: {fix}, x being "
                            f"that {type(value).__name__}.")


def native(dt: np.dtype) -> bool:
    """Whether every number in `dt` (each field and subarray of a record too) is in this machine's
    byte order, as Numba reads it (NumPy's `isnative` misses a record's subarray field)."""
    todo = [dt]
    while todo:  # a walk, not recursion: records may nest deep
        t = todo.pop()
        if t.subdtype is not None:
            todo.append(t.subdtype[0])
        elif t.fields is not None:
            todo.extend(f[0] for f in t.fields.values())
        elif not t.isnative:
            return False
    return True


def int_range(values, arr: np.ndarray) -> tuple[int, int] | None:
    """(least, greatest) where `values`, which NumPy read as the float or object array `arr`, are
    ints only (lists of them, or an object array), else None: NumPy reads [1, -1, 2**63] as floats,
    since no one integer type holds them all."""
    if (isinstance(values, np.ndarray) and values.dtype != object) or arr.dtype.kind not in "fO":
        return None
    try:
        flat = np.asarray(values, dtype=object).reshape(-1).tolist()
    except (ValueError, TypeError):
        return None
    if not flat or len(flat) != arr.size or not all(isinstance(v, INTEGERS) and not isinstance(v, (bool, np.bool_))
                                                    for v in flat):
        return None
    return int(min(flat)), int(max(flat))


def refuse_misread(x, what: str, *, masked: str, not_bool: str | None = None) -> None:
    """A DispatchError where np.asarray(x) would not read the numbers `x` means: a masked array
    (its mask dropped; `masked` is the Fix), raw bytes (one number a byte), a pandas gap (pd.NA
    read as NaN or None) or, where `not_bool` says what a bool is not ("a vertex id"), bools among
    integers (read as 0 and 1)."""
    if isinstance(x, np.ma.MaskedArray):
        raise DispatchError(f"{what} is a masked array, whose mask would be ignored. Fix: {masked}")
    if not_bool and mixes_bools(x):
        raise DispatchError(f"{what} mixes bools and integers; a bool is not {not_bool}. Fix: pass integers only "
                            "(int(b) where a bool's 0 or 1 is meant).")
    refuse_raw_bytes(x, what)
    refuse_missing(x, what)


def flat_fix(x, name: str = "x") -> str:
    """How to pass `x` (named `name`, where that is a Python name) flat, for a Fix: an np.matrix's
    reshape(-1) is 2-D still, and a list has none."""
    name = name if name.isidentifier() else "x"
    return f"np.asarray({name}).reshape(-1)" if isinstance(x, np.matrix) or not hasattr(x, "reshape") else \
        f"{name}.reshape(-1)"


_SAID_AS = (("uint", "a"), ("ufunc", "a"), ("uuid", "a"), ("nd", "an"))  # by sound, where spelling misleads


def a_type(x) -> str:
    """x's type's name with its article, for a message: "an int", "a list", "a uint8", "an ndarray"."""
    return with_article(type(x).__name__)


def with_article(name: str) -> str:
    """`name` with the article it is spoken with: "an EGraph", "a Graph", "a uint8"."""
    said = next((a for start, a in _SAID_AS if name.lower().startswith(start)), None)
    return f"{said or ('an' if name[:1].lower() in 'aeiou' else 'a')} {name}"


def shown(x, width: int = 80) -> str:
    """repr(x) for an error message: about `width` characters at most, whatever `x` is (a list
    nested 100,000 deep, a huge list, an object whose repr raises), never an exception itself."""
    try:
        text = _widths(width).repr(x)
    except Exception:  # a user's __repr__ that raises, or recurses without end; an int too long for str
        text = f"<an int of {x.bit_length():,} bits>" if isinstance(x, int) else f"<{a_type(x)}>"
    return clip(text, width)


def clip(text: str, width: int) -> str:
    """`text` if it has at most `width` characters, else its start and "..." (`width` in all), so
    a cut is never mistaken for the whole."""
    return text if len(text) <= width else text[:max(width - 3, 1)] + "..."


@functools.lru_cache(maxsize=None)  # a handful of widths, each made once
def _widths(width: int) -> reprlib.Repr:
    """A Repr shortening strings, ints and other values to `width` characters."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlong = 3, width, width, width
    return r

