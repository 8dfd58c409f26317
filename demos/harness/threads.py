"""The CPU thread policy: the one module that changes how many threads the libraries use.

A demo declares what it needs (``start(..., cpu_threads=1)``); the harness calls ``limit`` after
the opening ceilings and ``Limit.restore`` before the closing ones, and records the count its
timings ran with. Nothing else sets thread counts, so a record's provenance is always true.

Why a demo would ask for one thread on a CPU: small arrays gain nothing from a second thread, and
when another process holds a core, an OpenMP parallel region waits for its descheduled thread at
every barrier: the same call can then take a whole scheduler time slice. One thread makes eager,
compiled and exported variants comparable and the numbers repeatable; the page says so.

``limit`` covers PyTorch's intra-op pool (OpenMP), NumPy's BLAS (through threadpoolctl) and XLA's
CPU client (through XLA_FLAGS, which JAX reads once, when its CPU backend starts: a demo that
asks for fewer threads imports jax after ``start()``). A forked rank (the T7 launcher) calls
``limit`` itself, with the count the demo declared. ONNX Runtime takes its count per session:
``onnxruntime_options`` gives a session the run's count (``run.cpu_threads``).

torch is imported where it is used, so a child process that only builds ONNX Runtime sessions (a peak
memory probe) does not pay for it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"


def count() -> int:
    """Threads of PyTorch's intra-op pool right now: what a timing made now runs with."""
    import torch

    return torch.get_num_threads()


@dataclass
class Limit:
    threads: int  # what the libraries were set to
    previous: int  # PyTorch's count before
    _blas: object = None
    xla: str = "unchanged"

    def restore(self) -> None:
        # threadpoolctl's own restore resets the OpenMP pool PyTorch shares, so it goes first and
        # PyTorch's count is set last (the other order leaves PyTorch on the limited count).
        import torch

        if self._blas is not None:
            self._blas.restore_original_limits()
            self._blas = None
        torch.set_num_threads(self.previous)

    def as_dict(self) -> dict:
        return {"torch": self.threads, "blas": self.threads, "xla": self.xla}


def limit(threads: int) -> Limit:
    """Use ``threads`` threads in PyTorch, the BLAS under NumPy, and (one thread) XLA's CPU client."""
    if threads < 1:
        raise ValueError(f"cpu_threads must be at least 1, got {threads}")
    import torch
    from threadpoolctl import threadpool_limits

    previous = torch.get_num_threads()
    blas = threadpool_limits(threads)  # first: it records the pools' counts as they were, to restore them
    torch.set_num_threads(threads)
    xla = "unchanged"
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if XLA_ONE_THREAD not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {XLA_ONE_THREAD}".strip()
        xla = "one thread" if "jax" not in sys.modules else "unchanged (jax was imported before start())"
    return Limit(threads=threads, previous=previous, _blas=blas, xla=xla)


def onnxruntime_options(ort, threads: int):
    """ONNX Runtime session options with both of its pools (intra-op, inter-op) at ``threads``: the one place
    ONNX Runtime's thread count is set. A demo passes the run's count (``run.cpu_threads``), so ONNX Runtime
    is timed with the threads PyTorch got."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    return options
