# %% [markdown]
# # Debugging divergence: break training three ways, then find each break from the signals
#
# "The loss went to NaN at step 41 000 on 512 GPUs" is a search problem. Three cheap signals narrow
# it down, and they are worth logging on every step of every run:
#
# - **loss spikes**: the loss against a running median of the recent steps;
# - **per-layer gradient norms**: which layer's gradient blew up first (the global norm, which
#   clipping computes anyway, says *when*; the per-layer norms say *where*);
# - **NaN/Inf hooks**: a forward hook on every module that names the first module whose output is not
#   finite (`torch.autograd.detect_anomaly` does the same for backward, at a large slowdown).
#
# Three deliberately broken runs of the same small GPT, plus a healthy one that must raise no alarm:
# a learning rate 100x too high; one bad batch (its loss summed over tokens instead of averaged, as a
# reduction bug on one data path would do: a gradient B*s times too large, with an ordinary-looking
# loss value); and an FP16 overflow (one layer's weights scaled up 10^6 x at one step, as a bad update
# or a corrupted checkpoint would do, under FP16 autocast, whose largest number is 65504).

# %%
import math
import statistics

import torch

from demos.harness.run import start
from demos.t8_training._gpt import GPTConfig, batch, make_gpt

run = start("divergence", title="Debugging divergence: loss spikes, per-layer gradient norms, NaN/Inf hooks",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=16, width=32, heads=2, layers=2, dropout=0.0), "b": 4,
                            "steps": 16, "bad_at": 10},
                   "small": {"cfg": GPTConfig(vocab=256, seq=32, width=64, heads=2, layers=3, dropout=0.0), "b": 8,
                             "steps": 40, "bad_at": 25},
                   "full": {"cfg": GPTConfig(vocab=32000, seq=512, width=1024, heads=16, layers=8, dropout=0.0),
                            "b": 8, "steps": 100, "bad_at": 75}},
            cpu_threads=1)
cfg, B, STEPS, BAD = (run.sizes[k] for k in ("cfg", "b", "steps", "bad_at"))
dev = run.torch_device
LR = 3e-3

# %% [markdown]
# ## The signals

# %%
def layer_grad_norms(model):
    """Gradient norm of each transformer layer, and of the embedding and final norm."""
    groups = {f"layer{i}": layer.parameters() for i, layer in enumerate(model.layers)}
    groups["embedding"] = [model.tok.weight, model.pos]
    groups["ln_f"] = model.ln_f.parameters()
    return {k: math.sqrt(sum(float(p.grad.float().pow(2).sum()) for p in ps if p.grad is not None)) for k, ps in groups.items()}


def nonfinite_hooks(model, found):
    """Forward hooks that record (step, module name) for the first module whose output is not finite."""
    def hook(name):
        def check(module, inputs, output):
            if not found and torch.is_tensor(output) and not torch.isfinite(output).all():
                found.append(name)
        return check
    return [m.register_forward_hook(hook(name)) for name, m in model.named_modules() if name]


def spikes(losses, window=5, factor=1.5):
    """Steps whose loss exceeds `factor` x the median of the previous `window` finite losses, or is not finite."""
    out = []
    for i, loss in enumerate(losses):
        history = [x for x in losses[max(0, i - window):i] if math.isfinite(x)]
        if not math.isfinite(loss) or (len(history) == window and loss > factor * statistics.median(history)):
            out.append(i)
    return out


def train(kind):
    torch.manual_seed(0)
    model = make_gpt(cfg, seed=0, device=dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR * (100 if kind == "high_lr" else 1))
    found, losses, norms, first_nonfinite = [], [], [], None
    hooks = nonfinite_hooks(model, found)
    for step in range(STEPS):
        tokens, targets = batch(cfg, B, step=step, device=dev)
        if kind == "fp16_overflow" and step == BAD:
            with torch.no_grad():
                model.layers[1].fc1.weight.mul_(1e6)
        with torch.autocast(dev.type, dtype=torch.float16, enabled=(kind == "fp16_overflow")):
            loss = model(tokens, targets)
        if found and first_nonfinite is None:
            first_nonfinite = (step, found[0])
        opt.zero_grad(set_to_none=True)
        bug = targets.numel() if kind == "bad_batch" and step == BAD else 1  # sum instead of mean on this batch
        (loss * bug).backward()
        norms.append(layer_grad_norms(model))
        losses.append(loss.item())
        if not math.isfinite(loss.item()):
            break  # a real job would stop here, dump state, and page someone
        opt.step()
    for h in hooks:
        h.remove()
    return losses, norms, first_nonfinite


