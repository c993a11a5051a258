"""Objects that own resources (device memory, graphs, streams, host tables) and release them once."""
from __future__ import annotations

from .errors import DispatchError, public_name


class Unshared:
    """An owner that copy, deepcopy and pickle refuse: a copy would be a second owner of the same
    resources, and whichever closed first would free them under the other."""

    def _unshared(self) -> DispatchError:
        return DispatchError(f"this {public_name(type(self))} owns what it holds (device or host memory, a graph, a "
                             "stream) and cannot be copied or pickled: two owners would release it twice. Fix: "
                             "make another one from the same inputs.")

    def __copy__(self):
        raise self._unshared()

    def __deepcopy__(self, memo):
        raise self._unshared()

    def __reduce_ex__(self, protocol):
        raise self._unshared()
