"""One thread per library for the T1 demos on a CPU. Call it before importing jax."""

from __future__ import annotations

import os

import torch
from threadpoolctl import threadpool_limits


def one_thread_per_library_on_cpu(run) -> None:
    """Arrays this small gain nothing from a second thread, and on a shared machine a busy neighbour
    can stall a thread pool's barriers (an eager step was seen to run hundreds of times slower): on
    a CPU, one thread each for PyTorch (OpenMP), NumPy (BLAS) and XLA, set before JAX starts its CPU
    client. The harness measured the machine's ceilings before this, with every thread."""
    if run.device.is_gpu:
        return
    threadpool_limits(1)
    torch.set_num_threads(1)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
