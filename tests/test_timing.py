"""The timing protocol: synchronisation, first call apart, percentiles."""

from __future__ import annotations

import threading
import time

import pytest

from demos.harness.device import time_with_host_clock
from demos.harness.timing import Settings, measure, percentile

FAST = Settings(warmup=1, min_repeats=3, max_repeats=3, min_time=0.0, flush_l2=False)
DEVICE_WORK_S = 0.03


class FakeAsyncDevice:
    """A device whose operations return at once and finish later, like a GPU launch."""

    def __init__(self) -> None:
        self.pending: list[threading.Thread] = []
        self.flushes = 0

    def launch_slow_op(self) -> None:
        worker = threading.Thread(target=time.sleep, args=(DEVICE_WORK_S,))
        worker.start()
        self.pending.append(worker)

    def sync(self) -> None:
        while self.pending:
            self.pending.pop().join()

    def flush(self) -> None:
        self.flushes += 1

    def time_calls(self, fn, repeats, flush):
        return time_with_host_clock(self, fn, repeats, flush)


class ForgetfulDevice(FakeAsyncDevice):
    """The bug the protocol guards against: a 'sync' that does not wait."""

    def sync(self) -> None:
        pass


def test_slow_device_op_is_not_undercounted():
    device = FakeAsyncDevice()
    timing = measure(device.launch_slow_op, device, FAST)
    assert timing.median_s >= DEVICE_WORK_S
    assert timing.p10_s >= DEVICE_WORK_S
    assert timing.first_call_s >= DEVICE_WORK_S
    assert timing.repeats == 3


def test_without_sync_the_same_op_looks_free():
    """Control: if the harness did not wait for the device, the test above would catch it."""
    device = ForgetfulDevice()
    timing = measure(device.launch_slow_op, device, FAST)
    assert timing.median_s < DEVICE_WORK_S / 3


def test_flush_runs_before_every_timed_repeat():
    device = FakeAsyncDevice()
    t = measure(lambda: None, device, Settings(warmup=0, min_repeats=4, max_repeats=4, min_time=0.0, flush_l2=True))
    assert device.flushes == 1 + 4 * t.attempts  # the probe call, then each repeat (of each attempt)


def test_first_call_is_kept_apart_from_steady_state():
    calls = {"n": 0}

    def compile_then_fast():
        calls["n"] += 1
        time.sleep(0.05 if calls["n"] == 1 else 0.001)

    timing = measure(compile_then_fast, FakeAsyncDevice(), FAST)
    assert timing.first_call_s >= 0.05
    assert timing.median_s < 0.02


def test_repeats_follow_min_time():
    timing = measure(lambda: time.sleep(0.002), FakeAsyncDevice(),
                     Settings(warmup=0, min_repeats=2, max_repeats=1000, min_time=0.05, flush_l2=False))
    assert 5 <= timing.repeats <= 40


@pytest.mark.parametrize("q, expected", [(0, 1.0), (50, 3.0), (100, 5.0), (10, 1.4), (90, 4.6)])
def test_percentile(q, expected):
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], q) == pytest.approx(expected)
