# %% [markdown]
# # Batching under load: static, dynamic and continuous, driven by a real model's step times
#
# A decode step reads the model's weights (and runs its kernels) once, however many sequences it
# advances, so a step over 16 sequences costs far less than 16 steps over one. Batching buys
# throughput; the question is what it costs in latency. **Static batching** forms a batch, runs it
# until its *longest* request finishes, and only then takes new requests: short requests leave
# early but their slots idle, and arrivals wait for the whole batch. **Continuous (iteration-level)
# batching**, as in Orca and vLLM, revisits the batch at every decode step: finished requests leave
# and waiting ones join at once (their prefill runs in that iteration).
#
# **Dynamic (server-side) batching** sits between them: it collects requests until the batch is
# full or the oldest has waited a timeout, then runs the group as a static batch.
#
# This demo measures the trained model's prefill and decode step times at several batch sizes,
# then feeds them to a discrete-event simulation of a server receiving Poisson arrivals, at several
# loads, under all three policies (dynamic batching with three timeouts). It reports latency
# percentiles, time to first token (TTFT), time per output token (TPOT) and throughput, and checks
# the simulator's bookkeeping with Little's law.

# %%
import math
import random

import numpy as np
import torch

from demos.harness.run import start
from demos.t6_inference._model import held_out_prompts, trained_models
from demos.t6_inference._serving import REQUEST_MIX, Server, output_lengths
from demos.t6_inference._step_fit import interpolate, monotone  # the isotonic fit described below

run = start(
    "batching",
    title="Static, dynamic and continuous batching under Poisson load, from measured step times",
    sizes=REQUEST_MIX,  # (batch sizes measured, prompt length, output lengths (min, max), requests per simulation)
    cpu_threads=1,
)
device = run.torch_device
batch_sizes, prompt_len, (out_min, out_max), n_requests = run.sizes
LOADS = [0.1, 0.3, 0.5, 0.7, 0.85, 0.95]  # arrival rate as a fraction of continuous batching's peak token rate
serving_dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
target, _, _ = trained_models(device, run.size, log=run.log)
model = target.to(serving_dtype)

# %% [markdown]
# On a CPU the model runs with **one intra-op thread**: its matrices (128 wide at the CPU size) are far below the
# size where splitting one op across threads pays, and CPU serving scales with one worker per core
# instead. (A second thread also makes every op wait for it whenever the machine is busy with
# other work: on the 2-core machine of the CPU record, a one-token decode step became ten times slower
# with two threads under load.) The harness's ceilings are measured with every thread.

# %% [markdown]
# ## Measured step times of the real model
#
# *Prefill* of b prompts of `prompt_len` tokens at once, and one *decode* step for b sequences
# whose caches hold `prompt_len + mean output` tokens (mid-generation; decode time changes little
# with the context at these lengths, see the KV-cache demo). Each is checked first: a batched
# decode must give every sequence the same logits it gets alone.

# %%
mid_context = prompt_len + (out_min + out_max) // 2
prompts = held_out_prompts(max(batch_sizes), prompt_len, seed=3).to(device)
with torch.no_grad():
    alone = torch.cat([model(prompts[i:i + 1])[:, -1] for i in range(4)])
    together = model(prompts[:4])[:, -1]
