"""The check command: `python -m scripts.check` (also `make check`). Runs no demo.

It fails (exit 1) on
- a demo without a CPU record, or whose CPU record is stale (the demo's code changed since);
- a record whose measured rate exceeds its device's datasheet peak (scripts/datasheets.toml);
- a page marker naming an unknown demo or metric, or a claim that a record contradicts;
- a topic page (docs/topics/*.md) missing front matter or a required section;
and exits 2 on a malformed record, naming the file and the field. Stale GPU records and
devices without a datasheet are warnings: the page shows their badge until someone re-measures.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import yaml

from demos.harness import record
from demos.harness.errors import OneLineParser
from demos.harness.paths import REPO_ROOT, RESULTS_DIR
from scripts import catalog
from scripts.claims import judge, target_devices
from scripts.markers import MarkerError, find
from scripts.render import fmt_number
from scripts.site_pages import FRONT_MATTER, split_sections

DOCS_DIR = REPO_ROOT / "docs"
REQUIRED_SECTIONS = ["Questions", "30-second answer", "Full answer", "Measured", "Follow-up questions", "Pitfalls",
                     "Further reading"]
DIFFICULTIES = {"easy", "medium", "hard"}


class Report:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.malformed = False

    def error(self, message: str) -> None:
        self.errors.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def rel(path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


# -- records --------------------------------------------------------------------------------------
def check_records(report: Report, demos: dict[str, catalog.Demo], results_dir: Path) -> dict[str, dict]:
    """Load every record; returns {demo: {device_class: record}} for the well-formed ones."""
    loaded: dict[str, dict] = {}
    for path in catalog.record_files(results_dir):
        demo, device_class = path.parent.name, path.stem
        try:
            rec = record.load(path)
        except record.RecordError as e:
            report.error(str(e).replace(str(path), rel(path)))
            report.malformed = True
            continue
        if rec["demo"] != demo or rec["device_class"] != device_class:
            report.error(f"{rel(path)}: demo/device_class say {rec['demo']}/{rec['device_class']}, "
                         f"but the file sits at {demo}/{device_class}.json")
            continue
        if demo not in demos:
            report.error(f"{rel(path)}: no demo named {demo!r} exists under demos/ (remove the record or the typo)")
            continue
        loaded.setdefault(demo, {})[device_class] = rec
    return loaded


def check_freshness(report: Report, demos: dict[str, catalog.Demo], records: dict[str, dict]) -> None:
    for name, demo in demos.items():
        recs = records.get(name, {})
        if "cpu" not in recs:
            report.error(f"{rel(demo.path)}: no CPU record; run `python -m scripts.regen {name} --device cpu`")
        for device_class, rec in recs.items():
            if catalog.freshness(demo, rec) == "fresh":
                continue
            message = (f"docs/results/{name}/{device_class}.json is stale: {rel(demo.path)} or a module it imports "
                       f"changed since it was measured ({rec['provenance']['utc']})")
            if device_class == "cpu":
                report.error(message + f"; run `python -m scripts.regen {name} --device cpu`")
            else:
                report.warn(message + "; the page shows it as such until it is re-measured on that GPU")


def check_plausibility(report: Report, records: dict[str, dict]) -> None:
    sheets = catalog.datasheets()
    for name, recs in records.items():
        for device_class, rec in recs.items():
            sheet = sheets.get(device_class)
            where = f"docs/results/{name}/{device_class}.json"
            if sheet is None:
                report.warn(f"{where}: no datasheet for device class {device_class!r}; add it to scripts/datasheets.toml")
                continue
            for section in ("metrics", "ceilings"):
                for metric_name, m in rec[section].items():
                    if m["unit"] == "GB/s":
                        peak, what = sheet["memory_gbps"], "memory bandwidth"
                    elif m["unit"] == "TFLOP/s":
                        dtype = m.get("dtype")
                        peak = sheet["tflops"].get(dtype) if dtype else max(sheet["tflops"].values())
                        what = f"{dtype or 'best'} TFLOP/s"
                        if peak is None:
                            continue
                    else:
                        continue
                    if m["value"] > peak:
                        report.error(f"{where}: {section}.{metric_name} = {fmt_number(m['value'])} {m['unit']} exceeds "
                                     f"the {sheet['label']} datasheet {what} of {fmt_number(peak)}: a unit slip, a "
                                     f"cache-resident measurement or a timing without synchronisation")


# -- pages ----------------------------------------------------------------------------------------------

def check_topic_structure(report: Report, path: Path, text: str, demos: dict[str, catalog.Demo]) -> None:
    """Front matter and the curriculum's sections, in order, with the collapsible parts collapsible."""
    where = rel(path)
    m = FRONT_MATTER.match(text)
    if not m:
        report.error(f"{where}: no front matter; start the page with ---, title, difficulty, tags, demos, ---")
        return
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        report.error(f"{where}: front matter is not valid YAML ({str(e).splitlines()[0]})")
        return
    for key in ("title", "difficulty", "tags", "demos"):
        if key not in meta:
            report.error(f"{where}: front matter lacks '{key}:'")
    if "difficulty" in meta and meta["difficulty"] not in DIFFICULTIES:
        report.error(f"{where}: difficulty is {meta['difficulty']!r}; use easy, medium or hard")
    if "tags" in meta and not (isinstance(meta["tags"], list) and meta["tags"]):
        report.error(f"{where}: tags must be a non-empty list, e.g. tags: [compilers, kernels]")
    page_demos = meta.get("demos") or []
    for demo in page_demos if isinstance(page_demos, list) else []:
        if demo not in demos:
            report.error(f"{where}: front matter names demo {demo!r}, which does not exist under demos/")

    headings, sections = split_sections(text)
    missing = [s for s in REQUIRED_SECTIONS if s not in headings]
    if missing:
        report.error(f"{where}: missing section(s) {', '.join('## ' + s for s in missing)} (required, in order: "
                     f"{', '.join(REQUIRED_SECTIONS)})")
    present = [h for h in headings if h in REQUIRED_SECTIONS]
    if not missing and present != REQUIRED_SECTIONS:
        report.error(f"{where}: sections out of order; expected {', '.join(REQUIRED_SECTIONS)}")
    if "Questions" in sections:
        bullets = [line.strip() for line in sections["Questions"].splitlines() if re.match(r"\s*[-*] ", line)]
        if not bullets:
            report.error(f"{where}: '## Questions' lists no question; write '- The question? (medium)'")
        for line in bullets:
            if not re.search(r"\((easy|medium|hard)\)\s*$", line):
                report.error(f"{where}: question without a difficulty: {line[:70]!r}; end it with (easy), (medium) "
                             "or (hard)")
    if "Full answer" in sections and "??? " not in sections["Full answer"]:
        report.error(f"{where}: '## Full answer' must be collapsible: put it in a '??? abstract \"Full model answer\"' block")
    if "Follow-up questions" in sections and "??? question" not in sections["Follow-up questions"]:
        report.error(f"{where}: '## Follow-up questions' needs '??? question \"...\"' blocks (question, hidden answer)")
    if "Measured" in sections:
        for demo in page_demos if isinstance(page_demos, list) else []:
            if f"results {demo}" not in re.sub(r"\s+", " ", sections["Measured"]):
                report.error(f"{where}: '## Measured' does not show {{{{ results {demo} }}}}")


