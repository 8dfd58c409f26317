# %% [markdown]
# # One transformer block through PyTorch's compiler stack
#
# `torch.compile` turns Python into kernels in stages. **TorchDynamo** reads the function's
# bytecode and records the tensor ops into an FX graph, guarded by the assumptions it made; where
# it cannot follow the Python (a `print`, a branch on a tensor's value, a call into a C extension)
# it *breaks* the graph and runs that piece in plain Python. **torch.export** captures the whole
# program ahead of time or fails. **AOTAutograd** traces forward and backward together and splits
# them into two graphs, deciding which activations to save. **TorchInductor** lowers the graph to
# loops, fuses them and writes C++ (CPU) or Triton (GPU) kernels, calling vendor libraries for
# matmuls and attention.
#
# This demo takes one small pre-norm transformer block (`demos/common/block.py`) through
# each stage and keeps the real artifacts: the graph-break report, the exported graph, the forward
# and backward graphs, and the generated code. Every stage's output is checked against a float64
# reference before anything is timed.

# %%
import contextlib
import io
import math
import re
from collections import Counter

import scipy.special
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from demos.common.block import SIZES, make_block, reference_forward
from demos.harness.run import start

run = start("graph_capture", title="A transformer block through Dynamo, torch.export, AOTAutograd and Inductor",
            sizes=SIZES, cpu_threads=1)
batch, seq, width, heads = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}[dtype]
block = make_block(width, heads, device, dtype)
x = torch.randn(batch, seq, width, device=device, dtype=dtype)
reference = reference_forward(block, x)

# On a CPU, every variant runs on one thread. Inductor wraps its generated loops in OpenMP parallel
# regions, which wait for all their threads; on a CPU shared with other work, while another process held
# a core, each region stalled for a scheduler time slice and a compiled call measured tens of times
# slower than the same call a minute later. One thread keeps eager and compiled comparable and the
# numbers repeatable; the generated code is then a plain (vectorized) loop nest.


