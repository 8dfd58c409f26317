# %% [markdown]
# # Bottleneck triage: find the bound of a training step and a decode step, then pull one lever at a time
#
# "How would you optimize large-scale training and inference?" has one good shape of answer: measure the
# step, find what bounds it (compute, memory bandwidth, capacity, per-op overhead, communication), pull the
# lever for that bound, and verify. This demo does exactly that for one small training step (forward,
# backward, AdamW) and one decode step (batch 1, KV cache) of the same small decoder.
#
# For each step it measures the time, counts the FLOPs (`torch.utils.flop_counter.FlopCounterMode`), the
# bytes that must move at least (weights, gradients and optimizer state for training; weights and the KV
# cache for decode) and the ops or kernels dispatched (`torch.profiler`). Each count becomes a lower bound
# on the time: FLOPs at the matmul peak, bytes at the copy rate, ops at the cost of one trivial op; over the
# measured step, each is that resource's share. The rule: compute- or memory-bound when that share is at
# least a half; overhead-bound when the op-count share is the largest of the three; otherwise "mixed", no
# single resource explains the step (the roofline model: Williams, Waterman, Patterson,
# [Roofline](https://doi.org/10.1145/1498765.1498785), CACM 2009; the overhead term follows Horace He,
# [Making Deep Learning Go Brrrr From First Principles](https://horace.io/brrr_intro.html)). A second test
# of overhead: a fixed per-step cost does not grow with the batch, so the baseline and larger batch's times
# bound how much of the step it can be.

# %%
import copy

import torch

from demos.harness.run import start

run = start(
    "bottleneck_triage",
    title="Bottleneck triage: classify a training step and a decode step, then measure each lever",
    sizes={  # the decoder; training sequence length, batch and the larger batch; decode context and batch
        "tiny": {"model": dict(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2), "seq": 32, "batch": 2,
                 "big_batch": 8, "ctx": 32, "dec_batch": 8, "compile": False},
        "small": {"model": dict(d_model=128, n_layers=2, n_heads=4, n_kv_heads=2), "seq": 64, "batch": 2,
                  "big_batch": 16, "ctx": 256, "dec_batch": 8, "compile": True},
        "full": {"model": dict(d_model=1024, n_layers=8, n_heads=16, n_kv_heads=4), "seq": 512, "batch": 8,
                 "big_batch": 32, "ctx": 1024, "dec_batch": 8, "compile": True},
    },
    cpu_threads=1,
)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402  (it imports triton, which must follow start())

from demos.common.memory import peak_bytes  # noqa: E402
from demos.t12_design._triage import dispatched_ops, lm_loss, saved_activation_bytes, triage  # noqa: E402
from demos.t6_inference._model import Config, TinyLM  # noqa: E402

S, dev = run.sizes, run.torch_device
gpu = run.device.is_gpu
MiB = 2**20

# %% [markdown]
# ## 1. The yardsticks: what one op, one matmul and one copy cost here
#
# On a CPU the demo's work runs on one thread (the ceilings in the record use every thread), so the
# peaks used to classify are measured here on that one thread: a 512-cube matmul in fp32 and bf16 and
# a 64 MiB in-place pass. On a GPU they are the run's ceilings. They are recorded (`yardstick.*`), and
# every share below is computed against them. The overhead yardstick is one trivial
# op (`add_` on a one-element tensor): on a CPU the cost of dispatching an ATen op, on a GPU the cost of
# launching a kernel.

# %%
scratch = torch.zeros(1, device=dev)
per_op_s = run.time(lambda: [scratch.add_(1.0) for _ in range(100)], flush=False).median_s / 100
if gpu:
    peak = {dt: run.ceilings[f"matmul_{dt}"]["value"] * 1e12 for dt in ("fp32", "bf16")}
    bandwidth = run.ceilings["copy_bandwidth"]["value"] * 1e9
