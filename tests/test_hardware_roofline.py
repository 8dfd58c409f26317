"""The T4 roofline demo at the tiny size: ridge points computed from the one datasheet file, the kernels'
FLOP and byte counts reproduce their own records' rates, and the roofline formula itself."""

from __future__ import annotations

import itertools
import tomllib

import pytest
from conftest import demo_record

from records.paths import DATASHEETS

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t4_hardware.hardware_roofline")


def test_ridges_come_from_the_datasheet_file(tiny):
    sheets = tomllib.loads(DATASHEETS.read_text(encoding="utf-8"))
    for chip in ("h100", "h200", "a100", "l4", "l40s", "jetson-agx-orin"):
        expected = sheets[chip]["tflops"]["bfloat16"] * 1e12 / (sheets[chip]["memory_gbps"] * 1e9)
        assert tiny["metrics"][f"ridge.{chip}.bfloat16"]["value"] == pytest.approx(expected, rel=1e-9)
    # Same tensor peaks, more bandwidth: the H200's ridge is lower than the H100's.
    assert tiny["metrics"]["ridge.h200.bfloat16"]["value"] < tiny["metrics"]["ridge.h100.bfloat16"]["value"]
    assert len(next(t for t in tiny["tables"] if t["name"] == "specs")["rows"]) == 7


def test_kernel_counts_reproduce_their_records(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    for name in ("kernel.shard_gemm.flops_match_record", "kernel.attention.flops_match_record",
                 "kernel.gemv.bytes_match_record", "kernel.bias_relu.bytes_match_record"):
        # the same FLOPs (bytes) over the same time: exactly the record's own rate
        assert checks[name]["max_abs_err"] == 0.0, checks[name]
    m = tiny["metrics"]
    assert m["kernel.weight_only_int8.intensity"]["value"] == pytest.approx(0.5, rel=1e-2)  # 2 FLOPs per 4-byte weight
    assert m["kernel.kernel_fusion.intensity"]["value"] == pytest.approx(0.25, rel=1e-3)  # 2 FLOPs per 8 bytes
    assert m["kernel.shard_gemm.intensity"]["value"] > 50 and m["kernel.weight_only_int8.compute_bound"]["value"] == 0


def test_rooflines_bend_at_the_ridge(tiny):
    series = next(s for s in tiny["series"] if s["name"] == "rooflines")
    for line in series["lines"]:
        ys = line["y"]
        assert all(b >= a for a, b in itertools.pairwise(ys)), line["label"]  # attainable never falls with intensity
        assert ys[0] < ys[-1] and ys[-1] == max(ys)  # a slope at the left, a flat peak at the right
