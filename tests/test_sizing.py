"""Sizing problems: the computed answers, the check that guards the stated ones, the {{ sizing }} marker."""

from __future__ import annotations

import math
import random

import pytest

from demos.common import cluster_model as cm
from records import datasheets
from records.paths import REPO_ROOT
from scripts import check
from website import markers, render, sizing


@pytest.fixture(scope="module")
def problems():
    return sizing.load_problems()


def test_enough_problems_across_topics(problems):
    assert len(problems) >= 15
    topics = {p.topic for p in problems.values()}
    assert len(topics) >= 5, topics
    pages = {path.stem for path in (REPO_ROOT / "docs" / "topics").glob("*.md")}
    assert topics <= pages  # each links to an existing topic page
    assert {p.formula for p in problems.values()} == set(sizing.FORMULAS)  # every formula is exercised


def test_every_stated_answer_is_its_computation_rounded(problems):
    assert sizing.stated_problems() == []
    for p in problems.values():
        value, tol = sizing.computed_answer(p), sizing.stated_tolerance(p.stated)
        assert abs(value - float(p.stated.replace(",", ""))) <= tol * (1 + 1e-9), p.id


@pytest.mark.parametrize("stated, tol", [("21.5", 0.05), ("137", 0.5), ("1,200", 0.5), ("0.79", 0.005)])
def test_tolerance_is_half_the_last_stated_digit(stated, tol):
    assert math.isclose(sizing.stated_tolerance(stated), tol)


def test_tolerance_refuses_non_numbers():
    with pytest.raises(ValueError):
        sizing.stated_tolerance("about 5")


def _write_variant(tmp_path, old: str, new: str):
    text = sizing.PROBLEMS_FILE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "sizing_problems.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize("old, new", [
    ('stated = "1.34"', 'stated = "1.35"'),  # one digit off: the rounding no longer matches
    ('stated = "295"', 'stated = "295.0"'),  # more digits than the computation supports (295.34)
    ('context = 4096, batch = 1, dtype_bytes = 2 }', 'context = 4096, batch = 2, dtype_bytes = 2 }'),  # input changed
])
def test_the_check_fails_when_a_stated_answer_and_its_computation_disagree(tmp_path, old, new):
    path = _write_variant(tmp_path, old, new)
    errors = sizing.stated_problems(path)
    assert len(errors) == 1 and "stated answer" in errors[0], errors
    report = check.Report()
    check.check_sizing(report, tmp_path, path)
    assert report.errors and "stated answer" in report.errors[0]


def test_the_check_reports_an_unknown_problem_marker(tmp_path):
    (tmp_path / "page.md").write_text("{{ sizing no_such_problem }}\n", encoding="utf-8")
    report = check.Report()
    check.check_sizing(report, tmp_path)
    assert len(report.errors) == 1 and "no_such_problem" in report.errors[0]


def test_the_check_passes_on_the_repository():
    report = check.Report()
    check.check_sizing(report, REPO_ROOT / "docs")
    assert report.errors == []


def test_the_marker_renders_a_worked_answer_folded(problems):
    out = render.render_page("# Page\n\n{{ sizing kv_llama2_70b }}\n\n`{{ sizing kv_llama2_70b }}`\n", "sizing.md")
    assert '??? success "Answer"' in out
    assert "**Answer: 1.342 GB**" in out
    assert "327,680 B" in out  # a worked step: the bytes per token
    assert "`{{ sizing kv_llama2_70b }}`" in out  # inside code: left alone
    with pytest.raises(ValueError, match="no problem"):
        render.render_page("{{ sizing nope }}", "sizing.md")
    nested = sizing.expand("{{ sizing kv_llama2_70b }}", "practice/sizing.md")
    assert "](../topics/attention-and-serving.md)" in nested


def test_the_inline_marker_inserts_the_computed_answer_labelled(problems):
    """{{ sizing ID answer }}: a 30-second answer quotes a computed number without typing it, labelled as such."""
    out = sizing.expand("KV per sequence: {{ sizing kv_llama2_70b answer }}.", "topics/attention-and-serving.md")
    assert out == ("KV per sequence: <span class=\"mm-value\" data-origin=\"computed\" data-sizing=\"kv_llama2_70b\">"
                   "1.342 GB (computed)</span>.")
    assert sizing.markers_in("{{ sizing kv_llama2_70b answer }}") == ["kv_llama2_70b"]  # the check validates its id
    assert not markers.strays("a {{ sizing kv_llama2_70b answer }} b")
    from website.site_pages import first_metric, spoken_words

    assert spoken_words("{{ sizing kv_llama2_70b answer }}") == 3  # "1.342 GB (computed)", as a 30-second answer counts
    assert first_metric("KV: {{ sizing kv_llama2_70b answer }}")[0] == "{{ sizing kv_llama2_70b answer }}"  # its card's number
    with pytest.raises(ValueError, match="no problem"):
        sizing.expand("{{ sizing nope answer }}", "sizing.md")


