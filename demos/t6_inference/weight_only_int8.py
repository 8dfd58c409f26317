# %% [markdown]
# # Decode is memory-bound: weight-only INT8, and CUDA graphs for the decode step
#
# At batch 1, a decode step multiplies a single activation row by every weight matrix: about two
# FLOPs per weight, so each weight byte loaded feeds one or two FLOPs. No processor has that
# little compute per byte; the step is limited by how fast the weights stream from memory.
# Halving or quartering the bytes per weight is then a direct speedup, even if the arithmetic is
# unchanged, which is why weight-only quantization (INT8, INT4) is the standard decode
# optimization: weights are stored in 8 bits with one scale per output channel, and converted back
# to the activation dtype *inside* the matmul kernel, in registers. Converting them in a separate
# step before a normal matmul moves more bytes than it saves.
#
# This demo quantizes weights per output channel, then measures one linear layer at decode shapes
# (time against batch rows, full precision vs INT8 with and without a fused kernel), and the
# trained model with every block's linear layers quantized (output agreement, decode step time).
# On a GPU it also captures the whole decode step in a CUDA graph and replays it.

# %%
import copy

import torch
import torch.nn.functional as F
from torch import nn

from demos.harness.run import start
from records.numbers import TITLE_TIE
from demos.t6_inference._model import held_out_prompts, trained_models

run = start(
    "weight_only_int8",
    title="Weight-only INT8 for decode, and CUDA-graph replay of the decode step",
    sizes={  # (linear layer in_features = out_features, batch rows to sweep, model decode context)
        "tiny": (256, [1, 4], 32),
        "small": (4096, [1, 4, 16, 64], 128),
        "full": (8192, [1, 4, 16, 64, 256], 1024),
    },
    cpu_threads=1,
)
device = run.torch_device
width, rows_sweep, context = run.sizes
act_dtype = torch.bfloat16  # weight-only INT8 is W8A16: activations stay in 16 bits
full_dtypes = [torch.bfloat16] if run.device.is_gpu else [torch.float32, torch.bfloat16]

import triton  # noqa: E402  (after start(): without a GPU, Triton runs in its interpreter)
import triton.language as tl  # noqa: E402

# %% [markdown]
# On a CPU every measurement below uses **one thread**. On a machine shared with other work, a second
# OpenMP thread made the timings snap to multiples of the scheduler's 4 ms tick whenever other work
# was running (a 64 MiB GEMV took exactly two ticks, whatever its format). One thread gives
# honest single-core numbers; for the memory-bound case, the yardstick is then a copy on one
# thread, measured here in the same run (the harness's ceilings use every thread).

# %%
if not run.device.is_gpu:
    copy_src = torch.randn(2**24)
    copy_dst = torch.empty_like(copy_src)
    one_thread_copy_gbps = 2 * copy_src.nbytes / run.time(lambda: copy_dst.copy_(copy_src)).median_s / 1e9
    run.metric("copy_one_thread_gbps", one_thread_copy_gbps, "GB/s",
               label="copy bandwidth on one thread (64 MiB, bytes read + written), this run")
    del copy_src, copy_dst

# %% [markdown]
# ## Per-channel symmetric quantization
#
# Each output channel (row of W) gets its own scale, max|row| / 127, so one large row does not
# crush the resolution of the others; weights become integers in [-127, 127]. The dequantized
# weight is `q * scale[:, None]`, and `y = x @ W^T` becomes `(x @ q^T) * scale`: the scale is
# applied once per output, after the dot product.

# %%
def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
    q = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


# %% [markdown]
# ## Three ways to run an INT8-weight linear
#
# - **dequantize, then matmul**: convert the whole weight to bf16, then a normal matmul. Simple,
#   and it moves *more* bytes than full precision (read INT8, write bf16, read bf16).
# - **fused, CPU**: ATen's `_weight_int8pack_mm`, a CPU kernel that reads INT8 weights and applies
#   per-channel scales inside the kernel (the one torchao's INT8 weight-only path uses on CPU).
# - **fused, GPU: our Triton kernel**. Each program owns a block of output channels and all batch
#   rows, streams the INT8 weights in K-blocks, converts them in registers, accumulates
#   `x @ q^T` in fp32 with `tl.dot` (tensor cores, TF32), and applies the scales at the end. Without a GPU it runs in
#   Triton's interpreter, for its correctness check only.

# %%
def int8_dequant_matmul(x, q, scale):
    return F.linear(x, q.to(x.dtype) * scale.to(x.dtype)[:, None])