else:
    peak = {}
    for dt, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a = torch.randn(512, 512, dtype=dtype)
        peak[dt] = 2 * 512**3 / run.time(lambda: a @ a).best_s
    buf = torch.randn(16 * MiB)
    bandwidth = 2 * buf.numel() * 4 / run.time(lambda: buf.mul_(1.0)).best_s
run.log(f"  yardsticks: one op {per_op_s * 1e6:.2f} us, fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s, "
        f"bf16 {peak['bf16'] / 1e9:.0f} GFLOP/s, copy {bandwidth / 1e9:.1f} GB/s")

# %% [markdown]
# ## 2. The training step and its levers
#
# The step is `zero_grad`, forward, loss, backward and `AdamW.step()` in fp32. The levers, one at a
# time: `torch.compile` of the forward and loss (fusion; Inductor compiles the backward too); bf16
# autocast (precision); a larger batch (amortizes every per-op cost over more samples); activation
# checkpointing (a capacity lever: it recomputes each block's forward in the backward pass). Every
# variant starts from the same weights and its first step's loss and gradients are checked against the
# baseline's. The larger batch also bounds the fixed cost: if a step takes F + V, with V the part that
# grows with the batch (and grows no faster than it), the baseline's time T1 and the time T2 at k times
# the batch give F <= (k T1 - T2) / (k - 1).

# %%
cfg = Config(**S["model"], max_len=max(S["seq"], S["ctx"] + 1))
torch.manual_seed(run.options.seed)
base = TinyLM(cfg).to(dev)
n_params = sum(p.numel() for p in base.parameters())
gen = torch.Generator().manual_seed(run.options.seed)
data = torch.randint(0, cfg.vocab, (S["big_batch"], S["seq"] + 1), generator=gen).to(dev)
B, BIG = S["batch"], S["big_batch"]


def train_variant(loss_fn, batch=B, bf16=False, ckpt=False):
    """A fresh copy of the model and its optimizer: (first forward/backward's loss, gradients, seconds), the
    forward/backward callable and the whole step."""
    model = copy.deepcopy(base)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = data[:batch, :-1], data[:batch, 1:]

    def fwd_bwd():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model, x, y, ckpt)
        loss.backward()
        return loss

    def step():
        fwd_bwd()
        opt.step()

    loss, first_s = run.first_call(fwd_bwd)
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    return {"loss": loss.detach(), "grads": grads, "first_s": first_s, "fwd_bwd": fwd_bwd, "step": step, "opt": opt}


TRAIN = {  # name: (what it is, the bound it targets, arguments)
    "baseline": ("fp32, eager", "", dict(loss_fn=lm_loss)),
    "compile": ("torch.compile (fusion)", "overhead, memory", dict(loss_fn=torch.compile(lm_loss))),
    "bf16": ("bf16 autocast (precision)", "compute, memory", dict(loss_fn=lm_loss, bf16=True)),
    "big_batch": (f"batch {B} -> {BIG} (per sample)", "overhead", dict(loss_fn=lm_loss, batch=BIG)),
    "checkpoint": ("activation checkpointing", "capacity", dict(loss_fn=lm_loss, ckpt=True)),
}
if not S["compile"]:
    del TRAIN["compile"]
    run.not_run("torch.compile", "skipped at the tiny (smoke-test) size: a cold Inductor compile takes tens of "
                "seconds on a small CPU; the small and full sizes run and check it")
train = {name: train_variant(**kwargs) for name, (_, _, kwargs) in TRAIN.items()}
ref = train["baseline"]
tol = {"compile": 1e-4, "bf16": 3e-2, "checkpoint": 1e-5}
for name, t in tol.items():
    if name not in train:
        continue
    run.check_close(f"train.{name}.loss", train[name]["loss"], ref["loss"], rtol=t, atol=t,
                    reference_name="fp32 eager loss")
    scale = float(ref["grads"].abs().max())
    run.check_close(f"train.{name}.grads", train[name]["grads"] / scale, ref["grads"] / scale, rtol=0, atol=10 * t,
                    reference_name="fp32 eager gradients, over their largest")
