"""Regenerate result records: `python -m scripts.regen [DEMO ...] [--stale] [--device cpu|cuda|auto]`.

Runs each demo in its own process (`python -m demos.<topic>.<demo> --device ...`), shows progress,
and ends with a summary table (demo, device, status, wall time). A failing demo is reported with
its last error line and the others still run; the exit code is then 1. A demo writes its record
only when it finished, atomically, so a failure leaves the previous record untouched. Each demo's
full output is kept in .cache/regen/<demo>-<device>.log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table


from demos.harness.cli import DEVICES, SIZE_PRESETS
from demos.harness.errors import OneLineParser, fail
from demos.harness.paths import CACHE_DIR, REPO_ROOT, RESULTS_DIR
from scripts import catalog

LOG_DIR = CACHE_DIR / "regen"


@dataclass
class Outcome:
    demo: str
    device: str
    ok: bool
    seconds: float
    detail: str  # the record written, or the error's last line


def resolve_device_class(device: str) -> str:
    """The device class a run on --device will record: needed to find stale records."""
    if device == "cpu":
        return "cpu"
    import torch

    from demos.harness.device import gpu_class

    if not torch.cuda.is_available():
        if device == "cuda":
            fail("--device cuda asked for, but no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False)")
        return "cpu"
    return gpu_class(torch.cuda.get_device_name(0))


def is_stale(demo: catalog.Demo, device_class: str, results_dir: Path) -> bool:
    """Missing, malformed or made by other code than the demo's current code."""
    return catalog.record_freshness(demo, device_class, results_dir) != "fresh"


def run_demo(demo: catalog.Demo, device: str, size: str | None, results_dir: Path, console: Console,
             timeout: float, env: dict | None = None) -> Outcome:
    command = [sys.executable, "-u", "-m", demo.module, "--device", device, "--results-dir", str(results_dir)]
    if size:
        command += ["--size", size]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{demo.name}-{device}.log"
    started = time.perf_counter()
    last_lines: list[str] = []
    with open(log_path, "w", encoding="utf-8") as log, console.status(f"{demo.name} on {device} ...") as status:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, start_new_session=True)
        try:
            for line in proc.stdout:
                log.write(line)
                line = line.rstrip()
                if line:
                    last_lines = (last_lines + [line])[-30:]
                    elapsed = time.perf_counter() - started
                    if console.is_terminal:
                        status.update(f"{demo.name} on {device} [{elapsed:5.0f} s] {line[:100]}")
                    else:
                        console.print(f"  [{demo.name} {elapsed:5.0f}s] {line}", markup=False, highlight=False)
                if time.perf_counter() - started > timeout:
                    proc.kill()
                    last_lines.append(f"timed out after {timeout:.0f} s")
                    break
            proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            raise
    seconds = time.perf_counter() - started
    if proc.returncode == 0:
        written = [line for line in last_lines if line.startswith("wrote ")]
        return Outcome(demo.name, device, True, seconds, written[-1].removeprefix("wrote ") if written else "ok")
    error = next((line for line in reversed(last_lines) if line.strip() and not line.startswith(" ")), "failed")
    return Outcome(demo.name, device, False, seconds, f"{error} (exit {proc.returncode}; log: {log_path.relative_to(REPO_ROOT)})")


def summary_table(outcomes: list[Outcome]) -> Table:
    table = Table(title="regen summary")
    for col in ("demo", "device", "status", "wall time", "record / error"):
        table.add_column(col)
    for o in outcomes:
        table.add_row(o.demo, o.device, "[green]ok[/]" if o.ok else "[red]FAILED[/]", f"{o.seconds:.1f} s",
                      o.detail, style=None if o.ok else "red")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="regen", description=__doc__.splitlines()[0])
    parser.add_argument("demos", nargs="*", help="demo names (default: all)")
    parser.add_argument("--stale", action="store_true", help="only demos whose record is missing or stale")
    parser.add_argument("--device", default="cpu", help="cpu (default) | cuda | auto")
    parser.add_argument("--size", default=None, help="tiny | small | full (default: the device's)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per demo")
    args = parser.parse_args(argv)
    if args.device not in DEVICES:
        fail(f"unknown device {args.device!r}: choose one of {', '.join(DEVICES)}")
    if args.size is not None and args.size not in SIZE_PRESETS:
        fail(f"unknown size {args.size!r}: choose one of {', '.join(SIZE_PRESETS)}")
    try:
        demos = catalog.discover()
    except ValueError as e:
        fail(str(e))
    unknown = [d for d in args.demos if d not in demos]
    if unknown:
        fail(f"unknown demo {unknown[0]!r}: known demos are {', '.join(demos)}")
    device_class = resolve_device_class(args.device)  # also refuses --device cuda without a GPU
    chosen = [demos[d] for d in args.demos] if args.demos else list(demos.values())
    if args.stale:
        chosen = [d for d in chosen if is_stale(d, device_class, args.results_dir)]

    console = Console(highlight=False)
    if not console.is_terminal:  # CI logs: full lines, no wrapping at 80 columns
        console = Console(highlight=False, width=200)
    if not chosen:
        console.print(f"regen: every record for {device_class} is fresh; nothing to do")
        return 0
    console.print(f"regen: {len(chosen)} demo(s) on {args.device} ({device_class}): {', '.join(d.name for d in chosen)}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    outcomes = []
    for i, demo in enumerate(chosen, 1):
        console.print(f"[{i}/{len(chosen)}] {demo.name} ({demo.module})")
        outcome = run_demo(demo, args.device, args.size, args.results_dir, console, args.timeout, env)
        console.print(f"[{i}/{len(chosen)}] {demo.name}: {'ok' if outcome.ok else 'FAILED'} in {outcome.seconds:.1f} s")
        outcomes.append(outcome)
    console.print(summary_table(outcomes))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        console.print(f"regen: {len(failed)} of {len(outcomes)} failed; their previous records are untouched")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
