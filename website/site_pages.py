"""Pages generated from the topic pages, never a second copy of them.

- the home page's topic map and study plans (docs/curriculum.yml + each page's front matter);
- the cheat sheet: every topic's formulas, rules of thumb and measured numbers, two printed pages;
- the practice cards: every question (with its own 30-second answer and measured number) and follow-up,
  as JSON for docs/assets/practice.js;
- the glossary page, from docs/includes/glossary.md (the same file that makes the tooltips).

A page asks for one with an HTML comment placeholder (<!-- mm:topic-map -->, ...), which
``expand`` replaces; the markers of website/markers.py are expanded after that, as on any page.
"""

from __future__ import annotations

import hashlib
import html
import json
import posixpath
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from records.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
# MkDocs' own delimiters (mkdocs.utils.meta.YAML_RE): '---' opens, '---' or '...' closes, trailing blanks allowed
FRONT_MATTER = re.compile(r"\A-{3}[ \t]*\n(.*?\n)(?:\.{3}|-{3})[ \t]*\n", re.S)
PLACEHOLDER = re.compile(r"<!--\s*mm:([a-z-]+)\s*-->")
QUESTION = re.compile(r"^\s*[-*]\s+(.+?)\s*\((easy|medium|hard)\)\s*$")
FOLLOW_UP = re.compile(r'^\?\?\?\+?\s+question\s+"(.+)"\s*$')


@dataclass
class TopicPage:
    src_uri: str  # topics/kernel-fusion.md
    title: str
    topic: str  # T3
    difficulty: str
    tags: list[str]
    demos: list[str]
    sections: dict[str, str]  # H2 title -> its Markdown
    questions: list[tuple[str, str]] = field(default_factory=list)  # (question, difficulty)
    follow_ups: list[tuple[str, str]] = field(default_factory=list)  # (question, answer Markdown)


class _MkDocsLoader(yaml.SafeLoader):
    """mkdocs.yml as MkDocs reads it: !ENV [NAME, default] gives the variable's value or the default."""


def _env_tag(loader, node):
    import os

    names = loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else [loader.construct_scalar(node)]
    *variables, default = names if len(names) > 1 else (*names, None)
    return next((os.environ[v] for v in variables if v in os.environ), default)


_MkDocsLoader.add_constructor("!ENV", _env_tag)


def mkdocs_config(path: Path = REPO_ROOT / "mkdocs.yml") -> dict:
    """The parsed mkdocs.yml (nav, markdown extensions), for the check and the tests."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_MkDocsLoader) or {}


class FrontMatterError(ValueError):
    """Front matter that is missing or not valid YAML; the message names the file, the line and the fix."""


def front_matter(text: str, where: str = "page") -> tuple[dict, str]:
    """The one front-matter parser: (metadata, the rest of the page). A page without front matter gives
    ({}, text); invalid YAML raises FrontMatterError naming the page's line and what to do."""
    m = FRONT_MATTER.match(text)
    if not m:
        return {}, text
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        place = f"{where}:{mark.line + 2}" if mark is not None else where  # +1: 0-based, +1: the opening ---
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise FrontMatterError(f"{place}: front matter is not valid YAML "
                               f"({problem}); quote a value that holds ':' or '#' or starts with a quote, "
                               f'e.g. title: "A: B"') from None
    if not isinstance(meta, dict):
        raise FrontMatterError(f"{where}: front matter must be 'key: value' lines, got {type(meta).__name__}")
    return meta, text[m.end():]


def _dedent(lines: list[str]) -> str:
    return "\n".join(line[4:] if line.startswith("    ") else line.strip() for line in lines).strip()


def split_sections(text: str) -> tuple[list[str], dict[str, str]]:
    """The H2 headings of a page, in order, and each one's Markdown."""
    headings = re.findall(r"^## +(.+?)\s*$", text, re.M)
    return headings, dict(zip(headings, (s.strip("\n") for s in re.split(r"^## +.+$", text, flags=re.M)[1:])))


