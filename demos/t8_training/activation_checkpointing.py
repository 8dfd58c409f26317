# %% [markdown]
# # Activation checkpointing: memory bought with recomputation
#
# The forward pass keeps, for every layer, the tensors its backward pass needs (the step_memory demo
# counts them). *Activation checkpointing* (recomputation) keeps only a layer's input and runs the
# layer's forward again inside the backward pass to rebuild the rest: activation memory falls from
# L layers' worth to about one layer plus L inputs, at the price of one extra forward of each
# checkpointed layer (about a third more compute: forward is ~2 and backward ~4 FLOPs per parameter
# per token, so recomputing the forward makes it ~8 instead of 6).
#
# Variants on the same GPT model and batch: no checkpointing; `torch.utils.checkpoint` (non-reentrant,
# `use_reentrant=False`, the variant PyTorch recommends) on every layer, every 2nd and every 4th layer;
# and *selective* checkpointing, where a policy (`create_selective_checkpoint_contexts`, PyTorch >= 2.4)
# keeps the matmul outputs and recomputes only the elementwise work (with a control policy that saves
# every op, to price the policy's machinery apart from the recompute). Each variant's gradients
# must equal the plain run's exactly (checkpointing replays dropout with the saved RNG state), then
# its peak memory during forward + backward and its step time are measured, and the layers' forward is
# profiled to see how much of it the matmul-saving policy leaves to recompute. Last, the compiler's own
# selective recomputation: `torch.compile`'s partitioner choosing what to save under a memory budget.

# %%
import functools

import torch

from demos.harness.run import start
from demos.t8_training._gpt import GPTConfig, batch, make_gpt
from demos.common.memory import peak_bytes

run = start("activation_checkpointing", title="Activation checkpointing: peak memory vs step time",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=32, width=48, heads=2, layers=4), "b": 2},
                   "small": {"cfg": GPTConfig(vocab=512, seq=96, width=128, heads=4, layers=8), "b": 4},
                   # 134 M parameters, 4 x 1024 tokens in fp32: a step is ~3.7 TFLOP of matmuls (compute-bound, so
                   # recomputation shows in the time) and the uncheckpointed activations ~7 GB. Eight layers, not
                   # more: the three Inductor compiles of the whole model below grow with the layer count.
                   "full": {"cfg": GPTConfig(vocab=32000, seq=1024, width=1024, heads=16, layers=8), "b": 4}},
            cpu_threads=1)
cfg, B = run.sizes["cfg"], run.sizes["b"]
dev = run.torch_device
MB = 2**20
model = make_gpt(cfg, seed=0, device=dev).train()
tokens, targets = batch(cfg, B, step=0, device=dev)

# %% [markdown]
# ## Selective checkpointing: a policy per op
#
# The policy sees every ATen op of a checkpointed layer: matmuls (`mm`, `addmm`, `bmm`) are saved,
# everything else (LayerNorm, softmax, GELU, dropout, copies) is recomputed in backward.

# %%
try:
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
except ImportError:  # PyTorch < 2.4
    create_selective_checkpoint_contexts = None

MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


