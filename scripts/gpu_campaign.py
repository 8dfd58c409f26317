"""One GPU window -> checked records: `python -m scripts.gpu_campaign --out DIR [--budget-min N] [--commit SHA]`.

What a lent GPU machine runs (docs/contributing.md, "GPU records"): a preflight (a missing required package stops it
within seconds), then at full size every demo of the GPU set (records/gpu_set.toml) with no fresh GPU record, headline
first in declared order, then the shorter first, each in its own process group under a hard limit; the archives and
the summary under DIR are rewritten after every demo. No demo starts unless 1.5x its estimate is left of the budget;
staged records count as done (a rerun resumes). `--plan [CLASS] [--budget-min N] [--calls K]` prints the plan, no GPU.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import math
import os
import re
import sys
import tarfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from demos.harness.provenance import COMMIT_ENV, git_state
from records import atomic, catalog, devices, digest as digests, gpu_set, plausibility, record
from records.errors import OneLineParser, fail
from records.paths import CACHE_DIR, DEMOS_DIR, RESULTS_DIR, STAGED_RESULTS_ENV, shown
from scripts import regen
from scripts._preflight import preflight


ESTIMATES_FILE = Path(__file__).with_name("gpu_estimates.toml")
ESTIMATES = tomllib.loads(ESTIMATES_FILE.read_text(encoding="utf-8"))  # seconds: start-up, T6 training, demos
STAGING, T6_MODEL_CACHE = CACHE_DIR / "gpu-campaign", CACHE_DIR / "models"
CALL_BUDGET_S, START_MARGIN = 9 * 60, 1.5  # a device call: at most 10 min, less the start and the transfers


@dataclass
class Row:
    demo: str
    status: str  # ok | failed | timeout | busy | fresh | interrupted | not started (budget, no GPU, interrupted)
    seconds: float | None = None
    estimate_s: float | None = None
    estimate_from: str = ""
    limit_s: float | None = None
    reason: str = ""


@dataclass
class Campaign:
    out: Path
    device_class: str
    commit: str | None
    budget_s: float
    started_utc: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    preflight: dict = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)


def last_gpu_wall_time(demo: str, device_class: str, results_dirs: list[Path]) -> tuple[float, str] | None:
    """(wall_time_s plus its measured start-up, where from) of the demo's GPU record, this class first."""
    paths = [p for folder in results_dirs for p in sorted((folder / demo).glob("*.json")) if p.stem != "cpu"]
    for path in sorted(paths, key=lambda p: p.stem != device_class):
        with contextlib.suppress(record.RecordError):  # a malformed record tells nothing
            rec = record.load(path)
            if not rec.is_fixture:
                parts = rec.get("wall_time_parts") or {}
                split = ", ".join(f"{k[:-2].replace('_', ' ')} {v:.0f} s" for k, v in parts.items() if k != "startup_s")
                return (rec.wall_time_s + parts.get("startup_s", ESTIMATES["process_start_s"]),
                        f"record {path.stem}.json" + (f": {split}" if split else ""))
    return None


def estimate(demo: catalog.Demo, device_class: str, results_dirs: list[Path], model_cached: bool) -> tuple[float, str]:
    """Seconds the demo should take, process start included, and where from: its GPU record, else the estimates file
    (its line, the start-up, a share per package its code imports, the T6 training if it calls trained_models)."""
    measured = last_gpu_wall_time(demo.name, device_class, results_dirs) if device_class != "cpu" else None
    if measured:
        return measured[0], f"measured: {measured[1]}"
    shares, code = ESTIMATES["import_start_s"], demo.sources()  # the demo and the local modules it imports
    packages = sorted(set().union(*(digests.third_party_packages(f) for f in code)) & set(shares))
    seconds = ESTIMATES["demos"].get(demo.name, ESTIMATES["default_s"]) + ESTIMATES["process_start_s"]
    seconds += sum(shares[p] for p in packages)
    source = "estimated" + (f" (start with {', '.join(packages)})" if packages else "")
    calls = [n.func for path in code for n in ast.walk(ast.parse(path.read_bytes())) if isinstance(n, ast.Call)]
    if not model_cached and any("trained_models" in (getattr(f, "id", 0), getattr(f, "attr", 0)) for f in calls):
        return seconds + ESTIMATES["t6_training_s"], source + " + T6 model training"
    return seconds, source


