"""Wrong on purpose: the unbiased variance (divide by N - 1, torch.var's default); LayerNorm divides by N."""

import torch


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    var = xf.var(dim=-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    y = (xf - mean) * rstd * weight.float() + bias.float()
    return y.to(x.dtype), mean.squeeze(-1), rstd.squeeze(-1)
