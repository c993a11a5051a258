"""The Dask side of the distributed algorithms: the client and its workers, where each partition
runs, what each worker computes on (its own GPU, or the reference backend on CPU machines), and
named tasks that Dask may retry on another worker when one dies."""
from __future__ import annotations

import collections
import contextlib
import functools
import operator
import os
import socket
import sys
import time
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import (INTEGERS, BackendUnavailableError, DispatchError, HostMemoryError, a_type, clip, converting,
                      did_you_mean, shown, warn_user)

INSTALL = "Fix: pip install 'vyre-numba[dask]' (dask, distributed; dask-cuda for one worker per GPU)."


def distributed():
    """The `distributed` module, or an error that says how to install it."""
    try:
        import distributed as dd
    except ImportError as e:
        raise BackendUnavailableError(f"the distributed algorithms need Dask's `distributed` package ({e}). "
                                      + INSTALL) from None
    return dd


MAX_PARTITIONS = 256  # the cut sends a message from every partition to every other: k * k tasks


def cancelled_as_errors(what: str):
    """Decorator: a Dask future cancelled while `what` runs (the client or cluster closed; a worker
    holding scattered data, which nothing can make again, died; a scattered key that another
    `scatter` of the same data, hashed to the same key, released) is a DispatchError naming
    those causes and their fixes, not distributed's own CancelledError."""
    return converting(
        lambda e: type(e).__name__ in ("FutureCancelledError", "CancelledError"),
        lambda e: DispatchError(f"{what}: a Dask future it needed was cancelled while it ran ({type(e).__name__}: "
                                f"{shown(str(e), 200)}): the client or its cluster was closed, a worker holding "
                                "scattered data died (scattered data cannot be made again), or a future passed was "
                                "released. Fix: keep the client open and a reference to every future passed until "
                                "the call returns; scatter with client.scatter(..., hash=False) (hashed keys are "
                                "shared, so another scatter of the same data can release them), or pass arrays or "
                                "Dask collections built from their source, which Dask makes again when a worker "
                                "dies."))


def lost_workers_as_errors(what: str):
    """Decorator: Dask's KilledWorker (every worker that took a task died running it, most often of
    running out of memory) is a DispatchError with the fix, not distributed's own error."""
    return converting(
        lambda e: type(e).__name__ == "KilledWorker",
        lambda e: DispatchError(f"{what}: the workers that ran one of its tasks died running it ({clip(str(e), 200)}); "
                                "most often a worker ran out of memory and its nanny restarted it. Fix: give the "
                                "workers more memory (LocalCluster(memory_limit=...)), use fewer partitions, or "
                                "renumber the vertex ids densely (a smaller n); the workers' logs say why they died."))


def check_memory(table: dict[str, dict], places: list, n: int, bytes_a_vertex: int, what: str) -> None:
    """A HostMemoryError, before the partitions are computed, where those placed on a worker
    would hold more than its memory limit (a partition holds `bytes_a_vertex` bytes for each of
    the n vertex ids, at the least; workers without a limit are not checked)."""
    for w, count in collections.Counter(places).items():
        limit = int((table.get(w) or {}).get("memory_limit") or 0)
        need = count * n * bytes_a_vertex
        if limit and need > limit:
            fewer = ("use fewer partitions (partitions=None gives one a worker; a Dask collection's are its chunks: "
                     "rechunk it), " if count > 1 else "")  # one a worker already: fewer cannot help
            raise HostMemoryError(f"{what}: {count} partition(s) on worker {w} would hold at least {bytes_a_vertex} "
                                  f"bytes for each of the graph's {n} vertex ids ({need / 2**30:.2f} GiB), above its "
                                  f"memory limit of {limit / 2**30:.2f} GiB. Fix: {fewer}use workers with more memory "
                                  "(or more workers), or renumber the vertex ids densely (a smaller n).")


