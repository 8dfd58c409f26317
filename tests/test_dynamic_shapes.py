"""The dynamic-shapes demo at the tiny size (lengths 5, 11, 13; buckets of 8): the recompile
count of each strategy, and every output equal to the float64 reference."""

from __future__ import annotations


import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t2_pipeline.dynamic_shapes")


def test_recompile_counts(tiny_record):
    compiles = {k.removesuffix(".compiles"): v["value"] for k, v in tiny_record["metrics"].items()
                if k.endswith(".compiles") and not k.startswith(("static_over", "data_dependent."))}
    assert compiles == {"eager": 0, "static": 3, "automatic": 2, "dynamic": 1, "bucketing": 2}


def test_symbolic_shape_and_buckets_in_the_table(tiny_record):
    rows = {r[0].split(" ")[0]: r for r in tiny_record["tables"][0]["rows"]}
    assert "(2, 5, 32)" in rows["static"][2] and "(2, 13, 32)" in rows["static"][2]
    assert rows["dynamic"][2].split(", ")[1].startswith("s")  # the sequence dimension is a symbol
    first, second = rows["automatic"][2].split("; ")
    assert first == "(2, 5, 32)" and second.split(", ")[1].startswith("s")  # static first, then symbolic
    assert rows["bucketing"][2] == "(2, 8, 32); (2, 16, 32)"


def test_outputs_match_and_second_pass_compiles_nothing(tiny_record):
    checks = tiny_record["checks"]
    for strategy in ("static", "automatic", "dynamic", "bucketing"):
        compiles = int(tiny_record["metrics"][f"{strategy}.compiles"]["value"])
        second_pass = next(c for c in checks if c["name"] == f"{strategy}.no_recompile_on_second_pass")
        assert second_pass["detail"] == f"{compiles} compiles in the first pass, 0 more in the second", second_pass
        for t in (5, 11, 13):
            assert next(c for c in checks if c["name"] == f"{strategy}.seq{t}")["max_abs_err"] < 1e-4


def test_sizes_read_from_data(tiny_record):
    m = {k.removeprefix("data_dependent.").removesuffix(".compiles"): v["value"]
         for k, v in tiny_record["metrics"].items() if k.startswith("data_dependent.") and k.endswith(".compiles")}
    # default: a break at .item() (or the mask), then the size specialized, then symbolic; the flags keep it in one
    # graph only once nothing asks a question about u0 that no input decides (torch._check(n >= 1) answers it)
    assert m == {"item_default": 4, "item_captured": 4, "item_checked": 1, "mask_default": 3, "mask_captured": 1}
    rows = {r[0]: r for r in next(t for t in tiny_record["tables"] if t["name"] == "data_dependent")["rows"]}
    assert "[unbacked u0]" in rows["`.item()`, capture_scalar_outputs + torch._check(n >= 1)"][2]
    assert "[unbacked u0]" in rows["boolean mask, capture_dynamic_output_shape_ops"][2]


def test_export_refuses_without_the_check_and_asserts_with_it(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert "data-dependent" in checks["export.unchecked_refused"]["detail"]
    assert checks["export.unbacked_symbol"]["detail"] == ".item() traced as u0"
    assert "u0 >= 1" in checks["export.assertion_fires"]["detail"]
    assert tiny_record["metrics"]["data_dependent.export.runtime_asserts"]["value"] >= 1
    assert "_assert_scalar" in tiny_record["artifacts"]["data_dependent_export"]
    assert "1 time(s)" in checks["data_dependent.inductor.one_compile"]["detail"]
