"""The GPU set (records/gpu_set.toml): which demos a page needs measured on a GPU, the headline ones first.

One reader for the declaration that the campaign (what to run, in which order), the site (a GPU tab and GPU
numbers only for the GPU set) and the check (no GPU marker naming a CPU-only demo) all ask.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from records.paths import GPU_SET, REPO_ROOT


@dataclass(frozen=True)
class GpuSet:
    gpu: dict[str, str]  # demo -> what its page needs from a GPU
    cpu_only: dict[str, str]  # demo -> why its lesson is host-side or the same on every device
    headline: tuple[str, ...]  # measured first, in this order

    def needs_gpu(self, demo: str) -> bool:
        return demo in self.gpu

    def problems(self, demos) -> list[str]:
        """What is wrong with the declaration against the demos that exist (names)."""
        demos, out = list(demos), []
        out += [f"{d}: in both [gpu] and [cpu_only]" for d in sorted(set(self.gpu) & set(self.cpu_only))]
        out += [f"{d}: no such demo" for d in sorted(set(self.gpu) | set(self.cpu_only)) if d not in demos]
        out += [f"{d}: declared in neither [gpu] nor [cpu_only]; add it to one, with the reason"
                for d in demos if d not in self.gpu and d not in self.cpu_only]
        out += [f"headline {d}: not in [gpu]" for d in self.headline if d not in self.gpu]
        out += [f"{d}: give the reason" for d, why in {**self.gpu, **self.cpu_only}.items() if not str(why).strip()]
        return out


def load(root: Path = REPO_ROOT) -> GpuSet:
    with open(root / GPU_SET.relative_to(REPO_ROOT), "rb") as f:
        data = tomllib.load(f)
    return GpuSet(dict(data.get("gpu", {})), dict(data.get("cpu_only", {})), tuple(data.get("headline", [])))


@cache
def declared() -> GpuSet:
    """load(), once per process."""
    return load()
