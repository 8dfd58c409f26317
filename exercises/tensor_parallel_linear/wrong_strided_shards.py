"""Wrong on purpose: the column-parallel layer takes every W-th output row (a strided shard), which the gather and the row-parallel layer do not expect."""

import torch
import torch.distributed as dist
import torch.nn.functional as F


class _CopyToShards(torch.autograd.Function):
    """Forward: the identity (every rank has the full input). Backward: sum the partial input gradients."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class _SumShards(torch.autograd.Function):
    """Forward: sum the partial outputs over ranks. Backward: the identity (the sum's gradient is 1 per term)."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class _GatherLastDim(torch.autograd.Function):
    """Forward: concatenate every rank's slice along the last dim. Backward: keep this rank's slice."""

    @staticmethod
    def forward(ctx, x):
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(dist.get_world_size(), dim=-1)[dist.get_rank()].contiguous()


class _ScatterLastDim(torch.autograd.Function):
    """Forward: keep this rank's slice of the last dim. Backward: gather the slices' gradients back."""

    @staticmethod
    def forward(ctx, x):
        return x.chunk(dist.get_world_size(), dim=-1)[dist.get_rank()].contiguous()

    @staticmethod
    def backward(ctx, grad):
        return _GatherLastDim.forward(None, grad)


def _shard(t, dim):
    world = dist.get_world_size()
    if t.shape[dim] % world:
        raise ValueError(f"dimension {dim} of size {t.shape[dim]} is not divisible by the world size {world}")
    return t.chunk(world, dim=dim)[dist.get_rank()].clone()


class ColumnParallelLinear(torch.nn.Module):
    def __init__(self, weight, bias, gather_output=False):
        super().__init__()
        _shard(weight, 0)
        W, r = dist.get_world_size(), dist.get_rank()
        self.weight = torch.nn.Parameter(weight[r::W].clone())
        self.bias = torch.nn.Parameter(bias[r::W].clone()) if bias is not None else None
        self.gather_output = gather_output

    def forward(self, x):
        y = F.linear(_CopyToShards.apply(x), self.weight, self.bias)
        return _GatherLastDim.apply(y) if self.gather_output else y


class RowParallelLinear(torch.nn.Module):
    def __init__(self, weight, bias, input_is_parallel=True):
        super().__init__()
        self.weight = torch.nn.Parameter(_shard(weight, 1))  # (out, in/W): only this rank's columns
        self.bias = torch.nn.Parameter(bias.clone()) if bias is not None else None  # whole, on every rank
        self.input_is_parallel = input_is_parallel

    def forward(self, x):
        if not self.input_is_parallel:
            x = _ScatterLastDim.apply(x)
        y = _SumShards.apply(F.linear(x, self.weight))  # partial products summed over ranks
        return y + self.bias if self.bias is not None else y  # the bias once, after the sum
