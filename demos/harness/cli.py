"""Command-line options shared by every demo. Bad input fails up front: one line, exit code 2."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from records.errors import OneLineParser, fail
from records.paths import RESULTS_DIR

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
    """Why records cannot be written under path, or None when they can (it may not exist yet)."""
    path = Path(path).absolute()
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def parse_options(prog: str, argv: list[str] | None = None) -> Options:
    """Parse a demo's options; an unknown option, device, size, seed or unusable folder is one line, exit 2."""
    parser = OneLineParser(prog=prog, description=f"Run the {prog} demo and write its result record.")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda")
    parser.add_argument(
        "--size", default=None, help="tiny (tests) | small (CPU default) | full (GPU default, fills the chip)"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where records are written")
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
    problem = writable_dir(args.results_dir)
    if problem:
        fail(f"--results-dir {args.results_dir}: {problem}")
    return Options(device=args.device, size=args.size, results_dir=args.results_dir.absolute(), seed=args.seed)
