"""Start a new topic: `python -m scripts.scaffold T10 benchmarking timing_discipline --title "..."`.

Creates, from templates that already pass the check:
- docs/topics/<page>.md        the page, every required section, TODO where the answer goes
- demos/t<N>_<page>/<demo>.py  a working demo on the harness (a placeholder measurement, TODO)
- tests/test_<demo>.py         a test that runs the demo at --size tiny
- docs/results/<demo>/cpu.json the CPU record, made by running the demo once
and adds the page and the notebook to mkdocs.yml's nav. `make check` then passes and lists the
TODOs left to write.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from records.errors import OneLineParser, fail
from records.paths import REPO_ROOT, RESULTS_DIR
from records import catalog

PAGE = '''---
title: {title_yaml}
difficulty: medium
tags: [TODO-area]
topic: {topic}
demos: [{demo}]
---

# {title_md}

## Questions

- TODO: the question as an interviewer asks it? (medium)

## 30-second answer

**TODO: the question as an interviewer asks it?** TODO: at most 90 words, what you would say first:
the scope in one sentence, the mechanism, the trade-off and its failure mode, and one measured number
through a marker.

## Full answer

??? abstract "Full model answer (try answering first)"

    TODO: the full answer, in your own words, with the numbers taken from the records below
    through markers, never typed.

## Measured

TODO: one or two sentences on what the demo measures.

{{{{ results {demo} }}}}

TODO: what the numbers say, quoting them with `{{{{ metric {demo} NAME @cpu }}}}` and stating checked
claims with `{{{{ claim {demo} @cpu NAME > NUMBER }}}}`.

## Follow-up questions

??? question "TODO: a likely follow-up question?"
    TODO: its short answer.

## Pitfalls

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
    for section, entry in (("Topics", f"      - {json.dumps(title)}: {page_uri}\n"),
                           ("Demo notebooks", f"      - {Path(demo_uri).name!r}: {demo_uri}\n")):
        m = re.search(rf"^  - {section}:\n((?:      - .*\n)*)", text, re.M)
        if not m:
            fail(f"mkdocs.yml has no '  - {section}:' section in its nav; add {page_uri} by hand")
        text = text[:m.end()] + entry + text[m.end():]
    mkdocs_yml.write_text(text, encoding="utf-8")


def refuse_bad_title(title: str) -> None:
    if not title.strip():
        fail("--title is empty")
    if any(ord(c) < 32 for c in title):
        fail("--title holds a newline or a control character; write it on one line")
    if len(title) > 120:
        fail(f"--title is {len(title)} characters long; keep it under 120")


def title_values(title: str) -> dict:
    """The title as each file needs it: a YAML double-quoted scalar (JSON is valid YAML), a Python string
    literal, and Markdown text (one line, so it cannot open a block)."""
    return {"title_yaml": json.dumps(title), "title_py": repr(title), "title_md": title}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="scaffold", description="Create a topic page, its demo, test and CPU record.")
    parser.add_argument("topic", help="curriculum topic id, e.g. T10")
    parser.add_argument("page", help="page slug, e.g. benchmarking (docs/topics/<page>.md)")
    parser.add_argument("demo", help="demo name, e.g. timing_discipline (letters, digits, _)")
    parser.add_argument("--title", required=True)
    args = parser.parse_args(argv)
    if not re.fullmatch(r"T\d+", args.topic):
        fail(f"topic {args.topic!r} is not a curriculum id like T3")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", args.page):
        fail(f"page {args.page!r}: use lowercase words joined by '-'")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", args.demo):
        fail(f"demo {args.demo!r}: use lowercase letters, digits and '_' (it becomes a module name)")
    if args.demo in catalog.discover():
        fail(f"a demo named {args.demo!r} exists already: {catalog.discover()[args.demo].path}")

    page = REPO_ROOT / "docs" / "topics" / f"{args.page}.md"
    topic_dir = REPO_ROOT / "demos" / f"t{args.topic[1:]}_{args.page.replace('-', '_')}"
    demo = topic_dir / f"{args.demo}.py"
    test = REPO_ROOT / "tests" / f"test_{args.demo}.py"
    for path in (page, demo, test):
        if path.exists():
            fail(f"{path.relative_to(REPO_ROOT)} exists already; nothing was created")
    module = ".".join(demo.relative_to(REPO_ROOT).with_suffix("").parts)
    refuse_bad_title(args.title)
    values = {**title_values(args.title), "topic": args.topic, "demo": args.demo, "module": module}
    texts = {page: PAGE.format(**values), demo: DEMO.format(**values), test: TEST.format(**values)}
    compile(texts[demo], str(demo), "exec")  # a template bug must never leave a demo that cannot parse
    compile(texts[test], str(test), "exec")

    # All or nothing: every file is written, the nav extended and the demo run; on any failure everything
    # created is removed and mkdocs.yml restored, so a failed scaffold leaves the repository as it was.
    mkdocs_yml = REPO_ROOT / "mkdocs.yml"
    nav_before = mkdocs_yml.read_text(encoding="utf-8")
    estimates = REPO_ROOT / "scripts" / "gpu_estimates.toml"  # the GPU campaign plans from a line per demo
    estimates_before = estimates.read_text(encoding="utf-8")
    created: list[Path] = [p for p in (page.parent, topic_dir, topic_dir / "__init__.py") if not p.exists()]
    record_dir = RESULTS_DIR / args.demo
    try:
        page.parent.mkdir(parents=True, exist_ok=True)
        topic_dir.mkdir(parents=True, exist_ok=True)
        (topic_dir / "__init__.py").touch()
        for path, text in texts.items():
            path.write_text(text, encoding="utf-8")
            created.append(path)
            print(f"created {path.relative_to(REPO_ROOT)}")
        add_to_nav(mkdocs_yml, args.title, f"topics/{page.name}", demo.relative_to(REPO_ROOT).as_posix())
        estimates.write_text(estimates_before.rstrip("\n") + f"\n{args.demo} = 30  # TODO: its GPU time at the full "
                             "size (compiles, timed work, host work)\n", encoding="utf-8")
        print("running the demo once for its CPU record ...")
        proc = subprocess.run([sys.executable, "-m", module, "--device", "cpu"], cwd=REPO_ROOT)
        if proc.returncode != 0:
            raise RuntimeError(f"the new demo failed (exit {proc.returncode})")
    except BaseException as e:
        for path in reversed(created):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        shutil.rmtree(record_dir, ignore_errors=True)
        mkdocs_yml.write_text(nav_before, encoding="utf-8")
        estimates.write_text(estimates_before, encoding="utf-8")
        if isinstance(e, KeyboardInterrupt):
            raise
        fail(f"scaffold undone, nothing was left behind: {e}")
    print("done: `make regen-stale` (the record gate reads every CPU record, so it follows the new one), then "
          "`make check` passes and lists the TODOs; write the answer, then `make serve`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
