"""The program Nsight Compute profiles in the profiling demo: one large bf16 GELU (an elementwise,
memory-bound kernel) and one large bf16 matmul (compute-bound), each launched a few times.
Run by ncu as `python -m demos.t10_benchmarking._ncu_target` on a CUDA GPU."""

import torch

if __name__ == "__main__":
    x = torch.randn(2**26, device="cuda", dtype=torch.bfloat16)  # 128 MiB
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.nn.functional.gelu(x)
        a @ a
    torch.cuda.synchronize()