if run.device.is_gpu:
    # In bf16 the batched and the one-by-one runs round differently (other GEMM tile shapes, other
    # reduction orders), and a one-step difference in a hidden state travels through every layer. An
    # element-wise atol + rtol*|ref| then means nothing: a logit near 0 has a tiny allowance while its
    # error is set by the row's scale. So the check is stated in bf16 steps at the scale of each row's
    # logits: every logit within 16 steps (ulps) of bf16 at the row's largest |logit| (one step there
    # is 2^-7 of its power of two, so 16 steps are 6-12% of the largest logit; one-step roundings
    # spread over 12 layers are expected at 1-2%), and the top-1 token the same, except where the
    # reference's two best logits are themselves within that bound (a near-tie that rounding may
    # flip). A batching bug (a mask letting sequences see each other, a cache row mixed up) moves
    # logits by the whole scale and changes tokens.
    ULPS = 16
    got, ref = together.float(), alone.float()
    row_scale = ref.abs().amax(dim=-1, keepdim=True)
    ulp = torch.exp2(torch.floor(torch.log2(row_scale)) - 7)  # bf16 keeps 8 significant bits
    allowed = ULPS * ulp
    err = (got - ref).abs()
    top2 = ref.topk(2, dim=-1).values
    near_tie = (top2[:, 0] - top2[:, 1]) <= allowed.squeeze(-1)
    same_top1 = (got.argmax(-1) == ref.argmax(-1)) | near_tie
    run.check("batched_prefill_equals_one_by_one", bool(torch.isfinite(got).all() and (err <= allowed).all()
                                                         and same_top1.all()),
              f"max |err| {float(err.max()):.3g} = {float((err / ulp).max()):.1f} bf16 steps at the row's logit scale "
              f"(allowed {ULPS}); top-1 token equal in {int(same_top1.sum())}/{len(same_top1)} prompts "
              f"({int(near_tie.sum())} near-ties) vs each prompt run alone")
    run.checks[-1].update({"max_abs_err": float(err.max())})
else:
    run.check_close("batched_prefill_equals_one_by_one", together.float(), alone.float(), rtol=1e-4, atol=1e-4,
                    reference_name="each prompt run alone")

prefill_s, decode_s = {}, {}
for b in batch_sizes:
    batch_prompts = prompts[:b]
    cache = model.new_cache(b, mid_context + 1)

    def prefill():
        cache.length = 0
        with torch.no_grad():
            return model(batch_prompts, cache)

    prefill_s[b] = run.time(prefill).median_s
    cache.length = 0
    with torch.no_grad():  # fill the cache up to mid_context with a real continuation
        model(prompts[:b].repeat(1, math.ceil(mid_context / prompt_len))[:, :mid_context], cache)
    next_token = prompts[:b, :1]

    def decode_step():
        cache.length = mid_context
        with torch.no_grad():
            return model(next_token, cache)

    decode_s[b] = run.time(decode_step).median_s
    run.log(f"  batch {b:4d}: prefill {prefill_s[b] * 1e3:8.3f} ms, decode step {decode_s[b] * 1e3:8.3f} ms "
            f"({b / decode_s[b]:9.0f} tokens/s)")

# %% [markdown]
# A step never gets cheaper when the batch grows: it does the same work per sequence plus more
# sequences. A measured curve that dips (batch 4 faster than batch 1) is noise, and a simulation fed
# with it would serve a batch faster than a lone request. So the simulator uses the monotone
# (non-decreasing) curve closest to the measurements, an isotonic fit (pool adjacent violators), and
# the record keeps both and how far the fit had to move a point (`monotone` in `_step_fit.py`).

# %%
prefill_fit, decode_fit = monotone(prefill_s), monotone(decode_s)
for name, measured, fit in (("prefill", prefill_s, prefill_fit), ("decode", decode_s, decode_fit)):
    run.metric(f"{name}.fit_max_adjust", max(abs(fit[b] / measured[b] - 1) for b in batch_sizes), "fraction",
               label=f"largest relative change the monotone fit made to a measured {name} step time")
    run.metric(f"{name}.min_consecutive_ratio", min(measured[b2] / measured[b1] for b1, b2 in
                                                    zip(batch_sizes, batch_sizes[1:])), "x",
               label=f"smallest ratio of a measured {name} step time to the one at the next smaller batch (>= 1: monotonic)")

run.table("step_times", f"Measured step times ({str(serving_dtype)[6:]}; prompt {prompt_len}, decode context {mid_context}); "
          "the simulator uses the monotone fit", ["batch", "prefill (ms)", "decode step (ms)", "decode step, fit (ms)",
                                                  "decode tokens/s", "decode step vs batch 1"],
          [[b, round(prefill_s[b] * 1e3, 3), round(decode_s[b] * 1e3, 3), round(decode_fit[b] * 1e3, 3),
            round(b / decode_s[b], 1), round(decode_s[b] / decode_s[1], 2)] for b in batch_sizes])
