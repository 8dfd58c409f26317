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


@pytest.mark.slow
def test_warp_aggregation_model_one_atomic_per_warp(tiny_record):
    """The NumPy model of one warp: the filter's atomics fall from one per passing lane to one per warp, and
    the match histogram's from one per lane to one per distinct key; both still produce the right output."""
    checks = checks_by_name(tiny_record)
    for name in ("model.filter.same_set", "model.filter.one_atomic_per_warp", "model.hist.exact",
                 "model.hist.one_atomic_per_key"):
        assert checks[name]["passed"], checks[name]
    # half of the values pass, so about 16 of 32 lanes per warp; a warp with none passing is (1/2)^32 unlikely
    assert 12 < metric(tiny_record, "model.filter.atomics_per_warp.naive") < 20
    assert metric(tiny_record, "model.filter.atomics_per_warp.aggregated") == 1
    assert metric(tiny_record, "model.hist.atomics_per_warp.naive") == 32
    assert 6 < metric(tiny_record, "model.hist.atomics_per_warp.match") <= 8  # at most one per key, 8 keys
    assert tiny_record["metrics"]["model.filter.atomics_per_warp.aggregated"]["origin"] == "computed"
    assert any(n["variant"].startswith("CUDA filter and histogram") for n in tiny_record["not_run"])


@pytest.mark.slow
def test_vote_and_match_are_in_the_compiled_code(tiny_record):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    assert metric(tiny_record, "ptx.filter_warp.vote") >= 1  # its __ballot_sync
    assert metric(tiny_record, "ptx.filter_atomic.vote") == 0  # the source asks for no vote of any kind
    assert metric(tiny_record, "ptx.filter_warp.atomics") == 1  # one atomic instruction, run by lane 0
    assert metric(tiny_record, "ptx.hist_match.match") >= 1
    assert tiny_record["metrics"]["ptx.hist_match.match"]["origin"] == "static"
    if "sass.filter_atomic.vote" not in tiny_record["metrics"]:
        assert any(n["variant"] == "SASS of the warp-vote kernels" for n in tiny_record["not_run"])
        pytest.skip("no cuobjdump: the SASS was not read")
    # ptxas warp-aggregates the naive filter's one-address atomicAdd by itself; it cannot for per-key addresses
    assert metric(tiny_record, "sass.filter_atomic.vote") >= 1
    assert metric(tiny_record, "sass.hist_atomic.vote") == 0
    assert any(t["name"] == "warp_vote" and "nvcc release" in t["title"] for t in tiny_record["tables"])
