"""Wrong on purpose: one scale for the whole tensor (repeated per channel), so an outlier channel crushes the others."""

import torch


def quantize_per_channel(w, axis=0):
    if not torch.isfinite(w).all():
        raise ValueError("w holds NaN or inf")
    amax = w.float().abs().max() if w.numel() else torch.tensor(0.0)
    s = amax / 127.0 if amax > 0 else torch.tensor(1.0)
    q = torch.round(w.float() / s).clamp(-127, 127).to(torch.int8)
    return q, s.expand(w.shape[axis % w.ndim]).clone()


def dequantize_per_channel(q, scale, axis=0):
    shape = [1] * q.ndim
    shape[axis % q.ndim] = -1
    return q.float() * scale.view(shape)
