"""The autotune demo at the tiny size: every tile configuration correct under Triton's
interpreter on ragged shapes, nothing timed on CPU; and a kernel with a missing mask is caught."""

from __future__ import annotations

import os

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t3_compiler.autotune",  # the demo must set TRITON_INTERPRET itself
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})


def test_every_configuration_is_checked_on_both_shapes(tiny_record):
    checks = tiny_record["checks"]
    assert len(checks) == 12 * 2
    assert {c["name"].split(".")[0] for c in checks} == {"48x40x72", "16x40x72"}  # both ragged shapes
    assert all(c["max_abs_err"] < 1e-3 for c in checks)


def test_nothing_timed_on_cpu(tiny_record):
    assert {n["variant"] for n in tiny_record["not_run"]} == {"sweep timing", "triton.autotune"}
    assert not tiny_record["metrics"]


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
