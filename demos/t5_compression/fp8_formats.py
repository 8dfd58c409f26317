# %% [markdown]
# # FP8 formats: E4M3 vs E5M2, per-tensor scaling, overflow and underflow
#
# An 8-bit float spends its bits on exponent (range) or mantissa (precision). **E4M3** (4 exponent,
# 3 mantissa bits; the `fn` variant has no infinities and one NaN pattern per sign) reaches 448;
# **E5M2** (5 and 2; IEEE-like, with infinities) reaches 57,344 but rounds twice as coarsely. The
# usual recipe (FP8 Formats for Deep Learning, Micikevicius et al. 2022) is E4M3 for weights and
# activations, E5M2 for gradients, with a scale per tensor so that the tensor's largest magnitude
# lands near the format's maximum. Unlike INT8, a float format keeps the same *relative* precision
# over its whole range, so one outlier does not coarsen the other values; what the scale decides is
# how many small values fall below the smallest subnormal and become zero (underflow), and whether
# large values exceed the maximum (overflow).
#
# Everything below runs on any device (FP8 dtypes exist as storage types on a CPU). The FP8 matmul
# *speed* needs FP8 tensor cores (NVIDIA Hopper/Ada or newer) and is measured only there.

# %%
import torch

from demos.harness.run import start

run = start(
    "fp8_formats",
    title="FP8: E4M3 vs E5M2 range and precision, per-tensor scaling, and the FP8 matmul",
    sizes={  # (elements in the test tensor, matmul n)
        "tiny": (2**16, 256),
        "small": (2**20, 1024),
        "full": (2**22, 8192),
    },
    cpu_threads=1,
)
n_elements, mm_n = run.sizes
FORMATS = {"e4m3fn": (torch.float8_e4m3fn, 3), "e5m2": (torch.float8_e5m2, 2)}

# %% [markdown]
# ## Every value each format can hold
#
# All 256 bit patterns, reinterpreted as the format: the largest finite value, the smallest
# positive (subnormal) and normal values, and the patterns spent on NaN and infinity. The largest
# value must agree with `torch.finfo`.

# %%
values = {}
rows = []
for name, (dtype, mantissa) in FORMATS.items():
    v = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    finite = v[torch.isfinite(v)]
    values[name] = finite.unique()
    info = torch.finfo(dtype)
    vmax, vmin_sub = float(finite.max()), float(finite[finite > 0].min())
    run.check(f"{name}.max_matches_finfo", vmax == info.max, f"largest finite bit pattern {vmax} == finfo.max {info.max}")
    run.metric(f"{name}.max", vmax, "in magnitude", label=f"{name}: largest finite value", origin="computed")
    run.metric(f"{name}.min_subnormal", vmin_sub, "in magnitude", label=f"{name}: smallest positive value (subnormal)", origin="computed")
    run.metric(f"{name}.min_normal", info.smallest_normal, "in magnitude", label=f"{name}: smallest normal value", origin="computed")
    run.metric(f"{name}.dynamic_range_log2", torch.log2(torch.tensor(vmax / vmin_sub)).item(), "binades",
               label=f"{name}: log2(max / smallest subnormal)", origin="computed")
    rows.append([name, vmax, info.smallest_normal, vmin_sub, int(torch.isnan(v).sum()), int(torch.isinf(v).sum()),
                 len(values[name]), 2.0 ** -(mantissa + 1)])
run.table("formats", "The two FP8 formats, from all 256 bit patterns",
          ["format", "max", "min normal", "min subnormal", "NaN patterns", "inf patterns", "distinct finite values",
           "max relative rounding error (normal range)"], rows)

# %% [markdown]
# ## Rounding error: a bound that must hold
#
# For values in the normal range, round-to-nearest with m mantissa bits is off by at most
# 2^-(m+1) of the value: 6.25% for E4M3, 12.5% for E5M2. Checked on random values spread over the
# normal range. And what a cast does with a value beyond the maximum is measured, not assumed.

# %%
for name, (dtype, mantissa) in FORMATS.items():
    info = torch.finfo(dtype)
    x = torch.exp(torch.empty(n_elements).uniform_(float(torch.log(torch.tensor(info.smallest_normal))),
                                                   float(torch.log(torch.tensor(info.max * 0.99)))))
    rel = ((x.to(dtype).float() - x).abs() / x).max().item()
    run.check(f"{name}.relative_error_bound", rel <= 2.0 ** -(mantissa + 1),
              f"max relative rounding error {rel:.4f} <= 2^-{mantissa + 1} = {2.0 ** -(mantissa + 1):.4f}")
beyond = torch.tensor([1.0e3, 1.0e5, float("inf")])
cast_text = "\n".join(f"{name}: {beyond.tolist()} -> {beyond.to(d).float().tolist()}" for name, (d, _) in FORMATS.items())
run.artifact("overflow_cast", f"torch {torch.__version__} on {run.device.kind}: casting values beyond the maximum\n" + cast_text)
run.log(cast_text)

# %% [markdown]
# ## A tensor with outliers: no scale vs a per-tensor scale, FP8 vs INT8
#
# The tensor: activations-like values (normal, standard deviation 1e-2, so many are small) with
# 0.1% outliers 1000x larger. Stored four ways per format: as is, and with the per-tensor scale
# `amax / max` (divide before the cast, multiply after). INT8 with a per-tensor scale is shown for
# comparison. Reported: relative RMS error of the bulk (non-outlier) values, and the share of
# values that overflowed (landed on the maximum, infinity or NaN) or underflowed to zero.

