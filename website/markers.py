"""The three markers a page uses to pull measurements in, and how they are found.

    {{ results DEMO }}                         the demo's measured section (tabs per device)
    {{ metric DEMO NAME[:fraction] @DEVICE }}  one value, with unit and device
    {{ claim DEMO @DEVICE LHS OP RHS }}        a checked claim; OP is < <= > >=;
                                               LHS/RHS: NAME[:fraction], a number, or NUMBER * NAME
    {{ artifact DEMO NAME @DEVICE }}           a text artifact of the record (an IR dump, a graph),
                                               in a collapsible code block

DEVICE is a device class (cpu, h100, h200, ...); a claim may also say @gpu (every GPU with a
record). Markers inside code (fenced blocks or `inline code`) are left alone, so pages can show
the syntax itself.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

# What a plain-text field (a title in the nav or a heading, a sizing problem's title and unit) may not hold, since it
# is written into pages as it is: HTML, a Markdown link or attribute list, code, an escape, a marker, a line break.
MARKUP = re.compile(r"[<>\[\]{}`\\\r\n]")
MARKER = re.compile(r"\{\{\s*(results|metric|claim|artifact)\b(.*?)\}\}")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+).+?\1")
OPS = ("<=", ">=", "<", ">")
NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"


class MarkerError(ValueError):
    """A marker that cannot be parsed; the message says what the right form is."""


@dataclass(frozen=True)
class MetricRef:
    name: str
    fraction: bool = False  # NAME:fraction -> the metric's fraction of its same-run ceiling
    scale: float = 1.0  # NUMBER * NAME

    def __str__(self) -> str:
        core = self.name + (":fraction" if self.fraction else "")
        return core if self.scale == 1.0 else f"{self.scale:g} * {core}"


@dataclass(frozen=True)
class Marker:
    kind: str  # results | metric | claim | artifact
    demo: str
    source: str  # the marker as written
    device: str | None = None
    metric: MetricRef | None = None
    artifact: str | None = None
    lhs: MetricRef | float | None = None
    op: str | None = None
    rhs: MetricRef | float | None = None

    @property
    def expression(self) -> str:
        return f"{self.lhs} {self.op} {self.rhs}"


def _side(text: str, source: str) -> MetricRef | float:
    text = text.strip()
    m = re.fullmatch(rf"(?:([0-9.eE+\-]+)\s*\*\s*)?({NAME})(:fraction)?", text)
    if m and not re.fullmatch(r"[0-9.eE+\-]+", text):
        return MetricRef(m.group(2), bool(m.group(3)), float(m.group(1)) if m.group(1) else 1.0)
    try:
        return float(text)
    except ValueError:
        raise MarkerError(f"{source}: cannot read {text!r}; write a metric name, NAME:fraction, a number, "
                          "or NUMBER * NAME") from None


def parse(kind: str, body: str, source: str) -> Marker:
    words = body.split()
    if kind == "results":
        if len(words) != 1:
            raise MarkerError(f"{source}: write {{{{ results DEMO }}}}")
        return Marker("results", words[0], source)
    if kind == "metric":
        m = re.fullmatch(rf"\s*({NAME})\s+({NAME})(:fraction)?\s+@({NAME})\s*", body)
        if not m:
            raise MarkerError(f"{source}: write {{{{ metric DEMO NAME @DEVICE }}}} (NAME may end in :fraction)")
        return Marker("metric", m.group(1), source, device=m.group(4), metric=MetricRef(m.group(2), bool(m.group(3))))
    if kind == "artifact":
        m = re.fullmatch(rf"\s*({NAME})\s+({NAME})\s+@({NAME})\s*", body)
        if not m:
            raise MarkerError(f"{source}: write {{{{ artifact DEMO NAME @DEVICE }}}}")
        return Marker("artifact", m.group(1), source, device=m.group(3), artifact=m.group(2))
    m = re.fullmatch(rf"\s*({NAME})\s+@({NAME})\s+(.+?)\s*", body)
    if not m:
        raise MarkerError(f"{source}: write {{{{ claim DEMO @DEVICE LHS OP RHS }}}}")
    expr = m.group(3)
    for op in OPS:
        # split on the operator surrounded by spaces, so names with '-' or '.' stay whole
        parts = re.split(rf"\s{re.escape(op)}\s", expr)
        if len(parts) == 2:
            marker = Marker("claim", m.group(1), source, device=m.group(2), lhs=_side(parts[0], source), op=op,
                            rhs=_side(parts[1], source))
            _falsifiable(marker)
            return marker
    raise MarkerError(f"{source}: the claim needs one comparison, with spaces around it: < <= > >=")


def _falsifiable(marker: Marker) -> None:
    """A claim that no measurement could contradict checks nothing: it names a metric, its numbers are finite
    (1e999 is infinity), its scale is not zero (0 * x < 1 always holds), and its two sides differ."""
    sides = (marker.lhs, marker.rhs)
    if not any(isinstance(s, MetricRef) for s in sides):
        raise MarkerError(f"{marker.source}: the claim compares two numbers; a claim compares a measurement")
    for s in sides:
        scaled = isinstance(s, MetricRef)
        number = s.scale if scaled else s
        # records hold numbers within +-1e100 (records/record.py), so a bound beyond that, or a scale that shrinks a
        # measurement below any difference, holds whatever is measured
        if not math.isfinite(number) or abs(number) >= 1e100 or (scaled and abs(number) < 1e-100):
            raise MarkerError(f"{marker.source}: {'a scale of ' if scaled else ''}{number:g} lets the claim hold "
                              "whatever is measured; use a finite number within +-1e100 (a scale, above 1e-100)")
    if marker.lhs == marker.rhs:
        raise MarkerError(f"{marker.source}: both sides are the same; the claim holds whatever is measured")


STRAY = re.compile(r"\{\{|\}\}")
SIZING = re.compile(r"\{\{\s*sizing\s+[A-Za-z0-9_\-]+(?:\s+answer)?\s*\}\}")


def strays(text: str, source_name: str = "page") -> list[str]:
    """Braces outside code that no marker consumed: a typo'd marker ({{ metrc ... }}) or one split across lines,
    which the page would otherwise show as literal text. One line each, naming the page's line."""
    found: list[str] = []
    offset = 0

    def scan(chunk: str) -> str:
        nonlocal offset
        start = text.find(chunk, offset) if chunk else offset
        offset = max(offset, start)
        left = SIZING.sub(lambda m: " " * len(m.group(0)), MARKER.sub(lambda m: " " * len(m.group(0)), chunk))
        firsts: dict[int, int] = {}  # the page's line -> where on it the first stray brace is
        for m in STRAY.finditer(left):
            at = start + m.start()
            firsts.setdefault(text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1))
        for line, column in sorted(firsts.items()):
            words = " ".join(text.splitlines()[line - 1][max(0, column - 20):].split())[:70]  # around the brace
            found.append(f"{source_name}:{line}: {words!r} holds braces that are no marker (a typo, or a marker split "
                         "across lines?); write {{ results DEMO }}, {{ metric ... }}, {{ claim ... }}, "
                         "{{ artifact ... }}, {{ sizing ID }} or {{ sizing ID answer }} on one line")
        return chunk

    transform_outside_code(text, scan)
    return found


