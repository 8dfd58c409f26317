"""What this machine can do, measured in the same run as the demo.

Every bandwidth or FLOP rate a demo reports is also shown as a fraction of these ceilings, so a
reader sees "62% of what this device's memory can move", not a bare GB/s.

- copy_bandwidth: the better of one large device-to-device copy and an in-place pass over one large buffer,
  counting bytes read plus bytes written (see copy_bandwidth for why a CPU needs the second).
- matmul_fp32 / matmul_bf16: one large square matrix product on random data, 2*n^3 FLOPs.

A ceiling is an upper bound, so each measurement reports its best stable sample (``Timing.best_s``,
the timing protocol's guard leaves preempted samples out), and it is measured twice, at the start and
at the end of the run, the better of the two kept (``combine``). On a shared machine the same copy was
seen to move 14 GB/s at one moment and 27 GB/s a minute later; a single sample would let a demo's
kernel "beat" the ceiling. The two must agree within the publication gate's bound
(``records.plausibility.drift_max``: 1.25 on a GPU, 1.6 on a shared CPU, each from a measured A/A): the run measures the closing ceilings again when they do
not (``Run.finish_ceilings``).

A ceiling's call is long and its statistic is the best sample, so it warms up once and takes at least
three samples (a CPU's bf16 matmul takes seconds a call where the chip has no bf16 units).
"""

from __future__ import annotations

import torch

import dataclasses

from demos.harness.timing import Settings, measure

# (copy elements, matmul n) per size preset and device kind
_SIZES = {
    "cpu": {"tiny": (2**20, 256), "small": (2**24, 1024), "full": (2**26, 2048)},
    "cuda": {"tiny": (2**22, 1024), "small": (2**26, 4096), "full": (2**28, 8192)},
}


def _ceiling_settings(settings: Settings, device) -> Settings:
    if device.is_gpu:
        # A GPU's matmul ceiling from one warm-up and three flushed, synced samples of one 8192^3 product read
        # 686 TFLOP/s on an H200 while six demos' bf16 products in the same runs timed up to 1.09x that (cuBLAS
        # at 4096^3: 769): too few calls to reach the sustained clock. Ten warm-ups and twenty samples cost
        # ~60 ms a ceiling.
        return dataclasses.replace(settings, warmup=10, min_repeats=20)
    return dataclasses.replace(settings, warmup=1, min_repeats=3)


# On a CPU the closing ceilings reuse the opening ones' buffers. A copy into freshly allocated 64 MiB buffers
# measured 22 to 35 GB/s depending on the heap's state (which pages back them), and after a demo that allocates
# a lot the closing copy came out 2x slower than the opening one on a quiet machine: the same buffers measure
# the memory, not the allocator. (128 MiB held for the run; a GPU run allocates afresh, its memory is the demo's.)
_kept: dict[tuple, torch.Tensor] = {}


def _buffer(device, key: tuple, make) -> torch.Tensor:
    if device.is_gpu:
        return make()
    if key not in _kept:
        _kept[key] = make()
    return _kept[key]


def copy_bandwidth(device, n_elements: int, settings: Settings) -> dict:
    """The memory ceiling: the better of a copy into another buffer and an in-place pass over one buffer, each
    counted as bytes read + written. On a CPU a store to a line that is not in the cache first reads it
    (write-allocate), so a copy into another buffer moves three bytes for every two it counts, and an in-place
    pass (whose reads bring the lines in) ran 1.8x faster here (47 against 26 GB/s); with the copy alone as the
    yardstick, a fused bias + ReLU measured 1.6x "the ceiling". On a GPU the two agree closely."""
    src = _buffer(device, ("copy src", n_elements), lambda: torch.randn(n_elements, device=device.torch_device))
    dst = _buffer(device, ("copy dst", n_elements), lambda: torch.empty_like(src))
    settings = _ceiling_settings(settings, device)
    copy = measure(lambda: dst.copy_(src), device, settings, where="ceiling copy_bandwidth (copy)")
    in_place = measure(lambda: dst.mul_(1.0), device, settings, where="ceiling copy_bandwidth (in place)")
    moved = 2 * src.numel() * src.element_size()
    best, how = max((moved / copy.best_s / 1e9, "dst.copy_(src)"), (moved / in_place.best_s / 1e9, "dst.mul_(1) in place"))
    return {
        "value": best,
        "unit": "GB/s",
        "how": f"the better of dst.copy_(src) and dst.mul_(1) in place on {src.numel() * src.element_size() / 2**20:.0f} "
               f"MiB, bytes read + written, best stable sample ({how} here)",
    }


def matmul_throughput(device, n: int, dtype: torch.dtype, settings: Settings) -> dict:
    a = _buffer(device, ("matmul a", n, dtype), lambda: torch.randn(n, n, device=device.torch_device, dtype=dtype))
    b = _buffer(device, ("matmul b", n, dtype), lambda: torch.randn(n, n, device=device.torch_device, dtype=dtype))
    where = f"ceiling matmul_{'fp32' if dtype == torch.float32 else 'bf16'} ({n}^3)"
    settings = _ceiling_settings(settings, device)
    if device.is_gpu and dtype == torch.float32:
        # The float32 ceiling is full float32, whatever a demo set before the closing measurement
        # (TF32 would run ~7x faster on the tensor cores and make every float32 fraction meaningless).
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            timing = measure(lambda: a @ b, device, settings, where=where)
        finally:
            torch.set_float32_matmul_precision(previous)
    else:
        timing = measure(lambda: a @ b, device, settings, where=where)
    return {
        "value": 2 * n**3 / timing.best_s / 1e12,
        "unit": "TFLOP/s",
        "dtype": str(dtype).removeprefix("torch."),
        "how": f"{n}x{n} @ {n}x{n} on random data, 2*n^3 FLOPs, best stable sample"
        + (", TF32 off" if dtype == torch.float32 and device.is_gpu else ""),
    }


def measure_ceilings(device, size: str, settings: Settings) -> dict:
    copy_n, matmul_n = _SIZES[device.kind][size]
    # A CPU without bf16 matrix units emulates bf16 at ~1 GFLOP/s: half the size is as compute-bound and takes an
    # eighth of the time (2 s a call at 1024, which the start and the end of every CPU run paid six times over).
    bf16_n = matmul_n // 2 if device.kind == "cpu" else matmul_n
    return {
        "copy_bandwidth": copy_bandwidth(device, copy_n, settings),
        "matmul_fp32": matmul_throughput(device, matmul_n, torch.float32, settings),
        "matmul_bf16": _best_shape(device, bf16_n, torch.bfloat16, settings),
    }


def _best_shape(device, n: int, dtype: torch.dtype, settings: Settings) -> dict:
    """On a GPU the better of two square products, n and n/2: a library's best tile for one shape is not its best
    for every shape (on the H200, cuBLAS ran 4096^3 bf16 faster than the 8192^3 ceiling measured). A CPU's is one."""
    if not device.is_gpu:
        return matmul_throughput(device, n, dtype, settings)
    return max((matmul_throughput(device, m, dtype, settings) for m in (n, n // 2)), key=lambda c: c["value"])


def combine(first: dict, second: dict) -> dict:
    """The better of two measurements of each ceiling, with both samples kept."""
    combined = {}
    for name, a in first.items():
        b = second[name]
        best = a if a["value"] >= b["value"] else b
        combined[name] = {**best, "samples": [a["value"], b["value"]],
                          "how": best["how"] + "; best of a measurement at the start and one at the end of the run"}
    return combined
