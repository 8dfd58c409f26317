# %% [markdown]
# # Pipeline parallelism: GPipe vs 1F1B, the bubble measured
#
# Pipeline parallelism cuts a model **across layers** into p stages, one per device, and cuts each
# batch into m microbatches that flow through the stages, so different stages work on different
# microbatches at the same time. At the start and the end of every step some stages have nothing
# to do: with equal stages that *bubble* is (p - 1)/(m + p - 1) of the step, so more microbatches
# shrink it.
#
# Two schedules with the same bubble and very different memory:
# - **GPipe** (Huang et al., [GPipe: Efficient Training of Giant Neural Networks using Pipeline
#   Parallelism](https://arxiv.org/abs/1811.06965)): every stage runs all m forwards, then all m
#   backwards. Each stage holds the saved activations of all m microbatches at once.
# - **1F1B**, the flushing schedule of PipeDream (Narayanan et al., [Memory-Efficient
#   Pipeline-Parallel DNN Training](https://arxiv.org/abs/2006.09503), "PipeDream-Flush"): stage s
#   runs p - s - 1 warm-up forwards, then alternates one forward and one backward, then drains. A
#   backward starts as soon as it can, so stage s never holds more than min(m, p - s) microbatches.
#
# This demo runs both schedules on p = 4 processes (torch.distributed, gloo) with real send/receive
# between stages, checks loss, output and every stage's gradients against the unsplit model, then
# measures from per-stage timelines the idle fraction against the formula, the activations held in
# flight, the step time against the ideal, and the bytes between stages. Virtual stages
# (interleaved 1F1B) are `pipeline_interleaved.py`.

# %%
import statistics


from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._stage_clock import (PaddedStage, bubble_formula, flat_grads, make_batch, make_stage_layer,
                                               pipeline_step, record_steps, reference_step, torch_pipelining_step)
from demos.t7_parallelism._timeline import analyse, timeline_views

run = start(
    "pipeline_parallel",
    title="Pipeline parallelism: GPipe vs 1F1B bubble, in-flight activations and p2p traffic",
    sizes={  # batch rows, layer width, forward device time per stage per step, microbatch counts, timed steps
        "tiny": {"batch": 32, "width": 128, "forward_ms": 100, "microbatches": [1, 4], "repeats": 2},
        "small": {"batch": 128, "width": 256, "forward_ms": 60, "microbatches": [1, 2, 4, 8, 16], "repeats": 3},
        "full": {"batch": 128, "width": 256, "forward_ms": 60, "microbatches": [1, 2, 4, 8, 16], "repeats": 3},
    },
)
size = run.sizes
STAGES = _dist.torchrun_world_size() or 4  # p: one rank per stage
SCHEDULES = ("gpipe", "1f1b")
SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}
M_MAX = max(size["microbatches"])
M_TIMELINE = 8 if 8 in size["microbatches"] else M_MAX  # the configuration whose timeline is drawn

# %% [markdown]
# ## Where the ranks run, and one accelerator per stage
#
# Every rank is a CPU process over gloo (forked as a plain script, or started by torchrun on
# `--device cpu`). Each stage's layer does its real (small) math, then its forward and backward are
# **padded** with `time.sleep` to a fixed duration, the stand-in for "this stage's accelerator is
# busy for t seconds" (`_stage_clock.py`: with fewer cores than ranks, real CPU work would measure
# the operating system's scheduling, and a sleeping rank leaves the cores to the others). A
# microbatch's forward takes t_f = T_f/m and its backward t_b = 2 T_f/m, so a stage's work per step
# is 3 T_f whatever m is; only the overlap changes with m. The padding is an autograd Function
# around the layer (`PaddedStage`), which also records the timeline: each forward (F) and backward
# (B), its microbatch, start and end, the real math's time, and the bytes autograd saved for the
# backward. A GPU would time the same padded schedule, so `--device cuda` records it as not run.

# %%
ranks = _dist.place_ranks(run, [STAGES], "pipeline stages", gpus=False)
if ranks is None:
    run.save()
    raise SystemExit(0)

