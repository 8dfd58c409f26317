"""The autotune demo at the tiny size: every tile configuration correct under Triton's
interpreter on ragged shapes, nothing timed on CPU; the fused row kernel's registers, spills and occupancy
read from ptxas for sm_90; and a kernel with a missing mask is caught."""

from __future__ import annotations

import os

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t3_compiler.autotune",  # the demo must set TRITON_INTERPRET itself
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})


def test_every_configuration_is_checked_on_both_shapes(tiny_record):
    checks = [c for c in tiny_record["checks"] if not c["name"].startswith("row_kernel.")]
    assert len(checks) == 12 * 2
    assert {c["name"].split(".")[0] for c in checks} == {"48x40x72", "16x40x72"}  # both ragged shapes
    assert all(c["max_abs_err"] < 1e-3 for c in checks)


def test_nothing_timed_on_cpu(tiny_record):
    assert {n["variant"] for n in tiny_record["not_run"]} == {"sweep timing", "triton.autotune", "row kernel timing"}
    assert all(m.get("origin") == "static" for m in tiny_record["metrics"].values())  # from ptxas, not timed


def test_the_fused_row_kernel_trades_registers_for_occupancy_or_spills(tiny_record):
    """The row kernel's cases, compiled for sm_90: a wider row per thread needs more registers and fits fewer
    warps; a cap below that spills; more warps per row bring the registers and the occupancy back."""
    m = {k: v["value"] for k, v in tiny_record["metrics"].items()}
    checks = {c["name"]: c["passed"] for c in tiny_record["checks"]}
    assert checks["row_kernel.3x1000"] and checks["row_kernel.cap_respected"]
    assert m["row_kernel.16384_w8.registers"] > m["row_kernel.4096_w8.registers"]
    assert m["row_kernel.16384_w8.occupancy"] < m["row_kernel.4096_w8.occupancy"]
    assert m["row_kernel.16384_w8_cap128.registers"] <= 128 < m["row_kernel.16384_w8.registers"]
    assert m["row_kernel.16384_w8_cap128.spill_bytes"] > 0 == m["row_kernel.16384_w8.spill_bytes"]
    assert m["row_kernel.16384_w8_cap128.occupancy"] > m["row_kernel.16384_w8.occupancy"]
    assert m["row_kernel.16384_w4.registers"] == 255 and m["row_kernel.16384_w4.spill_bytes"] > 0  # at the limit
    assert m["row_kernel.16384_w32.spill_bytes"] == 0
    assert m["row_kernel.16384_w32.occupancy"] > m["row_kernel.16384_w8.occupancy"]
    table = next(t for t in tiny_record["tables"] if t["name"] == "row_kernel")
    assert [row[3] for row in table["rows"]] == [16, 64, 64, 128, 16]  # values of each live tensor per thread


def test_a_missing_k_mask_is_caught():
    """Without the mask on K, a tile reads past K on a ragged shape and the answer changes."""
    import torch

    if not os.environ.get("TRITON_INTERPRET") and not torch.cuda.is_available():
        pytest.skip("Triton needs a GPU or its interpreter")
    import triton
    import triton.language as tl

    @triton.jit
    def no_k_mask(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, BLOCK: tl.constexpr):
        offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        offs_k = tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK)):
            kk = k * BLOCK + offs_k
            a = tl.load(a_ptr + offs_m[:, None] * stride_a + kk[None, :], mask=offs_m[:, None] < M, other=0.0)
            b = tl.load(b_ptr + kk[:, None] * stride_b + offs_n[None, :], mask=offs_n[None, :] < N, other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    m, n, k = 16, 16, 24  # K is not a multiple of the block: the second step reads 8 columns past K
    a_storage, b_storage = torch.randn(m, k + 8), torch.randn(k + 8, n)
    a, b = a_storage[:, :k], b_storage[:k]  # views: what lies past K is other (random) data
    c = torch.empty(m, n)
    no_k_mask[(1, 1)](a_storage, b_storage, c, m, n, k, a_storage.stride(0), b_storage.stride(0), BLOCK=16)
    assert not torch.allclose(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4)
