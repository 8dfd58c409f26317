"""Grader: column- and row-parallel linear layers on 2 and 4 gloo ranks, forward and backward."""

from __future__ import annotations

TITLE = "Column- and row-parallel linear layers"
TOPIC = "parallelism"
SUMMARY = "Megatron-style tensor-parallel layers: shard the weight, match the unsharded layer forward and backward."
DISTRIBUTED = True


def grade(path, g) -> None:
    from exercises._dist import report, run_jobs

    print("  (starting 4 CPU ranks with gloo; the first start imports PyTorch in each, a few seconds)", flush=True)
    report(g, run_jobs([("tensor_parallel_linear", str(path))])[0])


def rank_checks(path, rank: int, world: int, emit) -> None:
    """Runs on every rank with the same full weights and inputs (same seeds); the same checks in the same order."""
    import contextlib

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from exercises._grading import close, describe, load_solution

    mod = load_solution(path)
    gen = torch.Generator().manual_seed(7)
    d_in, hidden, d_out = 8, 16, 12  # hidden and d_in divisible by 2 and 4
    w1, b1 = torch.randn(hidden, d_in, generator=gen), torch.randn(hidden, generator=gen)
    w2, b2 = torch.randn(d_out, hidden, generator=gen), torch.randn(d_out, generator=gen)
    x0 = torch.randn(3, 5, d_in, generator=gen)
    g_out = torch.randn(3, 5, d_out, generator=gen)  # the upstream gradient: loss = (y * g_out).sum()
    lo, hi = rank * hidden // world, (rank + 1) * hidden // world  # this rank's slice of the hidden features

    def run(name, fn):
        try:
            ok, why = fn()
        except Exception as e:
            ok, why = False, describe(e)
        emit(name, ok, why)
        with contextlib.suppress(Exception):
            dist.barrier()  # line the ranks up again before the next check

    def all_close(pairs):
        bad = [why for ok, why in (close(a, b, atol=1e-4, rtol=1e-4, what=what) for what, a, b in pairs) if not ok]
        return (not bad), ("; ".join(bad) if bad else f"{len(pairs)} tensors match the unsharded layer")

    # the unsharded reference, with autograd
    rw1, rb1, rw2, rb2 = (t.clone().requires_grad_() for t in (w1, b1, w2, b2))
    rx = x0.clone().requires_grad_()
    ref_y = F.linear(F.gelu(F.linear(rx, rw1, rb1)), rw2, rb2)
    (ref_y * g_out).sum().backward()

    def mlp_forward():
        col = mod.ColumnParallelLinear(w1, b1, gather_output=False)
        row = mod.RowParallelLinear(w2, b2, input_is_parallel=True)
        return all_close([("MLP output", row(F.gelu(col(x0))), ref_y.detach())])
    run("forward: column (no gather) -> GELU -> row equals the unsharded MLP", mlp_forward)

    def mlp_backward():
        col = mod.ColumnParallelLinear(w1, b1, gather_output=False)
        row = mod.RowParallelLinear(w2, b2, input_is_parallel=True)
        x = x0.clone().requires_grad_()
        (row(F.gelu(col(x))) * g_out).sum().backward()
        return all_close([("x.grad", x.grad, rx.grad),
                          ("column weight.grad", col.weight.grad, rw1.grad[lo:hi]),
                          ("column bias.grad", col.bias.grad, rb1.grad[lo:hi]),
                          ("row weight.grad", row.weight.grad, rw2.grad[:, lo:hi]),
                          ("row bias.grad", row.bias.grad, rb2.grad)])
    run("backward: x.grad on every rank and each shard's weight and bias gradients", mlp_backward)

    def shards_only():
        col = mod.ColumnParallelLinear(w1, b1)
        row = mod.RowParallelLinear(w2, b2)
        params = {id(p) for p in list(col.parameters()) + list(row.parameters())}
        if id(col.weight) not in params or id(row.weight) not in params:
            return False, "weight must be a registered nn.Parameter of each layer"
        shapes = (tuple(col.weight.shape), tuple(row.weight.shape))
        want = ((hidden // world, d_in), (d_out, hidden // world))
        return shapes == want, f"weight shards {shapes}, expected {want} (1/{world} of each weight per rank)"
    run("each rank stores only its shard of each weight", shards_only)

    def gathered():
        col = mod.ColumnParallelLinear(w1, b1, gather_output=True)
        x = x0.clone().requires_grad_()
        y = col(x)
        rx2 = x0.clone().requires_grad_()
        ry = F.linear(rx2, w1, b1)
        gy = torch.randn(ry.shape, generator=torch.Generator().manual_seed(8))
        (y * gy).sum().backward()
        (ry * gy).sum().backward()
        return all_close([("gathered output", y, ry.detach()), ("x.grad", x.grad, rx2.grad)])
    run("column with gather_output=True: full output in the right order, and its backward", gathered)

    def full_input():
        row = mod.RowParallelLinear(w2, b2, input_is_parallel=False)
        h = torch.randn(3, hidden, generator=torch.Generator().manual_seed(9))
        x = h.clone().requires_grad_()
        y = row(x)
        rx2 = h.clone().requires_grad_()
        ry = F.linear(rx2, w2, b2)
        (y * 2.0).sum().backward()
        (ry * 2.0).sum().backward()
        return all_close([("output", y, ry.detach()), ("x.grad (full, on every rank)", x.grad, rx2.grad)])
    run("row with input_is_parallel=False: takes its slice, and x.grad comes back whole", full_input)

    def no_bias():
        col = mod.ColumnParallelLinear(w1, None, gather_output=True)
        row = mod.RowParallelLinear(w2, None, input_is_parallel=False)
        return all_close([("output", row(col(x0)), F.linear(F.linear(x0, w1), w2))])
    run("bias=None works in both layers", no_bias)

    def refuses():
        odd = 2 * world + 1
        problems = []
        for cls, w in ((mod.ColumnParallelLinear, torch.randn(odd, d_in)), (mod.RowParallelLinear, torch.randn(d_out, odd))):
            try:
                cls(w, None)
                problems.append(f"{cls.__name__} accepted a size {odd} that {world} ranks cannot split evenly")
            except ValueError:
                pass
        return (not problems), ("; ".join(problems) if problems else "both raised ValueError")
    run("a size not divisible by the world size raises ValueError", refuses)
