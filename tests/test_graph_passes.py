"""The graph-passes demo at the tiny size: DCE removes exactly the dead branch, constant folding leaves
only the matmul and ReLU, outputs stay equal, torch.export keeps the dead node, and Inductor with
freezing generates fewer kernels; and FX's DCE keeps a node with a side effect."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx

from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t3_compiler.graph_passes")


def test_every_check_passed(tiny):
    assert all(c["passed"] for c in tiny["checks"])
    assert len(tiny["checks"]) >= 9


def test_nodes_fall_pass_by_pass(tiny):
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    assert m["nodes.before"] - m["nodes.after_dce"] == 3  # sin, abs, sum
    assert m["nodes.after_folding"] == 3  # the folded weight, the matmul, the ReLU
    assert m["export.dead_nodes"] >= 1
    assert m["inductor.frozen.kernels"] < m["inductor.default.kernels"]
    assert "sin" in tiny["artifacts"]["graph_before"] and "sin" not in tiny["artifacts"]["graph_after_dce"]
    assert "_fx_const_folded_attrs" in tiny["artifacts"]["graph_after_folding"]


def test_dce_keeps_side_effects():
    """An unused result is dead; an in-place update of a buffer is not, although nothing reads it."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1))

        def forward(self, x):
            unused = x.sin()  # noqa: F841
            self.count.add_(1)
            return x * 2

    gm = fx.symbolic_trace(M())
    gm.graph.eliminate_dead_code()
    targets = [str(n.target) for n in gm.graph.nodes]
    assert "sin" not in targets and "add_" in targets
