"""Gradient accumulation and DDP overlap at the tiny size: k micro-batches with loss/k give the big
batch's gradient to float32 rounding (and forgetting /k is caught); DDP issues one gloo all-reduce per
bucket; with one bucket the all-reduce is issued only when backward is (nearly) done, so nothing can
overlap, while small buckets start communicating with most of backward still to run. Overlap fractions
themselves are timings (noisy on a shared CPU) and are only checked to be fractions."""

from __future__ import annotations

import pytest
from conftest import demo_record, metric


rec = demo_record("demos.t8_training.accumulation_and_overlap")




def test_accumulation_equals_big_batch(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    assert checks["accumulation_equals_big_batch"]["max_abs_err"] < 1e-6
    assert metric(rec, "accumulation.grad_norm_ratio_without_division") == pytest.approx(4.0, rel=1e-4)


def test_buckets_and_overlap(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    for cap in ("cap0p05", "cap25p0"):  # the profiler counted one gloo all-reduce per bucket DDP built
        n = int(metric(rec, f"ddp.{cap}.buckets"))
        assert checks[f"ddp.{cap}.one_all_reduce_per_bucket"]["detail"] == f"{n} gloo all-reduces for {n} buckets"
    assert metric(rec, "ddp.cap0p05.buckets") > metric(rec, "ddp.cap25p0.buckets") == 1
    assert metric(rec, "ddp.cap25p0.compute_after_first_all_reduce") < 0.05
    assert metric(rec, "ddp.cap0p05.compute_after_first_all_reduce") > 0.3
    for cap in ("cap0p05", "cap25p0"):
        assert 0.0 <= metric(rec, f"ddp.{cap}.overlap_fraction") <= 1.0
