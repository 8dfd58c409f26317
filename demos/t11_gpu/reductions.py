# %% [markdown]
# # Reductions: atomics, a shared-memory tree, warp shuffles; and which are deterministic
#
# Summing n floats on a GPU happens in two levels: every block reduces its slice to one partial,
# then the partials are combined. Inside a block the classic way is a tree in shared memory
# (halve the active threads each step, `__syncthreads` between steps); the faster way sums each
# warp through registers with `__shfl_down_sync` (five steps, no shared memory, no barrier) and
# only the 32 warp results go through shared memory. Combining the partials with `atomicAdd` into
# one global float saves the second launch, but float addition is not associative: the order in
# which the atomics land depends on scheduling, so the bits of the result can change run to run.
# A second pass in a fixed order (one block over the partials) is bitwise reproducible.
#
# Without a GPU: the Triton kernels (a per-program tree via `tl.sum` + a second pass, and an
# atomic variant) are checked in the interpreter, the CUDA source is compiled for sm_90 and its PTX
# inspected, and the order-dependence that makes atomics non-deterministic is measured directly:
# the same partials summed in float32 in many orders. On a GPU: every variant's bandwidth and its
# bitwise spread over repeated runs, against `torch.sum`.

# %%
import re

import numpy as np
import torch

from demos.harness.run import start
from demos.t11_gpu import _cuda

run = start(
    "reductions",
    title="Reductions: atomics vs shared-memory tree vs warp shuffle, and determinism",
    sizes={"tiny": (2**16, 2**20), "small": (2**17, 2**24), "full": (2**20, 2**28)},  # (checked n, timed n)
    cpu_threads=1,
)
check_n, timed_n = run.sizes
device = run.torch_device
ORDERS = 64  # random summation orders tried
BLOCK = 1024  # elements per Triton program

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# %% [markdown]
# ## Triton: tree per program, then fixed further passes; or atomics

# %%
@triton.jit
def partial_sums_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + i, mask=i < n, other=0.0), axis=0))


@triton.jit
def atomic_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + i, mask=i < n, other=0.0), axis=0))


def triton_two_pass(x):
    """Partials of 1024 elements, then partials of the partials, ... until one value: a fixed order."""
    while x.numel() > 1:
        partials = torch.empty(triton.cdiv(x.numel(), BLOCK), device=x.device, dtype=torch.float32)
        partial_sums_kernel[(partials.numel(),)](x, partials, x.numel(), BLOCK=BLOCK)
        x = partials
    return x[0]


def triton_atomic(x):
    out = torch.zeros(1, device=x.device, dtype=torch.float32)
    atomic_sum_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    return out[0]


# %% [markdown]
# Correctness: against a float64 sum. A float32 sum's error is bounded by about (the number of
# additions along the longest chain) x 2^-24 x sum |x_i|. Every variant here adds at most 1024
# values in a tree and then at most n / 1024 partials one after another (the atomic worst case),
# so the tolerance is (n / 1024 + 64) x 2^-24 x sum |x_i|.

# %%
n_check = timed_n if run.device.is_gpu else check_n
x = torch.rand(n_check, device=device) - 0.3  # mostly positive: a nonzero sum, with cancellation
exact = x.double().sum()
bound = float((n_check / BLOCK + 64) * 2**-24 * x.double().abs().sum())
for name, fn in {"triton.two_pass": triton_two_pass, "triton.atomic": triton_atomic, "torch.sum": torch.sum}.items():
    run.check_close(name, fn(x).reshape(1), exact.reshape(1), rtol=0, atol=bound, reference_name="float64 sum")

# %% [markdown]
# ## Why atomics are not reproducible: the same numbers, in different orders
#
# Take the partials of the array above (one per 1024 elements, as the first pass leaves them) and
# add them into one float32 accumulator in many random orders, the way atomics from different
# blocks land. Every order is a valid answer; they differ in the last bits. A fixed order (the
# second pass) gives one answer every time.

