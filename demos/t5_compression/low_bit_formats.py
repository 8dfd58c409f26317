# %% [markdown]
# # Below eight bits: block-scaled FP4, a quantized KV cache, and the INT8 GEMM's int32 epilogue
#
# Three exact emulations in float64, each checked, nothing timed (the lessons are errors, bytes and counts).
#
# 1. **Block-scaled 4-bit formats.** An FP4 E2M1 element holds one of 0, 0.5, 1, 1.5, 2, 3, 4, 6 (and signs):
#    under four binades, so one scale per tensor cannot serve it. MXFP4 (OCP Microscaling spec v1.0) gives every
#    32 elements a power-of-two scale (E8M0); NVFP4 gives every 16 an FP8 E4M3 scale, under one fp32 scale per
#    tensor. Compared with INT4 in groups of 128 (one fp16 scale each, the usual weight-only baseline) and MXFP8.
# 2. **KV-cache quantization.** Keys of LLMs have a few outlier channels (KIVI, KVQuant); a scale per token lets
#    them set every other channel's step, a scale per channel does not. Measured on one attention's output.
# 3. **The INT8 GEMM.** int8 x int8 products summed in int32 (`torch._int_mm`), exact; why int16 is not enough; and
#    the epilogue that folds the per-token and per-channel scales, the bias and GELU into one pass that writes int8.

# %%
import math

import torch
import torch.nn.functional as F

from demos.harness.run import start
from demos.t5_compression._quant import quantize_weight

run = start(
    "low_bit_formats",
    title="Block-scaled FP4 (MXFP4, NVFP4), KV-cache quantization, and the INT8 GEMM epilogue",
    sizes={  # elements per test tensor; KV cache (tokens, head dim, queries); INT8 GEMM (M, K, N)
        "tiny": {"n": 2**14, "kv": (512, 64, 8), "gemm": (32, 4096, 64)},
        "small": {"n": 2**20, "kv": (4096, 128, 16), "gemm": (256, 4096, 1024)},
        "full": {"n": 2**22, "kv": (32768, 128, 64), "gemm": (1024, 4096, 4096)},
    },
    cpu_threads=1,
)
gen = torch.Generator().manual_seed(run.options.seed)
f64 = torch.float64

# %% [markdown]
# ## 1. The formats, emulated exactly
#
# Quantizing to E2M1: saturate at 6, round to the nearest grid value, ties to the even code (the code with a
# zero mantissa bit, as IEEE rounding does). MX (the spec's conversion): the block's scale is
# `2^(floor(log2 amax) - 2)` for FP4 (6 = 1.5 x 2^2) and `2^(floor(log2 amax) - 8)` for E4M3 (448 = 1.75 x 2^8):
# a power of two that puts the block's largest value in [4, 8), so values above 6 saturate. NVFP4: an fp32 tensor
# scale `amax / (6 x 448)`, then per block an E4M3 scale `amax_block / 6`, relative to it.

# %%
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=f64)
MIDPOINTS = (E2M1[1:] + E2M1[:-1]) / 2
E4M3 = torch.float8_e4m3fn


def round_e2m1(y):
    a = y.abs()
    i = torch.bucketize(a, MIDPOINTS)  # MIDPOINTS[i-1] < a <= MIDPOINTS[i]; beyond 5 -> 6 (saturate)
    tie_at_odd_code = (i < 7) & (a == MIDPOINTS[i.clamp(max=6)]) & (i % 2 == 1)
    return torch.sign(y) * E2M1[i + tie_at_odd_code.long()]


def pow2_scale(amax, elem_emax):  # E8M0: a power of two; a zero block gets scale 1
    return torch.where(amax > 0, torch.exp2(torch.floor(torch.log2(amax)) - elem_emax), torch.ones_like(amax))


def block_quant(x, block, elem, scale):
    """`elem` elements in blocks of `block`, scaled by E8M0, fp32, or E4M3 under an fp32 tensor scale (NVFP4)."""
    b = x.reshape(-1, block)
    amax, g, elem_max = b.abs().amax(1, keepdim=True), 1.0, 6.0 if elem == "e2m1" else 448.0
    if scale == "e8m0":
        s = pow2_scale(amax, 2 if elem == "e2m1" else 8)
    elif scale == "fp32":
        s = (amax / elem_max).float().double()
    else:
        g = float((x.abs().max() / (6 * 448)).float())  # the second-level scale, fp32
        s = (amax / 6 / g).to(E4M3).double()
    y = b / (torch.where(s > 0, s, 1.0) * g)
    q = round_e2m1(y) if elem == "e2m1" else y.clamp(-448, 448).to(E4M3).double()
    return (q * s * g).reshape(x.shape), q, s


