"""The program Nsight Compute profiles in the occupancy demo: the memory-bound stream_scale kernel at
two points of the sweep, a full-occupancy launch (256 threads, no shared memory) and a starved one
(64 threads with 100 KB of dynamic shared memory: two blocks, four warps per SM).
Run by ncu as `python -m demos.t11_gpu._occupancy_target` on a CUDA GPU."""

import numpy as np
import torch

from demos.t11_gpu import _cuda

POINTS = {"full": (256, 0), "starved": (64, 100 * 1024)}  # (threads per block, dynamic smem bytes)

if __name__ == "__main__":
    n = 2**26
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    kern = _cuda.cupy_module(_cuda.KERNELS_CU).get_function("stream_scale")
    kern.max_dynamic_shared_size_bytes = max(s for _, s in POINTS.values())
    for threads, smem in POINTS.values():
        kern(((n + threads - 1) // threads,), (threads,), (_cuda.as_cupy(x), _cuda.as_cupy(y), np.int64(n)),
             shared_mem=smem)
    torch.cuda.synchronize()
