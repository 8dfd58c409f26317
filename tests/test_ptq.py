"""PTQ at the tiny size: the simulated quantizer equals integer arithmetic, INT8 stays close to fp32,
the outlier channel ruins per-tensor INT8 but not per-channel, sizes follow bytes per weight, and
the ONNX Runtime files are smaller and still accurate."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


rec = demo_record("demos.t5_compression.ptq")


def test_checks_pass(rec):
    names = {c["name"] for c in rec["checks"]}
    assert {"w8a8_simulated_equals_integer.per_tensor", "w8a8_simulated_equals_integer.per_channel",
            "w8_per_channel_close_to_fp32", "outlier_model_is_the_same_function", "onnx_fp32_equals_torch"} <= names
    checks = {c["name"]: c for c in rec["checks"]}
    # symmetric per-channel INT8: the largest weight of a row maps to exactly +-127
    assert checks["int8_codes_in_range"]["detail"].startswith("max |code| 127 ")
    # a ReLU unit's inputs scaled up x300 and its output weights down: the same function, to float32 rounding
    assert checks["outlier_model_is_the_same_function"]["max_abs_err"] < 1e-4
    assert checks["onnx_fp32_equals_torch"]["max_abs_err"] < 1e-4


def test_int8_accuracy_and_outlier(rec):
    m = rec["metrics"]
    assert m["w8_per_channel.logit_rel_error"]["value"] < 0.01
    assert abs(m["acc.w8_per_channel"]["value"] - m["acc.fp32"]["value"]) < 0.01
    assert m["outlier300.w8_per_tensor"]["value"] < 0.5  # one scaled unit ruins a per-tensor scale
    assert m["outlier300.w8_per_channel"]["value"] > 0.9  # per-channel scales do not care
    assert m["outlier300.w8a8_smoothed"]["value"] > m["outlier300.w8a8_per_tensor_act"]["value"] - 0.005


def test_w4_weight_error_by_granularity(rec):
    m = {k: v["value"] for k, v in rec["metrics"].items()}
    per_tensor, per_channel = m["w4_per_tensor.weight_rel_error"], m["w4_per_channel.weight_rel_error"]
    assert 0 < per_channel < per_tensor < 1  # a row's own scale is never coarser than the tensor's
    assert rec["metrics"]["w4_per_channel.weight_rel_error"]["unit"] == "fraction"


def test_sizes(rec):
    m = rec["metrics"]
    assert m["bytes.fp32"]["value"] == 2 * m["bytes.bf16"]["value"]
    assert 3.5 < m["bytes.fp32_over_int8"]["value"] < 4
    assert m["onnx.ort_static_int8.bytes"]["value"] < m["onnx.fp32.bytes"]["value"] / 2
    assert m["onnx.ort_dynamic_int8.bytes"]["value"] < m["onnx.fp32.bytes"]["value"] / 2


def test_calibration_few_samples_clip_more(rec):
    m = rec["metrics"]
    assert m["calib.minmax.n1.clipped"]["value"] > m["calib.minmax.n256.clipped"]["value"]
