# %% [markdown]
# # Layout and shapes: channels-last convolution, padded matmul dimensions
#
# Two decisions a compiler (or a careful model author) makes that change no math and can change
# the speed a lot:
#
# - **Memory layout.** A 4-D activation can be stored channels-first (NCHW: each channel is a
#   contiguous image) or channels-last (NHWC: the channels of one pixel are contiguous). Fast
#   convolution kernels (cuDNN's tensor-core kernels, oneDNN on CPUs) compute in channels-last,
#   because the reduction over input channels then reads contiguous memory. Given NCHW, they
#   convert, or pick a slower kernel. Converting the layout yourself around one convolution
#   moves the whole tensor twice per call: it can cost more than the layout saves.
# - **Dimensions that tiles divide.** Matmul kernels work on tiles (tensor-core instructions on
#   multiples of 8 or 16 elements, thread-block tiles of 64-256) and want 16-byte-aligned rows.
#   An odd dimension leaves partial tiles and unaligned rows; padding it to a multiple of 8 or 64
#   fixes that, if the padding is done once (weights stored padded), not on every call.
#
# Each variant is checked against a float64 reference, then timed.

# %%
import torch
import torch.nn.functional as F

from demos.harness.run import start

run = start(
    "layout_and_padding",
    title="Layout and padding: channels-last convolution, matmul dimensions padded to tile multiples",
    sizes={  # conv (batch, channels, height=width), matmul base size n (odd: n-3, multiple of 8: n-8, of 64: n)
        "tiny": ((2, 16, 16), 128),
        "small": ((4, 64, 56), 1024),
        "full": ((32, 256, 56), 8192),
    },
)
(batch, channels, hw), n = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
TOLERANCE = {torch.float32: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=3e-2, atol=5e-2)}[dtype]

# %% [markdown]
# ## Convolution: NCHW vs channels-last vs converting around the call
#
# A 3x3 convolution, same input and weights in three arrangements. `memory_format` changes only
# the strides: the tensors have the same shape and values, and every variant must give the same
# answer.

# %%
x = torch.randn(batch, channels, hw, hw, device=device, dtype=dtype)
w = torch.randn(channels, channels, 3, 3, device=device, dtype=dtype) / (9 * channels) ** 0.5
x_cl, w_cl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
conv_reference = F.conv2d(x.double(), w.double(), padding=1)

conv_variants = {
    "channels-first (NCHW)": lambda: F.conv2d(x, w, padding=1),
    "channels-last (NHWC)": lambda: F.conv2d(x_cl, w_cl, padding=1),
    "NCHW in and out, converted around the conv": lambda: F.conv2d(
        x.contiguous(memory_format=torch.channels_last), w_cl, padding=1).contiguous(),
}
conv_times, layouts = {}, {}
for name, fn in conv_variants.items():
    out = fn()
    run.check_close(f"conv.{name.split(' ')[0]}", out, conv_reference, **TOLERANCE)
    layouts[name] = "NCHW" if out.is_contiguous() else "channels-last"
    conv_times[name] = run.time(fn)
flops = 2 * batch * channels * channels * 9 * hw * hw
run.table("conv", f"3x3 convolution, {batch}x{channels}x{hw}x{hw} ({str(dtype).removeprefix('torch.')})",
          ["variant", "output layout", "median (ms)", "p10-p90 (ms)", "TFLOP/s"],
          [[name, layouts[name], round(t.median_s * 1e3, 3), f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}",
            round(flops / t.median_s / 1e12, 3)] for name, t in conv_times.items()])
t_cf, t_cl, t_conv = (conv_times[k].median_s for k in conv_variants)
run.metric("conv.channels_last_speedup", t_cf / t_cl, "x", label="channels-last over channels-first")
run.metric("conv.convert_around_speedup", t_cf / t_conv, "x",
           label="converting to channels-last and back around one conv, over plain channels-first")
