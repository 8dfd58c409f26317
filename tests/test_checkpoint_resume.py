"""Checkpoint and resume at the tiny size: a rank is SIGKILLed mid-run, the job restarts from the last
distributed checkpoint, and every resumed loss equals the uninterrupted run's exactly; resuming without
the RNG state is caught (the losses differ), so the equality test has teeth."""

from __future__ import annotations

from conftest import demo_record, metric


rec = demo_record("demos.t8_training.checkpoint_resume")




def test_killed_and_resumed_bit_identical(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    assert checks["rank_was_killed"]["passed"]
    assert checks["rank0.resumed_losses_identical"]["passed"] and checks["rank1.resumed_losses_identical"]["passed"]
    assert metric(rec, "resume.steps_recomputed") >= 1  # the crash came after the last checkpoint


def test_resume_without_rng_is_caught(rec):
    assert metric(rec, "resume.without_rng_max_loss_diff") > 0


def test_checkpoint_costs_and_young_daly(rec):
    assert metric(rec, "checkpoint.save_s") > 0 and metric(rec, "checkpoint.load_s") > 0
    # the job's MTBF shrinks with its size, so the best interval shrinks and the waste grows
    assert metric(rec, "young_daly.g16384.interval_min") < metric(rec, "young_daly.g64.interval_min")
    assert metric(rec, "young_daly.g16384.waste") > metric(rec, "young_daly.g64.waste")