runs = {kind: train(kind) for kind in ("healthy", "high_lr", "bad_batch", "fp16_overflow")}

# %% [markdown]
# ## What the signals say

# %%
rows = []
for kind, (losses, norms, nonfinite) in runs.items():
    flagged = spikes(losses)
    total = [math.sqrt(sum(v * v for v in n.values())) for n in norms]
    first_norm_jump = next((i for i in range(5, len(total)) if total[i] > 5 * statistics.median(total[max(0, i - 5):i])), None)
    at_spike = {k: v for k, v in norms[flagged[0]].items() if math.isfinite(v)} if flagged else {}
    worst_layer = max(at_spike, key=at_spike.get) if at_spike else None
    rows.append([kind, len(losses), ", ".join(map(str, flagged[:5])) or None, first_norm_jump, worst_layer, nonfinite[1] if nonfinite else None,
                 nonfinite[0] if nonfinite else None])
    run.metric(f"{kind}.first_spike_step", flagged[0] if flagged else -1, "steps",
               label="steps trained before the first spike; -1: none")
    peak_norm = max(x for x in total if math.isfinite(x))
    run.metric(f"{kind}.max_grad_norm", peak_norm, "norm")
    # The run's strongest signal: a non-finite output, else a gradient-norm jump, else a loss spike
    signal = (f"non-finite output at step {nonfinite[0]}" if nonfinite else
              f"norm jumps at step {first_norm_jump}" if first_norm_jump is not None else
              f"loss spikes at step {flagged[0]}" if flagged else "no alarm")
    run.series(f"grad_norms_{kind}", f"Per-layer gradient norm, {kind}: {signal}, peak total norm {peak_norm:.3g}",
               "step", "gradient norm",
               {name: (list(range(len(norms))), [n[name] if math.isfinite(n[name]) else None for n in norms])
                for name in norms[0]}, y_log=True)
    run.log(f"  {kind:14s} spikes at {flagged[:5]}, grad-norm jump at {first_norm_jump}, worst layer {worst_layer}, "
            f"first non-finite {nonfinite}")
run.table("signals", "Which signal fires, and when", ["run", "steps run", "loss spikes at", "grad-norm jump at",
          "largest layer gradient at the first spike", "first non-finite module", "at step"], rows)
run.series("losses", "Loss of each run (a NaN ends the run)", "step", "loss (nats)",
           {kind: (list(range(len(r[0]))), [x if math.isfinite(x) else None for x in r[0]]) for kind, r in runs.items()})

healthy, high_lr, bad, overflow = (runs[k] for k in ("healthy", "high_lr", "bad_batch", "fp16_overflow"))
run.check("healthy_run_is_quiet", not spikes(healthy[0]) and healthy[2] is None and rows[0][3] is None,
          "no loss spike, no gradient-norm jump, no non-finite output")
bad_jump = rows[2][3]
run.check("bad_batch_found", bad_jump == BAD, f"the gradient norm jumps first at step {bad_jump}, the bad batch's step "
          f"{BAD}; its loss value looked ordinary")
run.check("fp16_overflow_located", overflow[2] is not None and overflow[2][0] == BAD and overflow[2][1].startswith("layers.1."),
          f"first non-finite output: {overflow[2]} (the scaled weights live in layers.1.fc1)")
high_spikes = spikes(high_lr[0])
run.check("high_lr_found", bool(high_spikes) or high_lr[0][-1] > healthy[0][-1] + 0.5,
          f"LR x100: loss spikes at {high_spikes[:5]}, final loss {high_lr[0][-1]:.2f} vs healthy {healthy[0][-1]:.2f}")
run.metric("high_lr.final_loss_minus_healthy", high_lr[0][-1] - healthy[0][-1], "nats")
run.save()
