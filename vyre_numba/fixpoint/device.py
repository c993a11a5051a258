"""The fixpoint runner on the GPU: the step (a Numba function compiled to a C-ABI device function, or
a vyre Program the emitter renders as one) linked with the fixpoint and grid-barrier templates, and
run in one of three modes."""
from __future__ import annotations

import hashlib
import math
import threading
import weakref
from typing import Any, Callable

import numpy as np

from ..backend import interface_dtype
from ..compaction.select import to_compile
from ..errors import DeviceMemoryError, DispatchError, UnsupportedError, a_type, native, numba_reason, shown
from ..gpu.launch import KernelLaunch, LaunchShape, validate_cooperative
from ..ir import Program
from ..lru import LRUCache
from ..ptx import templates
from ..ptx.emitter import PTX_VERSION
from .runner import (_CONVERGED, _CTL_WORDS, _ERROR, _ROUNDS, STEP_CACHE, FixpointResult, _bar, check_changed_type,
                     chunks, finished, raise_barrier_timeout, read_only_written, step_key, stopped, writes_read_only)

STEP_NAME = "vyre_fixpoint_step"
ENTRIES = ("vyre_fixpoint_coop", "vyre_fixpoint_round", "vyre_fixpoint_check")
_REG = {"b32": "%ra", "b64": "%rda"}


_ARRAY_TYPES: dict = {}  # (dtype, ndim, readonly) -> Numba array type: building one costs more than a launch


def _array_type(k: int, dt: np.dtype, ndim: int, readonly: bool):
    t = _ARRAY_TYPES.get((dt, ndim, readonly))
    if t is None:
        from numba import from_dtype, types

        if not native(dt):
            raise DispatchError(f"args[{k}] is a device array of {dt}, not in this machine's byte order, which "
                                "Numba would read as native. Fix: pass it in native byte order "
                                "(cupy.ascontiguousarray(a.astype(a.dtype.newbyteorder('='))) or the like).")
        try:
            if dt.hasobject:  # Numba types it (as Python objects), which no GPU code can read
                raise TypeError
            item = from_dtype(dt)
        except Exception:  # noqa: BLE001 - Numba's NotImplementedError and kin: a type it has no form for
            raise DispatchError(f"args[{k}] is a device array of {dt}, which Numba's CUDA compiler does not take. "
                                "Fix: pass numbers (ints, floats, bools) or records of them.") from None
        t = _ARRAY_TYPES[(dt, ndim, readonly)] = types.Array(item, ndim, "C", readonly=readonly)
    return t


def _arg_kinds(args: list) -> tuple[list, list[tuple[str, Any]]]:
    """(Numba type of each step argument after the item index, the (PTX class, bits) of every
    parameter they flatten to). A device array is a Numba array in the step (indexing, `.size`,
    `cuda.atomic.*` all work; one its interface marks read-only, read-only): C ABI passes it as
    meminfo, parent, nitems, itemsize, data, then its shape and strides."""
    from numba import from_dtype, types

    kinds, params = [], []
    for k, a in enumerate(args):
        cai = getattr(a, "__cuda_array_interface__", None)
        if cai is not None:
            own, dt = getattr(a, "dtype", None), interface_dtype(cai)
            if isinstance(own, np.dtype) and own.itemsize == dt.itemsize:  # Numba's interface names a record |V<size>
                dt = own
            itemsize = dt.itemsize
            shape = tuple(int(d) for d in cai["shape"])  # () for a 0-d array: no shape or strides to pass
            strides = cai.get("strides")
            contiguous = tuple(math.prod(shape[j + 1:]) * itemsize for j in range(len(shape)))
            if strides is not None and math.prod(shape) > 1 and tuple(strides) != contiguous:
                raise DispatchError(f"args[{k}] is a non-contiguous device array. Fix: pass a contiguous copy.")
            kinds.append(_array_type(k, dt, len(shape), bool(cai["data"][1])))
            params += [("b64", 0), ("b64", 0), ("b64", math.prod(shape)), ("b64", itemsize),
                       ("b64", cai["data"][0] or 0)]
            params += [("b64", d) for d in shape] + [("b64", st) for st in contiguous]
        elif isinstance(a, np.ndarray):
            raise DispatchError(f"args[{k}] is a NumPy array, but the cuda backend runs the step on the GPU. "
                                "Fix: pass device arrays (backend.upload(x)), or use the reference backend.")
        elif isinstance(a, (bool, np.bool_)):
            kinds.append(types.boolean)
            params.append(("b32", int(a)))  # Numba passes a bool parameter as a byte in a b32 slot
        elif isinstance(a, np.generic) and a.dtype.kind in "iuf":
            if a.dtype.kind == "f" and a.dtype.itemsize not in (4, 8):
                raise DispatchError(f"args[{k}] is a {a.dtype} scalar, which the GPU step does not take. "
                                    "Fix: pass a float32 or float64 (np.float32(x)).")
            kinds.append(from_dtype(a.dtype))  # 8- and 16-bit ints travel in a b32 slot, as Numba passes them
            params.append(("b64" if a.dtype.itemsize == 8 else "b32", a))  # floats travel as their bits
        elif isinstance(a, int):
            if not -2**63 <= a < 2**64:
                raise DispatchError(f"args[{k}] = {shown(a)} is past 64 bits; the step takes int64 or uint64 numbers. "
                                    "Fix: pass a float (float(x)), or keep the value within int64 or uint64.")
            kinds.append(types.int64 if a < 2**63 else types.uint64)  # as the CPU's step reads it
            params.append(("b64", a))
        elif isinstance(a, float):
            kinds.append(types.float64)
            params.append(("b64", a))
        else:
            raise DispatchError(f"args[{k}] is {a_type(a)}; the step takes device arrays and numbers. "
                                "Fix: pass device arrays (numba, CuPy, PyTorch) or int/float scalars.")
    return kinds, params


