# %% [markdown]
# # Dynamic shapes: recompiles over varying sequence lengths
#
# A compiled graph is valid only under its **guards**: the assumptions Dynamo checked while
# tracing, including every tensor's shape unless a dimension is marked dynamic. A request with a
# new sequence length fails the shape guard and triggers a **recompile**. Four ways to serve
# requests of varying length with the same transformer block:
#
# - **static** (`dynamic=False`): every new length compiles a new graph specialized to it;
# - **automatic** (the default): the first length compiles a static graph; the first *different*
#   length makes Dynamo recompile with that dimension symbolic, and later lengths reuse it;
# - **dynamic** (`torch._dynamo.mark_dynamic` on the sequence dimension): one symbolic graph
#   from the first call;
# - **bucketing**: pad every request up to a multiple of a bucket size and compile static graphs,
#   one per bucket. Attention here is causal, so padding at the end never changes the real
#   positions' outputs; the padded rows are sliced off.
#
# For each: the number of compiles, the time of the first pass over the lengths (where the
# compiles happen), and the steady-state time of a pass once everything is compiled.

# %%
import torch

from demos.common.block import make_block, reference_forward
from demos.harness.run import start

run = start(
    "dynamic_shapes",
    title="Recompiles over varying sequence lengths: static, automatic, dynamic, bucketing",
    sizes={  # (batch, width, heads, the sequence lengths requests arrive with, bucket size)
        "tiny": (2, 32, 2, [5, 11, 13], 8),
        "small": (4, 128, 4, [20, 44, 60], 32),
        "full": (16, 1024, 16, [300, 700, 1000], 512),
    },
    cpu_threads=1,
)
batch, width, heads, lengths, bucket = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}[dtype]
block = make_block(width, heads, device, dtype)
requests = {t: torch.randn(batch, t, width, device=device, dtype=dtype) for t in lengths}

# On a CPU, every variant runs on one thread. Inductor wraps its generated loops in OpenMP parallel
# regions, which wait for all their threads; on a CPU shared with other work, while another process held
# a core, each region stalled for a scheduler time slice and a compiled call measured tens of times
# slower than the same call a minute later. One thread keeps eager and compiled comparable and the
# numbers repeatable; the generated code is then a plain (vectorized) loop nest.

# %% [markdown]
# Every compile in this demo is a cold one: Inductor's caches are switched off, so that a graph
# compiled by one strategy is not served from the cache to the next. A counting backend wraps
# Inductor to record each compile and the input shape it was made for (a symbolic size shows as
# `s0`-style names). Inductor's one-time start-up in the process is paid first, on a throwaway.

# %%
import torch._inductor.config as inductor_config  # noqa: E402
from torch._inductor.compile_fx import compile_fx  # noqa: E402

inductor_config.force_disable_caches = True
_, startup_s = run.first_call(lambda: torch.compile(lambda t: t * 2.0 + 1.0)(torch.randn(8, device=device)))
run.metric("inductor_startup_s", startup_s, "s", label="Inductor's one-time start-up (first compile in a process)")

compiles: list[str] = []


def counting_inductor(gm, example_inputs):
    traced = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    shapes = [tuple(str(s) for s in t.shape) for t in traced if isinstance(t, torch.Tensor) and t.dim() == 3]
    compiles.append(" ".join("(" + ", ".join(s) + ")" for s in shapes))
    return compile_fx(gm, example_inputs)


