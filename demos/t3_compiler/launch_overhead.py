# %% [markdown]
# # Launch overhead: many tiny ops, eager vs compiled vs CUDA-graph replay
#
# When tensors are tiny, an op's cost is not its arithmetic but everything around it: Python,
# the dispatcher, the allocator and, on a GPU, the kernel launch (a few microseconds each, paid by
# the CPU, which must stay ahead of the GPU). A chain of N tiny ops costs about N times that
# overhead in eager mode. Two remedies:
#
# - **compile** the chain: Inductor fuses it into one kernel, so one call replaces N;
# - **CUDA graphs** (GPU only): record the N launches once and replay them with a single call;
#   the kernels stay separate, but the CPU no longer issues them one by one.
#
# The demo times chains of increasing length on a tensor small enough that the arithmetic is
# negligible, and fits time = fixed + per-op x N for each variant: the per-op slope is the overhead.

# %%
import numpy as np
import torch

from demos.harness.run import start
from records.numbers import fmt_speedup_words

run = start(
    "launch_overhead",
    title="Launch overhead: a chain of tiny ops, eager vs torch.compile vs CUDA graphs",
    sizes={  # (elements in the tensor, chain lengths)
        "tiny": (256, [1, 4, 16]),
        "small": (1024, [1, 8, 64]),
        "full": (4096, [1, 8, 64, 256]),
    },
    cpu_threads=1,
)
numel, lengths = run.sizes
device = run.torch_device
dtype = torch.float32

# %% [markdown]
# On a CPU the demo runs on one thread. An op on a thousand elements should never be split across
# threads: eager PyTorch's own kernels stay on one thread below their grain size, while Inductor
# wraps its generated loop in an OpenMP parallel region whenever more than one thread is
# available. On a CPU shared with other work that region must wait until every thread runs, and one
# call then took milliseconds instead of microseconds while another process held a core. With one
# thread, Inductor emits a plain loop, and the measurement is the per-call overhead, not the
# scheduler.

# %%


def chain(x, n: int):
    """n cheap elementwise ops in a row: sin, scale, shift, sin, scale, shift, ..."""
    for i in range(n):
        x = torch.sin(x) if i % 3 == 0 else (x * 0.9 if i % 3 == 1 else x + 0.1)
    return x


x = torch.randn(numel, device=device, dtype=dtype)
references = {n: chain(x.double(), n) for n in lengths}
TOLERANCE = dict(rtol=1e-5, atol=1e-5)

# %% [markdown]
# ## The variants, each checked against a float64 reference
#
# `torch.compile` gets one compile per chain length (the loop is unrolled at trace time). The
# demo reads Inductor's generated code to count the kernels it made. Inductor's one-time start-up
# is paid first on a throwaway function, so each first call below is that chain's own compile.

# %%
from torch._inductor.utils import run_and_get_code  # noqa: E402

_, startup_s = run.first_call(lambda: torch.compile(lambda t: t * 2.0 + 1.0)(torch.randn(8, device=device)))
run.metric("inductor_startup_s", startup_s, "s", label="Inductor's one-time start-up (first compile in a process)")

variants = {"eager": {n: (lambda n=n: chain(x, n)) for n in lengths}, "compiled": {}}
compile_s, kernels = {}, {}
for n in lengths:
    compiled = torch.compile(lambda t, n=n: chain(t, n), dynamic=False)
    (out, code), compile_s[n] = run.first_call(lambda: run_and_get_code(compiled, x))
    kernels[n] = sum(src.count("= async_compile.") for src in code)
    run.check_close(f"compiled.chain{n}", out, references[n], **TOLERANCE)
    run.check(f"compiled.chain{n}.one_kernel", kernels[n] == 1, f"{kernels[n]} generated kernel(s) for {n} ops")
    variants["compiled"][n] = lambda compiled=compiled: compiled(x)
for n in lengths:
    run.check_close(f"eager.chain{n}", chain(x, n), references[n], **TOLERANCE)

# %% [markdown]
# **CUDA graphs.** The eager chain is warmed up on a side stream, captured once into a graph with
# static input and output buffers, and replayed; a replay issues all N kernels with one call.
# `mode="reduce-overhead"` is torch.compile's way to the same thing, on top of fusion.

