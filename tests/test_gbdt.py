"""The GBDT benchmark at the tiny size: every installed library learns and agrees with the others
within the stated accuracy margin, the timings are per tree, and the GPU variant is recorded as
not run (with its reason) on a CPU."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t9_foundations.gbdt")


def test_libraries_agree_on_accuracy(tiny_record):
    m = tiny_record["metrics"]
    libraries = ["sklearn"] + [n for n in ("xgboost", "lightgbm") if importlib.util.find_spec(n)]
    for name in libraries:
        assert abs(m[f"{name}.accuracy"]["value"] - m["sklearn.accuracy"]["value"]) <= 0.02
        assert m[f"{name}.accuracy"]["value"] > 0.7
    names = {c["name"] for c in tiny_record["checks"]}
    assert {f"{check}.{n}" for n in libraries for check in ("accuracy_agrees", "learns")} <= names


def test_time_per_tree_is_fit_time_over_trees(tiny_record):
    m = tiny_record["metrics"]
    for name in ("sklearn", "xgboost"):
        if f"{name}.fit_s" in m:
            assert m[f"{name}.ms_per_tree"]["value"] == pytest.approx(m[f"{name}.fit_s"]["value"] * 1e3 / 10)


def test_gpu_variant_not_run_on_cpu_with_reason(tiny_record):
    reasons = {n["variant"]: n["reason"] for n in tiny_record["not_run"]}
    cuda = [v for v in reasons if "device=cuda" in v]
    assert cuda and ("GPU" in reasons[cuda[0]] or "not installed" in reasons[cuda[0]])
    assert tiny_record["settings"]["cpu_threads"]["timings"] == 1
