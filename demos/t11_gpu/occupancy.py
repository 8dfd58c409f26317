# %% [markdown]
# # Occupancy: what limits it, computed from ptxas; when more of it stops helping
#
# Occupancy is the number of warps resident on an SM divided by the most it can hold (64 on an
# H100). A block is resident only when all of its resources fit at once: its warps, its registers
# (allocated per warp, in units of 256, across four sub-partitions) and its shared memory (in
# 128-byte units, plus 1 KB the driver reserves per block), and at most 32 blocks per SM. Given
# a kernel's registers per thread and shared memory per block, which ptxas reports at compile time,
# the theoretical occupancy is arithmetic: the CUDA occupancy calculator's formula, here in
# `_cuda.occupancy`, with the sm_90 limits.
#
# Three kernels from `_cuda.py` are swept: `stream_scale` (memory-bound: streams a large array, one
# float per thread), `stream_scale4` (the same with one 16-byte float4 per thread) and `chase`
# (16 independent chains of dependent loads per thread through a random permutation).
# Without a GPU the sweep is computed from ptxas's report for sm_90 (nvcc runs on any host); on a
# GPU each point is also launched and timed, the formula is checked against the driver's occupancy
# API, and Nsight Compute reads achieved occupancy and DRAM throughput at two points.

# %%
import csv
import io
import sys

import numpy as np
import torch

from records.paths import REPO_ROOT
from demos.harness.run import start
from demos.t11_gpu import _cuda
from demos.t11_gpu._occupancy_target import POINTS

run = start(
    "occupancy",
    title="Occupancy: registers, shared memory and block size, computed and measured",
    sizes={"tiny": (2**22, 2**20, 8), "small": (2**26, 2**24, 32), "full": (2**28, 2**26, 64)},  # (stream, chase table, steps)
    cpu_threads=1,
)
n_stream, n_chase, steps = run.sizes
BLOCKS = [32, 64, 128, 256, 512, 1024]
MAXRREG = [None, 64, 32, 24]
SMEM_KB = [0, 16, 32, 48, 64, 100, 200]

# %% [markdown]
# ## The formula, checked on cases worked by hand
#
# - 256 threads, 32 registers: 8 warps per block; 32 x 32 = 1024 registers per warp, 16 warps per
#   sub-partition, 64 per SM: 8 blocks, 64 warps, 100%.
# - 1024 threads, 33 registers: 1056 registers per warp round up to 1280; 16384 / 1280 = 12 warps
#   per sub-partition, 48 per SM; a block needs 32: one block, 50%.
# - 128 threads, 48 KB of shared memory: 49152 + 1024 reserved = 50176 bytes; 233472 / 50176 = 4
#   blocks, 16 warps, 25%.
# - 32 threads, 16 registers: one warp per block, but at most 32 blocks: 50%.

# %%
HAND = [((256, 32, 0), 1.0, "warps"), ((1024, 33, 0), 0.5, "registers"), ((128, 32, 48 * 1024), 0.25, "shared memory"),
        ((32, 16, 0), 0.5, "blocks")]
for (threads, regs, smem), want, limiter in HAND:
    got = _cuda.occupancy(threads, regs, smem)
    run.check(f"formula.{threads}t_{regs}r_{smem}B", got["occupancy"] == want and got["limiter"] == limiter,
              f"{got['occupancy']:.2f} limited by {got['limiter']} (worked by hand: {want:.2f}, {limiter})")

# %% [markdown]
# ## Registers and shared memory from ptxas, for sm_90
#
# `-maxrregcount` caps the registers per thread for the whole file (`__launch_bounds__` does it per
# kernel); below what the kernel needs, ptxas spills the excess to local memory, which ptxas also
# reports. The builds are cached under `.cache/`, keyed by a hash of source and flags.

# %%
if _cuda.nvcc() is None:
    run.not_run("the whole sweep", "nvcc is not on PATH: no ptxas report to compute occupancy from")
    run.save()
    raise SystemExit(0)

builds = {}
for cap in MAXRREG:
    flags = () if cap is None else (f"-maxrregcount={cap}",)
    builds[cap] = _cuda.ptxas_usage(_cuda.compile_cuda(_cuda.KERNELS_CU, "cubin", flags).text)
