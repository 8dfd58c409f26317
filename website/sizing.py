"""Sizing problems (back-of-the-envelope questions) and the formulas behind the calculators.

One source of truth: the formulas call ``demos/common/cluster_model.py`` (activations, collectives,
pipeline bubble; pure Python) and the chip figures come from ``records/datasheets.toml``. The two
formulas that live in torch-importing demo modules are restated here so the check and the site build do
not import torch (seconds on every run), and tests/test_sizing.py requires them to equal the demos' own:
``demos/t6_inference/_model.py``'s ``Config.kv_cache_bytes`` and ``demos/t8_training/_gpt.py``'s
``model_state_bytes_per_param``. What the cluster model does not price (a tree or in-switch all-reduce, a
hierarchical all-reduce, a slow link in a ring, a MoE layer's all-to-all) is built here from its primitives (its link
presets and ring costs), not added to ``demos/common/collectives.py``: a code change there would stale the records
of every demo that imports it. ``docs/assets/sizing-calculators.js`` is the
same formulas in JavaScript; tests/test_calculators_browser.py compares the two in Chromium.

The problems live in ``website/sizing_problems.toml``: each names a formula, its inputs (published
model configs and hardware figures, with their sources) and the answer its author *stated*, rounded.
A page shows a problem with the marker ``{{ sizing ID }}``: the statement, then the worked answer,
computed here at build time, folded until the reader opens it. ``python -m scripts.check`` fails when a
stated answer and the computation disagree (``stated_problems``). Every field is checked when the file is
loaded (inputs finite, in range, of their type; known keys only; a closed list of difficulties; plain-text
titles), so the check and the site build refuse a bad one in one line naming the file, the problem and the
field; a step's ``{name}`` fields are filled without Python's formatter (``fill_step``).
"""

from __future__ import annotations

import html
import inspect
import math
import re
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from demos.common import cluster_model as cm
from records.paths import shown
from website.markers import MARKUP

PROBLEMS_FILE = Path(__file__).with_name("sizing_problems.toml")
GB = 1e9
GIB = 2**30
US = 1e-6
DAY = 86400.0

# -- formulas ---------------------------------------------------------------------------------------


def kv_cache(layers: int, kv_heads: int, head_dim: int, context: int, batch: int = 1, dtype_bytes: float = 2,
             block_tokens: int = 0) -> dict:
    """KV-cache bytes: layers x 2 (K and V) x KV heads x head_dim x bytes per token, per sequence (the
    formula of the T6 demo, ``_model.Config.kv_cache_bytes``). With paging (``block_tokens`` > 0) each
    sequence holds whole blocks: ceil(context / block) x block tokens, and the rest of its last block is waste."""
    per_token = float(layers * 2 * kv_heads * head_dim) * dtype_bytes  # = _model.Config.kv_cache_bytes(1, 1, 1) x bytes
    exact = per_token * context * batch
    held = math.ceil(context / block_tokens) * block_tokens if block_tokens > 0 else context
    allocated = per_token * held * batch
    return {"bytes_per_token": per_token, "bytes": exact, "allocated_bytes": allocated,
            "waste_bytes": allocated - exact, "waste_fraction": (allocated - exact) / allocated if allocated else 0.0}


OPTIMIZER_MOMENTS = {"adam": 2, "sgd_momentum": 1, "sgd": 0}  # fp32 tensors the optimizer keeps per parameter
PRECISIONS = ("mixed", "fp32")
STATE_BYTES = {"mixed": {"weights": 2, "grads": 2, "optimizer": 12},  # = _gpt.model_state_bytes_per_param
               "fp32": {"weights": 4, "grads": 4, "optimizer": 8}}


def state_bytes_per_param(precision: str, optimizer: str) -> dict:
    """Bytes per parameter of weights, gradients and optimizer states. For Adam these are the T8 demo's
    (``_gpt.model_state_bytes_per_param``: ZeRO paper, 2 + 2 + 12 mixed, 4 + 4 + 8 fp32); a lighter
    optimizer keeps 4 bytes fewer per fp32 moment it drops."""
    base = dict(STATE_BYTES[precision])
    base["optimizer"] -= 4 * (OPTIMIZER_MOMENTS["adam"] - OPTIMIZER_MOMENTS[optimizer])
    return base


def training_memory(params: float, layers: int, hidden: int, heads: int, seq_len: int, microbatch_size: int = 1,
                    microbatches: int = 1, precision: str = "mixed", optimizer: str = "adam", zero_stage: int = 0,
                    dp: int = 1, tp: int = 1, pp: int = 1, recompute: str = "none", gpu_memory_gb: float = 80.0) -> dict:
    """Bytes per GPU of a training layout: model states (sharded by TP x PP, and by DP under ZeRO 1/2/3)
    plus the activations of the first pipeline stage (cluster_model: Korthikanti et al. per layer, 1F1B,
    sequence parallelism with TP). Activations are counted in 16 bits; fp32 training doubles them (a slight
    over-count: Korthikanti's 1-byte dropout masks stay 1 byte, so it is 66 s b h rather than 68 per layer)."""
    per = state_bytes_per_param(precision, optimizer)
    shard = params / (tp * pp)
    weights = per["weights"] * shard / (dp if zero_stage >= 3 else 1)
    grads = per["grads"] * shard / (dp if zero_stage >= 2 else 1)
    optimizer_b = per["optimizer"] * shard / (dp if zero_stage >= 1 else 1)
    c = _cm_config(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, microbatch_size=microbatch_size,
                  microbatches=microbatches, tp=tp, pp=pp, dp=dp, recompute=recompute)
    act_scale = 2.0 if precision == "fp32" else 1.0
    per_layer = cm.activation_bytes_per_layer(c) * act_scale
    in_flight = cm.microbatches_in_flight(c)
    activations = per_layer * (layers / pp) * in_flight
    total = weights + grads + optimizer_b + activations
    return {"weights_bytes": weights, "grads_bytes": grads, "optimizer_bytes": optimizer_b,
            "model_states_bytes": weights + grads + optimizer_b, "activation_bytes_per_layer": per_layer,
            "microbatches_in_flight": in_flight, "activations_bytes": activations, "total_bytes": total,
            "fits": total <= gpu_memory_gb * GB}


OPTIMIZER_STATES = ("adam", "adam8bit")
OFFLOAD = ("none", "optimizer")
BNB_BLOCK = 2048  # bitsandbytes: one fp32 absmax per 2048-element block of each 8-bit state (Optimizer2State.init_state)


def adam_optimizer_bytes(optimizer_state: str) -> float:
    """Bytes per parameter of mixed-precision Adam's optimizer state: fp32 master weights (4) plus the two
    moments, in fp32 (4 + 4, the ZeRO paper's 12 in all) or in 8 bits with one fp32 absmax per 2,048-element
    block each (Dettmers et al., "8-bit Optimizers via Block-wise Quantization"; bitsandbytes' 8-bit Adam)."""
    if optimizer_state == "adam":
        return float(STATE_BYTES["mixed"]["optimizer"])
    return 4.0 + 2 * (1.0 + 4.0 / BNB_BLOCK)


