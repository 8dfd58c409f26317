"""Looking up metrics in records and judging claims about them.

A claim is judged on each device it names: it *holds*, is *contradicted*, or is *not measured*
there yet (no record, or the record lacks the metric). Only a contradiction fails the check.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from demos.harness.record import Record
from scripts import catalog
from scripts.markers import Marker, MetricRef

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
    """A marker's @DEVICE: 'gpu' or a device class declared in scripts/datasheets.toml."""
    return device == "gpu" or device in catalog.datasheets()


def target_devices(device: str, records: dict[str, Record]) -> list[str]:
    """The device classes a claim is judged on: @gpu means every GPU with a record (or 'gpu' if none)."""
    if device == "gpu":
        return [c for c in records if catalog.is_gpu_class(c)] or ["gpu"]
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
