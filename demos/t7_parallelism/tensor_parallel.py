# %% [markdown]
# # Tensor parallelism: a Megatron MLP split across 2 and 4 ranks
#
# Tensor parallelism splits the weight matrices *inside* a layer across ranks, so every rank does
# a slice of every GEMM and the ranks talk inside every layer, in the forward and in the backward pass.
# Megatron-LM's MLP needs only **one all-reduce forward and one backward**: W1 is split by columns,
# W2 by the matching rows, and the GELU between them runs on each rank's slice with no communication.
#
# This demo runs that MLP on 2 and 4 real `torch.distributed` ranks (gloo on this CPU, NCCL under
# torchrun on GPUs), checks every rank's output and gradients against the single-process model in
# float64, *counts* the collectives in a training step from the profiler, *measures* the bytes
# they put on the wire and compares both with the formulas, does the same with PyTorch's own
# `parallelize_module` (plain and sequence-parallel), times a training step for 1, 2 and 4 ranks,
# and times the per-rank GEMM of tensor-parallel degree 1 to 8 on one device.
#
# Paper: Shoeybi et al., [Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
# Parallelism](https://arxiv.org/abs/1909.08053) (2019), section 3.

# %%
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

from demos.harness.errors import fail
from demos.harness.device import Device
from demos.harness.run import start
from demos.harness.timing import Settings, measure
from demos.t7_parallelism import _dist

SIZES = {
    # checked: (batch, sequence, hidden) of the float64 correctness checks;
    # timed: the shape whose training step is counted, byte-metered and timed (float32 on CPU, bf16 on GPU);
    # steps: training steps per timed repeat and per profile; repeats: timed repeats;
    # windows: one-step windows in which bytes are metered (the least-disturbed one is kept)
    "tiny": {"checked": (2, 16, 32), "timed": (4, 64, 256), "steps": 2, "repeats": 3, "windows": 8},
    "small": {"checked": (2, 32, 128), "timed": (4, 128, 512), "steps": 2, "repeats": 5, "windows": 8},
    "full": {"checked": (2, 64, 1024), "timed": (4, 2048, 8192), "steps": 5, "repeats": 10, "windows": 8},
}
TP_DEGREES = [1, 2, 4, 8]  # for the single-device GEMM study

if _dist.under_torchrun() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1")):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # one GPU per rank, before anything touches a GPU

run = start("tensor_parallel", title="Tensor parallelism: a Megatron MLP on 2 and 4 ranks", sizes=SIZES, cpu_threads=1)

# Imported after start(), which must see Triton unimported (DTensor imports it), and before any rank
# is forked, so the ranks inherit these modules instead of each importing them.
from torch.distributed._functional_collectives import AsyncCollectiveTensor  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Shard  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402

# %% [markdown]
# ## Where the ranks run
#
# Started as a plain script, the demo forks 2 and then 4 ranks on this machine (gloo over TCP on
# the loopback interface; see `_dist.py`), one intra-op thread each. Started under torchrun, this
# process *is* one rank and only the world size torchrun gave is run; on GPUs the backend is then
# NCCL with one GPU per rank. On one node with 8 GPUs:
#
#     torchrun --standalone --nproc-per-node 8 -m demos.t7_parallelism.tensor_parallel --device cuda
#
# and across two such nodes (run the same line on both; HOST is the first node's address):
#
#     torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
#         -m demos.t7_parallelism.tensor_parallel --device cuda
#
# (That runs, but a tensor-parallel group spanning nodes is what one avoids in practice: its
# all-reduce in every layer is the traffic to keep inside a node's NVLink domain, with pipeline and
# data parallelism across nodes.) With `--device cuda` but no torchrun, the ranks run on CPU with
# gloo and only the single-device GEMM study below uses the GPU.

# %%
on_torchrun = _dist.under_torchrun()
enough_gpus = torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
rank_device = run.torch_device if (on_torchrun and run.device.is_gpu and enough_gpus) else torch.device("cpu")
if run.device.is_gpu and rank_device.type == "cpu":
    run.not_run("NCCL tensor parallel (one GPU per rank)",
                "not started under torchrun with one GPU per rank: the ranks ran on CPU with gloo; "
                "start with torchrun --nproc-per-node N ... --device cuda")
