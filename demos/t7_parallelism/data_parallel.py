# %% [markdown]
# # Data parallelism: DDP, ZeRO-1 and FSDP2 (same answer, different memory and traffic)
#
# Data parallelism gives every rank a different slice of the batch and keeps the ranks' models in
# step by averaging gradients. **DDP** keeps a full copy of parameters, gradients and optimizer
# state on every rank and all-reduces the gradients. **Fully sharded** data parallelism (ZeRO-3,
# PyTorch's FSDP2 `fully_shard`) keeps only 1/p of each on a rank, all-gathers a layer's
# parameters just before it runs, and reduce-scatters its gradients, trading memory for traffic.
#
# This demo runs both (and DDP with a sharded optimizer, ZeRO-1) on 2 and 4 real `torch.distributed`
# ranks, checks that each one trains to the same parameters as one process on the whole batch,
# then *measures* what the ZeRO paper (Rajbhandari et al., [ZeRO: Memory Optimizations Toward
# Training Trillion Parameter Models](https://arxiv.org/abs/1910.02054)) predicts: bytes per
# parameter on each rank, the collectives each step issues (counted by `torch.profiler`), and the
# bytes they move (what each rank writes to its sockets, and the loopback interface's counter).
# How DDP's gradient buckets set the number of all-reduces is `ddp_buckets.py`.

# %%
import math

import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard  # FSDP2 (public since torch 2.6)
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._dp_model import (ATOL, LR, RTOL, UnshardedPeak, bytes_sent, c10d, close_to,
                                            count_collectives,
                                            global_batch, make_mlp, module_of, my_rows, optimizer_state,
                                            storage_bytes, train_single_process, train_step)

_dist.pin_gpu_per_rank()  # under torchrun: this rank's GPU, before start() measures the ceilings
run = start(
    "data_parallel",
    title="Data parallelism: DDP vs ZeRO-1 vs FSDP2, memory and traffic per rank",
    sizes={  # the checked MLP: layers x width, global batch, Adam steps
        "tiny": {"layers": 4, "width": 66, "batch": 8, "steps": 3},
        "small": {"layers": 8, "width": 258, "batch": 32, "steps": 3},
        "full": {"layers": 8, "width": 1026, "batch": 64, "steps": 3},
    },
)
cfg = run.sizes
MB = 1e6

# %% [markdown]
# ## Where the ranks run
#
# As a plain script, `_dist.launch` forks the ranks on this machine, each a process with **one
# intra-op thread**, talking **gloo over the loopback interface** (TCP on 127.0.0.1). With fewer
# cores than ranks, memory, counts and bytes are exact but step times are not what a cluster would
# see. On GPUs the same code runs under `torchrun`, one process per GPU over NCCL, for the world size
# torchrun started; `--device cuda` without torchrun records the ranks as not run.

# %%
ranks = _dist.place_ranks(run, [2, 4], "DDP, ZeRO-1 and FSDP2 on several GPUs (NCCL)")
if ranks is None:
    run.save()
    raise SystemExit(0)
rank_device, world_sizes = ranks.device, ranks.world_sizes
measure_bytes = _dist.can_meter_bytes(ranks)  # gloo writes every byte through a socket on this host; NCCL does not
if not measure_bytes:
    run.not_run("bytes sent per step", "NCCL moves data over NVLink/PCIe/InfiniBand, not through sockets on `lo`")

# %% [markdown]
# ## The model, the data, and the single-process reference
#
# A stack of square `Linear` layers with ReLU, trained with Adam in fp32 on a mean-squared error
# (`_dp_model.py`). The width is 2 more than a multiple of 4, so 4 ranks cannot split a weight's rows
# evenly and FSDP's padding shows. Every rank builds the same model from one seed and trains on the
# r-th of p equal slices of the same global batches; with equal slices the average of the ranks'
# gradients is the whole-batch gradient, so the reference is one process on the whole batch.

