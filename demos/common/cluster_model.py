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

demos/common/cluster_validation.py compares the model with the published figures (ZeRO paper,
Korthikanti et al., nccl-tests, Megatron-LM) and holds the fit behind ``EFFICIENCY_BY_HIDDEN``;
tests/test_scale_model_validation.py pins them.

A configuration is a ``Config`` (or a plain dict with the same field names: that is what the
JavaScript functions take). Every assumption is a field with a default and a one-line reason in
``ASSUMPTIONS``; ``assumptions_text`` prints them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

GB = 1e9  # decimal gigabytes, as datasheets count
US = 1e-6

# -- links ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_gbs: float  # per GPU, per direction, GB/s
    alpha_us: float  # per-message latency: an ASSUMPTION, not a datasheet figure
    source: str

    @property
    def alpha_s(self) -> float:
        return self.alpha_us * US

    @property
    def beta_s_per_byte(self) -> float:
        return 1.0 / (self.bandwidth_gbs * GB)


LINKS = {
    "nvlink4_h100": Link(
        "NVLink 4 (H100 SXM)", 450.0, 3.0,
        "NVIDIA H100 Tensor Core GPU datasheet: 900 GB/s total NVLink bandwidth per GPU, i.e. ~450 GB/s per "
        "direction. alpha = 3 us is an ASSUMPTION (order of NCCL's small-message latency inside a node)."),
    "ib_ndr400": Link(
        "InfiniBand NDR 400 Gb/s, one NIC per GPU", 50.0, 5.0,
        "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s = 50 GB/s per direction per GPU (DGX H100 has one NIC per "
        "GPU). alpha = 5 us is an ASSUMPTION (a few microseconds across a switch)."),
}

# -- collectives (alpha-beta, ring / pairwise) ------------------------------------------------------
# Each returns (alpha coefficient, beta coefficient): time = a * alpha + b * beta. The demo fits
# alpha and beta by least squares on exactly these features.


def all_reduce_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Ring all-reduce = reduce-scatter + all-gather: 2(p-1) steps, each rank sends 2(p-1)/p * n."""
    return 2.0 * (p - 1), 2.0 * (p - 1) / p * n_bytes


def all_gather_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Ring all-gather of an n-byte output: p-1 steps, each rank sends (p-1)/p * n."""
    return float(p - 1), (p - 1) / p * n_bytes


def reduce_scatter_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Ring reduce-scatter of an n-byte input: p-1 steps, each rank sends (p-1)/p * n."""
    return float(p - 1), (p - 1) / p * n_bytes


def all_to_all_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Pairwise all-to-all of n bytes per rank: p-1 exchanges, each rank sends (p-1)/p * n."""
    return float(p - 1), (p - 1) / p * n_bytes


FEATURES = {
    "all_reduce": all_reduce_features,
    "all_gather": all_gather_features,
    "reduce_scatter": reduce_scatter_features,
    "all_to_all": all_to_all_features,
}


def collective_time(kind: str, n_bytes: float, p: int, alpha_s: float, beta_s_per_byte: float) -> float:
    """Seconds for one collective of kind ``kind`` on p ranks (0 on one rank)."""
    if p <= 1:
        return 0.0
    a, b = FEATURES[kind](n_bytes, p)
    return a * alpha_s + b * beta_s_per_byte


def bytes_sent_per_rank(kind: str, n_bytes: float, p: int) -> float:
    """What each rank puts on the wire: the beta coefficient (NCCL's bus-bandwidth factor times n)."""
    return 0.0 if p <= 1 else FEATURES[kind](n_bytes, p)[1]


