"""Property tests over generated programs (strategies in tests/strategies.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import strategies as S
from vyre_numba import ir
from vyre_numba.errors import IRValidationError, VyreError

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(S.well_typed_programs())
def test_json_round_trip_is_exact_and_keeps_the_digest(p):
    text = p.to_json()
    q = ir.Program.from_json(text)
    assert q == p
    assert q.to_json() == text
    assert q.digest() == p.digest() and hash(q) == hash(p)


@FAST
@given(S.well_typed_programs())
def test_well_typed_programs_validate_clean(p):
    diags = ir.validate(p)
    assert diags == [], "\n".join(map(str, diags)) + "\n" + str(p)
    assert ir.check(p) is p


@FAST
@given(S.well_typed_programs())
def test_str_never_crashes(p):
    text = str(p)
    assert text.startswith(f"program {p.name} workgroup(") and text.endswith("}")
    assert len(text.splitlines()) >= 2 + len(p.buffers) + len(p.entry)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(S.ill_typed_programs())
def test_validate_never_crashes_on_ill_typed_programs(p):
    if isinstance(p, IRValidationError):  # refused while being built: a clear error is the point
        assert "Fix:" in str(p) and str(p).rsplit("Fix:", 1)[1].strip(), str(p)
        return
    diags = ir.validate(p)
    assert isinstance(diags, list)
    for d in diags:
        assert isinstance(d, ir.Diagnostic) and isinstance(d.where, str) and d.where
        assert "Fix:" in d.message and d.message.rsplit("Fix:", 1)[1].strip(), d.message
    if diags:
        with pytest.raises(IRValidationError) as info:
            ir.check(p)
        assert info.value.diagnostics == diags
    else:
        assert ir.check(p) is p


@FAST
@given(S.programs_with_inputs())
def test_programs_with_inputs_are_valid_and_bindable(case):
    from vyre_numba.bindings import bind

    program, inputs, config = case
    assert ir.validate(program) == [], str(program)
    assert "grid_sync" not in program.capabilities
    assert len(inputs) == len(program.inputs)
    for b, arr in zip(program.inputs, inputs):
        assert arr.dtype == b.dtype.storage and arr.ndim == 1
    binding = bind(program, inputs, config)
    assert binding.workgroup == program.workgroup_size
    assert ir.Program.from_json(program.to_json()) == program


@FAST
@given(S.programs_with_inputs())
def test_reference_backend_runs_generated_programs(case):
    reference = pytest.importorskip("vyre_numba.reference",
                                    reason="the reference interpreter (vyre_numba.reference) is not in yet")
    backend = reference.ReferenceBackend()
    program, inputs, config = case
    before = [a.copy() for a in inputs]
    try:
        out = backend.dispatch(program, inputs, config)
    except VyreError:
        return  # a clear, documented error is acceptable; anything else is a bug
    assert len(out) == len(program.outputs)
    for b, arr in zip(program.outputs, out):
        assert isinstance(arr, np.ndarray) and arr.dtype == b.dtype.storage
    for a, b in zip(inputs, before):  # inputs are never modified
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    # the programs are race-free and order-independent: a second run gives the same bits
    again = backend.dispatch(program, inputs, config)
    for x, y in zip(out, again):
        np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))
