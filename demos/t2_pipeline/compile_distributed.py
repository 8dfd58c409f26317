# %% [markdown]
# # torch.compile under DDP and FSDP2: where the graphs split, and where the collectives go
#
# DistributedDataParallel all-reduces gradients in *buckets* while the backward pass runs: autograd hooks
# mark each gradient ready, and a full bucket's all-reduce starts while earlier layers' gradients are still
# being computed. A compiled region's backward is one graph that autograd runs as a single function, so
# every gradient in it becomes ready at its end; DDP's hooks would fire only then, and nothing would overlap.
# PyTorch has two answers:
#
# - **DDPOptimizer** (`torch._dynamo.config.optimize_ddp = True`, the default): Dynamo splits the forward
#   graph where a bucket's worth of parameters is reached (1 MiB for the first bucket, `bucket_cap_mb` after),
#   counting in reverse (the order in which gradients become ready), and compiles each piece apart. Each piece
#   gets its own backward, after which the hooks of that bucket fire and its all-reduce can start.
# - **Compiled autograd** with DDP's Python reducer (`optimize_ddp="python_reducer"`): the backward is traced
#   at run time into one graph, and DDP's all-reduces are traced into it as collective ops, where the compiler
#   can see and schedule them.
#
# FSDP2 (`fully_shard`) all-gathers each unit's parameters in a hook before its forward and reduce-scatters its
# gradients after its backward; the usual way to compile it is per block, leaving those hooks between graphs.
#
# A process group of one rank (gloo, inside this process) is enough to see what gets captured: the graphs
# depend on bucket sizes and wrapping, not on the number of ranks. With one rank an all-reduce leaves a gradient
# as it was, so every variant's gradients must equal plain autograd's. What overlap buys needs several GPUs.

# %%
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from demos.harness.run import start

run = start("compile_distributed", title="torch.compile with DDP (DDPOptimizer, compiled autograd) and FSDP2",
            sizes={"tiny": (256, 8, 1), "small": (256, 16, 1), "full": (1024, 24, 25)},  # (width, layers, bucket MB)
            cpu_threads=1)
width, layers, bucket_mb = run.sizes
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        return F.gelu(self.linear(x))


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def fresh_model():
    torch.manual_seed(0)
    return Stack()


x = torch.randn(16, width)
reference = fresh_model()
reference(x).square().mean().backward()
reference_grads = torch.cat([p.grad.flatten() for p in reference.parameters()])


def grads_of(model):
    return torch.cat([(p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).flatten()
                      for p in model.parameters()])


# %% [markdown]
# A backend that records each graph Dynamo hands it (its operators, its collectives, the bytes of the
# parameters it takes) and runs it as it is, so the counts below are what was captured, not what Inductor
# made of it.

# %%
graphs: list[dict] = []


def recording(gm, example_inputs):
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    params = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    param_bytes = sum(p.numel() * p.element_size() for p in params if isinstance(p, torch.nn.Parameter))
    graphs.append({"ops": len(ops), "all_reduces": sum("all_reduce" in op for op in ops),
                   "collectives": sum("_c10d_functional" in op and "wait_tensor" not in op for op in ops),
                   "param_bytes": param_bytes})
    return gm.forward


def capture(name, config, build, step):
    """Reset Dynamo, build the model under ``config``, run one training step, check the gradients."""
    torch._dynamo.reset()
    graphs.clear()
    with torch._dynamo.config.patch(**config):
        model = build()
        step(model)
    run.check_close(f"{name}.grads", grads_of(model), reference_grads, rtol=1e-5, atol=1e-7,
                    reference_name="plain autograd, one process")
    return list(graphs)


def compiled_model_step(model):
    torch.compile(model, backend=recording)(x).square().mean().backward()


