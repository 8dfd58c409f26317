"""The JAX sharding demo at the tiny size: every sharded program equals the float64 reference, the Megatron
sharding compiles to exactly one all-reduce and no all-gather, a wrong sharding gets different collectives,
and the gradient adds the backward all-reduce (dL/dx), which the weights-only gradient does without."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute")


tiny_record = demo_record("demos.t7_parallelism.jax_sharding")


def collectives(record, case):
    return {kind: record["metrics"][f"{case}.{kind}"]["value"] for kind in KINDS}


def test_every_sharding_equals_the_reference(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    assert "sees 8 cpu device(s)" in checks["host_devices"]["detail"]
    names = ["unsharded", "megatron", "wrong.w2_columns", "wrong.w1_rows", "mesh2d"]
    names += [f"{case}.{grad}" for case in ("megatron.grad", "mesh2d.grad") for grad in ("dx", "dw1", "dw2")]
    for name in names:  # a wrong sharding changes the collectives, never the answer
        assert checks[name]["max_abs_err"] < 1e-4, checks[name]
    # Megatron's split of the tiny MLP (hidden 64, FFN 256) over 8 devices: W1's columns, W2's rows
    assert checks["megatron.shards"]["detail"] == (
        "each of the 8 devices holds W1 (64, 32) of (64, 256) and W2 (32, 64) of (256, 64)")


def test_megatron_forward_is_one_all_reduce_of_the_output(tiny_record):
    assert collectives(tiny_record, "megatron") == {**dict.fromkeys(KINDS, 0), "all_reduce": 1}
    batch, hidden = 16, 64  # the tiny size
    assert tiny_record["metrics"]["megatron.collective_bytes"]["value"] == batch * hidden * 4


def test_a_wrong_sharding_gets_different_collectives(tiny_record):
    wrong = collectives(tiny_record, "wrong.w2_columns")
    assert wrong != collectives(tiny_record, "megatron")
    assert wrong["all_gather"] >= 1 and wrong["all_reduce"] == 0
    assert tiny_record["metrics"]["wrong.w2_columns.bytes_over_megatron"]["value"] > 1
    assert collectives(tiny_record, "wrong.w1_rows") != collectives(tiny_record, "megatron")


def test_the_gradient_adds_the_backward_all_reduce(tiny_record):
    grad = collectives(tiny_record, "megatron.grad")
    assert grad["all_reduce"] == 2 and grad["all_gather"] == 0
    assert collectives(tiny_record, "megatron.grad_weights")["all_reduce"] == 1


def test_the_2d_mesh_reduces_within_model_groups(tiny_record):
    assert collectives(tiny_record, "mesh2d") == {**dict.fromkeys(KINDS, 0), "all_reduce": 1}
    rows = [r for r in next(t for t in tiny_record["tables"] if t["name"] == "collectives")["rows"]
            if r[0] == "mesh2d"]
    assert [r[4] for r in rows] == [4]  # groups of 4 devices: the "model" axis of the (2, 4) mesh
    # the gradient adds the data-parallel all-reduce of the weight gradients, in groups of 2
    grad_rows = [r for r in next(t for t in tiny_record["tables"] if t["name"] == "collectives")["rows"]
                 if r[0] == "mesh2d.grad"]
    assert sorted(r[4] for r in grad_rows) == [2, 4, 4]


def test_the_hlo_lines_are_kept(tiny_record):
    text = tiny_record["artifacts"]["collectives_hlo"]
    assert "# megatron:" in text and "all-reduce(" in text and "all-gather(" in text
    assert "metadata=" not in text
