"""Small helpers the T9 demos share (not a demo: the leading underscore keeps it out of discovery)."""

from __future__ import annotations

from demos.harness import provenance


def cache_resident(run, working_set_bytes: int) -> bool:
    """Whether a kernel touching this many bytes is timed from a cache rather than from memory: on a
    GPU never (the harness flushes L2 before every timed call); on a CPU when it fits in the
    last-level cache."""
    if run.device.is_gpu:
        return False
    llc = provenance.cpu_llc_bytes()
    return llc is not None and working_set_bytes <= llc
