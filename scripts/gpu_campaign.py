"""One GPU window -> checked records: `python -m scripts.gpu_campaign --out DIR [--budget-min N] [--commit SHA]`.

What a lent GPU machine runs (docs/contributing.md, "GPU records"). It

1. preflights the machine in under 30 s (GPU name, memory, driver; torch, triton, jax, onnxruntime
   versions and providers; which packages the demos import are missing) and writes DIR/preflight.json;
2. runs, at full size, every demo whose record for this device class is missing or stale (the
   freshness rule of scripts.catalog), most valuable first: demos whose pages carry GPU claims and
   GPU numbers (`@gpu`, `@h100`, ... markers in docs/topics) lead; each demo in its own process group
   under a hard wall-clock limit (killed with its whole group even when it prints nothing); a failure
   never stops the campaign;
3. after EVERY demo rewrites a fixed set of files directly under DIR, so a call killed at its limit
   still hands back everything that finished:
     records.tar.gz   the records written so far, as docs/results/<demo>/<class>.json
     logs.tar.gz      every demo's log and the preflight
     summary.md       demo, status, wall time, estimate, reason (and the demos that remain)
     summary.json     the same, for tools
     preflight.json
4. stops starting demos when the next one's estimated GPU time would pass the budget, and says which
   remain. The estimate is the demo's last GPU record's wall_time_s (plus process start) when there is
   one, else the table ESTIMATES_S below.

Resumable: records go to a staging folder inside .cache (kept on a warm machine between calls) and
count as done for the next call, as do records already in docs/results (what `scripts.gpu_unpack`
copied there from an earlier window travels with the working tree). The commit being measured is
passed in (--commit, else MM_SOURCE_COMMIT): the GPU machine gets a copy of the tree without .git.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from demos.harness import atomic, record
from demos.harness.errors import OneLineParser, fail
from demos.harness.paths import CACHE_DIR, DEMOS_DIR, DOCS_DIR, REPO_ROOT, RESULTS_DIR
from demos.harness.provenance import COMMIT_ENV
from scripts import catalog, regen

STAGING = CACHE_DIR / "gpu-campaign"
PREFLIGHT_LIMIT_S = 30.0
CALL_BUDGET_S = 9 * 60  # one device call: at most 10 minutes, less the start and the transfers
PROCESS_START_S = 10.0  # python + torch import + CUDA context + the opening and closing ceilings
T6_MODEL_CACHE = CACHE_DIR / "models"

# Estimated GPU seconds per demo on one H100 at the full size, used until the demo has a GPU record
# (then its measured wall_time_s is used). Each from the demo's work at its full preset: compiles
# (Inductor ~5-15 s per graph on a GPU, JAX jit ~1-3 s), the timed work (the harness times at least
# 0.2 s per variant after a first call and 3 warm-ups), and host-side loops. Process start
# (PROCESS_START_S) is added to each. They are estimates, not measurements: replace them with the
# records' wall times after the first window.
ESTIMATES_S: dict[str, tuple[float, str]] = {
    # t3: compiler
    "kernel_fusion": (90, "3 chains x (5 shapes + a ragged one) = 18 pointwise Inductor compiles (~2 s each), 36 Triton "
                          "launches to check, 45 timings of <= 1 ms (largest 65536x4096 bf16, 0.5 GiB a tensor)"),
    "autotune": (50, "12 Triton configs x 2 shapes = 24 compiles (~1 s), their timings at 4096^3 (0.14 TFLOP, <= 30 ms "
                     "for the slowest config) and triton.autotune's own benchmarking (~2 s a shape)"),
    "launch_overhead": (45, "4 chain lengths x (compile + reduce-overhead compile) = 8 compiles, CUDA graph captures; "
                            "the timed work is microseconds"),
    "layout_and_padding": (30, "cuBLAS only: 4 matmuls at ~8192 (1.1 TFLOP each, ~2 ms), a 32x256x56x56 conv, "
                               "float64 references (~3 TFLOP at fp64, ~0.1 s), no compile"),
    "memory_planning": (45, "2 Inductor compiles (forward; forward+backward) of the (16, 2048, 1024) block, "
                            "memory counters, a float64 CPU reference of 0.5 TFLOP"),
    # t2: pipeline
    "graph_capture": (70, "Dynamo, torch.export, AOTAutograd forward+backward, Inductor: ~6 compiles of the 1024-wide "
                          "block (16 x 1024 tokens), a float64 CPU reference"),
    "dynamic_shapes": (60, "4 strategies: static 3 compiles, automatic 2, dynamic 1, bucketing 2 = 8 compiles, "
                           "3 float64 CPU references"),
    "jax_lowering": (30, "JAX start + ~5 jit lowerings and compiles of one block; StableHLO/HLO text"),
    "onnx_export": (30, "one torch.onnx (dynamo) export, onnxruntime sessions (CUDA provider when present)"),
    # t1: frameworks
    "compilation_model": (80, "torch.compile and jax.jit over 3 batch sizes with and without bucketing, hidden 4096: "
                              "~10 compiles, cache-miss explanations"),
    "one_model_four_ways": (70, "the same MLP (hidden 4096) trained 4 ways for 20 epochs of the 1,797 digits (~140 "
                                "steps each, milliseconds a step) after their compiles"),
    "state_and_randomness": (50, "RNG and in-place updates on 2^28 elements (1 GiB) under eager, compile and jit: "
                                 "~6 compiles"),
    "transforms": (35, "jax.grad/vmap/jit and torch.func at 3 batch sizes, hidden 4096: ~6 jit compiles"),
    # t6: inference (plus training of the shared model once per machine: T6_TRAINING_S)
    "attention_cost": (50, "N = 1k..16k, B2 H16 d128 bf16: 5 lengths x 7 variants, float64 references up to N=16k "
                           "(tiled, 2 TFLOP at fp64); naive and math skipped at 16k where their N x N matrices "
                           "would not fit; the Python online-softmax loop is the slowest timed variant (~0.2 s a call)"),
    "batching": (20, "the trained model in bf16: a prefill and a decode step timed at 8 batch sizes (1..128; prefills "
                     "up to 16k tokens, ~15 ms; decode steps launch-bound, a few ms) ~5 s, then the host-side "
                     "simulation (2000 requests x 6 loads x 5 policies, 3.9 s measured on a CPU core)"),
    "kv_cache": (60, "float32 correctness: 896 tokens with and without the cache for 4 prompts (~1e14 FLOP without); "
                     "step timings at 5 positions; whole generations timed 5 times each way (launch-bound, ~1.5 ms "
                     "a step)"),
    "speculative": (90, "float32 greedy references and speculative decoding at 5 draft lengths for 16 prompts x 256 "
                        "tokens (token by token, launch-bound, ~2 ms a target pass), the off-by-one run, timings on "
                        "4 prompts"),
    "weight_only_int8": (45, "an 8192x8192 linear in bf16 / INT8 dequant / INT8 Triton at 5 row counts, the model's "
                             "decode step, one CUDA-graph capture"),
    # t5: compression (small synthetic models; the large-layer timings are single cuBLAS/Triton calls)
    "distillation": (35, "5 seeds x 4 temperatures x 30 student epochs of a small MLP on the digits (~1k steps a "
                         "run, launch-bound at ~0.3 ms a step ~ 6 s in all), teacher training, two timings"),
    "fp8_formats": (15, "rounding 4M elements into e4m3/e5m2 and a scaled 8192^3 matmul (1.1 TFLOP, ~2 ms) timed"),
    "pruning": (40, "3 seeds x 4 fine-tune epochs, 2:4 and unstructured masks; the 8192x4096 layer timed dense, "
                    "masked and semi-structured (a cuSPARSELt setup per shape)"),
    "ptq": (35, "3 seeds of calibrate + quantize (per-tensor, per-channel, SmoothQuant-style) of a small MLP; "
                "the 8192-wide linear timed at 3 row counts in bf16 and INT8 (torch._int_mm)"),
    "qat": (30, "5 seeds x 8 QAT epochs of a small MLP (fake-quant, launch-bound ~0.5 ms a step)"),
    # t7: parallelism on ONE GPU (what needs several GPUs is recorded as not run)
    "data_parallel": (30, "gloo on the host for the multi-rank checks (2 and 4 processes, 3 Adam steps of an "
                          "8 x 1026 MLP) plus the single-GPU reference"),
    "ddp_buckets": (45, "DDP over gloo with 4 bucket sizes x 10 timed steps of a 24 x 1024 MLP, process start per world"),
    "expert_parallel": (30, "2048 tokens, 4 and 8 experts: routing, all-to-all over gloo, 10 timed repeats"),
    "jax_sharding": (25, "JAX start + 4 jit compiles of a 1024 x 4096 FFN on a 1-device mesh (what needs several "
                         "devices is recorded not run)"),
    "parallel_layouts": (5, "a cost-model table: no device work"),
    "pipeline_interleaved": (45, "3 microbatch counts x 3 timed steps x (m + p - 1) stage slots of ~60 ms"),
    "pipeline_real_compute": (5, "its stages are CPU processes over gloo: on a GPU run it records 'needs 2 GPUs' "
                                 "and exits"),
    "zero_stages": (3, "without torchrun (the campaign starts none) its 2- and 4-rank runs are recorded as 'needs 4 "
                       "GPUs' right after the opening ceilings; under torchrun 4 variants x a few Adam steps of an 8 "
                       "x 1025 MLP over NCCL"),
    "pipeline_parallel": (60, "5 microbatch counts x 3 timed steps x (m + p - 1) stage slots of ~60 ms, GPipe and 1F1B"),
    "scale_model": (40, "gloo all-reduce sweep on the host at 2, 4 and 8 processes (9 message sizes) to fit alpha "
                        "and beta; the model itself is arithmetic"),
    "shard_gemm": (15, "the 4 x 2048 x 8192 MLP's first GEMM split 1..8 ways: cuBLAS calls of ~0.1-1 ms, timed"),
    "tensor_parallel": (40, "gloo at 2 and 4 ranks for the checked Megatron MLP; the single-GPU shard GEMMs timed"),
    # t8: training at scale (a 8-layer, 1024-wide GPT, ~100 M parameters with the 32k embedding)
    "accumulation_and_overlap": (45, "accumulation vs big batch (8 micro-steps), 4 DDP bucket caps x a profiled "
                                     "step over gloo, trace parsing"),
    "activation_checkpointing": (90, "8 layers x b4 x 1024 tokens in fp32 (134 M parameters, ~80 ms a step): 5 eager "
                                     "variants and 3 dropout-free ones x ~12 steps each (check, peak, timing) ~10 s; "
                                     "3 Inductor compiles of the whole model's forward + backward, one per memory "
                                     "budget (~20-30 s each cold), then their timed steps"),
    "batch_scaling": (15, "11 one-process trainings (a 6-point lr sweep, then 1x, 2x and 4x the batch, base and scaled "
                          "lr) of a 13 M-parameter GPT: ~1700 fp32 steps of 2048-8192 tokens, ~5 ms each (launches "
                          "and host-side batches); the multi-rank and FSDP parts are CPU-only (recorded not run)"),
    "checkpoint_resume": (45, "30 steps with a kill at 25 and a restart from step 20 (process start twice), "
                              "torch.distributed.checkpoint save/load timed"),
    "divergence": (45, "200 steps x 3 setups (stable, too-high LR, bad batch at 150) of ~15 ms plus hooks"),
    "mixed_precision": (60, "200 steps x 4 precisions (fp32, fp16 without and with GradScaler, bf16) at 8k tokens: "
                            "fp32 steps ~60 ms, the others ~20 ms"),
    "profile_step": (25, "one profiled step of a 2048-wide 8-layer GPT (b8 x 1024), a few timed steps, MFU"),
    "step_memory": (30, "6 one-step runs of a 134 M-parameter GPT (fp32, autocast, bf16 + fp32 master at 5 x 1024 "
                        "tokens; the last also at 256 and 512 tokens and once more under the allocator's history), "
                        "each ~1-2 s of host-side init plus a ~0.1 s step; a few thousand logged allocations replayed"),
    # t9: foundations
    "gbdt": (60, "scikit-learn's histogram GBDT on 1M x 28 rows, 100 trees, 3 data seeds, on the host (the GPU "
                 "machine has no CUDA xgboost: recorded not run)"),
    "host_device_transfers": (25, "pageable vs pinned copies at 5 sizes up to 256 MiB, chunked overlap, an input "
                                  "pipeline: 13 timings of <= 30 ms"),
    "kmeans_search": (40, "k-means on 1M x 64 (20 iterations), exact and IVF search of 10k queries over 4M x 128 "
                          "at 8 nprobe values"),
    "machine_laws": (30, "a 16384^2 weight matrix at 12 column counts (GEMV to GEMM), Amdahl/Gustafson work units"),
    "numerics": (30, "sums of up to 2^26 terms in 4 orders and precisions, 2000 small training steps"),
    "streaming_topk": (35, "300 random streams checked, top-1000 of 2^28 elements (1 GiB) at 3 chunk sizes"),
    # t10: benchmarking
    "profiling": (30, "an 8192 x 4096 x 16384 MLP profiled (torch.profiler, one trace), a 64-layer tiny stack, "
                      "one 8192^3 matmul; ncu where present on two kernels (~10 s with replay)"),
    "regression_gate": (30, "100 A/A calibration pairs, then 2 candidates x 60 trials x k <= 100 interleaved and "
                            "sequential pairs of a 2^26-element kernel (~0.2 ms a call on an H100): <= 50k calls"),
    "timing_wrong_right": (25, "a 4096^3 matmul timed five wrong ways and the right way, 3 compiles"),
    "warmup_and_caches": (45, "5 working sets for the cache sweep, 2000 repeats for the spread study, 7 compiles"),
    # added this round (T2, T3, T6 extensions; T4; T11): estimates until their first GPU record
    "lower_irs": (25, "one Triton kernel compiled to TTIR..SASS (~1 s), checked and timed on 4096 x 1000 rows; "
                      "allocator counters, a side stream with events, the .item() orders timed"),
    "matmul_epilogue": (30, "8192 x 1024 x 4096 bf16 (69 GFLOP, ~0.1 ms a matmul): one Inductor compile (~10 s cold, "
                            "its imports included), two Triton compiles (~2 s each), 7 timings capped at 200 repeats "
                            "of <= 0.3 ms, five float64 checks of the 8192 x 4096 output on the host (~0.5 s each)"),
    "graph_passes": (30, "FX trace, DCE and folding of a 64 x 8192 bf16 layer (ms), one torch.export (~3 s), 3 timings "
                         "of ~0.2 ms calls, 2 Inductor compiles (default and freezing, ~5-10 s each cold)"),
    "prefill_decode": (20, "a 4-layer, 8192-wide bf16 model (2.75 G parameters, built in fp32 on the GPU, 11 GB, then "
                           "cast), a FLOP-counter probe, 6 prefills (64..4096 tokens, up to ~40 ms each) and 5 decode "
                           "steps (~2-5 ms), each timed for >= 0.2 s after 5 untimed calls: ~6 s of GPU work"),
    "paged_kv": (15, "greedy decoding of 8 prompts x 129 tokens through the contiguous and the paged cache (~4 and ~10 "
                     "ms a step: the block tables go to the GPU every layer), 2 timings, the waste simulation on the "
                     "host (5 schemes x 2000 requests of up to 640 tokens, ~1 s each); the T6 model's training comes "
                     "on top when this is the first T6 demo on the machine (T6_DEMOS_WITH_TRAINING)"),
    "hardware_roofline": (3, "no device work of its own: datasheet arithmetic and four committed CPU records read back "
                             "(the ceilings are in the process start)"),
    "batch_regime": (30, "the full MLP (134 MB fp32) exported to ONNX once (torch.export + onnxscript, ~10-20 s on "
                         "the host); 9 batch sizes (1..256) timed in PyTorch on the GPU (<= 0.5 ms a call) and in ONNX "
                         "Runtime's CPU provider on the host (5-30 ms a call), ~0.3 s each"),
    "precision_footprint": (55, "fp32 and fp16 ONNX exports of the full MLP (~15 s each), INT8 dynamic and INT4 "
                                "MatMulNBits quantization (~10 s), 4 CPU sessions checked and timed at 2 batch sizes, "
                                "4 child processes for peak memory (~2-3 s each): all host work"),
    "aot_vs_jit": (80, "torch.export + AOTInductor package for CUDA (Inductor, its Triton kernels and the C++ wrapper "
                       "build, ~40 s cold), then three fresh processes (eager ~5 s, AOT load ~6 s, torch.compile with "
                       "empty Inductor and Triton caches ~20 s) and two steady-state timings"),
    "video_pipeline": (15, "a float64 host reference of the net at 1080p (13 GFLOP, ~2 s), 3 stage timings, 300 "
                           "synchronised frames of ~1-3 ms, 5 batch sizes up to 16 frames (~20 ms a call) timed"),
    "coalescing": (20, "nvcc cubin + PTX (~2 s each), ~6 Triton compiles (~1 s each), a CuPy (nvcc) module (~3 s); "
                       "16 exact checks at full size compared on the device; 16 timings of 0.2-3 ms calls, "
                       "<= 0.3 s each"),
    "occupancy": (45, "4 nvcc cubins and 4 CuPy modules, one per register cap (~2-3 s each); 30 sweep points timed "
                      "(2 GiB streamed per stream_scale call, 2^28 dependent loads per chase call: ~0.3 s a point); "
                      "ncu on two launches in a child process (~15 s, capped at 90 s)"),
    "reductions": (20, "2 Triton compiles, nvcc PTX and a CuPy module (~5 s); 6 variants on 2^28 floats (~0.4 ms a "
                       "call), each checked exactly on 2^22 zeros and ones, timed and run 20 times for determinism"),
    "streams": (25, "a float64 host reference and 3 host checks of 2^26 elements (~2-3 s each), profiler start-up "
                    "(CUPTI), pageable and pinned copies of 256 MiB, ~8 timings of 5-25 ms calls, 3 profiled runs"),
    "tensor_cores": (20, "float64 host references (64 x 8193 x 8193, ~0.5 s each), 24 timings of 8192 x ~8192^2 "
                         "matmuls (fp32 ~22 ms, TF32 ~3 ms, bf16 ~1.5 ms a call; odd sizes slower), the padded "
                         "product checked on 67 M elements on the host (~3 s)"),
    "cpp_extension": (30, "g++ library and ASan program, nvcc object, library and program (~2.5 s each: ~10 s of "
                          "builds), 8 host threads x 400 calls on 1024 x 768 (~5-10 s), 12 exact checks, "
                          "compute-sanitizer on the planted bug (~5-10 s, capped at 120 s), two host timings"),
}
T6_TRAINING_S = (100, "target (12 x 1024, ~130 M parameters) 1500 steps of 16k tokens = 2e16 FLOPs at ~300 TFLOP/s "
                      "bf16 autocast ~70 s, draft ~10 s, evaluation: paid by the first T6 demo on a machine whose "
                      ".cache/models holds no full-size model")
DEFAULT_ESTIMATE_S = (90, "no estimate set for this demo (another topic's): a cautious default")
T6_DEMOS_WITH_TRAINING = ("batching", "kv_cache", "paged_kv", "speculative", "weight_only_int8")


@dataclass
class Row:
    demo: str
    status: str  # ok | failed | timeout | fresh | not started (budget) | not run (--only) | busy
    seconds: float | None = None
    estimate_s: float | None = None
    estimate_from: str = ""
    limit_s: float | None = None
    priority: int = 0
    reason: str = ""


@dataclass
class Campaign:
    out: Path
    device_class: str
    commit: str | None
    budget_s: float
    started_utc: str
    preflight: dict = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)


# -- preflight ----------------------------------------------------------------------------------------

PREFLIGHT_CODE = r"""
import importlib.metadata as md, json, subprocess, sys, time
t0 = time.perf_counter()
info = {"python": sys.version.split()[0], "packages": {}}
for name in ("torch", "triton", "jax", "jaxlib", "onnx", "onnxruntime", "onnxscript", "numpy", "scipy",
             "scikit-learn", "rich", "threadpoolctl", "jsonschema", "cupy-cuda13x", "cupy-cuda12x", "torchao"):
    try:
        info["packages"][name] = md.version(name)
    except md.PackageNotFoundError:
        info["packages"][name] = None
