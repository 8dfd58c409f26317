# %% [markdown]
# # Host-device transfers: pinned vs pageable, blocking vs non-blocking, overlap, and a pipeline refactor
#
# A GPU reads host memory over its host link (PCIe Gen5 x16 on an H100 SXM: about 64 GB/s each
# way, against 3.35 TB/s of HBM). Three habits decide how much of that link a program gets:
#
# - **Pinned (page-locked) host memory.** The GPU's copy engine can only DMA from pinned pages;
#   a copy from ordinary (pageable) memory is staged by the driver through a pinned buffer, and
#   it blocks the host.
# - **`non_blocking=True`** from pinned memory queues the copy and returns at once, so the host
#   can prepare the next batch, and a copy on a side stream can overlap a kernel on another.
# - **Fewer transfers.** Each copy and each `.item()` / `.cpu()` costs a fixed latency and a
#   host-device synchronisation; a pipeline that moves data once and keeps results on the device
#   removes both.
#
# On a CPU run the GPU measurements are recorded as not run; the pipeline refactor still runs,
# and its transfers and bytes are counted and checked against their formulas.

# %%
import numpy as np
import torch

from demos.harness.run import start
from records.inputs import declare

INPUTS = declare(datasheets=["{device}"])  # this GPU's host-link rating

run = start(
    "host_device_transfers",
    title="Pinned vs pageable, blocking vs non_blocking, copy/compute overlap, and a pipeline that moves data once",
    sizes={  # (copy sizes in MiB, overlap chunks x chunk MiB, pipeline rows, features, batch)
        "tiny": ([1, 4], (4, 4), 4096, 64, 256),
        "small": ([1, 4, 16, 64], (8, 16), 32768, 256, 512),
        "full": ([1, 4, 16, 64, 256], (16, 64), 262144, 784, 1024),
    },
    cpu_threads=1,
)
device = run.torch_device
copy_mib, (n_chunks, chunk_mib), n_rows, n_features, batch = run.sizes
gpu = run.device.is_gpu
# The host link's one-way rating for this GPU's class, from records/datasheets.toml (PCIe Gen5 x16 on an
# H100 or H200: 32 GT/s x 16 lanes x 128/130 / 8 = 63 GB/s each way; NVLink-C2C on a GH200). The check
# refuses a host_link rate above it; a class the datasheets do not list gets no fraction.
LINK = (INPUTS.datasheet(run.device.device_class) or {}).get("host_link_gbps") if gpu else None
GPU_ONLY = "needs a CUDA GPU (pinned memory, copy engines and streams are GPU features)"

# %% [markdown]
# ## Bandwidth: pageable vs pinned, each direction
#
# One copy of each size, timed with CUDA events (no L2 flush: the source is host memory).

# %%
if gpu:
    rows = []
    for mib in copy_mib:
        n = mib * 2**20 // 4
        pageable = torch.randn(n)
        pinned = pageable.pin_memory()
        on_gpu = torch.empty(n, device=device)
        back_pinned = torch.empty(n, pin_memory=True)
        t = {
            "h2d pageable": run.time(lambda: on_gpu.copy_(pageable), flush=False).median_s,
            "h2d pinned": run.time(lambda: on_gpu.copy_(pinned, non_blocking=True), flush=False).median_s,
            "d2h pageable": run.time(lambda: on_gpu.cpu(), flush=False).median_s,
            "d2h pinned": run.time(lambda: back_pinned.copy_(on_gpu, non_blocking=True), flush=False).median_s,
        }
        gbps = {k: mib * 2**20 / v / 1e9 for k, v in t.items()}
        rows.append([mib] + [round(gbps[k], 1) for k in t]
                    + [round(gbps["h2d pinned"] / LINK, 2) if LINK else None])
        for k, v in gbps.items():
            run.metric(f"{k.replace(' ', '_')}.{mib}mib.gbps", v, "GB/s", label=f"{k}, {mib} MiB", kind="host_link")
    rating = f"link rating {LINK} GB/s each way" if LINK else "no link rating for this GPU class"
    run.table("bandwidth", f"Host-device copy bandwidth (GB/s); {rating}",
              ["MiB", "H2D pageable", "H2D pinned", "D2H pageable", "D2H pinned", "H2D pinned / rating"], rows)
    if LINK:
        run.metric("h2d_pinned_fraction_of_link", rows[-1][2] / LINK, "fraction",
                   label=f"pinned H2D at {copy_mib[-1]} MiB over the host link's one-way rating")
    else:
        run.not_run("pinned H2D as a fraction of the link rating",
                    f"records/datasheets.toml gives no host_link_gbps for {run.device.device_class}")
    run.metric("pinned_over_pageable_h2d", rows[-1][2] / rows[-1][1], "x", label=f"pinned over pageable H2D at {copy_mib[-1]} MiB")
