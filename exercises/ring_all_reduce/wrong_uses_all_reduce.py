"""Wrong on purpose: calls the collective the exercise asks you to build."""

import torch.distributed as dist


def ring_all_reduce(tensor):
    dist.all_reduce(tensor)
    return tensor
