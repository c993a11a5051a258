"""Beyond one GPU: connected components and e-graph congruence closure over a Dask cluster, one
worker per GPU (dask_cuda.LocalCUDACluster) or CPU workers on the reference backend
(distributed.LocalCluster). Install with `pip install 'vyre-numba[dask]'`.

    from dask.distributed import Client
    from dask_cuda import LocalCUDACluster
    client = Client(LocalCUDACluster())
    labels = connected_components(indptr, indices, client=client)
    result = congruence_closure(parts, unions, client=client)

Partitions stay on their workers between rounds; only labels and class pairs that cross
partitions move. Results equal the single-GPU calls bit for bit."""
from __future__ import annotations

from .components import DistributedStats, connected_components
from .egraph import congruence_closure

__all__ = ["connected_components", "congruence_closure", "DistributedStats"]

from ..errors import check_calls as _check_calls  # noqa: E402

_check_calls(globals(), __all__)