def keep_matmuls(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in MATMULS else CheckpointPolicy.PREFER_RECOMPUTE


def save_all(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE


# A control, `save_all`: the same machinery with a policy that saves every op, so the backward recomputes
# nothing. Its time over no checkpointing is what the policy's machinery costs by itself (every op of the
# layer passes through a Python dispatch mode in the forward and again in the replay, which returns the
# cached outputs), an upper bound, since it also stores every op's output (its peak is above no
# checkpointing's). Dropout fills its mask in place (`bernoulli_`), so caching every op needs
# allow_cache_entry_mutation; the gradients are still compared bit for bit.
POLICIES = {}
if create_selective_checkpoint_contexts is not None:
    POLICIES = {"selective": functools.partial(create_selective_checkpoint_contexts, keep_matmuls),
                "save_all": functools.partial(create_selective_checkpoint_contexts, save_all,
                                              allow_cache_entry_mutation=True)}


def set_variant(name):
    """Configure the model's layers for one variant."""
    model.checkpoint_every = {"none": 0, "every_layer": 1, "every_2nd": 2, "every_4th": 4}.get(name, 1)
    model.checkpoint_context = POLICIES.get(name)


VARIANTS = ["none", "every_layer", "every_2nd", "every_4th"]
if create_selective_checkpoint_contexts is not None:
    VARIANTS += ["selective", "save_all"]
else:
    run.not_run("selective", "torch.utils.checkpoint.create_selective_checkpoint_contexts needs PyTorch >= 2.4")

# %% [markdown]
# ## Correctness: the same gradients, bit for bit

# %%
def step():
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # the same dropout masks in every variant
    model(tokens, targets).backward()


def grads():
    return torch.cat([p.grad.flatten() for p in model.parameters()])


set_variant("none")
step()
reference = grads().clone()
for name in VARIANTS[1:]:
    set_variant(name)
    step()
    got = grads()
    run.check(f"{name}.same_gradients", torch.equal(got, reference),
              f"gradients identical to no checkpointing: max |diff| {(got - reference).abs().max().item():.1e}")

# %% [markdown]
# ## Peak memory and step time

# %%
rows, results = [], {}
for name in VARIANTS:
    set_variant(name)
    model.zero_grad(set_to_none=True)
    step()  # warm: step() frees the gradients and backward makes them again, so the peak below includes them
    peak = peak_bytes(step, dev)
    t = run.time(step)
    results[name] = (peak, t.median_s)
    run.metric(f"{name}.peak_mb", peak / MB, "MiB", label="peak allocated during forward + backward")
    run.metric(f"{name}.step_ms", t.median_s * 1e3, "ms")
    run.log(f"  {name:12s} peak {peak / MB:8.2f} MiB  step {t.median_s * 1e3:8.2f} ms")
base_peak, base_time = results["none"]
for name, (peak, seconds) in results.items():
    run.metric(f"{name}.peak_vs_none", peak / base_peak, "x")
    run.metric(f"{name}.time_vs_none", seconds / base_time, "x")
    rows.append([name, peak / MB, peak / base_peak, seconds * 1e3, seconds / base_time])
run.table("tradeoff", f"{cfg.layers}-layer GPT, batch {B} x {cfg.seq} tokens, forward + backward",
          ["variant", "peak MiB", "peak vs none", "step ms", "time vs none"], rows)
every_peak, every_time = results["every_layer"]
run.series("tradeoff", f"Checkpointing every layer: {every_peak / base_peak:.0%} of the peak memory, "
           f"{every_time / base_time:.1f}x the step time", "step time (ms)", "peak memory (MiB)",
           {name: ([seconds * 1e3], [peak / MB]) for name, (peak, seconds) in results.items()})
# What must hold at any size: both save memory. Their order is a finding, claimed on the page against the
# record. A peak is the larger of two moments: the activations kept at the start of backward, and late in
# backward the first layer (checkpointed in both) rebuilt beside nearly all the gradients. With four narrow
# layers (the tiny test size, width 48) the second moment sets both peaks, and run-to-run variation in the
# profiler's count decides their order (unrecorded tiny runs: every layer 0.60-0.70 MiB, every 2nd 0.66-0.76).
every, second = results["every_layer"][0], results["every_2nd"][0]
run.check("every_layer.saves_memory", every < base_peak and second < base_peak,
          f"peak: every layer {every / MB:.2f} MiB, every 2nd {second / MB:.2f} MiB, none {base_peak / MB:.2f} MiB")

# %% [markdown]
# ## What the matmul-saving policy leaves to recompute
#
# Selective checkpointing saves the most time where the matmuls are most of a layer's forward. Here the
# layers' forward (training mode, so with dropout) is profiled alone and its op time split by the op
# that did the work: the matmuls, which the policy saves; drawing the dropout masks (`bernoulli_` on a
# CPU, the fused `native_dropout` kernel on a GPU); and the rest (LayerNorm, softmax, GELU, copies).
# Everything but the matmuls is recomputed in backward by the selective variant, as by the others.

# %%
from torch.profiler import ProfilerActivity, profile  # noqa: E402

DROPOUT_OPS = ("aten::bernoulli_", "aten::native_dropout")
x_in = torch.randn(B, cfg.seq, cfg.width, device=dev)
gpu = dev.type == "cuda"
self_time = "self_device_time_total" if gpu else "self_cpu_time_total"
with torch.no_grad():
    for layer in model.layers:
        layer(x_in)
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])) as prof:
        for _ in range(5):
            for layer in model.layers:
                layer(x_in)
        if gpu:
            torch.cuda.synchronize()
