"""The attention-cost demo at its tiny size: every variant equals the float64 reference, the naive
version materializes the score matrix and the fused ones do not, unsupported backends are recorded."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t6_inference.attention_cost")


def test_every_variant_equals_the_float64_reference_at_every_length(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for variant in ("naive", "online_softmax", "sdpa_default", "sdpa_math", "sdpa_flash"):
        for n in (64, 128):
            check = checks[f"{variant}.n{n}"]
            assert check["max_abs_err"] < 1e-5, check
    # on the CPU no variant was skipped at any length, and nothing else was checked
    assert set(checks) == {f"{v}.n{n}" for v in ("naive", "online_softmax", "sdpa_default", "sdpa_math", "sdpa_flash")
                           for n in (64, 128)}


def test_naive_materializes_the_scores_and_fused_kernels_do_not(tiny_record):
    m = tiny_record["metrics"]
    score_mib = m["score_matrix_mib"]["value"]
    assert m["naive.peak_mib"]["value"] >= score_mib  # at least one full N x N matrix
    assert m["sdpa_flash.peak_mib"]["value"] < score_mib
    assert m["naive.peak_growth"]["value"] > m["sdpa_flash.peak_growth"]["value"]


def test_cuda_only_backends_are_recorded_as_not_run_on_cpu(tiny_record):
    not_run = {n["variant"] for n in tiny_record["not_run"]}
    assert {"sdpa_efficient", "sdpa_cudnn"} <= not_run
    assert "fraction_of_ceiling" in tiny_record["metrics"]["sdpa_flash.tflops"]
    assert [s["name"] for s in tiny_record["series"]] == ["time", "memory"]
