"""T10 profiling: gradients checked, the launch-bound and compute-bound readings come out of the profile,
the top-operators table is recorded, and Nsight Compute is recorded as not run on CPU."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t10_benchmarking.profiling")


def test_gradients_checked(tiny_record):
    grads = [c for c in tiny_record["checks"] if c["name"].startswith("grad.")]
    assert len(grads) == 4 and all(c["max_abs_err"] <= c["atol"] for c in grads), grads


def test_launch_bound_vs_compute_bound(tiny_record):
    m = tiny_record["metrics"]
    assert m["one_big_matmul.compute_share"]["value"] > 0.5
    assert m["tiny_layers_step.compute_share"]["value"] < 0.5
    assert m["tiny_layers_step.us_per_op"]["value"] < m["one_big_matmul.us_per_op"]["value"]
    for program in ("mlp_step", "tiny_layers_step", "one_big_matmul"):
        parts = sum(m[f"{program}.{p}_share"]["value"] for p in ("compute", "other", "outside"))
        assert parts == pytest.approx(1.0, abs=0.05)


def test_profile_tables_and_ncu(tiny_record):
    top = next(t for t in tiny_record["tables"] if t["name"] == "top_ops")["rows"]
    assert {"aten::mm", "aten::addmm"} & {row[0] for row in top[:3]}  # the matmuls lead (noise may reorder a row)
    assert "aten::mm" in tiny_record["artifacts"]["mlp_step.top_ops"]
    assert "--kernel-name" in tiny_record["artifacts"]["ncu_command"]
    assert any(n["variant"].startswith("Nsight Compute") for n in tiny_record["not_run"])