# %% [markdown]
# ## The two schedules
#
# The model is p layers (Linear + tanh), one per stage, with fixed random weights from the same
# seeds everywhere (`make_stage_layer`); the loss is the mean squared error over the whole batch.
# A schedule is, for each stage, the order of its forwards and backwards. Everything else is the
# same: a forward waits for its input activation from the previous stage and sends its output to
# the next; a backward waits for the gradient from the next stage and sends its input's gradient
# to the previous one. The last stage computes each microbatch's loss, divided by m so that the
# gradients sum to those of the full-batch mean.
#
# Why not `torch.distributed.pipelining`? Its `ScheduleGPipe` and `Schedule1F1B` serve below as an
# independent check (same gradients, same order of operations), but `Schedule1F1B` refuses m < p
# ([pytorch#144702](https://github.com/pytorch/pytorch/pull/144702)), and written out, each schedule
# is a dozen lines that show exactly what each stage does.
#
# `pipeline_step` (in `_stage_clock.py`) runs one stage's order with real point-to-point messages.
# All receives of a step are posted up front (`irecv`), so gloo's background thread can take each
# message in while the stage is still busy; a stage blocks only when it needs a tensor that has
# not arrived yet, and that wait is the bubble.

# %%
def schedule_order(schedule: str, m: int, p: int, stage: int) -> list[tuple[str, int]]:
    """The (kind, microbatch) operations stage `stage` of `p` runs in one step with `m` microbatches."""
    if schedule == "gpipe":  # all forwards, then all backwards
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    # 1F1B (PipeDream-Flush): p - stage - 1 warm-up forwards, then one forward + one backward, then drain
    warmup = min(m, p - stage - 1)
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(m - warmup, m)]


# %% [markdown]
# ## Correctness: the pipelined step equals the unsplit model
#
# The reference is the same p layers in one process, on the whole batch, in float64. Each schedule
# and every m runs one unpadded step on the ranks; the last stage's loss and output and every
# stage's gradients are compared with it. `torch.distributed.pipelining`'s `ScheduleGPipe` and
# `Schedule1F1B` run the same step as an independent implementation, whose per-stage order of
# operations must equal ours. The classic bug of not dividing each microbatch's loss by m must
# fail the gradient check.

# %%
def checked_step(rank, p, schedule, m, scale_loss=True):
    stage_module = PaddedStage(make_stage_layer(rank, size["width"]))
    x, target = make_batch(size["batch"], size["width"])
    (loss, output), _, _ = pipeline_step(stage_module, schedule_order(schedule, m, p, rank), rank, p, m, x, target,
                                         scale_loss)
    return {"grads": [flat_grads(stage_module.layer)], "loss": loss, "output": output,
            "ops": [op[:2] for op in stage_module.ops]}


def correctness_worker(rank, p):
    results = {("ours", s, m): checked_step(rank, p, s, m) for s in SCHEDULES for m in size["microbatches"]}
    results[("unscaled_loss_bug", "gpipe", M_MAX)] = checked_step(rank, p, "gpipe", M_MAX, scale_loss=False)
    if M_MAX >= p:  # torch's Schedule1F1B needs m >= p
        for s in SCHEDULES:
            results[("torch", s, M_MAX)] = torch_pipelining_step(rank, p, s, M_MAX, size["batch"], size["width"])
    return results


