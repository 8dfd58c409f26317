"""A cost model for training a transformer on many GPUs: collectives, memory per GPU, step time.

Pure Python, no torch: the same formulas run in the browser (docs/assets/parallel-calculator.js,
checked against this file by tests/test_scale_model.py), so a reader can change a configuration
and see what the demo's projections would say.

Three parts, each with its sources:

1. Collectives in the alpha-beta (Hockney) model: a message of n bytes costs alpha + n * beta.
   Ring algorithms as in Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
   Operations in MPICH" (https://www.mcs.anl.gov/~thakur/papers/ijhpca-coll.pdf); the per-rank
   traffic factors are the ones NCCL's "bus bandwidth" uses
   (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). n is always the *full*
   buffer: the all-reduce's tensor, the all-gather's output, the reduce-scatter's input, one rank's
   all-to-all input.
2. Memory per GPU under mixed-precision Adam with ZeRO stages 0-3 (Rajbhandari et al., "ZeRO:
   Memory Optimizations Toward Training Trillion Parameter Models", https://arxiv.org/abs/1910.02054),
   tensor (TP) and pipeline (PP) parallelism dividing the model states, and activations per layer
   from Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
   (https://arxiv.org/abs/2205.05198).
3. Step time = compute + TP all-reduces + PP sends + (exposed) DP gradient traffic + pipeline bubble.
   Compute counts the matmul FLOPs of Narayanan et al., "Efficient Large-Scale Language Model Training
   on GPU Clusters Using Megatron-LM" (https://arxiv.org/abs/2104.04473), equation 3: 6 FLOPs per
   parameter per token plus 12 L h s for the attention scores, plus what recomputation repeats. Its
   speed is a fraction of peak ("compute efficiency") CALIBRATED on that paper's Table 1: for each of
   its ten runs, the efficiency that makes this model reproduce the published TFLOP/s per GPU
   (``EFFICIENCY_BY_HIDDEN``, checked against ``cluster_validation.calibrate_efficiency`` by a test), interpolated by
   hidden size.

Part 1 is demos/common/collectives.py; the configurations and their validation are
demos/common/cluster_config.py. demos/common/cluster_validation.py compares the model with the published figures (ZeRO paper,
Korthikanti et al., nccl-tests, Megatron-LM) and holds the fit behind ``EFFICIENCY_BY_HIDDEN``;
tests/test_scale_model_validation.py pins them.

A configuration is a ``Config`` (or a plain dict with the same field names: that is what the
JavaScript functions take). Every assumption is a field with a default and a one-line reason in
``ASSUMPTIONS``; ``assumptions_text`` prints them.
"""

from __future__ import annotations

import dataclasses

# The links and collectives (part 1) and the configurations live in their own files; their names are
# imported here so that callers keep one entry point, ``cluster_model``.
from demos.common.cluster_config import (  # noqa: F401 (re-exported)
    ASSUMPTIONS, FIXED_ASSUMPTIONS, MODEL_NAMES, MODELS, RECOMPUTE, SCHEDULES, Config, _checked, as_config, problem)
from demos.common.collectives import (  # noqa: F401 (re-exported)
    FEATURES, GB, LINKS, US, Link, all_gather_features, all_reduce_features, all_to_all_features, bytes_sent_per_rank,
    collective_time, fit_alpha_beta, max_relative_error, reduce_scatter_features)


# -- memory -----------------------------------------------------------------------------------------

WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 12  # per parameter, mixed-precision Adam


def params_count(layers: int, hidden: int, vocab: int) -> float:
    """12 L h^2 + V h: a GPT-shaped model (4h MLP, full heads, one tied embedding). ``config_params`` counts
    any shape; for a GPT shape both agree."""
    return 12.0 * layers * hidden * hidden + vocab * hidden


