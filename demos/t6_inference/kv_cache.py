# %% [markdown]
# # The KV cache: generation with and without it, and what it costs in memory
#
# An autoregressive model produces one token per forward pass. Without a cache, step t feeds the
# whole sequence of t tokens through the model again, recomputing keys and values that have not
# changed since the previous step: the cost of one step grows with the position, and the cost of
# generating T tokens grows with T squared. The KV cache keeps each layer's keys and values for
# every past position; a decode step then runs the model on *one* new token and attends over the
# cached keys. The price is memory: layers x 2 (K and V) x KV heads x head_dim x bytes, per token,
# per sequence.
#
# This demo uses the small trained model of `_model.py` (grouped-query attention: fewer KV heads
# than query heads). It checks that both ways produce the same tokens, times one step at several
# positions and whole generations, and measures the cache's allocated bytes against the formula.

# %%
import dataclasses

import torch

from demos.harness.run import start
from demos.harness.timing import measure
from demos.t6_inference._model import KVCache, decode, generate_greedy, held_out_prompts, trained_models

run = start(
    "kv_cache",
    title="KV cache: decode with and without it, time per token and cache size",
    sizes={  # (prompt length, new tokens, positions at which one step is timed)
        "tiny": (16, 32, [16, 32, 47]),
        "small": (32, 160, [32, 64, 128, 191]),
        "full": (128, 896, [128, 256, 512, 768, 1023]),
    },
    cpu_threads=1,
)
device = run.torch_device
prompt_len, n_new, positions = run.sizes
target, _, model_info = trained_models(device, run.size, log=run.log)

# %% [markdown]
# On a CPU the model runs with **one intra-op thread**: its matrices (128 wide at the CPU size) are far below the
# size where splitting one op across threads pays, and CPU serving scales with one worker per core
# instead. (A second thread also makes every op wait for it whenever the machine is busy with
# other work: on the 2-core machine of the CPU record, a one-token decode step became ten times slower
# with two threads under load.) The harness's ceilings are measured with every thread.

# %%
cfg = target.cfg
run.metric("model.params_m", target.n_params() / 1e6, "M", label="target model parameters (millions)", origin="computed")
run.metric("model.held_out_bits_per_byte", model_info["target"]["held_out_bits_per_byte"], "bits/byte",
           label="target model: held-out loss after its brief training")
run.metric("model.train_s", model_info["target"]["train_s"] + model_info["draft"]["train_s"], "s",
           label="training time of the target and the draft, when they were trained (cached since)")

# %% [markdown]
# ## Two ways to generate
#
# **Without a cache** every step is a full causal forward pass over everything so far, of which
# only the last position's logits are used. **With the cache** (`generate_greedy` in `_model.py`),
# the prompt is processed once (the *prefill*, which fills the cache) and each later step feeds
# one token (a *decode* step).

# %%
@torch.no_grad()
def generate_without_cache(model, prompt, n_new):
    tokens = prompt
    for _ in range(n_new):
        logits = model(tokens)  # recompute every position, keep the last
        tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)
    return tokens


generate_with_cache = generate_greedy

# %% [markdown]
# ## Correctness: the same tokens, token for token
#
# In float32 (on every device), from held-out prompts: the cached and uncached generations must
# agree exactly, and the logits of the prefill must match a plain forward pass. A bug in the
# cache (a wrong position, a stale slot, a mask off by one) changes the tokens.

# %%
prompts = held_out_prompts(4, prompt_len).to(device)
for i, prompt in enumerate(prompts):
    prompt = prompt[None]
    with_cache = generate_with_cache(target, prompt, n_new)
    without_cache = generate_without_cache(target, prompt, n_new)
    same = int((with_cache == without_cache).all(dim=0).sum()) - prompt_len
    run.check(f"tokens_identical.prompt{i}", same == n_new,
              f"{same}/{n_new} generated tokens identical with and without the cache")
    if i == 0:
        run.artifact("sample", "prompt:\n" + decode(prompt[0].tolist()) + "\n\ngenerated (greedy):\n"
                     + decode(with_cache[0, prompt_len:].tolist()))
with torch.no_grad():
    cache = target.new_cache(1, prompt_len + 8)
    prefill_logits = target(prompts[:1], cache)
    step_logits = target(prompts[1:2, :1], cache)  # one decode step after the prefill
    full_logits = target(torch.cat([prompts[:1], prompts[1:2, :1]], dim=1))
run.check_close("logits.cached_vs_full", torch.cat([prefill_logits, step_logits], dim=1), full_logits,
                rtol=1e-4, atol=1e-4, reference_name="full forward pass (float32)")

# %% [markdown]
# ## Cache size: measured against the formula
#
# The cache is preallocated for the whole generation, as serving engines do (it also keeps every
# shape fixed). Measured = the bytes of storage the cache's tensors actually hold; formula =
# layers x 2 x KV heads x head_dim x tokens x bytes x batch, from the config alone.

# %%
serving_dtype = torch.bfloat16 if run.device.is_gpu else torch.float32  # what each device serves in
itemsize = serving_dtype.itemsize
rows = []
for batch, tokens in [(1, prompt_len + n_new), (8, prompt_len + n_new), (8, cfg.max_len)]:
    probe = KVCache(cfg, batch, tokens, device, serving_dtype)
    probe_bytes = probe.allocated_bytes()
    formula = cfg.kv_cache_bytes(batch, tokens, itemsize)
    run.check(f"cache_bytes.b{batch}.t{tokens}", probe_bytes == formula,
              f"allocated {probe_bytes} B, formula {cfg.n_layers} x 2 x {cfg.n_kv_heads} x {cfg.head_dim} x {tokens} "
              f"x {itemsize} x {batch} = {formula} B")
    rows.append([batch, tokens, probe_bytes, formula, round(probe_bytes / 2**20, 3)])
    del probe
