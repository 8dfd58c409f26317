# %% [markdown]
# # Tensor parallelism: a Megatron MLP split across 2 and 4 ranks
#
# Tensor parallelism splits the weight matrices *inside* a layer across ranks, so every rank does
# a slice of every GEMM and the ranks talk inside every layer, in the forward and in the backward pass.
# Megatron-LM's MLP needs only **one all-reduce forward and one backward**: W1 is split by columns,
# W2 by the matching rows, and the GELU between them runs on each rank's slice with no communication.
#
# This demo runs that MLP on 2 and 4 real `torch.distributed` ranks (gloo on a CPU, NCCL under
# torchrun on GPUs), checks every rank's output and gradients against the single-process model in
# float64, *counts* the collectives in a training step from the profiler, *measures* the bytes
# they put on the wire and compares both with the formulas, does the same with PyTorch's own
# `parallelize_module` (plain and sequence-parallel), and times a training step for 1, 2 and 4
# ranks. What one rank's smaller GEMM does to its FLOP rate is a question of its own, answered on
# one device by `shard_gemm.py`.
#
# Paper: Shoeybi et al., [Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
# Parallelism](https://arxiv.org/abs/1909.08053) (2019), section 3.

# %%
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from records.errors import fail
from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._tp_model import (MLP, check_ranks, dtensor_step, forward_backward, local_input,
                                            random_problem, reference_step, single_process_step, waited)

SIZES = {
    # checked: (batch, sequence, hidden) checked in float64; timed: the shape counted, metered and timed
    # (float32 on CPU, bf16 on GPU); steps per timed repeat and per profile; repeats; byte-metering windows
    "tiny": {"checked": (2, 16, 32), "timed": (4, 64, 256), "steps": 2, "repeats": 3, "windows": 8},
    "small": {"checked": (2, 32, 128), "timed": (4, 128, 512), "steps": 2, "repeats": 5, "windows": 8},
    "full": {"checked": (2, 64, 1024), "timed": (4, 2048, 8192), "steps": 5, "repeats": 10, "windows": 8},
}

_dist.pin_gpu_per_rank()  # under torchrun: this rank's GPU, before anything touches a GPU
run = start("tensor_parallel", title="Tensor parallelism: a Megatron MLP on 2 and 4 ranks", sizes=SIZES, cpu_threads=1)

# Imported after start(), which must see Triton unimported (DTensor imports it), and before any rank
# is forked, so the ranks inherit these modules instead of each importing them.
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Shard  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402

# %% [markdown]
# ## Where the ranks run
#
# As a plain script on a CPU, the demo forks 2 and then 4 ranks (gloo over the loopback interface,
# one intra-op thread each; see `_dist.py`). Under torchrun this process *is* one rank and only
# torchrun's world size runs, on GPUs over NCCL, one GPU per rank:
#
#     torchrun --standalone --nproc-per-node 8 -m demos.t7_parallelism.tensor_parallel --device cuda
#
# (Across nodes the same line runs with `--nnodes`, but a tensor-parallel group is kept inside one
# node's NVLink domain in practice: its all-reduces come in every layer.) `--device cuda` without
# torchrun is one process: the ranks are recorded as not run, and the single-process step is timed.

# %%
ranks = _dist.place_ranks(run, [2, 4], "tensor parallel on several GPUs (NCCL)")
rank_device = ranks.device if ranks else run.torch_device
world_sizes = ranks.world_sizes if ranks else ()
if ranks and min(world_sizes) < 2:
    fail("tensor parallelism needs at least 2 ranks: start torchrun with --nproc-per-node 2 or more")
rank_sizes = run.sizes
timed_dtype = torch.bfloat16 if rank_device.type == "cuda" else torch.float32
same_host = _dist.local_ranks() == (_dist.torchrun_world_size() or 1)
meter_bytes = bool(ranks) and _dist.can_meter_bytes(ranks)
run.log(f"ranks: world sizes {world_sizes} on {rank_device.type} ({_dist.backend_for(rank_device)})")

