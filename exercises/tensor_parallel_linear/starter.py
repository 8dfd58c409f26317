"""Column- and row-parallel linear layers (Megatron-style tensor parallelism), forward and backward.

Implement both modules. The process group is already initialized (gloo on a CPU); every rank gets
the same full weight and keeps only its shard. Grade them: ``python -m exercises tensor_parallel_linear``.
Weights are (out_features, in_features), as in torch.nn.functional.linear(x, weight, bias).
"""

import torch
import torch.distributed as dist


class ColumnParallelLinear(torch.nn.Module):
    """Shards the OUTPUT features: rank r keeps rows r*out/W .. (r+1)*out/W of weight and of bias.

    forward(x): x is the full input (..., in); returns this rank's slice (..., out/W), or the full
    (..., out) when gather_output=True. Backward: x.grad must be the full input gradient on every rank.
    out_features not divisible by the world size: raise ValueError.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, gather_output: bool = False):
        super().__init__()
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class RowParallelLinear(torch.nn.Module):
    """Shards the INPUT features: rank r keeps columns r*in/W .. (r+1)*in/W of weight; bias is whole.

    forward(x): x is this rank's input slice (..., in/W) when input_is_parallel=True, else the full
    (..., in) (take your slice; x.grad must still come back full). Returns the full (..., out) on every
    rank, the bias added once. in_features not divisible by the world size: raise ValueError.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, input_is_parallel: bool = True):
        super().__init__()
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
