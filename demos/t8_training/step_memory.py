# %% [markdown]
# # Where the memory of a training step goes: parameters, gradients, optimizer states, activations
#
# One training step of a GPT-style model with AdamW keeps four kinds of tensors:
#
# - **weights** and **gradients** (one number per parameter each);
# - **optimizer states**: AdamW's momentum and variance, fp32, plus fp32 *master* weights when the
#   model itself runs in 16 bits. The ZeRO paper (Rajbhandari et al., [ZeRO: Memory Optimizations
#   Toward Training Trillion Parameter Models](https://arxiv.org/abs/1910.02054), section 3.1) counts
#   2 + 2 + 12 = 16 bytes per parameter for mixed-precision Adam;
# - **activations**: what the forward pass saves for the backward pass, per layer
#   s b h (34 + 5 a s / h) bytes in 16 bits (Korthikanti et al., [Reducing Activation Recomputation in
#   Large Transformer Models](https://arxiv.org/abs/2205.05198), section 4.1; s sequence, b batch,
#   h width, a heads).
#
# The demo measures each part separately for three set-ups: everything in FP32; `torch.autocast`
# to BF16 on an FP32 model (the fp32 parameters *are* the master weights); and a BF16 model with
# separate fp32 master weights in the optimizer (the layout the ZeRO paper counts). Activations are
# counted tensor by tensor with saved-tensor hooks (every storage autograd keeps, once), so the
# formula can be checked exactly; the peak of the whole step comes from the allocator (the
# profiler's memory events on a CPU, `torch.cuda.max_memory_allocated` on a GPU). Then the same
# formula functions project a 7B and a 70B model.

# %%
import gc

import torch

from demos.common import cluster_model as cm
from demos.harness.run import start
from demos.common.memory import peak_bytes
from demos.t8_training._gpt import (
    GPTConfig,
    SavedTensors,
    activation_bytes_per_layer,
    batch,
    dropout_mask_bytes,
    make_gpt,
    model_state_bytes_per_param,
    parameter_count,
    tensor_bytes,
)

run = start("step_memory", title="Memory of a training step: weights, gradients, Adam states, activations",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=32, width=48, heads=2, layers=2), "b": 2, "seqs": [16, 32]},
                   "small": {"cfg": GPTConfig(vocab=1000, seq=128, width=256, heads=4, layers=4), "b": 3,
                             "seqs": [32, 64, 128]},
                   "full": {"cfg": GPTConfig(vocab=32000, seq=1024, width=1024, heads=16, layers=8), "b": 5,
                            "seqs": [256, 512, 1024]}},
            cpu_threads=1)
cfg, B = run.sizes["cfg"], run.sizes["b"]
dev = run.torch_device
MB = 2**20

# %% [markdown]
# ## One step, three precisions
#
# `mixed` keeps a BF16 model and an fp32 master copy of every parameter in the optimizer. Its
# optimizer step converts one gradient at a time to fp32, updates that master weight with AdamW and
# copies it back to the BF16 weight, so the fp32 gradient copy never exists for all parameters at once.

# %%
def param_shapes(model):
    return {tuple(sorted(p.shape)) for p in model.parameters() if p.dim() == 2}


