# %% [markdown]
# # Gradient accumulation, and how much of DDP's communication hides behind backward
#
# **Accumulation.** Running k micro-batches of b sequences, each loss divided by k, and stepping once
# gives the same gradient as one batch of k*b sequences (the loss is a mean over equal-sized pieces),
# at the memory of one micro-batch. Checked here to float32 rounding, with a teeth check: forgetting
# the 1/k is caught.
#
# **Overlap.** DDP groups gradients into buckets (`bucket_cap_mb`, 25 MB by default) in the reverse
# order of the forward pass and starts a bucket's all-reduce as soon as its last gradient is ready,
# while backward goes on computing earlier layers (Li et al., [PyTorch Distributed: Experiences on
# Accelerating Data Parallel Training](https://arxiv.org/abs/2006.15704)). How much of the all-reduce
# time is hidden is not assumed here: one step on 2 gloo ranks runs under `torch.profiler`, and the
# overlap fraction is computed from the trace's intervals: the time covered by both an all-reduce
# event (gloo's worker thread) and a leaf ATen op of the backward pass (the autograd thread), over
# the all-reduce time.

# %%
import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from demos.harness.run import start
from demos.t7_parallelism._dist import launch
from demos.t8_training._gpt import GPTConfig, batch, make_gpt

run = start("accumulation_and_overlap", title="Gradient accumulation and DDP compute/communication overlap",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=32, width=64, heads=2, layers=2, dropout=0.0), "b": 2,
                            "k": 4, "caps": [0.05, 25.0]},
                   "small": {"cfg": GPTConfig(vocab=512, seq=64, width=128, heads=4, layers=6, dropout=0.0), "b": 4,
                             "k": 4, "caps": [0.1, 0.5, 2.0, 25.0]},
                   "full": {"cfg": GPTConfig(vocab=32000, seq=1024, width=1024, heads=16, layers=8, dropout=0.0),
                            "b": 4, "k": 8, "caps": [1.0, 5.0, 25.0, 100.0]}},
            cpu_threads=1)
cfg, B, K = run.sizes["cfg"], run.sizes["b"], run.sizes["k"]
dev = run.torch_device

# %% [markdown]
# ## Accumulation equals the large batch

# %%
def grads_after(fn):
    model = make_gpt(cfg, seed=0, device=dev).train()
    fn(model)
    return torch.cat([p.grad.flatten() for p in model.parameters()])


tokens, targets = batch(cfg, B * K, step=0, device=dev)
big = grads_after(lambda m: m(tokens, targets).backward())


def accumulate(model, divide=True):
    for t, y in zip(tokens.split(B), targets.split(B)):
        loss = model(t, y)
        (loss / K if divide else loss).backward()


accumulated = grads_after(accumulate)
run.check_close("accumulation_equals_big_batch", accumulated, big, rtol=1e-4, atol=1e-6,
                reference_name=f"one batch of {B * K} sequences")
forgot = grads_after(lambda m: accumulate(m, divide=False))
err = ((forgot - big).abs() - (1e-6 + 1e-4 * big.abs())).max().item()
run.check("forgetting_1_over_k_is_caught", err > 0, f"without /k the gradient is {K}x too large: outside the tolerance")
run.metric("accumulation.max_abs_err", (accumulated - big).abs().max().item(), "abs")
run.metric("accumulation.grad_norm_ratio_without_division", (forgot.norm() / big.norm()).item(), "x")

# %% [markdown]
# ## DDP overlap, read from the trace
#
# For each `bucket_cap_mb`: two warm-up steps (DDP rebuilds its buckets in the order gradients arrived
# during the first backward), then PROFILED profiled steps; each quantity is read per step and the
# median over the steps is kept (one step on a shared 2-core machine is one sample, and its order
# against another cap's flipped between runs). Intervals are merged per kind before they are
# intersected, so concurrent events are not counted twice.

# %%
def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(intervals):
    return sum(b - a for a, b in intervals)


def intersect(xs, ys):
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append([a, b])
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


PROFILED = 5


def one_step(events, window):
    """The trace arithmetic for one profiled step: the events that start inside its window (gloo's thread can
    close a step's last all-reduce event a little after the step's window ends)."""
    events = [e for e in events if window.start <= e.time_range.start < window.end]
    comm_events = [e for e in events if e.name == "gloo:all_reduce"]
    comm = union([[e.time_range.start, e.time_range.end] for e in comm_events])
    comm_threads = {e.thread for e in comm_events}
    bw = next(e for e in events if e.name == "backward").time_range
    # backward compute: the outermost ATen ops inside backward(), off gloo's threads, ... ; a parent event
    # such as autograd's evaluate_function can contain time spent waiting, an ATen op is work
    leaves = [e for e in events if e.name.startswith("aten::") and e.thread not in comm_threads
              and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))
              and bw.start <= e.time_range.start and e.time_range.end <= bw.end]
    # ... inside autograd's gradient functions (not AccumulateGrad, not DDP's bucket copies after the wait)
    grad_fns = union([[e.time_range.start, e.time_range.end] for e in events
                      if e.name.startswith("autograd::engine::evaluate_function") and "AccumulateGrad" not in e.name])
    backward = intersect(union([[e.time_range.start, e.time_range.end] for e in leaves]), grad_fns)
    first_issue = min(e.time_range.start for e in events if e.name == "c10d::allreduce_")
    overlap = length(intersect(comm, backward))
    return {"comm_us": length(comm), "backward_us": length(backward), "overlap_us": overlap,
            "exposed_us": length(comm) - overlap, "overlap_fraction": overlap / length(comm),
            # the order of work, not its timing: matmul FLOPs of backward issued after the first all-reduce
            "flops_after_first_issue": sum(e.flops for e in leaves if e.time_range.start >= first_issue) /
            sum(e.flops for e in leaves),
            "backward_window_us": bw.end - bw.start, "step_us": window.end - window.start,
            "all_reduces": len(comm_events)}


