"""Activation checkpointing at the tiny size: every variant gives the plain run's gradients bit for bit,
and checkpointing more layers lowers the peak (every layer < every 2nd < none) while costing time."""

from __future__ import annotations

from conftest import demo_record, metric


rec = demo_record("demos.t8_training.activation_checkpointing")




def test_gradients_identical(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    for name in ("every_layer", "every_2nd", "every_4th"):
        assert checks[f"{name}.same_gradients"]["passed"]
    assert all(c["passed"] for c in rec["checks"])


def test_memory_falls_as_more_layers_are_checkpointed(rec):
    assert metric(rec, "every_layer.peak_mb") < metric(rec, "every_2nd.peak_mb") <= metric(rec, "every_4th.peak_mb")
    assert metric(rec, "every_4th.peak_mb") < metric(rec, "none.peak_mb")
    assert metric(rec, "every_layer.peak_vs_none") < 0.8


def test_recomputation_costs_time(rec):
    assert metric(rec, "every_layer.time_vs_none") > 1.0
