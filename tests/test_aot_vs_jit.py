"""The AOT vs JIT demo at the tiny size: every cold start computed the right output, and the ratios are
what their definitions say."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t4_hardware.aot_vs_jit", timeout=900)


def test_cold_starts_checked(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    for mode in ("eager", "aoti", "jit"):  # "fresh process, <mode>: max_abs_err <err>", vs the in-process eager output
        cold = checks[f"cold.{mode}.correct"]
        assert float(cold["detail"].split("max_abs_err ")[1]) < 1e-5, cold
    assert checks["aoti.vs_eager"]["max_abs_err"] <= checks["aoti.vs_eager"]["atol"]


def test_ratios(tiny):
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    assert m["cold.jit_over_aoti"] == pytest.approx(m["cold.jit_s"] / m["cold.aoti_s"], rel=1e-9)
    assert m["cold.jit_extra_s"] == pytest.approx(m["cold.jit_s"] - m["cold.eager_s"], rel=1e-9)
    assert m["aot.package_mb"] > 0 and m["aot.compile_s"] > 0
