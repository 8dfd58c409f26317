"""Pruning at the tiny size: exact sparsity per layer, the 2:4 pattern in every group of 4 (before
and after fine-tuning), structured pruning gives a smaller dense model, fine-tuning helps, and
zeros in a dense kernel buy no time."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


rec = demo_record("demos.t5_compression.pruning")


def test_patterns(rec):
    names = {c["name"] for c in rec["checks"]}
    assert {f"two_four.0.50.layer{i}.two_four" for i in range(3)} <= names
    assert {f"two_four.0.50.after_finetune.layer{i}.two_four" for i in range(3)} <= names
    assert {f"unstructured.0.90.layer{i}.sparsity" for i in range(3)} <= names
    assert "structured.smaller_dense_shapes" in names and "structured.prune_nothing_is_identity" in names
    checks = {c["name"]: c for c in rec["checks"]}
    for name in (n for n in checks if n.endswith(".sparsity")):  # "<zeros> zeros >= <requested> requested (...)"
        zeros, requested = checks[name]["detail"].split(" requested")[0].split(" zeros >= ")
        assert zeros == requested, checks[name]  # magnitude pruning zeroes exactly the requested count
    assert checks["structured.prune_nothing_is_identity"]["max_abs_err"] == 0.0
    assert checks["csr_equals_dense"]["max_abs_err"] < 1e-5


def test_curves(rec):
    m = rec["metrics"]
    assert m["acc.unstructured.ft.s90"]["value"] > m["acc.unstructured.s90"]["value"]
    assert m["acc.unstructured.s50"]["value"] > m["acc.unstructured.s95"]["value"]
    assert m["acc.two_four.ft.s50"]["value"] > 0.9


def test_latency(rec):
    m = rec["metrics"]
    assert m["latency.unstructured90_dense_kernel_speedup"]["value"] < 1.4  # zeros in a dense kernel: no speedup
    assert "two_four_sparse_tensor_cores" in {n["variant"] for n in rec["not_run"]}
