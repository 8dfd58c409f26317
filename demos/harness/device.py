"""Which device a demo runs on, what class of machine that is, and how to wait for it.

A device knows three things the timing protocol needs: how to wait until queued work is done
(``sync``), how to time one call (host clock on CPU, CUDA events on a GPU), and how to evict its
cache between repeats (``flush``; the L2 cache on a GPU).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from records.devices import gpu_class
from records.errors import fail
from demos.harness.provenance import cpu_model

@dataclass
class Device:
    """A resolved device: 'cpu' or 'cuda', its class for the record, and its timing primitives."""

    kind: str  # "cpu" | "cuda"
    name: str  # what the hardware calls itself
    device_class: str  # "cpu", "h100", "h200", ...
    l2_bytes: int = 0
    _flush_buffer: torch.Tensor | None = field(default=None, repr=False)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.kind)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    def sync(self) -> None:
        """Block until every queued operation on this device has finished."""
        if self.kind == "cuda":
            torch.cuda.synchronize()

    def flush(self) -> None:
        """Evict the GPU's L2 cache by writing a buffer much larger than it.

        On CPU this is a no-op: CPU numbers are cache-warm for sizes that fit in the caches, and the
        page says so.
        """
        if self.kind != "cuda":
            return
        if self._flush_buffer is None:
            # Four times L2 (at least 256 MiB, as triton.testing.do_bench uses) evicts it reliably.
            nbytes = max(4 * self.l2_bytes, 256 * 2**20)
            self._flush_buffer = torch.empty(nbytes, dtype=torch.int8, device="cuda")
        self._flush_buffer.zero_()

    def time_calls(self, fn: Callable[[], object], repeats: int, flush: bool) -> list[float]:
        """Seconds taken by each of ``repeats`` calls of fn, device work included."""
        if self.kind == "cuda":
            return _time_with_cuda_events(self, fn, repeats, flush)
        return time_with_host_clock(self, fn, repeats, flush)


def time_with_host_clock(device, fn: Callable[[], object], repeats: int, flush: bool) -> list[float]:
    """Host clock around each call, with a sync before the start and before the stop, and the involuntary
    context switches during each call (``Samples.switches``).

    The sync before the stop is what makes this right for asynchronous devices: without it, the
    clock would stop when the launch returns, not when the work is done.
    """
    times = Samples()
    with RunQueueWait() as waited:
        for _ in range(repeats):
            if flush:
                device.flush()
            device.sync()
            before = waited()
            start = time.perf_counter()
            fn()
            device.sync()
            times.append(time.perf_counter() - start)
            after = waited()
            if before is None or after is None:
                times.waits = times.ran = None
            elif times.waits is not None:
                times.ran.append(after[0] - before[0])
                times.waits.append(after[1] - before[1])
    return times


class Samples(list):
    """Seconds per call, and for each how long the process's threads ran (``ran``, CPU seconds summed over them)
    and waited for a CPU (``waits``); None where the system does not say. The stability guard (timing.judge)
    leaves preempted samples out. Read outside the clock, so they cost it nothing."""

    def __init__(self):
        super().__init__()
        self.ran: list[float] | None = []
        self.waits: list[float] | None = []


class RunQueueWait:
    """(Seconds this process's threads have run, seconds they have spent runnable but waiting for a CPU), summed over
    its threads (Linux schedstat: the first two fields of /proc/self/task/<tid>/schedstat, in ns). A busy machine
    shows up here directly: another process holding a core makes this process's threads wait, by whole scheduler
    slices. The files are opened once per batch of samples (threads started later are not seen), so a reading
    costs microseconds."""

    def __enter__(self):
        self.fds = []
        try:
            for tid in os.listdir("/proc/self/task"):
                self.fds.append(os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY))
        except OSError:
            self.__exit__()
            self.fds = None
        return self

    def __call__(self) -> tuple[float, float] | None:
        if not self.fds:
            return None
        ran = waited = 0
        for fd in self.fds:
            try:
                fields = os.pread(fd, 128, 0).split()
                ran, waited = ran + int(fields[0]), waited + int(fields[1])
            except (OSError, IndexError, ValueError):
                pass  # a thread that ended
        return ran / 1e9, waited / 1e9

    def __exit__(self, *exc):
        for fd in self.fds or []:
            os.close(fd)
        return False


def _time_with_cuda_events(device: Device, fn, repeats: int, flush: bool) -> list[float]:
    """CUDA events recorded on the stream around each call; the flush runs outside the events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    device.sync()
    for start, end in zip(starts, ends):
        if flush:
            device.flush()
        start.record()
        fn()
        end.record()
    device.sync()
    return [start.elapsed_time(end) / 1e3 for start, end in zip(starts, ends)]


def resolve(asked: str) -> Device:
    """Turn --device auto|cpu|cuda into a Device, or exit with one clear line."""
    has_cuda = torch.cuda.is_available()
    if asked == "cuda" and not has_cuda:
        fail("--device cuda asked for, but no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False)")
    if asked == "cuda" or (asked == "auto" and has_cuda):
        props = torch.cuda.get_device_properties(0)
        return Device(
            kind="cuda",
            name=props.name,
            device_class=gpu_class(props.name),
            l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        )
    return Device(kind="cpu", name=cpu_model(), device_class="cpu")


def keep_freed_host_memory() -> str | None:
    """Ask glibc to keep freed memory instead of handing it back to the OS, as PyTorch's CUDA caching
    allocator does on a GPU. Returns what was set, or None where this is not glibc.

    Without it, a CPU eager chain's large temporaries are sometimes served by fresh pages that
    fault in one by one, sometimes by reused ones, depending on the heap's history: the same
    add + LayerNorm + GELU measured 6 ms in one process and 20 ms in the next. With it, CPU runs
    measure the kernels, not the allocator's mood. mmap is switched off entirely (M_MMAP_MAX=0),
    because glibc caps the mmap threshold at 32 MiB and larger blocks would still be mapped
    fresh on every allocation.
    """
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    m_trim_threshold, m_mmap_max = -1, -4
    ok = libc.mallopt(m_mmap_max, 0) and libc.mallopt(m_trim_threshold, 2**31 - 1)
    return "glibc mallopt: M_MMAP_MAX=0 (no mmap), M_TRIM_THRESHOLD=2GiB" if ok else None


def use_triton_interpreter_on_cpu(device: Device) -> None:
    """Without a GPU, Triton kernels run in Triton's interpreter (NumPy underneath).

    Triton reads TRITON_INTERPRET when it is imported (its own library functions, tl.sum among
    them, are decorated then) and when a kernel is decorated, so a demo calls start() before it
    imports triton. Interpreted kernels are checked for correctness, never timed.
    """
    if device.kind != "cpu" or os.environ.get("TRITON_INTERPRET") == "1":
        return
    if "triton" in sys.modules:
        raise RuntimeError("triton was imported before start(): import it after start() so that, without a GPU, "
                           "its kernels run in the interpreter")
    os.environ["TRITON_INTERPRET"] = "1"
