"""T10 timing_wrong_right: the timers agree where they should, the GPU-only ones are recorded as not
run on CPU, and a sync-less host clock is shown (on a fake asynchronous device) to time the launch."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import demo_record

from demos.t10_benchmarking import _timers

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t10_benchmarking.timing_wrong_right")


def test_checks_and_agreement(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert checks["matmul"]["max_abs_err"] <= checks["matmul"]["atol"]
    assert {"agrees.host clock + sync", "agrees.host clock, no sync"} <= set(checks)
    m = tiny_record["metrics"]
    assert 1 / 1.5 <= m["sync_over_harness"]["value"] <= 1.5
    assert 1 / 1.5 <= m["no_sync_over_harness"]["value"] <= 1.5  # on a CPU, sync is a no-op


def test_gpu_timers_not_run_on_cpu(tiny_record):
    variants = {n["variant"] for n in tiny_record["not_run"]}
    assert {"CUDA events", "triton do_bench"} <= variants
    assert "no_sync_over_events" not in tiny_record["metrics"]
    rows = tiny_record["tables"][0]["rows"]
    assert len(rows) == 5 and rows[0][0] == "harness (run.time)"


def test_sync_less_clock_times_the_launch_on_an_async_device():
    """A fake asynchronous device: a call queues 100 ms of work on a thread and returns at once."""
    pending = []

    def launch():
        worker = threading.Thread(target=time.sleep, args=(0.1,))
        worker.start()
        pending.append(worker)

    def sync():
        while pending:
            pending.pop().join()

    no_sync = _timers.host_clock_no_sync(launch, 3, sync)
    with_sync = _timers.host_clock_sync(launch, 3, sync)
    assert sorted(no_sync)[1] < 0.05  # the median: starting a thread on a busy machine can itself take ms
    assert min(with_sync) >= 0.1
