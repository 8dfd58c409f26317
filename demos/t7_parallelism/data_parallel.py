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
# Last, DDP's gradient bucket size: how many all-reduces a step makes, and what that costs in time.

# %%
import math
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

try:  # the public path since torch 2.6
    from torch.distributed.fsdp import fully_shard
except ImportError:  # older releases kept FSDP2 here
    from torch.distributed._composable.fsdp import fully_shard

from demos.harness import device as devices
from demos.harness.run import start
from demos.harness.timing import Settings, measure
from demos.t7_parallelism import _dist

run = start(
    "data_parallel",
    title="Data parallelism: DDP vs ZeRO-1 vs FSDP2, memory and traffic per rank",
    sizes={  # the checked MLP (layers x width, global batch), and the bucket-sweep MLP
        "tiny": {"layers": 4, "width": 66, "batch": 8, "steps": 3,
                 "sweep_layers": 6, "sweep_width": 300, "sweep_batch": 8, "sweep_repeats": 3},
        "small": {"layers": 8, "width": 258, "batch": 32, "steps": 3,
                  "sweep_layers": 20, "sweep_width": 500, "sweep_batch": 16, "sweep_repeats": 7},
        "full": {"layers": 8, "width": 1026, "batch": 64, "steps": 3,
                 "sweep_layers": 24, "sweep_width": 1024, "sweep_batch": 64, "sweep_repeats": 10},
    },
)
cfg = run.sizes
LR = 1e-3
RTOL, ATOL = 1e-4, 1e-5  # fp32; only the order of gradient sums differs. ATOL is 1% of one Adam step (LR)
MB = 1e6

# %% [markdown]
# ## Where the ranks run
#
# Without `torchrun`, `_dist.launch` forks the ranks on this machine, each a process with **one
# intra-op thread**, talking **gloo over the loopback interface** (TCP on 127.0.0.1). On the 2-core
# VM that records the CPU numbers, 4 ranks share 2 cores: memory, counts and bytes are exact, step
# times are not what a real cluster would see. On GPUs, the same code runs under `torchrun` with one
# process per GPU and NCCL, and only for the world size torchrun started. What NCCL on
# NVLink/InfiniBand changes is explained at the end, not measured here.

# %%
on_gpus = run.device.is_gpu and _dist.under_torchrun()
if run.device.is_gpu and not on_gpus:
    run.not_run("NCCL DDP/FSDP across GPUs",
                "not started by torchrun (one process per GPU); the ranks run on CPU with gloo instead")
rank_device = run.torch_device if on_gpus else torch.device("cpu")
step_timer = run.device if on_gpus else devices.resolve("cpu")  # a rank forked after CUDA started must not use it
world_sizes = [_dist.torchrun_world_size()] if _dist.under_torchrun() else [2, 4]
measure_bytes = not on_gpus  # gloo writes every byte through a socket on this host; NCCL does not
if not measure_bytes:
    run.not_run("bytes sent per step", "NCCL moves data over NVLink/PCIe/InfiniBand, not through sockets on `lo`")
run.log(f"ranks on {rank_device.type} ({'nccl' if on_gpus else 'gloo'}), world sizes {world_sizes}")

# %% [markdown]
# ## The model, the data, and the single-process reference
#
# A stack of square `Linear` layers with ReLU between them, trained with Adam in fp32 on a
# mean-squared error. The width is 2 more than a multiple of 4, so 4 ranks cannot split a weight's
# rows evenly and FSDP's padding shows up in the measurements. Every rank builds the same
# initial model from the same seed and draws the same global batches; rank r trains on the r-th
# of p equal slices of each. Because the slices are equal, the average of the ranks' gradients is
# exactly the gradient of the whole-batch loss, so the reference is one process training on the
# whole batch.

