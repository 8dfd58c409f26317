# %% [markdown]
# # TP vs PP at a fixed size: every layout of 64 H100s for Llama-2-70B
#
# With the GPU count fixed, the layout (tensor-parallel x pipeline-parallel x data-parallel) decides
# where a training step's time goes: TP's all-reduces in every layer, PP's point-to-point sends and
# its bubble, DP's gradient exchange. This demo evaluates every way to split 64 GPUs (8 nodes of 8)
# into TP x PP x DP for Llama-2-70B (80 layers, hidden 8192, 64 heads sharing 8 KV heads, SwiGLU
# width 28672: 69.0 B parameters), with the alpha-beta and memory cost model of
# `demos/common/cluster_model.py` (the projection of `scale_model.py`, the calculator on the topic
# page), and lists whether each layout fits in 80 GB and where its projected time goes.
#
# TP up to 16 is included, so one row has its TP group span two nodes: its all-reduces then cross
# the nodes' InfiniBand cards (NCCL spreads them over the 8 NICs of each node, so the bandwidth is
# close to NVLink's, but the latency is not). Note also that TP traffic per GPU grows with the TP
# degree while compute per GPU does not: with a fixed global batch, TP 16 x DP 4 gives each replica
# twice the microbatches of TP 8 x DP 8, each with the same all-reduces.
#
# Then, at 1024 GPUs, the layout of the usual procedure (TP the GPUs of one node, the smallest PP that
# fits, DP the rest) against the model's fastest, with the DP gradient exchange fully exposed (the
# projection's assumption in `scale_model.py`) and overlapped with the backward pass.
#
# Pure arithmetic: no collective runs here, and the numbers are the same on every machine. Every
# assumption (link speeds from the datasheets, the compute efficiency calibrated on Megatron-LM's
# published runs, ...) is printed in the
# `assumptions` artifact of `scale_model`.

# %%
from demos.common import cluster_model
from demos.harness.run import start

run = start("parallel_layouts", title="TP vs PP at a fixed size: every layout of 64 H100s for Llama-2-70B",
            sizes={"tiny": 64, "small": 64, "full": 64})  # GPUs (the same at every size: no measurement)
LAYOUT_GPUS = run.sizes
GLOBAL_BATCH = 1024  # sequences of 4096 tokens: a 4M-token batch, as in scale_model's projection
PARTS = [("compute", "compute_s"), ("TP comm", "tp_comm_s"), ("PP comm", "pp_comm_s"), ("DP comm", "dp_exposed_s"),
         ("bubble", "bubble_s")]

# %% [markdown]
# ## Every layout, fastest first
#
# ZeRO-1, selective recomputation, 1F1B, one-sequence microbatches; `cluster_model.candidate_layouts`
# lists every valid TP x PP x DP split of the 64 GPUs (TP a power of two, here up to 16).

# %%
layout_rows = []
for cfg in cluster_model.candidate_layouts("70B", LAYOUT_GPUS, GLOBAL_BATCH, max_tp=16):
    mem, step = cluster_model.memory_per_gpu(cfg), cluster_model.step_time(cfg)
    layout_rows.append((step["total_s"] if mem["fits"] else float("inf"), cfg, mem, step))
layout_rows.sort(key=lambda row: (row[0], row[1].tp * row[1].pp))
run.table("layouts_70B_64gpu", f"Llama-2-70B on {LAYOUT_GPUS} H100s: every TP x PP x DP layout (4M-token batch, ZeRO-1, "
          "selective recomputation), fastest first; TP 16 spans two nodes",
          ["TPxPPxDP", "m", "memory (GB)", "fits", "compute (s)", "TP comm", "PP comm", "DP comm", "bubble",
           "total (s)"],
          [[f"{c.tp}x{c.pp}x{c.dp}", c.microbatches, round(mem["total_bytes"] / 1e9, 1), "yes" if mem["fits"] else "no",
            *(round(step[key], 3) for _, key in PARTS), round(step["total_s"], 3)] for _, c, mem, step in layout_rows])


