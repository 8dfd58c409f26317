# %% [markdown]
# # Expert parallelism: a mixture-of-experts layer across 4 ranks with two all-to-alls
#
# A mixture-of-experts (MoE) FFN replaces one feed-forward block by E of them ("experts") and a small
# *router* that sends each token to only k of them, so parameters grow with E while the work per token
# stays that of k FFNs (Shazeer et al., [Outrageously Large Neural Networks: The Sparsely-Gated
# Mixture-of-Experts Layer](https://arxiv.org/abs/1701.06538)). **Expert parallelism** puts different
# experts on different ranks: each rank keeps its own tokens (data parallel over tokens) and E/p
# experts, and tokens travel to the rank that owns their expert and back, in two **all-to-all**
# exchanges with uneven sizes ([GShard](https://arxiv.org/abs/2006.16668);
# [Switch Transformer](https://arxiv.org/abs/2101.03961), which routes to k = 1 expert).
#
# This demo builds that layer on 4 real torch.distributed ranks with 2 experts each, checks output
# and gradients against the layer in one process, then measures how evenly the router spreads tokens
# (and what a capacity would drop), the all-to-alls of a step, their bytes against the formula, and
# the forward's time next to one process.

# %%
import dataclasses
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from records.errors import fail
from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._moe import MoEParams, all_to_all_autograd, count_all_to_alls, load_stats

WORLD_SIZE = 4
EXPERTS_PER_RANK = 2
N_EXPERTS = WORLD_SIZE * EXPERTS_PER_RANK
SKEW = 2.0  # added to expert 0's router logit in the deliberately skewed router

_dist.pin_gpu_per_rank()  # under torchrun: this rank's GPU, before start() measures the ceilings
run = start(
    "expert_parallel",
    title="Expert parallelism: MoE layer over 4 ranks, all-to-all dispatch and combine",
    sizes={  # (tokens per rank, hidden width, expert FFN width, timing repeats, forwards per byte count)
        "tiny": (64, 64, 128, 3, 4),
        "small": (512, 128, 256, 10, 2),
        "full": (2048, 256, 1024, 10, 2),
    },
    cpu_threads=1,
)
tokens_per_rank, hidden, ffn_width, timing_repeats, forwards_per_count = run.sizes
n_tokens = tokens_per_rank * WORLD_SIZE

# %% [markdown]
# Where the ranks run: as a plain script, 4 forked CPU processes over gloo (`_dist.py`); under
# `torchrun --nproc-per-node 4 -m demos.t7_parallelism.expert_parallel --device cuda` one GPU per rank,
# the all-to-alls over NCCL; `--device cuda` without torchrun times only the single-process layer.

# %%
placed = _dist.place_ranks(run, [WORLD_SIZE], f"expert parallel on {WORLD_SIZE} GPUs (NCCL all-to-all)")
if placed and placed.world_sizes != (WORLD_SIZE,):
    fail(f"expert_parallel places {N_EXPERTS} experts on exactly {WORLD_SIZE} ranks: start torchrun with {WORLD_SIZE}")
rank_device = placed.device if placed else run.torch_device
backend = _dist.backend_for(rank_device)

# %% [markdown]
# ## The layer, in one process (the reference)
#
# Router: a linear layer and a softmax over the E experts; each token goes to its top-k experts and
# their outputs are summed, weighted by the router's probabilities (the *gates*; not renormalized
# over the k chosen, so the router gets a gradient from k = 1 too, as in Switch). Each expert is an
# FFN `gelu(x @ W1) @ W2`. With every expert in one process this is a loop over experts, each on the
# tokens that chose it.

# %%
def expert_ffn(x, w1, w2):
    return F.gelu(x @ w1) @ w2


def route(x, router_w, router_b, k):
    """Gates and expert ids of each token's top-k experts, both (tokens, k)."""
    probs = torch.softmax(x @ router_w + router_b, dim=-1)
    return probs.topk(k, dim=-1)