_STEPS: LRUCache = LRUCache(STEP_CACHE)  # (step_key(step), signature, cc) -> PTX; bounded as the CPU's


def _step_ptx(step: Callable, kinds: list, cc: tuple[int, int]) -> tuple[str, str]:
    """(PTX of the step as a C-ABI device function, the PTX class of its result: b32 or b64). The
    step is typed first as written, so a float result is refused as on the CPU and a 64-bit one
    keeps its high bits (non-zero there is a change too)."""
    from numba import cuda, types
    params = (types.uint32, *kinds)
    key = (step_key(step), str(params), cc)
    got = _STEPS.get(key)
    if got is None:
        try:
            _, result = cuda.compile_ptx(step, params, device=True, cc=cc, debug=False)
            check_changed_type(result)
            wide = isinstance(result, types.Integer) and result.bitwidth > 32
            ptx, _ = cuda.compile_ptx(step, (result if wide else types.int32)(*params), device=True, abi="c",
                                      abi_info={"abi_name": STEP_NAME}, cc=cc,
                                      debug=False)  # NumPy's error model, as the CPU's steps (debug would be Python's)
        except DispatchError:
            raise
        except Exception as e:  # Numba raises many kinds; each means the step does not compile
            frozen = [f"args[{k}]" for k, t in enumerate(kinds) if getattr(t, "mutable", True) is False]
            if frozen and writes_read_only(e):
                raise DispatchError(f"{read_only_written(frozen)} (read-only as its __cuda_array_interface__ says). "
                                    "Fix: pass a writable device array.") from None
            raise DispatchError(f"the step function does not compile for the GPU ({numba_reason(e)}). Fix: write it "
                                "in Numba's CUDA subset taking (i, *args) and returning an int or bool.") from None
        got = _STEPS.put(key, (ptx, "b64" if wide else "b32"))
    return got


# How the fixpoint kernels read the step's result into %r15 (zero or not), by its PTX class.
_TAKE = {"b32": "\tld.param.b32 \t%r15, [changed];",
         "b64": "\t.reg .b64 %rdc;\n\t.reg .pred %pc;\n\tld.param.b64 \t%rdc, [changed];\n"
                "\tsetp.ne.u64 \t%pc, %rdc, 0;\n\tselp.u32 \t%r15, 1, 0, %pc;"}


def _step_args(step, args: list) -> tuple[list, list[tuple[str, Any]]]:
    """(Numba argument types, flattened parameters) of the step's arguments (see _arg_kinds)."""
    return ([], _program_params(step, args)) if isinstance(step, Program) else _arg_kinds(args)


