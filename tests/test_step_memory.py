"""Memory of a training step at the tiny size: model states equal the bytes-per-parameter formula exactly
(AdamW's 4-byte step counters aside), activations per layer equal Korthikanti et al.'s count within 3%
(the extras are LayerNorm statistics and the causal mask, both named in the demo), and the 7B projection
uses the real Llama-2 7B parameter count."""

from __future__ import annotations

import pytest
from conftest import demo_record, metric

from demos.t8_training._gpt import activation_bytes_per_layer, model_state_bytes_per_param


rec = demo_record("demos.t8_training.step_memory")




def test_measured_bytes_per_param_equal_the_formula(rec):
    per_param = {}
    for c in rec["checks"]:  # "<measured> B/param measured (step counters aside) vs <formula> by the formula"
        if c["name"].endswith("_bytes_per_param"):
            measured, formula = c["detail"].split(" B/param measured (step counters aside) vs ")
            assert float(measured) == pytest.approx(float(formula.split()[0]), abs=1e-3), c
            per_param[c["name"].removesuffix("_bytes_per_param")] = float(measured)
    # weights, gradients, Adam's moments (+ the fp32 master copy in mixed precision)
    expected = {"fp32": (4, 4, 8), "amp_bf16": (4, 4, 8), "mixed": (2, 2, 12)}
    assert per_param == {f"{k}.{part}": pytest.approx(v, abs=1e-3) for k, vs in expected.items()
                         for part, v in zip(("weights", "grads", "optimizer"), vs)}


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


def test_memory_snapshot_runs_on_a_gpu_and_says_why_not_elsewhere(rec):
    """The CUDA allocator's log (torch.cuda.memory._record_memory_history) exists only on a GPU: there its
    replayed peak must match max_memory_allocated (a check); on a CPU the record says it did not run, and why."""
    not_run = {n["variant"]: n["reason"] for n in rec["not_run"]}
    checks = {c["name"] for c in rec["checks"]}
    if "memory_snapshot" in not_run:
        assert "CUDA caching allocator" in not_run["memory_snapshot"]
        assert "snapshot.peak_matches_allocator" not in checks
    else:
        assert "snapshot.peak_matches_allocator" in checks and metric(rec, "snapshot.allocations") > 0


def test_snapshot_summary_replays_the_log():
    """The summary replays allocations and frees from the step's first allocation on (synthetic log)."""
    import ast
    from pathlib import Path

    source = (Path(__file__).parents[1] / "demos" / "t8_training" / "step_memory.py").read_text()
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "snapshot_summary")
    namespace: dict = {}
    exec(compile(ast.Module([fn], []), "step_memory.py", "exec"), namespace)

    def frame(name, file="/r/demos/t8_training/step_memory.py", line=1):
        return {"name": name, "filename": file, "line": line}

    log = [{"action": "alloc", "size": 10, "frames": [frame("one_step")]},  # before the step: the baseline
           {"action": "alloc", "size": 5, "frames": [frame("step", line=7)]},
           {"action": "alloc", "size": 20, "frames": [frame("forward", "/r/demos/t8_training/_gpt.py", 3),
                                                       frame("step", line=8)]},
           {"action": "free_completed", "size": 20, "frames": []},
           {"action": "alloc", "size": 3, "frames": [frame("step", line=9)]}]
    out = namespace["snapshot_summary"]({"segments": [{"total_size": 64}], "device_traces": [log]})
    assert out["found_step"] and out["peak"] == 25 and out["allocs"] == 3 and out["reserved"] == 64
    assert out["sites"][0] == ("t8_training/_gpt.py:3 forward", (1, 20))
