"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'keeps_nan': (
        'NaN is not filtered out (torch.topk and a descending sort rank NaN above everything).',
        [
            ('''\
        where = (chunk >= kth).nonzero().squeeze(1)
''',
             '''\
        where = ((chunk >= kth) | torch.isnan(chunk)).nonzero().squeeze(1)
'''),
        ],
    ),
    'latest_wins_ties': (
        'new candidates go before the old ones, so a later element wins a tie.',
        [
            ('''\
        v = torch.cat([self.values, v])
        i = torch.cat([self.indices, i])
''',
             '''\
        v = torch.cat([v, self.values])
        i = torch.cat([i, self.indices])
'''),
        ],
    ),
    'local_indices': (
        'indices are positions within the chunk, not within the stream.',
        [
            ('''\
        v, i = chunk[where], where + start
''',
             '''\
        v, i = chunk[where], where
'''),
        ],
    ),
}
