# %% [markdown]
# # Mixed precision numerics: FP16 underflow, loss scaling, BF16, FP8 scales
#
# FP16 has 5 exponent bits: its smallest normal number is 2^-14 (6.1e-5) and its smallest subnormal
# 2^-24 (6e-8); round-to-nearest sends anything below half of that, 2^-25, to zero (and anything
# between 2^-25 and 2^-24 up to 2^-24). Gradients of a large model are often that small,
# so Micikevicius et al. ([Mixed Precision Training](https://arxiv.org/abs/1710.03740)) multiply the
# loss by a scale S before backward (every gradient is multiplied by S by the chain rule) and divide
# the gradients by S before the optimizer step. *Dynamic* loss scaling (PyTorch's `GradScaler`) starts
# with a large S, skips any step whose gradients contain inf/NaN and halves S, and doubles S after a
# run of good steps. BF16 keeps FP32's 8 exponent bits (smallest normal about 1e-38), so it needs no
# scaling; it pays with fewer mantissa bits (8 significant bits vs FP16's 11).
#
# The model is small, so its gradients are larger than a big model's. To put them where a large
# model's are, the loss is multiplied by 2^-8, as averaging over 256 gradient-accumulation
# micro-batches would do. AdamW's update does not depend on the gradient's scale, so FP32 and BF16
# train the same with or without that factor; FP16 does not.

# %%
import torch

from demos.harness.run import start
from demos.t8_training._gpt import GPTConfig, batch, make_gpt

run = start("mixed_precision", title="Mixed precision: FP16 underflow, GradScaler, BF16, FP8 scaling",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=16, width=32, heads=2, layers=2, dropout=0.0), "b": 8,
                            "steps": 12},
                   "small": {"cfg": GPTConfig(vocab=256, seq=32, width=64, heads=2, layers=2, dropout=0.0), "b": 8,
                             "steps": 50},
                   "full": {"cfg": GPTConfig(vocab=32000, seq=512, width=1024, heads=16, layers=8, dropout=0.0),
                            "b": 8, "steps": 100}},
            cpu_threads=1)
cfg, B, STEPS = run.sizes["cfg"], run.sizes["b"], run.sizes["steps"]
dev = run.torch_device
LOSS_FACTOR = 2.0**-8
FP16_TINY = 2.0**-24  # smallest FP16 subnormal

# %% [markdown]
# ## One step: which gradients survive?
#
# Same weights, same batch, one backward in each precision (autocast on an fp32 model: the weight
# gradients land in fp32, but they are computed by FP16 or BF16 matmuls). Counted: parameter-gradient
# elements that are exactly zero, and those zero in FP16 but not in FP32 (lost to underflow).

# %%
def grads_of(dtype, scale=1.0):
    model = make_gpt(cfg, seed=0, device=dev).train()
    tokens, targets = batch(cfg, B, step=0, device=dev)
    with torch.autocast(dev.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loss = model(tokens, targets) * LOSS_FACTOR
    (loss * scale).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()]) / scale


g32 = grads_of(None)
one_step = {"fp32": g32, "fp16": grads_of(torch.float16), "fp16_scaled": grads_of(torch.float16, scale=2.0**16),
            "bf16": grads_of(torch.bfloat16)}
rows = []
for name, g in one_step.items():
    zero = (g == 0).double().mean().item()
    lost = ((g == 0) & (g32 != 0)).double().mean().item()
    rel = ((g - g32).norm() / g32.norm()).item()
    run.metric(f"step0.{name}.zero_fraction", zero, "fraction", label="parameter-gradient elements exactly zero")
    run.metric(f"step0.{name}.lost_fraction", lost, "fraction", label="zero here, non-zero in FP32")
    run.metric(f"step0.{name}.rel_error", rel, "x", label="|g - g_fp32| / |g_fp32|")
    rows.append([name, zero, lost, rel])
run.metric("step0.fp32_below_fp16_subnormal", (g32.abs() < FP16_TINY).double().mean().item(), "fraction",
           label="FP32 gradient elements smaller than FP16's smallest subnormal")
run.table("one_step", "One step, parameter gradients (loss x 2^-8)", ["variant", "zero", "lost vs FP32",
          "relative error vs FP32"], rows)
run.check("fp16_loses_gradients", one_step["fp16"].eq(0).double().mean() > 10 * one_step["fp16_scaled"].eq(0).double().mean(),
          "FP16 without scaling zeroes at least 10x more gradient elements than FP16 with a 2^16 loss scale")
