"""Looking up metrics in records and judging claims about them.

A claim is judged on each device it names: it *holds*, is *contradicted*, or is *not measured*
there yet (no record, or the record lacks the metric). Only a contradiction fails the check.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from records.record import Record
from records import datasheets, devices
from website.markers import Marker, MetricRef

COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


class MissingMetric(KeyError):
    pass


def metric_value(rec: Record, ref: MetricRef) -> tuple[float, str]:
    """(value, unit) of a metric reference in one record; MissingMetric when absent."""
    metric = rec.metrics.get(ref.name)
    if metric is None:
        raise MissingMetric(f"{rec.demo}/{rec.device_class} has no metric {ref.name!r}")
    if ref.fraction:
        if metric.fraction_of_ceiling is None:
            raise MissingMetric(f"metric {ref.name!r} has no ceiling, so {ref.name}:fraction means nothing")
        return ref.scale * metric.fraction_of_ceiling, "fraction"
    return ref.scale * metric.value, metric.unit


def known_device(device: str) -> bool:
    """A marker's @DEVICE: 'gpu' or a device class declared in records/datasheets.toml."""
    return device == "gpu" or device in datasheets.sheets()


def gpu_classes(records: dict[str, Record]) -> list[str]:
    """The GPU classes with a record, newest measurement first (an H100 and an H200 record are each a GPU record)."""
    gpus = [c for c in records if devices.is_gpu_class(c)]
    return sorted(gpus, key=lambda c: records[c].provenance.utc, reverse=True)


def gpu_class_for(metric_name: str, records: dict[str, Record]) -> str:
    """The class an @gpu metric marker shows: the newest GPU record holding that metric, else the newest GPU
    record, else 'gpu' (none yet)."""
    gpus = gpu_classes(records)
    return next((c for c in gpus if metric_name in records[c].metrics), gpus[0] if gpus else "gpu")


def target_devices(device: str, records: dict[str, Record]) -> list[str]:
    """The device classes a claim is judged on: @gpu means every GPU with a record, newest first (or 'gpu' if none)."""
    if device == "gpu":
        return gpu_classes(records) or ["gpu"]
    return [device]


@dataclass(frozen=True)
class Verdict:
    device_class: str
    status: str  # holds | contradicted | not measured
    lhs: float | None = None
    rhs: float | None = None
    note: str = ""


def judge(claim: Marker, records: dict[str, Record]) -> list[Verdict]:
    verdicts = []
    for device_class in target_devices(claim.device, records):
        rec = records.get(device_class)
        if rec is None:
            verdicts.append(Verdict(device_class, "not measured", note="no record yet"))
            continue
        try:
            sides = [side if isinstance(side, float) else metric_value(rec, side)[0] for side in (claim.lhs, claim.rhs)]
        except MissingMetric as e:
            verdicts.append(Verdict(device_class, "not measured", note=str(e).strip('"')))
            continue
        holds = COMPARE[claim.op](sides[0], sides[1])
        verdicts.append(Verdict(device_class, "holds" if holds else "contradicted", sides[0], sides[1]))
    return verdicts


MARGIN_RULE = 1.4  # a CPU claim must hold with this much room: CI re-measures on a busy machine


TIME_UNITS = {"ns", "us", "µs", "ms", "s"}
TIMING_WORDS = ("time", "speed", "faster", "slower", "latency", "throughput", "per second")


def timing_based(rec: Record, ref) -> bool:
    """Whether a claim side moves with the machine's load: a duration, a rate, or a ratio of timings (its
    label speaks of time or speed). Counts, bytes and accuracies are the same in every run."""
    if not isinstance(ref, MetricRef) or ref.name not in rec.metrics:
        return False
    m = rec.metrics[ref.name]
    if not m.measured:  # a formula's or a datasheet's value does not move with the machine's load
        return False
    if m.unit in TIME_UNITS or m.unit.endswith("/s") or ref.fraction:
        return True
    return m.unit == "x" and any(word in m.label.lower() for word in TIMING_WORDS)


def margin(v: Verdict, op: str) -> float | None:
    """How much room a holding claim has: the factor by which its sides could move toward each other before
    it flips (lhs / rhs for > and >=, rhs / lhs for < and <=). None when the sides are not both positive."""
    if v.status != "holds" or v.lhs is None or v.rhs is None or v.lhs <= 0 or v.rhs <= 0:
        return None
    return v.lhs / v.rhs if op in (">", ">=") else v.rhs / v.lhs
