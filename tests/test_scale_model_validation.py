"""The cost model of demos/common/cluster_model.py against published figures, pinned here so that a formula
change that breaks one of them fails: the ZeRO paper's memory per GPU, Korthikanti et al.'s activation
formulas, nccl-tests' bus-bandwidth convention, Megatron-LM's FLOP count and measured TFLOP/s (the compute
efficiency's calibration and an out-of-sample check), and the Llama-2 presets' parameter counts."""

from __future__ import annotations

import dataclasses

import pytest

from demos.common import cluster_model as cm
from demos.common import cluster_validation as cv

ROWS = {r["key"]: r for r in cv.validation_rows()}


def test_every_row_names_its_source_and_kind():
    assert len(ROWS) == len(cv.validation_rows())  # keys are unique
    for r in ROWS.values():
        assert r["url"].startswith("https://") and r["source"] and r["kind"] in ("validation", "formula", "calibration")
        assert r["difference"] == pytest.approx((r["model"] - r["published"]) / r["published"])


@pytest.mark.parametrize("stage, published", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_memory_per_gpu(stage, published):
    """Rajbhandari et al., Figure 1: 7.5B parameters on 64 GPUs, (2 + 2 + K) bytes per parameter, K = 12."""
    gb = cm.model_state_bytes(7.5e9, 64, stage)["model_states_bytes"] / 1e9
    assert round(gb, 1) == published  # the paper prints one decimal
    assert ROWS[f"zero.stage{stage}"]["model"] == pytest.approx(gb)
    exact = {0: 16 * 7.5, 1: 4 * 7.5 + 12 * 7.5 / 64, 2: 2 * 7.5 + 14 * 7.5 / 64, 3: 16 * 7.5 / 64}[stage]
    assert gb == pytest.approx(exact, rel=1e-12)


def test_memory_per_gpu_uses_the_same_state_formula():
    c = cm.Config(**cm.MODELS["70B"], dp=64, zero_stage=2)
    mem = cm.memory_per_gpu(c)
    assert mem["model_states_bytes"] == pytest.approx(cm.model_state_bytes(mem["params_total"], 64, 2)[
        "model_states_bytes"])


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_activation_formulas_exactly(t):
    """Table 2 of Korthikanti et al., for GPT-3 175B (s 2048, h 12288, a 96), b = 2."""
    s, b, h, a = 2048, 2, 12288, 96
    gpt3 = dict(layers=96, hidden=h, heads=a, kv_heads=a, ffn_hidden=4 * h, gated_mlp=False, tied_embeddings=True,
                vocab=51200, seq_len=s, microbatch_size=b, tp=t)
    per_layer = lambda **kw: cm.activation_bytes_per_layer(cm.Config(**gpt3, **kw))  # noqa: E731
    sbh = s * b * h
    assert per_layer(sequence_parallel=False) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert per_layer() == pytest.approx(sbh / t * (34 + 5 * a * s / h), rel=1e-12)
    assert per_layer(sequence_parallel=False, recompute="selective") == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert per_layer(recompute="selective") == pytest.approx(sbh * 34 / t, rel=1e-12)
    assert per_layer(recompute="full", sequence_parallel=False) == pytest.approx(2 * sbh, rel=1e-12)
    for key in ("none", "tp8", "tp8_sp", "tp8_selective", "tp8_sp_selective", "full"):
        assert ROWS[f"activations.{key}"]["difference"] == pytest.approx(0, abs=1e-12)


def test_selective_recomputation_savings_and_cost_as_published():
    """Korthikanti et al.: selective recomputation saves ~70% (GPT-3) and ~65% (MT-NLG) of activation memory,
    for 2.7% more FLOPs than a forward pass (GPT-3)."""
    assert round(ROWS["selective_saved.gpt3"]["model"]) == 70
    assert round(ROWS["selective_saved.mtnlg"]["model"]) == 65
    assert round(ROWS["selective_flops.gpt3"]["model"], 1) == 2.7


@pytest.mark.parametrize("kind, factor", [("all_reduce", 2), ("all_gather", 1), ("reduce_scatter", 1)])
@pytest.mark.parametrize("n", [2, 8, 64])
def test_collective_time_is_nccl_tests_bus_bandwidth(kind, factor, n):
    """nccl-tests PERFORMANCE.md: algbw = size / time, busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n. With
    alpha = 0 the model's time for S bytes at link bandwidth B must give busbw = B exactly."""
    size, link = 3e8, 450e9
    seconds = cm.collective_time(kind, size, n, 0.0, 1 / link)
    busbw = size / seconds * factor * (n - 1) / n
    assert busbw == pytest.approx(link, rel=1e-12)


def test_megatron_flop_count_is_eq3():
    """Narayanan et al. 2021 eq. 3, 96 B s l h^2 (1 + s/6h + V/16lh), for every Table 1 model."""
    for row in cv.MEGATRON_TABLE1:
        cfg = cv.megatron_config(row)
        eq3 = cv.megatron_eq3_flops(row[7], 2048, row[3], row[2], 51200)
        assert cm.step_time(cfg)["flops"] == pytest.approx(eq3, rel=1e-12)


def test_attention_flops_are_counted():
    """6 N + 12 L h s per token: at 4k context, +16% for Llama-2-7B and +8% for Llama-2-70B over 6 N."""
    for model, share in (("7B", 0.1625), ("70B", 0.0781)):
        f = cm.flops_per_token(cm.Config(**cm.MODELS[model]))
        assert f["attention"] / (f["model"] - f["attention"]) == pytest.approx(share, abs=5e-4)


def test_efficiency_table_is_the_calibration_rounded():
    assert len(cm.EFFICIENCY_BY_HIDDEN) == len(cv.MEGATRON_TABLE1)
    for (hidden, eff), row in zip(cm.EFFICIENCY_BY_HIDDEN, cv.MEGATRON_TABLE1):
        assert hidden == row[2]
        assert eff == round(cv.calibrate_efficiency(row), 4)
        assert 0 < eff < 1


def test_calibrated_model_reproduces_table1_and_predicts_table2():
    for row in cv.MEGATRON_TABLE1:  # fitted: agrees up to the 4-digit rounding of the efficiency
        assert cv.achieved_tflops(cv.megatron_config(row)) == pytest.approx(row[-1], rel=1e-3)
    for row in cv.MEGATRON_TABLE2_PTDP:  # never fitted: within 5% (measured: +1% to +4%)
        assert cv.achieved_tflops(cv.megatron_config(row)) == pytest.approx(row[-1], rel=0.05)


def test_efficiency_rises_with_model_size_and_is_explicit():
    """The fixed 0.5 made projected MFU fall with size; the calibration rises from 1.7B to 1T as the published
    runs do, and a configuration can still fix its own efficiency."""
    effs = [e for _, e in cm.EFFICIENCY_BY_HIDDEN]
    assert effs[-1] > effs[0] + 0.1
    assert cm.calibrated_efficiency(1000) == effs[0] and cm.calibrated_efficiency(10**6) == effs[-1]
    assert cm.calibrated_efficiency(5120) == pytest.approx((effs[2] + effs[3]) / 2)
    c = cm.Config(**cm.MODELS["70B"], tp=8, pp=4, dp=2, microbatches=16)
    assert cm.step_time(c)["compute_efficiency"] == pytest.approx(cm.calibrated_efficiency(8192))
    assert cm.step_time(dataclasses.replace(c, compute_efficiency=0.4))["compute_efficiency"] == 0.4
    assert "calibrated" in cm.assumptions_text(c) and "Narayanan" in cm.assumptions_text(c)


def test_llama2_presets_have_the_released_shapes():
    assert cm.MODEL_NAMES == {"7B": "Llama-2-7B", "70B": "Llama-2-70B"}
    p70 = cm.config_params(cm.MODELS["70B"])
    assert round(p70 / 1e9, 1) == 69.0  # 68,975,329,280 without the 1.3 M norm weights
    assert p70 == 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 2 * 32000 * 8192
    assert cm.config_params(cm.MODELS["7B"]) == 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 2 * 32000 * 4096
    gpt = dict(layers=24, hidden=2304, heads=24, kv_heads=24, ffn_hidden=4 * 2304, gated_mlp=False,
               tied_embeddings=True, vocab=51200)
    assert cm.config_params(gpt) == cm.params_count(24, 2304, 51200)  # a GPT shape: 12 L h^2 + V h
