"""Grader: column- and row-parallel linear layers on 2 and 4 gloo ranks, forward and backward."""

from __future__ import annotations

# bound here, at import: in a rank nothing under exercises/ can be imported later (_isolate.seal)
from exercises._dist import report, result, run_jobs
from exercises._grading import close, describe, load_solution

TITLE = "Column- and row-parallel linear layers"
TOPIC = "parallelism"
SUMMARY = "Megatron-style tensor-parallel layers: shard the weight, match the unsharded layer forward and backward."
DISTRIBUTED = True
TIME_LIMIT_S = 240.0  # four ranks each import PyTorch on a shared CPU; a deadlocked send fails after 45 s


def grade(path, g) -> None:
    print("  (starting 4 CPU ranks with gloo; the first start imports PyTorch in each, a few seconds)", flush=True)
    report(g, run_jobs([("tensor_parallel_linear", str(path))], deadline_s=g.time_limit_s, seed=g.seed)[0])


D_IN, HIDDEN, D_OUT = 8, 16, 12  # hidden and d_in divisible by 2 and 4
CHECKS = ("forward: column (no gather) -> GELU -> row equals the unsharded MLP",
          "backward: x.grad on every rank and each shard's weight and bias gradients",
          "each rank stores only its shard of each weight",
          "column with gather_output=True: full output in the right order, and its backward",
          "row with input_is_parallel=False: takes its slice, and x.grad comes back whole",
          "bias=None works in both layers",
          "a size not divisible by the world size raises ValueError")


def full_inputs(seed: int):
    """The full weights, input and upstream gradient (loss = (y * g_out).sum()): the same on every rank and in
    the judge, drawn from the seed."""
    import torch

    gen = torch.Generator().manual_seed(7 + seed)
    w1, b1 = torch.randn(HIDDEN, D_IN, generator=gen), torch.randn(HIDDEN, generator=gen)
    w2, b2 = torch.randn(D_OUT, HIDDEN, generator=gen), torch.randn(D_OUT, generator=gen)
    x0 = torch.randn(3, 5, D_IN, generator=gen)
    g_out = torch.randn(3, 5, D_OUT, generator=gen)
    gy = torch.randn(3, 5, HIDDEN, generator=torch.Generator().manual_seed(8 + seed))
    h = torch.randn(3, HIDDEN, generator=torch.Generator().manual_seed(9 + seed))
    return w1, b1, w2, b2, x0, g_out, gy, h


def rank_outputs(path, rank: int, world: int, seed: int, run) -> None:
    """Runs on every rank, in the rank's process, with the same full weights and inputs: what the layers return
    and the gradients they leave, check by check in CHECKS' order. No verdict: see ``judge``."""
    import torch
    import torch.nn.functional as F

    mod = load_solution(path)
    w1, b1, w2, b2, x0, g_out, gy, h = full_inputs(seed)

    def mlp_forward():
        col = mod.ColumnParallelLinear(w1, b1, gather_output=False)
        row = mod.RowParallelLinear(w2, b2, input_is_parallel=True)
        return {"y": row(F.gelu(col(x0)))}
    run(CHECKS[0], mlp_forward)

    def mlp_backward():
        col = mod.ColumnParallelLinear(w1, b1, gather_output=False)
        row = mod.RowParallelLinear(w2, b2, input_is_parallel=True)
        x = x0.clone().requires_grad_()
        (row(F.gelu(col(x))) * g_out).sum().backward()
        return {"x.grad": x.grad, "column weight.grad": col.weight.grad, "column bias.grad": col.bias.grad,
                "row weight.grad": row.weight.grad, "row bias.grad": row.bias.grad}
    run(CHECKS[1], mlp_backward)

    def shards_only():
        col = mod.ColumnParallelLinear(w1, b1)
        row = mod.RowParallelLinear(w2, b2)
        params = {id(p) for p in list(col.parameters()) + list(row.parameters())}
        return {"registered": id(col.weight) in params and id(row.weight) in params,
                "shapes": (tuple(col.weight.shape), tuple(row.weight.shape))}
    run(CHECKS[2], shards_only)

    def gathered():
        col = mod.ColumnParallelLinear(w1, b1, gather_output=True)
        x = x0.clone().requires_grad_()
        y = col(x)
        (y * gy).sum().backward()
        return {"y": y, "x.grad": x.grad}
    run(CHECKS[3], gathered)

    def full_input():
        row = mod.RowParallelLinear(w2, b2, input_is_parallel=False)
        x = h.clone().requires_grad_()
        y = row(x)
        (y * 2.0).sum().backward()
        return {"y": y, "x.grad": x.grad}
    run(CHECKS[4], full_input)

    def no_bias():
        col = mod.ColumnParallelLinear(w1, None, gather_output=True)
        row = mod.RowParallelLinear(w2, None, input_is_parallel=False)
        return {"y": row(col(x0))}
    run(CHECKS[5], no_bias)

    def refuses():
        odd = 2 * world + 1
        accepted = []
        for cls, w in ((mod.ColumnParallelLinear, torch.randn(odd, D_IN)),
                       (mod.RowParallelLinear, torch.randn(D_OUT, odd))):
            try:
                cls(w, None)
                accepted.append(cls.__name__)
            except ValueError:
                pass
        return accepted
    run(CHECKS[6], refuses)


