# %% [markdown]
# # Matmul + bias + GELU: the epilogue fused, or three kernels
#
# An MLP's first layer is `gelu(x @ W + b)`. Run eagerly op by op it is three kernels: the matmul writes
# its M x N output, the bias add reads it and writes it again, GELU reads it and writes it once more.
# The matmul already holds each output tile in registers before storing it; applying the bias and the
# GELU there (the *epilogue*) stores the final value once. Bytes of the output that move, in elements:
#
# ```text
# separate: matmul writes MN; add reads MN, writes MN; GELU reads MN, writes MN  = 5 MN
# fused epilogue: matmul writes MN                                              = 1 MN
# ```
#
# Whether that matters depends on how the epilogue's time compares with the matmul's: with a large K the
# matmul's 2MNK FLOPs dwarf the 4 MN extra elements; with a small K (or on a GPU whose matmul is
# hundreds of times faster than its memory per element) it does not. The demo runs five versions and
# checks each against float64: eager in three kernels, eager with the bias folded into the library call
# (`addmm`), `torch.compile`, and a Triton matmul whose epilogue adds the bias and applies the GELU
# before its only store.

# %%
import re

import torch
import torch.nn.functional as F

from demos.harness.run import start

run = start("matmul_epilogue", title="Matmul + bias + GELU: fused epilogue vs separate kernels",
            sizes={"tiny": (256, 32, 128), "small": (4096, 64, 1024), "full": (8192, 1024, 4096)},
            cpu_threads=1)
M, K, N = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=3e-2)}[dtype]

# Imported after start(): without a GPU, start() has switched Triton to its interpreter.
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# %% [markdown]
# ## The versions

# %%
def separate(x, w, b):
    y = x @ w  # kernel 1: writes MN
    y = y + b  # kernel 2: reads MN, writes MN
    return F.gelu(y)  # kernel 3: reads MN, writes MN


def library_bias(x, w, b):
    return F.gelu(torch.addmm(b, x, w))  # the library adds the bias as it writes (beta * C), then GELU


compiled = torch.compile(separate, dynamic=False)
from torch._inductor.utils import run_and_get_code  # noqa: E402  (the first call also returns Inductor's code)


@triton.jit
def matmul_bias_gelu_kernel(a_ptr, w_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_wk, stride_cm,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k0 * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :],
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + kk[:, None] * stride_wk + offs_n[None, :],
                    mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, w)
    # The epilogue: bias and exact GELU on the fp32 accumulator, then the only store.
    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    h = acc + bias[None, :]
    out = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], out.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def triton_fused(x, w, b, block=(128, 128, 64), warps=8, stages=3):
    m, k = x.shape
    n = w.shape[1]
    c = torch.empty(m, n, device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(m, block[0]), triton.cdiv(n, block[1]))
    matmul_bias_gelu_kernel[grid](x, w, b, c, m, n, k, x.stride(0), w.stride(0), c.stride(0),
                                  BLOCK_M=block[0], BLOCK_N=block[1], BLOCK_K=block[2],
                                  num_warps=warps, num_stages=stages)
    return c


# %% [markdown]
# ## Correctness
#
# Every version against a float64 reference. The Triton kernel is checked on a small ragged shape (edges
# that are not multiples of the tile, so the masks matter); without a GPU it runs in Triton's
# interpreter there, which checks the indexing and the epilogue but says nothing about speed.

# %%
x = torch.randn(M, K, device=device, dtype=dtype)
w = torch.randn(K, N, device=device, dtype=dtype) / K**0.5
b = torch.randn(N, device=device, dtype=dtype)
reference = F.gelu(x.double() @ w.double() + b.double())
with torch.no_grad():
    run.check_close("separate", separate(x, w, b), reference, **TOL)
    run.check_close("library_bias", library_bias(x, w, b), reference, **TOL)
    (out, sources), compile_s = run.first_call(lambda: run_and_get_code(compiled, x, w, b))
    run.check_close("compiled", out, reference, **TOL)
    xs, ws, bs = (torch.randn(100, 72, device=device, dtype=dtype), torch.randn(72, 88, device=device, dtype=dtype) / 8,
                  torch.randn(88, device=device, dtype=dtype))
    small_block = (32, 32, 32) if not run.device.is_gpu else (64, 64, 32)
    run.check_close("triton_fused.ragged", triton_fused(xs, ws, bs, block=small_block, warps=4, stages=2),
                    F.gelu(xs.double() @ ws.double() + bs.double()), **TOL,
                    reference_name="float64, shape 100x72 @ 72x88")