def one_step(kind: str, seq: int):
    c = GPTConfig(**{**cfg.__dict__, "seq": seq})
    model = make_gpt(c, seed=0, device=dev, dtype=torch.bfloat16 if kind == "mixed" else torch.float32).train()
    params = list(model.parameters())
    if kind == "mixed":
        master = [p.detach().float().requires_grad_() for p in params]
        opt = torch.optim.AdamW(master, lr=1e-3, foreach=False)
    else:
        opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    tokens, targets = batch(c, B, step=0, device=dev)
    assert B * seq not in {x for s in param_shapes(model) for x in s}, "a token count equal to a weight dimension"
    out = {"weights": tensor_bytes(params)}
    saved = SavedTensors(model)

    def step():
        with saved.recording(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=(kind == "amp_bf16")):
            loss = model(tokens, targets)
        loss.backward()
        out["grads"] = tensor_bytes(p.grad for p in params)
        if kind == "mixed":
            for p16, p32 in zip(params, master):
                p32.grad = p16.grad.float()
                opt.step()
                p32.grad = None
                p16.data.copy_(p32.data)
        else:
            opt.step()

    out["peak"] = peak_bytes(step, dev)
    states = [t for s in opt.state.values() for t in s.values()]
    out["optimizer"] = tensor_bytes(states) + (tensor_bytes(master) if kind == "mixed" else 0)
    out["adam_step_counters"] = tensor_bytes(s["step"] for s in opt.state.values())
    out["weight_copies"] = saved.bytes("weight_copy")
    out["layer_acts"] = saved.per_layer()
    out["other_acts"] = saved.bytes("embedding") + saved.bytes("head")
    out["params"] = sum(p.numel() for p in params)
    return out


results = {kind: one_step(kind, cfg.seq) for kind in ("fp32", "amp_bf16", "mixed")}
P = results["fp32"]["params"]
run.check("parameter_count", P == parameter_count(cfg), f"{P} parameters counted, 12Lh^2 + 13Lh + Vh + sh + 2h = "
          f"{parameter_count(cfg)}")

# %% [markdown]
# ## Model states against bytes per parameter
#
# AdamW also keeps one `step` counter per parameter tensor (a 4-byte scalar each); it is counted in the
# optimizer's bytes and is why "per parameter" is not exactly 8 or 12.

# %%
for kind, formula_kind in (("fp32", "fp32"), ("amp_bf16", "fp32"), ("mixed", "mixed")):
    r, expect = results[kind], model_state_bytes_per_param(formula_kind)
    for part in ("weights", "grads", "optimizer"):
        measured = (r[part] - (r["adam_step_counters"] if part == "optimizer" else 0)) / P
        run.check(f"{kind}.{part}_bytes_per_param", abs(measured - expect[part]) < 1e-9,
                  f"{measured:.4f} B/param measured (step counters aside) vs {expect[part]} by the formula")
        run.metric(f"{kind}.{part}_mb", r[part] / MB, "MiB")
    states = (r["weights"] + r["grads"] + r["optimizer"]) / P
    run.metric(f"{kind}.state_bytes_per_param", states, "B/param", label="weights + grads + optimizer, measured")

# %% [markdown]
# ## Activations against the formula, layer by layer
#
# FP32 keeps 4-byte activations, the BF16 model 2-byte ones. Dropout masks are one byte in the paper and
# in CUDA's fused dropout (a boolean mask); PyTorch's CPU dropout keeps its mask in the input's dtype,
# so the demo asks the device which it is (`dropout_mask_bytes`) and puts that into the formula.
# What the formula leaves out is small and named: each LayerNorm also keeps a mean and a reciprocal
# standard deviation per token, and each layer's causal mask (s^2 booleans) is saved by `masked_fill`.
# Under autocast the picture differs: the parameters stay fp32, so the residual stream (embedding plus
# the residual adds) stays fp32 and each LayerNorm keeps its fp32 input, while every matmul keeps BF16
# casts of its inputs; the BF16 copies of the weights are saved for backward too (counted apart, as
# "bf16 weight copies"). Which ops autocast runs in fp32 differs by device (the PyTorch autocast docs
# list them per device: on CUDA softmax is one of them, on a CPU it is not).

