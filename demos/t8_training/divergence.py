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
#
# Two more signals ride along: the output logits' log-normalizer log Z (the logsumexp the cross-entropy
# subtracts; softmax ignores a shift of all logits, so nothing in the loss holds log Z in place, and its
# growth is what PaLM's z-loss penalizes), and the size of the AdamW update on the bad batch's step.
# Then two probes that need no model: what AdamW's beta2 and epsilon do to one parameter whose gradient
# jumps or is tiny, and what an FP8 scale taken from a history of past maxima (Transformer Engine's
# delayed scaling) does when a tensor's magnitude jumps up or drops.

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


def log_z_hook(model, out):
    """A forward hook on the final norm that appends the mean log Z of the output logits (h @ E^T, tied)."""
    def record(module, inputs, h):
        out.append(float(torch.logsumexp(h.detach().float() @ model.tok.weight.detach().float().T, -1).mean()))
    return model.ln_f.register_forward_hook(record)


def train(kind):
    torch.manual_seed(0)
    model = make_gpt(cfg, seed=0, device=dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR * (100 if kind == "high_lr" else 1))
    found, losses, norms, first_nonfinite, log_z, update_at_bad = [], [], [], None, [], None
    hooks = nonfinite_hooks(model, found) + [log_z_hook(model, log_z)]
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
        before = [p.detach().clone() for p in model.parameters()] if step == BAD else None
        opt.step()
        if before is not None:  # the size of the whole update this step made
            update_at_bad = math.sqrt(sum(float((p.detach() - b).float().pow(2).sum())
                                          for p, b in zip(model.parameters(), before)))
    for h in hooks:
        h.remove()
    return losses, norms, first_nonfinite, {"log_z": log_z, "update_at_bad": update_at_bad}


runs = {kind: train(kind) for kind in ("healthy", "high_lr", "bad_batch", "fp16_overflow")}

# %% [markdown]
# ## What the signals say

# %%
rows = []
for kind, (losses, norms, nonfinite, extra) in runs.items():
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
    run.metric(f"{kind}.max_log_z", max(x for x in extra["log_z"] if math.isfinite(x)), "nats",
               label="largest mean log Z (logsumexp of the output logits) over the run")
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
run.metric("log_vocab", math.log(cfg.vocab), "nats", origin="computed",
           label="ln V: log Z of logits that are all equal, where training starts")
# The bad batch's gradient is B*s times the healthy run's at that step (the runs are identical before it);
# AdamW divides each element by its running RMS, so the step it takes grows far less.
bad_total = math.sqrt(sum(v * v for v in bad[1][BAD].values()))
healthy_total = math.sqrt(sum(v * v for v in healthy[1][BAD].values()))
run.metric("bad_batch.grad_vs_healthy", bad_total / healthy_total, "x",
           label="gradient norm on the bad step, over the healthy run's on the same step")
run.metric("bad_batch.update_vs_healthy", bad[3]["update_at_bad"] / healthy[3]["update_at_bad"], "x",
           label="AdamW update norm on the bad step, over the healthy run's on the same step")
run.check("bad_batch_gradient_scaled", math.isclose(bad_total / healthy_total, B * cfg.seq, rel_tol=1e-3),
          f"gradient {bad_total / healthy_total:.1f}x the healthy one, the B*s = {B * cfg.seq} the summed loss gives")

# %% [markdown]
# ## AdamW's beta2 and epsilon, on one parameter
#
# AdamW moves each element by lr * m_hat / (sqrt(v_hat) + eps), with m and v running averages of the
# gradient and its square (time constants 1/(1-beta1) and 1/(1-beta2) steps). Two probes on a single
# float64 parameter (lr = 1, so a step's size is in units of the learning rate):
#
# - **a spike**: a quiet gradient (1e-3) for many steps, then one step 1000x larger, then quiet again.
#   On the spike v still remembers the quiet past, so the step reaches about (1-beta1)/sqrt(1-beta2)
#   learning rates; afterwards v remembers the spike, and the quiet gradient moves the parameter far less
#   than before, for about ln((1-beta2) r^2)/(1-beta2) steps (r = 1000, the jump's ratio);
# - **epsilon**: a constant gradient g moves the parameter by g/(g + eps) learning rates, so a gradient
#   whose scale falls towards eps (small per-element gradients of a large model) gets a smaller step.

# %%
def adam_spike(beta2, quiet=1e-3, spike=1.0, warm=6000, after=16000):
    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.AdamW([p], lr=1.0, betas=(0.9, beta2), eps=1e-8, weight_decay=0.0)
    sizes = []
    for t in range(warm + 1 + after):
        p.grad = torch.full_like(p, spike if t == warm else quiet)
        before = p.item()
        opt.step()
        sizes.append(abs(p.item() - before))
    steady = sizes[warm - 1]
    return steady, sizes[warm], sum(1 for x in sizes[warm + 1:] if x < 0.5 * steady)


