"""Shared plumbing for the T11 demos: the CUDA C++ kernels (kept here as strings, so the source digest
of every demo that uses them covers them), an nvcc driver whose outputs are cached under .cache/ keyed
by a hash of source + flags, a parser for ptxas's resource report, the occupancy calculator formula,
and the GPU loader (CuPy, imported only when a GPU run needs it)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from records.atomic import write_text
from records.paths import CACHE_DIR

NVCC_CACHE = CACHE_DIR / "t11_gpu" / "nvcc"
ARCH = "sm_90"  # the H100's compute capability 9.0

# ------------------------------------------------------------------------------------------------
# The kernels. One translation unit; every entry point is extern "C" so CuPy finds it by name.
KERNELS_CU = r"""
#include <cuda_runtime.h>

// Copy y[q * per + r] = x[r * stride + q] for q < stride, r < per (n = stride * per): stride 1 is a
// plain coalesced copy; stride k sends the 32 lanes of a warp (consecutive r) to 32 addresses k*4
// bytes apart (32 sectors instead of 4). Every element is still read exactly once. q comes from the
// grid's y index, so no thread divides: a per-element 64-bit division costs tens of integer
// instructions and would make the stride-1 copy slower than memory, hiding what is measured.
extern "C" __global__ void copy_strided(const float* __restrict__ x, float* __restrict__ y,
                                        long long per, long long stride) {
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x, q = blockIdx.y;
    if (r < per) y[q * per + r] = x[r * stride + q];
}

// Transpose of a rows x cols matrix. Naive: reads coalesced, writes with a stride of `rows`.
extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out,
                                           int rows, int cols) {
    int c = blockIdx.x * 32 + threadIdx.x;
    for (int r = blockIdx.y * 32 + threadIdx.y; r < min(rows, (int)(blockIdx.y * 32 + 32)); r += 8)
        if (c < cols) out[(long long)c * rows + r] = in[(long long)r * cols + c];
}

// Through a shared-memory tile: both the global read and the global write are coalesced; the
// stride moves into shared memory. With PAD = 0 a column of the tile lives in one bank (a 32-way
// bank conflict on the read-back); PAD = 1 shifts each row by one bank.
template <int PAD>
__device__ void transpose_tiled(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[32][32 + PAD];
    int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8)
        if (c < cols && r + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(long long)(r + j) * cols + c];
    __syncthreads();
    c = blockIdx.y * 32 + threadIdx.x;
    r = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8)
        if (c < rows && r + j < cols) out[(long long)(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
}
extern "C" __global__ void transpose_smem(const float* in, float* out, int rows, int cols) {
    transpose_tiled<0>(in, out, rows, cols);
}
extern "C" __global__ void transpose_smem_padded(const float* in, float* out, int rows, int cols) {
    transpose_tiled<1>(in, out, rows, cols);
}

// Occupancy sweep, memory-bound: a grid-stride scale. The dynamic shared memory it is launched with
// is never used: it only takes space, so the launch's occupancy can be dialled down.
extern "C" __global__ void stream_scale(const float* __restrict__ x, float* __restrict__ y, long long n) {
    extern __shared__ float unused[];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = 2.0f * x[i];
}

// The same with 16-byte loads: each thread moves a float4, so a warp has 4x the bytes in flight per
// load instruction at the same occupancy (n4 = n / 4).
extern "C" __global__ void stream_scale4(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
    extern __shared__ float unused4[];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        float4 v = x[i];
        y[i] = make_float4(2.0f * v.x, 2.0f * v.y, 2.0f * v.z, 2.0f * v.w);
    }
}

// Occupancy sweep, dependent loads: each chain is a pointer chase through a permutation (every load
// needs the previous one's result). A thread walks CHAINS independent chains, so it has up to CHAINS
// loads in flight (instruction-level parallelism) and keeps CHAINS values live in registers.
#define CHAINS 16
extern "C" __global__ void chase(const int* __restrict__ next, int* __restrict__ out, int steps, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int p[CHAINS];
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) p[k] = (t * CHAINS + k * 7919) % n;
    for (int s = 0; s < steps; ++s) {
#pragma unroll
        for (int k = 0; k < CHAINS; ++k) p[k] = next[p[k]];
    }
    int acc = 0;
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) acc ^= p[k];
    out[t] = acc;
}

