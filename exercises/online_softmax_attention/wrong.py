"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'causal_diagonal': (
        'the causal mask also hides the diagonal (query i cannot see key i).',
        [
            ('''\
            s = s.masked_fill(cols > rows, -math.inf)
''',
             '''\
            s = s.masked_fill(cols >= rows, -math.inf)
'''),
        ],
    ),
    'nan_on_masked_block': (
        'shifts by the running max even when it is -inf, so a fully masked block makes NaN.',
        [
            ('''\
    shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
''',
             '''\
    shift = m_new
'''),
        ],
    ),
    'no_rescale': (
        'the old sum and accumulator are not rescaled when the running max goes up.',
        [
            ('''\
    l = l * rescale + p.sum(dim=-1)
    acc = acc * rescale.unsqueeze(-1) + p @ v
''',
             '''\
    l = l + p.sum(dim=-1)
    acc = acc + p @ v
'''),
        ],
    ),
    'no_scale': (
        'forgets the 1/sqrt(D) scale of the scores.',
        [
            ('''\
        s = (q.float() @ k[..., start:stop, :].float().transpose(-1, -2)) / math.sqrt(D)
''',
             '''\
        s = (q.float() @ k[..., start:stop, :].float().transpose(-1, -2))
'''),
        ],
    ),
}
