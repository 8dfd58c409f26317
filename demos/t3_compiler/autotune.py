# %% [markdown]
# # Autotuning: a Triton matmul's tile sizes and warps
#
# A tiled matmul kernel has knobs that do not change the answer but change the speed by large
# factors: the tile each program computes (`BLOCK_M x BLOCK_N`), how much of K it loads per step
# (`BLOCK_K`), how many warps share a program (`num_warps`) and how many loads are kept in flight
# (`num_stages`, software pipelining). Big tiles reuse each loaded byte more but need more
# registers and shared memory and launch fewer programs; small tiles fill more SMs on small
# problems. The best choice depends on the GPU *and* on the shape, which is why autotuners
# (`triton.autotune`, Inductor's `max-autotune`, cuBLAS's heuristics) choose per shape.
#
# The demo sweeps a set of configurations on two shapes (a square matmul and a skinny one, like
# a decode step's) on a GPU. Without a GPU, every configuration still runs in Triton's interpreter,
# on small shapes with ragged edges, to check that each one computes the right answer; nothing is
# timed there.

# %%
import json
import os
import subprocess
import sys

import torch

from demos.harness.run import start
from demos.t11_gpu._cuda import occupancy
from records.paths import REPO_ROOT

run = start(
    "autotune",
    title="Autotuning a Triton matmul: tile sizes, warps, stages",
    sizes={  # (M, N, K) shapes: a square one and a skinny one
        "tiny": [(48, 40, 72), (16, 40, 72)],
        "small": [(100, 72, 136), (16, 72, 136)],
        "full": [(4096, 4096, 4096), (64, 8192, 8192)],
    },
)
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32

# Imported after start(): without a GPU, start() has switched Triton to its interpreter.
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from demos.t3_compiler._row_registers import add_ln_gelu_row  # noqa: E402

# %% [markdown]
# ## The kernel
#
# Each program computes one `BLOCK_M x BLOCK_N` tile of C, walking K in steps of `BLOCK_K` and
# accumulating in fp32. Masks handle edges that are not multiples of the tile.

# %%
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b, block_m, block_n, block_k, num_warps, num_stages):
    m, k = a.shape
    _, n = b.shape
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages)
    return c


# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): small to large tiles, few to many warps.
CONFIGS = [
    (16, 16, 16, 1, 2),
    (32, 32, 32, 2, 2),
    (64, 64, 32, 4, 2),
    (64, 64, 64, 4, 3),
    (128, 64, 32, 4, 3),
    (64, 128, 32, 4, 4),
    (128, 128, 32, 4, 3),
    (128, 128, 64, 8, 3),
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (16, 128, 128, 4, 4),
    (16, 256, 64, 4, 4),
]


def label(config) -> str:
    bm, bn, bk, w, s = config
    return f"{bm}x{bn}x{bk} w{w} s{s}"


# %% [markdown]
# ## Correctness of every configuration
#
# Each configuration on each shape against a float64 product of the same inputs. Without a GPU
# this runs in Triton's interpreter, which executes each program with NumPy and ignores
# `num_warps` and `num_stages`; it checks the indexing and masking, which is where tiling bugs
# live. On a GPU the first call also compiles the configuration, which is timed apart.

# %%
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}[dtype]
compile_s = {}
for m, n, k in run.sizes:
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    reference = a.double() @ b.double()
    for config in CONFIGS:
        out, compile_s[config, (m, n, k)] = run.first_call(lambda: matmul(a, b, *config))
        # bf16 rounds each output once; scale the tolerance with sqrt(K) like an fp32 accumulation error
        run.check_close(f"{m}x{n}x{k}.{label(config).replace(' ', '_')}", out, reference,
                        rtol=TOLERANCE["rtol"], atol=TOLERANCE["atol"] * (k / 128) ** 0.5)

# %% [markdown]
# ## The sweep (GPU only)
#
# Each configuration's median time on each shape, as TFLOP/s (2MNK / time) and as a fraction of
# the bf16 matmul ceiling measured in the same run (PyTorch's matmul, i.e. cuBLAS, on a large
# square problem), next to cuBLAS on the same shape. Then `triton.autotune` is given the same
# list and left to choose: it times every configuration on the first call for each shape and
# caches the winner.

# %%
if not run.device.is_gpu:
    run.not_run("sweep timing", "no GPU here: the configurations ran only in Triton's interpreter, which checks the "
                "answer but whose speed says nothing about a GPU (it also ignores num_warps and num_stages)")
    run.not_run("triton.autotune", "no GPU here: the autotuner times each configuration on the device")
