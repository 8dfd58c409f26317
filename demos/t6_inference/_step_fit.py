"""The batching demo's step-time fit: a measured step-time curve made non-decreasing in the batch, and
read between the measured batch sizes.

Not a demo itself (the leading underscore keeps it out of the demo catalog); batching.py imports it, so
the source digest of its record covers this file too.
"""

from __future__ import annotations

import numpy as np


def monotone(table: dict) -> dict:
    """The non-decreasing fit closest (least squares) to table's values over its sorted keys: pool adjacent
    violators, each pool replaced by its mean."""
    pools = []  # [sum, count] per pool, left to right
    for b in sorted(table):
        pools.append([table[b], 1])
        while len(pools) > 1 and pools[-2][0] / pools[-2][1] > pools[-1][0] / pools[-1][1]:
            total, count = pools.pop()
            pools[-1][0] += total
            pools[-1][1] += count
    fitted = [total / count for total, count in pools for _ in range(count)]
    return dict(zip(sorted(table), fitted))


def interpolate(table: dict, b: int) -> float:
    """Step time at batch b, linear between the fitted batch sizes."""
    return float(np.interp(b, list(table), list(table.values())))
