# %% [markdown]
# # DDP's gradient buckets: how many all-reduces a step makes, and what the bucket size costs
#
# DDP does not all-reduce each gradient on its own: it packs gradients, in the order backward
# produces them, into buckets of about `bucket_cap_mb` and all-reduces a bucket as soon as it is
# full, while backward goes on computing the earlier layers. Small buckets mean many small
# all-reduces (a fixed cost each); large buckets mean fewer, but the first one starts later. In
# its first step DDP does not yet know the order in which gradients arrive, so it uses one bucket
# for everything; then it rebuilds the buckets in the order it observed. Only when `bucket_cap_mb`
# is left at its default (25 MiB) is the first rebuilt bucket capped at
# `dist._DEFAULT_FIRST_BUCKET_BYTES` (1 MiB), so the last layers' gradients go out early.
#
# This demo sweeps the bucket size on 2 ranks training an MLP (the model and the single-process
# reference of `data_parallel.py`, from `_dp_model.py`): for each size it checks one step against
# one process on the whole batch, counts the all-reduces of a steady step with `torch.profiler`,
# and times steps with the harness (a fixed number of repeats, the same on every rank, as
# collectives need).

# %%
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._dp_model import (LR, c10d, close_to, count_collectives, global_batch, make_mlp, my_rows,
                                            train_single_process, train_step)

WORLD_SIZE = 2
BUCKET_CAPS = [0.25, 1, 5, 25, 100, None]  # MiB; None = DDP's default (25 MiB, first bucket 1 MiB)
MB = 1e6

_dist.pin_gpu_per_rank()  # under torchrun: this rank's GPU, before start() measures the ceilings
run = start(
    "ddp_buckets",
    title="DDP gradient buckets: all-reduces per step and step time vs bucket_cap_mb",
    sizes={  # MLP layers x width, global batch, timed repeats per bucket size
        "tiny": {"layers": 6, "width": 300, "batch": 8, "repeats": 3},
        "small": {"layers": 20, "width": 500, "batch": 16, "repeats": 7},
        "full": {"layers": 24, "width": 1024, "batch": 64, "repeats": 10},
    },
)
cfg = run.sizes

# %% [markdown]
# ## Where the ranks run
#
# As a plain script, 2 forked CPU ranks over gloo (one intra-op thread each; see `_dist.py`);
# under torchrun, torchrun's world size, on GPUs over NCCL. `--device cuda` without torchrun records
# the sweep as not run: it needs 2 GPUs.

# %%
ranks = _dist.place_ranks(run, [WORLD_SIZE], "DDP bucket sweep on several GPUs (NCCL)")
if ranks is None:
    run.save()
    raise SystemExit(0)
sweep_world = ranks.world_sizes[0]


def cap_label(cap) -> str:
    return "default" if cap is None else f"{cap:g}mb".replace(".", "p")


batch = global_batch(99, cfg["batch"], cfg["width"])
reference = train_single_process(cfg["layers"], cfg["width"], [batch])

# %% [markdown]
# ## One rank's sweep
#
# For each bucket size: a fresh DDP model, one step checked against the reference on every rank
# (a rank raises on a mismatch, so nothing wrong is timed), the first step's all-reduces (DDP's
# initial single bucket), then, after the step in which DDP rebuilds its buckets, a steady step's
# all-reduces and the step time (`_dist.time_steps`: the harness's `measure` with fixed repeats).

# %%
def bucket_sweep(rank: int, world_size: int) -> dict:
    xs, ys = (my_rows(t, rank, world_size).to(ranks.device) for t in batch)
    out = {}
    for cap in BUCKET_CAPS:
        model = make_mlp(cfg["layers"], cfg["width"]).to(ranks.device)
        ddp = DistributedDataParallel(model, bucket_cap_mb=cap)
        optimizer = torch.optim.Adam(ddp.parameters(), lr=LR)

        def step(ddp=ddp, optimizer=optimizer):
            train_step(ddp, optimizer, xs, ys)

        first_counts = count_collectives(step, rank)  # the first step: DDP's initial single bucket
        passed, err = close_to(torch.cat([p.detach().flatten().cpu() for p in model.parameters()]), reference)
        if not passed:  # every rank holds the same replica, so every rank stops here, before any timing
            raise AssertionError(f"DDP with bucket_cap_mb={cap} differs from the reference by {err:.2e}")
        step()  # DDP rebuilds its buckets at the start of this step
        counts = count_collectives(step, rank)
        timing = _dist.time_steps(step, ranks.device, cfg["repeats"])
        out[cap_label(cap)] = {"cap": cap, "err": err, "passed": passed, "first_counts": first_counts,
                               "counts": counts, "timing": timing.as_dict(),
                               "rebuilt_bucket_bytes": ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]}
        del ddp, optimizer, model
    return out


