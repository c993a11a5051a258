"""Device steps of the distributed phases, for the fixpoint runner's `for_each` (compiled by Numba;
imported only where a GPU or the CUDA simulator runs them)."""
from __future__ import annotations

from numba import uint64

from ..egraph.kernels import signature


def clear(i, a):
    """a[i] = 0."""
    a[i] = 0
    return 0


def split_edges(i, src, dst, e, n, bad):
    """src[i], dst[i] = the i-th (src, dst) row of the flat edges e; bad[0] = 1 if a vertex is
    outside 0..n-1 (that edge then becomes a self-loop of vertex 0, and the call raises)."""
    u = e[2 * i]
    v = e[2 * i + 1]
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
    if v < lo or v >= hi:
        flags[v] = 1
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


def take_owned(i, out, at, labels, pos, lo):
    """out[at + i] = labels[lo + pos[i]]: an owned vertex's label, by its position in the range."""
    out[at + i] = labels[lo + pos[i]]
    return 0


def columns(i, a, b, pairs):
    """a[i], b[i] = the row i of the flat two-column pairs."""
    a[i] = pairs[2 * i]
    b[i] = pairs[2 * i + 1]
    return 0


def assign_pairs(i, table, pairs):
    """table[id] = root for the row i of the flat (id, root) pairs."""
    table[pairs[2 * i]] = pairs[2 * i + 1]
    return 0


def assign(i, table, ids, values):
    """table[ids[i]] = values[i]."""
    table[ids[i]] = values[i]
    return 0


def relabel(i, out, table, labels, lo):
    """out[i] = table[labels[lo + i]]: an owned vertex's final label through its local one."""
    out[i] = table[labels[lo + i]]
    return 0


def fill_one(i, a):
    """a[i] = 1."""
    a[i] = 1
    return 0


def gather_map(c, new, table, old):
    """new[c] = table[old[c]]: a class's root through this round's merges."""
    new[c] = table[old[c]]
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


def child_flags(j, cflags, row_of, flags):
    """cflags[j] = flags of the row child j belongs to."""
    cflags[j] = flags[row_of[j]]
    return 0