def int4_groups(x, group=128):
    b = x.reshape(-1, group)
    s = (b.abs().amax(1, keepdim=True) / 7).half().double()  # one fp16 scale per group
    q = torch.round(b / torch.where(s > 0, s, 1.0)).clamp(-8, 7)
    return (q * s).reshape(x.shape), q, s


# name: (label, element bits, scale bits, elements per scale, quantizer); bits per element include block scales
bq = lambda block, elem, scale: lambda x: block_quant(x, block or x.numel(), elem, scale)  # noqa: E731
FORMATS = {
    "fp4_per_tensor": ("E2M1, one fp32 scale per tensor", 4, 32, None, bq(None, "e2m1", "fp32")),
    "mxfp4": ("MXFP4: E2M1, E8M0 scale per 32", 4, 8, 32, bq(32, "e2m1", "e8m0")),
    "fp4_b16_pow2": ("E2M1, E8M0 scale per 16 (NVFP4's block, MX's scale)", 4, 8, 16, bq(16, "e2m1", "e8m0")),
    "nvfp4": ("NVFP4: E2M1, E4M3 scale per 16, fp32 per tensor", 4, 8, 16, bq(16, "e2m1", "e4m3")),
    "int4_g128": ("INT4, fp16 scale per 128", 4, 16, 128, int4_groups),
    "mxfp8": ("MXFP8: E4M3, E8M0 scale per 32", 8, 8, 32, bq(32, "e4m3", "e8m0")),
}

# %% [markdown]
# ### Checks: every stored value is on its grid, and a tensor already on the grid round-trips exactly
#
# On-grid tensors: random codes times representable scales, the largest code in every block (so scales are exact).
# First the element rounding itself, against a brute-force search of the grid on every multiple of 0.01 in [-7, 7].

# %%
y = torch.arange(-700, 701, dtype=f64) / 100  # holds every midpoint between grid values: the ties
dist, r = (y.abs()[:, None] - E2M1).abs(), round_e2m1(y)
tie = (dist == dist.min(1, keepdim=True).values).sum(1) > 1
code = (r.abs()[:, None] == E2M1).double().argmax(1)
run.check("e2m1.rounding", bool(((r - y).abs() == dist.min(1).values).all() and (code[tie] % 2 == 0).all()),
          f"nearest grid value for {len(y)} inputs (beyond 6: 6), and the even code at all {int(tie.sum())} ties")
