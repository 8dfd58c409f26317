"""Reference solution: LayerNorm forward with two-pass statistics in float32."""

import torch


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    centered = xf - mean  # two passes: subtract the mean first, then square (no cancellation)
    var = (centered * centered).mean(dim=-1, keepdim=True)  # biased: divide by N, as LayerNorm does
    rstd = torch.rsqrt(var + eps)  # eps inside the square root
    y = centered * rstd * weight.float() + bias.float()
    return y.to(x.dtype), mean.squeeze(-1), rstd.squeeze(-1)