# %%
s, h, a = cfg.seq, cfg.width, cfg.heads
MASK = {kind: dropout_mask_bytes(torch.bfloat16 if kind == "mixed" else torch.float32, dev) for kind in results}
run.metric("dropout_mask_bytes.fp32", MASK["fp32"], "B", label="per element, this device")
run.metric("dropout_mask_bytes.bf16", MASK["mixed"], "B", label="per element, this device")
for kind, act_bytes in (("fp32", 4), ("mixed", 2), ("amp_bf16", None)):
    r = results[kind]
    per_layer = r["layer_acts"]
    run.metric(f"{kind}.act_per_layer_mb", per_layer[0] / MB, "MiB")
    run.metric(f"{kind}.act_total_mb", (sum(per_layer) + r["other_acts"]) / MB, "MiB",
               label="all saved tensors: layers + embedding + logits")
    run.metric(f"{kind}.weight_copies_mb", r["weight_copies"] / MB, "MiB", label="autocast's saved bf16 weight copies")
    run.metric(f"{kind}.peak_mb", r["peak"] / MB, "MiB", label="peak allocated during the step, above the weights")
    run.check(f"{kind}.layers_equal", max(per_layer) == min(per_layer), f"per-layer bytes {per_layer}")
    formula = activation_bytes_per_layer(s, B, h, a, act_bytes or 2, MASK[kind] if act_bytes else 1)
    run.metric(f"{kind}.act_vs_formula", per_layer[0] / formula, "x",
               label=f"measured / formula ({act_bytes or 2}-byte activations, {MASK[kind] if act_bytes else 1}-byte masks)")
    if act_bytes:
        ratio = per_layer[0] / formula
        run.check(f"{kind}.activations_match_formula", 1.0 <= ratio < 1.03,
                  f"{per_layer[0]} B measured vs {formula:.0f} B by the formula: x{ratio:.4f} (LayerNorm statistics "
                  f"and the causal mask are the only extras)")
run.check("amp_bf16.keeps_more_than_bf16", results["amp_bf16"]["layer_acts"][0] > results["mixed"]["layer_acts"][0],
          "autocast keeps the fp32 residual stream (LayerNorm inputs) beside bf16 matmul inputs")
run.metric("amp_bf16.act_over_mixed", results["amp_bf16"]["layer_acts"][0] / results["mixed"]["layer_acts"][0], "x")

run.table("breakdown", f"One AdamW step, {P / 1e6:.2f} M parameters, batch {B} x {s} tokens (MiB)",
          ["variant", "weights", "gradients", "optimizer (+master)", "activations (layers)", "activations (other)",
           "bf16 weight copies", "state B/param", "peak above weights"],
          [[k, r["weights"] / MB, r["grads"] / MB, r["optimizer"] / MB, sum(r["layer_acts"]) / MB,
            r["other_acts"] / MB, r["weight_copies"] / MB, (r["weights"] + r["grads"] + r["optimizer"]) / P,
            r["peak"] / MB] for k, r in results.items()])

# %% [markdown]
# ## Stacked by sequence length
#
# Model states do not depend on the batch; activations grow with tokens, and the attention part
# with the square of the sequence length. The lines are cumulative (each adds one part), so the gap
# between two lines is that part's size.

# %%
seqs = run.sizes["seqs"]
sweep = {n: results["mixed"] if n == cfg.seq else one_step("mixed", n) for n in seqs}
cum = {"weights": [], "+ gradients": [], "+ optimizer states": [], "+ activations": []}
for n in seqs:
    r = sweep[n]
    parts = [r["weights"], r["grads"], r["optimizer"], sum(r["layer_acts"]) + r["other_acts"]]
    for key, value in zip(cum, [sum(parts[: i + 1]) for i in range(4)]):
        cum[key].append(value / MB)
    formula = activation_bytes_per_layer(n, B, h, a, 2, MASK["mixed"])
    run.check(f"mixed.s{n}.activations_match_formula", 1.0 <= r["layer_acts"][0] / formula < 1.03,
              f"x{r['layer_acts'][0] / formula:.4f} of the formula at s = {n}")
states_share = cum["+ optimizer states"][-1] / cum["+ activations"][-1]  # at the longest sequence
run.series("stacked", f"BF16 + fp32 master AdamW at s = {seqs[-1]}: model states {states_share:.0%}, "
           f"activations {1 - states_share:.0%}", "sequence length (tokens)",
           "MiB", {k: (seqs, v) for k, v in cum.items()})

