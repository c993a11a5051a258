"""Device work queues: the NumPy twin, bad arguments, the scenarios of queue_exercise.py under
the CUDA simulator (CI) and on the GPU, and a fixpoint step that pushes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vyre_numba.errors import DispatchError
from vyre_numba.workqueue import QueueModel, WorkQueue
from vyre_numba.workqueue.device import push

HERE = Path(__file__).resolve().parent


def test_the_model_refuses_at_capacity_and_keeps_what_it_took():
    q = QueueModel(3, np.int32)
    assert [q.push(v) for v in (5, 6, 7, 8, 9)] == [True, True, True, False, False]
    assert (q.size(), q.overflowed()) == (3, 2)
    assert q.drain().tolist() == [5, 6, 7] and q.size() == 0 and q.push(1)


@pytest.mark.parametrize("kw,fragment", [
    ({"capacity": 0}, "capacity=0"), ({"capacity": True}, "capacity=True"), ({"capacity": 2.5}, "capacity=2.5"),
    ({"dtype": "not a type"}, "not a NumPy type"), ({"dtype": np.bool_}, "cannot be queued"),
    ({"dtype": object}, "cannot be queued"),
])
def test_bad_queues_are_refused_before_any_device_work(kw, fragment):
    args = {"capacity": 8, "dtype": np.int32} | kw
    with pytest.raises(DispatchError, match="Fix:") as e:
        WorkQueue(args["capacity"], args["dtype"])
    assert fragment in str(e.value)


def test_queue_scenarios_under_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, str(HERE / "queue_exercise.py")], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "queue ok" in out.stdout, out.stdout + out.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("n,capacity", [(0, 4), (1, 1), (4096, 1000), (100_000, 100_000), (1_000_003, 65_536)])
def test_gpu_backpressure_loses_nothing(n, capacity):
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_backpressure_loses_nothing(n, capacity)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 100_000])
def test_gpu_consume_and_host_strategies(n):
    sys.path.insert(0, str(HERE))
    import queue_exercise

    queue_exercise.assert_consume_reads_the_count_on_the_device(n)
    queue_exercise.assert_host_push_drain_and_chunks(n)


def spread(i, items, state, seen):
    """A fixpoint step that pushes each item once onto a work queue."""
    if seen[i] == 0:
        if push(items, state, np.int64(i)):
            seen[i] = 1
            return 1
    return 0


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["cooperative", "graph", "relaunch"])
def test_gpu_fixpoint_steps_push_with_backpressure(mode):
    """A queue too small for one round: the step's failed pushes leave `seen` unset, the round
    reports a change, and the host drains between runs until every item is through."""
    from numba import cuda

    from vyre_numba import fixpoint

    n = 50_000
    seen = cuda.to_device(np.zeros(n, np.uint8))
    got = []
    with WorkQueue(20_000, np.int64) as q:
        for _ in range(10):
            r = fixpoint.run(spread, n, [q.items, q.state, seen], mode=mode, max_rounds=1)
            got.append(q.drain().copy_to_host())
            if not r.converged and sum(g.size for g in got) == n:
                break
    assert np.array_equal(np.sort(np.concatenate(got)), np.arange(n))
