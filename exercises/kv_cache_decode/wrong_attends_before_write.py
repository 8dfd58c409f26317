"""Wrong on purpose: attends over the cache before writing the new token, so a token never sees itself."""

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
        raise IndexError(f"KV cache full: {t} of {cache['k'].shape[2]} positions used")
    q = (x @ params["wq"].T).view(B, H, 1, Dh)
    cache["k"][:, :, t] = (x @ params["wk"].T).view(B, Hkv, Dh)  # written in place at position t
    cache["v"][:, :, t] = (x @ params["wv"].T).view(B, Hkv, Dh)
    cache["len"] = t + 1
    k = cache["k"][:, :, :t]
    v = cache["v"][:, :, :t]
    group = H // Hkv
    k = k.repeat_interleave(group, dim=1)  # query head h reads kv head h // group
    v = v.repeat_interleave(group, dim=1)
    p = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(Dh), dim=-1)  # the new token sees everything cached
    out = (p @ v).reshape(B, H * Dh)
    return out @ params["wo"].T