def int8_fused_cpu(x, q, scale):
    shape = x.shape
    y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, shape[-1]), q, scale.to(x.dtype))
    return y.reshape(*shape[:-1], q.shape[0])


@triton.jit
def int8_linear_kernel(x_ptr, q_ptr, scale_ptr, y_ptr, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * K + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        q = tl.load(q_ptr + cols[None, :].to(tl.int64) * K + ks[:, None],
                    mask=(cols[None, :] < N) & (ks[:, None] < K), other=0)  # (BLOCK_K, BLOCK_N) view of q^T
        # fp32 operands: on a GPU tl.dot then runs in TF32 (10-bit mantissa), which holds bf16
        # activations and integers |q| <= 127 exactly, so nothing is rounded before accumulation
        acc += tl.dot(x.to(tl.float32), q.to(tl.float32))
    scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    y = acc * scale[None, :]
    tl.store(y_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def int8_fused_triton(x, q, scale):
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).contiguous()
    m, k = x2.shape
    n = q.shape[0]
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    block_m = max(16, min(64, triton.next_power_of_2(m)))
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, 32))
    int8_linear_kernel[grid](x2, q, scale, y, m, n, k, BLOCK_M=block_m, BLOCK_N=32, BLOCK_K=256, num_warps=4)
    return y.reshape(*shape[:-1], n)


int8_fused = int8_fused_triton if run.device.is_gpu else int8_fused_cpu
fused_name = "int8_fused_triton" if run.device.is_gpu else "int8_fused_aten_cpu"

# %% [markdown]
# ## Correctness first
#
# Each INT8 path must compute exactly the quantized layer: compared with `x @ (q * scale)^T` in
# float64 (the tolerance covers bf16 activations and output). Separately, the quantization error
# itself: the INT8 layer against the original full-precision weights, reported, not hidden.

# %%
TOL = dict(rtol=2e-2, atol=2e-2)
weight = torch.randn(width, width, device=device) / width**0.5
q, scale = quantize_per_channel(weight)
dequantized64 = q.double() * scale.double()[:, None]
for m in (1, 3):
    x = torch.randn(m, width, device=device, dtype=act_dtype)
    reference = x.double() @ dequantized64.T
    run.check_close(f"int8_dequant_matmul.m{m}", int8_dequant_matmul(x, q, scale), reference,
                    reference_name="float64 x @ dequantized W^T", **TOL)
    run.check_close(f"{fused_name}.m{m}", int8_fused(x, q, scale), reference,
                    reference_name="float64 x @ dequantized W^T", **TOL)
if not run.device.is_gpu:  # the Triton kernel, interpreted, on a small shape
    small_q, small_scale = quantize_per_channel(torch.randn(96, 160) / 160**0.5)
    for m in (1, 3):
        x = torch.randn(m, 160, dtype=act_dtype)
        run.check_close(f"int8_fused_triton.interpreter.m{m}", int8_fused_triton(x, small_q, small_scale),
                        x.double() @ (small_q.double() * small_scale.double()[:, None]).T,
                        reference_name="float64 x @ dequantized W^T", **TOL)
    run.not_run("int8_fused_triton (timing)", "no GPU here: the Triton kernel ran only in Triton's interpreter, "
                "for its correctness check")
x = torch.randn(16, width, device=device, dtype=torch.float64)
quant_error = (x @ dequantized64.T - x @ weight.double().T).norm() / (x @ weight.double().T).norm()
run.metric("linear.quantization_rel_error", float(quant_error), "fraction",
           label="INT8 per-channel weights vs the original weights: relative error of x @ W^T (float64)")

# %% [markdown]
# ## One linear layer at decode shapes
#
# `rows` is the number of tokens in the step (the batch size, in decode). Effective bandwidth
# counts the weight bytes each variant *must* read (4, 2 or 1 per weight) over the time: while it
# stays near the copy ceiling and the time stays flat as rows grow, the layer is memory-bound.

# %%
variants = {f"{str(d)[6:]}": (lambda x, w=weight.to(d): F.linear(x, w), d, d.itemsize) for d in full_dtypes}
variants["int8_dequant_matmul"] = (lambda x: int8_dequant_matmul(x, q, scale), act_dtype, 1)
variants[fused_name] = (lambda x: int8_fused(x, q, scale), act_dtype, 1)
linear = {}  # (variant, rows) -> Timing
for rows in rows_sweep:
    for name, (fn, dtype, bytes_per_weight) in variants.items():
        x = torch.randn(rows, width, device=device, dtype=dtype)
        linear[name, rows] = run.time(lambda: fn(x))
        run.log(f"  rows {rows:4d} {name:22s} {linear[name, rows].median_s * 1e3:9.3f} ms "
                f"{width * width * bytes_per_weight / linear[name, rows].median_s / 1e9:8.1f} GB/s")

