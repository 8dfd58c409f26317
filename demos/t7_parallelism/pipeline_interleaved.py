# %% [markdown]
# # Interleaved 1F1B: what virtual stages do to the pipeline bubble
#
# With p equal stages and m microbatches, a pipeline idles (p - 1)/(m + p - 1) of its step (see
# `pipeline_parallel.py`). *Interleaved* 1F1B (Narayanan et al., [Efficient Large-Scale Language
# Model Training on GPU Clusters Using Megatron-LM](https://arxiv.org/abs/2104.04473)) gives each
# device v smaller stages instead of one ("virtual stages"; here v = 2, so rank r holds layers r
# and r + p of a 2p-layer model, each padded to half the time, so a device's work per step is
# unchanged). Filling the pipeline then takes 1/v as long and the bubble becomes
# (p - 1)/(v m + p - 1), at the price of v times as many hand-overs. The schedule needs m to be a
# multiple of p.
#
# This demo runs PyTorch's `ScheduleInterleaved1F1B` (`torch.distributed.pipelining`) on p = 4 real
# processes (gloo), with the padded stage clock of the pipeline demo (`_stage_clock.py`: each
# stage's forward and backward padded to a fixed device time, a timeline of every operation),
# checks the step against the unsplit 2p-layer model in float64, and measures the idle fraction
# and the step time against the formula and the ideal.

# %%

from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._stage_clock import (bubble_formula, library_schedule, library_step, make_batch,
                                               reference_step, torch_pipelining_step)
from demos.t7_parallelism._timeline import analyse

VIRTUAL_STAGES = 2
run = start(
    "pipeline_interleaved",
    title="Interleaved 1F1B: virtual stages and the pipeline bubble",
    sizes={  # batch rows, layer width, forward device time per device per step, microbatch counts, timed steps
        "tiny": {"batch": 32, "width": 128, "forward_ms": 100, "microbatches": [4], "repeats": 2},
        "small": {"batch": 128, "width": 256, "forward_ms": 60, "microbatches": [4, 8, 16], "repeats": 3},
        "full": {"batch": 128, "width": 256, "forward_ms": 60, "microbatches": [4, 8, 16], "repeats": 3},
    },
)
size = run.sizes
STAGES = _dist.torchrun_world_size() or 4  # p: one rank per device
MS = [m for m in size["microbatches"] if m >= STAGES and m % STAGES == 0]

# %% [markdown]
# ## Where the ranks run
#
# As in `pipeline_parallel.py`: CPU processes over gloo whose stage time is a padded stand-in for
# one accelerator each, so a `--device cuda` run records them as not run (the CPU record has them).

# %%
ranks = _dist.place_ranks(run, [STAGES], "pipeline stages", gpus=False)
if ranks is None or not MS:
    if ranks is not None:
        run.not_run("interleaved 1F1B", f"needs m a multiple of p = {STAGES}; none of {size['microbatches']} is")
    run.save()
    raise SystemExit(0)

# %% [markdown]
# ## Correctness, then the timed steps
#
# Every rank runs one checked step at the largest m (loss, output and every virtual stage's
# gradients against the unsplit 2p-layer model in float64), then, for each m, an unpadded warm-up
# step and timed steps with forward time T_f/(v m) and backward time 2 T_f/(v m) per virtual stage
# and microbatch. The quantities are intervals on the stages' timelines (one host, one monotonic
# clock), not calls timed by the harness.

# %%
def rank_worker(rank, p):
    results = {"checked": torch_pipelining_step(rank, p, "interleaved", max(MS), size["batch"], size["width"],
                                                VIRTUAL_STAGES)}
    x, target = make_batch(size["batch"], size["width"])
    for m in MS:
        modules, library = library_schedule(rank, p, "interleaved", m, size["width"], VIRTUAL_STAGES)
        library_step(modules, library, rank, p, x, target)  # warm-up, unpadded (the library infers shapes)
        for module in modules:  # each virtual stage holds half the layers: half the time
            module.forward_s = size["forward_ms"] / 1e3 / (VIRTUAL_STAGES * m)
            module.backward_s = 2 * module.forward_s
        steps = []
        for _ in range(size["repeats"]):
            library_step(modules, library, rank, p, x, target)
            steps.append({"ops": [op for module in modules for op in module.ops]})
        results[m] = steps
    return results


run.log(f"{STAGES} ranks, v = {VIRTUAL_STAGES}, m in {MS}, T_f = {size['forward_ms']} ms per device per step")
gathered = _dist.launch(rank_worker, STAGES)
if gathered is None:  # another torchrun rank: rank 0 writes the record
    _dist.shutdown()
    raise SystemExit(0)
