"""Wrong on purpose: the old sum and accumulator are not rescaled when the running max goes up."""

import math

import torch


def online_softmax_step(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(dim=-1))
    # rows that have seen only -inf keep m_new = -inf; shift by 0 there so no -inf - (-inf) = NaN appears
    shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - shift.unsqueeze(-1))  # exp(-inf) = 0 for masked keys
    rescale = torch.exp(m - shift)  # how much the old state shrinks now that the max went up
    l = l + p.sum(dim=-1)
    acc = acc + p @ v
    return m_new, l, acc


def finish(m, l, acc):
    safe = torch.where(l > 0, l, torch.ones_like(l))
    return torch.where((l > 0).unsqueeze(-1), acc / safe.unsqueeze(-1), torch.zeros_like(acc))


def attention(q, k, v, *, causal=False, mask=None, block_size=64):
    Lq, Lk, D = q.shape[-2], k.shape[-2], q.shape[-1]
    if causal and Lq != Lk:
        raise ValueError(f"causal attention needs Lq == Lk, got {Lq} and {Lk}")
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m = torch.full((*lead, Lq), -math.inf, dtype=torch.float32, device=q.device)
    l = torch.zeros((*lead, Lq), dtype=torch.float32, device=q.device)
    acc = torch.zeros((*lead, Lq, v.shape[-1]), dtype=torch.float32, device=q.device)
    rows = torch.arange(Lq, device=q.device).unsqueeze(-1)
    for start in range(0, Lk, block_size):
        stop = min(start + block_size, Lk)
        s = (q.float() @ k[..., start:stop, :].float().transpose(-1, -2)) / math.sqrt(D)
        if mask is not None:
            s = s.masked_fill(~mask[..., start:stop], -math.inf)
        if causal:
            cols = torch.arange(start, stop, device=q.device)
            s = s.masked_fill(cols > rows, -math.inf)
        m, l, acc = online_softmax_step(m, l, acc, s, v[..., start:stop, :].float())
    return finish(m, l, acc).to(q.dtype)
