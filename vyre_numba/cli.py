"""The `vyre-numba` command: info, run, emit, demo, bench.

Every argument and path is checked before any work starts. A mistake prints one line,
`error: ... Fix: ...`, to stderr (an invalid program: a line more for each problem, each with its
Fix) and exits with status 2 (argparse's own errors exit 2 too); a failure to write after the
checks passed, or of the GPU, its driver, the toolchain or the install (`DeviceError`,
`CompileError`, `TemplateError`, running out of memory), exits 1; Ctrl-C prints one line and
exits 130; an unexpected exception is reported in one line as a bug and exits 1 (set
VYRE_NUMBA_DEBUG=1 to see its traceback).

Output locations: `run --out DIR` and the directory of `emit -o FILE` are created, with their
parents, when missing (and removed again if the command then fails before writing); files
are written atomically, so an interrupted command never leaves half a file. An output that is a
symbolic link writes the file it leads to; one that is a device, FIFO or socket, or that is a file
the command reads (the program, an input), is refused before any work.
"""
from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import json
import math
import os
import platform
import re
import stat
import sys
import tempfile
import time
import tokenize
import traceback
import warnings
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from . import ir
from .config import MAX_AXIS, DispatchConfig
from . import errors
from .errors import DEBUG_ENV, DEBUG_OFF, DEBUG_ON, DispatchError, VyreError, clip, did_you_mean, driver_error, shown
from .files import NotRegular, regular, write_all
from .registry import available_backends, get_backend, unavailable_reason

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(VyreError):
    """A command-line argument or path is wrong; the command exits with status 2 before any work."""


class OutputError(VyreError):
    """Writing a result failed after every check passed (a full disk, say); exits with status 1."""


class _StdoutError(OutputError):
    """Standard output cannot be written (a closed pipe is not one: it ends quietly)."""