checked = _dist.launch(correctness_worker, STAGES)
RTOL, ATOL = 1e-4, 1e-6
if checked is not None:
    reference = reference_step(STAGES, size["batch"], size["width"])
    for impl, s, m in sorted(key for key in checked[0] if key[0] != "unscaled_loss_bug"):
        name = f"{s}.m{m}" if impl == "ours" else f"torch_pipelining.{s}.m{m}"
        last = checked[STAGES - 1][(impl, s, m)]
        run.check_close(f"{name}.loss", last["loss"], reference["loss"], rtol=RTOL, atol=ATOL)
        run.check_close(f"{name}.output", last["output"], reference["output"], rtol=RTOL, atol=ATOL)
        for stage in range(STAGES):
            grads = checked[stage][(impl, s, m)]["grads"][0]
            run.check_close(f"{name}.stage{stage}.grads", grads, reference["grads"][stage], rtol=RTOL, atol=ATOL)
        if impl != "ours":
            same = all(checked[rank][(impl, s, m)]["ops"] == checked[rank][("ours", s, m)]["ops"]
                       for rank in range(STAGES))
            run.check(f"{name}.same_op_order", same, "every stage ran the same (F/B, microbatch) sequence as "
                      f"this demo's {SCHEDULE_NAMES[s]}" if same else "the order of operations differs")
    bug = [checked[rank][("unscaled_loss_bug", "gpipe", M_MAX)]["grads"][0] for rank in range(STAGES)]
    worst = max(float(((g.double() - r).abs() - (ATOL + RTOL * r.abs())).max())
                for g, r in zip(bug, reference["grads"]))
    run.check("grad_check_catches_unscaled_microbatch_loss", worst > 0,
              f"without the 1/m on each microbatch's loss (m={M_MAX}) the gradients miss the tolerance by up to "
              f"{worst:.2e}" if worst > 0 else "the wrong gradients passed the tolerance")

# %% [markdown]
# ## The measurement
#
# For each schedule and m, every rank runs one unpadded warm-up step, then timed steps, each after
# a barrier. All ranks run on one host, so their `time.perf_counter` readings share one monotonic
# clock and the timelines line up without correction (a check below confirms it); aligning at the
# barrier instead, as one would across hosts, would be off by how far apart the ranks leave it
# (recorded too). Each rank also reads its process's `wchar` (`/proc/self/io`) around its step: the
# bytes it pushed into the network stack, payload plus gloo's framing. The quantities are intervals
# on the stages' timelines, not calls timed by the harness.

# %%
def timing_worker(rank, p):
    x, target = make_batch(size["batch"], size["width"])
    results = {}
    for s in SCHEDULES:
        for m in size["microbatches"]:
            stage_module = PaddedStage(make_stage_layer(rank, size["width"]))
            order = schedule_order(s, m, p, rank)
            pipeline_step(stage_module, order, rank, p, m, x, target)  # warm-up, unpadded
            stage_module.forward_s = size["forward_ms"] / 1e3 / m
            stage_module.backward_s = 2 * stage_module.forward_s
            results[(s, m)] = record_steps(stage_module, lambda: pipeline_step(stage_module, order, rank, p, m, x,
                                                                               target)[1:], size["repeats"])
    return results


timed = _dist.launch(timing_worker, STAGES)
if timed is None:  # another torchrun rank: rank 0 writes the record
    _dist.shutdown()
    raise SystemExit(0)

# From the timelines (`_timeline.analyse`): the step's span (first operation on any stage to the last),
# each stage's idle fraction 1 - busy/span, and the peak of microbatches in flight (+1 when a forward
# starts, -1 when its backward ends); the checks hold every timeline to its schedule and the shared clock.


def expected_peak(schedule, m, p, stage):
    return m if schedule == "gpipe" else min(m, p - stage)


