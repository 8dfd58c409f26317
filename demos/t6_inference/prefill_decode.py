# %% [markdown]
# # Prefill is compute-bound, decode is memory-bound: one model, both ceilings
#
# A forward pass multiplies every weight matrix by as many activation rows as it has tokens. A
# **prefill** of b prompts of P tokens has b x P rows; a **decode step** of b sequences has b rows.
# Each weight is read once per pass whatever the row count, and does 2 FLOPs per row, so the
# arithmetic intensity of the weight matmuls is about rows x 2 / (bytes per weight) FLOPs per
# byte: in fp32 (4 bytes) rows / 2, in bf16 rows. Past the machine's ridge point (its FLOP rate
# over its memory bandwidth) a pass is limited by FLOPs, below it by bytes.
#
# This demo runs one transformer (the architecture of `_model.py`, with random weights: speed does
# not depend on what the weights learned) through prefills of growing prompt length and batch,
# and decode steps of growing batch against a filled KV cache. FLOPs and bytes come from the
# model's shape, not from a profiler (a FLOP counter checks the FLOP formula). Each pass's FLOP
# rate is shown as a fraction of the same run's matmul ceiling and its byte rate as a fraction of
# the same run's copy ceiling: a compute-bound pass is near the first, a memory-bound one near the
# second. Every byte-rate metric says whether its working set fits in the last-level cache; when
# it does, the copy ceiling (which streams from DRAM) is the wrong yardstick, and the page says so.

# %%
import torch

from demos.harness import provenance
from demos.harness.run import start
from demos.t6_inference._model import Config, TinyLM

run = start(
    "prefill_decode",
    title="Prefill vs decode: fraction of the matmul and copy ceilings on one model",
    sizes={  # (model shape, prompt lengths at batch 1, (prefill batches, their prompt length), decode batches, context)
        "tiny": (dict(d_model=128, n_layers=2, n_heads=4, n_kv_heads=2), [8, 32, 128], ([4], 32), [1, 4, 16], 64),
        # width 512, 6 layers: 16.6 M weights, 66 MB in fp32, larger than a 32 MiB last-level cache
        "small": (dict(d_model=512, n_layers=6, n_heads=8, n_kv_heads=2), [16, 64, 256, 512], ([4, 8], 64),
                  [1, 4, 16, 64], 256),
        # four layers shaped like Llama-2-70B's attention (width 8192, 64 query heads, 8 KV heads) with
        # a 4x GELU MLP: 2.75 G weights, 5.5 GB in bf16, far beyond any GPU's L2
        "full": (dict(d_model=8192, n_layers=4, n_heads=64, n_kv_heads=8), [64, 256, 1024, 4096], ([4, 16], 256),
                 [1, 8, 32, 128, 256], 1024),
    },
    cpu_threads=1,
)
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402  (it imports triton, which must follow start())

# %% [markdown]
# On a CPU the passes run on **one thread**, like the other T6 demos (one serving worker per core;
# and a second OpenMP thread makes every op wait for the slower one whenever the machine has other
# work, which once made this demo's passes ten times slower). The harness's ceilings use every
# thread, so next to each fraction of them the demo measures the same two yardsticks on one
# thread, in this run: a copy of 64 MiB (beyond the last-level cache) and the best of a square fp32
# matmul and the model's own FFN GEMMs at its largest prefill.
# The regime of each pass is read against those one-thread yardsticks. On a GPU they are simply
# the harness's ceilings.

# %%
device = run.torch_device
shape, prompt_lens, (prefill_batches, batch_prompt), decode_batches, context = run.sizes
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
dtype_name, matmul_ceiling = ("bfloat16", "matmul_bf16") if run.device.is_gpu else ("float32", "matmul_fp32")
cfg = Config(**shape, max_len=max(max(prompt_lens), batch_prompt, context + 1))
torch.manual_seed(run.options.seed)
with torch.device(device):
    model = TinyLM(cfg)
model = model.to(device=device, dtype=dtype).eval()
elt = torch.finfo(dtype).bits // 8

