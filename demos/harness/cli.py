"""Command-line options shared by every demo, and the one-line error for bad input."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

DEVICES = ("auto", "cpu", "cuda")
SIZES = ("tiny", "small", "full")
REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "docs" / "results"


def fail(message: str) -> NoReturn:
    """Print one clear line to stderr and exit with code 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage banner) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message} (see --help)")


@dataclass(frozen=True)
class Options:
    device: str  # auto | cpu | cuda, as asked; the harness resolves auto
    size: str | None  # tiny | small | full, or None for the device's default
    results_dir: Path
    seed: int


def parse_options(prog: str, argv: list[str] | None = None) -> Options:
    """Parse a demo's options. Unknown options are ignored, so a demo also runs inside Jupyter."""
    parser = OneLineParser(prog=prog, description=f"Run the {prog} demo and write its result record.")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda")
    parser.add_argument(
        "--size", default=None, help="tiny (tests) | small (CPU default) | full (GPU default, fills the chip)"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where records are written")
    parser.add_argument("--seed", type=int, default=0)
    args, _unknown = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.device not in DEVICES:
        fail(f"unknown device {args.device!r}: choose one of {', '.join(DEVICES)}")
    if args.size is not None and args.size not in SIZES:
        fail(f"unknown size {args.size!r}: choose one of {', '.join(SIZES)}")
    return Options(device=args.device, size=args.size, results_dir=args.results_dir, seed=args.seed)
