# %% [markdown]
# # Quantization-aware training: fake quantization and the straight-through estimator
#
# When post-training quantization loses accuracy, the model can be fine-tuned *with the
# quantization in the loop*: every forward pass uses the rounded weights (quantize, then
# dequantize: "fake quantization"), so the loss sees exactly the error the deployed model will
# have, while the optimizer keeps updating the underlying float weights. Rounding has a zero
# gradient almost everywhere, so the backward pass pretends it is the identity: the
# **straight-through estimator** (STE), written here as `w + (round(w) - w).detach()`. Weights then
# drift to where their rounded values work together.
#
# Setting where PTQ really loses: 2-bit weights (codes -1, 0, 1 per output channel) and 4-bit
# per-tensor weights on the digits MLP. Each is fine-tuned for a few epochs with fake-quantized
# weights, and compared with PTQ of the same model and with a control that fine-tunes the same
# number of epochs *without* fake quantization and then quantizes (so the gain is not just
# "more training").
#
# QAT's cost is stated against the original training's, so both are timed in this run: the float
# model is trained here from scratch with the recipe the other T5 demos load from the model cache
# (same seed, epochs and optimizer), not loaded, since a cached model's time would be that of
# whichever run wrote it.

# %%
import copy

import numpy as np
import torch

from demos.harness.run import start
from demos.t5_compression._model import MLP, accuracy, digits, fit
from demos.t5_compression._quant import fake_quant_weight, run_quantized

run = start(
    "qat",
    title="Quantization-aware training recovers what post-training quantization lost",
    sizes={  # (seeds, QAT fine-tune epochs)
        "tiny": ([0, 1], 3),
        "small": ([0, 1, 2], 8),
        "full": ([0, 1, 2], 8),  # 3 seeds state the spread (min, mean, max)
    },
    cpu_threads=1,
)
seeds, qat_epochs = run.sizes
HIDDEN, EPOCHS, QAT_LR = 256, 30, 1e-3
x_tr, y_tr, x_te, y_te = digits()
settings = {"w2_per_channel": (2, True), "w4_per_tensor": (4, False)}

# %% [markdown]
# ## Correctness of the fake-quant step and its gradient
#
# Forward: the fake-quantized weight equals codes x scale exactly. Backward: the STE passes the
# upstream gradient through unchanged (the gradient of `sum(g * fq(w))` with respect to `w` is `g`).

# %%
w = torch.randn(16, 32, requires_grad=True)
g = torch.randn(16, 32)
fq = fake_quant_weight(w, 4, True)
scale = w.detach().abs().amax(1, keepdim=True) / 7
run.check_close("fake_quant.forward", fq, torch.round(w.detach() / scale).clamp(-7, 7) * scale, rtol=1e-6, atol=1e-7,
                reference_name="round(w / s) * s")
(fq * g).sum().backward()
run.check_close("fake_quant.ste_gradient", w.grad, g, rtol=0, atol=0, reference_name="the upstream gradient")
run.check("fake_quant.levels", len(torch.unique(fq[0].detach())) <= 15, f"row 0 uses {len(torch.unique(fq[0].detach()))} "
          "distinct values (<= 15 for 4 bits)")

# %% [markdown]
# ## PTQ vs QAT vs plain fine-tuning, over seeds

# %%
results = {(s, k): {} for s in seeds for k in settings}
# One throwaway epoch first, so that neither timed training pays the process's first-call costs (autograd,
# Adam's state, the allocator).
fit(MLP(HIDDEN), x_tr, y_tr, 1, 0)
base_runs = []  # the original training of each seed's float model, timed in this run
for seed in seeds:
    torch.manual_seed(seed)
    model = MLP(HIDDEN)
    base_runs.append(fit(model, x_tr, y_tr, EPOCHS, seed))  # the cache's recipe, trained() without its cache
    run.log(f"  seed {seed}: float model trained in {base_runs[-1]['train_s']:.2f} s ({base_runs[-1]['steps']} steps)")
    results_fp32 = accuracy(model, x_te, y_te)
    for key, (bits, per_channel) in settings.items():
        r = results[seed, key]
        r["fp32"] = results_fp32
        r["ptq"] = accuracy(lambda x: run_quantized(model, x, bits, per_channel), x_te, y_te)
        qat_model = copy.deepcopy(model)
        r["qat_info"] = fit(qat_model, x_tr, y_tr, qat_epochs, seed + 100, lr=QAT_LR,
                            weight_fn=lambda i, w, b=bits, pc=per_channel: fake_quant_weight(w, b, pc))
        r["qat"] = accuracy(lambda x: run_quantized(qat_model, x, bits, per_channel), x_te, y_te)
        control = copy.deepcopy(model)
        r["control_info"] = fit(control, x_tr, y_tr, qat_epochs, seed + 100, lr=QAT_LR)
        r["finetune_then_ptq"] = accuracy(lambda x: run_quantized(control, x, bits, per_channel), x_te, y_te)
        run.log(f"  seed {seed} {key}: fp32 {r['fp32']:.4f} PTQ {r['ptq']:.4f} QAT {r['qat']:.4f} "
                f"fine-tune then PTQ {r['finetune_then_ptq']:.4f} ({r['qat_info']['train_s']:.2f} s)")

