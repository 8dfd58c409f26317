"""The scaffold creates page + demo + test + record that pass the check, with TODOs flagged."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture
def repo_copy(tmp_path):
    """The tools, the harness and one finished topic (kernel fusion), copied so the real repository
    stays clean and other topics' work in progress cannot interfere."""
    copy = tmp_path / "repo"
    skip = shutil.ignore_patterns("__pycache__", "topics", "results")
    for name in ("scripts", "docs", "tests", "demos/harness"):
        shutil.copytree(REPO / name, copy / name, ignore=skip)
    for name in ("demos/__init__.py", "demos/t3_compiler/__init__.py", "demos/t3_compiler/kernel_fusion.py",
                 "docs/topics/kernel-fusion.md", "docs/results/kernel_fusion/cpu.json", "mkdocs.yml"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, copy / name)
    return copy


def run(copy, *args):
    return subprocess.run([sys.executable, "-m", *args], cwd=copy, capture_output=True, text=True)


def test_scaffold_then_check_passes_with_todos(repo_copy):
    made = run(repo_copy, "scripts.scaffold", "T10", "benchmarking", "timing_discipline", "--title", "Benchmarking")
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    for path in ("docs/topics/benchmarking.md", "demos/t10_benchmarking/timing_discipline.py",
                 "tests/test_timing_discipline.py", "docs/results/timing_discipline/cpu.json"):
        assert (repo_copy / path).exists(), path
    nav = (repo_copy / "mkdocs.yml").read_text()
    assert "topics/benchmarking.md" in nav and "demos/t10_benchmarking/timing_discipline.py" in nav

    checked = run(repo_copy, "scripts.check")
    assert checked.returncode == 0, checked.stderr
    assert "docs/topics/benchmarking.md" in checked.stdout and "TODO marker(s) left to write" in checked.stdout

    again = run(repo_copy, "scripts.scaffold", "T10", "benchmarking", "other_demo", "--title", "Again")
    assert again.returncode == 2 and "exists already" in again.stderr


def test_scaffold_refuses_bad_names(repo_copy):
    bad = run(repo_copy, "scripts.scaffold", "X1", "page", "demo", "--title", "T")
    assert bad.returncode == 2 and "not a curriculum id" in bad.stderr
    bad = run(repo_copy, "scripts.scaffold", "T1", "page", "Bad-Name", "--title", "T")
    assert bad.returncode == 2 and "use lowercase letters" in bad.stderr
