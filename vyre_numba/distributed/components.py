"""Connected components over a Dask cluster: each partition's components on its worker, then only
the labels that cross partitions move.

1. Local: partition p (CSR rows [lo, hi), or a chunk of an edge list) labels the n vertices by
   the components of its own edges (the single-GPU kernels on its worker's GPU, an edge chunk
   linked piece by piece as it uploads; NumPy on CPU workers). A label is the smallest vertex id
   of its local component.
2. Cut: for every vertex v that p's edges touch outside the range p owns, p sends (v, label_p(v))
   to v's owner q, as a bitmask over q's range (which v) and the labels in order. Where most of
   the cut shares one label (its largest component's), that label goes once and a second
   bitmask marks the vertices that carry another, whose labels alone follow.
3. Contract: q joins label_p(v) with its own label_q(v), unions them among themselves (labels only
   join labels) and sends on (label, root) for each label that moved: as many pairs as local
   components meet at the cut, not as many as the cut has edges.
4. Merge: the (label, root) pairs of every owner are joined into one forest, each label under its
   set's smallest label: on GPU workers by every owner on its own GPU (the same lock-free
   union-find as the local components), so no merged mapping travels back; on CPU workers by the
   distributed union-find (`unionfind.merge`: each shard reduced to a forest where it lives, then
   one task joins the forests).
5. Final: every owned vertex v takes the root of label_p(v) (or label_p(v) itself, when no pair
   names it: then its local component touches no other partition and is whole); on GPU workers
   in the same task as step 4.

Every global component is a union of local ones, two of which meet exactly where a vertex lies in
both partitions, which steps 2-3 turn into a pair; so the merged roots are the components, each
rooted at its smallest id, the labels the single-GPU call gives."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import INTEGERS, DispatchError, a_type, flag, host_memory, shown
from . import cluster
from .device import Ops, marked, moved_pairs, narrow, packed
from .unionfind import merge
from ..graph.csr import _pair, _square, graph_arguments, is_graph, whole_graph

from ..backend import ArrayIn, Backend, interface_dtype  # noqa: F401  (the annotations name them: typing.get_type_hints reads them)


@dataclass
class DistributedStats:
    """What a distributed call did: partitions, the workers and their devices, the merge's join
    rounds (1: the owners' pairs are joined once; 0 without partitions), how many cut vertices carried a label to
    their owner and how many label pairs were merged, the wall time, and `rounds`, always 0 (the
    one exchange is counted in merge_rounds; congruence closure's rounds are its result's); `extra`
    holds `owned_ranges`, the vertex range [lo, hi) each partition owns, and (connected
    components) `labels_sent`, the labels the cut's messages held (a label most of a message's
    vertices share counts once a message)."""

    partitions: int
    workers: list
    devices: dict
    merge_rounds: int
    cut_pairs: int = 0
    merged_pairs: int = 0
    seconds: float = 0.0
    rounds: int = 0
    extra: dict = field(default_factory=dict)


def local_gpu(ops, n: int, kind: str, a, b, m: int):
    """Labels (int32, device) of the partition's own components: `a`, `b` the device CSR (global
    indptr of n + 1 offsets, indices) or edge list (src, dst) of m edges (host edges are split and
    linked as they upload: `split_linked`)."""
    from ..graph.components import afforest, edge_components

    if kind == "csr":
        return afforest(ops.run, ops.empty, a, b, n, False)
    return edge_components(ops.run, ops.empty, n, a, b, m)


def cut_gpu(ops, n: int, lo: int, hi: int, labels, touched, bounds) -> list:
    """The cut as one message an owner (`_messages`): bit i of an owner's bits (uint8, lowest first)
    says its vertex bounds[q] + i lies outside [lo, hi) and one of the device id arrays `touched`
    ((ids, count) each) names it; the message carries this partition's labels of those vertices in
    order. Where a common label is found (`_common`), only the others travel, marked by bits."""
    from .. import compaction
    from . import steps

    bounds = np.asarray(bounds, np.int64)
    sizes = np.diff(bounds)
    offs = _byte_offsets(sizes)
    if n == 0:
        return _messages(np.zeros(int(offs[-1]), np.uint8), offs, -1, None, np.zeros(0, np.int32))
    flags = marked(ops, n, steps.mark_outside, touched, np.int64(lo), np.int64(hi))
    bits = ops.empty(max(int(offs[-1]), 1), np.uint8)
    packed(ops, bits, offs, flags, bounds[:-1], sizes)
    host = ops.download(bits)[:int(offs[-1])]
    counts = _counts(host, offs)
    k = int(counts.sum())
    if not k:
        return _messages(host, offs, -1, None, np.zeros(0, np.int32))
    kept = compaction.select(labels, flags)
    at = _sampled(k)
    sample = ops.empty(at.size, np.int32)
    ops.run(steps.take, at.size, [sample, kept, ops.upload(at)])
    common = _common(ops.download(sample))
    if common < 0:
        return _messages(host, offs, -1, None, ops.download(kept))
    odd = ops.empty(k, np.uint8)
    ops.run(steps.mark_unequal, k, [odd, kept, np.int32(common)])
    ooffs = _byte_offsets(counts)
    obits = ops.empty(max(int(ooffs[-1]), 1), np.uint8)
    packed(ops, obits, ooffs, odd, np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    others = ops.read_compacted(kept, odd, k)
    return _messages(host, offs, common, (ops.download(obits)[:int(ooffs[-1])], ooffs), others)


SAMPLE = 1024  # cut labels sampled for a common one


def _byte_offsets(sizes: np.ndarray) -> np.ndarray:
    """Where each run of `sizes` bits starts in bytes, one byte-aligned run after another."""
    return np.concatenate([[0], np.cumsum(-(-np.asarray(sizes, np.int64) // 8))]).astype(np.int64)


def _counts(bits: np.ndarray, offs: np.ndarray) -> np.ndarray:
    return np.array([int(np.bitwise_count(bits[offs[q]:offs[q + 1]]).sum()) for q in range(offs.size - 1)], np.int64)


def _sampled(k: int) -> np.ndarray:
    """The positions (int64) of the cut labels sampled out of k: evenly spread, at most SAMPLE."""
    s = min(k, SAMPLE)
    return np.arange(s, dtype=np.int64) * k // max(s, 1)


def _common(sample: np.ndarray) -> int:
    """The label at least half the sampled cut labels carry (the largest component's, on graphs
    with one: most of a cut), or -1 where none does."""
    if not sample.size:
        return -1
    values, counts = np.unique(sample, return_counts=True)
    j = int(np.argmax(counts))
    return int(values[j]) if 2 * int(counts[j]) >= sample.size else -1


def _messages(bits: np.ndarray, offs: np.ndarray, common: int, odd, labels: np.ndarray) -> list:
    """Per owner q: (its bytes of `bits`, common, odd bits, labels): without a common label (-1)
    labels are its cut vertices' labels in order and odd bits are empty; with one, odd bit i (its
    bytes of odd = (bits, offsets)) says its i-th cut vertex's label is the next of labels, the
    others carry `common`. An owner none of whose vertices is cut gets -1 and empty arrays."""
    counts = _counts(bits, offs)
    runs = counts if common < 0 else _counts(*odd)
    at = np.concatenate([[0], np.cumsum(runs)]).astype(np.int64)
    none = np.zeros(0, np.uint8)
    out = []
    for q in range(offs.size - 1):
        m = (bits[offs[q]:offs[q + 1]], common, odd[0][odd[1][q]:odd[1][q + 1]] if common >= 0 else none,
             labels[at[q]:at[q + 1]]) if counts[q] else (none, -1, none, labels[:0])
        if m[1] >= 0 and 2 * runs[q] > counts[q]:  # most of this owner's cut carries another label
            m = (m[0], -1, none, labels_of(m).astype(np.int32))
        out.append(m)
    return out


def labels_of(message) -> np.ndarray:
    """The labels (int64) a cut message carries, one a set bit of its bits, in order."""
    bits, common, odd, labels = message
    if common < 0:
        return np.asarray(labels, np.int64)
    k = int(np.bitwise_count(bits).sum())
    out = np.full(k, common, np.int64)
    out[np.flatnonzero(np.unpackbits(odd, count=k, bitorder="little"))] = labels
    return out


def cut_rows(lo: int, size: int, messages) -> np.ndarray:
    """The (v, their label) int64 rows the cut messages to the owner of [lo, lo + size) carry."""
    rows = [np.stack([lo + np.flatnonzero(np.unpackbits(m[0], count=size, bitorder="little")), labels_of(m)], 1)
            for m in messages if m[0].size]
    return np.concatenate(rows) if rows else np.zeros((0, 2), np.int64)


def contract_gpu(ops, n: int, lo: int, hi: int, labels, messages) -> np.ndarray:
    """(label, root) int32 rows for every label that joining the cut messages sent to the owner of
    [lo, hi) (their labels of its vertices) with this partition's labels moved under a smaller one.
    Each message's labels are made on the device and linked with the owner's where they land."""
    from ..graph import steps as graph_steps
    from . import steps

    messages = [m for m in messages if m[0].size]  # `_messages` gives an owner with no cut vertex no bits
    if not messages:
        return np.zeros((0, 2), np.int32)
    parent, flags, columns = ops.empty(n, np.int32), ops.empty(hi - lo, np.uint8), []
    ops.run(graph_steps.init, n, [parent])
    for b, common, odd, lab in messages:
        k = int(np.bitwise_count(b).sum())
        if common < 0:
            theirs = ops.upload(narrow(lab))
        else:
            theirs = ops.empty(k, np.int32)
            ops.run(steps.set_to, k, [theirs, np.int32(common)])
            if len(lab):
                marks = ops.empty(k, np.uint8)
                ops.run(steps.unpack_bits, k, [marks, ops.upload(odd)])
                ops.run(steps.put_at, len(lab), [theirs, ops.nonzero(marks), ops.upload(narrow(lab))])
        mine = ops.empty(k, np.int32)
        ops.run(steps.unpack_bits, hi - lo, [flags, ops.upload(b)])
        ops.run(steps.take, k, [mine, labels[lo:], ops.nonzero(flags)])
        ops.run(graph_steps.link_edge, k, [parent, theirs, mine])
        columns += [(theirs, k), (mine, k)]
    ops.run(graph_steps.compress, n, [parent])
    return moved_pairs(ops, n, parent, columns)


def settle_gpu(ops, n: int, lo: int, hi: int, labels, shards) -> np.ndarray:
    """The owned vertices' global labels (int32, host): each local label through the union-find of
    the (label, root) rows of every owner's contraction (`shards`), run on this GPU: the set's
    smallest id. Every owner joins the same rows, so no merged mapping travels back to the owners;
    each shard's rows are linked as its pieces land."""
    from ..graph import steps as graph_steps
    from . import steps

    if hi == lo:
        return np.zeros(0, np.int32)
    shards = [s for s in shards if s.shape[0]]
    if not shards:
        return ops.download(labels[lo:hi])
    table = ops.empty(n, np.int32)
    ops.run(graph_steps.init, n, [table])

    def each(flat, first: int, count: int) -> None:  # items of the flat rows: 2 a row
        a, b = first // 2, (first + count) // 2
        if b > a:
            ops.run(steps.link_pairs, b - a, [table, flat[2 * a:2 * b]])
    for s in shards:
        ops.upload_in_pieces(narrow(s).reshape(-1), each)
    ops.run(graph_steps.compress, n, [table])
    out = ops.empty(hi - lo, np.int32)
    ops.run(steps.relabel, hi - lo, [out, table, labels, np.int64(lo)])
    return ops.download(out)