def adam_constant(grad, eps, steps=3000):
    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.AdamW([p], lr=1.0, betas=(0.9, 0.95), eps=eps, weight_decay=0.0)
    for _ in range(steps):
        p.grad = torch.full_like(p, grad)
        before = p.item()
        opt.step()
    return abs(p.item() - before)


adam_rows = []
for beta2, tag in ((0.999, "b2_999"), (0.95, "b2_95")):
    steady, at_spike, slowed = adam_spike(beta2)
    bound = 0.1 / math.sqrt(1 - beta2)  # (1 - beta1) / sqrt(1 - beta2)
    run.check(f"adam_spike_{tag}_matches_bound", math.isclose(at_spike, bound, rel_tol=0.05),
              f"beta2 {beta2}: spike step {at_spike:.3f} lr, (1-beta1)/sqrt(1-beta2) = {bound:.3f}")
    run.metric(f"adam.{tag}.spike_step", at_spike, "lr", label=f"step on the 1000x gradient, beta2 {beta2}")
    run.metric(f"adam.{tag}.steady_step", steady, "lr", label=f"step on the quiet gradient before it, beta2 {beta2}")
    run.metric(f"adam.{tag}.slowed_steps", slowed, "steps",
               label=f"steps after the spike whose step is under half the steady one, beta2 {beta2}")
    adam_rows.append([beta2, steady, at_spike, slowed])
run.table("adam_spike", "One parameter, a quiet gradient then one 1000x spike: AdamW's step in learning rates",
          ["beta2", "steady step", "step on the spike", "steps slowed afterwards"], adam_rows)
eps_rows = []
for grad, eps, tag in ((1e-6, 1e-8, "g1e6_eps1e8"), (1e-8, 1e-8, "g1e8_eps1e8"), (1e-10, 1e-8, "g1e10_eps1e8"),
                       (1e-10, 1e-15, "g1e10_eps1e15")):
    step = adam_constant(grad, eps)
    run.check(f"adam_eps_{tag}", math.isclose(step, grad / (grad + eps), rel_tol=0.01),
              f"gradient {grad:g}, eps {eps:g}: step {step:.4g} lr, g/(g+eps) = {grad / (grad + eps):.4g}")
    run.metric(f"adam.eps.{tag}.step", step, "lr", label=f"steady step for a constant gradient {grad:g}, eps {eps:g}")
    eps_rows.append([grad, eps, step])
run.table("adam_eps", "A constant gradient's AdamW step (learning rates) against epsilon", ["gradient", "eps", "step"],
          eps_rows)

# %% [markdown]
# ## FP8 scales from an amax history
#
# An FP8 tensor is stored as x * scale, with scale = (largest FP8 value) / amax. *Current* scaling takes
# amax from the tensor itself (an extra reduction before the cast); *delayed* scaling (Transformer Engine's
# `DelayedScaling`: a history of 1024 past amaxes, their maximum by default) takes it from earlier steps.
# A 4096-element tensor, N(0, 1), is cast to E4M3 (largest value 448; values beyond it saturate, as
# Transformer Engine's casts do) after 16 steps of the same magnitude; then once at 16x the magnitude (a
# jump), and once at 1/10,000 of it (a drop) while the history still holds the old maxima.

# %%
E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)


def fp8_roundtrip(x, amax):
    scale = E4M3_MAX / amax
    y = x * scale
    saturated = float((y.abs() > E4M3_MAX).float().mean())
    back = y.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() / scale
    zeroed = float(((back == 0) & (x != 0)).float().mean())
    return saturated, zeroed, float((back - x).norm() / x.norm())


g8 = torch.Generator().manual_seed(0)
history = [float(torch.randn(4096, generator=g8).abs().max()) for _ in range(16)]
base = torch.randn(4096, generator=g8)
fp8_rows = []
for case, x, delayed_amax in (("jump", base * 16, max(history)), ("drop", base * 1e-4, max(history))):
    for how, amax in (("delayed", delayed_amax), ("current", float(x.abs().max()))):
        saturated, zeroed, err = fp8_roundtrip(x, amax)
        for name, value in (("saturated", saturated), ("zeroed", zeroed), ("rel_error", err)):
            run.metric(f"fp8.{case}.{how}.{name}", value, "fraction")
        fp8_rows.append([case, how, saturated, zeroed, err])
run.table("fp8_history", "E4M3 cast of a tensor after its magnitude jumps 16x or drops 10,000x: delayed (history max) "
          "against current scaling", ["case", "scale from", "saturated", "flushed to zero", "relative error"], fp8_rows)
run.check("fp8_current_scaling_never_saturates", all(row[2] == 0.0 for row in fp8_rows if row[1] == "current"),
          "a scale from the tensor's own amax puts its largest element at 448")
run.save()
