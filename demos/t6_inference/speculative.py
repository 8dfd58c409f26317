# %% [markdown]
# # Speculative decoding (a small draft proposes, the target verifies in one pass)
#
# A decode step of a big model is dominated by fixed costs: reading every weight (on a GPU) or
# running every layer's ops (on a CPU), whether it scores one token or a handful. Speculative
# decoding exploits that. A much smaller *draft* model proposes k tokens one by one (cheap); the
# *target* then scores all k in **one** forward pass. With greedy decoding the rule is simple: keep
# the draft's tokens while they equal the target's own argmax, and at the first disagreement take
# the target's token instead (if all k agree, the same pass also yields one bonus token). Every
# kept token is one the target would have chosen, so the output is exactly the target's greedy
# output; the draft only changes how many target passes it takes. (For sampling, Leviathan et al.
# and Chen et al. give an accept/reject rule that keeps the target's distribution exactly.)
#
# This demo checks that exactness token for token on many held-out prompts for several k, then
# measures acceptance and the real speedup, and explains it from the measured costs of one draft
# step, one target step and one k-token verification.

# %%
import dataclasses

import torch

from demos.harness.run import start
from demos.harness.timing import measure
from records.numbers import TITLE_TIE
from demos.t6_inference._model import decode, generate_greedy, held_out_prompts, trained_models

run = start(
    "speculative",
    title="Speculative decoding: exactness, acceptance and speedup",
    sizes={  # (prompt length, new tokens, draft lengths k, prompts checked, prompts timed)
        "tiny": (16, 24, [1, 3], 4, 1),
        "small": (32, 96, [1, 2, 4, 8], 12, 2),
        # 8 prompts checked: 2k generated tokens per draft length, enough for exactness and for the
        # acceptance rate to a few percent; the timed prompts (2 x 256 tokens, 5 runs each way) are
        # what the speedup rests on; k doubles from 1 to 8, the curve's shape and the page's k=1, 4, 8
        "full": (64, 256, [1, 2, 4, 8], 8, 2),
    },
    cpu_threads=1,
)
device = run.torch_device
prompt_len, n_new, draft_lengths, n_checked, n_timed = run.sizes

# %% [markdown]
# On a CPU the model runs with **one intra-op thread**: its matrices (128 wide at the CPU size) are far below the
# size where splitting one op across threads pays, and CPU serving scales with one worker per core
# instead. (A second thread also makes every op wait for it whenever the machine is busy with
# other work: on the 2-core machine of the CPU record, a one-token decode step became ten times slower
# with two threads under load.) The harness's ceilings are measured with every thread.

# %%
target, draft, model_info = trained_models(device, run.size, log=run.log)
for role, model in (("target", target), ("draft", draft)):
    run.metric(f"{role}.params_m", model.n_params() / 1e6, "M", label=f"{role} model parameters (millions)", origin="computed")
    run.metric(f"{role}.held_out_bits_per_byte", model_info[role]["held_out_bits_per_byte"], "bits/byte",
               label=f"{role} model: held-out loss after its brief training")

# %% [markdown]
# ## The algorithm
#
# Both models keep a KV cache. Invariant at the top of the loop: both caches hold every token but
# the last. The draft first catches up on tokens it has not seen (normally just the last one,
# two after a fully accepted round), then proposes k tokens greedily. The target runs once on the
# last token plus the k proposals, which gives its own greedy choice after each prefix. The
# accepted prefix plus the target's next token are appended, and both caches are *rolled back* by
# lowering their length: the entries of rejected tokens are simply overwritten later.

# %%
@dataclasses.dataclass
class Stats:
    proposed: int = 0
    accepted: int = 0
    target_passes: int = 0
    draft_steps: int = 0


@torch.no_grad()
def speculative_generate(target, draft, prompt, n_new: int, k: int, stats: Stats | None = None):
    stats = stats if stats is not None else Stats()
    prompt_len = prompt.shape[1]
    capacity = prompt_len + n_new + k + 1
    target_cache, draft_cache = target.new_cache(1, capacity), draft.new_cache(1, capacity)
    target(prompt[:, :-1], target_cache)  # prefill all but the last prompt token
    draft(prompt[:, :-1], draft_cache)
    tokens = prompt
    while tokens.shape[1] < prompt_len + n_new:
        # 1. the draft catches up, then proposes k tokens one at a time
        logits = draft(tokens[:, draft_cache.length:], draft_cache)
        proposal = [logits[:, -1:].argmax(-1)]
        for _ in range(k - 1):
            proposal.append(draft(proposal[-1], draft_cache)[:, -1:].argmax(-1))
        stats.draft_steps += k
        proposal = torch.cat(proposal, dim=1)  # (1, k)
        # 2. the target scores the last token and all k proposals in one pass
        start = tokens.shape[1] - 1
        target_cache.length = start
        choice = target(torch.cat([tokens[:, -1:], proposal], dim=1), target_cache).argmax(-1)  # (1, k + 1)
        stats.target_passes += 1
        # 3. keep the longest agreeing prefix, then the target's own next token
        agree = (proposal == choice[:, :k])[0].int()
        n_ok = int(agree.cumprod(0).sum())
        stats.proposed, stats.accepted = stats.proposed + k, stats.accepted + n_ok
        tokens = torch.cat([tokens, proposal[:, :n_ok], choice[:, n_ok:n_ok + 1]], dim=1)
        # 4. roll back: each cache keeps only entries of tokens that were kept (all but the new last one)
        target_cache.length = start + n_ok + 1
        draft_cache.length = min(draft_cache.length, start + n_ok + 1)
    return tokens[:, :prompt_len + n_new]