# %% [markdown]
# ## The single-process MLP and its problem
#
# A transformer MLP: `y = GELU(x W1^T + b1) W2^T + b2`, with `W1` of shape [4h, h] and `W2` of shape
# [h, 4h] (PyTorch's `nn.Linear` layout, output features first). The same weights, input and
# output gradient are generated from one seed everywhere, so every rank and the single-process
# reference see the same problem (`random_problem`, the `MLP` module and one step's `forward_backward`
# live in `_tp_model.py`).

# %%
checked_weights, checked_x, checked_grad_out = random_problem(rank_sizes["checked"], torch.float64, "cpu")
reference_y, reference_grads = reference_step(checked_weights, checked_x, checked_grad_out)

# %% [markdown]
# ## Megatron's MLP, written out
#
# With `A = W1^T` split by columns across p ranks, rank r computes `x A_r`, a [tokens, 4h/p] slice
# of the hidden activation, and GELU acts elementwise on its own slice: **no communication**. With
# `B = W2^T` split by the matching rows, rank r computes `GELU(x A_r) B_r`, a full-size [tokens, h]
# *partial sum*; the output is the sum over ranks, one all-reduce. The bias b2 is added once, after it.
#
# Megatron writes the communication as two conjugate operators (section 3 of the paper):
# **f** is the identity forward and an all-reduce of the gradient backward (every rank's column
# shard produces a partial gradient for the same input x, and the true one is their sum); **g** is
# the all-reduce forward and the identity backward. Each is a small `torch.autograd.Function` that
# calls the real `dist.all_reduce`.

# %%
class CopyToTensorParallelRegion(torch.autograd.Function):
    """Megatron's f: identity forward; all-reduce (sum) of the input's gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)  # in place, as Megatron does: this gradient buffer is ours alone
        return grad


class ReduceFromTensorParallelRegion(torch.autograd.Function):
    """Megatron's g: all-reduce (sum) of the partial outputs forward; identity backward."""

    @staticmethod
    def forward(ctx, partial):
        dist.all_reduce(partial)  # in place: the partial sum is a fresh tensor no one else holds
        ctx.mark_dirty(partial)
        return partial

    @staticmethod
    def backward(ctx, grad):
        return grad


class MegatronMLP(nn.Module):
    """One rank's share of the MLP: rows [r*4h/p, (r+1)*4h/p) of W1 and b1 (output columns of x A),
    the matching columns of W2 (input rows of the second GEMM), and all of b2."""

    def __init__(self, weights, rank, world_size, all_reduce_input_grad=True):
        super().__init__()
        self.w1 = nn.Parameter(weights["w1"].chunk(world_size, dim=0)[rank].clone())
        self.b1 = nn.Parameter(weights["b1"].chunk(world_size, dim=0)[rank].clone())
        self.w2 = nn.Parameter(weights["w2"].chunk(world_size, dim=1)[rank].clone())
        self.b2 = nn.Parameter(weights["b2"].clone())
        # all_reduce_input_grad=False is the deliberately wrong variant that the checks must catch
        self.enter = CopyToTensorParallelRegion.apply if all_reduce_input_grad else (lambda x: x)

    def forward(self, x):
        x = self.enter(x)                               # f
        hidden = F.gelu(F.linear(x, self.w1, self.b1))  # column-parallel GEMM, local GELU: [tokens, 4h/p]
        partial = F.linear(hidden, self.w2)             # row-parallel GEMM: a partial sum [tokens, h]
        return ReduceFromTensorParallelRegion.apply(partial) + self.b2  # g, then the bias once


# %% [markdown]
# ## PyTorch's own API: DTensor and `parallelize_module`
#
# The same split in PyTorch's tensor-parallel API ([torch.distributed.tensor.parallel](
# https://pytorch.org/docs/stable/distributed.tensor.parallel.html)): `ColwiseParallel` on the
# first Linear, `RowwiseParallel` on the second, over a one-dimensional `DeviceMesh`. Its
# collectives are counted with `CommDebugMode`.
#
# The **sequence-parallel** variant (Korthikanti et al., [Reducing Activation Recomputation in
# Large Transformer Models](https://arxiv.org/abs/2205.05198), 2022) keeps the activations outside
# the MLP sharded by sequence: each rank holds s/p tokens. The all-reduce becomes an all-gather of
# the input before the column-parallel GEMM and a reduce-scatter of the output after the
# row-parallel one (and the same pair, swapped, in the backward pass). A ring all-gather plus a ring
# reduce-scatter move exactly the bytes of one ring all-reduce, which *is* a reduce-scatter followed
# by an all-gather; what sequence parallelism saves is activation memory and the redundant
# elementwise work (LayerNorm, dropout) outside the MLP.

