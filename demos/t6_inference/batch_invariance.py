# %% [markdown]
# # Batch invariance: the same request, different bits, depending on the rest of the batch
#
# A kernel run twice on the same inputs gives the same bits. A serving engine does not run the same
# inputs twice: one request's row shares a matmul with whatever else arrived, and the library picks
# its reduction order (blocking over K, split-K, split-KV) from the batch shape. So row 0 of
# `X[:b] @ W` need not equal `X[:1] @ W` bit for bit, and a greedy decode can in principle pick another
# token. ("Defeating Nondeterminism in LLM Inference", Thinking Machines Lab, 2025.)
#
# Measured here, on one CPU thread (as in the other T6 demos): (1) the library matmul, fp32 and bf16;
# (2) the mechanism in code written here, a split-KV decode attention whose number of splits follows the
# batch; (3) a batch-invariant matmul and its cost; (4) greedy decoding, one prompt alone vs in a batch.

# %%
import copy

import torch

from demos.harness.run import start
from demos.t6_inference._model import generate_greedy, held_out_prompts, trained_models

run = start(
    "batch_invariance",
    title="Batch invariance: the same row at different batch sizes, bit for bit",
    sizes={  # matmul width (K = N), batch sizes; split-KV: heads, head_dim, cached keys, batch sizes;
        # decode: prompts, new tokens
        "tiny": {"width": 256, "batches": [1, 2, 3, 4, 8, 16], "heads": 8, "head_dim": 32, "kv_len": 512,
                 "attn_batches": [1, 2, 4, 8], "prompts": 4, "new": 16},
        "small": {"width": 2048, "batches": [1, 2, 3, 4, 8, 16, 32, 64, 128], "heads": 8, "head_dim": 64,
                  "kv_len": 2048, "attn_batches": [1, 2, 4, 8, 16, 32], "prompts": 16, "new": 96},
        "full": {"width": 8192, "batches": [1, 2, 3, 4, 8, 16, 32, 64, 128, 256], "heads": 32, "head_dim": 128,
                 "kv_len": 8192, "attn_batches": [1, 2, 4, 8, 16, 32, 64], "prompts": 64, "new": 256},
    },
    cpu_threads=1,
)
S = run.sizes
BATCHES, BMAX = S["batches"], S["batches"][-1]
gen = torch.Generator().manual_seed(run.options.seed)

# %% [markdown]
# ## 1. The library matmul: row 0 at batch b against batch 1
#
# Each row of `X[:b] @ W` is compared bit for bit with the same row computed alone. Neither order is
# "the right one": both are checked against a float64 product, and the batch-induced difference is
# put next to the batch-1 result's own rounding error.

# %%
K = N = S["width"]
X32 = torch.randn(BMAX, K, generator=gen)
W32 = torch.randn(K, N, generator=gen) / K ** 0.5
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOL = {"float32": 1e-4, "bfloat16": 1e-2}
alone_rows, mm = {}, {}
for name, dtype in DTYPES.items():
    X, W = X32.to(dtype), W32.to(dtype)
    REF64 = X.double() @ W.double()  # the exact product of the inputs as this dtype holds them
    alone = torch.cat([X[i:i + 1] @ W for i in range(BMAX)])  # every row computed as a batch of one
    alone_rows[name] = alone
    run.check_close(f"matmul.{name}.batch1", alone, REF64, rtol=TOL[name], atol=TOL[name], reference_name="float64")
    own_error = float((alone[0].double() - REF64[0]).abs().max())
    for b in BATCHES:
        out = X[:b] @ W
        row0 = out[0] != alone[0]
        diff = float((out[0].double() - alone[0].double()).abs().max())
        mm[name, b] = {"row0_elems": int(row0.sum()), "rows": sum(not torch.equal(out[i], alone[i]) for i in range(b)),
                       "diff": diff,
                       "diff_over_error": diff / own_error, "elems": int((out != alone[:b]).sum()),
                       "batch_diff": float((out.double() - alone[:b].double()).abs().max())}
    again = [X[:BMAX] @ W for _ in range(3)]
    same = all(torch.equal(again[0], a) for a in again[1:])
    run.check(f"matmul.{name}.run_to_run", same, f"batch {BMAX}, three calls: {'identical' if same else 'differ'}")
    run.check_close(f"matmul.{name}.batch{BMAX}", again[0], REF64, rtol=TOL[name], atol=TOL[name],
                    reference_name="float64")
    run.log(f"  {name}: row 0 elements differing from batch 1: "
            + ", ".join(f"b={b}: {mm[name, b]['row0_elems']}" for b in BATCHES))

