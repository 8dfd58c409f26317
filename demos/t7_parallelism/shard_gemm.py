# %% [markdown]
# # Tensor parallelism on one device: does the per-rank GEMM keep its FLOP rate?
#
# Tensor parallelism of degree t gives each rank a column-parallel GEMM of [b*s, h] x [h, 4h/t]:
# t times fewer FLOPs, but also a smaller GEMM, which need not run at the same FLOP rate. On a GPU a
# product must be large enough to give every SM its tiles of the output (an H100 has 132 SMs; a
# 128x128 tile per SM needs an output of over two million elements); on a CPU with a few cores,
# smaller operands sit closer in cache. This demo times one rank's shard GEMM on one device (a CPU
# core, or one GPU in bf16) for t = 1 to 8, at the shape the tensor-parallel demo trains
# (`tensor_parallel.py`), and shows its throughput as a fraction of the same run's matmul ceiling.
# That ceiling is one square product (1024 on a CPU, 8192 on a GPU at the full size): a smaller,
# cache-resident product can exceed it on a CPU.
#
# No ranks are needed: the question is what one rank's device does with its share, so this runs
# wherever the demo runs, one GPU included.

# %%
import torch

from demos.harness.run import start

TP_DEGREES = [1, 2, 4, 8]

run = start(
    "shard_gemm",
    title="Tensor parallelism on one device: the shard GEMM's FLOP rate vs the degree",
    sizes={  # (batch, sequence, hidden) of the MLP whose first GEMM is split; as tensor_parallel's timed shape
        "tiny": (4, 64, 256),
        "small": (4, 128, 512),
        "full": (4, 2048, 8192),
    },
    cpu_threads=1,
)

# %% [markdown]
# ## The split, checked
#
# Column parallelism splits W1 = [h, 4h] into t blocks of columns; rank r computes `x @ W1[:, r]`.
# The identity that makes the split correct: the t shard products, concatenated, equal the full
# product. It is checked against the full product in float64 on the first 256 rows (every row is
# computed the same way), with a tolerance that scales with sqrt(h) (each output is a sum of h
# products) and, in bf16, with its 8 bits of mantissa.

# %%
gemm_dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
ceiling = "matmul_bf16" if run.device.is_gpu else "matmul_fp32"
b, s, h = run.sizes
tokens = b * s
a = torch.randn(tokens, h, device=run.torch_device, dtype=gemm_dtype)
w = torch.randn(h, 4 * h, device=run.torch_device, dtype=gemm_dtype)
checked_rows = a[:256]
reference_rows = checked_rows.double() @ w.double()
relative = 2e-2 if gemm_dtype == torch.bfloat16 else 1e-4
tolerance = {"rtol": relative, "atol": relative * h ** 0.5}
for t in TP_DEGREES:
    shards = w.chunk(t, dim=1)
    run.check_close(f"gemm.t{t}.shards_concatenated", torch.cat([checked_rows @ shard for shard in shards], dim=1),
                    reference_rows, **tolerance, reference_name="the full product in float64")

# %% [markdown]
# ## One rank's shard GEMM, timed
#
# The first shard of each degree, made contiguous (as a rank holds it), timed with the harness. On a
# CPU at these sizes the operands fit in the last-level cache (the metric says so: `cache_resident`),
# so a narrow shard can beat the square ceiling; on a GPU the L2 is flushed between calls.

# %%
gemm, timings = {}, {}  # per degree: (columns, seconds, TFLOP/s), and the Timing (its spread for the plot)
for t in TP_DEGREES:
    shard = w.chunk(t, dim=1)[0].contiguous()
    timing = timings[t] = run.time(lambda: a @ shard)
    gemm[t] = (shard.shape[1], timing.median_s, 2 * tokens * h * shard.shape[1] / timing.median_s / 1e12)
    working_set = (a.numel() + shard.numel() + tokens * shard.shape[1]) * a.element_size()  # A, the shard, the output
    run.metric(f"gemm.t{t}.tflops", gemm[t][2], "TFLOP/s", ceiling=ceiling,
               cache_resident=run.cache_resident(working_set),
               label=f"t={t}: the shard GEMM [{tokens}, {h}] x [{h}, {shard.shape[1]}]")
    run.metric(f"gemm.t{t}.ms", timing.median_s * 1e3, "ms", label=f"t={t}: time of one rank's shard GEMM")
run.finish_ceilings()  # the ceilings' second measurement, so the fractions below are the record's final ones
fractions = [tflops / run.ceilings[ceiling]["value"] for _, _, tflops in gemm.values()]
rows = [[t, f"[{tokens}, {h}] x [{h}, {columns}]", round(seconds * 1e3, 3), round(tflops, 4), round(fraction, 3)]
        for (t, (columns, seconds, tflops)), fraction in zip(gemm.items(), fractions)]
run.table("gemm", f"Column-parallel shard GEMM per rank ({str(gemm_dtype).removeprefix('torch.')}, {run.device.kind})",
          ["degree t", "shape", "median (ms)", "TFLOP/s", "fraction of matmul ceiling"], rows)
run.series("gemm_efficiency", f"Shard GEMM at {fractions[0]:.0%} of the matmul ceiling at t = {TP_DEGREES[0]}, "
           f"{fractions[-1]:.0%} at t = {TP_DEGREES[-1]}", "degree t",
           "fraction of the matmul ceiling", {"shard GEMM": (TP_DEGREES, fractions, list(timings.values()))},
           x_log=True)
run.save()

# %% [markdown]
# ## Reading the results
#
# Splitting a GEMM t ways gives each rank t times fewer FLOPs, but a smaller GEMM, whose FLOP rate
# depends on the device and the shape: the `gemm` table shows this device's answer at this shape.
# Where the rate falls with t, tensor parallelism buys less than t times on compute alone, before
# its all-reduces are paid (see `tensor_parallel.py`).