# --- the same phases in NumPy (CPU workers, and the oracle) ----------------------------------
def contract_numpy(labels: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """`contract_gpu` in NumPy: (label, root) int64 rows from the (v, their label) rows `pairs`
    (`cut_rows` of the messages)."""
    from ..graph.components import components_of_edges

    v, theirs = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    if not v.size:
        return np.zeros((0, 2), np.int64)
    mine = labels[v].astype(np.int64)
    ids, inv = np.unique(np.concatenate([theirs, mine]), return_inverse=True)
    parent, _ = components_of_edges(ids.size, inv[:v.size], inv[v.size:])
    moved = parent != np.arange(ids.size)
    return np.stack([ids[moved], ids[parent[moved]]], 1)


# --- a partition on its worker --------------------------------------------------------------
class Partition:
    """A partition resident on its worker: its edges and local labels (device arrays on a GPU
    worker). Moved to another worker, it travels as host arrays and is uploaded again there."""

    def __init__(self, bname, n, lo, hi, kind, a, b, m):
        self.bname, self.n, self.lo, self.hi, self.kind, self.m = bname, n, lo, hi, kind, m
        self.a, self.b, self.labels = a, b, None

    def __getstate__(self):
        d = dict(self.__dict__)
        for k in ("a", "b", "labels"):
            if d[k] is not None and not isinstance(d[k], np.ndarray):
                d[k] = d[k].copy_to_host()
        return d

    def ops(self):
        from ..backend import resolve_backend

        be = resolve_backend(self.bname)
        if be.name == "cuda":
            for k in ("a", "b", "labels"):
                v = getattr(self, k)
                if isinstance(v, np.ndarray):
                    setattr(self, k, be.upload(v))
            return Ops(be)
        return None


def _global_indptr(n: int, lo: int, hi: int, rows: np.ndarray) -> np.ndarray:
    ip = np.empty(n + 1, np.int64)
    ip[:lo + 1] = 0
    ip[lo + 1:hi + 1] = rows[1:]
    ip[hi + 1:] = rows[-1]
    return ip


def _local(bname, n, lo, hi, kind, a, b, bounds):
    """(Runs on a worker.) The partition with its local labels, and its cut split by owner. A CSR
    partition is (rows, indices); an edge partition is a chunk of the edges (an (m, 2) array, or a
    DataFrame chunk and its two columns), checked here and range-checked on the GPU while its
    columns are split there."""
    from ..backend import resolve_backend

    be = resolve_backend(bname)
    if kind == "csr":
        a = _global_indptr(n, lo, hi, np.asarray(a, np.int64))
        b = np.asarray(b)
        m = b.size
    elif _on_a_gpu(a):
        a = _device_edges(a, be.name)
        m = a.shape[0]
    else:
        a = _check_edges(_chunk_edges(a, b))  # b: the columns of a DataFrame chunk
        m = a.shape[0]
    p = Partition(be.name, n, lo, hi, kind, a, b, m)
    if be.name == "cuda":
        ops = Ops(be)
        if kind == "csr":
            p.a, p.b = be.upload(a), be.upload(narrow(b))
            p.labels = local_gpu(ops, n, kind, p.a, p.b, m)
        else:
            p.a, p.b, p.labels = split_linked(ops, n, a)
        touched = [(p.b, m)] + ([(p.a, m)] if kind == "edges" else [])
        return p, cut_gpu(ops, n, lo, hi, p.labels, touched, bounds)
    from ..graph.components import components_of_edges

    if kind == "edges":
        e = _check_range(a, n)
        p.a, p.b = a, b = e[:, 0], e[:, 1]
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(a)) if kind == "csr" else np.asarray(a, np.int64)
    labels, _ = components_of_edges(n, src, b.astype(np.int64))
    p.labels = labels.astype(np.int32)
    flags = np.zeros(n, bool)
    flags[b] = True
    if kind == "edges":
        flags[np.asarray(a)] = True
    flags[lo:hi] = False
    return p, cut_numpy(flags, p.labels, bounds)


