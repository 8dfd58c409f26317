# %% [markdown]
# # GPTQ and AWQ against round-to-nearest: 4- and 3-bit weights of one linear layer
#
# Weight-only quantization stores each weight as a few-bit integer code with a scale and a zero point
# shared by a *group* of 128 consecutive input weights of one output row. Round-to-nearest (RTN) rounds
# every weight to its group's grid independently. It minimises the error of each weight, which is not what
# matters: the layer's *output* `X W^T` on real inputs is. Two post-training methods use a small calibration
# set of inputs to do better:
#
# - **AWQ** (Lin et al., 2023): input channels that carry large activations matter more. Multiply weight
#   column k by `s_k = mean|x_k|^alpha` before rounding (and divide the activation by it, folded into the
#   previous op), so the salient columns get a finer relative grid; `alpha` is chosen by a grid search
#   on the calibration output error.
# - **GPTQ** (Frantar et al., 2022): quantize one column at a time and push each column's rounding error
#   onto the columns not yet quantized, weighted by the inverse Hessian of the layer's squared output error,
#   `H = 2 X^T X`. A Cholesky form keeps it stable and lazy batched updates make it fast.
#
# The calibration inputs have the structure reported for LLM activations (LLM.int8(), SmoothQuant, AWQ):
# correlated channels whose magnitudes differ, and a few outlier channels far larger than the rest. Every
# method uses the same quantizer: asymmetric (min-max, a zero point) per group of 128, as GPTQ's and AWQ's
# reference code do. Errors are measured on held-out tokens, never on the calibration set. CPU only: the
# lesson is numerical; a GPU changes the quantization time, not the errors.

# %%
import math

import torch

from demos.harness.run import start

run = start(
    "gptq_awq",
    title="GPTQ and AWQ vs round-to-nearest: 4- and 3-bit weights of a linear layer with outlier channels",
    sizes={  # layer (d_out x d_in), calibration and held-out tokens, calibration sizes swept for GPTQ
        "tiny": {"d_in": 256, "d_out": 128, "calib": 1024, "eval": 1024, "sweep": [64, 256, 1024]},
        "small": {"d_in": 1024, "d_out": 1024, "calib": 4096, "eval": 4096, "sweep": [128, 512, 1024, 2048, 4096]},
        "full": {"d_in": 4096, "d_out": 4096, "calib": 16384, "eval": 8192, "sweep": [512, 2048, 4096, 8192, 16384]},
    },
    cpu_threads=1,
)
D_IN, D_OUT, N_CAL, N_EVAL = (run.sizes[k] for k in ("d_in", "d_out", "calib", "eval"))
GROUP, BLOCK, DAMP = 128, 128, 0.01  # group size, GPTQ's lazy-batch block, GPTQ's damping (share of mean diag H)
ALPHAS = [i / 20 for i in range(20)]  # AWQ's grid: 0, 0.05, ..., 0.95
dev, f64 = run.torch_device, torch.float64
gen = torch.Generator().manual_seed(run.options.seed)

# %% [markdown]
# ## The layer and its inputs
#
# Tokens are drawn from a low-rank correlated source plus noise; each input channel gets its own magnitude
# (log-normal), and 1% of channels are outliers, 20-50 times larger. Weights are Gaussian with a per-row
# scale. Calibration and held-out tokens are separate draws from the same distribution.

