"""The bottleneck_triage demo at its tiny size: every lever's output matches the baseline; the triage shares are
well formed (a compute or memory lower bound never exceeds the measured time), computed against the yardsticks the
record carries, and the bound follows the rule (compute or memory at half the step, overhead only when the op count
explains the most, else mixed); the fixed-cost bound follows from the two batches' times; the capacity lever saves
activation memory; what cannot run here (communication, CUDA graphs, compile at tiny) is recorded as not run."""

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t12_design.bottleneck_triage")


def test_every_lever_is_checked_against_the_baseline(tiny):
    checks = checks_by_name(tiny)
    for name in ("train.bf16.loss", "train.bf16.grads", "train.checkpoint.loss", "train.checkpoint.grads",
                 "train.big_batch.loss", "decode.recompute", "decode.batch.row0"):
        assert checks[name]["passed"], name
    # checkpointing recomputes the same forward: the same gradients, bit for bit on a CPU
    assert checks["train.checkpoint.grads"]["max_abs_err"] == 0
    assert all(c["passed"] for c in tiny["checks"])


def test_the_triage_shares_are_lower_bounds_and_the_bound_follows_the_rule(tiny):
    table = next(t for t in tiny["tables"] if t["name"] == "triage")
    col = {c: i for i, c in enumerate(table["columns"])}
    assert len(table["rows"]) >= 7  # four training variants, three decode variants at the tiny size
    for row in table["rows"]:
        compute, memory = row[col["compute share"]], row[col["memory share"]]
        assert 0 < compute <= 1 and 0 < memory <= 1 and row[col["overhead share"]] > 0
        overhead = row[col["overhead share"]]
        if max(compute, memory) >= 0.5:
            expected = "compute" if compute >= memory else "memory"
        else:  # overhead only when the op count explains the most; otherwise no single resource does
            expected = "overhead" if overhead >= max(compute, memory) else "mixed"
        assert row[col["bound"]] == expected
    for name in ("train.baseline", "decode.baseline", "decode.batch"):
        assert 0 < metric(tiny, f"{name}.compute_share") <= 1
    # the same FLOPs at the same time scale: recomputing the prefix does far more FLOPs than a cached step
    rows = {r[0]: r for r in table["rows"]}
    cached = next(r for k, r in rows.items() if k.startswith("decode: batch 1, KV cache"))
    recompute = next(r for k, r in rows.items() if "recompute" in k)
    assert recompute[col["GFLOP"]] > 5 * cached[col["GFLOP"]]


def test_the_shares_use_the_recorded_yardsticks_and_op_counts(tiny):
    table = next(t for t in tiny["tables"] if t["name"] == "triage")
    col = {c: i for i, c in enumerate(table["columns"])}
    rows = {r[0]: r for r in table["rows"]}
    base = rows["training: fp32, eager, batch 2"]
    step_s = metric(tiny, "train.baseline.step_ms") / 1e3
    fp32, copy = metric(tiny, "yardstick.fp32_gflops"), metric(tiny, "yardstick.copy_gbps")
    # the table's GFLOP and MiB are rounded: the shares follow from them within that rounding
    assert metric(tiny, "train.baseline.compute_share") == pytest.approx(base[col["GFLOP"]] / fp32 / step_s, rel=0.02)
    assert metric(tiny, "train.baseline.memory_share") == pytest.approx(
        base[col["least MiB moved"]] * 2**20 / 1e9 / copy / step_s, rel=0.02)
    assert metric(tiny, "yardstick.bf16_over_fp32") == pytest.approx(metric(tiny, "yardstick.bf16_gflops") / fp32)
    # every row's op count is a metric, and the overhead share is that count at the per-op cost
    ops = [r[col["ATen ops" if tiny["device_class"] == "cpu" else "kernels"]] for r in table["rows"]]
    names = [f"train.{k}" for k in ("baseline", "bf16", "big_batch", "checkpoint")]
    names += [f"decode.{k}" for k in ("baseline", "recompute", "batch")]
    assert [metric(tiny, f"{n}.ops") for n in names] == ops
    for n in ("train.baseline", "train.bf16"):
        assert metric(tiny, f"{n}.overhead_share") == pytest.approx(
            metric(tiny, f"{n}.ops") * metric(tiny, "per_op_us") / 1e3 / metric(tiny, f"{n}.step_ms"))
    # the step rate is recorded against no ceiling: the run's ceilings use every thread, the shares one
    assert "ceiling" not in tiny["metrics"]["train.baseline.tflops"]
    if tiny["device_class"] == "cpu":
        assert "ceiling" not in tiny["metrics"]["decode.baseline.gbps"]


def test_the_fixed_cost_bound_follows_from_the_two_batches(tiny):
    t1, t2 = metric(tiny, "train.baseline.step_ms"), metric(tiny, "train.big_batch.step_ms")
    assert metric(tiny, "train.big_batch.time_ratio") == pytest.approx(t2 / t1)
    k = 8 / 2  # batch 2 -> 8 at the tiny size
    assert metric(tiny, "train.fixed_share_max") == pytest.approx((k * t1 - t2) / (k - 1) / t1)


def test_a_larger_batch_does_proportionally_more_flops(tiny):
    table = next(t for t in tiny["tables"] if t["name"] == "triage")
    col = {c: i for i, c in enumerate(table["columns"])}
    rows = {r[0]: r for r in table["rows"]}
    small = rows["training: fp32, eager, batch 2"][col["GFLOP"]]
    big = rows["training: batch 2 -> 8 (per sample), batch 8"][col["GFLOP"]]
    assert big == pytest.approx(4 * small, rel=0.02)


def test_checkpointing_saves_activation_memory(tiny):
    assert metric(tiny, "train.checkpoint.activations_mib") < metric(tiny, "train.activations_mib")
    assert metric(tiny, "train.state_mib") == pytest.approx(16 * metric(tiny, "params_m") * 1e6 / 2**20)
    for name in ("train.bf16", "train.big_batch", "train.checkpoint", "decode.recompute", "decode.batch"):
        assert metric(tiny, f"{name}.speedup") > 0  # recorded, whichever way it went


def test_what_cannot_run_here_says_why(tiny):
    not_run = {n["variant"]: n["reason"] for n in tiny["not_run"]}
    assert "communication" in not_run
    assert "torch.compile" in not_run  # skipped at the tiny size only
    if tiny["device_class"] == "cpu":
        assert "decode: CUDA graph" in not_run
    levers = next(t for t in tiny["tables"] if t["name"] == "levers")
    assert [r[3] for r in levers["rows"][:2]] == [1.0, 1.0]  # the two baselines against themselves