def training_memory_offload(params: float, layers: int, hidden: int, heads: int, seq_len: int,
                            microbatch_size: int = 1, microbatches: int = 1, optimizer_state: str = "adam",
                            offload: str = "none", zero_stage: int = 0, dp: int = 1, tp: int = 1, pp: int = 1,
                            recompute: str = "none", gpu_memory_gb: float = 80.0, gpus_per_node: int = 8,
                            host_memory_gb: float = 2000.0, host_link_gbs: float = 63.0) -> dict:
    """``training_memory`` for mixed precision, with 8-bit optimizer states and optimizer offload.

    The weights, gradients and activations are ``training_memory``'s (so ZeRO, TP, PP and recomputation
    shard them the same way); the optimizer state is ``adam_optimizer_bytes`` per parameter of the GPU's
    optimizer partition. ``offload="optimizer"`` is ZeRO-Offload's split (Ren et al., "ZeRO-Offload:
    Democratizing Billion-Scale Model Training"): the 16-bit weights stay on the GPU; the 16-bit gradients,
    the fp32 master weights and the moments live in host memory (ZeRO-Infinity can put the same bytes on
    NVMe), and the CPU runs the update. Every step each GPU sends its partition's 16-bit gradients down the
    host link and gets its 16-bit updated weights back: 2 bytes per parameter each way. Not counted: the
    gathered layers' buffers under ZeRO-3 (as in ``training_memory``), pinned staging buffers, the CPU's
    Adam time (which bounds the step when the GPU's is short)."""
    base = training_memory(params, layers, hidden, heads, seq_len, microbatch_size, microbatches, "mixed", "adam",
                           zero_stage, dp, tp, pp, recompute, gpu_memory_gb)
    partition = params / (tp * pp) / (dp if zero_stage >= 1 else 1)  # parameters this GPU's optimizer updates
    optimizer_b = adam_optimizer_bytes(optimizer_state) * partition
    weights, grads = base["weights_bytes"], base["grads_bytes"]
    on_host = optimizer_b + grads if offload == "optimizer" else 0.0
    gpu_states = weights + grads + optimizer_b - on_host
    total = gpu_states + base["activations_bytes"]
    link_bytes = 2.0 * partition if offload == "optimizer" else 0.0
    return {"weights_bytes": weights, "grads_bytes": grads, "optimizer_bytes": optimizer_b,
            "optimizer_bytes_per_param": adam_optimizer_bytes(optimizer_state),
            "model_states_bytes": weights + grads + optimizer_b, "gpu_states_bytes": gpu_states,
            "activation_bytes_per_layer": base["activation_bytes_per_layer"],
            "activations_bytes": base["activations_bytes"], "total_bytes": total,
            "fits": total <= gpu_memory_gb * GB, "host_bytes_per_gpu": on_host,
            "host_bytes_per_node": on_host * gpus_per_node,
            "host_fits": on_host * gpus_per_node <= host_memory_gb * GB,
            "link_bytes_each_way": link_bytes, "link_seconds": link_bytes / (host_link_gbs * GB),
            "model_states_all_bytes": params * (4.0 + adam_optimizer_bytes(optimizer_state)),
            "gpus": tp * pp * dp, "gpu_memory_all_bytes": tp * pp * dp * gpu_memory_gb * GB,
            "states_fit_all_gpus": params * (4.0 + adam_optimizer_bytes(optimizer_state)) <= tp * pp * dp * gpu_memory_gb * GB}


def serving(params: float, weight_bytes: float, gpus: int, bandwidth_gbs: float, memory_gb: float, batch: int,
            context: int, layers: int, kv_heads: int, head_dim: int, kv_bytes: float = 2) -> dict:
    """Decode bounds from memory traffic: every step reads all weights once and each sequence's KV cache
    (at ``context`` tokens), spread over ``gpus`` GPUs' bandwidth. Max batch: the sequences whose caches
    fit in the memory the weights leave (no activations, no fragmentation: an upper bound). With tensor
    parallelism over more GPUs than there are KV heads, each GPU still holds at least one KV head, so the
    cache is replicated gpus / kv_heads times (as Megatron-LM and vLLM do)."""
    weights = params * weight_bytes
    replicas = gpus / min(gpus, kv_heads) if kv_heads > 0 else 1.0
    kv_seq = kv_cache(layers, kv_heads, head_dim, context, 1, kv_bytes)["bytes"] * replicas
    step_bytes = weights + batch * kv_seq
    step_s = step_bytes / (gpus * bandwidth_gbs * GB)
    free = gpus * memory_gb * GB - weights
    max_batch = max(0, math.floor(free / kv_seq)) if kv_seq > 0 else 0
    # weights that do not fit in the GPUs' memory give no decode bound at all: the calculator refuses them
    gpus_for_weights = math.ceil(weights / (memory_gb * GB)) if memory_gb > 0 else 0
    return {"weights_bytes": weights, "kv_bytes_per_sequence": kv_seq, "kv_replicas": replicas, "step_bytes": step_bytes, "step_s": step_s,
            "tokens_per_s": batch / step_s, "tokens_per_s_per_sequence": 1.0 / step_s, "free_bytes": free,
            "max_batch": max_batch, "fits": batch <= max_batch, "weights_fit": free >= 0,
            "gpus_for_weights": gpus_for_weights}


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")


def bus_bandwidth(n_bytes: float, gpus: int, busbw_gbs: float, collective: str = "all_reduce",
                  line_rate_gbs: float = 450.0) -> dict:
    """nccl-tests' two bandwidths (its doc/PERFORMANCE.md): algbw = S / t for a buffer of S bytes, and
    busbw = algbw x a factor that makes it independent of the rank count n: 2(n-1)/n for an all-reduce,
    (n-1)/n for an all-gather, a reduce-scatter or an all-to-all, 1 for a broadcast or a reduce. For a
    ring-like algorithm busbw is the rate each link ran at, so it is what to hold against the link's line
    rate. Given a busbw (a measured one), the algbw and the time of a collective of ``n_bytes``."""
    factor = {"all_reduce": 2.0 * (gpus - 1) / gpus, "broadcast": 1.0, "reduce": 1.0}.get(collective, (gpus - 1) / gpus)
    if factor <= 0:
        raise ValueError("a collective over one GPU moves nothing: give gpus >= 2")
    algbw = busbw_gbs / factor
    return {"factor": factor, "algbw_gbs": algbw, "seconds": n_bytes / (algbw * GB),
            "fraction_of_line_rate": busbw_gbs / line_rate_gbs}


def all_reduce(n_bytes: float, gpus: int, link: str) -> dict:
    """Ring all-reduce in the alpha-beta model of cluster_model, over one of its link presets."""
    lk = cm.LINKS[link]
    a, b = cm.all_reduce_features(n_bytes, gpus)
    seconds = cm.collective_time("all_reduce", n_bytes, gpus, lk.alpha_s, lk.beta_s_per_byte)
    return {"bytes_sent_per_gpu": b, "latency_terms": a, "bandwidth_gbs": lk.bandwidth_gbs, "alpha_us": lk.alpha_us,
            "seconds": seconds}


def all_reduce_algorithms(n_bytes: float, gpus: int, alpha_us: float, bandwidth_gbs: float,
                          tree_bw_fraction: float = 1.0) -> dict:
    """One all-reduce of n bytes over ``gpus`` GPUs on one kind of link (alpha per step, bandwidth per direction),
    three ways, each time = steps x alpha + bytes each GPU sends / bandwidth (the model NCCL's tuner uses:
    latency + bytes / bandwidth, src/graph/tuning.cc):

    - ring (cluster_model's): reduce-scatter then all-gather, 2(p-1) steps of n/p, 2(p-1)/p x n per GPU;
    - NCCL's double binary tree, pipelined: reduce up a tree of depth floor(log2 p), broadcast down it, so
      2 floor(log2 p) steps of latency; each GPU sends and receives 2n in all (two complementary trees each carry
      n/2; an inner node of one is a leaf of the other), at ``tree_bw_fraction`` of the ring's rate;
    - in-switch reduction (NVLink SHARP; InfiniBand SHARP across nodes): a reduce-scatter the switch sums, then a
      multicast all-gather: 2 steps, n + n/p each way per GPU (n to be summed, n/p of result).

    ``crossover_bytes`` is the size below which the tree is the faster (ring and tree times equal there)."""
    alpha, beta = alpha_us * US, 1.0 / (bandwidth_gbs * GB)
    ring_steps, ring_bytes = cm.all_reduce_features(n_bytes, gpus)
    ring_s = cm.collective_time("all_reduce", n_bytes, gpus, alpha, beta)
    depth = gpus.bit_length() - 1  # floor(log2 p): the hops from a leaf to the root
    tree_steps, tree_bytes = 2.0 * depth, 2.0 * n_bytes
    tree_s = tree_steps * alpha + tree_bytes * beta / tree_bw_fraction
    switch_steps, switch_bytes = 2.0, n_bytes * (gpus + 1) / gpus
    switch_s = switch_steps * alpha + switch_bytes * beta
    # ring_s = tree_s: 2(p-1-depth) alpha = (2/eta - 2(p-1)/p) n beta
    crossover = (gpus - 1 - depth) * alpha / ((1.0 / tree_bw_fraction - (gpus - 1) / gpus) * beta)
    return {"ring_steps": ring_steps, "ring_bytes_per_gpu": ring_bytes, "ring_s": ring_s,
            "tree_depth": depth, "tree_steps": tree_steps, "tree_bytes_per_gpu": tree_bytes, "tree_s": tree_s,
            "switch_steps": switch_steps, "switch_bytes_per_gpu": switch_bytes, "switch_s": switch_s,
            "ring_over_tree": ring_s / tree_s, "ring_over_switch": ring_s / switch_s,
            "alpha_times_bandwidth_bytes": alpha / beta, "crossover_bytes": crossover}