def test_chip_figures_come_from_the_datasheets(problems):
    sheets = datasheets.sheets()
    assert problems["decode_70b_8xh100"].inputs["bandwidth_gbs"] == sheets["h100"]["memory_gbps"]
    assert problems["days_llama2_70b"].inputs["peak_tflops"] == sheets["a100"]["tflops"]["bfloat16"]
    with pytest.raises(ValueError, match="datasheets.toml has no"):
        sizing.resolve("datasheet:h100.no_such_field", "here")


# -- the formulas are the demos' -----------------------------------------------------------------------

def test_kv_cache_is_the_t6_demo_formula():
    from demos.t6_inference._model import Config

    rng = random.Random(0)
    for _ in range(50):
        heads_kv, head_dim, layers = rng.randint(1, 16), rng.choice([32, 64, 128]), rng.randint(1, 100)
        groups, tokens, batch, nbytes = rng.randint(1, 8), rng.randint(1, 10**5), rng.randint(1, 64), rng.choice([1, 2, 4])
        demo = Config(d_model=heads_kv * groups * head_dim, n_layers=layers, n_heads=heads_kv * groups,
                      n_kv_heads=heads_kv, max_len=tokens)
        got = sizing.kv_cache(layers, heads_kv, head_dim, tokens, batch, nbytes)
        assert got["bytes"] == demo.kv_cache_bytes(batch, tokens, nbytes)


def test_paging_rounds_up_to_whole_blocks():
    r = sizing.kv_cache(1, 1, 1, context=17, batch=3, dtype_bytes=1, block_tokens=16)
    assert r["allocated_bytes"] == 2 * 32 * 3 and r["waste_bytes"] == 2 * 15 * 3
    assert sizing.kv_cache(1, 1, 1, 32, block_tokens=16)["waste_bytes"] == 0


def test_adam_state_bytes_are_the_t8_demo_ones():
    from demos.t8_training._gpt import model_state_bytes_per_param

    for precision in sizing.PRECISIONS:
        assert sizing.state_bytes_per_param(precision, "adam") == model_state_bytes_per_param(precision)
    assert sizing.state_bytes_per_param("mixed", "sgd")["optimizer"] == 4  # the fp32 master weights only


@pytest.mark.parametrize("zero, tp, pp, dp, recompute", [
    (0, 1, 1, 1, "none"), (1, 8, 4, 16, "selective"), (2, 2, 8, 8, "full"), (3, 1, 1, 64, "selective"),
    (3, 4, 2, 3, "none")])
def test_training_memory_is_the_cluster_model_for_mixed_adam(zero, tp, pp, dp, recompute):
    cfg = sizing._cm_config(layers=32, hidden=4096, heads=32, seq_len=2048, microbatches=16, tp=tp, pp=pp, dp=dp,
                            zero_stage=zero, recompute=recompute)
    expected = cm.memory_per_gpu(cfg)
    got = sizing.training_memory(expected["params_total"], 32, 4096, 32, 2048, microbatches=16, zero_stage=zero,
                                 dp=dp, tp=tp, pp=pp, recompute=recompute)
    for key in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"):
        assert math.isclose(got[key], expected[key], rel_tol=1e-12), key


def test_serving_bounds():
    r = sizing.serving(params=1e9, weight_bytes=2, gpus=2, bandwidth_gbs=1000, memory_gb=10, batch=4, context=100,
                       layers=2, kv_heads=2, head_dim=8, kv_bytes=2)
    kv_seq = 2 * 2 * 2 * 8 * 2 * 100  # layers x (K, V) x KV heads x head dim x bytes x tokens
    assert r["kv_bytes_per_sequence"] == kv_seq
    assert math.isclose(r["step_s"], (2e9 + 4 * kv_seq) / 2e12)
    assert r["max_batch"] == math.floor((20e9 - 2e9) / kv_seq)
    assert sizing.serving(params=50e9, weight_bytes=2, gpus=1, bandwidth_gbs=1, memory_gb=80, batch=1, context=1,
                          layers=1, kv_heads=1, head_dim=1)["max_batch"] == 0  # weights alone do not fit


