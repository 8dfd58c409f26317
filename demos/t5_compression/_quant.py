"""Plain-PyTorch quantization used by the T5 demos: symmetric integer weights (per tensor or per
output channel), affine unsigned activations calibrated by an observer, fake quantization with a
straight-through estimator, and the MLP run with quantized weights and activations.

Written out by hand so every rounding step is visible and testable; torchao and ONNX Runtime are
used beside it (in ``ptq``) for real INT8 kernels and the deployment view.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def qmax(bits: int) -> int:
    return 2 ** (bits - 1) - 1  # symmetric signed range [-qmax, qmax]: 127 for INT8, 7 for INT4


def weight_scale(w: torch.Tensor, bits: int, per_channel: bool) -> torch.Tensor:
    """max|w| / qmax, per output channel (row) or one for the tensor; shaped to broadcast against w."""
    amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().amax().reshape(1, 1)
    return amax.clamp(min=1e-12) / qmax(bits)


def quantize_weight(w: torch.Tensor, bits: int, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(integer codes as int8, scale): w ~= codes * scale."""
    scale = weight_scale(w, bits, per_channel)
    return torch.round(w / scale).clamp(-qmax(bits), qmax(bits)).to(torch.int8), scale


def fake_quant_weight(w: torch.Tensor, bits: int, per_channel: bool) -> torch.Tensor:
    """Quantize then dequantize, with a straight-through gradient: the forward sees the rounded weight,
    the backward treats rounding as the identity (d out / d w = 1), so the float weight keeps learning.
    The scale is computed from the current weight and treated as a constant (detached)."""
    scale = weight_scale(w.detach(), bits, per_channel)
    rounded = torch.round(w / scale).clamp(-qmax(bits), qmax(bits)) * scale
    return w + (rounded - w).detach()


# -- activations: affine uint8 with a calibrated range ---------------------------------------------

def observe(samples: torch.Tensor, observer: str, percentile: float = 99.99) -> tuple[float, float]:
    """The (low, high) range an observer picks from calibration activations (all channels pooled: a
    per-tensor activation scale). min-max keeps every value; percentile clips the rarest ones."""
    flat = samples.flatten().double()
    if observer == "minmax":
        return float(flat.min()), float(flat.max())
    if observer == "percentile":
        q = torch.quantile(flat[torch.randperm(len(flat), generator=torch.Generator().manual_seed(0))[:2**24]],
                           torch.tensor([1 - percentile / 100, percentile / 100], dtype=torch.float64))
        return float(q[0]), float(q[1])
    raise ValueError(f"unknown observer {observer!r}")


def act_params(low: float, high: float, bits: int = 8) -> tuple[float, int]:
    """(scale, zero_point) of an unsigned affine code in [0, 2^bits - 1] covering [low, high] (and 0)."""
    low, high = min(low, 0.0), max(high, 0.0)
    levels = 2 ** bits - 1
    scale = max(high - low, 1e-12) / levels
    return scale, int(round(-low / scale))


def fake_quant_act(x: torch.Tensor, scale: float, zero_point: int, bits: int = 8) -> torch.Tensor:
    codes = torch.clamp(torch.round(x / scale) + zero_point, 0, 2 ** bits - 1)
    return (codes - zero_point) * scale


def layer_inputs(model, x: torch.Tensor) -> list[torch.Tensor]:
    """The input of each linear layer of the MLP for a batch x (what activation observers watch)."""
    inputs = []
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            inputs.append(x)
            x = layer(x)
            if i < len(model.layers) - 1:
                x = F.relu(x)
    return inputs


def calibrate(model, x_calib: torch.Tensor, observer: str, bits: int = 8) -> list[tuple[float, int]]:
    return [act_params(*observe(a, observer), bits=bits) for a in layer_inputs(model, x_calib)]


@torch.no_grad()
def run_quantized(model, x: torch.Tensor, w_bits: int | None, per_channel: bool,
                  act: list[tuple[float, int]] | None = None, act_bits: int = 8) -> torch.Tensor:
    """The MLP with fake-quantized weights (w_bits None: float weights) and, when ``act`` holds one
    (scale, zero_point) per layer, fake-quantized layer inputs: the same numbers an integer kernel
    produces, computed in float32."""
    for i, layer in enumerate(model.layers):
        w = layer.weight
        if w_bits is not None:
            codes, scale = quantize_weight(w, w_bits, per_channel)
            w = codes.float() * scale
        if act is not None:
            x = fake_quant_act(x, *act[i], bits=act_bits)
        x = F.linear(x, w, layer.bias)
        if i < len(model.layers) - 1:
            x = F.relu(x)
    return x


@torch.no_grad()
def run_integer(model, x: torch.Tensor, per_channel: bool, act: list[tuple[float, int]]) -> torch.Tensor:
    """The same W8A8 MLP computed the way an integer kernel does it: uint8 activation codes minus the
    zero point, times int8 weight codes, summed exactly in int64 (int32 in hardware), then one
    rescale per output (activation scale x weight scale) and the float bias. A reference for
    ``run_quantized``, not a fast path."""
    for i, layer in enumerate(model.layers):
        codes, w_scale = quantize_weight(layer.weight, 8, per_channel)
        a_scale, zp = act[i]
        a_codes = torch.clamp(torch.round(x / a_scale) + zp, 0, 255).to(torch.int64) - zp
        acc = a_codes @ codes.to(torch.int64).T  # exact integer dot products
        x = acc.double() * (a_scale * w_scale.double().reshape(1, -1)) + layer.bias.double()
        x = x.float()
        if i < len(model.layers) - 1:
            x = F.relu(x)
    return x


def with_outlier_channel(model, layer: int = 0, channel: int = 0, factor: float = 100.0):
    """The same function with one outlier row: output channel ``channel`` of ``layer`` (weight row and
    bias) multiplied by ``factor`` and the next layer's matching input column divided by it. ReLU
    commutes with a positive scale, so the model's outputs are unchanged in exact arithmetic; only
    the weights' ranges differ. (Trained large models grow such channels on their own.)"""
    import copy
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.layers[layer].weight[channel] *= factor
        model.layers[layer].bias[channel] *= factor
        model.layers[layer + 1].weight[:, channel] /= factor
    return model
