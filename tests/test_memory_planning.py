"""The memory-planning demo at the tiny size: peaks measured for eager and compiled, inference and
training; the compiled forward's wrapper reuses buffers; every peak at least holds the output."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t3_compiler.memory_planning")


def test_correct(tiny_record):
    names = {c["name"] for c in tiny_record["checks"]}
    assert {"inference.compiled", "inference.eager", "training.grad.fc1.weight"} <= names
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert checks["inference.compiled"]["max_abs_err"] < 1e-5 and checks["inference.eager"]["max_abs_err"] < 1e-5
    # every parameter of the block has its gradient compared, each within the absolute tolerance alone
    grads = {n.removeprefix("training.grad.") for n in checks if n.startswith("training.grad.")}
    assert grads == {f"{m}.{p}" for m in ("ln1", "qkv", "proj", "ln2", "fc1", "fc2") for p in ("weight", "bias")}
    assert all(checks[f"training.grad.{g}"]["max_abs_err"] <= checks[f"training.grad.{g}"]["atol"] for g in grads)


def test_peaks(tiny_record):
    m = {k: v["value"] for k, v in tiny_record["metrics"].items()}
    for phase in ("inference", "training"):
        for variant in ("eager", "compiled"):
            # the output alone is one activation; the profiler must have seen at least that
            assert m[f"{phase}.{variant}.peak_mb"] >= m["activation_mb"]
            assert m[f"{phase}.{variant}.allocations"] > 0
    assert m["training.eager.peak_mb"] > m["inference.eager.peak_mb"]  # saved activations and gradients
    assert m["inference.compiled.peak_mb"] < m["inference.eager.peak_mb"]


def test_allocation_plan(tiny_record):
    plan = tiny_record["artifacts"]["inference_allocation_plan"]
    assert "empty_strided" in plan and "# reuse" in plan
    assert tiny_record["metrics"]["inference.compiled.planned_reuses"]["value"] > 0
