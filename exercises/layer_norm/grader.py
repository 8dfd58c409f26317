"""Grader: LayerNorm forward returning (y, mean, rstd)."""

from __future__ import annotations

TITLE = "LayerNorm forward with saved statistics"
TOPIC = "kernel-fusion"
SUMMARY = "LayerNorm over the last dimension returning (y, mean, rstd): stable variance, eps in the right place, any dtype."
SPEED_LIMIT = 30.0  # at most 30x torch.nn.functional.layer_norm (one fused kernel) on the same input


def grade(path, g) -> None:
    import torch
    import torch.nn.functional as F

    from exercises._grading import close, load_solution, speed_check

    mod = load_solution(path)
    dev = g.device
    gen = torch.Generator().manual_seed(1)

    def rand(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(dev)

    def case(x, atol=1e-5, rtol=1e-5, eps=1e-5, stats_rtol=1e-5):
        def fn():
            n = x.shape[-1]
            w, b = rand(n).to(x.dtype) + 1.0, rand(n).to(x.dtype)
            before = x.clone()
            out = mod.layer_norm(x, w, b, eps)
            if not (isinstance(out, tuple) and len(out) == 3):
                return False, "layer_norm must return a tuple (y, mean, rstd)"
            y, mean, rstd = out
            if not torch.equal(torch.nan_to_num(x.float()), torch.nan_to_num(before.float())):
                return False, "the input was modified"
            xf = x.double()
            var, mu = torch.var_mean(xf, dim=-1, correction=0)
            ref_y = F.layer_norm(xf, (n,), w.double(), b.double(), eps).to(x.dtype)
            ref_rstd = torch.rsqrt(var + eps).float()
            checks = [close(mean, mu.float(), atol=1e-5, rtol=stats_rtol, what="mean"),
                      close(rstd, ref_rstd, atol=0.0, rtol=stats_rtol, what="rstd"),
                      close(y, ref_y, atol=atol, rtol=rtol, what="y")]
            bad = [why for ok, why in checks if not ok]
            return (not bad), ("; ".join(bad) if bad else checks[2][1])
        return fn

    g.run("random 16x1000", case(rand(16, 1000)))
    g.run("3-D input 2x3x64 (normalize the last dimension only)", case(rand(2, 3, 64)))
    g.run("width 1 (variance 0: y = bias, rstd = 1/sqrt(eps))", case(rand(5, 1)))
    g.run("width 4 (N vs N-1 matters most for short rows)", case(rand(8, 4)))
    g.run("large mean 1e4 + N(0,1) noise (a one-pass E[x^2]-E[x]^2 cancels)", case(rand(8, 512) + 1e4, atol=0.02, rtol=1e-3,
                                                                                  stats_rtol=1e-3))
    g.run("constant rows (variance exactly 0)", case(torch.full((4, 33), 3.0, device=dev)))
    g.run("small variance rows, std 1e-3 (eps 1e-5 must sit inside the square root)", case(rand(6, 256, scale=1e-3),
                                                                                         atol=1e-4, rtol=1e-4))
    g.run("bfloat16 input (statistics in float32, y in bfloat16)", case(rand(8, 300, dtype=torch.bfloat16), atol=0.05,
                                                                      rtol=0.02, stats_rtol=1e-4))
    nan_row = rand(5, 40)
    nan_row[2, 7] = float("nan")
    g.run("a NaN in one row stays in that row", case(nan_row))
    g.run("empty batch 0x32", case(rand(0, 32)))

    x = rand(512, 256)
    w, b = rand(256), rand(256)
    speed_check(g, f"speed: 512x256 float32, at most {SPEED_LIMIT:g}x F.layer_norm",
                lambda: mod.layer_norm(x, w, b, 1e-5), lambda: F.layer_norm(x, (256,), w, b, 1e-5),
                "torch.nn.functional.layer_norm", SPEED_LIMIT)
