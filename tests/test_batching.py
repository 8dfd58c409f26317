"""The batching simulation at the tiny size: Little's law holds for every policy and load (the
simulator's bookkeeping is consistent), at low load no request beats its service time alone and
one that had the server to itself takes exactly that time,
and the statistics are ordered as they must be."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t6_inference.batching")


def test_littles_law_holds_for_every_simulation(tiny_record):
    little = [c for c in tiny_record["checks"] if c["name"].startswith("littles_law.")]
    assert len(little) == 5 * 6  # 5 policies x 6 loads
    policies = {c["name"].split(".")[1] for c in little}
    assert policies == {"static", "continuous", "dynamic_t10", "dynamic_t50", "dynamic_t200"}
    assert tiny_record["metrics"]["littles_law.max_rel_error"]["value"] < 0.01


def test_batched_prefill_and_low_load_latency_is_the_service_time(tiny_record):
    prefill = next(c for c in tiny_record["checks"] if c["name"] == "batched_prefill_equals_one_by_one")
    assert prefill["max_abs_err"] <= 1e-4  # float32 on the CPU: batching the prompts changes nothing
    checks = {c["name"]: c for c in tiny_record["checks"]}
    # known answers: no request beats its own service time alone (the fitted step times never fall with
    # the batch), at the lowest load and on a sparse stream, and a request that had the server to itself
    # (checked on the sparse stream, where most do on any device) took exactly that time
    assert checks["low_load.never_faster_than_alone"]["max_abs_err"] <= 1e-9
    assert checks["sparse.never_faster_than_alone"]["max_abs_err"] <= 1e-9
    assert checks["sparse.alone_takes_service_time"]["max_abs_err"] <= 1e-9
    m = tiny_record["metrics"]
    assert 0 < m["low_load.alone_share"]["value"] <= 1  # on the CPU some requests are alone at the lowest load too
    assert 1 - 1e-9 <= m["low_load.p50_over_service_time"]["value"] < 2  # overlapping requests only add time
    assert m["low_load.arrivals_x_service_time"]["value"] > 0


def test_percentiles_are_ordered(tiny_record):
    m = tiny_record["metrics"]
    for policy in ("static", "continuous", "dynamic_t10", "dynamic_t50", "dynamic_t200"):
        for load in (30, 50, 85):
            assert m[f"{policy}.load{load}.p50_ms"]["value"] <= m[f"{policy}.load{load}.p99_ms"]["value"]
            assert m[f"{policy}.load{load}.tpot_p50_ms"]["value"] <= m[f"{policy}.load{load}.tpot_p99_ms"]["value"]
    rows = next(t for t in tiny_record["tables"] if t["name"] == "simulation")["rows"]
    for row in rows:  # p50 <= p95 <= p99, TTFT p50 <= p99, TTFT p50 <= latency p50, TPOT p50 <= p99
        p50, p95, p99, ttft50, ttft99, tpot50, tpot99 = row[4:11]
        assert p50 <= p95 <= p99 and ttft50 <= ttft99 and ttft50 <= p50 and tpot50 <= tpot99
    assert [s["name"] for s in tiny_record["series"]] == ["latency_throughput", "ttft", "tpot"]


def test_dynamic_batching_with_no_timeout_is_static_and_waiting_fills_batches(tiny_record):
    m = tiny_record["metrics"]
    assert "dynamic_timeout0_is_static" in {c["name"] for c in tiny_record["checks"]}
    # at 10% load (static batching not yet queueing) a longer timeout collects more requests per
    # batch, and every request pays for it in latency
    batches = [m[f"dynamic_t{t}.load10.mean_batch"]["value"] for t in (10, 50, 200)]
    assert batches == sorted(batches) and batches[-1] > m["static.load10.mean_batch"]["value"]
    assert m["dynamic_t200.load10.p50_ms"]["value"] > m["static.load10.p50_ms"]["value"]


def test_tpot_is_at_least_one_decode_step(tiny_record):
    # every generated token after the first costs at least one decode step at batch 1 or more
    rows = next(t for t in tiny_record["tables"] if t["name"] == "step_times")["rows"]
    fastest_step_ms = min(r[2] for r in rows)
    for policy in ("static", "continuous"):
        assert tiny_record["metrics"][f"{policy}.load50.tpot_p50_ms"]["value"] >= 0.99 * fastest_step_ms