p = STAGES
analysis, skews = {}, []
for s in SCHEDULES:
    for m in size["microbatches"]:
        per_rank = [timed[rank][(s, m)] for rank in range(p)]
        t_f = size["forward_ms"] / 1e3 / m
        a = analysis[(s, m)] = analyse(per_rank, size["repeats"], t_f,
                                       order=lambda stage, s=s, m=m: schedule_order(s, m, p, stage))
        skews += a["skews"]
        expected = [expected_peak(s, m, p, stage) for stage in range(p)]
        a.update(ideal_s=(m + p - 1) * 3 * t_f, t_f=t_f, expected_peaks=expected)
        run.check(f"{s}.m{m}.clocks_agree", a["causal"], "on the shared clock no stage started a microbatch's "
                  "forward (backward) before the previous (next) stage had finished it")
        run.check(f"{s}.m{m}.order", a["as_scheduled"], f"on every stage in all {size['repeats']} steps the "
                  "timeline's (F/B, microbatch) sequence is the schedule's")
        run.check(f"{s}.m{m}.peak_in_flight", a["peaks"] == expected,
                  f"peak microbatches in flight per stage {a['peaks']}, expected {expected} "
                  f"({'m' if s == 'gpipe' else 'min(m, p - stage)'})")
        run.check(f"{s}.m{m}.peak_saved_bytes",
                  a["saved_peaks"] == [e * b for e, b in zip(expected, a["saved_per_microbatch"])],
                  f"peak activation bytes held per stage {a['saved_peaks']} = peak in flight x "
                  f"{a['saved_per_microbatch'][0]} bytes per microbatch")
        run.log(f"  {SCHEDULE_NAMES[s]:5s} m={m:2d}: step {a['step_s'] * 1e3:6.1f} ms (ideal "
                f"{a['ideal_s'] * 1e3:6.1f}), bubble {a['bubble']:.3f} (formula {bubble_formula(m, p):.3f})")

# %% [markdown]
# ## The bubble against (p - 1)/(m + p - 1)
#
# The formula assumes that a stage can start the moment its input exists. Here every hand-over
# also costs a send, a receive and a process wake-up, so the measured idle fraction sits above the
# formula, and that overhead matters more as m grows and each microbatch's work shrinks: the step
# time stops falling once the hand-overs cost as much as the bubble they remove.

