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
# This demo builds that layer on 4 real torch.distributed ranks (gloo on CPU) with 2 experts per rank,
# checks output and gradients against the same layer computed in one process with every expert,
# then measures what expert parallelism is about: how evenly the router spreads tokens (and what a
# capacity limit would drop), how many all-to-alls one step makes, how many bytes they move against
# the formula, and what the whole forward costs next to one process.

# %%
import dataclasses
import math
import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_autograd
import torch.nn.functional as F

from demos.harness.device import resolve as resolve_device
from demos.harness.run import start
from demos.harness.timing import measure
from demos.t7_parallelism import _dist

WORLD_SIZE = 4
EXPERTS_PER_RANK = 2
N_EXPERTS = WORLD_SIZE * EXPERTS_PER_RANK
SKEW = 2.0  # added to expert 0's router logit in the deliberately skewed router

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
# Where the ranks run. Launched as a plain script, `_dist.launch` forks 4 CPU processes joined by a
# gloo process group over TCP on 127.0.0.1 (one intra-op thread each). One GPU per rank needs
# torchrun (`torchrun --nproc-per-node 4 -m demos.t7_parallelism.expert_parallel --device cuda`),
# where the all-to-alls go through NCCL; otherwise the ranks run on the CPU and the GPU variant is
# recorded as not run.

# %%
on_gpus = run.device.is_gpu and _dist.under_torchrun() and torch.cuda.device_count() >= WORLD_SIZE
rank_device = run.torch_device if on_gpus else torch.device("cpu")
backend = _dist.backend_for(rank_device)
timing_device = run.device if rank_device.type == run.device.kind else resolve_device("cpu")
if run.device.is_gpu and not on_gpus:
    run.not_run("NCCL all-to-all across GPUs",
                f"needs torchrun with one GPU per rank ({WORLD_SIZE}); this process is "
                f"{'under torchrun' if _dist.under_torchrun() else 'not under torchrun'} and sees "
                f"{torch.cuda.device_count()} GPU(s), so the {WORLD_SIZE} ranks ran on the CPU over gloo")
run.log(f"{WORLD_SIZE} ranks on {rank_device.type} ({backend}), {N_EXPERTS} experts ({EXPERTS_PER_RANK} per rank), "
        f"{tokens_per_rank} tokens per rank, hidden {hidden}, expert FFN {ffn_width}")

# %% [markdown]
# ## The layer, in one process (the reference)
#
# Router: a linear layer and a softmax over the E experts; each token goes to its top-k experts and
# their outputs are summed, weighted by the router's probabilities (the *gates*; not renormalized
# over the k chosen, so the router gets a gradient from k = 1 too, as in Switch). Each expert is an
# FFN `gelu(x @ W1) @ W2`. With every expert in one process this is a loop over experts, each on the
# tokens that chose it.

# %%
@dataclasses.dataclass
class MoEParams:
    router_w: torch.Tensor  # (hidden, E)
    router_b: torch.Tensor  # (E,)
    w1: torch.Tensor  # (E, hidden, ffn)
    w2: torch.Tensor  # (E, ffn, hidden)

    def to(self, dtype, device="cpu"):
        return MoEParams(*(t.to(device, dtype) for t in dataclasses.astuple(self)))

    def requiring_grad(self):
        return MoEParams(*(t.detach().clone().requires_grad_() for t in dataclasses.astuple(self)))


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
params = MoEParams(
    router_w=torch.randn(hidden, N_EXPERTS, generator=generator, dtype=torch.float64) * hidden ** -0.5,
    router_b=torch.zeros(N_EXPERTS, dtype=torch.float64),
    w1=torch.randn(N_EXPERTS, hidden, ffn_width, generator=generator, dtype=torch.float64) * hidden ** -0.5,
    w2=torch.randn(N_EXPERTS, ffn_width, hidden, generator=generator, dtype=torch.float64) * ffn_width ** -0.5,
)
skewed_params = dataclasses.replace(params, router_b=params.router_b + SKEW * F.one_hot(
    torch.tensor(0), N_EXPERTS).double())
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
# version: its backward is the reverse all-to-all, so gradients travel back through the same real
# collectives (this function exists in torch 2.11 and 2.13; 2.13 marks it deprecated in favour of a
# functional-collectives variant, whose warning is silenced here). The counts exchange is a plain
# `dist.all_to_all_single`: integers carry no gradient.