# %%
generator = torch.Generator().manual_seed(0)
x = torch.randn(n_elements, generator=generator) * 1e-2
outlier = torch.rand(n_elements, generator=generator) < 1e-3
x[outlier] *= 1000.0
bulk = ~outlier


def stats(stored: torch.Tensor, t: torch.Tensor, fmt_max: float | None) -> dict:
    """Errors of ``stored`` against the tensor ``t`` it stores. A non-finite stored value counts as
    an error of |t| (the value is lost); overflow = beyond the format's maximum in t and stored as
    the maximum, infinity or NaN."""
    lost = ~torch.isfinite(stored)
    err = torch.where(lost, t.abs(), stored - t)
    over = lost | ((stored.abs() >= fmt_max) & (t.abs() > fmt_max)) if fmt_max else torch.zeros_like(lost)
    return {"bulk_rel_rms": float(err[bulk].norm() / t[bulk].norm()),
            "outlier_rel_rms": float(err[outlier].norm() / t[outlier].norm()),
            "overflow": float(over.float().mean()), "underflow": float(((stored == 0) & (t != 0)).float().mean())}


cases = {}
for name, (dtype, _) in FORMATS.items():
    fmax = torch.finfo(dtype).max
    for scaled in (False, True):
        for mult in (1.0, 1e4):  # as the tensor is, and 10^4 x larger (e.g. an unnormalized activation)
            t = x * mult
            s = float(t.abs().max()) / fmax if scaled else 1.0
            stored = (t / s).clamp(-fmax, fmax).to(dtype).float() * s if scaled else t.to(dtype).float()
            cases[f"{name}.{'scaled' if scaled else 'unscaled'}.x{int(mult)}"] = stats(stored, t, fmax * s)
amax = float(x.abs().max())
int8 = torch.round(x / (amax / 127)).clamp(-127, 127) * (amax / 127)
cases["int8.scaled.x1"] = stats(int8, x, None)
run.table("outliers", "Tensor with 0.1% outliers (1000x): error and lost values",
          ["case", "bulk relative RMS error", "outlier relative RMS error", "overflowed", "underflowed to zero"],
          [[k, f"{v['bulk_rel_rms']:.3g}", f"{v['outlier_rel_rms']:.3g}", f"{v['overflow']:.2e}", f"{v['underflow']:.2e}"]
           for k, v in cases.items()])
for k, v in cases.items():
    for stat, value in v.items():
        run.metric(f"{k}.{stat}", value, "fraction", label=f"{k}: {stat.replace('_', ' ')}")

# %% [markdown]
# ## The FP8 matmul
#
# `torch._scaled_mm(a, b, scale_a, scale_b)` multiplies two FP8 matrices with one float32 scale
# each and accumulates in higher precision. On a CPU it runs (for correctness) but there are no
# FP8 units, so its time means nothing; on a Hopper GPU it uses FP8 tensor cores at twice the BF16
# peak. The error of both against a float64 reference is measured on the same inputs.

# %%
device = run.torch_device
a = torch.randn(mm_n, mm_n, device=device)
b = torch.randn(mm_n, mm_n, device=device)
reference = a.double() @ b.double().T


def to_fp8(t):
    scale = t.abs().max().float() / torch.finfo(torch.float8_e4m3fn).max
    return (t / scale).to(torch.float8_e4m3fn), scale


a8, sa = to_fp8(a)
b8, sb = to_fp8(b)
fp8_mm = lambda: torch._scaled_mm(a8, b8.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)  # noqa: E731
a16, b16 = a.bfloat16(), b.bfloat16()
bf16_mm = lambda: a16 @ b16.T  # noqa: E731
ref_norm = reference.norm()
err_fp8 = float((fp8_mm().double() - reference).norm() / ref_norm)
err_bf16 = float((bf16_mm().double() - reference).norm() / ref_norm)
run.check("scaled_mm.error_bounded", err_fp8 < 0.1, f"FP8 (E4M3, per-tensor scales) matmul relative error {err_fp8:.3g} < 0.1")
run.metric("matmul.fp8_rel_error", err_fp8, "fraction", label=f"{mm_n}^3 matmul, E4M3 inputs: relative Frobenius error")
run.metric("matmul.bf16_rel_error", err_bf16, "fraction", label=f"{mm_n}^3 matmul, bf16 inputs: relative Frobenius error")
major = torch.cuda.get_device_capability()[0] * 10 + torch.cuda.get_device_capability()[1] if run.device.is_gpu else 0
if run.device.is_gpu and major >= 89:
    t_fp8, t_bf16 = run.time(fp8_mm).median_s, run.time(bf16_mm).median_s
    flops = 2 * mm_n**3
    run.metric("matmul.fp8_tflops", flops / t_fp8 / 1e12, "TFLOP/s", label="FP8 _scaled_mm", dtype="float8")
    run.metric("matmul.bf16_tflops", flops / t_bf16 / 1e12, "TFLOP/s", label="bf16 matmul", ceiling="matmul_bf16")
    run.metric("matmul.fp8_speedup", t_bf16 / t_fp8, "x", label="bf16 time over FP8 time")
else:
    run.not_run("fp8_matmul_speed", "FP8 matmul speed needs FP8 tensor cores (compute capability 8.9+); "
                f"this is a {run.device.kind} device, where _scaled_mm ran only for the error check")
run.save()
