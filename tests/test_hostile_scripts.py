"""Hostile input to the scripts (issue 31, items 2, 6 and 10): the scaffold, a demo's options, regen and the GPU
campaign. Each bad input is refused in one line (exit 2) before any work, or an interruption is one line and
loses nothing; nothing is left behind and no process outlives its run.

The scaffold runs in a copy of the repository (test_scaffold's fixture); a demo is only ever run here with
options it refuses, so docs/results of this repository is never written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from demos.harness import cli
from scripts import gpu_campaign, regen
from test_regen import _alive, _wait_for
from test_scaffold import repo_copy  # noqa: F401 (a fixture: the tools in a git repository of their own)

PAYLOAD = '<img src=x onerror="window.__pwned=3">'


def run(cwd, *args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=timeout)


def one_line_error(proc_or_err, expected: str) -> None:
    err = proc_or_err if isinstance(proc_or_err, str) else proc_or_err.stderr
    assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def left_behind(copy: Path) -> list[str]:
    """What git sees changed in the copy, but for .cache/ (logs; the copy has no .gitignore)."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=copy, capture_output=True,
                            text=True, check=True).stdout
    return [line for line in status.splitlines() if not line[3:].startswith(".cache/")]


# -- scaffold: names and titles refused up front (items 2 and 6) --------------------------------------------
BAD_SCAFFOLDS = [
    (["T10", "hostile-a", "demo_a", "--title", PAYLOAD], "--title holds '<'"),  # once in the nav of every page
    (["T10", "hostile-a", "demo_a", "--title", "Speed \U0001f680 up"], "(U+1F680, ROCKET)"),  # once a crash in YAML
    (["T10", "hostile-a", "demo_a", "--title", "A {{ results kernel_fusion }}"], "--title holds '{'"),  # practice mode
    (["T10", "hostile-a", "demo_a", "--title", 'Heading {: onclick="x" }'], "--title holds '{'"),  # attr_list
    (["T10", "hostile-a", "demo_a", "--title", "[x](javascript:alert(1))"], "--title holds '['"),
    (["T10", "hostile-a", "demo_a", "--title", "`code`"], "--title holds '`'"),
    (["T10", "hostile-a", "demo_a", "--title", "&lt;script&gt;"], "HTML character reference"),
    (["T10", "hostile-a", "demo_a", "--title", "tab\there"], "one line"),
    (["T10", "hostile-a", "demo_a", "--title", "right\u202eto left"], "(U+202E"),  # invisible, reorders the text
    (["T10", "hostile-a", "demo_a", "--title", "lone \udcff surrogate"], "(U+DCFF"),  # an undecodable byte in argv
    (["T10", "hostile-a", "demo_a", "--title", "x" * 300], "--title is 300 characters long; keep it to 80"),
    (["T10", "hostile-a", "demo_a", "--title", "   "], "--title is empty"),
    (["T10", "hostile-a", "d" * 300, "--title", "T"], "at most 40 characters"),  # once: File name too long
    (["T10", "p" * 300, "demo_a", "--title", "T"], "at most 40 characters"),
    (["T10", "hostile-a", "class", "--title", "T"], "not a Python keyword"),
    (["T1000", "hostile-a", "demo_a", "--title", "T"], "not a curriculum id"),
]


