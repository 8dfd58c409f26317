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
from pathlib import Path

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

# %% [markdown]
# ## Warp vote and match: one atomic per warp instead of one per lane
#
# A filter (stream compaction) packs the x[i] above a threshold into `out`, in any order. Naive: each kept value
# takes its slot with `atomicAdd(count, 1)`, one atomic per passing lane, all on one address. Warp-aggregated:
# `__ballot_sync` gives every lane the mask of passing lanes, lane 0 adds its `__popc` to the counter once,
# `__shfl_sync` hands out the old count, and a lane's slot is that plus `__popc` of the mask below its bit.
# `coalesced_threads()` (cooperative groups) is the group of lanes that entered the branch. A histogram has an
# address per key: `__match_any_sync` gives a lane the lanes holding its key, and the lowest adds their count.
#
# First one warp at a time, modelled in NumPy, the warps in a random order (as their atomics land): the filter
# must write every kept value exactly once, the histogram count every key exactly. Then the compiled code.

# %%
WARP_CU = r"""
#include <cooperative_groups.h>
extern "C" __global__ void filter_atomic(const float* x, float* out, int* count, long long n, float threshold) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > threshold) out[atomicAdd(count, 1)] = x[i];
}
extern "C" __global__ void filter_warp(const float* x, float* out, int* count, long long n, float threshold) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    bool keep = i < n && x[i] > threshold;
    unsigned passing = __ballot_sync(0xffffffffu, keep);  // all 32 lanes get here (blockDim.x % 32 == 0)
    int lane = threadIdx.x & 31, base = 0;
    if (lane == 0 && passing != 0) base = atomicAdd(count, __popc(passing));
    base = __shfl_sync(0xffffffffu, base, 0);
    if (keep) out[base + __popc(passing & ((1u << lane) - 1))] = x[i];
}
extern "C" __global__ void filter_cg(const float* x, float* out, int* count, long long n, float threshold) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > threshold) {
        auto kept = cooperative_groups::coalesced_threads();  // the lanes that took this branch
        int base = kept.thread_rank() == 0 ? atomicAdd(count, (int)kept.size()) : 0;
        out[kept.shfl(base, 0) + kept.thread_rank()] = x[i];
    }
}
extern "C" __global__ void hist_atomic(const int* keys, int* hist, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[keys[i]], 1);
}
extern "C" __global__ void hist_match(const int* keys, int* hist, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int key = i < n ? keys[i] : -1;
    unsigned peers = __match_any_sync(0xffffffffu, key);  // the lanes whose key equals mine
    if (i < n && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[key], __popc(peers));
}
"""
KERNELS = ("filter_atomic", "filter_warp", "filter_cg", "hist_atomic", "hist_match")
THRESHOLD, BINS = 0.2, 8  # x = rand - 0.3, so half of it passes; a histogram of 8 keys

# %%
def filter_warps(values, keep, order):
    """The warp-aggregated filter: one fetch-and-add per warp with a passing lane. Returns (out, atomics per warp)."""
    out, counter, atomics = np.full(int(keep.sum()), np.nan, dtype=values.dtype), 0, np.zeros(len(keep), dtype=int)
    for w in order:
        ballot = sum(1 << int(lane) for lane in np.flatnonzero(keep[w]))  # __ballot_sync
        if ballot:
            base, counter, atomics[w] = counter, counter + ballot.bit_count(), 1  # lane 0's atomicAdd: old count
            for lane in np.flatnonzero(keep[w]):
                out[base + (ballot & ((1 << int(lane)) - 1)).bit_count()] = values[w, lane]
    return out, atomics


def hist_warps(keys):
    """The match-aggregated histogram: the lowest lane of each group of equal keys adds the group's size."""
    hist, atomics = np.zeros(BINS, dtype=np.int64), np.zeros(len(keys), dtype=int)
    for w, warp in enumerate(keys):
        for lane, key in enumerate(warp):
            peers = sum(1 << int(peer) for peer in np.flatnonzero(warp == key))  # __match_any_sync
            if lane == (peers & -peers).bit_length() - 1:  # __ffs(peers) - 1: the lowest peer adds them
                hist[key], atomics[w] = hist[key] + peers.bit_count(), atomics[w] + 1
    return hist, atomics


