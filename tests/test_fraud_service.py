"""The fraud_service demo at its tiny size: both models beat the trivial baseline; the HTTP service's scores and
decisions equal the in-process ones; the batching window forms batches; every answer is in the audit log; the
server is stopped (its process gone, its port free) and nothing of it is left running."""

import os

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t12_design.fraud_service")


def test_models_beat_the_baseline_and_the_service_matches_in_process_scores(tiny):
    checks = checks_by_name(tiny)
    for model in ("lgbm", "mlp"):
        assert checks[f"model.{model}.beats_baseline"]["passed"]
        assert metric(tiny, f"model.{model}.pr_auc") > 3 * metric(tiny, "data.fraud_rate")
    assert checks["service.lgbm.w0.scores"]["max_abs_err"] == 0  # same trees, same features: the same float
    for name in ("service.mlp.w0.scores", "service.mlp.w5.scores", "service.mlp.greedy.scores"):
        assert checks[name]["max_abs_err"] <= 1e-6
    for name in ("service.lgbm.w0.decisions", "service.mlp.w0.decisions", "service.batching.forms_batches",
                 "service.mlp.greedy.all_answered", "service.mlp.greedy.decisions",
                 "service.every_answer_logged", "server.stopped", "server.temp_removed"):
        assert checks[name]["passed"]


def test_every_load_point_is_recorded_with_its_stages(tiny):
    table = next(t for t in tiny["tables"] if t["name"] == "load_points")
    points = {row[0]: row for row in table["rows"]}
    for model in ("lgbm", "mlp"):
        for window in (0, 5):
            for rate in (40, 150):
                assert f"{model}.w{window}.r{rate}" in points
                p50, p95, p99 = (metric(tiny, f"{model}.w{window}.r{rate}.{q}_ms") for q in ("p50", "p95", "p99"))
                assert 0 < p50 <= p95 <= p99
        for stage in ("parse", "features", "model", "decision", "log", "server"):
            assert metric(tiny, f"{model}.w0.r40.stage.{stage}.p50_ms") >= 0
        assert metric(tiny, f"{model}.w0.r40.mean_batch") == 1  # no window: every request scored alone
    assert {f"sweep.w{w}" for w in (0, 2, 10)} <= set(points)
    assert "sweep.greedy" in points and points["sweep.greedy"][2] == "greedy"  # greedy batching: no timer
    assert metric(tiny, "sweep.greedy.mean_batch") >= 1
    for w in ("window0", "window2", "window10", "greedy"):  # the distinct calls' time over their requests
        assert metric(tiny, f"{w}.model_call_per_request_us") > 0
    assert any(k.startswith("cross.") for k in points)
    assert "curve.w0.r600" in points and "curve.w10.r600" in points  # throughput against p99, per window
    assert "curve.greedy.r600" in points
    curves = next(s for s in tiny["series"] if s["name"] == "throughput_vs_p99")
    assert [line["label"] for line in curves["lines"]] == ["window 0 ms", "window 10 ms", "greedy"]
    for w in ("w0", "w10", "greedy"):
        assert metric(tiny, f"curve.{w}.best_throughput") >= 0
    # the saturation throughput: the most answers per second of any crossing point (the table rounds to 0.1)
    answered = table["columns"].index("answered/s")
    most = max(row[answered] for k, row in points.items() if k.startswith("cross."))
    assert abs(metric(tiny, "p99_crossing.max_throughput") - most) <= 0.05 + 1e-9
    for key in points:  # per load point: the server's longest GC pause, the generator's send lag
        name = key.replace("cross.", "lgbm.w0.") if key.startswith("cross.") else key
        assert metric(tiny, f"{name}.gc_max_ms") >= 0
        assert metric(tiny, f"{name}.send_lag_p99_ms") == metric(tiny, f"{name}.send_lag_p99_ms")  # not NaN
    assert [s["name"] for s in tiny["series"]][0] == "p99_vs_rate"  # the page's evidence: p99 against the rate
    assert {"admit_none", "admit_inflight", "admit_waited"} <= set(points)
    for name in ("model.lgbm.batch1_us", "model.mlp.batch1_us", "features.lookup_us"):
        assert metric(tiny, name) > 0
    assert any(n["variant"].startswith("mlp on the GPU") for n in tiny["not_run"])


def test_no_server_process_of_ours_remains(tiny):
    ours = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"demos.t12_design._fraud_app" in f.read():
                    ours.append(pid)
        except OSError:
            continue
    assert not ours, f"uvicorn processes of the fraud demo still running: {ours}"
