"""Weight-only INT8 at the tiny size: every INT8 path (the Triton kernel in its interpreter included)
computes the quantized layer, the quantized model agrees with the full-precision one, and the
CUDA-graph part is recorded as not run on a CPU."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t6_inference.weight_only_int8")


def test_every_int8_path_computes_the_quantized_layer(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for name in ("int8_dequant_matmul", "int8_fused_aten_cpu", "int8_fused_triton.interpreter"):
        for m in (1, 3):
            assert checks[f"{name}.m{m}"]["max_abs_err"] <= checks[f"{name}.m{m}"]["atol"], checks[f"{name}.m{m}"]
    assert checks["decode_static_equals_decode"]["max_abs_err"] < 1e-6  # the same arithmetic, in preallocated buffers


def test_quantization_error_is_small_and_the_model_agrees(tiny_record):
    m = tiny_record["metrics"]
    assert 0 < m["linear.quantization_rel_error"]["value"] < 0.02  # per-channel INT8: well under 1% typically
    assert m["model.top1_agreement"]["value"] > 0.95
    assert abs(m["model.loss_int8"]["value"] - m["model.loss_full"]["value"]) < 0.05


def test_gpu_only_parts_are_recorded_as_not_run(tiny_record):
    not_run = {n["variant"] for n in tiny_record["not_run"]}
    assert {"cuda_graph", "int8_fused_triton (timing)"} <= not_run
    assert not any(name.startswith("cuda_graph.") for name in tiny_record["metrics"])
    assert "fraction_of_ceiling" in tiny_record["metrics"]["linear.int8_fused_aten_cpu.rows1_gbps"]

