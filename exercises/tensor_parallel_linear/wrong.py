"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'autograd_all_reduce': (
        'the row-parallel sum uses torch.distributed.nn.functional.all_reduce, whose backward sums the '
        'gradients again (W times too large).',
        [
            ('''\
        y = _SumShards.apply(F.linear(x, self.weight))  # partial products summed over ranks
''',
             '''\
        from torch.distributed.nn.functional import all_reduce
        y = all_reduce(F.linear(x, self.weight))
'''),
        ],
    ),
    'bias_every_rank': (
        'the row-parallel layer adds the bias on every rank before the sum, so the output carries W biases.',
        [
            ('''\
        y = _SumShards.apply(F.linear(x, self.weight))  # partial products summed over ranks
        return y + self.bias if self.bias is not None else y  # the bias once, after the sum
''',
             '''\
        return _SumShards.apply(F.linear(x, self.weight, self.bias))
'''),
        ],
    ),
    'no_grad_sum': (
        "the column-parallel layer's input gradient is not summed over ranks (each rank keeps a partial one).",
        [
            ('''\
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
''',
             '''\
'''),
        ],
    ),
    'strided_shards': (
        'the column-parallel layer takes every W-th output row (a strided shard), which the gather and the '
        'row-parallel layer do not expect.',
        [
            ('''\
        self.weight = torch.nn.Parameter(_shard(weight, 0))  # (out/W, in): only this rank's rows
        self.bias = torch.nn.Parameter(_shard(bias, 0)) if bias is not None else None
''',
             '''\
        _shard(weight, 0)
        W, r = dist.get_world_size(), dist.get_rank()
        self.weight = torch.nn.Parameter(weight[r::W].clone())
        self.bias = torch.nn.Parameter(bias[r::W].clone()) if bias is not None else None
'''),
        ],
    ),
}
