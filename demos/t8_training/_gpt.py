"""The small GPT that every T8 demo trains, its synthetic data, and the memory accounting they share.

The model is written the way Korthikanti et al. analyse a transformer layer ("Reducing Activation
Recomputation in Large Transformer Models", https://arxiv.org/abs/2205.05198): pre-norm, explicit
attention (QK^T, softmax, dropout, times V), an output projection with dropout, a 4h GELU MLP with
dropout. So the tensors autograd saves for backward are exactly the ones that paper counts, and the
formula in ``activation_bytes_per_layer`` can be checked against a measurement, tensor by tensor.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 512
    seq: int = 64
    width: int = 128
    heads: int = 4
    layers: int = 4
    dropout: float = 0.1


class Layer(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.heads, self.p = c.heads, c.dropout
        self.ln1 = nn.LayerNorm(c.width)
        self.qkv = nn.Linear(c.width, 3 * c.width)
        self.proj = nn.Linear(c.width, c.width)
        self.ln2 = nn.LayerNorm(c.width)
        self.fc1 = nn.Linear(c.width, 4 * c.width)
        self.fc2 = nn.Linear(4 * c.width, c.width)
        self.register_buffer("causal", torch.ones(c.seq, c.seq, dtype=torch.bool).tril().logical_not(),
                             persistent=False)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(h // self.heads))  # a scalar multiply saves nothing
        attn = F.dropout(scores.masked_fill(self.causal[:s, :s], float("-inf")).softmax(-1), self.p, self.training)
        y = (attn @ v).transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(y), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


class GPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab, c.width)
        self.pos = nn.Parameter(torch.zeros(c.seq, c.width))
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.width)
        self.layer_hook = None  # called as layer_hook(i) before layer i runs (the accounting tags tensors with it)
        self.checkpoint_every = 0  # 0: none; k: recompute every k-th layer in backward (torch.utils.checkpoint)
        self.checkpoint_context = None  # a context_fn for checkpoint (selective activation checkpointing)

    def forward(self, tokens, targets):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for i, layer in enumerate(self.layers):
            if self.layer_hook:
                self.layer_hook(i)
            if self.checkpoint_every and i % self.checkpoint_every == 0:
                extra = {"context_fn": self.checkpoint_context} if self.checkpoint_context else {}
                x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False, **extra)
            else:
                x = layer(x)
        if self.layer_hook:
            self.layer_hook(None)
        logits = self.ln_f(x) @ self.tok.weight.T  # tied embedding
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def make_gpt(c: GPTConfig, seed: int = 0, device="cpu", dtype=torch.float32) -> GPT:
    torch.manual_seed(seed)
    model = GPT(c)
    with torch.no_grad():
        model.pos.normal_(0, 0.02)
        for name, p in model.named_parameters():
            if p.dim() == 2 and name != "pos":
                p.normal_(0, 0.02)
    return model.to(device=device, dtype=dtype)


def batch(c: GPTConfig, batch_size: int, step: int, seed: int = 0, device="cpu"):
    """Synthetic next-token data with learnable structure: token t+1 = (a * token t + b) mod vocab, a and b
    fixed per sequence, so the loss falls as the model learns. Step k's batch depends only on (seed, k)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    a = torch.randint(1, 8, (batch_size, 1), generator=g)
    b = torch.randint(0, c.vocab, (batch_size, 1), generator=g)
    start = torch.randint(0, c.vocab, (batch_size, 1), generator=g)
    seq = [start]
    for _ in range(c.seq):
        seq.append((a * seq[-1] + b) % c.vocab)
    tokens = torch.cat(seq, 1)
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def parameter_count(c: GPTConfig) -> int:
    """12 L h^2 + 13 L h (biases and LayerNorms) + V h (tied embedding) + s h (positions) + 2 h (final norm)."""
    h = c.width
    return 12 * c.layers * h * h + 13 * c.layers * h + c.vocab * h + c.seq * h + 2 * h


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, act_bytes: int, mask_bytes: int = 1) -> float:
    """Bytes one layer saves for backward (Korthikanti et al., section 4.1), for any element size.

    Elements kept per layer: LayerNorm inputs 2sbh, QKV input sbh, Q K V 3sbh, softmax output and
    dropout output 2as^2b, projection input sbh, fc1 input sbh, GELU input 4sbh, fc2 input 4sbh
    (16 sbh + 2 a s^2 b elements), plus dropout masks of one byte: 2 sbh + a s^2 b.
    With act_bytes = 2 this is the paper's s b h (34 + 5 a s / h)."""
    return act_bytes * (16 * s * b * h + 2 * a * s * s * b) + mask_bytes * (2 * s * b * h + a * s * s * b)


def model_state_bytes_per_param(kind: str) -> dict:
    """Bytes per parameter kept across steps, by part. 'fp32': weights, gradients, Adam m and v in fp32.
    'mixed' (ZeRO paper, section 3.1): 16-bit weights and gradients, fp32 master weights, m and v."""
    if kind == "fp32":
        return {"weights": 4, "grads": 4, "optimizer": 8}
    if kind == "mixed":
        return {"weights": 2, "grads": 2, "optimizer": 12}
    raise ValueError(kind)


class SavedTensors:
    """Counts the storages autograd saves for backward (saved-tensor hooks), once each, tagged by the layer
    that was running. Parameters (and storages given in ``exclude``) are counted apart."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        # a 2-D saved tensor shaped like a weight but not a parameter: autocast's low-precision weight copy
        self.weight_shapes = {tuple(sorted(p.shape)) for p in model.parameters() if p.dim() == 2}
        self.seen: dict[int, tuple[object, int, str]] = {}  # storage ptr -> (tag, bytes, dtype)
        self.tag = "embedding"

    def _set(self, i):
        self.tag = "head" if i is None else i

    def _pack(self, t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in self.params and ptr not in self.seen:
            tag = "weight_copy" if t.dim() == 2 and tuple(sorted(t.shape)) in self.weight_shapes else self.tag
            self.seen[ptr] = (tag, storage.nbytes(), str(t.dtype).removeprefix("torch."))
        return t

    @contextlib.contextmanager
    def recording(self):
        self.model.layer_hook = self._set
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                yield self
        finally:
            self.model.layer_hook = None

    def bytes(self, tag=None) -> int:
        return sum(n for t, n, _ in self.seen.values() if tag is None or t == tag)

    def per_layer(self) -> list[int]:
        return [self.bytes(i) for i in range(len(self.model.layers))]


def tensor_bytes(tensors) -> int:
    """Bytes of distinct storages among ``tensors``."""
    seen = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def dropout_mask_bytes(dtype, device) -> int:
    """Bytes per element of the mask dropout saves for backward on this device: CUDA's fused kernel keeps a
    1-byte boolean mask (what Korthikanti et al. assume); the CPU path keeps a mask in the input's dtype."""
    saved = []
    x = torch.ones(64, device=device, dtype=dtype, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        F.dropout(x * 1.0, 0.5, True)
    return max(t.element_size() for t in saved)
