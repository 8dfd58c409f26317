"""Reference solution: streaming top-K with a per-chunk threshold and a stable merge."""

import torch


class StreamingTopK:
    def __init__(self, k: int):
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.k = k
        self.seen = 0  # stream positions consumed so far
        self.values = torch.empty(0)  # at most k, sorted descending, ties by position
        self.indices = torch.empty(0, dtype=torch.int64)

    def push(self, chunk: torch.Tensor) -> None:
        chunk = chunk.reshape(-1)
        start = self.seen
        self.seen += chunk.numel()
        if self.values.numel() == 0:
            self.values = self.values.to(device=chunk.device, dtype=chunk.dtype)
            self.indices = self.indices.to(chunk.device)
        if self.k == 0 or chunk.numel() == 0:
            return
        # a threshold from one pass: this chunk's k-th largest, NaN counted as -inf so it never sets the bar
        k = min(self.k, chunk.numel())
        kth = torch.topk(torch.nan_to_num(chunk, nan=-float("inf")), k, sorted=False).values.min()
        # >= keeps every value tied with the threshold; NaN >= anything is False, so NaN never enters
        where = (chunk >= kth).nonzero().squeeze(1)
        v, i = chunk[where], where + start
        # old entries first, then the new ones in stream order: a stable sort keeps the earliest of equal values first
        v = torch.cat([self.values, v])
        i = torch.cat([self.indices, i])
        order = torch.sort(v, descending=True, stable=True).indices[: self.k]
        self.values, self.indices = v[order], i[order]

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.values.clone(), self.indices.clone()