def test_bubble_and_all_reduce_are_the_cluster_model():
    assert math.isclose(sizing.pipeline_bubble(8, 32)["fraction"], 7 / 39)
    assert math.isclose(sizing.pipeline_bubble(8, 32, 4)["over_ideal"], 7 / 128)
    link = cm.LINKS["ib_ndr400"]
    assert sizing.all_reduce(1e9, 4, "ib_ndr400")["seconds"] == cm.collective_time(
        "all_reduce", 1e9, 4, link.alpha_s, link.beta_s_per_byte)


def test_serving_replicates_the_kv_cache_when_gpus_outnumber_kv_heads():
    """Tensor parallelism cannot split fewer KV heads than GPUs: each GPU keeps a whole head, so 16 GPUs
    over 8 KV heads hold the cache twice (more bytes read per step, fewer sequences fit)."""
    shape = dict(params=70e9, weight_bytes=2, bandwidth_gbs=3350, memory_gb=80, batch=8, context=4096,
                 layers=80, kv_heads=8, head_dim=128)
    eight, sixteen = sizing.serving(gpus=8, **shape), sizing.serving(gpus=16, **shape)
    assert eight["kv_replicas"] == 1 and sixteen["kv_replicas"] == 2
    assert sixteen["kv_bytes_per_sequence"] == 2 * eight["kv_bytes_per_sequence"]


def test_all_reduce_algorithms_ring_is_the_cluster_model_and_the_crossover_equalises_ring_and_tree():
    r = sizing.all_reduce_algorithms(4e6, 16, 5.0, 50.0, 0.92)
    assert math.isclose(r["ring_s"], cm.collective_time("all_reduce", 4e6, 16, 5e-6, 1 / 50e9))
    assert r["tree_steps"] == 2 * 4 and r["tree_bytes_per_gpu"] == 8e6 and r["switch_bytes_per_gpu"] == 4e6 * 17 / 16
    at = sizing.all_reduce_algorithms(r["crossover_bytes"], 16, 5.0, 50.0, 0.92)
    assert math.isclose(at["ring_s"], at["tree_s"], rel_tol=1e-9)  # the two times meet there
    below = sizing.all_reduce_algorithms(r["crossover_bytes"] / 2, 16, 5.0, 50.0, 0.92)
    above = sizing.all_reduce_algorithms(r["crossover_bytes"] * 2, 16, 5.0, 50.0, 0.92)
    assert below["tree_s"] < below["ring_s"] and above["ring_s"] < above["tree_s"]


def test_hierarchical_all_reduce_saves_steps_not_network_bytes():
    one_node = sizing.hierarchical_all_reduce(1e8, 1, 8)
    nv = cm.LINKS["nvlink4_h100"]
    assert math.isclose(one_node["flat_s"], cm.collective_time("all_reduce", 1e8, 8, nv.alpha_s, nv.beta_s_per_byte))
    r = sizing.hierarchical_all_reduce(16e6, 64, 8)
    assert r["flat_steps"] == 2 * 511 and r["inter_steps"] == 2 * 63 and r["intra_steps"] == 2 * 7
    assert math.isclose(r["hier_network_bytes_per_node"], 2 * 63 / 64 * 16e6)  # about the flat ring's 2 x 511/512
    assert r["sharp_s"] < r["hier_s"] < r["flat_s"]


def test_a_slow_link_sets_the_ring_rate_and_moe_bytes_follow_k_not_experts():
    r = sizing.ring_straggler(1e9, 4, 1.0, 50.0, 25.0)
    assert math.isclose(r["degraded_s"], cm.collective_time("all_reduce", 1e9, 4, 1e-6, 1 / 25e9))
    one = sizing.moe_all_to_all(1000, 1024, 1, 8)
    two = sizing.moe_all_to_all(1000, 1024, 2, 8)
    assert two["alltoall_bytes_per_gpu"] == 2 * one["alltoall_bytes_per_gpu"] == 2 * 1000 * 1024 * 4 * 7 / 8
    sharded = sizing.moe_all_to_all(1000, 1024, 2, 8, tp=8)  # each TP rank dispatches its own eighth
    assert sharded["alltoall_bytes_per_gpu"] == two["alltoall_bytes_per_gpu"] / 8
    assert sharded["alltoall_over_tp_all_reduce"] == 0.25 and two["alltoall_over_tp_all_reduce"] == 0.0  # no TP: none
    across = sizing.moe_all_to_all(1000, 1024, 8, 64)
    assert across["off_node_fraction"] == 56 / 64 and across["network_copies_per_token"] == 7


