"""Selector.fused_at / offsets_at (and enqueue_at, which is offsets_at's put at once) keep, per
argument kinds, the keys of the launches they stored (`_plan`), and relaunch those launches on
later calls. Their kernels come from caches that may make a kernel anew (an LRU of compiled
kernels): a launch stored after such a change must be the new kernel's, the one actually
launched, never the old one's with another kernel's packing. With stand-ins for the kernels, the
launches and the selection itself (the paths need a GPU)."""
from __future__ import annotations

import sys
import threading
import types

import numpy as np
import pytest

from vyre_numba.compaction.select import THREADS, TILE, Selector, _Tally

select_module = sys.modules["vyre_numba.compaction.select"]


class Kernel:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Launched:
    """A stored launch (`Relaunch`'s part used here): records each launch as its kernel's name,
    and the parameters rewritten since the last launch."""

    def __init__(self, kernel, log: list):
        self.kernel, self.log, self.rewritten, self.grid = kernel, log, {}, None

    def array(self, i, address, n):
        self.rewritten[i] = (address, n)

    def scalar(self, i, value):
        self.rewritten[i] = value

    def __call__(self, blocks, threads):
        self.log.append(("again", self.kernel.name))
        self.grid = (blocks, threads)


class Kernels(types.SimpleNamespace):
    """The kernel caches: `generation` bumps make every kernel anew, as an evicted entry is."""

    GROUP, SCAN_THREADS = 8, 1024

    def __init__(self):
        super().__init__(generation=0, made={})
        self.scan_chunks = Kernel("scan")
        self.count_bytes = Kernel("count8")
        self.write_index = Kernel("write_index")  # the emit of a selection writing indices

    def _kernel(self, what):
        return self.made.setdefault((what, self.generation), Kernel(f"{what}{self.generation}"))

    def fused_kernel(self, flag_of, emit, word, by_bytes=False):
        return self._kernel("fused")

    def count_kernel(self, flag_of):
        return self._kernel("count")

    def scatter_kernel(self, flag_of, emit, word):
        return self._kernel("scatter")


@pytest.fixture(params=["Selector", "own"])
def selector(monkeypatch, request):
    """A user's Selector (locked) or compaction's own (`for_this_thread`: no lock), the closures
    its calls return run on both."""
    kernels = Kernels()
    monkeypatch.setattr(select_module, "_kernels", lambda: kernels)
    log: list = []
    sel = Selector.__new__(Selector)
    sel._closed, sel._plans, sel._relaunches, sel._resident, sel._tally = False, {}, {}, {}, _Tally()
    sel._lock = threading.RLock() if request.param == "Selector" else None
    sel._fused_off_until, sel._tiles = 0.0, 1 << 20
    sel._sums, sel._host = np.zeros(1024, np.int64), np.zeros(1, np.int64)
    launchers: dict = {}

    class Launcher:  # NumbaLaunch: detached() is the launch it made last
        def __init__(self, kernel):
            self.kernel = kernel

        def detached(self):
            return Launched(self.kernel, log)

    sel._launch = lambda kernel, use=0, cooperative=False: launchers.setdefault(kernel, Launcher(kernel))

    def fused(flag_of, src, n, words, out, octs=None):  # as the real one: looks its kernel up, launches it
        log.append(("first", kernels.fused_kernel(flag_of, None, np.uint32).name))
        return 5

    def offsets(flag_of, src, n, octs=None):
        log.append(("first", kernels.count_kernel(flag_of).name))

    def scatter(flag_of, src, n, words, out, capacity):
        log.append(("first", kernels.scatter_kernel(flag_of, None, np.uint32).name, out.shape[0]))

    sel.fused, sel.offsets, sel.scatter = fused, offsets, scatter
    sel._fused_launch = lambda launch, blocks, meanwhile=None: (launch(), 5)[1]
    return sel, kernels, log


def fused_at(sel, meanwhile=None):
    return sel.fused_at("flag", 0x1000, np.dtype(np.uint8), 4096, False, np.dtype(np.uint32), 0x2000, 0x3000,
                        meanwhile)