run.metric("compiled.first_call_s", compile_s, "s", label="torch.compile first call: trace + compile + run")

wrapper = sources[0][sources[0].find("def call("):]
library = sorted(set(re.findall(r"extern_kernels\.(\w+)", wrapper)))
generated = len(re.findall(r"^(\w+) = async_compile\.", sources[0], re.M))
run.table("inductor_plan", "What Inductor's wrapper calls for gelu(x @ W + b)", ["kind", "calls"],
          [["library (extern) kernels", ", ".join(library) or "none"],
           ["generated kernels", generated]])
run.artifact("inductor_wrapper_call", wrapper[: wrapper.find("\n\n\n")].strip())

# %% [markdown]
# ## Time per version
#
# Each step of the separate version is also timed alone, to show what share of the time the epilogue
# (the bias add and the GELU) takes: that share is all that fusing it can remove.

# %%
flops = 2 * M * N * K
epilogue_bytes = 4 * M * N * x.element_size()  # the write + read round trips fusion removes
with torch.no_grad():
    mm_out = x @ w
    biased = mm_out + b
    steps = {"matmul": run.time(lambda: x @ w), "bias add": run.time(lambda: mm_out + b),
             "GELU": run.time(lambda: F.gelu(biased))}
    versions = {"separate (3 kernels)": run.time(lambda: separate(x, w, b)),
                "bias in the library call (addmm) + GELU": run.time(lambda: library_bias(x, w, b)),
                "torch.compile": run.time(lambda: compiled(x, w, b))}
    if run.device.is_gpu:
        run.check_close("triton_fused", triton_fused(x, w, b), reference, **TOL)
        versions["Triton, epilogue fused"] = run.time(lambda: triton_fused(x, w, b))
    else:
        run.not_run("Triton fused epilogue (timing)", "no GPU: the kernel ran only in Triton's interpreter "
                    "(correct on a ragged shape above), whose speed says nothing about a GPU")

base = versions["separate (3 kernels)"].median_s
run.table("versions", f"gelu(x @ W + b), M={M} K={K} N={N} ({str(dtype).removeprefix('torch.')})",
          ["version", "median (ms)", "p10-p90 (ms)", "over separate"],
          [[name, round(t.median_s * 1e3, 3), f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}", round(base / t.median_s, 2)]
           for name, t in {**{f"step: {k}": v for k, v in steps.items()}, **versions}.items()])
epilogue_s = steps["bias add"].median_s + steps["GELU"].median_s
run.metric("separate.epilogue_share", epilogue_s / (epilogue_s + steps["matmul"].median_s), "fraction",
           label="bias add + GELU as a share of the three steps timed alone")
run.metric("separate.ms", base * 1e3, "ms", label="separate: matmul, bias add, GELU")
# Rates without a ceiling fraction: at a K this small the library matmul is far from its peak, and the
# epilogue's rate is set by the erf arithmetic on a CPU; the numbers say how fast each part ran, nothing more.
run.metric("matmul.tflops", flops / steps["matmul"].median_s / 1e12, "TFLOP/s",
           dtype=str(dtype).removeprefix("torch."),
           label="the matmul alone")
run.metric("epilogue.gbps", epilogue_bytes / epilogue_s / 1e9, "GB/s", kind="memory",
           cache_resident=run.cache_resident(2 * M * N * x.element_size()),
           label="bias add + GELU, separate: bytes moved (4 MN elements) over their time")
run.metric("library_bias.speedup", base / versions["bias in the library call (addmm) + GELU"].median_s, "x",
           label="addmm + GELU over separate")
run.metric("compiled.speedup", base / versions["torch.compile"].median_s, "x", label="torch.compile over separate")
if "Triton, epilogue fused" in versions:
    run.metric("triton_fused.speedup", base / versions["Triton, epilogue fused"].median_s, "x",
               label="Triton matmul with fused bias + GELU over separate")
    run.metric("triton_fused.tflops", flops / versions["Triton, epilogue fused"].median_s / 1e12, "TFLOP/s",
               ceiling="matmul_bf16", label="Triton fused kernel, matmul FLOPs over its time")

run.save()
