# %% [markdown]
# # Streams and events: pinned copies, copy/compute overlap, and the syncs that serialise them
#
# A CUDA stream is a queue: work in one stream runs in order, work in two streams may overlap. A
# host-to-device copy from *pageable* memory is staged by the driver through a pinned bounce
# buffer, so it is slower and synchronous with the host; from *pinned* (page-locked) memory the copy
# engine reads host memory directly by DMA, and `non_blocking=True` returns at once. With pinned
# chunks, one stream can copy chunk i+1 while another computes on chunk i; events order the two.
# Any call that needs a GPU value on the host (`.item()`, `print(cuda_tensor)`, `.cpu()`,
# `.tolist()`, a Python `if` on a CUDA tensor) waits for the whole queue: the host stops
# enqueueing work, and the GPU then idles while the host catches up.
#
# Everything timed here needs a CUDA GPU. Without one the demo checks what a CPU can: that the
# chunked two-stream pipeline computes the same result as the plain one, and that the profiler
# trace shows each hidden sync as an op you can search for (`aten::_local_scalar_dense`, the op
# behind `.item()`), which is how they are found on a GPU trace too.

# %%
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from demos.harness.run import start

run = start(
    "streams",
    title="Streams: pageable vs pinned copies, two-stream overlap, hidden synchronisations",
    sizes={"tiny": (2**18, 4), "small": (2**20, 8), "full": (2**26, 8)},  # (floats per transfer, chunks); a CPU times nothing here
    cpu_threads=1,
)
n, chunks = run.sizes
device = run.torch_device
gpu = run.device.is_gpu
GPU_ONLY = "needs a CUDA GPU (streams, pinned memory and copy engines are CUDA features)"


def work(t, passes=4):
    """The compute stage: passes of elementwise math on a chunk (memory-bound, like a preprocessing
    step). On a GPU the pipeline below uses as many passes as make compute take about as long as the
    copy: overlap can at best hide the shorter of the two, so balanced stages show it best."""
    for _ in range(passes):
        t = torch.sin(t) * 1.0001 + 0.5
    return t