def moe_single_process(x, p: MoEParams, k):
    gate, expert = route(x, p.router_w, p.router_b, k)
    y = torch.zeros_like(x)
    for e in range(N_EXPERTS):
        token, slot = (expert == e).nonzero(as_tuple=True)
        y = y.index_add(0, token, gate[token, slot, None] * expert_ffn(x[token], p.w1[e], p.w2[e]))
    return y, torch.bincount(expert.reshape(-1), minlength=N_EXPERTS)


generator = torch.Generator().manual_seed(run.options.seed)
params = MoEParams.random(generator, hidden, ffn_width, N_EXPERTS)  # float64, scaled so activations stay O(1)
skewed_params = params.with_router_bias_on(0, SKEW)
x_all = torch.randn(n_tokens, hidden, generator=generator, dtype=torch.float64)
probe = torch.randn(n_tokens, hidden, generator=generator, dtype=torch.float64)  # loss = sum(y * probe)

# The reference: float64, every expert in this process, output and gradients of loss = sum(y * probe).
reference = {}
for k in (1, 2):
    p64 = params.requiring_grad()
    x64 = x_all.clone().requires_grad_()
    y64, counts64 = moe_single_process(x64, p64, k)
    (y64 * probe).sum().backward()
    reference[k] = {"y": y64.detach(), "counts": counts64, "x.grad": x64.grad,
                    **{f"{name}.grad": t.grad for name, t in zip(("router_w", "router_b", "w1", "w2"),
                                                                 dataclasses.astuple(p64))}}

# %% [markdown]
# ## The layer, expert-parallel
#
# On rank r: tokens `x[r*T:(r+1)*T]`, the replicated router, and experts `2r` and `2r+1`. One forward:
#
# 1. route the local tokens; sort the (token, expert) assignments by expert, so the ones for each
#    destination rank are contiguous;
# 2. **all-to-all of counts**: each rank sends every other rank how many of its tokens go to each of
#    that rank's experts (an E-long int64 tensor, split evenly). Now every rank knows how many rows it
#    will receive from whom: the split sizes of the next exchange;
# 3. **all-to-all of tokens (dispatch)** with uneven splits; the received rows are grouped by source
#    rank, then by local expert;
# 4. each local expert runs on its rows;
# 5. **all-to-all of results (combine)**, the same exchange with the splits swapped;
# 6. scale by the gates and add each result into its token's row.
#
# The token exchanges use `torch.distributed.nn.functional.all_to_all_single`, the autograd-aware
# version (`all_to_all_autograd` in `_moe.py`): its backward is the reverse all-to-all, so gradients
# travel back through the same real collectives. The counts exchange is a plain
# `dist.all_to_all_single`: integers carry no gradient.

# %%
def moe_expert_parallel(x, router_w, router_b, w1_local, w2_local, k, world_size, traffic=None):
    gate, expert = route(x, router_w, router_b, k)
    expert_of_assignment = expert.reshape(-1)
    order = torch.argsort(expert_of_assignment, stable=True)  # grouped by expert, hence by destination rank
    token_of_assignment = order // k

    sent_per_expert = torch.bincount(expert_of_assignment, minlength=N_EXPERTS)
    received_per_expert = torch.empty_like(sent_per_expert)
    dist.all_to_all_single(received_per_expert, sent_per_expert)  # [source rank, local expert] after the exchange
    received = received_per_expert.view(world_size, EXPERTS_PER_RANK)
    send_splits = sent_per_expert.view(world_size, EXPERTS_PER_RANK).sum(1).tolist()
    recv_splits = received.sum(1).tolist()

    dispatched = all_to_all_autograd(x[token_of_assignment], recv_splits, send_splits)
    local_expert = torch.arange(EXPERTS_PER_RANK, device=x.device).repeat(world_size).repeat_interleave(
        received.reshape(-1))
    by_expert = torch.argsort(local_expert, stable=True)
    chunks = dispatched[by_expert].split(received.sum(0).tolist())
    outputs = torch.cat([expert_ffn(c, w1_local[e], w2_local[e]) for e, c in enumerate(chunks)])
    expert_out = outputs[torch.argsort(by_expert)]  # back to the order the rows arrived in
    returned = all_to_all_autograd(expert_out, send_splits, recv_splits)

    y = torch.zeros_like(x).index_add(0, token_of_assignment, returned * gate.reshape(-1)[order, None])
    if traffic is not None:
        traffic.update(sent_per_expert=sent_per_expert, send_splits=send_splits, recv_splits=recv_splits)
    return y


