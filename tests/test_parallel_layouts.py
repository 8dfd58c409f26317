"""Every TP x PP x DP layout of 64 GPUs for the 70B model: the record lists them fastest first, the named
layouts are the fastest fitting ones with their constraint, and their shares of the step add up to 1."""

from __future__ import annotations

import pytest

from conftest import demo_record
from demos.common import cluster_model

PARTS = ("compute", "tp_comm", "pp_comm", "dp_exposed", "bubble")


tiny = demo_record("demos.t7_parallelism.parallel_layouts")


def test_layouts_fastest_first_and_named_ones_consistent(tiny):
    table = next(t for t in tiny["tables"] if t["name"] == "layouts_70B_64gpu")
    rows = [dict(zip(table["columns"], row)) for row in table["rows"]]
    assert len(rows) == len(cluster_model.candidate_layouts("70B", 64, 1024, max_tp=16))
    fitting = [r for r in rows if r["fits"] == "yes"]
    assert [r["total (s)"] for r in fitting] == sorted(r["total (s)"] for r in fitting)
    m = {name: v["value"] for name, v in tiny["metrics"].items()}
    best = "x".join(str(int(m[f"layouts.70B.64gpu.best.{d}"])) for d in ("tp", "pp", "dp"))
    assert best == fitting[0]["TPxPPxDP"]
    assert m["layouts.70B.64gpu.tp8_pp1.tp"] == 8 and m["layouts.70B.64gpu.tp8_pp1.pp"] == 1
    assert m["layouts.70B.64gpu.tp16.tp"] == 16
    for name in ("best", "tp8_pp1", "tp16"):
        assert sum(m[f"layouts.70B.64gpu.{name}.{part}_share"] for part in PARTS) == pytest.approx(1.0)
        assert m[f"layouts.70B.64gpu.{name}.memory_gb"] <= 80
    # TP bytes per GPU, TP 16 over TP 8 (both PP 1): DP 4 instead of 8 gives each replica 2x the microbatches,
    # and each ring all-reduce sends 2(t-1)/t of its size
    assert m["layouts.70B.64gpu.tp16.tp_sent_gb"] / m["layouts.70B.64gpu.tp8_pp1.tp_sent_gb"] == pytest.approx(
        2 * (2 * 15 / 16) / (2 * 7 / 8))


def test_1024_gpus_procedure_against_the_fastest(tiny):
    m = {name: v["value"] for name, v in tiny["metrics"].items()}
    prefix = "layouts.70B.1024gpu"
    # the fastest with the DP exchange exposed is the layout scale_model projects
    chosen = cluster_model.choose_config("70B", 1024, 1024)
    assert [m[f"{prefix}.best.{d}"] for d in ("tp", "pp", "dp")] == [chosen.tp, chosen.pp, chosen.dp]
    # the procedure: TP = one node's GPUs, the smallest PP that fits
    assert m[f"{prefix}.procedure.tp"] == 8
    assert m[f"{prefix}.procedure.tp"] * m[f"{prefix}.procedure.pp"] * m[f"{prefix}.procedure.dp"] == 1024
    smaller_pp = [c for c in cluster_model.candidate_layouts("70B", 1024, 1024)
                  if c.tp == 8 and c.pp < m[f"{prefix}.procedure.pp"]]
    assert not any(cluster_model.memory_per_gpu(c)["fits"] for c in smaller_pp)
    assert m[f"{prefix}.procedure.memory_gb"] <= 80
    for tag in ("", ".overlap"):
        assert m[f"{prefix}{tag}.procedure_over_best"] >= 1.0
    assert m[f"{prefix}.procedure_over_best"] == pytest.approx(
        m[f"{prefix}.procedure.step_s"] / m[f"{prefix}.best.step_s"])
    table = next(t for t in tiny["tables"] if t["name"] == "layouts_70B_1024gpu")
    totals = [row[table["columns"].index("total (s)")] for row in table["rows"]]
    assert totals == sorted(totals) and totals[0] == pytest.approx(m[f"{prefix}.best.step_s"], abs=1e-3)
