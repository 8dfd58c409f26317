"""QAT at the tiny size: fake quantization rounds exactly and passes gradients straight through, and
fine-tuning with it recovers 2-bit accuracy that PTQ lost, beyond what plain fine-tuning does."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


rec = demo_record("demos.t5_compression.qat")


def test_fake_quant_checks(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    assert checks["fake_quant.forward"]["max_abs_err"] == 0.0  # the same rounding as round(w / s) * s, exactly
    assert {"fake_quant.ste_gradient", "fake_quant.levels", "qat.recovers_w2"} <= set(checks)


def test_qat_recovers(rec):
    m = rec["metrics"]
    assert m["w2_per_channel.ptq.acc"]["value"] < m["w2_per_channel.fp32.acc"]["value"] - 0.03  # PTQ really loses
    assert m["w2_per_channel.qat_gain_min"]["value"] > 0.02
    assert m["w2_per_channel.qat.acc"]["value"] > m["w2_per_channel.finetune_then_ptq.acc"]["value"]
    assert m["w2_per_channel.qat_train_s"]["value"] > 0


def test_cost_against_the_original_training_same_run(rec):
    """QAT's cost is stated against the original training timed in the same run, in steps and in time apart."""
    m = {k: v["value"] for k, v in rec["metrics"].items()}
    assert m["base_steps"] == 30 * 19  # 30 epochs of 1,197 images in batches of 64
    assert m["qat_steps_over_base_steps"] == pytest.approx(m["w2_per_channel.qat_steps"] / m["base_steps"])
    assert rec["metrics"]["qat_steps_over_base_steps"]["origin"] == "computed"
    assert m["qat_over_base_train"] == pytest.approx(m["w2_per_channel.qat_train_s"] / m["base_train_s"])
    assert m["qat_step_over_base_step"] == pytest.approx(m["qat_over_base_train"] / m["qat_steps_over_base_steps"])
    assert "in this run" in rec["metrics"]["base_train_s"]["label"]


def test_cost_against_the_control_same_loop(rec):
    """What fake quantization adds is stated against the same fine-tune without it, timed in the same loop."""
    m = {k: v["value"] for k, v in rec["metrics"].items()}
    assert m["w2_per_channel.control_train_s"] > 0
    assert m["qat_over_control_train"] == pytest.approx(m["w2_per_channel.qat_train_s"] / m["w2_per_channel.control_train_s"])
