"""The GPU campaign's preflight: what this machine has, and whether the campaign can run on it at all.

`preflight()` (called by scripts/gpu_campaign.py) runs `python -m scripts._preflight [--gpu]` in its own process
under a time limit, so a stuck driver cannot hang the campaign; that probe prints one JSON line (Python and package
versions, the GPU, its memory and driver, ONNX Runtime's providers, JAX's devices), and what fails to load is
recorded, not fatal. Then it names the packages missing here: REQUIRED ones stop the campaign within seconds,
before any demo starts (without jsonschema, for one, every demo would fail at its last line, writing its record);
a package only some demos import is listed, and those demos record what they could not run.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

from records import digest
from records.paths import REPO_ROOT

# What the harness, the record core and regen import (tests/test_gpu_campaign.py keeps this list true).
REQUIRED = ("torch", "numpy", "jsonschema", "rich", "threadpoolctl")
PROBE_LIMIT_S = 30.0
VERSIONS = ("torch", "triton", "jax", "jaxlib", "onnx", "onnxruntime", "onnxscript", "numpy", "scipy", "scikit-learn",
            "rich", "threadpoolctl", "jsonschema", "cupy-cuda13x", "cupy-cuda12x", "torchao")


def missing(packages) -> list[str]:
    return sorted(p for p in set(packages) if importlib.util.find_spec(p) is None)


def preflight(device: str, env: dict, demos_dir: Path) -> dict:
    """The probe's JSON, plus `missing_required` (the campaign stops) and `missing_packages` (package -> the demo
    files that import it)."""
    started = time.perf_counter()
    info = {"missing_required": missing(REQUIRED)}
    if not info["missing_required"]:  # without them the probe's answer changes nothing: stop at once
        try:
            out = subprocess.run([sys.executable, "-m", "scripts._preflight", *(["--gpu"] if device != "cpu" else [])],
                                 capture_output=True, text=True, timeout=PROBE_LIMIT_S, env=env, cwd=REPO_ROOT)
            info |= json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else \
                {"error": (out.stderr.strip().splitlines() or ["preflight failed"])[-1]}
        except subprocess.TimeoutExpired:
            info["error"] = f"preflight took more than {PROBE_LIMIT_S:.0f} s"
        except (json.JSONDecodeError, IndexError):
            info["error"] = "preflight printed no result"
    imports: dict[str, set[str]] = {}
    for path in sorted(demos_dir.glob("**/*.py")):
        for top in digest.third_party_packages(path):
            imports.setdefault(top, set()).add(path.relative_to(demos_dir.parent).as_posix())
    info["missing_packages"] = {k: sorted(imports[k]) for k in missing(imports)}
    return {**info, "wall_s": round(time.perf_counter() - started, 1)}


def probe(want_gpu: bool) -> dict:
    def get(fn):
        try:
            return fn()
        except Exception as e:
            return None if isinstance(e, md.PackageNotFoundError) else f"unavailable: {type(e).__name__}: {str(e)[:200]}"

    t0 = time.perf_counter()
    info = {"python": sys.version.split()[0], "packages": {name: get(lambda: md.version(name)) for name in VERSIONS}}
    import torch

    info.update(cuda_available=torch.cuda.is_available(), torch_cuda=torch.version.cuda)
    if info["cuda_available"] and want_gpu:
        p, (free, total) = torch.cuda.get_device_properties(0), torch.cuda.mem_get_info()
        info.update(gpu_name=p.name, gpu_count=torch.cuda.device_count(), memory_total_gib=round(total / 2**30, 1),
                    memory_free_gib=round(free / 2**30, 1), sm_count=p.multi_processor_count,
                    capability=f"{p.major}.{p.minor}", l2_mib=round(getattr(p, "L2_cache_size", 0) / 2**20, 1))
        query = "--query-gpu=driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu"
        info["nvidia_smi"] = get(lambda: subprocess.run(["nvidia-smi", query, "--format=csv,noheader"],
                                                        capture_output=True, text=True, timeout=10).stdout.strip())
    info["onnxruntime_providers"] = get(lambda: __import__("onnxruntime").get_available_providers())
    if want_gpu:
        info["jax_devices"] = get(lambda: [str(d) for d in __import__("jax").devices()])
    return {**info, "seconds": round(time.perf_counter() - t0, 1)}


if __name__ == "__main__":
    print(json.dumps(probe("--gpu" in sys.argv[1:])))
