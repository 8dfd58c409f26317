"""Host-device transfers at the tiny size on CPU: the GPU measurements are recorded as not run, and
the pipeline refactor trains to the same weights with 2 copies and 1 read instead of 2 and 1 per
batch, moving a quarter of the feature bytes (uint8 instead of float32)."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t9_foundations.host_device_transfers")


def test_gpu_parts_not_run_on_cpu(tiny_record):
    variants = " ".join(n["variant"] for n in tiny_record["not_run"])
    for part in ("pageable vs pinned", "non_blocking", "overlap", "profiler"):
        assert part in variants


def test_pipeline_refactor_counts(tiny_record):
    m = tiny_record["metrics"]
    n_batches = 4096 // 256
    assert m["pipeline.before.h2d"]["value"] == 2 * n_batches and m["pipeline.before.d2h"]["value"] == n_batches
    assert m["pipeline.after.h2d"]["value"] == 2 and m["pipeline.after.d2h"]["value"] == 1
    assert m["pipeline.before.h2d_bytes"]["value"] == 4096 * (64 * 4 + 8)
    assert m["pipeline.after.h2d_bytes"]["value"] == 4096 * (64 + 8)
    assert m["pipeline.bytes_ratio"]["value"] == pytest.approx((64 * 4 + 8) / (64 + 8))
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert checks["pipeline.same_weights"]["max_abs_err"] <= checks["pipeline.same_weights"]["atol"]
    assert "pipeline.transfer_counts" in checks
