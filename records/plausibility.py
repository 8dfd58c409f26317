"""The publication gate: why a well-formed record cannot be published. One gate for every door.

The check command applies it to docs/results, the GPU campaign's unpacker to what a GPU window hands
back, and the record-gate demo to the project's records. A record is refused when
- it is not where it says it belongs (demo and device class), is a test fixture, names no existing demo,
  or a device class that records/datasheets.toml does not declare;
- a rate exceeds its device's datasheet peak, or its datasheet gives no peak to bound it;
- a fraction of its own run's ceiling exceeds its device's FRACTION_MARGIN (``fraction_max``: the ceiling is the
  wrong yardstick);
- its ceilings' two samples (the start and the end of the run) differ by more than its device's
  CEILING_DRIFT_MAX (``drift_max``): the machine changed under the run, so it is quarantined and measured again;
- a correctness check failed, there is none, or it names no commit.
Each problem is one line naming the field.
"""

from __future__ import annotations

from records import datasheets, devices, record, units
from records.numbers import fmt_number

# A ceiling is the best stable sample of the better of two measurements, and a time is the median of stable
# samples, so a fraction above 1 means the ceiling is the wrong yardstick (a cache-resident kernel against a
# memory ceiling, one thread against many, a ceiling that under-reads the device) and the fraction means nothing.
# - a CPU: refused above 1 (its 68 protocol-3 records: none above 1; a CPU record is re-measured in a minute);
# - a GPU: published up to 1.25 and named (``above_ceiling``): a window is too rare to throw a record away, and the
#   first H200 window's one-shape bf16 ceiling read below six products of the same runs (up to 1.09x; protocol 3
#   measures the better of two shapes).
FRACTION_MARGIN = {"gpu": 1.25, "cpu": 1.0}


def fraction_max(device_class: str) -> float:
    """The largest fraction of a same-run ceiling the gate publishes for this device class (FRACTION_MARGIN)."""
    return FRACTION_MARGIN["gpu" if devices.is_gpu_class(device_class) else "cpu"]
# A ceiling is measured at the start and at the end of a run; beyond this ratio between the two the machine
# changed under the run (another process, a throttled clock) and its numbers are not published. The bound is what
# the device does when nothing changes, measured (an A/A of the ceilings):
# - a GPU: the first H200 window's 21 records drifted at most 1.07x (63 ceilings), so 1.25 refuses a real change;
# - a CPU of a shared VM: this 2-core VM, quiet (no other process of ours), one process re-measuring the same
#   buffers for 150 s, saw its memory ceiling move 1.58x max/min (pairs 25 s apart: median 1.13x, 5 of 24 above
#   1.25x) and its fp32 matmul 1.38x: the neighbours' memory traffic, which /proc/stat cannot see. At 1.25 a
#   quiet run was refused one time in five; the bound is that A/A's range. Fractions are of the better sample,
#   so a drift within it makes a fraction read low, never high.
CEILING_DRIFT_MAX = {"gpu": 1.25, "cpu": 1.6}


def drift_max(device_class: str) -> float:
    """The largest start/end ratio of a ceiling that a quiet run of this device class shows (CEILING_DRIFT_MAX)."""
    return CEILING_DRIFT_MAX["gpu" if devices.is_gpu_class(device_class) else "cpu"]
# What bounds a byte rate of each kind in records/datasheets.toml (memory bandwidth when not named).
BYTE_PEAK_NAMES = {"host_link": "host link rate (one way)"}


def identity_problems(rec: record.Record, where: str, demo: str, device_class: str, known_demos) -> list[str]:
    """The record is the one its place says (docs/results/<demo>/<device_class>.json), of a real demo and a
    declared class, and no fixture."""
    if not devices.is_class(device_class):
        return [f"{where}: the file name is not a device class (lower-case letters, digits and '-')"]
    if rec.demo != demo or rec.device_class != device_class:
        return [f"{where}: demo/device_class say {rec.demo}/{rec.device_class}, but the file sits at "
                f"{demo}/{device_class}.json"]
    if demo not in known_demos:
        return [f"{where}: no demo named {demo!r} exists under demos/ (remove the record or the typo)"]
    if device_class not in datasheets.sheets():
        return [f"{where}: device class {device_class!r} is not declared in records/datasheets.toml; add it there "
                "with its published peaks and their source"]
    if rec.is_fixture:
        return [f"{where}: a test fixture (\"fixture\": true) cannot be published under docs/results"]
    return []


def ceiling_drift(rec: record.Record | dict) -> dict[str, float]:
    """Per ceiling: the larger of its two same-run samples over the smaller (1.0 = identical)."""
    drift = {}
    for name, c in rec.get("ceilings", {}).items():
        samples = [s for s in c.get("samples", []) if isinstance(s, (int, float)) and s > 0]
        if len(samples) == 2:
            drift[name] = max(samples) / min(samples)
    return drift