def padded_to_bucket(fn):
    def call(x):
        t = x.shape[1]
        padded = torch.nn.functional.pad(x, (0, 0, 0, -(-t // bucket) * bucket - t))
        return fn(padded)[:, :t]

    return call


def marked_dynamic(fn):
    def call(x):
        torch._dynamo.mark_dynamic(x, 1)
        return fn(x)

    return call


STRATEGIES = {
    "eager": lambda: block,
    "static (dynamic=False)": lambda: torch.compile(block, backend=counting_inductor, dynamic=False),
    "automatic (default)": lambda: torch.compile(block, backend=counting_inductor),
    "dynamic (mark_dynamic)": lambda: marked_dynamic(torch.compile(block, backend=counting_inductor)),
    f"bucketing (pad to x{bucket}, static)": lambda: padded_to_bucket(
        torch.compile(block, backend=counting_inductor, dynamic=False)),
}
KEYS = {"eager": "eager", "static (dynamic=False)": "static", "automatic (default)": "automatic",
        "dynamic (mark_dynamic)": "dynamic", f"bucketing (pad to x{bucket}, static)": "bucketing"}

# %% [markdown]
# ## First pass (compiles happen here), correctness, then steady state
#
# The first pass sends each length once, in order, and times each call; every output is checked
# against the float64 reference. A second pass must compile nothing. Then a whole pass over the
# lengths is timed with the harness.

# %%
references = {t: reference_forward(block, x) for t, x in requests.items()}
rows, results = [], {}
with torch.no_grad():
    for name, make in STRATEGIES.items():
        key = KEYS[name]
        torch._dynamo.reset()
        compiles.clear()
        fn = make()
        inputs = {t: x.clone() for t, x in requests.items()}  # mark_dynamic tags a tensor: keep tags per strategy
        first_pass = {}
        for t, x in inputs.items():
            out, first_pass[t] = run.first_call(lambda: fn(x))
            run.check_close(f"{key}.seq{t}", out, references[t], **TOLERANCE)
        made = list(compiles)
        for x in inputs.values():  # second pass: every length has been seen
            fn(x)
        run.check(f"{key}.no_recompile_on_second_pass", len(compiles) == len(made),
                  f"{len(made)} compiles in the first pass, {len(compiles) - len(made)} more in the second")
        steady = run.time(lambda: [fn(x) for x in inputs.values()])
        results[key] = dict(compiles=len(made), first_pass_s=sum(first_pass.values()), steady_s=steady.median_s)
        run.metric(f"{key}.compiles", len(made), "compiles", label=f"{name}: compiles over {len(lengths)} lengths")
        run.metric(f"{key}.first_pass_s", sum(first_pass.values()), "s",
                   label=f"{name}: first pass over the lengths (compiles included)")
        run.metric(f"{key}.steady_pass_ms", steady.median_s * 1e3, "ms",
                   label=f"{name}: one pass over the lengths once compiled (median)")
        rows.append([name, len(made), "; ".join(made) if made else "-",
                     " / ".join(f"{first_pass[t]:.2f}" for t in lengths), round(steady.median_s * 1e3, 2),
                     f"{steady.p10_s * 1e3:.2f}-{steady.p90_s * 1e3:.2f}"])
        run.log(f"  {name:34s} {len(made)} compiles, first pass {sum(first_pass.values()):.1f} s, "
                f"steady pass {steady.median_s * 1e3:.2f} ms")

run.table("strategies", f"Block forward, batch {batch}, width {width}, sequence lengths {lengths} "
          f"({str(dtype).removeprefix('torch.')})",
          ["strategy", "compiles", "compiled for input shape(s)", f"first call per length {lengths} (s)",
           "steady pass (ms)", "p10-p90 (ms)"], rows)

# %% [markdown]
# ## What the numbers mean
#
# Compile cost against steady-state cost: how many passes a strategy needs before its compiles
# have paid off against eager, and the work bucketing wastes on padding.

# %%
padded_tokens = sum(-(-t // bucket) * bucket for t in lengths)
run.metric("bucketing.padding_overhead", padded_tokens / sum(lengths), "x",
           label="tokens computed with bucketing / real tokens", origin="computed")
for key in ("static", "automatic", "dynamic", "bucketing"):
    run.metric(f"{key}.steady_vs_eager", results["eager"]["steady_s"] / results[key]["steady_s"], "x",
               label=f"{key}: steady-state speedup over eager")
run.metric("static_over_dynamic.compiles", results["static"]["compiles"] / results["dynamic"]["compiles"], "x",
           label="compiles, static / dynamic")
run.metric("static_over_dynamic.first_pass", results["static"]["first_pass_s"] / results["dynamic"]["first_pass_s"], "x",
           label="first-pass time (compiles included), static / dynamic")

# %% [markdown]
# ## When the data sets the size: unbacked symbols
#
# So far every size came from an input's shape. Here the requests arrive as one padded batch with a lengths
# tensor, and the code trims the batch to its longest real sequence: `n = lens.max().item()`, a size that
# comes from a tensor's *value*. Tracing cannot know it, so a captured graph holds it as an **unbacked**
# symbol (`u0`), with no example value behind it. A second function keeps only the real tokens with a
# boolean mask (a `nonzero` underneath), whose row count is unbacked in the same way.
#
# By default Dynamo breaks the graph at `.item()` and at the mask, and the code after the break sees a
# plain Python int or a concrete size, which it specializes on and then recompiles for. The flags
# `capture_scalar_outputs` and `capture_dynamic_output_shape_ops` keep both in the graph. Code that
# then needs a fact about `u0` that no input decides (here, inside attention, whether the sequence is
# empty) cannot go on; `torch._check(n >= 1)` states the fact, records it as a run-time assertion, and
# tracing goes on. The graphs below go to a backend that records them and runs them as they are (no
# Inductor), so the counts are Dynamo's; then Inductor compiles the checked version once, and
# `torch.export` is tried with and without the check.

# %%
padded = torch.randn(batch, max(lengths), width, device=device, dtype=dtype)
lens = {t: t - torch.arange(batch, device=device) % 2 for t in lengths}  # the longest row of request t has t tokens
masks = {t: torch.arange(max(lengths), device=device) < lens[t][:, None] for t in lengths}


def trim_and_run(x, lens):
    n = lens.max().item()  # the longest real sequence: a size read from the data
    return block(x[:, :n])


def trim_and_run_checked(x, lens):
    n = lens.max().item()
    torch._check(n >= 1)  # a fact the tracer cannot prove: no batch is empty (checked at run time)
    return block(x[:, :n])


def real_tokens_mlp(x, mask):
    tokens = x.reshape(-1, x.shape[-1])[mask.reshape(-1)]  # only the real tokens: (u0, width)
    return tokens + block.mlp(tokens)


captured: list[str] = []


def recording(gm, example_inputs):
    """Record a graph Dynamo hands over (its non-parameter inputs and unbacked symbols); run it as it is."""
    shown, unbacked = [], set()
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if node.op == "placeholder" and not isinstance(value, torch.nn.Parameter):
            shown.append(str(tuple(value.shape)) if isinstance(value, torch.Tensor) else str(value))
        if isinstance(value, torch.SymInt) and str(value).startswith("u"):
            unbacked.add(str(value))
    captured.append(" ".join(shown) + (f" [unbacked {', '.join(sorted(unbacked))}]" if unbacked else ""))
    return gm.forward


CASES = {  # key: (function, its inputs per length, Dynamo config, what the table says)
    "item_default": (trim_and_run, lens, {}, "`.item()` as a size, default"),
    "item_captured": (trim_and_run, lens, {"capture_scalar_outputs": True}, "`.item()`, capture_scalar_outputs"),
    "item_checked": (trim_and_run_checked, lens, {"capture_scalar_outputs": True},
                     "`.item()`, capture_scalar_outputs + torch._check(n >= 1)"),
    "mask_default": (real_tokens_mlp, masks, {}, "boolean mask, default"),
    "mask_captured": (real_tokens_mlp, masks, {"capture_dynamic_output_shape_ops": True},
                      "boolean mask, capture_dynamic_output_shape_ops"),
}
dd_rows = []
with torch.no_grad():
    for key, (fn, second, config, what) in CASES.items():
        torch._dynamo.reset()
        captured.clear()
        with torch._dynamo.config.patch(**config):
            compiled = torch.compile(fn, backend=recording)
            for t in lengths:
                run.check_close(f"data_dependent.{key}.seq{t}", compiled(padded, second[t]), fn(padded, second[t]),
                                rtol=1e-6, atol=1e-6, reference_name="the same function, eager")
        run.metric(f"data_dependent.{key}.compiles", len(captured), "compiles",
                   label=f"{what}: Dynamo graphs compiled over {len(lengths)} lengths")
        dd_rows.append([what, len(captured), "; ".join(captured)])
run.table("data_dependent", f"Sizes read from data, lengths {lengths} in one padded batch: Dynamo's graphs "
          "(recorded, not compiled by Inductor)", ["function and setting", "compiles", "graph inputs per compile"],
          dd_rows)

torch._dynamo.reset()
compiles.clear()
with torch.no_grad(), torch._dynamo.config.patch(capture_scalar_outputs=True):
    compiled = torch.compile(trim_and_run_checked, backend=counting_inductor)
    for t in lengths:
        run.check_close(f"data_dependent.inductor.seq{t}", compiled(padded, lens[t]),
                        reference_forward(block, padded[:, :t]), **TOLERANCE)
run.check("data_dependent.inductor.one_compile", len(compiles) == 1,
          f"Inductor compiled the checked version {len(compiles)} time(s) for {len(lengths)} lengths: {compiles}")

# %% [markdown]
# `torch.export` has no graph break to fall back on: without the check it raises, naming the expression
# it could not decide; with it, the exported program carries the assertion, and a batch that breaks it
# fails at run time instead of computing something else.

# %%
class Wrapped(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn, self.block = fn, block  # the block registered, so its weights export as parameters

    def forward(self, x, second):
        return self.fn(x, second)


first = lengths[0]
with torch.no_grad():
    try:
        torch.export.export(Wrapped(trim_and_run), (padded, lens[first]))
        refused = "no error"
    except Exception as err:  # GuardOnDataDependentSymNode, raised from inside the traced code
        refused = f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"
    run.check("export.unchecked_refused", "data-dependent" in refused, refused[:240])
    exported = torch.export.export(Wrapped(trim_and_run_checked), (padded, lens[first]))
    item = next(n for n in exported.graph.nodes if n.target == torch.ops.aten.item.default)
    run.check("export.unbacked_symbol", str(item.meta["val"]).startswith("u"), f".item() traced as {item.meta['val']}")
    asserts = [n for n in exported.graph.nodes if n.target == torch.ops.aten._assert_scalar.default]
    run.metric("data_dependent.export.runtime_asserts", len(asserts), "nodes",
               label="run-time assertions in the exported program (torch._check and the ops' own)")
    for t in lengths:
        run.check_close(f"export.checked.seq{t}", exported.module()(padded, lens[t]),
                        reference_forward(block, padded[:, :t]), **TOLERANCE)
    try:
        exported.module()(padded, torch.zeros_like(lens[first]))
        violated = "no error"
    except Exception as err:  # the torch._check, now a run-time assertion
        violated = f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"
    run.check("export.assertion_fires", "Runtime assertion failed" in violated, f"an empty batch: {violated[:200]}")
    masked = torch.export.export(Wrapped(real_tokens_mlp), (padded, masks[first]))
    last = masks[lengths[-1]]  # exported with the first length's mask, run with the last one's
    run.check_close("export.mask", masked.module()(padded, last), real_tokens_mlp(padded, last), rtol=1e-6, atol=1e-6,
                    reference_name="the same function, eager (no torch._check needed)")
code = exported.graph_module.code.strip().splitlines()
run.artifact("data_dependent_export", f"torch.export without torch._check:\n  {refused[:400]}\n\n"
             "with torch._check(n >= 1), the exported graph's first lines:\n" + "\n".join(line[:160] for line in code[:10]) +
             f"\n... ({len(code) - 10} more lines)\n\nan empty batch at run time:\n  {violated[:300]}")

run.save()