# %% [markdown]
# ## 2. The mechanism, in code written here: split-KV decode attention
#
# A decode step has one query per sequence and a long KV cache. On a GPU, a batch of a few
# sequences gives too few (sequence, head) pairs to fill the SMs, so a split-KV ("flash-decoding")
# kernel cuts the cached keys into splits, computes each split's partial softmax (its maximum, its
# sum of exponentials, its weighted values) in parallel, and combines them. A typical heuristic picks
# the *number* of splits so that batch x heads x splits fills the machine: fewer sequences, more
# splits. Exact in real numbers, but another split point changes the rounding. The batch-invariant
# alternative fixes the split *size* (256 keys): the splits depend on the cache length only. `UNITS`
# stands for a GPU's 132 SMs (an H100 SXM's count).

# %%
UNITS, FIXED_SPLIT = 132, 256
H, D, L = S["heads"], S["head_dim"], S["kv_len"]
A_BMAX = S["attn_batches"][-1]
Q = torch.randn(A_BMAX, H, 1, D, generator=gen)
KC = torch.randn(A_BMAX, H, L, D, generator=gen)
VC = torch.randn(A_BMAX, H, L, D, generator=gen)


def splits_for_batch(b):
    return max(1, min(L // 64, -(-UNITS // (b * H))))  # ceil(units / (b * heads)), at least 64 keys a split


def split_kv_attention(q, k, v, n_splits):
    """Softmax(q k^T / sqrt(d)) v over the cache in n_splits pieces, combined with the online-softmax rule."""
    parts = []
    for ks, vs in zip(k.tensor_split(n_splits, dim=2), v.tensor_split(n_splits, dim=2)):
        s = (q @ ks.transpose(-1, -2)) / D ** 0.5  # (b, h, 1, keys in this split)
        m = s.amax(-1, keepdim=True)
        p = torch.exp(s - m)
        parts.append((m, p.sum(-1, keepdim=True), p @ vs))
    m_all = torch.stack([m for m, _, _ in parts]).amax(0)
    num, den = 0, 0
    for m, l, o in parts:  # the partials are added in split order
        w = torch.exp(m - m_all)
        num, den = num + w * o, den + w * l
    return num / den


ATT_REF = torch.softmax((Q.double() @ KC.double().transpose(-1, -2)) / D ** 0.5, -1) @ VC.double()
POLICIES = {"by_batch": ("splits chosen from the batch", splits_for_batch),
            "fixed_size": (f"fixed split size ({FIXED_SPLIT} keys)", lambda b: -(-L // FIXED_SPLIT))}
att = {}
for policy, (label, splits) in POLICIES.items():
    alone = torch.cat([split_kv_attention(Q[i:i + 1], KC[i:i + 1], VC[i:i + 1], splits(1)) for i in range(A_BMAX)])
    for b in S["attn_batches"]:
        out = split_kv_attention(Q[:b], KC[:b], VC[:b], splits(b))
        run.check_close(f"split_kv.{policy}.b{b}", out, ATT_REF[:b], rtol=1e-5, atol=1e-5,
                        reference_name="float64 softmax attention")
        att[policy, b] = {"splits": splits(b), "elems": int((out != alone[:b]).sum()), "total": out.numel(),
                          "diff": float((out - alone[:b]).abs().max())}
    rerun = split_kv_attention(Q, KC, VC, splits(A_BMAX))
    run.check(f"split_kv.{policy}.run_to_run", torch.equal(rerun, split_kv_attention(Q, KC, VC, splits(A_BMAX))),
              f"batch {A_BMAX}, called twice: bitwise equal")
run.check("split_kv.fixed_size.invariant", all(att["fixed_size", b]["elems"] == 0 for b in S["attn_batches"]),
          "fixed split size: every sequence's output equals its batch-1 output at every batch size")

# %% [markdown]
# ## 3. A batch-invariant matmul, and its price
#
# The simplest batch-invariant matmul here sends every row through the batch-1 path. Its price is the
# batch's reuse of `W`: each row streams the whole weight again. (Batch-invariant GPU kernels instead
# fix one tile shape and never split K: they lose the split-K and small-tile speed-ups at small batch.)

# %%
def rowwise_matmul(x, w):
    return torch.cat([x[i:i + 1] @ w for i in range(x.shape[0])])


row_diff = {name: sum(int((rowwise_matmul(X32[:b].to(dt), W32.to(dt)) != alone_rows[name][:b]).sum()) for b in BATCHES)
            for name, dt in DTYPES.items()}
run.check("rowwise.invariant", all(v == 0 for v in row_diff.values()),
          "row by row: every row equals its batch-1 result at every batch size, in "
          + " and ".join(f"{n} ({v} elements differ)" for n, v in row_diff.items()))
t_batched = run.time(lambda: X32 @ W32, flush=False)
t_rowwise = run.time(lambda: rowwise_matmul(X32, W32), flush=False)

# %% [markdown]
# ## 4. Greedy decoding: one prompt alone, and the same prompt in a batch
#
# The trained T6 model decodes held-out prompts greedily, as one batch and each alone. To see how
# close a flip came, the logits along the batched run's tokens are recomputed alone (teacher forcing):
# the largest logit difference against the smallest gap between the top two logits at any step.

# %%
target, _, _ = trained_models(run.torch_device, run.size, log=run.log)
prompts = held_out_prompts(S["prompts"], 32, seed=run.options.seed + 3)
P, NEW = prompts.shape[1], S["new"]


@torch.no_grad()
def forced_logits(model, prompt, tokens):
    cache = model.new_cache(prompt.shape[0], P + NEW)
    out = [model(prompt, cache)[:, -1:]]
    for i in range(NEW - 1):
        out.append(model(tokens[:, P + i:P + i + 1], cache))
    return torch.cat(out, 1).float()


dec = {}
for name, dtype in DTYPES.items():
    model = copy.deepcopy(target).to(dtype)
    batched = generate_greedy(model, prompts, NEW)
    alone = torch.cat([generate_greedy(model, prompts[i:i + 1], NEW) for i in range(len(prompts))])
    first_diff = [int((a != b).nonzero()[0]) - P for a, b in zip(alone, batched) if not torch.equal(a, b)]
    lb = forced_logits(model, prompts, batched)
    la = torch.cat([forced_logits(model, prompts[i:i + 1], batched[i:i + 1]) for i in range(len(prompts))])
    run.check_close(f"decode.{name}.logits", la, lb, rtol=0, atol=1e-3 if dtype == torch.float32 else 0.25,
                    reference_name="the batched run's logits")
    top2 = lb.topk(2, -1).values
    dec[name] = {"diverged": len(first_diff), "max_diff": float((lb - la).abs().max()),
                 "steps_differing": float(((lb != la).any(-1)).float().mean()),
                 "min_gap": float((top2[..., 0] - top2[..., 1]).min())}
    run.log(f"  {name}: {len(first_diff)} of {len(prompts)} prompts diverged; largest logit difference "
            f"{dec[name]['max_diff']:.3g}, smallest top-2 gap {dec[name]['min_gap']:.3g}")

# %% [markdown]
# ## Results

# %%
run.table("matmul", f"Row 0 of X[:b] @ W ({K} x {N}) against batch 1: output elements that differ bitwise",
          ["batch b", "float32: row 0 elements differing", "float32: rows differing", "float32: max |diff|",
           "float32: diff over own error", "bfloat16: row 0 elements differing", "bfloat16: rows differing"],
          [[b, mm["float32", b]["row0_elems"], f"{mm['float32', b]['rows']} of {b}", f"{mm['float32', b]['diff']:.2e}",
            round(mm["float32", b]["diff_over_error"], 2), mm["bfloat16", b]["row0_elems"],
            f"{mm['bfloat16', b]['rows']} of {b}"] for b in BATCHES])
run.table("split_kv", f"Split-KV decode attention ({H} heads x {D}, {L} cached keys): outputs differing from batch 1",
          ["batch b", "splits (by batch)", "elements differing (by batch)", "max |diff| (by batch)",
           "splits (fixed size)", "elements differing (fixed size)"],
          [[b, att["by_batch", b]["splits"], f"{att['by_batch', b]['elems']} of {att['by_batch', b]['total']}",
            f"{att['by_batch', b]['diff']:.2e}", att["fixed_size", b]["splits"],
            att["fixed_size", b]["elems"]] for b in S["attn_batches"]])
run.table("decode", f"Greedy decoding, {len(prompts)} prompts x {NEW} tokens: alone vs in one batch",
          ["dtype", "prompts whose tokens diverged", "steps with any logit difference", "largest logit difference",
           "smallest top-2 logit gap"],
          [[n, d["diverged"], f"{d['steps_differing']:.0%}", f"{d['max_diff']:.2e}", f"{d['min_gap']:.2e}"]
           for n, d in dec.items()])
run.series("rows_differing", "Share of a batch's rows whose bits differ from the same row computed alone",
           "batch size b", "share of rows differing from batch 1",
           {n: (BATCHES, [mm[n, b]["rows"] / b for b in BATCHES]) for n in DTYPES}, x_log=True)

for name in DTYPES:
    first = next((b for b in BATCHES if mm[name, b]["row0_elems"]), 0)
    run.metric(f"matmul.{name}.first_batch_differing", first, "value",
               label=f"{name}: smallest batch whose row 0 differs from batch 1 (0: none)")
    run.metric(f"matmul.{name}.row0_differing_frac", mm[name, BMAX]["row0_elems"] / N, "fraction",
               label=f"{name}: share of row 0's outputs that differ from batch 1, at batch {BMAX}")
    run.metric(f"matmul.{name}.rows_differing_frac", mm[name, BMAX]["rows"] / BMAX, "fraction",
               label=f"{name}: share of the batch-{BMAX} rows with any output differing from batch 1")
    for key, field, unit, what in (("diverged_prompts", "diverged", "requests", "prompts whose tokens differ"),
                                   ("max_logit_diff", "max_diff", "logit", "largest logit difference"),
                                   ("steps_differing", "steps_differing", "fraction", "share of steps differing"),
                                   ("min_top2_gap", "min_gap", "logit", "smallest top-2 logit gap at any step")):
        run.metric(f"decode.{name}.{key}", dec[name][field], unit, label=f"{name} decoding, alone vs batched: {what}")
run.metric("matmul.bfloat16.elems_differing_frac", mm["bfloat16", BMAX]["elems"] / (BMAX * N), "fraction",
           label=f"bfloat16: share of all batch-{BMAX} outputs that differ from batch 1")
if mm["float32", BMAX]["batch_diff"] > 0:
    ratio = mm["bfloat16", BMAX]["batch_diff"] / mm["float32", BMAX]["batch_diff"]
    run.metric("matmul.bfloat16.diff_over_float32", ratio,
               "x", label=f"largest batch-{BMAX} difference from batch 1 over all rows: bfloat16's over float32's")
run.metric("matmul.float32.diff_over_error", mm["float32", BMAX]["diff_over_error"], "x",
           label=f"float32: row 0's largest batch-{BMAX} difference over its batch-1 error against float64")
run.metric("matmul.run_to_run_differing", 0, "fraction", label="share of outputs differing between repeated calls")
if dec["float32"]["max_diff"] > 0:
    run.metric("decode.float32.gap_over_diff", dec["float32"]["min_gap"] / dec["float32"]["max_diff"], "x",
               label="float32: smallest top-2 gap over the largest logit difference (a flip needs below 1)")
run.metric("split_kv.by_batch.max_differing_frac",
           max(att["by_batch", b]["elems"] / att["by_batch", b]["total"] for b in S["attn_batches"]), "fraction",
           label="splits chosen from the batch: largest share of outputs differing from batch 1")
run.metric("split_kv.by_batch.max_abs_diff", max(att["by_batch", b]["diff"] for b in S["attn_batches"]), "abs",
           label="splits chosen from the batch: largest difference from batch 1")
run.metric("split_kv.fixed_size.differing_frac", max(att["fixed_size", b]["elems"] for b in S["attn_batches"])
           / att["fixed_size", A_BMAX]["total"], "fraction", label="fixed split size: share differing from batch 1")
run.metric("rowwise.differing_frac", sum(row_diff.values()) / (len(DTYPES) * sum(BATCHES) * N), "fraction",
           label="row-by-row matmul: share of outputs differing from batch 1 (every batch, both dtypes)")
run.metric("rowwise.time_over_batched", t_rowwise.median_s / t_batched.median_s, "x",
           label=f"float32, batch {BMAX}: row-by-row time over one batched matmul")
for variant, t in (("batched", t_batched), ("rowwise", t_rowwise)):
    run.metric(f"{variant}.ms", t.median_s * 1e3, "ms", label=f"float32 {variant} matmul, batch {BMAX}")
run.save()
