"""Wrong on purpose: right answers in O(K) memory, but one Python heap operation per element (far too slow)."""

import heapq
import math

import torch


class StreamingTopK:
    def __init__(self, k: int):
        self.k = k
        self.heap = []  # (value, -position): the root is the weakest entry, a later position loses a tie
        self.seen = 0
        self.dtype = torch.float32

    def push(self, chunk: torch.Tensor) -> None:
        self.dtype = chunk.dtype
        for x in chunk.reshape(-1).tolist():
            pos = self.seen
            self.seen += 1
            if self.k == 0 or math.isnan(x):
                continue
            if len(self.heap) < self.k:
                heapq.heappush(self.heap, (x, -pos))
            elif (x, -pos) > self.heap[0]:
                heapq.heapreplace(self.heap, (x, -pos))

    def result(self):
        best = sorted(self.heap, reverse=True)
        return (torch.tensor([v for v, _ in best], dtype=self.dtype),
                torch.tensor([-p for _, p in best], dtype=torch.int64))
