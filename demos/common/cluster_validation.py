"""The cluster model (demos/common/cluster_model.py) against published figures: the Megatron-LM runs its
compute efficiency is calibrated on (Narayanan et al. 2021, Table 1) and held out from (Table 2), the ZeRO
paper's memory figures, Korthikanti et al.'s activation formulas and nccl-tests' bus-bandwidth convention.
``validation_rows`` lists each published figure beside the model's value; tests/test_scale_model_validation.py
pins them, and the scale_model demo records them."""

from __future__ import annotations

import dataclasses

from demos.common.cluster_model import (
    GB,
    Config,
    activation_bytes_per_layer,
    bubble,
    collective_time,
    flops_per_token,
    layer_params,
    model_state_bytes,
    step_time,
)
from records.inputs import declare

INPUTS = declare(datasheets=["a100"])  # Selene's GPUs: the A100's peak, memory and NVLink figures

MEGATRON_URL = "https://arxiv.org/abs/2104.04473"
ZERO_URL = "https://arxiv.org/abs/1910.02054"
KORTHIKANTI_URL = "https://arxiv.org/abs/2205.05198"
NCCL_TESTS_URL = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"

# Narayanan et al. 2021, Table 1: GPT models (V = 51200, s = 2048) on Selene's A100s, end to end.
# (billions of parameters, heads, hidden, layers, TP, PP, GPUs, global batch, achieved TFLOP/s per GPU)
MEGATRON_TABLE1 = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
)
# The same paper, Table 2, PTD-P rows (not used by the calibration: an out-of-sample check).
# (billions, heads, hidden, layers, TP, PP, GPUs, global batch, achieved TFLOP/s per GPU)
MEGATRON_TABLE2_PTDP = (
    (174.6, 96, 12288, 96, 8, 12, 384, 1536, 153), (174.6, 96, 12288, 96, 8, 12, 768, 1536, 149),
    (174.6, 96, 12288, 96, 8, 12, 1536, 1536, 141), (529.6, 128, 20480, 105, 8, 35, 560, 2240, 171),
    (529.6, 128, 20480, 105, 8, 35, 1120, 2240, 167), (529.6, 128, 20480, 105, 8, 35, 2240, 2240, 159),
)
# Selene: DGX A100 nodes, A100 dense BF16 peak 312 TFLOP/s, 80 GB, NVLink 3 600 GB/s total (300 per direction;
# all three from the A100 datasheet, records/datasheets.toml), eight 200 Gb/s HDR InfiniBand NICs per node
# (25 GB/s per GPU: a NIC's line rate, a constant here as NDR's is in collectives.py); latencies as for H100.
_A100 = INPUTS.datasheet("a100")
A100_SELENE = dict(peak_tflops=float(_A100["tflops"]["bfloat16"]), gpu_memory_gb=float(_A100["memory_gb"]),
                   intra_bandwidth_gbs=float(_A100["nvlink_gbps"]), inter_bandwidth_gbs=200 / 8)


def megatron_config(row, compute_efficiency: float | None = None) -> Config:
    """A Megatron-LM run as a Config: GPT shape (4h MLP, tied embedding), full recomputation (as the paper's
    FLOP count assumes), no sequence parallelism (it came later), plain 1F1B, microbatch 1, DP not overlapped.
    Microbatch size, schedule and overlap are ASSUMPTIONS: Table 1 does not list them."""
    _, heads, hidden, layers, tp, pp, gpus, batch, _ = row
    dp = gpus // (tp * pp)
    return Config(layers=layers, hidden=hidden, heads=heads, kv_heads=heads, ffn_hidden=4 * hidden, gated_mlp=False,
                  tied_embeddings=True, vocab=51200, seq_len=2048, microbatch_size=1, microbatches=batch // dp,
                  tp=tp, pp=pp, dp=dp, zero_stage=0, sequence_parallel=False, recompute="full",
                  compute_efficiency=compute_efficiency, **A100_SELENE)


def achieved_tflops(cfg) -> float:
    """Hardware TFLOP/s per GPU over the whole projected step: what Megatron-LM's tables report."""
    step = step_time(cfg)
    return step["flops"] / (step["total_s"] * step["gpus"]) / 1e12


def calibrate_efficiency(row) -> float:
    """The compute efficiency that makes this model reproduce a run's published TFLOP/s per GPU. Step time
    = (C/e + TP)(1 + bubble) + PP + DP, so e follows in closed form."""
    cfg = megatron_config(row, compute_efficiency=1.0)
    step = step_time(cfg)
    target_s = step["flops"] / (step["gpus"] * row[-1] * 1e12)
    compute_at_e = (target_s - step["pp_comm_s"] - step["dp_exposed_s"]) / (1.0 + bubble(cfg)["over_ideal"]) \
        - step["tp_comm_s"]
    return step["compute_s"] / compute_at_e


def megatron_eq3_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021, eq. 3: FLOPs of one iteration with full recomputation."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6.0 * hidden) + vocab / (16.0 * layers * hidden))


def korthikanti_bytes(s, b, h, a, t, case) -> float:
    """Activation bytes per layer, Korthikanti et al. Table 2, typed from the paper independently of
    ``activation_bytes_per_layer``."""
    return {"none": s * b * h * (34 + 5 * a * s / h) if t == 1 else s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
            "sp": s * b * h / t * (34 + 5 * a * s / h),
            "tp_selective": s * b * h * (10 + 24 / t),
            "sp_selective": s * b * h * 34 / t,
            "full": 2 * s * b * h}[case]


