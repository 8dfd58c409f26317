"""The compile-under-DDP/FSDP2 demo at the tiny size (8 layers of width 256, buckets of 1 MB, one gloo rank in the
test's own demo process): DDPOptimizer splits the forward into one graph per bucket, optimize_ddp=False keeps one,
compiled autograd traces DDP's all-reduces into the backward graph, FSDP2's graphs never span two blocks, and every
variant's gradients equal plain autograd's."""

from __future__ import annotations

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t2_pipeline.compile_distributed")


def test_gradients_equal_plain_autograd(tiny):
    checks = checks_by_name(tiny)
    for name in ("ddp.optimizer", "ddp.no_optimization", "ddp.compiled_autograd", "fsdp.whole_model", "fsdp.per_block"):
        assert checks[f"{name}.grads"]["passed"], checks[f"{name}.grads"]


def test_ddp_optimizer_splits_at_buckets(tiny):
    assert metric(tiny, "ddp.buckets") == 2  # 8 layers of 257 KiB, buckets of 1 MiB: 4 layers each
    assert metric(tiny, "ddp.optimizer.graphs") == metric(tiny, "ddp.buckets")
    assert metric(tiny, "ddp.no_optimization.graphs") == 1
    rows = {r[0]: r for r in tiny["tables"][0]["rows"]}
    assert rows["DDP, optimize_ddp=True (DDPOptimizer)"][2] == "8, 8"  # 4 x (linear, gelu) per graph


def test_compiled_autograd_holds_the_all_reduces(tiny):
    # the Python reducer all-reduces each gradient: one collective per parameter tensor, inside the backward graph
    assert metric(tiny, "ddp.compiled_autograd.all_reduces") == metric(tiny, "ddp.parameters") == 16
    rows = {r[0]: r for r in tiny["tables"][0]["rows"]}
    assert rows["DDP, compiled autograd + python_reducer"][3] == 16
    assert rows["DDP, optimize_ddp=True (DDPOptimizer)"][3] == 0  # DDPOptimizer leaves the collectives to DDP's hooks


def test_fsdp_graphs_stay_inside_a_block(tiny):
    assert 0 < metric(tiny, "fsdp.per_block.graphs") < 8
    rows = {r[0]: r for r in tiny["tables"][0]["rows"]}
    for name in ("FSDP2, root module compiled", "FSDP2, each block compiled"):
        assert set(rows[name][2].split(", ")) == {"2"} and rows[name][3] == 0, rows[name]