def _program_params(program, arrays: list) -> list[tuple[str, Any]]:
    """A Program step's parameters, in its kernel ABI order: every buffer's address, then its length."""
    cais = [a.__cuda_array_interface__ for a in arrays]
    return ([("b64", cai["data"][0] or 0) for cai in cais] +
            [("b32", math.prod(cai["shape"])) for cai in cais])


_SOURCES: LRUCache = LRUCache(STEP_CACHE)  # (step, argument types, sm) -> (cache key, PTX sources)


def _module(backend, step, kinds: list, params: list) -> dict:
    sm = backend.caps.sm

    def cheap(step) -> tuple:
        return (("program", step.digest()) if isinstance(step, Program) else step_key(step), tuple(kinds),
                tuple(c for c, _ in params), sm)
    known = _SOURCES.get(cheap(step))
    if known is None:  # compiled from a snapshot of what the step reads, kept by the snapshot's key
        snap = step if isinstance(step, Program) else to_compile(step)
        known = _SOURCES.put(cheap(snap), _sources(snap, kinds, params, sm, tuple(backend.caps.compute_capability)))
    return backend.load_linked(known[0], known[1], ENTRIES)


def _sources(step, kinds: list, params: list, sm: int, cc: tuple[int, int]) -> tuple[str, list[str]]:
    """(cache key, PTX modules) of the fixpoint kernels around `step`."""
    if isinstance(step, Program):
        from ..ptx.emitter import emit_step

        step_ptx, ret = emit_step(step, sm=sm if sm in PTX_VERSION else 90, name=STEP_NAME), "b32"
    else:
        step_ptx, ret = _step_ptx(step, kinds, cc)
    nregs = max(1, len(params))
    kparams = "".join(f",\n\t.param .{c} arg{k}" for k, (c, _) in enumerate(params))
    loads = "\n".join(f"\tld.param.{c} \t{_REG[c]}{k}, [arg{k}];" for k, (c, _) in enumerate(params))
    cparams = "\n".join(f"\t.param .{c} a{k};" for k, (c, _) in enumerate(params))
    cstores = "\n".join(f"\tst.param.{c} \t[a{k}], {_REG[c]}{k};" for k, (c, _) in enumerate(params))
    cargs = "".join(f", a{k}" for k in range(len(params)))
    step_version, step_body = _module_body(step_ptx)
    version = max(PTX_VERSION.get(sm, "7.8"), step_version, key=lambda v: tuple(int(x) for x in v.split(".")))
    fix = templates.load("fixpoint", version=version, target=f"sm_{sm}", step=STEP_NAME, step_decl=step_body,
                         kparams=kparams, loads=loads, cparams=cparams, cstores=cstores, cargs=cargs, nregs=nregs,
                         ret=ret, take=_TAKE[ret])
    barrier = templates.load("grid_barrier", version=PTX_VERSION.get(sm, "7.8"), target=f"sm_{sm}")
    return "fixpoint-" + hashlib.sha256((fix + barrier).encode()).hexdigest()[:24], [fix, barrier]


def _module_body(ptx: str) -> tuple[str, str]:
    """(PTX ISA version, text after the module header) of the step's module, which is pasted into
    the fixpoint module rather than linked beside it. (ptxas, in nvJitLink's relocatable mode,
    still calls it rather than inlining it: measured, see bench/RESULTS.md.)"""
    version, body = "6.0", []
    for line in ptx.splitlines():
        word = line.strip().split(" ")[0] if line.strip() else ""
        if word == ".version":
            version = line.split()[1]
        elif word not in (".target", ".address_size"):
            body.append(line)
    return version, "\n".join(body)


