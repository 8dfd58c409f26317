# %% [markdown]
# # Constant folding and dead-code elimination, visible in a captured graph
#
# Two of the oldest compiler passes, applied to a model graph:
#
# - **Dead-code elimination (DCE)** removes nodes whose results nobody uses and that have no side
#   effects: a debugging statistic computed and never returned, a branch left over from training.
# - **Constant folding** evaluates, once at compile time, every subgraph whose inputs are all known
#   constants. In inference the weights are constants, so anything computed from weights alone (a weight
#   scaled by a per-channel factor, a transposed or re-laid-out copy, a BatchNorm folded into a
#   convolution) can be computed once instead of on every call.
#
# The model below does both wrong on purpose: each call rescales and transposes its weight (a copy of
# the whole matrix), and computes a statistic of the input that it then drops. The demo captures its
# graph with `torch.fx`, runs FX's DCE and constant-folding passes, counts the nodes before and after,
# checks the outputs stay equal, and times what the removed nodes cost. Then it asks Inductor, with
# `freezing` (its inference mode that treats parameters as constants), to do the same.

# %%
import re

import torch
import torch.fx as fx
from torch.fx.experimental import const_fold

from demos.harness.run import start

run = start("graph_passes", title="Constant folding and dead-code elimination in a captured graph",
            sizes={"tiny": (8, 64), "small": (16, 1024), "full": (64, 8192)}, cpu_threads=1)
batch, width = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}[dtype]


class ScaledLinear(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n, n) / n**0.5, requires_grad=False)
        self.gamma = torch.nn.Parameter(torch.rand(n) + 0.5, requires_grad=False)

    def forward(self, x):
        w = self.weight * self.gamma[:, None]  # weights only: a constant in inference
        w = w.t().contiguous()  # a transposed copy of the whole matrix, every call
        debug = torch.sin(x).abs().sum()  # noqa: F841  computed, never used: dead code
        return torch.relu(x @ w)


model = ScaledLinear(width).to(device=device, dtype=dtype)
x = torch.randn(batch, width, device=device, dtype=dtype)
reference = torch.relu(x.double() @ (model.weight.double() * model.gamma.double()[:, None]).t())


def ops(gm: fx.GraphModule) -> list[str]:
    """The graph's computing nodes (calls and attribute reads), by target name."""
    return [n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            for n in gm.graph.nodes if n.op in ("call_function", "call_method", "get_attr")]


def graph_text(gm: fx.GraphModule) -> str:
    """The graph as FX prints it, one node per line, without the per-node kwargs noise."""
    return re.sub(r", kwargs = \{\}", "", str(gm.graph)).strip()


# %% [markdown]
# ## The captured graph, then DCE, then constant folding

# %%
captured = fx.symbolic_trace(model)
before = ops(captured)
run.artifact("graph_before", graph_text(captured))

after_dce = fx.symbolic_trace(model)
after_dce.graph.eliminate_dead_code()
after_dce.recompile()
dce_removed = sorted(set(before) - set(ops(after_dce)))

folded = const_fold.split_const_subgraphs(after_dce)
folded.run_folding()
after_fold = ops(folded)
run.artifact("graph_after_dce", graph_text(after_dce))
run.artifact("graph_after_folding", graph_text(folded))

with torch.no_grad():
    for name, module in (("captured", captured), ("after_dce", after_dce), ("after_folding", folded)):
        run.check_close(f"{name}.equal", module(x), reference, **TOL, reference_name="float64 reference")
run.check("dce.removed_the_dead_branch", {"sin", "abs", "sum"} <= set(dce_removed),
          f"removed by DCE: {dce_removed}")
run.check("fold.weights_precomputed", not {"mul", "t", "contiguous", "sin"} & set(after_fold),
          f"left after folding: {after_fold}")
run.metric("nodes.before", len(before), "nodes", label="captured graph: calls and attribute reads")
run.metric("nodes.after_dce", len(ops(after_dce)), "nodes", label="after dead-code elimination")
run.metric("nodes.after_folding", len(after_fold), "nodes", label="after constant folding")
run.table("passes", "Nodes of the captured graph after each pass",
          ["stage", "nodes", "which"], [["captured", len(before), ", ".join(before)],
                                        ["after DCE", len(ops(after_dce)), ", ".join(ops(after_dce))],
                                        ["after constant folding", len(after_fold), ", ".join(after_fold)]])

exported = torch.export.export(model, (x,))
export_dead = [n.name for n in exported.graph.nodes if n.op == "call_function" and not n.users]
run.metric("export.dead_nodes", len(export_dead), "nodes",
           label="torch.export graph: nodes with no users (export keeps them; DCE is a later pass)")

# %% [markdown]
# ## What the removed nodes cost per call
#
# The original module recomputes the scaled, transposed weight (a full read and write of the matrix)
# and the dead statistic on every call; the folded graph only multiplies.

# %%
with torch.no_grad():
    t_orig = run.time(lambda: model(x))
    t_dce = run.time(lambda: after_dce(x))
    t_fold = run.time(lambda: folded(x))
run.table("timing", f"One call, batch {batch}, width {width} ({str(dtype).removeprefix('torch.')})",
          ["graph", "median (us)", "p10-p90 (us)"],
          [[k, round(t.median_s * 1e6, 1), f"{t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f}"]
           for k, t in (("captured (eager)", t_orig), ("after DCE", t_dce), ("after constant folding", t_fold))])
run.metric("timing.original_us", t_orig.median_s * 1e6, "us", label="the module as written")
run.metric("timing.folded_us", t_fold.median_s * 1e6, "us", label="after DCE and constant folding")
run.metric("timing.fold_speedup", t_orig.median_s / t_fold.median_s, "x", label="folded over the module as written")

# %% [markdown]
# ## Inductor does the same, with `freezing`
#
# By default `torch.compile` treats parameters as inputs that may change between calls, so it keeps
# computing the scaled weight each call (fused into one generated kernel). With
# `torch._inductor.config.freezing = True` (for inference, under `no_grad`) it treats them as constants
# and folds that work away at compile time. DCE it always does: the `sin` never reaches the generated
# code.

# %%
from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402

codes = {}
for frozen in (False, True):
    torch._dynamo.reset()
    with torch.no_grad(), inductor_config.patch(freezing=frozen):
        out, sources = run_and_get_code(torch.compile(model, dynamic=False), x)
    run.check_close(f"inductor.freezing_{frozen}", out, reference, **TOL, reference_name="float64 reference")
    codes[frozen] = "\n".join(sources)
    kernels = re.findall(r"^(\w+) = async_compile\.", codes[frozen], re.M)
    run.metric(f"inductor.{'frozen' if frozen else 'default'}.kernels", len(kernels), "kernels",
               label=f"generated kernels, freezing={frozen}")
    run.check(f"inductor.freezing_{frozen}.no_sin", not re.search(r"\bsin\b|sin\(", codes[frozen]),
              "the dead sin is not in the generated code")
call = codes[True][codes[True].find("def call("):]
run.artifact("inductor_frozen_call", call[: call.find("\n\n\n")].strip())
call = codes[False][codes[False].find("def call("):]
run.artifact("inductor_default_call", call[: call.find("\n\n\n")].strip())

run.save()