# %% [markdown]
# ## Exactness: token for token, on many prompts
#
# The reference is the target's own greedy decoding with its KV cache, one token per pass. Both
# run in float32 on every device; the only difference is that the speculative version scores
# several tokens per pass, which changes the floating-point summation order, not the math.

# %%
# Exact up to rounding: scoring k+1 tokens in one pass runs other kernels (other matmul shapes, a
# masked attention) than k+1 one-token steps, so the logits differ in their last bits. Where the
# target's two best logits are closer than that, either token is the greedy choice and the two
# decodings may part there. A difference is therefore accepted only at a near-tie: the target's own
# top-2 gap at the first differing position below 1e-4 of the row's largest |logit| (float32 rounding
# differences are ~1e-6 of it). Any other difference fails the check.
NEAR_TIE = 1e-4


@torch.no_grad()
def parts_at_a_near_tie(out, reference) -> bool:
    position = int((out != reference)[0].nonzero()[0])
    logits = target(reference[:, :position])[0, -1].float()  # what the target saw when choosing that token
    best, second = logits.topk(2).values.tolist()
    return best - second <= NEAR_TIE * float(logits.abs().max())


prompts = held_out_prompts(n_checked, prompt_len, seed=2).to(device)
references = [generate_greedy(target, p[None], n_new) for p in prompts]
acceptance = {}
for k in draft_lengths:
    stats = Stats()
    identical = near_ties = 0
    for prompt, reference in zip(prompts, references):
        out = speculative_generate(target, draft, prompt[None], n_new, k, stats)
        if torch.equal(out, reference):
            identical += 1
        else:
            near_ties += parts_at_a_near_tie(out, reference)
    run.check(f"exact.k{k}", identical + near_ties == len(prompts),
              f"{identical}/{len(prompts)} prompts: all {n_new} tokens identical to the target's greedy decoding"
              + (f"; {near_ties} part from it at a near-tie of the target's top-2 logits" if near_ties else ""))
    acceptance[k] = stats
    run.log(f"  k={k}: acceptance {stats.accepted / stats.proposed:.2f}, "
            f"{(stats.accepted + stats.target_passes) / stats.target_passes:.2f} tokens per target pass")
run.artifact("sample", "prompt:\n" + decode(prompts[0].tolist()) + "\n\ntarget's greedy continuation:\n"
             + decode(references[0][0, prompt_len:].tolist()))

# %% [markdown]
# The check can fail: a draft-side bug would not show (the target overrules it), so the test
# that matters is on the verification. Accepting one token too many, the classic off-by-one,
# must break exactness; this is checked here on the same prompts with a deliberately wrong rule.

# %%
def off_by_one_accepts_more(target, draft, prompt, n_new, k):
    """Like speculative_generate, but keeps the first disagreeing draft token too (wrong)."""
    tokens, cache = prompt, target.new_cache(1, prompt.shape[1] + n_new + k + 1)
    target(prompt[:, :-1], cache)
    while tokens.shape[1] < prompt.shape[1] + n_new:
        proposal = [draft(tokens)[:, -1:].argmax(-1)]
        for _ in range(k - 1):
            proposal.append(draft(torch.cat([tokens, *proposal], dim=1))[:, -1:].argmax(-1))
        proposal = torch.cat(proposal, dim=1)
        start = tokens.shape[1] - 1
        cache.length = start
        choice = target(torch.cat([tokens[:, -1:], proposal], dim=1), cache).argmax(-1)
        n_ok = min(k, int((proposal == choice[:, :k])[0].int().cumprod(0).sum()) + 1)  # the bug: + 1
        tokens = torch.cat([tokens, proposal[:, :n_ok], choice[:, n_ok:n_ok + 1]], dim=1)
        cache.length = start + n_ok + 1
    return tokens[:, :prompt.shape[1] + n_new]


with torch.no_grad():
    wrong = sum(not torch.equal(off_by_one_accepts_more(target, draft, p[None], n_new, max(draft_lengths)), r)
                for p, r in zip(prompts, references))
rejected = acceptance[max(draft_lengths)].accepted < acceptance[max(draft_lengths)].proposed
run.check("exactness_check_catches_an_off_by_one", wrong > 0 or not rejected,
          f"the off-by-one acceptance rule changed the output on {wrong}/{len(prompts)} prompts"
          + ("" if rejected else " (the draft was never rejected, so there was nothing to catch)"))