import torch
info["cuda_available"] = torch.cuda.is_available()
info["torch_cuda"] = torch.version.cuda
if info["cuda_available"] and WANT_GPU:
    p = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    info.update(gpu_name=p.name, gpu_count=torch.cuda.device_count(), memory_total_gib=round(total / 2**30, 1),
                memory_free_gib=round(free / 2**30, 1), sm_count=p.multi_processor_count,
                capability=f"{p.major}.{p.minor}", l2_mib=round(getattr(p, "L2_cache_size", 0) / 2**20, 1))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        info["nvidia_smi"] = out.stdout.strip()
    except Exception as e:
        info["nvidia_smi"] = f"unavailable: {e}"
try:
    import onnxruntime
    info["onnxruntime_providers"] = onnxruntime.get_available_providers()
except Exception as e:
    info["onnxruntime_providers"] = f"unavailable: {type(e).__name__}: {e}"
if WANT_GPU:
    try:
        import jax
        info["jax_devices"] = [str(d) for d in jax.devices()]
    except Exception as e:
        info["jax_devices"] = f"unavailable: {type(e).__name__}: {str(e)[:200]}"
info["seconds"] = round(time.perf_counter() - t0, 1)
print(json.dumps(info))
"""


def demo_imports(demos_dir: Path = DEMOS_DIR) -> dict[str, list[str]]:
    """Top-level packages (not the standard library, not this repository) each demo file imports."""
    found: dict[str, set[str]] = {}
    for path in sorted(demos_dir.glob("**/*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("demos", "scripts", "__future__"):
                    found.setdefault(top, set()).add(path.relative_to(demos_dir.parent).as_posix())
    return {k: sorted(v) for k, v in sorted(found.items())}


def preflight(device: str, env: dict, demos_dir: Path) -> dict:
    """What the machine is and has, in a subprocess under a 30 s limit (a stuck driver cannot hang us)."""
    code = PREFLIGHT_CODE.replace("WANT_GPU", "True" if device != "cpu" else "False")
    started = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PREFLIGHT_LIMIT_S,
                             env=env, cwd=REPO_ROOT)
        info = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else \
            {"error": (out.stderr.strip().splitlines() or ["preflight failed"])[-1]}
    except subprocess.TimeoutExpired:
        info = {"error": f"preflight took more than {PREFLIGHT_LIMIT_S:.0f} s"}
    except (json.JSONDecodeError, IndexError):
        info = {"error": "preflight printed no result"}
    imports = demo_imports(demos_dir)
    info["missing_packages"] = {name: files for name, files in imports.items() if importlib.util.find_spec(name) is None}
    info["wall_s"] = round(time.perf_counter() - started, 1)
    return info


# -- what to run, in which order, and how long it should take -----------------------------------------

MARKER = re.compile(r"\{\{\s*(?:claim|metric|artifact)\s+([A-Za-z0-9_]+)\b[^}]*?@([a-z0-9][a-z0-9-]*)")


def gpu_marker_counts(topics_dir: Path = DOCS_DIR / "topics") -> dict[str, int]:
    """How many GPU claims and numbers each demo's pages carry (markers naming a device other than cpu)."""
    counts: dict[str, int] = {}
    for page in sorted(topics_dir.glob("*.md")):
        for demo, device in MARKER.findall(page.read_text(encoding="utf-8")):
            if device != "cpu":
                counts[demo] = counts.get(demo, 0) + 1
    return counts


