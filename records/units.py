r"""The units a record may use: a closed list, ASCII only, so no unit can slip a rate past the datasheet gate.

A rate is checked against its device's datasheet peak only when its unit is one the gate converts (BYTE_RATES,
FLOP_RATES). Before this list, "GB\u200b/s" (a zero-width space), Cyrillic look-alikes, "GB/ms", "Gbit/s" or "TOPS"
carried an H100 number above its peak past the check. A unit not listed here is refused; a new demo that needs a
new unit adds it below, in the group it belongs to (and a rate unit, with its factor, only with a peak to bound it).
"""

from __future__ import annotations

# Rate units with the factor to GB/s or TFLOP/s (what records/datasheets.toml gives peaks in).
BYTE_RATES = {"MB/s": 1e-3, "GB/s": 1.0, "GiB/s": 2**30 / 1e9, "TB/s": 1e3}
FLOP_RATES = {"GFLOP/s": 1e-3, "TFLOP/s": 1.0}

TIMES = {"ns", "us", "ms", "s", "min", "h"}
SIZES = {"B", "bytes", "kB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "B/param", "B params"}
RATIOS = {"x", "fraction", "%", "relative", "log ratio", "in magnitude"}
# Counts, throughputs the datasheet does not bound, and quantities a demo reports (losses, errors, FLOP counts).
OTHER = {
    "FLOP/byte", "FLOP/B", "GFLOP", "MFLOP", "ZFLOP", "GFLOP/J", "MB/J", "bits/byte", "bits",
    "tokens/s", "queries/s", "G loads/s",
    "M", "billion", "parameters", "tokens", "steps", "microbatches", "requests", "records", "rows", "cells",
    "calls", "collectives", "compiles", "kernels", "fusions", "graphs", "breaks", "equations", "nodes", "ops",
    "instructions", "registers", "register/thread", "sectors", "lines", "way", "threads", "cores", "GPUs", "ranks",
    "processes", "streams", "buffers", "allocations", "tensors", "transfers", "buckets", "passes", "repeats",
    "runs", "windows", "cases", "pairs", "plans", "messages", "warnings", "pixels", "ones", "binades", "bit patterns", "bool",
    "nats", "norm", "abs", "mse", "ulp", "logit", "lr", "value",
}
UNITS = frozenset({*BYTE_RATES, *FLOP_RATES, *TIMES, *SIZES, *RATIOS, *OTHER})
# Units that name the kind of a bare number rather than a unit a reader says after it: the site prints the number alone.
UNSPOKEN = frozenset({"value", "abs", "norm", "lr", "mse", "log ratio", "logit", "relative", "in magnitude", "bool"})
# A value in these units is a magnitude: below zero it is a bug (a fitted slope or a difference in a time unit says
# so with "signed": true).
NONNEGATIVE = frozenset({*BYTE_RATES, *FLOP_RATES, *TIMES, *SIZES, "x"})


def problem(unit: str) -> str | None:
    """Why ``unit`` is not a record's unit, or None."""
    if unit in UNITS:
        return None
    if not unit.isascii() or not unit.isprintable():
        return f"unit {unit!r} holds a character outside printable ASCII (a look-alike or an invisible space)"
    rates = ", ".join([*BYTE_RATES, *FLOP_RATES])
    return f"unknown unit {unit!r}: a rate is one of {rates}; other units are listed in records/units.py (add one there)"
