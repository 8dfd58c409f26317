"""Grader: ring all-reduce from send/recv, on 2 and 4 gloo ranks (spawned processes)."""

from __future__ import annotations

TITLE = "Ring all-reduce from send/recv"
TOPIC = "parallelism"
SUMMARY = "Sum a tensor over ranks with point-to-point messages only: reduce-scatter then all-gather, 2(W-1)/W traffic."
DISTRIBUTED = True


def grade(path, g) -> None:
    from exercises._dist import report, run_jobs

    print("  (starting 4 CPU ranks with gloo; the first start imports PyTorch in each, a few seconds)", flush=True)
    report(g, run_jobs([("ring_all_reduce", str(path))])[0])


def rank_checks(path, rank: int, world: int, emit) -> None:
    """Runs on every rank; the same checks in the same order everywhere; emit(name, passed, why) per check."""
    import math

    import torch
    import torch.distributed as dist

    from exercises._dist import only_point_to_point
    from exercises._grading import close, describe, load_solution

    def inputs(case: int, shape, dtype):
        def one(r):
            gen = torch.Generator().manual_seed(1000 * case + r)
            if dtype.is_floating_point:
                return torch.randn(shape, generator=gen).to(dtype)
            return torch.randint(-10**12, 10**12, shape, generator=gen, dtype=dtype)
        return one(rank), sum(one(r).double() if dtype.is_floating_point else one(r) for r in range(world))

    with only_point_to_point() as sent:
        mod = load_solution(path)
        cases = [("1003 floats (not a multiple of the world size)", (1003,), torch.float32),
                 ("a 2-D 6x7 tensor (shape kept)", (6, 7), torch.float32),
                 ("int64 values near 1e12 (the sum must be exact)", (50,), torch.int64),
                 ("fewer elements than ranks (3)", (3,), torch.float32),
                 ("one element", (1,), torch.float32),
                 ("zero elements", (0,), torch.float32)]
        traffic = {}
        for i, (name, shape, dtype) in enumerate(cases):
            x, want = inputs(i, shape, dtype)
            ptr = x.data_ptr()
            before = sent["elements"]
            try:
                out = mod.ring_all_reduce(x)
                traffic[i] = sent["elements"] - before
                if x.data_ptr() != ptr or (out is not None and out is not x and out.data_ptr() != ptr):
                    ok, why = False, "the result is not in the given tensor (all-reduce works in place)"
                elif dtype.is_floating_point:
                    ok, why = close(x, want.to(dtype), atol=1e-5, rtol=1e-5, what="the summed tensor")
                else:
                    ok = torch.equal(x, want)
                    why = "exact integer sums" if ok else f"{int((x != want).sum())} integer sums differ (not exact)"
            except Exception as e:
                ok, why = False, describe(e)
            emit(name, ok, why)
            with_barrier(dist)
        n = 1003
        limit = 2 * (world - 1) * math.ceil(n / world)
        if 0 in traffic:
            sent_n = traffic[0]
            emit("traffic: about 2(W-1)/W of the tensor sent per rank", sent_n <= limit,
                         f"this rank sent {sent_n} elements for a {n}-element tensor; a ring sends at most {limit} "
                         f"(2 (W-1) chunks of <= {math.ceil(n / world)}); (W-1) whole copies would be {(world - 1) * n}")
        used = sorted(set(sent["collectives"]))
        emit("only send/recv (no collective)", not used,
             "no collective called" if not used else f"called dist.{', dist.'.join(used)}")


def with_barrier(dist) -> None:
    """Line the ranks up between cases, so one case's stray message cannot meet the next case's receive."""
    import contextlib

    with contextlib.suppress(Exception):
        dist.barrier()
