# %% [markdown]
# # The batch-size regime: batch-1 latency vs throughput, and where the knee is
#
# A data-center GPU serving many users runs large batches for throughput; an edge device serving one
# camera or one user runs batch 1 for latency. The same model behaves differently in the two regimes.
# At batch 1, a fully connected layer does 2 FLOPs per weight it reads: its time is the time to stream
# the weights from memory, whatever the compute peak. Growing the batch reuses each weight for more rows,
# so the time barely moves and throughput grows almost linearly, until the matmuls become
# compute-bound: from then on the time grows with the batch and throughput flattens. That bend is the
# knee. This demo measures it for one small MLP in PyTorch eager and in ONNX Runtime.

# %%
import torch

from demos.harness.provenance import cpu_llc_bytes
from demos.harness.run import start
from demos.t4_hardware._model import MLP_SIZES, exported_mlp, make_mlp, ort_session

run = start("batch_regime", title="Latency and throughput vs batch size, PyTorch eager and ONNX Runtime",
            sizes={"tiny": ("tiny", [1, 4, 16, 64]), "small": ("small", [1, 2, 4, 8, 16, 32, 64, 128, 256]),
                   "full": ("full", [1, 2, 4, 8, 16, 32, 64, 128, 256])},
            cpu_threads=1)
model_size, BATCHES = run.sizes
# One thread on a CPU: small-batch calls are short, and a second thread mostly adds noise; the knee is a
# property of one core's bandwidth-to-compute ratio. On a GPU the model runs on the device.
model = make_mlp(MLP_SIZES[model_size]).to(run.torch_device)
d_in = MLP_SIZES[model_size][0]
weight_bytes = 4 * model.weight_count()
flops_per_sample = model.flops_per_sample()
run.metric("model.weight_mb", weight_bytes / 1e6, "MB", label="MLP weights, FP32", origin="computed")
run.metric("model.mflop_per_sample", flops_per_sample / 1e6, "MFLOP", label="FLOPs per input row", origin="computed")

# %% [markdown]
# ## Two runtimes, one model, checked against each other
#
# The model is exported to ONNX with a symbolic batch axis (once: the file is cached under `.cache/`, keyed
# by the model's code and the versions). Before any timing, ONNX Runtime's output must match PyTorch's at
# the smallest and the largest batch.

# %%
session = ort_session(exported_mlp(model_size, torch.float32), run.cpu_threads)  # exported once, cached
inputs = {b: torch.randn(b, d_in, generator=torch.Generator().manual_seed(b)) for b in BATCHES}
with torch.inference_mode():
    for b in (BATCHES[0], BATCHES[-1]):
        ref = model.cpu().double()(inputs[b].double())
        model.float().to(run.torch_device)
        got = torch.from_numpy(session.run(None, {"x": inputs[b].numpy()})[0])
        run.check_close(f"ort.batch{b}", got, ref, rtol=1e-4, atol=1e-4)
        run.check_close(f"torch.batch{b}", model(inputs[b].to(run.torch_device)), ref, rtol=1e-4, atol=1e-4)

# %% [markdown]
# ## The sweep

# %%
device_inputs = {b: x.to(run.torch_device) for b, x in inputs.items()}
timings = {"torch": [], "ort": []}  # each batch's Timing, per runtime
with torch.inference_mode():
    for b in BATCHES:
        timings["torch"].append(run.time(lambda b=b: model(device_inputs[b])))
        arr = inputs[b].numpy()
        # ONNX Runtime's CPU session is host work: timed without the GPU's L2 flush, whose queued work would
        # overlap it (on a CPU run nothing changes).
        timings["ort"].append(run.time(lambda arr=arr: session.run(None, {"x": arr}), flush=False))
latency = {r: [t.median_s for t in ts] for r, ts in timings.items()}
if run.device.is_gpu:
    run.not_run("ort on the GPU (CUDA execution provider)", "the ONNX Runtime session uses the CPU execution "
                "provider (the GPU machine's onnxruntime is the CPU build): the ORT rows of this record are the host "
                "CPU's, on all its threads, beside PyTorch on the GPU; onnxruntime-gpu would put both on the device")
ORT_WHERE = " (ORT on the host CPU, PyTorch on the GPU)" if run.device.is_gpu else ""

rows = []
for i, b in enumerate(BATCHES):
    rows.append([b, *[round(latency[r][i] * 1e3, 3) for r in ("torch", "ort")],
                 *[round(b / latency[r][i]) for r in ("torch", "ort")]])
run.table("sweep", f"MLP {MLP_SIZES[model_size]} (FP32): latency and throughput vs batch",
          ["batch", "torch ms", "ORT ms", "torch samples/s", "ORT samples/s"], rows)
growth = {r: latency[r][-1] / latency[r][0] for r in latency}  # latency at the largest batch over batch 1's
run.series("latency", f"{BATCHES[-1] // BATCHES[0]}x the batch costs {growth['torch']:.3g}x the latency in eager, "
           f"{growth['ort']:.3g}x in ORT", "batch", "ms",
           {r: (BATCHES, [t * 1e3 for t in latency[r]], timings[r]) for r in latency}, x_log=True, y_log=True)