def cut_numpy(flags: np.ndarray, labels: np.ndarray, bounds) -> list:
    """`cut_gpu`'s messages from the host flags (bool, one a vertex) and labels."""
    bounds = np.asarray(bounds, np.int64)
    bits = [np.packbits(flags[bounds[q]:bounds[q + 1]], bitorder="little") for q in range(bounds.size - 1)]
    host = np.concatenate([np.zeros(0, np.uint8)] + bits)
    offs = _byte_offsets(np.diff(bounds))
    kept = labels[np.flatnonzero(flags)].astype(np.int32)
    common = _common(kept[_sampled(kept.size)])
    if common < 0:
        return _messages(host, offs, -1, None, kept)
    counts = _counts(host, offs)
    at = np.concatenate([[0], np.cumsum(counts)])
    odd = kept != common
    obits = [np.packbits(odd[at[q]:at[q + 1]], bitorder="little") for q in range(counts.size)]
    return _messages(host, offs, common, (np.concatenate([np.zeros(0, np.uint8)] + obits), _byte_offsets(counts)),
                     kept[odd])


def split_linked(ops, n: int, e):
    """(src, dst, labels): the (m, 2) edges as int32 device columns and the labels of their
    components (`local_gpu`), or a DispatchError if an edge names a vertex outside 0..n-1
    (checked on the device, one flag read back). Host edges: each piece of the upload is split and
    its edges linked as it lands, so the union-find runs while the host stages the pieces after
    it. Edges already on this GPU (a device array) are split and linked where they are."""
    from ..graph import steps as graph_steps
    from . import steps

    m = e.shape[0]
    src, dst = ops.empty(max(m, 1), np.int32), ops.empty(max(m, 1), np.int32)
    parent = ops.empty(n, np.int32)
    if n:
        ops.run(graph_steps.init, n, [parent])
    if m:
        bad = ops.upload(np.zeros(1, np.int32))

        def each(flat, first: int, count: int) -> None:  # items of the flat edges: 2 a row
            lo, hi = first // 2, (first + count) // 2
            piece = [src[lo:hi], dst[lo:hi]]
            rows = flat[2 * lo:2 * hi].reshape(hi - lo, 2)
            ops.run(steps.split_rows, hi - lo, [*piece, rows, np.int64(n), bad])
            if n:  # with no vertices every edge is out of range (and the call raises): nothing to link
                ops.run(graph_steps.link_edge, hi - lo, [parent, *piece])
        if isinstance(e, np.ndarray):
            ops.upload_in_pieces(e.reshape(-1), each)
        else:
            ops.run(steps.split_rows, m, [src, dst, e, np.int64(n), bad])
            if n:
                ops.run(graph_steps.link_edge, m, [parent, src, dst])
        if int(ops.download(bad)[0]):
            _check_range(e if isinstance(e, np.ndarray) else e.copy_to_host(), n)  # says which vertex
    if n:
        ops.run(graph_steps.compress, n, [parent])
    return src, dst, parent