b_max = max(batch_sizes)
run.metric("decode.step_ratio_bmax", decode_s[b_max] / decode_s[1], "x",
           label=f"one decode step at batch {b_max} over one at batch 1")
run.metric("decode.throughput_gain_bmax", b_max * decode_s[1] / decode_s[b_max], "x",
           label=f"decode tokens/s at batch {b_max} over batch 1")


# %% [markdown]
# ## The simulator
#
# Time advances from event to event. Arrivals are Poisson (exponential gaps); each request wants
# `prompt_len` prompt tokens and an output length drawn uniformly from `[out_min, out_max]`. The
# server holds at most `b_max` sequences. A request's **TTFT** is from its arrival to the end of
# the prefill that produced its first token; its **latency** is from arrival to its last token
# (for static batching that is generous: it is counted done at its own last token, though its slot
# stays busy until the batch ends); its **TPOT** is the time from its first token to its last over
# the tokens in between. While time advances, the simulator integrates the number of
# requests in the system (waiting + running) from its own state, for the Little's-law check.

# %%
def run_batch_to_completion(s: Server, batch: list[int]) -> None:
    """One static batch: a prefill for all, then decode steps, padded, until its longest request is done."""
    s.batches.append(len(batch))
    s.advance(s.now + interpolate(prefill_fit, len(batch)))
    remaining = {}
    for r in batch:
        s.first_token[r] = s.now
        remaining[r] = s.lengths[r] - 1
        if remaining[r] == 0:
            s.finish(r)
    while any(remaining.values()):
        s.advance(s.now + interpolate(decode_fit, len(batch)))
        for r in remaining:
            if remaining[r]:
                remaining[r] -= 1
                if remaining[r] == 0:
                    s.finish(r)


def simulate_static(arrivals, lengths) -> Server:
    """Whenever the server is free, take whatever is waiting (up to b_max) and run it to completion."""
    s = Server(arrivals, lengths)
    while not s.all_done():
        if not s.queue:
            s.idle_until_arrival()
        run_batch_to_completion(s, [s.queue.popleft() for _ in range(min(len(s.queue), b_max))])
    return s


def simulate_dynamic(arrivals, lengths, timeout: float) -> Server:
    """Dynamic (server-side) batching: once the server is free, collect requests until b_max are
    waiting or the oldest has waited ``timeout`` seconds, then run that batch to completion.
    With timeout 0 it is static batching (checked below)."""
    s = Server(arrivals, lengths)
    while not s.all_done():
        if not s.queue:
            s.idle_until_arrival()
        deadline = s.arrivals[s.queue[0]] + timeout
        while len(s.queue) < b_max and s.next_arrival_time() <= deadline:
            s.advance(s.next_arrival_time())
        if len(s.queue) < b_max and deadline > s.now:
            s.advance(deadline)
        run_batch_to_completion(s, [s.queue.popleft() for _ in range(min(len(s.queue), b_max))])
    return s


def simulate_continuous(arrivals, lengths) -> Server:
    s = Server(arrivals, lengths)
    running = {}  # request -> tokens still to generate
    while not s.all_done():
        if not s.queue and not running:
            s.idle_until_arrival()
        admitted = [s.queue.popleft() for _ in range(min(len(s.queue), b_max - len(running)))]
        if admitted:  # this iteration's prefill for the newcomers
            s.advance(s.now + interpolate(prefill_fit, len(admitted)))
            for r in admitted:
                s.first_token[r] = s.now
                if lengths[r] == 1:
                    s.finish(r)
        if running:  # one decode step for everyone already running
            s.advance(s.now + interpolate(decode_fit, len(running)))
            for r in list(running):
                running[r] -= 1
                if running[r] == 0:
                    del running[r]
                    s.finish(r)
        running.update({r: lengths[r] - 1 for r in admitted if lengths[r] > 1})
    return s


# %% [markdown]
# ## Loads
#
# Load is set against the best case for continuous batching: a full batch of `b_max` decoding
# without pause, `b_max / decode(b_max)` tokens per second, divided by the mean output length.
# Every policy sees the same arrival times and output lengths at a given load. Dynamic batching
# runs with three timeouts, set as fractions of one request's service time alone (its prefill plus
# its decode steps at batch 1, for the mean output length): a tenth, a half and twice that.

