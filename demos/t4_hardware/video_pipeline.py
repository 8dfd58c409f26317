# %% [markdown]
# # Real-time video enhancement: a per-frame budget, p99 and dropped frames
#
# The design question: enhance 1080p video at 30 fps, so each frame has a 33.3 ms budget from arrival to
# output, end to end: decode, pre-process, infer, post-process, encode. What matters is not the mean but
# the tail: a frame that misses its deadline is dropped or shown late, and at 30 fps one miss per hundred
# frames is a visible stutter every three seconds. This demo measures a tiny enhancement net (three 3x3
# convolutions and a residual) frame by frame, replays the measured service times through a 30 fps
# arrival simulation with deadlines, and computes when batching frames from several streams helps and
# when it breaks the deadline. The frame is downscaled on a CPU (a quarter of 1080p per side at the small
# size); 1080p is projected by scaling with the pixel count, and labelled as a projection.

# %%

import torch

from demos.harness.run import start
from demos.t4_hardware._model import Enhancer
from records.inputs import declare

INPUTS = declare(datasheets=["h100", "l4", "jetson-agx-orin"])  # the targets' published figures

run = start("video_pipeline", title="Real-time video enhancement: per-frame latency, p99, deadlines and batching",
            sizes={"tiny": ((68, 120), 40, [1, 2, 4]), "small": ((270, 480), 150, [1, 2, 4, 8]),
                   "full": ((1080, 1920), 300, [1, 2, 4, 8, 16])},
            cpu_threads=1)
(height, width), n_frames, STREAM_BATCHES = run.sizes
FPS, BUDGET = 30.0, 1 / 30.0
net = Enhancer().to(run.torch_device).eval()
pixels, pixels_1080p = height * width, 1080 * 1920
scale_to_1080p = pixels_1080p / pixels
run.metric("budget_ms", BUDGET * 1e3, "ms", label=f"frame budget at {FPS:g} fps (1 / fps)", origin="computed")
run.metric("frame.pixels", pixels, "pixels", label=f"frame measured here: {width}x{height}")
run.metric("frame.scale_to_1080p", scale_to_1080p, "x", label="1080p pixels over the measured frame's", origin="computed")
run.metric("net.gflop_1080p", net.flops_per_pixel() * pixels_1080p / 1e9, "GFLOP", label="the net's FLOPs per 1080p frame", origin="computed")

# %% [markdown]
# ## The stages
#
# Pre-process: the decoded frame arrives as 8-bit HWC; the net wants float CHW in [0, 1]. Post-process:
# clamp, back to 8-bit HWC. Both run in PyTorch on the device. The net is checked against a float64 run
# of the same weights before it is timed.

# %%
def preprocess(frame_u8):
    return frame_u8.permute(2, 0, 1).unsqueeze(0).float().div_(255.0)


def postprocess(y):
    return y.squeeze(0).clamp(0, 1).mul(255.0).round().to(torch.uint8).permute(1, 2, 0).contiguous()


g = torch.Generator().manual_seed(0)
frames = [torch.randint(0, 256, (height, width, 3), dtype=torch.uint8, generator=g).to(run.torch_device)
          for _ in range(4)]
with torch.inference_mode():
    x = preprocess(frames[0])
    ref = Enhancer().double()(x.double().cpu())
    # On a GPU, cuDNN runs FP32 convolutions in TF32 by default (10-bit mantissa): a looser tolerance there.
    tol = 5e-3 if run.device.is_gpu else 1e-4
    run.check_close("net.vs_float64", net(x), ref, rtol=tol, atol=tol)
    out = postprocess(net(x))
    run.check("post.shape_dtype", out.shape == frames[0].shape and out.dtype == torch.uint8,
              f"output frame {tuple(out.shape)} {out.dtype}, same layout as the input")
    stage_t = {"pre-process": run.time(lambda: preprocess(frames[0])),
               "infer": run.time(lambda: net(x)),
               "post-process": run.time(lambda: postprocess(x))}
stage_s = {stage: t.median_s for stage, t in stage_t.items()}
for stage, seconds in stage_s.items():
    run.metric(f"stage.{stage.replace('-', '_')}_ms", seconds * 1e3, "ms", label=f"{stage}, {width}x{height}, median")
# cuDNN's float32 convolutions use TF32 unless told otherwise: the rate is then bounded by the TF32 peak.
tf32 = run.device.is_gpu and torch.backends.cudnn.allow_tf32
run.metric("infer.gflops", net.flops_per_pixel() * pixels / stage_s["infer"] / 1e9, "GFLOP/s",
           dtype="tfloat32" if tf32 else "float32", label="the net's FLOP rate, batch 1" + (" (TF32)" if tf32 else ""))

