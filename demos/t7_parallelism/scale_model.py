# %% [markdown]
# # Projecting training to a thousand GPUs: an alpha-beta cost model with its assumptions
#
# A collective on p ranks costs a latency term (alpha per step) plus a bandwidth term (beta per byte
# each rank sends); memory per GPU is model states divided by the sharding plus the activations the
# pipeline keeps in flight. With those two rules and a handful of stated assumptions, a layout
# (TP x PP x DP, ZeRO stage, microbatches) can be projected to any GPU count.
#
# The demo does three things:
#
# 1. **Measures** alpha and beta of this machine's gloo collectives (all-reduce, all-gather,
#    reduce-scatter, all-to-all on 2 and 4 ranks), fits the ring formulas to them and shows how
#    well the formulas describe the measurements.
# 2. **Validates** the model against published figures (the ZeRO paper's memory per GPU, Korthikanti
#    et al.'s activation formulas, nccl-tests' bus bandwidth, Megatron-LM's FLOP count and measured
#    TFLOP/s), after calibrating its one free parameter, the compute efficiency, on Megatron-LM's table.
# 3. **Computes** memory per GPU for Llama-2-7B and Llama-2-70B (their real shapes: SwiGLU, grouped-query
#    attention at 70B, untied embeddings) under DP, ZeRO-1/2/3, TP, PP and combinations.
# 4. **Projects** a training step (compute, TP, PP and DP communication, pipeline bubble) from 8 to
#    1024 H100s with NVLink and InfiniBand figures from the datasheets, then again with the network
#    this machine's gloo just measured.
#
# Which TP x PP x DP layout to pick at a fixed size, with the same model, is `parallel_layouts.py`.
#
# The formulas live in `demos/common/cluster_model.py` (pure Python); the same formulas run in the
# calculator on the topic page, and a test checks that both give the same numbers.
#
# Sources: Hockney's alpha-beta model; the ring and pairwise algorithms in Thakur, Rabenseifner &
# Gropp, [Optimization of Collective Communication Operations in MPICH](https://www.mcs.anl.gov/~thakur/papers/ijhpca-coll.pdf);
# NCCL's [bus-bandwidth convention](https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md);
# Rajbhandari et al., [ZeRO](https://arxiv.org/abs/1910.02054); Korthikanti et al.,
# [Reducing Activation Recomputation in Large Transformer Models](https://arxiv.org/abs/2205.05198);
# Narayanan et al., [Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM](https://arxiv.org/abs/2104.04473).

# %%
import os

import torch

from demos.common import cluster_model
from demos.harness.run import start
from records.numbers import fmt_title_number
from demos.harness.timing import summarize
from demos.t7_parallelism import _alpha_beta, _dist
from demos.t7_parallelism._collectives import COLLECTIVES, collective_ops, expected_output, rank_worker
from demos.t7_parallelism._validation import record_validation

KiB, MiB = 2**10, 2**20

_dist.pin_gpu_per_rank()  # under torchrun: this rank's GPU, before start() measures the ceilings
run = start(
    "scale_model",
    title="Scaling a transformer to 1024 GPUs: measured alpha-beta, memory per GPU, projected step time",
    sizes={  # world sizes measured, message sizes (bytes, full buffer), repeats per size class, elements
        # checked, and the margin within which the fitted model must reproduce the two largest sizes
        "tiny": {"world_sizes": (2, 4), "bytes": [4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB],
                 "repeats": {1 * MiB: 7, 64 * MiB: 3}, "check_elements": 3 * 1024, "fit_margin": 1.5},
        "small": {"world_sizes": (2, 4), "bytes": [4 * KiB * 4**i for i in range(7)] + [32 * MiB],
                  "repeats": {256 * KiB: 15, 64 * MiB: 9}, "check_elements": 3 * 8192,
                  "fit_margin": 0.5},
        "full": {"world_sizes": (2, 4, 8), "bytes": [4 * KiB * 4**i for i in range(7)] + [32 * MiB, 64 * MiB],
                 "repeats": {256 * KiB: 25, 4 * MiB: 11, 64 * MiB: 7}, "check_elements": 3 * 8192,
                 "fit_margin": 0.5},
    },
)
sizes = run.sizes

