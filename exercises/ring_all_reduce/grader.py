"""Grader: ring all-reduce from send/recv, on 2 and 4 gloo ranks (spawned processes)."""

from __future__ import annotations

import math

# bound here, at import: in a rank nothing under exercises/ can be imported later (_isolate.seal)
from exercises._dist import only_point_to_point, report, result, run_jobs
from exercises._grading import close, describe, load_solution

TITLE = "Ring all-reduce from send/recv"
TOPIC = "parallelism"
SUMMARY = "Sum a tensor over ranks with point-to-point messages only: reduce-scatter then all-gather, 2(W-1)/W traffic."
DISTRIBUTED = True
TIME_LIMIT_S = 240.0  # four ranks each import PyTorch on a shared CPU; a deadlocked send fails after 45 s


def grade(path, g) -> None:
    print("  (starting 4 CPU ranks with gloo; the first start imports PyTorch in each, a few seconds)", flush=True)
    report(g, run_jobs([("ring_all_reduce", str(path))], deadline_s=g.time_limit_s, seed=g.seed)[0])


# (check, shape, dtype name): the same cases, in the same order, on every rank and in the judge
CASES = [("1003 floats (not a multiple of the world size)", (1003,), "float32"),
         ("a 2-D 6x7 tensor (shape kept)", (6, 7), "float32"),
         ("int64 values near 1e12 (the sum must be exact)", (50,), "int64"),
         ("fewer elements than ranks (3)", (3,), "float32"),
         ("one element", (1,), "float32"),
         ("zero elements", (0,), "float32")]
COLLECTIVES = "only send/recv (no collective)"


def rank_input(case: int, rank: int, seed: int):
    """Rank ``rank``'s tensor for a case, drawn from the seed: the rank and the judge draw the same."""
    import torch

    _, shape, dtype = CASES[case]
    dtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(1000 * case + rank + seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-10**12, 10**12, shape, generator=gen, dtype=dtype)


def rank_outputs(path, rank: int, world: int, seed: int, run) -> None:
    """Runs on every rank, in the rank's process: each case's tensor after the call, whether the result stayed
    in it, and the elements this rank sent; then the collectives it called. No verdict: see ``judge``."""
    with only_point_to_point() as sent:
        mod = load_solution(path)
        for i, (name, _, _) in enumerate(CASES):
            def case(i=i):
                x = rank_input(i, rank, seed)
                ptr = x.data_ptr()
                before = sent["elements"]
                out = mod.ring_all_reduce(x)
                in_place = not (x.data_ptr() != ptr or (out is not None and out is not x and out.data_ptr() != ptr))
                return {"x": x, "in_place": in_place, "sent": sent["elements"] - before}
            run(name, case)
        run(COLLECTIVES, lambda: sorted(set(sent["collectives"])))


def judge(results: dict, rank: int, world: int, seed: int) -> list[tuple[str, bool, str]]:
    """In the grading process: one rank's outputs against the sums this process computes from the same seeds."""
    import torch

    rows = []
    for i, (name, _, dtype) in enumerate(CASES):
        try:
            out = result(results, name)
            want = sum(rank_input(i, r, seed).double() if dtype == "float32" else rank_input(i, r, seed)
                       for r in range(world))
            x = out["x"]
            if not out["in_place"]:
                ok, why = False, "the result is not in the given tensor (all-reduce works in place)"
            elif dtype == "float32":
                ok, why = close(x, want.to(torch.float32), atol=1e-5, rtol=1e-5, what="the summed tensor")
            else:
                ok = torch.equal(x, want)
                why = "exact integer sums" if ok else f"{int((x != want).sum())} integer sums differ (not exact)"
        except Exception as e:
            ok, why = False, describe(e)
        rows.append((name, ok, why))
    first = results.get(CASES[0][0], {})
    if "value" in first:  # the first case ran: its traffic
        n = 1003
        limit = 2 * (world - 1) * math.ceil(n / world)
        sent_n = int(first["value"]["sent"])
        rows.append(("traffic: about 2(W-1)/W of the tensor sent per rank", sent_n <= limit,
                     f"this rank sent {sent_n} elements for a {n}-element tensor; a ring sends at most {limit} "
                     f"(2 (W-1) chunks of <= {math.ceil(n / world)}); (W-1) whole copies would be {(world - 1) * n}"))
    try:
        used = [str(u) for u in result(results, COLLECTIVES)]
        rows.append((COLLECTIVES, not used,
                     "no collective called" if not used else f"called dist.{', dist.'.join(used)}"))
    except Exception as e:
        rows.append((COLLECTIVES, False, describe(e)))
    return rows
