"""Wrong on purpose: truncates toward zero instead of rounding, so the error reaches a whole scale step."""

import math

import torch


def _along(scale, ndim, axis):
    shape = [1] * ndim
    shape[axis] = -1
    return scale.view(shape)  # broadcastable against w: one scale per slice along axis


def quantize_per_channel(w, axis=0):
    if not torch.isfinite(w).all():
        raise ValueError("w holds NaN or inf; refusing to quantize it")
    axis = axis % w.ndim
    wf = w.float()
    per_channel = math.prod(w.shape) // w.shape[axis] if w.shape[axis] else 0
    flat = wf.abs().movedim(axis, 0).reshape(w.shape[axis], per_channel)  # one row per channel
    amax = flat.amax(dim=1) if per_channel else flat.new_zeros(w.shape[axis])
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))  # an all-zero channel: scale 1, codes 0
    q = (wf / _along(scale, w.ndim, axis)).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_per_channel(q, scale, axis=0):
    return q.float() * _along(scale, q.ndim, axis % q.ndim)