run.metric("conv.conversion_cost_fraction", (t_conv - t_cl) / t_conv, "fraction",
           label="share of the converted call spent outside the channels-last conv (the two layout copies)")
run.metric("conv.channels_last_tflops", flops / t_cl / 1e12, "TFLOP/s",
           ceiling="matmul_bf16" if dtype == torch.bfloat16 else "matmul_fp32",
           label="channels-last conv throughput")

# %% [markdown]
# ## Matmul: odd dimensions vs multiples of 8 and of 64
#
# Square matmuls at three sizes close to each other: `n - 3` (odd: no tile divides it and rows
# are not 16-byte aligned), `n - 8` (a multiple of 8, not of 64) and `n` (a multiple of 64). Each
# is reported as TFLOP/s of its *own* useful work, so a slower kernel shows even though the sizes
# differ slightly. Then the odd problem two more ways: zero-padded to `n` **on every call**
# (the padding copies are part of the time), and padded **once** ahead of time, as a compiler does
# for weights, with only the result sliced.

# %%
matmul_rows, matmul_tflops = [], {}
for label, size in (("odd", n - 3), ("multiple_of_8", n - 8), ("multiple_of_64", n)):
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype) / size**0.5
    if size == n - 3:
        odd_a, odd_b = a, b
    run.check_close(f"matmul.{label}", a @ b, a.double() @ b.double(), **TOLERANCE)
    t = run.time(lambda: a @ b)
    matmul_tflops[label] = 2 * size**3 / t.median_s / 1e12
    matmul_rows.append([f"{size} ({label.replace('_', ' ')})", round(t.median_s * 1e3, 3),
                        f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}", round(matmul_tflops[label], 3)])

pad = 3
padded_a, padded_b = F.pad(odd_a, (0, pad, 0, pad)), F.pad(odd_b, (0, pad, 0, pad))  # padded once, ahead of time
odd_variants = {
    "odd, padded on every call": lambda: (F.pad(odd_a, (0, pad, 0, pad)) @ F.pad(odd_b, (0, pad, 0, pad)))[:n - 3, :n - 3],
    "odd, padded once ahead": lambda: (padded_a @ padded_b)[:n - 3, :n - 3],
}
odd_reference = odd_a.double() @ odd_b.double()
for label, fn in odd_variants.items():
    run.check_close(f"matmul.{label.replace(', ', '.').replace(' ', '_')}", fn(), odd_reference, **TOLERANCE)
    t = run.time(fn)
    matmul_tflops[label] = 2 * (n - 3) ** 3 / t.median_s / 1e12  # useful work only: the odd problem's FLOPs
    matmul_rows.append([f"{n - 3} -> {n} ({label})", round(t.median_s * 1e3, 3),
                        f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}", round(matmul_tflops[label], 3)])
run.table("matmul", f"Square matmul ({str(dtype).removeprefix('torch.')}); TFLOP/s of the problem's own work",
          ["n", "median (ms)", "p10-p90 (ms)", "useful TFLOP/s"], matmul_rows)

ceiling = "matmul_bf16" if dtype == torch.bfloat16 else "matmul_fp32"
for label, value in matmul_tflops.items():
    key = label.replace(", ", ".").replace(" ", "_")
    run.metric(f"matmul.{key}.tflops", value, "TFLOP/s", ceiling=ceiling, label=f"matmul, {label.replace('_', ' ')}")
run.metric("matmul.aligned_over_odd", matmul_tflops["multiple_of_64"] / matmul_tflops["odd"], "x",
           label="useful TFLOP/s, multiple of 64 over odd")
run.metric("matmul.pad_once_over_odd", matmul_tflops["odd, padded once ahead"] / matmul_tflops["odd"], "x",
           label="odd problem: padded once ahead over unpadded")
run.metric("matmul.pad_every_call_over_odd", matmul_tflops["odd, padded on every call"] / matmul_tflops["odd"], "x",
           label="odd problem: padded on every call over unpadded")

run.save()
