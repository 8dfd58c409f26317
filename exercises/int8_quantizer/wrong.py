"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'asymmetric_range': (
        'divides by 128 and clamps to [-128, 127], the asymmetric int8 range.',
        [
            ('''\
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))  # an all-zero channel: scale 1, codes 0
    q = torch.round(wf / _along(scale, w.ndim, axis)).clamp(-127, 127).to(torch.int8)
''',
             '''\
    scale = torch.where(amax > 0, amax / 128.0, torch.ones_like(amax))
    q = torch.round(wf / _along(scale, w.ndim, axis)).clamp(-128, 127).to(torch.int8)
'''),
        ],
    ),
    'hides_nan': (
        'no check for NaN or inf; they turn into silent garbage codes.',
        [
            ('''\
    if not torch.isfinite(w).all():
        raise ValueError("w holds NaN or inf; refusing to quantize it")
''',
             '''\
'''),
        ],
    ),
    'truncates': (
        'truncates toward zero instead of rounding, so the error reaches a whole scale step.',
        [
            ('''\
    q = torch.round(wf / _along(scale, w.ndim, axis)).clamp(-127, 127).to(torch.int8)
''',
             '''\
    q = (wf / _along(scale, w.ndim, axis)).clamp(-127, 127).to(torch.int8)
'''),
        ],
    ),
    'zero_channel': (
        'no guard for an all-zero channel: scale 0, then 0/0 = NaN codes.',
        [
            ('''\
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))  # an all-zero channel: scale 1, codes 0
''',
             '''\
    scale = amax / 127.0
'''),
        ],
    ),
}
