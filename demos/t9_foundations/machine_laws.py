# %% [markdown]
# # Laws of the machine: a measured roofline, and Amdahl's law fitted to a measured scaling curve
#
# **Roofline** (Williams, Waterman and Patterson, 2009): a kernel that does F FLOPs while moving
# B bytes to and from memory has arithmetic intensity I = F / B, and can run no faster than
# `min(peak FLOP/s, I x bandwidth)`. The two roofs meet at the ridge point I* = peak / bandwidth:
# left of it a kernel is memory-bound, right of it compute-bound. Here both roofs are this
# run's measured ceilings, the ridge point is computed from them, and kernels are placed on it:
# a sweep measured here (one weight matrix streamed from memory, multiplied by m columns, so
# I grows with m), and kernels from the project's other records.
#
# **Amdahl's law**: with a fraction f of the single-worker time serial, N workers give speedup
# `S(N) = 1 / (f + (1 - f) / N)`, at most 1/f (**strong scaling**: fixed problem, more workers).
# **Gustafson's law** looks at **weak scaling** (the problem grows with the workers): the scaled
# speedup is `(1 - f') + f' N`, with f' the parallel fraction of the N-worker run. Both are
# measured on a workload with a designed serial part, on 1..N processes.

# %%
import multiprocessing as mp
import os

import numpy as np
import torch

from demos.harness.run import start
from records.inputs import declare

# The two records whose kernels this demo places on its roofline, on the device it runs on.
INPUTS = declare(records=["kernel_fusion/{device}", "layout_and_padding/{device}"])

run = start(
    "machine_laws",
    title="A roofline of this device from same-run ceilings, and Amdahl/Gustafson fitted to measured scaling",
    sizes={  # (weight matrix K x N, columns m swept), (serial work units, parallel work units, unit size)
        "tiny": ((1024, 2048, [1, 4, 16, 64]), (2, 18, 20_000)),
        "small": ((4096, 4096, [1, 2, 4, 8, 16, 32, 64, 128, 256]), (4, 36, 20_000)),
        "full": ((16384, 16384, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]), (4, 36, 20_000)),
    },
    # The roofline's kernels run on one thread on a CPU, and the roofs they are compared with are
    # measured here on one thread too (a read-only stream and a square matmul); the harness's
    # all-core ceilings are reported beside them. Kernels from other records are compared with the
    # roof of the thread count they ran with.
    cpu_threads=1,
)
device = run.torch_device
(K, N, columns), (serial_units, parallel_units, unit_size) = run.sizes
cores = len(os.sched_getaffinity(0))

# %% [markdown]
# ## The roofline sweep: `X (m x K) @ W (K x N)`, float32
#
# FLOPs `2 m K N`; bytes at least `4 (K N + m K + m N)` (W read once, X read, Y written). At m = 1
# this is a matrix-vector product (I = 0.5 FLOP/byte); every doubling of m doubles I until the
# kernel meets the compute roof. (The same arithmetic is why LLM decoding at batch 1 is
# memory-bound and batching helps.) A read-only stream is measured too: the copy ceiling
# counts a read and a write per element, and reading alone can be faster.

# %%
W = torch.randn(K, N, device=device)
w_bytes = W.numel() * 4
read_gbps = w_bytes / run.time(lambda: W.sum()).median_s / 1e9  # the bandwidth roof for these threads
side = 1024 if not run.device.is_gpu else 8192
A, B = torch.randn(side, side, device=device), torch.randn(side, side, device=device)
peak_here = 2 * side**3 / run.time(lambda: A @ B).median_s / 1e12  # the fp32 compute roof for these threads
del A, B
in_cache = run.cache_resident(w_bytes)
sweep = []
for m in columns:
    X = torch.randn(m, K, device=device)
    ref = X[:, :64].double() @ W[:64, :64].double() if m <= 4 else None
    if ref is not None:
        run.check_close(f"sweep.m{m}", (X[:, :64] @ W[:64, :64]), ref, rtol=1e-4, atol=1e-4)
    timing = run.time(lambda: X @ W)
    t = timing.median_s
    flops, moved = 2 * m * K * N, 4 * (K * N + m * K + m * N)
    sweep.append((m, flops / moved, flops / t / 1e12, moved / t / 1e9, timing))
    run.log(f"  m={m:5d}: I = {flops / moved:7.2f} FLOP/B, {flops / t / 1e12:.4f} TFLOP/s, {moved / t / 1e9:.1f} GB/s")