def plan(demos: dict[str, catalog.Demo], device_class: str, results_dirs: list[Path], only: list[str],
         force: bool, model_cached: bool) -> list[Row]:
    """The demos asked for, in the campaign's order: those to run (the headline demos in their declared order, then
    the shorter first, a reader after what it reads), then those with a fresh record of any GPU class. One pays
    for the T6 model's training."""
    rank, rows, charged = {name: i for i, name in enumerate(gpu_set.declared().headline)}, [], False
    for demo in (d for d in demos.values() if not only or d.name in only):
        est, source = estimate(demo, device_class, results_dirs, model_cached)
        gpus = {p.stem for f in results_dirs for p in (f / demo.name).glob("*.json")} - {"cpu"}  # either GPU counts
        states = {catalog.record_freshness(demo, c, f) for c in gpus | {device_class} for f in results_dirs}
        state = next(s for s in ("fresh", "stale", "missing") if s in states)
        runs = state != "fresh" or force
        if runs and "training" in source:
            if charged:
                est, source = est - ESTIMATES["t6_training_s"], source.replace("training", "trained by an earlier demo")
            charged = True
        rows.append(Row(demo.name, "" if runs else "fresh", estimate_s=est, estimate_from=source,
                        reason=f"record {state}" if runs else "its record for this class is fresh: not re-run"))
    rows.sort(key=lambda r: (r.status == "fresh", rank.get(r.demo, len(rank)), r.estimate_s))
    order = [d.name for d in catalog.readers_last([demos[r.demo] for r in rows])]  # stable otherwise
    return sorted(rows, key=lambda r: (r.status == "fresh", order.index(r.demo)))


def pack_calls(c: "Campaign", demos: dict, results_dirs: list[Path], only: list[str], force: bool, calls: int) -> None:
    """The plan as calls of c.budget_s each, each on a fresh machine (no trained T6 model): in order, every demo that
    fits 1.5 times in what is left of a call starts in it (the campaign's own rule), the rest wait for a later call."""
    c.rows = plan(demos, c.device_class, results_dirs, only, force, model_cached=False)
    for call in range(1, calls + 1):
        left, cached = c.budget_s - ESTIMATES["preflight_s"], False
        for row in (r for r in c.rows if not r.status):
            est, source = estimate(demos[row.demo], c.device_class, results_dirs, cached)
            if START_MARGIN * est <= left:
                row.status, row.estimate_s, row.estimate_from, left = f"call {call}", est, source, left - est
                cached |= "training" in source
    for row in (r for r in c.rows if not r.status):
        row.status = "later"


def gate(demos: dict, demo: str, device_class: str, results_dir: Path) -> list[str]:
    """What the publication gate (records/plausibility.py, as the check and gpu_unpack apply it) says of a record."""
    path = record.record_path(results_dir, demo, device_class)
    try:
        return plausibility.problems(record.load(path), f"{demo}/{device_class}.json", demo, device_class, demos)
    except record.RecordError as e:
        return [str(e)]


def _tar(paths: list[Path], arcname) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in (p for p in paths if p.is_file()):
            tar.add(path, arcname=arcname(path), recursive=False)
    return buffer.getvalue()