# %% [markdown]
# ## Frame by frame: the latency distribution
#
# Each frame is pre-processed, enhanced and post-processed, and each is timed on its own (synchronised),
# after a few warm-up frames, so the distribution includes whatever the machine does to the tail.

# %%
with torch.inference_mode():
    for f in frames:
        postprocess(net(preprocess(f)))
    service = [run.first_call(lambda f=f: postprocess(net(preprocess(f))))[1]
               for f in (frames[i % len(frames)] for i in range(n_frames))]


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


p50, p99 = pct(service, 50), pct(service, 99)
run.metric("service.p50_ms", p50 * 1e3, "ms", label=f"per-frame service time (pre + infer + post), p50, {width}x{height}")
run.metric("service.p99_ms", p99 * 1e3, "ms", label=f"per-frame service time, p99, {width}x{height}")
run.metric("service.p99_over_p50", p99 / p50, "x", label="service time p99 over p50")

# %% [markdown]
# ## 30 fps with deadlines
#
# Frames arrive every 33.3 ms. One worker takes the newest waiting frame whenever it is free; older
# waiting frames are dropped (showing a stale frame late is worse than skipping it). A processed frame
# meets its deadline if it is done within one frame period of its arrival. Replayed twice with the
# measured service times: as measured, and scaled to 1080p by pixel count (a projection: the net's work is
# linear in pixels). Decode and encode are not in the measured time: on an NVIDIA GPU they run on the
# NVDEC/NVENC engines beside the CUDA cores (costs cited on the page).

# %%
def simulate(times, period=BUDGET):
    free_at, waiting, latencies, dropped, late = 0.0, None, [], 0, 0
    n = len(times)
    arrivals = [i * period for i in range(n)]
    i, k = 0, 0  # next arrival, next service sample
    while i < n or waiting is not None:
        # admit every frame that has arrived by the time the worker is free; keep only the newest
        while i < n and (arrivals[i] <= free_at or waiting is None):
            if waiting is not None:
                dropped += 1
            waiting = i
            i += 1
        start_t = max(free_at, arrivals[waiting])
        free_at = start_t + times[k % len(times)]
        k += 1
        latency = free_at - arrivals[waiting]
        latencies.append(latency)
        late += latency > period
        waiting = None
    return latencies, dropped, late


rows = []
for name, factor in (("measured", 1.0), ("1080p projected", scale_to_1080p)):
    lat, dropped, late = simulate([t * factor for t in service])
    key = "measured" if factor == 1.0 else "p1080"
    run.check(f"sim.{key}.conservation", len(lat) + dropped == n_frames,
              f"{len(lat)} processed + {dropped} dropped = {n_frames} frames")
    run.metric(f"sim.{key}.p50_ms", pct(lat, 50) * 1e3, "ms", label=f"{name}: arrival-to-output latency p50 at 30 fps", origin="computed")
    run.metric(f"sim.{key}.p99_ms", pct(lat, 99) * 1e3, "ms", label=f"{name}: arrival-to-output latency p99 at 30 fps", origin="computed")
    run.metric(f"sim.{key}.dropped_fraction", dropped / n_frames, "fraction", label=f"{name}: frames dropped", origin="computed")
    run.metric(f"sim.{key}.late_fraction", late / n_frames, "fraction", label=f"{name}: frames output after their 33.3 ms deadline", origin="computed")
    rows.append([name, round(pct(lat, 50) * 1e3, 2), round(pct(lat, 99) * 1e3, 2), dropped, late, n_frames])
run.table("deadlines", "30 fps arrival simulation from the measured per-frame service times",
          ["frames", "p50 ms", "p99 ms", "dropped", "late", "total"], rows)

# %% [markdown]
# ## Batching across streams
#
# With S cameras, the S frames of one tick can run as one batch. Batching raises throughput only while
# the device has idle parallelism to fill (many small kernels on a GPU; less so for a CPU core already
# busy); but the whole batch finishes together, so every frame in it waits for the batch. The rule: the
# batch's service time (pre + infer + post for all S frames) must fit in the 33.3 ms budget.

# %%
batch_t = {}
with torch.inference_mode():
    for b in STREAM_BATCHES:
        xb = torch.cat([preprocess(frames[i % len(frames)]) for i in range(b)])
        batch_t[b] = run.time(lambda xb=xb: net(xb))
batch_s = {b: t.median_s for b, t in batch_t.items()}
pre_post = stage_s["pre-process"] + stage_s["post-process"]
# A batch's total comes from three timings: its point carries the largest of their spreads.
total_spread = [max(t.spread, stage_t["pre-process"].spread, stage_t["post-process"].spread) for t in batch_t.values()]
b_rows, fits_measured, fits_1080p = [], [], []
for b, t in batch_s.items():
    total = t + b * pre_post
    b_rows.append([b, round(t * 1e3, 2), round(total * 1e3, 2), round(b / total, 1),
                   round(total * scale_to_1080p * 1e3, 1), "yes" if total <= BUDGET else "no",
                   "yes" if total * scale_to_1080p <= BUDGET else "no"])
    fits_measured.append(total <= BUDGET)
    fits_1080p.append(total * scale_to_1080p <= BUDGET)
