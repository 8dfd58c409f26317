# %% [markdown]
# # Warm-up, compile and caches: three reasons the same call takes different times
#
# 1. **The first call is not the steady state.** A `torch.compile`'d function traces and compiles
#    on its first call (seconds); any function pays one-time costs (allocation, library set-up).
#    Report the first call apart, and never average it into the steady state.
# 2. **Caches.** A kernel whose working set fits in the last-level cache (the GPU's L2, the CPU's
#    L3) runs faster when it is timed back to back, because its data is still in the cache from the
#    previous call. A real model step rarely finds its data there, so benchmarks flush the cache
#    between repeats (or say the number is cache-resident).
# 3. **Spread.** Identical calls take different times. How many repeats does a stable median need?
#    Measured here by resampling a long run of repeats.

# %%
import numpy as np
import torch

from demos.harness.provenance import cpu_llc_bytes
from demos.harness.run import start
from demos.harness.timing import Settings, measure
from demos.t10_benchmarking._cpu_cache import CpuCacheFlusher

run = start(
    "warmup_and_caches",
    title="Warm-up, compile and caches: first call vs steady state, cache-resident vs flushed, spread vs repeats",
    sizes={  # (working sets for the cache sweep in MiB, repeats for the spread study)
        "tiny": ([1, 4, 128], 200),
        "small": ([0.5, 2, 8, 16, 64, 256], 1000),
        "full": ([4, 16, 32, 256, 1024], 2000),
    },
    cpu_threads=1,
)
working_sets_mib, spread_repeats = run.sizes
device = run.torch_device
gpu = run.device.is_gpu

# %% [markdown]
# ## 1. First call vs steady state
#
# A small chain compiled with `torch.compile` (`dynamic=False`). The first call in a fresh process
# pays Inductor's one-time start-up *and* this function's trace and compile (the harness points the
# compile caches at an empty folder, so it is a cold compile). The calls after it are timed one by
# one, to show how quickly the steady state arrives.

# %%


def chain(x):
    return torch.nn.functional.gelu(x * 1.5 + 0.5) * torch.sigmoid(x)


x = torch.randn(256, 1024, device=device)
compiled = torch.compile(chain, dynamic=False)
out, compile_first_s = run.first_call(lambda: compiled(x))
run.check_close("compiled_chain", out, chain(x.double()), rtol=1e-5, atol=1e-5)
next_calls = run.device.time_calls(lambda: compiled(x), 20, False)  # calls 2..21, each timed alone
steady = run.time(lambda: compiled(x))
_, eager_first_s = run.first_call(lambda: chain(x))
eager = run.time(lambda: chain(x))

run.metric("compiled.first_call_s", compile_first_s, "s", label="first call of the compiled chain (start-up + compile)")
run.metric("compiled.steady_us", steady.median_s * 1e6, "us", label="compiled chain, steady-state median")
run.metric("compiled.second_call_us", next_calls[0] * 1e6, "us", label="the call right after the compile")
run.metric("compiled.first_over_steady", compile_first_s / steady.median_s, "x",
           label="first call over steady-state median (calls needed to pay back the compile, at zero gain)")
run.metric("eager.steady_us", eager.median_s * 1e6, "us", label="eager chain, steady-state median")
run.metric("compiled.breakeven_calls", compile_first_s / max(eager.median_s - steady.median_s, 1e-12), "calls",
           label="calls before the compile pays for itself (compile time / time saved per call; huge if none saved)")
calls_in_first = float(f"{compile_first_s / steady.median_s:.2g}")  # the first call in steady calls, 2 digits
run.series("first_calls", f"First call {compile_first_s:.2g} s (compile) = {calls_in_first:,.0f} steady calls "
           f"({steady.median_s * 1e6:.3g} us each)", "call number",
           "time (s)", {"compiled chain": (list(range(1, 22)), [compile_first_s] + next_calls)},
           hlines={"steady-state median": steady.median_s}, y_log=True)