def enqueue_at(sel):
    sel.enqueue_at("flag", 0x1000, np.dtype(np.uint8), 1 << 16, False, np.dtype(np.uint32), 0x2000, 0x3000)


def test_a_one_launch_selection_is_stored_before_what_runs_meanwhile_and_never_stored_empty(selector):
    """`meanwhile` (`_small`'s owning pointer, made while the GPU selects) may launch a kernel that starts the
    selector's launcher table afresh: the one-launch selection's launch is detached before it, so
    the next call relaunches it. A launcher with nothing to detach (None, as a fresh one has) is
    not stored: the next call packs its launch again, where a stored None would be called."""
    sel, kernels, log = selector
    fresh = types.SimpleNamespace(detached=lambda: None)

    def meanwhile():
        log.append(("meanwhile",))
        sel._launch = lambda kernel, use=0, cooperative=False: fresh  # the table started afresh
    assert fused_at(sel, meanwhile) == 5 and fused_at(sel) == 5
    assert log == [("first", "fused0"), ("meanwhile",), ("again", "fused0")]
    sel._relaunches, sel._plans = {}, {}
    log.clear()
    assert fused_at(sel) == 5 and fused_at(sel) == 5
    assert log == [("first", "fused0"), ("first", "fused0")] and not sel._relaunches


def test_a_one_launch_selection_is_relaunched_by_its_plan_and_stored_anew_for_a_new_kernel(selector):
    sel, kernels, log = selector
    assert fused_at(sel) == 5 and fused_at(sel) == 5
    assert log == [("first", "fused0"), ("again", "fused0")]
    kernels.generation += 1  # the kernel cache made the kernel anew
    assert fused_at(sel) == 5  # the plan's launch is still valid: the old kernel, packed for itself
    sel._relaunches = {}  # as a new barrier or larger tile counts make it
    log.clear()
    fused_at(sel)
    fused_at(sel)
    assert log == [("first", "fused1"), ("again", "fused1")]  # not fused0's launch with fused1's arguments
    assert sel._plans[("fused", "flag", np.dtype(np.uint8), False, np.dtype(np.uint32), False)][0].name == "fused1"


def test_three_launches_are_relaunched_by_their_plan_and_stored_anew_for_new_kernels(selector):
    sel, kernels, log = selector
    enqueue_at(sel)
    enqueue_at(sel)
    assert log == [("first", "count0"), ("first", "scatter0", 1 << 16),
                   ("again", "count0"), ("again", "scan"), ("again", "scatter0")]
    kernels.generation += 1
    sel._relaunches = {}
    log.clear()
    enqueue_at(sel)
    enqueue_at(sel)
    assert log == [("first", "count1"), ("first", "scatter1", 1 << 16),
                   ("again", "count1"), ("again", "scan"), ("again", "scatter1")]


def offsets_at(sel, n=1 << 16):
    return sel.offsets_at("flag", 0x1000, np.dtype(np.uint8), n, False, np.dtype(np.uint32), 0x2000)


def test_a_count_first_selection_scatters_only_when_put_and_plans_only_then(selector):
    """offsets_at launches count and scan; its put (called once the count sized the output)
    launches the scatter into that output. A call whose put never came (nothing kept) stores no
    plan, so the next call packs again; once put, later calls relaunch all three, the scatter
    rewritten to the new output and its capacity."""
    sel, kernels, log = selector
    put = offsets_at(sel)
    assert log == [("first", "count0")] and not sel._plans  # the scatter waits for its output
    log.clear()
    put = offsets_at(sel)  # the last call was never put: packed afresh
    assert log == [("first", "count0")]
    put(0x5000, 77)
    assert log[-1] == ("first", "scatter0", 77) and sel._plans
    log.clear()
    put = offsets_at(sel, 1000)
    assert log == [("again", "count0"), ("again", "scan")]  # the scatter not yet
    put(0x6000, 12)
    assert log[-1] == ("again", "scatter0")
    scatter = sel._relaunches[sel._plans[("three", "flag", np.dtype(np.uint8), False, np.dtype(np.uint32), False)][2]]
    assert scatter.rewritten[0] == (0x1000, 1000) and scatter.rewritten[2] == (0x2000, 1000)  # its items
    assert scatter.rewritten[3] == (0x6000, 12) and scatter.rewritten[6] == 12  # its output and capacity


