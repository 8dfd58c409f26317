"""Shared plumbing for the T6 serving demos (batching.py, paged_kv.py): the request mix and the
event-driven server's bookkeeping.

Not a demo itself (the leading underscore keeps it out of the demo catalog); the demos import it,
so the source digest of their records covers this file too.

- ``REQUEST_MIX[size]``: the batch sizes the step times are measured at, the prompt length, the
  range of output lengths (drawn uniformly), and the requests per simulation. The batching
  simulation and the paged-KV-cache waste measurement draw from the same mix.
- ``output_lengths(n, size, seed)``: the output lengths, drawn the same way in both demos.
- ``Server``: a clock that admits Poisson arrivals into a FIFO queue as it advances and integrates
  the number of requests in the system (for the Little's-law check), with per-request timestamps.
"""

from __future__ import annotations

import collections
import random

REQUEST_MIX = {  # size -> (batch sizes measured, prompt length, output lengths (min, max), requests per simulation)
    "tiny": ([1, 2, 4], 16, (4, 24), 200),
    "small": ([1, 2, 4, 8, 16, 32], 32, (16, 128), 2000),
    # 2000 requests per simulation: its p99 rests on 20 requests, enough for the page's comparison,
    # and the host-side simulation (6 loads x 5 policies, up to 512 tokens each) stays short
    "full": ([1, 2, 4, 8, 16, 32, 64, 128], 128, (32, 512), 2000),
}


def output_lengths(n: int, size: str, seed: int) -> list[int]:
    """n output lengths drawn uniformly from the size's range with a seeded generator."""
    _, _, (out_min, out_max), _ = REQUEST_MIX[size]
    rng = random.Random(seed)
    return [rng.randint(out_min, out_max) for _ in range(n)]


class Server:
    """The clock, the FIFO queue and the timestamps of one simulated run."""

    def __init__(self, arrivals, lengths):
        self.arrivals, self.lengths = arrivals, lengths
        self.now, self.next_arrival, self.area = 0.0, 0, 0.0
        self.queue, self.in_system = collections.deque(), 0
        self.first_token = [float("nan")] * len(arrivals)
        self.done = [float("nan")] * len(arrivals)
        self.batches: list[int] = []  # size of every batch a request-level policy ran

    def advance(self, until: float) -> None:
        """Move the clock to `until`, admitting arrivals on the way and integrating requests in system."""
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival] <= until:
            t = self.arrivals[self.next_arrival]
            self.area += self.in_system * (t - self.now)
            self.now = t
            self.queue.append(self.next_arrival)
            self.in_system += 1
            self.next_arrival += 1
        self.area += self.in_system * (until - self.now)
        self.now = until

    def idle_until_arrival(self) -> None:
        self.advance(self.arrivals[self.next_arrival])

    def next_arrival_time(self) -> float:
        return self.arrivals[self.next_arrival] if self.next_arrival < len(self.arrivals) else float("inf")

    def finish(self, request: int) -> None:
        self.done[request] = self.now
        self.in_system -= 1

    def all_done(self) -> bool:
        return self.next_arrival == len(self.arrivals) and self.in_system == 0