# %%
def poisson_arrivals(rate: float, n: int, rng: random.Random) -> list[float]:
    """n arrival times of a Poisson stream of the given rate: exponential gaps, summed."""
    t, arrivals = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        arrivals.append(t)
    return arrivals


mean_out = (out_min + out_max) / 2
peak_requests_per_s = b_max / decode_fit[b_max] / mean_out
service_s = prefill_fit[1] + (mean_out - 1) * decode_fit[1]
TIMEOUT_FRACTIONS = (0.1, 0.5, 2.0)
lengths = output_lengths(n_requests, run.size, run.options.seed)  # the same mix as the paged-KV demo's
rng = random.Random(run.options.seed + 1)  # arrival times
SIMULATORS = {"static": simulate_static, "continuous": simulate_continuous}
for f in TIMEOUT_FRACTIONS:
    SIMULATORS[f"dynamic_t{round(100 * f)}"] = lambda a, n, timeout=f * service_s: simulate_dynamic(a, n, timeout)

results = {}  # (policy, load) -> dict of statistics
little_errors = []
for load in LOADS:
    arrivals = poisson_arrivals(load * peak_requests_per_s, n_requests, rng)
    if load == 0.5:  # dynamic batching with no timeout takes whatever waits: it must be static batching
        zero, static = simulate_dynamic(arrivals, lengths, 0.0), simulate_static(arrivals, lengths)
        run.check("dynamic_timeout0_is_static", zero.done == static.done and zero.first_token == static.first_token,
                  f"every request's first-token and finish time equal for {n_requests} requests at load {load}")
    for policy, simulate in SIMULATORS.items():
        s = simulate(arrivals, lengths)
        if policy == "continuous" and load == LOADS[0]:
            low_run, low_arrivals = s, arrivals  # for the known answers below
        latency = np.array(s.done) - np.array(arrivals)
        ttft = np.array(s.first_token) - np.array(arrivals)
        # time per output token after the first: (last token - first token) / (tokens - 1), for requests of 2+ tokens
        several = np.array(lengths) > 1
        tpot = ((np.array(s.done) - np.array(s.first_token))[several] / (np.array(lengths)[several] - 1))
        span = max(s.done) - arrivals[0]
        # Little's law, L = lambda * W: the time-average number in the system (integrated from the
        # simulator's own state) against the arrival rate times the mean time in system (from the
        # per-request timestamps).
        time_avg_in_system = s.area / span
        lam_w = n_requests / span * float(latency.mean())
        little_errors.append(abs(time_avg_in_system - lam_w) / lam_w)
        run.check(f"littles_law.{policy}.load{round(100 * load)}", little_errors[-1] < 0.01,
                  f"L = {time_avg_in_system:.4f} requests, lambda*W = {lam_w:.4f} (relative difference {little_errors[-1]:.1e})")
        run.check(f"all_tokens.{policy}.load{round(100 * load)}", bool(np.isfinite(latency).all()),
                  f"{int(np.isfinite(latency).sum())}/{n_requests} requests completed")
        results[policy, load] = {
            "p50": np.percentile(latency, 50), "p95": np.percentile(latency, 95), "p99": np.percentile(latency, 99),
            "ttft_p50": np.percentile(ttft, 50), "ttft_p99": np.percentile(ttft, 99),
            "tpot_p50": np.percentile(tpot, 50), "tpot_p99": np.percentile(tpot, 99),
            "tokens_per_s": sum(lengths) / span, "requests_per_s": n_requests / span, "in_system": time_avg_in_system,
            "mean_batch": float(np.mean(s.batches)) if s.batches else math.nan,
        }
    run.log(f"  load {load:.2f}: " + "; ".join(
        f"{p} p50 {results[p, load]['p50'] * 1e3:.0f} ms p99 {results[p, load]['p99'] * 1e3:.0f} ms "
        f"{results[p, load]['tokens_per_s']:.0f} tok/s" for p in SIMULATORS))