p = STAGES
reference = reference_step(VIRTUAL_STAGES * p, size["batch"], size["width"])
name, last = f"torch_pipelining.interleaved.m{max(MS)}", gathered[p - 1]["checked"]
run.check_close(f"{name}.loss", last["loss"], reference["loss"], rtol=1e-4, atol=1e-6)
run.check_close(f"{name}.output", last["output"], reference["output"], rtol=1e-4, atol=1e-6)
for stage in range(VIRTUAL_STAGES * p):  # stage k * p + r lives on rank r, as its k-th stage
    run.check_close(f"{name}.stage{stage}.grads", gathered[stage % p]["checked"]["grads"][stage // p],
                    reference["grads"][stage], rtol=1e-4, atol=1e-6)

# %% [markdown]
# ## The bubble against (p - 1)/(v m + p - 1)
#
# Per step: the span from the first operation on any device to the last, and each device's idle
# fraction 1 - busy/span (`_timeline.analyse`). The formula assumes a stage can start the moment its
# input exists; every hand-over also costs a send, a receive and a process wake-up, and interleaving
# multiplies the hand-overs by v while dividing each operation by v, so the measured idle fraction
# sits above the formula, more so as m grows (the library's schedule runtime adds its own
# per-operation Python work on top).

# %%
rows = []
for m in MS:
    t_f = size["forward_ms"] / 1e3 / (VIRTUAL_STAGES * m)  # per virtual stage
    a = analyse([gathered[rank][m] for rank in range(p)], size["repeats"], t_f)
    ideal_s = (VIRTUAL_STAGES * m + p - 1) * 3 * t_f
    label = f"interleaved 1F1B, v={VIRTUAL_STAGES}, m={m}"
    run.metric(f"interleaved.m{m}.bubble", a["bubble"], "fraction",
               label=f"{label}: measured idle fraction, mean over the {p} devices")
    run.metric(f"interleaved.m{m}.bubble_worst_stage", a["bubble_worst"], "fraction",
               label=f"{label}: measured idle fraction of the most idle device")
    run.metric(f"interleaved.m{m}.step_ms", a["step_s"] * 1e3, "ms", label=f"{label}: one step (median)")
    run.metric(f"formula_interleaved.m{m}.bubble", bubble_formula(m, p, VIRTUAL_STAGES), "fraction",
               label=f"(p-1)/(vm+p-1) for p={p}, v={VIRTUAL_STAGES}, m={m}", origin="computed")
    run.metric(f"formula.m{m}.bubble", bubble_formula(m, p), "fraction",
               label=f"(p-1)/(m+p-1) for p={p}, m={m}: the same pipeline without virtual stages", origin="computed")
    rows.append([m, round(bubble_formula(m, p), 3), round(bubble_formula(m, p, VIRTUAL_STAGES), 3),
                 round(a["bubble"], 3), round(a["bubble_worst"], 3), round(a["step_s"] * 1e3, 1),
                 round(ideal_s * 1e3, 1), round((a["step_s"] - ideal_s) * 1e3, 1)])
run.table("bubble", f"Interleaved 1F1B (torch), p = {p} devices, v = {VIRTUAL_STAGES}, T_f = {size['forward_ms']} ms "
          f"forward per device per step (median of {size['repeats']} steps)",
          ["m", "formula without interleaving (p-1)/(m+p-1)", "formula (p-1)/(vm+p-1)", "measured idle, mean",
           "most idle device", "step (ms)", "ideal (ms)", "above ideal (ms)"], rows)
m_last, formula_last, measured_last = rows[-1][0], rows[-1][2], rows[-1][3]  # at the largest m
run.series("bubble_vs_m", f"p = {p}, v = {VIRTUAL_STAGES}, m = {m_last}: measured idle {measured_last:.0%}, "
           f"{'above' if measured_last > formula_last else 'at or below'} the formula's {formula_last:.0%}",
           "microbatches m",
           "idle fraction of the step",
           {"formula (p-1)/(m+p-1)": (MS, [r[1] for r in rows]),
            f"formula (p-1)/(vm+p-1), v={VIRTUAL_STAGES}": (MS, [r[2] for r in rows]),
            "interleaved 1F1B measured": (MS, [r[3] for r in rows])}, x_log=True)
run.save()
_dist.shutdown()

# %% [markdown]
# ## Reading the results
#
# Virtual stages cut the *formula's* bubble by about v, but each operation is v times shorter and
# the hand-overs v times as many, so the per-message overhead that already shows at large m in the
# plain schedules shows sooner here. Zero-bubble schedules go further by splitting each backward
# into its input-gradient and weight-gradient halves and filling the bubble with the latter (Qi et
# al., [Zero Bubble Pipeline Parallelism](https://arxiv.org/abs/2401.10241)); the library has them
# too (`ScheduleInterleavedZeroBubble`), not measured here.
#
# With real stage compute instead of padding, interleaving is compared like for like with plain
# 1F1B in `pipeline_real_compute.py`, with the hand-over cost that decides which one wins measured.
