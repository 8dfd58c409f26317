"""Ways people time an operation, for the T10 demos that compare them (some deliberately wrong).

Every other demo times through the harness (demos/harness/timing.py) and never by hand. These
demos are about timers themselves, so this module holds the hand-written ones under test, each
named after what it does. Each returns a list of seconds per call.

- ``host_clock_no_sync``: host clock around a call, no wait before the clock stops. On a GPU the
  call returns when the kernel is *queued*, so this measures the launch, not the work. WRONG on
  any asynchronous device; right on a CPU, whose ops finish before they return.
- ``host_clock_sync``: the same with a device sync before the clock stops (what the harness does
  on CPU).
- ``cuda_events``: CUDA events recorded on the stream around each call (what the harness does on a
  GPU), back to back, no cache flush.
- ``torch_timer``: torch.utils.benchmark.Timer.blocked_autorange; note its ``num_threads``
  defaults to 1.
- ``triton_do_bench``: triton.testing.do_bench (GPU only: it needs Triton's active GPU driver).
"""

from __future__ import annotations

import time
from typing import Callable

import torch


def host_clock_no_sync(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> list[float]:
    """Queue empty before the start (sync), but no sync before the stop: the classic mistake."""
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    sync()
    return times


def host_clock_sync(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> list[float]:
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return times


def cuda_events(fn: Callable[[], object], repeats: int) -> list[float]:
    """Events recorded on the current stream before and after each call; read after one final sync."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


def torch_timer(fn: Callable[[], object], num_threads: int, min_run_time: float):
    """torch.utils.benchmark.Timer: runs fn in blocks, syncing the accelerator around each block.
    Returns the Measurement (median, iqr, times per call, number_per_run)."""
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads, label="op")
    return timer.blocked_autorange(min_run_time=min_run_time)


def triton_do_bench(fn: Callable[[], object], return_mode: str = "median") -> float:
    """triton.testing.do_bench: CUDA events per call, L2 cleared before each; returns seconds.
    Its default return_mode is "mean"; we ask for "median" to match the harness."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode=return_mode) / 1e3
