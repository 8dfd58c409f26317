"""The timing protocol (design.md): first call apart, warm-up, repeats, a stability guard, median and spread.

1. The first call is timed on its own (synchronised): for a compiled function it holds the trace
   and compile, so it never mixes with steady state.
2. Warm-up calls run untimed.
3. Repeats run until ``min_time`` seconds of measured work or ``max_repeats``, never fewer than
   ``min_repeats``; each repeat is timed on the device (CUDA events) or on the host clock with a
   sync before the clock stops. On a GPU the L2 cache is flushed before every repeat.
4. The stability guard (``judge``): what the operating system says about the timed samples decides
   whether they measure the work or the machine. On a host clock each sample knows how long the
   process's threads ran and waited for a CPU while it ran (Linux schedstat); a sample whose threads waited
   while they left a core's worth of room unused was preempted by another process, and holds its time
   slice (a busy 2-core machine put whole 8 ms slices into kernel times). The
   measurement is stable when few samples were preempted and the others agree (``SPREAD_BOUND``).
   An unstable one is measured again, up to ``ATTEMPTS`` times; a CPU run still unstable stops with one
   line naming the measurement and the machine's load, before any record is written (a GPU run keeps
   its timing, flagged: its device timers do not see the host's scheduler, and a GPU window is rare).
5. The statistic follows what is measured: a variant's time is the median of the stable samples (with
   their 10th and 90th percentiles as the spread); a ceiling is the best of them (``best_s``), because
   a ceiling is the best the machine can do.
Every measurement also records the involuntary context switches (``getrusage``), the load average and the
CPU time other processes (and the hypervisor, as steal) took while it ran; the run keeps them all
(``journal``) for its record's ``stability``.
"""

from __future__ import annotations

import inspect
import os
import resource
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from records.errors import fail

# The version of how the harness measures: this timing protocol, the ceilings (ceilings.py), the L2 flush
# and the CPU timer (device.py), the thread policy (threads.py). Every record's digest includes it
# (records/digest.py reads it from this file), so bumping it stales every record, and nothing else about the
# harness does: bump it, in the commit that changes how a number is measured, and regenerate. A refactor,
# a rename or a moved module of the harness is not a change of protocol.
# 2: the stability guard (preempted samples left out, re-measure, refuse), ceilings as the best stable sample.
# 3: the copy ceiling is the better of a copy and an in-place pass (a CPU's write-allocate); a CPU's bf16 ceiling
#    at half the matmul size; a GPU's ceilings from 10 warm-ups and 20 samples, its bf16 ceiling the better of
#    n^3 and (n/2)^3 (the H200's one-shape, three-sample ceiling read below six demos' own bf16 products).
PROTOCOL_VERSION = 3

# The stability guard's bounds, stated once (they are in every record's ``stability.rule``).
WAIT_FRACTION = 0.05  # a sample is preempted when its threads waited for a CPU longer than this part of it ...
ROOM_FOR_OTHERS = 0.25  # ... while its own threads left more than this many cores unused (room for another process)
BUSY_CORES = 0.5  # ... and other processes took at least this many cores over the measurement (/proc/stat)
PREEMPTED_MAX = 0.25  # at most this fraction of a measurement's samples preempted
STABLE_MIN = 3  # at least this many samples not preempted
SPREAD_BOUND = 2.0  # the stable samples' 90th percentile at most this many times their 10th ...
SPREAD_FLOOR_S = 50e-6  # ... or at most this much above it (a microsecond kernel's jitter is not a busy machine)
ATTEMPTS = 3  # a measurement is taken at most this many times
RULE = (f"a sample is preempted when the process's threads waited for a CPU (run-queue wait) longer than "
        f"{WAIT_FRACTION:.0%} of it while they left more than {ROOM_FOR_OTHERS:g} of a core unused and other processes "
        f"took at least {BUSY_CORES:g} cores over the measurement (a window too short to tell is followed by an idle "
        "moment that tells); a measurement "
        "is stable when "
        f"at most {PREEMPTED_MAX:.0%} of its samples were preempted, at least {STABLE_MIN} were not, and their 90th "
        f"percentile is within {SPREAD_BOUND:g}x of their 10th (or within {SPREAD_FLOOR_S * 1e6:g} us of it); an unstable one is measured again, {ATTEMPTS} times "
        "at most, and a CPU run still unstable stops without a record. A time is the median of the stable samples, "
        "a ceiling the best of them")


