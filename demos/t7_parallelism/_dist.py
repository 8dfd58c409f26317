"""The rank plumbing of the T7 demos: where the ranks run, starting them, metering their bytes,
counting their collectives, and timing a step on a rank through the harness.

    ranks = place_ranks(run, [2, 4], "NCCL tensor parallel")  # None: the multi-rank part is not run
    results = launch(worker, 4, *args, device=ranks.device)   # worker(rank, world_size, *args)

Where the ranks run is decided here, once, for every demo (``place_ranks``):

- a plain script on a CPU run forks one process per rank on this host (torch.multiprocessing, fork
  start method, so the worker can live in the demo file itself); each joins a gloo process group over
  TCP on 127.0.0.1 with one intra-op thread, the stand-in for "one device per rank";
- under torchrun (``RANK``/``WORLD_SIZE`` set) the current process *is* one rank, and only the world
  size torchrun started is run: with ``--device cuda`` one GPU per local rank over NCCL (fewer GPUs
  than local ranks is a one-line error), otherwise CPU ranks over gloo. ``launch`` gathers every
  rank's result on global rank 0; the other ranks get ``None`` and exit without writing a record;
- ``--device cuda`` without torchrun is one process, so the parts that need several GPUs are recorded
  as not run (with the torchrun line that runs them); the demo still measures its single-device parts.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from demos.harness import threads
from demos.harness.device import resolve
from records.errors import fail
from demos.harness.timing import Settings, Timing, measure

TIMEOUT = datetime.timedelta(seconds=120)


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


def torchrun_world_size() -> int | None:
    return int(os.environ["WORLD_SIZE"]) if under_torchrun() else None


def local_ranks() -> int:
    """How many ranks torchrun started on this node (1 outside torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if under_torchrun() else 1


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def pin_gpu_per_rank() -> None:
    """Under torchrun with a GPU for every local rank, make this rank's GPU the current one. Call it
    before ``start()``, so that the harness's ceilings already run on this rank's GPU."""
    if under_torchrun() and torch.cuda.is_available() and torch.cuda.device_count() >= local_ranks():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


@dataclasses.dataclass(frozen=True)
class Ranks:
    device: torch.device  # where every rank's tensors live
    world_sizes: tuple[int, ...]  # the world sizes this run starts, one after the other

    @property
    def backend(self) -> str:
        return backend_for(self.device)

    @property
    def on_gpus(self) -> bool:
        return self.device.type == "cuda"


def place_ranks(run, world_sizes, variant: str, gpus: bool = True) -> Ranks | None:
    """Where this run's ranks go (see the module docstring), or None where the multi-rank part cannot run
    here: then ``variant`` is recorded as not run (and, under torchrun, every rank but 0 exits).
    ``gpus=False``: the demo's ranks are CPU processes by design, never GPU ranks."""
    needed = max(world_sizes)
    if not run.device.is_gpu:
        return Ranks(torch.device("cpu"), (torchrun_world_size(),) if under_torchrun() else tuple(world_sizes))
    if not gpus:
        reason = (f"its {needed} ranks are CPU processes over gloo by design (the CPU record has them); "
                  "there is no GPU version of this part")
    elif not under_torchrun():
        reason = f"needs {needed} GPUs: start it with torchrun --nproc-per-node {needed}"
    elif torch.cuda.device_count() < local_ranks():
        fail(f"torchrun started {local_ranks()} ranks on this node but {torch.cuda.device_count()} GPU(s) are "
             f"visible: start it with --nproc-per-node {torch.cuda.device_count()} or fewer")
    else:
        return Ranks(run.torch_device, (torchrun_world_size(),))
    run.not_run(variant, reason)
    if under_torchrun() and int(os.environ["RANK"]) != 0:
        raise SystemExit(0)  # rank 0 writes the record
    return None


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
    # DistributedDataParallel imports torch._dynamo on first use (seconds of imports); done here once, the
    # forked ranks inherit it instead of each paying for it
    import torch._dynamo  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="ranks-") as out_dir:
        mp.start_processes(_forked_rank, args=(world_size, _free_port(), out_dir, worker, args),
                           nprocs=world_size, join=True, start_method="fork")
        return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def _launch_here(worker, args, device):
    if device.type == "cuda":
        pin_gpu_per_rank()  # a no-op when it already ran; never a GPU this node does not have
    else:
        threads.limit(1)  # the harness's thread policy, applied in each rank
    if not dist.is_initialized():
        dist.init_process_group(backend_for(device), timeout=TIMEOUT,
                                **({"device_id": torch.device("cuda", torch.cuda.current_device())}
                                   if device.type == "cuda" else {}))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    result = worker(rank, world_size, *args)
    gathered = [None] * world_size if rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    return gathered


