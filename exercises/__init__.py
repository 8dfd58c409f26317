"""Coding exercises graded locally: ``python -m exercises NAME`` grades your attempt.

Each exercise is a folder ``exercises/<name>/`` holding

- ``starter.py``   the interface to implement (every function raises NotImplementedError);
- ``solution.py``  the reference solution (shown, folded, on the exercise's page);
- ``wrong.py``     deliberately wrong one-bug variants of the solution (edits, old -> new), and
- ``wrong_*.py``   deliberately wrong attempts that are whole other implementations: the project's tests
                   check the grader fails each one of both kinds;
- ``grader.py``    TITLE, TOPIC (the topic page it belongs to), SUMMARY, ``grade(path, g)`` (the inputs and the
                   verdicts) and ``outputs(mod, job, device)``, which runs in the attempt's own process
                   (``_isolate.py``); a distributed one has ``rank_outputs`` and ``judge`` instead (``_dist.py``).

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


def wrong_variant(name: str, bug: str) -> str:
    """The text of one wrong variant: solution.py with the bug's edits applied, each matching exactly once (a
    solution that changed under an edit fails here, loudly, instead of leaving a grader test that checks nothing)."""
    description, edits = importlib.import_module(f"exercises.{name}.wrong").WRONG[bug]
    reference = (folder(name) / "solution.py").read_text(encoding="utf-8")
    text = reference.split("\n", 1)[1]  # the reference's one-line docstring gives way to the bug's
    for old, new in edits:
        if text.count(old) != 1:
            raise ValueError(f"exercises/{name}/wrong.py, {bug}: an edit matches solution.py "
                             f"{text.count(old)} times, not once")
        text = text.replace(old, new)
    return f'"""Wrong on purpose: {description}"""\n' + text


def solutions(name: str) -> tuple[Path, list[Path]]:
    """The reference solution and the deliberately wrong ones of an exercise: the wrong_*.py files, and the
    one-bug variants of wrong.py written out as files under .cache/exercises/<name>/ (graders load by path)."""
    from records import atomic
    from records.paths import CACHE_DIR

    variants = []
    if (folder(name) / "wrong.py").exists():
        for bug in importlib.import_module(f"exercises.{name}.wrong").WRONG:
            path = CACHE_DIR / "exercises" / name / f"wrong_{bug}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(path, wrong_variant(name, bug))
            variants.append(path)
    return folder(name) / "solution.py", sorted([*folder(name).glob("wrong_*.py"), *variants])
