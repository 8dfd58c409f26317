"""The kernel-fusion demo end to end at the tiny size: every variant correct, Triton under the
interpreter on CPU, a valid record with the metrics the topic page quotes."""

from __future__ import annotations

import os

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t3_compiler.kernel_fusion",  # the demo must set TRITON_INTERPRET itself
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})


def test_every_variant_matches_the_float64_reference(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for chain in ("bias_relu", "bias_gelu", "add_ln_gelu"):
        for variant in ("eager", "compiled", "triton"):
            for shape in ("64x256", "37x1000"):  # the smallest size, and the ragged shape that exercises masks
                name = f"{chain}.{variant}.{shape}"
                assert checks[name]["max_abs_err"] < 1e-4, checks[name]
    # elementwise chains in float32: every variant within the absolute tolerance alone (a few ulps), never
    # needing the relative term
    assert all(c["max_abs_err"] <= c["atol"] for c in checks.values())


def test_triton_is_checked_but_not_timed_on_cpu(tiny_record):
    assert any(n["variant"] == "triton (timing)" for n in tiny_record["not_run"])
    assert not any(".triton." in name for name in tiny_record["metrics"])


def test_metrics_the_page_quotes_are_there(tiny_record):
    metrics = tiny_record["metrics"]
    for chain in ("bias_gelu", "add_ln_gelu"):
        assert 0 < metrics[f"{chain}.best_fused.gbps"]["fraction_of_ceiling"]
        assert metrics[f"{chain}.compiled.first_call_s"]["value"] > 0
        assert metrics[f"{chain}.compiled.speedup_largest"]["unit"] == "x"
    assert metrics["inductor_startup_s"]["value"] > 0
    assert [s["name"] for s in tiny_record["series"]] == ["bias_relu", "bias_gelu", "add_ln_gelu"]
    assert all(metrics[f"{chain}.compiled.kernels"]["value"] == 1 for chain in ("bias_relu", "bias_gelu", "add_ln_gelu"))
    assert "kernel" in tiny_record["artifacts"]["add_ln_gelu.inductor_code"]


def test_the_triton_kernels_catch_a_wrong_answer():
    """The interpreter check is real: a kernel with a wrong GELU constant fails it."""
    import torch
    import torch.nn.functional as F

    if not os.environ.get("TRITON_INTERPRET") and not torch.cuda.is_available():
        pytest.skip("Triton needs a GPU or its interpreter")
    import triton
    import triton.language as tl

    @triton.jit
    def wrong_gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        h = tl.load(x_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, 0.5 * h * (1.0 + tl.erf(h * 0.7)), mask=mask)  # 0.7 is not 1/sqrt(2)

    x = torch.randn(1000)
    y = torch.empty_like(x)
    wrong_gelu[(triton.cdiv(1000, 256),)](x, y, 1000, BLOCK=256)
    assert not torch.allclose(y.double(), F.gelu(x.double()), rtol=1e-4, atol=1e-5)
