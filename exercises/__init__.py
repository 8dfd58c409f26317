"""Coding exercises graded locally: ``python -m exercises NAME`` grades your attempt.

Each exercise is a folder ``exercises/<name>/`` holding

- ``starter.py``   the interface to implement (every function raises NotImplementedError);
- ``solution.py``  the reference solution (shown, folded, on the exercise's page);
- ``wrong_*.py``   deliberately wrong solutions: the project's tests check the grader fails each one;
- ``grader.py``    TITLE, TOPIC (the topic page it belongs to), SUMMARY and ``grade(module, grader)``.

Copy the starter to ``attempt.py`` in the same folder (git ignores it), implement it, and run the grader.
"""

from __future__ import annotations

import importlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The order of the listing and of the site's index.
EXERCISES = (
    "fused_softmax",
    "layer_norm",
    "online_softmax_attention",
    "kv_cache_decode",
    "streaming_topk",
    "int8_quantizer",
    "ring_all_reduce",
    "tensor_parallel_linear",
)


def grader(name: str):
    """The grader module of one exercise (TITLE, TOPIC, SUMMARY, grade)."""
    if name not in EXERCISES:
        raise KeyError(name)
    return importlib.import_module(f"exercises.{name}.grader")


def folder(name: str) -> Path:
    return HERE / name


def solutions(name: str) -> tuple[Path, list[Path]]:
    """The reference solution and the deliberately wrong ones of an exercise."""
    return folder(name) / "solution.py", sorted(folder(name).glob("wrong_*.py"))
