"""Divergence at the tiny size: the healthy run raises no alarm, the bad batch is found by the gradient
norm at exactly its step (its loss looks ordinary), the FP16 overflow is located by the NaN/Inf hooks in
the module whose weights were scaled, and the 100x learning rate shows a loss spike or a worse loss, with
its output logits' log Z inflated. AdamW's one-parameter probes follow their closed forms (a spike's step,
the slow recovery with a high beta2, epsilon's floor), and delayed FP8 scaling saturates after a jump and
flushes values to zero after a drop, where current scaling does neither."""

from __future__ import annotations

import math

import pytest
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


def test_log_z_grows_with_the_learning_rate_and_adam_bounds_the_bad_step(rec):
    m = {name: entry["value"] for name, entry in rec["metrics"].items()}
    # the healthy run's log-normalizer stays near ln V (all logits equal at the start); x100 LR inflates it
    assert abs(m["healthy.max_log_z"] - m["log_vocab"]) < 0.5
    assert m["high_lr.max_log_z"] > 2 * m["healthy.max_log_z"]
    # the bad batch's gradient is exactly B*s times larger; AdamW's per-element normalisation keeps its step small
    assert m["bad_batch.grad_vs_healthy"] == pytest.approx(64.0, rel=1e-3)
    assert m["bad_batch.update_vs_healthy"] < 3
    assert m["bad_batch.grad_vs_healthy"] > 10 * m["bad_batch.update_vs_healthy"]


def test_adam_probes_follow_the_closed_forms(rec):
    m = {name: entry["value"] for name, entry in rec["metrics"].items()}
    assert m["adam.b2_999.spike_step"] == pytest.approx(0.1 / math.sqrt(0.001), rel=0.05)
    assert m["adam.b2_95.spike_step"] == pytest.approx(0.1 / math.sqrt(0.05), rel=0.05)
    assert m["adam.b2_999.steady_step"] == pytest.approx(1.0, rel=1e-3)
    # a spike inflates v: the quiet gradient's step stays small for ~ln((1-beta2) r^2)/(1-beta2) steps (r = 1000)
    assert 4000 < m["adam.b2_999.slowed_steps"] < 7000 and 100 < m["adam.b2_95.slowed_steps"] < 300
    assert m["adam.eps.g1e8_eps1e8.step"] == pytest.approx(0.5, rel=1e-3)
    assert m["adam.eps.g1e10_eps1e8.step"] < 0.05 < 0.99 < m["adam.eps.g1e10_eps1e15.step"]
    names = {c["name"] for c in rec["checks"]}
    assert {"adam_spike_b2_999_matches_bound", "adam_eps_g1e10_eps1e8", "bad_batch_gradient_scaled"} <= names


def test_delayed_fp8_scaling_saturates_after_a_jump_and_loses_precision_after_a_drop(rec):
    m = {name: entry["value"] for name, entry in rec["metrics"].items()}
    assert m["fp8.jump.delayed.saturated"] > 0.5 and m["fp8.jump.current.saturated"] == 0.0
    assert m["fp8.drop.delayed.zeroed"] > 0.05 and m["fp8.drop.current.zeroed"] == 0.0
    assert m["fp8.drop.delayed.rel_error"] > 1.5 * m["fp8.drop.current.rel_error"]
    rows = {(r[0], r[1]): r for t in rec["tables"] if t["name"] == "fp8_history" for r in t["rows"]}
    assert set(rows) == {("jump", "delayed"), ("jump", "current"), ("drop", "delayed"), ("drop", "current")}