if not run.device.is_gpu:
    src = torch.randn(2**24)
    dst = torch.empty_like(src)
    copy_timing = run.time(lambda: dst.copy_(src))
    copy_1t = 2 * src.numel() * 4 / copy_timing.median_s / 1e9
    del src, dst
    # The matmul yardstick is the best of a 1024 square and the model's own two FFN GEMMs at its largest
    # prefill: a BLAS runs some shapes faster than others, and a yardstick the passes can beat is no ceiling.
    rows = max(max(prompt_lens), max(prefill_batches) * batch_prompt)
    ffn = cfg.mlp_ratio * cfg.d_model
    matmul_shapes = [(1024, 1024, 1024), (rows, cfg.d_model, ffn), (rows, ffn, cfg.d_model)]
    rates = []  # (TFLOP/s, its Timing) per shape
    for m_, k_, n_ in matmul_shapes:
        a, b = torch.randn(m_, k_), torch.randn(k_, n_)
        timing = run.time(lambda a=a, b=b: a @ b)
        rates.append((2 * m_ * k_ * n_ / timing.median_s / 1e12, timing))
    matmul_1t, matmul_timing = max(rates, key=lambda r: r[0])
    del a, b
    # yardsticks, not kernels under test: no fraction of the all-thread ceilings (on a busy machine
    # a one-thread sample can even beat an all-thread one, which would say nothing)
    run.metric("one_thread.copy_gbps", copy_1t, "GB/s", label="one-thread copy, 64 MiB, bytes read + written",
               kind="memory")
    run.metric("one_thread.matmul_tflops", matmul_1t, "TFLOP/s", label=f"one-thread fp32 matmul: best of a 1024 square and the FFN GEMMs at {rows} rows",
               dtype="float32")
    # The FFN GEMMs are the prefill's own largest products, so the best rate is partly the prefill's own
    # work; the square product alone is the yardstick independent of the model, recorded beside it.
    run.metric("one_thread.square_matmul_tflops", rates[0][0], "TFLOP/s", dtype="float32",
               label="one-thread fp32 matmul, 1024 square (independent of the model's shapes)")
    run.metric("one_thread.ffn_gemm_tflops", max(r[0] for r in rates[1:]), "TFLOP/s", dtype="float32",
               label=f"one-thread fp32 matmul: the faster of the model's two FFN GEMMs at {rows} rows")

# %% [markdown]
# ## FLOPs and bytes from the model's shape
#
# The weight matmuls of one layer hold `D x (heads x hd)` (queries), `D x 2 x kv_heads x hd` (keys
# and values, fewer with grouped-query attention), `(heads x hd) x D` (output) and `2 x 4 x D^2`
# (the MLP); the output head adds `vocab x D` (tied to the embedding, read once). With `rows`
# tokens in a pass, those cost `2 x weights x rows` FLOPs. Attention adds, per sequence and layer,
# `2 x P^2 x heads x hd` FLOPs in a causal prefill of P tokens (two matmuls of `2 x P^2 x hd` per
# head, half of them masked) and `4 x context x heads x hd` in a decode step.
#
# Bytes are the minimum traffic: every weight read once, plus the KV cache written (prefill) or read
# (decode). Activations are left out, so the byte rate is a lower bound on the real traffic.

# %%
hd = cfg.head_dim
layer_weights = (cfg.d_model * cfg.n_heads * hd + cfg.d_model * 2 * cfg.n_kv_heads * hd + cfg.n_heads * hd * cfg.d_model
                 + 2 * cfg.mlp_ratio * cfg.d_model**2)
matmul_weights = cfg.n_layers * layer_weights + cfg.vocab * cfg.d_model
weight_bytes = matmul_weights * elt


def prefill_cost(batch: int, p: int) -> tuple[float, float, float]:
    """(FLOPs, minimum bytes, working-set bytes) of a causal prefill of `batch` prompts of `p` tokens."""
    flops = 2 * matmul_weights * batch * p + batch * cfg.n_layers * 2 * p * p * cfg.n_heads * hd
    kv = cfg.kv_cache_bytes(batch, p, elt)
    activations = 2 * batch * p * cfg.mlp_ratio * cfg.d_model * elt  # the widest activation, in and out
    return flops, weight_bytes + kv, weight_bytes + kv + activations


