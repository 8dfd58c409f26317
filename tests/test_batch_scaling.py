"""Optimizer at scale, tiny size: clip_grad_norm_ on FSDP2's sharded gradients equals single-process
clipping of the whole gradient, while a clip computed from one rank's shards uses a smaller norm and
gives different gradients (the silent error the test must catch). The learning-rate part is a
measurement with no pass/fail claim; only its bookkeeping is checked."""

from __future__ import annotations

import math

import pytest
from conftest import demo_record, metric

rec = demo_record("demos.t8_training.batch_scaling")




def test_fsdp_clip_uses_the_global_norm(rec):
    assert metric(rec, "clip.fsdp_norm") == pytest.approx(metric(rec, "clip.global_norm"), rel=1e-5)
    for rank in (0, 1):
        assert metric(rec, f"clip.rank{rank}.fsdp_max_err") < 1e-6
        assert metric(rec, f"clip.rank{rank}.shard_norm") < metric(rec, "clip.global_norm")
        assert metric(rec, f"clip.rank{rank}.per_shard_max_err") > 1e-4
    # the two ranks' shards partition the gradient: their norms add in quadrature to the global norm
    assert math.hypot(metric(rec, "clip.rank0.shard_norm"), metric(rec, "clip.rank1.shard_norm")) == pytest.approx(
        metric(rec, "clip.global_norm"), rel=1e-4)


def test_lr_runs_recorded(rec):
    for name in ("k1.base_lr", "k2.base_lr", "k2.scaled_warmup", "k4.base_lr", "k4.scaled_warmup"):
        assert metric(rec, f"{name}.held_out_loss") > 0
    assert metric(rec, "base_lr") in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)


def test_ranks_equal_the_proportionally_bigger_batch(rec):
    """2 and 4 real gloo ranks (DDP, base batch each, base lr) reproduce one process on a 2x / 4x batch step for step,
    and differ from one process on the base batch (the check can tell them apart)."""
    checks = {c["name"]: c for c in rec["checks"]}
    for k in (2, 4):
        assert checks[f"k{k}.ranks_equal_big_batch"]["max_abs_err"] <= checks[f"k{k}.ranks_equal_big_batch"]["atol"]
        assert checks[f"k{k}.ranks_differ_from_base_batch"]["expected_failure"]
        assert metric(rec, f"k{k}.ranks_vs_big_batch_max_loss_diff") < 1e-4
    curves = {line["label"]: line for s in rec["series"] if s["name"] == "lr_scaling" for line in s["lines"]}
    assert {"1 rank, base lr", "2 ranks, base lr", "4 ranks, base lr", "2 ranks, lr x2 + warm-up",
            "4 ranks, lr x4 + warm-up"} == set(curves)
    # the same tokens: k ranks take 1/k of the steps
    assert len(curves["4 ranks, base lr"]["y"]) * 4 == len(curves["1 rank, base lr"]["y"])
