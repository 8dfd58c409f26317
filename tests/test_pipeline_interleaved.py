"""Interleaved 1F1B at the tiny size (4 ranks, v = 2, m = 4): torch.distributed.pipelining's schedule gives
the unsplit 2p-layer model's loss, output and every virtual stage's gradients, and its idle fraction is
measured next to the formula (p-1)/(vm+p-1) and next to plain 1F1B's, timed in the same run on the same
device time per step."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow

P, V, M = 4, 2, 4


tiny = demo_record("demos.t7_parallelism.pipeline_interleaved")


def test_interleaved_1f1b_equals_the_unsplit_model(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    name = f"torch_pipelining.interleaved.m{M}"
    for part in ["loss", "output"] + [f"stage{k}.grads" for k in range(V * P)]:
        assert checks[f"{name}.{part}"]["max_abs_err"] <= checks[f"{name}.{part}"]["atol"], checks[f"{name}.{part}"]


def test_bubble_is_measured_next_to_the_formulas(tiny):
    m = tiny["metrics"]
    assert m[f"formula_interleaved.m{M}.bubble"]["value"] == pytest.approx((P - 1) / (V * M + P - 1))
    assert m[f"formula.m{M}.bubble"]["value"] == pytest.approx((P - 1) / (M + P - 1))
    measured, worst = m[f"interleaved.m{M}.bubble"]["value"], m[f"interleaved.m{M}.bubble_worst_stage"]["value"]
    # hand-overs cost time the formula leaves out, so the measured idle fraction is at least the formula's
    # (less a little for clock noise), and the most idle device is at least the mean
    assert m[f"formula_interleaved.m{M}.bubble"]["value"] - 0.05 <= measured < 1 and worst >= measured
    # padded to T_f forward per device per step: a step takes at least the devices' 3 T_f of work
    assert m[f"interleaved.m{M}.step_ms"]["value"] >= 3 * 100


def test_plain_1f1b_is_timed_beside_it_on_the_same_work(tiny):
    m = {name: v["value"] for name, v in tiny["metrics"].items()}
    forward_ms = 100  # the tiny size's T_f
    assert m[f"formula.m{M}.idle_ms"] == pytest.approx((P - 1) * 3 * forward_ms / M)
    assert m[f"formula_interleaved.m{M}.idle_ms"] == pytest.approx((P - 1) * 3 * forward_ms / (V * M))
    for kind in ("1f1b", "interleaved"):
        # idle time per device = step less busy time, and a device is busy for at least its padded 3 T_f
        assert 0 < m[f"{kind}.m{M}.idle_ms"] <= m[f"{kind}.m{M}.step_ms"] - 3 * forward_ms + 1e-6
        assert 0 <= m[f"{kind}.m{M}.bubble"] < 1
    assert m[f"m{M}.idle_ratio"] == pytest.approx(m[f"interleaved.m{M}.idle_ms"] / m[f"1f1b.m{M}.idle_ms"])
    table = next(t for t in tiny["tables"] if t["name"] == "bubble")
    assert [row[1] for row in table["rows"]] == ["1F1B", f"interleaved, v={V}"]
