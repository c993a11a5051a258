"""The connected-components steps as Numba kernels under the CUDA simulator (CI has no GPU): the
same Afforest phases as on the device, each step launched over its items, against the NumPy twin."""
from __future__ import annotations

import textwrap

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
''')


def test_afforest_steps_match_the_numpy_twin_under_the_cuda_simulator():
    out = run_script(SCRIPT, 600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok ") == 18


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