def fit_alpha_beta(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares alpha and beta from (alpha coefficient, beta coefficient, measured seconds).

    The residuals are *relative* ((model - measured) / measured), so a 4 KB message counts as much as
    a 32 MB one: plain residuals would let the largest messages decide alpha too. Non-negative: if the
    unconstrained solution makes one parameter negative, it is set to 0 and the other refitted."""
    rows = [(a / t, b / t) for a, b, t in points]  # each row should sum (times alpha, beta) to 1
    saa = sum(a * a for a, _ in rows)
    sbb = sum(b * b for _, b in rows)
    sab = sum(a * b for a, b in rows)
    sa = sum(a for a, _ in rows)
    sb = sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    if det > 0:
        alpha = (sa * sbb - sb * sab) / det
        beta = (sb * saa - sa * sab) / det
        if alpha > 0 and beta > 0:
            return alpha, beta
    # one-parameter fits; keep the better one
    only_beta = (0.0, sb / sbb) if sbb > 0 else (0.0, 0.0)
    only_alpha = (sa / saa, 0.0) if saa > 0 else (0.0, 0.0)
    return min((only_beta, only_alpha), key=lambda ab: max_relative_error(points, *ab))


def max_relative_error(points: list[tuple[float, float, float]], alpha: float, beta: float) -> float:
    """max |model - measured| / measured over the points."""
    return max(abs(a * alpha + b * beta - t) / t for a, b, t in points)


# -- configurations ---------------------------------------------------------------------------------

# Presets with the shapes of the released models (Touvron et al., "Llama 2", https://arxiv.org/abs/2307.09288,
# and the released configs): SwiGLU MLP (three h x ffn matrices), grouped-query attention at 70B (8 KV
# heads), untied input and output embeddings. The keys are short; MODEL_NAMES says which model each is.
MODELS = {
    "7B": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn_hidden": 11008, "gated_mlp": True,
           "tied_embeddings": False, "vocab": 32000},
    "70B": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672, "gated_mlp": True,
            "tied_embeddings": False, "vocab": 32000},
}
MODEL_NAMES = {"7B": "Llama-2-7B", "70B": "Llama-2-70B"}

RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Config:
    # the model (defaults: the Llama-2-7B preset)
    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 32  # fewer than heads: grouped-query attention
    ffn_hidden: int = 11008  # MLP width (4 h in GPT; 11008 in Llama-2-7B's SwiGLU)
    gated_mlp: bool = True  # SwiGLU / GeGLU: three h x ffn matrices instead of two
    tied_embeddings: bool = False  # one V x h table for input and output (GPT) or two (Llama)
    vocab: int = 32000
    # the batch: one step runs `microbatches` microbatches of `microbatch_size` sequences per DP replica
    seq_len: int = 4096
    microbatch_size: int = 1
    microbatches: int = 8
    # the parallel layout: GPUs = tp * pp * dp; TP innermost (inside a node), then PP, then DP
    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 0
    sequence_parallel: bool = True
    recompute: str = "none"
    schedule: str = "1f1b"
    interleave: int = 1
    overlap_dp: bool = False
    # the hardware
    gpus_per_node: int = 8
    gpu_memory_gb: float = 80.0
    peak_tflops: float = 989.0
    compute_efficiency: float | None = None  # None: calibrated (EFFICIENCY_BY_HIDDEN at this hidden size)
    intra_bandwidth_gbs: float = LINKS["nvlink4_h100"].bandwidth_gbs
    intra_alpha_us: float = LINKS["nvlink4_h100"].alpha_us
    inter_bandwidth_gbs: float = LINKS["ib_ndr400"].bandwidth_gbs
    inter_alpha_us: float = LINKS["ib_ndr400"].alpha_us


ASSUMPTIONS = {  # field -> (unit, why this default)
    "sequence_parallel": ("", "Megatron-style sequence parallelism with TP: LayerNorm/dropout activations are "
                              "split over the TP ranks too, so all activations divide by tp (Korthikanti et al.)"),
    "recompute": ("", "none | selective (recompute the attention core, its s^2 part: 4 L h s more FLOPs per token) | "
                      "full (keep only each layer's input and run its forward again: 2 x layer parameters + 4 L h s "
                      "more FLOPs per token)"),
    "schedule": ("", "1F1B keeps at most pp microbatches in flight on the first stage; GPipe keeps all of them"),
    "interleave": ("", "virtual stages per GPU (interleaved 1F1B, Narayanan et al. 2021): bubble / v, "
                       "activations x (1 + (pp-1)/(pp v)), pp sends x v"),
    "overlap_dp": ("", "False: DP traffic is fully exposed (an upper bound). True: it hides behind backward compute "
                       "(the last microbatch's for ZeRO 0/1, every microbatch's for ZeRO-2, all compute for ZeRO-3)"),
    "gpus_per_node": ("", "one NVLink domain, as in a DGX/HGX H100 (8 GPUs)"),
    "gpu_memory_gb": ("GB", "H100 SXM 80 GB, counted as 80e9 bytes: the 5.9 GB up to 80 GiB is left for what this "
                            "model omits (logits, communication buffers, workspaces, fragmentation)"),
    "peak_tflops": ("TFLOP/s", "H100 SXM dense BF16 tensor-core peak, NVIDIA H100 datasheet (989 TFLOP/s)"),
    "compute_efficiency": ("fraction of peak", "None = CALIBRATED: the fraction of peak at which Megatron-LM's ten "
                                               "weak-scaling runs (Narayanan et al. 2021, Table 1, A100s) computed, "
                                               "fitted through this model and interpolated by hidden size "
                                               "(EFFICIENCY_BY_HIDDEN); it rises with size, as GEMMs grow. Applying "
                                               "A100 fractions to another GPU is an ASSUMPTION"),
    "intra_bandwidth_gbs": ("GB/s", LINKS["nvlink4_h100"].source),
    "intra_alpha_us": ("us", "ASSUMPTION: per-step latency of a collective inside a node"),
    "inter_bandwidth_gbs": ("GB/s", LINKS["ib_ndr400"].source),
    "inter_alpha_us": ("us", "ASSUMPTION: per-step latency of a collective across nodes"),
}

FIXED_ASSUMPTIONS = [
    "parameters = L (2 h^2 + 2 h kv_dim + (3 if gated else 2) h ffn) + (1 if tied else 2) V h, kv_dim = h "
    "kv_heads / heads (GQA); a GPT layer (4h MLP, full heads, tied) gives 12 L h^2 + V h; biases and norm weights "
    "ignored (0.002% of Llama-2-70B)",
    "model states per parameter (mixed-precision Adam, ZeRO paper): 2 B bf16 weights + 2 B bf16 gradients "
    "+ 12 B fp32 master weights, momentum and variance = 16 B",
    "ZeRO-1 divides the optimizer's 12 B by dp, ZeRO-2 also the gradients, ZeRO-3 also the weights",
    "TP and PP split every parameter evenly over tp * pp GPUs (the embedding's placement on the first/last "
    "stage is ignored)",
    "activations per layer per microbatch (16-bit, Korthikanti et al., a GPT layer with dropout): s b h "
    "(34 + 5 a s / h), / tp with sequence parallelism; selective recomputation 34 s b h; full recomputation "
    "2 s b h (the layer input); GQA, SwiGLU widths and no-dropout (Llama) change the 34 and are not modelled; "
    "logits, embeddings and the backward working set are ignored",
    "model FLOPs per token (Narayanan et al. 2021, eq. 3) = 6 x (parameters without the input embedding, a "
    "lookup) + 12 L h s (attention scores and their product with V, counted without a causal mask); the hardware "
    "also repeats 4 L h s per token with selective recomputation and 2 x (layer parameters) + 4 L h s with full "
    "recomputation; divided evenly over the GPUs. MFU counts model FLOPs, HFU hardware FLOPs",
    "TP: 4 all-reduces (6 with full recomputation) of b s h x 2 bytes per layer per microbatch, ring over tp; "
    "with sequence parallelism they become all-gather + reduce-scatter pairs of the same volume",
    "PP: per microbatch (and virtual stage) each GPU sends one activation forward and one gradient backward, "
    "b s h x 2 / tp bytes each (scatter-gather across the TP ranks), point-to-point, not overlapped",
    "DP: bf16 gradients of this GPU's tp*pp shard; ZeRO-0 one all-reduce per step (gradients accumulated "
    "locally); ZeRO-1 one reduce-scatter + one all-gather of the updated weights; ZeRO-2 a reduce-scatter "
    "per microbatch (gradients stay sharded) + one all-gather; ZeRO-3 per microbatch two all-gathers of the "
    "weights (forward, backward) + one reduce-scatter",
    "links: a group of GPUs whose span (size x stride) fits in one node uses the intra-node link; a collective "
    "spanning nodes gets the NICs of its members inside one node (NCCL spreads its rings over them; one NIC per "
    "GPU), at most the intra-node bandwidth; pipeline sends that leave a node use one NIC, and every pipeline "
    "boundary is charged that way once tp x pp exceeds a node",
    "bubble: the idle time of a pipeline = (pp-1) / (interleave x microbatches) of the ideal (compute + TP) "
    "time, i.e. a fraction (pp-1)/(v m + pp-1) of the pipeline's time",
]


def as_config(cfg) -> Config:
    return cfg if isinstance(cfg, Config) else Config(**cfg)


def _is_whole(x) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return x >= 1
    return isinstance(x, float) and math.isfinite(x) and x.is_integer() and x >= 1


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


WHOLE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "microbatch_size",
                "microbatches",
                "tp", "pp", "dp", "interleave", "gpus_per_node")
POSITIVE_FIELDS = ("gpu_memory_gb", "peak_tflops", "intra_bandwidth_gbs", "inter_bandwidth_gbs")
NON_NEGATIVE_FIELDS = ("intra_alpha_us", "inter_alpha_us")


def problem(cfg) -> str:
    """The first thing wrong with a configuration, in one line ("" when it is valid).
    The JavaScript version returns the same message for the same configuration."""
    c = as_config(cfg)
    for name in WHOLE_FIELDS:
        if not _is_whole(getattr(c, name)):
            return f"{name} must be a whole number >= 1"
    for name in POSITIVE_FIELDS:
        value = getattr(c, name)
        if not (_is_number(value) and value > 0):
            return f"{name} must be a number > 0"
    for name in NON_NEGATIVE_FIELDS:
        value = getattr(c, name)
        if not (_is_number(value) and value >= 0):
            return f"{name} must be a number >= 0"
    if c.compute_efficiency is not None and not (_is_number(c.compute_efficiency) and 0 < c.compute_efficiency <= 1):
        return "compute_efficiency must be in (0, 1] (or empty: calibrated)"
    if isinstance(c.zero_stage, bool) or c.zero_stage not in (0, 1, 2, 3):
        return "zero_stage must be 0, 1, 2 or 3"
    if c.recompute not in RECOMPUTE:
        return "recompute must be none, selective or full"
    if c.schedule not in SCHEDULES:
        return "schedule must be 1f1b or gpipe"
    for name in ("sequence_parallel", "overlap_dp", "gated_mlp", "tied_embeddings"):
        if not isinstance(getattr(c, name), bool):
            return f"{name} must be true or false"
    if c.hidden % c.heads:
        return "hidden must be divisible by heads"
    if c.heads % c.kv_heads:
        return "heads must be divisible by kv_heads (each KV head serves a whole group of query heads)"
    if c.heads % c.tp:
        return "heads must be divisible by tp (tensor parallelism splits the attention heads)"
    if c.layers % (c.pp * c.interleave):
        return "layers must be divisible by pp x interleave (whole layers on every stage)"
    if c.interleave > 1 and (c.pp == 1 or c.schedule != "1f1b"):
        return "interleave > 1 needs pp > 1 and the 1f1b schedule"
    if c.interleave > 1 and c.microbatches % c.pp:
        return "the interleaved schedule needs microbatches to be a multiple of pp"
    return ""


def _checked(cfg) -> Config:
    c = as_config(cfg)
    message = problem(c)
    if message:
        raise ValueError(message)
    return c


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