gathered = _dist.launch(bucket_sweep, sweep_world, device=ranks.device)
if gathered is None:  # a torchrun rank other than 0: rank 0 writes the record
    _dist.shutdown()
    raise SystemExit(0)
_dist.shutdown()
sweep = gathered[0]
for label, s in sweep.items():
    run.check(f"bucket_sweep.{label}", s["passed"],
              f"one DDP step with bucket_cap_mb={s['cap']} on {sweep_world} ranks: max |err| {s['err']:.2e} vs "
              "single-process Adam (checked on every rank before timing)")

# %% [markdown]
# ## All-reduces per step and step time
#
# A steady step must make exactly one all-reduce per bucket of DDP's rebuilt bucket list.

# %%
sweep_params = sum(cfg["width"] * (cfg["width"] + 1) for _ in range(cfg["layers"]))
run.metric("bucket.grad_mb", sweep_params * 4 / MB, "MB",
           label=f"sweep MLP ({cfg['layers']} x {cfg['width']}): fp32 gradient bytes all-reduced per step", origin="computed")
run.metric("bucket.first_bucket_mib", dist._DEFAULT_FIRST_BUCKET_BYTES / 2**20, "MiB",
           label="dist._DEFAULT_FIRST_BUCKET_BYTES: first bucket's cap when bucket_cap_mb is left at its default")
sweep_rows, caps, calls, step_ms, spreads = [], [], [], [], []
for label, s in sweep.items():
    n_calls = c10d(s["counts"], "allreduce_")
    n_buckets = len(s["rebuilt_bucket_bytes"].split(","))
    run.check(f"bucket.{label}.calls_equal_buckets", n_calls == n_buckets,
              f"{n_calls} all-reduces in a steady step, {n_buckets} buckets in DDP's rebuilt bucket list")
    t = s["timing"]
    cap_name = "default" if s["cap"] is None else s["cap"]
    run.metric(f"bucket.{label}.calls", n_calls, "calls", label=f"bucket_cap_mb={cap_name}: all-reduces per step")
    run.metric(f"bucket.{label}.step_ms", t["median_s"] * 1e3, "ms",
               label=f"bucket_cap_mb={cap_name}: median training step time, {sweep_world} ranks")
    largest = max(int(b) for b in s["rebuilt_bucket_bytes"].split(","))
    sweep_rows.append(["default (25, first 1 MiB)" if s["cap"] is None else s["cap"],
                       c10d(s["first_counts"], "allreduce_"), n_calls, round(largest / MB, 3),
                       round(t["median_s"] * 1e3, 2), f"{t['p10_s'] * 1e3:.2f}-{t['p90_s'] * 1e3:.2f}"])
    if s["cap"] is not None:
        caps.append(s["cap"])
        calls.append(n_calls)
        step_ms.append(t["median_s"] * 1e3)
        spreads.append(t["spread"])
run.table("bucket_sweep", f"DDP bucket size on {sweep_world} ranks ({sweep_params:,} parameters, "
          f"{sweep_params * 4 / MB:.1f} MB of gradients, batch {cfg['batch']})",
          ["bucket_cap_mb", "all-reduces (first step)", "all-reduces (steady step)", "largest bucket (MB)",
           "step median (ms)", "p10-p90 (ms)"], sweep_rows)
settled = next(i for i in range(len(calls)) if all(c == calls[-1] for c in calls[i:]))  # first cap of the final count
run.series("bucket_calls", f"{calls[0]} all-reduces per step at {caps[0]:g} MiB buckets, {calls[-1]} from "
           f"{caps[settled]:g} MiB up", "bucket_cap_mb (MiB)",
           "all-reduces per step", {"measured (profiler)": (caps, calls)}, x_log=True, y_log=True)
run.series("bucket_time", "Training step time vs DDP bucket size", "bucket_cap_mb (MiB)", "median step (ms)",
           {f"{sweep_world} ranks": (caps, step_ms, spreads)}, x_log=True)
run.save()

# %% [markdown]
# ## What this measured, and what it did not
#
# The all-reduce counts are DDP's algorithm and come out the same on any machine. The step times
# are gloo over loopback with one intra-op thread per rank: gloo runs a collective on its own
# thread, so DDP's all-reduces can overlap backward even here, but the ranks, their gloo threads
# and the kernel's loopback copies share the host's cores, so what overlap buys cannot be read
# from these times. On GPUs with NCCL, DDP launches each bucket's all-reduce on a separate stream
# as soon as the bucket fills, so it runs over NVLink or InfiniBand *while* backward computes the
# earlier layers and only the last bucket's all-reduce is exposed: that is why buckets exist, why
# the first (last-layer) bucket is kept small, and why tiny buckets still lose (each all-reduce
# pays a fixed latency).
