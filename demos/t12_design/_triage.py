"""Helpers for the bottleneck-triage demo: the training loss (with optional activation checkpointing), the
bytes a step's saved activations hold, how many ops or kernels a call dispatches, and the bound rule."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint


def lm_loss(model, tokens: torch.Tensor, targets: torch.Tensor, ckpt: bool = False) -> torch.Tensor:
    """The TinyLM forward (no cache) and its next-token loss; with ``ckpt`` each block's activations are
    dropped in the forward pass and recomputed in the backward pass (torch.utils.checkpoint)."""
    t = tokens.shape[1]
    cos, sin = model.cos[:t], model.sin[:t]
    x = model.embed(tokens)
    for i, block in enumerate(model.blocks):
        if ckpt:
            x = checkpoint(block, x, cos, sin, None, i, 0, use_reentrant=False)
        else:
            x = block(x, cos, sin, None, i, 0)
    logits = F.linear(model.norm(x), model.embed.weight)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def saved_activation_bytes(fn, model) -> int:
    """Bytes of the distinct tensors autograd saves for the backward pass while fn() runs its forward, the
    model's own parameters and buffers left out (they are model state, held whether or not a step runs)."""
    state = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in state:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def dispatched_ops(fn, gpu: bool) -> int:
    """What one call of fn() dispatches: on a GPU the kernels (and copies) it ran on the device, on a CPU the
    top-level ATen ops (an op called by another op is part of its parent's work, not a new dispatch)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities) as prof:
        fn()
        if gpu:
            torch.cuda.synchronize()
    events = prof.events()
    if gpu:
        return sum(e.device_type == torch.autograd.DeviceType.CUDA for e in events)
    return sum(e.name.startswith("aten::") and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))
               for e in events)


def triage(step_s: float, flops: float, nbytes: float, n_ops: int, peak_flops: float, bandwidth: float,
           per_op_s: float) -> dict:
    """Each resource's lower bound on the step, as a fraction of the measured step time, and the bound.

    compute: FLOPs at the matmul peak; memory: bytes at the copy rate; overhead: ops at the cost of dispatching
    one trivial op. A compute or memory fraction above 1 would mean a ceiling below what the step achieved.
    The rule: compute or memory when that share is at least 0.5 (the larger of the two if both are); else
    overhead when the op-count share is the largest of the three; else "mixed": no single resource explains
    the step (small matmuls running below the yardstick, per-op cost and bytes all contribute)."""
    parts = {"compute": flops / peak_flops / step_s, "memory": nbytes / bandwidth / step_s,
             "overhead": n_ops * per_op_s / step_s}
    if max(parts["compute"], parts["memory"]) >= 0.5:
        return {**parts, "bound": "compute" if parts["compute"] >= parts["memory"] else "memory"}
    if parts["overhead"] >= max(parts["compute"], parts["memory"]):
        return {**parts, "bound": "overhead"}
    return {**parts, "bound": "mixed"}