def hierarchical_all_reduce(n_bytes: float, nodes: int, gpus_per_node: int) -> dict:
    """An all-reduce of n bytes over nodes x g GPUs, with cluster_model's links (NVLink inside a node, one
    InfiniBand NIC per GPU across nodes; their alphas are the model's assumptions):

    - flat ring over all p = nodes x g GPUs: a chunk travels 2(p-1) hops, 2(nodes-1) of them across the network
      (at its alpha) and the rest over NVLink (as NCCL's tuner counts a ring's latency), its bytes at the node's
      g NICs together (cluster_model's rule for a collective spanning nodes: NCCL spreads its rings over them);
    - hierarchical: reduce-scatter inside the node (NVLink), then an all-reduce of each GPU's n/g shard with the
      same-index GPU of every other node (its own NIC, one rail), then an all-gather inside the node; the
      phases counted one after another (not pipelined: an upper bound);
    - the same with the middle phase reduced in the network switches (InfiniBand SHARP): 2 network steps,
      the shard sent once and its sum received once."""
    nv, ib = cm.LINKS["nvlink4_h100"], cm.LINKS["ib_ndr400"]
    g, gpus = gpus_per_node, nodes * gpus_per_node
    flat_bandwidth = min(nv.bandwidth_gbs, ib.bandwidth_gbs * g) if nodes > 1 else nv.bandwidth_gbs
    flat_steps, flat_bytes = cm.all_reduce_features(n_bytes, gpus)
    flat_inter_steps = 2.0 * (nodes - 1)
    flat_s = ((flat_steps - flat_inter_steps) * nv.alpha_s + flat_inter_steps * ib.alpha_s
              + flat_bytes / (flat_bandwidth * GB))
    intra_s = (cm.collective_time("reduce_scatter", n_bytes, g, nv.alpha_s, nv.beta_s_per_byte)
               + cm.collective_time("all_gather", n_bytes, g, nv.alpha_s, nv.beta_s_per_byte))
    shard = n_bytes / g
    inter_s = cm.collective_time("all_reduce", shard, nodes, ib.alpha_s, ib.beta_s_per_byte)
    sharp_inter_s = (2.0 * ib.alpha_s + shard * ib.beta_s_per_byte) if nodes > 1 else 0.0
    hier_s, sharp_s = intra_s + inter_s, intra_s + sharp_inter_s
    return {"gpus": gpus, "flat_steps": flat_steps, "flat_inter_steps": flat_inter_steps,
            "flat_bandwidth_gbs": flat_bandwidth, "flat_s": flat_s, "flat_network_bytes_per_node": flat_bytes,
            "intra_steps": 2.0 * (g - 1), "inter_steps": cm.all_reduce_features(shard, nodes)[0] if nodes > 1 else 0.0,
            "shard_bytes": shard, "intra_s": intra_s, "inter_s": inter_s, "hier_s": hier_s,
            "hier_network_bytes_per_gpu": cm.bytes_sent_per_rank("all_reduce", shard, nodes),
            "hier_network_bytes_per_node": g * cm.bytes_sent_per_rank("all_reduce", shard, nodes),
            "sharp_inter_s": sharp_inter_s, "sharp_s": sharp_s, "sharp_network_bytes_per_gpu": shard,
            "flat_over_hier": flat_s / hier_s, "flat_over_sharp": flat_s / sharp_s,
            "nvlink_alpha_us": nv.alpha_us, "ib_alpha_us": ib.alpha_us, "nvlink_gbs": nv.bandwidth_gbs,
            "ib_gbs": ib.bandwidth_gbs}


def ring_straggler(n_bytes: float, gpus: int, alpha_us: float, bandwidth_gbs: float, slow_bandwidth_gbs: float) -> dict:
    """A ring all-reduce in which one link runs at ``slow_bandwidth_gbs``: every step is a lockstep exchange with the
    neighbours, so each step lasts as long as its slowest transfer and the whole ring runs at the slow link's rate.
    ``gpu_seconds_lost``: the extra time, paid by every GPU of the ring."""
    alpha = alpha_us * US
    healthy = cm.collective_time("all_reduce", n_bytes, gpus, alpha, 1.0 / (bandwidth_gbs * GB))
    slowest = min(bandwidth_gbs, slow_bandwidth_gbs)
    degraded = cm.collective_time("all_reduce", n_bytes, gpus, alpha, 1.0 / (slowest * GB))
    return {"healthy_s": healthy, "degraded_s": degraded, "slowdown": degraded / healthy,
            "gpu_seconds_lost": gpus * (degraded - healthy)}


def moe_all_to_all(tokens: float, hidden: int, top_k: int, ep: int, tp: int = 1, gpus_per_node: int = 8,
                   dispatch_bytes: float = 2, combine_bytes: float = 2) -> dict:
    """The two all-to-alls of one MoE layer's forward pass (dispatch, then combine) against a TP all-reduce of the
    same layer, per GPU, for a microbatch of ``tokens`` tokens held by each TP group (replicated on its tp GPUs).

    Each token goes to its top-k experts: k copies of its hidden vector out (dispatch, ``dispatch_bytes`` per
    element), k results back (combine). With uniform routing over ``ep`` expert-parallel GPUs a copy leaves its GPU
    with probability (ep-1)/ep, and its node with probability (ep-g)/ep once the EP group spans nodes (g GPUs
    per node). With TP > 1 each TP rank dispatches only its 1/tp of the tokens (sequence parallelism, which
    Megatron-Core requires with EP and TP; DeepSpeed-TED's duplicate-token dropping), so the tokens are not
    sent tp times. The backward pass repeats both all-to-alls in reverse.

    Times, with cluster_model's links: the all-to-alls over NVLink while the EP group fits in a node, else bound
    by the bytes leaving the node on the GPU's own NIC (the NVLink share runs at the same time, and is smaller
    while NVLink's rate exceeds the NIC's by more than their byte ratio); the TP all-reduce over NVLink."""
    nv, ib = cm.LINKS["nvlink4_h100"], cm.LINKS["ib_ndr400"]
    per_token = top_k * hidden * (dispatch_bytes + combine_bytes)  # dispatch + combine, every copy
    leaving = (ep - 1) / ep
    off_node = max(0, ep - gpus_per_node) / ep
    routed = tokens / tp  # tokens this GPU dispatches
    sent = routed * per_token * leaving
    network = routed * per_token * off_node
    if ep <= gpus_per_node:
        a2a_s = 2.0 * (ep - 1) * nv.alpha_s + sent * nv.beta_s_per_byte
    else:
        a2a_s = 2.0 * (ep - 1) * ib.alpha_s + max(network * ib.beta_s_per_byte, (sent - network) * nv.beta_s_per_byte)
    ar_bytes = tokens * hidden * 2.0  # the layer's bf16 output, replicated on the TP group
    tp_sent = cm.bytes_sent_per_rank("all_reduce", ar_bytes, tp)
    tp_s = cm.collective_time("all_reduce", ar_bytes, tp, nv.alpha_s, nv.beta_s_per_byte)
    return {"dispatch_bytes_per_token": top_k * hidden * dispatch_bytes,
            "combine_bytes_per_token": top_k * hidden * combine_bytes, "alltoall_bytes_per_token": per_token * leaving,
            "leaving_fraction": leaving, "off_node_fraction": off_node, "network_copies_per_token": top_k * off_node,
            "network_bytes_per_token": per_token * off_node, "tokens_dispatched_per_gpu": routed,
            "alltoall_bytes_per_gpu": sent, "network_bytes_per_gpu": network, "alltoall_s": a2a_s,
            "tp_all_reduce_bytes_per_gpu": tp_sent, "tp_all_reduce_s": tp_s,
            "alltoall_over_tp_all_reduce": sent / tp_sent if tp_sent > 0 else 0.0,  # 0: no TP all-reduce to compare with
            "alltoall_time_over_tp_all_reduce": a2a_s / tp_s if tp_s > 0 else 0.0,
            "nvlink_gbs": nv.bandwidth_gbs, "ib_gbs": ib.bandwidth_gbs}


