"""Grader: symmetric per-channel INT8 quantization (range, scales, error bound, zero and outlier channels)."""

from __future__ import annotations

TITLE = "Per-channel INT8 quantizer"
TOPIC = "compression"
SUMMARY = "Symmetric per-channel INT8: scales, the [-127, 127] range, round-to-nearest error bound, zero channels, NaN refused."
SPEED_LIMIT = 10.0  # at most 10x the reference solution on the same weight


def grade(path, g) -> None:
    import torch

    from exercises._grading import load_solution, speed_check

    mod = load_solution(path)
    dev = g.device
    gen = torch.Generator().manual_seed(5)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dev)

    def quant_case(w, axis=0):
        def fn():
            q, scale = mod.quantize_per_channel(w, axis)
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
            deq = mod.dequantize_per_channel(q, scale, axis)
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
        return fn

    g.run("random 64x48 weight, axis 0 (one scale per output row)", quant_case(rand(64, 48)))
    g.run("axis 1 (one scale per column)", quant_case(rand(16, 40), axis=1))
    g.run("a 4-D conv weight 8x3x3x3, axis 0 (scale over each filter's 27 values)", quant_case(rand(8, 3, 3, 3)))
    g.run("a 1-D tensor (each element its own channel)", quant_case(rand(9)))
    zero = rand(6, 10)
    zero[2] = 0.0
    g.run("an all-zero channel: scale 1, codes 0, no NaN", quant_case(zero))
    outlier = rand(8, 32)
    outlier[0, 5] = 1e4
    g.run("an outlier (1e4) in channel 0 must not coarsen the other channels", quant_case(outlier))
    g.run("a channel whose largest magnitude is negative maps it to -127, not -128",
          quant_case(torch.tensor([[-1.0, 0.5, 0.25], [0.3, -0.9, 0.6]], device=dev)))
    steps = torch.tensor([[0.0, 0.5, 1.49, 2.51, 127.0], [-3.5, -126.6, 1.5, 0.2, -127.0]], device=dev)
    g.run("values near half steps (round to nearest, not toward zero)", quant_case(steps))
    g.run("bfloat16 input (scales and codes from its float32 value)", quant_case(rand(12, 20).bfloat16()))
    g.run("an empty weight 0x8", quant_case(rand(0, 8)))

    def refuses(bad):
        def fn():
            try:
                mod.quantize_per_channel(bad, 0)
            except ValueError:
                return True, "raised ValueError"
            return False, "quantized a tensor holding NaN or inf without raising ValueError"
        return fn
    w = rand(4, 6)
    w[1, 2] = float("nan")
    g.run("NaN in the weight is refused (ValueError)", refuses(w))
    w = rand(4, 6)
    w[3, 0] = float("inf")
    g.run("inf in the weight is refused (ValueError)", refuses(w))

    from exercises._grading import load_solution as _load
    from exercises import folder
    ref = _load(folder("int8_quantizer") / "solution.py")
    big = rand(8192, 64)
    speed_check(g, f"speed: an 8192x64 weight, at most {SPEED_LIMIT:g}x the reference solution",
                lambda: mod.quantize_per_channel(big, 0), lambda: ref.quantize_per_channel(big, 0),
                "the reference solution", SPEED_LIMIT)
