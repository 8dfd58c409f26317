"""The one small transformer block that the T2 and T3 demos take through every stage.

A pre-norm decoder block, written the way a model file writes it: LayerNorm, a fused QKV
projection, causal scaled-dot-product attention, an output projection and a residual add, then
LayerNorm, a 4x MLP with GELU and a second residual add. The demos import it from here so that
the graph, the ONNX file, the generated kernels and the JAX lowering all describe the same code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {  # (batch, sequence length, model width, heads) per size preset
    "tiny": (2, 16, 32, 2),
    "small": (4, 64, 128, 4),
    "full": (16, 1024, 1024, 16),
}


class Block(nn.Module):
    def __init__(self, width: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, mlp_ratio * width)
        self.fc2 = nn.Linear(mlp_ratio * width, width)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        qkv = self.qkv(self.ln1(x)).view(batch, seq, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, seq, head_dim)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, width))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x)
        return x + self.mlp(x)


def make_block(width: int, heads: int, device, dtype=torch.float32, seed: int = 0) -> Block:
    """The block with fixed random weights (LayerNorm affine parameters perturbed, so they matter)."""
    generator = torch.Generator().manual_seed(seed)
    block = Block(width, heads)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * (0.1 if p.dim() == 1 else p.shape[-1] ** -0.5))
        block.ln1.weight.add_(1.0)
        block.ln2.weight.add_(1.0)
    return block.to(device=device, dtype=dtype).eval()


def reference_forward(block: Block, x: torch.Tensor) -> torch.Tensor:
    """The same block in float64 on CPU, attention written out (no SDPA): the independent reference.

    Computed one sequence at a time, so the float64 attention scores of a GPU-sized batch never
    need to exist all at once."""
    p = {name: t.detach().to("cpu", torch.float64) for name, t in block.state_dict().items()}
    return torch.cat([_reference_one(p, block.heads, row) for row in x.detach().to("cpu", torch.float64).split(1)])


def _reference_one(p: dict, heads: int, x: torch.Tensor) -> torch.Tensor:
    batch, seq, width = x.shape
    head_dim = width // heads
    h = F.layer_norm(x, (width,), p["ln1.weight"], p["ln1.bias"], 1e-5) @ p["qkv.weight"].T + p["qkv.bias"]
    q, k, v = h.view(batch, seq, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-2, -1)) / head_dim**0.5
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    y = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
    x = x + y.transpose(1, 2).reshape(batch, seq, width) @ p["proj.weight"].T + p["proj.bias"]
    h = F.layer_norm(x, (width,), p["ln2.weight"], p["ln2.bias"], 1e-5) @ p["fc1.weight"].T + p["fc1.bias"]
    return x + F.gelu(h) @ p["fc2.weight"].T + p["fc2.bias"]