def datasheet(device: str) -> dict:
    from records import datasheets

    return datasheets.sheets()[device]


def ridge_point(device: str, dtype: str) -> dict:
    """FLOPs per byte where the roofline's two roofs meet: datasheet peak / memory bandwidth
    (records.datasheets.ridge_point, the one place the ratio is computed)."""
    from records import datasheets

    sheet = datasheet(device)
    return {"peak_tflops": sheet["tflops"][dtype], "bandwidth_gbs": sheet["memory_gbps"],
            "flop_per_byte": datasheets.ridge_point(device, dtype)}


def training_days(params: float, tokens: float, gpus: int, peak_tflops: float, mfu: float) -> dict:
    """6 N D training FLOPs at a model-FLOPs utilisation ``mfu`` of the GPUs' peak."""
    flops = 6.0 * params * tokens
    seconds = flops / (gpus * peak_tflops * 1e12 * mfu)
    return {"flops": flops, "seconds": seconds, "days": seconds / DAY}


def pipeline_bubble(stages: int, microbatches: int, interleave: int = 1) -> dict:
    """cluster_model's bubble: idle / ideal = (p-1)/(v m), share of the pipeline's time (p-1)/(v m + p-1)."""
    c = _cm_config(layers=stages * interleave, hidden=1, heads=1, vocab=1, pp=stages, microbatches=microbatches,
                  interleave=interleave)
    return cm.bubble(c)


def arithmetic_intensity_decode(batch: int, weight_bytes: float) -> dict:
    """A decode step's matmuls: 2 FLOPs per parameter per sequence over the weight bytes read once."""
    return {"flop_per_byte": 2.0 * batch / weight_bytes}


def gemm_waves(m: int, n: int, k: int, tile_m: int, tile_n: int, sms: int, split_k: int = 1, tile_k: int = 64,
               dtype_bytes: float = 2, partial_bytes: float = 4) -> dict:
    """Wave quantization of a tiled GEMM (M x K times K x N) on ``sms`` SMs, one output tile per SM at a time, every
    tile's K loop taking the same time: ceil(M / tile_m) x ceil(N / tile_n) tiles, ``split_k`` work units per tile
    (each a 1/split_k share of the K loop), waves = ceil(units / SMs), and the share of SM time that does work,
    units / (waves x SMs). The critical path is waves x ceil(k_iters / split_k) K-loop iterations of tile_k.

    Split-K as CUTLASS's parallel reduction does it: each unit writes its fp32 partial tile to a workspace
    (``partial_bytes`` per element) and a second kernel reads them back and sums them: 2 x split_k x M x N x 4
    bytes more traffic, against the operands' (M K + K N + M N) x ``dtype_bytes``. Stream-K instead hands each SM an
    equal share of all tiles x k_iters iterations, crossing tile boundaries (Osama et al., PPoPP 2023):
    ceil(total / SMs) iterations on the critical path."""
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    k_iters = math.ceil(k / tile_k)
    units = tiles * split_k
    waves = math.ceil(units / sms)
    data_parallel_iters = math.ceil(tiles / sms) * k_iters  # the same GEMM without split-K
    split_iters = waves * math.ceil(k_iters / split_k)
    stream_k_iters = math.ceil(tiles * k_iters / sms)
    reduction = 2.0 * split_k * m * n * partial_bytes if split_k > 1 else 0.0
    operands = float(m * k + k * n + m * n) * dtype_bytes
    return {"tiles": tiles, "units": units, "waves": waves, "last_wave_units": units - (waves - 1) * sms,
            "last_wave_fraction": (units - (waves - 1) * sms) / sms, "efficiency": units / (waves * sms),
            "k_iters": k_iters, "critical_iters": split_iters, "data_parallel_iters": data_parallel_iters,
            "speedup_vs_no_split": data_parallel_iters / split_iters,
            "stream_k_iters": stream_k_iters, "stream_k_efficiency": tiles * k_iters / (sms * stream_k_iters),
            "stream_k_speedup": data_parallel_iters / stream_k_iters,
            "reduction_bytes": reduction, "operand_bytes": operands, "reduction_over_operands": reduction / operands}


def prefill_flops(params: float, layers: int, hidden: int, tokens: float) -> float:
    """FLOPs of one prefill of ``tokens`` tokens: 2 per parameter per token (the weight matmuls; it over-counts the
    embedding lookup and all logits but the last, a few percent) plus causal attention, whose two products
    (Q K^T and P V) take 2 x tokens^2 x (heads x head_dim) per layer with the masked half skipped; ``hidden``
    stands for heads x head_dim (equal in Llama and GPT models)."""
    return 2.0 * params * tokens + 2.0 * layers * hidden * float(tokens) ** 2


def mla_kv_cache(layers: int, latent_dim: int, rope_dim: int, heads: int, qk_head_dim: int, v_head_dim: int,
                 kv_heads: int, head_dim: int, context: int, dtype_bytes: float = 2) -> dict:
    """KV bytes per token and per sequence of multi-head latent attention (DeepSeek-V2/V3: per layer one
    compressed latent of ``latent_dim`` plus one decoupled RoPE key of ``rope_dim``, shared by all heads), against
    the same model with full multi-head K and V (``heads`` heads, K of ``qk_head_dim``, V of ``v_head_dim``) and
    against a grouped-query layout of ``kv_heads`` heads of ``head_dim`` (``kv_cache``'s formula)."""
    mla = float(layers * (latent_dim + rope_dim)) * dtype_bytes
    mha = float(layers * heads * (qk_head_dim + v_head_dim)) * dtype_bytes
    gqa = kv_cache(layers, kv_heads, head_dim, 1, 1, dtype_bytes)["bytes_per_token"]
    return {"mla_bytes_per_token": mla, "mha_bytes_per_token": mha, "gqa_bytes_per_token": gqa,
            "mla_bytes": mla * context, "mha_bytes": mha * context, "gqa_bytes": gqa * context,
            "mha_over_mla": mha / mla, "gqa_over_mla": gqa / mla}


def chunked_prefill(params: float, weight_bytes: float, bandwidth_gbs: float, peak_tflops: float, mfu: float,
                    batch: int, token_budget: int, prompt_tokens: int, layers: int, kv_heads: int, head_dim: int,
                    context: int, kv_bytes: float = 2) -> dict:
    """One step of a server that mixes a decode batch with a prefill chunk (Sarathi-Serve's stall-free batching),
    on a per-kernel roofline. The weight matmuls read all weights once at the datasheet bandwidth and do 2 FLOPs per
    parameter for each of the step's ``token_budget`` tokens (one per decoding sequence, the rest a prefill chunk)
    at ``mfu`` of the peak: they take the longer of the two. Decode attention reads the ``batch`` sequences' caches
    at ``context`` tokens in its own kernels, between the matmuls, so that time adds to the step and hides no
    matmul work. ``ridge_tokens``: the tokens per step at which the matmuls turn compute-bound; below it, prefill
    tokens ride along at no cost to the decoding sequences' inter-token latency. Left out: the chunk's attention
    FLOPs and its own KV writes and prefix reads, launch costs. A prompt of ``prompt_tokens`` takes
    ceil(prompt / chunk) steps, the last one partly filled; unchunked, it runs in one step that every decoding
    sequence waits for."""
    if token_budget <= batch:
        raise ValueError(f"a token budget of {token_budget} leaves no room for a prefill chunk next to {batch} decodes")
    chunk_tokens = token_budget - batch
    weights = params * weight_bytes
    kv_read = batch * kv_cache(layers, kv_heads, head_dim, context, 1, kv_bytes)["bytes"]
    weights_s = weights / (bandwidth_gbs * GB)
    kv_s = kv_read / (bandwidth_gbs * GB)
    rate = peak_tflops * 1e12 * mfu  # the FLOP/s reached

    def step(tokens: float) -> float:  # attention's cache reads, then the matmuls at the longer of their two times
        return kv_s + max(weights_s, 2.0 * params * tokens / rate)

    compute_s = 2.0 * params * token_budget / rate
    step_s, decode_only_s = step(token_budget), step(batch)
    ridge_tokens = weights_s * rate / (2.0 * params)
    chunks = math.ceil(prompt_tokens / chunk_tokens)
    last_s = step(batch + prompt_tokens - (chunks - 1) * chunk_tokens)
    unchunked_s = step(batch + prompt_tokens)
    return {"weights_bytes": weights, "kv_read_bytes": kv_read, "weights_s": weights_s, "kv_s": kv_s,
            "chunk_tokens": chunk_tokens, "compute_s": compute_s, "step_s": step_s,
            "compute_bound": compute_s > weights_s, "decode_only_s": decode_only_s,
            "step_over_decode_only": step_s / decode_only_s, "ridge_tokens": ridge_tokens,
            "free_chunk_tokens": max(0.0, ridge_tokens - batch), "chunks": chunks,
            "prompt_prefill_s": (chunks - 1) * step_s + last_s, "unchunked_step_s": unchunked_s,
            "unchunked_over_decode_only": unchunked_s / decode_only_s}


