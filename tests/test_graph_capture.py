"""The graph-capture demo at the tiny size: Dynamo's break report for the broken block (three
breaks, four graphs) and one graph for the fixed one, the exported and AOTAutograd graphs, and
Inductor's generated code, all checked against the float64 reference."""

from __future__ import annotations


import pytest

from conftest import run_demo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_record(tmp_path_factory):
    return run_demo("demos.t2_pipeline.graph_capture", tmp_path_factory.mktemp("results"))


def value(rec, name):
    return rec["metrics"][name]["value"]


def test_graph_break_counts(tiny_record):
    assert value(tiny_record, "dynamo.with_breaks.breaks") == 3
    assert value(tiny_record, "dynamo.with_breaks.graphs") == 4
    assert value(tiny_record, "dynamo.fixed.breaks") == 0
    assert value(tiny_record, "dynamo.fixed.graphs") == 1
    report = tiny_record["artifacts"]["dynamo_graph_breaks"]
    for culprit in ("print(", "amax()", "scipy.special.erf"):
        assert culprit in report, report


def test_every_stage_matches_the_reference(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for name in ("eager.with_breaks", "eager.fixed", "export.module", "export.core_aten", "aot.grads",
                 "inductor.fixed", "inductor.explicit_breaks"):
        assert checks[name]["passed"] and checks[name]["max_abs_err"] < 1e-4, checks[name]
    assert checks["dynamo.fullgraph_refuses_breaks"]["passed"]
    assert all(c["passed"] for c in checks.values())


def test_graph_sizes_and_generated_code(tiny_record):
    # decomposing to core ATen turns the few high-level ops into many simpler ones
    assert value(tiny_record, "export.core_aten_ops") > value(tiny_record, "export.ops") > 0
    assert value(tiny_record, "aot.backward_ops") > 0 and value(tiny_record, "aot.saved_activations") > 0
    kernels, library = value(tiny_record, "inductor.generated_kernels"), value(tiny_record, "inductor.library_calls")
    assert 1 <= kernels < value(tiny_record, "eager.ops_launched")
    assert kernels + library < value(tiny_record, "eager.ops_launched")  # fusion removed launches
    assert "cpp_fused" in tiny_record["artifacts"]["inductor_kernel"]
    assert "def call(" in tiny_record["artifacts"]["inductor_wrapper_call"]
    assert "scaled_dot_product_attention" in tiny_record["artifacts"]["export_graph"]