def vet(rec: record.Record | dict, where: str) -> list[str]:
    """Why a record's contents cannot be published: a rate above its datasheet peak or its own ceiling, a rate
    whose peak is unknown, a failed correctness check, no check, no commit. One line each, naming the field."""
    rec = rec if isinstance(rec, record.Record) else record.Record(rec)
    problems = []
    label = datasheets.label(rec.device_class)
    for name, m in rec.metrics.items():
        if m.unit in units.NONNEGATIVE and m.value < 0 and not m.signed:
            problems.append(f"{where}: metrics.{name} = {fmt_number(m.value)} {m.unit}: a time, size, rate or speedup "
                            "cannot be negative (a fitted slope or a difference says \"signed\": true)")
    for section, items in (("metrics", rec.metrics), ("ceilings", rec.ceilings)):
        for name, m in items.items():
            rate = m.rate
            if rate is None:
                continue
            kind, value = rate
            field = f"{section}.{name}"
            if kind == "flops" and m.dtype is None:
                ceiling = rec.ceilings.get(m.ceiling) if m.ceiling else None
                m = record.Metric(**{**m.__dict__, "dtype": ceiling.dtype if ceiling else None})
            peak = datasheets.peak(rec.device_class, m)
            cached = kind == "bytes" and (m.cache_resident or m.kind == "cache")
            bound = "cache bandwidth (records/datasheets.py, CACHE_GBPS)" if cached else BYTE_PEAK_NAMES.get(m.kind, "memory bandwidth")
            if peak is None:
                what = f"{m.dtype} FLOP rate" if kind == "flops" else bound
                problems.append(f"{where}: {field}: the {label} datasheet gives no peak for its {what} "
                                f"(declare the metric's dtype, or add the peak to records/datasheets.toml)")
            elif peak is not None and value > peak:
                problems.append(f"{where}: {field} = {fmt_number(value)} {'GB/s' if kind == 'bytes' else 'TFLOP/s'} "
                                f"exceeds the {label} datasheet "
                                f"{bound if kind == 'bytes' else m.dtype + ' peak'}"
                                f" of {fmt_number(peak)}: a unit slip, a cache-resident measurement or a timing without "
                                "synchronisation")
            if m.fraction_of_ceiling is not None and m.fraction_of_ceiling > fraction_max(rec.device_class) \
                    and not m.cache_resident:
                problems.append(f"{where}: {field} is {fmt_number(m.fraction_of_ceiling)}x its same-run ceiling "
                                f"{m.ceiling}: the ceiling is the wrong yardstick (cache-resident? other thread count?); "
                                "fix the ceiling, or mark the metric cache_resident")
    bound = drift_max(rec.device_class)
    for name, drift in ceiling_drift(rec).items():
        if drift > bound:
            problems.append(f"{where}: ceilings.{name}: its start and end samples differ {fmt_number(drift)}x (more "
                            f"than {bound}x): the machine changed under the run; measure it again when quiet")
    for c in rec.checks:
        if not c.passed:
            problems.append(f"{where}: correctness check {c.name!r} failed; a record with a failed check is not "
                            "published")
    if not rec.provenance.commit:
        problems.append(f"{where}: provenance.commit is null; measure from a git checkout, or pass the commit "
                        "(MM_SOURCE_COMMIT) where the tree has no .git")
    if not any(not c.expected_failure for c in rec.checks):  # a variant shown wrong on purpose checks nothing else
        problems.append(f"{where}: no correctness check; a demo checks each variant against a reference before it "
                        "times it")
    return problems


def above_ceiling(rec: record.Record | dict, where: str) -> list[str]:
    """Rates above their own run's ceiling but within its device's FRACTION_MARGIN (a GPU's): published, and named. A ceiling must bound
    every rate of its kind that the run measured, so one above it means the ceiling under-reads the device (on
    the first H200 window, one 8192^3 bf16 product: shorter products in other records ran up to 1.09x faster)."""
    rec = rec if isinstance(rec, record.Record) else record.Record(rec)
    return [f"{where}: metrics.{name} is {fmt_number(m.fraction_of_ceiling)}x its same-run ceiling {m.ceiling}: "
            "that ceiling under-reads this device, and the page shows the fraction above 1 until it is re-measured"
            for name, m in rec.metrics.items()
            if m.fraction_of_ceiling is not None and 1 < m.fraction_of_ceiling <= fraction_max(rec.device_class)
            and not m.cache_resident]


def problems(rec: record.Record, where: str, demo: str, device_class: str, known_demos) -> list[str]:
    """Everything that keeps a well-formed record from being published (identity first, then contents)."""
    return identity_problems(rec, where, demo, device_class, known_demos) or vet(rec, where)