# %%
if run.device.is_gpu:
    variants["cuda graph (eager ops)"], variants["compiled + cuda graph"] = {}, {}
    for n in lengths:
        static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                chain(static_x, n)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = chain(static_x, n)
        graph.replay()
        run.check_close(f"cuda_graph.chain{n}", static_out, references[n], **TOLERANCE)
        variants["cuda graph (eager ops)"][n] = graph.replay

        reduce_overhead = torch.compile(lambda t, n=n: chain(t, n), mode="reduce-overhead", dynamic=False)
        for _ in range(3):  # the first calls record the graph; later ones replay it
            out = reduce_overhead(x)
        run.check_close(f"reduce_overhead.chain{n}", out, references[n], **TOLERANCE)
        variants["compiled + cuda graph"][n] = lambda f=reduce_overhead: f(x)
else:
    for variant in ("cuda graph (eager ops)", "compiled + cuda graph (mode='reduce-overhead')"):
        run.not_run(variant, "needs a CUDA GPU: CUDA graphs record and replay GPU kernel launches")

# %% [markdown]
# ## Measurement and the fit
#
# Each variant at each chain length, then a least-squares line through (N, time): the slope is
# the cost of each op added to the chain. For eager that is the per-op overhead; for a fused
# kernel it is only the extra arithmetic.

# %%
times = {v: {} for v in variants}
for variant, fns in variants.items():
    for n, fn in fns.items():
        times[variant][n] = run.time(fn, flush=False)  # back to back: a queued L2 flush would hide host overhead

rows = []
for variant in variants:
    ns = np.array(lengths, dtype=float)
    us = np.array([times[variant][n].median_s * 1e6 for n in lengths])
    slope, _ = np.polyfit(ns, us, 1)
    key = variant.split(" (")[0].replace(" + ", "_").replace(" ", "_")
    run.metric(f"{key}.per_op_us", slope, "us", label=f"{variant}: fitted extra time per op added to the chain",
               signed=True)  # a fitted slope: a chain whose ops cost nothing fits a little below zero
    run.metric(f"{key}.longest_chain_us", us[-1], "us", label=f"{variant}: chain of {lengths[-1]} ops, median")
    run.metric(f"{key}.chain1_us", us[0], "us", label=f"{variant}: a single op, median")
    run.metric(f"{key}.min_consecutive_ratio", float(min(us[1:] / us[:-1])), "x",
               label=f"{variant}: smallest ratio of a chain's time to the next shorter chain's (>= 1: monotonic; a longer "
                     "chain is never less work)")
    for n in lengths:
        t = times[variant][n]
        rows.append([variant, n, round(t.median_s * 1e6, 1), f"{t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f}",
                     round(t.median_s * 1e6 / n, 2), round(compile_s[n], 2) if variant == "compiled" else ""])
run.table("chains", f"Chains of tiny ops on {numel} float32 elements",
          ["variant", "ops in chain", "median (us)", "p10-p90 (us)", "us per op", "first call: compile (s)"], rows)

longest = lengths[-1]
eager_long, compiled_long = times["eager"][longest].median_s, times["compiled"][longest].median_s
run.metric("compiled.speedup_longest", eager_long / compiled_long, "x",
           label=f"compiled over eager, chain of {longest} ops")
run.metric("compiled.speedup_single_op", times["eager"][1].median_s / times["compiled"][1].median_s, "x",
           label="compiled over eager, a single op (below 1: compiling made it slower)")
run.metric("compiled.compile_s_longest", compile_s[longest], "s", label=f"compile time, chain of {longest} ops")
run.metric("compiled.compile_in_eager_calls", compile_s[longest] / eager_long, "calls",
           label=f"the {longest}-op chain's compile time, counted in eager calls of the same chain")

single = times["eager"][1].median_s / times["compiled"][1].median_s
run.series("chains", f"Compiled vs eager: {fmt_speedup_words(eager_long / compiled_long)} at {longest} ops, "
           f"{fmt_speedup_words(single)} at 1 op", "ops in the chain", "median time per call (us)",
           {v: (lengths, [times[v][n].median_s * 1e6 for n in lengths], [times[v][n] for n in lengths])
            for v in variants}, x_log=True, y_log=True)

run.save()