# %%
head = x[:check_n]  # on a GPU x is the large array; the order experiment uses its first check_n values
partials = head.reshape(-1, BLOCK).sum(dim=1).cpu().numpy().astype(np.float32)
rng = np.random.default_rng(0)
results = set()
for _ in range(ORDERS):
    acc = np.float32(0.0)
    for v in partials[rng.permutation(partials.size)]:
        acc = np.float32(acc + v)
    results.add(acc.tobytes())
values = sorted(np.frombuffer(b, dtype=np.float32)[0] for b in results)
ulp = float(np.spacing(np.float32(abs(values[-1]))))
run.metric("order.distinct_results", len(results), "bit patterns",
           label=f"float32 sum of the same {partials.size} partials in {ORDERS} random orders: distinct results")
run.metric("order.spread_ulps", (float(values[-1]) - float(values[0])) / ulp, "ulp",
           label="largest minus smallest of those sums, in units in the last place")
fixed = {triton_two_pass(x).cpu().numpy().tobytes() for _ in range(3)}
run.check("fixed_order.bitwise", len(fixed) == 1, f"the two-pass kernel gave {len(fixed)} bit pattern(s) in 3 runs")
run.table("orders", "The same partials summed in float32 in different orders",
          ["orders tried", "distinct bit patterns", "smallest", "largest", "float64 sum of the partials"],
          [[ORDERS, len(results), float(values[0]), float(values[-1]), float(partials.astype(np.float64).sum())]])

# %% [markdown]
# The order also changes the *accuracy*: a sequential float32 sum (one accumulator, the worst order)
# against a pairwise tree (what the tree and shuffle kernels do, and what `torch.sum` does on a CPU).

# %%
xs = head.cpu().numpy()
sequential = np.cumsum(xs, dtype=np.float32)[-1]
pairwise = np.sum(xs, dtype=np.float32)  # NumPy sums pairwise
for name, value in (("sequential", sequential), ("pairwise", pairwise)):
    run.metric(f"error.{name}", abs(float(value) - float(head.double().sum())) / float(head.double().abs().sum()),
               "relative", label=f"{name} float32 sum of {check_n} values: |error| / sum |x|")

# %% [markdown]
# ## The CUDA kernels: what the shuffle looks like in PTX
#
# `sum_atomic`, `sum_tree` and `sum_shuffle` in `_cuda.py`. In the PTX, the tree is a loop of
# `ld.shared`/`st.shared` with a `bar.sync` per step; the shuffle version is `shfl.sync.down` on
# registers (five per warp_sum, unrolled), with one barrier; the atomic one ends in `red`/`atom`.

# %%
if _cuda.nvcc() is None:
    run.not_run("nvcc build of the reduction kernels", "nvcc is not on PATH")
