"""Streaming top-K: the K largest values of a stream that arrives in chunks, in O(K) memory.

Implement the class below. Grade it: ``python -m exercises streaming_topk``.
Policy (the grader tests each rule):
- values sorted descending; equal values ordered by stream position, earliest first (and an earlier
  element wins a tie for the last place);
- NaN is not a score: it is never returned; +inf and -inf are ordinary values;
- fewer than K non-NaN elements seen: return all of them; K = 0: return empty tensors;
- indices are positions in the whole stream (0-based, counting NaN positions too), dtype int64;
- between pushes the object keeps O(K) numbers, never the stream.
"""

import torch


class StreamingTopK:
    def __init__(self, k: int):
        raise NotImplementedError

    def push(self, chunk: torch.Tensor) -> None:
        """Take the next chunk of the stream (1-D, any floating dtype, possibly empty)."""
        raise NotImplementedError

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, indices) of the K largest so far; the stream may continue after this call."""
        raise NotImplementedError
