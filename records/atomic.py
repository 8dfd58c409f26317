"""Atomic file writes: a reader sees the old file or the new one, never half of either.

The text goes to a temporary file beside the target, is flushed to disk, and is renamed over the
target. A crash or a kill at any point leaves the previous file untouched; the temporary file is
removed when the write fails inside Python, and its name starts with a dot and ends in ``.tmp``
so ``git status`` and the record loader never mistake a leftover for a record.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644  # readable by everyone, like any file git checks out (mkstemp alone gives 0600)


def write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data) -> None:
    write_text(path, json.dumps(data, indent=1) + "\n")


def write_bytes_via(path: Path, save) -> None:
    """For writers that take a file name (torch.save, a plot's savefig): ``save(tmp_path)``, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
