# %% [markdown]
# # Transformer shapes: Q, K, V, MLP widths, parameter and FLOP counts, and broadcasting
#
# Two decoder blocks written here in plain PyTorch: a GPT-2-small block (LayerNorm, biases, 12 heads,
# a 4d GELU MLP) and a Llama-style block (RMSNorm, no biases, grouped-query attention with 32 query and
# 8 KV heads, a SwiGLU MLP of width 11008). Every count is checked against PyTorch itself: the modules'
# parameters against the formulas, `torch.utils.flop_counter.FlopCounterMode` against 2 x (matmul
# parameters) x tokens + the attention matmuls. Full-size models are built on the `meta` device (shapes,
# no memory), so a 6.7B-parameter model costs nothing to count; scaled-down real blocks run the numbers.
# Nothing is timed: counts and shapes are the same on every machine.

# %%
import math
from dataclasses import replace

import torch

from demos.harness.run import start

run = start(
    "transformer_shapes",
    title="Transformer shapes: parameters and FLOPs by formula vs PyTorch, GQA, broadcasting bugs",
    sizes={  # real (non-meta) blocks: GPT-2-like width and heads; Llama-like width, heads, KV heads; batch, sequence;
        # the sequence lengths of the FLOP sweep (counted on the meta device, at full model size)
        "tiny": {"gpt_real": (128, 2), "llama_real": (512, 8, 2), "batch": 2, "seq": 8,
                 "sweep": [512, 2048, 8192, 32768]},
        "small": {"gpt_real": (768, 12), "llama_real": (1024, 8, 2), "batch": 2, "seq": 16,
                  "sweep": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]},
        "full": {"gpt_real": (768, 12), "llama_real": (4096, 32, 8), "batch": 4, "seq": 128,
                 "sweep": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]},
    },
)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402  (it may import triton, which must follow start())

S = run.sizes
DEV = run.torch_device
gen = torch.Generator().manual_seed(run.options.seed)

# %% [markdown]
# ## 1. The two blocks
#
# Per head, Q is (batch, heads, seq, d_head) and K and V are (batch, kv_heads, seq, d_head); the scores
# Q K^T are (batch, heads, seq, seq), scaled by 1/sqrt(d_head) so their spread does not grow with the head
# width ("Attention Is All You Need", https://arxiv.org/abs/1706.03762). With grouped-query attention
# ("GQA", https://arxiv.org/abs/2305.13245) each KV head serves heads / kv_heads query heads:
# `repeat_interleave` expands K and V so query head h reads KV head h // group. The mask is applied after
# the full square of scores is computed, as a plain (non-flash) kernel does. The blocks are written in
# demos/t12_design/_blocks.py (Attention, MLP, Block, Model), each a few lines of plain PyTorch.

# %%
from demos.t12_design._blocks import GPT2, LLAMA2_7B, LLAMA_GQA, Block, Model, n_params, swiglu_width  # noqa: E402

# %% [markdown]
# ## 2. Parameters: the formulas, checked against the modules
#
# Per block: attention d x (heads + 2 kv_heads) x d_head + heads x d_head x d; the MLP 2 d ff (GELU) or
# 3 d ff (SwiGLU); biases and norm gains are the small change. GPT-2 small: 12 d^2 + 13 d per block, and
# with its vocabulary, 1024 learned positions and an output matrix tied to the embedding, about 124M.
# Llama-2-7B: 32 blocks of 4 d^2 + 3 d ff + 2 d and an untied output matrix, about 6.7B.

# %%
def matmul_params(c):  # the weights that multiply activations: 2 FLOPs each per token
    hd = c.d // c.heads
    return c.d * (c.heads + 2 * c.kv_heads) * hd + c.heads * hd * c.d + (3 if c.llama else 2) * c.d * c.ff


def block_params(c):
    hd = c.d // c.heads
    biases = 0 if c.llama else (c.heads + 2 * c.kv_heads) * hd + c.d + c.ff + c.d
    norms = 2 * c.d if c.llama else 4 * c.d  # RMSNorm: a gain; LayerNorm: a gain and a bias
    return matmul_params(c) + biases + norms


def model_params(c):
    head = 0 if c.tied else c.vocab * c.d
    return c.vocab * c.d + c.positions * c.d + c.layers * block_params(c) + (1 if c.llama else 2) * c.d + head


