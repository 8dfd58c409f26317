# %% [markdown]
# # Pipeline parallelism: GPipe vs 1F1B, the bubble measured
#
# Pipeline parallelism cuts a model **across layers** into p stages, one per device, and cuts each
# batch into m microbatches that flow through the stages, so different stages work on different
# microbatches at the same time. At the start and the end of every step some stages have nothing
# to do: with equal stages that *bubble* is (p - 1)/(m + p - 1) of the step, so more microbatches
# shrink it.
#
# Two schedules with the same bubble and very different memory:
# - **GPipe** (Huang et al., [GPipe: Efficient Training of Giant Neural Networks using Pipeline
#   Parallelism](https://arxiv.org/abs/1811.06965)): every stage runs all m forwards, then all m
#   backwards. Each stage holds the saved activations of all m microbatches at once.
# - **1F1B**, the flushing schedule of PipeDream (Narayanan et al., [Memory-Efficient
#   Pipeline-Parallel DNN Training](https://arxiv.org/abs/2006.09503), "PipeDream-Flush"): stage s
#   runs p - s - 1 warm-up forwards, then alternates one forward and one backward, then drains. A
#   backward starts as soon as it can, so stage s never holds more than min(m, p - s) microbatches.
#
# This demo runs both schedules on p = 4 real processes (torch.distributed, gloo), with real
# send/receive of activations and gradients between stages. It checks that the pipelined loss,
# output and every stage's gradients equal the unsplit model's, then measures, from per-stage
# timelines, the idle fraction against the formula, the activations held in flight, the step time
# against the ideal, and the bytes sent between stages. Interleaved 1F1B, run through
# `torch.distributed.pipelining`, shows what virtual stages do to the bubble.

# %%
import math
import statistics
import time
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from demos.harness.run import start
from demos.t7_parallelism import _dist

run = start(
    "pipeline_parallel",
    title="Pipeline parallelism: GPipe vs 1F1B bubble, in-flight activations and p2p traffic",
    sizes={  # batch rows, layer width, forward device time per stage per step, microbatch counts, timed steps
        "tiny": {"batch": 32, "width": 128, "forward_ms": 100, "microbatches": [1, 4], "repeats": 2},
        "small": {"batch": 128, "width": 256, "forward_ms": 60, "microbatches": [1, 2, 4, 8, 16], "repeats": 3},
        # the stage time is padded (see below), so a GPU machine measures the same thing at the same size
        "full": {"batch": 128, "width": 256, "forward_ms": 60, "microbatches": [1, 2, 4, 8, 16], "repeats": 3},
    },
)
size = run.sizes
STAGES = _dist.torchrun_world_size() or 4  # p: one rank per stage
SCHEDULES = ("gpipe", "1f1b")
SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}
M_MAX = max(size["microbatches"])
M_TIMELINE = 8 if 8 in size["microbatches"] else M_MAX  # the configuration whose timeline is drawn

# %% [markdown]
# ## Where the ranks run
#
# Every rank here is a process on this machine's CPU, talking over gloo. With `--device cuda` and no
# torchrun, or under torchrun, the ranks still run on the CPU with gloo: the stage time below is a
# padded stand-in for device time, so one GPU per stage would measure the same schedule, and an
# NCCL version of the send/receive code is not part of this demo.

# %%
if run.device.is_gpu:
    run.not_run("NCCL pipeline across GPUs", "the ranks run on the CPU with gloo: each stage's time is a padded "
                "stand-in for one accelerator, so GPUs would time the same schedule; the NCCL p2p path "
                "is not implemented in this demo")

# %% [markdown]
# ## One accelerator per stage, on a 2-core machine
#
# This machine has 2 cores for 4 ranks. If every stage did real CPU work, the stages would take
# turns on the cores and the measured idle time would be the operating system's scheduling, not
# the pipeline's. So each stage's layer does its real (small) math, and then its forward and its
# backward are **padded** with `time.sleep` to a fixed duration: `pad_to_device_time` below is
# the stand-in for "this stage's accelerator is busy for t seconds", and a sleeping rank leaves
# the cores to the others. The forward of one microbatch takes t_f = T_f/m and its backward
# t_b = 2 T_f/m, so each stage's total work per step is 3 T_f whatever m is; what changes with m
# is only how well the stages overlap.
#
# The padding lives in a `torch.autograd.Function` around the stage's layer, so autograd pads the
# backward too, and the same function records the stage's timeline: for every forward (F) and
# backward (B), the microbatch index, start and end on `time.perf_counter`, the time the real math
# took, and the bytes autograd saved for the backward (counted with
# `torch.autograd.graph.saved_tensors_hooks`, and released when the backward frees them).

# %%
def pad_to_device_time(started: float, seconds: float) -> None:
    """Sleep until `seconds` have passed since `started` (a perf_counter reading): the stand-in
    for one accelerator per stage being busy for that long."""
    while (left := seconds - (time.perf_counter() - started)) > 0:
        time.sleep(left)


class Op(NamedTuple):
    kind: str  # "F" (forward) or "B" (backward)
    microbatch: int
    start: float  # time.perf_counter() readings: one monotonic clock for every process on this host
    end: float
    math_s: float  # of which the layer's real math
    saved_bytes: int  # activations autograd saved for this microbatch's backward (F only)


class HeldActivation:
    """What autograd keeps for the backward in place of a saved tensor: it adds the tensor's bytes to its
    stage's live count, and takes them off again when autograd frees it after the backward."""

    def __init__(self, tensor, stage):
        self.tensor, self.stage, self.nbytes = tensor, stage, tensor.numel() * tensor.element_size()
        stage.saved_bytes_total += self.nbytes
        stage.live_saved_bytes += self.nbytes
        stage.peak_saved_bytes = max(stage.peak_saved_bytes, stage.live_saved_bytes)

    def __del__(self):
        self.stage.live_saved_bytes -= self.nbytes


