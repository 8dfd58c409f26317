"""T10 regression_gate: the gate's statistics, its measured error rates at the tiny size, and the record
gate on the GPU-shaped fixture (a fixture, never a published record)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import REPO, demo_record

from records import record
from demos.t10_benchmarking import _gate

FIXTURE = REPO / "tests" / "fixtures" / "t10_gate_h100.json"
POLICY = dict(drift_max=1.25, warn_drop=0.05, block_drop=0.10)


tiny_record = demo_record("demos.t10_benchmarking.regression_gate")


@pytest.mark.slow
def test_gate_catches_the_slower_kernel_and_passes_the_unchanged_one(tiny_record):
    m = tiny_record["metrics"]
    assert m["gate.threshold"]["value"] < 1.10
    assert m["gate.miss_rate"]["value"] <= 0.2 and m["gate.false_alarm_rate"]["value"] <= 0.2
    assert m["confirmed.false_alarm_rate"]["value"] <= m["gate.false_alarm_rate"]["value"]
    assert m["slower.measured_ratio"]["value"] > m["gate.threshold"]["value"]
    fixtures = [c for c in tiny_record["checks"] if c["name"].startswith("fixture.")]
    # "verdict <v>, expected <v>": the five fixtures exercise all three verdicts
    assert len(fixtures) == 5
    assert {c["detail"].split(",")[0] for c in fixtures} == {"verdict pass", "verdict warn", "verdict block"}


@pytest.mark.slow
def test_record_gate_ran_on_this_projects_cpu_records(tiny_record):
    m = tiny_record["metrics"]
    counted = sum(m[f"records.{v}"]["value"] for v in ("pass", "warn", "block"))
    assert counted == m["records.count"]["value"] > 0
    rows = next(t for t in tiny_record["tables"] if t["name"] == "cpu_records")["rows"]
    for demo, verdict, worst, *_ in rows:
        if worst != "" and worst > 1:
            assert verdict == "block", demo


def test_threshold_and_pairs_follow_the_noise():
    sigma = 0.05
    k = _gate.pairs_needed(sigma, 0.10, z=3.0)
    assert _gate.threshold(sigma, k, 3.0) <= math.sqrt(1.10) + 1e-9  # at most half the regression, in log terms
    assert _gate.pairs_needed(2 * sigma, 0.10, z=3.0) > k  # noisier -> more pairs
    assert _gate.robust_sigma([0.0, 0.0, 0.0, 1.0, -1.0]) == 0.0  # MAD ignores two outliers in five
    assert _gate.gate_ratio([1.0, 1.0, 1.0], [1.1, 1.1, 5.0]) == pytest.approx(1.1)


def test_fixture_is_a_valid_gpu_shaped_fixture_and_not_published():
    rec = json.loads(FIXTURE.read_text())
    assert rec["fixture"] is True and rec["device_class"] == "h100"
    assert record.validate(rec) == []
    assert not (REPO / "docs" / "results" / "regression_gate" / "h100.json").exists()


def test_record_gate_verdicts_on_the_fixture():
    base = json.loads(FIXTURE.read_text())
    assert _gate.overall(_gate.gate_record(base, base, **POLICY)) == _gate.PASS
    h200 = json.loads(FIXTURE.read_text())
    h200["device_class"] = "h200"
    h200["ceilings"]["copy_bandwidth"]["value"] *= 4.8 / 3.35  # faster memory, same SMs
    for m in h200["metrics"].values():
        if m.get("ceiling") == "copy_bandwidth":
            m["value"] *= 4.8 / 3.35  # same fractions: the same test passes on another GPU
    assert _gate.overall(_gate.gate_record(h200, base, **POLICY)) == _gate.PASS
    worse = json.loads(FIXTURE.read_text())
    worse["metrics"]["gemm_4096.tflops"]["fraction_of_ceiling"] *= 0.85
    assert _gate.overall(_gate.gate_record(worse, base, **POLICY)) == _gate.BLOCK
    broken = json.loads(FIXTURE.read_text())
    broken["checks"][0]["passed"] = False
    assert _gate.overall(_gate.gate_record(broken, **POLICY)) == _gate.BLOCK
