"""Grader: streaming top-K (ties, NaN, stream positions, O(K) state, speed against one torch.topk)."""

from __future__ import annotations

# bound here, at import: in the solution's process nothing under exercises/ can be imported later (_isolate.seal)
from exercises._grading import speed_outputs, speed_verdict, value
from exercises._isolate import run_solution

TITLE = "Streaming top-K"
TOPIC = "ml-foundations"
SUMMARY = "The K largest values of a chunked stream in O(K) memory, with a stated tie and NaN policy."
SPEED_LIMIT = 20.0  # at most 20x one torch.topk over the whole stream held in memory
STATE_SLACK = 64


def state_size(obj, seen=None) -> int:
    """Numbers an object holds: tensor elements, list/dict entries, scalars (recursively)."""
    import torch

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel()
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sum(state_size(x, seen) for x in obj) + (0 if isinstance(obj, tuple) else 1)
    if isinstance(obj, dict):
        return sum(state_size(x, seen) for x in obj.values())
    if hasattr(obj, "__dict__"):
        return sum(state_size(x, seen) for x in vars(obj).values())
    return 1


def grade(path, g) -> None:
    import torch

    dev = g.device
    gen = torch.Generator().manual_seed(4 + g.seed)

    def expected(chunks, k, dtype):
        flat = [x for c in chunks for x in c.reshape(-1).tolist()]
        best = sorted(((-x, i) for i, x in enumerate(flat) if x == x), key=lambda t: t)[:k]  # x == x: not NaN
        return (torch.tensor([-v for v, _ in best], dtype=dtype), torch.tensor([i for _, i in best], dtype=torch.int64))

    checks = []  # (check, inputs, judge): the solution sees the inputs only in its own process

    def stream_case(name, chunks, k, peek=False):
        def judge(result):
            values, indices = result
            ev, ei = expected(chunks, k, chunks[0].dtype if chunks else torch.float32)
            if not isinstance(values, torch.Tensor) or not isinstance(indices, torch.Tensor):
                return False, "result() must return two tensors (values, indices)"
            if indices.dtype != torch.int64:
                return False, f"indices have dtype {indices.dtype}, expected torch.int64"
            if values.dtype != ev.dtype:
                return False, f"values have dtype {values.dtype}, expected the stream's {ev.dtype}"
            values, indices = values.cpu(), indices.cpu()
            if torch.isnan(values).any():
                return False, f"{int(torch.isnan(values).sum())} NaN returned; the policy drops NaN"
            if values.shape != ev.shape:
                return False, f"returned {values.numel()} values, expected {ev.numel()}"
            if not torch.equal(values, ev):
                j = int((values != ev).nonzero()[0])
                return False, f"values differ at rank {j}: {float(values[j]):g}, expected {float(ev[j]):g}"
            if not torch.equal(indices, ei):
                j = int((indices != ei).nonzero()[0])
                return False, (f"indices differ at rank {j} (value {float(ev[j]):g}): {int(indices[j])}, expected "
                               f"{int(ei[j])} (stream positions; the earliest of equal values first)")
            return True, f"the {ev.numel()} values and positions match"
        checks.append((name, {"kind": "stream", "chunks": [c.to(dev) for c in chunks], "k": k, "peek": peek}, judge))

    randn = lambda n: torch.randn(n, generator=gen)  # noqa: E731
    sizes = [100, 1, 0, 37, 500, 3]
    stream_case("random stream, chunks of 100, 1, 0, 37, 500, 3 elements, K = 10", [randn(n) for n in sizes], 10)
    ties = [torch.randint(0, 4, (n,), generator=gen).float() for n in (30, 30, 1, 30)]
    stream_case("ties everywhere (values 0..3), K = 7: the earliest positions win", ties, 7)
    stream_case("ties across chunks: every value equal, K = 5 -> positions 0..4",
                [torch.ones(3), torch.ones(4), torch.ones(2)], 5)
    noisy = [randn(n) for n in (40, 40, 40)]
    for c in noisy:
        c[torch.rand(c.shape, generator=gen) < 0.25] = float("nan")
    noisy[1][3], noisy[2][5], noisy[0][0] = float("inf"), float("-inf"), float("inf")
    stream_case("NaN (a quarter of the stream) dropped, +inf and -inf kept, K = 12", noisy, 12)
    stream_case("K larger than the stream's non-NaN count: all of them, sorted",
                [torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([2.0])], 10)
    stream_case("an all-NaN stream gives empty tensors", [torch.full((5,), float("nan"))], 3)
    stream_case("K = 0 gives empty tensors", [randn(20)], 0)
    stream_case("result() in the middle of the stream does not disturb it", [randn(50) for _ in range(6)], 8, peek=True)
    stream_case("float64 stream keeps float64 values", [randn(30).double(), randn(30).double()], 4)

    def memory(k, n, chunks):
        limit = 8 * k + STATE_SLACK

        def judge(size):
            size = int(size)
            return size <= limit, (f"the object holds {size} numbers after {chunks * n} elements (limit {limit} for "
                                   f"K = {k}); " + ("O(K)" if size <= limit else "it keeps the stream"))
        stream = [torch.randn(n, generator=gen).to(dev) for _ in range(chunks)]
        checks.append(("state stays O(K) while the stream grows", {"kind": "memory", "k": k, "chunks": stream}, judge))
    memory(16, 512, 64)

    k, n, chunks = 32, 65536, 8
    stream = [torch.randn(n, generator=gen).to(dev) for _ in range(chunks)]
    checks.append((f"speed: {chunks} chunks of {n}, K = {k}, at most {SPEED_LIMIT:g}x one torch.topk over the "
                   "whole stream",
                   {"kind": "speed", "k": k, "chunks": stream},
                   lambda times: speed_verdict(times, "torch.topk on the concatenated stream", SPEED_LIMIT)))

    results = run_solution("streaming_topk", path, g, [inputs for _, inputs, _ in checks])
    for (name, _, judge), result in zip(checks, results):
        g.run(name, lambda judge=judge, result=result: judge(value(result)))


def outputs(mod, job: dict, device: str):
    """In the solution's own process (exercises/_isolate.py): what the solution returns, no verdict."""
    import torch

    k, chunks = job["k"], job["chunks"]
    if job["kind"] == "stream":
        top = mod.StreamingTopK(k)
        for j, c in enumerate(chunks):
            top.push(c)
            if job["peek"] and j == len(chunks) // 2:
                top.result()  # the stream goes on after a look at the result
        values, indices = top.result()
        return values, indices
    if job["kind"] == "memory":
        top = mod.StreamingTopK(k)
        for c in chunks:
            top.push(c)
        return state_size(top)
    whole = torch.cat(chunks)

    def attempt():
        top = mod.StreamingTopK(k)
        for c in chunks:
            top.push(c)
        return top.result()
    return speed_outputs(attempt, lambda: torch.topk(whole, k), device, SPEED_LIMIT)