def validation_rows() -> list[dict]:
    """This model against published figures: each row has figure, source, url, published, model, unit and
    kind ('validation': an independent figure; 'formula': the paper's formula evaluated independently;
    'calibration': fitted to, so it agrees by construction)."""
    rows = []

    def row(key, figure, source, url, published, model, unit, kind="validation"):
        rows.append({"key": key, "figure": figure, "source": source, "url": url, "published": published,
                     "model": model, "unit": unit, "kind": kind})

    # ZeRO paper, Figure 1 / section 5: 7.5B parameters, 64-way DP, K = 12
    for stage, name, published in ((0, "baseline", 120.0), (1, "P_os", 31.4), (2, "P_os+g", 16.6),
                                   (3, "P_os+g+p", 1.9)):
        model = model_state_bytes(7.5e9, 64, stage)["model_states_bytes"] / GB
        row(f"zero.stage{stage}", f"model states per GPU, 7.5B params, 64 GPUs, {name}",
            "Rajbhandari et al., ZeRO, Figure 1",
            ZERO_URL, published, model, "GB")
    # Korthikanti et al.: GPT-3 175B (s 2048, h 12288, a 96) with t = 8, b = 1, per layer
    gpt3 = dict(layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=4 * 12288, gated_mlp=False,
                tied_embeddings=True, vocab=51200, seq_len=2048, microbatch_size=1)
    for key, case, label, cfg_fields in (
            ("none", "none", "no parallelism", dict(tp=1)),
            ("tp8", "none", "TP 8", dict(tp=8, sequence_parallel=False)),
            ("tp8_sp", "sp", "TP 8 + sequence parallel", dict(tp=8)),
            ("tp8_selective", "tp_selective", "TP 8 + selective recompute",
             dict(tp=8, sequence_parallel=False, recompute="selective")),
            ("tp8_sp_selective", "sp_selective", "TP 8 + SP + selective", dict(tp=8, recompute="selective")),
            ("full", "full", "full recompute", dict(tp=8, recompute="full", sequence_parallel=False))):
        t = cfg_fields["tp"]
        published = korthikanti_bytes(2048, 1, 12288, 96, t, case) / GB
        model = activation_bytes_per_layer(Config(**gpt3, **cfg_fields)) / GB
        row(f"activations.{key}", f"activations per layer, GPT-3 175B, {label}",
            "Korthikanti et al., Table 2 (formula)", KORTHIKANTI_URL,
            published, model, "GB", "formula")
    for key, name, h, a, published in (("gpt3", "GPT-3 175B", 12288, 96, 70.0),
                                       ("mtnlg", "MT-NLG 530B", 20480, 128, 65.0)):
        shape = dict(gpt3, hidden=h, heads=a, kv_heads=a, ffn_hidden=4 * h, tp=8)
        saved = 1 - activation_bytes_per_layer(Config(**shape, recompute="selective")) / \
            activation_bytes_per_layer(Config(**shape))
        row(f"selective_saved.{key}", f"activation memory saved by selective recomputation, {name}",
            "Korthikanti et al., section 4.2",
            KORTHIKANTI_URL, published, 100 * saved, "%")
    gpt3_cfg = Config(**gpt3)
    extra = flops_per_token(dataclasses.replace(gpt3_cfg, recompute="selective"))["attention"] / 3.0
    layer_forward = (2.0 * layer_params(gpt3_cfg) + 4.0 * gpt3_cfg.hidden * gpt3_cfg.seq_len) * gpt3_cfg.layers
    row("selective_flops.gpt3", "selective recomputation FLOPs over a forward pass, GPT-3 175B",
        "Korthikanti et al., section 4.2",
        KORTHIKANTI_URL, 2.7, 100 * extra / layer_forward, "%")
    # nccl-tests: busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter
    for kind, factor in (("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("reduce_scatter", 7 / 8)):
        n_bytes, busbw = 1e9, 450e9
        published = n_bytes / (busbw / factor) * 1e3  # time = size / algbw, algbw = busbw / factor
        model = collective_time(kind, n_bytes, 8, 0.0, 1.0 / busbw) * 1e3
        row(f"nccl.{kind}", f"{kind.replace('_', '-')} of 1 GB on 8 GPUs at 450 GB/s bus bandwidth",
            "nccl-tests PERFORMANCE.md",
            NCCL_TESTS_URL, published, model, "ms", "formula")
    # Megatron-LM: FLOP count (eq. 3), the calibration (Table 1) and an out-of-sample check (Table 2)
    last = MEGATRON_TABLE1[-1]
    cfg = megatron_config(last)
    published = megatron_eq3_flops(last[7], 2048, last[3], last[2], 51200)
    row("megatron.eq3_1t", "FLOPs of one iteration, 1T model, batch 3072 (eq. 3)", "Narayanan et al. 2021, eq. 3",
        MEGATRON_URL,
        published / 1e21, step_time(cfg)["flops"] / 1e21, "ZFLOP", "formula")
    for table, rows_in, kind in (("Table 1", MEGATRON_TABLE1, "calibration"), ("Table 2", MEGATRON_TABLE2_PTDP,
                                                                              "validation")):
        for r in rows_in:
            row(f"megatron.{'t1' if kind == 'calibration' else 't2'}.{r[6]}gpu",
                f"TFLOP/s per GPU, {r[0]:g}B on {r[6]} A100s (TP {r[4]}, PP {r[5]}, batch {r[7]})",
                f"Narayanan et al. 2021, {table}", MEGATRON_URL, float(r[-1]), achieved_tflops(megatron_config(r)),
                "TFLOP/s", kind)
    for r in rows:
        r["difference"] = (r["model"] - r["published"]) / r["published"]
    return rows