run.check("swiglu_width", swiglu_width(4096) == 11008, f"8 x 4096 / 3 rounded up to 256: {swiglu_width(4096)}")
run.check("gpt2_block_is_12d2_13d", block_params(GPT2) == 12 * 768**2 + 13 * 768, f"{block_params(GPT2):,}")
param_rows = []
with torch.device("meta"):
    for name, c in (("GPT-2 small block", GPT2), ("Llama GQA block (32 q / 8 kv heads)", LLAMA_GQA),
                    ("Llama-2-7B block (MHA)", LLAMA2_7B)):
        got = n_params(Block(c))
        run.check(f"params.block.{name.split()[0].lower()}.{c.kv_heads}kv", got == block_params(c),
                  f"{name}: module {got:,} vs formula {block_params(c):,}")
        param_rows.append([name, f"{block_params(c):,}", f"{got:,}", f"{matmul_params(c):,}"])
    for key, name, c in (("gpt2", "GPT-2 small (tied embeddings)", GPT2), ("llama2_7b", "Llama-2-7B", LLAMA2_7B)):
        got = n_params(Model(c))
        want, weights = model_params(c), c.layers * matmul_params(c) + c.vocab * c.d
        run.check(f"params.model.{key}", got == want, f"{name}: module {got:,} vs formula {want:,}")
        param_rows.append([name, f"{want:,}", f"{got:,}", f"{weights:,}"])
        run.metric(f"params.{key}", got / 1e6, "M", origin="computed", label=f"{name}: parameters (module = formula)")
run.metric("params.gpt2_block", block_params(GPT2) / 1e6, "M", origin="computed",
           label="GPT-2 small: parameters per block, 12 d^2 + 13 d at d = 768")
run.metric("params.llama_gqa_block", block_params(LLAMA_GQA) / 1e6, "M", origin="computed",
           label="Llama-style GQA block (d 4096, 32/8 heads, SwiGLU 11008): parameters")
run.metric("params.swiglu_over_gelu_mlp", 3 * 11008 / (2 * 4 * 4096), "x", origin="computed",
           label="SwiGLU MLP (3 d x 11008) over a 4d GELU MLP (8 d^2) at d = 4096")

# %% [markdown]
# ## 3. The shape trace, at full size on the meta device (batch 2, sequence 8)

# %%
trace_text = []
with torch.device("meta"):
    for name, c in (("GPT-2 small block", GPT2), ("Llama GQA block", LLAMA_GQA)):
        trace = {}
        Block(c)(torch.randn(2, 8, c.d), trace)
        trace_text.append(f"{name}: d={c.d}, heads={c.heads}, kv_heads={c.kv_heads}, d_head={c.d // c.heads}, "
                          f"ff={c.ff}")
        trace_text += [f"  {k:<26} {tuple(t.shape)}" for k, t in trace.items()]
run.artifact("shape_trace", "\n".join(trace_text))
run.log("\n".join(trace_text))

# %% [markdown]
# ## 4. FLOPs: the formula, checked against PyTorch's counter
#
# Forward FLOPs = 2 x (matmul parameters) x tokens + 2 x 2 x seq^2 x d per sequence per layer (Q K^T and
# softmax @ V, over the full square: a plain kernel computes the masked half too; a causal flash kernel
# skips whole tiles above the diagonal and does about half). Biases, norms, softmax and GELU are not
# matmuls and the counter leaves them out, as the formula does. Backward does each matmul twice (one
# product for the input's gradient, one for the weight's), so training is 3x forward: 6 N per token.

# %%
def count(fn):
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_flop_counts()


def block_flops(c, b, s):
    return 2 * matmul_params(c) * b * s + 4 * b * s * s * c.d


def real_block(c):
    blk = Block(c)
    with torch.no_grad():
        for p in blk.parameters():
            scale = p.shape[-1] ** -0.5 if p.dim() == 2 else 0.1  # 1-D: norm gains and biases, near 1
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (p.dim() == 1))
    return blk.to(DEV)


gd, gh = S["gpt_real"]
ld, lh, lkv = S["llama_real"]
REAL = {"gpt2": replace(GPT2, d=gd, heads=gh, kv_heads=gh, ff=4 * gd),
        "llama": replace(LLAMA_GQA, d=ld, heads=lh, kv_heads=lkv, ff=round(ld * 11008 / 4096))}
