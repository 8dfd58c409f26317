"""Grader: one decode step with a preallocated KV cache, against full causal recomputation."""

from __future__ import annotations

TITLE = "KV-cache decode step"
TOPIC = "attention-and-serving"
SUMMARY = "Append a token's K and V to a preallocated cache in place and attend over it; equals full recompute (MHA, GQA, MQA)."


def grade(path, g) -> None:
    import torch
    import torch.nn.functional as F

    from exercises._grading import close, load_solution

    mod = load_solution(path)
    dev = g.device
    gen = torch.Generator().manual_seed(3)

    def make_params(D, H, Hkv, Dh):
        r = lambda *s: (torch.randn(*s, generator=gen) / s[-1] ** 0.5).to(dev)  # noqa: E731
        return {"wq": r(H * Dh, D), "wk": r(Hkv * Dh, D), "wv": r(Hkv * Dh, D), "wo": r(D, H * Dh),
                "n_heads": H, "n_kv_heads": Hkv}

    def full_recompute(X, p, Dh):
        B, T, _ = X.shape
        H, Hkv = p["n_heads"], p["n_kv_heads"]
        q = (X @ p["wq"].T).view(B, T, H, Dh).transpose(1, 2)
        k = (X @ p["wk"].T).view(B, T, Hkv, Dh).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        v = (X @ p["wv"].T).view(B, T, Hkv, Dh).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(B, T, H * Dh) @ p["wo"].T

    def decode_case(B, T, max_len, H, Hkv, D=32, Dh=8, poison=False):
        def fn():
            p = make_params(D, H, Hkv, Dh)
            X = torch.randn(B, T, D, generator=gen).to(dev)
            cache = mod.new_cache(B, Hkv, max_len, Dh, dtype=torch.float32, device=dev)
            shape = (B, Hkv, max_len, Dh)
            if tuple(cache["k"].shape) != shape or tuple(cache["v"].shape) != shape or cache["len"] != 0:
                return False, f"new_cache gave k {tuple(cache['k'].shape)}, len {cache['len']}; expected {shape}, len 0"
            if poison:  # unfilled positions are not data: anything may sit there
                cache["k"].fill_(float("nan"))
                cache["v"].fill_(float("nan"))
            k_buf, ptr = cache["k"], cache["k"].data_ptr()
            outs = []
            for t in range(T):
                outs.append(mod.decode_step(X[:, t], p, cache))
                if cache["len"] != t + 1:
                    return False, f"after step {t} cache['len'] is {cache['len']}, expected {t + 1}"
                if cache["k"] is not k_buf or cache["k"].data_ptr() != ptr or tuple(cache["k"].shape) != shape:
                    return False, (f"step {t} replaced the cache buffer (shape now {tuple(cache['k'].shape)}): write the "
                                   "new K and V into the preallocated buffer in place; torch.cat copies the whole cache every token")
            return close(torch.stack(outs, dim=1), full_recompute(X, p, Dh), atol=1e-5, rtol=1e-4,
                         what=f"outputs of {T} decode steps")
        return fn

    g.run("multi-head (H = Hkv = 4), batch 2, 12 steps vs full causal recompute", decode_case(2, 12, 16, 4, 4))
    g.run("grouped-query (H = 4, Hkv = 2): head h reads kv head h // 2", decode_case(2, 10, 16, 4, 2))
    g.run("multi-query (H = 8, Hkv = 1)", decode_case(1, 9, 9, 8, 1))
    g.run("the first step alone (a cache of one token)", decode_case(3, 1, 4, 4, 2))
    g.run("unfilled cache positions hold NaN: they must never be read", decode_case(2, 7, 20, 4, 2, poison=True))
    g.run("batch 1, 40 steps filling the cache exactly", decode_case(1, 40, 40, 2, 1, D=16, Dh=8))

    def full_raises():
        p = make_params(16, 2, 2, 8)
        cache = mod.new_cache(1, 2, 3, 8, dtype=torch.float32, device=dev)
        x = torch.randn(1, 16, generator=gen).to(dev)
        for _ in range(3):
            mod.decode_step(x, p, cache)
        try:
            mod.decode_step(x, p, cache)
        except IndexError:
            return True, "the 4th step on a 3-position cache raised IndexError"
        return False, "a step on a full cache did not raise IndexError"
    g.run("a full cache refuses another token (IndexError)", full_raises)
