"""Where things live in the repository: the one place that knows the layout.

Demos, the harness, the site, the operations commands and tests all import their paths from here.
"""

from __future__ import annotations

import os
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

# A GPU campaign stages the records it writes in a folder of its own (scripts/gpu_campaign.py) until they are
# unpacked and gated here. A demo run by it that reads another demo's record (records/inputs.py) must read the
# staged one, measured minutes earlier on the same GPU, and its digest must hash that same file.
STAGED_RESULTS_ENV = "MLSM_STAGED_RESULTS"


def input_record_path(demo: str, device_class: str, results_dir: Path = RESULTS_DIR) -> Path:
    """Where a declared input record is read from: the campaign's staged copy when one exists (see
    STAGED_RESULTS_ENV), else ``results_dir`` (docs/results)."""
    staged = os.environ.get(STAGED_RESULTS_ENV)
    if staged and (Path(staged) / demo / f"{device_class}.json").is_file():
        return Path(staged) / demo / f"{device_class}.json"
    return results_dir / demo / f"{device_class}.json"


def input_record_demos(device_class: str, results_dir: Path = RESULTS_DIR) -> list[str]:
    """Every demo with a record of this class, staged or published (for inputs declared as "*/<class>")."""
    folders = [results_dir] + ([Path(os.environ[STAGED_RESULTS_ENV])] if os.environ.get(STAGED_RESULTS_ENV) else [])
    return sorted({p.parent.name for f in folders for p in f.glob(f"*/{device_class}.json")})


def shown(path: Path) -> str:
    """A path as a reader wants to see it: relative to the repository when it is inside it (as named: a link is
    shown where it is, not where it points)."""
    for absolute in (Path(os.path.abspath(path)), Path(path).resolve()):
        try:
            return absolute.relative_to(REPO_ROOT).as_posix()
        except ValueError:
            continue
    return str(path)