# %% [markdown]
# ## What each rank measures
#
# Inside every rank, per k: the forward and backward, compared right away with the float64
# reference (a rank raises on a mismatch, so nothing wrong is timed or saved); the all-to-alls of one
# forward and one backward, counted from `torch.profiler` events; the bytes of a few forwards, with
# `_dist.bytes_sent` (between barriers, net of the barriers' own bytes, least of three tries): the
# loopback interface's transmit counter (every rank's traffic, TCP/IP headers included) and each
# rank's own `wchar` (what it wrote through write calls, as gloo sends); then the forward's time
# (`_dist.time_steps`, a fixed repeat count, since every rank must run the same collectives). Last,
# the skewed router's token counts.

# %%
TOLERANCE = dict(rtol=1e-4, atol=1e-5)  # float32 layer vs float64 reference


def rank_worker(rank, world_size):
    device = rank_device
    mine = slice(rank * tokens_per_rank, (rank + 1) * tokens_per_rank)
    experts = slice(rank * EXPERTS_PER_RANK, (rank + 1) * EXPERTS_PER_RANK)
    p32 = params.to(torch.float32, device)
    x = x_all[mine].to(device, torch.float32)
    results = {}
    for k in (1, 2):
        local = [p32.router_w, p32.router_b, p32.w1[experts], p32.w2[experts]]
        local = [t.clone().requires_grad_() for t in local]
        x_leaf = x.clone().requires_grad_()
        traffic, calls, y = {}, {}, None

        def forward():
            nonlocal y
            y = moe_expert_parallel(x_leaf, *local, k, world_size, traffic)

        calls["forward"] = count_all_to_alls(forward, backend)
        loss = (y * probe[mine].to(device, torch.float32)).sum()
        calls["backward"] = count_all_to_alls(loss.backward, backend)
        got = {"y": y.detach(), "x.grad": x_leaf.grad, "router_w.grad": local[0].grad,
               "router_b.grad": local[1].grad, "w1.grad": local[2].grad, "w2.grad": local[3].grad}
        ref = reference[k]
        for name, slicer in (("y", mine), ("x.grad", mine), ("w1.grad", experts), ("w2.grad", experts)):
            torch.testing.assert_close(got[name].cpu().double(), ref[name][slicer], **TOLERANCE)

        def step():
            return moe_expert_parallel(x, *(t.detach() for t in local), k, world_size)

        with torch.no_grad():
            metered = _dist.bytes_sent(lambda: [step() for _ in range(forwards_per_count)], 3) \
                if _dist.can_meter_bytes(placed) else None
            timing = _dist.time_steps(step, device, timing_repeats)
            skewed_traffic = {}
            moe_expert_parallel(x, p32.router_w, skewed_params.router_b.to(device, torch.float32),
                                *(t.detach() for t in local[2:]), k, world_size, skewed_traffic)

        results[k] = {
            **{name: t.detach().cpu() for name, t in got.items()},
            "calls": calls, "traffic": traffic, "skewed_traffic": skewed_traffic,
            "loopback_bytes_per_forward": metered and min(metered["loopback"]) / forwards_per_count,
            "written_bytes_per_forward": metered and min(metered["written"]) / forwards_per_count,
            "median_s": timing.median_s, "p10_s": timing.p10_s, "p90_s": timing.p90_s,
        }
    return results


def time_single_process(k):
    """The single-process forward (every expert, all tokens) on the run's device, timed by the harness."""
    p32, x32 = params.to(torch.float32, run.torch_device), x_all.to(run.torch_device, torch.float32)
    with torch.no_grad():
        timing = run.time(lambda: moe_single_process(x32, p32, k), flush=False)  # as the ranks time theirs
    run.metric(f"time.k{k}.single_ms", timing.median_s * 1e3, "ms", label=f"k={k}: one process, all {N_EXPERTS} "
               f"experts, {n_tokens} tokens, {'one thread' if run.device.kind == 'cpu' else 'one GPU'}")
    return timing


