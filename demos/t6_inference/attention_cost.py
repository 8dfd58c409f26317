# %% [markdown]
# # The cost of attention: naive vs tiled (online softmax) vs fused SDPA
#
# Causal self-attention computes `softmax(Q K^T / sqrt(d)) V` for N queries against N keys. Written
# naively, it materializes the N x N score matrix (and the softmax of it) in memory: time *and*
# memory grow with N squared, and every element of that matrix makes a round trip through DRAM/HBM.
# FlashAttention keeps the same arithmetic but tiles it: it walks over blocks of keys, keeps a
# running maximum and running sum per query (the *online softmax*), rescales the partial output
# when the maximum changes, and never writes the score matrix anywhere. Extra memory becomes linear
# in N and the HBM traffic drops to reading Q, K, V and writing the output.
#
# This demo runs, across sequence lengths: the naive version; the same online-softmax algorithm
# written in plain PyTorch (a loop over key blocks, so the idea is readable); and
# `F.scaled_dot_product_attention` with each backend this device offers, forced one at a time
# through `torch.nn.attention.sdpa_kernel`. Every variant is checked against a float64 reference
# first; then each is timed and its peak temporary memory is measured.

# %%
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from demos.common.memory import peak_bytes
from demos.harness.run import start

run = start(
    "attention_cost",
    title="Attention: naive vs online softmax vs fused SDPA backends",
    sizes={  # (batch, heads, head_dim, sequence lengths)
        "tiny": (1, 2, 32, [64, 128]),
        "small": (1, 4, 64, [256, 512, 1024, 2048]),
        "full": (2, 16, 128, [1024, 2048, 4096, 8192, 16384]),
    },
    cpu_threads=1,
)
device = run.torch_device
batch, heads, head_dim, seq_lens = run.sizes
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
ceiling = "matmul_bf16" if run.device.is_gpu else "matmul_fp32"  # the matmul rate in the same dtype, same run
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}[dtype]

# %% [markdown]
# On a CPU everything below runs on **one thread**. On a machine shared with other work, a second OpenMP
# thread made timings jump by whole scheduler ticks whenever other work was running (the same
# attention call was over ten times slower in one run than in the next). The FLOP-rate yardstick is then
# a one-thread matmul, measured here in the same run (the harness's ceilings use every thread).

# %%
if not run.device.is_gpu:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    one_thread_tflops = 2 * 1024**3 / run.time(lambda: a @ b).median_s / 1e12
    run.metric("matmul_one_thread_tflops", one_thread_tflops, "TFLOP/s", dtype="float32",
               label="fp32 1024x1024 matmul on one thread, this run")
    del a, b

# %% [markdown]
# ## The implementations
#
# **Naive.** Three full N x N tensors appear: the scores, the masked scores, and the softmax. On a
# GPU each is written to HBM by one kernel and read back by the next.

# %%
def naive_attention(q, k, v):
    n = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, N, N)
    future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(dim=-1) @ v


# %% [markdown]
# **Online softmax, tiled over keys.** The FlashAttention recurrence, with PyTorch ops: for each
# block of keys, compute that block's scores for the queries that can see it, update each query's
# running maximum `m` and running denominator `l`, rescale what was accumulated so far by
# `exp(m_old - m_new)`, and add the block's contribution. Only one (N x block) tile of scores
# exists at a time. Key blocks entirely in a query's future are skipped, which is where causal
# attention saves half the work. (The real kernel also tiles the queries and keeps each tile in
# on-chip SRAM/registers; a Python loop can show the algorithm and its memory, not that speed.)