@pytest.mark.parametrize("by_bytes,words,word", [(False, 0x2000, np.uint32), (True, None, np.uint64)])
def test_a_one_launch_relaunch_rewrites_every_parameter_to_the_new_call(selector, by_bytes, words, word):
    """Every parameter of the stored launch that names this call's items is rewritten: the flags
    (seen as n // 8 words where by bytes), their count, the items (the output itself where it
    writes indices), the output, and the barrier's target (the blocks arrived before plus this
    launch's)."""
    sel, _, log = selector
    word = np.dtype(word)
    kinds = ("fused", "flag", np.dtype(np.uint8), by_bytes, word, words is None)
    assert sel.fused_at("flag", 0x1000, np.dtype(np.uint8), 4096, by_bytes, word, words, 0x3000) == 5
    key = sel._plans[kinds]
    launch = sel._relaunches[key][0]
    sel._relaunches[key] = (launch, 6)  # six blocks resident at once
    for n, src, items, out, arrived, blocks in ((5 * TILE + 16, 0x11000, 0x12000, 0x13000, 40, 6),
                                                (2 * TILE + 8, 0x21000, 0x22000, 0x23000, 7, 3)):
        sel._tally.arrived = arrived
        log.clear()
        assert sel.fused_at("flag", src, np.dtype(np.uint8), n, by_bytes, word, None if words is None else items,
                            out) == 5
        assert log == [("again", "fused0")]
        assert launch.rewritten == {0: (src, n), 1: (src, n // 8 if by_bytes else n), 2: n,
                                    3: (out if words is None else items, n), 4: (out, n), 7: arrived + blocks}
        assert launch.grid == (blocks, THREADS)


@pytest.mark.parametrize("by_bytes", [False, True])
def test_count_and_scan_relaunches_rewrite_every_parameter_to_the_new_call(selector, by_bytes):
    """The count's flags (and, by bytes, their words) and count of items, and the scan's count of
    tiles, are this call's, and so are their grids; then the scatter's items and output."""
    sel, _, log = selector
    sel.offsets_at("flag", 0x1000, np.dtype(np.uint8), 1 << 16, by_bytes, np.dtype(np.uint32), 0x2000)(0x5000, 77)
    counts, scan, scatter = (sel._relaunches[key] for key in
                             sel._plans[("three", "flag", np.dtype(np.uint8), by_bytes, np.dtype(np.uint32), False)])
    assert (counts.kernel.name, scan.kernel.name, scatter.kernel.name) == ("count8" if by_bytes else "count0",
                                                                          "scan", "scatter0")
    for n, src, items, out, capacity, tiles in ((5 * TILE + 16, 0x11000, 0x12000, 0x13000, 33, 6),
                                                (2000 * TILE + 8, 0x21000, 0x22000, 0x23000, 44, 2001)):
        log.clear()
        put = sel.offsets_at("flag", src, np.dtype(np.uint8), n, by_bytes, np.dtype(np.uint32), items)
        assert [name for _, name in log] == [counts.kernel.name, "scan"]
        assert counts.rewritten == ({0: (src, n), 1: (src, n // 8), 2: n} if by_bytes else {0: (src, n), 1: n})
        assert counts.grid == ((-(-tiles // 8), THREADS) if by_bytes else (tiles, THREADS))
        assert scan.rewritten == {1: tiles} and scan.grid == (-(-tiles // 1024), 1024)
        put(out, capacity)
        assert log[-1] == ("again", "scatter0")
        assert scatter.rewritten == {0: (src, n), 1: n, 2: (items, n), 3: (out, capacity), 6: capacity}


def test_plans_are_bounded(selector, monkeypatch):
    sel, _, _ = selector
    monkeypatch.setattr(select_module, "LAUNCHES_KEPT", 4)
    for k in range(10):
        sel.fused_at(f"flag{k}", 0x1000, np.dtype(np.uint8), 4096, False, np.dtype(np.uint32), 0x2000, 0x3000)
    assert 1 <= len(sel._plans) <= 4
