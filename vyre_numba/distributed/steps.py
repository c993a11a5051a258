"""Device steps of the distributed phases, for the fixpoint runner's `for_each` (compiled by Numba;
imported only where a GPU or the CUDA simulator runs them)."""
from __future__ import annotations

from numba import cuda, int32, int64, uint64

from ..egraph.kernels import same, signature
from ..unionfind import link

EMPTY = -1  # an owner's table slot that holds no signature
NOBODY = 0xFFFF  # a row sent to no owner (owners are numbered below 256)


def clear(i, a):
    """a[i] = 0."""
    a[i] = 0
    return 0


def split_rows(i, src, dst, e, n, bad):
    """src[i], dst[i] = row i of the (m, 2) edges e; bad[0] = 1 if a vertex is outside 0..n-1
    (that edge then becomes a self-loop of vertex 0, and the call raises)."""
    u = e[i, 0]
    v = e[i, 1]
    if u < 0 or u >= n or v < 0 or v >= n:
        bad[0] = 1
        u = 0
        v = 0
    src[i] = u
    dst[i] = v
    return 0


def mark_outside(i, flags, ids, lo, hi):
    """Flag vertex ids[i] if it lies outside the owned range [lo, hi)."""
    v = ids[i]
    if (v < lo or v >= hi) and flags[v] == 0:  # a hub's byte is read many times, written once
        flags[v] = 1
    return 0


def mark_ids(i, flags, ids):
    """Flag id ids[i]."""
    flags[ids[i]] = 1
    return 0


def mark_roots(i, flags, bits, root):
    """Flag root[i] if bit i of the bytes `bits` (lowest first) is set."""
    if (bits[i >> 3] >> (i & 7)) & 1:
        flags[root[i]] = 1
    return 0


def mark_moved(i, flags, ids, parent):
    """Flag id ids[i] if it is not its own root."""
    x = ids[i]
    if parent[x] != x:
        flags[x] = 1
    return 0


def pack_index(i, out, values):
    """out[i] = (values[i], i) as one 64-bit word: i in the low half, so the word read back on
    the host as two int32 is the row (i, values[i])."""
    out[i] = (uint64(values[i]) << uint64(32)) | uint64(i)
    return 0


def pack_bits(j, bits, flags, lo, size):
    """bits[j] = flags[lo + 8j .. lo + 8j + 7] (within size) as one byte, the first flag lowest."""
    b = 0
    for t in range(8):
        i = 8 * j + t
        if i < size and flags[lo + i] != 0:
            b |= 1 << t
    bits[j] = b
    return 0


def unpack_bits(i, flags, bits):
    """flags[i] = bit i of the bytes `bits`, lowest first."""
    flags[i] = (bits[i >> 3] >> (i & 7)) & 1
    return 0


def take(i, out, a, at):
    """out[i] = a[at[i]]."""
    out[i] = a[at[i]]
    return 0


def mark_unequal(i, flags, a, v):
    """flags[i] = 1 where a[i] is not v, else 0."""
    flags[i] = 1 if a[i] != v else 0
    return 0


def put_at(i, out, at, a):
    """out[at[i]] = a[i]."""
    out[at[i]] = a[i]
    return 0


def columns(i, a, b, pairs):
    """a[i], b[i] = the row i of the flat two-column pairs."""
    a[i] = pairs[2 * i]
    b[i] = pairs[2 * i + 1]
    return 0


def link_pairs(i, parent, pairs):
    """Join the trees of the ids of row i of the flat two-column pairs."""
    link(parent, pairs[2 * i], pairs[2 * i + 1])
    return 0


def relabel(i, out, table, labels, lo):
    """out[i] = table[labels[lo + i]]: an owned vertex's final label through its local one."""
    out[i] = table[labels[lo + i]]
    return 0


def fill_one(i, a):
    """a[i] = 1."""
    a[i] = 1
    return 0


def dirty_rows(r, flags, off, ch, old, new):
    """flags[r] = 1 if a child of row r changed root (old -> new map)."""
    for k in range(off[r], off[r + 1]):
        if old[ch[k]] != new[ch[k]]:
            flags[r] = 1
            return 0
    flags[r] = 0
    return 0


def canon_rows(r, chc, cls, off, ch, eclass, canon):
    """Row r's children and class through the canonical map."""
    for k in range(off[r], off[r + 1]):
        chc[k] = canon[ch[k]]
    cls[r] = canon[eclass[r]]
    return 0


def row_hash(r, h, op, off, chc):
    """h[r]: the signature hash of row r (the host's `signature_hash`, bit for bit)."""
    h[r] = signature(op, off, chc, r)
    return 0


def owner_of(r, dest, flags, h, owners):
    """dest[r]: the owner of row r's hash (hash modulo the owners) if the row is flagged, else NOBODY."""
    dest[r] = uint64(h[r]) % uint64(owners) if flags[r] != 0 else NOBODY
    return 0