class _Stdout:
    """sys.stdout while a command runs: its write failures become _StdoutError, told apart from
    every other OSError (and not swallowed, as argparse swallows them while printing help)."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _guarded(self, fn, *args):
        try:
            return fn(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _StdoutError(f"cannot write to standard output: {e.strerror or e}. Fix: send it somewhere "
                               "writable (free space there, or redirect it to another file), then run again.") from e

    def write(self, text):
        try:
            return self._guarded(self._stream.write, text)
        except UnicodeEncodeError:  # a path the terminal's encoding cannot spell: shown escaped, the work stands
            enc = getattr(self._stream, "encoding", None) or "ascii"
            return self._guarded(self._stream.write, text.encode(enc, "backslashreplace").decode(enc))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        return self._guarded(self._stream.flush)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cmd_info(args: argparse.Namespace) -> int:
    """Backends, GPU and toolchain versions."""
    from . import __version__

    print(f"vyre-numba {__version__} (Python {platform.python_version()}, {platform.machine()})")
    for dist in ("numpy", "numba", "numba-cuda", "llvmlite", "cuda-core", "cuda-bindings", "nvidia-nvjitlink"):
        print(f"  {dist:18s} {_version(dist)}")
    print("backends:")
    usable = []
    for name in ("cuda", "reference"):
        try:
            why = unavailable_reason(name)
        except VyreError as e:  # a probe registered in-process that raised: said on its line, the rest still listed
            why = str(e)
        if why is None and name == "reference":  # its settings are read as it is made: a bad one makes it unusable
            try:
                get_backend(name)
            except VyreError as e:
                why = str(e)
        if why is None:
            usable.append(name)
        why = None if why is None else _in_cli_terms(why, "run (or demo) --backend reference")
        print(f"  {name:10s} {'available' if why is None else 'unavailable: ' + why}")
    if "cuda" in usable:
        from .gpu import caps

        c = caps()
        print(f"GPU: {c.name}, sm_{c.sm}, {c.sm_count} SMs, cooperative launch: {c.cooperative_launch}")
    print(f"default backend: {usable[0] if usable else 'none usable (see above)'}")
    settings = _settings()
    bad = [(env, why) for env, why in settings + _unknown_settings([env for env, _ in settings]) if why is not None]
    debug = _debug_setting()
    if debug is not None:  # read as on, so no command refuses it; info, which checks settings, says so
        bad.append((DEBUG_ENV, debug))
    print("settings: " + ("every one valid" if not bad else "; ".join(_one_line(why) for _, why in bad)))
    return EXIT_OK if not bad else EXIT_USAGE


# ---- checks ------------------------------------------------------------------------------------

def _settings() -> list[tuple[str, VyreError | None]]:
    """(environment variable, the error its value raises or None) for each setting vyre-numba
    reads, checked as the library reads them."""
    from . import progress, simulator
    from .gpu import diskcache
    from .reference.interpreter import MEMORY_ENV, WORK_ENV, memory_budget, work_budget

    def cache_dir():  # only a value set is checked, and only with the cache on: no home costs only the cache
        try:
            on = diskcache.enabled()
        except VyreError:  # said of VYRE_NUMBA_CACHE
            return
        if on and os.environ.get("VYRE_NUMBA_CACHE_DIR", "").strip():
            diskcache.default_dir()

    out = []
    for env, check in ((progress.ENV, lambda: progress.check_progress(None)), ("VYRE_NUMBA_CACHE", diskcache.enabled),
                       ("VYRE_NUMBA_CACHE_DIR", cache_dir), (MEMORY_ENV, memory_budget), (WORK_ENV, work_budget),
                       (simulator.ENV, simulator.check)):
        try:
            check()
            out.append((env, None))
        except VyreError as e:
            out.append((env, e))
    return out


def _unknown_settings(read: list[str]) -> list[tuple[str, VyreError]]:
    """(environment variable, a SettingError) for each VYRE_NUMBA_* variable set that vyre-numba
    never reads (a misspelt name has no effect: `info` says so); `read`: the names `_settings` checks."""
    known = sorted(env for env in [*read, DEBUG_ENV] if env.startswith(_PREFIX))
    out = []
    for name in sorted(os.environ):
        if name.startswith(_PREFIX) and name not in known:  # the names compared past the prefix, which all share
            near = difflib.get_close_matches(name[len(_PREFIX):], [k[len(_PREFIX):] for k in known], n=1)
            out.append((name, errors.SettingError(
                f"{name} is set, but vyre-numba reads no setting of that name, so it has no effect"
                f"{f' (did you mean {_PREFIX}{near[0]}?)' if near else ''}. Fix: spell it as one of "
                f"{', '.join(known)}, or unset it.")))
    return out


_PREFIX = "VYRE_NUMBA_"


def _check_settings() -> None:
    """The error of the first environment setting that is not one, raised before any work."""
    for _, why in _settings():
        if why is not None:
            raise why


def _in_cli_terms(text: str, option: str = "--backend reference") -> str:
    """A library message whose Fix names the Python call, with the command-line `option` instead."""
    return text.replace("get_backend('reference')", option)


def _backend(name: str | None):
    """The `--backend` named (the best one here when None); an unusable one is a UsageError."""
    why = None if name is None else unavailable_reason(name)
    if why is not None:
        raise UsageError(f"--backend {name} is unavailable here: {_in_cli_terms(why)}")
    return get_backend(name)


MAX_PROGRAM_BYTES = 256 << 20  # a program of ir's MAX_NODES nodes is far less; /dev/zero is not a program


def _load_program(path: str) -> ir.Program:
    """The valid program stored (as Program.to_json()) at `path`."""
    fix = "Fix: pass the path of a file written by Program.to_json()."
    if not path:  # Path("") is the working directory
        raise UsageError(f"the program path is empty. {fix}")
    try:
        with regular(path) as f:
            data = f.read(MAX_PROGRAM_BYTES + 1)
        if len(data) > MAX_PROGRAM_BYTES:
            raise UsageError(f"program {shown(path)} is larger than {MAX_PROGRAM_BYTES >> 20} MiB, the most a program "
                             f"file may be (the largest program ir.check takes is far smaller). {fix}")
        text = data.decode("utf-8")
    except NotRegular as e:
        raise UsageError(f"program {shown(path)} is {_kind(e.mode)}, not a regular file. {fix}") from None
    except (OSError, ValueError) as e:
        if isinstance(e, UnicodeDecodeError):
            raise UsageError(f"program {shown(path)} is not UTF-8 text (byte {e.start}). {fix}") from e
        raise UsageError(f"cannot read program {shown(path)}: {getattr(e, 'strerror', None) or e}. {fix}") from e
    return ir.check(ir.Program.from_json(text))


def _check_grid(grid: Sequence[int] | None) -> tuple[int, ...] | None:
    if grid is None:
        return None
    if not 1 <= len(grid) <= 3 or any(not 0 <= g <= MAX_AXIS for g in grid):
        raise UsageError(f"--grid {' '.join(map(str, grid))} is not 1 to 3 workgroup counts in 0..2**32-1. "
                         "Fix: pass e.g. --grid 64 or --grid 8 8.")
    return tuple(grid)


def _parse_input_args(items: Iterable[str] | None) -> dict[str, str]:
    """`--input NAME=FILE` arguments by name; malformed or repeated names are refused."""
    pairs: dict[str, str] = {}
    for item in items or ():
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise UsageError(f"--input {shown(item)} is not NAME=FILE.npy. Fix: write e.g. --input a=a.npy.")
        if name in pairs:
            raise UsageError(f"--input {shown(name)} is given twice ({shown(pairs[name])} and {shown(file)}). "
                             f"Fix: pass --input {name}=FILE once.")
        pairs[name] = file
    return pairs


def _parse_size_args(items: Iterable[str] | None) -> dict[str, int]:
    """`--size NAME=N` arguments by name; malformed, out-of-range or repeated ones are refused."""
    sizes: dict[str, int] = {}
    for item in items or ():
        name, sep, n = item.partition("=")
        if not sep or not name or not re.fullmatch(r"[0-9]+", n) or int(n) >= 2**32:
            raise UsageError(f"--size {shown(item)} is not NAME=N with N an element count from 0 to 2**32-1. "
                             "Fix: write e.g. --size y=1000.")
        if name in sizes:
            raise UsageError(f"--size {shown(name)} is given twice. Fix: pass --size {name}=N once.")
        sizes[name] = int(n)
    return sizes


def _check_sizes(program: ir.Program, sizes: dict[str, int]) -> None:
    """`--size` names only output-only buffers, agrees with their declared counts, and sizes every
    output-only buffer that has neither a count nor an input to take its size from."""
    pure = [b for b in program.outputs if b.role is ir.Role.OUTPUT]
    for name, n in sizes.items():
        decl = next((b for b in pure if b.name == name), None)
        if decl is None:
            fix = (f"size only those: {', '.join(b.name for b in pure)}" if pure else
                   "drop --size; this program has none (the others take their inputs' sizes)")
            raise UsageError(f"--size {shown(name)} is not an output-only buffer of {shown(program.name)} (those: "
                             f"{[b.name for b in pure]}). Fix: {fix}.")
        if decl.count and n != decl.count:
            raise UsageError(f"--size {name}={n}, but {name!r} is declared with {decl.count} elements. "
                             f"Fix: drop --size {name}, or pass --size {name}={decl.count}.")
    if not program.inputs:
        for b in pure:
            if not b.count and b.name not in sizes:
                raise UsageError(f"output {b.name!r} of {shown(program.name)} has no declared count, and the program "
                                 f"has no input to take its size from. Fix: pass --size {b.name}=N, its element count.")


def _check_byte_ranges(program: ir.Program, inputs: dict[str, np.ndarray], sizes: dict[str, int]) -> None:
    """Every output_byte_range ends within its buffer at the sizes this run gives it."""
    default = max((a.size for a in inputs.values()), default=0)
    for b in program.outputs:
        r = b.output_byte_range
        if r is None or b.count:  # a declared count is the program's to agree with (checked when it loads)
            continue
        n = inputs[b.name].size if b.name in inputs else sizes.get(b.name, default)
        need = -(-r[1] // b.dtype.nbytes)
        if n < need:
            fix = (f"pass an --input {b.name} of at least {need} elements" if b.name in inputs else
                   f"pass --size {b.name}={need} or more")
            raise UsageError(f"output {b.name!r} of {shown(program.name)} has output_byte_range {r}, which ends past "
                             f"its {n} elements ({n * b.dtype.nbytes} bytes) in this run. Fix: {fix}.")


def _check_input_names(program: ir.Program, names: Iterable[str]) -> None:
    wanted = [b.name for b in program.inputs]
    given = set(names)
    unknown = sorted(given - set(wanted))
    if unknown:
        fix = f"name only those: {clip(', '.join(wanted), 200)}" if wanted else "drop --input; this program takes none"
        verb = "is not an input" if len(unknown) == 1 else "are not inputs"
        raise UsageError(f"--input {clip(', '.join(shown(n, 40) for n in unknown), 200)} {verb} of "
                         f"{shown(program.name)} (its inputs: {shown(wanted, 200)}). Fix: {fix}.")
    missing = [n for n in wanted if n not in given]
    if missing:
        raise UsageError(f"missing inputs {shown(missing, 200)} of {shown(program.name)}. "
                         f"Fix: add --input {missing[0]}=FILE.npy (one --input per input buffer).")


def _npz_error(name: str, file: str) -> UsageError:
    return UsageError(f"cannot load {shown(file)} for input {shown(name)}: it is a .npz archive, but each input takes "
                      f"one array. Fix: save each array on its own with numpy.save and pass --input {name}=FILE.npy.")


def _load_input(name: str, file: str) -> np.ndarray:
    """The array in the .npy file `file`, given for input `name`."""
    path = Path(file)
    try:
        st = path.stat()
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot load {shown(file)} for input {shown(name)}: {getattr(e, 'strerror', None) or e}. "
                         "Fix: pass the path of an existing, readable .npy file.") from e
    not_regular = UsageError(f"cannot load {shown(file)} for input {shown(name)}: not a regular file. "
                             "Fix: pass the path of a .npy file saved with numpy.save.")
    if not stat.S_ISREG(st.st_mode):
        raise not_regular
    if path.suffix.lower() == ".npz":
        raise _npz_error(name, file)
    try:
        with regular(path) as f:  # the file checked is the file read: replaced by a FIFO since, it is refused
            value = _read_npy(f, name, file)
    except NotRegular:
        raise not_regular from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, SyntaxError, tokenize.TokenError) as e:  # the last
        # two from a header NumPy cannot parse
        if isinstance(e, OSError) and e.errno is not None:  # the file could not be read at all: no word on its contents
            raise UsageError(f"cannot read {shown(file)} for input {shown(name)}: {e.strerror}. Fix: make the file "
                             "readable by this user (chmod u+r), or pass another.") from e
        why = ("it holds Python objects (dtype object), which no buffer can hold" if "allow_pickle" in str(e) else
               _one_line(e))
        raise UsageError(f"cannot load {shown(file)} for input {shown(name)}: not a .npy array ({why}). "
                         "Fix: pass a .npy file of numbers saved with numpy.save.") from e
    return value


def _read_npy(f, name: str, file: str) -> np.ndarray:
    """The array in the open .npy file `f`, given for input `name` as `file`."""
    head = f.read(6)
    sizes = _npy_sizes(f) if head == b"\x93NUMPY" else None
    if head[:4] != b"PK\x03\x04" and head != b"\x93NUMPY":  # np.load would try it as a pickle
        raise UsageError(f"cannot load {shown(file)} for input {shown(name)}: not a .npy file ("
                         f"{'it is empty' if not head else 'it does not begin with the .npy signature'}). "
                         "Fix: pass a .npy file saved with numpy.save.")
    if sizes is not None and sizes[0] != sizes[1]:  # np.load would allocate what the header claims first, or
        #                                           read that much and leave the rest unread without a word
        how = "is cut short" if sizes[0] > sizes[1] else "has data past the array"
        raise UsageError(f"cannot load {shown(file)} for input {shown(name)}: not a .npy array (its header claims "
                         f"{sizes[0]:,} bytes of data, the file holds {sizes[1]:,}). Fix: pass a whole .npy "
                         f"file saved with numpy.save (this one {how}, or its header was altered).")
    f.seek(0)
    value = np.load(f, allow_pickle=False)
    if not isinstance(value, np.ndarray):  # np.load opens any zip as an archive, whatever its name
        close = getattr(value, "close", None)
        if close is not None:
            close()
        raise _npz_error(name, file)
    return value


def _npy_sizes(f) -> tuple[int, int] | None:
    """(bytes of data the .npy header of `f` claims, bytes after that header), None where the header
    does not fix the size (a pickled object array, a header version NumPy has no public reader of)."""
    f.seek(0)
    fmt = np.lib.format
    read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0,  # 3.0 is 2.0's layout, its
            (3, 0): fmt.read_array_header_2_0}.get(fmt.read_magic(f))  # header UTF-8: sizes read alike from it
    if read is None:
        return None
    shape, _, dtype = read(f)
    if any(d < 0 for d in shape):
        raise ValueError(f"its header claims the shape {shape}, a negative size")
    if dtype.hasobject:
        return None
    return math.prod(shape) * dtype.itemsize, os.fstat(f.fileno()).st_size - f.tell()


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link loop"))


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "a regular file")


def _dangling(path: Path) -> str:
    """What a symbolic link that leads to no file is."""
    try:
        os.stat(path)
    except OSError as e:
        return "a symbolic link loop" if e.errno == errno.ELOOP else "a broken symbolic link"
    return "a broken symbolic link"


def _target(path: Path) -> tuple[Path, os.stat_result | None]:
    """Where writing `path` lands (for a symbolic link, the file it leads to), and that file's lstat
    (None while it does not exist)."""
    real = Path(os.path.realpath(path)) if os.path.islink(path) else path
    try:
        return real, os.lstat(real)
    except FileNotFoundError:
        return real, None


def _identity(path: Path | str) -> tuple:
    """What tells two paths to one file apart: device and inode when it exists, else the resolved path."""
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except (OSError, ValueError):
        return (os.path.realpath(path),)


def _prepare_dir(directory: Path, flag: str, arg: str, targets: dict[str, Path], reads: dict[str, str]) -> list[Path]:
    """Create `directory` (with parents) if missing and prove it writable; return the directories
    created, deepest last. Each of `targets` (by what it holds) must be a regular file or not there
    yet (a symbolic link to one, or to a writable place, is followed), no two the same file, and
    none a file of `reads` (by what it is) that the command reads."""
    created: list[Path] = []
    try:
        existing = directory
        while not os.path.lexists(existing):
            created.insert(0, existing)
            existing = existing.parent
        if not existing.is_dir():
            kind = _kind(os.stat(existing).st_mode) if os.path.exists(existing) else _dangling(existing)
            if existing == directory:
                fix = ("name a directory for the outputs (a missing one is created), e.g. --out results"
                       if flag == "--out" else "put the file in a directory, e.g. -o kernels/k.ptx")
                raise UsageError(f"{flag} {arg}: {existing} is {kind}, not a directory. Fix: {fix}.")
            raise UsageError(f"{flag} {arg}: {existing} is {kind}, not a directory, so {directory} cannot be made "
                             "there. Fix: choose a path whose parents are directories.")
        for i, d in enumerate(created):
            try:
                d.mkdir()
            except BaseException:
                del created[i:]
                raise
        _probe(directory)
        seen: dict[tuple, Path] = {}
        for what, t in targets.items():
            real, st = _target(t)
            via = f" (a symbolic link to {real})" if real != t else ""
            if st is not None and stat.S_ISDIR(st.st_mode):
                other = ("choose another --out directory (each result is named for its buffer, NAME.npy)"
                         if flag == "--out" else "choose another file name")
                raise UsageError(f"{flag}: {t}{via} is a directory, so the result cannot be written there. "
                                 f"Fix: {other}.")
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise UsageError(f"{flag}: {t}{via} is {_kind(st.st_mode)}, not a regular file; results are written "
                                 "whole to a new file renamed into place, which would replace it. Fix: give the "
                                 "path of a regular file, or of one not there yet.")
            if via and _identity(real.parent) != _identity(directory):
                try:
                    _probe(real.parent)
                except OSError as e:
                    raise UsageError(f"{flag}: {t}{via} cannot be written ({e.strerror or e}). Fix: point the link "
                                     "into a directory you can write to, or give another path.") from None
            key = _identity(real)
            for read, path in reads.items():
                if key == _identity(path):
                    fix = ("choose another output name, e.g. -o kernels/k.ptx (the manifest goes to that name with "
                           ".json added)" if flag == "-o" else f"choose another --out directory, or copy {path} "
                           "elsewhere and read that")
                    raise UsageError(f"{flag} {arg}: {what} would be written to {t}{via}, which is {read} "
                                     f"({path}) and would be overwritten. Fix: {fix}.")
            if key in seen:
                raise UsageError(f"{flag} {arg}: {seen[key]} and {t}{via} are one file, and both are written. "
                                 "Fix: remove that symbolic link, or choose another output name.")
            seen[key] = t
    except (OSError, ValueError) as e:
        _remove_dirs(created)
        if getattr(e, "errno", None) == errno.ENAMETOOLONG:  # the directory is fine: a name in it is too long
            fix = ("name the program's buffers shorter: each result is written as NAME.npy, and a file name is at "
                   "most 255 bytes" if flag == "--out" else "choose a shorter file name (the manifest adds .json to "
                   "it; a file name is at most 255 bytes)")
            raise UsageError(f"{flag} {arg}: a file name there is too long ({e.strerror}). Fix: {fix}.") from e
        raise UsageError(f"{flag} {arg}: cannot write there ({getattr(e, 'strerror', None) or e}). "
                         "Fix: choose a directory you can write to.") from e
    except BaseException:
        _remove_dirs(created)
        raise
    return created


def _probe(directory: Path) -> None:
    """Raise OSError unless a file can be made in `directory`."""
    fd, probe = tempfile.mkstemp(dir=directory, prefix=".vyre-numba-probe-")
    os.close(fd)
    os.unlink(probe)


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            return


def _write_all(files: list[tuple[Path, Callable]]) -> None:
    """`files.write_all` (every (path, write(file)) as one set, or none), its failures said as
    OutputError with the fix."""
    try:
        write_all(files)
    except (NotRegular, IsADirectoryError) as e:  # it changed since _prepare_dir looked
        path, mode = (e.path, e.mode) if isinstance(e, NotRegular) else (e.filename, stat.S_IFDIR)
        raise OutputError(f"cannot write {path}: it is now {_kind(mode)}, not a regular file. Fix: give the path of "
                          "a regular file, or of one not there yet, then run again.") from None
    except OSError as e:
        kept = "; no file was replaced" if not e.replaced else \
            f"; {', '.join(map(str, e.replaced))} already replaced, the others left as they were"
        raise OutputError(f"cannot write {e.written}: {e.strerror or e}{kept}. "
                          "Fix: free space or choose another output location, then run again.") from e


# ---- commands -----------------------------------------------------------------------------------

def cmd_run(args: argparse.Namespace) -> int:
    """Run a program on the best backend with .npy inputs; write outputs as .npy files."""
    grid = _check_grid(args.grid)
    if not 1 <= args.iterations <= 2**31 - 1:
        raise UsageError(f"--iterations {args.iterations} is not a count from 1 to 2**31 - 1. Fix: pass --iterations "
                         "1 or more, within that bound.")
    if not args.out.strip():
        raise UsageError("--out is empty. Fix: name a directory for the outputs, e.g. --out results.")
    files = _parse_input_args(args.input)
    sizes = _parse_size_args(args.size)
    _check_settings()
    program = _load_program(args.program)
    _check_input_names(program, files)
    _check_sizes(program, sizes)
    if "grid_sync" in program.capabilities and not args.cooperative:
        raise UsageError(f"program {shown(program.name)} has barrier('grid'), which needs every workgroup resident at "
                         "once. Fix: pass --cooperative (on a GPU the grid must then fit on the device at once).")
    inputs = {name: _load_input(name, file) for name, file in files.items()}
    _check_byte_ranges(program, inputs, sizes)
    backend = _backend(args.backend)
    config = DispatchConfig(grid=grid, fixpoint_iterations=args.iterations, cooperative=args.cooperative)
    out_dir = Path(args.out)
    targets = {f"output {b.name!r}": out_dir / f"{b.name}.npy" for b in program.outputs}
    reads = {"the program": args.program, **{f"the file of --input {n}": f for n, f in files.items()}}
    created = _prepare_dir(out_dir, "--out", args.out, targets, reads)
    try:
        t0 = time.perf_counter()
        outputs = backend.dispatch(program, inputs, config, sizes=sizes)
        dt = time.perf_counter() - t0
    except DispatchError as e:  # about an input array: the Python call's fix, said for a file
        _remove_dirs(created)
        if not any(f"{n!r}" in str(e) for n in files):
            raise
        raise UsageError(f"{type(e).__name__}: {e} On the command line an input is a .npy file: load it (x = "
                         "numpy.load(path)), make the array the fix describes, and save it again (numpy.save(path, "
                         "x)).") from None
    except BaseException:
        _remove_dirs(created)
        raise
    _write_all([(out_dir / f"{decl.name}.npy", lambda f, arr=arr: np.save(f, arr))
                for decl, arr in zip(program.outputs, outputs)])  # all of them, or none
    for decl, arr in zip(program.outputs, outputs):
        print(f"{decl.name}: {arr.size} x {decl.dtype} -> {out_dir / f'{decl.name}.npy'}")
    print(f"ran {shown(program.name)} on {backend.name} in {dt * 1e3:.2f} ms")
    return EXIT_OK


def cmd_emit(args: argparse.Namespace) -> int:
    """Write a program's PTX (or assembled cubin) and a JSON manifest of its kernel ABI."""
    from .ptx.assembler import MIN_ASSEMBLE_SM as min_sm, assemble, externs
    from .ptx.emitter import PTX_VERSION, abi, emit

    device = None
    if args.device is not None:
        from .ptx.devices import OTHER_GPU, profile

        try:
            device = profile(args.device)
        except VyreError as e:  # the Python call's fix, said with this command's options
            raise UsageError(str(e).replace(OTHER_GPU, "(or --sm with the compute capability, which checks no "
                                            "device limits)"))
        if args.sm is not None and args.sm != device.sm:
            raise UsageError(f"--sm {args.sm} and --device {args.device} (sm_{device.sm}) disagree. Fix: pass one of them.")
        args.sm = device.sm
    if args.sm is None:
        args.sm = 90
    if args.sm not in PTX_VERSION:
        raise UsageError(f"--sm {args.sm} is not a target the emitter knows ({', '.join(map(str, PTX_VERSION))}). "
                         "Fix: pass one of those, e.g. the device's compute capability (--sm 90).")
    if args.cubin and args.sm < min_sm:
        newer = (f"name a device of sm_{min_sm} or newer with --device" if device is not None else
                 f"pass --sm {min_sm} or newer")
        raise UsageError(f"--cubin cannot assemble for sm_{args.sm}: nvJitLink needs sm_{min_sm} or newer. "
                         f"Fix: drop --cubin to write sm_{args.sm} PTX, or {newer}.")
    program = _load_program(args.program)
    if "grid_sync" in program.capabilities and not args.cooperative:
        raise UsageError(f"program {shown(program.name)} has barrier('grid'), which needs a cooperative launch. "
                         "Fix: pass --cooperative.")
    report = None
    if device is not None:
        from .errors import LaunchError
        from .ptx.devices import check

        report = check(program, device, cooperative=args.cooperative)
        print(report.summary())
        if report.problems:
            raise LaunchError(f"{shown(program.name)} does not fit {device.name}: " + " ".join(report.problems))
    if os.path.basename(args.output) in ("", ".", ".."):
        raise UsageError(f"-o {args.output}: names a directory, not the file to write. "
                         "Fix: give a file name, such as kernels/inc.ptx.")
    out = Path(args.output)
    man_path = out.with_name(out.name + ".json") if out.name else out
    created = _prepare_dir(out.parent, "-o", args.output, {"the code": out, "the manifest": man_path},
                           {"the program": args.program})
    try:
        text = emit(program, sm=args.sm, cooperative=args.cooperative)
        code = assemble(text, sm=args.sm) if args.cubin else text.encode()
    except BaseException as e:
        _remove_dirs(created)
        if hasattr(e, "unknown_sm"):
            raise UsageError(f"--cubin --sm {args.sm}: {e.unknown_sm}. Fix: pass the --sm of the GPU it will run on "
                             f"(one this CUDA's nvJitLink knows), or drop --cubin to write sm_{args.sm} PTX.") from None
        raise
    manifest = abi(program).to_dict()
    needs = [] if args.cubin else sorted(externs(text))  # PTX that calls what another module defines
    manifest.update(sm=args.sm, format="cubin" if args.cubin else "ptx", digest=program.digest(), links=needs,
                    buffers=[{"name": b.name, "binding": b.binding, "dtype": b.dtype.value, "access": b.access.value,
                              "count": b.count, "role": b.role.value} for b in program.bound_buffers])
    if report is not None:
        manifest["device"] = {"name": device.name, "registers": report.registers, "shared_bytes": report.shared_bytes,
                              "workgroups_per_sm": report.blocks_per_sm,
                              "max_cooperative_grid": report.max_cooperative_grid}
    _write_all([(out, lambda f: f.write(code)),  # a pair: a manifest never describes other code
                (man_path, lambda f: f.write((json.dumps(manifest, indent=2) + "\n").encode()))])
    print(f"wrote {out} and {man_path}")
    return EXIT_OK