op_time = {a.key: getattr(a, self_time) for a in prof.key_averages() if a.key.startswith("aten::")}
total = sum(op_time.values())
matmul_share = sum(v for k, v in op_time.items() if k in ("aten::mm", "aten::addmm", "aten::bmm")) / total
dropout_share = sum(v for k, v in op_time.items() if k in DROPOUT_OPS) / total
run.metric("forward.matmul_share", matmul_share, "fraction",
           label="of the layers' forward op time: matmuls (what the selective policy saves)")
run.metric("forward.recomputed_share", 1 - matmul_share, "fraction",
           label="of the layers' forward op time: everything but the matmuls (what selective recomputes)")
run.metric("forward.dropout_share", dropout_share, "fraction",
           label="of the layers' forward op time: drawing the dropout masks")
run.check("forward.profiled", total > 0 and 0 < matmul_share < 1,
          f"forward op time split: matmuls {matmul_share:.0%}, dropout masks {dropout_share:.0%}")

# %% [markdown]
# ## The compiler's selective recomputation: an activation memory budget
#
# `torch.compile` traces forward and backward into one joint graph (AOTAutograd) and splits it in
# two; the min-cut partitioner decides which intermediates the forward saves and which the backward
# recomputes. By default it recomputes only cheap elementwise ops whose inputs are saved anyway.
# `torch._functorch.config.activation_memory_budget` (PyTorch >= 2.4) asks for less: 1.0 is the
# default, lower values let it recompute more (it picks the ops to recompute by estimated runtime
# per byte saved), 0 recomputes everything it can. Compared here, on the same model *without
# dropout* (compiled and eager code draw different random masks, so gradients are compared with
# an eager run to a tolerance), with eager no checkpointing, `torch.utils.checkpoint` on every
# layer and the matmul-saving policy above.
#
# Backend: Inductor on a GPU. On a CPU, `aot_eager_decomp_partition`: the same decompositions,
# partitioner and budget, run by eager kernels instead of Inductor's generated C++ (compiled again
# for every budget, too slow on a small CPU). So on a CPU the peak memory shows what the
# partitioner keeps; the step time is eager kernels' time, not Inductor's, and not the point.

# %%
import dataclasses  # noqa: E402

import torch._functorch.config as functorch_config  # noqa: E402

BUDGETS = (1.0, 0.5, 0.0)
BACKEND = "inductor" if dev.type == "cuda" else "aot_eager_decomp_partition"
plain = make_gpt(dataclasses.replace(cfg, dropout=0.0), seed=0, device=dev).train()


def plain_step(fn):
    def go():
        plain.zero_grad(set_to_none=True)
        fn(tokens, targets).backward()
    return go


def held_after_forward(fn):
    """Bytes a forward pass leaves allocated while its loss (and so everything saved for backward) is
    alive: what the partitioner or the checkpointing decided to keep. On a GPU the allocator's counter;
    on a CPU the running total of the profiler's memory events at the last one, over the total before."""
    if dev.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        loss = fn(tokens, targets)
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated() - before
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = fn(tokens, targets)  # noqa: F841 (kept alive until the profile closes)
    stack, events = list(prof.profiler.kineto_results.experimental_event_tree()), []
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.total_allocated))
        stack.extend(node.children)
    events.sort()
    return events[-1][2] - (events[0][2] - events[0][1]) if events else 0


