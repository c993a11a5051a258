"""The connected-components steps as Numba kernels under the CUDA simulator (CI has no GPU): the
same Afforest phases as on the device, each step launched over its items, against the NumPy twin."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from simulated import run_script

SCRIPT = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba.graph.components import afforest, components_numpy
    from vyre_numba.graph.csr import check_csr

    from simulated import SimOps, csr

    run = SimOps().run

    rng = np.random.default_rng(0)
    graphs = {
        "empty": (0, [], []), "one": (1, [], []), "self loops": (4, [0, 1, 1], [0, 1, 1]),
        "path": (40, range(39), range(1, 40)), "star": (30, [0] * 29, range(1, 30)),
        "duplicates": (6, [0, 0, 0, 4, 4], [1, 1, 1, 5, 5]),
        "disconnected": (50, rng.integers(0, 25, 30), rng.integers(0, 25, 30)),
        "random": (60, rng.integers(0, 60, 50), rng.integers(0, 60, 50)),
        "reversed path": (30, range(29, 0, -1), range(28, -1, -1)),
    }
    for name, (n, s, d) in graphs.items():
        for symmetric in (True, False):
            indptr, indices = csr(n, list(s), list(d), both=symmetric)
            want, _ = components_numpy(check_csr(indptr, indices))
            got = afforest(run, lambda k, dt: cuda.to_device(np.zeros(k, dt)),
                           cuda.to_device(indptr), cuda.to_device(indices), n, symmetric)
            assert np.array_equal(got.copy_to_host(), want), (name, symmetric, got.copy_to_host(), want)
            print("ok", name, symmetric)
    # every index type a device CSR may have (a uint64 indptr's sum with a signed sample index read as
    # a float under the simulator: an IndexError)
    indptr, indices = csr(60, list(graphs["random"][1]), list(graphs["random"][2]), both=True)
    want, _ = components_numpy(check_csr(indptr, indices))
    for ip, ix in ((np.uint64, np.uint64), (np.uint64, np.int32), (np.uint32, np.uint32), (np.int32, np.int64)):
        got = afforest(run, lambda k, dt: cuda.to_device(np.zeros(k, dt)), cuda.to_device(indptr.astype(ip)),
                       cuda.to_device(indices.astype(ix)), 60, True)
        assert np.array_equal(got.copy_to_host(), want), (ip, ix)
        print("ok types", ip.__name__, ix.__name__)
''')


def test_afforest_steps_match_the_numpy_twin_under_the_cuda_simulator():
    out = run_script(SCRIPT, 600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok ") == 22


CHECK = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba.errors import DispatchError
    from vyre_numba.graph.csr import check_device_csr

    from simulated import SimBackend

    cases = [([0, 2, 1, 3], [0, 1, 2], "indptr decreases"),
             ([0, 2**63 - 1, -2, 3], [0, 1, 2], "indptr decreases"),  # the difference wraps around to a rise
             ([0, 1, 2], [0, 5], "indices are not vertices"), ([1, 2, 3], [0, 1], "indptr runs from 1 to 3")]
    for indptr, indices, fragment in cases:
        try:
            check_device_csr(SimBackend(), cuda.to_device(np.array(indptr, np.int64)),
                             cuda.to_device(np.array(indices, np.int32)), len(indptr) - 1)
        except DispatchError as e:
            assert fragment in str(e) and "Fix:" in str(e), e
            print("refused", fragment)
    assert check_device_csr(SimBackend(), cuda.to_device(np.array([0, 2, 2, 3], np.int64)),
                            cuda.to_device(np.array([1, 2, 0], np.int32)), 3, hub=1) is True
    print("ok")
''')


def test_the_device_csr_check_under_the_cuda_simulator():
    out = run_script(CHECK, 300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("refused ") == 4 and out.stdout.rstrip().endswith("ok")


SYMMETRY = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba.errors import DispatchError
    from vyre_numba.graph.csr import check_csr, check_device_csr, check_symmetric

    from simulated import SimBackend

    def verdict(f):
        try:
            f()
            return "ok"
        except DispatchError as e:
            return str(e)

    rng = np.random.default_rng(5)
    cases = [(3, [0, 2, 3, 3], [1, 1, 0]), (3, [0, 2, 5, 5], [1, 1, 0, 0, 2]), (3, [0, 1, 2, 2], [1, 2]),
             (1, [0, 0], []), (4, [0, 4, 5, 6, 7], [1, 2, 3, 0, 0, 0, 0])]  # duplicates; one-way; empty; a hub
    for _ in range(40):
        n, m = int(rng.integers(1, 30)), int(rng.integers(0, 60))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        if rng.random() < 0.5:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        order = np.argsort(src, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
        cases.append((n, indptr, dst[order]))
    refused = 0
    for n, indptr, indices in cases:
        indptr, indices = np.asarray(indptr, np.int64), np.asarray(indices, np.int32)
        want = verdict(lambda: check_symmetric(check_csr(indptr, indices)))
        got = verdict(lambda: check_device_csr(SimBackend(), cuda.to_device(indptr), cuda.to_device(indices), n,
                                               symmetric=True, call="bfs(A, source)"))
        assert got == want, (n, indptr, indices, got, want)
        refused += want != "ok"
    assert 10 < refused < len(cases) - 10, refused
    print("agreed", len(cases))
    # remembered by contents, not by array: the same arrays changed in place are checked again
    ip, ix = cuda.to_device(np.array([0, 1, 2, 2], np.int64)), cuda.to_device(np.array([1, 0], np.int32))
    import vyre_numba.graph.csr as csr_module
    check_device_csr(SimBackend(), ip, ix, 3, symmetric=True)
    remembered = len(csr_module._SYMMETRIC)
    check_device_csr(SimBackend(), ip, ix, 3, symmetric=True)
    assert len(csr_module._SYMMETRIC) == remembered
    ix.copy_to_device(np.array([2, 0], np.int32))  # 0 -> 2 and 1 -> 0: stored one way only
    assert "is stored and" in verdict(lambda: check_device_csr(SimBackend(), ip, ix, 3, symmetric=True))
    print("remembered by contents")
    for ip, ix, fragment in (([0, 2, 3, 3], [1, -1, 0], "indices are not vertices"),  # the CSR's own error first
                             ([0, 2, 1, 3], [1, 0, 0], "indptr decreases")):
        said = verdict(lambda: check_device_csr(SimBackend(), cuda.to_device(np.array(ip, np.int64)),
                                                cuda.to_device(np.array(ix, np.int32)), 3, symmetric=True))
        assert fragment in said, said
    print("invalid first")
''')


def test_the_device_symmetry_check_agrees_with_the_hosts_under_the_cuda_simulator():
    """Regression (a carried-over gap): symmetric=True was trusted for device arrays, which then got
    wrong distances or labels where it was broken; now checked on the device as on the host."""
    out = run_script(SYMMETRY, 600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "agreed 45" in out.stdout and "remembered by contents" in out.stdout and "invalid first" in out.stdout


TILES = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba.graph import csr
    from vyre_numba.graph.csr import check_csr, edge_sums_host
    from vyre_numba.graph.csr_kernels import edge_sums

    rng = np.random.default_rng(11)
    kernel = edge_sums(4, 2)  # tiles of 8 entries, offsets of 9 vertices in shared memory
    cases = [(1, [0, 1], [0]), (3, [0, 8, 8, 9], [1] * 8 + [0]), (40, [0] + [0] * 30 + [1] * 10, [5])]
    for _ in range(30):  # hubs, runs of empty vertices (a tile past its shared offsets), ragged last tiles
        n, m = int(rng.integers(1, 50)), int(rng.integers(1, 70))
        src = np.sort(rng.integers(0, n, m) if rng.random() < 0.5 else rng.integers(0, max(1, n // 8), m))
        cases.append((n, np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]), rng.integers(0, n, m)))
    fallback = 0
    for n, indptr, indices in cases:
        indptr, indices = np.asarray(indptr, np.int64), np.asarray(indices, np.int32)
        want = edge_sums_host(check_csr(indptr, indices)).view(np.int64)
        for blocks in (1, 3):  # fewer blocks than tiles: each takes several
            sums = cuda.to_device(np.zeros(2, np.int64))
            kernel[blocks, 4](cuda.to_device(indptr), cuda.to_device(indices), n, csr.SECRET, sums)
            assert sums.copy_to_host().tolist() == want.tolist(), (n, indptr, indices, blocks)
        spans = [np.searchsorted(indptr, [e, min(e + 8, len(indices)) - 1], "right") for e in range(0, len(indices), 8)]
        fallback += any(b - a + 2 > 9 for a, b in spans)
    assert fallback >= 3, fallback
    print("tiles agree", len(cases), "fallback", fallback)
''')


def test_the_device_edge_sums_agree_with_their_numpy_twin_under_the_cuda_simulator():
    """The symmetry check's sums, a tile of entries a block with its vertices' offsets in shared
    memory (or, past that, in indptr), equal `edge_sums_host`'s on every CSR."""
    out = run_script(TILES, 600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tiles agree 33" in out.stdout


@pytest.mark.parametrize("name,args", [("find", (1,)), ("root", (1,)), ("link", (1, 2))])
def test_the_union_find_called_from_host_code_says_it_runs_on_the_device(name, args):
    from vyre_numba import unionfind
    from vyre_numba.errors import DispatchError

    parent = np.arange(4, dtype=np.int32)
    with pytest.raises(DispatchError, match=f"unionfind.{name} is a CUDA device function.*Fix:.*connected_components"):
        getattr(unionfind, name)(parent, *args)
    assert parent.tolist() == [0, 1, 2, 3]


UNION_FIND = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from vyre_numba import unionfind as uf
    from vyre_numba.errors import DispatchError

    @cuda.jit
    def join(parent, u, v, hooked):
        i = cuda.grid(1)
        if i < u.size:
            hooked[i] = uf.link(parent, u[i], v[i])

    @cuda.jit
    def roots(parent, out, found):
        i = cuda.grid(1)
        if i < parent.size:
            out[i] = uf.root(parent, i)
            found[i] = uf.find(parent, i)

    u, v = np.array([3, 5, 1, 7], np.int32), np.array([4, 4, 0, 6], np.int32)
    parent = cuda.to_device(np.arange(8, dtype=np.int32))
    hooked = cuda.to_device(np.zeros(4, np.int32))
    join[1, 32](parent, cuda.to_device(u), cuda.to_device(v), hooked)
    out, found = cuda.to_device(np.zeros(8, np.int32)), cuda.to_device(np.zeros(8, np.int32))
    roots[1, 32](parent, out, found)
    assert hooked.copy_to_host().tolist() == [1, 1, 1, 1], hooked.copy_to_host()
    assert out.copy_to_host().tolist() == found.copy_to_host().tolist() == [0, 0, 2, 3, 3, 3, 6, 6]
    print("kernels ok")
    # no forest (a cycle 1 -> 2 -> 3 -> 1 beside a root 0): -1 said (it spun for ever), and nothing written
    # (regression, a docstring audit: find halved a cycle into a tree and link hooked a made-up root)
    @cuda.jit
    def reads(parent, out):
        i = cuda.grid(1)
        if i < parent.size:
            out[i] = uf.root(parent, i)

    @cuda.jit
    def halves(parent, x, out):  # one thread: what find meets of a cycle does not depend on other threads
        if cuda.grid(1) == 0:
            out[0] = uf.find(parent, x)

    out = cuda.to_device(np.zeros(4, np.int32))
    reads[1, 32](cuda.to_device(np.array([0, 2, 3, 1], np.int32)), out)
    assert out.copy_to_host().tolist() == [0, -1, -1, -1], out.copy_to_host()
    for cycle, xs in ((np.roll(np.arange(1000), -1), (1, 2, 3)), (np.roll(np.arange(1000), 1), (1, 2, 3)),
                      ([1, 0], (0, 1)), ([0, 2, 3, 1], (1, 2, 3)), ([0, 0, 3, 1], (2,))):
        cycle = np.asarray(cycle, np.int32)  # i -> i + 1 (999 -> 0), i -> i - 1 (0 -> 999), a 2-cycle, ...
        for x in xs:  # the last: no cycle, but 2 -> 3 is above its index (3 -> 1 -> 0 is a fine walk)
            kept = cuda.to_device(cycle)
            halves[1, 1](kept, x, out)
            after = kept.copy_to_host()  # halved only where the walk kept the invariant, before the cycle
            assert out.copy_to_host()[0] == -1 and np.all((after == cycle) | (after <= np.arange(after.size))), x
            halves[1, 1](kept, x, out)
            assert out.copy_to_host()[0] == -1, (cycle[:4], x)  # and again: the cycle is still there
    hooked = cuda.to_device(np.zeros(1, np.int32))
    for cycle, u, v in (([0, 2, 3, 1], 0, 2), ([1, 0, 2], 0, 2), (np.roll(np.arange(8), -1), 0, 3)):
        kept = cuda.to_device(np.asarray(cycle, np.int32))  # the last: both walks -1, equal, yet no tree shared
        join[1, 1](kept, cuda.to_device(np.array([u], np.int32)), cuda.to_device(np.array([v], np.int32)), hooked)
        assert hooked.copy_to_host().tolist() == [-1] and kept.copy_to_host().tolist() == list(cycle), cycle
    print("cycles ok")
    # ids outside the array, given or met (a red-team: link(parent, 0, 9) read past the end, and a CAS
    # could have written there): -1, nothing written
    for arr, u, v in (([0, 1, 2, 3], 0, 9), ([0, 1, 2, 3], 9, 0), ([0, 1, 2, 3], -5, 1), ([0, -7, 2, 3], 1, 2),
                      ([0, 0, 1, 2], 0, 2**31 - 1)):
        kept = cuda.to_device(np.asarray(arr, np.int32))
        join[1, 1](kept, cuda.to_device(np.array([u], np.int32)), cuda.to_device(np.array([v], np.int32)), hooked)
        assert hooked.copy_to_host().tolist() == [-1] and kept.copy_to_host().tolist() == arr, (arr, u, v)
        reads[1, 32](kept, out)
        halves[1, 1](kept, u, out)
        assert out.copy_to_host()[0] == (-1 if not 0 <= u < 4 or arr[u] < 0 else 0), (arr, u)
    print("outside ok")
    for name, args in (("find", (1,)), ("root", (1,)), ("link", (1, 2))):
        try:
            getattr(uf, name)(np.arange(4, dtype=np.int32), *args)
        except DispatchError as e:
            assert "device function" in str(e) and "Fix:" in str(e), e
            print("refused", name)
    import pickle
    assert all(pickle.loads(pickle.dumps(getattr(uf, name))) is getattr(uf, name) for name in ("find", "root", "link"))
    print("pickled")
''')


def test_the_union_find_runs_in_kernels_and_refuses_host_calls_under_the_cuda_simulator():
    """And pickles as the module's functions (regression, a red-team: a raw PicklingError there)."""
    out = run_script(UNION_FIND, 300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["kernels", "ok", "cycles", "ok", "outside", "ok", "refused", "find", "refused", "root", "refused", "link",
                                  "pickled"], out.stdout
