"""Attention with an online softmax: keys and values arrive in blocks; the score matrix is never whole.

Implement the three functions below. Grade them: ``python -m exercises online_softmax_attention``.
Shapes: q (..., Lq, D), k and v (..., Lk, D); ``...`` is any batch and head dimensions.
"""

import torch


def online_softmax_step(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor,
                        scores: torch.Tensor, v: torch.Tensor):
    """Fold one block of keys into the running state and return the new (m, l, acc).

    m:      (..., Lq)     running max of the scores seen so far (starts at -inf)
    l:      (..., Lq)     running sum of exp(score - m) (starts at 0)
    acc:    (..., Lq, D)  running sum of exp(score - m) * v (starts at 0)
    scores: (..., Lq, B)  this block's scores, already scaled and masked (-inf where masked)
    v:      (..., B, D)   this block's values
    A block may be fully masked for some rows (all -inf): the state of those rows must stay finite.
    """
    raise NotImplementedError


def finish(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """The attention output acc / l; a row that saw no unmasked key (l == 0) outputs zeros."""
    raise NotImplementedError


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              mask: torch.Tensor | None = None, block_size: int = 64) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + masking) v, computed block by block over the keys with the two functions above.

    mask: bool, broadcastable to (..., Lq, Lk), True where a query may attend to a key.
    causal: query i attends to keys 0..i (requires Lq == Lk; raise ValueError otherwise).
    Matches torch.nn.functional.scaled_dot_product_attention, including zeros for a fully masked row.
    """
    raise NotImplementedError
