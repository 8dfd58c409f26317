"""Start a new topic: `python -m scripts.scaffold T10 benchmarking timing_discipline --title "..."`.

Creates, from templates that already pass the check:
- docs/topics/<page>.md        the page, every required section, TODO where the answer goes
- demos/t<N>_<page>/<demo>.py  a working demo on the harness (a placeholder measurement, TODO)
- tests/test_<demo>.py         a test that runs the demo at --size tiny
- docs/results/<demo>/cpu.json the CPU record, made by running the demo once
and adds the page and the notebook to mkdocs.yml's nav. `make check` then passes and lists the
TODOs left to write.

All or nothing: a bad name or title is refused in one line before anything is written, and a failure,
Ctrl-C or SIGTERM after that removes what was created and restores mkdocs.yml and the GPU estimates.
"""

from __future__ import annotations

import json
import keyword
import re
import shutil
import signal
import sys
import time
import unicodedata
from pathlib import Path

from records import atomic, catalog
from records.errors import OneLineParser, fail
from records.paths import CACHE_DIR, REPO_ROOT, RESULTS_DIR, shown
from scripts import regen

NAME_MAX = 40  # a page or demo name becomes file and module names: short, and far below any file system's limit
TITLE_MAX = 80
# A title lands in the nav of every page (as HTML, unescaped by the theme), the page's front matter (YAML) and H1
# (Markdown, with attr_list's {: ...}), the demo (a Python string, a notebook cell) and the practice cards (JSON).
# Rather than escape it for each, a title holds only what none of them reads as syntax: letters, digits, marks
# (accents), spaces and this punctuation. No < > (HTML), { } (markers, attributes), [ ] (links), ` \ | ~ ^, no
# control or invisible characters, no emoji (a non-BMP character once reached the YAML as two lone surrogates).
TITLE_PUNCTUATION = " -.,:;!?'\"()/&+%#*=@$_–—‘’“”…×·"
DEMO_TIMEOUT_S = 900  # the demo's one run at its small size, a hard limit (regen's runner)

PAGE = '''---
title: {title_yaml}
difficulty: medium
tags: [TODO-area]
topic: {topic}
demos: [{demo}]
cheat: |
  - TODO: the key formula a candidate writes on the whiteboard.
  - TODO: a number with its label, through a marker: the candidate's rate {{{{ metric {demo} candidate.gbps @cpu }}}}.
  - Pitfall: TODO, the most common wrong answer.
---

# {title_md}

## Questions

- TODO: the question as an interviewer asks it? (medium)

## Answers

### TODO: the question as an interviewer asks it?

TODO: the 30-second answer, at most 90 words, what you would say first:
the scope in one sentence, the mechanism, the trade-off and its failure mode, and one measured number
through a marker.

??? abstract "Full answer"

    TODO: this question's full answer, in your own words, with the numbers taken from the records
    below through markers, never typed.

## Measured

### TODO: a heading that states the finding

TODO: the takeaway in one sentence, a number through `{{{{ metric {demo} NAME @cpu }}}}` and a claim stated in
words and ended by its check, e.g. "the candidate streams faster than a copy`{{{{ claim {demo} @cpu NAME > NUMBER }}}}`".

{{{{ results {demo} }}}}

??? note "How this was measured"

    TODO: the setup, the method and the caveats, with their numbers and claims through markers.

## Follow-up questions

??? question "TODO: a likely follow-up question?"
    TODO: its short answer.

## Pitfalls

??? warning "1 pitfall"

    - TODO: what a weak answer says.

## Further reading

- TODO: a paper or official doc, by title, with a link, and one line on why.
'''

DEMO = '''# %% [markdown]
# # Demo: {title_md}
#
# TODO: the idea in two lines.

# %%
import torch

from demos.harness.run import start

run = start("{demo}", title={title_py}, sizes={{"tiny": 2**10, "small": 2**23, "full": 2**26}})
device = run.torch_device

# %% [markdown]
# ## The implementations
#
# TODO: replace this placeholder (a vector add) with the variants this topic compares.

# %%
def reference(a, b):
    return a.double() + b.double()


def candidate(a, b):
    return a + b


# %% [markdown]
# ## Correctness first

# %%
a, b = torch.randn(run.sizes, device=device), torch.randn(run.sizes, device=device)
run.check_close("candidate", candidate(a, b), reference(a, b), rtol=1e-6, atol=1e-6)

# %% [markdown]
# ## Measurement

# %%
timing = run.time(lambda: candidate(a, b))
run.metric("candidate.median_us", timing.median_s * 1e6, "us", label="TODO: what this measures")
moved = 3 * a.numel() * a.element_size()
run.metric("candidate.gbps", moved / timing.median_s / 1e9, "GB/s", cache_resident=run.cache_resident(moved),
           label="TODO: effective bandwidth of the placeholder")  # a real kernel adds ceiling="copy_bandwidth"
run.save()
'''

