"""The simulated stage clock of pipeline_parallel.py: one accelerator per pipeline stage, stood in for by
a CPU process whose forward and backward are padded to a fixed device time, with a timeline of every
operation and a count of the activation bytes autograd holds for the backward. Also the stages' layers
and batch (the same seeds everywhere), one training step of a schedule with real point-to-point sends
between the stages (``pipeline_step``), and the torch.distributed.pipelining schedules over them.

Why padded: with fewer cores than ranks, stages doing real CPU work would take turns on the cores and
the measured idle time would be the operating system's scheduling, not the pipeline's. A sleeping
rank leaves the cores to the others, so `pad_to_device_time` is "this stage's accelerator is busy
for t seconds".
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from demos.t7_parallelism._dist import bytes_written_by_this_process


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


def library_schedule(rank, p, schedule, m, width, virtual_stages=2):
    """This rank's stage module(s) and a torch.distributed.pipelining schedule over them."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    if schedule == "interleaved":  # rank r holds virtual stages r, r + p, ...
        modules = [PaddedStage(make_stage_layer(rank + k * p, width)) for k in range(virtual_stages)]
        stages = [PipelineStage(module, rank + k * p, virtual_stages * p, torch.device("cpu"))
                  for k, module in enumerate(modules)]
        return modules, ScheduleInterleaved1F1B(stages, m, loss_fn=F.mse_loss)
    modules = [PaddedStage(make_stage_layer(rank, width))]
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


def torch_pipelining_step(rank, p, schedule, m, batch, width, virtual_stages=2):
    """One checked step through a torch.distributed.pipelining schedule (after a first one, which also
    infers the stages' shapes): this rank's gradients, the loss and output (last rank), its op order."""
    modules, library = library_schedule(rank, p, schedule, m, width, virtual_stages)
    x, target = make_batch(batch, width)
    library_step(modules, library, rank, p, x, target)
    loss, output = library_step(modules, library, rank, p, x, target)
    return {"grads": [flat_grads(module.layer) for module in modules], "loss": loss, "output": output,
            "ops": [op[:2] for op in modules[0].ops]}


def reference_step(n_layers, batch, width):
    """The unsplit model: all the stages' layers on the whole batch, in float64."""
    layers = [make_stage_layer(s, width).double() for s in range(n_layers)]
    x, target = (t.double() for t in make_batch(batch, width))
    h = x
    for layer in layers:
        h = torch.tanh(layer(h))
    loss = F.mse_loss(h, target)
    loss.backward()
    return {"loss": loss.detach(), "output": h.detach(), "grads": [flat_grads(layer) for layer in layers]}


def bubble_formula(m, p, v=1):
    """The idle fraction of a pipeline of p equal stages with m microbatches (v virtual stages each)."""
    return (p - 1) / (v * m + p - 1)


def record_steps(stage_module: PaddedStage, step, repeats: int) -> list[dict]:
    """``repeats`` padded steps, each after a barrier: the stage's timeline (``ops``), when this rank left the
    barrier, the activation bytes it held at most, what ``step()`` reports it sent (bytes, messages), and
    the bytes this process wrote during the step (``wchar`` of /proc/self/io; None where unreadable)."""
    steps = []
    for _ in range(repeats):
        stage_module.layer.zero_grad(set_to_none=True)
        stage_module.new_step()
        dist.barrier()
        barrier_exit = time.perf_counter()
        written_before = bytes_written_by_this_process()
        sent_bytes, messages = step()
        written_after = bytes_written_by_this_process()
        steps.append({"ops": stage_module.ops, "barrier_exit": barrier_exit,
                      "peak_saved_bytes": stage_module.peak_saved_bytes, "sent_bytes": sent_bytes,
                      "messages": messages,
                      "written_bytes": None if written_before is None else written_after - written_before})
    return steps