def releasing(fn: Callable) -> Callable:
    """Decorator: a failed distributed call leaves none of its futures alive. The client keeps a
    failed task's exception, and raised through the call it takes the call's frames into its
    traceback, with the futures they hold: those would stay on the workers for the client's life.
    So the error's tracebacks (its causes' too) are dropped and it is raised again from here; a
    cause keeps, as a note, where it was raised: its frames outside vyre-numba and the installed
    packages (a failing loader of the caller's on a worker), every frame with VYRE_NUMBA_DEBUG.
    (Cancelling the futures instead trips an assertion in Dask's scheduler, which then drops the
    client's connection.) Called inside a Dask task, the call runs off its worker's thread pool
    (`_off_the_task_pool`)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            with _off_the_task_pool():
                return fn(*args, **kwargs)
        except BaseException as e:
            seen, todo = set(), [e]
            while todo:
                x = todo.pop()
                if x is not None and id(x) not in seen:
                    seen.add(id(x))
                    if x is not e:
                        _note_where(x)
                    x.__traceback__ = None
                    todo += [x.__cause__, x.__context__]
            raise e
    return call


@contextlib.contextmanager
def _off_the_task_pool():
    """Inside a Dask task, the call leaves its worker's thread pool while it runs and joins it
    again after, as `distributed.worker_client()` does: the call's own tasks, some pinned to this
    very worker, need the thread (a one-thread worker, dask_cuda's default, waited for itself
    forever). Elsewhere, and in a task that has left the pool already, nothing changes."""
    pool = sys.modules.get("distributed.threadpoolexecutor")
    state = getattr(pool, "thread_state", None)
    if state is None or getattr(state, "proceed", False) is not True or not _in_a_task():
        yield
        return
    dd = distributed()
    dd.secede()  # distributed's own: it tells the worker too, which then runs other tasks on a new thread
    try:
        yield
    finally:
        dd.rejoin()


def _in_a_task() -> bool:
    try:
        distributed().get_worker()
    except ValueError:  # "No worker found": not a task's thread
        return False
    return True


def _note_where(e: BaseException) -> None:
    """Add to `e` its traceback's frames as text (which holds no frame, so no future either)."""
    import os
    import traceback

    from ..errors import _debugging, _library_paths

    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if _debugging() or not f.filename.startswith((ours, *_library_paths()))]
    if frames:
        e.add_note("Where it was raised (most recent call last):\n" + "".join(traceback.format_list(frames)).rstrip())


def own_futures(client, collection, what: str) -> None:
    """A DispatchError where the Dask collection `collection` (persisted: its chunks are futures)
    holds futures of another client than `client`: computing it there would find its keys gone
    and read as a cancelled future."""
    for f in distributed().futures_of(collection):
        if f.client is not client:
            raise DispatchError(f"{what} was persisted (or scattered) with another client than the one passed. Fix: "
                                "pass the client that persisted it while that one is open, or persist it again "
                                "with this one (client.persist).")


def partition_count(partitions, k_workers: int) -> int:
    """The number of partitions to cut the input into: `partitions`, or one per worker."""
    k = k_workers if partitions is None else partitions
    if not isinstance(k, INTEGERS) or isinstance(k, bool) or k < 1:
        raise DispatchError(f"partitions is {shown(partitions)}. Fix: pass a positive int (or None: one per worker).")
    if k > MAX_PARTITIONS:
        raise DispatchError(f"partitions={k} would exchange {k}*{k} messages a round (at most {MAX_PARTITIONS} "
                            f"partitions). Fix: pass partitions <= {MAX_PARTITIONS}; one per worker (the default) is "
                            "what the algorithms are built for.")
    warn_many(int(k), k_workers, f"partitions={k}", "leave partitions out (one per worker)")
    return int(k)


MANY_A_WORKER = 4  # more partitions a worker than this (and more than 8 in all) is warned of


def warn_many(k: int, k_workers: int, what: str, fix: str) -> None:
    """A UserWarning where `k` partitions are many for `k_workers` workers: every round sends a
    message from each partition to each other, k*k in all, whatever their size."""
    if k > 8 and k > MANY_A_WORKER * max(k_workers, 1):
        warn_user(UserWarning(f"{what}: {k} partitions on {k_workers} worker{'s' if k_workers != 1 else ''}. Each "
                              f"round sends a message from every partition to every other ({k}*{k}), so many small "
                              f"partitions run many times slower than one a worker, the same work. Fix: {fix}."))