def last_gpu_wall_time(demo: str, device_class: str, results_dirs: list[Path]) -> tuple[float, str] | None:
    """wall_time_s of the demo's GPU record: this class first, then any GPU class."""
    for want_same in (True, False):
        for folder in results_dirs:
            for path in sorted((folder / demo).glob("*.json")):
                if path.stem == "cpu" or (want_same and path.stem != device_class):
                    continue
                try:
                    rec = record.load(path)
                except record.RecordError:
                    continue
                if rec.get("fixture") or rec.get("provenance", {}).get("fixture"):
                    continue
                parts = rec.get("wall_time_parts") or {}
                startup = parts.get("startup_s", PROCESS_START_S)
                split = ", ".join(f"{k[:-2].replace('_', ' ')} {v:.0f} s" for k, v in parts.items() if k != "startup_s")
                return (float(rec["wall_time_s"]) + startup - PROCESS_START_S,
                        f"record {path.stem}.json" + (f": {split}" if split else ""))
    return None


def estimate(demo: str, device_class: str, results_dirs: list[Path]) -> tuple[float, str]:
    measured = last_gpu_wall_time(demo, device_class, results_dirs) if device_class != "cpu" else None
    if measured:
        seconds, source = measured
        return seconds + PROCESS_START_S, f"{source} (wall time and start)"
    seconds, why = ESTIMATES_S.get(demo, DEFAULT_ESTIMATE_S)
    total, source = seconds + PROCESS_START_S, "table"
    if demo in T6_DEMOS_WITH_TRAINING and not any(T6_MODEL_CACHE.glob("full-*.pt")):
        total += T6_TRAINING_S[0]
        source = "table + T6 model training"
    return total, source