// Reductions of n floats into one. (a) every thread adds its grid-stride partial to one global
// float with atomicAdd: the order of the adds depends on scheduling, so the bits can differ run to run.
extern "C" __global__ void sum_atomic(const float* __restrict__ x, float* out, long long n) {
    float v = 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        v += x[i];
    atomicAdd(out, v);
}

// (b) a shared-memory tree per block (blockDim.x = 256), one partial per block; a second launch
// with one block reduces the partials. Fixed order: bitwise the same every run.
extern "C" __global__ void sum_tree(const float* __restrict__ x, float* partial, long long n) {
    __shared__ float s[256];
    float v = 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        v += x[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// (c) warp shuffles: each warp sums its 32 values through registers (shfl.sync, no shared memory,
// no __syncthreads), then one warp sums the per-warp results. Also a fixed order.
__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}
extern "C" __global__ void sum_shuffle(const float* __restrict__ x, float* partial, long long n) {
    __shared__ float per_warp[32];
    float v = 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        v += x[i];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) per_warp[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? per_warp[threadIdx.x] : 0.f;
        v = warp_sum(v);
        if (threadIdx.x == 0) partial[blockIdx.x] = v;
    }
}
"""


# ------------------------------------------------------------------------------------------------
def nvcc() -> str | None:
    return shutil.which("nvcc")


def find_tool(name: str) -> str | None:
    """A CUDA tool (ncu, compute-sanitizer) on PATH, or where the toolkit and Nsight Compute install it
    when PATH lacks it (a toolkit's bin/ is often on PATH while compute-sanitizer/ and nsight-compute/
    are not)."""
    found = shutil.which(name)
    if found:
        return found
    roots = [Path(p) for p in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if p]
    if (exe := nvcc()) is not None:
        roots.append(Path(exe).resolve().parent.parent)
    candidates = [root / sub / name for root in roots for sub in ("bin", "compute-sanitizer", "nsight-compute")]
    candidates += sorted(Path("/opt/nvidia/nsight-compute").glob(f"*/{name}"), reverse=True)
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def run_tool(cmd: list[str], timeout_s: float, cwd: Path | None = None):
    """Run a profiler or checker: (CompletedProcess, None), or (None, one line saying why it did not finish).
    A tool that cannot start, or hangs (a profiler on a machine whose driver refuses it can wait for
    ever), must become a 'not run' line in the record, never a crash that loses the run."""
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s), None
    except subprocess.TimeoutExpired:
        return None, f"{Path(cmd[0]).name} did not finish within {timeout_s:.0f} s"
    except OSError as e:
        return None, f"{Path(cmd[0]).name} could not start: {e}"


def tool_error(proc) -> str:
    """The tool's own one-line complaint: its first line that reports an error (not its error summary), else
    its last line."""
    # ncu marks its lines "==ERROR== ...", compute-sanitizer "========= Error: ...": keep "ERROR: ...".
    text = proc.stderr + "\n" + proc.stdout
    lines = [re.sub(r"^(\w+)==\s*", r"\1: ", line.strip(" =")) for line in text.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if any(w in line.lower() for w in ("error", "fail", "not supported"))
              and not line.startswith("ERROR SUMMARY")]
    return (errors[0] if errors else (lines or ["no output"])[-1])[:240]


@dataclass
class Build:
    text: str  # PTX text, or the ptxas report for a cubin
    path: Path
    cached: bool


def compile_cuda(source: str, what: str = "ptx", flags: tuple[str, ...] = ()) -> Build:
    """nvcc source -> PTX (what="ptx") or a cubin with ptxas's -v resource report (what="cubin"),
    cached under .cache/t11_gpu/nvcc keyed by a hash of source, target, flags and nvcc's version."""
    exe = nvcc()
    if exe is None:
        raise FileNotFoundError("nvcc is not on PATH")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    key = hashlib.sha256("\0".join([source, what, ARCH, *flags, version]).encode()).hexdigest()[:20]
    NVCC_CACHE.mkdir(parents=True, exist_ok=True)
    src, out, report = NVCC_CACHE / f"{key}.cu", NVCC_CACHE / f"{key}.{what}", NVCC_CACHE / f"{key}.{what}.log"
    if out.exists() and report.exists():
        return Build(out.read_text() if what == "ptx" else report.read_text(), out, True)
    write_text(src, source)
    cmd = [exe, f"-arch={ARCH}", f"-{what}", "-o", str(out), *flags, str(src)]
    if what == "cubin":
        cmd.insert(1, "-Xptxas=-v")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed: {proc.stderr.strip()[:500]}")
    write_text(report, proc.stderr)
    return Build(out.read_text() if what == "ptx" else proc.stderr, out, False)