if placed is None:  # one process (e.g. one GPU): the single-process layer is what this run can measure
    for k in (1, 2):
        time_single_process(k)
    run.save()
    raise SystemExit(0)
ranks = _dist.launch(rank_worker, WORLD_SIZE, device=rank_device)
if ranks is None:  # another rank under torchrun: rank 0 writes the record
    _dist.shutdown()
    raise SystemExit(0)

# %% [markdown]
# ## Correctness: the same layer, output and gradients
#
# Gathered from the 4 ranks in rank order: output rows and input gradients (each rank's tokens),
# the expert weights' gradients (complete on their owner: every token that used an expert sent its
# gradient back through the backward all-to-all), and the router's gradients, *partial* on every rank
# (it is replicated): their sum, which a data-parallel all-reduce would form, must equal the
# single-process gradient. Float32 against float64, |err| <= 1e-5 + 1e-4 |ref|; the router's
# gradients sum over every token with cancellation, so their atol is 1e-4 x their largest entry.

# %%
for k in (1, 2):
    ref = reference[k]
    for name in ("y", "x.grad", "w1.grad", "w2.grad"):
        run.check_close(f"k{k}.{name}", torch.cat([r[k][name] for r in ranks]), ref[name], **TOLERANCE)
    for name in ("router_w.grad", "router_b.grad"):  # sums over every token, with cancellation: atol scaled
        scale = float(ref[name].abs().max())  # by the gradient's largest entry
        run.check_close(f"k{k}.{name}", sum(r[k][name] for r in ranks), ref[name], rtol=TOLERANCE["rtol"],
                        atol=TOLERANCE["rtol"] * scale,
                        reference_name=f"float64 reference (sum of the ranks' partial gradients; "
                                       f"max |ref| {scale:.2g})")
    sent = sum(r[k]["traffic"]["sent_per_expert"] for r in ranks)
    run.check(f"k{k}.counts", torch.equal(sent.cpu(), ref["counts"]) and int(sent.sum()) == n_tokens * k,
              f"tokens per expert summed over ranks equal the single-process routing and add up to "
              f"tokens x k = {n_tokens} x {k} = {int(sent.sum())}")

# %% [markdown]
# ## Load: tokens per expert, imbalance, and what a capacity would drop
#
# An expert's cost grows with the tokens it receives and the all-to-all waits for the slowest rank,
# so the *imbalance* max/mean of tokens per expert is the straggler factor. GShard and Switch give
# each expert a *capacity* C = cf x tokens x k / E (capacity factor cf >= 1) and drop assignments
# over it (the token skips the layer through the residual). Below: the random-init router, and the
# same with +2 on expert 0's logit (a collapsed router, what a load-balancing loss prevents).

# %%
CAPACITY_FACTORS = (1.0, 1.25, 2.0)
load_rows, bars, imbalances = [], {}, {}
for k in (1, 2):
    for router, key in (("random", "traffic"), ("skewed", "skewed_traffic")):
        per_expert = sum(r[k][key]["sent_per_expert"] for r in ranks).cpu()
        imbalance, rank_imbalance, drops = load_stats(per_expert, EXPERTS_PER_RANK, n_tokens * k, CAPACITY_FACTORS)
        imbalances[router, k] = imbalance
        name = f"load.{router}.k{k}"
        run.metric(f"{name}.imbalance", imbalance, "x",
                   label=f"{router} router, k={k}: tokens of the busiest expert over the mean per expert")
        run.metric(f"{name}.rank_imbalance", rank_imbalance, "x",
                   label=f"{router} router, k={k}: tokens received by the busiest rank over the mean per rank")
        for cf, (capacity, dropped) in zip(CAPACITY_FACTORS, drops):
            run.metric(f"{name}.dropped.cf{cf}", dropped, "fraction",
                       label=f"{router} router, k={k}: share of token assignments over capacity at cf={cf} "
                             f"(C={capacity})")
        load_rows.append([router, k, *per_expert.tolist(), round(imbalance, 2),
                          *[f"{dropped:.1%}" for _, dropped in drops]])
        if k == 2:
            bars[f"{router} router"] = (list(range(N_EXPERTS)), per_expert.tolist())