# %%
batches = [global_batch(s, cfg["batch"], cfg["width"]) for s in range(cfg["steps"])]
reference = train_single_process(cfg["layers"], cfg["width"], batches)
n_params = reference.numel()
n_tensors = 2 * cfg["layers"]
run.metric("model.params_m", n_params / 1e6, "M", label=f"MLP {cfg['layers']} x {cfg['width']}: parameters (millions)", origin="computed")

# %% [markdown]
# ## The variants
#
# - **ddp**: `DistributedDataParallel` with `gradient_as_bucket_view=True`, so each `.grad` is a
#   view into the all-reduced bucket (the default keeps a second full copy of the gradients, says
#   its [documentation](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)).
#   Plain Adam on every rank.
# - **zero1**: the same DDP, with `torch.distributed.optim.ZeroRedundancyOptimizer` around Adam.
#   That is ZeRO stage 1: each rank keeps Adam's state for only its share of the parameter
#   tensors, updates those, and broadcasts them to the others. Gradients are still all-reduced in
#   full, so stage 2 (sharded gradients) is not a separate PyTorch API; it is what FSDP does.
# - **fsdp**: FSDP2's `fully_shard` on each `Linear`, then on the whole model (ZeRO stage 3).
#   Parameters, gradients and Adam's state are `DTensor`s sharded along dim 0 (rows); each layer
#   is all-gathered in forward, freed after it (`reshard_after_forward=True`), all-gathered again
#   in backward, and its gradient reduce-scattered.
# - **fsdp_keep**: the same with `reshard_after_forward=False`: parameters stay gathered from
#   forward until backward, so no second all-gather, but the whole model is unsharded at the end
#   of the forward pass. (The FSDP documentation likens this to ZeRO-2.)

# %%
VARIANTS = ("ddp", "zero1", "fsdp", "fsdp_keep")


def wrap(variant: str, model: nn.Module, world_size: int):
    """The variant's model and optimizer, around a model that every rank built identically."""
    model = model.to(rank_device)
    if variant in ("ddp", "zero1"):
        ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)  # on a GPU: the current device
        if variant == "ddp":
            return ddp, torch.optim.Adam(ddp.parameters(), lr=LR)
        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=LR)
    mesh = init_device_mesh(rank_device.type, (world_size,))
    reshard = variant == "fsdp"
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model, torch.optim.Adam(model.parameters(), lr=LR)


# %% [markdown]
# ## How each quantity is measured, inside every rank
#
# **Memory.** After the last step (gradients still held), each rank sums the bytes of the
# distinct **storages** behind its parameters, their `.grad` and the optimizer's state (Adam:
# `exp_avg`, `exp_avg_sq`, a 4-byte `step` per tensor); a `DTensor` counts as its local shard. So a
# padded shard counts with its padding, and gradients that are views into one DDP bucket count once.
#
# **Transient memory.** A forward pre-hook on every `Linear` (after FSDP's own hook has gathered
# that layer) sums the storages of the layers whose parameters are plain tensors at that moment, not
# sharded `DTensor`s; FSDP frees a gathered parameter by shrinking its storage to 0 bytes. The peak
# over the forward is recorded. No hook sees the moment FSDP2 copies a layer out of its flat
# all-gather buffer, when the layer exists twice.
#
# **Collectives.** Rank 0 runs one steady-state step under `torch.profiler` and counts the
# `c10d::` operations issued (what the framework asked for) and the `gloo:` events (what the
# backend ran).
#
# **Bytes on the wire**, with `_dist.bytes_sent`, in windows of one training step between barriers,
# net of the barriers' own bytes, least of 3 tries: per rank the `wchar` counter of `/proc/self/io`
# (the bytes it passed to `write` calls: gloo's payload plus its small message headers, untouched by
# other programs), summed over ranks and maxed with an all-reduce after the window; and all ranks
# together, the loopback interface's transmit counter (`/proc/net/dev`, `lo`) on rank 0, TCP/IP
# headers included (about 0.1% at loopback's 64 KiB packets), which other programs can only add to.
#
# The helpers (`storage_bytes`, `UnshardedPeak`, `bytes_sent`) live in `_dp_model.py`.

