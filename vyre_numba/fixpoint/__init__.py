"""Run a step over items 0..n-1, round after round, until no item changes: on the GPU without a
host round trip per round.

    def relax(i, labels, indptr, indices):       # returns non-zero when it changed something
        ...
    result = fixpoint.run(relax, n, [labels, indptr, indices], max_rounds=1000)
    result.rounds, result.converged, result.mode

The step is an ordinary Python function in Numba's subset that indexes its array arguments, or a
vyre Program (one invocation per item); on the GPU it becomes a PTX device function (Numba's, or
the emitter's `emit_step`) placed in the hand-written templates of `ptx_templates/`
(`fixpoint.ptx`, `grid_barrier.ptx`), so nobody writes PTX. Modes:

- "cooperative": one persistent cooperative launch; a grid barrier between rounds; the grid is
  sized to what is co-resident, so it always fits.
- "graph": a CUDA graph whose while node repeats a round kernel and a check kernel that ends the
  loop on the device: no co-residency needed, no host round trip.
- "relaunch": a launch per round and the round's flag read back each time.
- "auto": cooperative where the device supports it, else graph, else relaunch (one round,
  `max_rounds=1`: a plain launch).

`for_each(step, n, args)` runs one round without waiting for it or reading anything back: the
building block of one-pass device phases (connected components is a pipeline of them).

Items run in parallel on the GPU, so a step must give the same fixpoint whatever order items run
in (monotone updates such as atomic minima do). On the reference backend (NumPy arrays) rounds
run the items in order, compiled with `numba.njit` (a Program step on the reference interpreter,
all items in lockstep): the CPU implementation and the oracle.
"""
from .runner import MODES, FixpointResult, for_each, run

__all__ = ["run", "for_each", "FixpointResult", "MODES"]

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
