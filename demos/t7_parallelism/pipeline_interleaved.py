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
# and the step time against the formula and the ideal. In the same run, on the same clock and the
# same work per device, it times the library's plain `Schedule1F1B` (one stage per device), so that
# the two idle times per step can be compared directly: the formula says interleaving divides it by v.
#
# The stages are padded, not computed: with equal stages and free hand-overs the halving follows from
# the schedule's dependencies alone. What the measurement adds is whether the library's schedule
# achieves it, and how much of it the extra hand-overs take back as each operation gets shorter (larger
# m). The work per device per step, T_f forward, is set large enough (hundreds of milliseconds) that a
# hand-over's fixed cost is small against an operation at small m; `pipeline_real_compute.py` shows
# the opposite regime, real millisecond-sized stages, where interleaving loses.

# %%

from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._stage_clock import (bubble_formula, library_schedule, library_step, make_batch,
                                               reference_step, torch_pipelining_step)
from demos.t7_parallelism._timeline import analyse

VIRTUAL_STAGES = 2
SCHEDULES = [("1f1b", 1), ("interleaved", VIRTUAL_STAGES)]  # (schedule, stages per device)
run = start(
    "pipeline_interleaved",
    title="Interleaved 1F1B: virtual stages and the pipeline bubble",
    sizes={  # batch rows, layer width, forward device time per device per step, microbatch counts, timed steps
        "tiny": {"batch": 32, "width": 128, "forward_ms": 100, "microbatches": [4], "repeats": 2},
        "small": {"batch": 128, "width": 256, "forward_ms": 360, "microbatches": [4, 8, 16], "repeats": 3},
        "full": {"batch": 128, "width": 256, "forward_ms": 360, "microbatches": [4, 8, 16], "repeats": 3},
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
# gradients against the unsplit 2p-layer model in float64), then, for each m and each schedule, an
# unpadded warm-up step and timed steps. Interleaved: forward time T_f/(v m) and backward time
# 2 T_f/(v m) per virtual stage and microbatch. Plain 1F1B: one stage per device, T_f/m and 2 T_f/m,
# the same device time per step (the library's 1F1B is checked against the unsplit model in
# `pipeline_parallel.py`). The quantities are intervals on the stages' timelines (one host, one
# monotonic clock), not calls timed by the harness.

# %%
def rank_worker(rank, p):
    results = {"checked": torch_pipelining_step(rank, p, "interleaved", max(MS), size["batch"], size["width"],
                                                VIRTUAL_STAGES)}
    x, target = make_batch(size["batch"], size["width"])
    for m in MS:
        for kind, v in SCHEDULES:
            modules, library = library_schedule(rank, p, kind, m, size["width"], VIRTUAL_STAGES)
            library_step(modules, library, rank, p, x, target)  # warm-up, unpadded (the library infers shapes)
            for module in modules:  # a device's v stages share its T_f: each gets 1/v of it
                module.forward_s = size["forward_ms"] / 1e3 / (v * m)
                module.backward_s = 2 * module.forward_s
            steps = []
            for _ in range(size["repeats"]):
                library_step(modules, library, rank, p, x, target)
                steps.append({"ops": [op for module in modules for op in module.ops]})
            results[(kind, m)] = steps
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
# ## The bubble against (p - 1)/(v m + p - 1), and against plain 1F1B
#
# Per step: the span from the first operation on any device to the last, and each device's idle
# fraction 1 - busy/span (`_timeline.analyse`). The formula assumes a stage can start the moment its
# input exists; every hand-over also costs a send, a receive and a process wake-up, and interleaving
# multiplies the hand-overs by v while dividing each operation by v, so the measured idle fraction
# sits above the formula, more so as m grows (the library's schedule runtime adds its own
# per-operation Python work on top).
#
# The idle fraction's denominator is the step, which interleaving shortens too; the formula's "divided
# by v" is about the idle *time*: (p - 1)(t_f + t_b) per device per step, with t_f + t_b = 3 T_f/(v m)
# per operation. So the idle time per device (the median step less a device's busy time) is compared
# between the two schedules of the same run: by the formula, interleaved over plain is 1/v.

# %%
rows, idle = [], {}
for m in MS:
    for kind, v in SCHEDULES:
        t_f = size["forward_ms"] / 1e3 / (v * m)  # per stage and microbatch
        a = analyse([gathered[rank][(kind, m)] for rank in range(p)], size["repeats"], t_f)
        ideal_s = (v * m + p - 1) * 3 * t_f
        formula_idle_s = (p - 1) * 3 * t_f
        idle[(kind, m)] = a["step_s"] - a["busy_s"]
        label = f"interleaved 1F1B, v={v}, m={m}" if v > 1 else f"plain 1F1B (torch), m={m}"
        run.metric(f"{kind}.m{m}.bubble", a["bubble"], "fraction",
                   label=f"{label}: measured idle fraction, mean over the {p} devices")
        run.metric(f"{kind}.m{m}.bubble_worst_stage", a["bubble_worst"], "fraction",
                   label=f"{label}: measured idle fraction of the most idle device")
        run.metric(f"{kind}.m{m}.step_ms", a["step_s"] * 1e3, "ms", label=f"{label}: one step (median)")
        run.metric(f"{kind}.m{m}.idle_ms", idle[(kind, m)] * 1e3, "ms",
                   label=f"{label}: idle time per device per step (median step less the mean busy time)")
        formula_name = "formula_interleaved" if v > 1 else "formula"
        run.metric(f"{formula_name}.m{m}.bubble", bubble_formula(m, p, v), "fraction",
                   label=f"(p-1)/(vm+p-1) for p={p}, v={v}, m={m}", origin="computed")
        run.metric(f"{formula_name}.m{m}.idle_ms", formula_idle_s * 1e3, "ms",
                   label=f"(p-1)(t_f+t_b) for p={p}, v={v}, m={m}: the formula's idle time per device",
                   origin="computed")
        rows.append([m, "1F1B" if v == 1 else f"interleaved, v={v}", round(bubble_formula(m, p, v), 3),
                     round(a["bubble"], 3), round(a["bubble_worst"], 3), round(a["step_s"] * 1e3, 1),
                     round(ideal_s * 1e3, 1), round(formula_idle_s * 1e3, 1), round(idle[(kind, m)] * 1e3, 1)])
    run.metric(f"m{m}.idle_ratio", idle[("interleaved", m)] / idle[("1f1b", m)], "x",
               label=f"m={m}: interleaved 1F1B's idle time per device per step over plain 1F1B's, same run "
                     f"(the formula: 1/v = {1 / VIRTUAL_STAGES})")
run.table("bubble", f"Plain and interleaved 1F1B (torch), p = {p} devices, v = {VIRTUAL_STAGES}, T_f = "
          f"{size['forward_ms']} ms forward per device per step (median of {size['repeats']} steps)",
          ["m", "schedule", "formula (p-1)/(vm+p-1)", "measured idle, mean", "most idle device", "step (ms)",
           "ideal (ms)", "idle per device, formula (ms)", "idle per device, measured (ms)"], rows)
ratios = [idle[("interleaved", m)] / idle[("1f1b", m)] for m in MS]
run.series("idle_vs_m", f"p = {p}, T_f = {size['forward_ms']} ms: interleaved idle time {ratios[0]:.0%} of plain "
           f"1F1B's at m = {MS[0]}, {ratios[-1]:.0%} at m = {MS[-1]} (formula {1 / VIRTUAL_STAGES:.0%})",
           "microbatches m",
           "idle time per device per step (ms)",
           {"formula, plain 1F1B": (MS, [(p - 1) * 3 * size["forward_ms"] / m for m in MS]),
            f"formula, interleaved v={VIRTUAL_STAGES}": (MS, [(p - 1) * 3 * size["forward_ms"] / (VIRTUAL_STAGES * m)
                                                             for m in MS]),
            "plain 1F1B measured": (MS, [idle[("1f1b", m)] * 1e3 for m in MS]),
            "interleaved 1F1B measured": (MS, [idle[("interleaved", m)] * 1e3 for m in MS])}, x_log=True)
run.save()
_dist.shutdown()

# %% [markdown]
# ## Reading the results
#
# Virtual stages cut the *formula's* idle time by v; `m4.idle_ratio` says how much of that the library's
# schedule keeps with operations of tens of milliseconds. But each operation is v times shorter and
# the hand-overs v times as many, so the per-message overhead that already shows at large m in the
# plain schedules takes back part of the saving, a larger part as the operations shrink (the table, by
# m). Zero-bubble schedules go further by splitting each backward into its input-gradient and
# weight-gradient halves and filling the bubble with the latter (Qi et
# al., [Zero Bubble Pipeline Parallelism](https://arxiv.org/abs/2401.10241)); the library has them
# too (`ScheduleInterleavedZeroBubble`), not measured here.
#
# With real stage compute instead of padding, interleaving is compared like for like with plain
# 1F1B in `pipeline_real_compute.py`, with the hand-over cost that decides which one wins measured.
