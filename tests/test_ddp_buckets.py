"""DDP's bucket sweep at the tiny size on 2 gloo ranks: every bucket size trains to the single-process
parameters, a steady step makes one all-reduce per rebuilt bucket, and the all-reduce count never grows
with the bucket size."""

from __future__ import annotations

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow

BUCKET_LABELS = ("0p25mb", "1mb", "5mb", "25mb", "100mb")  # increasing bucket_cap_mb


tiny_record = demo_record("demos.t7_parallelism.ddp_buckets")


@pytest.fixture(scope="module")
def tiny(tiny_record):
    """The record, and its metrics' values by name."""
    return tiny_record, {name: metric["value"] for name, metric in tiny_record["metrics"].items()}


def test_every_bucket_size_trains_like_one_process(tiny):
    record, value = tiny
    checks = {c["name"]: c for c in record["checks"]}
    for label in (*BUCKET_LABELS, "default"):
        # the measured error after one DDP step, far below the demo's tolerance (atol 1e-5 + rtol 1e-4 |ref|)
        err = float(checks[f"bucket_sweep.{label}"]["detail"].split("max |err| ")[1].split()[0])
        assert err < 1e-5, (label, err)
        calls = int(value[f"bucket.{label}.calls"])
        assert checks[f"bucket.{label}.calls_equal_buckets"]["detail"].startswith(
            f"{calls} all-reduces in a steady step, {calls} buckets")
    # the first step runs DDP's initial single bucket, whatever the cap
    rows = next(t for t in record["tables"] if t["name"] == "bucket_sweep")["rows"]
    assert len(rows) == len(BUCKET_LABELS) + 1 and all(row[1] == 1 for row in rows), rows


def test_all_reduce_count_never_grows_with_bucket_size(tiny):
    record, value = tiny
    calls = [value[f"bucket.{label}.calls"] for label in BUCKET_LABELS]
    assert calls == sorted(calls, reverse=True) and calls[0] > calls[-1], calls
    # the default (25 MiB) caps the first bucket at 1 MiB, so it never has fewer buckets than an explicit 25
    assert value["bucket.default.calls"] >= value["bucket.25mb.calls"]
    series = next(s for s in record["series"] if s["name"] == "bucket_calls")
    assert series["lines"][0]["y"] == calls
    assert value["bucket.first_bucket_mib"] == 1
    assert all(value[f"bucket.{label}.step_ms"] > 0 for label in BUCKET_LABELS)
