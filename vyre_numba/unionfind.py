"""Lock-free union-find as Numba device functions, shared by connected components and the e-graph
(imported only where a GPU or the CUDA simulator runs them: they need numba.cuda).

Invariants: parent[x] <= x always (a root is hooked only under a smaller root), so every tree's
root is its smallest member; path halving points a node at its grandparent, an ancestor, so trees
never split; `link` returns only once both ends share a root. `root` reads without writing: a pass
that stores every node's root must not halve paths beside itself, or a stale grandparent could be
stored over a root another thread had just written. A walk that meets an entry above its index
stops there and gives -1, having halved only the steps before it (so does an id outside the
array, given or met, which would be read or written past its end): that entry breaks the
invariant, as every cycle does (a permutation passed by mistake), which would otherwise spin on
the GPU for ever or be halved into a forest of made-up roots. Every walk is bounded by the
array's length besides."""
from __future__ import annotations

from numba import cuda

from .errors import DispatchError
from .simulator import SIMULATED as _SIM

__all__ = ["find", "root", "link"]


class _DeviceFunction(type(cuda.jit(device=True)(lambda: 0))):  # Numba's device functions, or the simulator's
    """A device function that host code may not call: kernels compile a call to it as to any other
    (Numba types it by its class; `__call__` is never reached), and the CUDA simulator, which runs
    kernels as Python, calls it inside them."""

    def __call__(self, *args, **kwargs):
        if _in_simulated_kernel():
            return super().__call__(*args, **kwargs)
        name = getattr(self, "__name__", "this function")
        raise DispatchError(f"unionfind.{name} is a CUDA device function: only code running on the GPU (a "
                            "@cuda.jit kernel, or a fixpoint step) can call it, on device arrays. Fix: call it from "
                            "such code; on the host, vyre_numba.graph.connected_components (or components_numpy) "
                            "gives the components of a graph.")

    if _SIM:
        def __reduce__(self):  # the simulator's wrapper is not the module's function by its name: pickle
            return _named, (self.__name__,)  # it as the module attribute it is (Numba's pickles itself)


def _named(name: str) -> "_DeviceFunction":
    """The module's device function `name` (what an unpickled one is)."""
    return globals()[name]


def _in_simulated_kernel() -> bool:
    """Whether the CUDA simulator is running a kernel now (it calls device functions as Python)."""
    if not _SIM:
        return False
    from numba.cuda.simulator import kernel

    return getattr(kernel, "_get_kernel_context", lambda: True)() is not None  # unknown: let the simulator decide


def _device_only(fn) -> _DeviceFunction:
    """`fn` as a device function that refuses host calls (Numba's own, under another class)."""
    d = cuda.jit(device=True)(fn)
    d.__class__ = _DeviceFunction
    return d


@_device_only
def find(parent, x):
    """x's root, halving the path on the way; -1 where the walk meets an entry above its index (no
    forest of the invariant's kind: a cycle) or outside the array, before halving past it, and for
    an x outside the array."""
    if x < 0 or x >= parent.shape[0]:
        return -1
    for _ in range(parent.shape[0]):
        nxt = parent[x]
        if nxt == x:
            return x
        if nxt > x or nxt < 0:  # checked before parent[nxt] is read: it may lie past the array
            return -1
        up = parent[nxt]
        if up > nxt or up < 0:
            return -1
        parent[x] = up
        x = nxt
    return -1


@_device_only
def root(parent, x):
    """x's root, read without writing; -1 where the walk meets an entry above its index or outside
    the array, and for an x outside it (as `find`)."""
    if x < 0 or x >= parent.shape[0]:
        return -1
    for _ in range(parent.shape[0]):
        p = parent[x]
        if p == x:
            return x
        if p > x or p < 0:
            return -1
        x = p
    return -1


@_device_only
def link(parent, u, v):
    """Join the trees of u and v; 1 if this call hooked a root, 0 if they already shared one. A
    compare-and-swap hooks the larger root under the smaller and succeeds only on a root; when
    another thread hooked it first, try again from the new roots. -1 where a walk met an entry
above its index (as `find`): then nothing is hooked."""
    ru = find(parent, u)
    rv = find(parent, v)
    if ru < 0 or rv < 0:  # both -1 would compare equal: "already one tree"
        return -1
    while ru != rv:
        if ru < 0 or rv < 0:
            return -1
        lo = min(ru, rv)
        hi = max(ru, rv)
        if cuda.atomic.cas(parent, hi, hi, lo) == hi:
            return 1
        ru = find(parent, lo)
        rv = find(parent, hi)
    return 0
