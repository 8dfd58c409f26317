"""The one-line error every command and demo gives for bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


def one_line(text: str) -> str:
    """Text with its control characters escaped (a line break in a file name or an exception's message)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def quoted(text: str) -> str:
    """A user's text (a name, a path) inside an error line: as typed, or as Python's ascii() when it holds a line
    break or another control character."""
    return text if text.isprintable() else ascii(text)


def fail(message: str) -> NoReturn:
    """Print one clear line to stderr and exit with code 2 (control characters escaped: always one line)."""
    print(f"error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(2)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage banner) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message} (see --help)")