# %%
def dtensor_mlp(weights, mesh, sequence_parallel):
    if sequence_parallel:
        plan = {"up": ColwiseParallel(input_layouts=Shard(1)), "down": RowwiseParallel(output_layouts=Shard(1))}
    else:
        plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    return parallelize_module(MLP(**weights), mesh, plan)


# %% [markdown]
# ## What each rank measures
#
# **Counting collectives.** A few training steps run under `torch.profiler`; every collective shows
# as one `gloo:all_reduce` (or `nccl:all_reduce`) event, and their durations, summed, give the share
# of the step spent inside all-reduces (waiting for the slowest rank included).
#
# **Metering bytes**, two ways, in windows of one training step between barriers, net of the
# barriers' own bytes (`_dist.bytes_sent`): on one host gloo's TCP traffic goes over the loopback
# interface, whose transmit counter (`/proc/net/dev`, `lo`) counts every byte sent on the machine,
# TCP/IP headers included (other programs can only add, so the quietest window is kept); and each
# rank's own `wchar` (`/proc/self/io`), the bytes it handed to `write`-family calls: its socket sends,
# payload only, untouched by other programs. A ring all-reduce of n elements sends `2(p-1)/p * n`
# elements from each rank: `2(p-1) * n` in total.
#
# **Timing.** After a barrier, every rank times `steps` training steps per repeat with the
# harness's `measure` (fixed repeat counts, so every rank runs the same collectives), and the
# step time is the slowest rank's median. Every rank runs the same `rank_worker`: the float64 steps
# (Megatron's MLP, the wrong variant, DTensor plain and sequence-parallel), then the counting,
# metering and timing at the timed shape; the parent checks what comes back.

# %%
def rank_worker(rank, world_size, sizes, device, meter_bytes):
    out = {"rank": rank}
    on = {k: v.to(device) for k, v in checked_weights.items()}
    x64, grad64 = checked_x.to(device), checked_grad_out.to(device)

    # 1. float64: Megatron's MLP and the wrong variant
    for name, all_reduce_input_grad in (("megatron", True), ("no_backward_all_reduce", False)):
        model = MegatronMLP(on, rank, world_size, all_reduce_input_grad)
        x = x64.clone().requires_grad_(True)
        y = forward_backward(model, x, grad64)
        out[name] = {"output": y.detach().cpu(), "input": x.grad.cpu(), "w1": model.w1.grad.cpu(),
                     "b1": model.b1.grad.cpu(), "w2": model.w2.grad.cpu(), "b2": model.b2.grad.cpu()}

    # 2. float64: PyTorch's DTensor tensor parallelism, plain and sequence-parallel, collectives counted
    mesh = init_device_mesh(device.type, (world_size,))
    for name, sequence_parallel in (("dtensor", False), ("dtensor_sp", True)):
        model = dtensor_mlp(on, mesh, sequence_parallel)
        x = local_input(x64, rank, world_size, sequence_parallel).requires_grad_(True)
        comm = CommDebugMode()
        with comm:
            y = dtensor_step(model, x, local_input(grad64, rank, world_size, sequence_parallel))
        out[name] = {"output": y.detach().cpu(), "input": waited(x.grad).cpu(),
                     "w1": waited(model.up.weight.grad.to_local()).cpu(),
                     "w2": waited(model.down.weight.grad.to_local()).cpu(),
                     "collectives": {str(op).rsplit(".", 1)[-1]: n for op, n in comm.get_comm_counts().items()}}

    # 3. the timed shape: count, meter, time
    weights, x, grad_out = random_problem(sizes["timed"], timed_dtype, device, seed=1)
    x.requires_grad_(True)
    megatron = MegatronMLP(weights, rank, world_size)

    def step():
        forward_backward(megatron, x, grad_out)

    out["calls_per_step"], out["all_reduce_fraction"] = _dist.profile_steps(step, sizes["steps"], device)
    if meter_bytes:
        out["bytes"] = {"megatron": _dist.bytes_sent(step, sizes["windows"])}
        for name, sequence_parallel in (("dtensor", False), ("dtensor_sp", True)):
            model = dtensor_mlp(weights, mesh, sequence_parallel)
            xs = local_input(x, rank, world_size, sequence_parallel).requires_grad_(True)
            gs = local_input(grad_out, rank, world_size, sequence_parallel)
            dtensor_step(model, xs, gs)  # warm: first-call set-up stays out of the windows
            out["bytes"][name] = _dist.bytes_sent(lambda: dtensor_step(model, xs, gs), sizes["windows"])
    out["step_s"] = _dist.time_steps(step, device, sizes["repeats"], sizes["steps"]).as_dict()
    return out


