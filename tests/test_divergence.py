"""Divergence at the tiny size: the healthy run raises no alarm, the bad batch is found by the gradient
norm at exactly its step (its loss looks ordinary), the FP16 overflow is located by the NaN/Inf hooks in
the module whose weights were scaled, and the 100x learning rate shows a loss spike or a worse loss."""

from __future__ import annotations

from conftest import demo_record


rec = demo_record("demos.t8_training.divergence")


def test_each_break_is_found_and_the_healthy_run_is_quiet(rec):
    checks = {c["name"]: c["passed"] for c in rec["checks"]}
    for name in ("healthy_run_is_quiet", "bad_batch_found", "fp16_overflow_located", "high_lr_found"):
        assert checks[name], name
    assert rec["metrics"]["healthy.first_spike_step"]["value"] == -1
    rows = {r[0]: r for r in rec["tables"][0]["rows"]}
    assert rows["fp16_overflow"][5].startswith("layers.1.")
