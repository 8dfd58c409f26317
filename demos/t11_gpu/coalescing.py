# %% [markdown]
# # Coalescing, bank conflicts and the shared-memory transpose
#
# A warp issues one load instruction for its 32 lanes. When the 32 addresses fall in consecutive
# 4-byte words, the memory system serves them with four 32-byte sectors (one 128-byte line); when
# they are k words apart, it needs up to 32 sectors and uses 4 bytes of each. A transpose cannot
# read and write contiguously at once, unless it stages a tile in shared memory: then the stride
# moves into shared memory, whose 32 banks serve one 4-byte word each per cycle, and a column
# of a 32 x 32 float tile sits in one bank unless each row is padded by one word.
#
# This demo has four parts. (1) The address model: sectors per warp request for each stride, and
# bank-conflict degree of the tile read with and without padding, computed from the addresses the
# kernels generate. (2) The kernels in Triton and in CUDA C++ (the CUDA source is in `_cuda.py`):
# Triton's run in its interpreter without a GPU and are checked against PyTorch; the CUDA source is
# compiled with nvcc for sm_90 wherever nvcc exists, and ptxas's report and the PTX are kept.
# (3) Bandwidth: on a GPU, every variant as a fraction of the same-run copy ceiling; on a CPU, the
# same strided copy through PyTorch, where 64-byte cache lines play the part of sectors.
# (4) The memory hierarchy: read bandwidth against working-set size, from a few KiB to four times
# the last-level cache, next to the shared-memory bandwidth an H100 is built for.

# %%
import re

import numpy as np
import torch

from demos.harness.provenance import cpu_llc_bytes
from demos.harness.run import start
from demos.t11_gpu import _cuda

run = start(
    "coalescing",
    title="Coalescing and the shared-memory transpose: Triton and CUDA C++",
    sizes={  # (elements of the strided copy, square transpose side, bytes each timed call of the cache sweep reads)
        "tiny": (2**20, 1024, 2**25),
        "small": (2**24, 4096, 2**25),
        "full": (2**26, 8192, 2**31),
    },
    cpu_threads=1,
)
n_copy, side, sweep_bytes = run.sizes
device = run.torch_device
STRIDES = [1, 2, 4, 8, 32, 1024]

import triton  # noqa: E402  (after start(): the interpreter on a CPU)
import triton.language as tl  # noqa: E402

# %% [markdown]
# ## 1. The address model
#
# For stride k, lane `l` of a warp reads word `l * k` (in the demo's permutation copy). A request is
# served in 32-byte sectors: the number of distinct sectors touched says how many bytes move for the
# 128 bytes the warp uses. For the transpose tile `tile[32][32 + PAD]`, the read-back
# `tile[threadIdx.x][threadIdx.y + j]` puts lane `l` at word `l * (32 + PAD) + j`; shared memory has
# 32 banks of 4-byte words, and the degree of a bank conflict is the most distinct words any one
# bank must serve for that instruction (the hardware replays the access that many times).

