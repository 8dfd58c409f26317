# %% [markdown]
# # Numerics: low-precision accumulation, compensated sums, stable softmax, mixed precision
#
# Three facts decide whether low precision is safe:
#
# 1. **Accumulation.** A running sum in a format with p mantissa bits stops growing once the
#    increment is below half a unit in the last place of the sum: with fp16 (p = 11) a sum of
#    ones stalls at 2048, with bf16 (p = 8) at 256. Kahan's compensated sum carries the lost low
#    part in a second variable and keeps the error near one rounding, whatever the length.
# 2. **Range.** `exp` overflows fp32 above about 88.7 and fp16 above about 11.1, so a softmax or
#    log-sum-exp written as `exp(x) / sum(exp(x))` returns NaN for ordinary logits; subtracting
#    the maximum first is exact algebra and never overflows.
# 3. **Updates.** A weight update smaller than half an ulp of the weight is rounded away: bf16
#    weights near 1 ignore updates below about 0.004. Mixed precision keeps fp32 master weights
#    (and fp32 accumulation in matmuls) for this reason, and fp16 needs loss scaling because
#    small gradients fall below its range.
#
# Every error below is measured against float64 arithmetic on the *same* stored inputs, so it is
# the arithmetic's error, not the rounding of the inputs.

# %%
import importlib.util

import numpy as np
import torch

from demos.harness.run import start

run = start(
    "numerics",
    title="Low-precision accumulation vs Kahan, stable softmax/log-sum-exp, mixed-precision updates",
    sizes={  # (largest number of terms, parallel accumulators (lanes), training steps)
        "tiny": (2**18, 64, 200),
        "small": (2**22, 256, 600),
        "full": (2**24, 1024, 2000),
    },
    cpu_threads=1,
)
device = run.torch_device
n_max, lanes, train_steps = run.sizes
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
gen = torch.Generator().manual_seed(run.options.seed)

# %% [markdown]
# ## One accumulator: the stall
#
# A single running sum, element after element (NumPy's `add.accumulate` rounds after every
# addition; bf16 comes from `ml_dtypes`, which JAX installs).

# %%
ones = 4096
stall = {"fp16": float(np.add.accumulate(np.ones(ones, np.float16), dtype=np.float16)[-1])}
if importlib.util.find_spec("ml_dtypes"):
    import ml_dtypes

    stall["bf16"] = float(np.add.accumulate(np.ones(ones, ml_dtypes.bfloat16), dtype=ml_dtypes.bfloat16)[-1])
else:
    run.not_run("bf16 single-accumulator sum", "ml_dtypes is not installed")
for name, value in stall.items():
    run.metric(f"stall.{name}", value, "ones", label=f"the sum of {ones} ones added one by one in {name}")
run.check("stall.fp16_stops_at_2048", stall["fp16"] == 2048.0, f"fp16 running sum of {ones} ones = {stall['fp16']}")

# %% [markdown]
# ## Many accumulators, like a GPU reduction
#
# `lanes` accumulators each add every `lanes`-th term in order (as threads of a reduction
# kernel do), then the lane totals are added in the same way. Naive: `s = s + x`. Kahan:
# `y = x - c; t = s + y; c = (t - s) - y; s = t`, every operation in the accumulator's dtype.
# "bf16 in, fp32 acc" is what tensor cores and fused kernels do: low-precision inputs, fp32
# accumulator. `torch.sum` is the library's reduction for comparison.

