"""The batch-regime demo at the tiny size: both runtimes agree with float64, and the knee follows its formula."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t4_hardware.batch_regime")


def test_runtimes_checked(tiny):
    names = {c["name"] for c in tiny["checks"] if c["passed"]}
    assert {"ort.batch1", "torch.batch1", "ort.batch64", "torch.batch64"} <= names


def test_knee_is_batch1_time_over_marginal_row_time(tiny):
    m = tiny["metrics"]
    for r in ("torch", "ort"):
        knee = m[f"{r}.knee_batch"]["value"]
        assert knee == pytest.approx(m[f"{r}.batch1_ms"]["value"] / m[f"{r}.row_ms"]["value"], rel=1e-6)
        rows = next(t for t in tiny["tables"] if t["name"] == "sweep")["rows"]
        assert [row[0] for row in rows] == [1, 4, 16, 64]
        # throughput = batch / latency, in the table
        col = 3 if r == "torch" else 4
        for row in rows:
            assert row[col] == pytest.approx(row[0] / (row[col - 2] / 1e3), rel=0.02, abs=1)
