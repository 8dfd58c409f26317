"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'eps_outside_sqrt': (
        'eps added outside the square root, 1 / (std + eps); it matters for rows of small variance.',
        [
            ('''\
    centered = xf - mean  # two passes: subtract the mean first, then square (no cancellation)
    var = (centered * centered).mean(dim=-1, keepdim=True)  # biased: divide by N, as LayerNorm does
    rstd = torch.rsqrt(var + eps)  # eps inside the square root
''',
             '''\
    centered = xf - mean
    var = (centered * centered).mean(dim=-1, keepdim=True)
    rstd = 1.0 / (var.sqrt() + eps)
'''),
        ],
    ),
    'one_pass_variance': (
        'variance as E[x^2] - E[x]^2 in float32, which cancels catastrophically when the mean is large.',
        [
            ('''\
    centered = xf - mean  # two passes: subtract the mean first, then square (no cancellation)
    var = (centered * centered).mean(dim=-1, keepdim=True)  # biased: divide by N, as LayerNorm does
    rstd = torch.rsqrt(var + eps)  # eps inside the square root
    y = centered * rstd * weight.float() + bias.float()
''',
             '''\
    var = (xf * xf).mean(dim=-1, keepdim=True) - mean * mean
    rstd = torch.rsqrt(var.clamp_min(0) + eps)
    y = (xf - mean) * rstd * weight.float() + bias.float()
'''),
        ],
    ),
    'unbiased_variance': (
        "the unbiased variance (divide by N - 1, torch.var's default); LayerNorm divides by N.",
        [
            ('''\
    centered = xf - mean  # two passes: subtract the mean first, then square (no cancellation)
    var = (centered * centered).mean(dim=-1, keepdim=True)  # biased: divide by N, as LayerNorm does
    rstd = torch.rsqrt(var + eps)  # eps inside the square root
    y = centered * rstd * weight.float() + bias.float()
''',
             '''\
    var = xf.var(dim=-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    y = (xf - mean) * rstd * weight.float() + bias.float()
'''),
        ],
    ),
}
