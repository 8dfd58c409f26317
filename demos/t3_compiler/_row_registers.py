"""A fused row kernel (add + LayerNorm + GELU: the kernel_fusion demo's hand-written Triton kernel, which it imports
from here) and, run as a child process, ptxas's resource report for it compiled for sm_90, printed as JSON on stdout.

The autotune demo imports the kernel (checked in Triton's interpreter without a GPU, timed on one) and runs this
module by name for the report. A child process, started without TRITON_INTERPRET: where Triton was imported in
interpreter mode, its own library functions (tl.sum's combine function among them) are interpreted ones, and
triton.compile cannot lower them. Compiling needs no GPU: Triton's bundled ptxas runs on any host.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import triton
import triton.language as tl

from demos.t11_gpu._cuda import ptxas_usage


@triton.jit
def add_ln_gelu_row(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, hidden, eps, BLOCK: tl.constexpr):
    # One program per row; the whole row stays in registers from the loads, through the mean and the variance
    # (two reductions), to the GELU and the store: a persistent reduction. BLOCK / (32 x num_warps) values of
    # each live tensor per thread.
    row_start = tl.program_id(0).to(tl.int64) * hidden
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    h = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0).to(tl.float32)
    h += tl.load(r_ptr + row_start + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(h, axis=0) / hidden
    centered = tl.where(mask, h - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    z = centered * rstd * w + b
    y = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    tl.store(y_ptr + row_start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


SIGNATURE = {"x_ptr": "*bf16", "r_ptr": "*bf16", "w_ptr": "*bf16", "b_ptr": "*bf16", "y_ptr": "*bf16",
             "hidden": "i32", "eps": "fp32", "BLOCK": "constexpr"}


def ptxas_report(block: int, num_warps: int, maxnreg: int | None) -> dict:
    """Registers, spill bytes and shared memory of the kernel compiled for sm_90 at one (BLOCK, num_warps, maxnreg);
    maxnreg is Triton's register cap (PTX's .maxnreg), like nvcc's -maxrregcount or CUDA C's __launch_bounds__."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    options = {"num_warps": num_warps} if maxnreg is None else {"num_warps": num_warps, "maxnreg": maxnreg}
    triton.knobs.compilation.always_compile = True  # a kernel from Triton's cache skips ptxas, and its report
    triton.knobs.nvidia.dump_ptxas_log = True  # Triton runs ptxas -v itself; this prints the report
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        kernel = triton.compile(ASTSource(add_ln_gelu_row, SIGNATURE, constexprs={"BLOCK": block}),
                                target=GPUTarget("cuda", 90, 32), options=options)
    return ptxas_usage(log.getvalue())["add_ln_gelu_row"] | {"shared_bytes": kernel.metadata.shared}


if __name__ == "__main__":
    cases = json.loads(sys.argv[1])  # [[block, num_warps, maxnreg or null], ...]
    print(json.dumps([ptxas_report(*case) for case in cases]))
