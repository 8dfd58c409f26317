# %% [markdown]
# # Deployment footprint by precision: one model as FP32, FP16, INT8 and INT4 ONNX files
#
# An edge target has a fixed memory (tens of GB shared by CPU and GPU on a Jetson, a few GB on a phone)
# and often a storage and download budget; a data-center GPU has more memory but is paid per token. Lower
# precision shrinks the file and the memory the weights need, and on hardware with the matching kernels
# it speeds up memory-bound layers. This demo exports one MLP (synthetic weights) to ONNX, makes three
# lower-precision copies with ONNX Runtime's own tools, and measures for each: file size, peak process
# memory when loaded and run, latency at batch 1 and at a larger batch, and how far its outputs move
# from FP32's.
#
# - FP16: the model exported from a half-precision copy (weights and activations in FP16).
# - INT8: `onnxruntime.quantization.quantize_dynamic`: weights INT8 per tensor, activations quantized at
#   run time per call (MatMulInteger), so no calibration set is needed.
# - INT4: `MatMulNBitsQuantizer`: weight-only, 4-bit blocks of 32 input channels each with its own scale;
#   activations stay FP32 and the kernel dequantizes weights as it reads them (the MatMulNBits operator).

# %%
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from records.paths import REPO_ROOT
from demos.harness.provenance import cpu_llc_bytes
from demos.harness.run import start
from demos.t4_hardware._model import MLP_SIZES, exported_mlp, make_mlp, ort_session

run = start("precision_footprint", title="ONNX model footprint, latency and accuracy by precision (FP32, FP16, INT8, INT4)",
            sizes={"tiny": ("tiny", 64, 16), "small": ("small", 512, 64), "full": ("full", 1024, 64)}, cpu_threads=1)
model_size, n_eval, big_batch = run.sizes
shape = MLP_SIZES[model_size]
model = make_mlp(shape)
scratch = tempfile.TemporaryDirectory(prefix="precision_footprint-")  # removed when the run ends
folder = Path(scratch.name)
logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # its per-node INFO lines

# %% [markdown]
# ## Four files

# %%
# The FP32 and FP16 exports are cached under .cache/ (keyed by the model's code and the versions); the
# quantized files are made fresh every run from the FP32 one.
files = {"fp32": exported_mlp(model_size, torch.float32), "fp16": exported_mlp(model_size, torch.float16)}
quantize_dynamic(str(files["fp32"]), str(folder / "int8.onnx"), weight_type=QuantType.QInt8)
files["int8"] = folder / "int8.onnx"
quantizer = MatMulNBitsQuantizer(onnx.load(str(files["fp32"])), block_size=32, is_symmetric=True)
quantizer.process()
quantizer.model.save_model_to_file(str(folder / "int4.onnx"), False)
files["int4"] = folder / "int4.onnx"
ops = {name: sorted({n.op_type for n in onnx.load(str(p)).graph.node}) for name, p in files.items()}
run.check("int4.uses_matmulnbits", "MatMulNBits" in ops["int4"] and "MatMul" not in ops["int4"],
          f"INT4 graph ops {ops['int4']}: every MatMul became a 4-bit weight-only MatMulNBits")
run.check("int8.uses_matmulinteger", "MatMulInteger" in ops["int8"], f"INT8 graph ops {ops['int8']}")

# %% [markdown]
# ## Accuracy against FP32
#
# A random evaluation set goes through each file; the reference is the PyTorch model in float64. Two
# numbers per precision: the largest output error relative to the largest reference output, and the
# fraction of inputs whose top-1 class matches the reference (the model is a classifier head with
# synthetic weights, so "accuracy" here is agreement with full precision, the quantity quantization changes).