# %%
RANK = D_IN // 8
mixing = torch.randn(RANK, D_IN, generator=gen, dtype=f64) / math.sqrt(RANK)
channel_scale = torch.exp(0.5 * torch.randn(D_IN, generator=gen, dtype=f64))
outliers = torch.randperm(D_IN, generator=gen)[: max(2, D_IN // 100)]
channel_scale[outliers] *= 20 + 30 * torch.rand(len(outliers), generator=gen, dtype=f64)


def tokens(n):
    latent = torch.randn(n, RANK, generator=gen, dtype=f64)
    return ((latent @ mixing + 0.5 * torch.randn(n, D_IN, generator=gen, dtype=f64)) * channel_scale).to(dev)


W = (torch.randn(D_OUT, D_IN, generator=gen, dtype=f64) / math.sqrt(D_IN)
     * torch.exp(0.2 * torch.randn(D_OUT, 1, generator=gen, dtype=f64))).to(dev)
X_cal, X_eval = tokens(N_CAL), tokens(N_EVAL)
Y_eval = X_eval @ W.T  # the reference: the float64 layer on held-out tokens


def rel(a, b):
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def out_err(W_hat, X=X_eval):
    return rel(X @ W_hat.T, X @ W.T)


# %% [markdown]
# ## The quantizer: asymmetric, one scale and zero point per group of 128 input weights of a row
#
# `scale = (max - min) / (2^b - 1)`, `zero = round(-min / scale)`, `code = clamp(round(w / scale) + zero)`,
# `w_hat = (code - zero) * scale`. Stored: a b-bit code per weight, and per group an fp16 scale and a b-bit
# zero point, as GPTQ's and AWQ's packed formats store them.

# %%
def group_params(w, bits):
    """Scale and zero point of each row of w (rows x columns of one group): shapes (rows, 1)."""
    lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    scale = (hi - lo).clamp(min=1e-12) / (2 ** bits - 1)
    return scale, torch.round(-lo / scale).clamp(0, 2 ** bits - 1)


def to_grid(w, scale, zero, bits):
    return (torch.round(w / scale) + zero).clamp(0, 2 ** bits - 1).sub(zero).mul(scale)


def rtn(w, bits):
    """Round-to-nearest per group; also returns each group's (scale, zero) for the grid check."""
    out, params = torch.empty_like(w), []
    for g in range(0, w.shape[1], GROUP):
        scale, zero = group_params(w[:, g:g + GROUP], bits)
        out[:, g:g + GROUP] = to_grid(w[:, g:g + GROUP], scale, zero, bits)
        params.append((scale, zero))
    return out, params


# %% [markdown]
# ## AWQ: scale salient input channels up before rounding
#
# `s = mean|x|^alpha` over calibration tokens, normalised as in the reference code; quantize `W * s` and
# divide by `s` again (in a deployment the division is folded into the previous op, and the kernel sees
# `x / s` and the codes of `W * s`). `alpha` minimises the calibration output error. At `alpha = 0` every
# `s` is 1: plain RTN. The reference implementation also searches a clipping range per group; that
# second step is left out here, so this is AWQ's scale search alone.

# %%
act_mean = X_cal.abs().mean(0)


def awq_at(alpha, bits, quantize=None):
    s = act_mean ** alpha
    s = s / (s.max() * s.min()).sqrt()
    q, params = rtn(W * s, bits) if quantize is None else quantize(W * s, bits, s)
    return q / s, q, params


def awq(bits, quantize=None):
    errors = [out_err(awq_at(a, bits, quantize)[0], X_cal) for a in ALPHAS]  # chosen on calibration tokens
    best = ALPHAS[min(range(len(ALPHAS)), key=errors.__getitem__)]
    return (*awq_at(best, bits, quantize), best, errors)


# %% [markdown]
# ## GPTQ: column by column, with the error fed forward through the inverse Hessian
#
# For the layer's squared output error `||X W^T - X W_hat^T||^2`, each output row is an independent
# least-squares problem with the same Hessian `H = 2 X^T X` (plus 1% of its mean diagonal as damping).
# When column q is rounded to q(w_q), the optimal update of the columns not yet quantized is
# `-e * [H^-1]_{q, q:}` with `e = (w_q - q(w_q)) / [H^-1]_qq` (the Optimal Brain Surgeon update, with H^-1
# restricted to those columns). Row q of the upper Cholesky factor of `H^-1` is, up to a constant factor, row q of that restricted
# inverse, so one factorisation serves every step. Lazy batching updates only the current block of 128 columns
# after each column, and applies the block's accumulated errors to every later column in one matmul: the same
# arithmetic, far fewer passes over memory. A group's scale and zero point are set when the group's first
# column is reached, from the weights as updated so far.

# %%
def gptq(w, bits, X, block=BLOCK, scale_in=None, act_order=False):
    """GPTQ of w (d_out x d_in) on calibration inputs X; bits=None skips rounding. Returns (w_hat, params).
    act_order: quantize the columns with the largest Hessian diagonal first, with each group's grid fixed
    from the original weights beforehand ("static groups"), so the groups stay contiguous in memory."""
    Xs = X if scale_in is None else X / scale_in  # AWQ + GPTQ: the scaled layer sees x / s
    H = 2 * Xs.T @ Xs
    H += DAMP * H.diagonal().mean() * torch.eye(len(H), dtype=H.dtype, device=H.device)
    order = torch.argsort(H.diagonal(), descending=True) if act_order else torch.arange(len(H), device=H.device)
    static = [group_params(w[:, g:g + GROUP], bits) for g in range(0, w.shape[1], GROUP)] if act_order else None
    H, w = H[order][:, order], w[:, order].clone()
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    q, params = torch.zeros_like(w), []
    for b0 in range(0, w.shape[1], block):
        b1 = min(b0 + block, w.shape[1])
        wb, err = w[:, b0:b1].clone(), torch.zeros(w.shape[0], b1 - b0, dtype=w.dtype, device=w.device)
        for i in range(b1 - b0):
            col = b0 + i
            if bits is not None and not act_order and col % GROUP == 0:  # a new group: grid from updated weights
                params.append(group_params(torch.cat([wb[:, i:], w[:, b1:]], 1)[:, :GROUP], bits))
            grid = static[int(order[col]) // GROUP] if act_order else params[-1] if bits is not None else None
            qc = wb[:, i] if bits is None else to_grid(wb[:, i:i + 1], *grid, bits)[:, 0]
            q[:, col] = qc
            err[:, i] = (wb[:, i] - qc) / Hinv[col, col]
            wb[:, i:] -= err[:, i:i + 1] * Hinv[col, col:b1]  # inside the block: one column at a time
        w[:, b1:] -= err @ Hinv[b0:b1, b1:]  # the block's error to every later column: one matmul
    return q[:, torch.argsort(order)], static or params


def gptq_scaled(w_scaled, bits, s):
    return gptq(w_scaled, bits, X_cal, scale_in=s)


# %% [markdown]
# ## Quantize at 4 and 3 bits, and check every variant

# %%
def check_on_grid(name, w_hat, params, bits):
    """Every weight is (code - zero) * scale with an integer code in [0, 2^b - 1] of its group's grid."""
    worst, in_range = 0.0, True
    for g, (scale, zero) in enumerate(params):
        codes = w_hat[:, g * GROUP:(g + 1) * GROUP] / scale + zero
        worst = max(worst, float((codes - codes.round()).abs().max()))
        in_range &= bool(((codes.round() >= 0) & (codes.round() <= 2 ** bits - 1)).all())
    run.check(f"{name}.on_grid", worst < 1e-6 and in_range and len(params) == D_IN // GROUP,
              f"{len(params)} groups; largest distance of a code from an integer {worst:.1e}; "
              f"codes in range: {in_range}")


results, awq_curves = {}, {}
for bits in (4, 3):
    w_rtn, p_rtn = rtn(W, bits)
    check_on_grid(f"w{bits}.rtn", w_rtn, p_rtn, bits)
    w_awq, q_awq, p_awq, alpha, awq_curves[bits] = awq(bits)
    check_on_grid(f"w{bits}.awq", q_awq, p_awq, bits)  # the stored codes are those of W * s
    run.check(f"w{bits}.awq_alpha0_is_rtn", torch.equal(awq_at(0.0, bits)[0], w_rtn),
              "AWQ with alpha = 0 (every s = 1) is bit-identical to RTN")
    (w_gptq, p_gptq), gptq_s = run.first_call(lambda: gptq(W, bits, X_cal))
    check_on_grid(f"w{bits}.gptq", w_gptq, p_gptq, bits)
    w_act, p_act = gptq(W, bits, X_cal, act_order=True)
    check_on_grid(f"w{bits}.gptq_act", w_act, p_act, bits)
    w_both, q_both, p_both, alpha_both, _ = awq(bits, quantize=gptq_scaled)
    check_on_grid(f"w{bits}.awq_gptq", q_both, p_both, bits)
    results[bits] = {"rtn": w_rtn, "awq": w_awq, "gptq": w_gptq, "gptq_act": w_act, "awq_gptq": w_both}
    run.metric(f"w{bits}.awq.alpha", alpha, "value", label=f"{bits}-bit AWQ: alpha chosen by the grid search")
    run.metric(f"w{bits}.awq_gptq.alpha", alpha_both, "value", label=f"{bits}-bit AWQ + GPTQ: alpha chosen")
    run.metric(f"w{bits}.gptq.quantize_s", gptq_s, "s",
               label=f"{bits}-bit GPTQ: time to quantize the {D_OUT}x{D_IN} layer (one run, float64, one thread)")

# Without rounding GPTQ must return W itself; lazy batching must equal the column-at-a-time update.
run.check_close("gptq.no_rounding_is_identity", gptq(W, None, X_cal)[0], W, rtol=0, atol=1e-12,
                reference_name="W")
run.check_close("gptq.lazy_batch_equals_unbatched", gptq(W, 3, X_cal, block=1)[0], results[3]["gptq"],
                rtol=0, atol=1e-9, reference_name="GPTQ with 128-column lazy blocks")

# %% [markdown]
# ## Errors on held-out tokens, and what the layer's output would do as a classifier head
#
# Output error is the relative Frobenius error of `X W_hat^T` against the float64 layer; weight error is
# `||W_hat - W|| / ||W||`. If the layer were an output head, the argmax over its outputs would be the
# predicted token: the share of held-out tokens whose argmax changes ("flips") is the cheapest
# agreement metric, and the KL divergence between the softmax of the reference and quantized outputs
# (reference logits rescaled to a standard deviation of 3, a typical LLM logit spread; an assumption) catches
# changes that do not flip the top token.

# %%
LABELS = {"rtn": "round-to-nearest", "awq": "AWQ (scale search)", "gptq": "GPTQ", "gptq_act": "GPTQ, act-order",
          "awq_gptq": "AWQ, then GPTQ"}
temp = float(Y_eval.std()) / 3.0
ref_logp = torch.log_softmax(Y_eval / temp, -1)
rows = []
for bits, variants in results.items():
    bpw = bits + (16 + bits) / GROUP
    run.metric(f"w{bits}.bits_per_weight", bpw, "bits", origin="computed",
               label=f"{bits}-bit codes, an fp16 scale and a {bits}-bit zero per {GROUP} weights: bits per weight")
    for v, w_hat in variants.items():
        y = X_eval @ w_hat.T
        o, e = out_err(w_hat), rel(w_hat, W)
        flips = float((y.argmax(-1) != Y_eval.argmax(-1)).double().mean())
        kl = float((ref_logp.exp() * (ref_logp - torch.log_softmax(y / temp, -1))).sum(-1).mean())
        run.metric(f"w{bits}.{v}.out_err", o, "fraction", label=f"{bits}-bit {LABELS[v]}: output error, held-out")
        run.metric(f"w{bits}.{v}.weight_err", e, "fraction", label=f"{bits}-bit {LABELS[v]}: weight error")
        run.metric(f"w{bits}.{v}.calib_out_err", out_err(w_hat, X_cal), "fraction",
                   label=f"{bits}-bit {LABELS[v]}: output error on the calibration tokens")
        run.metric(f"w{bits}.{v}.top1_flips", flips, "fraction",
                   label=f"{bits}-bit {LABELS[v]}: held-out tokens whose argmax output changes")
        run.metric(f"w{bits}.{v}.kl", kl, "nats", label=f"{bits}-bit {LABELS[v]}: mean KL(reference || quantized)")
        rows.append([f"{bits}-bit", LABELS[v], round(o, 4), round(e, 4), round(flips, 4), f"{kl:.2e}"])
    for v in ("awq", "gptq", "gptq_act", "awq_gptq"):
        for what in ("out_err", "weight_err"):
            run.metric(f"w{bits}.{v}_over_rtn.{what}", run.metrics[f"w{bits}.{v}.{what}"]["value"]
                       / run.metrics[f"w{bits}.rtn.{what}"]["value"], "x",
                       label=f"{bits}-bit {LABELS[v]} over round-to-nearest: {what.replace('_', ' ')}")
run.table("errors", f"A {D_OUT}x{D_IN} layer, groups of {GROUP}, {N_CAL} calibration and {N_EVAL} held-out tokens",
          ["bits", "method", "output error (held-out)", "weight error", "argmax flips", "KL (nats)"], rows)

# %% [markdown]
# ## How much calibration data GPTQ needs
#
# With fewer calibration tokens than input channels, `X^T X` is rank-deficient and only the damping keeps
# it invertible: GPTQ fits the calibration tokens and generalises worse. The same sweep shows the
# calibration error falling below the held-out error.

# %%
sweep_eval, sweep_cal = [], []
for n in run.sizes["sweep"]:
    w_hat, _ = gptq(W, 3, X_cal[:n])
    sweep_eval.append(out_err(w_hat))
    sweep_cal.append(out_err(w_hat, X_cal[:n]))
    run.log(f"  GPTQ 3-bit, {n:5d} calibration tokens: held-out {sweep_eval[-1]:.4f}, calibration {sweep_cal[-1]:.4f}")
n_few = run.sizes["sweep"][0]
run.metric("w3.gptq.few_calib.out_err", sweep_eval[0], "fraction",
           label=f"3-bit GPTQ from {n_few} calibration tokens: output error, held-out")
run.metric("w3.gptq.few_calib.calib_out_err", sweep_cal[0], "fraction",
           label=f"3-bit GPTQ from {n_few} calibration tokens: output error on those tokens")
run.metric("w3.gptq.few_over_full_calib.out_err", sweep_eval[0] / sweep_eval[-1], "x",
           label=f"3-bit GPTQ held-out output error: {n_few} calibration tokens over {run.sizes['sweep'][-1]}")
overfits = sweep_cal[0] < sweep_eval[0] and sweep_eval[0] > sweep_eval[-1]
n_all = run.sizes["sweep"][-1]
run.series("calibration", (f"3-bit GPTQ from {n_few} tokens fits them and generalises worse than from {n_all}"
                           if overfits else "3-bit GPTQ: output error against the number of calibration tokens"),
           "calibration tokens", "relative output error",
           {"GPTQ, held-out tokens": (run.sizes["sweep"], sweep_eval),
            "GPTQ, its own calibration tokens": (run.sizes["sweep"], sweep_cal)},
           hlines={"round-to-nearest, held-out": run.metrics["w3.rtn.out_err"]["value"]}, x_log=True)
run.series("awq_alpha", "AWQ's scale search: calibration output error against alpha", "alpha",
           "relative output error (calibration tokens)",
           {f"{bits}-bit": (ALPHAS, awq_curves[bits]) for bits in (4, 3)})
run.save()