run.check("bf16_keeps_them", ((one_step["bf16"] == 0) & (g32 != 0)).sum().item() <= 1e-4 * g32.numel(),
          "BF16 loses at most 0.01% of the FP32 gradient elements to zero")

# %% [markdown]
# ## How small is too small: the loss factor swept
#
# The smaller the gradients, the more of them FP16 flushes to zero. One backward per factor; a loss
# scale of 2^16 on top of the factor (GradScaler's default start) brings them back.

# %%
factors = [0, 4, 8, 12, 16]
lost = {"fp16": [], "fp16 x 2^16 loss scale": [], "bf16": []}
for k in factors:
    LOSS_FACTOR = 2.0**-k
    ref = grads_of(None)
    for name, (dtype, scale) in {"fp16": (torch.float16, 1.0), "fp16 x 2^16 loss scale": (torch.float16, 2.0**16),
                                 "bf16": (torch.bfloat16, 1.0)}.items():
        g = grads_of(dtype, scale)
        lost[name].append(((g == 0) & (ref != 0)).double().mean().item())
lost_at_smallest = {name: f"{100 * v[-1]:.3g}%" for name, v in lost.items()}  # at the smallest factor, 2^-16
run.series("underflow", f"At loss x 2^-{factors[-1]}: FP16 loses {lost_at_smallest['fp16']}, with a 2^16 scale "
           f"{lost_at_smallest['fp16 x 2^16 loss scale']}, BF16 {lost_at_smallest['bf16']}", "loss factor (log2)",
           "fraction lost", {name: ([-k for k in factors], v) for name, v in lost.items()})
for name, key in (("fp16", "fp16"), ("fp16 x 2^16 loss scale", "fp16_scaled"), ("bf16", "bf16")):
    for k, value in zip(factors, lost[name]):
        run.metric(f"sweep.{key}.lost_at_2-{k}", value, "fraction", label=f"loss x 2^-{k}")
LOSS_FACTOR = 2.0**-8

# %% [markdown]
# ## Training curves on the same seed
#
# `GradScaler` starts here at 2^28 (its default is 2^16), above what these gradients allow, so that a
# short run shows it backing off:
# each step whose scaled gradients overflow is skipped (the weights do not move) and the scale halves.
# (It would double the scale again after `growth_interval` = 2000 clean steps, more than this run has.)
# Each model is then evaluated in FP32 on a held-out batch, which is less noisy than the training
# batches' losses.

