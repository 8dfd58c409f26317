"""The matmul + bias + GELU demo at the tiny size: every version equals float64 (the Triton kernel with
its fused epilogue in the interpreter, on a ragged shape), the Triton timing is recorded as not run on
a CPU, Inductor keeps the matmul a library call, and a kernel whose epilogue drops the bias is caught."""

from __future__ import annotations

import os

import pytest

from conftest import demo_record

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t3_compiler.matmul_epilogue",
                   env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})


def test_every_version_checked(tiny):
    names = {c["name"] for c in tiny["checks"]}
    assert {"separate", "library_bias", "compiled", "triton_fused.ragged"} <= names
    # float32 on the CPU: every version within float32 rounding of float64, far inside the demo's 1e-4
    assert all(c["max_abs_err"] < 1e-5 for c in tiny["checks"]), tiny["checks"]


def test_triton_timing_not_run_on_cpu(tiny):
    assert [n["variant"] for n in tiny["not_run"]] == ["Triton fused epilogue (timing)"]
    assert "triton_fused.speedup" not in tiny["metrics"]


def test_metrics_are_consistent(tiny):
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    assert 0 < m["separate.epilogue_share"] < 1
    assert m["compiled.speedup"] > 0 and m["library_bias.speedup"] > 0
    plan = {row[0]: row[1] for row in next(t for t in tiny["tables"] if t["name"] == "inductor_plan")["rows"]}
    assert "mm" in plan["library (extern) kernels"]  # addmm or mm: the matmul stays a library call
    assert plan["generated kernels"] >= 1  # the GELU (and bias, if not in the library call) is generated
    assert "extern_kernels" in tiny["artifacts"]["inductor_wrapper_call"]


def test_an_epilogue_without_the_bias_is_caught():
    """The same tiling with the bias left out of the epilogue gives a different answer."""
    import torch

    if not os.environ.get("TRITON_INTERPRET") and not torch.cuda.is_available():
        pytest.skip("Triton needs a GPU or its interpreter")
    import torch.nn.functional as F
    import triton
    import triton.language as tl

    @triton.jit
    def no_bias(a_ptr, w_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
        offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        offs_k = tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for k0 in range(0, tl.cdiv(K, BLOCK)):
            kk = k0 * BLOCK + offs_k
            a = tl.load(a_ptr + offs_m[:, None] * K + kk[None, :], mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
            w = tl.load(w_ptr + kk[:, None] * N + offs_n[None, :], mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            acc += tl.dot(a, w)
        out = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], out, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    a, w, b = torch.randn(20, 24), torch.randn(24, 40) / 5, torch.randn(40)
    c = torch.empty(20, 40)
    no_bias[(2, 3)](a, w, c, 20, 40, 24, BLOCK=16)
    assert not torch.allclose(c.double(), F.gelu(a.double() @ w.double() + b.double()), rtol=1e-4, atol=1e-4)