run.table("stream_batching", f"S streams batched per tick ({width}x{height} measured; 1080p projected by pixels)",
          ["streams S", "infer ms", "S frames total ms", "frames/s", "1080p total ms (projected)",
           "fits 33.3 ms", "fits at 1080p"], b_rows)


def streams_fitting(fits):  # the largest batch tried whose service time fits the budget, in words
    n = max([b for b, ok in zip(batch_s, fits) if ok], default=0)
    return f"{n} stream{'s' if n > 1 else ''}" if n else "none"


fit_words = f"{BUDGET * 1e3:.1f} ms budget fits {streams_fitting(fits_measured)} at {width}x{height}"
if scale_to_1080p != 1:
    fit_words += f", {streams_fitting(fits_1080p)} at 1080p (projected)"
run.series("stream_batching", fit_words, "streams batched", "ms",
           {f"measured {width}x{height}": (list(batch_s), [r[2] for r in b_rows], total_spread),
            "1080p (projected)": (list(batch_s), [r[4] for r in b_rows])},
           hlines={"33.3 ms budget": BUDGET * 1e3}, x_log=True, y_log=True)
largest = max(batch_s)
run.metric("batch.throughput_gain", (largest / batch_s[largest]) / (1 / batch_s[1]), "x",
           label=f"inference throughput, {largest} frames batched over 1")
# The S = 1 point of this sweep is the same one-frame inference as stage.infer_ms, timed again later in the run:
# the gap between the two is what this machine's noise does to one timing, the yardstick for the gain above.
run.metric("batch.infer_one_ms", batch_s[1] * 1e3, "ms",
           label=f"inference of one frame in the batch sweep (S = 1), {width}x{height}, median (stage.infer_ms timed again)")
# Every frame of a batch waits for all of it: the batch's inference time over one frame's is what it costs in latency.
run.metric("batch.latency_growth", batch_s[largest] / batch_s[1], "x",
           label=f"inference time of {largest} frames batched over one frame's (the latency each frame of the batch pays)")
run.metric("batch.max_streams_measured", max([b for b, ok in zip(batch_s, fits_measured) if ok], default=0), "streams",
           label=f"largest measured batch whose total fits 33.3 ms ({width}x{height})")

# %% [markdown]
# ## Per target: the 1080p frame on the datasheets' rooflines
#
# A lower bound only: the net's FLOPs per 1080p frame over each chip's dense FP16 peak, and its activation
# traffic (each layer reading its input and writing its output once, in FP16) over its bandwidth. Real
# kernels reach a fraction of both, and small convolutions (3 to 16 channels) use tensor cores poorly, so
# the bound says which targets are hopeless, not which are sufficient.

# %%
sheets = {chip: INPUTS.datasheet(chip) for chip in ("h100", "l4", "jetson-agx-orin")}
t_rows = []
for chip in ("h100", "l4", "jetson-agx-orin"):
    s = sheets[chip]
    compute_s = net.flops_per_pixel() * pixels_1080p / (s["tflops"]["float16"] * 1e12)
    memory_s = net.activation_bytes_per_pixel(2) * pixels_1080p / (s["memory_gbps"] * 1e9)
    bound = max(compute_s, memory_s)
    run.metric(f"target.{chip}.bound_ms", bound * 1e3, "ms", label=f"{s['label']}: roofline lower bound per 1080p frame (FP16)", origin="computed")
    t_rows.append([s["label"], round(compute_s * 1e3, 3), round(memory_s * 1e3, 3),
                   "memory" if memory_s > compute_s else "compute", round(BUDGET / bound)])
run.table("targets", "Lower bound per 1080p frame from published peaks (FP16, dense), and frames per budget",
          ["chip", "compute ms", "memory ms", "bound by", "frames per 33.3 ms at the bound"], t_rows)
if not run.device.is_gpu:
    run.not_run("nvdec/nvenc decode and encode", "hardware video engines exist only on the GPU machine; their "
                "throughput is cited from NVIDIA's Video Codec SDK documentation on the page")
    run.not_run("fp16 / tensorrt per-frame net", "FP16 tensor-core inference needs a GPU; on a CPU the net runs in FP32")
else:
    run.not_run("nvdec/nvenc decode and encode", "frames are synthetic tensors already on the device: this demo "
                "drives no video engine; their throughput is cited on the page")
    run.not_run("fp16 / tensorrt per-frame net", "not measured by this demo: the net runs in FP32 (TF32 convolutions) on "
                "the GPU, and TensorRT is not installed")

# %%
run.save()