def run(backend, step: Callable, n: int, args: list, max_rounds: int, mode: str, block: int, timeout_ns: int,
        progress: bool | None) -> FixpointResult:
    kinds, params = _step_args(step, args)
    kernels = _module(backend, step, kinds, params)
    order = [mode] if mode != "auto" else _auto_order(backend.caps, max_rounds)
    ctl = _take_ctl(backend)
    ctl_ptr = ctl.__cuda_array_interface__["data"][0]
    bar = _bar(progress)
    try:
        for mode in order:
            sizes = chunks(progress if bar is not None else False, max_rounds)
            try:
                if mode == "cooperative":
                    rounds, converged, ns = _cooperative(backend, kernels["vyre_fixpoint_coop"], n, params, ctl,
                                                         ctl_ptr, max_rounds, block, timeout_ns, bar, sizes)
                elif mode == "graph":
                    rounds, converged, ns = _graph(backend, kernels, n, params, ctl, ctl_ptr, max_rounds, block,
                                                   bar, sizes)
                else:
                    rounds, converged, ns = _relaunch(backend, kernels["vyre_fixpoint_round"], n, params, ctl,
                                                      ctl_ptr, max_rounds, block, bar)
                break
            except _NotHere as e:  # raised before any round ran: "auto" moves on to the next mode
                if mode == order[-1]:
                    if e.no_room is not None:  # the graph had no room, and no mode is left: say so as such
                        raise e.no_room from None
                    raise
        if bar is not None:
            finished(bar)
            bar.close()
            bar = None
    finally:
        if bar is not None:  # stopped by an error or an interrupt
            stopped(bar)
        _give_ctl(backend, ctl)
    return FixpointResult(rounds, converged, mode, ns)


class _NotHere(UnsupportedError):
    """A mode this device, step or block size cannot run, found before any round ran; `no_room`,
    where the GPU had no room for what the mode needs (another mode may need less)."""

    no_room: "DeviceMemoryError | None" = None


def _auto_order(caps, max_rounds: int) -> list[str]:
    """The modes "auto" tries, best first: one round needs neither a grid barrier nor a graph (a
    launch is cheapest); more run cooperatively where the grid fits, else as a graph's while loop,
    else one launch a round."""
    if max_rounds == 1:
        return ["relaunch"]
    return (["cooperative"] if caps.cooperative_launch else []) + ["graph", "relaunch"]


def for_each(backend, step, n: int, args: list, block: int) -> None:
    kinds, params = _step_args(step, args)
    kernels = _module(backend, step, kinds, params)
    with _CTL_LOCK:  # the round's flag goes to a control block of its own that nobody reads
        scratch = _SCRATCH.get(backend)
    if scratch is None:
        scratch = backend.empty(_CTL_WORDS, np.uint32)
        with _CTL_LOCK:
            scratch = _SCRATCH.setdefault(backend, scratch)
    if n:
        ptr = scratch.__cuda_array_interface__["data"][0]
        k = kernels["vyre_fixpoint_round"]
        key = ("round", threading.get_ident(), n, block, len(params))
        launch = k.launches.get(key)
        if launch is None:
            if len(k.launches) >= 64:
                k.launches.clear()
            launch = k.launches[key] = _round_launch(backend, k, n, params, ptr, block)
        else:  # the driver copies parameters at enqueue, so a launch is refilled, one per thread
            launch.set_param(1, ptr)
            _args_into(launch, 2, params)
        launch.enqueue(backend.stream_handle)


_SCRATCH: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CTLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # backend -> control blocks not in use
_CTL_LOCK = threading.Lock()


def _take_ctl(backend):
    """A control block of the backend's (every mode zeroes the words it reads before a launch);
    reused across runs, since an allocation costs more than a short run."""
    with _CTL_LOCK:
        free = _CTLS.setdefault(backend, [])
        if free:
            return free.pop()
    return backend.empty(_CTL_WORDS, np.uint32)


def _give_ctl(backend, ctl) -> None:
    with _CTL_LOCK:
        free = _CTLS.setdefault(backend, [])
        if len(free) < 8:
            free.append(ctl)


def _args_into(launch: KernelLaunch, first: int, params: list) -> None:
    for k, (_, value) in enumerate(params):
        launch.set_param(first + k, value)


