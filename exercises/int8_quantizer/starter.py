"""Symmetric per-channel INT8 quantization of a weight tensor, and its inverse.

Implement both functions. Grade them: ``python -m exercises int8_quantizer``.
Policy (the grader tests each rule):
- symmetric: zero point 0, codes in [-127, 127] (never -128, so the range is symmetric);
- one scale per slice along ``axis``: scale = max|w| over the slice / 127, as float32, so the
  largest-magnitude element of each channel maps to +-127;
- round to nearest, so |w - dequantize(quantize(w))| <= scale / 2 elementwise;
- an all-zero channel gets scale 1.0 and codes 0 (never a division by zero);
- NaN or inf anywhere in w raises ValueError (a quantizer must not hide them).
"""

import torch


def quantize_per_channel(w: torch.Tensor, axis: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): q int8 with w's shape, scale float32 of shape (w.shape[axis],)."""
    raise NotImplementedError


def dequantize_per_channel(q: torch.Tensor, scale: torch.Tensor, axis: int = 0) -> torch.Tensor:
    """float32 tensor q * scale, the scale broadcast along ``axis``."""
    raise NotImplementedError
