"""The graph-passes demo at the tiny size: DCE removes exactly the dead branch, constant folding leaves
only the matmul and ReLU, outputs stay equal, torch.export keeps the dead node, and Inductor with
freezing generates fewer kernels; and what FX's DCE does with a side effect, at the ATen and at the Python level."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx

from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t3_compiler.graph_passes")


def test_passes_remove_the_right_nodes_and_keep_the_output(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    assert checks["dce.removed_the_dead_branch"]["detail"] == "removed by DCE: ['abs', 'sin', 'sum']"
    assert checks["fold.weights_precomputed"]["detail"] == (
        "left after folding: ['_FX_CONST_FOLDED_ATTRS', 'matmul', 'relu']")
    for name in ("captured.equal", "after_dce.equal", "after_folding.equal",
                 "inductor.freezing_False", "inductor.freezing_True"):
        assert checks[name]["max_abs_err"] <= checks[name]["atol"], checks[name]
    assert {"inductor.freezing_False.no_sin", "inductor.freezing_True.no_sin"} <= set(checks)


def test_nodes_fall_pass_by_pass(tiny):
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    assert m["nodes.before"] - m["nodes.after_dce"] == 3  # sin, abs, sum
    assert m["nodes.after_folding"] == 3  # the folded weight, the matmul, the ReLU
    assert m["export.dead_nodes"] >= 1
    assert m["inductor.frozen.kernels"] < m["inductor.default.kernels"]
    assert "sin" in tiny["artifacts"]["graph_before"] and "sin" not in tiny["artifacts"]["graph_after_dce"]
    assert "_fx_const_folded_attrs" in tiny["artifacts"]["graph_after_folding"]


class CountingModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        unused = x.sin()  # noqa: F841
        self.count.add_(1)  # a side effect whose result nobody reads
        return x * 2


def test_dce_keeps_an_aten_side_effect():
    """On an ATen graph (torch.export), DCE knows add_ mutates its input from the op's schema: it stays."""
    exported = torch.export.export(CountingModule(), (torch.randn(3),))
    graph = exported.graph_module.graph
    graph.eliminate_dead_code()
    targets = [str(n.target) for n in graph.nodes]
    assert "aten.add_.Tensor" in targets and "aten.sin.default" not in targets


def test_dce_on_a_python_level_graph_drops_the_side_effect():
    """On symbolic_trace's Python-level graph, `add_` is a method call FX cannot see into, and FX's DCE
    deletes it with the dead sin: why compilers run DCE on functionalized ATen graphs, not on this one."""
    gm = fx.symbolic_trace(CountingModule())
    gm.graph.eliminate_dead_code()
    targets = [str(n.target) for n in gm.graph.nodes]
    assert "sin" not in targets and "add_" not in targets