# %% [markdown]
# ## Where the ranks run
#
# As a plain script, `_dist.launch` forks the ranks on this host (gloo over TCP on 127.0.0.1, one
# intra-op thread per rank); under torchrun this process is one rank of torchrun's world, with one
# GPU per rank over NCCL on `--device cuda`. With more ranks than cores, every collective also waits
# for the operating system to schedule its ranks: part of what a CPU host's alpha measures.
# `--device cuda` without torchrun records the measurement as not run; the cost model itself is
# pure Python and the same on every machine, so the CPU record carries it.

# %%
ranks_at = _dist.place_ranks(run, sizes["world_sizes"], "NCCL alpha/beta on NVLink")
if ranks_at is None:
    run.save()
    raise SystemExit(0)
rank_device, world_sizes, backend = ranks_at.device, ranks_at.world_sizes, ranks_at.backend
run.log(f"collectives over {backend} on {rank_device.type}, world sizes {world_sizes}, "
        f"messages {sizes['bytes'][0] // KiB} KiB .. {sizes['bytes'][-1] // MiB} MiB")

# %% [markdown]
# ## The collectives, and what each rank should end up with
#
# Every size below is the **full buffer** n: the all-reduce's tensor, the all-gather's output (each
# rank contributes n/p), the reduce-scatter's input (each rank keeps n/p), and each rank's
# all-to-all input (it sends an n/p chunk to every rank). The ring formulas of `cluster_model.py`:
#
# | collective | alpha coefficient | beta coefficient (bytes each rank sends) |
# |---|---|---|
# | all-reduce (ring) | 2(p-1) | 2(p-1)/p x n |
# | all-gather (ring) | p-1 | (p-1)/p x n |
# | reduce-scatter (ring) | p-1 | (p-1)/p x n |
# | all-to-all (pairwise) | p-1 | (p-1)/p x n |
#
# Each rank's input comes from a seeded generator, so any process can recompute what every rank
# must receive: each rank checks its own result (float64 reference) before any timing, and the
# main process records the check over all ranks (`_collectives.py` has the inputs, the expected
# outputs and the calls).

# %% [markdown]
# ## The measurement
#
# For every collective and message size: two warm-up calls, then repeats. Before each repeat all
# ranks meet at a barrier; each rank times its own call with the harness's device timer, and a
# repeat's time is the **slowest rank's** (the collective is done when the last rank is). The
# median over repeats is the measured time. Inputs are random, never zeros. The repeats go
# round-robin over the message sizes, so a burst of other work on the machine lands on all sizes
# alike instead of bending the curve at one of them.

# %%
measured = {}  # world size -> {(kind, bytes): Timing}
apis, unavailable = {}, set()
for world in world_sizes:
    ranks = _dist.launch(rank_worker, world, rank_device.type, sizes, device=rank_device)
    if ranks is None:  # another rank under torchrun: rank 0 writes the record
        _dist.shutdown()
        raise SystemExit(0)
    available = [kind for kind in COLLECTIVES if ranks[0]["apis"][kind] is not None]
    for kind in COLLECTIVES:
        if kind not in available:
            unavailable.add(kind)
            run.not_run(f"{backend}.{kind}.p{world}", f"this torch build's {backend} supports none of "
                        + ", ".join(f"dist.{api}" for api, _, _ in collective_ops(kind, torch.zeros(world), world)))
            continue
        got = torch.cat([r["checked"][kind] for r in ranks])
        expected = torch.cat([expected_output(kind, r, world, sizes["check_elements"]) for r in range(world)])
        run.check_close(f"{backend}.{kind}.p{world}", got, expected, rtol=1e-5, atol=1e-5,
                        reference_name=f"float64 {kind} of every rank's seeded input")
        apis[kind] = ranks[0]["apis"][kind]
    measured[world] = {}
    for key in ranks[0]["times"]:
        slowest = [max(per_rank) for per_rank in zip(*(r["times"][key] for r in ranks))]
        measured[world][key] = summarize(slowest[0], slowest)
    run.log(f"  {world} ranks: " + ", ".join(f"{k} {measured[world][(k, sizes['bytes'][-1])].median_s * 1e3:.1f} ms"
                                          for k in available) + f" at {sizes['bytes'][-1] // MiB} MiB")