else:
    run.not_run("copy bandwidth, pageable vs pinned (H2D and D2H)", GPU_ONLY)

# %% [markdown]
# ## Blocking vs non-blocking: does the host wait?
#
# Copy one chunk to the GPU, then do host work of about the same length (preparing the next
# batch, here a NumPy reduction). A blocking copy from pageable memory makes the host wait
# first; a non-blocking copy from pinned memory runs while the host works.

# %%
if gpu:
    n = chunk_mib * 2**20 // 4
    pageable, dst = torch.randn(n), torch.empty(n, device=device)
    pinned = pageable.pin_memory()
    host_data = np.random.default_rng(0).random(n // 2)
    t_host = run.time(lambda: host_data.sum(), flush=False).median_s
    t_block = run.time(lambda: (dst.copy_(pageable), host_data.sum()), flush=False).median_s
    t_async = run.time(lambda: (dst.copy_(pinned, non_blocking=True), host_data.sum()), flush=False).median_s
    t_copy = run.time(lambda: dst.copy_(pinned, non_blocking=True), flush=False).median_s
    run.table("blocking", f"{chunk_mib} MiB copy + host work", ["variant", "ms"],
              [["host work alone", round(t_host * 1e3, 3)], ["pinned copy alone", round(t_copy * 1e3, 3)],
               ["pageable copy, then host work (blocking)", round(t_block * 1e3, 3)],
               ["pinned non_blocking copy + host work", round(t_async * 1e3, 3)]])
    run.metric("non_blocking_saving", t_block / t_async, "x", label="blocking pageable copy + host work over the non-blocking pinned one")
else:
    run.not_run("blocking vs non_blocking copy with host work", GPU_ONLY)

# %% [markdown]
# ## Copy/compute overlap with two streams
#
# `n_chunks` chunks must each be copied in and then multiplied by a weight matrix. Serial: copy,
# compute, copy, compute on one stream. Pipelined: a copy stream fetches chunk i+1 while the
# compute stream works on chunk i; an event per chunk orders the compute after its copy. Best
# possible: max(total copy, total compute) plus one chunk of the other.

# %%
if gpu:
    rows_per_chunk = chunk_mib * 2**20 // 4 // 1024
    chunks = [torch.randn(rows_per_chunk, 1024).pin_memory() for _ in range(n_chunks)]
    dev_chunks = [torch.empty(rows_per_chunk, 1024, device=device) for _ in range(n_chunks)]
    weight = torch.randn(1024, 1024, device=device)
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()

    def serial():
        for h, d in zip(chunks, dev_chunks):
            d.copy_(h)
            d @ weight

    def pipelined():
        # Both side streams start after everything already queued on the current stream (the timing
        # event, and the previous call's work), so one call never overlaps the next.
        copy_stream.wait_stream(torch.cuda.current_stream())
        compute_stream.wait_stream(torch.cuda.current_stream())
        copied = []
        with torch.cuda.stream(copy_stream):
            for h, d in zip(chunks, dev_chunks):
                d.copy_(h, non_blocking=True)
                event = torch.cuda.Event()
                event.record(copy_stream)
                copied.append(event)
        with torch.cuda.stream(compute_stream):
            for d, event in zip(dev_chunks, copied):
                compute_stream.wait_event(event)
                d @ weight
        torch.cuda.current_stream().wait_stream(compute_stream)

    t_copy = run.time(lambda: [d.copy_(h, non_blocking=True) for h, d in zip(chunks, dev_chunks)], flush=False).median_s
    t_compute = run.time(lambda: [d @ weight for d in dev_chunks], flush=False).median_s
    t_serial, t_pipe = run.time(serial, flush=False).median_s, run.time(pipelined, flush=False).median_s
    ideal = max(t_copy, t_compute) + min(t_copy, t_compute) / n_chunks
    run.table("overlap", f"{n_chunks} chunks of {chunk_mib} MiB: copy in, then a 1024x1024 matmul", ["variant", "ms"],
              [[k, round(v * 1e3, 3)] for k, v in {"copies alone": t_copy, "computes alone": t_compute, "serial": t_serial,
                                                  "pipelined (2 streams)": t_pipe, "best possible": ideal}.items()])
    run.metric("overlap.speedup", t_serial / t_pipe, "x", label="serial over pipelined")
    run.metric("overlap.fraction_of_ideal", ideal / t_pipe, "fraction", label="best possible time over the pipelined time")
else:
    run.not_run("copy/compute overlap on two CUDA streams", GPU_ONLY)

# %% [markdown]
# ## A data pipeline that moves data once
#
# A small classifier trained for one epoch over a uint8 data set (like images). **Before**: every
# batch is converted to float32 on the host, copied to the device (features and labels), and the
# loss is read back with `.item()` for logging, which synchronises the host with the device every
# step. **After**: the uint8 data set and labels are copied once (from pinned memory on a GPU),
# batches are slices on the device, the conversion runs on the device, and the loss is summed on
# the device and read once. Every transfer goes through one counter, so the count and bytes are
# measured on any device; on a GPU the profiler's memcpy count must agree with it.

# %%
class Mover:
    """Every host<->device movement of the pipeline goes through here and is counted."""

    def __init__(self):
        self.h2d = self.d2h = self.h2d_bytes = self.d2h_bytes = 0

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        self.h2d += 1
        self.h2d_bytes += t.numel() * t.element_size()
        if gpu:
            return t.pin_memory().to(device, non_blocking=True)
        return t.to(device)

    def item(self, t: torch.Tensor) -> float:
        self.d2h += 1
        self.d2h_bytes += t.element_size()
        return t.item()


rng = np.random.default_rng(run.options.seed)
X_u8 = rng.integers(0, 256, (n_rows, n_features), dtype=np.uint8)
labels = (X_u8[:, :8].astype(np.int64).sum(1) > 8 * 127.5).astype(np.int64)
n_batches = n_rows // batch


def to_unit(x_u8: torch.Tensor) -> torch.Tensor:
    """uint8 pixels to float32 in [0, 1], bit for bit the same on the host and on the device.

    The two pipelines must see the same numbers: `before` scales on the host, `after` on the device.
    `x.float() / 255` is not the same computation on both: the CPU kernel divides (correctly rounded),
    while CUDA's division by a scalar multiplies by its reciprocal, float32(1/255), which is one ulp
    off the quotient for 126 of the 256 byte values. One float32 multiply by that same constant is
    correctly rounded on either device, so both pipelines get identical inputs. One ulp matters: at the
    full size, SGD at lr 0.1 on these uncentred inputs is chaotic (the step loss swings 0.61-0.76), and
    a 1e-7 relative change anywhere grows to a few 1e-2 in the weights within the epoch."""
    return x_u8.float() * (1 / 255)


def new_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(n_features, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2)).to(device)


