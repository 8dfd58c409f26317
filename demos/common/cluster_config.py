"""The configurations of the cluster cost model (cluster_model.py): the model presets, ``Config`` with
every assumption as a field with a default and a one-line reason (``ASSUMPTIONS``), and the validation
that turns a bad configuration into one line (``problem``). Pure Python, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from demos.common.collectives import LINKS
from records.inputs import declare

INPUTS = declare(datasheets=["h100"])  # the default hardware: an H100 SXM's memory and dense BF16 peak
H100 = INPUTS.datasheet("h100")

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
    gpu_memory_gb: float = float(H100["memory_gb"])
    peak_tflops: float = float(H100["tflops"]["bfloat16"])
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
    "gpu_memory_gb": ("GB", f"H100 SXM {H100['memory_gb']:g} GB, counted as {H100['memory_gb']:g}e9 bytes: the "
                            f"{H100['memory_gb'] * (2**30 / 1e9 - 1):.1f} GB up to {H100['memory_gb']:g} GiB is left "
                            "for what this model omits (logits, communication buffers, workspaces, fragmentation)"),
    "peak_tflops": ("TFLOP/s", "H100 SXM dense BF16 tensor-core peak, NVIDIA H100 datasheet "
                               f"({H100['tflops']['bfloat16']:g} TFLOP/s, records/datasheets.toml)"),
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