# %% [markdown]
# ## Strong and weak scaling of a workload with a designed serial part
#
# One work unit is a fixed pure-Python loop (no library threads involved). A step runs
# `serial_units` units in the parent, then `parallel_units` units split evenly over P worker
# processes (a pool started before timing). The designed serial fraction is
# `serial_units / (serial_units + parallel_units)`. Strong scaling: the same step on P = 1, 2, ...
# processes. Weak scaling: `parallel_units` per process, so the work grows with P. P goes past
# the number of cores to show what oversubscription does.

# %%
def work(units: int) -> int:
    total = 0
    for _ in range(units):
        total += sum(i * i for i in range(unit_size)) & 1
    return total


def step(pool, processes: int, parallel_total: int) -> None:
    work(serial_units)
    share = [parallel_total // processes + (i < parallel_total % processes) for i in range(processes)]
    pool.map(work, share, chunksize=1)


designed_f = serial_units / (serial_units + parallel_units)
counts = sorted({1, 2, 3, 4} | {p for p in (8, 16, 32) if p <= cores} | {cores}) if cores >= 2 else [1, 2]
strong, weak, strong_timing = {}, {}, {}  # strong_timing: the Timing of the strong median kept
load_before = os.getloadavg()[0]  # runnable processes on the machine: other jobs compete for the cores
ctx = mp.get_context("fork")
for _ in range(2):  # two rounds over every P, the better median kept: other load drifts over minutes
    for p in counts:
        with ctx.Pool(p) as pool:
            pool.map(work, [0] * p)  # workers started and warm before any timing
            t_strong = run.time(lambda: step(pool, p, parallel_units))
            t_weak = run.time(lambda: step(pool, p, parallel_units * p)).median_s
        strong_timing[p] = min(strong_timing.get(p, t_strong), t_strong, key=lambda t: t.median_s)
        strong[p], weak[p] = strong_timing[p].median_s, min(weak.get(p, t_weak), t_weak)
load_after = os.getloadavg()[0]
for p in counts:
    run.log(f"  P={p:3d}: strong {strong[p]:.3f} s, weak {weak[p]:.3f} s")

speedup = {p: strong[1] / strong[p] for p in counts}
within = [p for p in counts if p <= cores]
# Amdahl fitted by least squares on P <= cores: T(P) = a + b / P, serial fraction f = a / (a + b).
A = np.array([[1.0, 1.0 / p] for p in within])
(a, b), *_ = np.linalg.lstsq(A, np.array([strong[p] for p in within]), rcond=None)
fitted_f = float(np.clip(a / (a + b), 0.0, 1.0))
amdahl = {p: 1 / (fitted_f + (1 - fitted_f) / p) for p in counts}
karp_flatt = {p: (1 / speedup[p] - 1 / p) / (1 - 1 / p) for p in counts if p > 1}
scaled = {p: (serial_units + p * parallel_units) / (serial_units + parallel_units) * strong[1] / weak[p] for p in counts}
residual = max(abs(a + b / p - strong[p]) / strong[p] for p in within)
run.check("amdahl.fit_reproduces_points", residual < 0.25 or len(within) <= 2,
          f"largest relative residual of the fit on P <= {cores}: {residual:.3f}")
run.check("amdahl.serial_fraction_in_range", 0 <= fitted_f <= 1, f"fitted serial fraction {fitted_f:.3f}")

# %% [markdown]
# ## The roofline, with this run's final ceilings
#
# The ceilings are measured again now (the harness keeps the better of the two samples), so the
# roofs and the ridge point below are the ones the record stores. Kernels from other records are
# placed with their own FLOPs and bytes: a bandwidth metric times its arithmetic intensity, or a
# FLOP rate at its intensity.

# %%
run.finish_ceilings()
all_bw = run.ceilings["copy_bandwidth"]["value"]
all_peak, all_peak_bf16 = run.ceilings["matmul_fp32"]["value"], run.ceilings["matmul_bf16"]["value"]
# The roofs for this demo's thread count. A ceiling is the best the machine was seen to do, so the
# compute roof is the best fp32 matmul of this run (the square one or a sweep point) and the bandwidth
# roof the best streaming rate (the read-only stream or the matrix-vector product's); on a GPU the
# harness's ceilings are samples too.
bandwidth = max([read_gbps, sweep[0][3]] + ([all_bw] if run.device.is_gpu else []))
peak = max([peak_here] + [s[2] for s in sweep] + ([all_peak] if run.device.is_gpu else []))
ridge = peak * 1e12 / (bandwidth * 1e9)


def roof(intensity: float, bw: float = None, top: float = None) -> float:
    """TFLOP/s attainable at this intensity under the given roofs (by default this demo's)."""
    return min(peak if top is None else top, intensity * (bandwidth if bw is None else bw) / 1e3)


def placed_from_records() -> list[tuple]:
    """(source, kernel, intensity, TFLOP/s, threads, fraction of its own run's roof) for metrics whose
    FLOPs and bytes are known. A record is compared with the ceilings measured in its own run (with
    every core): the ceilings of this run belong to this run's machine state, not to that one's."""
    out = []
    cpu = not run.device.is_gpu
    for demo, metric, kernel, intensity in (
        ("kernel_fusion", "bias_relu.best_fused.gbps", "bias + ReLU, fused (2 FLOPs per element)", 2 / (8 if cpu else 4)),
        ("layout_and_padding", "gemv.padded_once_gbps", "matrix-vector (2 FLOPs per weight)", 2 / (4 if cpu else 2)),
        ("layout_and_padding", "matmul.multiple_of_8.tflops", "square matmul", None),
    ):
        try:
            rec = INPUTS.record(demo, run.device.device_class)
        except Exception as e:  # a malformed record elsewhere must not stop this demo
            run.not_run(f"placing {demo}.{metric}", f"its record could not be read: {e}")
            continue
        if rec is None or metric not in rec["metrics"]:
            run.not_run(f"placing {demo}.{metric}", f"no {run.device.device_class} record with that metric yet")
            continue
        value = rec["metrics"][metric]["value"]
        if intensity is None:  # a square matmul of side n: 2 n^3 FLOPs over 3 n^2 elements
            row = next((r for t in rec["tables"] if t["name"] == "matmul" for r in t["rows"] if "multiple of 8" in str(r[0])), None)
            if row is None:
                run.not_run(f"placing {demo}.{metric}", "its record has no matmul table row to read the size from")
                continue
            n = int(str(row[0]).split()[0])
            intensity = 2 * n / (3 * (4 if cpu else 2))
            kernel = f"{kernel} n={n}"
            tflops = value
        else:
            tflops = value * intensity / 1e3
        threads = (rec["settings"].get("cpu_threads") or {}).get("timings") or rec["provenance"].get("torch_threads")
        matmul_ceiling = "matmul_fp32" if cpu else "matmul_bf16"  # the dtype those demos use on each device
        own = roof(intensity, rec["ceilings"]["copy_bandwidth"]["value"], rec["ceilings"][matmul_ceiling]["value"])
        out.append((demo, kernel, intensity, tflops, threads, tflops / own))
    return out


rows = [["this run", f"X({m}x{K}) @ W({K}x{N})", round(i, 3), round(tf, 4), round(tf / roof(i), 3), run.cpu_threads]
        for m, i, tf, _, _ in sweep]
for demo, kernel, intensity, tflops, threads, fraction in placed_from_records():
    rows.append([demo, kernel, round(intensity, 3), round(tflops, 4), round(fraction, 3), threads])
run.table("roofline", f"Kernels on this run's roofline ({run.cpu_threads} thread(s)): bandwidth {bandwidth:.1f} GB/s, "
          f"fp32 peak {peak:.3f} TFLOP/s, ridge {ridge:.1f} FLOP/byte; all-core ceilings {all_bw:.1f} GB/s, "
          f"{all_peak:.3f} TFLOP/s" + (" (weights fit in the last-level cache: cache-resident)" if in_cache else ""),
          ["source", "kernel", "FLOP/byte", "TFLOP/s", "of the roof (records: their own run's ceilings)", "threads"], rows)
run.metric("ridge_fp32", ridge, "FLOP/B", label=f"fp32 ridge point on {run.cpu_threads} thread(s): matmul peak / read bandwidth, both measured here")
run.metric("ridge_fp32_all_cores", all_peak * 1e12 / (all_bw * 1e9), "FLOP/B", label="fp32 ridge from the harness's all-core ceilings")
run.metric("ridge_bf16_all_cores", all_peak_bf16 * 1e12 / (all_bw * 1e9), "FLOP/B", label="bf16 ridge from the all-core ceilings")
run.metric("roof.read_gbps", read_gbps, "GB/s", label=f"read-only stream (W.sum()) on {run.cpu_threads} thread(s)",
           cache_resident=in_cache)
run.metric("roof.matmul_tflops", peak_here, "TFLOP/s", dtype="float32", label=f"{side}^3 fp32 matmul on {run.cpu_threads} thread(s)")
run.metric("roof.bandwidth_gbps", bandwidth, "GB/s", label="bandwidth roof: best streaming rate of this run", cache_resident=in_cache)
run.metric("roof.peak_tflops", peak, "TFLOP/s", dtype="float32", label="compute roof: best fp32 matmul rate of this run")
for m, i, tf, gb, _ in sweep:
    run.metric(f"sweep.m{m}.tflops", tf, "TFLOP/s", dtype="float32", label=f"X({m}x{K}) @ W({K}x{N}), I = {i:.2f} FLOP/B")
run.metric("sweep.m1.of_bandwidth", sweep[0][3] / bandwidth, "fraction", label="matrix-vector: GB/s over the bandwidth roof")
run.metric("sweep.best.of_peak", max(s[2] for s in sweep) / peak, "fraction", label="best sweep point over the fp32 peak")
run.metric("sweep.lowest.of_roof", min(r[4] for r in rows[: len(sweep)]), "fraction",
           label="the sweep point furthest below its roof: its rate over min(peak, I x bandwidth)")
worst = max(r[4] for r in rows[: len(sweep)])
run.check("roofline.no_point_above_roof", worst <= 1.0 + 1e-9,
          f"the highest of the sweep's points is {worst:.3f} of its roof (roofs are the best samples, so at most 1)")
xs = np.logspace(np.log10(min(0.05, sweep[0][1] / 2)), np.log10(max(4 * ridge, 2 * sweep[-1][1])), 40)
half = next((s for s in sweep if s[2] >= peak / 2), None)  # the first sweep point at half the compute roof
reach = f"X @ W reaches half the peak at {half[1]:.3g} FLOP/byte" if half else "X @ W stays below half the peak"
run.series("roofline", f"fp32 ridge {ridge:.3g} FLOP/byte; {reach}", "FLOP per byte", "TFLOP/s",
           {"roof": (list(xs), [roof(x) for x in xs]),
            "X @ W sweep (this run)": ([s[1] for s in sweep], [s[2] for s in sweep], [s[4] for s in sweep]),
            **{f"{r[0]}: {r[1]}": ([r[2]], [r[3]]) for r in rows[len(sweep):]}},
           x_log=True, y_log=True)

# %% [markdown]
# ## Strong and weak scaling, with the laws

# %%
run.table("scaling", f"{serial_units} serial + {parallel_units} parallel units (designed serial fraction {designed_f:.2f}); "
          f"{cores} cores; fitted on P <= {cores}",
          ["processes", "strong: time (s)", "speedup", "Amdahl (fitted f)", "Karp-Flatt serial fraction",
           "weak: time (s)", "scaled speedup", "Gustafson (designed)"],
          [[p, round(strong[p], 4), round(speedup[p], 3), round(amdahl[p], 3),
            round(karp_flatt[p], 3) if p in karp_flatt else "", round(weak[p], 4), round(scaled[p], 3),
            round(designed_f + (1 - designed_f) * p, 3)]
           for p in counts])
run.series("strong_scaling", "Strong scaling: speedup vs processes", "processes", "speedup",
           {"measured": (counts, [speedup[p] for p in counts],
                         [max(strong_timing[1].spread, strong_timing[p].spread) for p in counts]),
            f"Amdahl, fitted f = {fitted_f:.2f}": (counts, [amdahl[p] for p in counts]),
            f"Amdahl, designed f = {designed_f:.2f}": (counts, [1 / (designed_f + (1 - designed_f) / p) for p in counts]),
            "ideal (linear)": (counts, counts)})
run.metric("amdahl.designed_serial_fraction", designed_f, "fraction", label="serial units / all units, by design", origin="computed")
run.metric("amdahl.fitted_serial_fraction", fitted_f, "fraction", label=f"Amdahl's f fitted to the strong-scaling times on P <= {cores}")
if fitted_f > 0:
    run.metric("amdahl.max_speedup", 1 / fitted_f, "x", label="1 / fitted f: the speedup limit", origin="computed")
run.metric("strong.speedup_at_cores", speedup[cores], "x", label=f"measured speedup on {cores} processes ({cores} cores)")
run.metric("strong.speedup_at_max", speedup[counts[-1]], "x", label=f"measured speedup on {counts[-1]} processes")
run.metric("weak.scaled_speedup_at_cores", scaled[cores], "x", label=f"weak scaling: scaled speedup on {cores} processes")
run.metric("cores", cores, "cores", label="CPU cores this process may run on")
run.metric("load_average", max(load_before, load_after), "processes",
           label="the machine's 1-minute load average around the scaling runs (larger of before and after)")
run.save()