n = run.sizes["n"]
x = torch.randn(n, generator=gen, dtype=f64)
fp4_values = torch.cat([E2M1, -E2M1])
e4m3_normals = (v := torch.arange(256, dtype=torch.uint8).view(E4M3).double())[(v >= 2**-6) & (v <= 448)]
is_e4m3 = lambda t: bool((t.to(E4M3).double() == t).all())  # noqa: E731
ON_GRID = {  # name: (codes are on the element grid, scales are representable)
    "mxfp4": lambda q, s: bool(torch.isin(q, fp4_values).all()) and bool((s == pow2_scale(s, 0)).all()),
    "nvfp4": lambda q, s: bool(torch.isin(q, fp4_values).all()) and is_e4m3(s),
    "mxfp8": lambda q, s: is_e4m3(q) and bool((s == pow2_scale(s, 0)).all()),
    "int4_g128": lambda q, s: bool(((q == q.round()) & (q.abs() <= 8)).all()) and bool((s == s.half().double()).all()),
}
pick = lambda values, shape: values[torch.randint(0, len(values), shape, generator=gen)]  # noqa: E731
scales = {"mxfp4": torch.exp2(torch.randint(-10, 10, (n // 32, 1), generator=gen).double()),
          "nvfp4": pick(e4m3_normals, (n // 16, 1)).index_fill(0, torch.tensor([0]), 448.0),  # tensor scale 1
          "mxfp8": torch.exp2(torch.randint(-10, 10, (n // 32, 1), generator=gen).double()),
          "int4_g128": torch.rand(n // 128, 1, generator=gen).half().double()}
codes = {"mxfp4": pick(fp4_values, (n // 32, 32)).index_fill(1, torch.tensor([0]), 6.0),
         "nvfp4": pick(fp4_values, (n // 16, 16)).index_fill(1, torch.tensor([0]), 6.0),
         "mxfp8": pick(e4m3_normals, (n // 32, 32)).index_fill(1, torch.tensor([0]), 448.0),
         "int4_g128": torch.randint(-7, 8, (n // 128, 128), generator=gen).double().index_fill(1, torch.tensor([0]), 7)}
for name, on_grid in ON_GRID.items():
    quantize = FORMATS[name][4]
    _, q, s = quantize(x)
    run.check(f"{name}.on_grid", on_grid(q, s), f"{q.numel()} elements and {s.numel()} scales on their grids")
    exact = (codes[name] * scales[name]).flatten()
    run.check(f"{name}.round_trip", torch.equal(quantize(exact)[0], exact), "an on-grid tensor comes back bit for bit")

# %% [markdown]
# ### Error on a Gaussian tensor and on a heavy-tailed one (Student-t, 3 degrees of freedom)
#
# Relative error ||x_q - x|| / ||x|| and SQNR = -20 log10 of it. Also: the share of elements MXFP4 saturates at 6
# because its power-of-two scale left the block maximum in (6, 8).

# %%
chi2_3 = torch.randn(3, n, generator=gen, dtype=f64).pow(2).sum(0)
tensors = {"gaussian": x, "student_t3": torch.randn(n, generator=gen, dtype=f64) / (chi2_3 / 3).sqrt()}
rows = []
for name, (label, elem_bits, scale_bits, per, quantize) in FORMATS.items():
    bits = elem_bits + (scale_bits / per if per else 0.0)
    run.metric(f"{name}.bits_per_element", bits, "bits", origin="computed",
               label=f"{label}: bits per element, block scales included (a per-tensor fp32 scale aside)")
    row = [label, round(bits, 4)]
    for dist, t in tensors.items():
        err = float((quantize(t)[0] - t).norm() / t.norm())
        run.metric(f"{name}.{dist}.rel_err", err, "fraction", label=f"{label}, {dist}: relative L2 error")
        row += [f"{err:.4f}", f"{-20 * math.log10(err):.1f}"]
    rows.append(row)
    if name == "mxfp4":  # how often its power-of-two scale leaves a block maximum in (6, 8): saturated at 6
        for dist, t in tensors.items():
            saturated = (t.reshape(-1, 32).abs() / quantize(t)[2] > 6).double().mean()
            run.metric(f"mxfp4.{dist}.saturated", float(saturated), "fraction", label=f"MXFP4, {dist}: saturated at 6")
run.table("formats", "Block scales make 4-bit floats usable: error per format (relative L2, SQNR in dB)",
          ["format", "bits/element", "Gaussian: rel. error", "Gaussian: SQNR (dB)", "Student-t(3): rel. error",
           "Student-t(3): SQNR (dB)"], rows)

# %% [markdown]
# ## 2. A quantized KV cache
#
# One head: `nq` queries attend over T cached tokens. Keys are Gaussian plus a few outlier channels (large, with a
# fixed sign and offset per channel, as observed in LLM keys); values are Gaussian. Each cache variant is
# dequantized and the attention computed in float64, so the only error is the cache's. Integer variants are
# asymmetric (min-max with a zero point), as in KIVI. KIVI's layout: keys per channel in groups
# of 32 tokens, values per token (its full-precision window of recent tokens is left out here).

# %%
T, d, nq = run.sizes["kv"]
n_outliers = max(2, d // 32)
q = torch.randn(nq, d, generator=gen, dtype=f64)
K = torch.randn(T, d, generator=gen, dtype=f64)
sign = 2.0 * torch.randint(0, 2, (n_outliers,), generator=gen) - 1  # each outlier channel keeps its sign
K[:, :n_outliers] = sign * (12 + 4 * torch.randn(T, n_outliers, generator=gen, dtype=f64))
V = torch.randn(T, d, generator=gen, dtype=f64)


def attention(k, v):
    return torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v


def int_asym(t, bits, dim):  # min-max with a zero point, one (scale, zero) per slice along `dim`
    lo, hi = t.amin(dim, keepdim=True), t.amax(dim, keepdim=True)
    s = ((hi - lo) / (2**bits - 1)).half().double()
    z = torch.round(-lo / s)
    return (torch.clamp(torch.round(t / s) + z, 0, 2**bits - 1) - z) * s


half = lambda t: t.half().double()  # noqa: E731
fp8_tensor = lambda t: (t / (t.abs().max() / 448)).to(E4M3).double() * (t.abs().max() / 448)  # noqa: E731
per_channel_4 = lambda t: int_asym(t.reshape(-1, 32, d), 4, 1).reshape(t.shape)  # noqa: E731  (32-token groups)
tok8, tok4 = (lambda t: int_asym(t, 8, 1)), (lambda t: int_asym(t, 4, 1))
sc = 2 * 2  # bytes of one fp16 scale and one fp16 zero point
KV = {  # name: (label, K quantizer, V quantizer, bytes per token per head for K + V, scales included)
    "fp16": ("fp16", half, half, 2 * d * 2),
    "fp8_per_tensor": ("FP8 E4M3, one scale per tensor", fp8_tensor, fp8_tensor, 2 * d),
    "int8_per_token": ("INT8 per token", tok8, tok8, 2 * (d + sc)),
    "int4_per_token": ("INT4 per token", tok4, tok4, 2 * (d // 2 + sc)),
    "int4_kivi": ("INT4: keys per channel (32 tokens), values per token", per_channel_4, tok4,
                  d // 2 + d * sc // 32 + d // 2 + sc),
    "int4_per_token_keys_only": ("INT4 per token, keys only (values fp16)", tok4, half, d // 2 + sc + 2 * d),
    "int4_per_token_values_only": ("INT4 per token, values only (keys fp16)", half, tok4, 2 * d + d // 2 + sc),
}
reference = attention(K, V)
rows = []
for name, (label, qk, qv, nbytes) in KV.items():
    Kq, Vq = qk(K), qv(V)
    out_err = float((attention(Kq, Vq) - reference).norm() / reference.norm())
    k_err, v_err = float((Kq - K).norm() / K.norm()), float((Vq - V).norm() / V.norm())
    run.metric(f"kv.{name}.out_rel_err", out_err, "fraction", label=f"KV cache {label}: attention output rel. error")
    run.metric(f"kv.{name}.bytes_per_token", nbytes, "bytes", origin="computed",
               label=f"KV cache {label}: bytes per token per head, K and V, scales included")
    if name in ("int4_per_token", "int4_kivi"):
        run.metric(f"kv.{name}.key_rel_err", k_err, "fraction", label=f"{label}: keys' relative error")
    rows.append([label, nbytes, f"{nbytes / (4 * d):.3f}", f"{k_err:.4f}", f"{v_err:.4f}", f"{out_err:.4f}"])
run.check_close("kv.fp16_matches_reference", attention(K.half().double(), V.half().double()), reference,
                rtol=1e-2, atol=1e-2)
run.table("kv_cache", f"Keys with {n_outliers} outlier channels: a scale per token fails, per channel holds "
          f"(T = {T}, head dim {d})",
          ["cache", "bytes/token/head", "of fp16", "key rel. error", "value rel. error", "output rel. error"], rows)

# %% [markdown]
# ## 3. The INT8 GEMM: int32 accumulation and the requantizing epilogue
#
# Activations get one scale per token (row), weights one per output channel; both are symmetric INT8.
# `torch._int_mm` multiplies the codes and returns the int32 accumulators; an exact int64 product checks it. The
# epilogue then applies `s_a[m] * s_w[n]`, adds the bias, applies GELU, divides by a static output scale (from a
# separate calibration batch), rounds and clamps to int8: in fp32, as a kernel would, and in float64.

# %%
M, Kd, N = run.sizes["gemm"]
xa = torch.randn(M, Kd, generator=gen) * torch.exp(torch.randn(M, 1, generator=gen))  # tokens of varied size
w = torch.randn(N, Kd, generator=gen) / math.sqrt(Kd)
bias = 0.1 * torch.randn(N, generator=gen)


qa, s_a = quantize_weight(xa, 8, per_channel=True)  # symmetric INT8, one scale per row (of activations too)
qw, s_w = quantize_weight(w, 8, per_channel=True)
acc = torch._int_mm(qa, qw.T.contiguous())  # int8 x int8 -> int32
exact = qa.long() @ qw.long().T
run.check("int_mm.exact", acc.dtype == torch.int32 and torch.equal(acc.long(), exact),
          f"torch._int_mm ({M}x{Kd} @ {Kd}x{N}) equals the exact int64 product")
run.check_close("scales_fold_into_epilogue", acc.double() * s_a.double() * s_w.double().T,
                (qa.double() * s_a.double()) @ (qw.double() * s_w.double()).T, rtol=1e-10, atol=1e-10,
                reference_name="dequantize-then-multiply")
INT16_MAX, INT32_MAX = 2**15 - 1, 2**31 - 1
# running sums along K for a corner of the output: a partial sum can leave int16 even where the final one fits
running = torch.cumsum(qa[:4, None, :].long() * qw[None, :256, :].long(), dim=2)
x_cal = torch.randn(M, Kd, generator=gen) * torch.exp(torch.randn(M, 1, generator=gen))
s_out = float(F.gelu(x_cal.double() @ w.double().T + bias.double()).abs().max() / 127)  # static, calibrated


def epilogue(dtype, rounded=True):
    y = F.gelu(acc.to(dtype) * (s_a.to(dtype) * s_w.to(dtype).T) + bias.to(dtype)) / s_out
    return torch.clamp(torch.round(y), -128, 127) if rounded else y


out32, out64 = epilogue(torch.float32), epilogue(f64)
lsb_diff = (out32 - out64.float()).abs()
run.check("epilogue.fp32_within_1_lsb", float(lsb_diff.max()) <= 1,
          f"fp32 epilogue vs float64 on the same int32 accumulators: max {float(lsb_diff.max()):.0f} LSB")
y_float = F.gelu(xa.double() @ w.double().T + bias.double()) / s_out  # the unquantized layer, in output LSBs
in_range = y_float.abs() <= 127.5  # outputs the calibrated range holds; the rest are clamped
err_lsb = (out32.double() - y_float).abs()[in_range]
GEMM = [  # (metric, value, unit, label, origin)
    ("gemm.k", Kd, "value", "reduction length K", "computed"),
    ("gemm.max_abs_acc", exact.abs().max(), "value", "largest |int32 accumulator|", "measured"),
    ("gemm.int16_overflow", (exact.abs() > INT16_MAX).double().mean(), "fraction",
     "outputs whose final sum does not fit in int16", "measured"),
    ("gemm.int16_overflow_partial", (running.abs() > INT16_MAX).any(2).double().mean(), "fraction",
     "outputs whose running sum leaves int16 at some k (a 4 x 256 corner)", "measured"),
    ("gemm.worst_case_acc", 127 * 127 * Kd, "value", "worst case 127 x 127 x K", "computed"),
    ("gemm.int32_max_k", INT32_MAX // (127 * 127), "value", "longest K whose worst case fits int32", "computed"),
    ("epilogue.fp32_vs_f64_mismatch", (lsb_diff > 0).double().mean(), "fraction",
     "int8 outputs where the fp32 epilogue and the float64 one differ (by 1 LSB)", "measured"),
    ("epilogue.rms_lsb_before_rounding", (epilogue(f64, False) - y_float)[in_range].pow(2).mean().sqrt(), "value",
     "RMS error from the INT8 inputs alone, before the output is rounded (output LSBs)", "measured"),
    ("epilogue.rms_lsb", err_lsb.pow(2).mean().sqrt(), "value",
     "RMS |int8 output - float layer| (output LSBs, outputs in range)", "measured"),
    ("epilogue.max_lsb", err_lsb.max(), "value", "max |int8 output - float layer| (output LSBs, in range)", "measured"),
    ("epilogue.clamped", (~in_range).double().mean(), "fraction", "outputs beyond the calibrated int8 range (clamped)",
     "measured"),
]
for name, value, unit, label, origin in GEMM:
    run.metric(name, float(value), unit, label=label, origin=origin)
run.table("int8_gemm", f"INT8 GEMM ({M}x{Kd} @ {Kd}x{N}): int32 accumulators and the requantizing epilogue",
          ["quantity", "value"], [[label, f"{v:.2%}" if unit == "fraction" else f"{v:,.0f}" if v.is_integer()
                                   else f"{v:.4g}"] for _, value, unit, label, _ in GEMM for v in [float(value)]])
run.save()
