"""The precision demo at the tiny size: four ONNX files that shrink with precision, errors that grow, and
the INT4 graph really weight-only 4-bit."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t4_hardware.precision_footprint")


def test_sizes_shrink_and_errors_grow(tiny):
    m = tiny["metrics"]
    sizes = [m[f"{p}.file_mb"]["value"] for p in ("fp32", "fp16", "int8", "int4")]
    assert sizes == sorted(sizes, reverse=True)
    assert m["fp16.size_ratio"]["value"] == pytest.approx(2, rel=0.1)  # half the bytes per weight
    assert 3 < m["int8.size_ratio"]["value"] < 4.2 and m["int4.size_ratio"]["value"] > m["int8.size_ratio"]["value"]
    assert m["fp32.rel_error"]["value"] < m["fp16.rel_error"]["value"] < m["int8.rel_error"]["value"] < m["int4.rel_error"]["value"]


def test_checks_and_not_run(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    # the INT4 graph: every Linear a 4-bit MatMulNBits (plus its bias Add), and the GELU
    assert checks["int4.uses_matmulnbits"]["detail"].startswith("INT4 graph ops ['Add', 'Gelu', 'MatMulNBits']")
    assert checks["permuted_outputs.caught"]["expected_failure"]
    assert any(v == "tensorrt" for v, _ in tiny.not_run)
    assert all(tiny["metrics"][f"{p}.peak_mem_mb"]["value"] > 0 for p in ("fp32", "fp16", "int8", "int4"))
