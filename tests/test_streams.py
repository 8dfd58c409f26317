"""The streams demo on a CPU: the chunked pipeline is correct, the profiler trace shows every hidden
.item(), and every GPU-only measurement is recorded as not run."""

from __future__ import annotations

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow
tiny_record = demo_record("demos.t11_gpu.streams")


def test_pipeline_and_trace(tiny_record):
    checks = checks_by_name(tiny_record)
    assert all(checks[n]["max_abs_err"] <= checks[n]["atol"] for n in ("overlapped", "serial"))
    assert metric(tiny_record, "trace.item_each_iter.scalar_reads") == 8
    assert metric(tiny_record, "trace.item_at_end.scalar_reads") == 1


def test_gpu_measurements_are_not_run_on_cpu(tiny_record):
    variants = {n["variant"] for n in tiny_record["not_run"]}
    assert "H2D bandwidth, pageable vs pinned" in variants
    assert not any(name.startswith(("h2d.", "overlap.", "loop.")) for name in tiny_record["metrics"])