run.series("throughput", "Throughput vs batch", "batch", "samples/s",
           {r: (BATCHES, [b / t for b, t in zip(BATCHES, latency[r])], timings[r]) for r in latency},
           x_log=True, y_log=True)

# %% [markdown]
# ## The knee, computed
#
# Model the curve as a roofline in batch: time(b) = max(t_weights, b x t_row), where t_weights is the
# batch-1 time (streaming the weights) and t_row the marginal time of one more row in the compute-bound
# regime, the slope of the measured curve between a quarter of the largest batch and the largest. The knee
# is where the two asymptotes cross: b* = t_weights / t_row. Below b*, a bigger
# batch is nearly free throughput; above it, every extra row costs its own compute time and only adds
# latency. The same picture gives the intensity view: at batch b an FP32 layer does 2b FLOPs per 4-byte
# weight, b/2 FLOP per byte, so b* should sit near twice the machine's ridge point (same thread count).

# %%
for r in ("torch", "ort"):
    t1, t_max = latency[r][0], latency[r][-1]
    quarter = min(range(len(BATCHES)), key=lambda i: abs(BATCHES[i] - BATCHES[-1] / 4))
    t_row = (t_max - latency[r][quarter]) / (BATCHES[-1] - BATCHES[quarter])
    knee = t1 / t_row if t_row > 0 else float(BATCHES[-1])
    run.metric(f"{r}.batch1_ms", t1 * 1e3, "ms", label=f"{r}: batch-1 latency")
    run.metric(f"{r}.batch{BATCHES[-1]}_ms", t_max * 1e3, "ms", label=f"{r}: batch-{BATCHES[-1]} latency")
    run.metric(f"{r}.throughput_gain", (BATCHES[-1] / t_max) / (1 / t1), "x",
               label=f"{r}: throughput at batch {BATCHES[-1]} over batch 1")
    run.metric(f"{r}.latency_growth", t_max / t1, "x", label=f"{r}: latency at batch {BATCHES[-1]} over batch 1")
    run.metric(f"{r}.row_ms", t_row * 1e3, "ms", label=f"{r}: marginal time per extra row at large batch")
    # The knee is a model's crossing point evaluated on two measured times, not a point read off the curve:
    # computed (the curve itself says where latency doubled, below).
    run.metric(f"{r}.knee_batch", knee, "rows", origin="computed",
               label=f"{r}: knee b* = batch-1 time / marginal time per row (the roofline-in-batch model's crossing)")
    on_host = r == "ort" and run.device.is_gpu  # then its weights sit in host memory, under the CPU's caches
    resident = (cpu_llc_bytes() or 0) >= weight_bytes if on_host else run.cache_resident(weight_bytes)
    # On a GPU, PyTorch's batch-1 rate is also a fraction of the same-run copy ceiling (both stream device memory;
    # a CPU run's one thread is not comparable with its all-thread ceiling).
    run.metric(f"{r}.batch1_gbps", weight_bytes / t1 / 1e9, "GB/s", kind="memory",
               ceiling="copy_bandwidth" if run.device.is_gpu and r == "torch" else None,
               label=f"{r}: weight bytes / batch-1 time", cache_resident=resident)
    run.metric(f"{r}.largest_gflops", flops_per_sample * BATCHES[-1] / t_max / 1e9, "GFLOP/s", dtype="float32",
               label=f"{r}: FLOP rate at batch {BATCHES[-1]}")
    # The roofline's prediction from two of the same measurements: twice the model's own ridge point, its FLOP
    # rate at the largest batch over its weight bandwidth at batch 1 (FP32 weights: b/2 FLOP per byte at batch b).
    own_ridge = (flops_per_sample * BATCHES[-1] / t_max) / (weight_bytes / t1)
    run.metric(f"{r}.knee_from_ridge", 2 * own_ridge, "rows", origin="computed",
               label=f"{r}: 2 x (FLOP rate at batch {BATCHES[-1]} / weight bytes per second at batch 1)")
    # Where latency first doubles over batch 1, read off the measured curve (no model).
    doubled = next((b for b, t in zip(BATCHES, latency[r]) if t >= 2 * t1), None)
    if doubled is not None:
        run.metric(f"{r}.batch_where_latency_doubles", doubled, "rows",
                   label=f"{r}: smallest measured batch whose latency is at least 2x batch 1's")
run.metric("ort_over_torch.batch1", latency["torch"][0] / latency["ort"][0], "x",
           label="batch-1 latency: PyTorch eager over ONNX Runtime" + ORT_WHERE)
run.metric("ort_over_torch.largest", latency["torch"][-1] / latency["ort"][-1], "x",
           label=f"batch-{BATCHES[-1]} latency: PyTorch eager over ONNX Runtime" + ORT_WHERE)
run.check("sweep.latency_monotone_enough",
          all(latency[r][-1] > latency[r][0] for r in latency),
          "the largest batch takes longer than batch 1 in both runtimes")

# %%
run.save()