# %%
def online_softmax_attention(q, k, v, block: int = 128):
    b, h, n, d = q.shape
    scale = d ** -0.5
    acc = torch.float32  # the running max, sum and output, as a fused kernel keeps them
    running_max = torch.full((b, h, n, 1), float("-inf"), device=q.device, dtype=acc)
    running_sum = torch.zeros(b, h, n, 1, device=q.device, dtype=acc)
    out = torch.zeros(b, h, n, d, device=q.device, dtype=acc)
    for start in range(0, n, block):
        stop = min(start + block, n)
        # queries before `start` cannot see these keys; query start+i sees key start+j iff j <= i
        scores = (q[:, :, start:] @ k[:, :, start:stop].transpose(-1, -2)).to(acc) * scale  # (b, h, n-start, block)
        future = torch.arange(stop - start, device=q.device) > torch.arange(n - start, device=q.device)[:, None]
        scores.masked_fill_(future, float("-inf"))
        old_max = running_max[:, :, start:]
        new_max = torch.maximum(old_max, scores.amax(dim=-1, keepdim=True))
        probs = torch.exp(scores - new_max)
        rescale = torch.exp(old_max - new_max)  # 0 the first time a query sees any key (old max is -inf)
        running_sum[:, :, start:] = running_sum[:, :, start:] * rescale + probs.sum(dim=-1, keepdim=True)
        out[:, :, start:] = out[:, :, start:] * rescale + probs.to(v.dtype) @ v[:, :, start:stop]
        running_max[:, :, start:] = new_max
    return (out / running_sum).to(q.dtype)


# %% [markdown]
# **Fused SDPA.** One call, and PyTorch picks a kernel: `math` (the composite reference, which
# materializes scores like the naive version), `flash` (FlashAttention; on a CPU, ATen's own tiled
# kernel with the same online softmax), `efficient` (the memory-efficient xFormers kernel, CUDA
# only) and `cudnn` (cuDNN's fused attention, CUDA only). Each backend is forced in turn; one that
# this device or dtype does not support raises, and is recorded as not run, with the reason.

# %%
BACKENDS = {"sdpa_math": SDPBackend.MATH, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}


