"""Tensor parallelism at the tiny size, on 2 and 4 forked gloo ranks and under torchrun: every rank
equals the single-process model, a missing backward all-reduce is caught, the profiler counts the
formula's all-reduces, and the ranks' socket writes and the loopback counter show the ring formula's
bytes."""

from __future__ import annotations

import sys

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow

MODULE = "demos.t7_parallelism.tensor_parallel"
LOOPBACK_MARGIN = 0.10  # machine-wide counter: other programs' loopback traffic can only add
WRITTEN_MARGIN = 0.02
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m"]


tiny_record = demo_record(MODULE)
torchrun_record = demo_record(MODULE, launcher=TORCHRUN)


def assert_ranks_equal_the_single_process_model(record, p):
    checks = {c["name"]: c for c in record["checks"]}
    names = [f"p{p}.megatron.{k}" for k in ("output.every_rank", "input_grad.every_rank", "b2_grad.every_rank",
                                            "w1_grad.shards", "b1_grad.shards", "w2_grad.shards")]
    for variant in ("dtensor", "dtensor_sp"):
        names += [f"p{p}.{variant}.{k}" for k in ("output", "input_grad", "w1_grad.shards", "w2_grad.shards")]
    for name in names:
        assert checks[name]["max_abs_err"] < 1e-12, checks[name]
    # the profiler saw the formula's 2 all-reduces per step (one forward, one backward) on every rank
    per_rank = checks[f"p{p}.all_reduces_per_step"]["detail"].split("rank: ")[1].split(";")[0]
    assert per_rank == str([2.0] * p), checks[f"p{p}.all_reduces_per_step"]


def assert_collectives_match_the_formulas(record, p):
    m = record["metrics"]
    assert m[f"p{p}.all_reduces_per_step"]["value"] == m[f"p{p}.all_reduces_per_step_formula"]["value"] == 2
    # the wire carries at least the payload, and at least what the ranks wrote
    assert m[f"p{p}.bytes_ratio"]["value"] >= 1 and m[f"p{p}.loopback_over_written"]["value"] >= 1
    # socket writes per process: payload and barriers only, immune to other programs' traffic
    for prefix in (f"p{p}", f"p{p}.dtensor"):
        ratio = m[f"{prefix}.bytes_written_ratio"]
        assert 1 <= ratio["value"] <= 1 + WRITTEN_MARGIN, (prefix, ratio)
    assert m[f"p{p}.dtensor_sp.bytes_written_ratio"]["value"] >= 1  # gloo runs its reduce-scatter as an all-reduce
    assert m[f"p{p}.dtensor.all_reduce"]["value"] == 2
    assert m[f"p{p}.dtensor_sp.all_gather_into_tensor"]["value"] == 2
    assert m[f"p{p}.dtensor_sp.reduce_scatter_tensor"]["value"] == 2
    assert 0 < m[f"p{p}.all_reduce_fraction"]["value"] < 1
    assert m[f"p{p}.step_ms"]["value"] > 0


def assert_loopback_bytes_match_the_ring_formula(record, p):
    """The loopback counter is machine-wide: while other programs on this host exchange data over it
    (other demos' ranks, during development), no window is quiet; say so rather than fail."""
    m = record["metrics"]
    if m[f"p{p}.loopback_over_written"]["value"] > 1 + LOOPBACK_MARGIN:
        pytest.skip(f"loopback busy with other programs' traffic: {m[f'p{p}.loopback_over_written']['value']:.2f}x "
                    "the ranks' own socket writes in the quietest window")
    assert m[f"p{p}.bytes_ratio"]["value"] <= 1 + LOOPBACK_MARGIN, m[f"p{p}.bytes_ratio"]


@pytest.mark.parametrize("p", [2, 4])
def test_every_rank_equals_the_single_process_model(tiny_record, p):
    assert_ranks_equal_the_single_process_model(tiny_record, p)


