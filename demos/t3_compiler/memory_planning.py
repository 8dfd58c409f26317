# %% [markdown]
# # Memory planning: peak memory of the block, eager vs compiled
#
# Eager PyTorch allocates every op's output when the op runs and frees it when Python drops the
# last reference; it cannot know that a buffer is dead until then, and it keeps every
# intermediate that a later op or the backward pass still references. A compiler sees the whole
# graph first, so it can plan memory: intermediates that fusion keeps in registers are never
# allocated at all, a buffer whose last reader has run is **reused** for a later one of the same
# size (Inductor writes `bufN = bufM; del bufM  # reuse` in its wrapper), and for training
# AOTAutograd's partitioner chooses which activations to save for the backward and which to
# recompute.
#
# The demo measures the peak of the memory allocated during one forward pass (inference) and one
# training step (forward + backward) of the transformer block, eager vs `torch.compile`.
#
# **What is measured, per device.** On a GPU: `torch.cuda.max_memory_allocated()` after
# `reset_peak_memory_stats()`, minus what was allocated before the call: the peak of live tensor
# bytes in PyTorch's caching allocator. On a CPU there is no such counter, so the demo runs the call
# under `torch.profiler` with `profile_memory=True`: every allocation and free through PyTorch's
# CPU allocator is recorded with the running total of bytes allocated since profiling started,
# and the peak of that total is the same quantity. Both count tensor storage only (not the Python
# heap, not Inductor's compiled code), both include the outputs, and neither counts the weights
# or the input, which exist before the call.

# %%
import json
import re
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from demos.common.block import make_block, reference_forward
from demos.harness.run import start

run = start(
    "memory_planning",
    title="Memory planning: peak memory of a transformer block, eager vs torch.compile",
    sizes={  # (batch, sequence length, width, heads)
        "tiny": (2, 64, 32, 2),
        "small": (4, 512, 128, 4),
        "full": (16, 2048, 1024, 16),
    },
)
batch, seq, width, heads = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}[dtype]
block = make_block(width, heads, device, dtype)
x = torch.randn(batch, seq, width, device=device, dtype=dtype)
activation_mb = x.numel() * x.element_size() / 1e6  # one (batch, seq, width) tensor: the output's size


# %% [markdown]
# ## Measuring the peak

# %%
def measure_memory(fn) -> dict:
    """Peak bytes allocated during fn() above what existed before it, and the number of allocations."""
    if run.device.is_gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        allocations = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        fn()
        torch.cuda.synchronize()
        return {"peak_mb": (torch.cuda.max_memory_allocated() - base) / 1e6,
                "allocations": torch.cuda.memory_stats().get("allocation.all.allocated", 0) - allocations}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                    key=lambda e: e["ts"])
    return {"peak_mb": max((e["args"]["Total Allocated"] for e in memory), default=0) / 1e6,
            "allocations": sum(1 for e in memory if e["args"]["Bytes"] > 0)}


def training_step(fn):
    block.zero_grad(set_to_none=True)
    fn(x).float().square().mean().backward()


# %% [markdown]
# ## Inference: one forward pass
#
# The compiled version's first call is its compile; its generated wrapper is kept, because the
# allocation plan is written there: every `empty_strided` is an allocation, every `# reuse` a
# buffer handed to a later value instead of a new allocation.

# %%
from torch._inductor.utils import run_and_get_code  # noqa: E402

compiled = torch.compile(block)
with torch.no_grad():
    (out, code), compile_s = run.first_call(lambda: run_and_get_code(compiled, x))
    run.check_close("inference.compiled", out, reference_forward(block, x), **TOLERANCE)
    run.check_close("inference.eager", block(x), reference_forward(block, x), **TOLERANCE)
    inference = {"eager": measure_memory(lambda: block(x)), "compiled": measure_memory(lambda: compiled(x))}

wrapper = code[0][code[0].find("def call("):]
plan = [line.strip() for line in wrapper.splitlines() if re.search(r"empty_strided|# reuse|\bdel buf", line)]
run.metric("inference.compiled.planned_allocations", sum("empty_strided" in line for line in plan), "buffers",
           label="compiled forward: buffers the wrapper allocates")
run.metric("inference.compiled.planned_reuses", sum("# reuse" in line for line in plan), "buffers",
           label="compiled forward: buffers reused instead of allocated")
run.artifact("inference_allocation_plan", "\n".join(plan))

# %% [markdown]
# ## Training: forward + backward
#
# The eager step keeps what autograd's tape saves; the compiled step runs AOTAutograd's forward
# graph (which returns the activations its partitioner chose to save) and its backward graph,
# both generated by Inductor. Gradients are compared with eager's before memory is measured; the
# parameter gradients, allocated inside the step, count in both.

# %%
training_step(block)
eager_grads = [p.grad.clone() for p in block.parameters()]
compiled_train = torch.compile(block)
_, train_compile_s = run.first_call(lambda: training_step(compiled_train))
# Gradients are far smaller than activations (order 1e-3 here), so the activations' absolute tolerance
# would pass anything: each parameter's gradient is compared at its own scale (its RMS), 1e-4 of it in
# float32 and 5% of it in bf16 (compiled and eager kernels round to bf16 at different points).
for (name, p), g in zip(block.named_parameters(), eager_grads):
    scale = float(g.float().square().mean().sqrt())
    grad_tolerance = dict(rtol=TOLERANCE["rtol"], atol=(5e-2 if dtype == torch.bfloat16 else 1e-4) * scale)
    run.check_close(f"training.grad.{name}", p.grad, g, **grad_tolerance,
                    reference_name=f"eager autograd (gradient RMS {scale:.1e})")
training = {"eager": measure_memory(lambda: training_step(block)),
            "compiled": measure_memory(lambda: training_step(compiled_train))}

# %% [markdown]
# ## Results

# %%
rows = []
for phase, results in (("inference (forward)", inference), ("training step (forward + backward)", training)):
    key = phase.split(" ")[0]
    for variant, r in results.items():
        rows.append([phase, variant, round(r["peak_mb"], 2), round(r["peak_mb"] / activation_mb, 2), r["allocations"]])
        run.metric(f"{key}.{variant}.peak_mb", r["peak_mb"], "MB", label=f"{phase}, {variant}: peak allocated")
        run.metric(f"{key}.{variant}.allocations", r["allocations"], "allocations",
                   label=f"{phase}, {variant}: allocator calls")
    run.metric(f"{key}.eager_over_compiled", results["eager"]["peak_mb"] / results["compiled"]["peak_mb"], "x",
               label=f"{phase}: eager peak / compiled peak")
run.table("peak_memory", f"Peak memory of the block, batch {batch} x seq {seq} x width {width} "
          f"({str(dtype).removeprefix('torch.')}; one activation = {activation_mb:.2f} MB)",
          ["phase", "variant", "peak allocated (MB)", "peak / one activation", "allocations"], rows)
run.metric("activation_mb", activation_mb, "MB", label="one (batch, seq, width) activation, the size of the output", origin="computed")
run.metric("inference.compile_s", compile_s, "s", label="first call of the compiled forward (includes Inductor start-up)")
run.metric("training.compile_s", train_compile_s, "s", label="first call of the compiled training step")

run.save()