def decode_cost(batch: int, ctx: int) -> tuple[float, float, float]:
    """(FLOPs, minimum bytes, working-set bytes) of one decode step of `batch` sequences at context `ctx`."""
    flops = 2 * matmul_weights * batch + batch * cfg.n_layers * 4 * ctx * cfg.n_heads * hd
    kv = cfg.kv_cache_bytes(batch, ctx, elt)
    return flops, weight_bytes + kv, weight_bytes + kv


run.metric("model.weights_mib", weight_bytes / 2**20, "MiB", label=f"weights of the weight matmuls ({dtype_name})", origin="computed")
last_cache = run.device.l2_bytes if run.device.is_gpu else provenance.cpu_llc_bytes()
if last_cache:
    run.metric("last_level_cache_mib", last_cache / 2**20, "MiB",
               label="last-level cache of this device (GPU L2; CPU LLC from the OS), against which residency is judged")
run.metric("model.params_m", model.n_params() / 1e6, "M", label="model parameters (millions)", origin="computed")
run.check("weight_count_matches_model", matmul_weights == model.n_params() - cfg.n_layers * 2 * cfg.d_model - cfg.d_model,
          f"{matmul_weights} matmul weights = all {model.n_params()} parameters minus the RMSNorm gains")

# %% [markdown]
# ## The FLOP formula, checked against PyTorch's FLOP counter
#
# `torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of every matmul as it runs. The probe
# forces SDPA's `math` backend, which is plain batched matmuls (`bmm`) that the counter knows on
# every device (it has no formula for the CPU's fused attention kernel). Its count of the weight
# matmuls (`mm`) must equal the formula exactly; the attention matmuls compute the full square
# (the mask is applied after), so the formula's causal figure must be exactly half of them.

# %%
probe_p = prompt_lens[0]
tokens = torch.randint(0, cfg.vocab, (1, probe_p), device=device)
with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
    model(tokens, model.new_cache(1, probe_p))
counted = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
counted_attention = sum(n for op, n in counted.items() if "bmm" in op)
counted_matmul = sum(counted.values()) - counted_attention
formula_attention = cfg.n_layers * 2 * probe_p**2 * cfg.n_heads * hd
run.check("flop_formula_matches_counter",
          counted_matmul == 2 * matmul_weights * probe_p and counted_attention == 2 * formula_attention,
          f"prefill of {probe_p} tokens: weight matmuls {counted_matmul:.4g} counted vs {2 * matmul_weights * probe_p:.4g} "
          f"formula; attention {counted_attention:.4g} counted (full square) vs 2 x {formula_attention:.4g} (causal)")

# %% [markdown]
# ## The sweep
#
# Prefill: batch 1 at each prompt length, then larger batches at one prompt length. Decode: one
# step per batch size with every sequence's cache holding `context` tokens. (The cache contents
# do not change the time, so the cache is marked full without being written.)

# %%
points = []  # one dict per timed pass


def measure_pass(phase: str, batch: int, p: int) -> None:
    tok = torch.randint(0, cfg.vocab, (batch, p if phase == "prefill" else 1), device=device)
    cache = model.new_cache(batch, p if phase == "prefill" else context + 1)

    def step():
        cache.length = 0 if phase == "prefill" else context
        with torch.no_grad():
            return model(tok, cache)

    timing = run.time(step)
    seconds = timing.median_s
    flops, nbytes, working_set = prefill_cost(batch, p) if phase == "prefill" else decode_cost(batch, context)
    del cache
    rows = batch * p if phase == "prefill" else batch
    points.append({"phase": phase, "batch": batch, "p": p, "rows": rows, "ms": seconds * 1e3,
                   "tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9, "intensity": flops / nbytes,
                   "working_set": working_set, "resident": run.cache_resident(working_set), "spread": timing.spread})
    pt = points[-1]
    run.log(f"  {phase:7s} batch {batch:4d} x {p:5d}: {pt['ms']:9.3f} ms, {pt['tflops']:.3g} TFLOP/s, "
            f"{pt['gbps']:.3g} GB/s, {pt['intensity']:.1f} FLOP/byte, working set {working_set / 2**20:.0f} MiB")


for p in prompt_lens:
    measure_pass("prefill", 1, p)