# ranks on the run's own device use its size; CPU ranks of a GPU run use the CPU record's size
rank_sizes = run.sizes if rank_device.type == run.device.kind or run.size == "tiny" else SIZES["small"]
world_sizes = [_dist.torchrun_world_size()] if on_torchrun else [2, 4]
if min(world_sizes) < 2:
    fail("tensor parallelism needs at least 2 ranks: start torchrun with --nproc-per-node 2 or more")
timed_dtype = torch.bfloat16 if rank_device.type == "cuda" else torch.float32
same_host = not on_torchrun or os.environ.get("LOCAL_WORLD_SIZE") == os.environ.get("WORLD_SIZE")
meter_bytes = _dist.backend_for(rank_device) == "gloo" and all(map(os.path.exists, ("/proc/net/dev", "/proc/self/io")))
run.log(f"ranks: world sizes {world_sizes} on {rank_device.type} ({_dist.backend_for(rank_device)}), "
        f"checked shape {rank_sizes['checked']} in float64, timed shape {rank_sizes['timed']} in "
        f"{str(timed_dtype).removeprefix('torch.')}")

# %% [markdown]
# ## The single-process MLP and its problem
#
# A transformer MLP: `y = GELU(x W1^T + b1) W2^T + b2`, with `W1` of shape [4h, h] and `W2` of shape
# [h, 4h] (PyTorch's `nn.Linear` layout, output features first). The same weights, input and
# output gradient are generated from one seed everywhere, so every rank and the single-process
# reference see the same problem.

# %%
def random_problem(shape, dtype, device, seed=0):
    """Weights (scaled so activations stay O(1)), an input and an output gradient for one MLP."""
    b, s, h = shape
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*size, scale=1.0):
        return torch.randn(*size, generator=gen, device=device, dtype=dtype) * scale

    weights = {"w1": randn(4 * h, h, scale=h ** -0.5), "b1": randn(4 * h, scale=0.1),
               "w2": randn(h, 4 * h, scale=(4 * h) ** -0.5), "b2": randn(h, scale=0.1)}
    return weights, randn(b, s, h), randn(b, s, h)


class MLP(nn.Module):
    """The single-process model (and, parallelized by PyTorch below, the DTensor one)."""

    def __init__(self, w1, b1, w2, b2):
        super().__init__()
        h4, h = w1.shape
        self.up = nn.Linear(h, h4, dtype=w1.dtype, device=w1.device)
        self.down = nn.Linear(h4, h, dtype=w1.dtype, device=w1.device)
        with torch.no_grad():
            for param, value in ((self.up.weight, w1), (self.up.bias, b1),
                                 (self.down.weight, w2), (self.down.bias, b2)):
                param.copy_(value)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def forward_backward(model, x, grad_out):
    """One training step's compute: forward, then backward from a given output gradient."""
    model.zero_grad(set_to_none=True)
    x.grad = None
    y = model(x)
    y.backward(grad_out)
    return y


checked_weights, checked_x, checked_grad_out = random_problem(rank_sizes["checked"], torch.float64, "cpu")
reference = MLP(**checked_weights)
reference_x = checked_x.clone().requires_grad_(True)
reference_y = forward_backward(reference, reference_x, checked_grad_out).detach()
reference_grads = {"input": reference_x.grad, "w1": reference.up.weight.grad, "b1": reference.up.bias.grad,
                   "w2": reference.down.weight.grad, "b2": reference.down.bias.grad}

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


def waited(tensor):
    """DTensor hands back some results as AsyncCollectiveTensor, whose collective may still be in
    flight (the sequence-parallel output, the input gradient); an op on it waits, a copy may not."""
    return tensor.wait() if isinstance(tensor, AsyncCollectiveTensor) else tensor


def dtensor_step(model, x, grad_out):
    """forward_backward, then wait for every result a collective is still writing."""
    y = waited(forward_backward(model, x, grad_out))
    waited(x.grad)
    for param in model.parameters():
        waited(param.grad.to_local())
    return y


def local_input(x, rank, world_size, sequence_parallel):
    """What a rank feeds the MLP: the whole input, or its slice of the sequence."""
    local = x.chunk(world_size, dim=1)[rank] if sequence_parallel else x
    return local.detach().clone()  # a fresh leaf tensor, so its .grad is the rank's own


