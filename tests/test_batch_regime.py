"""The batch-regime demo at the tiny size: both runtimes agree with float64, and the knee follows its formula."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t4_hardware.batch_regime")


def test_runtimes_checked(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    for name in ("ort.batch1", "torch.batch1", "ort.batch64", "torch.batch64"):
        assert checks[name]["max_abs_err"] < 1e-5, checks[name]  # float32 on both runtimes


def test_knee_is_batch1_time_over_marginal_row_time(tiny):
    m = tiny["metrics"]
    for r in ("torch", "ort"):
        knee, row = m[f"{r}.knee_batch"]["value"], m[f"{r}.row_ms"]["value"]
        if row > 0:  # a noisy sweep can make the large-batch slope non-positive; the demo then reports the largest batch
            assert knee == pytest.approx(m[f"{r}.batch1_ms"]["value"] / row, rel=1e-6)
        else:
            assert knee == 64
        # a model's crossing, evaluated on two measured times: labelled computed, never as this run's measurement
        assert tiny["metrics"][f"{r}.knee_batch"]["origin"] == "computed"
        assert tiny["metrics"][f"{r}.knee_from_ridge"]["origin"] == "computed"
        assert "origin" not in tiny["metrics"][f"{r}.batch_where_latency_doubles"]  # read off the measured curve
    rows = next(t for t in tiny["tables"] if t["name"] == "sweep")["rows"]
    assert [row[0] for row in rows] == [1, 4, 16, 64]
    # throughput = batch / latency, checked on the plotted series (full precision, not the rounded table)
    latency = {line["label"]: line for line in next(s for s in tiny["series"] if s["name"] == "latency")["lines"]}
    for line in next(s for s in tiny["series"] if s["name"] == "throughput")["lines"]:
        ms = latency[line["label"]]["y"]
        for b, thr, t in zip(line["x"], line["y"], ms):
            assert thr == pytest.approx(b / (t / 1e3), rel=1e-9)
