"""Divergence at the tiny size: the healthy run raises no alarm, the bad batch is found by the gradient
norm at exactly its step (its loss looks ordinary), the FP16 overflow is located by the NaN/Inf hooks in
the module whose weights were scaled, and the 100x learning rate shows a loss spike or a worse loss."""

from __future__ import annotations

from conftest import demo_record


rec = demo_record("demos.t8_training.divergence")


def test_each_break_is_found_and_the_healthy_run_is_quiet(rec):
    m = {name: entry["value"] for name, entry in rec["metrics"].items()}
    assert m["healthy.first_spike_step"] == -1
    rows = {r[0]: r for r in rec["tables"][0]["rows"]}
    # the bad batch (step 10 at the tiny size) shows in the gradient norm only, ~30x the healthy run's largest
    assert rows["bad_batch"][2] is None and rows["bad_batch"][3] == 10
    assert m["bad_batch.max_grad_norm"] > 10 * m["healthy.max_grad_norm"]
    assert rows["fp16_overflow"][1] == rows["fp16_overflow"][6] + 1  # the run stops at its first non-finite output
    assert rows["fp16_overflow"][5].startswith("layers.1.")