stream_regs = builds[None]["stream_scale"]["registers"]
chase_regs = builds[None]["chase"]["registers"]
stream4_regs = builds[None]["stream_scale4"]["registers"]
run.metric("ptxas.stream_scale.registers", stream_regs, "registers", label="stream_scale: registers per thread (sm_90)", origin="static")
run.metric("ptxas.chase.registers", chase_regs, "registers", label="chase: registers per thread (sm_90, no cap)", origin="static")

# %% [markdown]
# ## The sweep
#
# (a) Block size at the kernel's own register count; (b) `chase` under a register cap, at 256
# threads; (c) both streaming kernels with dynamic shared memory added to each block, at 256 threads
# (the kernel never touches it: it only takes room, as a tile buffer would).

# %%
points = []  # (sweep, label, kernel, threads, registers, smem bytes, spills, flags)
for threads in BLOCKS:
    points.append(("block size", f"{threads} threads", "stream_scale", threads, stream_regs, 0, 0, None))
    points.append(("block size", f"{threads} threads", "chase", threads, chase_regs, 0, 0, None))
for cap in MAXRREG:
    u = builds[cap]["chase"]
    points.append(("register cap", f"maxrregcount={cap or 'none'}", "chase", 256, u["registers"], 0,
                   u["spill_store_bytes"] + u["spill_load_bytes"], cap))
for kb in SMEM_KB:
    points.append(("shared memory", f"{kb} KB per block", "stream_scale", 256, stream_regs, kb * 1024, 0, None))
    points.append(("shared memory", f"{kb} KB per block", "stream_scale4", 256, stream4_regs, kb * 1024, 0, None))

rows = []
for sweep, label, kernel, threads, regs, smem, spills, cap in points:
    occ = _cuda.occupancy(threads, regs, smem)
    rows.append([sweep, kernel, label, threads, regs, smem // 1024, spills, occ["blocks_per_sm"], occ["active_warps"],
                 round(100 * occ["occupancy"], 1), occ["limiter"]])
    key = f"{kernel}.{sweep.replace(' ', '_')}.{label.split()[0].replace('maxrregcount=', 'cap')}"
    run.metric(f"theory.{key}", 100 * occ["occupancy"], "%", label=f"{kernel}, {label}: theoretical occupancy", origin="static")
run.table("theory", "Theoretical occupancy on sm_90 from ptxas's registers and shared memory",
          ["sweep", "kernel", "point", "threads", "regs/thread", "dyn. smem (KB)", "spill bytes", "blocks/SM",
           "warps/SM", "occupancy %", "limited by"], rows)

capped = builds[24]["chase"]
run.metric("ptxas.chase.cap24.spill_bytes", capped["spill_store_bytes"] + capped["spill_load_bytes"], "bytes",
           label="chase at maxrregcount=24: spill stores + loads per thread (ptxas)", origin="static")
run.check("ptxas.cap_respected", all(builds[c]["chase"]["registers"] <= c for c in MAXRREG if c),
          "every capped build uses at most its cap")

# %% [markdown]
# ## On a GPU: the formula against the driver, achieved rates, and Nsight Compute
#
# The driver's `cuOccupancyMaxActiveBlocksPerMultiprocessor` must agree with the formula at every
# point. Then each point is launched: `stream_scale` on the large array (bandwidth as a fraction
# of the same-run copy ceiling) and `chase` (dependent loads completed per second).

# %%
NCU_METRICS = ["sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread",
               "launch__block_size"]
# --clock-control none: ncu otherwise locks the GPU's clocks to base for the profiled kernels, which
# changes the card's settings for everyone and the rates it reads.
NCU_ARGS = ["--clock-control", "none", "--kernel-name", "stream_scale", "--metrics", ",".join(NCU_METRICS), "--csv",
            sys.executable, "-m", "demos.t11_gpu._occupancy_target"]
NCU_TIMEOUT_S = 60  # two short kernels replayed a few times; a refused or stuck profiler must not eat the run
run.artifact("ncu_command", "ncu " + " ".join(NCU_ARGS[:-3] + ["python", "-m", "demos.t11_gpu._occupancy_target"]))

if not run.device.is_gpu:
    for what in ("driver occupancy API cross-check", "achieved bandwidth and chase rate per sweep point",
                 "Nsight Compute (ncu) at two sweep points"):
        run.not_run(what, "needs a CUDA GPU; the theoretical sweep above is computed from ptxas's sm_90 report")
