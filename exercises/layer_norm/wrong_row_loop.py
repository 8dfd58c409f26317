"""Wrong on purpose: correct numbers, one row at a time in a Python loop (far slower than one batched op)."""

import torch


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
    rows = x.reshape(-1, x.shape[-1]).float()
    y = torch.empty_like(rows)
    mean = torch.empty(rows.shape[0])
    rstd = torch.empty(rows.shape[0])
    for i in range(rows.shape[0]):
        m = rows[i].mean()
        c = rows[i] - m
        r = torch.rsqrt((c * c).mean() + eps)
        y[i] = c * r * weight.float() + bias.float()
        mean[i], rstd[i] = m, r
    lead = x.shape[:-1]
    return y.reshape(x.shape).to(x.dtype), mean.reshape(lead).to(x.device), rstd.reshape(lead).to(x.device)