for kind, api in apis.items():
    run.log(f"  {kind}: measured with dist.{api}")
measured_kinds = [kind for kind in COLLECTIVES if kind in apis and kind not in unavailable]

# %% [markdown]
# ## Fitting alpha and beta
#
# For each collective and world size: least squares on the formula's two features (the alpha and
# beta coefficients of the table above) over every message size, with *relative* residuals so the
# 4 KiB points count as much as the 32 MiB ones. The fit quality is the largest relative error over
# all sizes, and over the two largest sizes, where the bandwidth term dominates (the check: within
# 50% there; the tests' tiny run, with 3 repeats of messages up to 8 MiB, allows 150%).
#
# The model also claims that one (alpha, beta) serves every p; a fit over all world sizes together
# tests that claim. Here it cannot hold: with more ranks than cores, every step of a collective also
# waits for the scheduler, so alpha and beta grow with p. The link this machine's projection uses
# is therefore the all-reduce fitted at the largest world size with no more ranks than cores.

# %%
FIT_MARGIN_LARGEST = sizes["fit_margin"]  # 50% at the record's sizes; looser for the tests' tiny run
largest = sorted(sizes["bytes"])[-2:]
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
link_world = max([p for p in world_sizes if p <= cores] or [min(world_sizes)])


fits = {}  # (kind, world size) -> (alpha, beta)
fit_rows = []
for kind in measured_kinds:
    lines = _alpha_beta.fit_and_record(run, backend, kind, measured, world_sizes, sizes["bytes"], largest,
                                       FIT_MARGIN_LARGEST, fits, fit_rows)
    # the finding: the fit at the link's world size, and how far it is from the measured times
    alpha, beta = fits[(kind, link_world)]
    measured_ms, model_ms = lines[f"measured, {link_world} ranks"][1], lines[f"model, {link_world} ranks"][1]
    worst = max(abs(b - a) / a for a, b in zip(measured_ms, model_ms))
    run.series(f"{backend}_{kind}", f"{kind} over {backend}, {link_world} ranks: alpha {fmt_title_number(alpha * 1e6)} us, "
               f"{fmt_title_number(1 / beta / 1e9)} GB/s; model within {worst:.0%}",
               "message size n (MiB, full buffer)", "time (ms)", lines, x_log=True, y_log=True)

run.table("alpha_beta_fit", f"Fitted alpha and 1/beta per collective and world size ({backend}, {rank_device.type} "
          "ranks); 'all together' = one fit over every world size", ["collective", "world size", "alpha (us)",
                                                                    "1/beta (GB/s)", "max rel. error",
                                                                    "max rel. error, 2 largest sizes"], fit_rows)
run.table("collective_times", f"Measured median time per collective ({backend}), ms",
          ["collective", "world size"] + [f"{n // KiB} KiB" if n < MiB else f"{n // MiB} MiB" for n in sizes["bytes"]],
          [[kind, p] + [round(measured[p][(kind, n)].median_s * 1e3, 3) for n in sizes["bytes"]]
           for kind in measured_kinds for p in world_sizes])

