"""The scale model's validation rows (cluster_validation.validation_rows) recorded in a run: one metric for the
model's value and one for its difference from the published figure per row, a check per row with a
tolerance by kind, the whole table, and the calibrated compute efficiencies. Plumbing for scale_model.py."""

from __future__ import annotations

from demos.common import cluster_model, cluster_validation

# formula: typed independently, equal up to float rounding; calibration: fitted, equal up to the 4-digit
# rounding of the efficiency; validation: published figures rounded to 2-3 digits, and runs never fitted: 5%
TOLERANCE = {"formula": 1e-9, "calibration": 1e-3, "validation": 0.05}
A100_PEAK = cluster_validation.A100_SELENE["peak_tflops"]


def record_validation(run) -> list[dict]:
    validation = cluster_validation.validation_rows()
    for r in validation:
        if r["unit"] == "TFLOP/s":  # a projected A100 rate, not one of this machine: a fraction of its peak
            run.metric(f"validation.{r['key']}.model", r["model"] / A100_PEAK, "fraction",
                       label=f"this model: {r['figure']}, as a fraction of the A100's {A100_PEAK:g} TFLOP/s peak", origin="computed")
        else:
            run.metric(f"validation.{r['key']}.model", r["model"], r["unit"], label=f"this model: {r['figure']}", origin="computed")
        if abs(r["difference"]) < 1e-12:  # an exact formula, off only by float rounding (1e-14): shown as 0
            r["difference"] = 0.0
        run.metric(f"validation.{r['key']}.difference", r["difference"], "fraction",
                   label=f"(model - published) / published: {r['figure']} ({r['source']})", origin="computed")
        run.check(f"validation.{r['key']}", abs(r["difference"]) <= TOLERANCE[r["kind"]],
                  f"{r['figure']}: model {r['model']:.4g} vs published {r['published']:g} {r['unit']} "
                  f"({r['source']}), {r['difference']:+.2%} ({r['kind']}, tolerance {TOLERANCE[r['kind']]:.0e})")
    run.table("validation", "The cost model against published figures (difference = (model - published) / published; "
              "formula: exact by construction, calibration: fitted to it, validation: held out)",
              ["figure", "source", "published", "this model", "unit", "difference"],
              [[f"{r['kind']}: {r['figure']}", f"[{r['source']}]({r['url']})", r["published"], round(r["model"], 4),
                r["unit"], f"{r['difference']:+.2%}"] for r in validation])
    t2 = [r for r in validation if r["key"].startswith("megatron.t2.")]
    run.metric("validation.megatron.t2.max_abs_difference", max(abs(r["difference"]) for r in t2), "fraction",
               label="largest |difference| over Megatron-LM Table 2's six PTD-P runs (not used by the calibration)", origin="computed")
    for hidden, eff in cluster_model.EFFICIENCY_BY_HIDDEN:
        run.metric(f"calibration.efficiency.h{hidden}", eff, "fraction",
                   label=f"compute efficiency fitted to Megatron-LM Table 1 at hidden size {hidden}", origin="computed")
    return validation
