"""The MLP that tensor_parallel.py splits: the single-process model, one seeded problem that every rank
and the reference share, and the small DTensor plumbing (waiting for results still in flight)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def reference_step(weights, x, grad_out):
    """The single-process model's output and gradients (input and every parameter) for one step."""
    model = MLP(**weights)
    x = x.clone().requires_grad_(True)
    y = forward_backward(model, x, grad_out).detach()
    return y, {"input": x.grad, "w1": model.up.weight.grad, "b1": model.up.bias.grad,
               "w2": model.down.weight.grad, "b2": model.down.bias.grad}


def single_process_step(shape, dtype, device):
    """The single-process model's training step (p = 1) on a seeded problem of ``shape``, as a callable."""
    weights, x, grad_out = random_problem(shape, dtype, device, seed=1)
    model = MLP(**weights)
    x.requires_grad_(True)
    return lambda: forward_backward(model, x, grad_out)


def waited(tensor):
    """DTensor hands back some results as AsyncCollectiveTensor, whose collective may still be in
    flight (the sequence-parallel output, the input gradient); an op on it waits, a copy may not."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor  # imports Triton: after start()

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


TOLERANCE = {"rtol": 1e-9, "atol": 1e-9}
SHARD_DIM = {"w1": 0, "b1": 0, "w2": 1}  # dimension along which the ranks' gradient shards concatenate


def check_ranks(run, p, results, reference_y, reference_grads):
    """Every rank against the single-process float64 model (see tensor_parallel.py for what and why)."""
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