def epoch_before(model, mover):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    log = []
    for b in range(n_batches):
        xb = mover.to_device(to_unit(torch.from_numpy(X_u8[b * batch:(b + 1) * batch])))  # scaled on the host
        yb = mover.to_device(torch.from_numpy(labels[b * batch:(b + 1) * batch]))
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.append(mover.item(loss))
    return sum(log) / n_batches


def epoch_after(model, mover):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    X_dev, y_dev = mover.to_device(torch.from_numpy(X_u8)), mover.to_device(torch.from_numpy(labels))
    total = torch.zeros((), device=device)
    for b in range(n_batches):
        xb = to_unit(X_dev[b * batch:(b + 1) * batch])  # scaled on the device, to the same bits
        loss = torch.nn.functional.cross_entropy(model(xb), y_dev[b * batch:(b + 1) * batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.detach()
    return mover.item(total) / n_batches


results = {}
for name, epoch in (("before", epoch_before), ("after", epoch_after)):
    model, mover = new_model(), Mover()
    mean_loss = epoch(model, mover)
    results[name] = (model, mover, mean_loss)
    run.log(f"  {name}: {mover.h2d} H2D ({mover.h2d_bytes / 2**20:.1f} MiB), {mover.d2h} D2H, mean loss {mean_loss:.4f}")

before, after = results["before"][1], results["after"][1]
w_before = torch.cat([p.detach().flatten() for p in results["before"][0].parameters()])
w_after = torch.cat([p.detach().flatten() for p in results["after"][0].parameters()])
# Same init (drawn on the host), same batches in the same order, same input bits (to_unit) and the same
# kernels on one device, none of them with atomics: the weights agree to the bit, so the fp32 tolerance
# has room. A real difference in the refactor would not stay inside it (see to_unit).
run.check_close("pipeline.same_weights", w_after, w_before, rtol=1e-4, atol=1e-5, reference_name="the per-batch pipeline")
expected = {"before.h2d": 2 * n_batches, "before.d2h": n_batches, "after.h2d": 2, "after.d2h": 1,
            "before.h2d_bytes": n_batches * batch * (4 * n_features + 8), "after.h2d_bytes": n_rows * (n_features + 8)}
got = {"before.h2d": before.h2d, "before.d2h": before.d2h, "after.h2d": after.h2d, "after.d2h": after.d2h,
       "before.h2d_bytes": before.h2d_bytes, "after.h2d_bytes": after.h2d_bytes}
run.check("pipeline.transfer_counts", got == expected, f"counted {got}, formulas {expected}")
if gpu:
    from torch.profiler import ProfilerActivity, profile

    for name, epoch in (("before", epoch_before), ("after", epoch_after)):
        model = new_model()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            epoch(model, Mover())
        copies = sum(e.count for e in prof.key_averages() if "Memcpy HtoD" in e.key)
        run.check(f"pipeline.{name}.profiler_agrees", copies >= expected[f"{name}.h2d"],
                  f"profiler: {copies} HtoD memcpys (at least the counted ones); counted {expected[f'{name}.h2d']}")
else:
    run.not_run("profiler count of memcpy events", GPU_ONLY)

t_before = run.time(lambda: epoch_before(new_model(), Mover()), flush=False).median_s
t_after = run.time(lambda: epoch_after(new_model(), Mover()), flush=False).median_s
for k in ("h2d", "d2h", "h2d_bytes"):
    run.metric(f"pipeline.before.{k}", got[f"before.{k}"], "B" if "bytes" in k else "transfers", label=f"per-batch pipeline: {k}")
    run.metric(f"pipeline.after.{k}", got[f"after.{k}"], "B" if "bytes" in k else "transfers", label=f"move-once pipeline: {k}")
run.metric("pipeline.bytes_ratio", before.h2d_bytes / after.h2d_bytes, "x", label="H2D bytes before over after")
run.metric("pipeline.before_ms", t_before * 1e3, "ms", label=f"one epoch ({n_batches} steps), per-batch transfers and .item()")
run.metric("pipeline.after_ms", t_after * 1e3, "ms", label="one epoch, data moved once, loss read once")
run.metric("pipeline.speedup", t_before / t_after, "x", label="epoch time before over after")
run.table("pipeline", f"One epoch: {n_rows} rows x {n_features} uint8 features, batch {batch} ({n_batches} steps)",
          ["pipeline", "H2D copies", "H2D MiB", "D2H reads (syncs)", "epoch (ms)"],
          [["per batch (before)", before.h2d, round(before.h2d_bytes / 2**20, 2), before.d2h, round(t_before * 1e3, 2)],
           ["move once (after)", after.h2d, round(after.h2d_bytes / 2**20, 2), after.d2h, round(t_after * 1e3, 2)]])
run.save()