def best_layout(rows, condition):
    """The fastest fitting layout among the rows that satisfy the condition."""
    return next(row for row in rows if row[0] != float("inf") and condition(row[1]))


named_layouts = {
    "best": best_layout(layout_rows, lambda c: True),
    "tp8_pp1": best_layout(layout_rows, lambda c: c.tp == 8 and c.pp == 1),
    "tp16": best_layout(layout_rows, lambda c: c.tp == 16),
}
for name, (_, cfg, mem, step) in named_layouts.items():
    prefix = f"layouts.70B.{LAYOUT_GPUS}gpu.{name}"
    shape = f"{cfg.tp}x{cfg.pp}x{cfg.dp}"
    run.metric(f"{prefix}.step_s", step["total_s"], "s", label=f"70B, {shape} on {LAYOUT_GPUS} GPUs: projected step", origin="computed")
    for degree in ("tp", "pp", "dp"):
        run.metric(f"{prefix}.{degree}", getattr(cfg, degree), "GPUs", label=f"70B, {shape}: {degree.upper()} degree", origin="computed")
    run.metric(f"{prefix}.memory_gb", mem["total_bytes"] / 1e9, "GB", label=f"70B, {shape}: memory per GPU", origin="computed")
    comm = cluster_model.comm_volume(cfg)
    for kind in ("tp", "pp", "dp"):
        run.metric(f"{prefix}.{kind}_sent_gb", comm[f"{kind}_bytes"] / 1e9, "GB",
                   label=f"70B, {shape}: bytes one GPU sends per step for {kind.upper()}", origin="computed")
    for label, key in PARTS:
        run.metric(f"{prefix}.{key.removesuffix('_s')}_share", step[key] / step["total_s"], "fraction",
                   label=f"70B, {shape} on {LAYOUT_GPUS} GPUs: {label} share of the step", origin="computed")
tp8_cfg, tp16_cfg = named_layouts["tp8_pp1"][1], named_layouts["tp16"][1]
tp_sent_ratio = cluster_model.comm_volume(tp16_cfg)["tp_bytes"] / cluster_model.comm_volume(tp8_cfg)["tp_bytes"]
expected_ratio = ((tp16_cfg.microbatches / tp16_cfg.pp * 15 / 16)
                  / (tp8_cfg.microbatches / tp8_cfg.pp * 7 / 8))
run.check("model.tp_traffic_per_gpu_grows_with_tp", abs(tp_sent_ratio - expected_ratio) < 1e-9,
          f"TP bytes per GPU per step, TP 16 over TP 8: {tp_sent_ratio:.3f} (expected {expected_ratio:.3f}: "
          "layers per stage x microbatches per replica x 2(t-1)/t per all-reduce of the same size)")

# %% [markdown]
# ## At 1024 GPUs: the procedure's layout against the model's fastest
#
# The procedure (Narayanan et al.'s takeaways): TP = the GPUs of one node, the smallest PP whose layout
# fits in 80 GB, DP the rest. `scale_model.py` projects the fastest fitting layout instead, with the DP
# gradient exchange fully exposed (`overlap_dp=False`, an upper bound). Both rankings, exposed and
# overlapped (`overlap_dp=True`: the exchange hides behind the last microbatch's backward), for the same
# 4M-token batch.