# %%
ms = size["microbatches"]
rows = []
for s in SCHEDULES:
    for m in ms:
        a = analysis[(s, m)]
        name = f"{s}.m{m}"
        run.metric(f"{name}.bubble", a["bubble"], "fraction",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: measured idle fraction of the step, mean over the {p} stages")
        run.metric(f"{name}.bubble_worst_stage", a["bubble_worst"], "fraction",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: measured idle fraction of the most idle stage")
        run.metric(f"{name}.step_ms", a["step_s"] * 1e3, "ms",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: one step, first operation to last on any stage (median)")
        run.metric(f"{name}.excess_ms", (a["step_s"] - a["ideal_s"]) * 1e3, "ms",
                   label=f"{SCHEDULE_NAMES[s]}, m={m}: step time above the ideal (m+p-1)(t_f+t_b)")
        rows.append([SCHEDULE_NAMES[s], m, round(bubble_formula(m, p), 3), round(a["bubble"], 3),
                     round(a["bubble_worst"], 3), round(a["step_s"] * 1e3, 1), round(a["ideal_s"] * 1e3, 1),
                     round((a["step_s"] - a["ideal_s"]) * 1e3, 1)])
for m in ms:
    run.metric(f"formula.m{m}.bubble", bubble_formula(m, p), "fraction", label=f"(p-1)/(m+p-1) for p={p}, m={m}", origin="computed")
    run.metric(f"ideal.m{m}.step_ms", analysis[("gpipe", m)]["ideal_s"] * 1e3, "ms",
               label=f"m={m}: (m+p-1)(t_f+t_b) with the padded t_f = T_f/m and t_b = 2 t_f", origin="computed")
run.table("bubble", f"Bubble and step time, p = {p} stages, T_f = {size['forward_ms']} ms forward per stage per step "
          f"(median of {size['repeats']} steps)",
          ["schedule", "m", "formula (p-1)/(m+p-1)", "measured idle, mean of stages",
           "most idle device", "step (ms)", "ideal (ms)", "above ideal (ms)"], rows)
run.series("bubble_vs_m", f"Idle fraction vs microbatches, p = {p}", "microbatches m", "idle fraction of the step",
           {"formula (p-1)/(m+p-1)": (ms, [bubble_formula(m, p) for m in ms]),
            **{f"{SCHEDULE_NAMES[s]} measured": (ms, [analysis[(s, m)]["bubble"] for m in ms]) for s in SCHEDULES}},
           x_log=True)
run.series("step_time_vs_m", f"Step time vs microbatches, p = {p}, same total work per step", "microbatches m",
           "step time (ms)",
           {"ideal (m+p-1)(t_f+t_b)": (ms, [analysis[("gpipe", m)]["ideal_s"] * 1e3 for m in ms]),
            **{f"{SCHEDULE_NAMES[s]} measured": (ms, [analysis[(s, m)]["step_s"] * 1e3 for m in ms])
               for s in SCHEDULES}},
           hlines={"no bubble: 3 T_f": 3 * size["forward_ms"]}, x_log=True)
run.metric("stage.busy_ms", statistics.mean(analysis[(s, m)]["busy_s"] for s in SCHEDULES for m in ms) * 1e3, "ms",
           label="busy time of one stage per step (padded F + B), mean over all configurations; ideal 3 T_f")
all_math_fractions = [f for a in analysis.values() for f in a["math_fractions"]]
run.metric("pad.median_math_fraction", statistics.median(all_math_fractions), "fraction",
           label="share of a padded operation taken by the layer's real math, median over all timed operations")
run.metric("pad.max_math_fraction", max(all_math_fractions), "fraction",
           label="largest share of a padded operation taken by the layer's real math (above 1: the operation "
                 "overran its device time, e.g. the process waited for a core)")
run.metric("clock.barrier_skew_ms", statistics.median(skews) * 1e3, "ms",
           label="how far apart the ranks left the barrier before a step (median): the error a barrier-aligned clock "
                 "would have")

# %% [markdown]
# ## The timelines
#
# One step of each schedule at m = 8 (plot: one line per stage, low while it runs a forward, high in
# a backward, flat while idle; text: one column is half a forward, a digit the microbatch, `.` idle).
# GPipe's stages run m forwards before any backward; 1F1B's last stage starts backwards after one
# forward, and its first stage runs p forwards before its first backward.

# %%
texts = []
for s in SCHEDULES:
    a = analysis[(s, M_TIMELINE)]
    lines, text = timeline_views([timed[rank][(s, M_TIMELINE)] for rank in range(p)], a["median_step"], a["t_f"] / 2,
                                 f"{SCHEDULE_NAMES[s]}, p={p}, m={M_TIMELINE}, step {a['step_s'] * 1e3:.0f} ms")
    run.series(f"timeline_{s}", f"{SCHEDULE_NAMES[s]}, p={p}, m={M_TIMELINE}: {a['bubble']:.0%} idle (formula "
               f"{bubble_formula(M_TIMELINE, p):.0%}); low = forward, high = backward", "time in the step (ms)",
               "stage", lines, kind="steps")
    texts.append(text)
run.artifact("timeline", "\n\n".join(texts))

# %% [markdown]
# ## Activations in flight: the memory difference
#
# Same bubble, different memory: GPipe's stages each hold all m microbatches' activations at the
# turn from forwards to backwards; 1F1B's stage s at most min(m, p - s). The count comes from the
# timelines; the bytes from autograd's saved tensors (each microbatch saves the layer's input and
# its tanh output: 2 x rows x width x 4 bytes).

# %%
rows = []
for s in SCHEDULES:
    for m in ms:
        a = analysis[(s, m)]
        for stage in range(p):
            rows.append([SCHEDULE_NAMES[s], m, stage, a["peaks"][stage], a["expected_peaks"][stage],
                         round(a["saved_peaks"][stage] / 1024, 1), round(a["saved_per_microbatch"][stage] / 1024, 2)])
    a = analysis[(s, M_MAX)]
    for stage in (0, p - 1):
        run.metric(f"{s}.m{M_MAX}.peak_in_flight.stage{stage}", a["peaks"][stage], "microbatches",
                   label=f"{SCHEDULE_NAMES[s]}, m={M_MAX}: most microbatches whose forward ran and backward had not, "
                         f"stage {stage}")
        run.metric(f"{s}.m{M_MAX}.peak_activation_kib.stage{stage}", a["saved_peaks"][stage] / 1024, "KiB",
                   label=f"{SCHEDULE_NAMES[s]}, m={M_MAX}: peak bytes autograd held for backward, stage {stage}")
run.table("in_flight", "Peak activations in flight per stage (measured from the timeline) and the bytes autograd held",
          ["schedule", "m", "stage", "peak in flight", "expected", "peak saved (KiB)", "saved per microbatch (KiB)"],
          rows)
run.series("in_flight_vs_m", f"Peak microbatches in flight on stage 0 vs m, p = {p}", "microbatches m",
           "microbatches held", {f"{SCHEDULE_NAMES[s]} stage 0": (ms, [analysis[(s, m)]["peaks"][0] for m in ms])
                                 for s in SCHEDULES}, x_log=True)

# %% [markdown]
# ## Bytes between stages
#
# Each of the p - 1 boundaries carries the whole batch's activation forward and its gradient
# backward once per step: 2 (p - 1) x batch x width x 4 bytes, whatever m is (m only changes the
# number of messages, 2 (p - 1) m). Measured: the bytes handed to `isend` (counted), and the bytes
# the ranks' processes wrote during the step (`wchar`), which adds gloo's per-message framing.

# %%
formula_bytes = 2 * (p - 1) * size["batch"] * size["width"] * 4
rows = []
for s in SCHEDULES:
    for m in ms:
        a = analysis[(s, m)]
        written = a["written_bytes"]
        run.check(f"{s}.m{m}.p2p_bytes", a["sent_bytes"] == formula_bytes and a["messages"] == 2 * (p - 1) * m,
                  f"{a['sent_bytes']} bytes in {a['messages']} messages per step; formula {formula_bytes} bytes in "
                  f"{2 * (p - 1) * m} messages")
        if written is not None:
            run.check(f"{s}.m{m}.written_at_least_payload", written >= formula_bytes,
                      f"the ranks wrote {written:.0f} bytes in the step >= {formula_bytes} bytes of payload")
            run.metric(f"{s}.m{m}.written_kib_per_step", written / 1024, "KiB",
                       label=f"{SCHEDULE_NAMES[s]}, m={m}: bytes the ranks' processes wrote during one step "
                             "(all ranks)")
        rows.append([SCHEDULE_NAMES[s], m, a["messages"], round(a["sent_bytes"] / 1024, 1),
                     round(formula_bytes / 1024, 1),
                     None if written is None else round(written / 1024, 1),
                     None if written is None else round((written - formula_bytes) / a["messages"], 1)])
if analysis[(SCHEDULES[0], M_MAX)]["written_bytes"] is None:
    run.not_run("bytes written per rank", "/proc/self/io is not readable on this machine")
else:
    a = analysis[("gpipe", M_MAX)]
    run.metric(f"p2p.m{M_MAX}.framing_bytes_per_message", (a["written_bytes"] - formula_bytes) / a["messages"],
               "bytes", label=f"m={M_MAX}: bytes written beyond the payload, per message (gloo's framing)")
run.metric("p2p.formula_kib_per_step", formula_bytes / 1024, "KiB",
           label="2 (p-1) x batch x width x 4 bytes: activations forward + gradients backward across p-1 boundaries", origin="computed")
run.metric(f"p2p.m{M_MAX}.messages_per_step", analysis[("gpipe", M_MAX)]["messages"], "messages",
           label=f"m={M_MAX}: point-to-point sends per step, all ranks (2 (p-1) m)")
run.table("p2p", f"Bytes between stages per step, p = {p}, batch {size['batch']} x width {size['width']} float32",
          ["schedule", "m", "sends (counted)", "sent KiB (counted)", "formula KiB", "written KiB (measured)",
           "written beyond payload, bytes per message"], rows)

# %% [markdown]
# ## Beyond this demo
#
# In a real model the stages are rarely equal: the slowest stage sets the pace of every other one,
# which is why layers are assigned to stages by measured time, not by count. Virtual stages
# (interleaved 1F1B) are `pipeline_interleaved.py`. Because the stages here are padded, the
# bubble's agreement with the formula is by construction; `pipeline_real_compute.py` measures it
# with real stage compute and accounts for every gap (hand-over latency, per-microbatch cost).

# %%
run.save()
_dist.shutdown()