def parse_topic(path: Path) -> TopicPage:
    meta, body = front_matter(path.read_text(encoding="utf-8"), f"docs/topics/{path.name}")
    _, sections = split_sections(body)
    page = TopicPage(
        src_uri=f"topics/{path.name}", title=str(meta.get("title", path.stem)), topic=str(meta.get("topic", "")),
        difficulty=str(meta.get("difficulty", "")), tags=list(meta.get("tags") or []),
        demos=list(meta.get("demos") or []), sections=sections)
    for line in sections.get("Questions", "").splitlines():
        q = QUESTION.match(line)
        if q:
            page.questions.append((q.group(1), q.group(2)))
    lines = sections.get("Follow-up questions", "").splitlines()
    i = 0
    while i < len(lines):
        f = FOLLOW_UP.match(lines[i])
        i += 1
        if f:
            answer = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                answer.append(lines[i])
                i += 1
            page.follow_ups.append((f.group(1), _dedent(answer)))
    return page


MARKER_WORDS = re.compile(r"\{\{\s*(metric|claim)\b.*?\}\}", re.S)
SPOKEN_WORD_LIMIT = 90  # about 30 seconds spoken


FOLD = re.compile(r'^\?\?\?\+?\s+\w+(?:\s+"([^"]*)")?\s*$')
QUESTION_HEADING = re.compile(r"^### +(.+?)\s*$")
ANSWERS_SECTION = "Answers"
FULL_ANSWER_TITLE = "Full answer"


@dataclass
class Answer:
    question: str
    short: str  # the 30-second answer, Markdown
    full: str | None  # the fold right after it whose title starts with "Full answer", dedented; None: none follows
    stray: list[str] = field(default_factory=list)  # anything else under the question's heading (a check error)


def answers(section: str) -> list[Answer]:
    """The answers of a page's '## Answers' section, in order. Each question is a heading (`### The question?`);
    under it, its 30-second answer (unindented text), then its own full answer, collapsed:
    ``??? abstract "Full answer"`` and the answer indented under it. Indented text (a fold's body) never starts a
    question, so a heading inside a full answer is not taken for one."""
    found: list[Answer] = []
    lines = section.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        heading = QUESTION_HEADING.match(line)
        if heading:
            found.append(Answer(heading.group(1), "", None))
            i += 1
            continue
        if not line.strip():
            i += 1
            continue
        fold = FOLD.match(line)
        if fold:
            body = []
            i += 1
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i])
                i += 1
            if found and found[-1].full is None and (fold.group(1) or "").startswith(FULL_ANSWER_TITLE):
                found[-1].full = _dedent(body)
            elif found:
                found[-1].stray.append(line.strip())
            continue
        paragraph = []
        while (i < len(lines) and lines[i].strip() and not FOLD.match(lines[i])
               and not QUESTION_HEADING.match(lines[i])):
            paragraph.append(lines[i])
            i += 1
        text = "\n".join(paragraph).strip()
        if found and found[-1].full is None:
            found[-1].short = f"{found[-1].short}\n\n{text}".strip()
        elif found:
            found[-1].stray.append(text[:60])
    return found


def short_answers(section: str) -> list[tuple[str, str]]:
    """The 30-second answers of a page: (question, answer Markdown), in order."""
    return [(a.question, a.short) for a in answers(section)]


def spoken_words(answer: str) -> int:
    """Words as rendered: a {{ metric }} marker is a number, its unit and its device (3 words); a computed answer,
    {{ sizing ID answer }}, is a number, its problem's unit and "(computed)"; a claim renders as a check mark after
    its sentence (no word)."""
    from website import sizing

    problems = sizing.load_problems()

    def computed(m: re.Match) -> str:
        problem = problems.get(m.group(1))
        return " x " + " ".join("x" for _ in (problem.unit.split() if problem else ["unit"])) + " x "

    text = sizing.SIZING_ANSWER.sub(computed, answer)
    text = MARKER_WORDS.sub(lambda m: " x x x " if m.group(1) == "metric" else " ", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its address
    return len(re.findall(r"[A-Za-z0-9][\w'.%/+-]*", text))


def topic_pages(docs: Path = DOCS) -> list[TopicPage]:
    return sorted((parse_topic(p) for p in (docs / "topics").glob("*.md")),
                  key=lambda t: (int(t.topic[1:]) if t.topic[1:].isdigit() else 99, t.title))


@cache
def curriculum(docs: Path = DOCS) -> dict:
    return yaml.safe_load((docs / "curriculum.yml").read_text(encoding="utf-8"))


MD_LINK = re.compile(r"\]\(([^)\s#:]+\.md)(#[^)\s]*)?\)")


def relink(markdown: str, page: TopicPage, from_dir: str, as_url: bool = False) -> str:
    """Relative links of a page's fragment, rewritten for a page in ``from_dir``. ``as_url`` gives
    the built page's URL (for HTML that MkDocs does not rewrite, such as practice cards)."""
    def one(m: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page.src_uri), m.group(1)))
        if as_url:
            target = target.removesuffix(".md") + "/"
        return f"]({posixpath.relpath(target, from_dir or '.')}{'/' if as_url else ''}{m.group(2) or ''})"

    return MD_LINK.sub(one, markdown)


