"""Plumbing of expert_parallel.py: the MoE layer's parameters, the autograd-aware all-to-all, and the load
statistics of a routing (imbalance, what a capacity would drop).

The token exchanges use ``torch.distributed.nn.functional.all_to_all_single``, whose backward is the
reverse all-to-all, so gradients travel back through the same real collectives. It exists in torch
2.11 and 2.13; 2.13 marks it deprecated in favour of a functional-collectives variant, whose warning
is silenced here.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import torch
import torch.distributed.nn.functional as dist_autograd

from demos.t7_parallelism._dist import collective_calls


@dataclasses.dataclass
class MoEParams:
    router_w: torch.Tensor  # (hidden, E)
    router_b: torch.Tensor  # (E,)
    w1: torch.Tensor  # (E, hidden, ffn)
    w2: torch.Tensor  # (E, ffn, hidden)

    @classmethod
    def random(cls, generator, hidden: int, ffn: int, experts: int) -> MoEParams:
        """Seeded float64 parameters, scaled so activations stay O(1); a zero router bias."""
        def randn(*shape, scale):
            return torch.randn(*shape, generator=generator, dtype=torch.float64) * scale

        return cls(router_w=randn(hidden, experts, scale=hidden ** -0.5),
                   router_b=torch.zeros(experts, dtype=torch.float64),
                   w1=randn(experts, hidden, ffn, scale=hidden ** -0.5),
                   w2=randn(experts, ffn, hidden, scale=ffn ** -0.5))

    def with_router_bias_on(self, expert: int, bias: float) -> MoEParams:
        """The same layer with ``bias`` added to one expert's router logit (a router collapsing toward it)."""
        router_b = self.router_b.clone()
        router_b[expert] += bias
        return dataclasses.replace(self, router_b=router_b)

    def to(self, dtype, device="cpu"):
        return MoEParams(*(t.to(device, dtype) for t in dataclasses.astuple(self)))

    def requiring_grad(self):
        return MoEParams(*(t.detach().clone().requires_grad_() for t in dataclasses.astuple(self)))


def all_to_all_autograd(rows, output_splits, input_splits):
    """All-to-all of ``rows`` with uneven splits, differentiable (its backward is the reverse exchange)."""
    output = rows.new_empty(sum(output_splits), rows.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return dist_autograd.all_to_all_single(output, rows, output_splits, input_splits)


def count_all_to_alls(fn, backend: str) -> tuple[int, int]:
    """All-to-alls that fn() makes: as the backend ran them, and as the framework issued them."""
    calls = collective_calls(fn)
    return calls[f"{backend}:all_to_all"], calls["c10d::alltoall_base_"]


def load_stats(per_expert: torch.Tensor, experts_per_rank: int, assignments: int, capacity_factors):
    """Tokens per expert -> (busiest expert over the mean, busiest rank over the mean rank, and per capacity factor
    cf: (capacity C = floor(cf x assignments / experts), share of the assignments over C, which a capacity drops))."""
    mean = assignments / len(per_expert)
    per_rank = per_expert.view(-1, experts_per_rank).sum(1)
    drops = []
    for cf in capacity_factors:
        capacity = math.floor(cf * assignments / len(per_expert))
        drops.append((capacity, int((per_expert - capacity).clamp(min=0).sum()) / assignments))
    return float(per_expert.max()) / mean, float(per_rank.max()) / (mean * experts_per_rank), drops
