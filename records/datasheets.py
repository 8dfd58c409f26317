"""The published datasheet figures (records/datasheets.toml): the one reader, and what they bound.

Every figure a page, a demo, a calculator or the plausibility gate uses comes from that file; each entry
cites its source.
"""

from __future__ import annotations

import math
import tomllib
from functools import cache
from pathlib import Path

from records.errors import fail
from records.paths import DATASHEETS, REPO_ROOT


# What bounds a cache-resident rate (a working set that fits in L1/L2 may beat memory_gbps, never this), in GB/s. No
# datasheet states it, so it is computed here, as an upper bound, and kept out of datasheets.toml (published figures
# only, each a declared input of the demos that read it): the SMs' aggregate L1 load bandwidth, SMs x 128 bytes per
# clock x the boost clock. Every Hopper part has at most 132 SMs at at most 1.98 GHz: 132 x 128 B x 1.98 GHz =
# 33,450 GB/s; an A100, 108 x 128 B x 1.41 GHz = 19,492 GB/s. A CPU: a loose bound for one host, which catches a
# unit slip as the cpu entry's memory_gbps does. A class not named here publishes no cache-resident rate.
HOPPER_L1_GBPS = 132 * 128 * 1.98
CACHE_GBPS = {"cpu": 100_000.0, "a100": 108 * 128 * 1.41,
              **dict.fromkeys(("h100", "h100-pcie", "h100-nvl", "h200", "h200-nvl", "gh200"), HOPPER_L1_GBPS)}


class DatasheetError(ValueError):
    """records/datasheets.toml cannot bound anything: the message names the entry and the field (one line)."""


PEAKS = ("memory_gbps", "host_link_gbps", "nvlink_gbps")  # GB/s; and tflops / tops tables
TEXT = ("label", "kind", "name", "source", "memory", "interconnect", "power_note")
SIZES = ("memory_gb", "power_w")  # finite positive numbers too, not bounds
# read by name as modules load (demos/common/cluster_config.py, cluster_validation.py, collectives.py): a missing
# one would be a traceback in every command that imports them
REQUIRED = {"h100": ("memory_gb", "nvlink_gbps", "tflops.bfloat16"),
            "a100": ("memory_gb", "nvlink_gbps", "tflops.bfloat16")}
MARKUP = ("<", ">", "$", "{{", "}}", "`")


def problems(entries: dict) -> list[str]:
    """Why the datasheet entries cannot serve as the gate's bounds: every peak a finite positive number (a nan
    peak bounds nothing: every comparison with it is false), every entry a plain-text label and a source."""
    found = [f"[{name}]: missing; the code reads it by name" for name in REQUIRED if name not in entries]
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            found.append(f"[{name}]: not a table of figures")
            continue
        known = {*PEAKS, *TEXT, *SIZES, "tflops", "tops"}
        found += [f"[{name}] {key}: not a field of a datasheet entry ({', '.join(sorted(known))})"
                  for key in entry if key not in known][:1]
        found += [f"[{name}] {key}: must be text" for key in TEXT if key in entry and not isinstance(entry[key], str)]
        for field in REQUIRED.get(name, ()):
            table, _, dtype = field.partition(".")
            if table not in entry or (dtype and dtype not in (entry[table] if isinstance(entry[table], dict) else {})):
                found.append(f"[{name}] {field}: missing; the code reads it by name")
        label = entry.get("label")
        if not isinstance(label, str) or not label.strip() or any(m in label for m in MARKUP) \
                or not label.isprintable():
            found.append(f"[{name}] label: {label!r} must be plain text (no markup, $ or control characters)")
        if not isinstance(entry.get("source"), str) or not entry["source"].strip():
            found.append(f"[{name}] source: missing; every figure cites where it was published")
        peaks = {key: entry[key] for key in (*PEAKS, *SIZES) if key in entry}
        for table in ("tflops", "tops"):
            if not isinstance(entry.get(table, {}), dict):
                found.append(f"[{name}] {table}: must be a table of dtype = peak")
                continue
            peaks |= {f"{table}.{dtype}": v for dtype, v in entry.get(table, {}).items()}
        if "memory_gbps" not in entry:
            found.append(f"[{name}] memory_gbps: missing; every device bounds its memory bandwidth")
        if "tflops" not in entry:  # the cheat sheet's machine balance reads it (an NPU's is empty: tops only)
            found.append(f"[{name}] tflops: missing; every device gives its floating-point peaks, {{}} for none")
        for key, value in peaks.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e100 \
                    or not math.isfinite(value):  # an int of 400 digits overflows isfinite; no peak is near 1e100
                found.append(f"[{name}] {key}: {_shown(value)} is not a finite positive number")
    return found


def _shown(value) -> str:
    """A value in a one-line error: its repr cut to 40 characters (an integer beyond 4,300 digits has none)."""
    try:
        return repr(value)[:40]
    except ValueError:
        return f"an integer of {value.bit_length():,} bits"


def load(root: Path = REPO_ROOT) -> dict[str, dict]:
    """Every device class's entry: label, peaks, memory and host link figures, and its source; DatasheetError
    (one line) when the file is not valid TOML or an entry cannot bound anything."""
    path = root / DATASHEETS.relative_to(REPO_ROOT)
    try:
        with open(path, "rb") as f:
            entries = tomllib.load(f)
    except (ValueError, RecursionError) as e:  # TOMLDecodeError, UnicodeDecodeError, an int of 5,000 digits
        raise DatasheetError(f"records/datasheets.toml: not valid TOML ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:120]})") from None
    except OSError as e:
        raise DatasheetError(f"records/datasheets.toml: cannot be read ({e.strerror or e})") from None
    found = problems(entries)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise DatasheetError(f"records/datasheets.toml: {found[0]}{more}")
    return entries


def require() -> dict[str, dict]:
    """sheets(), or the one-line error and exit 2: what a command asks before it reads a record or draws a page
    (a nan peak otherwise surfaces as a traceback wherever the figures are first read)."""
    try:
        return sheets()
    except DatasheetError as e:
        fail(str(e))


@cache
def sheets() -> dict[str, dict]:
    """load(), once per process (readers that never see the file change: the check, a site build)."""
    return load()


def label(device_class: str) -> str:
    return sheets().get(device_class, {}).get("label", device_class)


def peak(device_class: str, metric) -> float | None:
    """The published peak that bounds a rate metric (a records.record.Metric) on this device class, in the
    metric's normalised unit (GB/s or TFLOP/s): for bytes the host-device link's one-way rate (kind
    "host_link"), the caches' bandwidth for a cache-resident rate, or else the memory bandwidth (device memory, or
    a link between devices, which no single GPU's HBM outruns); the dense tensor-core or vector peak of the metric's
    dtype for FLOPs. None for a non-rate or a peak the datasheet does not give (the gate refuses those)."""
    sheet = sheets().get(device_class)
    rate = metric.rate
    if sheet is None or rate is None:
        return None
    kind, _ = rate
    if kind == "bytes":
        if metric.cache_resident or metric.kind == "cache":
            return CACHE_GBPS.get(device_class)  # a cache-resident rate may beat memory, never the caches
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
