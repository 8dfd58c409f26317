# %% [markdown]
# # A paged KV cache: block table and gather, checked against the contiguous cache
#
# The KV-cache demo preallocates, for every request, room for the longest sequence it might
# reach. A server does not know how long an answer will be, so that room is mostly empty: the
# memory it reserves limits the batch, and through it the throughput. **PagedAttention**
# ([Efficient Memory Management for Large Language Model Serving with PagedAttention](https://arxiv.org/abs/2309.06180),
# Kwon et al., SOSP 2023; the vLLM engine) stores keys and values in fixed-size *blocks* from a
# shared pool, like pages of virtual memory. Each sequence has a *block table* (its list of block
# numbers, in order); a block is taken from the free list only when the sequence's previous one is
# full, and returned when the sequence ends. The unused space is then less than one block per
# sequence.
#
# This demo implements that cache for the model of `_model.py` without changing the model: the
# attention code writes `cache.k[layer][:, :, a:b] = k` and reads `cache.k[layer][:, :, :n]`, and
# the paged cache answers those two operations through the block table (a scatter into the pool
# on write, a gather of the sequence's blocks on read). vLLM's kernel reads the blocks in place
# instead of gathering them into a contiguous copy first; the memory accounting is the same.
#
# It checks that greedy decoding through the paged cache gives the same logits and tokens as the
# contiguous cache (and that a wrong block table is caught), then measures the memory each scheme
# reserves under the request mix of the batching demo, for several block sizes.

# %%
import math

import torch

from demos.harness.run import start
from demos.t6_inference._model import held_out_prompts, trained_models
from demos.t6_inference._serving import REQUEST_MIX, output_lengths

run = start(
    "paged_kv",
    title="Paged KV cache: equal to the contiguous cache, and its memory waste vs preallocation",
    sizes={  # (block sizes, sequences in the equality check, new tokens in it)
        "tiny": ([4, 8, 16], 4, 16),
        "small": ([8, 16, 32, 64], 4, 64),
        "full": ([8, 16, 32, 64], 8, 128),
    },
    cpu_threads=1,
)
device = run.torch_device
block_sizes, n_seq, n_new = run.sizes
batch_sizes, prompt_len, (out_min, out_max), n_requests = REQUEST_MIX[run.size]
b_max = max(batch_sizes)
target, _, _ = trained_models(device, run.size, log=run.log)
# The equality check runs in float32 on every device, so that a tolerance of 1e-4 means something.
model = target.float().eval()
cfg = model.cfg

# %% [markdown]
# ## The allocator and the cache
#
# One pool tensor per layer for keys and one for values, `(blocks, kv_heads, block_size, head_dim)`.
# The free list is shuffled, so a sequence's blocks are scattered through the pool and interleaved
# with other sequences' blocks: a gather that ignored the table would read the wrong keys.

# %%
class BlockAllocator:
    """A free list of block numbers; each sequence owns an ordered list of blocks (its block table)."""

    def __init__(self, n_blocks: int, block: int, seed: int = 0):
        self.block = block
        self.free = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
        self.tables: dict[int, list[int]] = {}

    def reserve(self, seq: int, tokens: int) -> None:
        """Make sure sequence `seq` has blocks for `tokens` positions (taking new blocks only as needed)."""
        table = self.tables.setdefault(seq, [])
        while len(table) * self.block < tokens:
            if not self.free:
                raise MemoryError("the block pool is exhausted")
            table.append(self.free.pop())

    def release(self, seq: int) -> None:
        self.free.extend(self.tables.pop(seq))

    def blocks_in_use(self) -> int:
        return sum(len(t) for t in self.tables.values())