# %%
def all_to_all_autograd(rows, output_splits, input_splits):
    output = rows.new_empty(sum(output_splits), rows.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return dist_autograd.all_to_all_single(output, rows, output_splits, input_splits)


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
# Inside every rank, per k: the forward and backward, compared right away with the float64 reference
# (a rank raises on a mismatch, so nothing is timed or saved after a wrong result); the all-to-alls of
# one forward and one backward, counted from `torch.profiler` events (gloo names each collective
# `gloo:all_to_all`); bytes sent, counted two ways around a few forwards: rank 0 reads the machine's
# loopback transmit counter (`/proc/net/dev`, interface `lo`: every rank's traffic, taken between
# barriers, the least of three tries since other processes may use loopback too), and each rank
# reads its own `wchar` (bytes it wrote through write system calls, `/proc/self/io`; gloo writes
# its messages that way); then the forward's time with a fixed repeat count (every rank must run the
# same number of collectives). Last, the skewed router's token counts.

# %%
TOLERANCE = dict(rtol=1e-4, atol=1e-5)  # float32 layer vs float64 reference


def count_all_to_alls(fn):
    calls = _dist.collective_calls(fn)
    return calls[f"{backend}:all_to_all"], calls["c10d::alltoall_base_"]


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

        calls["forward"] = count_all_to_alls(forward)
        loss = (y * probe[mine].to(device, torch.float32)).sum()
        calls["backward"] = count_all_to_alls(loss.backward)
        got = {"y": y.detach(), "x.grad": x_leaf.grad, "router_w.grad": local[0].grad,
               "router_b.grad": local[1].grad, "w1.grad": local[2].grad, "w2.grad": local[3].grad}
        ref = reference[k]
        for name, slicer in (("y", mine), ("x.grad", mine), ("w1.grad", experts), ("w2.grad", experts)):
            torch.testing.assert_close(got[name].cpu().double(), ref[name][slicer], **TOLERANCE)

        def step():
            return moe_expert_parallel(x, *(t.detach() for t in local), k, world_size)

        with torch.no_grad():
            loopback, written = [], []
            for _ in range(3):
                dist.barrier()
                lo_before, wchar_before = _dist.loopback_tx_bytes(), _dist.bytes_written_by_this_process()
                for _ in range(forwards_per_count):
                    step()
                wchar_after = _dist.bytes_written_by_this_process()
                dist.barrier()
                lo_after = _dist.loopback_tx_bytes()
                loopback.append(None if lo_before is None else (lo_after - lo_before) / forwards_per_count)
                written.append(None if wchar_before is None else (wchar_after - wchar_before) / forwards_per_count)
            settings = dataclasses.replace(run.settings, warmup=1, min_repeats=timing_repeats,
                                           max_repeats=timing_repeats, flush_l2=False)
            timing = measure(step, timing_device, settings)
            skewed_traffic = {}
            moe_expert_parallel(x, p32.router_w, skewed_params.router_b.to(device, torch.float32),
                                *(t.detach() for t in local[2:]), k, world_size, skewed_traffic)

        results[k] = {
            **{name: t.detach().cpu() for name, t in got.items()},
            "calls": calls, "traffic": traffic, "skewed_traffic": skewed_traffic,
            "loopback_bytes_per_forward": min(loopback) if None not in loopback else None,
            "written_bytes_per_forward": min(written) if None not in written else None,
            "median_s": timing.median_s, "p10_s": timing.p10_s, "p90_s": timing.p90_s,
        }
    return results


ranks = _dist.launch(rank_worker, WORLD_SIZE, device=rank_device)
if ranks is None:  # another rank under torchrun: rank 0 writes the record
    _dist.shutdown()
    raise SystemExit(0)

# %% [markdown]
# ## Correctness: the same layer, output and gradients
#
# Gathered from the 4 ranks, in rank order: the output rows and input gradients (each rank's own
# tokens), the expert weights' gradients (each rank's two experts: complete on their owner, because
# every token that used an expert sent its gradient back through the backward all-to-all), and the
# router's gradients, which are *partial* on every rank (the router is replicated, as in data
# parallelism): their sum over ranks, which a data-parallel all-reduce would form in training, must
# equal the single-process gradient. Tolerance: float32 against float64, elementwise
# |err| <= 1e-5 + 1e-4 |ref|; the router's gradients are sums over every token in which terms cancel,
# so their absolute tolerance is 1e-4 times the gradient's largest entry instead.

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
# An expert's cost on its rank grows with the tokens it receives, and the all-to-all waits for the
# slowest rank, so the *imbalance* max/mean of tokens per expert is the straggler factor. Fixed-size
# implementations (GShard, Switch) give each expert a *capacity* C = cf x tokens x k / E (cf, the
# capacity factor, >= 1) and drop the assignments over it (the token then skips the layer through the
# residual connection). Below: the random-init router, and the same router with +2 on expert 0's
# logit (a router that has collapsed toward one expert, the failure a load-balancing loss is there
# to prevent). Dropped fractions are computed from the measured counts, over all 4 ranks' tokens.

# %%
CAPACITY_FACTORS = (1.0, 1.25, 2.0)
load_rows, bars = [], {}
for k in (1, 2):
    for router, key in (("random", "traffic"), ("skewed", "skewed_traffic")):
        per_expert = sum(r[k][key]["sent_per_expert"] for r in ranks).cpu()
        per_rank = per_expert.view(WORLD_SIZE, EXPERTS_PER_RANK).sum(1)
        mean = n_tokens * k / N_EXPERTS
        imbalance = float(per_expert.max()) / mean
        name = f"load.{router}.k{k}"
        run.metric(f"{name}.imbalance", imbalance, "x",
                   label=f"{router} router, k={k}: tokens of the busiest expert over the mean per expert")
        run.metric(f"{name}.rank_imbalance", float(per_rank.max()) / (mean * EXPERTS_PER_RANK), "x",
                   label=f"{router} router, k={k}: tokens received by the busiest rank over the mean per rank")
        dropped = []
        for cf in CAPACITY_FACTORS:
            capacity = math.floor(cf * n_tokens * k / N_EXPERTS)
            over = int((per_expert - capacity).clamp(min=0).sum())
            dropped.append(over / (n_tokens * k))
            run.metric(f"{name}.dropped.cf{cf}", dropped[-1], "fraction",
                       label=f"{router} router, k={k}: share of token assignments over capacity at cf={cf} "
                             f"(C={capacity})")
        load_rows.append([router, k, *per_expert.tolist(), round(imbalance, 2),
                          *[f"{d:.1%}" for d in dropped]])
        if k == 2:
            bars[f"{router} router"] = (list(range(N_EXPERTS)), per_expert.tolist())
run.table("load", f"Tokens per expert over {n_tokens} tokens ({WORLD_SIZE} ranks x {tokens_per_rank}); experts "
          f"2r and 2r+1 live on rank r; dropped = share of assignments over capacity C = cf x tokens x k / E",
          ["router", "k", *[f"expert {e}" for e in range(N_EXPERTS)], "imbalance (max/mean)",
           *[f"dropped at cf={cf}" for cf in CAPACITY_FACTORS]], load_rows)
run.series("tokens_per_expert", f"Tokens per expert, k=2, {n_tokens} tokens", "expert", "tokens", bars,
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
               label=f"k={k}: 2 x assignments leaving their rank x hidden x 4 B, summed over ranks, per forward")
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
# The single-process forward runs every expert on all tokens with one thread; the expert-parallel
# one runs on 4 ranks with one thread each (rank 0's median over a fixed number of repeats; all
# ranks wait on each other in every all-to-all). **Caveat:** on a CPU host the 4 ranks share the
# machine's cores (2 on the machine of the CPU record), so they are oversubscribed, and the
# "network" is loopback TCP: this shows the mechanics and the overheads (sorting, three exchanges,
# Python per expert), not the speedup of 4 devices. On GPUs, all-to-all bandwidth (NVLink within
# a node, the network across nodes) is what decides whether expert parallelism pays.

# %%
p32 = params.to(torch.float32, rank_device)
x32 = x_all.to(rank_device, torch.float32)
time_rows = []
for k in (1, 2):
    with torch.no_grad():
        single = measure(lambda: moe_single_process(x32, p32, k), timing_device,
                         dataclasses.replace(run.settings, flush_l2=False))  # as the ranks time theirs
    ep = ranks[0][k]
    run.metric(f"time.k{k}.single_ms", single.median_s * 1e3, "ms",
               label=f"k={k}: one process, all {N_EXPERTS} experts, {n_tokens} tokens, one thread")
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
