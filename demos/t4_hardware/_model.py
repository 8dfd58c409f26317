"""Shared plumbing of the T4 demos: one small MLP (synthetic weights), its ONNX export, ONNX Runtime sessions,
and the per-frame enhancement conv net of the video demo.

The MLP writes its layers as ``x @ W + b`` with explicit parameters, so the ONNX exporter emits MatMul
nodes (an ``nn.Linear`` on a 2-D input becomes Gemm, which ONNX Runtime's INT4 weight-only quantizer
does not rewrite).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from demos.harness.threads import onnxruntime_options
from records.paths import CACHE_DIR

CACHE = CACHE_DIR / "t4_hardware"  # exported files and compiled packages (ignored by git)

# (input width, hidden width, classes) per size: fp32 weights of about 0.1, 34 and 134 MB
MLP_SIZES = {"tiny": (128, 256, 64), "small": (1024, 2048, 1000), "full": (2048, 4096, 1000)}


class MLP(torch.nn.Module):
    """Two GELU hidden layers and a classifier head: x @ W1 + b1 -> GELU -> @ W2 + b2 -> GELU -> @ W3 + b3."""

    def __init__(self, d_in: int, hidden: int, classes: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        shapes = [(d_in, hidden), (hidden, hidden), (hidden, classes)]
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(a, b, generator=g) / a**0.5) for a, b in shapes])
        self.biases = torch.nn.ParameterList(
            [torch.nn.Parameter(0.1 * torch.randn(b, generator=g)) for _, b in shapes])

    def forward(self, x):
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ w + b
            if i < len(self.weights) - 1:
                x = F.gelu(x)
        return x

    def weight_count(self) -> int:
        return sum(w.numel() for w in self.weights)

    def flops_per_sample(self) -> int:
        """2 FLOPs (multiply, add) per weight per input row; biases and GELU are negligible."""
        return 2 * self.weight_count()


def make_mlp(size_tuple, seed: int = 0) -> MLP:
    return MLP(*size_tuple, seed=seed).eval()


def mlp_key(size: str, *extra: str) -> str:
    """A short hash naming cached build outputs of the MLP: its code, the size, torch's version and ``extra``."""
    import hashlib
    import inspect

    text = inspect.getsource(MLP) + inspect.getsource(make_mlp) + repr(MLP_SIZES[size]) + torch.__version__
    return hashlib.sha256((text + " ".join(extra)).encode()).hexdigest()[:12]


def exported_mlp(size: str, dtype: torch.dtype) -> Path:
    """The MLP of this size exported to ONNX in ``dtype``, cached under .cache/ (exporting takes longer than
    anything the demos then measure on it; the file depends only on the code, the size and the versions)."""
    import onnx

    path = CACHE / f"mlp_{size}_{str(dtype).removeprefix('torch.')}_{mlp_key(size, onnx.__version__)}.onnx"
    if not path.exists():
        shape = MLP_SIZES[size]
        partial = path.with_suffix(".partial")
        export_onnx(make_mlp(shape).to(dtype), torch.randn(2, shape[0]).to(dtype), partial)
        partial.replace(path)  # atomic: a run killed mid-export leaves no half-written file under the final name
    return path


def export_onnx(model: torch.nn.Module, example: torch.Tensor, path: Path) -> Path:
    """torch.onnx.export (torch.export underneath) with a symbolic batch axis, saved with its weights inside."""
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (example,), dynamo=True, input_names=["x"], output_names=["y"],
                                    dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=4096)},),
                                    verbose=False)
    proto = program.model_proto
    del proto.graph.value_info[:]  # the exporter's intermediate shapes confuse the quantizers' shape inference
    onnx.save(proto, str(path))
    return path


def ort_session(path: Path, threads: int):
    """An ONNX Runtime CPU session with all graph optimizations and the run's thread count."""
    import onnxruntime as ort

    options = onnxruntime_options(ort, threads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class Enhancer(torch.nn.Module):
    """A tiny per-frame enhancement net: three 3x3 convolutions (3 -> c -> c -> 3) and a residual, so it
    predicts a correction to the frame, as denoisers and sharpeners do."""

    def __init__(self, channels: int = 16, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.convs = torch.nn.ModuleList([torch.nn.Conv2d(a, b, 3, padding=1)
                                          for a, b in [(3, channels), (channels, channels), (channels, 3)]])
        with torch.no_grad():
            for conv in self.convs:
                conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * (2 / conv.weight[0].numel()) ** 0.5)
                conv.bias.zero_()
            self.convs[-1].weight.mul_(0.1)

    def forward(self, x):
        y = x
        for i, conv in enumerate(self.convs):
            y = conv(y)
            if i < len(self.convs) - 1:
                y = F.relu(y)
        return x + y

    def flops_per_pixel(self) -> int:
        """2 x 9 x C_in x C_out per conv per output pixel (bias, ReLU and residual are negligible)."""
        return sum(2 * 9 * c.in_channels * c.out_channels for c in self.convs)

    def activation_bytes_per_pixel(self, itemsize: int) -> int:
        """Bytes each pixel moves through memory if every layer reads its input and writes its output once."""
        return sum((c.in_channels + c.out_channels) * itemsize for c in self.convs)