_FUNC = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_usage(report: str) -> dict[str, dict]:
    """ptxas -v's report -> {kernel: {registers, smem_bytes, spill_store_bytes, spill_load_bytes}}."""
    usage, current = {}, None
    for line in report.splitlines():
        if m := _FUNC.search(line):
            current = usage.setdefault(m.group(1), {"registers": 0, "smem_bytes": 0, "spill_store_bytes": 0,
                                                    "spill_load_bytes": 0})
        elif current is not None:
            if m := _SPILL.search(line):
                current["spill_store_bytes"], current["spill_load_bytes"] = int(m.group(1)), int(m.group(2))
            if m := _REGS.search(line):
                current["registers"] = int(m.group(1))
            if m := _SMEM.search(line):
                current["smem_bytes"] = int(m.group(1))
    return usage


# ------------------------------------------------------------------------------------------------
# The occupancy calculator, for compute capability 9.0 (H100). Limits from the CUDA C++ Programming
# Guide's table of technical specifications per compute capability; allocation rules (registers per
# warp rounded to 256, warps spread over 4 sub-partitions, shared memory rounded to 128 bytes plus
# 1 KB reserved per block) as in the toolkit's cuda_occupancy.h, which the CUDA occupancy APIs use.
@dataclass(frozen=True)
class SM:
    max_threads: int = 2048
    max_warps: int = 64
    max_blocks: int = 32
    regs: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_unit: int = 256
    sub_partitions: int = 4
    smem: int = 228 * 1024  # per SM, with the largest carveout
    smem_per_block_optin: int = 227 * 1024
    smem_unit: int = 128
    smem_reserved_per_block: int = 1024


SM90 = SM()


def occupancy(threads: int, registers: int, smem_bytes: int = 0, sm: SM = SM90) -> dict:
    """Theoretical occupancy of a launch: resident blocks per SM under each limit, the binding one, and
    active warps / maximum warps. ``smem_bytes`` is static + dynamic shared memory per block."""
    if not 1 <= threads <= 1024:
        raise ValueError(f"a block has 1..1024 threads, not {threads}")
    warps = -(-threads // 32)
    limits = {"warps": sm.max_warps // warps, "blocks": sm.max_blocks}
    regs_per_warp = -(-registers * 32 // sm.reg_unit) * sm.reg_unit
    assumed = regs_per_warp * (-(-warps // sm.sub_partitions) * sm.sub_partitions)
    if registers > sm.max_regs_per_thread or assumed > sm.regs_per_block:
        limits["registers"] = 0
    elif registers > 0:
        limits["registers"] = (sm.regs // sm.sub_partitions // regs_per_warp) * sm.sub_partitions // warps
    smem = -(-(smem_bytes + sm.smem_reserved_per_block) // sm.smem_unit) * sm.smem_unit
    if smem_bytes > sm.smem_per_block_optin:
        limits["shared memory"] = 0
    elif smem_bytes > 0:
        limits["shared memory"] = sm.smem // smem
    blocks = min(limits.values())
    binding = min(limits, key=lambda k: (limits[k], k != "warps"))
    return {"blocks_per_sm": blocks, "active_warps": blocks * warps, "occupancy": blocks * warps / sm.max_warps,
            "limiter": binding, "limits": limits}


# ------------------------------------------------------------------------------------------------
def cupy_module(source: str, options: tuple[str, ...] = ()):
    """The kernels as a CuPy RawModule (GPU runs only; CuPy is imported here, never at import time)."""
    import cupy

    return cupy.RawModule(code=source, options=("-std=c++17", *options), backend="nvcc")


def as_cupy(tensor):
    """A CuPy view of a CUDA torch tensor (no copy)."""
    import cupy

    return cupy.from_dlpack(tensor.detach())