# %% [markdown]
# ## Run the ranks, check what they computed
#
# Every rank must hold the full output (replicated after the all-reduce) and the full input
# gradient; concatenated in rank order, the ranks' W1 and b1 gradient shards must equal the
# single-process gradients' rows and the W2 shards its columns; b2's gradient must be whole on
# every rank. All in float64, with a tolerance of 1e-9 (the differences are summation order only).
# The wrong variant, which skips f's backward all-reduce, must leave every rank with only its own
# shard's share of the input gradient: the same check must fail on it (`check_ranks`, `_tp_model.py`).

# %%
results_by_p = {}
for p in world_sizes:
    results = _dist.launch(rank_worker, p, rank_sizes, rank_device, meter_bytes, device=rank_device)
    if results is None:  # a rank other than 0 under torchrun: rank 0 writes the record
        _dist.shutdown()
        raise SystemExit(0)
    check_ranks(run, p, results, reference_y, reference_grads)
    results_by_p[p] = results
_dist.shutdown()

# %% [markdown]
# ## Collectives and bytes per training step, against the formulas
#
# Per MLP and training step: **2 all-reduces** (g forward, f backward), each of n = b*s*h elements,
# so the ring formula gives `2 * 2(p-1) * n * bytes_per_element` sent per step, all ranks together.
# The DTensor variants are metered the same way: plain, the same 2 all-reduces; sequence-parallel,
# 2 all-gathers and 2 reduce-scatters, each `(p-1) * n` elements on a ring: the same total.
#
# Expect one deviation, and it is the backend's, not sequence parallelism's: PyTorch's gloo
# backend runs `reduce_scatter_tensor` as a full all-reduce of the buffer, keeping its own slice
# (its profiler event is `gloo:all_reduce`), so each reduce-scatter costs `2(p-1) * n` and the sequence-parallel step
# `2 * (p-1) * n + 2 * 2(p-1) * n = 6(p-1) * n` elements, 1.5 times the formula. NCCL's
# reduce-scatter is a true ring.