def profile_steps(rank, cap_mb):
    model = make_gpt(cfg, seed=0).train()
    ddp = DistributedDataParallel(model, bucket_cap_mb=cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.0)

    def step(i):
        t, y = batch(cfg, B, step=i, seed=rank)
        opt.zero_grad(set_to_none=True)
        loss = ddp(t, y)
        with torch.profiler.record_function("backward"):
            loss.backward()
        opt.step()

    step(0)
    step(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        for i in range(PROFILED):
            with torch.profiler.record_function("train_step"):
                step(2 + i)
    events = prof.events()
    steps = [one_step(events, e.time_range) for e in events if e.name == "train_step"]
    out = {k: float(np.median([s[k] for s in steps])) for k in steps[0]}
    out["buckets"] = len(ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(","))
    out["all_reduces_per_step"] = sorted({s["all_reduces"] for s in steps})
    return out


def ddp_worker(rank, world, caps):
    return [profile_steps(rank, cap) for cap in caps]


if dev.type != "cpu":
    run.not_run("ddp overlap", "measured on forked gloo ranks of the host CPU; on GPUs the same trace arithmetic "
                "applies to NCCL and compute kernel intervals under torchrun, which this demo does not run")
    run.save()
    raise SystemExit
grad_mb = sum(p.numel() for p in make_gpt(cfg).parameters()) * 4 / 2**20
run.metric("ddp.gradient_mb", grad_mb, "MiB", label="fp32 gradients all-reduced per step", origin="computed")
caps = run.sizes["caps"]
rows, fractions, opportunity = [], [], []
for cap, r in zip(caps, launch(ddp_worker, 2, caps)[0]):  # rank 0's traces
    frac, chance = r["overlap_fraction"], r["flops_after_first_issue"]
    tag = f"cap{str(cap).replace('.', 'p')}"
    median = f"median of {PROFILED} profiled steps"
    run.metric(f"ddp.{tag}.overlap_fraction", frac, "fraction",
               label=f"bucket_cap_mb={cap}: all-reduce time under backward compute ({median})")
    run.metric(f"ddp.{tag}.compute_after_first_all_reduce", chance, "fraction",
               label="share of backward matmul FLOPs still to run when the first all-reduce is issued")
    run.metric(f"ddp.{tag}.buckets", r["buckets"], "buckets")
    run.metric(f"ddp.{tag}.comm_ms", r["comm_us"] / 1e3, "ms", label=f"all-reduce time ({median})")
    run.metric(f"ddp.{tag}.exposed_ms", r["exposed_us"] / 1e3, "ms",
               label=f"all-reduce time not under backward compute ({median})")
    run.metric(f"ddp.{tag}.backward_ms", r["backward_window_us"] / 1e3, "ms",
               label=f"backward() call, wall, waits included ({median})")
    run.metric(f"ddp.{tag}.backward_compute_ms", r["backward_us"] / 1e3, "ms",
               label=f"backward's compute ops (their union), waits excluded ({median})")
    run.metric(f"ddp.{tag}.step_ms", r["step_us"] / 1e3, "ms", label=f"profiled step ({median})")
    run.check(f"ddp.{tag}.one_all_reduce_per_bucket", r["all_reduces_per_step"] == [r["buckets"]],
              f"{', '.join(map(str, r['all_reduces_per_step']))} gloo all-reduces for {r['buckets']} buckets")
    rows.append([cap, r["buckets"], r["comm_us"] / 1e3, r["backward_us"] / 1e3, chance, frac,
                 r["exposed_us"] / 1e3, r["backward_window_us"] / 1e3, r["step_us"] / 1e3])
    fractions.append(frac)
    opportunity.append(chance)
run.table("overlap", f"DDP on 2 gloo ranks, {grad_mb:.1f} MiB of gradients (rank 0's trace, medians of "
          f"{PROFILED} profiled steps)",
          ["bucket_cap_mb", "buckets", "all-reduce ms", "backward compute ms", "FLOPs left at 1st all-reduce",
           "overlap fraction", "exposed all-reduce ms", "backward() wall ms", "step ms"], rows)
best = max(range(len(caps)), key=lambda i: fractions[i])
run.series("overlap", f"DDP: {fractions[best]:.0%} of all-reduce hidden at {caps[best]:g} MB buckets, "
           f"{fractions[-1]:.0%} at {caps[-1]:g} MB", "bucket_cap_mb", "fraction",
           {"backward FLOPs left when the first all-reduce is issued": (caps, opportunity),
            "all-reduce time under backward compute (measured overlap)": (caps, fractions)}, x_log=True)
run.check("one_bucket_cannot_overlap", opportunity[-1] < 0.15 and fractions[-1] < 0.15,
          f"one bucket: the all-reduce is issued with {opportunity[-1]:.3f} of backward FLOPs left, overlap "
          f"{fractions[-1]:.3f}")
run.check("small_buckets_start_early", opportunity[0] > 0.3,
          f"smallest buckets: the first all-reduce is issued with {opportunity[0]:.2f} of backward FLOPs still to run")
run.save()