def _link(page: TopicPage, from_dir: str) -> str:
    return posixpath.relpath(page.src_uri, from_dir or ".")


# -- home page ------------------------------------------------------------------------------------------
def topic_map(from_dir: str, docs: Path = DOCS) -> str:
    pages = topic_pages(docs)
    rows = ["| topic | area | pages | difficulty |", "|---|---|---|---|"]
    for tid, info in curriculum(docs)["topics"].items():
        mine = [p for p in pages if p.topic == tid]
        links = ", ".join(f"[{p.title}]({_link(p, from_dir)})" for p in mine) or "*coming*"
        levels = ", ".join(sorted({p.difficulty for p in mine})) or "–"
        rows.append(f"| {tid}. {info['title']} | {info['area']} | {links} | {levels} |")
    return "\n".join(rows)


def _plan_steps(plan: dict, from_dir: str, docs: Path) -> list[str]:
    pages = topic_pages(docs)
    out = []
    for n, step in enumerate(plan["steps"], 1):
        info = curriculum(docs)["topics"][step["topic"]]
        mine = [p for p in pages if p.topic == step["topic"]]
        target = ", ".join(f"[{p.title}]({_link(p, from_dir)})" for p in mine) or f"{info['title']} *(coming)*"
        out.append(f"{n}. {target}: {step['why']}")
    return out


def start_here(from_dir: str, docs: Path = DOCS) -> str:
    """The home page's first block: the curriculum's first plan (one evening), each step a link."""
    plan = curriculum(docs)["plans"][0]
    return "\n".join([f"{plan['blurb']}\n", *_plan_steps(plan, from_dir, docs)])


def topic_links(from_dir: str, docs: Path = DOCS) -> str:
    """Every topic page, one short link each, in curriculum order: all of them within the home page's first
    screens."""
    order = list(curriculum(docs)["topics"])
    pages = sorted(topic_pages(docs), key=lambda p: (order.index(p.topic) if p.topic in order else len(order), p.title))
    items = "\n".join(f"- {p.topic} [{p.title}]({_link(p, from_dir)})" for p in pages)
    return f'<div class="mm-topic-links" markdown>\n\n{items}\n\n</div>'


def study_plans(from_dir: str, docs: Path = DOCS, skip: int = 0) -> str:
    pages = topic_pages(docs)
    out = []
    for plan in curriculum(docs)["plans"][skip:]:
        out.append(f"### {plan['name']}\n\n{plan['blurb']}\n")
        for n, step in enumerate(plan["steps"], 1):
            info = curriculum(docs)["topics"][step["topic"]]
            mine = [p for p in pages if p.topic == step["topic"]]
            target = ", ".join(f"[{p.title}]({_link(p, from_dir)})" for p in mine) or f"{info['title']} *(coming)*"
            out.append(f"{n}. {target}: {step['why']}")
        out.append("")
    return "\n".join(out)


# -- the datasheet figures for the calculators -----------------------------------------------------------------
# The JavaScript calculators (docs/assets/parallel-calculator.js, sizing-calculators.js) type no chip figure:
# the build adds this generated script (mkdocs.yml loads it before them), records/datasheets.toml as JSON.
DATASHEETS_JS = "assets/datasheets.js"
DATASHEETS_GLOBAL = "window.MM_DATASHEETS = "


def datasheets_js() -> str:
    """The text of assets/datasheets.js: every entry of records/datasheets.toml, as read by records.datasheets."""
    from records import datasheets

    return ("// Generated by the site build (website/site_pages.py, datasheets_js) from records/datasheets.toml, the one\n"
            "// source of the chip figures the calculators use. Edit that file, not this one.\n"
            + DATASHEETS_GLOBAL + json.dumps(datasheets.sheets(), sort_keys=True, separators=(",", ":")) + ";\n")


# -- cheat sheet ----------------------------------------------------------------------------------------------
# What a candidate rereads in the hour before an interview, at most two printed A4 pages: per topic, the
# formulas and rules of thumb of the page's front matter (`cheat:`, Markdown lines whose numbers are
# markers), then the one measured number each 30-second answer rests on (its first metric marker), with
# the record's label; and the machine balance of the datasheets, computed. Nothing is typed here.
BALANCE_DEVICES = ("h100", "h200")


