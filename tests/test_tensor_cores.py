"""The tensor-core demo on a CPU: every precision matches a float64 product, the alignment sweep is
complete, and TF32 (a GPU format) is recorded as not run."""

from __future__ import annotations

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow
tiny_record = demo_record("demos.t11_gpu.tensor_cores")


def test_precisions_are_checked(tiny_record):
    checks = checks_by_name(tiny_record)
    for name in ("fp32.matmul", "bf16.matmul", "pad_slice"):  # each within its absolute (K-scaled) tolerance alone
        assert checks[name]["max_abs_err"] <= checks[name]["atol"], checks[name]
    assert checks["fp32.matmul"]["max_abs_err"] < 1e-3


def test_the_sweep(tiny_record):
    for precision in ("fp32", "bf16"):
        for shape in ("aligned", "plus8", "plus1", "minus1"):
            rate = tiny_record["metrics"][f"{precision}.{shape}.tflops"]
            assert rate["value"] > 0 and rate["dtype"] in ("float32", "bfloat16")
        assert metric(tiny_record, f"{precision}.plus1.vs_aligned") > 0
    assert "tf32" in {n["variant"] for n in tiny_record["not_run"]}