# %%
b, s, h = rank_sizes["timed"]
n = b * s * h
element_bytes = torch.tensor([], dtype=timed_dtype).element_size()
ALL_REDUCES_PER_STEP = 2
METERED = [("megatron", "Megatron f/g"), ("dtensor", "DTensor plain"), ("dtensor_sp", "DTensor sequence-parallel")]
for p, results in results_by_p.items():
    counted = [r["calls_per_step"].get("all_reduce", 0) for r in results]
    run.check(f"p{p}.all_reduces_per_step", all(c == ALL_REDUCES_PER_STEP for c in counted),
              f"profiler events per training step on each rank: {counted}; formula {ALL_REDUCES_PER_STEP} "
              f"(one forward, one backward)")
    run.metric(f"p{p}.all_reduces_per_step", counted[0], "calls",
               label=f"p={p}: all-reduce calls per training step, counted from profiler events (rank 0)")
    run.metric(f"p{p}.all_reduces_per_step_formula", ALL_REDUCES_PER_STEP, "calls",
               label="all-reduces per MLP per training step by the Megatron formula", origin="computed")
    run.metric(f"p{p}.all_reduces_ratio", counted[0] / ALL_REDUCES_PER_STEP, "x",
               label=f"p={p}: counted all-reduces over the formula")
    rows = [["all-reduce calls per step (profiler)", counted[0], ALL_REDUCES_PER_STEP,
             round(counted[0] / ALL_REDUCES_PER_STEP, 3)]]
    ring = ALL_REDUCES_PER_STEP * 2 * (p - 1) * n * element_bytes
    run.metric(f"p{p}.bytes_per_step_formula", ring / 1e6, "MB",
               label=f"p={p}: ring formula, 2 all-reduces x 2(p-1) x n x {element_bytes} bytes", origin="computed")
    for variant, description in METERED if meter_bytes else ():
        prefix = f"p{p}" if variant == "megatron" else f"p{p}.{variant}"
        metered = {}
        written_per_window = [sum(per_rank) for per_rank in zip(*(r["bytes"][variant]["written"] for r in results))]
        if same_host:
            loopback_per_window = results[0]["bytes"][variant]["loopback"]
            quietest = loopback_per_window.index(min(loopback_per_window))
            metered["loopback tx"] = loopback = loopback_per_window[quietest]
            run.metric(f"{prefix}.bytes_per_step", loopback / 1e6, "MB",
                       label=f"p={p}, {description}: bytes sent per step, all ranks together (loopback tx counter)")
            run.metric(f"{prefix}.bytes_ratio", loopback / ring, "x",
                       label=f"p={p}, {description}: loopback bytes over the ring formula")
            run.metric(f"{prefix}.loopback_over_written", loopback / written_per_window[quietest], "x",
                       label=f"p={p}, {description}: loopback bytes over the ranks' own socket writes in the same "
                             "window (TCP/IP overhead, plus other programs' traffic if any)")
        metered["written by the ranks"] = written = min(written_per_window)
        run.metric(f"{prefix}.bytes_written_per_step", written / 1e6, "MB",
                   label=f"p={p}, {description}: bytes the ranks wrote to their sockets per step (/proc/self/io)")
        run.metric(f"{prefix}.bytes_written_ratio", written / ring, "x",
                   label=f"p={p}, {description}: socket bytes written over the ring formula")
        for how, value in metered.items():
            rows.append([f"{description}: MB per step, {how}", round(value / 1e6, 4), round(ring / 1e6, 4),
                         round(value / ring, 3)])
    run.table(f"p{p}", f"p = {p} ranks: one MLP training step, n = {b}x{s}x{h} = {n} elements per all-reduce "
              f"({str(timed_dtype).removeprefix('torch.')})", ["quantity", "measured", "formula", "measured / formula"],
              rows)
if ranks and not meter_bytes:
    run.not_run("byte metering", f"the ranks talk over {_dist.backend_for(rank_device)} (NVLink/InfiniBand), "
                "not through sockets and this host's loopback interface")
elif not same_host:
    run.not_run("loopback byte count", "the ranks span several hosts; only their socket writes are metered")

# The DTensor variants' collectives, counted by `CommDebugMode` in the float64 step:
FORMULA = {"dtensor": {"all_reduce": 2}, "dtensor_sp": {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}}
rows = []
for p, results in results_by_p.items():
    for variant, expected in FORMULA.items():
        counted = results[0][variant]["collectives"]
        for collective, formula in expected.items():
            run.metric(f"p{p}.{variant}.{collective}", counted.get(collective, 0), "calls",
                       label=f"p={p}: {variant} {collective} calls per training step (CommDebugMode)")
        rows.append([variant, p, ", ".join(f"{k} x{v}" for k, v in sorted(counted.items())),
                     ", ".join(f"{k} x{v}" for k, v in expected.items())])
if rows:
    run.table("dtensor", "PyTorch's parallelize_module: collectives per training step (CommDebugMode)",
              ["variant", "p", "counted", "expected"], rows)