for b in prefill_batches:
    measure_pass("prefill", b, batch_prompt)
for b in decode_batches:
    measure_pass("decode", b, context)

# %% [markdown]
# ## Results
#
# Each pass's FLOP rate and byte rate go into the record, with its dtype or memory kind. On a GPU
# they are stored with the harness ceiling they are compared with (the harness computes those
# fractions against the better of two ceiling measurements, one at the start and one at the end of
# the run). The table, the plot and the fraction metrics read each pass against the yardsticks
# above (on a CPU, one thread's copy and matmul rates). A pass is
# called compute-bound when its fraction of the matmul rate is the larger of its two fractions,
# memory-bound otherwise, unless both are below a quarter: then neither resource is what limits it,
# and it is called overhead-bound (per-op dispatch, small kernels, synchronisation). It is
# cache-resident when its working set fits in the last-level cache (then a copy ceiling that
# streams from DRAM does not bound it).

# %%
for pt in points:
    tag = f"{pt['phase']}.b{pt['batch']}" + (f".p{pt['p']}" if pt["phase"] == "prefill" else "")
    pt["tag"] = tag
    what = (f"prefill of {pt['batch']} x {pt['p']} tokens" if pt["phase"] == "prefill"
            else f"decode step at batch {pt['batch']}, context {context}")
    # On a GPU each rate is stored as a fraction of the harness's ceiling. On a CPU those ceilings use
    # every thread while these passes use one, so the one-thread yardsticks above are the right ones
    # (a one-thread prefill once read 1.28x an all-thread ceiling sampled on a busy machine).
    run.metric(f"{tag}.tflops", pt["tflops"], "TFLOP/s", label=f"{what}: FLOP rate ({dtype_name})",
               ceiling=matmul_ceiling if run.device.is_gpu else None, dtype=dtype_name)
    run.metric(f"{tag}.gbps", pt["gbps"], "GB/s", label=f"{what}: minimum bytes moved per second",
               ceiling="copy_bandwidth" if run.device.is_gpu else None, kind="memory", cache_resident=pt["resident"])
    run.metric(f"{tag}.ms", pt["ms"], "ms", label=f"{what}: time")
    run.metric(f"{tag}.intensity", pt["intensity"], "FLOP/byte", label=f"{what}: FLOPs per minimum byte", origin="computed")

OVERHEAD_BELOW = 0.25
run.finish_ceilings()  # the fractions are needed in the table and the plot, so take the closing ceilings now
if run.device.is_gpu:
    matmul_peak, copy_peak = run.ceilings[matmul_ceiling]["value"], run.ceilings["copy_bandwidth"]["value"]
    matmul_spread = copy_spread = 1.0  # the harness's ceilings are best samples, not medians: no spread to add
    yardstick = "the harness's ceilings"
else:
    matmul_peak, copy_peak = matmul_1t, copy_1t
    matmul_spread, copy_spread = matmul_timing.spread, copy_timing.spread
    yardstick = "one-thread copy and matmul, this run"
ridge = matmul_peak * 1e12 / (copy_peak * 1e9)
run.metric("ridge_flop_per_byte", ridge, "FLOP/byte", label=f"ridge point: matmul rate over copy rate ({yardstick})")
rows = []
for pt in points:
    pt["of_matmul"], pt["of_copy"] = pt["tflops"] / matmul_peak, pt["gbps"] / copy_peak
    if max(pt["of_matmul"], pt["of_copy"]) < OVERHEAD_BELOW:
        bound = "overhead-bound (neither ceiling near)"
    else:
        bound = "compute-bound" if pt["of_matmul"] >= pt["of_copy"] else "memory-bound"
    pt["regime"] = bound + (", cache-resident" if pt["resident"] else ", weights from DRAM/HBM")
    run.metric(f"{pt['tag']}.of_matmul", pt["of_matmul"], "fraction", label=f"{pt['tag']}: fraction of the matmul rate ({yardstick})")
    run.metric(f"{pt['tag']}.of_copy", pt["of_copy"], "fraction", label=f"{pt['tag']}: fraction of the copy rate ({yardstick})")
    rows.append([pt["phase"], pt["batch"], pt["p"] if pt["phase"] == "prefill" else context, pt["rows"],
                 round(pt["ms"], 3), round(pt["intensity"], 1), f"{pt['tflops']:.3g}", round(pt["of_matmul"], 3),
                 f"{pt['gbps']:.3g}", round(pt["of_copy"], 3), round(pt["working_set"] / 2**20, 1), pt["regime"]])
