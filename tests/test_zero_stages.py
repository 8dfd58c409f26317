"""ZeRO stages at the tiny size (2 and 4 gloo ranks): ZeRO-1, ZeRO-2 (written out on a flat buffer) and FSDP2 end
at DDP's parameters, and the bytes each rank holds (parameters, gradients, Adam) equal the ZeRO formulas with
padding, so each stage holds less than the one before."""

from __future__ import annotations

import pytest
from conftest import demo_record, metric

pytestmark = pytest.mark.slow

rec = demo_record("demos.t7_parallelism.zero_stages")
VARIANTS = ("ddp", "zero1", "zero2", "fsdp")


def test_every_stage_ends_at_ddps_parameters(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    for p in (2, 4):
        for variant in VARIANTS[1:]:
            # "... largest |difference| from DDP's parameters <err>": float32 rounding of the same sums
            equal = checks[f"p{p}.{variant}.equals_ddp"]
            assert float(equal["detail"].split()[-1]) < 1e-6, equal


def test_memory_is_the_zero_formula(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    for p in (2, 4):
        for variant in VARIANTS:
            assert f"p{p}.{variant}.memory_formula" in checks
        total = [metric(rec, f"{v}.p{p}.bytes_per_param") for v in VARIANTS]
        assert total == sorted(total, reverse=True) and len(set(total)) == 4, total
        # fp32 Adam: 16, 8 + 8/p, 4 + 12/p, 16/p, within the padding of a tiny model
        for variant, formula in (("ddp", 16), ("zero1", 8 + 8 / p), ("zero2", 4 + 12 / p), ("fsdp", 16 / p)):
            assert metric(rec, f"{variant}.p{p}.bytes_per_param") == pytest.approx(formula, rel=0.06), variant
        assert metric(rec, f"zero2.p{p}.grad_bytes_per_param") == pytest.approx(4 / p, rel=0.02)
        assert metric(rec, f"zero1.p{p}.grad_bytes_per_param") == pytest.approx(4, rel=0.02)
        assert metric(rec, f"ddp.p{p}.step_ms") > 0