# %% [markdown]
# ## What each rank measures
#
# **Counting collectives.** A few training steps are profiled with `torch.profiler`; every call of
# a collective shows as one `gloo:all_reduce` (or `nccl:all_reduce`) event. Only the events inside
# the marked counted steps are counted; a step before them lets every rank's profiler start first.
# The same events' durations, summed, give the fraction of the step spent inside all-reduces
# (waiting for the slowest rank included: that is time the step cannot use).
#
# **Metering bytes**, two ways, in the same windows of one training step between barriers (a
# second barrier after the counters are read, so no rank starts sending before the read):
#
# - On one host, gloo's TCP traffic goes over the loopback interface, whose transmit counter
#   (`/proc/net/dev`, `lo`) counts every byte sent on this machine: rank 0 reads it. TCP/IP headers,
#   acknowledgements and the barriers' messages add a little; so does any other program's loopback
#   traffic on this shared machine, which can only add, so the smallest of several windows is kept
#   (short windows make a quiet one likely).
# - Every rank also reads its own process's `wchar` (`/proc/self/io`): the bytes it handed to
#   `write`-family system calls, which, on a rank that writes nothing else meanwhile, are its socket
#   sends (payload only, no TCP/IP headers), untouched by other programs. Summed over the ranks.
#
# A ring all-reduce of n elements sends `2(p-1)/p * n` elements from each rank: `2(p-1) * n` in total.
#
# **Timing.** After a barrier, every rank times `steps` training steps per repeat with the
# harness's `measure` (fixed repeat counts, so every rank runs the same collectives), and the
# step time is the slowest rank's median.

# %%
def bytes_per_step(step, windows):
    """For each of `windows` one-step windows: loopback bytes sent on this host, and bytes this rank wrote."""
    step()  # warm: first-call allocations and lazy set-up stay out of the windows
    loopback, written = [], []
    for _ in range(windows):
        dist.barrier()
        loopback_before, written_before = _dist.loopback_tx_bytes(), _dist.bytes_written_by_this_process()
        dist.barrier()
        step()
        dist.barrier()
        loopback.append(_dist.loopback_tx_bytes() - loopback_before)
        written.append(_dist.bytes_written_by_this_process() - written_before)
    return {"loopback": loopback, "written": written}


