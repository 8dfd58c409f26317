# %% [markdown]
# # Tensor cores: dtypes, and aligned vs misaligned K and N
#
# Tensor cores execute small matrix multiply-accumulates per warp (or, on Hopper, per warpgroup)
# on 16-bit, 8-bit or TF32 inputs with wider accumulators. Library GEMMs reach them through tiles
# whose loads are 16-byte vectors: when K or N (and so the leading dimensions) is not a multiple of
# 16 bytes (8 bf16 elements, 4 fp32 elements), cuBLAS must pick a kernel with narrower loads or
# extra masking, and throughput drops even though the FLOPs barely changed. Plain fp32 does not use
# tensor cores at all unless TF32 is allowed (`torch.backends.cuda.matmul.allow_tf32`, or
# `torch.set_float32_matmul_precision("high")`).
#
# The sweep: C = A @ B with M fixed, K = N = a multiple of 64, that +8, +1 (odd), -1 (odd), in
# fp32, TF32 (GPU only) and bf16. On a GPU the rates are fractions of the datasheet peak for the
# dtype and of the same-run matmul ceiling; on a CPU the same sweep runs through PyTorch's CPU GEMM
# (oneDNN/BLAS), which has vector units but no tensor cores, so the page can set what a CPU shows
# beside what a GPU is expected to.

# %%
import torch

from demos.harness.run import start

run = start(
    "tensor_cores",
    title="Tensor cores: fp32 vs TF32 vs bf16, aligned vs misaligned K and N",
    sizes={"tiny": (256, 256), "small": (512, 768), "full": (8192, 8192)},  # (M, base K = N)
    cpu_threads=1,
)
m, base = run.sizes
device = run.torch_device
gpu = run.device.is_gpu
SHAPES = {"aligned": base, "plus8": base + 8, "plus1": base + 1, "minus1": base - 1}
PRECISIONS = {"fp32": (torch.float32, "highest"), "tf32": (torch.float32, "high"), "bf16": (torch.bfloat16, "highest")}
CEILING = {"fp32": "matmul_fp32", "bf16": "matmul_bf16"}
DATASHEET_DTYPE = {"fp32": "float32", "tf32": "tfloat32", "bf16": "bfloat16"}

# %% [markdown]
# ## Correctness: every precision against a float64 product
#
# Tolerances follow each format's rounding error times sqrt(K), the typical growth of K independent
# rounding errors, with room for the largest of many elements. fp32: 2^-24 per operation. bf16: the
# inputs are rounded to bf16 in the reference too, so what is left is fp32 accumulation, the bf16
# output's own rounding (at most 2^-8 relative: 8 significant bits) and, when cuBLAS splits K (PyTorch
# allows reduced-precision reductions in bf16 GEMMs by default), the bf16 rounding of each partial sum:
# an absolute error near 2^-8 x sqrt(K) whatever the element's value. Emulated at K = 8193 (fp32
# accumulation, bf16 partials, 2M elements), the largest error is 2.9e-3 x (sqrt(K) + |value|) with one
# rounding and up to 1.1e-2 x (sqrt(K) + |value|) with 2 to 16 bf16 partials summed in fp32; 1.6e-2
# holds both.
# TF32 rounds the fp32 inputs inside the matmul, to 10 explicit mantissa bits: up to 2^-11 relative
# when rounded to nearest, up to 2^-10 (and biased towards zero) when the low bits are simply
# dropped, as a tensor core reading fp32 tiles straight from shared memory does. Over K = 8193
# products of unit normals that is a random error of about 0.04 per element (one standard deviation)
# plus, when truncating, 2^-10 of the value: the largest of half a million elements sits near 0.2 +
# 1e-3 x |value|, where a 2e-3 tolerance (0.18 + 2e-3 x |value|) would fail about one run in two.
# 5e-3 x sqrt(K) = 0.45 plus 5e-3 of the value holds it, and the fp32 tolerance (9e-4) still catches
# TF32 used where full fp32 was asked for.

# %%
TOL = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 1.6e-2}
a64 = torch.randn(64, base + 1, dtype=torch.float64, device=device)  # the float64 reference is computed on the device
b64 = torch.randn(base + 1, base + 1, dtype=torch.float64, device=device)
for name, (dtype, precision) in PRECISIONS.items():
    if name == "tf32" and not gpu:
        continue
    torch.set_float32_matmul_precision(precision)
    got = a64.to(device, dtype) @ b64.to(device, dtype)
    ref = a64.to(dtype).double() @ b64.to(dtype).double()  # rounded inputs, exact product
    scale = (base + 1) ** 0.5
    run.check_close(f"{name}.matmul", got, ref, rtol=TOL[name], atol=TOL[name] * scale)
