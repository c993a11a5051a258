"""Flagship graph algorithms built on the device phases: connected components (and, to come, BFS)."""
from .components import components_numpy, connected_components
from .csr import CSR, check_csr

__all__ = ["connected_components", "components_numpy", "check_csr", "CSR"]
