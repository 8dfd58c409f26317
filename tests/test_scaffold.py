"""The scaffold creates page + demo + test + record that pass the check, with TODOs flagged."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture
def repo_copy(tmp_path):
    """The tools and the harness in a git repository of their own (records carry a commit), so the real
    repository stays clean and other topics' work in progress cannot interfere."""
    copy = tmp_path / "repo"
    skip = shutil.ignore_patterns("__pycache__", "topics", "results")
    for name in ("records", "website", "scripts", "docs", "overrides", "tests", "demos/harness", "demos/common",
                 "exercises"):
        shutil.copytree(REPO / name, copy / name, ignore=skip)
    for name in ("demos/__init__.py", "mkdocs.yml"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, copy / name)
    nav = (copy / "mkdocs.yml").read_text()  # the copy's nav lists only what the copy holds
    nav = "\n".join(line for line in nav.splitlines() if not re.match(r"\s+- .*: (topics|demos)/", line))
    (copy / "mkdocs.yml").write_text(nav + "\n")
    git = ["git", "-c", "user.email=test@example.com", "-c", "user.name=test"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "copy"]):
        subprocess.run([*git, *command], cwd=copy, check=True, capture_output=True)
    return copy


def run(copy, *args):
    return subprocess.run([sys.executable, "-m", *args], cwd=copy, capture_output=True, text=True)


def scaffold(copy, *args):
    """The scaffold, which measures its new demo for a CPU record. A machine that stays busy through the scaffold's
    second try is the environment, not the code: no test asserts a timing, so that case is a skip (the scaffold
    must still have undone everything), never a failure."""
    made = run(copy, "scripts.scaffold", *args)
    if made.returncode == 2 and "scaffold undone" in made.stderr and "machine busy:" in made.stderr:
        assert not (copy / "docs/topics" / f"{args[1]}.md").exists()
        pytest.skip(made.stderr.strip().splitlines()[-1])
    return made


def test_scaffold_then_check_passes_with_todos(repo_copy):
    made = scaffold(repo_copy, "T10", "benchmarking", "timing_discipline", "--title", "Benchmarking")
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    for path in ("docs/topics/benchmarking.md", "demos/t10_benchmarking/timing_discipline.py",
                 "tests/test_timing_discipline.py", "docs/results/timing_discipline/cpu.json"):
        assert (repo_copy / path).exists(), path
    nav = (repo_copy / "mkdocs.yml").read_text()
    assert "topics/benchmarking.md" in nav and "demos/t10_benchmarking/timing_discipline.py" in nav
    assert "\ntiming_discipline = " in (repo_copy / "scripts" / "gpu_estimates.toml").read_text()  # the campaign's plan

    checked = run(repo_copy, "scripts.check")
    assert checked.returncode == 0, checked.stderr
    todos = [line for line in checked.stdout.splitlines() if "TODO left to write" in line]
    for path in ("docs/topics/benchmarking.md", "demos/t10_benchmarking/timing_discipline.py",
                 "tests/test_timing_discipline.py"):  # every file, every line (the test's placeholder too)
        assert any(line.startswith(f"warning: {path}:") for line in todos), path
    assert len(todos) >= 8

    again = run(repo_copy, "scripts.scaffold", "T10", "benchmarking", "other_demo", "--title", "Again")
    assert again.returncode == 2 and "exists already" in again.stderr


def test_scaffold_refuses_bad_names(repo_copy):
    bad = run(repo_copy, "scripts.scaffold", "X1", "page", "demo", "--title", "T")
    assert bad.returncode == 2 and "not a curriculum id" in bad.stderr
    bad = run(repo_copy, "scripts.scaffold", "T1", "page", "Bad-Name", "--title", "T")
    assert bad.returncode == 2 and "use lowercase letters" in bad.stderr


def test_titles_with_yaml_python_and_markdown_syntax_make_valid_files(repo_copy):
    title = 'Softmax: "stable" # or not'
    made = scaffold(repo_copy, "T12", "softmax", "stable_softmax", "--title", title)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    checked = run(repo_copy, "scripts.check")
    assert checked.returncode == 0, checked.stderr
    page = (repo_copy / "docs/topics/softmax.md").read_text()
    assert yaml.safe_load(page.split("---")[1])["title"] == title


def test_a_failing_scaffold_leaves_nothing_behind(repo_copy):
    nav_before = (repo_copy / "mkdocs.yml").read_text()
    bad = run(repo_copy, "scripts.scaffold", "T12", "softmax", "stable_softmax", "--title", "line\nbreak")
    assert bad.returncode == 2 and "one line" in bad.stderr
    # a demo that fails when run: the scaffold is undone, files, folder and nav entry
    (repo_copy / "demos/harness/run.py").write_text("raise SystemExit(3)\n")
    failed = run(repo_copy, "scripts.scaffold", "T12", "softmax", "stable_softmax", "--title", "Softmax")
    assert failed.returncode == 2 and "scaffold undone" in failed.stderr
    assert not (repo_copy / "docs/topics/softmax.md").exists()
    assert not (repo_copy / "demos/t12_softmax").exists()
    assert not (repo_copy / "tests/test_stable_softmax.py").exists()
    assert (repo_copy / "mkdocs.yml").read_text() == nav_before