def kv_transfer(params: float, layers: int, kv_heads: int, head_dim: int, hidden: int, prompt_tokens: int,
                gpus: int, link_gbs: float, nvlink_gbs: float, peak_tflops: float, mfu: float,
                kv_bytes: float = 2) -> dict:
    """Disaggregated serving: the prompt's KV cache moves from the prefill GPUs to the decode GPUs. Under tensor
    parallelism each of min(gpus, kv_heads) GPUs holds its own KV heads and sends them on its own link (one NIC
    per GPU across nodes, its NVLink inside one), all in parallel. Prefill time: ``prefill_flops`` over the
    ``gpus`` GPUs at ``mfu`` of peak. Streamed layer by layer as each layer's prefill ends, the transfer runs
    alongside the compute; what is left after the prefill is max(one layer's transfer, the whole transfer minus
    the prefill plus one layer's prefill), the second when the link is the slower of the two."""
    kv = kv_cache(layers, kv_heads, head_dim, prompt_tokens, 1, kv_bytes)["bytes"]
    senders = min(gpus, kv_heads)
    per_gpu = kv / senders
    network_s = per_gpu / (link_gbs * GB)
    prefill_s = prefill_flops(params, layers, hidden, prompt_tokens) / (gpus * peak_tflops * 1e12 * mfu)
    layer_transfer, layer_prefill = network_s / layers, prefill_s / layers
    exposed = max(layer_transfer, network_s - prefill_s + layer_prefill)
    return {"kv_bytes": kv, "senders": senders, "kv_bytes_per_gpu": per_gpu, "one_link_s": kv / (link_gbs * GB),
            "network_s": network_s, "nvlink_s": per_gpu / (nvlink_gbs * GB), "prefill_s": prefill_s,
            "prefill_flops": prefill_flops(params, layers, hidden, prompt_tokens),
            "network_over_prefill": network_s / prefill_s, "layer_transfer_s": layer_transfer,
            "layer_prefill_s": layer_prefill, "streamed_exposed_s": exposed,
            "hidden_by_streaming": layer_transfer <= layer_prefill}


def kv_swap_vs_recompute(params: float, layers: int, kv_heads: int, head_dim: int, hidden: int, context: int,
                         host_link_gbs: float, peak_tflops: float, mfu: float, gpus: int = 1,
                         kv_bytes: float = 2) -> dict:
    """A preempted sequence of ``context`` tokens: swap its KV cache to host memory and back (each GPU moves its
    own KV heads over its own host link, at the link's one-direction rate each way), or drop it and recompute it
    later as one prefill of all its tokens (``prefill_flops`` at ``mfu`` of the GPUs' peak). Both grow at least
    linearly with the tokens and recomputation's attention term quadratically, so the ratio does not fall with
    length: at these rates no length makes recomputation the faster. Left out: per-copy overheads (a paged cache
    moves many small blocks), the host memory swapping takes, and that recomputed tokens can share steps with
    decoding sequences (a memory-bound step has room for them)."""
    kv = kv_cache(layers, kv_heads, head_dim, context, 1, kv_bytes)["bytes"]
    per_gpu = kv / min(gpus, kv_heads)
    swap_in_s = per_gpu / (host_link_gbs * GB)
    flops = prefill_flops(params, layers, hidden, context)
    rate = gpus * peak_tflops * 1e12 * mfu
    recompute_s = flops / rate
    linear_s = 2.0 * params * context / rate
    return {"kv_bytes": kv, "kv_bytes_per_gpu": per_gpu, "swap_in_s": swap_in_s, "swap_s": 2.0 * swap_in_s,
            "recompute_flops": flops, "recompute_s": recompute_s, "attention_share": 1.0 - linear_s / recompute_s,
            "recompute_over_swap": recompute_s / (2.0 * swap_in_s), "recompute_over_swap_in": recompute_s / swap_in_s}


def ivfpq_memory(vectors: float, dim: int, nlist: int, pq_m: int, pq_bits: int = 8, id_bytes: float = 8,
                 dtype_bytes: float = 4, gpu_memory_gb: float = 80.0, other_memory_gb: float = 141.0) -> dict:
    """Memory of an IVF-PQ index (FAISS IndexIVFPQ's layout): per vector a PQ code of pq_m x pq_bits bits and its
    id in the inverted list; once, the nlist coarse centroids (fp32, dim each) and the PQ codebooks (pq_m of them,
    2^pq_bits centroids of dim / pq_m floats each: 2^pq_bits x dim floats in all). Against the flat index (the raw
    vectors at ``dtype_bytes``) and two GPU sizes: the GPUs needed to hold it (no room left for search buffers)."""
    if dim % pq_m:
        raise ValueError(f"pq_m = {pq_m} does not divide dim = {dim}: each sub-quantizer takes dim / pq_m dimensions")
    flat = vectors * dim * dtype_bytes
    codes = vectors * pq_m * pq_bits / 8.0
    ids = vectors * id_bytes
    centroids = float(nlist * dim) * 4
    codebooks = float(2**pq_bits * dim) * 4
    total = codes + ids + centroids + codebooks
    return {"flat_bytes": flat, "code_bytes": codes, "id_bytes_total": ids, "centroid_bytes": centroids,
            "codebook_bytes": codebooks, "bytes_per_vector": (codes + ids) / vectors, "total_bytes": total,
            "flat_over_total": flat / total, "gpus": math.ceil(total / (gpu_memory_gb * GB)),
            "other_gpus": math.ceil(total / (other_memory_gb * GB)), "fits": total <= gpu_memory_gb * GB,
            "other_fits": total <= other_memory_gb * GB, "flat_gpus": math.ceil(flat / (gpu_memory_gb * GB))}


def microbatch_capacity(params: float, features: int, kernels: int, launch_us: float, host_link_gbs: float,
                        peak_tflops: float, mfu: float, stage_budget_ms: float, max_batch: int = 1024) -> dict:
    """Requests per second one GPU scores for a small model within a latency budget for the model stage.
    A batch of b requests costs a fixed c (``kernels`` launches) plus b x r (each request's fp32 features and its
    score over the host link, and 2 x params FLOPs at ``mfu`` of peak). A window W gathers the batch: a request
    waits at most W, then t(b) = c + b r, so W + t(b) <= budget; and the GPU must finish a batch before the next
    window closes, t(b) <= W, or the queue grows. The best window is half the budget (both limits meet there):
    rate = (B/2 - c) / ((B/2) r), unless the batch cap binds first: then back-to-back batches of ``max_batch`` serve
    max_batch / t(max_batch). At batch 1 (no window) one stream serves 1 / (c + r)."""
    fixed_s = kernels * launch_us * US
    per_row_s = (features * 4.0 + 4.0) / (host_link_gbs * GB) + 2.0 * params / (peak_tflops * 1e12 * mfu)
    budget_s = stage_budget_ms * 1e-3
    best_window_s = budget_s / 2.0
    if best_window_s <= fixed_s:
        raise ValueError(f"the fixed cost per batch ({fixed_s * 1e3:.3f} ms) leaves no room in half the "
                         f"{stage_budget_ms} ms budget")
    window_rate = (best_window_s - fixed_s) / (best_window_s * per_row_s)
    capped_rate = max_batch / (fixed_s + max_batch * per_row_s)
    rate = min(window_rate, capped_rate)
    batch1_rate = 1.0 / (fixed_s + per_row_s)
    batch = min(rate * best_window_s, max_batch)
    return {"fixed_s": fixed_s, "per_row_s": per_row_s, "window_s": batch / rate, "window_rate": window_rate,
            "batch": batch, "capped": capped_rate < window_rate, "batch_time_s": fixed_s + batch * per_row_s,
            "queries_per_s": rate, "batch1_queries_per_s": batch1_rate, "batched_over_batch1": rate / batch1_rate,
            "batch1_latency_s": fixed_s + per_row_s, "fixed_over_row": fixed_s / per_row_s}