def sdpa_with(backend):
    def attention(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return attention


def sdpa_default(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def first_line(error: Exception) -> str:
    return f"{type(error).__name__}: " + (str(error).strip().splitlines() or [""])[0][:160]


VARIANTS = {"naive": naive_attention, "online_softmax": online_softmax_attention, "sdpa_default": sdpa_default}
probe = torch.randn(1, heads, 64, head_dim, device=device, dtype=dtype)
for name, backend in BACKENDS.items():
    try:
        sdpa_with(backend)(probe, probe, probe)
        VARIANTS[name] = sdpa_with(backend)
    except Exception as e:  # "No available kernel", or a backend that fails in its own way
        run.not_run(name, f"no kernel for this device/dtype ({dtype}): " + first_line(e))

# %% [markdown]
# ## Measuring memory
#
# On a GPU, peak memory is PyTorch's own counter: `torch.cuda.max_memory_allocated()` during one
# call, minus what was allocated before it. On a CPU there is no such counter, so the demo runs one
# call under `torch.profiler` with `profile_memory=True` and reads every allocation event the CPU
# allocator reported, with the running total of bytes allocated at that moment: the peak of that
# total, minus the total before the call, is the call's peak temporary memory (output included).
# Allocations made outside PyTorch's allocator (a library's private scratch) would not be counted;
# the score matrix's size is shown next to it, computed, for comparison.

# %%
def peak_temporary_bytes(fn) -> int:
    return peak_bytes(fn, run.torch_device)


def score_matrix_bytes(n: int) -> int:
    return batch * heads * n * n * dtype.itemsize


def causal_flops(n: int) -> float:
    """Useful FLOPs of causal attention: QK^T and PV, 2*N*N*d each, half of them unmasked."""
    return 2 * 2 * batch * heads * n * n * head_dim / 2


# %% [markdown]
# ## What fits
#
# Naive attention holds about three N x N matrices at once (scores, masked scores, softmax), and the
# `math` SDPA backend does the same in float32 whatever the input dtype (it upcasts bf16/fp16 for its
# softmax), plus a float mask: at N=16384 with 2 x 16 heads that is about 100 GB, more than an 80 GB
# card holds. On a GPU these two are run only where that estimate stays under half of the memory free
# at this point; elsewhere they are recorded as not run, with the numbers. On a CPU, naive attention is
# skipped where its matrices would pass 16 GB. A variant that runs out of memory anyway is caught and
# recorded as not run at that length; the others go on.

# %%
NAIVE_LIMIT = 16 * 2**30
if run.device.is_gpu:
    torch.cuda.empty_cache()
    free_bytes = torch.cuda.mem_get_info()[0]
    memory_bound = free_bytes // 2
else:
    free_bytes, memory_bound = None, NAIVE_LIMIT


def materialized_bytes(name: str, n: int) -> int:
    """What a variant that materializes the N x N matrices holds at once (0 for the tiled ones)."""
    if name == "naive":
        return 3 * score_matrix_bytes(n) + n * n  # three matrices in the input dtype and the boolean mask
    if name == "sdpa_math" and run.device.is_gpu:
        return 3 * batch * heads * n * n * 4 + n * n * 4  # upcast to float32, and a float mask
    return 0


runs_at = {}
for name in VARIANTS:
    runs_at[name] = [n for n in seq_lens if materialized_bytes(name, n) <= memory_bound]
    skipped = [n for n in seq_lens if n not in runs_at[name]]
    if skipped:
        where = (f"half of the {free_bytes / 2**30:.1f} GiB free on the GPU" if run.device.is_gpu
                 else f"{NAIVE_LIMIT / 2**30:.0f} GiB")
        run.not_run(f"{name} (N >= {skipped[0]})", f"its N x N matrices would need about "
                    f"{materialized_bytes(name, skipped[0]) / 2**30:.1f} GiB at N={skipped[0]}, more than {where}")


def failed(name: str, n: int, why: str) -> None:
    """A variant that failed at length n (out of memory, a backend or compile error, a wrong answer at a
    long length): recorded as not run there, with why, and the run goes on."""
    runs_at[name] = [m for m in runs_at[name] if m != n]
    run.not_run(f"{name} (N={n})", why)
    if run.device.is_gpu:
        torch.cuda.empty_cache()


def error_reason(error: Exception) -> str:
    oom = isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError))
    return ("out of memory: " if oom else "error: ") + first_line(error)

# %% [markdown]
# ## Correctness first
#
# Every variant at every length, on fresh random inputs, against naive attention computed in
# float64 on the device. At the shortest length the whole output is checked, and a failure stops the
# demo: a wrong kernel is never timed. At the longer lengths (where a float64 score matrix for every
# query would take gigabytes) the reference is computed for a sample of queries only: the first and
# the last CHECK_ROWS, which see the fewest and the most keys. A variant that raises, or misses the tolerance,
# at a longer length is recorded as not run there, with the error, and is not timed at that length.

# %%
CHECK_ROWS = 64


def reference_rows(q, k, v, rows):
    """Causal attention for the queries at positions `rows` only, in float64 on the device."""
    q64, k64, v64 = q[:, :, rows].double(), k.double(), v.double()
    scores = (q64 @ k64.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, len(rows), N)
    future = torch.arange(k.shape[-2], device=q.device) > rows[:, None]
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v64


def within(got, reference) -> tuple[bool, float]:
    """check_close's test (|got - ref| <= atol + rtol * |ref|, finite), without raising; and the worst error."""
    err = (got.double() - reference).abs()
    ok = bool(torch.isfinite(got).all()) and bool((err <= TOLERANCE["atol"] + TOLERANCE["rtol"] * reference.abs()).all())
    return ok, float(err.max())