# %% [markdown]
# ## Step time for 1, 2 and 4 ranks
#
# One training step (forward and backward) of the MLP at the timed shape; p = 1 is the
# single-process model (one thread on a CPU), timed with the same protocol. On a CPU with fewer
# cores than ranks the ranks are oversubscribed, so the CPU numbers show the cost of the
# communication *and* of the oversubscription, not what a GPU node would do. There each rank has
# its GPU and the all-reduces run over NVLink, about 450 GB/s per direction per H100 SXM GPU
# ([H100 datasheet](https://www.nvidia.com/en-us/data-center/h100/): 900 GB/s both ways), so an
# all-reduce of n bf16 elements costs at least `2(p-1)/p * 2n bytes / 450 GB/s` (stated, not measured).

# %%
p1 = _dist.time_steps(single_process_step(rank_sizes["timed"], timed_dtype, rank_device), rank_device,
                      rank_sizes["repeats"], rank_sizes["steps"]).as_dict()
rows = [[1, round(p1["median_s"] * 1e3, 2), round(p1["p10_s"] * 1e3, 2), round(p1["p90_s"] * 1e3, 2), "-", 1.0]]
spreads = [p1["spread"]]  # per row, for the plot
run.metric("p1.step_ms", p1["median_s"] * 1e3, "ms",
           label=f"single process ({'one CPU thread' if rank_device.type == 'cpu' else 'one GPU'}): one training step")
for p, results in results_by_p.items():
    slowest = max(results, key=lambda r: r["step_s"]["median_s"])["step_s"]
    fraction = sum(r["all_reduce_fraction"] for r in results) / p
    speedup = p1["median_s"] / slowest["median_s"]
    run.metric(f"p{p}.step_ms", slowest["median_s"] * 1e3, "ms",
               label=f"p={p}: one training step (slowest rank's median)")
    run.metric(f"p{p}.all_reduce_fraction", fraction, "fraction",
               label=f"p={p}: share of the step spent inside all-reduces (profiler, mean over ranks)")
    run.metric(f"p{p}.speedup", speedup, "x", label=f"p={p}: single-process step time over the {p}-rank step time")
    rows.append([p, round(slowest["median_s"] * 1e3, 2), round(slowest["p10_s"] * 1e3, 2),
                 round(slowest["p90_s"] * 1e3, 2), round(fraction, 3), round(speedup, 2)])
    spreads.append(slowest["spread"])
run.table("step_time", f"One training step of the MLP ({b}x{s}x{h}, {str(timed_dtype).removeprefix('torch.')}, "
          f"{rank_device.type}{', one thread per rank' if rank_device.type == 'cpu' else ''})",
          ["ranks p", "median (ms)", "p10 (ms)", "p90 (ms)", "in all-reduce (fraction)", "speedup over p = 1"], rows)
speedups = ", ".join(f"{row[5]:.3g}x at p = {row[0]}" for row in rows[1:])  # the rows after p = 1
step_title = f"Speed-up over one rank: {speedups}" if speedups else "Training step time vs tensor-parallel ranks"
run.series("step_time", step_title, "ranks p", "ms",
           {"median step time": ([r[0] for r in rows], [r[1] for r in rows], spreads)})
run.save()

# %% [markdown]
# ## Reading the results
#
# - Every rank's output and gradients equal the single-process model's in float64, for Megatron's
#   f and g and for `parallelize_module`, plain and sequence-parallel; skipping f's backward
#   all-reduce is caught.
# - 2 all-reduces per training step; the ranks' socket writes match the ring formula `2(p-1) * n`
#   per all-reduce (the loopback counter adds TCP/IP overhead). Each rank's traffic, `2(p-1)/p * n`,
#   *grows* towards 2n with p while its FLOPs fall as 1/p, in every layer, forward and backward:
#   tensor parallelism stays inside the fastest interconnect (one NVLink node).
# - Sequence parallelism's formula is the same bytes; on gloo it measures 1.5 times that, because
#   gloo's reduce-scatter is an all-reduce.
