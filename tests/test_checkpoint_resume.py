"""Checkpoint and resume at the tiny size: a rank is SIGKILLed mid-run, the job restarts from the last
distributed checkpoint, and every resumed loss equals the uninterrupted run's exactly; resuming without
the RNG state is caught (the losses differ), so the equality test has teeth."""

from __future__ import annotations

from conftest import demo_record, metric


rec = demo_record("demos.t8_training.checkpoint_resume")




def test_killed_and_resumed_bit_identical(rec):
    checks = {c["name"]: c for c in rec["checks"]}
    # tiny: 8 steps, a checkpoint every 3, rank 1 killed at step 7: the job resumes from step 6 and
    # compares the 2 losses of steps 6 and 7 with the uninterrupted run's
    assert metric(rec, "resume.from_step") == 6 and metric(rec, "resume.steps_recomputed") == 1
    for rank in (0, 1):
        assert checks[f"rank{rank}.resumed_losses_identical"]["detail"].startswith("steps 6..7: 2 losses")
    assert "rank_was_killed" in checks


def test_resume_without_rng_is_caught(rec):
    assert metric(rec, "resume.without_rng_max_loss_diff") > 0


def test_checkpoint_costs_and_young_daly(rec):
    assert metric(rec, "checkpoint.save_s") > 0 and metric(rec, "checkpoint.load_s") > 0
    # the job's MTBF shrinks with its size, so the best interval shrinks and the waste grows
    assert metric(rec, "young_daly.g16384.interval_min") < metric(rec, "young_daly.g64.interval_min")
    assert metric(rec, "young_daly.g16384.waste") > metric(rec, "young_daly.g64.waste")
