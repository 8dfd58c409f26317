"""Grader: symmetric per-channel INT8 quantization (range, scales, error bound, zero and outlier channels)."""

from __future__ import annotations

# bound here, at import: in the solution's process nothing under exercises/ can be imported later (_isolate.seal)
from exercises._grading import describe, load_solution, speed_outputs, speed_verdict, value
from exercises._isolate import run_solution

TITLE = "Per-channel INT8 quantizer"
TOPIC = "quantization"
SUMMARY = "Symmetric per-channel INT8: scales, the [-127, 127] range, round-to-nearest error bound, zero channels, NaN refused."
SPEED_LIMIT = 10.0  # at most 10x the reference solution on the same weight


def grade(path, g) -> None:
    import torch

    from exercises import folder

    dev = g.device
    gen = torch.Generator().manual_seed(5 + g.seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dev)

    checks = []  # (check, inputs, judge): the solution sees the inputs only in its own process

    def quant_case(name, w, axis=0):
        def judge(result):
            q, scale = result["q"], result["scale"]
            ax = axis % w.ndim
            C = w.shape[ax]
            if q.dtype != torch.int8 or tuple(q.shape) != tuple(w.shape):
                return False, f"q is {q.dtype} {tuple(q.shape)}, expected torch.int8 {tuple(w.shape)}"
            if scale.dtype != torch.float32 or tuple(scale.shape) != (C,):
                return False, f"scale is {scale.dtype} {tuple(scale.shape)}, expected torch.float32 ({C},)"
            if q.numel() and int(q.min()) < -127:
                return False, f"a code is {int(q.min())}: the symmetric range is [-127, 127], never -128"
            if not (torch.isfinite(scale).all() and (scale > 0).all()):
                return False, "a scale is zero, negative, NaN or inf (an all-zero channel gets scale 1)"
            wf = w.float().movedim(ax, 0).reshape(C, -1) if w.numel() else w.float().new_zeros(C, 0)
            amax = wf.abs().amax(dim=1) if wf.shape[1] else wf.new_zeros(C)
            want = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
            if not torch.allclose(scale, want, rtol=1e-6, atol=0):
                c = int(((scale - want).abs() / want).argmax())
                return False, f"channel {c} has scale {float(scale[c]):.6g}, expected max|w|/127 = {float(want[c]):.6g}"
            deq = value(result["deq"])  # dequantize's result, or what it raised
            if deq.dtype != torch.float32 or tuple(deq.shape) != tuple(w.shape):
                return False, f"dequantize gave {deq.dtype} {tuple(deq.shape)}, expected torch.float32 {tuple(w.shape)}"
            if not w.numel():
                return True, "empty tensors with the right shapes"
            qf = q.movedim(ax, 0).reshape(C, -1)
            live = amax > 0
            peaks = qf.abs().amax(dim=1)
            if (peaks[live] != 127).any():
                c = int(torch.nonzero(live & (peaks != 127))[0])
                return False, f"channel {c}'s largest |code| is {int(peaks[c])}: its max |w| must map to +-127"
            if (qf[~live] != 0).any():
                return False, "an all-zero channel has nonzero codes"
            err = (deq.movedim(ax, 0).reshape(C, -1) - wf).abs()
            bound = (want / 2 * (1 + 1e-5)).unsqueeze(1)
            if (err > bound).any():
                c = int((err / bound).amax(dim=1).argmax())
                return False, (f"channel {c}: |w - dequantize(quantize(w))| reaches {float(err[c].max()):.3g}, over "
                               f"scale/2 = {float(want[c]) / 2:.3g} (round to nearest)")
            worst = float((err / bound).max())
            return True, f"codes in range, scales max|w|/127, error <= {worst:.2f} x scale/2"
        checks.append((name, {"kind": "quantize", "w": w, "axis": axis}, judge))

    quant_case("random 64x48 weight, axis 0 (one scale per output row)", rand(64, 48))
    quant_case("axis 1 (one scale per column)", rand(16, 40), axis=1)
    quant_case("a 4-D conv weight 8x3x3x3, axis 0 (scale over each filter's 27 values)", rand(8, 3, 3, 3))
    quant_case("a 1-D tensor (each element its own channel)", rand(9))
    zero = rand(6, 10)
    zero[2] = 0.0
    quant_case("an all-zero channel: scale 1, codes 0, no NaN", zero)
    outlier = rand(8, 32)
    outlier[0, 5] = 1e4
    quant_case("an outlier (1e4) in channel 0 must not coarsen the other channels", outlier)
    quant_case("a channel whose largest magnitude is negative maps it to -127, not -128",
               torch.tensor([[-1.0, 0.5, 0.25], [0.3, -0.9, 0.6]], device=dev))
    steps = torch.tensor([[0.0, 0.5, 1.49, 2.51, 127.0], [-3.5, -126.6, 1.5, 0.2, -127.0]], device=dev)
    quant_case("values near half steps (round to nearest, not toward zero)", steps)
    quant_case("bfloat16 input (scales and codes from its float32 value)", rand(12, 20).bfloat16())
    quant_case("an empty weight 0x8", rand(0, 8))

    def refuses(name, bad):
        checks.append((name, {"kind": "refuse", "w": bad},
                       lambda refused: (True, "raised ValueError") if refused is True else
                       (False, "quantized a tensor holding NaN or inf without raising ValueError")))
    w = rand(4, 6)
    w[1, 2] = float("nan")
    refuses("NaN in the weight is refused (ValueError)", w)
    w = rand(4, 6)
    w[3, 0] = float("inf")
    refuses("inf in the weight is refused (ValueError)", w)

    # the baseline is the reference solution, timed beside the attempt in the attempt's process (after every
    # correctness output is in): the times are that process's word, the verdicts above are not
    checks.append((f"speed: an 8192x64 weight, at most {SPEED_LIMIT:g}x the reference solution",
                   {"kind": "speed", "w": rand(8192, 64), "reference": str(folder("int8_quantizer") / "solution.py")},
                   lambda times: speed_verdict(times, "the reference solution", SPEED_LIMIT)))

    results = run_solution("int8_quantizer", path, g, [inputs for _, inputs, _ in checks])
    for (name, _, judge), result in zip(checks, results):
        g.run(name, lambda judge=judge, result=result: judge(value(result)))


def outputs(mod, job: dict, device: str):
    """In the solution's own process (exercises/_isolate.py): what the solution returns, no verdict."""
    w = job["w"]
    if job["kind"] == "quantize":
        q, scale = mod.quantize_per_channel(w, job["axis"])
        try:
            deq = {"value": mod.dequantize_per_channel(q, scale, job["axis"])}
        except Exception as e:
            deq = {"raised": describe(e)}
        return {"q": q, "scale": scale, "deq": deq}
    if job["kind"] == "refuse":
        try:
            mod.quantize_per_channel(w, 0)
        except ValueError:
            return True
        return False
    ref = load_solution(job["reference"])
    return speed_outputs(lambda: mod.quantize_per_channel(w, 0), lambda: ref.quantize_per_channel(w, 0), device,
                         SPEED_LIMIT)