# %% [markdown]
# ## Projection: 7B and 70B (Llama-2 shapes)
#
# Parameter counts from the Llama-2 architecture (Touvron et al., [Llama 2](https://arxiv.org/abs/2307.09288):
# 4096-token context, grouped-query attention with 8 KV heads at 70B; widths from the released configs:
# 7B h = 4096, 32 layers, SwiGLU width 11008; 70B h = 8192, 80 layers, SwiGLU width 28672; vocabulary
# 32000, untied embeddings). Model states use the 16 B/param checked above; activations use the
# activation formula checked above for a GPT layer of the same width, heads and sequence (SwiGLU's
# wider MLP and GQA's smaller K/V change the 34 a little; there is no dropout in Llama, which removes
# the masks: both stated, not modelled), one 4096-token sequence, BF16.

# %%
LLAMA2 = {"7B": {"h": 4096, "layers": 32, "heads": 32, "kv_heads": 32, "ffn": 11008},
          "70B": {"h": 8192, "layers": 80, "heads": 64, "kv_heads": 8, "ffn": 28672}}


def llama2_params(h, layers, heads, kv_heads, ffn, vocab=32000):
    head_dim = h // heads
    attention = 2 * h * h + 2 * h * kv_heads * head_dim
    return layers * (attention + 3 * h * ffn + 2 * h) + 2 * vocab * h + h


GB = 1e9
rows = []
for name, shape in LLAMA2.items():
    n = llama2_params(**shape)
    states = sum(model_state_bytes_per_param("mixed").values()) * n
    per_layer = activation_bytes_per_layer(4096, 1, shape["h"], shape["heads"], 2)
    no_scores = activation_bytes_per_layer(4096, 1, shape["h"], 0, 2)  # a = 0: FlashAttention keeps no s^2 tensors
    full_recompute = 2 * 4096 * shape["h"] * shape["layers"]  # only each layer's 16-bit input
    cfg64 = cm.Config(**cm.MODELS[name], dp=64, zero_stage=3, recompute="selective", seq_len=4096, microbatches=1)
    sharded = cm.memory_per_gpu(cfg64)
    run.metric(f"llama2_{name}.params_b", n / 1e9, "B params", origin="computed")
    run.metric(f"llama2_{name}.states_gb", states / GB, "GB", label="16 B/param, one copy", origin="computed")
    run.metric(f"llama2_{name}.act_gb", per_layer * shape["layers"] / GB, "GB", label="per 4k sequence, no recompute", origin="computed")
    run.metric(f"llama2_{name}.act_flash_gb", no_scores * shape["layers"] / GB, "GB",
               label="per 4k sequence, no s^2 tensors (fused attention)", origin="computed")
    run.metric(f"llama2_{name}.act_full_recompute_gb", full_recompute / GB, "GB", label="layer inputs only", origin="computed")
    run.metric(f"llama2_{name}.zero3_64_states_gb", states / 64 / GB, "GB", label="model states per GPU, ZeRO-3 on 64", origin="computed")
    run.metric(f"llama2_{name}.cluster_model_zero3_64_gb", sharded["total_bytes"] / GB, "GB",
               label="cluster model: states + selective-recompute activations per GPU, ZeRO-3, 64 GPUs", origin="computed")
    rows.append([name, n / 1e9, states / GB, per_layer * shape["layers"] / GB, no_scores * shape["layers"] / GB,
                 full_recompute / GB, states / 64 / GB])
run.table("projection", "Llama-2 shapes, mixed-precision AdamW, one 4096-token sequence (GB = 1e9 bytes)",
          ["model", "params (B)", "model states", "activations", "activations, fused attention",
           "activations, full recompute", "states per GPU, ZeRO-3 x64"], rows)
