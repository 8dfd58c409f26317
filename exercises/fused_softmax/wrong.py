"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'no_max': (
        'no max subtraction, so exp overflows on large inputs.',
        [
            ('''\
    x = x - tl.max(x, axis=0)  # the max subtraction keeps exp from overflowing
''',
             '''\
'''),
        ],
    ),
    'row_stride': (
        'assumes rows are packed (row stride = n_cols), so a column slice of a wider tensor reads the wrong elements.',
        [
            ('''\
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
''',
             '''\
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
'''),
        ],
    ),
    'zero_padding': (
        'padding lanes load 0.0, so they add exp(0 - max) to the sum whenever the width is not a power of two.',
        [
            ('''\
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
''',
             '''\
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
'''),
        ],
    ),
}
