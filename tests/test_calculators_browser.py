"""The sizing calculators (docs/assets/sizing-calculators.js) against website/sizing.py, in Chromium.

No site build: the page's calculator markup is taken from docs/calculators.md and the script is loaded
into a blank page, so this runs in a few seconds."""

from __future__ import annotations

import math
import random
import re

import pytest

from conftest import REPO, set_field
from records import datasheets
from website import site_pages, sizing

pytestmark = pytest.mark.slow

JS = REPO / "docs" / "assets" / "sizing-calculators.js"
PAGE = REPO / "docs" / "calculators.md"
N = 300  # random inputs per calculator


def page_html() -> str:
    text = PAGE.read_text(encoding="utf-8")
    style = re.search(r"<style>.*?</style>", text, re.S).group(0)
    blocks = re.findall(r'<div id="[a-z]+-calculator".*?\n</div>', text, re.S)
    assert len(blocks) == 3
    return "<!doctype html><html><body>" + style + "\n".join(blocks) + "</body></html>"


@pytest.fixture(scope="module")
def page(chromium):
    pg = chromium.new_page()
    errors, requests = [], []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("request", lambda r: requests.append(r.url))
    pg.set_content(page_html())
    pg.add_script_tag(content=site_pages.datasheets_js())  # the figures the build generates (assets/datasheets.js)
    pg.add_script_tag(content=JS.read_text(encoding="utf-8"))
    yield pg
    assert not errors, errors
    assert not [u for u in requests if not u.startswith(("about:", "data:"))], requests


def same(py: dict, js: dict, where: str) -> None:
    assert set(py) == set(js), f"{where}: keys {sorted(py)} vs {sorted(js)}"
    for key, value in py.items():
        if isinstance(value, bool):
            assert js[key] is value, f"{where}.{key}: {value} vs {js[key]}"
        else:
            assert math.isclose(value, js[key], rel_tol=1e-9, abs_tol=1e-9), f"{where}.{key}: {value} vs {js[key]}"


def kv_inputs(rng: random.Random) -> dict:
    return {"layers": rng.randint(1, 128), "kv_heads": rng.choice([1, 2, 4, 8, 16, 32, 64, 96]),
            "head_dim": rng.choice([64, 80, 96, 128, 256]), "context": rng.randint(1, 200_000),
            "batch": rng.randint(1, 256), "dtype_bytes": rng.choice([4, 2, 1, 0.5]),
            "block_tokens": rng.choice([0, 1, 8, 16, 32, 128, 256, 1000])}


def training_inputs(rng: random.Random) -> dict:
    pp = rng.choice([1, 2, 4, 8])
    return {"params": rng.uniform(0.1, 500) * 1e9, "layers": pp * rng.randint(1, 16), "hidden": rng.choice([1024, 4096, 8192, 12288]),
            "heads": rng.choice([8, 16, 32, 64, 96]), "seq_len": rng.choice([512, 2048, 4096, 8192]),
            "microbatch_size": rng.randint(1, 8), "microbatches": rng.randint(1, 64),
            "precision": rng.choice(sizing.PRECISIONS), "optimizer": rng.choice(list(sizing.OPTIMIZER_MOMENTS)),
            "zero_stage": rng.randint(0, 3), "dp": rng.randint(1, 128), "tp": rng.choice([1, 2, 4, 8]), "pp": pp,
            "recompute": rng.choice(["none", "selective", "full"]), "gpu_memory_gb": rng.choice([24.0, 48.0, 80.0, 141.0])}


def serving_inputs(rng: random.Random) -> dict:
    return {"params": rng.uniform(0.5, 500) * 1e9, "weight_bytes": rng.choice([2, 1, 0.5]), "gpus": rng.randint(1, 16),
            "bandwidth_gbs": rng.uniform(100, 8000), "memory_gb": rng.choice([24, 48, 80, 141, 192]),
            "batch": rng.randint(1, 512), "context": rng.randint(1, 131072), "layers": rng.randint(1, 128),
            "kv_heads": rng.choice([1, 8, 32, 96]), "head_dim": rng.choice([64, 128]), "kv_bytes": rng.choice([1, 2])}