# %% [markdown]
# ## The model against published figures
#
# Each row: a figure a paper or tool published, this model's value for the same case, and the
# difference. *formula* rows evaluate a paper's formula typed independently of the model's code;
# *calibration* rows are what the compute efficiency was fitted to (Megatron-LM's Table 1, one
# efficiency per run, `EFFICIENCY_BY_HIDDEN`), so they agree by construction; the Table 2 rows are
# runs the fit never saw (other batch and data-parallel sizes). Tolerances: 1e-9 for formulas, 0.1%
# for the calibration (its 4-digit rounding), 5% for the rest (published figures are rounded).

# %%
validation = record_validation(run)  # _validation.py: a metric, a check and a table row per published figure

# %% [markdown]
# ## Memory per GPU
#
# Mixed-precision Adam keeps 16 bytes per parameter (2 bf16 weights, 2 bf16 gradients, 12 for the
# fp32 master copy, momentum and variance). ZeRO-1 shards the 12 over the DP ranks, ZeRO-2 also the
# gradients, ZeRO-3 also the weights; TP and PP divide everything by t x p. Activations (per layer,
# per microbatch, Korthikanti et al.) with sequence parallelism and selective recomputation, the
# setting used throughout: 34 s b h / t bytes, and with 1F1B the first stage holds p microbatches of
# its L/p layers. First, the model against numbers derivable by hand: Llama-2-7B's parameters are
# 32 layers x (4 h^2 attention + 3 h x 11008 SwiGLU) + 2 x 32000 x h untied embeddings.

# %%
P7 = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 2 * 32000 * 4096  # 6,738,149,376 parameters
dp_only = cluster_model.memory_per_gpu(dict(cluster_model.MODELS["7B"], dp=64))
run.check("model.memory_7B_dp_only", dp_only["params_total"] == P7 and dp_only["model_states_bytes"] == 16 * P7,
          f"Llama-2-7B, plain DP: {dp_only['model_states_bytes']:.6e} bytes of model states = 16 B x {P7:,} "
          "parameters")
P70 = cluster_model.config_params(cluster_model.MODELS["70B"])
run.check("model.llama2_70B_params", abs(P70 - 68.975e9) < 1e6,
          f"Llama-2-70B: {P70:,.0f} parameters (the released checkpoint: 68.98 B, norm weights included)")
zero3 = cluster_model.memory_per_gpu(dict(cluster_model.MODELS["7B"], dp=64, zero_stage=3))
run.check("model.zero3_bytes_per_param", abs(zero3["model_states_bytes"] / P7 - 16 / 64) < 1e-12,
          f"7B, ZeRO-3 over 64 GPUs: {zero3['model_states_bytes'] / P7:.6f} B/param = 16/64")
pipe = cluster_model.bubble(dict(cluster_model.MODELS["7B"], pp=4, microbatches=8))
run.check("model.bubble_fraction", abs(pipe["fraction"] - 3 / 11) < 1e-12,
          f"pp=4, m=8: bubble {pipe['fraction']:.6f} of the step = (p-1)/(m+p-1) = 3/11")
ar = cluster_model.bytes_sent_per_rank("all_reduce", 1e9, 8)
run.check("model.ring_all_reduce_volume", abs(ar - 1.75e9) < 1e-3,
          f"ring all-reduce of 1 GB on 8 ranks: each rank sends {ar / 1e9:.4f} GB = 2 x 7/8 GB")

