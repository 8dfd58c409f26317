"""Profile of one step at the tiny size: the profiler's matmul FLOPs agree with the 6N + 12Lsh formula,
the time split is a partition of the step (bins sum to 1), the DDP trace holds communication, and the
MFU is a fraction of the same-run matmul ceiling."""

from __future__ import annotations

from conftest import demo_record, metric


rec = demo_record("demos.t8_training.profile_step")




def test_flops_and_mfu(rec):
    assert 0.7 < metric(rec, "profiler_matmul_flops_g") / metric(rec, "model_flops_g") < 1.3
    mfu = rec["metrics"]["achieved_tflops"]["fraction_of_ceiling"]
    assert 0 < mfu < 1


def test_split_is_a_partition(rec):
    for prefix in ("split.", "ddp.split."):
        parts = {k: v["value"] for k, v in rec["metrics"].items() if k.startswith(prefix)}
        busy = sum(v for k, v in parts.items() if not k.endswith("idle_host"))
        assert parts[prefix + "idle_host"] >= 0
        assert busy <= 1.0 + 1e-6 + (parts.get(prefix + "communication", 0.0))  # comm runs on its own thread
    assert metric(rec, "ddp.split.communication") > 0
    assert rec["tables"][0]["rows"], "top ops table"