# The larger batch sees other samples: its loss is the mean of the baseline's loss over its slices.
parts = [lm_loss(base, data[i:i + B, :-1], data[i:i + B, 1:]).detach() for i in range(0, BIG, B)]
run.check_close("train.big_batch.loss", train["big_batch"]["loss"], torch.stack(parts).mean(), rtol=1e-5, atol=1e-5,
                reference_name=f"mean of the fp32 eager loss over {BIG // B} slices of {B}")
for name, v in train.items():
    v["timing"] = run.time(v["step"])
    v["per_sample_s"] = v["timing"].median_s / (BIG if name == "big_batch" else B)
# The most of the baseline step that can be a fixed cost (one that does not grow with the batch):
k_batch, t1, t2 = BIG / B, ref["timing"].median_s, train["big_batch"]["timing"].median_s
fixed_share_max = (k_batch * t1 - t2) / (k_batch - 1) / t1

# %% [markdown]
# ### What the training step needs: FLOPs, bytes, ops and memory
#
# The bytes are the least one step must move: fp32 weights read in the forward and the backward pass,
# gradients written, AdamW's read of weights, gradients and both moments and its write of weights and
# moments (40 bytes a parameter), plus the saved activations written once and read once. Capacity is the
# model state (weights, gradients, two moments: 16 bytes a parameter) plus those activations; the peak
# is measured (`torch.cuda.max_memory_allocated` on a GPU, the CPU allocator's running total as the
# profiler reports it on a CPU).


# %%
def flops_of(fn) -> float:
    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def train_needs(name):
    v, batch, ckpt = train[name], BIG if name == "big_batch" else B, name == "checkpoint"
    act = saved_activation_bytes(lambda: lm_loss(base, data[:batch, :-1], data[:batch, 1:], ckpt), base)
    if ckpt:  # checkpointing keeps each block's input outside the autograd hooks: count it here
        act += cfg.n_layers * batch * S["seq"] * cfg.d_model * 4
    return {"flops": flops_of(v["fwd_bwd"]), "act": act, "bytes": 40 * n_params + 2 * act,
            "ops": dispatched_ops(v["step"], gpu)}


need = {name: train_needs(name) for name in ("baseline", "bf16", "big_batch", "checkpoint")}
if "compile" in train:  # the same FLOPs and bytes as the baseline; fewer ops dispatched
    need["compile"] = {**need["baseline"], "ops": dispatched_ops(train["compile"]["step"], gpu)}
cls = {name: triage(train[name]["timing"].median_s, n["flops"], n["bytes"], n["ops"],
                    peak["bf16" if name == "bf16" else "fp32"], bandwidth, per_op_s) for name, n in need.items()}
state_bytes = 16 * n_params
peak_mem = {}
for name in ("baseline", "checkpoint"):
    train[name]["opt"].zero_grad(set_to_none=True)  # the peak above weights and optimizer state
    peak_mem[name] = peak_bytes(train[name]["fwd_bwd"], dev)
run.not_run("communication", "one device: no collective to time. Data, tensor and pipeline parallelism add "
            "all-reduce, all-gather and point-to-point traffic; see the parallelism and training-at-scale pages")

# %% [markdown]
# ## 3. The decode step and its levers
#
# One new token at batch 1 after a prompt of `ctx` tokens, reading a preallocated KV cache
# (`decode_static` of the T6 model: fixed shapes, the position a tensor, so the same step can be
# compiled and captured). The decode model is fp32 on a CPU and bf16 on a GPU. The levers: the KV cache
# itself (against recomputing the whole prefix each token), batching 1 -> `dec_batch` sequences (time per
# token), `torch.compile`, and CUDA graphs (one launch for the whole step; GPU only).

# %%
torch.set_grad_enabled(False)
dec_dtype = torch.bfloat16 if gpu else torch.float32
dmodel = copy.deepcopy(base).to(dec_dtype).eval()
CTX, DB = S["ctx"], S["dec_batch"]
prompt = torch.randint(0, cfg.vocab, (DB, CTX + 1), generator=gen).to(dev)
prompt[:, :CTX] = prompt[:1, :CTX]  # every sequence of the batch shares sequence 0's prefix