def layer_params(c: Config) -> float:
    """Weights of one transformer layer: Q and output projections h x h, K and V h x kv_dim, MLP 2 or 3 h x ffn."""
    kv_dim = c.hidden * c.kv_heads / c.heads
    mlp_matrices = 3.0 if c.gated_mlp else 2.0
    return 2.0 * c.hidden * c.hidden + 2.0 * c.hidden * kv_dim + mlp_matrices * c.hidden * c.ffn_hidden


def embedding_params(c: Config) -> float:
    return (1.0 if c.tied_embeddings else 2.0) * c.vocab * c.hidden


def config_params(cfg) -> float:
    """Parameters of the configuration's model (biases and norm weights ignored)."""
    c = as_config(cfg)
    return c.layers * layer_params(c) + embedding_params(c)


def model_state_bytes(params: float, dp: int = 1, zero_stage: int = 0) -> dict:
    """Bytes of weights, gradients and optimizer states one DP rank keeps for ``params`` parameters (ZeRO paper,
    section 5: 2 + 2 + K bytes per parameter, K = 12; stage 1 shards the K, stage 2 also the gradients, stage 3
    also the weights)."""
    weights = WEIGHT_BYTES * params / (dp if zero_stage >= 3 else 1)
    grads = GRAD_BYTES * params / (dp if zero_stage >= 2 else 1)
    optimizer = OPTIMIZER_BYTES * params / (dp if zero_stage >= 1 else 1)
    return {"weights_bytes": weights, "grads_bytes": grads, "optimizer_bytes": optimizer,
            "model_states_bytes": weights + grads + optimizer}


def activation_bytes_per_layer(c: Config) -> float:
    """Bytes one layer keeps for one microbatch until its backward (Korthikanti et al., Table 2)."""
    sbh = float(c.seq_len) * c.microbatch_size * c.hidden
    t = c.tp
    attention_scores = 5.0 * c.heads * c.seq_len / c.hidden
    split = c.sequence_parallel or t == 1
    if c.recompute == "full":
        return 2.0 * sbh / t if split else 2.0 * sbh
    if c.recompute == "selective":
        return 34.0 * sbh / t if split else sbh * (10.0 + 24.0 / t)
    return sbh * (34.0 + attention_scores) / t if split else sbh * (10.0 + 24.0 / t + attention_scores / t)


def microbatches_in_flight(c: Config) -> float:
    """How many microbatches' activations the first pipeline stage holds at its peak."""
    if c.pp == 1:
        return 1.0
    if c.schedule == "gpipe":
        return float(c.microbatches)
    if c.interleave == 1:
        return float(min(c.pp, c.microbatches))
    return min(c.pp + (c.pp - 1) / c.interleave, float(c.microbatches))


def memory_per_gpu(cfg) -> dict:
    """Bytes per GPU (the first pipeline stage, the fullest): model states and activations."""
    c = _checked(cfg)
    params_total = config_params(c)
    params_per_gpu = params_total / (c.tp * c.pp)
    states = model_state_bytes(params_per_gpu, c.dp, c.zero_stage)
    weights, grads, optimizer = states["weights_bytes"], states["grads_bytes"], states["optimizer_bytes"]
    per_layer = activation_bytes_per_layer(c)
    in_flight = microbatches_in_flight(c)
    activations = per_layer * (c.layers / c.pp) * in_flight
    total = weights + grads + optimizer + activations
    capacity = c.gpu_memory_gb * GB
    return {
        "params_total": params_total,
        "params_per_gpu": params_per_gpu,
        "weights_bytes": weights,
        "grads_bytes": grads,
        "optimizer_bytes": optimizer,
        "model_states_bytes": weights + grads + optimizer,
        "activation_bytes_per_layer": per_layer,
        "microbatches_in_flight": in_flight,
        "activations_bytes": activations,
        "total_bytes": total,
        "capacity_bytes": capacity,
        "fits": total <= capacity,
    }


# -- communication ---------------------------------------------------------------------------------


def _link(c: Config, group_size: int, stride: int) -> str:
    """'intra' or 'inter' for a group of ``group_size`` GPUs ``stride`` ranks apart; 'none' for one GPU."""
    if group_size == 1:
        return "none"
    return "intra" if group_size * stride <= c.gpus_per_node else "inter"


