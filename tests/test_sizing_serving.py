"""Sizing formulas of serving and vector search: MLA's cache, chunked prefill, KV transfer, swap vs recompute, IVF-PQ."""

from __future__ import annotations

import math

import pytest

from website import sizing


def test_prefill_flops_are_two_per_parameter_plus_causal_attention():
    assert sizing.prefill_flops(1e9, 2, 64, 10) == 2e9 * 10 + 2 * 2 * 64 * 100


def test_mla_caches_one_latent_and_one_rope_key_per_layer():
    r = sizing.mla_kv_cache(61, 512, 64, 128, 192, 128, 8, 128, context=1000)
    assert r["mla_bytes_per_token"] == 61 * 576 * 2 and r["mla_bytes"] == 61 * 576 * 2 * 1000
    assert r["mha_bytes_per_token"] == 61 * 128 * 320 * 2
    assert math.isclose(r["mha_over_mla"], 128 * 320 / 576)
    assert r["gqa_bytes_per_token"] == sizing.kv_cache(61, 8, 128, 1)["bytes_per_token"]


CHUNKED = dict(params=8e9, weight_bytes=2, bandwidth_gbs=3000.0, peak_tflops=1000.0, mfu=0.5, batch=16,
               prompt_tokens=1000, layers=32, kv_heads=8, head_dim=128, context=1024)


def test_a_step_at_the_ridge_costs_what_decoding_alone_costs():
    ridge = sizing.chunked_prefill(token_budget=17, **CHUNKED)["ridge_tokens"]
    at = sizing.chunked_prefill(token_budget=math.floor(ridge), **CHUNKED)
    assert not at["compute_bound"] and at["step_s"] == at["decode_only_s"] == at["kv_s"] + at["weights_s"]
    # decode attention's cache reads run in their own kernels: they add to the step and do not move the ridge
    assert math.isclose(ridge, at["weights_s"] * 1000e12 * 0.5 / (2 * 8e9))
    above = sizing.chunked_prefill(token_budget=math.ceil(ridge) + 100, **CHUNKED)
    assert above["compute_bound"] and above["step_over_decode_only"] > 1
    assert math.isclose(above["compute_s"], 2 * 8e9 * (math.ceil(ridge) + 100) / (1000e12 * 0.5))


def test_chunks_cover_the_prompt_and_the_last_one_is_partly_filled():
    r = sizing.chunked_prefill(token_budget=416, **CHUNKED)  # chunks of 400: 400 + 400 + 200
    assert r["chunk_tokens"] == 400 and r["chunks"] == 3
    last = r["kv_s"] + max(r["weights_s"], 2 * 8e9 * (16 + 200) / (1000e12 * 0.5))
    assert math.isclose(r["prompt_prefill_s"], 2 * r["step_s"] + last)
    whole = sizing.chunked_prefill(token_budget=1016, **CHUNKED)  # one chunk: the unchunked step
    assert whole["chunks"] == 1 and math.isclose(whole["prompt_prefill_s"], whole["unchunked_step_s"])
    with pytest.raises(ValueError, match="no room"):
        sizing.chunked_prefill(token_budget=16, **CHUNKED)


TRANSFER = dict(params=70e9, layers=80, kv_heads=8, head_dim=128, hidden=8192, prompt_tokens=8192, nvlink_gbs=450.0,
                peak_tflops=1000.0, mfu=0.5)


def test_each_gpu_sends_its_own_kv_heads_and_streaming_hides_all_but_one_layer():
    r = sizing.kv_transfer(gpus=8, link_gbs=50.0, **TRANSFER)
    assert r["kv_bytes"] == 80 * 2 * 8 * 128 * 2 * 8192 and r["kv_bytes_per_gpu"] == r["kv_bytes"] / 8
    assert math.isclose(r["one_link_s"], 8 * r["network_s"])
    assert math.isclose(r["prefill_s"], sizing.prefill_flops(70e9, 80, 8192, 8192) / (8 * 1000e12 * 0.5))
    assert r["hidden_by_streaming"] and r["streamed_exposed_s"] == r["layer_transfer_s"]
    sixteen = sizing.kv_transfer(gpus=16, link_gbs=50.0, **TRANSFER)  # 8 KV heads: 8 GPUs send, not 16
    assert sixteen["senders"] == 8 and sixteen["network_s"] == r["network_s"]


def test_a_link_slower_than_the_prefill_leaves_its_excess_exposed():
    r = sizing.kv_transfer(gpus=8, link_gbs=0.5, **TRANSFER)
    assert not r["hidden_by_streaming"]
    # the link is busy from the end of the first layer's prefill until its last byte
    assert math.isclose(r["streamed_exposed_s"], r["layer_prefill_s"] + r["network_s"] - r["prefill_s"])


def test_recomputation_gets_slower_than_swapping_with_length():
    shape = dict(params=8e9, layers=32, kv_heads=8, head_dim=128, hidden=4096, host_link_gbs=63.0,
                 peak_tflops=1000.0, mfu=0.5)
    short, long = (sizing.kv_swap_vs_recompute(context=n, **shape) for n in (512, 32768))
    assert math.isclose(short["swap_s"], 2 * 32 * 2 * 8 * 128 * 2 * 512 / 63e9)
    assert long["recompute_over_swap"] > short["recompute_over_swap"]  # attention grows as the square
    assert long["attention_share"] > short["attention_share"] > 0
    tp = sizing.kv_swap_vs_recompute(context=512, gpus=8, **shape)  # 8 GPUs, 8 links, 8 times the FLOP/s
    assert math.isclose(tp["swap_s"], short["swap_s"] / 8) and math.isclose(tp["recompute_s"], short["recompute_s"] / 8)


def test_ivfpq_memory_is_codes_ids_centroids_and_codebooks():
    r = sizing.ivfpq_memory(1e9, 768, 2**18, 96, gpu_memory_gb=80, other_memory_gb=141)
    assert r["total_bytes"] == 96e9 + 8e9 + 2**18 * 768 * 4 + 256 * 768 * 4
    assert r["flat_bytes"] == 768 * 4 * 1e9 and r["bytes_per_vector"] == 104
    assert (r["gpus"], r["other_gpus"], r["fits"], r["other_fits"]) == (2, 1, False, True)
    assert sizing.ivfpq_memory(1e6, 128, 1024, 16, pq_bits=4)["code_bytes"] == 1e6 * 8  # 16 codes of 4 bits
    with pytest.raises(ValueError, match="does not divide"):
        sizing.ivfpq_memory(1e6, 100, 1024, 16)