def excerpt(text: str, max_lines: int = 60) -> str:
    """The first max_lines lines of an artifact, with a note of how many were left out."""
    lines = text.strip("\n").splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join(lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"])


# %% [markdown]
# ## 1. TorchDynamo: graph breaks
#
# Two versions of the block's forward pass. The first has three things Dynamo cannot put in a
# graph: a `print` (a side effect on the Python world), a branch on a tensor's *value* (the graph
# would have to hold both paths, and Python needs a concrete bool, which on a GPU means waiting for
# the device), and a call into a C extension (SciPy's `erf` on a NumPy array) whose inside Dynamo
# cannot see. The fixed version drops the print, replaces the branch by an unconditional `clamp`
# (identical whenever the branch was not taken, and equal to the branch's result when it was), and
# uses PyTorch's own GELU.

# %%
def forward_with_breaks(x):
    x = x + block.attention(x)
    print(f"after attention: {tuple(x.shape)}")  # 1: print is a Python side effect
    if x.abs().amax() > 100:  # 2: a branch on a tensor's value
        x = x.clamp(-100, 100)
    h = block.fc1(block.ln2(x))
    erf = scipy.special.erf((h / math.sqrt(2)).float().numpy(force=True))  # 3: a call into a C extension
    h = 0.5 * h * (1 + torch.from_numpy(erf).to(h.device, h.dtype))
    return x + block.fc2(h)


def forward_fixed(x):
    x = x + block.attention(x)
    x = x.clamp(-100, 100)  # branch-free: the same result as the guarded clamp
    return x + block.fc2(F.gelu(block.fc1(block.ln2(x))))


quiet = contextlib.redirect_stdout(io.StringIO())  # the broken version prints on every call
with torch.no_grad(), quiet:
    run.check_close("eager.with_breaks", forward_with_breaks(x), reference, **TOLERANCE)
    run.check_close("eager.fixed", forward_fixed(x), reference, **TOLERANCE)

# %% [markdown]
# `torch._dynamo.explain` runs Dynamo without a compiler backend and reports each graph and each
# break with its reason. `fullgraph=True` turns the first break into an error, which is what you
# want in CI for code that must compile whole.

# %%
explained = {}
for name, fn in (("with_breaks", forward_with_breaks), ("fixed", forward_fixed)):
    torch._dynamo.reset()
    with torch.no_grad(), quiet:
        explained[name] = torch._dynamo.explain(fn)(x)
    e = explained[name]
    run.metric(f"dynamo.{name}.graphs", e.graph_count, "graphs", label=f"Dynamo graphs captured, {name} version")
    run.metric(f"dynamo.{name}.breaks", e.graph_break_count, "breaks", label=f"Dynamo graph breaks, {name} version")
    run.log(f"  {name}: {e.graph_count} graphs, {e.graph_break_count} breaks, ops per graph "
            f"{[len(ops) for ops in e.ops_per_graph]}")

report = []
for i, reason in enumerate(explained["with_breaks"].break_reasons, 1):
    frame = reason.user_stack[-1] if reason.user_stack else None
    where = f"line {frame.lineno}: {frame.line.strip()}" if frame is not None else "(no user frame)"
    lines = reason.reason.strip().splitlines()
    explanation = next((line.strip() for line in lines if line.strip().startswith("Explanation:")), "")
    report.append(f"break {i}: {lines[0]}\n    {explanation + chr(10) + '    ' if explanation else ''}at {where}")
graphs_summary = ", ".join(str(len(ops)) for ops in explained["with_breaks"].ops_per_graph)
run.artifact("dynamo_graph_breaks", f"torch._dynamo.explain(forward_with_breaks): "
             f"{explained['with_breaks'].graph_count} graphs (ops per graph: {graphs_summary}), "
             f"{explained['with_breaks'].graph_break_count} breaks\n\n" + "\n".join(report) +
             f"\n\ntorch._dynamo.explain(forward_fixed): {explained['fixed'].graph_count} graph, "
             f"{explained['fixed'].graph_break_count} breaks")
for needle, what in (("print", "the print"), ("amax", "the data-dependent branch"), ("scipy", "the SciPy call")):
    hit = [r for r in report if needle in r]
    run.check(f"dynamo.break_found.{needle}", bool(hit), f"{what}: {hit[0].splitlines()[0] if hit else 'no break'}")
run.check("dynamo.fixed.one_graph", explained["fixed"].graph_count == 1 and explained["fixed"].graph_break_count == 0,
          f"fixed version: {explained['fixed'].graph_count} graph, {explained['fixed'].graph_break_count} breaks")

torch._dynamo.reset()
try:
    with torch.no_grad(), quiet:
        torch.compile(forward_with_breaks, fullgraph=True, backend="eager")(x)
    raised = "no error"
except Exception as err:  # Dynamo's Unsupported error, wrapped by the backend machinery
    raised = f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"
run.check("dynamo.fullgraph_refuses_breaks", raised != "no error", raised[:200])

# %% [markdown]
# ## 2. torch.export: one whole graph, ahead of time
#
# `torch.export` captures the whole program or raises; it never falls back to Python. Its graph
# keeps high-level ATen ops (`linear`, `layer_norm`, `scaled_dot_product_attention`).
# Decomposing to the **core ATen** op set (what backends like ExecuTorch consume) turns the
# attention into matmuls, a mask and a softmax, and every `linear` into a transpose and an
# `addmm`: more, simpler ops, and the attention is no longer one node.

# %%
exported = torch.export.export(block, (x,))
core = exported.run_decompositions()


def op_counts(graph) -> Counter:
    return Counter(str(n.target).removeprefix("aten.") for n in graph.nodes if n.op == "call_function")


export_ops, core_ops = op_counts(exported.graph), op_counts(core.graph)
with torch.no_grad():
    run.check_close("export.module", exported.module()(x), reference, **TOLERANCE)
    run.check_close("export.core_aten", core.module()(x), reference, **TOLERANCE)
run.metric("export.ops", sum(export_ops.values()), "ops", label="torch.export graph: call_function nodes")
run.metric("export.core_aten_ops", sum(core_ops.values()), "ops",
           label="after decomposition to core ATen: call_function nodes")
run.table("export_ops", "Op types in the exported graph, before and after core-ATen decomposition",
          ["op", "export graph", "core ATen"],
          [[op, export_ops.get(op, 0), core_ops.get(op, 0)] for op in sorted(set(export_ops) | set(core_ops),
                                                                             key=lambda o: -core_ops.get(o, 0))])
run.artifact("export_graph", excerpt(exported.graph_module.code, 40))
run.artifact("export_core_aten_graph", excerpt(core.graph_module.code, 80))

# %% [markdown]
# ## 3. AOTAutograd: the forward and backward graphs
#
# For training, AOTAutograd traces the forward and the backward together (a *joint* graph) at the
# level of ATen ops, then a partitioner cuts it in two. Whatever the backward needs from the
# forward becomes an extra output of the forward graph: the saved activations. Inductor's
# partitioner (min-cut) prefers to recompute cheap pointwise ops in the backward rather than save
# their outputs. Here the two graphs go to a "compiler" that only records them and runs them as
# they are, so no kernels are generated and the gradients must equal eager autograd's.

# %%
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

captured = {}


def keep(kind):
    def compiler(gm, example_inputs):
        captured[kind] = gm
        return make_boxed_func(gm.forward)  # run the graph as it is

    return compiler


def grads_of(fn):
    block.zero_grad(set_to_none=True)
    fn(x).float().square().mean().backward()
    return torch.cat([p.grad.flatten() for p in block.parameters()])


eager_grads = grads_of(forward_fixed)
torch._dynamo.reset()
recording_backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                                 partition_fn=min_cut_rematerialization_partition)
# Gradients of this loss are of order 1e-3, so an absolute tolerance made for activations of order 1
# would pass any gradient at all. The allowance is relative to the gradients' own scale (their RMS):
# 1e-4 of it in float32; in bf16, 5% of it (AOTAutograd's decomposed backward rounds to bf16 at other
# points than eager's fused kernels, each rounding 2^-8 relative), while a wrong or missing gradient
# term is off by the whole scale.
grad_scale = float(eager_grads.float().square().mean().sqrt())
GRAD_TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4 * grad_scale),
                  torch.bfloat16: dict(rtol=5e-2, atol=5e-2 * grad_scale)}[dtype]