run.table("load", f"Tokens per expert over {n_tokens} tokens ({WORLD_SIZE} ranks x {tokens_per_rank}); experts "
          f"2r and 2r+1 live on rank r; dropped = share of assignments over capacity C = cf x tokens x k / E",
          ["router", "k", *[f"expert {e}" for e in range(N_EXPERTS)], "imbalance (max/mean)",
           *[f"dropped at cf={cf}" for cf in CAPACITY_FACTORS]], load_rows)
run.series("tokens_per_expert", f"k=2, {n_tokens} tokens: busiest expert {imbalances['random', 2]:.2f}x the mean, "
           f"skewed router {imbalances['skewed', 2]:.1f}x", "expert", "tokens", bars,
           hlines={"mean (tokens x k / E)": n_tokens * 2 / N_EXPERTS,
                   "capacity at cf=1.25": math.floor(1.25 * n_tokens * 2 / N_EXPERTS)})

# %% [markdown]
# ## Communication: all-to-alls per step, and bytes against the formula
#
# Per forward: one all-to-all of counts and two of tokens (dispatch, combine). The backward of each
# token exchange is one more all-to-all in the reverse direction: two per backward. Bytes: a
# token-row leaving its rank costs `hidden x 4` bytes (float32) on the way out and the same again when
# its result comes back, so one forward sends 2 x (assignments leaving their rank) x hidden x 4 bytes
# in total. Assignments routed to an expert on the same rank never leave it. Measured bytes also
# carry the counts exchange (E int64 per rank), gloo's message headers and, on loopback, TCP/IP
# headers and acknowledgements; the ratio to the formula shows how much.

# %%
calls_rows, byte_rows = [], []
for k in (1, 2):
    calls = [r[k]["calls"] for r in ranks]
    fwd, bwd = calls[0]["forward"], calls[0]["backward"]
    run.check(f"k{k}.calls_agree", all(c == calls[0] for c in calls) and fwd[0] == fwd[1] and bwd[0] == bwd[1],
              f"every rank's profiler saw the same all-to-alls ({backend}:all_to_all = c10d::alltoall_base_): "
              f"forward {fwd[0]}, backward {bwd[0]}")
    run.metric(f"a2a.k{k}.forward_calls", fwd[0], "calls", label=f"k={k}: all-to-alls in one forward (profiler)")
    run.metric(f"a2a.k{k}.backward_calls", bwd[0], "calls", label=f"k={k}: all-to-alls in one backward (profiler)")
    calls_rows.append([k, fwd[0], bwd[0]])

    leaving = [sum(s for dest, s in enumerate(r[k]["traffic"]["send_splits"]) if dest != rank)
               for rank, r in enumerate(ranks)]
    returning = [sum(s for src, s in enumerate(r[k]["traffic"]["recv_splits"]) if src != rank)
                 for rank, r in enumerate(ranks)]
    row_bytes = hidden * 4
    formula_total = 2 * sum(leaving) * row_bytes
    run.metric(f"bytes.k{k}.formula", formula_total / 1e3, "kB",
               label=f"k={k}: 2 x assignments leaving their rank x hidden x 4 B, summed over ranks, per forward", origin="computed")
    run.metric(f"bytes.k{k}.leaving_fraction", sum(leaving) / (n_tokens * k), "fraction",
               label=f"k={k}: share of token assignments sent to another rank (3/4 expected for a uniform router)")
    loopback = ranks[0][k]["loopback_bytes_per_forward"] if backend == "gloo" else None
    if loopback is not None:
        run.metric(f"bytes.k{k}.loopback", loopback / 1e3, "kB",
                   label=f"k={k}: bytes sent over loopback per forward, all ranks (/proc/net/dev lo tx)")
        run.metric(f"bytes.k{k}.loopback_over_formula", loopback / formula_total, "x",
                   label=f"k={k}: loopback bytes over the formula")
    else:
        run.not_run(f"k{k}: loopback byte count", "NCCL, or no /proc/net/dev: the bytes do not go over loopback")
    written = [r[k]["written_bytes_per_forward"] for r in ranks]
    if None not in written and backend == "gloo":
        per_rank_formula = [(out + back) * row_bytes for out, back in zip(leaving, returning)]
        ratios = [w / f for w, f in zip(written, per_rank_formula)]
        run.metric(f"bytes.k{k}.rank_written_over_formula.max", max(ratios), "x",
                   label=f"k={k}: per rank, bytes written (/proc/self/io wchar) over that rank's formula; worst rank")
        run.metric(f"bytes.k{k}.rank_written_over_formula.min", min(ratios), "x",
                   label=f"k={k}: per rank, bytes written over that rank's formula; best rank")
        run.metric(f"bytes.k{k}.rank_extra_bytes", sum(w - f for w, f in zip(written, per_rank_formula)) / WORLD_SIZE,
                   "B", label=f"k={k}: bytes a rank writes per forward beyond its token rows (mean over ranks): "
                              f"the counts exchange and gloo's message headers")
        for rank in range(WORLD_SIZE):
            byte_rows.append([k, rank, leaving[rank], returning[rank], round(per_rank_formula[rank] / 1e3, 2),
                              round(written[rank] / 1e3, 2), round(ratios[rank], 3)])
    else:
        run.not_run(f"k{k}: per-rank written bytes", "NCCL (no write system calls), or /proc/self/io unreadable")
    if loopback is not None:
        byte_rows.append([k, "all (loopback)", sum(leaving), sum(returning), round(formula_total / 1e3, 2),
                          round(loopback / 1e3, 2), round(loopback / formula_total, 3)])
