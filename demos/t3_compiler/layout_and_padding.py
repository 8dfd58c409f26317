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
    sizes={  # conv (batch, channels, height=width); square matmul base n (odd n-3, multiple of 8 n-8, of 64 n);
        # matrix-vector base size (weights (m-3) x (m-3), one input row, as in a decode step)
        "tiny": ((2, 16, 16), 128, 256),
        "small": ((4, 64, 56), 1024, 2048),
        "full": ((32, 256, 56), 8192, 8192),
    },
    cpu_threads=1,
)
(batch, channels, hw), n, m = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
TOLERANCE = {torch.float32: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=3e-2, atol=5e-2)}[dtype]

# On a CPU the demo runs on one thread: on a machine shared with other work, multi-threaded kernels
# stalled whenever another process held a core (a 0.6 ms matrix-vector product measured 16 ms),
# and the ratios below swung with the neighbours' load. One thread measures the kernels.

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
run.metric("conv.channels_last_tflops", flops / t_cl / 1e12, "TFLOP/s", dtype=str(dtype).removeprefix("torch."),
           label="channels-last conv throughput")

# %% [markdown]
# ## Matmul: odd dimensions vs multiples of 8 and of 64
#
# Square matmuls at three sizes close to each other: `n - 3` (odd: no tile divides it and rows
# are not 16-byte aligned), `n - 8` (a multiple of 8, not of 64) and `n` (a multiple of 64). Each
# is reported as TFLOP/s of its *own* useful work, so a slower kernel shows even though the sizes
# differ slightly. Then the odd problem zero-padded to `n` once, ahead of time, as a compiler does
# for weights, with only the result sliced.

# %%
ceiling = "matmul_bf16" if dtype == torch.bfloat16 else "matmul_fp32"
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

padded_a, padded_b = F.pad(odd_a, (0, 3, 0, 3)), F.pad(odd_b, (0, 3, 0, 3))  # padded once, ahead of time
run.check_close("matmul.odd.padded_once_ahead", (padded_a @ padded_b)[:n - 3, :n - 3], odd_a.double() @ odd_b.double(),
                **TOLERANCE)
t = run.time(lambda: (padded_a @ padded_b)[:n - 3, :n - 3])
matmul_tflops["odd, padded once ahead"] = 2 * (n - 3) ** 3 / t.median_s / 1e12  # useful work only
matmul_rows.append([f"{n - 3} -> {n} (odd, padded once ahead)", round(t.median_s * 1e3, 3),
                    f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}", round(matmul_tflops["odd, padded once ahead"], 3)])
run.table("matmul", f"Square matmul ({str(dtype).removeprefix('torch.')}); TFLOP/s of the problem's own work",
          ["n", "median (ms)", "p10-p90 (ms)", "useful TFLOP/s"], matmul_rows)
for label, value in matmul_tflops.items():
    run.metric(f"matmul.{label.replace(', ', '.').replace(' ', '_')}.tflops", value, "TFLOP/s", ceiling=ceiling,
               label=f"square matmul, {label.replace('_', ' ')}")
run.metric("matmul.aligned_over_odd", matmul_tflops["multiple_of_64"] / matmul_tflops["odd"], "x",
           label="useful TFLOP/s, multiple of 64 over odd")
run.metric("matmul.pad_once_over_odd", matmul_tflops["odd, padded once ahead"] / matmul_tflops["odd"], "x",
           label="odd problem: padded once ahead over unpadded")

# %% [markdown]
# ## Where the padding happens: once, or on every call
#
# Padding is only free if it is done once. A decode step multiplies one activation row by a
# weight matrix: a matrix-vector product that reads the weights once and is memory-bound.
# Padding the weights inside the call copies them (a read and a write) before the product reads
# the copy, so the call moves about three times the bytes. The same odd-sized weights, three ways:
# unpadded, padded once ahead (at load time), and padded on every call.

# %%
weights = torch.randn(m - 3, m - 3, device=device, dtype=dtype) / (m - 3) ** 0.5
row = torch.randn(1, m - 3, device=device, dtype=dtype)
weights_padded = F.pad(weights, (0, 3, 0, 3))
gemv_variants = {
    "odd, unpadded": lambda: row @ weights,
    "odd, weights padded once ahead": lambda: (F.pad(row, (0, 3)) @ weights_padded)[:, :m - 3],
    "odd, weights padded on every call": lambda: (F.pad(row, (0, 3)) @ F.pad(weights, (0, 3, 0, 3)))[:, :m - 3],
}
gemv_reference = row.double() @ weights.double()
gemv_times = {}
for label, fn in gemv_variants.items():
    run.check_close(f"gemv.{label.split(', ')[1].replace(' ', '_')}", fn(), gemv_reference, **TOLERANCE)
    gemv_times[label] = run.time(fn)
weight_bytes = weights.numel() * weights.element_size()
run.table("gemv", f"One row times a {m - 3}x{m - 3} weight matrix ({str(dtype).removeprefix('torch.')}, "
          f"{weight_bytes / 1e6:.1f} MB of weights)",
          ["variant", "median (us)", "p10-p90 (us)", "weight bytes read / time (GB/s)"],
          [[label, round(t.median_s * 1e6, 1), f"{t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f}",
            round(weight_bytes / t.median_s / 1e9, 1)] for label, t in gemv_times.items()])
once, every = gemv_times["odd, weights padded once ahead"].median_s, gemv_times["odd, weights padded on every call"].median_s
run.metric("gemv.pad_every_call_slowdown", every / once, "x",
           label="matrix-vector: weights padded on every call / padded once ahead (time ratio)")
# No same-run ceiling for this one: the copy ceiling counts bytes read plus written, and a read-only
# stream (a one-row product reads the weights and writes almost nothing) can beat that rate.
run.metric("gemv.padded_once_gbps", weight_bytes / once / 1e9, "GB/s", cache_resident=run.cache_resident(weight_bytes),
           label="matrix-vector, weights padded once: weight bytes read per second (read-only stream)")

run.save()
