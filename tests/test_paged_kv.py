"""The paged KV cache at the tiny size: equal to the contiguous cache (logits and tokens), a swapped
block table is caught, no sequence ever holds a whole unused block, and paging wastes less than
preallocation, more with bigger blocks."""

from __future__ import annotations

import math

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t6_inference.paged_kv")


def test_paged_cache_equals_the_contiguous_one_and_a_wrong_table_is_caught(tiny):
    checks = checks_by_name(tiny)
    assert {"paged_equals_contiguous.tokens", "blocks_in_use_match_formula", "tables_are_scattered"} <= set(checks)
    assert checks["paged_equals_contiguous.logits"]["max_abs_err"] <= 1e-4
    wrong = checks["swapped_block_tables_caught"]
    assert wrong["expected_failure"]
    assert float(wrong["detail"].split("differ by up to ")[1]) > 0.1  # far outside the 1e-4 tolerance


def test_paging_wastes_less_than_preallocation_and_waste_grows_with_the_block(tiny):
    blocks = [4, 8, 16]
    waste = [metric(tiny, f"paged.bs{b}.waste") for b in blocks]
    assert all(w < metric(tiny, "prealloc.waste") for w in waste)
    assert waste == sorted(waste)
    assert all(metric(tiny, f"paged.bs{b}.sequences_per_preallocated") > 1 for b in blocks)
    for b in blocks:
        # sequences grow one token at a time, so at some step one has a fresh block with b - 1 slots unused
        assert f": {b - 1} tokens (< block size {b})" in checks_by_name(tiny)[f"slack_below_one_block.bs{b}"]["detail"]


def test_preallocation_waste_matches_its_formula(tiny):
    # tiny mix: prompt 16, outputs uniform in 4..24, reservation 16 + 24 = 40 positions per request.
    # A request of n output tokens holds 16, 17, ..., 16 + n - 2 tokens over n - 1 steps, so the
    # held/reserved ratio is sum over requests of held / (40 x steps), close to its expectation.
    expected_held = sum(sum(range(16, 16 + n - 1)) for n in range(4, 25)) / 21
    expected_steps = sum(n - 1 for n in range(4, 25)) / 21
    expected_waste = 1 - expected_held / (40 * expected_steps)
    assert math.isclose(metric(tiny, "prealloc.waste"), expected_waste, abs_tol=0.05)


def test_mean_unused_space_is_about_half_a_block(tiny):
    # a sequence's length sweeps every residue modulo the block size as it grows, so its unused
    # tail averages about (block - 1) / 2 positions
    for b in (4, 8, 16):
        slack = metric(tiny, f"paged.bs{b}.mean_slack_tokens")
        assert 0.3 * (b - 1) < slack < 0.7 * (b - 1), (b, slack)
