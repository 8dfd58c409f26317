"""Grader: one decode step with a preallocated KV cache, against full causal recomputation."""

from __future__ import annotations

# bound here, at import: in the solution's process nothing under exercises/ can be imported later (_isolate.seal)
from exercises._grading import close, value
from exercises._isolate import run_solution

TITLE = "KV-cache decode step"
TOPIC = "attention-and-serving"
SUMMARY = "Append a token's K and V to a preallocated cache in place and attend over it; equals full recompute (MHA, GQA, MQA)."


def grade(path, g) -> None:
    import torch
    import torch.nn.functional as F

    dev = g.device
    gen = torch.Generator().manual_seed(3 + g.seed)

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

    checks = []  # (check, inputs, judge): the solution sees the inputs only in its own process

    def decode_case(name, B, T, max_len, H, Hkv, D=32, Dh=8, poison=False):
        p = make_params(D, H, Hkv, Dh)
        X = torch.randn(B, T, D, generator=gen).to(dev)
        shape = (B, Hkv, max_len, Dh)

        def judge(run):  # what the solution's process saw: the cache's shapes and length, step by step
            if run["k_shape"] != shape or run["v_shape"] != shape or run["len"] != 0:
                return False, f"new_cache gave k {run['k_shape']}, len {run['len']}; expected {shape}, len 0"
            for t, step in enumerate(run["steps"]):
                if step["len"] != t + 1:
                    return False, f"after step {t} cache['len'] is {step['len']}, expected {t + 1}"
                if not step["same_buffer"]:
                    return False, (f"step {t} replaced the cache buffer (shape now {step['k_shape']}): write the "
                                   "new K and V into the preallocated buffer in place; torch.cat copies the whole "
                                   "cache every token")
            return close(torch.stack(run["outs"], dim=1), full_recompute(X, p, Dh), atol=1e-5, rtol=1e-4,
                         what=f"outputs of {T} decode steps")
        checks.append((name, {"kind": "decode", "X": X, "params": p, "shape": shape, "poison": poison}, judge))

    decode_case("multi-head (H = Hkv = 4), batch 2, 12 steps vs full causal recompute", 2, 12, 16, 4, 4)
    decode_case("grouped-query (H = 4, Hkv = 2): head h reads kv head h // 2", 2, 10, 16, 4, 2)
    decode_case("multi-query (H = 8, Hkv = 1)", 1, 9, 9, 8, 1)
    decode_case("the first step alone (a cache of one token)", 3, 1, 4, 4, 2)
    decode_case("unfilled cache positions hold NaN: they must never be read", 2, 7, 20, 4, 2, poison=True)
    decode_case("batch 1, 40 steps filling the cache exactly", 1, 40, 40, 2, 1, D=16, Dh=8)
    full = {"kind": "full", "params": make_params(16, 2, 2, 8), "x": torch.randn(1, 16, generator=gen).to(dev)}
    checks.append(("a full cache refuses another token (IndexError)", full,
                   lambda refused: (True, "the 4th step on a 3-position cache raised IndexError") if refused is True
                   else (False, "a step on a full cache did not raise IndexError")))

    results = run_solution("kv_cache_decode", path, g, [inputs for _, inputs, _ in checks])
    for (name, _, judge), result in zip(checks, results):
        g.run(name, lambda judge=judge, result=result: judge(value(result)))


def outputs(mod, job: dict, device: str):
    """In the solution's own process (exercises/_isolate.py): what the solution returns and does to its cache,
    no verdict (it stops where the grading process will stop judging)."""
    import torch

    p = job["params"]
    if job["kind"] == "full":
        cache = mod.new_cache(1, 2, 3, 8, dtype=torch.float32, device=device)
        for _ in range(3):
            mod.decode_step(job["x"], p, cache)
        try:
            mod.decode_step(job["x"], p, cache)
        except IndexError:
            return True
        return False
    X, shape = job["X"], tuple(job["shape"])
    B, Hkv, max_len, Dh = shape
    cache = mod.new_cache(B, Hkv, max_len, Dh, dtype=torch.float32, device=device)
    run = {"k_shape": tuple(cache["k"].shape), "v_shape": tuple(cache["v"].shape), "len": cache["len"], "steps": []}
    if run["k_shape"] != shape or run["v_shape"] != shape or run["len"] != 0:
        return run
    if job["poison"]:  # unfilled positions are not data: anything may sit there
        cache["k"].fill_(float("nan"))
        cache["v"].fill_(float("nan"))
    k_buf, ptr = cache["k"], cache["k"].data_ptr()
    outs = []
    for t in range(X.shape[1]):
        outs.append(mod.decode_step(X[:, t], p, cache))
        same = cache["k"] is k_buf and cache["k"].data_ptr() == ptr and tuple(cache["k"].shape) == shape
        run["steps"].append({"len": cache["len"], "same_buffer": same, "k_shape": tuple(cache["k"].shape)})
        if cache["len"] != t + 1 or not same:
            return run
    run["outs"] = outs
    return run