# %%
def train(name, skip=()):
    torch.manual_seed(0)
    model = make_gpt(cfg, seed=0, device=dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    dtype = {"fp32": None, "fp32_same_skips": None, "fp16": torch.float16, "fp16_gradscaler": torch.float16, "bf16": torch.bfloat16}[name]
    scaler = torch.amp.GradScaler(dev.type, init_scale=2.0**28) if name == "fp16_gradscaler" else None
    losses, scales, skipped = [], [], []
    for step in range(STEPS):
        tokens, targets = batch(cfg, B, step=step, device=dev)
        with torch.autocast(dev.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = model(tokens, targets)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss * LOSS_FACTOR).backward()
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            scales.append(before)
            if scaler.get_scale() < before:
                skipped.append(step)
        else:
            (loss * LOSS_FACTOR).backward()
            if step not in skip:
                opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        held_out = model(*batch(cfg, B, step=10**6, device=dev)).item()
    return losses, scales, skipped, held_out


curves = {}
for name in ("fp32", "fp16", "fp16_gradscaler", "bf16"):
    curves[name] = train(name)
    run.metric(f"train.{name}.held_out_loss", curves[name][3], "nats", label=f"after {STEPS} steps, FP32 evaluation")
steps = list(range(STEPS))
run.series("loss", "Training loss on the same seed and batches (loss x 2^-8 in backward)", "step", "loss (nats)",
           {name: (steps, c[0]) for name, c in curves.items()})
losses, scales, skipped, _ = curves["fp16_gradscaler"]
# The control: FP32 skipping exactly the steps GradScaler skipped. Skipping early steps costs loss by itself.
curves["fp32_same_skips"] = train("fp32_same_skips", skip=set(skipped))
run.metric("train.fp32_same_skips.held_out_loss", curves["fp32_same_skips"][3], "nats",
           label="FP32 with GradScaler's skipped steps skipped too")
run.check("gradscaler_equals_fp32_with_same_skips", abs(curves["fp16_gradscaler"][3] - curves["fp32_same_skips"][3]) < 0.02,
          f"held-out loss {curves['fp16_gradscaler'][3]:.4f} (FP16 + GradScaler) vs {curves['fp32_same_skips'][3]:.4f} "
          "(FP32 skipping the same steps)")
run.series("scale", "GradScaler's loss scale per step", "step", "scale", {"scale": (steps, scales)}, y_log=True)
run.metric("gradscaler.skipped_steps", len(skipped), "steps", label=f"of {STEPS}, skipped for inf/NaN gradients")
run.metric("gradscaler.final_scale", scales[-1], "x")
run.check("gradscaler_skips_then_trains", 0 < len(skipped) < STEPS // 2,
          f"{len(skipped)} overflowing steps skipped (steps {skipped[:12]}), scale {scales[0]:.0f} -> {scales[-1]:.0f}")
for name in ("fp16", "fp16_gradscaler", "bf16"):
    run.metric(f"train.{name}.held_out_minus_fp32", curves[name][3] - curves["fp32"][3], "nats")

# %% [markdown]
# ## FP8: why it needs a scale per tensor
#
# FP8 comes in two formats (Micikevicius et al., [FP8 Formats for Deep Learning](https://arxiv.org/abs/2209.05433)):
# E4M3 (max 448, for weights and activations) and E5M2 (max 57344, more range, for gradients). With
# so few bits the *range* of one tensor has to be mapped onto the format: a per-tensor scale
# amax / max_representable (delayed, from a history of amax values, in Transformer Engine). Below,
# the FP32 gradient of the step above is cast to each format with and without that scale; the cast
# itself runs anywhere, so this part is measured on every device. FP8 *matmuls* need Hopper or newer
# (or Ada): that part runs only there.

# %%
for fmt in (torch.float8_e4m3fn, torch.float8_e5m2):
    name = str(fmt).removeprefix("torch.")
    top = torch.finfo(fmt).max
    for scaled in (False, True):
        s = top / g32.abs().max() if scaled else torch.tensor(1.0)
        back = (g32 * s).to(fmt).float() / s
        zero = ((back == 0) & (g32 != 0)).double().mean().item()
        rel = ((back - g32).norm() / g32.norm()).item()
        tag = f"fp8.{name}.{'scaled' if scaled else 'unscaled'}"
        run.metric(f"{tag}.lost_fraction", zero, "fraction", label="non-zero gradient elements cast to zero")
        run.metric(f"{tag}.rel_error", rel, "x")
run.check("fp8_needs_a_scale", run.metrics["fp8.float8_e4m3fn.unscaled.lost_fraction"]["value"] > 0.5 >
          run.metrics["fp8.float8_e4m3fn.scaled.lost_fraction"]["value"],
          "E4M3 without a scale flushes most gradient elements to zero; with the amax scale most survive")

if dev.type == "cuda" and torch.cuda.get_device_capability() >= (8, 9):
    n = 8192 if run.size == "full" else 4096
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    ref = a.bfloat16() @ b.bfloat16()
    sa, sb = a.abs().max() / 448.0, b.abs().max() / 448.0
    a8 = (a / sa).to(torch.float8_e4m3fn)
    b8 = (b / sb).to(torch.float8_e4m3fn).t().contiguous().t()  # the second operand column-major
    out = torch._scaled_mm(a8, b8, scale_a=sa.float(), scale_b=sb.float(), out_dtype=torch.bfloat16)
    run.metric("fp8.matmul.rel_error_vs_bf16", ((out.float() - ref.float()).norm() / ref.float().norm()).item(), "x")
    t8 = run.time(lambda: torch._scaled_mm(a8, b8, scale_a=sa.float(), scale_b=sb.float(), out_dtype=torch.bfloat16))
    a16, b16 = a.bfloat16(), b.bfloat16()
    t16 = run.time(lambda: a16 @ b16)
    run.metric("fp8.matmul.tflops", 2 * n**3 / t8.median_s / 1e12, "TFLOP/s")
    run.metric("bf16.matmul.tflops", 2 * n**3 / t16.median_s / 1e12, "TFLOP/s", ceiling="matmul_bf16")
    run.metric("fp8.matmul.speedup_over_bf16", t16.median_s / t8.median_s, "x")
else:
    run.not_run("fp8 matmul (torch._scaled_mm)", "FP8 tensor-core matmuls need an NVIDIA GPU of compute capability "
                "8.9 or newer (Ada, Hopper); this device has none")
run.save()
