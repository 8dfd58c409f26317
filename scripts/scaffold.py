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

import re
import subprocess
import sys
from pathlib import Path

from demos.harness.errors import OneLineParser, fail
from demos.harness.paths import REPO_ROOT
from scripts import catalog

PAGE = '''---
title: {title}
difficulty: medium
tags: [TODO-area]
topic: {topic}
demos: [{demo}]
---

# {title}

## Questions

- TODO: the question as an interviewer asks it? (medium)

## 30-second answer

- TODO: scope in one sentence (training or inference? one GPU or many? latency or throughput?).
- TODO: the layers or boundaries, and what is gained or lost at each.
- TODO: the trade-off and the failure mode.
- TODO: what to measure, and what the demo below measured.

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
# # {title}
#
# TODO: the idea in two lines.

# %%
import torch

from demos.harness.run import start

run = start("{demo}", title="{title}", sizes={{"tiny": 2**10, "small": 2**20, "full": 2**26}})
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
run.metric("candidate.gbps", moved / timing.median_s / 1e9, "GB/s", ceiling="copy_bandwidth",
           label="TODO: effective bandwidth of the placeholder")
run.save()
'''

TEST = '''"""{title}: the demo runs at the tiny size, its checks pass and its metrics are there."""

import subprocess
import sys

import pytest

from conftest import REPO
from demos.harness import record

pytestmark = pytest.mark.slow


def test_{demo}_runs_and_checks_pass(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "{module}", "--device", "cpu", "--size", "tiny",
                           "--results-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rec = record.load(tmp_path / "{demo}" / "cpu.json")
    assert rec["checks"] and all(c["passed"] for c in rec["checks"])
    assert rec["metrics"]["candidate.median_us"]["value"] > 0  # TODO: assert on this topic's own results
'''


def add_to_nav(mkdocs_yml: Path, title: str, page_uri: str, demo_uri: str) -> None:
    text = mkdocs_yml.read_text(encoding="utf-8")
    for section, entry in (("Topics", f"      - {title!r}: {page_uri}\n"),
                           ("Demo notebooks", f"      - {Path(demo_uri).name!r}: {demo_uri}\n")):
        m = re.search(rf"^  - {section}:\n((?:      - .*\n)*)", text, re.M)
        if not m:
            fail(f"mkdocs.yml has no '  - {section}:' section in its nav; add {page_uri} by hand")
        text = text[:m.end()] + entry + text[m.end():]
    mkdocs_yml.write_text(text, encoding="utf-8")


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
    values = {"title": args.title, "topic": args.topic, "demo": args.demo, "module": module}

    topic_dir.mkdir(parents=True, exist_ok=True)
    (topic_dir / "__init__.py").touch()
    page.write_text(PAGE.format(**values), encoding="utf-8")
    demo.write_text(DEMO.format(**values), encoding="utf-8")
    test.write_text(TEST.format(**values), encoding="utf-8")
    add_to_nav(REPO_ROOT / "mkdocs.yml", args.title, f"topics/{page.name}", demo.relative_to(REPO_ROOT).as_posix())
    for path in (page, demo, test):
        print(f"created {path.relative_to(REPO_ROOT)}")

    print("running the demo once for its CPU record ...")
    proc = subprocess.run([sys.executable, "-m", module, "--device", "cpu"], cwd=REPO_ROOT)
    if proc.returncode != 0:
        fail(f"the new demo failed (exit {proc.returncode}); fix {demo.relative_to(REPO_ROOT)} and run "
             f"`python -m scripts.regen {args.demo}`")
    print("done: `make check` passes and lists the TODOs; write the answer, then `make serve`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
