# %% [markdown]
# # Profiling a training step: where the time goes, and what kind of bound it is
#
# A timer says *how long*; a profiler says *where*. `torch.profiler` records every operator (and,
# on a GPU, every kernel) of a few training steps. From the trace: the top operators, the step's
# time split into matrix products (compute-bound work), everything else the operators do
# (elementwise, reductions, copies: memory-bound work) and the time outside any operator
# (Python, autograd bookkeeping, on a GPU the gaps where it waits for launches). Two contrasting
# programs calibrate the reading: a deep stack of tiny layers (launch-bound) and one big matmul
# (compute-bound). On a GPU, Nsight Compute then measures one kernel's counters.

# %%
import csv
import io
import re
import shutil
import subprocess
import sys

import numpy as np
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, schedule

from records.paths import REPO_ROOT
from demos.harness.run import start
from demos.t11_gpu._cuda import find_tool

run = start(
    "profiling",
    title="Profiling a training step: top operators, compute vs memory vs overhead, launch- vs compute-bound",
    sizes={  # (batch, width, hidden) of the MLP; (layers, width) of the tiny stack; n of the big matmul
        "tiny": ((32, 64, 256), (16, 16), 256),
        "small": ((256, 512, 2048), (32, 16), 768),
        "full": ((8192, 4096, 16384), (64, 16), 8192),
    },
    cpu_threads=1,
)
(batch, width, hidden), (layers, tiny_width), big_n = run.sizes
device = run.torch_device
gpu = run.device.is_gpu
dtype = torch.bfloat16 if gpu else torch.float32
# Matrix-product operators (CPU) and GEMM kernels (GPU: cuBLAS names them *gemm*, *xmma*, sm90_*, nvjet_*).
COMPUTE = re.compile(r"aten::(mm|addmm|bmm|baddbmm)$|gemm|cutlass|xmma|wgmma|nvjet|sm\d+_", re.I)

# %% [markdown]
# ## The programs, checked
#
# A two-layer MLP training step (linear, GELU, linear, MSE loss, backward, SGD). Its gradients are
# checked against float64 autograd before anything is profiled.

# %%


def make_mlp(dims, depth=1):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(dims[0], dims[1]), torch.nn.GELU(), torch.nn.Linear(dims[1], dims[0])]
    return torch.nn.Sequential(*layers).to(device, dtype)


def make_step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


mlp = make_mlp((width, hidden))
x = torch.randn(batch, width, device=device, dtype=dtype)
y = torch.randn(batch, width, device=device, dtype=dtype)
ref = make_mlp((width, hidden)).double()
ref.load_state_dict({k: v.double() for k, v in mlp.state_dict().items()})
torch.nn.functional.mse_loss(ref(x.double()), y.double()).backward()
torch.nn.functional.mse_loss(mlp(x), y).backward()
for (name, p), (_, q) in zip(mlp.named_parameters(), ref.named_parameters()):
    tol = 3e-2 if gpu else 1e-4
    run.check_close(f"grad.{name}", p.grad, q.grad, rtol=tol, atol=tol * float(q.grad.abs().max()))

tiny_stack = torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(tiny_width, tiny_width),
                                                                     torch.nn.ReLU())]).to(device, dtype)
tx, ty = torch.randn(8, tiny_width, device=device, dtype=dtype), torch.randn(8, tiny_width, device=device, dtype=dtype)
a = torch.randn(big_n, big_n, device=device, dtype=dtype)
programs = {
    "mlp_step": make_step(mlp, x, y),
    "tiny_layers_step": make_step(tiny_stack, tx, ty),
    "one_big_matmul": lambda: a @ a,
}

