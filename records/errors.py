"""The one-line error every command and demo gives for bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


def fail(message: str) -> NoReturn:
    """Print one clear line to stderr and exit with code 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage banner) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message} (see --help)")
