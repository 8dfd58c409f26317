"""One decode step of attention with a preallocated KV cache (multi-head, grouped-query or multi-query).

Implement ``new_cache`` and ``decode_step``. Grade them: ``python -m exercises kv_cache_decode``.
Weights (no biases): wq (H*Dh, D), wk (Hkv*Dh, D), wv (Hkv*Dh, D), wo (D, H*Dh), as in y = x @ w.T.
Query head h reads key/value head h // (H // Hkv) (grouped-query attention; Hkv divides H).
"""

import torch


def new_cache(batch: int, n_kv_heads: int, max_len: int, head_dim: int, dtype=torch.float32, device="cpu") -> dict:
    """{"k": (batch, n_kv_heads, max_len, head_dim), "v": same, "len": 0}, allocated once."""
    raise NotImplementedError


def decode_step(x: torch.Tensor, params: dict, cache: dict) -> torch.Tensor:
    """Attend the newest token to itself and every cached token; return its output (batch, D).

    x: (batch, D), the newest token's hidden state.
    params: {"wq", "wk", "wv", "wo": tensors, "n_heads": H, "n_kv_heads": Hkv}.
    Write the new key and value at position cache["len"] of the preallocated buffers (in place, no
    torch.cat), then increment cache["len"]. A full cache (len == max_len) raises IndexError.
    The result must equal causal attention recomputed over the whole sequence, at this position.
    """
    raise NotImplementedError
