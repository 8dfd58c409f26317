"""The timeline analysis of pipeline_parallel.py: from every stage's recorded operations (``Op``s of
``_stage_clock.py``) to the step's span, each stage's busy and idle time, the microbatches in flight,
and the checks that the stages' clocks agree and that each stage ran its schedule; then the timeline
drawn as step-shaped plot lines and as text.

For one step the span runs from the first operation on any stage to the last one on any stage; a
stage's busy time is the sum of its padded F and B durations, and its idle (bubble) fraction is
1 - busy/span. In-flight activations on a stage rise by one when a forward starts and fall by one
when the matching backward ends; the peak is what the stage must hold in memory.
"""

from __future__ import annotations

import math
import statistics

from demos.t7_parallelism._stage_clock import Op


def step_ops(m_results, stage, step):
    return [Op(*op) for op in m_results[stage][step]["ops"]]


def span_of(ops_by_stage):
    return (min(op.start for ops in ops_by_stage for op in ops), max(op.end for ops in ops_by_stage for op in ops))


def forwards(ops):
    return sorted((op for op in ops if op.kind == "F"), key=lambda op: op.microbatch)


def backwards(ops):
    return sorted((op for op in ops if op.kind == "B"), key=lambda op: op.microbatch)


def peak_in_flight(ops):
    held = peak = 0
    for op in sorted(ops, key=lambda op: op.start):
        held += 1 if op.kind == "F" else -1
        peak = max(peak, held)
    return peak


def analyse(per_rank, repeats: int, t_f: float, order=None) -> dict:
    """Bubble, step time and in-flight activations of ``repeats`` recorded steps (``per_rank[stage][step]``).
    With ``order(stage)``, the schedule of a stage (the hand-written schedules): also whether the
    timelines ran in that order, whether the stages' clocks agree (no stage started a microbatch's
    forward, or backward, before the previous, or next, stage had finished it), how far apart the
    ranks left the barrier, the real math's share of each padded operation (t_f forward, 2 t_f
    backward), the activation bytes autograd held, and the bytes sent (counted, all ranks, first step)
    and written (wchar, all ranks, median step)."""
    p = len(per_rank)
    spans, math_fractions, skews = [], [], []
    idle_by_stage, busy_by_stage = [[] for _ in range(p)], [[] for _ in range(p)]
    as_scheduled = causal = True
    for step in range(repeats):
        ops_by_stage = [step_ops(per_rank, stage, step) for stage in range(p)]
        first, last = span_of(ops_by_stage)
        spans.append(last - first)
        if order is not None:
            exits = [r[step]["barrier_exit"] for r in per_rank]
            skews.append(max(exits) - min(exits))
            causal &= all(later.start >= earlier.end
                          for stage in range(1, p)
                          for earlier, later in zip(forwards(ops_by_stage[stage - 1]), forwards(ops_by_stage[stage])))
            causal &= all(later.start >= earlier.end
                          for stage in range(p - 1)
                          for earlier, later in zip(backwards(ops_by_stage[stage + 1]), backwards(ops_by_stage[stage])))
        for stage, ops in enumerate(ops_by_stage):
            busy = sum(op.end - op.start for op in ops)
            busy_by_stage[stage].append(busy)
            idle_by_stage[stage].append(1 - busy / (last - first))
            if order is not None:
                math_fractions.extend(op.math_s / (t_f if op.kind == "F" else 2 * t_f) for op in ops)
                as_scheduled &= [op[:2] for op in ops] == order(stage)
    median_step = sorted(range(repeats), key=lambda i: spans[i])[repeats // 2]
    stage_idle = [statistics.median(v) for v in idle_by_stage]
    result = {"step_s": statistics.median(spans), "bubble": statistics.mean(stage_idle),
              "bubble_worst": max(stage_idle), "stage_idle": stage_idle, "median_step": median_step,
              "busy_s": statistics.mean(statistics.median(v) for v in busy_by_stage)}
    if order is not None:
        result.update(causal=causal, as_scheduled=as_scheduled, skews=skews, math_fractions=math_fractions,
                      peaks=[peak_in_flight(step_ops(per_rank, stage, median_step)) for stage in range(p)],
                      saved_peaks=[per_rank[stage][median_step]["peak_saved_bytes"] for stage in range(p)],
                      saved_per_microbatch=[step_ops(per_rank, stage, median_step)[0].saved_bytes
                                            for stage in range(p)],
                      sent_bytes=sum(r[0]["sent_bytes"] for r in per_rank),
                      messages=sum(r[0]["messages"] for r in per_rank),
                      written_bytes=None if per_rank[0][0]["written_bytes"] is None else statistics.median(
                          sum(r[step]["written_bytes"] for r in per_rank) for step in range(repeats)))
    return result


DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def timeline_lines(ops_by_stage, origin):
    """Step-shaped lines, one per stage: y = stage while idle, +0.4 in a forward, +0.8 in a backward (ms on x)."""
    lines = {}
    end = max(op.end for ops in ops_by_stage for op in ops) - origin
    for stage, ops in enumerate(ops_by_stage):
        xs, ys = [0.0], [stage]
        for op in sorted(ops, key=lambda op: op.start):
            high = stage + (0.4 if op.kind == "F" else 0.8)
            t0, t1 = (op.start - origin) * 1e3, (op.end - origin) * 1e3
            xs += [t0, t0, t1, t1]
            ys += [stage, high, high, stage]
        xs.append(end * 1e3)
        ys.append(stage)
        lines[f"stage {stage}"] = (xs, ys)
    return lines


def timeline_text(title, ops_by_stage, origin, column_s):
    end = max(op.end for ops in ops_by_stage for op in ops) - origin
    n_columns = math.ceil(end / column_s)
    text = [title]
    for stage, ops in enumerate(ops_by_stage):
        cells = {"F": ["."] * n_columns, "B": ["."] * n_columns}
        for op in ops:
            for c in range(n_columns):
                if op.start <= origin + (c + 0.5) * column_s < op.end:
                    cells[op.kind][c] = DIGITS[op.microbatch]
        text.append(f"stage {stage}  forward  |{''.join(cells['F'])}|")
        text.append(f"{'':9}backward |{''.join(cells['B'])}|")
    return "\n".join(text)


def timeline_views(per_rank, step: int, column_s: float, title: str):
    """One recorded step drawn two ways: plot lines (``timeline_lines``) and text (``timeline_text``,
    one column = ``column_s``, a digit = the microbatch being processed, '.' = idle)."""
    ops_by_stage = [step_ops(per_rank, stage, step) for stage in range(len(per_rank))]
    origin, _ = span_of(ops_by_stage)
    text = timeline_text(f"{title}, one column = {column_s * 1e3:.2f} ms, digit = microbatch, '.' = idle",
                         ops_by_stage, origin, column_s)
    return timeline_lines(ops_by_stage, origin), text