# %%
BIG_GPUS = 1024
by_overlap = {}
for overlap in (False, True):
    fitting = [(cluster_model.step_time(c), c) for c in
               cluster_model.candidate_layouts("70B", BIG_GPUS, GLOBAL_BATCH, overlap_dp=overlap)
               if cluster_model.memory_per_gpu(c)["fits"]]
    fitting.sort(key=lambda row: (row[0]["total_s"], row[1].tp * row[1].pp))
    procedure = min((row for row in fitting if row[1].tp == row[1].gpus_per_node), key=lambda row: row[1].pp)
    by_overlap[overlap] = {"best": fitting[0], "procedure": procedure, "all": fitting}
    prefix = f"layouts.70B.{BIG_GPUS}gpu" + (".overlap" if overlap else "")
    when = "DP exchange overlapped" if overlap else "DP exchange exposed"
    for name, (step, cfg) in (("best", fitting[0]), ("procedure", procedure))[:1 if overlap else 2]:
        shape = f"{cfg.tp}x{cfg.pp}x{cfg.dp}"
        for degree in ("tp", "pp", "dp"):
            run.metric(f"{prefix}.{name}.{degree}", getattr(cfg, degree), "GPUs",
                       label=f"70B on {BIG_GPUS} GPUs, {when}: {degree.upper()} of the {name} layout ({shape})",
                       origin="computed")
        run.metric(f"{prefix}.{name}.step_s", step["total_s"], "s",
                   label=f"70B, {shape} on {BIG_GPUS} GPUs, {when}: projected step", origin="computed")
        run.metric(f"{prefix}.{name}.bubble_share", step["bubble_s"] / step["total_s"], "fraction",
                   label=f"70B, {shape} on {BIG_GPUS} GPUs, {when}: bubble share of the step", origin="computed")
        for label, key in PARTS:
            run.metric(f"{prefix}.{name}.{key}", step[key], "s",
                       label=f"70B, {shape} on {BIG_GPUS} GPUs, {when}: {label} per step", origin="computed")
        run.metric(f"{prefix}.{name}.memory_gb", cluster_model.memory_per_gpu(cfg)["total_bytes"] / 1e9, "GB",
                   label=f"70B, {shape}: memory per GPU", origin="computed")
    run.metric(f"{prefix}.procedure_over_best", procedure[0]["total_s"] / fitting[0][0]["total_s"], "x",
               label=f"70B on {BIG_GPUS} GPUs, {when}: the procedure's projected step over the fastest layout's",
               origin="computed")
exposed = {f"{c.tp}x{c.pp}x{c.dp}": (c, step) for step, c in by_overlap[False]["all"]}
overlapped = {f"{c.tp}x{c.pp}x{c.dp}": step for step, c in by_overlap[True]["all"]}
run.table(f"layouts_70B_{BIG_GPUS}gpu", f"Llama-2-70B on {BIG_GPUS} H100s: every layout that fits (TP up to 8, "
          "4M-token batch, ZeRO-1), fastest first with the DP exchange exposed",
          ["TPxPPxDP", "m", "memory (GB)", "TP comm", "DP exposed", "bubble", "total (s)", "bubble share",
           "DP overlapped: DP exposed", "DP overlapped: total (s)"],
          [[shape, c.microbatches, round(cluster_model.memory_per_gpu(c)["total_bytes"] / 1e9, 1),
            round(step["tp_comm_s"], 3), round(step["dp_exposed_s"], 3), round(step["bubble_s"], 3),
            round(step["total_s"], 3), round(step["bubble_s"] / step["total_s"], 3),
            round(overlapped[shape]["dp_exposed_s"], 3), round(overlapped[shape]["total_s"], 3)]
           for shape, (c, step) in exposed.items()])

# %% [markdown]
# ## Reading the table
#
# Among the layouts that fit, the model trades TP traffic against the bubble. TP's all-reduces move
# bytes in proportion to L s b h per microbatch, fully exposed here; PP costs small point-to-point
# messages plus the bubble (p-1)/(m+p-1), and with a 4M-token batch m is large, so for this batch
# the model prefers narrow TP and deep PP. With a small global batch the bubble grows and TP 8 wins:
# the best layout depends on the batch, not only on the model. Layouts within a few percent of each
# other are a tie within the model's error.
#
# At 1024 GPUs the fastest layouts lie within a few percent of each other, and which one comes first
# depends on an assumption: charged in full, the DP exchange of the procedure's layout (DP over 128
# replicas of a model split only 8 ways) and its wider TP all-reduces cost more than the deep pipeline's
# bubble; hidden behind the backward pass, the procedure's layout, with no bubble at all, is the fastest.

# %%
run.save()