for n in seq_lens:
    q, k, v = (torch.randn(batch, heads, n, head_dim, device=device, dtype=dtype) for _ in range(3))
    positions = torch.arange(n, device=device)
    rows = positions if n == seq_lens[0] else torch.cat([positions[:CHECK_ROWS], positions[-CHECK_ROWS:]]).unique()
    reference = reference_rows(q, k, v, rows)
    reference_name = "float64 naive" if n == seq_lens[0] else f"float64 naive, first and last {CHECK_ROWS} of {n} queries"
    for name, fn in VARIANTS.items():
        if n not in runs_at[name]:
            continue
        try:
            got = fn(q, k, v)[:, :, rows]
        except Exception as e:
            failed(name, n, error_reason(e))
            continue
        ok, worst = within(got, reference)
        if ok or n == seq_lens[0]:  # at the shortest length a failure raises here
            run.check_close(f"{name}.n{n}", got, reference, reference_name=reference_name, **TOLERANCE)
        else:
            failed(name, n, f"wrong answer: max |err| {worst:.2e} vs {reference_name} "
                            f"(allowed {TOLERANCE['atol']:.0e} + {TOLERANCE['rtol']:.0e}*|ref|)")
        del got
    del reference

# %% [markdown]
# ## Measurement
#
# For each length and variant: median time (harness protocol), peak temporary memory, and the
# achieved rate in useful causal FLOPs per second, as a fraction of the same-run matmul ceiling.

# %%
results = {}  # (variant, n) -> (Timing, peak bytes)
for n in seq_lens:
    q, k, v = (torch.randn(batch, heads, n, head_dim, device=device, dtype=dtype) for _ in range(3))
    for name, fn in VARIANTS.items():
        if n not in runs_at[name]:
            continue
        try:
            timing = run.time(lambda: fn(q, k, v))
            results[name, n] = timing, peak_temporary_bytes(lambda: fn(q, k, v))
        except Exception as e:
            failed(name, n, error_reason(e))
            continue
        run.log(f"  N={n:6d} {name:15s} {timing.median_s * 1e3:9.3f} ms  peak {results[name, n][1] / 2**20:9.1f} MiB")
    del q, k, v

# %% [markdown]
# ## Results

# %%
# the same-thread yardstick: the harness's matmul ceiling on a GPU, the one-thread matmul on a CPU
yardstick, yardstick_name = ((run.ceilings[ceiling]["value"], ceiling) if run.device.is_gpu
                             else (one_thread_tflops, "one-thread matmul"))
rows = []
for n in seq_lens:
    for name in VARIANTS:
        if (name, n) not in results:
            continue
        timing, peak = results[name, n]
        tflops = causal_flops(n) / timing.median_s / 1e12
        rows.append([n, name, round(timing.median_s * 1e3, 3), f"{timing.p10_s * 1e3:.3f}-{timing.p90_s * 1e3:.3f}",
                     round(peak / 2**20, 2), round(score_matrix_bytes(n) / 2**20, 2), round(tflops, 3),
                     round(100 * tflops / yardstick, 1)])
run.table("attention", f"Causal attention, batch {batch}, {heads} heads, head_dim {head_dim}, {str(dtype)[6:]}",
          ["N", "variant", "median (ms)", "p10-p90 (ms)", "peak temp (MiB)", "one N x N score matrix (MiB)",
           "TFLOP/s (useful)", f"% of {yardstick_name}"], rows)

lines_time = {name: ([n for n in seq_lens if (name, n) in results],
                     [results[name, n][0].median_s * 1e3 for n in seq_lens if (name, n) in results],
                     [results[name, n][0] for n in seq_lens if (name, n) in results]) for name in VARIANTS}
lines_mem = {name: ([n for n in seq_lens if (name, n) in results],
                    [results[name, n][1] / 2**20 for n in seq_lens if (name, n) in results]) for name in VARIANTS}
