"""Speculative decoding at the tiny size: token-for-token identical to the target's greedy decoding
for every draft length, a deliberately wrong acceptance rule is caught, and the statistics add up."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t6_inference.speculative")


def test_output_is_identical_to_greedy_decoding_for_every_k(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for k in (1, 3):
        assert checks[f"exact.k{k}"]["detail"].startswith("4/4 prompts")


def test_the_exactness_check_has_teeth(tiny_record):
    check = next(c for c in tiny_record["checks"] if c["name"] == "exactness_check_catches_an_off_by_one")
    assert "changed the output on" in check["detail"] and "changed the output on 0/" not in check["detail"], check


def test_acceptance_statistics_are_consistent(tiny_record):
    m = tiny_record["metrics"]
    for k in (1, 3):
        acceptance, per_pass = m[f"k{k}.acceptance"]["value"], m[f"k{k}.tokens_per_pass"]["value"]
        assert 0 <= acceptance <= 1
        assert 1 <= per_pass <= k + 1
        assert m[f"k{k}.speedup"]["value"] > 0
    assert m["draft.params_m"]["value"] < m["target.params_m"]["value"] / 3