@dataclass(frozen=True)
class Settings:
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 200
    min_time: float = 0.2  # seconds of timed work to aim for
    flush_l2: bool = True
    # Stop the run when a measurement stays unstable: a CPU record meant for the site. A tiny-size run (the
    # tests' smoke run: cache-sized data, microsecond timings, never published) and a GPU run keep theirs, flagged.
    refuse_unstable: bool = False  # the Run sets it for a CPU run that is not tiny

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Timing:
    first_call_s: float
    median_s: float  # of the stable samples
    p10_s: float
    p90_s: float
    repeats: int  # samples taken in the kept attempt
    best_s: float = 0.0  # the fastest stable sample (what a ceiling reports)
    stable_samples: int = 0
    preempted: int | None = None  # samples preempted (None: the timer cannot tell, e.g. CUDA events)
    spread: float = 1.0  # p90 / p10 of the stable samples
    attempts: int = 1
    stable: bool = True
    why: str = ""  # why the kept attempt is unstable ("" when stable)
    switches: int | None = None  # involuntary context switches of the process during the kept attempt
    others_cores: float | None = None  # CPU time other processes and the hypervisor took, per second of it
    steal_s: float | None = None
    load_1min: float | None = None
    where: str = ""

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


def preempted_flags(times: list[float], waits: list[float] | None, ran: list[float] | None = None,
                    cpus: int | None = None, busy: bool | None = None) -> list[bool] | None:
    """Which samples were preempted by another process: their threads waited for a CPU longer than WAIT_FRACTION
    of the sample, while the machine had room for someone else (the process's own threads left more than
    ROOM_FOR_OTHERS of a core unused) and someone else ran (``busy``: other processes took at least BUSY_CORES
    over the measurement; None when its window was too short for /proc/stat to say). A process also waits on
    itself: its own threads oversubscribing the cores (OpenMP workers spinning beside XLA's pool) or waking
    idle workers; that wait is part of the work measured, and on a quiet machine it is not preemption."""
    if waits is None or busy is False:
        return None if waits is None else [False] * len(times)
    cpus = cpus or os.cpu_count() or 1
    ran = ran if ran is not None else [0.0] * len(times)
    return [w > WAIT_FRACTION * t and cpus * t - r > ROOM_FOR_OTHERS * t for t, w, r in zip(times, waits, ran)]


def judge(times: list[float], preempted: list[bool] | None) -> tuple[bool, str, list[float]]:
    """(stable, why not, the stable samples) for one measurement's samples."""
    kept = list(times) if preempted is None else [t for t, p in zip(times, preempted) if not p]
    n_pre = len(times) - len(kept)
    if n_pre > PREEMPTED_MAX * len(times) or len(kept) < min(STABLE_MIN, len(times)):
        return False, f"{n_pre} of {len(times)} samples preempted", kept or list(times)
    ordered = sorted(kept)
    p10, p90 = percentile(ordered, 10), percentile(ordered, 90)
    spread = p90 / max(p10, 1e-12)
    if spread > SPREAD_BOUND and p90 - p10 > SPREAD_FLOOR_S:
        return False, f"samples spread {spread:.1f}x (90th over 10th percentile)", kept
    return True, "", kept


def summarize(first_call_s: float, times: list[float], preempted: list[bool] | None = None, **extra) -> Timing:
    stable, why, kept = judge(times, preempted)
    ordered = sorted(kept)
    p10, p90 = percentile(ordered, 10), percentile(ordered, 90)
    return Timing(first_call_s=first_call_s, median_s=statistics.median(ordered), p10_s=p10, p90_s=p90,
                  repeats=len(times), best_s=ordered[0], stable_samples=len(kept),
                  preempted=None if preempted is None else sum(preempted), spread=p90 / max(p10, 1e-12),
                  stable=stable, why=why, **extra)


# -- what the operating system says ----------------------------------------------------------------------
def involuntary_switches() -> int:
    """Involuntary context switches of this process so far (all its threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def _machine_busy_s() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine including steal, steal seconds) from /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / hz, steal / hz


class OsView:
    """CPU time the rest of the machine took while a block ran: machine busy time minus this process group's."""

    def __enter__(self):
        self.t0, self.own0, self.busy0 = time.perf_counter(), _own_cpu_s(), _machine_busy_s()
        self.switches0 = involuntary_switches()
        return self

    def __exit__(self, *exc):
        if hasattr(self, "switches"):
            return False  # already closed
        wall = max(time.perf_counter() - self.t0, 1e-9)
        self.switches = involuntary_switches() - self.switches0
        busy1 = _machine_busy_s()
        if self.busy0 is None or busy1 is None or wall < 0.1:  # /proc/stat counts in 10 ms ticks
            self.others_cores = self.steal_s = None
        else:
            others = (busy1[0] - self.busy0[0]) - (_own_cpu_s() - self.own0)
            self.others_cores = max(others, 0.0) / wall
            self.steal_s = busy1[1] - self.busy0[1]
        self.load_1min = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return False