def summary_markdown(c: Campaign, remaining: list[str]) -> str:
    used, todo = sum(r.seconds or 0 for r in c.rows), sum(r.estimate_s or 0 for r in c.rows if r.status != "fresh")
    lines = [f"# GPU campaign on {c.preflight.get('gpu_name') or c.device_class} (class {c.device_class})", "",
             f"commit {c.commit or 'UNKNOWN'}; started {c.started_utc}; budget {c.budget_s / 60:.1f} min; "
             f"demo time used {used / 60:.1f} min", ""]
    if c.preflight.get("error"):
        lines += [f"preflight: {c.preflight['error']}", ""]
    if missing := ", ".join(c.preflight.get("missing_packages") or []):
        lines += [f"missing packages (demos record what they could not run): {missing}", ""]
    lines += ["| demo | status | wall time (s) | estimate (s) | limit (s) | reason |", "|---|---|---|---|---|---|"]
    for r in c.rows:
        wall, lim = ("" if v is None else f"{v:.0f}" for v in (r.seconds, r.limit_s))
        est = "" if r.estimate_s is None else f"{r.estimate_s:.0f} ({r.estimate_from})"
        reason = r.reason.replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(f"| {r.demo} | {r.status} | {wall} | {est} | {lim} | {reason} |")
    return "\n".join(lines + ["", f"remaining (budget): {', '.join(remaining) or 'none'}",
                              f"estimated GPU time of every demo this call had to run: {todo / 60:.1f} min, about "
                              f"{math.ceil(todo / CALL_BUDGET_S)} call(s) of {CALL_BUDGET_S // 60} min "
                              f"(measured so far: {used / 60:.1f} min)", ""])


