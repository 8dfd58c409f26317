"""Wrong on purpose: right sums, but every rank sends its whole tensor to every other rank ((W - 1) copies, not a ring)."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1 or tensor.numel() == 0:
        return tensor
    mine = tensor.clone()
    others = [torch.empty_like(tensor) for _ in range(world)]
    reqs = []
    for peer in range(world):
        if peer != rank:
            reqs += [dist.isend(mine, peer), dist.irecv(others[peer], peer)]
    for r in reqs:
        r.wait()
    for peer in range(world):
        if peer != rank:
            tensor += others[peer]
    return tensor