else:
    import cupy

    device = run.torch_device
    x = torch.randn(n_stream, device=device)
    y = torch.empty_like(x)
    nxt = torch.randperm(n_chase, device=device, dtype=torch.int32)
    chase_threads = 2**18
    out = torch.empty(chase_threads, device=device, dtype=torch.int32)
    modules = {cap: _cuda.cupy_module(_cuda.KERNELS_CU, () if cap is None else (f"-maxrregcount={cap}",))
               for cap in MAXRREG}
    grows, agree = [], []
    for sweep, label, kernel, threads, regs, smem, spills, cap in points:
        kern = modules[cap].get_function(kernel)
        if smem > 48 * 1024:
            kern.max_dynamic_shared_size_bytes = smem
        if smem > 227 * 1024:
            continue
        occ = _cuda.occupancy(threads, kern.num_regs, smem + kern.shared_size_bytes)
        driver = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kern.kernel.ptr, threads, smem)  # the CUfunction
        agree.append(driver == occ["blocks_per_sm"])  # recorded, not raised: a mismatch must not lose the run
        run.log(f"  {kernel}, {label}: driver {driver} blocks/SM, formula {occ['blocks_per_sm']} ({kern.num_regs} regs)")
        key = f"{kernel}.{sweep.replace(' ', '_')}.{label.split()[0].replace('maxrregcount=', 'cap')}"
        if kernel.startswith("stream_scale"):
            xc, yc = _cuda.as_cupy(x), _cuda.as_cupy(y)
            items = n_stream // 4 if kernel == "stream_scale4" else n_stream  # float4s or floats
            launch = lambda: kern(((items + threads - 1) // threads,), (threads,), (xc, yc, np.int64(items)),  # noqa: E731
                                  shared_mem=smem)
            t = run.time(launch)
            rate = 8 * n_stream / t.median_s / 1e9
            run.metric(f"achieved.{key}.gbps", rate, "GB/s", ceiling="copy_bandwidth", kind="memory",
                       label=f"{kernel}, {label}: achieved bandwidth")
        else:
            nc, oc = _cuda.as_cupy(nxt), _cuda.as_cupy(out)
            launch = lambda: kern((chase_threads // threads,), (threads,), (nc, oc, np.int32(steps), np.int32(n_chase)))  # noqa: E731
            t = run.time(launch)
            rate = chase_threads * 16 * steps / t.median_s / 1e9
            run.metric(f"achieved.{key}.gloads", rate, "G loads/s", label=f"chase, {label}: dependent loads per second")
        grows.append([sweep, kernel, label, round(100 * occ["occupancy"], 1), driver, round(t.median_s * 1e6, 1),
                      round(rate, 1)])
    run.table("achieved", "Achieved rate per sweep point (stream_scale, stream_scale4: GB/s; chase: G loads/s)",
              ["sweep", "kernel", "point", "theoretical occupancy %", "driver blocks/SM", "median (us)", "rate"], grows)
    run.metric("driver.agreement", sum(agree) / len(agree), "fraction",
               label="sweep points where cuOccupancyMaxActiveBlocksPerMultiprocessor equals the formula")
    ncu = _cuda.find_tool("ncu")
    proc, why = (None, "ncu is not on PATH nor in the CUDA toolkit's folders") if ncu is None else \
        _cuda.run_tool([ncu, *NCU_ARGS], NCU_TIMEOUT_S, cwd=REPO_ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith('"')] if proc else []
    found = [r for r in csv.DictReader(io.StringIO("\n".join(lines))) if "Metric Name" in r and "ID" in r]
    if proc is None or proc.returncode != 0 or not found:
        # Where the driver refuses the profiler (a gVisor sandbox: "LibraryNotLoaded"), ncu's own line says so.
        run.not_run("Nsight Compute (ncu) at two sweep points",
                    why or f"ncu exited {proc.returncode}: {_cuda.tool_error(proc)}")
    else:
        ids = sorted({r["ID"] for r in found}, key=int)
        names = dict(zip(ids, POINTS))
        for r in found:
            try:
                value = float(r["Metric Value"].replace(",", ""))
            except ValueError:
                continue
            run.metric(f"ncu.{names[r['ID']]}.{r['Metric Name']}", value, r["Metric Unit"] or "value",
                       label=f"ncu, {names[r['ID']]} launch: {r['Metric Name']}")
        run.table("ncu", "Nsight Compute on stream_scale at two sweep points",
                  ["launch", "metric", "unit", "value"],
                  [[names[r["ID"]], r["Metric Name"], r["Metric Unit"], r["Metric Value"]] for r in found])

run.save()
