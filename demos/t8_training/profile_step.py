# %% [markdown]
# # Profile first: where one training step's time goes, and its MFU
#
# Before changing anything, profile one step and sort its wall time into four bins that add up to it:
#
# - **compute-bound**: while a matrix multiplication runs (`mm`, `addmm`, `bmm`, at any depth of the
#   CPU op tree, since `aten::linear` only wraps `aten::addmm`; on a GPU the GEMM kernels);
# - **memory-bound**: while another op runs and no matmul does (elementwise, LayerNorm, softmax,
#   copies, the optimizer's update): on a GPU they do few FLOPs per byte, so memory bandwidth limits
#   them; on a CPU this bin is "everything but matmuls", and some of it is arithmetic-bound;
# - **communication**: while only a collective runs (`gloo:*` / `nccl:*` events): the exposed part;
#   a collective hidden under compute counts as compute;
# - **idle / host**: when no op runs on the device: Python, framework overhead, data loading.
#
# And the step's **MFU** (model FLOPs utilization, Chowdhery et al., [PaLM](https://arxiv.org/abs/2204.02311),
# appendix B): the FLOPs the model needs per step, 6 N per token for N parameters plus 12 L s h per token
# for attention, divided by step time and by the matmul ceiling measured in this same run (not a
# datasheet peak). On a CPU the step runs on one thread (a second thread on a small model is mostly
# synchronisation) while the harness measures the ceiling with all of the machine's threads, so a CPU
# MFU is a lower bound on the fraction of one thread's own peak; on a GPU both use the whole device.

# %%
import torch
from torch.nn.parallel import DistributedDataParallel

from demos.harness.run import start
from demos.t7_parallelism._dist import launch, under_torchrun
from demos.t8_training._gpt import GPTConfig, batch, make_gpt

run = start("profile_step", title="Profile of one training step: top ops, time split, MFU",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=32, width=64, heads=2, layers=2, dropout=0.0), "b": 2},
                   "small": {"cfg": GPTConfig(vocab=512, seq=64, width=192, heads=4, layers=4, dropout=0.0), "b": 4},
                   "full": {"cfg": GPTConfig(vocab=32000, seq=1024, width=2048, heads=16, layers=8, dropout=0.0), "b": 8}},
            cpu_threads=1)
cfg, B = run.sizes["cfg"], run.sizes["b"]
dev = run.torch_device
gpu = dev.type == "cuda"
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
COMM = ("c10d::", "gloo:", "nccl:", "ncclDevKernel", "ncclKernel")

# %%
model = make_gpt(cfg, seed=0, device=dev).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens, targets = batch(cfg, B, step=0, device=dev)


