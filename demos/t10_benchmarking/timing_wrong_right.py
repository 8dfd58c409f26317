# %% [markdown]
# # Timing wrongly and rightly: the same operation, five timers
#
# A GPU runs asynchronously: `y = a @ b` returns as soon as the kernel is *queued*, long before
# it has finished. A host clock stopped right after the call therefore measures the launch, not
# the work. This demo times one matrix product five ways side by side: host clock without a
# sync (wrong on a GPU), host clock with a sync, CUDA events, `triton.testing.do_bench`, and
# `torch.utils.benchmark.Timer`, against the harness's own protocol. On a CPU, where an op has
# finished when it returns, the same comparison shows the CPU's own traps instead: the first
# call, the thread count (Timer's default is one thread), and run-to-run spread.

# %%
import statistics

import torch

from demos.harness.run import start
from demos.t10_benchmarking import _timers

run = start(
    "timing_wrong_right",
    title="Timing wrongly and rightly: one matmul, five timers, side by side",
    sizes={"tiny": 128, "small": 384, "full": 4096},  # n of an n x n @ n x n product
    cpu_threads=1,
)
n = run.sizes
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
flops = 2 * n**3
REPEATS = 50  # for the hand-written timers; the harness and Timer choose their own counts

# %% [markdown]
# ## The operation, checked first
#
# A float64 product on the CPU is the reference. Random data, never zeros: a kernel on zeros can
# take a different path (and on some GPUs draw less power), so it is not the same measurement.

# %%
a = torch.randn(n, n, device=device, dtype=dtype)
b = torch.randn(n, n, device=device, dtype=dtype)


def op():
    return a @ b


# The first call of the op is timed apart. In a fresh process a first matmul carries one-time costs
# (library initialisation, on a GPU the cuBLAS handle and workspace); here the harness's ceilings
# have already run matmuls in this process, so what is left is this shape's first call, and it may
# cost no more than the others. The compile case (warmup_and_caches) is where first calls hurt.
out, first_call_s = run.first_call(op)
reference = a.double().cpu() @ b.double().cpu()
tol = dict(rtol=2e-2, atol=2e-2 * n**0.5) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4 * n**0.5)
run.check_close("matmul", out, reference, **tol)

# %% [markdown]
# ## Five timers
#
# - **harness**: `run.time` (first call apart, warm-up, repeats until 0.2 s of work, median and
#   10th-90th percentile; CUDA events and an L2 flush before every repeat on a GPU, host clock
#   with a sync before it stops on a CPU);
# - **host clock, no sync**: `perf_counter()` around the call, the clock stopped when the call
#   returns;
# - **host clock + sync**: the same, with `torch.cuda.synchronize()` before the clock stops;
# - **CUDA events**: `Event.record()` before and after, read after one final sync (GPU only);
# - **triton.testing.do_bench** with `return_mode="median"` (its default is `"mean"`; GPU only);
# - **torch.utils.benchmark.Timer** `blocked_autorange`, once with its default `num_threads=1`
#   and once with every thread this process has.

# %%
sync = run.device.sync
machine_threads = run.machine_threads  # the harness runs this demo on one CPU thread; the machine has these
ROUNDS = 5  # every timer once per round, interleaved, so a machine that gets busier mid-run hits all of them


