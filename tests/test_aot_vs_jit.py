"""The AOT vs JIT demo at the tiny size: every cold start computed the right output, and the ratios are
what their definitions say."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t4_hardware.aot_vs_jit", timeout=900)


def test_cold_starts_checked(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    for mode in ("eager", "aoti", "jit"):
        assert checks[f"cold.{mode}.correct"]["passed"]
    assert checks["aoti.vs_eager"]["passed"]


def test_ratios(tiny):
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    assert m["cold.jit_over_aoti"] == pytest.approx(m["cold.jit_s"] / m["cold.aoti_s"], rel=1e-9)
    assert m["cold.jit_extra_s"] == pytest.approx(m["cold.jit_s"] - m["cold.eager_s"], rel=1e-9)
    assert m["aot.package_mb"] > 0 and m["aot.compile_s"] > 0