else:
    ptx = _cuda.compile_cuda(_cuda.KERNELS_CU, "ptx").text
    bodies = {m.group(1): m.group(2) for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", ptx, re.S)}
    rows = []
    for kernel in ("sum_atomic", "sum_tree", "sum_shuffle"):
        counts = {op: len(re.findall(rf"\b{op}", bodies[kernel])) for op in ("shfl.sync", "bar.sync", "ld.shared",
                                                                            "atom.global", "red.global")}
        rows.append([kernel, *counts.values()])
        run.metric(f"ptx.{kernel}.shfl", counts["shfl.sync"], "instructions", label=f"{kernel}: shfl.sync in the PTX", origin="static")
    run.table("ptx", "Reduction kernels: instructions in the sm_90 PTX",
              ["kernel", "shfl.sync", "bar.sync", "ld.shared", "atom.global", "red.global"], rows)
    run.artifact("sum_shuffle.ptx", "\n".join(line for line in bodies["sum_shuffle"].splitlines()
                                               if "shfl" in line or "bar.sync" in line or "shared" in line))

# %% [markdown]
# ## Timing and bitwise determinism
#
# Bandwidth = 4n bytes read / time (a reduction writes almost nothing). Determinism: each variant
# run 20 times on the same input; the number of distinct bit patterns of the result.
#
# The float64 comparison above allows the worst-case rounding of a long float32 chain, which is larger
# than what one missing block contributes, so a kernel that skipped a block could pass it. A second
# check has no tolerance: an input of zeros and ones, at most 2^22 of them, whose every partial sum is
# an integer below 2^24 and so exact in float32 in any order; every variant must return its count
# exactly.

# %%
def distinct(fn, repeats=20):
    return len({fn().reshape(1).cpu().numpy().tobytes() for _ in range(repeats)})


if run.device.is_gpu:
    mod = _cuda.cupy_module(_cuda.KERNELS_CU)
    kernels = {name: mod.get_function(name) for name in ("sum_atomic", "sum_tree", "sum_shuffle")}
    grid = torch.cuda.get_device_properties(device).multi_processor_count * 8  # a few blocks per SM


def variants_of(x):
    """Every sum of x this device runs, as functions returning a one-element tensor."""
    found = {"torch.sum": lambda: x.sum(), "triton.two_pass": lambda: triton_two_pass(x),
             "triton.atomic": lambda: triton_atomic(x)}
    if not run.device.is_gpu:
        return found
    xc, n = _cuda.as_cupy(x), np.int64(x.numel())
    part, out = torch.empty(grid, device=device), torch.zeros(1, device=device)
    pc, oc = _cuda.as_cupy(part), _cuda.as_cupy(out)

    def cuda_atomic():
        out.zero_()
        kernels["sum_atomic"]((grid,), (256,), (xc, oc, n))
        return out

    def cuda_two_pass(kernel):
        def go():
            kernel((grid,), (256,), (xc, pc, n))
            kernel((1,), (256,), (pc, oc, np.int64(grid)))
            return out
        return go

    return {**found, "cuda.atomic": cuda_atomic, "cuda.tree": cuda_two_pass(kernels["sum_tree"]),
            "cuda.shuffle": cuda_two_pass(kernels["sum_shuffle"])}


ones = (torch.rand(min(2**22, n_check), device=device) < 0.5).float()
count = int(ones.sum(dtype=torch.float64))
for name, fn in variants_of(ones).items():
    got = float(fn().reshape(()))
    run.check(f"exact.{name}", got == count, f"sum of {ones.numel()} zeros and ones: {got:.0f}, exactly {count}")

xt = torch.rand(timed_n, device=device) - 0.3
variants = variants_of(xt)
if not run.device.is_gpu:
    variants = {"torch.sum": variants["torch.sum"]}  # the interpreter's Triton is checked, never timed
    run.not_run("CUDA and Triton reductions (timing and bitwise determinism)",
                "needs a CUDA GPU; here the Triton kernels ran in the interpreter (checked above), whose programs run "
                "one after another, so even its atomics land in a fixed order")
exact_t = xt.double().sum()
bound_t = float((timed_n / BLOCK + 64) * 2**-24 * xt.double().abs().sum())
rows = []
for name, fn in variants.items():
    run.check_close(f"timed.{name}", fn().reshape(1), exact_t.reshape(1), rtol=0, atol=bound_t,
                    reference_name="float64 sum")
    t = run.time(fn)
    gbps = 4 * timed_n / t.median_s / 1e9
    # On a GPU also a fraction of the copy ceiling (bytes read + written): a read-only stream can come a little
    # above it, since reads alone avoid the read/write turnarounds a copy pays.
    run.metric(f"{name}.gbps", gbps, "GB/s", kind="memory", cache_resident=run.cache_resident(4 * timed_n),
               ceiling="copy_bandwidth" if run.device.is_gpu else None,
               label=f"{name}: bytes read / time, {timed_n} floats")
    d = distinct(fn)
    run.metric(f"{name}.distinct", d, "bit patterns", label=f"{name}: distinct results over 20 runs")
    rows.append([name, round(t.median_s * 1e6, 1), round(gbps, 1), d])
run.table("timed", f"Sum of {timed_n} floats", ["variant", "median (us)", "GB/s read", "distinct results in 20 runs"],
          rows)
run.save()