TEST = '''"""The {demo} demo at its tiny size: what its checks observed, and its results say what the page claims."""

import pytest

from conftest import demo_record, metric

pytestmark = pytest.mark.slow

tiny = demo_record("{module}")


def test_the_candidate_matches_its_reference(tiny):
    # the demo saved, so its checks passed; this asserts what they observed (TODO: this topic's own checks)
    check = next(c for c in tiny["checks"] if c["name"] == "candidate")
    assert check["max_abs_err"] <= check["atol"] + check["rtol"] * 4  # |a + b| of two normals: a few units


def test_the_result_the_page_rests_on(tiny):
    # TODO: assert on this topic's own result, something that fails when the demo is wrong
    assert metric(tiny, "candidate.gbps") > 0
'''


def add_to_nav(mkdocs_yml: Path, title: str, page_uri: str, demo_uri: str) -> None:
    text = mkdocs_yml.read_text(encoding="utf-8")
    for section, entry in (("Topics", f"      - {json.dumps(title, ensure_ascii=False)}: {page_uri}\n"),
                           ("Demo notebooks", f"      - {Path(demo_uri).name!r}: {demo_uri}\n")):
        m = re.search(rf"^  - {section}:\n((?:      - .*\n)*)", text, re.M)
        if not m:
            raise ValueError(f"mkdocs.yml has no '  - {section}:' section in its nav; add {page_uri} by hand")
        text = text[:m.end()] + entry + text[m.end():]
    atomic.write_text(mkdocs_yml, text)


def title_problem(title: str) -> str | None:
    """Why the title is refused (the closed policy of TITLE_PUNCTUATION), or None."""
    if not title.strip():
        return "--title is empty"
    for c in title:
        category = unicodedata.category(c)
        if c in TITLE_PUNCTUATION or category[0] in "LN" or category in ("Mn", "Mc"):
            continue
        if category == "Cc":
            return "--title holds a newline or a control character; write it on one line"
        return (f"--title holds {ascii(c)} (U+{ord(c):04X}, {unicodedata.name(c, 'unnamed')}), which a title may "
                f"not: use letters, digits, spaces and {TITLE_PUNCTUATION.strip()}")
    if re.search(r"&#?\w+;", title):
        return "--title holds an HTML character reference (&...;): write the character itself"
    if len(title) > TITLE_MAX:
        return f"--title is {len(title)} characters long; keep it to {TITLE_MAX}"
    return None