@pytest.mark.parametrize("p", [2, 4])
def test_a_missing_backward_all_reduce_is_caught(tiny_record, p):
    check = next(c for c in tiny_record["checks"] if c["name"] == f"p{p}.check_catches_a_missing_backward_all_reduce")
    assert "differs on every rank" in check["detail"], check
    # "(max |err| <err>, |reference| up to <scale>)": off by a large fraction of the gradient itself
    err, scale = (float(s.split()[-1]) for s in check["detail"].rstrip(")").split("(")[-1].split(", "))
    assert err > 0.1 * scale, check


@pytest.mark.parametrize("p", [2, 4])
def test_collectives_counted_and_bytes_metered_match_the_formulas(tiny_record, p):
    assert_collectives_match_the_formulas(tiny_record, p)


@pytest.mark.parametrize("p", [2, 4])
def test_loopback_bytes_match_the_ring_formula(tiny_record, p):
    assert_loopback_bytes_match_the_ring_formula(tiny_record, p)


def test_tables_and_nothing_skipped_on_cpu(tiny_record):
    assert {t["name"] for t in tiny_record["tables"]} == {"p2", "p4", "dtensor", "step_time"}
    assert tiny_record["metrics"]["p1.step_ms"]["value"] > 0 and tiny_record["not_run"] == []


def test_under_torchrun_only_its_world_size_runs(torchrun_record):
    assert_ranks_equal_the_single_process_model(torchrun_record, 2)
    assert_collectives_match_the_formulas(torchrun_record, 2)
    assert not any(name.startswith("p4.") for name in torchrun_record["metrics"])
    assert {t["name"] for t in torchrun_record["tables"]} == {"p2", "dtensor", "step_time"}


def test_loopback_bytes_under_torchrun(torchrun_record):
    assert_loopback_bytes_match_the_ring_formula(torchrun_record, 2)


# -- where the ranks run (_dist.place_ranks), on any machine -------------------------------------

class FakeRun:
    """What place_ranks reads and writes of a Run: the device, and the not-run list."""

    def __init__(self, gpu: bool):
        import torch

        self.device = type("D", (), {"is_gpu": gpu})()
        self.torch_device = torch.device("cuda" if gpu else "cpu")
        self.not_run_list = []

    def not_run(self, variant, reason):
        self.not_run_list.append((variant, reason))


TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture
def plain_process(monkeypatch):
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)


def test_cpu_run_forks_every_world_size(plain_process):
    from demos.t7_parallelism import _dist

    run = FakeRun(gpu=False)
    ranks = _dist.place_ranks(run, [2, 4], "x")
    assert ranks.device.type == "cpu" and ranks.world_sizes == (2, 4) and ranks.backend == "gloo"
    assert run.not_run_list == []


def test_one_gpu_without_torchrun_records_the_ranks_as_not_run(plain_process):
    from demos.t7_parallelism import _dist

    run = FakeRun(gpu=True)
    assert _dist.place_ranks(run, [2, 4], "tensor parallel on several GPUs") is None
    assert run.not_run_list == [("tensor parallel on several GPUs",
                                 "needs 4 GPUs: start it with torchrun --nproc-per-node 4")]
    assert _dist.place_ranks(run, [4], "pipeline stages", gpus=False) is None
    assert "by design" in run.not_run_list[-1][1]


def test_torchrun_with_more_local_ranks_than_gpus_is_refused(monkeypatch):
    import torch

    from demos.t7_parallelism import _dist

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    set_device = []
    monkeypatch.setattr(torch.cuda, "set_device", set_device.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _dist.pin_gpu_per_rank()
    assert set_device == []  # never a GPU this node does not have
    with pytest.raises(SystemExit) as exit_info:
        _dist.place_ranks(FakeRun(gpu=True), [2, 4], "x")
    assert exit_info.value.code == 2
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    _dist.pin_gpu_per_rank()
    assert set_device == [1]
    ranks = _dist.place_ranks(FakeRun(gpu=True), [2, 4], "x")
    assert ranks.world_sizes == (2,) and ranks.backend == "nccl"