# %% [markdown]
# ## 2. Cache-resident vs flushed
#
# One kernel, `x.sum()`, over working sets from well inside the last-level cache to far beyond
# it. Each size is timed with the same loop two ways, alternately, three times each: back to back
# (the data stays cached between calls) and with the cache flushed before every call. On a GPU the flush is the harness's own L2
# flush; on a CPU the loop is the harness's `measure` with a flush that reads a buffer four times
# the last-level cache (demos/t10_benchmarking/_cpu_cache.py).

# %%
llc = run.device.l2_bytes if gpu else (cpu_llc_bytes() or 32 * 2**20)
cache_name = "L2" if gpu else "last-level cache"
if not gpu:
    flusher = CpuCacheFlusher(llc)
    sweep_settings = Settings(warmup=2, min_repeats=5, max_repeats=20, min_time=0.03, flush_l2=True)


def time_sum(t, flush: bool):
    fn = lambda: t.sum()  # noqa: E731
    if gpu:
        return run.time(fn, flush=flush)
    return measure(fn, flusher, Settings(**{**sweep_settings.as_dict(), "flush_l2": flush}))


rows, warm_gbps, cold_gbps = [], [], []
warm_timings, cold_timings = [], []  # the Timing behind each point, for its spread
for mib in working_sets_mib:
    t = torch.rand(int(mib * 2**20) // 4, device=device)
    run.check_close(f"sum.{mib}MiB", t.sum().reshape(1), t.double().sum().reshape(1), rtol=1e-4, atol=0)
    # Alternate the two, three times, and keep each one's middle median: a machine that gets busier
    # half-way through then hits both, not just whichever was measured second.
    pairs = [(time_sum(t, False), time_sum(t, True)) for _ in range(3)]
    warm = sorted((p[0] for p in pairs), key=lambda r: r.median_s)[1]
    cold = sorted((p[1] for p in pairs), key=lambda r: r.median_s)[1]
    nbytes = t.numel() * 4
    warm_gbps.append(nbytes / warm.median_s / 1e9)
    cold_gbps.append(nbytes / cold.median_s / 1e9)
    warm_timings.append(warm)
    cold_timings.append(cold)
    rows.append([mib, "inside" if nbytes <= llc else "beyond", round(warm.median_s * 1e6, 1),
                 round(cold.median_s * 1e6, 1), round(warm_gbps[-1], 1), round(cold_gbps[-1], 1),
                 round(cold.median_s / warm.median_s, 2)])
    del t
run.table("cache", f"x.sum() over a working set, back to back vs {cache_name} flushed before each call "
          f"({cache_name}: {llc / 2**20:.0f} MiB)",
          ["working set (MiB)", f"vs {cache_name}", "back to back (us)", "flushed (us)", "back to back (GB/s)",
           "flushed (GB/s)", "flushed / back to back"], rows)
run.series("cache", f"Read bandwidth of x.sum(): cache-resident vs {cache_name} flushed", "working set (MiB)",
           "GB/s", {"back to back (cache-resident)": (working_sets_mib, warm_gbps, warm_timings),
                    f"{cache_name} flushed before each call": (working_sets_mib, cold_gbps, cold_timings)},
           x_log=True)
# "Well inside": at most a quarter of a CPU's last-level cache (shared with other processes), at most half
# of a GPU's L2 (a read of a few MiB takes microseconds on a GPU, so it needs the larger size to show a difference).
inside_share = 2 if gpu else 4
inside = [i for i, mib in enumerate(working_sets_mib) if mib * 2**20 <= llc / inside_share]
beyond = [i for i, mib in enumerate(working_sets_mib) if mib * 2**20 >= 4 * llc]
if inside and beyond:
    i, j = inside[-1], beyond[-1]
    run.metric("cache.inside_mib", working_sets_mib[i], "MiB",
               label=f"the largest working set at most 1/{inside_share} of the {cache_name}")
    run.metric("cache.inside.warm_over_flushed", warm_gbps[i] / cold_gbps[i], "x",
               label=f"{working_sets_mib[i]} MiB: back-to-back bandwidth over flushed (cache-resident speed-up)")
    run.metric("cache.beyond_mib", working_sets_mib[j], "MiB", label=f"the largest working set, at least 4x the {cache_name}")
    run.metric("cache.beyond.warm_over_flushed", warm_gbps[j] / cold_gbps[j], "x",
               label=f"{working_sets_mib[j]} MiB: back-to-back over flushed (close to 1: nothing stays cached)")
    run.metric("cache.inside_over_beyond_warm", warm_gbps[i] / warm_gbps[j], "x",
               label="back-to-back bandwidth, inside the cache over far beyond it")

# %% [markdown]
# ## 3. Spread, and how many repeats a stable median needs
#
# One small kernel timed many times in a row, each call alone (the harness's own per-call timer,
# no flush). From that one long sample: the median, the interquartile range, the minimum, the
# tail. Then the question a benchmark designer must answer: with n repeats, how much would the
# median move if the benchmark were run again? Two estimates:
#
# - **bootstrap**: draw n of the measured times with replacement, take the median; repeat 400
#   times; the half-width of the middle 90% of those medians, relative to the overall median.
#   This assumes the calls are independent and identically distributed;
# - **consecutive blocks**: cut the time-ordered run into blocks of n and take each block's median.
#   Their spread also carries drift (the machine getting busier or a clock changing), which the
#   bootstrap cannot see.

# %%
small = torch.rand(2**18, device=device)  # 1 MiB
samples = np.array(run.device.time_calls(lambda: small.sum(), spread_repeats, False))
q1, median, q3 = np.percentile(samples, [25, 50, 75])
run.table("spread", f"{spread_repeats} calls of x.sum() over 1 MiB, each timed alone",
          ["statistic", "us"], [[k, round(float(v) * 1e6, 2)] for k, v in (
              ("min", samples.min()), ("p25", q1), ("median", median), ("p75", q3), ("mean", samples.mean()),
              ("p99", np.percentile(samples, 99)), ("max", samples.max()))])
run.metric("spread.median_us", median * 1e6, "us", label="median of the long run")
run.metric("spread.iqr_over_median", (q3 - q1) / median, "fraction", label="interquartile range over the median")
run.metric("spread.mean_over_median", samples.mean() / median, "x", label="mean over median (a long right tail pulls the mean up)")
run.metric("spread.min_over_median", samples.min() / median, "x", label="minimum over median")
run.metric("spread.p99_over_median", np.percentile(samples, 99) / median, "x", label="p99 over median")

rng = np.random.default_rng(run.options.seed)
ns = [n for n in (3, 5, 10, 20, 50, 100, 200, 500) if n <= spread_repeats // 4]
boot, blocks = [], []
for n in ns:
    meds = np.median(rng.choice(samples, size=(400, n), replace=True), axis=1)
    lo, hi = np.percentile(meds, [5, 95])
    boot.append((hi - lo) / 2 / median)
    block_meds = np.median(samples[: (len(samples) // n) * n].reshape(-1, n), axis=1)
    lo, hi = np.percentile(block_meds, [5, 95])
    blocks.append((hi - lo) / 2 / median)
run.series("repeats", "How much the median moves with n repeats (half-width of its 90% range, relative)",
           "repeats n", "relative half-width", {"bootstrap (independent calls)": (ns, boot),
                                                "consecutive blocks (carries drift)": (ns, blocks)},
           hlines={"1%": 0.01}, x_log=True, y_log=True)
run.table("repeats", "The median's relative 90% half-width vs repeats",
          ["repeats n", "bootstrap", "consecutive blocks"],
          [[n, round(b, 4), round(c, 4)] for n, b, c in zip(ns, boot, blocks)])
for target in (0.01, 0.02):
    enough = next((n for n, b in zip(ns, boot) if b <= target), None)
    run.metric(f"repeats_for_{round(target * 100)}pct", enough if enough is not None else float(ns[-1] * 2), "repeats",
               label=f"fewest repeats whose bootstrap median stays within +-{target:.0%} (90% of resamples)"
               + ("" if enough is not None else f"; not reached by n={ns[-1]}, recorded as {ns[-1] * 2}"))
run.metric("repeats.bootstrap_at_10", boot[ns.index(10)], "fraction", label="bootstrap half-width with 10 repeats")
run.metric("repeats.blocks_at_10", blocks[ns.index(10)], "fraction", label="consecutive-block half-width with 10 repeats")
run.save()