def write_outputs(c: Campaign, results_dir: Path, log_dir: Path) -> None:
    """Rewrite the fixed set of files under --out: records and logs archives, the summary, the preflight."""
    remaining = [r.demo for r in c.rows if r.status.startswith("not started") or r.status == "interrupted"]
    summary = {**{k: v for k, v in asdict(c).items() if k not in ("out", "rows", "preflight")},
               "out": str(c.out), "rows": [asdict(r) for r in c.rows], "remaining": remaining,
               "demo_seconds_used": sum(r.seconds or 0 for r in c.rows), "estimates_file": shown(ESTIMATES_FILE)}
    records, logs = sorted(results_dir.glob(f"*/{c.device_class}.json")), sorted(log_dir.glob("*.log"))
    for name, data in (("records.tar.gz", _tar(records, lambda p: f"docs/results/{p.parent.name}/{p.name}")),
                       ("logs.tar.gz", _tar([*logs, c.out / "preflight.json"], lambda p: f"logs/{p.name}")),
                       ("summary.json", (json.dumps(summary, indent=1) + "\n").encode()),
                       ("summary.md", summary_markdown(c, remaining).encode())):
        atomic.write_bytes_via(c.out / name, lambda tmp, data=data: Path(tmp).write_bytes(data))


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="gpu_campaign", description=__doc__.splitlines()[0])
    goal = parser.add_mutually_exclusive_group(required=True)
    goal.add_argument("--out", type=Path, help="where the archives and the summary go ($OUT)")
    goal.add_argument("--plan", nargs="?", const="h100", metavar="CLASS", help="print the plan (default h100) and exit")
    parser.add_argument("--budget-min", type=float, default=8.5, help="minutes for this call incl. the preflight (8.5)")
    parser.add_argument("--calls", type=int, default=2, help="with --plan: how many calls of --budget-min to plan (2)")
    parser.add_argument("--commit", help=f"the commit being measured (default: ${COMMIT_ENV}, else git)")
    parser.add_argument("--only", default="", help="comma-separated demo names (default: every demo)")
    parser.add_argument("--force", action="store_true", help="run even demos whose record is fresh")
    parser.add_argument("--demo-limit-s", type=regen.seconds, help="a fixed hard limit per demo, in seconds")
    for name, default in (("--device", "cuda"), ("--size", "full"), ("--demos-dir", DEMOS_DIR),
                          ("--staging", STAGING), ("--published-dir", RESULTS_DIR)):  # for tests: CPU, stand-ins
        parser.add_argument(name, default=default, type=type(default), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    wall_start, out = time.perf_counter(), args.out and args.out.absolute()
    if out and out.exists() and not out.is_dir():
        fail(f"--out {args.out}: is a file, not a folder")
    commit = None if args.plan else args.commit or os.environ.get(COMMIT_ENV) or git_state()["commit"]
    if args.plan is None and not re.fullmatch(r"[0-9a-f]{4,64}", commit or ""):
        fail(f"--commit {commit or '(none)'}: expected a commit hash (4 to 64 lower-case hex digits, as `git rev-parse "
             f"HEAD` prints), from --commit or ${COMMIT_ENV}: the GPU machine's copy has no .git")
    if not (0 < args.budget_min <= 60 and 1 <= args.calls <= 20):  # nan fails every comparison: refused too
        fail(f"--budget-min {args.budget_min:g} / --calls {args.calls}: expected 0 < minutes <= 60 and 1 to 20 calls")
    try:
        demos = catalog.discover(args.demos_dir.absolute())
    except ValueError as e:
        fail(str(e))
    only = [d.strip() for d in args.only.split(",") if d.strip()]
    if unknown := [d for d in only if d not in demos]:
        fail(f"--only: unknown demo {unknown[0]!r}: known demos are {', '.join(demos)}")
    if args.device != "cpu":  # a GPU run measures the GPU set only; a CPU-only demo has no GPU record to make
        if cpu_only := [d for d in only if not gpu_set.declared().needs_gpu(d)]:
            fail(f"--only: {cpu_only[0]} is CPU-only by declaration (records/gpu_set.toml), so it never runs on a GPU")
        demos = {name: demo for name, demo in demos.items() if gpu_set.declared().needs_gpu(name)}
    results_dir, log_dir = args.staging.absolute() / "results", args.staging.absolute() / "logs"
    looked_in = [results_dir, args.published_dir.absolute()]
    if args.plan:  # each call as a fresh GPU machine sees it (no trained T6 model)
        c = Campaign(Path("-"), args.plan, "(a plan)", args.budget_min * 60)
        pack_calls(c, demos, looked_in, only, args.force, args.calls)
        print(summary_markdown(c, [r.demo for r in c.rows if r.status == "later"]))
        for k, rows in ((k, [r for r in c.rows if r.status == f"call {k}"]) for k in range(1, args.calls + 1)):
            used = (ESTIMATES["preflight_s"] + sum(r.estimate_s for r in rows)) / 60
            print(f"call {k}: {len(rows)} demos, {used:.1f} of {args.budget_min:g} min (preflight included): "
                  f"{', '.join(r.demo for r in rows) or 'none'}")
        return 0

    env = {**os.environ, COMMIT_ENV: commit, STAGED_RESULTS_ENV: str(results_dir), "PYTHONUNBUFFERED": "1",
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TOKENIZERS_PARALLELISM": "false"}
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("*.log"):  # logs of this call only; records stay (they are the resume state)
        old.unlink()
    info = preflight(args.device, env, args.demos_dir.absolute())
    out.mkdir(parents=True, exist_ok=True)
    (out / "preflight.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    if need := info["missing_required"]:
        fail(f"missing required package(s): {', '.join(need)}; nothing run (install them first: docs/contributing.md, "
             "GPU records, carries their wheels)")
    if args.device != "cpu" and not info.get("gpu_name"):  # the preflight failed or timed out: ask torch here
        with contextlib.suppress(Exception):
            import torch
            info["gpu_name"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        info["cuda_available"] = bool(info.get("gpu_name"))
    gpu = info.get("cuda_available") and info.get("gpu_name")
    device_class = "cpu" if args.device == "cpu" else (devices.gpu_class(info["gpu_name"]) if gpu else "none")
    campaign = Campaign(out, device_class, commit, args.budget_min * 60, preflight=info)
    if device_class == "none":
        why = info.get("error", "torch.cuda.is_available() is False")
        campaign.rows = [Row(d, "not started (no GPU)", reason=f"no CUDA GPU visible to PyTorch: {why}") for d in demos]
        write_outputs(campaign, results_dir, log_dir)
        print(f"gpu_campaign: no CUDA GPU visible ({why}); nothing run; see {out / 'summary.md'}", file=sys.stderr)
        return 2
    print(f"gpu_campaign: {info.get('gpu_name', 'cpu')} (class {device_class}), commit {commit}, budget "
          f"{args.budget_min:.1f} min; preflight {info['wall_s']} s; missing packages: "
          f"{', '.join(info['missing_packages']) or 'none'}", flush=True)

    campaign.rows = plan(demos, device_class, looked_in, only, args.force, any(T6_MODEL_CACHE.glob("full-*.pt")))
    todo, current, console = [r for r in campaign.rows if not r.status], None, regen.Console(highlight=False, width=200)
    write_outputs(campaign, results_dir, log_dir)
    try:
        with regen.signals_raise():
            for row in todo:  # estimated again: the T6 model may have been trained meanwhile
                cached = any(T6_MODEL_CACHE.glob("full-*.pt"))
                row.estimate_s, row.estimate_from = estimate(demos[row.demo], device_class, looked_in, cached)
                left = campaign.budget_s - (time.perf_counter() - wall_start)  # preflight and packing count too
                if START_MARGIN * row.estimate_s > left:  # a limit barely above the estimate would waste the time
                    row.status = "not started (budget)"
                    row.reason = f"estimated {row.estimate_s:.0f} s, {max(left, 0):.0f} s of the budget left"
                else:  # the hard limit: generous against the estimate (3x, at least +90 s), never past the budget
                    limit = args.demo_limit_s or max(3 * row.estimate_s, row.estimate_s + 90)
                    current, row.limit_s = row, max(1.0, min(limit, left))
                    print(f"gpu_campaign: {row.demo} (estimate {row.estimate_s:.0f} s, limit {row.limit_s:.0f} s, "
                          f"{left:.0f} s of budget left)", flush=True)
                    outcome = regen.run_demo(demos[row.demo], args.device, args.size, results_dir, console,
                                             row.limit_s, env, device_class=device_class, log_dir=log_dir)
                    current, row.seconds, row.status = None, outcome.seconds, outcome.status
                    row.reason = outcome.detail if not outcome.ok else f"wrote {row.demo}/{device_class}.json"
                    if outcome.ok and device_class != "cpu" and (problems := gate(demos, row.demo, device_class,
                                                                                  results_dir)):
                        row.status, row.reason = "refused by the gate", problems[0]  # gpu_unpack will refuse it too
                    print(f"gpu_campaign: {row.demo}: {row.status} in {outcome.seconds:.0f} s", flush=True)
                write_outputs(campaign, results_dir, log_dir)
    except (KeyboardInterrupt, SystemExit) as stop:  # stopped from outside (Ctrl-C, the time limit): keep what ran
        for row in (r for r in todo if not r.status):  # the demo that was running, then those not reached
            row.status = "interrupted" if row is current else "not started (interrupted)"
            row.reason = "the campaign was stopped " + ("while this demo ran" if row is current else "first")
        write_outputs(campaign, results_dir, log_dir)
        print(f"gpu_campaign: interrupted; the records that finished are kept and packed under {out}", file=sys.stderr)
        raise SystemExit(130 if isinstance(stop, KeyboardInterrupt) else stop.code) from None  # one line, no traceback
    write_outputs(campaign, results_dir, log_dir)
    print(summary_markdown(campaign, [r.demo for r in todo if r.status.startswith("not started")]))
    print(f"gpu_campaign: done in {time.perf_counter() - wall_start:.0f} s; files under {out}", flush=True)
    return 0 if all(r.status in ("ok", "fresh", "not started (budget)") for r in campaign.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
