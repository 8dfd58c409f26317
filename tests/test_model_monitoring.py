"""The model_monitoring demo at its tiny size: bias^2 + variance + noise adds up to the measured test MSE and the
error is U-shaped in depth; temperature scaling keeps every prediction and lowers the held-out calibration error;
input drift on a used feature is detected and hurts, on an unused feature is detected and does not, and concept
drift leaves the inputs and the model's score distribution silent while accuracy falls; the fast KS statistic
matches SciPy's."""

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t12_design.model_monitoring")


def test_every_check_passed(tiny):
    checks = checks_by_name(tiny)
    for name in ("bias_variance.adds_up", "bias_variance.u_shape", "ece.calibrated_by_construction",
                 "temperature.keeps_argmax", "temperature.lowers_ece", "temperature.overconfident", "psi.vs_exact",
                 "ks.matches_scipy", "psi.reference_is_zero", "drift.used_feature.detected_and_hurts",
                 "drift.unused_feature.alarms_without_harm", "drift.concept.silent_inputs",
                 "drift.concept.scores_unmoved"):
        assert checks[name]["passed"], name
    assert {n["variant"] for n in tiny["not_run"]} == {"cuda"}


def test_bias_variance_decomposition_adds_up_and_is_u_shaped(tiny):
    assert metric(tiny, "bv.decomposition_max_rel_gap") < 0.06
    table = next(t for t in tiny["tables"] if t["name"] == "bias_variance")
    cols = table["columns"]
    for row in table["rows"]:
        mse, total = row[cols.index("test MSE (measured)")], row[cols.index("bias^2 + var + noise")]
        assert abs(mse - total) < 0.06 * mse
    depths = [row[0] for row in table["rows"]]
    assert depths[0] < metric(tiny, "bv.best_depth") < depths[-1]
    assert metric(tiny, "bv.deep.var") > metric(tiny, "bv.shallow.var")
    assert metric(tiny, "bv.deep.bias2") < metric(tiny, "bv.shallow.bias2")
    assert metric(tiny, "bv.deep_over_best_mse") > 1
    # Unbiased estimates (bias^2 less var / B, var with ddof=1) keep the sum: bias^2 + var + noise is the table's sum.
    bias2, var = cols.index("bias^2 (unbiased)"), cols.index("variance (ddof=1)")
    for row in table["rows"]:
        assert abs(row[bias2] + row[var] + 0.09 - row[cols.index("bias^2 + var + noise")]) < 2e-4


def test_temperature_scaling_keeps_accuracy_and_lowers_calibration_error(tiny):
    assert metric(tiny, "calib.temperature") > 1
    assert metric(tiny, "calib.after.ece") < metric(tiny, "calib.before.ece")
    assert metric(tiny, "calib.after.nll") < metric(tiny, "calib.before.nll")
    assert metric(tiny, "calib.after.mean_confidence") < metric(tiny, "calib.before.mean_confidence")
    table = next(t for t in tiny["tables"] if t["name"] == "calibration")
    acc = table["columns"].index("accuracy")
    assert table["rows"][0][acc] == table["rows"][1][acc] == round(metric(tiny, "calib.accuracy"), 4)
    reliability = next(s for s in tiny["series"] if s["name"] == "reliability")
    assert all(0 <= y <= 1 for line in reliability["lines"] for y in line["y"])


def test_drift_streams_separate_input_drift_from_performance(tiny):
    assert metric(tiny, "drift.unused_feature.psi_delay") == 0
    assert abs(metric(tiny, "drift.unused_feature.acc_drop")) < 0.03
    assert metric(tiny, "drift.used_feature.acc_drop") > 0.05
    assert metric(tiny, "drift.used_feature.ks_delay") >= 0
    assert metric(tiny, "drift.concept.psi_alarm_share_after") == 0
    assert "drift.concept.psi_delay" not in tiny["metrics"]  # no alarm at all: no delay recorded
    assert metric(tiny, "drift.concept.acc_drop") > 0.1
    for rule in ("psi", "ks", "score_psi"):
        assert 0 <= metric(tiny, f"drift.null.{rule}_false_alarm_rate") <= 1
    for stream in ("used_feature", "unused_feature", "concept"):
        before, after = metric(tiny, f"drift.{stream}.acc_before"), metric(tiny, f"drift.{stream}.acc_after")
        assert metric(tiny, f"drift.{stream}.acc_abs_change") == pytest.approx(abs(after - before), abs=1e-12)
        assert metric(tiny, f"drift.{stream}.acc_drop") == pytest.approx(before - after, abs=1e-12)
        assert 0 <= metric(tiny, f"drift.{stream}.score_psi_alarm_share_after") <= 1
        assert metric(tiny, f"drift.{stream}.score_psi_max_after") >= 0
    assert metric(tiny, "drift.unused_feature.acc_abs_change") < 0.03
    # The score is a function of the inputs, which concept drift leaves alone: its distribution stays put.
    assert metric(tiny, "drift.concept.score_psi_alarm_share_after") == 0
    assert metric(tiny, "drift.concept.score_psi_max_after") < 0.2
    # The model does see the used feature move, so its scores do.
    assert metric(tiny, "drift.used_feature.score_psi_alarm_share_after") > 0


def test_psi_at_the_ks_matched_false_alarm_rate(tiny):
    assert metric(tiny, "drift.psi_matched_threshold") > 0
    # The threshold is the no-drift quantile at 1 - (KS false-alarm rate), so it sits on the p99's side the rate says.
    if metric(tiny, "drift.null.ks_false_alarm_rate") <= 0.01:
        assert metric(tiny, "drift.psi_matched_threshold") >= metric(tiny, "drift.null.psi_p99")
    else:
        assert metric(tiny, "drift.psi_matched_threshold") <= metric(tiny, "drift.null.psi_p99")
    assert metric(tiny, "drift.used_feature.psi_matched_delay") >= 0


def test_monitoring_cost_is_recorded(tiny):
    for name in ("cost.monitor_ms_per_1k_rows", "cost.psi_ms_per_1k_rows", "cost.ks_ms_per_1k_rows",
                 "cost.ks_scipy_ms_per_1k_rows", "cost.model_ms_per_1k_rows", "cost.monitor_over_model",
                 "cost.ks_scipy_over_presorted"):
        assert metric(tiny, name) > 0