def client_or_default(client):
    """`client`, or where it is None Dask's default client (the one made last in this process, as
    Dask's own calls take it); a DispatchError where there is none."""
    if client is not None:
        return client
    try:
        return distributed().default_client()
    except ValueError:
        raise DispatchError("no Dask client was given and none is running in this process. Fix: make one "
                            "(Client(LocalCluster()) on CPUs, Client(dask_cuda.LocalCUDACluster()) for one worker "
                            "per GPU), or pass client=.") from None


def worker_table(client) -> dict[str, dict]:
    """The scheduler's record of each of the client's workers, by address, sorted; an error if
    `client` is no Dask client or has no workers."""
    dd = distributed()
    if client is None:
        raise DispatchError("no Dask client was given. Fix: pass client=Client(LocalCluster()) on CPUs, or "
                            "client=Client(dask_cuda.LocalCUDACluster()) for one worker per GPU.")
    if not isinstance(client, dd.Client):
        raise DispatchError(f"client is {a_type(client)}, not a dask.distributed.Client. Fix: pass "
                            "client=Client(LocalCluster()) on CPUs, or client=Client(dask_cuda.LocalCUDACluster()) "
                            "for one worker per GPU.")
    if getattr(client, "asynchronous", False):
        raise DispatchError("the Dask client is asynchronous; these calls block until the cluster is done. Fix: pass "
                            "a Client made without asynchronous=True (from async code, run the call in a thread: "
                            "await asyncio.to_thread(connected_components, ..., client=client)).")
    if client.status != "running":
        raise DispatchError(f"the Dask client is {client.status}. Fix: pass a running client (is the cluster up?).")
    info = _worker_info(client)
    if not info:  # a worker restarting (its nanny brings it back) leaves none for a moment
        try:
            client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS)
        except (TimeoutError, OSError):
            pass
        info = _worker_info(client)
    if not info:
        raise DispatchError(f"the Dask cluster has no workers (none came within {WAIT_FOR_WORKERS} s). Fix: start "
                            "workers (or wait for them: client.wait_for_workers(n)).")
    return {w: info[w] for w in sorted(info)}


WAIT_FOR_WORKERS = 10.0


def _worker_info(client) -> dict:
    """The scheduler's workers now, asked afresh: `client.scheduler_info()` returns the client's
    cached identity, which its periodic refresh (every worker left out) may overwrite between the
    fetch and the read, so a worker present would seem gone."""
    where = {"n_workers": -1} if _takes_n_workers(client) else {}  # every worker: some releases list five unless asked
    return dict(client.sync(client.scheduler.identity, **where)["workers"])


def _takes_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def backend_name(backend) -> str | None:
    """The name the workers resolve (a Backend object does not travel; its name does); a misspelt
    name (near one registered here) is refused here, before any worker is asked."""
    if isinstance(backend, str):
        from ..backend import backend_names

        names = backend_names()  # this process's: a name registered on the workers alone goes on to them
        near = "" if backend in names else did_you_mean(backend, names)
        if near:
            raise BackendUnavailableError(f"no backend named {shown(backend, 60)}{near}. Fix: "
                                          f"use one of {', '.join(names)}, or None for the best one on each worker.")
    if backend is None or isinstance(backend, str):
        return backend
    name = getattr(backend, "name", None)
    if not isinstance(name, str):
        raise DispatchError(f"backend is {shown(backend, 60)} ({a_type(backend)}). Fix: pass 'cuda', "
                            "'reference', a Backend or None.")
    return name


def worker_device(bname: str | None) -> dict:
    """(Runs on a worker.) The backend this worker resolves and, on the GPU, which GPU it is."""
    from ..backend import resolve_backend

    try:
        be = resolve_backend(bname)
    except BackendUnavailableError as e:  # told by the caller (a raise here logs a worker's failure)
        return {"unavailable": str(e).partition(" Fix:")[0], "host": socket.gethostname()}
    info = {"backend": be.name, "host": socket.gethostname(), "pid": os.getpid(), "gpu": None}
    if be.name == "cuda":
        from numba import cuda

        dev = cuda.get_current_device()
        info["gpu"] = _gpu_id(dev)
        info["name"] = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        info["sees"] = sorted(_gpu_id(d) for d in cuda.gpus)
    return info


def _gpu_id(dev) -> str:
    uid = getattr(dev, "uuid", None)
    return str(uid) if uid is not None else f"pci {dev.PCI_BUS_ID}:{dev.PCI_DEVICE_ID}"


