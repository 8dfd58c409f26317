"""T10 regression_gate: the gate's statistics, its measured error rates at the tiny size, and the record
gate on the GPU-shaped fixture (a fixture, never a published record)."""

from __future__ import annotations

import json
import math

import numpy as np
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


def test_cusum_accumulates_a_small_step_that_no_single_run_shows():
    z = np.zeros((1, 40))
    z[0, 20:] = 1.0  # one sigma slower from run 20: no single run is far out
    stat = _gate.cusum(z, k=0.5, clip=3.0)
    assert stat[0, :20].max() == 0.0 and stat[0, -1] == pytest.approx(10.0)  # 0.5 per run after the step
    assert _gate.cusum_start(stat[0], int(np.argmax(stat[0] > 4))) == 20  # it also says where the step began
    outlier = np.zeros((1, 5))
    outlier[0, 2] = 50.0  # one wild run adds at most the clip
    assert _gate.cusum(outlier, k=0.5, clip=3.0).max() == pytest.approx(2.5)
    assert _gate.cusum(outlier, k=0.5).max() == pytest.approx(49.5)
    two = np.array([[50.0], [50.0]])
    assert _gate.cusum(two, k=0.0, clip=np.array([1.0, 2.0]))[:, 0].tolist() == [1.0, 2.0]  # one clip per row


def test_alarm_rates_count_false_alarms_misses_and_delays():
    alarms = np.array([[False, True, False, False],  # alarm before the step (false), none after: a miss
                       [False, False, False, True],  # caught one run after the step
                       [False, False, False, False]])  # a miss
    fa, miss, delays = _gate.alarm_rates(alarms, change=2)
    assert fa == pytest.approx(1 / 3) and miss == pytest.approx(2 / 3) and delays.tolist() == [1]
    logs, sigma = _gate.standardise(np.array([[0.0, 0.1, -0.1, 0.5]]), reference=3)
    assert logs.tolist() == [[0.5]] and sigma[0] == pytest.approx(1.4826 * 0.1)


@pytest.mark.slow
def test_change_point_detector_against_per_run_rules(tiny_record):
    m = {k: v["value"] for k, v in tiny_record["metrics"].items()}
    # calibrated on separate A/A histories to 5% false alarms; evaluated on fresh ones
    assert m["changepoint.cusum.false_alarm_rate"] <= 0.1
    assert m["changepoint.per_run_calibrated.false_alarm_rate"] <= 0.1
    assert m["changepoint.cusum.miss_rate"] < m["changepoint.per_run_calibrated.miss_rate"]
    assert m["changepoint.fixed_5pct.false_alarm_rate"] > m["changepoint.cusum.false_alarm_rate"]
    assert m["changepoint.cusum.miss_rate"] <= m["changepoint.cusum_unclipped.miss_rate"]  # clipping helps here
    assert 0 <= m["changepoint.cusum.median_delay"] <= 30
    assert tiny_record["metrics"]["changepoint.cusum.miss_rate"]["origin"] == "computed"
    rows = next(t for t in tiny_record["tables"] if t["name"] == "changepoint")["rows"]
    assert [r[0] for r in rows] == ["fixed 5%", "per-run, calibrated", "CUSUM", "CUSUM, not clipped"]
