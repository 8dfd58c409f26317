"""Grader: LayerNorm forward returning (y, mean, rstd)."""

from __future__ import annotations

# bound here, at import: in the solution's process nothing under exercises/ can be imported later (_isolate.seal)
from exercises._grading import close, speed_outputs, speed_verdict, value
from exercises._isolate import run_solution

TITLE = "LayerNorm forward with saved statistics"
TOPIC = "kernel-fusion"
SUMMARY = "LayerNorm over the last dimension returning (y, mean, rstd): stable variance, eps in the right place, any dtype."
SPEED_LIMIT = 30.0  # at most 30x torch.nn.functional.layer_norm (one fused kernel) on the same input


def grade(path, g) -> None:
    import torch
    import torch.nn.functional as F

    dev = g.device
    gen = torch.Generator().manual_seed(1 + g.seed)

    def rand(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(dev)

    cases = []  # (check, inputs, tolerances): the inputs are drawn here; the solution only sees them in its process

    def case(name, x, atol=1e-5, rtol=1e-5, eps=1e-5, stats_rtol=1e-5):
        n = x.shape[-1]
        w, b = rand(n).to(x.dtype) + 1.0, rand(n).to(x.dtype)
        cases.append((name, {"x": x, "w": w, "b": b, "eps": eps}, (atol, rtol, stats_rtol)))

    case("random 16x1000", rand(16, 1000))
    case("3-D input 2x3x64 (normalize the last dimension only)", rand(2, 3, 64))
    case("width 1 (variance 0: y = bias, rstd = 1/sqrt(eps))", rand(5, 1))
    case("width 4 (N vs N-1 matters most for short rows)", rand(8, 4))
    case("large mean 1e4 + N(0,1) noise (a one-pass E[x^2]-E[x]^2 cancels)", rand(8, 512) + 1e4, atol=0.02, rtol=1e-3,
         stats_rtol=1e-3)
    case("constant rows (variance exactly 0)", torch.full((4, 33), 3.0, device=dev))
    case("small variance rows, std 1e-3 (eps 1e-5 must sit inside the square root)", rand(6, 256, scale=1e-3),
         atol=1e-4, rtol=1e-4)
    case("bfloat16 input (statistics in float32, y in bfloat16)", rand(8, 300, dtype=torch.bfloat16), atol=0.05,
         rtol=0.02, stats_rtol=1e-4)
    nan_row = rand(5, 40)
    nan_row[2, 7] = float("nan")
    case("a NaN in one row stays in that row", nan_row)
    case("empty batch 0x32", rand(0, 32))
    speed = {"speed": True, "x": rand(512, 256), "w": rand(256), "b": rand(256)}

    results = run_solution("layer_norm", path, g, [inputs for _, inputs, _ in cases] + [speed])

    def verdict(inputs, result, atol, rtol, stats_rtol):
        def fn():
            x, w, b, eps = inputs["x"], inputs["w"], inputs["b"], inputs["eps"]
            out = value(result)
            if not (isinstance(out["out"], tuple) and len(out["out"]) == 3):
                return False, "layer_norm must return a tuple (y, mean, rstd)"
            y, mean, rstd = out["out"]
            if not torch.equal(torch.nan_to_num(out["x"].float()), torch.nan_to_num(x.float())):
                return False, "the input was modified"
            n = x.shape[-1]
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

    for (name, inputs, tolerances), result in zip(cases, results):
        g.run(name, verdict(inputs, result, *tolerances))
    g.run(f"speed: 512x256 float32, at most {SPEED_LIMIT:g}x F.layer_norm",
          lambda: speed_verdict(value(results[-1]), "torch.nn.functional.layer_norm", SPEED_LIMIT))


def outputs(mod, job: dict, device: str) -> dict:
    """In the solution's own process (exercises/_isolate.py): what the solution returns, no verdict."""
    import torch.nn.functional as F

    x, w, b = job["x"], job["w"], job["b"]
    if job.get("speed"):
        return speed_outputs(lambda: mod.layer_norm(x, w, b, 1e-5), lambda: F.layer_norm(x, (256,), w, b, 1e-5),
                             device, SPEED_LIMIT)
    out = mod.layer_norm(x, w, b, job["eps"])
    return {"out": out, "x": x}  # x as the call left it: a solution must not write into its input
