"""LayerNorm forward that also returns the statistics a backward pass needs.

Implement ``layer_norm(x, weight, bias, eps)``: normalize over the last dimension. Use torch ops or a
Triton kernel. Grade it: ``python -m exercises layer_norm``.
"""

import torch


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
    """Return (y, mean, rstd).

    y:    x's shape and dtype; (x - mean) * rstd * weight + bias.
    mean: float32, shape x.shape[:-1]; the mean of each row.
    rstd: float32, shape x.shape[:-1]; 1 / sqrt(biased variance + eps).
    Statistics are computed in float32 whatever x's dtype; x is not modified.
    """
    raise NotImplementedError