@pytest.mark.slow
def test_a_hostile_name_or_title_is_one_line_and_creates_nothing(repo_copy):
    for args, expected in BAD_SCAFFOLDS:
        proc = run(repo_copy, "scripts.scaffold", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        one_line_error(proc, expected)
        assert not left_behind(repo_copy), (args, left_behind(repo_copy))


def test_a_title_lands_as_valid_yaml_python_and_markdown_text():
    from scripts.scaffold import title_problem, title_values

    title = 'Café: naïve & C# — 50% "fast", _x_'
    assert title_problem(title) is None
    values = title_values(title)
    assert yaml.safe_load(f"title: {values['title_yaml']}")["title"] == title  # UTF-8, not JSON's \u escapes
    assert eval(values["title_py"]) == title
    assert values["title_md"] == 'Café: naïve & C\\# — 50% "fast", \\_x\\_'  # Markdown punctuation stays text


# A harness that measures nothing: the title's way into the site does not depend on the machine being quiet
# (the page then says its demo is not measured yet).
IDLE_HARNESS = """
class Timing:
    median_s = 1.0
class Run:
    torch_device, sizes = "cpu", 8
    def check_close(self, *args, **kwargs): pass
    def time(self, fn): return Timing()
    def metric(self, *args, **kwargs): pass
    def cache_resident(self, nbytes): return False
    def save(self): pass
def start(*args, **kwargs):
    return Run()
"""


@pytest.mark.slow
def test_an_accepted_title_with_accents_and_punctuation_builds_into_the_site(repo_copy, tmp_path):
    title = 'Café: naïve & C# — 50% "fast" 𝐀𠀀'  # letters beyond the BMP too (an emoji is refused)
    (repo_copy / "demos/harness/run.py").write_text(IDLE_HARNESS)
    made = run(repo_copy, "scripts.scaffold", "T12", "softmax", "stable_softmax", "--title", title)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    page = (repo_copy / "docs/topics/softmax.md").read_text(encoding="utf-8")
    assert yaml.safe_load(page.split("---")[1])["title"] == title
    nav = (repo_copy / "mkdocs.yml").read_text(encoding="utf-8")
    assert f"      - {json.dumps(title, ensure_ascii=False)}: topics/softmax.md\n" in nav
    site = tmp_path / "site"
    # not --strict: the copy has no other topics, so the pages that link to them warn
    built = run(repo_copy, "mkdocs", "build", "--no-strict", "--site-dir", str(site),
                env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-4000:]
    ours = [line for line in built.stderr.splitlines() if "WARNING" in line and ("'topics/softmax.md'" in line
                                                                                 or "stable_softmax" in line)]
    assert not ours, ours
    html = (site / "topics" / "softmax" / "index.html").read_text(encoding="utf-8")
    assert ("Café: naïve &amp; C# — 50% &quot;fast&quot; 𝐀𠀀" in html
            or 'Café: naïve &amp; C# — 50% "fast" 𝐀𠀀' in html)
    assert "Café: naïve" in (site / "index.html").read_text(encoding="utf-8")  # the nav of every page


# -- scaffold: all or nothing under SIGTERM and Ctrl-C (item 6) -----------------------------------------------
STALLING_HARNESS = """
import os, pathlib, time
def start(demo, **kwargs):
    folder = pathlib.Path("docs/results") / demo
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".cpu.json.half.tmp").write_text("half a record")  # as if stopped in the middle of its write
    pathlib.Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(300)
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum, code, said", [(signal.SIGTERM, 143, "stopped (SIGTERM)"),
                                                (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_a_signal_during_the_scaffolds_demo_run_undoes_everything(repo_copy, tmp_path, signum, code, said):
    (repo_copy / "demos/harness/run.py").write_text(STALLING_HARNESS)
    git = ["git", "-c", "user.email=test@example.com", "-c", "user.name=test"]
    subprocess.run([*git, "commit", "-qam", "a harness that stalls"], cwd=repo_copy, check=True)
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, "-m", "scripts.scaffold", "T12", "softmax", "stable_softmax", "--title",
                             "Softmax"], cwd=repo_copy, env={**os.environ, "PID_FILE": str(pid_file)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120), "the demo never started"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code
    one_line_error(err, f"scaffold {said} and undone, nothing was left behind")
    assert not left_behind(repo_copy), left_behind(repo_copy)  # page, demo, test, record folder, nav, estimates
    assert _wait_for(lambda: not _alive(int(pid_file.read_text())), 10), "the demo must not outlive the scaffold"


# -- a demo's options (item 10) ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["--results-dir", ""], "--results-dir is empty"),  # once: the current folder
    (["--results-dir", " "], "--results-dir is empty"),
    (["--results-dir", "/proc/mlsm-results"], "cannot be written"),  # os.access says yes to root
    (["--size", "tiny", "--results-dir", str(REPO / "docs" / "results")], "--size tiny is a smoke run"),
    (["--size", "tiny", "--results-dir", str(REPO / "docs" / "results" / "x")], "may not write under docs"),
    (["--size", "tiny", "--results-dir", str(REPO / "docs" / "other")], "may not write under docs"),  # also published
    (["--size", "tiny", "--results-dir", str(REPO / "docs" / "results\n")], "may not write under docs"),
])
def test_a_bad_results_dir_is_refused_before_any_work(args, expected, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_options("kernel_fusion", ["--device", "cpu", *args])
    assert e.value.code == 2
    one_line_error(capsys.readouterr().err, expected)


def test_the_results_dir_is_tried_and_the_trial_leaves_nothing(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert "is a file, not a folder" in cli.writable_dir(tmp_path / "file" / "below")
    assert cli.writable_dir(tmp_path / "new" / "deeper") is None
    assert not (tmp_path / "new").exists(), "the trial removes the folders it made"
    (tmp_path / "taken" / "kernel_fusion").parent.mkdir()
    (tmp_path / "taken" / "kernel_fusion").write_text("a file where the demo's folder goes")
    with pytest.raises(SystemExit):
        cli.parse_options("kernel_fusion", ["--results-dir", str(tmp_path / "taken")])
    one_line_error(capsys.readouterr().err, "kernel_fusion is a file, not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_results_dir_is_refused(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    try:
        with pytest.raises(SystemExit):
            cli.parse_options("kernel_fusion", ["--results-dir", str(folder)])
    finally:
        folder.chmod(0o700)
    one_line_error(capsys.readouterr().err, "cannot be written")


@pytest.mark.slow
@pytest.mark.parametrize("args, expected", [
    (["--size", "tiny"], "--size tiny is a smoke run, never published"),  # once replaced the committed record
    (["--results-dir", "FOLDER"], "cpu.json is not a file"),  # the record's path is a folder: refused before the run
])
def test_a_demo_refuses_a_record_it_could_not_write_or_must_not_publish(args, expected, tmp_path):
    (tmp_path / "kernel_fusion" / "cpu.json").mkdir(parents=True)
    committed = REPO / "docs" / "results" / "kernel_fusion" / "cpu.json"
    before = committed.read_bytes()
    args = [str(tmp_path) if a == "FOLDER" else a for a in args]
    proc = run(REPO, "demos.t3_compiler.kernel_fusion", "--device", "cpu", *args, timeout=300)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    one_line_error(proc, expected)
    assert "measuring this machine's ceilings" not in proc.stdout  # refused before any work
    assert committed.read_bytes() == before


# -- regen (item 10) --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["--timeout", "nan"], "argument --timeout: nan: expected a finite number of seconds above 0"),  # never fired
    (["--timeout", "inf"], "argument --timeout: inf: expected"),
    (["--timeout", "0"], "argument --timeout: 0: expected"),
    (["--timeout=-1"], "argument --timeout: -1: expected"),
    (["--timeout", "soon"], "argument --timeout: invalid seconds value: 'soon'"),
    (["--results-dir", ""], "--results-dir is empty"),
    (["--size", "tiny"], "--size tiny is a smoke run"),  # regen passes docs/results to every demo
])
def test_regen_refuses_a_bad_option_up_front(args, expected, capsys):
    with pytest.raises(SystemExit) as e:
        regen.main(["kernel_fusion", *args])
    assert e.value.code == 2
    one_line_error(capsys.readouterr().err, expected)


def test_the_deadline_runner_refuses_a_deadline_that_never_fires(tmp_path):
    for timeout in (float("nan"), float("inf"), 0, -1):
        with pytest.raises(ValueError, match="finite number of seconds above 0"):
            regen.run_with_deadline([sys.executable, "-c", "pass"], tmp_path / "log", timeout)


SETSID_DEMO = """
import argparse, os, pathlib, subprocess, sys, time
p = argparse.ArgumentParser(); p.add_argument("--device"); p.add_argument("--results-dir"); p.add_argument("--size")
a = p.parse_args()
# a worker that leaves the demo's process group (and session), so killing the group misses it
worker = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(300)"])
pathlib.Path(os.environ["PID_FILE"]).write_text(f"{os.getpid()} {worker.pid}")
if os.environ["DEMO_ENDS"] == "never":
    time.sleep(300)
print("done; the worker is left behind")
"""


def _setsid_demo(tmp_path, ends: str) -> tuple[list[str], dict]:
    pkg = tmp_path / "fakedemos" / "topic"
    pkg.mkdir(parents=True)
    for init in (tmp_path / "fakedemos" / "__init__.py", pkg / "__init__.py"):
        init.write_text("")
    (pkg / "setsid_demo.py").write_text(SETSID_DEMO)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "PID_FILE": str(tmp_path / "pids"),
           "DEMO_ENDS": ends}
    command = [sys.executable, "-m", "scripts.regen", "setsid_demo", "--demos-dir", str(tmp_path / "fakedemos"),
               "--results-dir", str(tmp_path / "results")]
    return command, env


def _kill_leftovers(pid_file: Path) -> None:
    for pid in pid_file.read_text().split() if pid_file.exists() else []:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("ends, timeout, status", [("never", "3", 1), ("at_once", "120", 0)])
def test_a_worker_that_left_the_group_with_setsid_is_killed_too(tmp_path, ends, timeout, status):
    command, env = _setsid_demo(tmp_path, ends)
    try:
        proc = subprocess.run([*command, "--timeout", timeout], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == status, proc.stdout[-2000:] + proc.stderr[-2000:]
        demo_pid, worker_pid = (int(p) for p in (tmp_path / "pids").read_text().split())
        assert _wait_for(lambda: not _alive(demo_pid) and not _alive(worker_pid), 10), "no worker may outlive regen"
    finally:
        _kill_leftovers(tmp_path / "pids")


def test_ctrl_c_to_regen_is_one_line_kills_the_demo_and_keeps_what_was_written(tmp_path):
    command, env = _setsid_demo(tmp_path, "never")
    proc = subprocess.Popen([*command, "--timeout", "300"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: (tmp_path / "pids").exists() and len((tmp_path / "pids").read_text().split()) == 2, 60)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130
        one_line_error(err, "regen: interrupted (Ctrl-C) while setsid_demo ran; the 0 record(s) already written "
                            "are kept")
        demo_pid, worker_pid = (int(p) for p in (tmp_path / "pids").read_text().split())
        assert _wait_for(lambda: not _alive(demo_pid) and not _alive(worker_pid), 10)
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_leftovers(tmp_path / "pids")


# -- the GPU campaign (item 10) ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["--budget-min", "nan"], "--budget-min nan"),
    (["--budget-min", "-5"], "--budget-min -5"),
    (["--budget-min", "0"], "--budget-min 0"),
    (["--budget-min", "inf"], "--budget-min inf"),
    (["--demo-limit-s", "nan"], "argument --demo-limit-s: nan: expected a finite number of seconds above 0"),
    (["--demo-limit-s=-1"], "argument --demo-limit-s: -1: expected"),
])
def test_the_campaign_refuses_a_budget_or_limit_that_is_no_positive_number(args, expected, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_campaign.main(["--plan", *args])
    assert e.value.code == 2
    one_line_error(capsys.readouterr().err, expected)
