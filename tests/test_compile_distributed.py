"""The compile-under-DDP/FSDP2 demo at the tiny size (8 layers of width 256, buckets of 1 MB, one gloo rank in the
test's own demo process): DDPOptimizer splits the forward into one graph per bucket, optimize_ddp=False keeps one,
compiled autograd traces DDP's all-reduces into the backward graph, FSDP2's graphs never span two blocks, and every
variant's gradients equal plain autograd's."""

from __future__ import annotations

import ast

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, checks_by_name, demo_record, metric

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
    assert checks_by_name(tiny)["ddp.optimizer.one_graph_per_bucket"]["passed"]
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


def _bucket_rule():
    """The demo's ddp_optimizer_buckets, taken from its source (importing the demo would run it)."""
    source = (REPO / "demos" / "t2_pipeline" / "compile_distributed.py").read_text()
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "ddp_optimizer_buckets")
    namespace: dict = {}
    exec(compile(ast.Module([fn], []), "compile_distributed.py", "exec"), namespace)
    return namespace["ddp_optimizer_buckets"]


def test_bucket_rule_matches_ddp_optimizer_at_the_full_size():
    """At --size full (24 layers of width 1024, about 4 MiB each, buckets of 25 MB) the first bucket's 1 MiB cap
    matters: one layer, then 7, 7, 7 and 2, five buckets where a rule without it gives four. The rule must say
    what Dynamo's DDPOptimizer does with the same layers (no process group needed to run it as a backend)."""
    from torch._dynamo.backends.distributed import DDPOptimizer

    rule = _bucket_rule()
    width, layers, bucket_mb = 1024, 24, 25
    layer_bytes = (width * width + width) * 4
    assert rule([layer_bytes] * layers, bucket_mb * 2**20, torch.distributed._DEFAULT_FIRST_BUCKET_BYTES) == \
        [1, 7, 7, 7, 2]
    assert rule([layer_bytes] * layers, bucket_mb * 2**20, bucket_mb * 2**20) == [7, 7, 7, 3]  # without the cap
    assert rule([257 * 2**10] * 16, 2**20, 2**20) == [4, 4, 4, 4]  # the small size: the two caps are equal

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

        def forward(self, x):
            for layer in self.layers:
                x = F.gelu(layer(x))
            return x

    optimizer = DDPOptimizer(bucket_bytes_cap=bucket_mb * 2**20, backend_compile_fn=lambda gm, _: gm.forward)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(Stack(), backend=optimizer.compile_fn)(torch.randn(2, width))
    finally:
        torch._dynamo.reset()
    # DDPOptimizer lists its buckets first layer first; a weight and a bias per layer
    assert [len(b.params) // 2 for b in reversed(optimizer.buckets)] == [1, 7, 7, 7, 2]