class PagedLayer:
    """What `cache.k[layer]` returns: writes and reads of positions along dim 2, through the block table."""

    def __init__(self, cache: "PagedKVCache", pool: torch.Tensor):
        self.cache, self.pool = cache, pool

    def _table(self, n_tokens: int) -> torch.Tensor:
        blocks = math.ceil(n_tokens / self.cache.alloc.block)
        return torch.tensor([self.cache.alloc.tables[s][:blocks] for s in self.cache.seqs], device=self.pool.device)

    def __setitem__(self, index, value: torch.Tensor) -> None:  # value: (batch, kv_heads, t, head_dim)
        start, stop = index[2].start or 0, index[2].stop
        for s in self.cache.seqs:
            self.cache.alloc.reserve(s, stop)
        pos = torch.arange(start, stop, device=self.pool.device)
        blk = self._table(stop)[:, pos // self.cache.alloc.block]  # (batch, t) block numbers
        self.pool[blk, :, pos % self.cache.alloc.block] = value.permute(0, 2, 1, 3).to(self.pool.dtype)

    def __getitem__(self, index) -> torch.Tensor:  # the gather: (batch, kv_heads, n, head_dim)
        n = index[2].stop
        gathered = self.pool[self._table(n)]  # (batch, blocks, kv_heads, block, head_dim)
        b, nb, h, bs, d = gathered.shape
        return gathered.permute(0, 2, 1, 3, 4).reshape(b, h, nb * bs, d)[:, :, :n]


class PagedKVCache:
    """The model's cache interface (`k[layer]`, `v[layer]`, `length`) over a shared block pool."""

    def __init__(self, alloc: BlockAllocator, n_blocks: int, seqs: list[int], dtype):
        shape = (n_blocks, cfg.n_kv_heads, alloc.block, cfg.head_dim)
        self.alloc, self.seqs, self.length = alloc, seqs, 0
        self.k = [PagedLayer(self, torch.zeros(shape, device=device, dtype=dtype)) for _ in range(cfg.n_layers)]
        self.v = [PagedLayer(self, torch.zeros(shape, device=device, dtype=dtype)) for _ in range(cfg.n_layers)]

    def block_bytes(self) -> int:
        """Bytes of one block across every layer, K and V (measured from the pool tensors)."""
        pools = [layer.pool for layer in self.k + self.v]
        return sum(p.untyped_storage().nbytes() for p in pools) // pools[0].shape[0]


# %% [markdown]
# ## Correctness: the same logits and tokens as the contiguous cache
#
# From held-out prompts, greedy decoding runs twice: with the model's contiguous `KVCache` and with
# the paged cache (the smallest block size, so every sequence spans many blocks). Every step's
# logits must agree within 1e-4 (float32), and the tokens must be identical.

# %%
prompts = held_out_prompts(n_seq, prompt_len, seed=5).to(device)


@torch.no_grad()
def greedy(cache, steps: int):
    logits = model(prompts, cache)[:, -1:]
    all_logits, token = [logits], logits.argmax(-1)
    tokens = [token]
    for _ in range(steps):
        logits = model(token, cache)[:, -1:]
        token = logits.argmax(-1)
        all_logits.append(logits)
        tokens.append(token)
    return torch.cat(all_logits, 1), torch.cat(tokens, 1)


bs0 = block_sizes[0]
pool_blocks = 2 * n_seq * math.ceil((prompt_len + n_new + 1) / bs0)  # twice what the sequences need
ref_logits, ref_tokens = greedy(model.new_cache(n_seq, prompt_len + n_new + 1), n_new)
alloc = BlockAllocator(pool_blocks, bs0, seed=run.options.seed)
paged = PagedKVCache(alloc, pool_blocks, list(range(n_seq)), torch.float32)
paged_logits, paged_tokens = greedy(paged, n_new)
run.check_close("paged_equals_contiguous.logits", paged_logits, ref_logits, rtol=1e-4, atol=1e-4,
                reference_name="the contiguous KVCache")
run.metric("equality.max_abs_logit_diff", float((paged_logits - ref_logits).abs().max()), "logit",
           label="largest |logit difference| between paged and contiguous greedy decoding (float32)")
run.check("paged_equals_contiguous.tokens", bool((paged_tokens == ref_tokens).all()),
          f"{n_seq} sequences x {n_new + 1} greedy tokens identical; block size {bs0}, "
          f"{alloc.blocks_in_use()} blocks in use out of {pool_blocks}, scattered through the pool")
tokens_held = prompt_len + n_new  # the last token's K/V is never written
run.check("blocks_in_use_match_formula", alloc.blocks_in_use() == n_seq * math.ceil(tokens_held / bs0),
          f"{alloc.blocks_in_use()} blocks = {n_seq} sequences x ceil({tokens_held} / {bs0})")
first_blocks = [alloc.tables[s][0] for s in range(n_seq)]
run.check("tables_are_scattered", any(b - a != 1 for t in alloc.tables.values() for a, b in zip(t, t[1:])),
          f"first blocks of the sequences: {first_blocks}; a table of consecutive blocks would not test the gather")

# %% [markdown]
# A check that cannot fail proves nothing, so the demo breaks the block table on purpose: after the
# prefill, two sequences' tables are swapped, and the next decode step must then disagree with the
# contiguous cache.

# %%
with torch.no_grad():
    contiguous = model.new_cache(n_seq, prompt_len + 2)
    model(prompts, contiguous)
    ref_step = model(ref_tokens[:, :1], contiguous)
    wrong_alloc = BlockAllocator(pool_blocks, bs0, seed=run.options.seed)
    wrong = PagedKVCache(wrong_alloc, pool_blocks, list(range(n_seq)), torch.float32)
    model(prompts, wrong)
    wrong_alloc.tables[0], wrong_alloc.tables[1] = wrong_alloc.tables[1], wrong_alloc.tables[0]
    wrong_step = model(ref_tokens[:, :1], wrong)
err = float((wrong_step - ref_step).abs().max())
run.check_wrong("swapped_block_tables_caught", err > 1e-2,
                f"with sequences 0 and 1's block tables swapped, the decode step's logits differ by up to {err:.3g}")

# %% [markdown]
# ## Cost of the gather
#
# One decode step at batch `n_seq`, mid-generation, through each cache. The gather copies every
# cached key and value of the batch once per layer per step; a paged attention kernel avoids that
# copy by reading the blocks where they are. The ratio says what the copy costs here.

# %%
def decode_timer(cache):
    token, length = ref_tokens[:, :1], cache.length

    def step():
        cache.length = length
        with torch.no_grad():
            return model(token, cache)
    return step


ctx = prompt_len + n_new - 1
contiguous = model.new_cache(n_seq, ctx + 1)
contiguous.length = ctx
t_contiguous = run.time(decode_timer(contiguous)).median_s
paged.length = ctx
t_paged = run.time(decode_timer(paged)).median_s
run.metric("decode_step.contiguous_ms", t_contiguous * 1e3, "ms", label=f"decode step, batch {n_seq}, contiguous cache")
run.metric("decode_step.paged_ms", t_paged * 1e3, "ms", label=f"decode step, batch {n_seq}, paged cache (gather)")
run.metric("decode_step.paged_over_contiguous", t_paged / t_contiguous, "x",
           label="paged (gather) decode step time over the contiguous cache's")

# %% [markdown]
# ## Memory waste under the batching demo's request mix
#
# The batching demo's requests: a prompt of `prompt_len` tokens and an output length drawn
# uniformly from `[out_min, out_max]` (the same draws), served by continuous batching with at most
# `b_max` sequences running. Here the server is saturated (a finished request is replaced at once
# by the next), the regime where memory decides the batch. At every decode step the demo counts
# the tokens actually held (prompt + tokens generated so far) against the reservation:
#
# - **Preallocation** reserves `prompt_len + out_max` positions per running request, from its
#   arrival to its end (what the contiguous cache does).
# - **Paging** holds the blocks the allocator above has handed out, counted from its block tables.
#
# Waste is the reserved-but-unused fraction, averaged over every step.

# %%
lengths = output_lengths(n_requests, run.size, run.options.seed)  # the batching demo's draws
max_tokens = prompt_len + out_max
token_bytes = cfg.kv_cache_bytes(1, 1, 4)


def saturated_waste(block: int | None) -> dict:
    """Time-averaged reserved and held tokens while b_max slots decode the request list; block None = preallocation."""
    alloc = BlockAllocator(b_max * math.ceil(max_tokens / (block or 1)) + 1, block or 1)
    running, nxt, held, reserved, worst_slack, seq_steps = {}, 0, 0, 0, 0, 0
    while running or nxt < len(lengths):
        while len(running) < b_max and nxt < len(lengths):  # admit: the prompt's K/V is written by the prefill
            running[nxt] = prompt_len
            nxt += 1
        for r, n in running.items():
            if block:
                alloc.reserve(r, n)
        step_held = sum(running.values())
        step_reserved = len(running) * max_tokens if block is None else alloc.blocks_in_use() * block
        if block:
            worst_slack = max(worst_slack, max(len(alloc.tables[r]) * block - n for r, n in running.items()))
        held, reserved, seq_steps = held + step_held, reserved + step_reserved, seq_steps + len(running)
        for r in list(running):  # one decode step: each sequence's cache grows by one token
            running[r] += 1
            if running[r] >= prompt_len + lengths[r] - 1:  # its last token needs no K/V
                del running[r]
                if block:
                    alloc.release(r)
    return {"waste": 1 - held / reserved, "held": held, "reserved": reserved, "worst_slack": worst_slack,
            "mean_slack": (reserved - held) / seq_steps}


prealloc = saturated_waste(None)
paged_results = {bs: saturated_waste(bs) for bs in block_sizes}
for bs, r in paged_results.items():
    run.check(f"slack_below_one_block.bs{bs}", r["worst_slack"] < bs,
              f"largest unused space of any sequence at any step: {r['worst_slack']} tokens (< block size {bs})")
rows = [["preallocate max", max_tokens, round(100 * prealloc["waste"], 1), 1.0]]
for bs, r in paged_results.items():
    rows.append([f"paged, block {bs}", bs, round(100 * r["waste"], 1), round(prealloc["reserved"] / r["reserved"], 2)])
    run.metric(f"paged.bs{bs}.waste", r["waste"], "fraction",
               label=f"paged KV cache, block {bs}: reserved-but-unused fraction, time-averaged", origin="computed")
    run.metric(f"paged.bs{bs}.mean_slack_tokens", r["mean_slack"], "tokens",
               label=f"block {bs}: reserved-but-unused positions per running sequence, averaged over steps", origin="computed")
    run.metric(f"paged.bs{bs}.sequences_per_preallocated", prealloc["reserved"] / r["reserved"], "x",
               label=f"block {bs}: sequences that fit in the memory preallocation needs for one", origin="computed")
run.metric("prealloc.waste", prealloc["waste"], "fraction",
           label=f"preallocating {max_tokens} positions per request: reserved-but-unused fraction, time-averaged", origin="computed")
run.metric("kv_bytes_per_token", token_bytes, "bytes", label="KV cache bytes per token per sequence (float32)", origin="computed")
run.table("waste", f"KV memory reserved vs held, saturated continuous batching of {n_requests} requests "
          f"(prompt {prompt_len}, outputs {out_min}-{out_max}, at most {b_max} running)",
          ["scheme", "granularity (tokens)", "waste (% of reserved)", "sequences per preallocated slot"], rows)
small_bs, large_bs = block_sizes[0], block_sizes[-1]
run.series("waste_vs_block", f"KV memory unused: paged {paged_results[small_bs]['waste']:.0%} (block {small_bs}) to "
           f"{paged_results[large_bs]['waste']:.0%} (block {large_bs}), preallocated {prealloc['waste']:.0%}",
           "block size (tokens)",
           "waste (% of reserved)", {"paged": (block_sizes, [100 * paged_results[b]["waste"] for b in block_sizes])},
           hlines={"preallocate max length": 100 * prealloc["waste"]}, x_log=True)
run.save()
