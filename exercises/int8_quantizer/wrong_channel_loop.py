"""Wrong on purpose: right codes, one Python iteration per channel (slow for a real weight matrix)."""

import torch


def quantize_per_channel(w, axis=0):
    if not torch.isfinite(w).all():
        raise ValueError("w holds NaN or inf")
    wt = w.float().movedim(axis, 0)
    q = torch.empty(wt.shape, dtype=torch.int8)
    scale = torch.empty(wt.shape[0])
    for c in range(wt.shape[0]):
        amax = wt[c].abs().max() if wt[c].numel() else torch.tensor(0.0)
        scale[c] = amax / 127.0 if amax > 0 else 1.0
        q[c] = torch.round(wt[c] / scale[c]).clamp(-127, 127).to(torch.int8)
    return q.movedim(0, axis), scale


def dequantize_per_channel(q, scale, axis=0):
    shape = [1] * q.ndim
    shape[axis % q.ndim] = -1
    return q.float() * scale.view(shape)