# %% [markdown]
# Known answers under continuous batching: a request with the server to itself takes exactly one prefill plus
# its decode steps at batch 1, and none takes less (the fitted step times never fall with the batch). The lowest
# load need not leave anyone alone (where steps cost the same at every batch, as on a GPU, a tenth of the peak
# keeps several requests in service), so the first answer is checked on a sparse stream, one arrival per twenty
# service times. The median is no known answer: at 10% of the peak, requests overlap and share decode steps.

# %%
def alone_and_ratio(arrivals, done):
    """Which requests had the server to themselves, and each one's latency over its service time alone."""
    start_s, end_s = np.array(arrivals), np.array(done)
    had = ((start_s[None, :] < end_s[:, None]) & (end_s[None, :] > start_s[:, None])).sum(axis=1) == 1
    return had, (end_s - start_s) / (prefill_fit[1] + (np.array(lengths) - 1) * decode_fit[1])


had_server, latency_over_lone = alone_and_ratio(low_arrivals, low_run.done)  # the lowest load
sparse_arrivals = poisson_arrivals(1 / (20 * service_s), n_requests, random.Random(run.options.seed + 2))
sparse_alone, sparse_ratio = alone_and_ratio(sparse_arrivals, simulate_continuous(sparse_arrivals, lengths).done)
for name, ratio in (("low_load", latency_over_lone), ("sparse", sparse_ratio)):
    run.check(f"{name}.never_faster_than_alone", float(ratio.min()) >= 1 - 1e-9,
              f"smallest latency over the request's service time alone {ratio.min():.12f} (allowed >= 1 - 1e-9)")
    run.checks[-1].update({"max_abs_err": max(0.0, 1 - float(ratio.min())), "atol": 1e-9})
lone_error = float(np.abs(sparse_ratio[sparse_alone] - 1).max()) if sparse_alone.any() else math.inf
run.check("sparse.alone_takes_service_time", lone_error < 1e-9,
          f"{int(sparse_alone.sum())}/{n_requests} requests had the server to themselves; largest "
          f"|latency / service time alone - 1| among them {lone_error:.1e} (allowed 1e-9)")
run.checks[-1].update({"max_abs_err": lone_error, "atol": 1e-9})  # of latency / service time alone
alone_s = prefill_fit[1] + (np.median(lengths) - 1) * decode_fit[1]
low = results["continuous", LOADS[0]]["p50"]
run.check("low_load_latency_near_service_time", 1 - 1e-9 <= low / alone_s < 2,
          f"p50 latency {low * 1e3:.1f} ms at load {LOADS[0]} vs {alone_s * 1e3:.1f} ms for one request alone")

# %% [markdown]
# ## Results

# %%
rows = []
for load in LOADS:
    for policy in SIMULATORS:
        r = results[policy, load]
        rows.append([load, policy, round(r["tokens_per_s"], 1), round(r["requests_per_s"], 2),
                     *(round(r[q] * 1e3, 1) for q in ("p50", "p95", "p99", "ttft_p50", "ttft_p99")),
                     *(round(r[q] * 1e3, 2) for q in ("tpot_p50", "tpot_p99")),
                     round(r["in_system"], 2), "" if math.isnan(r["mean_batch"]) else round(r["mean_batch"], 1)])
run.table("simulation", f"Poisson arrivals, {n_requests} requests per run, outputs {out_min}-{out_max} tokens, "
          f"at most {b_max} in a batch; dynamic_tN waits up to N% of one request's service time alone "
          f"({service_s * 1e3:.1f} ms) to fill a batch",
          ["load", "policy", "tokens/s", "requests/s", "p50 (ms)", "p95 (ms)", "p99 (ms)", "TTFT p50 (ms)",
           "TTFT p99 (ms)", "TPOT p50 (ms)", "TPOT p99 (ms)", "mean in system", "mean batch"], rows)
curve = {}
for policy in SIMULATORS:
    for q in ("p50", "p99") if policy in ("static", "continuous") else ("p99",):
        curve[f"{policy} {q}"] = ([results[policy, load]["tokens_per_s"] for load in LOADS],
                                  [results[policy, load][q] * 1e3 for load in LOADS])
