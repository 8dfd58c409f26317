"""Distillation at the tiny size: the loss is zero for identical logits and equals T^2 KL, the
teacher is more accurate than the student alone, and the student is smaller and faster at a
large batch."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


rec = demo_record("demos.t5_compression.distillation")


def test_loss_checks(rec):
    names = {c["name"] for c in rec["checks"]}
    assert {"kd_loss.zero_when_equal.T1", "kd_loss.soft_term.T4"} <= names
    checks = {c["name"]: c for c in rec["checks"]}
    for T in (1, 4):
        # identical logits give a loss of exactly zero; the soft term equals T^2 KL to float32 rounding
        assert checks[f"kd_loss.zero_when_equal.T{T}"]["detail"].startswith("loss 0.00e+00")
        assert checks[f"kd_loss.soft_term.T{T}"]["max_abs_err"] < 1e-5


def test_teacher_student(rec):
    m = rec["metrics"]
    assert m["teacher.acc"]["value"] > m["all_labels.alone.acc"]["value"]
    assert m["student.params"]["value"] * 10 < m["teacher.params"]["value"]
    assert m["teacher.off_top_mass.T4"]["value"] > m["teacher.off_top_mass.T1"]["value"]  # temperature softens
    assert m["few_labels.distilled_T4.acc"]["value"] > m["few_labels.alone.acc"]["value"]
    assert m["train_cost.distilled_over_alone"]["value"] > 1
    assert "in this run" in rec["metrics"]["teacher.train_s"]["label"]  # trained here, not read from the model cache