def compiled_step(model):  # compiled autograd traces the backward that runs inside a compiled function
    @torch.compile(backend=recording)
    def step(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss

    step(x)


def ddp():
    return DDP(fresh_model(), bucket_cap_mb=bucket_mb)


split = capture("ddp.optimizer", {"optimize_ddp": True}, ddp, compiled_model_step)
whole = [g for g in capture("ddp.no_optimization", {"optimize_ddp": False}, ddp, compiled_model_step) if g["ops"] > 0]
traced = capture("ddp.compiled_autograd", {"optimize_ddp": "python_reducer", "compiled_autograd": True}, ddp,
                 compiled_step)

# %% [markdown]
# DDPOptimizer's rule, from `compile_fn` in torch/_dynamo/backends/distributed.py: walk the graph in reverse and
# start a new bucket (and a graph break) before the next layer once the current bucket holds at least its cap.
# The first bucket's cap is `torch.distributed._DEFAULT_FIRST_BUCKET_BYTES` (1 MiB), whatever `bucket_cap_mb`
# is; the later ones' is `bucket_cap_mb`. Counted here from the layers' parameter bytes, it says how many graphs
# to expect.

# %%
def ddp_optimizer_buckets(layer_bytes, bucket_bytes, first_bucket_bytes):
    """Layers per bucket, last layer first, by DDPOptimizer's rule."""
    buckets, filled = [0], 0
    for size in reversed(layer_bytes):
        if filled >= (first_bucket_bytes if len(buckets) == 1 else bucket_bytes):
            buckets, filled = buckets + [0], 0
        buckets[-1] += 1
        filled += size
    return buckets


params = list(reference.parameters())
buckets = ddp_optimizer_buckets([sum(p.numel() * p.element_size() for p in layer.parameters())
                                 for layer in reference.layers], bucket_mb * 2**20, dist._DEFAULT_FIRST_BUCKET_BYTES)
expected = len(buckets)
forward_split = [g for g in split if g["ops"] > 0]  # an empty graph is the code after the module call
layers_per_graph = [g["ops"] // 2 for g in reversed(forward_split)]  # a linear and a GELU per layer, last first
run.check("ddp.optimizer.one_graph_per_bucket", len(forward_split) == expected > 1 and layers_per_graph == buckets,
          f"{len(forward_split)} forward graphs holding {layers_per_graph} layers (last first); {expected} buckets "
          f"by DDPOptimizer's rule (the first of 1 MiB, then {bucket_mb} MB) holding {buckets}")
run.check("ddp.no_optimization.one_graph", len(whole) == 1, f"{len(whole)} graphs")
backward = max(traced, key=lambda g: g["all_reduces"])
run.check("ddp.compiled_autograd.collectives_in_graph", backward["all_reduces"] > 0,
          f"the traced backward holds {backward['all_reduces']} all_reduce ops")

run.metric("ddp.buckets", expected, "buckets", origin="computed",
           label=f"gradient buckets by DDPOptimizer's rule (the first of 1 MiB, then {bucket_mb} MB)")
run.metric("ddp.optimizer.graphs", len(forward_split), "graphs", label="optimize_ddp=True: forward graphs")
run.metric("ddp.no_optimization.graphs", len(whole), "graphs",
           label="optimize_ddp=False: forward graphs")
run.metric("ddp.parameters", len(params), "tensors", label="parameter tensors (a weight and a bias per layer)")
run.metric("ddp.compiled_autograd.all_reduces", backward["all_reduces"], "collectives",
           label="compiled autograd + python_reducer: all_reduce ops in the traced backward graph")
run.metric("ddp.compiled_autograd.backward_ops", backward["ops"], "ops",
           label="compiled autograd + python_reducer: operators in the traced backward graph")

# %% [markdown]
# FSDP2, compiled two ways: the root module at once, and block by block (each `fully_shard` unit compiled on its
# own). In this PyTorch, FSDP2's hooks are wrapped in `torch._dynamo.disable`, so no graph can hold an all-gather
# or a reduce-scatter: compiling the root, Dynamo meets a hook it may not trace inside the loop over layers, runs
# the root's frame eagerly, and compiles each block's forward as a frame of its own. The check below asks that no
# graph span more than one block.

# %%
mesh = init_device_mesh("cpu", (1,))


def fsdp_whole():
    model = fresh_model()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def fsdp_per_block():
    model = fresh_model()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
        layer.compile(backend=recording)
    return fully_shard(model, mesh=mesh)


fsdp_root = capture("fsdp.whole_model", {}, fsdp_whole, compiled_model_step)
fsdp_blocks = capture("fsdp.per_block", {}, fsdp_per_block, lambda model: model(x).square().mean().backward())
block_ops = max(g["ops"] for g in fsdp_blocks)
run.check("fsdp.whole_model.graph_per_block", bool(fsdp_root) and max(g["ops"] for g in fsdp_root) == block_ops,
          f"the largest graph holds {max((g['ops'] for g in fsdp_root), default=0)} ops, one block's graph {block_ops}")
run.check("fsdp.per_block.fewer_graphs_than_blocks", 0 < len(fsdp_blocks) < layers,
          f"{len(fsdp_blocks)} graphs for {layers} blocks")
run.metric("fsdp.whole_model.graphs", len(fsdp_root), "graphs", label="FSDP2, the root module compiled: graphs")
run.metric("fsdp.per_block.graphs", len(fsdp_blocks), "graphs",
           label=f"FSDP2, each of the {layers} blocks compiled: graphs (one code, shared by the blocks)")

runs = {"DDP, optimize_ddp=True (DDPOptimizer)": forward_split, "DDP, optimize_ddp=False": whole,
        "DDP, compiled autograd + python_reducer": traced, "FSDP2, root module compiled": fsdp_root,
        "FSDP2, each block compiled": fsdp_blocks}
run.table("captured", f"What Dynamo captured: {layers} layers of width {width}, buckets of {bucket_mb} MB "
          "(the first of 1 MiB), one rank",
          ["setting", "graphs", "operators per graph", "collective ops in the graphs", "parameter MiB per graph"],
          [[name, len(gs), ", ".join(str(g["ops"]) for g in gs), sum(g["collectives"] for g in gs),
            ", ".join(f"{g['param_bytes'] / 2**20:.2f}" for g in gs)] for name, gs in runs.items()])

dist.destroy_process_group()
run.save()