base = full_dtypes[0]
base_name = str(base)[6:]
table_rows = []
for rows in rows_sweep:
    for name, (_, _, bytes_per_weight) in variants.items():
        t = linear[name, rows]
        table_rows.append([rows, name, round(t.median_s * 1e3, 3), f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}",
                           round(width * width * bytes_per_weight / t.median_s / 1e9, 1),
                           round(linear[base_name, rows].median_s / t.median_s, 2)])
run.table("linear", f"One {width}x{width} linear layer, decode shapes",
          ["rows", "variant", "median (ms)", "p10-p90 (ms)", "weight GB/s", f"speedup vs {base_name}"], table_rows)
# the finding: up to how many rows the fused INT8 kernel clearly beats full precision, and its speedup at one row
ahead = []  # the row counts, from the first, at which fused INT8 is faster by more than TITLE_TIE
for rows in rows_sweep:
    if linear[fused_name, rows].median_s * TITLE_TIE >= linear[base_name, rows].median_s:
        break
    ahead.append(rows)
speedup_1 = linear[base_name, rows_sweep[0]].median_s / linear[fused_name, rows_sweep[0]].median_s
where = "at every row count" if ahead == rows_sweep else f"up to {ahead[-1]} rows" if len(ahead) > 1 else "at 1 row"
linear_title = (f"{width}x{width} linear: fused INT8 beats {base_name} {where} ({speedup_1:.2g}x at 1 row)" if ahead
                else f"{width}x{width} linear: fused INT8 {1 / speedup_1:.2g}x slower than {base_name} at 1 row")
run.series("linear_time", linear_title, "rows (tokens in the step)", "ms",
           {name: (rows_sweep, [linear[name, r].median_s * 1e3 for r in rows_sweep],
                   [linear[name, r] for r in rows_sweep]) for name in variants}, x_log=True)
r1 = rows_sweep[0]
for name, (_, _, bytes_per_weight) in variants.items():
    run.metric(f"linear.{name}.rows1_ms", linear[name, r1].median_s * 1e3, "ms", label=f"{name}, one row: median time")
    run.metric(f"linear.{name}.rows1_gbps", width * width * bytes_per_weight / linear[name, r1].median_s / 1e9, "GB/s",
               ceiling="copy_bandwidth", label=f"{name}, one row: weight bytes read per second")
    run.metric(f"linear.{name}.speedup_rows1", linear[base_name, r1].median_s / linear[name, r1].median_s, "x",
               label=f"{name} over {base_name}, one row")
    if not run.device.is_gpu:
        run.metric(f"linear.{name}.rows1_of_one_thread_copy",
                   width * width * bytes_per_weight / linear[name, r1].median_s / 1e9 / one_thread_copy_gbps, "fraction",
                   label=f"{name}, one row: weight bytes per second over the one-thread copy bandwidth")
rows_mid = rows_sweep[min(2, len(rows_sweep) - 1)]
for name in variants:
    run.metric(f"linear.{name}.time_rows{rows_mid}_over_rows1", linear[name, rows_mid].median_s / linear[name, r1].median_s,
               "x", label=f"{name}: time at {rows_mid} rows over 1 row ({rows_mid}x the FLOPs)")

# %% [markdown]
# ## The whole model, quantized
#
# Every linear layer inside the blocks of the trained target gets INT8 weights (the tied
# embedding / output matrix stays as is). Agreement is measured on held-out text, teacher-forced:
# the share of positions where both models pick the same next byte, and the held-out loss of
# each. Then one decode step (batch 1) of each is timed.

# %%
class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        q, scale = quantize_per_channel(linear.weight.detach().float())
        self.register_buffer("q", q)
        self.register_buffer("scale", scale.to(act_dtype))

    def forward(self, x):
        return int8_fused(x.to(act_dtype), self.q, self.scale).to(x.dtype)


def quantize_model(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model)
    for block in model.blocks:
        for parent in (block, block.attn):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, Int8Linear(child))
    return model


target, _, _ = trained_models(device, run.size, log=run.log)
serving_dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
model = target.to(serving_dtype)
model_int8 = quantize_model(model)
text = held_out_prompts(8, min(256, model.cfg.max_len), seed=4).to(device)
with torch.no_grad():
    logits_full, logits_int8 = model(text[:, :-1]).float(), model_int8(text[:, :-1]).float()
