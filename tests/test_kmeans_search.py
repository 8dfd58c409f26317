"""k-means and vector search at the tiny size: PyTorch k-means reaches scikit-learn's inertia from the
same start, exact search matches float64, IVF recall rises with nprobe (for the PyTorch index and,
where installed, FAISS) and reaches exact search when every list is probed."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t9_foundations.kmeans_search")


def test_checks_pass(tiny_record):
    names = {c["name"] for c in tiny_record["checks"]}
    assert {"kmeans.inertia_vs_sklearn", "exact_search.vs_float64", "ivf.all_lists_equals_exact",
            "pytorch_ivf.recall_monotone_in_nprobe"} <= names
    # the same Lloyd iterations from the same centroids: the inertia agrees far inside the demo's 1e-3
    assert tiny_record["metrics"]["kmeans.inertia_rel_diff"]["value"] < 1e-4


def test_recall_is_monotone_in_nprobe_and_bounded(tiny_record):
    m = tiny_record["metrics"]
    for index in ("pytorch_ivf", "faiss_ivf"):
        recalls = [m[f"{index}.nprobe{p}.recall"]["value"] for p in (1, 2, 4, 8, 16) if f"{index}.nprobe{p}.recall" in m]
        if index == "pytorch_ivf":
            assert len(recalls) == 5
        assert recalls == sorted(recalls) and all(0 <= r <= 1 for r in recalls)


def test_sharded_projection_and_breakdown(tiny_record):
    m = tiny_record["metrics"]
    assert m["exact.topk_share"]["value"] > 0
    assert all(m[f"sharded.g{g}.projected_ms"]["value"] > 0 for g in (1, 2, 4, 8))
    rows = next(t for t in tiny_record["tables"] if t["name"] == "sharded")["rows"]
    assert [r[1] for r in rows] == [20_000 // g for g in (1, 2, 4, 8)]  # rows per shard
    assert [r[4] for r in rows] == [100 * (g - 1) * 10 * 12 for g in (1, 2, 4, 8)]  # gather bytes formula
