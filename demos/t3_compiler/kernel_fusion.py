# %% [markdown]
# # Kernel fusion: bias + GELU, and add + LayerNorm + GELU
#
# A chain of elementwise and normalization ops is memory-bound: each op reads its input from
# memory and writes its output back. Fusing the chain into one kernel keeps the intermediates in
# registers, so only the chain's true inputs and outputs move. This demo measures that saving for
# three implementations of each chain: PyTorch eager (one kernel per op), `torch.compile`
# (TorchInductor generates the fused kernel), and a hand-written Triton kernel.
#
# Every variant is first checked against a float64 reference on fresh random inputs; then each is
# timed across sizes and its *effective bandwidth* (the bytes the chain must move, divided by the
# time) is compared with this machine's copy bandwidth, measured in the same run.

# %%
import torch
import torch.nn.functional as F

from demos.harness.run import start

run = start(
    "kernel_fusion",
    title="Kernel fusion: eager vs torch.compile vs Triton",
    sizes={  # (rows, hidden) shapes; hidden stays fixed like a model's width
        "tiny": [(64, 256), (256, 256)],
        "small": [(64, 1024), (256, 1024), (1024, 1024), (4096, 1024)],
        "full": [(256, 4096), (1024, 4096), (4096, 4096), (16384, 4096), (65536, 4096)],
    },
)
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32  # what models use on each
EPS = 1e-5

# Imported after start(): without a GPU, start() has switched Triton to its interpreter.
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# %% [markdown]
# ## The implementations
#
# **Eager** is what you write in PyTorch. `x + b` launches one kernel and writes a temporary the
# size of `x`; `gelu` launches a second that reads it back.

# %%
def bias_gelu_eager(x, b):
    return F.gelu(x + b)


def add_ln_gelu_eager(x, residual, weight, bias):
    return F.gelu(F.layer_norm(x + residual, (x.shape[-1],), weight, bias, EPS))


# %% [markdown]
# **torch.compile** traces the same Python function into a graph, and TorchInductor emits one fused
# kernel per chain (Triton on a GPU, C++/OpenMP on a CPU). `dynamic=False` specializes every shape,
# so each new size pays a compile on its first call; the harness reports that first call apart.

# %%
bias_gelu_compiled = torch.compile(bias_gelu_eager, dynamic=False)
add_ln_gelu_compiled = torch.compile(add_ln_gelu_eager, dynamic=False)


# %% [markdown]
# **Triton, by hand.** Bias + GELU is purely elementwise: each program handles `BLOCK` consecutive
# elements and finds its bias entry by `offset % hidden`. The LayerNorm chain needs a row reduction,
# so each program owns one whole row: it loads the row once, computes mean and variance in fp32
# registers, normalizes, applies GELU, and writes the row once.

# %%
@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, n_elements, hidden, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    h = tl.load(x_ptr + offsets, mask=mask).to(tl.float32) + tl.load(b_ptr + offsets % hidden, mask=mask).to(
        tl.float32
    )
    y = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))  # exact GELU, as F.gelu's default
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def bias_gelu_triton(x, b):
    y = torch.empty_like(x)
    n = x.numel()
    bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, b, y, n, x.shape[-1], BLOCK=1024, num_warps=4)
    return y