def demo_limit(estimate_s: float, budget_left_s: float, fixed: float | None) -> float:
    """A demo's hard limit: generous against its estimate (3x, at least +90 s), never past the budget."""
    limit = fixed if fixed is not None else max(3 * estimate_s, estimate_s + 90)
    return max(1.0, min(limit, budget_left_s))


def freshness(demo: catalog.Demo, device_class: str, results_dirs: list[Path]) -> str:
    """fresh if any of the folders holds a fresh record for this class; else stale or missing."""
    states = [catalog.record_freshness(demo, device_class, folder) for folder in results_dirs]
    return "fresh" if "fresh" in states else ("stale" if "stale" in states else "missing")


# -- the files handed back after every demo -----------------------------------------------------------

def _atomic_bytes(path: Path, data: bytes) -> None:
    atomic.write_bytes_via(path, lambda tmp: Path(tmp).write_bytes(data))


def _tar(members: list[tuple[str, Path]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for arcname, path in members:
            if path.is_file():
                tar.add(path, arcname=arcname, recursive=False)
    return buffer.getvalue()


def summary_markdown(c: Campaign) -> str:
    used = sum(r.seconds or 0 for r in c.rows)
    remaining = [r.demo for r in c.rows if r.status.startswith("not started") or r.status == "interrupted"]
    lines = [f"# GPU campaign on {c.preflight.get('gpu_name', c.device_class)} (class {c.device_class})", "",
             f"commit {c.commit or 'UNKNOWN'}; started {c.started_utc}; budget {c.budget_s / 60:.1f} min; "
             f"demo time used {used / 60:.1f} min", ""]
    if c.preflight.get("error"):
        lines += [f"preflight: {c.preflight['error']}", ""]
    if c.preflight.get("missing_packages"):
        lines += ["missing packages (demos record what they could not run): "
                  + ", ".join(sorted(c.preflight["missing_packages"])), ""]
    lines += ["| demo | status | wall time (s) | estimate (s) | limit (s) | reason |", "|---|---|---|---|---|---|"]
    for r in c.rows:
        wall = "" if r.seconds is None else f"{r.seconds:.0f}"
        est = "" if r.estimate_s is None else f"{r.estimate_s:.0f} ({r.estimate_from})"
        lim = "" if r.limit_s is None else f"{r.limit_s:.0f}"
        reason = r.reason.replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(f"| {r.demo} | {r.status} | {wall} | {est} | {lim} | {reason} |")
    estimated = sum(r.estimate_s or 0 for r in c.rows if r.status != "fresh")
    lines += ["", f"remaining (budget): {', '.join(remaining) if remaining else 'none'}",
              f"estimated GPU time of every demo this call had to run: {estimated / 60:.1f} min "
              f"(measured so far: {used / 60:.1f} min)", ""]
    return "\n".join(lines)


def write_outputs(c: Campaign, results_dir: Path, log_dir: Path) -> None:
    """Rewrite the fixed set of files under --out: records and logs archives, the summary, the preflight."""
    c.out.mkdir(parents=True, exist_ok=True)
    records = [(f"docs/results/{p.parent.name}/{p.name}", p)
               for p in sorted(results_dir.glob(f"*/{c.device_class}.json"))]
    _atomic_bytes(c.out / "records.tar.gz", _tar(records))
    logs = [(f"logs/{p.name}", p) for p in sorted(log_dir.glob("*.log"))]
    _atomic_bytes(c.out / "logs.tar.gz", _tar(logs + [("logs/preflight.json", c.out / "preflight.json")]))
    summary = {**{k: v for k, v in asdict(c).items() if k not in ("out", "rows", "preflight")},
               "out": str(c.out), "rows": [asdict(r) for r in c.rows],
               "demo_seconds_used": sum(r.seconds or 0 for r in c.rows),
               "remaining": [r.demo for r in c.rows if r.status.startswith("not started") or r.status == "interrupted"],
               "estimates_table": {k: {"seconds": v[0], "how": v[1]} for k, v in ESTIMATES_S.items()},
               "t6_training": {"seconds": T6_TRAINING_S[0], "how": T6_TRAINING_S[1]},
               "process_start_s": PROCESS_START_S}
    _atomic_bytes(c.out / "summary.json", (json.dumps(summary, indent=1) + "\n").encode())
    _atomic_bytes(c.out / "summary.md", summary_markdown(c).encode())


# -- the campaign ---------------------------------------------------------------------------------------

def resolve_commit(asked: str | None) -> str | None:
    if asked:
        return asked
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    except OSError:
        return None


def estimates_table(device_class: str = "h100", results_dirs: list[Path] | None = None) -> str:
    """The campaign's GPU time per demo as Markdown, conclusion first: each demo's measured wall time where
    a record for a GPU class exists (the class asked for first), else the estimate in ESTIMATES_S; process
    start added to each. `python -m scripts.gpu_campaign --estimates`; also on the contributing page."""
    results_dirs = results_dirs or [RESULTS_DIR]
    rows, total, measured = [], 0.0, 0
    for name in catalog.discover():
        found = last_gpu_wall_time(name, device_class, results_dirs)
        if found:
            seconds, how = found[0], f"measured ({found[1]})"
            measured += 1
        else:
            seconds, how = ESTIMATES_S.get(name, DEFAULT_ESTIMATE_S)
            how = f"estimated: {how}"
        total += seconds + PROCESS_START_S
        rows.append(f"| {name} | {seconds + PROCESS_START_S:.0f} | {how} |")
    if measured < len(rows):  # the T6 model is trained by the first T6 demo that has no GPU record yet
        total += T6_TRAINING_S[0]
        rows.append(f"| (T6 model training, once per machine) | {T6_TRAINING_S[0]:.0f} | estimated: {T6_TRAINING_S[1]} |")
    windows = math.ceil(total / (CALL_BUDGET_S)) if total else 0
    lead = (f"**The whole GPU campaign: {total / 60:.1f} min of GPU time on one {device_class} "
            f"({measured} of {len(catalog.discover())} demos measured, the rest estimated), about {windows} "
            f"call(s) of {CALL_BUDGET_S / 60:.0f} min.** Each demo's time includes {PROCESS_START_S:.0f} s of "
            "process start and ceilings; a measured time replaces the estimate as soon as a GPU record exists.")
    return "\n".join([lead, "", "| demo | GPU s (incl. start) | from |", "|---|---|---|", *rows])


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--estimates"]:
        print(estimates_table())
        return 0
    parser = OneLineParser(prog="gpu_campaign", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the archives and the summary go ($OUT)")
    parser.add_argument("--budget-min", type=float, default=8.5,
                        help="minutes this call may run, preflight included (default 8.5: a 10-minute call with room)")
    parser.add_argument("--commit", default=None, help=f"the commit being measured (default: ${COMMIT_ENV}, else git)")
    parser.add_argument("--only", default=None, help="comma-separated demo names (default: every demo)")
    parser.add_argument("--force", action="store_true", help="run even demos whose record is fresh")
    parser.add_argument("--demo-limit-s", type=float, default=None, help="a fixed hard limit per demo, in seconds")
    # for tests: a CPU stand-in for the GPU, tiny sizes, stand-in demos and folders
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--size", default="full", help=argparse.SUPPRESS)
    parser.add_argument("--demos-dir", type=Path, default=DEMOS_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--staging", type=Path, default=STAGING, help=argparse.SUPPRESS)
    parser.add_argument("--published-dir", type=Path, default=RESULTS_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    wall_start = time.perf_counter()
    out = args.out.absolute()
    if out.exists() and not out.is_dir():
        fail(f"--out {args.out}: is a file, not a folder")
    commit = resolve_commit(args.commit)
    if not commit:
        fail(f"no commit to record: pass --commit SHA (or set {COMMIT_ENV}); the GPU machine's copy has no .git")
    if not re.fullmatch(r"[0-9a-f]{4,64}", commit):
        fail(f"--commit {commit!r}: expected a commit hash (4 to 64 lower-case hex digits), as `git rev-parse HEAD` prints")
    try:
        demos = catalog.discover(args.demos_dir.absolute())
    except ValueError as e:
        fail(str(e))
    only = [d.strip() for d in args.only.split(",") if d.strip()] if args.only else None
    if only:
        unknown = [d for d in only if d not in demos]
        if unknown:
            fail(f"--only: unknown demo {unknown[0]!r}: known demos are {', '.join(demos)}")

    env = {**os.environ, COMMIT_ENV: commit, "PYTHONUNBUFFERED": "1",
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TOKENIZERS_PARALLELISM": "false"}
    staging = args.staging.absolute()
    results_dir, log_dir = staging / "results", staging / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("*.log"):  # logs of this call only; records stay (they are the resume state)
        old.unlink()

    info = preflight(args.device, env, args.demos_dir.absolute())
    out.mkdir(parents=True, exist_ok=True)
    (out / "preflight.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    if args.device != "cpu" and not info.get("gpu_name"):
        info["gpu_name"] = _gpu_name_in_process()  # the preflight failed or timed out: ask torch directly
        info["cuda_available"] = info["gpu_name"] is not None
    if args.device == "cpu":
        device_class = "cpu"
    elif info.get("cuda_available") and info.get("gpu_name"):
        from demos.harness.device import gpu_class
        device_class = gpu_class(info["gpu_name"])
    else:
        campaign = Campaign(out, "none", commit, args.budget_min * 60, _utc(), info)
        campaign.rows = [Row(d, "not started (no GPU)", reason=info.get("error", "no CUDA GPU visible to PyTorch"))
                         for d in demos]
        write_outputs(campaign, results_dir, log_dir)
        print(f"gpu_campaign: no CUDA GPU visible ({info.get('error', 'torch.cuda.is_available() is False')}); "
              f"nothing run; see {out / 'summary.md'}", file=sys.stderr)
        return 2
    print(f"gpu_campaign: {info.get('gpu_name', 'cpu')} (class {device_class}), commit {commit}, "
          f"budget {args.budget_min:.1f} min; preflight {info['wall_s']} s; "
          f"missing packages: {', '.join(info['missing_packages']) or 'none'}", flush=True)

    campaign = Campaign(out, device_class, commit, args.budget_min * 60, _utc(), info)
    looked_in = [results_dir, args.published_dir.absolute()]
    priority = gpu_marker_counts()
    todo = []
    training_counted = False  # the T6 model is trained once per machine: count it for one demo only
    for name, demo in demos.items():
        if only and name not in only:
            continue
        est, source = estimate(name, device_class, looked_in)
        state = freshness(demo, device_class, looked_in)
        if "training" in source and (state != "fresh" or args.force):
            if training_counted:
                est, source = est - T6_TRAINING_S[0], "table (T6 model trained by an earlier demo)"
            training_counted = True
        row = Row(name, "", estimate_s=est, estimate_from=source, priority=priority.get(name, 0))
        if state == "fresh" and not args.force:
            row.status, row.reason = "fresh", "its record for this class is fresh: not re-run"
        else:
            row.reason = f"record {state}"
            todo.append(row)
        campaign.rows.append(row)
    # Pages' GPU numbers first; among equals the shorter first (more records per minute).
    todo.sort(key=lambda r: (-r.priority, r.estimate_s))
    campaign.rows.sort(key=lambda r: (r.status == "fresh", -r.priority, r.estimate_s or 0))
    write_outputs(campaign, results_dir, log_dir)

    console = regen.Console(highlight=False, width=200)
    current = None
    try:
        with regen.signals_raise():
            for row in todo:
                est, source = estimate(row.demo, device_class, looked_in)  # training may have happened meanwhile
                row.estimate_s, row.estimate_from = est, source
                left = campaign.budget_s - (time.perf_counter() - wall_start)  # preflight and packing count too
                if est > left:
                    row.status = "not started (budget)"
                    row.reason = f"estimated {est:.0f} s, {max(left, 0):.0f} s of the budget left"
                    write_outputs(campaign, results_dir, log_dir)
                    continue
                row.limit_s = demo_limit(est, left, args.demo_limit_s)
                print(f"gpu_campaign: {row.demo} (estimate {est:.0f} s, limit {row.limit_s:.0f} s, "
                      f"{left:.0f} s of budget left)", flush=True)
                current = row
                outcome = regen.run_demo(demos[row.demo], args.device, args.size, results_dir, console, row.limit_s,
                                         env, device_class=device_class, log_dir=log_dir)
                current = None
                row.seconds = outcome.seconds
                row.status = outcome.status
                row.reason = outcome.detail if not outcome.ok else f"wrote {row.demo}/{device_class}.json"
                print(f"gpu_campaign: {row.demo}: {row.status} in {outcome.seconds:.0f} s", flush=True)
                write_outputs(campaign, results_dir, log_dir)
    except (KeyboardInterrupt, SystemExit):  # stopped from outside (the call's time limit): say so, keep what finished
        if current is not None:
            current.status, current.reason = "interrupted", "the campaign was stopped while this demo ran"
        for row in todo:
            if not row.status:
                row.status, row.reason = "not started (interrupted)", "the campaign was stopped first"
        write_outputs(campaign, results_dir, log_dir)
        raise
    write_outputs(campaign, results_dir, log_dir)
    print(summary_markdown(campaign))
    print(f"gpu_campaign: done in {time.perf_counter() - wall_start:.0f} s; files under {out}", flush=True)
    return 0 if all(r.status in ("ok", "fresh", "not started (budget)") for r in campaign.rows) else 1


def _gpu_name_in_process() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None


def _utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


if __name__ == "__main__":
    sys.exit(main())
