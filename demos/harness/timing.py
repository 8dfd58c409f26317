"""The timing protocol (design.md): first call apart, warm-up, repeats, median and spread.

1. The first call is timed on its own (synchronised): for a compiled function it holds the trace
   and compile, so it never mixes with steady state.
2. Warm-up calls run untimed.
3. Repeats run until ``min_time`` seconds of measured work or ``max_repeats``, never fewer than
   ``min_repeats``; each repeat is timed on the device (CUDA events) or on the host clock with a
   sync before the clock stops. On a GPU the L2 cache is flushed before every repeat.
4. The result is the median with the 10th and 90th percentiles as the spread.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

# The version of how the harness measures: this timing protocol, the ceilings (ceilings.py), the L2 flush
# and the CPU timer (device.py), the thread policy (threads.py). Every record's digest includes it
# (records/digest.py reads it from this file), so bumping it stales every record, and nothing else about the
# harness does: bump it, in the commit that changes how a number is measured, and regenerate. A refactor,
# a rename or a moved module of the harness is not a change of protocol.
PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class Settings:
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 200
    min_time: float = 0.2  # seconds of timed work to aim for
    flush_l2: bool = True

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Timing:
    first_call_s: float
    median_s: float
    p10_s: float
    p90_s: float
    repeats: int

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already-sorted values, q in [0, 100]."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(first_call_s: float, times: list[float]) -> Timing:
    ordered = sorted(times)
    return Timing(
        first_call_s=first_call_s,
        median_s=statistics.median(ordered),
        p10_s=percentile(ordered, 10),
        p90_s=percentile(ordered, 90),
        repeats=len(ordered),
    )


def measure(fn: Callable[[], object], device, settings: Settings = Settings()) -> Timing:
    """Time fn() on device following the protocol above. ``device`` needs sync, flush, time_calls."""
    device.sync()
    start = time.perf_counter()
    fn()
    device.sync()
    first_call_s = time.perf_counter() - start

    for _ in range(settings.warmup):
        fn()
    device.sync()

    # Size the repeat count from one timed call, then take them in one batch.
    (probe,) = device.time_calls(fn, 1, settings.flush_l2)
    wanted = int(settings.min_time / max(probe, 1e-9))
    repeats = max(settings.min_repeats, min(settings.max_repeats, wanted))
    times = device.time_calls(fn, repeats, settings.flush_l2)
    return summarize(first_call_s, times)