# %% [markdown]
# ## FSDP on 64 GPUs: the cluster model's view of one step
#
# The project's cost model (`demos/common/cluster_model.py`: alpha-beta collectives, H100 SXM and
# NDR InfiniBand link figures from their datasheets, a compute efficiency calibrated on Megatron-LM's
# published runs; its assumptions are printed in its own record) for Llama-2-70B (the same shape as
# the projection above) on 8 nodes of 8 GPUs, 4096-token sequences, a global batch of 512
# sequences (2M tokens). Layouts: FSDP (ZeRO-3) over all 64 with selective or full recomputation;
# TP 8 inside each node (sequence parallel) with ZeRO-1 or ZeRO-3 over the 8 nodes. "exposed": no
# overlap of data-parallel traffic; "overlap": hidden behind backward where the model allows it.

# %%
LAYOUTS = {"fsdp64_selective": {"tp": 1, "dp": 64, "microbatches": 8, "zero_stage": 3, "recompute": "selective"},
           "fsdp64_full": {"tp": 1, "dp": 64, "microbatches": 8, "zero_stage": 3, "recompute": "full"},
           "tp8_zero1_dp8": {"tp": 8, "dp": 8, "microbatches": 64, "zero_stage": 1, "recompute": "selective"},
           "tp8_zero3_dp8": {"tp": 8, "dp": 8, "microbatches": 64, "zero_stage": 3, "recompute": "selective"}}
design_rows = []
for name, layout in LAYOUTS.items():
    c = cm.Config(**cm.MODELS["70B"], seq_len=4096, **layout)
    mem, comm = cm.memory_per_gpu(c), cm.comm_volume(c)
    exposed, hidden = cm.step_time(c), cm.step_time(cm.Config(**{**c.__dict__, "overlap_dp": True}))
    values = {"memory_gb": mem["total_bytes"] / GB, "states_gb": mem["model_states_bytes"] / GB,
              "activations_gb": mem["activations_bytes"] / GB, "dp_gb_sent": comm["dp_bytes"] / GB,
              "tp_gb_sent": comm["tp_bytes"] / GB, "compute_s": exposed["compute_s"], "dp_comm_s": exposed["dp_comm_s"],
              "tp_comm_s": exposed["tp_comm_s"], "step_exposed_s": exposed["total_s"], "step_overlap_s": hidden["total_s"],
              "mfu_exposed": exposed["mfu"], "mfu_overlap": hidden["mfu"]}
    for key, v in values.items():
        run.metric(f"design.{name}.{key}", v, "GB" if key.endswith(("gb", "gb_sent")) else
                   ("fraction" if key.startswith("mfu") else "s"), origin="computed")
    run.metric(f"design.{name}.fits", float(mem["fits"]), "bool", label="fits in 80 GB", origin="computed")
    design_rows.append([name, values["memory_gb"], "yes" if mem["fits"] else "no", values["dp_gb_sent"],
                        values["tp_gb_sent"], values["compute_s"], values["dp_comm_s"], values["tp_comm_s"],
                        values["step_exposed_s"], values["step_overlap_s"], values["mfu_overlap"]])
run.metric("design.compute_efficiency", cm.efficiency(cm.MODELS["70B"]), "fraction",
           label="the cluster model's compute efficiency at hidden 8192, calibrated on Megatron-LM Table 1", origin="computed")
run.table("design", "Llama-2-70B on 64 H100s (cluster model, per GPU, one step of 2M tokens)",
          ["layout", "memory GB", "fits 80 GB", "DP GB sent", "TP GB sent", "compute s", "DP comm s", "TP comm s",
           "step s (no overlap)", "step s (overlap)", "MFU (overlap)"], design_rows)
# %% [markdown]
# ## On a GPU: the caching allocator's own record (memory snapshot)
#
# `torch.cuda.memory._record_memory_history` makes the CUDA caching allocator log every allocation and
# free with the Python stack that asked for it; `torch.cuda.memory._snapshot()` returns that log and
# the allocator's segments (what it reserved from the driver). The same pickle opens in PyTorch's
# memory viewer (pytorch.org/memory_viz). Here the log of one mixed-precision step is replayed to a
# live-bytes curve, whose peak must agree with `torch.cuda.max_memory_allocated` (the measurement
# above), and the allocations are grouped by the line of this project's code that made them. On a
# CPU there is no such allocator log: the accounting above (storages, profiler memory events) is the
# CPU's view, and the snapshot is recorded as not run.

