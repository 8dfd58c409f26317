"""FP8 formats at the tiny size: the ranges from all 256 bit patterns, the rounding bound, and what
per-tensor scaling does to a tensor with outliers (FP8 vs INT8)."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


rec = demo_record("demos.t5_compression.fp8_formats")


def test_ranges(rec):
    m = rec["metrics"]
    assert m["e4m3fn.max"]["value"] == 448 and m["e5m2.max"]["value"] == 57344
    assert m["e4m3fn.min_subnormal"]["value"] == 2.0**-9 and m["e5m2.min_subnormal"]["value"] == 2.0**-16
    # from the 256 bit patterns: E4M3FN has one NaN per sign and no inf, E5M2 IEEE-style NaNs and infs;
    # distinct finite values count +0 and -0 once; rounding is bounded by half an ulp, 2^-(mantissa bits + 1)
    rows = {r[0]: r[1:] for r in next(t for t in rec["tables"] if t["name"] == "formats")["rows"]}
    assert rows["e4m3fn"][3:] == [2, 0, 256 - 2 - 1, 2.0**-4]
    assert rows["e5m2"][3:] == [6, 2, 256 - 6 - 2 - 1, 2.0**-3]


def test_scaling_and_outliers(rec):
    m = rec["metrics"]
    # unscaled E4M3 loses small values to underflow; the per-tensor scale removes most of it
    assert m["e4m3fn.scaled.x1.underflow"]["value"] < m["e4m3fn.unscaled.x1.underflow"]["value"] / 5
    # a 10^4 x larger tensor overflows E4M3 without a scale, never with one
    assert m["e4m3fn.unscaled.x10000.overflow"]["value"] > 0 and m["e4m3fn.scaled.x10000.overflow"]["value"] == 0
    # E5M2 rounds more coarsely than E4M3 when both are scaled
    assert m["e5m2.scaled.x1.bulk_rel_rms"]["value"] > 1.5 * m["e4m3fn.scaled.x1.bulk_rel_rms"]["value"]
    # INT8 with one per-tensor scale loses the bulk of the values to the outliers; FP8 does not
    assert m["int8.scaled.x1.bulk_rel_rms"]["value"] > 10 * m["e4m3fn.scaled.x1.bulk_rel_rms"]["value"]
    assert {n["variant"] for n in rec["not_run"]} == {"fp8_matmul_speed"}
