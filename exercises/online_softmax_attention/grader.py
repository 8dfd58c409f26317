"""Grader: online-softmax attention (the step, the finish, and the blockwise attention against SDPA)."""

from __future__ import annotations

TITLE = "Online-softmax attention step"
TOPIC = "attention-and-serving"
SUMMARY = "Attention over blocks of keys with a running max and sum; matches SDPA with causal and fully masked rows."


def grade(path, g) -> None:
    import math

    import torch
    import torch.nn.functional as F

    from exercises._grading import close, load_solution

    mod = load_solution(path)
    dev = g.device
    gen = torch.Generator().manual_seed(2)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dev)

    def fold(scores, v, splits):
        lead, Lq = scores.shape[:-1], scores.shape[-2]
        m = torch.full(lead, -math.inf, device=dev)
        l = torch.zeros(lead, device=dev)
        acc = torch.zeros((*lead, v.shape[-1]), device=dev)
        start = 0
        for b in splits:
            m, l, acc = mod.online_softmax_step(m, l, acc, scores[..., start:start + b], v[..., start:start + b, :])
            for name, t in (("m", m), ("l", l), ("acc", acc)):
                if torch.isnan(t).any():
                    return None, f"the state {name} has NaN after the block of keys {start}..{start + b - 1}"
            start += b
        return mod.finish(m, l, acc), ""

    def expected(scores, v):
        p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with no key: zeros (the policy)
        return p @ v

    def step_case(scores, v, splits):
        def fn():
            out, why = fold(scores, v, splits)
            if out is None:
                return False, why
            return close(out, expected(scores, v), atol=1e-5, rtol=1e-5)
        return fn

    s, v = rand(2, 5, 37), rand(2, 37, 8)
    g.run("step: 37 keys folded in blocks of 1, 7, 16, 13 match softmax(scores) @ v", step_case(s, v, [1, 7, 16, 13]))
    g.run("step: the same keys one at a time (the split must not matter)", step_case(s, v, [1] * 37))
    masked_first = s.clone()
    masked_first[..., :10] = -math.inf
    g.run("step: a fully masked first block (running max still -inf: no NaN)", step_case(masked_first, v, [10, 27]))
    g.run("step: scores around 1e4 (exp must never see them unshifted)", step_case(s * 3 + 1e4, v, [16, 21]))
    dead = s.clone()
    dead[0, 3] = -math.inf
    g.run("step + finish: a row masked in every block outputs zeros", step_case(dead, v, [20, 17]))

    def sdpa(q, k, v, causal=False, mask=None):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        if mask is not None:  # the policy, whatever this PyTorch version does: a row with no key outputs zeros
            dead = ~mask.expand(*out.shape[:-1], k.shape[-2]).any(dim=-1)
            out = out.masked_fill(dead.unsqueeze(-1), 0.0)
        return out

    def attn_case(q, k, v, block_size, causal=False, mask=None):
        def fn():
            out = mod.attention(q, k, v, causal=causal, mask=mask, block_size=block_size)
            return close(out, sdpa(q, k, v, causal, mask), atol=1e-5, rtol=1e-4)
        return fn

    q, k, vv = rand(2, 3, 50, 16), rand(2, 3, 50, 16), rand(2, 3, 50, 16)
    g.run("attention: random 2x3x50x16, blocks of 16, vs SDPA", attn_case(q, k, vv, 16))
    g.run("attention: causal, 37 tokens, blocks of 8, vs SDPA is_causal", attn_case(
        q[..., :37, :], k[..., :37, :], vv[..., :37, :], 8, causal=True))
    g.run("attention: block of 1 and a block larger than the sequence", lambda: _all(
        attn_case(q, k, vv, 1)(), attn_case(q, k, vv, 128)()))
    g.run("attention: cross-attention, 5 queries over 33 keys", attn_case(rand(1, 2, 5, 8), rand(1, 2, 33, 8),
                                                                          rand(1, 2, 33, 8), 16))
    mask = torch.rand(20, 30, generator=gen).to(dev) > 0.5
    mask[4] = False
    mask[11] = False
    g.run("attention: a boolean mask (broadcast over batch and heads) with two fully masked rows -> zeros there",
          attn_case(rand(2, 2, 20, 8), rand(2, 2, 30, 8), rand(2, 2, 30, 8), 7, mask=mask))
    g.run("attention: scaled by 1/sqrt(D) (D = 64)", attn_case(rand(1, 1, 9, 64) * 3, rand(1, 1, 9, 64) * 3,
                                                              rand(1, 1, 9, 64), 4))

    def rejects():
        try:
            mod.attention(rand(1, 1, 4, 8), rand(1, 1, 6, 8), rand(1, 1, 6, 8), causal=True)
        except ValueError:
            return True, "raised ValueError"
        return False, "accepted causal=True with Lq != Lk; the statement asks for a ValueError"
    g.run("attention: causal with Lq != Lk is refused", rejects)


def _all(*results):
    return all(ok for ok, _ in results), "; ".join(why for _, why in results)
