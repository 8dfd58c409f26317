"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'drops_remainder': (
        'chunks of numel // W elements, so the last numel % W elements are never summed.',
        [
            ('''\
    chunks = list(tensor.view(-1).tensor_split(world))  # views into tensor; sizes differ by at most one
''',
             '''\
    size = tensor.numel() // world
    chunks = [tensor.view(-1)[i * size:(i + 1) * size] for i in range(world)]
'''),
        ],
    ),
    'no_all_gather': (
        'stops after the reduce-scatter, so each rank holds the sum of one chunk only.',
        [
            ('''\
    # all-gather: pass the finished chunks around the ring, W-1 more steps
    for step in range(world - 1):
        send_i, recv_i = (rank + 1 - step) % world, (rank - step) % world
        incoming = torch.empty_like(chunks[recv_i])
        _exchange(chunks[send_i], incoming, right, left)
        chunks[recv_i].copy_(incoming)
''',
             '''\
'''),
        ],
    ),
}