agreement = float((logits_full.argmax(-1) == logits_int8.argmax(-1)).float().mean())
loss_full = float(F.cross_entropy(logits_full.reshape(-1, 256), text[:, 1:].reshape(-1)))
loss_int8 = float(F.cross_entropy(logits_int8.reshape(-1, 256), text[:, 1:].reshape(-1)))
run.check("model.int8_agrees", agreement > 0.9,
          f"INT8 and {str(serving_dtype)[6:]} models pick the same next byte at {100 * agreement:.1f}% of held-out positions")
run.metric("model.top1_agreement", agreement, "fraction", label="teacher-forced next-byte agreement, INT8 vs full precision")
run.metric("model.loss_full", loss_full, "nats", label=f"held-out loss, {str(serving_dtype)[6:]} model")
run.metric("model.loss_int8", loss_int8, "nats", label="held-out loss, INT8-weight model")

step_times = {}
for name, m in (("full", model), ("int8", model_int8)):
    cache = m.new_cache(1, context + 1)
    with torch.no_grad():
        m(text[:1, :1].repeat(1, context), cache)

    def step(m=m, cache=cache):
        cache.length = context
        with torch.no_grad():
            return m(text[:1, :1], cache)
    step_times[name] = run.time(step, flush=False)
run.metric("model.decode_ms_full", step_times["full"].median_s * 1e3, "ms", label="one decode step, full precision")
run.metric("model.decode_ms_int8", step_times["int8"].median_s * 1e3, "ms", label="one decode step, INT8 weights")
run.metric("model.int8_speedup", step_times["full"].median_s / step_times["int8"].median_s, "x",
           label="decode step: full precision time over INT8 time")
weights_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
run.metric("model.weights_mib", weights_mib, "MiB", label="the model's weights, full precision", origin="computed")

# %% [markdown]
# ## CUDA graphs for the decode step
#
# A small model's decode step is a few hundred tiny kernels; on a GPU each launch costs a few
# microseconds of CPU time, which can exceed the kernel itself. A CUDA graph records the whole
# step once and replays it with one launch. That needs fixed shapes and fixed addresses, which is
# what `decode_static` provides: the position is a tensor, the cache is written with
# `index_copy_`, and attention runs over the whole preallocated cache with a mask. Its output must
# equal the ordinary decode step's (checked on every device); the graph itself needs a GPU.

# %%
cache_a, cache_b = model.new_cache(1, context + 1), model.new_cache(1, context + 1)
prefix = text[:1, :context] if text.shape[1] >= context else text[:1, :1].repeat(1, context)
with torch.no_grad():
    model(prefix, cache_a)
    model(prefix, cache_b)
    dynamic = model(text[:1, :1], cache_a)
    position = torch.tensor([context], device=device)
    static = model.decode_static(text[:1, :1], cache_b, position)
run.check_close("decode_static_equals_decode", static.float(), dynamic.float(),
                rtol=1e-4 if serving_dtype == torch.float32 else 2e-2, atol=1e-4 if serving_dtype == torch.float32 else 5e-2,
                reference_name="ordinary decode step")

if run.device.is_gpu:
    static_tokens = text[:1, :1].clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):  # warm up outside the capture (allocator, cuBLAS workspaces)
            model.decode_static(static_tokens, cache_b, position)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        graph_out = model.decode_static(static_tokens, cache_b, position)
    graph.replay()
    with torch.no_grad():
        eager_out = model.decode_static(static_tokens, cache_b, position)
    run.check_close("cuda_graph_replay_equals_eager", graph_out.float(), eager_out.float(), rtol=1e-3, atol=1e-3,
                    reference_name="the same step, eager")
    with torch.no_grad():
        eager = run.time(lambda: model.decode_static(static_tokens, cache_b, position), flush=False)
    replay = run.time(graph.replay, flush=False)
    run.metric("cuda_graph.eager_us", eager.median_s * 1e6, "us", label="decode step (static shapes), eager launches")
    run.metric("cuda_graph.replay_us", replay.median_s * 1e6, "us", label="the same step, one CUDA-graph replay")
    run.metric("cuda_graph.speedup", eager.median_s / replay.median_s, "x", label="CUDA-graph replay over eager")
else:
    run.not_run("cuda_graph", "CUDA graphs need a GPU; the static-shape decode step they capture was checked "
                "against the ordinary one above")
run.save()