def _contract(p: Partition, *incoming) -> np.ndarray:
    """(Runs on the owner.) (label, root) pairs from the cut messages other partitions sent here."""
    ops = p.ops()
    if ops is None:
        return contract_numpy(p.labels, cut_rows(p.lo, p.hi - p.lo, incoming))
    return contract_gpu(ops, p.n, p.lo, p.hi, p.labels, incoming)


def _settle(p: Partition, *shards: np.ndarray) -> np.ndarray:
    """(Runs on a GPU owner.) The owned vertices' global labels from every owner's shard."""
    return settle_gpu(p.ops(), p.n, p.lo, p.hi, p.labels, shards)


def _final(p: Partition, mapping) -> np.ndarray:
    """(Runs on a CPU owner.) The owned vertices' global labels through the (ids, roots) of the
    distributed union-find."""
    ids, roots = mapping
    table = np.arange(p.n, dtype=np.int64)
    table[ids] = roots
    return table[p.labels[p.lo:p.hi]].astype(np.int32)


def _count(x) -> int:
    """Rows of a shard."""
    return int(x.shape[0])


def _cut_counts(local: tuple) -> tuple[int, int]:
    """(vertices cut, labels sent) of a local result's messages."""
    return (int(sum(np.bitwise_count(m[0]).sum() for m in local[1])),
            int(sum(m[3].size + (m[1] >= 0) for m in local[1])))