def prefilled(batch):
    cache = dmodel.new_cache(batch, CTX + 1)
    dmodel(prompt[:batch, :CTX], cache)
    return cache


position = torch.tensor([CTX], device=dev)
cache1, cacheb = prefilled(1), prefilled(DB)
DECODE = {  # name: (what it is, the bound it targets, the callable, tokens it produces)
    "baseline": ("batch 1, KV cache, eager", "", lambda: dmodel.decode_static(prompt[:1, CTX:], cache1, position), 1),
    "recompute": ("batch 1, no cache: recompute the prefix", "(the cache: compute)",
                  lambda: dmodel(prompt[:1])[:, -1:], 1),
    "batch": (f"batch {DB}, KV cache, eager", "overhead, memory",
              lambda: dmodel.decode_static(prompt[:, CTX:], cacheb, position), DB),
}
if S["compile"]:
    compiled_decode = torch.compile(dmodel.decode_static)
    DECODE["compile"] = ("batch 1, torch.compile", "overhead",
                         lambda: compiled_decode(prompt[:1, CTX:], cache1, position), 1)
tight = 2e-2 if gpu else 1e-4
out = {name: run.first_call(fn) for name, (_, _, fn, _) in DECODE.items()}
base_out = out["baseline"][0].float()
for name in [k for k in ("recompute", "compile") if k in out]:
    run.check_close(f"decode.{name}", out[name][0].float(), base_out, rtol=tight, atol=tight,
                    reference_name="the eager cached step's logits")
run.check_close("decode.batch.row0", out["batch"][0][:1].float(), base_out, rtol=tight, atol=tight,
                reference_name="the same sequence decoded alone")
if gpu:
    static_tok = prompt[:1, CTX:].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up outside the capture (allocator, library workspaces)
            dmodel.decode_static(static_tok, cache1, position)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = dmodel.decode_static(static_tok, cache1, position)
    DECODE["cuda_graph"] = ("batch 1, CUDA graph replay", "overhead (launches)", graph.replay, 1)
    out["cuda_graph"] = run.first_call(graph.replay)
    run.check_close("decode.cuda_graph", graph_out.float(), base_out, rtol=tight, atol=tight,
                    reference_name="the eager cached step's logits")
else:
    run.not_run("decode: CUDA graph", "CUDA graphs need a GPU; the fixed-shape step they would capture is the "
                "one timed and checked here")
decode = {name: {"timing": run.time(fn, flush=False), "tokens": n} for name, (_, _, fn, n) in DECODE.items()}
for v in decode.values():
    v["per_token_s"] = v["timing"].median_s / v["tokens"]

# %% [markdown]
# ### What the decode step needs
#
# The bytes are every weight once (the output layer shares the embedding's matrix, read whole) plus the
# whole KV cache of each sequence; recomputing instead reads the weights once but does the prefix's
# FLOPs again.

# %%
elem = torch.finfo(dec_dtype).bits // 8
kv_bytes = cfg.kv_cache_bytes(1, CTX + 1, elem)
dec_need = {name: DB if name == "batch" else 1 for name in DECODE}
for name, batch in dec_need.items():
    nbytes = n_params * elem + (batch * kv_bytes if name != "recompute" else 0)
    d, fn = decode[name], DECODE[name][2]
    # a compiled or captured step does the baseline's FLOPs (FlopCounterMode would retrace it)
    flops = flops_of(fn) if name in ("baseline", "batch", "recompute") else decode["baseline"]["flops"]
    d.update(flops=flops, bytes=nbytes, ops=dispatched_ops(fn, gpu))
    d["triage"] = triage(d["timing"].median_s, d["flops"], nbytes, d["ops"], peak["bf16" if gpu else "fp32"],
                         bandwidth, per_op_s)
