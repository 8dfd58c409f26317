# %% [markdown]
# # Ahead-of-time vs just-in-time compilation: what a cold start costs
#
# A JIT compiler (`torch.compile`) traces and compiles the model inside the serving process, the first time
# it sees each input shape: that compile time lands on the first request after every restart or
# scale-out. An AOT flow does it once, at build time: `torch.export` captures the whole graph, and
# AOTInductor compiles it to a shared library packaged in a `.pt2` file that a process only has to load.
# TensorRT engines and ONNX Runtime's saved optimized models make the same trade. On an edge device, where
# the compiler toolchain may not even be installed and a reboot must be fast, AOT is the default.
#
# Each cold start is measured as a whole fresh process (Python, imports, model, first call, output
# checked), so the three differ only in how the model is made runnable: eager, AOT package loaded, or
# JIT-compiled in process with an empty compile cache.

# %%
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from records import atomic
from records.paths import REPO_ROOT
from demos.harness.run import start
from demos.t4_hardware._model import CACHE, MLP_SIZES, make_mlp, mlp_key

run = start("aot_vs_jit", title="AOTInductor package vs torch.compile JIT: compile and cold-start times",
            sizes={"tiny": "tiny", "small": "small", "full": "full"}, cpu_threads=1)
size = run.sizes
device = run.torch_device.type
model = make_mlp(MLP_SIZES[size]).to(run.torch_device)
x = torch.randn(8, MLP_SIZES[size][0], generator=torch.Generator().manual_seed(3)).to(run.torch_device)

# %% [markdown]
# ## Build time: export and compile ahead of time
#
# The package goes under `.cache/` (ignored by git), named by a hash of the model's code, the torch
# version, the size and the device. Building it is a cold compile (the harness gives each run an empty
# Inductor cache; the C++ compiler, g++ on a CPU, is part of it), timed once and stored beside the package
# with the time it was built: a later run reuses the package and reports the build-time figures it was
# built with, as a deployment would (the build happens once per target, not per start).

# %%
package = CACHE / f"mlp_{size}_{device}_{mlp_key(size, device)}.pt2"
built_file = package.with_suffix(".json")
if package.exists() and built_file.exists():
    built = json.loads(built_file.read_text())
    run.log(f"reusing {package.name}, built {built['utc']} (export {built['export_s']:.1f} s, compile {built['compile_s']:.1f} s)")
else:
    package.parent.mkdir(parents=True, exist_ok=True)
    exported, export_s = run.first_call(lambda: torch.export.export(model, (x,)))
    _, compile_s = run.first_call(lambda: torch._inductor.aoti_compile_and_package(exported, package_path=str(package)))
    built = {"export_s": export_s, "compile_s": compile_s, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic.write_json(built_file, built)
export_s, compile_s = built["export_s"], built["compile_s"]
run.metric("aot.export_s", export_s, "s", label=f"torch.export.export (graph capture), timed when the package was built ({built['utc']})")
run.metric("aot.compile_s", compile_s, "s",
           label=f"AOTInductor compile + package (build time, once per target), timed when built ({built['utc']})")
run.metric("aot.package_mb", package.stat().st_size / 1e6, "MB", label="the .pt2 package (code + weights)")
with torch.inference_mode():
    reference = model(x)
loaded = torch._inductor.aoti_load_package(str(package))
with torch.inference_mode():
    run.check_close("aoti.vs_eager", loaded(x), reference, rtol=1e-4, atol=1e-4, reference_name="eager PyTorch")

# %% [markdown]
# ## Cold start, one fresh process each
#
# The JIT process gets its own empty Inductor and Triton cache folders, so it compiles from scratch, as
# a freshly started replica would without a shared cache. (The Triton one matters on a GPU: this run's
# own Triton cache already holds the kernels the AOT build compiled, the same kernels the JIT would.)

# %%
def cold(mode: str) -> float:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="jit-", dir=CACHE) as empty_cache:
        if mode == "jit":  # both caches empty: this run's TRITON_CACHE_DIR already holds the package's kernels
            env["TORCHINDUCTOR_CACHE_DIR"] = empty_cache
            env["TRITON_CACHE_DIR"] = os.path.join(empty_cache, "triton")
        command = [sys.executable, "-m", "demos.t4_hardware._cold_start", mode, size, device, str(package)]
        done, seconds = run.first_call(lambda: subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True,
                                                              text=True, check=False))
    run.check(f"cold.{mode}.correct", done.returncode == 0,
              f"fresh process, {mode}: {(done.stdout.strip() or done.stderr.strip()[-300:])}")
    return seconds


cold_s = {mode: cold(mode) for mode in ("eager", "aoti", "jit")}
for mode, seconds in cold_s.items():
    run.metric(f"cold.{mode}_s", seconds, "s", label=f"fresh process to first checked output: {mode}")
run.metric("cold.jit_over_aoti", cold_s["jit"] / cold_s["aoti"], "x", label="cold start: JIT over AOT package")
run.metric("cold.jit_extra_s", cold_s["jit"] - cold_s["eager"], "s", label="cold start: JIT minus eager (compile on first call)")
run.metric("cold.aoti_extra_s", cold_s["aoti"] - cold_s["eager"], "s", label="cold start: AOT load minus eager")

# %% [markdown]
# ## Steady state: does ahead of time cost speed?
#
# Once loaded, the package runs Inductor-generated code, the same code a warm `torch.compile` would run
# for this graph (not compiled again here, to keep the demo short); eager PyTorch is the baseline. Timed at
# the batch the package was compiled for.

# %%
with torch.inference_mode():
    steady = {"eager": run.time(lambda: model(x)).median_s, "aoti": run.time(lambda: loaded(x)).median_s}
for mode, seconds in steady.items():
    run.metric(f"steady.{mode}_ms", seconds * 1e3, "ms", label=f"steady-state latency, batch 8: {mode}")
run.metric("steady.aoti_speedup", steady["eager"] / steady["aoti"], "x", label="steady state: eager time over the AOT package's")
run.table("cold_start", f"MLP {MLP_SIZES[size]} on {run.device.kind}: build, cold start and steady state",
          ["variant", "build s", "cold start s (fresh process)", "steady ms"],
          [["eager", 0, round(cold_s["eager"], 2), round(steady["eager"] * 1e3, 3)],
           ["AOTInductor package", round(export_s + compile_s, 2), round(cold_s["aoti"], 2), round(steady["aoti"] * 1e3, 3)],
           ["torch.compile (JIT)", 0, round(cold_s["jit"], 2), ""]])
run.not_run("tensorrt engine build", "TensorRT is not installed here; an engine is built per GPU model and TensorRT "
                                     "version (tactic timing on the target), cited on the page instead")

# %%
run.save()
