"""The published datasheet figures (scripts/datasheets.toml), read in one place for demos and scripts."""

from __future__ import annotations

import tomllib

from demos.harness.paths import DATASHEETS


def load() -> dict[str, dict]:
    """Every device class's entry: label, peaks, memory and host link figures, and its source."""
    with open(DATASHEETS, "rb") as f:
        return tomllib.load(f)