# --- the call ------------------------------------------------------------------------------
@cluster.releasing
@cluster.cancelled_as_errors("distributed connected_components")
@cluster.lost_workers_as_errors("distributed connected_components")
@host_memory("distributed connected_components")
def connected_components(indptr: ArrayIn | None = None, indices: ArrayIn | None = None, *, client: Any = None,
                         edges: Any = None, n: int | None = None, backend: "Backend | str | None" = None,
                         partitions: int | None = None, columns: Sequence[str] = ("src", "dst"), gather: bool = True,
                         stats: bool = False) -> Any:
    """Component labels (int32, NumPy) of a graph spread over a Dask cluster, equal to the
    single-GPU `vyre_numba.graph.connected_components`: label[v] is the smallest vertex id in v's
    component, edges taken as undirected.

    The graph is either a host CSR (`indptr`, `indices`, or a SciPy sparse matrix A given whole,
    `connected_components(A)`), cut into `partitions` row ranges (default:
    one per worker), or `edges`: a Dask array of shape (m, 2) or a Dask DataFrame with the two
    `columns`, already spread over the workers (a partition per chunk; then `n`, the vertex count,
    is required). Each worker computes on its own GPU (`backend` None or "cuda"; one worker per GPU,
    as dask_cuda.LocalCUDACluster starts them) or with NumPy (`backend="reference"`).
    `gather=False` leaves the labels on the workers: a Dask array, one chunk per partition's owned
    vertex range, computed (the call waits for it and raises what the workers raised) but not
    brought to the client. With `stats=True` returns (labels, DistributedStats). `client`: the
    dask.distributed Client whose workers compute (None: Dask's default, the one made last)."""
    gather = flag(gather, "gather", "pass True (labels as a NumPy array) or False (a Dask array left on the workers).")
    stats = flag(stats, "stats", "pass True (labels and a DistributedStats) or False (the labels alone).")
    t0 = time.perf_counter()
    if edges is None and (whole_graph(indptr) or is_graph(indptr) or _pair(indptr) or _square(indptr)):
        indptr, indices, _ = graph_arguments(indptr, indices, None, "connected_components")  # or says what it is
    _check_graph_arguments(indptr, indices, edges, n, partitions, columns)  # before a task is submitted
    client = cluster.client_or_default(client)
    table = cluster.worker_table(client)
    workers = list(table)
    bname = cluster.backend_name(backend)
    asked = cluster.ask_devices(client, table, bname)  # answered while the edges are placed
    if edges is not None:
        specs, n, places = _edge_parts(client, edges, n, columns, workers)
    else:
        specs, n, places = _csr_parts(indptr, indices, partitions, workers)
    devices = cluster.checked_devices(asked)
    if not _on_gpus(devices):  # a partition labels every vertex id: its memory grows with n, not with its edges
        cluster.check_memory(table, places, n, BYTES_A_VERTEX, "distributed connected_components")
    k = len(specs)
    bounds = np.array([s[2] for s in specs] + [specs[-1][3]], np.int64) if k else np.zeros(1, np.int64)
    locs = [cluster.submit(client, _local, bname, n, *spec[2:], bounds, worker=w, name="cc-local")
            for spec, w in zip(specs, places)]
    parts = [cluster.part(client, f, 0, w, "cc-partition") for f, w in zip(locs, places)]
    to = [[cluster.submit(client, _pick, f, q, worker=w, name="cc-cut-to") for f, w in zip(locs, places)]
          for q in range(k)]
    shards = [cluster.submit(client, _contract, parts[q], *to[q], worker=places[q], name="cc-contract")
              for q in range(k)]
    if _on_gpus(devices):  # each owner joins every shard on its GPU: one exchange, no mapping sent back
        finals = [cluster.submit(client, _settle, parts[q], *shards, worker=places[q], name="cc-settle")
                  for q in range(k)]
        rounds = int(bool(shards))
    else:
        mapping, rounds = merge(client, shards, places, name="cc-merge")
        finals = [cluster.submit(client, _final, parts[q], mapping, worker=places[q], name="cc-final")
                  for q in range(k)]
    ranges = [(int(s[2]), int(s[3])) for s in specs]
    if gather:
        labels = np.concatenate([np.zeros(0, np.int32)] + client.gather(finals, direct=True))
    else:
        labels = cluster.left_on_workers(finals, ranges)
    if not stats:
        return labels
    counted = client.gather([cluster.submit(client, _cut_counts, f, worker=w, name="cc-count")
                             for f, w in zip(locs, places)])
    cut, sent = sum(c for c, _ in counted), sum(s for _, s in counted)
    merged = sum(client.gather([cluster.submit(client, _count, s, worker=w, name="cc-count")
                                for s, w in zip(shards, places)]))
    return labels, DistributedStats(k, workers, devices, rounds, cut, merged, time.perf_counter() - t0,
                                    extra={"owned_ranges": ranges, "labels_sent": int(sent)})


