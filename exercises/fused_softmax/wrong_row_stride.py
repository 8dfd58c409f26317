"""Wrong on purpose: assumes rows are packed (row stride = n_cols), so a column slice of a wider tensor reads the wrong elements."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # lanes past the row's end load -inf: they add exp(-inf) = 0 to the sum and never win the max
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)  # the max subtraction keeps exp from overflowing
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D tensor, got shape {tuple(x.shape)}")
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return out
    if x.stride(1) != 1:  # the kernel walks a row with unit stride; rows themselves may be strided
        x = x.contiguous()
    BLOCK = triton.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK=BLOCK)
    return out