else:
    rows = []
    for m, n, k in run.sizes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        flops = 2 * m * n * k
        tflops = {config: flops / run.time(lambda: matmul(a, b, *config)).median_s / 1e12 for config in CONFIGS}
        cublas = flops / run.time(lambda: a @ b).median_s / 1e12
        shape = f"{m}x{n}x{k}"
        for config, value in sorted(tflops.items(), key=lambda kv: -kv[1]):
            rows.append([shape, label(config), round(value, 1),
                         round(value / run.ceilings["matmul_bf16"]["value"], 3), round(value / cublas, 2),
                         round(compile_s[config, (m, n, k)], 2)])
        best, worst = max(tflops, key=tflops.get), min(tflops, key=tflops.get)
        key = "square" if m == n else "skinny"
        run.metric(f"{key}.best_tflops", tflops[best], "TFLOP/s", ceiling="matmul_bf16",
                   label=f"{shape}: best configuration ({label(best)})")
        run.metric(f"{key}.worst_tflops", tflops[worst], "TFLOP/s", ceiling="matmul_bf16",
                   label=f"{shape}: worst configuration ({label(worst)})")
        run.metric(f"{key}.best_over_worst", tflops[best] / tflops[worst], "x", label=f"{shape}: best / worst configuration")
        run.metric(f"{key}.cublas_tflops", cublas, "TFLOP/s", ceiling="matmul_bf16", label=f"{shape}: torch.matmul (cuBLAS)")
        run.metric(f"{key}.best_over_cublas", tflops[best] / cublas, "x", label=f"{shape}: best configuration / cuBLAS")
        run.series(f"sweep_{key}", f"{shape} ({str(dtype).removeprefix('torch.')}): TFLOP/s per configuration",
                   "configuration number (order of the list in the code)", "TFLOP/s",
                   {"triton": (list(range(len(CONFIGS))), [tflops[c] for c in CONFIGS])},
                   hlines={"cuBLAS, same shape": cublas})

        tuned = triton.autotune(
            configs=[triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
                     for bm, bn, bk, w, s in CONFIGS],
            key=["M", "N", "K"])(matmul_kernel)
        c = torch.empty(m, n, device=device, dtype=dtype)

        def grid(meta):
            return triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"])

        tuned[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        run.check_close(f"{shape}.triton_autotune", c, a.double() @ b.double(), rtol=TOLERANCE["rtol"],
                        atol=TOLERANCE["atol"] * (k / 128) ** 0.5)
        chosen = tuned.best_config
        chosen_config = (chosen.kwargs["BLOCK_M"], chosen.kwargs["BLOCK_N"], chosen.kwargs["BLOCK_K"], chosen.num_warps,
                         chosen.num_stages)
        run.metric(f"{key}.autotune_choice_over_best", tflops.get(chosen_config, float("nan")) / tflops[best], "x",
                   label=f"{shape}: triton.autotune's choice ({label(chosen_config)}), as a fraction of the sweep's best")
    run.table("sweep", "Triton matmul configurations, fastest first per shape",
              ["shape MxNxK", "BLOCK_MxBLOCK_NxBLOCK_K, warps, stages", "TFLOP/s", "fraction of bf16 ceiling",
               "vs cuBLAS", "first call: compile (s)"], rows)


# %% [markdown]
# ## Register pressure in a fused row kernel (compiled for sm_90 on any host)
#
# Fusion keeps intermediates in registers, so a fused kernel holds at once everything live across its
# reductions. The kernel_fusion demo's add + LayerNorm + GELU kernel (`_row_registers.py`) runs one program per
# row and keeps the whole row in registers from the loads, through the mean and the variance, to the GELU: a
# *persistent* reduction, with row width / (32 x num_warps) values of each live tensor per thread. Each case is
# compiled for sm_90 by Triton, which runs ptxas as a GPU run would, in a child process (one whose Triton runs
# the interpreter cannot compile); ptxas's report gives registers and spill bytes per thread, and the T11
# demos' occupancy formula (`demos/t11_gpu/_cuda.py`) turns registers into resident warps. `maxnreg` is
# Triton's register cap (PTX's `.maxnreg`), as `-maxrregcount` and `__launch_bounds__` are for CUDA C.

# %%
# (row width, num_warps, maxnreg or None)
ROW_CASES = [(4096, 8, None), (16384, 8, None), (16384, 8, 128), (16384, 4, None), (16384, 32, None)]


def row_key(width, warps, cap) -> str:
    return f"{width}_w{warps}" + (f"_cap{cap}" if cap else "")


def row_inputs(rows, width, dtype):
    return (torch.randn(rows, width, device=device, dtype=dtype), torch.randn(rows, width, device=device, dtype=dtype),
            torch.rand(width, device=device, dtype=dtype) + 0.5, torch.randn(width, device=device, dtype=dtype))


def row_reference(x, r, w, b):
    h = x.double() + r.double()
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(h, (h.shape[-1],), w.double(), b.double(), 1e-5))


