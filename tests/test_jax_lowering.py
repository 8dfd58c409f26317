"""The JAX demo at the tiny size: StableHLO and optimized HLO kept, no fusion before XLA's passes
and fusions after, and the jitted block equal to the float64 reference."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t2_pipeline.jax_lowering")


def test_fusion_count_before_and_after_optimization(tiny_record):
    m = {k: v["value"] for k, v in tiny_record["metrics"].items()}
    assert m["hlo.before.fusions"] == 0
    assert 0 < m["hlo.after.fusions"] <= m["hlo.after.instructions"] < m["hlo.before.instructions"]
    assert m["stablehlo.ops"] > 0 and m["jaxpr.equations"] > 0


def test_artifacts_are_the_real_ir(tiny_record):
    a = tiny_record["artifacts"]
    assert "stablehlo.dot_general" in a["stablehlo"]
    assert "ENTRY" in a["hlo_optimized_entry"] and "fusion(" in a["hlo_optimized_entry"]
    assert "dot_general" in a["jaxpr"]
    assert "metadata=" not in a["hlo_optimized_entry"]  # tool-only attributes stripped


def test_jit_matches_the_reference(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert checks["jax.jit"]["max_abs_err"] < 1e-4 and checks["jax.op_by_op"]["max_abs_err"] < 1e-4