def transform_outside_code(text: str, fn: Callable[[str], str]) -> str:
    """Apply fn to the parts of Markdown that are not fenced code blocks or inline code spans."""
    out, prose, in_fence, fence = [], [], False, ""

    def flush_prose() -> None:
        if prose:
            chunk = "".join(prose)
            pieces, last = [], 0
            for m in INLINE_CODE.finditer(chunk):
                pieces.append(fn(chunk[last:m.start()]))
                pieces.append(m.group(0))
                last = m.end()
            pieces.append(fn(chunk[last:]))
            out.append("".join(pieces))
            prose.clear()

    for line in text.splitlines(keepends=True):
        m = FENCE.match(line)
        if in_fence:
            out.append(line)
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence):
                in_fence = False
        elif m:
            flush_prose()
            in_fence, fence = True, m.group(2)
            out.append(line)
        else:
            prose.append(line)
    flush_prose()
    return "".join(out)


def find(text: str, source_name: str = "page") -> list[Marker]:
    """Every marker of a page, in order (markers inside code are not markers)."""
    found: list[Marker] = []

    def collect(chunk: str) -> str:
        for m in MARKER.finditer(chunk):
            found.append(parse(m.group(1), m.group(2), f"{source_name}: {m.group(0)}"))
        return chunk

    transform_outside_code(text, collect)
    return found


def substitute(text: str, render: Callable[[Marker], str], source_name: str = "page") -> str:
    """Replace every marker outside code with render(marker)."""

    def replace(chunk: str) -> str:
        return MARKER.sub(lambda m: render(parse(m.group(1), m.group(2), f"{source_name}: {m.group(0)}")), chunk)

    return transform_outside_code(text, replace)