# %% [markdown]
# ## One rank's work
#
# For each variant: build it, train the checked steps, take the memory inventory, gather the full
# parameters (for FSDP `full_tensor()`, itself an all-gather) for the check, then run one more step
# under the profiler and a few in the byte-counting windows. Rank 0 and the last rank send their
# parameters back; rank 0 sends the counts and bytes.

# %%
def train_and_measure(variant: str, rank: int, world_size: int) -> dict:
    wrapped, optimizer = wrap(variant, make_mlp(cfg["layers"], cfg["width"]), world_size)
    model = module_of(wrapped)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    peak = UnshardedPeak(linears)
    hooks = [layer.register_forward_pre_hook(peak) for layer in linears] if variant.startswith("fsdp") else []

    for x, y in batches:
        train_step(wrapped, optimizer, my_rows(x, rank, world_size).to(rank_device),
                   my_rows(y, rank, world_size).to(rank_device))
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    state = optimizer_state(optimizer)
    memory = {"params": storage_bytes(params), "grads": storage_bytes(grads), "optimizer": storage_bytes(state)}
    full = [p.full_tensor() if isinstance(p, DTensor) else p for p in params]
    flat = torch.cat([t.detach().flatten().cpu() for t in full]) if rank in (0, world_size - 1) else None
    for h in hooks:
        h.remove()

    x, y = global_batch(cfg["steps"], cfg["batch"], cfg["width"])
    xs, ys = my_rows(x, rank, world_size).to(rank_device), my_rows(y, rank, world_size).to(rank_device)
    step = lambda: train_step(wrapped, optimizer, xs, ys)  # noqa: E731
    counts = count_collectives(step, rank)
    sent = bytes_sent(step) if measure_bytes else None
    buckets = len(wrapped._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(",")) \
        if isinstance(wrapped, DistributedDataParallel) else None
    return {"flat": flat, "memory": memory, "peak_unsharded": peak.peak, "counts": counts,
            "sent": sent, "ddp_buckets": buckets}


def rank_main(rank: int, world_size: int) -> dict:
    result = {v: train_and_measure(v, rank, world_size) for v in VARIANTS}
    return result if rank in (0, world_size - 1) else None


# Run the ranks:
results = {}
for p in world_sizes:
    gathered = _dist.launch(rank_main, p, device=rank_device)
    if gathered is None:  # a torchrun rank other than 0: its work is done
        _dist.shutdown()
        raise SystemExit(0)
    results[p] = {"first": gathered[0], "last": gathered[-1]}
_dist.shutdown()

# %% [markdown]
# ## Correctness: every variant equals one process on the whole batch
#
# After the checked steps, each variant's parameters (on rank 0 and on the last rank; FSDP's
# gathered with `full_tensor()`) are compared with the single-process reference, in fp32 with
# `rtol`/`atol` as stated. To show the tolerance is tight enough to catch a real mistake, the
# same steps are also run on rank 0's rows alone, as a rank would if its gradients were never
# averaged; that must fail the same comparison by a wide margin.

# %%
for p in world_sizes:
    for variant in VARIANTS:
        for which in ("first", "last"):
            r = 0 if which == "first" else p - 1
            run.check_close(f"{variant}.p{p}.rank{r}", results[p][which][variant]["flat"], reference,
                            rtol=RTOL, atol=ATOL, reference_name="single-process Adam on the whole batch (fp32)")
passed, unaveraged_err = close_to(train_single_process(cfg["layers"], cfg["width"],
                                                     [(x.chunk(2)[0], y.chunk(2)[0]) for x, y in batches]), reference)
run.check("tolerance_catches_unaveraged_gradients", not passed,
          f"training on half the batch without averaging is off by up to {unaveraged_err:.2e}, outside the tolerance")