class PaddedStage(nn.Module):
    """One pipeline stage: a real layer (Linear + tanh) whose forward and backward are padded to a fixed
    device time, with a timeline of every F and B and a count of the activation bytes held for backward."""

    def __init__(self, layer: nn.Linear, forward_s: float = 0.0, backward_s: float = 0.0):
        super().__init__()
        self.layer, self.forward_s, self.backward_s = layer, forward_s, backward_s
        self.new_step()

    def compute(self, x):
        return torch.tanh(self.layer(x))

    def forward(self, x):
        return PaddedCompute.apply(x, self, *self.layer.parameters())

    def new_step(self) -> None:
        self.ops, self.n_forward, self.n_backward = [], 0, 0
        self.saved_bytes_total = self.live_saved_bytes = self.peak_saved_bytes = 0

    def record(self, kind, started, math_s, saved_bytes=0):
        index = self.n_forward if kind == "F" else self.n_backward  # both schedules go in microbatch order
        self.n_forward, self.n_backward = self.n_forward + (kind == "F"), self.n_backward + (kind == "B")
        self.ops.append((kind, index, started, time.perf_counter(), math_s, saved_bytes))

    def counting_saved_activations(self):
        """Hooks on what autograd saves for the backward: activations are counted (parameters are not)."""
        parameter_storages = {p.untyped_storage().data_ptr() for p in self.layer.parameters()}

        def pack(t):
            if t.device.type == "meta" or t.untyped_storage().data_ptr() in parameter_storages:
                return t
            return HeldActivation(t, self)

        def unpack(held):
            return held.tensor if isinstance(held, HeldActivation) else held

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


class PaddedCompute(torch.autograd.Function):
    """The stage's layer with its forward padded to stage.forward_s and its backward to stage.backward_s."""

    @staticmethod
    def forward(ctx, x, stage, *params):
        started = time.perf_counter()
        saved_before = stage.saved_bytes_total
        with torch.enable_grad(), stage.counting_saved_activations():
            x_in = x.detach().requires_grad_(x.requires_grad)
            y = stage.compute(x_in)
        math_s = time.perf_counter() - started
        ctx.stage, ctx.x_in, ctx.y, ctx.params = stage, x_in, y, params
        if x.device.type != "meta":  # torch.distributed.pipelining infers shapes with one meta forward
            pad_to_device_time(started, stage.forward_s)
            stage.record("F", started, math_s, stage.saved_bytes_total - saved_before)
        return y.detach()

    @staticmethod
    def backward(ctx, grad_y):
        started = time.perf_counter()
        stage, x_in = ctx.stage, ctx.x_in
        wrt = ([x_in] if x_in.requires_grad else []) + list(ctx.params)
        grads = torch.autograd.grad(ctx.y, wrt, grad_y)  # frees the saved activations
        ctx.y = ctx.x_in = None
        math_s = time.perf_counter() - started
        pad_to_device_time(started, stage.backward_s)
        stage.record("B", started, math_s)
        grad_x = grads[0] if x_in.requires_grad else None
        return (grad_x, None, *grads[len(wrt) - len(ctx.params):])


# %% [markdown]
# The model is p layers, one per stage, with fixed random weights; the loss is the mean squared
# error over the whole batch. Every rank builds its own layer from the same seeds the reference
# uses, so the pipelined model and the unsplit one have the same weights.

# %%
def make_stage_layer(stage: int, width: int) -> nn.Linear:
    generator = torch.Generator().manual_seed(1000 + stage)
    layer = nn.Linear(width, width)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(width, width, generator=generator) / math.sqrt(width))
        layer.bias.copy_(0.1 * torch.randn(width, generator=generator))
    return layer


def make_batch(batch: int, width: int):
    generator = torch.Generator().manual_seed(7)
    return torch.randn(batch, width, generator=generator), 0.5 * torch.randn(batch, width, generator=generator)


def flat_grads(layer: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in layer.parameters()])


# %% [markdown]
# ## The two schedules
#
# A schedule is, for each stage, the order of its forwards and backwards. Everything else is the
# same: a forward waits for its input activation from the previous stage and sends its output to
# the next; a backward waits for the gradient from the next stage and sends its input's gradient
# to the previous one. The last stage computes each microbatch's loss, divided by m so that the
# gradients sum to those of the full-batch mean.
#
# Why not `torch.distributed.pipelining`? Its `ScheduleGPipe` and `Schedule1F1B` run on gloo on this
# CPU, and the demo uses them below as an independent check of these schedules (same gradients,
# same order of operations) and to run interleaved 1F1B. But `Schedule1F1B` refuses m < p (a guard
# against a hang with m = 1, [pytorch#144702](https://github.com/pytorch/pytorch/pull/144702),
# [torchtitan#775](https://github.com/pytorch/torchtitan/issues/775)), and this sweep starts at
# m = 1; and written out, each schedule is a dozen lines that show exactly what each stage does.
#
# All receives of a step are posted up front (`irecv`), so gloo's background thread can take each
# message in while the stage is still busy; a stage blocks only when it needs a tensor that has
# not arrived yet, and that wait is the bubble.

# %%
def schedule_order(schedule: str, m: int, p: int, stage: int) -> list[tuple[str, int]]:
    """The (kind, microbatch) operations stage `stage` of `p` runs in one step with `m` microbatches."""
    if schedule == "gpipe":  # all forwards, then all backwards
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    # 1F1B (PipeDream-Flush): p - stage - 1 warm-up forwards, then one forward + one backward, then drain
    warmup = min(m, p - stage - 1)
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(m - warmup, m)]


