"""The scaling cost model: cluster_model.py against hand-computed values, the browser calculator against
cluster_model.py (same numbers on a grid of configurations, same messages for invalid ones), and the
scale_model demo at the tiny size (every collective correct, positive alpha and beta, records)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest

from conftest import REPO, demo_record, set_field
from demos.common import cluster_model
from website import site_pages

pytestmark = pytest.mark.slow

JS = REPO / "docs" / "assets" / "parallel-calculator.js"
HTML = REPO / "docs" / "includes" / "parallel-calculator.html"
P7 = 12 * 32 * 4096**2 + 32000 * 4096  # 6,573,522,944: a GPT-shaped 7B (4h MLP, full heads, tied embedding)
SEVEN_B = dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=4 * 4096, gated_mlp=False,
               tied_embeddings=True, vocab=32000)
LLAMA7 = cluster_model.MODELS["7B"]
P_LLAMA7 = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 2 * 32000 * 4096  # 6,738,149,376


# -- (i) cluster_model.py against values derived by hand -------------------------------------------------

def test_collective_formulas():
    alpha, beta = 2e-6, 1e-9
    assert cluster_model.bytes_sent_per_rank("all_reduce", 1e9, 8) == pytest.approx(1.75e9, rel=1e-15)
    assert cluster_model.collective_time("all_reduce", 1e6, 4, alpha, beta) == pytest.approx(6 * 2e-6 + 1.5e6 * 1e-9)
    for kind in ("all_gather", "reduce_scatter", "all_to_all"):
        assert cluster_model.collective_time(kind, 1e6, 4, alpha, beta) == pytest.approx(3 * 2e-6 + 0.75e6 * 1e-9)
        assert cluster_model.bytes_sent_per_rank(kind, 8e6, 8) == pytest.approx(7e6)
    assert cluster_model.collective_time("all_reduce", 1e9, 1, alpha, beta) == 0.0


def test_fit_recovers_alpha_and_beta():
    alpha, beta = 50e-6, 1 / 2e9
    points = [(*cluster_model.FEATURES[kind](n, p), cluster_model.collective_time(kind, n, p, alpha, beta))
              for kind in ("all_reduce", "all_gather") for p in (2, 4) for n in (4e3, 1e5, 1e6, 3e7)]
    got_alpha, got_beta = cluster_model.fit_alpha_beta(points)
    assert got_alpha == pytest.approx(alpha, rel=1e-9) and got_beta == pytest.approx(beta, rel=1e-9)
    assert cluster_model.max_relative_error(points, got_alpha, got_beta) < 1e-9
    # pure bandwidth data: alpha must not go negative
    flat = [(2.0, n, n * beta) for n in (1e3, 1e6)]
    assert cluster_model.fit_alpha_beta(flat)[0] >= 0


def test_7b_memory_by_hand():
    mem = cluster_model.memory_per_gpu(dict(SEVEN_B, dp=64))
    assert mem["params_total"] == P7
    assert mem["model_states_bytes"] == 16 * P7  # 105,176,367,104 bytes
    # activations, no recomputation, no TP: s b h (34 + 5 a s / h) = 4096 * 4096 * (34 + 160) per layer, 1 in flight
    assert mem["activation_bytes_per_layer"] == 4096 * 4096 * 194
    assert mem["activations_bytes"] == 32 * 4096 * 4096 * 194
    assert not mem["fits"]
    tp = cluster_model.memory_per_gpu(dict(SEVEN_B, tp=8, recompute="selective"))
    assert tp["model_states_bytes"] == pytest.approx(16 * P7 / 8)
    assert tp["activation_bytes_per_layer"] == pytest.approx(34 * 4096 * 4096 / 8)
    no_sp = cluster_model.memory_per_gpu(dict(SEVEN_B, tp=8, sequence_parallel=False))
    assert no_sp["activation_bytes_per_layer"] == pytest.approx(4096 * 4096 * (10 + 24 / 8 + 160 / 8))
    full = cluster_model.memory_per_gpu(dict(SEVEN_B, tp=4, recompute="full"))
    assert full["activation_bytes_per_layer"] == pytest.approx(2 * 4096 * 4096 / 4)


@pytest.mark.parametrize("n", [2, 8, 64, 1000])
def test_zero_stages_bytes_per_param(n):
    per_param = {z: cluster_model.memory_per_gpu(dict(SEVEN_B, dp=n, zero_stage=z))["model_states_bytes"] / P7
                 for z in range(4)}
    assert per_param[0] == pytest.approx(16)
    assert per_param[1] == pytest.approx(4 + 12 / n)
    assert per_param[2] == pytest.approx(2 + 14 / n)
    assert per_param[3] == pytest.approx(16 / n)


def test_bubble_and_in_flight():
    expected = {"over_ideal": 3 / 8, "fraction": 3 / 11}
    assert cluster_model.bubble(dict(SEVEN_B, pp=4, microbatches=8)) == pytest.approx(expected)
    assert cluster_model.bubble(dict(SEVEN_B, pp=4, microbatches=8, interleave=2))["fraction"] == pytest.approx(3 / 19)
    assert cluster_model.bubble(dict(SEVEN_B, pp=1))["fraction"] == 0
    cfg = cluster_model.Config(pp=4, microbatches=8)
    assert cluster_model.microbatches_in_flight(cfg) == 4
    assert cluster_model.microbatches_in_flight(dataclasses.replace(cfg, schedule="gpipe")) == 8
    assert cluster_model.microbatches_in_flight(dataclasses.replace(cfg, interleave=2)) == 4 + 3 / 2
    assert cluster_model.microbatches_in_flight(dataclasses.replace(cfg, microbatches=2)) == 2


def test_step_time_by_hand():
    cfg = dict(SEVEN_B, tp=8, pp=2, dp=4, microbatches=16, zero_stage=0)
    step, comm = cluster_model.step_time(cfg), cluster_model.comm_volume(cfg)
    tokens = 16 * 1 * 4096 * 4
    assert step["tokens"] == tokens and step["gpus"] == 64
    efficiency = cluster_model.calibrated_efficiency(4096)
    assert step["compute_efficiency"] == efficiency
    per_token = 6 * P7 + 12 * 32 * 4096 * 4096  # 6 N + 12 L h s (attention scores), Megatron-LM eq. 3
    assert step["compute_s"] == pytest.approx(per_token * tokens / (64 * 989.4e12 * efficiency))
    assert step["mfu"] == pytest.approx(per_token * tokens / (step["total_s"] * 64 * 989.4e12))
    parts = ("compute_s", "tp_comm_s", "pp_comm_s", "dp_exposed_s", "bubble_s")
    assert step["total_s"] == pytest.approx(sum(step[k] for k in parts))
    assert step["bubble_s"] == pytest.approx((step["compute_s"] + step["tp_comm_s"]) * 1 / 16)
    # TP: 4 all-reduces of 2 s b h bytes per layer per microbatch over NVLink, 16 layers per stage
    n_tp = 2 * 4096 * 4096
    assert comm["tp_bytes"] == pytest.approx(16 * 16 * 4 * 2 * 7 / 8 * n_tp)
    assert step["tp_comm_s"] == pytest.approx(16 * 16 * 4 * (14 * 3e-6 + 2 * 7 / 8 * n_tp / 450e9))
    # PP: stages 8 ranks apart, 16 GPUs span 2 nodes -> InfiniBand; 2 messages per microbatch of 2 s b h / t
    assert comm["pp_link"] == "inter" and comm["pp_bytes"] == pytest.approx(2 * 16 * n_tp / 8)
    # DP (ZeRO-0): one ring all-reduce of the bf16 gradients of a 1/16 shard over 4 ranks, across nodes
    grads = 2 * P7 / 16
    assert comm["dp_bytes"] == pytest.approx(2 * 3 / 4 * grads)
    assert step["dp_comm_s"] == pytest.approx(6 * 5e-6 + 2 * 3 / 4 * grads / 50e9)
    overlapped = cluster_model.step_time(dict(cfg, overlap_dp=True))
    assert overlapped["dp_exposed_s"] == pytest.approx(max(0, step["dp_comm_s"] - 2 / 3 * step["compute_s"] / 16))
    full = cluster_model.step_time(dict(cfg, recompute="full"))
    assert full["flops"] == pytest.approx((per_token + 2 * 12 * 32 * 4096**2 + 4 * 32 * 4096 * 4096) * tokens)
    assert full["model_flops"] == pytest.approx(step["model_flops"])
    selective = cluster_model.step_time(dict(cfg, recompute="selective"))
    assert selective["flops"] == pytest.approx((per_token + 4 * 32 * 4096 * 4096) * tokens)
    fixed = cluster_model.step_time(dict(cfg, compute_efficiency=0.5))
    assert fixed["compute_s"] == pytest.approx(per_token * tokens / (64 * 989.4e12 * 0.5))


def test_zero_communication_volumes():
    base = dict(SEVEN_B, dp=8, microbatches=4)
    grads = 2 * P7
    vol = {z: cluster_model.comm_volume(dict(base, zero_stage=z))["dp_bytes"] for z in range(4)}
    assert vol[0] == pytest.approx(2 * 7 / 8 * grads)
    assert vol[1] == pytest.approx(vol[0])  # reduce-scatter + all-gather = all-reduce
    assert vol[2] == pytest.approx((4 + 1) * 7 / 8 * grads)
    assert vol[3] == pytest.approx(3 * 4 * 7 / 8 * grads)


def test_chooser_picks_the_fastest_layout_that_fits():
    assert cluster_model.choose_config("70B", 8, 1024) is None  # 70B does not fit on one node
    assert cluster_model.choose_config("70B", 16, 1024) is None  # Llama-2-70B needs 32 H100s at this batch
    for model, gpus in (("7B", 8), ("7B", 64), ("70B", 32), ("70B", 64)):
        layouts = cluster_model.candidate_layouts(model, gpus, 1024)
        assert {(c.tp, c.pp) for c in layouts} >= {(1, 1), (8, 1)}
        assert all(c.tp * c.pp * c.dp == gpus and c.dp * c.microbatches == 1024 for c in layouts)
        fitting = [c for c in layouts if cluster_model.memory_per_gpu(c)["fits"]]
        chosen = cluster_model.choose_config(model, gpus, 1024)
        assert chosen in fitting
        assert cluster_model.step_time(chosen)["total_s"] == min(cluster_model.step_time(c)["total_s"] for c in fitting)
    assert max(c.tp for c in cluster_model.candidate_layouts("7B", 64, 1024)) == 8  # TP stays inside a node by default
    assert max(c.tp for c in cluster_model.candidate_layouts("7B", 64, 1024, max_tp=16)) == 16


@pytest.mark.parametrize("change, message", [
    (dict(tp=3), "heads must be divisible by tp"),
    (dict(pp=3), "layers must be divisible by pp x interleave"),
    (dict(zero_stage=4), "zero_stage must be 0, 1, 2 or 3"),
    (dict(dp=0), "dp must be a whole number >= 1"),
    (dict(interleave=2), "interleave > 1 needs pp > 1"),
    (dict(compute_efficiency=1.5), "compute_efficiency must be in (0, 1]"),
    (dict(kv_heads=5), "heads must be divisible by kv_heads"),
    (dict(gated_mlp="yes"), "gated_mlp must be true or false"),
])
def test_invalid_configurations_are_refused(change, message):
    assert cluster_model.problem(dict(SEVEN_B, **change)).startswith(message)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cluster_model.step_time(dict(SEVEN_B, **change))


def test_assumptions_text_names_every_assumption():
    text = cluster_model.assumptions_text()
    for name in cluster_model.ASSUMPTIONS:
        assert f"- {name} = " in text
    assert "ASSUMPTION" in text and "GQA" in text and "900 GB/s" in text


# -- (ii) the browser calculator gives the same numbers ---------------------------------------------

def configurations() -> list[dict]:
    """A grid of valid layouts for both presets, edge cases, and invalid ones."""
    grid = []
    for model, (tp, pp, dp), zero, recompute, schedule in itertools.product(
            ("7B", "70B"), [(1, 1, 1), (8, 1, 16), (4, 4, 2), (2, 8, 64)], range(4), ("none", "selective", "full"),
            ("1f1b", "gpipe")):
        if (zero + tp + pp) % 3:  # keep about a third: still every value of every axis
            continue
        grid.append(dict(cluster_model.MODELS[model], tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=recompute,
                         schedule=schedule, microbatches=16))
    grid += [
        dict(SEVEN_B, pp=4, interleave=2, microbatches=8),  # interleaved
        dict(SEVEN_B, pp=4, interleave=4, microbatches=4, tp=2, dp=8, overlap_dp=True),
        dict(SEVEN_B, tp=8, sequence_parallel=False),
        dict(SEVEN_B, tp=8, sequence_parallel=False, recompute="selective"),
        dict(SEVEN_B, tp=16, dp=4),  # TP across nodes
        dict(SEVEN_B, pp=32, microbatches=1),  # one layer per stage, m < p
        dict(SEVEN_B, dp=3, zero_stage=3, overlap_dp=True),  # DP not a power of two
        dict(SEVEN_B, dp=2, zero_stage=2, overlap_dp=True, microbatches=3),
        dict(SEVEN_B, dp=1024, zero_stage=1, overlap_dp=True, microbatch_size=4, seq_len=2048),
        dict(SEVEN_B, gpus_per_node=4, tp=4, pp=2, dp=2),
        dict(SEVEN_B, intra_alpha_us=0.0, inter_alpha_us=0.0, tp=2, dp=2),
        dict(SEVEN_B, gpu_memory_gb=141.0, peak_tflops=989.0, compute_efficiency=1.0, dp=8),
        dict(layers=1, hidden=1, heads=1, kv_heads=1, ffn_hidden=1, vocab=1, seq_len=1, microbatches=1),  # smallest
        dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=200, vocab=100, seq_len=8, tp=4, pp=2, dp=5,
             microbatches=7, zero_stage=3),
        dict(SEVEN_B, tp=8, dp=2, recompute="full", compute_efficiency=0.43),  # GPT shape, efficiency given
        dict(SEVEN_B, hidden=2048, heads=16, kv_heads=16, ffn_hidden=8192, dp=4),  # below the calibration table
        dict(SEVEN_B, hidden=30720, heads=240, kv_heads=240, ffn_hidden=4 * 30720, tp=8, pp=32, dp=1,
             microbatches=32),  # above it
        dict(SEVEN_B, hidden=5120, heads=40, kv_heads=40, ffn_hidden=13824, tp=8, dp=2),  # between two rows
        dict(SEVEN_B, microbatches=1, pp=2, schedule="gpipe"),
        dict(SEVEN_B, intra_bandwidth_gbs=0.711, inter_bandwidth_gbs=0.711, intra_alpha_us=384.0,
             inter_alpha_us=384.0, tp=8, dp=4),  # a gloo-like network
        dict(cluster_model.MODELS["70B"], tp=8, pp=8, dp=16, interleave=5, microbatches=64, zero_stage=1),
        # invalid: each must give the same one-line message in both languages
        dict(SEVEN_B, tp=3),
        dict(SEVEN_B, pp=3),
        dict(SEVEN_B, tp=0),
        dict(SEVEN_B, dp=2.5),
        dict(SEVEN_B, zero_stage=5),
        dict(SEVEN_B, recompute="some"),
        dict(SEVEN_B, schedule="zb"),
        dict(SEVEN_B, interleave=2),
        dict(SEVEN_B, pp=4, interleave=2, microbatches=6),
        dict(SEVEN_B, compute_efficiency=0),
        dict(SEVEN_B, inter_bandwidth_gbs=-1),
        dict(SEVEN_B, intra_alpha_us=-1),
        dict(SEVEN_B, hidden=4000, heads=48),
        dict(SEVEN_B, sequence_parallel="yes"),
        dict(SEVEN_B, layers="32"),
        dict(SEVEN_B, kv_heads=3),
        dict(SEVEN_B, kv_heads=0),
        dict(SEVEN_B, tied_embeddings=1),
    ]
    return grid


def python_results(cfg: dict) -> dict:
    try:
        return {"memory": cluster_model.memory_per_gpu(cfg), "comm": cluster_model.comm_volume(cfg), "bubble": cluster_model.bubble(cfg),
                "step": cluster_model.step_time(cfg)}
    except ValueError as e:
        return {"error": str(e)}


JS_RESULTS = """(cfgs) => cfgs.map((cfg) => {
  try {
    const C = window.ParallelCalc;
    return {memory: C.memoryPerGpu(cfg), comm: C.commVolume(cfg), bubble: C.bubble(cfg), step: C.stepTime(cfg)};
  } catch (e) { return {error: e.message}; }
})"""


def assert_same(py, js, where: str) -> None:
    if isinstance(py, dict):
        assert isinstance(js, dict) and set(py) == set(js), f"{where}: keys {sorted(py)} vs {sorted(js or {})}"
        for key in py:
            assert_same(py[key], js[key], f"{where}.{key}")
    elif isinstance(py, bool) or isinstance(py, str):
        assert py == js, f"{where}: {py!r} (Python) vs {js!r} (JavaScript)"
    else:
        assert isinstance(js, (int, float)) and math.isfinite(js), f"{where}: {js!r}"
        assert math.isclose(py, js, rel_tol=1e-9, abs_tol=1e-300), f"{where}: {py!r} (Python) vs {js!r} (JavaScript)"


@pytest.fixture(scope="module")
def page(chromium):
    pg = chromium.new_page()
    errors, requests = [], []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("request", lambda r: requests.append(r.url))
    pg.set_content("<!doctype html><html><body>" + HTML.read_text(encoding="utf-8") + "</body></html>")
    pg.add_script_tag(content=site_pages.datasheets_js())  # the figures the build generates (assets/datasheets.js)
    pg.add_script_tag(content=JS.read_text(encoding="utf-8"))
    yield pg
    assert not errors, errors
    assert not [u for u in requests if not u.startswith(("about:", "data:"))], requests


def test_js_matches_python_on_a_grid(page):
    cfgs = configurations()
    assert len(cfgs) >= 50
    js = page.evaluate(JS_RESULTS, cfgs)
    invalid = 0
    for i, (cfg, got) in enumerate(zip(cfgs, js)):
        expected = python_results(cfg)
        invalid += "error" in expected
        assert_same(expected, got, f"config {i} {json.dumps(cfg)}")
    assert invalid >= 15 and len(cfgs) - invalid >= 40


def test_js_defaults_are_python_defaults(page):
    assert page.evaluate("() => window.ParallelCalc.DEFAULTS") == dataclasses.asdict(cluster_model.Config())
    assert page.evaluate("() => window.ParallelCalc.MODELS") == cluster_model.MODELS
    assert page.evaluate("() => window.ParallelCalc.EFFICIENCY_BY_HIDDEN") == [list(r) for r in
                                                                             cluster_model.EFFICIENCY_BY_HIDDEN]
    links = page.evaluate("() => window.ParallelCalc.LINKS")
    for key, link in cluster_model.LINKS.items():
        assert (links[key]["bandwidth_gbs"], links[key]["alpha_us"]) == (link.bandwidth_gbs, link.alpha_us)


def test_the_form_shows_the_model_and_refuses_bad_input(page):
    set_field(page, "pc-model", "70B")
    for element_id, value in (("pc-gpus", 64), ("pc-tp", 8), ("pc-pp", 4), ("pc-microbatches", 16),
                              ("pc-zero-stage", 1), ("pc-recompute", "selective")):
        set_field(page, element_id, value)
    cfg = dict(cluster_model.MODELS["70B"], tp=8, pp=4, dp=2, microbatches=16, zero_stage=1, recompute="selective")
    mem, step = cluster_model.memory_per_gpu(cfg), cluster_model.step_time(cfg)
    assert page.locator("#pc-dp").inner_text() == "2"
    assert page.locator("#pc-memory-total").inner_text() == f"{mem['total_bytes'] / 1e9:.2f} GB of 80.00 GB"
    assert page.locator("#pc-step-total").inner_text() == f"{step['total_s']:.2f} s"
    assert page.locator("#pc-bubble").inner_text().startswith(f"{100 * cluster_model.bubble(cfg)['fraction']:.1f}%")
    assert page.locator("#pc-error").is_hidden()

    set_field(page, "pc-gpus", 60)  # not divisible by TP x PP = 32
    assert page.locator("#pc-error").is_visible()
    assert "divisible by TP x PP" in page.locator("#pc-error").inner_text()
    assert page.locator("#pc-memory-total").inner_text() == "–"
    set_field(page, "pc-gpus", 64)
    set_field(page, "pc-layers", "")  # empty field: a message, never NaN
    assert page.locator("#pc-error").inner_text() == "layers must be a whole number >= 1"
    assert page.locator("#pc-model").input_value() == "custom"
    set_field(page, "pc-model", "7B")
    assert page.locator("#pc-layers").input_value() == "32"
    assert page.locator("#pc-error").is_hidden()
    assert "NaN" not in page.locator("#parallel-calculator").inner_text()


# -- (iii) the demo at the tiny size ------------------------------------------------------------

tiny_record = demo_record("demos.t7_parallelism.scale_model")


def test_demo_checks_passed(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    names = set(checks)
    for p in (2, 4):  # all-gather and all-to-all only move data: exact; the reductions round in float32
        assert checks[f"gloo.all_gather.p{p}"]["max_abs_err"] == checks[f"gloo.all_to_all.p{p}"]["max_abs_err"] == 0.0
        assert checks[f"gloo.all_reduce.p{p}"]["max_abs_err"] < 1e-5
        assert checks[f"gloo.reduce_scatter.p{p}"]["max_abs_err"] < 1e-5
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert {f"gloo.{kind}.p2", f"gloo.{kind}.p4", f"fit.{kind}.p2.largest_sizes"} <= names
    assert {"model.memory_7B_dp_only", "model.zero3_bytes_per_param", "model.bubble_fraction"} <= names


def test_demo_fits_positive_alpha_and_beta(tiny_record):
    m = tiny_record["metrics"]
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        for p in (2, 4):
            assert m[f"gloo.{kind}.p{p}.alpha_us"]["value"] > 0
            assert 0 < m[f"gloo.{kind}.p{p}.bandwidth_gbs"]["value"] < 1000
            assert m[f"gloo.{kind}.p{p}.max_rel_err_largest"]["value"] <= 1.5  # the tiny size's stated margin


def test_demo_memory_and_projection(tiny_record):
    m = tiny_record["metrics"]
    assert m["memory.7B.params_b"]["value"] == pytest.approx(P_LLAMA7 / 1e9)
    # plain DP, selective recomputation: 16 B/param + 34 s b h per layer x 32 layers
    assert m["memory.7B.dp.8gpu"]["value"] == pytest.approx((16 * P_LLAMA7 + 32 * 34 * 4096 * 4096) / 1e9)
    assert m["proj.7B.min_gpus"]["value"] == 8 and m["proj.70B.min_gpus"]["value"] == 32
    for model in ("7B", "70B"):
        assert 0.5 < m[f"proj.{model}.efficiency.1024gpu"]["value"] <= 1.0
        assert m[f"proj_gloo.{model}.slowdown.1024gpu"]["value"] > 1
        shares = sum(m[f"proj.{model}.{part}_share.1024gpu"]["value"]
                     for part in ("compute", "tp_comm", "pp_comm", "dp_exposed", "bubble"))
        assert shares == pytest.approx(1.0)
    assert "ASSUMPTION" in tiny_record["artifacts"]["assumptions"]
    series = {s["name"] for s in tiny_record["series"]}
    assert {"gloo_all_reduce", "breakdown_7B", "breakdown_70B", "scaling_efficiency"} <= series


def test_a_collective_spanning_nodes_uses_the_nics_of_its_members_in_a_node():
    c = cluster_model.Config(**cluster_model.MODELS["70B"], tp=16, pp=1, dp=4, microbatches=256)  # TP group = 2 whole nodes
    comm = cluster_model.comm_volume(c)
    assert comm["tp_link"] == "inter"
    per_all_reduce = cluster_model.collective_time("all_reduce", 2.0 * c.seq_len * c.hidden, 16, 5e-6, 1 / 400e9)
    assert cluster_model.step_time(c)["tp_comm_s"] == pytest.approx(80 * 256 * 4 * per_all_reduce)
    # a DP group with one member per node drives one NIC: 50 GB/s
    d = cluster_model.Config(**cluster_model.MODELS["7B"], tp=8, pp=1, dp=4, microbatches=4)
    grads = 2.0 * cluster_model.config_params(d) / 8
    expected = sum(cluster_model.collective_time(k, grads, 4, 5e-6, 1 / 50e9) for k in ("reduce_scatter", "all_gather"))
    assert cluster_model.step_time(d)["dp_exposed_s"] == pytest.approx(expected)
