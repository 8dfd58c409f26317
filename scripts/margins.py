"""How much room each claim has: `python -m scripts.margins DEMO [--runs 5] [--device cpu]`.

Runs the demo several times (each in its own process, records into a temporary folder, never into
docs/results), then prints every metric's range over the runs and, for every claim on any page that
names the demo, its verdict and worst-case room over the runs. A claim about a timing should hold with
at least 1.4x room on the CPU: CI re-measures on a busy machine. Use it to choose a claim's threshold.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from records import record
from demos.harness.cli import DEVICES
from records.errors import OneLineParser, fail
from records.paths import DOCS_DIR
from records import catalog
from website.claims import MARGIN_RULE, judge, margin, timing_based
from website.markers import find
from scripts.regen import resolve_device_class, run_demo
from records.numbers import fmt_number


def claims_about(demo: str, docs_dir: Path = DOCS_DIR):
    for path in sorted(docs_dir.rglob("*.md")):
        for marker in find(path.read_text(encoding="utf-8"), path.relative_to(docs_dir).as_posix()):
            if marker.kind == "claim" and marker.demo == demo:
                yield marker


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="margins", description=__doc__.splitlines()[0])
    parser.add_argument("demo")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default=None)
    args = parser.parse_args(argv)
    demos = catalog.discover()
    if args.demo not in demos:
        fail(f"unknown demo {args.demo!r}: known demos are {', '.join(demos)}")
    if args.device not in DEVICES:
        fail(f"unknown device {args.device!r}: choose one of {', '.join(DEVICES)}")
    if not 2 <= args.runs <= 50:
        fail(f"--runs {args.runs}: choose 2..50")
    device_class = resolve_device_class(args.device)
    from rich.console import Console

    console = Console(highlight=False)
    runs: list[record.Record] = []
    with tempfile.TemporaryDirectory(prefix="margins-") as tmp:
        for i in range(args.runs):
            folder = Path(tmp) / f"run{i}"
            outcome = run_demo(demos[args.demo], args.device, args.size, folder, console, timeout=1800)
            if not outcome.ok:
                fail(f"run {i + 1} of {args.demo} failed: {outcome.detail}")
            runs.append(record.load(record.record_path(folder, args.demo, device_class)))
            console.print(f"run {i + 1}/{args.runs} done in {outcome.seconds:.0f} s")

    print(f"\n{args.demo} on {device_class}, {args.runs} runs: metric ranges")
    for name in runs[0].metrics:
        values = [r.metrics[name].value for r in runs if name in r.metrics]
        lo, hi, mid = min(values), max(values), statistics.median(values)
        spread = f"{(hi - lo) / abs(mid):.0%}" if mid else "-"
        print(f"  {name}: median {fmt_number(mid)} {runs[0].metrics[name].unit}, range {fmt_number(lo)} .. "
              f"{fmt_number(hi)} (spread {spread})")
    print("\nclaims (worst case over the runs)")
    worst_ok = True
    for marker in claims_about(args.demo):
        if marker.device not in (device_class, "gpu"):
            continue
        verdicts = [v for r in runs for v in judge(marker, {device_class: r})]
        rooms = [margin(v, marker.op) for v in verdicts]
        held = all(v.status == "holds" for v in verdicts)
        room = min((x for x in rooms if x is not None), default=None)
        timed = any(timing_based(runs[0], side) for side in (marker.lhs, marker.rhs))
        verdict = "holds in every run" if held else "FAILS in some run"
        note = "" if room is None else f", worst room {room:.2f}x"
        if held and timed and room is not None and room < MARGIN_RULE:
            note += f" (below the {MARGIN_RULE}x rule for a timing claim: loosen the threshold)"
        worst_ok &= held
        print(f"  {marker.source}: {verdict}{note}")
    return 0 if worst_ok else 1


if __name__ == "__main__":
    sys.exit(main())
