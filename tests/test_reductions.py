"""The reductions demo: Triton reductions under the interpreter, order dependence of float32 sums,
the shuffle in the PTX, and a direct check that summation order changes float32 bits."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import checks_by_name, demo_record, metric

tiny_record = demo_record("demos.t11_gpu.reductions")


def test_summation_order_changes_float32_bits():
    """The fact the page rests on: the same numbers, added in a different order, can round differently."""
    v = np.array([1e8, 1.0, -1e8, 1.0], dtype=np.float32)
    forward = np.float32(np.float32(np.float32(v[0] + v[1]) + v[2]) + v[3])
    reordered = np.float32(np.float32(np.float32(v[0] + v[2]) + v[1]) + v[3])
    assert forward != reordered


@pytest.mark.slow
def test_every_variant_is_within_the_bound(tiny_record):
    checks = checks_by_name(tiny_record)
    for name in ("triton.two_pass", "triton.atomic", "torch.sum"):
        # the bound is the worst case (every rounding the same way); random roundings land far inside it
        assert checks[name]["max_abs_err"] < checks[name]["atol"] / 10, checks[name]
    assert {"fixed_order.bitwise", "exact.torch.sum", "exact.triton.two_pass", "exact.triton.atomic"} <= set(checks)


@pytest.mark.slow
def test_orders_disagree_and_trees_are_more_accurate(tiny_record):
    assert metric(tiny_record, "order.distinct_results") > 1
    assert metric(tiny_record, "order.spread_ulps") >= 1
    assert metric(tiny_record, "error.pairwise") < metric(tiny_record, "error.sequential")
    assert metric(tiny_record, "torch.sum.distinct") == 1


@pytest.mark.slow
def test_the_shuffle_is_in_the_ptx(tiny_record):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    assert metric(tiny_record, "ptx.sum_shuffle.shfl") >= 5
    assert metric(tiny_record, "ptx.sum_tree.shfl") == 0
