"""The video demo at the tiny size, and its deadline simulation on hand-made service times."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t4_hardware.video_pipeline")


def test_frames_are_conserved_and_projection_is_slower(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    # "<processed> processed + <dropped> dropped = <frames> frames": both simulations saw the same stream
    totals = {checks[f"sim.{s}.conservation"]["detail"].split(" = ")[1] for s in ("measured", "p1080")}
    assert len(totals) == 1, totals
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    assert m["frame.scale_to_1080p"] == pytest.approx(1080 * 1920 / (68 * 120))
    assert m["sim.p1080.p50_ms"] > m["sim.measured.p50_ms"]
    assert m["service.p99_ms"] >= m["service.p50_ms"]


def test_batch_metrics_follow_the_sweep(tiny):
    """The one-frame time of the batch sweep, and the latency a batch costs, read off the same sweep as the gain."""
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    sweep = {row[0]: row[1] for row in next(t for t in tiny["tables"] if t["name"] == "stream_batching")["rows"]}
    largest = max(sweep)
    assert m["batch.infer_one_ms"] == pytest.approx(sweep[1], abs=0.006)  # the table rounds to 0.01 ms
    assert m["batch.infer_one_ms"] > 0 and m["stage.infer_ms"] > 0  # the same inference, timed twice
    # the batch's time over one frame's, and the throughput gain, are two readings of the same two timings
    assert m["batch.latency_growth"] * m["batch.throughput_gain"] == pytest.approx(largest)
    assert m["batch.latency_growth"] == pytest.approx(sweep[largest] / sweep[1], rel=0.02)


def _simulate(times):
    """The demo's simulation, loaded from its source without running the demo."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "demos" / "t4_hardware" / "video_pipeline.py"
    tree = ast.parse(src.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "simulate")
    scope = {"BUDGET": 1 / 30}
    code = compile(ast.Module(body=[fn], type_ignores=[]), str(src), "exec")
    exec(code, scope)  # noqa: S102 (the demo's own function, from its source)
    return scope["simulate"](times)


def test_simulation_fast_service_keeps_every_frame():
    lat, dropped, late = _simulate([0.010] * 30)
    assert dropped == 0 and late == 0 and max(lat) == pytest.approx(0.010)


def test_simulation_slow_service_drops_and_is_late():
    lat, dropped, late = _simulate([0.050] * 30)  # 50 ms per frame at 33.3 ms per frame
    assert dropped > 0 and len(lat) + dropped == 30
    assert late == len(lat)  # every processed frame takes longer than one period