# %%
def snapshot_summary(snapshot, top=8):
    """Replay the first device's log: live bytes at the step's first allocation (the baseline that
    max_memory_allocated's peak is measured above), the peak, the allocation count, and the bytes
    allocated per source line (the innermost frame inside demos/)."""
    events = [e for e in snapshot["device_traces"][0] if e["action"] in ("alloc", "free_completed")]
    live = peak = 0
    baseline, sites = None, {}
    for e in events:
        frames = e.get("frames", [])
        if baseline is None and e["action"] == "alloc" and any(
                f["name"] == "step" and f["filename"].endswith("step_memory.py") for f in frames):
            baseline, peak = live, live  # one_step's inner step() starts: the model and batch exist
        live += e["size"] if e["action"] == "alloc" else -e["size"]
        peak = max(peak, live)
        if e["action"] == "alloc" and baseline is not None:
            frame = next((f for f in frames if "demos/" in f["filename"]), None)
            site = (f"{frame['filename'].split('demos/')[-1]}:{frame['line']} {frame['name']}" if frame
                    else "(no demo frame)")
            count, total = sites.get(site, (0, 0))
            sites[site] = (count + 1, total + e["size"])
    reserved = sum(seg["total_size"] for seg in snapshot["segments"])
    ranked = sorted(sites.items(), key=lambda kv: -kv[1][1])[:top]
    return {"peak": peak - (baseline or 0), "found_step": baseline is not None,
            "allocs": sum(c for c, _ in sites.values()), "reserved": reserved, "sites": ranked}


if dev.type == "cuda" and hasattr(torch.cuda.memory, "_record_memory_history"):
    # Collect leftover garbage first: a block allocated before the log started and freed during the step
    # would appear in the log as a free with no allocation, and pull the replayed curve below the real one.
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    try:
        traced = one_step("mixed", cfg.seq)
        snap = snapshot_summary(torch.cuda.memory._snapshot())
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    run.metric("snapshot.peak_live_mb", snap["peak"] / MB, "MiB",
               label="peak live bytes above the step's start, replayed from the allocator log")
    run.metric("snapshot.reserved_mb", snap["reserved"] / MB, "MiB", label="segments the caching allocator holds")
    run.metric("snapshot.allocations", snap["allocs"], "allocations", label="allocations logged during one step")
    run.check("snapshot.peak_matches_allocator", snap["found_step"] and
              abs(snap["peak"] - traced["peak"]) <= 0.02 * traced["peak"] + MB,
              f"replayed peak above the step's start {snap['peak'] / MB:.2f} MiB vs max_memory_allocated "
              f"{traced['peak'] / MB:.2f} MiB (step found in the log: {snap['found_step']})")
    run.table("snapshot_sites", "Where one mixed-precision step allocates (CUDA allocator log, by source line)",
              ["source line", "allocations", "MiB allocated"],
              [[site, count, total / MB] for site, (count, total) in snap["sites"]])
else:
    run.not_run("memory_snapshot", "torch.cuda.memory._record_memory_history logs the CUDA caching allocator, and this "
                "device has none; the CPU view is the storage accounting and the profiler's memory events above")

run.artifact("cluster_model_assumptions", cm.assumptions_text())
run.check("llama2_7B.params", abs(llama2_params(**LLAMA2["7B"]) - 6.738e9) < 1e6,
          "6.738 B, the count the released 7B checkpoint has")
for name, shape in LLAMA2.items():  # the cluster model's presets are the same shapes (it leaves out norm weights)
    norms = shape["layers"] * 2 * shape["h"] + shape["h"]
    run.check(f"llama2_{name}.cluster_model_params",
              cm.config_params(cm.MODELS[name]) == llama2_params(**shape) - norms,
              f"cluster_model preset {cm.MODEL_NAMES[name]}: {cm.config_params(cm.MODELS[name]):,.0f} parameters + "
              f"{norms:,} norm weights")
run.save()
