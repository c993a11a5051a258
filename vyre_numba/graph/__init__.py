"""Flagship graph algorithms built on the device phases: connected components, BFS and many BFS
queries at once, on a CSR's arrays (checked every call) or a `Graph` (checked once, kept on its
backend)."""
from . import generators  # noqa: F401  (NumPy only: `vn.graph.generators` without an import of its own)
from .bfs import bfs, bfs_numpy
from .components import components_numpy, connected_components
from .csr import CSR, check_csr
from .multisource import bfs_many, bfs_many_numpy, reachable_many
from .resident import Graph

__all__ = ["connected_components", "components_numpy", "bfs", "bfs_numpy", "bfs_many", "bfs_many_numpy",
           "reachable_many", "check_csr", "CSR", "Graph"]

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
