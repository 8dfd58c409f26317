"""The graph-capture demo at the tiny size: Dynamo's break report for the broken block (three
breaks, four graphs) and one graph for the fixed one, the exported and AOTAutograd graphs, and
Inductor's generated code, all checked against the float64 reference."""

from __future__ import annotations


import pytest

from conftest import demo_record, metric

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t2_pipeline.graph_capture")




def test_graph_break_counts(tiny_record):
    assert metric(tiny_record, "dynamo.with_breaks.breaks") == 3
    assert metric(tiny_record, "dynamo.with_breaks.graphs") == 4
    assert metric(tiny_record, "dynamo.fixed.breaks") == 0
    assert metric(tiny_record, "dynamo.fixed.graphs") == 1
    report = tiny_record["artifacts"]["dynamo_graph_breaks"]
    for culprit in ("print(", "amax()", "scipy.special.erf"):
        assert culprit in report, report


def test_every_stage_matches_the_reference(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for name in ("eager.with_breaks", "eager.fixed", "export.module", "export.core_aten", "aot.grads",
                 "inductor.fixed", "inductor.explicit_breaks", *(f"inductor.cold_{i}" for i in (1, 2, 3, 4))):
        assert checks[name]["max_abs_err"] < 1e-4, checks[name]
    # fullgraph=True raised Dynamo's Unsupported at the first break, and the breaks were found in source order
    refused = checks["dynamo.fullgraph_refuses_breaks"]
    assert refused["detail"].startswith("Unsupported"), refused
    for i, needle in enumerate(("print", "amax", "scipy"), start=1):
        assert f"break {i}:" in checks[f"dynamo.break_found.{needle}"]["detail"], checks[f"dynamo.break_found.{needle}"]


def test_graph_sizes_and_generated_code(tiny_record):
    # decomposing to core ATen turns the few high-level ops into many simpler ones
    assert metric(tiny_record, "export.core_aten_ops") > metric(tiny_record, "export.ops") > 0
    assert metric(tiny_record, "aot.backward_ops") > 0 and metric(tiny_record, "aot.saved_activations") > 0
    kernels, library = metric(tiny_record, "inductor.generated_kernels"), metric(tiny_record, "inductor.library_calls")
    assert 1 <= kernels < metric(tiny_record, "eager.ops_launched")
    assert kernels + library < metric(tiny_record, "eager.ops_launched")  # fusion removed launches
    # three breaks split the fused kernels: more generated kernels over the four graphs than in the one
    assert metric(tiny_record, "inductor.with_breaks.generated_kernels") > kernels
    assert "cpp_fused" in tiny_record["artifacts"]["inductor_kernel"]
    assert "def call(" in tiny_record["artifacts"]["inductor_wrapper_call"]
    assert "scaled_dot_product_attention" in tiny_record["artifacts"]["export_graph"]


def test_cold_compile_times(tiny_record):
    # each variant's first call was timed cold (Dynamo reset, empty Inductor caches), the best of two
    one, breaks = metric(tiny_record, "timing.cold_compile_s"), metric(tiny_record, "timing.cold_compile_with_breaks_s")
    assert one > 0 and breaks > 0
    assert metric(tiny_record, "timing.cold_compile_breaks_over_one") == pytest.approx(breaks / one)
    table = next(t for t in tiny_record["tables"] if t["name"] == "timing")
    assert [row[3] for row in table["rows"]] == ["", round(one, 2), round(breaks, 2)]
