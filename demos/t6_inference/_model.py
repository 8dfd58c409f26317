"""The small language model that every T6 demo measures: a decoder-only transformer with an explicit
KV cache, a byte-level tokenizer, a corpus that ships with Python, and brief cached training.

Not a demo itself (the leading underscore keeps it out of the demo catalog); the demos import it,
so the source digest of their records covers this file too.

- **Tokenizer:** bytes. The vocabulary is the 256 byte values; no file to download or train.
- **Corpus:** the source files of a fixed list of standard-library modules, read from this
  Python's own stdlib folder at run time, in a fixed order (Python code with docstrings and
  comments). One 4 KiB piece in twenty is held out: prompts come from there, never from
  training text.
- **Model:** pre-norm blocks (RMSNorm, attention with rotary position embeddings and grouped-query
  attention, a GELU MLP), tied input/output embeddings. ``forward(tokens, cache)`` runs a prefill
  (many tokens) or a decode step (one token) against a preallocated ``KVCache``;
  ``decode_static`` is the same decode step with every shape fixed, for CUDA-graph capture.
- **Training:** ``trained_models(device, size)`` trains a target and a much smaller draft model
  on the same bytes, briefly, and caches their weights under ``.cache/models/`` keyed by a hash of
  this file, the configs, the corpus and the device kind, so the demos share one training run.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from records import atomic
from records.paths import CACHE_DIR

MODEL_CACHE = CACHE_DIR / "models"

# -- tokenizer and corpus ------------------------------------------------------------------------

CORPUS_MODULES = (
    "argparse", "base64", "bisect", "calendar", "collections", "colorsys", "configparser", "contextlib", "copy",
    "csv", "dataclasses", "datetime", "difflib", "enum", "fnmatch", "fractions", "functools", "glob", "gzip",
    "heapq", "hmac", "inspect", "ipaddress", "json/decoder", "json/encoder", "logging", "numbers", "operator",
    "optparse", "pathlib", "pprint", "queue", "random", "shlex", "shutil", "statistics", "string", "textwrap",
    "threading", "tokenize", "traceback", "typing", "uuid", "warnings", "weakref", "zipfile",
)
HELD_OUT_PIECE, HELD_OUT_EVERY = 4096, 20  # 5% held out, in 4 KiB pieces


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def corpus_bytes() -> bytes:
    """The stdlib modules' source, concatenated in CORPUS_MODULES order (a module may be a package)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for name in CORPUS_MODULES:
        path = root / f"{name}.py"
        if not path.is_file():
            path = root / name / "__init__.py"
        if path.is_file():  # a module missing from some Python version is skipped, and the hash says so
            parts.append(f"# ---- {name} ----\n".encode() + path.read_bytes())
    return b"\n".join(parts)


def corpus_split() -> tuple[torch.Tensor, torch.Tensor, str]:
    """(training bytes, held-out bytes, short hash of the corpus) as uint8 tensors.

    The corpus is cut into 4 KiB pieces and every twentieth piece is held out, so the held-out 5%
    is spread over every module instead of being the last module alone."""
    data = corpus_bytes()
    pieces = torch.frombuffer(bytearray(data), dtype=torch.uint8).split(HELD_OUT_PIECE)
    held = [i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 for i in range(len(pieces))]
    train = torch.cat([p for p, h in zip(pieces, held) if not h])
    held_out = torch.cat([p for p, h in zip(pieces, held) if h])
    return train, held_out, hashlib.sha256(data).hexdigest()[:16]


def held_out_prompts(n: int, length: int, seed: int = 1) -> torch.Tensor:
    """n prompts of ``length`` bytes from held-out text, each starting at a line start: (n, length) long."""
    _, held, _ = corpus_split()
    starts = ((held[:len(held) - length - 1] == ord("\n")).nonzero().flatten() + 1).tolist()
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randperm(len(starts), generator=generator)[:n].sort().values
    return torch.stack([held[starts[i]:starts[i] + length].long() for i in picks.tolist()])


# -- the model -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int  # < n_heads: grouped-query attention (each K/V head serves n_heads/n_kv_heads queries)
    max_len: int  # rotary tables and cache capacity limit
    vocab: int = 256
    mlp_ratio: int = 4

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def kv_cache_bytes(self, batch: int, tokens: int, bytes_per_element: int) -> int:
        """The formula: layers x 2 (K and V) x KV heads x head_dim x tokens x bytes, per sequence in the batch."""
        return batch * self.n_layers * 2 * self.n_kv_heads * self.head_dim * tokens * bytes_per_element