def check_pages(report: Report, demos: dict[str, catalog.Demo], records: dict[str, dict],
                docs_dir: Path = DOCS_DIR) -> int:
    """Markers on every page (known demo and metric, claims not contradicted); structure of topic pages."""
    claims = 0
    for path in sorted(docs_dir.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        if path.parent == docs_dir / "topics":
            check_topic_structure(report, path, text, demos)
        try:
            markers = find(text, rel(path))
        except MarkerError as e:
            report.error(str(e))
            continue
        for marker in markers:
            if marker.demo not in demos:
                report.error(f"{marker.source}: no demo named {marker.demo!r}")
                continue
            recs = records.get(marker.demo, {})
            if marker.kind == "artifact":
                if marker.device in recs and marker.artifact not in recs[marker.device]["artifacts"]:
                    report.error(f"{marker.source}: the {catalog.device_label(marker.device)} record of "
                                 f"{marker.demo} has no artifact {marker.artifact!r}")
                continue
            # A referenced metric must exist in every record of the devices the marker targets; a
            # device without a record yet (a GPU, usually) cannot be checked and shows "not measured".
            refs = [marker.metric] if marker.kind == "metric" else [s for s in (marker.lhs, marker.rhs)
                                                                     if not isinstance(s, float)]
            targets = [marker.device] if marker.kind == "metric" else target_devices(marker.device, recs)
            for ref in refs:
                for device_class in targets:
                    if device_class in recs and ref.name not in recs[device_class]["metrics"]:
                        report.error(f"{marker.source}: the {catalog.device_label(device_class)} record of "
                                     f"{marker.demo} has no metric {ref.name!r}")
            if marker.kind == "claim":
                claims += 1
                for v in judge(marker, recs):
                    if v.status == "contradicted":
                        report.error(f"{marker.source}: contradicted on {catalog.device_label(v.device_class)}: "
                                     f"{fmt_number(v.lhs)} {marker.op} {fmt_number(v.rhs)} is false")
    return claims


def nav_entries(mkdocs_yml: Path) -> set[str]:
    """Every file named in mkdocs.yml's nav."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, str):
            found.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk((yaml.safe_load(mkdocs_yml.read_text(encoding="utf-8")) or {}).get("nav", []))
    return found


def check_nav(report: Report, demos: dict[str, catalog.Demo], docs_dir: Path) -> None:
    """Readers find pages through the navigation: every topic page and demo notebook must be in it."""
    mkdocs_yml = docs_dir.parent / "mkdocs.yml"
    if not mkdocs_yml.exists():
        return
    nav = nav_entries(mkdocs_yml)
    for path in sorted((docs_dir / "topics").glob("*.md")):
        if f"topics/{path.name}" not in nav:
            report.error(f"{rel(path)} is not in mkdocs.yml's nav: add `- Title: topics/{path.name}` under Topics")
    for demo in demos.values():
        uri = demo.path.relative_to(REPO_ROOT).as_posix()
        if uri not in nav:
            report.error(f"{uri} is not in mkdocs.yml's nav: add `- \"{demo.path.name}\": {uri}` under Demo notebooks")


def check_todos(report: Report, demos: dict[str, catalog.Demo], docs_dir: Path) -> None:
    """Scaffolded text still to write: a warning per file, with the first line to look at."""
    files = sorted((docs_dir / "topics").glob("*.md")) + [d.path for d in demos.values()]
    for path in files:
        lines = [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "TODO" in line]
        if lines:
            report.warn(f"{rel(path)}:{lines[0]}: {len(lines)} TODO marker(s) left to write")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="check", description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    report = Report()
    try:
        demos = catalog.discover()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    records = check_records(report, demos, args.results_dir)
    check_freshness(report, demos, records)
    check_plausibility(report, records)
    claims = check_pages(report, demos, records, args.docs_dir)
    check_todos(report, demos, args.docs_dir)
    check_nav(report, demos, args.docs_dir)

    for w in report.warnings:
        print(f"warning: {w}")
    for e in report.errors:
        print(f"error: {e}", file=sys.stderr)
    n_records = sum(len(r) for r in records.values())
    print(f"check: {len(demos)} demos, {n_records} records, {claims} claims; "
          f"{len(report.errors)} errors, {len(report.warnings)} warnings ({time.perf_counter() - started:.1f} s)")
    if report.malformed:
        return 2
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