# %%
def sectors_per_request(stride_words: int) -> int:
    return len({(lane * stride_words * 4) // 32 for lane in range(32)})


def bank_conflict_degree(pad: int) -> int:
    words = [lane * (32 + pad) for lane in range(32)]  # column 0 of the tile, one word per lane
    per_bank: dict[int, set] = {}
    for w in words:
        per_bank.setdefault(w % 32, set()).add(w)
    return max(len(s) for s in per_bank.values())


rows = []
for k in STRIDES:
    sectors = sectors_per_request(k)
    rows.append([k, sectors, sectors * 32, round(128 / (sectors * 32), 3)])
    run.metric(f"model.stride{k}.sectors", sectors, "sectors", label=f"stride {k}: 32-byte sectors per warp load", origin="computed")
run.table("sector_model", "Address model: one warp loading 32 floats with a stride",
          ["stride (words)", "sectors per request", "bytes moved", "useful fraction"], rows)
for pad in (0, 1):
    run.metric(f"model.bank_conflict_pad{pad}", bank_conflict_degree(pad), "way",
               label=f"tile[32][{32 + pad}] column read: bank-conflict degree (accesses serialised)", origin="computed")
run.check("model.coalesced", sectors_per_request(1) == 4 and sectors_per_request(32) == 32,
          "stride 1: 4 sectors (one 128-byte line); stride 32: 32 sectors")

# %% [markdown]
# ## 2. The kernels
#
# **Triton.** The strided copy is the CUDA kernel's permutation, with the same grid: axis 0 walks r
# (the lanes), axis 1 is q, so no program divides an index. The transpose loads a tile with
# coalesced addresses and stores it transposed; there is no shared memory in the source: the
# compiler converts the tile's register layout through shared memory itself (with its own
# swizzle against bank conflicts), which is why a Triton programmer writes the tile and not the
# staging.

# %%
@triton.jit
def copy_strided_kernel(x_ptr, y_ptr, per, stride, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    q = tl.program_id(1).to(tl.int64)
    mask = r < per
    tl.store(y_ptr + q * per + r, tl.load(x_ptr + r * stride + q, mask=mask), mask=mask)


@triton.jit
def transpose_kernel(in_ptr, out_ptr, rows, cols, BM: tl.constexpr, BN: tl.constexpr):
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    tile = tl.load(in_ptr + r[:, None].to(tl.int64) * cols + c[None, :], mask=mask)
    tl.store(out_ptr + c[None, :].to(tl.int64) * rows + r[:, None], tile, mask=mask)


def triton_copy(x, stride):
    y = torch.empty_like(x)
    per = x.numel() // stride
    copy_strided_kernel[(triton.cdiv(per, 1024), stride)](x, y, per, stride, BLOCK=1024)
    return y


def triton_transpose(a):
    out = torch.empty(a.shape[1], a.shape[0], device=a.device, dtype=a.dtype)
    transpose_kernel[(triton.cdiv(a.shape[0], 32), triton.cdiv(a.shape[1], 32))](a, out, a.shape[0], a.shape[1],
                                                                                   BM=32, BN=32)
    return out


def reference_copy(x, stride):
    return x.view(-1, stride).t().reshape(-1)  # y[q * per + r] = x[r * stride + q]


# %% [markdown]
# Correctness: the interpreter runs every program in NumPy, so without a GPU the Triton kernels are
# checked on small inputs (a ragged transpose shape exercises the masks); on a GPU, at full size. A copy
# or a transpose must be exact. Large outputs are compared on the device: a float64 copy of 2^26
# elements on the host takes seconds per check, and there are sixteen of them.

# %%
def check_exact(name, got, ref, reference_name="the same permutation in PyTorch"):
    if got.numel() <= 2**22 or not got.is_cuda:
        run.check_close(name, got, ref, rtol=0, atol=0, reference_name=reference_name)
        return
    finite = bool(torch.isfinite(got).all())  # a poisoned (NaN) element the kernel did not write fails here
    worst = float((got - ref).abs().max())
    run.check(name, finite and worst == 0, f"max |err| {worst:.2e} vs {reference_name} (exact, compared on the "
              f"device){'' if finite else ', non-finite values'}")


check_n = n_copy if run.device.is_gpu else 4096
for k in STRIDES[:-1] + [64]:
    x = torch.randn(check_n, device=device)
    check_exact(f"triton.copy.stride{k}", triton_copy(x, k), reference_copy(x, k))
for shape in ([(side, side)] if run.device.is_gpu else []) + [(64, 96), (37, 100)]:
    a = torch.randn(*shape, device=device)
    check_exact(f"triton.transpose.{shape[0]}x{shape[1]}", triton_transpose(a), a.t(), "a.t()")

# %% [markdown]
# **CUDA C++.** `copy_strided`, `transpose_naive`, `transpose_smem` and `transpose_smem_padded` in
# `_cuda.py`. Compiled for sm_90 with nvcc, ptxas reports each kernel's registers and static shared
# memory: the padded tile is 32 x 33 floats, one row of padding more than the 4096-byte tile. The PTX
# shows the structure: the naive transpose has only global loads and stores, the tiled ones
# stage through `st.shared`/`ld.shared` around a `bar.sync` (`__syncthreads`).

# %%
if _cuda.nvcc() is None:
    run.not_run("nvcc build of the CUDA kernels", "nvcc is not on PATH")
else:
    usage = _cuda.ptxas_usage(_cuda.compile_cuda(_cuda.KERNELS_CU, "cubin").text)
    ptx = _cuda.compile_cuda(_cuda.KERNELS_CU, "ptx").text
    bodies = {m.group(1): m.group(2) for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", ptx, re.S)}
    rows = []
    for kernel in ("copy_strided", "transpose_naive", "transpose_smem", "transpose_smem_padded"):
        body = bodies[kernel]
        counts = {op: len(re.findall(rf"\b{re.escape(op)}", body)) for op in ("ld.global", "st.global", "ld.shared",
                                                                            "st.shared", "bar.sync")}
        rows.append([kernel, usage[kernel]["registers"], usage[kernel]["smem_bytes"], *counts.values()])
        run.metric(f"cuda.{kernel}.smem_bytes", usage[kernel]["smem_bytes"], "bytes",
                   label=f"{kernel}: static shared memory per block (ptxas, sm_90)", origin="static")
        run.metric(f"cuda.{kernel}.ld_shared", counts["ld.shared"], "instructions",
                   label=f"{kernel}: ld.shared instructions in the PTX", origin="static")
    run.table("ptxas", "CUDA kernels compiled for sm_90: ptxas resources and PTX memory instructions",
              ["kernel", "registers", "static smem (B)", "ld.global", "st.global", "ld.shared", "st.shared",
               "bar.sync"], rows)
    run.check("cuda.padding_is_one_word_per_row",
              usage["transpose_smem_padded"]["smem_bytes"] - usage["transpose_smem"]["smem_bytes"] == 32 * 4,
              "the padded tile is 32 x 33 floats: 128 bytes more than 32 x 32")
    run.artifact("transpose_smem_padded.ptx", "// " + _cuda.ARCH + ", nvcc -ptx\n.entry transpose_smem_padded("
                 + bodies["transpose_smem_padded"][:3000] + "\n}")

# %% [markdown]
# ## 3. Bandwidth
#
# Effective bandwidth = bytes read + bytes written / time; on a GPU as a fraction of the copy
# ceiling measured in the same run. On a GPU: the CUDA kernels through CuPy and the Triton kernels, L2
# flushed before every call. On a CPU: the same permutation copied by PyTorch (a strided read, a
# contiguous write), where the unit of transfer is a 64-byte cache line and the hardware
# prefetchers can follow a constant stride.

# %%
def record_rate(name, label, seconds, nbytes):
    # On a GPU, a fraction of the same-run copy ceiling. On a CPU these copies run on one thread and the
    # ceiling on every thread, so no fraction: the comparison that counts there is stride 1 vs stride k.
    gbps = nbytes / seconds / 1e9
    run.metric(name, gbps, "GB/s", ceiling="copy_bandwidth" if run.device.is_gpu else None, label=label,
               kind="memory", cache_resident=run.cache_resident(nbytes))
    return gbps


x = torch.randn(n_copy, device=device)
y = torch.empty_like(x)
copy_rows = []
if not run.device.is_gpu:
    for k in STRIDES:
        src, dst = (x, y) if k == 1 else (x.view(-1, k).t(), y.view(k, -1))  # stride 1: the plain copy
        t = run.time(lambda: dst.copy_(src))
        gbps = record_rate(f"torch.copy.stride{k}.gbps", f"PyTorch permutation copy, stride {k}, {n_copy} floats",
                           t.median_s, 8 * n_copy)
        copy_rows.append([k, "torch (CPU)", round(t.median_s * 1e3, 3), round(gbps, 1)])
    for what in ("CUDA kernels (CuPy)", "Triton kernels (timing)"):
        run.not_run(what, "needs a CUDA GPU: on a CPU the CUDA source is only compiled (above) and the Triton "
                          "kernels run in the interpreter, whose speed says nothing about a GPU")
else:
    mod = _cuda.cupy_module(_cuda.KERNELS_CU)
    xc, yc = _cuda.as_cupy(x), _cuda.as_cupy(y)
    for k in STRIDES:
        kern = mod.get_function("copy_strided")
        per = n_copy // k
        launch = lambda: kern((triton.cdiv(per, 256), k), (256,), (xc, yc, np.int64(per), np.int64(k)))  # noqa: E731
        y.fill_(float("nan"))  # poisoned: an element the kernel does not write fails the check
        launch()
        check_exact(f"cuda.copy.stride{k}", y, reference_copy(x, k))
        t = run.time(launch)
        gbps = record_rate(f"cuda.copy.stride{k}.gbps", f"CUDA permutation copy, stride {k}", t.median_s, 8 * n_copy)
        tt = run.time(lambda: triton_copy(x, k))
        tg = record_rate(f"triton.copy.stride{k}.gbps", f"Triton permutation copy, stride {k}", tt.median_s, 8 * n_copy)
        copy_rows.append([k, "CUDA / Triton", round(t.median_s * 1e3, 3), f"{gbps:.0f} / {tg:.0f}"])
    a = torch.randn(side, side, device=device)
    out = torch.empty_like(a)
    ac, oc = _cuda.as_cupy(a), _cuda.as_cupy(out)
    for kernel in ("transpose_naive", "transpose_smem", "transpose_smem_padded"):
        kern = mod.get_function(kernel)
        launch = lambda: kern((side // 32, side // 32), (32, 8), (ac, oc, np.int32(side), np.int32(side)))  # noqa: E731
        out.fill_(float("nan"))
        launch()
        check_exact(f"cuda.{kernel}", out, a.t(), "a.t()")
        t = run.time(launch)
        record_rate(f"cuda.{kernel}.gbps", f"CUDA {kernel}, {side}x{side} fp32", t.median_s, 8 * side * side)
    t = run.time(lambda: triton_transpose(a))
    record_rate("triton.transpose.gbps", f"Triton tiled transpose, {side}x{side} fp32", t.median_s, 8 * side * side)
run.table("strided_copy", f"Permutation copy of {n_copy} floats with a stride",
          ["stride", "implementation", "median (ms)", "GB/s"], copy_rows)

if not run.device.is_gpu:
    run.metric("torch.copy.stride_slowdown", run.metrics["torch.copy.stride1.gbps"]["value"]
               / run.metrics["torch.copy.stride32.gbps"]["value"], "x",
               label="CPU: stride-1 copy speed over stride-32 copy speed (bandwidth ratio)")

# %% [markdown]
# ## 4. The memory hierarchy: read bandwidth against working-set size
#
# One kernel, a sum, reads a buffer of S bytes again and again, and nothing is flushed between calls:
# a buffer that fits in a cache is served from it. Small buffers are too quick to time in one pass,
# so each call sums the rows of an (R, S/4) view whose R rows are all the same buffer (a stride-0
# `expand`, no copy): one call reads the buffer R times, about 32 MiB on a CPU and 2 GiB on a GPU,
# far above the timer's resolution and the per-call overhead. The bytes counted are the R x S read
# plus the R sums written. Sizes grow 4x from 4 KiB until they pass four times the last-level cache
# (the L2 on a GPU, the L3 on a CPU), so the last points stream from memory; a buffer larger than
# the cache is read once per call (R = 1), already tens of MiB.
#
# On a CPU this measures the host's own ladder (L1, L2, L3, DRAM; one thread), not a GPU's. On a
# GPU the same code runs past the L2 (50 MB on an H100 SXM) and shows its plateau against HBM.
# Shared memory cannot be swept this way (it is allocated per block, not reached by a plain load);
# its bandwidth is computed: 32 banks x 4 bytes per clock per SM, for 132 SMs at 1.98 GHz, the
# H100 SXM's maximum boost clock (the bound this site puts on any cached rate on a Hopper GPU).

# %%
SMEM_GBPS = 32 * 4 * 132 * 1.98  # bytes per clock per SM x SMs x GHz = GB/s
run.metric("h100.smem.gbps", SMEM_GBPS, "GB/s", kind="cache", origin="computed",
           label="H100 SXM shared memory, all SMs: 32 banks x 4 B per clock x 132 SMs x 1.98 GHz (upper bound)")

last_level = (run.device.l2_bytes if run.device.is_gpu else cpu_llc_bytes()) or 0
level_name = "L2" if run.device.is_gpu else "last-level cache"
sweep_sizes = [2**12]
while sweep_sizes[-1] < 4 * last_level:
    sweep_sizes.append(4 * sweep_sizes[-1])

sweep_kib, sweep_gbps, sweep_timings, sweep_rows, resident = [], [], [], [], []
for size in sweep_sizes:
    x = torch.rand(size // 4, device=device)
    in_cache = run.cache_resident(size, flush=False)
    # Beyond the cache one pass per call: on a GPU the blocks of several rows run side by side, so a second
    # row of a buffer too large for L2 would still find the first row's bytes there.
    reads = max(1, sweep_bytes // size) if in_cache else 1
    rows_view = x.expand(reads, size // 4)  # every row is the same buffer: no copy
    expected = float(np.sum(x.cpu().numpy(), dtype=np.float64))  # NumPy's pairwise sum, in float64
    run.check_close(f"hierarchy.sum.{size // 1024}KiB", torch.sum(rows_view, dim=1),
                    torch.full((reads,), expected, dtype=torch.float64, device=device),
                    rtol=1e-4, atol=0, reference_name="NumPy float64 sum of the buffer")
    t = run.time(lambda: torch.sum(rows_view, dim=1), flush=False)  # no flush: a buffer that fits stays cached
    moved = reads * size + reads * 4
    gbps = moved / t.median_s / 1e9
    sweep_kib.append(size // 1024)
    sweep_gbps.append(gbps)
    sweep_timings.append(t)
    resident.append(in_cache)
    sweep_rows.append([size // 1024, round(gbps, 1), "yes" if in_cache else "no", reads, round(t.median_s * 1e6, 1)])
    del x, rows_view

cached = [g for g, r in zip(sweep_gbps, resident) if r]
if not cached:
    run.not_run("hierarchy: in-cache rates", f"this system does not report its {level_name} size")
else:
    best_cached, last_cached, largest = max(cached), cached[-1], sweep_gbps[-1]  # last: the largest that fits
    run.metric("hierarchy.best_cached.gbps", best_cached, "GB/s", cache_resident=True,
               label="sum of a buffer read again and again: the best rate among working sets inside the caches")
    run.metric("hierarchy.last_cached.gbps", last_cached, "GB/s", cache_resident=True,
               label=f"the same at {sweep_kib[len(cached) - 1]} KiB, the largest working set inside the {level_name}")
    run.metric("hierarchy.largest.gbps", largest, "GB/s", cache_resident=resident[-1],
               label=f"the same at {sweep_kib[-1] // 1024} MiB, past four times the {level_name}: from memory")
    run.metric("hierarchy.largest_mib", sweep_kib[-1] / 1024, "MiB", label="the sweep's largest working set")
    run.metric("hierarchy.last_level_mib", last_level / 2**20, "MiB",
               label=f"this device's {level_name}, as the system reports it (what cache-resident is judged against)")
    run.metric("hierarchy.best_cached_over_largest", best_cached / largest, "x",
               label="best in-cache read rate over the rate at the largest working set")
    run.metric("hierarchy.last_cached_over_largest", last_cached / largest, "x",
               label=f"read rate at the largest working set inside the {level_name} over the rate at the largest")
run.table("hierarchy", f"Sum of a buffer read again and again, by working set ({level_name}: "
          f"{last_level / 2**20:.0f} MiB)", ["working set (KiB)", "GB/s", f"inside the {level_name}",
                                           "reads per call", "median (us)"], sweep_rows)
run.series("hierarchy", f"Read bandwidth by working set: {max(sweep_gbps) / sweep_gbps[-1]:.0f}x faster at best "
           f"than at {sweep_kib[-1] // 1024} MiB", "working set (KiB)", "GB/s",
           {"sum, read again and again (no flush)": (sweep_kib, sweep_gbps, sweep_timings)}, x_log=True, y_log=True)
run.save()