# The finding: continuous batching's highest throughput over static's, and their p99 latencies at load 0.85
peak_gain = (max(results["continuous", load]["tokens_per_s"] for load in LOADS)
             / max(results["static", load]["tokens_per_s"] for load in LOADS))
p99_ratio = results["static", 0.85]["p99"] / results["continuous", 0.85]["p99"]
p99_words = (f"{p99_ratio:.1f}x lower" if p99_ratio >= 1 else f"{1 / p99_ratio:.1f}x higher")
run.series("latency_throughput", f"Continuous: {peak_gain:.1f}x static's peak throughput, {p99_words} p99 "
           "at load 0.85", "throughput (generated tokens/s)", "latency (ms)", curve, y_log=True)
run.series("ttft", "Time to first token vs load", "load (fraction of continuous batching's peak)", "TTFT (ms)",
           {f"{policy} {q}": (LOADS, [results[policy, load][f"ttft_{q}"] * 1e3 for load in LOADS])
            for policy in SIMULATORS for q in ("p50", "p99")}, y_log=True)
run.series("tpot", "Time per output token vs load", "load (fraction of continuous batching's peak)", "TPOT (ms)",
           {f"{policy} {q}": (LOADS, [results[policy, load][f"tpot_{q}"] * 1e3 for load in LOADS])
            for policy in ("static", "continuous") for q in ("p50", "p99")})

for policy in SIMULATORS:
    run.metric(f"{policy}.max_tokens_per_s", max(results[policy, load]["tokens_per_s"] for load in LOADS), "tokens/s",
               label=f"{policy}: highest throughput reached across the loads", origin="computed")
    for load in (0.1, 0.3, 0.5, 0.85):
        r = results[policy, load]
        tag = f"{policy}.load{round(100 * load)}"
        for q in ("p50", "p99", "ttft_p99", "tpot_p50", "tpot_p99"):
            run.metric(f"{tag}.{q}_ms", r[q] * 1e3, "ms", label=f"{policy}, load {load}: {q.replace('_', ' ')}"
                       + ("" if q.startswith("tpot") else " latency"), origin="computed")
        if not math.isnan(r["mean_batch"]):
            run.metric(f"{tag}.mean_batch", r["mean_batch"], "requests", label=f"{policy}, load {load}: mean batch size", origin="computed")
        run.metric(f"{tag}.tokens_per_s", r["tokens_per_s"], "tokens/s", label=f"{policy}, load {load}: throughput", origin="computed")
for load in (0.5, 0.85):
    tag = f"load{round(100 * load)}"
    run.metric(f"{tag}.p99_static_over_continuous", results["static", load]["p99"] / results["continuous", load]["p99"],
               "x", label=f"load {load}: static batching's p99 latency over continuous batching's", origin="computed")
    run.metric(f"{tag}.ttft_p99_static_over_continuous",
               results["static", load]["ttft_p99"] / results["continuous", load]["ttft_p99"], "x",
               label=f"load {load}: static batching's p99 TTFT over continuous batching's", origin="computed")
run.metric("littles_law.max_rel_error", max(little_errors), "fraction",
           label="largest relative gap between L and lambda*W over every simulation", origin="computed")
run.metric("low_load.p50_over_service_time", low / alone_s, "x",
           label=f"continuous batching, load {LOADS[0]}: p50 latency over one request's service time alone", origin="computed")
run.metric("low_load.alone_share", float(had_server.mean()), "fraction", origin="computed",
           label=f"continuous batching, load {LOADS[0]}: share of requests that had the server to themselves")
run.metric("sparse.alone_share", float(sparse_alone.mean()), "fraction", origin="computed",
           label="continuous batching, one arrival per 20 service times: share of requests that had the server to themselves")
run.metric("low_load.arrivals_x_service_time", LOADS[0] * peak_requests_per_s * service_s, "requests",
           label=f"load {LOADS[0]}: arrival rate x one request's service time alone", origin="computed")
run.save()