def first_metric(answer: str, docs: Path = DOCS) -> tuple[str, str] | None:
    """The first number a Markdown fragment quotes: a {{ metric }} marker whose device has a record (the marker, the
    metric's label from that record) or a computed answer, {{ sizing ID answer }} (the marker, the problem's title);
    None when it quotes neither."""
    from records import catalog
    from website import sizing
    from website.claims import gpu_class_for
    from website.markers import find

    measured = None
    for m in find(answer):
        if m.kind != "metric":
            continue
        records = catalog.load_records(m.demo)
        device = gpu_class_for(m.metric.name, records) if m.device == "gpu" else m.device  # as the page shows it
        rec = records.get(device)
        metric = rec.metrics.get(m.metric.name) if rec is not None else None
        if metric is None:
            continue
        marker = f"{{{{ metric {m.demo} {m.metric} @{m.device} }}}}"
        label = metric.label + (" (fraction of its same-run ceiling)" if m.metric.fraction else "")
        at = re.search(r"\{\{\s*metric\s+" + re.escape(m.demo) + r"\s+" + re.escape(str(m.metric)), answer)
        measured = (at.start() if at else 0, marker, label)
        break
    # or a computed answer quoted inline ({{ sizing ID answer }}), whichever the answer quotes first
    problems = sizing.load_problems()
    computed = next(((m.start(), f"{{{{ sizing {m.group(1)} answer }}}}", problems[m.group(1)].title)
                     for m in sizing.SIZING_ANSWER.finditer(answer) if m.group(1) in problems), None)
    found = min((x for x in (measured, computed) if x is not None), default=None, key=lambda x: x[0])
    return None if found is None else (found[1], found[2])


def machine_balance() -> str:
    """FLOPs per byte at the ridge of the roofline, computed from records/datasheets.toml."""
    from records import datasheets

    sheets = datasheets.sheets()
    rows = []
    for device in BALANCE_DEVICES:
        sheet = sheets.get(device)
        if not sheet:
            continue
        bw = sheet["memory_gbps"]
        for dtype in ("bfloat16", "float32"):
            peak, ridge = sheet["tflops"].get(dtype), datasheets.ridge_point(device, dtype)
            if peak and ridge:
                rows.append(f"{sheet['label']} {dtype} {peak:g} TFLOP/s over {bw / 1000:g} TB/s: "
                            f"**{ridge:.0f} FLOP/byte**")
    return "Ridge point (datasheet peak / bandwidth): " + "; ".join(rows) + "."


def cheat_sheet(from_dir: str, docs: Path = DOCS) -> str:
    """Every topic's `cheat:` front matter (its formulas, numbers with their device and one pitfall), after the
    ridge points; a page without one is still listed, so no topic goes missing (the check requires the entry)."""
    out = [machine_balance(), ""]
    for p in topic_pages(docs):
        meta, _ = front_matter((docs / p.src_uri).read_text(encoding="utf-8"), f"docs/{p.src_uri}")
        lines = str(meta.get("cheat") or "").strip()
        out.append(f"## {p.topic}. {p.title} [→]({_link(p, from_dir)})\n")
        out.append(relink(lines, p, from_dir) + "\n" if lines else "")
    return "\n".join(out)