@pytest.mark.parametrize("name, js_name, make", [
    ("kv_cache", "kvCache", kv_inputs),
    ("training_memory", "trainingMemory", training_inputs),
    ("serving", "serving", serving_inputs),
])
def test_js_matches_python_on_random_inputs(page, name, js_name, make):
    rng = random.Random(f"{name}-23")
    inputs = [make(rng) for _ in range(N)]
    js = page.evaluate(f"(cs) => cs.map((c) => window.SizingCalc.{js_name}(c))", inputs)
    for i, (cfg, got) in enumerate(zip(inputs, js)):
        same(sizing.FORMULAS[name](**cfg), got, f"{name} input {i} {cfg}")
    if name == "training_memory":  # both branches of "fits" were exercised
        assert {r["fits"] for r in js} == {True, False}


def test_presets_are_the_datasheets(page):
    gpus = page.evaluate("() => window.SizingCalc.GPUS")
    sheets = datasheets.sheets()
    for key, gpu in gpus.items():
        assert gpu["memory_gbps"] == sheets[key]["memory_gbps"], key


def _out(page, element_id: str) -> str:
    return page.locator(f"#{element_id}").inner_text()


def test_the_forms_show_the_python_answers(page):
    # KV cache: the Llama-2-70B preset at 4,096 tokens is sizing problem kv_llama2_70b
    kv = sizing.kv_cache(80, 8, 128, 4096, 1, 2, 16)
    assert _out(page, "kv-out-total") == f"{kv['bytes'] / 1e9:.2f} GB"
    page.locator("#kv-calculator [data-preset]").select_option("gpt3-175b")
    assert page.locator("#kv-kv-heads").input_value() == "96"
    gpt3 = sizing.kv_cache(96, 96, 128, 2048, 1, 2, 16)
    assert _out(page, "kv-out-total") == f"{gpt3['bytes'] / 1e9:.2f} GB"
    set_field(page, "kv-context", "")
    assert "context must be a whole number" in page.locator("#kv-calculator .sc-error").inner_text()
    assert _out(page, "kv-out-total") == "–"

    # training: the 7B preset, mixed Adam, one GPU, full recomputation (sizing problem train_mem_7b_one_gpu, m = 8)
    tm = sizing.training_memory(7e9, 32, 4096, 32, 4096, microbatches=8, recompute="full")
    assert _out(page, "tm-out-total") == f"{tm['total_bytes'] / 1e9:.2f} GB"
    for element_id, value in (("tm-dp", 64), ("tm-zero-stage", 3), ("tm-recompute", "selective")):
        set_field(page, element_id, value)
    tm = sizing.training_memory(7e9, 32, 4096, 32, 4096, microbatches=8, dp=64, zero_stage=3, recompute="selective")
    assert _out(page, "tm-out-total") == f"{tm['total_bytes'] / 1e9:.2f} GB"

    # serving: Llama-3-8B on one H100 at batch 32, 8K context (problems serve_8b_*)
    sv = sizing.serving(8.03e9, 2, 1, 3350.0, 80, 32, 8192, 32, 8, 128, 2)
    assert _out(page, "sv-out-step") == f"{sv['step_s'] * 1e3:.2f} ms"
    assert _out(page, "sv-out-max-batch") == str(sv["max_batch"])
    page.locator("#serving-calculator [data-preset='gpu']").select_option("h200")
    assert page.locator("#sv-bandwidth-gbs").input_value() == "4800"
    sv = sizing.serving(8.03e9, 2, 1, 4800.0, 141, 32, 8192, 32, 8, 128, 2)
    assert _out(page, "sv-out-max-batch") == str(sv["max_batch"])
    assert "NaN" not in page.locator("body").inner_text()
    # issue 32 item 9: a model whose weights do not fit gets no decode bound: 138 GB of bf16 weights, one 80 GB H100
    page.locator("#serving-calculator [data-preset='gpu']").select_option("h100")
    set_field(page, "sv-params", 69)
    big = sizing.serving(69e9, 2, 1, 3350.0, 80, 32, 8192, 80, 8, 128, 2)
    assert not big["weights_fit"] and big["gpus_for_weights"] == 2
    for out in ("step", "tokens", "per-seq", "max-batch"):
        shown = page.locator(f"#serving-calculator [data-out='{out}']").inner_text()
        assert shown == "the weights do not fit: they need ≥ 2 GPUs of 80 GB", (out, shown)


def test_inputs_have_visible_borders(page):
    for selector in ("#kv-layers", "#tm-precision", "#sv-batch"):
        style = page.locator(selector).evaluate(
            "e => { const s = getComputedStyle(e); return [s.borderTopStyle, parseFloat(s.borderTopWidth)]; }")
        assert style[0] != "none" and style[1] >= 1, (selector, style)
