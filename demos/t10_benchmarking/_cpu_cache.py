"""A CPU stand-in for the GPU's L2 flush, so the harness's own timing loop can time a CPU kernel
with its caches cold.

The harness's loop (demos/harness/timing.py ``measure``, demos/harness/device.py
``time_with_host_clock``) asks its device object for ``sync``, ``flush`` and ``time_calls``. On a
CPU the harness's ``flush`` does nothing (CPU numbers are cache-warm, and pages say so). This
object plugs a real flush in: it reads a buffer several times the last-level cache before each
timed call, outside the timed region, the way ``triton.testing.do_bench`` clears L2 on a GPU.
Reading (not writing) leaves the evicted lines clean, so the timed call pays no write-backs.
"""

from __future__ import annotations

import torch

from demos.harness.device import time_with_host_clock


class CpuCacheFlusher:
    kind = "cpu"
    is_gpu = False

    def __init__(self, llc_bytes: int, factor: int = 4):
        self.flush_bytes = max(factor * llc_bytes, 64 * 2**20)
        self._buffer = torch.ones(self.flush_bytes // 4, dtype=torch.float32)

    def sync(self) -> None:  # a CPU op has finished when it returns
        pass

    def flush(self) -> None:
        float(self._buffer.sum())

    def time_calls(self, fn, repeats: int, flush: bool) -> list[float]:
        return time_with_host_clock(self, fn, repeats, flush)
