"""Grader: online-softmax attention (the step, the finish, and the blockwise attention against SDPA)."""

from __future__ import annotations

# bound here, at import: in the solution's process nothing under exercises/ can be imported later (_isolate.seal)
from exercises._grading import close, value
from exercises._isolate import run_solution

TITLE = "Online-softmax attention step"
TOPIC = "attention-and-serving"
SUMMARY = "Attention over blocks of keys with a running max and sum; matches SDPA with causal and fully masked rows."


def grade(path, g) -> None:
    import math

    import torch
    import torch.nn.functional as F

    dev = g.device
    gen = torch.Generator().manual_seed(2 + g.seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dev)

    checks = []  # (check, inputs): the solution sees the inputs only in its own process

    def expected(scores, v):
        p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with no key: zeros (the policy)
        return p @ v

    def step_case(name, scores, v, splits):
        def fn(folded):
            start = 0
            for b, state in zip(splits, folded["states"]):  # the state after each block of keys
                for what, t in zip(("m", "l", "acc"), state):
                    if torch.isnan(t).any():
                        return False, f"the state {what} has NaN after the block of keys {start}..{start + b - 1}"
                start += b
            return close(folded["out"], expected(scores, v), atol=1e-5, rtol=1e-5)
        checks.append((name, {"kind": "fold", "scores": scores, "v": v, "splits": splits}, fn))

    s, v = rand(2, 5, 37), rand(2, 37, 8)
    step_case("step: 37 keys folded in blocks of 1, 7, 16, 13 match softmax(scores) @ v", s, v, [1, 7, 16, 13])
    step_case("step: the same keys one at a time (the split must not matter)", s, v, [1] * 37)
    masked_first = s.clone()
    masked_first[..., :10] = -math.inf
    step_case("step: a fully masked first block (running max still -inf: no NaN)", masked_first, v, [10, 27])
    step_case("step: scores around 1e4 (exp must never see them unshifted)", s * 3 + 1e4, v, [16, 21])
    dead = s.clone()
    dead[0, 3] = -math.inf
    step_case("step + finish: a row masked in every block outputs zeros", dead, v, [20, 17])

    def sdpa(q, k, v, causal=False, mask=None):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        if mask is not None:  # the policy, whatever this PyTorch version does: a row with no key outputs zeros
            dead = ~mask.expand(*out.shape[:-1], k.shape[-2]).any(dim=-1)
            out = out.masked_fill(dead.unsqueeze(-1), 0.0)
        return out

    def attn_case(name, *calls):
        """calls: (q, k, v, block_size, causal, mask) each, all compared with SDPA."""
        def fn(outs):
            results = [close(out, sdpa(q, k, v, causal, mask), atol=1e-5, rtol=1e-4)
                       for out, (q, k, v, _, causal, mask) in zip(outs, calls)]
            return all(ok for ok, _ in results), "; ".join(why for _, why in results)
        checks.append((name, {"kind": "attention", "calls": list(calls)}, fn))

    q, k, vv = rand(2, 3, 50, 16), rand(2, 3, 50, 16), rand(2, 3, 50, 16)
    attn_case("attention: random 2x3x50x16, blocks of 16, vs SDPA", (q, k, vv, 16, False, None))
    attn_case("attention: causal, 37 tokens, blocks of 8, vs SDPA is_causal",
              (q[..., :37, :], k[..., :37, :], vv[..., :37, :], 8, True, None))
    attn_case("attention: block of 1 and a block larger than the sequence", (q, k, vv, 1, False, None),
              (q, k, vv, 128, False, None))
    attn_case("attention: cross-attention, 5 queries over 33 keys",
              (rand(1, 2, 5, 8), rand(1, 2, 33, 8), rand(1, 2, 33, 8), 16, False, None))
    mask = torch.rand(20, 30, generator=gen).to(dev) > 0.5
    mask[4] = False
    mask[11] = False
    attn_case("attention: a boolean mask (broadcast over batch and heads) with two fully masked rows -> zeros there",
              (rand(2, 2, 20, 8), rand(2, 2, 30, 8), rand(2, 2, 30, 8), 7, False, mask))
    attn_case("attention: scaled by 1/sqrt(D) (D = 64)",
              (rand(1, 1, 9, 64) * 3, rand(1, 1, 9, 64) * 3, rand(1, 1, 9, 64), 4, False, None))
    checks.append(("attention: causal with Lq != Lk is refused",
                   {"kind": "refuse", "q": rand(1, 1, 4, 8), "k": rand(1, 1, 6, 8), "v": rand(1, 1, 6, 8)},
                   lambda refused: (True, "raised ValueError") if refused is True else
                   (False, "accepted causal=True with Lq != Lk; the statement asks for a ValueError")))

    results = run_solution("online_softmax_attention", path, g, [inputs for _, inputs, _ in checks])
    for (name, _, judge), result in zip(checks, results):
        g.run(name, lambda judge=judge, result=result: judge(value(result)))


def outputs(mod, job: dict, device: str):
    """In the solution's own process (exercises/_isolate.py): what the solution returns, no verdict."""
    import math

    import torch

    if job["kind"] == "fold":  # the running state after each block of keys, then finish()
        scores, v = job["scores"], job["v"]
        lead = scores.shape[:-1]
        m = torch.full(lead, -math.inf, device=device)
        l = torch.zeros(lead, device=device)
        acc = torch.zeros((*lead, v.shape[-1]), device=device)
        states, start = [], 0
        for b in job["splits"]:
            m, l, acc = mod.online_softmax_step(m, l, acc, scores[..., start:start + b], v[..., start:start + b, :])
            states.append((m, l, acc))
            if any(torch.isnan(t).any() for t in (m, l, acc)):
                return {"states": states, "out": None}  # the grading process names the block; finish() is moot
            start += b
        return {"states": states, "out": mod.finish(m, l, acc)}
    if job["kind"] == "attention":
        return [mod.attention(q, k, v, causal=causal, mask=mask, block_size=block_size)
                for q, k, v, block_size, causal, mask in job["calls"]]
    try:
        mod.attention(job["q"], job["k"], job["v"], causal=True)
    except ValueError:
        return True
    return False