# %% [markdown]
# ## Memory per rank: measured, and the ZeRO formula
#
# With fp32 weights and Adam, a parameter costs 4 bytes, its gradient 4, and Adam's two moments 8:
# **16 bytes per parameter on every DDP rank**. (The ZeRO paper's 16 is for mixed precision, 2 + 2
# + 12 with an fp32 master copy; pure fp32 happens to land on the same number.) ZeRO-1 shards the
# 8 optimizer bytes: 4 + 4 + 8/p. Fully sharded keeps 16/p, plus padding: FSDP2 pads each
# tensor's dim 0 to a multiple of p, so a rank holds ceil(rows/p) rows of every tensor. Adam's
# 4-byte `step` per tensor is added to every formula (ZeRO-1: per tensor the rank owns). The
# table shows the rank with the most bytes, per model parameter.

# %%
def padded_numel(p: int) -> int:
    rows = math.ceil(cfg["width"] / p)
    return cfg["layers"] * (rows * cfg["width"] + rows)  # per rank: ceil(rows/p) of each weight and bias


def formula_bytes(variant: str, p: int) -> float:
    if variant == "ddp":
        return 16 * n_params + 4 * n_tensors
    if variant == "zero1":
        return 8 * n_params + 8 * n_params / p + 4 * n_tensors / p
    return 16 * padded_numel(p) + 4 * n_tensors


unpadded_formula = {"ddp": lambda p: 16, "zero1": lambda p: 8 + 8 / p,  # bytes per parameter
                    "fsdp": lambda p: 16 / p, "fsdp_keep": lambda p: 16 / p}
rows, bytes_per_param = [], {}
for p in world_sizes:
    for variant in VARIANTS:
        per_rank = [results[p][w][variant]["memory"] for w in ("first", "last")]
        m = max(per_rank, key=lambda m: m["params"] + m["grads"] + m["optimizer"])
        total = m["params"] + m["grads"] + m["optimizer"]
        bpp = total / n_params
        bytes_per_param[(variant, p)] = bpp
        ratio = total / formula_bytes(variant, p)
        run.metric(f"{variant}.p{p}.bytes_per_param", bpp, "B/param",
                   label=f"{variant}, {p} ranks: params + grads + Adam state per rank, per model parameter")
        run.metric(f"{variant}.p{p}.vs_formula", ratio, "x",
                   label=f"{variant}, {p} ranks: measured bytes per rank over the ZeRO formula (with padding)")
        run.metric(f"{variant}.p{p}.optimizer_mb", m["optimizer"] / MB, "MB",
                   label=f"{variant}, {p} ranks: Adam state on the rank that holds the most")
        rows.append([variant, p, round(m["params"] / MB, 3), round(m["grads"] / MB, 3), round(m["optimizer"] / MB, 3),
                     round(total / MB, 3), round(bpp, 3), round(formula_bytes(variant, p) / n_params, 3),
                     round(ratio, 4), round(unpadded_formula[variant](p), 3)])
    run.metric(f"fsdp.p{p}.vs_ddp", bytes_per_param[("fsdp", p)] / bytes_per_param[("ddp", p)], "x",
               label=f"{p} ranks: FSDP's bytes per rank over DDP's (1/p = {1 / p:.3f} without padding)")
run.table("memory", f"Bytes per rank after a step ({n_params:,} parameters, fp32, Adam); storages counted once",
          ["variant", "ranks", "params (MB)", "grads (MB)", "optimizer (MB)", "total (MB)",
           "bytes/param", "formula bytes/param", "measured/formula", "formula without padding or step counters"],
          rows)