def _cm_config(**fields) -> "cm.Config":
    """A cluster_model Config from the fields this module uses; where that Config has grouped-query
    attention (kv_heads), full heads, so the other fields keep their meaning."""
    names = {f.name for f in __import__("dataclasses").fields(cm.Config)}
    if "kv_heads" in names:
        fields.setdefault("kv_heads", fields.get("heads", 1))
    return cm.Config(**{k: v for k, v in fields.items() if k in names})


FORMULAS = {"kv_cache": kv_cache, "training_memory": training_memory, "serving": serving,
            "all_reduce": all_reduce, "ridge_point": ridge_point, "training_days": training_days,
            "pipeline_bubble": pipeline_bubble, "decode_intensity": arithmetic_intensity_decode,
            "all_reduce_algorithms": all_reduce_algorithms, "hierarchical_all_reduce": hierarchical_all_reduce,
            "ring_straggler": ring_straggler, "moe_all_to_all": moe_all_to_all,
            "training_memory_offload": training_memory_offload, "bus_bandwidth": bus_bandwidth,
            "gemm_waves": gemm_waves, "mla_kv_cache": mla_kv_cache, "chunked_prefill": chunked_prefill,
            "kv_transfer": kv_transfer, "kv_swap_vs_recompute": kv_swap_vs_recompute, "ivfpq_memory": ivfpq_memory,
            "microbatch_capacity": microbatch_capacity}

# -- problems ---------------------------------------------------------------------------------------


@dataclass
class Problem:
    id: str
    title: str
    topic: str  # a topic page's file name under docs/topics/ (without .md)
    difficulty: str
    question: str  # Markdown
    formula: str
    inputs: dict
    given: list  # Markdown lines: the published figures, each with its source
    answer: str  # the result key the answer reads
    unit: str  # shown unit
    scale: float  # result / scale is in ``unit``
    stated: str  # the author's rounded answer, in ``unit``
    steps: list = field(default_factory=list)  # Markdown lines with {name} placeholders (results and inputs)
    note: str = ""
    source: str = ""  # the file it came from, as messages show it

    @property
    def where(self) -> str:
        """How a message names this problem: 'website/sizing_problems.toml: problem 'kv_llama2_70b''."""
        return f"{self.source}: problem {self.id!r}" if self.source else f"problem {self.id!r}"


# What a problem file may hold. Every value is checked when the file is loaded, so the check and the site
# build refuse a bad one in one line naming the file, the problem and the field, before any formula runs.
DIFFICULTIES = ("easy", "medium", "hard")  # the topic pages' (scripts/check.py DIFFICULTIES); a test keeps them equal
REQUIRED = ("title", "topic", "difficulty", "question", "formula", "inputs", "answer", "stated")
OPTIONAL = ("given", "unit", "scale", "steps", "note")
PROBLEM_ID = re.compile(r"[A-Za-z0-9_\-]+")  # what a {{ sizing ID }} marker can name
TOPIC_NAME = re.compile(r"[a-z0-9][a-z0-9\-]*")  # a topic page's file name; it lands in a link
RESULT_KEY = re.compile(r"[a-z_]+")
NAME = re.compile(r"[a-z0-9_]+")

# The inputs' rules, by name (every formula's parameters have one; a test requires it). A whole number or a
# number above 0, up to LIMIT: far above any real model, cluster or token count (and compute() still refuses
# a result that is not finite). A choice input names one of a fixed list.
LIMIT = 1e18


def _whole(lowest: int, highest: float = LIMIT) -> tuple:
    return ("whole", lowest, highest)


POSITIVE = ("above", 0, LIMIT)
FRACTION = ("above", 0, 1)
RECOMPUTE = ("none", "selective", "full")
INPUT_RULES = {
    "layers": _whole(1), "kv_heads": _whole(1), "head_dim": _whole(1), "context": _whole(1), "batch": _whole(1),
    "dtype_bytes": POSITIVE, "block_tokens": _whole(0),
    "params": POSITIVE, "hidden": _whole(1), "heads": _whole(1), "seq_len": _whole(1), "microbatch_size": _whole(1),
    "microbatches": _whole(1), "precision": ("choice", PRECISIONS), "optimizer": ("choice", tuple(OPTIMIZER_MOMENTS)),
    "zero_stage": _whole(0, 3), "dp": _whole(1), "tp": _whole(1), "pp": _whole(1), "recompute": ("choice", RECOMPUTE),
    "gpu_memory_gb": POSITIVE,
    "optimizer_state": ("choice", OPTIMIZER_STATES), "offload": ("choice", OFFLOAD), "host_memory_gb": POSITIVE,
    "host_link_gbs": POSITIVE, "busbw_gbs": POSITIVE, "collective": ("choice", COLLECTIVES), "line_rate_gbs": POSITIVE,
    "weight_bytes": POSITIVE, "gpus": _whole(1), "bandwidth_gbs": POSITIVE, "memory_gb": POSITIVE, "kv_bytes": POSITIVE,
    "n_bytes": POSITIVE, "link": ("choice", tuple(cm.LINKS)),
    "device": ("device",), "dtype": ("name",),
    "tokens": POSITIVE, "peak_tflops": POSITIVE, "mfu": FRACTION,
    "stages": _whole(1), "interleave": _whole(1),
    "alpha_us": POSITIVE, "tree_bw_fraction": FRACTION, "nodes": _whole(1), "gpus_per_node": _whole(1),
    "slow_bandwidth_gbs": POSITIVE, "top_k": _whole(1), "ep": _whole(1), "dispatch_bytes": POSITIVE,
    "combine_bytes": POSITIVE,
    "m": _whole(1), "n": _whole(1), "k": _whole(1), "tile_m": _whole(1), "tile_n": _whole(1), "tile_k": _whole(1),
    "sms": _whole(1), "split_k": _whole(1), "partial_bytes": POSITIVE,
    "latent_dim": _whole(1), "rope_dim": _whole(0), "qk_head_dim": _whole(1), "v_head_dim": _whole(1),
    "token_budget": _whole(1), "prompt_tokens": _whole(1), "link_gbs": POSITIVE, "nvlink_gbs": POSITIVE,
    "vectors": _whole(1), "dim": _whole(1), "nlist": _whole(1), "pq_m": _whole(1), "pq_bits": _whole(1, 16),
    "id_bytes": POSITIVE, "other_memory_gb": POSITIVE,
    "features": _whole(1), "kernels": _whole(1), "launch_us": POSITIVE,
    "stage_budget_ms": POSITIVE, "max_batch": _whole(1),
}