def mark_owner(r, sel, dest, o):
    """sel[r] = 1 where row r goes to owner o, else 0."""
    sel[r] = 1 if dest[r] == o else 0
    return 0


def mark_children(r, cflags, off, sel):
    """cflags[k] = sel[r] for every child k of row r."""
    s = sel[r]
    for k in range(off[r], off[r + 1]):
        cflags[k] = s
    return 0


def batch_offsets(j, out, off, rows, cidx, m, mc):
    """out[j] = where row rows[j]'s children start in a batch of the children cidx[:mc] (their
    positions, ascending: the count of those before its first child); out[m] = mc."""
    if j == m:
        out[j] = mc
        return 0
    first = off[rows[j]]
    lo = 0
    hi = mc
    while lo < hi:
        mid = (lo + hi) >> 1
        if cidx[mid] < first:
            lo = mid + 1
        else:
            hi = mid
    out[j] = lo
    return 0


def gather_batch(i, op2, cls2, op, cls, rows):
    """Row i of a batch: the op and class of row rows[i]."""
    r = rows[i]
    op2[i] = op[r]
    cls2[i] = cls[r]
    return 0


def put(i, out, a, at):
    """out[at + i] = a[i]."""
    out[at + i] = a[i]
    return 0


def put_offsets(i, out, off, row0, ch0):
    """out[row0 + i] = off[i] + ch0: a batch's offsets after the rows and children already held."""
    out[row0 + i] = off[i] + ch0
    return 0


def insert_row(i, slot, table, op, off, ch, base):
    """Row base + i into the table by its signature (linear probing): the first empty slot takes it,
    unless a row with the same signature holds a slot on the way; slot[i] = the slot that holds
    its signature (-1 if the table had none free, which its sizing rules out)."""
    r = int32(base + i)
    mask = table.size - 1
    s = int64(signature(op, off, ch, r) & uint64(mask))
    slot[i] = -1
    for _ in range(table.size):
        e = table[s]
        if e == EMPTY:
            e = cuda.atomic.cas(table, s, int32(EMPTY), r)
            if e == EMPTY:
                slot[i] = s
                return 0
        if same(op, off, ch, e, op, off, ch, r):
            slot[i] = s
            return 0
        s = (s + 1) & mask
    return 0


def low_first(i, low, slot, table, cls):
    """low[s] = the class of the row holding slot s, for the slot of row i's signature."""
    s = slot[i]
    if s >= 0:
        low[s] = cls[table[s]]
    return 0


def low_min(i, low, slot, cls, base):
    """low[s] = min(low[s], class of row base + i), s its signature's slot."""
    if slot[i] >= 0:
        cuda.atomic.min(low, slot[i], cls[base + i])
    return 0


def settle(i, pairs, count, low, slot, table, cls, base):
    """Row base + i's pair (its group's smallest class, its class) if it holds no slot and its class
    is another; the row holding its slot takes the smallest class (an exchange, so one row of the
    group reports the pair the old class makes)."""
    r = base + i
    s = slot[i]
    if s < 0:
        return 0
    e = table[s]
    lo = low[s]
    if e != r and cls[r] != lo:
        k = cuda.atomic.add(count, 0, 1)
        if 2 * k + 1 < pairs.size:
            pairs[2 * k] = lo
            pairs[2 * k + 1] = cls[r]
    old = cuda.atomic.exch(cls, e, lo)
    if old != lo:
        k = cuda.atomic.add(count, 0, 1)
        if 2 * k + 1 < pairs.size:
            pairs[2 * k] = lo
            pairs[2 * k + 1] = old
    return 0


def count_held(i, count, slot, table, base):
    """count[1] += 1 if row base + i holds its signature's slot (a new signature); count[2] += 1
    if it found no slot (the table's sizing rules it out; the host checks)."""
    s = slot[i]
    if s < 0:
        cuda.atomic.add(count, 2, 1)
    elif table[s] == base + i:
        cuda.atomic.add(count, 1, 1)
    return 0


def mark_live(s, live, table):
    """live[e] = 1 for the row e that holds slot s, if any."""
    e = table[s]
    if e >= 0:
        live[e] = 1
    return 0


def set_to(i, a, v):
    """a[i] = v."""
    a[i] = v
    return 0


def gather_rows(i, op2, cls2, ch2, off2, op, cls, ch, off, rows):
    """Row rows[i] (op, class, children) copied to row i of a batch whose offsets off2 are written."""
    r = rows[i]
    op2[i] = op[r]
    cls2[i] = cls[r]
    a = off[r]
    b = off2[i]
    for k in range(off[r + 1] - a):
        ch2[b + k] = ch[a + k]
    return 0