B, T = S["batch"], S["seq"]
flop_rows = []
for key, c in REAL.items():
    blk = real_block(c)
    x = torch.randn(B, T, c.d, generator=gen).to(DEV)
    with torch.no_grad():
        fwd = count(lambda: blk(x))["Global"]
    run.check(f"flops.{key}.real_forward", sum(fwd.values()) == block_flops(c, B, T),
              f"d={c.d}, batch {B} x seq {T}: counter {sum(fwd.values()):,} vs formula {block_flops(c, B, T):,}")
    xg = x.clone().requires_grad_(True)
    both = count(lambda: blk(xg).sum().backward())["Global"]
    run.check(f"flops.{key}.training_is_3x_forward", sum(both.values()) == 3 * block_flops(c, B, T),
              f"forward + backward {sum(both.values()):,} = 3 x forward")
    flop_rows.append([f"{key} real (d={c.d})", f"{B} x {T}", f"{sum(fwd.values()):,}", f"{block_flops(c, B, T):,}",
                      f"{sum(both.values()):,}"])

with torch.device("meta"):
    full_blocks = {"gpt2": Block(GPT2), "llama": Block(LLAMA_GQA)}
    for key, c in (("gpt2", GPT2), ("llama", LLAMA_GQA)):  # full size, counted on meta
        for s in (1024, 4096):
            got = sum(count(lambda: full_blocks[key](torch.randn(1, s, c.d)))["Global"].values())
            run.check(f"flops.{key}.meta_s{s}", got == block_flops(c, 1, s), f"full block, seq {s}: {got:,}")
            flop_rows.append([f"{key} full block (meta)", f"1 x {s}", f"{got:,}", f"{block_flops(c, 1, s):,}", ""])
    for key, c, s in (("gpt2", GPT2, 1024), ("llama2_7b", LLAMA2_7B, 4096)):  # whole model, one sequence
        model = Model(c)
        got = sum(count(lambda: model(torch.zeros(1, s, dtype=torch.long)))["Global"].values())
        want = 2 * (c.layers * matmul_params(c) + c.vocab * c.d) * s + c.layers * 4 * s * s * c.d
        run.check(f"flops.model.{key}", got == want, f"whole model, seq {s}: counter {got:,} vs formula {want:,}")
        run.metric(f"flops.{key}.per_token_s{s}", got / s / 1e9, "GFLOP", origin="computed",
                   label=f"{key}: forward FLOPs per token at seq {s} (counter = formula, full attention square)")
        run.metric(f"flops.{key}.two_n_share_s{s}", 2 * (c.layers * matmul_params(c) + c.vocab * c.d) * s / got,
                   "fraction", origin="computed", label=f"{key}, seq {s}: share of forward FLOPs that 2N covers")
        flop_rows.append([f"{key} whole model (meta)", f"1 x {s}", f"{got:,}", f"{want:,}", ""])

# %% [markdown]
# ## 5. Where attention's FLOPs overtake the MLP's
#
# Per token and layer the MLP costs 2 x (its parameters), fixed; Q K^T and softmax @ V cost 4 x seq x d,
# growing with the context. They cross at seq S* = MLP parameters / 2d: 4d = 3072 for GPT-2, 1.5 ff = 16512
# for the Llama block (twice that if only the causal half is counted). SwiGLU's 1.5 ff is about 4d again
# (its three matrices hold about 8 d^2, as GELU's two do), so both cross near 4d. The counter measures both,
# per module, over powers of two and at S* - 1, S* and S* + 1: equal at S* itself, not just bracketed.

# %%
lines, crossing = {}, {}
with torch.device("meta"):
    for key, c in (("gpt2", GPT2), ("llama", LLAMA_GQA)):
        crossing[key] = star = (3 if c.llama else 2) * c.d * c.ff // (2 * c.d)
        sweep = sorted({*S["sweep"], star - 1, star, star + 1})
        mlp, attn = {}, {}  # seq -> counted forward FLOPs of the MLP and of the attention matmuls
        for s in sweep:
            counts = count(lambda: full_blocks[key](torch.randn(1, s, c.d)))
            mlp[s] = sum(counts["Block.mlp"].values())
            attn[s] = sum(n for op, n in counts["Global"].items() if "bmm" in str(op))
        below, above = [s for s in sweep if s < star], [s for s in sweep if s > star]
        run.check(f"crossover.{key}", attn[star] == mlp[star] and all(attn[s] < mlp[s] for s in below)
                  and all(attn[s] > mlp[s] for s in above),
                  f"FlopCounterMode, attention matmuls vs MLP: equal at seq {star} ({attn[star]:,} FLOPs each), "
                  f"fewer at seq {', '.join(map(str, below))}, more at seq {', '.join(map(str, above))}")
        lines[f"{key}: MLP"] = (sweep, [mlp[s] / s / 1e6 for s in sweep])
        lines[f"{key}: Q K^T + softmax @ V"] = (sweep, [attn[s] / s / 1e6 for s in sweep])
        run.metric(f"crossover.{key}", star, "tokens", origin="computed",
                   label=f"{key}: sequence length where the attention matmuls' FLOPs overtake the MLP's")
        run.metric(f"crossover.{key}_over_d", star / c.d, "x", origin="computed",
                   label=f"{key}: that crossing over the model width d ({c.d})")