run.table("cache_size", f"KV cache, measured vs formula ({str(serving_dtype)[6:]})",
          ["batch", "tokens", "allocated (B)", "formula (B)", "allocated (MiB)"], rows)
per_token = cfg.kv_cache_bytes(1, 1, itemsize)
weights_bytes = target.n_params() * itemsize
run.metric("cache.bytes_per_token", per_token, "B", label="KV cache per token per sequence (all layers, K and V)", origin="computed")
run.metric("cache.bytes_per_token_without_gqa", per_token * cfg.n_heads // cfg.n_kv_heads, "B",
           label=f"the same with one KV head per query head ({cfg.n_heads} instead of {cfg.n_kv_heads})", origin="computed")
run.metric("cache.tokens_to_match_weights", weights_bytes / per_token, "tokens",
           label="cached tokens (summed over the batch) at which the cache outweighs the model's weights", origin="computed")

# %% [markdown]
# ## Time per step against position
#
# One step at position p: without the cache, a forward pass over p + 1 tokens; with it, one token
# against a cache filled to p (the cache's length is reset before every call, so each repeat does
# the same work). Timings use the serving dtype (bf16 on a GPU, float32 on a CPU).

# %%
model = target.to(serving_dtype) if serving_dtype != torch.float32 else target
sequence = generate_with_cache(target, prompts[:1], n_new)  # a real sequence to time on
cache = model.new_cache(1, prompt_len + n_new)
with torch.no_grad():
    model(sequence[:, :-1], cache)  # fill every slot once

step_times = {"without cache": [], "with cache": []}
for p in positions:
    def uncached_step(p=p):
        with torch.no_grad():
            return model(sequence[:, :p + 1])[:, -1]

    def cached_step(p=p):
        cache.length = p
        with torch.no_grad():
            return model(sequence[:, p:p + 1], cache)[:, -1]

    step_times["without cache"].append(run.time(uncached_step))
    step_times["with cache"].append(run.time(cached_step))
    run.log(f"  position {p:5d}: without cache {step_times['without cache'][-1].median_s * 1e3:8.3f} ms, "
            f"with cache {step_times['with cache'][-1].median_s * 1e3:8.3f} ms")

# %% [markdown]
# ## Whole generations
#
# Prefill plus every decode step, timed end to end with the harness (fewer repeats than usual:
# one uncached generation is already hundreds of forward passes).

# %%
few = dataclasses.replace(run.settings, warmup=0, min_repeats=3, max_repeats=5)  # the first call warms up
prompt = prompts[:1]
total = {"without cache": measure(lambda: generate_without_cache(model, prompt, n_new), run.device, few),
         "with cache": measure(lambda: generate_with_cache(model, prompt, n_new), run.device, few)}
for name, timing in total.items():
    run.log(f"  {n_new} tokens {name}: {timing.median_s:.3f} s")

# %% [markdown]
# ## Results

# %%
run.table("step_time", f"One greedy step (batch 1) vs position, {str(serving_dtype)[6:]}",
          ["position", "without cache (ms)", "with cache (ms)", "without / with"],
          [[p, round(a.median_s * 1e3, 3), round(b.median_s * 1e3, 3), round(a.median_s / b.median_s, 2)]
           for p, a, b in zip(positions, step_times["without cache"], step_times["with cache"])])
growth = {name: ts[-1].median_s / ts[0].median_s for name, ts in step_times.items()}  # last position over first
run.series("step_time", f"Step time at position {positions[-1]} over {positions[0]}: "
           f"{growth['without cache']:.1f}x without cache, {growth['with cache']:.1f}x with it",
           "position (tokens already in the sequence)",
           "ms per step", {name: (positions, [t.median_s * 1e3 for t in ts], ts) for name, ts in step_times.items()})
run.table("generation", f"Generating {n_new} tokens after a {prompt_len}-token prompt (batch 1)",
          ["variant", "total (s)", "p10-p90 (s)", "ms per token"],
          [[name, round(t.median_s, 4), f"{t.p10_s:.4f}-{t.p90_s:.4f}", round(t.median_s / n_new * 1e3, 3)]
           for name, t in total.items()])

first, last = positions[0], positions[-1]
for key, name in (("uncached", "without cache"), ("cached", "with cache")):
    ts = step_times[name]
    run.metric(f"{key}.step_ms_first", ts[0].median_s * 1e3, "ms", label=f"one step {name} at position {first}")
    run.metric(f"{key}.step_ms_last", ts[-1].median_s * 1e3, "ms", label=f"one step {name} at position {last}")
    run.metric(f"{key}.step_growth", ts[-1].median_s / ts[0].median_s, "x",
               label=f"step time {name}, position {last} over position {first}")
    run.metric(f"{key}.generate_s", total[name].median_s, "s", label=f"{n_new} tokens {name}, total")
run.metric("step_speedup_last", step_times["without cache"][-1].median_s / step_times["with cache"][-1].median_s,
           "x", label=f"one step at position {last}: without cache over with cache")
run.metric("generate_speedup", total["without cache"].median_s / total["with cache"].median_s, "x",
           label=f"whole generation of {n_new} tokens: without cache over with cache")
run.save()
