"""Where things live in the repository: the one place that knows the layout.

Demos, the harness, the site, the operations commands and tests all import their paths from here.
"""

from __future__ import annotations

from pathlib import Path

CORE_DIR = Path(__file__).resolve().parent  # records/: this package
REPO_ROOT = CORE_DIR.parent
DEMOS_DIR = REPO_ROOT / "demos"
HARNESS_DIR = DEMOS_DIR / "harness"
DOCS_DIR = REPO_ROOT / "docs"
RESULTS_DIR = DOCS_DIR / "results"
SCRIPTS_DIR = REPO_ROOT / "scripts"
CACHE_DIR = REPO_ROOT / ".cache"  # ignored by git: compile caches, trained models, plots, logs
RECORD_SCHEMA = CORE_DIR / "record.schema.json"
DATASHEETS = CORE_DIR / "datasheets.toml"
GPU_SET = CORE_DIR / "gpu_set.toml"


def shown(path: Path) -> str:
    """A path as a reader wants to see it: relative to the repository when it is inside it."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)
