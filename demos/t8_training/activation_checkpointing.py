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
# keeps the matmul outputs and recomputes only the cheap elementwise work. Each variant's gradients
# must equal the plain run's exactly (checkpointing replays dropout with the saved RNG state), then
# its peak memory during forward + backward and its step time are measured.

# %%
import functools

import torch

from demos.harness.run import start
from demos.t8_training._gpt import GPTConfig, batch, make_gpt
from demos.common.memory import peak_bytes

run = start("activation_checkpointing", title="Activation checkpointing: peak memory vs step time",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=32, width=48, heads=2, layers=4), "b": 2},
                   "small": {"cfg": GPTConfig(vocab=512, seq=96, width=128, heads=4, layers=8), "b": 4},
                   "full": {"cfg": GPTConfig(vocab=32000, seq=1024, width=1024, heads=16, layers=16), "b": 8}},
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


def set_variant(name):
    """Configure the model's layers for one variant."""
    model.checkpoint_every = {"none": 0, "every_layer": 1, "every_2nd": 2, "every_4th": 4}.get(name, 1)
    model.checkpoint_context = (functools.partial(create_selective_checkpoint_contexts, keep_matmuls)
                                if name == "selective" else None)


VARIANTS = ["none", "every_layer", "every_2nd", "every_4th"]
if create_selective_checkpoint_contexts is not None:
    VARIANTS.append("selective")
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
    step()  # gradients allocated once, so the peak below is activations + backward work, not gradients
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
run.series("tradeoff", "Peak memory vs step time", "step time (ms)", "peak memory (MiB)",
           {name: ([seconds * 1e3], [peak / MB]) for name, (peak, seconds) in results.items()})
# With few layers (the tiny test size has two) checkpointing every layer and every 2nd layer keep almost
# the same activations, and the peak is set by other buffers: the order between them is then within a
# few percent either way. What must hold at any size: both save memory, and every layer saves no less.
every, second = results["every_layer"][0], results["every_2nd"][0]
run.check("every_layer.saves_memory", every < base_peak and second < base_peak and every <= 1.05 * second,
          f"peak: every layer {every / MB:.2f} MiB, every 2nd {second / MB:.2f} MiB, none {base_peak / MB:.2f} MiB")
run.save()
