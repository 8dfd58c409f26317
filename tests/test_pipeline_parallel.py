"""Pipeline parallelism at the tiny size (4 ranks, m in {1, 4}): both schedules give the unsplit model's loss,
output and gradients (and a deliberately wrong loss scaling is caught), the measured idle fraction is near
(p-1)/(m+p-1), the peak activations in flight are m for GPipe and min(m, p - stage) for 1F1B, and the bytes
between stages match 2 (p-1) x batch x width x 4."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow

P = 4
MICROBATCHES = (1, 4)
SCHEDULES = ("gpipe", "1f1b")
BATCH, WIDTH = 32, 128  # the demo's tiny size
# The idle fraction is measured on real process timelines, so it carries each hand-over's send, receive and
# wake-up; at the tiny size (t_f = 25 ms at m = 4) that adds a few hundredths, even on a busy machine.
BUBBLE_MARGIN = 0.08


tiny_record = demo_record("demos.t7_parallelism.pipeline_parallel")


def checks(record):
    return {c["name"]: c for c in record["checks"]}


def table(record, name):
    t = next(t for t in record["tables"] if t["name"] == name)
    return [dict(zip(t["columns"], row)) for row in t["rows"]]


def test_pipelined_step_equals_the_unsplit_model(tiny_record):
    c = checks(tiny_record)
    for s in SCHEDULES:
        for m in MICROBATCHES:
            for part in ["loss", "output"] + [f"stage{k}.grads" for k in range(P)]:
                check = c[f"{s}.m{m}.{part}"]
                assert check["max_abs_err"] <= check["atol"], check


def test_torch_pipelining_agrees_on_gradients_and_order(tiny_record):
    c = checks(tiny_record)
    for s in SCHEDULES:
        name = f"torch_pipelining.{s}.m{max(MICROBATCHES)}"
        for part in ["loss", "output"] + [f"stage{k}.grads" for k in range(P)]:
            assert c[f"{name}.{part}"]["max_abs_err"] <= c[f"{name}.{part}"]["atol"], c[f"{name}.{part}"]
        assert f"{name}.same_op_order" in c


def test_the_gradient_check_has_teeth(tiny_record):
    check = checks(tiny_record)["grad_check_catches_unscaled_microbatch_loss"]
    assert "miss the tolerance" in check["detail"], check
    assert float(check["detail"].split("by up to ")[1]) > 1e-4, check  # m = 4 times too large: far outside


def test_schedules_ran_as_written_on_one_clock(tiny_record):
    c = checks(tiny_record)
    for s in SCHEDULES:
        for m in MICROBATCHES:
            assert {f"{s}.m{m}.order", f"{s}.m{m}.clocks_agree"} <= set(c)


def test_measured_bubble_is_near_the_formula(tiny_record):
    metrics = tiny_record["metrics"]
    for m in MICROBATCHES:
        formula = (P - 1) / (m + P - 1)
        assert metrics[f"formula.m{m}.bubble"]["value"] == pytest.approx(formula)
        for s in SCHEDULES:
            measured = metrics[f"{s}.m{m}.bubble"]["value"]
            worst = metrics[f"{s}.m{m}.bubble_worst_stage"]["value"]
            assert abs(measured - formula) <= BUBBLE_MARGIN, (s, m, measured, formula)
            assert measured <= worst <= measured + BUBBLE_MARGIN, (s, m, measured, worst)
    # more microbatches, smaller bubble, for both schedules
    for s in SCHEDULES:
        assert metrics[f"{s}.m4.bubble"]["value"] < metrics[f"{s}.m1.bubble"]["value"] - 0.2


def test_peak_in_flight_is_m_for_gpipe_and_p_minus_stage_for_1f1b(tiny_record):
    c = checks(tiny_record)
    rows = table(tiny_record, "in_flight")
    assert len(rows) == len(SCHEDULES) * len(MICROBATCHES) * P
    for row in rows:
        m, stage = row["m"], row["stage"]
        expected = m if row["schedule"] == "GPipe" else min(m, P - stage)
        assert row["peak in flight"] == expected, row
        assert row["peak saved (KiB)"] == pytest.approx(expected * row["saved per microbatch (KiB)"]), row
    for s in SCHEDULES:
        for m in MICROBATCHES:
            assert {f"{s}.m{m}.peak_in_flight", f"{s}.m{m}.peak_saved_bytes"} <= set(c)
    metrics = tiny_record["metrics"]
    assert metrics["gpipe.m4.peak_in_flight.stage3"]["value"] == 4
    assert metrics["1f1b.m4.peak_in_flight.stage3"]["value"] == 1
    held = {s: metrics[f"{s}.m4.peak_activation_kib.stage3"]["value"] for s in SCHEDULES}
    assert held["1f1b"] * 4 == held["gpipe"], held


def test_bytes_between_stages_match_the_formula(tiny_record):
    formula_kib = 2 * (P - 1) * BATCH * WIDTH * 4 / 1024
    metrics = tiny_record["metrics"]
    assert metrics["p2p.formula_kib_per_step"]["value"] == formula_kib
    c = checks(tiny_record)
    for s in SCHEDULES:
        for m in MICROBATCHES:
            # each of the m microbatches crosses the P - 1 stage boundaries forward and back
            assert c[f"{s}.m{m}.p2p_bytes"]["detail"].startswith(
                f"{round(formula_kib * 1024)} bytes in {2 * (P - 1) * m} messages per step"), c[f"{s}.m{m}.p2p_bytes"]
            written = metrics[f"{s}.m{m}.written_kib_per_step"]["value"]
            # payload plus gloo's framing: a few hundred bytes per message at most
            assert formula_kib <= written <= formula_kib + 2 * (P - 1) * m * 512 / 1024, (s, m, written)


def test_timelines_are_recorded(tiny_record):
    series = {s["name"]: s for s in tiny_record["series"]}
    for s in SCHEDULES:
        lines = series[f"timeline_{s}"]["lines"]
        assert [line["label"] for line in lines] == [f"stage {k}" for k in range(P)]
    text = tiny_record["artifacts"]["timeline"]
    assert text.count("forward  |") == 2 * P and "GPipe" in text and "1F1B" in text
    assert {"bubble_vs_m", "step_time_vs_m", "in_flight_vs_m"} <= set(series)