# %%
def make_mlp(layers: int, width: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    blocks = []
    for i in range(layers):
        blocks.append(nn.Linear(width, width))
        if i < layers - 1:
            blocks.append(nn.ReLU())
    return nn.Sequential(*blocks)


def global_batch(step: int, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)


def my_rows(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    return t.chunk(world_size)[rank]


def train_step(model, optimizer, x, y) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()
    optimizer.step()


def train_single_process(layers, width, batches) -> torch.Tensor:
    """One process, whole batches: the reference every variant must reproduce (flat parameters)."""
    model = make_mlp(layers, width)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    for x, y in batches:
        train_step(model, optimizer, x, y)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


batches = [global_batch(s, cfg["batch"], cfg["width"]) for s in range(cfg["steps"])]
reference = train_single_process(cfg["layers"], cfg["width"], batches)
n_params = reference.numel()
n_tensors = 2 * cfg["layers"]
run.metric("model.params_m", n_params / 1e6, "M", label=f"MLP {cfg['layers']} x {cfg['width']}: parameters (millions)")
run.log(f"model: {cfg['layers']} x Linear({cfg['width']}, {cfg['width']}), {n_params:,} parameters, "
        f"{n_params * 4 / MB:.2f} MB in fp32; {cfg['steps']} Adam steps on a batch of {cfg['batch']}")

# %% [markdown]
# ## The variants
#
# - **ddp**: `DistributedDataParallel` with `gradient_as_bucket_view=True`, so each `.grad` is a
#   view into the bucket that is all-reduced. (With the default `False`, DDP keeps the buckets
#   *and* separate `.grad` tensors: a second full copy of the gradients, as its
#   [documentation](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
#   says.) Plain Adam on every rank.
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


def module_of(wrapped):
    return wrapped.module if isinstance(wrapped, DistributedDataParallel) else wrapped


def optimizer_state(optimizer) -> list[torch.Tensor]:
    inner = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return [v for state in inner.state.values() for v in state.values() if torch.is_tensor(v)]


# %% [markdown]
# ## How each quantity is measured, inside every rank
#
# **Memory.** After the last training step (gradients still held), each rank sums the bytes of
# the tensors it actually holds: its parameters, their `.grad`, and every tensor in the
# optimizer's state (Adam: `exp_avg`, `exp_avg_sq`, and a 4-byte `step` per parameter tensor).
# A `DTensor` counts as its local shard (`.to_local()`). The bytes are those of the distinct
# **storages** behind the tensors (`untyped_storage().nbytes()`, each storage once), so a padded
# shard counts with its padding, and gradients that are views into one DDP bucket or one
# reduce-scatter output count once, at that buffer's size.
#
# **Transient memory.** FSDP's whole point is that a gathered layer lives only while it is
# needed. A forward pre-hook on every `Linear` (it runs after FSDP's own pre-forward hook has
# all-gathered that layer) sums the storages of every layer whose parameters are, at that moment,
# plain tensors rather than sharded `DTensor`s. FSDP frees an unsharded parameter by shrinking its
# storage to 0 bytes, so a freed layer counts 0. The peak over the forward pass is recorded. It
# leaves out one moment no hook can see: FSDP2 all-gathers a layer into one flat buffer and copies
# it out into the per-parameter tensors, so during that copy the layer exists twice. (On a CPU
# there is no `memory_allocated` to cross-check any of this.)
#
# **Collectives.** Rank 0 runs one steady-state step under `torch.profiler` and counts the
# `c10d::` operations issued (what the framework asked for) and the `gloo:` events (what the
# backend ran).
#
# **Bytes on the wire**, two ways, each in a window between two barriers around one training
# step, minus the same window around no step (the barriers' own bytes), minimum of 3 tries:
#
# 1. per rank: the `wchar` counter of `/proc/self/io`, the bytes this process passed to `write`
#    calls. Gloo's TCP transport sends with `writev`, and nothing else in the rank writes inside
#    the window, so this is exactly what the rank sent (payload plus gloo's small message
#    headers), untouched by anything else running on the machine. The ranks' figures are summed
#    and their maximum taken with an all-reduce after the window.
# 2. all ranks together: the transmit counter of the loopback interface `lo` in `/proc/net/dev`,
#    read on rank 0: what actually crossed the (virtual) network, TCP/IP headers included (about
#    0.1% at loopback's 64 KiB packets). It counts *every* process on the machine, though; other
#    programs using `lo` can only add bytes, which is why the minimum is taken.

# %%
def storage_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        storage = local.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class UnshardedPeak:
    """Forward pre-hook: the largest total of unsharded (gathered) parameter bytes seen."""

    def __init__(self, layers):
        self.layers, self.peak = layers, 0

    def __call__(self, module, args):
        live = {}
        for layer in self.layers:
            for p in (layer.weight, layer.bias):
                if not isinstance(p, DTensor):
                    storage = p.untyped_storage()
                    live[storage.data_ptr()] = storage.nbytes()
        self.peak = max(self.peak, sum(live.values()))


def count_collectives(step, rank: int) -> dict | None:
    if rank != 0:
        step()
        return None
    return dict(_dist.collective_calls(step))


def bytes_sent(step, tries: int = 3) -> dict:
    def window(body) -> tuple[int, int]:
        dist.barrier()
        written, lo = _dist.bytes_written_by_this_process(), _dist.loopback_tx_bytes()
        body()
        dist.barrier()
        return _dist.bytes_written_by_this_process() - written, _dist.loopback_tx_bytes() - lo

    barriers = [window(lambda: None) for _ in range(tries)]
    steps = [window(step) for _ in range(tries)]
    mine = min(w for w, _ in steps) - min(w for w, _ in barriers)
    totals = torch.tensor([mine, mine], dtype=torch.float64)
    dist.all_reduce(totals[:1], op=dist.ReduceOp.SUM)
    dist.all_reduce(totals[1:], op=dist.ReduceOp.MAX)
    return {"total": int(totals[0]), "max_rank": int(totals[1]),
            "lo": min(lo for _, lo in steps) - min(lo for _, lo in barriers)}


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
    buckets = None
    if isinstance(wrapped, DistributedDataParallel):
        buckets = len(wrapped._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(","))
    return {"flat": flat, "memory": memory, "peak_unsharded": peak.peak, "counts": counts,
            "sent": sent, "ddp_buckets": buckets}


# %% [markdown]
# ## DDP's gradient buckets
#
# DDP does not all-reduce each gradient on its own: it packs gradients, in the order backward
# produces them, into buckets of about `bucket_cap_mb` and all-reduces a bucket as soon as it is
# full, while backward goes on computing the earlier layers. Small buckets mean many small
# all-reduces (a fixed cost each); large buckets mean fewer, but the first one starts later. In
# its first step DDP does not yet know the order in which gradients arrive, so it uses one bucket
# for everything; then it rebuilds the buckets in the order it observed. Only when `bucket_cap_mb`
# is left at its default (25 MiB) is the first rebuilt bucket capped at
# `dist._DEFAULT_FIRST_BUCKET_BYTES` (1 MiB), so the last layers' gradients go out early. The
# sweep runs on 2 ranks on a larger MLP; each bucket size first checks one step against the
# single-process reference, then counts the all-reduces of a steady step and times steps with the
# harness (a fixed number of repeats, the same on every rank, as collectives need).

# %%
BUCKET_CAPS = [0.25, 1, 5, 25, 100, None]  # MiB; None = DDP's default (25 MiB, first bucket 1 MiB)


def cap_label(cap) -> str:
    return "default" if cap is None else f"{cap:g}mb".replace(".", "p")


sweep_batch = global_batch(99, cfg["sweep_batch"], cfg["sweep_width"])
sweep_reference = train_single_process(cfg["sweep_layers"], cfg["sweep_width"], [sweep_batch])


def bucket_sweep(rank: int, world_size: int) -> dict:
    xs, ys = (my_rows(t, rank, world_size).to(rank_device) for t in sweep_batch)
    fixed = Settings(warmup=1, min_repeats=cfg["sweep_repeats"], max_repeats=cfg["sweep_repeats"], min_time=0.0,
                     flush_l2=False)
    out = {}
    for cap in BUCKET_CAPS:
        model = make_mlp(cfg["sweep_layers"], cfg["sweep_width"]).to(rank_device)
        ddp = DistributedDataParallel(model, bucket_cap_mb=cap)
        optimizer = torch.optim.Adam(ddp.parameters(), lr=LR)
        step = lambda: train_step(ddp, optimizer, xs, ys)  # noqa: E731
        first_counts = count_collectives(step, rank)  # the first step: DDP's initial single bucket
        flat = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
        err = float((flat - sweep_reference).abs().max())
        passed = bool(((flat - sweep_reference).abs() <= ATOL + RTOL * sweep_reference.abs()).all())
        if not passed:  # every rank holds the same replica, so every rank stops here, before any timing
            raise AssertionError(f"DDP with bucket_cap_mb={cap} differs from the reference by {err:.2e}")
        step()  # DDP rebuilds its buckets at the start of this step
        counts = count_collectives(step, rank)
        timing = measure(step, step_timer, fixed)
        out[cap_label(cap)] = {"cap": cap, "err": err, "passed": passed, "first_counts": first_counts,
                               "counts": counts, "timing": timing.as_dict(),
                               "rebuilt_bucket_bytes": ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]}
        del ddp, optimizer, model
    return out


def rank_main(rank: int, world_size: int, with_sweep: bool) -> dict:
    result = {v: train_and_measure(v, rank, world_size) for v in VARIANTS}
    if with_sweep:
        result["sweep"] = bucket_sweep(rank, world_size)
    return result if rank in (0, world_size - 1) else None


# %% [markdown]
# ## Run the ranks

# %%
sweep_world = 2 if 2 in world_sizes else world_sizes[0]
results = {}
for p in world_sizes:
    launched = time.perf_counter()
    ranks = _dist.launch(rank_main, p, p == sweep_world, device=rank_device)
    run.log(f"{p} ranks done in {time.perf_counter() - launched:.1f} s")
    if ranks is None:  # a torchrun rank other than 0: its work is done
        _dist.shutdown()
        raise SystemExit(0)
    results[p] = {"first": ranks[0], "last": ranks[-1]}
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
unaveraged = train_single_process(cfg["layers"], cfg["width"], [(x.chunk(2)[0], y.chunk(2)[0]) for x, y in batches])
unaveraged_err = float((unaveraged - reference).abs().max())
run.check("tolerance_catches_unaveraged_gradients",
          not bool(((unaveraged - reference).abs() <= ATOL + RTOL * reference.abs()).all()),
          f"training on half the batch without averaging is off by up to {unaveraged_err:.2e}, "
          f"outside the tolerance")
sweep = results[sweep_world]["first"]["sweep"]
for label, s in sweep.items():
    run.check(f"bucket_sweep.{label}", s["passed"],
              f"one DDP step with bucket_cap_mb={s['cap']} on {sweep_world} ranks: max |err| {s['err']:.2e} vs "
              f"single-process Adam (allowed {ATOL:.0e} + {RTOL:.0e}*|ref|; checked on every rank before timing)")

# %% [markdown]
# ## Memory per rank: measured, and the ZeRO formula
#
# With fp32 weights and Adam, a parameter costs 4 bytes, its gradient 4, and Adam's two moments 8:
# **16 bytes per parameter on every DDP rank**. (The ZeRO paper's 16 is for mixed precision, 2 + 2
# + 12 with an fp32 master copy; pure fp32 happens to land on the same number.) ZeRO-1 shards the
# 8 optimizer bytes: 4 + 4 + 8/p. Fully sharded keeps 16/p, plus padding: FSDP2 pads each
# tensor's dim 0 to a multiple of p, so a rank holds ceil(rows/p) rows of every tensor. Adam's
# 4-byte `step` per tensor is added to every formula (ZeRO-1: per tensor the rank owns). The
# table shows the rank with the most bytes; bytes per parameter divide by the model's parameter
# count.

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

# %% [markdown]
# The transient: the most gathered parameter bytes alive at any layer's forward. For `fsdp` that
# should be one layer (padded); for `fsdp_keep` it grows to the whole model by the last layer,
# the price of skipping the backward all-gather.

# %%
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
def c10d(counts, op):
    return counts.get(f"c10d::{op}", 0)


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
# With N parameters of 4 bytes and a ring algorithm, an all-reduce makes each rank send
# 2(p-1)/p of the data (a reduce-scatter pass, then an all-gather pass), so **DDP: 2(p-1)·4N bytes
# in total per step**, (p-1)/p · 8N per rank, almost independent of p. An all-gather or a
# reduce-scatter alone sends (p-1)/p of the data per rank, (p-1)·4N in total. Any algorithm must
# move at least that much: every rank has to receive the (p-1)/p of the result it does not hold.
# So:
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
# Per rank, divide the totals by p: every rank sends the same amount in the ring algorithms. A
# single gloo broadcast is uneven (a tree: the root and the ranks it feeds pass the data on, the
# leaves send nothing), but in ZeRO-1 each rank is the root for its own share, so the load evens
# out over a step; the busiest-rank column shows how evenly.

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
# ## DDP bucket size: all-reduces per step and step time

# %%
sweep_params = sum(cfg["sweep_width"] * (cfg["sweep_width"] + 1) for _ in range(cfg["sweep_layers"]))
run.metric("bucket.grad_mb", sweep_params * 4 / MB, "MB",
           label=f"sweep MLP ({cfg['sweep_layers']} x {cfg['sweep_width']}): fp32 gradient bytes all-reduced per step")
run.metric("bucket.first_bucket_mib", dist._DEFAULT_FIRST_BUCKET_BYTES / 2**20, "MiB",
           label="dist._DEFAULT_FIRST_BUCKET_BYTES: first bucket's cap when bucket_cap_mb is left at its default")
sweep_rows, caps, calls, step_ms = [], [], [], []
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
run.table("bucket_sweep", f"DDP bucket size on {sweep_world} ranks ({sweep_params:,} parameters, "
          f"{sweep_params * 4 / MB:.1f} MB of gradients, batch {cfg['sweep_batch']})",
          ["bucket_cap_mb", "all-reduces (first step)", "all-reduces (steady step)", "largest bucket (MB)",
           "step median (ms)", "p10-p90 (ms)"], sweep_rows)
run.series("bucket_calls", "All-reduce calls per step vs DDP bucket size", "bucket_cap_mb (MiB)",
           "all-reduces per step",
           {"measured (profiler)": (caps, calls)}, x_log=True, y_log=True)
run.series("bucket_time", "Training step time vs DDP bucket size", "bucket_cap_mb (MiB)", "median step (ms)",
           {f"{sweep_world} ranks": (caps, step_ms)}, x_log=True)

# %% [markdown]
# ## What this measured, and what it did not
#
# Memory, collective counts and bytes are properties of the algorithms and come out the same on
# any machine: DDP holds 16 bytes per parameter on every rank, FSDP 16/p plus padding, and FSDP
# pays for it with more traffic (1.5x DDP's with a true reduce-scatter, 2x on gloo, which has
# none). The step times are from gloo over loopback on a shared 2-core VM, one intra-op thread per
# rank. Gloo runs a collective on its own thread, so DDP's all-reduces can overlap backward even
# here, but both ranks, their gloo threads and the kernel's loopback copies share 2 cores: what
# overlap buys cannot be read from these times.
#
# On GPUs with NCCL the picture the bucket sweep shows changes shape: DDP launches each bucket's
# all-reduce on a separate stream as soon as the bucket fills, so it runs over NVLink or
# InfiniBand *while* backward computes the earlier layers; only the last bucket's all-reduce is
# exposed. That is why buckets exist, why the first (last-layer) bucket is kept small, and why
# tiny buckets still lose (each all-reduce pays a fixed latency). FSDP likewise prefetches the
# next layer's all-gather during the current layer's compute (its backward prefetches too). None
# of that is measured here.

# %%
run.save()