run.series("flops_per_token", "Attention matmuls overtake the MLP at 4d tokens (GPT-2) and 1.5 ff (Llama), "
           "counted by FlopCounterMode", "sequence length (tokens)", "forward MFLOP per token per layer",
           lines, x_log=True, y_log=True, computed=True)

# %% [markdown]
# ## 6. MHA, GQA, MQA: the KV cache, and a numerical check of the expansion
#
# KV-cache bytes per token = 2 (K and V) x layers x kv_heads x d_head x bytes per value. A GQA block whose
# KV heads are copied into an MHA block (each KV head's weights repeated for its group) must give the same
# output; expanding with `repeat` (tiling) instead of `repeat_interleave` pairs the heads wrongly.

# %%
c = REAL["llama"]
gqa = real_block(c)
mha = Block(replace(c, kv_heads=c.heads)).to(DEV)
g, hd = c.heads // c.kv_heads, c.d // c.heads
with torch.no_grad():
    shared = {k: v for k, v in gqa.state_dict().items() if not k.startswith(("attn.k", "attn.v"))}
    mha.load_state_dict(shared, strict=False)
    for name in ("k", "v"):  # (kv_heads * hd, d) -> each head's rows repeated g times, in head order
        w = getattr(gqa.attn, name).weight.view(c.kv_heads, hd, c.d)
        getattr(mha.attn, name).weight.copy_(w.repeat_interleave(g, dim=0).reshape(c.heads * hd, c.d))
    x = torch.randn(B, T, c.d, generator=gen).to(DEV)
    trace = {}
    y_gqa, y_mha, y_tiled = gqa(x, trace), mha(x), gqa(x, expand="repeat")
run.check_close("gqa_equals_mha_with_copied_kv_heads", y_gqa, y_mha, rtol=1e-5, atol=1e-5, reference_name="MHA block")
tiled_err = float((y_tiled - y_mha).abs().max())
run.check_wrong("gqa_tiled_expansion", tiled_err > 1e-3,
                f"repeat (tiling) instead of repeat_interleave: same shapes, max |err| {tiled_err:.2e} vs MHA")
k16 = trace["k (cached)"].to(torch.bfloat16)
cache_bytes = 2 * k16.nbytes / (B * T)
run.check("kv_bytes_formula", cache_bytes == 2 * c.kv_heads * hd * 2,
          f"bf16 K and V one layer holds {cache_bytes:.0f} B per token = 2 x {c.kv_heads} x {hd} x 2")