host = torch.randn(n)
# work() is elementwise, so the float64 reference is computed for an evenly spaced sample of elements
# (every one up to CHECK_ELEMENTS, then every k-th, hitting every chunk): a few MB, not a host copy of the whole array.
CHECK_ELEMENTS = 2**20
every = max(1, n // CHECK_ELEMENTS)
reference = work(host[::every].double()).float()

# %% [markdown]
# ## The pipeline, checked on any device
#
# Serial: copy everything, then compute. Overlapped: split into chunks; chunk i's copy is enqueued on
# a copy stream, an event marks its end, the compute stream waits on that event and computes it.
# The host never blocks between chunks. Both side streams first wait for the caller's stream, so
# the pipeline starts after whatever was queued before it (and a timing's start event really is
# its start), and the caller's stream waits for the compute stream before it uses the results.

# %%
def serial(src, passes=4):
    return work(src.to(device, non_blocking=True), passes)


def overlapped(src_chunks, passes=4):
    if not gpu:
        return torch.cat([work(c, passes) for c in src_chunks])
    caller = torch.cuda.current_stream()
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    copy_stream.wait_stream(caller)
    compute_stream.wait_stream(caller)
    outs = []
    for c in src_chunks:
        with torch.cuda.stream(copy_stream):
            d = c.to(device, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(copy_stream)
        with torch.cuda.stream(compute_stream):
            compute_stream.wait_event(ready)
            d.record_stream(compute_stream)  # d was allocated on copy_stream; tell the allocator
            outs.append(work(d, passes))
    caller.wait_stream(compute_stream)
    for o in outs:
        o.record_stream(caller)  # allocated on compute_stream, read by torch.cat on the caller's stream
    return torch.cat(outs)


pinned = host.pin_memory() if gpu else host
pinned_chunks = list(pinned.chunk(chunks))
run.check_close("serial", serial(pinned)[::every], reference, rtol=1e-5, atol=1e-5)
run.check_close("overlapped", overlapped(pinned_chunks)[::every], reference, rtol=1e-5, atol=1e-5)

# %% [markdown]
# ## Hidden syncs, seen in a profiler trace
#
# A training-loop-shaped function: compute, then log the loss with `.item()` every iteration, against
# the same loop that keeps the loss on the device and reads it once at the end. In the trace each
# `.item()` is an `aten::_local_scalar_dense` op; on a GPU it also shows a device-to-host
# `cudaMemcpyAsync` followed by a stream synchronisation, and a gap in the GPU timeline.

# %%
x_dev = torch.randn(n, device=device)
ITERS = 8


def loop_with_item():
    total = 0.0
    for _ in range(ITERS):
        total += work(x_dev).mean().item()  # a hidden sync every iteration
    return total


def loop_on_device():
    total = torch.zeros((), device=device)
    for _ in range(ITERS):
        total += work(x_dev).mean()
    return total.item()  # one sync, at the end


activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
counts = {}
for name, fn in (("item_each_iter", loop_with_item), ("item_at_end", loop_on_device)):
    fn()
    with profile(activities=activities) as prof:
        fn()
    events = prof.key_averages()
    counts[name] = {"_local_scalar_dense": sum(e.count for e in events if e.key == "aten::_local_scalar_dense"),
                    "sync": sum(e.count for e in events if "Synchronize" in e.key)}
    run.metric(f"trace.{name}.scalar_reads", counts[name]["_local_scalar_dense"], "ops",
               label=f"{name}: aten::_local_scalar_dense ops in the trace ({ITERS} iterations)")
run.check("trace.finds_every_item", counts["item_each_iter"]["_local_scalar_dense"] == ITERS
          and counts["item_at_end"]["_local_scalar_dense"] == 1,
          f"{counts['item_each_iter']['_local_scalar_dense']} scalar reads with .item() per iteration, "
          f"{counts['item_at_end']['_local_scalar_dense']} when the loss stays on the device")
run.check_close("loops_agree", torch.tensor(loop_with_item()), torch.tensor(loop_on_device()), rtol=1e-5, atol=1e-3,
                reference_name="the loop without per-iteration syncs")

# %% [markdown]
# ## On a GPU: the measurements
#
# (1) Host-to-device bandwidth from pageable and from pinned memory (a link rate, compared with
# PCIe's datasheet rate, not with HBM). (2) Serial vs two-stream overlap, with the overlap read off
# the profiler timeline: the time during which a host-to-device copy and a kernel were both running.
# (3) The two loops above, timed, and the GPU's idle share in each. (4) `torch.cuda.set_sync_debug_mode`
# turns every hidden sync into a warning: the count is recorded.

# %%
if not gpu:
    for what in ("H2D bandwidth, pageable vs pinned", "serial vs two-stream overlap (timed, and on the timeline)",
                 "per-iteration .item() vs on-device loss (timed, GPU idle share)", "sync debug mode warnings"):
        run.not_run(what, GPU_ONLY)
else:
    nbytes = 4 * n
    for name, src in (("pageable", host), ("pinned", pinned)):
        t = run.time(lambda: src.to(device, non_blocking=True), flush=False)
        run.metric(f"h2d.{name}.gbps", nbytes / t.median_s / 1e9, "GB/s", kind="host_link",
                   label=f"host-to-device copy of {nbytes >> 20} MiB from {name} memory")
    run.metric("h2d.pinned_over_pageable", run.metrics["h2d.pinned.gbps"]["value"]
               / run.metrics["h2d.pageable.gbps"]["value"], "x", label="pinned over pageable H2D copy speed")

    t_copy = run.time(lambda: pinned.to(device, non_blocking=True), flush=False).median_s
    # Balance the stages: as many compute passes as take about as long as the copy (the link's speed
    # differs between machines; the overlap can at best hide the shorter stage).
    t_pass = run.time(lambda: work(x_dev, 1), flush=False).median_s
    passes = max(1, min(64, round(t_copy / t_pass)))
    run.metric("overlap.compute_passes", passes, "passes", label="elementwise passes per chunk, chosen so that "
               "compute takes about as long as the copy")
    run.check_close("overlapped.balanced", overlapped(pinned_chunks, passes)[::every],
                    work(pinned[::every].to(device).double(), passes).float(), rtol=1e-5, atol=1e-5)
    t_work = run.time(lambda: work(x_dev, passes), flush=False).median_s
    t_serial = run.time(lambda: serial(pinned, passes), flush=False).median_s
    t_over = run.time(lambda: overlapped(pinned_chunks, passes), flush=False).median_s
    run.metric("overlap.copy_ms", t_copy * 1e3, "ms", label="the copy alone")
    run.metric("overlap.compute_ms", t_work * 1e3, "ms", label="the compute alone")
    run.metric("overlap.serial_ms", t_serial * 1e3, "ms", label="copy then compute, one stream")
    run.metric("overlap.overlapped_ms", t_over * 1e3, "ms", label=f"{chunks} chunks on two streams")
    run.metric("overlap.speedup", t_serial / t_over, "x", label="serial over two-stream time")
    run.metric("overlap.vs_bound", t_over / max(t_copy, t_work), "x",
               label="two-stream time over max(copy, compute), the best overlap can do")

    with profile(activities=activities) as prof:
        overlapped(pinned_chunks, passes)
        torch.cuda.synchronize()
    spans = {"copy": [], "kernel": []}
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        kind = "copy" if "Memcpy HtoD" in e.name else "kernel"
        spans[kind].append((e.time_range.start, e.time_range.end))
    busy = []  # kernel time as disjoint intervals, so that no copy time is counted twice
    for a0, a1 in sorted(spans["kernel"]):
        if busy and a0 <= busy[-1][1]:
            busy[-1] = (busy[-1][0], max(busy[-1][1], a1))
        else:
            busy.append((a0, a1))
    both = sum(max(0, min(a1, b1) - max(a0, b0)) for a0, a1 in spans["copy"] for b0, b1 in busy)
    copy_total = sum(b - a for a, b in spans["copy"])
    run.metric("timeline.copy_overlapped_fraction", both / copy_total if copy_total else 0.0, "fraction",
               label="share of H2D copy time during which a kernel also ran (profiler timeline)")

    for name, fn in (("item_each_iter", loop_with_item), ("item_at_end", loop_on_device)):
        t = run.time(fn, flush=False)
        run.metric(f"loop.{name}_ms", t.median_s * 1e3, "ms", label=f"{ITERS} iterations, {name}")
        with profile(activities=activities) as prof:
            fn()
        kernels = [(e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type.name == "CUDA"]
        busy = sum(b - a for a, b in kernels)
        span = max(b for _, b in kernels) - min(a for a, _ in kernels)
        run.metric(f"loop.{name}.gpu_idle", 1 - busy / span, "fraction", label=f"{name}: GPU idle share of the span")
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop_with_item()
    torch.cuda.set_sync_debug_mode("default")
    run.metric("sync_debug.warnings", sum("synchroniz" in str(w.message) for w in caught), "warnings",
               label=f"set_sync_debug_mode('warn'): warnings from {ITERS} iterations with .item()")
run.save()
