"""The GPU campaign's preflight probe: `python -m scripts._preflight [--gpu]` prints one JSON line about this
machine (Python and package versions, the GPU, its memory and driver, ONNX Runtime's providers, JAX's devices).
Run in its own process under a time limit (scripts/gpu_campaign.py), so a stuck driver cannot hang the campaign;
what fails to load is recorded, not fatal."""

import importlib.metadata as md
import json
import subprocess
import sys
import time

WANT_GPU = "--gpu" in sys.argv[1:]
t0 = time.perf_counter()


def probe(get):
    try:
        return get()
    except Exception as e:
        return None if isinstance(e, md.PackageNotFoundError) else f"unavailable: {type(e).__name__}: {str(e)[:200]}"


info = {"python": sys.version.split()[0], "packages": {name: probe(lambda: md.version(name)) for name in (
    "torch", "triton", "jax", "jaxlib", "onnx", "onnxruntime", "onnxscript", "numpy", "scipy", "scikit-learn",
    "rich", "threadpoolctl", "jsonschema", "cupy-cuda13x", "cupy-cuda12x", "torchao")}}
import torch
info.update(cuda_available=torch.cuda.is_available(), torch_cuda=torch.version.cuda)
if info["cuda_available"] and WANT_GPU:
    p, (free, total) = torch.cuda.get_device_properties(0), torch.cuda.mem_get_info()
    info.update(gpu_name=p.name, gpu_count=torch.cuda.device_count(), memory_total_gib=round(total / 2**30, 1),
                memory_free_gib=round(free / 2**30, 1), sm_count=p.multi_processor_count,
                capability=f"{p.major}.{p.minor}", l2_mib=round(getattr(p, "L2_cache_size", 0) / 2**20, 1))
    query = "--query-gpu=driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu"
    info["nvidia_smi"] = probe(lambda: subprocess.run(["nvidia-smi", query, "--format=csv,noheader"],
                                                      capture_output=True, text=True, timeout=10).stdout.strip())
info["onnxruntime_providers"] = probe(lambda: __import__("onnxruntime").get_available_providers())
if WANT_GPU:
    info["jax_devices"] = probe(lambda: [str(d) for d in __import__("jax").devices()])
info["seconds"] = round(time.perf_counter() - t0, 1)
print(json.dumps(info))
