"""One GPU window -> checked records: `python -m scripts.gpu_campaign --out DIR [--budget-min N] [--commit SHA]`.

What a lent GPU machine runs (docs/contributing.md, "GPU records"). It

1. preflights the machine in under 30 s (GPU name, memory, driver; torch, triton, jax, onnxruntime
   versions and providers; which packages the demos import are missing) and writes DIR/preflight.json;
2. runs, at full size, every demo whose record for this device class is missing or stale (the
   freshness rule of records.catalog), most valuable first: demos whose pages carry GPU claims and
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

from records import atomic, record
from records.errors import OneLineParser, fail
from records.paths import CACHE_DIR, DEMOS_DIR, DOCS_DIR, REPO_ROOT, RESULTS_DIR
from demos.harness.provenance import COMMIT_ENV
from records import catalog, devices, digest as digests
from scripts import regen

STAGING = CACHE_DIR / "gpu-campaign"
PREFLIGHT_LIMIT_S = 30.0
CALL_BUDGET_S = 9 * 60  # one device call: at most 10 minutes, less the start and the transfers
# What every demo process pays on an H100 besides its own work (scripts.gpu_campaign --plan adds it to
# each estimate below; a GPU record replaces both with its measured wall time and start-up):
#   python, `import torch` (a CUDA build) and the harness, before start():                        ~2.0 s
#     (measured on the CPU machine: 1.2-1.5 s, the startup_s of its records; the CUDA build also
#     loads libtorch_cuda, and the first demo on a fresh machine reads it all from disk)
#   the CUDA context, and cuBLAS/cuBLASLt loaded at the first matmul:                              ~1.0 s
#   the ceilings, measured at the start and again at the end (demos/harness/ceilings.py at `full`,
#   timing.Settings: 3 warm-ups, repeats up to 0.2 s or 200, a 256 MiB L2 flush (~0.1 ms) each):
#     copy of 2^28 float32, 2 GiB moved, ~0.72 ms at ~3.0 TB/s: 200 repeats                    ~0.17 s
#     fp32 8192^3, 1.1 TFLOP, ~21 ms at ~52 TFLOP/s (TF32 off): 1 + 3 + 1 probe + 9 repeats      ~0.30 s
#     bf16 8192^3, ~1.4 ms at ~800 TFLOP/s: 1 + 3 + 1 + 145 repeats                            ~0.22 s
#     ~0.7 s each time, twice                                                                    ~1.4 s
#   exit (CUDA teardown) and the campaign's archives and summary after each demo:                 ~0.5 s
PROCESS_START_S = 5.0
# Added to PROCESS_START_S for a demo whose own files (or the local modules they import; the harness's
# imports are in the base) import these packages. Measured on the CPU machine (2 cores, slower than the
# GPU machine's host; best of 3-5 runs over `import torch`, 1.5-1.8 s when the machine was quiet): jax with
# its CPU client +0.7 s, onnxruntime + onnx +0.4 s (onnxscript, which torch.onnx.export loads, +1.2 s more),
# triton +0.1-0.6 s, scikit-learn +0.6 s (datasets) to +2.6 s (cluster). On the GPU machine jax also starts
# its CUDA client (the PJRT plugin, its own CUDA context and libraries), the larger part of its share.
IMPORT_START_S: dict[str, tuple[float, str]] = {
    "jax": (3.0, "import jax (~1 s) and its GPU client: the PJRT CUDA plugin and a second CUDA context (~2 s)"),
    "onnxruntime": (1.0, "import onnxruntime and onnx (torch.onnx's exporter adds onnxscript)"),
    "triton": (0.5, "import triton for the demo's own kernels (torch.compile's import is part of its first compile)"),
    "sklearn": (1.0, "import scikit-learn and the SciPy parts it loads"),
    "cupy": (1.0, "import cupy and its CUDA runtime"),
}
T6_MODEL_CACHE = CACHE_DIR / "models"

# Estimated GPU seconds per demo on one H100 at the full size, used until the demo has a GPU record
# (then its measured wall_time_s is used). Each from the demo's work at its full preset: compiles
# (Inductor ~5-15 s per graph on a GPU, JAX jit ~1-3 s), the timed work (the harness times at least
# 0.2 s per variant after a first call and 3 warm-ups), and host-side loops. Process start
# (process_start_s: PROCESS_START_S plus IMPORT_START_S) is added to each. They are estimates, not
# measurements: replace them with the records' wall times after the first window. Counts used in many:
# a timed variant costs <= ~0.25 s while a call takes <= 40 ms (repeats up to 0.2 s or 200, each after a
# 256 MiB L2 flush of ~0.1 ms), else ~10 calls; Inductor's first compile in a process ~6 s (imports, the
# worker pool, one kernel), a further small graph ~1.5 s cold, a transformer block's forward ~8 s and
# forward + backward ~15 s; a small JAX jit ~0.3 s; float64 on the host ~300 GFLOP/s (16 cores).
ESTIMATES_S: dict[str, tuple[float, str]] = {
    # t3: compiler
    "kernel_fusion": (50, "Inductor's first compile ~6 s; 3 chains x (4 shapes + a ragged one) + one row = 16 cold "
                          "pointwise compiles ~1.5 s ~24 s; run_and_get_code resets Dynamo, so the 12 timed (chain, "
                          "shape) pairs compile again (cache hits, ~1 s) ~12 s; ~5 Triton specialisations ~2.5 s; 36 "
                          "timings (2 MB to 1.5 GB moved: ~30 ms of repeats at 256 rows, ~0.2 s at 65536) ~3.5 s; "
                          "float64 references on the GPU ~0.1 s"),
    "autotune": (24, "12 Triton matmul compiles (~1 s each; the skinny shape reuses them: same specialisation) ~12 s; "
                     "24 config timings: 4096^3 from ~1 ms (best) to ~30 ms (16x16x16 tiles: 14 calls ~0.4 s), "
                     "64x8192x8192 ~0.2 s each ~6 s; 2 cuBLAS timings; triton.autotune's do_bench of 12 configs per "
                     "shape (~0.15 s each) ~3.6 s; float64 references on the GPU (0.14 TFLOP fp64) ~0.1 s"),
    "launch_overhead": (26, "Inductor's first compile ~6 s; 4 chains (1, 8, 64, 256 ops) compiled ~10 s (the CPU record "
                            "spends 20 s in the same first calls); 4 CUDA-graph captures and 4 reduce-overhead compiles "
                            "(FX-cache hits, graphs recorded on the 3rd call) ~8 s; 16 back-to-back timings of us calls "
                            "(the 256-op eager chain ~1.3 ms: 0.26 s) ~1.5 s"),
    "layout_and_padding": (5, "cuBLAS/cuDNN only, no compile: cuDNN start and a float64 conv reference on the GPU (0.12 "
                              "TFLOP fp64) ~1.5 s; 3 conv timings (~0.3-1 ms) ~0.6 s; 4 matmuls at 8189/8184/8192 bf16 "
                              "(~1.5 ms, ~0.2 s of repeats each) and their float64 references (4.4 TFLOP fp64 at ~50 "
                              "TFLOP/s) ~1 s; 3 GEMV timings ~0.1 s"),
    "memory_planning": (35, "two float64 CPU references of the 16 x 2048 x 1024 block (1.1 TFLOP fp64 each, ~3 s) ~6 s; "
                            "Inductor's first compile with the block forward ~12 s; the compiled forward + backward ~15 "
                            "s; peak-memory passes of a few ms ~1 s"),
    # t2: pipeline
    "graph_capture": (35, "float64 CPU reference of the 16 x 1024 x 1024 block (0.47 TFLOP fp64) ~2 s; 2 Dynamo "
                          "explains and a fullgraph attempt ~2.5 s; torch.export + core-ATen decomposition ~4 s; "
                          "AOTAutograd forward + backward capture ~3 s; Inductor's first compile ~6 s; the block "
                          "forward compiled ~8 s, again after a reset (FX-cache hit) ~2 s, with 3 breaks (4 graphs) ~6 "
                          "s; 2 profiler kernel counts ~1 s; 3 timings of ~1 ms calls ~0.8 s"),
    "dynamic_shapes": (45, "Inductor's first compile ~6 s; 8 block-forward compiles with Inductor's caches disabled "
                           "(static 3, automatic 2, dynamic 1, bucketing 2) at ~4 s (the dynamic ones slower) ~32 s; "
                           "float64 references of 16 x (300 + 700 + 1000) tokens on the host (~0.9 TFLOP fp64) ~4 s; 5 "
                           "steady-state timings of a ~3 ms pass ~1.3 s"),
    "jax_lowering": (12, "jit lower ~1 s and XLA's compile of the 16 x 1024 x 1024 block ~3 s; op by op, each of ~50 "
                         "primitives compiled once (~0.1 s) ~5 s; float64 reference on the host (0.47 TFLOP) ~2 s; 2 "
                         "timings ~0.5 s"),
    "onnx_export": (15, "torch.onnx.export (dynamo: torch.export, translation, optimisation) ~8 s; ONNX Runtime's "
                        "optimised model and CPU/CUDA sessions ~3 s; float64 references of 4 sequences of 1024 (0.12 "
                        "TFLOP) ~0.5 s; runs at batch 1 and 3 (ORT CPU ~0.15 s a call at 3) and 3-4 timings ~3 s"),
    # t1: frameworks
    "compilation_model": (22, "JAX: the forward traced, lowered, compiled ~1 s, 3 + 2 (padded to 1024 and 2048) + 2 "
                              "small jit compiles ~0.3 s each ~2 s; torch: 2 Dynamo explains and an eager-backend "
                              "compile ~2 s, Inductor's first compile ~6 s, static 3 + automatic 2 + dynamic 1 MLP "
                              "compiles (~1.5-2.5 s) ~11 s; 5 timings of ~50 us calls ~0.5 s; the hidden width does not "
                              "change the compile counts the page is about"),
    "one_model_four_ways": (18, "100 steps per variant (5 batches of 256 a epoch x 20): NumPy float64 and float32 on "
                                "the host (~0.25 GFLOP, ~5 ms a step) ~1 s; torch eager ~0.1 s; torch.compile of the "
                                "training step: Inductor's first compile ~6 s + forward/backward graphs ~9 s (the CPU "
                                "record's first calls: 20 s); JAX jit ~0.5 s; 4 step timings ~1 s"),
    "state_and_randomness": (6, "~4 eager-backend Dynamo compiles (~0.5 s) ~2 s; ~6 small jax.jit compiles ~1.2 s; 1 "
                                "GiB arrays updated in place or copied (~0.7 ms): 4 timings ~1 s"),
    "transforms": (10, "per-example gradients at 64/256/1024 rows: the Python loop of .backward() (~20 launches, ~0.35 "
                       "ms an example) is checked at 1024 (0.35 s) and timed (10 calls at 1024 ~3.5 s, 10 at 256 ~0.9 "
                       "s, 14 at 64 ~0.3 s); the JAX loop ~1 s; vmaps 6 x 0.2 s; 4 jit compiles ~1.2 s; a float64 loop "
                       "reference of 1024 examples on the host ~0.3 s"),
    # t6: inference (plus training of the shared model once per machine: T6_TRAINING_S)
    "attention_cost": (14, "float64 references on the GPU (naive to N=2048, online softmax above: ~2.2 TFLOP fp64 and "
                           "~30 GB of fp64 elementwise traffic at N=16k) ~1.5 s; checks ~1 s; 31 timed (variant, N) "
                           "pairs (naive and math stop at 8k), <= 0.25 s each ~7 s, except the Python online-softmax "
                           "loop (N/128 blocks, ~0.15 s a call at 16k: 10 calls) ~3 s; peak-memory passes ~0.5 s"),
    "batching": (20, "the trained model in bf16: a prefill and a decode step timed at 8 batch sizes (1..128; prefills "
                     "up to 16k tokens, ~15 ms; decode steps launch-bound, a few ms) ~5 s, then the host-side "
                     "simulation (2000 requests x 6 loads x 5 policies, 3.9 s measured on a CPU core)"),
    "kv_cache": (53, "the 12-layer target in eager (~400 launches, ~2.5 ms a decode step, launch-bound at batch 1). "
                     "Float32 check, 4 prompts x 896 tokens: with the cache ~2.2 s, without (896 forwards of 128..1023 "
                     "tokens, 1.3e14 FLOP ~2.7 s fp32 + launches ~2.2 s) ~5 s, ~28 s in all; 10 step timings ~2.5 s; "
                     "whole generations timed 5 times each way in bf16 (~2.3 s each) ~22 s. Not cut: at batch 1 this "
                     "model is launch-bound on an H100, and only the longest context shows the uncached step grow"),
    "speculative": (55, "~2.5 ms a target step, ~0.5 ms a draft step (launch-bound). Float32 greedy references of 8 "
                        "prompts x 256 tokens ~5 s; speculative decoding at k = 1, 2, 4, 8 for the same 8 prompts (~2.5 "
                        "ms a token) ~20 s; the off-by-one run at k=8 ~5 s; 6 single-pass timings ~1.5 s; baseline and "
                        "4 k's timed 5 times each on 2 prompts x 256 tokens (~1.3 s a call) ~23 s"),
    "weight_only_int8": (10, "8192^2 linear at 5 row counts x 3 variants (bf16, dequantize + matmul, fused INT8 Triton) "
                             "= 15 timings ~3 s; Triton compiles for 3 block sizes ~3 s; float64 references ~0.1 s; the "
                             "T6 target (loaded from .cache/models): held-out losses full and INT8, 2 decode-step "
                             "timings ~1 s; one CUDA-graph capture and 2 timings ~1 s"),
    # t5: compression (small synthetic models; the large-layer timings are single cuBLAS/Triton calls)
    "distillation": (12, "on the host: the 256-wide teacher, 30 epochs ~1 s; per seed 7 students (alone + 4 "
                         "temperatures with every label, alone + T=4 with 10%), ~5,000 Adam steps of a 64-16-16-10 MLP "
                         "at ~0.5 ms ~3 s, x 3 seeds ~9 s; 4 latency timings on the GPU ~0.5 s"),
    "fp8_formats": (4, "4M elements cast to e4m3/e5m2 scaled and unscaled ~0.5 s; the float64 8192^3 reference on the "
                       "GPU (1.1 TFLOP fp64) ~0.05 s; _scaled_mm and bf16 8192^3 timed (~1-1.5 ms, 0.2 s each) ~0.5 s"),
    "pruning": (14, "on the host: 3 seeds x 11 pruned models (5 unstructured + 5 structured sparsities + 2:4) x masked "
                    "4-epoch fine-tunes (~92 Adam steps of a 64-256-256-10 MLP) ~4 s; magnitude masks of the 8192^2 "
                    "layer by full argsorts on the host (67 M elements, twice) ~6 s; 3 variants x 3 rounds of the "
                    "8192-wide fp32 linear at 4096 rows (~11 ms, ~0.25 s each) ~2.3 s"),
    "ptq": (18, "3 seeds of the 256-wide MLP (cached or ~1 s each); PTQ variants, outlier and calibration sweeps on the "
                "host ~3 s; fp32 and bf16 (no torchao on the GPU machine) at 3 row counts for the model and the "
                "8192-wide linear: 12 timings ~2.5 s; torch.onnx.export (dynamo) ~6 s, ORT static quantization with 256 "
                "calibration rows ~1.5 s, 3 CPU sessions x 2 timings ~1.5 s"),
    "qat": (6, "on the host: per seed the 256-wide MLP (cached, or 690 Adam steps ~0.5 s) and 2 settings x (QAT + a "
               "plain fine-tune) x 8 epochs, ~740 steps with fake-quant (~1 ms) ~1.5 s; x 3 seeds"),
    # t7: parallelism on ONE GPU (what needs several GPUs is recorded as not run)
    "data_parallel": (1, "on one GPU without torchrun its 2- and 4-rank runs are recorded 'needs 4 GPUs' right after "
                         "the opening ceilings: no work of its own"),
    "ddp_buckets": (1, "on one GPU without torchrun the bucket sweep is recorded 'needs 2 GPUs' right after the opening "
                       "ceilings: no work of its own"),
    "expert_parallel": (2, "on one GPU: the single-process MoE layer (2048 tokens, 8 experts) timed at k=1 and k=2 "
                           "(~0.25 s each); the expert-parallel ranks need 4 GPUs (recorded not run)"),
    "jax_sharding": (4, "8 host-CPU devices (the GPU machine has one GPU): 4 sharded jit compiles on XLA's CPU client "
                        "(~0.5 s), a float64 reference of the 1024 x 1024 x 4096 FFN forward and backward (~50 GFLOP) "
                        "~0.3 s, the sharded runs ~1 s"),
    "parallel_layouts": (1, "a cost-model table: arithmetic only, no device work"),
    "pipeline_interleaved": (1, "its stages are CPU processes over gloo by design: on a GPU run it records 'not run' "
                                "after the opening ceilings and saves"),
    "pipeline_real_compute": (5, "its stages are CPU processes over gloo: on a GPU run it records 'needs 2 GPUs' "
                                 "and exits"),
    "zero_stages": (3, "without torchrun (the campaign starts none) its 2- and 4-rank runs are recorded as 'needs 4 "
                       "GPUs' right after the opening ceilings; under torchrun 4 variants x a few Adam steps of an 8 "
                       "x 1025 MLP over NCCL"),
    "pipeline_parallel": (1, "its stages are CPU processes over gloo by design: on a GPU run it records 'not run' after "
                             "the opening ceilings and saves"),
    "scale_model": (1, "without torchrun the NCCL alpha/beta sweep is recorded 'needs 8 GPUs' right after the opening "
                       "ceilings (the gloo sweep is the CPU record's)"),
    "shard_gemm": (2, "the 8192-wide GEMM of 4 x 2048 tokens split 1, 2, 4, 8 ways (bf16, 1.1/t TFLOP, ~1.5 ms at t=1): "
                      "4 timings ~1 s; float64 checks on a few rows ~0.1 s"),
    "tensor_parallel": (4, "on one GPU: the single-process MLP forward + backward at 4 x 2048 x 8192 (hidden 32768, "
                           "2.6e13 FLOP, ~45 ms in bf16; weights made on the GPU) timed as 1 + 1 + 1 + 10 calls of 5 "
                           "steps ~3 s; a float64 reference at 2 x 64 x 1024 on the host; the 2- and 4-rank parts need "
                           "GPUs under torchrun (recorded not run)"),
    # t8: training at scale (a 8-layer, 1024-wide GPT, ~100 M parameters with the 32k embedding)
    "accumulation_and_overlap": (4, "fp32 GPT (8 x 1024, 32k vocab) gradients three times (one batch of 32 x 1024 "
                                    "tokens, 8 micro-batches, 8 without the 1/k): ~2e13 FLOP fp32 each ~0.4 s, model "
                                    "init on the host ~0.5 s each; the DDP-overlap part is the CPU record's (not run on "
                                    "a GPU)"),
    "activation_checkpointing": (90, "8 layers x b4 x 1024 tokens in fp32 (134 M parameters, ~80 ms a step): 5 eager "
                                     "variants and 3 dropout-free ones x ~12 steps each (check, peak, timing) ~10 s; "
                                     "3 Inductor compiles of the whole model's forward + backward, one per memory "
                                     "budget (~20-30 s each cold), then their timed steps"),
    "batch_scaling": (15, "11 one-process trainings (a 6-point lr sweep, then 1x, 2x and 4x the batch, base and scaled "
                          "lr) of a 13 M-parameter GPT: ~1700 fp32 steps of 2048-8192 tokens, ~5 ms each (launches "
                          "and host-side batches); the multi-rank and FSDP parts are CPU-only (recorded not run)"),
    "checkpoint_resume": (8, "on a GPU the job still runs on 2 forked gloo ranks of the host, in the small "
                             "configuration: 4 launches (straight, killed at 25, resumed, resumed without the RNG "
                             "state) of <= 30 steps with DCP saves every 10, ~2 s each; Young-Daly arithmetic"),
    "divergence": (23, "4 runs x 100 steps of the 8 x 1024, 32k-vocab GPT on 8 x 512 tokens (the fp16 one stops at its "
                       "overflow at step 75): fp32 steps 3.5 TFLOP at ~50 TFLOP/s ~70 ms, fp16-autocast ~15 ms, plus "
                       "per-layer gradient norms (~100 host syncs, ~2 ms): 3 x 100 x 72 ms + 76 x 17 ms"),
    "mixed_precision": (22, "5 training runs x 100 steps on 8 x 512 tokens (3.5 TFLOP a step): two fp32 (~70 ms at ~50 "
                            "TFLOP/s) ~14 s, three autocast (~18 ms) ~5.5 s; the loss-factor sweep, 20 one-step "
                            "gradients ~1 s; FP8 _scaled_mm and bf16 8192^3 timings ~0.5 s"),
    "profile_step": (8, "bf16-autocast GPT (8 x 2048, 32k vocab, ~470 M parameters) on 8 x 1024 tokens, ~2.3e13 FLOP "
                        "(~60 ms) a step: model init on the host ~2 s, 10 timed steps ~0.6 s, profiled steps with CUDA "
                        "activity and FLOP counting ~1 s, the trace's events walked in Python ~3 s"),
    "step_memory": (30, "6 one-step runs of a 134 M-parameter GPT (fp32, autocast, bf16 + fp32 master at 5 x 1024 "
                        "tokens; the last also at 256 and 512 tokens and once more under the allocator's history), "
                        "each ~1-2 s of host-side init plus a ~0.1 s step; a few thousand logged allocations replayed"),
    # t9: foundations
    "gbdt": (10, "scikit-learn's HistGradientBoosting (100 trees, depth 6, 255 bins) on 400k x 28 training rows with "
                 "the host's threads, ~2 s a fit: a warm-up fit and 3 seeds ~8 s; make_classification of 3 x 500k x 28 "
                 "~1.5 s; xgboost and lightgbm are not on the GPU machine (recorded not run)"),
    "host_device_transfers": (10, "5 sizes (1-256 MiB) x 4 copies (pageable/pinned, both ways; 256 MiB pageable ~30 ms: "
                                  "10 calls) ~5 s; pinned-buffer allocation ~1 s; overlap and input-pipeline timings "
                                  "(16 chunks of 64 MiB) ~3 s"),
    "kmeans_search": (33, "data made on the host (1M x 64, 2M x 128) ~1.5 s; k-means 20 iterations on the GPU (~0.1 s a "
                          "call with the 256 MB upload, 10 calls) ~1 s and scikit-learn's lloyd twice on the host (2.6 "
                          "TFLOP fp32 each) ~5 s; exact search of 10k queries over 2M (40 chunks of 256 x 2M distances, "
                          "~0.3 s a search): check and 10 timed calls ~3.5 s; a float64 cdist of 50 queries ~0.8 s; IVF "
                          "build ~0.7 s; the IVF search loops over 2048 lists in Python (~0.12 ms a list, ~0.25 s a "
                          "search): full scan + 5 nprobe values x 11 calls ~15 s; sharded exact search at 1, 2, 4, 8 "
                          "shards ~5.5 s"),
    "machine_laws": (12, "GEMV to GEMM on a 16384^2 fp32 weight at 12 column counts (0.36 ms to 22 ms) ~3.5 s; "
                         "Amdahl/Gustafson: 2 rounds x 6 process counts (1, 2, 3, 4, 8, 16) of process pools running 4 "
                         "serial + 36 parallel units of ~1 ms (strong) and 36p units (weak), 5-15 calls each ~8 s"),
    "numerics": (8, "sums up to 2^24 terms over 1024 lanes, launch-bound Python loops (~15 us a row for naive, ~30 us "
                    "for Kahan): 16384 rows x 3 dtypes x 2 methods + bf16-in-fp32 at the largest size ~2.5 s, the "
                    "smaller sizes ~1 s, per-lane final sums ~2 s; 2000-step trainings x 4 precisions ~1.5 s; softmax "
                    "cases ~0.5 s"),
    "streaming_topk": (8, "300 random streams and ~150 adversarial cases checked (small launch-bound ops) ~2.5 s; "
                          "top-1000 of 2^28 floats (1 GiB): torch.topk, a full sort (~40 ms), one-pass select and "
                          "streaming at 3 chunk sizes, 6 timings ~3 s"),
    # t10: benchmarking
    "profiling": (18, "a float64 reference step of the 8192 x 4096 x 16384 MLP on the GPU (6.6 TFLOP fp64) ~0.2 s; 3 "
                      "programs timed and profiled for 12 steps with CUDA activity ~3 s; the events walked in Python ~2 "
                      "s; ncu on one GELU kernel in a child process (python and torch start under ncu, one replay) ~12 "
                      "s"),
    "regression_gate": (8, "sin of 2^26 floats (0.5 GB moved, ~0.2 ms + ~50 us of event overhead a call): 100 A/A "
                           "calibration pairs, then 2 candidates x 60 trials x 2 orders x k pairs; k from the measured "
                           "spread, ~10 on a quiet GPU: ~5k calls ~1.5 s (k = 100 would be ~12 s); the gate over the "
                           "CPU records on the host ~1 s"),
    "timing_wrong_right": (7, "a 4096^3 fp32 matmul (0.14 TFLOP, ~2.7 ms) timed 7 ways in 5 interleaved rounds: 50-call "
                              "host and event timers, torch Timer (0.1 s) at 1 and all threads, do_bench median and "
                              "mean (~0.15 s each), the harness (~0.2 s): ~1.2 s a round"),
    "warmup_and_caches": (14, "Inductor's first compile of the chain ~8 s (24 s in the CPU record) and 20 single timed "
                              "calls; eager timings; the cache sweep at 5 working sets x 3 pairs x (warm, flushed), <= "
                              "20 repeats each ~1.5 s; 2000 single timed calls of a 1 MiB sum ~0.1 s; bootstrap of the "
                              "spread on the host ~1 s"),
    # added this round (T2, T3, T6 extensions; T4; T11): estimates until their first GPU record
    "lower_irs": (12, "a Triton JIT compile ~1 s and an ahead-of-time compile for sm_90 ~1 s, cuobjdump/nvdisasm ~0.5 "
                      "s; Inductor's first compile (bias + GELU on 4096 x 1000) ~6 s; allocator probes; 4096^2 bf16 "
                      "matmul chains (~1 ms) in 7 timings ~2 s"),
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
                     "on top when this is the first T6 demo on the machine (trains_t6_model)"),
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
                          "compute-sanitizer on the planted bug (~5-10 s, capped at 60 s), two host timings"),
}
T6_TRAINING_S = (100, "target (12 x 1024, ~130 M parameters) 1500 steps of 16k tokens = 2e16 FLOPs at ~300 TFLOP/s "
                      "bf16 autocast ~70 s, draft ~10 s, evaluation: paid by the first T6 demo on a machine whose "
                      ".cache/models holds no full-size model")
DEFAULT_ESTIMATE_S = (90, "no estimate set for this demo (another topic's): a cautious default")
T6_TRAINING_CALL = "trained_models"  # the call that trains the T6 models when the cache has none (trains_t6_model)


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
        for top in digests.third_party_packages(path):
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


def _demo_code_files(demo: str, demos_dir: Path = DEMOS_DIR) -> list[Path]:
    """The demo's file and the local modules it imports (demos/common, its topic's helpers, a child module
    it runs), the harness left out; [] for an unknown demo."""
    path = next(iter(sorted(demos_dir.glob(f"*/{demo}.py"))), None)
    if path is None:
        return []
    try:
        return digests.local_sources(path.resolve())
    except ValueError:  # a demo outside this repository (tests' stand-ins): its own file only
        return [path]


def process_start_s(demo: str, demos_dir: Path = DEMOS_DIR) -> tuple[float, list[str]]:
    """A demo's estimated process start on a GPU: PROCESS_START_S, plus IMPORT_START_S for each of those
    packages that its code (``_demo_code_files``) imports. Returns (seconds, the packages counted)."""
    files = _demo_code_files(demo, demos_dir)
    packages = sorted(set().union(set(), *(digests.third_party_packages(f) for f in files)) & set(IMPORT_START_S))
    return PROCESS_START_S + sum(IMPORT_START_S[p][0] for p in packages), packages


def trains_t6_model(demo: str, demos_dir: Path = DEMOS_DIR) -> bool:
    """Whether the demo's code calls ``trained_models`` (demos/t6_inference/_model.py), so that on a machine
    whose model cache holds no full-size model it pays the training (T6_TRAINING_S). Read from the code,
    so a new T6 demo cannot be missed."""
    for path in _demo_code_files(demo, demos_dir):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and T6_TRAINING_CALL in (getattr(node.func, "id", None),
                                                                   getattr(node.func, "attr", None)):
                return True
    return False


def estimate(demo: str, device_class: str, results_dirs: list[Path]) -> tuple[float, str]:
    measured = last_gpu_wall_time(demo, device_class, results_dirs) if device_class != "cpu" else None
    if measured:
        seconds, source = measured
        return seconds + PROCESS_START_S, f"{source} (wall time and start)"
    seconds, why = ESTIMATES_S.get(demo, DEFAULT_ESTIMATE_S)
    total, source = seconds + process_start_s(demo)[0], "table"
    if not any(T6_MODEL_CACHE.glob("full-*.pt")) and trains_t6_model(demo):
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
               "process_start_s": PROCESS_START_S,
               "import_start_s": {k: {"seconds": v[0], "how": v[1]} for k, v in IMPORT_START_S.items()}}
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
    start added to each. `python -m scripts.gpu_campaign --plan`."""
    results_dirs = results_dirs or [RESULTS_DIR]
    rows, total, measured = [], 0.0, 0
    for name in catalog.discover():
        found = last_gpu_wall_time(name, device_class, results_dirs)
        if found:
            seconds, how = found[0], f"measured ({found[1]})"
            measured += 1
            start = PROCESS_START_S  # last_gpu_wall_time's seconds already hold the measured start-up
        else:
            seconds, how = ESTIMATES_S.get(name, DEFAULT_ESTIMATE_S)
            start, packages = process_start_s(name)
            how = f"estimated: {how}" + (f"; start {start:.1f} s with {', '.join(packages)}" if packages else "")
        total += seconds + start
        rows.append(f"| {name} | {seconds + start:.0f} | {how} |")
    if measured < len(rows):  # the T6 model is trained by the first T6 demo that has no GPU record yet
        total += T6_TRAINING_S[0]
        rows.append(f"| (T6 model training, once per machine) | {T6_TRAINING_S[0]:.0f} | estimated: {T6_TRAINING_S[1]} |")
    windows = math.ceil(total / (CALL_BUDGET_S)) if total else 0
    lead = (f"**The whole GPU campaign: {total / 60:.1f} min of GPU time on one {device_class} "
            f"({measured} of {len(catalog.discover())} demos measured, the rest estimated), about {windows} "
            f"call(s) of {CALL_BUDGET_S / 60:.0f} min.** Each demo's time includes its process start: "
            f"{PROCESS_START_S:.0f} s (python, torch, the CUDA context, the opening and closing ceilings), plus "
            + ", ".join(f"{v[0]:g} s for {k}" for k, v in IMPORT_START_S.items())
            + " where the demo imports them; a measured time replaces the estimate as soon as a GPU record exists.")
    return "\n".join([lead, "", "| demo | GPU s (incl. start) | from |", "|---|---|---|", *rows])


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--plan"]:
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
        device_class = devices.gpu_class(info["gpu_name"])
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
