"""Expert parallelism at the tiny size: the 4-rank MoE layer equals the single-process layer (output and
gradients, k = 1 and 2), token counts add up, the skewed router is more imbalanced than the random one,
the profiler counts 3 all-to-alls per forward and 2 per backward, and the bytes match the formula."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow

N_TOKENS = 4 * 64  # ranks x tokens per rank at the tiny size
N_EXPERTS = 8


tiny_record = demo_record("demos.t7_parallelism.expert_parallel")


def metrics(record):
    return {name: entry["value"] for name, entry in record["metrics"].items()}


def test_output_and_gradients_equal_the_single_process_layer(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for k in (1, 2):
        for name in ("y", "x.grad", "w1.grad", "w2.grad"):
            assert checks[f"k{k}.{name}"]["max_abs_err"] <= checks[f"k{k}.{name}"]["atol"], checks[f"k{k}.{name}"]
        for name in ("router_w.grad", "router_b.grad"):  # sums of the ranks' partial gradients: well inside tolerance
            assert checks[f"k{k}.{name}"]["max_abs_err"] < 1e-4, checks[f"k{k}.{name}"]
        assert checks[f"k{k}.counts"]["detail"].endswith(f"= {N_TOKENS} x {k} = {N_TOKENS * k}")


def test_token_counts_add_up_and_the_skewed_router_is_imbalanced(tiny_record):
    m = metrics(tiny_record)
    load = next(t for t in tiny_record["tables"] if t["name"] == "load")
    first_expert = load["columns"].index("expert 0")
    for router, k, *rest in load["rows"]:
        counts = rest[first_expert - 2:first_expert - 2 + N_EXPERTS]
        assert sum(counts) == N_TOKENS * k, (router, k, counts)
    for k in (1, 2):
        random_router, skewed = m[f"load.random.k{k}.imbalance"], m[f"load.skewed.k{k}.imbalance"]
        assert 1 <= random_router < skewed <= N_EXPERTS / k
        for router in ("random", "skewed"):  # a larger capacity never drops more
            dropped = [m[f"load.{router}.k{k}.dropped.cf{cf}"] for cf in (1.0, 1.25, 2.0)]
            assert 1 >= dropped[0] >= dropped[1] >= dropped[2] >= 0
        assert m[f"load.skewed.k{k}.dropped.cf1.0"] > m[f"load.random.k{k}.dropped.cf1.0"]


def test_all_to_all_calls_per_step(tiny_record):
    m = metrics(tiny_record)
    for k in (1, 2):
        assert m[f"a2a.k{k}.forward_calls"] == 3  # counts, dispatch, combine
        assert m[f"a2a.k{k}.backward_calls"] == 2  # the reverse of dispatch and of combine


def test_bytes_match_the_formula(tiny_record):
    m = metrics(tiny_record)
    for k in (1, 2):
        # Per rank (its own write system calls): token rows plus a fixed ~1.3 kB of counts and headers.
        best, worst = m[f"bytes.k{k}.rank_written_over_formula.min"], m[f"bytes.k{k}.rank_written_over_formula.max"]
        assert 1.0 <= best <= worst < 1.10
        assert 0 < m[f"bytes.k{k}.rank_extra_bytes"] < 2000
        # All ranks over loopback: TCP/IP headers, acknowledgements and barriers on top.
        assert 1.0 <= m[f"bytes.k{k}.loopback_over_formula"] < 1.25
        assert 0.5 < m[f"bytes.k{k}.leaving_fraction"] <= 1.0