def shares_memory(devices: dict[str, dict]) -> bool:
    """Whether the workers' GPUs can hand device arrays to one another through CUDA IPC: more than
    one GPU worker, all on one host, each seeing every other worker's GPU."""
    infos = list(devices.values())
    if len(infos) < 2 or any(i.get("gpu") is None for i in infos) or len({i["host"] for i in infos}) != 1:
        return False
    gpus = {i["gpu"] for i in infos}
    return all(gpus <= set(i.get("sees", ())) for i in infos)


def devices(client, table: dict[str, dict], bname: str | None) -> dict[str, dict]:
    """Each worker's backend and GPU (`table`: `worker_table(client)`); an error if two workers of
    one host would share a GPU (they would halve its memory and race for it) or the workers
    disagree on the backend."""
    return checked_devices(ask_devices(client, table, bname))


def ask_devices(client, table: dict[str, dict], bname: str | None) -> "Asked":
    """`devices` asked (the caller goes on while the workers answer); the answers of workers asked
    before, while the same worker processes live (address and scratch directory: a restarted
    worker has a new one), are not asked again."""
    workers = list(table)
    lives = (client.id, bname, tuple((w, str(table[w].get("local_directory"))) for w in workers))
    with _KNOWN_LOCK:
        known = _KNOWN.get(lives)
    if known is not None:
        return Asked(lives, {}, known)
    return Asked(lives, {w: client.submit(worker_device, bname, workers=[w], pure=False, key=key("device"))
                         for w in workers}, None)


@dataclass
class Asked:
    """Workers' devices being asked (`futures`), or already known (`known`)."""

    lives: tuple
    futures: dict
    known: dict | None


ANSWER_POLL_S = 0.5  # how often a wait for a worker's device checks the worker is still there
_KNOWN: dict = {}  # Asked.lives -> the checked devices, oldest first
_KNOWN_LOCK = threading.Lock()
_KEEP = 16


def checked_devices(asked: Asked) -> dict[str, dict]:
    """`devices` from `ask_devices`."""
    if asked.known is not None:
        return {w: dict(i) for w, i in asked.known.items()}
    infos = {w: _answer(w, f) for w, f in asked.futures.items()}
    lacking = {w: i for w, i in infos.items() if "unavailable" in i}
    if lacking:
        w, i = next(iter(lacking.items()))
        raise BackendUnavailableError(
            f"{len(lacking)} of the {len(infos)} workers cannot run the backend asked for; worker {w} (on "
            f"{i['host']}): {i['unavailable'].rstrip('.')}. Fix: pass backend=None (each worker runs the best "
            "backend it has, the reference backend where it has no GPU) or backend='reference', or run the workers "
            "where a GPU is (one per GPU: dask_cuda.LocalCUDACluster()).")
    kinds = {i["backend"] for i in infos.values()}
    if len(kinds) > 1:
        raise DispatchError(f"the workers resolve different backends {sorted(kinds)}. Fix: pass backend='cuda' "
                            "(every worker needs a GPU) or backend='reference'.")
    seen: dict = {}
    for w, i in infos.items():
        if i["gpu"] is None:
            continue
        other = seen.setdefault((i["host"], i["gpu"]), w)
        if other != w:
            raise DispatchError(f"workers {other} and {w} both run on GPU {i['gpu']} of {i['host']}. Fix: start one "
                                "worker per GPU with dask_cuda.LocalCUDACluster(), or pass backend='reference'.")
    with _KNOWN_LOCK:
        _KNOWN[asked.lives] = infos
        while len(_KNOWN) > _KEEP:
            _KNOWN.pop(next(iter(_KNOWN)))
    return {w: dict(i) for w, i in infos.items()}


PAUSED_S = 60.0  # a worker paused this long (memory past Dask's pause threshold) is an error, not a wait


