"""The small classifier every T5 demo compresses: an MLP trained here on scikit-learn's bundled
8x8 digits (1,797 images shipped inside the package; nothing is downloaded), seeded and cached.

Not a demo itself (the leading underscore keeps it out of the demo catalog); the demos import it,
so the source digest of their records covers this file too.

- **Data:** ``digits()`` scales the 64 pixels (0..16) to [0, 1] and splits the images once, with a
  fixed seed and stratified by class: 1,197 for training (calibration samples come from these)
  and 600 held out for every accuracy on the page.
- **Model:** ``MLP(hidden, depth)``: 64 -> hidden (ReLU) -> ... -> 10, plain ``nn.Linear`` layers.
- **Training:** ``fit`` runs Adam on shuffled mini-batches with an optional loss (distillation),
  an optional mask (pruning) and an optional weight transform (fake quantization for QAT).
  ``trained(hidden, seed, ...)`` trains a model or loads it from ``.cache/models/``, keyed by a hash
  of this file, the settings and the torch version, written atomically so demos side by side never
  read half a file.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from records import atomic
from records.paths import CACHE_DIR

MODEL_CACHE = CACHE_DIR / "models"
SPLIT_SEED, N_TEST = 0, 600


def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_test, y_test): float32 pixels in [0, 1], int64 labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(data.data, data.target, test_size=N_TEST, random_state=SPLIT_SEED,
                                              stratify=data.target)
    to_x = lambda a: torch.tensor(a, dtype=torch.float32) / 16.0  # noqa: E731
    return to_x(x_tr), torch.tensor(y_tr), to_x(x_te), torch.tensor(y_te)


class MLP(nn.Module):
    def __init__(self, hidden: int, depth: int = 2, n_in: int = 64, n_out: int = 10):
        super().__init__()
        widths = [n_in] + [hidden] * depth + [n_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def accuracy(model_or_fn, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model_or_fn(x).argmax(-1) == y).float().mean())


def fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, seed: int, lr: float = 3e-3,
        batch: int = 64, loss_fn=None, masks: dict | None = None, weight_fn=None) -> dict:
    """Adam on shuffled mini-batches; returns {"train_s", "steps"}.

    ``loss_fn(logits, x_batch, y_batch)`` replaces cross-entropy (distillation). ``masks`` maps a
    parameter name to a 0/1 tensor re-applied after every step (pruned weights stay zero).
    ``weight_fn(name, w)`` is applied to every weight matrix in the forward pass (fake quantization):
    the optimizer updates the float weights, the forward sees the transformed ones."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    started, steps = time.perf_counter(), 0
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            logits = forward_with(model, x[idx], weight_fn) if weight_fn else model(x[idx])
            loss = loss_fn(logits, x[idx], y[idx]) if loss_fn else F.cross_entropy(logits, y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
            if masks:
                with torch.no_grad():
                    for name, p in model.named_parameters():
                        if name in masks:
                            p.mul_(masks[name])
    model.eval()
    return {"train_s": time.perf_counter() - started, "steps": steps, "epochs": epochs}


def forward_with(model: MLP, x: torch.Tensor, weight_fn) -> torch.Tensor:
    """The MLP's forward with every weight matrix passed through ``weight_fn(index, weight)`` first."""
    for i, layer in enumerate(model.layers):
        x = F.linear(x, weight_fn(i, layer.weight), layer.bias)
        if i < len(model.layers) - 1:
            x = F.relu(x)
    return x


def _cache_path(tag: str, settings: dict) -> Path:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(repr(sorted(settings.items())).encode())
    h.update(f"torch {torch.__version__.split('+')[0]}".encode())
    return MODEL_CACHE / f"t5-{tag}-{h.hexdigest()[:16]}.pt"


def trained(hidden: int, seed: int, epochs: int, depth: int = 2, log=print) -> tuple[MLP, dict]:
    """An MLP trained from scratch with cross-entropy on the digits training split (or loaded from
    the cache): (model in eval mode, info with train_s, held-out accuracy, params, loaded_from_cache)."""
    settings = {"hidden": hidden, "depth": depth, "seed": seed, "epochs": epochs}
    path = _cache_path(f"h{hidden}-d{depth}-s{seed}", settings)
    x_tr, y_tr, x_te, y_te = digits()
    model = MLP(hidden, depth)
    if path.is_file():
        saved = torch.load(path, weights_only=False)
        model.load_state_dict(saved["state"])
        info = {**saved["info"], "loaded_from_cache": True}
    else:
        torch.manual_seed(seed)
        model = MLP(hidden, depth)
        info = fit(model, x_tr, y_tr, epochs, seed)
        info.update(params=n_params(model), test_acc=accuracy(model, x_te, y_te))
        atomic.write_bytes_via(path, lambda tmp: torch.save({"state": model.state_dict(), "info": info}, tmp))
        info = {**info, "loaded_from_cache": False}
        log(f"  trained MLP hidden={hidden} depth={depth} seed={seed}: {info['train_s']:.2f} s, "
            f"held-out accuracy {100 * info['test_acc']:.1f}%")
    return model.eval(), info
