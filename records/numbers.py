"""How a measured number is written, everywhere it is shown: pages, the check's messages, the gate."""

from __future__ import annotations


def fmt_number(v: float, digits: int = 3) -> str:
    """A measured value for prose: ``digits`` significant digits, thousands separated."""
    if isinstance(v, int):
        return f"{v:,}"
    a = abs(v)
    if a >= 10 ** digits:
        return f"{v:,.0f}"
    if a >= 0.01 or a == 0:
        return f"{v:#.{digits}g}".rstrip(".")
    return f"{v:.{digits - 1}e}"


def fmt_pair(a: float, b: float) -> tuple[str, str]:
    """Two values side by side, with enough digits that different values never print the same."""
    for digits in range(3, 8):
        fa, fb = fmt_number(a, digits), fmt_number(b, digits)
        if fa != fb or a == b:
            return fa, fb
    return fa, fb


def fmt_title_number(v: float) -> str:
    """A number in a plot's title: 2 significant digits below 10, a whole number above, never an exponent."""
    return f"{v:.2g}" if abs(v) < 10 else f"{v:.0f}"


def fmt_speedup_words(speedup: float) -> str:
    """A speedup (old time / new time) in words, for a title: '7.6x faster', '33x faster', '7.2x slower'."""
    return f"{fmt_title_number(max(speedup, 1 / speedup))}x {'faster' if speedup >= 1 else 'slower'}"


# A plot title calls one measured time faster than another only when it is ahead by more than this ratio: within
# it, one run on a shared machine does not order them, and the title says they are about even.
TITLE_TIE = 1.1