SETTING = dict(seq_len=4096, microbatch_size=1, microbatches=8, recompute="selective")
STRATEGIES = [  # name, key in metric names, layout for N GPUs (None where N does not allow it)
    ("DP", "dp", lambda n: dict(dp=n)),
    ("ZeRO-1", "zero1", lambda n: dict(dp=n, zero_stage=1)),
    ("ZeRO-2", "zero2", lambda n: dict(dp=n, zero_stage=2)),
    ("ZeRO-3", "zero3", lambda n: dict(dp=n, zero_stage=3)),
    ("TP8", "tp8", lambda n: dict(tp=8, dp=n // 8) if n >= 8 else None),
    ("TP8+PP4", "tp8_pp4", lambda n: dict(tp=8, pp=4, dp=n // 32) if n >= 32 else None),
    ("TP8+PP4+ZeRO-1", "tp8_pp4_zero1", lambda n: dict(tp=8, pp=4, dp=n // 32, zero_stage=1) if n >= 32 else None),
]
memory_rows = []
for model in ("7B", "70B"):
    run.metric(f"memory.{model}.params_b", cluster_model.config_params(cluster_model.MODELS[model]) / 1e9,
               "billion", label=f"{cluster_model.MODEL_NAMES[model]}: parameters (SwiGLU, GQA, untied embeddings)", origin="computed")
    for n_gpus in (8, 64, 512):
        for name, key, layout in STRATEGIES:
            if layout(n_gpus) is None:
                continue
            mem = cluster_model.memory_per_gpu(dict(cluster_model.MODELS[model], **SETTING, **layout(n_gpus)))
            gb = {k: mem[k] / 1e9 for k in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                                            "total_bytes")}
            memory_rows.append([model, n_gpus, name, *(round(v, 2) for v in gb.values()),
                                "yes" if mem["fits"] else "no"])
            run.metric(f"memory.{model}.{key}.{n_gpus}gpu", gb["total_bytes"], "GB",
                       label=f"{cluster_model.MODEL_NAMES[model]} on {n_gpus} GPUs, {name}: memory per GPU", origin="computed")
run.table("memory", "Memory per GPU (GB), mixed-precision Adam, s=4096, b=1, sequence parallelism, selective "
          "recomputation, 1F1B with m=8; fits = at most 80 GB",
          ["model", "GPUs", "layout", "weights", "gradients", "optimizer", "activations", "total", "fits in 80 GB"],
          memory_rows)

# %% [markdown]
# ## Projected step time, 8 to 1024 GPUs
#
# The layout for each GPU count: of every TP x PP x DP split (TP up to the 8 GPUs of one NVLink node)
# that fits in 80 GB, the fastest in this model (`choose_config`), ZeRO-1, and m = global batch / DP
# microbatches; `parallel_layouts.py` sets it beside the usual procedure's layout at 1024 GPUs. The global
# batch is fixed (1024 sequences of 4096 tokens, 4M tokens), so this is strong scaling: more GPUs
# share the same work, and the per-GPU communication that does not shrink with it shows. Scaling
# efficiency = tokens/s per GPU relative to the smallest GPU count whose layout fits.
#
# Then the same projection with this machine's network: both links replaced by the all-reduce's
# alpha and beta fitted above (on the largest world size with a core per rank; compute stays an
# H100's), to show what a network like this one would do to the same training.

# %%
GLOBAL_BATCH = 1024
GPU_COUNTS = [8 * 2**i for i in range(8)]  # 8 .. 1024
measured_link = fits[("all_reduce", link_world)]
run.metric(f"proj_{backend}.link_ranks", link_world, "ranks",
           label=f"world size of the {backend} all-reduce fit used as this machine's network")
run.artifact("assumptions", cluster_model.assumptions_text(cluster_model.choose_config("7B", 64, GLOBAL_BATCH))
             + f"\n\nScaling sweep: global batch {GLOBAL_BATCH} sequences x 4096 tokens, ZeRO-1, selective "
               "recomputation, layouts from cluster_model.choose_config."
             + f"\nThis machine's network: the {backend} all-reduce fit on {link_world} ranks, "
               f"alpha {measured_link[0] * 1e6:.1f} us, 1/beta {1 / measured_link[1] / 1e9:.3f} GB/s, "
               f"used for both links in the '{backend} network' projection.")

PARTS = [("compute", "compute_s"), ("TP comm", "tp_comm_s"), ("PP comm", "pp_comm_s"), ("DP comm", "dp_exposed_s"),
         ("bubble", "bubble_s")]
efficiency_lines = {}
for model in ("7B", "70B"):
    rows, shares = [], {label: [] for label, _ in PARTS}
    counts, eff, base, mfus = [], [], None, {}
    for n_gpus in GPU_COUNTS:
        cfg = cluster_model.choose_config(model, n_gpus, GLOBAL_BATCH)
        if cfg is None:
            rows.append([n_gpus, "does not fit"] + [None] * 13)
            continue
        step = cluster_model.step_time(cfg)
        slow = cluster_model.step_time(cluster_model.with_link(cfg, *measured_link))
        per_gpu = step["tokens_per_s"] / n_gpus
        mfus[n_gpus] = step["mfu"]
        base = base or (n_gpus, per_gpu)
        counts.append(n_gpus)
        eff.append(per_gpu / base[1])
        for label, key in PARTS:
            shares[label].append(step[key] / step["total_s"])
        mem = cluster_model.memory_per_gpu(cfg)
        rows.append([n_gpus, f"{cfg.tp}x{cfg.pp}x{cfg.dp}", cfg.microbatches, round(mem["total_bytes"] / 1e9, 1),
                     *(round(step[key], 3) for _, key in PARTS), round(step["total_s"], 3), round(per_gpu),
                     round(eff[-1], 3), round(step["mfu"], 3), round(slow["total_s"], 1),
                     round(slow["mfu"], 4)])
        if n_gpus in (base[0], GPU_COUNTS[-1]):
            tag = f"{n_gpus}gpu"
            run.metric(f"proj.{model}.step_s.{tag}", step["total_s"], "s",
                       label=f"{model} on {n_gpus} H100s ({cfg.tp}x{cfg.pp}x{cfg.dp}): projected step time, 4M tokens", origin="computed")
            for degree in ("tp", "pp", "dp", "microbatches"):
                run.metric(f"proj.{model}.{degree}.{tag}", getattr(cfg, degree),
                           "microbatches" if degree == "microbatches" else "GPUs",
                           label=f"{model} on {n_gpus} H100s: {degree} of the chosen layout", origin="computed")
            run.metric(f"proj.{model}.memory_gb.{tag}", mem["total_bytes"] / 1e9, "GB",
                       label=f"{model} on {n_gpus} H100s: memory per GPU of the chosen layout", origin="computed")
            run.metric(f"proj.{model}.mfu.{tag}", step["mfu"], "fraction",
                       label=f"{model} on {n_gpus} H100s: projected model FLOPs utilisation (6 P T / time / peak)", origin="computed")
            for label, key in PARTS:
                run.metric(f"proj.{model}.{key.removesuffix('_s')}_share.{tag}", step[key] / step["total_s"],
                           "fraction", label=f"{model} on {n_gpus} H100s: {label} share of the step", origin="computed")
            last_step, last_slow = step, slow
            run.metric(f"proj_{backend}.{model}.mfu.{tag}", slow["mfu"], "fraction",
                       label=f"{model} on {n_gpus} H100s with this machine's {backend} network: projected MFU", origin="computed")
            run.metric(f"proj_{backend}.{model}.step_s.{tag}", slow["total_s"], "s",
                       label=f"{model} on {n_gpus} H100s with this machine's {backend} network: projected step time", origin="computed")
    last = GPU_COUNTS[-1]
    peak_at = max(mfus, key=mfus.get)
    run.metric(f"proj.{model}.mfu_peak", mfus[peak_at], "fraction", label=f"{model}: highest projected MFU", origin="computed")
    run.metric(f"proj.{model}.mfu_peak_gpus", peak_at, "GPUs", label=f"{model}: GPU count of the highest MFU", origin="computed")
    run.metric(f"proj.{model}.compute_efficiency", cluster_model.efficiency(cluster_model.MODELS[model]), "fraction",
               label=f"{model}: calibrated compute efficiency at hidden {cluster_model.MODELS[model]['hidden']}", origin="computed")
    run.metric(f"proj.{model}.min_gpus", base[0], "GPUs", label=f"{model}: fewest GPUs whose layout fits in 80 GB", origin="computed")
    run.metric(f"proj.{model}.efficiency.{last}gpu", eff[-1], "fraction",
               label=f"{model}: scaling efficiency at {last} GPUs (tokens/s per GPU relative to {base[0]} GPUs)", origin="computed")
    run.metric(f"proj_{backend}.{model}.slowdown.{last}gpu", last_slow["total_s"] / last_step["total_s"], "x",
               label=f"{model} on {last} GPUs: step time with the {backend} network over NVLink + InfiniBand", origin="computed")
    run.table(f"projection_{model}", f"{model}: projected step (s) for a 4M-token batch on H100s, NVLink + IB NDR "
              f"(layout TP x PP x DP, ZeRO-1, selective recomputation), and with this machine's {backend} network",
              ["GPUs", "TPxPPxDP", "m", "memory (GB)", "compute", "TP comm", "PP comm", "DP comm", "bubble", "total",
               "tokens/s per GPU", "efficiency", "MFU", f"total, {backend} net",
               f"MFU, {backend} net"], rows)
    run.series(f"breakdown_{model}", f"{model}: where a projected step's time goes (NVLink + InfiniBand)",
               "GPUs", "share of step time", {label: (counts, ys) for label, ys in shares.items()}, x_log=True,
               computed=True)
    efficiency_lines[f"{model}, NVLink + IB"] = (counts, eff)
run.series("scaling_efficiency", "Projected scaling efficiency (strong scaling, 4M-token batch)", "GPUs",
           "tokens/s per GPU relative to the smallest layout that fits", efficiency_lines, x_log=True,
           hlines={"perfect scaling": 1.0}, computed=True)

# %% [markdown]
# ## Reading the projection
#
# - **Memory decides what is allowed.** Llama-2-70B's states are 16 B per parameter, about 1.1
#   terabytes, so it does not fit on one 8-GPU node even with TP = 8; ZeRO-1 then shards the
#   optimizer over DP, and PP divides everything by the number of stages.
# - **Compute runs at the calibrated efficiency** (about 0.53 of peak at these hidden sizes, fitted to
#   Megatron-LM's runs), and the step counts attention's FLOPs (12 L h s per token: 16% more than
#   6 N for Llama-2-7B at 4k context, 8% for Llama-2-70B). MFU is below that efficiency by whatever the communication
#   and the bubble add.
# - **Among the layouts that fit, the model trades TP traffic against the bubble.** TP's all-reduces
#   move bytes in proportion to L s b h per microbatch while its compute grows as L s b h^2, so TP's
#   share of the step is set by the layout (and falls as 1/h); it is fully exposed here. PP costs
#   only small point-to-point messages plus the bubble (p-1)/(m+p-1), and with a 4M-token batch m is
#   large, so for this batch the model prefers narrow TP and deep PP. With a small global batch (few
#   microbatches) the bubble grows and TP 8 wins: the best layout depends on the batch, not only on
#   the model. Real systems also pay costs this model leaves out (stage imbalance, p2p latency
#   jitter, smaller GEMMs), and they overlap part of TP's traffic: treat the ranking of close layouts
#   as a tie.
# - **Scaling efficiency** is tokens/s per GPU relative to the smallest GPU count that fits. For the
#   70B model it exceeds 1 at first: the fewest GPUs fit only with a wider TP group, whose exposed
#   all-reduces cost more than the bubble of the layouts that twice the GPUs allow. At the largest
#   counts the fixed batch is spread thin: fewer microbatches per pipeline, so the bubble and the
#   exposed DP exchange grow, and MFU falls from its peak (strong scaling: the batch does not grow
#   with the GPUs, as it did in Megatron-LM's weak-scaling table).
# - **The network is the assumption that matters most.** With the alpha and beta just measured for
#   gloo on loopback, the same layouts spend most of their time communicating: see the slowdown and
#   the MFU columns.
#
# Everything above rests on the assumptions printed in the `assumptions` artifact; change them in
# the calculator on the topic page.

# %%
_dist.shutdown()  # under torchrun: leave the process group before writing
run.save()