def name_problems(topic: str, page: str, demo: str) -> str | None:
    """Why a name is refused, or None: closed patterns, since each becomes a path or a module."""
    def short(name: str) -> str:
        return ascii(name[:NAME_MAX] + ("..." if len(name) > NAME_MAX else ""))

    if not re.fullmatch(r"T[1-9][0-9]?", topic):
        return f"topic {short(topic)} is not a curriculum id like T3"
    if not (re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", page) and len(page) <= NAME_MAX):
        return f"page {short(page)}: use lowercase words joined by '-', at most {NAME_MAX} characters"
    if not (re.fullmatch(r"[a-z][a-z0-9_]*", demo) and len(demo) <= NAME_MAX) or keyword.iskeyword(demo):
        return (f"demo {short(demo)}: use lowercase letters, digits and '_', at most {NAME_MAX} characters, "
                "not a Python keyword (it becomes a module name)")
    return None


def title_values(title: str) -> dict:
    """The title as each file needs it: a YAML double-quoted scalar (JSON is valid YAML; written as UTF-8, since
    YAML reads JSON's \\u escapes one code unit at a time), a Python string literal, and Markdown text (one line,
    so it cannot open a block; # * _ escaped, so they stay text)."""
    return {"title_yaml": json.dumps(title, ensure_ascii=False), "title_py": repr(title),
            "title_md": re.sub(r"([#*_])", r"\\\1", title)}


def run_demo_once(module: str, demo: str) -> None:
    """The new demo's one run for its CPU record, in its own process group under a hard limit (regen's runner:
    on an exception, Ctrl-C or SIGTERM, the demo and whatever it started are killed before this returns)."""
    for attempt in (1, 2):  # a run refused as "machine busy" is measured once more, as regen does
        log = regen.new_log_path(CACHE_DIR / "scaffold", demo, "cpu")
        done = regen.run_with_deadline([sys.executable, "-u", "-m", module, "--device", "cpu"], log, DEMO_TIMEOUT_S,
                                       on_line=lambda line, _: print(f"  {line}", flush=True))
        busy = done.returncode != 0 and not done.timed_out and any(map(regen.refused_as_busy, done.last_lines))
        if attempt == 2 or not busy:
            break
        print(f"machine busy; measuring once more in {regen.BUSY_RETRY_S} s", flush=True)
        time.sleep(regen.BUSY_RETRY_S)
    if done.returncode != 0 or done.timed_out:
        last = done.last_lines[-1] if done.last_lines else "no output"
        raise RuntimeError(f"the new demo failed (exit {done.returncode}): {last} (log: {shown(log)})")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="scaffold", description="Create a topic page, its demo, test and CPU record.")
    parser.add_argument("topic", help="curriculum topic id, e.g. T10")
    parser.add_argument("page", help=f"page slug, e.g. benchmarking (docs/topics/<page>.md), at most {NAME_MAX}")
    parser.add_argument("demo", help=f"demo name, e.g. timing_discipline (letters, digits, _), at most {NAME_MAX}")
    parser.add_argument("--title", required=True, help=f"the page's title, at most {TITLE_MAX} characters")
    args = parser.parse_args(argv)
    problem = name_problems(args.topic, args.page, args.demo) or title_problem(args.title)
    if problem:
        fail(problem)
    if args.demo in catalog.discover():
        fail(f"a demo named {args.demo!r} exists already: {catalog.discover()[args.demo].path}")

    page = REPO_ROOT / "docs" / "topics" / f"{args.page}.md"
    topic_dir = REPO_ROOT / "demos" / f"t{args.topic[1:]}_{args.page.replace('-', '_')}"
    demo = topic_dir / f"{args.demo}.py"
    test = REPO_ROOT / "tests" / f"test_{args.demo}.py"
    record_dir = RESULTS_DIR / args.demo  # removed on failure: it must not hold anything measured before
    for path in (page, demo, test, record_dir):
        if path.exists():
            fail(f"{path.relative_to(REPO_ROOT)} exists already; nothing was created")
    mkdocs_yml = REPO_ROOT / "mkdocs.yml"
    nav_before = mkdocs_yml.read_text(encoding="utf-8")
    estimates = REPO_ROOT / "scripts" / "gpu_estimates.toml"  # the GPU campaign plans from a line per demo
    estimates_before = estimates.read_text(encoding="utf-8")
    if re.search(rf"^{args.demo}\s*=", estimates_before, re.M):  # a second line would break the campaign's TOML
        fail(f"scripts/gpu_estimates.toml has a line for {args.demo} already; nothing was created")
    module = ".".join(demo.relative_to(REPO_ROOT).with_suffix("").parts)
    values = {**title_values(args.title), "topic": args.topic, "demo": args.demo, "module": module}
    texts = {page: PAGE.format(**values), demo: DEMO.format(**values), test: TEST.format(**values)}
    compile(texts[demo], str(demo), "exec")  # a template bug must never leave a demo that cannot parse
    compile(texts[test], str(test), "exec")

    # All or nothing: every file is written, the nav extended and the demo run; on any failure, Ctrl-C or SIGTERM
    # (signals_raise turns it into SystemExit) everything created is removed and mkdocs.yml and the estimates
    # restored, so a failed scaffold leaves the repository as it was.
    created: list[Path] = [p for p in (page.parent, topic_dir, topic_dir / "__init__.py") if not p.exists()]
    with regen.signals_raise():
        try:
            page.parent.mkdir(parents=True, exist_ok=True)
            topic_dir.mkdir(parents=True, exist_ok=True)
            (topic_dir / "__init__.py").touch()
            for path, text in texts.items():
                created.append(path)
                path.write_text(text, encoding="utf-8")
                print(f"created {path.relative_to(REPO_ROOT)}")
            add_to_nav(mkdocs_yml, args.title, f"topics/{page.name}", demo.relative_to(REPO_ROOT).as_posix())
            atomic.write_text(estimates, estimates_before.rstrip("\n") + f"\n{args.demo} = 30  # TODO: its GPU time "
                              "at the full size (compiles, timed work, host work)\n")
            print("running the demo once for its CPU record ...")
            run_demo_once(module, args.demo)
        except BaseException as e:
            # a second Ctrl-C or SIGTERM must not stop the undo halfway
            handlers = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
            try:
                for path in reversed(created):
                    if path.is_dir():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
                shutil.rmtree(record_dir, ignore_errors=True)
                atomic.write_text(mkdocs_yml, nav_before)
                atomic.write_text(estimates, estimates_before)
            finally:
                for signum, handler in handlers.items():
                    signal.signal(signum, handler)
            if isinstance(e, KeyboardInterrupt):
                print("error: scaffold interrupted (Ctrl-C) and undone, nothing was left behind", file=sys.stderr)
                raise SystemExit(130) from None
            if isinstance(e, SystemExit) and e.code == 128 + signal.SIGTERM:
                print("error: scaffold stopped (SIGTERM) and undone, nothing was left behind", file=sys.stderr)
                raise
            fail(f"scaffold undone, nothing was left behind: {' '.join(str(e).split()) or type(e).__name__}")
    print("done: `make regen-stale` (the record gate reads every CPU record, so it follows the new one), then "
          "`make check` passes and lists the TODOs; write the answer, then `make serve`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