for name, c in [*cls.items(), *((f"decode.{k}", decode[k]["triage"]) for k in dec_need)]:
    # A lower bound cannot exceed what was measured: a fraction above 1 means the yardstick is wrong.
    run.check(f"yardstick.{name}", c["compute"] <= 1 and c["memory"] <= 1,
              f"compute {c['compute']:.3f}, memory {c['memory']:.3f} of the measured step (each at most 1)")

# %% [markdown]
# ## Results

# %%
rows = []
for name in cls:
    c, n = cls[name], need[name]
    rows.append([f"training: {TRAIN[name][0]}, batch {BIG if name == 'big_batch' else B}",
                 round(train[name]["timing"].median_s * 1e3, 3), round(n["flops"] / 1e9, 4),
                 round(n["bytes"] / MiB, 2), n["ops"], round(c["compute"], 3), round(c["memory"], 3),
                 round(c["overhead"], 3), c["bound"]])
for name in dec_need:
    d = decode[name]
    c = d["triage"]
    rows.append([f"decode: {DECODE[name][0]}", round(d["timing"].median_s * 1e3, 3), round(d["flops"] / 1e9, 4),
                 round(d["bytes"] / MiB, 2), d["ops"], round(c["compute"], 3), round(c["memory"], 3),
                 round(c["overhead"], 3), c["bound"]])
kinds = "kernels" if gpu else "ATen ops"


def bound_words(b):
    return "mixed (no single resource explains it)" if b == "mixed" else f"{b}-bound"


run.table("triage", f"Training step: {bound_words(cls['baseline']['bound'])}; decode step: "
          f"{bound_words(decode['baseline']['triage']['bound'])} (each resource's lower bound over the measured time)",
          ["step", "time (ms)", "GFLOP", "least MiB moved", kinds, "compute share", "memory share", "overhead share",
           "bound"], rows)

speedup = {f"train.{k}": ref["timing"].median_s / train[k]["timing"].median_s
           for k in ("compile", "bf16", "checkpoint") if k in train}
speedup["train.big_batch"] = ref["per_sample_s"] / train["big_batch"]["per_sample_s"]
for k in decode:
    if k != "baseline":
        speedup[f"decode.{k}"] = decode["baseline"]["per_token_s"] / decode[k]["per_token_s"]
lever_rows = [[f"training: {TRAIN[k][0]}", TRAIN[k][1], round(train[k]["per_sample_s"] * 1e3, 3),
               round(speedup[f"train.{k}"], 2), round(train[k]["first_s"], 2)] for k in TRAIN if k != "baseline"]
lever_rows += [[f"decode: {DECODE[k][0]}", DECODE[k][1], round(decode[k]["per_token_s"] * 1e3, 3),
                round(speedup[f"decode.{k}"], 3), round(out[k][1], 2)] for k in DECODE if k != "baseline"]
best = max(speedup, key=speedup.get)
run.table("levers", f"One lever at a time: {best} helped most ({speedup[best]:.1f}x)",
          ["lever", "bound it targets", "ms per sample or token", "x faster than baseline", "first call (s)"],
          [[f"training: baseline ({TRAIN['baseline'][0]}, batch {B})", "", round(ref["per_sample_s"] * 1e3, 3), 1.0,
            round(ref["first_s"], 2)],
           [f"decode: baseline ({DECODE['baseline'][0]})", "", round(decode["baseline"]["per_token_s"] * 1e3, 3), 1.0,
            round(out["baseline"][1], 2)]] + lever_rows)
run.table("capacity", "Training memory: what the step needs, and what checkpointing saves",
          ["quantity", "MiB"],
          [["model state (weights, gradients, AdamW moments: 16 B per parameter)", round(state_bytes / MiB, 3)],
           ["saved activations, baseline", round(need["baseline"]["act"] / MiB, 3)],
           ["saved activations, checkpointed", round(need["checkpoint"]["act"] / MiB, 3)],
           ["measured peak above the state, baseline", round(peak_mem["baseline"] / MiB, 3)],
           ["measured peak above the state, checkpointed", round(peak_mem["checkpoint"] / MiB, 3)]])

