"""The batching simulation at the tiny size: Little's law holds for every policy and load (the
simulator's bookkeeping is consistent), low-load latency matches one request's service time,
and the statistics are ordered as they must be."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t6_inference.batching")


def test_littles_law_holds_for_every_simulation(tiny_record):
    little = [c for c in tiny_record["checks"] if c["name"].startswith("littles_law.")]
    assert len(little) == 2 * 6 and all(c["passed"] for c in little)
    assert tiny_record["metrics"]["littles_law.max_rel_error"]["value"] < 0.01


def test_every_check_passed_and_low_load_latency_is_the_service_time(tiny_record):
    assert all(c["passed"] for c in tiny_record["checks"])
    assert 0.5 < tiny_record["metrics"]["low_load.p50_over_service_time"]["value"] < 2


def test_percentiles_are_ordered(tiny_record):
    m = tiny_record["metrics"]
    for policy in ("static", "continuous"):
        for load in (50, 85):
            assert m[f"{policy}.load{load}.p50_ms"]["value"] <= m[f"{policy}.load{load}.p99_ms"]["value"]
    rows = next(t for t in tiny_record["tables"] if t["name"] == "simulation")["rows"]
    for row in rows:  # p50 <= p95 <= p99, TTFT p50 <= p99, TTFT p50 <= latency p50
        p50, p95, p99, ttft50, ttft99 = row[4:9]
        assert p50 <= p95 <= p99 and ttft50 <= ttft99 and ttft50 <= p50
    assert [s["name"] for s in tiny_record["series"]] == ["latency_throughput", "ttft"]