def judge(results: dict, rank: int, world: int, seed: int) -> list[tuple[str, bool, str]]:
    """In the grading process: one rank's outputs against the unsharded layers, computed here with autograd."""
    import torch.nn.functional as F

    w1, b1, w2, b2, x0, g_out, gy, h = full_inputs(seed)
    lo, hi = rank * HIDDEN // world, (rank + 1) * HIDDEN // world  # this rank's slice of the hidden features

    def all_close(pairs):
        bad = [why for ok, why in (close(a, b, atol=1e-4, rtol=1e-4, what=what) for what, a, b in pairs) if not ok]
        return (not bad), ("; ".join(bad) if bad else f"{len(pairs)} tensors match the unsharded layer")

    # the unsharded reference, with autograd
    rw1, rb1, rw2, rb2 = (t.clone().requires_grad_() for t in (w1, b1, w2, b2))
    rx = x0.clone().requires_grad_()
    ref_y = F.linear(F.gelu(F.linear(rx, rw1, rb1)), rw2, rb2)
    (ref_y * g_out).sum().backward()

    def mlp_forward(out):
        return all_close([("MLP output", out["y"], ref_y.detach())])

    def mlp_backward(out):
        return all_close([("x.grad", out["x.grad"], rx.grad),
                          ("column weight.grad", out["column weight.grad"], rw1.grad[lo:hi]),
                          ("column bias.grad", out["column bias.grad"], rb1.grad[lo:hi]),
                          ("row weight.grad", out["row weight.grad"], rw2.grad[:, lo:hi]),
                          ("row bias.grad", out["row bias.grad"], rb2.grad)])

    def shards_only(out):
        if out["registered"] is not True:
            return False, "weight must be a registered nn.Parameter of each layer"
        shapes = tuple(tuple(s) for s in out["shapes"])
        want = ((HIDDEN // world, D_IN), (D_OUT, HIDDEN // world))
        return shapes == want, f"weight shards {shapes}, expected {want} (1/{world} of each weight per rank)"

    def gathered(out):
        rx2 = x0.clone().requires_grad_()
        ry = F.linear(rx2, w1, b1)
        (ry * gy).sum().backward()
        return all_close([("gathered output", out["y"], ry.detach()), ("x.grad", out["x.grad"], rx2.grad)])

    def full_input(out):
        rx2 = h.clone().requires_grad_()
        ry = F.linear(rx2, w2, b2)
        (ry * 2.0).sum().backward()
        return all_close([("output", out["y"], ry.detach()), ("x.grad (full, on every rank)", out["x.grad"], rx2.grad)])

    def no_bias(out):
        return all_close([("output", out["y"], F.linear(F.linear(x0, w1), w2))])

    def refuses(accepted):
        odd = 2 * world + 1
        problems = [f"{name} accepted a size {odd} that {world} ranks cannot split evenly" for name in accepted]
        return (not problems), ("; ".join(problems) if problems else "both raised ValueError")

    rows = []
    for name, verdict in zip(CHECKS, (mlp_forward, mlp_backward, shards_only, gathered, full_input, no_bias, refuses)):
        try:
            ok, why = verdict(result(results, name))
        except Exception as e:
            ok, why = False, describe(e)
        rows.append((name, ok, why))
    return rows