compiled_rows, compiled = [], {}
eager_variants = {"eager none": (0, None), "eager every layer": (1, None)}  # (checkpoint_every, context_fn)
if create_selective_checkpoint_contexts is not None:
    eager_variants["eager keep matmuls"] = (1, functools.partial(create_selective_checkpoint_contexts, keep_matmuls))
for name, (every, context) in eager_variants.items():
    plain.checkpoint_every, plain.checkpoint_context = every, context
    fn = plain_step(plain)
    fn()
    compiled[name] = (peak_bytes(fn, dev), run.time(fn).median_s, None, held_after_forward(plain))
plain.checkpoint_every, plain.checkpoint_context = 0, None
plain_step(plain)()
plain_reference = torch.cat([p.grad.flatten() for p in plain.parameters()]).clone()

if not hasattr(functorch_config, "activation_memory_budget"):
    for budget in BUDGETS:
        run.not_run(f"compiled.budget_{budget:g}",
                    "torch._functorch.config.activation_memory_budget needs PyTorch >= 2.4")
else:
    for budget in BUDGETS:
        torch._dynamo.reset()
        compiled_model = torch.compile(plain, backend=BACKEND)
        fn = plain_step(compiled_model)
        with functorch_config.patch(activation_memory_budget=budget):  # read when the joint graph is partitioned
            _, compile_s = run.first_call(fn)
        got = torch.cat([p.grad.flatten() for p in plain.parameters()])
        run.check_close(f"compiled.budget_{budget:g}.gradients", got, plain_reference, rtol=1e-4, atol=1e-5,
                        reference_name="eager gradients of the same dropout-free model")
        compiled[f"compiled, budget {budget:g}"] = (peak_bytes(fn, dev), run.time(fn).median_s, compile_s,
                                                    held_after_forward(compiled_model))
    torch._dynamo.reset()
base = compiled["eager none"]
for name, (peak, seconds, compile_s, held) in compiled.items():
    key = (name.replace("compiled, budget ", "compiled.budget_").replace("eager ", "eager.").replace(" ", "_")
           .replace("budget_0.5", "budget_0p5"))
    run.metric(f"{key}.peak_mb", peak / MB, "MiB", label=f"{name}, no dropout: peak during forward + backward")
    run.metric(f"{key}.peak_vs_eager", peak / base[0], "x", label=f"{name}: peak over eager without checkpointing")
    run.metric(f"{key}.held_mb", held / MB, "MiB", label=f"{name}: allocated after forward (saved for backward)")
    run.metric(f"{key}.time_vs_eager", seconds / base[1], "x", label=f"{name}: step time over eager ({BACKEND})")
    if compile_s is not None:
        run.metric(f"{key}.compile_s", compile_s, "s", label=f"{name}: first call (trace, partition, compile, run)")
    compiled_rows.append([name, held / MB, peak / MB, peak / base[0], seconds * 1e3, seconds / base[1], compile_s])
run.table("compiler_budget", f"Dropout-free {cfg.layers}-layer GPT, batch {B} x {cfg.seq}: eager checkpointing vs "
          f"torch.compile's partitioner under a memory budget (backend {BACKEND})",
          ["variant", "held after forward MiB", "peak MiB", "peak vs eager", "step ms", "time vs eager",
           "first call s"], compiled_rows)
if "compiled, budget 0" in compiled:  # what must hold: a lower budget keeps less for backward
    tight, loose = compiled["compiled, budget 0"][3], compiled["compiled, budget 1"][3]
    run.check("compiled.budget_saves_less", tight < loose,
              f"held after forward: budget 0 {tight / MB:.3f} MiB < budget 1 {loose / MB:.3f} MiB")

# %% [markdown]
# What the budget buys depends on where the peak is. Budget 0 keeps almost nothing after the
# forward, but its backward then recomputes the forward of the whole model as one piece, so every
# activation exists again at once, next to the gradients: its peak need not fall, and can rise above
# eager's. `torch.utils.checkpoint` per layer bounds the rebuilt activations to one layer at a time.
# An intermediate budget trades in between; the table says which variant wins at this size.
run.save()