# %% [markdown]
# ## The profile
#
# Each program runs under `torch.profiler.profile` for 1 skipped, 1 warm-up and 10 recorded steps
# (`schedule(wait=1, warmup=1, active=10)`). Each is also timed with the harness, without the
# profiler, because profiling adds overhead per operator. From the recorded events:
#
# - **compute**: self time of the matrix products (`aten::mm`/`addmm` on a CPU; GEMM kernels on
#   a GPU);
# - **other operators**: self time of every other operator (kernel time on a GPU): elementwise,
#   reductions, copies, the optimizer's updates, mostly memory-bound;
# - **outside operators**: the rest of the step: Python, autograd's engine, and on a GPU the time
#   it sits idle waiting for the CPU to launch the next kernel.
#
# On a CPU the split is read from the recorded step of median length: a step in which another
# process took the core for a time slice charges that slice to whichever operator was running, and
# the median step is the one least likely to carry such a slice. On a GPU, kernel times are summed
# over the recorded steps and divided by their number. Only kernels (and copies, memsets) count
# there: with CUDA profiled, every `record_function` range (`ProfilerStep#N`, the optimizer's
# `Optimizer.step#SGD.step`) also gets a GPU-side copy, a `gpu_user_annotation` event that spans
# the kernels launched inside it. It is a device event too, but summing it would count those
# kernels a second time (for the big matmul, the step's annotation is as long as its one GEMM).
# The schedule makes one cycle (`repeat=1`): the profiler keeps only the events of its last cycle,
# so the split checks that all 10 recorded steps are there.

# %%
ACTIVE = 10


def profile_program(fn):
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    # One cycle only (repeat=1): a second cycle would start a fresh profiler and drop these events.
    # (PyTorch 2.10 and 2.11 print "Profiler clears events at the end of each cycle" for any
    # profiler, one cycle or not: pytorch/pytorch#180348, fixed in later versions.)
    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=ACTIVE, repeat=1)) as prof:
        for _ in range(1 + 1 + ACTIVE):
            fn()
            run.device.sync()  # every kernel of this step finishes inside its own profiled step
            prof.step()
    return prof


