"""Wrong on purpose: right numbers, but each step builds a new cache with torch.cat (a full copy of the cache per token)."""

import math

import torch


def new_cache(batch, n_kv_heads, max_len, head_dim, dtype=torch.float32, device="cpu"):
    shape = (batch, n_kv_heads, max_len, head_dim)
    return {"k": torch.zeros(shape, dtype=dtype, device=device),
            "v": torch.zeros(shape, dtype=dtype, device=device), "len": 0}


def decode_step(x, params, cache):
    H, Hkv = params["n_heads"], params["n_kv_heads"]
    B = x.shape[0]
    Dh = cache["k"].shape[-1]
    t = cache["len"]
    if t >= cache["k"].shape[2]:
        raise IndexError("KV cache full")
    q = (x @ params["wq"].T).view(B, H, 1, Dh)
    for name, w in (("k", params["wk"]), ("v", params["wv"])):
        new = (x @ w.T).view(B, Hkv, 1, Dh)
        cache[name] = torch.cat([cache[name][:, :, :t], new, cache[name][:, :, t + 1:]], dim=2)
    cache["len"] = t + 1
    k = cache["k"][:, :, : t + 1].repeat_interleave(H // Hkv, dim=1)
    v = cache["v"][:, :, : t + 1].repeat_interleave(H // Hkv, dim=1)
    p = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(Dh), dim=-1)
    return (p @ v).reshape(B, H * Dh) @ params["wo"].T
