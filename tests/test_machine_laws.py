"""Laws of the machine at the tiny size: the ridge points are the ratios of the stored roofs, the
sweep's intensity doubles with m, kernels from other records are placed with their own FLOPs and
bytes, and the Amdahl fit and the Karp-Flatt column follow from the measured times."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t9_foundations.machine_laws")


def test_ridge_points_are_computed_from_the_roofs(tiny_record):
    m, c = tiny_record["metrics"], tiny_record["ceilings"]
    assert m["ridge_fp32"]["value"] == pytest.approx(m["roof.peak_tflops"]["value"] * 1e3 / m["roof.bandwidth_gbps"]["value"])
    assert m["ridge_fp32_all_cores"]["value"] == pytest.approx(c["matmul_fp32"]["value"] * 1e3 / c["copy_bandwidth"]["value"])


def test_roofline_table(tiny_record):
    rows = next(t for t in tiny_record["tables"] if t["name"] == "roofline")["rows"]
    sweep = [r for r in rows if r[0] == "this run"]
    intensities = [r[2] for r in sweep]
    assert intensities == sorted(intensities) and intensities[0] == pytest.approx(0.5, rel=0.01)
    placed = {r[0] for r in rows if r[0] != "this run"}
    assert placed <= {"kernel_fusion", "layout_and_padding"}
    assert all(r[4] > 0 for r in rows)


def test_amdahl_and_karp_flatt_follow_from_the_times(tiny_record):
    rows = next(t for t in tiny_record["tables"] if t["name"] == "scaling")["rows"]
    t1 = rows[0][1]
    for p, t, speedup, _, karp_flatt, *_ in rows:
        assert speedup == pytest.approx(t1 / t, rel=0.01)
        if p > 1:
            assert karp_flatt == pytest.approx((1 / speedup - 1 / p) / (1 - 1 / p), abs=0.01)
    m = tiny_record["metrics"]
    assert m["amdahl.designed_serial_fraction"]["value"] == pytest.approx(0.1)
    assert 0 <= m["amdahl.fitted_serial_fraction"]["value"] <= 1
