"""Numerics at the tiny size: fp16 and bf16 running sums stall where their mantissa says, Kahan's
error is below the naive sum's in every dtype and within two epsilons, the stable softmax and
log-sum-exp match float64 where the naive forms overflow, loss scaling stops fp16 underflow, and
fp32 master weights converge where bf16 weights stall."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t9_foundations.numerics")


def test_stalls_follow_the_mantissa(tiny_record):
    m = tiny_record["metrics"]
    assert m["stall.fp16"]["value"] == 2048 and m["stall.fp16"]["unit"] == "ones"  # 2^(10+1): increments of 1 are half an ulp there
    if "stall.bf16" in m:
        assert m["stall.bf16"]["value"] == 256  # 2^(7+1)


def test_kahan_beats_naive(tiny_record):
    m = tiny_record["metrics"]
    for d in ("fp16", "bf16", "fp32"):
        assert m[f"sum.kahan.{d}.rel_err"]["value"] < m[f"sum.naive.{d}.rel_err"]["value"]
    assert m["sum.naive.bf16.rel_err"]["value"] > 100 * m["sum.kahan.bf16.rel_err"]["value"]
    assert m["sum.naive.bf16_in_fp32_acc.rel_err"]["value"] < 1e-5  # fp32 accumulators fix bf16 inputs


def test_softmax_and_mixed_precision(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert sum(n.startswith("stable.") for n in checks) == 12
    # the naive softmax overflows where exp does: above ~11.1 in fp16, above ~88.7 in bf16 and fp32
    rows = next(t for t in tiny_record["tables"] if t["name"] == "softmax")["rows"]
    overflowed = {(scale, dtype) for scale, dtype, naive, *_ in rows if naive != "finite"}
    assert overflowed == {(10.0, "fp16")} | {(s, d) for s in (100.0, 1000.0) for d in ("fp16", "bf16", "fp32")}
    m = tiny_record["metrics"]
    assert m["softmax.naive_nan_cases"]["value"] >= 6
    assert m["underflow.fp16"]["value"] > 0.1 and m["underflow.fp16_scaled"]["value"] == 0 == m["underflow.bf16"]["value"]
    assert m["train.bf16_compute.final_mse"]["value"] < 0.1 * m["train.bf16_weights.final_mse"]["value"]
