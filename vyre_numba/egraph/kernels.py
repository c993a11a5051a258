"""The e-graph's device phases as Numba kernels (see `device.py` for the loop that runs them).
Imported only where a GPU or the CUDA simulator runs them; no warp intrinsics, so the simulator
runs every one. Rows are e-nodes: op[r], children ch[off[r]:off[r+1]], class cls[r]."""
from __future__ import annotations

from numba import cuda, int32, int64, uint64

from ..unionfind import link, root
from ..workqueue.barrier import grid_wait, grid_wait_reading

EMPTY, TOMB = -1, -2  # hash-table slots: never used, and freed (a freed slot is never reused in a round)
UNIONS, USED, FULL = 0, 1, 2  # control words

_SEED, _CHILD = uint64(0xA24BAED4963EE407), uint64(0x9FB21C651E98DF25)


@cuda.jit(device=True)
def mix64(x):
    x = x ^ (x >> uint64(30))
    x = x * uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> uint64(27))
    x = x * uint64(0x94D049BB133111EB)
    return x ^ (x >> uint64(31))


@cuda.jit(device=True)
def signature(op, off, ch, r):
    """hash(op, arity, children in order): the host's `signature_hash`, bit for bit."""
    start = off[r]
    arity = off[r + 1] - start
    h = mix64((uint64(int64(op[r])) << uint64(32)) ^ uint64(arity) ^ _SEED)
    acc = uint64(0)
    for k in range(arity):
        acc ^= mix64(uint64(int64(ch[start + k])) ^ (uint64(k) << uint64(32)) ^ _CHILD)
    return mix64(h ^ acc)


@cuda.jit(device=True)
def same(op, off, ch, r, qop, qoff, qch, q):
    """Whether row r and row q (of another or the same set of rows) are equal e-nodes, exactly."""
    if op[r] != qop[q]:
        return False
    a = off[r + 1] - off[r]
    if a != qoff[q + 1] - qoff[q]:
        return False
    for k in range(a):
        if ch[off[r] + k] != qch[qoff[q] + k]:
            return False
    return True


@cuda.jit(device=True)
def rewrite_row(r, canon, off, ch, cls, table, slot, rowflag):
    """Row r's children and class made canonical, its stale table entry freed, the row unflagged."""
    rowflag[r] = 0
    for j in range(off[r], off[r + 1]):
        ch[j] = canon[ch[j]]
    cls[r] = canon[cls[r]]
    s = slot[r]
    if s >= 0:
        table[s] = TOMB
        slot[r] = -1


@cuda.jit(device=True)
def insert_row(r, op, off, ch, cls, parent, table, slot, ctl, unite):
    """Probe the table from row r's signature's slot; the first empty slot takes the row
    (compare-and-swap), and a row found equal joins the classes (lock-free union) when `unite`
    is set. Rows with equal signatures meet at one slot, so a group of any size costs one
    comparison a row. A row that finds no slot counts in ctl[FULL]."""
    mask = table.size - 1
    s = int64(signature(op, off, ch, r) & uint64(mask))
    for _ in range(table.size):
        e = table[s]
        if e == EMPTY:
            e = cuda.atomic.cas(table, s, int32(EMPTY), r)
            if e == EMPTY:
                slot[r] = s
                cuda.atomic.add(ctl, USED, 1)
                return
        if e >= 0 and same(op, off, ch, e, op, off, ch, r):
            if unite != 0 and link(parent, cls[r], cls[e]) == 1:  # -1: no forest, nothing hooked
                cuda.atomic.add(ctl, UNIONS, 1)
            return
        s = (s + 1) & mask
    cuda.atomic.add(ctl, FULL, 1)


@cuda.jit(device=True)
def compress_class(c, parent, canon, uses_off, uses, rowflag):
    """Class id c pointed at its root; where the root changed since the last pass, every row with
    a child c (found through `uses`, the rows of each child id as first given) is flagged."""
    r = root(parent, c)
    parent[c] = r
    if r != canon[c]:
        canon[c] = r
        for j in range(uses_off[c], uses_off[c + 1]):
            rowflag[uses[j]] = 1