values = head[:2**17].cpu().numpy().reshape(-1, 32)  # at most 4096 warps: the model is slow Python
keep = values > THRESHOLD
packed, aggregated = filter_warps(values, keep, rng.permutation(len(keep)))
keys = rng.integers(0, BINS, size=values.shape)
hist, per_key = hist_warps(keys)
run.check("model.filter.same_set", np.array_equal(np.sort(packed), np.sort(values[keep])),
          f"{keep.sum()} kept values of {values.size}, each written once (sorted, equal to the kept inputs)")
run.check("model.filter.one_atomic_per_warp", np.array_equal(aggregated, keep.any(axis=1)),
          f"one atomic in each of the {int(keep.any(axis=1).sum())} warps with a passing lane, none elsewhere")
run.check("model.hist.exact", np.array_equal(hist, np.bincount(keys.ravel(), minlength=BINS)),
          f"histogram of {keys.size} keys in {BINS} bins, equal to np.bincount")
run.check("model.hist.one_atomic_per_key", np.array_equal(per_key, [len(np.unique(w)) for w in keys]),
          "one atomic per distinct key in each warp")
for name, count, what in (("filter.atomics_per_warp.naive", keep.sum(axis=1), "filter, one per passing lane"),
                          ("filter.atomics_per_warp.aggregated", aggregated, "filter, warp-aggregated (ballot)"),
                          ("hist.atomics_per_warp.naive", np.full(len(keys), 32), "histogram, one per lane"),
                          ("hist.atomics_per_warp.match", per_key, "histogram, one per key (match)")):
    run.metric(f"model.{name}", float(np.mean(count)), "ops", origin="computed",
               label=f"{what}: atomics per warp, mean over {len(count)} modelled warps")

# %%
# Counted in the PTX (nvcc's front end) and the SASS (what ptxas makes of it, the code the GPU runs, via cuobjdump):
# atomics, vote and match instructions, `activemask` (which `coalesced_threads()` reads). A static count: an atomic
# that only lane 0 runs counts once. The SASS depends on ptxas's version: the table's title names nvcc's release.
PATTERNS = {"PTX atomics": r"\b(?:atom|red)\.global", "PTX vote": r"\bvote\.sync\.\w+",  # ballot, any, all, uni
            "PTX match": r"\bmatch\.any\.sync", "PTX activemask": r"\bactivemask",
            "SASS atomics": r"\b(?:ATOMG?|REDG?)\.E\b", "SASS vote": r"\b(?:VOTEU?|MATCH)\."}  # VOTE, VOTEU, MATCH
CITED = [("filter_atomic", "PTX vote"), ("filter_warp", "PTX vote"), ("filter_warp", "PTX atomics"),
         ("hist_match", "PTX match"), ("filter_atomic", "SASS vote"), ("hist_atomic", "SASS vote")]
bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"  # Triton ships one
cuobjdump = _cuda.find_tool("cuobjdump") or (str(bundled) if bundled.is_file() else None)
if _cuda.nvcc() is not None:
    ptx = dict(re.findall(r"\.entry (\w+)\((.*?)\n}\n", _cuda.compile_cuda(WARP_CU, "ptx").text, re.S))
    cubin = _cuda.compile_cuda(WARP_CU, "cubin").path
    proc, why = _cuda.run_tool([cuobjdump, "-sass", str(cubin)], 120) if cuobjdump else (None, "no cuobjdump")
    sass = None if proc is None or proc.returncode else dict(re.findall(r"Function : (\w+)\n(.*?)(?=Function : |\Z)",
                                                                        proc.stdout, re.S))
    if sass is None:
        run.not_run("SASS of the warp-vote kernels", why or _cuda.tool_error(proc))
    code = {"PTX": ptx, "SASS": sass or {}}  # kernel -> its text; a count is None where the text is missing
    counts = {(k, col): None if (text := code[col.split()[0]].get(k)) is None else len(re.findall(rx, text))
              for k in KERNELS for col, rx in PATTERNS.items()}
    nv = _cuda.run_tool([_cuda.nvcc(), "--version"], 60)[0]  # its "release 13.0, V13.0.88" line, say
    release = rel.group(0) if nv and (rel := re.search(r"release [^\n]+", nv.stdout)) else "release unknown"
    run.table("warp_vote", f"Filter and histogram kernels: instructions in the sm_90 PTX and SASS, nvcc {release}",
              ["kernel", *PATTERNS], [[k, *(counts[k, col] for col in PATTERNS)] for k in KERNELS])
    for kernel, col in CITED:
        if counts[kernel, col] is not None:
            run.metric("{}.{}.{}".format(col.split()[0].lower(), kernel, col.split()[1]), counts[kernel, col],
                       "instructions", origin="static", label=f"{kernel}: {col} instructions, counted statically")
    if sass is not None:  # the aggregation ptxas wrapped around the atomic: vote, leader test, rank, shuffle, add
        run.artifact("filter_atomic.sass", "\n".join(
            re.sub(r"\s*/\* 0x\w+ \*/", "", line).strip() for line in sass["filter_atomic"].splitlines()
            if re.search(r"VOTE|FLO|POPC|ATOMG|SHFL|ISETP\.EQ|SR_LANEID|SR_LTMASK|LOP3|IADD", line)))

# %%
# On a GPU each filter's output, sorted, must equal the kept inputs, sorted (the order of the slots depends on
# which warp's atomic lands first), and each histogram `torch.bincount`. Bytes: input read + values written.
if run.device.is_gpu:
    wmod, n64, blocks = _cuda.cupy_module(WARP_CU), np.int64(timed_n), (triton.cdiv(timed_n, 256),)
    kept_ref = torch.sort(xt[xt > THRESHOLD]).values
    keys_t = torch.randint(0, BINS, (timed_n,), device=device, dtype=torch.int32)
    out, counter = torch.empty_like(xt), torch.zeros(1, device=device, dtype=torch.int32)
    hist_t = torch.zeros(BINS, device=device, dtype=torch.int32)
    xc, oc, cc, kc, hc = (_cuda.as_cupy(t) for t in (xt, out, counter, keys_t, hist_t))
    for kernel in KERNELS:
        is_filter, fn = kernel.startswith("filter"), wmod.get_function(kernel)
        args, reset = ((xc, oc, cc, n64, np.float32(THRESHOLD)), counter) if is_filter else ((kc, hc, n64), hist_t)

        def go(fn=fn, args=args, reset=reset):
            reset.zero_()
            fn(blocks, (256,), args)

        go()
        kept = int(counter.item()) if is_filter else 0
        if is_filter:
            same = kept == kept_ref.numel() and torch.equal(torch.sort(out[:kept]).values, kept_ref)
            run.check(f"gpu.{kernel}.same_set", same, f"{kept} kept, {kept_ref.numel()} expected; sorted, "
                      f"{'equal' if same else 'not equal'} to the kept inputs")
        else:
            run.check(f"gpu.{kernel}.exact", torch.equal(hist_t, torch.bincount(keys_t, minlength=BINS).int()),
                      f"{BINS}-key histogram of {timed_n} keys, equal to torch.bincount")
        t, moved = run.time(go), 4 * timed_n + 4 * kept
        run.metric(f"cuda.{kernel}.gbps", moved / t.median_s / 1e9, "GB/s", kind="memory", ceiling="copy_bandwidth",
                   cache_resident=run.cache_resident(moved), label=f"{kernel}: bytes moved / time, {timed_n} inputs")
else:
    run.not_run("CUDA filter and histogram kernels (timing, same-set and exact-count checks)",
                "needs a CUDA GPU; here their PTX and SASS were read and the warps' atomics modelled in NumPy")
run.save()
