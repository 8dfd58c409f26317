"""Wrong on purpose: right answers, but it keeps the whole stream and sorts it at the end (memory grows with the stream)."""

import torch


class StreamingTopK:
    def __init__(self, k: int):
        self.k = k
        self.chunks = []

    def push(self, chunk: torch.Tensor) -> None:
        self.chunks.append(chunk.reshape(-1).clone())

    def result(self):
        if not self.chunks:
            return torch.empty(0), torch.empty(0, dtype=torch.int64)
        allv = torch.cat(self.chunks)
        pos = torch.arange(allv.numel())
        keep = ~torch.isnan(allv)
        v, i = allv[keep], pos[keep]
        order = torch.sort(v, descending=True, stable=True).indices[: self.k]
        return v[order], i[order]
