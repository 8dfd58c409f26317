"""Grader: fused softmax in Triton (Triton interpreter on a CPU, a real kernel on a GPU)."""

from __future__ import annotations

# bound here, at import: in the solution's process nothing under exercises/ can be imported later (_isolate.seal)
from exercises._grading import close, speed_outputs, speed_verdict, value
from exercises._isolate import run_solution

TITLE = "Fused softmax kernel (Triton)"
TOPIC = "kernel-fusion"
SUMMARY = "Row-wise softmax in one Triton kernel: one read, one write, numerically stable, any width."
SPEED_LIMIT = 3.0  # the attempt may take at most 3x torch.softmax's time (GPU only)


def grade(path, g) -> None:
    import torch

    dev = g.device
    gen = torch.Generator().manual_seed(0 + g.seed)

    def rand(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(dev)

    checks = []  # (check, inputs, tolerances): the solution sees the inputs only in its own process

    def case(name, *xs, atol=1e-6, rtol=1e-5):
        checks.append((name, {"xs": list(xs)}, (atol, rtol)))

    case("random 8x128 (width a power of two)", rand(8, 128))
    case("random 13x1000 (width not a power of two: padding lanes must not count)", rand(13, 1000))
    case("width 1 and width 3 (tiny rows)", rand(4, 1), rand(5, 3))
    case("one row 1x4097 (a block wider than the row)", rand(1, 4097))
    wide = rand(9, 300)
    case("strided rows: x[:, :77] of a 9x300 tensor (row stride 300, not 77)", wide[:, :77])
    case("large values (rows around 1e4: subtract the max before exp)", rand(6, 50, scale=3.0) + 1e4,
         atol=1e-6, rtol=1e-4)
    case("spread-out values (std 50: most entries underflow to 0)", rand(6, 50, scale=50.0))
    masked = rand(5, 40)
    masked[:, ::3] = float("-inf")
    case("-inf entries (masked positions get exactly 0)", masked)
    allmasked = rand(4, 24)
    allmasked[2] = float("-inf")
    case("a row of all -inf gives NaN in that row only (torch.softmax's policy)", allmasked)
    case("float16 input (accumulate in float32, return float16)", rand(7, 200, dtype=torch.float16),
         atol=1e-3, rtol=1e-3)
    case("empty input 0x16", rand(0, 16))
    jobs = [inputs for _, inputs, _ in checks]
    if dev != "cpu":
        jobs.append({"speed": True, "x": rand(4096, 1024)})

    results = run_solution("fused_softmax", path, g, jobs)

    def against_torch(x, y, x_after, atol, rtol):
        if not torch.equal(torch.nan_to_num(x_after, 1.0), torch.nan_to_num(x, 1.0)):
            return False, "the input was modified (softmax must not write into x)"
        ref = torch.softmax(x.float(), dim=-1).to(x.dtype)
        return close(y, ref, atol=atol, rtol=rtol)

    def verdict(inputs, result, atol, rtol):
        def fn():
            outs = [against_torch(x, y, x_after, atol, rtol) for x, (y, x_after) in zip(inputs["xs"], value(result))]
            return all(ok for ok, _ in outs), "; ".join(why for _, why in outs)
        return fn

    for (name, inputs, tolerances), result in zip(checks, results):
        g.run(name, verdict(inputs, result, *tolerances))
    if dev == "cpu":
        g.skip("speed vs torch.softmax", "the Triton interpreter checks correctness only; run on a GPU to time it")
    else:
        g.run(f"speed: 4096x1024 float32, at most {SPEED_LIMIT:g}x torch.softmax",
              lambda: speed_verdict(value(results[-1]), "torch.softmax", SPEED_LIMIT))


def outputs(mod, job: dict, device: str):
    """In the solution's own process (exercises/_isolate.py): what the solution returns, no verdict."""
    import torch

    if job.get("speed"):
        x = job["x"]
        return speed_outputs(lambda: mod.softmax(x), lambda: torch.softmax(x, dim=-1), device, SPEED_LIMIT)
    return [(mod.softmax(x), x) for x in job["xs"]]  # each x as the call left it: softmax must not write into it
