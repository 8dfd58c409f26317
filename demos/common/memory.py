"""Peak memory of a call, measured the same way for every topic (attention, training steps)."""

from __future__ import annotations

import torch


def peak_bytes(fn, device) -> int:
    """Peak bytes allocated while fn() runs, above what was allocated before it. On a GPU: PyTorch's own
    counters. On a CPU there are none, so fn runs under torch.profiler(profile_memory=True) and the running
    total the CPU allocator reports with every allocation event is read back; its maximum, minus the total
    just before the first event, is the peak."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.total_allocated))
        stack.extend(node.children)
    if not events:
        return 0
    events.sort()
    return max(total for _, _, total in events) - (events[0][2] - events[0][1])