BYTES_A_VERTEX = 16  # host bytes a CPU partition holds for each vertex id of the graph, at the least (its
# labels, flags and offsets; about 14-40 measured)


def _check_graph_arguments(indptr, indices, edges, n, partitions, columns) -> None:
    """A DispatchError where the arguments do not name one graph of one kind (a CSR, or edges=)."""
    if edges is not None:
        if indptr is not None or indices is not None:
            raise DispatchError("both a CSR and `edges` were given. Fix: pass one graph: (indptr, indices) or edges=.")
        if partitions is not None:
            raise DispatchError("partitions= cuts a CSR; edges= are partitioned by their chunks. Fix: leave "
                                "partitions out and rechunk the edges (edges.rechunk((m // k, 2))) for k partitions.")
        if not hasattr(edges, "columns") and not _default_columns(columns):
            raise DispatchError(f"columns={shown(columns, 60)} names DataFrame columns, but edges is not a DataFrame. "
                                "Fix: leave columns out for a Dask array of (src, dst) rows.")
        if not _is_dask_edges(edges):
            raise DispatchError(f"edges is {a_type(edges)}. Fix: pass a Dask array of shape (m, 2) or a Dask "
                                "DataFrame with the src and dst columns (dask.array.from_array(e, chunks=(k, 2))).")
        if not isinstance(n, INTEGERS) or isinstance(n, bool) or n < 0:
            raise DispatchError(f"n is {shown(n)}. Fix: pass n, the vertex count (one more than the largest vertex "
                                "id).")
        if n >= 2**31:
            raise DispatchError(f"n = {n}; vertex ids are 32-bit. Fix: split the graph into pieces under 2**31 "
                                "vertices.")
        return
    if indptr is None or indices is None:
        what = "no graph was given" if indptr is None and indices is None else \
            f"{'indices' if indices is None else 'indptr'} is missing (a CSR is two arrays)"
        raise DispatchError(f"{what}. Fix: pass indptr and indices (a host CSR), or edges= (a Dask "
                            "array of (src, dst) rows).")
    if n is not None:
        raise DispatchError("n is read from indptr for a CSR. Fix: leave n out (it is for edges=).")
    if not _default_columns(columns):
        raise DispatchError("columns= names the columns of an edges= DataFrame. Fix: leave it out for a CSR.")


def _pick(local: tuple, q: int) -> tuple:
    """The cut message a partition's local result sends to partition q."""
    return local[1][q]


def _on_gpus(devices: dict) -> bool:
    return any(d["backend"] == "cuda" for d in devices.values())


def _csr_parts(indptr, indices, partitions, workers):
    from ..graph.csr import check_csr

    g = check_csr(indptr, indices)
    k = cluster.partition_count(partitions, len(workers))
    weight = g.indptr + np.arange(g.n + 1)  # rows and edges both cost
    cuts = np.searchsorted(weight, np.linspace(0, weight[-1], k + 1), side="left")
    cuts[0], cuts[-1] = 0, g.n
    cuts = np.maximum.accumulate(cuts)
    specs = []
    for p in range(k):
        lo, hi = int(cuts[p]), int(cuts[p + 1])
        rows = g.indptr[lo:hi + 1] - g.indptr[lo]
        specs.append((None, None, lo, hi, "csr", rows, g.indices[g.indptr[lo]:g.indptr[hi]], None))
    return [s[:7] for s in specs], g.n, [workers[p % len(workers)] for p in range(k)]


def _on_a_gpu(chunk) -> bool:
    return hasattr(chunk, "__cuda_array_interface__") and not isinstance(chunk, np.ndarray)