rows = []
for key in settings:
    for variant in ("fp32", "ptq", "finetune_then_ptq", "qat"):
        values = [results[s, key][variant] for s in seeds]
        run.metric(f"{key}.{variant}.acc", float(np.mean(values)), "fraction",
                   label=f"{key}, {variant}: held-out accuracy, mean of {len(seeds)} seeds")
        run.metric(f"{key}.{variant}.acc_min", min(values), "fraction", label=f"{key}, {variant}: worst seed")
        run.metric(f"{key}.{variant}.acc_max", max(values), "fraction", label=f"{key}, {variant}: best seed")
        rows.append([key, variant, round(float(np.mean(values)), 4), round(min(values), 4), round(max(values), 4)])
    gains = [results[s, key]["qat"] - results[s, key]["ptq"] for s in seeds]
    run.metric(f"{key}.qat_gain_min", min(gains), "fraction", label=f"{key}: QAT minus PTQ accuracy, worst seed")
    run.metric(f"{key}.qat_lost_vs_fp32_max", max(results[s, key]["fp32"] - results[s, key]["qat"] for s in seeds),
               "fraction", label=f"{key}: fp32 minus QAT accuracy, worst seed")
    qat_s = [results[s, key]["qat_info"]["train_s"] for s in seeds]
    run.metric(f"{key}.qat_train_s", float(np.mean(qat_s)), "s", label=f"{key}: QAT fine-tune time ({qat_epochs} epochs)")
    run.metric(f"{key}.qat_steps", results[seeds[0], key]["qat_info"]["steps"], "steps", label=f"{key}: QAT optimizer steps")
run.table("qat", f"Held-out accuracy, {len(seeds)} seeds: PTQ, fine-tune then PTQ, QAT ({qat_epochs} epochs)",
          ["setting", "variant", "mean", "min", "max"], rows)
run.check("qat.recovers_w2", min(results[s, "w2_per_channel"]["qat"] - results[s, "w2_per_channel"]["ptq"] for s in seeds) > 0,
          "QAT beats PTQ at 2-bit per-channel weights on every seed")
# Steps and time, both from this run: QAT's cost is mostly its fewer steps; what each step adds (it fake-quantizes every
# weight matrix in the forward pass) is measured against the control, the same fine-tune (same start, seed, steps)
# without fake quantization, run right after it in the same loop. A training run is timed once, by fit's clock, not
# with run.time's repeats: it changes its model, its hundreds of steps already average the per-step noise, and
# repeating every fine-tune five or more times would multiply the demo's run time for one ratio. The ratios are of
# means over the seeds.
base_s, base_steps = float(np.mean([b["train_s"] for b in base_runs])), base_runs[0]["steps"]
qat_s, qat_steps = run.metrics["w2_per_channel.qat_train_s"]["value"], run.metrics["w2_per_channel.qat_steps"]["value"]
run.metric("base_train_s", base_s, "s",
           label=f"training the fp32 model from scratch ({EPOCHS} epochs), in this run, mean over seeds")
run.metric("base_steps", base_steps, "steps", label=f"optimizer steps of the original training ({EPOCHS} epochs)")
run.metric("qat_steps_over_base_steps", qat_steps / base_steps, "x", origin="computed",
           label=f"QAT optimizer steps ({qat_epochs} epochs) over the original training's ({EPOCHS} epochs)")
run.metric("qat_over_base_train", qat_s / base_s, "x",
           label="QAT fine-tune time over the original training time, both timed in this run (2-bit setting)")
control_s = float(np.mean([results[s, "w2_per_channel"]["control_info"]["train_s"] for s in seeds]))
run.metric("w2_per_channel.control_train_s", control_s, "s",
           label=f"w2_per_channel: the control fine-tune's time ({qat_epochs} epochs, no fake quantization)")
run.metric("qat_over_control_train", qat_s / control_s, "x",
           label="QAT fine-tune time over the same fine-tune without fake quantization, back to back in this run (2-bit)")
run.metric("qat_step_over_base_step", (qat_s / qat_steps) / (base_s / base_steps), "x",
           label="time per QAT step (fake-quantized forward) over time per step of the original training (2-bit)")
run.save()
