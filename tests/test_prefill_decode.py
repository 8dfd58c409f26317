"""Prefill vs decode on one model, at the tiny size: the FLOP formula agrees with PyTorch's FLOP
counter, every rate carries its dtype/kind and ceiling, the prefill's FLOP rate rises with the
prompt while the decode step's rows stay at the batch, and every pass names its regime."""

from __future__ import annotations

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t6_inference.prefill_decode")


def test_flop_formula_matches_the_counter_and_the_weight_count(tiny):
    checks = checks_by_name(tiny)
    # "<w> matmul weights = all <n> parameters minus the RMSNorm gains"
    detail = checks["weight_count_matches_model"]["detail"]
    weights, params = detail.split()[0], detail.split("all ")[1].split()[0]
    assert int(weights) < int(params) == round(metric(tiny, "model.params_m") * 1e6)
    # the counter saw 2 FLOPs per matmul weight per token of the 8-token prefill
    assert f"weight matmuls {2 * 8 * int(weights):.3e} counted" in checks["flop_formula_matches_counter"]["detail"]


def test_every_rate_declares_dtype_or_kind_and_its_yardstick_fraction(tiny):
    rates = {k: v for k, v in tiny["metrics"].items() if k.endswith((".tflops", ".gbps"))}
    assert len(rates) == 2 * 7  # 3 prompt lengths + 1 batch, 3 decode batches
    for name, m in rates.items():
        if name.endswith(".tflops"):
            assert m["dtype"] == "float32"
        else:
            assert m["kind"] == "memory"
            assert m.get("cache_resident") is True  # the tiny model fits in any last-level cache: said so
        # on a CPU the one-thread passes are not put against the all-thread ceilings, but against the
        # one-thread yardsticks measured in the same run, stored as fractions
        assert "ceiling" not in m
        frac = tiny["metrics"][name.rsplit(".", 1)[0] + (".of_matmul" if name.endswith(".tflops") else ".of_copy")]
        assert frac["value"] > 0
    assert {"one_thread.copy_gbps", "one_thread.matmul_tflops"} <= set(tiny["metrics"])
    # the matmul yardstick is the best of an independent square product and the model's own FFN GEMMs,
    # each recorded; the longest prefill is also read against the square alone
    square, ffn = metric(tiny, "one_thread.square_matmul_tflops"), metric(tiny, "one_thread.ffn_gemm_tflops")
    assert metric(tiny, "one_thread.matmul_tflops") == max(square, ffn)
    longest = metric(tiny, "prefill.b1.p128.tflops")
    assert abs(metric(tiny, "prefill_longest.of_square_matmul") - longest / square) < 1e-9 * longest / square


def test_intensity_follows_the_rows_per_weight(tiny):
    # fp32 weight matmuls: 2 FLOPs per weight per row over 4 bytes per weight, so intensity ~ rows / 2
    # (attention and KV bytes move it a little)
    for p in (8, 32, 128):
        assert 0.8 * p / 2 < metric(tiny, f"prefill.b1.p{p}.intensity") < 1.2 * p / 2
    assert metric(tiny, "decode.b1.intensity") < 1
    assert metric(tiny, "prefill.b1.p128.intensity") > 100 * metric(tiny, "decode.b1.intensity")


def test_prefill_runs_at_a_higher_flop_rate_than_decode(tiny):
    # 128 rows per weight read vs one: even when overhead dominates, the long prefill gets far more FLOPs/s
    assert metric(tiny, "prefill_over_decode.flop_rate") > 3


def test_table_plot_and_regimes(tiny):
    rows = next(t for t in tiny["tables"] if t["name"] == "passes")["rows"]
    assert len(rows) == 7 and all(r[-1].endswith("cache-resident") for r in rows)
    series = next(s for s in tiny["series"] if s["name"] == "ceiling_fractions")
    assert len(series["lines"]) == 4
    assert tiny["artifacts"]["regimes"].count("\n") == 6
