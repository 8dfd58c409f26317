"""The two decoder blocks of the transformer_shapes demo, in plain PyTorch: a GPT-2-small block (LayerNorm, biases,
multi-head attention, a 4d GELU MLP) and a Llama-style block (RMSNorm, no biases, grouped-query attention, SwiGLU),
one configurable Block, and a whole Model for the parameter counts. Attention can record every intermediate tensor
(``trace``) and expand the KV heads the right way (``repeat_interleave``) or the buggy way (``repeat``)."""

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    d: int
    heads: int
    kv_heads: int
    ff: int
    llama: bool  # True: RMSNorm, no biases, SwiGLU; False: LayerNorm, biases, GELU (GPT-2)
    layers: int = 1
    vocab: int = 0
    positions: int = 0  # learned position embeddings (GPT-2); 0 for rotary (no parameters)
    tied: bool = False


def swiglu_width(d, multiple_of=256):
    """Llama's rule: 2/3 of 4d (so SwiGLU's three matrices hold about as much as GELU's two), rounded up."""
    return multiple_of * math.ceil(int(2 * 4 * d / 3) / multiple_of)


GPT2 = Config(d=768, heads=12, kv_heads=12, ff=4 * 768, llama=False, layers=12, vocab=50257, positions=1024, tied=True)
LLAMA_GQA = Config(d=4096, heads=32, kv_heads=8, ff=swiglu_width(4096), llama=True, layers=32, vocab=32000)
LLAMA2_7B = replace(LLAMA_GQA, kv_heads=32)  # Llama-2-7B itself uses full multi-head attention


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c, self.hd = c, c.d // c.heads
        bias = not c.llama
        self.q = nn.Linear(c.d, c.heads * self.hd, bias=bias)
        self.k = nn.Linear(c.d, c.kv_heads * self.hd, bias=bias)
        self.v = nn.Linear(c.d, c.kv_heads * self.hd, bias=bias)
        self.o = nn.Linear(c.heads * self.hd, c.d, bias=bias)

    def forward(self, x, trace=None, expand="repeat_interleave"):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.c.heads, self.hd).transpose(1, 2)      # (b, heads, s, hd)
        k = self.k(x).view(b, s, self.c.kv_heads, self.hd).transpose(1, 2)   # (b, kv_heads, s, hd)
        v = self.v(x).view(b, s, self.c.kv_heads, self.hd).transpose(1, 2)
        g = self.c.heads // self.c.kv_heads
        if expand == "repeat_interleave":  # query head h reads KV head h // g (the right expansion)
            ke, ve = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        else:  # tiling: query head h reads KV head h % kv_heads (a bug: same shapes, wrong pairing)
            ke, ve = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
        scores = q @ ke.transpose(-2, -1) / math.sqrt(self.hd)               # (b, heads, s, s)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        p = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        out = p @ ve                                                          # (b, heads, s, hd)
        merged = out.transpose(1, 2).reshape(b, s, self.c.heads * self.hd)
        if trace is not None:
            trace.update({"q": q, "k (cached)": k, "v (cached)": v, "k, v after expansion": ke,
                          "scores = q k^T / sqrt(hd)": scores, "softmax": p, "softmax @ v": out,
                          "heads merged": merged})
        return self.o(merged)


class MLP(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.llama = c.llama
        self.up = nn.Linear(c.d, c.ff, bias=not c.llama)
        self.gate = nn.Linear(c.d, c.ff, bias=False) if c.llama else None
        self.down = nn.Linear(c.ff, c.d, bias=not c.llama)

    def forward(self, x, trace=None):
        up = self.up(x)
        h = F.silu(self.gate(x)) * up if self.llama else F.gelu(up, approximate="tanh")
        down = self.down(h)
        if trace is not None:
            trace.update({"mlp up": up, ("mlp silu(gate) * up" if self.llama else "mlp gelu(up)"): h, "mlp down": down})
        return down


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        norm = (lambda: nn.RMSNorm(c.d, eps=1e-5)) if c.llama else (lambda: nn.LayerNorm(c.d))
        self.norm1, self.attn, self.norm2, self.mlp = norm(), Attention(c), norm(), MLP(c)

    def forward(self, x, trace=None, expand="repeat_interleave"):
        if trace is not None:
            trace["x"] = x
        x = x + self.attn(self.norm1(x), trace, expand)
        return x + self.mlp(self.norm2(x), trace)


class Model(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.embed = nn.Embedding(c.vocab, c.d)
        self.pos = nn.Embedding(c.positions, c.d) if c.positions else None
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = nn.RMSNorm(c.d, eps=1e-5) if c.llama else nn.LayerNorm(c.d)
        self.head = nn.Linear(c.d, c.vocab, bias=False)
        if c.tied:
            self.head.weight = self.embed.weight  # one matrix, counted once by parameters()

    def forward(self, tokens):
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def n_params(module):
    return sum(p.numel() for p in module.parameters())