def _device_edges(chunk, bname: str):
    """An edge chunk that lives on this worker's GPU (CuPy, Numba: the CUDA array interface) as
    a Numba device array, without a copy (the producer's stream is waited for), checked."""
    cai = chunk.__cuda_array_interface__
    dt, shape = interface_dtype(cai), tuple(cai["shape"])
    if bname != "cuda":
        raise DispatchError("an edge chunk is a GPU array, but the workers compute with NumPy (the reference "
                            "backend). Fix: pass backend='cuda' with one worker per GPU, or host chunks "
                            "(edges.map_blocks(cupy.asnumpy)).")
    if dt.kind not in "iu" or len(shape) != 2 or shape[1] != 2:
        raise DispatchError(f"an edge chunk has shape {shape} and dtype {dt}; edges are (m, 2) integer rows "
                            "(src, dst). Fix: pass edges.astype('int64') of shape (m, 2).")
    from numba import cuda

    return cuda.as_cuda_array(chunk)


def _chunk_edges(chunk, columns) -> np.ndarray:
    """A chunk of edges as an (m, 2) host array: a Dask array's block (`columns` None) or the two
    `columns` of a DataFrame's partition, each an integer column."""
    if columns is None or not hasattr(chunk, "columns"):
        if hasattr(chunk, "columns"):
            raise DispatchError("an edge chunk is a DataFrame, but edges is a Dask array. Fix: pass the Dask "
                                "DataFrame itself as edges (with columns=), or a Dask array of (m, 2) blocks.")
        if isinstance(chunk, np.ma.MaskedArray):
            raise DispatchError("an edge chunk is a masked array; its mask would be ignored and the masked edges "
                                "joined. Fix: drop the masked rows first (edges[~mask.any(1)]), or pass the chunks' "
                                "data without masks.")
        if hasattr(chunk, "toarray") and hasattr(chunk, "nnz"):  # np.asarray reads it as one object
            raise DispatchError(f"an edge chunk is a sparse matrix ({type(chunk).__name__}); "
                                "edges are dense (m, 2) rows (src, dst). Fix: pass dense chunks, edges.map_blocks("
                                "lambda b: b.toarray(), dtype=edges.dtype); or, where the sparse matrix is the "
                                "graph's adjacency, pass it whole: connected_components(A) (A.tocsr() of all its rows).")
        return np.asarray(chunk)
    cols = []
    for c in columns:
        if c not in chunk.columns:
            raise DispatchError(f"a DataFrame partition has no column {shown(c)}, though the frame's metadata names "
                                "it. Fix: make every partition hold the src and dst columns (check the function that "
                                "builds them).")
        col = chunk[c]
        if hasattr(col, "columns"):
            raise DispatchError(f"a DataFrame partition has more than one column named {shown(c)}. Fix: give the "
                                "columns distinct names (edges.rename(columns=...)).")
        try:
            a = np.asarray(col)
        except TypeError as e:  # GPU DataFrames refuse a silent copy to the host
            raise DispatchError(f"a DataFrame chunk's columns are not host arrays ({e}). Fix: pass a Dask array "
                                "of (m, 2) edges (GPU arrays are read where they are), or host DataFrames "
                                "(edges.to_backend('pandas')).") from None
        if a.dtype.kind not in "iu":
            raise DispatchError(f"column {shown(c)} has dtype {col.dtype} (read as {a.dtype}); vertex ids are "
                                f"integers, none missing. Fix: {_to_ids(columns)}")
        if a.dtype == np.uint64 and a.size and int(a.max()) >= 2**63:
            raise DispatchError(f"column {shown(c)} names vertex {int(a.max())}, past every 32-bit vertex id. Fix: "
                                "pass edges whose ids are below n, the vertex count.")
        cols.append(a.astype(np.int64, copy=False))
    return np.stack(cols, 1)  # each column checked, then widened


def _check_edges(e: np.ndarray) -> np.ndarray:
    if e.dtype.kind not in "iu" or e.ndim != 2 or e.shape[1] != 2:
        raise DispatchError(f"an edge chunk has shape {e.shape} and dtype {e.dtype}; edges are (m, 2) integer "
                            "rows (src, dst). Fix: pass edges.astype('int64') of shape (m, 2).")
    return np.ascontiguousarray(e)


def _check_range(e: np.ndarray, n: int) -> np.ndarray:
    if e.size and (int(e.min()) < 0 or int(e.max()) >= n):
        bad = int(e.min()) if int(e.min()) < 0 else int(e.max())
        room = f"outside 0..{n - 1}" if n else "but n = 0: the graph has no vertices"
        fix = ("pass n = the vertex count (one more than the largest id)" if bad >= 0 else
               "drop the edges with a negative end, or number the vertices from 0 with one mapping for both ends: "
               "ids = np.unique(e); e = np.searchsorted(ids, e); n = ids.size, e being the (m, 2) edges computed "
               "(edges.compute())")
        raise DispatchError(f"an edge names vertex {bad}, {room}. Fix: {fix}.")
    return e