def _nics(c: Config, group_size: int, stride: int) -> int:
    """How many of a node's network cards one collective of the group drives when it spans nodes: one
    per group member inside a node, since NCCL spreads its rings (channels) over them (rail-optimized
    nodes, one NIC per GPU)."""
    return max(1, min(group_size, c.gpus_per_node // stride))


def _alpha_beta(c: Config, link: str, nics: int = 1) -> tuple[float, float]:
    if link == "intra":
        return c.intra_alpha_us * US, 1.0 / (c.intra_bandwidth_gbs * GB)
    bandwidth = min(c.intra_bandwidth_gbs, c.inter_bandwidth_gbs * nics)  # the NICs, but never faster than NVLink
    return c.inter_alpha_us * US, 1.0 / (bandwidth * GB)


def _parts(c: Config) -> dict:
    """Every communication of one step for one GPU: (count, kind, bytes n, group size, link, NICs) per parallelism."""
    sbh = float(c.seq_len) * c.microbatch_size * c.hidden
    params_per_gpu = config_params(c) / (c.tp * c.pp)
    m = c.microbatches
    tp_link, pp_link, dp_link = _link(c, c.tp, 1), _link(c, c.pp, c.tp), _link(c, c.dp, c.tp * c.pp)
    tp_nics, dp_nics = _nics(c, c.tp, 1), _nics(c, c.dp, c.tp * c.pp)
    tp_per_layer = 6 if c.recompute == "full" else 4
    tp = [((c.layers / c.pp) * m * tp_per_layer, "all_reduce", 2.0 * sbh, c.tp, tp_link, tp_nics)] if c.tp > 1 else []
    pp = [(2.0 * m * c.interleave, "p2p", 2.0 * sbh / c.tp, 2, pp_link, 1)] if c.pp > 1 else []
    grads = 2.0 * params_per_gpu  # bf16
    dp = []
    if c.dp > 1:
        rs_ag = ("reduce_scatter", grads, c.dp, dp_link, dp_nics), ("all_gather", grads, c.dp, dp_link, dp_nics)
        if c.zero_stage == 0:
            dp = [(1.0, "all_reduce", grads, c.dp, dp_link, dp_nics)]
        elif c.zero_stage == 1:
            dp = [(1.0, *rs_ag[0]), (1.0, *rs_ag[1])]
        elif c.zero_stage == 2:
            dp = [(float(m), *rs_ag[0]), (1.0, *rs_ag[1])]
        else:
            dp = [(2.0 * m, *rs_ag[1]), (float(m), *rs_ag[0])]
    return {"tp": (tp, tp_link), "pp": (pp, pp_link), "dp": (dp, dp_link)}


def _volume(items) -> float:
    total = 0.0
    for count, kind, n, p, _link_kind, _nics_used in items:
        total += count * (n if kind == "p2p" else bytes_sent_per_rank(kind, n, p))
    return total


def _seconds(c: Config, items) -> float:
    total = 0.0
    for count, kind, n, p, link, nics in items:
        alpha, beta = _alpha_beta(c, link, nics)
        total += count * (alpha + n * beta if kind == "p2p" else collective_time(kind, n, p, alpha, beta))
    return total


def comm_volume(cfg) -> dict:
    """Bytes each GPU sends in one step, per parallelism, and how many operations carry them."""
    c = _checked(cfg)
    parts = _parts(c)
    out = {}
    for name in ("tp", "pp", "dp"):
        items, link = parts[name]
        out[f"{name}_bytes"] = _volume(items)
        out[f"{name}_ops"] = sum(count for count, *_ in items)
        out[f"{name}_link"] = link
    out["total_bytes"] = out["tp_bytes"] + out["pp_bytes"] + out["dp_bytes"]
    return out


def bubble(cfg) -> dict:
    """Pipeline bubble: idle time over ideal time (p-1)/(v m), and its share of the pipeline's time."""
    c = _checked(cfg)
    if c.pp == 1:
        return {"over_ideal": 0.0, "fraction": 0.0}
    v_m = c.interleave * c.microbatches
    return {"over_ideal": (c.pp - 1) / v_m, "fraction": (c.pp - 1) / (v_m + c.pp - 1)}


def flops_per_token(cfg) -> dict:
    """Model FLOPs (what the model needs) and hardware FLOPs (what recomputation adds) per token of a
    training step: Narayanan et al. 2021, eq. 3, for any shape."""
    c = as_config(cfg)
    input_embedding = 0.0 if c.tied_embeddings else c.vocab * c.hidden  # a lookup: no FLOPs
    attention = 12.0 * c.layers * c.hidden * c.seq_len  # QK^T and scores x V: 4 h s per layer forward, x 3
    model = 6.0 * (config_params(c) - input_embedding) + attention
    if c.recompute == "full":
        extra = 2.0 * c.layers * layer_params(c) + attention / 3.0  # one more forward of every layer
    elif c.recompute == "selective":
        extra = attention / 3.0  # the attention core's forward again
    else:
        extra = 0.0
    return {"model": model, "hardware": model + extra, "attention": attention}


# Compute efficiency (fraction of peak while computing), fitted by cluster_validation.calibrate_efficiency
# to each run of Megatron-LM's Table 1 and rounded to 4 digits (a test checks the rounding): (hidden size, efficiency).
EFFICIENCY_BY_HIDDEN = ((2304, 0.4431), (3072, 0.4686), (4096, 0.5258), (6144, 0.5357), (8192, 0.5271),
                        (10240, 0.5368), (12288, 0.5653), (16384, 0.5951), (20480, 0.6265), (25600, 0.6188))


def calibrated_efficiency(hidden: float) -> float:
    """EFFICIENCY_BY_HIDDEN interpolated linearly in the hidden size; flat beyond the table's ends."""
    table = EFFICIENCY_BY_HIDDEN
    if hidden <= table[0][0]:
        return table[0][1]
    for (h0, e0), (h1, e1) in zip(table, table[1:]):
        if hidden <= h1:
            return e0 + (e1 - e0) * (hidden - h0) / (h1 - h0)
    return table[-1][1]


def efficiency(cfg) -> float:
    c = as_config(cfg)
    return calibrated_efficiency(c.hidden) if c.compute_efficiency is None else c.compute_efficiency


def step_time(cfg) -> dict:
    """Projected seconds of one training step and its parts, for one GPU of the layout."""
    c = _checked(cfg)
    gpus = c.tp * c.pp * c.dp
    tokens = float(c.microbatches) * c.microbatch_size * c.seq_len * c.dp
    per_token = flops_per_token(c)
    flops = per_token["hardware"] * tokens
    eff = efficiency(c)
    compute = flops / (gpus * c.peak_tflops * 1e12 * eff)
    parts = _parts(c)
    tp_s = _seconds(c, parts["tp"][0])
    pp_s = _seconds(c, parts["pp"][0])
    dp_s = _seconds(c, parts["dp"][0])
    if c.overlap_dp:
        if c.zero_stage <= 1:
            window = (2.0 / 3.0) * compute / c.microbatches
        elif c.zero_stage == 2:
            window = (2.0 / 3.0) * compute
        else:
            window = compute
        dp_exposed = max(0.0, dp_s - window)
    else:
        dp_exposed = dp_s
    bubble_s = (compute + tp_s) * bubble(c)["over_ideal"]
    total = compute + tp_s + pp_s + dp_exposed + bubble_s
    peak = total * gpus * c.peak_tflops * 1e12
    return {
        "gpus": float(gpus),
        "tokens": tokens,
        "flops": flops,
        "model_flops": per_token["model"] * tokens,
        "compute_efficiency": eff,
        "compute_s": compute,
        "tp_comm_s": tp_s,
        "pp_comm_s": pp_s,
        "dp_comm_s": dp_s,
        "dp_exposed_s": dp_exposed,
        "bubble_s": bubble_s,
        "total_s": total,
        "tokens_per_s": tokens / total,
        "mfu": per_token["model"] * tokens / peak,
        "hfu": flops / peak,
    }


# -- choosing a layout, and the assumptions as text --------------------------------------------------


def candidate_layouts(model: str, gpus: int, global_batch: int, seq_len: int = 4096, microbatch_size: int = 1,
                      zero_stage: int = 1, recompute: str = "selective", max_tp: int | None = None,
                      **overrides) -> list[Config]:
    """Every valid layout of ``gpus``: TP a power of two up to ``max_tp`` (default: the GPUs of one node),
    PP a power of two that divides the layers, DP the rest, m = global batch / (DP x microbatch size).
    ``global_batch`` counts sequences. Whether a layout fits in memory is not checked here."""
    base = dict(MODELS[model], seq_len=seq_len, microbatch_size=microbatch_size, zero_stage=zero_stage,
                recompute=recompute, **overrides)
    max_tp = max_tp or base.get("gpus_per_node", Config.gpus_per_node)
    layouts = []
    tp = 1
    while tp <= min(max_tp, gpus):
        pp = 1
        while tp * pp <= gpus:
            dp = gpus // (tp * pp)
            if gpus % (tp * pp) == 0 and global_batch % (dp * microbatch_size) == 0:
                cfg = Config(**base, tp=tp, pp=pp, dp=dp, microbatches=global_batch // (dp * microbatch_size))
                if not problem(cfg):
                    layouts.append(cfg)
            pp *= 2
        tp *= 2
    return layouts


def choose_config(model: str, gpus: int, global_batch: int, **options) -> Config | None:
    """The layout the scaling sweep uses: of the candidate layouts that fit in GPU memory, the one with
    the lowest projected step time (ties: the smaller model-parallel size TP x PP). None when none fits."""
    fitting = [c for c in candidate_layouts(model, gpus, global_batch, **options) if memory_per_gpu(c)["fits"]]
    if not fitting:
        return None
    return min(fitting, key=lambda c: (step_time(c)["total_s"], c.tp * c.pp))


def with_link(cfg, alpha_s: float, beta_s_per_byte: float) -> Config:
    """The same configuration with both links replaced by one measured (alpha, beta)."""
    return dataclasses.replace(as_config(cfg), intra_alpha_us=alpha_s / US, inter_alpha_us=alpha_s / US,
                               intra_bandwidth_gbs=1.0 / beta_s_per_byte / GB,
                               inter_bandwidth_gbs=1.0 / beta_s_per_byte / GB)


def assumptions_text(cfg=None) -> str:
    """Every assumption of the model: the named parameters with their values, then the fixed ones."""
    c = as_config(cfg if cfg is not None else Config())
    lines = ["Named parameters (Config fields; value: why)"]
    for name, (unit, why) in ASSUMPTIONS.items():
        value = getattr(c, name)
        if name == "compute_efficiency" and value is None:
            value = f"None (calibrated: {efficiency(c):.3f} at hidden {c.hidden})"
        lines.append(f"- {name} = {value}{' ' + unit if unit and unit != 'fraction of peak' else ''}: {why}")
    lines.append("")
    lines.append("Fixed modelling assumptions")
    lines.extend(f"- {text}" for text in FIXED_ASSUMPTIONS)
    lines.append("")
    lines.append("Compute efficiency calibration (Narayanan et al. 2021, Table 1; hidden size: fitted efficiency)")
    lines.append("- " + ", ".join(f"{h}: {e:.4f}" for h, e in EFFICIENCY_BY_HIDDEN))
    lines.append("")
    lines.append("Link presets and their sources")
    lines.extend(f"- {key}: {link.name}, {link.bandwidth_gbs:g} GB/s per direction, alpha {link.alpha_us:g} us. "
                 f"{link.source}" for key, link in LINKS.items())
    return "\n".join(lines)
