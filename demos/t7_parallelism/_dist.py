"""Start ranks of torch.distributed for a demo, and bring each rank's result back.

    results = launch(worker, 4, *args)   # worker(rank, world_size, *args) runs in 4 processes

Two ways in, one worker:
- run as a plain script, ``launch`` forks ``world_size`` processes on this host
  (torch.multiprocessing, fork start method, so the worker can live in the demo file itself) and
  joins them; each rank joins a gloo process group over TCP on 127.0.0.1;
- run under torchrun (``RANK``/``WORLD_SIZE`` set, e.g. several GPUs or nodes with NCCL), the
  current process *is* one rank: ``launch`` runs the worker here and gathers every rank's result on
  global rank 0. Other ranks get ``None`` back and should exit without writing a record.

Every rank uses one intra-op thread: the ranks share this machine's cores, and one thread each is the
honest stand-in for "one device per rank".
"""

from __future__ import annotations

import collections
import datetime
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from demos.harness import threads

TIMEOUT = datetime.timedelta(seconds=120)


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


def torchrun_world_size() -> int | None:
    return int(os.environ["WORLD_SIZE"]) if under_torchrun() else None


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forked_rank(rank, world_size, port, out_dir, worker, args):
    threads.limit(1)  # the harness's thread policy, applied in each rank
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=TIMEOUT)
    try:
        result = worker(rank, world_size, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def launch(worker, world_size: int, *args, device: torch.device = torch.device("cpu")):
    """Run ``worker(rank, world_size, *args)`` on every rank; return the ranks' results in rank order
    (on global rank 0; ``None`` on the other ranks under torchrun)."""
    if under_torchrun():
        return _launch_here(worker, args, device)
    if device.type != "cpu":
        raise ValueError("launching several ranks from one process is CPU-only (gloo); "
                         "for GPUs start the demo with torchrun, one process per GPU")
    with tempfile.TemporaryDirectory(prefix="ranks-") as out_dir:
        mp.start_processes(_forked_rank, args=(world_size, _free_port(), out_dir, worker, args),
                           nprocs=world_size, join=True, start_method="fork")
        return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def _launch_here(worker, args, device):
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    else:
        threads.limit(1)  # the harness's thread policy, applied in each rank
    if not dist.is_initialized():
        dist.init_process_group(backend_for(device), timeout=TIMEOUT)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    result = worker(rank, world_size, *args)
    gathered = [None] * world_size if rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    return gathered


def loopback_tx_bytes() -> int | None:
    """Bytes sent over the loopback interface by every process on this machine (``lo`` in
    /proc/net/dev, transmit counter), TCP/IP headers included; None where there is no such file."""
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, counters = line.partition(":")
                if name.strip() == "lo":
                    return int(counters.split()[8])  # receive has 8 fields, then transmit bytes
    except OSError:
        pass
    return None


def bytes_written_by_this_process() -> int | None:
    """``wchar`` of /proc/self/io: bytes this process (all its threads) handed to write-type calls,
    sockets included, so other programs' traffic cannot disturb it; None where there is no such file."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))
    except (OSError, StopIteration):
        return None


def collective_calls(fn) -> collections.Counter:
    """Run ``fn()`` under torch.profiler and count its collective events by name: what the framework
    issued (``c10d::allreduce_``, ...) and what the backend ran (``gloo:all_reduce``, ``nccl:...``)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    backend = dist.get_backend()
    return collections.Counter(e.name for e in prof.events() if e.name.startswith(("c10d::", f"{backend}:")))


def shutdown() -> None:
    """End this process's process group (under torchrun; a no-op otherwise)."""
    if dist.is_initialized():
        dist.destroy_process_group()