def split(prof, harness_step_s: float) -> dict:
    """Seconds per step in compute / other operators / outside, the number of operator calls per step,
    and the median operator's self time, from the profile's events (see the text above)."""
    events = prof.events()
    # The recorded steps, from their CPU-side ranges (on a GPU each also has a GPU-side copy).
    steps = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.name.startswith("ProfilerStep") and e.device_type == DeviceType.CPU)
    if not gpu and steps:  # the recorded step of median length
        start, end = sorted(steps, key=lambda se: se[1] - se[0])[len(steps) // 2]
        chosen = [e for e in events if start <= e.time_range.start < end]
        n_steps, step_s = 1, (end - start) / 1e6
    else:
        chosen, n_steps, step_s = events, ACTIVE, harness_step_s
    compute = other = 0.0
    ops, op_times = 0, []
    for e in chosen:
        if gpu and e.device_type == DeviceType.CUDA and e.is_user_annotation:
            continue  # a record_function range's GPU-side copy: it spans kernels counted on their own
        if gpu and e.device_type == DeviceType.CUDA:  # a kernel, copy or memset: its duration on the GPU
            dur = e.time_range.elapsed_us() / 1e6
            op_times.append(dur)
        elif not gpu and e.name.startswith("aten::"):
            dur = e.self_cpu_time_total / 1e6
            ops += 1
            op_times.append(dur)
        else:
            if gpu and e.name.startswith("aten::"):
                ops += 1
            continue
        if COMPUTE.search(e.name):
            compute += dur
        else:
            other += dur
    compute, other, ops = compute / n_steps, other / n_steps, ops / n_steps
    return {"compute": compute, "other": other, "outside": max(step_s - compute - other, 0.0), "ops": ops,
            "step": step_s, "median_op_s": float(np.median(op_times)) if op_times else 0.0,
            "recorded_steps": len(steps)}


rows, splits = [], {}
for name, fn in programs.items():
    timing = run.time(fn)
    prof = profile_program(fn)
    s = splits[name] = split(prof, timing.median_s)
    run.check(f"{name}.all_steps_recorded", s["recorded_steps"] == ACTIVE,
              f"the profile holds all {ACTIVE} recorded steps (found {s['recorded_steps']})")
    total = s["step"]
    rows.append([name, round(timing.median_s * 1e3, 3), round(total * 1e3, 3), round(s["ops"]),
                 round(timing.median_s / max(s["ops"], 1) * 1e6, 2), round(s["median_op_s"] * 1e6, 2),
                 f"{s['compute'] / total:.0%}", f"{s['other'] / total:.0%}", f"{s['outside'] / total:.0%}"])
    for part in ("compute", "other", "outside"):
        run.metric(f"{name}.{part}_share", s[part] / total, "fraction", label=f"{name}: share of the step, {part}")
    run.metric(f"{name}.step_ms", timing.median_s * 1e3, "ms", label=f"{name}: harness median per step (no profiler)")
    run.metric(f"{name}.median_op_us", s["median_op_s"] * 1e6, "us",
               label=f"{name}: median self time of one operator call ({'kernel duration' if gpu else 'CPU'})")
    run.metric(f"{name}.us_per_op", timing.median_s / max(s["ops"], 1) * 1e6, "us",
               label=f"{name}: unprofiled step time (harness median) per operator call")
    run.metric(f"{name}.profiler_overhead", total / timing.median_s, "x",
               label=f"{name}: the profiled step the split uses over the unprofiled harness median")
    if name == "mlp_step":
        def self_time(e):  # microseconds; older PyTorch calls the device time "cuda"
            return getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) if gpu else e.self_cpu_time_total

        try:
            table_text = prof.key_averages().table(sort_by="self_device_time_total" if gpu else "self_cpu_time_total",
                                                   row_limit=12, max_name_column_width=40)
        except (AttributeError, KeyError, ValueError):
            table_text = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=40)
        run.artifact("mlp_step.top_ops", table_text)
        # Not the user annotations: on a GPU, ProfilerStep*'s GPU-side copy would lead with the whole step.
        averages = sorted(prof.key_averages(), key=lambda e: -self_time(e))
        top = [[e.key, e.count // ACTIVE, round(self_time(e) / ACTIVE / 1e3, 3)]
               for e in averages if e.key.startswith("aten::") or (gpu and not e.is_user_annotation)][:10]
        run.table("top_ops", f"Top operators of one MLP training step, self {'GPU' if gpu else 'CPU'} time",
                  ["operator" + (" / kernel" if gpu else ""), "calls per step", "self ms per step"], top)
run.table("split", "Where a step's time goes (shares of the step: the profiled step on a CPU, the synchronised "
          "harness median on a GPU)", ["program", "step, harness (ms)", "step, as split (ms)", "operator calls",
                                 "unprofiled us per call",
                                 "median op (us)", "compute (matmul)", "other operators",
           "outside operators"], rows)
# the finding: each program's largest part of the step, and its share
shares = {name: {part: splits[name][part] / (splits[name]["compute"] + splits[name]["other"] + splits[name]["outside"])
                 for part in ("compute", "other", "outside")} for name in programs}
largest = {name: max(shares[name], key=shares[name].get) for name in programs}
PROGRAM_WORDS = {"mlp_step": "MLP", "tiny_layers_step": "tiny layers", "one_big_matmul": "big matmul"}
PART_WORDS = {"compute": "compute", "other": "other ops", "outside": "outside ops"}
run.series("split", ", ".join(f"{PROGRAM_WORDS[name]} {shares[name][largest[name]]:.0%} {PART_WORDS[largest[name]]}"
                              for name in programs), "program (0 mlp, 1 tiny layers, 2 big matmul)",
           "share of the step", {part: ([0, 1, 2], [splits[p][part] / (splits[p]["compute"] + splits[p]["other"] +
                                                                        splits[p]["outside"]) for p in programs])
                                 for part in ("compute", "other", "outside")})

# %% [markdown]
# **The reading.** The big matmul spends nearly all of its time in the matmul: compute-bound, and
# the next question is its fraction of the matmul ceiling. The stack of tiny layers makes over a
# thousand operator calls per step; without the profiler each costs a few microseconds, several
# times the median operator's own self time: the rest is dispatch, autograd and Python around the
# operators. That is overhead-bound (launch-bound on a GPU), which fusion, CUDA graphs or bigger
# batches fix and a faster GEMM does not. Its profiled step is also much longer than the
# unprofiled one: with a thousand tiny events per step, the profiler's own cost per event becomes
# a large part of what it records, so its "outside" share overstates the overhead, and the
# unprofiled time per call is the number to quote. Claims on the page check both readings. (The split
# counts an operator as "compute" by its name: the tiny layers' 16 x 16 products are matmuls too,
# but at that size they cost what any operator call costs, so even that share is mostly overhead.)

# %%
run.check("big_matmul_is_compute", splits["one_big_matmul"]["compute"] > splits["one_big_matmul"]["other"],
          "the big matmul's profile is dominated by the matmul")

# %% [markdown]
# ## Nsight Compute on one kernel (GPU only)
#
# `ncu` replays one kernel with its counters on and reports, per section, how close the kernel
# came to the SM's and the memory's peak throughput and what occupancy it reached. The command
# (run by the demo on a GPU machine, its output parsed below):

# %%
NCU_ARGS = ["--clock-control", "none", "--csv", "--page", "details", "--section", "SpeedOfLight", "--section", "Occupancy",
            "--section", "LaunchStats", "--kernel-name-base", "demangled", "--kernel-name", "regex:Gelu", "--launch-skip", "1",
            "--launch-count", "1", sys.executable, "-m", "demos.t10_benchmarking._ncu_target"]
# --clock-control none: by default ncu locks the GPU's clocks to base while it profiles, so its rates would
# disagree with the timings above (taken at the card's own clocks). The GELU kernel is PyTorch's
# vectorized_elementwise_kernel instantiated with GeluCUDAKernelImpl's functor, so the name is matched on its
# demangled form; the first GELU launch is skipped, the second profiled.
NCU_TIMEOUT_S = 60  # one kernel replayed a few times; a refused or stuck profiler must not eat the run
run.artifact("ncu_command", "ncu " + " ".join(NCU_ARGS[:-3] + ["python", "-m", "demos.t10_benchmarking._ncu_target"]))
ncu = find_tool("ncu")  # on PATH, or where the CUDA toolkit and Nsight Compute install it
proc = None
if not gpu:
    run.not_run("Nsight Compute (ncu) on the GELU kernel", "needs a CUDA GPU and ncu; the command is stored as an artifact")
elif ncu is None:
    run.not_run("Nsight Compute (ncu) on the GELU kernel", "ncu is not installed on this machine")
else:
    try:
        proc = subprocess.run([ncu, *NCU_ARGS], cwd=REPO_ROOT, capture_output=True, text=True, timeout=NCU_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        run.not_run("Nsight Compute (ncu) on the GELU kernel", f"ncu did not finish within {NCU_TIMEOUT_S} s")
    except OSError as e:
        run.not_run("Nsight Compute (ncu) on the GELU kernel", f"ncu could not start: {e}")
if proc is not None:
    lines = proc.stdout.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if proc.returncode != 0 or header is None:
        reason = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        run.not_run("Nsight Compute (ncu) on the GELU kernel", f"ncu exited {proc.returncode}: {reason[0][:200]}")
    else:
        found = list(csv.DictReader(io.StringIO("\n".join(lines[header:]))))
        ncu_rows = [[r.get("Section Name", ""), r.get("Metric Name", ""), r.get("Metric Unit", ""), r.get("Metric Value", "")]
                    for r in found]
        run.table("ncu", f"Nsight Compute on one kernel: {found[0].get('Kernel Name', '')[:80] if found else ''}",
                  ["section", "metric", "unit", "value"], ncu_rows)
        wanted = {"DRAM Throughput": "ncu.dram_throughput_pct", "Compute (SM) Throughput": "ncu.sm_throughput_pct",
                  "Memory Throughput": "ncu.memory_throughput_pct", "Achieved Occupancy": "ncu.achieved_occupancy_pct",
                  "Theoretical Occupancy": "ncu.theoretical_occupancy_pct", "Registers Per Thread": "ncu.registers_per_thread"}
        for r in found:
            key = wanted.get(r.get("Metric Name", ""))
            try:
                value = float(r.get("Metric Value", "").replace(",", ""))
            except ValueError:
                continue
            if key:
                run.metric(key, value, r.get("Metric Unit") or "value", label=f"ncu: {r['Metric Name']}")
if shutil.which("nsys") is None:
    run.not_run("Nsight Systems timeline", "nsys is not on PATH on this machine; torch.profiler's trace stands in for it")
else:
    run.not_run("Nsight Systems timeline", "nsys is present but not run by this demo; torch.profiler's trace stands in")
run.save()