def pipeline_step(stage_module: PaddedStage, order, rank: int, p: int, m: int, x, target, scale_loss=True):
    """One training step's forward and backward on this rank's stage, with real p2p between stages.
    Returns (loss, output) on the last stage (None elsewhere) and the bytes and messages this rank sent."""
    rows, width = x.shape[0] // m, x.shape[1]
    x_chunks, target_chunks = x.chunk(m), target.chunk(m)
    activations = [torch.empty(rows, width) for _ in range(m)] if rank > 0 else []
    grads_in = [torch.empty(rows, width) for _ in range(m)] if rank < p - 1 else []
    activation_recvs = [dist.irecv(a, rank - 1, tag=i) for i, a in enumerate(activations)]
    grad_recvs = [dist.irecv(g, rank + 1, tag=m + i) for i, g in enumerate(grads_in)]
    sends, sent_bytes, inputs, outputs, losses, last_outputs = [], 0, {}, {}, [], []
    for kind, i in order:
        if kind == "F":
            if rank == 0:
                x_i = x_chunks[i]
            else:
                activation_recvs[i].wait()
                x_i = activations[i].requires_grad_()
            y = stage_module(x_i)
            inputs[i] = x_i
            if rank == p - 1:
                loss = F.mse_loss(y, target_chunks[i])
                outputs[i] = loss / m if scale_loss else loss
                losses.append(outputs[i].detach())
                last_outputs.append(y.detach())
            else:
                outputs[i] = y
                sends.append(dist.isend(y.detach(), rank + 1, tag=i))
                sent_bytes += y.numel() * y.element_size()
        else:
            out = outputs.pop(i)
            if rank == p - 1:
                out.backward()
            else:
                grad_recvs[i].wait()
                out.backward(grads_in[i])
            x_i = inputs.pop(i)
            if rank > 0:
                sends.append(dist.isend(x_i.grad, rank - 1, tag=m + i))
                sent_bytes += x_i.grad.numel() * x_i.grad.element_size()
    for work in sends:
        work.wait()
    result = (torch.stack(losses).sum(), torch.cat(last_outputs)) if rank == p - 1 else (None, None)
    return result, sent_bytes, len(sends)


# %% [markdown]
# ## Correctness: the pipelined step equals the unsplit model
#
# The reference is the same p layers in one process, on the whole batch at once, in float64. Each
# schedule and every m runs one unpadded step on the 4 ranks; the last stage's loss and output and
# every stage's weight and bias gradients are compared with the reference. The same step also runs
# through `torch.distributed.pipelining` (`PipelineStage` with `ScheduleGPipe` and `Schedule1F1B`,
# which average the microbatch gradients by default) as an independent implementation, whose
# per-stage order of operations must equal ours. And one deliberately wrong variant, the classic
# bug of not dividing each microbatch's loss by m, must fail the gradient check.
#
# The library also has *interleaved* 1F1B (Narayanan et al., [Efficient Large-Scale Language Model
# Training on GPU Clusters Using Megatron-LM](https://arxiv.org/abs/2104.04473)): each device holds
# v smaller stages instead of one ("virtual stages"; here v = 2, so rank r holds layers r and
# r + p of a 2p-layer model, each padded to half the time, so a device's work per step is
# unchanged). Filling the pipeline then takes 1/v as long and the bubble becomes
# (p - 1)/(v m + p - 1), at the price of v times as many hand-overs. It needs m to be a multiple of
# p, and it is checked here against the unsplit 2p-layer model.

# %%
VIRTUAL_STAGES = 2
INTERLEAVED_MS = [m for m in size["microbatches"] if m >= STAGES and m % STAGES == 0]


def checked_step(rank, p, schedule, m, scale_loss=True):
    stage_module = PaddedStage(make_stage_layer(rank, size["width"]))
    x, target = make_batch(size["batch"], size["width"])
    (loss, output), _, _ = pipeline_step(stage_module, schedule_order(schedule, m, p, rank), rank, p, m, x, target,
                                         scale_loss)
    return {"grads": [flat_grads(stage_module.layer)], "loss": loss, "output": output,
            "ops": [op[:2] for op in stage_module.ops]}


def library_schedule(rank, p, schedule, m):
    """This rank's stage module(s) and a torch.distributed.pipelining schedule over them."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    if schedule == "interleaved":  # rank r holds virtual stages r, r + p, ...
        modules = [PaddedStage(make_stage_layer(rank + k * p, size["width"])) for k in range(VIRTUAL_STAGES)]
        stages = [PipelineStage(module, rank + k * p, VIRTUAL_STAGES * p, torch.device("cpu"))
                  for k, module in enumerate(modules)]
        return modules, ScheduleInterleaved1F1B(stages, m, loss_fn=F.mse_loss)
    modules = [PaddedStage(make_stage_layer(rank, size["width"]))]
    stage = PipelineStage(modules[0], rank, p, torch.device("cpu"))
    return modules, {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule](stage, m, loss_fn=F.mse_loss)


def library_step(modules, schedule, rank, p, x, target):
    """One step through a library schedule; (mean microbatch loss, output) on the last rank, else (None, None)."""
    for module in modules:
        module.layer.zero_grad(set_to_none=True)
        module.new_step()
    losses = []
    dist.barrier()
    if rank == 0:
        schedule.step(x)
    elif rank == p - 1:
        output = schedule.step(target=target, losses=losses)
        return torch.stack(losses).mean(), output.detach()
    else:
        schedule.step()
    return None, None


def torch_pipelining_step(rank, p, schedule, m):
    modules, library = library_schedule(rank, p, schedule, m)
    x, target = make_batch(size["batch"], size["width"])
    library_step(modules, library, rank, p, x, target)  # the first step also infers the stages' shapes
    loss, output = library_step(modules, library, rank, p, x, target)
    return {"grads": [flat_grads(module.layer) for module in modules], "loss": loss, "output": output,
            "ops": [op[:2] for op in modules[0].ops]}


def correctness_worker(rank, p):
    results = {("ours", s, m): checked_step(rank, p, s, m) for s in SCHEDULES for m in size["microbatches"]}
    results[("unscaled_loss_bug", "gpipe", M_MAX)] = checked_step(rank, p, "gpipe", M_MAX, scale_loss=False)
    if M_MAX >= p:  # torch's Schedule1F1B needs m >= p
        for s in SCHEDULES:
            results[("torch", s, M_MAX)] = torch_pipelining_step(rank, p, s, M_MAX)
    if INTERLEAVED_MS:
        results[("torch", "interleaved", max(INTERLEAVED_MS))] = torch_pipelining_step(rank, p, "interleaved",
                                                                                        max(INTERLEAVED_MS))
    return results


def reference_step(n_layers):
    """The unsplit model: all the stages' layers on the whole batch, in float64."""
    layers = [make_stage_layer(s, size["width"]).double() for s in range(n_layers)]
    x, target = (t.double() for t in make_batch(size["batch"], size["width"]))
    h = x
    for layer in layers:
        h = torch.tanh(layer(h))
    loss = F.mse_loss(h, target)
    loss.backward()
    return {"loss": loss.detach(), "output": h.detach(), "grads": [flat_grads(layer) for layer in layers]}


