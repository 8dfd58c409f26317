"""Shared test helpers: a valid record to mutate, and the repository's paths."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

if TYPE_CHECKING:
    from records.record import Record

REPO = Path(__file__).resolve().parents[1]

# Generated-input tests (hypothesis) are deterministic by default, so CI never fails on a case that a
# different random draw would have missed; `HYPOTHESIS_PROFILE=explore` draws new random cases (and keeps
# the failing ones under .cache/) when you go looking for bugs.
settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", database=DirectoryBasedExampleDatabase(str(REPO / ".cache" / "hypothesis")),
                          print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

# Without a GPU, Triton runs in its interpreter; Triton reads this when it is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _a_commit_of_this_history() -> str:
    """The repository's first commit (the check refuses a record whose commit is not in the history); a copy
    without .git (the GPU machine) cannot check, and any 40 hex digits do."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-list", "--max-parents=0", "HEAD"], capture_output=True,
                             text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        out = []
    return out[-1] if out else "0123456789abcdef0123456789abcdef01234567"


HISTORY_COMMIT = _a_commit_of_this_history()


def make_record(**overrides) -> "Record":
    """The one record factory for tests: a small, valid record (as a demo would write it), as the typed
    Record the scripts read (a dict, so a test can still break any field). ``device_class`` also sets
    the provenance's class, so the record stays valid."""
    from records.record import Record

    rec = {
        "schema": 1,
        "demo": "kernel_fusion",
        "module": "demos.t3_compiler.kernel_fusion",
        "title": "Kernel fusion",
        "device_class": "cpu",
        "size": "small",
        "source_digest": "sha256:" + "0" * 64,
        "source_files": ["demos/t3_compiler/kernel_fusion.py"],
        "metrics": {
            "chain.eager.gbps": {"value": 10.0, "unit": "GB/s", "ceiling": "copy_bandwidth", "fraction_of_ceiling": 0.5},
            "chain.compiled.speedup_largest": {"value": 1.8, "unit": "x", "label": "compiled over eager"},
        },
        "tables": [{"name": "chain", "title": "chain (float32)", "columns": ["variant", "GB/s"],
                    "rows": [["eager", 10.0], ["compiled", 18.0]]}],
        "series": [{"name": "chain", "title": "chain bandwidth", "x_label": "MB", "y_label": "GB/s",
                    "x_log": True, "y_log": False,
                    "lines": [{"label": "eager", "x": [1.0, 2.0], "y": [5.0, 10.0]}],
                    "hlines": [{"label": "copy", "y": 20.0}]}],
        "checks": [{"name": "chain.eager", "passed": True, "detail": "max |err| 1e-7"}],
        "not_run": [{"variant": "triton (timing)", "reason": "no GPU"}],
        "artifacts": {},
        "ceilings": {"copy_bandwidth": {"value": 20.0, "unit": "GB/s", "how": "copy"}},
        "settings": {},
        "provenance": {"device_name": "Test CPU", "device_class": "cpu", "device_kind": "cpu", "utc": "2026-11-21T00:00:00Z",
                       "python": "3.11.7", "packages": {"torch": "2.13.0"}, "commit": HISTORY_COMMIT, "dirty": False},
        "wall_time_s": 1.0,
    }
    rec = copy.deepcopy(rec)
    rec.update(overrides)
    if "device_class" in overrides:
        rec["provenance"]["device_class"] = overrides["device_class"]
        rec["provenance"]["device_kind"] = "cpu" if overrides["device_class"] == "cpu" else "cuda"
    return Record(rec)


TOPIC = """---
title: Test topic
difficulty: medium
tags: [test]
demos: [kernel_fusion]
cheat: |
  - Bytes over time.
  - Pitfall: timing without a sync.
---

# Test topic

## Questions
- Why? (easy)

## Answers
### Why?
Because.

??? abstract "Full answer"
    Long answer.

## Measured
{{ results kernel_fusion }}

CLAIM

## Follow-up questions
??? question "And then?"
    Then this.

## Pitfalls
- Saying so.

## Further reading
- A paper.
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A results folder with a fresh CPU record of the real kernel-fusion demo (the only demo the
    check sees here), and a docs folder with one topic."""
    from records import catalog
    from scripts import check

    results, docs = tmp_path / "results", tmp_path / "docs"
    (docs / "topics").mkdir(parents=True)
    fusion = catalog.discover()["kernel_fusion"]
    monkeypatch.setattr(check.catalog, "discover", lambda: {"kernel_fusion": fusion})
    digest = fusion.digest("cpu")
    write_record(results, make_record(source_digest=digest))

    def run(claim: str = "", page: str | None = None) -> tuple[int, str]:
        (docs / "topics" / "t.md").write_text((page or TOPIC).replace("CLAIM", claim))
        return check.main(["--results-dir", str(results), "--docs-dir", str(docs)]), ""

    run.results, run.docs, run.digest = results, docs, digest
    return run


def write_record(results_dir: Path, rec: dict) -> Path:
    path = results_dir / rec["demo"] / f"{rec['device_class']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return path


@pytest.fixture
def record_factory():
    return make_record


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The site built once per test session with `mkdocs build --strict`: (folder, seconds)."""
    site = tmp_path_factory.mktemp("site")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return site, time.perf_counter() - started


def run_demo(module: str, results_dir: Path, *extra: str, size: str = "tiny", timeout: float = 600,
             launcher: list[str] | None = None, env: dict | None = None) -> dict:
    """Run ``python -m module --device cpu --size tiny`` (or under ``launcher``, e.g. torchrun) and return
    its record. The demo runs in its own process group, and the whole group is killed afterwards, so
    no rank it forked outlives the test, whatever happened."""
    from records import record
    from scripts.regen import run_with_deadline  # regen's runner: own process group, hard deadline, group killed

    command = (launcher or [sys.executable, "-m"]) + [module, "--device", "cpu", "--size", size,
                                                      "--results-dir", str(results_dir), *extra]
    demo = module.rsplit(".", 1)[-1]
    log = Path(results_dir) / f"{demo}.log"
    done = run_with_deadline(command, log, timeout, env)
    assert done.returncode == 0 and not done.timed_out, log.read_text(errors="replace")[-5000:]
    return record.load(results_dir / demo / "cpu.json")


def demo_record(module: str, *extra: str, size: str = "tiny", **kwargs):
    """The one fixture factory for demo tests: ``tiny = demo_record("demos.t3_compiler.kernel_fusion")`` in a
    test module gives a module-scoped fixture ``tiny``, the record of one run of the demo (through run_demo)."""

    @pytest.fixture(scope="module")
    def _record(tmp_path_factory):
        return run_demo(module, tmp_path_factory.mktemp("results"), *extra, size=size, **kwargs)

    return _record


def metric(rec: dict, name: str) -> float:
    """A metric's value in a record."""
    return rec["metrics"][name]["value"]


def checks_by_name(rec: dict) -> dict[str, dict]:
    return {c["name"]: c for c in rec["checks"]}


CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium, headless, driven by Playwright (never a browser download). Skipped when it is
    not installed, except in CI, where that is a failure."""
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} not found: install Debian's chromium package (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield browser
        browser.close()


def set_field(page, element_id: str, value) -> None:
    """Set a form field by id: a checkbox (bool), a select (option value) or an input (typed text)."""
    element = page.locator(f"#{element_id}")
    if isinstance(value, bool):
        element.set_checked(value)
    elif element.evaluate("e => e.tagName") == "SELECT":
        element.select_option(str(value))
    else:
        element.fill(str(value))
