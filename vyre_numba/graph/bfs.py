"""Breadth-first search: each vertex's distance in edges from a source, -1 where unreachable.

Level by level: the frontier is a work queue on the device; top-down levels expand it (each
unseen neighbour claimed by compare-and-swap), bottom-up levels scan the unseen vertices for a
neighbour in it, and the direction follows Beamer's direction-optimizing rule (bottom-up once the
frontier's edges outnumber the unexplored edges / ALPHA, top-down again once it holds fewer than
n / BETA vertices), bottom-up only for a symmetric CSR (stored edges then serve as in-edges). The
host reads two counts a level (the frontier's vertices and edges), which the level's last block
puts in mapped host memory. `bfs_numpy` is the CPU implementation and the oracle."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import INTEGERS, DispatchError, a_type, host_memory, shown
from ..simulator import SIMULATED as _SIM
from .csr import CSR, checked_graph, enqueue_check, graph_arguments, indices_by_name, is_graph, resolve

from ..backend import ArrayIn, ArrayOut, Backend  # noqa: F401  (the annotations name them: typing.get_type_hints reads them)

HUB = 256  # see bfs_kernels.HUB
FEW = 32  # a top-down frontier of at most this many vertices is expanded by the whole grid, vertex by vertex
PERSISTENT_AFTER = 8  # levels run from the host before a small frontier's remaining levels go on the device
PERSISTENT_PER_SM = 2  # blocks a multiprocessor in that launch (fewer arrivals make a cheaper grid barrier)
PERSISTENT_SPINS = 1 << 24  # polls of its grid barrier before a block gives up (ten seconds or more on an H100)
BOTTOM_UP_ABOVE = 1 / 20  # bfs_many: bottom-up while the frontier holds more than this share of the vertices
TOP_DOWN_BELOW = 1 / 50  # and back below this share
ALPHA = 14  # bfs: bottom-up once the frontier's edges exceed the unexplored edges / ALPHA (Beamer et al.)
BETA = 24  # and back to top-down once the frontier holds fewer than n / BETA vertices
SCALAR_VERTICES, SCALAR_EDGES = 64, 256  # bfs_numpy: a level this small is expanded by a Python loop


@host_memory("bfs_numpy")
def bfs_numpy(g: CSR, source: int) -> np.ndarray:
    """Distances (int32, -1 unreachable) from `source` over the stored (directed) edges."""
    g = checked_graph(g, "bfs_numpy")
    return _bfs_numpy(g, _source(source, g.n))


def _bfs_numpy(g: CSR, source: int) -> np.ndarray:
    """`bfs_numpy` of a CSR and source just checked. Small levels (at most SCALAR_VERTICES vertices
    reaching at most SCALAR_EDGES edges: paths, roads, meshes' thin ends) are expanded by a Python
    loop, a few microseconds a level; larger ones by NumPy, whose dozen calls cost ~20 us a level."""
    dist = np.full(g.n, -1, np.int32)
    dist[source] = 0
    indptr, indices = g.indptr, g.indices
    frontier: "list[int] | np.ndarray" = [source]  # a list while levels are small
    first = None  # where a vertex last appears among a level's new neighbours (NumPy levels)
    level = 0
    while len(frontier):
        level += 1
        if isinstance(frontier, list):
            spans = small_spans(indptr, frontier)
            if spans is not None:
                nxt = []
                for a, b in spans:
                    for v in indices[a:b].tolist():
                        if dist[v] < 0:
                            dist[v] = level
                            nxt.append(v)
                frontier = nxt if len(nxt) <= SCALAR_VERTICES else np.array(nxt, np.int64)
                continue
            frontier = np.array(frontier, np.int64)
        lo, hi = indptr[frontier], indptr[frontier + 1]
        counts = hi - lo
        offsets = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        nbrs = indices[offsets]
        nbrs = nbrs[dist[nbrs] == -1]
        dist[nbrs] = level
        if first is None:
            first = np.empty(g.n, np.intp)
        frontier = each_once(nbrs, first).astype(np.int64)
        if frontier.size <= SCALAR_VERTICES:
            frontier = frontier.tolist()
    return dist


def small_spans(indptr: np.ndarray, frontier: list) -> "list[tuple[int, int]] | None":
    """Each frontier vertex's [start, end) in indices, where they hold at most SCALAR_EDGES edges
    in all (a level small enough for a Python loop); None for a larger level."""
    spans = [(int(indptr[u]), int(indptr[u + 1])) for u in frontier]
    return spans if sum(b - a for a, b in spans) <= SCALAR_EDGES else None


def each_once(ids: np.ndarray, stamp: np.ndarray) -> np.ndarray:
    """The distinct values of `ids` (vertex ids below stamp.size), without a sort: each position is
    written into `stamp` at its id, and of an id's positions exactly one is left standing there.
    `stamp` (intp) is scratch."""
    place = np.arange(ids.size)
    stamp[ids] = place
    return ids[stamp[ids] == place]


def _source(source, n: int) -> int:
    if n < 1:
        raise DispatchError("the graph has no vertices, so no source. Fix: pass a graph with at least one vertex.")
    if hasattr(source, "__cuda_array_interface__") or hasattr(source, "copy_to_host"):
        raise DispatchError(f"source is a device array ({a_type(source)}), not one vertex. Fix: pass an int on the "
                            f"host, 0 <= source < {n} (for a one-item device array, int(source.copy_to_host()[0])).")
    if isinstance(source, np.ma.MaskedArray):
        raise DispatchError("source is a masked array; its mask would be ignored. Fix: pass one "
                            f"int 0 <= source < {n}.")
    if type(source).__module__.split(".")[0] == "pandas":  # its repr runs over lines: named, not shown
        raise DispatchError(f"source is {a_type(source)}, not one vertex. Fix: pass one int 0 <= source < {n} "
                            "(bfs_many takes many sources).")
    if isinstance(source, np.ndarray) and source.shape == ():  # a 0-d array, as bfs_many takes one
        source = source[()]
    elif isinstance(source, (np.ndarray, list, tuple)):
        raise DispatchError(f"source={shown(source)} is {'an array' if isinstance(source, np.ndarray) else a_type(source)}"
                            f", not one vertex. Fix: pass one int 0 <= source < {n} (bfs_many takes many sources).")
    if isinstance(source, (bool, np.bool_)) or not isinstance(source, INTEGERS):
        raise DispatchError(f"source={shown(source)} is {a_type(source)}, not an int naming a vertex. Fix: "
                            f"pass an int 0 <= source < {n}.")
    if not 0 <= source < n:
        raise DispatchError(f"source={shown(source)} is not a vertex of this {n}-vertex graph. Fix: pass an int "
                            f"0 <= source < {n}.")
    return int(source)


@host_memory("bfs")
@indices_by_name("bfs", "source")
def bfs(indptr: "ArrayIn | Any", indices: "ArrayIn | int | None" = None, source: int | None = None, *,
        backend: "Backend | str | None" = None, symmetric: bool = False) -> ArrayOut:
    """Distances (int32) from `source` along the stored edges of the CSR graph `(indptr,
    indices)`, or of a SciPy sparse matrix A given whole (`bfs(A, source)`, any format read as
    CSR), -1 for vertices it cannot reach: NumPy out for host arrays (computed on the GPU
    when `backend` is "cuda", or is None and a GPU is usable), a device array out for device
    arrays. `symmetric=True` promises every edge is stored both ways, which lets large frontiers
    be searched bottom-up: checked (a DispatchError where it is broken), for host arrays on the host
    (about 8 ns an edge), for device arrays on the device (once a graph: later calls on the same
    contents find it remembered). A `Graph` in the CSR's place, `bfs(g, source)`, is `g.bfs(source)`."""
    if is_graph(indptr):
        return indptr.bfs(indptr._given(indices, source, "source", "bfs", backend, symmetric))
    indptr, indices, source = graph_arguments(indptr, indices, source, "bfs", "source")
    be, g, n, on_device = resolve(indptr, indices, backend, symmetric, "bfs(A, source)")
    source = _source(source, n)
    if on_device:
        hubs = enqueue_check(be, indptr, indices, n, HUB, symmetric, "bfs(A, source)")
        return _bfs_gpu(be, indptr, indices, n, source, bool(symmetric), hubs=hubs)
    if be.name != "cuda":
        return _bfs_numpy(g, source)
    ix = g.indices.astype(np.int32) if g.nnz < 2**31 and g.n < 2**31 else g.indices
    hubs = bool(g.n) and int(np.diff(g.indptr).max()) > HUB
    return be.download(_bfs_gpu(be, be.upload(g.indptr), be.upload(ix), g.n, source, bool(symmetric), hubs=hubs))


def _bfs_gpu(be, indptr, indices, n: int, source: int, symmetric: bool, levels: list | None = None,
             hubs=True, rounds=None):
    """Distances on the device; `levels`, where given, records each level's direction. `hubs`
    False promises no vertex has more than HUB neighbours (one kernel a top-down level, not two);
    a function (`csr.enqueue_check`'s) is called for it once the first frontier is measured, so
    the check's wait and the first level's are one.

    Each level is its expansion kernel(s) and `frontier_edges`, whose last block puts the new
    frontier's size and edges in mapped host memory and empties the spent queue: the host watches
    for the two numbers and launches the next level, with no copy and no other call between.

    After PERSISTENT_AFTER levels, a small frontier (a long, thin graph: roads, grids, paths) hands
    the remaining levels to the device, with no host round trip a level: one persistent
    cooperative launch of them all, a grid barrier between levels (`bfs_kernels.levels_on_device`);
    where the GPU cannot launch cooperatively, or `rounds` (each, until) is given (the tests'
    own fixpoint runners), asynchronous relaxation from that frontier (`steps.relax`) run to its
    fixed point by the fixpoint runner."""
    from ..gpu.memory import unzeroed
    from ..gpu.numba_launch import launchers
    from . import bfs_kernels as k

    launch = launchers(be.stream)
    block = 256
    grid = max(1, min(-(-n // block), be.caps.sm_count * 16))
    dist = unzeroed(be, n, np.int32)
    host = _host_words()
    with _Scratch(be, n) as (queues, states, rows, row_states, counts):
        def measure(items, state, spent) -> tuple[int, int]:  # (vertices, edges) of the frontier just built
            host.reset()
            launch(k.frontier_edges, grid, block, indptr, items, state, n, counts, host.device, spent)
            got = host.read(be.stream)
            return got[1], got[0]

        launch(k.start, grid, block, dist, n, source, rows[0], row_states[0], row_states[1], counts, row_states[2])
        size, edges = measure(rows[0], row_states[0], row_states[1])  # neither kernel writes through the CSR
        if callable(hubs):
            hubs = hubs()  # the check, enqueued before them, is done: its read waits no longer
        unexplored = int(indices.shape[0]) - edges
        level, bottom, row = 0, False, 0  # the frontier is queue `row`, the next level's (row + 1) % 3
        room = PERSISTENT_PER_SM * be.caps.sm_count * 256  # items the persistent launch takes a level
        while size:
            if bottom:
                bottom = symmetric and size >= n / BETA
            else:
                bottom = symmetric and edges > unexplored / ALPHA
            if level >= PERSISTENT_AFTER and not bottom and size <= room:
                if rounds is not None or not getattr(be.caps, "cooperative_launch", True):
                    _relax_rest(rounds or _fixpoint_rounds(be), indptr, indices, dist, rows[row], size, n, be)
                    if levels is not None:
                        levels.append("persistent")
                    break
                ran, row = _persistent(be, indptr, indices, dist, queues, states, row, level, n, room, host)
                if levels is not None:
                    levels.extend(["persistent"] * ran)
                level += ran
                size, edges = measure(rows[row], row_states[row], row_states[(row + 2) % 3])
                unexplored -= edges
                continue
            frontier, f_state, nxt, n_state = rows[row], row_states[row], rows[(row + 1) % 3], row_states[(row + 1) % 3]
            if bottom:
                launch(k.bottom_up, grid, block, indptr, indices, dist, level, n, nxt, n_state)
            else:
                if size <= FEW and edges > HUB:
                    kernels = (k.top_down_few,)
                else:
                    kernels = (k.top_down, k.top_down_hubs) if hubs else (k.top_down,)
                for kernel in kernels:
                    launch(kernel, grid, block, indptr, indices, dist, level, frontier, f_state, n, nxt, n_state)
            if levels is not None:
                levels.append("bottom-up" if bottom else "top-down")
            row = (row + 1) % 3
            size, edges = measure(rows[row], row_states[row], row_states[(row + 2) % 3])
            unexplored -= edges
            level += 1
    return dist


def _persistent(be, indptr, indices, dist, queues, states, row: int, level: int, n: int, room: int,
                host) -> tuple[int, int]:
    """Run the levels after the frontier (queue `row`, at `level`) in one persistent launch
    (`bfs_kernels.levels_on_device`) with no host round trip, until they end or a frontier
    holds more than `room` items; (levels run, queue of the frontier then: empty, or handed
    back to the host)."""
    from ..errors import BarrierTimeoutError

    launcher, bar = host.persistent(be.stream)
    args = [indptr, indices, dist, queues, states, row, level, n, room, bar, host.arrived, PERSISTENT_SPINS,
            host.device]
    if host.resident is None:
        host.resident = launcher.resident_blocks(256, *args)
    blocks = max(1, min(host.resident, PERSISTENT_PER_SM * be.caps.sm_count))
    try:
        host.reset()
        launcher(blocks, 256, *args)
        ran, outcome = host.read(be.stream, wait=True)
    except BaseException:  # interrupted: how far the barrier's count got is unknown, so it starts afresh
        host.forget_barrier()
        raise
    host.arrived += ran * blocks
    if outcome == 1:
        host.forget_barrier()
        raise BarrierTimeoutError(
            f"BFS's persistent levels stopped after {ran}: a block waited {PERSISTENT_SPINS} polls at the grid barrier "
            "between levels, though a cooperative launch gives every block a place (the GPU was interrupted: a "
            "debugger, preemption or a fault), so the distances are unfinished. Fix: check the device (nvidia-smi) "
            "and call again.")
    return ran, (row + ran) % 3


class _Scratch:
    """`with _Scratch(be, n) as (queues, states, rows, row states, counts)`: BFS's own device
    arrays, three queues of n int32 items (`queues`, (3, n), and its rows), their uint64 states
    (`states`, (3, 2), and its rows) and two int64 counts, in one allocation from the
    stream-ordered pool, seen as raw arrays, given back on leaving (ordered after the backend's
    stream's work: a free on the legacy stream waits for blocking streams); the backend's zeroed
    arrays elsewhere (the CUDA simulator's stand-ins)."""

    def __init__(self, be, n: int):
        self._be, self._n, self._address = be, n, None

    def __enter__(self) -> tuple:
        be, n = self._be, self._n
        if getattr(be, "name", None) != "cuda":
            queues, states = be.empty(3 * n, np.int32).reshape(3, n), be.empty(6, np.uint64).reshape(3, 2)
            return queues, states, [queues[r] for r in range(3)], [states[r] for r in range(3)], be.empty(2, np.int64)
        from ..gpu.memory import pool_alloc
        from ..gpu.numba_launch import RawArray

        room = -(-12 * n // 16) * 16  # the states after the queues, 16-byte aligned
        a = self._address = pool_alloc(room + 64)
        s = a + room
        return (RawArray(a, (3, n), np.int32), RawArray(s, (3, 2), np.uint64),
                [RawArray(a + 4 * n * r, (n,), np.int32) for r in range(3)],
                [RawArray(s + 16 * r, (2,), np.uint64) for r in range(3)], RawArray(s + 48, (2,), np.int64))

    def __exit__(self, *exc) -> None:
        if self._address is not None:
            from ..gpu.memory import pool_free

            pool_free(self._address)
            self._address = None


class _HostWords:
    """One thread's words that BFS's kernels write and its host reads (two int64: mapped host
    memory on the GPU, read as soon as word 1 is set, within a bound past which the stream is
    synchronised; a device array copied back under the CUDA simulator, which has no mapped
    memory), and the grid barrier state and launcher of its persistent levels."""

    WAIT_SECONDS = 200e-6

    def __init__(self) -> None:
        from numba import cuda

        from ..gpu.mapped import watch
        from ..gpu.numba_launch import RawArray

        self._watch = watch
        if _SIM:
            self.words = self.device = cuda.to_device(np.zeros(2, np.int64))
        else:
            self.words = cuda.mapped_array(2, np.int64)
            self.device = RawArray(self.words.device_ctypes_pointer.value, (2,), np.int64)
        self._persistent: dict = {}  # stream handle -> (NumbaLaunch, barrier state)
        self.resident: int | None = None  # blocks of `levels_on_device` that fit at once
        self.arrived = 0  # arrivals at the barrier so far (the barrier's count only grows)

    def reset(self) -> None:
        if _SIM:
            self.device.copy_to_device(np.array([0, -1], np.int64))
        else:
            self.words[1] = -1

    def read(self, stream, wait: bool = False) -> tuple[int, int]:
        """(word 0, word 1) once word 1 is set (`wait`: synchronise the stream first, for a long kernel)."""
        if _SIM or wait:
            stream.synchronize()
        if _SIM:
            got = self.device.copy_to_host()
            return int(got[0]), int(got[1])
        if not self._watch(self.words, 1, -1, stream, self.WAIT_SECONDS):
            from ..errors import DeviceError

            raise DeviceError("a BFS count never arrived from the device. Fix: check the device is healthy "
                              "(nvidia-smi); after a kernel fault, restart the process.")
        return int(self.words[0]), int(self.words[1])

    def persistent(self, stream) -> tuple:
        """(cooperative launcher of `bfs_kernels.levels_on_device` on `stream`, its barrier state)."""
        from numba import cuda

        from ..gpu.numba_launch import NumbaLaunch, stream_handle
        from . import bfs_kernels as k

        key = stream_handle(stream)
        got = self._persistent.get(key)
        if got is None:
            if self._persistent:  # one barrier state serves one stream's launches
                self._persistent.clear()
                self.arrived = 0
            bar = cuda.to_device(np.zeros(4, np.int64), stream=stream)
            got = self._persistent[key] = (NumbaLaunch(k.levels_on_device, stream, retain=False, cooperative=True), bar)
        return got

    def forget_barrier(self) -> None:
        """After a launch that gave up at its barrier, whose count is then off: a fresh one next time."""
        self._persistent.clear()
        self.arrived = 0


_HOST: dict = {}


def _host_words() -> _HostWords:
    """This thread's host words (mapped memory costs a driver allocation; one a thread is kept)."""
    key = threading.get_ident()
    words = _HOST.get(key)
    if words is None:
        if len(_HOST) >= 64:
            _HOST.clear()
        words = _HOST[key] = _HostWords()
    return words


def _fixpoint_rounds(be):
    from .. import fixpoint

    def each(step, count, args):
        fixpoint.for_each(step, count, args, backend=be)

    def until(step, count, args, max_rounds):
        return fixpoint.run(step, count, args, max_rounds=max_rounds, backend=be, progress=False).converged

    return each, until


def _relax_rest(rounds, indptr, indices, dist, items, size: int, n: int, be) -> None:
    """The levels after the frontier `items[:size]`, by asynchronous relaxation on the device."""
    from ..errors import DeviceError
    from . import steps

    each, until = rounds
    words = -(-n // 32)
    dirty = be.empty(words, np.uint32)
    each(steps.clear, words, [dirty])
    each(steps.mark_items, size, [dirty, items])
    each(steps.unreached_to_max, n, [dist])
    if not until(steps.relax, words, [indptr, indices, dist, dirty], min(n + 1, 2**31 - 1)):
        raise DeviceError(f"BFS relaxation did not settle within {n + 1} rounds on a {n}-vertex graph, which "
                          "cannot happen for correct distances. Fix: report this with the graph.")
    each(steps.max_to_unreached, n, [dist])