run.log(f"correctness: {STAGES} ranks, schedules {SCHEDULES}, m in {size['microbatches']} ...")
checked = _dist.launch(correctness_worker, STAGES)
RTOL, ATOL = 1e-4, 1e-6
if checked is not None:
    references = {1: reference_step(STAGES), VIRTUAL_STAGES: reference_step(VIRTUAL_STAGES * STAGES)}
    for impl, s, m in sorted(key for key in checked[0] if key[0] != "unscaled_loss_bug"):
        name = f"{s}.m{m}" if impl == "ours" else f"torch_pipelining.{s}.m{m}"
        v = VIRTUAL_STAGES if s == "interleaved" else 1
        reference = references[v]
        last = checked[STAGES - 1][(impl, s, m)]
        run.check_close(f"{name}.loss", last["loss"], reference["loss"], rtol=RTOL, atol=ATOL)
        run.check_close(f"{name}.output", last["output"], reference["output"], rtol=RTOL, atol=ATOL)
        for stage in range(v * STAGES):  # stage k * p + r lives on rank r, as its k-th stage
            grads = checked[stage % STAGES][(impl, s, m)]["grads"][stage // STAGES]
            run.check_close(f"{name}.stage{stage}.grads", grads, reference["grads"][stage], rtol=RTOL, atol=ATOL)
        if impl != "ours" and s in SCHEDULES:
            same = all(checked[rank][(impl, s, m)]["ops"] == checked[rank][("ours", s, m)]["ops"]
                       for rank in range(STAGES))
            run.check(f"{name}.same_op_order", same, "every stage ran the same (F/B, microbatch) sequence as "
                      f"this demo's {SCHEDULE_NAMES[s]}" if same else "the order of operations differs")
    bug = [checked[rank][("unscaled_loss_bug", "gpipe", M_MAX)]["grads"][0] for rank in range(STAGES)]
    worst = max(float(((g.double() - r).abs() - (ATOL + RTOL * r.abs())).max())
                for g, r in zip(bug, references[1]["grads"]))
    run.check("grad_check_catches_unscaled_microbatch_loss", worst > 0,
              f"without the 1/m on each microbatch's loss (m={M_MAX}) the gradients miss the tolerance by up to "
              f"{worst:.2e}" if worst > 0 else "the wrong gradients passed the tolerance")

# %% [markdown]
# ## The measurement
#
# For each schedule and m, every rank runs one unpadded warm-up step, then timed steps with
# forward time T_f/m and backward time 2 T_f/m per microbatch, each after a barrier. All ranks
# run on one host, so their `time.perf_counter` readings come from the same monotonic clock and
# the stages' timelines line up without any correction; a check below confirms it (no stage
# starts a microbatch before its neighbour has finished it). Aligning at the barrier instead
# (each rank's own exit time as zero), as one would across hosts, would be off by how far apart
# the ranks leave the barrier; that skew is recorded too.
#
# Each rank also reads the bytes its own process has written (`wchar` in `/proc/self/io`, which
# counts every `write` to a socket, gloo's I/O threads included) just before and just after its
# step: what the rank really pushed into the network stack, payload plus gloo's framing.
#
# Nothing here goes through the harness's timer: the quantities are intervals on the stages'
# timelines inside one distributed step.

# %%
def timing_worker(rank, p):
    x, target = make_batch(size["batch"], size["width"])
    results = {}
    for s in SCHEDULES:
        for m in size["microbatches"]:
            stage_module = PaddedStage(make_stage_layer(rank, size["width"]))
            order = schedule_order(s, m, p, rank)
            pipeline_step(stage_module, order, rank, p, m, x, target)  # warm-up, unpadded
            stage_module.forward_s = size["forward_ms"] / 1e3 / m
            stage_module.backward_s = 2 * stage_module.forward_s
            steps = []
            for _ in range(size["repeats"]):
                stage_module.layer.zero_grad(set_to_none=True)
                stage_module.new_step()
                dist.barrier()
                barrier_exit = time.perf_counter()
                written_before = _dist.bytes_written_by_this_process()
                _, sent_bytes, messages = pipeline_step(stage_module, order, rank, p, m, x, target)
                written_after = _dist.bytes_written_by_this_process()
                steps.append({"ops": stage_module.ops, "barrier_exit": barrier_exit,
                              "peak_saved_bytes": stage_module.peak_saved_bytes, "sent_bytes": sent_bytes,
                              "messages": messages, "written_bytes": None if written_before is None
                              else written_after - written_before})
            results[(s, m)] = steps
    for m in INTERLEAVED_MS:
        modules, library = library_schedule(rank, p, "interleaved", m)
        library_step(modules, library, rank, p, x, target)  # warm-up, unpadded (the library infers shapes)
        for module in modules:  # each virtual stage holds half the layers: half the time
            module.forward_s = size["forward_ms"] / 1e3 / (VIRTUAL_STAGES * m)
            module.backward_s = 2 * module.forward_s
        steps = []
        for _ in range(size["repeats"]):
            library_step(modules, library, rank, p, x, target)
            steps.append({"ops": [op for module in modules for op in module.ops]})
        results[("interleaved", m)] = steps
    return results


run.log(f"timing: T_f = {size['forward_ms']} ms per stage per step, {size['repeats']} timed steps per configuration")
timed = _dist.launch(timing_worker, STAGES)
if timed is None:  # another torchrun rank: rank 0 writes the record
    _dist.shutdown()
    raise SystemExit(0)

# %% [markdown]
# ## From timelines to bubble, in-flight activations and step time
#
# For one step: the span runs from the first operation on any stage to the last one on any stage;
# a stage's busy time is the sum of its padded F and B durations; its idle (bubble) fraction is
# 1 - busy/span. In-flight activations on a stage rise by one when a forward starts and fall by one
# when the matching backward ends; the peak is what the stage must hold in memory.

# %%
def step_ops(m_results, stage, step):
    return [Op(*op) for op in m_results[stage][step]["ops"]]


def span_of(ops_by_stage):
    return (min(op.start for ops in ops_by_stage for op in ops), max(op.end for ops in ops_by_stage for op in ops))


def forwards(ops):
    return sorted((op for op in ops if op.kind == "F"), key=lambda op: op.microbatch)


def backwards(ops):
    return sorted((op for op in ops if op.kind == "B"), key=lambda op: op.microbatch)


def peak_in_flight(ops):
    held = peak = 0
    for op in sorted(ops, key=lambda op: op.start):
        held += 1 if op.kind == "F" else -1
        peak = max(peak, held)
    return peak


def expected_peak(schedule, m, p, stage):
    return m if schedule == "gpipe" else min(m, p - stage)


def bubble_formula(m, p):
    return (p - 1) / (m + p - 1)


p = STAGES
analysis = {}
skews = []
for s in SCHEDULES:
    for m in size["microbatches"]:
        per_rank = [timed[rank][(s, m)] for rank in range(p)]
        t_f = size["forward_ms"] / 1e3 / m
        spans, idle_by_stage, busy_by_stage, math_fractions = [], [[] for _ in range(p)], [[] for _ in range(p)], []
        as_scheduled = causal = True
        for step in range(size["repeats"]):
            ops_by_stage = [step_ops(per_rank, stage, step) for stage in range(p)]
            first, last = span_of(ops_by_stage)
            spans.append(last - first)
            exits = [r[step]["barrier_exit"] for r in per_rank]
            skews.append(max(exits) - min(exits))
            causal &= all(later.start >= earlier.end
                          for stage in range(1, p)
                          for earlier, later in zip(forwards(ops_by_stage[stage - 1]), forwards(ops_by_stage[stage])))
            causal &= all(later.start >= earlier.end
                          for stage in range(p - 1)
                          for earlier, later in zip(backwards(ops_by_stage[stage + 1]), backwards(ops_by_stage[stage])))
            for stage, ops in enumerate(ops_by_stage):
                busy = sum(op.end - op.start for op in ops)
                busy_by_stage[stage].append(busy)
                idle_by_stage[stage].append(1 - busy / (last - first))
                math_fractions.extend(op.math_s / (t_f if op.kind == "F" else 2 * t_f) for op in ops)
                as_scheduled &= [op[:2] for op in ops] == schedule_order(s, m, p, stage)
        run.check(f"{s}.m{m}.clocks_agree", causal, "on the shared clock no stage started a microbatch's forward "
                  "(backward) before the previous (next) stage had finished it")
        run.check(f"{s}.m{m}.order", as_scheduled, f"on every stage in all {size['repeats']} steps the timeline's "
                  "(F/B, microbatch) sequence is the schedule's")
        median_step = sorted(range(size["repeats"]), key=lambda i: spans[i])[size["repeats"] // 2]
        stage_idle = [statistics.median(v) for v in idle_by_stage]
        peaks = [peak_in_flight(step_ops(per_rank, stage, median_step)) for stage in range(p)]
        expected = [expected_peak(s, m, p, stage) for stage in range(p)]
        saved_peaks = [per_rank[stage][median_step]["peak_saved_bytes"] for stage in range(p)]
        saved_per_microbatch = [step_ops(per_rank, stage, median_step)[0].saved_bytes for stage in range(p)]
        analysis[(s, m)] = {
            "step_s": statistics.median(spans), "ideal_s": (m + p - 1) * 3 * t_f, "t_f": t_f,
            "bubble": statistics.mean(stage_idle), "bubble_worst": max(stage_idle), "stage_idle": stage_idle,
            "busy_s": statistics.mean(statistics.median(v) for v in busy_by_stage),
            "peaks": peaks, "expected_peaks": expected, "saved_peaks": saved_peaks,
            "saved_per_microbatch": saved_per_microbatch, "median_step": median_step,
            "math_fractions": math_fractions,
            "sent_bytes": sum(r[0]["sent_bytes"] for r in per_rank),
            "messages": sum(r[0]["messages"] for r in per_rank),
            "written_bytes": None if per_rank[0][0]["written_bytes"] is None
            else statistics.median(sum(r[step]["written_bytes"] for r in per_rank) for step in range(size["repeats"])),
        }
        run.check(f"{s}.m{m}.peak_in_flight", peaks == expected,
                  f"peak microbatches in flight per stage {peaks}, expected {expected} "
                  f"({'m' if s == 'gpipe' else 'min(m, p - stage)'})")
        run.check(f"{s}.m{m}.peak_saved_bytes", saved_peaks == [e * b for e, b in zip(expected, saved_per_microbatch)],
                  f"peak activation bytes held per stage {saved_peaks} = peak in flight x "
                  f"{saved_per_microbatch[0]} bytes per microbatch")
        run.log(f"  {SCHEDULE_NAMES[s]:5s} m={m:2d}: step {statistics.median(spans) * 1e3:6.1f} ms "
                f"(ideal {analysis[(s, m)]['ideal_s'] * 1e3:6.1f}), bubble {analysis[(s, m)]['bubble']:.3f} "
                f"(formula {bubble_formula(m, p):.3f}), peak in flight {peaks}")

def interleaved_bubble_formula(m, p, v=VIRTUAL_STAGES):
    return (p - 1) / (v * m + p - 1)


interleaved = {}
for m in INTERLEAVED_MS:
    per_rank = [timed[rank][("interleaved", m)] for rank in range(p)]
    spans, idle_by_rank = [], [[] for _ in range(p)]
    for step in range(size["repeats"]):
        ops_by_rank = [step_ops(per_rank, rank, step) for rank in range(p)]
        first, last = span_of(ops_by_rank)
        spans.append(last - first)
        for rank, ops in enumerate(ops_by_rank):
            idle_by_rank[rank].append(1 - sum(op.end - op.start for op in ops) / (last - first))
    rank_idle = [statistics.median(v) for v in idle_by_rank]
    t_f = size["forward_ms"] / 1e3 / (VIRTUAL_STAGES * m)  # per virtual stage
    interleaved[m] = {"step_s": statistics.median(spans), "ideal_s": (VIRTUAL_STAGES * m + p - 1) * 3 * t_f,
                      "bubble": statistics.mean(rank_idle), "bubble_worst": max(rank_idle)}
    run.log(f"  interleaved 1F1B v={VIRTUAL_STAGES} m={m:2d}: step {interleaved[m]['step_s'] * 1e3:6.1f} ms "
            f"(ideal {interleaved[m]['ideal_s'] * 1e3:6.1f}), bubble {interleaved[m]['bubble']:.3f} "
            f"(formula {interleaved_bubble_formula(m, p):.3f})")

# %% [markdown]
# ## The bubble against (p - 1)/(m + p - 1)
#
# The formula assumes that a stage can start the moment its input exists. Here every hand-over
# also costs a send, a receive and a process wake-up, so the measured idle fraction sits above the
# formula, and that overhead matters more as m grows and each microbatch's work shrinks: the step
# time stops falling once the hand-overs cost as much as the bubble they remove. Interleaving
# divides each operation by v and multiplies the hand-overs by v, so it meets that limit sooner
# (and the library's schedule runtime adds its own per-operation Python work on top).

# %%
ms = size["microbatches"]
rows = []
for s in SCHEDULES:
    for m in ms:
        a = analysis[(s, m)]
        name = f"{s}.m{m}"
        run.metric(f"{name}.bubble", a["bubble"], "fraction",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: measured idle fraction of the step, mean over the {p} stages")
        run.metric(f"{name}.bubble_worst_stage", a["bubble_worst"], "fraction",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: measured idle fraction of the most idle stage")
        run.metric(f"{name}.step_ms", a["step_s"] * 1e3, "ms",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: one step, first operation to last on any stage (median)")
        run.metric(f"{name}.excess_ms", (a["step_s"] - a["ideal_s"]) * 1e3, "ms",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: step time above the ideal (m+p-1)(t_f+t_b)")
        rows.append([SCHEDULE_NAMES[s], m, round(bubble_formula(m, p), 3), round(a["bubble"], 3),
                     round(a["bubble_worst"], 3), round(a["step_s"] * 1e3, 1), round(a["ideal_s"] * 1e3, 1),
                     round((a["step_s"] - a["ideal_s"]) * 1e3, 1)])
interleaved_name = f"interleaved 1F1B, v={VIRTUAL_STAGES} (torch)"
for m, a in interleaved.items():
    name = f"interleaved.m{m}"
    run.metric(f"{name}.bubble", a["bubble"], "fraction",
               label=f"{interleaved_name}, m={m}: measured idle fraction, mean over the {p} devices")
    run.metric(f"{name}.bubble_worst_stage", a["bubble_worst"], "fraction",
               label=f"{interleaved_name}, m={m}: measured idle fraction of the most idle device")
    run.metric(f"{name}.step_ms", a["step_s"] * 1e3, "ms", label=f"{interleaved_name}, m={m}: one step (median)")
    run.metric(f"formula_interleaved.m{m}.bubble", interleaved_bubble_formula(m, p), "fraction",
               label=f"(p-1)/(vm+p-1) for p={p}, v={VIRTUAL_STAGES}, m={m}")
    rows.append([interleaved_name, m, round(interleaved_bubble_formula(m, p), 3), round(a["bubble"], 3),
                 round(a["bubble_worst"], 3), round(a["step_s"] * 1e3, 1), round(a["ideal_s"] * 1e3, 1),
                 round((a["step_s"] - a["ideal_s"]) * 1e3, 1)])
for m in ms:
    run.metric(f"formula.m{m}.bubble", bubble_formula(m, p), "fraction", label=f"(p-1)/(m+p-1) for p={p}, m={m}")
    run.metric(f"ideal.m{m}.step_ms", analysis[("gpipe", m)]["ideal_s"] * 1e3, "ms",
               label=f"m={m}: (m+p-1)(t_f+t_b) with the padded t_f = T_f/m and t_b = 2 t_f")
run.table("bubble", f"Bubble and step time, p = {p} stages, T_f = {size['forward_ms']} ms forward per stage per step "
          f"(median of {size['repeats']} steps)",
          ["schedule", "m", "formula (p-1)/(m+p-1); interleaved (p-1)/(vm+p-1)", "measured idle, mean of devices",
           "most idle device", "step (ms)", "ideal (ms)", "above ideal (ms)"], rows)
run.series("bubble_vs_m", f"Idle fraction vs microbatches, p = {p}", "microbatches m", "idle fraction of the step",
           {"formula (p-1)/(m+p-1)": (ms, [bubble_formula(m, p) for m in ms]),
            **{f"{SCHEDULE_NAMES[s]} measured": (ms, [analysis[(s, m)]["bubble"] for m in ms]) for s in SCHEDULES},
            **({f"formula, interleaved v={VIRTUAL_STAGES}": (INTERLEAVED_MS, [interleaved_bubble_formula(m, p)
                                                                             for m in INTERLEAVED_MS]),
                f"{interleaved_name} measured": (INTERLEAVED_MS, [interleaved[m]["bubble"] for m in INTERLEAVED_MS])}
               if INTERLEAVED_MS else {})},
           x_log=True)
run.series("step_time_vs_m", f"Step time vs microbatches, p = {p}, same total work per step", "microbatches m",
           "step time (ms)",
           {"ideal (m+p-1)(t_f+t_b)": (ms, [analysis[("gpipe", m)]["ideal_s"] * 1e3 for m in ms]),
            **{f"{SCHEDULE_NAMES[s]} measured": (ms, [analysis[(s, m)]["step_s"] * 1e3 for m in ms])
               for s in SCHEDULES},
            **({f"{interleaved_name} measured": (INTERLEAVED_MS, [interleaved[m]["step_s"] * 1e3
                                                                  for m in INTERLEAVED_MS])}
               if INTERLEAVED_MS else {})},
           hlines={"no bubble: 3 T_f": 3 * size["forward_ms"]}, x_log=True)
run.metric("stage.busy_ms", statistics.mean(analysis[(s, m)]["busy_s"] for s in SCHEDULES for m in ms) * 1e3, "ms",
           label="busy time of one stage per step (padded F + B), mean over all configurations; ideal 3 T_f")
all_math_fractions = [f for a in analysis.values() for f in a["math_fractions"]]
run.metric("pad.median_math_fraction", statistics.median(all_math_fractions), "fraction",
           label="share of a padded operation taken by the layer's real math, median over all timed operations")
run.metric("pad.max_math_fraction", max(all_math_fractions), "fraction",
           label="largest share of a padded operation taken by the layer's real math (above 1: the operation "
                 "overran its device time, e.g. the process waited for a core)")
run.metric("clock.barrier_skew_ms", statistics.median(skews) * 1e3, "ms",
           label="how far apart the ranks left the barrier before a step (median): the error a barrier-aligned clock "
                 "would have")

# %% [markdown]
# ## The timelines
#
# One step of each schedule at m = 8 (the plot: one line per stage, a low step while it runs a
# forward, a high step while it runs a backward, flat while idle; the text version below it: one
# column is half a forward, a character is the microbatch being processed, `.` is idle). GPipe's
# stages all run m forwards before any backward; 1F1B's last stage starts backwards after one
# forward, and the first stage runs p forwards before its first backward.

# %%
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def timeline_lines(ops_by_stage, origin):
    """Step-shaped lines, one per stage: y = stage while idle, +0.4 in a forward, +0.8 in a backward (ms on x)."""
    lines = {}
    end = max(op.end for ops in ops_by_stage for op in ops) - origin
    for stage, ops in enumerate(ops_by_stage):
        xs, ys = [0.0], [stage]
        for op in sorted(ops, key=lambda op: op.start):
            high = stage + (0.4 if op.kind == "F" else 0.8)
            t0, t1 = (op.start - origin) * 1e3, (op.end - origin) * 1e3
            xs += [t0, t0, t1, t1]
            ys += [stage, high, high, stage]
        xs.append(end * 1e3)
        ys.append(stage)
        lines[f"stage {stage}"] = (xs, ys)
    return lines


def timeline_text(title, ops_by_stage, origin, column_s):
    end = max(op.end for ops in ops_by_stage for op in ops) - origin
    n_columns = math.ceil(end / column_s)
    text = [title]
    for stage, ops in enumerate(ops_by_stage):
        cells = {"F": ["."] * n_columns, "B": ["."] * n_columns}
        for op in ops:
            for c in range(n_columns):
                if op.start <= origin + (c + 0.5) * column_s < op.end:
                    cells[op.kind][c] = DIGITS[op.microbatch]
        text.append(f"stage {stage}  forward  |{''.join(cells['F'])}|")
        text.append(f"{'':9}backward |{''.join(cells['B'])}|")
    return "\n".join(text)


texts = []
for s in SCHEDULES:
    a = analysis[(s, M_TIMELINE)]
    per_rank = [timed[rank][(s, M_TIMELINE)] for rank in range(p)]
    ops_by_stage = [step_ops(per_rank, stage, a["median_step"]) for stage in range(p)]
    origin, _ = span_of(ops_by_stage)
    run.series(f"timeline_{s}", f"{SCHEDULE_NAMES[s]} timeline, p={p}, m={M_TIMELINE}: low = forward, "
               "high = backward, flat = idle", "time in the step (ms)", "stage", timeline_lines(ops_by_stage, origin))
    texts.append(timeline_text(f"{SCHEDULE_NAMES[s]}, p={p}, m={M_TIMELINE}, step {a['step_s'] * 1e3:.0f} ms, "
                               f"one column = {a['t_f'] / 2 * 1e3:.2f} ms, digit = microbatch, '.' = idle",
                               ops_by_stage, origin, a["t_f"] / 2))
run.artifact("timeline", "\n\n".join(texts))

# %% [markdown]
# ## Activations in flight: the memory difference
#
# Same bubble, different memory. GPipe's stages each hold all m microbatches' activations at the
# turn from forwards to backwards; 1F1B's stage s holds at most min(m, p - s), however large m is.
# The count comes from the timelines; the bytes from autograd's saved tensors (here each
# microbatch saves the layer's input and its tanh output: 2 x rows x width x 4 bytes).

# %%
rows = []
for s in SCHEDULES:
    for m in ms:
        a = analysis[(s, m)]
        for stage in range(p):
            rows.append([SCHEDULE_NAMES[s], m, stage, a["peaks"][stage], a["expected_peaks"][stage],
                         round(a["saved_peaks"][stage] / 1024, 1), round(a["saved_per_microbatch"][stage] / 1024, 2)])
    a = analysis[(s, M_MAX)]
    for stage in (0, p - 1):
        run.metric(f"{s}.m{M_MAX}.peak_in_flight.stage{stage}", a["peaks"][stage], "microbatches",
                   label=f"{SCHEDULE_NAMES[s]}, m={M_MAX}: most microbatches whose forward ran and backward had not, "
                         f"stage {stage}")
        run.metric(f"{s}.m{M_MAX}.peak_activation_kib.stage{stage}", a["saved_peaks"][stage] / 1024, "KiB",
                   label=f"{SCHEDULE_NAMES[s]}, m={M_MAX}: peak bytes autograd held for backward, stage {stage}")
run.table("in_flight", "Peak activations in flight per stage (measured from the timeline) and the bytes autograd held",
          ["schedule", "m", "stage", "peak in flight", "expected", "peak saved (KiB)", "saved per microbatch (KiB)"],
          rows)
run.series("in_flight_vs_m", f"Peak microbatches in flight on stage 0 vs m, p = {p}", "microbatches m",
           "microbatches held", {f"{SCHEDULE_NAMES[s]} stage 0": (ms, [analysis[(s, m)]["peaks"][0] for m in ms])
                                 for s in SCHEDULES}, x_log=True)

# %% [markdown]
# ## Bytes between stages
#
# Each of the p - 1 boundaries carries the whole batch's activation forward and its gradient
# backward once per step: 2 (p - 1) x batch x width x 4 bytes, whatever m is (m only changes the
# number of messages, 2 (p - 1) m). Two measurements: the bytes this demo hands to `isend`
# (counted), and the bytes the ranks' processes wrote during the step (`wchar`), which adds gloo's
# per-message framing. (The loopback interface's counters in `/proc/net/dev` would add TCP/IP
# headers, but they count every program on the machine.)

# %%
formula_bytes = 2 * (p - 1) * size["batch"] * size["width"] * 4
rows = []
for s in SCHEDULES:
    for m in ms:
        a = analysis[(s, m)]
        written = a["written_bytes"]
        run.check(f"{s}.m{m}.p2p_bytes", a["sent_bytes"] == formula_bytes and a["messages"] == 2 * (p - 1) * m,
                  f"{a['sent_bytes']} bytes in {a['messages']} messages per step; formula {formula_bytes} bytes in "
                  f"{2 * (p - 1) * m} messages")
        if written is not None:
            run.check(f"{s}.m{m}.written_at_least_payload", written >= formula_bytes,
                      f"the ranks wrote {written:.0f} bytes in the step >= {formula_bytes} bytes of payload")
            run.metric(f"{s}.m{m}.written_kib_per_step", written / 1024, "KiB",
                       label=f"{SCHEDULE_NAMES[s]}, m={m}: bytes the ranks' processes wrote during one step "
                             "(all ranks)")
        rows.append([SCHEDULE_NAMES[s], m, a["messages"], round(a["sent_bytes"] / 1024, 1),
                     round(formula_bytes / 1024, 1),
                     None if written is None else round(written / 1024, 1),
                     None if written is None else round((written - formula_bytes) / a["messages"], 1)])
if analysis[(SCHEDULES[0], M_MAX)]["written_bytes"] is None:
    run.not_run("bytes written per rank", "/proc/self/io is not readable on this machine")
else:
    a = analysis[("gpipe", M_MAX)]
    run.metric(f"p2p.m{M_MAX}.framing_bytes_per_message", (a["written_bytes"] - formula_bytes) / a["messages"],
               "bytes", label=f"m={M_MAX}: bytes written beyond the payload, per message (gloo's framing)")
run.metric("p2p.formula_kib_per_step", formula_bytes / 1024, "KiB",
           label="2 (p-1) x batch x width x 4 bytes: activations forward + gradients backward across p-1 boundaries")
run.metric(f"p2p.m{M_MAX}.messages_per_step", analysis[("gpipe", M_MAX)]["messages"], "messages",
           label=f"m={M_MAX}: point-to-point sends per step, all ranks (2 (p-1) m)")
run.table("p2p", f"Bytes between stages per step, p = {p}, batch {size['batch']} x width {size['width']} float32",
          ["schedule", "m", "sends (counted)", "sent KiB (counted)", "formula KiB", "written KiB (measured)",
           "written beyond payload, bytes per message"], rows)

# %% [markdown]
# ## Beyond this demo
#
# Interleaving (measured above through the library) shrinks the bubble's share at the price of
# v times as many hand-overs, exactly the per-message overhead that shows at large m.
# Zero-bubble schedules go further by splitting each backward into its input-gradient and
# weight-gradient halves and filling the bubble with the latter (Qi et al.,
# [Zero Bubble Pipeline Parallelism](https://arxiv.org/abs/2401.10241)); the library has them too
# (`ScheduleInterleavedZeroBubble`), not measured here. In a real model the stages are rarely
# equal: the slowest stage sets the pace of every other one, which is why layers are assigned to
# stages by measured time, not by count.

# %%
run.save()
_dist.shutdown()