def shutdown() -> None:
    """End this process's process group (under torchrun; a no-op otherwise)."""
    if dist.is_initialized():
        dist.destroy_process_group()


# -- bytes ---------------------------------------------------------------------------------------

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


def can_meter_bytes(ranks: Ranks) -> bool:
    """Gloo sends every byte through a socket of this host, where the counters above see it; NCCL does not."""
    return ranks.backend == "gloo" and all(map(os.path.exists, ("/proc/net/dev", "/proc/self/io")))


def _window(body) -> tuple[int, int]:
    """(loopback bytes, bytes this rank wrote) across body(), read between barriers: a barrier before
    the read, one after it (so no rank sends before every rank has read), one after body()."""
    dist.barrier()
    loopback, written = loopback_tx_bytes(), bytes_written_by_this_process()
    dist.barrier()
    body()
    dist.barrier()
    return loopback_tx_bytes() - loopback, bytes_written_by_this_process() - written


def bytes_sent(body, windows: int) -> dict[str, list[int]]:
    """The byte meter: body() in ``windows`` windows between barriers, each net of the barriers' own
    bytes (the least of as many windows around nothing). Per window: ``loopback``, every byte sent on
    this host's loopback interface (read it on one rank; other programs can only add to it, so the
    least of several windows is the quietest), and ``written``, the bytes this rank wrote (payload and
    the backend's message headers, immune to other programs). Call body() once before, to keep
    first-call set-up out of the windows."""
    empty = [_window(lambda: None) for _ in range(windows)]
    base_loopback, base_written = min(lo for lo, _ in empty), min(w for _, w in empty)
    measured = [_window(body) for _ in range(windows)]
    return {"loopback": [lo - base_loopback for lo, _ in measured], "written": [w - base_written for _, w in measured]}


# -- collectives and time ------------------------------------------------------------------------

def collective_calls(fn) -> collections.Counter:
    """Run ``fn()`` under torch.profiler and count its collective events by name: what the framework
    issued (``c10d::allreduce_``, ...) and what the backend ran (``gloo:all_reduce``, ``nccl:...``)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    backend = dist.get_backend()
    return collections.Counter(e.name for e in prof.events() if e.name.startswith(("c10d::", f"{backend}:")))


def rank_timer(device: torch.device):
    """The harness's Device for a rank's device (a CPU rank of a GPU run times with the CPU's)."""
    return resolve(device.type)


def time_steps(step, device: torch.device, repeats: int, steps: int = 1) -> Timing:
    """The harness's ``measure`` on a rank, per step: ``repeats`` timed calls of ``steps`` steps after one
    warm-up, after a barrier. The counts are fixed, so every rank runs the same collectives: one attempt, never a
    re-measure that only some ranks would take (zero_stages hung on a barrier when one rank measured again)."""
    settings = Settings(warmup=1, min_repeats=repeats, max_repeats=repeats, min_time=0.0, flush_l2=False)
    if dist.is_initialized():
        dist.barrier()
    timing = measure(lambda: [step() for _ in range(steps)], rank_timer(device), settings, attempts=1)
    # per step: the times divide by the step count; the spread, the stability verdict and the counts carry over
    return dataclasses.replace(timing, **{f: getattr(timing, f) / steps
                                          for f in ("first_call_s", "median_s", "p10_s", "p90_s", "best_s")})


def profile_steps(step, steps: int, device: torch.device) -> tuple[dict[str, float], float]:
    """Collective calls per step by backend event name (``all_reduce``, ...) over ``steps`` profiled
    steps, and the fraction of those steps spent inside all-reduces (waiting for the slowest rank
    included). One step before them lets every rank's profiler start first."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        dist.barrier()
        with record_function("counted_steps"):
            for _ in range(steps):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize()
    events = prof.events()
    window = next(e.time_range for e in events if e.name == "counted_steps")
    inside = [e for e in events if window.start <= e.time_range.start <= window.end]
    calls = collections.Counter()
    for e in inside:
        backend, _, collective = e.name.partition(":")
        if backend in ("gloo", "nccl") and collective:
            calls[collective] += 1
    if device.type == "cuda":  # the CPU-side event is the launch; the time is the NCCL kernel's
        busy = [e for e in inside if e.device_type == torch.autograd.DeviceType.CUDA and "allreduce" in e.name.lower()]
    else:
        busy = [e for e in inside if e.name.endswith(":all_reduce")]
    fraction = sum(e.time_range.elapsed_us() for e in busy) / window.elapsed_us()
    return {name: n / steps for name, n in calls.items()}, fraction