x, r, w, b = row_inputs(3, 1000, dtype)  # a ragged row (1000 of BLOCK 1024): the masks matter
y = torch.empty_like(x)
add_ln_gelu_row[(3,)](x, r, w, b, y, 1000, 1e-5, BLOCK=1024, num_warps=8)
run.check_close("row_kernel.3x1000", y, row_reference(x, r, w, b), **TOLERANCE)

child = subprocess.run([sys.executable, "-m", "demos.t3_compiler._row_registers", json.dumps(ROW_CASES)], cwd=REPO_ROOT,
                       env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, capture_output=True,
                       text=True, timeout=600)
if child.returncode != 0:  # a Triton without these compile options must not lose the sweep above
    run.not_run("row kernel: ptxas report", "compiling for sm_90 failed: "
                + (child.stderr.strip().splitlines() or ["no output"])[-1][:200])
else:
    reports = json.loads(child.stdout.strip().splitlines()[-1])
    table_rows = []
    for (width, warps, cap), u in zip(ROW_CASES, reports):
        key, where = row_key(width, warps, cap), f"row of {width}, {warps} warps" + (f", maxnreg={cap}" if cap else "")
        occ = occupancy(32 * warps, u["registers"], u["shared_bytes"])
        table_rows.append([width, warps, cap or "none", width // (32 * warps), u["registers"], u["spill_store_bytes"],
                           u["spill_load_bytes"], occ["blocks_per_sm"], occ["active_warps"],
                           round(100 * occ["occupancy"], 1), occ["limiter"]])
        run.metric(f"row_kernel.{key}.registers", u["registers"], "registers",
                   label=f"{where}: registers per thread (ptxas, sm_90)", origin="static")
        run.metric(f"row_kernel.{key}.spill_bytes", u["spill_store_bytes"] + u["spill_load_bytes"], "bytes",
                   label=f"{where}: spill stores + loads per thread (ptxas)", origin="static")
        run.metric(f"row_kernel.{key}.occupancy", 100 * occ["occupancy"], "%", label=f"{where}: theoretical occupancy",
                   origin="static")
    run.table("row_kernel", "Fused add + LayerNorm + GELU, one row per program, compiled for sm_90: ptxas and the "
              "occupancy formula", ["row width", "warps", "maxnreg", "values per thread", "regs/thread",
                                    "spill stores (B)", "spill loads (B)", "blocks/SM", "warps/SM", "occupancy %",
                                    "limited by"], table_rows)
    capped = [(u["registers"], cap) for (_, _, cap), u in zip(ROW_CASES, reports) if cap]
    run.check("row_kernel.cap_respected", all(regs <= cap for regs, cap in capped),
              "every capped build uses at most its cap")

# %% [markdown]
# On a GPU each case is also checked and timed on a large input, as bandwidth against the same-run copy: where
# spills or a lower occupancy cost time, and where they do not.

# %%
if not run.device.is_gpu:
    run.not_run("row kernel timing", "no GPU here: the cases above are compiled for sm_90 and read from ptxas, not run")
else:
    try:  # a launch option this GPU's Triton refuses must not lose the sweep above
        for width, warps, cap in ROW_CASES:
            key, options = row_key(width, warps, cap), {"num_warps": warps} | ({"maxnreg": cap} if cap else {})
            x, r, w, b = row_inputs(2**26 // width, width, dtype)  # 128 MiB per bf16 tensor
            y = torch.empty_like(x)
            row_grid = (x.shape[0],)
            launch = lambda: add_ln_gelu_row[row_grid](x, r, w, b, y, width, 1e-5, BLOCK=width, **options)  # noqa: E731
            launch()
            run.check_close(f"row_kernel.{key}", y[:64], row_reference(x[:64], r[:64], w, b), **TOLERANCE)
            gbps = 3 * x.numel() * x.element_size() / run.time(launch).median_s / 1e9  # x and r read, y written
            run.metric(f"row_kernel.{key}.gbps", gbps, "GB/s", ceiling="copy_bandwidth", kind="memory",
                       label=f"row of {width}, {warps} warps, maxnreg {cap or 'none'}: effective bandwidth")
    except Exception as e:  # noqa: BLE001
        run.not_run("row kernel timing", f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}")

run.save()
