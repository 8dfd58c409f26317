"""One-bug variants of solution.py, as edits (old -> new): see ``exercises.wrong_variant``."""

WRONG = {  # bug: (what is wrong, edits)
    'attends_before_write': (
        'attends over the cache before writing the new token, so a token never sees itself.',
        [
            ('''\
    k = cache["k"][:, :, : t + 1]  # only the filled positions: the rest of the buffer is not data
    v = cache["v"][:, :, : t + 1]
''',
             '''\
    k = cache["k"][:, :, :t]
    v = cache["v"][:, :, :t]
'''),
        ],
    ),
    'cat_grows': (
        'right numbers, but each step builds a new cache with torch.cat (a full copy of the cache per token).',
        [
            ('''\
        raise IndexError(f"KV cache full: {t} of {cache['k'].shape[2]} positions used")
''',
             '''\
        raise IndexError("KV cache full")
'''),
            ('''\
    cache["k"][:, :, t] = (x @ params["wk"].T).view(B, Hkv, Dh)  # written in place at position t
    cache["v"][:, :, t] = (x @ params["wv"].T).view(B, Hkv, Dh)
''',
             '''\
    for name, w in (("k", params["wk"]), ("v", params["wv"])):
        new = (x @ w.T).view(B, Hkv, 1, Dh)
        cache[name] = torch.cat([cache[name][:, :, :t], new, cache[name][:, :, t + 1:]], dim=2)
'''),
            ('''\
    k = cache["k"][:, :, : t + 1]  # only the filled positions: the rest of the buffer is not data
    v = cache["v"][:, :, : t + 1]
    group = H // Hkv
    k = k.repeat_interleave(group, dim=1)  # query head h reads kv head h // group
    v = v.repeat_interleave(group, dim=1)
    p = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(Dh), dim=-1)  # the new token sees everything cached
    out = (p @ v).reshape(B, H * Dh)
    return out @ params["wo"].T
''',
             '''\
    k = cache["k"][:, :, : t + 1].repeat_interleave(H // Hkv, dim=1)
    v = cache["v"][:, :, : t + 1].repeat_interleave(H // Hkv, dim=1)
    p = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(Dh), dim=-1)
    return (p @ v).reshape(B, H * Dh) @ params["wo"].T
'''),
        ],
    ),
    'gqa_mapping': (
        'query head h reads kv head h % Hkv (repeat instead of repeat_interleave).',
        [
            ('''\
    k = k.repeat_interleave(group, dim=1)  # query head h reads kv head h // group
    v = v.repeat_interleave(group, dim=1)
''',
             '''\
    k = k.repeat(1, group, 1, 1)
    v = v.repeat(1, group, 1, 1)
'''),
        ],
    ),
    'whole_buffer': (
        'attends over the whole preallocated buffer, unfilled positions included.',
        [
            ('''\
    k = cache["k"][:, :, : t + 1]  # only the filled positions: the rest of the buffer is not data
    v = cache["v"][:, :, : t + 1]
''',
             '''\
    k = cache["k"]
    v = cache["v"]
'''),
        ],
    ),
}
