"""Grader: fused softmax in Triton (Triton interpreter on a CPU, a real kernel on a GPU)."""

from __future__ import annotations

TITLE = "Fused softmax kernel (Triton)"
TOPIC = "kernel-fusion"
SUMMARY = "Row-wise softmax in one Triton kernel: one read, one write, numerically stable, any width."
SPEED_LIMIT = 3.0  # the attempt may take at most 3x torch.softmax's time (GPU only)


def grade(path, g) -> None:
    import torch

    from exercises._grading import close, load_solution, speed_check

    mod = load_solution(path)
    dev = g.device
    gen = torch.Generator().manual_seed(0)

    def rand(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(dev)

    def against_torch(x, atol=1e-6, rtol=1e-5):
        def fn():
            before = x.clone()
            y = mod.softmax(x)
            if not torch.equal(torch.nan_to_num(x, 1.0), torch.nan_to_num(before, 1.0)):
                return False, "the input was modified (softmax must not write into x)"
            ref = torch.softmax(x.float(), dim=-1).to(x.dtype)
            return close(y, ref, atol=atol, rtol=rtol)
        return fn

    g.run("random 8x128 (width a power of two)", against_torch(rand(8, 128)))
    g.run("random 13x1000 (width not a power of two: padding lanes must not count)", against_torch(rand(13, 1000)))
    g.run("width 1 and width 3 (tiny rows)", lambda: _both(against_torch(rand(4, 1)), against_torch(rand(5, 3))))
    g.run("one row 1x4097 (a block wider than the row)", against_torch(rand(1, 4097)))
    wide = rand(9, 300)
    g.run("strided rows: x[:, :77] of a 9x300 tensor (row stride 300, not 77)", against_torch(wide[:, :77]))
    g.run("large values (rows around 1e4: subtract the max before exp)", against_torch(rand(6, 50, scale=3.0) + 1e4,
                                                                                         atol=1e-6, rtol=1e-4))
    big = rand(6, 50, scale=50.0)
    g.run("spread-out values (std 50: most entries underflow to 0)", against_torch(big))
    masked = rand(5, 40)
    masked[:, ::3] = float("-inf")
    g.run("-inf entries (masked positions get exactly 0)", against_torch(masked))
    allmasked = rand(4, 24)
    allmasked[2] = float("-inf")
    g.run("a row of all -inf gives NaN in that row only (torch.softmax's policy)", against_torch(allmasked))
    g.run("float16 input (accumulate in float32, return float16)",
          against_torch(rand(7, 200, dtype=torch.float16), atol=1e-3, rtol=1e-3))
    g.run("empty input 0x16", against_torch(rand(0, 16)))

    if dev == "cpu":
        g.skip("speed vs torch.softmax", "the Triton interpreter checks correctness only; run on a GPU to time it")
    else:
        x = rand(4096, 1024)
        speed_check(g, f"speed: 4096x1024 float32, at most {SPEED_LIMIT:g}x torch.softmax",
                    lambda: mod.softmax(x), lambda: torch.softmax(x, dim=-1), "torch.softmax", SPEED_LIMIT)


def _both(a, b):
    ok_a, why_a = a()
    ok_b, why_b = b()
    return ok_a and ok_b, f"{why_a}; {why_b}"