def demo_program() -> ir.Program:
    """y[i] = a * x[i] + y[i] over f32, with the bounds check every kernel needs."""
    i = ir.var("i")
    return ir.Program(
        [ir.BufferDecl.uniform("a", 0, "f32", 1), ir.BufferDecl.read("x", 1, "f32"),
         ir.BufferDecl.read_write("y", 2, "f32")],
        256,
        [ir.let("i", ir.gid(0)),
         ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.fma(ir.load("a", 0), ir.load("x", i), ir.load("y", i)))])],
        name="saxpy",
    )


def _timed(fn: Callable, repeat: int = 2):
    """(last result, seconds of the last of `repeat` calls): the first call compiles (on a GPU) and warms."""
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
    return out, dt


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def cmd_demo(args: argparse.Namespace) -> int:
    """A short tour: a program built, validated, shown as PTX and run against the reference; connected
    components and an e-graph closure on generated data; a table of results and timings."""
    from . import egraph, graph
    from .egraph.workload import arithmetic
    from .graph.generators import grid, rmat
    from .ptx import emit

    n = args.n
    if not 1 <= n <= MAX_AXIS:
        raise UsageError(f"-n {n} is not an element count from 1 to 2**32-1. Fix: pass e.g. -n 1000000.")
    _check_settings()  # a bad one said before the first step, not at the sixth
    backend = _backend(args.backend)
    gpu = backend.name == "cuda"
    if not gpu:
        from .reference import MAX_INVOCATIONS

        if n > MAX_INVOCATIONS:  # said before any step runs, not at the third
            raise UsageError(f"-n {n} is more than the reference backend runs in one launch ({MAX_INVOCATIONS}). "
                             f"Fix: pass -n {MAX_INVOCATIONS} or less here, or run on a GPU.")
    where = "the GPU" if gpu else "the CPU: no usable GPU here, so every step runs the NumPy reference backend"
    print(f"vyre-numba demo on the {backend.name!r} backend, on {where} "
          f"(available: {', '.join(available_backends())})\n")
    rows: list[tuple[str, str, str, str, bool]] = []

    p = demo_program()
    ir.check(p)
    print("1. A program in the vyre IR, validated:\n")
    print("   " + str(p).replace("\n", "\n   "))
    print(f"\n   digest {p.digest()[:16]}..., {len(p.to_json())} bytes of canonical JSON\n")
    sm = backend.caps.sm if gpu else 90
    text = emit(p, sm=sm)
    body = [line.strip() for line in text.splitlines() if "fma" in line or "ld.global" in line][:4]
    print(f"2. Its PTX for sm_{sm}{'' if gpu else ' (emitted here; the GPU would assemble and run it)'}, "
          f"{len(text.splitlines())} lines, a few of them:\n   " + "\n   ".join(body) + "\n")

    rng = np.random.default_rng(0)
    a = np.array([2.5], np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    t0 = time.perf_counter()
    backend.dispatch(p, [a, x, y])
    first = time.perf_counter() - t0
    (out,), warm = _timed(lambda: backend.dispatch(p, [a, x, y]), 1)
    (expect,) = get_backend("reference").dispatch(p, [a, x, y]) if gpu else (fma_f32(a[0], x, y),)
    same = np.array_equal(out.view(np.uint32), expect.view(np.uint32))
    first_is = "includes compiling" if gpu else "includes validating; the reference backend interprets, nothing compiles"
    against = "the reference interpreter" if gpu else "NumPy's a*x + y, rounded once"
    print(f"3. Ran saxpy over {n:,} elements: first call {_ms(first)} ({first_is}), next {_ms(warm)}; "
          f"bit-identical to {against}: {same}\n")
    rows.append(("saxpy", f"{n:,} f32", "y = a*x + y", _ms(warm), same))

    print("4. Mistakes end in a clear error (here: float64 data that f32 cannot hold exactly):")
    try:
        backend.dispatch(p, [a, x.astype(np.float64) / 3, y])
        refused = False
    except VyreError as e:
        refused = "Fix:" in str(e)
        print(f"   {type(e).__name__}: {e}\n")
    rows.append(("a mistake", "f64 into f32", "VyreError with a Fix", "-", refused))

    print("5. Connected components (label = smallest vertex of the component):")
    side, scale = (2048, 20) if gpu else (256, 14)
    for name, (ip, ix) in ((f"road-like grid {side}x{side}", grid(side, side, keep=0.55, seed=1)),
                           (f"R-MAT 2^{scale}", rmat(scale, 1 << (scale + 2), seed=1))):
        labels, dt = _timed(lambda: graph.connected_components(ip, ix, backend=backend, symmetric=True))
        ok = _components_ok(ip, ix, labels, gpu)
        k = int(np.count_nonzero(labels == np.arange(labels.size)))
        print(f"   {name}: {ip.size - 1:,} vertices, {ix.size:,} entries -> {k:,} components in {_ms(dt)}"
              f" ({'equal to the NumPy twin' if gpu else 'every edge inside one component'}: {ok})")
        rows.append(("components", f"{ip.size - 1:,} vertices", f"{k:,} components", _ms(dt), ok))

    print("\n6. E-graph congruence closure (the shared benchmark's arithmetic workload):")
    size = 1 << (18 if gpu else 14)
    nodes, unions = arithmetic(size)

    def closure():
        g = egraph.EGraph.from_arrays(*nodes, backend=backend)
        g.rebuild()
        return g, egraph.congruence_closure(g, unions)

    (g, res), dt = _timed(closure)
    ok = _closure_ok(g, res, nodes, unions, gpu)
    print(f"   {size:,} e-nodes, {len(unions):,} unions -> {res.classes_before:,} classes became "
          f"{res.classes_after:,} in {res.rounds} rounds; build and closure {_ms(dt)}, closure alone "
          f"{_ms(res.seconds)} ({'equal to the NumPy twin' if gpu else 'no congruent classes left apart'}: {ok})")
    rows.append(("e-graph closure", f"{size:,} e-nodes", f"{res.merged:,} classes merged", _ms(res.seconds), ok))

    print(f"\n{'step':16s} {'size':18s} {'result':24s} {'time':>10s}  check")
    for step, sz, result, t, good in rows:
        print(f"{step:16s} {sz:18s} {result:24s} {t:>10s}  {'ok' if good else 'FAILED'}")
    return EXIT_OK if all(r[-1] for r in rows) else EXIT_FAILURE


def fma_f32(a: np.float32, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """a * x + y of float32s rounded once to float32, computed apart from the reference (for the
    demo's check on the CPU): the product is exact in float64, the sum's error exact by TwoSum, and
    a sum on a float32 tie moves one float64 step toward its error before the one rounding."""
    prod = np.float64(a) * x.astype(np.float64)
    y64 = y.astype(np.float64)
    s = prod + y64
    t = s - prod
    err = (prod - (s - t)) + (y64 - t)
    return np.where(err != 0, np.nextafter(s, np.copysign(np.inf, err)), s).astype(np.float32)


def _components_ok(indptr, indices, labels, against_twin: bool) -> bool:
    """On the GPU: the labels equal the NumPy twin's. On the CPU, where the twin made them: every
    edge joins two vertices of one label, and each label is the smallest vertex carrying it."""
    from .graph import components_numpy
    from .graph.csr import check_csr

    labels = np.asarray(labels)
    if against_twin:
        twin, _ = components_numpy(check_csr(indptr, indices))
        return bool(np.array_equal(labels, twin))
    src = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    smallest = np.full(labels.size, labels.size, np.int64)
    np.minimum.at(smallest, labels, np.arange(labels.size))
    return bool(np.array_equal(labels[src], labels[indices]) and np.array_equal(smallest[labels], labels))


def _closure_ok(g, res, nodes, unions, against_twin: bool) -> bool:
    """On the GPU: the classes equal the NumPy twin's. On the CPU: no two rows with equal operator
    and children remain in different classes, and every union's ends share a class."""
    from . import egraph

    if against_twin:
        twin = egraph.congruence_closure(egraph.EGraph.from_arrays(*nodes, backend="reference"), unions)
        return bool(np.array_equal(res.eclass, twin.eclass))
    return egraph.structural_equivalences(g).size == 0 and bool(np.all(res.eclass[unions[:, 0]] ==
                                                                        res.eclass[unions[:, 1]]))


def _bench_dir(given: str | None) -> Path:
    """The benchmark folder: `--dir`, else ./bench, else the source checkout's bench/."""
    if given is not None and not given.strip():  # "" is not "not given": it would fall back to the checkout's
        raise UsageError("--dir is empty. Fix: name the bench/ folder, e.g. --dir bench, or leave --dir out.")
    places = [Path(given)] if given else [Path.cwd() / "bench", Path(__file__).resolve().parents[1] / "bench"]
    for d in places:
        if (d / "suite.py").is_file():
            return d.resolve()
    raise UsageError(f"no benchmark suite (bench/suite.py) in {' or '.join(str(d) for d in places)}; the "
                     "benchmarks live in the source checkout, not in the installed package. Fix: run it from a "
                     "vyre-numba checkout (git clone ...; cd vyre-numba), or pass --dir PATH/TO/bench.")


def _tty(stream) -> bool:
    """Whether `stream` is a terminal (a bar redrawn in place; in a file or a pipe, its frames pile up)."""
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):  # replaced or closed
        return False


def _check_bench_outputs(here: Path) -> None:
    """Refuse a bench folder whose outputs (RESULTS.md, plots/) could not be written."""
    md, plots = here / "RESULTS.md", here / "plots"
    bad = []
    if md.exists() and not md.is_file():
        bad.append(f"{md} is not a file")
    if plots.exists() and not plots.is_dir():
        bad.append(f"{plots} is not a folder")
    bad += [f"{p} cannot be written by this user" for p in (md, plots, here)
            if p.exists() and not os.access(p, os.W_OK)]
    if bad:
        raise UsageError(f"the benchmarks' results go to {md} and {plots}/, but {'; '.join(bad)}. Fix: move that "
                         "away (or let this user write there), or point --dir at another copy of bench/.")


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark suite against its peers; write bench/RESULTS.md's section for this device and plots."""
    here = _bench_dir(args.dir)
    try:
        import matplotlib  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError as e:
        raise UsageError(f"the bench command draws plots with matplotlib and shows progress with tqdm ({e}). "
                         "Fix: pip install 'vyre-numba[notebook]'.") from None
    spec = importlib.util.spec_from_file_location("vyre_bench_suite", here / "suite.py")
    suite = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(suite)
    except (Exception, SystemExit) as e:  # the folder's own code: the user's to mend, not a bug of this command
        raise UsageError(f"{here / 'suite.py'} does not load ({type(e).__name__}: {shown(str(e), 120)}). Fix: "
                         "point --dir at a vyre-numba bench/ folder, or mend that file.") from None
    if not (callable(getattr(suite, "run", None)) and callable(getattr(suite, "report", None))):
        raise UsageError(f"{here / 'suite.py'} has no run() and report(); it is not the benchmark suite. Fix: point "
                         "--dir at a vyre-numba bench/ folder.")
    _check_bench_outputs(here)  # before the benchmarks' minutes, not after
    res = suite.run(args.quick, progress=not args.no_progress and _tty(sys.stderr), here=here)  # no frames in logs
    if res and not any("json" in r for r in res.values()) and any("failed" in r for r in res.values()):
        for k, r in res.items():
            print(f"{k} failed:\n{r['failed']}" if "failed" in r else f"{k} not run: {r['skipped']}", file=sys.stderr)
        print(f"no benchmark ran to the end: {here / 'RESULTS.md'} and the plots are left as they were.",
              file=sys.stderr)
        return EXIT_FAILURE
    try:
        md, plots = suite.report(res, args.quick, here=here)
    except OSError as e:  # after the run: nothing of it was written (report writes all or nothing)
        raise OutputError(f"the results could not be written, so none were ({e}). Fix: make {here / 'RESULTS.md'} "
                          f"a writable file and {here / 'plots'} and the folders in it writable folders, then run "
                          "again.") from None
    for name, r in res.items():
        state = "ok" if "json" in r else ("not run: " + r["skipped"].split(" Fix: ")[0]) if "skipped" in r else "FAILED"
        print(f"  {name:18s} {state}")
    print(f"wrote {md}" + "".join(f"\n      {p}" for p in plots))
    failed = [k for k, r in res.items() if "failed" in r]
    for k in failed:
        print(f"{k} failed:\n{res[k]['failed']}", file=sys.stderr)
    return EXIT_FAILURE if failed else EXIT_OK


def _whole(text: str) -> int:
    """An argparse type: ASCII digits (and a sign) only, the rule of --size, where int() also takes
    other scripts' digits and underscores (`--grid ٣`, `--iterations 1_0`)."""
    if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", text):
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (digits 0-9 only)")
    return int(text)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors end in a fix as every other error does, and which
    takes options only as spelt (`--ou` is not `--out`: an abbreviation would change meaning the
    day an option sharing its start is added)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.print_usage(sys.stderr)
        bad = re.search(r"invalid choice: '?([^'\s]*)'?", message)
        if bad:  # a misspelt command or choice: the nearest one named (the choices from the parser, not the text)
            message += did_you_mean(bad[1], [c for a in self._actions if a.choices for c in a.choices])
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message.rstrip('.')}. Fix: see `{self.prog} --help` for the "
                              "commands and arguments it takes.\n")

    def refuse_unknown(self, extra: list[str]) -> None:
        """The usage error of arguments this (sub)command does not take, naming the nearest option."""
        # compared without the dashes every option shares
        options = {o.lstrip("-"): o for a in self._actions for o in a.option_strings}
        near = ""
        for x in (x for x in extra if x.startswith("-")):
            close = difflib.get_close_matches(x.split("=")[0].lstrip("-"), list(options), n=1)
            if close:
                near = f" (did you mean {options[close[0]]}?)"
                break
        self.error(f"unrecognized arguments: {clip(' '.join(extra), 120)}{near}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `vyre-numba` command."""
    from . import __version__

    parser = _Parser(prog="vyre-numba", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", title="commands")
    parser.commands = sub.choices  # name -> its parser, whose usage and help an unknown argument is told with
    sub.add_parser("info", help=cmd_info.__doc__).set_defaults(fn=cmd_info)
    run = sub.add_parser("run", help=cmd_run.__doc__)
    run.add_argument("program", help="a JSON file holding the program (the text of Program.to_json())")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                     help="one .npy array per input buffer, each name once")
    run.add_argument("--out", required=True, metavar="DIR", help="directory for NAME.npy outputs (created if missing)")
    run.add_argument("--backend", choices=["cuda", "reference"],
                     help="where to run (default: the best usable here, cuda where a GPU is)")
    run.add_argument("--grid", type=_whole, nargs="+", metavar="N",
                     help="1 to 3 workgroup counts (0 is an empty launch)")
    run.add_argument("--iterations", type=_whole, default=1, help="times to run the program (>= 1)")
    run.add_argument("--size", action="append", metavar="NAME=N",
                     help="element count of an output-only buffer declared without one (default: the largest input's)")
    run.add_argument("--cooperative", action="store_true",
                     help="launch every workgroup resident at once (what barrier('grid') needs)")
    run.set_defaults(fn=cmd_run)
    emit = sub.add_parser("emit", help=cmd_emit.__doc__)
    emit.add_argument("program", help="a JSON file holding the program (the text of Program.to_json())")
    emit.add_argument("--sm", type=_whole, default=None, help="target compute capability, e.g. 80 or 90 (default 90, "
                      "or the --device's)")
    emit.add_argument("--device", default=None, metavar="NAME",
                      help="check registers, shared memory and the workgroup against a named GPU's limits without it "
                           "(h100, h200, a100, a10, l4, l40s, rtx4090, t4, v100); sets --sm")
    emit.add_argument("--cubin", action="store_true",
                      help="assemble a cubin with nvJitLink (no GPU needed) instead of writing PTX text")
    emit.add_argument("--cooperative", action="store_true",
                      help="emit for a cooperative launch (what barrier('grid') needs)")
    emit.add_argument("-o", "--output", required=True, metavar="FILE",
                      help="PTX or cubin file (its directory is created if missing); FILE.json gets the manifest")
    emit.set_defaults(fn=cmd_emit)
    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--backend", choices=["cuda", "reference"],
                      help="where to run (default: the best usable here, cuda where a GPU is)")
    demo.add_argument("-n", type=_whole, default=1 << 20, help="elements (>= 1; default 1048576)")
    demo.set_defaults(fn=cmd_demo)
    bench = sub.add_parser("bench", help=cmd_bench.__doc__)
    bench.add_argument("--quick", action="store_true", help="smaller sizes, for a first look")
    bench.add_argument("--dir", metavar="PATH", help="the bench/ folder (default: ./bench or the source checkout's)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.set_defaults(fn=cmd_bench)
    return parser


def _debug_setting() -> str | None:
    """What is wrong with $VYRE_NUMBA_DEBUG (1/true/yes/on or 0/false/no/off, any case, or unset),
    or None."""
    value = os.environ.get(DEBUG_ENV, "")
    if value.strip().lower() in DEBUG_OFF + DEBUG_ON:
        return None
    return f"${DEBUG_ENV}={shown(value, 40)} is not a setting, so it is read as on. Fix: set it to 1 or 0, or unset it."


def _debug() -> bool:
    """Whether $VYRE_NUMBA_DEBUG asks for tracebacks; a value that is not a setting is said on
    stderr and read as on (a debugging aid should not hide the error it was set to show)."""
    said = _debug_setting()
    if said is not None:
        print(f"warning: {said}", file=sys.stderr)
    return errors._debugging()


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def main(argv: list[str] | None = None) -> int:
    """Run the `vyre-numba` command with `argv` (default: sys.argv[1:]) and return its exit status."""
    stdout = sys.stdout
    if stdout is None:  # started with standard output closed (`>&-`): refused before any work
        print("error: standard output is closed, so nothing this command says could be seen. Fix: run it with "
              "standard output open (send it to a file or >/dev/null instead of closing it).", file=sys.stderr)
        return EXIT_FAILURE
    sys.stdout = _Stdout(stdout)
    try:
        with warnings.catch_warnings():  # Numba's own warning of a setting it cannot read carries a traceback;
            warnings.filterwarnings("ignore", "Environment variable 'NUMBA_ENABLE_CUDASIM'", RuntimeWarning)  # the
            # settings say that one; Numba's warnings of its other variables stay, as vyre-numba reads none of them
            return _main(argv)
    finally:
        sys.stdout = stdout


def _main(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
        try:
            args, extra = parser.parse_known_args(argv)
            if extra:  # told by the parser of the command they follow: its usage, its --help, its nearest option
                given = list(sys.argv[1:] if argv is None else argv)
                cmd = getattr(args, "cmd", None)
                first = given.index(extra[0]) if extra[0] in given else len(given)
                owner = parser.commands.get(cmd) if cmd in given and first > given.index(cmd) else None
                (owner or parser).refuse_unknown(extra)
        except SystemExit:
            sys.stdout.flush()  # --help and --version only filled the buffer: a failure to write shows here
            raise
        if getattr(args, "fn", None) is None:
            parser.error("no command given; the commands are info, run, emit, demo and bench")
        status = args.fn(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers, not at interpreter exit
        return status
    except UsageError as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except OutputError as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        if isinstance(e, _StdoutError):
            _silence_stdout()
        return EXIT_FAILURE
    except MemoryError as e:  # a HostMemoryError too: the work ran out of memory, no usage was wrong
        if _debug():
            traceback.print_exc()
        said = f"{type(e).__name__}: {e}" if isinstance(e, VyreError) else "out of host memory. Fix: use smaller " \
            "inputs (for demo, a smaller -n)."
        print(f"error: {said}", file=sys.stderr)
        return EXIT_FAILURE
    except VyreError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILURE if e.keeps_frames else EXIT_USAGE  # a failure inside (the GPU's, the toolchain's, a
        # template's), as the driver's own error below: nothing in the command line was wrong
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C); no file is left half-written.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout's reader went away (`| head`): end quietly
        _silence_stdout()
        return EXIT_FAILURE
    except Exception as e:
        if _debug():
            traceback.print_exc()
        said = driver_error("the command", e)  # the GPU's: out of memory, a fault; no bug of this command's
        if said is not None:
            print(f"error: {type(said).__name__}: {_one_line(said)}", file=sys.stderr)  # a module's log spans lines
            return EXIT_FAILURE
        print(f"error: internal error, a bug in vyre-numba: {type(e).__name__}: {clip(_one_line(e), 500)}. "
              f"Fix: please report it with the command line; run with {DEBUG_ENV}=1 for the traceback.",
              file=sys.stderr)
        return EXIT_FAILURE


def _silence_stdout() -> None:
    """Point standard output at the null device, so what is still buffered for it fails no more at exit."""
    try:
        out_fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out_fd)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
