"""The model, data and training step shared by data_parallel.py and ddp_buckets.py: a stack of square
Linear layers with ReLU, trained with Adam in fp32 on a mean-squared error, and the single-process
reference every data-parallel variant must reproduce."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from demos.t7_parallelism import _dist

LR = 1e-3
RTOL, ATOL = 1e-4, 1e-5  # fp32; only the order of gradient sums differs. ATOL is 1% of one Adam step (LR)


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


def close_to(flat: torch.Tensor, reference: torch.Tensor) -> tuple[bool, float]:
    """Whether flat parameters are within the tolerance of the reference, and the largest |error|."""
    err = (flat - reference).abs()
    return bool((err <= ATOL + RTOL * reference.abs()).all()), float(err.max())


def c10d(counts, op: str) -> int:
    """Calls of ``c10d::op`` in a profiler count (what the framework issued)."""
    return counts.get(f"c10d::{op}", 0)


def count_collectives(step, rank: int) -> dict | None:
    """Rank 0 runs step() under the profiler and counts its collectives; the other ranks just run it."""
    if rank != 0:
        step()
        return None
    return dict(_dist.collective_calls(step))


# -- what a rank measures (see data_parallel.py) --------------------------------------------------

def module_of(wrapped):
    return wrapped.module if isinstance(wrapped, DistributedDataParallel) else wrapped


def optimizer_state(optimizer) -> list[torch.Tensor]:
    inner = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return [v for state in inner.state.values() for v in state.values() if torch.is_tensor(v)]


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


def bytes_sent(step, tries: int = 3) -> dict:
    """_dist's byte meter on every rank, then the ranks' sum and the busiest rank (all-reduces after it)."""
    metered = _dist.bytes_sent(step, tries)
    mine = min(metered["written"])
    totals = torch.tensor([mine, mine], dtype=torch.float64)
    dist.all_reduce(totals[:1], op=dist.ReduceOp.SUM)
    dist.all_reduce(totals[1:], op=dist.ReduceOp.MAX)
    return {"total": int(totals[0]), "max_rank": int(totals[1]), "lo": min(metered["loopback"])}