@cuda.jit
def rewrite(work, count, canon, off, ch, cls, table, slot, rowflag, ctl):
    """`rewrite_row` of each listed row (work[:count]). Thread 0 also clears the control words for
    the `insert` that follows."""
    i = cuda.grid(1)
    if i == 0:
        ctl[UNIONS] = 0
        ctl[USED] = 0
        ctl[FULL] = 0
    if i < count:
        rewrite_row(work[i], canon, off, ch, cls, table, slot, rowflag)


@cuda.jit
def insert(work, count, op, off, ch, cls, parent, table, slot, ctl, unite):
    """`insert_row` of each listed row (work[:count]); a row that finds no slot counts in ctl[FULL]
    (the host grows the table and repeats the round)."""
    i = cuda.grid(1)
    if i < count:
        insert_row(int32(work[i]), op, off, ch, cls, parent, table, slot, ctl, unite)


@cuda.jit
def compress(parent, canon, uses_off, uses, rowflag):
    """`compress_class` of every class id, so the next round revisits only the rows flagged."""
    c = cuda.grid(1)
    if c < parent.size:
        compress_class(c, parent, canon, uses_off, uses, rowflag)


# the words of `rounds_on_device`'s st (int64): the control words first, as `insert_row` counts them
COUNT, TOUCHED, ROUNDS, WAITS, OUTCOME = 3, 5, 6, 7, 8  # COUNT and COUNT + 1: the rows listed, by round parity
CONVERGED, PAUSED, HANDED_BACK, TABLE_FULL, TIMED_OUT = 0, 1, 2, 3, 4  # st[OUTCOME]


@cuda.jit
def rounds_on_device(op, off, ch, cls, parent, canon, uses_off, uses, rowflag, table, slot, work, n, n_classes,
                     rounds, limit, room, bar, spins, st):
    """Rebuild rounds in one persistent launch (no more blocks than fit at once), a grid barrier
    after each phase, with no host round trip a round:
        list:     each flagged row (of n) appended to `work` and rewritten (`rewrite_row`)
        insert:   each listed row (`insert_row`)
        compress: every class id (`compress_class`), flagging the next round's rows
    Every way out is taken by every block alike: each reads the words it decides on after a
    barrier and before any block can change them (a round's list is counted in st[COUNT + round
    % 2], so the next round's count starts from zero while this one's is still read). Ends when a list is empty (CONVERGED); after `rounds`
    rounds, with a list made but not rewritten (PAUSED); when a list holds more than `limit` rows
    or would fill the table past `room` claimed slots (HANDED_BACK: the listed rows flagged again,
    as they were but canonical and out of the table); after a round in which a row found no slot
    (TABLE_FULL); or where a block waited `spins` polls at a barrier (TIMED_OUT, st and the rows
    then unfinished). bar and st must be zero at launch; st[OUTCOME] is written last.
    Rewrite and insert stay apart, a barrier between. A version whose thread rewrote its row and
    probed at once touched other rows than the host's rounds on the GPU (6,524 against 6,521): a
    thread may read another block's freed table entry stale from its multiprocessor's cache, so two
    equal rows can each join the other's freed entry and leave their group with none."""
    ok = cuda.shared.array(1, int32)
    seen = cuda.shared.array(2, int64)  # the decision words, read once a block (grid_wait_reading)
    tid = cuda.threadIdx.x
    blocks = cuda.gridDim.x
    i0 = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    waits = int64(0)
    done = int64(0)
    used = int64(0)  # st[USED] as the last round left it, read where no block can be adding to it
    outcome = CONVERGED
    while True:
        p = COUNT + (done & 1)
        last = done >= rounds
        for r in range(i0, n, stride):
            if rowflag[r] != 0:
                work[cuda.atomic.add(st, p, 1)] = r
                if not last:
                    rewrite_row(r, canon, off, ch, cls, table, slot, rowflag)
        waits += 1
        if not grid_wait_reading(bar, waits * blocks, tid, ok, spins, st, p, p, seen):
            outcome = TIMED_OUT
            break
        count = seen[0]
        if count == 0:
            break
        if last:
            outcome = PAUSED
            break
        if count > limit or used + count > room:
            for i in range(i0, count, stride):
                rowflag[work[i]] = 1
            outcome = HANDED_BACK
            break
        if i0 == 0:
            st[COUNT + 1 - (done & 1)] = 0  # the next round's; each block's thread 0 read it a round ago
            st[TOUCHED] += count
        for i in range(i0, count, stride):
            insert_row(int32(work[i]), op, off, ch, cls, parent, table, slot, st, 1)
        waits += 1
        if not grid_wait(bar, waits * blocks, tid, ok, spins):
            outcome = TIMED_OUT
            break
        for c in range(i0, n_classes, stride):
            compress_class(c, parent, canon, uses_off, uses, rowflag)
        waits += 1
        if not grid_wait_reading(bar, waits * blocks, tid, ok, spins, st, USED, FULL, seen):
            outcome = TIMED_OUT
            break
        done += 1
        used = seen[0]  # no insert runs until every block has passed the next barrier
        if seen[1] != 0:
            outcome = TABLE_FULL
            break
    if i0 == 0:
        st[ROUNDS] = done
        st[WAITS] = waits
        cuda.threadfence()
        st[OUTCOME] = outcome