def step():
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=gpu):
        loss = model(tokens, targets)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def union_length(intervals):
    total, end = 0.0, -float("inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


# GEMM kernels by name. cuBLAS on Hopper calls many of its GEMMs nvjet_* (no "gemm" in the name) and others
# sm90_xmma_gemm_* (warpgroup MMA, wgmma); CUTLASS's are cutlass*; older parts' ampere_*gemm*, sm80_xmma_*.
GEMM_KERNELS = ("gemm", "cutlass", "xmma", "wgmma", "nvjet")


def classify(name):
    if name.startswith(COMM) or "nccl" in name.lower():
        return "communication"
    if name.startswith(MATMULS) or any(k in name.lower() for k in GEMM_KERNELS):
        return "compute-bound"
    return "memory-bound"


# No GPU record exists for this demo, so the binning is checked here, on kernel names of the forms these
# libraries print.
KNOWN = {"nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT": "compute-bound",
         "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
         "__5x_cublas": "compute-bound",
         "void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_"
         "align8>": "compute-bound",
         "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn": "compute-bound",
         "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>": "memory-bound",
         "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>": "memory-bound",
         "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication"}
wrong = {n: classify(n) for n, want in KNOWN.items() if classify(n) != want}
run.check("gpu_kernel_names_classified", not wrong, f"{len(KNOWN)} kernel names binned as expected; wrong: {wrong}")


def quietest_step(prof):
    """The profiled step (of several) with the shortest wall time: a shared machine can stall any one."""
    return min((e.time_range for e in prof.events() if e.name == "train_step"), key=lambda r: r.elapsed_us())


def split(prof, window):
    """Where the step's wall time goes, in bins that add up to it: compute-bound (any matmul running),
    memory-bound (another op running, no matmul), communication (only a collective running: the
    exposed part; a collective under compute counts as compute), idle / host (nothing running).
    GPU: kernels. CPU: ATen ops nest (`aten::linear` wraps `aten::addmm`), so a matmul counts at any
    depth, and the other ops at the outermost level only. Also returns the collectives' whole time
    (hidden or not), in microseconds."""
    wall_us = window.elapsed_us()
    events = [e for e in prof.events() if window.start <= e.time_range.start and e.time_range.end <= window.end]
    if gpu:
        ops = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    else:
        ops = [e for e in events if e.name.startswith(("aten::", "c10d::", "gloo:"))]
    bins = {"compute-bound": [], "memory-bound": [], "communication": []}
    for e in ops:
        kind = classify(e.name)
        outermost = gpu or not (e.cpu_parent is not None and e.cpu_parent.name.startswith(("aten::", "c10d::", "gloo:")))
        if kind != "memory-bound" or outermost:
            bins[kind].append([e.time_range.start, e.time_range.end])
    compute = union_length(bins["compute-bound"])
    computing = union_length(bins["memory-bound"] + bins["compute-bound"])
    busy = union_length([iv for v in bins.values() for iv in v])
    out = {"compute-bound": compute / wall_us,
           "memory-bound": (computing - compute) / wall_us,
           "communication": (busy - computing) / wall_us}
    out = {k: v for k, v in out.items() if bins[k]}
    out["idle / host"] = max(0.0, 1 - busy / wall_us)
    return out, union_length(bins["communication"])


step()
t = run.time(step)
activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
PROFILED = 3
with torch.profiler.profile(activities=activities, with_flops=True) as prof:
    for _ in range(PROFILED):
        with torch.profiler.record_function("train_step"):
            step()
            if gpu:
                torch.cuda.synchronize()  # inside the window, so the step's last kernels fall in it
window = quietest_step(prof)

# %% [markdown]
# ## Top ops

# %%
key = "self_device_time_total" if gpu else "self_cpu_time_total"
averages = sorted((a for a in prof.key_averages() if gpu or a.key.startswith(("aten::", "c10d::", "gloo:"))),
                  key=lambda a: getattr(a, key), reverse=True)
total_self = sum(getattr(a, key) for a in averages)
rows = [[a.key, a.count / PROFILED, getattr(a, key) / 1e3 / PROFILED, getattr(a, key) / total_self, classify(a.key)]
        for a in averages[:10]]
run.table("top_ops", f"Top 10 ops by self time (mean of {PROFILED} profiled steps)",
          ["op", "calls per step", "self ms per step", "share", "bin"], rows)
run.artifact("profile_table", prof.key_averages().table(sort_by=key, row_limit=15))

# %% [markdown]
# ## Time split and MFU

# %%
parts, _ = split(prof, window)
for name, share in parts.items():
    run.metric(f"split.{name.replace(' / ', '_').replace('-', '_')}", share, "fraction", label="of the profiled step's wall time")
n_params = sum(p.numel() for p in model.parameters())
n_tokens = B * cfg.seq
model_flops = (6 * n_params + 12 * cfg.layers * cfg.seq * cfg.width) * n_tokens
profiled_flops = sum(e.flops for e in prof.events() if e.flops and e.device_type != torch.autograd.DeviceType.CUDA
                     and window.start <= e.time_range.start and e.time_range.end <= window.end)
run.metric("step_ms", t.median_s * 1e3, "ms")
run.metric("model_flops_g", model_flops / 1e9, "GFLOP", label="(6 N + 12 L s h) x tokens", origin="computed")
run.metric("profiler_matmul_flops_g", profiled_flops / 1e9, "GFLOP", label="FLOPs the profiler counted in matmuls")
ceiling = "matmul_bf16" if gpu else "matmul_fp32"
run.metric("achieved_tflops", model_flops / t.median_s / 1e12, "TFLOP/s", ceiling=ceiling,
           label="model FLOPs / step time; its fraction of the matmul ceiling is the MFU")
run.check("flop_count_consistent", 0.7 < profiled_flops / model_flops < 1.3,
          f"profiler counted {profiled_flops / 1e9:.3f} GFLOP in matmuls vs {model_flops / 1e9:.3f} by the formula")
run.series("split", f"One step: {parts.get('compute-bound', 0.0):.0%} compute-bound, "
           f"{parts.get('memory-bound', 0.0):.0%} memory-bound, {parts['idle / host']:.0%} idle / host",
           "bin (0 compute, 1 memory, 2 comm, 3 idle)", "fraction",
           {"single process": ([0, 1, 2, 3], [parts.get(k, 0.0) for k in
                                              ("compute-bound", "memory-bound", "communication", "idle / host")])})

# %% [markdown]
# ## The same step with DDP on 2 ranks: the communication bin
#
# On a CPU, 2 gloo ranks with one thread each; under torchrun, one GPU per rank with NCCL.

# %%
def ddp_worker(rank, world):
    m = make_gpt(cfg, seed=0, device=dev).train()
    d = DistributedDataParallel(m)
    o = torch.optim.AdamW(d.parameters(), lr=1e-3)
    tk, tg = batch(cfg, B, step=0, seed=rank, device=dev)

    def ddp_step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=gpu):
            loss = d(tk, tg)
        o.zero_grad(set_to_none=True)
        loss.backward()
        o.step()

    ddp_step()
    ddp_step()
    with torch.profiler.profile(activities=activities) as p:
        for _ in range(PROFILED):
            with torch.profiler.record_function("train_step"):
                ddp_step()
                if gpu:
                    torch.cuda.synchronize()
    w = quietest_step(p)
    return split(p, w), w.elapsed_us()


if gpu and not under_torchrun():
    run.not_run("ddp split", "on GPUs this part runs under torchrun (one process per GPU)")
else:
    result = launch(ddp_worker, 2, device=dev)
    if result is not None:
        (ddp_parts, ddp_collective_us), ddp_wall = result[0]
        for name, share in ddp_parts.items():
            run.metric(f"ddp.split.{name.replace(' / ', '_').replace('-', '_')}", share, "fraction",
                       label="rank 0, of its profiled step's wall time")
        run.metric("ddp.step_ms", ddp_wall / 1e3, "ms", label="one profiled step, rank 0")
        run.check("ddp_has_communication", ddp_collective_us > 0, "the trace holds all-reduce time")
run.save()