class KVCache:
    """Preallocated keys and values for every layer: (batch, kv_heads, capacity, head_dim) each.

    ``length`` is how many positions are filled. Rolling back (speculative decoding) is just
    lowering ``length``: the stale entries past it are overwritten by the next write.
    """

    def __init__(self, cfg: Config, batch: int, capacity: int, device, dtype):
        if capacity > cfg.max_len:
            raise ValueError(f"cache capacity {capacity} exceeds the model's max_len {cfg.max_len}")
        shape = (batch, cfg.n_kv_heads, capacity, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.capacity = capacity
        self.length = 0

    def allocated_bytes(self) -> int:
        """Bytes of storage actually allocated for the cache tensors (measured from the tensors)."""
        return sum(t.untyped_storage().nbytes() for t in self.k + self.v)


def rotary_tables(cfg: Config, device) -> tuple[torch.Tensor, torch.Tensor]:
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.outer(torch.arange(cfg.max_len, dtype=torch.float64), inv_freq)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (i, i + head_dim/2) by a position-dependent angle. x: (B, heads, T, head_dim)."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.out = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)

    def project(self, x, cos, sin):
        batch, t, _ = x.shape
        cfg = self.cfg
        q = self.q(x).view(batch, t, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(batch, t, 2, cfg.n_kv_heads, cfg.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def forward(self, x, cos, sin, cache: KVCache | None, layer: int, start: int):
        batch, t, _ = x.shape
        q, k, v = self.project(x, cos, sin)
        if cache is not None:
            cache.k[layer][:, :, start:start + t] = k
            cache.v[layer][:, :, start:start + t] = v
            k, v = cache.k[layer][:, :, :start + t], cache.v[layer][:, :, :start + t]
        if t == 1:  # one new query attends to every cached key: no mask needed
            y = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        elif start == 0:  # a prefill from position 0: the square causal mask
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # several new queries after a cached prefix (speculative verification): query i sees keys <= start + i
            mask = torch.arange(start + t, device=x.device) <= torch.arange(start, start + t, device=x.device)[:, None]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.out(y.transpose(1, 2).reshape(batch, t, -1))

    def forward_static(self, x, cos, sin, cache: KVCache, layer: int, position: torch.Tensor):
        """One decode step with fixed shapes: write K/V at ``position`` (a 1-element tensor), attend over
        the whole capacity with a mask, so the same kernels run at every position (CUDA-graph friendly)."""
        batch = x.shape[0]
        q, k, v = self.project(x, cos, sin)
        cache.k[layer].index_copy_(2, position, k)
        cache.v[layer].index_copy_(2, position, v)
        mask = (torch.arange(cache.capacity, device=x.device) <= position).view(1, -1)  # (1 query, capacity keys)
        y = F.scaled_dot_product_attention(q, cache.k[layer], cache.v[layer], attn_mask=mask, enable_gqa=True)
        return self.out(y.transpose(1, 2).reshape(batch, 1, -1))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.norm2 = nn.RMSNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=False)
        self.fc2 = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=False)

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(self.norm2(x))))

    def forward(self, x, cos, sin, cache, layer, start):
        x = x + self.attn(self.norm1(x), cos, sin, cache, layer, start)
        return x + self.mlp(x)

    def forward_static(self, x, cos, sin, cache, layer, position):
        x = x + self.attn.forward_static(self.norm1(x), cos, sin, cache, layer, position)
        return x + self.mlp(x)


class TinyLM(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model)
        cos, sin = rotary_tables(cfg, "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        nn.init.normal_(self.embed.weight, std=0.02)
        for name, p in self.named_parameters():
            if name.endswith("out.weight") or name.endswith("fc2.weight"):  # scaled residual init (GPT-2)
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layers))

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) for tokens (B, T). With a cache, the tokens continue at ``cache.length``
        and their keys/values are written into it; without one, this is a plain causal forward."""
        start = cache.length if cache is not None else 0
        t = tokens.shape[1]
        if start + t > self.cfg.max_len:
            raise ValueError(f"sequence of {start + t} tokens exceeds max_len {self.cfg.max_len}")
        cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, cache, i, start)
        if cache is not None:
            cache.length = start + t
        return F.linear(self.norm(x), self.embed.weight)

    def decode_static(self, tokens: torch.Tensor, cache: KVCache, position: torch.Tensor) -> torch.Tensor:
        """One decode step (tokens (B, 1)) at ``position`` (a 1-element long tensor), every shape fixed."""
        cos, sin = self.cos[position], self.sin[position]
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            x = block.forward_static(x, cos, sin, cache, i, position)
        return F.linear(self.norm(x), self.embed.weight)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        return KVCache(self.cfg, batch, capacity, self.embed.weight.device, self.embed.weight.dtype)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


@torch.no_grad()
def generate_greedy(model: TinyLM, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy decoding with the KV cache: prefill the prompt, then one token per step. (B, P + n_new)."""
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + n_new)
    logits = model(prompt, cache)
    out = [prompt]
    for i in range(n_new):
        out.append(logits[:, -1:].argmax(-1))
        if i < n_new - 1:
            logits = model(out[-1], cache)
    return torch.cat(out, dim=1)


# -- brief training, cached ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch: int
    seq: int
    lr: float
    warmup: int = 20


