"""Mixed precision at the tiny size: FP16 without loss scaling flushes small gradients to zero, a loss scale
brings them back, BF16 loses none; GradScaler skips the steps whose gradients overflow and otherwise trains
like FP32 skipping the same steps; FP8 E4M3 without a per-tensor scale loses almost everything."""

from __future__ import annotations

from conftest import demo_record, metric


rec = demo_record("demos.t8_training.mixed_precision")




def test_gradscaler_halves_its_scale_on_each_skipped_step(rec):
    # the scale before each step: 2^28 at the start, then halved after every overflowing step, never grown
    # (growth_interval 2000 is longer than the run); the last step's own halving is not in the series
    scales = next(s for s in rec["series"] if s["name"] == "scale")["lines"][0]["y"]
    assert scales[0] == 2.0**28 and all(b in (a, a / 2) for a, b in zip(scales, scales[1:])), scales
    halvings = sum(b == a / 2 for a, b in zip(scales, scales[1:]))
    assert halvings in (metric(rec, "gradscaler.skipped_steps"), metric(rec, "gradscaler.skipped_steps") - 1)


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