torch.set_float32_matmul_precision("highest")
if not gpu:
    run.not_run("tf32", "TF32 is a tensor-core format of NVIDIA GPUs (Ampere and later); a CPU has no TF32 mode")

# %% [markdown]
# ## The sweep
#
# FLOP rate = 2 M N K / time; the shapes are timed in turn, twice, and each keeps its better median.
# Each rate is stored with its dtype (so the check compares it with the
# datasheet peak for that dtype) and, on a GPU, for fp32 and bf16, as a fraction of the same-run
# square matmul ceiling. The ratio misaligned / aligned is what the page discusses.

# %%
rows = []
for name, (dtype, precision) in PRECISIONS.items():
    if name == "tf32" and not gpu:
        continue
    torch.set_float32_matmul_precision(precision)
    operands = {shape: (torch.randn(m, kn, device=device, dtype=dtype), torch.randn(kn, kn, device=device, dtype=dtype))
                for shape, kn in SHAPES.items()}
    best = {}
    for _ in range(2):  # the shapes take turns, twice; each keeps its better median (load on a shared
        for shape, (a, b) in operands.items():  # machine only ever slows a run down)
            t = run.time(lambda: a @ b)
            best[shape] = t if shape not in best or t.median_s < best[shape].median_s else best[shape]
    for shape, kn in SHAPES.items():
        t = best[shape]
        tflops = 2 * m * kn * kn / t.median_s / 1e12
        # On a CPU the ceiling (a square product on every thread, measured while other work runs) is too noisy
        # a yardstick for a one-thread product; the rate is still checked against the dtype's bound.
        run.metric(f"{name}.{shape}.tflops", tflops, "TFLOP/s", ceiling=CEILING.get(name) if gpu else None,
                   dtype=DATASHEET_DTYPE[name],
                   label=f"{name}, M={m}, K=N={kn}: matmul rate")
        rows.append([name, shape, m, kn, round(t.median_s * 1e3, 3), f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}",
                     round(tflops, 3)])
    aligned = run.metrics[f"{name}.aligned.tflops"]["value"]
    for shape in ("plus1", "minus1", "plus8"):
        run.metric(f"{name}.{shape}.vs_aligned", run.metrics[f"{name}.{shape}.tflops"]["value"] / aligned, "x",
                   label=f"{name}: speed (FLOP rate) at K=N={SHAPES[shape]} over the speed at K=N={base}")
torch.set_float32_matmul_precision("highest")
run.table("sweep", f"Matmul rate, M={m}, K=N around {base}",
          ["precision", "shape", "M", "K = N", "median (ms)", "p10-p90 (ms)", "TFLOP/s"], rows)

# %% [markdown]
# ## The fix for an odd size: pad, multiply, slice
#
# Padding K and N up to the next multiple of 8 costs a copy and (K+pad)(N+pad)/(KN) more FLOPs; it
# wins when the aligned kernel is faster by more than that. Padding with zeros changes nothing, so the
# sliced padded product is checked against the float64 product of the unpadded inputs, with the matmul
# tolerance of its precision above; on a GPU its time is compared with the odd-size product.
# Not against the odd-size product: K = 8193 and K = 8200 run different cuBLAS kernels, and where one
# splits K and rounds its partial sums to bf16 (values near sqrt(K) = 90, spaced 0.5 apart), two
# correct bf16 products differ by up to 2 on elements of any size, small ones included, where an
# fp32-sized 1e-3 x sqrt(K) = 0.09 was allowed.

# %%
dtype = torch.bfloat16 if gpu else torch.float32
kn = SHAPES["plus1"]
padded_kn = -(-kn // 8) * 8
a = torch.randn(m, kn, device=device, dtype=dtype)
b = torch.randn(kn, kn, device=device, dtype=dtype)
a_p = torch.nn.functional.pad(a, (0, padded_kn - kn))
b_p = torch.nn.functional.pad(b, (0, padded_kn - kn, 0, padded_kn - kn))
every = max(1, m // 256)  # rows 0, every, 2 * every, ...: a few MB to compare, not the whole M x N product
ref = a[::every].double() @ b.double()  # the exact product of the unpadded inputs, computed on the device
tol = TOL["bf16" if gpu else "fp32"]
run.check_close("pad_slice", (a_p @ b_p)[::every, :kn], ref, rtol=tol, atol=tol * kn ** 0.5)
if gpu:
    t_odd, t_pad = run.time(lambda: a @ b).median_s, run.time(lambda: a_p @ b_p).median_s
    run.metric("pad.speedup", t_odd / t_pad, "x", label=f"bf16: time at odd K=N={kn} over time padded to {padded_kn} (pre-padded)")
else:
    run.not_run("pad vs odd timing", "the question is about GPU tensor-core kernels; see the CPU sweep above instead")
run.save()