@cuda.jit
def count_uses(off, ch, counts):
    """counts[c]: how many children (of every row) are class id c."""
    r = cuda.grid(1)
    if r < off.size - 1:
        for j in range(off[r], off[r + 1]):
            cuda.atomic.add(counts, ch[j], 1)


@cuda.jit
def index_uses(off, ch, cursor, uses):
    """Each row written into the `uses` list of each of its children (cursor: each list's next slot)."""
    r = cuda.grid(1)
    if r < off.size - 1:
        for j in range(off[r], off[r + 1]):
            uses[cuda.atomic.add(cursor, ch[j], 1)] = r


@cuda.jit
def fill(a, value):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = value


@cuda.jit
def link_pairs(a, b, parent, ctl):
    """Union of the classes of a[k] and b[k] for every k."""
    k = cuda.grid(1)
    if k < a.size:
        if link(parent, int32(a[k]), int32(b[k])) == 1:
            cuda.atomic.add(ctl, UNIONS, 1)


@cuda.jit
def find_ids(ids, parent, out):
    k = cuda.grid(1)
    if k < ids.size:
        out[k] = root(parent, ids[k])


@cuda.jit
def canonical_classes(cls, canon):
    r = cuda.grid(1)
    if r < cls.size:
        cls[r] = canon[cls[r]]


@cuda.jit
def lookup(qop, qoff, qch, op, off, ch, cls, canon, table, out):
    """The class of the row equal to query q (whose children are canonicalised first), or -1."""
    q = cuda.grid(1)
    if q < out.size:
        for j in range(qoff[q], qoff[q + 1]):
            qch[j] = canon[qch[j]]
        mask = table.size - 1
        s = int64(signature(qop, qoff, qch, q) & uint64(mask))
        out[q] = -1
        for _ in range(table.size):
            e = table[s]
            if e == EMPTY:
                return
            if e >= 0 and same(op, off, ch, e, qop, qoff, qch, q):
                out[q] = canon[cls[e]]
                return
            s = (s + 1) & mask


@cuda.jit(device=True)
def entry(op, off, ch, table, r):
    """The table slot holding the row equal to row r (every row's signature is in the table)."""
    mask = table.size - 1
    s = int64(signature(op, off, ch, r) & uint64(mask))
    for _ in range(table.size):
        e = table[s]
        if e == EMPTY:
            return -1
        if e >= 0 and same(op, off, ch, e, op, off, ch, r):
            return s
        s = (s + 1) & mask
    return -1


@cuda.jit
def group_min(op, off, ch, cls, table, low):
    """low[slot]: the smallest class among the rows of each signature group."""
    r = cuda.grid(1)
    if r < op.size:
        s = entry(op, off, ch, table, r)
        if s >= 0:
            cuda.atomic.min(low, s, cls[r])


@cuda.jit
def congruent_pairs(op, off, ch, cls, table, low, pairs, ctl):
    """(smallest class of the group, class) for every row in another class than its group's
    smallest; pairs past the buffer's capacity are counted, not written."""
    r = cuda.grid(1)
    if r < op.size:
        s = entry(op, off, ch, table, r)
        if s >= 0 and low[s] != cls[r]:
            k = cuda.atomic.add(ctl, UNIONS, 1)
            if k < pairs.shape[0]:
                pairs[k, 0] = low[s]
                pairs[k, 1] = cls[r]
