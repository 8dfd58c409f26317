"""The scan_and_remat demo at its tiny size: scan's program does not grow with depth, the loop's does; remat
changes the saved bytes and not the gradients; the custom rules are finite where autodiff gives nan."""

import pytest

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t1_frameworks.scan_and_remat")
DEPTHS = (2, 4)  # the tiny size's depths


def test_every_variant_matches_the_float64_stack(tiny):
    checks = checks_by_name(tiny)
    for depth in DEPTHS:
        for variant in ("loop", "scan", "scan_unroll"):
            check = checks[f"{variant}.depth{depth}"]
            assert check["passed"] and check["max_abs_err"] <= check["atol"]
        assert checks[f"scan_vs_loop.depth{depth}"]["passed"]


def test_the_loop_program_grows_with_depth_and_scan_does_not(tiny):
    table = next(t for t in tiny["tables"] if t["name"] == "scan_vs_loop")
    columns = table["columns"]
    eqns = {(row[0], row[1]): row[columns.index("jaxpr equations")] for row in table["rows"]}
    ops = {(row[0], row[1]): row[columns.index("StableHLO ops")] for row in table["rows"]}
    assert eqns[4, "lax.scan"] == eqns[2, "lax.scan"] and ops[4, "lax.scan"] == ops[2, "lax.scan"]
    # the loop records every block: twice the depth, about twice the program
    assert eqns[4, "Python loop (unrolled by tracing)"] >= 1.8 * eqns[2, "Python loop (unrolled by tracing)"]
    assert metric(tiny, "loop.jaxpr_equations") > metric(tiny, "scan.jaxpr_equations")
    assert metric(tiny, "loop.stablehlo_ops") > metric(tiny, "scan.stablehlo_ops")
    assert tiny["metrics"]["loop.jaxpr_equations"]["origin"] == "static"
    # unroll=2 at depth 4: a larger loop body than plain scan's
    assert ops[4, "lax.scan, unroll=2"] > ops[4, "lax.scan"]
    # the stages timed apart: trace, lower and XLA's compile, each a one-shot time
    for variant in ("loop", "scan", "scan_unroll"):
        assert all(metric(tiny, f"{variant}.{stage}_s") > 0 for stage in ("trace", "lower", "compile"))
    assert {"trace (s)", "lower (s)", "XLA compile (s)"} <= set(columns)
    assert metric(tiny, "loop_over_scan.compile") > 0


def test_remat_saves_bytes_and_keeps_the_gradients(tiny):
    checks = checks_by_name(tiny)
    for policy in ("full", "dots", "everything"):
        for name in ("W1", "b1", "W2"):
            assert checks[f"{policy}.grad.{name}"]["passed"]
    none, full, dots = (metric(tiny, f"{p}.temp_mb") for p in ("none", "full", "dots"))
    assert none > dots > full > 0
    assert metric(tiny, "everything.temp_mb") == pytest.approx(none, rel=0.05)
    # full remat recomputes the first matmul of each block; dots_saveable keeps the matmuls
    assert metric(tiny, "full.dots") == metric(tiny, "none.dots") + 1
    assert metric(tiny, "dots.dots") == metric(tiny, "none.dots")
    assert metric(tiny, "full.flops_over_none") > 1 and "saved_residuals.full" in tiny["artifacts"]
    assert any("generated_code_size_in_bytes" in n["variant"] for n in tiny["not_run"])


def test_custom_rules_are_finite_where_autodiff_is_nan(tiny):
    checks = checks_by_name(tiny)
    assert checks["norm.autodiff_at_zero"]["expected_failure"] and checks["log1pexp.autodiff_large_x"]["passed"]
    assert metric(tiny, "norm.autodiff_nonfinite_at_zero") == 1.0
    assert metric(tiny, "norm.custom_vjp_nonfinite") == 0.0
    assert metric(tiny, "norm.custom_vjp_max_err") < 1e-6
    assert metric(tiny, "log1pexp.autodiff_nonfinite") > 0
    assert metric(tiny, "log1pexp.custom_jvp_max_err") < 1e-6
    # the tutorial's rule: finite gradient, but its value overflows and x << 0 loses relative accuracy;
    # jnp.logaddexp(x, 0) gets both right
    assert checks["logaddexp.autodiff"]["passed"] and checks["logaddexp.autodiff"]["atol"] == 0
    assert metric(tiny, "log1pexp.value_nonfinite") > 0 and metric(tiny, "logaddexp.value_nonfinite") == 0
    assert metric(tiny, "log1pexp.custom_jvp_max_rel_err") > 0.5
    assert metric(tiny, "logaddexp.autodiff_max_rel_err") < 1e-5