def machine_others_cores(seconds: float = 0.12) -> float:
    """Cores the rest of the machine keeps busy right now: /proc/stat over a moment this process sleeps through."""
    with OsView() as view:
        time.sleep(seconds)
    return view.others_cores or 0.0


def _own_cpu_s() -> float:
    """CPU seconds of this process's whole process group (the demo and any worker processes it started: a pool
    of processes, rank processes, compilers), children it has reaped included: its own work is not another
    process's load. Falls back to this process alone where /proc is not there."""
    try:
        group = os.getpgrp()
        total = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue  # a process that just ended
            if int(fields[2]) == group:  # after the name: state, ppid, pgrp, ...; utime, stime, cutime, cstime at 11-14
                total += sum(int(x) for x in fields[11:15])
        return total / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        t = os.times()
        return t.user + t.system


def caller() -> str:
    """The first place outside the harness that asked for this measurement: 'demos/t3/x.py:145'."""
    harness = Path(__file__).resolve().parent
    for frame in inspect.stack()[1:]:
        path = Path(frame.filename).resolve()
        if path.parent != harness:
            try:
                path = path.relative_to(harness.parent.parent)
            except ValueError:
                pass
            return f"{path}:{frame.lineno}"
    return "?"


# Every measurement of this process, in order; the Run turns it into its record's ``stability``.
journal: list[Timing] = []


def machine_busy_line(timing: Timing) -> str:
    load = f"load {timing.load_1min:.1f} on {os.cpu_count()} cores" if timing.load_1min is not None else "a busy machine"
    others = f", other processes took {timing.others_cores:.1f} cores" if timing.others_cores else ""
    return (f"machine busy: {load}; rerun when quiet ({timing.where}: {timing.why} in each of "
            f"{timing.attempts} attempts{others})")


def measure(fn: Callable[[], object], device, settings: Settings = Settings(), where: str | None = None,
            attempts: int = ATTEMPTS) -> Timing:
    """Time fn() on device following the protocol above. ``device`` needs sync, flush, time_calls (and
    ``kind``: an unstable timing stops the run only on a CPU, and only with ``settings.refuse_unstable``).
    ``attempts=1`` where fn runs collectives: one rank taking a measurement again alone would wait forever for
    the others (a rank's timing is then kept and flagged, as on a GPU)."""
    where = where or caller()
    device.sync()
    start = time.perf_counter()
    fn()
    device.sync()
    first_call_s = time.perf_counter() - start

    view = OsView().__enter__()  # the first attempt's view spans the warm-up too: /proc/stat counts in 10 ms ticks
    for _ in range(settings.warmup):
        fn()
    device.sync()

    # Size the repeat count from one timed call, then take them in one batch.
    (probe,) = device.time_calls(fn, 1, settings.flush_l2)
    wanted = int(settings.min_time / max(probe, 1e-9))
    repeats = max(settings.min_repeats, min(settings.max_repeats, wanted))
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            view = OsView().__enter__()
        times = device.time_calls(fn, repeats, settings.flush_l2)
        view.__exit__()
        waits, ran = getattr(times, "waits", None), getattr(times, "ran", None)
        others = view.others_cores
        flags = preempted_flags(times, waits, ran, busy=None if others is None else others >= BUSY_CORES)
        if others is None and flags and not judge(list(times), flags)[0]:
            # Too short a window for /proc/stat to say whether anyone else ran: ask it now, over an idle moment.
            others = machine_others_cores()
            flags = preempted_flags(times, waits, ran, busy=others >= BUSY_CORES)
        timing = summarize(first_call_s, list(times), flags,
                           attempts=attempt, switches=view.switches, others_cores=others, steal_s=view.steal_s,
                           load_1min=view.load_1min, where=where)
        if timing.stable:
            break
    journal.append(timing)
    if not timing.stable and settings.refuse_unstable and getattr(device, "kind", "cpu") == "cpu":
        fail(machine_busy_line(timing))
    return timing
