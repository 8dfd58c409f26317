"""Command-line options shared by every demo. Bad input fails up front: one line, exit code 2."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from records.errors import OneLineParser, fail, quoted
from records.paths import RESULTS_DIR, shown

DEVICES = ("auto", "cpu", "cuda")
SIZE_PRESETS = ("tiny", "small", "full")  # a demo maps each preset to its own problem sizes
MAX_SEED = 2**32 - 1  # what numpy's and JAX's generators accept as well as torch's


@dataclass(frozen=True)
class Options:
    device: str  # auto | cpu | cuda, as asked; the harness resolves auto
    size: str | None  # tiny | small | full, or None for the device's default
    results_dir: Path
    seed: int


def _in_notebook_kernel() -> bool:
    """Inside Jupyter, sys.argv holds the kernel's own options (-f kernel.json): those are not ours."""
    return "ipykernel" in sys.modules


def writable_dir(path: Path) -> str | None:
    """Why records cannot be written under path, or None when they can (it may not exist yet).

    It is tried, not asked: the missing folders are made, a temporary file is written in the last one,
    and all of it is removed again. os.access says yes to root everywhere, and a special or read-only
    file system can refuse a write that the permissions allow; either would only show after the run."""
    path = Path(path).absolute()
    made: list[Path] = []
    try:
        missing, existing = [], path
        while not existing.exists():
            missing.append(existing)
            existing = existing.parent
        if not existing.is_dir():
            return f"{quoted(str(existing))} is a file, not a folder"
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", suffix=".tmp", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{quoted(str(e.filename or path))} cannot be written ({e.strerror or e})"
    finally:
        for folder in reversed(made):  # leave no trace of the trial: only the folders it made, if still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
    return None


def results_dir_option(raw: str, size: str | None, demo: str | None = None) -> Path:
    """--results-dir, checked before any work (one line, exit 2): not empty (that would be the current
    folder), not docs/results for a tiny run (a smoke run is never published, and it would replace the
    record there), and writable where the record goes (<folder>/<demo>/, tried). Regen checks its own
    --results-dir here too, without a demo."""
    if not raw.strip():
        fail("--results-dir is empty: name the folder the records go to (docs/results is the default)")
    path = Path(raw).absolute()
    published = RESULTS_DIR.resolve().parent  # docs/: everything under it is published, not only docs/results
    if size == "tiny" and (path.resolve() == published or published in path.resolve().parents):
        fail(f"--size tiny is a smoke run, never published: it may not write under {shown(published)} (the site "
             "publishes what is there); pass --results-dir with a scratch folder")
    problem = writable_dir(path / demo if demo else path)
    if problem:
        fail(f"--results-dir {quoted(raw)}: {problem}")
    return path


def parse_options(prog: str, argv: list[str] | None = None) -> Options:
    """Parse a demo's options; an unknown option, device, size, seed or unusable folder is one line, exit 2."""
    parser = OneLineParser(prog=prog, description=f"Run the {prog} demo and write its result record.")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda")
    parser.add_argument(
        "--size", default=None, help="tiny (tests) | small (CPU default) | full (GPU default, fills the chip)"
    )
    parser.add_argument("--results-dir", default=str(RESULTS_DIR), help="where records are written")
    parser.add_argument("--seed", type=int, default=0, help=f"0..{MAX_SEED}")
    args_in = sys.argv[1:] if argv is None else argv
    if argv is None and _in_notebook_kernel():
        args, _ = parser.parse_known_args(args_in)
    else:
        args = parser.parse_args(args_in)
    if args.device not in DEVICES:
        fail(f"unknown device {args.device!r}: choose one of {', '.join(DEVICES)}")
    if args.size is not None and args.size not in SIZE_PRESETS:
        fail(f"unknown size {args.size!r}: choose one of {', '.join(SIZE_PRESETS)}")
    if not 0 <= args.seed <= MAX_SEED:
        fail(f"--seed {args.seed} is out of range: choose 0..{MAX_SEED}")
    results_dir = results_dir_option(args.results_dir, args.size, demo=prog)
    return Options(device=args.device, size=args.size, results_dir=results_dir, seed=args.seed)
