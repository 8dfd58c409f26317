"""The KV cache: cached and uncached decoding agree (in the model itself, and in the demo at its
tiny size), the cache's allocated bytes equal the formula, and a wrong cache position is caught."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import REPO
from records import record
from demos.t6_inference._model import Config, TinyLM, generate_greedy

CFG = Config(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_len=64)


def random_model(seed=0):
    torch.manual_seed(seed)
    return TinyLM(CFG).eval()


@torch.no_grad()
def test_prefill_plus_decode_steps_equal_one_full_forward_pass():
    model = random_model()
    tokens = torch.randint(0, 256, (3, 40))
    full = model(tokens)
    cache = model.new_cache(3, 48)
    parts = [model(tokens[:, :20], cache), model(tokens[:, 20:25], cache)]  # prefill, then a 5-token chunk
    parts += [model(tokens[:, i:i + 1], cache) for i in range(25, 40)]  # then one token at a time
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_a_cache_at_the_wrong_position_changes_the_output():
    model = random_model()
    tokens = torch.randint(0, 256, (1, 20))
    cache = model.new_cache(1, 32)
    model(tokens[:, :19], cache)
    cache.length -= 1  # off by one: the new token overwrites the previous one's keys
    wrong = model(tokens[:, 19:], cache)
    assert not torch.allclose(wrong[:, -1], model(tokens)[:, -1], atol=1e-4)


@torch.no_grad()
def test_greedy_generation_with_cache_equals_recomputing_everything():
    model = random_model(1)
    prompt = torch.randint(0, 256, (2, 8))
    cached = generate_greedy(model, prompt, 24)
    tokens = prompt
    for _ in range(24):
        tokens = torch.cat([tokens, model(tokens)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(cached, tokens)


def test_static_decode_step_equals_the_ordinary_one():
    model = random_model(2)
    tokens = torch.randint(0, 256, (2, 11))
    with torch.no_grad():
        a, b = model.new_cache(2, 16), model.new_cache(2, 16)
        model(tokens[:, :10], a)
        model(tokens[:, :10], b)
        torch.testing.assert_close(model.decode_static(tokens[:, 10:], b, torch.tensor([10])), model(tokens[:, 10:], a),
                                   rtol=1e-5, atol=1e-5)


def test_cache_bytes_follow_the_formula_with_grouped_query_attention():
    cache = random_model().new_cache(5, 24)
    assert cache.allocated_bytes() == CFG.n_layers * 2 * CFG.n_kv_heads * CFG.head_dim * 24 * 4 * 5
    assert CFG.kv_cache_bytes(5, 24, 4) == cache.allocated_bytes()


@pytest.mark.slow
def test_the_demo_at_tiny_size(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "demos.t6_inference.kv_cache", "--device", "cpu", "--size", "tiny",
                           "--results-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = record.load(tmp_path / "kv_cache" / "cpu.json")
    checks = {c["name"]: c for c in rec["checks"]}
    assert sum(name.startswith("tokens_identical.") for name in checks) == 4
    assert sum(name.startswith("cache_bytes.") for name in checks) == 3
    for name in (n for n in checks if n.startswith("tokens_identical.")):
        done, total = checks[name]["detail"].split(" generated")[0].split("/")
        assert done == total, checks[name]  # every generated token the same with and without the cache
    assert checks["logits.cached_vs_full"]["max_abs_err"] < 1e-4
    for batch, tokens, allocated, formula, _ in next(t for t in rec["tables"] if t["name"] == "cache_size")["rows"]:
        assert allocated == formula == 2 * 2 * 2 * 16 * tokens * 4 * batch  # layers x K,V x KV heads x head_dim x fp32
    m = rec["metrics"]
    assert m["cache.bytes_per_token"]["value"] == 2 * 2 * 2 * 16 * 4  # tiny target: 2 layers, 2 KV heads, head_dim 16
    assert m["cache.bytes_per_token_without_gqa"]["value"] == 2 * m["cache.bytes_per_token"]["value"]
    assert m["uncached.generate_s"]["value"] > 0 and m["cached.generate_s"]["value"] > 0