def _cooperative(backend, k, n, kinds, ctl, ctl_ptr, max_rounds, block, timeout_ns, bar, sizes):
    caps = backend.caps
    if not caps.cooperative_launch:
        raise _NotHere("this GPU cannot launch cooperative kernels. Fix: use mode='graph' or 'relaunch'.")
    per_sm = backend.blocks_per_sm(k, (block, 1, 1))
    if per_sm < 1:
        raise _NotHere(f"the cooperative fixpoint kernel with the step cannot run {block}-thread blocks "
                               "(registers or shared memory). Fix: pass a smaller block, e.g. block=128.")
    grid = max(1, min(-(-n // block), per_sm * caps.sm_count, 8191))  # 13-bit vote fields
    shape = LaunchShape((grid, 1, 1), (block, 1, 1))
    validate_cooperative(caps, shape, per_sm, kernel=k.name)
    launch = KernelLaunch(k.handle, k.name, shape, 0, cooperative=True, nparams=4 + len(kinds))
    # A launch stays under 2^25 block arrivals (the vote barrier's arrival field, see grid_barrier.ptx).
    most = (2**25 - 1) // grid
    launch.set_param(0, n)
    launch.set_param(2, timeout_ns)
    launch.set_param(3, ctl_ptr)
    _args_into(launch, 4, kinds)
    rounds, converged, ns = 0, False, 0
    while rounds < max_rounds and not converged:
        launch.set_param(1, min(next(sizes), most, max_rounds - rounds))
        backend.memset(ctl_ptr, 4 * _CTL_WORDS)
        with backend.device_timer() as t:
            launch.enqueue(backend.stream_handle)
        ns += t.ns
        words = backend.download(ctl)
        if words[_ERROR]:
            raise_barrier_timeout(timeout_ns)
        rounds += int(words[_ROUNDS])
        converged = bool(words[_CONVERGED])
        if bar is not None:
            bar.update(int(words[_ROUNDS]))
    return rounds, converged, ns


def _round_launch(backend, k, n, kinds, ctl_ptr, block) -> KernelLaunch:
    per_sm = max(1, backend.blocks_per_sm(k, (block, 1, 1)))
    grid = max(1, min(-(-n // block), per_sm * backend.caps.sm_count * 4))
    launch = KernelLaunch(k.handle, k.name, LaunchShape((grid, 1, 1), (block, 1, 1)), 0, nparams=2 + len(kinds))
    launch.set_param(0, n)
    launch.set_param(1, ctl_ptr)
    _args_into(launch, 2, kinds)
    return launch


def _graph(backend, kernels, n, kinds, ctl, ctl_ptr, max_rounds, block, bar, sizes):
    from ..gpu.cudagraph import WhileGraph

    rnd = _round_launch(backend, kernels["vyre_fixpoint_round"], n, kinds, ctl_ptr, block)
    chk_k = kernels["vyre_fixpoint_check"]
    chk = KernelLaunch(chk_k.handle, chk_k.name, LaunchShape((1, 1, 1), (1, 1, 1)), 0, nparams=3)
    chk.set_param(0, ctl_ptr)

    def body(stream: int, condition: int) -> None:
        chk.set_param(2, condition)
        rnd.enqueue(stream)
        chk.enqueue(stream)

    rounds, converged, ns = 0, False, 0
    graphs: dict[int, WhileGraph] = {}
    try:
        while rounds < max_rounds and not converged:
            limit = min(next(sizes), max_rounds - rounds)
            if limit not in graphs:
                chk.set_param(1, limit)
                try:
                    graphs[limit] = WhileGraph(backend, body, "the fixpoint loop")
                except (UnsupportedError, DeviceMemoryError) as e:
                    if rounds:
                        raise
                    here = _NotHere(str(e))
                    here.no_room = e if isinstance(e, DeviceMemoryError) else None
                    raise here from e
            backend.memset(ctl_ptr, 4 * _CTL_WORDS)
            g = graphs[limit]
            with backend.device_timer(g.stream) as t:
                g.launch()
            ns += t.ns
            words = backend.download(ctl)
            rounds += int(words[_ROUNDS])
            converged = bool(words[_CONVERGED])
            if bar is not None:
                bar.update(int(words[_ROUNDS]))
    finally:
        for g in graphs.values():
            g.close()
    return rounds, converged, ns


def _relaunch(backend, k, n, kinds, ctl, ctl_ptr, max_rounds, block, bar):
    launch = _round_launch(backend, k, n, kinds, ctl_ptr, block)
    rounds, converged, ns = 0, False, 0
    while rounds < max_rounds:
        backend.memset(ctl_ptr + 12, 4)
        with backend.device_timer() as t:
            launch.enqueue(backend.stream_handle)
        ns += t.ns
        rounds += 1
        if bar is not None:
            bar.update(1)
        if backend.download(ctl, 3, 1)[0] == 0:
            converged = True
            break
    return rounds, converged, ns