# The transient: the most gathered parameter bytes alive at any layer's forward. For `fsdp`, one
# layer (padded); for `fsdp_keep`, the whole model by the last layer (no backward all-gather).
layer_bytes = {p: 4 * padded_numel(p) * p // cfg["layers"] for p in world_sizes}  # one layer, gathered with padding
peak_rows = []
for p in world_sizes:
    for variant, expected, what in (("fsdp", layer_bytes[p], "one layer"),
                                    ("fsdp_keep", layer_bytes[p] * cfg["layers"], "every layer")):
        peak = results[p]["first"][variant]["peak_unsharded"]
        run.metric(f"{variant}.p{p}.peak_unsharded_mb", peak / MB, "MB",
                   label=f"{variant}, {p} ranks: most all-gathered parameter bytes alive during forward")
        run.metric(f"{variant}.p{p}.peak_unsharded_vs_expected", peak / expected, "x",
                   label=f"{variant}, {p} ranks: that peak over {what}'s padded parameter bytes")
        peak_rows.append([variant, p, round(peak / MB, 3), what, round(expected / MB, 3), round(peak / expected, 4)])
run.table("transient", "Gathered (unsharded) parameter bytes alive during forward, per rank (hook at each layer)",
          ["variant", "ranks", "peak (MB)", "expected", "expected (MB)", "measured/expected"], peak_rows)

# %% [markdown]
# ## Collectives per step
#
# Expected per training step, with L = number of layers each in its own FSDP group:
# DDP, one all-reduce per gradient bucket (DDP's own bucket list says how many); ZeRO-1, the same
# all-reduces plus one broadcast per parameter tensor after the step (each from the rank that owns
# it); FSDP, L all-gathers in forward, L again in backward and L reduce-scatters (`fsdp_keep`:
# no backward all-gathers). The `c10d::` column is what the framework issued; the backend
# column is what gloo ran, and the two differ in one place: **PyTorch's gloo backend runs a
# reduce-scatter as an all-reduce**, so each `c10d::_reduce_scatter_base_` shows up as a
# `gloo:all_reduce` of the whole gradient, from which each rank keeps its shard.

# %%
L = cfg["layers"]
count_rows = []
for p in world_sizes:
    for variant in VARIANTS:
        r = results[p]["first"][variant]
        counts = r["counts"]
        issued = {"all_reduce": c10d(counts, "allreduce_"), "all_gather": c10d(counts, "_allgather_base_"),
                  "reduce_scatter": c10d(counts, "_reduce_scatter_base_"), "broadcast": c10d(counts, "broadcast_")}
        expected = {"ddp": {"all_reduce": r["ddp_buckets"]},
                    "zero1": {"all_reduce": r["ddp_buckets"], "broadcast": n_tensors},
                    "fsdp": {"all_gather": 2 * L, "reduce_scatter": L},
                    "fsdp_keep": {"all_gather": L, "reduce_scatter": L}}[variant]
        expected = {op: expected.get(op, 0) for op in issued}
        run.check(f"collectives.{variant}.p{p}", issued == expected,
                  f"issued per step {issued}, expected {expected}")
        for op, n in issued.items():
            if n:
                run.metric(f"{variant}.p{p}.{op}_calls", n, "calls", label=f"{variant}, {p} ranks: {op} per step")
        backend_events = {k: v for k, v in counts.items() if not k.startswith("c10d::")}
        count_rows.append([variant, p, *issued.values(),
                           ", ".join(f"{k} x{v}" for k, v in sorted(backend_events.items()))])
run.table("collectives", "Collectives per training step, counted by torch.profiler on rank 0",
          ["variant", "ranks", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "backend events"], count_rows)

# %% [markdown]
# ## Bytes on the wire per step
#
# With N parameters of 4 bytes, a ring all-reduce makes each rank send 2(p-1)/p of the data (a
# reduce-scatter pass, then an all-gather pass): **DDP sends 2(p-1)·4N bytes in total per step**.
# An all-gather or a reduce-scatter alone sends (p-1)·4N in total, the least any algorithm can
# (every rank must receive the (p-1)/p of the result it does not hold). So:
#
# - **fsdp**, ideal (a real reduce-scatter, as NCCL has): 2 all-gathers + 1 reduce-scatter =
#   3(p-1)·4N' in total, 1.5x DDP, where N' is the padded parameter count;
# - **fsdp on gloo**: its reduce-scatter is a full all-reduce, so 2 + 2 = 4(p-1)·4N', 2x DDP;
# - **fsdp_keep**: one all-gather + the reduce-scatter: 2(p-1)·4N' ideal (DDP's volume, the ZeRO-2
#   figure), 3(p-1)·4N' on gloo;
# - **zero1** with `ZeroRedundancyOptimizer`: DDP's all-reduce plus broadcasts in which each rank
#   receives the p-1 shares (of N/p parameters) it does not own: 3(p-1)·4N. (The ZeRO paper's
#   stages 1 and 2 keep DDP's 2(p-1)·4N by replacing the all-reduce with a reduce-scatter, then
#   all-gathering the updated parameters; this optimizer wrapper does not.)
#
# Per rank, divide by p. A gloo broadcast is a tree (uneven), but in ZeRO-1 each rank is the root
# of its own share, so the load evens out over a step; the busiest-rank column shows how evenly.

# %%
wire_formulas = {  # (formula for gloo's algorithms, ideal formula): total bytes over all ranks per step
    "ddp": lambda p: (2 * (p - 1) * 4 * n_params,) * 2,
    "zero1": lambda p: (3 * (p - 1) * 4 * n_params, 2 * (p - 1) * 4 * n_params),  # ideal: reduce-scatter + all-gather
    "fsdp": lambda p: (4 * (p - 1) * 4 * padded_numel(p) * p, 3 * (p - 1) * 4 * padded_numel(p) * p),
    "fsdp_keep": lambda p: (3 * (p - 1) * 4 * padded_numel(p) * p, 2 * (p - 1) * 4 * padded_numel(p) * p),
}
if measure_bytes:
    wire_rows = []
    for p in world_sizes:
        ddp_total = results[p]["first"]["ddp"]["sent"]["total"]
        for variant in VARIANTS:
            sent = results[p]["first"][variant]["sent"]
            on_gloo, ideal = wire_formulas[variant](p)
            run.metric(f"{variant}.p{p}.sent_mb_per_step", sent["total"] / MB, "MB",
                       label=f"{variant}, {p} ranks: bytes all ranks wrote to their sockets in one training step")
            run.metric(f"{variant}.p{p}.sent_vs_formula", sent["total"] / on_gloo, "x",
                       label=f"{variant}, {p} ranks: bytes sent over the formula for gloo's algorithms")
            run.metric(f"{variant}.p{p}.sent_vs_ideal", sent["total"] / ideal, "x",
                       label=f"{variant}, {p} ranks: bytes sent over the ideal (ring, a true reduce-scatter)")
            run.metric(f"{variant}.p{p}.sent_vs_ddp", sent["total"] / ddp_total, "x",
                       label=f"{variant}, {p} ranks: bytes sent over DDP's")
            run.metric(f"{variant}.p{p}.busiest_rank_mb", sent["max_rank"] / MB, "MB",
                       label=f"{variant}, {p} ranks: bytes sent by the busiest rank in one step")
            run.metric(f"{variant}.p{p}.lo_mb_per_step", sent["lo"] / MB, "MB",
                       label=f"{variant}, {p} ranks: loopback interface transmit bytes in one step (every process)")
            run.metric(f"{variant}.p{p}.lo_vs_sent", sent["lo"] / sent["total"], "x",
                       label=f"{variant}, {p} ranks: loopback counter over the ranks' own socket bytes")
            wire_rows.append([variant, p, round(sent["total"] / MB, 3), round(sent["max_rank"] / MB, 3),
                              round(on_gloo / MB, 3), round(sent["total"] / on_gloo, 4), round(ideal / MB, 3),
                              round(sent["total"] / ideal, 3), round(sent["total"] / ddp_total, 3),
                              round(sent["lo"] / MB, 3), round(sent["lo"] / sent["total"], 4)])
    run.table("wire", "Bytes sent per training step, all ranks together: measured (socket writes) vs formula, "
              "and the loopback counter",
              ["variant", "ranks", "sent (MB)", "busiest rank (MB)", "formula on gloo (MB)", "sent/formula",
               "ideal (MB)", "sent/ideal", "over DDP", "lo counter (MB)", "lo/sent"], wire_rows)

# %% [markdown]
# ## What this measured, and what it did not
#
# Memory, collective counts and bytes are properties of the algorithms, the same on any machine.
# What overlap buys is not measured here: on GPUs FSDP prefetches the next layer's all-gather during
# the current layer's compute, and DDP all-reduces each gradient bucket while backward goes on
# (`ddp_buckets.py`).

# %%
run.save()
