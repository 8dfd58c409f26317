"""The gptq_awq demo at its tiny size: every quantized weight sits on its group's grid, GPTQ without rounding
returns W, AWQ at alpha = 0 is RTN, and on held-out tokens GPTQ and AWQ lower the output error while raising
the weight error."""

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t5_compression.gptq_awq")
METHODS = ("rtn", "awq", "gptq", "gptq_act", "awq_gptq")


def test_every_variant_is_on_its_grid_and_the_exact_identities_hold(tiny):
    checks = checks_by_name(tiny)
    for bits in (4, 3):
        for method in METHODS:
            assert checks[f"w{bits}.{method}.on_grid"]["passed"]
        assert checks[f"w{bits}.awq_alpha0_is_rtn"]["passed"]
    assert checks["gptq.no_rounding_is_identity"]["max_abs_err"] == 0
    assert checks["gptq.lazy_batch_equals_unbatched"]["max_abs_err"] < 1e-9


def test_gptq_and_awq_beat_round_to_nearest_on_held_out_output(tiny):
    for bits in (4, 3):
        rtn = metric(tiny, f"w{bits}.rtn.out_err")
        for method in ("awq", "gptq", "gptq_act", "awq_gptq"):
            assert metric(tiny, f"w{bits}.{method}.out_err") < 0.9 * rtn
            # ... while the weights themselves move further from W: the objective is the output, not the weight
            assert metric(tiny, f"w{bits}.{method}.weight_err") > 1.1 * metric(tiny, f"w{bits}.rtn.weight_err")
        # act-order matters with outlier channels, and the two methods compose
        assert metric(tiny, f"w{bits}.gptq_act.out_err") < metric(tiny, f"w{bits}.gptq.out_err")
        assert metric(tiny, f"w{bits}.awq_gptq.out_err") < min(metric(tiny, f"w{bits}.awq.out_err"),
                                                                metric(tiny, f"w{bits}.gptq.out_err"))
        assert metric(tiny, f"w{bits}.awq_gptq_over_rtn.out_err") == pytest.approx(
            metric(tiny, f"w{bits}.awq_gptq.out_err") / rtn)
        assert 0 < metric(tiny, f"w{bits}.awq.alpha") < 1
    # three bits cost more than four for every method
    for method in METHODS:
        assert metric(tiny, f"w3.{method}.out_err") > 1.5 * metric(tiny, f"w4.{method}.out_err")


def test_head_metrics_and_bits_per_weight(tiny):
    assert metric(tiny, "w4.bits_per_weight") == 4 + 20 / 128
    assert metric(tiny, "w3.bits_per_weight") == 3 + 19 / 128
    assert tiny["metrics"]["w4.bits_per_weight"]["origin"] == "computed"
    for bits in (4, 3):
        for method in METHODS:
            assert 0 <= metric(tiny, f"w{bits}.{method}.top1_flips") <= 1
            assert metric(tiny, f"w{bits}.{method}.kl") > 0
        assert metric(tiny, f"w{bits}.awq_gptq.kl") < metric(tiny, f"w{bits}.rtn.kl")


def test_few_calibration_tokens_overfit(tiny):
    # GPTQ from the fewest tokens fits those tokens better than it does held-out ones, and generalises worse
    assert metric(tiny, "w3.gptq.few_calib.calib_out_err") < 0.9 * metric(tiny, "w3.gptq.few_calib.out_err")
    assert metric(tiny, "w3.gptq.few_over_full_calib.out_err") > 1
    assert metric(tiny, "w3.gptq.quantize_s") > 0
    assert {s["name"] for s in tiny["series"]} == {"calibration", "awq_alpha"}
