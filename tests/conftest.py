"""Shared fixtures for the vyre-numba test suite.

Markers (`gpu`, `slow`) are declared in pyproject.toml and are not registered again here.
Hypothesis profiles: "default" (hypothesis' own defaults) and "ci" (no deadline, fewer
examples); pick one with HYPOTHESIS_PROFILE=ci.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from vyre_numba import ir

settings.register_profile(
    "ci", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def assert_fix(text: str) -> None:
    """Every user-facing error message carries an actionable `Fix: ...` sentence at its end."""
    assert "Fix:" in text, text
    tail = text.rsplit("Fix:", 1)[1].strip()
    assert tail, f"empty Fix sentence in {text!r}"


@pytest.fixture
def scale_program() -> ir.Program:
    """out[i] = a[i] * 2 over f32, workgroup 64: the smallest realistic valid program."""
    return ir.Program(
        [ir.BufferDecl.read("a", 0, "f32"), ir.BufferDecl.output("out", 1, "f32")],
        64,
        [ir.let("i", ir.gid(0)), ir.store("out", ir.var("i"), ir.load("a", ir.var("i")) * 2)],
    )


@pytest.fixture
def every_node_program() -> ir.Program:
    """A valid program that uses every expression and statement kind at least once, with NaN,
    +-inf and -0.0 literals, a workgroup buffer, every buffer role and both barrier scopes."""
    B = ir.BufferDecl
    i = ir.var("i")
    body = [
        ir.let("i", ir.gid(0)),
        ir.let("x", ir.load("a", i)),
        ir.let("n", ir.buf_len("a")),
        ir.let("nan", ir.f32(float("nan"))),
        ir.let("pinf", ir.f64(float("inf"))),
        ir.let("ninf", ir.f16(float("-inf"))),
        ir.let("nz", ir.bf16(-0.0)),
        ir.let("b", ir.boolean(True)),
        ir.let("s", ir.select(ir.lt(ir.var("x"), 0.5), ir.var("x"), ir.fma(ir.var("x"), 2.0, 1.0))),
        ir.let("c", ir.cast(ir.var("x"), "i32") + ir.i32(-3)),
        ir.let("u", ir.unary("popcount", ir.u32(7)) + ir.lid(1) + ir.wgid(2) + ir.num_workgroups(0)),
        ir.let("old", ir.atomic("add", "counter", 0, 1)),
        ir.let("cx", ir.atomic("compare_exchange", "counter", 1, 5, expected=0)),
        ir.let("bal", ir.subgroup_ballot(ir.var("b"))),
        ir.let("shf", ir.subgroup_shuffle(ir.var("u"), ir.subgroup_local_id())),
        ir.let("sga", ir.subgroup_add(ir.var("u")) + ir.subgroup_size()),
        ir.store("tile", ir.lid(0), ir.var("s")),
        ir.barrier("workgroup"),
        ir.if_(ir.var("i") < ir.var("n"),
               [ir.assign("s", ir.load("tile", 0) + 1.0)],
               [ir.return_()]),
        ir.loop("k", 0, 3, [ir.assign("u", ir.var("u") + ir.var("k"))]),
        ir.block(ir.let("inner", ir.logical_and(ir.var("b"), ir.not_(ir.isnan(ir.var("nan"))))),
                 ir.store("flags", i, ir.var("inner"))),
        ir.barrier("grid"),
        ir.store("out", i, ir.var("s")),
        ir.store("io", i, ir.load("io", i) * 3),
    ]
    return ir.Program(
        [B.read("a", 0, "f32"), B.output("out", 1, "f32"), B.read_write("counter", 2, "u32"),
         B.output("flags", 3, "bool"), B.uniform("params", 4, "u32", 4),
         B.read_write("io", 5, "i64"), B.workgroup("tile", 64, "f32")],
        (64, 1, 1), body, name="every_node")


@pytest.fixture
def reference_backend():
    """The reference interpreter's backend; the test is skipped, with the reason, until
    `vyre_numba.reference` exposes ReferenceBackend."""
    mod = pytest.importorskip("vyre_numba.reference", reason="vyre_numba.reference is not written yet")
    if not hasattr(mod, "ReferenceBackend"):
        pytest.skip("vyre_numba.reference has no ReferenceBackend yet")
    return mod.ReferenceBackend()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