run.table("all_to_all_calls", "All-to-alls per step, counted from torch.profiler events on every rank",
          ["k", "forward (counts + dispatch + combine)", "backward (reverse of dispatch and combine)"], calls_rows)
run.table("bytes", f"Bytes per forward: formula (rows leaving + rows returning) x hidden {hidden} x 4 B vs measured",
          ["k", "rank", "rows sent away", "rows returned to others", "formula (kB)", "measured (kB)",
           "measured / formula"], byte_rows)

# %% [markdown]
# ## Time: the expert-parallel forward vs one process
#
# The single-process forward runs every expert on all tokens (one thread on a CPU); the
# expert-parallel one runs on 4 ranks (rank 0's median over a fixed number of repeats; the ranks
# wait on each other in every all-to-all). On a CPU host with fewer cores than ranks they are
# oversubscribed and the "network" is loopback TCP: this shows the mechanics and overheads (sorting,
# three exchanges, Python per expert), not the speedup of 4 devices. On GPUs, all-to-all bandwidth
# (NVLink within a node, the network across nodes) decides whether expert parallelism pays.

# %%
time_rows = []
for k in (1, 2):
    single, ep = time_single_process(k), ranks[0][k]
    run.metric(f"time.k{k}.expert_parallel_ms", ep["median_s"] * 1e3, "ms",
               label=f"k={k}: expert-parallel forward on {WORLD_SIZE} ranks (rank 0, oversubscribed CPU)")
    run.metric(f"time.k{k}.expert_parallel_over_single", ep["median_s"] / single.median_s, "x",
               label=f"k={k}: expert-parallel forward time over single-process time")
    time_rows.append([k, round(single.median_s * 1e3, 2), round(ep["median_s"] * 1e3, 2),
                      f"{ep['p10_s'] * 1e3:.2f}-{ep['p90_s'] * 1e3:.2f}", round(ep["median_s"] / single.median_s, 2)])
run.table("time", f"Forward time, {n_tokens} tokens (CPU ranks share the host's cores: mechanics, not speedup)",
          ["k", "one process (ms)", f"expert parallel, {WORLD_SIZE} ranks (ms)", "EP p10-p90 (ms)", "EP / one process"],
          time_rows)
run.save()
_dist.shutdown()
