"""The single-device shard GEMM study at the tiny size: the column shards, concatenated, equal the full
product, and every degree's GEMM is timed against the fp32 matmul ceiling."""

from __future__ import annotations

import pytest

from conftest import demo_record

DEGREES = (1, 2, 4, 8)


tiny = demo_record("demos.t7_parallelism.shard_gemm")


def test_shards_concatenate_to_the_full_product(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    for t in DEGREES:  # within the absolute tolerance alone (the product's float32 rounding), for every degree
        check = checks[f"gemm.t{t}.shards_concatenated"]
        assert check["max_abs_err"] <= check["atol"], check


def test_every_degree_is_timed_against_the_ceiling(tiny):
    m = tiny["metrics"]
    for t in DEGREES:
        assert m[f"gemm.t{t}.tflops"]["ceiling"] == "matmul_fp32" and m[f"gemm.t{t}.tflops"]["value"] > 0
        # FLOPs / time: the rate and the time must describe the same GEMM (tiny: 256 rows of 256 x 1024/t)
        flops = 2 * 256 * 256 * (1024 // t)
        assert m[f"gemm.t{t}.tflops"]["value"] == pytest.approx(flops / (m[f"gemm.t{t}.ms"]["value"] / 1e3) / 1e12,
                                                                 rel=1e-9)
    assert [row[0] for row in next(t for t in tiny["tables"] if t["name"] == "gemm")["rows"]] == list(DEGREES)
    assert tiny["not_run"] == []
