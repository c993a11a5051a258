"""Random programs in every dispatch mode: each mode run the same way on the CUDA backend and on the
reference backend (which defines the semantics), over the same inputs, compared bit for bit; and on
the reference backend, every mode against its own plain dispatch. The modes: async and timed
dispatch, a recorded graph replayed on host inputs and over its own buffers, a resident dispatch, a
two-step resident sequence (plain, fused, recorded and replayed) and a two-round megakernel."""
from __future__ import annotations

import os

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import DispatchConfig, ir
from vyre_numba.backend import Step
from vyre_numba.testing import mismatches

strategies = pytest.importorskip("strategies")
from hypothesis import HealthCheck, given, settings  # noqa: E402

MODES = ("async", "timed", "graph", "resident", "sequence", "fused", "recorded", "megakernel")


def _resident(backend, program: ir.Program, inputs: list, sizes: dict) -> dict:
    """Fresh resident buffers of every bound buffer: inputs uploaded, pure outputs allocated at the
    sizes a host dispatch gave them."""
    given = dict(zip([b.name for b in program.inputs], inputs))
    return {b.name: backend.upload(given[b.name]) if b.name in given else backend.allocate(program, b.name, sizes[b.name])
            for b in program.buffers if not b.is_shared}


def run_mode(backend, mode: str, program: ir.Program, inputs: list, config: DispatchConfig | None,
             sizes: dict) -> list[np.ndarray]:
    """The outputs `mode` gives for the program: the outputs (for two runs or rounds, after both;
    for a recorded graph, a replay's outputs then those of a replay over its own buffers)."""
    if mode == "async":
        return backend.dispatch_async(program, inputs, config).result()
    if mode == "timed":
        return backend.dispatch_timed(program, inputs, config)[0]
    if mode == "graph":
        graph = backend.record_graph(program, inputs, config)
        try:
            return graph.replay(inputs) + graph.replay_resident()
        finally:
            graph.close()
    bufs = _resident(backend, program, inputs, sizes)
    if mode == "resident":
        backend.dispatch_resident(program, bufs, config)
        return [backend.download(bufs[b.name]) for b in program.outputs]
    steps = [Step(program, bufs, config)] * 2
    read = [(bufs[b.name], 0, sizes[b.name]) for b in program.outputs]
    if mode in ("sequence", "fused"):
        return backend.dispatch_sequence(steps, read, fuse=mode == "fused")
    if mode == "recorded":
        recording = backend.record_sequence(steps, read)
        try:
            recording.replay()
            return [backend.download(bufs[b.name]) for b in program.outputs]
        finally:
            recording.close()
    assert mode == "megakernel"
    return backend.megakernel([Step(program, bufs, config)], read, max_rounds=2).run().outputs


def _same(program: ir.Program, got: list, want: list, what: str, sample) -> None:
    assert len(got) == len(want), what
    decls = list(program.outputs) * (len(got) // max(len(program.outputs), 1))
    for decl, g, r in zip(decls, got, want):
        g, r = np.asarray(g), np.asarray(r)
        bad = mismatches(g.astype(r.dtype) if g.dtype != r.dtype and r.dtype.kind != "f" else g, r,
                         bf16=decl.dtype is ir.DataType.BF16)
        assert bad.size == 0, (f"{what}: {decl.name} differs at {bad[:8]}: got {g[bad[:8]]} want {r[bad[:8]]}\n"
                               f"{program}\ninputs={sample[1]}\nconfig={sample[2]}")


def for_random_programs(check, examples: int, least: int) -> None:
    """check(sample, sizes of the outputs, the reference's outputs) for `examples` random programs the
    reference dispatches (the rest are no valid dispatch; the reference says why), at least `least`."""
    ref, checked = vn.get_backend("reference"), []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategies.programs_with_inputs())
    def run(sample):
        program, inputs, config = sample
        try:
            once = ref.dispatch(program, inputs, config)
        except vn.VyreError:
            return
        check(sample, {b.name: int(np.size(o)) for b, o in zip(program.outputs, once)}, once)
        checked.append(1)

    run()
    assert len(checked) >= least, f"only {len(checked)} random programs were comparable"


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_of_the_reference_matches_its_plain_dispatch(mode):
    """The sequences run the program twice (two steps, two rounds; a graph replays twice), so their
    reference is two host dispatches, the second on the first's read_write results."""
    ref = vn.get_backend("reference")

    def check(sample, sizes, once):
        program, inputs, config = sample
        got = run_mode(ref, mode, program, inputs, config, sizes)
        if mode in ("async", "timed", "resident"):
            want = once
        else:
            again = ref.dispatch(program, _after(program, inputs, once), config)
            want = (once + again) if mode == "graph" else again  # pure outputs start from zero each run
        _same(program, got, want, f"reference {mode}", sample)

    for_random_programs(check, int(os.environ.get("VYRE_MODE_EXAMPLES", "25")), 10)


def _after(program: ir.Program, inputs: list, outputs: list) -> list:
    """The inputs of a second run: each read_write buffer as the first left it."""
    out = {b.name: o for b, o in zip(program.outputs, outputs)}
    return [out.get(b.name, x) if b.access is ir.Access.READ_WRITE else x for b, x in zip(program.inputs, inputs)]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_random_programs_match_the_reference_in_every_mode(mode):
    cuda, ref = vn.get_backend("cuda"), vn.get_backend("reference")

    def check(sample, sizes, _):
        program, inputs, config = sample
        want = run_mode(ref, mode, program, inputs, config, sizes)
        _same(program, run_mode(cuda, mode, program, inputs, config, sizes), want, f"cuda {mode}", sample)

    for_random_programs(check, int(os.environ.get("VYRE_GPU_MODE_EXAMPLES", "40")), 20)
