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