run.table("passes", f"One model ({model.n_params() / 1e6:.1f} M parameters, {dtype_name}), prefill and decode; "
          f"fractions of {yardstick}; ridge point {ridge:.1f} FLOP/byte",
          ["phase", "batch", "prompt / context", "rows per weight", "time (ms)", "FLOP/byte", "TFLOP/s",
           "of matmul rate", "GB/s (min)", "of copy rate", "working set (MiB)", "regime"], rows)

prefill = [pt for pt in points if pt["phase"] == "prefill"]
decode = [pt for pt in points if pt["phase"] == "decode"]

# %% [markdown]
# The headline pair: the longest batch-1 prompt's prefill and the batch-1 decode step, on the same
# weights. Their ratios say how far apart the two phases sit on the roofline.

# %%
longest, one = prefill[len(prompt_lens) - 1], decode[0]


def fraction_line(pts: list[dict], ceiling: str, ceiling_spread: float) -> tuple[list, list, list]:
    """(rows, fraction of the ceiling, spread) per pass: the spread is the larger of the pass's and the yardstick's."""
    return [p["rows"] for p in pts], [p[f"of_{ceiling}"] for p in pts], [max(p["spread"], ceiling_spread) for p in pts]


run.series("ceiling_fractions", f"{longest['p']}-token prefill: {longest['of_matmul']:.0%} of matmul rate; "
           f"batch-1 decode: {one['of_copy']:.0%} of copy rate",
           "rows per weight matrix (prefill: batch x prompt; decode: batch)", "fraction of ceiling",
           {"prefill: of matmul ceiling": fraction_line(prefill, "matmul", matmul_spread),
            "prefill: of copy ceiling": fraction_line(prefill, "copy", copy_spread),
            "decode: of matmul ceiling": fraction_line(decode, "matmul", matmul_spread),
            "decode: of copy ceiling": fraction_line(decode, "copy", copy_spread)},
           x_log=True)
run.metric("prefill_longest.of_matmul", longest["of_matmul"], "fraction",
           label=f"prefill of {longest['p']} tokens: fraction of the matmul rate ({yardstick})")
if not run.device.is_gpu:
    run.metric("prefill_longest.of_square_matmul", longest["tflops"] / rates[0][0], "fraction",
               label=f"prefill of {longest['p']} tokens: fraction of the one-thread 1024-square matmul rate")
run.metric("prefill_longest.of_copy", longest["of_copy"], "fraction",
           label=f"prefill of {longest['p']} tokens: fraction of the copy rate ({yardstick})")
run.metric("decode_b1.of_copy", one["of_copy"], "fraction",
           label=f"decode step at batch 1: minimum bytes per second as a fraction of the copy rate ({yardstick})")
run.metric("decode_b1.of_matmul", one["of_matmul"], "fraction",
           label=f"decode step at batch 1: fraction of the matmul rate ({yardstick})")
run.metric("prefill_over_decode.flop_rate", longest["tflops"] / one["tflops"], "x",
           label=f"FLOP rate of the {longest['p']}-token prefill over the batch-1 decode step's")
run.metric("decode_over_prefill.byte_rate", one["gbps"] / longest["gbps"], "x",
           label=f"byte rate of the batch-1 decode step over the {longest['p']}-token prefill's")
run.metric("decode_bmax.of_matmul", decode[-1]["of_matmul"], "fraction",
           label=f"decode step at batch {decode[-1]['batch']}: fraction of the matmul rate ({yardstick})")
run.metric("decode_b1.weights_exceed_llc", float(not one["resident"]), "bool",
           label="1 if the batch-1 decode step's working set exceeds the last-level cache (it streams from memory)")
run.artifact("regimes", "\n".join(f"{pt['tag']}: {pt['regime']} (working set {pt['working_set'] / 2**20:.1f} MiB)"
                                  for pt in points))
run.save()
