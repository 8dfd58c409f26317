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
    for name in ("service.mlp.w0.scores", "service.mlp.w5.scores"):
        assert checks[name]["max_abs_err"] <= 1e-6
    for name in ("service.lgbm.w0.decisions", "service.mlp.w0.decisions", "service.batching.forms_batches",
                 "service.every_answer_logged", "server.stopped", "server.temp_removed"):
        assert checks[name]["passed"]


def test_every_load_point_is_recorded_with_its_stages(tiny):
    points = {row[0]: row for row in next(t for t in tiny["tables"] if t["name"] == "load_points")["rows"]}
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
    assert any(k.startswith("cross.") for k in points)
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
