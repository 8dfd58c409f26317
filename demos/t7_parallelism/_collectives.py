"""The collectives that scale_model.py measures: seeded inputs every process can recompute, what each rank
must hold afterwards (float64), the ways to call each collective (single-tensor APIs first, list APIs
where a backend lacks them), and one rank's check-then-time work."""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from demos.t7_parallelism._dist import rank_timer

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def rank_input(rank: int, world: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * world + rank)
    return torch.randn(n, generator=g)


def expected_output(kind: str, rank: int, world: int, n: int) -> torch.Tensor:
    """What ``rank`` must hold after the collective, in float64, from every rank's seeded input."""
    inputs = [rank_input(r, world, n).double() for r in range(world)]
    chunk = n // world
    if kind == "all_reduce":
        return sum(inputs)
    if kind == "all_gather":
        return torch.cat([x[:chunk] for x in inputs])
    if kind == "reduce_scatter":
        return sum(inputs)[rank * chunk:(rank + 1) * chunk]
    return torch.cat([x[rank * chunk:(rank + 1) * chunk] for x in inputs])  # all_to_all


def collective_ops(kind: str, x: torch.Tensor, world: int) -> list:
    """The ways to run ``kind`` on x's buffers, preferred first: (API name, no-argument callable, output).
    all_gather and reduce_scatter use the single-tensor APIs; a gloo build without them gets the
    list APIs (the same communication)."""
    chunk = x.numel() // world
    if kind == "all_reduce":
        out = x.clone()
        return [("all_reduce", lambda: dist.all_reduce(out), out)]
    if kind == "all_to_all":
        out = torch.empty_like(x)
        return [("all_to_all_single", lambda: dist.all_to_all_single(out, x), out)]
    if kind == "all_gather":
        out, part = torch.empty_like(x), x[:chunk].clone()
        pieces = list(out.chunk(world))  # views into out
        return [("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(out, part), out),
                ("all_gather (list API)", lambda: dist.all_gather(pieces, part), out)]
    out, pieces = torch.empty(chunk, dtype=x.dtype, device=x.device), list(x.chunk(world))  # reduce_scatter
    return [("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(out, x), out),
            ("reduce_scatter (list API)", lambda: dist.reduce_scatter(out, pieces), out)]


def first_supported(kind: str, x: torch.Tensor, world: int):
    """Run the first API this backend supports once: (API name, callable, output), or None if none is.
    An unsupported API raises on every rank alike, before any communication."""
    for api, op, out in collective_ops(kind, x, world):
        try:
            op()
        except (RuntimeError, NotImplementedError, AttributeError):
            continue
        return api, op, out
    return None


def repeats_for(n_bytes: int, sizes: dict) -> int:
    return next(r for limit, r in sorted(sizes["repeats"].items()) if n_bytes <= limit)


def rank_worker(rank: int, world: int, device_type: str, sizes: dict):
    """One rank: check every collective on seeded inputs (raises on a wrong result), then time each one at
    every message size: two warm-up calls, then repeats, round-robin over the sizes, each after a
    barrier and timed on this rank by the harness's Device (``time_calls``: host clock with a device
    sync on a CPU, CUDA events on a GPU)."""
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch >= 2.13 renames the single-tensor APIs
    device = torch.device(device_type)
    timer = rank_timer(device)
    result = {"checked": {}, "apis": {}, "times": {}}
    n_check = sizes["check_elements"]
    for kind in COLLECTIVES:  # 1. correctness, before any timing: a wrong result raises here
        x = rank_input(rank, world, n_check).to(device)
        found = first_supported(kind, x, world)
        result["apis"][kind] = found and found[0]
        if found is None:
            continue
        out = found[2]
        expected = expected_output(kind, rank, world, n_check)
        err = (out.double().cpu() - expected).abs().max().item()
        if not err <= 1e-5 + 1e-5 * expected.abs().max().item():
            raise AssertionError(f"rank {rank}/{world}: {kind} result wrong, max |err| {err:.2e}")
        result["checked"][kind] = out.cpu()
    for kind in COLLECTIVES:  # 2. timing
        if result["apis"][kind] is None:
            continue
        ops = {}
        for n_bytes in sizes["bytes"]:
            x = torch.randn(n_bytes // 4, device=device)
            ops[n_bytes] = next(op for api, op, _ in collective_ops(kind, x, world) if api == result["apis"][kind])
            ops[n_bytes]()  # warm-up: two calls
            ops[n_bytes]()
            result["times"][(kind, n_bytes)] = []
        for repeat in range(max(repeats_for(n, sizes) for n in sizes["bytes"])):
            for n_bytes, op in ops.items():  # round-robin over the sizes
                if repeat < repeats_for(n_bytes, sizes):
                    dist.barrier()
                    result["times"][(kind, n_bytes)] += timer.time_calls(op, 1, flush=False)
    return result