def p10_p90(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return ordered[len(ordered) // 10], ordered[(9 * len(ordered)) // 10]


def one_round() -> dict[str, tuple[float, float, float, str]]:
    """Each timer once: {method: (median s, low s, high s, note)}."""
    got = {}
    h = run.time(op)
    got["harness (run.time)"] = (h.median_s, h.p10_s, h.p90_s,
                                 f"{h.repeats} repeats, p10-p90" + (", L2 flushed" if run.device.is_gpu else ""))
    t = _timers.host_clock_no_sync(op, REPEATS, sync)
    got["host clock, no sync"] = (statistics.median(t), *p10_p90(t), "stops when the call returns"
                                  + (": measures the launch" if run.device.is_gpu else ": a CPU op is done by then"))
    t = _timers.host_clock_sync(op, REPEATS, sync)
    got["host clock + sync"] = (statistics.median(t), *p10_p90(t), "sync before the clock stops")
    for threads_, label in ((1, "torch Timer, num_threads=1 (its default)"),
                            (machine_threads, f"torch Timer, num_threads={machine_threads}")):
        m = _timers.torch_timer(op, threads_, min_run_time=0.1)
        q1, _, q3 = statistics.quantiles(m.times, n=4) if len(m.times) > 1 else (m.median,) * 3
        got[label] = (m.median, q1, q3, f"{len(m.times)} blocks of {m.number_per_run} calls, IQR")
    if run.device.is_gpu:
        t = _timers.cuda_events(op, REPEATS)
        got["CUDA events"] = (statistics.median(t), *p10_p90(t), "back to back, L2 not flushed")
        med = _timers.triton_do_bench(op, return_mode="median")
        got["triton do_bench (median)"] = (med, med, med, "CUDA events, L2 cleared before each call")
        mean = _timers.triton_do_bench(op, return_mode="mean")
        got["triton do_bench (mean, its default)"] = (mean, mean, mean, "the mean: pulled up by slow outliers")
    return got


rounds = [one_round() for _ in range(ROUNDS)]
medians = {m: statistics.median(r[m][0] for r in rounds) for m in rounds[0]}
rows = []
for method, med in medians.items():
    middle = sorted(rounds, key=lambda r: r[method][0])[ROUNDS // 2][method]  # the round that gave the median
    spread = "" if middle[1] == middle[2] else f"{middle[1] * 1e6:.1f}-{middle[2] * 1e6:.1f}"
    rows.append([method, round(med * 1e6, 1), spread, round(flops / med / 1e9, 1), middle[3]])
harness_s = medians["harness (run.time)"]
harness = sorted((r["harness (run.time)"] for r in rounds), key=lambda v: v[0])[ROUNDS // 2]
if not run.device.is_gpu:
    run.not_run("CUDA events", "needs a CUDA GPU: events are recorded on a CUDA stream")
    run.not_run("triton do_bench", "needs a GPU: do_bench times with the active Triton driver's device events")

# %% [markdown]
# ## What agrees, and what does not
#
# On a GPU the sync-less host clock must read far below the event time: it stopped before the
# kernel ran. Every timer that waits for the work (sync, events, do_bench, and Timer, which syncs
# the accelerator around each block) should agree with the harness within a stated factor; the
# harness and do_bench flush L2 and the others do not, one reason they differ a little.
#
# On a CPU, sync is a no-op, so the sync-less clock is right. Two other things move the number:
#
# - **the thread count**: Timer runs with `num_threads=1` unless told otherwise, whatever the
#   process uses; with more threads, on a machine where other processes hold cores, a parallel
#   region can wait at every barrier for a thread that is not running;
# - **blocks vs single calls**: Timer times blocks of `number_per_run` calls and divides. When
#   another process takes the core for a scheduler time slice now and then, a per-call median
#   drops those calls while a block's average carries them, so Timer reads higher on a busy
#   machine, by an amount that depends on the load. Timer is therefore only checked not to read
#   faster than the work.

# %%
AGREE = 1.5  # per-call medians (hand-written clocks, events, do_bench) vs the harness: a gross-error bound
agreeing = {"host clock + sync": AGREE}
if run.device.is_gpu:
    agreeing.update({"CUDA events": AGREE, "triton do_bench (median)": AGREE})
    run.check("no_sync_below_events", medians["host clock, no sync"] < medians["CUDA events"],
              f"sync-less {medians['host clock, no sync'] * 1e6:.1f} us < events {medians['CUDA events'] * 1e6:.1f} us")
else:
    agreeing["host clock, no sync"] = AGREE
for method, factor in agreeing.items():
    ratio = medians[method] / harness_s
    run.check(f"agrees.{method}", 1 / factor <= ratio <= factor,
              f"{method} / harness = {ratio:.2f} (allowed {1 / factor:.2f}-{factor:.2f})")
# Timer's block averages carry every interruption a per-call median drops, so on a busy machine it
# reads higher by an amount that depends on the load (recorded below). What it must never do is read
# *faster* than the work: that would be a timer that stopped before the work finished.
timer_ratio = medians["torch Timer, num_threads=1 (its default)"] / harness_s
run.check("timer_not_faster_than_the_work", timer_ratio >= 1 / AGREE,
          f"torch Timer (num_threads=1) / harness = {timer_ratio:.2f} (at least {1 / AGREE:.2f})")

run.table("timers", f"One {n}x{n} @ {n}x{n} {str(dtype).removeprefix('torch.')} matmul, timed five ways",
          ["timer", "median (us)", "spread (us)", "GFLOP/s implied", "what it measures"], rows)

run.metric("harness.median_us", harness_s * 1e6, "us", label="harness median per call")
run.metric("harness.p90_over_p10", harness[2] / harness[1], "x", label="harness spread: p90 / p10")
run.metric("first_call_over_median", first_call_s / harness_s, "x",
           label="first call in the process over the steady-state median")
run.metric("first_call_ms", first_call_s * 1e3, "ms", label="first call in the process")
run.metric("no_sync_over_harness", medians["host clock, no sync"] / harness_s, "x",
           label="host clock without sync, over the harness (on a GPU far below 1: it timed the launch)")
run.metric("sync_over_harness", medians["host clock + sync"] / harness_s, "x",
           label="host clock with sync, over the harness")
run.metric("timer_default_over_harness", medians["torch Timer, num_threads=1 (its default)"] / harness_s, "x",
           label="torch Timer with its default num_threads=1, over the harness")
run.metric("timer_all_threads_over_one", medians[f"torch Timer, num_threads={machine_threads}"]
           / medians["torch Timer, num_threads=1 (its default)"], "x",
           label=f"torch Timer: num_threads={machine_threads} over its default num_threads=1")
run.metric("machine_threads", machine_threads, "threads", label="threads this machine offers PyTorch")
# The op's rate as a fraction of the same-run matmul ceiling, on a GPU only: on a CPU this demo runs
# on one thread while the ceilings use every thread, so the fraction would compare unlike things.
if run.device.is_gpu:
    run.metric("matmul.tflops", flops / harness_s / 1e12, "TFLOP/s", label="the harness's rate for the op",
               ceiling="matmul_bf16")
if run.device.is_gpu:
    run.metric("no_sync_over_events", medians["host clock, no sync"] / medians["CUDA events"], "x",
               label="sync-less host clock over CUDA events")
    do_bench_s = medians["triton do_bench (median)"]
    run.metric("do_bench_over_harness", do_bench_s / harness_s, "x", label="do_bench median over the harness")
    run.metric("do_bench_mean_over_median", medians["triton do_bench (mean, its default)"] / do_bench_s, "x",
               label="do_bench mean over its median")

run.save()
