"""Mixed precision at the tiny size: FP16 without loss scaling flushes small gradients to zero, a loss scale
brings them back, BF16 loses none; GradScaler skips the steps whose gradients overflow and otherwise trains
like FP32 skipping the same steps; FP8 E4M3 without a per-tensor scale loses almost everything."""

from __future__ import annotations

from conftest import demo_record, metric


rec = demo_record("demos.t8_training.mixed_precision")




def test_every_check_passed(rec):
    assert all(c["passed"] for c in rec["checks"]) and len(rec["checks"]) >= 5


def test_fp16_underflow_and_its_cure(rec):
    assert metric(rec, "step0.fp16.lost_fraction") > 0.05
    assert metric(rec, "step0.fp16_scaled.lost_fraction") < 0.1 * metric(rec, "step0.fp16.lost_fraction")
    assert metric(rec, "step0.bf16.lost_fraction") == 0.0
    sweep = [metric(rec, f"sweep.fp16.lost_at_2-{k}") for k in (0, 4, 8, 12, 16)]
    assert sweep == sorted(sweep) and sweep[-1] > 0.5  # smaller gradients, more of them lost


def test_gradscaler_skips_overflowing_steps(rec):
    assert metric(rec, "gradscaler.skipped_steps") >= 1
    assert metric(rec, "gradscaler.final_scale") < 2.0**28
    assert abs(metric(rec, "train.fp16_gradscaler.held_out_loss") - metric(rec, "train.fp32_same_skips.held_out_loss")) < 0.02


def test_fp8_needs_scales(rec):
    assert metric(rec, "fp8.float8_e4m3fn.unscaled.lost_fraction") > 0.9
    assert metric(rec, "fp8.float8_e4m3fn.scaled.lost_fraction") < 0.1
    assert any("scaled_mm" in n["variant"] for n in rec["not_run"])
