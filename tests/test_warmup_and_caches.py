"""T10 warmup_and_caches: the compile is kept apart from the steady state, a cache-resident working set
reads faster back to back than flushed, and the median's spread shrinks with more repeats."""

from __future__ import annotations

import pytest
from conftest import demo_record

from demos.t10_benchmarking._cpu_cache import CpuCacheFlusher

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t10_benchmarking.warmup_and_caches")


def test_first_call_is_not_steady_state(tiny_record):
    m = tiny_record["metrics"]
    assert m["compiled.first_call_s"]["value"] > 0.5
    assert m["compiled.first_over_steady"]["value"] > 100
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert checks["compiled_chain"]["max_abs_err"] <= checks["compiled_chain"]["atol"]
    # every working set that was timed had its sum checked against float64
    rows = next(t for t in tiny_record["tables"] if t["name"] == "cache")["rows"]
    assert {f"sum.{r[0]}MiB" for r in rows} <= set(checks)


def test_cache_resident_is_faster(tiny_record):
    m = tiny_record["metrics"]
    assert m["cache.inside_mib"]["value"] < m["cache.beyond_mib"]["value"]
    assert m["cache.inside.warm_over_flushed"]["value"] > 1.2
    rows = next(t for t in tiny_record["tables"] if t["name"] == "cache")["rows"]
    assert [r[1] for r in rows] == ["inside", "inside", "beyond"]


def test_median_spread_shrinks_with_repeats(tiny_record):
    rows = next(t for t in tiny_record["tables"] if t["name"] == "repeats")["rows"]
    boot = [r[1] for r in rows]
    assert boot[-1] < boot[0]
    m = tiny_record["metrics"]
    assert m["spread.min_over_median"]["value"] <= 1 <= m["spread.p99_over_median"]["value"]


def test_flusher_reads_a_buffer_beyond_the_cache():
    f = CpuCacheFlusher(llc_bytes=32 * 2**20)
    assert f.flush_bytes >= 4 * 32 * 2**20
    calls = []
    times = f.time_calls(lambda: calls.append(1), 3, flush=True)
    assert len(times) == 3 and len(calls) == 3