@triton.jit
def add_ln_gelu_kernel(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, hidden, eps, BLOCK: tl.constexpr):
    row_start = tl.program_id(0) * hidden
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    h = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0).to(tl.float32)
    h += tl.load(r_ptr + row_start + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(h, axis=0) / hidden
    centered = tl.where(mask, h - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    z = centered * rstd * w + b
    y = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    tl.store(y_ptr + row_start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def add_ln_gelu_triton(x, residual, weight, bias):
    rows, hidden = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(hidden)
    add_ln_gelu_kernel[(rows,)](x, residual, weight, bias, y, hidden, EPS, BLOCK=block, num_warps=8)
    return y


# %% [markdown]
# ## Inputs, references and the bytes each chain must move
#
# The *must-move* bytes are the chain's inputs plus its output: what a perfectly fused kernel
# moves. Eager moves more, because every intermediate makes a round trip through memory:
# bias + GELU writes and re-reads one temporary (about 2x the must-move bytes); add + LayerNorm +
# GELU writes and re-reads two (7/3, about 2.3x), or 8/3 if LayerNorm re-reads its input from
# memory for the second pass.

# %%
CHAINS = {
    "bias_gelu": {
        "title": "bias + GELU",
        "variants": {"eager": bias_gelu_eager, "compiled": bias_gelu_compiled, "triton": bias_gelu_triton},
        "inputs": lambda m, n: (torch.randn(m, n, device=device, dtype=dtype), torch.randn(n, device=device, dtype=dtype)),
        "reference": lambda x, b: F.gelu(x.double() + b.double()),
        "must_move": lambda m, n, e: (2 * m * n + n) * e,  # read x and b, write y
    },
    "add_ln_gelu": {
        "title": "add + LayerNorm + GELU",
        "variants": {"eager": add_ln_gelu_eager, "compiled": add_ln_gelu_compiled, "triton": add_ln_gelu_triton},
        "inputs": lambda m, n: (
            torch.randn(m, n, device=device, dtype=dtype),
            torch.randn(m, n, device=device, dtype=dtype),
            1 + 0.1 * torch.randn(n, device=device, dtype=dtype),
            0.1 * torch.randn(n, device=device, dtype=dtype),
        ),
        "reference": lambda x, r, w, b: F.gelu(F.layer_norm(x.double() + r.double(), (x.shape[-1],), w.double(), b.double(), EPS)),
        "must_move": lambda m, n, e: (3 * m * n + 2 * n) * e,  # read x, residual, weight, bias; write y
    },
}
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}[dtype]

# %% [markdown]
# ## Correctness first
#
# Each variant, at every size, against the float64 reference on fresh random inputs. Without a
# GPU the Triton kernels run in Triton's interpreter, which is checked at the smallest size only:
# the interpreter executes each program in NumPy, far too slowly for the big ones.
#
# This is also each variant's first call at each shape, so its time is kept: for the compiled
# variant it is the trace and compile (the caches start empty every run). Inductor's one-time
# start-up in a fresh process (imports, toolchain checks) would land on whichever graph compiles
# first, so it is paid and measured apart, on a throwaway function.

# %%
_, startup_s = run.first_call(lambda: torch.compile(lambda t: t * 2.0 + 1.0)(torch.randn(8, device=device)))
run.metric("inductor_startup_s", startup_s, "s", label="Inductor's one-time start-up (first compile in a process)")

first_call_s = {}  # (chain, variant, (m, n)) -> seconds
for chain_name, chain in CHAINS.items():
    for m, n in run.sizes:
        inputs = chain["inputs"](m, n)  # fresh inputs, never the ones that get timed
        reference = chain["reference"](*inputs)
        for variant, fn in chain["variants"].items():
            if variant == "triton" and not run.device.is_gpu and (m, n) != run.sizes[0]:
                continue
            out, first_call_s[chain_name, variant, (m, n)] = run.first_call(lambda: fn(*inputs))
            run.check_close(f"{chain_name}.{variant}.{m}x{n}", out, reference, **TOLERANCE)

# %% [markdown]
# ## Measurement
#
# Steady state only: every variant has already run once at every shape (the checks above), so
# compiles are done and the first-call times are kept apart.

# %%
if not run.device.is_gpu:
    run.not_run("triton (timing)", "no GPU here: Triton kernels ran only in Triton's interpreter (NumPy), "
                "whose speed says nothing about a GPU; their correctness was checked above")

results = {}  # (chain, variant, (m, n)) -> (timing, effective GB/s)
for chain_name, chain in CHAINS.items():
    for m, n in run.sizes:
        inputs = chain["inputs"](m, n)
        must_move = chain["must_move"](m, n, dtype.itemsize)
        for variant, fn in chain["variants"].items():
            if variant == "triton" and not run.device.is_gpu:
                continue
            timing = run.time(lambda: fn(*inputs))
            results[chain_name, variant, (m, n)] = timing, must_move / timing.median_s / 1e9
            run.log(f"  {chain_name:12s} {m:6d}x{n:<5d} {variant:9s} {timing.median_s * 1e6:10.1f} us "
                    f"{results[chain_name, variant, (m, n)][1]:8.1f} GB/s")

# %% [markdown]
# At the smallest sizes a fixed per-call cost can outweigh what fusion saves. To see that cost on
# its own, time bias + GELU on a single row, where there is almost no data to move.

# %%
one_row = CHAINS["bias_gelu"]["inputs"](1, run.sizes[0][1])
for variant in ("eager", "compiled"):
    fn = CHAINS["bias_gelu"]["variants"][variant]
    run.first_call(lambda: fn(*one_row))  # compile for this shape outside the timing
    run.metric(f"bias_gelu.{variant}.one_row_us", run.time(lambda: fn(*one_row)).median_s * 1e6, "us",
               label=f"bias + GELU, {variant}, one row of {run.sizes[0][1]}: median time per call")

# %% [markdown]
# ## Results
#
# For each chain: a table over sizes, a plot of effective bandwidth against the bytes the chain
# must move (with the copy ceiling as the line to reach), and named metrics at the largest and
# smallest sizes that the topic page quotes.

# %%
copy_gbps = run.ceilings["copy_bandwidth"]["value"]
variants_here = [v for v in ("eager", "compiled", "triton") if run.device.is_gpu or v != "triton"]
smallest, largest = run.sizes[0], run.sizes[-1]
for chain_name, chain in CHAINS.items():
    rows, lines = [], {}
    for m, n in run.sizes:
        eager_time = results[chain_name, "eager", (m, n)][0].median_s
        for variant in variants_here:
            timing, gbps = results[chain_name, variant, (m, n)]
            rows.append([f"{m}x{n}", round(chain["must_move"](m, n, dtype.itemsize) / 1e6, 2), variant,
                         round(timing.median_s * 1e6, 1), f"{timing.p10_s * 1e6:.1f}-{timing.p90_s * 1e6:.1f}",
                         round(gbps, 1), round(100 * gbps / copy_gbps, 1), round(eager_time / timing.median_s, 2),
                         round(first_call_s[chain_name, variant, (m, n)] * 1e3, 1)])
            xs, ys = lines.setdefault(variant, ([], []))
            xs.append(chain["must_move"](m, n, dtype.itemsize) / 1e6)
            ys.append(gbps)
    run.table(chain_name, f"{chain['title']} ({str(dtype).removeprefix('torch.')})",
              ["rows x hidden", "must move (MB)", "variant", "median (us)", "p10-p90 (us)", "GB/s",
               "% of copy BW", "speedup vs eager", "first call (ms)"], rows)
    run.series(chain_name, f"{chain['title']}: effective bandwidth", "bytes the chain must move (MB)",
               "effective GB/s", lines, hlines={"copy bandwidth (same run)": copy_gbps}, x_log=True)

    for variant in variants_here:
        timing, gbps = results[chain_name, variant, largest]
        run.metric(f"{chain_name}.{variant}.gbps", gbps, "GB/s", ceiling="copy_bandwidth",
                   label=f"{chain['title']}, {variant}, largest size: effective bandwidth")
        run.metric(f"{chain_name}.{variant}.median_us", timing.median_s * 1e6, "us",
                   label=f"{chain['title']}, {variant}, largest size: median time")
        if variant != "eager":
            for where, size in (("largest", largest), ("smallest", smallest)):
                speedup = results[chain_name, "eager", size][0].median_s / results[chain_name, variant, size][0].median_s
                run.metric(f"{chain_name}.{variant}.speedup_{where}", speedup, "x",
                           label=f"{chain['title']}, {variant} over eager, {where} size")
    run.metric(f"{chain_name}.compiled.first_call_s", first_call_s[chain_name, "compiled", largest], "s",
               label=f"{chain['title']}: first call of the compiled variant at the largest size (trace + compile)")
    best = max(variants_here[1:], key=lambda v: results[chain_name, v, largest][1])
    run.metric(f"{chain_name}.best_fused.gbps", results[chain_name, best, largest][1], "GB/s",
               ceiling="copy_bandwidth", label=f"{chain['title']}: best fused variant ({best}), largest size")
    run.log(f"{chain['title']}: best fused = {best}, "
            f"{100 * results[chain_name, best, largest][1] / copy_gbps:.0f}% of copy bandwidth at the largest size")

run.save()