kv_rows, L7, hd7 = [], LLAMA2_7B.layers, 128
for name, kvh in (("MHA", 32), ("GQA", 8), ("MQA", 1)):
    per_token = 2 * L7 * kvh * hd7 * 2
    saved = L7 * 2 * 4096 * (32 - kvh) * hd7
    kv_rows.append([name, kvh, per_token // 1024, f"{per_token * 4096 / 2**30:.2f}", f"{saved / 1e6:.0f}"])
    run.metric(f"kv.{name.lower()}_per_token", per_token / 1024, "KiB", origin="computed",
               label=f"{name} ({kvh} KV heads), 32 layers x d_head 128, bf16: KV-cache bytes per token")
    run.metric(f"kv.{name.lower()}_params_saved", saved / 1e6, "M", origin="computed",
               label=f"{name}: K and V projection parameters saved against MHA (32 layers, d 4096)")
run.metric("kv.gqa_saving", 32 / 8, "x", origin="computed", label="KV cache, MHA over GQA with 8 KV heads")
run.table("kv_cache", "Fewer KV heads shrink the KV cache in proportion: Llama-2-7B shape (32 layers, 32 query "
          "heads), bf16", ["attention", "KV heads", "KiB per token", "GiB per 4096-token sequence",
                           "K/V parameters saved (M)"], kv_rows)

# %% [markdown]
# ## 7. Broadcasting: what it does right, and two silent bugs
#
# PyTorch aligns shapes from the right; a dimension of size 1 (or a missing one) stretches to the other's
# size (https://docs.pytorch.org/docs/stable/notes/broadcasting.html). Adding a (D,) bias to (B, S, D) is
# the intended case. A (N, 1) prediction minus a (N,) target becomes (N, N): every prediction against every
# target, and the mean of that is a number, not an error. A bias stored as (D, 1) when S == D adds along
# the sequence axis and keeps the output shape, so even an output-shape assertion misses it.

# %%
N, D = 256, 64
xb = torch.randn(2, D, D, generator=gen)  # (batch, seq, features) with seq == features
bias = torch.randn(D, generator=gen)
run.check_close("broadcast.bias_d", xb + bias, xb + bias.view(1, 1, D).expand(2, D, D), rtol=0, atol=0,
                reference_name="explicitly expanded bias")


def shape_assert_raises(condition):
    try:
        assert condition
    except AssertionError:
        return True
    return False


column = bias.view(D, 1)  # the same numbers as a column: stretched over features, indexed by position
wrong = xb + column
run.check_wrong("broadcast.bias_column", wrong.shape == xb.shape and not torch.equal(wrong, xb + bias)
                and shape_assert_raises(column.shape == (xb.shape[-1],)),
                f"(D, 1) bias on (B, S, D) with S == D: output shape {tuple(wrong.shape)} unchanged, values wrong "
                f"(max |err| {float((wrong - xb - bias).abs().max()):.2f}); "
                "`assert bias.shape == (x.shape[-1],)` catches it")
target = torch.randn(N, generator=gen)
pred = (target + 0.1 * torch.randn(N, generator=gen)).unsqueeze(1)  # a good model's output, shape (N, 1)
right_mse = float(((pred.squeeze(1) - target) ** 2).mean())
diff = pred - target
wrong_mse = float((diff ** 2).mean())
caught = shape_assert_raises(pred.shape == target.shape)
run.check_wrong("broadcast.mse_n1_vs_n", caught and diff.shape == (N, N) and wrong_mse > 10 * right_mse,
                f"(N,1) - (N,) is {tuple(diff.shape)}: MSE {wrong_mse:.3f} instead of {right_mse:.4f}; "
                "the shape assertion raised")
run.metric("mse.right", right_mse, "mse", origin="computed", label="MSE with matching shapes (N,) vs (N,)")
run.metric("mse.broadcast_wrong", wrong_mse, "mse", origin="computed", label="MSE of (N,1) against (N,): an (N,N) mean")
run.metric("mse.wrong_over_right", wrong_mse / right_mse, "x", origin="computed",
           label="broadcast MSE over the right MSE (a good model's error looks like a bad model's)")

# scaling by sqrt(d_head): unit-variance q and k give scores of spread sqrt(d_head) without it
qs, ks = torch.randn(4096, 128, generator=gen), torch.randn(4096, 128, generator=gen)
raw = (qs * ks).sum(-1)
run.metric("scores.std_unscaled", float(raw.std()), "value", origin="computed",
           label="std of q.k for unit-variance q, k at d_head 128 (sqrt(128) = 11.3 expected)")
run.metric("scores.std_scaled", float((raw / math.sqrt(128)).std()), "value", origin="computed",
           label="std of q.k / sqrt(d_head) at d_head 128 (1 expected)")
# What that spread does to the softmax: 256 queries over 1024 keys, the weight of each query's top key
rows = qs[:256] @ ks[:1024].T  # (256 queries, 1024 keys)
for name, scores in (("unscaled", rows), ("scaled", rows / math.sqrt(128))):
    run.metric(f"scores.max_weight_{name}", float(torch.softmax(scores, -1).max(-1).values.mean()), "fraction",
               origin="computed", label=f"largest softmax weight over 1024 keys, mean over 256 queries, {name} "
               "q.k at d_head 128 (1 is one-hot; 1/1024 is uniform)")

# %% [markdown]
# ## Results

# %%
run.table("params", "Parameter counts: the formula equals the module's count exactly (full sizes built on meta)",
          ["model or block", "formula", "module (meta device)", "matmul weights (2 FLOPs each per token)"], param_rows)
run.table("flops", "Forward FLOPs: FlopCounterMode equals 2 x matmul weights x tokens + 4 x seq^2 x d per layer",
          ["what", "batch x seq", "counted (forward)", "formula", "counted (forward + backward)"], flop_rows)
run.save()