def profile_steps(step, steps, device):
    """Collective calls per step by name (from the profiler) and the fraction of the counted steps
    spent inside all-reduces."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step()  # every rank's profiler is running before the counted steps begin
        dist.barrier()
        with record_function("counted_steps"):
            for _ in range(steps):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize()
    events = prof.events()
    window = next(e.time_range for e in events if e.name == "counted_steps")
    inside = [e for e in events if window.start <= e.time_range.start <= window.end]
    calls = {}
    for e in inside:
        backend, _, collective = e.name.partition(":")
        if backend in ("gloo", "nccl") and collective:
            calls[collective] = calls.get(collective, 0) + 1
    if device.type == "cuda":  # the CPU-side event is the launch; the time is the NCCL kernel's
        busy = [e for e in inside if e.device_type == torch.autograd.DeviceType.CUDA and "allreduce" in e.name.lower()]
    else:
        busy = [e for e in inside if e.name.endswith(":all_reduce")]
    fraction = sum(e.time_range.elapsed_us() for e in busy) / window.elapsed_us()
    return {name: n / steps for name, n in calls.items()}, fraction


def seconds_per_step(step, steps, repeats, device):
    """The harness protocol on a rank: median over `repeats` of `steps` steps, after a barrier."""
    harness_device = Device(kind=device.type, name=str(device), device_class=device.type)
    settings = Settings(warmup=1, min_repeats=repeats, max_repeats=repeats, flush_l2=False)
    if dist.is_initialized():
        dist.barrier()
    timing = measure(lambda: [step() for _ in range(steps)], harness_device, settings)
    return {"median": timing.median_s / steps, "p10": timing.p10_s / steps, "p90": timing.p90_s / steps}


# %% [markdown]
# ## One rank's work
#
# Every rank runs the same function: the float64 checks (Megatron's MLP, the deliberately wrong
# variant without the backward all-reduce, DTensor plain and sequence-parallel), then the
# counting, metering and timing of a training step at the timed shape. The parent checks what
# comes back.

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

    out["calls_per_step"], out["all_reduce_fraction"] = profile_steps(step, sizes["steps"], device)
    if meter_bytes:
        out["bytes"] = {"megatron": bytes_per_step(step, sizes["windows"])}
        for name, sequence_parallel in (("dtensor", False), ("dtensor_sp", True)):
            model = dtensor_mlp(weights, mesh, sequence_parallel)
            xs = local_input(x, rank, world_size, sequence_parallel).requires_grad_(True)
            gs = local_input(grad_out, rank, world_size, sequence_parallel)
            out["bytes"][name] = bytes_per_step(lambda: dtensor_step(model, xs, gs), sizes["windows"])
    out["step_s"] = seconds_per_step(step, sizes["steps"], sizes["repeats"], device)
    return out


# %% [markdown]
# ## Run the ranks, check what they computed
#
# Every rank must hold the full output (replicated after the all-reduce) and the full input
# gradient; concatenated in rank order, the ranks' W1 and b1 gradient shards must equal the
# single-process gradients' rows and the W2 shards its columns; b2's gradient must be whole on
# every rank. All in float64, with a tolerance of 1e-9 (the differences are summation order only).
# The wrong variant, which skips f's backward all-reduce, must leave every rank with only its own
# shard's share of the input gradient: the same check must fail on it.

# %%
TOLERANCE = {"rtol": 1e-9, "atol": 1e-9}
SHARD_DIM = {"w1": 0, "b1": 0, "w2": 1}  # dimension along which the ranks' gradient shards concatenate


def check_ranks(p, results):
    def every_rank(variant, key):
        return torch.stack([r[variant][key] for r in results])

    def concatenated(variant, key, dim):
        return torch.cat([r[variant][key] for r in results], dim=dim)

    for key in ("output", "input", "b2"):
        expected = reference_y if key == "output" else reference_grads[key]
        run.check_close(f"p{p}.megatron.{key}{'' if key == 'output' else '_grad'}.every_rank",
                        every_rank("megatron", key), expected.expand(p, *expected.shape), **TOLERANCE,
                        reference_name="single-process float64 model")
    for key, dim in SHARD_DIM.items():
        run.check_close(f"p{p}.megatron.{key}_grad.shards", concatenated("megatron", key, dim), reference_grads[key],
                        **TOLERANCE, reference_name="single-process float64 gradient")

    wrong = every_rank("no_backward_all_reduce", "input")
    expected = reference_grads["input"].expand(p, *reference_grads["input"].shape)
    worst = float((wrong - expected).abs().max())
    caught = bool(((wrong - expected).abs() > TOLERANCE["atol"] + TOLERANCE["rtol"] * expected.abs()).any(
        dim=tuple(range(1, wrong.dim()))).all())
    run.check(f"p{p}.check_catches_a_missing_backward_all_reduce", caught,
              f"without f's all-reduce the input gradient differs on every rank (max |err| {worst:.2e}, "
              f"|reference| up to {float(expected.abs().max()):.2e})")

    for variant in ("dtensor", "dtensor_sp"):
        sp = variant == "dtensor_sp"
        for key in ("output", "input"):
            expected = reference_y if key == "output" else reference_grads["input"]
            got = concatenated(variant, key, 1) if sp else every_rank(variant, key)
            run.check_close(f"p{p}.{variant}.{key}{'' if key == 'output' else '_grad'}", got,
                            expected if sp else expected.expand(p, *expected.shape), **TOLERANCE,
                            reference_name="single-process float64 model")
        for key in ("w1", "w2"):
            run.check_close(f"p{p}.{variant}.{key}_grad.shards", concatenated(variant, key, SHARD_DIM[key]),
                            reference_grads[key], **TOLERANCE, reference_name="single-process float64 gradient")


def single_process_step():
    """The single-process model's training step (p = 1), at the timed shape on the ranks' device."""
    weights, x, grad_out = random_problem(rank_sizes["timed"], timed_dtype, rank_device, seed=1)
    model = MLP(**weights)
    x.requires_grad_(True)
    return lambda: forward_backward(model, x, grad_out)


results_by_p = {}
for p in world_sizes:
    started = time.perf_counter()
    results = _dist.launch(rank_worker, p, rank_sizes, rank_device, meter_bytes, device=rank_device)
    if results is None:  # a rank other than 0 under torchrun: rank 0 writes the record
        _dist.shutdown()
        raise SystemExit(0)
    run.log(f"p={p}: ranks done in {time.perf_counter() - started:.1f} s")
    check_ranks(p, results)
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
               label="all-reduces per MLP per training step by the Megatron formula")
    run.metric(f"p{p}.all_reduces_ratio", counted[0] / ALL_REDUCES_PER_STEP, "x",
               label=f"p={p}: counted all-reduces over the formula")
    rows = [["all-reduce calls per step (profiler)", counted[0], ALL_REDUCES_PER_STEP,
             round(counted[0] / ALL_REDUCES_PER_STEP, 3)]]
    ring = ALL_REDUCES_PER_STEP * 2 * (p - 1) * n * element_bytes
    run.metric(f"p{p}.bytes_per_step_formula", ring / 1e6, "MB",
               label=f"p={p}: ring formula, 2 all-reduces x 2(p-1) x n x {element_bytes} bytes")
    for variant, description in METERED if meter_bytes else ():
        prefix = f"p{p}" if variant == "megatron" else f"p{p}.{variant}"
        metered = {}
        written_per_window = [sum(ranks) for ranks in zip(*(r["bytes"][variant]["written"] for r in results))]
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
if not meter_bytes:
    run.not_run("byte metering", f"the ranks talk over {_dist.backend_for(rank_device)} (NVLink/InfiniBand), "
                "not through sockets and this host's loopback interface")
elif not same_host:
    run.not_run("loopback byte count", "the ranks span several hosts; only their socket writes are metered")

# %% [markdown]
# The DTensor variants' collectives, counted by `CommDebugMode` in the float64 step:

# %%
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
run.table("dtensor", "PyTorch's parallelize_module: collectives per training step (CommDebugMode)",
          ["variant", "p", "counted", "expected"], rows)

# %% [markdown]
# ## Step time for 1, 2 and 4 ranks
#
# One training step (forward and backward) of the MLP at the timed shape; p = 1 is the
# single-process model on one thread, timed with the same protocol. **On this 2-core machine the
# 4 ranks are oversubscribed** (four one-thread processes on two cores), so the CPU numbers show
# the cost of the communication *and* of the oversubscription, not what a GPU node would do.
# There, each rank has its own GPU, and the all-reduces run over NVLink: about 450 GB/s per
# direction per H100 SXM GPU (NVLink 4, 900 GB/s bidirectional, per NVIDIA's [H100 datasheet](
# https://www.nvidia.com/en-us/data-center/h100/)), so one all-reduce of n bf16 elements costs at
# least `2(p-1)/p * 2n bytes / 450 GB/s`. That figure is stated here, not measured.

# %%
p1 = seconds_per_step(single_process_step(), rank_sizes["steps"], rank_sizes["repeats"], rank_device)

rows = [[1, round(p1["median"] * 1e3, 2), round(p1["p10"] * 1e3, 2), round(p1["p90"] * 1e3, 2), "-", 1.0]]
run.metric("p1.step_ms", p1["median"] * 1e3, "ms", label="single process (one thread on CPU): one training step")
for p, results in results_by_p.items():
    slowest = max(results, key=lambda r: r["step_s"]["median"])["step_s"]
    fraction = sum(r["all_reduce_fraction"] for r in results) / p
    speedup = p1["median"] / slowest["median"]
    run.metric(f"p{p}.step_ms", slowest["median"] * 1e3, "ms",
               label=f"p={p}: one training step (slowest rank's median)")
    run.metric(f"p{p}.all_reduce_fraction", fraction, "fraction",
               label=f"p={p}: share of the step spent inside all-reduces (profiler, mean over ranks)")
    run.metric(f"p{p}.speedup", speedup, "x", label=f"p={p}: single-process step time over the {p}-rank step time")
    rows.append([p, round(slowest["median"] * 1e3, 2), round(slowest["p10"] * 1e3, 2), round(slowest["p90"] * 1e3, 2),
                 round(fraction, 3), round(speedup, 2)])
run.table("step_time", f"One training step of the MLP ({b}x{s}x{h}, {str(timed_dtype).removeprefix('torch.')}, "
          f"{rank_device.type}{', one thread per rank' if rank_device.type == 'cpu' else ''})",
          ["ranks p", "median (ms)", "p10 (ms)", "p90 (ms)", "in all-reduce (fraction)", "speedup over p = 1"], rows)
run.series("step_time", "Training step time vs tensor-parallel ranks", "ranks p", "ms",
           {"median step time": ([r[0] for r in rows], [r[1] for r in rows])})

# %% [markdown]
# ## On one device: the per-rank GEMM shrinks with the degree
#
# Tensor parallelism of degree t gives each rank a column-parallel GEMM of [b*s, h] x [h, 4h/t]:
# t times fewer FLOPs, but also a smaller GEMM, which need not run at the same FLOP rate. On a GPU a
# product must be large enough to give every SM its tiles of the output (an H100 has 132 SMs; a
# 128x128 tile per SM needs an output of over two million elements); on a CPU with a few cores,
# smaller operands sit closer in cache. Here the shard GEMM is timed on the run's device (this CPU,
# or one GPU in bf16) for t = 1 to 8 at the timed shape, and its throughput shown as a fraction of
# the same run's matmul ceiling, which is one square product (1024 on a CPU, 8192 on a GPU at the
# full size): a smaller, cache-resident product can exceed it on a CPU. First, the identity that
# makes the column split correct: the t shard products, concatenated, equal the full product.

# %%
gemm_dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
ceiling = "matmul_bf16" if run.device.is_gpu else "matmul_fp32"
b, s, h = run.sizes["timed"]
tokens = b * s
a = torch.randn(tokens, h, device=run.torch_device, dtype=gemm_dtype)
w = torch.randn(h, 4 * h, device=run.torch_device, dtype=gemm_dtype)
checked_rows = a[:256]  # the identity is checked on the first rows; every row is computed the same way
reference_rows = checked_rows.double() @ w.double()
relative = 2e-2 if gemm_dtype == torch.bfloat16 else 1e-4  # bf16 rounds each output to 8 bits of mantissa
tolerance = {"rtol": relative, "atol": relative * h ** 0.5}  # outputs are sums of h products: ~sqrt(h) in size
gemm = {}
for t in TP_DEGREES:
    shards = w.chunk(t, dim=1)
    run.check_close(f"gemm.t{t}.shards_concatenated", torch.cat([checked_rows @ shard for shard in shards], dim=1),
                    reference_rows, **tolerance, reference_name="the full product in float64")
    shard = shards[0].contiguous()
    timing = run.time(lambda: a @ shard)
    gemm[t] = (shard.shape[1], timing.median_s, 2 * tokens * h * shard.shape[1] / timing.median_s / 1e12)
    run.metric(f"gemm.t{t}.tflops", gemm[t][2], "TFLOP/s", ceiling=ceiling,
               label=f"t={t}: the shard GEMM [{tokens}, {h}] x [{h}, {shard.shape[1]}]")
    run.metric(f"gemm.t{t}.ms", timing.median_s * 1e3, "ms", label=f"t={t}: time of one rank's shard GEMM")
run.finish_ceilings()  # the ceilings' second measurement, so the fractions below are the record's final ones
fractions = [tflops / run.ceilings[ceiling]["value"] for _, _, tflops in gemm.values()]
rows = [[t, f"[{tokens}, {h}] x [{h}, {columns}]", round(seconds * 1e3, 3), round(tflops, 4), round(fraction, 3)]
        for (t, (columns, seconds, tflops)), fraction in zip(gemm.items(), fractions)]
run.table("gemm", f"Column-parallel shard GEMM per rank ({str(gemm_dtype).removeprefix('torch.')}, {run.device.kind})",
          ["degree t", "shape", "median (ms)", "TFLOP/s", "fraction of matmul ceiling"], rows)
run.series("gemm_efficiency", "Shard GEMM efficiency vs tensor-parallel degree", "degree t",
           "fraction of the matmul ceiling", {"shard GEMM": (TP_DEGREES, fractions)}, x_log=True)
run.save()

# %% [markdown]
# ## Reading the results
#
# - Every rank's output and gradients equal the single-process model's in float64, for Megatron's
#   hand-written f and g and for PyTorch's `parallelize_module`, plain and sequence-parallel. Skipping
#   f's backward all-reduce leaves each rank with its own shard's part of the input gradient, and the
#   check catches it.
# - The profiler counts 2 all-reduces per training step. The ranks' socket writes match the ring
#   formula `2(p-1) * n` per all-reduce, and the loopback counter adds only TCP/IP overhead to them
#   when no other program uses it (its `loopback_over_written` metrics say how much). Each rank's
#   traffic, `2(p-1)/p * n`, *grows* towards 2n with p, while its FLOPs fall as 1/p, and it is paid
#   in every layer, forward and backward: that is why tensor parallelism stays inside the fastest
#   interconnect (one NVLink node), and pipeline and data parallelism span the nodes.
# - Sequence parallelism's formula is the same bytes; on gloo its measured bytes are 1.5 times that,
#   because gloo's reduce-scatter is an all-reduce (see above).
# - Splitting a GEMM t ways gives each rank t times fewer FLOPs, but a smaller GEMM, whose FLOP rate
#   depends on the device and the shape: the `gemm` table shows this device's answer at this shape.
