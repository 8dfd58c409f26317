"""Memory of a training step at the tiny size: model states equal the bytes-per-parameter formula exactly
(AdamW's 4-byte step counters aside), activations per layer equal Korthikanti et al.'s count within 3%
(the extras are LayerNorm statistics and the causal mask, both named in the demo), and the 7B projection
uses the real Llama-2 7B parameter count."""

from __future__ import annotations

import pytest
from conftest import demo_record, metric

from demos.t8_training._gpt import activation_bytes_per_layer, model_state_bytes_per_param


rec = demo_record("demos.t8_training.step_memory")




def test_every_check_passed(rec):
    assert rec["checks"] and all(c["passed"] for c in rec["checks"])


def test_model_states_per_parameter(rec):
    assert metric(rec, "fp32.state_bytes_per_param") == pytest.approx(16.0, abs=0.05)
    assert metric(rec, "mixed.state_bytes_per_param") == pytest.approx(16.0, abs=0.05)
    assert sum(model_state_bytes_per_param("mixed").values()) == 16


def test_activations_follow_the_formula(rec):
    for kind in ("fp32", "mixed"):
        assert 1.0 <= metric(rec, f"{kind}.act_vs_formula") < 1.03
    assert metric(rec, "amp_bf16.act_over_mixed") > 1.0
    # the formula itself: 2-byte activations and 1-byte masks give the paper's s b h (34 + 5 a s / h)
    s, b, h, a = 4096, 1, 8192, 64
    assert activation_bytes_per_layer(s, b, h, a, 2, 1) == pytest.approx(s * b * h * (34 + 5 * a * s / h))


def test_projection(rec):
    assert metric(rec, "llama2_7B.params_b") == pytest.approx(6.738, abs=0.001)
    assert metric(rec, "llama2_70B.params_b") == pytest.approx(68.98, abs=0.01)
    assert metric(rec, "llama2_7B.states_gb") == pytest.approx(16 * 6.738, rel=1e-3)
    assert metric(rec, "llama2_70B.act_flash_gb") < metric(rec, "llama2_70B.act_gb")