# %%
def naive_sum(x: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    parts = x.reshape(-1, lanes)
    s = torch.zeros(lanes, dtype=acc_dtype, device=x.device)
    for row in parts:
        s = s + row.to(acc_dtype)
    total = torch.zeros((), dtype=acc_dtype, device=x.device)
    for v in s:
        total = total + v
    return total


def kahan_sum(x: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    parts = x.reshape(-1, lanes)
    s = torch.zeros(lanes, dtype=acc_dtype, device=x.device)
    c = torch.zeros_like(s)
    for row in parts:
        y = row.to(acc_dtype) - c
        t = s + y
        c = (t - s) - y
        s = t
    total, comp = torch.zeros((), dtype=acc_dtype, device=x.device), torch.zeros((), dtype=acc_dtype, device=x.device)
    for v in torch.cat([s, -c]):  # the lanes' totals and their outstanding compensations
        y = v - comp
        t = total + y
        comp = (t - total) - y
        total = t
    return total


METHODS = {
    "naive": lambda x, d: naive_sum(x, d),
    "kahan": lambda x, d: kahan_sum(x, d),
    "torch.sum": lambda x, d: x.sum(),
}
sizes = [2**e for e in range(10, int(np.log2(n_max)) + 1, 2)]
# Uniform [0, 1/1024): positive terms, so errors add up; small enough that even 2^26 of them sum
# below fp16's largest value (65504). Stalling depends only on the ratio of term to sum.
x_all = torch.rand(n_max, generator=gen) / 1024
errors = {}  # (method, dtype, n) -> relative error
for n in sizes:
    for dname, dtype in DTYPES.items():
        x = x_all[:n].to(dtype).to(device)
        exact = float(x.double().sum())  # float64 sum of the stored inputs: error ~1e-16 relative
        for method, fn in METHODS.items():
            errors[method, dname, n] = abs(float(fn(x, dtype)) - exact) / exact
    xb = x_all[:n].to(torch.bfloat16).to(device)
    errors["naive", "bf16 in, fp32 acc", n] = abs(float(naive_sum(xb, torch.float32)) - float(xb.double().sum())) / float(xb.double().sum())

n = sizes[-1]
for dname in DTYPES:
    run.check(f"kahan_below_naive.{dname}", errors["kahan", dname, n] < errors["naive", dname, n] or errors["naive", dname, n] == 0,
              f"n={n}: Kahan relative error {errors['kahan', dname, n]:.2e} vs naive {errors['naive', dname, n]:.2e}")
    eps = torch.finfo(DTYPES[dname]).eps
    run.check(f"kahan_within_two_ulps.{dname}", errors["kahan", dname, n] <= 2 * eps,
              f"n={n}: Kahan relative error {errors['kahan', dname, n]:.2e} <= 2 eps = {2 * eps:.2e} (Kahan's bound, independent of n)")
    for method in METHODS:
        run.metric(f"sum.{method}.{dname}.rel_err", errors[method, dname, n], "relative",
                   label=f"{method} sum of {n} uniform terms in {dname}, against float64")
run.metric("sum.naive.bf16_in_fp32_acc.rel_err", errors["naive", "bf16 in, fp32 acc", n], "relative",
           label=f"bf16 inputs, fp32 naive accumulators, {n} terms")
run.table("sums", f"Relative error of a sum of n uniform [0, 1/1024) terms ({lanes} lanes), against float64",
          ["n"] + [f"{m} {d}" for m in METHODS for d in DTYPES] + ["naive bf16 in, fp32 acc"],
          [[n] + [f"{errors[m, d, n]:.1e}" for m in METHODS for d in DTYPES] + [f"{errors['naive', 'bf16 in, fp32 acc', n]:.1e}"]
           for n in sizes])


def as_percent(e: float) -> str:
    return f"{100 * e:.0f}%" if e >= 0.1 else f"{100 * e:.2g}%" if e >= 1e-4 else "under 0.01%"


kahan_worst = max(errors["kahan", d, n] for d in ("fp16", "bf16"))
sum_title = (f"{n / 1e6:.2g}M terms: naive sum off by {as_percent(errors['naive', 'bf16', n])} in bf16, "
             f"{as_percent(errors['naive', 'fp16', n])} in fp16; Kahan {as_percent(kahan_worst)}")
run.series("sum_error", sum_title, "terms", "relative error",
           {f"{m} {d}": (sizes, [max(errors[m, d, n], 1e-17) for n in sizes]) for m in ("naive", "kahan") for d in DTYPES},
           x_log=True, y_log=True)

# %% [markdown]
# ## Softmax and log-sum-exp: naive vs stable
#
# Logits `scale * N(0, 1)` over 1000 classes; the reference is the stable form in float64.
# Naive: `exp(x) / exp(x).sum()` and `log(exp(x).sum())`. Stable: subtract the row maximum first
# (`torch.softmax` and `torch.logsumexp` do this).

# %%
def naive_softmax(x):
    e = torch.exp(x)
    return e / e.sum()


def stable_softmax(x):
    e = torch.exp(x - x.max())
    return e / e.sum()


def stable_lse(x):
    m = x.max()
    return m + torch.log(torch.exp(x - m).sum())


logits = torch.randn(1000, generator=gen, dtype=torch.float64)
rows = []
for scale in (1.0, 10.0, 100.0, 1000.0):
    ref64 = torch.softmax(logits * scale, 0)
    lse64 = float(torch.logsumexp(logits * scale, 0))
    for dname in ("fp16", "bf16", "fp32"):
        x = (logits * scale).to(DTYPES[dname]).to(device)
        ref = torch.softmax(x.double(), 0).cpu()  # float64 on the stored logits
        lse_ref = float(torch.logsumexp(x.double(), 0))
        naive, stable = naive_softmax(x).double().cpu(), stable_softmax(x).double().cpu()
        naive_lse, s_lse = float(torch.log(torch.exp(x).sum())), float(stable_lse(x))
        naive_ok = bool(torch.isfinite(naive).all())
        err = float((stable - ref).abs().max())
        rows.append([scale, dname, "finite" if naive_ok else "NaN/inf", float(f"{err:.2e}"),
                     round(naive_lse, 4) if np.isfinite(naive_lse) else str(naive_lse), round(s_lse, 4), round(lse_ref, 4)])
        tol = 4 * torch.finfo(DTYPES[dname]).eps * max(1.0, abs(lse_ref))
        run.check(f"stable.{dname}.scale{int(scale)}", err <= 4 * torch.finfo(DTYPES[dname]).eps and abs(s_lse - lse_ref) <= tol,
                  f"stable softmax max |err| {err:.1e}, log-sum-exp {s_lse:.6g} vs {lse_ref:.6g}")
    del ref64, lse64
run.check("naive.fp32_overflows_at_scale_100", any(r[0] == 100.0 and r[1] == "fp32" and r[2] != "finite" for r in rows),
          "fp32 exp overflows above ~88.7, so the naive softmax of logits of scale 100 is NaN")
run.check("naive.fp16_overflows_at_scale_10", any(r[0] == 10.0 and r[1] == "fp16" and r[2] != "finite" for r in rows),
          "fp16 exp overflows above ~11.1, so the naive softmax of logits of scale 10 is NaN")
run.table("softmax", "Softmax over 1000 logits of scale s: naive vs stable, against float64",
          ["scale", "dtype", "naive softmax", "stable max |err|", "naive log-sum-exp", "stable log-sum-exp", "float64 log-sum-exp"], rows)
run.metric("softmax.naive_nan_cases", sum(r[2] != "finite" for r in rows), "cases",
           label=f"naive softmax non-finite, out of {len(rows)} (scale x dtype)")

# %% [markdown]
# ## Mixed precision and convergence
#
# **Gradient range.** Gradients spread over 1e-9..1e-4 in fp16: below 2^-25 (3e-8) they round to
# zero, and below 2^-14 (6.1e-5) they lose bits as subnormals. Multiplying the loss by
# 2^16 (loss scaling) shifts them into range; bf16 has fp32's exponent range and needs none.
#
# **Update size.** Linear regression trained by SGD three ways: fp32; everything in bf16
# (weights too); bf16 forward and backward with fp32 master weights (the mixed-precision recipe).

# %%
grads = torch.exp(torch.empty(100_000).uniform_(np.log(1e-9), np.log(1e-4), generator=gen))


def zero_fraction(g, dtype):
    return float((g.to(dtype) == 0).float().mean())


underflow = {"fp16": zero_fraction(grads, torch.float16), "fp16 x 2^16 loss scale": zero_fraction(grads * 2**16, torch.float16),
             "bf16": zero_fraction(grads, torch.bfloat16)}
for name, key in (("fp16", "fp16"), ("fp16 x 2^16 loss scale", "fp16_scaled"), ("bf16", "bf16")):
    run.metric(f"underflow.{key}", underflow[name], "fraction",
               label=f"gradients log-uniform in [1e-9, 1e-4] that become 0 in {name}")
run.check("loss_scaling_prevents_underflow", underflow["fp16 x 2^16 loss scale"] < underflow["fp16"] / 10,
          f"zeros: fp16 {underflow['fp16']:.3f}, fp16 with 2^16 loss scale {underflow['fp16 x 2^16 loss scale']:.4f}")

d_in, batch, lr = 64, 256, 0.05
w_true = torch.randn(d_in, generator=gen) / d_in**0.5 + 1.0  # weights near 1: bf16 ulp there is 2^-7
X_train = torch.randn(4096, d_in, generator=gen)
y_train = X_train @ w_true + 0.01 * torch.randn(4096, generator=gen)


def train(weights_dtype, compute_dtype):
    w = torch.zeros(d_in, dtype=weights_dtype, device=device)
    Xd, yd = X_train.to(device), y_train.to(device)
    losses = []
    for step in range(train_steps):
        idx = torch.arange(step * batch, (step + 1) * batch, device=device) % len(Xd)
        xb, yb = Xd[idx].to(compute_dtype), yd[idx].to(compute_dtype)
        err = xb @ w.to(compute_dtype) - yb
        grad = (2 / batch) * (xb.T @ err)
        w = w - (lr * grad).to(weights_dtype)
        losses.append(float(((Xd @ w.float() - yd) ** 2).mean()))
    return losses


curves = {"fp32": train(torch.float32, torch.float32), "bf16 weights": train(torch.bfloat16, torch.bfloat16),
          "bf16 compute, fp32 master weights": train(torch.float32, torch.bfloat16)}
final = {k: float(np.mean(v[-20:])) for k, v in curves.items()}
for k, v in final.items():
    run.metric(f"train.{k.split(',')[0].replace(' ', '_')}.final_mse", v, "mse", label=f"{k}: mean training MSE over the last 20 steps")
run.check("master_weights_converge_like_fp32", final["bf16 compute, fp32 master weights"] < 0.1 * final["bf16 weights"],
          f"final MSE: fp32 {final['fp32']:.2e}, fp32 master {final['bf16 compute, fp32 master weights']:.2e}, "
          f"bf16 weights {final['bf16 weights']:.2e}")
steps = list(range(1, train_steps + 1, max(1, train_steps // 100)))
run.series("training", "Linear regression by SGD: training MSE per step", "step", "MSE",
           {k: (steps, [v[s - 1] for s in steps]) for k, v in curves.items()}, y_log=True)
run.save()