run.metric("params_m", n_params / 1e6, "M", label="decoder parameters", origin="computed")
run.metric("per_op_us", per_op_s * 1e6, "us", label="dispatching one trivial op (a kernel launch on a GPU)")
where = "the run's ceiling" if gpu else "one thread, 512-cube matmul"
for dt, dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
    run.metric(f"yardstick.{dt}_gflops", peak[dt] / 1e9, "GFLOP/s", dtype=dtype,
               label=f"{dt} matmul peak the compute shares use ({where})")
run.metric("yardstick.copy_gbps", bandwidth / 1e9, "GB/s", label="copy rate the memory shares use (" +
           ("the run's ceiling)" if gpu else "one thread, in-place pass over 64 MiB, bytes read + written)"))
run.metric("yardstick.bf16_over_fp32", peak["bf16"] / peak["fp32"], "x",
           label="bf16 matmul rate over fp32's, as classified")
shares = [*((f"train.{k}", v) for k, v in cls.items()), *((f"decode.{k}", decode[k]["triage"]) for k in dec_need)]
for name, c in shares:
    for part in ("compute", "memory", "overhead"):
        run.metric(f"{name}.{part}_share", c[part], "fraction",
                   label=f"{name}: {part} lower bound over the measured step time")
for k, v in train.items():
    run.metric(f"train.{k}.step_ms", v["timing"].median_s * 1e3, "ms", label=f"training step, {TRAIN[k][0]}")
for k, v in decode.items():
    run.metric(f"decode.{k}.per_token_ms", v["per_token_s"] * 1e3, "ms", label=f"decode, {DECODE[k][0]}, per token")
for k, v in speedup.items():
    run.metric(f"{k}.speedup", v, "x", label=f"{k}: baseline time over the lever's (per sample or token)")
if S["compile"]:
    run.metric("train.compile.first_call_s", train["compile"]["first_s"], "s",
               label="first compiled forward and backward")
    run.metric("decode.compile.first_call_s", out["compile"][1], "s", label="first compiled decode step")
for name, n_ops, what in [*((f"train.{k}", n["ops"], TRAIN[k][0]) for k, n in need.items()),
                          *((f"decode.{k}", decode[k]["ops"], DECODE[k][0]) for k in dec_need)]:
    run.metric(f"{name}.ops", n_ops, "kernels" if gpu else "ops", label=f"{kinds} per step, {what}")
run.metric("train.big_batch.time_ratio", t2 / t1, "x", label=f"training step time at batch {BIG} over batch {B}")
run.metric("train.fixed_share_max", fixed_share_max, "fraction",
           label=f"upper bound on the share of the batch-{B} step that does not grow with the batch, "
                 f"(k T1 - T2) / (k - 1) / T1 with k = {BIG // B}")
run.metric("train.baseline.tflops", need["baseline"]["flops"] / ref["timing"].median_s / 1e12, "TFLOP/s",
           dtype="float32", label="counted FLOPs over the fp32 step time")
# Only on a GPU is the run's copy ceiling the yardstick the memory shares use (on a CPU that is one thread's).
run.metric("decode.baseline.gbps", decode["baseline"]["bytes"] / decode["baseline"]["timing"].median_s / 1e9, "GB/s",
           ceiling="copy_bandwidth" if gpu else None,
           cache_resident=run.cache_resident(int(decode["baseline"]["bytes"]), flush=False),
           label="weights and KV cache bytes over the batch-1 decode step time")
run.metric("train.state_mib", state_bytes / MiB, "MiB", origin="computed", label="weights, gradients, AdamW moments")
run.metric("train.activations_mib", need["baseline"]["act"] / MiB, "MiB", label="saved activations, baseline")
run.metric("train.checkpoint.activations_mib", need["checkpoint"]["act"] / MiB, "MiB",
           label="saved activations, checkpointed")
for k, v in peak_mem.items():
    run.metric(f"train.{k}.peak_mib", v / MiB, "MiB", label=f"measured peak memory above the state, {k}")
run.save()
