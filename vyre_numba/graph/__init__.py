"""Flagship graph algorithms built on the device phases: connected components and BFS."""
from .bfs import bfs, bfs_numpy
from .components import components_numpy, connected_components
from .csr import CSR, check_csr

__all__ = ["connected_components", "components_numpy", "bfs", "bfs_numpy", "check_csr", "CSR"]