lines_mem["one score matrix (computed)"] = (seq_lens, [score_matrix_bytes(n) / 2**20 for n in seq_lens])
# the finding: the fastest variant against naive, at the longest N where naive ran
naive_lens = [n for n in seq_lens if ("naive", n) in results]
n_naive = naive_lens[-1] if naive_lens else None
rivals = [name for name in VARIANTS if name != "naive" and (name, n_naive) in results]
time_title = "Causal attention: median time vs sequence length"  # if naive or every other variant failed
if rivals:
    fastest = min(rivals, key=lambda name: results[name, n_naive][0].median_s)
    ratio = results["naive", n_naive][0].median_s / results[fastest, n_naive][0].median_s
    time_title = (f"Causal attention, N={n_naive}: {fastest} {ratio:.3g}x faster than naive" if ratio >= 1
                  else f"Causal attention, N={n_naive}: naive fastest, {1 / ratio:.3g}x ahead of {fastest}")
run.series("time", time_title, "sequence length N", "ms", lines_time, x_log=True, y_log=True)
run.series("memory", "Causal attention: peak temporary memory vs sequence length", "sequence length N",
           "MiB", lines_mem, x_log=True, y_log=True)

shortest = seq_lens[0]
ran = [name for name in VARIANTS if (name, shortest) in results]  # a variant that failed even at the shortest drops out
longest = max(n for n in seq_lens if all((name, n) in results for name in ran))  # where every variant ran
fused = [name for name in BACKENDS if name in ran and name != "sdpa_math"] or ["sdpa_default"] * ("sdpa_default" in ran)
for name in ran:
    timing, peak = results[name, longest]
    run.metric(f"{name}.ms", timing.median_s * 1e3, "ms", label=f"{name}, N={longest}: median time")
    run.metric(f"{name}.peak_mib", peak / 2**20, "MiB", label=f"{name}, N={longest}: peak temporary memory")
    run.metric(f"{name}.tflops", causal_flops(longest) / timing.median_s / 1e12, "TFLOP/s", ceiling=ceiling,
               label=f"{name}, N={longest}: useful causal TFLOP/s")
    if not run.device.is_gpu:
        run.metric(f"{name}.of_one_thread_matmul", causal_flops(longest) / timing.median_s / 1e12 / one_thread_tflops,
                   "fraction", label=f"{name}, N={longest}: useful TFLOP/s over the one-thread matmul rate")
    run.metric(f"{name}.peak_growth", results[name, longest][1] / max(results[name, shortest][1], 1), "x",
               label=f"{name}: peak memory at N={longest} over N={shortest} ({longest // shortest}x longer)")
    run.metric(f"{name}.time_growth", timing.median_s / results[name, shortest][0].median_s, "x",
               label=f"{name}: time at N={longest} over N={shortest}")
run.metric("score_matrix_mib", score_matrix_bytes(longest) / 2**20, "MiB",
           label=f"one N x N score matrix at N={longest}, all heads (computed)", origin="computed")
if fused and "naive" in ran:  # else what failed is in not_run, and there is nothing to compare
    best = min(fused, key=lambda name: results[name, longest][0].median_s)
    run.metric("best_fused.speedup_vs_naive", results["naive", longest][0].median_s / results[best, longest][0].median_s,
               "x", label=f"fastest fused SDPA backend ({best}) over naive, N={longest}")
    run.metric("best_fused.memory_saving_vs_naive", results["naive", longest][1] / max(results[best, longest][1], 1), "x",
               label=f"naive peak memory over {best}'s, N={longest}")
    run.log(f"fastest fused backend at N={longest}: {best}")
n_max = seq_lens[-1]
at_max = [name for name in fused if (name, n_max) in results]
if run.device.is_gpu and at_max:
    top = min(at_max, key=lambda name: results[name, n_max][0].median_s)
    run.metric("best_fused.tflops_longest", causal_flops(n_max) / results[top, n_max][0].median_s / 1e12, "TFLOP/s",
               ceiling=ceiling, label=f"fastest fused backend ({top}) at N={n_max}: useful causal TFLOP/s")

run.save()
