"""The coalescing demo: the address model (sectors per request, bank-conflict degree), the Triton
kernels under the interpreter, the CUDA build's shared-memory tiles, and the CPU's strided copy."""

from __future__ import annotations

import shutil

import pytest

from conftest import checks_by_name, demo_record, metric

NVCC = shutil.which("nvcc") is not None
pytestmark = pytest.mark.slow
tiny_record = demo_record("demos.t11_gpu.coalescing")


def test_triton_kernels_are_exact(tiny_record):
    checks = checks_by_name(tiny_record)
    for name in ("triton.copy.stride1", "triton.copy.stride32", "triton.transpose.37x100"):
        assert checks[name]["max_abs_err"] == 0, checks[name]
    # every stride of the sweep was checked (and nothing else)
    copies = {n for n in checks if n.startswith("triton.copy.")}
    assert copies == {f"triton.copy.stride{k}" for k in (1, 2, 4, 8, 32, 64)}


def test_the_address_model(tiny_record):
    assert metric(tiny_record, "model.stride1.sectors") == 4
    assert metric(tiny_record, "model.stride2.sectors") == 8
    assert metric(tiny_record, "model.stride32.sectors") == 32
    assert metric(tiny_record, "model.bank_conflict_pad0") == 32
    assert metric(tiny_record, "model.bank_conflict_pad1") == 1


def test_the_cuda_tiles(tiny_record):
    if not NVCC:
        pytest.skip("nvcc is not on PATH")
    assert metric(tiny_record, "cuda.transpose_smem.smem_bytes") == 32 * 32 * 4
    assert metric(tiny_record, "cuda.transpose_smem_padded.smem_bytes") == 32 * 33 * 4
    assert metric(tiny_record, "cuda.transpose_naive.ld_shared") == 0
    assert metric(tiny_record, "cuda.transpose_smem.ld_shared") > 0
    assert "ld.shared" in tiny_record["artifacts"]["transpose_smem_padded.ptx"]


def test_cpu_copies_are_rated_and_gpu_timing_is_not_run(tiny_record):
    for k in (1, 2, 32, 1024):
        assert metric(tiny_record, f"torch.copy.stride{k}.gbps") > 0
    assert {n["variant"] for n in tiny_record["not_run"]} == {"CUDA kernels (CuPy)", "Triton kernels (timing)"}


def test_the_working_set_sweep(tiny_record):
    """Read bandwidth by working set: 4 KiB up, 4x per point, until past four times the last-level cache; every
    point's sum checked; the in-cache rates marked cache-resident (the gate bounds them by the caches)."""
    sweep = next(s for s in tiny_record["series"] if s["name"] == "hierarchy")
    (line,) = sweep["lines"]
    kib, gbps = [int(k) for k in line["x"]], line["y"]
    assert kib[0] == 4 and all(b == 4 * a for a, b in zip(kib, kib[1:]))
    assert kib[-1] * 1024 >= 4 * metric(tiny_record, "hierarchy.last_level_mib") * 2**20
    assert metric(tiny_record, "hierarchy.largest_mib") == kib[-1] / 1024
    assert all(g > 0 for g in gbps)
    checks = checks_by_name(tiny_record)
    assert {n for n in checks if n.startswith("hierarchy.sum.")} == {f"hierarchy.sum.{k}KiB" for k in kib}
    assert all(checks[f"hierarchy.sum.{k}KiB"]["passed"] for k in kib)
    metrics = tiny_record["metrics"]
    assert metrics["hierarchy.best_cached.gbps"]["cache_resident"] is True
    assert metrics["hierarchy.last_cached.gbps"]["cache_resident"] is True
    assert not metrics["hierarchy.largest.gbps"].get("cache_resident", False)
    inside = [g for k, g in zip(kib, gbps) if k * 1024 <= metric(tiny_record, "hierarchy.last_level_mib") * 2**20]
    assert metric(tiny_record, "hierarchy.best_cached.gbps") == max(inside)
    assert metric(tiny_record, "hierarchy.last_cached.gbps") == inside[-1]
    assert metric(tiny_record, "hierarchy.largest.gbps") == gbps[-1]
    # a buffer that stays in a cache reads faster than one streamed from memory
    assert metric(tiny_record, "hierarchy.best_cached_over_largest") > 2


def test_the_shared_memory_bandwidth_is_computed_as_the_gate_bounds_caches(tiny_record):
    from records.datasheets import CACHE_GBPS, HOPPER_L1_GBPS

    smem = tiny_record["metrics"]["h100.smem.gbps"]
    assert smem["origin"] == "computed" and smem["kind"] == "cache"
    assert smem["value"] == pytest.approx(32 * 4 * 132 * 1.98)
    assert smem["value"] <= HOPPER_L1_GBPS == CACHE_GBPS["h100"]