def test_a_sizing_marker_inside_a_fold_stays_inside_it():
    page = '??? abstract "Full answer"\n\n    Text.\n\n    {{ sizing bubble_p8_m32 }}\n\nAfter.\n'
    out = sizing.expand(page, "topics/parallelism.md")
    body = out.split("After.")[0].splitlines()[2:]
    assert all(line.startswith("    ") or not line.strip() for line in body), body  # every line of it indented
    assert "    **1. Pipeline bubble with 8 stages and 32 microbatches**\n    { #bubble_p8_m32 }" in out
    assert "### " not in out  # no heading inside the fold: the page's table of contents gains no entry
    assert "### 1. Pipeline bubble" in sizing.expand("{{ sizing bubble_p8_m32 }}\n", "sizing.md")  # unindented: as before


def test_gemm_waves_split_k_fills_a_wave_and_stream_k_leaves_under_one_iteration_per_sm():
    skinny = dict(m=1024, n=1024, k=65536, tile_m=128, tile_n=128, sms=132)
    alone, split = sizing.gemm_waves(**skinny), sizing.gemm_waves(**skinny, split_k=2)
    assert (alone["tiles"], alone["waves"], split["units"], split["waves"]) == (64, 1, 128, 1)
    assert math.isclose(alone["efficiency"], 64 / 132) and math.isclose(split["efficiency"], 128 / 132)
    assert split["speedup_vs_no_split"] == 2.0 and alone["reduction_bytes"] == 0
    assert split["reduction_bytes"] == 2 * 2 * 1024 * 1024 * 4  # two fp32 partials written, then read
    prefill = sizing.gemm_waves(m=2048, n=11008, k=4096, tile_m=128, tile_n=256, sms=132)
    assert (prefill["tiles"], prefill["waves"], prefill["last_wave_units"]) == (688, 6, 688 - 5 * 132)
    total = prefill["tiles"] * prefill["k_iters"]
    assert prefill["stream_k_iters"] * 132 - total < 132  # every SM within one iteration of an even share
    assert prefill["stream_k_speedup"] > 1 and prefill["stream_k_efficiency"] > prefill["efficiency"]


def test_training_memory_offload_is_training_memory_with_8bit_states_and_the_optimizer_on_the_host():
    shape = dict(params=70e9, layers=80, hidden=8192, heads=64, seq_len=4096, zero_stage=3, dp=8, tp=8,
                 recompute="full")
    plain, fp32 = sizing.training_memory(**shape), sizing.training_memory_offload(**shape)
    for key in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"):
        assert math.isclose(fp32[key], plain[key], rel_tol=1e-12), key  # Adam, nothing offloaded: the same
    assert sizing.adam_optimizer_bytes("adam") == 12  # the demo's 2 + 2 + 12, via STATE_BYTES
    assert sizing.adam_optimizer_bytes("adam8bit") == 4 + 2 * (1 + 4 / 2048)  # master + two 8-bit moments + absmax
    eight = sizing.training_memory_offload(**shape, optimizer_state="adam8bit")
    assert math.isclose(eight["optimizer_bytes"], plain["optimizer_bytes"] * (4 + 2 * (1 + 4 / 2048)) / 12)
    off = sizing.training_memory_offload(**shape, offload="optimizer", gpus_per_node=8)
    assert math.isclose(off["total_bytes"], plain["weights_bytes"] + plain["activations_bytes"])
    assert math.isclose(off["host_bytes_per_node"], 8 * (plain["grads_bytes"] + plain["optimizer_bytes"]))
    assert math.isclose(off["link_bytes_each_way"], 2 * 70e9 / 64)  # the partition's 16-bit gradients, then weights
    assert fp32["link_bytes_each_way"] == 0 and fp32["host_bytes_per_node"] == 0
    assert off["model_states_all_bytes"] == 70e9 * 16 and off["gpus"] == 64


def test_bus_bandwidth_uses_the_nccl_tests_factors():
    r = sizing.bus_bandwidth(1e9, 8, 350.0)
    assert r["factor"] == 2 * 7 / 8 and math.isclose(r["algbw_gbs"], 200.0)
    assert math.isclose(r["seconds"], 1e9 / 200e9) and math.isclose(r["fraction_of_line_rate"], 350 / 450)
    assert sizing.bus_bandwidth(1e9, 8, 350.0, "all_gather")["factor"] == 7 / 8
    assert sizing.bus_bandwidth(1e9, 8, 350.0, "reduce_scatter")["factor"] == 7 / 8
    assert sizing.bus_bandwidth(1e9, 8, 350.0, "broadcast")["factor"] == 1.0
    with pytest.raises(ValueError, match="one GPU"):
        sizing.bus_bandwidth(1e9, 1, 350.0)