def _edge_parts(client, edges, n, columns, workers):
    n = int(n)  # checked by _check_graph_arguments, before any task
    cluster.own_futures(client, edges, "edges")
    if hasattr(edges, "columns"):
        columns = _frame_columns(edges.columns, columns)
        _check_column_types(edges, columns)  # from the frame's metadata: refused here, not once a partition
        parts = list(edges.to_delayed())
    else:
        columns = None
        if edges.ndim != 2 or edges.shape[1] != 2:
            raise DispatchError(f"edges has shape {edges.shape}. Fix: pass (m, 2) rows of (src, dst).")
        dt = getattr(edges, "dtype", None)  # from the array's metadata: refused here, not once every chunk ran
        if isinstance(dt, np.dtype) and dt.kind not in "iu":
            raise DispatchError(f"edges has dtype {dt}; vertex ids are integers. Fix: pass edges.astype('int64') "
                                "where its values are whole numbers (or the integer ids they stand for).")
        if edges.numblocks[1] != 1:
            edges = edges.rechunk({1: 2})
        parts = list(edges.to_delayed().ravel())
    if len(parts) > cluster.MAX_PARTITIONS:
        raise DispatchError(f"edges has {len(parts)} chunks, and each is a partition, which would exchange "
                            f"{len(parts)}*{len(parts)} messages a round (at most {cluster.MAX_PARTITIONS}). Fix: "
                            "rechunk to fewer, larger chunks (edges.rechunk((m // workers, 2)) or "
                            "edges.repartition(npartitions=workers)).")
    cluster.warn_many(len(parts), len(workers), f"edges has {len(parts)} chunks, each a partition",
                      "rechunk to one chunk a worker (edges.rechunk((m // workers + 1, 2)), or "
                      "edges.repartition(npartitions=workers) for a DataFrame)")
    chunks, places = cluster.placed(client, parts, [workers[i % len(workers)] for i in range(len(parts))],
                                    "edge chunk")  # already-computed chunks (persisted) are not computed again
    k = len(chunks)
    owned = np.linspace(0, n, k + 1).astype(np.int64)
    specs = [(None, None, int(owned[p]), int(owned[p + 1]), "edges", chunks[p], columns) for p in range(k)]
    return specs, n, places


def _check_column_types(edges, columns: tuple) -> None:
    """A DispatchError where the Dask DataFrame's metadata gives a src or dst column a type other
    than a NumPy integer (a float, or pandas' nullable Int64, which may hold missing ids)."""
    dtypes = getattr(edges, "dtypes", None)
    for c in columns:
        dt = dtypes[c] if dtypes is not None else None
        if dt is not None and not (isinstance(dt, np.dtype) and dt.kind in "iu"):
            raise DispatchError(f"column {shown(c)} has dtype {dt}; vertex ids are integers, none missing. Fix: "
                                f"{_to_ids(columns)}")


def _to_ids(columns: tuple) -> str:
    return (f"once no value is missing, convert the columns: edges = edges.astype("
            f"{dict.fromkeys(columns, 'int64')!r}) (or pass the right columns=).")


def _default_columns(columns) -> bool:
    """Whether `columns` is the default ("src", "dst"), which a graph that is no DataFrame ignores."""
    return isinstance(columns, (tuple, list)) and all(isinstance(c, str) for c in columns) and \
        tuple(columns) == ("src", "dst")


def _frame_columns(names, columns) -> tuple:
    """`columns` as the DataFrame's own labels of two distinct columns (as pandas resolves them:
    'src' and np.str_('src') are one column), else a DispatchError."""
    if not (isinstance(columns, (tuple, list)) and len(columns) == 2):
        raise DispatchError(f"columns is {shown(columns, 80)}. Fix: pass columns=(src, dst), the two column names.")
    where = []
    for c in columns:
        try:
            loc = names.get_loc(c)
        except Exception:  # KeyError for a missing name, TypeError or InvalidIndexError for an unhashable one
            raise DispatchError(f"the DataFrame has no column {shown(c, 60)}; its columns are {shown(list(names), 200)}. Fix: "
                                "pass columns=(src, dst) naming two of them.") from None
        if not isinstance(loc, INTEGERS):
            raise DispatchError(f"the DataFrame has more than one column named {shown(c)}. Fix: give the columns "
                                "distinct names (edges.rename(columns=...)).")
        where.append(int(loc))
    if where[0] == where[1]:
        raise DispatchError(f"columns={shown(tuple(columns))} names one column twice. Fix: pass columns=(src, dst), two "
                            "different columns.")
    return tuple(names[i] for i in where)


def _is_dask_edges(edges) -> bool:
    try:
        import dask.array as da
    except ImportError:
        return False
    if isinstance(edges, da.Array):
        return True
    try:
        import dask.dataframe as ddf
    except ImportError:  # dask.dataframe needs pandas and pyarrow
        return False
    return isinstance(edges, ddf.DataFrame)