MODELS = {  # size -> {"target"/"draft": (model Config, TrainConfig)}
    "tiny": {
        "target": (Config(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, max_len=256), TrainConfig(150, 8, 64, 5e-3)),
        "draft": (Config(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, max_len=256), TrainConfig(150, 8, 64, 5e-3)),
    },
    "small": {
        "target": (Config(d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, max_len=512), TrainConfig(400, 16, 128, 3e-3)),
        "draft": (Config(d_model=64, n_layers=1, n_heads=2, n_kv_heads=1, max_len=512), TrainConfig(400, 16, 128, 5e-3)),
    },
    "full": {  # trained on the GPU; still brief
        "target": (Config(d_model=1024, n_layers=12, n_heads=16, n_kv_heads=4, max_len=4096),
                   TrainConfig(1500, 32, 512, 6e-4, warmup=100)),
        "draft": (Config(d_model=256, n_layers=2, n_heads=4, n_kv_heads=2, max_len=4096),
                  TrainConfig(1500, 32, 512, 2e-3, warmup=100)),
    },
}


def train(cfg: Config, tc: TrainConfig, data: torch.Tensor, held: torch.Tensor, device, seed: int) -> tuple[TinyLM, dict]:
    """AdamW on random windows of the training bytes, warm-up then cosine decay. Returns (model, info).
    It runs with the thread count the calling demo declared to the harness (one, for the T6 demos)."""
    torch.manual_seed(seed)
    model = TinyLM(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, 0.95), weight_decay=0.1)
    generator = torch.Generator().manual_seed(seed)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=torch.device(device).type == "cuda")
    started, losses = time.perf_counter(), []
    for step in range(tc.steps):
        lr = tc.lr * min(1.0, (step + 1) / tc.warmup) * 0.5 * (1 + math.cos(math.pi * step / tc.steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(data) - tc.seq - 1, (tc.batch,), generator=generator)
        window = torch.stack([data[s:s + tc.seq + 1] for s in starts.tolist()]).long().to(device)
        with autocast:
            logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    train_s = time.perf_counter() - started
    model.eval()
    with torch.no_grad(), autocast:  # held-out loss on fixed windows
        n = min(len(held) - 1, 16 * tc.seq) // tc.seq * tc.seq
        windows = held[: n + 1]
        x = windows[:-1].view(-1, tc.seq).long().to(device)
        y = windows[1:].view(-1, tc.seq).long().to(device)
        held_loss = float(F.cross_entropy(model(x).float().reshape(-1, cfg.vocab), y.reshape(-1)))
    return model, {
        "params": model.n_params(), "train_s": train_s, "steps": tc.steps, "tokens_seen": tc.steps * tc.batch * tc.seq,
        "first_loss": losses[0], "final_loss": sum(losses[-10:]) / len(losses[-10:]), "held_out_loss": held_loss,
        "held_out_bits_per_byte": held_loss / math.log(2),
    }


def _cache_key(size: str, device_kind: str, corpus_hash: str) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(repr({k: (asdict(c), asdict(t)) for k, (c, t) in MODELS[size].items()}).encode())
    h.update(f"{size}|{device_kind}|{corpus_hash}|torch {torch.__version__.split('+')[0]}".encode())
    return h.hexdigest()[:20]


def trained_models(device, size: str, log=print) -> tuple[TinyLM, TinyLM, dict]:
    """(target, draft, info) in fp32 and eval mode on ``device``, trained here or loaded from the cache.

    ``info`` holds each model's config, parameter count, training time and losses, the corpus hash,
    and whether this call trained or loaded them.
    """
    device = torch.device(device)
    data, held, corpus_hash = corpus_split()
    path = MODEL_CACHE / f"{size}-{_cache_key(size, device.type, corpus_hash)}.pt"
    models, info = {}, {"corpus_hash": corpus_hash, "corpus_bytes": len(data) + len(held), "cache_file": path.name}
    if path.is_file():
        saved = torch.load(path, map_location=device, weights_only=False)
        for role in ("target", "draft"):
            model = TinyLM(Config(**saved[role]["config"])).to(device)
            model.load_state_dict(saved[role]["state"])
            models[role] = model.eval()
            info[role] = saved[role]["info"]
        info["loaded_from_cache"] = True
        log(f"models: loaded from .cache/models/{path.name}")
    else:
        saved = {}
        for seed, role in enumerate(("target", "draft")):
            cfg, tc = MODELS[size][role]
            log(f"models: training the {role} ({cfg}) for {tc.steps} steps on {len(data)} bytes of stdlib source ...")
            model, role_info = train(cfg, tc, data, held, device, seed=seed)
            models[role], info[role] = model, {**role_info, "config": asdict(cfg)}
            saved[role] = {"config": asdict(cfg), "state": model.state_dict(), "info": info[role]}
            log(f"  {role}: {role_info['params'] / 1e6:.2f} M parameters, {role_info['train_s']:.1f} s, "
                f"loss {role_info['first_loss']:.2f} -> {role_info['final_loss']:.2f}, held-out "
                f"{role_info['held_out_bits_per_byte']:.2f} bits/byte")
        atomic.write_bytes_via(path, lambda tmp: torch.save(saved, tmp))  # demos side by side never read half a file
        info["loaded_from_cache"] = False
    for role in ("target", "draft"):
        info[role]["config"] = asdict(models[role].cfg)
    return models["target"], models["draft"], info
