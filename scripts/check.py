"""The check command: `python -m scripts.check` (also `make check`). Runs no demo.

It fails (exit 1) on
- a demo without a CPU record, or whose CPU record is stale (the demo's code changed since);
- a record whose measured rate exceeds its device's datasheet peak (records/datasheets.toml);
- a page marker naming an unknown demo or metric, or a claim that a record contradicts;
- a topic page (docs/topics/*.md) missing front matter or a required section;
- a sizing problem whose stated answer is not its computation (website/sizing_problems.toml);
and exits 2 on a malformed record, naming the file and the field. Stale GPU records and
devices without a datasheet are warnings: the page shows their badge until someone re-measures.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import yaml

from records import catalog, datasheets, devices, gpu_set, plausibility, record
from records.errors import OneLineParser
from records.paths import REPO_ROOT, RESULTS_DIR

datasheets.require()  # the website's modules read it as they load: a bad entry is one line, not a traceback
from website.claims import MARGIN_RULE, judge, known_device, margin, target_devices, timing_based
from website import page_safety
from website.markers import MARKER, MarkerError, find, strays, transform_outside_code
from records.numbers import fmt_pair
from website.site_pages import (ANSWERS_SECTION, FRONT_MATTER, mkdocs_config, QUESTION, SPOKEN_WORD_LIMIT, FrontMatterError,
                                front_matter, answers, short_answers,
                                parse_topic, spoken_words, split_sections)

DOCS_DIR = REPO_ROOT / "docs"
REQUIRED_SECTIONS = ["Questions", ANSWERS_SECTION, "Measured", "Follow-up questions", "Pitfalls",
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
    """Load every record; returns {demo: {device_class: Record}} for the well-formed ones that are where they
    say they belong (records/plausibility.py's identity rules)."""
    loaded: dict[str, dict] = {}
    for path in catalog.record_files(results_dir):
        demo, device_class = path.parent.name, path.stem
        if not devices.is_class(device_class):
            report.error(f"{rel(path)}: the file name is not a device class (lower-case letters, digits and '-')")
            report.malformed = True
            continue
        try:
            rec = record.load(path)
        except record.RecordError as e:
            report.error(str(e).replace(str(path), rel(path)))
            report.malformed = True
            continue
        problems = plausibility.identity_problems(rec, rel(path), demo, device_class, demos)
        for problem in problems:
            report.error(problem)
        if not problems:
            loaded.setdefault(demo, {})[device_class] = rec
    return loaded


def check_commits(report: Report, records: dict[str, dict]) -> None:
    """Every record names a commit of this repository's history (a made-up one, 0000..., says nothing about what
    measured it). A shallow clone (a CI checkout of depth 1) cannot tell, and says so."""
    import subprocess

    commits = {rec.provenance.commit: f"docs/results/{demo}/{cls}.json" for demo, recs in records.items()
               for cls, rec in recs.items() if rec.provenance.commit}
    git = ["git", "-C", str(REPO_ROOT)]
    try:
        shallow = subprocess.run([*git, "rev-parse", "--is-shallow-repository"], capture_output=True, text=True,
                                 timeout=30)
        if shallow.returncode != 0 or shallow.stdout.strip() != "false":
            report.warn("the records' commits were not checked against the history (no git history here, or a "
                        "shallow clone: fetch it whole, e.g. actions/checkout's fetch-depth: 0)")
            return
        found = subprocess.run([*git, "cat-file", "--batch-check"], input="".join(f"{c}\n" for c in commits),
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        report.warn(f"the records' commits were not checked against the history ({e})")
        return
    for line in found.stdout.splitlines():
        sha, _, kind = line.partition(" ")
        if sha in commits and not kind.startswith("commit"):
            report.error(f"{commits[sha]}: provenance.commit {sha} is not a commit of this repository's history")


def check_freshness(report: Report, demos: dict[str, catalog.Demo], records: dict[str, dict]) -> None:
    for name, demo in demos.items():
        recs = records.get(name, {})
        if "cpu" not in recs:
            report.error(f"{rel(demo.path)}: no CPU record; run `make regen DEMO={name}`")
        for device_class, rec in recs.items():
            if catalog.freshness(demo, rec) == "fresh":
                continue
            message = (f"docs/results/{name}/{device_class}.json is stale: {catalog.why_stale(demo, rec)} since it "
                       f"was measured ({rec.provenance.utc})")
            if device_class == "cpu":
                report.error(message + f"; run `make regen DEMO={name}`")
            else:
                report.warn(message + "; the page shows it as such until it is re-measured on that GPU")


def check_plausibility(report: Report, records: dict[str, dict]) -> None:
    for name, recs in records.items():
        for device_class, rec in recs.items():
            for problem in plausibility.vet(rec, f"docs/results/{name}/{device_class}.json"):
                report.error(problem)
            for problem in plausibility.above_ceiling(rec, f"docs/results/{name}/{device_class}.json"):
                report.warn(problem)


# -- pages ----------------------------------------------------------------------------------------------

def check_topic_structure(report: Report, path: Path, text: str, demos: dict[str, catalog.Demo]) -> None:
    """Front matter and the curriculum's sections, in order, with the collapsible parts collapsible."""
    where = rel(path)
    if not FRONT_MATTER.match(text):
        report.error(f"{where}: no front matter; start the page with ---, title, difficulty, tags, demos, ---")
        return
    try:
        meta, _ = front_matter(text, where)
    except FrontMatterError as e:
        report.error(str(e))
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
    if "Questions" in sections and ANSWERS_SECTION in sections:
        check_short_answers(report, where, sections["Questions"], sections[ANSWERS_SECTION])
    check_cheat_entry(report, where, meta.get("cheat"))
    for question, answer in short_answers(sections.get(ANSWERS_SECTION, "")) + parse_topic(path).follow_ups:
        if CARD_POINTER.search(answer):  # each is also a practice card, read alone
            report.error(f"{where}: the answer to **{question[:60]}** points elsewhere on the page "
                         f"({CARD_POINTER.search(answer).group(0)!r}); a practice card is read alone: name what it means")
    for old in ("30-second answer", "Full answer"):
        if old in sections:
            report.error(f"{where}: '## {old}' is gone: under '## Answers', each question is a heading "
                         "('### The question?'), then its 30-second answer, then '??? abstract \"Full answer\"' with its "
                         "full answer indented")
    if "Follow-up questions" in sections and "??? question" not in sections["Follow-up questions"]:
        report.error(f"{where}: '## Follow-up questions' needs '??? question \"...\"' blocks (question, hidden answer)")
    if "Measured" in sections:
        for demo in page_demos if isinstance(page_demos, list) else []:
            if f"results {demo}" not in re.sub(r"\s+", " ", sections["Measured"]):
                report.error(f"{where}: '## Measured' does not show {{{{ results {demo} }}}}")


CARD_POINTER = re.compile(r"\bthis page\b|\b(measured|shown|demo|table|plot|section|listed|see) above\b|\babove[.,;)]",
                          re.I)


def check_cheat_entry(report: Report, where: str, cheat) -> None:
    """The page's entry on the cheat sheet (front matter `cheat:`): formulas, 3-5 numbers through markers, and one
    '- Pitfall:' line."""
    if not isinstance(cheat, str) or not cheat.strip():
        report.error(f"{where}: front matter lacks 'cheat:', the page's cheat-sheet entry (2-4 formulas, 3-5 numbers "
                     "through metric markers, one '- Pitfall: ...' line)")
        return
    if len(re.findall(r"^\s*- Pitfall:", cheat, re.M)) != 1:
        report.error(f"{where}: 'cheat:' needs exactly one '- Pitfall: ...' line (the most common wrong answer)")
    numbers = len(re.findall(r"\{\{\s*metric\b", cheat))
    if not 3 <= numbers <= 5:
        report.warn(f"{where}: 'cheat:' quotes {numbers} measured number(s); 3 to 5 read best on the sheet")


def check_short_answers(report: Report, where: str, questions_md: str, answers_md: str) -> None:
    """Under '## Answers', one heading per question of '## Questions', in order; under each, its 30-second answer
    (at most 90 spoken words), then its own full answer, collapsed, and nothing else."""
    questions = [m.group(1) for m in map(QUESTION.match, questions_md.splitlines()) if m]
    found = answers(answers_md)
    asked = [a.question for a in found]
    for i, question in enumerate(questions):
        if question not in asked:
            report.error(f"{where}: '## Answers' has no heading for question {i + 1}; write the question exactly as "
                         f"listed: ### {question}")
    if [q for q in asked if q in questions] != [q for q in questions if q in asked]:
        report.error(f"{where}: the answers are not in the order of '## Questions'")
    for a in found:
        question, answer = a.question, a.short
        if question not in questions:
            report.error(f"{where}: '### {question[:60]}' under '## Answers' matches no question of '## Questions'")
        words = spoken_words(answer)
        if words > SPOKEN_WORD_LIMIT:
            report.error(f"{where}: the 30-second answer to '{question[:60]}' has {words} words; at most "
                         f"{SPOKEN_WORD_LIMIT} (about 30 seconds spoken): keep what a candidate says first")
        if not words:
            report.error(f"{where}: '{question[:60]}' has no 30-second answer: a paragraph under its heading")
        if a.full is None or not a.full.strip():
            report.error(f"{where}: '{question[:60]}' has no full answer under its 30-second answer; follow it with "
                         "'??? abstract \"Full answer\"' and that question's full answer indented by 4 spaces")
        if a.stray:
            report.error(f"{where}: under '{question[:60]}', text after its full answer ({a.stray[0]!r}); each "
                         "question holds its 30-second answer, then its full answer, and nothing else")


def check_gpu_set(report: Report, demos: dict[str, catalog.Demo], records: dict[str, dict], whole: bool) -> None:
    """records/gpu_set.toml names every demo once, with a reason (checked when the check sees every demo: `whole`);
    a CPU-only demo has no GPU record."""
    declared = gpu_set.declared()
    for problem in declared.problems(demos) if whole else []:  # tests/test_gpu_set.py fails on these
        report.warn(f"records/gpu_set.toml: {problem}")
    for demo, recs in records.items():
        for device_class in (c for c in recs if c != "cpu" and not declared.needs_gpu(demo)):
            report.error(f"docs/results/{demo}/{device_class}.json: {demo} is CPU-only by declaration "
                         "(records/gpu_set.toml); remove the record, or move the demo to [gpu] there, with why")


def check_pages(report: Report, demos: dict[str, catalog.Demo], records: dict[str, dict],
                docs_dir: Path = DOCS_DIR) -> int:
    """Markers on every page (known demo and metric, claims not contradicted); structure of topic pages."""
    claims = 0
    for path in sorted(docs_dir.rglob("*.md")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            report.error(f"{rel(path)}: cannot be read as UTF-8 text ({getattr(e, 'reason', None) or e})")
            continue
        if path.parent == docs_dir / "topics":
            check_topic_structure(report, path, text, demos)
        for stray in strays(text, rel(path)):
            report.error(stray)
        try:
            markers = find(text, rel(path))
        except MarkerError as e:
            report.error(str(e))
            continue
        for marker in markers:
            if marker.demo not in demos:
                report.error(f"{marker.source}: no demo named {marker.demo!r}")
                continue
            if marker.device is not None and not known_device(marker.device):
                report.error(f"{marker.source}: unknown device {marker.device!r}; use gpu or a class declared in "
                             f"records/datasheets.toml ({', '.join(datasheets.sheets())})")
                continue
            if marker.device not in (None, "cpu") and not gpu_set.declared().needs_gpu(marker.demo):
                report.error(f"{marker.source}: {marker.demo} is CPU-only by declaration (records/gpu_set.toml), so a "
                             "page quotes it on the CPU only; to ask for a GPU number, move it to [gpu] there, with why")
                continue
            recs = records.get(marker.demo, {})
            if marker.kind == "artifact":
                if marker.device in recs and marker.artifact not in recs[marker.device].artifacts:
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
                    if device_class in recs and ref.name not in recs[device_class].metrics:
                        report.error(f"{marker.source}: the {catalog.device_label(device_class)} record of "
                                     f"{marker.demo} has no metric {ref.name!r}")
            if marker.kind == "claim":
                claims += 1
                for v in judge(marker, recs):
                    lhs, rhs = fmt_pair(v.lhs, v.rhs) if v.lhs is not None else ("", "")
                    if v.status == "contradicted":
                        report.error(f"{marker.source}: contradicted on {catalog.device_label(v.device_class)}: "
                                     f"{lhs} {marker.op} {rhs} is false")
                    room = margin(v, marker.op)
                    timed = v.device_class in recs and any(timing_based(recs[v.device_class], side)
                                                           for side in (marker.lhs, marker.rhs))
                    if v.device_class == "cpu" and timed and room is not None and room < MARGIN_RULE:
                        report.warn(f"{marker.source}: holds on CPU with only {room:.2f}x room ({lhs} {marker.op} "
                                    f"{rhs}); CI re-measures on a busy machine, so state it with >= {MARGIN_RULE}x "
                                    f"room (`python -m scripts.margins {marker.demo}` shows the spread over runs)")
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

    walk(mkdocs_config(mkdocs_yml).get("nav", []))
    return found


def check_nav(report: Report, demos: dict[str, catalog.Demo], docs_dir: Path) -> None:
    """Readers find pages through the navigation: every topic page and demo notebook must be in it."""
    mkdocs_yml = docs_dir.parent / "mkdocs.yml"
    if not mkdocs_yml.exists():
        return
    try:
        nav = nav_entries(mkdocs_yml)
    except (ValueError, yaml.YAMLError) as e:  # UnicodeDecodeError is a ValueError
        report.error(f"mkdocs.yml: not valid YAML ({' '.join(str(e).split())[:120]})")
        return
    for path in sorted((docs_dir / "topics").glob("*.md")):
        if f"topics/{path.name}" not in nav:
            report.error(f"{rel(path)} is not in mkdocs.yml's nav: add `- Title: topics/{path.name}` under Topics")
    for demo in demos.values():
        uri = demo.path.relative_to(REPO_ROOT).as_posix()
        if uri not in nav:
            report.error(f"{uri} is not in mkdocs.yml's nav: add `- \"{demo.path.name}\": {uri}` under Demo notebooks")


TYPED_UNIT = r"(?:ns|us|µs|ms|s|GB/s|TB/s|MB/s|GiB/s|TFLOP/s|GFLOP/s|TOPS|x|×|%|KiB|MiB|GiB|KB|MB|GB|TB|W|tokens/s)"
TYPED_NUMBER = re.compile(rf"(?<![\w.\-/])(\d[\d,]*(?:\.\d+)?)\s?{TYPED_UNIT}(?![\w/])")


def check_typed_numbers(report: Report, docs_dir: Path) -> None:
    """A number with a unit typed into a topic page's prose, outside every marker, in a paragraph without a
    citation link: a measurement must come from a record. Published figures stay allowed with their
    citation (a link in the same paragraph); a computed example says how it is computed. A warning per
    paragraph, with the numbers it found, for the reviewer to judge."""
    for path in sorted((docs_dir / "topics").glob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")  # check_pages names a bad one
        fm = FRONT_MATTER.match(text)
        if fm:  # front matter is not prose: blank it, keeping the line numbers
            text = "\n" * fm.group(0).count("\n") + text[fm.end():]
        found: list[tuple[int, list[str]]] = []

        def scan(chunk: str, offset=[0]) -> str:
            for para in re.split(r"\n\s*\n", MARKER.sub(" ", chunk)):
                if re.search(r"\]\(https?://", para) or para.lstrip().startswith(("<!--", "|")):
                    continue
                numbers = [m.group(0) for m in TYPED_NUMBER.finditer(para)]
                if numbers:
                    first = next((ln for ln in para.splitlines() if TYPED_NUMBER.search(ln)), para.strip())
                    line = text.find(first.strip()[:50])
                    found.append((text.count("\n", 0, line) + 1 if line >= 0 else 1, numbers))
            return chunk

        transform_outside_code(text, scan)
        for line, numbers in found:
            report.warn(f"{rel(path)}:{line}: typed number(s) {', '.join(numbers[:4])}: insert a measurement with a "
                        "marker, or cite the published figure with a link in the same paragraph")


COMPARISON = re.compile(
    r"\b(faster|slower|closer|further from|higher|lower|more than|less than|fewer than|greater than|above|below|"
    r"beats?|exceeds?|outperforms?|grows?|shrinks?|scales?|memory[- ]bound|compute[- ]bound|bandwidth[- ]bound|"
    r"launch[- ]bound|overhead[- ]bound|speed-?ups?|wins?|loses?|monotonic|non-monotonic|cheaper|costlier|"
    r"dominates?|twice|half as)\b", re.I)
NO_CLAIM = re.compile(r"<!--\s*no-claim:\s*\S.*?-->", re.S)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*_(\[{])")


def check_comparisons(report: Report, docs_dir: Path) -> int:
    """A heuristic, warnings only: a sentence in a topic page's Measured section that quotes a measured number
    (a metric marker) and compares (faster, closer to the ceiling, memory-bound, grows with N) in a paragraph
    without a claim marker. A comparison drawn from a record is a checked claim, so that a re-measurement that
    reverses it fails the check; a sentence that compares nothing checkable says why in the paragraph,
    ``<!-- no-claim: the reason -->``. Returns the number of warnings."""
    found = 0
    for path in sorted((docs_dir / "topics").glob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        _, sections = split_sections(text)
        measured = sections.get("Measured", "")
        start = text.find(measured[:200]) if measured else -1
        for para in re.split(r"\n\s*\n", measured):
            if "{{ claim" in para or "{{claim" in para or NO_CLAIM.search(para):
                continue
            for sentence in SENTENCE_END.split(" ".join(para.split())):
                if "{{ metric" in sentence and COMPARISON.search(MARKER.sub(" ", sentence)):
                    where = text.find(sentence[:40], max(start, 0))
                    line = text.count("\n", 0, where) + 1 if where >= 0 else 1
                    words = MARKER.sub("…", sentence)
                    report.warn(f"{rel(path)}:{line}: a comparison of measured numbers with no claim in its paragraph: "
                                f"\"{words[:90]}\"; add a {{{{ claim }}}} that guards it, or say why not with "
                                "<!-- no-claim: the reason -->")
                    found += 1
    return found


def check_sizing(report: Report, docs_dir: Path, problems_file: Path | None = None) -> None:
    """Sizing problems (website/sizing_problems.toml): every stated answer is its computation rounded to the
    stated digits, every problem renders, and every {{ sizing ID }} marker of a page names a problem."""
    from website import sizing

    path = problems_file or sizing.PROBLEMS_FILE
    for message in sizing.stated_problems(path):  # loading, stated answers, rendering: each names file and problem
        report.error(message)
    try:
        problems = sizing.load_problems(path)
    except ValueError:
        return  # reported above
    for page in sorted(docs_dir.rglob("*.md")):
        for pid in sizing.markers_in(page.read_text(encoding="utf-8", errors="replace")):
            if pid not in problems:
                report.error(f"{rel(page)}: {{{{ sizing {pid} }}}} names no problem of {rel(path)}")


def check_tests(report: Report, demos: dict[str, catalog.Demo]) -> None:
    """Every demo has a test that runs it (a file under tests/ that names its module)."""
    tests = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO_ROOT / "tests").glob("test_*.py")))
    for name, demo in demos.items():
        if demo.module not in tests:
            report.error(f"{rel(demo.path)}: no test runs it; add tests/test_{name}.py with "
                         f"`tiny = demo_record(\"{demo.module}\")` (see docs/contributing.md)")


def check_todos(report: Report, demos: dict[str, catalog.Demo], docs_dir: Path) -> None:
    """Scaffolded text still to write: a warning for every line with a TODO, in pages, demos and their tests."""
    tests = [REPO_ROOT / "tests" / f"test_{name}.py" for name in demos]
    files = sorted((docs_dir / "topics").glob("*.md")) + [d.path for d in demos.values()] + [t for t in tests if t.exists()]
    for path in files:
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if "TODO" in line:
                report.warn(f"{rel(path)}:{i}: TODO left to write: {line.strip()[:80]}")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except UnicodeDecodeError as e:  # a file the check reads that is not UTF-8 (a demo, a test): one line
        print(f"error: a file of the repository is not UTF-8 text ({e.reason} at byte {e.start}); the check reads "
              "demos/, tests/, docs/ and mkdocs.yml", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="check", description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    report = Report()
    try:
        demos = catalog.discover()  # (a datasheet that bounds nothing stopped the check as it loaded: require())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not sorted(args.docs_dir.glob("topics/*.md")):  # an empty or mistyped folder checks nothing: say so
        print(f"error: {rel(args.docs_dir)}: no topic pages (topics/*.md); is it the site's docs folder?",
              file=sys.stderr)
        return 2
    records = check_records(report, demos, args.results_dir)
    check_commits(report, records)
    check_freshness(report, demos, records)
    check_plausibility(report, records)
    check_gpu_set(report, demos, records, whole=args.docs_dir == DOCS_DIR)
    claims = check_pages(report, demos, records, args.docs_dir)
    check_todos(report, demos, args.docs_dir)
    check_typed_numbers(report, args.docs_dir)
    check_comparisons(report, args.docs_dir)
    check_sizing(report, args.docs_dir)
    if args.docs_dir == DOCS_DIR:  # a test's scratch docs folder has no tests of its own
        check_tests(report, demos)
    check_nav(report, demos, args.docs_dir)
    for problem in page_safety.problems(args.docs_dir.parent):  # includes, links, script: what the build refuses too
        report.error(problem)

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