def _answer(w: str, future) -> dict:
    """Worker w's answer to `worker_device`. The task must run on w itself, so should w leave
    first (a crash as it starts CUDA; its nanny restarts it at another address), nothing would
    ever run it: its leaving is a DispatchError instead of a wait without end."""
    paused_since = None
    while True:
        try:
            return future.result(timeout=ANSWER_POLL_S)
        except TimeoutError:
            info = _worker_info(future.client).get(w)
            paused = info is not None and info.get("status") == "paused"
            paused_since = (paused_since or time.monotonic()) if paused else None
            if paused and time.monotonic() - paused_since > PAUSED_S:
                future.cancel()
                raise DispatchError(f"worker {w} has been paused for {PAUSED_S:.0f} s (its memory is past Dask's pause "
                                    "threshold), so it runs no task, this call's among them. Fix: free memory on "
                                    "the workers (drop persisted collections or futures you hold; client.restart() "
                                    "clears all), or start them with more memory (memory_limit=), then call again.")
            if info is not None:
                continue
            future.cancel()
            raise DispatchError(f"worker {w} left the cluster before saying which device it runs on (it may have "
                                "crashed starting its GPU, or could not import vyre_numba: the workers need the "
                                "same version installed). Fix: see that worker's log (for an import error, pip "
                                "install 'vyre-numba[dask]' where the workers run), then call again: the call asks "
                                "the workers the cluster has then.") from None


def key(name: str) -> str:
    """A fresh task key that says which phase it is (Dask's dashboard and logs show it)."""
    return f"vyre-{name}-{uuid.uuid4().hex}"


def submit(client, fn: Callable, *args: Any, worker: str | None, name: str, priority: int = 0):
    """`fn(*args)` as a task, preferably on `worker` (where its partition lives), elsewhere when that
    worker is gone: Dask then recomputes what it held from the tasks that made it. A worker runs
    the ready task of highest `priority` first."""
    where = {} if worker is None else {"workers": [worker], "allow_other_workers": True}
    return client.submit(fn, *args, pure=False, key=key(name), priority=priority, **where)


def part(client, future, i: int, worker: str | None, name: str):
    """The i-th item of a task's tuple result, as a task beside it."""
    return submit(client, operator.getitem, future, i, worker=worker, name=name)


def placed(client, items: list, fallback: list, what: str) -> tuple[list, list]:
    """(futures, the worker holding each) of Dask futures or delayed objects (delayed ones are
    computed; futures stay where they are, not copied): waited for, `fallback[i]` where Dask names
    no holder; a cancelled or lost future is a DispatchError."""
    dd = distributed()
    for i, x in enumerate(items):
        if isinstance(x, dd.Future) and x.client is not client:
            raise DispatchError(f"{what} {i} is a future of another client than the one passed. Fix: pass the client "
                                "that made the futures (client.scatter, client.submit, persist), or make them with "
                                "this one.")
        if not isinstance(x, dd.Future):
            own_futures(client, x, f"{what} {i}")
    futs = [x if isinstance(x, dd.Future) else client.compute(x) for x in items]
    try:
        dd.wait(futs)
    except Exception as e:  # a cancelled future ends the wait; which one is said below
        if not isinstance(e, getattr(dd.client, "FuturesCancelledError", ())):
            raise
    for i, f in enumerate(futs):
        if f.status in ("cancelled", "lost"):
            raise DispatchError(f"{what} {i} is a {f.status} future (its data is gone from the cluster). Fix: keep "
                                "a reference to the futures client.scatter, client.submit or persist returned until "
                                "the call ends, and pass those.")
        if f.status == "error":
            e = f.exception()
            raise DispatchError(f"computing {what} {i} raised {type(e).__name__}: {clip(str(e), 200)}. Fix: correct the "
                                f"code that makes {what} {i} (its error is chained below).") from e
    who = client.who_has(futs)
    return futs, [(who.get(f.key) or [w])[0] for f, w in zip(futs, fallback)]


def left_on_workers(finals: list, ranges: list, dtype=np.int32):
    """The finals' results (one 1-D array of `dtype` each, hi - lo long for its (lo, hi) of `ranges`)
    as one Dask array over the workers (waited for: a worker's error is raised here, at the call)."""
    import dask
    import dask.array as da

    distributed().wait(finals)
    for f in finals:
        if f.status == "error":
            f.result()  # raises the worker's exception
    if not finals:
        return da.zeros(0, dtype=dtype, chunks=1)
    return da.concatenate([da.from_delayed(dask.delayed(f), shape=(hi - lo,), dtype=dtype)
                           for f, (lo, hi) in zip(finals, ranges)])