run.check_close("aot.grads", grads_of(torch.compile(forward_fixed, backend=recording_backend)), eager_grads,
                **GRAD_TOLERANCE, reference_name=f"eager autograd (gradient RMS {grad_scale:.1e})")
fw_graph, bw_graph = captured["forward"].graph, captured["backward"].graph
# The backward's inputs: parameters and the block input ("primals"), saved activations, and the
# incoming gradient ("tangents").
saved = [n for n in bw_graph.nodes if n.op == "placeholder" and not n.name.startswith(("primals", "tangents"))]
saved_bytes = sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in saved)
run.metric("aot.forward_ops", sum(op_counts(fw_graph).values()), "ops", label="AOTAutograd forward graph: ATen ops")
run.metric("aot.backward_ops", sum(op_counts(bw_graph).values()), "ops", label="AOTAutograd backward graph: ATen ops")
run.metric("aot.saved_activations", len(saved), "tensors",
           label="activations the forward saves for the backward (parameters and input not counted)")
run.metric("aot.saved_mb", saved_bytes / 1e6, "MB", label="their size (views counted at full size)")


def produced_by(name: str) -> str:
    """The forward op behind a saved tensor: 'native_layer_norm[1]' for a getitem, 'view of addmm' for a view."""
    node = next((f for f in fw_graph.nodes if f.name == name), None)
    if node is None or node.op != "call_function":
        return ""
    op = str(node.target).removeprefix("aten.").removesuffix(".default")
    source = node.args[0] if node.args and hasattr(node.args[0], "target") else None
    if "getitem" in op and source is not None:
        return f"{produced_by(source.name)}[{node.args[1]}]"
    if op.startswith(("view", "detach")) and source is not None:
        return f"{op.split('.')[0]} of {produced_by(source.name)}"
    return op


run.table("aot_saved", "What the forward graph saves for the backward (min-cut partition)",
          ["saved tensor", "shape", "produced by"],
          [[n.name, "x".join(map(str, n.meta["val"].shape)), produced_by(n.name)] for n in saved])
run.artifact("aot_forward_graph", excerpt(captured["forward"].code, 80))
run.artifact("aot_backward_graph", excerpt(captured["backward"].code, 80))

