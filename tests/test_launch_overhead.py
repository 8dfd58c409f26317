"""The launch-overhead demo at the tiny size: every chain correct and fused into one kernel when
compiled; CUDA-graph variants recorded as not run on CPU; the fit's per-op cost present."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t3_compiler.launch_overhead")


def test_chains_are_correct_and_fused(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for n in (1, 4, 16):
        assert checks[f"eager.chain{n}"]["max_abs_err"] < 1e-5 and checks[f"compiled.chain{n}"]["max_abs_err"] < 1e-5
        assert checks[f"compiled.chain{n}.one_kernel"]["detail"] == f"1 generated kernel(s) for {n} ops"


def test_cuda_graphs_not_run_on_cpu(tiny_record):
    variants = {n["variant"] for n in tiny_record["not_run"]}
    assert "cuda graph (eager ops)" in variants
    assert not any(name.startswith("cuda_graph") for name in tiny_record["metrics"])


def test_metrics(tiny_record):
    m = tiny_record["metrics"]
    assert m["eager.per_op_us"]["value"] > 0 and m["eager.per_op_us"]["unit"] == "us"
    assert m["compiled.compile_s_longest"]["value"] > 0
    rows = next(t for t in tiny_record["tables"] if t["name"] == "chains")["rows"]
    assert len(rows) == 2 * 3  # eager and compiled at three chain lengths