# -- practice cards ---------------------------------------------------------------------------------------------
def question_anchor(question: str) -> str:
    """The id MkDocs gives a question's heading (Python-Markdown's toc slug of the heading's text): a practice card
    links to its question, not to the top of the page."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", question)  # a link's text
    text = re.sub(r"[`*]", "", text)  # code and bold marks (an underscore stays: it is a word character)
    return slugify(html.unescape(text), "-")


def card_id(page: TopicPage, question: str) -> str:
    return hashlib.sha1(f"{page.src_uri}\n{question}".encode()).hexdigest()[:12]


def practice_cards(to_html, url_dir: str, docs: Path = DOCS) -> list[dict]:
    """Every question (answer: its own 30-second answer) and follow-up (its answer) of every topic page.

    A question card also carries the one measured number its answer rests on (the answer's first
    metric marker, with the record's label and the device), or "" when it quotes none.
    ``to_html(markdown, page)`` turns a Markdown fragment of a page into HTML (markers expanded);
    ``url_dir`` is the practice page's own URL folder ("practice" for practice.md), since links in
    the cards' HTML are not rewritten by MkDocs."""
    from_dir = url_dir
    cards = []
    for p in topic_pages(docs):
        url = posixpath.relpath(p.src_uri.removesuffix(".md"), from_dir or ".") + "/"
        base = {"topic": p.topic, "topic_title": p.title, "url": url}
        section = p.sections.get(ANSWERS_SECTION, "")
        answers = dict(short_answers(section))
        whole = None  # a page not yet in the one-answer-per-question format: its whole section
        for question, difficulty in p.questions:
            answer = answers.get(question)
            if answer is None:
                whole = whole or to_html(relink(section, p, from_dir, as_url=True), p)
            found = first_metric(answer, docs) if answer else None
            measured = "" if found is None else to_html(f"{found[0]} — {found[1]}", p)
            cards.append({**base, "anchor": question_anchor(question) if answer is not None else "",
                          "id": card_id(p, question), "kind": "question", "difficulty": difficulty,
                          "question": html.escape(question), "measured": measured,
                          "answer": whole if answer is None else to_html(relink(answer, p, from_dir, as_url=True), p)})
        for question, answer in p.follow_ups:
            cards.append({**base, "id": card_id(p, question), "kind": "follow-up", "difficulty": p.difficulty,
                          "question": html.escape(question), "measured": "",
                          "answer": to_html(relink(answer, p, from_dir, as_url=True), p)})
    return cards


def exercise_cards(url_dir: str, docs: Path = DOCS) -> list[dict]:
    """A link-only card per coding exercise page (docs/exercises/*.md other than its index): the statement
    is on its page, the grader runs locally."""
    folder = docs / "exercises"
    if not folder.is_dir():
        return []
    titles = {p.src_uri: (p.topic, p.title) for p in topic_pages(docs)}
    cards = []
    for path in sorted(folder.glob("*.md")):
        if path.stem == "index":
            continue
        text = path.read_text(encoding="utf-8")
        try:
            meta, body = front_matter(text, f"docs/exercises/{path.name}")
        except Exception:  # a page without front matter still gets a card
            meta, body = {}, text
        heading = re.search(r"^#\s+(.+)$", body, re.M)
        title = str(meta.get("title") or (heading.group(1).strip() if heading else path.stem))
        linked = re.search(r"topics/([a-z0-9-]+)\.md", body)  # the first topic page the exercise links to
        topic_page = linked.group(1) if linked else ""
        topic, topic_title = titles.get(f"topics/{topic_page.removesuffix('.md').split('/')[-1]}.md", ("", "Coding exercises"))
        url = posixpath.relpath(f"exercises/{path.stem}", url_dir or ".") + "/"
        title = re.sub(r"^Exercise:\s*", "", title)  # the card says it is a coding exercise once
        sketch = " ".join(str(meta.get("sketch") or "").split())
        answer = (html.escape(sketch) if sketch else "Write it, then grade it on your machine; the exercise page "
                  "says how, and folds a reference solution.")
        cards.append({"id": "exercise-" + path.stem, "kind": "exercise", "topic": topic, "topic_title": topic_title,
                      "difficulty": str(meta.get("difficulty") or "medium"), "measured": "", "url": url,
                      "question": "Coding exercise: " + html.escape(title[:1].upper() + title[1:]),
                      "answer": f"<p>{answer}</p>"})
    return cards


CARD_KINDS = ("question", "sizing", "exercise", "follow-up")  # within a topic, in this order


def evening_first(cards: list[dict], docs: Path = DOCS) -> list[dict]:
    """The default deck: the one-evening plan's topics in its order (each topic's questions, then its sizing
    problems, exercises and follow-ups), then every other topic in curriculum order."""
    plan = [step["topic"] for step in curriculum(docs)["plans"][0]["steps"]]
    rest = [t for t in curriculum(docs)["topics"] if t not in plan]
    order = {t: i for i, t in enumerate(plan + rest)}

    def key(item: tuple[int, dict]) -> tuple:
        i, card = item
        kind = CARD_KINDS.index(card["kind"]) if card["kind"] in CARD_KINDS else len(CARD_KINDS)
        return order.get(card["topic"], len(order)), kind, i

    return [card for _, card in sorted(enumerate(cards), key=key)]


def cards_script(cards: list[dict]) -> str:
    """The cards as an inline JSON script: no second request, works offline. '</' is escaped so the
    data cannot close the script element."""
    data = json.dumps(cards, ensure_ascii=False).replace("</", "<\\/")
    return f'<script type="application/json" id="mm-cards">{data}</script>'


# -- glossary -----------------------------------------------------------------------------------------------------
def glossary_terms(docs: Path = DOCS) -> list[tuple[str, str]]:
    text = (docs / "includes" / "glossary.md").read_text(encoding="utf-8")
    return re.findall(r"^\*\[(.+?)\]:\s*(.+?)\s*$", text, re.M)


def glossary_table(docs: Path = DOCS) -> str:
    rows = ["| term | meaning |", "|---|---|"]
    rows += [f"| **{term}** | {meaning} |" for term, meaning in sorted(glossary_terms(docs), key=lambda t: t[0].lower())]
    return "\n".join(rows)


# -- placeholders ---------------------------------------------------------------------------------------------------
def measurement_status() -> str:
    """How many demos have records on each device class, and how many of those are fresh: the home page's
    one-line answer to 'is this measured on a GPU yet?'."""
    from records import catalog, devices

    demos = catalog.discover()
    per_class: dict[str, list[str]] = {}
    for name, demo in demos.items():
        for device_class, rec in catalog.load_records(name).items():
            per_class.setdefault(device_class, []).append(catalog.freshness(demo, rec))
    rows = ["| device | demos with a record | fresh | demo changed since |", "|---|---|---|---|"]
    for device_class in sorted(per_class, key=lambda c: (not devices.is_gpu_class(c), c)):
        states = per_class[device_class]
        rows.append(f"| {html.escape(catalog.device_label(device_class))} | {len(states)} of {len(demos)} | "
                    f"{states.count('fresh')} | {states.count('stale')} |")
    gpu = [c for c in per_class if devices.is_gpu_class(c)]
    lead = ("No demo has a GPU record yet: pages show the CPU measurements, and each topic page names the GPU "
            "numbers still to be measured." if not gpu else
            f"GPU records exist for {len(gpu)} device class(es); their tabs come first on every page.")
    return lead + "\n\n" + "\n".join(rows)


def expand(markdown: str, page_src_uri: str, to_html=None, docs: Path = DOCS) -> str:
    from_dir = posixpath.dirname(page_src_uri)

    stem = posixpath.splitext(page_src_uri)[0]
    url_dir = from_dir if posixpath.basename(stem) == "index" else stem  # use_directory_urls

    def one(m: re.Match) -> str:
        name = m.group(1)
        if name == "topic-map":
            return topic_map(from_dir, docs)
        if name == "study-plans":
            return study_plans(from_dir, docs)
        if name == "more-study-plans":  # the plans after the first, which the home page shows as "start here"
            return study_plans(from_dir, docs, skip=1)
        if name == "start-here":
            return start_here(from_dir, docs)
        if name == "topic-links":
            return topic_links(from_dir, docs)
        if name == "cheat-sheet":
            return cheat_sheet(from_dir, docs)
        if name == "glossary":
            return glossary_table(docs)
        if name == "measurement-status":
            return measurement_status()
        if name == "practice-cards":
            from website import sizing  # the sizing problems and (when they exist) the coding exercises join the cards

            titles = {posixpath.basename(p.src_uri).removesuffix(".md"): (p.topic, p.title) for p in topic_pages(docs)}
            return cards_script(evening_first(practice_cards(to_html, url_dir, docs)
                                              + sizing.practice_cards(to_html, url_dir, titles)
                                              + exercise_cards(url_dir, docs), docs))
        raise ValueError(f"{page_src_uri}: unknown placeholder <!-- mm:{name} -->")

    return PLACEHOLDER.sub(one, markdown)


ABBREVIATION = re.compile(r'<abbr title="[^"]*">(.*?)</abbr>', re.S)
SECTION_START = re.compile(r"(?=<h[23][ >])")


def first_use_tooltips(page_html: str) -> str:
    """Keep a glossary tooltip on the first use of each term in every section (h2/h3) and plain text
    elsewhere: a long page marked at every use carried hundreds of tooltips, and setting them up
    made it slow to load."""
    def once_per_section(section: str) -> str:
        seen: set[str] = set()

        def keep_first(m: re.Match) -> str:
            if m.group(1) in seen:
                return m.group(1)
            seen.add(m.group(1))
            return m.group(0)

        return ABBREVIATION.sub(keep_first, section)

    return "".join(once_per_section(section) for section in SECTION_START.split(page_html))