# %% [markdown]
# ## 4. TorchInductor: generated kernels vs the ops eager launches
#
# Eager PyTorch runs one kernel per ATen op that computes something (views only change metadata).
# A `TorchDispatchMode` sees every op at the bottom of the dispatcher, so it counts them exactly.
# Inductor's output is a Python wrapper that allocates buffers and calls the generated kernels and
# library functions in order; the demo reads that code to count both. On a GPU the profiler also
# counts the CUDA kernels each version actually launched.
#
# Inductor's one-time start-up in a fresh process (imports, compiler checks) is paid first on a
# throwaway function, so that the block's compile time is its own.

# %%
from torch._inductor.utils import run_and_get_code  # noqa: E402


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


with torch.no_grad(), CountOps() as counter:
    forward_fixed(x)
eager_ops = sum(counter.ops.values())

_, startup_s = run.first_call(lambda: torch.compile(lambda t: t * 2.0 + 1.0)(torch.randn(8, device=device)))
run.metric("inductor_startup_s", startup_s, "s", label="Inductor's one-time start-up (first compile in a process)")

torch._dynamo.reset()
compiled_fixed = torch.compile(forward_fixed)
with torch.no_grad():
    (out, sources), compile_s = run.first_call(lambda: run_and_get_code(compiled_fixed, x))
run.check_close("inductor.fixed", out, reference, **TOLERANCE)
wrapper = sources[0]
kernel_names = re.findall(r"^(\w+) = async_compile\.\w+\(", wrapper, re.M)
library_calls = re.findall(r"\b(extern_kernels\.\w+|torch\.ops\.aten\.\w+)(?:\.\w+)?\(", wrapper[wrapper.find("def call("):])
run.metric("eager.ops_launched", eager_ops, "ops", label="eager: ATen ops that run a kernel (views excluded)")
run.metric("inductor.generated_kernels", len(kernel_names), "kernels", label="Inductor: generated (fused) kernels")
run.metric("inductor.library_calls", len(library_calls), "calls",
           label="Inductor: calls to library kernels (matmul, attention)")
run.metric("inductor.buffer_reuses", wrapper.count("# reuse"), "buffers",
           label="Inductor wrapper: buffers reused instead of allocated")
run.table("ops", "Eager ATen ops launched vs what Inductor's wrapper calls",
          ["eager op", "count"], [[op, n] for op, n in counter.ops.most_common()])
run.table("inductor_calls", "Inductor's wrapper: generated kernels and library calls, in order",
          ["kind", "name"], [["generated", k] for k in kernel_names] + [["library", c] for c in library_calls])

call_body = wrapper[wrapper.find("def call("):]
run.artifact("inductor_wrapper_call", excerpt(call_body[: call_body.find("\n\n\n")], 90))
fused_name = max(kernel_names, key=lambda k: ("layer_norm" in k) + ("add" in k))
start_at = wrapper.find(f"{fused_name} = async_compile")
source_open = wrapper.find("'''", start_at)  # the kernel's source is one triple-quoted string (C++ or Triton)
run.artifact("inductor_kernel", excerpt(wrapper[start_at: wrapper.find("'''", source_open + 3) + 3], 90))

if run.device.is_gpu:
    from torch.profiler import ProfilerActivity, profile

    def cuda_kernels(fn) -> int:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    run.metric("gpu.eager.kernels_launched", cuda_kernels(lambda: forward_fixed(x)), "kernels",
               label="eager: CUDA kernels launched (profiler)")
    run.metric("gpu.inductor.kernels_launched", cuda_kernels(lambda: compiled_fixed(x)), "kernels",
               label="compiled: CUDA kernels launched (profiler)")
else:
    run.not_run("CUDA kernel count (profiler)", "no GPU here: the kernel counts come from the dispatcher (eager) "
                "and from Inductor's generated code (compiled)")

# %% [markdown]
# ## 5. Compile time, steady state, and what a graph break costs
#
# The broken version above is slow for reasons of its own (the SciPy call copies to NumPy and
# back). To see what the breaks alone cost, the fixed code gets three explicit
# `torch._dynamo.graph_break()` calls at the same three places: the same math, four graphs instead
# of one. Each extra graph means its own guard check and wrapper call, Python running between
# graphs, and no fusion across the boundary (here, the residual add can no longer share a kernel
# with the LayerNorm that follows it).
#
# Compile times are compared cold: before each first call Dynamo is reset and Inductor gets a fresh,
# empty cache (`fresh_cache` clears its in-memory caches too), so neither variant is served what the
# other compiled; section 4 paid the process's one-time costs. Each variant compiles twice, in the order
# one, breaks, breaks, one (a drift of the machine's speed falls on both), and its faster first call is kept.

