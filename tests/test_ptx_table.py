"""Every program of the program table, and random well-typed programs, emit PTX that nvJitLink
assembles for sm_80 and sm_90 — in CI, without a GPU."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import vyre_numba as vn
from vyre_numba import ptx

from program_table import CASES
import strategies


@pytest.mark.parametrize("sm", [80, 90])
def test_every_table_program_assembles(sm):
    done = 0
    for case in CASES:
        config = case.config or vn.DispatchConfig()
        text = ptx.emit(case.program, sm=sm, workgroup=config.workgroup, cooperative=config.cooperative)
        cubin = ptx.assemble(text, sm=sm)
        assert cubin[:4] == b"\x7fELF", case.id
        done += 1
    assert done >= 400


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.well_typed_programs())
def test_random_programs_assemble(program):
    grid = "grid_sync" in program.capabilities
    if grid:
        with pytest.raises(vn.UnsupportedError, match="cooperative=True"):
            ptx.emit(program, sm=90)
    assert ptx.assemble(ptx.emit(program, sm=90, cooperative=grid), sm=90)[:4] == b"\x7fELF"