# %%
x_eval = torch.randn(n_eval, shape[0], generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    reference = model.double()(x_eval.double())
    model.float()
scale = float(reference.abs().max())
sessions = {name: ort_session(p, run.cpu_threads) for name, p in files.items()}
outputs = {}
for name, session in sessions.items():
    dtype = torch.float16 if name == "fp16" else torch.float32
    outputs[name] = torch.from_numpy(session.run(None, {"x": x_eval.to(dtype).numpy()})[0]).double()
run.check_close("fp32.vs_float64", outputs["fp32"], reference, rtol=1e-4, atol=1e-4 * scale)
errors, agreement = {}, {}
for name, out in outputs.items():
    errors[name] = float((out - reference).abs().max()) / scale
    agreement[name] = float((out.argmax(1) == reference.argmax(1)).double().mean())
# Bounds loose enough for any seed, tight enough to catch a broken file (a wrong scale or transposed weight
# gives errors of order 1 and agreement near chance).
for name, bound in (("fp16", 0.01), ("int8", 0.1), ("int4", 0.2)):
    run.check(f"{name}.error_bounded", errors[name] < bound,
              f"max |err| / max |ref| = {errors[name]:.2e} < {bound}; top-1 agreement {agreement[name]:.3f}")
wrong = outputs["int4"][:, torch.randperm(outputs["int4"].shape[1], generator=torch.Generator().manual_seed(2))]
run.check_wrong("permuted_outputs.caught", float((wrong.argmax(1) == reference.argmax(1)).double().mean()) < 0.5,
                "INT4 outputs with their classes shuffled: top-1 agreement collapses, so the agreement check can fail")

# %% [markdown]
# ## Size, peak memory, latency
#
# Peak memory is measured in a fresh process per file (`_ort_child.py`): resident memory before the
# session is created, and the process's peak after loading the file and running one batch. Their
# difference is what the model costs in memory on top of the runtime itself.

# %%
def peak_memory(name: str) -> int:
    dtype = "float16" if name == "fp16" else "float32"
    out = subprocess.run([sys.executable, "-m", "demos.t4_hardware._ort_child", str(files[name]), str(big_batch),
                          str(shape[0]), str(run.cpu_threads), dtype], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return got["peak"] - got["before"]


LAST_LEVEL = cpu_llc_bytes() or 1  # the sessions run on the CPU provider, on a GPU machine too: the CPU's cache
rows, results = [], {}
for name, session in sessions.items():
    dtype = torch.float16 if name == "fp16" else torch.float32
    x1 = torch.randn(1, shape[0]).to(dtype).numpy()
    xb = torch.randn(big_batch, shape[0]).to(dtype).numpy()
    # Host work (ONNX Runtime's CPU provider): on a GPU run, timed without the L2 flush, whose queued GPU
    # work would overlap it.
    t1 = run.time(lambda s=session, x=x1: s.run(None, {"x": x}), flush=False).median_s
    tb = run.time(lambda s=session, x=xb: s.run(None, {"x": x}), flush=False).median_s
    size = files[name].stat().st_size
    mem = peak_memory(name)
    results[name] = (size, mem, t1, tb)
    rows.append([name, round(size / 1e6, 2), round(size / LAST_LEVEL, 2), round(mem / 1e6, 1), round(t1 * 1e3, 3), round(tb * 1e3, 3),
                 f"{errors[name]:.2e}", round(agreement[name], 4), ", ".join(ops[name])])
    run.metric(f"{name}.file_mb", size / 1e6, "MB", label=f"{name}: ONNX file size")
    run.metric(f"{name}.peak_mem_mb", mem / 1e6, "MB", label=f"{name}: peak resident memory over the runtime's own, load + one batch")
    run.metric(f"{name}.batch1_ms", t1 * 1e3, "ms", label=f"{name}: batch-1 latency (ONNX Runtime, CPU)")
    run.metric(f"{name}.batch{big_batch}_ms", tb * 1e3, "ms", label=f"{name}: batch-{big_batch} latency (ONNX Runtime, CPU)")
    run.metric(f"{name}.rel_error", errors[name], "fraction", label=f"{name}: max |output error| / max |FP32 output|")
    run.metric(f"{name}.top1_agreement", agreement[name], "fraction", label=f"{name}: top-1 agreement with float64 PyTorch")
run.table("footprint", f"MLP {shape} as ONNX, by precision (ONNX Runtime CPU, {run.cpu_threads} thread)",
          ["precision", "file MB", "file / last-level cache", "peak MB", "batch-1 ms", f"batch-{big_batch} ms", "max rel err", "top-1 agree", "ops"],
          rows)
for name in ("fp16", "int8", "int4"):
    run.metric(f"{name}.size_ratio", results["fp32"][0] / results[name][0], "x", label=f"FP32 file size over {name}")
    run.metric(f"{name}.batch1_speedup", results["fp32"][2] / results[name][2], "x",
               label=f"{name}: batch-1 speedup over FP32 (ONNX Runtime, CPU)")
    run.metric(f"{name}.mem_ratio", results["fp32"][1] / results[name][1], "x", label=f"FP32 peak memory over {name}")
# A smaller file can also mean weights that now fit in the last-level cache (a CPU's LLC, a GPU's L2), and a
# batch-1 call that streams them from the cache instead of DRAM: part of a speedup may be that, not the kernel.
for name in files:
    run.metric(f"{name}.over_llc", results[name][0] / LAST_LEVEL, "x",
               label=f"{name}: file size over this machine's last-level cache ({LAST_LEVEL / 2**20:.0f} MiB)")
run.check("sizes.shrink", results["fp32"][0] > results["fp16"][0] > results["int8"][0] > results["int4"][0],
          "file size falls with every step down in precision: " +
          ", ".join(f"{k} {v[0] / 1e6:.2f} MB" for k, v in results.items()))

# %% [markdown]
# ## Not run here
#
# TensorRT builds an *engine*: it picks kernels (tactics) by timing them on the GPU it runs on, fuses
# layers and fixes precisions, and serializes the result. The engine is tied to that GPU model and that
# TensorRT version, so it is built per target (on the Jetson itself, or per data-center SKU), usually at
# deployment time, not shipped as one file for all.

# %%
run.not_run("tensorrt", "TensorRT needs an NVIDIA GPU and builds an engine per GPU model and TensorRT version; "
                        "not installed here, and not installed on the project's GPU machine either")
import onnxruntime as ort  # only to ask which execution providers this build has

if "CUDAExecutionProvider" not in ort.get_available_providers():
    run.not_run("onnxruntime CUDA / TensorRT execution providers",
                f"this onnxruntime build has only {ort.get_available_providers()}; the GPU variants need onnxruntime-gpu")

# %%
run.save()
