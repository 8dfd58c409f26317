"""The published datasheet figures (records/datasheets.toml): the one reader, and what they bound.

Every figure a page, a demo, a calculator or the plausibility gate uses comes from that file; each entry
cites its source.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from records.paths import DATASHEETS, REPO_ROOT


def load(root: Path = REPO_ROOT) -> dict[str, dict]:
    """Every device class's entry: label, peaks, memory and host link figures, and its source."""
    with open(root / DATASHEETS.relative_to(REPO_ROOT), "rb") as f:
        return tomllib.load(f)


@cache
def sheets() -> dict[str, dict]:
    """load(), once per process (readers that never see the file change: the check, a site build)."""
    return load()


def label(device_class: str) -> str:
    return sheets().get(device_class, {}).get("label", device_class)


def peak(device_class: str, metric) -> float | None:
    """The published peak that bounds a rate metric (a records.record.Metric) on this device class, in the
    metric's normalised unit (GB/s or TFLOP/s): for bytes the host-device link's one-way rate (kind
    "host_link") or else the memory bandwidth (device memory, or a link between devices, which no single
    GPU's HBM outruns); the dense tensor-core or vector peak of the metric's dtype for FLOPs. None for a
    non-rate, a cache-resident rate, or a peak the datasheet does not give (the check reports those)."""
    sheet = sheets().get(device_class)
    rate = metric.rate
    if sheet is None or rate is None:
        return None
    kind, _ = rate
    if kind == "bytes":
        if metric.cache_resident or metric.kind == "cache":
            return None
        return sheet.get("host_link_gbps") if metric.kind == "host_link" else sheet.get("memory_gbps")
    return sheet.get("tflops", {}).get(metric.dtype) if metric.dtype else None


def ridge_point(device_class: str, dtype: str) -> float | None:
    """FLOPs (or ops) per byte where the roofline's two roofs meet: the dense peak of ``dtype`` over the memory
    bandwidth, both from the datasheet (``tflops``, or ``tops`` for an integer dtype such as "int8"). The one
    place this ratio is computed for the site; None when the datasheet gives no such peak or no bandwidth."""
    sheet = sheets().get(device_class) or {}
    peak = sheet.get("tflops", {}).get(dtype) or sheet.get("tops", {}).get(dtype)
    bandwidth = sheet.get("memory_gbps")
    return peak * 1e12 / (bandwidth * 1e9) if peak and bandwidth else None