# %%
from torch._inductor.utils import fresh_cache  # noqa: E402


def forward_fixed_with_explicit_breaks(x):
    x = x + block.attention(x)
    torch._dynamo.graph_break()
    x = x.clamp(-100, 100)
    torch._dynamo.graph_break()
    h = block.fc1(block.ln2(x))
    torch._dynamo.graph_break()
    return x + block.fc2(F.gelu(h))


VARIANTS = {"compiled, one graph": forward_fixed, "compiled, three graph breaks": forward_fixed_with_explicit_breaks}
cold, kernels = {name: [] for name in VARIANTS}, {}
for i, name in enumerate((*VARIANTS, *reversed(VARIANTS)), 1):
    torch._dynamo.reset()
    cold_compiled = torch.compile(VARIANTS[name])
    with torch.no_grad(), fresh_cache():
        (out, sources), seconds = run.first_call(lambda: run_and_get_code(cold_compiled, x))
    cold[name].append(seconds)
    run.check_close(f"inductor.cold_{i}", out, reference, **TOLERANCE)
    kernels[name] = sum(len(re.findall(r"^(\w+) = async_compile\.\w+\(", s, re.M)) for s in sources)
one_graph_s, breaks_s = (min(cold[name]) for name in VARIANTS)

torch._dynamo.reset()
compiled_fixed = torch.compile(forward_fixed)
compiled_breaks = torch.compile(forward_fixed_with_explicit_breaks)
with torch.no_grad():
    compiled_fixed(x)  # compiled again for the timing below (run.time also times its first call apart)
    run.check_close("inductor.explicit_breaks", compiled_breaks(x), reference, **TOLERANCE)
    timings = {
        "eager": run.time(lambda: forward_fixed(x)),
        "compiled, one graph": run.time(lambda: compiled_fixed(x)),
        "compiled, three graph breaks": run.time(lambda: compiled_breaks(x)),
    }
first = {"eager": None, "compiled, one graph": one_graph_s, "compiled, three graph breaks": breaks_s}
run.table("timing", f"Block forward, batch {batch} x seq {seq} x width {width} ({str(dtype).removeprefix('torch.')})",
          ["variant", "median (us)", "p10-p90 (us)", "cold first call: trace + compile (s), best of two"],
          [[k, round(t.median_s * 1e6, 1), f"{t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f}",
            "" if first[k] is None else round(first[k], 2)] for k, t in timings.items()])
eager_us = timings["eager"].median_s * 1e6
compiled_us = timings["compiled, one graph"].median_s * 1e6
breaks_us = timings["compiled, three graph breaks"].median_s * 1e6
run.metric("timing.eager_us", eager_us, "us", label="eager block forward: median")
run.metric("timing.compiled_us", compiled_us, "us", label="compiled block forward (one graph): median")
run.metric("timing.compiled_with_breaks_us", breaks_us, "us", label="compiled, three explicit graph breaks: median")
run.metric("timing.speedup", eager_us / compiled_us, "x", label="compiled (one graph) over eager")
run.metric("timing.per_break_us", (breaks_us - compiled_us) / 3, "us",
           label="extra time per graph break (steady state, per call)")
run.metric("timing.compile_s", compile_s, "s", label="first call of the compiled block: trace + compile + run")
run.metric("timing.cold_compile_s", one_graph_s, "s",
           label="cold first call, one graph (empty caches, Dynamo reset; best of two)")
run.metric("timing.cold_compile_with_breaks_s", breaks_s, "s",
           label="cold first call, three graph breaks: four graphs traced and compiled (best of two)")
run.metric("timing.cold_compile_breaks_over_one", breaks_s / one_graph_s, "x",
           label="cold first call: three graph breaks over one graph")
run.metric("inductor.with_breaks.generated_kernels", kernels["compiled, three graph breaks"], "kernels",
           label="Inductor: generated kernels over the four graphs of the broken version")

run.save()