# %% [markdown]
# ## The costs that decide the speedup
#
# One draft step, one target decode step, and one target pass over k + 1 tokens (verification),
# each timed at a mid-sequence position. If verifying k + 1 tokens costs about as much as one
# decode step, the target's cost is amortized over every accepted token.

# %%
mid = prompt_len + n_new // 2
sequence = references[0]


def one_step(model, n_tokens):
    cache = model.new_cache(1, mid + n_tokens)
    with torch.no_grad():
        model(sequence[:, :mid], cache)

    def step():
        cache.length = mid
        with torch.no_grad():
            return model(sequence[:, mid:mid + n_tokens], cache)
    return run.time(step)


cost_timing = {"draft_step": one_step(draft, 1), "target_step": one_step(target, 1)}
for k in draft_lengths:
    cost_timing[f"verify_k{k}"] = one_step(target, k + 1)
cost = {name: t.median_s for name, t in cost_timing.items()}
run.table("costs", "Cost of one pass (batch 1, mid-sequence)", ["pass", "median (ms)", "relative to one target step"],
          [[name, round(s * 1e3, 3), round(s / cost["target_step"], 2)] for name, s in cost.items()])
run.metric("cost.draft_over_target", cost["draft_step"] / cost["target_step"], "x",
           label="one draft step over one target decode step")
k_max = max(draft_lengths)
run.metric(f"cost.verify_k{k_max}_over_step", cost[f"verify_k{k_max}"] / cost["target_step"], "x",
           label=f"one target pass over {k_max + 1} tokens over a one-token target step")

# %% [markdown]
# ## Measured speedup
#
# Each variant generates the same tokens for the same prompts; end-to-end time per call with the
# harness (fewer repeats than usual: a call is a whole generation). The baseline is the target's
# own greedy decoding with its KV cache. The *predicted* speedup uses only the measured costs and
# the measured tokens per target pass: (tokens per pass x one target step) / (k draft steps + one
# verification).

# %%
few = dataclasses.replace(run.settings, warmup=0, min_repeats=3, max_repeats=5)  # the first call warms up
timed = prompts[:n_timed]
baseline = measure(lambda: [generate_greedy(target, p[None], n_new) for p in timed], run.device, few)
rows, speedups, predicted, rates = [], [], [], []
speedup_spreads, predicted_spreads = [], []  # per k, the largest spread of the timings each point comes from
for k in draft_lengths:
    timing = measure(lambda: [speculative_generate(target, draft, p[None], n_new, k) for p in timed], run.device, few)
    s = acceptance[k]
    per_pass = (s.accepted + s.target_passes) / s.target_passes
    prediction = per_pass * cost["target_step"] / (k * cost["draft_step"] + cost[f"verify_k{k}"])
    speedups.append(baseline.median_s / timing.median_s)
    predicted.append(prediction)
    speedup_spreads.append(max(baseline.spread, timing.spread))
    predicted_spreads.append(max(cost_timing[name].spread for name in ("target_step", "draft_step", f"verify_k{k}")))
    rates.append(s.accepted / s.proposed)
    rows.append([k, round(rates[-1], 3), round(per_pass, 2), round(timing.median_s * 1e3, 1),
                 round(speedups[-1], 2), round(prediction, 2)])
    run.metric(f"k{k}.acceptance", rates[-1], "fraction", label=f"k={k}: share of drafted tokens the target accepted")
    run.metric(f"k{k}.tokens_per_pass", per_pass, "tokens", label=f"k={k}: tokens produced per target pass")
    run.metric(f"k{k}.speedup", speedups[-1], "x", label=f"k={k}: measured speedup over the target's greedy decoding")
    run.metric(f"k{k}.predicted_speedup", prediction, "x", label=f"k={k}: speedup predicted from the measured costs", origin="computed")
run.table("speculative", f"Speculative decoding, {n_new} tokens after {prompt_len}-token prompts "
          f"(baseline {baseline.median_s * 1e3:.1f} ms for {n_timed} prompt(s))",
          ["k", "acceptance", "tokens per target pass", "time (ms)", "measured speedup", "predicted speedup"], rows)
best = max(range(len(draft_lengths)), key=lambda i: speedups[i])
finding = "best speedup" if speedups[best] >= 1 else "no k faster, best speedup"  # below 1 is a slowdown
near = [k for k, x in zip(draft_lengths, speedups) if x * TITLE_TIE >= speedups[best]]  # one run cannot order these
run.series("speedup", f"Speculative decoding: {finding} {speedups[best]:.2f}x (k = {', '.join(map(str, near))}), "
           f"acceptance {rates[best]:.0%}", "draft length k", "x (or fraction)",
           {"measured speedup": (draft_lengths, speedups, speedup_spreads),
            "predicted from measured costs": (draft_lengths, predicted, predicted_spreads),
            "acceptance rate": (draft_lengths, rates)}, hlines={"no speedup": 1.0})
run.metric("best.speedup", speedups[best], "x", label=f"best measured speedup (k={draft_lengths[best]})")
run.metric("baseline.ms_per_token", baseline.median_s / (n_timed * n_new) * 1e3, "ms",
           label="target's greedy decoding with KV cache: time per token")
run.save()
