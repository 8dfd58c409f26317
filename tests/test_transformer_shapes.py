"""The transformer_shapes demo at its tiny size: parameter counts equal the formulas for both blocks and both whole
models; FlopCounterMode equals 2 x matmul weights x tokens + the attention matmuls; GQA with copied KV heads equals MHA
and a tiled expansion is caught; the broadcasting bugs are caught by shape assertions."""

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t12_design.transformer_shapes")


def test_parameter_counts_equal_the_formulas(tiny):
    checks = checks_by_name(tiny)
    for name in ("swiglu_width", "gpt2_block_is_12d2_13d", "params.block.gpt-2.12kv", "params.block.llama.8kv",
                 "params.block.llama-2-7b.32kv", "params.model.gpt2", "params.model.llama2_7b"):
        assert checks[name]["passed"], name
    assert metric(tiny, "params.gpt2") == pytest.approx(124.439808)  # GPT-2 small with tied embeddings
    assert metric(tiny, "params.llama2_7b") == pytest.approx(6738.415616)
    assert metric(tiny, "params.gpt2_block") == pytest.approx((12 * 768**2 + 13 * 768) / 1e6)


def test_flop_counter_equals_the_formula(tiny):
    checks = checks_by_name(tiny)
    for key in ("gpt2", "llama"):
        assert checks[f"flops.{key}.real_forward"]["passed"]
        assert checks[f"flops.{key}.training_is_3x_forward"]["passed"]
        assert checks[f"flops.{key}.meta_s1024"]["passed"] and checks[f"flops.{key}.meta_s4096"]["passed"]
        assert checks[f"crossover.{key}"]["passed"]
    assert checks["flops.model.gpt2"]["passed"] and checks["flops.model.llama2_7b"]["passed"]
    assert metric(tiny, "crossover.gpt2") == 4 * 768
    assert metric(tiny, "crossover.llama") == 1.5 * 11008
    assert metric(tiny, "crossover.gpt2_over_d") == 4
    assert metric(tiny, "crossover.llama_over_d") == 1.5 * 11008 / 4096  # SwiGLU's 1.5 ff is about 4d again
    # 2N per token plus 4 * seq * d per layer (full square), per token
    gpt2_n = 12 * 12 * 768**2 + 50257 * 768  # matmul weights: 12 d^2 per block, and the tied output matrix
    assert metric(tiny, "flops.gpt2.per_token_s1024") * 1e9 == pytest.approx(2 * gpt2_n + 12 * 4 * 1024 * 768)
    series = next(s for s in tiny["series"] if s["name"] == "flops_per_token")
    assert len(series["lines"]) == 4
    # the counter was run at the crossing itself and on either side of it, not only at powers of two
    for line in series["lines"]:
        star = 3072 if line["label"].startswith("gpt2") else 16512
        assert {star - 1, star, star + 1} <= set(line["x"])
    for key, star in (("gpt2", 3072), ("llama", 16512)):
        assert f"equal at seq {star}" in checks[f"crossover.{key}"]["detail"]


def test_gqa_expansion_and_kv_cache(tiny):
    checks = checks_by_name(tiny)
    assert checks["gqa_equals_mha_with_copied_kv_heads"]["passed"]
    assert checks["gqa_tiled_expansion"]["passed"] and checks["gqa_tiled_expansion"]["expected_failure"]
    assert checks["kv_bytes_formula"]["passed"]
    assert metric(tiny, "kv.mha_per_token") == 512  # 2 x 32 layers x 32 heads x 128 x 2 bytes, in KiB
    assert metric(tiny, "kv.gqa_per_token") == 128 and metric(tiny, "kv.mqa_per_token") == 16
    assert metric(tiny, "kv.gqa_saving") == 4


def test_broadcasting_bugs_are_caught(tiny):
    checks = checks_by_name(tiny)
    assert checks["broadcast.bias_d"]["passed"]
    for name in ("broadcast.bias_column", "broadcast.mse_n1_vs_n"):
        assert checks[name]["passed"] and checks[name]["expected_failure"]
    assert metric(tiny, "mse.broadcast_wrong") > 10 * metric(tiny, "mse.right")
    assert 0.9 < metric(tiny, "scores.std_scaled") < 1.1
    # unscaled, the softmax over 1024 keys is near one-hot; scaled by 1/sqrt(d_head) it is spread out
    assert metric(tiny, "scores.max_weight_unscaled") > 0.5
    assert metric(tiny, "scores.max_weight_scaled") < 0.1


def test_shape_trace_is_recorded(tiny):
    trace = tiny["artifacts"]["shape_trace"]
    assert "(2, 32, 8, 128)" in trace and "(2, 8, 8, 128)" in trace  # Llama q vs k: 32 query heads, 8 KV heads
    assert "(2, 12, 8, 8)" in trace and "(2, 8, 3072)" in trace  # GPT-2 scores and MLP up