def _show(value) -> str:
    """A value as the problem file writes it, short enough for a one-line message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def checked_input(value, rule: tuple, where: str):
    """``value`` when ``rule`` allows it (a whole number as an int); else ValueError naming ``where``."""
    kind = rule[0]
    if kind in ("choice", "device"):
        if kind == "device":
            from records import datasheets

            choices = tuple(datasheets.sheets())
        else:
            choices = rule[1]
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{where}: {_show(value)} is not one of {', '.join(choices)}")
        return value
    if kind == "name":  # looked up by the formula (a datasheet's dtype), which says when it has no such figure
        if not isinstance(value, str) or not NAME.fullmatch(value):
            raise ValueError(f"{where}: {_show(value)} is not a name (lower-case letters, digits, '_')")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {_show(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {_show(value)} is not a finite number")
    _, lowest, highest = rule
    if kind == "whole":
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{where}: {_show(value)} is not a whole number")
        if not lowest <= value <= highest:
            raise ValueError(f"{where}: {_show(value)} is out of range: give a whole number from {lowest:g} "
                             f"to {highest:g}")
        return int(value)
    if not lowest < value <= highest:
        raise ValueError(f"{where}: {_show(value)} is out of range: give a number above {lowest:g} "
                         f"and at most {highest:g}")
    return value


def checked_inputs(formula: str, inputs, where: str) -> dict:
    """A problem's inputs, each resolved (datasheet:...) and checked: a table whose keys are the formula's
    parameters, every required one given, every value allowed by its rule."""
    if not isinstance(inputs, dict):
        raise ValueError(f"{where} inputs: {_show(inputs)}, not a table of NAME = value")
    parameters = inspect.signature(FORMULAS[formula]).parameters
    for name in inputs:
        if name not in parameters:
            raise ValueError(f"{where} input {name}: {formula} takes no such input (it takes {', '.join(parameters)})")
    for name, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty and name not in inputs:
            raise ValueError(f"{where} inputs: no {name} ({formula} needs it)")
    out = {}
    for name, value in inputs.items():
        here = f"{where} input {name}"
        out[name] = checked_input(resolve(value, here), INPUT_RULES[name], here)
    return out


DATASHEET_REF = re.compile(r"datasheet:([a-z0-9\-]+)\.([a-z_]+)(?:\.([a-z0-9_]+))?")


def resolve(value, where: str):
    """An input written "datasheet:h100.memory_gbps" or "datasheet:h100.tflops.bfloat16" is read from
    records/datasheets.toml, so a chip figure has one source."""
    if not isinstance(value, str) or not value.startswith("datasheet:"):
        return value
    m = DATASHEET_REF.fullmatch(value)
    if not m:
        raise ValueError(f"{where}: write datasheet:DEVICE.FIELD[.DTYPE], not {_show(value)}")
    from records import datasheets

    sheet = datasheets.sheets().get(m.group(1))
    try:
        out = sheet[m.group(2)]
        return float(out[m.group(3)] if m.group(3) else out)
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: records/datasheets.toml has no {value.removeprefix('datasheet:')}") from None


def _problem(pid: str, p, source: str) -> Problem:
    """One problem of the file, every field checked (ValueError: one line naming the file, problem and field)."""
    where = f"{source}: problem {pid!r}"
    if not PROBLEM_ID.fullmatch(pid):
        raise ValueError(f"{where}: an id is letters, digits, '_' and '-' (what a {{{{ sizing ID }}}} marker names)")
    if not isinstance(p, dict):
        raise ValueError(f"{where}: {_show(p)}, not a table of fields")
    for key in p:
        if key not in REQUIRED + OPTIONAL:
            raise ValueError(f"{where}: unknown field {_show(key)} (known: {', '.join(REQUIRED + OPTIONAL)})")
    for key in REQUIRED:
        if key not in p:
            raise ValueError(f"{where} has no {key!r}")
    for key in ("title", "topic", "difficulty", "question", "formula", "answer", "stated", "unit", "note"):
        if key in p and not isinstance(p[key], str):
            raise ValueError(f"{where} {key}: {_show(p[key])} is not a string" +
                             (' (write the rounded answer in quotes, "1.34": its written digits set the tolerance)'
                              if key == "stated" else ""))
    for key in ("given", "steps"):
        if key in p and not (isinstance(p[key], list) and all(isinstance(line, str) for line in p[key])):
            raise ValueError(f"{where} {key}: not an array of strings")
    for key in ("title", "unit"):
        if MARKUP.search(p.get(key, "")):  # a title or a unit is one line of plain text
            raise ValueError(f"{where} {key}: {_show(p[key])} holds markup (< > [ ] {{ }} ` \\ or a line break); "
                             "it is shown as plain text")
    if not p["title"].strip():
        raise ValueError(f"{where} title: empty")
    if p["difficulty"] not in DIFFICULTIES:
        raise ValueError(f"{where} difficulty: {_show(p['difficulty'])} is not one of {', '.join(DIFFICULTIES)}")
    if not TOPIC_NAME.fullmatch(p["topic"]):
        raise ValueError(f"{where} topic: {_show(p['topic'])} is not a topic page's file name (docs/topics/NAME.md)")
    if p["formula"] not in FORMULAS:
        raise ValueError(f"{where} formula: unknown formula {_show(p['formula'])} (known: {', '.join(FORMULAS)})")
    if not RESULT_KEY.fullmatch(p["answer"]):
        raise ValueError(f"{where} answer: {_show(p['answer'])} is not a result name")
    try:
        stated_tolerance(p["stated"])
    except ValueError as e:
        raise ValueError(f"{where} stated: {e}") from None
    scale = checked_input(p.get("scale", 1.0), POSITIVE, f"{where} scale")
    return Problem(id=pid, title=p["title"], topic=p["topic"], difficulty=p["difficulty"], question=p["question"],
                   formula=p["formula"], inputs=checked_inputs(p["formula"], p["inputs"], where),
                   given=list(p.get("given", [])), answer=p["answer"], unit=p.get("unit", ""), scale=float(scale),
                   stated=p["stated"], steps=list(p.get("steps", [])), note=p.get("note", ""), source=source)


def load_problems(path: Path = PROBLEMS_FILE) -> dict[str, Problem]:
    """Every problem of the file, checked; ValueError (one line naming the file, problem and field) if one is bad."""
    source = shown(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # TOMLDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise ValueError(f"{source}: not valid TOML: {e}") from None
    return {pid: _problem(pid, p, source) for pid, p in data.items()}


def compute(problem: Problem) -> dict:
    """The formula's results for the problem's inputs: every number finite (ValueError naming the problem if not)."""
    try:
        result = FORMULAS[problem.formula](**problem.inputs)
    except (ValueError, KeyError, ArithmeticError) as e:  # cluster_model's rules, a figure a datasheet lacks
        detail = f"no {e.args[0]!r} for these inputs" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"{problem.where}: {problem.formula}: {detail}") from None
    for key, value in result.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{problem.where}: {problem.formula} gives {key} = {value} for these inputs; "
                             "check their units and sizes")
    return result


def computed_answer(problem: Problem) -> float:
    result = compute(problem)
    if problem.answer not in result:
        raise ValueError(f"{problem.where}: formula {problem.formula} gives no {problem.answer!r} "
                         f"(it gives {', '.join(result)})")
    return float(result[problem.answer]) / problem.scale


def stated_tolerance(stated: str) -> float:
    """Half a unit in the stated answer's last digit: '21.5' -> 0.05, '137' -> 0.5, '1,200' -> 0.5."""
    text = stated.replace(",", "").strip()
    if not re.fullmatch(r"-?\d+(\.\d+)?", text):
        raise ValueError(f"stated answer {_show(stated)} is not a plain number (digits, at most one point)")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** -decimals


def disagreement(problem: Problem) -> str:
    """'' when the stated answer is the computed one rounded to the stated digits; else why not."""
    try:
        value = computed_answer(problem)
        tol = stated_tolerance(problem.stated)
    except (ValueError, TypeError, KeyError) as e:
        return str(e)
    stated = float(problem.stated.replace(",", ""))
    if abs(value - stated) > tol * (1 + 1e-9):
        return (f"{problem.where}: stated answer {problem.stated} {problem.unit} but the computation gives "
                f"{value:.6g} {problem.unit} (the stated digits allow +/- {tol:g})")
    return ""


def stated_problems(path: Path = PROBLEMS_FILE) -> list[str]:
    """Everything the check refuses in the problem file, one line each naming the file and the problem: a
    file or field it cannot take, a stated answer that is not its computation, a step that does not render."""
    try:
        problems = load_problems(path)
    except ValueError as e:
        return [str(e)]
    messages = []
    for p in problems.values():
        message = disagreement(p)
        if not message:
            try:
                render_problem(p)
            except ValueError as e:
                message = str(e)
        if message:
            messages.append(message)
    return messages


# -- rendering --------------------------------------------------------------------------------------


SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def fmt(value) -> str:
    """A readable number: thousands separators for large ones, 3-4 significant digits otherwise."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) >= 1e15 or abs(v) < 1e-3:
        mantissa, exponent = f"{v:.3e}".split("e")
        return f"{float(mantissa):g} × 10" + str(int(exponent)).translate(SUPERSCRIPT)
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def step_numbers(problem: Problem) -> dict:
    """What a step line may name: every input and result, plus derived ones (name_gb is name / 1e9, name_mb
    name / 1e6, ...)."""
    result = compute(problem)
    numbers = {}
    for source in (problem.inputs, result):
        for k, v in source.items():
            numbers[k] = v
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                numbers[k + "_gb"] = v / GB
                numbers[k + "_mb"] = v / 1e6
                numbers[k + "_gib"] = v / GIB
                numbers[k + "_ms"] = v * 1e3
                numbers[k + "_us"] = v * 1e6
                numbers[k + "_pct"] = 100 * v
                numbers[k + "_b"] = v / 1e9
                numbers[k + "_kib"] = v / 1024
    numbers["answer"] = computed_answer(problem)
    numbers["unit"] = problem.unit
    return numbers


def step_values(problem: Problem) -> dict:
    """The same, shown as a page shows them (fmt)."""
    return {k: fmt(v) for k, v in step_numbers(problem).items()}


STEP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a width or a precision of two digits at most: "{x:999999999}" would fill the memory
STEP_FORMAT = re.compile(r"[<>^]?[+\- ]?\d{0,2}[,_]?(\.\d{1,2})?[eEfFgG%]?")


def fill_step(template: str, numbers: dict, where: str) -> str:
    """A step line with its fields filled: ``{name}`` is the value as shown (fmt), ``{name:.2f}`` the number in
    that format. Nothing else a Python format string can do (attribute or index access, conversions, nested
    fields) is allowed: a step is a contributor's text and must reach no Python object."""
    out = []
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"{where}: {e} (write {{{{ or }}}} for a literal brace)") from None
    for literal, name, spec, conversion in parts:
        out.append(literal)
        if name is None:
            continue
        if conversion is not None or not STEP_NAME.fullmatch(name) or not STEP_FORMAT.fullmatch(spec or ""):
            field_text = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"{where}: {_show(field_text)} is not a plain {{name}} or {{name:format}} field "
                             "(no attribute, index, conversion or nested field)")
        if name not in numbers:
            raise ValueError(f"{where}: a step names {name!r}, which is neither an input nor a result of the formula")
        if not spec:
            out.append(fmt(numbers[name]))
            continue
        try:
            out.append(format(numbers[name], spec))
        except ValueError as e:
            raise ValueError(f"{where}: {{{name}:{spec}}}: {e}") from None
    return "".join(out)


def render_problem(problem: Problem, number: int | None = None) -> str:
    """The problem as Markdown: heading, question, the given figures with sources, the worked answer folded."""
    numbers = step_numbers(problem)
    steps = [fill_step(s, numbers, f"{problem.where} steps[{i}]") for i, s in enumerate(problem.steps)]
    answer = fmt(numbers["answer"])
    heading = f"### {problem.title}" if number is None else f"### {number}. {problem.title}"
    out = [f'{heading} {{ #{problem.id} }}', "",
           f"*{problem.difficulty} · topic: [{problem.topic.replace('-', ' ')}](topics/{problem.topic}.md)*", "",
           problem.question.strip(), ""]
    if problem.given:
        out.append("Given:")
        out.append("")
        out += [f"- {g}" for g in problem.given]
        out.append("")
    out.append('??? success "Answer"')
    out.append("")
    for i, s in enumerate(steps, 1):
        out.append(f"    {i}. {s}")
    out.append("")
    out.append(f"    **Answer: {answer} {problem.unit}** (stated, rounded: {problem.stated} "
               f"{problem.unit}; computed by `website/sizing.py` `{problem.formula}` at build time).")
    if problem.note:
        out.append("")
        out.append("    " + problem.note.strip().replace("\n", "\n    "))
    out.append("")
    return "\n".join(out)


SIZING_MARKER = re.compile(r"\{\{\s*sizing\s+([A-Za-z0-9_\-]+)(?:\s+answer)?\s*\}\}")
SIZING_ANSWER = re.compile(r"\{\{\s*sizing\s+([A-Za-z0-9_\-]+)\s+answer\s*\}\}")  # only the inline form
# a marker, with the indentation of its line when it stands alone on an indented line (group 1); group 3 is
# " answer" for the inline form, {{ sizing ID answer }}: the problem's computed answer in its unit, labelled
# "computed" (a 30-second answer's computed number, never typed; its worked steps are on the sizing page)
SIZING_IN_TEXT = re.compile(r"(?:^( +)(?=\{\{[^\n]*\}\}[ \t]*$))?\{\{\s*sizing\s+([A-Za-z0-9_\-]+)(\s+answer)?\s*\}\}",
                            re.M)


def expand(markdown: str, page_src_uri: str = "page") -> str:
    """Replace every {{ sizing ID }} marker outside code with the rendered problem (numbered in page order)."""
    if not SIZING_MARKER.search(markdown):
        return markdown
    from website.markers import transform_outside_code

    problems = load_problems()
    counter = [0]
    prefix = "../" * page_src_uri.count("/")

    def one(m: re.Match) -> str:
        indent, pid = m.group(1), m.group(2)
        if pid not in problems:
            raise ValueError(f"{page_src_uri}: {m.group(0).strip()}: no problem {pid!r} in website/sizing_problems.toml")
        if m.group(3):  # inline: the computed answer, labelled as a metric marker labels a computed value
            problem = problems[pid]
            return (f'{indent or ""}<span class="mm-value" data-origin="computed" data-sizing="{pid}">'
                    f"{html.escape(fmt(computed_answer(problem)))} {html.escape(problem.unit)} (computed)</span>")
        counter[0] += 1
        text = render_problem(problems[pid], counter[0]).replace("](topics/", f"]({prefix}topics/")
        if not indent:
            return text
        # alone on an indented line (inside a fold, as in a topic page's full answer): all of it at that depth,
        # the heading as a bold line, so the fold stays whole and the page's table of contents gains no entry
        heading, rest = text.split("\n", 1)
        title = re.match(r"### (.*) \{ #([A-Za-z0-9_\-]+) \}$", heading)
        # out of the site's search index: the same problem is indexed once, on the sizing page
        text = (f'<section markdown="1" data-search-exclude="sizing">\n\n**{title.group(1)}**\n{{ #{title.group(2)} }}\n'
                f"{rest}\n</section>")
        return "\n".join(indent + line if line.strip() else "" for line in text.splitlines())

    return transform_outside_code(markdown, lambda chunk: SIZING_IN_TEXT.sub(one, chunk))


def markers_in(markdown: str) -> list[str]:
    from website.markers import transform_outside_code

    found: list[str] = []
    transform_outside_code(markdown, lambda chunk: (found.extend(SIZING_MARKER.findall(chunk)), chunk)[1])
    return found


def practice_cards(to_html, url_dir: str, titles: dict[str, tuple[str, str]], page: str = "sizing") -> list[dict]:
    """One practice card per problem: the question and given figures; the answer is the worked steps.
    ``titles`` maps a topic page's stem to (its topic id, its title)."""
    import posixpath

    url = posixpath.relpath(page, url_dir or ".") + "/"
    cards = []
    for p in load_problems().values():
        topic, title = titles.get(p.topic, ("", p.topic))
        body = render_problem(p).split("\n", 1)[1]  # without the heading
        question_md, answer_md = body.split('??? success "Answer"', 1)
        question_md = re.sub(r"^\*[a-z]+ · topic: .*\*$", "", question_md, count=1, flags=re.M)  # the card shows both
        answer_md = "\n".join(line[4:] if line.startswith("    ") else line for line in answer_md.splitlines())
        cards.append({"id": f"sizing-{p.id}", "kind": "sizing", "topic": topic, "topic_title": title,
                      "difficulty": p.difficulty, "url": url, "anchor": p.id, "measured": "",
                      "question": f"<strong>{html.escape(p.title)}</strong>" + '<div class="mm-card-detail">' + to_html(
                          question_md.replace("](topics/", f"]({posixpath.relpath('topics', url_dir or '.')}/")
                          .replace(".md)", "/)"), None) + "</div>",
                      "answer": to_html(answer_md, None)})
    return cards
